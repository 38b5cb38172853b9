/* test_kernel.c - tk_kernel and tk_kernel_run: every tail strategy and body
 * kind against an independent untiled loop, bit for bit. */
#if defined(__linux__)
#define _GNU_SOURCE   /* sched_setaffinity: TK_KERNEL_THREADS 0 under a pin */
#include <errno.h>
#include <sched.h>
#endif
#include "tk_test.h"

#include <math.h>

#include <criterion/parameterized.h>
#include <dirent.h>
#include <fenv.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- the independent reference -------------------------------------------------
 * Round to nearest even written from the definition (not the library's
 * add-and-shift form): keep the high half, round up when the dropped half
 * is above one half, or exactly one half with an odd kept half. */
static uint16_t ref_bf16(float f)
{
    uint32_t u = tkt_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (u & 0x80000000u) ? 0xFFC0 : 0x7FC0;
    uint32_t hi = u >> 16, lo = u & 0xFFFFu;
    if (lo > 0x8000u || (lo == 0x8000u && (hi & 1u)))
        hi++;
    return (uint16_t)hi;
}
static float ref_f32(uint16_t b) { return tkt_float((uint32_t)b << 16); }

/* A stored element promoted to f32, read through the public accessors. */
static float stored(const tk_matrix *m, int64_t r, int64_t c)
{
    size_t at = (size_t)(r * tk_matrix_row_stride(m) + c);
    if (tk_matrix_dtype(m) == TK_DTYPE_F32)
        return ((const float *)tk_matrix_data(m))[at];
    return ref_f32(((const uint16_t *)tk_matrix_data(m))[at]);
}

/* The stored bits of element (r, c), widened. */
static uint32_t bits_at(const tk_matrix *m, int64_t r, int64_t c)
{
    size_t at = (size_t)(r * tk_matrix_row_stride(m) + c);
    if (tk_matrix_dtype(m) == TK_DTYPE_F32)
        return tkt_bits(((const float *)tk_matrix_data(m))[at]);
    return ((const uint16_t *)tk_matrix_data(m))[at];
}

/* The contract's result bits for one f32 value: cast once to dtype. */
static uint32_t cast_bits(int dtype, float v)
{
    return dtype == TK_DTYPE_F32 ? tkt_bits(v) : ref_bf16(v);
}

/* Untiled reference for alpha*x + y, each operation separately rounded. */
static uint32_t *oracle_axpy(const tk_matrix *x, const tk_matrix *y, float alpha)
{
    int64_t rows = tk_matrix_rows(x), cols = tk_matrix_cols(x);
    uint32_t *want = malloc((size_t)(rows * cols) * sizeof *want);
    cr_assert_not_null(want);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float prod = alpha * stored(x, r, c);
            float sum = prod + stored(y, r, c);
            want[r * cols + c] = cast_bits(tk_matrix_dtype(x), sum);
        }
    return want;
}

static void expect_bits(const tk_matrix *out, const uint32_t *want, const char *what)
{
    int64_t rows = tk_matrix_rows(out), cols = tk_matrix_cols(out);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            if (bits_at(out, r, c) != want[r * cols + c])
                cr_assert_fail("%s: %lldx%lld %s differs at (%lld, %lld): got 0x%08x, "
                               "want 0x%08x", what, (long long)rows, (long long)cols,
                               tk_dtype_name(tk_matrix_dtype(out)), (long long)r,
                               (long long)c, bits_at(out, r, c), want[r * cols + c]);
}

/* A matrix of dtype holding `data` represented in it, row stride >= cols. */
static tk_matrix *make(int dtype, int64_t rows, int64_t cols, int64_t stride, uint64_t seed)
{
    size_t n = (size_t)(rows * stride);
    float *src = malloc(n * sizeof *src);
    cr_assert_not_null(src);
    tkt_fill(src, n, seed);
    tk_matrix *m;
    if (stride == cols) {
        tkt_expect_status(tk_matrix_from_f32(&m, dtype, rows, cols, src, cols), TK_OK);
    } else {
        size_t es = (size_t)tk_dtype_size(dtype);
        void *buf = malloc(n * es);
        cr_assert_not_null(buf);
        if (dtype == TK_DTYPE_F32)
            memcpy(buf, src, n * es);
        else
            for (size_t i = 0; i < n; i++)
                ((uint16_t *)buf)[i] = ref_bf16(src[i]);
        tkt_expect_status(tk_matrix_wrap(&m, dtype, rows, cols, stride, buf), TK_OK);
    }
    free(src);
    return m;
}

/* Free what make() wrapped, then the handle. */
static void unmake(tk_matrix *m)
{
    if (tk_matrix_row_stride(m) != tk_matrix_cols(m))
        free(tk_matrix_data(m));
    tk_matrix_destroy(m);
}

/* From the first element to the last, row gaps included. */
static size_t storage_bytes(const tk_matrix *m)
{
    return (size_t)(((tk_matrix_rows(m) - 1) * tk_matrix_row_stride(m) + tk_matrix_cols(m)) *
                    tk_dtype_size(tk_matrix_dtype(m)));
}

/* Snapshot of a matrix's whole storage, row gaps included. */
static void *snapshot(const tk_matrix *m)
{
    void *s = malloc(storage_bytes(m));
    cr_assert_not_null(s);
    memcpy(s, tk_matrix_data(m), storage_bytes(m));
    return s;
}
static void expect_unchanged(const tk_matrix *m, const void *snap, const char *what)
{
    cr_assert(memcmp(tk_matrix_data(m), snap, storage_bytes(m)) == 0,
              "%s: the output buffer changed", what);
}

/* Custom bodies.  Each checks what the executor promises it and fails the
 * run (non-zero) otherwise, so a broken promise cannot pass unnoticed. */
struct body_ctx {
    float alpha;
    int64_t block_rows, block_cols;   /* > 0: a blockwise body expects these */
    long calls, fail_at;              /* fail_at < 0: never fail */
};

static int axpy_cb(void *user, int64_t rows, int64_t cols, int64_t ld,
                   const float *const *in, float *out)
{
    struct body_ctx *c = user;
    long call = c->calls++;
    if (call == c->fail_at)
        return 7;
    if (rows < 1 || cols < 1 || ld < cols)
        return 100;
    if (c->block_rows > 0 && (rows != c->block_rows || cols != c->block_cols))
        return 101;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++) {
            float prod = c->alpha * in[0][r * ld + j];
            out[r * ld + j] = prod + in[1][r * ld + j];
        }
    return 0;
}

/* ---- construction and parameters ------------------------------------------------ */

Test(kernel, constructors_and_parameters)
{
    tk_kernel *k = (tk_kernel *)&k;
    int64_t v = -1;
    tkt_expect_status(tk_kernel_axpy(&k, 2.0f), TK_OK);
    tkt_expect_status(tk_kernel_get(k, TK_KERNEL_BODY, &v), TK_OK);
    cr_assert_eq(v, TK_BODY_ELEMENTWISE);
    tkt_expect_status(tk_kernel_get(k, TK_KERNEL_INPUTS, &v), TK_OK);
    cr_assert_eq(v, 2);
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_BODY, TK_BODY_BLOCKWISE), TK_OK);
    tkt_expect_status(tk_kernel_get(k, TK_KERNEL_BODY, &v), TK_OK);
    cr_assert_eq(v, TK_BODY_BLOCKWISE);

    const int64_t bad_body[] = {0, 3, -1, INT64_MAX};
    for (size_t i = 0; i < sizeof bad_body / sizeof *bad_body; i++) {
        tkt_expect_status(tk_kernel_set(k, TK_KERNEL_BODY, bad_body[i]), TK_ERANGE);
        tkt_expect_status(tk_kernel_get(k, TK_KERNEL_BODY, &v), TK_OK);
        cr_assert_eq(v, TK_BODY_BLOCKWISE, "a rejected value changed the body kind");
    }
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_INPUTS, 3), TK_EINVAL);
    tkt_expect_status(tk_kernel_set(k, TK_TILING_TAIL, TK_TAIL_PAD), TK_EINVAL);
    tkt_expect_status(tk_kernel_set(NULL, TK_KERNEL_BODY, 1), TK_EINVAL);
    v = 42;
    tkt_expect_status(tk_kernel_get(k, 9999, &v), TK_EINVAL);
    cr_assert_eq(v, 42);
    tkt_expect_status(tk_kernel_get(k, TK_KERNEL_BODY, NULL), TK_EINVAL);
    tkt_expect_status(tk_kernel_get(NULL, TK_KERNEL_BODY, &v), TK_EINVAL);
    tk_kernel_destroy(k);

    struct body_ctx ctx = {.alpha = 1, .fail_at = -1};
    const int ns[] = {1, 5, TK_KERNEL_MAX_INPUTS};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        tkt_expect_status(tk_kernel_custom(&k, ns[i], axpy_cb, &ctx), TK_OK);
        tkt_expect_status(tk_kernel_get(k, TK_KERNEL_INPUTS, &v), TK_OK);
        cr_assert_eq(v, ns[i]);
        tkt_expect_status(tk_kernel_get(k, TK_KERNEL_BODY, &v), TK_OK);
        cr_assert_eq(v, TK_BODY_ELEMENTWISE, "custom bodies default to elementwise");
        tk_kernel_destroy(k);
    }
    const int bad_n[] = {0, -1, TK_KERNEL_MAX_INPUTS + 1};
    for (size_t i = 0; i < sizeof bad_n / sizeof *bad_n; i++) {
        k = (tk_kernel *)&k;
        tkt_expect_status(tk_kernel_custom(&k, bad_n[i], axpy_cb, &ctx), TK_ERANGE);
        cr_assert_null(k);
        char want[32];
        snprintf(want, sizeof want, "got %d", bad_n[i]);
        cr_assert(strstr(tk_last_error_message(), want), "%s", tk_last_error_message());
    }
    k = (tk_kernel *)&k;
    tkt_expect_status(tk_kernel_custom(&k, 2, NULL, &ctx), TK_EINVAL);
    cr_assert_null(k);
    tkt_expect_status(tk_kernel_custom(NULL, 2, axpy_cb, &ctx), TK_EINVAL);
    tkt_expect_status(tk_kernel_axpy(NULL, 2.0f), TK_EINVAL);
    tk_kernel_destroy(NULL);
}

/* ---- the shape x dtype x block x tail sweep ----------------------------------------- */

struct sweep {
    int64_t rows, cols;
    int dtype;
    int64_t br, bc;
};

ParameterizedTestParameters(kernel, sweep)
{
    static const int64_t shapes[][2] = {{1, 1},   {8, 128},  {9, 129},
                                        {17, 257}, {15, 255}, {4095, 4093}};
    static const int64_t blocks[][2] = {{2, 4}, {8, 128}, {16, 256}, {256, 512}};
    static struct sweep p[6 * 2 * 4];
    size_t n = 0;
    for (int s = 0; s < 6; s++)
        for (int d = 0; d < 2; d++)
            for (int b = 0; b < 4; b++)
                p[n++] = (struct sweep){shapes[s][0], shapes[s][1],
                                        d ? TK_DTYPE_BF16 : TK_DTYPE_F32, blocks[b][0],
                                        blocks[b][1]};
    return cr_make_param_array(struct sweep, p, n);
}

/* Every tail strategy, built-in and custom bodies, elementwise and
 * blockwise: bit-identical to the untiled reference, or refused where the
 * contract says so with the output left untouched. */
ParameterizedTest(struct sweep *p, kernel, sweep)
{
    tk_matrix *x = make(p->dtype, p->rows, p->cols, p->cols, 11);
    tk_matrix *y = make(p->dtype, p->rows, p->cols, p->cols, 12);
    tk_matrix *out = make(p->dtype, p->rows, p->cols, p->cols, 13);
    const tk_matrix *in[] = {x, y};
    const float custom_alpha = 0.7f;   /* not a power of two: products round */
    uint32_t *want_builtin = oracle_axpy(x, y, 2.0f);
    uint32_t *want_custom = oracle_axpy(x, y, custom_alpha);
    void *before = snapshot(out);
    tk_tiling *t;
    tkt_expect_status(tk_tiling_create(&t, p->rows, p->cols, p->br, p->bc), TK_OK);
    const int tails[] = {TK_TAIL_PAD, TK_TAIL_MASK, TK_TAIL_SHIFT_INWARDS};
    const bool shift_ok = p->rows >= p->br && p->cols >= p->bc;

    for (int ti = 0; ti < 3; ti++) {
        int tail = tails[ti];
        if (tail == TK_TAIL_SHIFT_INWARDS && !shift_ok) {
            tkt_expect_status(tk_tiling_set(t, TK_TILING_TAIL, tail), TK_ELAYOUT);
            continue;
        }
        tkt_expect_status(tk_tiling_set(t, TK_TILING_TAIL, tail), TK_OK);
        for (int variant = 0; variant < 4; variant++) {
            bool custom = variant >= 2, blockwise = variant % 2;
            struct body_ctx ctx = {custom_alpha, blockwise ? p->br : 0, blockwise ? p->bc : 0,
                                   0, -1};
            tk_kernel *k;
            if (custom)
                tkt_expect_status(tk_kernel_custom(&k, 2, axpy_cb, &ctx), TK_OK);
            else
                tkt_expect_status(tk_kernel_axpy(&k, 2.0f), TK_OK);
            if (blockwise)
                tkt_expect_status(tk_kernel_set(k, TK_KERNEL_BODY, TK_BODY_BLOCKWISE), TK_OK);
            memcpy(tk_matrix_data(out), before, storage_bytes(out));
            char what[96];
            snprintf(what, sizeof what, "tail %d, %s %s body, block %lldx%lld", tail,
                     custom ? "custom" : "built-in", blockwise ? "blockwise" : "elementwise",
                     (long long)p->br, (long long)p->bc);
            if (tail == TK_TAIL_SHIFT_INWARDS && blockwise) {
                tkt_expect_status(tk_kernel_run(k, t, in, out), TK_ELAYOUT);
                expect_unchanged(out, before, what);
            } else {
                tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
                expect_bits(out, custom ? want_custom : want_builtin, what);
            }
            tk_kernel_destroy(k);
        }
    }
    free(before);
    free(want_builtin);
    free(want_custom);
    tk_tiling_destroy(t);
    tk_matrix_destroy(x);
    tk_matrix_destroy(y);
    tk_matrix_destroy(out);
}

/* The seed's configuration sweep: 15x255 on blocks (8,128) and (16,256),
 * 4096 padded elements each, and the same result for each block under
 * every tail (its 2 and 3 buffers: pipeline/seed_configuration_sweep). */
Test(kernel, seed_configuration_sweep)
{
    const int64_t blocks[][2] = {{8, 128}, {16, 256}};
    for (int d = 0; d < 2; d++) {
        int dtype = d ? TK_DTYPE_BF16 : TK_DTYPE_F32;
        tk_matrix *x = make(dtype, 15, 255, 255, 8), *y = make(dtype, 15, 255, 255, 9);
        tk_matrix *out = make(dtype, 15, 255, 255, 10);
        const tk_matrix *in[] = {x, y};
        uint32_t *want = oracle_axpy(x, y, 2.0f);
        tk_kernel *k;
        tkt_expect_status(tk_kernel_axpy(&k, 2.0f), TK_OK);
        for (int b = 0; b < 2; b++) {
            tk_tiling *t;
            int64_t padded;
            tkt_expect_status(tk_tiling_create(&t, 15, 255, blocks[b][0], blocks[b][1]), TK_OK);
            tkt_expect_status(tk_tiling_get(t, TK_TILING_PADDED_ELEMENTS, &padded), TK_OK);
            cr_assert_eq(padded, 4096, "block %lldx%lld", (long long)blocks[b][0],
                         (long long)blocks[b][1]);
            for (int tail = TK_TAIL_PAD; tail <= TK_TAIL_SHIFT_INWARDS; tail++) {
                tkt_expect_status(tk_tiling_set(t, TK_TILING_TAIL, tail),
                                  tail == TK_TAIL_SHIFT_INWARDS && b ? TK_ELAYOUT : TK_OK);
                if (tail == TK_TAIL_SHIFT_INWARDS && b)
                    continue;   /* 15 rows cannot hold a 16-row block */
                tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
                expect_bits(out, want, "seed sweep");
            }
            tk_tiling_destroy(t);
        }
        free(want);
        tk_kernel_destroy(k);
        tk_matrix_destroy(x);
        tk_matrix_destroy(y);
        tk_matrix_destroy(out);
    }
}

/* ---- strided and aliased operands ----------------------------------------------- */

struct layout {
    int dtype, tail, variant;
};

ParameterizedTestParameters(kernel, strided_and_aliased)
{
    static struct layout p[2 * 3 * 4];
    size_t n = 0;
    for (int d = 0; d < 2; d++)
        for (int tail = TK_TAIL_PAD; tail <= TK_TAIL_SHIFT_INWARDS; tail++)
            for (int v = 0; v < 4; v++)
                p[n++] = (struct layout){d ? TK_DTYPE_BF16 : TK_DTYPE_F32, tail, v};
    return cr_make_param_array(struct layout, p, n);
}

/* Row strides that differ between operands (the executor stages them) and an
 * output that is input 0 (allowed except under shift-inwards, which rereads
 * what it wrote).  The gaps between rows of the output are never written. */
ParameterizedTest(struct layout *p, kernel, strided_and_aliased)
{
    const int64_t rows = 37, cols = 1100, br = 8, bc = 128;
    bool custom = p->variant >= 2, blockwise = p->variant % 2;
    struct body_ctx ctx = {0.7f, blockwise ? br : 0, blockwise ? bc : 0, 0, -1};
    tk_kernel *k;
    if (custom)
        tkt_expect_status(tk_kernel_custom(&k, 2, axpy_cb, &ctx), TK_OK);
    else
        tkt_expect_status(tk_kernel_axpy(&k, 0.7f), TK_OK);
    if (blockwise)
        tkt_expect_status(tk_kernel_set(k, TK_KERNEL_BODY, TK_BODY_BLOCKWISE), TK_OK);
    tk_tiling *t;
    tkt_expect_status(tk_tiling_create(&t, rows, cols, br, bc), TK_OK);
    tkt_expect_status(tk_tiling_set(t, TK_TILING_TAIL, p->tail), TK_OK);
    bool refused = p->tail == TK_TAIL_SHIFT_INWARDS && blockwise;

    tk_matrix *x = make(p->dtype, rows, cols, cols + 3, 21);
    tk_matrix *y = make(p->dtype, rows, cols, cols + 5, 22);
    tk_matrix *out = make(p->dtype, rows, cols, cols + 1, 23);
    const tk_matrix *in[] = {x, y};
    uint32_t *want = oracle_axpy(x, y, 0.7f);
    void *before = snapshot(out);
    if (refused) {
        tkt_expect_status(tk_kernel_run(k, t, in, out), TK_ELAYOUT);
        expect_unchanged(out, before, "blockwise shift-inwards");
    } else {
        tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
        expect_bits(out, want, "strided operands");
        /* The element after each row but the last is in the stride's gap. */
        size_t es = (size_t)tk_dtype_size(p->dtype);
        for (int64_t r = 0; r + 1 < rows; r++) {
            size_t gap = (size_t)(r * (cols + 1) + cols) * es;
            cr_assert(!memcmp((char *)tk_matrix_data(out) + gap, (char *)before + gap, es),
                      "row %lld's stride gap was written", (long long)r);
        }
    }

    /* out = x: the same matrix as input 0 and as the output. */
    const tk_matrix *self[] = {x, y};
    void *x_before = snapshot(x);
    if (p->tail == TK_TAIL_SHIFT_INWARDS) {
        tkt_expect_status(tk_kernel_run(k, t, self, x), TK_ELAYOUT);
        expect_unchanged(x, x_before, "aliased shift-inwards");
    } else {
        tkt_expect_status(tk_kernel_run(k, t, self, x), TK_OK);
        expect_bits(x, want, "output aliasing input 0");
    }
    free(x_before);
    free(before);
    free(want);
    unmake(x);
    unmake(y);
    unmake(out);
    tk_tiling_destroy(t);
    tk_kernel_destroy(k);
}

/* ---- large blocks: the built-in body's walk of strided rows from memory ------------------- */

struct large_case {
    int64_t rows, cols, br, bc, stride_pad;
    int dtype, alias;   /* alias: 0 a separate output, 1 output = x, 2 output = y */
};

ParameterizedTestParameters(kernel, large_blocks)
{
    /* Blocks of 64Ki elements, too big to be read ahead: row lengths whose
     * rows start at every offset within a cache line, a block only two
     * lines wide, edge tiles, and row strides with gaps.  Then f32 outputs
     * of 8 MiB or more, which the built-in body writes by streaming stores
     * (lines shared by two tiles written in parts): large blocks, blocks
     * read ahead, and blocks narrower than two lines. */
    static const int64_t geo[][5] = {{300, 2100, 64, 1024, 0}, {130, 1030, 128, 512, 3},
                                     {4100, 70, 2048, 32, 0},  {257, 1537, 256, 256, 1},
                                     {1030, 2100, 256, 512, 3}, {1025, 2053, 8, 128, 0},
                                     {2100, 1030, 16, 24, 0}};
    enum { n_geo = sizeof geo / sizeof geo[0] };
    static struct large_case p[n_geo * 2 * 3];
    size_t n = 0;
    for (int g = 0; g < n_geo; g++)
        for (int d = 0; d < 2; d++)
            for (int a = 0; a < 3; a++)
                p[n++] = (struct large_case){geo[g][0], geo[g][1], geo[g][2], geo[g][3],
                                             geo[g][4], d ? TK_DTYPE_BF16 : TK_DTYPE_F32, a};
    return cr_make_param_array(struct large_case, p, n);
}

ParameterizedTest(struct large_case *p, kernel, large_blocks)
{
    int64_t stride = p->cols + p->stride_pad;
    tk_matrix *x = make(p->dtype, p->rows, p->cols, stride, 91);
    tk_matrix *y = make(p->dtype, p->rows, p->cols, stride, 92);
    tk_matrix *sep = make(p->dtype, p->rows, p->cols, stride, 93);
    tk_matrix *out = p->alias == 1 ? x : p->alias == 2 ? y : sep;
    const tk_matrix *in[] = {x, y};
    uint32_t *want = oracle_axpy(x, y, -3.0f);
    tk_tiling *t;
    tk_kernel *k;
    tkt_expect_status(tk_tiling_create(&t, p->rows, p->cols, p->br, p->bc), TK_OK);
    tkt_expect_status(tk_kernel_axpy(&k, -3.0f), TK_OK);
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_BODY, TK_BODY_BLOCKWISE), TK_OK);
    tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
    char what[96];
    snprintf(what, sizeof what, "%lldx%lld blocks, output %s", (long long)p->br,
             (long long)p->bc, p->alias == 1 ? "= x" : p->alias == 2 ? "= y" : "separate");
    expect_bits(out, want, what);
    free(want);
    tk_kernel_destroy(k);
    tk_tiling_destroy(t);
    unmake(x);
    unmake(y);
    unmake(sep);
}

/* An output that overlaps an input without being it is refused. */
Test(kernel, partial_overlap_is_refused)
{
    float *buf = malloc(8 * 130 * sizeof *buf);
    cr_assert_not_null(buf);
    tkt_fill(buf, 8 * 130, 5);
    tk_matrix *x, *view, *y = make(TK_DTYPE_F32, 8, 128, 128, 6);
    tkt_expect_status(tk_matrix_wrap(&x, TK_DTYPE_F32, 8, 128, 130, buf), TK_OK);
    tkt_expect_status(tk_matrix_wrap(&view, TK_DTYPE_F32, 8, 128, 130, buf + 1), TK_OK);
    tk_tiling *t;
    tk_kernel *k;
    tkt_expect_status(tk_tiling_create(&t, 8, 128, 8, 128), TK_OK);
    tkt_expect_status(tk_kernel_axpy(&k, 2.0f), TK_OK);
    const tk_matrix *in[] = {y, x};
    void *before = snapshot(view);
    tkt_expect_status(tk_kernel_run(k, t, in, view), TK_ELAYOUT);
    cr_assert(strstr(tk_last_error_message(), "input 1"), "%s", tk_last_error_message());
    expect_unchanged(view, before, "partial overlap");
    free(before);
    tk_kernel_destroy(k);
    tk_tiling_destroy(t);
    tk_matrix_destroy(view);
    tk_matrix_destroy(x);
    tk_matrix_destroy(y);
    free(buf);
}

/* Matrices whose rows interleave in one buffer share no element: the two
 * halves of a wider array, or alternate row groups, run; rows that meet
 * across a row boundary are refused. */
Test(kernel, interleaved_rows_that_share_nothing_run)
{
    enum { R = 16, C = 256 };
    float *buf = malloc(R * 2 * C * sizeof *buf);
    cr_assert_not_null(buf);
    tk_tiling *t;
    tk_kernel *k;
    tkt_expect_status(tk_tiling_create(&t, R / 2, C / 2, 8, 128), TK_OK);
    tkt_expect_status(tk_kernel_axpy(&k, 2.0f), TK_OK);
    /* {x offset, out offset, stride} in floats, each R / 2 x C / 2. */
    static const int64_t cases[][3] = {{0, C / 2, C}, {C / 2, 0, C}, {0, C, 2 * C},
                                       {0, C + C / 2 + 72, 2 * C}};
    for (int c = 0; c < 4; c++) {
        tkt_fill(buf, R * 2 * C, 7);
        tk_matrix *x, *out, *y = make(TK_DTYPE_F32, R / 2, C / 2, C / 2, 8);
        tkt_expect_status(tk_matrix_wrap(&x, TK_DTYPE_F32, R / 2, C / 2, cases[c][2],
                                         buf + cases[c][0]), TK_OK);
        tkt_expect_status(tk_matrix_wrap(&out, TK_DTYPE_F32, R / 2, C / 2, cases[c][2],
                                         buf + cases[c][1]), TK_OK);
        const tk_matrix *in[] = {x, y};
        if (c == 3) {   /* out's row i ends 72 floats into x's row i + 1 */
            tkt_expect_status(tk_kernel_run(k, t, in, out), TK_ELAYOUT);
        } else {
            uint32_t *want = malloc(R / 2 * C / 2 * sizeof *want);
            for (int64_t r = 0; r < R / 2; r++)
                for (int64_t j = 0; j < C / 2; j++) {
                    float v = 2.0f * buf[cases[c][0] + r * cases[c][2] + j] +
                              ((const float *)tk_matrix_data(y))[r * C / 2 + j];
                    memcpy(&want[r * C / 2 + j], &v, 4);
                }
            tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
            expect_bits(out, want, "interleaved rows");
            free(want);
        }
        tk_matrix_destroy(out);
        tk_matrix_destroy(x);
        unmake(y);
    }
    tk_kernel_destroy(k);
    tk_tiling_destroy(t);
    free(buf);
}

/* ---- the seed's experiments --------------------------------------------------------- */

struct perm {
    int dtype, tail;
};

ParameterizedTestParameters(kernel, joint_row_permutation)
{
    static struct perm p[6];
    for (int i = 0; i < 6; i++)
        p[i] = (struct perm){i % 2 ? TK_DTYPE_BF16 : TK_DTYPE_F32, TK_TAIL_PAD + i / 2};
    return cr_make_param_array(struct perm, p, 6);
}

/* Permuting the rows of both inputs, then restoring the output's row order,
 * gives the identical output: rows are not coupled. */
ParameterizedTest(struct perm *p, kernel, joint_row_permutation)
{
    const int64_t rows = 9, cols = 129, order[9] = {8, 0, 7, 1, 6, 2, 5, 3, 4};
    tk_matrix *x = make(p->dtype, rows, cols, cols, 31), *y = make(p->dtype, rows, cols, cols, 32);
    tk_matrix *px, *py, *out, *pout;
    tkt_expect_status(tk_matrix_create(&px, p->dtype, rows, cols), TK_OK);
    tkt_expect_status(tk_matrix_create(&py, p->dtype, rows, cols), TK_OK);
    tkt_expect_status(tk_matrix_create(&out, p->dtype, rows, cols), TK_OK);
    tkt_expect_status(tk_matrix_create(&pout, p->dtype, rows, cols), TK_OK);
    size_t row_bytes = (size_t)(cols * tk_dtype_size(p->dtype));
    for (int64_t r = 0; r < rows; r++) {
        memcpy((char *)tk_matrix_data(px) + r * row_bytes,
               (char *)tk_matrix_data(x) + order[r] * row_bytes, row_bytes);
        memcpy((char *)tk_matrix_data(py) + r * row_bytes,
               (char *)tk_matrix_data(y) + order[r] * row_bytes, row_bytes);
    }
    tk_tiling *t;
    tk_kernel *k;
    tkt_expect_status(tk_tiling_create(&t, rows, cols, 8, 128), TK_OK);
    tkt_expect_status(tk_tiling_set(t, TK_TILING_TAIL, p->tail), TK_OK);
    tkt_expect_status(tk_kernel_axpy(&k, 2.0f), TK_OK);
    const tk_matrix *in[] = {x, y}, *pin[] = {px, py};
    tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
    tkt_expect_status(tk_kernel_run(k, t, pin, pout), TK_OK);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            cr_assert_eq(bits_at(pout, r, c), bits_at(out, order[r], c),
                         "row %lld (from %lld), col %lld", (long long)r,
                         (long long)order[r], (long long)c);
    tk_kernel_destroy(k);
    tk_tiling_destroy(t);
    tk_matrix_destroy(x);
    tk_matrix_destroy(y);
    tk_matrix_destroy(px);
    tk_matrix_destroy(py);
    tk_matrix_destroy(out);
    tk_matrix_destroy(pout);
}

/* Bodies for the rounding counterexample: x + 2^-8 + 2^-8 in f32, or with
 * the intermediate rounded to bfloat16 first. */
static const float eighth_bit = 0.00390625f;   /* 2^-8 */
static int add_twice_cb(void *user, int64_t rows, int64_t cols, int64_t ld,
                        const float *const *in, float *out)
{
    bool early = *(const bool *)user;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float first = in[0][r * ld + c] + eighth_bit;
            if (early)
                first = ref_f32(ref_bf16(first));
            out[r * ld + c] = first + eighth_bit;
        }
    return 0;
}

/* The design's counterexample through the library: rounding the
 * intermediate 1.00390625 early gives 1.0; the one final cast the library
 * applies gives 1.0078125. */
Test(kernel, early_versus_final_rounding)
{
    float one = 1.0f;
    tk_matrix *x, *out;
    tkt_expect_status(tk_matrix_from_f32(&x, TK_DTYPE_BF16, 1, 1, &one, 1), TK_OK);
    tkt_expect_status(tk_matrix_create(&out, TK_DTYPE_BF16, 1, 1), TK_OK);
    tk_tiling *t;
    tkt_expect_status(tk_tiling_create(&t, 1, 1, 1, 1), TK_OK);
    const tk_matrix *in[] = {x};
    uint16_t got[2];
    for (int early = 0; early < 2; early++) {
        bool flag = early;
        tk_kernel *k;
        tkt_expect_status(tk_kernel_custom(&k, 1, add_twice_cb, &flag), TK_OK);
        for (int tail = TK_TAIL_PAD; tail <= TK_TAIL_SHIFT_INWARDS; tail++) {
            tkt_expect_status(tk_tiling_set(t, TK_TILING_TAIL, tail), TK_OK);
            tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
            got[early] = *(const uint16_t *)tk_matrix_data(out);
            float first = one + eighth_bit;
            float want = early ? ref_f32(ref_bf16(first)) + eighth_bit : first + eighth_bit;
            cr_assert_eq(got[early], ref_bf16(want), "%s rounding: got 0x%04x, want 0x%04x",
                         early ? "early" : "final", got[early], ref_bf16(want));
        }
        tk_kernel_destroy(k);
    }
    cr_assert_eq(tkt_bits(ref_f32(got[1])), tkt_bits(1.0f));
    cr_assert_eq(tkt_bits(ref_f32(got[0])), tkt_bits(1.0078125f));
    tk_tiling_destroy(t);
    tk_matrix_destroy(x);
    tk_matrix_destroy(out);
}

/* The representation half of the same story: f32 inputs keep 1.00390625,
 * bfloat16 inputs store it as 1.0, and one library run shows each. */
Test(kernel, input_representation_changes_the_result)
{
    const float first = 1.00390625f, second = eighth_bit;
    float sum[2];
    for (int d = 0; d < 2; d++) {
        int dtype = d ? TK_DTYPE_BF16 : TK_DTYPE_F32;
        tk_matrix *a, *b, *out;
        tkt_expect_status(tk_matrix_from_f32(&a, dtype, 1, 1, &first, 1), TK_OK);
        tkt_expect_status(tk_matrix_from_f32(&b, dtype, 1, 1, &second, 1), TK_OK);
        tkt_expect_status(tk_matrix_create(&out, dtype, 1, 1), TK_OK);
        tk_kernel *k;
        tk_tiling *t;
        tkt_expect_status(tk_kernel_axpy(&k, 1.0f), TK_OK);
        tkt_expect_status(tk_tiling_create(&t, 1, 1, 8, 128), TK_OK);
        const tk_matrix *in[] = {a, b};
        tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
        sum[d] = stored(out, 0, 0);
        float want = d ? ref_f32(ref_bf16(ref_f32(ref_bf16(first)) + second)) : first + second;
        cr_assert_eq(tkt_bits(sum[d]), tkt_bits(want));
        tk_kernel_destroy(k);
        tk_tiling_destroy(t);
        tk_matrix_destroy(a);
        tk_matrix_destroy(b);
        tk_matrix_destroy(out);
    }
    cr_assert_eq(tkt_bits(sum[0]), tkt_bits(1.0078125f));
    cr_assert_eq(tkt_bits(sum[1]), tkt_bits(1.0f));
}

/* ---- a body that looks across its block ----------------------------------------------- */

/* Tile-local row sums; the body also checks that it sees one whole block
 * whose part beyond the logical shape is zero.  Tiles come in grid order. */
struct rowsum_ctx {
    int64_t rows, cols, br, bc, grid_cols;
    long calls;
};

static int rowsum_cb(void *user, int64_t rows, int64_t cols, int64_t ld,
                     const float *const *in, float *out)
{
    struct rowsum_ctx *c = user;
    if (rows != c->br || cols != c->bc || ld < cols)
        return 1;
    long tile = c->calls++;
    int64_t r0 = tile / c->grid_cols * c->br, c0 = tile % c->grid_cols * c->bc;
    for (int64_t r = 0; r < rows; r++) {
        float s = 0.0f;
        for (int64_t j = 0; j < cols; j++) {
            float v = in[0][r * ld + j];
            if ((r0 + r >= c->rows || c0 + j >= c->cols) && tkt_bits(v) != 0)
                return 2;   /* padding must be +0.0 */
            s += v;
        }
        for (int64_t j = 0; j < cols; j++)
            out[r * ld + j] = s;
    }
    return 0;
}

struct rowsum_case {
    int64_t rows, cols, br, bc;
    int dtype, tail;
};

ParameterizedTestParameters(kernel, tile_local_row_sum)
{
    static const int64_t shapes[][4] = {{15, 255, 8, 128}, {17, 257, 16, 256},
                                        {9, 129, 2, 4},    {300, 700, 256, 512}};
    static struct rowsum_case p[4 * 2 * 2];
    size_t n = 0;
    for (int s = 0; s < 4; s++)
        for (int d = 0; d < 2; d++)
            for (int tail = 0; tail < 2; tail++)
                p[n++] = (struct rowsum_case){shapes[s][0], shapes[s][1], shapes[s][2],
                                              shapes[s][3], d ? TK_DTYPE_BF16 : TK_DTYPE_F32,
                                              tail ? TK_TAIL_MASK : TK_TAIL_PAD};
    return cr_make_param_array(struct rowsum_case, p, n);
}

/* Pad and mask both hand a blockwise body the zero-padded block, and each
 * output element is the sum over its own tile's part of its row. */
ParameterizedTest(struct rowsum_case *p, kernel, tile_local_row_sum)
{
    tk_matrix *x = make(p->dtype, p->rows, p->cols, p->cols, 41);
    tk_matrix *out = make(p->dtype, p->rows, p->cols, p->cols, 42);
    tk_tiling *t;
    tkt_expect_status(tk_tiling_create(&t, p->rows, p->cols, p->br, p->bc), TK_OK);
    tkt_expect_status(tk_tiling_set(t, TK_TILING_TAIL, p->tail), TK_OK);
    int64_t grid_rows = (p->rows + p->br - 1) / p->br, grid_cols = (p->cols + p->bc - 1) / p->bc;
    struct rowsum_ctx ctx = {p->rows, p->cols, p->br, p->bc, grid_cols, 0};
    tk_kernel *k;
    tkt_expect_status(tk_kernel_custom(&k, 1, rowsum_cb, &ctx), TK_OK);
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_BODY, TK_BODY_BLOCKWISE), TK_OK);
    const tk_matrix *in[] = {x};
    tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
    cr_assert_eq(ctx.calls, grid_rows * grid_cols, "one call per tile");

    uint32_t *want = malloc((size_t)(p->rows * p->cols) * sizeof *want);
    cr_assert_not_null(want);
    for (int64_t r = 0; r < p->rows; r++)
        for (int64_t c0 = 0; c0 < p->cols; c0 += p->bc) {
            float s = 0.0f;
            for (int64_t j = c0; j < c0 + p->bc; j++)
                s += j < p->cols ? stored(x, r, j) : 0.0f;
            for (int64_t j = c0; j < c0 + p->bc && j < p->cols; j++)
                want[r * p->cols + j] = cast_bits(p->dtype, s);
        }
    expect_bits(out, want, "tile-local row sum");

    /* Shift-inwards would hand the body a different block: refused. */
    void *before = snapshot(out);
    if (p->rows >= p->br && p->cols >= p->bc) {
        tkt_expect_status(tk_tiling_set(t, TK_TILING_TAIL, TK_TAIL_SHIFT_INWARDS), TK_OK);
        tkt_expect_status(tk_kernel_run(k, t, in, out), TK_ELAYOUT);
        expect_unchanged(out, before, "blockwise shift-inwards");
    }
    free(before);
    free(want);
    tk_kernel_destroy(k);
    tk_tiling_destroy(t);
    tk_matrix_destroy(x);
    tk_matrix_destroy(out);
}

/* ---- rejections: status, a message naming the values, output untouched ---------------- */

struct rejection_env {
    tk_kernel *k;
    tk_tiling *t;
    tk_matrix *x, *y, *out;
    void *before;
};

static void env_open(struct rejection_env *e, int64_t rows, int64_t cols)
{
    tkt_expect_status(tk_kernel_axpy(&e->k, 2.0f), TK_OK);
    tkt_expect_status(tk_tiling_create(&e->t, rows, cols, 8, 128), TK_OK);
    e->x = make(TK_DTYPE_F32, rows, cols, cols, 51);
    e->y = make(TK_DTYPE_F32, rows, cols, cols, 52);
    e->out = make(TK_DTYPE_F32, rows, cols, cols, 53);
    e->before = snapshot(e->out);
}

static void env_close(struct rejection_env *e)
{
    free(e->before);
    tk_kernel_destroy(e->k);
    tk_tiling_destroy(e->t);
    tk_matrix_destroy(e->x);
    tk_matrix_destroy(e->y);
    tk_matrix_destroy(e->out);
}

#define expect_rejected(env, call, status, needle)                                     \
    do {                                                                           \
        tkt_expect_status(call, status);                                           \
        cr_assert(strstr(tk_last_error_message(), needle), "message \"%s\" lacks \"%s\"", \
                  tk_last_error_message(), needle);                                \
        expect_unchanged((env)->out, (env)->before, #call);                        \
    } while (0)

Test(kernel, rejects_null_arguments)
{
    struct rejection_env e;
    env_open(&e, 3, 4);
    const tk_matrix *in[] = {e.x, e.y}, *hole[] = {e.x, NULL};
    expect_rejected(&e, tk_kernel_run(NULL, e.t, in, e.out), TK_EINVAL, "kernel");
    expect_rejected(&e, tk_kernel_run(e.k, NULL, in, e.out), TK_EINVAL, "tiling");
    expect_rejected(&e, tk_kernel_run(e.k, e.t, NULL, e.out), TK_EINVAL, "inputs");
    tkt_expect_status(tk_kernel_run(e.k, e.t, in, NULL), TK_EINVAL);
    expect_rejected(&e, tk_kernel_run(e.k, e.t, hole, e.out), TK_EINVAL, "input 1 of 2");
    env_close(&e);
}

Test(kernel, rejects_shapes_in_the_seeds_words)
{
    struct rejection_env e;
    env_open(&e, 3, 4);
    tk_matrix *wide = make(TK_DTYPE_F32, 3, 5, 5, 54), *tall = make(TK_DTYPE_F32, 4, 4, 4, 55);
    const tk_matrix *mixed[] = {e.x, wide};
    expect_rejected(&e, tk_kernel_run(e.k, e.t, mixed, e.out), TK_ESHAPE,
                    "inputs must be nonempty matrices with identical shapes: got 3x4 and 3x5");

    const tk_matrix *in[] = {e.x, e.y};
    void *wide_before = snapshot(wide);
    tkt_expect_status(tk_kernel_run(e.k, e.t, in, wide), TK_ESHAPE);
    cr_assert(strstr(tk_last_error_message(), "3x4: got 3x5"), "%s", tk_last_error_message());
    expect_unchanged(wide, wide_before, "output of the wrong shape");
    free(wide_before);

    /* A tiling for another shape. */
    tk_tiling *t44;
    tkt_expect_status(tk_tiling_create(&t44, 4, 4, 8, 128), TK_OK);
    expect_rejected(&e, tk_kernel_run(e.k, t44, in, e.out), TK_ESHAPE,
                    "tiling is for 4x4 but the inputs are 3x4");
    tk_tiling_destroy(t44);

    /* The shape check comes before the dtype check, as in the seed. */
    tk_matrix *tall_bf16 = make(TK_DTYPE_BF16, 4, 4, 4, 56);
    const tk_matrix *both[] = {e.x, tall_bf16};
    expect_rejected(&e, tk_kernel_run(e.k, e.t, both, e.out), TK_ESHAPE, "3x4 and 4x4");
    tk_matrix_destroy(tall_bf16);
    tk_matrix_destroy(wide);
    tk_matrix_destroy(tall);
    env_close(&e);
}

Test(kernel, rejects_dtypes_without_coercion)
{
    struct rejection_env e;
    env_open(&e, 8, 128);
    tk_matrix *b = make(TK_DTYPE_BF16, 8, 128, 128, 57), *i1, *i2;
    const tk_matrix *mixed[] = {e.x, b};
    expect_rejected(&e, tk_kernel_run(e.k, e.t, mixed, e.out), TK_EDTYPE,
                    "inputs of one float dtype (float32, bfloat16, float16, float8_e4m3fn or "
                    "float8_e5m2) required: got float32 and bfloat16");

    tkt_expect_status(tk_matrix_create(&i1, TK_DTYPE_I32, 8, 128), TK_OK);
    tkt_expect_status(tk_matrix_create(&i2, TK_DTYPE_I32, 8, 128), TK_OK);
    const tk_matrix *ints[] = {i1, i2};
    expect_rejected(&e, tk_kernel_run(e.k, e.t, ints, e.out), TK_EDTYPE,
                    "got int32 and int32");

    /* One input: no pair to mismatch, but int32 is still refused. */
    struct body_ctx ctx = {1, 0, 0, 0, -1};
    tk_kernel *one;
    tkt_expect_status(tk_kernel_custom(&one, 1, axpy_cb, &ctx), TK_OK);
    expect_rejected(&e, tk_kernel_run(one, e.t, ints, e.out), TK_EDTYPE,
                    "float8_e5m2) required: got int32");
    cr_assert_eq(ctx.calls, 0, "the body ran on refused inputs");
    tk_kernel_destroy(one);

    /* An output whose dtype differs from the inputs'. */
    const tk_matrix *in[] = {e.x, e.y};
    void *b_before = snapshot(b);
    tkt_expect_status(tk_kernel_run(e.k, e.t, in, b), TK_EDTYPE);
    cr_assert(strstr(tk_last_error_message(), "float32 like the inputs: got bfloat16"), "%s",
              tk_last_error_message());
    expect_unchanged(b, b_before, "output of the wrong dtype");
    free(b_before);
    tk_matrix_destroy(b);
    tk_matrix_destroy(i1);
    tk_matrix_destroy(i2);
    env_close(&e);
}

/* With every rule broken at once, the checks report in the seed's order:
 * input shapes, input dtypes, output shape, output dtype, tiling shape.
 * Each step mends one rule; the output, broken too, is never written. */
Test(kernel, rejects_in_the_seeds_order)
{
    tk_kernel *k;
    tk_tiling *t_other, *t;
    tkt_expect_status(tk_kernel_axpy(&k, 2.0f), TK_OK);
    tkt_expect_status(tk_tiling_create(&t_other, 5, 5, 8, 128), TK_OK);
    tkt_expect_status(tk_tiling_create(&t, 3, 4, 8, 128), TK_OK);
    tk_matrix *x = make(TK_DTYPE_F32, 3, 4, 4, 61), *y = make(TK_DTYPE_F32, 3, 4, 4, 62);
    tk_matrix *y_tall_bf16 = make(TK_DTYPE_BF16, 4, 4, 4, 63);
    tk_matrix *y_bf16 = make(TK_DTYPE_BF16, 3, 4, 4, 64);
    tk_matrix *out_wide_bf16 = make(TK_DTYPE_BF16, 3, 5, 5, 65);
    tk_matrix *out_bf16 = make(TK_DTYPE_BF16, 3, 4, 4, 66);
    tk_matrix *out = make(TK_DTYPE_F32, 3, 4, 4, 67);
    void *snaps[3] = {snapshot(out_wide_bf16), snapshot(out_bf16), snapshot(out)};
    const tk_matrix *bad_shape[] = {x, y_tall_bf16}, *bad_dtype[] = {x, y_bf16}, *good[] = {x, y};
    const struct {
        const tk_matrix *const *in;
        tk_matrix *out;
        const tk_tiling *t;
        int status;
        const char *needle;
    } step[] = {
        {bad_shape, out_wide_bf16, t_other, TK_ESHAPE, "identical shapes: got 3x4 and 4x4"},
        {bad_dtype, out_wide_bf16, t_other, TK_EDTYPE, "got float32 and bfloat16"},
        {good, out_wide_bf16, t_other, TK_ESHAPE, "the inputs' shape 3x4: got 3x5"},
        {good, out_bf16, t_other, TK_EDTYPE, "float32 like the inputs: got bfloat16"},
        {good, out, t_other, TK_ESHAPE, "tiling is for 5x5 but the inputs are 3x4"},
    };
    for (size_t i = 0; i < sizeof step / sizeof step[0]; i++) {
        tkt_expect_status(tk_kernel_run(k, step[i].t, step[i].in, step[i].out), step[i].status);
        cr_assert(strstr(tk_last_error_message(), step[i].needle), "step %zu: \"%s\" lacks \"%s\"",
                  i, tk_last_error_message(), step[i].needle);
    }
    expect_unchanged(out_wide_bf16, snaps[0], "wide bfloat16 output");
    expect_unchanged(out_bf16, snaps[1], "bfloat16 output");
    expect_unchanged(out, snaps[2], "output");
    tkt_expect_status(tk_kernel_run(k, t, good, out), TK_OK);
    for (int i = 0; i < 3; i++)
        free(snaps[i]);
    tk_matrix *mats[] = {x, y, y_tall_bf16, y_bf16, out_wide_bf16, out_bf16, out};
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
        tk_matrix_destroy(mats[i]);
    tk_tiling_destroy(t_other);
    tk_tiling_destroy(t);
    tk_kernel_destroy(k);
}

Test(kernel, rejects_blockwise_shift_inwards)
{
    struct rejection_env e;
    env_open(&e, 16, 256);
    const tk_matrix *in[] = {e.x, e.y};
    tkt_expect_status(tk_tiling_set(e.t, TK_TILING_TAIL, TK_TAIL_SHIFT_INWARDS), TK_OK);
    tkt_expect_status(tk_kernel_set(e.k, TK_KERNEL_BODY, TK_BODY_BLOCKWISE), TK_OK);
    expect_rejected(&e, tk_kernel_run(e.k, e.t, in, e.out), TK_ELAYOUT, "blockwise");
    env_close(&e);
}

/* ---- a failing callback leaves the output untouched -------------------------------------- */

struct failure {
    int64_t rows, cols;
    int dtype, tail;
    bool blockwise, aliased;
};

ParameterizedTestParameters(kernel, failing_callback)
{
    /* 1024x2100 f32 is over 8 MiB: its results go out by streaming stores. */
    static const int64_t shapes[][2] = {{37, 300}, {19, 2500}, {1024, 2100}};
    static struct failure p[3 * 2 * 3 * 2 * 2];
    size_t n = 0;
    for (int s = 0; s < 3; s++)
        for (int d = 0; d < 2; d++)
            for (int tail = TK_TAIL_PAD; tail <= TK_TAIL_SHIFT_INWARDS; tail++)
                for (int bw = 0; bw < 2; bw++)
                    for (int al = 0; al < 2; al++)
                        if (!(tail == TK_TAIL_SHIFT_INWARDS && (bw || al)))
                            p[n++] = (struct failure){shapes[s][0], shapes[s][1],
                                                      d ? TK_DTYPE_BF16 : TK_DTYPE_F32,
                                                      tail, bw, al};
    return cr_make_param_array(struct failure, p, n);
}

/* Fail on the first call, a middle one and the last one: TK_ECALLBACK and
 * the output's storage (the aliased input included) is bit-for-bit as it
 * was.  Then the same kernel runs to completion and matches the reference. */
ParameterizedTest(struct failure *p, kernel, failing_callback)
{
    const int64_t br = 8, bc = 128;
    tk_matrix *x = make(p->dtype, p->rows, p->cols, p->cols, 61);
    tk_matrix *y = make(p->dtype, p->rows, p->cols, p->cols, 62);
    tk_matrix *out = p->aliased ? x : make(p->dtype, p->rows, p->cols, p->cols, 63);
    const tk_matrix *in[] = {x, y};
    uint32_t *want = oracle_axpy(x, y, 0.7f);
    tk_tiling *t;
    tkt_expect_status(tk_tiling_create(&t, p->rows, p->cols, br, bc), TK_OK);
    tkt_expect_status(tk_tiling_set(t, TK_TILING_TAIL, p->tail), TK_OK);
    struct body_ctx ctx = {0.7f, p->blockwise ? br : 0, p->blockwise ? bc : 0, 0, -1};
    tk_kernel *k;
    tkt_expect_status(tk_kernel_custom(&k, 2, axpy_cb, &ctx), TK_OK);
    if (p->blockwise)
        tkt_expect_status(tk_kernel_set(k, TK_KERNEL_BODY, TK_BODY_BLOCKWISE), TK_OK);

    /* Count the calls of a complete run on a scratch output, aliased as
     * the real one is (how the work is cut depends on it). */
    tk_matrix *probe = make(p->dtype, p->rows, p->cols, p->cols, p->aliased ? 61 : 64);
    const tk_matrix *probe_in[] = {p->aliased ? probe : x, y};
    tkt_expect_status(tk_kernel_run(k, t, probe_in, probe), TK_OK);
    long calls = ctx.calls;
    cr_assert_gt(calls, 2);
    tk_matrix_destroy(probe);

    void *before = snapshot(out);
    const long fail_at[] = {0, calls / 2, calls - 1};
    for (int f = 0; f < 3; f++) {
        ctx.calls = 0;
        ctx.fail_at = fail_at[f];
        tkt_expect_status(tk_kernel_run(k, t, in, out), TK_ECALLBACK);
        cr_assert(strstr(tk_last_error_message(), "returned 7"), "%s", tk_last_error_message());
        cr_assert_eq(ctx.calls, fail_at[f] + 1, "the run went on after the failure");
        char what[64];
        snprintf(what, sizeof what, "failure at call %ld of %ld", fail_at[f], calls);
        expect_unchanged(out, before, what);
    }
    ctx.calls = 0;
    ctx.fail_at = -1;
    tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
    expect_bits(out, want, "after the failed runs");
    free(before);
    free(want);
    tk_kernel_destroy(k);
    tk_tiling_destroy(t);
    if (!p->aliased)
        tk_matrix_destroy(out);
    tk_matrix_destroy(x);
    tk_matrix_destroy(y);
}

/* TK_KERNEL_UNDO 0: no undo copy.  A failure still stops the run with
 * TK_ECALLBACK and says the output may be partly written; a complete run
 * gives the same bits as with undo. */
Test(kernel, undo_can_be_turned_off)
{
    tk_matrix *x = make(TK_DTYPE_F32, 1024, 2100, 2100, 81);
    tk_matrix *y = make(TK_DTYPE_F32, 1024, 2100, 2100, 82);
    tk_matrix *out = make(TK_DTYPE_F32, 1024, 2100, 2100, 83);
    const tk_matrix *in[] = {x, y};
    uint32_t *want = oracle_axpy(x, y, 0.7f);
    tk_tiling *t;
    tkt_expect_status(tk_tiling_create(&t, 1024, 2100, 8, 128), TK_OK);
    struct body_ctx ctx = {0.7f, 0, 0, 0, -1};
    tk_kernel *k;
    int64_t v = -1;
    tkt_expect_status(tk_kernel_custom(&k, 2, axpy_cb, &ctx), TK_OK);
    tkt_expect_status(tk_kernel_get(k, TK_KERNEL_UNDO, &v), TK_OK);
    cr_assert_eq(v, 1, "undo is on by default");
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_UNDO, 2), TK_ERANGE);
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_UNDO, 0), TK_OK);
    tkt_expect_status(tk_kernel_get(k, TK_KERNEL_UNDO, &v), TK_OK);
    cr_assert_eq(v, 0);
    ctx.fail_at = 100;
    tkt_expect_status(tk_kernel_run(k, t, in, out), TK_ECALLBACK);
    cr_assert(strstr(tk_last_error_message(), "partly written (TK_KERNEL_UNDO is 0)"), "%s",
              tk_last_error_message());
    cr_assert_eq(ctx.calls, 101, "the run went on after the failure");
    ctx.calls = 0;
    ctx.fail_at = -1;
    tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
    expect_bits(out, want, "without undo");
    free(want);
    tk_kernel_destroy(k);
    tk_tiling_destroy(t);
    tk_matrix_destroy(out);
    tk_matrix_destroy(x);
    tk_matrix_destroy(y);
}

/* ---- threads ------------------------------------------------------------------------------ */

/* A custom body that also records how many of its calls were in flight at
 * once.  With `wait_for_two` set, a call waits (up to 5 s) for a second one
 * to be in flight, so a run that can be concurrent is, however busy the
 * machine. */
static atomic_int in_flight, most_in_flight;
static atomic_bool wait_for_two;

static int counting_cb(void *user, int64_t rows, int64_t cols, int64_t ld,
                       const float *const *in, float *out)
{
    int now = atomic_fetch_add(&in_flight, 1) + 1;
    for (int seen = atomic_load(&most_in_flight); now > seen &&
         !atomic_compare_exchange_weak(&most_in_flight, &seen, now);)
        ;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (atomic_load(&wait_for_two) && atomic_load(&most_in_flight) < 2) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec > 5)
            break;
    }
    const float *alpha = user;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++)
            out[r * ld + j] = *alpha * in[0][r * ld + j] + in[1][r * ld + j];
    atomic_fetch_sub(&in_flight, 1);
    return 0;
}

/* A thread-safe body that writes garbage and fails on row 800 of a matrix
 * of 1024 columns whose input 0 starts at user (1024 columns: every call is
 * one row). */
static int failing_cb(void *user, int64_t rows, int64_t cols, int64_t ld,
                      const float *const *in, float *out)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++)
            out[r * ld + j] = -1.0f;
    return (in[0] - (const float *)user) / 1024 == 800 ? 7 : 0;
}

/* A thread-safe body on runs of an 8 MiB output (tk__run_flat, staged
 * through f32 scratch for bfloat16 or an output that is an input): x holds
 * FLAT_MARK at FLAT_BAD alone, and the body records where the run holding
 * it starts, and fails there. */
#define FLAT_COLS 2100
#define FLAT_BAD (800 * FLAT_COLS + 1000)
#define FLAT_MARK 1000.0f   /* a bfloat16 value; the data lie in [-4, 4) */
struct flat_ctx {
    atomic_llong start;   /* the failing run's first element; -1 before, -2: no failure */
    atomic_llong widest;
};

static int flat_cb(void *user, int64_t rows, int64_t cols, int64_t ld,
                   const float *const *in, float *out)
{
    struct flat_ctx *f = user;
    long long n = (long long)(rows * cols), mark = -1;
    for (long long w = atomic_load(&f->widest); n > w &&
         !atomic_compare_exchange_weak(&f->widest, &w, n);)
        ;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++) {
            if (in[0][r * ld + j] == FLAT_MARK)
                mark = r * cols + j;
            out[r * ld + j] = 2.0f * in[0][r * ld + j] + in[1][r * ld + j];
        }
    if (atomic_load(&f->start) != -2 && mark >= 0) {
        atomic_store(&f->start, FLAT_BAD - mark);
        return 7;
    }
    return 0;
}

/* An 8 MiB contiguous output, f32 and bfloat16, separate and the same as
 * x: the body gets runs of at most 512 elements that may go on into the
 * next row; on one and on three threads a failure names the run's first
 * element and leaves the output as it was, and a complete run gives the
 * reference's bits. */
Test(kernel, runs_of_a_large_matrix_fail_and_name_their_start, .timeout = 60)
{
    for (int d = 0; d < 2; d++)
        for (int alias = 0; alias < 2; alias++) {
            int dtype = d ? TK_DTYPE_BF16 : TK_DTYPE_F32;
            int64_t rows = d ? 2048 : 1024;   /* 8.2 MiB either way */
            tk_matrix *x = make(dtype, rows, FLAT_COLS, FLAT_COLS, 97);
            tk_matrix *y = make(dtype, rows, FLAT_COLS, FLAT_COLS, 98);
            tk_matrix *sep = make(dtype, rows, FLAT_COLS, FLAT_COLS, 99);
            tk_matrix *out = alias ? x : sep;
            if (d)
                ((uint16_t *)tk_matrix_data(x))[FLAT_BAD] = tk_bf16_from_f32(FLAT_MARK);
            else
                ((float *)tk_matrix_data(x))[FLAT_BAD] = FLAT_MARK;
            const tk_matrix *in[] = {x, y};
            uint32_t *want = oracle_axpy(x, y, 2.0f);
            tk_tiling *t;
            tkt_expect_status(tk_tiling_create(&t, rows, FLAT_COLS, 8, 128), TK_OK);
            struct flat_ctx f;
            tk_kernel *k;
            tkt_expect_status(tk_kernel_custom(&k, 2, flat_cb, &f), TK_OK);
            tkt_expect_status(tk_kernel_set(k, TK_KERNEL_THREAD_SAFE, 1), TK_OK);
            void *before = snapshot(out);
            for (int threads = 1; threads <= 3; threads += 2) {
                tkt_expect_status(tk_kernel_set(k, TK_KERNEL_THREADS, threads), TK_OK);
                atomic_store(&f.start, -1);
                atomic_store(&f.widest, 0);
                tkt_expect_status(tk_kernel_run(k, t, in, out), TK_ECALLBACK);
                long long at = atomic_load(&f.start);
                char where[96];
                snprintf(where, sizeof where, "region at row %lld, col %lld;",
                         at / FLAT_COLS, at % FLAT_COLS);
                cr_assert(strstr(tk_last_error_message(), where), "%s, alias %d, %d threads: "
                          "%s, not %s", tk_dtype_name(dtype), alias, threads,
                          tk_last_error_message(), where);
                cr_assert_leq(atomic_load(&f.widest), 512);
                expect_unchanged(out, before, "a failed run of runs");
                atomic_store(&f.start, -2);
                tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
                expect_bits(out, want, "runs of a large matrix");
                memcpy(tk_matrix_data(out), before, storage_bytes(out));   /* the old output */
            }
            free(before);
            free(want);
            tk_kernel_destroy(k);
            tk_tiling_destroy(t);
            tk_matrix_destroy(sep);
            tk_matrix_destroy(x);
            tk_matrix_destroy(y);
        }
}

/* The NaN rule (tk_kernel(3)) for one element: a NaN operand gives its
 * own NaN, made quiet, the first of a, x, y that is one; otherwise the
 * arithmetic's own result, a NaN from Inf - Inf included. */
static float nan_rule(float a, float x, float y)
{
    volatile float r = a * x;   /* rounded, then added, as the contract says */
    r = r + y;
    const float ops[3] = {a, x, y};
    for (int i = 0; i < 3; i++)
        if (isnan(ops[i]))
            return tkt_float(tkt_bits(ops[i]) | 0x00400000u);
    return r;
}

/* An output of 8 MiB or more (streamed, a line or four at a time on the
 * vector paths) with NaNs of both signs and payloads in x and in y, and
 * Inf - Inf, at every offset within four lines and in the last lines of
 * the run, separate and the same as x or y, alpha 3, a signalling NaN and
 * Inf (whose product with a zero x is the hardware's own NaN, which the
 * rule gives way to y's): the NaN rule's bits in every element. */
Test(kernel, a_streamed_output_keeps_the_nan_rule)
{
    for (int d = 0; d < 2; d++)
        for (int alias = 0; alias < 3; alias++) {
            int dtype = d ? TK_DTYPE_BF16 : TK_DTYPE_F32;
            int64_t rows = d ? 2048 : 1024, cols = FLAT_COLS;   /* 8.2 MiB either way */
            size_t n = (size_t)(rows * cols);
            float *fx = malloc(n * sizeof *fx), *fy = malloc(n * sizeof *fy);
            cr_assert(fx && fy);
            tkt_fill(fx, n, 71);
            tkt_fill(fy, n, 72);
            /* Specials 67 elements apart walk through every position of a
             * 64-element step; one in 7 goes to the run's last 100. */
            for (size_t i = 0; i < n; i += 67) {
                size_t j = i / 67 % 7 == 0 ? n - 1 - i / 67 % 100 : i;
                switch (i / 67 % 5) {
                case 0: fx[j] = tkt_float(0x7FA00000u | (uint32_t)(i & 0xFFF)); break;
                case 1: fy[j] = tkt_float(0xFF812345u); break;
                case 2: fx[j] = INFINITY, fy[j] = -INFINITY; break;
                case 3: fx[j] = 0.0f, fy[j] = tkt_float(0x7FC54321u); break;
                default: fx[j] = tkt_float(0xFFC00001u), fy[j] = tkt_float(0x7F800001u); break;
                }
            }
            tk_matrix *x, *y, *sep;
            tkt_expect_status(tk_matrix_from_f32(&x, dtype, rows, cols, fx, cols), TK_OK);
            tkt_expect_status(tk_matrix_from_f32(&y, dtype, rows, cols, fy, cols), TK_OK);
            tkt_expect_status(tk_matrix_create(&sep, dtype, rows, cols), TK_OK);
            /* The stored operands, as the kernel reads them. */
            tkt_expect_status(tk_matrix_to_f32(x, fx, cols), TK_OK);
            tkt_expect_status(tk_matrix_to_f32(y, fy, cols), TK_OK);
            tk_matrix *out = alias == 1 ? x : alias == 2 ? y : sep;
            const tk_matrix *in[] = {x, y};
            void *before = snapshot(out);
            tk_tiling *t;
            tkt_expect_status(tk_tiling_create(&t, rows, cols, 8, 128), TK_OK);
            const float alphas[] = {3.0f, tkt_float(0x7F811111u), INFINITY};
            for (int a = 0; a < 3; a++) {
                tk_kernel *k;
                tkt_expect_status(tk_kernel_axpy(&k, alphas[a]), TK_OK);
                memcpy(tk_matrix_data(out), before, storage_bytes(out));
                tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
                long nans = 0;
                for (size_t i = 0; i < n; i++) {
                    float w = nan_rule(alphas[a], fx[i], fy[i]);
                    uint32_t want = d ? tk_bf16_from_f32(w) : tkt_bits(w);
                    uint32_t got = d ? ((const uint16_t *)tk_matrix_data(out))[i]
                                     : ((const uint32_t *)tk_matrix_data(out))[i];
                    nans += isnan(w);
                    if (got != want)
                        cr_assert_fail("%s, output %s, alpha 0x%08x: element %zu is 0x%08x, "
                                       "not 0x%08x (x 0x%08x, y 0x%08x)", tk_dtype_name(dtype),
                                       alias == 1 ? "= x" : alias == 2 ? "= y" : "separate",
                                       tkt_bits(alphas[a]), i, got, want, tkt_bits(fx[i]),
                                       tkt_bits(fy[i]));
                }
                cr_assert_gt(nans, (long)(n / 67 / 2));   /* the specials reached the rule */
                tk_kernel_destroy(k);
            }
            free(before);
            tk_tiling_destroy(t);
            tk_matrix_destroy(sep);
            tk_matrix_destroy(x);
            tk_matrix_destroy(y);
            free(fx);
            free(fy);
        }
}

/* The axpy as a custom body (blockwise: on br x bc blocks) against the
 * built-in on rows x cols matrices of dtype, on `threads` threads (more
 * than one: the body declared thread-safe): a failure at call fail_at
 * leaves the output as it was, and a complete run gives the built-in's
 * bits. */
static void expect_custom_as_built_in(int dtype, int64_t rows, int64_t cols, int64_t br,
                                      int64_t bc, bool blockwise, long fail_at, int threads)
{
    tk_matrix *x = make(dtype, rows, cols, cols, 41), *y = make(dtype, rows, cols, cols, 42);
    tk_matrix *out = make(dtype, rows, cols, cols, 43), *ref = make(dtype, rows, cols, cols, 44);
    const tk_matrix *in[] = {x, y};
    tk_tiling *t;
    tkt_expect_status(tk_tiling_create(&t, rows, cols, br, bc), TK_OK);
    tk_kernel *builtin, *custom;
    struct body_ctx ctx = {0.7f, blockwise ? br : 0, blockwise ? bc : 0, 0, fail_at};
    tkt_expect_status(tk_kernel_axpy(&builtin, 0.7f), TK_OK);
    tkt_expect_status(tk_kernel_custom(&custom, 2, axpy_cb, &ctx), TK_OK);
    if (blockwise)
        tkt_expect_status(tk_kernel_set(custom, TK_KERNEL_BODY, TK_BODY_BLOCKWISE), TK_OK);
    if (threads > 1) {
        tkt_expect_status(tk_kernel_set(custom, TK_KERNEL_THREADS, threads), TK_OK);
        tkt_expect_status(tk_kernel_set(custom, TK_KERNEL_THREAD_SAFE, 1), TK_OK);
    }
    tkt_expect_status(tk_kernel_run(builtin, t, in, ref), TK_OK);
    void *before = snapshot(out);
    char what[96];
    snprintf(what, sizeof what, "%s %lldx%lld%s", tk_dtype_name(dtype), (long long)br,
             (long long)bc, blockwise ? " blockwise" : "");
    tkt_expect_status(tk_kernel_run(custom, t, in, out), TK_ECALLBACK);
    expect_unchanged(out, before, what);
    ctx.fail_at = -1;
    tkt_expect_status(tk_kernel_run(custom, t, in, out), TK_OK);
    cr_assert(!memcmp(tk_matrix_data(out), tk_matrix_data(ref), storage_bytes(out)),
              "%s: the custom body's run differs from the built-in's", what);
    free(before);
    tk_kernel_destroy(builtin);
    tk_kernel_destroy(custom);
    tk_tiling_destroy(t);
    tk_matrix_destroy(x);
    tk_matrix_destroy(y);
    tk_matrix_destroy(out);
    tk_matrix_destroy(ref);
}

/* float16 and both fp8 formats through the same runs (an output of 8 MiB
 * or more, staged): a custom body gives the built-in axpy's bits, with its
 * undo copy after a failure in the middle leaving the output as it was. */
Test(kernel, staged_runs_of_narrow_dtypes_give_the_built_in_bits, .timeout = 60)
{
    const int dtypes[3] = {TK_DTYPE_F16, TK_DTYPE_F8E4M3FN, TK_DTYPE_F8E5M2};
    for (int d = 0; d < 3; d++) {
        int64_t cols = 2049, rows = (((int64_t)8 << 20) / tk_dtype_size(dtypes[d])) / cols + 1;
        expect_custom_as_built_in(dtypes[d], rows, cols, 8, 128, false,
                                  (long)(rows * cols / 512 / 2), 1);
    }
}

/* A custom blockwise body on outputs of 8 MiB or more streams its staged
 * tiles' results out (bfloat16 tiles, and f32 edge tiles), and its f32
 * tiles in place through a band of scratch where their rows are whole
 * lines (2048 columns; not 2100), each tile row's results going out while
 * the next one's inputs are read, the last after the walk (1024 rows: no
 * partial tile row after it): the built-in's bits, with 8x128 and 256x512
 * blocks and edges both ways, and a failure in the middle leaving the
 * output as it was; the band also on two threads. */
Test(kernel, large_staged_tiles_give_the_built_in_bits, .timeout = 60)
{
    const struct {
        int dtype;
        int64_t rows, cols;
        int threads;
    } shapes[] = {{TK_DTYPE_BF16, 2049, 2100, 1}, {TK_DTYPE_F32, 1030, 2100, 1},
                  {TK_DTYPE_F32, 1030, 2048, 1}, {TK_DTYPE_F32, 1030, 2048, 2},
                  {TK_DTYPE_F32, 1024, 2048, 1}};
    const int64_t blocks[2][2] = {{8, 128}, {256, 512}};
    for (int s = 0; s < 5; s++)
        for (int b = 0; b < 2; b++) {
            int64_t rows = shapes[s].rows, cols = shapes[s].cols;
            int64_t br = blocks[b][0], bc = blocks[b][1];
            expect_custom_as_built_in(shapes[s].dtype, rows, cols, br, bc, true,
                                      (long)((rows / br) * (cols / bc) / 2), shapes[s].threads);
        }
}

/* out = 1.5 x0 + x1 - 0.25 x2 + ... over the first n of in, in f32. */
static int weighted_cb(void *user, int64_t rows, int64_t cols, int64_t ld,
                       const float *const *in, float *out)
{
    int n = *(const int *)user;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++) {
            float v = 1.5f * in[0][r * ld + j];
            for (int i = 1; i < n; i++)
                v += (i % 2 ? 1.0f : -0.25f) * in[i][r * ld + j];
            out[r * ld + j] = v;
        }
    return 0;
}

/* Staged runs of one and of three inputs, on matrices that start one
 * element off a cache line and hold a count of elements no run length
 * divides, on one and three threads: the body's results cast once. */
Test(kernel, staged_runs_of_one_and_three_inputs_off_a_line, .timeout = 60)
{
    const int64_t rows = 4099, cols = 1031;   /* 8.06 MiB of bfloat16 */
    const size_t count = (size_t)(rows * cols);
    uint16_t *mem[4];
    tk_matrix *m[4];
    float *f = malloc(count * sizeof *f), *want = malloc(count * sizeof *want);
    cr_assert(f && want);
    for (int i = 0; i < 4; i++) {
        mem[i] = malloc((count + 32) * sizeof **mem);
        cr_assert_not_null(mem[i]);
        tkt_fill(f, count, 71 + (uint64_t)i);
        tkt_expect_status(tk_dtype_from_f32_n(TK_DTYPE_BF16, mem[i] + 1, f, count), TK_OK);
        tkt_expect_status(tk_matrix_wrap(&m[i], TK_DTYPE_BF16, rows, cols, cols, mem[i] + 1),
                          TK_OK);
    }
    tk_tiling *t;
    tkt_expect_status(tk_tiling_create(&t, rows, cols, 8, 128), TK_OK);
    const tk_matrix *in[3] = {m[0], m[1], m[2]};
    for (int n = 1; n <= 3; n += 2) {
        /* The reference: the inputs widened, the same f32 operations, one cast. */
        float *x = malloc(count * sizeof *x);
        cr_assert_not_null(x);
        for (int i = 0; i < n; i++) {
            tkt_expect_status(tk_dtype_to_f32_n(TK_DTYPE_BF16, x, mem[i] + 1, count), TK_OK);
            for (size_t e = 0; e < count; e++)
                want[e] = i ? want[e] + (i % 2 ? 1.0f : -0.25f) * x[e] : 1.5f * x[e];
        }
        free(x);
        uint16_t *ref = malloc(count * sizeof *ref);
        cr_assert_not_null(ref);
        tkt_expect_status(tk_dtype_from_f32_n(TK_DTYPE_BF16, ref, want, count), TK_OK);
        tk_kernel *k;
        tkt_expect_status(tk_kernel_custom(&k, n, weighted_cb, &n), TK_OK);
        tkt_expect_status(tk_kernel_set(k, TK_KERNEL_THREAD_SAFE, 1), TK_OK);
        for (int threads = 1; threads <= 3; threads += 2) {
            tkt_expect_status(tk_kernel_set(k, TK_KERNEL_THREADS, threads), TK_OK);
            memset(mem[3] + 1, 0xFF, count * sizeof **mem);
            tkt_expect_status(tk_kernel_run(k, t, in, m[3]), TK_OK);
            for (size_t e = 0; e < count; e++)
                if (mem[3][1 + e] != ref[e])
                    cr_assert_fail("%d inputs, %d threads: element %zu is 0x%04x, not 0x%04x",
                                   n, threads, e, mem[3][1 + e], ref[e]);
        }
        tk_kernel_destroy(k);
        free(ref);
    }
    tk_tiling_destroy(t);
    for (int i = 0; i < 4; i++) {
        tk_matrix_destroy(m[i]);
        free(mem[i]);
    }
    free(f);
    free(want);
}

/* Every thread count gives one thread's bits: built-in and thread-safe
 * custom bodies, f32 and bf16, every tail and body kind, an edge in both
 * directions (so bands end inside tiles and shift-inwards moves tiles). */
Test(kernel, threads_give_the_same_bits)
{
    static const float alpha = 0.7f;
    for (int d = 0; d < 2; d++)
        for (int tail = TK_TAIL_PAD; tail <= TK_TAIL_SHIFT_INWARDS; tail++)
            for (int kind = TK_BODY_ELEMENTWISE; kind <= TK_BODY_BLOCKWISE; kind++)
                for (int custom = 0; custom < 2; custom++) {
                    if (tail == TK_TAIL_SHIFT_INWARDS && kind == TK_BODY_BLOCKWISE)
                        continue;
                    int dtype = d ? TK_DTYPE_BF16 : TK_DTYPE_F32;
                    tk_matrix *x = make(dtype, 517, 700, 700, 91), *y = make(dtype, 517, 700,
                                                                            700, 92);
                    tk_matrix *out = make(dtype, 517, 700, 700, 93);
                    const tk_matrix *in[] = {x, y};
                    uint32_t *want = oracle_axpy(x, y, alpha);
                    tk_tiling *t;
                    tkt_expect_status(tk_tiling_create(&t, 517, 700, 8, 128), TK_OK);
                    tkt_expect_status(tk_tiling_set(t, TK_TILING_TAIL, tail), TK_OK);
                    tk_kernel *k;
                    if (custom) {
                        tkt_expect_status(tk_kernel_custom(&k, 2, counting_cb, (void *)&alpha),
                                          TK_OK);
                        tkt_expect_status(tk_kernel_set(k, TK_KERNEL_THREAD_SAFE, 1), TK_OK);
                    } else {
                        tkt_expect_status(tk_kernel_axpy(&k, alpha), TK_OK);
                    }
                    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_BODY, kind), TK_OK);
                    const int64_t threads[] = {2, 3, 0, 7};
                    for (int i = 0; i < 4; i++) {
                        tkt_expect_status(tk_kernel_set(k, TK_KERNEL_THREADS, threads[i]), TK_OK);
                        tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
                        char what[96];
                        snprintf(what, sizeof what, "%s tail %d body %d %s, %lld threads",
                                 tk_dtype_name(dtype), tail, kind, custom ? "custom" : "built-in",
                                 (long long)threads[i]);
                        expect_bits(out, want, what);
                    }
                    free(want);
                    tk_kernel_destroy(k);
                    tk_tiling_destroy(t);
                    tk_matrix_destroy(x);
                    tk_matrix_destroy(y);
                    tk_matrix_destroy(out);
                }
}

/* A body that is not declared thread-safe is never called twice at once;
 * a declared one is, with enough threads and work; a failure on any thread
 * leaves the output as it was. */
Test(kernel, threads_respect_the_body)
{
    static const float alpha = 0.7f;
    tk_matrix *x = make(TK_DTYPE_F32, 1024, 1024, 1024, 94);
    tk_matrix *y = make(TK_DTYPE_F32, 1024, 1024, 1024, 95);
    tk_matrix *out = make(TK_DTYPE_F32, 1024, 1024, 1024, 96);
    const tk_matrix *in[] = {x, y};
    tk_tiling *t;
    tkt_expect_status(tk_tiling_create(&t, 1024, 1024, 8, 128), TK_OK);
    tk_kernel *k;
    int64_t v = -1;
    tkt_expect_status(tk_kernel_custom(&k, 2, counting_cb, (void *)&alpha), TK_OK);
    tkt_expect_status(tk_kernel_get(k, TK_KERNEL_THREADS, &v), TK_OK);
    cr_assert_eq(v, 1, "one thread by default");
    tkt_expect_status(tk_kernel_get(k, TK_KERNEL_THREAD_SAFE, &v), TK_OK);
    cr_assert_eq(v, 0, "custom bodies are not thread-safe by default");
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_THREADS, TK_KERNEL_MAX_THREADS + 1),
                      TK_ERANGE);
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_THREADS, -1), TK_ERANGE);
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_THREADS, 4), TK_OK);
    atomic_store(&most_in_flight, 0);
    tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
    cr_assert_eq(atomic_load(&most_in_flight), 1, "an undeclared body ran concurrently");
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_THREAD_SAFE, 1), TK_OK);
    atomic_store(&wait_for_two, true);
    tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
    atomic_store(&wait_for_two, false);
    cr_assert_gt(atomic_load(&most_in_flight), 1, "a thread-safe body never ran concurrently");
    tk_kernel_destroy(k);

    /* Fail late, on some thread: every band stops, every row comes back. */
    tkt_expect_status(tk_kernel_custom(&k, 2, failing_cb, tk_matrix_data(x)), TK_OK);
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_THREAD_SAFE, 1), TK_OK);
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_THREADS, 3), TK_OK);
    void *before = snapshot(out);
    tkt_expect_status(tk_kernel_run(k, t, in, out), TK_ECALLBACK);
    cr_assert(strstr(tk_last_error_message(), "returned 7 on a 1x1024 region at row 800, col 0"),
              "%s", tk_last_error_message());
    expect_unchanged(out, before, "a failure on one of 3 threads");
    free(before);
    tk_kernel_destroy(k);
    tk_tiling_destroy(t);
    tk_matrix_destroy(x);
    tk_matrix_destroy(y);
    tk_matrix_destroy(out);
}

/* Threads of this process, from /proc/self/task. */
static int task_count(void)
{
    DIR *d = opendir("/proc/self/task");
    cr_assert_not_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* A thread that has returned from pthread_join may linger in /proc a
 * moment: wait up to a second for the count to come down to `want`. */
static int task_count_settled(int want)
{
    int n = task_count();
    for (int i = 0; i < 100 && n != want; i++) {
        nanosleep(&(struct timespec){0, 10000000}, NULL);
        n = task_count();
    }
    return n;
}

#if defined(__linux__)
/* TK_KERNEL_THREADS 0 is every core the process may run on: pinned to one
 * (as taskset pins it), a run starts no worker, whatever the machine has. */
Test(kernel, threads_0_takes_the_cores_the_process_may_run_on, .timeout = 60)
{
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu() > 0 ? sched_getcpu() : 0, &one);
    cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0, "%s", strerror(errno));
    tk_matrix *x = make(TK_DTYPE_F32, 512, 1024, 1024, 91);
    tk_matrix *y = make(TK_DTYPE_F32, 512, 1024, 1024, 92);
    tk_matrix *out = make(TK_DTYPE_F32, 512, 1024, 1024, 93);
    const tk_matrix *in[] = {x, y};
    uint32_t *want = oracle_axpy(x, y, 0.5f);
    tk_tiling *t;
    tkt_expect_status(tk_tiling_create(&t, 512, 1024, 8, 128), TK_OK);
    tk_kernel *k;
    tkt_expect_status(tk_kernel_axpy(&k, 0.5f), TK_OK);
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_THREADS, 0), TK_OK);
    int before = task_count();
    tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
    expect_bits(out, want, "0 threads, pinned to one core");
    cr_assert_eq(task_count(), before, "a worker started on a process pinned to one core");
    free(want);
    tk_kernel_destroy(k);
    tk_tiling_destroy(t);
    unmake(x);
    unmake(y);
    unmake(out);
}
#endif

/* The kernel handle keeps its workers between runs and ends them when it
 * is destroyed; a child forked after they started (which has none of them)
 * runs on threads of its own, with the same bits; every band computes under
 * the caller's floating-point environment. */
Test(kernel, threads_are_kept_by_the_handle_and_survive_fork, .timeout = 60)
{
    static const float alpha = 0.7f;
    tk_matrix *x = make(TK_DTYPE_BF16, 512, 1024, 1024, 97);
    tk_matrix *y = make(TK_DTYPE_BF16, 512, 1024, 1024, 98);
    tk_matrix *out = make(TK_DTYPE_BF16, 512, 1024, 1024, 99);
    const tk_matrix *in[] = {x, y};
    uint32_t *want = oracle_axpy(x, y, alpha);
    tk_tiling *t;
    tkt_expect_status(tk_tiling_create(&t, 512, 1024, 8, 128), TK_OK);
    tk_kernel *k;
    tkt_expect_status(tk_kernel_axpy(&k, alpha), TK_OK);
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_THREADS, 3), TK_OK);
    int before = task_count();
    for (int run = 0; run < 3; run++) {
        memset(tk_matrix_data(out), 0, 512 * 1024 * 2);
        tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
        expect_bits(out, want, "3 threads");
        cr_assert_eq(task_count(), before + 2, "run %d: the two workers stay, no more", run);
    }
    /* One thread ends them; the next run of three starts them again. */
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_THREADS, 1), TK_OK);
    cr_assert_eq(task_count_settled(before), before, "TK_KERNEL_THREADS 1 ends the workers");
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_THREADS, 3), TK_OK);
    tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
    cr_assert_eq(task_count(), before + 2, "a later run of three starts two workers");
    fflush(NULL);
    pid_t child = fork();
    cr_assert_geq(child, 0);
    if (child == 0) {   /* no Criterion assertions here: the exit status says */
        alarm(30);
        memset(tk_matrix_data(out), 0, 512 * 1024 * 2);
        int rc = tk_kernel_run(k, t, in, out);
        for (int64_t e = 0; !rc && e < 512 * 1024; e++)
            rc = ((const uint16_t *)tk_matrix_data(out))[e] != want[e] ? 100 : 0;
        tk_kernel_destroy(k);
        _exit(rc);
    }
    int status = -1;
    cr_assert_eq(waitpid(child, &status, 0), child);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the forked child: status 0x%x",
              status);
    tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
    expect_bits(out, want, "3 threads after a fork");

    /* Every band runs under the caller's rounding mode, not the one the
     * workers started under: the same bits as one thread, upward. */
    tk_matrix *fx = make(TK_DTYPE_F32, 512, 1024, 1024, 100);
    tk_matrix *fy = make(TK_DTYPE_F32, 512, 1024, 1024, 101);
    tk_matrix *near = make(TK_DTYPE_F32, 512, 1024, 1024, 0);
    tk_matrix *up1 = make(TK_DTYPE_F32, 512, 1024, 1024, 0);
    tk_matrix *up3 = make(TK_DTYPE_F32, 512, 1024, 1024, 0);
    const tk_matrix *fin[] = {fx, fy};
    tk_kernel *one;
    tkt_expect_status(tk_kernel_axpy(&one, alpha), TK_OK);
    tkt_expect_status(tk_kernel_run(k, t, fin, near), TK_OK);
    fesetround(FE_UPWARD);
    int rc1 = tk_kernel_run(one, t, fin, up1), rc3 = tk_kernel_run(k, t, fin, up3);
    fesetround(FE_TONEAREST);
    tkt_expect_status(rc1, TK_OK);
    tkt_expect_status(rc3, TK_OK);
    size_t bytes = 512 * 1024 * sizeof(float);
    cr_assert_neq(memcmp(tk_matrix_data(near), tk_matrix_data(up1), bytes), 0,
                  "the data must show the rounding mode");
    cr_assert_eq(memcmp(tk_matrix_data(up3), tk_matrix_data(up1), bytes), 0,
                 "3 threads rounded other than the caller");
    tk_kernel_destroy(one);
    tk_matrix_destroy(fx);
    tk_matrix_destroy(fy);
    tk_matrix_destroy(near);
    tk_matrix_destroy(up1);
    tk_matrix_destroy(up3);
    tk_kernel_destroy(k);
    cr_assert_eq(task_count_settled(before), before, "destroy ends the workers");
    free(want);
    tk_tiling_destroy(t);
    tk_matrix_destroy(x);
    tk_matrix_destroy(y);
    tk_matrix_destroy(out);
}

/* A thread-safe body that copies its first input and records, on the
 * threads other than the caller's, whether SIGINT (asynchronous) and
 * SIGSEGV (raised by a fault) are blocked. */
struct mask_ctx {
    pthread_t caller;
    atomic_int worker_bands, int_open, segv_blocked;
};

static int mask_cb(void *user, int64_t rows, int64_t cols, int64_t ld,
                   const float *const *in, float *out)
{
    struct mask_ctx *m = user;
    if (!pthread_equal(pthread_self(), m->caller)) {
        sigset_t now;
        pthread_sigmask(SIG_BLOCK, NULL, &now);
        atomic_fetch_add(&m->worker_bands, 1);
        atomic_fetch_add(&m->int_open, !sigismember(&now, SIGINT));
        atomic_fetch_add(&m->segv_blocked, sigismember(&now, SIGSEGV) == 1);
    }
    for (int64_t r = 0; r < rows; r++)
        memcpy(out + r * ld, in[0] + r * ld, (size_t)cols * sizeof(float));
    return 0;
}

/* Workers keep asynchronous signals for the application's threads but not
 * the ones a fault raises, whose handlers must still run. */
Test(kernel, workers_block_asynchronous_signals_only, .timeout = 60)
{
    tk_matrix *x = make(TK_DTYPE_F32, 256, 1024, 1024, 97);
    tk_matrix *out = make(TK_DTYPE_F32, 256, 1024, 1024, 0);
    const tk_matrix *in[] = {x};
    tk_tiling *t;
    tkt_expect_status(tk_tiling_create(&t, 256, 1024, 8, 128), TK_OK);
    struct mask_ctx m = {.caller = pthread_self()};
    tk_kernel *k;
    tkt_expect_status(tk_kernel_custom(&k, 1, mask_cb, &m), TK_OK);
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_THREAD_SAFE, 1), TK_OK);
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_THREADS, 3), TK_OK);
    for (int run = 0; run < 2; run++)   /* the run that starts them, and a later one */
        tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
    cr_assert_eq(memcmp(tk_matrix_data(out), tk_matrix_data(x), 256 * 1024 * sizeof(float)), 0);
    cr_assert_gt(atomic_load(&m.worker_bands), 0, "no band ran on a worker");
    cr_assert_eq(atomic_load(&m.int_open), 0, "a worker left SIGINT open");
    cr_assert_eq(atomic_load(&m.segv_blocked), 0, "a worker blocked SIGSEGV");
    tk_kernel_destroy(k);
    tk_tiling_destroy(t);
    tk_matrix_destroy(x);
    tk_matrix_destroy(out);
}

/* Two threads run one 3-thread kernel at once: one has the handle's
 * workers, the other threads of its own, and both get the oracle's bits. */
struct shared_run {
    tk_kernel *k;
    const tk_tiling *t;
    const tk_matrix *const *in;
    tk_matrix *out;
    int rc;
};

static void *shared_run_main(void *arg)
{
    struct shared_run *s = arg;
    for (int i = 0; i < 20 && !s->rc; i++)
        s->rc = tk_kernel_run(s->k, s->t, s->in, s->out);
    return NULL;
}

Test(kernel, a_kernel_run_by_two_threads_at_once_gives_both_the_bits, .timeout = 120)
{
    tk_matrix *x = make(TK_DTYPE_BF16, 256, 1024, 1024, 97);
    tk_matrix *y = make(TK_DTYPE_BF16, 256, 1024, 1024, 98);
    tk_matrix *out[2] = {make(TK_DTYPE_BF16, 256, 1024, 1024, 0),
                         make(TK_DTYPE_BF16, 256, 1024, 1024, 0)};
    const tk_matrix *in[] = {x, y};
    uint32_t *want = oracle_axpy(x, y, 0.7f);
    tk_tiling *t;
    tkt_expect_status(tk_tiling_create(&t, 256, 1024, 8, 128), TK_OK);
    tk_kernel *k;
    tkt_expect_status(tk_kernel_axpy(&k, 0.7f), TK_OK);
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_THREADS, 3), TK_OK);
    struct shared_run s[2] = {{k, t, in, out[0], 0}, {k, t, in, out[1], 0}};
    pthread_t other;
    cr_assert_eq(pthread_create(&other, NULL, shared_run_main, &s[1]), 0);
    shared_run_main(&s[0]);
    pthread_join(other, NULL);
    for (int i = 0; i < 2; i++) {
        tkt_expect_status(s[i].rc, TK_OK);
        expect_bits(out[i], want, "a run beside another");
        tk_matrix_destroy(out[i]);
    }
    free(want);
    tk_kernel_destroy(k);
    tk_tiling_destroy(t);
    tk_matrix_destroy(x);
    tk_matrix_destroy(y);
}

/* ---- every bit pattern: NaN, Inf, subnormals, ties, overflow ----------------------------- */

struct bits_case {
    int dtype, tail;
    bool blockwise;
    float alpha;
};

ParameterizedTestParameters(kernel, random_bit_patterns)
{
    static const float alphas[] = {2.0f, 0.5f, -3.0f};
    static struct bits_case p[2 * 3 * 2 * 3];
    size_t n = 0;
    for (int d = 0; d < 2; d++)
        for (int tail = TK_TAIL_PAD; tail <= TK_TAIL_SHIFT_INWARDS; tail++)
            for (int bw = 0; bw < 2; bw++)
                for (int a = 0; a < 3; a++)
                    if (!(tail == TK_TAIL_SHIFT_INWARDS && bw))
                        p[n++] = (struct bits_case){d ? TK_DTYPE_BF16 : TK_DTYPE_F32, tail,
                                                    bw, alphas[a]};
    return cr_make_param_array(struct bits_case, p, n);
}

/* Inputs of uniformly random bits.  Results must match bit for bit, except
 * that which NaN operand propagates is the hardware's choice, not part of
 * the contract: a NaN result must be matched by a NaN. */
ParameterizedTest(struct bits_case *p, kernel, random_bit_patterns)
{
    const int64_t rows = 64, cols = 300;
    tk_matrix *x, *y, *out;
    tkt_expect_status(tk_matrix_create(&x, p->dtype, rows, cols), TK_OK);
    tkt_expect_status(tk_matrix_create(&y, p->dtype, rows, cols), TK_OK);
    tkt_expect_status(tk_matrix_create(&out, p->dtype, rows, cols), TK_OK);
    uint64_t seed = 77;
    size_t bytes = (size_t)(rows * cols * tk_dtype_size(p->dtype));
    for (size_t i = 0; i < bytes; i++) {
        ((unsigned char *)tk_matrix_data(x))[i] = (unsigned char)tkt_next(&seed);
        ((unsigned char *)tk_matrix_data(y))[i] = (unsigned char)tkt_next(&seed);
    }
    /* Exact ties and overflow, where rounding is decided: 1 + 2^-8 (tie to
     * even, down), 1.0078125 + 2^-8 (tie, up), max + max (to Inf). */
    if (p->dtype == TK_DTYPE_BF16) {
        const uint16_t pairs[][2] = {{0x3F80, 0x3B80}, {0x3F81, 0x3B80}, {0x7F7F, 0x7F7F},
                                     {0x0001, 0x0001}, {0xFFC1, 0x7F80}, {0x8000, 0x0000}};
        for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
            ((uint16_t *)tk_matrix_data(x))[i] = pairs[i][0];
            ((uint16_t *)tk_matrix_data(y))[i] = pairs[i][1];
        }
    }
    const tk_matrix *in[] = {x, y};
    uint32_t *want = oracle_axpy(x, y, p->alpha);
    tk_tiling *t;
    tk_kernel *k;
    tkt_expect_status(tk_tiling_create(&t, rows, cols, 8, 128), TK_OK);
    tkt_expect_status(tk_tiling_set(t, TK_TILING_TAIL, p->tail), TK_OK);
    tkt_expect_status(tk_kernel_axpy(&k, p->alpha), TK_OK);
    if (p->blockwise)
        tkt_expect_status(tk_kernel_set(k, TK_KERNEL_BODY, TK_BODY_BLOCKWISE), TK_OK);
    tkt_expect_status(tk_kernel_run(k, t, in, out), TK_OK);
    long nans = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            uint32_t got = bits_at(out, r, c), w = want[r * cols + c];
            bool got_nan, want_nan;
            if (p->dtype == TK_DTYPE_F32) {
                got_nan = (got & 0x7FFFFFFFu) > 0x7F800000u;
                want_nan = (w & 0x7FFFFFFFu) > 0x7F800000u;
            } else {
                got_nan = (got & 0x7FFFu) > 0x7F80u;
                want_nan = (w & 0x7FFFu) > 0x7F80u;
                /* The single cast makes every bfloat16 NaN the quiet one. */
                if (got_nan)
                    cr_assert_eq(got & 0x7FFFu, 0x7FC0u, "NaN 0x%04x is not canonical", got);
            }
            nans += want_nan;
            if (want_nan)
                cr_assert(got_nan, "(%lld, %lld): got 0x%08x, want a NaN", (long long)r,
                          (long long)c, got);
            else
                cr_assert_eq(got, w, "(%lld, %lld): got 0x%08x, want 0x%08x", (long long)r,
                             (long long)c, got, w);
        }
    cr_assert_gt(nans, 0, "the data should reach NaN results");
    free(want);
    tk_kernel_destroy(k);
    tk_tiling_destroy(t);
    tk_matrix_destroy(x);
    tk_matrix_destroy(y);
    tk_matrix_destroy(out);
}

/* ---- re-entry ------------------------------------------------------------------ */

struct kernel_reentry {
    tk_kernel *self;
    tk_tiling *t;
    tk_matrix *x, *y, *out;
    int set, run;
};

/* A body that tries to change its own kernel (refused: the run reads its
 * settings throughout) and runs it on other matrices (allowed). */
static int kernel_reentrant(void *user, int64_t rows, int64_t cols, int64_t ld,
                            const float *const *in, float *out)
{
    struct kernel_reentry *r = user;
    if (r->run == 1) {  /* the outer run's first call only */
        r->set = tk_kernel_set(r->self, TK_KERNEL_THREADS, 2);
        r->run = 0;
        const tk_matrix *inner[2] = {r->x, r->y};
        r->run = tk_kernel_run(r->self, r->t, inner, r->out);
    }
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            out[i * ld + j] = in[0][i * ld + j] + in[1][i * ld + j];
    return 0;
}

Test(kernel, a_body_cannot_change_its_own_kernel_but_may_run_it)
{
    struct kernel_reentry r = {.run = 1};
    tkt_expect_status(tk_kernel_custom(&r.self, 2, kernel_reentrant, &r), TK_OK);
    tkt_expect_status(tk_tiling_create(&r.t, 9, 130, 8, 128), TK_OK);
    r.x = make(TK_DTYPE_F32, 9, 130, 130, 1);
    r.y = make(TK_DTYPE_F32, 9, 130, 130, 2);
    r.out = make(TK_DTYPE_F32, 9, 130, 130, 3);
    tk_matrix *out = make(TK_DTYPE_F32, 9, 130, 130, 4);
    const tk_matrix *in[2] = {r.x, r.y};
    tkt_expect_status(tk_kernel_run(r.self, r.t, in, out), TK_OK);
    cr_assert_eq(r.set, TK_ESTATE);
    cr_assert_eq(r.run, TK_OK, "a body may run its own kernel");
    cr_assert(!memcmp(tk_matrix_data(out), tk_matrix_data(r.out), 9 * 130 * sizeof(float)));
    tkt_expect_status(tk_kernel_set(r.self, TK_KERNEL_THREADS, 2), TK_OK);  /* after the run */
    tk_matrix_destroy(out);
    tk_matrix_destroy(r.x);
    tk_matrix_destroy(r.y);
    tk_matrix_destroy(r.out);
    tk_tiling_destroy(r.t);
    tk_kernel_destroy(r.self);
}
