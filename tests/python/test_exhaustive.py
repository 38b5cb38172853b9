"""The conversions and statistics against their references over every input
or many random ones: tk_bf16_from_f32 and tk_dtype_from_f32_n equal
ml_dtypes' casts (numpy's for float16) on all 2**32 float32 bit patterns,
bit for bit, NaNs included; the other way on every encoding; and tk_median /
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


def _first_difference(args):
    """None, or the first f32 pattern in [start, start + CHUNK) that tilekern
    and the reference cast to different bits, with both results."""
    name, start = args
    value, bits = SMALL[name]
    u = np.arange(CHUNK, dtype=np.uint32) + np.uint32(start)
    f = u.view(np.float32)
    got = tk.from_f32(f, name).view(bits)
    with np.errstate(all="ignore"):
        want = f.astype(value).view(bits)
    bad = np.flatnonzero(got != want)
    return None if bad.size == 0 else (int(u[bad[0]]), int(got[bad[0]]), int(want[bad[0]]))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_dtype_from_f32_on_all_2_32_inputs(name):
    # numpy's float16 cast takes minutes where it raises floating-point
    # flags (subnormal, overflow and NaN inputs): both cores share the work.
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
