/* test_audit.c - tk_audit: the seed's recorded figures from the committed
 * fixtures, the gap split, the rounding-schedule diagnosis for deliberately
 * wrong candidates, property checks, results and reports. */
#include "tk_test.h"

#include <fenv.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define FIXTURES "tests/fixtures/"

static double res(const tk_audit *a, int64_t i, int m)
{
    double v = -12345.0;
    cr_assert_eq(tk_audit_result(a, i, m, &v), TK_OK, "case %lld metric %d: %s",
                 (long long)i, m, tk_last_error_message());
    return v;
}

static void expect_bits_eq(double got, double want, const char *what)
{
    cr_assert(memcmp(&got, &want, sizeof got) == 0, "%s: %.17g, want %.17g", what,
              got, want);
}

/* A fixture as contiguous f32 (caller frees). */
static float *load(const char *name, int64_t *rows, int64_t *cols)
{
    tk_matrix *m;
    int rc = tk_matrix_load_npy(&m, name);
    cr_assert_eq(rc, TK_OK, "%s: %s (run from the repository root)", name,
                 tk_last_error_message());
    *rows = tk_matrix_rows(m);
    *cols = tk_matrix_cols(m);
    float *x = malloc((size_t)(*rows * *cols) * sizeof *x);
    cr_assert_eq(tk_matrix_to_f32(m, x, *cols), TK_OK);
    tk_matrix_destroy(m);
    return x;
}

/* ---- candidates ---------------------------------------------------------- */

/* The host kernel with (8, 128) blocks and the default tail. */
static int host(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    tk_tiling *t;
    int rc = tk_tiling_create(&t, tk_matrix_rows(out), tk_matrix_cols(out), 8, 128);
    if (!rc)
        rc = tk_kernel_run(user, t, in, out);
    tk_tiling_destroy(t);
    return rc;
}

/* Deliberately wrong axpy candidates, each following one schedule; they read
 * the stored inputs through tk_matrix_to_f32.  The diagnosis tests use
 * alpha = 3: doubling a bf16 value is exact, so with alpha = 2 rounding the
 * product early changes nothing. */
#define WRONG_ALPHA 3.0f
enum wrong { EARLY, TRUNC, FINAL_ONLY, FLUSH, ONE_WRONG, NOTHING };

struct wrong_ctx {
    enum wrong kind;
    const float *orig[2];  /* for FINAL_ONLY: the unrepresented data */
};

static float round_to(int dtype, float v)
{
    return dtype == TK_DTYPE_BF16 ? tk_bf16_to_f32(tk_bf16_from_f32(v)) : v;
}

static float flush(float v) { return fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v; }

static int wrong(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    const struct wrong_ctx *w = user;
    int dtype = tk_matrix_dtype(out);
    int64_t n = tk_matrix_rows(out) * tk_matrix_cols(out), cols = tk_matrix_cols(out);
    if (w->kind == NOTHING)
        return 0;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    float *o = malloc((size_t)n * sizeof *o);
    tk_matrix_to_f32(in[0], x, cols);
    tk_matrix_to_f32(in[1], y, cols);
    for (int64_t i = 0; i < n; i++) {
        float v;
        switch (w->kind) {
        case EARLY: v = round_to(dtype, WRONG_ALPHA * x[i]) + y[i]; break;
        case FINAL_ONLY: v = WRONG_ALPHA * w->orig[0][i] + w->orig[1][i]; break;
        case FLUSH: v = flush(WRONG_ALPHA * flush(x[i]) + flush(y[i])); break;
        default: v = WRONG_ALPHA * x[i] + y[i]; break;
        }
        if (w->kind == TRUNC && dtype == TK_DTYPE_BF16)
            v = tk_bf16_to_f32((uint16_t)(tkt_bits(v) >> 16));
        else
            v = round_to(dtype, v);
        o[i] = w->kind == FLUSH ? flush(v) : v;
    }
    if (w->kind == ONE_WRONG)
        o[n / 2] = round_to(dtype, nextafterf(o[n / 2], INFINITY) * 1.01f);
    tk_matrix *m;
    int rc = tk_matrix_from_f32(&m, dtype, tk_matrix_rows(out), cols, o, cols);
    if (!rc) {
        int64_t es = tk_dtype_size(dtype);
        for (int64_t r = 0; r < tk_matrix_rows(out); r++)
            memcpy((char *)tk_matrix_data(out) + r * tk_matrix_row_stride(out) * es,
                   (char *)tk_matrix_data(m) + r * tk_matrix_row_stride(m) * es,
                   (size_t)(cols * es));
    }
    tk_matrix_destroy(m);
    free(x);
    free(y);
    free(o);
    return rc;
}

static tk_kernel *axpy(float alpha)
{
    tk_kernel *k;
    cr_assert_eq(tk_kernel_axpy(&k, alpha), TK_OK);
    return k;
}

static tk_kernel *axpy2(void) { return axpy(2.0f); }

/* ---- the seed's recorded figures ------------------------------------------ */

Test(audit_seed, recorded_figures_from_the_fixtures, .timeout = 30)
{
    static const char *const shapes[] = {"1x1", "8x128", "9x129", "17x257"};
    /* The seed's "Recorded reference execution": these are the specification. */
    static const double bf16_gaps[] = {0.000862419605255127, 0.025217056274414062,
                                       0.030788421630859375, 0.0292205810546875};
    tk_kernel *k = axpy2();
    tk_audit *a;
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    cr_assert_eq(tk_audit_set_candidate(a, host, k), TK_OK);
    for (int s = 0; s < 4; s++) {
        char px[128], py[128];
        int64_t rows, cols;
        snprintf(px, sizeof px, FIXTURES "seed42_x_%s.npy", shapes[s]);
        snprintf(py, sizeof py, FIXTURES "seed42_y_%s.npy", shapes[s]);
        float *x = load(px, &rows, &cols), *y = load(py, &rows, &cols);
        const float *orig[2] = {x, y};
        cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_F32, rows, cols, orig), TK_OK);
        cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_BF16, rows, cols, orig), TK_OK);
        free(x);
        free(y);
    }
    cr_assert_eq(tk_audit_case_count(a), 8);
    cr_assert_eq(tk_audit_run(a), TK_OK, "%s", tk_last_error_message());
    for (int i = 0; i < 8; i++) {
        expect_bits_eq(res(a, i, TK_AUDIT_IMPL_MAX_ABS), 0.0, "kernel error");
        cr_assert_eq(res(a, i, TK_AUDIT_IMPL_MAX_ULP), 0.0);
        cr_assert_eq(res(a, i, TK_AUDIT_IMPL_MISMATCHES), 0.0);
        cr_assert_eq(res(a, i, TK_AUDIT_PASSED), 1.0);
        cr_assert_eq(res(a, i, TK_AUDIT_DIAGNOSIS), TK_SCHEDULE_NOT_RUN);
        expect_bits_eq(res(a, i, TK_AUDIT_GAP_MAX_ABS), i % 2 ? bf16_gaps[i / 2] : 0.0,
                       i % 2 ? "bf16 gap" : "f32 gap");
    }
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
}

Test(audit_seed, f32_kernel_matches_numpy_ideal_bit_for_bit)
{
    static const char *const shapes[] = {"1x1", "8x128", "9x129", "17x257"};
    tk_kernel *k = axpy2();
    for (int s = 0; s < 4; s++) {
        char p[3][128];
        tk_matrix *in[2], *ideal, *out;
        snprintf(p[0], sizeof p[0], FIXTURES "seed42_x_%s.npy", shapes[s]);
        snprintf(p[1], sizeof p[1], FIXTURES "seed42_y_%s.npy", shapes[s]);
        snprintf(p[2], sizeof p[2], FIXTURES "seed42_ideal_%s.npy", shapes[s]);
        cr_assert_eq(tk_matrix_load_npy(&in[0], p[0]), TK_OK, "%s", p[0]);
        cr_assert_eq(tk_matrix_load_npy(&in[1], p[1]), TK_OK);
        cr_assert_eq(tk_matrix_load_npy(&ideal, p[2]), TK_OK);
        int64_t rows = tk_matrix_rows(ideal), cols = tk_matrix_cols(ideal);
        cr_assert_eq(tk_matrix_create(&out, TK_DTYPE_F32, rows, cols), TK_OK);
        cr_assert_eq(host(k, (const tk_matrix *const *)in, out), TK_OK);
        for (int64_t r = 0; r < rows; r++)
            cr_assert(memcmp((float *)tk_matrix_data(out) + r * tk_matrix_row_stride(out),
                             (float *)tk_matrix_data(ideal) +
                                 r * tk_matrix_row_stride(ideal),
                             (size_t)cols * sizeof(float)) == 0,
                      "%s row %lld differs from numpy", shapes[s], (long long)r);
        tk_matrix_destroy(in[0]);
        tk_matrix_destroy(in[1]);
        tk_matrix_destroy(ideal);
        tk_matrix_destroy(out);
    }
    tk_kernel_destroy(k);
}

/* The gap's two parts, recomputed here from their definitions. */
Test(audit_seed, gap_splits_into_input_and_output_parts)
{
    int64_t rows, cols;
    float *x = load(FIXTURES "seed42_x_17x257.npy", &rows, &cols);
    float *y = load(FIXTURES "seed42_y_17x257.npy", &rows, &cols);
    const float *orig[2] = {x, y};
    tk_kernel *k = axpy2();
    tk_audit *a;
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    cr_assert_eq(tk_audit_set_candidate(a, host, k), TK_OK);
    cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_BF16, rows, cols, orig), TK_OK);
    cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_F32, rows, cols, orig), TK_OK);
    cr_assert_eq(tk_audit_run(a), TK_OK);
    float in_part = 0.0f, out_part = 0.0f, gap = 0.0f, scale = 0.0f;
    double rel = 0.0;
    int64_t beyond = 0;
    for (int64_t i = 0; i < rows * cols; i++) {
        float ideal = 2.0f * x[i] + y[i];
        float t = 2.0f * round_to(TK_DTYPE_BF16, x[i]) + round_to(TK_DTYPE_BF16, y[i]);
        float o = round_to(TK_DTYPE_BF16, t);
        in_part = fmaxf(in_part, fabsf(t - ideal));
        out_part = fmaxf(out_part, fabsf(o - t));
        gap = fmaxf(gap, fabsf(o - ideal));
        scale = fmaxf(scale, fabsf(ideal));
        if (ideal != 0.0f)
            rel = fmax(rel, (double)fabsf(o - ideal) / fabs((double)ideal));
        beyond += (double)fabsf(o - ideal) > 1e-5 + 1.6e-2 * fabs((double)ideal);
    }
    expect_bits_eq(res(a, 0, TK_AUDIT_GAP_INPUT_MAX_ABS), in_part, "input part");
    expect_bits_eq(res(a, 0, TK_AUDIT_GAP_OUTPUT_MAX_ABS), out_part, "output part");
    expect_bits_eq(res(a, 0, TK_AUDIT_GAP_MAX_ABS), gap, "gap");
    expect_bits_eq(res(a, 0, TK_AUDIT_GAP_MAX_REL), rel, "gap rel");
    expect_bits_eq(res(a, 0, TK_AUDIT_SCALE), scale, "scale");
    cr_assert_eq(res(a, 0, TK_AUDIT_GAP_MISMATCHES), (double)beyond);
    cr_assert_eq(res(a, 0, TK_AUDIT_GAP_PASSED), beyond == 0);
    /* The gap never exceeds its parts' sum (up to one rounding). */
    cr_assert(gap <= (in_part + out_part) * (1.0f + FLT_EPSILON));
    cr_assert(in_part > 0.0f && out_part > 0.0f);
    /* float32 has no representation or cast to split. */
    cr_assert_eq(res(a, 1, TK_AUDIT_GAP_INPUT_MAX_ABS), 0.0);
    cr_assert_eq(res(a, 1, TK_AUDIT_GAP_OUTPUT_MAX_ABS), 0.0);
    expect_bits_eq(res(a, 1, TK_AUDIT_GAP_ATOL), 1e-5, "f32 gap atol");
    expect_bits_eq(res(a, 1, TK_AUDIT_GAP_RTOL), 1.3e-6, "f32 gap rtol");
    expect_bits_eq(res(a, 0, TK_AUDIT_GAP_RTOL), 1.6e-2, "bf16 gap rtol");
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
    free(x);
    free(y);
}

/* Zero references are left out of the relative gap: with alpha = 3 and
 * y = -3x the original result is exactly 0 while the bf16 one is not. */
Test(audit_seed, relative_gap_excludes_zero_references)
{
    enum { R = 4, C = 64, N = R * C };
    float x[N], y[N];
    tkt_fill(x, N, 41);
    tkt_fill(y, N, 42);
    for (int i = 0; i < N; i += 3)
        y[i] = -(3.0f * x[i]);
    tk_kernel *k = axpy(3.0f);
    tk_audit *a;
    const float *orig[2] = {x, y};
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    cr_assert_eq(tk_audit_set_candidate(a, host, k), TK_OK);
    cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_BF16, R, C, orig), TK_OK);
    cr_assert_eq(tk_audit_run(a), TK_OK);
    double rel = 0.0;
    float gap = 0.0f;
    for (int i = 0; i < N; i++) {
        float ideal = 3.0f * x[i] + y[i];
        float o = round_to(TK_DTYPE_BF16, 3.0f * round_to(TK_DTYPE_BF16, x[i]) +
                                              round_to(TK_DTYPE_BF16, y[i]));
        gap = fmaxf(gap, fabsf(o - ideal));
        if (ideal != 0.0f)
            rel = fmax(rel, (double)fabsf(o - ideal) / fabs((double)ideal));
        else if (i == 0)
            cr_assert_neq(o, 0.0f, "the zero reference must see a non-zero gap");
    }
    expect_bits_eq(res(a, 0, TK_AUDIT_GAP_MAX_REL), rel, "gap rel");
    expect_bits_eq(res(a, 0, TK_AUDIT_GAP_MAX_ABS), gap, "gap abs");
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
}

/* Equal maxima: the first position in row-major order is the one reported. */
Test(audit_seed, gap_position_is_the_first_of_equal_maxima)
{
    float x[2 * 8], y[2 * 8];
    for (int i = 0; i < 16; i++) {
        x[i] = 0.1f;
        y[i] = 0.7f;
    }
    tk_kernel *k = axpy2();
    tk_audit *a;
    const float *orig[2] = {x, y};
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    cr_assert_eq(tk_audit_set_candidate(a, host, k), TK_OK);
    cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_BF16, 2, 8, orig), TK_OK);
    cr_assert_eq(tk_audit_run(a), TK_OK);
    cr_assert_gt(res(a, 0, TK_AUDIT_GAP_MAX_ABS), 0.0);
    char text[4096];
    tkt_report_json(a, text, sizeof text);
    const char *gap = strstr(text, "\"gap\": {");
    cr_assert_not_null(gap, "%s", text);
    cr_assert(strstr(gap, "\"max_abs_at\": {\"row\": 0, \"col\": 0,") != NULL, "%s", gap);
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
}


/* The contract kernel's threads split the audit's passes: every figure and
 * position of the report is the same as on one thread, for a correct
 * candidate, one wrong everywhere (early rounding) and one wrong in a single
 * element; ties of the gap's maxima (many equal values) keep the first. */
Test(audit_seed, threads_give_the_same_report, .timeout = 60)
{
    enum { ROWS = 300, COLS = 700 };
    static float x[ROWS * COLS], y[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++) {
        x[i] = (float)(i % 41) * 0.1f - 2.0f;
        y[i] = (float)(i % 29) * 0.07f;
    }
    const float *orig[2] = {x, y};
    static char one[1 << 16], many[1 << 16];
    for (int kind = 0; kind < 3; kind++) {
        struct wrong_ctx w = {kind == 1 ? EARLY : ONE_WRONG, {x, y}};
        for (int threads = 1; threads <= 3; threads++) {
            tk_kernel *k = axpy(WRONG_ALPHA);
            tk_audit *a;
            cr_assert_eq(tk_kernel_set(k, TK_KERNEL_THREADS, threads), TK_OK);
            cr_assert_eq(tk_audit_create(&a, k), TK_OK);
            cr_assert_eq(kind ? tk_audit_set_candidate(a, wrong, &w)
                              : tk_audit_set_candidate(a, host, k), TK_OK);
            cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_BF16, ROWS, COLS, orig), TK_OK);
            int rc = tk_audit_run(a);
            cr_assert(rc == TK_OK || rc == TK_EMISMATCH, "%s", tk_last_error_message());
            tkt_report_json(a, threads == 1 ? one : many, sizeof one);
            if (threads > 1)
                cr_assert_str_eq(many, one, "candidate %d on %d threads", kind, threads);
            tk_audit_destroy(a);
            tk_kernel_destroy(k);
        }
    }
}

/* A candidate that writes only the top `rows` rows of its output, from the
 * host kernel's result. */
struct partial_ctx {
    tk_kernel *k;
    int64_t rows;
};

static int partial(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    const struct partial_ctx *p = user;
    tk_matrix *full;
    int rc = tk_matrix_create(&full, tk_matrix_dtype(out), tk_matrix_rows(out),
                              tk_matrix_cols(out));
    if (!rc && !(rc = host(p->k, in, full)))
        memcpy(tk_matrix_data(out), tk_matrix_data(full),
               (size_t)(p->rows * tk_matrix_row_stride(out)) * sizeof(uint16_t));
    tk_matrix_destroy(full);
    return rc;
}

/* A case large enough that the audit fills the candidate's output by
 * streaming stores, on one thread and on two: audited again on the same
 * handle (whose buffers still hold the first run's correct output), a
 * candidate that writes nothing, then one that writes the top half, shows
 * every unwritten element as a mismatch. */
Test(audit_seed, unwritten_elements_of_a_large_case_mismatch_on_every_run, .timeout = 60)
{
    enum { ROWS = 2048, COLS = 2048 };   /* an 8 MiB bfloat16 output */
    float *x = malloc(sizeof(float) * ROWS * COLS), *y = malloc(sizeof(float) * ROWS * COLS);
    cr_assert(x && y);
    for (int i = 0; i < ROWS * COLS; i++) {
        x[i] = (float)(i % 41) * 0.1f - 2.0f;
        y[i] = (float)(i % 29) * 0.07f;
    }
    const float *orig[2] = {x, y};
    for (int threads = 1; threads <= 2; threads++) {
        tk_kernel *k = axpy(2.0f);
        tk_audit *a;
        cr_assert_eq(tk_kernel_set(k, TK_KERNEL_THREADS, threads), TK_OK);
        cr_assert_eq(tk_audit_create(&a, k), TK_OK);
        cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_BF16, ROWS, COLS, orig), TK_OK);
        const int64_t written[3] = {ROWS, 0, ROWS / 2};
        for (int run = 0; run < 3; run++) {
            struct partial_ctx p = {k, written[run]};
            cr_assert_eq(tk_audit_set_candidate(a, partial, &p), TK_OK);
            int rc = tk_audit_run(a);
            int64_t unwritten = (ROWS - written[run]) * COLS;
            cr_assert_eq(rc, unwritten ? TK_EMISMATCH : TK_OK, "run %d: %s", run,
                         tk_last_error_message());
            cr_assert_eq(res(a, 0, TK_AUDIT_IMPL_MISMATCHES), (double)unwritten,
                         "run %d on %d threads", run, threads);
        }
        tk_audit_destroy(a);
        tk_kernel_destroy(k);
    }
    free(x);
    free(y);
}

/* A candidate that leaves the rounding mode changed changes nothing in the
 * report: the next case, its oracle and its candidate, and the measuring
 * after each candidate run under the mode the run began with; the mode the
 * last candidate left is set after the run. */
static int host_rounds_up_after(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    int rc = host(user, in, out);
    fesetround(FE_UPWARD);
    return rc;
}

Test(audit_seed, the_candidates_rounding_mode_stays_out_of_the_report)
{
    enum { ROWS = 40, COLS = 300 };
    static float x[ROWS * COLS], y[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++) {
        x[i] = (float)(i % 41) * 0.1f - 2.0f;
        y[i] = (float)(i % 29) * 0.07f;
    }
    const float *orig[2] = {x, y};
    static char text[2][1 << 16];
    for (int up = 0; up < 2; up++) {
        tk_kernel *k = axpy(WRONG_ALPHA);
        tk_audit *a;
        cr_assert_eq(tk_audit_create(&a, k), TK_OK);
        cr_assert_eq(tk_audit_set_candidate(a, up ? host_rounds_up_after : host, k), TK_OK);
        cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_F32, ROWS, COLS, orig), TK_OK);
        cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_BF16, ROWS, COLS, orig), TK_OK);
        int rc = tk_audit_run(a);
        int mode = fegetround();
        fesetround(FE_TONEAREST);
        cr_assert_eq(rc, TK_OK, "%s", tk_last_error_message());
        cr_assert_eq(mode, up ? FE_UPWARD : FE_TONEAREST);
        tkt_report_json(a, text[up], sizeof text[up]);
        tk_audit_destroy(a);
        tk_kernel_destroy(k);
    }
    cr_assert_str_eq(text[0], text[1]);
}

/* The host kernel, after checking that every stored input it gets is its
 * original represented in the case's dtype, bit for bit. */
struct checked_ctx {
    tk_kernel *k;
    const float *orig[2];
    int64_t bad_rows;
};

static int checked_host(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    struct checked_ctx *cx = user;
    int dtype = tk_matrix_dtype(out);
    int64_t rows = tk_matrix_rows(out), cols = tk_matrix_cols(out);
    size_t es = (size_t)tk_dtype_size(dtype);
    unsigned char *want = malloc((size_t)cols * es);
    cr_assert(want);
    for (int i = 0; i < 2; i++)
        for (int64_t r = 0; r < rows; r++) {
            const unsigned char *got = (const unsigned char *)tk_matrix_data(in[i]) +
                                       (size_t)(r * tk_matrix_row_stride(in[i])) * es;
            cr_assert_eq(tk_dtype_from_f32_n(dtype, want, cx->orig[i] + r * cols,
                                             (size_t)cols), TK_OK);
            cx->bad_rows += memcmp(got, want, (size_t)cols * es) != 0;
        }
    free(want);
    return host(cx->k, in, out);
}

/* Planes of 8 MiB and more are written by streaming stores (the stored
 * inputs and the oracle): in every width of dtype the candidate still gets
 * the represented inputs, matches the oracle, and threads give the same
 * report. */
Test(audit_seed, large_planes_hold_the_same_values)
{
    enum { ROWS = 4096, COLS = 2100 };   /* planes of 8.2 MiB: rows for 1-byte elements */
    float *x = malloc(sizeof(float) * ROWS * COLS), *y = malloc(sizeof(float) * ROWS * COLS);
    cr_assert(x && y);
    tkt_fill(x, ROWS * COLS, 71);
    tkt_fill(y, ROWS * COLS, 72);
    const float *orig[2] = {x, y};
    static char one[1 << 16], two[1 << 16];
    const int dtypes[4] = {TK_DTYPE_F32, TK_DTYPE_BF16, TK_DTYPE_F16, TK_DTYPE_F8E4M3FN};
    for (int d = 0; d < 4; d++)
        for (int threads = 1; threads <= 2; threads++) {
            int64_t rows = ROWS / tk_dtype_size(dtypes[d]);
            struct checked_ctx cx = {axpy2(), {x, y}, 0};
            tk_audit *a;
            cr_assert_eq(tk_kernel_set(cx.k, TK_KERNEL_THREADS, threads), TK_OK);
            cr_assert_eq(tk_audit_create(&a, cx.k), TK_OK);
            cr_assert_eq(tk_audit_set_candidate(a, checked_host, &cx), TK_OK);
            cr_assert_eq(tk_audit_add_case(a, dtypes[d], rows, COLS, orig), TK_OK);
            cr_assert_eq(tk_audit_run(a), TK_OK, "%s", tk_last_error_message());
            cr_assert_eq(cx.bad_rows, 0, "%s: stored inputs differ from the originals",
                         tk_dtype_name(dtypes[d]));
            cr_assert_eq(res(a, 0, TK_AUDIT_IMPL_MISMATCHES), 0.0);
            tkt_report_json(a, threads == 1 ? one : two, sizeof one);
            if (threads == 2)
                cr_assert_str_eq(two, one, "%s on two threads", tk_dtype_name(dtypes[d]));
            tk_audit_destroy(a);
            tk_kernel_destroy(cx.k);
        }
    free(x);
    free(y);
}

/* The built-in axpy written as a custom body: f32(f32(a * x) + y), and
 * where an operand is NaN, the last NaN of y, x, a, quieted. */
static int axpy_as_custom(void *user, int64_t rows, int64_t cols, int64_t ld,
                          const float *const *in, float *out)
{
    const float a = *(const float *)user;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float x = in[0][r * ld + c], y = in[1][r * ld + c], v = a * x + y;
            const float ops[3] = {y, x, a};
            for (int i = 0; i < 3; i++)
                if (isnan(ops[i]))
                    v = tkt_float(tkt_bits(ops[i]) | 0x00400000u);
            out[r * ld + c] = v;
        }
    return 0;
}

/* Counts the audits' "measure" steps, which follow a candidate whose
 * output differs from the oracle's stored elements. */
static int count_measures(void *user, int64_t case_index, const char *step, double fraction)
{
    (void)case_index, (void)fraction;
    *(int *)user += strcmp(step, "measure") == 0;
    return 0;
}

/* The built-in axpy's audit has a path of its own for bfloat16 on AVX2 (one
 * loop for the stored inputs, both references and the cast), which hands a
 * block holding a NaN to the general path: its metrics, positions, stored
 * inputs and oracle are those of the same contract as a custom body.  On a
 * CPU with AVX2 only (elsewhere both audits take the general path; the
 * Python suite runs the AVX2 path forced on every machine).  Shapes small,
 * streamed (8 MiB planes), with tails, and with rows that start off a
 * line.  The first block holds NaNs (and, on the first shape, infinities
 * and overflow); the second, subnormals, zeros and rounding ties without a
 * NaN; the last, a NaN.  Large values hold the largest parts of the gap
 * and the largest |reference|: mid-plane, in a block without a NaN (on
 * 17x257, in blocks of three rows, the second's last element, in the
 * loop's scalar tail; on 9x1031, in a row's last block of 7, all tail),
 * or on the streamed shape, beside the last NaN.  On blocks of one row the
 * AVX-512 and AVX2 loops screen the gap too: each pair runs again at gap
 * tolerances of 1e31 (past which the screen is off), 0, FLT_MIN, and one
 * element's gap exactly and just below it. */
Test(audit_seed, built_in_axpy_audits_like_the_same_body_written_custom, .timeout = 60)
{
    static const int64_t shapes[][2] = {{64, 1024}, {2048, 2048}, {17, 257}, {3, 1000},
                                        {9, 1031}};
    static const uint32_t nans[] = {0x7FC00001, 0xFF812345, 0x7F800000, 0xFF800000,
                                    0x7F7FFFFF},
                          numbers[] = {0x00012345, 0x80000001, 0x80000000, 0x00000000,
                                       0x3F808000, 0x3F818000, 0xBF808000, 0x477FF000};
    for (int s = 0; s < 5; s++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
        int64_t block = cols >= 1024 ? 1024 : 1024 / cols * cols;
        float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
        cr_assert(x && y);
        tkt_fill(x, (size_t)n, 81 + (uint64_t)s);
        tkt_fill(y, (size_t)n, 91 + (uint64_t)s);
        for (int i = 0; i < (s ? 2 : 5); i++)
            x[i * 37] = tkt_float(nans[i]);
        for (int i = 0; i < 8; i++)
            y[block + i * 41] = tkt_float(numbers[i]);
        int64_t mid = s == 2 ? 2 * block - 1 : s == 4 ? 4 * cols + 1027 : n / 2;
        x[mid] = 1.7777e28f;
        y[mid] = 1e30f;
        y[n - 2] = tkt_float(0x7FC00002);
        if (s == 1) {
            x[n - 1] = -1.2345e33f;
            y[n - 1] = 1e35f;
        }
        int64_t at = s == 1 ? n - 1 : mid;
        float largest = s ? fabsf(3.0f * x[at] + y[at]) : INFINITY;
        const float *orig[2] = {x, y};
        float alpha = 3.0f;
        tk_kernel *k[2];
        cr_assert_eq(tk_kernel_axpy(&k[0], alpha), TK_OK);
        cr_assert_eq(tk_kernel_custom(&k[1], 2, axpy_as_custom, &alpha), TK_OK);
        /* Gap tolerances: the default, 1e31 (no screen), none, FLT_MIN, and
         * one element's gap exactly (on the boundary) and just below it
         * (a mismatch only the exact test, not the float screen, tells). */
        int64_t q = n / 3;   /* in a block without a NaN */
        float bx = tk_bf16_to_f32(tk_bf16_from_f32(x[q])),
              by = tk_bf16_to_f32(tk_bf16_from_f32(y[q]));
        double on = fabsf(tk_bf16_to_f32(tk_bf16_from_f32(alpha * bx + by)) -
                          (alpha * x[q] + y[q]));
        const double tol[][2] = {{-1.0, -1.0}, {1e31, 0.0}, {0.0, 0.0}, {FLT_MIN, 0.0},
                                 {on, 0.0}, {on * (1.0 - 0x1p-22), 0.0}};
        /* (The streamed shape takes the first two: 2048x2048 at each of
         * them under ASan made criterion leak now and then.) */
        const int NT = n > (1 << 20) ? 2 : (int)(sizeof tol / sizeof *tol);
        static char text[2 * sizeof tol / sizeof *tol][1 << 16];
        double m[2 * sizeof tol / sizeof *tol][TK_AUDIT_GAP_MISMATCHES - TK_AUDIT_IMPL_MAX_ABS + 1];
        for (int i = 0; i < 2 * NT; i++) {   /* built-in, custom; at each tolerance */
            struct checked_ctx cx = {k[0], {x, y}, 0};
            tk_audit *a;
            cr_assert_eq(tk_audit_create(&a, k[i % 2]), TK_OK);
            if (tol[i / 2][0] >= 0.0)
                cr_assert_eq(tk_audit_set_gap_tolerance(a, TK_DTYPE_BF16, tol[i / 2][0],
                                                        tol[i / 2][1]), TK_OK);
            int measures = 0;
            cr_assert_eq(tk_audit_set_candidate(a, checked_host, &cx), TK_OK);
            cr_assert_eq(tk_audit_set_progress(a, count_measures, &measures), TK_OK);
            cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_BF16, rows, cols, orig), TK_OK);
            cr_assert_eq(tk_audit_run(a), TK_OK, "%s", tk_last_error_message());
            cr_assert_eq(cx.bad_rows, 0, "%lldx%lld: stored inputs differ", (long long)rows,
                         (long long)cols);
            cr_assert_eq(measures, 0, "%lldx%lld: the oracle's stored elements differ from "
                         "the host kernel's", (long long)rows, (long long)cols);
            for (int j = TK_AUDIT_IMPL_MAX_ABS; j <= TK_AUDIT_GAP_MISMATCHES; j++)
                m[i][j - TK_AUDIT_IMPL_MAX_ABS] = res(a, 0, j);
            tkt_report_json(a, text[i], sizeof text[i]);
            tk_audit_destroy(a);
        }
        expect_bits_eq(m[0][TK_AUDIT_SCALE - TK_AUDIT_IMPL_MAX_ABS], largest, "scale");
        for (int i = 0; i < 2 * NT; i += 2) {
            /* One assertion a tolerance, on the first metric that differs
             * (criterion leaks under ASan with hundreds of passing ones). */
            int j = TK_AUDIT_IMPL_MAX_ABS;
            while (j < TK_AUDIT_GAP_MISMATCHES &&
                   !memcmp(&m[i][j - TK_AUDIT_IMPL_MAX_ABS], &m[i + 1][j - TK_AUDIT_IMPL_MAX_ABS],
                           sizeof m[i][0]))
                j++;
            char what[96];
            snprintf(what, sizeof what, "%lldx%lld at tolerance %g, %g: metric %d",
                     (long long)rows, (long long)cols, tol[i / 2][0], tol[i / 2][1], j);
            expect_bits_eq(m[i][j - TK_AUDIT_IMPL_MAX_ABS], m[i + 1][j - TK_AUDIT_IMPL_MAX_ABS],
                           what);
            const char *cases[2] = {strstr(text[i], "\"cases\""),
                                    strstr(text[i + 1], "\"cases\"")};
            cr_assert(cases[0] && cases[1]);
            cr_assert_str_eq(cases[0], cases[1]);
        }
        tk_kernel_destroy(k[0]);
        tk_kernel_destroy(k[1]);
        free(x);
        free(y);
    }
}

/* The host kernel, then every +0 in the output turned into -0: equal in
 * value, different in bits, so the audit measures the candidate itself. */
static int host_negative_zeros(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    int rc = host(user, in, out);
    float *o = tk_matrix_data(out);
    for (int64_t r = 0; r < tk_matrix_rows(out); r++)
        for (int64_t c = 0; c < tk_matrix_cols(out); c++)
            if (tkt_bits(o[r * tk_matrix_row_stride(out) + c]) == 0)
                o[r * tk_matrix_row_stride(out) + c] = -0.0f;
    return rc;
}

Test(audit_seed, candidate_equal_in_value_has_the_oracle_metrics)
{
    enum { R = 6, C = 40, N = R * C };
    float x[N], y[N];
    tkt_fill(x, N, 51);
    tkt_fill(y, N, 52);
    for (int i = 0; i < N; i += 5)
        x[i] = y[i] = 0.0f;
    const float *orig[2] = {x, y};
    const int metrics[] = {TK_AUDIT_IMPL_MAX_ABS, TK_AUDIT_IMPL_MAX_ULP,
                           TK_AUDIT_IMPL_MISMATCHES, TK_AUDIT_GAP_MAX_ABS,
                           TK_AUDIT_GAP_MAX_REL, TK_AUDIT_GAP_INPUT_MAX_ABS,
                           TK_AUDIT_GAP_OUTPUT_MAX_ABS, TK_AUDIT_GAP_MISMATCHES,
                           TK_AUDIT_PASSED, TK_AUDIT_SCALE, TK_AUDIT_DIAGNOSIS};
    tk_kernel *k = axpy2();
    tk_audit *a[2];
    for (int v = 0; v < 2; v++) {
        cr_assert_eq(tk_audit_create(&a[v], k), TK_OK);
        cr_assert_eq(tk_audit_set_candidate(a[v], v ? host_negative_zeros : host, k),
                     TK_OK);
        cr_assert_eq(tk_audit_add_case(a[v], TK_DTYPE_F32, R, C, orig), TK_OK);
        cr_assert_eq(tk_audit_run(a[v]), TK_OK, "%s", tk_last_error_message());
    }
    for (size_t m = 0; m < sizeof metrics / sizeof *metrics; m++)
        expect_bits_eq(res(a[1], 0, metrics[m]), res(a[0], 0, metrics[m]), "metric");
    cr_assert_eq(res(a[1], 0, TK_AUDIT_PASSED), 1.0);
    tk_audit_destroy(a[0]);
    tk_audit_destroy(a[1]);
    tk_kernel_destroy(k);
}

/* ---- diagnosis ------------------------------------------------------------- */

/* Audit one wrong candidate on data; return the diagnosis. */
static int diagnose(const tk_kernel *k, enum wrong kind, int dtype, int64_t rows,
                    int64_t cols, const float *x, const float *y, tk_audit **keep)
{
    static struct wrong_ctx ctx;
    ctx = (struct wrong_ctx){kind, {x, y}};
    tk_audit *a;
    const float *orig[2] = {x, y};
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    cr_assert_eq(tk_audit_set_candidate(a, wrong, &ctx), TK_OK);
    cr_assert_eq(tk_audit_add_case(a, dtype, rows, cols, orig), TK_OK);
    tkt_expect_status(tk_audit_run(a), TK_EMISMATCH);
    cr_assert(strstr(tk_last_error_message(), "1 of 1 cases") != NULL, "%s",
              tk_last_error_message());
    cr_assert_eq(res(a, 0, TK_AUDIT_PASSED), 0.0);
    cr_assert_gt(res(a, 0, TK_AUDIT_IMPL_MISMATCHES), 0.0);
    int d = (int)res(a, 0, TK_AUDIT_DIAGNOSIS);
    if (keep)
        *keep = a;  /* the caller destroys it */
    else
        tk_audit_destroy(a);
    return d;
}

#define DIAG_ROWS 16
#define DIAG_COLS 200

static void diag_data(float *x, float *y)
{
    tkt_fill(x, DIAG_ROWS * DIAG_COLS, 21);
    tkt_fill(y, DIAG_ROWS * DIAG_COLS, 22);
}

Test(audit_diagnosis, names_each_wrong_schedule)
{
    static float x[DIAG_ROWS * DIAG_COLS], y[DIAG_ROWS * DIAG_COLS];
    diag_data(x, y);
    const struct { enum wrong kind; int want; } cases[] = {
        {EARLY, TK_SCHEDULE_EARLY_ROUND},
        {TRUNC, TK_SCHEDULE_TRUNCATE},
        {FINAL_ONLY, TK_SCHEDULE_FINAL_CAST},
        {ONE_WRONG, TK_SCHEDULE_UNKNOWN},
        {NOTHING, TK_SCHEDULE_UNKNOWN},
    };
    tk_kernel *k = axpy(WRONG_ALPHA);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int d = diagnose(k, cases[i].kind, TK_DTYPE_BF16, DIAG_ROWS, DIAG_COLS, x, y,
                         NULL);
        cr_assert_eq(d, cases[i].want, "candidate %zu diagnosed %s, want %s", i,
                     tk_audit_schedule_name(d), tk_audit_schedule_name(cases[i].want));
    }
    tk_kernel_destroy(k);
}

Test(audit_diagnosis, names_subnormal_flush_in_both_dtypes)
{
    static float x[DIAG_ROWS * DIAG_COLS], y[DIAG_ROWS * DIAG_COLS];
    diag_data(x, y);
    /* Every seventh element is subnormal in f32 and in bf16. */
    for (int i = 0; i < DIAG_ROWS * DIAG_COLS; i += 7) {
        x[i] = (i % 2 ? -3.0f : 5.0f) * 0x1p-136f;
        y[i] = 0x1p-135f;
    }
    const int dtypes[2] = {TK_DTYPE_F32, TK_DTYPE_BF16};
    tk_kernel *k = axpy(WRONG_ALPHA);
    for (int i = 0; i < 2; i++) {
        int d = diagnose(k, FLUSH, dtypes[i], DIAG_ROWS, DIAG_COLS, x, y, NULL);
        cr_assert_eq(d, TK_SCHEDULE_FLUSH_SUBNORMAL, "%s: diagnosed %s",
                     tk_dtype_name(dtypes[i]), tk_audit_schedule_name(d));
    }
    tk_kernel_destroy(k);
}

Test(audit_diagnosis, unwritten_output_is_all_mismatches)
{
    static float x[DIAG_ROWS * DIAG_COLS], y[DIAG_ROWS * DIAG_COLS];
    diag_data(x, y);
    tk_audit *a;
    tk_kernel *k = axpy(WRONG_ALPHA);
    cr_assert_eq(diagnose(k, NOTHING, TK_DTYPE_F32, DIAG_ROWS, DIAG_COLS, x, y, &a),
                 TK_SCHEDULE_UNKNOWN);
    cr_assert_eq(res(a, 0, TK_AUDIT_IMPL_MISMATCHES), (double)(DIAG_ROWS * DIAG_COLS));
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
}

/* The implementation metrics equal tk_compare's on the same two matrices
 * (candidate and oracle), including the ULP maximum. */
Test(audit_diagnosis, implementation_metrics_match_tk_compare)
{
    static float x[DIAG_ROWS * DIAG_COLS], y[DIAG_ROWS * DIAG_COLS];
    static float o[DIAG_ROWS * DIAG_COLS];
    diag_data(x, y);
    tk_audit *a;
    tk_kernel *k = axpy(WRONG_ALPHA);
    cr_assert_eq(diagnose(k, EARLY, TK_DTYPE_BF16, DIAG_ROWS, DIAG_COLS, x, y, &a),
                 TK_SCHEDULE_EARLY_ROUND);
    tk_matrix *cand, *oracle;
    struct wrong_ctx ctx = {EARLY, {x, y}};
    tk_matrix *in[2];
    for (int i = 0; i < DIAG_ROWS * DIAG_COLS; i++)
        o[i] = round_to(TK_DTYPE_BF16, WRONG_ALPHA * round_to(TK_DTYPE_BF16, x[i]) +
                                           round_to(TK_DTYPE_BF16, y[i]));
    cr_assert_eq(tk_matrix_from_f32(&in[0], TK_DTYPE_BF16, DIAG_ROWS, DIAG_COLS, x,
                                    DIAG_COLS), TK_OK);
    cr_assert_eq(tk_matrix_from_f32(&in[1], TK_DTYPE_BF16, DIAG_ROWS, DIAG_COLS, y,
                                    DIAG_COLS), TK_OK);
    cr_assert_eq(tk_matrix_create(&cand, TK_DTYPE_BF16, DIAG_ROWS, DIAG_COLS), TK_OK);
    cr_assert_eq(wrong(&ctx, (const tk_matrix *const *)in, cand), 0);
    cr_assert_eq(tk_matrix_from_f32(&oracle, TK_DTYPE_BF16, DIAG_ROWS, DIAG_COLS, o,
                                    DIAG_COLS), TK_OK);
    tk_compare *c;
    double v;
    cr_assert_eq(tk_compare_create(&c, TK_DTYPE_BF16), TK_OK);
    cr_assert_eq(tk_compare_set_tolerance(c, 0.0, 0.0), TK_OK);
    cr_assert_eq(tk_compare_set(c, TK_COMPARE_MAX_ULP, 0), TK_OK);
    cr_assert_eq(tk_compare_run(c, cand, oracle), TK_EMISMATCH);
    const int pairs[3][2] = {{TK_COMPARE_MAX_ABS, TK_AUDIT_IMPL_MAX_ABS},
                             {TK_COMPARE_MAX_ULP_SEEN, TK_AUDIT_IMPL_MAX_ULP},
                             {TK_COMPARE_MISMATCHES, TK_AUDIT_IMPL_MISMATCHES}};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(tk_compare_result(c, pairs[i][0], &v), TK_OK);
        expect_bits_eq(res(a, 0, pairs[i][1]), v, "implementation metric");
    }
    cr_assert_gt(v, 0.0);
    tk_compare_destroy(c);
    tk_matrix_destroy(in[0]);
    tk_matrix_destroy(in[1]);
    tk_matrix_destroy(cand);
    tk_matrix_destroy(oracle);
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
}

/* A three-input custom contract: the references call its body; a
 * truncating candidate is still named (early rounding is axpy-only). */
static int fma3(void *user, int64_t rows, int64_t cols, int64_t ld,
                const float *const *in, float *out)
{
    (void)user;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float p = in[0][r * ld + c] * in[1][r * ld + c];
            out[r * ld + c] = p + in[2][r * ld + c];
        }
    return 0;
}

static int fma3_truncating(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    (void)user;
    int64_t rows = tk_matrix_rows(out), cols = tk_matrix_cols(out);
    float *v = malloc((size_t)(3 * cols) * sizeof *v);
    for (int64_t r = 0; r < rows; r++) {
        for (int i = 0; i < 3; i++) {
            const uint16_t *src = (const uint16_t *)tk_matrix_data(in[i]) +
                                  r * tk_matrix_row_stride(in[i]);
            for (int64_t c = 0; c < cols; c++)
                v[i * cols + c] = tk_bf16_to_f32(src[c]);
        }
        uint16_t *dst = (uint16_t *)tk_matrix_data(out) + r * tk_matrix_row_stride(out);
        for (int64_t c = 0; c < cols; c++) {
            float p = v[c] * v[cols + c];
            dst[c] = (uint16_t)(tkt_bits(p + v[2 * cols + c]) >> 16);
        }
    }
    free(v);
    return 0;
}

Test(audit_diagnosis, custom_three_input_contract)
{
    static float x[3][DIAG_ROWS * DIAG_COLS];
    for (int i = 0; i < 3; i++)
        tkt_fill(x[i], DIAG_ROWS * DIAG_COLS, 30 + (uint64_t)i);
    const float *orig[3] = {x[0], x[1], x[2]};
    tk_kernel *k;
    tk_audit *a;
    cr_assert_eq(tk_kernel_custom(&k, 3, fma3, NULL), TK_OK);
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    cr_assert_eq(tk_audit_set_candidate(a, fma3_truncating, NULL), TK_OK);
    cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_BF16, DIAG_ROWS, DIAG_COLS, orig), TK_OK);
    tkt_expect_status(tk_audit_run(a), TK_EMISMATCH);
    cr_assert_eq(res(a, 0, TK_AUDIT_DIAGNOSIS), TK_SCHEDULE_TRUNCATE);
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
}

/* fma3 until its countdown runs out, then a failure. */
static int fma3_countdown(void *user, int64_t rows, int64_t cols, int64_t ld,
                          const float *const *in, float *out)
{
    int *left = user;
    if ((*left)-- == 0)
        return 5;
    return fma3(NULL, rows, cols, ld, in, out);
}

Test(audit_errors, a_failing_contract_body_names_the_case_and_block)
{
    static float x[3][DIAG_ROWS * DIAG_COLS];
    for (int i = 0; i < 3; i++)
        tkt_fill(x[i], DIAG_ROWS * DIAG_COLS, 40 + (uint64_t)i);
    const float *orig[3] = {x[0], x[1], x[2]};
    int left = INT32_MAX;
    tk_kernel *k;
    tk_audit *a;
    cr_assert_eq(tk_kernel_custom(&k, 3, fma3_countdown, &left), TK_OK);
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    cr_assert_eq(tk_audit_set_candidate(a, fma3_truncating, NULL), TK_OK);
    cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_BF16, DIAG_ROWS, DIAG_COLS, orig), TK_OK);
    tkt_expect_status(tk_audit_run(a), TK_EMISMATCH);
    int calls = INT32_MAX - left;
    /* The first call (the first block of whole rows, in the oracle's pass)
     * and the last (the diagnosis's) fail; the results stay. */
    const int fail_at[2] = {0, calls - 1};
    for (int i = 0; i < 2; i++) {
        left = fail_at[i];
        tkt_expect_status(tk_audit_run(a), TK_ECALLBACK);
        const char *msg = tk_last_error_message();
        cr_assert(strstr(msg, "tk_audit_run: the contract's body returned 5 for case 0 "
                              "(16x200 bfloat16) on the ") == msg, "%s", msg);
        if (i == 0)
            cr_assert(strstr(msg, "the 5x200 block at row 0, column 0"), "%s", msg);
        cr_assert_eq(res(a, 0, TK_AUDIT_DIAGNOSIS), TK_SCHEDULE_TRUNCATE);
    }
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
}

Test(audit_diagnosis, schedule_names)
{
    for (int s = TK_SCHEDULE_NOT_RUN; s <= TK_SCHEDULE_K_TAIL_PADDING; s++)
        cr_assert_not_null(tk_audit_schedule_name(s), "schedule %d", s);
    cr_assert_str_eq(tk_audit_schedule_name(TK_SCHEDULE_EARLY_ROUND), "early-rounding");
    cr_assert_null(tk_audit_schedule_name(TK_SCHEDULE_K_TAIL_PADDING + 1));
    cr_assert_null(tk_audit_schedule_name(-2));
}

/* The host kernel for the first `ok` calls, then a failure. */
struct flaky {
    const tk_kernel *k;
    int ok;
};

static int flaky(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    struct flaky *f = user;
    return f->ok-- > 0 ? host((void *)f->k, in, out) : 42;
}

/* ---- errors and state ------------------------------------------------------ */

static int copy_body(void *user, int64_t rows, int64_t cols, int64_t ld,
                          const float *const *in, float *out)
{
    (void)user;
    for (int64_t r = 0; r < rows; r++)
        memcpy(out + r * ld, in[0] + r * ld, (size_t)cols * sizeof *out);
    return 0;
}

Test(audit_errors, create_rejects_blockwise_contracts)
{
    tk_kernel *k;
    tk_audit *a = (tk_audit *)&a;
    cr_assert_eq(tk_kernel_custom(&k, 1, copy_body, NULL), TK_OK);
    cr_assert_eq(tk_kernel_set(k, TK_KERNEL_BODY, TK_BODY_BLOCKWISE), TK_OK);
    tkt_expect_status(tk_audit_create(&a, k), TK_EINVAL);
    cr_assert_null(a);
    cr_assert(strstr(tk_last_error_message(), "BLOCKWISE") != NULL, "%s",
              tk_last_error_message());
    a = (tk_audit *)&a;
    tkt_expect_status(tk_audit_create(&a, NULL), TK_EINVAL);
    cr_assert_null(a);
    tkt_expect_status(tk_audit_create(NULL, k), TK_EINVAL);
    /* A contract switched to blockwise after creation is refused at run. */
    cr_assert_eq(tk_kernel_set(k, TK_KERNEL_BODY, TK_BODY_ELEMENTWISE), TK_OK);
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    float x[4] = {1, 2, 3, 4};
    const float *orig[1] = {x};
    cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_F32, 2, 2, orig), TK_OK);
    cr_assert_eq(tk_audit_set_candidate(a, host, k), TK_OK);
    cr_assert_eq(tk_kernel_set(k, TK_KERNEL_BODY, TK_BODY_BLOCKWISE), TK_OK);
    tkt_expect_status(tk_audit_run(a), TK_EINVAL);
    tk_audit_destroy(a);
    tk_audit_destroy(NULL);
    tk_kernel_destroy(k);
}

Test(audit_errors, add_case_validates_everything)
{
    tk_kernel *k = axpy2();
    tk_audit *a;
    float x[4] = {0};
    const float *orig[2] = {x, x}, *half[2] = {x, NULL};
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    tkt_expect_status(tk_audit_add_case(a, TK_DTYPE_I32, 2, 2, orig), TK_EDTYPE);
    cr_assert(strstr(tk_last_error_message(), "int32") != NULL);
    tkt_expect_status(tk_audit_add_case(a, 7, 2, 2, orig), TK_EDTYPE);
    tkt_expect_status(tk_audit_add_case(a, TK_DTYPE_F32, 0, 2, orig), TK_ESHAPE);
    cr_assert(strstr(tk_last_error_message(), "0x2") != NULL);
    tkt_expect_status(tk_audit_add_case(a, TK_DTYPE_F32, 2, 2, NULL), TK_EINVAL);
    tkt_expect_status(tk_audit_add_case(a, TK_DTYPE_F32, 2, 2, half), TK_EINVAL);
    cr_assert(strstr(tk_last_error_message(), "originals[1]") != NULL);
    tkt_expect_status(tk_audit_add_case(a, TK_DTYPE_F32, INT64_MAX / 2, 4, orig),
                      TK_EOVERFLOW);
    cr_assert(strstr(tk_last_error_message(), "tk_audit_add_case: 4611686018427387903x4"),
              "%s", tk_last_error_message());
    /* Rows that fit, but not with both inputs copied. */
    tkt_expect_status(tk_audit_add_case(a, TK_DTYPE_F32, INT64_MAX / 8 + 1, 1, orig),
                      TK_EOVERFLOW);
    cr_assert(!strncmp(tk_last_error_message(), "tk_audit_add_case: size overflows", 33),
              "%s", tk_last_error_message());
    cr_assert_eq(tk_audit_case_count(a), 0);
    tkt_expect_status((int)tk_audit_case_count(NULL), TK_EINVAL);
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
}

Test(audit_errors, run_and_results_need_state)
{
    tk_kernel *k = axpy2();
    tk_audit *a;
    float x[6] = {1, 2, 3, 4, 5, 6};
    const float *orig[2] = {x, x};
    double v = 5.0;
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    tkt_expect_status(tk_audit_run(a), TK_ESTATE);
    cr_assert(strstr(tk_last_error_message(), "candidate") != NULL);
    cr_assert_eq(tk_audit_set_candidate(a, host, k), TK_OK);
    tkt_expect_status(tk_audit_run(a), TK_ESTATE);
    cr_assert(strstr(tk_last_error_message(), "cases") != NULL);
    tkt_expect_status(tk_audit_set_candidate(a, NULL, NULL), TK_EINVAL);
    cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_BF16, 2, 3, orig), TK_OK);
    /* Shape and dtype are known before the run; results are not. */
    cr_assert_eq(res(a, 0, TK_AUDIT_ROWS), 2.0);
    cr_assert_eq(res(a, 0, TK_AUDIT_COLS), 3.0);
    cr_assert_eq(res(a, 0, TK_AUDIT_DTYPE), TK_DTYPE_BF16);
    tkt_expect_status(tk_audit_result(a, 0, TK_AUDIT_GAP_MAX_ABS, &v), TK_ESTATE);
    cr_assert_eq(v, 5.0);
    tkt_expect_status(tk_audit_result(a, 1, TK_AUDIT_ROWS, &v), TK_ERANGE);
    tkt_expect_status(tk_audit_result(a, -1, TK_AUDIT_ROWS, &v), TK_ERANGE);
    tkt_expect_status(tk_audit_result(a, 0, 9999, &v), TK_EINVAL);
    tkt_expect_status(tk_audit_result(a, 0, TK_AUDIT_ROWS, NULL), TK_EINVAL);
    tkt_expect_status(tk_audit_write_report(a, "/tmp/unused", TK_REPORT_TEXT),
                      TK_ESTATE);
    cr_assert_eq(tk_audit_run(a), TK_OK);
    cr_assert_eq(res(a, 0, TK_AUDIT_PASSED), 1.0);
    /* A run that fails part-way leaves the previous results in place. */
    struct flaky f = {k, 2};
    cr_assert_eq(tk_audit_set_candidate(a, flaky, &f), TK_OK);
    tkt_expect_status(tk_audit_result(a, 0, TK_AUDIT_PASSED, &v), TK_ESTATE);
    cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_F32, 3, 2, orig), TK_OK);
    cr_assert_eq(tk_audit_run(a), TK_OK);
    cr_assert_eq(res(a, 1, TK_AUDIT_PASSED), 1.0);
    tkt_expect_status(tk_audit_run(a), TK_ECALLBACK);
    cr_assert(strstr(tk_last_error_message(), "returned 42 for case 0") != NULL, "%s",
              tk_last_error_message());
    cr_assert_eq(res(a, 1, TK_AUDIT_PASSED), 1.0);
    /* Any change invalidates them. */
    cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_F32, 3, 2, orig), TK_OK);
    tkt_expect_status(tk_audit_result(a, 0, TK_AUDIT_PASSED, &v), TK_ESTATE);
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
}

Test(audit_errors, gap_tolerance_is_per_dtype)
{
    int64_t rows, cols;
    float *x = load(FIXTURES "seed42_x_9x129.npy", &rows, &cols);
    float *y = load(FIXTURES "seed42_y_9x129.npy", &rows, &cols);
    const float *orig[2] = {x, y};
    tk_kernel *k = axpy2();
    tk_audit *a;
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    cr_assert_eq(tk_audit_set_candidate(a, host, k), TK_OK);
    cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_BF16, rows, cols, orig), TK_OK);
    cr_assert_eq(tk_audit_run(a), TK_OK);
    /* The bf16 gap exceeds torch's default bf16 tolerance somewhere, yet the
     * implementation verdict passes: the two are never merged. */
    cr_assert_eq(res(a, 0, TK_AUDIT_PASSED), 1.0);
    cr_assert_eq(res(a, 0, TK_AUDIT_GAP_PASSED), 0.0);
    cr_assert_gt(res(a, 0, TK_AUDIT_GAP_MISMATCHES), 0.0);
    tkt_expect_status(tk_audit_set_gap_tolerance(a, TK_DTYPE_BF16, -1.0, 0.0), TK_ERANGE);
    tkt_expect_status(tk_audit_set_gap_tolerance(a, TK_DTYPE_BF16, 0.0, NAN), TK_ERANGE);
    tkt_expect_status(tk_audit_set_gap_tolerance(a, TK_DTYPE_I32, 0.0, 0.0), TK_EDTYPE);
    cr_assert_eq(res(a, 0, TK_AUDIT_GAP_PASSED), 0.0);  /* failures changed nothing */
    cr_assert_eq(tk_audit_set_gap_tolerance(a, TK_DTYPE_BF16, 0.05, 0.0), TK_OK);
    cr_assert_eq(tk_audit_set_gap_tolerance(a, TK_DTYPE_F32, 0.0, 0.0), TK_OK);
    cr_assert_eq(tk_audit_run(a), TK_OK);
    cr_assert_eq(res(a, 0, TK_AUDIT_GAP_PASSED), 1.0);
    expect_bits_eq(res(a, 0, TK_AUDIT_GAP_ATOL), 0.05, "gap atol");
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
    free(x);
    free(y);
}

/* ---- property checks --------------------------------------------------------- */

/* Couples rows: row r also reads row 0, so a permutation changes it. */
static int row_coupled(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    int rc = host(user, in, out);
    float *o = tk_matrix_data(out);
    const float *x = tk_matrix_data(in[0]);
    for (int64_t r = 1; r < tk_matrix_rows(out); r++)
        o[r * tk_matrix_row_stride(out)] += x[0];
    return rc;
}

Test(audit_property, joint_row_permutation)
{
    static const int64_t order[9] = {8, 0, 7, 1, 6, 2, 5, 3, 4};
    int64_t rows, cols;
    float *x = load(FIXTURES "seed42_perm_a_9x129.npy", &rows, &cols);
    float *y = load(FIXTURES "seed42_perm_b_9x129.npy", &rows, &cols);
    const float *orig[2] = {x, y};
    tk_kernel *k = axpy2();
    tk_audit *a;
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    tkt_expect_status(tk_audit_check_permutation(a, 0, order), TK_ERANGE);
    cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_F32, rows, cols, orig), TK_OK);
    cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_BF16, rows, cols, orig), TK_OK);
    tkt_expect_status(tk_audit_check_permutation(a, 0, order), TK_ESTATE);
    cr_assert_eq(tk_audit_set_candidate(a, host, k), TK_OK);
    cr_assert_eq(tk_audit_check_permutation(a, 0, order), TK_OK, "%s",
                 tk_last_error_message());
    cr_assert_eq(tk_audit_check_permutation(a, 1, order), TK_OK);
    const int64_t dup[9] = {8, 0, 7, 1, 6, 2, 5, 3, 3};
    const int64_t out_of_range[9] = {9, 0, 7, 1, 6, 2, 5, 3, 4};
    tkt_expect_status(tk_audit_check_permutation(a, 0, dup), TK_EINVAL);
    cr_assert(strstr(tk_last_error_message(), "order[8] = 3") != NULL, "%s",
              tk_last_error_message());
    tkt_expect_status(tk_audit_check_permutation(a, 0, out_of_range), TK_EINVAL);
    cr_assert(strstr(tk_last_error_message(), "order[0] = 9") != NULL);
    tkt_expect_status(tk_audit_check_permutation(a, 0, NULL), TK_EINVAL);
    tkt_expect_status(tk_audit_check_permutation(a, 2, order), TK_ERANGE);
    cr_assert_eq(tk_audit_set_candidate(a, row_coupled, k), TK_OK);
    tkt_expect_status(tk_audit_check_permutation(a, 0, order), TK_EMISMATCH);
    cr_assert(strstr(tk_last_error_message(), "column 0") != NULL, "%s",
              tk_last_error_message());
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
    free(x);
    free(y);
}

Test(audit_property, rounding_counterexample)
{
    float early = -1.0f, late = -1.0f;
    cr_assert_eq(tk_rounding_counterexample(TK_DTYPE_BF16, 1.00390625f, 0.00390625f,
                                            &early, &late), TK_OK);
    cr_assert_eq(tkt_bits(early), tkt_bits(1.0f), "early %a", early);
    cr_assert_eq(tkt_bits(late), tkt_bits(1.0078125f), "late %a", late);
    /* float32 has no early rounding to speak of. */
    cr_assert_eq(tk_rounding_counterexample(TK_DTYPE_F32, 1.00390625f, 0.00390625f,
                                            &early, &late), TK_OK);
    cr_assert_eq(tkt_bits(early), tkt_bits(late));
    cr_assert_eq(tkt_bits(late), tkt_bits(1.00390625f + 0.00390625f));
    float keep = 3.0f;
    tkt_expect_status(tk_rounding_counterexample(TK_DTYPE_I32, 1.0f, 1.0f, &keep, &late),
                      TK_EDTYPE);
    cr_assert_eq(keep, 3.0f);
    tkt_expect_status(tk_rounding_counterexample(TK_DTYPE_BF16, 1.0f, 1.0f, &keep, NULL),
                      TK_EINVAL);
    cr_assert_eq(keep, 3.0f);
}

/* ---- reports (the Python suite parses them fully) ------------------------ */

Test(audit_report, writes_three_formats_and_refuses_bad_paths)
{
    float x[12], y[12];
    tkt_fill(x, 12, 5);
    tkt_fill(y, 12, 6);
    const float *orig[2] = {x, y};
    tk_kernel *k = axpy2();
    tk_audit *a;
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    cr_assert_eq(tk_audit_set_candidate(a, host, k), TK_OK);
    cr_assert_eq(tk_audit_add_case(a, TK_DTYPE_BF16, 3, 4, orig), TK_OK);
    cr_assert_eq(tk_audit_run(a), TK_OK);
    char dir[] = "/tmp/tk_audit_report_XXXXXX", path[64];
    cr_assert_not_null(mkdtemp(dir));
    const char *want[3] = {"implementation", "\"schema\": \"tilekern.audit/1\"",
                           "max gap versus original float32 values"};
    for (int f = TK_REPORT_TEXT; f <= TK_REPORT_SVG; f++) {
        snprintf(path, sizeof path, "%s/r%d", dir, f);
        cr_assert_eq(tk_audit_write_report(a, path, f), TK_OK, "%s",
                     tk_last_error_message());
        FILE *fp = fopen(path, "r");
        char text[8192] = {0};
        cr_assert_not_null(fp);
        size_t n = fread(text, 1, sizeof text - 1, fp);
        fclose(fp);
        cr_assert_gt(n, 0);
        cr_assert(strstr(text, want[f - 1]) != NULL, "format %d lacks %s", f,
                  want[f - 1]);
        remove(path);
    }
    snprintf(path, sizeof path, "%s/missing/r", dir);
    tkt_expect_status(tk_audit_write_report(a, path, TK_REPORT_TEXT), TK_EIO);
    cr_assert(strstr(tk_last_error_message(), path) != NULL);
    tkt_expect_status(tk_audit_write_report(a, path, 0), TK_EINVAL);
    tkt_expect_status(tk_audit_write_report(a, NULL, TK_REPORT_SVG), TK_EINVAL);
    rmdir(dir);
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
}

/* ---- re-entry ------------------------------------------------------------------ */

struct reentry {
    tk_audit *self, *other;
    tk_kernel *contract;
    int add, run, perm, other_run, set, progress;
};

/* The candidate both kinds share: the host kernel with (8, 128) blocks. */
static int plain(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    (void)user;
    tk_tiling *t = NULL;
    tk_kernel *k = NULL;
    int rc = tk_tiling_create(&t, tk_matrix_rows(out), tk_matrix_cols(out), 8, 128);
    if (!rc)
        rc = tk_kernel_axpy(&k, 2.0f);
    if (!rc)
        rc = tk_kernel_run(k, t, in, out);
    tk_kernel_destroy(k);
    tk_tiling_destroy(t);
    return rc;
}

/* A candidate that tries to change and rerun its own audit (refused, so
 * nothing it uses moves) and runs a different audit (allowed). */
static int reentrant(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    struct reentry *r = user;
    static const float one[4] = {1, 1, 1, 1};
    const float *orig[2] = {one, one};
    int64_t order[2] = {1, 0};
    r->add = tk_audit_add_case(r->self, TK_DTYPE_F32, 2, 2, orig);
    r->run = tk_audit_run(r->self);
    r->perm = tk_audit_check_permutation(r->self, 0, order);
    r->set = tk_kernel_set(r->contract, TK_KERNEL_THREADS, 2);
    r->progress = tk_audit_set_progress(r->self, NULL, NULL);
    if (r->other)
        r->other_run = tk_audit_run(r->other);
    return plain(NULL, in, out);
}

Test(audit, a_candidate_cannot_change_or_rerun_its_own_audit)
{
    tk_kernel *k;
    tkt_expect_status(tk_kernel_axpy(&k, 2.0f), TK_OK);
    float x[16 * 130];
    tkt_fill(x, 16 * 130, 21);
    const float *orig[2] = {x, x};
    struct reentry r = {0};
    tk_audit *other;
    tkt_expect_status(tk_audit_create(&r.self, k), TK_OK);
    tkt_expect_status(tk_audit_create(&other, k), TK_OK);
    tkt_expect_status(tk_audit_set_candidate(other, plain, NULL), TK_OK);
    tkt_expect_status(tk_audit_add_case(other, TK_DTYPE_BF16, 16, 130, orig), TK_OK);
    r.other = other;
    r.contract = k;
    tkt_expect_status(tk_audit_set_candidate(r.self, reentrant, &r), TK_OK);
    for (int c = 0; c < 3; c++)
        tkt_expect_status(tk_audit_add_case(r.self, TK_DTYPE_BF16, 16, 130, orig), TK_OK);
    tkt_expect_status(tk_audit_run(r.self), TK_OK);
    cr_assert_eq(r.add, TK_ESTATE);
    cr_assert_eq(r.run, TK_ESTATE);
    cr_assert_eq(r.perm, TK_ESTATE);
    cr_assert_eq(r.set, TK_ESTATE, "the contract kernel cannot change mid-audit");
    cr_assert_eq(r.progress, TK_ESTATE);
    cr_assert_eq(r.other_run, TK_OK, "a different audit may run inside a candidate");
    cr_assert_eq(tk_audit_case_count(r.self), 3);
    double passed;
    for (int c = 0; c < 3; c++) {
        tkt_expect_status(tk_audit_result(r.self, c, TK_AUDIT_PASSED, &passed), TK_OK);
        cr_assert_eq(passed, 1.0);
    }
    int64_t order[16];
    for (int i = 0; i < 16; i++)
        order[i] = 15 - i;
    tkt_expect_status(tk_audit_check_permutation(r.self, 0, order), TK_OK);
    cr_assert_eq(r.run, TK_ESTATE, "inside the permutation check too");
    tk_audit_destroy(other);
    tk_audit_destroy(r.self);
    tk_kernel_destroy(k);
}

/* The report describes the contract its results were taken under: the
 * kernel changed after the run does not relabel them. */
Test(audit, the_report_names_the_contract_of_the_run)
{
    tk_kernel *k;
    tk_audit *a;
    float x[8 * 128];
    tkt_fill(x, 8 * 128, 31);
    const float *orig[2] = {x, x};
    tkt_expect_status(tk_kernel_axpy(&k, 2.0f), TK_OK);
    tkt_expect_status(tk_audit_create(&a, k), TK_OK);
    tkt_expect_status(tk_audit_set_candidate(a, plain, NULL), TK_OK);
    tkt_expect_status(tk_audit_add_case(a, TK_DTYPE_F32, 8, 128, orig), TK_OK);
    tkt_expect_status(tk_audit_run(a), TK_OK);
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_ARITH, TK_ARITH_XLA), TK_OK);
    static char text[1 << 16];
    tkt_report_json(a, text, sizeof text);
    cr_assert(strstr(text, "\"arith\": \"numpy\""), "%s", text);
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
}

/* ---- progress ---------------------------------------------------------------- */

struct steps {
    char seen[16][16];
    int n, stop_at;   /* stop_at: the entry whose call returns 4; -1 never */
};

static int record(void *user, int64_t case_index, const char *step, double fraction)
{
    struct steps *s = user;
    cr_assert_eq(case_index, 0);
    cr_assert_eq(fraction, 0.0, "an elementwise step reports its start only");
    cr_assert_lt(s->n, 16);
    snprintf(s->seen[s->n], sizeof s->seen[0], "%s", step);
    return s->n++ == s->stop_at ? 4 : 0;
}

/* An elementwise case reports the steps it takes: a candidate equal to the
 * oracle needs no measure and no diagnosis.  A non-zero return stops the
 * run in that step, and the results of the last complete run stay. */
Test(audit_progress, names_the_steps_of_an_elementwise_case)
{
    static float x[DIAG_ROWS * DIAG_COLS], y[DIAG_ROWS * DIAG_COLS];
    diag_data(x, y);
    const float *orig[2] = {x, y};
    tk_kernel *k = axpy(WRONG_ALPHA);
    static struct wrong_ctx ctx;
    ctx = (struct wrong_ctx){TRUNC, {x, y}};
    const struct {
        tk_candidate_fn fn;
        void *user;
        int rc, n;
        const char *steps[4];
    } runs[] = {{host, NULL, TK_OK, 2, {"oracle", "candidate"}},
                {wrong, &ctx, TK_EMISMATCH, 4, {"oracle", "candidate", "measure", "diagnosis"}}};
    for (int r = 0; r < 2; r++) {
        tk_audit *a;
        tkt_expect_status(tk_audit_create(&a, k), TK_OK);
        tkt_expect_status(tk_audit_set_candidate(a, runs[r].fn, runs[r].user ? runs[r].user
                                                                              : (void *)k),
                          TK_OK);
        tkt_expect_status(tk_audit_add_case(a, TK_DTYPE_BF16, DIAG_ROWS, DIAG_COLS, orig),
                          TK_OK);
        struct steps s = {.stop_at = -1};
        tkt_expect_status(tk_audit_set_progress(a, record, &s), TK_OK);
        tkt_expect_status(tk_audit_run(a), runs[r].rc);
        cr_assert_eq(s.n, runs[r].n);
        for (int i = 0; i < s.n; i++)
            cr_assert_str_eq(s.seen[i], runs[r].steps[i]);
        double passed = res(a, 0, TK_AUDIT_PASSED);
        for (int stop = 0; stop < runs[r].n; stop++) {
            s = (struct steps){.stop_at = stop};
            tkt_expect_status(tk_audit_run(a), TK_ECALLBACK);
            char want[64];
            snprintf(want, sizeof want, "returned 4 in the %s step of case 0",
                     runs[r].steps[stop]);
            cr_assert(strstr(tk_last_error_message(), want), "%s", tk_last_error_message());
            cr_assert_eq(s.n, stop + 1);
            cr_assert_eq(res(a, 0, TK_AUDIT_PASSED), passed);
        }
        tkt_expect_status(tk_audit_set_progress(a, NULL, NULL), TK_OK);
        s = (struct steps){.stop_at = 0};
        tkt_expect_status(tk_audit_run(a), runs[r].rc);
        cr_assert_eq(s.n, 0, "a NULL callback turns progress off");
        tk_audit_destroy(a);
    }
    tkt_expect_status(tk_audit_set_progress(NULL, record, NULL), TK_EINVAL);
    cr_assert(strstr(tk_last_error_message(), "handle is NULL"), "%s", tk_last_error_message());
    tk_kernel_destroy(k);
}
