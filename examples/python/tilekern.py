"""ctypes binding for libtilekern.

Every function of include/tilekern.h is listed once in FUNCTIONS as
(name, argtypes, restype).  Handles are c_void_p.  Functions whose restype is
STATUS return an int status: a negative one raises TilekernError carrying the
status, its name and tk_strerror + ": " + tk_last_error_message().

The library is found through $TK_LIBRARY, then lib/libtilekern.so.0 of the
repository this file sits in, then ctypes.util.find_library("tilekern").
A function the loaded library does not export (an older build) is left out;
using it raises AttributeError naming it.

    import tilekern as tk
    with tk.Matrix.from_numpy(array, tk.TK_DTYPE_BF16) as m:
        m.save_npy("x.npy")

numpy is optional: only the Matrix numpy conversions need it.
"""
import ctypes
import ctypes.util
import os

try:
    import numpy
except ImportError:  # numpy is optional
    numpy = None

# ---- constants, mirrored from include/tilekern.h (a test compares them) ----

TK_VERSION_MAJOR = 0
TK_VERSION_MINOR = 2
TK_VERSION_PATCH = 0
TK_VERSION_NUMBER = TK_VERSION_MAJOR * 10000 + TK_VERSION_MINOR * 100 + TK_VERSION_PATCH

TK_OK = 0
TK_EINVAL = -1
TK_ENOMEM = -2
TK_EOVERFLOW = -3
TK_ESHAPE = -4
TK_EDTYPE = -5
TK_ELAYOUT = -6
TK_ERANGE = -7
TK_ECAPACITY = -8
TK_ERACE = -9
TK_ENOTARGET = -10
TK_EMISMATCH = -11
TK_EIO = -12
TK_EFORMAT = -13
TK_ESTATE = -14
TK_ECALLBACK = -15

TK_DTYPE_F32 = 1
TK_DTYPE_BF16 = 2
TK_DTYPE_I32 = 3

TK_TILING_TAIL = 101
TK_TILING_GRID_ROWS = 102
TK_TILING_GRID_COLS = 103
TK_TILING_TILES = 104
TK_TILING_PADDED_ROWS = 105
TK_TILING_PADDED_COLS = 106
TK_TILING_PADDED_ELEMENTS = 107
TK_TILING_EXTRA_ELEMENTS = 108
TK_TILING_ROWS = 109
TK_TILING_COLS = 110
TK_TILING_BLOCK_ROWS = 111
TK_TILING_BLOCK_COLS = 112
TK_TAIL_PAD = 1
TK_TAIL_MASK = 2
TK_TAIL_SHIFT_INWARDS = 3

TK_KERNEL_BODY = 201
TK_KERNEL_INPUTS = 202
TK_BODY_ELEMENTWISE = 1
TK_BODY_BLOCKWISE = 2
TK_KERNEL_MAX_INPUTS = 16

TK_DEVICE_ONCHIP_BYTES = 301
TK_DEVICE_ONCHIP_LIMIT_BYTES = 302
TK_DEVICE_HBM_BYTES_PER_S = 303
TK_DEVICE_COPY_LATENCY_NS = 304
TK_DEVICE_COPY_ENGINES = 305
TK_DEVICE_COMPUTE_ELEMS_PER_S = 306
TK_DEVICE_LAYOUT_ROWS = 307
TK_DEVICE_LAYOUT_COLS = 308

TK_PIPE_MODE = 401
TK_PIPE_INPUT_BUFFERS = 402
TK_PIPE_OUTPUT_BUFFERS = 403
TK_PIPE_NO_PIPELINING = 404
TK_PIPE_DETECT_RACES = 405
TK_PIPE_FAULT = 406
TK_MODE_SIMULATE = 1
TK_MODE_TARGET = 2
TK_FAULT_NONE = 0
TK_FAULT_SKIP_INPUT_WAIT = 1
TK_FAULT_PREFETCH_OVERRUN = 2
TK_FAULT_SKIP_OUTPUT_WAIT = 3
TK_FAULT_EARLY_COPY_OUT = 4
TK_HAZARD_UNWAITED_READ = 1
TK_HAZARD_OVERWRITE = 2
TK_HAZARD_UNWAITED_WRITE = 3
TK_HAZARD_EARLY_COPY_OUT = 4
TK_HAZARD_NEVER_WAITED = 5
TK_OPERAND_OUTPUT = -1
TK_STAT_STEPS = 451
TK_STAT_COPIES_IN = 452
TK_STAT_COPIES_OUT = 453
TK_STAT_COPIES_SKIPPED = 454
TK_STAT_BYTES_IN = 455
TK_STAT_BYTES_OUT = 456
TK_STAT_ONCHIP_BYTES = 457
TK_STAT_HAZARDS = 458
TK_STAT_MODELED_NS = 459
TK_STAT_MODELED_COMPUTE_NS = 460
TK_STAT_MODELED_STALL_NS = 461
TK_STAT_OVERLAP = 462
TK_STAT_PADDED_ELEMENTS = 463

TK_BENCH_REPEATS = 801
TK_BENCH_WARMUPS = 802
TK_BENCH_INTERLEAVE = 803
TK_BENCH_MAX_SECONDS = 804
TK_BENCH_BASELINE = 805
TK_BENCH_COMPILE_S = 811
TK_BENCH_MEDIAN_MS = 812
TK_BENCH_P90_MS = 813
TK_BENCH_MIN_MS = 814
TK_BENCH_MAX_MS = 815
TK_BENCH_MEAN_MS = 816
TK_BENCH_STDEV_MS = 817
TK_BENCH_SAMPLES = 818
TK_BENCH_SPEEDUP = 819

TK_COMPARE_MAX_ULP = 601
TK_COMPARE_NAN_POLICY = 602
TK_NAN_MATCH = 1
TK_NAN_ANY = 2
TK_NAN_IGNORE = 3
TK_COMPARE_ELEMENTS = 611
TK_COMPARE_MISMATCHES = 612
TK_COMPARE_MISMATCH_PERCENT = 613
TK_COMPARE_MAX_ABS = 614
TK_COMPARE_MAX_REL = 615
TK_COMPARE_MAX_ULP_SEEN = 616
TK_COMPARE_ULP_HIST_0 = 617
TK_COMPARE_ULP_HIST_1 = 618
TK_COMPARE_ULP_HIST_2 = 619
TK_COMPARE_ULP_HIST_3PLUS = 620
TK_COMPARE_PASSED = 621
TK_COMPARE_ATOL = 622
TK_COMPARE_RTOL = 623
TK_WHERE_MAX_ABS = 1
TK_WHERE_MAX_REL = 2
TK_WHERE_MAX_ULP = 3
TK_WHERE_FIRST_MISMATCH = 4

TK_AUDIT_IMPL_MAX_ABS = 701
TK_AUDIT_IMPL_MAX_ULP = 702
TK_AUDIT_IMPL_MISMATCHES = 703
TK_AUDIT_GAP_MAX_ABS = 704
TK_AUDIT_GAP_MAX_REL = 705
TK_AUDIT_GAP_INPUT_MAX_ABS = 706
TK_AUDIT_GAP_OUTPUT_MAX_ABS = 707
TK_AUDIT_PASSED = 708
TK_AUDIT_GAP_PASSED = 709
TK_AUDIT_GAP_ATOL = 710
TK_AUDIT_GAP_RTOL = 711
TK_AUDIT_SCALE = 712
TK_AUDIT_DIAGNOSIS = 713
TK_AUDIT_ROWS = 714
TK_AUDIT_COLS = 715
TK_AUDIT_DTYPE = 716
TK_AUDIT_GAP_MISMATCHES = 717
TK_SCHEDULE_UNKNOWN = 0
TK_SCHEDULE_FINAL_CAST = 1
TK_SCHEDULE_EARLY_ROUND = 2
TK_SCHEDULE_TRUNCATE = 3
TK_SCHEDULE_FLUSH_SUBNORMAL = 4
TK_SCHEDULE_NOT_RUN = -1
TK_REPORT_TEXT = 1
TK_REPORT_JSON = 2
TK_REPORT_SVG = 3

# ---- the function table ------------------------------------------------------

c_void_p, c_int, c_int64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
c_float, c_double, c_char_p = ctypes.c_float, ctypes.c_double, ctypes.c_char_p
c_size_t, c_uint16, c_uint64 = ctypes.c_size_t, ctypes.c_uint16, ctypes.c_uint64
P = ctypes.POINTER
HANDLE = c_void_p
OUT = P(c_void_p)  # tk_x **out


class STATUS:
    """Marks an int status restype: bound as c_int with the errcheck."""


class STATUS64:
    """Marks an int64_t count-or-status restype: c_int64 with the errcheck."""


BODY_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_int64, c_int64, c_int64,
                           P(P(c_float)), P(c_float))
CANDIDATE_FN = ctypes.CFUNCTYPE(c_int, c_void_p, P(c_void_p), c_void_p)
BENCH_FN = ctypes.CFUNCTYPE(c_int, c_void_p)

FUNCTIONS = [
    # status model
    ("tk_version_number", [], ctypes.c_uint),
    ("tk_version_string", [], c_char_p),
    ("tk_strerror", [c_int], c_char_p),
    ("tk_status_name", [c_int], c_char_p),
    ("tk_last_error_message", [], c_char_p),
    ("tk_param_bounds", [c_int, P(c_int64), P(c_int64)], STATUS),
    # dtypes and bfloat16
    ("tk_dtype_name", [c_int], c_char_p),
    ("tk_dtype_size", [c_int], c_int64),
    ("tk_bf16_from_f32", [c_float], c_uint16),
    ("tk_bf16_to_f32", [c_uint16], c_float),
    ("tk_bf16_from_f32_n", [P(c_uint16), P(c_float), c_size_t], STATUS),
    ("tk_bf16_to_f32_n", [P(c_float), P(c_uint16), c_size_t], STATUS),
    ("tk_ulp_distance", [c_int, c_float, c_float], c_uint64),
    # tk_matrix
    ("tk_matrix_create", [OUT, c_int, c_int64, c_int64], STATUS),
    ("tk_matrix_wrap", [OUT, c_int, c_int64, c_int64, c_int64, c_void_p], STATUS),
    ("tk_matrix_from_f32", [OUT, c_int, c_int64, c_int64, P(c_float), c_int64], STATUS),
    ("tk_matrix_to_f32", [HANDLE, P(c_float), c_int64], STATUS),
    ("tk_matrix_load_npy", [OUT, c_char_p], STATUS),
    ("tk_matrix_save_npy", [HANDLE, c_char_p], STATUS),
    ("tk_matrix_destroy", [HANDLE], None),
    ("tk_matrix_dtype", [HANDLE], c_int),
    ("tk_matrix_rows", [HANDLE], c_int64),
    ("tk_matrix_cols", [HANDLE], c_int64),
    ("tk_matrix_row_stride", [HANDLE], c_int64),
    ("tk_matrix_data", [HANDLE], c_void_p),
    # tk_tiling
    ("tk_tiling_create", [OUT, c_int64, c_int64, c_int64, c_int64], STATUS),
    ("tk_tiling_destroy", [HANDLE], None),
    ("tk_tiling_set", [HANDLE, c_int, c_int64], STATUS),
    ("tk_tiling_get", [HANDLE, c_int, P(c_int64)], STATUS),
    ("tk_tiling_tile", [HANDLE, c_int64, P(c_int64), P(c_int64), P(c_int64), P(c_int64)],
     STATUS),
    ("tk_pad", [HANDLE, HANDLE, OUT], STATUS),
    ("tk_crop", [HANDLE, HANDLE, HANDLE], STATUS),
    # tk_kernel
    ("tk_kernel_axpy", [OUT, c_float], STATUS),
    ("tk_kernel_custom", [OUT, c_int, BODY_FN, c_void_p], STATUS),
    ("tk_kernel_destroy", [HANDLE], None),
    ("tk_kernel_set", [HANDLE, c_int, c_int64], STATUS),
    ("tk_kernel_get", [HANDLE, c_int, P(c_int64)], STATUS),
    ("tk_kernel_run", [HANDLE, HANDLE, P(c_void_p), HANDLE], STATUS),
    # tk_device
    ("tk_device_host", [OUT], STATUS),
    ("tk_device_simulated", [OUT, c_char_p], STATUS),
    ("tk_device_external", [OUT, c_char_p, c_char_p], STATUS),
    ("tk_device_destroy", [HANDLE], None),
    ("tk_device_is_simulated", [HANDLE], c_int),  # 1, 0, or -1 for NULL
    ("tk_device_kind", [HANDLE], c_char_p),
    ("tk_device_platform", [HANDLE], c_char_p),
    ("tk_device_profile_name", [c_int64], c_char_p),
    ("tk_device_set", [HANDLE, c_int, c_int64], STATUS),
    ("tk_device_get", [HANDLE, c_int, P(c_int64)], STATUS),
    # tk_pipeline
    ("tk_pipeline_create", [OUT, HANDLE, HANDLE, HANDLE], STATUS),
    ("tk_pipeline_destroy", [HANDLE], None),
    ("tk_pipeline_set", [HANDLE, c_int, c_int64], STATUS),
    ("tk_pipeline_get", [HANDLE, c_int, P(c_int64)], STATUS),
    ("tk_pipeline_run", [HANDLE, P(c_void_p), HANDLE], STATUS),
    ("tk_pipeline_stat", [HANDLE, c_int, P(c_double)], STATUS),
    ("tk_pipeline_stall", [HANDLE, c_int64, P(c_double)], STATUS),
    ("tk_pipeline_race", [HANDLE, c_int64, P(c_int64), P(c_int64), P(c_int), P(c_int)],
     STATUS),
    ("tk_hazard_name", [c_int], c_char_p),
    ("tk_pipeline_write_trace", [HANDLE, c_char_p], STATUS),
    # tk_compare
    ("tk_compare_create", [OUT, c_int], STATUS),
    ("tk_compare_destroy", [HANDLE], None),
    ("tk_compare_set", [HANDLE, c_int, c_int64], STATUS),
    ("tk_compare_get", [HANDLE, c_int, P(c_int64)], STATUS),
    ("tk_compare_set_tolerance", [HANDLE, c_double, c_double], STATUS),
    ("tk_compare_run", [HANDLE, HANDLE, HANDLE], STATUS),
    ("tk_compare_result", [HANDLE, c_int, P(c_double)], STATUS),
    ("tk_compare_where", [HANDLE, c_int, P(c_int64), P(c_int64), P(c_float), P(c_float)],
     STATUS),
    ("tk_compare_format", [HANDLE, P(ctypes.c_char), c_size_t], STATUS),
    # tk_audit
    ("tk_audit_create", [OUT, HANDLE], STATUS),
    ("tk_audit_destroy", [HANDLE], None),
    ("tk_audit_set_candidate", [HANDLE, CANDIDATE_FN, c_void_p], STATUS),
    ("tk_audit_set_gap_tolerance", [HANDLE, c_int, c_double, c_double], STATUS),
    ("tk_audit_add_case", [HANDLE, c_int, c_int64, c_int64, P(P(c_float))], STATUS),
    ("tk_audit_run", [HANDLE], STATUS),
    ("tk_audit_case_count", [HANDLE], c_int64),
    ("tk_audit_result", [HANDLE, c_int64, c_int, P(c_double)], STATUS),
    ("tk_audit_schedule_name", [c_int], c_char_p),
    ("tk_audit_check_permutation", [HANDLE, c_int64, P(c_int64)], STATUS),
    ("tk_audit_write_report", [HANDLE, c_char_p, c_int], STATUS),
    ("tk_rounding_counterexample", [c_int, c_float, c_float, P(c_float), P(c_float)],
     STATUS),
    ("tk_amdahl", [c_double, c_double], c_double),
    # tk_bench
    ("tk_bench_create", [OUT, HANDLE], STATUS),
    ("tk_bench_destroy", [HANDLE], None),
    ("tk_bench_set", [HANDLE, c_int, c_int64], STATUS),
    ("tk_bench_get", [HANDLE, c_int, P(c_int64)], STATUS),
    ("tk_bench_set_boundary", [HANDLE, c_char_p], STATUS),
    ("tk_bench_add", [HANDLE, c_char_p, HANDLE, BENCH_FN, BENCH_FN, BENCH_FN, c_void_p],
     STATUS),
    ("tk_bench_run", [HANDLE], STATUS),
    ("tk_bench_samples", [HANDLE, c_int, P(c_double), c_int64], STATUS64),
    ("tk_bench_result", [HANDLE, c_int, c_int, P(c_double)], STATUS),
    ("tk_bench_write_receipt", [HANDLE, c_char_p], STATUS),
    ("tk_median", [P(c_double), c_size_t], c_double),
    ("tk_percentile", [P(c_double), c_size_t, c_double], c_double),
]


class TilekernError(Exception):
    """A negative status from libtilekern."""

    def __init__(self, status, name, message):
        super().__init__(f"{name}: {message}")
        self.status, self.name, self.message = status, name, message


def _find_library():
    env = os.environ.get("TK_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.join(here, os.pardir, os.pardir, "lib", "libtilekern.so.0")
    if os.path.exists(repo):
        return os.path.normpath(repo)
    found = ctypes.util.find_library("tilekern")
    if found:
        return found
    raise OSError("libtilekern not found: set TK_LIBRARY, run `make` in the "
                  "repository, or install it (ctypes.util.find_library failed)")


LIBRARY_PATH = _find_library()
_cdll = ctypes.CDLL(LIBRARY_PATH)
MISSING = []  # table entries the loaded library does not export


class _Functions:
    """The bound functions as attributes (also exported at module level)."""

    def __getattr__(self, name):
        if name in MISSING:
            raise AttributeError(f"{name} is in the binding table but not exported by "
                                 f"{LIBRARY_PATH} (a library older than this binding?)")
        raise AttributeError(f"libtilekern has no function {name!r}")


lib = _Functions()


def _check(result, func, args):
    if result < 0:
        raise TilekernError(result, lib.tk_status_name(result).decode(),
                            lib.tk_strerror(result).decode() + ": "
                            + lib.tk_last_error_message().decode())
    return result


def _bind():
    for name, argtypes, restype in FUNCTIONS:
        try:
            fn = getattr(_cdll, name)
        except AttributeError:
            MISSING.append(name)
            continue
        fn.argtypes = argtypes
        fn.restype = {STATUS: c_int, STATUS64: c_int64}.get(restype, restype)
        if restype in (STATUS, STATUS64):
            fn.errcheck = _check
        setattr(lib, name, fn)
        globals()[name] = fn


_bind()


def __getattr__(name):
    """Module attributes not defined: a missing function says why."""
    if name.startswith("tk_"):
        return getattr(lib, name)
    raise AttributeError(f"module 'tilekern' has no attribute {name!r}")


# ---- context managers ---------------------------------------------------------

_NUMPY_DTYPES = {TK_DTYPE_F32: "<f4", TK_DTYPE_BF16: "<u2", TK_DTYPE_I32: "<i4"}


def _need_numpy():
    if numpy is None:
        raise RuntimeError("this Matrix method needs numpy, which is not installed")


class Handle:
    """Owns one handle and destroys it on close() or leaving a `with` block."""

    _destroy = None  # name of the tk_*_destroy function

    def __init__(self, handle):
        self.handle = c_void_p(handle)
        self._free = getattr(lib, self._destroy)  # kept for __del__ at exit

    def close(self):
        if self.handle.value is not None:
            self._free(self.handle)
            self.handle = c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    @property
    def _as_parameter_(self):
        """Lets a Handle be passed wherever the table expects a handle."""
        return self.handle


class Matrix(Handle):
    """A tk_matrix: create it, load or save .npy, convert from/to numpy."""

    _destroy = "tk_matrix_destroy"

    @classmethod
    def create(cls, dtype, rows, cols):
        out = c_void_p()
        lib.tk_matrix_create(ctypes.byref(out), dtype, rows, cols)
        return cls(out.value)

    @classmethod
    def load_npy(cls, path):
        out = c_void_p()
        lib.tk_matrix_load_npy(ctypes.byref(out), os.fsencode(path))
        return cls(out.value)

    @classmethod
    def from_numpy(cls, array, dtype=None):
        """Copy a 2-D array.  float32 data is represented in `dtype`
        (TK_DTYPE_F32 by default, or TK_DTYPE_BF16); uint16 arrays are taken
        as bf16 bits and int32 arrays as TK_DTYPE_I32, stored as they are."""
        _need_numpy()
        array = numpy.asarray(array)
        if array.ndim != 2:
            raise ValueError(f"a 2-D array is needed, not shape {array.shape}")
        rows, cols = array.shape
        if array.dtype == numpy.float32 and dtype in (None, TK_DTYPE_F32, TK_DTYPE_BF16):
            src = numpy.ascontiguousarray(array)
            out = c_void_p()
            lib.tk_matrix_from_f32(ctypes.byref(out), dtype or TK_DTYPE_F32, rows, cols,
                               src.ctypes.data_as(P(c_float)), cols)
            return cls(out.value)
        stored = {numpy.dtype(numpy.uint16): TK_DTYPE_BF16,
                  numpy.dtype(numpy.int32): TK_DTYPE_I32}.get(array.dtype)
        if stored is None or dtype not in (None, stored):
            raise TypeError(f"cannot store a {array.dtype} array as dtype {dtype}")
        m = cls.create(stored, rows, cols)
        src = numpy.ascontiguousarray(array, dtype=_NUMPY_DTYPES[stored])
        ctypes.memmove(m.data, src.ctypes.data, src.nbytes)
        return m

    def save_npy(self, path):
        lib.tk_matrix_save_npy(self, os.fsencode(path))

    def to_numpy(self):
        """A copy of the stored elements (bf16 as uint16 bits)."""
        _need_numpy()
        dt = numpy.dtype(_NUMPY_DTYPES[self.dtype])
        rows, cols, stride = self.rows, self.cols, self.row_stride
        buf = (ctypes.c_char * (dt.itemsize * ((rows - 1) * stride + cols))).from_address(
            self.data)
        view = numpy.ndarray((rows, cols), dt, buf, strides=(stride * dt.itemsize,
                                                             dt.itemsize))
        return view.copy()

    def to_f32(self):
        """The elements promoted to float32 (F32 and BF16 matrices)."""
        _need_numpy()
        out = numpy.empty((self.rows, self.cols), numpy.float32)
        lib.tk_matrix_to_f32(self, out.ctypes.data_as(P(c_float)), self.cols)
        return out

    dtype = property(lambda self: lib.tk_matrix_dtype(self))
    rows = property(lambda self: lib.tk_matrix_rows(self))
    cols = property(lambda self: lib.tk_matrix_cols(self))
    row_stride = property(lambda self: lib.tk_matrix_row_stride(self))
    data = property(lambda self: lib.tk_matrix_data(self))
