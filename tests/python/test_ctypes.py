"""The ctypes binding: loads the library, calls it, raises on errors, and
mirrors the header (constants, functions) and the exported symbols exactly."""
import ctypes
import os
import re
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
import tilekern as tk  # noqa: E402

HEADER = os.path.join(ROOT, "include", "tilekern.h")


def header_text():
    with open(HEADER, encoding="utf-8") as f:
        return f.read()


class LoadAndCall(unittest.TestCase):
    def test_loads_the_library_under_test(self):
        lib = os.environ.get("TK_LIBRARY", os.path.join(ROOT, "lib", "libtilekern.so.0"))
        self.assertEqual(os.path.realpath(tk.LIBRARY_PATH), os.path.realpath(lib))

    def test_every_header_function_is_exported(self):
        self.assertEqual(tk.MISSING, [], "table entries the library does not export")

    def test_version_string(self):
        version = tk.tk_version_string().decode()
        self.assertEqual(version, "%d.%d.%d" % (tk.TK_VERSION_MAJOR, tk.TK_VERSION_MINOR,
                                                tk.TK_VERSION_PATCH))
        self.assertEqual(tk.tk_version_number(), tk.TK_VERSION_NUMBER)

    def test_bf16_from_f32(self):
        # bf16 keeps the high 16 bits of the f32 pattern, rounded to nearest even.
        def f32_bits(x):
            return ctypes.c_uint32.from_buffer(ctypes.c_float(x)).value

        self.assertEqual(tk.tk_bf16_from_f32(1.0), f32_bits(1.0) >> 16)
        self.assertEqual(tk.tk_bf16_from_f32(-2.5), f32_bits(-2.5) >> 16)
        self.assertEqual(tk.tk_bf16_from_f32(1.0 + 2.0 ** -8), f32_bits(1.0) >> 16)
        self.assertEqual(tk.tk_bf16_from_f32(1.0 + 3 * 2.0 ** -8),
                         f32_bits(1.0 + 2.0 ** -6) >> 16)
        self.assertEqual(tk.tk_bf16_from_f32(float("-nan")), 0xFFC0)
        self.assertEqual(tk.tk_bf16_to_f32(tk.tk_bf16_from_f32(0.15625)), 0.15625)

    def test_bulk_conversion(self):
        src = (ctypes.c_float * 4)(1.0, -0.0, 3.0e38, 1.0 + 2.0 ** -7)
        dst = (ctypes.c_uint16 * 4)()
        tk.tk_bf16_from_f32_n(dst, src, 4)
        self.assertEqual(list(dst), [tk.tk_bf16_from_f32(x) for x in src])


class Errors(unittest.TestCase):
    def test_negative_status_raises_with_the_message(self):
        out = ctypes.c_void_p()
        with self.assertRaises(tk.TilekernError) as cm:
            tk.tk_matrix_create(ctypes.byref(out), tk.TK_DTYPE_F32, -3, 4)
        e = cm.exception
        self.assertEqual(e.status, tk.TK_ESHAPE)
        self.assertEqual(e.name, "TK_ESHAPE")
        self.assertTrue(e.message.startswith(tk.tk_strerror(tk.TK_ESHAPE).decode() + ": "))
        self.assertIn("-3", e.message)
        self.assertIsNone(out.value)

    def test_missing_file_names_path_and_cause(self):
        path = os.path.join(ROOT, "build", "no-such-dir", "x.npy")
        with self.assertRaises(tk.TilekernError) as cm:
            tk.Matrix.load_npy(path)
        self.assertEqual(cm.exception.status, tk.TK_EIO)
        self.assertIn(path, str(cm.exception))
        self.assertIn(os.strerror(2), str(cm.exception))

    def test_non_status_ints_do_not_raise(self):
        self.assertEqual(tk.tk_matrix_dtype(None), 0)
        self.assertEqual(tk.tk_dtype_size(99), 0)
        self.assertIsNone(tk.tk_dtype_name(99))

    def test_unknown_attribute(self):
        with self.assertRaises(AttributeError):
            tk.tk_no_such_function  # noqa: B018

    def test_a_missing_symbol_raises_attribute_error_naming_it(self):
        tk.MISSING.append("tk_from_a_newer_header")
        try:
            with self.assertRaises(AttributeError) as cm:
                tk.tk_from_a_newer_header  # noqa: B018
            self.assertIn("tk_from_a_newer_header", str(cm.exception))
            self.assertIn("not exported by", str(cm.exception))
        finally:
            tk.MISSING.remove("tk_from_a_newer_header")


class MatrixClass(unittest.TestCase):
    def test_context_manager_frees_the_handle(self):
        with tk.Matrix.create(tk.TK_DTYPE_BF16, 3, 5) as m:
            self.assertEqual((m.dtype, m.rows, m.cols, m.row_stride),
                             (tk.TK_DTYPE_BF16, 3, 5, 5))
            self.assertIsNotNone(m.data)
        self.assertIsNone(m.handle.value)
        m.close()  # closing twice is harmless


class Pipeline(unittest.TestCase):
    """The seed's sweep through ctypes, and a trace that json can read."""

    def handle(self, create, *args):
        out = ctypes.c_void_p()
        create(ctypes.byref(out), *args)
        return out

    def test_seed_sweep_and_trace(self):
        import json
        import tempfile
        kernel = self.handle(tk.tk_kernel_axpy, 2.0)
        device = self.handle(tk.tk_device_simulated, b"TPU v5 lite")
        with tk.Matrix.create(tk.TK_DTYPE_F32, 15, 255) as x, \
                tk.Matrix.create(tk.TK_DTYPE_F32, 15, 255) as out:
            inputs = (ctypes.c_void_p * 2)(x.handle.value, x.handle.value)
            for block in ((8, 128), (16, 256)):
                tiling = self.handle(tk.tk_tiling_create, 15, 255, *block)
                pipe = self.handle(tk.tk_pipeline_create, kernel, tiling, device)
                for buffers in (2, 3):
                    tk.tk_pipeline_set(pipe, tk.TK_PIPE_INPUT_BUFFERS, buffers)
                    tk.tk_pipeline_run(pipe, inputs, out.handle)
                    padded = ctypes.c_double()
                    tk.tk_pipeline_stat(pipe, tk.TK_STAT_PADDED_ELEMENTS, ctypes.byref(padded))
                    self.assertEqual(padded.value, 4096.0)
                with tempfile.TemporaryDirectory() as tmp:
                    path = os.path.join(tmp, "trace.json")
                    tk.tk_pipeline_write_trace(pipe, path.encode())
                    with open(path) as f:
                        trace = json.load(f)
                steps = ctypes.c_double()
                tk.tk_pipeline_stat(pipe, tk.TK_STAT_STEPS, ctypes.byref(steps))
                self.assertEqual(trace["otherData"]["timing"], "modeled, not measured")
                bodies = [e for e in trace["traceEvents"] if e["name"] == "body"]
                self.assertEqual(len(bodies), int(steps.value))
                tk.tk_pipeline_destroy(pipe)
                tk.tk_tiling_destroy(tiling)
        tk.tk_device_destroy(device)
        tk.tk_kernel_destroy(kernel)

    def test_trace_escapes_the_device_kind(self):
        import json
        import tempfile
        kind = 'lab "B" \\ board'
        kernel = self.handle(tk.tk_kernel_axpy, 1.0)
        device = self.handle(tk.tk_device_external, b"tpu", kind.encode())
        figures = {tk.TK_DEVICE_ONCHIP_LIMIT_BYTES: 1 << 24, tk.TK_DEVICE_HBM_BYTES_PER_S: 10**12,
                   tk.TK_DEVICE_COPY_LATENCY_NS: 500, tk.TK_DEVICE_COPY_ENGINES: 2,
                   tk.TK_DEVICE_COMPUTE_ELEMS_PER_S: 10**12, tk.TK_DEVICE_LAYOUT_ROWS: 8,
                   tk.TK_DEVICE_LAYOUT_COLS: 128}
        for param, value in figures.items():
            tk.tk_device_set(device, param, value)
        tiling = self.handle(tk.tk_tiling_create, 16, 128, 8, 128)
        pipe = self.handle(tk.tk_pipeline_create, kernel, tiling, device)
        with tk.Matrix.create(tk.TK_DTYPE_F32, 16, 128) as x:
            inputs = (ctypes.c_void_p * 2)(x.handle.value, x.handle.value)
            tk.tk_pipeline_run(pipe, inputs, x.handle)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            tk.tk_pipeline_write_trace(pipe, path.encode())
            with open(path) as f:
                self.assertEqual(json.load(f)["otherData"]["device"], kind)
        tk.tk_pipeline_destroy(pipe)
        tk.tk_tiling_destroy(tiling)
        tk.tk_device_destroy(device)
        tk.tk_kernel_destroy(kernel)

    def test_a_fault_raises_with_its_witness(self):
        kernel = self.handle(tk.tk_kernel_axpy, 2.0)
        device = self.handle(tk.tk_device_simulated, b"TPU v4")
        tiling = self.handle(tk.tk_tiling_create, 64, 128, 8, 128)
        pipe = self.handle(tk.tk_pipeline_create, kernel, tiling, device)
        tk.tk_pipeline_set(pipe, tk.TK_PIPE_FAULT, tk.TK_FAULT_SKIP_INPUT_WAIT)
        with tk.Matrix.create(tk.TK_DTYPE_F32, 64, 128) as x:
            inputs = (ctypes.c_void_p * 2)(x.handle.value, x.handle.value)
            with self.assertRaises(tk.TilekernError) as cm:
                tk.tk_pipeline_run(pipe, inputs, x.handle)
            self.assertEqual(cm.exception.status, tk.TK_ERACE)
            step, kind = ctypes.c_int64(), ctypes.c_int()
            tk.tk_pipeline_race(pipe, 0, ctypes.byref(step), None, None, ctypes.byref(kind))
            self.assertEqual((step.value, kind.value), (4, tk.TK_HAZARD_UNWAITED_READ))
            self.assertEqual(tk.tk_hazard_name(kind.value), b"unwaited read")
        tk.tk_pipeline_destroy(pipe)
        tk.tk_tiling_destroy(tiling)
        tk.tk_device_destroy(device)
        tk.tk_kernel_destroy(kernel)


class Bench(unittest.TestCase):
    """numpy is the reference for the summaries; a receipt json can read."""

    def test_median_and_percentile_match_numpy_bit_for_bit(self):
        try:
            import numpy as np
        except ImportError:
            self.skipTest("numpy is not installed")
        rng = np.random.default_rng(5)
        for n in list(range(1, 12)) + [20, 37, 100]:
            for scale in (1.0, 1e-3, 12345.678):
                x = rng.exponential(scale, n)
                buf = (ctypes.c_double * n)(*x)
                self.assertEqual(tk.tk_median(buf, n), float(np.median(x)), (n, scale))
                for q in (0, 1, 10, 25, 33.3, 50, 66.7, 90, 95, 99, 99.9, 100):
                    got, want = tk.tk_percentile(buf, n, q), float(np.percentile(x, q))
                    self.assertEqual(got.hex(), want.hex(), (n, scale, q))
        # The sign of a zero, and infinities (numpy's NaN from inf - inf).
        for x in ([-0.0], [-0.0, -0.0], [-1.0, -0.0, 1.0], [float("inf")],
                  [-float("inf"), float("inf")], [1.0, float("inf"), 2.0]):
            buf = (ctypes.c_double * len(x))(*x)
            with np.errstate(invalid="ignore"):
                self.assertEqual(repr(tk.tk_median(buf, len(x))), repr(float(np.median(x))), x)
                for q in (0, 50, 90, 100):
                    self.assertEqual(repr(tk.tk_percentile(buf, len(x), q)),
                                     repr(float(np.percentile(x, q))), (x, q))

    def test_receipt(self):
        import json
        import tempfile
        calls = []
        run = tk.BENCH_FN(lambda user: calls.append("run") or 0)
        host = ctypes.c_void_p()
        tk.tk_device_host(ctypes.byref(host))
        bench = ctypes.c_void_p()
        tk.tk_bench_create(ctypes.byref(bench), host)
        tk.tk_bench_set_boundary(bench, 'a Python "lambda", called back'.encode())
        tk.tk_bench_set(bench, tk.TK_BENCH_REPEATS, 7)
        self.assertEqual(tk.tk_bench_add(bench, b"lambda", host, tk.BENCH_FN(), run,
                                         tk.BENCH_FN(), None), 0)
        tk.tk_bench_run(bench)
        self.assertEqual(len(calls), 5 + 7)
        samples = (ctypes.c_double * 7)()
        self.assertEqual(tk.tk_bench_samples(bench, 0, samples, 7), 7)
        with self.assertRaises(tk.TilekernError) as cm:
            tk.tk_bench_samples(bench, 3, samples, 7)
        self.assertEqual(cm.exception.status, tk.TK_ERANGE)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "receipt.json")
            tk.tk_bench_write_receipt(bench, path.encode())
            with open(path) as f:
                receipt = json.load(f)
        self.assertEqual(receipt["boundary"], 'a Python "lambda", called back')
        self.assertEqual(receipt["target"]["platform"], "cpu")
        entry = receipt["entries"][0]
        self.assertEqual(entry["samples_ms"], list(samples))
        median = ctypes.c_double()
        tk.tk_bench_result(bench, 0, tk.TK_BENCH_MEDIAN_MS, ctypes.byref(median))
        self.assertEqual(entry["median_ms"], median.value)
        self.assertEqual(entry["speedup"], 1.0)
        tk.tk_bench_destroy(bench)
        tk.tk_device_destroy(host)


class MirrorsTheHeader(unittest.TestCase):
    def test_every_integer_constant(self):
        defines = re.findall(r"^#define\s+(TK_\w+)\s+(-?\d+)\b", header_text(), re.M)
        self.assertGreater(len(defines), 50)
        for name, value in defines:
            self.assertEqual(getattr(tk, name, None), int(value), name)
        module = {n for n in dir(tk) if re.fullmatch(r"TK_[A-Z0-9_]+", n)}
        self.assertEqual(module - {n for n, _ in defines} - {"TK_VERSION_NUMBER"}, set(),
                         "module constants the header does not define")

    def test_every_function_with_its_arity(self):
        protos = re.findall(r"^TK_API\s+[^;(]*?\b(tk_\w+)\s*\(([^)]*)\)\s*;", header_text(),
                            re.M | re.S)
        self.assertGreater(len(protos), 50)
        table = {name: argtypes for name, argtypes, _ in tk.FUNCTIONS}
        self.assertEqual(len(table), len(tk.FUNCTIONS), "duplicate table entries")
        self.assertEqual(set(table), {name for name, _ in protos})
        for name, args in protos:
            args = args.strip()
            arity = 0 if args == "void" else args.count(",") + 1
            self.assertEqual(len(table[name]), arity, name)

    def test_every_exported_symbol_has_an_entry(self):
        nm = subprocess.run(["nm", "-D", "--defined-only", tk.LIBRARY_PATH],
                            capture_output=True, text=True, check=True).stdout
        exported = {line.split()[2].split("@")[0] for line in nm.splitlines()
                    if len(line.split()) == 3 and line.split()[1] in "TW"}
        self.assertIn("tk_version_string", exported)
        self.assertEqual(exported - {name for name, _, _ in tk.FUNCTIONS}, set())


if __name__ == "__main__":
    unittest.main()
