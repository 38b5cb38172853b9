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
 * u_out |result| + eta_out (half an ULP).  A contract that flushes
 * subnormals (TK_ARITH_FTZ, as XLA and TPUs compute) has its subnormal
 * inputs read as zeros by the oracle, and each operation may flush a
 * result below the smallest normal number: eta and eta_out are then the
 * smallest normal numbers of the accumulator and of the output. */
#include "internal.h"

#include <fenv.h>
#include <float.h>
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

/* The smallest normal number of a float dtype. */
static double tk__smallest_normal(int dtype)
{
    switch (dtype) {
    case TK_DTYPE_F16: return 0x1p-14;
    case TK_DTYPE_F8E4M3FN: return 0x1p-6;
    case TK_DTYPE_F8E5M2: return 0x1p-14;
    default: return 0x1p-126;   /* float32 and bfloat16 */
    }
}

static double tk__gamma(double n, double u)
{
    return n * u < 1.0 ? n * u / (1.0 - n * u) : INFINITY;
}

/* The least magnitude that rounds (to nearest, ties to even) past a float
 * dtype's largest number: to infinity, or for float8_e4m3fn, which has
 * none, to NaN.  Its largest number, 448, is even, so a tie goes down. */
static double tk__overflow_at(int dtype)
{
    switch (dtype) {
    case TK_DTYPE_BF16: return 0x1.ffp127;
    case TK_DTYPE_F16: return 65520.0;
    case TK_DTYPE_F8E4M3FN: return nextafter(464.0, INFINITY);
    case TK_DTYPE_F8E5M2: return 61440.0;
    default: return 0x1.ffffffp127;   /* float32 */
    }
}

/* The accumulation a bound is for: its unit roundoff, whether the products
 * are rounded, whether the result is cast to a narrower output, and where
 * the result (the accumulator's, or its cast) overflows. */
typedef struct {
    double u, eta, u_out, eta_out, top;
    bool nan_over;        /* the output overflows to NaN (float8_e4m3fn) */
    bool rounded_products, cast;
    bool probabilistic;   /* the storage-dtype alternative: see tk__limits_of */
    bool mag32;           /* A's terms summed in f32 per KC block (tk__oracle_mag32) */
} tk__acc;

/* flush: the contract flushes subnormals (TK_ARITH_FTZ). */
static tk__acc tk__acc_of(int reduce, int dtype, int acc, int out_dtype, bool flush)
{
    tk__acc r = {0};
    double u_in, eta_in;
    tk__unit(acc, &r.u, &r.eta);
    tk__unit(dtype, &u_in, &eta_in);
    tk__unit(out_dtype, &r.u_out, &r.eta_out);
    if (flush) {
        r.eta = tk__smallest_normal(acc);
        r.eta_out = tk__smallest_normal(out_dtype);
    }
    /* A product of two p-bit significands needs 2p bits. */
    r.rounded_products = reduce == TK__REDUCE_MATMUL && u_in * u_in < r.u;
    r.cast = !tk__dtype_holds(out_dtype, acc);
    r.top = fmin(tk__overflow_at(acc), tk__overflow_at(out_dtype));
    r.nan_over = out_dtype == TK_DTYPE_F8E4M3FN;
    return r;
}

/* The bound on |computed - s| for K terms whose magnitudes sum to A.  A
 * worst-case bound for accumulating in bf16 or f16 exceeds every value for
 * the K of real kernels (K u >= 1), so the storage-dtype alternative of
 * the diagnosis uses the probabilistic bound of Higham and Mary (SIAM J.
 * Sci. Comput. 41(5), 2019, Theorem 2.4): exp(lambda sqrt(n) u + n u^2 /
 * (1 - u)) - 1, which fails with probability below 2n exp(-lambda^2 (1 -
 * u)^2 / 2), 2n e^-32 with lambda 8: 2.6e-11 per element at n = 1024.
 * tk__limits_of computes what is the same for every element of a case,
 * tk__bound_sum and tk__bound_at the rest. */
typedef struct {
    double den, g, eta, g53, u_out, eta_out, top;
    bool cast, nan_over;
} tk__limits;

static tk__limits tk__limits_of(const tk__acc *r, int64_t k)
{
    double n = (double)(k - 1) + (r->rounded_products ? 1.0 : 0.0);
    tk__limits l = {.g53 = tk__gamma((double)k, 0x1p-53), .eta = 2.0 * (double)k * r->eta,
                    .u_out = r->u_out, .eta_out = r->eta_out, .cast = r->cast,
                    .top = r->top, .nan_over = r->nan_over};
    /* A64 is the float64 sum of the k exact |a b|: at most gamma_53(k - 1)
     * below their sum A (gamma_53(k) leaves room for this division).  With
     * mag32 it is the float64 sum of float32 sums of at most KC exact terms
     * each, added from zero (the first addition is exact), each at most
     * gamma_24(min(k, KC) - 1) below its terms' sum. */
    double kc = (double)(k < TK__KC ? k : TK__KC);
    l.den = (1.0 - l.g53) * (r->mag32 ? 1.0 - tk__gamma(kc - 1.0, 0x1p-24) : 1.0);
    l.g = r->probabilistic ? expm1(8.0 * sqrt(n) * r->u + n * r->u * r->u / (1.0 - r->u))
                           : tk__gamma(n, r->u);
    return l;
}

/* The bound before the output's cast. */
static inline double tk__bound_sum(const tk__limits *l, double A64)
{
    double A = A64 / l->den;
    return l->g * A + l->eta + l->g53 * A;
}

/* The bound after it, from b, tk__bound_sum's. */
static inline double tk__bound_at(const tk__limits *l, double b, double s)
{
    double cast = b + (l->u_out * (fabs(s) + b) + l->eta_out);
    /* A mask, not a ternary, which gcc leaves as a branch in the loop. */
    uint64_t m = 0 - (uint64_t)l->cast;
    return tk__f64_value((tk__f64_bits(cast) & m) | (tk__f64_bits(b) & ~m));
}

/* One element's |c - s| / bound, as bits.  An element equal to the
 * oracle's own cast (want) counts 0; where the oracle is NaN (NaN or Inf
 * inputs, or an output cast past its format) any NaN counts 0 and anything
 * else infinity; elsewhere a NaN counts infinity, and so does any other
 * difference where no finite bound exists (an infinite magnitude).  An
 * overflow (Inf of the sum's side, or float8_e4m3fn's NaN) counts the
 * least error that reaches it over the bound before the cast, b:
 * (top - s) / b for +Inf, (top + s) / b for -Inf, where top is the least
 * magnitude that overflows (l->top): a sum within the bound may lie past
 * it where the oracle's lies below, and its cast overflows.  Never
 * NaN (a finite bound is at least 2 k eta > 0, k >= 1), so the bits of two
 * ratios order like them.  The cases are chosen by masks, not branches, so
 * that the loops over it vectorize: the division runs on every element and
 * may raise a flag (Inf / Inf) that the branches avoided, and the audit
 * puts back the environment the candidate left. */
static inline uint64_t tk__ratio(const tk__limits *l, float c, float want, double s,
                                 double A64, double *bound)
{
    const uint64_t inf = 0x7FF0000000000000u, abs = ~(1ull << 63);
    double b_sum = tk__bound_sum(l, A64), b = tk__bound_at(l, b_sum, s);
    uint64_t r = tk__f64_bits(fabs((double)c - s) / b);
    uint64_t c_nan = 0 - (uint64_t)((tk__f32_bits(c) & 0x7FFFFFFFu) > 0x7F800000u);
    uint64_t no_b = 0 - (uint64_t)((tk__f64_bits(b) & abs) >= inf);
    uint64_t m = c_nan | no_b;
    r = (r & ~m) | (inf & m);
    /* The overflows, where r is infinity: the nearer side's ratio wins.
     * (Signed minima: the bits are a non-negative double's, and AVX2 has
     * no unsigned 64-bit compare.) */
    uint64_t over_nan = c_nan & (0 - (uint64_t)l->nan_over);
    uint64_t up = ((0 - (uint64_t)(tk__f32_bits(c) == 0x7F800000u)) | over_nan) & ~no_b,
             down = ((0 - (uint64_t)(tk__f32_bits(c) == 0xFF800000u)) | over_nan) & ~no_b;
    double to_up = l->top - s, to_down = l->top + s;   /* (not fmax: it would not vectorize) */
    to_up = to_up > 0.0 ? to_up : 0.0;
    to_down = to_down > 0.0 ? to_down : 0.0;
    int64_t r_up = (int64_t)((tk__f64_bits(to_up / b_sum) & up) | (inf & ~up)),
            r_down = (int64_t)((tk__f64_bits(to_down / b_sum) & down) | (inf & ~down));
    r_up = r_down < r_up ? r_down : r_up;
    r = r_up < (int64_t)r ? (uint64_t)r_up : r;
    r &= ~(0 - (uint64_t)(tk__f32_bits(c) == tk__f32_bits(want)));
    m = (0 - (uint64_t)((tk__f32_bits(want) & 0x7FFFFFFFu) > 0x7F800000u)) |
        (0 - (uint64_t)((tk__f64_bits(s) & abs) > inf));
    r = (r & ~m) | (inf & ~c_nan & m);
    *bound = b;
    return r;
}

/* Elements a chunk of tk__worst_bits holds. */
#define TK__WORST_CHUNK 1024

/* The largest tk__ratio's bits over the elements, one vectorized pass on
 * the path tk__isa() picks; *chunk: the first element of the first chunk
 * that holds it. */
TK_DISPATCH_RET(uint64_t, tk__worst_bits, (const tk__limits *l, int64_t count, const float *c,
                                           const float *want, const double *s,
                                           const double *A, int64_t *chunk),
                (l, count, c, want, s, A, chunk))
{
    uint64_t top = 0;
    double b;
    for (int64_t e0 = 0; e0 < count; e0 += TK__WORST_CHUNK) {
        int64_t e1 = count - e0 < TK__WORST_CHUNK ? count : e0 + TK__WORST_CHUNK;
        int64_t t = 0;   /* signed: AVX2 has no unsigned 64-bit maximum */
        for (int64_t e = e0; e < e1; e++) {
            int64_t u = (int64_t)tk__ratio(l, c[e], want[e], s[e], A[e], &b);
            t = u > t ? u : t;
        }
        if ((uint64_t)t > top || e0 == 0) {   /* a tie keeps the earlier chunk */
            top = (uint64_t)t;
            *chunk = e0;
        }
    }
    return top;
}

/* The largest tk__ratio over the elements, the first position it is at
 * and the bound there; -1 for no elements. */
static double tk__worst(const tk__acc *r, int64_t k, int64_t count, const float *c,
                        const float *want, const double *s, const double *A, int64_t *at,
                        double *bound)
{
    if (!count)
        return -1.0;
    tk__limits l = tk__limits_of(r, k);
    int64_t e = 0;
    double b;
    uint64_t top = tk__worst_bits(&l, count, c, want, s, A, &e);
    while (tk__ratio(&l, c[e], want[e], s[e], A[e], &b) != top && e + 1 < count)
        e++;
    *at = e;
    if (bound)   /* a NaN sum's sign is the order of its additions': not reported */
        *bound = isnan(b) ? NAN : b;
    return tk__f64_value(top);
}

/* v rounded to d, float16 or bfloat16, inline: with d a constant the
 * loop below runs in vector lanes. */
static inline __attribute__((always_inline)) float tk__accum_round(int d, float v)
{
    return d == TK_DTYPE_BF16 ? tk__bf16_to(tk__bf16_from(v)) : tk__f16_to(tk__f16_from(v));
}

/* Row i of tk__sums_in: the row of out is the accumulators, one per
 * column, each taking its terms in k order (p->reversed: the other way). */
static inline __attribute__((always_inline)) void tk__sums_row(const tk__pass *p, int d,
                                                               int64_t i, float *restrict row)
{
    int64_t n = p->n;
    for (int64_t j = 0; j < n; j++)
        row[j] = 0.0f;
    for (int64_t t = 0; t < p->k; t++) {
        int64_t k = p->reversed ? p->k - 1 - t : t;
        float xv = p->x[i * p->k + k];
        if (p->y) {
            const float *restrict yk = p->y + k * n;
            for (int64_t j = 0; j < n; j++)
                row[j] = tk__accum_round(d, row[j] + tk__accum_round(d, xv * yk[j]));
        } else {
            row[0] = tk__accum_round(d, row[0] + tk__accum_round(d, xv));
        }
    }
}

/* Every output element accumulated in k order (or reversed) in dtype d
 * (float16 or bfloat16), each product and each partial sum rounded to it,
 * as a kernel with a d accumulator computes: the diagnosis's simulation of
 * narrow accumulation.  A row at a time, k outside and the columns inside
 * (the same operations on each element as a k loop per element, which took
 * 13 to 18 s on a 512x1024x768 case), on the dispatched path. */
TK_DISPATCH(tk__sums_in, (const tk__pass *p, int d, float *out), (p, d, out))
{
    for (int64_t i = 0; i < p->m; i++) {
        if (d == TK_DTYPE_BF16)
            tk__sums_row(p, TK_DTYPE_BF16, i, out + i * p->n);
        else
            tk__sums_row(p, TK_DTYPE_F16, i, out + i * p->n);
        if (p->tick && tk__tick(p, (double)(i + 1) / (double)p->m))
            return;
    }
}

/* Rows a thread of a pass takes at the least. */
#define TK__ROWS_MIN 16

/* The threads a pass over m rows runs on: the contract kernel's
 * (TK_KERNEL_THREADS), each with TK__ROWS_MIN rows at least. */
static int64_t tk__pass_threads(const tk_kernel *kc, int64_t m)
{
    int64_t n = tk__kernel_threads(kc);
    return n < m / TK__ROWS_MIN ? n : m / TK__ROWS_MIN > 0 ? m / TK__ROWS_MIN : 1;
}

/* A pass of the oracle over the case's rows on `threads` threads
 * (tk__pass_threads, counted once per case: TK_KERNEL_THREADS 0 asks the
 * system each time, and pack holds as many scratches as were counted).
 * The threads take chunks of rows in turn: tk__oracle_sums, or tk__sums_in
 * into sim when narrow is a dtype.  A chunk's sums are the same whichever
 * thread computes it, so every element's are the same however the rows are
 * split.  With a candidate (a), the calling thread runs it first while the
 * others start; the oracle reads the promoted copies of the inputs, not the
 * candidate's, so the two touch disjoint memory. */
typedef struct {
    tk__pass p;
    bool round;
    int narrow;
    double *s, *A, *o, *pack;
    float *sim;
    int64_t chunk;
    _Atomic int64_t *next;
    atomic_bool *stop;                 /* the candidate failed, or progress stopped the run */
    tk_audit *a;                       /* item 0, the calling thread: the candidate */
    tk__progress *pr;                  /* item 0 reports progress (if asked), all count rows;
                                          pr->a owns the threads */
    const tk_matrix *const *in;
    tk_matrix *out;
    bool caller;                       /* item 0 */
    int cb;
    fenv_t left;                       /* the environment the candidate left */
} tk__chunks;

static void *tk__chunks_run(void *arg)
{
    tk__chunks *w = arg;
    /* Whatever floating-point environment the candidate leaves (a rounding
     * mode, flushing), the case's passes run under the one the audit began
     * with; tk__audit_reduction puts the candidate's back at the end. */
    if (w->a) {
        fenv_t start;
        fegetenv(&start);
        if ((w->cb = w->a->fn(w->a->user, w->in, w->out))) {
            atomic_store(w->stop, true);
            return NULL;
        }
        fegetenv(&w->left);
        fesetenv(&start);
    }
    const tk__pass *p = &w->p;
    bool ticks = w->pr->a->progress != NULL, caller = ticks && w->caller;
    while (!atomic_load(w->stop)) {
        int64_t r0 = atomic_fetch_add(w->next, 1) * w->chunk, e0 = r0 * p->n;
        if (r0 >= p->m)
            break;
        tk__pass q = *p;
        q.m = r0 + w->chunk < p->m ? w->chunk : p->m - r0;
        q.x = p->x + r0 * p->k;
        q.ox = p->ox ? p->ox + r0 * p->k : NULL;
        q.tick = ticks ? w->pr : NULL;
        q.reports = caller;
        if (caller) {
            w->pr->chunk_rows = q.m;
            if (tk__tick(&q, 0.0))
                break;
        }
        if (w->narrow)
            tk__sums_in(&q, w->narrow, w->sim + e0);
        else
            tk__oracle_sums(&q, w->round, w->s + e0, w->A + e0, w->o ? w->o + e0 : NULL,
                            w->pack);
        if (ticks)
            atomic_fetch_add(&w->pr->done, q.m);
    }
    return NULL;
}

bool tk__tick(const tk__pass *p, double part)
{
    tk__progress *pr = p->tick;
    if (!p->reports)
        return atomic_load_explicit(pr->stop, memory_order_relaxed);
    if (pr->rc)
        return true;
    double f = ((double)atomic_load(&pr->done) + part * (double)pr->chunk_rows) /
               (double)pr->rows;
    f = f < 1.0 ? f : 1.0;
    if (pr->last >= 0.0 && f < pr->last + 1.0 / 256)
        return false;
    pr->last = f;
    if ((pr->rc = tk__progress_report(pr->a, pr->index, pr->step, f)))
        atomic_store(pr->stop, true);
    return pr->rc != 0;
}

/* Run the pass w describes on `threads` threads; w->cb and w->left come
 * back from the calling thread's item. */
static void tk__run_chunks(int64_t threads, tk__chunks *w)
{
    _Atomic int64_t next = 0;
    atomic_bool stop = false;
    /* About four chunks a thread: each repacks y, so not many more. */
    int64_t chunk = threads > 1 ? (w->p.m + 4 * threads - 1) / (4 * threads) : w->p.m;
    tk__chunks *t = threads > 1 ? malloc((size_t)threads * sizeof *t) : NULL;
    int64_t n = t ? threads : 1;
    if (!t)
        t = w;
    w->chunk = chunk > TK__ROWS_MIN ? chunk : TK__ROWS_MIN;
    w->next = &next;
    w->stop = &stop;
    atomic_store(&w->pr->done, 0);
    w->pr->rows = w->p.m;
    w->pr->last = -1.0;   /* the first tick reports */
    w->pr->stop = &stop;
    for (int64_t i = 0; i < n; i++) {
        t[i] = *w;   /* t may be w itself: then this copies nothing */
        t[i].pack = w->pack + i * tk__pack_doubles(w->p.n, w->p.k);
        t[i].a = i ? NULL : w->a;
        t[i].caller = i == 0;
    }
    tk__fan_out(w->pr->a->pool, t, sizeof *t, n, tk__chunks_run);
    w->cb = t[0].cb;
    w->left = t[0].left;
    /* A pass ends at 1, also when the calling thread reported none of it
     * (the others took every chunk) or the last 1/256 went unreported. */
    tk__progress *pr = w->pr;
    if (pr->a->progress && !atomic_load(&stop) && pr->last < 1.0) {
        pr->last = 1.0;
        pr->rc = tk__progress_report(pr->a, pr->index, pr->step, 1.0);
    }
    if (t != w)
        free(t);
}

/* A diagnosis pass (tk__chunks_run) on `threads` threads. */
static void tk__pass_on(int64_t threads, const tk__pass *p, bool round, int narrow,
                        double *s, double *A, double *o, double *pack, float *sim,
                        tk__progress *pr)
{
    tk__chunks w = {.p = *p, .round = round, .narrow = narrow, .s = s, .A = A, .o = o,
                    .pack = pack, .sim = sim, .pr = pr};
    tk__run_chunks(threads, &w);
}

/* Root mean square of c - s where both are finite, at least the smallest
 * normal double. */
static double tk__rms(const float *c, const double *s, int64_t count)
{
    double sum = 0.0;
    int64_t n = 0;
    for (int64_t e = 0; e < count; e++)
        if (isfinite(s[e]) && isfinite(c[e])) {   /* an overflow has no error to compare */
            sum += ((double)c[e] - s[e]) * ((double)c[e] - s[e]);
            n++;
        }
    return fmax(sqrt(sum / (double)(n ? n : 1)), 0x1p-1022);
}

/* The K block sizes of real kernels: powers of two and the multiples of 128
 * between them. */
static const int64_t tk__k_blocks[] = {8, 16, 32, 64, 128, 192, 256, 384, 512, 768, 1024};
enum { TK__K_BLOCKS = sizeof tk__k_blocks / sizeof *tk__k_blocks };

/* Whether a power-of-two block size of 8 to 1024 below K leaves it a
 * partial last block.  (With 192, 384 and 768 as well nearly every K would
 * have a tail, 512 and 1024 among them, and the name would tell nothing.) */
static bool tk__k_has_tail(int64_t depth)
{
    for (int64_t b = 8; b <= 1024 && b < depth; b *= 2)
        if (depth % b)
            return true;
    return false;
}

/* Whether element e of the candidate is a NaN the oracle does not explain. */
static inline bool tk__stray_nan(const float *cand, const float *want, const double *s,
                                 int64_t e)
{
    return isnan(cand[e]) && !isnan(want[e]) && isfinite(s[e]);
}

/* The narrow accumulation in d (tk__sums_in), in k order or reversed, into
 * sim; false when progress stopped it (pr->rc). */
static bool tk__simulate(int64_t threads, tk__pass p, int d, bool reversed, double *pack,
                         float *sim, tk__progress *pr)
{
    p.reversed = reversed;
    tk__pass_on(threads, &p, false, d, NULL, NULL, NULL, pack, sim, pr);
    return !pr->rc;
}

/* A fraction f of a diagnosis search (tk__block_match, tk__reads_garbage,
 * tk__one_window), reported at most once per 1/256 and once at 1 (*last
 * starts below 0); true where the callback asked to stop. */
static bool tk__search_tick(tk__progress *pr, double f, double *last)
{
    if (f < 1.0 ? f < *last + 1.0 / 256 : *last >= 1.0)
        return false;
    *last = f;
    return (pr->rc = tk__progress_report(pr->a, pr->index, pr->step, f)) != 0;
}

/* The outputs on which tk__block_match simulates each blocked
 * accumulation: the first rows and columns, about this many; and how near
 * the candidate must come to a simulation to be named after it: the root
 * mean square of their difference at most this share of the candidate's
 * error and of its values, over at least this many outputs where the
 * candidate is not the oracle's cast. */
#define TK__MATCH_OUTPUTS 512
#define TK__MATCH_SHARE 0.25
#define TK__MATCH_MIN 32

/* The root mean square of cand - sim as a share of those of cand - want
 * and of cand (the larger share), over the elements where cand and want
 * are finite, rows x cols of them: cand and want rows ld apart, sim's
 * cols.  Infinity where sim is not finite at one of them (an overflow of
 * its own), or where cand differs from want at fewer than TK__MATCH_MIN
 * (on a few, some simulation comes near by chance).  The share of cand
 * keeps a simulation near 0 (float16 underflowing on tiny data) from
 * matching a candidate that left most terms out. */
static double tk__match_share(const float *cand, const float *want, int64_t ld,
                              const float *sim, int64_t rows, int64_t cols)
{
    double off = 0.0, err = 0.0, mag = 0.0;
    bool alike = true;
    int64_t wrong = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            double x = cand[r * ld + c], w = want[r * ld + c], v = sim[r * cols + c];
            if (isfinite(x) && isfinite(w)) {
                alike &= isfinite(v);
                off += (x - v) * (x - v), err += (x - w) * (x - w), mag += x * x;
                wrong += x != w;
            }
        }
    return alike && wrong >= TK__MATCH_MIN ? sqrt(off / fmin(err, mag)) : INFINITY;
}

/* Row i of a blocked accumulation in d, its first nc columns: float32
 * partial sums of bk terms in k order (p->reversed: the other way),
 * products not rounded, each added to a d accumulator. */
static inline __attribute__((always_inline)) void tk__blocks_row(const tk__pass *p, int d,
                                                                 int64_t i, int64_t bk,
                                                                 int64_t nc,
                                                                 float *restrict row,
                                                                 float *restrict part)
{
    const float *x = p->x + i * p->k;
    if (!p->y) {   /* a row sum: one accumulator */
        float acc = 0.0f;
        for (int64_t t0 = 0; t0 < p->k; t0 += bk) {
            int64_t t1 = p->k - t0 < bk ? p->k : t0 + bk;
            float sum = 0.0f;
            for (int64_t t = t0; t < t1; t++)
                sum += x[p->reversed ? p->k - 1 - t : t];
            acc = tk__accum_round(d, acc + sum);
        }
        row[0] = acc;
        return;
    }
    for (int64_t j = 0; j < nc; j++)
        row[j] = 0.0f;
    for (int64_t t0 = 0; t0 < p->k; t0 += bk) {
        int64_t t1 = p->k - t0 < bk ? p->k : t0 + bk;
        for (int64_t j = 0; j < nc; j++)
            part[j] = 0.0f;
        for (int64_t t = t0; t < t1; t++) {
            int64_t k = p->reversed ? p->k - 1 - t : t;
            const float *restrict yk = p->y + k * p->n;
            for (int64_t j = 0; j < nc; j++)
                part[j] += x[k] * yk[j];
        }
        for (int64_t j = 0; j < nc; j++)
            row[j] = tk__accum_round(d, row[j] + part[j]);
    }
}

/* How near the candidate comes to an accumulation in d (float16 or
 * bfloat16), as a Pallas kernel with a d accumulator or output ref
 * computes: float32 partial sums of 1 term (products not rounded; in k
 * order and reversed), of a block size of tk__k_blocks below K or of all
 * K (in k order), each added to the accumulator.  The least
 * tk__match_share over about TK__MATCH_OUTPUTS outputs (the first rows,
 * and columns: at most that many of each), cast as the candidate's are.
 * sim and part (TK__MATCH_OUTPUTS floats) are scratch; a progress report
 * per simulation (tk__search_tick), INFINITY where it asked to stop. */
static double tk__block_match(const tk__pass *p, int d, int out_dtype, const float *cand,
                              const float *want, float *sim, float *part, tk__progress *pr)
{
    int64_t n = p->y ? p->n : 1, nc = n < TK__MATCH_OUTPUTS ? n : TK__MATCH_OUTPUTS;
    int64_t rows = (TK__MATCH_OUTPUTS + nc - 1) / nc < p->m ? (TK__MATCH_OUTPUTS + nc - 1) / nc
                                                           : p->m;
    double best = INFINITY, last = -1.0;
    tk__pass q = *p;
    if (tk__search_tick(pr, 0.0, &last))
        return INFINITY;
    for (int b = -2; b <= TK__K_BLOCKS; b++) {   /* -2: one term reversed; -1: in order */
        int64_t bk = b < 0                                          ? 1
                     : b < TK__K_BLOCKS && tk__k_blocks[b] < p->k ? tk__k_blocks[b]
                                                                   : p->k;
        q.reversed = b == -2;
        for (int64_t i = 0; i < rows; i++)
            if (d == TK_DTYPE_BF16)
                tk__blocks_row(&q, TK_DTYPE_BF16, i, bk, nc, sim + i * nc, part);
            else
                tk__blocks_row(&q, TK_DTYPE_F16, i, bk, nc, sim + i * nc, part);
        tk__cast_through(out_dtype, sim, rows * nc);
        best = fmin(best, tk__match_share(cand, want, n, sim, rows, nc));
        bool end = bk == p->k && b >= -1;
        if (tk__search_tick(pr, end ? 1.0 : (b + 3.0) / (TK__K_BLOCKS + 3.0), &last))
            return INFINITY;
        if (end)
            break;
    }
    return best;
}

/* Half float16's largest finite number.  A NaN from overflow needs an
 * Inf - Inf, so both the positive and the negative terms of a sum must
 * reach it; where the smaller of the two, (sum of magnitudes - |sum|) / 2,
 * stays below half of it (room for the rounding errors of a narrow sum),
 * no accumulator the diagnosis knows overflows.  Above it a float16
 * accumulation may: tk__could_overflow runs it to see. */
#define TK__OVERFLOW_ROOM (65504.0 / 2)

/* Whether a float16 accumulation, in k order or reversed, overflows where
 * the candidate has a NaN the oracle has not (sim: scratch).  pr->rc takes
 * a stop. */
static bool tk__could_overflow(const tk__case *c, int64_t threads, const tk__pass *p,
                               const float *cand, const float *want, const double *s,
                               const double *A, double *pack, float *sim, tk__progress *pr)
{
    int64_t count = c->rows * c->cols;
    bool room = true;
    for (int64_t e = 0; e < count && room; e++)
        room = !tk__stray_nan(cand, want, s, e) || (A[e] - fabs(s[e])) / 2 <= TK__OVERFLOW_ROOM;
    for (int order = 0; order < 2 && !room; order++) {
        if (!tk__simulate(threads, *p, TK_DTYPE_F16, order, pack, sim, pr))
            return true;
        for (int64_t e = 0; e < count; e++)
            if (tk__stray_nan(cand, want, s, e) && !isfinite(sim[e]))
                return true;
    }
    return false;
}

/* The candidate again, on an output filled with zeros instead of NaN, into
 * `into` as float32 (its environment, as the first run's, goes back);
 * pr->rc takes a failure. */
static void tk__rerun_zero_filled(const tk__case *c, tk__progress *pr,
                                  const tk_matrix *const *in, tk_matrix *out, float *into)
{
    const tk_audit *a = pr->a;
    int64_t count = tk_matrix_rows(out) * tk_matrix_cols(out);
    int dtype = tk_matrix_dtype(out);
    memset(tk_matrix_data(out), 0, (size_t)count * (size_t)tk__esize(dtype));
    fenv_t start;
    fegetenv(&start);
    int cb = a->fn(a->user, in, out);
    fesetenv(&start);
    if (cb)
        pr->rc = tk__fail(TK_ECALLBACK, "tk_audit_run: candidate returned %d for case %lld "
                          "(%lldx%lldx%lld %s) when run again for its diagnosis", cb,
                          (long long)pr->index, (long long)c->rows, (long long)c->depth,
                          (long long)c->cols, tk_dtype_name(c->dtype));
    else
        tk__row_to_f32(dtype, tk_matrix_data(out), into, count);
}

/* How much more a candidate may err than a narrow accumulation simulated
 * term by term and still be named after it (tk__diagnose_reduction). */
#define TK__NARROW_SLACK 2.0

/* Whether element e of the candidate is not finite where the oracle is,
 * and not its cast (which may be an Inf, an output dtype's overflow): an
 * accumulator's overflow (Inf, or NaN from Inf - Inf) or a stray NaN. */
static inline bool tk__overflowed(const float *cand, const float *want, const double *s,
                                  int64_t e)
{
    return !isfinite(cand[e]) && isfinite(s[e]) && !(cand[e] == want[e]);
}

/* Whether sim, a narrow accumulation cast as the candidate's outputs are,
 * overflows where the candidate does (tk__overflowed), to the same value
 * (the same Inf, or NaN), and nowhere else. */
static bool tk__same_overflow(const float *cand, const float *sim, const float *want,
                              const double *s, int64_t count)
{
    for (int64_t e = 0; e < count; e++) {
        bool over = tk__overflowed(cand, want, s, e);
        if (over != tk__overflowed(sim, want, s, e) ||
            (over && !(isnan(cand[e]) ? isnan(sim[e]) : cand[e] == sim[e])))
            return false;
    }
    return true;
}

/* Whether every candidate output where the oracle's cast is finite is a
 * value of dtype d, where the output dtype holds values d does not and
 * TK__HELD_MIN of them are not 0 (else the test tells nothing: one float16
 * value in eight is a bfloat16 one). */
#define TK__HELD_MIN 8
static bool tk__held_in(int d, int out_dtype, const float *cand, const float *want,
                        int64_t count)
{
    double ud, uo, eta;
    tk__unit(d, &ud, &eta);
    tk__unit(out_dtype, &uo, &eta);
    if (uo >= ud)
        return false;
    int64_t seen = 0;
    for (int64_t e = 0; e < count; e++) {
        if (!isfinite(cand[e]) || !isfinite(want[e]) || cand[e] == 0.0f)
            continue;
        seen++;
        unsigned char code[4];
        float back;
        tk__row_from_f32(d, &cand[e], code, 1);
        tk__row_to_f32(d, code, &back, 1);
        if (back != cand[e])
            return false;
    }
    return seen >= TK__HELD_MIN;
}

/* Whether some power-of-two block size b of 8 to 1024 below K has a pad
 * width b - (K mod b) of q (tk__k_has_tail's blocks). */
static bool tk__pad_width(int64_t depth, int64_t q)
{
    for (int64_t b = 8; b <= 1024 && b < depth; b *= 2)
        if (depth % b && b - depth % b == q)
            return true;
    return false;
}

/* The inverse of the t x t matrix u (row-major, overwritten) into inv, by
 * Gauss-Jordan elimination with partial pivoting; false if singular. */
static bool tk__invert(double *u, double *inv, int64_t t)
{
    for (int64_t i = 0; i < t * t; i++)
        inv[i] = i / t == i % t;
    for (int64_t c = 0; c < t; c++) {
        int64_t p = c;
        for (int64_t r = c + 1; r < t; r++)
            p = fabs(u[r * t + c]) > fabs(u[p * t + c]) ? r : p;
        if (!(fabs(u[p * t + c]) > 0.0))
            return false;
        for (int64_t k = 0; k < t; k++) {
            double x = u[c * t + k], y = inv[c * t + k];
            u[c * t + k] = u[p * t + k], inv[c * t + k] = inv[p * t + k];
            u[p * t + k] = x, inv[p * t + k] = y;
        }
        double d = u[c * t + c];
        for (int64_t k = 0; k < t; k++)
            u[c * t + k] /= d, inv[c * t + k] /= d;
        for (int64_t r = 0; r < t; r++) {
            double f = u[r * t + c];
            for (int64_t k = 0; r != c && k < t; k++)
                u[r * t + k] -= f * u[c * t + k], inv[r * t + k] -= f * inv[c * t + k];
        }
    }
    return true;
}

/* What tk__reads_garbage's elimination knows: the errors D = cand - s,
 * each one's rounding bound beta, and the pivots so far (rows I, columns
 * J). */
typedef struct {
    const float *cand;
    const double *s, *beta;
    int64_t m, n, *I, *J;
} tk__skeleton;

static inline double tk__err(const tk__skeleton *k, int64_t i, int64_t j)
{
    return (double)k->cand[i * k->n + j] - k->s[i * k->n + j];
}

/* Whether what t steps of elimination leave, R = D - W D[I,:] with W =
 * D[:,J] U^-1 and U = D[I,J], lies everywhere within the first-order
 * bound on how much the rounding of D moves it: B = beta + (beta[:,J] +
 * |W| beta[I,J]) |V| + |W| beta[I,:], where V = U^-1 D[I,:].  1 where it
 * does, 0 where it does not, -1 where U is singular or memory ran out. */
static int tk__skeleton_within(const tk__skeleton *k, int64_t t, const double *R)
{
    int64_t m = k->m, n = k->n;
    double *u = malloc((size_t)(2 * t * t + 2 * t * n + 3 * t + n) * sizeof *u);
    if (!u)
        return -1;
    double *inv = u + t * t, *V = inv + t * t, *bI = V + t * n, *d = bI + t * n, *w = d + t,
           *p = w + t, *row = p + t;
    for (int64_t a = 0; a < t; a++)
        for (int64_t b = 0; b < t; b++)
            u[a * t + b] = tk__err(k, k->I[a], k->J[b]);
    int rc = tk__invert(u, inv, t) ? 1 : -1;
    /* |V| and beta[I,:], t x n. */
    for (int64_t a = 0; rc > 0 && a < t; a++)
        for (int64_t j = 0; j < n; j++) {
            double v = 0.0;
            for (int64_t b = 0; b < t; b++)
                v += inv[a * t + b] * tk__err(k, k->I[b], j);
            V[a * n + j] = fabs(v);
            bI[a * n + j] = k->beta[k->I[a] * n + j];
        }
    for (int64_t i = 0; rc > 0 && i < m; i++) {
        /* |W| of row i, and beta[i,J] + |W| beta[I,J] of it. */
        for (int64_t b = 0; b < t; b++)
            d[b] = tk__err(k, i, k->J[b]);
        for (int64_t a = 0; a < t; a++) {
            double v = 0.0;
            for (int64_t b = 0; b < t; b++)
                v += d[b] * inv[b * t + a];
            w[a] = fabs(v);
        }
        for (int64_t b = 0; b < t; b++) {
            p[b] = k->beta[i * n + k->J[b]];
            for (int64_t a = 0; a < t; a++)
                p[b] += w[a] * k->beta[k->I[a] * n + k->J[b]];
        }
        memcpy(row, k->beta + i * n, (size_t)n * sizeof *row);
        for (int64_t b = 0; b < t; b++)
            for (int64_t j = 0; j < n; j++)
                row[j] += p[b] * V[b * n + j] + w[b] * bI[b * n + j];
        for (int64_t j = 0; j < n && rc > 0; j++)
            rc = fabs(R[i * n + j]) <= row[j];
    }
    free(u);
    return rc;
}

/* How many times the largest error left after q steps of
 * tk__reads_garbage's elimination the q-th pivot must be, for the rank to
 * be q: where it is less, the pivot is rounding too (the largest of what
 * is left falls slowly from step to step once only rounding is left). */
#define TK__RANK_DROP 4.0

/* The largest |x| of count elements (0 for none) and its row and column
 * in rows of n. */
static double tk__largest(const double *x, int64_t count, int64_t *row, int64_t *col,
                          int64_t n)
{
    double top = 0.0;
    for (int64_t e = 0; e < count; e++)
        if (fabs(x[e]) > top) {
            top = fabs(x[e]);
            *row = e / n;
            *col = e % n;
        }
    return top;
}

/* How far from the span of a window of the data (its norm's part) a
 * column or row of a low-rank error may lie and still be the data's
 * (tk__spanned). */
#define TK__WINDOW_SLACK 0.1

/* v (of length len) less its projection on the kept orthonormal columns
 * Q (len x kept, a vector per column); the squared norm left. */
static double tk__project_out(const double *Q, int64_t kept, int64_t len, double *v)
{
    for (int64_t c = 0; c < kept; c++) {
        const double *u = Q + c * len;
        double d = 0.0;
        for (int64_t i = 0; i < len; i++)
            d += u[i] * v[i];
        for (int64_t i = 0; i < len; i++)
            v[i] -= d * u[i];
    }
    double left = 0.0;
    for (int64_t i = 0; i < len; i++)
        left += v[i] * v[i];
    return left;
}

/* Orthonormal columns spanning the q vectors v(b), b < q, of length len
 * (element i of v(b) at base[i * stride + b * step]), by modified
 * Gram-Schmidt, into Q; the number kept (those not within 1e-12 of the
 * span of the earlier ones are). */
static int64_t tk__basis(const float *base, int64_t len, int64_t stride, int64_t step,
                         int64_t q, double *Q)
{
    int64_t kept = 0;
    for (int64_t b = 0; b < q; b++) {
        double *v = Q + kept * len, norm0 = 0.0;
        for (int64_t i = 0; i < len; i++) {
            v[i] = base[i * stride + b * step];
            norm0 += v[i] * v[i];
        }
        double norm = tk__project_out(Q, kept, len, v);
        if (!(norm > 1e-24 * norm0))
            continue;
        for (int64_t i = 0; i < len; i++)
            v[i] /= sqrt(norm);
        kept++;
    }
    return kept;
}

/* Whether each of the q pivot columns (or rows) of the error, of length
 * len, lies within TK__WINDOW_SLACK of its norm of the span of the kept
 * orthonormal columns Q; r is scratch of len. */
static bool tk__spanned(const tk__skeleton *k, bool columns, int64_t q, const double *Q,
                        int64_t kept, int64_t len, double *r)
{
    for (int64_t a = 0; a < q; a++) {
        double norm = 0.0;
        for (int64_t i = 0; i < len; i++) {
            r[i] = columns ? tk__err(k, i, k->J[a]) : tk__err(k, k->I[a], i);
            norm += r[i] * r[i];
        }
        if (!(tk__project_out(Q, kept, len, r) <= TK__WINDOW_SLACK * TK__WINDOW_SLACK * norm))
            return false;
    }
    return true;
}

/* Whether the error of rank q found at the pivots (rows I, columns J) is
 * the data's: its columns D[:, J] in the span of x's columns of a window
 * of 3q terms of K, or its rows D[I, :] in that of y's rows there, as when
 * up to 2q terms of K, anywhere, are left out, added twice, scaled, read
 * from another block or out of order.  The windows start at the multiples
 * of q, the last ending at K: any 2q + 1 terms in a row fall in one.
 * (With q at most a quarter of M and N, a window spans at most three
 * quarters of the space, and garbage in general position lies far from
 * it.)  -1 where memory ran out. */
static int tk__from_data(const tk__skeleton *k, const tk__pass *p, int64_t q)
{
    int64_t m = k->m, n = k->n, len = m > n ? m : n, span = 3 * q < p->k ? 3 * q : p->k;
    double *Q = malloc((size_t)((span + 1) * len) * sizeof *Q);
    if (!Q)
        return -1;
    double *r = Q + span * len;
    bool data = false;
    for (int64_t w = 0; !data; w += q) {
        int64_t w0 = w < p->k - span ? w : p->k - span;
        int64_t kept = tk__basis(p->x + w0, m, p->k, 1, span, Q);
        data = tk__spanned(k, true, q, Q, kept, m, r);
        kept = tk__basis(p->y + w0 * n, n, 1, n, span, Q);
        data = data || tk__spanned(k, false, q, Q, kept, n, r);
        if (w0 + span >= p->k)
            break;
    }
    free(Q);
    return data;
}

/* Whether a failing matmul reads finite garbage beyond K.  Its last block
 * of K, read whole, adds G H to the product, where G (M x q) and H (q x N)
 * are the two operands' padding and q the block's pad width: the error D
 * = cand - s is of rank q (garbage in general position has no less), plus
 * the rounding of a sum that now has the garbage's terms too, each
 * element's within beta, the bound of K + q_max terms (the largest pad
 * width tried) whose magnitudes sum to A plus |D|.  Gaussian elimination
 * with complete pivoting (each pivot the largest error left) takes out one
 * rank a step.  Garbage is named where all of these hold:
 *  - the error exceeds the contract's bound in every row and every column,
 *    and TK__RANK_DROP times it in at least half the elements, as padding
 *    that feeds every element does (not a few outliers);
 *  - after q steps, for q a pad width (b - (K mod b) for a power-of-two
 *    block b of 8 to 1024 below K) of at least 3 (a bias on rows or
 *    columns has rank 1 or 2) and at most a quarter of the smaller
 *    dimension (a swap of rows in pairs has rank M / 2), every element
 *    lies within the bound that beta gives it through the elimination
 *    (tk__skeleton_within);
 *  - the q-th pivot is TK__RANK_DROP times the largest error left: the
 *    rank is q, no less;
 *  - the error is not the data's (tk__from_data): padding that copies the
 *    data of a window of K, as a pipeline buffer's earlier block may, is
 *    taken for the data's error.
 * R and beta, count doubles each, are scratch; pr->rc takes a stop. */
static bool tk__reads_garbage(const tk__case *c, const tk__acc *f32, const tk__pass *p,
                              const float *cand, const double *s, const double *A, double *R,
                              double *beta, tk__progress *pr)
{
    int64_t m = c->rows, n = c->cols, depth = c->depth, q_max = 0, cap = (m < n ? m : n) / 4;
    for (int64_t b = 8; b <= 1024 && b < depth; b *= 2)
        if (depth % b && b - depth % b <= cap && b - depth % b > q_max)
            q_max = b - depth % b;
    if (q_max < 3)
        return false;
    bool *col_over = calloc((size_t)n, sizeof *col_over);
    int64_t *I = malloc(2 * (size_t)q_max * sizeof *I), large = 0;
    bool every = col_over && I, named = false;
    tk__skeleton k = {cand, s, beta, m, n, I, I ? I + q_max : NULL};
    tk__limits l = tk__limits_of(f32, depth), lq = tk__limits_of(f32, depth + q_max);
    for (int64_t i = 0; i < m && every; i++) {
        bool row_over = false;
        for (int64_t j = 0; j < n; j++) {
            int64_t e = i * n + j;
            R[e] = (double)cand[e] - s[e];
            double b = tk__bound_at(&l, tk__bound_sum(&l, A[e]), s[e]);
            bool over = !(fabs(R[e]) <= b);
            row_over |= over;
            col_over[j] |= over;
            large += fabs(R[e]) > TK__RANK_DROP * b;
            every &= isfinite(R[e]);
            beta[e] = tk__bound_at(&lq, tk__bound_sum(&lq, A[e] + fabs(R[e])), cand[e]);
        }
        every &= row_over;
    }
    for (int64_t j = 0; j < n && every; j++)
        every = col_over[j];
    every &= large >= (m * n + 1) / 2;
    /* A pass of the diagnosis, reported from 0 to 1 (and where it stops
     * early at 1). */
    double last = -1.0;
    if (every && tk__search_tick(pr, 0.0, &last))
        every = false;
    double top = every ? tk__largest(R, m * n, &I[0], &k.J[0], n) : 0.0;
    for (int64_t q = 0; every && q < q_max && !named && top > 0.0; q++) {
        const double *prow = R + I[q] * n;
        double pivot = prow[k.J[q]];
        for (int64_t i = 0; i < m; i++) {
            double f = R[i * n + k.J[q]] / pivot;
            for (int64_t j = 0; i != I[q] && j < n; j++)
                R[i * n + j] -= f * prow[j];
        }
        for (int64_t j = 0; j < n; j++)   /* the pivot row, last: the others read it */
            R[I[q] * n + j] = 0.0;
        for (int64_t i = 0; i < m; i++)
            R[i * n + k.J[q]] = 0.0;
        int64_t ni = 0, nj = 0;
        double next = tk__largest(R, m * n, &ni, &nj, n);
        named = q + 1 >= 3 && tk__pad_width(depth, q + 1) && top >= TK__RANK_DROP * next &&
                tk__skeleton_within(&k, q + 1, R) == 1 && tk__from_data(&k, p, q + 1) == 0;
        top = next;
        if (q + 1 < q_max)
            I[q + 1] = ni, k.J[q + 1] = nj;
        if (tk__search_tick(pr, named ? 1.0 : (double)(q + 1) / (double)q_max, &last))
            named = false, every = false;
    }
    if (every && !pr->rc)
        tk__search_tick(pr, 1.0, &last);
    free(col_over);
    free(I);
    return named && !pr->rc;
}

/* What of a failing candidate's error one window of K must explain to be
 * taken for an indexing error (tk__one_window): this share of what the
 * output and a constant leave of its squared norm, leaving at most this
 * many times the norm of the contract's bounds; on at least this many
 * outputs (on fewer, some of the many windows fits any error), windows of
 * at most the largest block size of tk__k_blocks up to this many terms
 * (and, for a matmul, 4MN / (M + N)). */
#define TK__BLOCK_SHARE 0.9
#define TK__BLOCK_LEFT 2.0
#define TK__BLOCK_OUTPUTS 32
#define TK__BLOCK_WIDEST 256

/* Rows of E that one pass over Y^T serves (tk__one_window). */
#define TK__BLOCK_GROUP 4

/* Where a row sum's window of width index b (0: one term; b > 0: the
 * block size tk__k_blocks[b - 1]) from `start` ends: cut at K only where
 * it is an aligned block's (the last one); 0 where there is none. */
static int64_t tk__window_end(int b, int64_t start, int64_t depth)
{
    int64_t width = b ? tk__k_blocks[b - 1] : 1;
    return start + width <= depth ? start + width : start % width ? 0 : depth;
}

/* Whether a window's product P, given <E, P> (ip), <S, P> (sp), <1, P>
 * (op) and |P|^2 (pp), explains what S and 1 leave of E as
 * tk__one_window asks: E's coordinates on the basis of S and 1 are a1 and
 * a2 (a2 0 where q2 is false), ee_left what they leave of |E|^2. */
static bool tk__window_fits(double ip, double sp, double op, double pp, double cn, double s1,
                           double s_left, bool q2, double a1, double a2, double ee_left,
                           double allowed)
{
    double p1 = op / sqrt(cn), p2 = q2 ? (sp - s1 * op / cn) / sqrt(s_left) : 0.0;
    double pp_left = pp - p1 * p1 - p2 * p2, ip_left = ip - a1 * p1 - a2 * p2;
    /* A window whose product S and 1 span (rank-1 data) leaves only
     * rounding in pp_left: no fit. */
    double explained = pp_left > 0x1p-30 * pp ? ip_left * ip_left / pp_left : 0.0;
    return explained >= TK__BLOCK_SHARE * ee_left && ee_left - explained <= allowed;
}

/* Whether a failing candidate's error is, up to what the contract's own
 * rounding leaves, a multiple of the partial product of one window of K,
 * P = X[:, w] Y[w, :] with w = [w0, w1), plus a multiple of the output and
 * a constant: terms left out, added twice or scaled.  A matmul's windows
 * are every run of 1 to `wide` terms; a row sum's, runs of one term and
 * of each block size of tk__k_blocks up to `wide`, from every start (an
 * aligned last block cut at K).  A narrow accumulation's probabilistic
 * bound can cover such an error, whose rounding error is not a multiple
 * of the data's.  The output S and the constant 1 are projected out
 * first: where the data are all positive, every window's product is near
 * a multiple of S, and a narrow format's stagnation errs by one
 * (Frobenius inner products over the elements, least squares).  With E'
 * and P' what S and 1 leave of E = cand - s and of P, P' explains
 * <E', P'>^2 / |P'|^2 of E'.  <E, P> is the sum over k in w of v_k =
 * sum_i x_ik (E Y^T)_ik, <S, P> likewise, <1, P> that of
 * (sum_i x_ik)(sum_j y_kj), and |P|^2 that over k, l in w of
 * (X^T X)_kl (Y Y^T)_kl: one pass of E Y^T and S Y^T and the Grams' bands
 * |k - l| < wide serve every window.  A row sum's Y is ones, and its
 * |P|^2 the sum over rows of the window's sum squared.  E (count doubles)
 * is scratch; pr->rc takes a stop, or TK_ENOMEM where memory ran out. */
static bool tk__one_window(const tk__case *c, const tk__acc *f32, const tk__pass *p,
                          const float *cand, const double *s, const double *A, double *E,
                          tk__progress *pr)
{
    int64_t m = c->rows, n = c->cols, depth = c->depth, count = m * n, wide = 0;
    /* A matmul's bands cost (M + N) K wide multiply-adds, at most four
     * oracle passes; a row sum's blocks are summed directly. */
    int64_t cap = p->y ? 4 * m * n / (m + n) : TK__BLOCK_WIDEST;
    for (int b = 0; b < TK__K_BLOCKS && tk__k_blocks[b] < depth; b++)
        if (tk__k_blocks[b] <= TK__BLOCK_WIDEST && tk__k_blocks[b] <= cap)
            wide = tk__k_blocks[b];
    if (count < TK__BLOCK_OUTPUTS || !wide)
        return false;
    tk__limits l = tk__limits_of(f32, depth);
    double ee = 0.0, e1 = 0.0, es = 0.0, s1 = 0.0, ss = 0.0, bb = 0.0;
    for (int64_t e = 0; e < count; e++) {
        E[e] = (double)cand[e] - s[e];
        double b = tk__bound_at(&l, tk__bound_sum(&l, A[e]), s[e]);
        if (!isfinite(E[e]) || !isfinite(b) || !isfinite(s[e]))
            return false;
        ee += E[e] * E[e], e1 += E[e], es += E[e] * s[e];
        s1 += s[e], ss += s[e] * s[e];
        bb += b * b;
    }
    /* Per k: v (E's), vs (S's), the sums for <1, P>; rows of E Y^T and
     * S Y^T for a group; the bands, row k holding (k, k + d); and Y^T. */
    size_t band = p->y ? (size_t)(depth * wide) : 0, G = TK__BLOCK_GROUP;
    int widths = 1;   /* a row sum's window widths: 1 and the block sizes up to wide */
    while (widths <= TK__K_BLOCKS && tk__k_blocks[widths - 1] <= wide)
        widths++;
    size_t windows = p->y ? 0 : (size_t)(widths * depth);   /* a row sum's |P|^2 */
    size_t doubles = (size_t)depth * (5 + 2 * G) + 1 + 2 * band + windows;
    double *v = calloc(doubles, sizeof *v);
    float *yt = malloc((size_t)(n * depth) * sizeof *yt);
    if (!v || !yt) {
        free(v);
        free(yt);
        pr->rc = tk__fail(TK_ENOMEM, "tk_audit_run: case %lld: out of memory for the "
                          "diagnosis's %zu bytes", (long long)pr->index,
                          doubles * sizeof *v + (size_t)(n * depth) * sizeof *yt);
        return false;
    }
    double *vs = v + depth, *xsum = vs + depth, *ysum = xsum + depth, *u = ysum + depth;
    double *gx = u + 2 * G * (size_t)depth, *gy = gx + band, *win = gy + band;
    double *pre = win + windows, last = -1.0;   /* pre: a row's prefix sums */
    for (int64_t k = 0; k < depth; k++)
        for (int64_t j = 0; j < n; j++) {
            yt[j * depth + k] = p->y ? p->y[k * n + j] : 1.0f;   /* a row sum's Y: ones */
            ysum[k] += yt[j * depth + k];
        }
    bool found = false;
    if (tk__search_tick(pr, 0.0, &last))
        goto out;
    /* Loops with the long dimension innermost and no sums there vectorize;
     * a group of rows reads Y^T once. */
    for (int64_t i0 = 0; i0 < m; i0 += (int64_t)G) {
        int64_t g = m - i0 < (int64_t)G ? m - i0 : (int64_t)G;
        memset(u, 0, 2 * G * (size_t)depth * sizeof *u);
        for (int64_t j = 0; j < n; j++)
            for (int64_t r = 0; r < g; r++) {
                double e = E[(i0 + r) * n + j], t = s[(i0 + r) * n + j];
                double *ue = u + 2 * r * depth, *us = ue + depth;
                const float *yj = yt + j * depth;
                for (int64_t k = 0; k < depth; k++)
                    ue[k] += e * yj[k], us[k] += t * yj[k];
            }
        for (int64_t r = 0; r < g; r++) {
            const float *xi = p->x + (i0 + r) * depth;
            const double *ue = u + 2 * r * depth, *us = ue + depth;
            for (int64_t k = 0; k < depth; k++)
                v[k] += (double)xi[k] * ue[k], vs[k] += (double)xi[k] * us[k],
                    xsum[k] += xi[k];
            for (int64_t k = 0; p->y && k < depth; k++)
                for (int64_t d = 0; d < wide && k + d < depth; d++)
                    gx[k * wide + d] += (double)xi[k] * xi[k + d];
            /* A row sum's |P|^2 per window, win[width * depth + start]
             * (width the index of 1 and the block sizes): the sum over rows
             * of the window's sum squared, from the row's prefix sums. */
            for (int64_t k = 0; !p->y && k < depth; k++)
                pre[k + 1] = pre[k] + xi[k];
            for (int b = 0; !p->y && b < widths; b++)
                for (int64_t w0 = 0; w0 < depth; w0++) {
                    int64_t w1 = tk__window_end(b, w0, depth);
                    if (w1)
                        win[b * depth + w0] += (pre[w1] - pre[w0]) * (pre[w1] - pre[w0]);
                }
        }
        if (tk__search_tick(pr, 0.7 * (double)(i0 + g) / (double)m, &last))
            goto out;
    }
    for (int64_t j = 0; p->y && j < n; j++) {
        for (int64_t k = 0; k < depth; k++)
            for (int64_t d = 0; d < wide && k + d < depth; d++)
                gy[k * wide + d] += (double)yt[j * depth + k] * yt[j * depth + k + d];
        if (tk__search_tick(pr, 0.7 + 0.2 * (double)(j + 1) / (double)n, &last))
            goto out;
    }
    /* The orthonormal basis of S and 1: q1 = 1 / sqrt(count), and q2 what
     * 1 leaves of S, normed, unless S is (nearly) constant.  A vector's
     * coordinates come from its inner products with 1 and S. */
    double cn = (double)count, s_left = ss - s1 * s1 / cn;
    bool q2 = s_left > 0x1p-40 * ss;
    double a1 = e1 / sqrt(cn), a2 = q2 ? (es - s1 * e1 / cn) / sqrt(s_left) : 0.0;
    double ee_left = ee - a1 * a1 - a2 * a2;
    /* Each window's fit, its inner products grown a term at a time from
     * each start (not differences of sums from 0, which large sums of both
     * signs cancel): a matmul's |P|^2 gains the new term's band row; a row
     * sum's comes from win where the window is one of its widths. */
    double allowed = TK__BLOCK_LEFT * TK__BLOCK_LEFT * bb;
    for (int64_t w0 = 0; !found && ee_left > allowed && w0 < depth; w0++) {
        double ip = 0.0, sp = 0.0, op = 0.0, pp = 0.0;
        for (int64_t w1 = w0 + 1, b = 0; !found && w1 <= depth && w1 - w0 <= wide; w1++) {
            int64_t k = w1 - 1;
            ip += v[k], sp += vs[k], op += xsum[k] * ysum[k];
            if (p->y) {
                pp += gx[k * wide] * gy[k * wide];
                for (int64_t l = w0; l < k; l++)
                    pp += 2.0 * gx[l * wide + k - l] * gy[l * wide + k - l];
            } else {
                while (b < widths && tk__window_end(b, w0, depth) < w1)
                    b++;
                if (b == widths || tk__window_end(b, w0, depth) != w1)
                    continue;
                pp = win[b * depth + w0];
            }
            found = tk__window_fits(ip, sp, op, pp, cn, s1, s_left, q2, a1, a2, ee_left, allowed);
        }
        if (tk__search_tick(pr, 0.9 + 0.1 * (double)(w0 + 1) / (double)depth, &last))
            goto out;
    }
    tk__search_tick(pr, 1.0, &last);
out:
    free(v);
    free(yt);
    return found && !pr->rc;
}

/* Which alternative contract explains a failing candidate: first a NaN
 * where the oracle's cast is not, then the exact alternatives by their own
 * bound, then accumulation in bfloat16 or float16, less precise than the
 * contract's, by its probabilistic bound.  A NaN that goes when the
 * candidate runs again on a zero-filled output came from the NaN the audit
 * filled it with.  One that stays, in every element, where K has a tail and
 * no sum could have overflowed (Inf - Inf), came from padding beyond K
 * (Pallas's interpret mode pads with NaN); in some elements only, from
 * scratch never written; where a float16 sum could have overflowed, only
 * float16 accumulation may name it.  A candidate that overflows (Inf, or
 * that NaN) where the oracle's cast does not is named only after a narrow
 * accumulation that overflows to the same values at the same elements,
 * judged on at least TK__HELD_MIN others.  sim receives the rerun: nothing
 * reads it until the narrow accumulations fill it. */
static int tk__diagnose_reduction(const tk__case *c, const tk_kernel *kc, int64_t threads,
                                  tk__pass p, const float *cand, const float *want,
                                  const double *s, const double *A, double *s2, double *A2,
                                  double *pack, float *sim, tk__progress *pr,
                                  const tk_matrix *const *in, tk_matrix *out)
{
    int64_t count = c->rows * c->cols, at;
    p.mag32 = false;   /* its passes sum magnitudes in float64, as its bounds assume */
    bool nan = false, all = true;
    for (int64_t e = 0; e < count; e++)
        if (!isnan(want[e]) && isfinite(s[e])) {
            nan |= tk__stray_nan(cand, want, s, e);
            all &= tk__stray_nan(cand, want, s, e);
        }
    if (nan) {
        tk__rerun_zero_filled(c, pr, in, out, sim);
        if (pr->rc)
            return TK_SCHEDULE_UNKNOWN;
        for (int64_t e = 0; e < count; e++)
            if (isnan(cand[e]) && !isnan(sim[e]))
                return TK_SCHEDULE_NO_INIT;   /* the output's fill showed through */
        /* The rerun is done with: sim is scratch again. */
        if (!tk__could_overflow(c, threads, &p, cand, want, s, A, pack, sim, pr))
            return all && tk__k_has_tail(c->depth) ? TK_SCHEDULE_K_TAIL_PADDING
                                                   : TK_SCHEDULE_NO_INIT;
        if (pr->rc)
            return TK_SCHEDULE_UNKNOWN;
    }
    /* Overflows, and the finite elements that tell a narrow accumulation's
     * from padding or garbage.  An overflow is a narrow format's only where
     * float32 cannot overflow: the magnitudes' sum A bounds every product
     * and partial sum (up to rounding), so below half float32's largest
     * number none reaches it.  Above, float32 (the contract's precision)
     * and bfloat16 (its range) overflow alike, and nothing is named. */
    int64_t over = 0, finite = 0;
    for (int64_t e = 0; e < count; e++) {
        bool o = tk__overflowed(cand, want, s, e);
        if (o && !(A[e] <= FLT_MAX / 2))
            return TK_SCHEDULE_UNKNOWN;
        over += o;
        finite += isfinite(cand[e]) && isfinite(want[e]) && isfinite(s[e]);
    }
    if (over && finite < TK__HELD_MIN)   /* as few as tk__held_in takes for telling */
        return TK_SCHEDULE_UNKNOWN;
    bool flush = kc->axpy.arith & TK_ARITH_FTZ;
    tk__acc f32 = tk__acc_of(kc->reduce, c->dtype, kc->accum, c->out_dtype, flush);
    /* Within the contract's precision an overflow has no explanation. */
    if (!over && kc->reduce == TK__REDUCE_MATMUL && c->dtype != TK_DTYPE_F32) {
        tk__pass_on(threads, &p, true, 0, s2, A2, NULL, pack, NULL, pr);
        if (pr->rc)
            return TK_SCHEDULE_UNKNOWN;
        /* One more rounding per term than the contract has. */
        tk__acc r = f32;
        r.rounded_products = true;
        if (tk__worst(&r, c->depth, count, cand, want, s2, A2, &at, NULL) <= 1.0)
            return TK_SCHEDULE_PRODUCTS_ROUNDED;
    }
    /* Each distinct tail is tried once. */
    int64_t tried[TK__K_BLOCKS];
    int n_tried = 0;
    for (int b = 0; !over && b < TK__K_BLOCKS && tk__k_blocks[b] < c->depth; b++) {
        int64_t end = c->depth - c->depth % tk__k_blocks[b];
        bool seen = end == c->depth;   /* no tail at all */
        for (int t = 0; t < n_tried && !seen; t++)
            seen = tried[t] == end;
        if (seen)
            continue;
        tried[n_tried++] = end;
        p.k_end = end;
        tk__pass_on(threads, &p, false, 0, s2, A2, NULL, pack, NULL, pr);
        if (pr->rc)
            return TK_SCHEDULE_UNKNOWN;
        if (tk__worst(&f32, p.k_end, count, cand, want, s2, A2, &at, NULL) <= 1.0)
            return TK_SCHEDULE_K_TAIL;
    }
    if (!over && kc->reduce == TK__REDUCE_MATMUL &&
        tk__reads_garbage(c, &f32, &p, cand, s, A, s2, A2, pr))
        return TK_SCHEDULE_K_TAIL_PADDING;
    if (pr->rc)
        return TK_SCHEDULE_UNKNOWN;
    /* Nor, unless it nearly is one of the simulated blocked accumulations
     * (below), one whose error is the data's: a narrow accumulator that
     * drops every term after a huge first one errs by the data too.  (s2
     * is scratch until the pass below.) */
    bool window = !over && tk__one_window(c, &f32, &p, cand, s, A, s2, pr);
    if (pr->rc)
        return TK_SCHEDULE_UNKNOWN;
    /* Both narrow formats' probabilistic bounds can cover a candidate that
     * accumulates in either, and so can an indexing error.  A format is
     * named only where the candidate errs (root mean square) at most
     * TK__NARROW_SLACK times as much as that format's own accumulation,
     * simulated one term at a time in order: summing in blocks (float32
     * partial sums added to a narrow accumulator, as a Pallas kernel with
     * a bfloat16 scratch does) errs less, a wrong index far more.  The
     * simulation runs both ways and the larger error counts (on sorted
     * data the order matters) of the orders that overflow exactly where
     * the candidate does (none, mostly), the errors over the elements
     * neither overflows; the nearest error below is the first of them.  Of
     * those, first the narrowest whose values every output is (where the
     * output dtype has more): a bfloat16 accumulator's outputs are
     * bfloat16 values.  Then the case's storage dtype: the usual slip is
     * to accumulate in it.  Then the one whose error is nearest the
     * candidate's, on a log scale. */
    p.k_end = c->depth;
    tk__pass_on(threads, &p, false, 0, s2, A2, NULL, pack, NULL, pr);
    if (pr->rc)
        return TK_SCHEDULE_UNKNOWN;
    const int narrow[2] = {TK_DTYPE_F16, TK_DTYPE_BF16};
    const int named[2] = {TK_SCHEDULE_F16_ACCUM, TK_SCHEDULE_BF16_ACCUM};
    double e_cand = tk__rms(cand, s, count), best_key = INFINITY, near[2] = {INFINITY, INFINITY};
    int pick = TK_SCHEDULE_UNKNOWN, best_rank = -1;
    float *part = over ? NULL : malloc(TK__MATCH_OUTPUTS * sizeof *part);
    if (!over && !part) {
        pr->rc = tk__fail(TK_ENOMEM, "tk_audit_run: case %lld: out of memory for the "
                          "diagnosis's %zu bytes", (long long)pr->index,
                          TK__MATCH_OUTPUTS * sizeof *part);
        return TK_SCHEDULE_UNKNOWN;
    }
    for (int i = 0; i < 2; i++) {
        tk__acc r = tk__acc_of(kc->reduce, c->dtype, narrow[i], c->out_dtype, flush);
        if (r.u <= f32.u)
            continue;   /* not less precise than the contract */
        r.probabilistic = true;
        /* The bound holds the finite elements: sim, scratch until the
         * simulation, takes the candidate with its overflows as the
         * oracle's cast. */
        const float *judged = cand;
        if (over) {
            for (int64_t e = 0; e < count; e++)
                sim[e] = tk__overflowed(cand, want, s, e) ? want[e] : cand[e];
            judged = sim;
        }
        if (tk__worst(&r, c->depth, count, judged, want, s2, A2, &at, NULL) > 1.0)
            continue;
        /* A candidate that (all finite) nearly is one of the accumulations
         * simulated in a format, blocked or term by term, is named after
         * it, before the rules below (which of two formats: at the end). */
        near[i] = over ? INFINITY : tk__block_match(&p, narrow[i], c->out_dtype, cand, want,
                                                     sim, part, pr);
        if (pr->rc) {
            free(part);
            return TK_SCHEDULE_UNKNOWN;
        }
        double e_first = -1.0, e_most = -1.0;   /* of the orders that overflow alike */
        for (int order = 0; order < 2; order++) {
            if (!tk__simulate(threads, p, narrow[i], order, pack, sim, pr)) {
                free(part);
                return TK_SCHEDULE_UNKNOWN;
            }
            tk__cast_through(c->out_dtype, sim, count);   /* as the candidate's are */
            if (!over)
                near[i] = fmin(near[i], tk__match_share(cand, want, count, sim, 1, count));
            if (!tk__same_overflow(cand, sim, want, s, count))
                continue;
            double e_sim = tk__rms(sim, s, count);
            e_first = e_first < 0.0 ? e_sim : e_first;
            e_most = fmax(e_most, e_sim);
        }
        if (window)
            continue;
        if (e_most < 0.0 || !(e_cand <= TK__NARROW_SLACK * e_most))
            continue;
        double ratio = e_cand / e_first;
        bool held = tk__held_in(narrow[i], c->out_dtype, cand, want, count);
        int rank = held ? 2 : narrow[i] == c->dtype ? 1 : 0;
        double key = held ? -r.u : fabs(log(ratio));   /* smaller is better */
        if (rank > best_rank || (rank == best_rank && key < best_key)) {
            best_rank = rank;
            best_key = key;
            pick = named[i];
        }
    }
    free(part);
    /* Where both formats match, one at most half as far off is named; a
     * tie (a bfloat16 output's cast can hide which format summed) goes to
     * the rules, or to the nearer where the window check left them none. */
    bool m[2] = {near[0] <= TK__MATCH_SHARE, near[1] <= TK__MATCH_SHARE};
    if (m[0] && m[1])
        return near[0] <= 0.5 * near[1]    ? named[0]
               : near[1] <= 0.5 * near[0]  ? named[1]
               : pick != TK_SCHEDULE_UNKNOWN ? pick
                                             : named[near[1] < near[0]];
    return m[0] ? named[0] : m[1] ? named[1] : pick;
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
    /* The block tk__audit_reduction allocates, in elements of 1 byte, with
     * packing scratch for as many threads as a kernel may have. */
    int64_t mk, kn, mn, in_bytes, per_out, pack;
    per_out = tk__esize(out_dtype) + 3 * 4 + 5 * 8 + 5 * 64;
    if (!tk__mul(m, k, &mk) || !tk__mul(k, reduce == TK__REDUCE_MATMUL ? n : 0, &kn) ||
        !tk__mul(m, n, &mn) || mk > INT64_MAX - kn ||
        !tk__mul(mk + kn, tk__esize(dtype) + 4, &in_bytes) || !tk__mul(mn, per_out, &mn) ||
        !tk__mul(n / TK__NR + 1, TK__KC * TK__NR * 3, &pack) ||
        !tk__add(pack, TK__MC_PACK * TK__KC * 3, &pack) ||
        !tk__mul(pack, 8 * TK__KO * TK_KERNEL_MAX_THREADS, &pack) ||
        in_bytes > INT64_MAX - mn || in_bytes + mn > INT64_MAX - pack ||
        (uint64_t)(in_bytes + mn + pack) > SIZE_MAX)
        return tk__fail(TK_EOVERFLOW, "tk_audit_add_reduction_case: %lld x %lld x %lld "
                        "overflows the audit's working memory", (long long)m, (long long)k,
                        (long long)n);
    return TK_OK;
}

/* One thread's rows [r0, r1) of the passes after the oracle: the oracle's
 * cast and the original reference in f32, the largest error/bound ratio,
 * the two comparisons and the largest parts of the gap (a NaN passed over,
 * as fmax does).  Each is folded with the next rows' in row order. */
typedef struct {
    tk__acc acc;
    int64_t r0, r1, n, k;
    int out_dtype;
    const float *cand;
    float *want, *so32;
    const double *s, *A, *o;   /* o NULL: float32 inputs, no input part */
    tk__cmp impl, gap;
    double worst, bound, in_part, out_part, scale;
    int64_t at;
} tk__post;

/* The largest parts of the gap over elements [e0, e1) and the largest
 * original reference, one vectorized pass on the path tk__isa() picks.
 * Magnitudes' bits order like them, signed too (AVX2 compares only those
 * in vector lanes); a NaN's count 0. */
TK_DISPATCH(tk__parts, (tk__post *t, int64_t e0, int64_t e1), (t, e0, e1))
{
    const double *o = t->o ? t->o : t->s;   /* float32 inputs: no input part */
    int64_t in = 0, out = 0, scale = 0;
    for (int64_t e = e0; e < e1; e++) {
        double vi = fabs(o[e] - t->s[e]), vo = fabs((double)t->cand[e] - t->s[e]),
               vs = fabs(t->so32[e]);
        int64_t bi = (int64_t)(tk__f64_bits(vi) & (0 - (uint64_t)(vi == vi))),
                bo = (int64_t)(tk__f64_bits(vo) & (0 - (uint64_t)(vo == vo))),
                bs = (int64_t)(tk__f64_bits(vs) & (0 - (uint64_t)(vs == vs)));
        in = bi > in ? bi : in;
        out = bo > out ? bo : out;
        scale = bs > scale ? bs : scale;
    }
    t->in_part = tk__f64_value((uint64_t)in);
    t->out_part = tk__f64_value((uint64_t)out);
    t->scale = tk__f64_value((uint64_t)scale);
}

static void *tk__post_run(void *arg)
{
    tk__post *t = arg;
    int64_t e0 = t->r0 * t->n, e1 = t->r1 * t->n;
    for (int64_t e = e0; e < e1; e++) {
        t->want[e] = (float)t->s[e];
        t->so32[e] = (float)(t->o ? t->o[e] : t->s[e]);
    }
    if (t->out_dtype != TK_DTYPE_F32)   /* float32's rounding is the cast above */
        for (int64_t e = e0; e < e1; e++)
            t->want[e] = tk__round_to(t->out_dtype, t->want[e]);
    t->at = 0;
    t->bound = 0.0;
    t->worst = tk__worst(&t->acc, t->k, e1 - e0, t->cand + e0, t->want + e0, t->s + e0,
                         t->A + e0, &t->at, &t->bound);
    t->at += e0;
    tk__cmp_rows(&t->impl, t->r0, 0, t->r1 - t->r0, t->n, t->cand + e0, t->want + e0);
    tk__cmp_rows(&t->gap, t->r0, 0, t->r1 - t->r0, t->n, t->cand + e0, t->so32 + e0);
    tk__parts(t, e0, e1);
    return NULL;
}

int tk__audit_reduction(tk_audit *a, int64_t index, tk__case_result *res)
{
    const tk__case *c = &a->cases[index];
    const tk_kernel *kc = a->k;
    bool mm = kc->reduce == TK__REDUCE_MATMUL;
    int64_t m = c->rows, n = c->cols, k = c->depth, mk = m * k, kn = mm ? k * n : 0;
    int64_t count = m * n, threads = tk__pass_threads(kc, m);
    size_t es = (size_t)tk__esize(c->dtype), eo = (size_t)tk__esize(c->out_dtype);
    /* One block: stored inputs and output, promoted inputs, the candidate
     * and the oracle's cast in f32, five float64 planes (the oracle, its
     * alternative, the magnitudes, theirs, the originals' sums) and each
     * thread's packing scratch.  Its size was checked when the case was
     * added (tk__reduction_check). */
    size_t sizes[] = {(size_t)(mk + kn) * es, (size_t)count * eo,
                      (size_t)(mk + kn) * sizeof(float), 3 * (size_t)count * sizeof(float),
                      5 * (size_t)count * sizeof(double),
                      (size_t)(threads * tk__pack_doubles(n, k)) * sizeof(double)};
    size_t off[7] = {0};
    for (int i = 0; i < 6; i++)
        off[i + 1] = off[i] + (sizes[i] + 63) / 64 * 64;
    if (!tk__keep(&a->work, &a->work_bytes, off[6]))
        return tk__fail(TK_ENOMEM, "tk_audit_run: out of memory for %zu bytes of case %lld",
                        off[6], (long long)index);
    char *mem = a->work;
    char *stored = mem, *outp = mem + off[1];
    float *px = (float *)(void *)(mem + off[2]), *py = mm ? px + mk : NULL;
    float *cand = (float *)(void *)(mem + off[3]), *want = cand + count, *so32 = want + count;
    double *s = (double *)(void *)(mem + off[4]), *s2 = s + count, *A = s2 + count,
           *A2 = A + count, *o = A2 + count, *pack = (double *)(void *)(mem + off[5]);

    tk__row_from_f32(c->dtype, c->orig, stored, mk + kn);
    tk__row_to_f32(c->dtype, stored, px, mk + kn);
    if (kc->axpy.arith & TK_ARITH_FTZ)   /* the oracle reads subnormal inputs as zeros */
        for (int64_t e = 0; e < mk + kn; e++)
            px[e] = tk__ftz(px[e]);
    tk_matrix *in[2] = {NULL, NULL}, *out = NULL;
    int rc = tk_matrix_wrap(&in[0], c->dtype, m, k, k, stored);
    if (!rc && mm)
        rc = tk_matrix_wrap(&in[1], c->dtype, k, n, n, stored + (size_t)mk * es);
    if (!rc)
        rc = tk_matrix_wrap(&out, c->out_dtype, m, n, n, outp);
    /* float32 inputs are stored as they are: unless the contract flushes
     * them, the original reference is the oracle itself and the gap has no
     * input part. */
    bool exact = c->dtype == TK_DTYPE_F32 && !(kc->axpy.arith & TK_ARITH_FTZ);
    tk__pass p = {m, k, n, px, py, exact ? NULL : c->orig, mm ? c->orig + mk : NULL,
                  c->dtype, k, false, NULL, false, false};
    p.mag32 = tk__oracle_mag32(&p);
    fenv_t left;
    bool ran = false;   /* the candidate returned 0: its environment goes back */
    /* The candidate runs first on the calling thread, which reports the
     * oracle's sums once it takes its share. */
    tk__progress pr = {.a = a, .index = index, .step = "oracle"};
    if (!rc)
        rc = tk__progress_report(a, index, "candidate", 0.0);
    if (!rc) {
        memset(outp, 0xFF, (size_t)count * eo);   /* NaN, so unwritten elements show */
        /* The main pass, started beside the candidate. */
        tk__chunks w = {.p = p, .s = s, .A = A, .o = exact ? NULL : o, .pack = pack, .a = a,
                        .pr = &pr, .in = (const tk_matrix *const *)in, .out = out};
        tk__run_chunks(threads, &w);
        int cb = w.cb;
        left = w.left;
        ran = !cb;
        if (cb)
            rc = tk__fail(TK_ECALLBACK, "tk_audit_run: candidate returned %d for case %lld "
                          "(%lldx%lldx%lld %s)", cb, (long long)index, (long long)m, (long long)k,
                          (long long)n, tk_dtype_name(c->dtype));
        else
            rc = pr.rc;
    }
    if (!rc)
        rc = tk__progress_report(a, index, "measure", 0.0);
    if (!rc) {
        tk__row_to_f32(c->out_dtype, outp, cand, count);
        int d = tk__gap_dtype(c);
        tk__post one, *post = threads > 1 ? malloc((size_t)threads * sizeof *post) : NULL;
        int64_t nt = post ? threads : 1;
        if (!post)
            post = &one;
        tk__acc acc = tk__acc_of(kc->reduce, c->dtype, kc->accum, c->out_dtype,
                                 kc->axpy.arith & TK_ARITH_FTZ);
        acc.mag32 = p.mag32;
        for (int64_t t = 0; t < nt; t++) {
            post[t] = (tk__post){.acc = acc,
                                 .r0 = m * t / nt, .r1 = m * (t + 1) / nt, .n = n, .k = k,
                                 .out_dtype = c->out_dtype, .cand = cand, .want = want,
                                 .so32 = so32, .s = s, .A = A, .o = exact ? NULL : o};
            tk__cmp_init(&post[t].impl, c->out_dtype, 0.0, 0.0, 0, TK_NAN_MATCH, true);
            tk__cmp_init(&post[t].gap, c->out_dtype, a->gap_atol[d], a->gap_rtol[d], -1,
                         TK_NAN_MATCH, false);
        }
        tk__fan_out(a->pool, post, sizeof *post, nt, tk__post_run);
        /* Fold in row order: a tie keeps the earlier row's position. */
        for (int64_t t = 1; t < nt; t++) {
            tk__cmp_merge(&post[0].impl, &post[t].impl);
            tk__cmp_merge(&post[0].gap, &post[t].gap);
            if (post[t].worst > post[0].worst) {
                post[0].worst = post[t].worst;
                post[0].at = post[t].at;
                post[0].bound = post[t].bound;
            }
            post[0].in_part = fmax(post[0].in_part, post[t].in_part);
            post[0].out_part = fmax(post[0].out_part, post[t].out_part);
            post[0].scale = fmax(post[0].scale, post[t].scale);
        }
        res->bounded = true;
        res->ratio = post[0].worst;
        res->bound = post[0].bound;
        res->ratio_row = post[0].at / n;
        res->ratio_col = post[0].at % n;
        res->impl = post[0].impl;
        res->gap = post[0].gap;
        res->input_part = (float)post[0].in_part;
        res->output_part = (float)post[0].out_part;
        res->scale = (float)post[0].scale;
        if (post != &one)
            free(post);
        res->diagnosis = TK_SCHEDULE_NOT_RUN;
        if (!tk__case_passed(res) && !(rc = tk__progress_report(a, index, "diagnosis", 0.0))) {
            pr.step = "diagnosis";
            res->diagnosis = tk__diagnose_reduction(c, kc, threads, p, cand, want, s, A, s2, A2,
                                                    pack, so32, &pr,
                                                    (const tk_matrix *const *)in, out);
            rc = pr.rc;
        }
    }
    tk_matrix_destroy(in[0]);
    tk_matrix_destroy(in[1]);
    tk_matrix_destroy(out);
    if (ran)
        fesetenv(&left);
    return rc;
}
