"""Matrix: a tk_matrix, owned by the library or wrapping a numpy array
without a copy; dtype names; the bfloat16 conversions."""
import ctypes
import os
import weakref
from typing import Optional, Union

import numpy as np

from . import _ffi, errors
from ._ffi import lib

try:
    import ml_dtypes
except ImportError:  # bit arrays (uint16, uint8) still work
    ml_dtypes = None


def _ml(name: str) -> Optional[np.dtype]:
    return np.dtype(getattr(ml_dtypes, name)) if ml_dtypes is not None else None


BFLOAT16 = _ml("bfloat16")
FLOAT8_E4M3FN = _ml("float8_e4m3fn")
FLOAT8_E5M2 = _ml("float8_e5m2")

__all__ = ["Matrix", "DTYPES", "bf16_from_f32", "bf16_to_f32", "from_f32", "to_f32",
           "ulp_distance"]

DTYPES = {"float32": _ffi.TK_DTYPE_F32, "bfloat16": _ffi.TK_DTYPE_BF16,
          "int32": _ffi.TK_DTYPE_I32, "float16": _ffi.TK_DTYPE_F16,
          "float8_e4m3fn": _ffi.TK_DTYPE_F8E4M3FN, "float8_e5m2": _ffi.TK_DTYPE_F8E5M2}
_NAMES = {code: name for name, code in DTYPES.items()}
_ALIASES = {"f32": "float32", "bf16": "bfloat16", "i32": "int32", "f16": "float16",
            "e4m3fn": "float8_e4m3fn", "e5m2": "float8_e5m2"}
# The numpy dtype of each code's values (None where ml_dtypes is missing),
# and of its raw bits where those are a different array type.
_VALUES = {_ffi.TK_DTYPE_F32: np.dtype("<f4"), _ffi.TK_DTYPE_BF16: BFLOAT16,
           _ffi.TK_DTYPE_I32: np.dtype("<i4"), _ffi.TK_DTYPE_F16: np.dtype("<f2"),
           _ffi.TK_DTYPE_F8E4M3FN: FLOAT8_E4M3FN, _ffi.TK_DTYPE_F8E5M2: FLOAT8_E5M2}
_BITS = {_ffi.TK_DTYPE_BF16: np.dtype("<u2"), _ffi.TK_DTYPE_F16: np.dtype("<u2"),
         _ffi.TK_DTYPE_F8E4M3FN: np.dtype("u1"), _ffi.TK_DTYPE_F8E5M2: np.dtype("u1")}

DtypeLike = Union[str, np.dtype, type]
ArrayOrMatrix = Union[np.ndarray, "Matrix"]


def dtype_code(dtype: DtypeLike) -> int:
    """The TK_DTYPE_* code of a dtype name ("float32", "bfloat16", "int32",
    "float16", "float8_e4m3fn", "float8_e5m2", or f32, bf16, i32, f16,
    e4m3fn, e5m2), or of the numpy / ml_dtypes dtype."""
    if isinstance(dtype, str):
        name = _ALIASES.get(dtype, dtype)
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = None
    if name not in DTYPES:
        raise errors.DtypeError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    return DTYPES[name]


def dtype_name(code: int) -> str:
    return _NAMES[code]


def numpy_dtype(code: int, bits: bool = False) -> np.dtype:
    """The numpy dtype of stored elements: the value dtype (ml_dtypes' for
    bfloat16 and fp8 when installed), or with bits=True, or when ml_dtypes
    is missing, the unsigned integers of the bit patterns."""
    if bits and code in _BITS:
        return _BITS[code]
    return _VALUES[code] if _VALUES[code] is not None else _BITS[code]


def _array_code(array: np.ndarray, dtype: Optional[DtypeLike]) -> int:
    """The dtype code a numpy array is stored as, checking it agrees."""
    have = array.dtype
    code = next((c for c, v in _VALUES.items() if v is not None and have == v), None)
    bits_of = [c for c, b in _BITS.items() if have == b]
    if code is None and not bits_of:
        raise errors.DtypeError(f"arrays of {have} cannot be wrapped: float32, int32, "
                                f"float16, ml_dtypes' bfloat16, float8_e4m3fn and "
                                f"float8_e5m2 can, and uint16 or uint8 bits with the "
                                f"dtype named")
    if dtype is None:
        if code is None:
            raise errors.DtypeError(f"a {have} array is taken as bits only with the dtype "
                                    f"named: one of "
                                    f"{', '.join(dtype_name(c) for c in bits_of)}")
        return code
    want = dtype_code(dtype)
    if code == want or (code is None and want in bits_of):
        return want
    raise errors.DtypeError(f"a {have} array cannot hold {dtype_name(want)} without a "
                            f"copy")


class Matrix(_ffi.Handle):
    """A 2-D row-major array of one of DTYPES.

    ``Matrix.create`` allocates one, ``Matrix.wrap`` borrows a numpy array's
    memory (no copy; the matrix keeps the array alive), ``Matrix.from_f32``
    represents float32 data in a dtype, ``Matrix.load_npy`` reads a file."""

    _destroy = "tk_matrix_destroy"

    def __init__(self, handle, array=None, writable=True, parents=()):
        super().__init__(handle, parents)
        self._array = array  # the wrapped numpy array, kept alive
        self._writable = writable

    @classmethod
    def create(cls, dtype: DtypeLike, rows: int, cols: int) -> "Matrix":
        """A new matrix of rows x cols (contents unspecified)."""
        _ffi.sizes("Matrix.create", rows, cols)
        return cls(_ffi.new_handle(lib.tk_matrix_create, dtype_code(dtype), rows, cols))

    @classmethod
    def wrap(cls, array: np.ndarray, dtype: Optional[DtypeLike] = None) -> "Matrix":
        """Borrow a 2-D numpy array without copying.

        float32, int32, float16 and ml_dtypes' bfloat16, float8_e4m3fn and
        float8_e5m2 arrays give their own dtype; a uint16 array is bfloat16
        or float16 bits, and a uint8 array fp8 bits, when dtype names which.  Rows may have
        any stride as long as each row is contiguous; anything else (column
        strides, negative strides, misaligned or big-endian data) is refused,
        never read wrongly.  A read-only array may be wrapped but not written."""
        if not isinstance(array, np.ndarray):
            raise errors.InvalidArgumentError(
                f"Matrix.wrap takes a numpy array, not {type(array).__name__}; use "
                f"numpy.asarray first (which may copy)")
        if array.ndim != 2 or 0 in array.shape:
            raise errors.ShapeError(f"a non-empty 2-D array is needed, not shape "
                                    f"{array.shape}")
        code = _array_code(array, dtype)
        rows, cols = array.shape
        size = array.itemsize
        row_bytes, col_bytes = array.strides
        if cols > 1 and col_bytes != size:
            raise errors.LayoutError(
                f"rows must be contiguous: the column stride is {col_bytes} bytes, not "
                f"{size}; pass numpy.ascontiguousarray(a) (a copy)")
        if rows == 1:
            row_bytes = cols * size
        if row_bytes % size or row_bytes < cols * size:
            raise errors.LayoutError(
                f"the row stride of {row_bytes} bytes is not a whole number of "
                f"{size}-byte elements at least {cols} long")
        if array.ctypes.data % size:
            raise errors.LayoutError(f"the data at 0x{array.ctypes.data:x} is not aligned "
                                     f"to its {size}-byte elements")
        handle = _ffi.new_handle(lib.tk_matrix_wrap, code, rows, cols, row_bytes // size,
                                 ctypes.c_void_p(array.ctypes.data))
        return cls(handle, array, array.flags.writeable)

    @classmethod
    def from_f32(cls, array, dtype: DtypeLike = "float32") -> "Matrix":
        """A new matrix holding float32 data represented in dtype (round to
        nearest even, as ml_dtypes casts)."""
        src = np.asarray(array)
        if src.dtype.newbyteorder("=") != np.float32:   # either byte order
            raise errors.DtypeError(f"from_f32 takes float32 data, not {src.dtype}")
        if src.ndim != 2:
            raise errors.ShapeError(f"a 2-D array is needed, not shape {src.shape}")
        src = _f32(src)
        return cls(_ffi.new_handle(lib.tk_matrix_from_f32, dtype_code(dtype),
                                   src.shape[0], src.shape[1],
                                   src.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                   src.shape[1]))

    @classmethod
    def load_npy(cls, path: Union[str, bytes, os.PathLike]) -> "Matrix":
        """Read a 2-D .npy file, in any of the forms tk_matrix_load_npy(3)
        lists."""
        return cls(_ffi.new_handle(lib.tk_matrix_load_npy, _ffi.path_arg(path)))

    def save_npy(self, path: Union[str, bytes, os.PathLike]) -> None:
        """Write the matrix as a .npy file."""
        lib.tk_matrix_save_npy(self, _ffi.path_arg(path))

    @property
    def dtype(self) -> str:
        """The dtype's name, one of DTYPES."""
        return dtype_name(lib.tk_matrix_dtype(self))

    @property
    def rows(self) -> int:
        return lib.tk_matrix_rows(self)

    @property
    def cols(self) -> int:
        return lib.tk_matrix_cols(self)

    @property
    def shape(self) -> tuple:
        return (self.rows, self.cols)

    @property
    def row_stride(self) -> int:
        """Elements from one row's start to the next."""
        return lib.tk_matrix_row_stride(self)

    @property
    def writable(self) -> bool:
        """False for a matrix wrapping a read-only array."""
        return self._writable

    def to_numpy(self, copy: bool = False, bits: bool = False) -> np.ndarray:
        """The stored elements as a numpy array.

        By default a view of the matrix's memory (for a wrapped array, an
        array over that same memory), which keeps the memory alive, even
        past close(); copy=True gives an independent copy.  bfloat16 and fp8
        come as ml_dtypes' dtypes when that is installed, else (and, with
        float16, when bits=True) as unsigned bit patterns."""
        view = view_of(self, self._writable, bits)
        if copy:
            return view.copy()
        # A view holds the matrix like a child handle does: close() frees the
        # memory only once the last view is gone.
        self._holders += 1
        weakref.finalize(view.base, self._view_gone)
        return view

    def _view_gone(self):
        self._holders -= 1
        self._release()

    def to_f32(self) -> np.ndarray:
        """A new float32 array of the elements promoted (exactly) to f32."""
        out = np.empty((self.rows, self.cols), np.float32)
        lib.tk_matrix_to_f32(self, out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                             self.cols)
        return out

    def __repr__(self):
        if self.closed:
            return "<tilekern.Matrix closed>"
        return f"<tilekern.Matrix {self.rows}x{self.cols} {self.dtype}>"


def view_of(handle, writable: bool, bits: bool = False) -> np.ndarray:
    """A numpy array over the memory of a matrix handle (a Matrix or a raw
    pointer value), valid while the matrix lives."""
    h = handle if isinstance(handle, Matrix) else ctypes.c_void_p(handle)
    dt = numpy_dtype(lib.tk_matrix_dtype(h), bits)
    rows, cols, stride = lib.tk_matrix_rows(h), lib.tk_matrix_cols(h), \
        lib.tk_matrix_row_stride(h)
    buf = (ctypes.c_char * (dt.itemsize * ((rows - 1) * stride + cols))).from_address(
        lib.tk_matrix_data(h))
    view = np.ndarray((rows, cols), dt, buf, strides=(stride * dt.itemsize, dt.itemsize))
    if not writable:
        view.flags.writeable = False
    return view


def as_matrix(obj, role: str, dtype: Optional[DtypeLike] = None) -> Matrix:
    """obj as a Matrix: a Matrix as it is, a numpy array wrapped (no copy).
    role names the argument in messages; an "output" must be writable."""
    if isinstance(obj, Matrix):
        m = obj
    elif isinstance(obj, np.ndarray):
        m = Matrix.wrap(obj, dtype)
    else:
        raise errors.InvalidArgumentError(
            f"{role} must be a numpy array or a tilekern.Matrix, not {type(obj).__name__}")
    if role.startswith("output") and not m.writable:
        raise errors.InvalidArgumentError(f"{role} wraps a read-only array")
    return m


def _f32(x):
    return _contiguous(x, np.float32)


def _contiguous(x, dtype=None):
    """x as np.ascontiguousarray gives it, in the machine's byte order and
    aligned to its element size, as the bulk conversions take it (a view
    off that alignment, or big-endian, is copied, its values kept)."""
    a = np.ascontiguousarray(x, dtype=dtype)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    return np.require(a, requirements="A")


def bf16_from_f32(x):
    """float32 -> bfloat16 bits (uint16), round to nearest even, NaN quiet
    with its sign; a scalar gives an int, an array (0-d included) an array
    of its shape."""
    if isinstance(x, (str, bytes)):
        raise errors.DtypeError(f"bf16_from_f32 takes float32 values, not {x!r}")
    if np.isscalar(x):
        return lib.tk_bf16_from_f32(float(x))
    src = _f32(x)
    out = np.empty(src.shape, np.uint16)
    lib.tk_bf16_from_f32_n(out.ctypes.data_as(ctypes.POINTER(ctypes.c_uint16)),
                           src.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), src.size)
    return out.reshape(np.shape(x))   # a 0-d x: ascontiguousarray made it 1-d


def bf16_to_f32(bits):
    """bfloat16 bits (uint16, or ml_dtypes.bfloat16 values) -> float32, exact;
    a scalar (an int, a numpy uint16 or bfloat16) gives a float, an array
    (0-d included) an array of its shape.  A float is refused: int(1.5)
    would read as the bits 0x0001."""
    if isinstance(bits, int) and not isinstance(bits, bool):
        return lib.tk_bf16_to_f32(bits)
    if isinstance(bits, (bool, str, bytes)) or (np.isscalar(bits) and
                                                not isinstance(bits, np.generic)):
        raise errors.DtypeError(f"bfloat16 bits are an int, or uint16 or bfloat16 data, "
                                f"not {bits!r}")
    src = _contiguous(bits)
    if src.dtype != np.uint16:
        if BFLOAT16 is None or src.dtype != BFLOAT16:
            raise errors.DtypeError(f"bfloat16 bits are uint16, not {src.dtype}")
        src = src.view(np.uint16)
    if isinstance(bits, np.generic):
        return lib.tk_bf16_to_f32(int(src.reshape(-1)[0]))
    out = np.empty(src.shape, np.float32)
    lib.tk_bf16_to_f32_n(out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                         src.ctypes.data_as(ctypes.POINTER(ctypes.c_uint16)), src.size)
    return out.reshape(np.shape(bits))


def from_f32(x, dtype: DtypeLike) -> np.ndarray:
    """float32 data represented in a float dtype by tk_dtype_from_f32_n: an
    array of x's shape in numpy_dtype(dtype)."""
    code = dtype_code(dtype)
    src = _f32(x)
    out = np.empty(src.shape, numpy_dtype(code))
    lib.tk_dtype_from_f32_n(code, out.ctypes.data_as(ctypes.c_void_p),
                            src.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), src.size)
    return out.reshape(np.shape(x))   # a 0-d x: ascontiguousarray made it 1-d


def to_f32(x, dtype: Optional[DtypeLike] = None) -> np.ndarray:
    """Stored elements (an array of a value dtype, or of bits with dtype
    named) promoted exactly to a new float32 array by tk_dtype_to_f32_n."""
    src = _contiguous(x)
    code = _array_code(src.reshape(1, -1) if src.ndim != 2 else src, dtype)
    out = np.empty(src.shape, np.float32)
    lib.tk_dtype_to_f32_n(code, out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                          src.ctypes.data_as(ctypes.c_void_p), src.size)
    return out.reshape(np.shape(x))


def ulp_distance(dtype: DtypeLike, a: float, b: float) -> int:
    """Units in the last place between a and b in dtype (2**64-1 for NaN)."""
    code = dtype_code(dtype)
    if code == _ffi.TK_DTYPE_I32:   # the C function's NaN answer would read as a distance
        raise errors.DtypeError("ulp_distance needs a float dtype, not int32")
    return lib.tk_ulp_distance(code, _ffi.as_float(a, "ulp_distance: a"),
                             _ffi.as_float(b, "ulp_distance: b"))
