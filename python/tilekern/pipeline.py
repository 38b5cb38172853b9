"""Pipeline: tiles through multi-buffered on-chip memory as emit_pipeline
moves them, simulated on the host with exact hazard checks and a modeled
(never measured) cost."""
import ctypes
from typing import Dict, List, NamedTuple, Union

from . import _ffi, errors
from ._ffi import lib
from .device import Device
from .kernel import Kernel, prepare_io
from .tiling import Tiling

__all__ = ["Pipeline", "Hazard", "MODES", "FAULTS", "STATS"]

MODES = {"simulate": _ffi.TK_MODE_SIMULATE, "target": _ffi.TK_MODE_TARGET}
FAULTS = {"none": _ffi.TK_FAULT_NONE, "skip_input_wait": _ffi.TK_FAULT_SKIP_INPUT_WAIT,
          "prefetch_overrun": _ffi.TK_FAULT_PREFETCH_OVERRUN,
          "skip_output_wait": _ffi.TK_FAULT_SKIP_OUTPUT_WAIT,
          "early_copy_out": _ffi.TK_FAULT_EARLY_COPY_OUT}
# Statistics by name; the modeled_* ones are modeled, never measured.
STATS = {"steps": _ffi.TK_STAT_STEPS, "copies_in": _ffi.TK_STAT_COPIES_IN,
         "copies_out": _ffi.TK_STAT_COPIES_OUT,
         "copies_skipped": _ffi.TK_STAT_COPIES_SKIPPED,
         "bytes_in": _ffi.TK_STAT_BYTES_IN, "bytes_out": _ffi.TK_STAT_BYTES_OUT,
         "onchip_bytes": _ffi.TK_STAT_ONCHIP_BYTES, "hazards": _ffi.TK_STAT_HAZARDS,
         "modeled_ns": _ffi.TK_STAT_MODELED_NS,
         "modeled_compute_ns": _ffi.TK_STAT_MODELED_COMPUTE_NS,
         "modeled_stall_ns": _ffi.TK_STAT_MODELED_STALL_NS,
         "overlap": _ffi.TK_STAT_OVERLAP,
         "padded_elements": _ffi.TK_STAT_PADDED_ELEMENTS}


class Hazard(NamedTuple):
    """One hazard's witness: the step, the slot, the operand (an input's
    index, or "output", or "output j" for a Call with several) and the kind
    ("unwaited read", ...)."""
    step: int
    slot: int
    operand: Union[int, str]
    kind: str


def _p(code, doc, values=None, kind=int):
    return _ffi.param("pipeline", code, doc, values, kind=kind)


class Pipeline(_ffi.Handle):
    """kernel over tiling on device, through emit_pipeline's schedule.

    Keyword parameters set the pipeline's parameters: mode ("simulate" or
    "target"), input_buffers, output_buffers, no_pipelining, detect_races
    and fault (a deliberate mistake: "skip_input_wait", "prefetch_overrun",
    "skip_output_wait", "early_copy_out"), to prove the detectors fire."""

    _destroy = "tk_pipeline_destroy"
    PARAMETERS = ("mode", "input_buffers", "output_buffers", "no_pipelining",
                  "detect_races", "fault")

    def __init__(self, kernel: Kernel, tiling: Tiling, device: Device, **params):
        super().__init__(_ffi.new_handle(lib.tk_pipeline_create, kernel, tiling, device),
                         (kernel, tiling, device))
        self.kernel, self.tiling, self.device, self.call = kernel, tiling, device, None
        self._shape = tiling.shape
        self._set(params)

    @classmethod
    def from_call(cls, call, device: Device, **params) -> "Pipeline":
        """A tilekern.Call through the simulator: each operand's blocks by its
        index map, skipped copies, resident outputs.  run() then takes and
        returns lists, as Call.run does."""
        self = cls.__new__(cls)
        _ffi.Handle.__init__(self, _ffi.new_handle(lib.tk_pipeline_create_call, call, device),
                             (call, device))
        self.kernel = self.tiling = None
        self.device, self.call = device, call
        self._set(params)
        return self

    def set_buffers(self, kind: str, index: int, buffers: int) -> None:
        """Slots of one operand ("input" or "output" number index); 0 goes
        back to input_buffers / output_buffers."""
        code = _ffi.encode(kind, {"input": _ffi.TK_CALL_INPUT, "output": _ffi.TK_CALL_OUTPUT},
                           "operand kind")
        lib.tk_pipeline_set_buffers(self, code, index, buffers)

    def _set(self, params):
        for name, value in params.items():
            if name not in self.PARAMETERS:
                raise errors.InvalidArgumentError(
                    f"Pipeline has no parameter {name!r}; it has "
                    f"{', '.join(self.PARAMETERS)}")
            setattr(self, name, value)

    mode = _p(_ffi.TK_PIPE_MODE, "simulate or run on the target", MODES)
    input_buffers = _p(_ffi.TK_PIPE_INPUT_BUFFERS, "slots per input (default 2), as "
                       "pl.Buffered(n); the on-chip limit is what binds")
    output_buffers = _p(_ffi.TK_PIPE_OUTPUT_BUFFERS, "slots for the output, 1 or 2 (default "
                        "2); one is a hazard on any grid of more than one step, as in "
                        "emit_pipeline")
    no_pipelining = _p(_ffi.TK_PIPE_NO_PIPELINING, "synchronous copies", kind=bool)
    detect_races = _p(_ffi.TK_PIPE_DETECT_RACES, "refuse a schedule with hazards",
                      kind=bool)
    fault = _p(_ffi.TK_PIPE_FAULT, "a deliberate fault, for testing detectors", FAULTS)

    def run(self, inputs, output=None):
        """Run the schedule (its bodies execute on the host); returns output,
        or for a pipeline from a Call the list of outputs.  A hazard raises
        RaceError; its witnesses stay in .hazards."""
        if self.call is not None:
            mats, outs, result = self.call._io(inputs, output)
            with _ffi.CallbackGuard():
                lib.tk_pipeline_run_call(self, len(mats), _ffi.handle_array(mats), len(outs),
                                         _ffi.handle_array(outs))
            return list(result)
        mats, out, result = prepare_io(inputs, output, self._shape, self.kernel.n_inputs,
                                       "Pipeline.run")
        with _ffi.CallbackGuard():
            lib.tk_pipeline_run(self, _ffi.handle_array(mats), out)
        return result

    def _open(self) -> None:
        if self.closed:   # what stats and hazards pass over must not hide this
            raise errors.StateError("this Pipeline is closed")

    def stat(self, name: str) -> float:
        """One statistic of the last run, by name (see STATS)."""
        if name not in STATS:
            raise errors.InvalidArgumentError(f"no statistic {name!r}; there are "
                                              f"{', '.join(STATS)}")
        value = ctypes.c_double()
        lib.tk_pipeline_stat(self, STATS[name], ctypes.byref(value))
        return value.value

    @property
    def stats(self) -> Dict[str, float]:
        """Every statistic the last run has (modeled_* are modeled times)."""
        self._open()
        out = {}
        for name in STATS:
            try:
                out[name] = self.stat(name)
            except errors.StateError:
                pass  # not available for this run (race detection off, ...)
        return out

    @property
    def hazards(self) -> List[Hazard]:
        """The witnesses of the last run with race detection; StateError
        where there was none, or it ran with detect_races off ([] would
        read as a clean run)."""
        self._open()
        count = int(self.stat("hazards"))
        step, slot = ctypes.c_int64(), ctypes.c_int64()
        operand, kind = ctypes.c_int(), ctypes.c_int()
        found = []
        for i in range(count):
            lib.tk_pipeline_race(self, i, ctypes.byref(step), ctypes.byref(slot),
                                 ctypes.byref(operand), ctypes.byref(kind))
            j = _ffi.TK_OPERAND_OUTPUT - operand.value
            several = self.call is not None and len(self.call.out_specs) > 1
            who = operand.value if operand.value >= 0 else f"output {j}" if several else "output"
            found.append(Hazard(step.value, slot.value, who,
                                _ffi.text(lib.tk_hazard_name(kind.value))))
        return found

    def stall(self, step: int) -> float:
        """The modeled stall charged to step, in ns: the waits for its
        inputs before its body and for its outputs' copies after it."""
        ns = ctypes.c_double()
        lib.tk_pipeline_stall(self, step, ctypes.byref(ns))
        return ns.value

    def write_trace(self, path) -> None:
        """The modeled schedule as Chrome trace JSON."""
        lib.tk_pipeline_write_trace(self, _ffi.path_arg(path))
