/* audit.c - tk_audit: a candidate against the represented-input oracle
 * (implementation error) and, separately, against the body on the original
 * f32 data (precision gap, split into input representation and output cast).
 * Neither reference goes through the tiling or the host executor: both are
 * plain loops over contiguous blocks of the planes. */
#include "internal.h"

#include <fenv.h>
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The references run over blocks that are contiguous spans of the
 * row-major planes (stored planes have row stride == cols): whole rows when
 * rows are short, else pieces of one row.  A block holds at most
 * TK__BLOCK_ELEMS elements, so its scratch stays in the first-level cache,
 * and each body call still covers enough elements to amortize the call. */
#define TK__BLOCK_ELEMS 1024

typedef struct tk__span {
    int64_t r0, c0, nr, nc;  /* the block: rows r0.., columns c0.. */
    int64_t off, ne;         /* first element's plane offset, element count */
} tk__span;

/* The contract's body on block b of case c, for a reference; a non-zero
 * return becomes TK_ECALLBACK naming the case and the block. */
static int tk__apply(const tk_audit *a, const tk__case *c, const tk__span *b,
                     const float *const *in, float *out)
{
    int rc = tk__body(a->k, b->nr, b->nc, b->nc, in, out);
    if (rc)
        return tk__fail(TK_ECALLBACK, "tk_audit_run: the contract's body returned %d for "
                        "case %lld (%lldx%lld %s) on the %lldx%lld block at row %lld, "
                        "column %lld", rc, (long long)(c - a->cases), (long long)c->rows,
                        (long long)c->cols, tk_dtype_name(c->dtype), (long long)b->nr,
                        (long long)b->nc, (long long)b->r0, (long long)b->c0);
    return TK_OK;
}

/* Advance *b to the next block (start from ne == 0); false past the end. */
static bool tk__next_span(const tk__case *c, tk__span *b)
{
    bool short_rows = c->cols < TK__BLOCK_ELEMS;
    int64_t height = short_rows ? TK__BLOCK_ELEMS / c->cols : 1;
    int64_t width = short_rows ? c->cols : TK__BLOCK_ELEMS;
    if (b->ne == 0) {
        b->r0 = b->c0 = 0;
    } else if (b->c0 + b->nc < c->cols) {
        b->c0 += b->nc;
    } else {
        b->r0 += b->nr;
        b->c0 = 0;
    }
    if (b->r0 >= c->rows)
        return false;
    b->nr = height < c->rows - b->r0 ? height : c->rows - b->r0;
    b->nc = width < c->cols - b->c0 ? width : c->cols - b->c0;
    b->off = b->r0 * c->cols + b->c0;
    b->ne = b->nr * b->nc;
    return true;
}

/* The stored elements of a block. */
static void *tk__span_data(const tk_matrix *m, const tk__span *b)
{
    return (char *)m->data + (size_t)b->off * (size_t)tk__esize(m->dtype);
}

/* An audit whose candidate is running refuses changes and runs (TK_ESTATE):
 * a candidate that added a case or ran the audit again would grow or free
 * what the run is using. */
static int tk__not_running(const char *fn, const tk_audit *a)
{
    return a->running ? tk__fail(TK_ESTATE, "%s: the audit is running (this call came from "
                                 "its candidate or progress callback); a running audit "
                                 "cannot be changed or run again", fn) : TK_OK;
}

static void tk__invalidate(tk_audit *a)
{
    free(a->res);
    a->res = NULL;
}

int tk_audit_create(tk_audit **out, const tk_kernel *contract)
{
    if (!out)
        return tk__fail(TK_EINVAL, "tk_audit_create: out is NULL");
    *out = NULL;
    if (!contract)
        return tk__fail(TK_EINVAL, "tk_audit_create: contract kernel is NULL");
    if (contract->body_kind != TK_BODY_ELEMENTWISE)
        return tk__fail(TK_EINVAL, "tk_audit_create: the contract's body kind is %d "
                        "(TK_BODY_BLOCKWISE); the audit's references call the body "
                        "on blocks of rows, so only TK_BODY_ELEMENTWISE (%d) "
                        "contracts can be audited", contract->body_kind,
                        TK_BODY_ELEMENTWISE);
    tk_audit *a = calloc(1, sizeof *a);
    if (a && !(a->pool = tk__pool_new())) {
        free(a);
        a = NULL;
    }
    if (!a)
        return tk__fail(TK_ENOMEM, "tk_audit_create: out of memory");
    a->k = contract;
    for (int d = TK_DTYPE_F32; d <= TK__DTYPE_MAX; d++)
        tk__tolerance_default(d, &a->gap_atol[d], &a->gap_rtol[d]);
    *out = a;
    return TK_OK;
}

void tk_audit_destroy(tk_audit *a)
{
    if (!a)
        return;
    for (int64_t i = 0; i < a->n_cases; i++)
        free(a->cases[i].orig);
    free(a->cases);
    free(a->res);
    free(a->work);
    tk__pool_free(a->pool);
    free(a);
}

int tk_audit_set_candidate(tk_audit *a, tk_candidate_fn fn, void *user)
{
    if (!a || !fn)
        return tk__fail(TK_EINVAL, "tk_audit_set_candidate: %s is NULL",
                        !a ? "handle" : "candidate function");
    if (a->running)
        return tk__not_running("tk_audit_set_candidate", a);
    a->fn = fn;
    a->user = user;
    tk__invalidate(a);
    return TK_OK;
}

int tk_audit_set_progress(tk_audit *a, tk_progress_fn fn, void *user)
{
    if (!a)
        return tk__fail(TK_EINVAL, "tk_audit_set_progress: handle is NULL");
    if (a->running)
        return tk__not_running("tk_audit_set_progress", a);
    a->progress = fn;
    a->progress_user = user;
    return TK_OK;
}

int tk__progress_report(const tk_audit *a, int64_t index, const char *step, double fraction)
{
    if (!a->progress)
        return TK_OK;
    /* Whatever environment the callback leaves, the case goes on under its own. */
    fenv_t env;
    fegetenv(&env);
    int rc = a->progress(a->progress_user, index, step, fraction);
    fesetenv(&env);
    return rc ? tk__fail(TK_ECALLBACK, "tk_audit_run: the progress callback returned %d "
                         "in the %s step of case %lld; the run stopped", rc, step,
                         (long long)index) : TK_OK;
}

int tk_audit_set_gap_tolerance(tk_audit *a, int dtype, double atol, double rtol)
{
    if (!a)
        return tk__fail(TK_EINVAL, "tk_audit_set_gap_tolerance: handle is NULL");
    if (a->running)
        return tk__not_running("tk_audit_set_gap_tolerance", a);
    if (!tk__is_float_dtype(dtype))
        return tk__fail(TK_EDTYPE, "tk_audit_set_gap_tolerance: dtype %d (%s) is not "
                        TK__FLOAT_DTYPES, dtype,
                        tk__dtype_label(dtype));
    if (!(atol >= 0.0 && atol <= DBL_MAX) || !(rtol >= 0.0 && rtol <= DBL_MAX))
        return tk__fail(TK_ERANGE, "tk_audit_set_gap_tolerance: atol %g and rtol %g "
                        "must be finite and >= 0", atol, rtol);
    a->gap_atol[dtype] = atol;
    a->gap_rtol[dtype] = rtol;
    tk__invalidate(a);
    return TK_OK;
}

/* Room for one more case. */
static int tk__grow(tk_audit *a, const char *fn)
{
    if (a->n_cases < a->cap)
        return TK_OK;
    int64_t cap = a->cap ? 2 * a->cap : 8;
    tk__case *grown = realloc(a->cases, (size_t)cap * sizeof *grown);
    if (!grown)
        return tk__fail(TK_ENOMEM, "%s: out of memory for %lld cases", fn, (long long)cap);
    a->cases = grown;
    a->cap = cap;
    return TK_OK;
}

int tk_audit_add_case(tk_audit *a, int dtype, int64_t rows, int64_t cols,
                      const float *const *originals)
{
    if (!a || !originals)
        return tk__fail(TK_EINVAL, "tk_audit_add_case: %s is NULL",
                        !a ? "handle" : "originals");
    if (a->running)
        return tk__not_running("tk_audit_add_case", a);
    if (a->k->reduce)
        return tk__fail(TK_EINVAL, "tk_audit_add_case: the contract is a reduction; add "
                        "its cases with tk_audit_add_reduction_case");
    if (!tk__is_float_dtype(dtype))
        return tk__fail(TK_EDTYPE, "tk_audit_add_case: dtype %d (%s) is not "
                        TK__FLOAT_DTYPES "; kernels reject integer data", dtype,
                        tk__dtype_label(dtype));
    if (rows < 1 || cols < 1)
        return tk__fail(TK_ESHAPE, "tk_audit_add_case: shape must be positive: got "
                        "%lldx%lld", (long long)rows, (long long)cols);
    int n = a->k->n_inputs;
    for (int i = 0; i < n; i++)
        if (!originals[i])
            return tk__fail(TK_EINVAL, "tk_audit_add_case: originals[%d] is NULL "
                            "(the contract has %d inputs)", i, n);
    int64_t plane;
    size_t bytes;
    if (!tk__mul(rows, cols, &plane))
        return tk__fail(TK_EOVERFLOW, "tk_audit_add_case: %lldx%lld overflows",
                        (long long)rows, (long long)cols);
    int rc = tk__bytes("tk_audit_add_case", plane, n, sizeof(float), &bytes);
    if (rc || (rc = tk__grow(a, "tk_audit_add_case")))
        return rc;
    float *copy = malloc(bytes);
    if (!copy)
        return tk__fail(TK_ENOMEM, "tk_audit_add_case: out of memory for %zu bytes",
                        bytes);
    for (int i = 0; i < n; i++)
        memcpy(copy + i * plane, originals[i], (size_t)plane * sizeof(float));
    a->cases[a->n_cases++] = (tk__case){dtype, dtype, rows, cols, 0, copy};
    tk__invalidate(a);
    return TK_OK;
}

int tk_audit_add_reduction_case(tk_audit *a, int dtype, int out_dtype, int64_t m,
                                int64_t k, int64_t n, const float *const *originals)
{
    const char *fn = "tk_audit_add_reduction_case";
    if (!a || !originals)
        return tk__fail(TK_EINVAL, "%s: %s is NULL", fn, !a ? "handle" : "originals");
    if (a->running)
        return tk__not_running(fn, a);
    int reduce = a->k->reduce, acc = a->k->accum;
    if (!reduce)
        return tk__fail(TK_EINVAL, "%s: the contract is elementwise; add its cases with "
                        "tk_audit_add_case", fn);
    for (int i = 0; i < 2; i++) {
        int d = i ? out_dtype : dtype;
        if (!tk__is_float_dtype(d))
            return tk__fail(TK_EDTYPE, "%s: %s dtype %d (%s) is not " TK__FLOAT_DTYPES, fn,
                            i ? "output" : "input", d,
                            tk__dtype_label(d));
    }
    if (!tk__dtype_holds(acc, dtype))
        return tk__fail(TK_EDTYPE, "%s: the contract accumulates in %s, which cannot hold "
                        "every %s input: mismatched accumulation", fn, tk_dtype_name(acc),
                        tk_dtype_name(dtype));
    if (m < 1 || k < 1 || n < 1)
        return tk__fail(TK_ESHAPE, "%s: m, k and n must be positive: got %lld, %lld, %lld",
                        fn, (long long)m, (long long)k, (long long)n);
    if (reduce == TK__REDUCE_ROW_SUM && n != 1)
        return tk__fail(TK_ESHAPE, "%s: a row sum has one output column: n is %lld, not 1",
                        fn, (long long)n);
    for (int i = 0; i < a->k->n_inputs; i++)
        if (!originals[i])
            return tk__fail(TK_EINVAL, "%s: originals[%d] is NULL (the contract has %d "
                            "inputs)", fn, i, a->k->n_inputs);
    int rc = tk__reduction_check(acc, reduce, m, k, n, dtype, out_dtype);
    if (rc || (rc = tk__grow(a, fn)))
        return rc;
    int64_t mk = m * k, kn = k * n;   /* no overflow: checked just above */
    size_t bytes = (size_t)(mk + (reduce == TK__REDUCE_MATMUL ? kn : 0)) * sizeof(float);
    float *copy = malloc(bytes);
    if (!copy)
        return tk__fail(TK_ENOMEM, "%s: out of memory for %zu bytes", fn, bytes);
    memcpy(copy, originals[0], (size_t)mk * sizeof(float));
    if (reduce == TK__REDUCE_MATMUL)
        memcpy(copy + mk, originals[1], (size_t)kn * sizeof(float));
    a->cases[a->n_cases++] = (tk__case){dtype, out_dtype, m, n, k, copy};
    tk__invalidate(a);
    return TK_OK;
}

int64_t tk_audit_case_count(const tk_audit *a)
{
    if (!a)
        return tk__fail(TK_EINVAL, "tk_audit_case_count: handle is NULL");
    return a->n_cases;
}

/* ---- running the candidate --------------------------------------------- */

static void tk__destroy_all(tk_matrix **m, int n)
{
    for (int i = 0; i < n; i++)
        tk_matrix_destroy(m[i]);
}

/* A plane's bytes, rounded up to a 64-byte line: planes laid out one
 * after another each start on a line, so that whole lines of them can be
 * written by streaming stores (a line written partly that way and partly
 * by ordinary stores goes out slowly). */
static size_t tk__plane_bytes(const tk__case *c)
{
    return ((size_t)(c->rows * c->cols) * (size_t)tk__esize(c->dtype) + 63) / 64 * 64;
}

/* The bytes of n_planes planes and the slack to start them on a line. */
static int tk__planes_bytes(const tk__case *c, int n_planes, size_t *bytes)
{
    int rc = tk__bytes("tk_audit_run", c->rows * c->cols, n_planes * tk__esize(c->dtype), 1,
                       bytes);
    /* At most 63 per plane to round up, and 63 to align the first (no
     * overflow: tk__bytes stays under PTRDIFF_MAX). */
    if (!rc)
        *bytes += 64 * (size_t)(n_planes + 1);
    return rc;
}

/* n matrices of the case's shape and dtype over consecutive planes from
 * the first line of mem. */
static int tk__wrap_planes(const tk__case *c, char *mem, int n, tk_matrix **m)
{
    size_t plane = tk__plane_bytes(c);
    mem = (char *)(((uintptr_t)mem + 63) / 64 * 64);
    for (int i = 0; i < n; i++) {
        int rc = tk_matrix_wrap(&m[i], c->dtype, c->rows, c->cols, c->cols,
                                mem + (size_t)i * plane);
        if (rc) {
            tk__destroy_all(m, i);
            return rc;
        }
    }
    return TK_OK;
}

/* The stored inputs: each original represented in the case's dtype. */
static void tk__represent(const tk_audit *a, const tk__case *c, tk_matrix **in)
{
    int64_t plane = c->rows * c->cols;
    for (int i = 0; i < a->k->n_inputs; i++)
        tk__row_from_f32(c->dtype, c->orig + i * plane, in[i]->data, plane);
}

/* Run the candidate into out pre-filled with NaN (all bits set, a NaN in
 * every float dtype), so elements it never writes show up as mismatches;
 * `filled`: out holds those bits already.  The floating-point environment
 * it leaves goes to *left, and the one it began with stays for the passes
 * after it. */
static int tk__run_candidate(const char *fn, const tk_audit *a, int64_t index,
                             tk_matrix **in, tk_matrix *out, bool filled, fenv_t *left)
{
    const tk__case *c = &a->cases[index];
    if (!filled)
        memset(out->data, 0xFF,
               (size_t)(c->rows * c->cols) * (size_t)tk__esize(c->dtype));
    fenv_t start;
    fegetenv(&start);
    int rc = a->fn(a->user, (const tk_matrix *const *)in, out);
    fegetenv(left);
    fesetenv(&start);
    if (rc)
        return tk__fail(TK_ECALLBACK, "%s: candidate returned %d for case %lld "
                        "(%lldx%lld %s)", fn, rc, (long long)index, (long long)c->rows,
                        (long long)c->cols, tk_dtype_name(c->dtype));
    return TK_OK;
}

/* Room for n_planes planes of the case, from the audit's kept buffer. */
static int tk__work(tk_audit *a, const tk__case *c, int n_planes, char **mem)
{
    size_t bytes;
    int rc = tk__planes_bytes(c, n_planes, &bytes);
    if (rc)
        return rc;
    if (!tk__keep(&a->work, &a->work_bytes, bytes))
        return tk__fail(TK_ENOMEM, "tk_audit_run: out of memory for %zu bytes of stored "
                        "inputs and output", bytes);
    *mem = a->work;
    return TK_OK;
}

/* ---- both references and every metric, in one pass over the blocks ---- */

#if TK__ISA_X86
#include <immintrin.h>

/* The bf16 halves of sixteen rounded lanes to d: by a streaming store
 * when `stream` (the caller has checked that d starts a half line). */
TK__ON_AVX512 static inline void tk__bf16_put_512(uint16_t *d, __m512i r, bool stream)
{
    __m256i h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
    if (stream)
        _mm256_stream_si256((__m256i *)(void *)d, h);
    else
        _mm256_storeu_si256((__m256i *)(void *)d, h);
}

/* The same put on the AVX2 path takes two vectors, a half line of
 * codes. */
TK__ON_AVX2 static inline __m256i tk__bf16_pack_256(__m256i c0, __m256i c1)
{
    /* packus interleaves 128-bit lanes; the permute puts them back in order
     * (the codes fit 16 bits, so nothing saturates). */
    return _mm256_permute4x64_epi64(_mm256_packus_epi32(c0, c1), 0xD8);
}

TK__ON_AVX2 static inline void tk__bf16_put_codes_256(uint16_t *d, __m256i c0, __m256i c1,
                                                     bool stream)
{
    __m256i h = tk__bf16_pack_256(c0, c1);
    if (stream)
        _mm256_stream_si256((__m256i *)(void *)d, h);
    else
        _mm256_storeu_si256((__m256i *)(void *)d, h);
}

TK__ON_AVX2 static inline void tk__bf16_put_256(uint16_t *d, __m256i r0, __m256i r1,
                                               bool stream)
{
    tk__bf16_put_codes_256(d, _mm256_srli_epi32(r0, 16), _mm256_srli_epi32(r1, 16), stream);
}

/* tk__store's bfloat16 case on the AVX-512 and AVX2 paths, sixteen floats
 * a step (the compiled loop ran in half-width vectors, its constants
 * rebuilt every step, and took a quarter more time in the pass on
 * AVX-512); returns the elements done, the rest left to the scalar loop. */
TK__ON_AVX512 static int64_t tk__store_bf16_512(const float *restrict src,
                                               uint16_t *restrict d, float *restrict p,
                                               int64_t n, bool stream)
{
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512i r = tk__bf16_round_512(_mm512_loadu_ps(src + j));
        tk__bf16_put_512(d + j, r, stream);
        _mm512_storeu_ps(p + j, _mm512_castsi512_ps(r));
    }
    return j;
}

TK__ON_AVX2 static int64_t tk__store_bf16_256(const float *restrict src, uint16_t *restrict d,
                                             float *restrict p, int64_t n, bool stream)
{
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m256i r0 = tk__bf16_round_256(_mm256_loadu_ps(src + j)),
                r1 = tk__bf16_round_256(_mm256_loadu_ps(src + j + 8));
        tk__bf16_put_256(d + j, r0, r1, stream);
        _mm256_storeu_ps(p + j, _mm256_castsi256_ps(r0));
        _mm256_storeu_ps(p + j + 8, _mm256_castsi256_ps(r1));
    }
    return j;
}
#endif

/* Store n f32 values in the dtype at dst (round to nearest even) and their
 * stored values, promoted back to f32, in p; `stream` (AVX-512 or AVX2 and
 * bf16 only, dst starting a half line): dst by streaming stores. */
TK_DISPATCH(tk__store, (int dtype, const float *restrict src, void *restrict dst, float *restrict p, int64_t n, bool stream),
            (dtype, src, dst, p, n, stream))
{
    if (dtype == TK_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof *src);
        memcpy(p, src, (size_t)n * sizeof *src);
        return;
    }
    if (dtype != TK_DTYPE_BF16) {
        tk__row_from_f32(dtype, src, dst, n);
        tk__row_to_f32(dtype, dst, p, n);
        return;
    }
    int64_t done = 0;
#if TK__ISA_X86
    if (tk__isa() == TK__ISA_AVX512)
        done = tk__store_bf16_512(src, dst, p, n, stream);
    else if (tk__isa() == TK__ISA_AVX2)
        done = tk__store_bf16_256(src, dst, p, n, stream);
#else
    (void)stream;
#endif
    uint16_t *d = dst;
    for (int64_t j = done; j < n; j++) {
        uint32_t w = tk__bf16_round(tk__f32_bits(src[j]));
        d[j] = (uint16_t)(w >> 16);
        p[j] = tk__f32_value(w);
    }
}

/* The original elements after this block (blocks are consecutive in the
 * plane), which the oracle's cast prefetches while this block computes:
 * the next TK__BLOCK_ELEMS into L1, the TK__BLOCK_ELEMS after those into
 * L2 (L1 holds this block's buffers and no more).  The hardware prefetcher
 * stops at each 4 KiB page, so each block would otherwise start on cold
 * reads.  Prefetched by the cast rather than by the store that reads them
 * first, the loads overlap the computing of this block: on an Intel Xeon
 * the audit of a 4096x4096 bfloat16 case took a tenth less time.  Reaching
 * a block further keeps memory busy through the computing of two: on an
 * AMD EPYC Zen 4 the audit read 2.84 to 2.98 the fused loop where it read
 * 3.12 to 3.26, in alternating runs.  The AMD tuning fetches nothing: on
 * an AMD EPYC Zen 3 the audit read 3.83 to 3.87 the fused streaming loop
 * so, 4.03 to 4.2 with the two blocks fetched. */
typedef struct tk__ahead {
    const float *at[TK_KERNEL_MAX_INPUTS];
    int n;
    int64_t len, far;   /* elements of each for L1, and after those for L2 */
} tk__ahead;

/* The `lines` lines (16 elements each) of each of the first n inputs (a->n,
 * or that number as a constant where the caller knows it) from element j;
 * where all are in range, without a test per line (constants unroll: the
 * tests cost the AVX2 cast a fifth of its instructions). */
static inline void tk__prefetch_ahead(const tk__ahead *a, int n, int64_t j, int lines)
{
    if (a->len <= 0)
        return;   /* the last block, or the AMD tuning */
    if (j + 16 * lines <= a->len && j + 16 * lines <= a->far) {
        for (int i = 0; i < n; i++)
            for (int l = 0; l < lines; l++) {
                __builtin_prefetch(a->at[i] + j + 16 * l);
                __builtin_prefetch(a->at[i] + TK__BLOCK_ELEMS + j + 16 * l, 0, 2);
            }
        return;
    }
    for (int l = 0; l < lines; l++, j += 16) {
        if (j < a->len)
            for (int i = 0; i < n; i++)
                __builtin_prefetch(a->at[i] + j);
        if (j < a->far)
            for (int i = 0; i < n; i++)
                __builtin_prefetch(a->at[i] + TK__BLOCK_ELEMS + j, 0, 2);
    }
}

/* max(m, |v|) on bit patterns, which order like the values they stand for
 * when non-negative; NaN never wins.  Branch-free on int32 (no sign bit is
 * left), so the loops vectorize. */
static inline int32_t tk__max_abs_bits(int32_t m, float v)
{
    int32_t u = (int32_t)(tk__f32_bits(v) & 0x7FFFFFFFu);
    u = u > 0x7F800000 ? 0 : u;
    return u > m ? u : m;
}

#if TK__ISA_X86
/* tk__max_abs_bits on sixteen lanes. */
TK__ON_AVX512 static inline __m512i tk__max_abs_512(__m512i m, __m512 v)
{
    __m512i u = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7FFFFFFF));
    __mmask16 nan = _mm512_cmpgt_epi32_mask(u, _mm512_set1_epi32(0x7F800000));
    return _mm512_max_epi32(m, _mm512_maskz_mov_epi32((__mmask16)~nan, u));
}

/* tk__cast_parts' bfloat16 case on the AVX-512 path, sixteen floats a
 * step, into the maxima part[]; returns the elements done, the rest left
 * to the scalar loop. */
TK__ON_AVX512 static int64_t tk__cast_parts_bf16_512(const float *restrict t,
                                                    const float *restrict ref,
                                                    uint16_t *restrict d, float *restrict o,
                                                    int64_t n, int32_t part[3], bool stream,
                                                    const tk__ahead *ahead)
{
    __m512i in_part = _mm512_set1_epi32(part[0]), out_part = _mm512_set1_epi32(part[1]),
            scale = _mm512_set1_epi32(part[2]);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        tk__prefetch_ahead(ahead, ahead->n, j, 1);
        __m512 v = _mm512_loadu_ps(t + j), e = _mm512_loadu_ps(ref + j);
        __m512i r = tk__bf16_round_512(v);
        __m512 oj = _mm512_castsi512_ps(r);
        tk__bf16_put_512(d + j, r, stream);
        _mm512_storeu_ps(o + j, oj);
        in_part = tk__max_abs_512(in_part, _mm512_sub_ps(v, e));
        out_part = tk__max_abs_512(out_part, _mm512_sub_ps(oj, v));
        scale = tk__max_abs_512(scale, e);
    }
    part[0] = _mm512_reduce_max_epi32(in_part);
    part[1] = _mm512_reduce_max_epi32(out_part);
    part[2] = _mm512_reduce_max_epi32(scale);
    return j;
}

/* max(m, bits of |v|) on eight lanes, a NaN's bits included; and the
 * largest of eight lanes. */
TK__ON_AVX2 static inline __m256i tk__max_bits_256(__m256i m, __m256 v)
{
    return _mm256_max_epi32(
        m, _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7FFFFFFF)));
}

TK__ON_AVX2 static inline int32_t tk__max_lanes_256(__m256i m)
{
    __m128i h = _mm_max_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
    h = _mm_max_epi32(h, _mm_shuffle_epi32(h, 0x4E));
    return _mm_cvtsi128_si32(_mm_max_epi32(h, _mm_shuffle_epi32(h, 0xB1)));
}

/* The same pass on the AVX2 path, with two shortcuts: prefetches four
 * lines at a time, and maxima that let a NaN's bits win (those are above
 * any number's), the block measured again by tk__max_abs_bits when one
 * did.  NaNs are rare, and keeping them out took a fifth of the loop's
 * instructions. */
TK__ON_AVX2 static int64_t tk__cast_parts_bf16_256(const float *restrict t,
                                                  const float *restrict ref,
                                                  uint16_t *restrict d, float *restrict o,
                                                  int64_t n, int32_t part[3], bool stream,
                                                  const tk__ahead *ahead)
{
    __m256i in_part = _mm256_set1_epi32(part[0]), out_part = _mm256_set1_epi32(part[1]),
            scale = _mm256_set1_epi32(part[2]);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        if (j % 64 == 0)
            tk__prefetch_ahead(ahead, ahead->n, j, 4);
        __m256i r[2];
        for (int h = 0; h < 2; h++) {
            __m256 v = _mm256_loadu_ps(t + j + 8 * h), e = _mm256_loadu_ps(ref + j + 8 * h);
            r[h] = tk__bf16_round_256(v);
            __m256 oj = _mm256_castsi256_ps(r[h]);
            _mm256_storeu_ps(o + j + 8 * h, oj);
            in_part = tk__max_bits_256(in_part, _mm256_sub_ps(v, e));
            out_part = tk__max_bits_256(out_part, _mm256_sub_ps(oj, v));
            scale = tk__max_bits_256(scale, e);
        }
        tk__bf16_put_256(d + j, r[0], r[1], stream);
    }
    int32_t top[3] = {tk__max_lanes_256(in_part), tk__max_lanes_256(out_part),
                      tk__max_lanes_256(scale)};
    if (top[0] > 0x7F800000 || top[1] > 0x7F800000 || top[2] > 0x7F800000)
        for (int64_t k = 0; k < j; k++) {
            part[0] = tk__max_abs_bits(part[0], t[k] - ref[k]);
            part[1] = tk__max_abs_bits(part[1], o[k] - t[k]);
            part[2] = tk__max_abs_bits(part[2], ref[k]);
        }
    else
        memcpy(part, top, sizeof top);
    return j;
}
#endif

/* The oracle: t cast once, stored at dst and promoted back in o; with it,
 * the maxima of the gap's parts |t - ref| and |o - t| and of |ref|, in one
 * pass, which prefetches `ahead`.  In f32 the cast is exact and |o - t| is
 * 0.  `stream` as in tk__store. */
TK_DISPATCH(tk__cast_parts, (int dtype, const float *restrict t, const float *restrict ref, void *restrict dst, float *restrict o, int64_t n, int32_t part[3], bool stream, const tk__ahead *ahead),
            (dtype, t, ref, dst, o, n, part, stream, ahead))
{
    int64_t done = 0;
#if TK__ISA_X86
    if (dtype == TK_DTYPE_BF16 && tk__isa() == TK__ISA_AVX512)
        done = tk__cast_parts_bf16_512(t, ref, dst, o, n, part, stream, ahead);
    else if (dtype == TK_DTYPE_BF16 && tk__isa() == TK__ISA_AVX2)
        done = tk__cast_parts_bf16_256(t, ref, dst, o, n, part, stream, ahead);
#endif
    (void)stream;
    /* The compiled loops prefetch it all first: a prefetch in every step
     * of 16 cost them their vector code (the AVX2 path took 5% longer
     * before it had its own loop). */
    if (!done)
        for (int64_t j = 0; j < ahead->len; j += 16)
            tk__prefetch_ahead(ahead, ahead->n, j, 1);
    int32_t in_part = part[0], out_part = part[1], scale = part[2];
    if (dtype == TK_DTYPE_F32) {
        memcpy(dst, t, (size_t)n * sizeof *t);
        memcpy(o, t, (size_t)n * sizeof *t);
        for (int64_t j = 0; j < n; j++) {
            in_part = tk__max_abs_bits(in_part, t[j] - ref[j]);
            scale = tk__max_abs_bits(scale, ref[j]);
        }
    } else if (dtype != TK_DTYPE_BF16) {
        tk__row_from_f32(dtype, t, dst, n);
        tk__row_to_f32(dtype, dst, o, n);
        for (int64_t j = 0; j < n; j++) {
            in_part = tk__max_abs_bits(in_part, t[j] - ref[j]);
            out_part = tk__max_abs_bits(out_part, o[j] - t[j]);
            scale = tk__max_abs_bits(scale, ref[j]);
        }
    } else {
        uint16_t *d = dst;
        for (int64_t j = done; j < n; j++) {
            uint32_t w = tk__bf16_round(tk__f32_bits(t[j]));
            float oj = tk__f32_value(w);
            d[j] = (uint16_t)(w >> 16);
            o[j] = oj;
            in_part = tk__max_abs_bits(in_part, t[j] - ref[j]);
            out_part = tk__max_abs_bits(out_part, oj - t[j]);
            scale = tk__max_abs_bits(scale, ref[j]);
        }
    }
    part[0] = in_part;
    part[1] = out_part;
    part[2] = scale;
}

/* ---- the built-in axpy's first pass in one loop -------------------------
 * For the built-in axpy of the default arithmetic in bfloat16 on the AVX2
 * and AVX-512 paths, the stores of the inputs, both bodies and the cast
 * run as one loop per block, on registers, instead of five over buffers.
 * On an Intel Xeon (AVX-512) the 4096x4096 audit then read 2.8 to 3.1 the
 * fused f32 loop with streaming stores, where it read 3.3 to 3.4 with the
 * five loops; there the AVX-512 loop streams its three planes (with
 * ordinary stores it read 3.25 to 3.4, and filling the candidate's output
 * in the same loop, a fourth streamed plane, 3.0 to 3.1), a whole line of
 * each by one store where they start on lines (2.6 to 2.7; by half lines
 * the pass took 19 ms where it now takes 16.5).  On an AMD EPYC
 * Zen 3, where the pass was bound by its instructions, the pass took 1.02
 * ns an element in cache where it took 1.32, and the audit of a 4096x4096
 * case read 2.64 to 2.90 the plain f32 axpy loop where it read 3.10 to
 * 3.32, in alternating runs.  The AVX2 loop's stores are ordinary ones, also on planes
 * that the general path writes by streaming stores: streaming the three
 * planes at once made this loop slower there (22 ms a pass against 17 in a
 * prototype).  Each element goes through the general path's separately
 * rounded operations, under the caller's floating-point environment: the
 * bodies are f32(f32(a * x) + y), and the NaN rule (tk__axpy_nan) changes
 * only NaN results.  A NaN anywhere (an input, a result, a difference)
 * shows in the maxima, taken with NaNs' bits included, and the block is
 * then redone the general way, which also rounds NaNs by the rule this
 * loop leaves out. */
#if TK__ISA_X86
/* TK__BF16_ROUND's codes on eight lanes that are not NaN, in the low
 * halves (no mask: the f32 values are the codes shifted back). */
TK__ON_AVX2 static inline __m256i tk__bf16_codes_256(__m256 v)
{
    return _mm256_srli_epi32(tk__bf16_biased_256(_mm256_castps_si256(v)), 16);
}

/* max(m, twice the bits of |v|) on eight lanes, unsigned, a NaN's included:
 * the shift drops the sign without a mask, whose register the loop below
 * needs (with one, it kept two maxima on the stack). */
TK__ON_AVX2 static inline __m256i tk__max_twice_256(__m256i m, __m256 v)
{
    return _mm256_max_epu32(m, _mm256_slli_epi32(_mm256_castps_si256(v), 1));
}

/* tk__max_lanes_256, unsigned. */
TK__ON_AVX2 static inline uint32_t tk__max_lanes_u_256(__m256i m)
{
    __m128i h = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
    h = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0x4E));
    return (uint32_t)_mm_cvtsi128_si32(_mm_max_epu32(h, _mm_shuffle_epi32(h, 0xB1)));
}

/* The gap's screen (tk__screen_add) on eight lanes at a time, as
 * tk__screen_step_512 has it on sixteen: the counts are lanes of minus
 * ones, the compares' masks, subtracted. */
typedef struct {
    __m256 ahi, rhi, alo, rlo, mrf;
    __m256i top, above, not_below, rel;
} tk__screen_256;

TK__ON_AVX2 static inline void tk__screen_step_256(tk__screen_256 *v, __m256 a, __m256 e)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 d = _mm256_andnot_ps(sign, _mm256_sub_ps(a, e)), ae = _mm256_andnot_ps(sign, e);
    v->top = _mm256_max_epu32(v->top, _mm256_castps_si256(d));
    __m256 hi = _mm256_cmp_ps(d, _mm256_add_ps(v->ahi, _mm256_mul_ps(v->rhi, ae)), _CMP_GT_OQ);
    __m256 lo = _mm256_cmp_ps(d, _mm256_add_ps(v->alo, _mm256_mul_ps(v->rlo, ae)), _CMP_GE_OQ);
    v->above = _mm256_sub_epi32(v->above, _mm256_castps_si256(hi));
    v->not_below = _mm256_sub_epi32(v->not_below, _mm256_castps_si256(lo));
    __m256 nonzero = _mm256_cmp_ps(ae, _mm256_setzero_ps(), _CMP_NEQ_UQ);
    __m256 rel = _mm256_cmp_ps(
        d, _mm256_sub_ps(_mm256_mul_ps(v->mrf, ae), _mm256_set1_ps(FLT_MIN)), _CMP_GT_OQ);
    v->rel = _mm256_or_si256(v->rel, _mm256_castps_si256(_mm256_and_ps(nonzero, rel)));
}

/* Elements [j, n) of a block of the one-loop pass, one at a time, with the
 * vector loop's maxima in top[] (bits of |x|); false, with part[]
 * untouched, where a NaN turned up. */
static bool tk__first_pass_tail(float alpha, const float *restrict x, const float *restrict y,
                                uint16_t *restrict sx, uint16_t *restrict sy,
                                uint16_t *restrict d, float *restrict o, float *restrict ref,
                                int64_t j, int64_t n, uint32_t top[3], int32_t part[3])
{
    for (; j < n; j++) {
        uint32_t wx = tk__bf16_round(tk__f32_bits(x[j]));
        uint32_t wy = tk__bf16_round(tk__f32_bits(y[j]));
        float t = alpha * tk__f32_value(wx) + tk__f32_value(wy), e = alpha * x[j] + y[j];
        uint32_t wo = tk__bf16_round(tk__f32_bits(t));
        sx[j] = (uint16_t)(wx >> 16);
        sy[j] = (uint16_t)(wy >> 16);
        d[j] = (uint16_t)(wo >> 16);
        o[j] = tk__f32_value(wo);
        ref[j] = e;
        float diff[3] = {t - e, o[j] - t, e};
        for (int i = 0; i < 3; i++) {
            uint32_t u = tk__f32_bits(diff[i]) & 0x7FFFFFFFu;
            top[i] = u > top[i] ? u : top[i];
        }
    }
    if (top[0] > 0x7F800000u || top[1] > 0x7F800000u || top[2] > 0x7F800000u)
        return false;
    for (int i = 0; i < 3; i++)
        part[i] = (int32_t)top[i];
    return true;
}

/* The running state of the AVX2 loop below. */
typedef struct {
    __m256 a;
    __m256i in_part, out_part, scale;
    bool sc;
    tk__screen_256 v;
} tk__first_256;

/* Sixteen elements from k: o and ref written, the maxima (and the screen)
 * updated, and the codes of both stored inputs and of the oracle, packed,
 * in h. */
TK__ON_AVX2 static inline void tk__first_step_256(tk__first_256 *st, const float *restrict x,
                                                  const float *restrict y, float *restrict o,
                                                  float *restrict ref, int64_t k, __m256i h[3])
{
    __m256 vx[2] = {_mm256_loadu_ps(x + k), _mm256_loadu_ps(x + k + 8)},
           vy[2] = {_mm256_loadu_ps(y + k), _mm256_loadu_ps(y + k + 8)};
    __m256i cx[2] = {tk__bf16_codes_256(vx[0]), tk__bf16_codes_256(vx[1])},
            cy[2] = {tk__bf16_codes_256(vy[0]), tk__bf16_codes_256(vy[1])}, co[2];
    for (int i = 0; i < 2; i++) {
        __m256 t = _mm256_add_ps(
            _mm256_mul_ps(st->a, _mm256_castsi256_ps(_mm256_slli_epi32(cx[i], 16))),
            _mm256_castsi256_ps(_mm256_slli_epi32(cy[i], 16)));
        __m256 e = _mm256_add_ps(_mm256_mul_ps(st->a, vx[i]), vy[i]);
        co[i] = tk__bf16_codes_256(t);
        __m256 oj = _mm256_castsi256_ps(_mm256_slli_epi32(co[i], 16));
        _mm256_storeu_ps(o + k + 8 * i, oj);
        _mm256_storeu_ps(ref + k + 8 * i, e);
        st->in_part = tk__max_twice_256(st->in_part, _mm256_sub_ps(t, e));
        st->out_part = tk__max_twice_256(st->out_part, _mm256_sub_ps(oj, t));
        st->scale = tk__max_twice_256(st->scale, e);
        if (st->sc)
            tk__screen_step_256(&st->v, oj, e);
    }
    h[0] = tk__bf16_pack_256(cx[0], cx[1]);
    h[1] = tk__bf16_pack_256(cy[0], cy[1]);
    h[2] = tk__bf16_pack_256(co[0], co[1]);
}

/* One block: the stored inputs to sx and sy, the oracle's codes to d and
 * its f32 values to o, the body on the originals to ref, the maxima into
 * part[] as tk__cast_parts takes them, and with sc the gap's screen of the
 * oracle against the reference into *g, as tk__first_pass_axpy_512 does;
 * false, with part[] untouched, where a NaN turned up.  With the screen
 * in this loop rather than a pass of its own, the 4096x4096 audit took
 * 0.945 to 0.965 of its time on an AMD EPYC Zen 3 (alternating runs in
 * one process); writing the planes by streaming stores, each line's
 * halves back to back, made it slower there (1.15). */
TK__ON_AVX2 static bool tk__first_pass_axpy_256(float alpha, const float *restrict x,
                                                const float *restrict y, uint16_t *restrict sx,
                                                uint16_t *restrict sy, uint16_t *restrict d,
                                                float *restrict o, float *restrict ref,
                                                int64_t n, int32_t part[3],
                                                const tk__ahead *ahead, const tk__screen *sc,
                                                tk__screened *g)
{
    tk__first_256 st = {.a = _mm256_set1_ps(alpha), .sc = sc != NULL,
                        .in_part = _mm256_set1_epi32((int32_t)((uint32_t)part[0] << 1)),
                        .out_part = _mm256_set1_epi32((int32_t)((uint32_t)part[1] << 1)),
                        .scale = _mm256_set1_epi32((int32_t)((uint32_t)part[2] << 1))};
    if (sc)
        st.v = (tk__screen_256){_mm256_set1_ps(sc->ahi), _mm256_set1_ps(sc->rhi),
                                _mm256_set1_ps(sc->alo), _mm256_set1_ps(sc->rlo),
                                _mm256_set1_ps(sc->mrf), _mm256_setzero_si256(),
                                _mm256_setzero_si256(), _mm256_setzero_si256(),
                                _mm256_setzero_si256()};
    int64_t j = 0;
    __m256i h[3];
    for (; j + 16 <= n; j += 16) {
        if (j % 64 == 0)
            tk__prefetch_ahead(ahead, 2, j, 4);
        tk__first_step_256(&st, x, y, o, ref, j, h);
        _mm256_storeu_si256((__m256i *)(void *)(sx + j), h[0]);
        _mm256_storeu_si256((__m256i *)(void *)(sy + j), h[1]);
        _mm256_storeu_si256((__m256i *)(void *)(d + j), h[2]);
    }
    uint32_t top[3] = {tk__max_lanes_u_256(st.in_part) >> 1,
                       tk__max_lanes_u_256(st.out_part) >> 1,
                       tk__max_lanes_u_256(st.scale) >> 1};
    if (!tk__first_pass_tail(alpha, x, y, sx, sy, d, o, ref, j, n, top, part))
        return false;
    if (sc) {
        /* Both counts, of lanes of minus ones subtracted, summed at once. */
        __m256i counts = _mm256_hadd_epi32(st.v.above, st.v.not_below);
        counts = _mm256_add_epi32(counts, _mm256_permute2x128_si256(counts, counts, 1));
        counts = _mm256_hadd_epi32(counts, counts);
        int32_t above = _mm256_extract_epi32(counts, 0),
                not_below = _mm256_extract_epi32(counts, 1);
        *g = (tk__screened){tk__max_lanes_u_256(st.v.top), above,
                            !sc->screen || above != not_below,
                            !sc->rel_screen || !_mm256_testz_si256(st.v.rel, st.v.rel)};
        tk__screen_add(sc, g, n - j, o + j, ref + j);   /* the scalar tail's */
    }
    return true;
}

/* bfloat16 codes of sixteen floats, each in the low half of its lane. */
TK__ON_AVX512 static inline __m512i tk__bf16_codes_512(__m512 v)
{
    return _mm512_srli_epi32(tk__bf16_biased_512(_mm512_castps_si512(v)), 16);
}

TK__ON_AVX512 static inline void tk__bf16_put_codes_512(uint16_t *d, __m512i c, bool stream)
{
    __m256i h = _mm512_cvtepi32_epi16(c);
    if (stream)
        _mm256_stream_si256((__m256i *)(void *)d, h);
    else
        _mm256_storeu_si256((__m256i *)(void *)d, h);
}

/* The codes of two such vectors, a whole line, by one streaming store (d
 * on a line). */
TK__ON_AVX512 static inline void tk__bf16_put_line_512(uint16_t *d, __m512i c0, __m512i c1)
{
    __m512i line = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(c0)),
                                      _mm512_cvtepi32_epi16(c1), 1);
    _mm512_stream_si512((void *)d, line);
}

TK__ON_AVX512 static inline __m512i tk__max_twice_512(__m512i m, __m512 v)
{
    return _mm512_max_epu32(m, _mm512_slli_epi32(_mm512_castps_si512(v), 1));
}

/* The gap's screen (tk__screen_add) on sixteen lanes at a time: the bounds
 * broadcast, and the figures' running lanes. */
typedef struct {
    __m512 ahi, rhi, alo, rlo, mrf;
    __m512i top, above, not_below;
    __mmask16 rel;
} tk__screen_512;

TK__ON_AVX512 static inline void tk__screen_step_512(tk__screen_512 *v, __m512 a, __m512 e)
{
    const __m512i abs = _mm512_set1_epi32(0x7FFFFFFF), one = _mm512_set1_epi32(1);
    __m512 d = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(_mm512_sub_ps(a, e)), abs));
    __m512 ae = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(e), abs));
    v->top = _mm512_max_epu32(v->top, _mm512_castps_si512(d));
    __mmask16 hi = _mm512_cmp_ps_mask(d, _mm512_add_ps(v->ahi, _mm512_mul_ps(v->rhi, ae)),
                                      _CMP_GT_OQ);
    __mmask16 lo = _mm512_cmp_ps_mask(d, _mm512_add_ps(v->alo, _mm512_mul_ps(v->rlo, ae)),
                                      _CMP_GE_OQ);
    v->above = _mm512_mask_add_epi32(v->above, hi, v->above, one);
    v->not_below = _mm512_mask_add_epi32(v->not_below, lo, v->not_below, one);
    __mmask16 nonzero = _mm512_cmp_ps_mask(ae, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    v->rel |= _mm512_mask_cmp_ps_mask(
        nonzero, d, _mm512_sub_ps(_mm512_mul_ps(v->mrf, ae), _mm512_set1_ps(FLT_MIN)),
        _CMP_GT_OQ);
}

/* The running state of the AVX-512 loop below. */
typedef struct {
    __m512 a;
    __m512i in_part, out_part, scale;
    bool sc;
    tk__screen_512 v;
} tk__first_512;

/* Sixteen elements from k: o and ref written, the maxima (and the screen)
 * updated, and the codes of both stored inputs and of the oracle in c. */
TK__ON_AVX512 static inline void tk__first_step_512(tk__first_512 *st, const float *restrict x,
                                                    const float *restrict y, float *restrict o,
                                                    float *restrict ref, int64_t k,
                                                    __m512i c[3])
{
    __m512 vx = _mm512_loadu_ps(x + k), vy = _mm512_loadu_ps(y + k);
    c[0] = tk__bf16_codes_512(vx);
    c[1] = tk__bf16_codes_512(vy);
    __m512 t = _mm512_add_ps(
        _mm512_mul_ps(st->a, _mm512_castsi512_ps(_mm512_slli_epi32(c[0], 16))),
        _mm512_castsi512_ps(_mm512_slli_epi32(c[1], 16)));
    __m512 e = _mm512_add_ps(_mm512_mul_ps(st->a, vx), vy);
    c[2] = tk__bf16_codes_512(t);
    __m512 oj = _mm512_castsi512_ps(_mm512_slli_epi32(c[2], 16));
    _mm512_storeu_ps(o + k, oj);
    _mm512_storeu_ps(ref + k, e);
    st->in_part = tk__max_twice_512(st->in_part, _mm512_sub_ps(t, e));
    st->out_part = tk__max_twice_512(st->out_part, _mm512_sub_ps(oj, t));
    st->scale = tk__max_twice_512(st->scale, e);
    if (st->sc)
        tk__screen_step_512(&st->v, oj, e);
}

/* The same loop on the AVX-512 path, sixteen lanes a vector; the three
 * planes go out by streaming stores where `stream` (the caller has checked
 * that each starts a half line), as the general path's loops store them.
 * With sc, the gap's screen of the oracle against the reference too, into
 * *g: a separate pass over the block took a fifth of the pass's time. */
TK__ON_AVX512 static bool tk__first_pass_axpy_512(float alpha, const float *restrict x,
                                                  const float *restrict y, uint16_t *restrict sx,
                                                  uint16_t *restrict sy, uint16_t *restrict d,
                                                  float *restrict o, float *restrict ref,
                                                  int64_t n, int32_t part[3], bool stream,
                                                  const tk__ahead *ahead, const tk__screen *sc,
                                                  tk__screened *g)
{
    tk__first_512 st = {.a = _mm512_set1_ps(alpha), .sc = sc != NULL,
                        .in_part = _mm512_set1_epi32((int32_t)((uint32_t)part[0] << 1)),
                        .out_part = _mm512_set1_epi32((int32_t)((uint32_t)part[1] << 1)),
                        .scale = _mm512_set1_epi32((int32_t)((uint32_t)part[2] << 1))};
    if (sc)
        st.v = (tk__screen_512){_mm512_set1_ps(sc->ahi), _mm512_set1_ps(sc->rhi),
                                _mm512_set1_ps(sc->alo), _mm512_set1_ps(sc->rlo),
                                _mm512_set1_ps(sc->mrf), _mm512_setzero_si512(),
                                _mm512_setzero_si512(), _mm512_setzero_si512(), 0};
    int64_t j = 0;
    __m512i c[2][3];
    /* Whole lines of each plane by one streaming store each. */
    bool lines = stream && (uintptr_t)sx % 64 == 0 && (uintptr_t)sy % 64 == 0 &&
                 (uintptr_t)d % 64 == 0;
    for (; lines && j + 32 <= n; j += 32) {
        if (j % 64 == 0)
            tk__prefetch_ahead(ahead, 2, j, 4);
        tk__first_step_512(&st, x, y, o, ref, j, c[0]);
        tk__first_step_512(&st, x, y, o, ref, j + 16, c[1]);
        tk__bf16_put_line_512(sx + j, c[0][0], c[1][0]);
        tk__bf16_put_line_512(sy + j, c[0][1], c[1][1]);
        tk__bf16_put_line_512(d + j, c[0][2], c[1][2]);
    }
    for (; j + 16 <= n; j += 16) {
        if (j % 64 == 0)
            tk__prefetch_ahead(ahead, 2, j, 4);
        tk__first_step_512(&st, x, y, o, ref, j, c[0]);
        tk__bf16_put_codes_512(sx + j, c[0][0], stream);
        tk__bf16_put_codes_512(sy + j, c[0][1], stream);
        tk__bf16_put_codes_512(d + j, c[0][2], stream);
    }
    uint32_t top[3] = {_mm512_reduce_max_epu32(st.in_part) >> 1,
                       _mm512_reduce_max_epu32(st.out_part) >> 1,
                       _mm512_reduce_max_epu32(st.scale) >> 1};
    if (!tk__first_pass_tail(alpha, x, y, sx, sy, d, o, ref, j, n, top, part))
        return false;
    if (sc) {
        int32_t above = _mm512_reduce_add_epi32(st.v.above),
                not_below = _mm512_reduce_add_epi32(st.v.not_below);
        *g = (tk__screened){_mm512_reduce_max_epu32(st.v.top), above,
                            !sc->screen || above != not_below,
                            !sc->rel_screen || st.v.rel != 0};
        tk__screen_add(sc, g, n - j, o + j, ref + j);   /* the scalar tail's */
    }
    return true;
}
#endif

/* The block in one loop where the contract is the built-in axpy of the
 * default arithmetic and the case bfloat16, on the AVX-512 and AVX2
 * paths; `stream`: the planes may go out by streaming stores (AVX-512).
 * False where it was not done. */
static bool tk__first_pass_axpy(const tk_kernel *k, int dtype, const float *const *orig,
                                void *const *stored, void *oracle, float *o, float *ref,
                                int64_t n, int32_t part[3], bool stream, const tk__ahead *ahead,
                                const tk__screen *sc, tk__screened *g)
{
#if TK__ISA_X86
    if (!k->is_axpy || k->axpy.arith || dtype != TK_DTYPE_BF16)
        return false;
    if (tk__isa() == TK__ISA_AVX512) {
        stream = stream && (uintptr_t)stored[0] % 32 == 0 && (uintptr_t)stored[1] % 32 == 0 &&
                 (uintptr_t)oracle % 32 == 0;
        return tk__first_pass_axpy_512(k->axpy.alpha, orig[0], orig[1], stored[0], stored[1],
                                       oracle, o, ref, n, part, stream, ahead, sc, g);
    }
    if (tk__isa() == TK__ISA_AVX2)
        return tk__first_pass_axpy_256(k->axpy.alpha, orig[0], orig[1], stored[0], stored[1],
                                       oracle, o, ref, n, part, ahead, sc, g);
#else
    (void)k, (void)dtype, (void)orig, (void)stored, (void)oracle, (void)o, (void)ref,
        (void)n, (void)part, (void)stream, (void)ahead, (void)sc, (void)g;
#endif
    return false;
}

/* One thread's share of tk__measure: spans [first, last) of the case, in
 * order, into its own comparison states and maxima. */
typedef struct {
    const tk_audit *a;
    const tk__case *c;
    tk_matrix *const *in;
    void *oracle;
    const tk_matrix *out;
    void *fill;            /* the candidate's output, to fill as it runs */
    int64_t first, last;
    tk__cmp impl, gap;
    int32_t part[3];       /* bits of the |x| maxima */
    atomic_bool *stop;     /* set when any share failed */
    int rc;
    char msg[512];
} tk__share;

static void *tk__measure_share(void *arg)
{
    tk__share *s = arg;
    const tk__case *c = s->c;
    const tk_kernel *k = s->a->k;
    int n = k->n_inputs, d = c->dtype;
    int64_t plane = c->rows * c->cols, B = TK__BLOCK_ELEMS, index = 0;
    size_t es = (size_t)tk__esize(d);
    /* Large planes are written by streaming stores: ordinary stores first
     * read every line from memory, and their misses held the pass to 1.6x
     * its time (4096x4096 bf16, AVX-512 AMD EPYC).  The AVX-512 and AVX2
     * bf16 loops stream as they store where a span's destination starts a
     * half line (the staged copy cost that pass 6 to 10% on an Intel Xeon);
     * the portable path and other spans store into a block staged in cache,
     * then streamed.  The built-in axpy's one loop on the AVX2 path uses
     * ordinary stores, on these planes too (see tk__first_pass_axpy_256). */
    bool stream = (size_t)plane * es >= TK__STREAM;
    bool direct = stream && d == TK_DTYPE_BF16 && tk__isa() != TK__ISA_PORTABLE;
    float *buf = tk__lines((size_t)(n + 5) * (size_t)B * sizeof(float));
    if (!buf) {
        s->rc = tk__fail(TK_ENOMEM, "tk_audit_run: out of memory for scratch");
        atomic_store_explicit(s->stop, true, memory_order_relaxed);
        snprintf(s->msg, sizeof s->msg, "%s", tk_last_error_message());
        return NULL;
    }
    const float *p[TK_KERNEL_MAX_INPUTS], *orig[TK_KERNEL_MAX_INPUTS];
    float *t = buf + n * B, *ref = t + B, *o = ref + B, *cand = s->out ? o + B : o;
    void *staged = stream ? o + 2 * B : NULL;
    for (int i = 0; i < n; i++)
        p[i] = buf + i * B;
    for (tk__span b = {0}; !s->rc && index < s->last && tk__next_span(c, &b); index++) {
        if (index < s->first)
            continue;
        if (atomic_load_explicit(s->stop, memory_order_relaxed))
            break;   /* another share failed: its error is the run's */
        void *stored[TK_KERNEL_MAX_INPUTS];
        for (int i = 0; i < n; i++) {
            stored[i] = tk__span_data(s->in[i], &b);
            orig[i] = c->orig + i * plane + b.off;
        }
        char *oracle = (char *)s->oracle + (size_t)b.off * es;
        int64_t rest = plane - b.off - b.ne;
        tk__ahead ahead = {.n = n, .len = rest < B ? rest : B,
                           .far = rest - B < B ? rest - B : B};
        if (tk__tune() == TK__TUNE_AMD)
            ahead.len = ahead.far = 0;
        for (int i = 0; i < n; i++)
            ahead.at[i] = orig[i] + b.ne;
        /* On one row's piece the one loop screens the gap as it
         * goes: g's figures, or a top no finite difference has where it
         * did not (the row is then compared the usual way). */
        tk__screen sc;
        tk__screened g = {UINT32_MAX, 0, 0, 0};
        bool screen = !s->out && b.nr == 1 && !s->gap.want_ulp;
        if (screen)
            tk__screen_of(&s->gap, &sc);
        if (s->out || !tk__first_pass_axpy(k, d, orig, stored, oracle, o, ref, b.ne, s->part,
                                           direct, &ahead, screen ? &sc : NULL, &g)) {
            screen = false;
            for (int i = 0; i < n; i++) {
                if (s->out) {
                    tk__row_to_f32(d, stored[i], (float *)p[i], b.ne);
                    continue;
                }
                bool now = direct && (uintptr_t)stored[i] % 32 == 0;
                tk__store(d, orig[i], staged && !now ? staged : stored[i], (float *)p[i], b.ne,
                          now);
                if (staged && !now)
                    tk__stream_copy(stored[i], staged, (size_t)b.ne * es);
            }
            /* t: the body on the represented inputs before the cast; o: the
             * oracle, t cast once; ref: the body on the original data. */
            if ((s->rc = tk__apply(s->a, c, &b, p, t)) ||
                (s->rc = tk__apply(s->a, c, &b, orig, ref)))
                break;
            bool now = direct && (uintptr_t)oracle % 32 == 0;
            tk__cast_parts(d, t, ref, staged && !now ? staged : oracle, o, b.ne, s->part, now,
                           &ahead);
            if (staged && !now)
                tk__stream_copy(oracle, staged, (size_t)b.ne * es);
        }
        if (s->fill) {
            char *f = (char *)s->fill + (size_t)b.off * es;
            if (stream)
                tk__stream_fill(f, 0xFF, (size_t)b.ne * es);
            else
                memset(f, 0xFF, (size_t)b.ne * es);
        }
        if (s->out)
            tk__row_to_f32(d, tk__span_data(s->out, &b), cand, b.ne);
        tk__cmp_rows(&s->impl, b.r0, b.c0, b.nr, b.nc, cand, o);
        if (!(screen && tk__cmp_screened_rest(&s->gap, &g, b.r0, b.c0, b.nc, cand, ref)))
            tk__cmp_rows(&s->gap, b.r0, b.c0, b.nr, b.nc, cand, ref);
    }
    tk__stream_fence();
    free(buf);
    if (s->rc) {   /* stop the others; the message is this thread's: carry it back */
        atomic_store_explicit(s->stop, true, memory_order_relaxed);
        snprintf(s->msg, sizeof s->msg, "%s", tk_last_error_message());
    }
    return NULL;
}

/* Spans below which a share is not worth a thread. */
#define TK__SHARE_MIN 64

/* One pass over the blocks computes both references and every metric.
 * Without `out` it runs before the candidate: it first writes the stored
 * inputs from the originals, and the oracle stands in for the candidate's
 * output, since a candidate that matches the oracle bit for bit has exactly
 * the oracle's metrics.  With `out`, the candidate's output is measured.
 * Either way the oracle's stored elements land in `oracle`.  The pass runs
 * on the contract kernel's threads (TK_KERNEL_THREADS), each on a run of
 * consecutive spans; their states fold together in order, to the state of
 * one pass. */
static int tk__measure(const tk_audit *a, const tk__case *c, tk_matrix *const *in,
                       void *oracle, const tk_matrix *out, void *fill,
                       tk__case_result *res)
{
    int64_t spans = 0;
    for (tk__span b = {0}; tk__next_span(c, &b);)
        spans++;
    int64_t n = tk__kernel_threads(a->k);
    n = n < spans / TK__SHARE_MIN ? n : spans / TK__SHARE_MIN;
    n = n < 1 ? 1 : n;
    tk__share one, *sh = n > 1 ? calloc((size_t)n, sizeof *sh) : &one;
    if (!sh)
        sh = &one, n = 1;
    int d = c->dtype;
    atomic_bool stop = false;
    for (int64_t i = 0; i < n; i++) {
        sh[i] = (tk__share){.a = a, .c = c, .in = in, .oracle = oracle, .out = out, .fill = fill,
                            .first = spans * i / n, .last = spans * (i + 1) / n,
                            .stop = &stop};
        tk__cmp_init(&sh[i].impl, d, 0.0, 0.0, 0, TK_NAN_MATCH, true);
        tk__cmp_init(&sh[i].gap, d, a->gap_atol[d], a->gap_rtol[d], -1, TK_NAN_MATCH, false);
    }
    tk__fan_out(a->pool, sh, sizeof *sh, n, tk__measure_share);
    res->diagnosis = TK_SCHEDULE_NOT_RUN;
    res->impl = sh[0].impl;
    res->gap = sh[0].gap;
    int32_t part[3] = {0, 0, 0};
    int rc = TK_OK;
    for (int64_t i = 0; i < n; i++) {
        if (i) {
            tk__cmp_merge(&res->impl, &sh[i].impl);
            tk__cmp_merge(&res->gap, &sh[i].gap);
        }
        for (int j = 0; j < 3; j++)   /* non-negative bit patterns order as values */
            part[j] = sh[i].part[j] > part[j] ? sh[i].part[j] : part[j];
        if (!rc && sh[i].rc)
            rc = tk__fail(sh[i].rc, "%s", sh[i].msg);
    }
    if (sh != &one)
        free(sh);
    memcpy(&res->input_part, &part[0], sizeof part[0]);
    memcpy(&res->output_part, &part[1], sizeof part[1]);
    memcpy(&res->scale, &part[2], sizeof part[2]);
    return rc;
}

/* ---- rounding-schedule diagnosis --------------------------------------- */

/* In the order they are named: one change before two. */
enum { TK__N_SCHEDULES = 11 };
static const int tk__schedules[TK__N_SCHEDULES] = {
    TK_SCHEDULE_FINAL_CAST, TK_SCHEDULE_EARLY_ROUND, TK_SCHEDULE_TRUNCATE,
    TK_SCHEDULE_FLUSH_SUBNORMAL, TK_SCHEDULE_FUSED_MULADD, TK_SCHEDULE_SEPARATE_MULADD,
    TK_SCHEDULE_KEEP_SUBNORMAL, TK_SCHEDULE_XLA_ARITH, TK_SCHEDULE_NUMPY_ARITH,
    TK_SCHEDULE_FUSED_KEEP_SUBNORMAL, TK_SCHEDULE_SEPARATE_FLUSH};

/* The arithmetic flags that a schedule toggles in the built-in axpy. */
static int tk__toggle(int schedule)
{
    switch (schedule) {
    case TK_SCHEDULE_FLUSH_SUBNORMAL: case TK_SCHEDULE_KEEP_SUBNORMAL: return TK_ARITH_FTZ;
    case TK_SCHEDULE_FUSED_MULADD: case TK_SCHEDULE_SEPARATE_MULADD: return TK_ARITH_FMA;
    case TK_SCHEDULE_XLA_ARITH: case TK_SCHEDULE_NUMPY_ARITH:
    case TK_SCHEDULE_FUSED_KEEP_SUBNORMAL: case TK_SCHEDULE_SEPARATE_FLUSH: return TK_ARITH_XLA;
    default: return 0;
    }
}

/* Whether a schedule is an alternative to this contract at all (rounding
 * early to float32 is no different from the separately rounded axpy). */
static bool tk__applies(const tk_kernel *k, int dtype, int schedule)
{
    int arith = k->axpy.arith;
    switch (schedule) {
    case TK_SCHEDULE_EARLY_ROUND: return k->is_axpy && dtype != TK_DTYPE_F32;
    case TK_SCHEDULE_FLUSH_SUBNORMAL: return !(arith & TK_ARITH_FTZ);
    case TK_SCHEDULE_KEEP_SUBNORMAL: return k->is_axpy && (arith & TK_ARITH_FTZ);
    case TK_SCHEDULE_FUSED_MULADD: return k->is_axpy && !(arith & TK_ARITH_FMA);
    case TK_SCHEDULE_SEPARATE_MULADD: return k->is_axpy && (arith & TK_ARITH_FMA);
    case TK_SCHEDULE_XLA_ARITH: return k->is_axpy && arith == TK_ARITH_NUMPY;
    case TK_SCHEDULE_NUMPY_ARITH: return k->is_axpy && arith == TK_ARITH_XLA;
    case TK_SCHEDULE_FUSED_KEEP_SUBNORMAL: return k->is_axpy && arith == TK_ARITH_FTZ;
    case TK_SCHEDULE_SEPARATE_FLUSH: return k->is_axpy && arith == TK_ARITH_FMA;
    default: return true;
    }
}

/* Read and write one stored code of es bytes (1, 2 or 4). */
static uint32_t tk__code(const void *p, size_t es, int64_t j)
{
    const unsigned char *b = (const unsigned char *)p + (size_t)j * es;
    return es == 1 ? b[0] : es == 2 ? ((const uint16_t *)p)[j] : ((const uint32_t *)p)[j];
}

static void tk__set_code(void *p, size_t es, int64_t j, uint32_t c)
{
    if (es == 1)
        ((unsigned char *)p)[j] = (unsigned char)c;
    else if (es == 2)
        ((uint16_t *)p)[j] = (uint16_t)c;
    else
        ((uint32_t *)p)[j] = c;
}

/* Cast v to the stored dtype: to nearest even, or for TK_SCHEDULE_TRUNCATE
 * toward zero (the nearest code, one code nearer zero when it lies
 * farther out than v; a NaN from e4m3fn's overflow becomes 448). */
static void tk__cast(int dtype, int schedule, const float *v, void *dst, int64_t n)
{
    size_t es = (size_t)tk__esize(dtype);
    tk__row_from_f32(dtype, v, dst, n);
    if (schedule != TK_SCHEDULE_TRUNCATE || dtype == TK_DTYPE_F32)
        return;
    uint32_t sign = 1u << (8 * es - 1);
    for (int64_t j = 0; j < n; j++) {
        uint32_t c = tk__code(dst, es, j);
        float back;
        tk__row_to_f32(dtype, (const unsigned char *)dst + (size_t)j * es, &back, 1);
        if (isnan(v[j]))
            continue;
        if (isnan(back))
            c = (c & sign) | 0x7Eu;
        else if (fabsf(back) > fabsf(v[j]))
            c -= 1;   /* the magnitude one code down, the sign kept */
        tk__set_code(dst, es, j, c);
    }
}

/* Output of one schedule for a block of rows, stored in dst. */
static int tk__schedule_block(const tk_audit *a, const tk__case *c, int schedule,
                              const float *const *p, const float *const *orig,
                              const tk__span *b, float *v, float *q, void *dst)
{
    const tk_kernel *k = a->k;
    int64_t ne = b->ne;
    int rc = TK_OK;
    if (schedule == TK_SCHEDULE_FINAL_CAST) {
        rc = tk__apply(a, c, b, orig, v);
    } else if (schedule == TK_SCHEDULE_EARLY_ROUND) {
        /* axpy with its product rounded to the storage dtype first. */
        for (int64_t j = 0; j < ne; j++) {
            float m = k->axpy.alpha * p[0][j];
            m = tk__round_to(c->dtype, m);
            v[j] = tk__axpy_nan(k->axpy.alpha, p[0][j], p[1][j], m + p[1][j]);
        }
    } else if (k->is_axpy && tk__toggle(schedule)) {
        int arith = k->axpy.arith ^ tk__toggle(schedule);
        for (int64_t j = 0; j < ne; j++)
            v[j] = tk__axpy_arith(k->axpy.alpha, p[0][j], p[1][j], arith);
    } else if (schedule == TK_SCHEDULE_FLUSH_SUBNORMAL) {
        /* A custom body: its operands and results flushed around it. */
        const float *fq[TK_KERNEL_MAX_INPUTS];
        for (int i = 0; i < k->n_inputs; i++) {
            float *qi = q + i * ne;
            for (int64_t j = 0; j < ne; j++)
                qi[j] = tk__ftz(p[i][j]);
            fq[i] = qi;
        }
        if (!(rc = tk__apply(a, c, b, fq, v)))
            for (int64_t j = 0; j < ne; j++)
                v[j] = tk__ftz(v[j]);
    } else {
        rc = tk__apply(a, c, b, p, v);
    }
    if (!rc)
        tk__cast(c->dtype, schedule, v, dst, ne);
    return rc;
}

/* Whether n stored elements at s and t are equal as the verdict compares
 * them: the same bits, or values that compare equal (+0 and -0), or NaN
 * both (TK_NAN_MATCH); fs and ft: room for n floats each. */
static bool tk__same_stored(int dtype, const void *s, const void *t, int64_t n, float *fs,
                            float *ft)
{
    if (!memcmp(s, t, (size_t)n * (size_t)tk__esize(dtype)))
        return true;
    tk__row_to_f32(dtype, s, fs, n);
    tk__row_to_f32(dtype, t, ft, n);
    for (int64_t j = 0; j < n; j++)
        if (!(fs[j] == ft[j] || (isnan(fs[j]) && isnan(ft[j]))))
            return false;
    return true;
}

/* Which schedule reproduces the candidate (first in the list), element by
 * element as the verdict compares: a flush to +0 where the schedule keeps
 * the sign is the flush. */
static int tk__diagnose(const tk_audit *a, const tk__case *c, tk_matrix *const *in,
                        const tk_matrix *out, int *schedule)
{
    const tk_kernel *k = a->k;
    int n = k->n_inputs;
    int64_t plane = c->rows * c->cols, B = TK__BLOCK_ELEMS;
    float *buf = tk__lines((size_t)(2 * n + 4) * (size_t)B * sizeof(float));
    if (!buf)
        return tk__fail(TK_ENOMEM, "tk_audit_run: out of memory for scratch");
    const float *p[TK_KERNEL_MAX_INPUTS], *orig[TK_KERNEL_MAX_INPUTS];
    float *v = buf + n * B, *q = v + B, *fs = q + n * B + B, *ft = fs + B;
    void *st = q + n * B;
    bool alive[TK__N_SCHEDULES];
    int left = 0, rc = TK_OK;
    for (int s = 0; s < TK__N_SCHEDULES; s++)
        left += alive[s] = tk__applies(k, c->dtype, tk__schedules[s]);
    for (int i = 0; i < n; i++)
        p[i] = buf + i * B;
    for (tk__span b = {0}; left && !rc && tk__next_span(c, &b);) {
        for (int i = 0; i < n; i++) {
            tk__row_to_f32(c->dtype, tk__span_data(in[i], &b), (float *)p[i], b.ne);
            orig[i] = c->orig + i * plane + b.off;
        }
        for (int s = 0; s < TK__N_SCHEDULES && !rc; s++) {
            if (!alive[s])
                continue;
            rc = tk__schedule_block(a, c, tk__schedules[s], p, orig, &b, v, q, st);
            if (!rc && !tk__same_stored(c->dtype, st, tk__span_data(out, &b), b.ne, fs, ft)) {
                alive[s] = false;
                left--;
            }
        }
    }
    free(buf);
    *schedule = TK_SCHEDULE_UNKNOWN;
    for (int s = TK__N_SCHEDULES - 1; s >= 0; s--)
        if (alive[s])
            *schedule = tk__schedules[s];
    return rc;
}

/* ---- tk_audit_run and results ------------------------------------------ */

/* One thread's part of tk__differs. */
typedef struct {
    const char *x, *y;
    size_t bytes;
    bool differ;
} tk__cmp_part;

static void *tk__cmp_part_run(void *arg)
{
    tk__cmp_part *p = arg;
    p->differ = memcmp(p->x, p->y, p->bytes) != 0;
    return NULL;
}

/* Bytes below which a part of tk__differs is not worth a thread. */
#define TK__DIFFER_MIN ((size_t)1 << 20)

/* Whether the candidate's output differs from the oracle's in any byte, on
 * the contract kernel's threads (one thread's memcmp of a 4096x4096
 * bfloat16 case was a quarter of the audit's time on two). */
static bool tk__differs(const tk_audit *a, const void *x, const void *y, size_t bytes)
{
    int64_t n = tk__kernel_threads(a->k), most = (int64_t)(bytes / TK__DIFFER_MIN);
    n = n < most ? n : most;
    n = n < 1 ? 1 : n;
    tk__cmp_part one, *part = n > 1 ? calloc((size_t)n, sizeof *part) : &one;
    if (!part)
        part = &one, n = 1;
    for (int64_t i = 0; i < n; i++) {
        size_t b0 = bytes * (size_t)i / (size_t)n, b1 = bytes * (size_t)(i + 1) / (size_t)n;
        part[i] = (tk__cmp_part){(const char *)x + b0, (const char *)y + b0, b1 - b0, false};
    }
    tk__fan_out(a->pool, part, sizeof *part, n, tk__cmp_part_run);
    bool differ = false;
    for (int64_t i = 0; i < n; i++)
        differ |= part[i].differ;
    if (part != &one)
        free(part);
    return differ;
}

/* Store the inputs and measure the oracle against itself, run the
 * candidate, and measure its output only when it is not the oracle's bit
 * for bit; diagnose a failure. */
static int tk__audit_case(tk_audit *a, int64_t index, tk__case_result *res)
{
    if (a->k->reduce)
        return tk__audit_reduction(a, index, res);
    const tk__case *c = &a->cases[index];
    tk_matrix *m[TK_KERNEL_MAX_INPUTS + 1];
    int n = a->k->n_inputs;
    size_t plane = (size_t)(c->rows * c->cols) * (size_t)tk__esize(c->dtype);
    char *mem = NULL;
    int rc = tk__work(a, c, n + 2, &mem);
    if (rc || (rc = tk__wrap_planes(c, mem, n + 1, m)))
        return rc;
    char *oracle = (char *)m[0]->data + (size_t)(n + 1) * tk__plane_bytes(c);
    fenv_t left;
    bool ran = false;   /* the candidate returned 0: its environment goes back */
    if (!(rc = tk__progress_report(a, index, "oracle", 0.0)) &&
        !(rc = tk__measure(a, c, m, oracle, NULL, m[n]->data, res)) &&
        !(rc = tk__progress_report(a, index, "candidate", 0.0)) &&
        (ran = !(rc = tk__run_candidate("tk_audit_run", a, index, m, m[n], true, &left))) &&
        tk__differs(a, m[n]->data, oracle, plane) &&
        !(rc = tk__progress_report(a, index, "measure", 0.0)) &&
        !(rc = tk__measure(a, c, m, oracle, m[n], NULL, res)) && res->impl.mismatches &&
        !(rc = tk__progress_report(a, index, "diagnosis", 0.0)))
        rc = tk__diagnose(a, c, m, m[n], &res->diagnosis);
    tk__destroy_all(m, n + 1);
    if (ran)
        fesetenv(&left);
    return rc;
}

static int tk__audit_run(tk_audit *a)
{
    if (!a->fn)
        return tk__fail(TK_ESTATE, "tk_audit_run: no candidate; call "
                        "tk_audit_set_candidate first");
    if (a->n_cases == 0)
        return tk__fail(TK_ESTATE, "tk_audit_run: no cases; call tk_audit_add_case "
                        "first");
    if (a->k->body_kind != TK_BODY_ELEMENTWISE)
        return tk__fail(TK_EINVAL, "tk_audit_run: the contract's body kind became %d; "
                        "only TK_BODY_ELEMENTWISE contracts can be audited",
                        a->k->body_kind);
    /* The accumulation may have changed (tk_kernel_set) since the reduction
     * cases were added: what adding them checked is checked again. */
    for (int64_t i = 0; i < a->n_cases && a->k->reduce; i++) {
        const tk__case *c = &a->cases[i];
        if (!tk__dtype_holds(a->k->accum, c->dtype))
            return tk__fail(TK_EDTYPE, "tk_audit_run: case %lld: the contract now "
                            "accumulates in %s, which cannot hold every %s input: "
                            "mismatched accumulation", (long long)i,
                            tk_dtype_name(a->k->accum), tk_dtype_name(c->dtype));
        if (tk__reduction_check(a->k->accum, a->k->reduce, c->rows, c->depth, c->cols,
                                c->dtype, c->out_dtype))
            return tk__fail(TK_ERANGE, "tk_audit_run: case %lld: k = %lld is too deep for a "
                            "worst-case bound of %s accumulation, which the contract now "
                            "declares", (long long)i, (long long)c->depth,
                            tk_dtype_name(a->k->accum));
    }
    tk__case_result *res = calloc((size_t)a->n_cases, sizeof *res);
    if (!res)
        return tk__fail(TK_ENOMEM, "tk_audit_run: out of memory for %lld results",
                        (long long)a->n_cases);
    int64_t failed = 0, first = -1;
    /* Every case starts under the environment the run began with; each
     * puts back the one its candidate left, which the caller sees after. */
    fenv_t run;
    fegetenv(&run);
    for (int64_t i = 0; i < a->n_cases; i++) {
        if (i)
            fesetenv(&run);
        int rc = tk__audit_case(a, i, &res[i]);
        if (rc) {
            free(res);
            return rc;
        }
        if (!tk__case_passed(&res[i]) && failed++ == 0)
            first = i;
    }
    tk__invalidate(a);
    a->res = res;
    a->ran_as = *a->k;
    if (!failed)
        return TK_OK;
    const tk__case *c = &a->cases[first];
    if (res[first].bounded)
        return tk__fail(TK_EMISMATCH, "tk_audit_run: %lld of %lld cases exceed their error "
                        "bound; first is case %lld (%lldx%lldx%lld %s), error %.3g times "
                        "the bound at (%lld, %lld), diagnosis %s", (long long)failed,
                        (long long)a->n_cases, (long long)first, (long long)c->rows,
                        (long long)c->depth, (long long)c->cols, tk_dtype_name(c->dtype),
                        res[first].ratio, (long long)res[first].ratio_row,
                        (long long)res[first].ratio_col,
                        tk_audit_schedule_name(res[first].diagnosis));
    return tk__fail(TK_EMISMATCH, "tk_audit_run: %lld of %lld cases differ from the "
                    "represented-input oracle; first is case %lld (%lldx%lld %s) with "
                    "%lld mismatches, schedule %s", (long long)failed,
                    (long long)a->n_cases, (long long)first, (long long)c->rows,
                    (long long)c->cols, tk_dtype_name(c->dtype),
                    (long long)res[first].impl.mismatches,
                    tk_audit_schedule_name(res[first].diagnosis));
}

int tk_audit_run(tk_audit *a)
{
    if (!a)
        return tk__fail(TK_EINVAL, "tk_audit_run: handle is NULL");
    int rc = tk__not_running("tk_audit_run", a);
    if (rc)
        return rc;
    a->running = true;
    tk__kernel_hold(a->k, 1);
    rc = tk__audit_run(a);
    tk__kernel_hold(a->k, -1);
    a->running = false;
    return rc;
}

static double tk__nonneg(double v) { return v > 0.0 ? v : 0.0; }

int tk_audit_result(const tk_audit *a, int64_t case_index, int metric, double *value)
{
    if (!a || !value)
        return tk__fail(TK_EINVAL, "tk_audit_result: %s is NULL",
                        !a ? "handle" : "value");
    if (case_index < 0 || case_index >= a->n_cases)
        return tk__fail(TK_ERANGE, "tk_audit_result: case %lld is outside [0, %lld)",
                        (long long)case_index, (long long)a->n_cases);
    if (metric < TK_AUDIT_IMPL_MAX_ABS || metric > TK_AUDIT_OUT_DTYPE)
        return tk__fail(TK_EINVAL, "tk_audit_result: unknown metric %d", metric);
    const tk__case *c = &a->cases[case_index];
    double v;
    if (metric >= TK_AUDIT_BOUND_RATIO && metric <= TK_AUDIT_BOUND_COL && !c->depth)
        return tk__fail(TK_EINVAL, "tk_audit_result: case %lld is elementwise, whose "
                        "contract is exact: it has no error bound (metric %d)",
                        (long long)case_index, metric);
    switch (metric) {
    case TK_AUDIT_DEPTH: *value = (double)c->depth; return TK_OK;
    case TK_AUDIT_OUT_DTYPE: *value = c->out_dtype; return TK_OK;
    case TK_AUDIT_ROWS: *value = (double)c->rows; return TK_OK;
    case TK_AUDIT_COLS: *value = (double)c->cols; return TK_OK;
    case TK_AUDIT_DTYPE: *value = c->dtype; return TK_OK;
    case TK_AUDIT_GAP_ATOL: *value = a->gap_atol[tk__gap_dtype(c)]; return TK_OK;
    case TK_AUDIT_GAP_RTOL: *value = a->gap_rtol[tk__gap_dtype(c)]; return TK_OK;
    default: break;
    }
    if (!a->res)
        return tk__fail(TK_ESTATE, "tk_audit_result: metric %d needs a complete "
                        "tk_audit_run after the last change", metric);
    const tk__case_result *r = &a->res[case_index];
    switch (metric) {
    case TK_AUDIT_IMPL_MAX_ABS: v = tk__nonneg(r->impl.max_abs); break;
    case TK_AUDIT_IMPL_MAX_ULP: v = (double)r->impl.max_ulp_seen; break;
    case TK_AUDIT_IMPL_MISMATCHES: v = (double)r->impl.mismatches; break;
    case TK_AUDIT_GAP_MAX_ABS: v = tk__nonneg(r->gap.max_abs); break;
    case TK_AUDIT_GAP_MAX_REL: v = tk__nonneg(r->gap.max_rel); break;
    case TK_AUDIT_GAP_INPUT_MAX_ABS: v = r->input_part; break;
    case TK_AUDIT_GAP_OUTPUT_MAX_ABS: v = r->output_part; break;
    case TK_AUDIT_PASSED: v = tk__case_passed(r); break;
    case TK_AUDIT_BOUND_RATIO: v = r->ratio; break;
    case TK_AUDIT_BOUND: v = r->bound; break;
    case TK_AUDIT_BOUND_ROW: v = (double)r->ratio_row; break;
    case TK_AUDIT_BOUND_COL: v = (double)r->ratio_col; break;
    case TK_AUDIT_GAP_PASSED: v = r->gap.mismatches == 0; break;
    case TK_AUDIT_SCALE: v = r->scale; break;
    case TK_AUDIT_DIAGNOSIS: v = r->diagnosis; break;
    default: v = (double)r->gap.mismatches; break;
    }
    *value = v;
    return TK_OK;
}

const char *tk_audit_schedule_name(int schedule)
{
    switch (schedule) {
    case TK_SCHEDULE_NOT_RUN: return "not-run";
    case TK_SCHEDULE_UNKNOWN: return "unknown";
    case TK_SCHEDULE_FINAL_CAST: return "final-cast-only";
    case TK_SCHEDULE_EARLY_ROUND: return "early-rounding";
    case TK_SCHEDULE_TRUNCATE: return "truncation";
    case TK_SCHEDULE_FLUSH_SUBNORMAL: return "subnormal-flush";
    case TK_SCHEDULE_FUSED_MULADD: return "fused-multiply-add";
    case TK_SCHEDULE_SEPARATE_MULADD: return "separate-multiply-add";
    case TK_SCHEDULE_KEEP_SUBNORMAL: return "subnormals-kept";
    case TK_SCHEDULE_PRODUCTS_ROUNDED: return "products-rounded";
    case TK_SCHEDULE_K_TAIL: return "k-tail-dropped";
    case TK_SCHEDULE_BF16_ACCUM: return "bfloat16-accumulation";
    case TK_SCHEDULE_F16_ACCUM: return "float16-accumulation";
    case TK_SCHEDULE_NO_INIT: return "missing-initialization";
    case TK_SCHEDULE_XLA_ARITH: return "xla-arithmetic";
    case TK_SCHEDULE_NUMPY_ARITH: return "numpy-arithmetic";
    case TK_SCHEDULE_FUSED_KEEP_SUBNORMAL: return "fused-subnormals-kept";
    case TK_SCHEDULE_SEPARATE_FLUSH: return "separate-subnormal-flush";
    case TK_SCHEDULE_K_TAIL_PADDING: return "k-tail-reads-padding";
    default: return NULL;
    }
}

/* ---- property checks ------------------------------------------------------ */

static int tk__check_permutation(tk_audit *a, int64_t case_index, const int64_t *order);

int tk_audit_check_permutation(tk_audit *a, int64_t case_index, const int64_t *order)
{
    if (!a || !order)
        return tk__fail(TK_EINVAL, "tk_audit_check_permutation: %s is NULL",
                        !a ? "handle" : "order");
    if (a->k->reduce)
        return tk__fail(TK_EINVAL, "tk_audit_check_permutation: row permutations are for "
                        "elementwise contracts; a reduction's rows are its own");
    int rc = tk__not_running("tk_audit_check_permutation", a);
    if (rc)
        return rc;
    a->running = true;
    tk__kernel_hold(a->k, 1);
    rc = tk__check_permutation(a, case_index, order);
    tk__kernel_hold(a->k, -1);
    a->running = false;
    return rc;
}

static int tk__check_permutation(tk_audit *a, int64_t case_index, const int64_t *order)
{
    if (case_index < 0 || case_index >= a->n_cases)
        return tk__fail(TK_ERANGE, "tk_audit_check_permutation: case %lld is outside "
                        "[0, %lld)", (long long)case_index, (long long)a->n_cases);
    if (!a->fn)
        return tk__fail(TK_ESTATE, "tk_audit_check_permutation: no candidate; call "
                        "tk_audit_set_candidate first");
    const tk__case *c = &a->cases[case_index];
    int n = a->k->n_inputs;
    bool *seen = calloc((size_t)c->rows, sizeof *seen);
    if (!seen)
        return tk__fail(TK_ENOMEM, "tk_audit_check_permutation: out of memory");
    for (int64_t r = 0; r < c->rows; r++) {
        int64_t s = order[r];
        if (s < 0 || s >= c->rows || seen[s]) {
            free(seen);
            return tk__fail(TK_EINVAL, "tk_audit_check_permutation: order[%lld] = %lld "
                            "%s; order must permute 0..%lld", (long long)r,
                            (long long)s, s < 0 || s >= c->rows ? "is out of range"
                            : "repeats a row", (long long)c->rows - 1);
        }
        seen[s] = true;
    }
    free(seen);
    /* Planes: the stored inputs, the permuted ones (row r of every input is
     * its row order[r]), and the two outputs. */
    tk_matrix *m[2 * TK_KERNEL_MAX_INPUTS + 2], **pin = m + n;
    size_t row_bytes = (size_t)c->cols * (size_t)tk__esize(c->dtype), bytes;
    int rc = tk__planes_bytes(c, 2 * n + 2, &bytes);
    if (rc)
        return rc;
    char *mem = malloc(bytes);
    if (!mem)
        return tk__fail(TK_ENOMEM, "tk_audit_check_permutation: out of memory for "
                        "%zu bytes", bytes);
    if ((rc = tk__wrap_planes(c, mem, 2 * n + 2, m))) {
        free(mem);
        return rc;
    }
    tk_matrix *out = m[2 * n], *pout = m[2 * n + 1];
    tk__represent(a, c, m);
    for (int i = 0; i < n; i++)
        for (int64_t r = 0; r < c->rows; r++)
            memcpy(tk__row(pin[i], r), tk__row(m[i], order[r]), row_bytes);
    fenv_t left;   /* both runs start under the caller's environment */
    bool ran = false;
    const char *fn = "tk_audit_check_permutation";
    if (!(rc = tk__run_candidate(fn, a, case_index, m, out, false, &left)) &&
        (ran = !(rc = tk__run_candidate(fn, a, case_index, pin, pout, false, &left)))) {
        for (int64_t r = 0; r < c->rows; r++) {
            const char *got = tk__row(pout, r), *want = tk__row(out, order[r]);
            if (!memcmp(got, want, row_bytes))
                continue;
            int64_t j = 0;
            size_t es = (size_t)tk__esize(c->dtype);
            while (!memcmp(got + j * (int64_t)es, want + j * (int64_t)es, es))
                j++;
            float g, w;
            tk__row_to_f32(c->dtype, got + j * (int64_t)es, &g, 1);
            tk__row_to_f32(c->dtype, want + j * (int64_t)es, &w, 1);
            rc = tk__fail(TK_EMISMATCH, "tk_audit_check_permutation: case %lld: "
                          "output row %lld restored from permuted row %lld differs "
                          "at column %lld: %.9g after permuting, %.9g without",
                          (long long)case_index, (long long)order[r], (long long)r,
                          (long long)j, (double)g, (double)w);
            break;
        }
    }
    tk__destroy_all(m, 2 * n + 2);
    free(mem);
    if (ran)
        fesetenv(&left);
    return rc;
}

int tk_rounding_counterexample(int dtype, float first, float second, float *early,
                               float *late)
{
    if (!early || !late)
        return tk__fail(TK_EINVAL, "tk_rounding_counterexample: %s is NULL",
                        !early ? "early" : "late");
    if (!tk__is_float_dtype(dtype))
        return tk__fail(TK_EDTYPE, "tk_rounding_counterexample: dtype %d (%s) is not "
                        TK__FLOAT_DTYPES, dtype,
                        tk__dtype_label(dtype));
    float e = tk__round_to(dtype, tk__round_to(dtype, first) + second);
    float l = tk__round_to(dtype, first + second);
    *early = e;
    *late = l;
    return TK_OK;
}
