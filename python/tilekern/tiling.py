"""Tiling: how a logical shape maps onto blocks, with padding and tails."""
import ctypes
from typing import Tuple

from . import _ffi
from ._ffi import lib
from .matrix import Matrix, as_matrix

__all__ = ["Tiling", "TAILS"]

TAILS = {"pad": _ffi.TK_TAIL_PAD, "mask": _ffi.TK_TAIL_MASK,
         "shift_inwards": _ffi.TK_TAIL_SHIFT_INWARDS}


def _ro(code, doc):
    return _ffi.param("tiling", code, doc, readonly=True)


class Tiling(_ffi.Handle):
    """rows x cols split into block_rows x block_cols blocks.

    tail is how edge blocks are handled: "mask" (default: edge tiles through
    one scratch block), "pad" (materialized zero padding, then a crop) or
    "shift_inwards" (edge tiles moved back inside the shape)."""

    _destroy = "tk_tiling_destroy"

    def __init__(self, rows: int, cols: int, block_rows: int, block_cols: int,
                 tail: str = "mask"):
        _ffi.sizes("Tiling", rows, cols, block_rows, block_cols)
        super().__init__(_ffi.new_handle(lib.tk_tiling_create, rows, cols, block_rows,
                                         block_cols))
        self.tail = tail

    tail = _ffi.param("tiling", _ffi.TK_TILING_TAIL, "the tail strategy", TAILS)
    rows = _ro(_ffi.TK_TILING_ROWS, "logical rows")
    cols = _ro(_ffi.TK_TILING_COLS, "logical columns")
    block_rows = _ro(_ffi.TK_TILING_BLOCK_ROWS, "rows of a block")
    block_cols = _ro(_ffi.TK_TILING_BLOCK_COLS, "columns of a block")
    grid_rows = _ro(_ffi.TK_TILING_GRID_ROWS, "blocks down")
    grid_cols = _ro(_ffi.TK_TILING_GRID_COLS, "blocks across")
    tiles = _ro(_ffi.TK_TILING_TILES, "blocks in all")
    padded_rows = _ro(_ffi.TK_TILING_PADDED_ROWS, "rows rounded up to whole blocks")
    padded_cols = _ro(_ffi.TK_TILING_PADDED_COLS, "columns rounded up to whole blocks")
    padded_elements = _ro(_ffi.TK_TILING_PADDED_ELEMENTS, "grid x block elements")
    extra_elements = _ro(_ffi.TK_TILING_EXTRA_ELEMENTS,
                         "elements the tail strategy adds to the logical shape")

    @property
    def shape(self) -> Tuple[int, int]:
        return (self.rows, self.cols)

    @property
    def block(self) -> Tuple[int, int]:
        return (self.block_rows, self.block_cols)

    @property
    def grid(self) -> Tuple[int, int]:
        return (self.grid_rows, self.grid_cols)

    def tile(self, index: int) -> Tuple[int, int, int, int]:
        """(row0, col0, rows, cols): the valid region of tile index."""
        vals = [ctypes.c_int64() for _ in range(4)]
        lib.tk_tiling_tile(self, index, *[ctypes.byref(v) for v in vals])
        return tuple(v.value for v in vals)

    def pad(self, src) -> Matrix:
        """A new zero-padded copy of src (a Matrix or numpy array) of the
        padded shape."""
        out = ctypes.c_void_p()
        lib.tk_pad(self, as_matrix(src, "src"), ctypes.byref(out))
        return Matrix(out.value)

    def crop(self, padded, dst) -> None:
        """Copy the logical region of padded into dst."""
        lib.tk_crop(self, as_matrix(padded, "padded"), as_matrix(dst, "output dst"))

    def __repr__(self):
        if self.closed:
            return "<tilekern.Tiling closed>"
        return (f"<tilekern.Tiling {self.rows}x{self.cols} in {self.block_rows}x"
                f"{self.block_cols} blocks, tail {self.tail!r}>")
