/* call.c - the kernels Pallas users write, as tk_call grids: matmul with an
 * f32 accumulator cast once to bf16, a row sum, a bias add, a transpose and
 * the seed's axpy, also as the call of the built-in kernel
 * (tk_call_create_kernel).  Each runs on shapes with tails on every axis and is
 * checked against a plain untiled loop (on small integers, so every sum is
 * exact whatever the order); the copies each one skipped are printed.
 *
 *   build/examples/call
 *
 * The exit status is 0 only when every kernel matches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tilekern.h>

static int failures;

static float *ints(int64_t n, unsigned seed)
{
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; v && i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (float)((int)(seed >> 16) % 7 - 3);
    }
    return v;
}

static float *el(tk_block *b, int64_t r, int64_t c) { return b->data + r * b->ld + c; }

/* The grid runs, then the output is compared with want (f32, rows x cols). */
static void check(const char *name, tk_call *c, int n_in, tk_matrix **in, tk_matrix *out,
                  const float *want)
{
    int rc = tk_call_run(c, n_in, (const tk_matrix *const *)in, 1, &out);
    int64_t rows = tk_matrix_rows(out), cols = tk_matrix_cols(out), bad = 0;
    float *got = malloc((size_t)(rows * cols) * sizeof *got);
    if (!rc && got)
        rc = tk_matrix_to_f32(out, got, cols);
    for (int64_t i = 0; !rc && got && i < rows * cols; i++)
        bad += memcmp(&got[i], &want[i], sizeof *got) != 0;
    double skipped = 0, out_copies = 0;
    if (!rc) {
        tk_call_stat(c, TK_STAT_COPIES_SKIPPED, &skipped);
        tk_call_stat(c, TK_STAT_COPIES_OUT, &out_copies);
    }
    if (rc || bad || !got) {
        printf("%-9s FAILED: %s\n", name, rc ? tk_last_error_message() : "wrong values");
        failures++;
    } else {
        printf("%-9s %lldx%lld matches the untiled loop bit for bit; %.0f input copies "
               "skipped, %.0f output blocks written back\n", name, (long long)rows,
               (long long)cols, skipped, out_copies);
    }
    free(got);
}

static int matmul(void *u, tk_block *const *b, int n)
{
    (void)u, (void)n;
    if (b[2]->grid[2] == 0)  /* first visit along k: start the accumulator */
        for (int64_t r = 0; r < b[2]->rows; r++)
            for (int64_t c = 0; c < b[2]->cols; c++)
                *el(b[2], r, c) = 0.0f;
    for (int64_t r = 0; r < b[2]->rows; r++)
        for (int64_t k = 0; k < b[0]->valid_cols; k++)
            for (int64_t c = 0; c < b[2]->cols; c++)
                *el(b[2], r, c) += *el(b[0], r, k) * *el(b[1], k, c);
    return 0;
}

static int rowsum(void *u, tk_block *const *b, int n)
{
    (void)u, (void)n;
    for (int64_t r = 0; r < b[1]->rows; r++) {
        if (b[0]->grid[1] == 0)
            *el(b[1], r, 0) = 0.0f;
        for (int64_t c = 0; c < b[0]->valid_cols; c++)
            *el(b[1], r, 0) += *el(b[0], r, c);
    }
    return 0;
}

static int bias(void *u, tk_block *const *b, int n)
{
    (void)u, (void)n;
    for (int64_t r = 0; r < b[0]->rows; r++)
        for (int64_t c = 0; c < b[0]->cols; c++)
            *el(b[2], r, c) = *el(b[0], r, c) + *el(b[1], 0, c);
    return 0;
}

static int transpose(void *u, tk_block *const *b, int n)
{
    (void)u, (void)n;
    for (int64_t r = 0; r < b[1]->rows; r++)
        for (int64_t c = 0; c < b[1]->cols; c++)
            *el(b[1], r, c) = *el(b[0], c, r);
    return 0;
}

static int axpy(void *u, tk_block *const *b, int n)
{
    (void)n;
    float alpha = *(const float *)u;
    for (int64_t r = 0; r < b[0]->rows; r++)
        for (int64_t c = 0; c < b[0]->cols; c++)
            *el(b[2], r, c) = alpha * *el(b[0], r, c) + *el(b[1], r, c);
    return 0;
}

static tk_matrix *matrix(int dtype, int64_t rows, int64_t cols, const float *src)
{
    tk_matrix *m = NULL;
    if (src ? tk_matrix_from_f32(&m, dtype, rows, cols, src, cols)
            : tk_matrix_create(&m, dtype, rows, cols)) {
        fprintf(stderr, "call: %s\n", tk_last_error_message());
        exit(1);
    }
    return m;
}

int main(void)
{
    enum { M = 37, K = 45, N = 300 };
    float *x = ints(M * K, 1), *y = ints(K * N, 2), *v = ints(M * N, 3), *w = ints(N, 4);
    float *want = malloc(sizeof(float) * M * N);
    if (!x || !y || !v || !w || !want)
        return 1;
    tk_call *c;

    /* matmul: grid (i, j, k); x at (i, k), y at (k, j), out at (i, j). */
    static const int64_t xm[8] = {1, 0, 0, 0, 0, 0, 1, 0}, ym[8] = {0, 0, 1, 0, 0, 1, 0, 0},
                         om[8] = {1, 0, 0, 0, 0, 1, 0, 0};
    int64_t g3[3] = {(M + 15) / 16, (N + 127) / 128, (K + 15) / 16};
    tk_matrix *in[2] = {matrix(TK_DTYPE_F32, M, K, x), matrix(TK_DTYPE_F32, K, N, y)};
    tk_matrix *out = matrix(TK_DTYPE_BF16, M, N, NULL);
    tk_call_create(&c, 3, g3, matmul, NULL);
    tk_call_add_input(c, TK_DTYPE_F32, M, K, 16, 16, xm);
    tk_call_add_input(c, TK_DTYPE_F32, K, N, 16, 128, ym);
    tk_call_add_output(c, TK_DTYPE_BF16, M, N, 16, 128, om);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++)
                s += x[i * K + k] * y[k * N + j];
            want[i * N + j] = tk_bf16_to_f32(tk_bf16_from_f32(s));  /* cast once */
        }
    check("matmul", c, 2, in, out, want);
    tk_call_destroy(c);
    tk_matrix_destroy(in[0]);
    tk_matrix_destroy(in[1]);
    tk_matrix_destroy(out);

    /* row sum: out block (i, 0) revisited along j. */
    static const int64_t rm[6] = {1, 0, 0, 0, 0, 0};
    int64_t g2[2] = {(M + 7) / 8, (N + 127) / 128};
    in[0] = matrix(TK_DTYPE_F32, M, N, v);
    out = matrix(TK_DTYPE_F32, M, 1, NULL);
    tk_call_create(&c, 2, g2, rowsum, NULL);
    tk_call_add_input(c, TK_DTYPE_F32, M, N, 8, 128, NULL);
    tk_call_add_output(c, TK_DTYPE_F32, M, 1, 8, 1, rm);
    for (int i = 0; i < M; i++) {
        want[i] = 0.0f;
        for (int j = 0; j < N; j++)
            want[i] += v[i * N + j];
    }
    check("row sum", c, 1, in, out, want);
    tk_call_destroy(c);
    tk_matrix_destroy(out);

    /* bias add: a (1, N) operand at (0, j), whatever the row. */
    static const int64_t bm[6] = {0, 0, 0, 0, 1, 0};
    int64_t gb[2] = {(M + 7) / 8, 1};
    in[1] = matrix(TK_DTYPE_F32, 1, N, w);
    out = matrix(TK_DTYPE_F32, M, N, NULL);
    tk_call_create(&c, 2, gb, bias, NULL);
    tk_call_add_input(c, TK_DTYPE_F32, M, N, 8, N, NULL);
    tk_call_add_input(c, TK_DTYPE_F32, 1, N, 1, N, bm);
    tk_call_add_output(c, TK_DTYPE_F32, M, N, 8, N, NULL);
    for (int i = 0; i < M * N; i++)
        want[i] = v[i] + w[i % N];
    check("bias add", c, 2, in, out, want);
    tk_call_destroy(c);
    tk_matrix_destroy(in[1]);
    tk_matrix_destroy(out);

    /* transpose: the input block at (j, i). */
    static const int64_t tm[6] = {0, 1, 0, 1, 0, 0};
    int64_t gt[2] = {(N + 15) / 16, (M + 15) / 16};
    out = matrix(TK_DTYPE_F32, N, M, NULL);
    tk_call_create(&c, 2, gt, transpose, NULL);
    tk_call_add_input(c, TK_DTYPE_F32, M, N, 16, 16, tm);
    tk_call_add_output(c, TK_DTYPE_F32, N, M, 16, 16, NULL);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            want[j * M + i] = v[i * N + j];
    check("transpose", c, 1, in, out, want);
    tk_call_destroy(c);
    tk_matrix_destroy(out);

    /* the seed's axpy, identity maps, bf16: the same bits as tk_kernel_run. */
    static float alpha = 2.0f;
    tk_matrix *xy[2] = {matrix(TK_DTYPE_BF16, M, N, v), NULL};
    xy[1] = xy[0];
    out = matrix(TK_DTYPE_BF16, M, N, NULL);
    tk_call_create(&c, 2, g2, axpy, &alpha);
    tk_call_add_input(c, TK_DTYPE_BF16, M, N, 8, 128, NULL);
    tk_call_add_input(c, TK_DTYPE_BF16, M, N, 8, 128, NULL);
    tk_call_add_output(c, TK_DTYPE_BF16, M, N, 8, 128, NULL);
    tk_kernel *k;
    tk_tiling *t;
    tk_matrix *ref = matrix(TK_DTYPE_BF16, M, N, NULL);
    if (tk_kernel_axpy(&k, alpha) || tk_tiling_create(&t, M, N, 8, 128) ||
        tk_kernel_run(k, t, (const tk_matrix *const *)xy, ref) ||
        tk_matrix_to_f32(ref, want, N)) {
        fprintf(stderr, "call: %s\n", tk_last_error_message());
        return 1;
    }
    check("axpy", c, 2, xy, out, want);
    tk_call_destroy(c);
    /* The built-in kernel itself as a call: run as tk_kernel_run runs it. */
    if (tk_call_create_kernel(&c, k, t, TK_DTYPE_BF16)) {
        fprintf(stderr, "call: %s\n", tk_last_error_message());
        return 1;
    }
    check("kernel", c, 2, xy, out, want);
    tk_call_destroy(c);
    tk_kernel_destroy(k);
    tk_tiling_destroy(t);
    tk_matrix_destroy(ref);
    tk_matrix_destroy(out);
    tk_matrix_destroy(xy[0]);
    tk_matrix_destroy(in[0]);
    free(x);
    free(y);
    free(v);
    free(w);
    free(want);
    return failures != 0;
}
