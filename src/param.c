/* param.c - one table of every integer parameter and its legal range. */
#include "internal.h"

static const struct {
    int param;
    int64_t lo, hi;
    bool writable;
} tk__params[] = {
    {TK_TILING_TAIL, TK_TAIL_PAD, TK_TAIL_SHIFT_INWARDS, true},
    {TK_TILING_GRID_ROWS, 1, INT64_MAX, false},
    {TK_TILING_GRID_COLS, 1, INT64_MAX, false},
    {TK_TILING_TILES, 1, INT64_MAX, false},
    {TK_TILING_PADDED_ROWS, 1, INT64_MAX, false},
    {TK_TILING_PADDED_COLS, 1, INT64_MAX, false},
    {TK_TILING_PADDED_ELEMENTS, 1, INT64_MAX, false},
    {TK_TILING_EXTRA_ELEMENTS, 0, INT64_MAX, false},
    {TK_TILING_ROWS, 1, INT64_MAX, false},
    {TK_TILING_COLS, 1, INT64_MAX, false},
    {TK_TILING_BLOCK_ROWS, 1, INT64_MAX, false},
    {TK_TILING_BLOCK_COLS, 1, INT64_MAX, false},
    {TK_KERNEL_BODY, TK_BODY_ELEMENTWISE, TK_BODY_BLOCKWISE, true},
    {TK_KERNEL_INPUTS, 1, TK_KERNEL_MAX_INPUTS, false},
    {TK_KERNEL_ARITH, TK_ARITH_NUMPY, TK_ARITH_XLA, true},
    {TK_KERNEL_ACCUM, TK_DTYPE_F32, TK_DTYPE_F16, true},
    {TK_KERNEL_UNDO, 0, 1, true},
    {TK_KERNEL_THREADS, 0, TK_KERNEL_MAX_THREADS, true},
    {TK_KERNEL_THREAD_SAFE, 0, 1, true},
    {TK_DEVICE_ONCHIP_BYTES, 1, INT64_MAX, true},
    {TK_DEVICE_ONCHIP_LIMIT_BYTES, 1, INT64_MAX, true},
    {TK_DEVICE_HBM_BYTES_PER_S, 1, INT64_MAX, true},
    {TK_DEVICE_COPY_LATENCY_NS, 0, INT64_MAX, true},
    {TK_DEVICE_COPY_ENGINES, 1, 64, true},
    {TK_DEVICE_COMPUTE_ELEMS_PER_S, 1, INT64_MAX, true},
    {TK_DEVICE_LAYOUT_ROWS, 1, 1 << 20, true},
    {TK_DEVICE_LAYOUT_COLS, 1, 1 << 20, true},
    {TK_PIPE_MODE, TK_MODE_SIMULATE, TK_MODE_TARGET, true},
    {TK_PIPE_INPUT_BUFFERS, 1, TK_PIPE_MAX_BUFFERS, true},
    {TK_PIPE_OUTPUT_BUFFERS, 1, 2, true},
    {TK_PIPE_NO_PIPELINING, 0, 1, true},
    {TK_PIPE_DETECT_RACES, 0, 1, true},
    {TK_PIPE_FAULT, TK_FAULT_NONE, TK_FAULT_EARLY_COPY_OUT, true},
    {TK_BENCH_REPEATS, 5, 1000000, true},
    {TK_BENCH_WARMUPS, 1, 1000, true},
    {TK_BENCH_INTERLEAVE, 0, 1, true},
    {TK_BENCH_MAX_SECONDS, 0, 86400, true},
    {TK_BENCH_BASELINE, 0, INT32_MAX - 1, true},
    {TK_COMPARE_MAX_ULP, -1, INT64_MAX, true},
    {TK_CALL_PAD, TK_PAD_ZERO, TK_PAD_VALUE, true},
    {TK_CALL_RANK, 1, TK_CALL_MAX_RANK, false},
    {TK_CALL_STEPS, 1, INT64_MAX, false},
    {TK_CALL_INPUTS, 0, TK_CALL_MAX_OPERANDS, false},
    {TK_CALL_OUTPUTS, 0, TK_CALL_MAX_OPERANDS, false},
    {TK_COMPARE_NAN_POLICY, TK_NAN_MATCH, TK_NAN_IGNORE, true},
};

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
        return tk__fail(TK_EINVAL, "unknown parameter %d", param);
    *lo = tk__params[i].lo;
    *hi = tk__params[i].hi;
    return TK_OK;
}

int tk__param_check(const char *handle, int param, int64_t value)
{
    int i = tk__param_find(param);
    if (i < 0)
        return tk__fail(TK_EINVAL, "%s: unknown parameter %d", handle, param);
    if (!tk__params[i].writable)
        return tk__fail(TK_EINVAL, "%s: parameter %d is read-only", handle, param);
    if (value < tk__params[i].lo || value > tk__params[i].hi)
        return tk__fail(TK_ERANGE, "%s: parameter %d = %lld is outside [%lld, %lld]",
                        handle, param, (long long)value,
                        (long long)tk__params[i].lo, (long long)tk__params[i].hi);
    return TK_OK;
}
