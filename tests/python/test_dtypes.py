"""float16, float8_e4m3fn and float8_e5m2 through every part of the library:
Matrix, .npy in the forms numpy and ml_dtypes write, kernels (every tail and
body kind), the pipeline, calls, compare and the audit, each against numpy
and ml_dtypes computing the same contract."""
import io

import ml_dtypes
import numpy as np
import pytest
import tilekern as tk

SMALL = [np.dtype(np.float16), np.dtype(ml_dtypes.float8_e4m3fn),
         np.dtype(ml_dtypes.float8_e5m2)]
BITS = {2: np.uint16, 1: np.uint8}


def data(shape, dtype, seed, scale=1.0):
    """Normal draws in dtype, with zeros, subnormals and the largest values
    of the format mixed in (fp8 e4m3fn overflows to NaN)."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape, np.float32) * np.float32(scale))
    fi = ml_dtypes.finfo(dtype)
    flat = x.reshape(-1)
    flat[::17] = np.float32(fi.smallest_subnormal)
    flat[5::23] = np.float32(fi.max)
    flat[7::29] = 0
    with np.errstate(all="ignore"):
        return x.astype(dtype)


def same_bits(a, b):
    return a.view(BITS[a.itemsize]).tolist() == b.view(BITS[b.itemsize]).tolist()


def axpy_reference(alpha, x, y):
    with np.errstate(all="ignore"):
        return (np.float32(alpha) * x.astype(np.float32) + y.astype(np.float32)).astype(x.dtype)


@pytest.mark.parametrize("dtype", SMALL, ids=str)
def test_matrix_wraps_views_and_represents(dtype):
    x = data((5, 7), dtype, 1)
    with tk.Matrix.wrap(x) as m:
        assert m.dtype == dtype.name
        assert m.to_numpy().dtype == dtype
        assert same_bits(m.to_numpy(), x)
        assert m.to_f32().tolist() == x.astype(np.float32).tolist()
        assert m.to_numpy(bits=True).dtype == BITS[dtype.itemsize]
    bits = x.view(BITS[dtype.itemsize])
    with pytest.raises(tk.DtypeError, match="bits only with the dtype named"):
        tk.Matrix.wrap(bits)
    with tk.Matrix.wrap(bits, dtype=dtype.name) as m:
        assert m.to_f32().tolist() == x.astype(np.float32).tolist()
    f = x.astype(np.float32)
    with tk.Matrix.from_f32(f * np.float32(1.3), dtype.name) as m:
        with np.errstate(all="ignore"):
            assert same_bits(m.to_numpy(), (f * np.float32(1.3)).astype(dtype))
    assert same_bits(tk.from_f32(f, dtype), x)


@pytest.mark.parametrize("dtype", SMALL, ids=str)
def test_conversions_take_arrays_off_their_alignment(dtype):
    """A view one byte into a buffer (numpy marks it unaligned), which the C
    bulk conversions refuse (TK_ELAYOUT), is copied first."""
    x = data((3, 5), dtype, 3)
    raw = np.zeros(x.nbytes + 8, np.uint8)
    raw[1:1 + x.nbytes] = x.view(np.uint8).ravel()
    view = raw[1:1 + x.nbytes].view(dtype).reshape(x.shape)
    f = x.astype(np.float32)
    assert np.array_equal(tk.to_f32(view).view(np.uint32), f.view(np.uint32))
    fraw = np.zeros(f.nbytes + 8, np.uint8)
    fraw[2:2 + f.nbytes] = f.view(np.uint8).ravel()
    fview = fraw[2:2 + f.nbytes].view(np.float32).reshape(f.shape)
    assert not fview.flags.aligned
    assert same_bits(tk.from_f32(fview, dtype), x)


@pytest.mark.parametrize("dtype", SMALL + [np.dtype(ml_dtypes.bfloat16)], ids=str)
def test_conversions_take_big_endian_arrays(dtype):
    """Byte order is a layout, not a value: every converter takes either."""
    x = data((3, 5), dtype, 4)
    f = x.astype(np.float32)
    big = f.astype(">f4")
    assert same_bits(tk.from_f32(big, dtype), x)
    with tk.Matrix.from_f32(big, dtype) as m:
        assert same_bits(m.to_numpy(), x)
    if x.dtype.itemsize > 1:
        assert np.array_equal(tk.to_f32(x.astype(x.dtype.newbyteorder(">"))).view(np.uint32),
                              f.view(np.uint32))


@pytest.mark.parametrize("dtype", SMALL, ids=str)
def test_npy_both_ways(dtype, tmp_path):
    x = data((6, 9), dtype, 2)
    np.save(tmp_path / "numpy.npy", x)   # the form ml_dtypes (or numpy) writes
    with tk.Matrix.load_npy(tmp_path / "numpy.npy") as m:
        assert m.dtype == dtype.name and same_bits(m.to_numpy(), x)
        m.save_npy(tmp_path / "tk.npy")
    # Byte for byte the file numpy writes, so whatever reads one reads both.
    assert (tmp_path / "tk.npy").read_bytes() == (tmp_path / "numpy.npy").read_bytes()
    if dtype == np.float16:
        assert same_bits(np.load(tmp_path / "tk.npy"), x)


def test_one_byte_void_is_read_as_e4m3fn(tmp_path):
    # numpy reads an ml_dtypes float8_e4m3fn file back as '|V1'; saving that
    # again writes '|V1', which loads as float8_e4m3fn too.
    x = data((3, 4), np.dtype(ml_dtypes.float8_e4m3fn), 3)
    buf = io.BytesIO()
    np.save(buf, x)
    buf.seek(0)
    v = np.load(buf)
    assert v.dtype.str == "|V1"
    np.save(tmp_path / "v.npy", v)
    with tk.Matrix.load_npy(tmp_path / "v.npy") as m:
        assert m.dtype == "float8_e4m3fn" and same_bits(m.to_numpy(), x)


@pytest.mark.parametrize("dtype", SMALL, ids=str)
@pytest.mark.parametrize("tail", ["mask", "pad", "shift_inwards"])
@pytest.mark.parametrize("body", ["elementwise", "blockwise"])
def test_axpy_and_custom_bodies_are_numpy_exactly(dtype, tail, body):
    x, y = data((17, 257), dtype, 4), data((17, 257), dtype, 5)
    want = axpy_reference(3.0, x, y)
    with tk.Tiling(17, 257, 8, 128, tail=tail) as t:
        if body == "elementwise":
            with tk.Kernel.axpy(3.0) as k:
                assert same_bits(k.run(t, [x, y]), want)

        def fn(inputs, out):
            np.add(np.float32(3) * inputs[0], inputs[1], out=out)
        with tk.Kernel.custom(fn, 2, body=body) as k:
            if body == "blockwise" and tail == "shift_inwards":
                return
            assert same_bits(k.run(t, [x, y]), want)


@pytest.mark.parametrize("dtype", SMALL, ids=str)
def test_pipeline_and_call_equal_the_kernel(dtype):
    x, y = data((15, 255), dtype, 6), data((15, 255), dtype, 7)
    want = axpy_reference(2.0, x, y)
    k, d = tk.Kernel.axpy(2.0), tk.Device.simulated("TPU v5 lite")
    for buffers in (2, 3):
        p = tk.Pipeline(k, tk.Tiling(15, 255, 8, 128), d, input_buffers=buffers)
        assert same_bits(p.run([x, y]), want)
        assert p.stats["hazards"] == 0

    def body(step, a, b, o):
        o[...] = np.float32(2) * a + b
    spec = tk.BlockSpec((15, 255), (8, 128), dtype=dtype.name)
    c = tk.Call((2, 2), body, [spec, spec], [spec])
    assert same_bits(c.run([x, y])[0], want)


@pytest.mark.parametrize("dtype", SMALL, ids=str)
def test_compare_counts_ulps_of_the_dtype_and_prints_its_bits(dtype):
    x = data((4, 8), dtype, 8)
    bits = x.view(BITS[dtype.itemsize]).copy()
    finite = np.isfinite(x.astype(np.float32)) & (x.astype(np.float32) > 0)
    r, c = map(int, np.argwhere(finite)[0])
    bits[r, c] += 1
    y = bits.view(dtype)
    cmp = tk.Compare(dtype.name, atol=0, rtol=0)
    assert not cmp.run(y, x)
    assert cmp.results["mismatches"] == 1 and cmp.results["max_ulp_seen"] == 1
    width = 2 * dtype.itemsize
    assert f"(0x{int(bits[r, c]):0{width}x})" in cmp.format()
    # torch.testing has defaults for float16, none for fp8: the label says whose.
    whose = "torch.testing default" if dtype.itemsize == 2 else "tilekern's default"
    dflt = tk.Compare(dtype.name)
    dflt.run(y, x)
    assert f"({whose} for {dtype.name})" in dflt.format()


@pytest.mark.parametrize("dtype", SMALL, ids=str)
def test_audit_passes_a_correct_kernel_and_names_early_rounding(dtype):
    def correct(x, y):
        return axpy_reference(3.0, x, y)

    def early(x, y):
        with np.errstate(all="ignore"):
            t = (np.float32(3) * x.astype(np.float32)).astype(x.dtype)
            return (t.astype(np.float32) + y.astype(np.float32)).astype(x.dtype)

    shapes = [(8, 128), (9, 129)]
    r = tk.audit(correct, tk.Kernel.axpy(3.0), shapes=shapes, dtypes=[dtype.name])
    assert r.passed, r.summary()
    for case in r.cases:
        assert case.impl_max_abs == 0 and case.impl_mismatches == 0
        assert case.gap_max_abs > 0          # storing in the dtype loses something
        assert case.gap_max_abs >= max(case.gap_input_max_abs, case.gap_output_max_abs) / 2
    atol, rtol = r.cases[0].gap_atol, r.cases[0].gap_rtol
    assert (atol, rtol) == {"float16": (1e-5, 1e-3), "float8_e4m3fn": (2 ** -10, 2 ** -3),
                            "float8_e5m2": (2 ** -17, 2 ** -2)}[dtype.name]
    r = tk.audit(early, tk.Kernel.axpy(3.0), shapes=shapes, dtypes=[dtype.name])
    assert not r.passed
    assert {c.diagnosis for c in r.cases} == {"early-rounding"}


def test_arith_xla_fuses_and_flushes_like_pallas_measured():
    # The cases measured in Pallas's TPU interpret mode (XLA on CPU).
    def run(alpha, x, y, dtype, arith):
        bits = np.uint16 if dtype == "bfloat16" else np.uint32
        xs = np.array([[x]], bits).view(ml_dtypes.bfloat16 if bits is np.uint16 else np.float32)
        ys = np.array([[y]], bits).view(xs.dtype)
        with tk.Tiling(1, 1, 8, 128) as t, tk.Kernel.axpy(alpha, arith=arith) as k:
            return int(k.run(t, [xs, ys]).view(bits)[0, 0])
    assert run(2.0, 0x00000001, 0, "float32", "numpy") == 0x2
    assert run(2.0, 0x00000001, 0, "float32", "xla") == 0x0
    assert run(2.0, 0x000b, 0x8000, "bfloat16", "xla") == 0x0
    assert run(2.0, 0x7f7fc99e, 0xff7fc99e, "float32", "xla") == 0x7f7fc99e
    assert run(3.0, 0xbf4d4b61, 0x3f86cc7f, "float32", "numpy") == 0xbfad2493
    assert run(3.0, 0xbf4d4b61, 0x3f86cc7f, "float32", "xla") == 0xbfad2492
    k = tk.Kernel.axpy(1.0)
    assert k.arith == "numpy"
    k.arith = "fma"
    assert k.arith == "fma"
    with pytest.raises(tk.InvalidArgumentError, match="'fused' is not one of"):
        k.arith = "fused"
    with pytest.raises(tk.InvalidArgumentError, match="its own code"):
        tk.Kernel.custom(lambda i, o: None, 2).arith = "xla"


def test_audit_names_a_candidate_that_fuses():
    def fused(x, y):   # alpha * x + y with one rounding, as XLA computes it
        return (np.float64(3) * x.astype(np.float64) + y.astype(np.float64)).astype(np.float32)
    r = tk.audit(fused, tk.Kernel.axpy(3.0), shapes=[(8, 128)], dtypes=["float32"])
    assert not r.passed and r.cases[0].diagnosis == "fused-multiply-add"
    assert tk.audit(fused, tk.Kernel.axpy(3.0, arith="fma"), shapes=[(8, 128)],
                    dtypes=["float32"]).passed


def test_audit_names_numpy_code_under_the_xla_contract():
    """numpy rounds alpha * x on its own and keeps subnormals; XLA (the
    contract Pallas's interpret mode matches) fuses and flushes. Where both
    show, the diagnosis names the arithmetic, not an unknown schedule."""
    rng = np.random.default_rng(0)

    def originals(shape, n):
        x = rng.standard_normal(shape).astype(np.float32)
        y = rng.standard_normal(shape).astype(np.float32)
        x[::3] *= np.float32(2.0**-128)   # subnormal operands and results on every
        y[::3] *= np.float32(2.0**-128)   # third row
        return [x, y]

    numpy_axpy = lambda x, y: np.float32(3) * x + y   # noqa: E731
    r = tk.audit(numpy_axpy, tk.Kernel.axpy(3.0, arith="xla"), shapes=[(8, 128)],
                 dtypes=["float32"], originals=originals)
    assert not r.passed and r.cases[0].diagnosis == "numpy-arithmetic", r.summary()
    assert tk.audit(numpy_axpy, tk.Kernel.axpy(3.0), shapes=[(8, 128)], dtypes=["float32"],
                    originals=originals).passed
