/* test_compare.c - tk_compare: every metric on hand-made matrices whose
 * answers are known (ties, NaN, Inf, signed zeros, subnormals, the largest
 * finite values), tolerances, NaN policies, positions and the formatter. */
#include "tk_test.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

/* Compare two f32 matrices given row-major; returns tk_compare_run's status. */
static int run_f32(tk_compare *c, int64_t rows, int64_t cols, const float *actual,
                   const float *expected)
{
    tk_matrix *a, *e;
    cr_assert_eq(tk_matrix_from_f32(&a, TK_DTYPE_F32, rows, cols, actual, cols), TK_OK);
    cr_assert_eq(tk_matrix_from_f32(&e, TK_DTYPE_F32, rows, cols, expected, cols), TK_OK);
    int rc = tk_compare_run(c, a, e);
    tk_matrix_destroy(a);
    tk_matrix_destroy(e);
    return rc;
}

static double metric(const tk_compare *c, int m)
{
    double v = -12345.0;
    cr_assert_eq(tk_compare_result(c, m, &v), TK_OK, "metric %d: %s", m,
                 tk_last_error_message());
    return v;
}

static void expect_where(const tk_compare *c, int which, int64_t row, int64_t col,
                         float actual, float expected)
{
    int64_t r = -1, k = -1;
    float a = 0.0f, e = 0.0f;
    cr_assert_eq(tk_compare_where(c, which, &r, &k, &a, &e), TK_OK, "%s",
                 tk_last_error_message());
    cr_assert_eq(r, row, "where %d: row %lld, want %lld", which, (long long)r,
                 (long long)row);
    cr_assert_eq(k, col, "where %d: col %lld, want %lld", which, (long long)k,
                 (long long)col);
    cr_assert_eq(tkt_bits(a), tkt_bits(actual), "where %d: actual %a", which, a);
    cr_assert_eq(tkt_bits(e), tkt_bits(expected), "where %d: expected %a", which, e);
}

static void expect_bits_eq(double got, double want, const char *what)
{
    cr_assert(memcmp(&got, &want, sizeof got) == 0, "%s: %.17g, want %.17g", what,
              got, want);
}

/* ---- creation, parameters, tolerance ----------------------------------- */

Test(compare, defaults_follow_torch_testing)
{
    const int dtypes[2] = {TK_DTYPE_F32, TK_DTYPE_BF16};
    const double rtol[2] = {1.3e-6, 1.6e-2};
    for (int i = 0; i < 2; i++) {
        tk_compare *c;
        int64_t v;
        cr_assert_eq(tk_compare_create(&c, dtypes[i]), TK_OK);
        expect_bits_eq(metric(c, TK_COMPARE_ATOL), 1e-5, "atol");
        expect_bits_eq(metric(c, TK_COMPARE_RTOL), rtol[i], "rtol");
        cr_assert_eq(tk_compare_get(c, TK_COMPARE_MAX_ULP, &v), TK_OK);
        cr_assert_eq(v, -1);
        cr_assert_eq(tk_compare_get(c, TK_COMPARE_NAN_POLICY, &v), TK_OK);
        cr_assert_eq(v, TK_NAN_MATCH);
        tk_compare_destroy(c);
    }
    tk_compare_destroy(NULL);
}

Test(compare, create_rejects_bad_arguments)
{
    tk_compare *c = (tk_compare *)&c;
    tkt_expect_status(tk_compare_create(&c, TK_DTYPE_I32), TK_EDTYPE);
    cr_assert_null(c);
    c = (tk_compare *)&c;
    tkt_expect_status(tk_compare_create(&c, 99), TK_EDTYPE);
    cr_assert_null(c);
    cr_assert(strstr(tk_last_error_message(), "99") != NULL);
    tkt_expect_status(tk_compare_create(NULL, TK_DTYPE_F32), TK_EINVAL);
}

Test(compare, parameters_are_validated_and_kept_on_failure)
{
    tk_compare *c;
    int64_t v, lo, hi;
    cr_assert_eq(tk_compare_create(&c, TK_DTYPE_F32), TK_OK);
    cr_assert_eq(tk_compare_set(c, TK_COMPARE_MAX_ULP, 3), TK_OK);
    tkt_expect_status(tk_compare_set(c, TK_COMPARE_MAX_ULP, -2), TK_ERANGE);
    cr_assert(strstr(tk_last_error_message(), "-2") != NULL);
    cr_assert_eq(tk_compare_get(c, TK_COMPARE_MAX_ULP, &v), TK_OK);
    cr_assert_eq(v, 3);
    cr_assert_eq(tk_param_bounds(TK_COMPARE_NAN_POLICY, &lo, &hi), TK_OK);
    tkt_expect_status(tk_compare_set(c, TK_COMPARE_NAN_POLICY, hi + 1), TK_ERANGE);
    tkt_expect_status(tk_compare_set(c, TK_COMPARE_NAN_POLICY, lo - 1), TK_ERANGE);
    cr_assert_eq(tk_compare_set(c, TK_COMPARE_NAN_POLICY, TK_NAN_IGNORE), TK_OK);
    tkt_expect_status(tk_compare_set(c, TK_TILING_TAIL, TK_TAIL_PAD), TK_EINVAL);
    tkt_expect_status(tk_compare_get(c, TK_TILING_TAIL, &v), TK_EINVAL);
    tkt_expect_status(tk_compare_set(NULL, TK_COMPARE_MAX_ULP, 0), TK_EINVAL);
    tkt_expect_status(tk_compare_get(c, TK_COMPARE_MAX_ULP, NULL), TK_EINVAL);
    cr_assert_eq(tk_compare_get(c, TK_COMPARE_NAN_POLICY, &v), TK_OK);
    cr_assert_eq(v, TK_NAN_IGNORE);

    cr_assert_eq(tk_compare_set_tolerance(c, 0.5, 0.25), TK_OK);
    const double bad[][2] = {{-1e-9, 0.0}, {0.0, -1.0}, {NAN, 0.0}, {0.0, INFINITY}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        tkt_expect_status(tk_compare_set_tolerance(c, bad[i][0], bad[i][1]), TK_ERANGE);
    expect_bits_eq(metric(c, TK_COMPARE_ATOL), 0.5, "atol kept");
    expect_bits_eq(metric(c, TK_COMPARE_RTOL), 0.25, "rtol kept");
    tk_compare_destroy(c);
}

Test(compare, results_need_a_run)
{
    tk_compare *c;
    double v = 7.0;
    cr_assert_eq(tk_compare_create(&c, TK_DTYPE_F32), TK_OK);
    tkt_expect_status(tk_compare_result(c, TK_COMPARE_MAX_ABS, &v), TK_ESTATE);
    cr_assert_eq(v, 7.0);
    tkt_expect_status(tk_compare_where(c, TK_WHERE_MAX_ABS, NULL, NULL, NULL, NULL),
                      TK_ESTATE);
    char buf[16] = "untouched";
    tkt_expect_status(tk_compare_format(c, buf, sizeof buf), TK_ESTATE);
    cr_assert_str_eq(buf, "untouched");
    tkt_expect_status(tk_compare_result(c, 9999, &v), TK_EINVAL);
    tk_compare_destroy(c);
}

Test(compare, run_rejects_shape_and_dtype_and_keeps_results)
{
    tk_compare *c;
    tk_matrix *a, *b, *i32;
    const float x[6] = {1, 2, 3, 4, 5, 6};
    cr_assert_eq(tk_compare_create(&c, TK_DTYPE_F32), TK_OK);
    cr_assert_eq(run_f32(c, 1, 2, x, x + 1), TK_EMISMATCH);
    cr_assert_eq(tk_matrix_from_f32(&a, TK_DTYPE_F32, 2, 3, x, 3), TK_OK);
    cr_assert_eq(tk_matrix_from_f32(&b, TK_DTYPE_F32, 3, 2, x, 2), TK_OK);
    cr_assert_eq(tk_matrix_create(&i32, TK_DTYPE_I32, 2, 3), TK_OK);
    tkt_expect_status(tk_compare_run(c, a, b), TK_ESHAPE);
    cr_assert(strstr(tk_last_error_message(), "2x3") != NULL &&
              strstr(tk_last_error_message(), "3x2") != NULL, "%s",
              tk_last_error_message());
    tkt_expect_status(tk_compare_run(c, a, i32), TK_EDTYPE);
    tkt_expect_status(tk_compare_run(c, NULL, a), TK_EINVAL);
    /* The earlier 1x2 result is still there. */
    cr_assert_eq(metric(c, TK_COMPARE_ELEMENTS), 2.0);
    cr_assert_eq(metric(c, TK_COMPARE_MISMATCHES), 2.0);
    tk_matrix_destroy(a);
    tk_matrix_destroy(b);
    tk_matrix_destroy(i32);
    tk_compare_destroy(c);
}

/* ---- metrics ------------------------------------------------------------ */

Test(compare, identical_matrices)
{
    float x[24];
    tkt_fill(x, 24, 11);
    x[0] = 0.0f;  /* the first non-zero reference gives the (zero) max rel */
    tk_compare *c;
    cr_assert_eq(tk_compare_create(&c, TK_DTYPE_F32), TK_OK);
    cr_assert_eq(run_f32(c, 4, 6, x, x), TK_OK);
    cr_assert_eq(metric(c, TK_COMPARE_ELEMENTS), 24.0);
    cr_assert_eq(metric(c, TK_COMPARE_MISMATCHES), 0.0);
    cr_assert_eq(metric(c, TK_COMPARE_MISMATCH_PERCENT), 0.0);
    cr_assert_eq(metric(c, TK_COMPARE_MAX_ABS), 0.0);
    cr_assert_eq(metric(c, TK_COMPARE_MAX_REL), 0.0);
    cr_assert_eq(metric(c, TK_COMPARE_MAX_ULP_SEEN), 0.0);
    cr_assert_eq(metric(c, TK_COMPARE_ULP_HIST_0), 24.0);
    cr_assert_eq(metric(c, TK_COMPARE_PASSED), 1.0);
    expect_where(c, TK_WHERE_MAX_ABS, 0, 0, x[0], x[0]);
    expect_where(c, TK_WHERE_MAX_REL, 0, 1, x[1], x[1]);
    tkt_expect_status(tk_compare_where(c, TK_WHERE_FIRST_MISMATCH, NULL, NULL, NULL,
                                       NULL), TK_ESTATE);
    tk_compare_destroy(c);
}

Test(compare, every_metric_on_a_known_matrix)
{
    /* Row 0: equal, 1 ULP, 2 ULP.  Row 1: a large error, a zero reference,
     * equal.  f32 defaults: atol 1e-5, rtol 1.3e-6. */
    const float two_up = nextafterf(2.0f, 4.0f);
    const float four_up2 = nextafterf(nextafterf(4.0f, 8.0f), 8.0f);
    const float e[6] = {1.0f, 2.0f, 4.0f, -8.0f, 0.0f, 0.5f};
    const float a[6] = {1.0f, two_up, four_up2, -7.5f, 1e-3f, 0.5f};
    tk_compare *c;
    cr_assert_eq(tk_compare_create(&c, TK_DTYPE_F32), TK_OK);
    tkt_expect_status(run_f32(c, 2, 3, a, e), TK_EMISMATCH);
    cr_assert(strstr(tk_last_error_message(), "(1, 0)") != NULL, "%s",
              tk_last_error_message());
    cr_assert_eq(metric(c, TK_COMPARE_ELEMENTS), 6.0);
    cr_assert_eq(metric(c, TK_COMPARE_MISMATCHES), 2.0);
    expect_bits_eq(metric(c, TK_COMPARE_MISMATCH_PERCENT), 100.0 * 2.0 / 6.0, "percent");
    expect_bits_eq(metric(c, TK_COMPARE_MAX_ABS), 0.5, "max abs");
    expect_bits_eq(metric(c, TK_COMPARE_MAX_REL), 0.5 / 8.0, "max rel");
    /* 0 versus 1e-3f is as many ULPs as 1e-3f has bit patterns above +0. */
    expect_bits_eq(metric(c, TK_COMPARE_MAX_ULP_SEEN), (double)tkt_bits(1e-3f), "ulp");
    cr_assert_eq(metric(c, TK_COMPARE_ULP_HIST_0), 2.0);
    cr_assert_eq(metric(c, TK_COMPARE_ULP_HIST_1), 1.0);
    cr_assert_eq(metric(c, TK_COMPARE_ULP_HIST_2), 1.0);
    cr_assert_eq(metric(c, TK_COMPARE_ULP_HIST_3PLUS), 2.0);
    cr_assert_eq(metric(c, TK_COMPARE_PASSED), 0.0);
    expect_where(c, TK_WHERE_MAX_ABS, 1, 0, -7.5f, -8.0f);
    expect_where(c, TK_WHERE_MAX_REL, 1, 0, -7.5f, -8.0f);
    expect_where(c, TK_WHERE_MAX_ULP, 1, 1, 1e-3f, 0.0f);
    expect_where(c, TK_WHERE_FIRST_MISMATCH, 1, 0, -7.5f, -8.0f);
    /* NULL outputs are skipped. */
    int64_t col = -1;
    cr_assert_eq(tk_compare_where(c, TK_WHERE_MAX_ULP, NULL, &col, NULL, NULL), TK_OK);
    cr_assert_eq(col, 1);
    tkt_expect_status(tk_compare_where(c, 0, NULL, NULL, NULL, NULL), TK_EINVAL);
    tkt_expect_status(tk_compare_where(c, 5, NULL, NULL, NULL, NULL), TK_EINVAL);
    tk_compare_destroy(c);
}

Test(compare, ties_keep_the_first_position_and_the_boundary_passes)
{
    /* Two equal maxima: the first in row-major order is reported. */
    const float e[4] = {1.0f, 3.0f, 1.0f, 3.0f};
    const float a[4] = {1.0f, 3.5f, 1.0f, 3.5f};
    tk_compare *c;
    cr_assert_eq(tk_compare_create(&c, TK_DTYPE_F32), TK_OK);
    cr_assert_eq(tk_compare_set_tolerance(c, 0.5, 0.0), TK_OK);
    /* |a - e| equal to atol + rtol |e| is within tolerance. */
    cr_assert_eq(run_f32(c, 2, 2, a, e), TK_OK);
    expect_where(c, TK_WHERE_MAX_ABS, 0, 1, 3.5f, 3.0f);
    expect_where(c, TK_WHERE_MAX_REL, 0, 1, 3.5f, 3.0f);
    const float over[4] = {1.0f, nextafterf(3.5f, 4.0f), 1.0f, 3.0f};
    cr_assert_eq(run_f32(c, 2, 2, over, e), TK_EMISMATCH);
    cr_assert_eq(metric(c, TK_COMPARE_MISMATCHES), 1.0);
    /* A bf16 tie: 1 + 2^-8 rounds to even (1.0), so it is 0 bf16 ULPs from
     * 1.0 while its absolute difference is 2^-8. */
    tk_compare *b;
    const float te[2] = {1.0f, 1.0f}, ta[2] = {1.0f + 0x1p-8f, 1.0f + 0x1p-7f};
    cr_assert_eq(tk_compare_create(&b, TK_DTYPE_BF16), TK_OK);
    cr_assert_eq(run_f32(b, 1, 2, ta, te), TK_OK);
    cr_assert_eq(metric(b, TK_COMPARE_ULP_HIST_0), 1.0);
    cr_assert_eq(metric(b, TK_COMPARE_ULP_HIST_1), 1.0);
    expect_bits_eq(metric(b, TK_COMPARE_MAX_ABS), 0x1p-7, "bf16 max abs");
    expect_where(b, TK_WHERE_MAX_ULP, 0, 1, ta[1], 1.0f);
    tk_compare_destroy(b);
    tk_compare_destroy(c);
}

Test(compare, nan_policies)
{
    const float e[4] = {NAN, 1.0f, NAN, 2.0f};
    const float a[4] = {NAN, NAN, 5.0f, 2.5f};
    tk_compare *c;
    cr_assert_eq(tk_compare_create(&c, TK_DTYPE_F32), TK_OK);
    /* match (default): the shared NaN matches; the two one-sided NaNs and
     * the 0.5 error do not; NaNs never enter the maxima. */
    cr_assert_eq(run_f32(c, 1, 4, a, e), TK_EMISMATCH);
    cr_assert_eq(metric(c, TK_COMPARE_ELEMENTS), 4.0);
    cr_assert_eq(metric(c, TK_COMPARE_MISMATCHES), 3.0);
    cr_assert_eq(metric(c, TK_COMPARE_ULP_HIST_0), 1.0);
    cr_assert_eq(metric(c, TK_COMPARE_ULP_HIST_3PLUS), 3.0);
    expect_bits_eq(metric(c, TK_COMPARE_MAX_ABS), 0.5, "max abs");
    expect_where(c, TK_WHERE_MAX_ABS, 0, 3, 2.5f, 2.0f);
    int64_t col;
    cr_assert_eq(tk_compare_where(c, TK_WHERE_FIRST_MISMATCH, NULL, &col, NULL, NULL),
                 TK_OK);
    cr_assert_eq(col, 1);
    /* any: NaN never equals NaN. */
    cr_assert_eq(tk_compare_set(c, TK_COMPARE_NAN_POLICY, TK_NAN_ANY), TK_OK);
    cr_assert_eq(run_f32(c, 1, 4, a, e), TK_EMISMATCH);
    cr_assert_eq(metric(c, TK_COMPARE_MISMATCHES), 4.0);
    cr_assert_eq(tk_compare_where(c, TK_WHERE_FIRST_MISMATCH, NULL, &col, NULL, NULL),
                 TK_OK);
    cr_assert_eq(col, 0);
    /* ignore: NaN positions are skipped entirely. */
    cr_assert_eq(tk_compare_set(c, TK_COMPARE_NAN_POLICY, TK_NAN_IGNORE), TK_OK);
    cr_assert_eq(tk_compare_set_tolerance(c, 0.5, 0.0), TK_OK);
    cr_assert_eq(run_f32(c, 1, 4, a, e), TK_OK);
    cr_assert_eq(metric(c, TK_COMPARE_ELEMENTS), 1.0);
    cr_assert_eq(metric(c, TK_COMPARE_MISMATCHES), 0.0);
    tk_compare_destroy(c);
}

Test(compare, infinities_must_match_in_sign_and_position)
{
    const float e[4] = {INFINITY, -INFINITY, INFINITY, FLT_MAX};
    tk_compare *c;
    cr_assert_eq(tk_compare_create(&c, TK_DTYPE_F32), TK_OK);
    /* No tolerance admits a wrong Inf. */
    cr_assert_eq(tk_compare_set_tolerance(c, 1e300, 1e300), TK_OK);
    cr_assert_eq(run_f32(c, 1, 4, e, e), TK_OK);
    cr_assert_eq(metric(c, TK_COMPARE_MAX_ABS), 0.0);
    cr_assert_eq(metric(c, TK_COMPARE_MAX_REL), 0.0);
    const float a[4] = {INFINITY, INFINITY, FLT_MAX, INFINITY};
    cr_assert_eq(run_f32(c, 1, 4, a, e), TK_EMISMATCH);
    cr_assert_eq(metric(c, TK_COMPARE_MISMATCHES), 3.0);
    cr_assert(isinf(metric(c, TK_COMPARE_MAX_ABS)));
    cr_assert(isinf(metric(c, TK_COMPARE_MAX_REL)));
    expect_where(c, TK_WHERE_FIRST_MISMATCH, 0, 1, INFINITY, -INFINITY);
    expect_where(c, TK_WHERE_MAX_ABS, 0, 1, INFINITY, -INFINITY);
    tk_compare_destroy(c);
}

Test(compare, signed_zeros_are_equal_and_excluded_from_rel)
{
    const float e[3] = {0.0f, -0.0f, -0.0f}, a[3] = {-0.0f, 0.0f, -0.0f};
    tk_compare *c;
    cr_assert_eq(tk_compare_create(&c, TK_DTYPE_BF16), TK_OK);
    cr_assert_eq(tk_compare_set(c, TK_COMPARE_MAX_ULP, 0), TK_OK);
    cr_assert_eq(tk_compare_set_tolerance(c, 0.0, 0.0), TK_OK);
    cr_assert_eq(run_f32(c, 1, 3, a, e), TK_OK);
    cr_assert_eq(metric(c, TK_COMPARE_ULP_HIST_0), 3.0);
    cr_assert_eq(metric(c, TK_COMPARE_MAX_REL), 0.0);
    tkt_expect_status(tk_compare_where(c, TK_WHERE_MAX_REL, NULL, NULL, NULL, NULL),
                      TK_ESTATE);
    tk_compare_destroy(c);
}

Test(compare, subnormals_count_ulps_through_zero)
{
    const float tiny = 0x1p-149f;  /* the smallest subnormal */
    const float e[3] = {0.0f, tiny, tiny}, a[3] = {tiny, 2 * tiny, -tiny};
    tk_compare *c;
    cr_assert_eq(tk_compare_create(&c, TK_DTYPE_F32), TK_OK);
    cr_assert_eq(tk_compare_set_tolerance(c, 0.0, 0.0), TK_OK);
    cr_assert_eq(run_f32(c, 1, 3, a, e), TK_EMISMATCH);
    cr_assert_eq(metric(c, TK_COMPARE_MISMATCHES), 3.0);
    cr_assert_eq(metric(c, TK_COMPARE_ULP_HIST_1), 2.0);
    cr_assert_eq(metric(c, TK_COMPARE_ULP_HIST_2), 1.0);
    cr_assert_eq(metric(c, TK_COMPARE_MAX_ULP_SEEN), 2.0);
    expect_bits_eq(metric(c, TK_COMPARE_MAX_ABS), 0x1p-148, "max abs");
    expect_bits_eq(metric(c, TK_COMPARE_MAX_REL), 2.0, "max rel");
    expect_where(c, TK_WHERE_MAX_ULP, 0, 2, -tiny, tiny);
    /* The default atol (1e-5) admits all of them. */
    cr_assert_eq(tk_compare_set_tolerance(c, 1e-5, 1.3e-6), TK_OK);
    cr_assert_eq(run_f32(c, 1, 3, a, e), TK_OK);
    tk_compare_destroy(c);
}

Test(compare, largest_finite_values)
{
    const float below = nextafterf(FLT_MAX, 0.0f);
    const float e[2] = {FLT_MAX, FLT_MAX}, a[2] = {below, -FLT_MAX};
    tk_compare *c;
    cr_assert_eq(tk_compare_create(&c, TK_DTYPE_F32), TK_OK);
    /* One ULP at the top of the range is 2^104, well within rtol. */
    cr_assert_eq(run_f32(c, 1, 1, a, e), TK_OK);
    expect_bits_eq(metric(c, TK_COMPARE_MAX_ABS), 0x1p104, "max abs");
    expect_bits_eq(metric(c, TK_COMPARE_MAX_REL), 0x1p104 / (double)FLT_MAX, "max rel");
    cr_assert_eq(metric(c, TK_COMPARE_MAX_ULP_SEEN), 1.0);
    /* Opposite extremes: the f32 difference overflows to Inf; the ULP
     * distance crosses the whole line. */
    cr_assert_eq(run_f32(c, 1, 2, a, e), TK_EMISMATCH);
    cr_assert(isinf(metric(c, TK_COMPARE_MAX_ABS)));
    expect_bits_eq(metric(c, TK_COMPARE_MAX_ULP_SEEN), 2.0 * tkt_bits(FLT_MAX), "ulp");
    expect_where(c, TK_WHERE_MAX_ABS, 0, 1, -FLT_MAX, FLT_MAX);
    tk_compare_destroy(c);
}

Test(compare, ulp_criterion_applies_with_atol_and_rtol)
{
    const float e[3] = {1.0f, 1.0f, 1.0f};
    const float a[3] = {1.0f, nextafterf(1.0f, 2.0f),
                        nextafterf(nextafterf(1.0f, 2.0f), 2.0f)};
    tk_compare *c;
    cr_assert_eq(tk_compare_create(&c, TK_DTYPE_F32), TK_OK);
    cr_assert_eq(tk_compare_set_tolerance(c, 1.0, 1.0), TK_OK);
    cr_assert_eq(run_f32(c, 1, 3, a, e), TK_OK);
    cr_assert_eq(tk_compare_set(c, TK_COMPARE_MAX_ULP, 1), TK_OK);
    cr_assert_eq(run_f32(c, 1, 3, a, e), TK_EMISMATCH);
    cr_assert_eq(metric(c, TK_COMPARE_MISMATCHES), 1.0);
    expect_where(c, TK_WHERE_FIRST_MISMATCH, 0, 2, a[2], 1.0f);
    tk_compare_destroy(c);
}

Test(compare, bf16_actual_against_f32_expected)
{
    /* ULPs are counted in the handle's dtype: 1.0 and 1 + 2^-7 are adjacent
     * bf16 values, while the f32 expected 1 + 2^-9 rounds to 1.0. */
    const float e[2] = {1.0f + 0x1p-9f, 3.0f};
    const float src[2] = {1.0f + 0x1p-7f, 3.0f};
    tk_matrix *a, *x;
    tk_compare *c;
    cr_assert_eq(tk_matrix_from_f32(&a, TK_DTYPE_BF16, 1, 2, src, 2), TK_OK);
    cr_assert_eq(tk_matrix_from_f32(&x, TK_DTYPE_F32, 1, 2, e, 2), TK_OK);
    cr_assert_eq(tk_compare_create(&c, TK_DTYPE_BF16), TK_OK);
    cr_assert_eq(tk_compare_run(c, a, x), TK_OK);
    cr_assert_eq(metric(c, TK_COMPARE_MAX_ULP_SEEN), 1.0);
    expect_bits_eq(metric(c, TK_COMPARE_MAX_ABS), (double)(0x1p-7f - 0x1p-9f), "abs");
    char text[1024];
    cr_assert_eq(tk_compare_format(c, text, sizeof text), TK_OK);
    /* Each value's bits are shown in its own matrix's dtype. */
    cr_assert(strstr(text, "actual 1.0078125 (0x3f81)") != NULL, "%s", text);
    cr_assert(strstr(text, "expected 1.001953125 (0x3f804000)") != NULL, "%s", text);
    tk_matrix_destroy(a);
    tk_matrix_destroy(x);
    tk_compare_destroy(c);
}

Test(compare, format_states_verdict_tolerance_and_positions)
{
    const float e[2] = {1.0f, 2.0f}, a[2] = {1.0f, 2.5f};
    tk_compare *c;
    char text[1024];
    cr_assert_eq(tk_compare_create(&c, TK_DTYPE_F32), TK_OK);
    cr_assert_eq(run_f32(c, 1, 2, a, e), TK_EMISMATCH);
    cr_assert_eq(tk_compare_format(c, text, sizeof text), TK_OK);
    const char *want[] = {
        "verdict: FAIL, 1 of 2 elements (50.0%) outside tolerance",
        "atol 1e-05 rtol 1.3e-06 (torch.testing default for float32)",
        "NaN policy match",
        "max abs diff 0.5 at (0, 1): actual 2.5 (0x40200000), expected 2.0 (0x40000000)",
        "first mismatch at (0, 1)",
        "ULP histogram (float32): 0: 1, 1: 0, 2: 0, 3+: 1"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_assert(strstr(text, want[i]) != NULL, "missing \"%s\" in:\n%s", want[i], text);
    /* Too small a buffer: TK_ERANGE naming the size, buffer untouched. */
    char small[8] = "keep";
    tkt_expect_status(tk_compare_format(c, small, sizeof small), TK_ERANGE);
    cr_assert_str_eq(small, "keep");
    size_t need = strlen(text) + 1;
    char need_text[32];
    snprintf(need_text, sizeof need_text, "%zu bytes", need);
    cr_assert(strstr(tk_last_error_message(), need_text) != NULL, "%s",
              tk_last_error_message());
    cr_assert_eq(tk_compare_format(c, small, need - 1), TK_ERANGE);
    char *exact = malloc(need);
    cr_assert_eq(tk_compare_format(c, exact, need), TK_OK);
    cr_assert_str_eq(exact, text);
    free(exact);
    tk_compare_destroy(c);
}

Test(compare, wide_rows_agree_with_a_scalar_recount)
{
    /* Many rows, every kind of element mixed in: the counts must equal a
     * plain recount done here. */
    enum { R = 33, C = 97, N = R * C };
    static float e[N], a[N];
    tkt_fill(e, N, 3);
    tkt_fill(a, N, 3);
    uint64_t s = 99;
    for (int i = 0; i < N; i++) {
        uint64_t pick = tkt_next(&s) % 8;
        if (pick == 0)
            a[i] = nextafterf(a[i], 10.0f);
        else if (pick == 1)
            a[i] += 1e-3f;
    }
    a[5 * C + 7] = NAN;
    a[9 * C + 1] = e[9 * C + 1] = -INFINITY;
    tk_compare *c;
    cr_assert_eq(tk_compare_create(&c, TK_DTYPE_F32), TK_OK);
    cr_assert_eq(run_f32(c, R, C, a, e), TK_EMISMATCH);
    int64_t mism = 0, hist[4] = {0};
    float max_abs = 0.0f;
    for (int i = 0; i < N; i++) {
        if (isnan(a[i]) || isinf(e[i])) {
            mism += isnan(a[i]);
            hist[isnan(a[i]) ? 3 : 0]++;
            continue;
        }
        float d = fabsf(a[i] - e[i]);
        mism += (double)d > 1e-5 + 1.3e-6 * fabs((double)e[i]);
        max_abs = d > max_abs ? d : max_abs;
        uint64_t u = tk_ulp_distance(TK_DTYPE_F32, a[i], e[i]);
        hist[u < 3 ? u : 3]++;
    }
    cr_assert_eq(metric(c, TK_COMPARE_MISMATCHES), (double)mism);
    expect_bits_eq(metric(c, TK_COMPARE_MAX_ABS), max_abs, "max abs");
    for (int h = 0; h < 4; h++)
        cr_assert_eq(metric(c, TK_COMPARE_ULP_HIST_0 + h), (double)hist[h], "hist %d", h);
    tk_compare_destroy(c);
}

/* Rows of finite values that differ take a vector pass with ULP
 * statistics; every metric and every position must be what a plain
 * element-by-element pass in row-major order gives: zeros of both signs and
 * zero references, subnormals, a difference that overflows, ties, and a
 * ULP criterion beside atol and rtol. */
Test(compare, differing_finite_rows_agree_with_an_element_by_element_pass)
{
    enum { R = 24, C = 131, N = R * C };
    static float e[N], a[N];
    uint64_t s = 5;
    tkt_fill(e, N, 11);
    for (int i = 0; i < N; i++) {
        a[i] = e[i];
        switch (tkt_next(&s) % 10) {
        case 0: a[i] = nextafterf(e[i], INFINITY); break;
        case 1: a[i] = nextafterf(nextafterf(e[i], -INFINITY), -INFINITY); break;
        case 2: e[i] = 0.0f; a[i] = (tkt_next(&s) & 1) ? -0.0f : 1e-7f; break;
        case 3: a[i] = e[i] * 1.01f; break;
        case 4: e[i] = 0x1p-140f; a[i] = -0x1p-145f; break;
        default: break;
        }
    }
    a[3 * C + 4] = FLT_MAX, e[3 * C + 4] = -FLT_MAX;   /* |a - e| overflows */
    a[7 * C + 9] = 3.0f, e[7 * C + 9] = 1.0f;          /* rel 2: ties below */
    a[9 * C + 2] = 6.0f, e[9 * C + 2] = 2.0f;
    for (int crit = 0; crit < 2; crit++) {
        tk_compare *c;
        cr_assert_eq(tk_compare_create(&c, TK_DTYPE_F32), TK_OK);
        if (crit)
            cr_assert_eq(tk_compare_set(c, TK_COMPARE_MAX_ULP, 1), TK_OK);
        run_f32(c, R, C, a, e);
        int64_t mism = 0, hist[4] = {0}, first = -1, at_abs = -1, at_rel = -1, at_ulp = -1;
        float max_abs = -1.0f;
        double max_rel = -1.0;
        uint64_t max_ulp = 0;
        for (int i = 0; i < N; i++) {
            float d = a[i] == e[i] ? 0.0f : fabsf(a[i] - e[i]);
            uint64_t u = tk_ulp_distance(TK_DTYPE_F32, a[i], e[i]);
            bool bad = (double)d > 1e-5 + 1.3e-6 * fabs((double)e[i]) || (crit && u > 1);
            if (bad && mism++ == 0)
                first = i;
            hist[u < 3 ? u : 3]++;
            if (d > max_abs)
                max_abs = d, at_abs = i;
            if (e[i] != 0.0f && (double)d / fabs((double)e[i]) > max_rel)
                max_rel = (double)d / fabs((double)e[i]), at_rel = i;
            if (at_ulp < 0 || u > max_ulp)
                max_ulp = u, at_ulp = i;
        }
        cr_assert_eq(metric(c, TK_COMPARE_ELEMENTS), (double)N);
        cr_assert_eq(metric(c, TK_COMPARE_MISMATCHES), (double)mism);
        for (int h = 0; h < 4; h++)
            cr_assert_eq(metric(c, TK_COMPARE_ULP_HIST_0 + h), (double)hist[h], "hist %d", h);
        expect_bits_eq(metric(c, TK_COMPARE_MAX_ABS), max_abs, "max abs");
        expect_bits_eq(metric(c, TK_COMPARE_MAX_REL), max_rel, "max rel");
        cr_assert_eq(metric(c, TK_COMPARE_MAX_ULP_SEEN), (double)max_ulp);
        expect_where(c, TK_WHERE_FIRST_MISMATCH, first / C, first % C, a[first], e[first]);
        expect_where(c, TK_WHERE_MAX_ABS, at_abs / C, at_abs % C, a[at_abs], e[at_abs]);
        expect_where(c, TK_WHERE_MAX_REL, at_rel / C, at_rel % C, a[at_rel], e[at_rel]);
        expect_where(c, TK_WHERE_MAX_ULP, at_ulp / C, at_ulp % C, a[at_ulp], e[at_ulp]);
        cr_assert_eq(at_abs, 3 * C + 4, "the overflowing difference is the largest");
        tk_compare_destroy(c);
    }
}

/* Every setting changed after a run retires its results (the verdict was
 * reached under the old ones); a refused setting keeps them. */
Test(compare, a_new_setting_retires_the_results)
{
    tk_compare *c;
    const float x[2] = {1, 2};
    double v;
    cr_assert_eq(tk_compare_create(&c, TK_DTYPE_F32), TK_OK);
    cr_assert_eq(run_f32(c, 1, 2, x, x), TK_OK);
    tkt_expect_status(tk_compare_set(c, TK_COMPARE_MAX_ULP, -5), TK_ERANGE);
    cr_assert(strstr(tk_last_error_message(), "TK_COMPARE_MAX_ULP = -5 is outside [-1, "),
              "%s", tk_last_error_message());
    tkt_expect_status(tk_compare_set_tolerance(c, -1.0, 0.0), TK_ERANGE);
    cr_assert_eq(metric(c, TK_COMPARE_PASSED), 1.0);
    tkt_expect_status(tk_compare_set(c, TK_COMPARE_MAX_ULP, 0), TK_OK);
    tkt_expect_status(tk_compare_result(c, TK_COMPARE_PASSED, &v), TK_ESTATE);
    cr_assert_eq(run_f32(c, 1, 2, x, x), TK_OK);
    tkt_expect_status(tk_compare_set_tolerance(c, 0.0, 0.0), TK_OK);
    tkt_expect_status(tk_compare_result(c, TK_COMPARE_PASSED, &v), TK_ESTATE);
    tk_compare_destroy(c);
}
