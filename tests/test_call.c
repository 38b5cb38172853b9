/* test_call.c - tk_call: the worked kernels of pallas_call (matmul with an
 * f32 accumulator, row sum, bias add, transpose, the seed's axpy), each
 * against an independent untiled loop, bit for bit where the order of
 * operations is the same and on small integers (every sum exact) where it
 * is not; tails on every axis, K included.  Then Pallas's semantics: skipped
 * copies, resident outputs, NaN-initialized outputs, padding fills and the
 * padding-dependence check, and every refusal with its status. */
#include "tk_test.h"

#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>

static float *ints(int64_t n, uint64_t seed)
{
    float *v = malloc((size_t)n * sizeof *v);
    cr_assert_not_null(v);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)((int)(tkt_next(&seed) % 7) - 3);  /* -3 .. 3 */
    return v;
}

static tk_matrix *from(int dtype, int64_t rows, int64_t cols, const float *src)
{
    tk_matrix *m;
    tkt_expect_status(tk_matrix_from_f32(&m, dtype, rows, cols, src, cols), TK_OK);
    return m;
}

static tk_matrix *blank(int dtype, int64_t rows, int64_t cols)
{
    tk_matrix *m;
    tkt_expect_status(tk_matrix_create(&m, dtype, rows, cols), TK_OK);
    memset(tk_matrix_data(m), 0x55, (size_t)(rows * cols * tk_dtype_size(dtype)));
    return m;
}

static float at(const tk_matrix *m, int64_t r, int64_t c)
{
    float v;
    const char *p = (const char *)tk_matrix_data(m) +
                    (size_t)((r * tk_matrix_row_stride(m) + c) * tk_dtype_size(tk_matrix_dtype(m)));
    if (tk_matrix_dtype(m) == TK_DTYPE_BF16) {
        uint16_t b;
        memcpy(&b, p, 2);
        v = tk_bf16_to_f32(b);
    } else {
        memcpy(&v, p, 4);
    }
    return v;
}

static float *B(tk_block *const *b, int i, int64_t r, int64_t c)
{
    return b[i]->data + r * b[i]->ld + c;
}

static double stat(const tk_call *c, int which)
{
    double v = -1;
    tkt_expect_status(tk_call_stat(c, which, &v), TK_OK);
    return v;
}

/* ---- matmul: grid (i, j, k), x (i, k), y (k, j), out (i, j) over k ---------- */

static int matmul_body(void *user, tk_block *const *b, int n)
{
    (void)user;
    cr_assert_eq(n, 3);
    tk_block *x = b[0], *o = b[2];
    if (o->grid[2] == 0)  /* pl.when(k == 0): the accumulator starts at zero */
        for (int64_t r = 0; r < o->rows; r++)
            for (int64_t c = 0; c < o->cols; c++)
                *B(b, 2, r, c) = 0.0f;
    for (int64_t r = 0; r < o->rows; r++)
        for (int64_t k = 0; k < x->cols; k++)
            for (int64_t c = 0; c < o->cols; c++)
                *B(b, 2, r, c) += *B(b, 0, r, k) * *B(b, 1, k, c);
    return 0;
}

static tk_call *matmul_call(int out_dtype, int64_t M, int64_t N, int64_t K, int64_t bm,
                            int64_t bn, int64_t bk)
{
    int64_t grid[3] = {(M + bm - 1) / bm, (N + bn - 1) / bn, (K + bk - 1) / bk};
    static const int64_t xmap[8] = {1, 0, 0, 0, 0, 0, 1, 0};  /* (i, k) */
    static const int64_t ymap[8] = {0, 0, 1, 0, 0, 1, 0, 0};  /* (k, j) */
    static const int64_t omap[8] = {1, 0, 0, 0, 0, 1, 0, 0};  /* (i, j) */
    tk_call *c;
    tkt_expect_status(tk_call_create(&c, 3, grid, matmul_body, NULL), TK_OK);
    cr_assert_eq(tk_call_add_input(c, TK_DTYPE_F32, M, K, bm, bk, xmap), 0);
    cr_assert_eq(tk_call_add_input(c, TK_DTYPE_F32, K, N, bk, bn, ymap), 1);
    cr_assert_eq(tk_call_add_output(c, out_dtype, M, N, bm, bn, omap), 0);
    tkt_expect_status(tk_call_set_dimension(c, 0, TK_DIM_PARALLEL), TK_OK);
    tkt_expect_status(tk_call_set_dimension(c, 1, TK_DIM_PARALLEL), TK_OK);
    return c;
}

/* out is x y exactly (small integers: every order gives these bits), cast
 * once to its dtype. */
static void expect_matmul(const tk_matrix *out, const float *x, const float *y, int64_t M,
                          int64_t N, int64_t K)
{
    bool bf16 = tk_matrix_dtype(out) == TK_DTYPE_BF16;
    for (int64_t r = 0; r < M; r++)
        for (int64_t col = 0; col < N; col++) {
            float s = 0.0f;
            for (int64_t k = 0; k < K; k++)
                s += x[r * K + k] * y[k * N + col];
            float want = bf16 ? tk_bf16_to_f32(tk_bf16_from_f32(s)) : s;
            cr_assert_eq(tkt_bits(at(out, r, col)), tkt_bits(want), "(%lld, %lld): %g, want %g",
                         (long long)r, (long long)col, at(out, r, col), want);
        }
}

static void destroy_all(tk_call *c, tk_matrix *const *in, tk_matrix *out, float *x, float *y)
{
    tk_call_destroy(c);
    tk_matrix_destroy(in[0]);
    tk_matrix_destroy(in[1]);
    tk_matrix_destroy(out);
    free(x);
    free(y);
}

struct mm_case { int out_dtype; int64_t M, N, K, bm, bn, bk; };

ParameterizedTestParameters(call, matmul_exact_with_tails)
{
    static struct mm_case cases[] = {
        {TK_DTYPE_F32, 64, 256, 32, 16, 128, 16},   /* whole blocks */
        {TK_DTYPE_F32, 37, 300, 45, 16, 128, 16},   /* tails on M, N and K */
        {TK_DTYPE_BF16, 37, 300, 45, 16, 128, 16},  /* f32 accumulate, bf16 cast once */
        {TK_DTYPE_BF16, 9, 129, 200, 8, 128, 64},
        {TK_DTYPE_F32, 1, 1, 1, 8, 128, 8},
    };
    return cr_make_param_array(struct mm_case, cases, sizeof cases / sizeof *cases);
}

ParameterizedTest(struct mm_case *p, call, matmul_exact_with_tails)
{
    float *x = ints(p->M * p->K, 1), *y = ints(p->K * p->N, 2);
    tk_matrix *in[2] = {from(TK_DTYPE_F32, p->M, p->K, x), from(TK_DTYPE_F32, p->K, p->N, y)};
    tk_matrix *out = blank(p->out_dtype, p->M, p->N);
    tk_call *c = matmul_call(p->out_dtype, p->M, p->N, p->K, p->bm, p->bn, p->bk);
    tkt_expect_status(tk_call_run(c, 2, (const tk_matrix *const *)in, 1, &out), TK_OK);
    expect_matmul(out, x, y, p->M, p->N, p->K);
    int64_t gi = (p->M + p->bm - 1) / p->bm, gj = (p->N + p->bn - 1) / p->bn;
    /* Each output block is resident across k and written back once. */
    cr_assert_eq(stat(c, TK_STAT_COPIES_OUT), (double)(gi * gj));
    cr_assert_eq(stat(c, TK_STAT_STEPS), (double)(gi * gj * ((p->K + p->bk - 1) / p->bk)));
    int64_t changed = -1;
    tkt_expect_status(tk_call_check_padding(c, 2, (const tk_matrix *const *)in, &changed),
                      (p->M % p->bm || p->N % p->bn || p->K % p->bk) ? TK_EMISMATCH : TK_OK);
    destroy_all(c, in, out, x, y);
}

/* The K-tail bug: a body that sums the whole padded K extent reads the
 * padding; with zero padding the answer is right by luck, and the check
 * names it.  One that stops at valid_cols does not depend on the padding. */
static int matmul_valid_k(void *user, tk_block *const *b, int n)
{
    (void)user;
    (void)n;
    tk_block *x = b[0], *o = b[2];
    if (o->grid[2] == 0)
        for (int64_t r = 0; r < o->rows; r++)
            for (int64_t c = 0; c < o->cols; c++)
                *B(b, 2, r, c) = 0.0f;
    for (int64_t r = 0; r < o->rows; r++)
        for (int64_t k = 0; k < x->valid_cols; k++)
            for (int64_t c = 0; c < o->cols; c++)
                *B(b, 2, r, c) += *B(b, 0, r, k) * *B(b, 1, k, c);
    return 0;
}

Test(call, padding_check_finds_the_k_tail_read)
{
    float *x = ints(16 * 45, 3), *y = ints(45 * 128, 4);
    tk_matrix *in[2] = {from(TK_DTYPE_F32, 16, 45, x), from(TK_DTYPE_F32, 45, 128, y)};
    tk_call *c = matmul_call(TK_DTYPE_F32, 16, 128, 45, 16, 128, 16);
    int64_t changed = -1;
    tkt_expect_status(tk_call_check_padding(c, 2, (const tk_matrix *const *)in, &changed),
                      TK_EMISMATCH);
    cr_assert_eq(changed, 16 * 128, "every output element reads the K tail");
    cr_assert(strstr(tk_last_error_message(), "output 0 (0, 0)"), "%s", tk_last_error_message());
    tk_call_destroy(c);
    /* Only M and N fit whole blocks here, so the careful body is clean. */
    int64_t grid[3] = {1, 1, 3};
    static const int64_t xmap[8] = {1, 0, 0, 0, 0, 0, 1, 0}, ymap[8] = {0, 0, 1, 0, 0, 1, 0, 0},
                         omap[8] = {1, 0, 0, 0, 0, 1, 0, 0};
    tkt_expect_status(tk_call_create(&c, 3, grid, matmul_valid_k, NULL), TK_OK);
    tk_call_add_input(c, TK_DTYPE_F32, 16, 45, 16, 16, xmap);
    tk_call_add_input(c, TK_DTYPE_F32, 45, 128, 16, 128, ymap);
    tk_call_add_output(c, TK_DTYPE_F32, 16, 128, 16, 128, omap);
    /* In the last K block x has 13 valid columns and y 13 valid rows: the
     * careful body never touches either padding, whatever it holds. */
    tkt_expect_status(tk_call_check_padding(c, 2, (const tk_matrix *const *)in, &changed), TK_OK);
    cr_assert_eq(changed, 0);
    tk_call_destroy(c);
    tk_matrix_destroy(in[0]);
    tk_matrix_destroy(in[1]);
    free(x);
    free(y);
}

/* ---- row sum: out block (i, 0) revisited along j ------------------------------ */

static int rowsum_body(void *user, tk_block *const *b, int n)
{
    (void)user;
    (void)n;
    tk_block *x = b[0], *o = b[1];
    if (x->grid[1] == 0)
        for (int64_t r = 0; r < o->rows; r++)
            *B(b, 1, r, 0) = 0.0f;
    for (int64_t r = 0; r < x->rows; r++)
        for (int64_t c = 0; c < x->valid_cols; c++)
            *B(b, 1, r, 0) += *B(b, 0, r, c);
    return 0;
}

static tk_call *rowsum_call(int64_t R, int64_t C, int64_t br, int64_t bc)
{
    int64_t grid[2] = {(R + br - 1) / br, (C + bc - 1) / bc};
    static const int64_t omap[6] = {1, 0, 0, 0, 0, 0};  /* (i, 0) */
    tk_call *c;
    tkt_expect_status(tk_call_create(&c, 2, grid, rowsum_body, NULL), TK_OK);
    cr_assert_eq(tk_call_add_input(c, TK_DTYPE_F32, R, C, br, bc, NULL), 0);
    cr_assert_eq(tk_call_add_output(c, TK_DTYPE_F32, R, 1, br, 1, omap), 0);
    return c;
}

Test(call, row_sum_exact_and_resident)
{
    int64_t R = 19, C = 300;
    float *x = ints(R * C, 5);
    tk_matrix *in = from(TK_DTYPE_F32, R, C, x), *out = blank(TK_DTYPE_F32, R, 1);
    tk_call *c = rowsum_call(R, C, 8, 128);
    tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&in, 1, &out), TK_OK);
    for (int64_t r = 0; r < R; r++) {
        float s = 0.0f;
        for (int64_t j = 0; j < C; j++)
            s += x[r * C + j];
        cr_assert_eq(at(out, r, 0), s, "row %lld", (long long)r);
    }
    cr_assert_eq(stat(c, TK_STAT_COPIES_OUT), 3.0, "one residency per row block");
    cr_assert_eq(stat(c, TK_STAT_COPIES_IN), 9.0);
    /* Summing only valid columns does not depend on the padding. */
    int64_t changed = -1;
    tkt_expect_status(tk_call_check_padding(c, 1, (const tk_matrix *const *)&in, &changed), TK_OK);
    cr_assert_eq(changed, 0);
    /* Along a parallel axis the revisit is refused, outputs untouched. */
    memset(tk_matrix_data(out), 0x55, (size_t)R * 4);
    tkt_expect_status(tk_call_set_dimension(c, 1, TK_DIM_PARALLEL), TK_OK);
    tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&in, 1, &out), TK_ELAYOUT);
    cr_assert(strstr(tk_last_error_message(), "parallel axis 1"), "%s", tk_last_error_message());
    cr_assert(strstr(tk_last_error_message(), "(0, 0) and (0, 1)"), "%s",
              tk_last_error_message());
    cr_assert_eq(tkt_bits(at(out, 0, 0)), 0x55555555u);
    tk_call_destroy(c);
    tk_matrix_destroy(in);
    tk_matrix_destroy(out);
    free(x);
}

/* ---- bias add: a (1, n) operand whose map ignores the row axis ------------- */

static int bias_body(void *user, tk_block *const *b, int n)
{
    (void)user;
    (void)n;
    for (int64_t r = 0; r < b[0]->rows; r++)
        for (int64_t c = 0; c < b[0]->cols; c++)
            *B(b, 2, r, c) = *B(b, 0, r, c) + *B(b, 1, 0, c);
    return 0;
}

Test(call, bias_add_skips_the_repeated_bias_block)
{
    int64_t R = 41, C = 128, br = 8;
    float *x = ints(R * C, 6), *bias = ints(C, 7);
    for (int dtype = TK_DTYPE_F32; dtype <= TK_DTYPE_BF16; dtype++) {
        tk_matrix *in[2] = {from(dtype, R, C, x), from(dtype, 1, C, bias)};
        tk_matrix *out = blank(dtype, R, C);
        int64_t grid[2] = {(R + br - 1) / br, 1};
        static const int64_t bmap[6] = {0, 0, 0, 0, 1, 0};  /* (0, j) */
        tk_call *c;
        tkt_expect_status(tk_call_create(&c, 2, grid, bias_body, NULL), TK_OK);
        tk_call_add_input(c, dtype, R, C, br, C, NULL);
        tk_call_add_input(c, dtype, 1, C, 1, C, bmap);
        tk_call_add_output(c, dtype, R, C, br, C, NULL);
        tkt_expect_status(tk_call_run(c, 2, (const tk_matrix *const *)in, 1, &out), TK_OK);
        for (int64_t r = 0; r < R; r++)
            for (int64_t j = 0; j < C; j++)
                cr_assert_eq(at(out, r, j), x[r * C + j] + bias[j]);
        /* The bias block is copied once and skipped on the other 5 steps. */
        cr_assert_eq(stat(c, TK_STAT_COPIES_SKIPPED), 5.0);
        cr_assert_eq(stat(c, TK_STAT_COPIES_IN), 6.0 + 1.0);
        tk_call_destroy(c);
        tk_matrix_destroy(in[0]);
        tk_matrix_destroy(in[1]);
        tk_matrix_destroy(out);
    }
    free(x);
    free(bias);
}

/* ---- transpose: index map (j, i) -------------------------------------------- */

static int transpose_body(void *user, tk_block *const *b, int n)
{
    (void)user;
    (void)n;
    for (int64_t r = 0; r < b[1]->rows; r++)
        for (int64_t c = 0; c < b[1]->cols; c++)
            *B(b, 1, r, c) = *B(b, 0, c, r);
    return 0;
}

Test(call, transpose_bit_for_bit)
{
    int64_t R = 37, C = 150, bs = 16;
    float *x = malloc((size_t)(R * C) * sizeof *x);
    tkt_fill(x, (size_t)(R * C), 8);
    tk_matrix *in = from(TK_DTYPE_F32, R, C, x), *out = blank(TK_DTYPE_F32, C, R);
    int64_t grid[2] = {(C + bs - 1) / bs, (R + bs - 1) / bs};
    static const int64_t xmap[6] = {0, 1, 0, 1, 0, 0};  /* (j, i) */
    tk_call *c;
    tkt_expect_status(tk_call_create(&c, 2, grid, transpose_body, NULL), TK_OK);
    tk_call_add_input(c, TK_DTYPE_F32, R, C, bs, bs, xmap);
    tk_call_add_output(c, TK_DTYPE_F32, C, R, bs, bs, NULL);
    tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&in, 1, &out), TK_OK);
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < C; j++)
            cr_assert_eq(tkt_bits(at(out, j, r)), tkt_bits(x[r * C + j]));
    tk_call_destroy(c);
    tk_matrix_destroy(in);
    tk_matrix_destroy(out);
    free(x);
}

/* ---- the seed's axpy: the same bits as tk_kernel_run ------------------------ */

static int axpy_body(void *user, tk_block *const *b, int n)
{
    float alpha = *(const float *)user;
    (void)n;
    for (int64_t r = 0; r < b[0]->rows; r++)
        for (int64_t c = 0; c < b[0]->cols; c++)
            *B(b, 2, r, c) = alpha * *B(b, 0, r, c) + *B(b, 1, r, c);
    return 0;
}

/* The seed's axpy through the call, small and with outputs large enough
 * (8 MiB and more) to be written back by streaming stores, with and
 * without the undo copy: tk_kernel_run's bits each time. */
struct axpy_case { int64_t R, C; int undo; };

ParameterizedTestParameters(call, axpy_equals_tk_kernel_run)
{
    static struct axpy_case cases[] = {{17, 257, 1}, {17, 257, 0}, {1500, 2900, 1},
                                       {1500, 2900, 0}};
    return cr_make_param_array(struct axpy_case, cases, sizeof cases / sizeof *cases);
}

ParameterizedTest(struct axpy_case *p, call, axpy_equals_tk_kernel_run)
{
    static float alpha = 3.0f;
    int64_t R = p->R, C = p->C;
    float *x = malloc((size_t)(R * C) * sizeof *x), *y = malloc((size_t)(R * C) * sizeof *y);
    tkt_fill(x, (size_t)(R * C), 9);
    tkt_fill(y, (size_t)(R * C), 10);
    tk_kernel *k;
    tkt_expect_status(tk_kernel_axpy(&k, alpha), TK_OK);
    for (int dtype = TK_DTYPE_F32; dtype <= TK_DTYPE_BF16; dtype++) {
        tk_matrix *in[2] = {from(dtype, R, C, x), from(dtype, R, C, y)};
        tk_matrix *got = blank(dtype, R, C), *want = blank(dtype, R, C);
        tk_tiling *t;
        tkt_expect_status(tk_tiling_create(&t, R, C, 8, 128), TK_OK);
        tkt_expect_status(tk_kernel_run(k, t, (const tk_matrix *const *)in, want), TK_OK);
        int64_t grid[2] = {(R + 7) / 8, (C + 127) / 128};
        tk_call *c;
        tkt_expect_status(tk_call_create(&c, 2, grid, axpy_body, &alpha), TK_OK);
        tkt_expect_status(tk_call_set(c, TK_CALL_UNDO, p->undo), TK_OK);
        tk_call_add_input(c, dtype, R, C, 8, 128, NULL);
        tk_call_add_input(c, dtype, R, C, 8, 128, NULL);
        tk_call_add_output(c, dtype, R, C, 8, 128, NULL);
        tkt_expect_status(tk_call_run(c, 2, (const tk_matrix *const *)in, 1, &got), TK_OK);
        cr_assert(!memcmp(tk_matrix_data(got), tk_matrix_data(want),
                          (size_t)(R * C * tk_dtype_size(dtype))), "%s", tk_dtype_name(dtype));
        cr_assert_eq(stat(c, TK_STAT_COPIES_SKIPPED), 0.0);
        tk_call_destroy(c);
        tk_tiling_destroy(t);
        tk_matrix_destroy(in[0]);
        tk_matrix_destroy(in[1]);
        tk_matrix_destroy(got);
        tk_matrix_destroy(want);
    }
    tk_kernel_destroy(k);
    free(x);
    free(y);
}

/* A blockwise body that reads its whole block, padding included: each
 * element plus the sum of its block row. */
static void row_sums(int64_t rows, int64_t cols, const float *in, int64_t in_ld, float *out,
                     int64_t out_ld)
{
    for (int64_t r = 0; r < rows; r++) {
        float sum = 0.0f;
        for (int64_t c = 0; c < cols; c++)
            sum += in[r * in_ld + c];
        for (int64_t c = 0; c < cols; c++)
            out[r * out_ld + c] = in[r * in_ld + c] + sum;
    }
}

static int row_sums_kernel(void *user, int64_t rows, int64_t cols, int64_t ld,
                           const float *const *in, float *out)
{
    (void)user;
    row_sums(rows, cols, in[0], ld, out, ld);
    return 0;
}

static int row_sums_call(void *user, tk_block *const *b, int n)
{
    (void)user;
    (void)n;
    row_sums(b[0]->rows, b[0]->cols, b[0]->data, b[0]->ld, b[1]->data, b[1]->ld);
    return 0;
}

/* A kernel over a tiling (TK_TAIL_MASK) is the call whose grid is its tiles
 * and whose maps are the identity: a blockwise body, which sees each block
 * zero-padded, gives the same bits either way, with tails on both axes. */
Test(call, a_blockwise_kernel_is_the_identity_mapped_call_of_its_tiles)
{
    int64_t R = 20, C = 300;
    float *x = ints(R * C, 18);
    tk_kernel *k;
    tkt_expect_status(tk_kernel_custom(&k, 1, row_sums_kernel, NULL), TK_OK);
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_BODY, TK_BODY_BLOCKWISE), TK_OK);
    for (int dtype = TK_DTYPE_F32; dtype <= TK_DTYPE_BF16; dtype++) {
        tk_matrix *in = from(dtype, R, C, x), *got = blank(dtype, R, C),
                  *want = blank(dtype, R, C);
        tk_tiling *t;
        tkt_expect_status(tk_tiling_create(&t, R, C, 8, 128), TK_OK);
        tkt_expect_status(tk_tiling_set(t, TK_TILING_TAIL, TK_TAIL_MASK), TK_OK);
        tkt_expect_status(tk_kernel_run(k, t, (const tk_matrix *const *)&in, want), TK_OK);
        int64_t grid[2] = {3, 3};
        tk_call *c;
        tkt_expect_status(tk_call_create(&c, 2, grid, row_sums_call, NULL), TK_OK);
        tk_call_add_input(c, dtype, R, C, 8, 128, NULL);
        tk_call_add_output(c, dtype, R, C, 8, 128, NULL);
        tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&in, 1, &got), TK_OK);
        cr_assert(!memcmp(tk_matrix_data(got), tk_matrix_data(want),
                          (size_t)(R * C * tk_dtype_size(dtype))), "%s", tk_dtype_name(dtype));
        tk_call_destroy(c);
        tk_tiling_destroy(t);
        tk_matrix_destroy(in);
        tk_matrix_destroy(got);
        tk_matrix_destroy(want);
    }
    tk_kernel_destroy(k);
    free(x);
}

/* ---- the call of a kernel (tk_call_create_kernel) ------------------------------ */

/* out = x * x - y, elementwise. */
static int square_minus(void *user, int64_t rows, int64_t cols, int64_t ld,
                        const float *const *in, float *out)
{
    (void)user;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            out[r * ld + c] = in[0][r * ld + c] * in[0][r * ld + c] - in[1][r * ld + c];
    return 0;
}

enum { AXPY, CUSTOM, BLOCKWISE };
struct kcall_case { int kind, tail, threads; int64_t R, C; };

ParameterizedTestParameters(call, the_call_of_a_kernel_is_tk_kernel_run)
{
    /* 1500 x 2900: outputs of 8 MiB and more, which the runs stream. */
    static struct kcall_case cases[] = {
        {AXPY, TK_TAIL_MASK, 1, 20, 300},       {AXPY, TK_TAIL_PAD, 1, 20, 300},
        {AXPY, TK_TAIL_MASK, 2, 1500, 2900},    {CUSTOM, TK_TAIL_MASK, 1, 20, 300},
        {CUSTOM, TK_TAIL_PAD, 1, 20, 300},      {CUSTOM, TK_TAIL_MASK, 1, 1500, 2900},
        {BLOCKWISE, TK_TAIL_MASK, 1, 20, 300},  {BLOCKWISE, TK_TAIL_PAD, 1, 20, 300},
        {BLOCKWISE, TK_TAIL_MASK, 1, 16, 256}};
    return cr_make_param_array(struct kcall_case, cases, sizeof cases / sizeof *cases);
}

/* Its run is tk_kernel_run's, bits and tails; its statistics are those of
 * the steps run one by one (NaN fill, which an elementwise body never
 * sees); its pipeline computes the same bits; and the padding check finds
 * exactly the elements a blockwise body sums padding into: the last block
 * column's (300 = 2 x 128 + 44), none without tails. */
ParameterizedTest(struct kcall_case *p, call, the_call_of_a_kernel_is_tk_kernel_run)
{
    int64_t R = p->R, C = p->C;
    size_t n = (size_t)(R * C);
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    tkt_fill(x, n, 31);
    tkt_fill(y, n, 32);
    tk_kernel *k;
    int n_in = p->kind == BLOCKWISE ? 1 : 2;
    if (p->kind == AXPY)
        tkt_expect_status(tk_kernel_axpy(&k, 3.0f), TK_OK);
    else
        tkt_expect_status(tk_kernel_custom(&k, n_in, p->kind == CUSTOM ? square_minus
                                                                      : row_sums_kernel,
                                           NULL), TK_OK);
    if (p->kind == BLOCKWISE)
        tkt_expect_status(tk_kernel_set(k, TK_KERNEL_BODY, TK_BODY_BLOCKWISE), TK_OK);
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_THREADS, p->threads), TK_OK);
    tk_device *d;
    tkt_expect_status(tk_device_simulated(&d, "TPU v5 lite"), TK_OK);
    for (int dtype = TK_DTYPE_F32; dtype <= TK_DTYPE_BF16; dtype++) {
        size_t bytes = n * (size_t)tk_dtype_size(dtype);
        tk_matrix *in[2] = {from(dtype, R, C, x), from(dtype, R, C, y)};
        tk_matrix *want = blank(dtype, R, C), *got = blank(dtype, R, C),
                  *steps = blank(dtype, R, C);
        tk_tiling *t;
        tkt_expect_status(tk_tiling_create(&t, R, C, 8, 128), TK_OK);
        tkt_expect_status(tk_tiling_set(t, TK_TILING_TAIL, p->tail), TK_OK);
        tkt_expect_status(tk_kernel_run(k, t, (const tk_matrix *const *)in, want), TK_OK);
        tk_call *c;
        tkt_expect_status(tk_call_create_kernel(&c, k, t, dtype), TK_OK);
        /* The call copied the tiling: a later change is not its. */
        tkt_expect_status(tk_tiling_set(t, TK_TILING_TAIL, TK_TAIL_SHIFT_INWARDS), TK_OK);
        tkt_expect_status(tk_call_run(c, n_in, (const tk_matrix *const *)in, 1, &got), TK_OK);
        cr_assert(!memcmp(tk_matrix_data(got), tk_matrix_data(want), bytes), "%s",
                  tk_dtype_name(dtype));
        double fast[6];
        for (int s = 0; s < 6; s++)
            fast[s] = stat(c, TK_STAT_STEPS + s);
        cr_assert_eq(fast[0], (double)(((R + 7) / 8) * ((C + 127) / 128)));
        if (p->kind != BLOCKWISE) {
            tkt_expect_status(tk_call_set(c, TK_CALL_PAD, TK_PAD_NAN), TK_OK);
            tkt_expect_status(tk_call_run(c, n_in, (const tk_matrix *const *)in, 1, &steps),
                              TK_OK);
            cr_assert(!memcmp(tk_matrix_data(steps), tk_matrix_data(want), bytes));
            for (int s = 0; s < 6; s++)
                cr_assert_eq(stat(c, TK_STAT_STEPS + s), fast[s], "statistic %d", s);
            tkt_expect_status(tk_call_set(c, TK_CALL_PAD, TK_PAD_ZERO), TK_OK);
        }
        if (R * C < 100000) {   /* the schedule's slots: small shapes only */
            tk_pipeline *pl;
            tk_matrix *sim = blank(dtype, R, C);
            tkt_expect_status(tk_pipeline_create_call(&pl, c, d), TK_OK);
            tkt_expect_status(tk_pipeline_run_call(pl, n_in, (const tk_matrix *const *)in, 1,
                                                   &sim), TK_OK);
            cr_assert(!memcmp(tk_matrix_data(sim), tk_matrix_data(want), bytes));
            tk_pipeline_destroy(pl);
            tk_matrix_destroy(sim);
            int64_t changed = -1;
            int64_t tail = p->kind == BLOCKWISE ? R * (C % 128) : 0;
            tkt_expect_status(tk_call_check_padding(c, n_in, (const tk_matrix *const *)in,
                                                    &changed),
                              tail ? TK_EMISMATCH : TK_OK);
            cr_assert_eq(changed, tail);
        }
        tk_call_destroy(c);
        tk_tiling_destroy(t);
        tk_matrix_destroy(in[0]);
        tk_matrix_destroy(in[1]);
        tk_matrix_destroy(want);
        tk_matrix_destroy(got);
        tk_matrix_destroy(steps);
    }
    tk_device_destroy(d);
    tk_kernel_destroy(k);
    free(x);
    free(y);
}

/* Fails on its third body call; user: the call count. */
static int third_fails(void *user, int64_t rows, int64_t cols, int64_t ld,
                       const float *const *in, float *out)
{
    if (++*(int *)user == 3)
        return 9;
    return square_minus(NULL, rows, cols, ld, in, out);
}

/* A failing body: the call's TK_CALL_UNDO decides (not the kernel's), and
 * the message names tk_call_run. */
Test(call, a_call_of_a_kernel_undoes_by_its_own_setting)
{
    int64_t R = 40, C = 300;
    float *x = ints(R * C, 41);
    int calls = 0;
    tk_kernel *k;
    tkt_expect_status(tk_kernel_custom(&k, 2, third_fails, &calls), TK_OK);
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_UNDO, 0), TK_OK);
    tk_matrix *in[2] = {from(TK_DTYPE_F32, R, C, x), from(TK_DTYPE_F32, R, C, x)};
    tk_matrix *out = blank(TK_DTYPE_F32, R, C), *old = blank(TK_DTYPE_F32, R, C);
    tk_tiling *t;
    tk_call *c;
    tkt_expect_status(tk_tiling_create(&t, R, C, 8, 128), TK_OK);
    tkt_expect_status(tk_call_create_kernel(&c, k, t, TK_DTYPE_F32), TK_OK);
    tkt_expect_status(tk_call_run(c, 2, (const tk_matrix *const *)in, 1, &out), TK_ECALLBACK);
    cr_assert(!memcmp(tk_matrix_data(out), tk_matrix_data(old), (size_t)(R * C) * 4));
    cr_assert(!strncmp(tk_last_error_message(), "tk_call_run: kernel body returned 9", 35),
              "%s", tk_last_error_message());
    cr_assert(strstr(tk_last_error_message(), "the output is unchanged"), "%s",
              tk_last_error_message());
    calls = 0;
    tkt_expect_status(tk_call_set(c, TK_CALL_UNDO, 0), TK_OK);
    tkt_expect_status(tk_call_run(c, 2, (const tk_matrix *const *)in, 1, &out), TK_ECALLBACK);
    cr_assert(strstr(tk_last_error_message(), "may be partly written (TK_CALL_UNDO is 0)"),
              "%s", tk_last_error_message());
    tk_call_destroy(c);
    tk_tiling_destroy(t);
    tk_matrix_destroy(in[0]);
    tk_matrix_destroy(in[1]);
    tk_matrix_destroy(out);
    tk_matrix_destroy(old);
    tk_kernel_destroy(k);
    free(x);
}

static int same_block(void *user, const int64_t *g, int rank, int64_t *br, int64_t *bc)
{
    (void)user, (void)rank;
    *br = g[0], *bc = g[1];
    return 0;
}

/* Every element of the block: the block's last column in its row, which
 * past the edge is the fill. */
static int last_column(void *user, int64_t rows, int64_t cols, int64_t ld,
                       const float *const *in, float *out)
{
    (void)user;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            out[r * ld + c] = in[0][r * ld + cols - 1];
    return 0;
}

/* A fill of -0 is not zero padding: the edge block sees it. */
Test(call, a_call_of_a_kernel_sees_a_negative_zero_fill)
{
    float *x = ints(8 * 200, 3);
    tk_kernel *k;
    tk_tiling *t;
    tk_call *c;
    tkt_expect_status(tk_kernel_custom(&k, 1, last_column, NULL), TK_OK);
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_BODY, TK_BODY_BLOCKWISE), TK_OK);
    tkt_expect_status(tk_tiling_create(&t, 8, 200, 8, 128), TK_OK);
    tkt_expect_status(tk_call_create_kernel(&c, k, t, TK_DTYPE_F32), TK_OK);
    tk_matrix *in = from(TK_DTYPE_F32, 8, 200, x), *out = blank(TK_DTYPE_F32, 8, 200);
    for (int neg = 0; neg < 2; neg++) {
        tkt_expect_status(tk_call_set_pad_value(c, neg ? -0.0f : 0.0f), TK_OK);
        tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&in, 1, &out), TK_OK);
        uint32_t bits;
        float v = at(out, 5, 150);   /* in the edge block */
        memcpy(&bits, &v, sizeof bits);
        cr_assert_eq(bits, neg ? 0x80000000u : 0u, "fill %s0: 0x%08x", neg ? "-" : "+", bits);
    }
    tk_call_destroy(c);
    tk_tiling_destroy(t);
    tk_matrix_destroy(in);
    tk_matrix_destroy(out);
    tk_kernel_destroy(k);
    free(x);
}

/* user: the kernel, and the status of changing it from its body. */
struct change { tk_kernel *k; int rc; };

static int changes_its_kernel(void *user, int64_t rows, int64_t cols, int64_t ld,
                              const float *const *in, float *out)
{
    struct change *ch = user;
    ch->rc = tk_kernel_set(ch->k, TK_KERNEL_THREADS, 2);
    return square_minus(NULL, rows, cols, ld, in, out);
}

/* Every run of a call of a kernel holds the kernel: its executor's, the
 * steps' (NaN fill) and a pipeline's slot by slot. */
Test(call, a_call_of_a_kernel_holds_its_kernel_on_every_path)
{
    struct change ch = {NULL, TK_OK};
    tk_tiling *t;
    tk_call *c;
    tk_device *d;
    tk_pipeline *pl;
    float *x = ints(20 * 300, 4);
    tkt_expect_status(tk_kernel_custom(&ch.k, 2, changes_its_kernel, &ch), TK_OK);
    tkt_expect_status(tk_tiling_create(&t, 20, 300, 8, 128), TK_OK);
    tkt_expect_status(tk_call_create_kernel(&c, ch.k, t, TK_DTYPE_F32), TK_OK);
    tkt_expect_status(tk_device_simulated(&d, "TPU v5 lite"), TK_OK);
    tkt_expect_status(tk_pipeline_create_call(&pl, c, d), TK_OK);
    tkt_expect_status(tk_pipeline_set(pl, TK_PIPE_DETECT_RACES, 0), TK_OK);
    tk_matrix *in[2] = {from(TK_DTYPE_F32, 20, 300, x), from(TK_DTYPE_F32, 20, 300, x)};
    tk_matrix *out = blank(TK_DTYPE_F32, 20, 300);
    for (int path = 0; path < 3; path++) {
        ch.rc = TK_OK;
        tkt_expect_status(tk_call_set(c, TK_CALL_PAD, path == 1 ? TK_PAD_NAN : TK_PAD_ZERO),
                          TK_OK);
        tkt_expect_status(path == 2 ? tk_pipeline_run_call(pl, 2,
                                                           (const tk_matrix *const *)in, 1,
                                                           &out)
                                    : tk_call_run(c, 2, (const tk_matrix *const *)in, 1, &out),
                          TK_OK);
        cr_assert_eq(ch.rc, TK_ESTATE, "path %d", path);
    }
    /* And the pipeline refuses an output that partly overlaps an input. */
    tk_matrix *part;
    tkt_expect_status(tk_matrix_wrap(&part, TK_DTYPE_F32, 20, 300, 300,
                                     (float *)tk_matrix_data(in[1]) + 1), TK_OK);
    tkt_expect_status(tk_pipeline_run_call(pl, 2, (const tk_matrix *const *)in, 1, &part),
                      TK_ELAYOUT);
    cr_assert(strstr(tk_last_error_message(), "tk_pipeline_run_call: the output overlaps"),
              "%s", tk_last_error_message());
    tk_matrix_destroy(part);
    tk_pipeline_destroy(pl);
    tk_device_destroy(d);
    tk_call_destroy(c);
    tk_tiling_destroy(t);
    tk_matrix_destroy(in[0]);
    tk_matrix_destroy(in[1]);
    tk_matrix_destroy(out);
    tk_kernel_destroy(ch.k);
    free(x);
}

/* user: the call and the status of running it again from the body. */
struct again { tk_call *c; const tk_matrix *const *in; tk_matrix *out; int rc; };

static int runs_its_call(void *user, int64_t rows, int64_t cols, int64_t ld,
                         const float *const *in, float *out)
{
    struct again *a = user;
    a->rc = tk_call_run(a->c, 2, a->in, 1, &a->out);
    return square_minus(NULL, rows, cols, ld, in, out);
}

Test(call, refusals_of_the_call_of_a_kernel)
{
    tk_kernel *k, *mm;
    tk_tiling *t;
    tk_call *c = (tk_call *)1;
    struct again a = {0};
    tkt_expect_status(tk_kernel_custom(&k, 2, runs_its_call, &a), TK_OK);
    tkt_expect_status(tk_kernel_matmul(&mm), TK_OK);
    tkt_expect_status(tk_tiling_create(&t, 20, 300, 8, 128), TK_OK);
    tkt_expect_status(tk_call_create_kernel(NULL, k, t, TK_DTYPE_F32), TK_EINVAL);
    tkt_expect_status(tk_call_create_kernel(&c, NULL, t, TK_DTYPE_F32), TK_EINVAL);
    cr_assert_null(c);
    cr_assert(strstr(tk_last_error_message(), "kernel is NULL"));
    tkt_expect_status(tk_call_create_kernel(&c, mm, t, TK_DTYPE_F32), TK_EINVAL);
    cr_assert(strstr(tk_last_error_message(), "matmul"));
    tkt_expect_status(tk_call_create_kernel(&c, k, t, 77), TK_EDTYPE);
    cr_assert(strstr(tk_last_error_message(), "dtype 77 (unknown)"), "%s",
              tk_last_error_message());
    tkt_expect_status(tk_tiling_set(t, TK_TILING_TAIL, TK_TAIL_SHIFT_INWARDS), TK_OK);
    tkt_expect_status(tk_call_create_kernel(&c, k, t, TK_DTYPE_F32), TK_ELAYOUT);
    cr_assert(strstr(tk_last_error_message(), "shift-inwards"));
    cr_assert_null(c);
    tkt_expect_status(tk_tiling_set(t, TK_TILING_TAIL, TK_TAIL_MASK), TK_OK);
    tkt_expect_status(tk_call_create_kernel(&c, k, t, TK_DTYPE_F32), TK_OK);
    /* Its operands and maps are the kernel's. */
    tkt_expect_status(tk_call_add_input(c, TK_DTYPE_F32, 20, 300, 8, 128, NULL), TK_ESTATE);
    tkt_expect_status(tk_call_set_map(c, TK_CALL_INPUT, 0, same_block, NULL), TK_ESTATE);
    /* Operands that tk_kernel_run refuses, in the call's words. */
    float *x = ints(20 * 300, 5);
    tk_matrix *in[2] = {from(TK_DTYPE_F32, 20, 300, x), from(TK_DTYPE_F32, 20, 300, x)};
    tk_matrix *out = blank(TK_DTYPE_F32, 20, 300), *bf = blank(TK_DTYPE_BF16, 20, 300), *part;
    tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)in, 1, &out), TK_EINVAL);
    tkt_expect_status(tk_call_run(c, 2, (const tk_matrix *const *)in, 1, &bf), TK_EDTYPE);
    tkt_expect_status(tk_matrix_wrap(&part, TK_DTYPE_F32, 20, 300, 300,
                                     (float *)tk_matrix_data(in[1]) + 1), TK_OK);
    tkt_expect_status(tk_call_run(c, 2, (const tk_matrix *const *)in, 1, &part), TK_ELAYOUT);
    cr_assert(!strncmp(tk_last_error_message(), "tk_call_run: the output overlaps input 1",
                       40), "%s", tk_last_error_message());
    /* The body cannot run its own call again. */
    a = (struct again){c, (const tk_matrix *const *)in, out, TK_OK};
    tkt_expect_status(tk_call_run(c, 2, (const tk_matrix *const *)in, 1, &out), TK_OK);
    cr_assert_eq(a.rc, TK_ESTATE);
    tk_matrix_destroy(part);
    tk_call_destroy(c);
    tk_tiling_destroy(t);
    tk_matrix_destroy(in[0]);
    tk_matrix_destroy(in[1]);
    tk_matrix_destroy(out);
    tk_matrix_destroy(bf);
    tk_kernel_destroy(k);
    tk_kernel_destroy(mm);
    free(x);
}

/* ---- uninitialized outputs, pad fills, failing bodies ------------------------- */

static int forgets_init(void *user, tk_block *const *b, int n)
{
    (void)user;
    (void)n;
    for (int64_t r = 0; r < b[0]->rows; r++)  /* accumulates without a k == 0 start */
        *B(b, 1, r, 0) += *B(b, 0, r, 0);
    return 0;
}

Test(call, an_output_the_body_never_initializes_is_nan)
{
    float x[16];
    for (int i = 0; i < 16; i++)
        x[i] = 1.0f;
    tk_matrix *in = from(TK_DTYPE_F32, 8, 2, x), *out = blank(TK_DTYPE_F32, 8, 1);
    int64_t grid[2] = {1, 2};
    static const int64_t omap[6] = {1, 0, 0, 0, 0, 0};
    tk_call *c;
    tkt_expect_status(tk_call_create(&c, 2, grid, forgets_init, NULL), TK_OK);
    tk_call_add_input(c, TK_DTYPE_F32, 8, 2, 8, 1, NULL);
    tk_call_add_output(c, TK_DTYPE_F32, 8, 1, 8, 1, omap);
    tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&in, 1, &out), TK_OK);
    for (int r = 0; r < 8; r++)
        cr_assert(isnan(at(out, r, 0)), "row %d is %g, not NaN", r, at(out, r, 0));
    tk_call_destroy(c);
    tk_matrix_destroy(in);
    tk_matrix_destroy(out);
}

static int copy_body(void *user, tk_block *const *b, int n)
{
    (void)user;
    (void)n;
    for (int64_t r = 0; r < b[0]->rows; r++)
        for (int64_t c = 0; c < b[0]->cols; c++)
            *B(b, 1, r, c) = *B(b, 0, r, c);
    return 0;
}

/* A 3x3 input in 2x2 blocks copied into a 4x4 output: the output shows
 * what each policy puts past the input's edge. */
Test(call, pad_policies_zero_nan_and_a_value)
{
    float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    tk_matrix *in = from(TK_DTYPE_F32, 3, 3, x), *out = blank(TK_DTYPE_F32, 4, 4);
    int64_t grid[2] = {2, 2};
    tk_call *c;
    tkt_expect_status(tk_call_create(&c, 2, grid, copy_body, NULL), TK_OK);
    tk_call_add_input(c, TK_DTYPE_F32, 3, 3, 2, 2, NULL);
    tk_call_add_output(c, TK_DTYPE_F32, 4, 4, 2, 2, NULL);
    int64_t v;
    tkt_expect_status(tk_call_get(c, TK_CALL_PAD, &v), TK_OK);
    cr_assert_eq(v, TK_PAD_ZERO);
    tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&in, 1, &out), TK_OK);
    cr_assert_eq(at(out, 3, 3), 0.0f);
    cr_assert_eq(at(out, 1, 1), 5.0f);
    tkt_expect_status(tk_call_set(c, TK_CALL_PAD, TK_PAD_NAN), TK_OK);
    tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&in, 1, &out), TK_OK);
    cr_assert(isnan(at(out, 3, 0)) && isnan(at(out, 0, 3)));
    tkt_expect_status(tk_call_set_pad_value(c, -7.5f), TK_OK);
    tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&in, 1, &out), TK_OK);
    cr_assert_eq(at(out, 3, 2), -7.5f);
    cr_assert_eq(at(out, 2, 2), 9.0f);
    tkt_expect_status(tk_call_set(c, TK_CALL_PAD, 4), TK_ERANGE);
    tk_call_destroy(c);
    tk_matrix_destroy(in);
    tk_matrix_destroy(out);
}

/* Steps whose blocks all move one along their block rows share panels
 * (a stretch): a bf16 input with tails on both axes, read through them,
 * shows its values and the pad value in the same places as one block at a
 * time would; the blocks' ld spans the panel. */
Test(call, side_by_side_blocks_read_the_edge_fill_through_a_panel)
{
    int64_t R = 10, C = 300;
    float *x = ints(R * C, 12);
    tk_matrix *in = from(TK_DTYPE_BF16, R, C, x), *out = blank(TK_DTYPE_F32, 16, 384);
    int64_t grid[2] = {2, 3};
    tk_call *c;
    tkt_expect_status(tk_call_create(&c, 2, grid, copy_body, NULL), TK_OK);
    tk_call_add_input(c, TK_DTYPE_BF16, R, C, 8, 128, NULL);
    tk_call_add_output(c, TK_DTYPE_F32, 16, 384, 8, 128, NULL);
    tkt_expect_status(tk_call_set_pad_value(c, -7.5f), TK_OK);
    tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&in, 1, &out), TK_OK);
    for (int64_t r = 0; r < 16; r++)
        for (int64_t j = 0; j < 384; j++)
            cr_assert_eq(tkt_bits(at(out, r, j)),
                         tkt_bits(r < R && j < C ? x[r * C + j] : -7.5f), "(%lld, %lld)",
                         (long long)r, (long long)j);
    cr_assert_eq(stat(c, TK_STAT_COPIES_IN), 6.0);
    cr_assert_eq(stat(c, TK_STAT_COPIES_OUT), 6.0);
    tk_call_destroy(c);
    tk_matrix_destroy(in);
    tk_matrix_destroy(out);
    free(x);
}

/* Block columns 0, 1, 2, 2: a stretch of three steps, then the last block
 * again for input and output, skipped and resident where the stretch left
 * it. */
static int then_again(void *user, const int64_t *g, int rank, int64_t *br, int64_t *bc)
{
    (void)user;
    (void)rank;
    *br = 0;
    *bc = g[1] < 2 ? g[1] : 2;
    return 0;
}

static int add_on_revisit(void *user, tk_block *const *b, int n)
{
    (void)user;
    (void)n;
    for (int64_t r = 0; r < b[0]->rows; r++)
        for (int64_t c = 0; c < b[0]->cols; c++)
            *B(b, 1, r, c) = (b[1]->grid[1] == 3 ? *B(b, 1, r, c) : 0.0f) + *B(b, 0, r, c);
    return 0;
}

Test(call, a_block_repeated_after_a_stretch_is_the_one_it_left)
{
    int64_t R = 8, C = 384;
    float *x = ints(R * C, 13);
    tk_matrix *in = from(TK_DTYPE_BF16, R, C, x), *out = blank(TK_DTYPE_BF16, R, C);
    int64_t grid[2] = {1, 4};
    tk_call *c;
    tkt_expect_status(tk_call_create(&c, 2, grid, add_on_revisit, NULL), TK_OK);
    tk_call_add_input(c, TK_DTYPE_BF16, R, C, 8, 128, NULL);
    tk_call_add_output(c, TK_DTYPE_BF16, R, C, 8, 128, NULL);
    tkt_expect_status(tk_call_set_map(c, TK_CALL_INPUT, 0, then_again, NULL), TK_OK);
    tkt_expect_status(tk_call_set_map(c, TK_CALL_OUTPUT, 0, then_again, NULL), TK_OK);
    tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&in, 1, &out), TK_OK);
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < C; j++)   /* small integers: the doubling is exact */
            cr_assert_eq(at(out, r, j), (j < 256 ? 1.0f : 2.0f) * x[r * C + j],
                         "(%lld, %lld)", (long long)r, (long long)j);
    cr_assert_eq(stat(c, TK_STAT_COPIES_SKIPPED), 1.0);
    cr_assert_eq(stat(c, TK_STAT_COPIES_OUT), 3.0);
    tk_call_destroy(c);
    tk_matrix_destroy(in);
    tk_matrix_destroy(out);
    free(x);
}

static int fails_at_step(void *user, tk_block *const *b, int n)
{
    int64_t *left = user;
    copy_body(NULL, b, n);
    return --*left == 0 ? 42 : 0;
}

Test(call, a_failing_body_leaves_every_output_as_it_was)
{
    int64_t R = 20, C = 300;
    float *x = ints(R * C, 11);
    tk_matrix *in = from(TK_DTYPE_BF16, R, C, x), *out = blank(TK_DTYPE_BF16, R, C);
    size_t bytes = (size_t)(R * C * 2);
    void *before = malloc(bytes);
    memcpy(before, tk_matrix_data(out), bytes);
    int64_t left = 7, grid[2] = {3, 3};  /* fails on step 6, after 6 write-backs */
    tk_call *c;
    tkt_expect_status(tk_call_create(&c, 2, grid, fails_at_step, &left), TK_OK);
    tk_call_add_input(c, TK_DTYPE_BF16, R, C, 8, 128, NULL);
    tk_call_add_output(c, TK_DTYPE_BF16, R, C, 8, 128, NULL);
    tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&in, 1, &out), TK_ECALLBACK);
    cr_assert(strstr(tk_last_error_message(), "returned 42 at step 6, grid index (2, 0)"), "%s",
              tk_last_error_message());
    cr_assert(!memcmp(tk_matrix_data(out), before, bytes), "the output changed");
    double v;
    tkt_expect_status(tk_call_stat(c, TK_STAT_STEPS, &v), TK_ESTATE);

    /* Without the undo copy the six blocks written back stay written (block
     * rows 0 and 1, every column), and the message says so. */
    int64_t undo = -1;
    tkt_expect_status(tk_call_get(c, TK_CALL_UNDO, &undo), TK_OK);
    cr_assert_eq(undo, 1, "undo is on by default");
    tkt_expect_status(tk_call_set(c, TK_CALL_UNDO, 0), TK_OK);
    left = 7;
    tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&in, 1, &out), TK_ECALLBACK);
    cr_assert(strstr(tk_last_error_message(), "may be partly written (TK_CALL_UNDO is 0)"),
              "%s", tk_last_error_message());
    for (int64_t r = 0; r < R; r++)
        cr_assert(!memcmp((char *)tk_matrix_data(out) + r * C * 2,
                          r < 16 ? (char *)tk_matrix_data(in) + r * C * 2
                                 : (char *)before + r * C * 2,
                          (size_t)C * 2), "row %lld", (long long)r);
    tk_call_destroy(c);
    tk_matrix_destroy(in);
    tk_matrix_destroy(out);
    free(before);
    free(x);
}

/* ---- refusals ------------------------------------------------------------------ */

static int never(void *user, tk_block *const *b, int n)
{
    (void)user;
    (void)b;
    (void)n;
    cr_assert_fail("the body ran");
    return 0;
}

static int bad_map(void *user, const int64_t *g, int rank, int64_t *br, int64_t *bc)
{
    (void)user;
    (void)rank;
    *br = 0;
    *bc = 0;
    return g[1] == 1 ? 5 : 0;
}

static int swap_map(void *user, const int64_t *g, int rank, int64_t *br, int64_t *bc)
{
    (void)user;
    (void)rank;
    *br = g[1];
    *bc = g[0];
    return 0;
}

Test(call, refusals_name_the_operand_axis_or_value)
{
    tk_call *c = (tk_call *)1;
    int64_t g4[4] = {1, 1, 1, 1}, g0[2] = {2, 0}, g[2] = {2, 2};
    tkt_expect_status(tk_call_create(&c, 0, g4, never, NULL), TK_ERANGE);
    cr_assert_null(c);
    tkt_expect_status(tk_call_create(&c, 4, g4, never, NULL), TK_ERANGE);
    cr_assert(strstr(tk_last_error_message(), "rank 4"));
    tkt_expect_status(tk_call_create(&c, 2, g0, never, NULL), TK_ESHAPE);
    cr_assert(strstr(tk_last_error_message(), "axis 1 has extent 0"));
    tkt_expect_status(tk_call_create(&c, 2, g, NULL, NULL), TK_EINVAL);

    tkt_expect_status(tk_call_create(&c, 2, g, never, NULL), TK_OK);
    tkt_expect_status(tk_call_add_input(c, TK_DTYPE_I32, 4, 4, 2, 2, NULL), TK_EDTYPE);
    cr_assert(strstr(tk_last_error_message(), "tk_call_add_input: dtype 3 (int32) is not"),
              "%s", tk_last_error_message());
    int64_t shifted[6] = {1, 0, 1, 0, 1, 0};  /* (i + 1, j): off the grid at i = 1 */
    cr_assert_eq(tk_call_add_input(c, TK_DTYPE_F32, 4, 4, 2, 2, NULL), 0);
    cr_assert_eq(tk_call_add_output(c, TK_DTYPE_F32, 4, 4, 2, 2, shifted), 0);
    tk_matrix *in = blank(TK_DTYPE_F32, 4, 4), *out = blank(TK_DTYPE_F32, 4, 4);
    tk_matrix *small = blank(TK_DTYPE_F32, 4, 3), *bf = blank(TK_DTYPE_BF16, 4, 4);
    tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&in, 1, &out), TK_ERANGE);
    cr_assert(strstr(tk_last_error_message(), "output 0 sends grid index (1, 0) to block (2, 0), "
                     "outside its 2x2 block grid"), "%s", tk_last_error_message());
    /* Disagreeing counts, shapes and dtypes. */
    tkt_expect_status(tk_call_run(c, 2, (const tk_matrix *const *)&in, 1, &out), TK_EINVAL);
    cr_assert(strstr(tk_last_error_message(), "2 inputs given, the call has 1"));
    tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&small, 1, &out), TK_ESHAPE);
    tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&bf, 1, &out), TK_EDTYPE);
    /* A failing callback map. */
    tkt_expect_status(tk_call_set_map(c, TK_CALL_OUTPUT, 0, bad_map, NULL), TK_OK);
    tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&in, 1, &out), TK_ECALLBACK);
    cr_assert(strstr(tk_last_error_message(), "index map of output 0 returned 5 at grid index "
                     "(0, 1)"), "%s", tk_last_error_message());
    tkt_expect_status(tk_call_set_map(c, TK_CALL_OUTPUT, 1, bad_map, NULL), TK_ERANGE);
    tk_call_destroy(c);

    /* A non-consecutive revisit: (i, j) -> (j, 0) leaves block 0 at step 1
     * and comes back at step 2. */
    int64_t col_of_j[6] = {0, 1, 0, 0, 0, 0};
    tkt_expect_status(tk_call_create(&c, 2, g, never, NULL), TK_OK);
    tk_call_add_input(c, TK_DTYPE_F32, 4, 4, 2, 2, NULL);
    tk_call_add_output(c, TK_DTYPE_F32, 4, 4, 2, 2, col_of_j);
    tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&in, 1, &out), TK_ELAYOUT);
    cr_assert(strstr(tk_last_error_message(), "output 0's block (0, 0) is visited again at step 2, "
                     "grid index (1, 0)"), "%s", tk_last_error_message());
    cr_assert_eq(tkt_bits(at(out, 0, 0)), 0x55555555u);
    /* The same through a callback map. */
    tkt_expect_status(tk_call_set_map(c, TK_CALL_OUTPUT, 0, swap_map, NULL), TK_OK);
    tkt_expect_status(tk_call_set_map(c, TK_CALL_INPUT, 0, swap_map, NULL), TK_OK);
    tk_call_destroy(c);
    int64_t rank1[1] = {2};
    tkt_expect_status(tk_call_create(&c, 1, rank1, never, NULL), TK_OK);
    tkt_expect_status(tk_call_add_input(c, TK_DTYPE_F32, 4, 4, 2, 2, NULL), TK_EINVAL);
    cr_assert(strstr(tk_last_error_message(), "rank-2 grid"));
    for (int i = 0; i < TK_CALL_MAX_OPERANDS; i++) {
        int64_t m1[4] = {1, 0, 0, 0};
        cr_assert_eq(tk_call_add_input(c, TK_DTYPE_F32, 4, 4, 2, 4, m1), i);
    }
    int64_t m1[4] = {1, 0, 0, 0};
    tkt_expect_status(tk_call_add_input(c, TK_DTYPE_F32, 4, 4, 2, 4, m1), TK_ERANGE);
    tkt_expect_status(tk_call_run(c, 0, NULL, 0, NULL), TK_EINVAL);
    tk_call_destroy(c);
    tk_matrix_destroy(in);
    tk_matrix_destroy(out);
    tk_matrix_destroy(small);
    tk_matrix_destroy(bf);
}

/* ---- the call through the pipeline simulator ------------------------------------- */

static double pstat(const tk_pipeline *p, int which)
{
    double v = -1;
    tkt_expect_status(tk_pipeline_stat(p, which, &v), TK_OK);
    return v;
}

Test(call, matmul_through_the_pipeline_equals_the_host_run)
{
    int64_t M = 37, N = 260, K = 300;
    float *x = ints(M * K, 12), *y = ints(K * N, 13);
    tk_matrix *in[2] = {from(TK_DTYPE_F32, M, K, x), from(TK_DTYPE_F32, K, N, y)};
    tk_matrix *host = blank(TK_DTYPE_BF16, M, N), *sim = blank(TK_DTYPE_BF16, M, N);
    tk_call *c = matmul_call(TK_DTYPE_BF16, M, N, K, 16, 128, 128);
    tkt_expect_status(tk_call_run(c, 2, (const tk_matrix *const *)in, 1, &host), TK_OK);
    tk_device *d;
    tk_pipeline *p;
    tkt_expect_status(tk_device_simulated(&d, "TPU v5 lite"), TK_OK);
    tkt_expect_status(tk_pipeline_create_call(&p, c, d), TK_OK);
    tkt_expect_status(tk_pipeline_run_call(p, 2, (const tk_matrix *const *)in, 1, &sim), TK_OK);
    cr_assert(!memcmp(tk_matrix_data(sim), tk_matrix_data(host), (size_t)(M * N * 2)));
    /* Grid 3 x 3 x 3: x and y change block every step, the output every 3. */
    cr_assert_eq(pstat(p, TK_STAT_STEPS), 27.0);
    cr_assert_eq(pstat(p, TK_STAT_COPIES_IN), 54.0);
    cr_assert_eq(pstat(p, TK_STAT_COPIES_SKIPPED), 0.0);
    cr_assert_eq(pstat(p, TK_STAT_COPIES_OUT), 9.0);
    cr_assert_eq(pstat(p, TK_STAT_HAZARDS), 0.0);
    /* Two slots each: x 16x128, y 128x128 f32 and the out 16x128 bf16; and
     * the out's f32 accumulator, resident over k in a narrower dtype. */
    cr_assert_eq(pstat(p, TK_STAT_ONCHIP_BYTES),
                 2.0 * (16 * 128 * 4 + 128 * 128 * 4 + 16 * 128 * 2) + 16 * 128 * 4);
    cr_assert(pstat(p, TK_STAT_MODELED_NS) > 0);
    /* Per-operand slots. */
    tkt_expect_status(tk_pipeline_set_buffers(p, TK_CALL_INPUT, 1, 3), TK_OK);
    tkt_expect_status(tk_pipeline_run_call(p, 2, (const tk_matrix *const *)in, 1, &sim), TK_OK);
    cr_assert_eq(pstat(p, TK_STAT_ONCHIP_BYTES), 2.0 * 16 * 128 * 4 + 3.0 * 128 * 128 * 4 +
                                                   2.0 * 16 * 128 * 2 + 16 * 128 * 4);
    tkt_expect_status(tk_pipeline_set_buffers(p, TK_CALL_OUTPUT, 0, 3), TK_ERANGE);
    /* 300 slots of y's 64 KiB blocks are over v5e's 16 MiB. */
    tkt_expect_status(tk_pipeline_set_buffers(p, TK_CALL_INPUT, 1, 300), TK_OK);
    tkt_expect_status(tk_pipeline_run_call(p, 2, (const tk_matrix *const *)in, 1, &sim),
                      TK_ECAPACITY);
    cr_assert(strstr(tk_last_error_message(), "input 1's 300 slot(s) of 65536"), "%s",
              tk_last_error_message());
    cr_assert(strstr(tk_last_error_message(), "every operand and 8192 bytes of f32 "
                     "accumulators need"), "%s", tk_last_error_message());
    tkt_expect_status(tk_pipeline_set_buffers(p, TK_CALL_INPUT, 1, 3), TK_OK);
    tkt_expect_status(tk_pipeline_set_buffers(p, TK_CALL_INPUT, 2, 1), TK_ERANGE);
    /* One output slot: the first body of the next residency writes the slot
     * still being copied out, as in emit_pipeline. */
    tkt_expect_status(tk_pipeline_set_buffers(p, TK_CALL_OUTPUT, 0, 1), TK_OK);
    memset(tk_matrix_data(sim), 0x55, (size_t)(M * N * 2));
    tkt_expect_status(tk_pipeline_run_call(p, 2, (const tk_matrix *const *)in, 1, &sim), TK_ERACE);
    int64_t step, slot;
    int operand, kind;
    tkt_expect_status(tk_pipeline_race(p, 0, &step, &slot, &operand, &kind), TK_OK);
    cr_assert(step == 3 && operand == TK_OPERAND_OUTPUT && kind == TK_HAZARD_UNWAITED_WRITE,
              "step %lld operand %d kind %d", (long long)step, operand, kind);
    uint16_t first;
    memcpy(&first, tk_matrix_data(sim), 2);
    cr_assert_eq(first, 0x5555, "a refused run wrote its output");
    /* A skipped input wait at step 13 is caught, with its witness. */
    tkt_expect_status(tk_pipeline_set_buffers(p, TK_CALL_OUTPUT, 0, 0), TK_OK);
    tkt_expect_status(tk_pipeline_set(p, TK_PIPE_FAULT, TK_FAULT_SKIP_INPUT_WAIT), TK_OK);
    tkt_expect_status(tk_pipeline_run_call(p, 2, (const tk_matrix *const *)in, 1, &sim), TK_ERACE);
    tkt_expect_status(tk_pipeline_race(p, 0, &step, &slot, &operand, &kind), TK_OK);
    cr_assert(step == 13 && kind == TK_HAZARD_UNWAITED_READ);
    /* The kinds of pipeline do not mix. */
    tkt_expect_status(tk_pipeline_run(p, (const tk_matrix *const *)in, sim), TK_ESTATE);
    tk_pipeline_destroy(p);
    tk_device_destroy(d);
    tk_matrix_destroy(sim);
    destroy_all(c, in, host, x, y);
}

/* TK_CALL_ROUND_STEPS 1: a bfloat16 output block is rounded after every k
 * step, as a kernel accumulating in its bfloat16 output ref does; 0 keeps
 * it f32 (a scratch accumulator) and rounds once.  Each against a loop of
 * the body's own order, bit for bit, on the host and through the pipeline,
 * which then counts no f32 accumulator on chip. */
Test(call, round_steps_rounds_a_resident_output_block_after_every_step)
{
    int64_t M = 37, N = 260, K = 300, bk = 128;
    float *x = malloc((size_t)(M * K) * sizeof *x), *y = malloc((size_t)(K * N) * sizeof *y);
    tkt_fill(x, (size_t)(M * K), 21);
    tkt_fill(y, (size_t)(K * N), 22);
    tk_matrix *in[2] = {from(TK_DTYPE_F32, M, K, x), from(TK_DTYPE_F32, K, N, y)};
    tk_matrix *host = blank(TK_DTYPE_BF16, M, N), *sim = blank(TK_DTYPE_BF16, M, N);
    tk_call *c = matmul_call(TK_DTYPE_BF16, M, N, K, 16, 128, bk);
    int64_t v = -1;
    tkt_expect_status(tk_call_get(c, TK_CALL_ROUND_STEPS, &v), TK_OK);
    cr_assert_eq(v, 0);
    tkt_expect_status(tk_call_set(c, TK_CALL_ROUND_STEPS, 2), TK_ERANGE);
    tk_device *d;
    tkt_expect_status(tk_device_simulated(&d, "TPU v5 lite"), TK_OK);
    int64_t differ = 0;
    for (int round = 0; round < 2; round++) {
        tkt_expect_status(tk_call_set(c, TK_CALL_ROUND_STEPS, round), TK_OK);
        tkt_expect_status(tk_call_get(c, TK_CALL_ROUND_STEPS, &v), TK_OK);
        cr_assert_eq(v, round);
        tkt_expect_status(tk_call_run(c, 2, (const tk_matrix *const *)in, 1, &host), TK_OK);
        for (int64_t r = 0; r < M; r++)
            for (int64_t col = 0; col < N; col++) {
                float acc = 0.0f, once = 0.0f;
                for (int64_t k0 = 0; k0 < K; k0 += bk) {
                    for (int64_t k = k0; k < k0 + bk && k < K; k++) {
                        acc += x[r * K + k] * y[k * N + col];
                        once += x[r * K + k] * y[k * N + col];
                    }
                    acc = tk_bf16_to_f32(tk_bf16_from_f32(acc));
                }
                float want = round ? acc : tk_bf16_to_f32(tk_bf16_from_f32(once));
                cr_assert_eq(tkt_bits(at(host, r, col)), tkt_bits(want),
                             "round %d (%lld, %lld): %g, want %g", round, (long long)r,
                             (long long)col, at(host, r, col), want);
                differ += round && tkt_bits(acc) != tkt_bits(tk_bf16_to_f32(tk_bf16_from_f32(once)));
            }
        tk_pipeline *p;
        tkt_expect_status(tk_pipeline_create_call(&p, c, d), TK_OK);
        for (int detect = 1; detect >= 0; detect--) {   /* the host's executor, then slots' */
            tkt_expect_status(tk_pipeline_set(p, TK_PIPE_DETECT_RACES, detect), TK_OK);
            memset(tk_matrix_data(sim), 0x55, (size_t)(M * N * 2));
            tkt_expect_status(tk_pipeline_run_call(p, 2, (const tk_matrix *const *)in, 1, &sim),
                              TK_OK);
            cr_assert(!memcmp(tk_matrix_data(sim), tk_matrix_data(host), (size_t)(M * N * 2)),
                      "round %d detect %d", round, detect);
            cr_assert_eq(pstat(p, TK_STAT_ONCHIP_BYTES),
                         2.0 * (16 * 128 * 4 + 128 * 128 * 4 + 16 * 128 * 2) +
                             (round ? 0.0 : 16 * 128 * 4));
        }
        tk_pipeline_destroy(p);
    }
    cr_assert_gt(differ, M * N / 4, "rounding every step shows in %lld elements",
                 (long long)differ);
    tk_device_destroy(d);
    tk_matrix_destroy(sim);
    destroy_all(c, in, host, x, y);
}

Test(call, the_pipeline_skips_repeated_blocks_and_checks_layout)
{
    int64_t R = 41, C = 128;
    float *x = ints(R * C, 14), *bias = ints(C, 15);
    tk_matrix *in[2] = {from(TK_DTYPE_F32, R, C, x), from(TK_DTYPE_F32, 1, C, bias)};
    tk_matrix *out = blank(TK_DTYPE_F32, R, C);
    int64_t grid[2] = {6, 1};
    static const int64_t bmap[6] = {0, 0, 0, 0, 1, 0};
    tk_call *c;
    tkt_expect_status(tk_call_create(&c, 2, grid, bias_body, NULL), TK_OK);
    tk_call_add_input(c, TK_DTYPE_F32, R, C, 8, C, NULL);
    tk_call_add_input(c, TK_DTYPE_F32, 1, C, 1, C, bmap);  /* 1 row: the whole extent */
    tk_call_add_output(c, TK_DTYPE_F32, R, C, 8, C, NULL);
    tk_device *d;
    tk_pipeline *p;
    tkt_expect_status(tk_device_simulated(&d, "TPU v4"), TK_OK);
    tkt_expect_status(tk_pipeline_create_call(&p, c, d), TK_OK);
    tkt_expect_status(tk_pipeline_run_call(p, 2, (const tk_matrix *const *)in, 1, &out), TK_OK);
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < C; j++)
            cr_assert_eq(at(out, r, j), x[r * C + j] + bias[j]);
    cr_assert_eq(pstat(p, TK_STAT_COPIES_SKIPPED), 5.0);
    cr_assert_eq(pstat(p, TK_STAT_COPIES_IN), 6.0 + 1.0);
    tk_pipeline_destroy(p);
    tk_call_destroy(c);
    /* A 4-row block over a 41-row operand is not a layout tile. */
    tkt_expect_status(tk_call_create(&c, 2, (int64_t[2]){11, 1}, bias_body, NULL), TK_OK);
    tk_call_add_input(c, TK_DTYPE_F32, R, C, 4, C, NULL);
    tk_call_add_input(c, TK_DTYPE_F32, 1, C, 1, C, bmap);
    tk_call_add_output(c, TK_DTYPE_F32, R, C, 4, C, NULL);
    tkt_expect_status(tk_pipeline_create_call(&p, c, d), TK_OK);
    tkt_expect_status(tk_pipeline_run_call(p, 2, (const tk_matrix *const *)in, 1, &out), TK_ELAYOUT);
    cr_assert(strstr(tk_last_error_message(), "input 0 has 4x128 blocks over 41x128"), "%s",
              tk_last_error_message());
    /* The call's own checks speak in the pipeline's name. */
    tkt_expect_status(tk_pipeline_run_call(p, 1, (const tk_matrix *const *)in, 1, &out), TK_EINVAL);
    cr_assert(!strncmp(tk_last_error_message(), "tk_pipeline_run_call: 1 inputs given", 36),
              "%s", tk_last_error_message());
    tkt_expect_status(tk_pipeline_set(p, TK_PIPE_MODE, TK_MODE_TARGET), TK_OK);
    tkt_expect_status(tk_pipeline_run_call(p, 2, (const tk_matrix *const *)in, 1, &out),
                      TK_ENOTARGET);
    tk_pipeline_destroy(p);
    tk_call_destroy(c);
    tk_device_destroy(d);
    tk_matrix_destroy(in[0]);
    tk_matrix_destroy(in[1]);
    tk_matrix_destroy(out);
    free(x);
    free(bias);
}

/* ---- regressions from review ----------------------------------------------------- */

static int halves(void *user, const int64_t *g, int rank, int64_t *br, int64_t *bc)
{
    (void)user;
    (void)rank;
    *br = (g[0] + 1) / 2;  /* 0, 1, 1, 2, 2, ...: blocks repeat in pairs */
    *bc = 0;
    return 0;
}

Test(call, a_residency_across_a_parallel_axis_is_a_revisit)
{
    /* Grid (2, 2), axis 0 parallel: block 1 is written at i = 0 and i = 1. */
    static const int64_t omap[6] = {2, 1, 0, 0, 0, 0};  /* (2i + j, 0) */
    int64_t grid[2] = {2, 2};
    tk_call *c;
    tkt_expect_status(tk_call_create(&c, 2, grid, copy_body, NULL), TK_OK);
    tk_call_add_input(c, TK_DTYPE_F32, 4, 4, 2, 2, NULL);
    tk_call_add_output(c, TK_DTYPE_F32, 8, 2, 2, 2, omap);
    tk_matrix *in = blank(TK_DTYPE_F32, 4, 4), *out = blank(TK_DTYPE_F32, 8, 2);
    /* (i, j) -> 2i + j is 0, 1, 2, 3: no revisit at all. */
    tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&in, 1, &out), TK_OK);
    tk_call_destroy(c);
    static const int64_t crossing[6] = {1, 1, 0, 0, 0, 0};  /* (i + j, 0): 0, 1, 1, 2 */
    tkt_expect_status(tk_call_create(&c, 2, grid, copy_body, NULL), TK_OK);
    tk_call_add_input(c, TK_DTYPE_F32, 4, 4, 2, 2, NULL);
    tk_call_add_output(c, TK_DTYPE_F32, 6, 2, 2, 2, crossing);
    tk_matrix *out6 = blank(TK_DTYPE_F32, 6, 2);
    tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&in, 1, &out6), TK_OK);
    tkt_expect_status(tk_call_set_dimension(c, 0, TK_DIM_PARALLEL), TK_OK);
    tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&in, 1, &out6), TK_ELAYOUT);
    cr_assert(strstr(tk_last_error_message(), "parallel axis 0: grid indices (0, 1) and (1, 0)"),
              "%s", tk_last_error_message());
    /* Only the call's own parameters are the call's. */
    tkt_expect_status(tk_call_set(c, TK_PIPE_MODE, 2), TK_EINVAL);
    tkt_expect_status(tk_call_set(c, TK_CALL_RANK, 2), TK_EINVAL);
    int64_t v;
    tkt_expect_status(tk_call_get(c, TK_CALL_PAD, &v), TK_OK);
    cr_assert_eq(v, TK_PAD_ZERO);
    tk_call_destroy(c);
    tk_matrix_destroy(in);
    tk_matrix_destroy(out);
    tk_matrix_destroy(out6);
}

Test(call, a_fault_acts_where_blocks_repeat_too)
{
    /* Rank-1 grid of 8, the input at (i + 1) / 2: blocks 0 1 1 2 2 3 3 4,
     * so step 4 (the middle) starts no fetch; the input faults move on to
     * step 5, which does (and has a block 4 to prefetch). */
    int64_t grid[1] = {8};
    static const int64_t id[4] = {1, 0, 0, 0};  /* (i, 0) */
    tk_call *c;
    tkt_expect_status(tk_call_create(&c, 1, grid, copy_body, NULL), TK_OK);
    tk_call_add_input(c, TK_DTYPE_F32, 40, 128, 8, 128, id);
    tk_call_add_output(c, TK_DTYPE_F32, 64, 128, 8, 128, id);
    tkt_expect_status(tk_call_set_map(c, TK_CALL_INPUT, 0, halves, NULL), TK_OK);
    tk_matrix *in = blank(TK_DTYPE_F32, 40, 128), *out = blank(TK_DTYPE_F32, 64, 128);
    tk_device *d;
    tk_pipeline *p;
    tkt_expect_status(tk_device_simulated(&d, "TPU v5 lite"), TK_OK);
    tkt_expect_status(tk_pipeline_create_call(&p, c, d), TK_OK);
    tkt_expect_status(tk_pipeline_run_call(p, 1, (const tk_matrix *const *)&in, 1, &out), TK_OK);
    cr_assert_eq(pstat(p, TK_STAT_COPIES_SKIPPED), 3.0);
    for (int64_t fault = TK_FAULT_SKIP_INPUT_WAIT; fault <= TK_FAULT_EARLY_COPY_OUT; fault++) {
        tkt_expect_status(tk_pipeline_set(p, TK_PIPE_FAULT, fault), TK_OK);
        tkt_expect_status(tk_pipeline_run_call(p, 1, (const tk_matrix *const *)&in, 1, &out),
                          TK_ERACE);
        int64_t step;
        tkt_expect_status(tk_pipeline_race(p, 0, &step, NULL, NULL, NULL), TK_OK);
        cr_assert(step >= 4, "fault %lld acted at step %lld", (long long)fault,
                  (long long)step);
    }
    tk_pipeline_destroy(p);
    tk_device_destroy(d);
    tk_call_destroy(c);
    tk_matrix_destroy(in);
    tk_matrix_destroy(out);
}

Test(call, unequal_slot_counts_on_a_kernel_pipeline)
{
    int64_t R = 128, C = 128;
    float *x = ints(R * C, 16);
    tk_matrix *in[2] = {from(TK_DTYPE_F32, R, C, x), from(TK_DTYPE_F32, R, C, x)};
    tk_matrix *want = blank(TK_DTYPE_F32, R, C), *got = blank(TK_DTYPE_F32, R, C);
    tk_kernel *k;
    tk_tiling *t;
    tk_device *d;
    tk_pipeline *p;
    tkt_expect_status(tk_kernel_axpy(&k, 2.0f), TK_OK);
    tkt_expect_status(tk_tiling_create(&t, R, C, 8, 128), TK_OK);
    tkt_expect_status(tk_kernel_run(k, t, (const tk_matrix *const *)in, want), TK_OK);
    tkt_expect_status(tk_device_simulated(&d, "TPU v5 lite"), TK_OK);
    tkt_expect_status(tk_pipeline_create(&p, k, t, d), TK_OK);
    for (int64_t b = 1; b <= 10; b += 2) {
        tkt_expect_status(tk_pipeline_set_buffers(p, TK_CALL_INPUT, 1, b), TK_OK);
        memset(tk_matrix_data(got), 0, (size_t)(R * C * 4));
        tkt_expect_status(tk_pipeline_run(p, (const tk_matrix *const *)in, got), TK_OK);
        cr_assert(!memcmp(tk_matrix_data(got), tk_matrix_data(want), (size_t)(R * C * 4)),
                  "input 1 with %lld slots", (long long)b);
        cr_assert_eq(pstat(p, TK_STAT_ONCHIP_BYTES), (2.0 + (double)b + 2.0) * 8 * 128 * 4);
    }
    tk_pipeline_destroy(p);
    tk_device_destroy(d);
    tk_tiling_destroy(t);
    tk_kernel_destroy(k);
    tk_matrix_destroy(in[0]);
    tk_matrix_destroy(in[1]);
    tk_matrix_destroy(want);
    tk_matrix_destroy(got);
    free(x);
}

static int copy_kernel_body(void *user, int64_t rows, int64_t cols, int64_t ld,
                            const float *const *in, float *out)
{
    (void)user;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            out[r * ld + c] = in[0][r * ld + c];
    return 0;
}

/* With detection off a faulty schedule runs slot by slot on a call as on a
 * kernel: an identity-mapped call copying its block and the same copy as a
 * kernel over the same tiling leave the same bits, fault by fault and with
 * one or two output slots, and some faults leave stale blocks. */
Test(call, an_unchecked_faulty_schedule_runs_slot_by_slot_as_a_kernel_pipeline)
{
    int64_t R = 20, C = 300, grid[2] = {3, 3};
    float *x = ints(R * C, 17);
    tk_matrix *in = from(TK_DTYPE_BF16, R, C, x);
    tk_matrix *by_call = blank(TK_DTYPE_BF16, R, C), *by_kernel = blank(TK_DTYPE_BF16, R, C);
    size_t bytes = (size_t)(R * C * 2);
    tk_call *c;
    tk_kernel *k;
    tk_tiling *t;
    tk_device *d;
    tk_pipeline *pc, *pk;
    tkt_expect_status(tk_call_create(&c, 2, grid, copy_body, NULL), TK_OK);
    tk_call_add_input(c, TK_DTYPE_BF16, R, C, 8, 128, NULL);
    tk_call_add_output(c, TK_DTYPE_BF16, R, C, 8, 128, NULL);
    tkt_expect_status(tk_kernel_custom(&k, 1, copy_kernel_body, NULL), TK_OK);
    tkt_expect_status(tk_tiling_create(&t, R, C, 8, 128), TK_OK);
    tkt_expect_status(tk_device_simulated(&d, "TPU v5 lite"), TK_OK);
    tkt_expect_status(tk_pipeline_create_call(&pc, c, d), TK_OK);
    tkt_expect_status(tk_pipeline_create(&pk, k, t, d), TK_OK);
    int stale = 0;
    for (int64_t out_slots = 1; out_slots <= 2; out_slots++)
        for (int64_t fault = TK_FAULT_NONE; fault <= TK_FAULT_EARLY_COPY_OUT; fault++) {
            tk_pipeline *ps[2] = {pc, pk};
            for (int i = 0; i < 2; i++) {
                tkt_expect_status(tk_pipeline_set(ps[i], TK_PIPE_DETECT_RACES, 0), TK_OK);
                tkt_expect_status(tk_pipeline_set(ps[i], TK_PIPE_OUTPUT_BUFFERS, out_slots),
                                  TK_OK);
                tkt_expect_status(tk_pipeline_set(ps[i], TK_PIPE_FAULT, fault), TK_OK);
            }
            memset(tk_matrix_data(by_call), 0x55, bytes);
            memset(tk_matrix_data(by_kernel), 0x55, bytes);
            tkt_expect_status(tk_pipeline_run_call(pc, 1, (const tk_matrix *const *)&in, 1,
                                                   &by_call), TK_OK);
            tkt_expect_status(tk_pipeline_run(pk, (const tk_matrix *const *)&in, by_kernel),
                              TK_OK);
            cr_assert(!memcmp(tk_matrix_data(by_call), tk_matrix_data(by_kernel), bytes),
                      "fault %lld, %lld output slot(s)", (long long)fault,
                      (long long)out_slots);
            stale += memcmp(tk_matrix_data(by_call), tk_matrix_data(in), bytes) != 0;
            cr_assert(fault != TK_FAULT_NONE ||
                      !memcmp(tk_matrix_data(by_call), tk_matrix_data(in), bytes));
        }
    cr_assert(stale > 0, "no fault changed the data");
    tk_pipeline_destroy(pc);
    tk_pipeline_destroy(pk);
    tk_device_destroy(d);
    tk_tiling_destroy(t);
    tk_kernel_destroy(k);
    tk_call_destroy(c);
    tk_matrix_destroy(in);
    tk_matrix_destroy(by_call);
    tk_matrix_destroy(by_kernel);
    free(x);
}

static int plus_100(void *user, tk_block *const *b, int n)
{
    (void)user;
    (void)n;
    for (int64_t c = 0; c < b[1]->cols; c++)
        b[1]->data[c] = b[0]->data[c] + 100.0f;
    return 0;
}

/* An input that overlaps an output, 1 x 8192 in 1 x 1024 blocks, the output
 * four blocks further on: tk_call_run promotes each step's input after
 * every write-back before it, so blocks 4 to 7 read what steps 0 to 3 wrote
 * (+200), however steps would share panels; a checked pipeline computes
 * the same, and one run slot by slot reads the input as it was (+100). */
Test(call, an_input_overlapping_an_output_sees_the_earlier_write_backs)
{
    enum { BC = 1024 };
    int64_t grid[2] = {1, 8};
    float *buf = malloc(12 * BC * sizeof *buf);
    cr_assert_not_null(buf);
    tk_call *c;
    tk_matrix *in, *out;
    tk_device *d;
    tk_pipeline *p;
    tkt_expect_status(tk_call_create(&c, 2, grid, plus_100, NULL), TK_OK);
    tk_call_add_input(c, TK_DTYPE_F32, 1, 8 * BC, 1, BC, NULL);
    tk_call_add_output(c, TK_DTYPE_F32, 1, 8 * BC, 1, BC, NULL);
    tkt_expect_status(tk_matrix_wrap(&in, TK_DTYPE_F32, 1, 8 * BC, 8 * BC, buf), TK_OK);
    tkt_expect_status(tk_matrix_wrap(&out, TK_DTYPE_F32, 1, 8 * BC, 8 * BC, buf + 4 * BC),
                      TK_OK);
    tkt_expect_status(tk_device_simulated(&d, "TPU v5 lite"), TK_OK);
    tkt_expect_status(tk_device_set(d, TK_DEVICE_LAYOUT_ROWS, 1), TK_OK);
    tkt_expect_status(tk_pipeline_create_call(&p, c, d), TK_OK);
    for (int way = 0; way < 3; way++) {
        for (int i = 0; i < 12 * BC; i++)
            buf[i] = (float)(i / BC);
        if (way == 0) {
            tkt_expect_status(tk_call_run(c, 1, (const tk_matrix *const *)&in, 1, &out), TK_OK);
        } else {
            tkt_expect_status(tk_pipeline_set(p, TK_PIPE_DETECT_RACES, way == 1), TK_OK);
            tkt_expect_status(tk_pipeline_run_call(p, 1, (const tk_matrix *const *)&in, 1,
                                                   &out), TK_OK);
        }
        for (int b = 0; b < 8; b++)
            for (int j = 0; j < BC; j++)
                cr_assert_eq(buf[(4 + b) * BC + j],
                             (float)(b < 4 || way == 2 ? b + 100 : b + 196),
                             "way %d, block %d", way, b);
    }
    tk_pipeline_destroy(p);
    tk_device_destroy(d);
    tk_call_destroy(c);
    tk_matrix_destroy(in);
    tk_matrix_destroy(out);
    free(buf);
}

static int count_visits(void *user, tk_block *const *b, int n)
{
    (void)user;
    for (int64_t j = 0; j < b[n - 1]->cols; j++)
        b[n - 1]->data[j] = isnan(b[n - 1]->data[j]) ? 1.0f : b[n - 1]->data[j] + 1.0f;
    return 0;
}

/* Slot by slot an output slot is NaN only the first time it is used, as on
 * the chip: a body that reads its block before writing it sees the slot's
 * previous block there (two slots: blocks 2 and 3 see blocks 0 and 1). A
 * checked schedule, like tk_call_run, starts every block at NaN.  Outputs of
 * mixed sizes (1-byte, then 2-byte elements) keep their images aligned. */
Test(call, run_slot_by_slot_an_output_slot_keeps_its_previous_block)
{
    int64_t grid[2] = {1, 4};
    tk_call *c;
    tk_device *d;
    tk_pipeline *p;
    tk_matrix *in = blank(TK_DTYPE_F32, 1, 4);
    tk_matrix *out[2] = {blank(TK_DTYPE_F8E4M3FN, 1, 3), blank(TK_DTYPE_BF16, 1, 4)};
    static const int64_t first_block[6] = {0, 0, 0, 0, 0, 0};
    tkt_expect_status(tk_call_create(&c, 2, grid, count_visits, NULL), TK_OK);
    tk_call_add_input(c, TK_DTYPE_F32, 1, 4, 1, 1, NULL);
    tk_call_add_output(c, TK_DTYPE_F8E4M3FN, 1, 3, 1, 3, first_block);
    tk_call_add_output(c, TK_DTYPE_BF16, 1, 4, 1, 1, NULL);
    tkt_expect_status(tk_device_simulated(&d, "TPU v5 lite"), TK_OK);
    tkt_expect_status(tk_device_set(d, TK_DEVICE_LAYOUT_ROWS, 1), TK_OK);
    tkt_expect_status(tk_device_set(d, TK_DEVICE_LAYOUT_COLS, 1), TK_OK);
    tkt_expect_status(tk_pipeline_create_call(&p, c, d), TK_OK);
    for (int checked = 1; checked >= 0; checked--) {
        tkt_expect_status(tk_pipeline_set(p, TK_PIPE_DETECT_RACES, checked), TK_OK);
        tkt_expect_status(tk_pipeline_run_call(p, 1, (const tk_matrix *const *)&in, 2, out),
                          TK_OK);
        for (int64_t j = 0; j < 4; j++)
            cr_assert_eq(at(out[1], 0, j), checked || j < 2 ? 1.0f : 2.0f, "checked %d, %lld",
                         checked, (long long)j);
    }
    tk_pipeline_destroy(p);
    tk_device_destroy(d);
    tk_call_destroy(c);
    tk_matrix_destroy(in);
    tk_matrix_destroy(out[0]);
    tk_matrix_destroy(out[1]);
}

static int first_three(void *user, const int64_t *g, int rank, int64_t *br, int64_t *bc)
{
    (void)user;
    (void)rank;
    *br = g[0] < 3 ? 0 : 1;
    *bc = 0;
    return 0;
}

/* Without pipelining a step waits its own copy-out, so the output fault can
 * act at the middle step 2, which ends the first residency; the messages
 * name tk_pipeline_run_call. */
Test(call, an_output_fault_without_pipelining)
{
    int64_t grid[1] = {4};
    static const int64_t id[4] = {1, 0, 0, 0};
    tk_call *c;
    tkt_expect_status(tk_call_create(&c, 1, grid, copy_body, NULL), TK_OK);
    tk_call_add_input(c, TK_DTYPE_F32, 4, 4, 1, 4, id);
    tk_call_add_output(c, TK_DTYPE_F32, 2, 4, 1, 4, id);
    tkt_expect_status(tk_call_set_map(c, TK_CALL_OUTPUT, 0, first_three, NULL), TK_OK);
    tk_matrix *in = blank(TK_DTYPE_F32, 4, 4), *out = blank(TK_DTYPE_F32, 2, 4);
    tk_device *d;
    tk_pipeline *p;
    tkt_expect_status(tk_device_host(&d), TK_OK);
    tkt_expect_status(tk_pipeline_create_call(&p, c, d), TK_OK);
    tkt_expect_status(tk_pipeline_set(p, TK_PIPE_NO_PIPELINING, 1), TK_OK);
    tkt_expect_status(tk_pipeline_run_call(p, 1, (const tk_matrix *const *)&in, 1, &out), TK_OK);
    tkt_expect_status(tk_pipeline_set(p, TK_PIPE_FAULT, TK_FAULT_SKIP_OUTPUT_WAIT), TK_OK);
    tkt_expect_status(tk_pipeline_run_call(p, 1, (const tk_matrix *const *)&in, 1, &out), TK_ERACE);
    cr_assert(strstr(tk_last_error_message(), "tk_pipeline_run_call: ") ==
                  tk_last_error_message(), "%s", tk_last_error_message());
    cr_assert(strstr(tk_last_error_message(), "unwaited write at step 3"), "%s",
              tk_last_error_message());
    tk_pipeline_destroy(p);
    tk_device_destroy(d);
    tk_call_destroy(c);
    tk_matrix_destroy(in);
    tk_matrix_destroy(out);
}

/* A call's statistics describe the settings of its last run: an accepted
 * tk_call_set or tk_call_set_pad_value retires them, a refused one keeps
 * them. */
Test(call, a_new_setting_retires_the_statistics)
{
    float *x = ints(9 * 9, 1), *y = ints(9 * 9, 2);
    tk_matrix *in[2] = {from(TK_DTYPE_F32, 9, 9, x), from(TK_DTYPE_F32, 9, 9, y)};
    tk_matrix *out = blank(TK_DTYPE_F32, 9, 9);
    tk_call *c = matmul_call(TK_DTYPE_F32, 9, 9, 9, 8, 128, 8);
    double v;
    tkt_expect_status(tk_call_run(c, 2, (const tk_matrix *const *)in, 1, &out), TK_OK);
    tkt_expect_status(tk_call_set(c, TK_CALL_PAD, 99), TK_ERANGE);
    cr_assert(strstr(tk_last_error_message(), "TK_CALL_PAD = 99 is outside [1, 3]"), "%s",
              tk_last_error_message());
    tkt_expect_status(tk_call_set(c, TK_CALL_STEPS, 1), TK_EINVAL);
    cr_assert(strstr(tk_last_error_message(), "TK_CALL_STEPS is read-only"), "%s",
              tk_last_error_message());
    tkt_expect_status(tk_call_set(c, TK_PIPE_MODE, 0), TK_EINVAL);
    cr_assert(strstr(tk_last_error_message(), "is not a parameter of a call"), "%s",
              tk_last_error_message());
    cr_assert_eq(stat(c, TK_STAT_STEPS), 4.0);
    tkt_expect_status(tk_call_set(c, TK_CALL_PAD, TK_PAD_NAN), TK_OK);
    tkt_expect_status(tk_call_stat(c, TK_STAT_STEPS, &v), TK_ESTATE);
    tkt_expect_status(tk_call_run(c, 2, (const tk_matrix *const *)in, 1, &out), TK_OK);
    tkt_expect_status(tk_call_set_pad_value(c, 0.0f), TK_OK);
    tkt_expect_status(tk_call_stat(c, TK_STAT_STEPS, &v), TK_ESTATE);
    destroy_all(c, in, out, x, y);
}

/* ---- re-entry ------------------------------------------------------------------ */

struct call_reentry {
    tk_call *self;
    tk_matrix *in, *out;
    int add, run, set, set_map, dim, pad, check, in_map;
};

static int reentrant_map(void *user, const int64_t *g, int rank, int64_t *br, int64_t *bc)
{
    struct call_reentry *r = user;
    (void)rank;
    r->in_map = tk_call_set(r->self, TK_CALL_PAD, TK_PAD_NAN);
    *br = g[0];
    *bc = g[1];
    return 0;
}

static int call_reentrant(void *user, tk_block *const *b, int n)
{
    struct call_reentry *r = user;
    r->add = tk_call_add_input(r->self, TK_DTYPE_F32, 4, 4, 2, 2, NULL);
    r->run = tk_call_run(r->self, 1, (const tk_matrix *const *)&r->in, 1, &r->out);
    r->set = tk_call_set(r->self, TK_CALL_UNDO, 0);
    r->dim = tk_call_set_dimension(r->self, 0, TK_DIM_PARALLEL);
    r->pad = tk_call_set_pad_value(r->self, 1.0f);
    r->set_map = tk_call_set_map(r->self, TK_CALL_INPUT, 0, reentrant_map, r);
    int64_t changed;
    r->check = tk_call_check_padding(r->self, 1, (const tk_matrix *const *)&r->in, &changed);
    return copy_body(NULL, b, n);
}

/* A body or an index map that tries to change or rerun its own call is
 * refused (a new operand would be read past the run's arrays); the run
 * goes on, and the call can be changed once it is over. */
Test(call, a_body_or_map_cannot_change_or_rerun_its_own_call)
{
    float *x = ints(16, 3);
    struct call_reentry r = {0};
    r.in = from(TK_DTYPE_F32, 4, 4, x);
    r.out = blank(TK_DTYPE_F32, 4, 4);
    int64_t grid[2] = {2, 2};
    tkt_expect_status(tk_call_create(&r.self, 2, grid, call_reentrant, &r), TK_OK);
    tk_call_add_input(r.self, TK_DTYPE_F32, 4, 4, 2, 2, NULL);
    tk_call_add_output(r.self, TK_DTYPE_F32, 4, 4, 2, 2, NULL);
    tkt_expect_status(tk_call_set_map(r.self, TK_CALL_INPUT, 0, reentrant_map, &r), TK_OK);
    tkt_expect_status(tk_call_run(r.self, 1, (const tk_matrix *const *)&r.in, 1, &r.out),
                      TK_OK);
    int got[] = {r.add, r.run, r.set, r.dim, r.pad, r.set_map, r.check, r.in_map};
    for (size_t i = 0; i < sizeof got / sizeof *got; i++)
        cr_assert_eq(got[i], TK_ESTATE, "call %zu from inside the run", i);
    cr_assert_eq(tk_matrix_rows(r.out), 4);
    for (int64_t i = 0; i < 16; i++)
        cr_assert_eq(at(r.out, i / 4, i % 4), x[i]);
    int64_t v;
    tkt_expect_status(tk_call_get(r.self, TK_CALL_INPUTS, &v), TK_OK);
    cr_assert_eq(v, 1);
    tkt_expect_status(tk_call_set(r.self, TK_CALL_UNDO, 0), TK_OK);  /* after the run */
    tk_call_destroy(r.self);
    tk_matrix_destroy(r.in);
    tk_matrix_destroy(r.out);
    free(x);
}

/* A call output whose byte size overflows is refused when it is added. */
Test(call, an_output_too_large_to_address_is_refused)
{
    int64_t grid[2] = {1, 1};
    tk_call *c;
    tkt_expect_status(tk_call_create(&c, 2, grid, copy_body, NULL), TK_OK);
    tkt_expect_status(tk_call_add_output(c, TK_DTYPE_F32, INT64_C(1) << 40, INT64_C(1) << 40,
                                         8, 128, NULL), TK_EOVERFLOW);
    cr_assert(strstr(tk_last_error_message(), "tk_call_add_output: 1099511627776x"
                     "1099511627776 float32"), "%s", tk_last_error_message());
    tk_call_destroy(c);
}

/* Blocks each addressable but not together (2^60 elements, f8 stored, 2^62
 * bytes in f32): a run refuses them, on the host and slot by slot, with
 * every caller-visible buffer as it was. */
Test(call, blocks_too_large_together_are_refused)
{
    int64_t grid[2] = {1, 1}, B = INT64_C(1) << 30;
    tk_call *c;
    tkt_expect_status(tk_call_create(&c, 2, grid, never, NULL), TK_OK);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(tk_call_add_input(c, TK_DTYPE_F8E4M3FN, 1, 1, B, B, NULL), i);
    cr_assert_eq(tk_call_add_output(c, TK_DTYPE_F8E4M3FN, 1, 1, B, B, NULL), 0);
    tk_matrix *in[3] = {blank(TK_DTYPE_F8E4M3FN, 1, 1), blank(TK_DTYPE_F8E4M3FN, 1, 1),
                        blank(TK_DTYPE_F8E4M3FN, 1, 1)};
    tk_matrix *out = blank(TK_DTYPE_F8E4M3FN, 1, 1);
    tkt_expect_status(tk_call_run(c, 3, (const tk_matrix *const *)in, 1, &out), TK_EOVERFLOW);
    cr_assert(strstr(tk_last_error_message(), "tk_call_run: the operands' f32 blocks "
                     "overflow"), "%s", tk_last_error_message());
    tk_device *d;
    tk_pipeline *p;
    tkt_expect_status(tk_device_simulated(&d, "TPU v5 lite"), TK_OK);
    tkt_expect_status(tk_device_set(d, TK_DEVICE_LAYOUT_ROWS, 1), TK_OK);
    tkt_expect_status(tk_device_set(d, TK_DEVICE_LAYOUT_COLS, 1), TK_OK);
    tkt_expect_status(tk_device_set(d, TK_DEVICE_ONCHIP_BYTES, INT64_MAX), TK_OK);
    tkt_expect_status(tk_device_set(d, TK_DEVICE_ONCHIP_LIMIT_BYTES, INT64_MAX), TK_OK);
    tkt_expect_status(tk_pipeline_create_call(&p, c, d), TK_OK);
    tkt_expect_status(tk_pipeline_set(p, TK_PIPE_INPUT_BUFFERS, 1), TK_OK);
    tkt_expect_status(tk_pipeline_set(p, TK_PIPE_OUTPUT_BUFFERS, 1), TK_OK);
    tkt_expect_status(tk_pipeline_set(p, TK_PIPE_DETECT_RACES, 0), TK_OK);
    tkt_expect_status(tk_pipeline_run_call(p, 3, (const tk_matrix *const *)in, 1, &out),
                      TK_EOVERFLOW);
    cr_assert(strstr(tk_last_error_message(), "tk_pipeline_run_call: the slots, output "
                     "images and step numbers"), "%s", tk_last_error_message());
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(*(unsigned char *)tk_matrix_data(in[i]), 0x55);
        tk_matrix_destroy(in[i]);
    }
    cr_assert_eq(*(unsigned char *)tk_matrix_data(out), 0x55);
    tk_pipeline_destroy(p);
    tk_device_destroy(d);
    tk_call_destroy(c);
    tk_matrix_destroy(out);
}

/* The plan an affine call makes is kept between runs, and remade after a
 * change that shapes it: here a k axis declared parallel after a run, which
 * the next run must refuse.  A callback map is asked again on every run. */
static int counted_map(void *user, const int64_t *g, int rank, int64_t *br, int64_t *bc)
{
    (void)rank;
    ++*(int *)user;
    *br = g[0];
    *bc = g[2];   /* x's block (i, k) */
    return 0;
}

Test(call, a_kept_plan_is_remade_after_a_change)
{
    enum { M = 16, N = 128, K = 32 };
    float *x = ints(M * K, 3), *y = ints(K * N, 4);
    tk_matrix *in[2] = {from(TK_DTYPE_F32, M, K, x), from(TK_DTYPE_F32, K, N, y)};
    tk_matrix *out = blank(TK_DTYPE_F32, M, N);
    tk_call *c = matmul_call(TK_DTYPE_F32, M, N, K, 8, 128, 8);
    for (int run = 0; run < 2; run++)
        tkt_expect_status(tk_call_run(c, 2, (const tk_matrix *const *)in, 1, &out), TK_OK);
    tkt_expect_status(tk_call_set_dimension(c, 2, TK_DIM_PARALLEL), TK_OK);
    tkt_expect_status(tk_call_run(c, 2, (const tk_matrix *const *)in, 1, &out), TK_ELAYOUT);
    cr_assert(strstr(tk_last_error_message(), "parallel axis 2"), "%s",
              tk_last_error_message());
    tkt_expect_status(tk_call_set_dimension(c, 2, TK_DIM_ARBITRARY), TK_OK);
    int asked = 0;
    tkt_expect_status(tk_call_set_map(c, TK_CALL_INPUT, 0, counted_map, &asked), TK_OK);
    tkt_expect_status(tk_call_run(c, 2, (const tk_matrix *const *)in, 1, &out), TK_OK);
    int once = asked;
    cr_assert_eq(once, 2 * 1 * 4, "one question per step: %d", once);
    tkt_expect_status(tk_call_run(c, 2, (const tk_matrix *const *)in, 1, &out), TK_OK);
    cr_assert_eq(asked, 2 * once);
    expect_matmul(out, x, y, M, N, K);
    destroy_all(c, in, out, x, y);
}
