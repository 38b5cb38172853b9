"""numpy and libtilekern read each other's .npy files bit for bit."""
import glob
import os
import tempfile
import unittest

import numpy as np
import tilekern as tk

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def random_bits(shape, dtype, seed):
    """Arbitrary bit patterns (NaNs, Infs, subnormals included)."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * np.dtype(dtype).itemsize,
                       dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def bf16_reference(f32):
    """f32 -> bf16 bits: round to nearest even on the dropped low half; any
    NaN becomes the quiet NaN with its sign."""
    u = f32.view(np.uint32)
    hi, lo = u >> 16, u & 0xFFFF
    up = (lo > 0x8000) | ((lo == 0x8000) & ((hi & 1) == 1))
    nan = ((u & 0x7F800000) == 0x7F800000) & ((u & 0x7FFFFF) != 0)
    return np.where(nan, (hi & 0x8000) | 0x7FC0, hi + up).astype("<u2")


class NumpyWritesLibraryReads(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def load(self, path):
        with tk.Matrix.load_npy(path) as m:
            return m.dtype, m.to_numpy(copy=True, bits=True)

    def test_np_save_every_dtype(self):
        for dtype, tk_dtype in (("<f4", "float32"), ("<i4", "int32"),
                                ("<u2", "bfloat16")):
            for shape in ((1, 1), (3, 7), (65, 130)):
                a = random_bits(shape, dtype, 1)
                np.save(self.path("a.npy"), a)
                got_dtype, got = self.load(self.path("a.npy"))
                self.assertEqual(got_dtype, tk_dtype)
                self.assertEqual(got.shape, shape)
                self.assertEqual(got.tobytes(), a.tobytes(), (dtype, shape))

    def test_write_array_versions_2_and_3(self):
        a = random_bits((9, 129), "<f4", 2)
        for version in ((1, 0), (2, 0), (3, 0)):
            with open(self.path("v.npy"), "wb") as f:
                np.lib.format.write_array(f, a, version=version)
            with open(self.path("v.npy"), "rb") as f:
                self.assertEqual(f.read(8)[6:], bytes(version))
            _, got = self.load(self.path("v.npy"))
            self.assertEqual(got.tobytes(), a.tobytes(), version)

    def test_void_2_descr_is_bf16(self):
        a = random_bits((4, 6), "<u2", 3)
        header = np.lib.format.header_data_from_array_1_0(a)
        for descr, ok in (("<V2", True), ("|V2", False)):
            header["descr"] = descr
            with open(self.path("v2.npy"), "wb") as f:
                np.lib.format.write_array_header_1_0(f, header)
                f.write(a.tobytes())
            if ok:
                dtype, got = self.load(self.path("v2.npy"))
                self.assertEqual(dtype, "bfloat16")
                self.assertEqual(got.tobytes(), a.tobytes())
            else:
                with self.assertRaises(tk.FormatError) as cm:
                    tk.Matrix.load_npy(self.path("v2.npy"))
                self.assertEqual(cm.exception.status, tk.FormatError.status)
                self.assertIn("'|V2' is not supported", cm.exception.message)

    def test_fixtures(self):
        fixtures = sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "*.npy")))
        for path in fixtures:
            want = np.load(path)
            dtype, got = self.load(path)
            self.assertEqual(dtype, "float32", path)
            self.assertEqual(got.tobytes(), want.tobytes(), path)

    def test_rejections_name_the_problem(self):
        cases = [
            (np.arange(6, dtype=">f4").reshape(2, 3), "descr '>f4' is big-endian"),
            (np.asfortranarray(np.ones((2, 3), "<f4")), "fortran_order is True"),
            (np.ones(6, "<f4"), "shape (6,) is 1-D"),
            (np.ones((2, 3, 4), "<f4"), "shape (2, 3, 4) is 3-D"),
            (np.ones((2, 3), "<f8"), "descr '<f8' is not supported"),
        ]
        for array, needle in cases:
            np.save(self.path("bad.npy"), array)
            with self.assertRaises(tk.TilekernError) as cm:
                tk.Matrix.load_npy(self.path("bad.npy"))
            self.assertEqual(cm.exception.status, tk.FormatError.status, needle)
            self.assertIn(needle, cm.exception.message)
            self.assertIn(self.path("bad.npy"), cm.exception.message)
        np.save(self.path("empty.npy"), np.ones((0, 3), "<f4"))
        with self.assertRaises(tk.TilekernError) as cm:
            tk.Matrix.load_npy(self.path("empty.npy"))
        self.assertIsInstance(cm.exception, tk.ShapeError)


class LibraryWritesNumpyReads(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.file = os.path.join(self.dir.name, "m.npy")

    def test_f32_and_i32(self):
        for dtype in ("<f4", "<i4"):
            a = random_bits((17, 257), dtype, 4)
            with tk.Matrix.wrap(a) as m:
                m.save_npy(self.file)
            got = np.load(self.file)
            self.assertEqual(got.dtype, np.dtype(dtype))
            self.assertEqual(got.tobytes(), a.tobytes())

    def test_bf16_loads_as_uint16_bits(self):
        a = random_bits((15, 255), "<f4", 5)
        with tk.Matrix.from_f32(a, "bfloat16") as m:
            m.save_npy(self.file)
            promoted = m.to_f32()
        got = np.load(self.file)
        self.assertEqual(got.dtype, np.dtype("<u2"))
        np.testing.assert_array_equal(got, bf16_reference(a))
        self.assertEqual(promoted.view(np.uint32).tobytes(),
                         (got.astype(np.uint32) << 16).tobytes())

    def test_header_is_byte_identical_to_numpy(self):
        a = random_bits((8, 128), "<f4", 6)
        with tk.Matrix.wrap(a) as m:
            m.save_npy(self.file)
        numpy_file = os.path.join(self.dir.name, "np.npy")
        np.save(numpy_file, a)
        with open(self.file, "rb") as f, open(numpy_file, "rb") as g:
            self.assertEqual(f.read(), g.read())

    def test_strided_borrowed_matrix_saves_logical_rows(self):
        backing = random_bits((6, 11), "<f4", 7)
        with tk.Matrix.wrap(backing[:, :7]) as m:
            self.assertEqual(m.row_stride, 11)
            m.save_npy(self.file)
        self.assertEqual(np.load(self.file).tobytes(), backing[:, :7].copy().tobytes())


if __name__ == "__main__":
    unittest.main()
