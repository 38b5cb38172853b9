/* bench_kernel.c - tk_kernel_run, the complete wrapper (logical inputs in,
 * logical output out), against a plain fused loop compiled here with -O3.
 * Prints `name: ratio` (wrapper median / fused median, 11 interleaved runs)
 * and, beside pad and shift-inwards, the bytes each run allocates. */
#include "bench.h"

#include <stdbool.h>
#include <stdint.h>
#include <tilekern.h>

#define REPS 11
#define ALPHA 2.0f

/* ---- the baselines: what a user would write by hand ----------------------------- */

struct fused {
    int dtype;
    size_t n;
    const void *x, *y;
    void *out;
};

static void fused_f32(const float *restrict x, const float *restrict y, float *restrict out,
                      size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = ALPHA * x[i] + y[i];
}

/* The same rounding rule as tk_bf16_from_f32: nearest even, quiet NaN. */
static void fused_bf16(const uint16_t *restrict x, const uint16_t *restrict y,
                       uint16_t *restrict out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t ux = (uint32_t)x[i] << 16, uy = (uint32_t)y[i] << 16, u;
        float fx, fy, f;
        memcpy(&fx, &ux, 4);
        memcpy(&fy, &uy, 4);
        f = ALPHA * fx + fy;
        memcpy(&u, &f, 4);
        uint16_t r = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
        out[i] = (u & 0x7FFFFFFFu) > 0x7F800000u ? (uint16_t)(((u >> 16) & 0x8000u) | 0x7FC0u) : r;
    }
}

static void run_fused(void *ctx)
{
    struct fused *f = ctx;
    if (f->dtype == TK_DTYPE_F32)
        fused_f32(f->x, f->y, f->out, f->n);
    else
        fused_bf16(f->x, f->y, f->out, f->n);
}

/* ---- the library --------------------------------------------------------------------- */

struct wrapped {
    tk_kernel *k;
    tk_tiling *t;
    const tk_matrix *in[2];
    tk_matrix *out;
};

static void run_wrapped(void *ctx)
{
    struct wrapped *w = ctx;
    int rc = tk_kernel_run(w->k, w->t, w->in, w->out);
    if (rc) {
        fprintf(stderr, "bench_kernel: %s: %s\n", tk_status_name(rc), tk_last_error_message());
        exit(1);
    }
}

static int axpy_body(void *user, int64_t rows, int64_t cols, int64_t ld,
                     const float *const *in, float *out)
{
    (void)user;
    for (int64_t r = 0; r < rows; r++) {
        const float *restrict x = in[0] + r * ld, *restrict y = in[1] + r * ld;
        float *restrict o = out + r * ld;
        for (int64_t c = 0; c < cols; c++)
            o[c] = ALPHA * x[c] + y[c];
    }
    return 0;
}

static void check(int rc)
{
    if (rc) {
        fprintf(stderr, "bench_kernel: %s: %s\n", tk_status_name(rc), tk_last_error_message());
        exit(1);
    }
}

static tk_matrix *matrix(int dtype, int64_t rows, int64_t cols, uint64_t seed)
{
    size_t n = (size_t)(rows * cols);
    float *src = malloc(n * sizeof *src);
    if (!src) {
        fprintf(stderr, "bench_kernel: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        src[i] = (float)((double)(seed >> 11) / 9007199254740992.0 * 8.0 - 4.0);
    }
    tk_matrix *m;
    check(tk_matrix_from_f32(&m, dtype, rows, cols, src, cols));
    free(src);
    return m;
}

static tk_kernel *kernel(int body_kind, bool custom)
{
    tk_kernel *k;
    if (custom)
        check(tk_kernel_custom(&k, 2, axpy_body, NULL));
    else
        check(tk_kernel_axpy(&k, ALPHA));
    check(tk_kernel_set(k, TK_KERNEL_BODY, body_kind));
    return k;
}

static tk_tiling *tiling(int64_t rows, int64_t cols, int64_t br, int64_t bc, int tail)
{
    tk_tiling *t;
    check(tk_tiling_create(&t, rows, cols, br, bc));
    check(tk_tiling_set(t, TK_TILING_TAIL, tail));
    return t;
}

/* Bytes a run of the built-in axpy allocates, by the rule in tk_kernel(3):
 * pad makes zero-padded copies of both inputs and the output; a blockwise
 * body stages through one f32 block per input when a tile cannot run in
 * place (bfloat16, or edge tiles), the built-in body's result overwriting
 * staged input 0; elementwise mask and shift-inwards run in place. */
static int64_t alloc_bytes(const tk_tiling *t, int dtype, int body_kind)
{
    int64_t tail, padded, rows, cols, br, bc;
    tk_tiling_get(t, TK_TILING_TAIL, &tail);
    tk_tiling_get(t, TK_TILING_PADDED_ELEMENTS, &padded);
    tk_tiling_get(t, TK_TILING_ROWS, &rows);
    tk_tiling_get(t, TK_TILING_COLS, &cols);
    tk_tiling_get(t, TK_TILING_BLOCK_ROWS, &br);
    tk_tiling_get(t, TK_TILING_BLOCK_COLS, &bc);
    int64_t bytes = 0, es = dtype == TK_DTYPE_F32 ? 4 : 2;
    bool edges = tail != TK_TAIL_PAD && (rows % br || cols % bc);
    if (tail == TK_TAIL_PAD)
        bytes += 3 * padded * es;
    if (body_kind == TK_BODY_BLOCKWISE && (dtype == TK_DTYPE_BF16 || edges))
        bytes += 2 * br * bc * 4;
    return bytes;
}

/* Say on stderr when a ratio is over its limit; 1 if so. */
static int over_limit(const char *name, const char *tag, double ratio, double limit)
{
    if (limit <= 0 || ratio <= limit)
        return 0;
    fprintf(stderr, "bench_kernel: %s_%s: %.2f is over the %.2fx limit\n", name, tag, ratio,
            limit);
    return 1;
}

int main(void)
{
    int over = 0;
    static const int64_t shapes[][2] = {{4096, 4096}, {4095, 4093}};
    static const int64_t blocks[][2] = {{8, 128}, {256, 512}};
    for (int s = 0; s < 2; s++)
        for (int d = 0; d < 2; d++) {
            int dtype = d ? TK_DTYPE_BF16 : TK_DTYPE_F32;
            const char *dn = d ? "bf16" : "f32";
            int64_t rows = shapes[s][0], cols = shapes[s][1];
            tk_matrix *x = matrix(dtype, rows, cols, 1), *y = matrix(dtype, rows, cols, 2);
            tk_matrix *out;
            check(tk_matrix_create(&out, dtype, rows, cols));
            struct fused f = {dtype, (size_t)(rows * cols), tk_matrix_data(x),
                              tk_matrix_data(y), tk_matrix_data(out)};
            for (int b = 0; b < 2; b++) {
                int64_t br = blocks[b][0], bc = blocks[b][1];
                struct wrapped w[4];
                const int tails[4] = {TK_TAIL_MASK, TK_TAIL_MASK, TK_TAIL_PAD,
                                      TK_TAIL_SHIFT_INWARDS};
                const int kinds[4] = {TK_BODY_ELEMENTWISE, TK_BODY_BLOCKWISE,
                                      TK_BODY_ELEMENTWISE, TK_BODY_ELEMENTWISE};
                const char *names[4] = {"mask_elementwise", "mask_blockwise",
                                        "pad_elementwise", "shift_inwards_elementwise"};
                /* Limits against the fused loop; 0: printed beside, no limit. */
                const double limits[4] = {1.10, 1.5, 0, 0};
                bench_fn fns[5] = {run_fused};
                void *ctx[5] = {&f};
                for (int i = 0; i < 4; i++) {
                    w[i] = (struct wrapped){kernel(kinds[i], false),
                                            tiling(rows, cols, br, bc, tails[i]), {x, y}, out};
                    fns[i + 1] = run_wrapped;
                    ctx[i + 1] = &w[i];
                }
                double med[5];
                bench_interleaved(fns, ctx, 5, REPS, med);
                char tag[64];
                snprintf(tag, sizeof tag, "%s_%lldx%lld_b%lldx%lld", dn, (long long)rows,
                         (long long)cols, (long long)br, (long long)bc);
                for (int i = 0; i < 4; i++) {
                    double ratio = med[i + 1] / med[0];
                    printf("kernel_%s_%s: %.2f\n", names[i], tag, ratio);
                    over += over_limit(names[i], tag, ratio, limits[i]);
                    if (i)
                        printf("kernel_%s_%s_alloc_bytes: %lld\n", names[i], tag,
                               (long long)alloc_bytes(w[i].t, dtype, kinds[i]));
                    tk_kernel_destroy(w[i].k);
                    tk_tiling_destroy(w[i].t);
                }
                fflush(stdout);
            }

            /* A custom elementwise body through the same machinery, against
             * the built-in axpy (4096x4096 f32 is the target). */
            if (dtype == TK_DTYPE_F32) {
                struct wrapped builtin = {kernel(TK_BODY_ELEMENTWISE, false),
                                          tiling(rows, cols, 8, 128, TK_TAIL_MASK), {x, y}, out};
                struct wrapped custom = {kernel(TK_BODY_ELEMENTWISE, true), builtin.t, {x, y},
                                         out};
                bench_fn fns[3] = {run_fused, run_wrapped, run_wrapped};
                void *ctx[3] = {&f, &builtin, &custom};
                double med[3];
                bench_interleaved(fns, ctx, 3, REPS, med);
                char tag[32];
                snprintf(tag, sizeof tag, "%s_%lldx%lld", dn, (long long)rows, (long long)cols);
                printf("kernel_custom_vs_builtin_elementwise_%s: %.2f\n", tag, med[2] / med[1]);
                /* The target is stated for 4096x4096 f32. */
                if (rows == 4096)
                    over += over_limit("custom_vs_builtin_elementwise", tag, med[2] / med[1],
                                       1.3);
                printf("kernel_custom_elementwise_%s_%lldx%lld_undo_bytes: %lld\n", dn,
                       (long long)rows, (long long)cols, (long long)(rows * cols * 4));
                tk_kernel_destroy(builtin.k);
                tk_kernel_destroy(custom.k);
                tk_tiling_destroy(builtin.t);
            }
            tk_matrix_destroy(x);
            tk_matrix_destroy(y);
            tk_matrix_destroy(out);
        }
    return over ? 1 : 0;
}
