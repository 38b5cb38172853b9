"""bench_python.py - what the Python layer costs: one 4096x4096 bfloat16 axpy
audit (represent both inputs, the candidate, the oracle, the original
reference, every metric) driven from numpy through the tilekern package with
a Python candidate (which writes the output it is given), against the same audit driven from C with a C candidate
(bench/candidate.c), timed interleaved in one process, medians of 15.

    python bench/bench_python.py BUILD/bench/libcandidate.so

Prints `name: ratio` and exits 1 when the ratio is over its limit (1.1)."""
import ctypes
import statistics
import sys
import time

import numpy as np
import tilekern as tk
from tilekern import _ffi

ROWS = COLS = 4096
REPS = 15
LIMIT = 1.1


def main(candidate_so):
    info = tk.build_info()
    print("bench_python: build: " + " ".join(f"{k}={v}" for k, v in info.items()))
    rng = np.random.default_rng(7)
    x = rng.uniform(-4, 4, (ROWS, COLS)).astype(np.float32)
    y = rng.uniform(-4, 4, (ROWS, COLS)).astype(np.float32)
    kernel = tk.Kernel.axpy(2.0)
    tiling = tk.Tiling(ROWS, COLS, 8, 128)

    def candidate(a, b, out):
        return kernel.run(tiling, [a, b], out)

    from_python = tk.Audit(kernel, candidate)
    from_python.add_case("bfloat16", [x, y])
    # The same audit from C: a C candidate, run by one call of tk_audit_run.
    from_c = tk.Audit(kernel)
    c_fn = ctypes.cast(ctypes.CDLL(candidate_so).bench_candidate, _ffi.CANDIDATE_FN)
    _ffi.lib.tk_audit_set_candidate(from_c, c_fn, ctypes.c_void_p(kernel._h))
    from_c.add_case("bfloat16", [x, y])

    def run_c():
        _ffi.lib.tk_audit_run(from_c)

    fns = [from_python.run, run_c]
    times = [[], []]
    for f in fns:
        f()
    for _ in range(REPS):
        for i, f in enumerate(fns):
            t0 = time.perf_counter()
            f()
            times[i].append(time.perf_counter() - t0)
    if from_python.results != from_c.results:
        print("bench_python: the two audits disagree", file=sys.stderr)
        return 1
    ratio = statistics.median(times[0]) / statistics.median(times[1])
    print(f"python_audit_bf16_4096x4096_vs_c: {ratio:.2f}")
    if ratio > LIMIT:
        print(f"bench_python: {ratio:.2f} is over the {LIMIT}x limit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
