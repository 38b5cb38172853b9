"""tilekern.Call: pallas_call's grid and BlockSpecs with Python bodies over
numpy views, against numpy (exact on small integers)."""
import ml_dtypes
import numpy as np
import pytest
import tilekern as tk


def ints(shape, seed):
    return np.random.default_rng(seed).integers(-3, 4, shape).astype(np.float32)


def matmul_call(M, N, K, bm, bn, bk, out_dtype="float32", careful=True):
    def body(step, x, y, o):
        if step.grid[2] == 0:
            o[...] = 0.0
        kv = step.valid[0][1] if careful else x.shape[1]
        o += x[:, :kv] @ y[:kv, :]

    grid = (-(-M // bm), -(-N // bn), -(-K // bk))
    return tk.Call(grid, body,
                   in_specs=[tk.BlockSpec((M, K), (bm, bk), lambda i, j, k: (i, k)),
                             tk.BlockSpec((K, N), (bk, bn), lambda i, j, k: (k, j))],
                   out_specs=[tk.BlockSpec((M, N), (bm, bn), [[1, 0, 0, 0], [0, 1, 0, 0]],
                                           out_dtype)],
                   dimension_semantics=("parallel", "parallel", "arbitrary"))


@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16"])
def test_matmul_with_tails_on_every_axis(out_dtype):
    M, N, K = 37, 300, 45
    x, y = ints((M, K), 1), ints((K, N), 2)
    c = matmul_call(M, N, K, 16, 128, 16, out_dtype)
    (out,) = c.run([x, y])
    want = (x @ y).astype(np.dtype(ml_dtypes.bfloat16) if out_dtype == "bfloat16"
                          else np.float32)
    assert out.dtype == want.dtype
    assert out.view(np.uint8).tobytes() == want.view(np.uint8).tobytes()
    s = c.stats
    assert s["copies_out"] == 3 * 3 and s["steps"] == 3 * 3 * 3
    assert c.check_padding([x, y]) == 0


def test_round_steps_models_a_bfloat16_output_ref_accumulator():
    # Uniform data: the sums are not exact, so where the rounding happens shows.
    M, N, K, bk = 16, 128, 48, 16
    rng = np.random.default_rng(9)
    x = rng.uniform(-4, 4, (M, K)).astype(np.float32)
    y = rng.uniform(-4, 4, (K, N)).astype(np.float32)
    bf16 = np.dtype(ml_dtypes.bfloat16)
    c = matmul_call(M, N, K, 16, 128, bk, "bfloat16")
    assert c.round_steps is False
    assert repr(c) == ("<tilekern.Call grid (1, 1, 3), 2 input(s), 1 output(s), pad 'zero', "
                       "round_steps False>")
    results = []
    for round_steps in (False, True):
        c.round_steps = round_steps
        assert c.round_steps is round_steps
        (out,) = c.run([x, y])
        acc = np.zeros((M, N), np.float32)
        for k0 in range(0, K, bk):   # the body's own sum, one k block a step
            acc = acc + x[:, k0:k0 + bk] @ y[k0:k0 + bk, :]
            if round_steps:
                acc = acc.astype(bf16).astype(np.float32)
        assert out.view(np.uint16).tobytes() == acc.astype(bf16).view(np.uint16).tobytes()
        results.append(out)
    assert not np.array_equal(results[0], results[1])


def test_the_k_tail_bug_is_found():
    M, N, K = 16, 128, 45
    x, y = ints((M, K), 3), ints((K, N), 4)
    c = matmul_call(M, N, K, 16, 128, 16, careful=False)
    (out,) = c.run([x, y])
    assert np.array_equal(out, x @ y)  # right, by the luck of zero padding
    assert c.check_padding([x, y]) == M * N
    c.pad = "nan"
    assert np.isnan(c.run([x, y])[0]).all()
    c.pad = 1.5
    assert c.pad == 1.5


def test_bias_add_skips_the_repeated_block_and_transpose_by_callback():
    x, b = ints((41, 128), 5), ints((1, 128), 6)
    c = tk.Call((6, 1), lambda step, x, b, o: np.add(x, b, out=o),
                [tk.BlockSpec((41, 128), (8, 128)),
                 tk.BlockSpec((1, 128), (1, 128), [[0, 0, 0], [0, 1, 0]])],
                [tk.BlockSpec((41, 128), (8, 128))])
    (out,) = c.run([x, b])
    assert np.array_equal(out, x + b)
    assert c.stats["copies_skipped"] == 5
    t = np.random.default_rng(7).standard_normal((37, 150), np.float32)
    c = tk.Call((10, 3), lambda step, a, o: np.copyto(o, a.T),
                [tk.BlockSpec((37, 150), (16, 16), lambda i, j: (j, i))],
                [tk.BlockSpec((150, 37), (16, 16))])
    assert c.run([t])[0].tobytes() == t.T.copy().tobytes()


def test_a_raising_body_leaves_the_outputs_untouched():
    class Boom(Exception):
        pass

    def body(step, x, o):
        o[...] = x
        if step.grid == (2, 0):
            raise Boom("at (2, 0)")

    x = ints((20, 300), 8)
    out = np.full_like(x, 9.0)
    c = tk.Call((3, 3), body, [tk.BlockSpec((20, 300), (8, 128))],
                [tk.BlockSpec((20, 300), (8, 128))])
    with pytest.raises(Boom) as info:
        c.run([x], [out])
    assert isinstance(info.value.__cause__, tk.CallbackError)
    assert (out == 9.0).all()
    # Without the undo copy, the blocks written back before (2, 0) stay.
    assert c.undo is True
    c.undo = False
    with pytest.raises(Boom) as info:
        c.run([x], [out])
    assert "may be partly written (TK_CALL_UNDO is 0)" in str(info.value.__cause__)
    assert (out[:16] == x[:16]).all() and (out[16:] == 9.0).all()


def test_refusals():
    x = ints((4, 4), 9)
    with pytest.raises(tk.LayoutError, match="visited again at step 2"):
        tk.Call((2, 2), lambda s, x, o: None, [tk.BlockSpec((4, 4), (2, 2))],
                [tk.BlockSpec((4, 4), (2, 2), lambda i, j: (j, 0))]).run([x])
    with pytest.raises(tk.RangeError, match="outside its 2x2 block grid"):
        tk.Call((2, 2), lambda s, x, o: None, [tk.BlockSpec((4, 4), (2, 2))],
                [tk.BlockSpec((4, 4), (2, 2), lambda i, j: (i + 1, j))]).run([x])
    with pytest.raises(tk.LayoutError, match="parallel axis 1"):
        tk.Call((2, 2), lambda s, x, o: None, [tk.BlockSpec((4, 4), (2, 2))],
                [tk.BlockSpec((4, 2), (2, 2), lambda i, j: (i, 0))],
                dimension_semantics=("parallel", "parallel")).run([x])
    with pytest.raises(tk.RangeError, match="rank 4"):
        tk.Call((1, 1, 1, 1), lambda s: None, [], [])
    with pytest.raises(tk.ShapeError, match="extent 0"):
        tk.Call((2, 0), lambda s: None, [], [])
    with pytest.raises(ZeroDivisionError):
        tk.Call((2, 2), lambda s, x, o: None,
                [tk.BlockSpec((4, 4), (2, 2), lambda i, j: (i // 0, j))],
                [tk.BlockSpec((4, 4), (2, 2))]).run([x])
    with pytest.raises(tk.InvalidArgumentError, match="2 inputs given"):
        tk.Call((2, 2), lambda s, x, o: None, [tk.BlockSpec((4, 4), (2, 2))],
                [tk.BlockSpec((4, 4), (2, 2))]).run([x, x])


def test_what_a_pallas_user_may_pass_is_taken_or_named():
    x = ints((4, 4), 9)
    spec = tk.BlockSpec((4, 4), (2, 2))
    # Pallas takes an int for a rank-1 grid.
    c = tk.Call(2, lambda s, x, o: o.__setitem__(slice(None), x),
                [tk.BlockSpec((2, 4), (1, 4), lambda i: (i, 0))],
                [tk.BlockSpec((2, 4), (1, 4), lambda i: (i, 0))])
    assert c.grid == (2,)
    assert np.array_equal(c.run([x[:2]])[0], x[:2])
    # A map of another rank's grid, or one giving no pair: named with the value.
    for gives, shown in [(lambda i, j: (i, j, 0), r"\(0, 0, 0\)"), (lambda i, j: i, "gives 0"),
                         (lambda i, j: None, "gives None")]:
        with pytest.raises(tk.InvalidArgumentError,
                           match=shown + r".* for grid index \(0, 0\): a block index is "
                                         r"two integers"):
            tk.Call((2, 2), lambda s, x, o: None, [spec],
                    [tk.BlockSpec((4, 4), (2, 2), gives)]).run([x])
    # One array where a list of them goes: not iterated row by row.
    c = tk.Call((2, 2), lambda s, x, o: None, [spec], [spec])
    for run in (c.run, c.check_padding):
        with pytest.raises(tk.InvalidArgumentError, match="inputs is a sequence of arrays, "
                                                          "not ndarray: give \\[x\\] for one"):
            run(x)
    with pytest.raises(tk.InvalidArgumentError, match="outputs is a sequence of arrays"):
        c.run([x], x.copy())
    # Pallas's squeezed dimension, and entries that are no integers.
    with pytest.raises(tk.InvalidArgumentError, match="has None, which Pallas reads as a "
                                                      "squeezed dimension: give 1"):
        tk.Call((2, 2), lambda s, x, o: None, [tk.BlockSpec((4, 4), (None, 2))], [spec])
    with pytest.raises(tk.InvalidArgumentError, match=r"block \(2, 1.5\): entry 1.5 is not"):
        tk.Call((2, 2), lambda s, x, o: None, [tk.BlockSpec((4, 4), (2, 1.5))], [spec])
    with pytest.raises(tk.InvalidArgumentError, match="pad: None is not one of 'zero', 'nan' "
                                                      "or a float"):
        c.pad = None
    with pytest.raises(tk.InvalidArgumentError, match="Call.round_steps: 'yes' is not a bool"):
        c.round_steps = "yes"
    c.round_steps = np.bool_(True)
    assert c.round_steps is True


def test_an_output_never_initialized_is_nan():
    c = tk.Call((1, 2), lambda s, x, o: np.add(o, x[:, :1], out=o),
                [tk.BlockSpec((8, 2), (8, 1))],
                [tk.BlockSpec((8, 1), (8, 1), [[1, 0, 0], [0, 0, 0]])])
    assert np.isnan(c.run([np.ones((8, 2), np.float32)])[0]).all()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float8_e4m3fn"])
def test_output_blocks_no_step_maps_are_nan(dtype):
    # One step writes block (0, 0) of four: the rest of a Call.run output
    # is NaN, not what np.empty left there; given outputs keep their values.
    c = tk.Call((1, 1), lambda s, x, o: np.multiply(x, 2, out=o),
                [tk.BlockSpec((16, 16), (8, 8))], [tk.BlockSpec((16, 16), (8, 8), dtype=dtype)])
    (out,) = c.run([np.ones((16, 16), np.float32)])
    got = out.astype(np.float32)
    assert (got[:8, :8] == 2).all()
    got[:8, :8] = np.nan
    assert np.isnan(got).all()
    given = np.full((16, 16), 7, out.dtype)
    c.run([np.ones((16, 16), np.float32)], [given])
    assert (given.astype(np.float32)[8:] == 7).all()


def test_a_block_spec_that_is_not_2d_is_named():
    spec = tk.BlockSpec((16, 16), (8, 8))
    for bad in [tk.BlockSpec((8,), (4,), lambda i: (0, i)),
                tk.BlockSpec((2, 8, 8), (1, 8, 8), lambda i: (0, i))]:
        with pytest.raises(tk.InvalidArgumentError, match=r"BlockSpec's shape is 2-D, "
                                                          r"\(rows, cols\), not \("):
            tk.Call((2,), lambda s, x, o: None, [bad], [spec])
    with pytest.raises(tk.RangeError, match="int64 values, not 18446744073709551615"):
        tk.Call((2, 2), lambda s, x, o: None, [spec],
                [tk.BlockSpec((16, 16), (8, 8), np.array([[1, 0, 2**64 - 1], [0, 1, 0]],
                                                         np.uint64))])


def test_a_call_through_the_pipeline_simulator():
    M, N, K = 37, 260, 300
    x, y = ints((M, K), 10), ints((K, N), 11)
    c = matmul_call(M, N, K, 16, 128, 128, "bfloat16")
    (host,) = c.run([x, y])
    with tk.Pipeline.from_call(c, tk.Device.simulated("TPU v5 lite")) as p:
        (sim,) = p.run([x, y])
        assert sim.tobytes() == host.tobytes()
        assert p.stats["copies_out"] == 9 and p.stats["hazards"] == 0
        p.set_buffers("output", 0, 1)
        with pytest.raises(tk.RaceError, match="unwaited write"):
            p.run([x, y])
        assert p.hazards[0] == tk.Hazard(3, 0, "output", "unwaited write")
    # A copy-out started before the last k step of its resident block is
    # named as such (it was reported only as the unwaited write that the
    # block's last body then makes).
    with tk.Pipeline.from_call(c, tk.Device.simulated("TPU v5 lite"),
                               fault="early_copy_out") as p:
        with pytest.raises(tk.RaceError):
            p.run([x, y])
        assert p.hazards[0].kind == "early copy-out", p.hazards


def test_an_index_map_beyond_int64_is_refused_not_wrapped():
    with pytest.raises(tk.RangeError, match="beyond int64"):
        tk.Call((2, 2), lambda s, x, o: None, [tk.BlockSpec((4, 4), (2, 2))],
                [tk.BlockSpec((4, 4), (2, 2), lambda i, j: (2**64 + 1, 0))]).run(
            [ints((4, 4), 1)])


def test_integers_are_not_truncated():
    """int() would make a grid of 2.5 steps 2, block 0.7 block 0 and an
    affine coefficient 1.5 one; numpy integers are integers."""
    spec = tk.BlockSpec((4, 4), (2, 2))
    with pytest.raises(tk.InvalidArgumentError, match="the grid size 2.5 is not an integer"):
        tk.Call((2.5, 2), lambda s, x, o: None, [spec], [spec])
    with pytest.raises(tk.SizeOverflowError, match="18446744073709551618 does not fit int64"):
        tk.Call((2**64 + 2, 2), lambda s, x, o: None, [spec], [spec])
    with pytest.raises(tk.InvalidArgumentError, match=r"grid index \(0, 0\) 0.7 is not"):
        tk.Call((2, 2), lambda s, x, o: None, [spec],
                [tk.BlockSpec((4, 4), (2, 2), lambda i, j: (0.7 + i, j))]).run([ints((4, 4), 1)])
    with pytest.raises(tk.InvalidArgumentError, match="affine index map holds integers"):
        tk.Call((2, 2), lambda s, x, o: None, [spec],
                [tk.BlockSpec((4, 4), (2, 2), [[1.5, 0, 0], [0, 1, 0]])])
    c = tk.Call((np.int64(2), 2), lambda s, x, o: np.copyto(o, x), [spec],
                [tk.BlockSpec((4, 4), (2, 2), lambda i, j: (np.int32(i), j))])
    x = ints((4, 4), 2)
    assert np.array_equal(c.run([x])[0], x)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_call_of_a_kernel_is_its_run(dtype):
    # Call.from_kernel: the kernel's bits with tails on both axes, a call's
    # statistics, the same bits through the pipeline simulator, and a
    # Python body's exception raised again.
    R, C = 20, 300
    rng = np.random.default_rng(5)
    x, y = (rng.standard_normal((R, C)).astype(np.float32).astype(
        tk.matrix.numpy_dtype(tk.matrix.dtype_code(dtype))) for _ in range(2))
    k = tk.Kernel.axpy(3.0)
    t = tk.Tiling(R, C, 8, 128)
    want = k.run(t, [x, y])
    c = tk.Call.from_kernel(k, t, dtype)
    assert c.pad == "zero"
    (got,) = c.run([x, y])
    assert got.view(np.uint8).tobytes() == want.view(np.uint8).tobytes()
    item = np.dtype(got.dtype).itemsize
    assert c.stats == {"steps": 9, "copies_in": 18, "copies_out": 9, "copies_skipped": 0,
                       "bytes_in": 2 * R * C * item, "bytes_out": R * C * item}
    assert c.check_padding([x, y]) == 0
    p = tk.Pipeline.from_call(c, tk.Device.simulated("TPU v5 lite"))
    (sim,) = p.run([x, y])
    assert sim.view(np.uint8).tobytes() == want.view(np.uint8).tobytes()

    def fails(inputs, output):
        raise KeyError("from the body")

    bad = tk.Call.from_kernel(tk.Kernel.custom(fails, 2), t, dtype)
    out = np.zeros_like(want)
    with pytest.raises(KeyError, match="from the body"):
        bad.run([x, y], [out])
    assert not out.view(np.uint8).any()
    with pytest.raises(tk.TilekernError) as info:
        tk.Call.from_kernel(k, tk.Tiling(R, C, 8, 128, tail="shift_inwards"), dtype)
    assert info.value.name == "TK_ELAYOUT" and "shift-inwards" in info.value.message
