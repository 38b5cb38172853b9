"""The audit's report files parse: JSON with json, SVG with xml.etree, and
the text table carries every column.  The audit runs through the package on
the committed fixtures, and the main job (build/examples/audit and
examples/python/audit.py) is run too."""
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

import numpy as np
import tilekern as tk

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
SHAPES = [(1, 1), (8, 128), (9, 129), (17, 257)]
# The seed's recorded bfloat16 gaps: the specification.
SEED_BF16_GAPS = [0.000862419605255127, 0.025217056274414062,
                  0.030788421630859375, 0.0292205810546875]
SVG = "{http://www.w3.org/2000/svg}"


def bf16(a):
    """float32 -> bfloat16 -> float32, round to nearest even (finite data)."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


def fixture(name):
    return np.load(os.path.join(FIXTURES, name))


class AuditReports(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        kernel = tk.Kernel.axpy(2.0)

        def host(x, y):
            with tk.Tiling(*x.shape, 8, 128) as t:
                return kernel.run(t, [x, y])

        audit = tk.Audit(kernel, host)
        cls.data = []
        for rows, cols in SHAPES:
            x = fixture(f"seed42_x_{rows}x{cols}.npy")
            y = fixture(f"seed42_y_{rows}x{cols}.npy")
            cls.data.append((x, y))
            for dtype in ("float32", "bfloat16"):
                audit.add_case(dtype, [x, y])
        assert audit.run()
        cls.paths = {}
        for ext in ("txt", "json", "svg"):
            cls.paths[ext] = os.path.join(cls.tmp.name, "audit." + ext)
            audit.write_report(cls.paths[ext])
        cls.results = audit.results
        audit.close()
        kernel.close()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_json_parses_with_every_number(self):
        with open(self.paths["json"]) as f:
            doc = json.load(f)
        self.assertEqual(doc["schema"], "tilekern.audit/1")
        self.assertEqual(doc["contract"]["kind"], "axpy")
        self.assertEqual(doc["contract"]["alpha"], 2.0)
        self.assertTrue(doc["implementation_passed"])
        self.assertEqual(doc["implementation_tolerance"],
                         {"atol": 0.0, "rtol": 0.0, "max_ulp": 0})
        self.assertEqual(len(doc["cases"]), 8)
        for i, case in enumerate(doc["cases"]):
            rows, cols = SHAPES[i // 2]
            self.assertEqual(case["shape"], [rows, cols])
            self.assertEqual(case["label"], f"{rows} x {cols}")
            self.assertEqual(case["dtype"], "bfloat16" if i % 2 else "float32")
            self.assertEqual(case["elements"], rows * cols)
            impl, gap = case["implementation"], case["gap"]
            self.assertEqual(impl["max_abs"], 0.0)
            self.assertEqual(impl["mismatches"], 0)
            self.assertEqual(impl["ulp_histogram"], [rows * cols, 0, 0, 0])
            self.assertIs(impl["passed"], True)
            self.assertEqual(impl["diagnosis"], "not-run")
            # Every number round-trips: JSON equals tk_audit_result exactly.
            self.assertEqual(gap["max_abs"], self.results[i].gap_max_abs)
            self.assertEqual(gap["input_representation_max_abs"],
                             self.results[i].gap_input_max_abs)
            self.assertEqual(gap["output_cast_max_abs"],
                             self.results[i].gap_output_max_abs)
            self.assertEqual(case["scale"], self.results[i].scale)
            want_tol = {"atol": 1e-05, "rtol": 0.016 if i % 2 else 1.3e-06}
            self.assertEqual(gap["tolerance"], want_tol)
            self.assertIsInstance(gap["max_rel"], float)
            self.assertIsInstance(gap["passed"], bool)
            self.assertEqual(gap["passed"], gap["mismatches"] == 0)
            self.assertEqual(gap["max_abs"], SEED_BF16_GAPS[i // 2] if i % 2 else 0.0)

    def test_gaps_match_numpy(self):
        """The gap split recomputed with numpy, as the seed computes the gap."""
        for s, (x, y) in enumerate(self.data):
            ideal = 2 * x + y
            t = 2 * bf16(x) + bf16(y)
            actual = bf16(t)
            i = 2 * s + 1
            self.assertEqual(float(np.max(np.abs(actual - ideal))),
                             self.results[i].gap_max_abs)
            self.assertEqual(float(np.max(np.abs(t - ideal))),
                             self.results[i].gap_input_max_abs)
            self.assertEqual(float(np.max(np.abs(actual - t))),
                             self.results[i].gap_output_max_abs)
            self.assertEqual(float(np.max(np.abs(ideal))), self.results[i].scale)

    def test_svg_is_the_seed_figure(self):
        root = ET.parse(self.paths["svg"]).getroot()
        self.assertEqual(root.tag, SVG + "svg")
        texts = [t.text for t in root.iter(SVG + "text")]
        for label in ("1 x 1", "8 x 128", "9 x 129", "17 x 257", "float32", "bfloat16",
                      "max gap versus original float32 values", "matrix shape (rows x cols)"):
            self.assertIn(label, texts)
        bars = [r for r in root.iter(SVG + "rect") if r.find(SVG + "title") is not None]
        self.assertEqual(len(bars), 8)
        heights = {r.find(SVG + "title").text.rsplit(":", 1)[0]: float(r.get("height"))
                   for r in bars}
        for s, (rows, cols) in enumerate(SHAPES):
            self.assertEqual(heights[f"float32 {rows} x {cols}"], 0.0)
        bf = [heights[f"bfloat16 {r} x {c}"] for r, c in SHAPES]
        # Bar heights are proportional to the gaps (printed to 0.1 px).
        for h, g in zip(bf, SEED_BF16_GAPS):
            self.assertAlmostEqual(h / bf[2], g / SEED_BF16_GAPS[2], delta=0.01)
        # Each bar carries its value as a label.
        for g in SEED_BF16_GAPS:
            self.assertIn(f"{g:.4g}", texts)

    def test_text_table_keeps_the_references_apart(self):
        with open(self.paths["txt"]) as f:
            lines = f.read().splitlines()
        header = next(line for line in lines if line.startswith("case "))
        for column in ("shape", "dtype", "impl max abs", "implementation", "gap max abs",
                       "input part", "output part", "gap atol", "gap rtol", "gap verdict"):
            self.assertIn(column, header)
        rows = lines[lines.index(header) + 1:lines.index(header) + 9]
        for i, row in enumerate(rows):
            cells = row.split()
            self.assertEqual(cells[0], str(i))
            self.assertEqual(" ".join(cells[1:4]), "{} x {}".format(*SHAPES[i // 2]))
            self.assertEqual(cells[4], "bfloat16" if i % 2 else "float32")
            self.assertIn("PASS", cells)
            self.assertIn(repr(self.results[i].gap_max_abs), cells)
        self.assertIn("implementation: 8 of 8 cases match the represented-input oracle",
                      lines)


class NumberPrinter(unittest.TestCase):
    """tk_format_number, the printer of every report, is Python's repr()."""

    def test_every_number_prints_as_repr(self):
        rng = np.random.default_rng(7)
        doubles = rng.integers(0, 2**64, 50000, dtype=np.uint64).view(np.float64)
        with np.errstate(invalid="ignore"):  # signalling NaNs among the floats
            floats = rng.integers(0, 2**32, 50000, dtype=np.uint64).astype(
                np.uint32).view(np.float32).astype(np.float64)
        edges = [0.0, -0.0, 1.0, 0.1, 1e-4, 9.999999999999999e-05, 1e16, 9999999999999998.0,
                 5e-324, 1.7976931348623157e308, float("inf"), -float("inf"), float("nan"),
                 -2.5, 123456789.0, 1e22]
        # Powers of two and their neighbours: there the gap below is half the
        # gap above, and the nearest p digits may not read back where the
        # next ones do (2**-24 is 5.960464477539063e-08).
        twos = [np.nextafter(np.ldexp(1.0, e), to) for e in range(-1074, 1024)
                for to in (0.0, np.inf)] + [np.ldexp(1.0, e) for e in range(-1074, 1024)]
        tens = [float(f"{i}e{k}") for i in range(1, 100) for k in range(-30, 30)]
        buf = ctypes.create_string_buffer(32)
        for v in [*doubles, *floats, *edges, *twos, *tens]:
            tk.lib.tk_format_number(float(v), buf, 32)
            self.assertEqual(buf.value.decode(), repr(float(v)), float(v).hex())

    def test_a_short_buffer_is_refused_and_untouched(self):
        buf = ctypes.create_string_buffer(b"keep", 5)
        with self.assertRaisesRegex(tk.errors.RangeError, "0.125 needs 6 bytes, size is 5"):
            tk.lib.tk_format_number(0.125, buf, 5)
        self.assertEqual(buf.raw, b"keep\0")


class MainJob(unittest.TestCase):
    def test_make_run_prints_the_recorded_lines(self):
        exe = os.path.join(ROOT, "build", "examples", "audit")
        self.assertTrue(os.access(exe, os.X_OK), f"{exe} missing: run `make tests`")
        with tempfile.TemporaryDirectory() as cwd:
            run = subprocess.run([exe, FIXTURES], cwd=cwd, capture_output=True,
                                 text=True, timeout=60)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            lines = run.stdout.splitlines()
            gaps = "[" + ", ".join(f"[0.0, {g!r}]" for g in SEED_BF16_GAPS) + "]"
            p = 0.3
            for want in (
                    "Kernel errors versus represented-input oracle: "
                    "[[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]",
                    "Gaps versus original float32 data: " + gaps,
                    "CPU correctness audit complete; no TPU latency or speedup measured",
                    "Joint row permutation preserves output identity",
                    "Early/final-only rounding: 1.0 1.0078125",
                    "Configuration, padded elements: (8, 128) 2 4096",
                    "Configuration, padded elements: (16, 256) 3 4096",
                    "Mixed and integer dtypes rejected",
                    "Modeled twofold-local speedup and zero-cost limit: "
                    f"{1 / ((1 - p) + p / 2.0)!r} {1 / (1 - p)!r}"):
                self.assertIn(want, lines)
            with open(os.path.join(cwd, "report", "audit.json")) as f:
                self.assertEqual(json.load(f)["schema"], "tilekern.audit/1")
            ET.parse(os.path.join(cwd, "report", "audit.svg"))

    def test_the_python_main_job_prints_the_same_lines(self):
        exe = os.path.join(ROOT, "build", "examples", "audit")
        script = os.path.join(ROOT, "examples", "python", "audit.py")
        with tempfile.TemporaryDirectory() as c_dir, tempfile.TemporaryDirectory() as py_dir:
            c = subprocess.run([exe, FIXTURES], cwd=c_dir, capture_output=True, text=True,
                               timeout=60)
            py = subprocess.run([sys.executable, script, FIXTURES], cwd=py_dir,
                                capture_output=True, text=True, timeout=120)
            self.assertEqual(py.returncode, 0, py.stdout + py.stderr)
            self.assertEqual(py.stdout, c.stdout)
            for name in ("audit.txt", "audit.json", "audit.svg"):
                with open(os.path.join(c_dir, "report", name), "rb") as f, \
                        open(os.path.join(py_dir, "report", name), "rb") as g:
                    self.assertEqual(g.read(), f.read(), name)


if __name__ == "__main__":
    unittest.main()
