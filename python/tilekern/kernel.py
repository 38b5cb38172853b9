"""Kernel: what is computed under the numeric contract (promote the stored
inputs to f32, compute, cast once), run on the host over a Tiling."""
import ctypes
from typing import Callable, Optional, Sequence

import numpy as np

from . import _ffi, errors
from ._ffi import lib
from .matrix import Matrix, as_matrix, numpy_dtype
from .tiling import Tiling

__all__ = ["Kernel", "ACCUMS", "ARITH", "BODIES", "f32_view"]

BODIES = {"elementwise": _ffi.TK_BODY_ELEMENTWISE, "blockwise": _ffi.TK_BODY_BLOCKWISE}
# The accumulation dtypes a reduction contract may declare.
ACCUMS = {"float32": _ffi.TK_DTYPE_F32, "bfloat16": _ffi.TK_DTYPE_BF16,
          "float16": _ffi.TK_DTYPE_F16}
# The built-in bodies' arithmetic: "numpy" rounds alpha * x and the sum
# separately and keeps subnormals; "xla" fuses and flushes, as XLA on CPU
# (Pallas interpret mode) and TPUs do; "fma" and "ftz" each alone.  A
# reduction's audit bounds the declared one (only the flush changes it).
ARITH = {"numpy": _ffi.TK_ARITH_NUMPY, "fma": _ffi.TK_ARITH_FMA, "ftz": _ffi.TK_ARITH_FTZ,
         "xla": _ffi.TK_ARITH_XLA}

_F32 = np.dtype(np.float32)


def f32_view(address: int, rows: int, cols: int, ld: int, writable: bool) -> np.ndarray:
    """A rows x cols float32 array over C memory with leading dimension ld."""
    buf = (ctypes.c_float * ((rows - 1) * ld + cols)).from_address(address)
    view = np.ndarray((rows, cols), _F32, buf, strides=(4 * ld, 4))
    if not writable:
        view.flags.writeable = False
    return view


def _body_trampoline(fn, n_inputs):
    def body(user, rows, cols, ld, inputs, output):
        views = [f32_view(inputs[i], rows, cols, ld, False) for i in range(n_inputs)]
        return fn(views, f32_view(output, rows, cols, ld, True))

    return _ffi.trampoline(body, _ffi.BODY_FN)


def operands(xs, what):
    """xs as a list of operands; one array alone (iterating it would give
    its rows), or anything not iterable, is refused."""
    try:
        if isinstance(xs, (np.ndarray, Matrix)):
            raise TypeError
        return list(xs)
    except TypeError:
        raise errors.InvalidArgumentError(f"{what} is a sequence of arrays, not "
                                          f"{type(xs).__name__}: give [x] for one") from None


def prepare_io(inputs, output, shape, n_inputs, what):
    """Wrap the kernel's n_inputs inputs (and the output, allocated like the
    first input when None) as matrices; returns (input matrices, output
    matrix, the output object to hand back)."""
    inputs = operands(inputs, f"{what}: inputs")
    if len(inputs) != n_inputs:   # the C library reads the kernel's count of them
        raise errors.InvalidArgumentError(f"{what}: the kernel has {n_inputs} input(s), "
                                          f"{len(inputs)} were given")
    mats = [as_matrix(x, f"input {i}") for i, x in enumerate(inputs)]
    if output is None:
        code = lib.tk_matrix_dtype(mats[0]) if mats else _ffi.TK_DTYPE_F32
        shape = (lib.tk_matrix_rows(mats[0]), lib.tk_matrix_cols(mats[0])) if mats else shape
        output = np.empty(shape, numpy_dtype(code))
    return mats, as_matrix(output, "output"), output


class Kernel(_ffi.Handle):
    """A body and its numeric contract.

    ``Kernel.axpy(alpha)`` is the built-in alpha*x + y; ``Kernel.custom(fn,
    n_inputs)`` runs a Python body ``fn(inputs, output)`` that reads the
    float32 views in the list inputs and writes the float32 view output,
    each rows x cols of one tile and valid only during the call.  An exception raised by fn stops the run,
    leaves the output untouched and is raised again by the call that ran it."""

    _destroy = "tk_kernel_destroy"

    def __init__(self, handle, body_fn=None):
        super().__init__(handle)
        self._body_fn = body_fn  # the ctypes callback must outlive the kernel

    @classmethod
    def axpy(cls, alpha: float, arith: str = "numpy") -> "Kernel":
        """alpha * x + y in f32 under arith (see ARITH; by default separately
        rounded, subnormals kept), cast once."""
        k = cls(_ffi.new_handle(lib.tk_kernel_axpy, _ffi.as_float(alpha, "alpha")))
        k.arith = arith
        return k

    @classmethod
    def matmul(cls, accum: str = "float32") -> "Kernel":
        """The contract x @ y (an M x K and a K x N input), accumulated in
        accum in any order and cast once: for audits under an error bound
        (Audit.add_reduction_case), not for run()."""
        k = cls(_ffi.new_handle(lib.tk_kernel_matmul))
        k.accum = accum
        k._reduction = "matmul"
        return k

    @classmethod
    def row_sum(cls, accum: str = "float32") -> "Kernel":
        """The contract out[i, 0] = sum_k x[i, k], as matmul()."""
        k = cls(_ffi.new_handle(lib.tk_kernel_row_sum))
        k.accum = accum
        k._reduction = "row sum"
        return k

    @classmethod
    def custom(cls, fn: Callable[[Sequence[np.ndarray], np.ndarray], None],
               n_inputs: int, body: str = "elementwise") -> "Kernel":
        """A Python body over n_inputs inputs.  body="elementwise" may be
        called on any sub-rectangle; "blockwise" always sees one whole
        zero-padded block, as a Pallas body does."""
        if not callable(fn):
            raise errors.InvalidArgumentError(f"the body {fn!r} is not callable")
        if isinstance(n_inputs, bool):
            raise errors.InvalidArgumentError(f"n_inputs {n_inputs!r} is not an int")
        n_inputs = _ffi.as_int(n_inputs, "n_inputs")
        cb = _body_trampoline(fn, n_inputs)
        k = cls(_ffi.new_handle(lib.tk_kernel_custom, n_inputs, cb, None), cb)
        k.body = body
        return k

    body = _ffi.param("kernel", _ffi.TK_KERNEL_BODY, "the body kind", BODIES)
    accum = _ffi.param("kernel", _ffi.TK_KERNEL_ACCUM,
                       "a reduction's accumulation dtype (see ACCUMS)", ACCUMS)
    arith = _ffi.param("kernel", _ffi.TK_KERNEL_ARITH,
                       "the built-in body's arithmetic, or the one a reduction's audit "
                       "bounds: \"xla\" flushes subnormals (see ARITH)", ARITH)
    undo = _ffi.param("kernel", _ffi.TK_KERNEL_UNDO,
                      "True (default): a failing body leaves run's output as it was; "
                      "False: no undo copy, the output may be partly written", kind=bool)
    # A Python body always runs on the thread that made the call (it is never
    # declared TK_KERNEL_THREAD_SAFE: it holds the GIL anyway, and its
    # exceptions are carried back by the calling thread's guard).
    threads = _ffi.param("kernel", _ffi.TK_KERNEL_THREADS,
                         "threads of a run of the built-in body: 1 (default), or 0 for "
                         "every core the process may run on (its CPU affinity); the "
                         "results are the same bits.  The kernel keeps "
                         "the extra threads from its first such run until close() or "
                         "threads = 1 (and an Audit its own until close()): Python 3.12 "
                         "and later warn on os.fork() while they exist")
    n_inputs = _ffi.param("kernel", _ffi.TK_KERNEL_INPUTS, "number of inputs",
                          readonly=True)

    def run(self, tiling: Tiling, inputs, output=None):
        """Run on the host over tiling.  inputs are numpy arrays or Matrix
        objects of one dtype and the tiling's shape; output (an array or a
        Matrix, allocated like the first input when None) is returned."""
        mats, out, result = prepare_io(inputs, output, tiling.shape, self.n_inputs,
                                       "Kernel.run")
        with _ffi.CallbackGuard():
            lib.tk_kernel_run(self, tiling, _ffi.handle_array(mats), out)
        return result

    def __repr__(self):
        if self.closed:
            return "<tilekern.Kernel closed>"
        reduction = getattr(self, "_reduction", None)   # which has no body kind
        what = f"{reduction} accumulating in {self.accum}" if reduction else self.body
        return f"<tilekern.Kernel {what} with {self.n_inputs} input(s)>"
