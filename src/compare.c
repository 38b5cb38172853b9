/* compare.c - tk_compare: actual versus expected with an explicit tolerance. */
#include "internal.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tk_compare {
    int dtype;
    double atol, rtol;
    int64_t max_ulp;
    int nan_policy;
    bool ran;
    int actual_dtype, expected_dtype;  /* of the last run, for hex bits */
    tk__cmp res;
};

/* torch.testing.assert_close's defaults for f32, bf16 and f16; torch has
 * none for fp8, which gets one ULP at 1.0 (2^-mantissa bits) relative and
 * half its smallest subnormal absolute. */
void tk__tolerance_default(int dtype, double *atol, double *rtol)
{
    *atol = 1e-5;
    switch (dtype) {
    case TK_DTYPE_BF16: *rtol = 1.6e-2; break;
    case TK_DTYPE_F16: *rtol = 1e-3; break;
    case TK_DTYPE_F8E4M3FN: *rtol = 0x1p-3; *atol = 0x1p-10; break;
    case TK_DTYPE_F8E5M2: *rtol = 0x1p-2; *atol = 0x1p-17; break;
    default: *rtol = 1.3e-6; break;
    }
}

void tk__cmp_init(tk__cmp *s, int dtype, double atol, double rtol,
                  int64_t max_ulp, int nan_policy, bool want_ulp)
{
    memset(s, 0, sizeof *s);
    s->dtype = dtype;
    s->atol = atol;
    s->rtol = rtol;
    s->max_ulp = max_ulp;
    s->nan_policy = nan_policy;
    s->want_ulp = want_ulp || max_ulp >= 0;
    s->max_abs = -1.0f;
    s->max_rel = -1.0;
}

static void tk__mark(tk__where *w, int64_t r, int64_t c, float a, float e)
{
    *w = (tk__where){r, c, a, e, true};
}

static void tk__mismatch(tk__cmp *s, int64_t r, int64_t c, float a, float e)
{
    if (s->mismatches++ == 0)
        tk__mark(&s->where[TK_WHERE_FIRST_MISMATCH - 1], r, c, a, e);
}

static void tk__hist(tk__cmp *s, uint64_t ulp)
{
    s->hist[ulp < 3 ? ulp : 3]++;
}

/* The exact tolerance test. */
static bool tk__beyond(const tk__cmp *s, float d, float ae)
{
    return (double)d > s->atol + s->rtol * (double)ae;
}

/* Any element: the NaN policy and the Inf rule, then the tolerance. */
static void tk__cmp_one(tk__cmp *s, int64_t r, int64_t c, float a, float e)
{
    bool an = isnan(a), en = isnan(e);
    if (an || en) {
        if (s->nan_policy == TK_NAN_IGNORE)
            return;
        s->elements++;
        /* Both NaN matches only under TK_NAN_MATCH. */
        if (an && en && s->nan_policy == TK_NAN_MATCH) {
            if (s->want_ulp)
                tk__hist(s, 0);
        } else {
            if (s->want_ulp)
                tk__hist(s, 3);
            tk__mismatch(s, r, c, a, e);
        }
        return;
    }
    s->elements++;
    float ae = fabsf(e);
    float d = a == e ? 0.0f : fabsf(a - e);  /* Inf == Inf: no difference */
    bool bad;
    if (isinf(a) || isinf(e))
        bad = a != e;  /* Inf must match in sign and position */
    else
        bad = tk__beyond(s, d, ae);
    if (d > s->max_abs) {
        s->max_abs = d;
        tk__mark(&s->where[TK_WHERE_MAX_ABS - 1], r, c, a, e);
    }
    if (ae != 0.0f) {
        double rel = isinf(e) ? (d == 0.0f ? 0.0 : INFINITY) : (double)d / (double)ae;
        if (rel > s->max_rel) {
            s->max_rel = rel;
            tk__mark(&s->where[TK_WHERE_MAX_REL - 1], r, c, a, e);
        }
    }
    if (s->want_ulp) {
        uint64_t u = a == e ? 0 : tk_ulp_distance(s->dtype, a, e);
        tk__hist(s, u);
        if (u > s->max_ulp_seen || !s->where[TK_WHERE_MAX_ULP - 1].set) {
            s->max_ulp_seen = u;
            tk__mark(&s->where[TK_WHERE_MAX_ULP - 1], r, c, a, e);
        }
        if (s->max_ulp >= 0 && u > (uint64_t)s->max_ulp)
            bad = true;
    }
    if (bad)
        tk__mismatch(s, r, c, a, e);
}

/* A row whose elements are all finite and bitwise equal: only the
 * first-seen positions of the (zero) maxima and the histogram change. */
static void tk__cmp_equal_row(tk__cmp *s, int64_t r, int64_t c0, int64_t n,
                              const float *a, const float *e)
{
    s->elements += n;
    if (!s->where[TK_WHERE_MAX_ABS - 1].set) {
        s->max_abs = 0.0f;
        tk__mark(&s->where[TK_WHERE_MAX_ABS - 1], r, c0, a[0], e[0]);
    }
    if (!s->where[TK_WHERE_MAX_REL - 1].set)
        for (int64_t c = 0; c < n; c++)
            if (e[c] != 0.0f) {
                s->max_rel = 0.0;
                tk__mark(&s->where[TK_WHERE_MAX_REL - 1], r, c0 + c, a[c], e[c]);
                break;
            }
    if (s->want_ulp) {
        s->hist[0] += n;
        if (!s->where[TK_WHERE_MAX_ULP - 1].set)
            tk__mark(&s->where[TK_WHERE_MAX_ULP - 1], r, c0, a[0], e[0]);
    }
}

/* A row compared with itself under TK_NAN_MATCH: every element matches
 * (NaN too, Inf has no difference), so the counts grow by n and only the
 * maxima's first positions are left to find: the first non-NaN element,
 * and the first non-zero one for the relative maximum. */
static void tk__cmp_self_row(tk__cmp *s, int64_t r, int64_t c0, int64_t n,
                             const float *v)
{
    tk__where *abs = &s->where[TK_WHERE_MAX_ABS - 1];
    tk__where *rel = &s->where[TK_WHERE_MAX_REL - 1];
    s->elements += n;
    if (s->want_ulp)
        s->hist[0] += n;
    for (int64_t c = 0; c < n && !(abs->set && rel->set); c++) {
        if (isnan(v[c]))
            continue;
        if (!abs->set) {
            s->max_abs = 0.0f;
            tk__mark(abs, r, c0 + c, v[c], v[c]);
            if (s->want_ulp)
                tk__mark(&s->where[TK_WHERE_MAX_ULP - 1], r, c0 + c, v[c], v[c]);
        }
        if (!rel->set && v[c] != 0.0f) {
            s->max_rel = 0.0;
            tk__mark(rel, r, c0 + c, v[c], v[c]);
        }
    }
}

/* The screen's float bounds for s as it stands (tk__cmp_screened_row). */
void tk__screen_of(const tk__cmp *s, tk__screen *sc)
{
    const float up = 1.0f + 0x1p-20f, down = 1.0f - 0x1p-20f;
    /* Tolerances outside float's normal range get no screen. */
    sc->screen = s->atol <= 1e30 && s->rtol <= 1e30 && (s->atol == 0.0 || s->atol >= 1e-30) &&
                 (s->rtol == 0.0 || s->rtol >= 1e-30);
    const float atf = sc->screen ? (float)s->atol : 0.0f;
    const float rtf = sc->screen ? (float)s->rtol : 0.0f;
    sc->ahi = atf * up + FLT_MIN, sc->rhi = rtf * up;
    sc->alo = atf * down - FLT_MIN, sc->rlo = rtf * down;
    /* Nor does a maximum outside it: rows are rescanned until one is in it. */
    sc->rel_screen = s->max_rel >= 1e-30 && s->max_rel <= 1e30;
    sc->mrf = sc->rel_screen ? (float)s->max_rel * down : 0.0f;
}

/* The rest of a screened row, from its figures g. */
static inline bool tk__cmp_screened_end(tk__cmp *s, const tk__screened *g, int64_t r,
                                        int64_t c0, int64_t n, const float *a, const float *e)
{
    uint32_t top = g->top;
    int64_t bad = g->bad;
    if (top >= 0x7F800000u)
        return false;
    if (g->maybe) {
        bad = 0;
        for (int64_t c = 0; c < n; c++)
            bad += tk__beyond(s, fabsf(a[c] - e[c]), fabsf(e[c]));
    }
    s->elements += n;
    tk__where *w = &s->where[TK_WHERE_FIRST_MISMATCH - 1];
    if (bad && !w->set)
        for (int64_t c = 0; c < n; c++)
            if (tk__beyond(s, fabsf(a[c] - e[c]), fabsf(e[c]))) {
                tk__mark(w, r, c0 + c, a[c], e[c]);
                break;
            }
    s->mismatches += bad;
    w = &s->where[TK_WHERE_MAX_ABS - 1];
    if (!w->set || top > tk__f32_bits(s->max_abs))
        for (int64_t c = 0; c < n; c++)
            if (tk__f32_bits(fabsf(a[c] - e[c])) == top) {
                s->max_abs = fabsf(a[c] - e[c]);
                tk__mark(w, r, c0 + c, a[c], e[c]);
                break;
            }
    if (g->rel_candidates)
        for (int64_t c = 0; c < n; c++) {
            float d = fabsf(a[c] - e[c]), ae = fabsf(e[c]);
            double rel = (double)d / (double)ae;
            if (ae != 0.0f && rel > s->max_rel) {
                s->max_rel = rel;
                tk__mark(&s->where[TK_WHERE_MAX_REL - 1], r, c0 + c, a[c], e[c]);
            }
        }
    return true;
}

bool tk__cmp_screened_rest(tk__cmp *s, const tk__screened *g, int64_t r, int64_t c0, int64_t n,
                           const float *a, const float *e)
{
    return tk__cmp_screened_end(s, g, r, c0, n, a, e);
}

/* No ULP statistics: the gap's hot loop.  One branch-free pass in float
 * (the compiler vectorizes it) finds the row's largest difference and
 * screens the double-precision tests.  The tolerance atol + rtol|e| is
 * bracketed by float bounds lo(e) <= it <= hi(e), their coefficients
 * widened by 2^-20 relative and FLT_MIN absolute (far beyond the float
 * rounding), so a difference above hi is a mismatch, one below lo is not,
 * and only one in between needs the exact test.  Likewise a relative
 * difference can beat the maximum only where a widened float test says so.
 * Positions are then found by scanning only when needed.  Returns false,
 * changing nothing, when a difference is not finite (as it is wherever a
 * value is): the caller takes the general path.  Finite differences are
 * non-negative, so their bit patterns order like their values. */
static inline bool tk__cmp_screened_row(tk__cmp *s, int64_t r, int64_t c0, int64_t n,
                                        const float *a, const float *e)
{
    tk__screen sc;
    tk__screen_of(s, &sc);
    tk__screened g = {0, 0, !sc.screen, !sc.rel_screen};
    tk__screen_add(&sc, &g, n, a, e);
    return tk__cmp_screened_end(s, &g, r, c0, n, a, e);
}

/* With ULP statistics in float32, a row of finite values that differ (a
 * reduction's candidate against its oracle differs almost everywhere): one
 * branch-free pass gathers what tk__cmp_one would add up, and the
 * positions of the first mismatch and of the maxima that beat the running
 * ones are found by scanning for them.  Every test is tk__cmp_one's, in
 * the same arithmetic; float32 ULPs are differences of the sign-magnitude
 * encodings read as integers. */
static inline void tk__cmp_ulp_row(tk__cmp *s, int64_t r, int64_t c0, int64_t n,
                                   const float *a, const float *e)
{
    /* Two finite floats are under 2^32 ULPs apart: 32 bits hold a
     * distance and the limit, which keeps the loop in vector lanes. */
    const uint32_t limit = s->max_ulp >= 0 && s->max_ulp < UINT32_MAX ? (uint32_t)s->max_ulp
                                                                       : UINT32_MAX;
    int64_t h0 = 0, h1 = 0, h2 = 0, bad = 0;
    uint32_t top_u = 0, top_d = 0;
    int64_t top_rel = 0;   /* bits of a non-negative double order like it */
    /* Chunks short enough for 32-bit counts. */
    for (int64_t k0 = 0; k0 < n; k0 += 1 << 20) {
        int64_t k1 = n - k0 < (1 << 20) ? n : k0 + (1 << 20);
        int32_t n0 = 0, n1 = 0, n2 = 0, nb = 0;
        for (int64_t c = k0; c < k1; c++) {
            float d = fabsf(a[c] - e[c]), ae = fabsf(e[c]);
            uint32_t u = tk__f32_ulps(a[c], e[c]);
            n0 += u == 0;
            n1 += u == 1;
            n2 += u == 2;
            top_u = u > top_u ? u : top_u;
            top_d = tk__f32_bits(d) > top_d ? tk__f32_bits(d) : top_d;
            /* 0 where e is 0 (no division by zero, which would raise the
             * caller's flag): the scan below skips those elements.  Masks,
             * not ternaries, and a signed maximum (AVX2 has no unsigned
             * 64-bit one), keep the loop in vector lanes. */
            float den = tk__f32_value(tk__sel(ae != 0.0f, tk__f32_bits(ae), 0x3F800000u));
            int64_t rel = (int64_t)(tk__f64_bits((double)d / (double)den) &
                                    (0 - (uint64_t)(ae != 0.0f)));
            top_rel = rel > top_rel ? rel : top_rel;
            nb += tk__beyond(s, d, ae) | (u > limit);
        }
        h0 += n0, h1 += n1, h2 += n2, bad += nb;
    }
    tk__where *w = s->where;
    if (bad && !s->mismatches)
        for (int64_t c = 0; c < n; c++)
            if (tk__beyond(s, fabsf(a[c] - e[c]), fabsf(e[c])) ||
                tk__f32_ulps(a[c], e[c]) > limit) {
                tk__mark(&w[TK_WHERE_FIRST_MISMATCH - 1], r, c0 + c, a[c], e[c]);
                break;
            }
    if (tk__f32_value(top_d) > s->max_abs)
        for (int64_t c = 0; c < n; c++)
            if (tk__f32_bits(fabsf(a[c] - e[c])) == top_d) {
                s->max_abs = fabsf(a[c] - e[c]);
                tk__mark(&w[TK_WHERE_MAX_ABS - 1], r, c0 + c, a[c], e[c]);
                break;
            }
    double rel_max = tk__f64_value((uint64_t)top_rel);
    if (rel_max > s->max_rel)
        for (int64_t c = 0; c < n; c++)
            if (e[c] != 0.0f && (double)fabsf(a[c] - e[c]) / (double)fabsf(e[c]) == rel_max) {
                s->max_rel = rel_max;
                tk__mark(&w[TK_WHERE_MAX_REL - 1], r, c0 + c, a[c], e[c]);
                break;
            }
    if (top_u > s->max_ulp_seen || !w[TK_WHERE_MAX_ULP - 1].set)
        for (int64_t c = 0; c < n; c++)
            if (tk__f32_ulps(a[c], e[c]) == top_u) {
                s->max_ulp_seen = top_u;
                tk__mark(&w[TK_WHERE_MAX_ULP - 1], r, c0 + c, a[c], e[c]);
                break;
            }
    s->elements += n;
    s->mismatches += bad;
    s->hist[0] += h0;
    s->hist[1] += h1;
    s->hist[2] += h2;
    s->hist[3] += n - h0 - h1 - h2;
}

TK_DISPATCH(tk__cmp_block, (tk__cmp *s, int64_t row0, int64_t col0, int64_t rows, int64_t cols, const float *actual, const float *expected),
            (s, row0, col0, rows, cols, actual, expected))
{
    for (int64_t i = 0; i < rows; i++) {
        const float *a = actual + i * cols, *e = expected + i * cols;
        int64_t r = row0 + i;
        if (a == e && s->nan_policy == TK_NAN_MATCH) {
            tk__cmp_self_row(s, r, col0, cols, a);
            continue;
        }
        if (!s->want_ulp && a != e && tk__cmp_screened_row(s, r, col0, cols, a, e))
            continue;
        /* Classify the row in one branch-free pass: non-finite values take
         * the general path, bitwise identical rows the cheapest one. */
        uint32_t nonfinite = 0, differ = 0;
        if (a == e)
            for (int64_t c = 0; c < cols; c++)
                nonfinite |= (tk__f32_bits(a[c]) & 0x7F800000u) == 0x7F800000u;
        else
            for (int64_t c = 0; c < cols; c++) {
                uint32_t ua = tk__f32_bits(a[c]), ue = tk__f32_bits(e[c]);
                nonfinite |= (ua & 0x7F800000u) == 0x7F800000u;
                nonfinite |= (ue & 0x7F800000u) == 0x7F800000u;
                differ |= ua ^ ue;
            }
        if (!nonfinite && !differ)
            tk__cmp_equal_row(s, r, col0, cols, a, e);
        else if (!nonfinite && s->want_ulp && s->dtype == TK_DTYPE_F32)
            tk__cmp_ulp_row(s, r, col0, cols, a, e);
        else
            for (int64_t c = 0; c < cols; c++)
                tk__cmp_one(s, r, col0 + c, a[c], e[c]);
    }
}

void tk__cmp_merge(tk__cmp *into, const tk__cmp *later)
{
    tk__where *w = into->where;
    const tk__where *v = later->where;
    if (!into->mismatches)
        w[TK_WHERE_FIRST_MISMATCH - 1] = v[TK_WHERE_FIRST_MISMATCH - 1];
    /* Strictly greater wins, as in tk__cmp_one: a tie keeps the earlier. */
    if (later->max_abs > into->max_abs) {
        into->max_abs = later->max_abs;
        w[TK_WHERE_MAX_ABS - 1] = v[TK_WHERE_MAX_ABS - 1];
    }
    if (later->max_rel > into->max_rel) {
        into->max_rel = later->max_rel;
        w[TK_WHERE_MAX_REL - 1] = v[TK_WHERE_MAX_REL - 1];
    }
    if (v[TK_WHERE_MAX_ULP - 1].set &&
        (!w[TK_WHERE_MAX_ULP - 1].set || later->max_ulp_seen > into->max_ulp_seen)) {
        into->max_ulp_seen = later->max_ulp_seen;
        w[TK_WHERE_MAX_ULP - 1] = v[TK_WHERE_MAX_ULP - 1];
    }
    into->elements += later->elements;
    into->mismatches += later->mismatches;
    for (int i = 0; i < 4; i++)
        into->hist[i] += later->hist[i];
}

/* TK_DISPATCH functions are static: this is the comparison pass's entry. */
void tk__cmp_rows(tk__cmp *s, int64_t row0, int64_t col0, int64_t rows,
                  int64_t cols, const float *actual, const float *expected)
{
    tk__cmp_block(s, row0, col0, rows, cols, actual, expected);
}

/* ---- the public handle ------------------------------------------------- */

int tk_compare_create(tk_compare **out, int dtype)
{
    if (!out)
        return tk__fail(TK_EINVAL, "tk_compare_create: out is NULL");
    *out = NULL;
    if (!tk__is_float_dtype(dtype))
        return tk__fail(TK_EDTYPE, "tk_compare_create: dtype %d (%s) is not "
                        TK__FLOAT_DTYPES, dtype,
                        tk__dtype_label(dtype));
    tk_compare *c = calloc(1, sizeof *c);
    if (!c)
        return tk__fail(TK_ENOMEM, "tk_compare_create: out of memory");
    c->dtype = dtype;
    tk__tolerance_default(dtype, &c->atol, &c->rtol);
    c->max_ulp = -1;
    c->nan_policy = TK_NAN_MATCH;
    *out = c;
    return TK_OK;
}

void tk_compare_destroy(tk_compare *c) { free(c); }

static bool tk__compare_param(int param)
{
    return param == TK_COMPARE_MAX_ULP || param == TK_COMPARE_NAN_POLICY;
}

static void tk__compare_store(void *h, int param, int64_t value)
{
    tk_compare *c = h;
    if (param == TK_COMPARE_MAX_ULP)
        c->max_ulp = value;
    else
        c->nan_policy = (int)value;
}

int tk_compare_set(tk_compare *c, int param, int64_t value)
{
    static const tk__settable s = {"tk_compare_set", "comparison", TK__COMPARE, NULL, NULL,
                                   tk__compare_store, offsetof(tk_compare, ran), NULL};
    return tk__param_set(&s, c, param, value);
}

int tk_compare_get(const tk_compare *c, int param, int64_t *value)
{
    if (!c || !value)
        return tk__fail(TK_EINVAL, "tk_compare_get: %s is NULL",
                        !c ? "handle" : "value");
    if (!tk__compare_param(param))
        return tk__fail(TK_EINVAL, "tk_compare_get: %d is not a tk_compare "
                        "parameter", param);
    *value = param == TK_COMPARE_MAX_ULP ? c->max_ulp : c->nan_policy;
    return TK_OK;
}

int tk_compare_set_tolerance(tk_compare *c, double atol, double rtol)
{
    if (!c)
        return tk__fail(TK_EINVAL, "tk_compare_set_tolerance: handle is NULL");
    if (!(atol >= 0.0 && atol <= DBL_MAX) || !(rtol >= 0.0 && rtol <= DBL_MAX))
        return tk__fail(TK_ERANGE, "tk_compare_set_tolerance: atol %g and rtol %g "
                        "must be finite and >= 0", atol, rtol);
    c->atol = atol;
    c->rtol = rtol;
    c->ran = false;  /* the verdict was reached under the old tolerance */
    return TK_OK;
}

int tk_compare_run(tk_compare *c, const tk_matrix *actual,
                   const tk_matrix *expected)
{
    if (!c || !actual || !expected)
        return tk__fail(TK_EINVAL, "tk_compare_run: %s is NULL",
                        !c ? "handle" : !actual ? "actual" : "expected");
    if (!tk__is_float_dtype(actual->dtype) || !tk__is_float_dtype(expected->dtype))
        return tk__fail(TK_EDTYPE, "tk_compare_run: actual is %s and expected is "
                        "%s; both must be " TK__FLOAT_DTYPES,
                        tk_dtype_name(actual->dtype), tk_dtype_name(expected->dtype));
    if (actual->rows != expected->rows || actual->cols != expected->cols)
        return tk__fail(TK_ESHAPE, "tk_compare_run: actual is %lldx%lld but "
                        "expected is %lldx%lld", (long long)actual->rows,
                        (long long)actual->cols, (long long)expected->rows,
                        (long long)expected->cols);
    size_t bytes;
    int rc = tk__bytes("tk_compare_run", 2, actual->cols, sizeof(float), &bytes);
    if (rc)
        return rc;
    float *a = tk__lines(bytes);
    if (!a)
        return tk__fail(TK_ENOMEM, "tk_compare_run: out of memory for %zu bytes",
                        bytes);
    float *e = a + actual->cols;
    tk__cmp s;
    tk__cmp_init(&s, c->dtype, c->atol, c->rtol, c->max_ulp, c->nan_policy, true);
    for (int64_t r = 0; r < actual->rows; r++) {
        tk__row_to_f32(actual->dtype, tk__row(actual, r), a, actual->cols);
        tk__row_to_f32(expected->dtype, tk__row(expected, r), e, actual->cols);
        tk__cmp_rows(&s, r, 0, 1, actual->cols, a, e);
    }
    free(a);
    c->res = s;
    c->actual_dtype = actual->dtype;
    c->expected_dtype = expected->dtype;
    c->ran = true;
    if (s.mismatches == 0)
        return TK_OK;
    const tk__where *w = &s.where[TK_WHERE_FIRST_MISMATCH - 1];
    return tk__fail(TK_EMISMATCH, "tk_compare_run: %lld of %lld elements differ "
                    "beyond atol %g rtol %g; first at (%lld, %lld): actual %.9g "
                    "expected %.9g", (long long)s.mismatches, (long long)s.elements,
                    c->atol, c->rtol, (long long)w->row, (long long)w->col,
                    (double)w->actual, (double)w->expected);
}

int tk_compare_result(const tk_compare *c, int metric, double *value)
{
    if (!c || !value)
        return tk__fail(TK_EINVAL, "tk_compare_result: %s is NULL",
                        !c ? "handle" : "value");
    if (metric == TK_COMPARE_ATOL || metric == TK_COMPARE_RTOL) {
        *value = metric == TK_COMPARE_ATOL ? c->atol : c->rtol;
        return TK_OK;
    }
    if (metric < TK_COMPARE_ELEMENTS || metric > TK_COMPARE_PASSED)
        return tk__fail(TK_EINVAL, "tk_compare_result: unknown metric %d", metric);
    if (!c->ran)
        return tk__fail(TK_ESTATE, "tk_compare_result: metric %d needs a "
                        "tk_compare_run first", metric);
    const tk__cmp *s = &c->res;
    double v;
    switch (metric) {
    case TK_COMPARE_ELEMENTS: v = (double)s->elements; break;
    case TK_COMPARE_MISMATCHES: v = (double)s->mismatches; break;
    case TK_COMPARE_MISMATCH_PERCENT:
        v = s->elements ? 100.0 * (double)s->mismatches / (double)s->elements : 0.0;
        break;
    case TK_COMPARE_MAX_ABS: v = s->max_abs > 0.0f ? s->max_abs : 0.0; break;
    case TK_COMPARE_MAX_REL: v = s->max_rel > 0.0 ? s->max_rel : 0.0; break;
    case TK_COMPARE_MAX_ULP_SEEN: v = (double)s->max_ulp_seen; break;
    case TK_COMPARE_PASSED: v = s->mismatches == 0; break;
    default: v = (double)s->hist[metric - TK_COMPARE_ULP_HIST_0]; break;
    }
    *value = v;
    return TK_OK;
}

int tk_compare_where(const tk_compare *c, int which, int64_t *row, int64_t *col,
                     float *actual, float *expected)
{
    if (!c)
        return tk__fail(TK_EINVAL, "tk_compare_where: handle is NULL");
    if (which < TK_WHERE_MAX_ABS || which > TK_WHERE_FIRST_MISMATCH)
        return tk__fail(TK_EINVAL, "tk_compare_where: unknown position %d", which);
    if (!c->ran)
        return tk__fail(TK_ESTATE, "tk_compare_where: needs a tk_compare_run first");
    const tk__where *w = &c->res.where[which - 1];
    static const char *const names[] = {"TK_WHERE_MAX_ABS", "TK_WHERE_MAX_REL",
                                        "TK_WHERE_MAX_ULP", "TK_WHERE_FIRST_MISMATCH"};
    if (!w->set)
        return tk__fail(TK_ESTATE, "tk_compare_where: no element has position %s "
                        "(%s)", names[which - 1],
                        which == TK_WHERE_FIRST_MISMATCH ? "no mismatch"
                        : which == TK_WHERE_MAX_REL ? "no non-zero, non-NaN reference"
                                                    : "no comparable element");
    if (row)
        *row = w->row;
    if (col)
        *col = w->col;
    if (actual)
        *actual = w->actual;
    if (expected)
        *expected = w->expected;
    return TK_OK;
}

/* "1.5 (0x3fc0)": the shortest decimal and the stored bits. */
static void tk__value_bits(char *buf, size_t size, int dtype, float v)
{
    char d[32];
    uint32_t u = tk__f32_bits(v);
    tk__repr(v, d);
    if (dtype == TK_DTYPE_BF16)
        snprintf(buf, size, "%s (0x%04x)", d, (unsigned)(u >> 16));
    else if (dtype == TK_DTYPE_F16)
        snprintf(buf, size, "%s (0x%04x)", d, (unsigned)tk__f16_from(v));
    else if (dtype == TK_DTYPE_F8E4M3FN)
        snprintf(buf, size, "%s (0x%02x)", d, (unsigned)tk__e4m3_from(v));
    else if (dtype == TK_DTYPE_F8E5M2)
        snprintf(buf, size, "%s (0x%02x)", d, (unsigned)tk__e5m2_from(v));
    else
        snprintf(buf, size, "%s (0x%08x)", d, (unsigned)u);
}

/* Append to buf like snprintf; *len counts what was wanted. */
static void tk__put(char *buf, size_t size, size_t *len, const char *fmt, ...)
    TK_PRINTF(4, 5);
static void tk__put(char *buf, size_t size, size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(*len < size ? buf + *len : NULL, *len < size ? size - *len : 0,
                      fmt, ap);
    va_end(ap);
    if (n > 0)
        *len += (size_t)n;
}

int tk_compare_format(const tk_compare *c, char *buf, size_t size)
{
    if (!c || !buf)
        return tk__fail(TK_EINVAL, "tk_compare_format: %s is NULL",
                        !c ? "handle" : "buf");
    if (!c->ran)
        return tk__fail(TK_ESTATE, "tk_compare_format: needs a tk_compare_run first");
    static const char *const nan_names[] = {"", "match", "any", "ignore"};
    static const char *const labels[] = {"max abs diff", "max rel diff",
                                         "max ULP", "first mismatch"};
    const tk__cmp *s = &c->res;
    char text[2048], num[2][32], av[48], ev[48];
    size_t len = 0;
    double dflt_atol, dflt_rtol, pct;
    tk__tolerance_default(c->dtype, &dflt_atol, &dflt_rtol);
    tk_compare_result(c, TK_COMPARE_MISMATCH_PERCENT, &pct);
    tk__repr(pct, num[0]);
    tk__put(text, sizeof text, &len, "verdict: %s, %lld of %lld elements "
            "(%s%%) outside tolerance\n", s->mismatches ? "FAIL" : "PASS",
            (long long)s->mismatches, (long long)s->elements, num[0]);
    tk__repr(c->atol, num[0]);
    tk__repr(c->rtol, num[1]);
    bool fp8 = c->dtype == TK_DTYPE_F8E4M3FN || c->dtype == TK_DTYPE_F8E5M2;
    tk__put(text, sizeof text, &len, "tolerance: atol %s rtol %s%s", num[0], num[1],
            c->atol != dflt_atol || c->rtol != dflt_rtol ? ""
            : fp8 ? " (tilekern's default for " : " (torch.testing default for ");
    if (c->atol == dflt_atol && c->rtol == dflt_rtol)   /* torch has none for fp8 */
        tk__put(text, sizeof text, &len, "%s)", tk_dtype_name(c->dtype));
    if (c->max_ulp >= 0)
        tk__put(text, sizeof text, &len, ", max ULP %lld", (long long)c->max_ulp);
    else
        tk__put(text, sizeof text, &len, ", no ULP criterion");
    tk__put(text, sizeof text, &len, ", NaN policy %s\n", nan_names[c->nan_policy]);
    for (int i = 0; i < 4; i++) {
        const tk__where *w = &s->where[i];
        double v;
        if (i < 3) {
            tk_compare_result(c, TK_COMPARE_MAX_ABS + i, &v);
            tk__repr(v, num[0]);
            tk__put(text, sizeof text, &len, "%s %s", labels[i], num[0]);
        } else {
            tk__put(text, sizeof text, &len, "%s", labels[i]);
        }
        if (w->set) {
            tk__value_bits(av, sizeof av, c->actual_dtype, w->actual);
            tk__value_bits(ev, sizeof ev, c->expected_dtype, w->expected);
            tk__put(text, sizeof text, &len, " at (%lld, %lld): actual %s, "
                    "expected %s\n", (long long)w->row, (long long)w->col, av, ev);
        } else {
            tk__put(text, sizeof text, &len, ": none\n");
        }
    }
    tk__put(text, sizeof text, &len, "ULP histogram (%s): 0: %lld, 1: %lld, 2: %lld, "
            "3+: %lld\n", tk_dtype_name(c->dtype), (long long)s->hist[0],
            (long long)s->hist[1], (long long)s->hist[2], (long long)s->hist[3]);
    if (len >= size)
        return tk__fail(TK_ERANGE, "tk_compare_format: needs %zu bytes, buffer "
                        "has %zu", len + 1, size);
    memcpy(buf, text, len + 1);
    return TK_OK;
}
