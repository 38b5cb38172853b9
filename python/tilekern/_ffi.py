"""The ctypes layer: finds and loads libtilekern, binds every C function from
one table of (name, argtypes, restype), mirrors the header's constants, and
turns negative statuses into exceptions.

Users never need this module; the classes of the package wrap it.  It is
importable as ``tilekern._ffi`` for the odd call the classes do not cover.

Where the library comes from, first match wins:
 1. ``$TK_LIBRARY``, a path to ``libtilekern.so.0`` (an explicit override);
 2. the path recorded when the package was built: the copy bundled inside the
    package by ``pip install ./python``, or the installed library named by
    ``TK_LIBRARY`` at build time;
 3. the system's loader (``ctypes.util.find_library("tilekern")``).
"""
import ctypes
import ctypes.util
import operator
import os
import signal
import threading

from . import errors

# The library version this package was written for: older ones lack calls
# the package makes; a different major version has a different ABI.
REQUIRED_VERSION = (0, 6, 0)

# ---- constants, mirrored from include/tilekern.h (a test compares them) ----


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
TK_DTYPE_F16 = 4
TK_DTYPE_F8E4M3FN = 5
TK_DTYPE_F8E5M2 = 6

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
TK_KERNEL_ARITH = 203
TK_KERNEL_ACCUM = 204
TK_KERNEL_UNDO = 205
TK_KERNEL_THREADS = 206
TK_KERNEL_THREAD_SAFE = 207
TK_KERNEL_MAX_THREADS = 256
TK_ARITH_NUMPY = 0
TK_ARITH_FMA = 1
TK_ARITH_FTZ = 2
TK_ARITH_XLA = 3
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
TK_PIPE_MAX_BUFFERS = 65536
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

TK_CALL_MAX_RANK = 3
TK_CALL_MAX_OPERANDS = 16
TK_CALL_INPUT = 1
TK_CALL_OUTPUT = 2
TK_DIM_PARALLEL = 1
TK_DIM_ARBITRARY = 2
TK_CALL_PAD = 1001
TK_CALL_RANK = 1002
TK_CALL_STEPS = 1003
TK_CALL_INPUTS = 1004
TK_CALL_OUTPUTS = 1005
TK_CALL_UNDO = 1006
TK_CALL_ROUND_STEPS = 1007
TK_PAD_ZERO = 1
TK_PAD_NAN = 2
TK_PAD_VALUE = 3

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
TK_AUDIT_BOUND_RATIO = 718
TK_AUDIT_BOUND = 719
TK_AUDIT_BOUND_ROW = 720
TK_AUDIT_BOUND_COL = 721
TK_AUDIT_DEPTH = 722
TK_AUDIT_OUT_DTYPE = 723
TK_SCHEDULE_UNKNOWN = 0
TK_SCHEDULE_FINAL_CAST = 1
TK_SCHEDULE_EARLY_ROUND = 2
TK_SCHEDULE_TRUNCATE = 3
TK_SCHEDULE_FLUSH_SUBNORMAL = 4
TK_SCHEDULE_FUSED_MULADD = 5
TK_SCHEDULE_SEPARATE_MULADD = 6
TK_SCHEDULE_KEEP_SUBNORMAL = 7
TK_SCHEDULE_PRODUCTS_ROUNDED = 8
TK_SCHEDULE_K_TAIL = 9
TK_SCHEDULE_BF16_ACCUM = 10
TK_SCHEDULE_F16_ACCUM = 11
TK_SCHEDULE_NO_INIT = 12
TK_SCHEDULE_XLA_ARITH = 13
TK_SCHEDULE_NUMPY_ARITH = 14
TK_SCHEDULE_FUSED_KEEP_SUBNORMAL = 15
TK_SCHEDULE_SEPARATE_FLUSH = 16
TK_SCHEDULE_K_TAIL_PADDING = 17
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
                           P(c_void_p), c_void_p)
CANDIDATE_FN = ctypes.CFUNCTYPE(c_int, c_void_p, P(c_void_p), c_void_p)
PROGRESS_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_int64, c_char_p, c_double)
BENCH_FN = ctypes.CFUNCTYPE(c_int, c_void_p)


class Block(ctypes.Structure):
    """struct tk_block: what a tk_call body sees of one operand."""
    _fields_ = [("size", c_size_t), ("data", c_void_p), ("ld", c_int64),
                ("rows", c_int64), ("cols", c_int64), ("valid_rows", c_int64),
                ("valid_cols", c_int64), ("block_row", c_int64), ("block_col", c_int64),
                ("grid", c_int64 * 3), ("rank", c_int), ("operand", c_int),
                ("is_output", c_int)]


CALL_BODY_FN = ctypes.CFUNCTYPE(c_int, c_void_p, P(P(Block)), c_int)
INDEX_MAP_FN = ctypes.CFUNCTYPE(c_int, c_void_p, P(c_int64), c_int, P(c_int64), P(c_int64))

FUNCTIONS = [
    # status model
    ("tk_version_number", [], ctypes.c_uint),
    ("tk_version_string", [], c_char_p),
    ("tk_build_info", [], c_char_p),
    ("tk_strerror", [c_int], c_char_p),
    ("tk_status_name", [c_int], c_char_p),
    ("tk_last_error_message", [], c_char_p),
    ("tk_param_bounds", [c_int, P(c_int64), P(c_int64)], STATUS),
    ("tk_format_number", [ctypes.c_double, c_char_p, ctypes.c_size_t], STATUS),
    # dtypes and bfloat16
    ("tk_dtype_name", [c_int], c_char_p),
    ("tk_dtype_size", [c_int], c_int64),
    ("tk_bf16_from_f32", [c_float], c_uint16),
    ("tk_bf16_to_f32", [c_uint16], c_float),
    ("tk_bf16_from_f32_n", [P(c_uint16), P(c_float), c_size_t], STATUS),
    ("tk_bf16_to_f32_n", [P(c_float), P(c_uint16), c_size_t], STATUS),
    ("tk_dtype_from_f32_n", [c_int, c_void_p, P(c_float), c_size_t], STATUS),
    ("tk_dtype_to_f32_n", [c_int, P(c_float), c_void_p, c_size_t], STATUS),
    ("tk_kernel_matmul", [OUT], STATUS),
    ("tk_kernel_row_sum", [OUT], STATUS),
    ("tk_audit_add_reduction_case", [HANDLE, c_int, c_int, c_int64, c_int64, c_int64,
                                     P(P(c_float))], STATUS),
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
    ("tk_pipeline_create_call", [OUT, HANDLE, HANDLE], STATUS),
    ("tk_pipeline_run_call", [HANDLE, c_int, P(c_void_p), c_int, P(c_void_p)], STATUS),
    ("tk_pipeline_set_buffers", [HANDLE, c_int, c_int, c_int64], STATUS),
    # tk_call
    ("tk_call_create", [OUT, c_int, P(c_int64), CALL_BODY_FN, c_void_p], STATUS),
    ("tk_call_create_kernel", [OUT, HANDLE, HANDLE, c_int], STATUS),
    ("tk_call_destroy", [HANDLE], None),
    ("tk_call_add_input", [HANDLE, c_int, c_int64, c_int64, c_int64, c_int64, P(c_int64)],
     STATUS),
    ("tk_call_add_output", [HANDLE, c_int, c_int64, c_int64, c_int64, c_int64, P(c_int64)],
     STATUS),
    ("tk_call_set_map", [HANDLE, c_int, c_int, INDEX_MAP_FN, c_void_p], STATUS),
    ("tk_call_set_dimension", [HANDLE, c_int, c_int], STATUS),
    ("tk_call_set", [HANDLE, c_int, c_int64], STATUS),
    ("tk_call_get", [HANDLE, c_int, P(c_int64)], STATUS),
    ("tk_call_set_pad_value", [HANDLE, c_float], STATUS),
    ("tk_call_run", [HANDLE, c_int, P(c_void_p), c_int, P(c_void_p)], STATUS),
    ("tk_call_check_padding", [HANDLE, c_int, P(c_void_p), P(c_int64)], STATUS),
    ("tk_call_stat", [HANDLE, c_int, P(c_double)], STATUS),
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
    ("tk_audit_set_progress", [HANDLE, PROGRESS_FN, c_void_p], STATUS),
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


_STATUS_RESTYPES = {STATUS: c_int, STATUS64: c_int64}


def _candidates():
    env = os.environ.get("TK_LIBRARY")
    if env:
        yield env, "$TK_LIBRARY"
    try:
        from ._library import RECORDED
    except ImportError:
        RECORDED = None
    if RECORDED:
        here = os.path.dirname(os.path.abspath(__file__))
        yield os.path.join(here, RECORDED), "the path recorded at install time"
    found = ctypes.util.find_library("tilekern")
    if found:
        yield found, "the system's library path"


def _load():
    tried = []
    for path, origin in _candidates():
        try:
            cdll = ctypes.CDLL(path)
        except OSError as e:
            if origin == "$TK_LIBRARY":  # an explicit choice never falls back
                raise ImportError(f"tilekern: cannot load {path} ($TK_LIBRARY): {e}") from None
            tried.append(f"{path} ({origin}): {e}")
            continue
        return cdll, path
    raise ImportError("tilekern: libtilekern.so.0 was not found; tried: "
                      + ("; ".join(tried) if tried else "nothing: no $TK_LIBRARY, no "
                         "recorded path, and the system's loader knows no libtilekern")
                      + ". Install the package with `pip install ./python` from the "
                      "repository, or set TK_LIBRARY to the library's path.")


_cdll, LIBRARY_PATH = _load()


def _check_version():
    try:
        number = _cdll.tk_version_number
    except AttributeError:
        raise ImportError(f"tilekern: {LIBRARY_PATH} is not libtilekern "
                          "(it has no tk_version_number)") from None
    number.restype = ctypes.c_uint
    v = number()
    have = (v // 10000, v // 100 % 100, v % 100)
    need = REQUIRED_VERSION
    if have[0] != need[0] or have < need:
        raise ImportError("tilekern: %s is libtilekern %d.%d.%d; this package needs "
                          "%d.%d.%d or a later %d.x release" % ((LIBRARY_PATH,) + have
                                                                 + need + (need[0],)))
    return have


LIBRARY_VERSION = _check_version()


def _text(raw):
    return raw.decode("utf-8", "replace") if raw is not None else None


def error_for(status):
    """The exception for a negative status, with the thread's message."""
    return errors.from_status(status, _text(lib.tk_strerror(status)),
                              _text(lib.tk_last_error_message()))


def _check(result, func, args):
    if result < 0:
        raise error_for(result)
    return result


class _Functions:
    """The bound C functions as attributes."""


lib = _Functions()


# c_size_t is c_uint64 on the 64-bit platforms the library supports.
_INTS = {c_int: ("int", -2**31, 2**31 - 1), c_int64: ("int64_t", -2**63, 2**63 - 1),
         c_uint16: ("uint16_t", 0, 2**16 - 1), c_uint64: ("a 64-bit size", 0, 2**64 - 1)}


_KINDS = {}   # argument type -> what _checked looks for in it


def _refuse_ints(name, args, ranges):
    """The error for _checked's first integer argument that its C type
    cannot hold (the slow path, off the calls' fast one)."""
    for i, (a, r) in enumerate(zip(args, ranges)):
        if r is None:
            continue
        try:
            v = operator.index(a)
        except TypeError:
            return errors.InvalidArgumentError(f"{name}: argument {i + 1} must be an "
                                               f"integer, not {a!r}")
        if not r[1] <= v <= r[2]:
            return errors.SizeOverflowError(f"{name}: {v} does not fit {r[0]} "
                                            f"(argument {i + 1})")
    return None


def _checked(fn):
    """fn, refusing before ctypes sees them a closed handle (StateError),
    an integer argument the C type cannot hold (SizeOverflowError: ctypes
    would wrap it silently) and a non-integer one (InvalidArgumentError:
    ctypes would raise ctypes.ArgumentError, or truncate)."""
    name = fn.__name__
    ranges = tuple(_INTS.get(t) for t in fn.argtypes)

    def call(*args):
        held = ()
        for a, r in zip(args, ranges):
            if r is not None:
                if type(a) is not int or not r[1] <= a <= r[2]:
                    try:   # numpy's integers have __index__, floats not
                        if r[1] <= operator.index(a) <= r[2]:
                            continue
                    except TypeError:
                        pass
                    raise _refuse_ints(name, args, ranges)
                continue
            kind = _KINDS.get(type(a))
            if kind is None:   # 0: a value or pointer, 1: a Handle, 2: maybe handles
                kind = _KINDS[type(a)] = (1 if hasattr(a, "_release") else
                                          2 if isinstance(a, ctypes.Array) else 0)
            if kind == 1:
                if a._closing:
                    raise errors.StateError(f"this {type(a).__name__} is closed")
                held += (a,)
            elif kind == 2:
                held += getattr(a, "_handles", ())
        # A callback (of this call, or of another thread's) may close a
        # handle the call uses: it outlives the call.
        if not held:
            return fn(*args)
        for h in held:
            h._holders += 1
        try:
            return fn(*args)
        finally:
            for h in held:
                h._holders -= 1
                h._release()
    call.__name__ = call.__qualname__ = name
    return call


def _bind():
    for name, argtypes, restype in FUNCTIONS:
        fn = getattr(_cdll, name)  # the version check makes every name present
        fn.argtypes = argtypes
        fn.restype = _STATUS_RESTYPES.get(restype, restype)
        if restype in _STATUS_RESTYPES:
            fn.errcheck = _check
        setattr(lib, name, _checked(fn))


_bind()
errors._DESCRIPTIONS.update({s: _text(lib.tk_strerror(s)) for s in errors._CLASSES})


# ---- Python callbacks -----------------------------------------------------------
#
# A Python callback never lets an exception reach ctypes (which would print it
# and return 0, as if the callback had succeeded).  The trampoline stores the
# exception in the innermost guard of the calling thread and returns non-zero,
# so the C call fails with TK_ECALLBACK; the guard then re-raises the stored
# exception itself, chained to the library's error.

class _Local(threading.local):
    def __init__(self):   # on each thread's first use: no AttributeError path after
        self.guards = []   # the CallbackGuards entered, innermost last


_local = _Local()

# Ctrl-C.  During a C call Python acts on a signal only when a callback
# runs, and at its first instruction, before the trampoline's try: raised
# there, KeyboardInterrupt would be lost in ctypes.  So the outermost guard
# on the main thread, where SIGINT has Python's default handler, puts in one
# that raises only inside a trampoline's try (the callback's own code) and
# elsewhere notes the key; the main thread's next callback then raises
# KeyboardInterrupt inside its try, which stops the C call cleanly, and the
# guard raises it when no callback ran after it.  A second Ctrl-C raises at
# once, as usual.  Other threads' callbacks leave the key to the main one.
_MAIN = threading.main_thread().ident
try:   # signal.signal's enum conversions cost 4 us a call; the C module's 0.3
    import _signal as _sig
except ImportError:
    _sig = signal
_sigint = [False, 0]   # a Ctrl-C is pending; main-thread trampolines inside their try


def _note_sigint(signum, frame):
    if _sigint[0] or _sigint[1]:
        raise KeyboardInterrupt
    _sigint[0] = True


class CallbackGuard:
    """Wraps one C call that may run Python callbacks (a context manager)."""

    def __init__(self):
        self.error = None
        self._sigint = None  # the handler put back on exit
        self._inside = None  # a nested guard's: the callbacks' count it hid

    def __enter__(self):
        stack = _local.guards
        main = threading.get_ident() == _MAIN
        if main and stack and not _sigint[1]:
            # Guards nest only through callbacks, which count themselves: one
            # left here by an exit that a second Ctrl-C cut short.
            stack.clear()
        if main and stack:
            # Its callbacks' code is where a key may raise, not the outer
            # callback's, whose count would let one raise before their try.
            self._inside, _sigint[1] = _sigint[1], 0
        elif main and _sig.getsignal(_sig.SIGINT) in (_sig.default_int_handler,
                                                      _note_sigint):
            _sigint[:] = [False, 0]
            self._sigint = _sig.signal(_sig.SIGINT, _note_sigint)
            if self._sigint is _note_sigint:   # left by that cut-short exit
                self._sigint = _sig.default_int_handler
        stack.append(self)
        return self

    def __exit__(self, kind, value, tb):
        try:
            if self._sigint is not None:
                _sig.signal(_sig.SIGINT, self._sigint)
            if self._inside is not None:
                _sigint[1], self._inside = self._inside, None
        finally:
            _local.guards.pop()
        error, self.error = self.error, None
        if self._sigint is not None:
            self._sigint = None
            if _sigint[0] and not isinstance(value, KeyboardInterrupt):
                if not isinstance(error, KeyboardInterrupt):
                    error = KeyboardInterrupt()
            _sigint[:] = [False, 0]
        if error is None:
            return False
        if isinstance(value, errors.TilekernError):
            raise error from value
        # The C call returned success although a callback raised (a caller
        # that ignores failures): the exception still reaches the user.
        raise error


def trampoline(fn, ctype):
    """A ctypes callback of type ctype around fn: a Python exception becomes a
    failure (1) recorded for the innermost CallbackGuard of this thread; fn's
    return value is ignored, its returning is success (0)."""

    def call(*args):
        stack = _local.guards
        guard = stack[-1] if stack else None
        if guard is not None and guard.error is not None:
            return 1  # an earlier callback of this call failed: stop quickly
        try:
            if threading.get_ident() != _MAIN:
                fn(*args)
                return 0
            _sigint[1] += 1
            try:
                if _sigint[0]:
                    _sigint[0] = False
                    raise KeyboardInterrupt
                fn(*args)
            finally:
                _sigint[1] -= 1
        except BaseException as e:  # noqa: B902 - KeyboardInterrupt included
            if guard is None:
                raise
            guard.error = e
            return 1
        return 0

    return ctype(call)


def path_arg(path):
    """str, bytes or os.PathLike, as the bytes the C library takes."""
    return os.fsencode(os.fspath(path))


def check_writable(path, what):
    """FileError unless the library's writer could put a file at path: for
    a file written after long work, checked before it (the writer itself
    still leaves the old file as it was if the write fails later)."""
    p = os.fsdecode(os.fspath(path))
    d = os.path.dirname(p) or "."
    if not p or p.endswith(os.sep) or os.path.isdir(p):
        raise errors.FileError(f"{what} {p!r} is not a path to a file")
    if not os.path.isdir(d):
        raise errors.FileError(f"{what} {p!r}: no directory {d!r}")
    if not os.access(d, os.W_OK | os.X_OK):
        raise errors.FileError(f"{what} {p!r}: the directory {d!r} is not writable")
    if os.path.exists(p) and not os.access(p, os.W_OK):   # as the writer refuses it
        raise errors.FileError(f"{what} {p!r} is not writable")


class Handle:
    """Owns one C handle: close() (idempotent), a context manager, and the
    Python objects of the handles it refers to (its parents) kept alive.

    The C library keeps pointers to parents (a pipeline to its kernel, tiling
    and device), so a parent closed while a child still uses it is destroyed
    only after its last child: close() means "I am done with it"."""

    _destroy = None  # name of the tk_*_destroy function

    def __init__(self, handle, parents=()):
        self._h = handle
        self._parents = tuple(p for p in parents if p is not None)
        self._holders = 0
        self._closing = False
        self._free = getattr(lib, self._destroy)  # kept for __del__ at exit
        for p in self._parents:
            p._holders += 1

    @property
    def _as_parameter_(self):
        return ctypes.c_void_p(self._h)  # the bound functions refuse closed handles

    @property
    def closed(self) -> bool:
        """True once close() was called."""
        return self._closing

    def close(self) -> None:
        """Release the handle (again: no-op).  Children keep it until they go."""
        if not self._closing:
            self._closing = True
            self._release()

    def _release(self):
        if not (self._closing and self._holders == 0 and self._h):
            return
        self._free(ctypes.c_void_p(self._h))
        self._h = None
        parents, self._parents = self._parents, ()
        for p in parents:
            p._holders -= 1
            p._release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_free", None) is not None:
            self.close()


def sizes(name, *values):
    """Refuse a bool among values: Python's True is the integer 1, which a
    size must not silently be."""
    for v in values:
        if isinstance(v, bool):   # (numpy's bool has no __index__: refused anyway)
            raise errors.InvalidArgumentError(f"{name}: a size must be an integer, not {v!r}")


def new_handle(create, *args):
    """Call tk_*_create(&out, *args) and return the new handle (an int)."""
    out = ctypes.c_void_p()
    create(ctypes.byref(out), *args)
    return out.value


def get_param(getter, handle, param):
    value = c_int64()
    getter(handle, param, ctypes.byref(value))
    return value.value


class _Param(property):
    """A property that learns its name (Class.attribute), for messages."""

    def __set_name__(self, owner, name):
        self.named[0] = f"{owner.__name__}.{name}"


def param(prefix, code, doc, values=None, readonly=False, kind=int):
    """A property over tk_<prefix>_get/_set of one integer parameter.  values
    maps Python names to the parameter's codes (an enum parameter); kind is
    int or bool."""
    names = {v: k for k, v in values.items()} if values else None
    named = [doc]

    def fget(self):
        raw = get_param(getattr(lib, f"tk_{prefix}_get"), self, code)
        return names.get(raw, raw) if names else kind(raw)

    def fset(self, value):
        getattr(lib, f"tk_{prefix}_set")(self, code, encode(value, values, named[0], kind))

    prop = _Param(fget, None if readonly else fset, doc=doc)
    prop.named = named
    return prop


def encode(value, values, what, kind=int):
    """A parameter value as the int the library takes: a name from values,
    or an integer of any type (bools are 0 and 1); kind (int or bool) names
    what a plain parameter takes in messages."""
    if values and isinstance(value, str):
        if value not in values:
            raise errors.InvalidArgumentError(
                f"{what}: {value!r} is not one of {', '.join(map(repr, values))}")
        return values[value]
    if getattr(getattr(value, "dtype", None), "kind", "") == "b":
        return int(value)   # numpy's bool, which has no __index__
    try:
        return operator.index(value)   # int, bool and numpy's integers
    except TypeError:
        pass
    want = "a name or an int" if values else "a bool" if kind is bool else "an int"
    raise errors.InvalidArgumentError(f"{what}: {value!r} is not {want}")


def text(raw):
    """A C string as str (None stays None)."""
    return _text(raw)


def as_int(value, what, int64=False):
    """value as an int (any integer type, numpy's and JAX's scalars
    included), or InvalidArgumentError: int() would truncate 2.5 to 2.
    int64: one that int64_t holds, or SizeOverflowError (ctypes wraps)."""
    try:
        v = operator.index(value)
    except TypeError:
        raise errors.InvalidArgumentError(f"{what} {value!r} is not an integer") from None
    if int64 and not _INTS[c_int64][1] <= v <= _INTS[c_int64][2]:
        raise errors.SizeOverflowError(f"{what} {v} does not fit int64_t")
    return v


def as_float(value, what):
    """value as a float (any real number, numpy's included), or
    InvalidArgumentError naming it: ctypes's own error names neither."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__float__"):
        raise errors.InvalidArgumentError(f"{what} {value!r} is not a number")
    return float(value)


def as_str(value, what):
    """value, a str, or InvalidArgumentError naming it."""
    if not isinstance(value, str):
        raise errors.InvalidArgumentError(f"{what} {value!r} is not a str")
    return value


def handle_array(handles):
    """A C array of handles (for const tk_matrix *const *)."""
    for h in handles:
        if h._closing:
            raise errors.StateError(f"this {type(h).__name__} is closed")
    array = (c_void_p * max(len(handles), 1))(*[h._as_parameter_.value for h in handles])
    array._handles = tuple(handles)  # held by the call it is passed to
    return array
