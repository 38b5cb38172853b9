/* bench_call.c - the general call's machinery against the same blocked
 * loops written directly.
 *
 * The requirement: a 1024x1024x1024 f32 matmul through tk_call_run, grid
 * (i, j, k) of 128x128x128 blocks with a plain C body (the accumulator is
 * the resident output block), takes at most 1.2x the same three blocked
 * loops over the matrices themselves, timed interleaved in the same run
 * (median of 7).  This measures tk_call's staging, not a BLAS.  And the
 * same call through the pipeline simulator on "TPU v5 lite", hazard
 * detection on, takes at most 2x the host run.
 *
 * Then the seed's axpy on 4096x4096 f32 and bf16 in 8x128 blocks through
 * the call, a plain C body on the f32 blocks, against tk_kernel_run's
 * built-in axpy (TK_TAIL_MASK), with and without the undo copy
 * (TK_CALL_UNDO).  The goal is 1.05x; it is not met yet, and the limits
 * below only guard what the call reaches today: on an AVX-512 AMD EPYC
 * (Zen 5), f32 3.5x to 4.2x with the undo copy and 1.9x to 2.3x without,
 * bf16 4.4x to 4.7x and 3.0x to 3.4x (bf16 without undo read 4.5 to 4.95
 * before elementwise stretches shared panels). */
#include "bench.h"

#include <stdint.h>
#include <tilekern.h>

#define S 1024
#define BS 128
#define REPS 7
#define LIMIT 1.2
#define PIPE_LIMIT 2.0
#define AXPY_S 4096
#define AXPY_REPS 15
#define AXPY_LIMIT 6.5          /* with the undo copy */
#define AXPY_NO_UNDO_LIMIT 4.5

static float *x, *y, *direct;
static tk_matrix *in[2], *out;
static tk_call *call;
static tk_pipeline *pipe;

/* o += a b on one block: the loops both sides share, compiled once (not
 * inlined into either side), so the ratio is the call's machinery and not
 * two code generations of the same loops (1.0 to 1.5 apart with inlining). */
__attribute__((noinline)) static void block_mma(float *o, int64_t ldo, const float *a,
                                                int64_t lda, const float *b, int64_t ldb)
{
    for (int64_t r = 0; r < BS; r++)
        for (int64_t k = 0; k < BS; k++) {
            float av = a[r * lda + k];
            for (int64_t c = 0; c < BS; c++)
                o[r * ldo + c] += av * b[k * ldb + c];
        }
}

static void run_direct(void *ctx)
{
    (void)ctx;
    static float acc[BS * BS];
    for (int64_t i = 0; i < S / BS; i++)
        for (int64_t j = 0; j < S / BS; j++) {
            memset(acc, 0, sizeof acc);
            for (int64_t k = 0; k < S / BS; k++)
                block_mma(acc, BS, x + i * BS * S + k * BS, S, y + k * BS * S + j * BS, S);
            for (int64_t r = 0; r < BS; r++)
                memcpy(direct + (i * BS + r) * S + j * BS, acc + r * BS, sizeof(float) * BS);
        }
}

static int body(void *user, tk_block *const *b, int n)
{
    (void)user;
    (void)n;
    tk_block *o = b[2];
    if (o->grid[2] == 0)
        memset(o->data, 0, sizeof(float) * BS * BS);
    block_mma(o->data, o->ld, b[0]->data, b[0]->ld, b[1]->data, b[1]->ld);
    return 0;
}

static void run_call(void *ctx)
{
    (void)ctx;
    if (tk_call_run(call, 2, (const tk_matrix *const *)in, 1, &out) != TK_OK) {
        fprintf(stderr, "bench_call: %s\n", tk_last_error_message());
        exit(1);
    }
}

static void run_pipeline(void *ctx)
{
    (void)ctx;
    if (tk_pipeline_run_call(pipe, 2, (const tk_matrix *const *)in, 1, &out) != TK_OK) {
        fprintf(stderr, "bench_call: %s\n", tk_last_error_message());
        exit(1);
    }
}

/* out = 2x + y on one block of each operand, as the seed's contract. */
static int axpy_body(void *user, tk_block *const *b, int n)
{
    (void)user;
    (void)n;
    const tk_block *bx = b[0], *by = b[1];
    tk_block *o = b[2];
    for (int64_t r = 0; r < o->valid_rows; r++) {
        const float *xr = bx->data + r * bx->ld, *yr = by->data + r * by->ld;
        float *orow = o->data + r * o->ld;
        for (int64_t c = 0; c < o->valid_cols; c++) {
            float p = 2.0f * xr[c];
            orow[c] = p + yr[c];
        }
    }
    return 0;
}

struct axpy_rig {
    tk_call *call;
    tk_kernel *k;
    tk_tiling *t;
    tk_matrix *in[2], *out;
};

static void run_axpy_call(void *ctx)
{
    struct axpy_rig *g = ctx;
    if (tk_call_run(g->call, 2, (const tk_matrix *const *)g->in, 1, &g->out) != TK_OK) {
        fprintf(stderr, "bench_call: %s\n", tk_last_error_message());
        exit(1);
    }
}

static void run_axpy_kernel(void *ctx)
{
    struct axpy_rig *g = ctx;
    if (tk_kernel_run(g->k, g->t, (const tk_matrix *const *)g->in, g->out) != TK_OK) {
        fprintf(stderr, "bench_call: %s\n", tk_last_error_message());
        exit(1);
    }
}

/* The axpy lines of one dtype; 0 when both are within their limits. */
static int bench_axpy(int dtype, const float *src)
{
    struct axpy_rig g[3] = {{0}};  /* call with undo, call without, kernel */
    int64_t grid[2] = {AXPY_S / 8, AXPY_S / 128};
    for (int i = 0; i < 3; i++) {
        if (tk_matrix_from_f32(&g[i].in[0], dtype, AXPY_S, AXPY_S, src, AXPY_S) ||
            tk_matrix_from_f32(&g[i].in[1], dtype, AXPY_S, AXPY_S, src + 1, AXPY_S) ||
            tk_matrix_create(&g[i].out, dtype, AXPY_S, AXPY_S)) {
            fprintf(stderr, "bench_call: %s\n", tk_last_error_message());
            exit(1);
        }
        if (i == 2 ? tk_kernel_axpy(&g[i].k, 2.0f) ||
                         tk_tiling_create(&g[i].t, AXPY_S, AXPY_S, 8, 128) ||
                         tk_tiling_set(g[i].t, TK_TILING_TAIL, TK_TAIL_MASK)
                   : tk_call_create(&g[i].call, 2, grid, axpy_body, NULL) ||
                         tk_call_add_input(g[i].call, dtype, AXPY_S, AXPY_S, 8, 128, NULL) < 0 ||
                         tk_call_add_input(g[i].call, dtype, AXPY_S, AXPY_S, 8, 128, NULL) < 0 ||
                         tk_call_add_output(g[i].call, dtype, AXPY_S, AXPY_S, 8, 128, NULL) < 0 ||
                         tk_call_set(g[i].call, TK_CALL_UNDO, i == 0)) {
            fprintf(stderr, "bench_call: %s\n", tk_last_error_message());
            exit(1);
        }
    }
    bench_fn fns[3] = {run_axpy_call, run_axpy_call, run_axpy_kernel};
    void *ctx[3] = {&g[0], &g[1], &g[2]};
    double med[3];
    bench_interleaved(fns, ctx, 3, AXPY_REPS, med);
    size_t bytes = (size_t)(AXPY_S * AXPY_S * tk_dtype_size(dtype));
    int bad = 0;
    for (int i = 0; i < 2; i++) {
        if (memcmp(tk_matrix_data(g[i].out), tk_matrix_data(g[2].out), bytes)) {
            fprintf(stderr, "bench_call: the call's axpy differs from tk_kernel_run's\n");
            bad = 1;
        }
        double ratio = med[i] / med[2], limit = i ? AXPY_NO_UNDO_LIMIT : AXPY_LIMIT;
        printf("call_axpy_%s_%d_8x128%s_vs_kernel_run: %.2f\n", tk_dtype_name(dtype), AXPY_S,
               i ? "_no_undo" : "", ratio);
        if (ratio > limit) {
            fprintf(stderr, "bench_call: %.2f is over the %.2fx limit\n", ratio, limit);
            bad = 1;
        }
    }
    for (int i = 0; i < 3; i++) {
        tk_call_destroy(g[i].call);
        tk_kernel_destroy(g[i].k);
        tk_tiling_destroy(g[i].t);
        tk_matrix_destroy(g[i].in[0]);
        tk_matrix_destroy(g[i].in[1]);
        tk_matrix_destroy(g[i].out);
    }
    return bad;
}

int main(void)
{
    bench_build_line("bench_call");
    x = malloc(sizeof(float) * S * S);
    y = malloc(sizeof(float) * S * S);
    direct = malloc(sizeof(float) * S * S);
    if (!x || !y || !direct) {
        fprintf(stderr, "bench_call: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < S * S; i++) {
        x[i] = (float)(i % 7 - 3);  /* small integers: both sums exact */
        y[i] = (float)(i % 5 - 2);
    }
    static const int64_t xmap[8] = {1, 0, 0, 0, 0, 0, 1, 0}, ymap[8] = {0, 0, 1, 0, 0, 1, 0, 0},
                         omap[8] = {1, 0, 0, 0, 0, 1, 0, 0};
    int64_t grid[3] = {S / BS, S / BS, S / BS};
    tk_device *dev = NULL;
    if (tk_matrix_wrap(&in[0], TK_DTYPE_F32, S, S, S, x) ||
        tk_matrix_wrap(&in[1], TK_DTYPE_F32, S, S, S, y) ||
        tk_matrix_create(&out, TK_DTYPE_F32, S, S) ||
        tk_call_create(&call, 3, grid, body, NULL) ||
        tk_call_add_input(call, TK_DTYPE_F32, S, S, BS, BS, xmap) < 0 ||
        tk_call_add_input(call, TK_DTYPE_F32, S, S, BS, BS, ymap) < 0 ||
        tk_call_add_output(call, TK_DTYPE_F32, S, S, BS, BS, omap) < 0 ||
        tk_device_simulated(&dev, "TPU v5 lite") || tk_pipeline_create_call(&pipe, call, dev)) {
        fprintf(stderr, "bench_call: %s\n", tk_last_error_message());
        return 1;
    }
    bench_fn fns[3] = {run_call, run_direct, run_pipeline};
    void *ctx[3] = {NULL, NULL, NULL};
    double med[3];
    bench_interleaved(fns, ctx, 3, REPS, med);
    if (memcmp(tk_matrix_data(out), direct, sizeof(float) * S * S)) {
        fprintf(stderr, "bench_call: the call and the direct loops disagree\n");
        return 1;
    }
    double ratio = med[0] / med[1];
    printf("call_matmul_f32_1024_vs_direct_blocked: %.2f\n", ratio);
    if (ratio > LIMIT)
        fprintf(stderr, "bench_call: %.2f is over the %.2fx limit\n", ratio, LIMIT);
    double pipe_ratio = med[2] / med[0];
    printf("pipeline_call_matmul_f32_1024_vs_host_call: %.2f\n", pipe_ratio);
    if (pipe_ratio > PIPE_LIMIT)
        fprintf(stderr, "bench_call: %.2f is over the %.2fx limit\n", pipe_ratio, PIPE_LIMIT);
    tk_pipeline_destroy(pipe);
    tk_device_destroy(dev);
    tk_call_destroy(call);
    tk_matrix_destroy(in[0]);
    tk_matrix_destroy(in[1]);
    tk_matrix_destroy(out);
    free(x);
    free(y);
    free(direct);

    float *src = malloc(sizeof(float) * (AXPY_S * AXPY_S + 1));
    if (!src) {
        fprintf(stderr, "bench_call: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i <= AXPY_S * AXPY_S; i++)
        src[i] = (float)((i * 7919) % 1000) / 37.0f;
    int axpy_bad = bench_axpy(TK_DTYPE_F32, src) | bench_axpy(TK_DTYPE_BF16, src);
    free(src);
    return ratio <= LIMIT && pipe_ratio <= PIPE_LIMIT && !axpy_bad ? 0 : 1;
}
