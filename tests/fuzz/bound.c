/* bound.c - libFuzzer harness for the audit of reductions: its error bound
 * is rigorous, as tk_audit(3) claims.
 *
 * Fuzzed matmul and row-sum contracts (inputs in every float dtype, an
 * accumulation of float32, bfloat16 or float16, outputs of float32,
 * bfloat16 or float16, one thread or two) over fuzzed shapes and data from
 * subnormal products to large sums (short of overflow in the accumulator
 * or the output), cancellation included.  The correct candidate computes
 * the declared contract from the stored inputs: each product rounded to
 * the accumulator (exact there for narrow inputs), added in the
 * accumulator in an order the fuzzer picks (k order, reversed, blocks of a
 * fuzzed size, pairwise, or a shuffle), with fused multiply-adds in k
 * order or reversed where the accumulator is float32 if the fuzzer says
 * so, then cast once to the output dtype.  Every such candidate must pass, with every element within
 * its bound (a ratio of at most 1).  Two wrong candidates must fail: one
 * that leaves an element unwritten (the NaN fill shows, diagnosed as a
 * missing initialization) and one that moves an element by far more than
 * any bound.  Refusals (a K too deep for a bound, say) return a documented
 * status with a message. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tilekern.h>

#include "fuzz.h"

enum { ORDER_K, ORDER_REVERSED, ORDER_BLOCKED, ORDER_PAIRWISE, ORDER_SHUFFLED, ORDERS };
enum { CORRECT, UNWRITTEN, FAR_OFF, KINDS };

typedef struct {
    int acc, order, block, kind;
    bool fma;
    uint64_t seed;
    int64_t m, k, n;   /* n is 1 for a row sum, whose y is absent */
    bool matmul;
    double far;        /* FAR_OFF's move: above every element's bound */
} spec;

static const int in_dtypes[5] = {TK_DTYPE_F32, TK_DTYPE_BF16, TK_DTYPE_F16,
                                 TK_DTYPE_F8E4M3FN, TK_DTYPE_F8E5M2};
static const int acc_dtypes[3] = {TK_DTYPE_F32, TK_DTYPE_BF16, TK_DTYPE_F16};
static const double max_finite[3] = {3.4028234663852886e38, 3.3895313892515355e38, 65504.0};

static int dtype_slot(int dtype)
{
    return dtype == TK_DTYPE_F32 ? 0 : dtype == TK_DTYPE_BF16 ? 1 : 2;
}

/* A float32 value rounded to dtype (float32, bfloat16 or float16). */
static float round_to(int dtype, float v)
{
    if (dtype == TK_DTYPE_F32)
        return v;
    uint16_t h;
    float f;
    check(tk_dtype_from_f32_n(dtype, &h, &v, 1) == TK_OK);
    check(tk_dtype_to_f32_n(dtype, &f, &h, 1) == TK_OK);
    return f;
}

static uint64_t next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

/* Terms t[0..k-1] (each already rounded to the accumulator) added in the
 * accumulator in the spec's order; a[] is scratch of k floats. */
static float sum(const spec *s, const float *t, const float *x, const float *y, float *a,
                 uint64_t *seed)
{
    int64_t k = s->k;
    float acc = 0.0f;
    switch (s->order) {
    case ORDER_K:
    case ORDER_REVERSED:
        for (int64_t i = 0; i < k; i++) {
            int64_t at = s->order == ORDER_K ? i : k - 1 - i;
            /* A fused multiply-add rounds the product and the sum once. */
            acc = s->fma ? fmaf(x[at], y[at], acc) : round_to(s->acc, acc + t[at]);
        }
        return acc;
    case ORDER_BLOCKED:
        for (int64_t b0 = 0; b0 < k; b0 += s->block) {
            float part = 0.0f;
            for (int64_t i = b0; i < b0 + s->block && i < k; i++)
                part = round_to(s->acc, part + t[i]);
            acc = round_to(s->acc, acc + part);
        }
        return acc;
    case ORDER_PAIRWISE:
        memcpy(a, t, (size_t)k * sizeof *a);
        for (int64_t w = k; w > 1; w = (w + 1) / 2) {
            for (int64_t i = 0; i < w / 2; i++)
                a[i] = round_to(s->acc, a[2 * i] + a[2 * i + 1]);
            if (w % 2)
                a[w / 2] = a[w - 1];
        }
        return a[0];
    default:   /* a shuffle of the terms */
        memcpy(a, t, (size_t)k * sizeof *a);
        for (int64_t i = k - 1; i > 0; i--) {
            int64_t j = (int64_t)(next(seed) % (uint64_t)(i + 1));
            float v = a[i];
            a[i] = a[j];
            a[j] = v;
        }
        for (int64_t i = 0; i < k; i++)
            acc = round_to(s->acc, acc + a[i]);
        return acc;
    }
}

static int candidate(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    const spec *s = user;
    int64_t m = s->m, k = s->k, n = s->n;
    check(tk_matrix_rows(in[0]) == m && tk_matrix_cols(in[0]) == k);
    check(tk_matrix_rows(out) == m && tk_matrix_cols(out) == n);
    float *x = malloc((size_t)(m * k) * sizeof *x), *y = malloc((size_t)(k * n) * sizeof *y);
    float *xs = malloc((size_t)k * sizeof *xs), *ys = malloc((size_t)k * sizeof *ys);
    float *t = malloc((size_t)k * sizeof *t), *a = malloc((size_t)k * sizeof *a);
    float *o = malloc((size_t)(m * n) * sizeof *o);
    check(x && y && xs && ys && t && a && o);
    check(tk_matrix_to_f32(in[0], x, k) == TK_OK);
    if (s->matmul)
        check(tk_matrix_to_f32(in[1], y, n) == TK_OK);
    uint64_t seed = s->seed;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            for (int64_t kk = 0; kk < k; kk++) {
                xs[kk] = x[i * k + kk];
                ys[kk] = s->matmul ? y[kk * n + j] : 1.0f;
                /* Exact in float64; rounded once to the accumulator. */
                t[kk] = round_to(s->acc, (float)((double)xs[kk] * (double)ys[kk]));
            }
            o[i * n + j] = sum(s, t, xs, ys, a, &seed);
        }
    if (s->kind == FAR_OFF)
        o[(m / 2) * n + n / 2] += (float)s->far;
    /* Cast once; an unwritten element keeps the NaN the audit filled. */
    unsigned char *data = tk_matrix_data(out);
    size_t es = (size_t)tk_dtype_size(tk_matrix_dtype(out));
    int64_t ld = tk_matrix_row_stride(out);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            if (!(s->kind == UNWRITTEN && i == m - 1 && j == n - 1))
                check(tk_dtype_from_f32_n(tk_matrix_dtype(out), data + (size_t)(i * ld + j) * es,
                                          &o[i * n + j], 1) == TK_OK);
    free(x), free(y), free(xs), free(ys), free(t), free(a), free(o);
    return 0;
}

/* Originals: small integers times a power of two per matrix, spread over a
 * few more binades, some zeros; x's and y's scales apart, so that products
 * reach from subnormal to large. */
static void fill(float *v, int64_t count, int scale, int spread, uint64_t *seed)
{
    for (int64_t i = 0; i < count; i++) {
        uint64_t r = next(seed);
        int mant = (int)(r % 33) - 16;
        int e = scale + (int)((r >> 8) % (uint64_t)(spread + 1));
        v[i] = ldexpf((float)mant, e);
    }
}

static double metric(const tk_audit *a, int which)
{
    double v;
    check(tk_audit_result(a, 0, which, &v) == TK_OK);
    return v;
}

static void run_bound(bytes *b)
{
    spec s = {0};
    s.matmul = take(b, 0, 3) != 3;
    int dtype = in_dtypes[take(b, 0, 4)], out_dtype = acc_dtypes[take(b, 0, 2)];
    s.acc = acc_dtypes[take(b, 0, 2)];
    /* 32 rows or more now and then: the audit's passes split by rows only
     * from there, so that two threads are two. */
    s.m = take(b, 0, 7) == 7 ? 32 + take(b, 0, 9) : take(b, 1, 5);
    s.k = take(b, 1, 12) * take(b, 1, 40);   /* up to 480: blocks of 128 and tails */
    s.n = s.matmul ? take(b, 1, 5) : 1;
    s.order = take(b, 0, ORDERS - 1);
    s.block = take(b, 1, 200);
    s.fma = s.acc == TK_DTYPE_F32 && (s.order == ORDER_K || s.order == ORDER_REVERSED) &&
            take(b, 0, 1);
    s.kind = take(b, 0, 7) < 6 ? CORRECT : take(b, 0, 1) ? UNWRITTEN : FAR_OFF;
    s.seed = (uint64_t)take(b, 0, 255) << 8 | (uint64_t)take(b, 0, 255);
    int threads = take(b, 1, 2);
    /* Scales: float32 originals from about 2^-75 to 2^72, products from
     * subnormal to past float32's range (those cases are skipped below). */
    int sx = take(b, -75, 56), sy = s.matmul ? take(b, -75, 56) : 0;
    int spread = take(b, 0, 12);

    float *x = malloc((size_t)(s.m * s.k) * sizeof *x);
    float *y = malloc((size_t)(s.k * s.n) * sizeof *y);
    check(x && y);
    uint64_t seed = s.seed * 2654435761u + 1;
    fill(x, s.m * s.k, sx, spread, &seed);
    fill(y, s.k * s.n, sy, spread, &seed);
    if (take(b, 0, 3) == 3)   /* cancellation: the second half of x negates the first */
        for (int64_t i = 0; i < s.m; i++)
            for (int64_t kk = 0; kk + 1 < s.k; kk += 2)
                x[i * s.k + kk + 1] = -x[i * s.k + kk];

    /* The stored inputs' largest sum of magnitudes (exact enough in
     * float64), kept well inside the accumulator's and the output's range. */
    tk_matrix *xm = NULL, *ym = NULL;
    check(tk_matrix_from_f32(&xm, dtype, s.m, s.k, x, s.k) == TK_OK);
    check(tk_matrix_from_f32(&ym, dtype, s.k, s.n, y, s.n) == TK_OK);
    float *xv = malloc((size_t)(s.m * s.k) * sizeof *xv);
    float *yv = malloc((size_t)(s.k * s.n) * sizeof *yv);
    check(xv && yv);
    check(tk_matrix_to_f32(xm, xv, s.k) == TK_OK && tk_matrix_to_f32(ym, yv, s.n) == TK_OK);
    double amax = 0.0;
    bool finite = true;
    for (int64_t i = 0; i < s.m; i++)
        for (int64_t j = 0; j < s.n; j++) {
            double A = 0.0;
            for (int64_t kk = 0; kk < s.k; kk++) {
                double p = (double)xv[i * s.k + kk] * (s.matmul ? (double)yv[kk * s.n + j] : 1.0);
                finite = finite && isfinite(p);
                A += fabs(p);
            }
            amax = A > amax ? A : amax;
        }
    double room = fmin(max_finite[dtype_slot(s.acc)], max_finite[dtype_slot(out_dtype)]) / 8;
    s.far = 8.0 * amax + 1.0;
    if (!finite || amax > room || (s.kind == FAR_OFF && s.far > room)) {
        tk_matrix_destroy(xm), tk_matrix_destroy(ym);
        free(x), free(y), free(xv), free(yv);
        return;
    }

    tk_kernel *kern = NULL;
    tk_audit *a = NULL;
    check((s.matmul ? tk_kernel_matmul(&kern) : tk_kernel_row_sum(&kern)) == TK_OK);
    int rc = tk_kernel_set(kern, TK_KERNEL_ACCUM, s.acc);
    check(rc == TK_OK);
    check(tk_kernel_set(kern, TK_KERNEL_THREADS, threads) == TK_OK);
    check(tk_audit_create(&a, kern) == TK_OK);
    check(tk_audit_set_candidate(a, candidate, &s) == TK_OK);
    const float *orig[2] = {x, y};
    rc = tk_audit_add_reduction_case(a, dtype, out_dtype, s.m, s.k, s.n, orig);
    if (rc == TK_OK) {
        check(tk_audit_case_count(a) == 1);
        rc = tk_audit_run(a);
        if (s.kind == CORRECT) {
            if (rc != TK_OK)
                fprintf(stderr, "bound.c: a correct candidate failed: %s\n",
                        tk_last_error_message());
            check(rc == TK_OK && metric(a, TK_AUDIT_PASSED) == 1.0);
            double ratio = metric(a, TK_AUDIT_BOUND_RATIO);
            check(ratio >= 0.0 && ratio <= 1.0);
        } else {
            check(rc == TK_EMISMATCH && metric(a, TK_AUDIT_PASSED) == 0.0);
            check(!(metric(a, TK_AUDIT_BOUND_RATIO) <= 1.0));   /* above 1, or NaN */
            check(s.kind != UNWRITTEN ||
                  metric(a, TK_AUDIT_DIAGNOSIS) == (double)TK_SCHEDULE_NO_INIT);
        }
    } else {
        /* Refused: K too deep for a bound of the accumulation, or inputs it
         * cannot hold; a message, and no case added. */
        check(rc == TK_ERANGE || rc == TK_EDTYPE);
        check(tk_last_error_message()[0] != '\0' && tk_audit_case_count(a) == 0);
    }
    tk_audit_destroy(a);
    tk_kernel_destroy(kern);
    tk_matrix_destroy(xm), tk_matrix_destroy(ym);
    free(x), free(y), free(xv), free(yv);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    bytes b = {data, size};
    run_bound(&b);
    return 0;
}
