/* param.c - one table of every integer parameter and its legal range. */
#include "internal.h"

#define P(param) param, #param

static const struct {
    int param;
    const char *name;
    int owner;  /* TK__TILING, ...: the handle whose tk_*_set takes it */
    int64_t lo, hi;
    bool writable;
} tk__params[] = {
    {P(TK_TILING_TAIL), TK__TILING, TK_TAIL_PAD, TK_TAIL_SHIFT_INWARDS, true},
    {P(TK_TILING_GRID_ROWS), TK__TILING, 1, INT64_MAX, false},
    {P(TK_TILING_GRID_COLS), TK__TILING, 1, INT64_MAX, false},
    {P(TK_TILING_TILES), TK__TILING, 1, INT64_MAX, false},
    {P(TK_TILING_PADDED_ROWS), TK__TILING, 1, INT64_MAX, false},
    {P(TK_TILING_PADDED_COLS), TK__TILING, 1, INT64_MAX, false},
    {P(TK_TILING_PADDED_ELEMENTS), TK__TILING, 1, INT64_MAX, false},
    {P(TK_TILING_EXTRA_ELEMENTS), TK__TILING, 0, INT64_MAX, false},
    {P(TK_TILING_ROWS), TK__TILING, 1, INT64_MAX, false},
    {P(TK_TILING_COLS), TK__TILING, 1, INT64_MAX, false},
    {P(TK_TILING_BLOCK_ROWS), TK__TILING, 1, INT64_MAX, false},
    {P(TK_TILING_BLOCK_COLS), TK__TILING, 1, INT64_MAX, false},
    {P(TK_KERNEL_BODY), TK__KERNEL, TK_BODY_ELEMENTWISE, TK_BODY_BLOCKWISE, true},
    {P(TK_KERNEL_INPUTS), TK__KERNEL, 1, TK_KERNEL_MAX_INPUTS, false},
    {P(TK_KERNEL_ARITH), TK__KERNEL, TK_ARITH_NUMPY, TK_ARITH_XLA, true},
    /* Every dtype, so that the ones a reduction cannot accumulate in get a
     * message naming them (tk__kernel_admit). */
    {P(TK_KERNEL_ACCUM), TK__KERNEL, TK_DTYPE_F32, TK_DTYPE_F8E5M2, true},
    {P(TK_KERNEL_UNDO), TK__KERNEL, 0, 1, true},
    {P(TK_KERNEL_THREADS), TK__KERNEL, 0, TK_KERNEL_MAX_THREADS, true},
    {P(TK_KERNEL_THREAD_SAFE), TK__KERNEL, 0, 1, true},
    {P(TK_DEVICE_ONCHIP_BYTES), TK__DEVICE, 1, INT64_MAX, true},
    {P(TK_DEVICE_ONCHIP_LIMIT_BYTES), TK__DEVICE, 1, INT64_MAX, true},
    {P(TK_DEVICE_HBM_BYTES_PER_S), TK__DEVICE, 1, INT64_MAX, true},
    {P(TK_DEVICE_COPY_LATENCY_NS), TK__DEVICE, 0, INT64_MAX, true},
    {P(TK_DEVICE_COPY_ENGINES), TK__DEVICE, 1, 64, true},
    {P(TK_DEVICE_COMPUTE_ELEMS_PER_S), TK__DEVICE, 1, INT64_MAX, true},
    {P(TK_DEVICE_LAYOUT_ROWS), TK__DEVICE, 1, 1 << 20, true},
    {P(TK_DEVICE_LAYOUT_COLS), TK__DEVICE, 1, 1 << 20, true},
    {P(TK_PIPE_MODE), TK__PIPELINE, TK_MODE_SIMULATE, TK_MODE_TARGET, true},
    {P(TK_PIPE_INPUT_BUFFERS), TK__PIPELINE, 1, TK_PIPE_MAX_BUFFERS, true},
    {P(TK_PIPE_OUTPUT_BUFFERS), TK__PIPELINE, 1, 2, true},
    {P(TK_PIPE_NO_PIPELINING), TK__PIPELINE, 0, 1, true},
    {P(TK_PIPE_DETECT_RACES), TK__PIPELINE, 0, 1, true},
    {P(TK_PIPE_FAULT), TK__PIPELINE, TK_FAULT_NONE, TK_FAULT_EARLY_COPY_OUT, true},
    {P(TK_BENCH_REPEATS), TK__BENCH, 5, 1000000, true},
    {P(TK_BENCH_WARMUPS), TK__BENCH, 1, 1000, true},
    {P(TK_BENCH_INTERLEAVE), TK__BENCH, 0, 1, true},
    {P(TK_BENCH_MAX_SECONDS), TK__BENCH, 0, 86400, true},
    {P(TK_BENCH_BASELINE), TK__BENCH, 0, INT32_MAX - 1, true},
    {P(TK_COMPARE_MAX_ULP), TK__COMPARE, -1, INT64_MAX, true},
    {P(TK_CALL_PAD), TK__CALL, TK_PAD_ZERO, TK_PAD_VALUE, true},
    {P(TK_CALL_RANK), TK__CALL, 1, TK_CALL_MAX_RANK, false},
    {P(TK_CALL_STEPS), TK__CALL, 1, INT64_MAX, false},
    {P(TK_CALL_INPUTS), TK__CALL, 0, TK_CALL_MAX_OPERANDS, false},
    {P(TK_CALL_OUTPUTS), TK__CALL, 0, TK_CALL_MAX_OPERANDS, false},
    {P(TK_CALL_UNDO), TK__CALL, 0, 1, true},
    {P(TK_CALL_ROUND_STEPS), TK__CALL, 0, 1, true},
    {P(TK_COMPARE_NAN_POLICY), TK__COMPARE, TK_NAN_MATCH, TK_NAN_IGNORE, true},
};
#undef P

static int tk__param_find(int param)
{
    for (size_t i = 0; i < sizeof tk__params / sizeof *tk__params; i++)
        if (tk__params[i].param == param)
            return (int)i;
    return -1;
}

int tk_param_bounds(int param, int64_t *lo, int64_t *hi)
{
    int i = tk__param_find(param);
    if (!lo || !hi)
        return tk__fail(TK_EINVAL, "tk_param_bounds: lo and hi must not be NULL");
    if (i < 0)
        return tk__fail(TK_EINVAL, "tk_param_bounds: unknown parameter %d", param);
    *lo = tk__params[i].lo;
    *hi = tk__params[i].hi;
    return TK_OK;
}

int tk__param_set(const tk__settable *s, void *h, int param, int64_t value)
{
    if (!h)
        return tk__fail(TK_EINVAL, "%s: %s is NULL", s->fn, s->noun);
    int rc = s->busy ? s->busy(s->fn, h) : TK_OK;
    if (rc)
        return rc;
    int i = tk__param_find(param);
    if (i < 0 || tk__params[i].owner != s->owner)
        return tk__fail(TK_EINVAL, "%s: %d is not a parameter of a %s", s->fn, param,
                        s->noun);
    if (!tk__params[i].writable)
        return tk__fail(TK_EINVAL, "%s: %s is read-only", s->fn, tk__params[i].name);
    if (s->applies && (rc = s->applies(h, param)))
        return rc;
    if (value < tk__params[i].lo || value > tk__params[i].hi)
        return tk__fail(TK_ERANGE, "%s: %s = %lld is outside [%lld, %lld]", s->fn,
                        tk__params[i].name, (long long)value,
                        (long long)tk__params[i].lo, (long long)tk__params[i].hi);
    if (s->admit && (rc = s->admit(h, param, value)))
        return rc;
    s->store(h, param, value);
    if (s->results >= 0)
        *(bool *)((char *)h + s->results) = false;
    return TK_OK;
}
