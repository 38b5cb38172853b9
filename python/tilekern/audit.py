"""Audit: a candidate against the represented-input oracle (implementation
error: zero for a correct kernel under the contract) and, kept apart, the
precision gap against the original float32 data."""
import ctypes
import inspect
import os
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from . import _ffi, errors
from ._ffi import lib
from .kernel import Kernel
from .matrix import dtype_code, dtype_name, view_of

__all__ = ["Audit", "CaseResult", "AuditResult", "audit", "audit_matmul", "audit_row_sum",
           "REPORT_FORMATS", "rounding_counterexample"]

REPORT_FORMATS = {"text": _ffi.TK_REPORT_TEXT, "json": _ffi.TK_REPORT_JSON,
                  "svg": _ffi.TK_REPORT_SVG}
_SUFFIXES = {".txt": "text", ".json": "json", ".svg": "svg"}
_METRICS = {
    "impl_max_abs": _ffi.TK_AUDIT_IMPL_MAX_ABS, "impl_max_ulp": _ffi.TK_AUDIT_IMPL_MAX_ULP,
    "impl_mismatches": _ffi.TK_AUDIT_IMPL_MISMATCHES,
    "gap_max_abs": _ffi.TK_AUDIT_GAP_MAX_ABS, "gap_max_rel": _ffi.TK_AUDIT_GAP_MAX_REL,
    "gap_input_max_abs": _ffi.TK_AUDIT_GAP_INPUT_MAX_ABS,
    "gap_output_max_abs": _ffi.TK_AUDIT_GAP_OUTPUT_MAX_ABS,
    "passed": _ffi.TK_AUDIT_PASSED, "gap_passed": _ffi.TK_AUDIT_GAP_PASSED,
    "gap_atol": _ffi.TK_AUDIT_GAP_ATOL, "gap_rtol": _ffi.TK_AUDIT_GAP_RTOL,
    "gap_mismatches": _ffi.TK_AUDIT_GAP_MISMATCHES, "scale": _ffi.TK_AUDIT_SCALE,
    "diagnosis": _ffi.TK_AUDIT_DIAGNOSIS}
_INTS = {"impl_max_ulp", "impl_mismatches", "gap_mismatches"}
_BOOLS = {"passed", "gap_passed"}


@dataclass(frozen=True)
class CaseResult:
    """One case of an audit run.

    passed is the implementation verdict against the represented-input
    oracle (impl_*); gap_* is the precision gap against the original f32
    data, split into its input-representation and output-cast parts;
    diagnosis names the rounding schedule that explains a failing
    candidate ("not-run" when it passed).

    A reduction case (depth, the K, is then non-zero) passes when every
    element is within the error bound of the declared accumulation:
    bound_ratio is the largest error/bound, at bound_at, where the bound is
    bound; impl_mismatches counts the elements that differ in bits from
    the oracle, which a correct kernel may well have."""
    index: int
    rows: int
    cols: int
    dtype: str
    passed: bool
    impl_max_abs: float
    impl_max_ulp: int
    impl_mismatches: int
    gap_max_abs: float
    gap_max_rel: float
    gap_input_max_abs: float
    gap_output_max_abs: float
    gap_passed: bool
    gap_atol: float
    gap_rtol: float
    gap_mismatches: int
    scale: float
    diagnosis: str
    depth: int = 0
    out_dtype: Optional[str] = None
    bound_ratio: Optional[float] = None
    bound: Optional[float] = None
    bound_at: Optional[Tuple[int, int]] = None


def _takes_out(fn) -> bool:
    try:
        p = inspect.signature(fn).parameters.get("out")
    except (TypeError, ValueError):  # no signature to read (a builtin)
        return False
    return p is not None and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)


def _candidate_trampoline(fn, n_inputs):
    """Calls fn(*inputs) with read-only numpy views of the stored inputs and
    copies what it returns into the output, which must match its shape and
    dtype exactly (a float32 result for a bfloat16 case is refused, not cast:
    the cast is part of what is audited).  A candidate with an `out`
    parameter is handed the output array to write instead, saving the copy;
    returning out itself (or None) then means it was written."""
    takes_out = _takes_out(fn)

    def candidate(user, inputs, output):
        views = [view_of(inputs[i], False) for i in range(n_inputs)]
        out = view_of(output, True)
        result = fn(*views, out=out) if takes_out else fn(*views)
        if takes_out and (result is None or result is out):
            return 0
        result = np.asarray(result)
        if result.shape != out.shape:
            raise errors.ShapeError(f"the candidate returned shape {result.shape} for a "
                                    f"{out.shape[0]}x{out.shape[1]} case")
        if result.dtype != out.dtype and not (   # or the bits of a 2- or 1-byte dtype
                result.dtype.kind == "u" and result.dtype.itemsize == out.dtype.itemsize
                and out.dtype.itemsize < 4):
            raise errors.DtypeError(f"the candidate returned {result.dtype} for a "
                                    f"{out.dtype} case")
        np.copyto(out.view(result.dtype), result, casting="no")
        return 0

    return _ffi.trampoline(candidate, _ffi.CANDIDATE_FN)


class Audit(_ffi.Handle):
    """Audits candidates against the contract kernel over a list of cases.

    The candidate is any callable taking the stored inputs of a case as
    numpy arrays (float32, or the ml_dtypes/numpy dtype of the case: bfloat16,
    float16, float8_e4m3fn, float8_e5m2) and returning the output
    as an array of the same shape and dtype: a numpy function, a jitted JAX
    function, a Pallas kernel.  A candidate that has an ``out`` parameter
    is given the output array to write (no copy).  The arrays it receives
    are valid only during the call.

    progress, if given, is called as progress(case, step, fraction) while
    run() works (see set_progress).  Even without one, run() stops at the
    next report when Ctrl-C is pressed, raising KeyboardInterrupt."""

    _destroy = "tk_audit_destroy"

    def __init__(self, contract: Kernel, candidate: Optional[Callable] = None,
                 progress: Optional[Callable] = None):
        super().__init__(_ffi.new_handle(lib.tk_audit_create, contract), (contract,))
        self.contract = contract
        self._n_inputs = contract.n_inputs
        self._cb = None
        # Always installed: a report returns to Python, where a pending
        # Ctrl-C is raised and stops the run.  No reference to self (a cycle).
        box = self._progress = [None]

        def report(user, case, step, fraction):
            if box[0] is not None:
                box[0](case, step.decode(), fraction)

        self._progress_cb = _ffi.trampoline(report, _ffi.PROGRESS_FN)
        lib.tk_audit_set_progress(self, self._progress_cb, None)
        if candidate is not None:
            self.set_candidate(candidate)
        self.set_progress(progress)

    def set_candidate(self, fn: Callable) -> None:
        if not callable(fn):
            raise errors.InvalidArgumentError(f"the candidate {fn!r} is not callable")
        cb = _candidate_trampoline(fn, self._n_inputs)
        lib.tk_audit_set_candidate(self, cb, None)
        self._cb = cb  # the ctypes callback must live as long as the audit uses it

    def set_progress(self, fn: Optional[Callable]) -> None:
        """fn(case, step, fraction) is called during run(): case is the
        case's index, step one of "candidate", "oracle", "measure" and
        "diagnosis" as each begins, fraction how much of the step's current
        pass is done (0 to 1; a reduction's oracle and diagnosis report as
        their sums advance, each diagnosis pass from 0).  An exception it
        raises stops the run and propagates.  None: no reports."""
        if fn is not None and not callable(fn):
            raise errors.InvalidArgumentError(f"the progress function {fn!r} is not callable")
        self._progress[0] = fn

    def set_gap_tolerance(self, dtype, atol: float, rtol: float) -> None:
        """The tolerance of the precision gap for one dtype."""
        lib.tk_audit_set_gap_tolerance(self, dtype_code(dtype), atol, rtol)

    def add_case(self, dtype, originals: Sequence[np.ndarray]) -> int:
        """A case: the original float32 data of every input (2-D, one shape),
        represented in dtype by the audit.  Returns the case's index."""
        n = self._n_inputs
        arrays = [np.ascontiguousarray(o, dtype=np.float32) for o in originals]
        if len(arrays) != n:
            raise errors.InvalidArgumentError(f"the contract has {n} inputs, "
                                              f"{len(arrays)} originals were given")
        if any(a.ndim != 2 for a in arrays) or len({a.shape for a in arrays}) > 1:
            raise errors.ShapeError("originals must be 2-D arrays of one shape, not "
                                    + ", ".join(str(a.shape) for a in arrays))
        rows, cols = arrays[0].shape if arrays else (0, 0)
        ptrs = (ctypes.POINTER(ctypes.c_float) * max(n, 1))(
            *[a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)) for a in arrays])
        lib.tk_audit_add_case(self, dtype_code(dtype), rows, cols, ptrs)
        return self.cases - 1

    def add_reduction_case(self, dtype, originals: Sequence[np.ndarray],
                           out_dtype=None) -> int:
        """A case of a matmul or row-sum contract: the original float32 x
        (m x k) and, for a matmul, y (k x n), represented in dtype; the
        candidate's output is m x n (m x 1 for a row sum) in out_dtype
        (default: dtype).  Returns the case's index."""
        n = self._n_inputs
        arrays = [np.ascontiguousarray(o, dtype=np.float32) for o in originals]
        if len(arrays) != n:
            raise errors.InvalidArgumentError(f"the contract has {n} inputs, "
                                              f"{len(arrays)} originals were given")
        if any(a.ndim != 2 for a in arrays):
            raise errors.ShapeError("originals must be 2-D arrays, not "
                                    + ", ".join(str(a.shape) for a in arrays))
        m, k = arrays[0].shape
        cols = 1
        if n == 2:
            if arrays[1].shape[0] != k:
                raise errors.ShapeError(f"x is {m}x{k} but y has {arrays[1].shape[0]} rows")
            cols = arrays[1].shape[1]
        ptrs = (ctypes.POINTER(ctypes.c_float) * n)(
            *[a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)) for a in arrays])
        code = dtype_code(dtype)
        out = code if out_dtype is None else dtype_code(out_dtype)
        lib.tk_audit_add_reduction_case(self, code, out, m, k, cols, ptrs)
        return self.cases - 1

    @property
    def cases(self) -> int:
        """Number of cases added."""
        return lib.tk_audit_case_count(self)

    def run(self) -> bool:
        """Audit every case; True when all pass the implementation check.  A
        failing case is a result (see results), not an exception."""
        try:
            with _ffi.CallbackGuard():
                lib.tk_audit_run(self)
        except errors.MismatchError:
            return False
        return True

    def result(self, index: int) -> CaseResult:
        value = ctypes.c_double()
        got = {}
        for name, code in _METRICS.items():
            lib.tk_audit_result(self, index, code, ctypes.byref(value))
            got[name] = value.value
        for name in _INTS:
            got[name] = int(got[name])
        for name in _BOOLS:
            got[name] = bool(got[name])
        got["diagnosis"] = _ffi.text(lib.tk_audit_schedule_name(int(got["diagnosis"])))
        shape = []
        for code in (_ffi.TK_AUDIT_ROWS, _ffi.TK_AUDIT_COLS, _ffi.TK_AUDIT_DTYPE,
                     _ffi.TK_AUDIT_DEPTH, _ffi.TK_AUDIT_OUT_DTYPE):
            lib.tk_audit_result(self, index, code, ctypes.byref(value))
            shape.append(int(value.value))
        got["depth"], got["out_dtype"] = shape[3], dtype_name(shape[4])
        if shape[3]:
            bound = []
            for code in (_ffi.TK_AUDIT_BOUND_RATIO, _ffi.TK_AUDIT_BOUND,
                         _ffi.TK_AUDIT_BOUND_ROW, _ffi.TK_AUDIT_BOUND_COL):
                lib.tk_audit_result(self, index, code, ctypes.byref(value))
                bound.append(value.value)
            got["bound_ratio"], got["bound"] = bound[0], bound[1]
            got["bound_at"] = (int(bound[2]), int(bound[3]))
        return CaseResult(index, shape[0], shape[1], dtype_name(shape[2]), **got)

    @property
    def results(self) -> List[CaseResult]:
        """Every case's result of the last complete run."""
        return [self.result(i) for i in range(self.cases)]

    def check_permutation(self, case: int, order: Sequence[int]) -> bool:
        """Run the candidate on the case's rows jointly permuted by order;
        True when the output rows come back permuted the same way."""
        order = [_ffi.as_int(r, "an order entry", int64=True) for r in order]
        value = ctypes.c_double()
        lib.tk_audit_result(self, case, _ffi.TK_AUDIT_ROWS, ctypes.byref(value))
        if len(order) != int(value.value):   # the C library reads one entry per row
            raise errors.InvalidArgumentError(
                f"order has {len(order)} entries; case {case} has {int(value.value)} rows")
        rows = (ctypes.c_int64 * max(len(order), 1))(*order)
        try:
            with _ffi.CallbackGuard():
                lib.tk_audit_check_permutation(self, case, rows)
        except errors.MismatchError:
            return False
        return True

    def write_report(self, path, format: Optional[str] = None) -> None:
        """The report of the last run as "text", "json" or "svg" (by default
        from the file's suffix: .txt, .json, .svg)."""
        code = _ffi.encode(_format_of(path, format), REPORT_FORMATS, "report format")
        lib.tk_audit_write_report(self, _ffi.path_arg(path), code)


def _format_of(path, format):
    if format is not None:
        return format
    suffix = os.path.splitext(os.fsdecode(os.fspath(path)))[1].lower()
    if suffix not in _SUFFIXES:
        raise errors.InvalidArgumentError(
            f"no report format for suffix {suffix!r}; pass format= one of "
            f"{', '.join(REPORT_FORMATS)}")
    return _SUFFIXES[suffix]


def _reports(report):
    """The report paths of audit() and its kin, each one's format and
    directory checked before the audit runs, so that a typo does not cost
    the work."""
    if report is None:
        return []
    paths = [report] if isinstance(report, (str, bytes, os.PathLike)) else list(report)
    for path in paths:
        _ffi.check_writable(path, "report")
        _format_of(path, None)
    return paths


def _write_reports(a, result, paths):
    """Write each report; a failure (after the checks, as a full disk)
    carries the result, the work's, as its .result."""
    try:
        for path in paths:
            a.write_report(path)
    except errors.TilekernError as e:
        e.result = result
        raise


@dataclass
class AuditResult:
    """What audit() found: the verdict over all cases, each case's result,
    and the Audit itself (for reports and further checks)."""
    passed: bool
    cases: List[CaseResult]
    audit: Audit

    def write_report(self, path, format: Optional[str] = None) -> None:
        self.audit.write_report(path, format)

    def summary(self) -> str:
        """One line per case: shape, dtype, verdict, gap (with its input and
        output parts) and diagnosis; for a reduction, the declared
        accumulation and arithmetic, the largest error/bound with its
        position and the bound there."""
        lines = []
        k = self.audit.contract
        # NaN differences never enter the maxima: say so where only they differ.
        nan_note = " (NaN or signed-zero differences, which the maxima leave out)"
        for c in self.cases:
            gap = (f"gap max abs {c.gap_max_abs!r} (input {c.gap_input_max_abs!r}, "
                   f"output {c.gap_output_max_abs!r})")
            if c.gap_mismatches and c.gap_max_abs == 0.0:
                gap += f", {c.gap_mismatches} beyond its tolerance{nan_note}"
            if c.depth:
                worst = (f"at {c.bound_at}, where the bound is {c.bound:.3g}" if c.bound_ratio
                         else "(no element errs)")
                verdict = (f"passed within the error bound (largest error/bound "
                           f"{c.bound_ratio:.3g} {worst}; {c.impl_mismatches} elements "
                           f"differ in bits from the oracle)" if c.passed else
                           f"FAILED: error {c.bound_ratio:.3g} times the bound {worst}, "
                           f"diagnosis {c.diagnosis}")
                arith = "" if k.arith == "numpy" else f", {k.arith} arithmetic"
                shape = (f"{c.rows}x{c.depth}x{c.cols}" if k.n_inputs == 2 else
                         f"{c.rows}x{c.depth} row sum")
                lines.append(f"{shape} {c.dtype}->{c.out_dtype} "
                             f"(accumulated in {k.accum}{arith}): {verdict}; {gap}")
                continue
            nan = nan_note if c.impl_max_abs == 0.0 else ""
            verdict = "passed" if c.passed else (
                f"FAILED: {c.impl_mismatches} mismatches{nan}, max abs {c.impl_max_abs!r}, "
                f"diagnosis {c.diagnosis}")
            lines.append(f"{c.rows}x{c.cols} {c.dtype}: {verdict}; {gap}")
        return "\n".join(lines)


def audit(candidate: Callable, contract: Optional[Kernel] = None,
          shapes: Sequence[Tuple[int, int]] = ((8, 128), (9, 129), (17, 257)),
          dtypes: Sequence[str] = ("float32", "bfloat16"),
          originals: Optional[Callable] = None, seed: int = 0,
          report=None, progress: Optional[Callable] = None) -> AuditResult:
    """Audit candidate over every shape x dtype.

    contract defaults to Kernel.axpy(2.0).  originals(shape, n_inputs) gives
    the original float32 inputs of a shape (default: standard normal draws
    from numpy.random.default_rng(seed)); every dtype of a shape uses the
    same originals.  report is a path, or a sequence of paths, written in
    the format of each suffix (each suffix and directory checked before the
    audit runs; a write that fails after it raises with the AuditResult as
    the error's .result); progress is as in Audit.set_progress."""
    if contract is None:
        contract = Kernel.axpy(2.0)
    shapes, dtypes = _shapes(shapes, 2, "rows, cols"), _dtypes(dtypes)
    reports = _reports(report)
    rng = np.random.default_rng(seed)
    draw = originals or (lambda shape, n: [rng.standard_normal(shape, np.float32)
                                           for _ in range(n)])
    a = Audit(contract, candidate, progress)
    for shape in shapes:
        data = draw(tuple(shape), contract.n_inputs)
        for i, d in enumerate(data if originals else ()):
            if np.shape(d) != tuple(shape):
                raise errors.ShapeError(f"originals{tuple(shape)!r} gave input {i} of shape "
                                        f"{np.shape(d)}, not {tuple(shape)}")
        for dtype in dtypes:
            a.add_case(dtype, data)
    passed = a.run()
    result = AuditResult(passed, a.results, a)
    _write_reports(a, result, reports)
    return result


def _dtypes(dtypes):
    """dtypes as a list; a single name alone is refused (iterating it would
    give its letters)."""
    if isinstance(dtypes, (str, bytes)):
        raise errors.InvalidArgumentError(f"dtypes is a sequence of names, not the "
                                          f"{type(dtypes).__name__} {dtypes!r}: give "
                                          f"[{dtypes!r}] for one")
    return list(dtypes)


def _shapes(shapes, rank, names):
    """shapes as tuples of rank positive ints, or InvalidArgumentError."""
    out = []
    for shape in shapes:
        shape = (tuple(shape) if isinstance(shape, (tuple, list, np.ndarray))
                 else (shape,))
        if len(shape) != rank or not all(
                isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d > 0
                for d in shape):
            raise errors.InvalidArgumentError(f"shape {shape!r} is not {rank} positive "
                                              f"integers ({names})")
        out.append(shape)
    return out


def _audit_reduction(contract, candidate, shapes, dtypes, out_dtype, seed, report, progress):
    shapes = _shapes(shapes, 1 + contract.n_inputs, "m, k, n" if contract.n_inputs == 2
                     else "m, k")
    dtypes = _dtypes(dtypes)
    reports = _reports(report)
    rng = np.random.default_rng(seed)
    a = Audit(contract, candidate, progress)
    for shape in shapes:
        m, k = shape[0], shape[1]
        data = [rng.standard_normal((m, k), np.float32)]
        if contract.n_inputs == 2:
            data.append(rng.standard_normal((k, shape[2]), np.float32))
        for dtype in dtypes:
            a.add_reduction_case(dtype, data, out_dtype)
    passed = a.run()
    result = AuditResult(passed, a.results, a)
    _write_reports(a, result, reports)
    return result


def audit_matmul(candidate: Callable, shapes: Sequence[Tuple[int, int, int]] = (
                     (8, 128, 128), (17, 257, 129)),
                 dtypes: Sequence[str] = ("float32", "bfloat16"), out_dtype=None,
                 accum: str = "float32", seed: int = 0, report=None,
                 progress: Optional[Callable] = None, arith: str = "numpy") -> AuditResult:
    """Audit candidate(x, y) -> x @ y over every (m, k, n) x dtype, on
    standard normal originals, under the error bound of accum accumulation
    in arith arithmetic ("xla" or "ftz": subnormals flushed, as XLA and TPUs
    compute; see ARITH); out_dtype is the output's dtype (default: each
    case's dtype); report and progress as in audit()."""
    k = Kernel.matmul(accum)
    k.arith = arith
    return _audit_reduction(k, candidate, shapes, dtypes, out_dtype, seed, report, progress)


def audit_row_sum(candidate: Callable, shapes: Sequence[Tuple[int, int]] = (
                      (8, 128), (17, 257)),
                  dtypes: Sequence[str] = ("float32", "bfloat16"), out_dtype=None,
                  accum: str = "float32", seed: int = 0, report=None,
                  progress: Optional[Callable] = None, arith: str = "numpy") -> AuditResult:
    """Audit candidate(x) -> x.sum(axis=1, keepdims=True) as audit_matmul."""
    k = Kernel.row_sum(accum)
    k.arith = arith
    return _audit_reduction(k, candidate, shapes, dtypes, out_dtype, seed, report, progress)


def rounding_counterexample(dtype="bfloat16", first: float = 1.00390625,
                            second: float = 0.00390625) -> Tuple[float, float]:
    """(early, late): first rounded to dtype, plus second, cast; versus one
    final cast of first + second."""
    early, late = ctypes.c_float(), ctypes.c_float()
    lib.tk_rounding_counterexample(dtype_code(dtype), first, second,
                                   ctypes.byref(early), ctypes.byref(late))
    return early.value, late.value
