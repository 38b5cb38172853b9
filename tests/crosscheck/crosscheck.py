"""Pallas (TPU interpret mode, on the CPU) against libtilekern, bit for bit.

The seed's axpy is written in Pallas (pallas_kernels.py) as the blocked
pallas_call kernel and as emit_pipeline with Buffered(2) and Buffered(3)
inputs, under the simulated "TPU v5 lite", race detection on (but for the
longest cases, where a time budget is spent).  For every
case its output is compared bit for bit with tk_kernel_run (each tail
strategy) and tk_pipeline_run, and the padded element counts with the
library's; a deliberately racy Pallas kernel and the tk_pipeline fault that
models the same mistake must both be reported.  Then pallas_call grids
(pallas_calls.py: matmul, row sum, bias add, transpose, axpy) against
tilekern.Call on small integers (every sum exact), a matmul accumulating
in its bfloat16 or float16 output ref against Call(round_steps=True), the
axpy also as the
built-in kernel's call (Call.from_kernel), with the copies each
skips, a non-consecutive output revisit and a body that never initializes
its output, which both sides must catch.  Last, special values
(subnormals, near-overflow sums, alpha 3) through a Pallas axpy written
as users write it, which XLA fuses into a multiply-add, flushing
subnormals: tilekern with arith="xla" must match it, and its default
(numpy's) must not, or the case would not tell the two apart.  Pallas interpret costs about
5 ms per block copy, so the case list is sized to run in minutes.

Output: one `crosscheck: ... : equal` (or `DIFFERENT: ...`) line per case,
`pallas_interpret_over_tilekern: <case>: <ratio>` speed lines, and the
closing `crosscheck: N equal, N different; N long emit_pipeline cases
without Pallas's race detector`; exit 1 on any
difference.  Run with JAX_PLATFORMS=cpu (tools/crosscheck does)."""
import os
import sys
import time

import ml_dtypes
import numpy as np
import tilekern as tk

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pallas_calls as pc  # noqa: E402
import pallas_kernels as pk  # noqa: E402

ALPHA = 2.0
SHAPES = [(1, 1), (8, 128), (9, 129), (15, 255), (17, 257), (257, 1031), (1024, 1024)]
BLOCKS = [(8, 128), (16, 256), (256, 512)]
DTYPES = {"float32": np.dtype(np.float32), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
TAILS = ["mask", "pad", "shift_inwards"]
# Pallas's race detector costs time quadratic in the steps (up to 102 s for
# 1024 on an Intel Xeon VM, 10 s without it): emit_pipeline cases over
# MAX_STEPS steps run last, each with the detector only if it should end
# inside the budget (estimated a quarter over the longest such case so far,
# 90 s before the first), and past it without, loudly: a slower machine
# still compares their bits and padding.  Every other case (blocked
# pallas_call cases cost about 5 ms a step) runs with it; that VM's speed
# varies from run to run, and tools/crosscheck's limit, 780 s, leaves them
# room.
MAX_STEPS = 300
BUDGET_S = 540
STARTED = time.monotonic()
SPEED_CASES = {((257, 1031), (8, 128)), ((1024, 1024), (16, 256)),
               ((1024, 1024), (256, 512))}

counts = {"equal": 0, "different": 0}


def steps(shape, block):
    return -(-shape[0] // block[0]) * -(-shape[1] // block[1])


def first_difference(got, want):
    """None when got and want are the same bits, else a description."""
    g, w = got.view(np.uint8).reshape(got.shape[0], -1), want.view(np.uint8).reshape(
        want.shape[0], -1)
    if got.shape == want.shape and np.array_equal(g, w):
        return None
    if got.shape != want.shape:
        return f"shape {got.shape} versus {want.shape}"
    bits = got.dtype.itemsize * 8
    ug = got.view(f"<u{got.dtype.itemsize}")
    uw = want.view(f"<u{want.dtype.itemsize}")
    r, c = np.argwhere(ug != uw)[0]
    return (f"first at ({r}, {c}): 0x{int(ug[r, c]):0{bits // 4}x} versus "
            f"0x{int(uw[r, c]):0{bits // 4}x}")


def report(name, diff):
    if diff is None:
        counts["equal"] += 1
        print(f"crosscheck: {name}: equal", flush=True)
    else:
        counts["different"] += 1
        print(f"crosscheck: {name}: DIFFERENT: {diff}", flush=True)


def data(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape, np.float32).astype(dtype) for _ in range(2)]


def blocked(kernel, shape, dtype, block, x, y):
    name = f"axpy {shape[0]}x{shape[1]} {dtype} block {block[0]}x{block[1]} buffers 2"
    want, extra = pk.blocked_axpy(x, y, ALPHA, block)
    diffs = []
    # Shifting edge tiles inwards needs a shape at least one block large.
    fits = shape[0] >= block[0] and shape[1] >= block[1]
    for tail in [t for t in TAILS if fits or t != "shift_inwards"]:
        with tk.Tiling(*shape, *block, tail=tail) as t:
            d = first_difference(kernel.run(t, [x, y]), want)
            if d:
                diffs.append(f"tk_kernel_run tail {tail}: {d}")
            if tail == "pad" and t.padded_elements != extra + x.size:
                diffs.append(f"padded elements: tilekern {t.padded_elements}, Pallas "
                             f"{extra + x.size}")
    report(name, "; ".join(diffs) or None)


def pipelined(kernel, device, shape, dtype, block, buffers, x, y, detect_races=True):
    name = (f"axpy_pipeline {shape[0]}x{shape[1]} {dtype} block {block[0]}x{block[1]} "
            f"buffers {buffers}")
    if not detect_races:
        name += " (Pallas's race detector off)"
    t0 = time.perf_counter()
    want, extra, races = pk.pipelined_axpy(x, y, ALPHA, block, buffers,
                                           detect_races=detect_races)
    pallas_s = time.perf_counter() - t0
    with tk.Tiling(*shape, *block) as t, \
            tk.Pipeline(kernel, t, device, input_buffers=buffers) as p:
        t0 = time.perf_counter()
        got = p.run([x, y])
        tk_s = time.perf_counter() - t0
        diffs = [d for d in [first_difference(got, want)] if d]
        if p.stat("padded_elements") != extra + x.size:
            diffs.append(f"padded elements: tilekern {p.stat('padded_elements'):.0f}, "
                         f"Pallas {extra + x.size}")
        if races or p.stat("hazards"):
            diffs.append(f"races: Pallas {races}, tilekern {p.hazards}")
    report(name, "; ".join(diffs) or None)
    if (shape, block) in SPEED_CASES and buffers == 2:
        # Pallas's first call includes tracing; time a second one.
        t0 = time.perf_counter()
        pk.pipelined_axpy(x, y, ALPHA, block, buffers)
        pallas_s = time.perf_counter() - t0
        print(f"pallas_interpret_over_tilekern: {name.split(' ', 1)[1]}: "
              f"{pallas_s / tk_s:.0f}", flush=True)


def hazards(kernel, device):
    """The same mistake on both sides: Pallas's detector on its racy kernel,
    tk_pipeline's on the fault mode that models it."""
    shape, block = (16, 512), (8, 128)
    x, y = data(shape, DTYPES["float32"], 99)
    print("  Pallas's race detector on its racy kernel (its own report):", flush=True)
    _, pallas_races = pk.racy_axpy(x, y, ALPHA, block)
    with tk.Tiling(*shape, *block) as t, \
            tk.Pipeline(kernel, t, device, fault=pk.RACY_FAULT) as p:
        try:
            p.run([x, y])
            found = []
        except tk.RaceError:
            found = p.hazards
    name = f"hazard {pk.RACY_FAULT} 16x512 float32 block 8x128 buffers 2"
    diffs = []
    if not pallas_races:
        diffs.append("Pallas's detect_races did not flag its racy kernel")
    if not found:
        diffs.append(f"tk_pipeline fault {pk.RACY_FAULT} was not flagged")
    report(name, "; ".join(diffs) or None)
    if found:
        print(f"  tk_pipeline's witness: {found[0]}")
    print("  " + pk.DETECTORS.replace("\n", "\n  "))
    print("  " + TK_DETECTORS.replace("\n", "\n  "))


TK_DETECTORS = """\
tk_pipeline's detectors read the static schedule (copy starts, waits, bodies
and slot lifetimes), so they are exact and the same on every run: an unwaited
read, a copy into a slot still in use (the prefetch overrun), a write to an
output slot whose copy-out was not waited, a copy-out before the body wrote
its slot, and a copy never waited, the skipped wait Pallas misses included.
They cannot see what is outside the modeled schedule: a kernel's own manual
DMAs, semaphores or addresses, which only Pallas's detector watches."""


# ---- pallas_call grids against tilekern.Call --------------------------------

def ints(shape, seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return rng.integers(-3, 4, shape).astype(np.float32).astype(dtype)


def skipped_copies(grid, maps):
    """Input copies a row-major walk of grid skips (a block index equal to the
    previous step's), derived from the index maps: Pallas's interpreter skips
    by the same rule but does not report a count."""
    skipped, prev = 0, [None] * len(maps)
    for g in np.ndindex(*grid):
        for n, m in enumerate(maps):
            b = m(*g)
            skipped += b == prev[n]
            prev[n] = b
    return skipped


def tk_matmul(x, y, block, out_dtype, round_steps=False):
    (m, k), n = x.shape, y.shape[1]
    bm, bk, bn = block

    def body(step, xb, yb, ob):
        if step.grid[2] == 0:
            ob[...] = 0.0
        ob += xb @ yb  # zero padding past K: exact, as the Pallas kernel pads

    grid = (-(-m // bm), -(-n // bn), -(-k // bk))
    maps = [lambda i, j, kk: (i, kk), lambda i, j, kk: (kk, j)]
    c = tk.Call(grid, body, [tk.BlockSpec(x.shape, (bm, bk), maps[0], x.dtype.name),
                             tk.BlockSpec(y.shape, (bk, bn), maps[1], y.dtype.name)],
                [tk.BlockSpec((m, n), (bm, bn), lambda i, j, kk: (i, j), out_dtype)],
                dimension_semantics=("parallel", "parallel", "arbitrary"),
                round_steps=round_steps)
    return c, [x, y], skipped_copies(grid, maps)


def tk_row_sum(x, block, init=True):
    bm, bn = block

    def body(step, xb, ob):
        if init and step.grid[1] == 0:
            ob[...] = 0.0
        ob += xb.sum(axis=1, keepdims=True, dtype=np.float32)

    grid = (-(-x.shape[0] // bm), -(-x.shape[1] // bn))
    maps = [lambda i, j: (i, j)]
    c = tk.Call(grid, body, [tk.BlockSpec(x.shape, block, maps[0], x.dtype.name)],
                [tk.BlockSpec((x.shape[0], 1), (bm, 1), lambda i, j: (i, 0))])
    return c, [x], skipped_copies(grid, maps)


def tk_bias_add(x, b, block):
    bm, bn = block
    grid = (-(-x.shape[0] // bm), -(-x.shape[1] // bn))
    maps = [lambda i, j: (i, j), lambda i, j: (0, j)]
    c = tk.Call(grid, lambda step, xb, bb, ob: np.add(xb, bb, out=ob),
                [tk.BlockSpec(x.shape, block, maps[0], x.dtype.name),
                 tk.BlockSpec(b.shape, (1, bn), maps[1], b.dtype.name)],
                [tk.BlockSpec(x.shape, block, None, x.dtype.name)])
    return c, [x, b], skipped_copies(grid, maps)


def tk_transpose(x, block):
    bm, bn = block
    grid = (-(-x.shape[1] // bn), -(-x.shape[0] // bm))
    maps = [lambda i, j: (j, i)]
    c = tk.Call(grid, lambda step, xb, ob: np.copyto(ob, xb.T),
                [tk.BlockSpec(x.shape, block, maps[0], x.dtype.name)],
                [tk.BlockSpec(x.shape[::-1], (bn, bm), None, x.dtype.name)])
    return c, [x], skipped_copies(grid, maps)


def tk_axpy(x, y, alpha, block):
    grid = (-(-x.shape[0] // block[0]), -(-x.shape[1] // block[1]))
    maps = [lambda i, j: (i, j)] * 2
    c = tk.Call(grid, lambda step, xb, yb, ob: np.copyto(ob, np.float32(alpha) * xb + yb),
                [tk.BlockSpec(x.shape, block, None, x.dtype.name)] * 2,
                [tk.BlockSpec(x.shape, block, None, x.dtype.name)])
    return c, [x, y], skipped_copies(grid, maps)


def grid_case(name, shape, dtype, block, want, built):
    call, inputs, pallas_skipped = built
    (got,) = call.run(inputs)
    diffs = [d for d in [first_difference(got, want)] if d]
    if call.stats["copies_skipped"] != pallas_skipped:
        diffs.append(f"copies skipped: tilekern {call.stats['copies_skipped']}, Pallas's "
                     f"maps {pallas_skipped}")
    report(f"{name} {'x'.join(map(str, shape))} {dtype} block "
           f"{'x'.join(map(str, block))} buffers 2", "; ".join(diffs) or None)
    return call.stats["copies_skipped"]


def grids():
    bf16 = DTYPES["bfloat16"]
    for dtype, npdt in DTYPES.items():
        for (m, k, n), (bm, bk, bn) in (((37, 300, 260), (16, 128, 128)),
                                        ((37, 45, 300), (8, 128, 128))):
            x, y = ints((m, k), 1, npdt), ints((k, n), 2, npdt)
            grid_case("matmul", (m, n, k), dtype, (bm, bn, bk),
                      pc.matmul(x, y, (bm, bk, bn)), tk_matmul(x, y, (bm, bk, bn), dtype))
        x = ints((37, 300), 3, npdt)
        grid_case("row_sum", (37, 300), dtype, (16, 128), pc.row_sum(x, (16, 128)),
                  tk_row_sum(x, (16, 128)))
        b = ints((1, 300), 4, npdt)
        grid_case("bias_add", (37, 300), dtype, (16, 128), pc.bias_add(x, b, (16, 128)),
                  tk_bias_add(x, b, (16, 128)))
        t = ints((300, 200), 5, npdt)
        grid_case("transpose", (300, 200), dtype, (128, 128), pc.transpose(t, (128, 128)),
                  tk_transpose(t, (128, 128)))
        y = ints((37, 300), 6, npdt)
        want = pc.axpy(x, y, ALPHA, (16, 128))
        grid_case("axpy", (37, 300), dtype, (16, 128), want, tk_axpy(x, y, ALPHA, (16, 128)))
        # The built-in kernel as the call of its tiling (Call.from_kernel).
        kernel_call = tk.Call.from_kernel(tk.Kernel.axpy(ALPHA), tk.Tiling(37, 300, 16, 128),
                                          dtype)
        grid_case("axpy_kernel_call", (37, 300), dtype, (16, 128), want,
                  (kernel_call, [x, y], skipped_copies(kernel_call.grid,
                                                       [lambda i, j: (i, j)] * 2)))
    x, y = ints((37, 45), 1), ints((45, 300), 2)
    grid_case("matmul_f32_to_bf16", (37, 300, 45), "bfloat16", (8, 128, 128),
              pc.matmul(x, y, (8, 128, 128), bf16), tk_matmul(x, y, (8, 128, 128), "bfloat16"))
    # A kernel accumulating in its narrow output ref (sums past 256 round at
    # every k step) against Call(round_steps=True).
    # Without it the same call must differ, or the case would tell nothing.
    # Integers up to 33 in magnitude: every step's sum exact in float32, and
    # past 256 (bfloat16's last exact integer) and 2048 (float16's).
    x, y = ints((37, 300), 1) * 10 + ints((37, 300), 7), ints((300, 260), 2) * 10
    for out in ("bfloat16", "float16"):
        want = pc.matmul(x, y, (16, 128, 128), np.dtype(getattr(ml_dtypes, out, out)),
                         in_out_ref=True)
        grid_case("matmul_accumulating_in_out_ref", (37, 260, 300), out, (16, 128, 128), want,
                  tk_matmul(x, y, (16, 128, 128), out, round_steps=True))
        call, inputs, _ = tk_matmul(x, y, (16, 128, 128), out)
        if first_difference(call.run(inputs)[0], want) is None:
            report(f"matmul_accumulating_in_out_ref {out} without round_steps",
                   "a float32 accumulator matches Pallas too: the case tells nothing apart")

    # A non-consecutive revisit: grid (2, 2), output map (i, j) -> (j, 0).
    x = np.ones((16, 256), np.float32)
    _, pallas_error = pc.revisit_non_consecutive(x, (8, 128))
    try:
        tk.Call((2, 2), lambda step, xb, ob: np.copyto(ob, xb),
                [tk.BlockSpec((16, 256), (8, 128))],
                [tk.BlockSpec((16, 128), (8, 128), lambda i, j: (j, 0))]).run([x])
        tk_error = None
    except tk.LayoutError as e:
        tk_error = e.message
    diffs = [f"{who} let it through" for who, err in (("Pallas", pallas_error),
                                                       ("tilekern", tk_error)) if not err]
    report("revisit 16x256 float32 block 8x128 buffers 2", "; ".join(diffs) or None)
    print(f"  Pallas: {pallas_error}\n  tilekern: {tk_error}")

    # A body that never initializes its output: NaN on both sides.
    x = ints((37, 300), 7)
    pallas_out = pc.skip_init(x, (16, 128))
    tk_out = tk_row_sum(x, (16, 128), init=False)[0].run([x])[0]
    diffs = [f"{who} output is not all NaN" for who, out in (("Pallas", pallas_out),
                                                             ("tilekern", tk_out))
             if not np.isnan(out).all()]
    report("uninitialized 37x300 float32 block 16x128 buffers 2", "; ".join(diffs) or None)


def special_data(kind, shape, dtype, seed):
    """x, y and alpha where XLA's arithmetic and numpy's disagree."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape, np.float32)
    y = rng.standard_normal(shape, np.float32)
    alpha = 2.0
    if kind == "subnormal":   # subnormal inputs, and products and sums that are
        x[:, ::3] = np.ldexp(x[:, ::3], -130)
        y[:, ::4] = np.ldexp(y[:, ::4], -128)
        y[:, 1::5] = -np.float32(2) * x[:, 1::5] * np.float32(1 + 2 ** -20)
    elif kind == "overflow":  # 2x overflows unless fused with y = -x
        x = np.float32(3.0e38) + np.minimum(np.abs(x), 3) * np.float32(1e37)
        x[::2] *= -1
        y = -x
    else:                     # alpha 3: fusing changes one rounding in four
        alpha = 3.0
    return x.astype(dtype), y.astype(dtype), alpha


def special_values():
    """Pallas's arithmetic (XLA on the CPU) on values where it matters."""
    cases = [("subnormal", "float32"), ("subnormal", "bfloat16"), ("overflow", "float32"),
             ("overflow", "bfloat16"), ("alpha3", "float32")]
    shape, block = (16, 512), (8, 128)
    device = tk.Device.simulated("TPU v5 lite")
    for i, (kind, dtype) in enumerate(cases):
        x, y, alpha = special_data(kind, shape, DTYPES[dtype], 40 + i)
        name = (f"axpy_xla_{kind} {shape[0]}x{shape[1]} {dtype} block {block[0]}x{block[1]} "
                f"buffers 2")
        want, _ = pk.blocked_axpy(x, y, alpha, block, fused=True)
        piped, _, _ = pk.pipelined_axpy(x, y, alpha, block, 2, fused=True)
        diffs = []
        with tk.Tiling(*shape, *block) as t, tk.Kernel.axpy(alpha, arith="xla") as k, \
                tk.Kernel.axpy(alpha) as numpy_k, tk.Pipeline(k, t, device) as p:
            for what, got, ref in (("tk_kernel_run", k.run(t, [x, y]), want),
                                   ("tk_pipeline_run", p.run([x, y]), piped)):
                d = first_difference(got, ref)
                if d:
                    diffs.append(f"{what} with arith xla: {d}")
            if first_difference(numpy_k.run(t, [x, y]), want) is None:
                diffs.append("the default arithmetic matches Pallas too: the case tells "
                             "nothing apart")
        report(name, "; ".join(diffs) or None)


def main():
    print(f"crosscheck: jax {pk.jax_version()}, Pallas TPU interpret mode on the CPU "
          f"against libtilekern {tk.version()}", flush=True)
    kernel = tk.Kernel.axpy(ALPHA)
    device = tk.Device.simulated("TPU v5 lite")
    long_cases = []
    for s, shape in enumerate(SHAPES):
        for dtype, npdtype in DTYPES.items():
            x, y = data(shape, npdtype, s)
            for block in BLOCKS:
                blocked(kernel, shape, dtype, block, x, y)
                # Buffered(4) as well where the grid is short.
                for buffers in (2, 3, 4) if steps(shape, block) <= 16 else (2, 3):
                    if steps(shape, block) <= MAX_STEPS:
                        pipelined(kernel, device, shape, dtype, block, buffers, x, y)
                    else:
                        long_cases.append((shape, dtype, block, buffers, x, y))
    hazards(kernel, device)
    grids()
    special_values()
    estimate = 90.0
    unraced = 0
    for shape, dtype, block, buffers, x, y in long_cases:
        elapsed = time.monotonic() - STARTED
        if elapsed + estimate <= BUDGET_S:
            t0 = time.monotonic()
            pipelined(kernel, device, shape, dtype, block, buffers, x, y)
            estimate = max(estimate, 1.25 * (time.monotonic() - t0))
            continue
        # Past the budget the case still runs, its bits and padding compared,
        # without the detector (10 s where it takes 80 to 100).
        unraced += 1
        print(f"crosscheck: axpy_pipeline {shape[0]}x{shape[1]} {dtype} block "
              f"{block[0]}x{block[1]} buffers {buffers}: Pallas's race detector off "
              f"({steps(shape, block)} steps of it, an estimated {estimate:.0f} s here, and "
              f"{elapsed:.0f} s of the {BUDGET_S} s budget are gone)", flush=True)
        pipelined(kernel, device, shape, dtype, block, buffers, x, y, detect_races=False)
    print(f"crosscheck: {counts['equal']} equal, {counts['different']} different; "
          f"{unraced} long emit_pipeline cases without Pallas's race detector")
    return 1 if counts["different"] else 0


if __name__ == "__main__":
    sys.exit(main())
