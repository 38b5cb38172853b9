"""Five Pallas TPU kernels (and two fault demonstrations) run in TPU interpret
mode on the CPU, as independent references for tk_call.

Every public function takes numpy arrays (float32 or ml_dtypes.bfloat16) and
returns numpy arrays.  Kernels run through ``pltpu.InterpretParams`` (the TPU
interpreter: HBM/VMEM buffers, per-block copies, output revisit check), not the
generic ``interpret=True``.

Tails: every operand is zero-padded up to a multiple of its block on every axis
and the result is cropped.  This is required, not cosmetic: the TPU
interpreter itself pads ragged inputs with its *uninitialized* value (NaN by
default), which would poison a reduction over a ragged K or N.  Zero padding
also matches TK_BODY_BLOCKWISE (the body always sees one zero-padded block).

Block shapes are checked against the Mosaic rule (last two block dims divisible
by 8 and 128, or equal to the full padded array dims).  The interpreter does
not enforce that rule itself, so without the check a configuration that a real
TPU rejects would pass here.

Importing this module runs nothing; JAX_PLATFORMS=cpu should be set by the
caller before jax is first imported.
"""

import logging

import numpy as np
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

__all__ = ["matmul", "row_sum", "bias_add", "transpose", "axpy",
           "revisit_non_consecutive", "skip_init", "block_ok"]

_F32 = jnp.float32


def _interp(uninitialized_memory="nan"):
    # random_seed=None keeps the grid in row-major order ("parallel" axes are
    # only shuffled when a seed is given).
    return pltpu.InterpretParams(uninitialized_memory=uninitialized_memory)


def _sem(*kinds):
    return pltpu.CompilerParams(dimension_semantics=kinds)


def block_ok(block_shape, array_shape):
    """Mosaic's rule for a 2-D BlockSpec: each of the last two block dims is a
    multiple of (8, 128) respectively, or equals the array dim."""
    (br, bc), (ar, ac) = block_shape, array_shape
    return (br % 8 == 0 or br == ar) and (bc % 128 == 0 or bc == ac)


def _need(block_shape, array_shape, what):
    if not block_ok(block_shape, array_shape):
        raise ValueError(f"{what}: block {tuple(block_shape)} is not a legal TPU "
                         f"block for array {tuple(array_shape)} (needs (8,128) "
                         f"multiples or full dims)")


def _rup(n, b):
    return -(-n // b) * b


def _pad(a, rows, cols):
    a = np.asarray(a)
    return np.pad(a, ((0, rows - a.shape[0]), (0, cols - a.shape[1])))


def _np(a):
    return np.asarray(jax.device_get(a))


# ---------------------------------------------------------------- 1. matmul
def _mm_into_out(x_ref, y_ref, o_ref):
    # f32 output: the output block itself is the accumulator; it stays in VMEM
    # while k runs (k is the innermost grid axis) and is written back once.
    @pl.when(pl.program_id(2) == 0)
    def _():
        o_ref[...] = jnp.zeros(o_ref.shape, _F32)

    o_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=_F32)


def _mm_scratch(x_ref, y_ref, o_ref, acc_ref):
    # Narrow output: accumulate in an f32 VMEM scratch, cast once at the last k.
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _():
        acc_ref[...] = jnp.zeros(acc_ref.shape, _F32)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=_F32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _mm_narrow_out(x_ref, y_ref, o_ref):
    # Narrow output, no scratch: the output ref is the accumulator, so each
    # k step's sum is rounded to its dtype as it is stored.
    @pl.when(pl.program_id(2) == 0)
    def _():
        o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)

    o_ref[...] = (o_ref[...].astype(_F32) +
                  jnp.dot(x_ref[...], y_ref[...], preferred_element_type=_F32)).astype(o_ref.dtype)


def matmul(x, y, block=(16, 128, 128), out_dtype=None, in_out_ref=False):
    """x (M, K) @ y (K, N) -> (M, N) of out_dtype (default x.dtype).
    Grid (Mp/bm, Np/bn, Kp/bk), semantics (parallel, parallel, arbitrary).
    A narrow output accumulates in an f32 scratch, or with in_out_ref in
    the output ref itself."""
    bm, bk, bn = block
    (m, kk), (_, n) = x.shape, y.shape
    out_dtype = np.dtype(out_dtype or x.dtype)
    mp, kp, np_ = _rup(m, bm), _rup(kk, bk), _rup(n, bn)
    _need((bm, bk), (mp, kp), "matmul x")
    _need((bk, bn), (kp, np_), "matmul y")
    _need((bm, bn), (mp, np_), "matmul out")
    if out_dtype == np.float32:
        body, scratch = _mm_into_out, []
    elif in_out_ref:
        body, scratch = _mm_narrow_out, []
    else:
        body, scratch = _mm_scratch, [pltpu.VMEM((bm, bn), _F32)]
    out = pl.pallas_call(
        body,
        out_shape=jax.ShapeDtypeStruct((mp, np_), out_dtype),
        grid=(mp // bm, np_ // bn, kp // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                  pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        scratch_shapes=scratch,
        compiler_params=_sem("parallel", "parallel", "arbitrary"),
        interpret=_interp(),
    )(_pad(x, mp, kp), _pad(y, kp, np_))
    return _np(out)[:m, :n]


# --------------------------------------------------------------- 2. row_sum
def _row_sum_body(x_ref, o_ref, *, fault_skip_init=False):
    if not fault_skip_init:
        @pl.when(pl.program_id(1) == 0)
        def _():
            o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)

    o_ref[...] += jnp.sum(x_ref[...].astype(_F32), axis=1, keepdims=True)


def _row_sum_call(x, block, params, fault_skip_init=False):
    bm, bn = block
    m, n = x.shape
    mp, np_ = _rup(m, bm), _rup(n, bn)
    _need((bm, bn), (mp, np_), "row_sum x")
    # Out is (Mp, 1) with block (bm, 1): legal because 1 equals the full
    # last dim.  Block (i, 0) is revisited along j (consecutively).
    _need((bm, 1), (mp, 1), "row_sum out")
    out = pl.pallas_call(
        lambda x_ref, o_ref: _row_sum_body(x_ref, o_ref,
                                           fault_skip_init=fault_skip_init),
        out_shape=jax.ShapeDtypeStruct((mp, 1), _F32),
        grid=(mp // bm, np_ // bn),
        in_specs=[pl.BlockSpec((bm, bn), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((bm, 1), lambda i, j: (i, 0)),
        compiler_params=_sem("parallel", "arbitrary"),
        interpret=params,
    )(_pad(x, mp, np_))
    return _np(out)[:m]


def row_sum(x, block=(8, 128)):
    """Sum of each row of x (M, N) -> float32 (M, 1), accumulated in f32."""
    return _row_sum_call(x, block, _interp())


# -------------------------------------------------------------- 3. bias_add
def _bias_body(x_ref, b_ref, o_ref):
    o_ref[...] = (x_ref[...] + b_ref[...]).astype(o_ref.dtype)  # (bm,bn)+(1,bn)


def bias_add(x, b, block=(8, 128)):
    """x (M, N) + b (1, N) broadcast over rows -> (M, N) of x.dtype."""
    bm, bn = block
    m, n = x.shape
    b = np.asarray(b, dtype=x.dtype).reshape(1, n)
    mp, np_ = _rup(m, bm), _rup(n, bn)
    _need((bm, bn), (mp, np_), "bias_add x")
    _need((1, bn), (1, np_), "bias_add b")  # legal: 1 is the full row dim
    out = pl.pallas_call(
        _bias_body,
        out_shape=jax.ShapeDtypeStruct((mp, np_), x.dtype),
        grid=(mp // bm, np_ // bn),
        in_specs=[pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
                  pl.BlockSpec((1, bn), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        compiler_params=_sem("parallel", "parallel"),
        interpret=_interp(),
    )(_pad(x, mp, np_), _pad(b, 1, np_))
    return _np(out)[:m, :n]


# ------------------------------------------------------------- 4. transpose
def _transpose_body(x_ref, o_ref):
    o_ref[...] = x_ref[...].T


def transpose(x, block=(128, 128)):
    """x (M, N) -> x.T (N, M).  block = (bm, bn) is x's block; the out block is
    (bn, bm), so out block (i, j) is x block (j, i) transposed.  Each of bm,
    bn is a last dim somewhere, so both must be 128-multiples (or full)."""
    bm, bn = block
    m, n = x.shape
    mp, np_ = _rup(m, bm), _rup(n, bn)
    _need((bm, bn), (mp, np_), "transpose x")
    _need((bn, bm), (np_, mp), "transpose out")
    out = pl.pallas_call(
        _transpose_body,
        out_shape=jax.ShapeDtypeStruct((np_, mp), x.dtype),
        grid=(np_ // bn, mp // bm),
        in_specs=[pl.BlockSpec((bm, bn), lambda i, j: (j, i))],
        out_specs=pl.BlockSpec((bn, bm), lambda i, j: (i, j)),
        compiler_params=_sem("parallel", "parallel"),
        interpret=_interp(),
    )(_pad(x, mp, np_))
    return _np(out)[:n, :m]


# ------------------------------------------------------------------ 5. axpy
def axpy(x, y, alpha, block=(8, 128)):
    """alpha * x + y -> x.dtype, computed in f32 and rounded once (so a bf16
    result has a single rounding, reproducible in numpy)."""
    bm, bn = block
    m, n = x.shape
    mp, np_ = _rup(m, bm), _rup(n, bn)
    _need((bm, bn), (mp, np_), "axpy")
    a = float(alpha)  # baked into the body as a constant

    def body(x_ref, y_ref, o_ref):
        o_ref[...] = (a * x_ref[...].astype(_F32)
                      + y_ref[...].astype(_F32)).astype(o_ref.dtype)

    spec = pl.BlockSpec((bm, bn), lambda i, j: (i, j))
    out = pl.pallas_call(
        body,
        out_shape=jax.ShapeDtypeStruct((mp, np_), x.dtype),
        grid=(mp // bm, np_ // bn),
        in_specs=[spec, spec],
        out_specs=spec,
        compiler_params=_sem("parallel", "parallel"),
        interpret=_interp(),
    )(_pad(x, mp, np_), _pad(np.asarray(y, x.dtype), mp, np_))
    return _np(out)[:m, :n]


# ------------------------------------------------------ 6. fault: revisit
def _copy_body(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def revisit_non_consecutive(x=None, block=(8, 128)):
    """Grid (2, 2) whose output map (i, j) -> (j, 0) visits out blocks
    0, 1, 0, 1: block 0 is left at step (0, 1) and revisited at (1, 0).
    x defaults to 16x256 ones.  Returns (out, error): out is the numpy result
    if the interpreter let it through (then error is None), otherwise out is
    None and error is "<ExceptionType>: <message>"."""
    bm, bn = block
    if x is None:
        x = np.ones((2 * bm, 2 * bn), np.float32)
    call = pl.pallas_call(
        _copy_body,
        out_shape=jax.ShapeDtypeStruct((2 * bm, bn), x.dtype),
        grid=(2, 2),
        in_specs=[pl.BlockSpec((bm, bn), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (j, 0)),
        compiler_params=_sem("arbitrary", "arbitrary"),
        interpret=_interp(),
    )
    # jax logs a full traceback ("jax.io_callback failed") before re-raising;
    # silence that logger for the duration of this expected failure.
    log = logging.getLogger("jax._src.callback")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        return _np(call(x)), None
    except Exception as e:  # noqa: BLE001 - we report whatever it raises
        # The interpreter's docs require a reset after any exception.
        pltpu.reset_tpu_interpret_mode_state()
        # The check raises RuntimeError inside an io_callback; it surfaces as
        # JaxRuntimeError("INTERNAL: CpuCallback error ... RuntimeError: ...").
        # Keep the type and the message's last line (the RuntimeError text).
        last = [ln for ln in str(e).splitlines() if ln.strip()][-1].strip()
        return None, f"{type(e).__name__}: {last}"
    finally:
        log.setLevel(level)


# --------------------------------------------------- 7. fault: skipped init
def skip_init(x, block=(8, 128), uninitialized_memory="nan"):
    """row_sum without the pl.when(j == 0) init: the first += reads whatever
    the output VMEM block holds.  Returns the float32 (M, 1) output.
    The interpreter fills that buffer once with uninitialized_memory and then
    reuses it for every output block, so with "nan" every row is NaN, and with
    "zero" the first row block is right by luck while each later row block is
    its own sum plus the previous block's (stale) result."""
    return _row_sum_call(x, block, _interp(uninitialized_memory),
                         fault_skip_init=True)
