"""Run-time dispatch: TK_ISA forces a compiled path, tk_build_info names it,
and every path this CPU runs converts all 2**32 float32 patterns exactly as
the portable C does.  The library reads TK_ISA once, so each path runs in a
process of its own."""
import ast
import os
import subprocess
import sys
import textwrap

import pytest
import tilekern as tk

PATHS = ("portable", "avx2", "avx512")
CPU = tk.build_info()["cpu"]
RUNNABLE = PATHS[:PATHS.index(CPU) + 1]


def _python(code, isa):
    env = dict(os.environ, TK_ISA=isa, TK_LIBRARY=tk.LIBRARY_PATH)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _same_on_every_path(code, what):
    """code prints its path's name and a digest: every path's equals portable's."""
    digests = {isa: _python(code, isa).split() for isa in RUNNABLE}
    for isa, (got, digest) in digests.items():
        assert got == isa
        assert digest == digests["portable"][1], f"{isa}: the {what} differ from portable's"


def test_build_info_has_every_field():
    info = tk.build_info()
    assert set(info) == {"version", "isa", "cpu", "TK_ISA", "compiler", "tune", "TK_TUNE"}
    assert info["version"] == tk.version()
    assert info["cpu"] in PATHS
    assert info["tune"] in ("intel", "amd")


def _info_with_tune(asked):
    """The build line of a process with TK_TUNE=asked (None: unset) and no TK_ISA."""
    env = dict(os.environ, TK_LIBRARY=tk.LIBRARY_PATH)
    env.pop("TK_ISA", None)
    env.pop("TK_TUNE", None)
    if asked is not None:
        env["TK_TUNE"] = asked
    r = subprocess.run([sys.executable, "-c", "import tilekern as tk; print(tk.build_info())"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return ast.literal_eval(r.stdout)


@pytest.mark.parametrize("asked", ("intel", "amd", "", "zen9"))
def test_tk_tune_picks_the_tuning_and_leaves_the_path(asked):
    info = _info_with_tune(asked)
    vendor = _info_with_tune(None)["tune"]
    assert info["tune"] == (asked if asked in ("intel", "amd") else vendor)
    assert info["TK_TUNE"] == {"": "unset", "zen9": "unknown"}.get(asked, asked)
    assert info["isa"] == CPU


@pytest.mark.parametrize("asked", PATHS + ("", "sse9"))
def test_tk_isa_picks_the_path_or_the_best_below_it(asked):
    out = _python("import tilekern as tk; print(tk.build_info())", asked)
    info = ast.literal_eval(out)
    want = asked if asked in RUNNABLE else CPU
    assert info["isa"] == want
    assert info["cpu"] == CPU
    assert info["TK_ISA"] == {"": "unset", "sse9": "unknown"}.get(asked, asked)


# In each path's process: bf16 of every f32 pattern against ml_dtypes bit for
# bit, a digest per chunk of every other narrowing, and one of every other
# widening of every encoding, compared across paths (the default path's
# results are compared with the references exhaustively in
# test_exhaustive.py).
_ALL_INPUTS = f"""
    import hashlib
    import sys
    import numpy as np
    import tilekern as tk
    sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
    import test_exhaustive
    test_exhaustive.test_bf16_from_f32_on_all_2_32_inputs()
    CHUNK = 1 << 24
    bits = np.arange(CHUNK, dtype=np.uint32)
    # A chunk's digest: its results as 64-bit words, each times a random odd
    # number, summed modulo 2**64.  One differing word always changes it
    # (an odd factor is invertible), and it costs a tenth of a hash.
    odd = np.random.default_rng(7).integers(0, 1 << 63, CHUNK // 4, np.uint64) * 2 + 1
    def fold(a):
        w = a.view(np.uint64)
        return int((w * odd[:w.size]).sum())
    digests = []
    for start in range(0, 1 << 32, CHUNK):
        f = (bits + np.uint32(start)).view(np.float32)
        digests.append("-".join("%x" % fold(tk.from_f32(f, name))
                                for name in ("float16", "float8_e4m3fn", "float8_e5m2")))
    h = hashlib.blake2b(digest_size=16)
    for name, bits in (("float16", np.uint16), ("float8_e4m3fn", np.uint8),
                       ("float8_e5m2", np.uint8)):
        codes = np.arange(1 << (8 * np.dtype(bits).itemsize), dtype=np.uint32).astype(bits)
        for start in range(4):   # every alignment of the loops' vectors
            h.update(tk.to_f32(codes[start:], name).tobytes())
    digests.append(h.hexdigest())
    print(tk.build_info()["isa"], " ".join(digests))
"""


@pytest.fixture(scope="module")
def digests():
    """Each path's process, two at a time (the machines have two cores)."""
    procs = {}
    for isa in RUNNABLE:
        env = dict(os.environ, TK_ISA=isa, TK_LIBRARY=tk.LIBRARY_PATH)
        procs[isa] = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_ALL_INPUTS)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)
        if len(procs) % 2 == 0:
            procs[isa].wait()
    out = {}
    for isa, p in procs.items():
        stdout, stderr = p.communicate(timeout=900)
        out[isa] = (p.returncode, stdout.split(), stderr)
    return out


@pytest.mark.parametrize("isa", PATHS)
def test_every_path_equals_portable_on_all_2_32_inputs(isa, digests):
    if isa not in RUNNABLE:
        pytest.skip(f"this CPU runs {CPU} at best, not {isa}")
    rc, words, stderr = digests[isa]
    assert rc == 0, stderr
    assert words[0] == isa
    portable = digests["portable"][1]
    bad = [i for i, (a, b) in enumerate(zip(words[1:], portable[1:])) if a != b]
    assert len(words) == len(portable), f"{isa}: {len(words)} words, portable {len(portable)}"
    assert not bad, (f"{isa}: f32 patterns from 0x{bad[0] << 24:08x} narrow differently from "
                     "the portable path" if bad[0] < 256 else
                     f"{isa}: f16 or fp8 codes widen differently from the portable path")


# In each path's process: elementwise axpy audits (float32, bfloat16 and
# float16; alpha 3, whose products round) of data with rounding ties, NaNs
# of both signs with payloads, infinities and subnormals in its first
# quarter, ties, zeros, subnormals and the largest finite values without a
# NaN in its third (blocks that the AVX2 path's one-loop first pass takes
# whole, where the gap's largest parts then lie), in a small case
# and one whose planes pass 8 MiB (stored by streaming stores); the stored
# inputs the candidate gets and the JSON reports, as one digest.
_ELEMENTWISE = """
    import hashlib, os, tempfile
    import numpy as np
    import tilekern as tk
    rng = np.random.default_rng(5)
    special = np.array([0x3F808000, 0x3F818000, 0xBF808000, 0x7FC00001, 0xFF812345,
                        0x7F800000, 0xFF800000, 0x00012345, 0x80000001, 0x7F7FFFFF,
                        0x477FF000, 0x387FC000], np.uint32).view(np.float32)
    number = np.array([0x3F808000, 0xBF818000, 0x00012345, 0x80000001, 0x80000000,
                       0x00000000, 0x477FF000, 0x387FC000, 0x5F123456],
                      np.uint32).view(np.float32)
    def data(shape, k=0):
        x = rng.standard_normal(shape).astype(np.float32)
        q = x.size // 4
        x.flat[:q:97] = np.resize(special, x.flat[:q:97].shape)
        x.flat[2 * q + k:3 * q:89] = np.resize(number, x.flat[2 * q + k:3 * q:89].shape)
        return x
    h = hashlib.blake2b(digest_size=16)
    def candidate(x, y, out):
        h.update(x.tobytes())
        h.update(y.tobytes())
        with np.errstate(all="ignore"):
            out[...] = (np.float32(3) * x.astype(np.float32)
                        + y.astype(np.float32)).astype(out.dtype)
    with tempfile.TemporaryDirectory() as d:
        for dtype, shape in (("float32", (1024, 2100)), ("bfloat16", (2048, 2100)),
                             ("float16", (2048, 2100))):
            a = tk.Audit(tk.Kernel.axpy(3.0), candidate)
            a.add_case(dtype, [data((37, 300)), data((37, 300), 7)])
            a.add_case(dtype, [data(shape), data(shape, 7)])
            a.run()
            path = os.path.join(d, "e.json")
            a.write_report(path)
            with open(path, "rb") as f:
                h.update(f.read())
    print(tk.build_info()["isa"], h.hexdigest())
"""


def test_every_path_audits_elementwise_cases_to_the_same_report():
    _same_on_every_path(_ELEMENTWISE, "audits")


# In each path's process: reduction audits (matmul and row sum; float32,
# bfloat16 and float16 inputs; a correct and a bf16-accumulating candidate)
# on shapes with tails on every blocking of the float64 oracle, on one and
# on three threads; the JSON reports' digest.
_REDUCTIONS = """
    import hashlib, os, tempfile
    import ml_dtypes
    import numpy as np
    import tilekern as tk
    rng = np.random.default_rng(11)
    x = rng.standard_normal((69, 300), np.float32)
    y = rng.standard_normal((300, 21), np.float32)
    # 13 columns: AVX-512's 4 x 16 tiles end inside the matrix.
    x13, y13 = x[:, :130], rng.standard_normal((130, 13), np.float32)
    # 71 rows (blocks of 64 and 7; chunks of 16 and 7 on three threads),
    # 257 terms, 40 columns: the AVX2 path's 6-row groups whole and cut,
    # one term past two blocks of 128.
    x71, y71 = (rng.standard_normal((71, 257), np.float32),
                rng.standard_normal((257, 40), np.float32))
    BF16 = np.dtype(ml_dtypes.bfloat16)
    def good(x, y, out):
        out[...] = (x.astype(np.float32) @ y.astype(np.float32)).astype(out.dtype)
    def bf16_acc(x, y, out):
        acc = np.zeros((x.shape[0], y.shape[1]), BF16)
        for k in range(x.shape[1]):
            acc = (acc.astype(np.float32) + np.outer(x[:, k].astype(np.float32),
                   y[k].astype(np.float32))).astype(BF16)
        out[...] = acc.astype(out.dtype)
    def row_sum(x, out):
        out[...] = x.astype(np.float32).sum(axis=1, keepdims=True).astype(out.dtype)
    h = hashlib.blake2b(digest_size=16)
    with tempfile.TemporaryDirectory() as d:
        for threads in (1, 3):
            for contract, fn, shapes in ((tk.Kernel.matmul(), good,
                                          [[x, y], [x13, y13], [x71, y71]]),
                                         (tk.Kernel.matmul(), bf16_acc, [[x, y]]),
                                         (tk.Kernel.row_sum(), row_sum, [[x]])):
                contract.threads = threads
                a = tk.Audit(contract, fn)
                for dtype in ("float32", "bfloat16", "float16"):
                    for inputs in shapes:
                        a.add_reduction_case(dtype, inputs, out_dtype="float32")
                a.run()
                path = os.path.join(d, "r.json")
                a.write_report(path)
                with open(path, "rb") as f:
                    h.update(f.read())
    print(tk.build_info()["isa"], h.hexdigest())
"""


def test_every_path_audits_reductions_to_the_same_report():
    _same_on_every_path(_REDUCTIONS, "reports")


# In each path's process: the built-in axpy run every way (mask and pad
# tails, the elementwise and the blockwise body, the call of the kernel step
# by step under NaN padding), under every arithmetic, in every dtype, on
# data where many elements have two or three NaN operands (alpha, x, y) of
# both signs with payloads, and where Inf - Inf and 0 * Inf make NaNs (also
# beside a NaN y: the rule still gives y's); f32
# and bf16 also on planes past 8 MiB (written by streaming stores).  Each
# result whose operands hold a NaN must be the first of alpha, x, y that is
# one, made quiet, cast to the dtype; every result goes into one digest.
_NAN_RULE = """
    import hashlib
    import ml_dtypes
    import numpy as np
    import tilekern as tk
    rng = np.random.default_rng(23)
    pool = np.array([0x7FC00001, 0xFFC12345, 0x7F812345, 0xFF800001, 0x7FFFFFFF,
                     0x7F800000, 0xFF800000, 0, 0x80000000, 0x3F800000, 0x00012345],
                    np.uint32).view(np.float32)
    DT = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16,
          "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}
    def data(shape, dt):
        x = rng.standard_normal(shape).astype(np.float32)
        pick = rng.integers(0, 2 * len(pool), shape)
        x[pick < len(pool)] = pool[pick[pick < len(pool)]]
        with np.errstate(all="ignore"):
            return x.astype(dt)
    def rule(alpha, x, y):
        bits = np.zeros(x.shape, np.uint32)
        seen = np.zeros(x.shape, bool)
        for v in (np.full(x.shape, alpha, np.float32), x, y):
            first = np.isnan(v) & ~seen
            bits[first] = v.view(np.uint32)[first] | 0x00400000
            seen |= first
        return bits.view(np.float32), seen
    h = hashlib.blake2b(digest_size=16)
    checked = 0
    for name, dt in DT.items():
        shapes = [(37, 300)] + ([(1024, 2100)] if name == "float32" else
                                [(2048, 2100)] if name == "bfloat16" else [])
        for shape in shapes:
            x, y = data(shape, dt), data(shape, dt)
            x32, y32 = x.astype(np.float32), y.astype(np.float32)
            # alpha 0 makes 0 * Inf, an invalid product, beside NaN y.
            for alpha in (2.0, 0.0, float(np.uint32(0xFFC0BEEF).view(np.float32))):
                want, has_nan = rule(np.float32(alpha), x32, y32)
                with np.errstate(all="ignore"):
                    want = want.astype(dt)
                for arith in ("numpy", "fma", "ftz", "xla"):
                    k = tk.Kernel.axpy(alpha, arith)
                    outs = []
                    for tail, body in (("mask", "elementwise"), ("pad", "elementwise"),
                                       ("mask", "blockwise")):
                        k.body = body
                        outs.append(k.run(tk.Tiling(*shape, 8, 128, tail), [x, y]))
                    k.body = "elementwise"
                    for alias in (0, 1):   # the output is an input: in place
                        io = [x.copy(), y.copy()]
                        outs.append(k.run(tk.Tiling(*shape, 8, 128), io, io[alias]))
                    for tail in ("mask", "pad"):
                        c = tk.Call.from_kernel(k, tk.Tiling(*shape, 8, 128, tail), name)
                        c.pad = "nan"
                        outs.append(c.run([x, y])[0])
                    for out in outs:
                        u = out.view(np.uint8 if out.itemsize == 1 else
                                      np.uint16 if out.itemsize == 2 else np.uint32)
                        w = want.view(u.dtype)
                        bad = np.flatnonzero(has_nan & (u != w))
                        assert not bad.size, (name, shape, alpha, arith, bad[:5],
                                              u.flat[bad[:5]], w.flat[bad[:5]])
                        checked += int(has_nan.sum())
                        h.update(out.tobytes())
    assert checked > 100000, checked
    print(tk.build_info()["isa"], h.hexdigest())
"""


def test_every_path_runs_axpy_to_the_same_bits_with_a_fixed_nan_rule():
    _same_on_every_path(_NAN_RULE, "runs")


# The built-in bf16 axpy on every code of x and y: a plane past 8 MiB
# (written by streaming stores, 64-byte lines at a time on the AVX-512
# path), alone and in place, under the default arithmetic.  Results of
# operands without a NaN must be numpy's f32(f32(alpha * x) + y) cast to
# nearest even (subnormals, overflow to Inf and the carries of rounding
# included; where numpy's is a NaN, Inf - Inf, any NaN), the rest the NaN
# rule's; every result goes into one digest.
_BF16_CODES = """
    import hashlib
    import ml_dtypes
    import numpy as np
    import tilekern as tk
    rng = np.random.default_rng(29)
    BF16 = ml_dtypes.bfloat16
    shape = (2048, 2100)
    x = rng.integers(0, 1 << 16, shape, dtype=np.uint16).view(BF16)
    y = rng.integers(0, 1 << 16, shape, dtype=np.uint16).view(BF16)
    x32, y32 = x.astype(np.float32), y.astype(np.float32)
    h = hashlib.blake2b(digest_size=16)
    for alpha in (3.0, -0.7):
        a = np.float32(alpha)
        with np.errstate(all="ignore"):
            r = (a * x32 + y32).astype(BF16).view(np.uint16)
        operand_nan = np.isnan(x32) | np.isnan(y32)
        first = np.where(np.isnan(x32), x32, y32).view(np.uint32) | 0x00400000
        nan_want = first.view(np.float32).astype(BF16).view(np.uint16)
        k = tk.Kernel.axpy(alpha)
        t = tk.Tiling(*shape, 8, 128)
        io = [x.copy(), y.copy()]
        for out in (k.run(t, [x, y]), k.run(t, io, io[0])):
            u = out.view(np.uint16)
            both_nan = np.isnan(out.astype(np.float32)) & np.isnan(r.view(BF16).astype(np.float32))
            bad = np.flatnonzero(np.where(operand_nan, u != nan_want, (u != r) & ~both_nan))
            assert not bad.size, (alpha, bad[:5], u.flat[bad[:5]], r.flat[bad[:5]])
            h.update(out.tobytes())
    print(tk.build_info()["isa"], h.hexdigest())
"""


def test_every_path_runs_bf16_axpy_on_every_code_to_the_same_bits():
    _same_on_every_path(_BF16_CODES, "runs")
