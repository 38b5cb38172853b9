"""Call: pallas_call's grid and BlockSpecs run on the host, with Pallas's
TPU semantics (skipped copies, resident outputs, NaN-initialized outputs,
padding fills, revisit checks)."""
import ctypes
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from . import _ffi, errors
from ._ffi import lib
from .kernel import f32_view, operands
from .matrix import as_matrix, dtype_code, numpy_dtype

__all__ = ["Call", "BlockSpec", "Step", "DIMENSIONS", "PADS"]

DIMENSIONS = {"parallel": _ffi.TK_DIM_PARALLEL, "arbitrary": _ffi.TK_DIM_ARBITRARY}
PADS = {"zero": _ffi.TK_PAD_ZERO, "nan": _ffi.TK_PAD_NAN}
_STATS = {"steps": _ffi.TK_STAT_STEPS, "copies_in": _ffi.TK_STAT_COPIES_IN,
          "copies_out": _ffi.TK_STAT_COPIES_OUT,
          "copies_skipped": _ffi.TK_STAT_COPIES_SKIPPED,
          "bytes_in": _ffi.TK_STAT_BYTES_IN, "bytes_out": _ffi.TK_STAT_BYTES_OUT}


class BlockSpec(NamedTuple):
    """One operand: its logical shape, its block shape, its index map and
    its dtype.  index_map takes the grid index (one int per axis) and gives
    the block index (row, col), as in Pallas; an affine map can instead be
    given as its 2 x (rank + 1) integer matrix (rows [A | b]), which runs
    without calling back into Python."""
    shape: Tuple[int, int]
    block: Tuple[int, int]
    index_map: object = None
    dtype: str = "float32"


class Step(NamedTuple):
    """What the body learns of the step besides the blocks: the grid index,
    and per operand (inputs, then outputs) its block index and the part of
    the block inside the operand's logical shape."""
    grid: Tuple[int, ...]
    block_index: List[Tuple[int, int]]
    valid: List[Tuple[int, int]]


def _index_map_trampoline(fn):
    def index_map(user, grid, rank, row, col):
        g = [grid[a] for a in range(rank)]
        got = fn(*g)
        try:
            pair = tuple(got)
        except TypeError:
            pair = ()
        if len(pair) != 2:   # as a rank-3 map on a rank-2 grid gives
            raise errors.InvalidArgumentError(
                f"the index map gives {got!r} for grid index {tuple(g)}: a block index "
                f"is two integers, (row, col)")
        r, c = (_ffi.as_int(v, f"the index map's block index for grid index {tuple(g)}")
                for v in pair)
        for v in (r, c):
            if not -2**63 <= v < 2**63:  # ctypes would wrap it silently
                raise errors.RangeError(f"the index map sends grid index {tuple(g)} to "
                                        f"block ({r}, {c}), beyond int64")
        row[0], col[0] = r, c

    return _ffi.trampoline(index_map, _ffi.INDEX_MAP_FN)


def _body_trampoline(fn, n_in):
    def body(user, blocks, n):
        bs = [blocks[i][0] for i in range(n)]
        refs = [f32_view(b.data, b.rows, b.cols, b.ld, i >= n_in) for i, b in enumerate(bs)]
        rank = bs[0].rank
        step = Step(tuple(bs[0].grid[a] for a in range(rank)),
                    [(b.block_row, b.block_col) for b in bs],
                    [(b.valid_rows, b.valid_cols) for b in bs])
        fn(step, *refs)

    return _ffi.trampoline(body, _ffi.CALL_BODY_FN)


class Call(_ffi.Handle):
    """pl.pallas_call's model: ``Call(grid, body, in_specs, out_specs)``.

    body(step, *refs) gets one float32 block per operand, inputs (read only)
    then outputs, each block_rows x block_cols, valid only during the call
    (keep a copy, not the array); output blocks start as NaN
    and must be initialized on their first visit (``if step.grid[2] == 0``
    for a k-loop), as a Pallas kernel does with pl.when.  They stay float32
    while resident, as a float32 scratch accumulator; round_steps=True
    rounds them to their dtype after every step, as a kernel accumulating
    in a narrower output ref holds them.  An exception in
    the body or an index map stops the run, leaves the outputs untouched and
    is raised again.  dimension_semantics names each axis "parallel" or
    "arbitrary" (the default); pad is what reads past an input's edge see:
    "zero" (default), "nan" or a float."""

    _destroy = "tk_call_destroy"

    def __init__(self, grid: Sequence[int], body: Callable, in_specs: Sequence[BlockSpec],
                 out_specs: Sequence[BlockSpec],
                 dimension_semantics: Optional[Sequence[str]] = None, pad="zero",
                 round_steps: bool = False):
        if not callable(body):
            raise errors.InvalidArgumentError(f"the body {body!r} is not callable")
        if np.ndim(grid) == 0:   # Pallas takes an int for a rank-1 grid
            grid = (grid,)
        grid = tuple(_ffi.as_int(g, "the grid size", int64=True) for g in grid)
        cb = _body_trampoline(body, len(in_specs))
        super().__init__(_ffi.new_handle(lib.tk_call_create, len(grid),
                                         (ctypes.c_int64 * max(len(grid), 1))(*grid), cb,
                                         None))
        self._callbacks = [cb]  # kept alive as long as the call
        self.grid = grid
        self.in_specs, self.out_specs = list(in_specs), list(out_specs)
        for kind, specs in ((_ffi.TK_CALL_INPUT, self.in_specs),
                            (_ffi.TK_CALL_OUTPUT, self.out_specs)):
            for spec in specs:
                self._add(kind, spec)
        for axis, name in enumerate(dimension_semantics or ()):
            lib.tk_call_set_dimension(self, axis, _ffi.encode(name, DIMENSIONS,
                                                              "dimension semantics"))
        self.pad = pad
        self.round_steps = round_steps

    @classmethod
    def from_kernel(cls, kernel, tiling, dtype: str = "float32") -> "Call":
        """The call of ``kernel.run(tiling, ...)`` on dtype operands: the
        tiling's grid, the kernel's inputs and one output, all of the
        tiling's shape and blocks, identity maps, the kernel's body.  With
        zero padding (the default) its run is the kernel's own, threads
        included; stats, check_padding and Pipeline.from_call treat it as
        any call.  It keeps the tiling as it is now (the "shift_inwards"
        tail has no call)."""
        self = cls.__new__(cls)
        code = dtype_code(dtype)
        super(Call, self).__init__(_ffi.new_handle(lib.tk_call_create_kernel, kernel, tiling,
                                                   code), parents=(kernel,))
        self._callbacks = []
        self.grid = (tiling.grid_rows, tiling.grid_cols)
        spec = BlockSpec((tiling.rows, tiling.cols), (tiling.block_rows, tiling.block_cols),
                         None, numpy_dtype(code).name)
        self.in_specs, self.out_specs = [spec] * kernel.n_inputs, [spec]
        return self

    def _add(self, kind, spec):
        spec = BlockSpec(*spec)
        for what in ("shape", "block"):
            v = getattr(spec, what)
            if np.ndim(v) != 1 or len(v) != 2:   # operands are matrices
                raise errors.InvalidArgumentError(
                    f"a BlockSpec's {what} is 2-D, (rows, cols), not {v!r}: give a "
                    f"vector as (1, n) with a block of (1, b)")
            if any(d is None for d in v):
                raise errors.InvalidArgumentError(
                    f"a BlockSpec's {what} {v!r} has None, which Pallas reads as a "
                    f"squeezed dimension: give 1 there (the body then sees that axis)")
            for d in v:
                _ffi.as_int(d, f"a BlockSpec's {what} {tuple(v)!r}: entry", int64=True)
        add = lib.tk_call_add_input if kind == _ffi.TK_CALL_INPUT else lib.tk_call_add_output
        affine = None
        if spec.index_map is not None and not callable(spec.index_map):
            flat = np.asarray(spec.index_map)
            if flat.dtype.kind not in "iu":   # a cast would truncate 1.5 to 1
                raise errors.InvalidArgumentError(f"an affine index map holds integers, not "
                                                  f"{flat.dtype}: {spec.index_map!r}")
            if flat.size and flat.dtype.kind == "u" and flat.max() >= 2**63:   # would wrap
                raise errors.RangeError(f"an affine index map holds int64 values, not "
                                        f"{flat.max()}: {spec.index_map!r}")
            flat = flat.astype(np.int64).ravel()
            if flat.size != 2 * (len(self.grid) + 1):
                raise errors.InvalidArgumentError(
                    f"an affine index map of a rank-{len(self.grid)} grid has "
                    f"{2 * (len(self.grid) + 1)} integers, not {flat.size}")
            affine = (ctypes.c_int64 * flat.size)(*flat.tolist())
        elif spec.index_map is None and len(self.grid) != 2:
            raise errors.InvalidArgumentError("index_map=None is the identity of a rank-2 "
                                              "grid only")
        index = add(self, dtype_code(spec.dtype), *spec.shape, *spec.block,
                    affine if affine is not None
                    else (ctypes.c_int64 * 6)(1, 0, 0, 0, 1, 0) if len(self.grid) == 2
                    else (ctypes.c_int64 * (2 * len(self.grid) + 2))())
        if callable(spec.index_map):
            cb = _index_map_trampoline(spec.index_map)
            lib.tk_call_set_map(self, kind, index, cb, None)
            self._callbacks.append(cb)

    @property
    def pad(self):
        """"zero", "nan", or the float past-edge reads see."""
        v = _ffi.get_param(lib.tk_call_get, self, _ffi.TK_CALL_PAD)
        names = {_ffi.TK_PAD_ZERO: "zero", _ffi.TK_PAD_NAN: "nan"}
        return names[v] if v in names else self._pad_value

    @pad.setter
    def pad(self, value):
        if isinstance(value, str):
            lib.tk_call_set(self, _ffi.TK_CALL_PAD, _ffi.encode(value, PADS, "pad"))
        else:
            try:
                v = float(value)
            except (TypeError, ValueError):
                raise errors.InvalidArgumentError(f"pad: {value!r} is not one of "
                                                  f"{', '.join(map(repr, PADS))} or a "
                                                  f"float") from None
            lib.tk_call_set_pad_value(self, v)
            self._pad_value = float(np.float32(v))

    undo = _ffi.param("call", _ffi.TK_CALL_UNDO,
                      "True (default): a failing body leaves every output as it was; "
                      "False: no undo copy, the outputs may be partly written", kind=bool)
    round_steps = _ffi.param("call", _ffi.TK_CALL_ROUND_STEPS,
                             "False (default): an output block stays float32 while it is "
                             "resident, as a kernel's float32 scratch accumulator; True: it "
                             "is rounded to its dtype after every step, as a kernel that "
                             "accumulates in a narrower output ref", kind=bool)

    def _io(self, inputs, outputs):
        inputs, outputs = (operands(inputs, "inputs"),
                           None if outputs is None else operands(outputs, "outputs"))
        mats = [as_matrix(x, f"input {i}") for i, x in enumerate(inputs)]
        if outputs is None:   # NaN where no step writes, as in a block never initialized
            outputs = [np.full(s.shape, np.nan, numpy_dtype(dtype_code(s.dtype)))
                       for s in self.out_specs]
        outs = [as_matrix(o, f"output {j}") for j, o in enumerate(outputs)]
        return mats, outs, outputs

    def run(self, inputs: Sequence, outputs: Optional[Sequence] = None) -> list:
        """Run the grid over inputs (numpy arrays or Matrix objects) into
        outputs (allocated from out_specs when None, NaN where no step
        writes); returns the outputs."""
        mats, outs, result = self._io(inputs, outputs)
        with _ffi.CallbackGuard():
            lib.tk_call_run(self, len(mats), _ffi.handle_array(mats), len(outs),
                            _ffi.handle_array(outs))
        return list(result)

    def check_padding(self, inputs: Sequence) -> int:
        """How many output elements differ between a run with zero padding
        and one with NaN padding (0: nothing reads past an input's edge)."""
        mats = [as_matrix(x, f"input {i}") for i, x in enumerate(operands(inputs, "inputs"))]
        changed = ctypes.c_int64()
        try:
            with _ffi.CallbackGuard():
                lib.tk_call_check_padding(self, len(mats), _ffi.handle_array(mats),
                                          ctypes.byref(changed))
        except errors.MismatchError:
            pass  # the count is the answer
        return changed.value

    def __repr__(self):
        if self.closed:
            return "<tilekern.Call closed>"
        return (f"<tilekern.Call grid {self.grid}, {len(self.in_specs)} input(s), "
                f"{len(self.out_specs)} output(s), pad {self.pad!r}, "
                f"round_steps {self.round_steps}>")

    @property
    def stats(self) -> dict:
        """steps, copies_in, copies_out, copies_skipped, bytes_in, bytes_out
        of the last complete run."""
        out, value = {}, ctypes.c_double()
        for name, code in _STATS.items():
            lib.tk_call_stat(self, code, ctypes.byref(value))
            out[name] = int(value.value)
        return out
