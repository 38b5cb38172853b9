"""Every class: parameters by Python name, results by name, errors by class."""
import json

import ml_dtypes
import numpy as np
import pytest
import tilekern as tk

BF16 = np.dtype(ml_dtypes.bfloat16)


def test_tiling_reads_like_pallas_grid():
    with tk.Tiling(15, 255, 8, 128) as t:
        assert (t.shape, t.block, t.grid, t.tiles) == ((15, 255), (8, 128), (2, 2), 4)
        assert (t.padded_rows, t.padded_cols, t.padded_elements) == (16, 256, 4096)
        assert t.tail == "mask"
        assert t.tile(3) == (8, 128, 7, 127)
        t.tail = "pad"
        assert t.tail == "pad"
        with pytest.raises(tk.InvalidArgumentError, match="'wrap' is not one of"):
            t.tail = "wrap"
        with pytest.raises(tk.RangeError, match="4"):
            t.tile(4)
        padded = t.pad(np.ones((15, 255), np.float32))
        assert padded.shape == (16, 256)
        assert padded.to_numpy()[15].sum() == 0
        dst = np.zeros((15, 255), np.float32)
        t.crop(padded, dst)
        assert (dst == 1).all()
    with pytest.raises(tk.InvalidArgumentError):
        tk.Tiling(8, 8, 0, 8)


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("tail", ["mask", "pad", "shift_inwards"])
def test_kernel_axpy_is_numpy_exactly(dtype, tail):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((17, 257), np.float32).astype(dtype)
    y = rng.standard_normal((17, 257), np.float32).astype(dtype)
    want = (np.float32(3) * x.astype(np.float32) + y.astype(np.float32)).astype(dtype)
    with tk.Tiling(17, 257, 8, 128, tail=tail) as t, tk.Kernel.axpy(3.0) as k:
        got = k.run(t, [x, y])
    assert got.dtype == dtype
    assert got.view(np.uint8).tobytes() == want.view(np.uint8).tobytes()


@pytest.mark.parametrize("threads", [2, 0])
def test_kernel_threads_give_the_same_bits(threads):
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((2, 515, 700), np.float32)
    want = np.float32(3) * x + y
    with tk.Tiling(515, 700, 8, 128) as t, tk.Kernel.axpy(3.0) as k:
        assert k.threads == 1
        k.threads = threads
        assert k.threads == threads
        assert k.run(t, [x, y]).tobytes() == want.tobytes()
        with pytest.raises(tk.RangeError):
            k.threads = -1


def test_kernel_errors_by_class():
    k = tk.Kernel.axpy(2.0)
    t = tk.Tiling(8, 128, 8, 128)
    f = np.ones((8, 128), np.float32)
    with pytest.raises(tk.DtypeError):
        k.run(t, [f, np.ones((8, 128), BF16)], f.copy())
    with pytest.raises(tk.ShapeError):
        k.run(t, [f, np.ones((8, 64), np.float32)], f.copy())
    with pytest.raises(tk.InvalidArgumentError, match="sequence of arrays"):
        k.run(t, f)
    assert k.body == "elementwise" and k.n_inputs == 2
    with pytest.raises(tk.InvalidArgumentError, match="not callable"):
        tk.Kernel.custom(3, 1)


def test_device_profiles_and_parameters():
    assert "TPU v5 lite" in tk.Device.profiles()
    with tk.Device.simulated("TPU v5 lite") as d:
        assert d.is_simulated and d.platform == "tpu" and d.kind == "TPU v5 lite"
        assert (d.layout_rows, d.layout_cols) == (8, 128)
        d.copy_engines = 4
        assert d.copy_engines == 4
    with tk.Device.host() as h:
        assert not h.is_simulated and h.platform == "cpu"
    with pytest.raises(tk.InvalidArgumentError):
        tk.Device.simulated("TPU v99")
    with tk.Device.external("tpu", "TPU v5 lite") as e:
        assert not e.is_simulated


def test_pipeline_sweep_stats_trace_and_witnesses(tmp_path):
    x = np.random.default_rng(4).standard_normal((15, 255), np.float32)
    want = np.float32(2) * x + x
    k, d = tk.Kernel.axpy(2.0), tk.Device.simulated("TPU v5 lite")
    for block in ((8, 128), (16, 256)):
        t = tk.Tiling(15, 255, *block)
        for buffers in (2, 3):
            p = tk.Pipeline(k, t, d, input_buffers=buffers)
            assert p.input_buffers == buffers and p.mode == "simulate"
            assert np.array_equal(p.run([x, x]), want)
            s = p.stats
            assert s["padded_elements"] == 4096 and s["hazards"] == 0
            assert s["steps"] == t.tiles
            assert p.hazards == []
            p.detect_races = False
            p.run([x, x])
            with pytest.raises(tk.StateError):   # not [], which reads as a clean run
                p.hazards
            p.detect_races = True
            p.run([x, x])
            p.write_trace(tmp_path / "trace.json")
            trace = json.loads((tmp_path / "trace.json").read_text())
            assert trace["otherData"]["timing"] == "modeled, not measured"
    t = tk.Tiling(64, 128, 8, 128)
    p = tk.Pipeline(k, t, tk.Device.simulated("TPU v4"), fault="skip_input_wait")
    out = np.full((64, 128), 5.0, np.float32)
    with pytest.raises(tk.RaceError, match="unwaited read"):
        p.run([out[:], out[:]], out)
    assert (out == 5.0).all()
    h = p.hazards[0]
    assert (h.step, h.operand, h.kind) == (4, 0, "unwaited read")
    with pytest.raises(tk.InvalidArgumentError, match="no parameter 'buffers'"):
        tk.Pipeline(k, t, d, buffers=2)
    with pytest.raises(tk.InvalidArgumentError, match="no statistic"):
        p.stat("speed")
    with pytest.raises(tk.NotTargetError):
        tk.Pipeline(k, t, d, mode="target").run([out, out])


def test_compare_verdict_metrics_and_text():
    a = np.float32([[1.0, 2.0], [3.0, 4.0]])
    b = a.copy()
    b[1, 0] = 3.5
    c = tk.Compare("float32", atol=1e-3)
    assert c.run(a, a) and c.result("passed") == 1.0
    assert not c.run(b, a)
    assert c.results["mismatches"] == 1
    assert c.where("max_abs") == (1, 0, 3.5, 3.0)
    assert "FAIL" in c.format()
    c.nan_policy = "ignore"
    assert c.nan_policy == "ignore"


def test_audit_classes_verdicts_and_reports(tmp_path):
    def early_rounding(x, y):
        t = (np.float32(3) * x.astype(np.float32)).astype(x.dtype)
        return (t.astype(np.float32) + y.astype(np.float32)).astype(x.dtype)

    r = tk.audit(early_rounding, tk.Kernel.axpy(3.0), shapes=[(8, 128), (9, 129)],
                 report=[tmp_path / "a.txt", tmp_path / "a.json", tmp_path / "a.svg"])
    assert not r.passed
    by = {(c.rows, c.dtype): c for c in r.cases}
    assert by[8, "float32"].passed and by[8, "float32"].diagnosis == "not-run"
    assert not by[8, "bfloat16"].passed
    assert by[8, "bfloat16"].diagnosis == "early-rounding"
    assert by[8, "bfloat16"].gap_max_abs > 0
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["implementation_passed"] is False
    assert "early-rounding" in r.summary()
    with pytest.raises(tk.InvalidArgumentError, match="suffix"):
        r.write_report(tmp_path / "a.pdf")
    with pytest.raises(tk.StateError, match="no candidate"):
        a = tk.Audit(tk.Kernel.axpy(2.0))
        a.add_case("float32", [np.ones((1, 1), np.float32)] * 2)
        a.run()
    with pytest.raises(tk.InvalidArgumentError, match="2 inputs, 1 originals"):
        a.add_case("float32", [np.ones((1, 1), np.float32)])


def test_report_and_receipt_paths_are_checked_before_the_work(tmp_path):
    calls = []

    def candidate(x, y):
        calls.append(1)
        return (np.float32(2) * x + y).astype(x.dtype)

    for report, error, needle in [
            (tmp_path / "r.csv", tk.InvalidArgumentError, "suffix '.csv'"),
            (tmp_path / "no" / "r.json", tk.FileError, "no directory"),
            ([tmp_path / "ok.json", tmp_path], tk.FileError, "not a path to a file")]:
        with pytest.raises(error, match=needle):
            tk.audit(candidate, shapes=[(8, 128)], report=report)
        with pytest.raises(error, match=needle):
            tk.audit_row_sum(lambda x: x.sum(axis=1, keepdims=True), shapes=[(8, 128)],
                             report=report)
    assert not calls and not (tmp_path / "ok.json").exists()
    ran = []
    with pytest.raises(tk.FileError, match="receipt"):
        tk.benchmark({"a": lambda: ran.append(1)}, receipt=tmp_path / "no" / "r.json")
    with pytest.raises(tk.InvalidArgumentError, match=r"compile names \['b'\]"):
        tk.benchmark({"a": lambda: ran.append(1)}, compile={"b": lambda: None})
    assert not ran


def test_audit_permutation_check():
    x = np.random.default_rng(5).standard_normal((9, 129), np.float32)
    a = tk.Audit(tk.Kernel.axpy(2.0), lambda x, y: (np.float32(2) * x + y).astype(x.dtype))
    a.add_case("float32", [x, x])
    assert a.check_permutation(0, [8, 0, 7, 1, 6, 2, 5, 3, 4])
    # A candidate that depends on the row order is caught.
    a.set_candidate(lambda x, y: np.cumsum(x, axis=0, dtype=np.float32))
    assert not a.check_permutation(0, [8, 0, 7, 1, 6, 2, 5, 3, 4])


def test_bench_on_the_host_and_refused_on_a_simulation(tmp_path):
    calls = []
    with tk.Device.host() as host:
        b = tk.Bench(host, repeats=7, warmups=2, boundary='a Python "lambda"')
        assert b.add("lambda", lambda: calls.append("run")) == 0
        b.add("other", lambda: calls.append("other"), compile=lambda: calls.append("c"))
        b.run()
        assert calls.count("run") == 2 + 7 and calls.count("c") == 1
        r = b.result(0)
        assert r.label == "lambda" and r.samples == 7 and r.speedup == 1.0
        samples = b.samples(0)
        assert len(samples) == 7 and r.median_ms == float(np.median(samples))
        b.write_receipt(tmp_path / "receipt.json")
        receipt = json.loads((tmp_path / "receipt.json").read_text())
        assert receipt["boundary"] == 'a Python "lambda"'
        assert receipt["entries"][0]["samples_ms"] == samples.tolist()
        with pytest.raises(tk.RangeError):
            b.result(3)
    with pytest.raises(tk.NotTargetError, match="simulated"):
        tk.Bench(tk.Device.simulated())
    with pytest.raises(tk.InvalidArgumentError, match="sync"):
        tk.Bench(tk.Device.external("tpu", "TPU v5 lite"), boundary="x").add(
            "no sync", lambda: None)


def test_benchmark_blocks_until_ready():
    class Lazy:
        done = 0

        def block_until_ready(self):
            Lazy.done += 1
            return self

    results = tk.benchmark({"lazy": Lazy}, sync="block_until_ready", repeats=5, warmups=1)
    assert results["lazy"].samples == 5 and Lazy.done == 6


def test_pipeline_slots_start_as_nan_like_the_chip():
    x = np.ones((16, 256), np.float32)
    lazy = tk.Kernel.custom(lambda inputs, output: None, 2, body="blockwise")
    with tk.Tiling(16, 256, 8, 128) as t, tk.Pipeline(lazy, t, tk.Device.simulated()) as p:
        assert np.isnan(p.run([x, x])).all()


def test_runs_refuse_a_wrong_number_of_inputs():
    """The C library reads as many inputs as the kernel has: fewer would be
    read past the array's end, more would be ignored."""
    x = np.ones((8, 128), np.float32)
    t = tk.Tiling(8, 128, 8, 128)
    k = tk.Kernel.custom(lambda ins, out: None, 4)
    with pytest.raises(tk.InvalidArgumentError, match="the kernel has 4 input.s., 3 were"):
        k.run(t, [x, x, x])
    with pytest.raises(tk.InvalidArgumentError, match="the kernel has 2 input.s., 3 were"):
        tk.Kernel.axpy(2.0).run(t, [x, x, x])
    p = tk.Pipeline(k, t, tk.Device.simulated())
    with pytest.raises(tk.InvalidArgumentError, match="the kernel has 4 input.s., 1 were"):
        p.run([x])
    # An output allocated for the caller is not blamed for the inputs' shape.
    with pytest.raises(tk.ShapeError) as info:
        tk.Kernel.axpy(2.0).run(tk.Tiling(17, 128, 8, 128), [x, x])
    assert "output" not in str(info.value), info.value


def test_integers_a_c_argument_cannot_hold_are_refused_not_wrapped():
    with pytest.raises(tk.SizeOverflowError, match="18446744073709551619 does not fit int64"):
        tk.Matrix.create("float32", 2**64 + 3, 4)
    with pytest.raises(tk.SizeOverflowError, match="does not fit int64"):
        tk.Tiling(2**64 + 17, 257, 8, 128)
    k = tk.Kernel.axpy(2.0)
    with pytest.raises((tk.SizeOverflowError, tk.RangeError)):
        k.threads = 2**64 + 2
    assert k.threads == 1
    with pytest.raises(tk.SizeOverflowError, match="81792 does not fit uint16_t"):
        tk.bf16_to_f32(0x13F80)
    with pytest.raises(tk.InvalidArgumentError, match="must be an integer, not 2.5"):
        tk.Matrix.create("float32", 2.5, 4)
    assert tk.Matrix.create("float32", np.int64(2), 4).shape == (2, 4)


def test_a_handle_closed_inside_its_own_run_lives_until_the_run_returns():
    x = np.arange(17 * 257, dtype=np.float32).reshape(17, 257)
    m = tk.Matrix.wrap(x.copy())

    def body(ins, out):
        k.close()
        m.close()
        out[...] = ins[0]

    k = tk.Kernel.custom(body, 1)
    out = k.run(tk.Tiling(17, 257, 8, 128), [m])
    assert k.closed and m.closed
    assert np.array_equal(out, x)
    with pytest.raises(tk.StateError, match="closed"):
        k.run(tk.Tiling(17, 257, 8, 128), [x])


def test_a_closed_pipeline_says_so():
    p = tk.Pipeline(tk.Kernel.axpy(2.0), tk.Tiling(8, 128, 8, 128), tk.Device.simulated())
    p.close()
    for name in ("stats", "hazards"):
        with pytest.raises(tk.StateError, match="closed"):
            getattr(p, name)


def test_compare_defaults_to_the_dtypes_tolerance():
    a = np.float32([[1.0, 2.0]])
    b = np.nextafter(a, np.float32(3))   # one ULP up
    c = tk.Compare()
    assert c.run(b, a)
    assert (c.result("atol"), c.result("rtol")) == (1e-05, 1.3e-06)
    assert not tk.Compare(atol=0.0).run(b, a)


def test_scalars_stay_scalars_and_bad_arguments_are_named():
    assert tk.from_f32(np.float32(1.5), "bfloat16").shape == ()
    assert tk.to_f32(np.array(1.5, BF16)).shape == ()
    with pytest.raises(tk.DtypeError, match="float dtype"):
        tk.ulp_distance("int32", 1, 2)
    a = tk.Audit(tk.Kernel.axpy(2.0), lambda x, y: (np.float32(2) * x + y).astype(x.dtype))
    a.add_case("float32", [np.ones((2, 8), np.float32)] * 2)
    for order in ([1], [2, 0, 1]):
        with pytest.raises(tk.InvalidArgumentError, match=f"order has {len(order)} entries; "
                                                          f"case 0 has 2 rows"):
            a.check_permutation(0, order)
    with pytest.raises(tk.SizeOverflowError, match="an order entry 18446744073709551617"):
        a.check_permutation(0, [0, 2**64 + 1])
    with pytest.raises(tk.InvalidArgumentError, match="an order entry 1.5 is not an integer"):
        a.check_permutation(0, [0, 1.5])
    with pytest.raises(tk.ShapeError, match=r"non-empty 2-D array is needed, not shape \(0, 4\)"):
        tk.Matrix.wrap(np.zeros((0, 4), np.float32))


def test_bf16_scalars_and_0d_arrays_keep_their_shape_and_floats_are_not_bits():
    assert tk.bf16_from_f32(np.array(1.5, np.float32)).shape == ()
    assert tk.bf16_from_f32(np.array(1.5, np.float32)) == 0x3FC0
    assert tk.bf16_from_f32(np.float32(1.5)) == 0x3FC0
    for bits in (0x3F80, np.uint16(0x3F80), ml_dtypes.bfloat16(1.0)):
        v = tk.bf16_to_f32(bits)
        assert isinstance(v, float) and v == 1.0, (bits, v)
    assert tk.bf16_to_f32(np.array(0x3F80, np.uint16)).shape == ()
    assert tk.bf16_to_f32(np.array([[0x3F80]], np.uint16)).shape == (1, 1)
    for bad in (1.5, True, "1"):
        with pytest.raises(tk.DtypeError, match=f"not {bad!r}"):
            tk.bf16_to_f32(bad)
    with pytest.raises(tk.DtypeError, match="uint16, not float32"):
        tk.bf16_to_f32(np.float32(1.5))
    with pytest.raises(tk.DtypeError, match="takes float32 values, not '1.5'"):
        tk.bf16_from_f32("1.5")


def test_arguments_of_the_wrong_type_are_named():
    with pytest.raises(tk.InvalidArgumentError, match="alpha '2' is not a number"):
        tk.Kernel.axpy("2")
    with tk.Tiling(1, 8, 8, 128) as t:
        out = tk.Kernel.axpy(np.float32(2)).run(t, [np.ones((1, 8), np.float32)] * 2)
    assert out[0, 0] == 3
    with pytest.raises(tk.InvalidArgumentError, match="ulp_distance: a '1' is not a number"):
        tk.ulp_distance("bfloat16", "1", 2)
    with pytest.raises(tk.InvalidArgumentError, match="profile None is not a str"):
        tk.Device.simulated(None)
    k = tk.Kernel.custom(lambda ins, out: None, np.int64(2))
    assert k.n_inputs == 2
    with pytest.raises(tk.InvalidArgumentError, match="Kernel.threads: 'two' is not an int"):
        k.threads = "two"
    with pytest.raises(tk.InvalidArgumentError, match="dtypes is a sequence of names, not the "
                                                      "str 'float32'"):
        tk.audit_matmul(lambda x, y: x @ y, dtypes="float32")
    r = tk.audit_matmul(lambda x, y: (x.astype(np.float32) @ y.astype(np.float32)).astype(
        x.dtype), shapes=[np.array([8, 16, 4])], dtypes=["float32"])
    assert (r.cases[0].rows, r.cases[0].depth, r.cases[0].cols) == (8, 16, 4)
    with pytest.raises(tk.ShapeError, match=r"originals\(2, 3\) gave input 0 of shape "
                                            r"\(3, 2\), not \(2, 3\)"):
        tk.audit(lambda x, y: x, shapes=[(2, 3)],
                 originals=lambda shape, n: [np.ones((3, 2), np.float32)] * n)


def test_audit_shapes_are_checked_before_any_work():
    ok = lambda x, y: x   # noqa: E731 - never called
    for call, shapes, words in [(tk.audit, [(-1, 5)], "2 positive integers .rows, cols."),
                                (tk.audit_matmul, [(8, 128)], "3 positive integers .m, k, n."),
                                (tk.audit_row_sum, [(8, 128, 1)], "2 positive integers")]:
        with pytest.raises(tk.InvalidArgumentError, match=words):
            call(ok, shapes=shapes)
    b = tk.Bench(tk.Device.host())
    with pytest.raises(tk.InvalidArgumentError, match="the label 3 is not a str"):
        b.add(3, ok)
    with pytest.raises(tk.InvalidArgumentError, match="run 5 of 'a' is not callable"):
        tk.benchmark({"a": 5})
    with pytest.raises(tk.InvalidArgumentError, match="boundary None"):
        b.set_boundary(None)


def test_a_summary_says_when_only_nan_differences_failed():
    nan = lambda x, y: np.full(x.shape, np.nan, x.dtype)   # noqa: E731
    result = tk.audit(nan, shapes=[(8, 128)], dtypes=["float32"])
    assert not result.passed
    assert "1024 mismatches (NaN or signed-zero differences" in result.summary()
    # The gap's maxima leave NaN out as well: a reduction's line says so.
    nan_sum = lambda x: np.full((x.shape[0], 1), np.nan, x.dtype)   # noqa: E731
    r = tk.audit_row_sum(nan_sum, shapes=[(9, 256)], dtypes=["float32"])
    line = r.summary()
    assert line.startswith("9x256 row sum float32->float32"), line
    assert ("gap max abs 0.0 (input 0.0, output 0.0), 9 beyond its tolerance (NaN or "
            "signed-zero differences" in line), line
    # A candidate equal to the oracle everywhere has no worst element to name.
    exact = lambda x: x.astype(np.float64).sum(axis=1, keepdims=True).astype(x.dtype)  # noqa
    r = tk.audit_row_sum(exact, shapes=[(8, 16)], dtypes=["float32"])
    assert r.passed and r.cases[0].bound_ratio == 0
    assert "largest error/bound 0 (no element errs)" in r.summary(), r.summary()
