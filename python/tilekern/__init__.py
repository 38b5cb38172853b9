"""tilekern: libtilekern for Python.

Prove a custom kernel correct across shapes and dtypes, and time it only on
a real target::

    import numpy as np, tilekern as tk

    def candidate(x, y):                 # any callable: numpy, jax.jit, Pallas
        return (np.float32(2) * x + y).astype(x.dtype)

    result = tk.audit(candidate, tk.Kernel.axpy(2.0),
                      shapes=[(8, 128), (17, 257)], dtypes=["float32", "bfloat16"])
    print(result.summary())

Classes: Matrix (zero-copy over numpy), Tiling, Kernel, Call (pallas_call's
grid and BlockSpecs), Device, Pipeline, Compare, Audit, Bench; errors are TilekernError and one subclass per status.
The shared library is found as tilekern._ffi explains; ``tilekern.LIBRARY_PATH``
says which file was loaded.
"""
from . import errors
from ._ffi import LIBRARY_PATH, LIBRARY_VERSION, REQUIRED_VERSION, lib
from .audit import (Audit, AuditResult, CaseResult, audit, audit_matmul, audit_row_sum,
                    rounding_counterexample)
from .call import BlockSpec, Call, Step
from .bench import Bench, BenchResult, amdahl, benchmark, median, percentile
from .compare import Compare
from .device import Device
from .errors import *  # noqa: F401,F403 - the exception classes
from .kernel import ARITH, Kernel
from .matrix import DTYPES, Matrix, bf16_from_f32, bf16_to_f32, from_f32, to_f32, ulp_distance
from .pipeline import Hazard, Pipeline
from .tiling import Tiling

__version__ = "%d.%d.%d" % LIBRARY_VERSION


def version() -> str:
    """The loaded library's version string."""
    return lib.tk_version_string().decode()


def build_info() -> dict:
    """The loaded library's build and dispatch, as tk_build_info(3) gives it:
    ``version``, ``isa`` (the compiled path of the hot loops in use: ``portable``,
    ``avx2`` or ``avx512``), ``cpu`` (the best path this CPU runs), ``TK_ISA``
    (what that variable asked when the library chose: a path, ``unset`` or
    ``unknown``) and ``compiler``."""
    return dict(word.split("=", 1) for word in lib.tk_build_info().decode().split())


__all__ = ["Audit", "AuditResult", "Bench", "BenchResult", "BlockSpec", "Call",
           "CaseResult", "Compare", "Step",
           "ARITH", "DTYPES", "Device", "Hazard", "Kernel", "LIBRARY_PATH", "Matrix", "Pipeline",
           "Tiling", "amdahl", "audit", "audit_matmul", "audit_row_sum", "benchmark",
           "bf16_from_f32", "bf16_to_f32", "build_info",
           "from_f32", "to_f32", "median", "percentile", "rounding_counterexample", "ulp_distance",
           "version"] + errors.__all__
