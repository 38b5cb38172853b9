"""Bench: compile, warm-up and synchronized samples of Python callables on a
real target; simulated targets are refused before anything runs."""
import ctypes
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Union

import numpy as np

from . import _ffi, errors
from ._ffi import lib
from .device import Device

__all__ = ["Bench", "BenchResult", "benchmark", "median", "percentile", "amdahl"]

_STATS = {"compile_s": _ffi.TK_BENCH_COMPILE_S, "median_ms": _ffi.TK_BENCH_MEDIAN_MS,
          "p90_ms": _ffi.TK_BENCH_P90_MS, "min_ms": _ffi.TK_BENCH_MIN_MS,
          "max_ms": _ffi.TK_BENCH_MAX_MS, "mean_ms": _ffi.TK_BENCH_MEAN_MS,
          "stdev_ms": _ffi.TK_BENCH_STDEV_MS, "samples": _ffi.TK_BENCH_SAMPLES,
          "speedup": _ffi.TK_BENCH_SPEEDUP}


@dataclass(frozen=True)
class BenchResult:
    """One entry's summary: times in ms (median and p90 as numpy computes
    them), compile time in s, speedup = baseline median / this median."""
    label: str
    compile_s: float
    median_ms: float
    p90_ms: float
    min_ms: float
    max_ms: float
    mean_ms: float
    stdev_ms: float
    samples: int
    speedup: float


def _p(code, doc, kind=int):
    return _ffi.param("bench", code, doc, kind=kind)


def _block_on(value):
    """Wait for what a run returned: JAX arrays (and pytrees of them) have
    block_until_ready; anything else is already done."""
    if hasattr(value, "block_until_ready"):
        value.block_until_ready()
    elif isinstance(value, (list, tuple)):
        for v in value:
            _block_on(v)
    elif isinstance(value, dict):
        for v in value.values():
            _block_on(v)


class Bench(_ffi.Handle):
    """Benchmarks entries on target (a real Device: the host, or an
    external accelerator).  Keyword parameters: repeats (samples, >= 5),
    warmups, interleave, max_seconds, baseline (entry index) and boundary
    (the text saying what a sample includes)."""

    _destroy = "tk_bench_destroy"
    PARAMETERS = ("repeats", "warmups", "interleave", "max_seconds", "baseline",
                  "boundary")

    def __init__(self, target: Device, **params):
        super().__init__(_ffi.new_handle(lib.tk_bench_create, target), (target,))
        self.target = target
        self._entries = []  # (label, callbacks, state): kept alive with the bench
        for name, value in params.items():
            if name not in self.PARAMETERS:
                raise errors.InvalidArgumentError(
                    f"Bench has no parameter {name!r}; it has {', '.join(self.PARAMETERS)}")
            if name == "boundary":
                self.set_boundary(value)
            else:
                setattr(self, name, value)

    repeats = _p(_ffi.TK_BENCH_REPEATS, "samples per entry")
    warmups = _p(_ffi.TK_BENCH_WARMUPS, "untimed runs first")
    interleave = _p(_ffi.TK_BENCH_INTERLEAVE, "entries sampled in turn", bool)
    max_seconds = _p(_ffi.TK_BENCH_MAX_SECONDS, "sampling budget, 0 for none")
    baseline = _p(_ffi.TK_BENCH_BASELINE, "entry that speedups compare with")

    def set_boundary(self, text: str) -> None:
        """What one sample includes, recorded in the receipt."""
        if not isinstance(text, str):
            raise errors.InvalidArgumentError(f"the boundary {text!r} is not a str")
        lib.tk_bench_set_boundary(self, text.encode())

    def add(self, label: str, run: Callable[[], object], *,
            compile: Optional[Callable[[], object]] = None,
            sync: Union[None, str, Callable[[], object]] = None,
            placement: Optional[Device] = None) -> int:
        """An entry: run() does (or launches) the work; compile() prepares
        it, timed once by itself; sync() waits until the work is done on the
        target.  sync="block_until_ready" waits on what run() returned (JAX
        arrays).  On the host (platform "cpu") sync may be None.  placement
        is where the inputs live (None: on the target).  Returns the index."""
        if not isinstance(label, str):
            raise errors.InvalidArgumentError(f"the label {label!r} is not a str")
        for name, f in (("run", run), ("compile", compile)):
            if not (callable(f) or (f is None and name == "compile")):
                raise errors.InvalidArgumentError(f"{name} {f!r} of {label!r} is not callable")
        state = {}
        if sync == "block_until_ready":
            def run_kept():
                state["last"] = run()

            def sync_fn():
                _block_on(state.pop("last", None))
            run_fn = run_kept
        elif sync is None or callable(sync):
            run_fn, sync_fn = run, sync
        else:
            raise errors.InvalidArgumentError(
                f"sync {sync!r} is not a callable, None or 'block_until_ready'")
        cbs = [_ffi.BENCH_FN() if f is None else  # a NULL function pointer
               _ffi.trampoline(lambda user, f=f: f(), _ffi.BENCH_FN)
               for f in (compile, run_fn, sync_fn)]
        index = lib.tk_bench_add(self, label.encode(), placement, *cbs, None)
        self._entries.append((label, cbs, state))
        return index

    def run(self) -> None:
        """Compile, warm up and sample every entry."""
        with _ffi.CallbackGuard():
            lib.tk_bench_run(self)

    def result(self, entry: int) -> BenchResult:
        value = ctypes.c_double()
        got = {}
        for name, code in _STATS.items():
            lib.tk_bench_result(self, entry, code, ctypes.byref(value))
            got[name] = value.value
        got["samples"] = int(got["samples"])
        return BenchResult(self._entries[entry][0], **got)

    @property
    def results(self) -> List[BenchResult]:
        return [self.result(i) for i in range(len(self._entries))]

    def samples(self, entry: int) -> np.ndarray:
        """Every sample of entry, in ms."""
        n = lib.tk_bench_samples(self, entry, None, 0)
        out = np.empty(n, np.float64)
        lib.tk_bench_samples(self, entry, out.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
                             n)
        return out

    def write_receipt(self, path) -> None:
        """The receipt: device, platform, boundary, compile time, samples."""
        lib.tk_bench_write_receipt(self, _ffi.path_arg(path))


def benchmark(entries: Dict[str, Callable[[], object]], target: Optional[Device] = None,
              *, sync: Union[None, str, Callable[[], object]] = None,
              compile: Optional[Dict[str, Callable[[], object]]] = None,
              receipt=None, **params) -> Dict[str, BenchResult]:
    """Benchmark each label -> callable of entries in turn on target
    (default the host); the first entry is the baseline of the speedups.
    sync applies to every entry (for JAX, "block_until_ready"); compile maps
    labels of entries to their compile callables; receipt is a path to
    write (its directory checked before the run; a write that fails after
    it raises with the results as the error's .results).  The
    boundary (what a sample includes) says one call per sample, and the
    sync, unless given."""
    target = target or Device.host()
    params.setdefault("boundary", "one call of a Python callable per sample"
                      + ("" if sync is None else
                         ", ended by the result's block_until_ready()"
                         if sync == "block_until_ready" else ", ended by a sync callable"))
    unknown = set(compile or {}) - set(entries)
    if unknown:   # a typo would leave an entry's compile untimed and unsaid
        raise errors.InvalidArgumentError(f"compile names {sorted(unknown)!r}, which are not "
                                          f"among the entries {list(entries)!r}")
    if receipt is not None:
        _ffi.check_writable(receipt, "receipt")
    b = Bench(target, **params)
    for label, fn in entries.items():
        b.add(label, fn, compile=(compile or {}).get(label), sync=sync)
    b.run()
    results = {r.label: r for r in b.results}
    if receipt is not None:
        try:
            b.write_receipt(receipt)
        except errors.TilekernError as e:   # the results survive a failed write
            e.results = results
            raise
    return results


def _doubles(x):
    a = np.ascontiguousarray(x, dtype=np.float64).ravel()
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_double)), a.size, a


def median(samples) -> float:
    """np.median, bit for bit (NaN for no data or a NaN sample)."""
    ptr, n, _keep = _doubles(samples)
    return lib.tk_median(ptr, n)


def percentile(samples, percent: float) -> float:
    """np.percentile (method "linear"), bit for bit."""
    ptr, n, _keep = _doubles(samples)
    return lib.tk_percentile(ptr, n, percent)


def amdahl(fraction: float, local_speedup: float) -> float:
    """1 / ((1 - fraction) + fraction / local_speedup)."""
    return lib.tk_amdahl(fraction, local_speedup)
