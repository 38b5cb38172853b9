"""An exception raised in any Python callback (body, candidate, bench
compile/run/sync) makes the C call fail with TK_ECALLBACK; the call then
raises the original exception itself, with its traceback, chained to the
library's error, and the output is untouched."""
import gc
import traceback
import weakref

import numpy as np
import pytest
import tilekern as tk


class Boom(Exception):
    pass


def raising_after(n):
    """A body that works n times, then raises Boom."""
    calls = []

    def body(inputs, output):
        if len(calls) >= n:
            raise Boom(f"call {len(calls)}")
        calls.append(1)
        output[...] = inputs[0] + inputs[1]
    return body


def check_reraised(info):
    e = info.value
    assert type(e) is Boom
    assert isinstance(e.__cause__, tk.CallbackError)
    assert e.__cause__.status == -15
    frames = [f.name for f in traceback.extract_tb(e.__traceback__)]
    assert "body" in frames or "candidate" in frames or "fn" in frames


# A blockwise body never sees shifted tiles: that pair is refused (TK_ELAYOUT).
@pytest.mark.parametrize("tail,body", [("mask", "elementwise"), ("pad", "elementwise"),
                                       ("shift_inwards", "elementwise"),
                                       ("mask", "blockwise"), ("pad", "blockwise")])
@pytest.mark.parametrize("after", [0, 3])
def test_a_raising_body_leaves_the_output_untouched(tail, body, after):
    x = np.arange(17 * 257, dtype=np.float32).reshape(17, 257)
    out = np.full_like(x, 7.0)
    k = tk.Kernel.custom(raising_after(after), 2, body=body)
    with tk.Tiling(17, 257, 8, 128, tail=tail) as t:
        with pytest.raises(Boom) as info:
            k.run(t, [x, x], out)
    check_reraised(info)
    assert (out == 7.0).all()


def test_without_undo_a_raising_body_leaves_what_it_wrote():
    x = np.arange(17 * 257, dtype=np.float32).reshape(17, 257)
    out = np.full_like(x, 7.0)
    k = tk.Kernel.custom(raising_after(3), 2)
    assert k.undo is True
    k.undo = False
    with tk.Tiling(17, 257, 8, 128) as t:
        with pytest.raises(Boom) as info:
            k.run(t, [x, x], out)
        check_reraised(info)
        assert "partly written" in info.value.__cause__.message
        written = out != 7.0
        assert written.any() and not written.all()
        assert (out[written] == (x + x)[written]).all()


def test_a_python_body_computes_through_kernel_and_pipeline():
    x = np.random.default_rng(1).standard_normal((16, 256), np.float32)
    y = np.ones_like(x)

    def body(inputs, output):
        output[...] = inputs[0] * inputs[1] + 1

    k = tk.Kernel.custom(body, 2, body="blockwise")
    with tk.Tiling(16, 256, 8, 128) as t:
        assert np.array_equal(k.run(t, [x, y]), x * y + 1)
        with tk.Pipeline(k, t, tk.Device.simulated()) as p:
            assert np.array_equal(p.run([x, y]), x * y + 1)


def test_body_views_are_float32_tiles_and_inputs_read_only():
    seen = []

    def body(inputs, output):
        seen.append((inputs[0].shape, inputs[0].dtype, inputs[0].flags.writeable,
                     output.flags.writeable))
        output[...] = inputs[0]

    x = np.ones((9, 129), np.float32)
    with tk.Tiling(9, 129, 8, 128) as t:
        tk.Kernel.custom(body, 1, body="blockwise").run(t, [x])
    assert seen and all(s == ((8, 128), np.float32, False, True) for s in seen)


def test_a_raising_body_in_the_pipeline():
    x = np.ones((16, 256), np.float32)
    out = np.full_like(x, 3.0)
    k = tk.Kernel.custom(raising_after(2), 2, body="blockwise")
    with tk.Tiling(16, 256, 8, 128) as t, tk.Pipeline(k, t, tk.Device.simulated()) as p:
        with pytest.raises(Boom) as info:
            p.run([x, x], out)
    check_reraised(info)
    assert (out == 3.0).all()


def test_keyboard_interrupt_is_reraised_too():
    def body(inputs, output):
        raise KeyboardInterrupt

    with tk.Tiling(8, 128, 8, 128) as t:
        with pytest.raises(KeyboardInterrupt):
            tk.Kernel.custom(body, 1).run(t, [np.ones((8, 128), np.float32)])


def axpy(x, y):
    return (np.float32(2) * x.astype(np.float32) + y.astype(np.float32)).astype(x.dtype)


def test_a_raising_candidate_keeps_the_previous_results():
    k = tk.Kernel.axpy(2.0)
    state = {"fail": False}

    def candidate(x, y):
        if state["fail"]:
            raise Boom("candidate")
        return axpy(x, y)

    a = tk.Audit(k, candidate)
    a.add_case("bfloat16", [np.ones((8, 128), np.float32)] * 2)
    assert a.run()
    before = a.results
    state["fail"] = True
    with pytest.raises(Boom) as info:
        a.run()
    check_reraised(info)
    assert "candidate returned" in info.value.__cause__.message
    assert a.results == before


@pytest.mark.parametrize("result,error", [
    (lambda x, y: np.zeros((1, 1), x.dtype), tk.ShapeError),
    (lambda x, y: np.zeros(x.shape, np.float64), tk.DtypeError),
])
def test_a_wrong_candidate_result_is_named(result, error):
    with pytest.raises(error):
        tk.audit(result, shapes=[(8, 128)], dtypes=["float32"])


@pytest.mark.parametrize("phase", ["compile", "run", "sync"])
def test_a_raising_bench_callback(phase):
    def fn():
        raise Boom(phase)

    fns = {"compile": lambda: None, "run": lambda: None, "sync": lambda: None}
    fns[phase] = fn
    with tk.Device.host() as host:
        b = tk.Bench(host, repeats=5, boundary="a test")
        b.add("entry", fns["run"], compile=fns["compile"], sync=fns["sync"])
        with pytest.raises(Boom) as info:
            b.run()
    assert str(info.value) == phase
    assert isinstance(info.value.__cause__, tk.CallbackError)
    with pytest.raises(tk.StateError):
        b.result(0)


def test_a_body_may_run_another_kernel():
    inner = tk.Kernel.axpy(1.0)

    def body(inputs, output):
        with tk.Tiling(*output.shape, 8, 128) as t:
            inner.run(t, [inputs[0], inputs[0]], np.asarray(output))

    x = np.ones((8, 128), np.float32)
    with tk.Tiling(8, 128, 8, 128) as t:
        assert (tk.Kernel.custom(body, 1, "blockwise").run(t, [x]) == 2).all()


def test_an_exception_in_a_nested_call_reaches_the_outer_caller():
    def inner_body(inputs, output):
        raise Boom("inner")

    inner = tk.Kernel.custom(inner_body, 1)

    def body(inputs, output):
        with tk.Tiling(*output.shape, 8, 128) as t:
            inner.run(t, [inputs[0]], np.asarray(output))

    with tk.Tiling(8, 128, 8, 128) as t:
        with pytest.raises(Boom, match="inner"):
            tk.Kernel.custom(body, 1).run(t, [np.ones((8, 128), np.float32)])


def test_parents_collected_before_children_stay_usable():
    k = tk.Kernel.axpy(2.0)
    t = tk.Tiling(16, 256, 8, 128)
    d = tk.Device.simulated()
    p = tk.Pipeline(k, t, d)
    refs = [weakref.ref(o) for o in (k, t, d)]
    del k, t, d
    gc.collect()
    x = np.ones((16, 256), np.float32)
    assert (p.run([x, x]) == 3).all()
    assert all(r() is not None for r in refs)  # the pipeline holds them
    del p
    gc.collect()
    assert all(r() is None for r in refs)


def test_closing_a_parent_defers_its_destruction():
    k = tk.Kernel.axpy(2.0)
    a = tk.Audit(k, axpy)
    k.close()
    assert k.closed
    with pytest.raises(tk.StateError):
        k.n_inputs  # noqa: B018 - the user closed it
    a.add_case("float32", [np.ones((8, 128), np.float32)] * 2)
    assert a.run()  # the C audit still has a live kernel
    a.close()


def test_a_candidate_that_reenters_its_audit_gets_state_error():
    k = tk.Kernel.axpy(2.0)
    a = tk.Audit(k)

    def candidate(x, y):
        a.add_case("float32", [np.ones((8, 128), np.float32)] * 2)
        return axpy(x, y)

    a.set_candidate(candidate)
    a.add_case("float32", [np.ones((8, 128), np.float32)] * 2)
    with pytest.raises(tk.StateError, match="the audit is running"):
        a.run()
    assert a.cases == 1


def _sigint_after(seconds):
    import os
    import signal
    import threading
    threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT)).start()


def test_ctrl_c_stops_a_slow_callback_at_once_and_the_handler_goes_back():
    """Inside a callback's own code the first Ctrl-C raises where it lands,
    as without the library; the call stops, and SIGINT's handler is
    Python's default again."""
    import signal
    import time

    def slow(ins, out):
        for _ in range(300):   # 3 s unless interrupted
            time.sleep(0.01)

    k = tk.Kernel.custom(slow, 1)
    x = np.ones((8, 128), np.float32)
    out = np.full((8, 128), 7.0, np.float32)
    _sigint_after(0.1)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        k.run(tk.Tiling(8, 128, 8, 128), [x], out)
    assert time.monotonic() - t0 < 2.0
    assert (out == 7.0).all(), "the output is untouched"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert np.array_equal(k.run(tk.Tiling(8, 128, 8, 128), [x], out), out), "no key left over"


def test_another_threads_callbacks_leave_the_main_threads_ctrl_c_alone():
    import threading
    import time

    started, seen = threading.Event(), []

    def body(ins, out):
        started.set()
        time.sleep(0.01)
        out[...] = ins[0]

    def worker():
        try:
            tk.Kernel.custom(body, 1).run(tk.Tiling(64, 128, 1, 128),
                                          [np.ones((64, 128), np.float32)])
        except BaseException as e:  # noqa: B902
            seen.append(e)

    w = threading.Thread(target=worker)
    w.start()
    started.wait()

    sent = []

    def candidate(x, y):
        if not sent:   # once: a later key would reach pytest
            sent.append(_sigint_after(0.02))
        return np.float32(2) * x + y

    a = tk.Audit(tk.Kernel.axpy(2.0), candidate)
    a.add_case("float32", [np.ones((1024, 4096), np.float32)] * 2)   # the key lands in C
    with pytest.raises(KeyboardInterrupt):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:   # audits until the key arrives
            a.run()
    w.join()
    assert seen == [], seen


def test_ctrl_c_reaches_an_audit_run_from_inside_a_callback():
    """A guarded call made from a callback (an audit inside a body) is
    stopped by the first Ctrl-C at its own next callback: the outer
    callback's code must not make the key raise where ctypes would lose it."""
    import os
    import signal
    import threading

    def candidate(x, y):   # the key comes 5 ms after it returns, in the C oracle
        out = x.astype(np.float32) @ y.astype(np.float32)
        threading.Timer(0.005, os.kill, (os.getpid(), signal.SIGINT)).start()
        return out

    rng = np.random.default_rng(5)
    a = tk.Audit(tk.Kernel.matmul(), candidate)
    a.add_reduction_case("bfloat16", [rng.standard_normal((256, 32768), np.float32),
                                      rng.standard_normal((32768, 256), np.float32)], "float32")
    done = []

    def body(ins, out):
        a.run()   # some 0.4 s of oracle
        done.append(True)

    with pytest.raises(KeyboardInterrupt):
        tk.Kernel.custom(body, 1).run(tk.Tiling(8, 128, 8, 128), [np.ones((8, 128), np.float32)])
    assert not done, "the inner audit ran to its end"


def test_a_guard_left_behind_by_a_cut_short_exit_is_recovered():
    """A second Ctrl-C can land before a guard's exit runs at all: the next
    call starts clean, with no key left over, and the default handler comes
    back."""
    import signal
    from tilekern import _ffi

    stale = _ffi.CallbackGuard()
    _ffi._local.guards.append(stale)
    signal.signal(signal.SIGINT, _ffi._note_sigint)
    _ffi._sigint[:] = [True, 0]
    try:
        x = np.ones((8, 128), np.float32)
        tk.Kernel.custom(lambda ins, out: np.copyto(out, ins[0]), 1).run(
            tk.Tiling(8, 128, 8, 128), [x])
        assert _ffi._local.guards == []
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        _ffi._local.guards.clear()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _ffi._sigint[:] = [False, 0]
