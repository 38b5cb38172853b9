/* bound.c - the audit of reduction contracts (matmul, row sum): a float64
 * oracle on the stored inputs, a rigorous forward error bound per output
 * element for the declared accumulation, and the diagnosis by alternative
 * contracts, each within its own bound.
 *
 * The bound (Higham, Accuracy and Stability of Numerical Algorithms, 2nd
 * ed., 2002, section 3.1, eq. 3.5, and Lemma 3.1): a sum of K products
 * a_k b_k accumulated in a format of unit roundoff u, in any order, has
 * |computed - exact| <= gamma(K - 1 + p) sum |a_k b_k|, with
 * gamma(n) = n u / (1 - n u) and p = 0 when the products are exact in the
 * accumulator (bf16, f16 and fp8 inputs in f32), 1 when they are rounded.
 * Each product may also underflow by half the smallest subnormal (eta).
 * The oracle's own float64 error, gamma_53(K) sum |a b|, is added, and the
 * final cast to an output dtype that cannot hold the accumulator adds
 * u_out |result| + eta_out (half an ULP). */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Unit roundoff (2^-precision) and half the smallest subnormal. */
static void tk__unit(int dtype, double *u, double *eta)
{
    switch (dtype) {
    case TK_DTYPE_BF16: *u = 0x1p-8; *eta = 0x1p-134; break;
    case TK_DTYPE_F16: *u = 0x1p-11; *eta = 0x1p-25; break;
    case TK_DTYPE_F8E4M3FN: *u = 0x1p-4; *eta = 0x1p-10; break;
    case TK_DTYPE_F8E5M2: *u = 0x1p-3; *eta = 0x1p-17; break;
    default: *u = 0x1p-24; *eta = 0x1p-150; break;
    }
}

static double tk__gamma(double n, double u)
{
    return n * u < 1.0 ? n * u / (1.0 - n * u) : INFINITY;
}

/* The accumulation a bound is for: its unit roundoff, whether the products
 * are rounded, and whether the result is cast to a narrower output. */
typedef struct {
    double u, eta, u_out, eta_out;
    bool rounded_products, cast;
    bool probabilistic;   /* the storage-dtype alternative: see tk__bound */
} tk__acc;

static tk__acc tk__acc_of(int reduce, int dtype, int acc, int out_dtype)
{
    tk__acc r = {0};
    double u_in, eta_in;
    tk__unit(acc, &r.u, &r.eta);
    tk__unit(dtype, &u_in, &eta_in);
    tk__unit(out_dtype, &r.u_out, &r.eta_out);
    /* A product of two p-bit significands needs 2p bits. */
    r.rounded_products = reduce == TK__REDUCE_MATMUL && u_in * u_in < r.u;
    r.cast = !tk__dtype_holds(out_dtype, acc);
    return r;
}

/* The bound on |computed - s| for K terms whose magnitudes sum to A.  A
 * worst-case bound for accumulating in bf16 or f16 exceeds every value for
 * the K of real kernels (K u >= 1), so the storage-dtype alternative of
 * the diagnosis uses the probabilistic bound of Higham and Mary (SIAM J.
 * Sci. Comput. 41(5), 2019, Theorem 2.4): exp(lambda sqrt(n) u + n u^2 /
 * (1 - u)) - 1, which fails with probability below 2n exp(-lambda^2 (1 -
 * u)^2 / 2), 2n e^-32 with lambda 8: 2.6e-11 per element at n = 1024. */
static double tk__bound(const tk__acc *r, int64_t k, float A32, double s)
{
    /* A32 is the float32 sum of the rounded |a b|: at most gamma(k + 1)
     * below A, and k underflows of 2^-149 below that. */
    double A = ((double)A32 + (double)k * 0x1p-149) / (1.0 - tk__gamma((double)k + 1, 0x1p-24));
    double n = (double)(k - 1) + (r->rounded_products ? 1.0 : 0.0);
    double g = r->probabilistic
                   ? expm1(8.0 * sqrt(n) * r->u + n * r->u * r->u / (1.0 - r->u))
                   : tk__gamma(n, r->u);
    double b = g * A + 2.0 * (double)k * r->eta + tk__gamma((double)k, 0x1p-53) * A;
    if (r->cast)
        b += r->u_out * (fabs(s) + b) + r->eta_out;
    return b;
}

/* What one pass over the case computes: per output element the sum, the
 * sum of magnitudes and (for the gap) what the original data adds. */
typedef struct {
    int64_t m, k, n;
    const float *x, *y;    /* stored inputs promoted to f32; y NULL: ones */
    const float *dx, *dy;  /* original - stored (exact in f32), oy the original y */
    const float *oy;
    int dtype;             /* round products to it (TK_SCHEDULE_PRODUCTS_ROUNDED) */
    int64_t k_end;         /* terms [0, k_end) */
} tk__pass;

/* Per output element: the oracle s, accumulated in float64; the sum of
 * magnitudes A, which only bounds, in float32 (tk__bound takes its upper
 * bound); and o, what the original data adds to s: the original sum is
 * s + sum dx oy + x dy, an identity, whose small terms float32 sums to
 * within gamma(2k) 2u of the gap it measures.  Over k in order, rows of n
 * at a time so the loops vectorize, and k in blocks so a block of y stays
 * in cache while every row of x uses it.  (All three in float64 measured
 * 3.3x a plain f32 matmul at 1024^3; this, about 2x.) */
TK_DISPATCH(tk__sums, (const tk__pass *p, bool round, double *s, float *A, float *o),
            (p, round, s, A, o))
{
    enum { KB = 64 };
    int64_t n = p->n, m = p->m;
    memset(s, 0, (size_t)(m * n) * sizeof *s);
    memset(A, 0, (size_t)(m * n) * sizeof *A);
    if (o)
        memset(o, 0, (size_t)(m * n) * sizeof *o);
    if (!p->y) {   /* a row sum: one column */
        for (int64_t i = 0; i < m; i++)
            for (int64_t k = 0; k < p->k_end; k++) {
                s[i] += p->x[i * p->k + k];
                A[i] += fabsf(p->x[i * p->k + k]);
                if (o)
                    o[i] += p->dx[i * p->k + k];
            }
        return;
    }
    for (int64_t k0 = 0; k0 < p->k_end; k0 += KB) {
        int64_t k1 = k0 + KB < p->k_end ? k0 + KB : p->k_end;
        /* Two rows of x at a time share each load and conversion of y. */
        for (int64_t i = 0, rows; i < m; i += rows) {
            rows = i + 1 < m && !round ? 2 : 1;
            bool two = rows == 2;
            double *s0 = s + i * n, *s1 = two ? s0 + n : s0;
            float *A0 = A + i * n, *A1 = two ? A0 + n : A0;
            for (int64_t k = k0; k < k1; k++) {
                const float *yk = p->y + k * n;
                float f0 = p->x[i * p->k + k], f1 = two ? p->x[(i + 1) * p->k + k] : 0.0f;
                double a0 = f0, a1 = f1;
                float b0 = fabsf(f0), b1 = fabsf(f1);
                if (round) {
                    for (int64_t j = 0; j < n; j++) {
                        float t = tk__round_to(p->dtype, (float)(a0 * yk[j]));
                        s0[j] += t;
                        A0[j] += fabsf(t);
                    }
                } else if (two) {
                    for (int64_t j = 0; j < n; j++) {
                        double y = yk[j];
                        float ya = fabsf(yk[j]);
                        s0[j] += a0 * y;
                        s1[j] += a1 * y;
                        A0[j] += b0 * ya;
                        A1[j] += b1 * ya;
                    }
                } else {
                    for (int64_t j = 0; j < n; j++) {
                        s0[j] += a0 * yk[j];
                        A0[j] += b0 * fabsf(yk[j]);
                    }
                }
                for (int64_t r = i; o && r < i + rows; r++) {
                    float da = p->dx[r * p->k + k], xa = p->x[r * p->k + k];
                    float *orow = o + r * n;
                    const float *oyk = p->oy + k * n, *dyk = p->dy + k * n;
                    for (int64_t j = 0; j < n; j++)
                        orow[j] += da * oyk[j] + xa * dyk[j];
                }
            }
        }
    }
}

/* The largest |c - s| / bound over the elements.  An element equal to the
 * oracle's own cast (want) counts 0; where the oracle is NaN (NaN or Inf
 * inputs, or an output cast past its format) any NaN counts 0 and anything
 * else infinity; elsewhere a NaN counts infinity, and so does any other
 * difference where no finite bound exists (the magnitudes overflowed). */
static double tk__worst(const tk__acc *r, int64_t k, int64_t count, const float *c,
                        const float *want, const double *s, const float *A, int64_t *at,
                        double *bound)
{
    double worst = -1.0;
    for (int64_t e = 0; e < count; e++) {
        double b = tk__bound(r, k, A[e], s[e]), ratio;
        if (isnan(want[e]) || isnan(s[e]))
            ratio = isnan(c[e]) ? 0.0 : INFINITY;
        else if (tk__f32_bits(c[e]) == tk__f32_bits(want[e]))
            ratio = 0.0;
        else if (isnan(c[e]) || !isfinite(b))
            ratio = INFINITY;
        else
            ratio = fabs((double)c[e] - s[e]) / b;
        if (ratio > worst) {
            worst = ratio;
            *at = e;
            if (bound)
                *bound = b;
        }
    }
    return worst;
}

/* Every output element accumulated in k order in dtype d, each product
 * and each partial sum rounded to it, as a kernel with a d accumulator
 * computes: the diagnosis's simulation of narrow accumulation. */
static void tk__sums_in(const tk__pass *p, int d, float *out)
{
    int64_t n = p->n;
    for (int64_t i = 0; i < p->m; i++)
        for (int64_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < p->k; k++) {
                float t = p->y ? p->x[i * p->k + k] * p->y[k * n + j] : p->x[i * p->k + k];
                acc = tk__round_to(d, acc + tk__round_to(d, t));
            }
            out[i * n + j] = acc;
        }
}

/* One thread's rows of a pass: tk__sums (narrow 0) or tk__sums_in. */
typedef struct {
    tk__pass p;
    bool round;
    int narrow;
    double *s;
    float *A, *o;
} tk__rows;

static void *tk__rows_run(void *arg)
{
    tk__rows *r = arg;
    if (r->narrow)
        tk__sums_in(&r->p, r->narrow, r->A);
    else
        tk__sums(&r->p, r->round, r->s, r->A, r->o);
    return NULL;
}

/* Rows a thread of a pass takes at the least. */
#define TK__ROWS_MIN 16

/* A pass (tk__sums, or tk__sums_in into A when narrow is a dtype) on the
 * contract kernel's threads (TK_KERNEL_THREADS), each on consecutive whole
 * rows: every element's sum is the same however the rows are split. */
static void tk__pass_on(const tk_kernel *kc, const tk__pass *p, bool round, int narrow,
                        double *s, float *A, float *o)
{
    int64_t n = tk__kernel_threads(kc);
    n = n < p->m / TK__ROWS_MIN ? n : p->m / TK__ROWS_MIN;
    tk__rows one, *r = n > 1 ? malloc((size_t)n * sizeof *r) : NULL;
    if (!r)
        r = &one, n = 1;
    for (int64_t t = 0; t < n; t++) {
        int64_t r0 = p->m * t / n, r1 = p->m * (t + 1) / n;
        r[t] = (tk__rows){*p, round, narrow, s ? s + r0 * p->n : NULL, A + r0 * p->n,
                          o ? o + r0 * p->n : NULL};
        r[t].p.m = r1 - r0;
        r[t].p.x = p->x + r0 * p->k;
        r[t].p.dx = p->dx ? p->dx + r0 * p->k : NULL;
    }
    tk__fan_out(r, sizeof *r, n, tk__rows_run);
    if (r != &one)
        free(r);
}

/* Root mean square of c - s, at least the smallest normal double. */
static double tk__rms(const float *c, const double *s, int64_t count)
{
    double sum = 0.0;
    for (int64_t e = 0; e < count; e++)
        sum += ((double)c[e] - s[e]) * ((double)c[e] - s[e]);
    return fmax(sqrt(sum / (double)count), 0x1p-1022);
}

/* Which alternative contract explains a failing candidate: a NaN where the
 * oracle's cast is not (the audit's NaN fill showing through), then the
 * exact alternatives by their own bound, then accumulation in bfloat16 or
 * float16, less precise than the contract's, by its probabilistic bound. */
static int tk__diagnose_reduction(const tk__case *c, const tk_kernel *kc, tk__pass p,
                                  const float *cand, const float *want, const double *s,
                                  double *s2, float *A2, float *sim)
{
    int64_t count = c->rows * c->cols, at;
    for (int64_t e = 0; e < count; e++)
        if (isnan(cand[e]) && !isnan(want[e]) && isfinite(s[e]))
            return TK_SCHEDULE_NO_INIT;
    tk__acc f32 = tk__acc_of(kc->reduce, c->dtype, kc->accum, c->out_dtype);
    if (kc->reduce == TK__REDUCE_MATMUL && c->dtype != TK_DTYPE_F32) {
        tk__pass_on(kc, &p, true, 0, s2, A2, NULL);
        /* One more rounding per term than the contract has. */
        tk__acc r = f32;
        r.rounded_products = true;
        if (tk__worst(&r, c->depth, count, cand, want, s2, A2, &at, NULL) <= 1.0)
            return TK_SCHEDULE_PRODUCTS_ROUNDED;
    }
    /* The K block sizes of real kernels: powers of two and the multiples of
     * 128 between them; each distinct tail is tried once. */
    static const int64_t blocks[] = {8, 16, 32, 64, 128, 192, 256, 384, 512, 768, 1024};
    int64_t tried[sizeof blocks / sizeof *blocks];
    int n_tried = 0;
    for (size_t b = 0; b < sizeof blocks / sizeof *blocks && blocks[b] < c->depth; b++) {
        int64_t end = c->depth - c->depth % blocks[b];
        bool seen = end == c->depth;   /* no tail at all */
        for (int t = 0; t < n_tried && !seen; t++)
            seen = tried[t] == end;
        if (seen)
            continue;
        tried[n_tried++] = end;
        p.k_end = end;
        tk__pass_on(kc, &p, false, 0, s2, A2, NULL);
        if (tk__worst(&f32, p.k_end, count, cand, want, s2, A2, &at, NULL) <= 1.0)
            return TK_SCHEDULE_K_TAIL;
    }
    /* Both narrow formats' probabilistic bounds can cover a candidate that
     * accumulates in either; the one whose own accumulation, simulated in
     * order, errs by the candidate's amount (root mean square, compared on
     * a log scale) is named. */
    p.k_end = c->depth;
    tk__pass_on(kc, &p, false, 0, s2, A2, NULL);
    const int narrow[2] = {TK_DTYPE_F16, TK_DTYPE_BF16};
    const int named[2] = {TK_SCHEDULE_F16_ACCUM, TK_SCHEDULE_BF16_ACCUM};
    double e_cand = tk__rms(cand, s, count), best = INFINITY;
    int pick = TK_SCHEDULE_UNKNOWN;
    for (int i = 0; i < 2; i++) {
        tk__acc r = tk__acc_of(kc->reduce, c->dtype, narrow[i], c->out_dtype);
        if (r.u <= f32.u)
            continue;   /* not less precise than the contract */
        r.probabilistic = true;
        if (tk__worst(&r, c->depth, count, cand, want, s2, A2, &at, NULL) > 1.0)
            continue;
        tk__pass_on(kc, &p, false, narrow[i], NULL, sim, NULL);
        double d = fabs(log(e_cand / tk__rms(sim, s, count)));
        if (d < best) {
            best = d;
            pick = named[i];
        }
    }
    if (pick != TK_SCHEDULE_UNKNOWN)
        return pick;
    return TK_SCHEDULE_UNKNOWN;
}

int tk__gap_dtype(const tk__case *c)
{
    double ui, uo, eta;
    tk__unit(c->dtype, &ui, &eta);
    tk__unit(c->out_dtype, &uo, &eta);
    return ui >= uo ? c->dtype : c->out_dtype;
}

int tk__reduction_check(int acc, int reduce, int64_t m, int64_t k, int64_t n, int dtype,
                        int out_dtype)
{
    double u, eta;
    tk__unit(acc, &u, &eta);
    /* gamma(k + 1) must be finite, with room: beyond k u = 1/2 a worst-case
     * bound says nothing useful. */
    if ((double)(k + 1) * u > 0.5)
        return tk__fail(TK_ERANGE, "tk_audit_add_reduction_case: k = %lld is too deep for "
                        "a worst-case bound of %s accumulation (k u = %.3g > 1/2); declare "
                        "float32 accumulation or audit shorter sums", (long long)k,
                        tk_dtype_name(acc), (double)(k + 1) * u);
    /* The block tk__audit_reduction allocates, in elements of 1 byte. */
    int64_t mk, kn, mn, in_bytes, per_out;
    per_out = tk_dtype_size(out_dtype) + 3 * 4 + 2 * 8 + 3 * 4 + 5 * 64;
    if (!tk__mul(m, k, &mk) || !tk__mul(k, reduce == TK__REDUCE_MATMUL ? n : 0, &kn) ||
        !tk__mul(m, n, &mn) || mk > INT64_MAX - kn ||
        !tk__mul(mk + kn, tk_dtype_size(dtype) + 8, &in_bytes) || !tk__mul(mn, per_out, &mn) ||
        in_bytes > INT64_MAX - mn || (uint64_t)(in_bytes + mn) > SIZE_MAX)
        return tk__fail(TK_EOVERFLOW, "tk_audit_add_reduction_case: %lld x %lld x %lld "
                        "overflows the audit's working memory", (long long)m, (long long)k,
                        (long long)n);
    return TK_OK;
}

int tk__audit_reduction(tk_audit *a, int64_t index, tk__case_result *res)
{
    const tk__case *c = &a->cases[index];
    const tk_kernel *kc = a->k;
    bool mm = kc->reduce == TK__REDUCE_MATMUL;
    int64_t m = c->rows, n = c->cols, k = c->depth, mk = m * k, kn = mm ? k * n : 0;
    int64_t count = m * n;
    size_t es = (size_t)tk_dtype_size(c->dtype), eo = (size_t)tk_dtype_size(c->out_dtype);
    /* One block: stored inputs and output, promoted inputs and their
     * differences from the originals, the candidate and the oracle's cast in
     * f32, the oracle and its alternative in float64, and three float32
     * planes (magnitudes, theirs, the originals' share).  Its size was
     * checked when the case was added (tk__reduction_bytes). */
    size_t sizes[] = {(size_t)(mk + kn) * es, (size_t)count * eo,
                      2 * (size_t)(mk + kn) * sizeof(float), 3 * (size_t)count * sizeof(float),
                      2 * (size_t)count * sizeof(double) + 3 * (size_t)count * sizeof(float)};
    size_t off[6] = {0};
    for (int i = 0; i < 5; i++)
        off[i + 1] = off[i] + (sizes[i] + 63) / 64 * 64;
    char *mem = malloc(off[5]);
    if (!mem)
        return tk__fail(TK_ENOMEM, "tk_audit_run: out of memory for %zu bytes of case %lld",
                        off[5], (long long)index);
    char *stored = mem, *outp = mem + off[1];
    float *px = (float *)(void *)(mem + off[2]), *py = mm ? px + mk : NULL;
    float *dx = px + mk + kn, *dy = mm ? dx + mk : NULL;
    float *cand = (float *)(void *)(mem + off[3]), *want = cand + count, *so32 = want + count;
    double *s = (double *)(void *)(mem + off[4]), *s2 = s + count;
    float *A = (float *)(s2 + count), *A2 = A + count, *o = A2 + count;

    tk__row_from_f32(c->dtype, c->orig, stored, mk + kn);
    tk__row_to_f32(c->dtype, stored, px, mk + kn);
    for (int64_t e = 0; e < mk + kn; e++)   /* exact: the two are neighbours */
        dx[e] = c->orig[e] - px[e];
    tk_matrix *in[2] = {NULL, NULL}, *out = NULL;
    int rc = tk_matrix_wrap(&in[0], c->dtype, m, k, k, stored);
    if (!rc && mm)
        rc = tk_matrix_wrap(&in[1], c->dtype, k, n, n, stored + (size_t)mk * es);
    if (!rc)
        rc = tk_matrix_wrap(&out, c->out_dtype, m, n, n, outp);
    if (!rc) {
        memset(outp, 0xFF, (size_t)count * eo);   /* NaN, so unwritten elements show */
        int cb = a->fn(a->user, (const tk_matrix *const *)in, out);
        if (cb)
            rc = tk__fail(TK_ECALLBACK, "candidate returned %d for case %lld (%lldx%lldx%lld "
                          "%s)", cb, (long long)index, (long long)m, (long long)k,
                          (long long)n, tk_dtype_name(c->dtype));
    }
    if (!rc) {
        /* float32 inputs are stored as they are: the original reference
         * is the oracle itself, and the gap has no input part. */
        bool exact = c->dtype == TK_DTYPE_F32;
        tk__pass p = {m, k, n, px, py, dx, dy, mm ? c->orig + mk : NULL, c->dtype, k};
        tk__pass_on(kc, &p, false, 0, s, A, exact ? NULL : o);
        tk__row_to_f32(c->out_dtype, outp, cand, count);
        for (int64_t e = 0; e < count; e++) {
            want[e] = tk__round_to(c->out_dtype, (float)s[e]);
            so32[e] = (float)(exact ? s[e] : s[e] + (double)o[e]);
        }
        tk__acc acc = tk__acc_of(kc->reduce, c->dtype, kc->accum, c->out_dtype);
        int64_t at = 0;
        res->bounded = true;
        res->ratio = tk__worst(&acc, k, count, cand, want, s, A, &at, &res->bound);
        res->ratio_row = at / n;
        res->ratio_col = at % n;
        int d = tk__gap_dtype(c);
        tk__cmp_init(&res->impl, c->out_dtype, 0.0, 0.0, 0, TK_NAN_MATCH, true);
        tk__cmp_init(&res->gap, c->out_dtype, a->gap_atol[d], a->gap_rtol[d], -1,
                     TK_NAN_MATCH, false);
        tk__cmp_rows(&res->impl, 0, 0, m, n, cand, want);
        tk__cmp_rows(&res->gap, 0, 0, m, n, cand, so32);   /* so32 is free after this */
        double in_part = 0.0, out_part = 0.0, scale = 0.0;
        for (int64_t e = 0; e < count; e++) {
            in_part = exact ? 0.0 : fmax(in_part, fabs((double)o[e]));
            out_part = fmax(out_part, fabs((double)cand[e] - s[e]));
            scale = fmax(scale, fabs(so32[e]));
        }
        res->input_part = (float)in_part;
        res->output_part = (float)out_part;
        res->scale = (float)scale;
        res->diagnosis = TK_SCHEDULE_NOT_RUN;
        if (!tk__case_passed(res))
            res->diagnosis = tk__diagnose_reduction(c, kc, p, cand, want, s, s2, A2, so32);
    }
    tk_matrix_destroy(in[0]);
    tk_matrix_destroy(in[1]);
    tk_matrix_destroy(out);
    free(mem);
    return rc;
}
