"""Pallas axpy programs for cross-checking libtilekern bit for bit.

All programs run on CPU in Pallas *TPU* interpret mode: ``interpret=`` gets a
``pltpu.InterpretParams``.  Passing ``interpret=True`` would select the
generic HLO interpreter instead, which has no TPU memory spaces, DMAs or
semaphores, so ``emit_pipeline`` and race detection need the TPU mode.

Numpy in, numpy out.  ``x`` and ``y`` are 2-D arrays with the same shape and
dtype (float32 or ml_dtypes.bfloat16); ``block`` is ``(rows, cols)``.  The
body promotes to float32, computes ``alpha * x + y`` as a rounded multiply
and then a rounded add, and casts once to the input dtype.  The caller picks
the platform (``JAX_PLATFORMS=cpu``).

Where XLA on CPU differs from plain IEEE float32 arithmetic as numpy does it:

* Subnormals are flushed to zero, keeping their sign, both as operands and
  as results.  No flag turns this off.  An example: float32
  x=0x007fffff, y=0x00018000, alpha=2 gives 0x00000000 here and 0x0100bfff
  in numpy.
* If both operands of the add are NaN, a bfloat16 result may carry the sign
  of y's NaN where numpy keeps the product's.  Compare NaNs as NaNs.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# The race detector keeps its state in a module-level global of the
# interpreter, and no public API exposes it.  It lives here in 0.9.2 and 0.10.2.
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as _interp

_TPU_KIND = "TPU v5 lite"
_LAYOUT_TILE = (8, 128)
_TPU_INTERPRET = pltpu.InterpretParams()
_RACE_CHECK = pltpu.InterpretParams(detect_races=True)


def jax_version():
    return jax.__version__


def _pad(x, y, block):
    """Zero-pad x and y to whole blocks; return them, the grid and the extra."""
    if x.ndim != 2 or x.shape != y.shape or min(x.shape) < 1:
        raise ValueError("x and y must be non-empty 2-D arrays of one shape")
    if x.dtype != y.dtype or x.dtype not in (np.float32, jnp.bfloat16):
        raise ValueError("x and y must both be float32 or both bfloat16")
    if len(block) != 2 or any(not isinstance(n, int) or n < 1 for n in block):
        raise ValueError("block must be two positive ints")
    (m, n), (br, bc) = x.shape, block
    grid = (-(-m // br), -(-n // bc))
    widths = ((0, grid[0] * br - m), (0, grid[1] * bc - n))
    extra = grid[0] * br * grid[1] * bc - m * n
    return np.pad(x, widths), np.pad(y, widths), grid, extra


def _axpy_body(alpha, fused):
    def body(x_ref, y_ref, o_ref, p_ref):
        if fused:  # as a Pallas user writes it: XLA on CPU fuses it into an FMA
            total = alpha * x_ref[...].astype(jnp.float32) + y_ref[...].astype(jnp.float32)
        else:
            # Storing the product in a float32 VMEM scratch (to the
            # interpreter, a memory callback that XLA cannot see through)
            # keeps the multiply rounded on its own, as the seed's contract.
            p_ref[...] = alpha * x_ref[...].astype(jnp.float32)
            total = p_ref[...] + y_ref[...].astype(jnp.float32)
        o_ref[...] = total.astype(o_ref.dtype)
    return body


def _abstract_tpu():
    """Context with a one-device abstract mesh that presents a TPU v5 lite."""
    try:
        device = jax.sharding.AbstractDevice(device_kind=_TPU_KIND, num_cores=1)
    except TypeError:  # jax >= 0.10 also requires the platform
        device = jax.sharding.AbstractDevice(
            device_kind=_TPU_KIND, num_cores=1, platform="tpu")
    mesh = jax.sharding.AbstractMesh((1,), ("tpu",), abstract_device=device)
    return jax.sharding.use_abstract_mesh(mesh)


def _run(call, *args):
    """Run an interpreted call with fresh interpreter state; return (out, races)."""
    pltpu.reset_tpu_interpret_mode_state()
    with _abstract_tpu():
        out = np.asarray(call(*args))  # blocks until every callback has run
    races = _interp.races
    return out, bool(races is not None and races.races_found)


# Each static configuration is traced and compiled once.  A repeated call
# with the same padded shape, dtype, block and alpha reuses the executable.

@functools.lru_cache(maxsize=None)
def _blocked(shape, dtype, block, grid, alpha, fused):
    spec = pl.BlockSpec(block, lambda i, j: (i, j))
    return jax.jit(pl.pallas_call(
        _axpy_body(alpha, fused),
        out_shape=jax.ShapeDtypeStruct(shape, dtype),
        grid=grid, in_specs=(spec, spec), out_specs=spec,
        scratch_shapes=[pltpu.VMEM(block, jnp.float32)],
        interpret=_TPU_INTERPRET))


def blocked_axpy(x, y, alpha, block, fused=False):
    """alpha*x + y, computed one block at a time over a grid of blocks, with
    the product rounded on its own, or with fused=True as XLA fuses it.

    Returns ``(out, padded_extra)``.  ``out`` has the shape and dtype of x,
    and ``padded_extra`` is the number of zeros that padding added.
    """
    px, py, grid, extra = _pad(x, y, block)
    call = _blocked(px.shape, px.dtype, tuple(block), grid, float(alpha), bool(fused))
    out, _ = _run(call, px, py)
    return out[:x.shape[0], :x.shape[1]], extra


@functools.lru_cache(maxsize=None)
def _pipelined(shape, dtype, block, grid, alpha, buffers, no_pipelining, fused,
               detect_races):
    index = lambda i, j: (i, j)
    in_spec = pl.BlockSpec(block, index, pipeline_mode=pl.Buffered(buffers))
    out_spec = pl.BlockSpec(block, index, pipeline_mode=pl.Buffered(2))
    body = _axpy_body(alpha, fused)

    def kernel(x_hbm, y_hbm, o_hbm, p_ref):
        # The pipeline has to be built inside the kernel.  Built outside, it
        # captures constants, and pallas_call rejects those.
        pltpu.emit_pipeline(
            lambda x, y, o: body(x, y, o, p_ref),
            grid=grid, in_specs=(in_spec, in_spec), out_specs=out_spec,
            no_pipelining=no_pipelining,
        )(x_hbm, y_hbm, o_hbm)

    whole = pl.BlockSpec(memory_space=pl.ANY)  # stays in HBM; the pipeline copies
    return jax.jit(pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(shape, dtype),
        in_specs=(whole, whole), out_specs=whole,
        scratch_shapes=[pltpu.VMEM(block, jnp.float32)],
        interpret=_RACE_CHECK if detect_races else _TPU_INTERPRET))


def pipelined_axpy(x, y, alpha, block, buffers, no_pipelining=False, fused=False,
                   detect_races=True):
    """alpha*x + y through ``pltpu.emit_pipeline``, with ``buffers`` input slots.

    Runs on an abstract "TPU v5 lite" with the race detector on (off with
    ``detect_races=False``: races_found is then False).  Input specs are
    ``pl.Buffered(buffers)`` and the output spec is ``pl.Buffered(2)``.
    Returns ``(out, padded_extra, races_found)``.  Each block dimension must be
    a multiple of (8, 128).  Race detection costs time quadratic in the number
    of grid steps: 1024 steps took 80 to 100 s with it, 10 s without.
    """
    px, py, grid, extra = _pad(x, y, block)
    if block[0] % _LAYOUT_TILE[0] or block[1] % _LAYOUT_TILE[1]:
        raise ValueError(f"block {tuple(block)} is not a multiple of (8, 128)")
    call = _pipelined(px.shape, px.dtype, tuple(block), grid, float(alpha),
                      int(buffers), bool(no_pipelining), bool(fused), bool(detect_races))
    out, races = _run(call, px, py)
    return out[:x.shape[0], :x.shape[1]], extra, races


@functools.lru_cache(maxsize=None)
def _racy(shape, dtype, block, grid, alpha):
    body = _axpy_body(alpha, False)

    def kernel(x_hbm, y_hbm, o_ref, xs, ys, sems, p_ref):
        i, j = pl.program_id(0), pl.program_id(1)
        window = (pl.ds(i * block[0], block[0]), pl.ds(j * block[1], block[1]))
        copy_x = pltpu.make_async_copy(x_hbm.at[window], xs, sems.at[0])
        copy_y = pltpu.make_async_copy(y_hbm.at[window], ys, sems.at[1])
        copy_x.start()
        copy_y.start()
        body(xs, ys, o_ref, p_ref)  # the bug: reads xs and ys before the waits
        copy_x.wait()
        copy_y.wait()

    hbm = pl.BlockSpec(memory_space=pl.ANY)
    return jax.jit(pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(shape, dtype),
        grid=grid, in_specs=(hbm, hbm),
        out_specs=pl.BlockSpec(block, lambda i, j: (i, j)),
        scratch_shapes=[pltpu.VMEM(block, dtype), pltpu.VMEM(block, dtype),
                        pltpu.SemaphoreType.DMA((2,)),
                        pltpu.VMEM(block, jnp.float32)],
        interpret=_RACE_CHECK))


def racy_axpy(x, y, alpha, block):
    """An axpy with a deliberate race: each step reads its VMEM copies of x and y
    before it waits for the DMAs that fill them.

    Returns ``(out, races_found)``.  races_found is True, and the detector
    prints a "RACE DETECTED" report for each race to stdout.  ``out`` is wrong
    on purpose.  A DMA in the default "on_wait" mode lands only when it is
    waited for, so step k reads the tile of step k-1, and step 0 reads
    uninitialised memory (NaN).  DETECTORS says what the detector can see.
    """
    px, py, grid, _ = _pad(x, y, block)
    call = _racy(px.shape, px.dtype, tuple(block), grid, float(alpha))
    out, races = _run(call, px, py)
    return out[:x.shape[0], :x.shape[1]], races


# The tk_pipeline fault mode that models the mistake in racy_axpy.
RACY_FAULT = "skip_input_wait"

DETECTORS = """\
Pallas TPU interpret mode's race detector (happens-before, vector clocks),
tried with manual-DMA kernels in jax 0.9.2 and 0.10.2:
caught: a read of a buffer whose copy into it was started but not yet
  waited for (racy_axpy); a prefetch started into the slot the body still
  reads; an output copy started before the body writes its slot.
missed: a wait skipped altogether.  In the default "on_wait" DMA mode that
  copy never runs, so no write exists to race with, and the stale read goes
  unreported, with no complaint about the DMA still outstanding.
missed at the default vector_clock_size (2 x cores): every DMA shares one
  virtual clock entry, so waiting for any later copy makes every earlier one
  look ordered.  Rewriting an output slot whose copy-out was not waited for
  goes unflagged, and so does reading x's copy after waiting only for y's.
  vector_clock_size=32 flags both, except when two DMAs draw the same
  random entry.  No false race is ever reported.
not races: a prefetch past the last block is an out-of-bounds error (at
  trace time for a static index, at run time for a dynamic one).  A wait on
  a semaphore that nothing signals hangs."""
