"""The seed's main job from Python: the same checks as `make run`
(build/examples/audit), printing the same lines and figures, every figure
computed by libtilekern through the tilekern package.

    python examples/python/audit.py [FIXTURE_DIR]     (default tests/fixtures)

Reports go to report/ under the current directory; the exit status is 0
only when every check passes."""
import os
import sys

import numpy as np
import tilekern as tk

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = ["1x1", "8x128", "9x129", "17x257"]
failures = []


def fail(what, error):
    print(f"FAILED: {what}: {error}", file=sys.stderr)
    failures.append(what)


def load(fixtures, name):
    with tk.Matrix.load_npy(os.path.join(fixtures, name)) as m:
        return m.to_f32()


def pairs(label, results, metric):
    """"[[f32, bf16], ...]" of one metric, as Python prints lists of floats."""
    cells = [getattr(r, metric) for r in results]
    print(f"{label}: [" + ", ".join(f"[{cells[i]!r}, {cells[i + 1]!r}]"
                                    for i in range(0, len(cells), 2)) + "]")


def main(fixtures):
    kernel = tk.Kernel.axpy(2.0)
    device = tk.Device.simulated("TPU v5 lite")

    # The candidate, as in the seed: the kernel through a double-buffered
    # pipeline on the simulated device, hazards checked (a hazard fails).
    def candidate(x, y):
        with tk.Tiling(*x.shape, 8, 128) as t, \
                tk.Pipeline(kernel, t, device, input_buffers=2) as p:
            return p.run([x, y])

    print('Candidate: tk_pipeline on the simulated "TPU v5 lite", blocks (8, 128), '
          '2 input buffers, hazards checked; the schedule executes on the host')
    audit = tk.Audit(kernel, candidate)
    for shape in SHAPES:
        x, y = (load(fixtures, f"seed42_{v}_{shape}.npy") for v in "xy")
        audit.add_case("float32", [x, y])
        audit.add_case("bfloat16", [x, y])
    if not audit.run():
        fail("implementation check against the represented-input oracle", "mismatch")
    results = audit.results
    pairs("Kernel errors versus represented-input oracle", results, "impl_max_abs")
    pairs("Gaps versus original float32 data", results, "gap_max_abs")
    try:
        tk.Bench(device)
        fail("a simulated target was accepted for timing", "no refusal")
    except tk.NotTargetError as e:
        print("Expected benchmark refusal: " + e.message.split(": ", 1)[1])
    print("CPU correctness audit complete; no TPU latency or speedup measured")

    a, b = (load(fixtures, f"seed42_perm_{v}_9x129.npy") for v in "ab")
    with tk.Audit(kernel, candidate) as perm:
        perm.add_case("float32", [a, b])
        if perm.check_permutation(0, [8, 0, 7, 1, 6, 2, 5, 3, 4]):
            print("Joint row permutation preserves output identity")
        else:
            fail("joint row permutation", "rows differ")

    early, late = tk.rounding_counterexample("bfloat16", 1.00390625, 0.00390625)
    if early == late:
        fail("early versus final-only rounding must differ", (early, late))
    print(f"Early/final-only rounding: {early!r} {late!r}")

    x, y = (load(fixtures, f"sweep_{v}_15x255.npy") for v in "ab")
    expected = np.float32(2) * x + y
    compare = tk.Compare("float32", atol=1e-6, rtol=1e-6)
    for block in ((8, 128), (16, 256)):
        for buffers in (2, 3):
            with tk.Tiling(*x.shape, *block) as t, \
                    tk.Pipeline(kernel, t, device, input_buffers=buffers) as p:
                out = p.run([x, y])
                if compare.run(out, expected):
                    print(f"Configuration, padded elements: {block} {buffers} "
                          f"{p.stat('padded_elements'):.0f}")
                else:
                    fail("(15, 255) sweep", compare.format())

    rejected = 0
    with tk.Tiling(8, 128, 8, 128) as t:
        for dtypes in (("float32", "bfloat16", "float32"), ("int32",) * 3):
            m = [tk.Matrix.create(d, 8, 128) for d in dtypes]
            try:
                kernel.run(t, m[:2], m[2])
            except tk.DtypeError:
                rejected += 1
            else:
                fail(f"{dtypes[0]} + {dtypes[1]} was not rejected", "accepted")
    if rejected == 2:
        print("Mixed and integer dtypes rejected")

    speedup, limit = tk.amdahl(0.3, 2.0), tk.amdahl(0.3, float("inf"))
    if not 1.0 < speedup < limit:
        fail("Amdahl bound", (speedup, limit))
    print(f"Modeled twofold-local speedup and zero-cost limit: {speedup!r} {limit!r}")

    os.makedirs("report", exist_ok=True)
    files = ["report/audit.txt", "report/audit.json", "report/audit.svg"]
    for path in files:
        audit.write_report(path)
    print("Reports written: " + ", ".join(files))

    if failures:
        print(f"FAIL: kernels-04 ({len(failures)} checks failed)")
        return 1
    print("PASS: kernels-04")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and sys.argv[1].startswith("-")):
        sys.exit(f"usage: {sys.argv[0]} [FIXTURE_DIR]")
    sys.exit(main(sys.argv[1] if len(sys.argv) == 2 else
                  os.path.join(HERE, os.pardir, os.pardir, "tests", "fixtures")))
