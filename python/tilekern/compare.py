"""Compare: an actual matrix against an expected one, with an explicit
tolerance, a ULP criterion and a NaN policy."""
import ctypes
from typing import Dict, NamedTuple, Optional

from . import _ffi, errors
from ._ffi import lib
from .matrix import as_matrix, dtype_code

__all__ = ["Compare", "Where", "NAN_POLICIES", "COMPARE_RESULTS"]

NAN_POLICIES = {"match": _ffi.TK_NAN_MATCH, "any": _ffi.TK_NAN_ANY,
                "ignore": _ffi.TK_NAN_IGNORE}
COMPARE_RESULTS = {
    "elements": _ffi.TK_COMPARE_ELEMENTS, "mismatches": _ffi.TK_COMPARE_MISMATCHES,
    "mismatch_percent": _ffi.TK_COMPARE_MISMATCH_PERCENT,
    "max_abs": _ffi.TK_COMPARE_MAX_ABS, "max_rel": _ffi.TK_COMPARE_MAX_REL,
    "max_ulp_seen": _ffi.TK_COMPARE_MAX_ULP_SEEN,
    "ulp_hist_0": _ffi.TK_COMPARE_ULP_HIST_0, "ulp_hist_1": _ffi.TK_COMPARE_ULP_HIST_1,
    "ulp_hist_2": _ffi.TK_COMPARE_ULP_HIST_2,
    "ulp_hist_3plus": _ffi.TK_COMPARE_ULP_HIST_3PLUS,
    "passed": _ffi.TK_COMPARE_PASSED, "atol": _ffi.TK_COMPARE_ATOL,
    "rtol": _ffi.TK_COMPARE_RTOL}
_WHERE = {"max_abs": _ffi.TK_WHERE_MAX_ABS, "max_rel": _ffi.TK_WHERE_MAX_REL,
          "max_ulp": _ffi.TK_WHERE_MAX_ULP, "first_mismatch": _ffi.TK_WHERE_FIRST_MISMATCH}


class Where(NamedTuple):
    """Where a maximum was seen, and both values there."""
    row: int
    col: int
    actual: float
    expected: float


class Compare(_ffi.Handle):
    """Compares in dtype (float32, bfloat16, float16, float8_e4m3fn or
    float8_e5m2): an element passes when |actual - expected| <= atol +
    rtol * |expected| (and within max_ulp ULP when max_ulp >= 0), NaNs by
    nan_policy ("match", "any", "ignore").  Without atol and rtol the
    dtype's defaults apply (torch.testing.assert_close's; see
    tk_compare(3)); with either, the other is 0."""

    _destroy = "tk_compare_destroy"

    def __init__(self, dtype="float32", *, atol: Optional[float] = None,
                 rtol: Optional[float] = None, max_ulp: int = -1, nan_policy: str = "match"):
        super().__init__(_ffi.new_handle(lib.tk_compare_create, dtype_code(dtype)))
        if atol is not None or rtol is not None:
            self.set_tolerance(atol or 0.0, rtol or 0.0)
        self.max_ulp = max_ulp
        self.nan_policy = nan_policy

    max_ulp = _ffi.param("compare", _ffi.TK_COMPARE_MAX_ULP, "ULP limit, -1 for none")
    nan_policy = _ffi.param("compare", _ffi.TK_COMPARE_NAN_POLICY, "NaN policy",
                            NAN_POLICIES)

    def set_tolerance(self, atol: float, rtol: float) -> None:
        lib.tk_compare_set_tolerance(self, atol, rtol)

    def run(self, actual, expected) -> bool:
        """Compare; True when every element passes.  A mismatch is a result,
        not an error: the metrics are kept either way."""
        try:
            lib.tk_compare_run(self, as_matrix(actual, "actual"),
                               as_matrix(expected, "expected"))
        except errors.MismatchError:
            return False
        return True

    def result(self, name: str) -> float:
        """One metric of the last run (see COMPARE_RESULTS)."""
        if name not in COMPARE_RESULTS:
            raise errors.InvalidArgumentError(f"no compare result {name!r}")
        value = ctypes.c_double()
        lib.tk_compare_result(self, COMPARE_RESULTS[name], ctypes.byref(value))
        return value.value

    @property
    def results(self) -> Dict[str, float]:
        return {name: self.result(name) for name in COMPARE_RESULTS}

    def where(self, which: str = "max_abs") -> Where:
        """Position and values of "max_abs", "max_rel", "max_ulp" or
        "first_mismatch"."""
        if which not in _WHERE:
            raise errors.InvalidArgumentError(f"where: {which!r} is not one of "
                                              f"{', '.join(_WHERE)}")
        row, col = ctypes.c_int64(), ctypes.c_int64()
        a, e = ctypes.c_float(), ctypes.c_float()
        lib.tk_compare_where(self, _WHERE[which], ctypes.byref(row), ctypes.byref(col),
                             ctypes.byref(a), ctypes.byref(e))
        return Where(row.value, col.value, a.value, e.value)

    def format(self) -> str:
        """The multi-line summary of the last run."""
        size = 4096
        while True:
            buf = ctypes.create_string_buffer(size)
            try:
                lib.tk_compare_format(self, buf, size)
            except errors.RangeError:
                size *= 4
                continue
            return buf.value.decode()
