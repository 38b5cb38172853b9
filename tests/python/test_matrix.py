"""Matrix.wrap borrows numpy memory without copies, or refuses clearly; the
matrix keeps its array alive and to_numpy gives views or copies."""
import gc
import weakref

import ml_dtypes
import numpy as np
import pytest
import tilekern as tk

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("dtype,name", [(np.float32, "float32"), (np.int32, "int32"),
                                        (BF16, "bfloat16")])
def test_wrap_is_zero_copy_both_ways(dtype, name):
    a = np.zeros((5, 7), dtype)
    with tk.Matrix.wrap(a) as m:
        assert (m.dtype, m.shape, m.row_stride) == (name, (5, 7), 7)
        assert tk.lib.tk_matrix_data(m) == a.ctypes.data
        view = m.to_numpy()
        assert view.dtype == a.dtype
        view[2, 3] = 9
        assert a[2, 3] == 9  # written through the matrix's view
        a[4, 6] = 5
        assert m.to_numpy()[4, 6] == 5


def test_library_writes_land_in_the_array():
    x = np.arange(16 * 256, dtype=np.float32).reshape(16, 256)
    out = np.zeros_like(x)
    with tk.Tiling(16, 256, 8, 128) as t, tk.Kernel.axpy(2.0) as k:
        assert k.run(t, [x, x], out) is out
    assert np.array_equal(out, np.float32(2) * x + x)


def test_uint16_bits_need_an_explicit_bfloat16():
    bits = np.full((2, 3), 0x3F80, np.uint16)
    with pytest.raises(tk.DtypeError, match="bits only with the dtype named: one of "
                                            "bfloat16, float16"):
        tk.Matrix.wrap(bits)
    with tk.Matrix.wrap(bits, dtype="bfloat16") as m:
        assert m.dtype == "bfloat16"
        assert m.to_f32().tolist() == [[1.0] * 3] * 2
        assert m.to_numpy(bits=True).dtype == np.uint16
        assert m.to_numpy().dtype == BF16


def test_rows_of_any_stride():
    backing = np.arange(6 * 11, dtype=np.float32).reshape(6, 11)
    with tk.Matrix.wrap(backing[1:5, 2:9]) as m:
        assert (m.shape, m.row_stride) == ((4, 7), 11)
        assert np.array_equal(m.to_f32(), backing[1:5, 2:9])
        assert np.array_equal(m.to_numpy(), backing[1:5, 2:9])


@pytest.mark.parametrize("array,error,needle", [
    (np.zeros((4, 6), np.float32)[:, ::2], tk.LayoutError, "column stride is 8 bytes"),
    (np.zeros((4, 6), np.float32).T, tk.LayoutError, "rows must be contiguous"),
    (np.zeros((4, 6), np.float32)[::-1], tk.LayoutError, "row stride of -24 bytes"),
    (np.zeros((3, 3)), tk.DtypeError, "float64"),
    (np.zeros((3, 3), ">f4"), tk.DtypeError, ">f4"),
    (np.zeros(3, np.float32), tk.ShapeError, "shape (3,)"),
    (np.zeros((2, 2, 2), np.float32), tk.ShapeError, "shape (2, 2, 2)"),
    ([[1.0]], tk.InvalidArgumentError, "not list"),
])
def test_what_cannot_be_read_right_is_refused(array, error, needle):
    with pytest.raises(error) as info:
        tk.Matrix.wrap(array)
    assert needle in str(info.value)


def test_a_wrong_explicit_dtype_is_refused():
    with pytest.raises(tk.DtypeError, match="cannot hold bfloat16"):
        tk.Matrix.wrap(np.zeros((2, 2), np.float32), dtype="bfloat16")


def test_misaligned_data_is_refused():
    raw = np.zeros(4 * 9 + 1, np.uint8)[1:].view(np.float32).reshape(3, 3)
    with pytest.raises(tk.LayoutError, match="not aligned"):
        tk.Matrix.wrap(raw)


def test_a_read_only_array_is_an_input_never_an_output():
    x = np.ones((8, 128), np.float32)
    x.flags.writeable = False
    out = np.zeros((8, 128), np.float32)
    with tk.Tiling(8, 128, 8, 128) as t, tk.Kernel.axpy(1.0) as k:
        k.run(t, [x, x], out)
        assert (out == 2).all()
        with pytest.raises(tk.InvalidArgumentError, match="output wraps a read-only"):
            k.run(t, [out, out], x)
    with tk.Matrix.wrap(x) as m:
        assert not m.writable
        assert not m.to_numpy().flags.writeable


def test_the_matrix_keeps_its_array_alive():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    ref = weakref.ref(a)
    m = tk.Matrix.wrap(a)
    del a
    gc.collect()
    assert ref() is not None
    assert m.to_numpy()[2, 3] == 11
    m.close()
    m = None
    gc.collect()
    assert ref() is None


def test_a_view_keeps_an_owned_matrix_alive():
    m = tk.Matrix.from_f32(np.full((4, 4), 1.5, np.float32), "bfloat16")
    view = m.to_numpy()
    ref = weakref.ref(m)
    del m
    gc.collect()
    assert ref() is not None
    assert view.astype(np.float32).tolist() == [[1.5] * 4] * 4


def test_copy_is_independent():
    a = np.zeros((2, 2), np.float32)
    with tk.Matrix.wrap(a) as m:
        c = m.to_numpy(copy=True)
        c[0, 0] = 1
    assert a[0, 0] == 0


def test_from_f32_represents_and_create_allocates():
    data = np.float32([[1.00390625, 1.01171875]])
    with tk.Matrix.from_f32(data, "bf16") as m:
        assert m.to_numpy(bits=True).tolist() == [[0x3F80, 0x3F82]]
    with tk.Matrix.create("int32", 3, 5) as m:
        assert (m.dtype, m.shape) == ("int32", (3, 5))
    with pytest.raises(tk.DtypeError, match="float64"):
        tk.Matrix.create("float64", 1, 1)
    with pytest.raises(tk.InvalidArgumentError, match="a size must be an integer, not True"):
        tk.Matrix.create("float32", True, 3)
    with pytest.raises(tk.InvalidArgumentError, match="Tiling: a size must be"):
        tk.Tiling(8, 128, 8, True)


def test_close_is_idempotent_and_a_closed_matrix_says_so():
    m = tk.Matrix.create("float32", 2, 2)
    m.close()
    m.close()
    assert m.closed
    with pytest.raises(tk.StateError, match="closed"):
        m.rows  # noqa: B018


def test_a_view_keeps_the_memory_past_close():
    m = tk.Matrix.from_f32(np.full((256, 256), 2.0, np.float32))
    view = m.to_numpy()
    m.close()
    assert m.closed
    assert view.sum() == 2.0 * 256 * 256  # still the matrix's memory
    ref = weakref.ref(m)
    del m
    gc.collect()
    assert ref() is not None  # the view holds it
    del view
    gc.collect()
    assert ref() is None
