"""The conversions and statistics against their references over every input
or many random ones: tk_bf16_from_f32 and tk_dtype_from_f32_n equal
ml_dtypes' casts (numpy's for float16) on all 2**32 float32 bit patterns,
bit for bit, NaNs included (float16's tiny and infinite results against an
integer rule that is held to numpy's cast); the other way on every encoding; and tk_median /
tk_percentile equal numpy's on 10,000 random sample sets."""
import multiprocessing

import ml_dtypes
import numpy as np
import pytest
import tilekern as tk

CHUNK = 1 << 24


def test_bf16_from_f32_on_all_2_32_inputs():
    bits = np.arange(CHUNK, dtype=np.uint32)
    for start in range(0, 1 << 32, CHUNK):
        u = bits + np.uint32(start)
        f = u.view(np.float32)
        got = tk.bf16_from_f32(f)
        with np.errstate(invalid="ignore"):
            want = f.astype(ml_dtypes.bfloat16).view(np.uint16)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, (f"f32 0x{int(u[bad[0]]):08x}: tilekern 0x{int(got[bad[0]]):04x}, "
                               f"ml_dtypes 0x{int(want[bad[0]]):04x}")


def test_bf16_to_f32_on_all_2_16_inputs():
    b = np.arange(1 << 16, dtype=np.uint16)
    got = tk.bf16_to_f32(b)
    want = b.view(ml_dtypes.bfloat16).astype(np.float32)
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()


SMALL = {"float16": (np.float16, np.uint16), "float8_e4m3fn": (ml_dtypes.float8_e4m3fn, np.uint8),
         "float8_e5m2": (ml_dtypes.float8_e5m2, np.uint8)}
# float32 exponent fields: below 2**-14 float16 results are subnormal or
# zero, from 2**16 on (and below NaN) they are infinite.
F16_TINY, F16_HUGE, F32_NAN = 113, 143, 255


def _f16_rule(u):
    """float16 bits of float32 patterns u that are tiny or huge, computed in
    integers.  Below 2**-25 a value rounds to zero; from there up to 2**-14
    its code is the value in units of 2**-24 rounded to nearest, ties to
    even (1024, when it rounds up to the smallest normal, is that normal's
    code); a huge value is infinity."""
    e = (u >> 23) & 0xFF
    out = ((u >> 16) & 0x8000).astype(np.uint16)
    out[e >= F16_HUGE] |= 0x7C00
    at = np.flatnonzero((e > 101) & (e < F16_TINY))
    m = (u[at] & 0x7FFFFF) | 0x800000
    shift = (126 - e[at]).astype(np.uint32)   # 14 to 24
    q = m >> shift
    r = m & ((np.uint32(1) << shift) - np.uint32(1))
    half = np.uint32(1) << (shift - np.uint32(1))
    q += (r > half) | ((r == half) & (q & np.uint32(1)).astype(bool))
    out[at] |= q.astype(np.uint16)
    return out


def _reference(name, u):
    value, bits = SMALL[name]
    e = (u >> 23) & 0xFF
    if name == "float16" and (e.max() < F16_TINY or (e.min() >= F16_HUGE and
                                                     e.max() < F32_NAN)):
        # numpy's float16 cast takes about 2 s per chunk whose results are
        # tiny or infinite on an Intel Xeon (microcode assists, 460 s in
        # all): such chunks use the integer rule, held to numpy's cast on a
        # sample here and on whole chunks below.
        sample = u[::4093]
        with np.errstate(all="ignore"):
            assert (_f16_rule(sample) == sample.view(np.float32).astype(np.float16)
                    .view(np.uint16)).all(), "the integer float16 rule disagrees with numpy's cast"
        return _f16_rule(u)
    with np.errstate(all="ignore"):
        return u.view(np.float32).astype(value).view(bits)


def _first_difference(args):
    """None, or the first f32 pattern in [start, start + CHUNK) that tilekern
    and the reference cast to different bits, with both results."""
    name, start = args
    u = np.arange(CHUNK, dtype=np.uint32) + np.uint32(start)
    got = tk.from_f32(u.view(np.float32), name).view(SMALL[name][1])
    want = _reference(name, u)
    bad = np.flatnonzero(got != want)
    return None if bad.size == 0 else (int(u[bad[0]]), int(got[bad[0]]), int(want[bad[0]]))


def test_integer_float16_rule_equals_numpy_on_whole_chunks():
    # Both ends of the tiny range and of the huge one, on both signs, with
    # the rounding into the smallest normal and with the largest finite.
    for start in (0x00000000, 0x33000000, 0x38000000, 0x81000000, 0xB8000000,
                  0x47000000, 0x48000000, 0x7F000000, 0xC7000000):
        u = np.arange(CHUNK, dtype=np.uint32) + np.uint32(start)
        e = (u >> 23) & 0xFF
        u = u[(e < F16_TINY) | ((e >= F16_HUGE) & (e < F32_NAN))]
        with np.errstate(all="ignore"):
            want = u.view(np.float32).astype(np.float16).view(np.uint16)
        bad = np.flatnonzero(_f16_rule(u) != want)
        assert bad.size == 0, (f"f32 0x{int(u[bad[0]]):08x}: rule "
                               f"0x{int(_f16_rule(u[bad[:1]])[0]):04x}, numpy 0x{int(want[bad[0]]):04x}")


@pytest.mark.parametrize("name", sorted(SMALL))
def test_dtype_from_f32_on_all_2_32_inputs(name):
    with multiprocessing.get_context("fork").Pool(2) as pool:
        for bad in pool.imap(_first_difference, [(name, s) for s in range(0, 1 << 32, CHUNK)]):
            assert bad is None, (f"{name} of f32 0x{bad[0]:08x}: tilekern 0x{bad[1]:x}, "
                                 f"reference 0x{bad[2]:x}")


@pytest.mark.parametrize("name", sorted(SMALL))
def test_dtype_to_f32_on_every_encoding(name):
    value, bits = SMALL[name]
    b = np.arange(1 << (8 * np.dtype(bits).itemsize), dtype=np.uint32).astype(bits)
    got = tk.to_f32(b, name)
    assert got.view(np.uint32).tolist() == b.view(value).astype(np.float32).view(np.uint32).tolist()
    assert tk.to_f32(b.view(value)).view(np.uint32).tolist() == got.view(np.uint32).tolist()


def test_median_and_percentile_equal_numpy_on_10000_sets():
    rng = np.random.default_rng(11)
    for i in range(10_000):
        n = int(rng.integers(1, 64))
        kind = i % 4
        if kind == 0:
            x = rng.exponential(1.0, n)
        elif kind == 1:
            x = rng.standard_normal(n) * 10.0 ** rng.integers(-6, 6)
        elif kind == 2:
            x = rng.integers(0, 5, n).astype(np.float64)  # many ties
        else:
            x = rng.uniform(0.1, 0.2, n)
        assert tk.median(x).hex() == float(np.median(x)).hex(), x
        q = float(rng.uniform(0, 100)) if i % 3 else float(rng.choice([0, 50, 90, 100]))
        assert tk.percentile(x, q).hex() == float(np.percentile(x, q)).hex(), (x, q)
