"""Audits of matmul and row-sum contracts under error bounds: the worked
cases (f32, bf16, f16 and fp8 inputs; the seed's shapes and a 512x1024x768
matmul with tails), each with a correct candidate that sums in another
order (bit-different, within the bound), one that accumulates in bf16 and
one that drops the K tail, named correctly; products rounded early, a
missing initialization and a K tail that reads NaN padding; the bound itself against a direct computation;
and the refusals."""
import ml_dtypes
import numpy as np
import pytest
import tilekern as tk

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = ["float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"]
SEED_SHAPES = [(8, 128, 128), (9, 129, 65), (17, 257, 129)]


def f32(a):
    return a.astype(np.float32)


def blocked(x, y, bk=128):
    """f32 accumulation over k in blocks, as a Pallas k-loop does."""
    acc = np.zeros((x.shape[0], y.shape[1]), np.float32)
    for k0 in range(0, x.shape[1], bk):
        acc += f32(x[:, k0:k0 + bk]) @ f32(y[k0:k0 + bk])
    return acc


def correct(x, y):
    return blocked(x, y).astype(x.dtype)


def correct_tiled(x, y, bm=384, bn=512, bk=384):
    """Output tiles of bm x bn, each summed over K in blocks of bk, as a
    Pallas grid with an accumulator does: on 512x1024x768 every dimension
    ends in a partial block (512 = 384 + 128, 768 = 512 + 256, 1024 =
    2 x 384 + 256)."""
    out = np.empty((x.shape[0], y.shape[1]), np.float32)
    for i in range(0, x.shape[0], bm):
        for j in range(0, y.shape[1], bn):
            out[i:i + bm, j:j + bn] = blocked(x[i:i + bm], y[:, j:j + bn], bk)
    return out.astype(x.dtype)


def bf16_round(a):
    """float32 values rounded to bfloat16's precision, to nearest even, kept
    in float32 (as .astype(BF16) rounds finite values, four times as fast
    on the 512x1024x768 case's k loop)."""
    u = a.view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> 16) & 1)) & np.uint32(0xFFFF0000)).view(np.float32)


def bf16_accumulating(x, y):
    xf, yf = f32(x), f32(y)
    acc = np.zeros((x.shape[0], y.shape[1]), np.float32)
    for k in range(x.shape[1]):
        acc = bf16_round(acc + np.outer(xf[:, k], yf[k]))
    return acc.astype(BF16).astype(x.dtype)


def k_tail_dropped(x, y):
    # K blocks of 128, or of 384 where 128 divides K (1024 = 2 x 384 + 256).
    bk = 384 if x.shape[1] % 128 == 0 and x.shape[1] > 384 else 128
    k = x.shape[1] - x.shape[1] % bk
    return (f32(x[:, :k]) @ f32(y[:k])).astype(x.dtype)


def products_rounded(x, y):   # into a float32 output
    acc = np.zeros((x.shape[0], y.shape[1]), np.float32)
    for k in range(x.shape[1]):
        acc += f32(np.outer(f32(x[:, k]), f32(y[k])).astype(x.dtype))
    return acc


@pytest.mark.parametrize("candidate,verdict", [
    (correct, "not-run"), (bf16_accumulating, "bfloat16-accumulation"),
    (k_tail_dropped, "k-tail-dropped")])
def test_matmul_worked_cases_are_named(candidate, verdict):
    r = tk.audit_matmul(candidate, shapes=SEED_SHAPES, dtypes=DTYPES)
    # The large case, with tails: the correct candidate in tiles that end
    # in partial blocks in every dimension, the K-tail one in K blocks of
    # 384; every dtype for each.
    big = tk.audit_matmul(correct_tiled if candidate is correct else candidate,
                          shapes=[(512, 1024, 768)], dtypes=DTYPES)
    r.cases.extend(big.cases)
    for c in r.cases:
        if candidate is k_tail_dropped and c.depth == 128:
            assert c.passed, c   # one whole block: no tail to drop
            continue
        assert c.diagnosis == verdict, (c, r.summary())
        assert c.passed == (verdict == "not-run")
    if candidate is correct:
        assert r.passed and big.passed
        f32_cases = [c for c in r.cases if c.dtype == "float32"]
        # Summing in blocks of 128 is another order: bits differ, yet within bound.
        assert all(c.impl_mismatches > 0 and 0 < c.bound_ratio <= 1 for c in f32_cases)
        assert "differ in bits from the oracle" in r.summary()
        # Each line names the worst element, the bound there and the gap's parts.
        c, line = r.cases[0], r.summary().splitlines()[0]
        assert f"at {c.bound_at}, where the bound is {c.bound:.3g}" in line, line
        assert f"(input {c.gap_input_max_abs!r}, output {c.gap_output_max_abs!r})" in line, line


@pytest.mark.parametrize("dtype", DTYPES)
def test_row_sum_worked_cases(dtype):
    def correct_sum(x):   # pairwise, as numpy sums
        return f32(x).sum(axis=1, keepdims=True, dtype=np.float32).astype(x.dtype)

    def bf16_sum(x):
        acc = np.zeros((x.shape[0], 1), BF16)
        for k in range(x.shape[1]):
            acc = (f32(acc) + f32(x[:, k:k + 1])).astype(BF16)
        return acc.astype(x.dtype)

    def tail_dropped(x):
        k = x.shape[1] - x.shape[1] % 128
        return f32(x[:, :k]).sum(axis=1, keepdims=True).astype(x.dtype)

    shapes = [(8, 128), (9, 129), (17, 257), (15, 1031)]
    assert tk.audit_row_sum(correct_sum, shapes=shapes, dtypes=[dtype]).passed
    r = tk.audit_row_sum(bf16_sum, shapes=shapes[1:], dtypes=[dtype])
    # float8_e5m2 keeps two fraction bits: its output cast can hide the
    # accumulation's error, and a case within its bound is correct.
    failed = [c for c in r.cases if not c.passed]
    assert {c.diagnosis for c in failed} == {"bfloat16-accumulation"}, r.summary()
    assert len(failed) == len(r.cases) - (dtype == "float8_e5m2"), r.summary()
    r = tk.audit_row_sum(tail_dropped, shapes=shapes[1:], dtypes=[dtype])
    assert {c.diagnosis for c in r.cases} == {"k-tail-dropped"}, r.summary()


def test_float16_accumulation_is_told_from_bfloat16():
    """Where both narrow formats' bounds cover a candidate, the diagnosis
    simulates each accumulation in k order: a float16 accumulator is
    float16's, a bfloat16 one bfloat16's."""
    def f16_accumulating(x, y):
        xf, yf = f32(x), f32(y)
        acc = np.zeros((x.shape[0], y.shape[1]), np.float16)
        for k in range(x.shape[1]):
            acc = (f32(acc) + np.outer(xf[:, k], yf[k]).astype(np.float16)
                   .astype(np.float32)).astype(np.float16)
        return f32(acc)

    def bf16_accumulating_f32_out(x, y):
        return f32(bf16_accumulating(x, y).astype(BF16))

    for candidate, verdict in ((f16_accumulating, "float16-accumulation"),
                               (bf16_accumulating_f32_out, "bfloat16-accumulation")):
        r = tk.audit_matmul(candidate, shapes=[(17, 257, 129)],
                            dtypes=["float32", "bfloat16", "float16"], out_dtype="float32")
        assert [c.diagnosis for c in r.cases] == [verdict] * 3, r.summary()


def test_a_bfloat16_scratch_is_named_and_an_indexing_error_is_not():
    """A Pallas kernel whose accumulator scratch is bfloat16 adds each K
    block's float32 dot to it: fewer roundings than a term-by-term bfloat16
    sum, so its error is nearer float16's, yet its float32 outputs are
    bfloat16 values, and with bfloat16 outputs the storage dtype decides.
    A K index off by one fits bfloat16's loose bound at K = 1024 but errs
    far more than that accumulation does: unknown."""
    def bf16_scratch(x, y, out_dtype):
        acc = np.zeros((x.shape[0], y.shape[1]), BF16)
        for k0 in range(0, x.shape[1], 128):
            acc = (f32(acc) + f32(x[:, k0:k0 + 128]) @ f32(y[k0:k0 + 128])).astype(BF16)
        return f32(acc).astype(out_dtype)

    def k_off_by_one(x, y):
        return (f32(x) @ np.roll(f32(y), 1, axis=0)).astype(x.dtype)

    shapes = [(17, 257, 129), (64, 1024, 64)]
    for out in ("float32", None):
        r = tk.audit_matmul(lambda x, y: bf16_scratch(x, y, out or x.dtype), shapes=shapes,
                            dtypes=["float32", "bfloat16"], out_dtype=out)
        assert [c.diagnosis for c in r.cases] == ["bfloat16-accumulation"] * 4, r.summary()
    r = tk.audit_matmul(k_off_by_one, shapes=shapes, dtypes=["float32", "bfloat16"])
    assert [c.diagnosis for c in r.cases] == ["unknown"] * 4, r.summary()


def sequential(terms, d, reverse=False):
    """terms (..., K) summed over the last axis in dtype d, one at a time."""
    acc = np.zeros(terms.shape[:-1], np.float32)
    for t in np.moveaxis(terms[..., ::-1] if reverse else terms, -1, 0):
        acc = f32((acc + f32(t.astype(d))).astype(d))
    return acc


def test_narrow_accumulation_in_either_order_and_large_data():
    """A float16 accumulator with bfloat16 outputs is float16's, and either
    format summing sorted data backwards (its largest error) keeps its
    name; a K index off by one on data large enough to overflow float16's
    simulation is unknown; NaN padding read at K = 1000 stays named on data
    scaled by 12, and beside an Inf input of another row."""
    rng = np.random.default_rng(0)
    def audit(kind, candidate, inputs, out=None):
        a = tk.Audit(tk.Kernel.matmul() if kind == "mm" else tk.Kernel.row_sum(), candidate)
        a.add_reduction_case("float32", inputs, out)
        a.run()
        return a.results[0].diagnosis

    x, y = rng.standard_normal((8, 1024), np.float32), rng.standard_normal((1024, 16), np.float32)
    f16_into_bf16 = lambda a, b: sequential(np.moveaxis(
        f32(a)[:, :, None] * f32(b)[None], 1, 2), np.float16).astype(BF16)
    assert audit("mm", f16_into_bf16, [x, y], "bfloat16") == "float16-accumulation"
    xs = np.sort(np.abs(rng.standard_normal((8, 1024), np.float32)), axis=1)
    for d, name in ((np.float16, "float16"), (BF16, "bfloat16")):
        backwards = lambda a, d=d: sequential(f32(a), d, reverse=True)[:, None]
        assert audit("rs", backwards, [xs]) == name + "-accumulation"
    xl, yl = 30 * rng.standard_normal((16, 4096), np.float32), 30 * rng.standard_normal(
        (4096, 16), np.float32)
    assert audit("mm", lambda a, b: f32(a) @ np.roll(f32(b), 1, axis=0), [xl, yl]) == "unknown"
    xp, yp = 12 * rng.standard_normal((16, 1000), np.float32), 12 * rng.standard_normal(
        (1000, 16), np.float32)
    reads_padding = lambda a, b: blocked(nan_padded(a, 1), nan_padded(b, 0))
    assert audit("mm", reads_padding, [xp, yp]) == "k-tail-reads-padding"
    xi = rng.standard_normal((8, 300), np.float32)
    xi[0, 5] = np.inf
    all_nan = lambda a: np.full((a.shape[0], 1), np.nan, np.float32)
    assert audit("rs", all_nan, [xi]) == "k-tail-reads-padding"


def test_a_float16_accumulation_that_overflows_is_named():
    """Rows whose float16 sums overflow (+Inf and -Inf) beside rows that do
    not: named after float16 while the overflows are where its simulation
    has them, unknown with one more Inf where it has none."""
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((16, 256), np.float32), rng.standard_normal((256, 16), np.float32)
    x[0], x[1], y[:, :8] = 1000, -1000, np.abs(y[:, :8]) + 0.5
    f16_acc = lambda a, b: sequential(np.moveaxis(f32(a)[:, :, None] * f32(b)[None], 1, 2),
                                      np.float16)
    assert np.isinf(f16_acc(x, y)[:2, :8]).all() and np.isfinite(f16_acc(x, y)[2:]).all()

    def spoiled(a, b):
        out = f16_acc(a, b)
        out[5, 5] = np.inf
        return out
    for candidate, name in ((f16_acc, "float16-accumulation"), (spoiled, "unknown")):
        a = tk.Audit(tk.Kernel.matmul(), candidate)
        a.add_reduction_case("float32", [x, y])
        a.run()
        assert a.results[0].diagnosis == name, a.results[0]


def test_products_rounded_and_missing_initialization_are_named():
    r = tk.audit_matmul(products_rounded, shapes=[(17, 257, 129)], dtypes=["bfloat16"],
                        out_dtype="float32")
    assert r.cases[0].diagnosis == "products-rounded", r.summary()

    def no_init(x, y, out):   # accumulates into the output it was handed
        for k0 in range(0, x.shape[1], 128):
            out += f32(x[:, k0:k0 + 128]) @ f32(y[k0:k0 + 128])
    r = tk.audit_matmul(no_init, shapes=[(9, 129, 65)], dtypes=["float32"])
    assert r.cases[0].diagnosis == "missing-initialization"


def nan_padded(a, axis, bk=128):
    """a padded along axis to a multiple of bk with NaN, as Pallas's
    interpret mode pads a partial block."""
    pad = [(0, 0)] * a.ndim
    pad[axis] = (0, -a.shape[axis] % bk)
    return np.pad(f32(a), pad, constant_values=np.nan)


def test_a_k_tail_that_reads_padding_is_named():
    """The last K block read whole, NaN beyond K: every element NaN, with
    or without the output's fill, so not a missing initialization."""
    def reads_padding(x, y):
        return blocked(nan_padded(x, 1), nan_padded(y, 0)).astype(x.dtype)

    def row_sum_reads_padding(x):
        return nan_padded(x, 1).sum(axis=1, keepdims=True).astype(x.dtype)

    r = tk.audit_matmul(reads_padding, shapes=SEED_SHAPES, dtypes=DTYPES)
    for c in r.cases:   # a depth of 128 is one whole block: no padding read
        assert (c.diagnosis, c.passed) == (("not-run", True) if c.depth == 128 else
                                           ("k-tail-reads-padding", False)), r.summary()
    r = tk.audit_row_sum(row_sum_reads_padding, shapes=[(9, 129), (15, 1031)],
                         dtypes=["float32", "bfloat16"])
    assert {c.diagnosis for c in r.cases} == {"k-tail-reads-padding"}, r.summary()


def test_a_k_tail_that_reads_finite_garbage_is_named_by_its_rank():
    """A TPU pads with whatever its memory held: finite garbage of the
    data's size in the last K block (K = 300: 84 columns of padding with
    blocks of 128) makes an error of rank 84, named where the output has
    room to tell (at least 336 rows and columns), on every input dtype."""
    def garbage_padded(a, axis, seed):
        g = np.random.default_rng(seed).uniform(-4, 4, a.shape[:axis] + (84,) +
                                                 a.shape[axis + 1:]).astype(np.float32)
        return np.concatenate([f32(a), g], axis=axis)

    def reads_garbage(x, y):
        return blocked(garbage_padded(x, 1, 1), garbage_padded(y, 0, 2))

    r = tk.audit_matmul(reads_garbage, shapes=[(352, 300, 384)], dtypes=DTYPES,
                        out_dtype="float32")
    assert {c.diagnosis for c in r.cases} == {"k-tail-reads-padding"}, r.summary()


def test_a_call_accumulating_in_its_bfloat16_output_is_named():
    """A Pallas-style k loop whose accumulator is its bfloat16 output ref:
    Call.round_steps rounds the block after every step as that ref does,
    and the audit names the accumulation; with the default float32
    accumulator the same body passes."""
    def call_matmul(round_steps):
        def candidate(x, y):
            (M, K), N = x.shape, y.shape[1]

            def body(step, xb, yb, o):
                if step.grid[2] == 0:
                    o[...] = 0.0
                o += xb @ yb

            c = tk.Call((-(-M // 64), -(-N // 128), -(-K // 128)), body,
                        [tk.BlockSpec((M, K), (64, 128), lambda i, j, k: (i, k), x.dtype.name),
                         tk.BlockSpec((K, N), (128, 128), lambda i, j, k: (k, j), y.dtype.name)],
                        [tk.BlockSpec((M, N), (64, 128), lambda i, j, k: (i, j), "bfloat16")],
                        round_steps=round_steps)
            assert c.round_steps is round_steps
            return c.run([x, y])[0]
        return candidate

    for round_steps, verdict in ((False, "not-run"), (True, "bfloat16-accumulation")):
        r = tk.audit_matmul(call_matmul(round_steps), shapes=[(64, 1024, 128)],
                            dtypes=["bfloat16"], out_dtype="bfloat16")
        assert [c.diagnosis for c in r.cases] == [verdict], r.summary()
        assert r.passed == (not round_steps)


def bound_of(x, y, scale):
    """The bound of every case the test below audits, over (x, y) scaled, from
    numpy in float64, and whether the sum of magnitudes came from float32."""
    x, y = (x * scale).astype(np.float32), (y * scale).astype(np.float32)
    def into(x, y, out):
        out[...] = blocked(x, y).astype(out.dtype)
    a = tk.Audit(tk.Kernel.matmul(), into)
    a.add_reduction_case("bfloat16", [x, y], out_dtype="bfloat16")
    a.add_reduction_case("bfloat16", [x, y], out_dtype="float32")
    assert a.run()
    xb, yb = f32(x.astype(BF16)).astype(np.float64), f32(y.astype(BF16)).astype(np.float64)
    s, A = xb @ yb, np.abs(xb) @ np.abs(yb)
    u, n = 2.0 ** -24, 299
    # Products of magnitudes exact in float32 (at least FLT_MIN), 128 of them
    # finite: the library sums them in float32 per 128 terms, each sum within
    # gamma_24(127) of its terms', and takes the total at its upper bound.
    ax, ay = np.abs(xb), np.abs(yb)
    prods = ax.max() * ay.max() * 128, ax[ax > 0].min() * ay[ay > 0].min()
    mag32 = prods[0] <= 2.0 ** 127 and prods[1] >= 2.0 ** -126
    g128 = 127 * u / (1 - 127 * u) if mag32 else 0.0
    for case, cast in ((a.result(0), True), (a.result(1), False)):
        r, c = case.bound_at
        lo_hi = []
        for mag in (A[r, c], A[r, c] * (1 + g128) / (1 - g128)):
            acc = n * u / (1 - n * u) * mag + 2 * 300 * 2.0 ** -150 + 300 * 2.0 ** -53 / (
                1 - 300 * 2.0 ** -53) * mag
            lo_hi.append(acc + (2.0 ** -8 * (abs(s[r, c]) + acc) + 2.0 ** -134 if cast else 0.0))
        assert case.depth == 300 and case.rows == 4 and case.cols == 5
        yield case.bound, lo_hi, mag32, cast


@pytest.mark.parametrize("scale", [1.0, 2.0 ** 60, 2.0 ** -66])
def test_the_bound_is_gamma_k_minus_1_sum_abs_plus_the_cast(scale):
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal((4, 300)), rng.standard_normal((300, 5))
    for bound, (lo, hi), mag32, cast in bound_of(x, y, scale):
        # Data scaled past float32's range for 128 products sums magnitudes
        # in float64 (mag32 false): then lo == hi.  numpy's sum of
        # magnitudes adds in another order, so it agrees to gamma_53(k).
        assert mag32 == (scale == 1.0)
        assert lo * (1 - 1e-12) <= bound <= hi * (1 + 1e-12), (bound, lo, hi)
        if mag32 and not cast:   # float32 sums taken: 1 / (1 - gamma_24(127)) shows
            assert bound > lo * (1 + 1e-6)


def test_a_float32_sum_past_float16s_largest_number_within_the_bound_passes():
    # A sequential float32 row sum (the contract's accumulation) that lands
    # on 65520 or above, where float16 overflows, while the exact sum lies
    # below: the cast is Inf where the oracle's is 65504, and the case
    # passes, the error that reaches 65520 within the bound.
    rng = np.random.default_rng(0)
    x = 16 + 4 * rng.standard_normal((400, 4096))
    x = f32(x * (65519.97 / x.sum(axis=1, keepdims=True)))
    exact = x.sum(axis=1, dtype=np.float64)
    seq = np.cumsum(x, axis=1, dtype=np.float32)[:, -1]
    rows = np.flatnonzero((exact < 65520) & (seq >= 65520))
    assert rows.size, "no row of this data overflows float16 only in float32"
    data = x[rows[:4]]

    def row_sum(v):
        with np.errstate(over="ignore"):
            return np.cumsum(v, axis=1, dtype=np.float32)[:, -1:].astype(np.float16)

    a = tk.Audit(tk.Kernel.row_sum(), row_sum)
    a.add_reduction_case("float32", [data], out_dtype="float16")
    assert a.run(), a.result(0)
    r = a.result(0)
    assert np.isinf(row_sum(data)).all()
    assert 0.0 < r.bound_ratio <= 1.0


def test_bad_input_is_refused_clearly():
    for accum in ("int32", "float8_e4m3fn"):
        with pytest.raises(tk.InvalidArgumentError, match=f"'{accum}' is not one of "
                                                          f"'float32', 'bfloat16', 'float16'"):
            tk.Kernel.matmul(accum=accum)
    a = tk.Audit(tk.Kernel.matmul(accum="float16"), correct)
    x = np.ones((2, 3), np.float32)
    with pytest.raises(tk.DtypeError, match="mismatched accumulation"):
        a.add_reduction_case("bfloat16", [x, x.T])
    with pytest.raises(tk.InvalidArgumentError, match="tk_audit_add_reduction_case"):
        a.add_case("float16", [x, x])
    e = tk.Audit(tk.Kernel.axpy(2.0), lambda x, y: x)
    e.add_case("float32", [x, x])
    e.run()
    with pytest.raises(tk.InvalidArgumentError, match="exact: it has no error bound"):
        tk._ffi.lib.tk_audit_result(e, 0, tk._ffi.TK_AUDIT_BOUND_RATIO,
                                    tk._ffi.ctypes.byref(tk._ffi.ctypes.c_double()))
    with pytest.raises(tk.InvalidArgumentError, match="elementwise; add its cases"):
        e.add_reduction_case("float32", [x, x.T])
    with pytest.raises(tk.InvalidArgumentError, match="audited under its error bound"):
        with tk.Tiling(2, 3, 8, 128) as t:
            tk.Kernel.matmul().run(t, [x, x])
    with pytest.raises(tk.InvalidArgumentError, match="own code"):
        tk.Kernel.custom(lambda inputs, out: None, 2).arith = "xla"


@pytest.mark.parametrize("order", ["ascending", "descending", "pairwise", "blocked 32"])
def test_every_summation_order_in_float32_is_within_the_bound(order):
    # The bound is for any order: each of these f32 row sums must pass, on
    # data that cancels (mixed signs) and on data that does not.
    def row_sum(x):
        v = f32(x)
        if order == "pairwise":
            return v.sum(axis=1, keepdims=True, dtype=np.float32).astype(x.dtype)
        cols = range(v.shape[1])
        if order == "descending":
            cols = reversed(cols)
        acc = np.zeros((v.shape[0], 1), np.float32)
        if order == "blocked 32":
            for k0 in range(0, v.shape[1], 32):
                acc += v[:, k0:k0 + 32].sum(axis=1, keepdims=True, dtype=np.float32)
        else:
            for k in cols:
                acc += v[:, k:k + 1]
        return acc.astype(x.dtype)

    for seed in range(3):
        r = tk.audit_row_sum(row_sum, shapes=[(64, 1000), (33, 4099)],
                             dtypes=["float32", "bfloat16", "float16"], seed=seed)
        assert r.passed, r.summary()
        ratios = [c.bound_ratio for c in r.cases if c.dtype == "float32"]
        assert max(ratios) < 1.0 and max(ratios) > 0.0


def test_progress_reports_each_step_and_an_exception_stops_the_run():
    seen = []
    result = tk.audit_matmul(bf16_accumulating, shapes=[(9, 600, 70)], dtypes=["bfloat16"],
                             progress=lambda *report: seen.append(report))
    assert not result.passed and result.cases[0].diagnosis == "bfloat16-accumulation"
    steps = [s for _, s, _ in seen]
    assert {c for c, _, _ in seen} == {0}
    assert steps[0] == "candidate" and steps[-1] == "diagnosis"
    assert steps.index("measure") == len(steps) - steps[::-1].index("measure") - 1
    oracle = [f for _, s, f in seen if s == "oracle"]
    assert oracle[0] == 0.0 and oracle[-1] == 1.0 and oracle == sorted(oracle)
    assert len(oracle) == 4   # its start and K = 600's three passes of up to 256 terms

    a = result.audit
    before = a.results

    def stop(case, step, fraction):
        if step == "oracle" and fraction > 0.5:
            raise LookupError(f"stopped at {fraction}")

    a.set_progress(stop)
    with pytest.raises(LookupError, match="stopped at"):
        a.run()
    assert a.results == before, "a stopped run keeps the last complete run's results"
    with pytest.raises(tk.InvalidArgumentError, match="not callable"):
        a.set_progress(42)


def test_ctrl_c_stops_the_oracle_at_its_next_report():
    """SIGINT while the C oracle sums: its next report returns to Python,
    which raises KeyboardInterrupt there, with or without a progress
    function; the oracle (some 0.4 s here) is not left to finish."""
    import os
    import signal
    import threading

    rng = np.random.default_rng(5)
    data = [rng.standard_normal((256, 32768), np.float32),
            rng.standard_normal((32768, 256), np.float32)]
    for with_progress in (False, True):
        calls, seen, returned = [], [], threading.Event()

        def interrupt():
            returned.wait()
            threading.Event().wait(0.005)
            os.kill(os.getpid(), signal.SIGINT)

        def candidate(x, y):
            calls.append(x.shape)
            if len(calls) == 1:
                threading.Thread(target=interrupt).start()
            out = f32(x) @ f32(y)
            returned.set()
            return out

        a = tk.Audit(tk.Kernel.matmul(), candidate,
                     (lambda *r: seen.append(r)) if with_progress else None)
        for _ in range(2):
            a.add_reduction_case("bfloat16", data, "float32")
        with pytest.raises(KeyboardInterrupt):
            a.run()
        assert len(calls) == 1
        if with_progress:
            assert seen[-1][1] == "oracle" and seen[-1][2] < 1.0, seen[-3:]


def test_a_flushing_matmul_passes_once_the_contract_declares_the_flush():
    # x's subnormal float32 values times a large y: normal products that a
    # flushing matmul (as XLA computes) drops with its inputs read as zeros.
    tiny = np.float32(2.0 ** -130)

    def flushing(x, y):
        x = np.where(np.abs(x) < np.finfo(np.float32).tiny, np.float32(0), x)
        return (x @ y).astype(np.float32)

    kept = tk.audit_matmul(flushing, shapes=[(5, 64, 7)], dtypes=["float32"])
    assert kept.passed   # standard normal data has no subnormals to drop

    x = np.full((5, 64), tiny, np.float32)
    y = np.full((64, 7), np.float32(2.0 ** 100), np.float32)
    for arith, passes in [("numpy", False), ("xla", True), ("ftz", True)]:
        k = tk.Kernel.matmul()
        k.arith = arith
        a = tk.Audit(k, flushing)
        a.add_reduction_case("float32", [x, y])
        assert a.run() == passes, arith
        c = a.results[0]
        # The gap is against the data as given: the flush is its input part.
        assert (c.gap_input_max_abs > 0) == passes, c
    r = tk.audit_matmul(flushing, shapes=[(5, 64, 7)], dtypes=["float32"], arith="xla")
    assert "(accumulated in float32, xla arithmetic)" in r.summary(), r.summary()
    assert "(accumulated in float32)" in kept.summary(), kept.summary()
