/* test_bound.c - the audit of reduction contracts from C: a k-blocked f32
 * matmul passes within the bound while differing in bits, candidates that
 * drop the K tail, read NaN padding beyond it, read their output before
 * writing it or accumulate in bf16 (term by term, or block by block) are
 * named, an indexing error is not put down to any of them, the
 * results and report say so, and every refusal names what it refuses. */
#include "tk_test.h"

#include <fenv.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

enum { M = 9, K = 300, N = 70, DEEP = 700 };

/* f32 accumulation over k in blocks of bk, the last block left out when
 * drop is set; or (bf16) a bfloat16 accumulator, to which each block's f32
 * sum is added (bk 1: every term).  Memory it should not read: (nan_pad)
 * the last block read whole, NaN beyond k; (into_out) sums added to the
 * output as handed over; (nan_row) the first row from scratch never
 * written (NaN).  (shift) An indexing error: term kk of x meets row kk + 1
 * of y (mod k). */
struct how {
    int bk;
    bool drop, bf16, f16, nan_pad, into_out, nan_row, shift;
    bool garbage;       /* the padding beyond K finite, different in every row and column */
    bool garbage_row;   /* row 0 alone off by the garbage of one term */
    int skip_at, skip;  /* terms [skip_at, skip_at + skip) of K left out, */
    float times;        /* or, where not 0, multiplied by this */
};

/* The garbage in the padding of x (row i, column kk) and of y (row kk,
 * column j): hashes of the position, in [-32, 32) and [-48, 48). */
static float garbage_at(int64_t a, int64_t b, float scale)
{
    uint32_t h = (uint32_t)(a * 0x9E3779B1u) ^ (uint32_t)(b * 0x85EBCA77u);
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 12;
    return scale * ((float)(h >> 8) * 0x1p-23f - 1.0f);
}

static float garbage_x(int64_t i, int64_t kk)
{
    return garbage_at(i, kk, 32.0f);
}

static float garbage_y(int64_t kk, int64_t j)
{
    return garbage_at(j + 7919, kk, 48.0f);
}

static float f16_round(float v)
{
    uint16_t h;
    tk_dtype_from_f32_n(TK_DTYPE_F16, &h, &v, 1);
    tk_dtype_to_f32_n(TK_DTYPE_F16, &v, &h, 1);
    return v;
}

static int matmul(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    const struct how *h = user;
    int64_t m = tk_matrix_rows(in[0]), k = tk_matrix_cols(in[0]), n = tk_matrix_cols(in[1]);
    float *x = malloc((size_t)(m * k) * sizeof *x), *y = malloc((size_t)(k * n) * sizeof *y);
    float *o = calloc((size_t)(m * n), sizeof *o);
    tk_matrix_to_f32(in[0], x, k);
    tk_matrix_to_f32(in[1], y, n);
    if (h->into_out)
        tk_matrix_to_f32(out, o, n);
    int64_t end = h->drop ? k - k % h->bk : k;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float acc = o[i * n + j];
            for (int64_t k0 = 0; k0 < end; k0 += h->bk) {
                float part = 0.0f;
                for (int64_t kk = k0; kk < k0 + h->bk && (kk < end || h->nan_pad || h->garbage);
                     kk++)
                    part += kk >= h->skip_at && kk < h->skip_at + h->skip
                                ? h->times * x[i * k + kk] * y[kk * n + j]
                            : kk < k ? x[i * k + kk] * y[(kk + h->shift) % k * n + j]
                            : h->garbage ? garbage_x(i, kk) * garbage_y(kk, j) : NAN;
                acc = h->bf16 ? tk_bf16_to_f32(tk_bf16_from_f32(acc + part))
                      : h->f16 ? f16_round(acc + part)
                               : acc + part;
            }
            o[i * n + j] = h->nan_row && i == 0 ? NAN
                           : h->garbage_row && i == 0 ? acc + garbage_x(0, k) * garbage_y(k, j)
                                                      : acc;
        }
    tk_matrix *t;
    int rc = tk_matrix_from_f32(&t, tk_matrix_dtype(out), m, n, o, n);
    if (!rc)
        memcpy(tk_matrix_data(out), tk_matrix_data(t),
               (size_t)(m * n * tk_dtype_size(tk_matrix_dtype(out))));
    tk_matrix_destroy(t);
    free(x), free(y), free(o);
    return rc;
}

static double res(const tk_audit *a, int64_t i, int metric)
{
    double v = -1;
    cr_assert_eq(tk_audit_result(a, i, metric, &v), TK_OK, "%s", tk_last_error_message());
    return v;
}

/* The report of the last run in a format, NUL-terminated. */
static void report(const tk_audit *a, int format, char *text, size_t size)
{
    char path[] = "/tmp/tk_bound_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(tk_audit_write_report(a, path, format), TK_OK);
    FILE *f = fopen(path, "r");
    size_t got = fread(text, 1, size - 1, f);
    text[got] = '\0';
    fclose(f);
    unlink(path);
}

/* An audit of the matmul of M x depth by depth x N, in f32 and bf16. */
static tk_audit *audit_of_depth(struct how *h, tk_kernel **k, int64_t depth)
{
    static float x[M * DEEP], y[DEEP * N];
    cr_assert_leq(depth, DEEP);
    tkt_fill(x, M * depth, 3);
    tkt_fill(y, depth * N, 4);
    cr_assert_eq(tk_kernel_matmul(k), TK_OK);
    tk_audit *a;
    cr_assert_eq(tk_audit_create(&a, *k), TK_OK);
    cr_assert_eq(tk_audit_set_candidate(a, matmul, h), TK_OK);
    const float *orig[2] = {x, y};
    cr_assert_eq(tk_audit_add_reduction_case(a, TK_DTYPE_F32, TK_DTYPE_F32, M, depth, N,
                                             orig), TK_OK);
    cr_assert_eq(tk_audit_add_reduction_case(a, TK_DTYPE_BF16, TK_DTYPE_F32, M, depth, N,
                                             orig), TK_OK);
    return a;
}

static tk_audit *audit_of(struct how *h, tk_kernel **k)
{
    return audit_of_depth(h, k, K);
}

Test(bound, a_correct_matmul_passes_while_differing_in_bits)
{
    struct how h = {.bk = 128};
    tk_kernel *k;
    tk_audit *a = audit_of(&h, &k);
    cr_assert_eq(tk_audit_run(a), TK_OK, "%s", tk_last_error_message());
    for (int64_t i = 0; i < 2; i++) {
        cr_assert_eq(res(a, i, TK_AUDIT_PASSED), 1.0);
        cr_assert_gt(res(a, i, TK_AUDIT_IMPL_MISMATCHES), 0.0, "case %lld", (long long)i);
        double ratio = res(a, i, TK_AUDIT_BOUND_RATIO);
        cr_assert(ratio > 0.0 && ratio <= 1.0, "ratio %g", ratio);
        cr_assert_gt(res(a, i, TK_AUDIT_BOUND), 0.0);
        cr_assert_lt(res(a, i, TK_AUDIT_BOUND_ROW), (double)M);
        cr_assert_lt(res(a, i, TK_AUDIT_BOUND_COL), (double)N);
        cr_assert_eq(res(a, i, TK_AUDIT_DEPTH), (double)K);
        cr_assert_eq(res(a, i, TK_AUDIT_ROWS), (double)M);
        cr_assert_eq(res(a, i, TK_AUDIT_COLS), (double)N);
        cr_assert_eq(res(a, i, TK_AUDIT_OUT_DTYPE), (double)TK_DTYPE_F32);
    }
    /* The bf16 case's gap has an input part (the representation) and the
     * f32 case's has none. */
    cr_assert_eq(res(a, 0, TK_AUDIT_GAP_INPUT_MAX_ABS), 0.0);
    cr_assert_gt(res(a, 1, TK_AUDIT_GAP_INPUT_MAX_ABS), 0.0);
    char text[16384];
    report(a, TK_REPORT_TEXT, text, sizeof text);
    cr_assert(strstr(text, "9 x 300 x 70"), "%s", text);
    cr_assert(strstr(text, "differ in bits from the oracle, every one within the bound"),
              "%s", text);
    cr_assert(strstr(text, "2 of 2 cases within their error bound"), "%s", text);
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
}

/* Exact data: every product and sum below is exact in float64, in any
 * order, so the oracle, the originals' sums and the magnitudes are known
 * here independently of how the library blocks, vectorizes or splits its
 * passes. */
/* Odd rows and tails on every blocking; EN2's columns end inside a 16-
 * column tile of the AVX-512 path (n % 16 from 9 to 15 takes its branch
 * for columns past the matrix). */
enum { EM = 69, EK = 300, EN = 21, EN2 = 29 };

static double exact_x(int64_t e) { return (double)(e % 13 - 6) + (double)(e % 37) / 1024.0; }

/* The exact matmul (row sum when in[1] is absent) of the stored inputs,
 * cast once to f32. */
static int exact_candidate(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    bool mm = *(const bool *)user;
    int64_t m = tk_matrix_rows(in[0]), k = tk_matrix_cols(in[0]), n = tk_matrix_cols(out);
    float *x = malloc((size_t)(m * k) * sizeof *x), *y = malloc((size_t)(k * n) * sizeof *y);
    tk_matrix_to_f32(in[0], x, k);
    if (mm)
        tk_matrix_to_f32(in[1], y, n);
    float *o = tk_matrix_data(out);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double sum = 0.0;
            for (int64_t kk = 0; kk < k; kk++)
                sum += (double)x[i * k + kk] * (mm ? (double)y[kk * n + j] : 1.0);
            o[i * n + j] = (float)sum;
        }
    free(x), free(y);
    return 0;
}

Test(bound, the_oracle_and_the_gap_are_exact_on_exact_data)
{
    static float x[EM * EK], y[EK * EN2];
    for (int64_t e = 0; e < EM * EK; e++)
        x[e] = (float)exact_x(e);
    for (int64_t e = 0; e < EK * EN2; e++)
        y[e] = (float)exact_x(e * 7 + 3);
    for (int mm = 0; mm < 3; mm++) {   /* a row sum, then matmuls of EN and EN2 columns */
        int64_t n = mm == 2 ? EN2 : mm ? EN : 1;
        /* Stored (bf16) and original sums, and the magnitudes, in double:
         * exact, so any order gives these bits. */
        double in_part = 0.0, out_part = 0.0;
        float gap = 0.0f;
        double A0 = 0.0;
        for (int64_t i = 0; i < EM; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0.0, so = 0.0;
                for (int64_t k = 0; k < EK; k++) {
                    double xs = tk_bf16_to_f32(tk_bf16_from_f32(x[i * EK + k]));
                    double ys = mm ? tk_bf16_to_f32(tk_bf16_from_f32(y[k * n + j])) : 1.0;
                    s += xs * ys;
                    so += (double)x[i * EK + k] * (mm ? (double)y[k * n + j] : 1.0);
                    if (i == 0 && j == 0)
                        A0 += fabs(xs * ys);
                }
                in_part = fmax(in_part, fabs(so - s));
                out_part = fmax(out_part, fabs((double)(float)s - s));
                gap = fmaxf(gap, fabsf((float)s - (float)so));
            }
        for (int threads = 1; threads <= 3; threads += 2) {
            tk_kernel *k;
            tk_audit *a;
            bool is_mm = mm != 0;
            cr_assert_eq(mm ? tk_kernel_matmul(&k) : tk_kernel_row_sum(&k), TK_OK);
            cr_assert_eq(tk_kernel_set(k, TK_KERNEL_THREADS, threads), TK_OK);
            cr_assert_eq(tk_audit_create(&a, k), TK_OK);
            cr_assert_eq(tk_audit_set_candidate(a, exact_candidate, &is_mm), TK_OK);
            const float *orig[2] = {x, y};
            cr_assert_eq(tk_audit_add_reduction_case(a, TK_DTYPE_BF16, TK_DTYPE_F32, EM, EK,
                                                     n, orig), TK_OK);
            cr_assert_eq(tk_audit_run(a), TK_OK, "%s", tk_last_error_message());
            cr_assert_eq(res(a, 0, TK_AUDIT_IMPL_MISMATCHES), 0.0, "mm %d threads %d", mm,
                         threads);
            cr_assert_eq(res(a, 0, TK_AUDIT_BOUND_RATIO), 0.0);
            cr_assert_eq(res(a, 0, TK_AUDIT_GAP_INPUT_MAX_ABS), (double)(float)in_part);
            cr_assert_eq(res(a, 0, TK_AUDIT_GAP_OUTPUT_MAX_ABS), (double)(float)out_part);
            cr_assert_eq(res(a, 0, TK_AUDIT_GAP_MAX_ABS), (double)gap);
            /* Element (0, 0)'s bound: gamma(K - 1) of its magnitudes, plus
             * terms some 2^-29 smaller.  The matmul sums magnitudes in
             * float32 per 128 terms, each sum within gamma_24(127) of its
             * terms', and takes the total at its upper bound: never below
             * gamma A, at most (1 + g) / (1 - g) above it. */
            double g = (EK - 1) * 0x1p-24 / (1.0 - (EK - 1) * 0x1p-24),
                   g128 = mm ? 127 * 0x1p-24 / (1.0 - 127 * 0x1p-24) : 0.0;
            cr_assert_eq(res(a, 0, TK_AUDIT_BOUND_ROW), 0.0);
            cr_assert_eq(res(a, 0, TK_AUDIT_BOUND_COL), 0.0);
            double b = res(a, 0, TK_AUDIT_BOUND);
            cr_assert(b >= g * A0 && b <= g * A0 * (1.0 + g128) / (1.0 - g128) * (1.0 + 0x1p-28),
                      "mm %d bound %.17g, gamma A %.17g", mm, b, g * A0);
            tk_audit_destroy(a);
            tk_kernel_destroy(k);
        }
    }
}

/* Under a directed rounding mode a float32 addition may lose two units in
 * the last place, more than the float32 sums of magnitudes allow for: the
 * matmul then sums its magnitudes in float64, and element (0, 0)'s bound is
 * gamma(K - 1) A with no float32 allowance (exact data: the oracle's sums
 * do not round, nor does the bound's position move). */
Test(bound, a_directed_rounding_mode_keeps_float64_magnitudes)
{
    static float x[EM * EK], y[EK * EN];
    double A0 = 0.0;
    for (int64_t e = 0; e < EM * EK; e++)
        x[e] = (float)exact_x(e);
    for (int64_t e = 0; e < EK * EN; e++)
        y[e] = (float)exact_x(e * 7 + 3);
    for (int64_t k = 0; k < EK; k++)
        A0 += fabs((double)tk_bf16_to_f32(tk_bf16_from_f32(x[k])) *
                   tk_bf16_to_f32(tk_bf16_from_f32(y[k * EN])));
    double g = (EK - 1) * 0x1p-24 / (1.0 - (EK - 1) * 0x1p-24);
    bool mm = true;
    for (int down = 0; down < 2; down++) {
        tk_kernel *k;
        tk_audit *a;
        cr_assert_eq(tk_kernel_matmul(&k), TK_OK);
        cr_assert_eq(tk_audit_create(&a, k), TK_OK);
        cr_assert_eq(tk_audit_set_candidate(a, exact_candidate, &mm), TK_OK);
        const float *orig[2] = {x, y};
        cr_assert_eq(tk_audit_add_reduction_case(a, TK_DTYPE_BF16, TK_DTYPE_F32, EM, EK, EN,
                                                 orig), TK_OK);
        fesetround(down ? FE_DOWNWARD : FE_TONEAREST);
        int rc = tk_audit_run(a);
        fesetround(FE_TONEAREST);
        cr_assert_eq(rc, TK_OK, "%s", tk_last_error_message());
        cr_assert_eq(res(a, 0, TK_AUDIT_BOUND_ROW), 0.0);
        cr_assert_eq(res(a, 0, TK_AUDIT_BOUND_COL), 0.0);
        double b = res(a, 0, TK_AUDIT_BOUND);
        if (down)
            cr_assert(b >= g * A0 && b <= g * A0 * (1.0 + 0x1p-28), "bound %.17g, gamma A "
                      "%.17g", b, g * A0);
        else   /* the float32 allowance, 1 / (1 - gamma_24(127)), shows */
            cr_assert(b > g * A0 * (1.0 + 0x1p-20), "bound %.17g, gamma A %.17g", b, g * A0);
        tk_audit_destroy(a);
        tk_kernel_destroy(k);
    }
}

Test(bound, wrong_kernels_are_named)
{
    const struct {
        struct how h;
        int want;
    } cases[] = {{{.bk = 128, .drop = true}, TK_SCHEDULE_K_TAIL},
                 {{.bk = 1, .bf16 = true}, TK_SCHEDULE_BF16_ACCUM},
                 {{.bk = 128, .nan_pad = true}, TK_SCHEDULE_K_TAIL_PADDING},
                 {{.bk = 128, .into_out = true}, TK_SCHEDULE_NO_INIT},
                 {{.bk = 128, .nan_row = true}, TK_SCHEDULE_NO_INIT},
                 {{.bk = 128, .bf16 = true}, TK_SCHEDULE_BF16_ACCUM},
                 {{.bk = 128, .shift = true}, TK_SCHEDULE_UNKNOWN}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        struct how h = cases[c].h;
        tk_kernel *k;
        tk_audit *a = audit_of(&h, &k);
        tkt_expect_status(tk_audit_run(a), TK_EMISMATCH);
        cr_assert(strstr(tk_last_error_message(), "exceed their error bound"), "%s",
                  tk_last_error_message());
        for (int64_t i = 0; i < 2; i++) {
            cr_assert_eq(res(a, i, TK_AUDIT_PASSED), 0.0);
            cr_assert_gt(res(a, i, TK_AUDIT_BOUND_RATIO), 1.0);
            cr_assert_eq(res(a, i, TK_AUDIT_DIAGNOSIS), cases[c].want, "case %zu/%lld: %s",
                         c, (long long)i,
                         tk_audit_schedule_name((int)res(a, i, TK_AUDIT_DIAGNOSIS)));
        }
        tk_audit_destroy(a);
        tk_kernel_destroy(k);
    }
    cr_assert_str_eq(tk_audit_schedule_name(TK_SCHEDULE_K_TAIL), "k-tail-dropped");
    cr_assert_str_eq(tk_audit_schedule_name(TK_SCHEDULE_NO_INIT), "missing-initialization");
    cr_assert_str_eq(tk_audit_schedule_name(TK_SCHEDULE_K_TAIL_PADDING),
                     "k-tail-reads-padding");
    cr_assert_null(tk_audit_schedule_name(TK_SCHEDULE_K_TAIL_PADDING + 1));
}

/* Case c: the matmul candidate h on x (m x k) and y (k x n), in float32
 * and bfloat16 into `out`, fails and is diagnosed `want` in both. */
static void expect_named(size_t c, struct how h, const float *x, const float *y, int64_t m,
                         int64_t k, int64_t n, int out, int want)
{
    tk_kernel *kc;
    tk_audit *a;
    cr_assert_eq(tk_kernel_matmul(&kc), TK_OK);
    cr_assert_eq(tk_audit_create(&a, kc), TK_OK);
    cr_assert_eq(tk_audit_set_candidate(a, matmul, &h), TK_OK);
    const float *orig[2] = {x, y};
    for (int d = 0; d < 2; d++)
        cr_assert_eq(tk_audit_add_reduction_case(a, d ? TK_DTYPE_BF16 : TK_DTYPE_F32, out, m, k,
                                                 n, orig),
                     TK_OK);
    tkt_expect_status(tk_audit_run(a), TK_EMISMATCH);
    for (int64_t i = 0; i < 2; i++)
        cr_assert_eq(res(a, i, TK_AUDIT_DIAGNOSIS), want, "case %zu/%lld: %s", c, (long long)i,
                     tk_audit_schedule_name((int)res(a, i, TK_AUDIT_DIAGNOSIS)));
    tk_audit_destroy(a);
    tk_kernel_destroy(kc);
}

/* A matmul whose last block of K reads finite garbage has an error of rank
 * the block's pad width, in every element: named where the shape leaves
 * room to tell (a rank at most a quarter of the smaller dimension), for
 * pads of 4 (blocks of 16 at K = 300) and 20 (64), into float32 and
 * bfloat16; not where it leaves none (6 rows), nor for a pad of 84 (128),
 * beyond a quarter of 80 columns.  A low-rank error in one row only is
 * another error, and so are 4 terms of K left out, first or from the
 * third, and 20 from the 151st (ranks 4 and 20, the pads of blocks of 16
 * and 64): their columns are the data's. */
Test(bound, finite_garbage_beyond_k_is_named_by_the_rank_of_the_error)
{
    enum { GM = 96, GK = 300, GN = 80 };
    static float x[GM * GK], y[GK * GN];
    tkt_fill(x, GM * GK, 5);
    tkt_fill(y, GK * GN, 6);
    const struct {
        int64_t m;
        struct how h;
        int out, want;
    } cases[] = {{GM, {.bk = 16, .garbage = true}, TK_DTYPE_F32, TK_SCHEDULE_K_TAIL_PADDING},
                 {GM, {.bk = 64, .garbage = true}, TK_DTYPE_F32, TK_SCHEDULE_K_TAIL_PADDING},
                 {GM, {.bk = 16, .garbage = true}, TK_DTYPE_BF16, TK_SCHEDULE_K_TAIL_PADDING},
                 {GM, {.bk = 64, .garbage = true}, TK_DTYPE_BF16, TK_SCHEDULE_K_TAIL_PADDING},
                 {6, {.bk = 16, .garbage = true}, TK_DTYPE_F32, TK_SCHEDULE_UNKNOWN},
                 {GM, {.bk = 128, .garbage = true}, TK_DTYPE_F32, TK_SCHEDULE_UNKNOWN},
                 {GM, {.bk = 16, .garbage_row = true}, TK_DTYPE_F32, TK_SCHEDULE_UNKNOWN},
                 {GM, {.bk = 16, .skip = 4}, TK_DTYPE_F32, TK_SCHEDULE_UNKNOWN},
                 {GM, {.bk = 16, .skip = 4}, TK_DTYPE_BF16, TK_SCHEDULE_UNKNOWN},
                 {GM, {.bk = 16, .skip_at = 2, .skip = 4}, TK_DTYPE_F32, TK_SCHEDULE_UNKNOWN},
                 {GM, {.bk = 16, .skip_at = 150, .skip = 20}, TK_DTYPE_F32, TK_SCHEDULE_UNKNOWN}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        expect_named(c, cases[c].h, x, y, cases[c].m, GK, GN, cases[c].out, cases[c].want);
}

/* A block of K halved is an indexing error, not a narrow accumulation,
 * though a bfloat16 accumulation's probabilistic bound covers its error at
 * K = 700 and it errs less than one: the error is the block's partial
 * product times a number.  A block of 8, into float32 and bfloat16, was
 * named bfloat16-accumulation before the check (tk__one_window); in a
 * sweep of blocks of 8, 16 and 32 left out, doubled, negated or halved,
 * first or at 640, every one is now unknown.  So are 8 terms from the 5th
 * halved, the 101st left out and 3 from the 6th doubled, named
 * bfloat16-accumulation while the check tried aligned blocks alone.  A
 * bfloat16 accumulation is still named: term
 * by term and in blocks of 16; on inputs of ones, whose error (stagnation
 * at 256) is a multiple of every block's product and of the output, which
 * the fit takes out first (the first version of the check named it
 * unknown); on one output row (32 outputs: no block of 8 fits the cap of
 * 4MN / (M + N)); and on rank-1 data, whose blocks' products the output
 * and the constant span (an outside review found such cases named unknown
 * by the second version, 64x1024x64 among them; this one is a control). */
Test(bound, a_block_of_k_scaled_is_not_a_narrow_accumulation)
{
    enum { BM = 24, BN = 32 };
    static float x[BM * DEEP], y[DEEP * BN], ones[BM * DEEP > DEEP * BN ? BM * DEEP : DEEP * BN];
    enum { R1 = 64 };
    static float x1[R1 * DEEP], y1[DEEP * R1], f[R1 + 2 * DEEP + R1];
    tkt_fill(x, BM * DEEP, 7);
    tkt_fill(y, DEEP * BN, 8);
    for (size_t e = 0; e < sizeof ones / sizeof *ones; e++)
        ones[e] = 1.0f;
    /* Rank 1: x = u v^T, y = p q^T. */
    tkt_fill(f, R1 + 2 * DEEP + R1, 9);
    for (int64_t i = 0; i < R1; i++)
        for (int64_t k = 0; k < DEEP; k++)
            x1[i * DEEP + k] = f[i] * f[R1 + k];
    for (int64_t k = 0; k < DEEP; k++)
        for (int64_t j = 0; j < R1; j++)
            y1[k * R1 + j] = f[R1 + DEEP + k] * f[R1 + 2 * DEEP + j];
    const struct {
        struct how h;
        int out, want;
        bool ones, rank1;
        int64_t m;
    } cases[] = {
        {.h = {.bk = 8, .skip_at = 8, .skip = 8, .times = 0.5f}, .out = TK_DTYPE_F32,
         .want = TK_SCHEDULE_UNKNOWN},
        {.h = {.bk = 8, .skip_at = 640, .skip = 8, .times = 0.5f}, .out = TK_DTYPE_BF16,
         .want = TK_SCHEDULE_UNKNOWN},
        {.h = {.bk = 8, .skip_at = 4, .skip = 8, .times = 0.5f}, .out = TK_DTYPE_F32,
         .want = TK_SCHEDULE_UNKNOWN},
        {.h = {.bk = 8, .skip_at = 100, .skip = 1}, .out = TK_DTYPE_F32,
         .want = TK_SCHEDULE_UNKNOWN},
        {.h = {.bk = 8, .skip_at = 5, .skip = 3, .times = 2.0f}, .out = TK_DTYPE_F32,
         .want = TK_SCHEDULE_UNKNOWN},
        {.h = {.bk = 1, .bf16 = true}, .out = TK_DTYPE_BF16, .want = TK_SCHEDULE_BF16_ACCUM},
        {.h = {.bk = 16, .bf16 = true}, .out = TK_DTYPE_F32, .want = TK_SCHEDULE_BF16_ACCUM},
        {.h = {.bk = 1, .bf16 = true}, .out = TK_DTYPE_F32, .want = TK_SCHEDULE_BF16_ACCUM,
         .ones = true},
        {.h = {.bk = 1, .bf16 = true}, .out = TK_DTYPE_F32, .want = TK_SCHEDULE_BF16_ACCUM,
         .m = 1},
        {.h = {.bk = 1, .bf16 = true}, .out = TK_DTYPE_F32, .want = TK_SCHEDULE_BF16_ACCUM,
         .rank1 = true}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        expect_named(c, cases[c].h, cases[c].ones ? ones : cases[c].rank1 ? x1 : x,
                     cases[c].ones ? ones : cases[c].rank1 ? y1 : y,
                     cases[c].rank1 ? R1 : cases[c].m ? cases[c].m : BM, DEEP,
                     cases[c].rank1 ? R1 : BN, cases[c].out, cases[c].want);
}

/* A narrow accumulation is named by its format where the candidate is
 * nearly one of the blocked accumulations the diagnosis simulates, float32
 * partial sums added to a bfloat16 or float16 accumulator: bfloat16 blocks
 * of 128 into a bfloat16 output err like a float16 sum term by term, on a
 * log scale nearer it than bfloat16's, and were named
 * float16-accumulation from float32 inputs; float16 term by term into a
 * bfloat16 output from bfloat16 inputs was named after the storage dtype,
 * bfloat16-accumulation.  And on integers 0 to 3 whose first term of K is
 * 4096 to 36864, a bfloat16 accumulator drops every later term: the
 * error is that term's product less the output, which the check for one
 * window of K fits (named unknown by its first version, which tried
 * windows of one term, found by an outside review); the simulation
 * reproduces it.  Controls: float16 blocks of 64 into float32, and
 * bfloat16 term by term into float32; and, unknown, a float32 candidate
 * that keeps the first 64 terms of 2048 on data near 1e-5, where float16
 * sums underflow to near 0 (its first version named it
 * float16-accumulation, a simulation near 0 within a quarter of the
 * error: an outside review found it). */
Test(bound, a_blocked_narrow_accumulation_is_named_by_its_format)
{
    enum { BM = 24, BN = 32 };
    static float x[BM * DEEP], y[DEEP * BN], xi[BM * DEEP], yi[DEEP * BN];
    tkt_fill(x, BM * DEEP, 11);
    tkt_fill(y, DEEP * BN, 12);
    tkt_fill(xi, BM * DEEP, 13);   /* [-4, 4) to the integers 0 to 3 */
    tkt_fill(yi, DEEP * BN, 14);
    for (int64_t e = 0; e < BM * DEEP; e++)
        xi[e] = e % DEEP ? floorf((xi[e] + 4.0f) / 2.0f) : 4096.0f * (float)(1 + e / DEEP % 3);
    for (int64_t e = 0; e < DEEP * BN; e++)
        yi[e] = e < BN ? (float)(1 + e % 3) : floorf((yi[e] + 4.0f) / 2.0f);
    const struct {
        struct how h;
        int out, want;
        bool ints;
    } cases[] = {
        {.h = {.bk = 128, .bf16 = true}, .out = TK_DTYPE_BF16, .want = TK_SCHEDULE_BF16_ACCUM},
        {.h = {.bk = 1, .f16 = true}, .out = TK_DTYPE_BF16, .want = TK_SCHEDULE_F16_ACCUM},
        {.h = {.bk = 64, .f16 = true}, .out = TK_DTYPE_F32, .want = TK_SCHEDULE_F16_ACCUM},
        {.h = {.bk = 1, .bf16 = true}, .out = TK_DTYPE_F32, .want = TK_SCHEDULE_BF16_ACCUM,
         .ints = true},
        {.h = {.bk = 1, .bf16 = true}, .out = TK_DTYPE_F32, .want = TK_SCHEDULE_BF16_ACCUM}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        expect_named(c, cases[c].h, cases[c].ints ? xi : x, cases[c].ints ? yi : y, BM, DEEP,
                     BN, cases[c].out, cases[c].want);
    enum { TM = 32, TK = 2048, TN = 32 };
    static float xt[TM * TK], yt[TK * TN];
    tkt_fill(xt, TM * TK, 15);
    tkt_fill(yt, TK * TN, 16);
    for (int64_t e = 0; e < TM * TK; e++)
        xt[e] *= 1e-5f, yt[e] *= 1e-5f;   /* (both TM * TK) */
    expect_named(sizeof cases / sizeof *cases, (struct how){.bk = 64, .skip_at = 64, .skip = TK},
                 xt, yt, TM, TK, TN, TK_DTYPE_F32, TK_SCHEDULE_UNKNOWN);
}

/* A row sum whose candidate returns `value` everywhere (NaN: NAN). */
static int constant(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    (void)in;
    float *o = tk_matrix_data(out);
    for (int64_t i = 0; i < tk_matrix_rows(out); i++)
        o[i] = *(const float *)user;
    return 0;
}

/* NaN on the first call, then `user`'s status (0: NaN again). */
static int nan_then(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    static const float nan = NAN;
    int *calls = user;
    if ((*calls)++ && calls[1])
        return calls[1];
    return constant((void *)&nan, in, out);
}

/* A NaN the candidate makes whatever the output's fill is named by where
 * it can come from: padding read beyond a K with a power-of-two tail, not
 * at a K without one; at neither where a float16 sum of terms of both
 * signs overflows (large terms of one sign cannot make a NaN).  A
 * candidate that fails when run again fails the run. */
Test(bound, a_nan_of_the_candidates_own_is_named_by_its_source)
{
    tk_kernel *k;
    cr_assert_eq(tk_kernel_row_sum(&k), TK_OK);
    static float x[3 * 512];
    const float *orig[1] = {x};
    const struct {
        int64_t depth;
        float value;
        bool signs;   /* each row's first half +, the rest - */
        int want;
    } cases[] = {{300, 0.5f, true, TK_SCHEDULE_K_TAIL_PADDING},
                 {512, 0.5f, true, TK_SCHEDULE_NO_INIT},
                 {300, 1000.0f, true, TK_SCHEDULE_UNKNOWN},
                 {300, 1000.0f, false, TK_SCHEDULE_K_TAIL_PADDING}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        for (int i = 0; i < 3 * 512; i++)
            x[i] = cases[c].signs && i % cases[c].depth >= cases[c].depth / 2 ? -cases[c].value
                                                                               : cases[c].value;
        int calls[2] = {0, 0};
        tk_audit *a;
        cr_assert_eq(tk_audit_create(&a, k), TK_OK);
        cr_assert_eq(tk_audit_set_candidate(a, nan_then, calls), TK_OK);
        cr_assert_eq(tk_audit_add_reduction_case(a, TK_DTYPE_F32, TK_DTYPE_F32, 3,
                                                 cases[c].depth, 1, orig), TK_OK);
        tkt_expect_status(tk_audit_run(a), TK_EMISMATCH);
        cr_assert_eq(calls[0], 2, "the diagnosis runs the candidate once more");
        cr_assert_eq(res(a, 0, TK_AUDIT_DIAGNOSIS), cases[c].want, "case %zu: %s", c,
                     tk_audit_schedule_name((int)res(a, 0, TK_AUDIT_DIAGNOSIS)));
        calls[0] = 0;
        calls[1] = 5;
        tkt_expect_status(tk_audit_run(a), TK_ECALLBACK);
        cr_assert(strstr(tk_last_error_message(), "candidate returned 5 for case 0 (3x") &&
                  strstr(tk_last_error_message(), "when run again for its diagnosis"), "%s",
                  tk_last_error_message());
        cr_assert_eq(res(a, 0, TK_AUDIT_DIAGNOSIS), cases[c].want,
                     "a failed run keeps the previous results");
        tk_audit_destroy(a);
    }
    tk_kernel_destroy(k);
}

/* v rounded to float16. */
static float f16(float v)
{
    uint16_t code;
    cr_assert_eq(tk_dtype_from_f32_n(TK_DTYPE_F16, &code, &v, 1), TK_OK);
    cr_assert_eq(tk_dtype_to_f32_n(TK_DTYPE_F16, &v, &code, 1), TK_OK);
    return v;
}

/* How f16_row_sum spoils a float16 accumulation. */
enum spoil { AS_IS, INF_ROW_5, NEGATE_ROW_0, NUDGE, ROW_0_EXACT };

/* A row sum accumulated in float16 in k order, each term and partial sum
 * rounded, its results cast to the output dtype; then spoiled (user: an
 * enum spoil): row 5 made +Inf, row 0 negated, rows from 3 on moved by 0.3,
 * or row 0 summed exactly instead. */
static int f16_row_sum(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    enum spoil how = *(const enum spoil *)user;
    const float *x = tk_matrix_data(in[0]);
    int64_t k = tk_matrix_cols(in[0]), rows = tk_matrix_rows(out);
    float o[16];
    for (int64_t i = 0; i < rows; i++) {
        float acc = 0.0f;
        double exact = 0.0;
        for (int64_t t = 0; t < k; t++) {
            acc = f16(acc + f16(x[i * k + t]));
            exact += x[i * k + t];
        }
        o[i] = how == ROW_0_EXACT && i == 0 ? (float)exact : how == NUDGE && i >= 3 ? acc + 0.3f : acc;
    }
    if (how == INF_ROW_5)
        o[5] = INFINITY;
    if (how == NEGATE_ROW_0)
        o[0] = -o[0];
    return tk_dtype_from_f32_n(tk_matrix_dtype(out), tk_matrix_data(out), o, (size_t)rows);
}

/* A float16 accumulation that overflows in some rows, to +Inf, -Inf or (an
 * Inf then a term past float16's range of the other sign) NaN, is named
 * after float16 where its overflows are the simulation's, in k order or
 * reversed, and not where they differ in place or value, where the finite
 * rows err more than float16's, nor where fewer than 8 rows are finite,
 * nothing to tell an accumulation from a fill.  With float16 outputs the
 * NaN row's sum is past float16's range, so its cast is +Inf, not NaN. */
Test(bound, a_float16_accumulation_that_overflows_is_named)
{
    tk_kernel *k;
    cr_assert_eq(tk_kernel_row_sum(&k), TK_OK);
    enum { ROWS = 12, DEPTH = 64 };
    static float x[ROWS * DEPTH];
    for (int i = 0; i < ROWS * DEPTH; i++)
        x[i] = (float)((i * 37 % 101) - 50) / 16.0f;
    for (int t = 0; t < DEPTH; t++) {
        x[0 * DEPTH + t] = 3000.0f;                      /* +Inf at t = 22 */
        x[1 * DEPTH + t] = t < DEPTH / 2 ? -3000.0f : 1.0f;   /* -Inf */
        x[2 * DEPTH + t] = t == 0 || t == 1 ? 40000.0f : t == 2 ? -70000.0f : 1000.0f;   /* NaN */
    }
    const float *orig[1] = {x};
    const struct {
        enum spoil how;
        int rows, out_dtype;
        int want;
    } cases[] = {
        {AS_IS, ROWS, TK_DTYPE_F32, TK_SCHEDULE_F16_ACCUM},
        {AS_IS, ROWS, TK_DTYPE_F16, TK_SCHEDULE_F16_ACCUM},
        {INF_ROW_5, ROWS, TK_DTYPE_F32, TK_SCHEDULE_UNKNOWN},    /* float16 is finite there */
        {NEGATE_ROW_0, ROWS, TK_DTYPE_F32, TK_SCHEDULE_UNKNOWN}, /* -Inf for +Inf */
        {ROW_0_EXACT, ROWS, TK_DTYPE_F32, TK_SCHEDULE_UNKNOWN},  /* finite for +Inf */
        {NUDGE, ROWS, TK_DTYPE_F32, TK_SCHEDULE_UNKNOWN},
        {AS_IS, 10, TK_DTYPE_F32, TK_SCHEDULE_UNKNOWN},          /* 7 finite rows */
        {AS_IS, 11, TK_DTYPE_F32, TK_SCHEDULE_F16_ACCUM},        /* 8 */
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        tk_audit *a;
        cr_assert_eq(tk_audit_create(&a, k), TK_OK);
        cr_assert_eq(tk_audit_set_candidate(a, f16_row_sum, (void *)&cases[c].how), TK_OK);
        cr_assert_eq(tk_audit_add_reduction_case(a, TK_DTYPE_F32, cases[c].out_dtype,
                                                 cases[c].rows, DEPTH, 1, orig), TK_OK);
        tkt_expect_status(tk_audit_run(a), TK_EMISMATCH);
        cr_assert(isinf(res(a, 0, TK_AUDIT_BOUND_RATIO)));
        cr_assert_eq(res(a, 0, TK_AUDIT_DIAGNOSIS), cases[c].want, "case %zu: %s", c,
                     tk_audit_schedule_name((int)res(a, 0, TK_AUDIT_DIAGNOSIS)));
        tk_audit_destroy(a);
    }
    tk_kernel_destroy(k);
}

/* The plain float32 matmul, each sum in k order. */
static int f32_matmul(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    (void)user;
    const float *x = tk_matrix_data(in[0]), *y = tk_matrix_data(in[1]);
    float *o = tk_matrix_data(out);
    int64_t m = tk_matrix_rows(in[0]), k = tk_matrix_cols(in[0]), n = tk_matrix_cols(in[1]);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int64_t t = 0; t < k; t++)
                acc += x[i * k + t] * y[t * n + j];
            o[i * n + j] = acc;
        }
    return 0;
}

/* A float32 matmul whose products overflow (4e38 and -4e38: Inf - Inf)
 * makes the same NaN as any accumulation in float16 or bfloat16 of those
 * products: the contract's own precision overflows there, and nothing is
 * named. */
Test(bound, an_overflow_of_float32_itself_is_not_named)
{
    enum { M_ = 16, K_ = 64, N_ = 16 };
    static float x[M_ * K_], y[K_ * N_];
    for (int i = 0; i < M_ * K_; i++)
        x[i] = i % K_ < 2 ? 0.0f : (float)((i * 37 % 101) - 50) / 16.0f;
    for (int i = 0; i < K_ * N_; i++)
        y[i] = i < 2 * N_ ? 0.0f : (float)((i * 53 % 89) - 44) / 16.0f;
    x[0] = x[1] = 2e19f;
    y[0] = 2e19f;
    y[N_] = -2e19f;
    const float *orig[2] = {x, y};
    tk_kernel *k;
    cr_assert_eq(tk_kernel_matmul(&k), TK_OK);
    tk_audit *a;
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    cr_assert_eq(tk_audit_set_candidate(a, f32_matmul, NULL), TK_OK);
    cr_assert_eq(tk_audit_add_reduction_case(a, TK_DTYPE_F32, TK_DTYPE_F32, M_, K_, N_, orig),
                 TK_OK);
    tkt_expect_status(tk_audit_run(a), TK_EMISMATCH);
    cr_assert_eq(res(a, 0, TK_AUDIT_DIAGNOSIS), TK_SCHEDULE_UNKNOWN, "%s",
                 tk_audit_schedule_name((int)res(a, 0, TK_AUDIT_DIAGNOSIS)));
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
}

/* The float32 value *user, cast to the output's dtype, in every element. */
static int constant_cast(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    (void)in;
    for (int64_t i = 0; i < tk_matrix_rows(out); i++) {
        unsigned char *at = (unsigned char *)tk_matrix_data(out) +
                            i * tk_dtype_size(tk_matrix_dtype(out));
        if (tk_dtype_from_f32_n(tk_matrix_dtype(out), at, user, 1) != TK_OK)
            return 1;
    }
    return 0;
}

/* A sum whose bound reaches past the output's largest number may be cast
 * to its overflow (Inf on the sum's side, float8_e4m3fn's NaN) where the
 * oracle's cast is finite: 2^30 - 2^30 makes the bound of a row sum near
 * 65520 or 464 (the least magnitudes that overflow float16 and e4m3fn) a
 * few hundred.  Its ratio is the least error that reaches the overflow
 * over the bound before the cast, less than the bound reported, which
 * includes the cast's.  Where the bound does not reach, or on the other
 * side, or a NaN where the format has Inf, the case fails. */
Test(bound, an_overflow_within_the_bound_passes)
{
    static const struct {
        int out;
        float sum, big, cand;
        double top;
        bool passes;
    } cases[] = {
        {TK_DTYPE_F16, 65519.0f, 0x1p30f, INFINITY, 65520.0, true},
        {TK_DTYPE_F16, -65519.0f, 0x1p30f, -INFINITY, 65520.0, true},
        {TK_DTYPE_F16, 65519.0f, 0x1p30f, -INFINITY, 65520.0, false},
        {TK_DTYPE_F16, 65519.0f, 0x1p30f, NAN, 65520.0, false},
        {TK_DTYPE_F16, 65000.0f, 1.0f, INFINITY, 65520.0, false},
        {TK_DTYPE_F8E4M3FN, 463.5f, 0x1p30f, NAN, 464.0, true},
        {TK_DTYPE_F8E4M3FN, -463.5f, 0x1p30f, NAN, 464.0, true},
        {TK_DTYPE_F8E4M3FN, 400.0f, 1.0f, NAN, 464.0, false},
        {TK_DTYPE_F8E5M2, 61300.0f, 0x1p30f, INFINITY, 61440.0, true},
    };
    tk_kernel *k;
    cr_assert_eq(tk_kernel_row_sum(&k), TK_OK);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float x[3] = {cases[c].sum, cases[c].big, -cases[c].big};
        const float *orig[1] = {x};
        tk_audit *a;
        cr_assert_eq(tk_audit_create(&a, k), TK_OK);
        cr_assert_eq(tk_audit_set_candidate(a, constant_cast, (void *)&cases[c].cand), TK_OK);
        cr_assert_eq(tk_audit_add_reduction_case(a, TK_DTYPE_F32, cases[c].out, 1, 3, 1, orig),
                     TK_OK);
        int rc = tk_audit_run(a);
        double ratio = res(a, 0, TK_AUDIT_BOUND_RATIO), bound = res(a, 0, TK_AUDIT_BOUND);
        cr_assert_eq(rc, cases[c].passes ? TK_OK : TK_EMISMATCH, "case %zu: ratio %g: %s", c,
                     ratio, tk_last_error_message());
        cr_assert_eq(res(a, 0, TK_AUDIT_PASSED), cases[c].passes, "case %zu", c);
        double least = (cases[c].top - fabs((double)cases[c].sum)) / bound;
        if (cases[c].passes)
            cr_assert(ratio > least && ratio <= 1.0, "case %zu: ratio %g, least %g", c, ratio,
                      least);
        else if (!isnan(cases[c].cand) || cases[c].out == TK_DTYPE_F8E4M3FN)
            cr_assert(ratio > 1.0, "case %zu: ratio %g", c, ratio);
        tk_audit_destroy(a);
    }
    tk_kernel_destroy(k);
}

Test(bound, nan_and_inf_are_judged_not_skipped)
{
    tk_kernel *k;
    cr_assert_eq(tk_kernel_row_sum(&k), TK_OK);
    float x[2 * 4] = {1, 2, NAN, 4, 1, INFINITY, -INFINITY, 1};   /* both sums NaN */
    const float *orig[1] = {x};
    const float values[3] = {0.0f, NAN, 5.0f};
    const double want[3] = {0.0, 1.0, 0.0};   /* only a NaN candidate passes */
    for (int v = 0; v < 3; v++) {
        tk_audit *a;
        cr_assert_eq(tk_audit_create(&a, k), TK_OK);
        cr_assert_eq(tk_audit_set_candidate(a, constant, (void *)&values[v]), TK_OK);
        cr_assert_eq(tk_audit_add_reduction_case(a, TK_DTYPE_F32, TK_DTYPE_F32, 2, 4, 1,
                                                 orig), TK_OK);
        int rc = tk_audit_run(a);
        cr_assert_eq(res(a, 0, TK_AUDIT_PASSED), want[v], "candidate %g: %s",
                     (double)values[v], tk_last_error_message());
        cr_assert_eq(rc, want[v] ? TK_OK : TK_EMISMATCH);
        if (!want[v])
            cr_assert(isinf(res(a, 0, TK_AUDIT_BOUND_RATIO)));
        tk_audit_destroy(a);
    }
    tk_kernel_destroy(k);
}

/* A NaN sum's sign depends on the order of its additions, which differs
 * between paths: Inf * 0 in the first block of 128 terms makes the
 * default NaN (negative on x86), a NaN input in the second a positive one.
 * The bound reported there is the canonical NaN on every path. */
Test(bound, a_nan_bound_is_the_canonical_nan)
{
    static float x[4 * 129], y[129 * 16];
    for (int i = 0; i < 4 * 129; i++)
        x[i] = 1.0f;
    for (int i = 0; i < 129 * 16; i++)
        y[i] = 1.0f;
    x[0] = INFINITY, y[0] = 0.0f, x[128] = NAN;
    tk_kernel *k;
    tk_audit *a;
    cr_assert_eq(tk_kernel_matmul(&k), TK_OK);
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    cr_assert_eq(tk_audit_set_candidate(a, f32_matmul, NULL), TK_OK);
    const float *orig[2] = {x, y};
    cr_assert_eq(tk_audit_add_reduction_case(a, TK_DTYPE_F32, TK_DTYPE_F32, 4, 129, 16, orig),
                 TK_OK);
    cr_assert_eq(tk_audit_run(a), TK_OK, "%s", tk_last_error_message());
    double b = res(a, 0, TK_AUDIT_BOUND);
    uint64_t bits;
    memcpy(&bits, &b, sizeof bits);
    cr_assert_eq(res(a, 0, TK_AUDIT_BOUND_ROW), 0.0);
    cr_assert_eq(res(a, 0, TK_AUDIT_BOUND_COL), 0.0);
    cr_assert_eq(bits, 0x7FF8000000000000u, "bound bits %016llx", (unsigned long long)bits);
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
}

static int never_called(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    (void)user;
    (void)in;
    (void)out;
    cr_assert_fail("the candidate ran");
    return 0;
}

Test(bound, sums_too_deep_for_a_bound_are_refused)
{
    tk_kernel *k;
    tk_audit *a;
    float x[4] = {1, 2, 3, 4};
    const float *orig[1] = {x};
    cr_assert_eq(tk_kernel_row_sum(&k), TK_OK);
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    tkt_expect_status(tk_audit_add_reduction_case(a, TK_DTYPE_F32, TK_DTYPE_F32, 1,
                                                  (int64_t)1 << 23, 1, orig), TK_ERANGE);
    cr_assert(strstr(tk_last_error_message(), "k = 8388608 is too deep for a worst-case "
                     "bound of float32 accumulation"), "%s", tk_last_error_message());
    tk_audit_destroy(a);
    /* bfloat16 accumulation has a useful worst-case bound only up to 127 terms. */
    cr_assert_eq(tk_kernel_set(k, TK_KERNEL_ACCUM, TK_DTYPE_BF16), TK_OK);
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    cr_assert_eq(tk_audit_add_reduction_case(a, TK_DTYPE_BF16, TK_DTYPE_BF16, 1, 4, 1, orig),
                 TK_OK);
    tkt_expect_status(tk_audit_add_reduction_case(a, TK_DTYPE_BF16, TK_DTYPE_BF16, 1, 300, 1,
                                                  orig), TK_ERANGE);
    tkt_expect_status(tk_audit_add_reduction_case(a, TK_DTYPE_BF16, TK_DTYPE_BF16,
                                                  (int64_t)1 << 40, 4, (int64_t)1 << 40,
                                                  orig), TK_ESHAPE);
    cr_assert_eq(tk_audit_case_count(a), 1);
    tk_audit_destroy(a);
    tk_kernel_destroy(k);

    /* A contract changed after its cases were added is checked again by
     * the run: float32 inputs, or 4096 terms, were fine for float32
     * accumulation, not for bfloat16. */
    static float wide[4096];
    const float *w[1] = {wide};
    cr_assert_eq(tk_kernel_row_sum(&k), TK_OK);
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    cr_assert_eq(tk_audit_set_candidate(a, never_called, NULL), TK_OK);
    cr_assert_eq(tk_audit_add_reduction_case(a, TK_DTYPE_BF16, TK_DTYPE_BF16, 1, 4, 1, w),
                 TK_OK);
    cr_assert_eq(tk_audit_add_reduction_case(a, TK_DTYPE_F32, TK_DTYPE_F32, 1, 4, 1, w),
                 TK_OK);
    cr_assert_eq(tk_kernel_set(k, TK_KERNEL_ACCUM, TK_DTYPE_BF16), TK_OK);
    tkt_expect_status(tk_audit_run(a), TK_EDTYPE);
    cr_assert(strstr(tk_last_error_message(), "tk_audit_run: case 1: the contract now "
                     "accumulates in bfloat16, which cannot hold every float32 input"), "%s",
              tk_last_error_message());
    tk_audit_destroy(a);
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    cr_assert_eq(tk_kernel_set(k, TK_KERNEL_ACCUM, TK_DTYPE_F32), TK_OK);
    cr_assert_eq(tk_audit_set_candidate(a, never_called, NULL), TK_OK);
    cr_assert_eq(tk_audit_add_reduction_case(a, TK_DTYPE_BF16, TK_DTYPE_BF16, 1, 4096, 1, w),
                 TK_OK);
    cr_assert_eq(tk_kernel_set(k, TK_KERNEL_ACCUM, TK_DTYPE_BF16), TK_OK);
    tkt_expect_status(tk_audit_run(a), TK_ERANGE);
    cr_assert(strstr(tk_last_error_message(), "tk_audit_run: case 0: k = 4096 is too deep"),
              "%s", tk_last_error_message());
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
    cr_assert_eq(tk_kernel_matmul(&k), TK_OK);
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    const float *two[2] = {x, x};
    tkt_expect_status(tk_audit_add_reduction_case(a, TK_DTYPE_F32, TK_DTYPE_F32,
                                                  (int64_t)1 << 31, 1, (int64_t)1 << 31,
                                                  two), TK_EOVERFLOW);
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
}

static float flushed(float v) { return fpclassify(v) == FP_SUBNORMAL ? copysignf(0.0f, v) : v; }

/* A matmul as XLA and TPUs compute it: subnormal inputs read as zeros,
 * every product and sum below the smallest normal number flushed. */
static int flushing(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    (void)user;
    int64_t m = tk_matrix_rows(in[0]), k = tk_matrix_cols(in[0]), n = tk_matrix_cols(in[1]);
    float *x = malloc((size_t)(m * k) * sizeof *x), *y = malloc((size_t)(k * n) * sizeof *y);
    tk_matrix_to_f32(in[0], x, k);
    tk_matrix_to_f32(in[1], y, n);
    float *o = tk_matrix_data(out);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int64_t kk = 0; kk < k; kk++)
                acc = flushed(acc + flushed(flushed(x[i * k + kk]) * flushed(y[kk * n + j])));
            o[i * n + j] = acc;
        }
    free(x), free(y);
    return 0;
}

/* Even terms: products below float32's smallest normal number, which the
 * flushing matmul drops.  Odd terms: a subnormal x times a large y, a
 * normal product, which it drops too (its x read as zero).  It errs by the
 * whole sum, far beyond the default contract's bound, and is within the
 * bound of a contract that declares the flush (TK_ARITH_FTZ, here by
 * TK_ARITH_XLA), whose oracle reads subnormal inputs as zeros: without
 * that, the odd terms alone would exceed it. */
Test(bound, a_flushing_contract_bounds_a_flushing_matmul)
{
    enum { FM = 5, FK = 64, FN = 7 };
    float x[FM * FK], y[FK * FN];
    tkt_fill(x, FM * FK, 41);
    tkt_fill(y, FK * FN, 42);
    for (int e = 0; e < FM * FK; e++)
        x[e] = ldexpf(x[e], e % FK % 2 ? -130 : -66);
    for (int e = 0; e < FK * FN; e++)
        y[e] = ldexpf(y[e], e / FN % 2 ? 60 : -66);
    const float *orig[2] = {x, y};
    for (int flush = 0; flush < 2; flush++) {
        tk_kernel *mm;
        tk_audit *a;
        cr_assert_eq(tk_kernel_matmul(&mm), TK_OK);
        cr_assert_eq(tk_kernel_set(mm, TK_KERNEL_ARITH, flush ? TK_ARITH_XLA : TK_ARITH_NUMPY),
                     TK_OK);
        cr_assert_eq(tk_audit_create(&a, mm), TK_OK);
        cr_assert_eq(tk_audit_set_candidate(a, flushing, NULL), TK_OK);
        cr_assert_eq(tk_audit_add_reduction_case(a, TK_DTYPE_F32, TK_DTYPE_F32, FM, FK, FN,
                                                 orig), TK_OK);
        int rc = tk_audit_run(a);
        double ratio = res(a, 0, TK_AUDIT_BOUND_RATIO);
        /* The gap is taken against the data as given, subnormals and all:
         * under the flush its input part is the odd terms the oracle drops. */
        double gap_in = res(a, 0, TK_AUDIT_GAP_INPUT_MAX_ABS);
        /* Reports record the declared arithmetic. */
        char text[16384], json[16384];
        report(a, TK_REPORT_TEXT, text, sizeof text);
        report(a, TK_REPORT_JSON, json, sizeof json);
        cr_assert_eq(strstr(text, "accumulated in float32 in any order; passes within a "
                            "rigorous error bound, multiply-add fused, subnormals flushed "
                            "(XLA)") != NULL, flush, "%s", text);
        cr_assert(strstr(json, flush ? "\"arith\": \"xla\"" : "\"arith\": \"numpy\""),
                  "%s", json);
        if (flush) {
            cr_assert_eq(rc, TK_OK, "%s", tk_last_error_message());
            cr_assert_leq(ratio, 1.0);
            cr_assert_gt(gap_in, 0.0, "the flushed inputs are part of the gap");
        } else {
            cr_assert_eq(gap_in, 0.0, "float32 inputs are stored as given");
            cr_assert_eq(rc, TK_EMISMATCH);
            cr_assert_gt(ratio, 100.0, "%g: the data must show the flush", ratio);
        }
        tk_audit_destroy(a);
        tk_kernel_destroy(mm);
    }
}

Test(bound, refusals_name_what_they_refuse)
{
    tk_kernel *mm, *rs, *ax;
    cr_assert_eq(tk_kernel_matmul(&mm), TK_OK);
    cr_assert_eq(tk_kernel_row_sum(&rs), TK_OK);
    cr_assert_eq(tk_kernel_axpy(&ax, 2.0f), TK_OK);
    int64_t v;
    cr_assert_eq(tk_kernel_get(mm, TK_KERNEL_ACCUM, &v), TK_OK);
    cr_assert_eq(v, TK_DTYPE_F32);
    cr_assert_eq(tk_kernel_get(rs, TK_KERNEL_INPUTS, &v), TK_OK);
    cr_assert_eq(v, 1);
    tkt_expect_status(tk_kernel_set(mm, TK_KERNEL_ACCUM, TK_DTYPE_I32), TK_EDTYPE);
    cr_assert(strstr(tk_last_error_message(), "TK_KERNEL_ACCUM 3 (int32)"),
              "%s", tk_last_error_message());
    /* fp8 is a storage dtype a reduction cannot accumulate in: named. */
    tkt_expect_status(tk_kernel_set(mm, TK_KERNEL_ACCUM, TK_DTYPE_F8E4M3FN), TK_EDTYPE);
    cr_assert(strstr(tk_last_error_message(), "TK_KERNEL_ACCUM 5 (float8_e4m3fn)"),
              "%s", tk_last_error_message());
    tkt_expect_status(tk_kernel_set(mm, TK_KERNEL_ACCUM, TK_DTYPE_F8E5M2), TK_EDTYPE);
    cr_assert(strstr(tk_last_error_message(), "float8_e5m2"), "%s", tk_last_error_message());
    tkt_expect_status(tk_kernel_set(mm, TK_KERNEL_ACCUM, 0), TK_ERANGE);
    tkt_expect_status(tk_kernel_set(mm, TK_KERNEL_ACCUM, TK_DTYPE_F8E5M2 + 1), TK_ERANGE);
    cr_assert_eq(tk_kernel_get(mm, TK_KERNEL_ACCUM, &v), TK_OK);
    cr_assert_eq(v, TK_DTYPE_F32, "a refused setting leaves the accumulation as it was");
    tkt_expect_status(tk_kernel_set(ax, TK_KERNEL_ACCUM, TK_DTYPE_F32), TK_EINVAL);
    /* A reduction has no body (a body kind would only stop its audit), an
     * elementwise contract no accumulation: asked of the other kind, set
     * and get fail whatever the value, in range or not. */
    for (int kind = TK_BODY_ELEMENTWISE - 1; kind <= TK_BODY_BLOCKWISE + 1; kind++) {
        tkt_expect_status(tk_kernel_set(rs, TK_KERNEL_BODY, kind), TK_EINVAL);
        cr_assert(strstr(tk_last_error_message(), "tk_kernel_set: TK_KERNEL_BODY is for "
                         "elementwise contracts; a reduction"), "%s", tk_last_error_message());
    }
    for (int64_t acc = 0; acc <= TK_DTYPE_F8E5M2 + 1; acc++) {
        tkt_expect_status(tk_kernel_set(ax, TK_KERNEL_ACCUM, acc), TK_EINVAL);
        cr_assert(strstr(tk_last_error_message(), "TK_KERNEL_ACCUM is for reduction"), "%s",
                  tk_last_error_message());
    }
    v = -5;
    tkt_expect_status(tk_kernel_get(rs, TK_KERNEL_BODY, &v), TK_EINVAL);
    cr_assert(strstr(tk_last_error_message(), "tk_kernel_get: TK_KERNEL_BODY is for"), "%s",
              tk_last_error_message());
    tkt_expect_status(tk_kernel_get(ax, TK_KERNEL_ACCUM, &v), TK_EINVAL);
    cr_assert_eq(v, -5, "a refused get leaves the value untouched");
    cr_assert_eq(tk_kernel_set(mm, TK_KERNEL_ARITH, TK_ARITH_XLA), TK_OK);
    cr_assert_eq(tk_kernel_set(mm, TK_KERNEL_ARITH, TK_ARITH_NUMPY), TK_OK);
    cr_assert_eq(tk_kernel_set(mm, TK_KERNEL_ACCUM, TK_DTYPE_F16), TK_OK);

    tk_audit *a;
    float x[6] = {1, 2, 3, 4, 5, 6};
    const float *orig[2] = {x, x};
    cr_assert_eq(tk_audit_create(&a, mm), TK_OK);
    tkt_expect_status(tk_audit_add_reduction_case(a, TK_DTYPE_BF16, TK_DTYPE_F32, 2, 3, 2,
                                                  orig), TK_EDTYPE);
    cr_assert(strstr(tk_last_error_message(), "accumulates in float16, which cannot hold "
                     "every bfloat16 input: mismatched accumulation"), "%s",
              tk_last_error_message());
    tkt_expect_status(tk_audit_add_reduction_case(a, TK_DTYPE_F16, TK_DTYPE_I32, 2, 3, 2,
                                                  orig), TK_EDTYPE);
    tkt_expect_status(tk_audit_add_reduction_case(a, TK_DTYPE_F16, TK_DTYPE_F16, 2, 0, 2,
                                                  orig), TK_ESHAPE);
    tkt_expect_status(tk_audit_add_case(a, TK_DTYPE_F16, 2, 3, orig), TK_EINVAL);
    cr_assert_eq(tk_audit_case_count(a), 0);
    tk_audit_destroy(a);

    cr_assert_eq(tk_audit_create(&a, rs), TK_OK);
    tkt_expect_status(tk_audit_add_reduction_case(a, TK_DTYPE_F32, TK_DTYPE_F32, 2, 3, 2,
                                                  orig), TK_ESHAPE);
    cr_assert(strstr(tk_last_error_message(), "n is 2, not 1"), "%s", tk_last_error_message());
    tk_audit_destroy(a);

    cr_assert_eq(tk_audit_create(&a, ax), TK_OK);
    tkt_expect_status(tk_audit_add_reduction_case(a, TK_DTYPE_F32, TK_DTYPE_F32, 2, 3, 2,
                                                  orig), TK_EINVAL);
    cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_F32, 2, 3, orig), TK_OK);
    double d = 7.0;
    tkt_expect_status(tk_audit_result(a, 0, TK_AUDIT_BOUND_RATIO, &d), TK_EINVAL);
    cr_assert(strstr(tk_last_error_message(), "contract is exact: it has no error bound"),
              "%s", tk_last_error_message());
    cr_assert_eq(d, 7.0, "a refused result wrote its output");
    cr_assert_eq(tk_audit_result(a, 0, TK_AUDIT_DEPTH, &d), TK_OK);
    cr_assert_eq(d, 0.0);
    tk_audit_destroy(a);

    tk_tiling *t;
    tk_matrix *m;
    cr_assert_eq(tk_tiling_create(&t, 2, 3, 8, 128), TK_OK);
    cr_assert_eq(tk_matrix_create(&m, TK_DTYPE_F32, 2, 3), TK_OK);
    const tk_matrix *in[2] = {m, m};
    tkt_expect_status(tk_kernel_run(mm, t, in, m), TK_EINVAL);
    cr_assert(strstr(tk_last_error_message(), "matmul contract is audited under its error "
                     "bound"), "%s", tk_last_error_message());
    tk_matrix_destroy(m);
    tk_tiling_destroy(t);
    tk_kernel_destroy(mm);
    tk_kernel_destroy(rs);
    tk_kernel_destroy(ax);
}

/* The oracle's and the diagnosis's passes on the contract kernel's threads
 * give one thread's figures and verdicts: the JSON report is the same
 * bytes, for a correct candidate and for each wrong one. */
Test(bound, threads_give_the_same_report)
{
    enum { BM = 53 };  /* three threads of whole rows, the last one longer */
    static float x[BM * K], y[K * N];
    tkt_fill(x, BM * K, 5);
    tkt_fill(y, K * N, 6);
    const float *orig[2] = {x, y};
    struct how hows[] = {{.bk = 128}, {.bk = 128, .drop = true}, {.bk = 1, .bf16 = true}};
    for (size_t h = 0; h < sizeof hows / sizeof *hows; h++) {
        static char text[2][1 << 20];
        for (int th = 0; th < 2; th++) {
            tk_kernel *k;
            tk_audit *a;
            cr_assert_eq(tk_kernel_matmul(&k), TK_OK);
            cr_assert_eq(tk_kernel_set(k, TK_KERNEL_THREADS, th ? 3 : 1), TK_OK);
            cr_assert_eq(tk_audit_create(&a, k), TK_OK);
            cr_assert_eq(tk_audit_set_candidate(a, matmul, &hows[h]), TK_OK);
            for (int d = 0; d < 2; d++)
                cr_assert_eq(tk_audit_add_reduction_case(a, d ? TK_DTYPE_BF16 : TK_DTYPE_F32,
                                                         TK_DTYPE_F32, BM, K, N, orig),
                             TK_OK);
            int rc = tk_audit_run(a);
            cr_assert(rc == (h ? TK_EMISMATCH : TK_OK), "%s", tk_last_error_message());
            tkt_report_json(a, text[th], sizeof text[th]);
            tk_audit_destroy(a);
            tk_kernel_destroy(k);
        }
        cr_assert_str_eq(text[0], text[1], "candidate %zu", h);
    }
}

/* A candidate that fails stops the run with TK_ECALLBACK, on one thread or
 * while other threads compute the oracle beside it; the audit runs again. */
static int fails(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    (void)user, (void)in, (void)out;
    return 7;
}

Test(bound, a_failing_candidate_stops_the_oracle_too)
{
    static float x[EM * EK], y[EK * EN];   /* 69 rows: three threads of 23 */
    tkt_fill(x, EM * EK, 8);
    tkt_fill(y, EK * EN, 9);
    const float *orig[2] = {x, y};
    struct how h = {.bk = 128};
    for (int threads = 1; threads <= 3; threads += 2) {
        tk_kernel *k;
        tk_audit *a;
        cr_assert_eq(tk_kernel_matmul(&k), TK_OK);
        cr_assert_eq(tk_kernel_set(k, TK_KERNEL_THREADS, threads), TK_OK);
        cr_assert_eq(tk_audit_create(&a, k), TK_OK);
        cr_assert_eq(tk_audit_add_reduction_case(a, TK_DTYPE_BF16, TK_DTYPE_F32, EM, EK, EN,
                                                 orig), TK_OK);
        cr_assert_eq(tk_audit_set_candidate(a, fails, NULL), TK_OK);
        tkt_expect_status(tk_audit_run(a), TK_ECALLBACK);
        cr_assert(strstr(tk_last_error_message(), "candidate returned 7"), "%s",
                  tk_last_error_message());
        cr_assert_eq(tk_audit_set_candidate(a, matmul, &h), TK_OK);
        cr_assert_eq(tk_audit_run(a), TK_OK, "%s", tk_last_error_message());
        cr_assert_eq(res(a, 0, TK_AUDIT_PASSED), 1.0);
        tk_audit_destroy(a);
        tk_kernel_destroy(k);
    }
}

/* A candidate that leaves the rounding mode changed changes nothing in the
 * report, on one thread or three, in the second case either (which starts
 * after the first candidate changed it); the mode it left is still set
 * after. */
static int rounds_up_after(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    int rc = matmul(user, in, out);
    fesetround(FE_UPWARD);
    return rc;
}

Test(bound, the_candidates_rounding_mode_stays_out_of_the_report)
{
    static float x[EM * EK], y[EK * EN];
    tkt_fill(x, EM * EK, 10);
    tkt_fill(y, EK * EN, 11);
    const float *orig[2] = {x, y};
    struct how h = {.bk = 128};
    static char text[2][1 << 16];
    for (int threads = 1; threads <= 3; threads += 2) {
        for (int up = 0; up < 2; up++) {
            tk_kernel *k;
            tk_audit *a;
            cr_assert_eq(tk_kernel_matmul(&k), TK_OK);
            cr_assert_eq(tk_kernel_set(k, TK_KERNEL_THREADS, threads), TK_OK);
            cr_assert_eq(tk_audit_create(&a, k), TK_OK);
            for (int i = 0; i < 2; i++)
                cr_assert_eq(tk_audit_add_reduction_case(a, TK_DTYPE_BF16, TK_DTYPE_F32, EM,
                                                         EK, EN, orig), TK_OK);
            cr_assert_eq(tk_audit_set_candidate(a, up ? rounds_up_after : matmul, &h), TK_OK);
            int rc = tk_audit_run(a);
            int mode = fegetround();
            fesetround(FE_TONEAREST);
            cr_assert_eq(rc, TK_OK, "%s", tk_last_error_message());
            cr_assert_eq(mode, up ? FE_UPWARD : FE_TONEAREST);
            tkt_report_json(a, text[up], sizeof text[up]);
            tk_audit_destroy(a);
            tk_kernel_destroy(k);
        }
        cr_assert_str_eq(text[0], text[1], "threads %d", threads);
    }
}

/* ---- progress ---------------------------------------------------------------- */

struct log {
    int64_t cases[4096];
    char steps[4096][12];
    double fractions[4096];
    int n;
    const char *stop_step;   /* return 6 in this step once fraction > 0.5 */
    bool round_up;           /* leave the rounding mode upward */
};

static int log_progress(void *user, int64_t case_index, const char *step, double fraction)
{
    struct log *l = user;
    cr_assert_lt(l->n, 4096);
    l->cases[l->n] = case_index;
    snprintf(l->steps[l->n], sizeof l->steps[0], "%s", step);
    l->fractions[l->n++] = fraction;
    if (l->round_up)
        fesetround(FE_UPWARD);
    return l->stop_step && !strcmp(step, l->stop_step) && fraction > 0.5 ? 6 : 0;
}

static int step_rank(const char *step)
{
    static const char *order[] = {"candidate", "oracle", "measure", "diagnosis"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(step, order[i]))
            return i;
    cr_assert_fail("unknown step %s", step);
    return -1;
}

/* A reduction case reports its candidate, the oracle's sums as they go
 * (here one chunk, K = 700 in three passes of up to 256 terms over the
 * output: 0, then after each), the measure, and
 * every pass of the diagnosis from 0; the callback changes no result,
 * whatever floating-point environment it leaves, and a non-zero return
 * stops the run where it is, the last complete run's results kept. */
Test(bound, progress_follows_the_passes_and_can_stop_the_run)
{
    struct how h = {.bk = 1, .bf16 = true};   /* a bf16 accumulator: diagnosed */
    tk_kernel *k;
    tk_audit *a = audit_of_depth(&h, &k, DEEP);
    static char quiet[1 << 16], logged[1 << 16], after[1 << 16];
    tkt_expect_status(tk_audit_run(a), TK_EMISMATCH);
    tkt_report_json(a, quiet, sizeof quiet);
    static struct log l;
    l = (struct log){.round_up = true};
    tkt_expect_status(tk_audit_set_progress(a, log_progress, &l), TK_OK);
    tkt_expect_status(tk_audit_run(a), TK_EMISMATCH);
    cr_assert_eq(fegetround(), FE_TONEAREST, "the callback's rounding mode was kept");
    tkt_report_json(a, logged, sizeof logged);
    cr_assert_str_eq(logged, quiet);
    int oracle[2] = {0, 0}, passes[2] = {0, 0};
    for (int i = 0; i < l.n; i++) {
        int64_t c = l.cases[i];
        int rank = step_rank(l.steps[i]);
        double f = l.fractions[i];
        cr_assert(f >= 0.0 && f <= 1.0, "%s %g", l.steps[i], f);
        if (i && l.cases[i - 1] == c) {
            int before = step_rank(l.steps[i - 1]);
            cr_assert_geq(rank, before, "%s after %s", l.steps[i], l.steps[i - 1]);
            if (rank == before && f < l.fractions[i - 1])
                cr_assert_eq(f, 0.0, "a pass starts at 0, then only grows");
        } else {
            cr_assert_eq(c, i ? l.cases[i - 1] + 1 : 0);
            cr_assert_str_eq(l.steps[i], "candidate");
        }
        oracle[c] += rank == 1;
        passes[c] += rank == 3 && f == 0.0;
        if (rank == 1 && (i + 1 == l.n || step_rank(l.steps[i + 1]) != 1))
            cr_assert_eq(f, 1.0, "the oracle's sums end at 1");
    }
    for (int c = 0; c < 2; c++) {
        cr_assert_eq(oracle[c], 4, "case %d: 0 and three passes", c);
        cr_assert_geq(passes[c], 3, "case %d: the step and its passes", c);
    }
    /* Every pass of the diagnosis ends at 1 before the next begins. */
    for (int i = 1; i < l.n; i++)
        if (!strcmp(l.steps[i], "diagnosis") && l.fractions[i] == 0.0 &&
            !strcmp(l.steps[i - 1], "diagnosis") && l.fractions[i - 1] != 0.0)
            cr_assert_eq(l.fractions[i - 1], 1.0, "entry %d", i - 1);
    cr_assert_eq(l.fractions[l.n - 1], 1.0);
    const char *stops[] = {"oracle", "diagnosis"};
    for (int s = 0; s < 2; s++) {
        l = (struct log){.stop_step = stops[s]};
        tkt_expect_status(tk_audit_run(a), TK_ECALLBACK);
        char want[64];
        snprintf(want, sizeof want, "returned 6 in the %s step of case 0", stops[s]);
        cr_assert(strstr(tk_last_error_message(), want), "%s", tk_last_error_message());
        cr_assert_gt(l.fractions[l.n - 1], 0.5);
        cr_assert_lt(l.fractions[l.n - 1], 1.0, "stopped before the pass ended");
        cr_assert_eq(l.cases[l.n - 1], 0);
        tkt_report_json(a, after, sizeof after);
        cr_assert_str_eq(after, quiet);
    }
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
}

/* The candidate of audit_of's data, slowly: the other threads take the
 * oracle's sums meanwhile. */
static int slow_matmul(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    return matmul(user, in, out);
}

/* On several threads the calling thread may find every chunk of the
 * oracle's sums taken when its candidate returns: the step is still
 * reported, at 1, when the sums are done. */
Test(bound, progress_reports_the_oracle_when_other_threads_did_it)
{
    enum { RM = 64, RK = 300, RN = 70 };
    static float x[RM * RK], y[RK * RN];
    tkt_fill(x, RM * RK, 12);
    tkt_fill(y, RK * RN, 13);
    struct how h = {.bk = 128};
    tk_kernel *k;
    tk_audit *a;
    cr_assert_eq(tk_kernel_matmul(&k), TK_OK);
    cr_assert_eq(tk_kernel_set(k, TK_KERNEL_THREADS, 4), TK_OK);
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    cr_assert_eq(tk_audit_set_candidate(a, slow_matmul, &h), TK_OK);
    const float *orig[2] = {x, y};
    cr_assert_eq(tk_audit_add_reduction_case(a, TK_DTYPE_BF16, TK_DTYPE_F32, RM, RK, RN, orig),
                 TK_OK);
    static struct log l;
    l = (struct log){0};
    cr_assert_eq(tk_audit_set_progress(a, log_progress, &l), TK_OK);
    cr_assert_eq(tk_audit_run(a), TK_OK, "%s", tk_last_error_message());
    int oracle = -1;
    for (int i = 0; i < l.n; i++)
        if (!strcmp(l.steps[i], "oracle"))
            oracle = i;
    cr_assert_geq(oracle, 1, "no oracle step");
    cr_assert_eq(l.fractions[oracle], 1.0);
    cr_assert_str_eq(l.steps[oracle + 1], "measure");
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
}
