/* axpy.c - the built-in axpy body, f32(f32(alpha * x) + y) under the
 * declared arithmetic, and its element loops: the hot loops of the host
 * executor and the pipeline, compiled once per dispatched path. */
#include "internal.h"

#include <string.h>
#if TK__ISA_X86
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

/* How far ahead the streaming loops prefetch their inputs: TK__AHEAD f32
 * elements, 2 KiB, and as many bytes of bf16.  The hardware prefetcher
 * stops at each 4 KiB page; with the reads already under way one core's
 * loads kept up better: on an Intel Xeon the f32 built-in body took a
 * tenth less time, the bf16 one on the AVX2 path 5 to 9% less (1 to 4 KiB
 * measured alike). */
enum { TK__AHEAD = 512 };

/* ---- element loops ---------------------------------------------------------
 * No restrict: the output may be exactly an input.  The vectorized loops of
 * the default arithmetic apply the NaN rule (tk__axpy_nan) only to a run
 * of results that holds a NaN, which every NaN operand makes: the test
 * costs less than the rule on every element.  The scalar loops apply it to
 * each element. */

/* Where t, the n results of a * x + y, holds a NaN: every one under the
 * NaN rule. */
static inline void tk__axpy_fix(float *t, const float *x, const float *y, int64_t n, float a)
{
    uint32_t nan = 0;
    for (int64_t i = 0; i < n; i++)
        nan |= (tk__f32_bits(t[i]) & 0x7FFFFFFFu) > 0x7F800000u;
    if (nan)
        for (int64_t i = 0; i < n; i++)
            t[i] = tk__axpy_nan(a, x[i], y[i], t[i]);
}

/* One bf16 result under the NaN rule. */
static inline uint16_t tk__axpy_bf16_rule(float a, uint16_t x, uint16_t y)
{
    float fx = tk__bf16_to(x), fy = tk__bf16_to(y);
    return tk__bf16_from(tk__axpy_nan(a, fx, fy, a * fx + fy));
}

/* The same for bf16: t holds the rounded codes, whose NaNs are the f32
 * results' (the rounding keeps a NaN one). */
static inline void tk__axpy_fix_bf16(uint16_t *t, const uint16_t *x, const uint16_t *y,
                                     int64_t n, float a)
{
    uint16_t nan = 0;
    for (int64_t i = 0; i < n; i++)
        nan |= (uint16_t)((t[i] & 0x7FFFu) > 0x7F80u);
    if (nan)
        for (int64_t i = 0; i < n; i++)
            t[i] = tk__axpy_bf16_rule(a, x[i], y[i]);
}

enum { TK__PIECE = 256 };

/* An output that is exactly an input loses the operands the NaN rule
 * needs as it is written: it goes a piece at a time through a buffer.
 * Others are written directly, their NaN test folded into the loop.
 * always_inline: each dispatched path must compile its own copy (flatten
 * left these two as baseline-ISA calls once they grew). */
static inline __attribute__((always_inline)) void tk__axpy_f32(float *o, const float *x,
                                                             const float *y, int64_t n, float a)
{
    if (o == x || o == y) {
        for (int64_t i = 0; i < n; i += TK__PIECE) {
            int64_t m = n - i < TK__PIECE ? n - i : TK__PIECE;
            float t[TK__PIECE];
            for (int64_t j = 0; j < m; j++)
                t[j] = a * x[i + j] + y[i + j];
            tk__axpy_fix(t, x + i, y + i, m, a);
            memcpy(o + i, t, (size_t)m * sizeof *t);
        }
        return;
    }
    uint32_t nan = 0;
    for (int64_t i = 0; i < n; i++) {
        o[i] = a * x[i] + y[i];
        nan |= (tk__f32_bits(o[i]) & 0x7FFFFFFFu) > 0x7F800000u;
    }
    if (nan)
        tk__axpy_fix(o, x, y, n, a);
}

static inline __attribute__((always_inline)) void tk__axpy_bf16(uint16_t *o, const uint16_t *x,
                                                              const uint16_t *y, int64_t n,
                                                              float a)
{
    if (o == x || o == y) {
        for (int64_t i = 0; i < n; i += TK__PIECE) {
            int64_t m = n - i < TK__PIECE ? n - i : TK__PIECE;
            uint16_t t[TK__PIECE];
            for (int64_t j = 0; j < m; j++)
                t[j] = tk__bf16_from(a * tk__bf16_to(x[i + j]) + tk__bf16_to(y[i + j]));
            tk__axpy_fix_bf16(t, x + i, y + i, m, a);
            memcpy(o + i, t, (size_t)m * sizeof *t);
        }
        return;
    }
    uint16_t nan = 0;
    for (int64_t i = 0; i < n; i++) {
        o[i] = tk__bf16_from(a * tk__bf16_to(x[i]) + tk__bf16_to(y[i]));
        nan |= (uint16_t)((o[i] & 0x7FFFu) > 0x7F80u);
    }
    if (nan)
        tk__axpy_fix_bf16(o, x, y, n, a);
}

/* Any dtype under any arithmetic, through f32 chunks: each chunk of x and
 * y is promoted before any of its results is stored, so o may be x or y. */
static void tk__axpy_any(int dtype, void *o, const void *x, const void *y, int64_t n,
                         float a, int arith)
{
    enum { CHUNK = 256 };
    float fx[CHUNK], fy[CHUNK];
    size_t es = (size_t)tk__esize(dtype);
    for (int64_t i = 0; i < n; i += CHUNK) {
        int64_t m = n - i < CHUNK ? n - i : CHUNK;
        tk__row_to_f32(dtype, (const char *)x + (size_t)i * es, fx, m);
        tk__row_to_f32(dtype, (const char *)y + (size_t)i * es, fy, m);
        if (arith)
            for (int64_t j = 0; j < m; j++)
                fx[j] = tk__axpy_arith(a, fx[j], fy[j], arith);
        else
            tk__axpy_f32(fx, fx, fy, m, a);
        tk__row_from_f32(dtype, fx, (char *)o + (size_t)i * es, m);
    }
}

/* One line to a 64-byte aligned o by streaming stores, which write the line
 * without first reading its old contents from memory as an ordinary store
 * does.  Only x86 has them here; elsewhere the stores are ordinary. */
static inline void tk__axpy_line_nt(float *o, const float *x, const float *y, float a)
{
#if defined(__SSE2__)
    __m128 v[TK__LINE / 4];
    for (int k = 0; k < TK__LINE / 4; k++) {
        __m128 vx, vy;
        memcpy(&vx, x + 4 * k, sizeof vx);
        memcpy(&vy, y + 4 * k, sizeof vy);
        v[k] = _mm_add_ps(_mm_mul_ps(_mm_set1_ps(a), vx), vy);
    }
    /* A NaN among the results makes their sum NaN (as may Inf - Inf, when
     * the rule then changes nothing). */
    _Static_assert(TK__LINE == 16, "a line is four vectors of four floats");
    __m128 sum = _mm_add_ps(_mm_add_ps(v[0], v[1]), _mm_add_ps(v[2], v[3]));
    if (_mm_movemask_ps(_mm_cmpunord_ps(sum, sum))) {
        float t[TK__LINE];
        memcpy(t, v, sizeof t);
        tk__axpy_fix(t, x, y, TK__LINE, a);
        memcpy(v, t, sizeof t);
    }
    for (int k = 0; k < TK__LINE / 4; k++)
        _mm_stream_ps(o + 4 * k, v[k]);
#else
    tk__axpy_f32(o, x, y, TK__LINE, a);
#endif
}

/* n elements of a line by 4-byte streaming stores: a line that two tiles
 * share is then written by streaming stores only (ordinary stores on the
 * shared lines, streaming ones elsewhere, measured about 1.6x slower on
 * 8x128 blocks of rows that straddle lines). */
static inline void tk__axpy_part_nt(float *o, const float *x, const float *y, int64_t n,
                                    float a)
{
#if defined(__SSE2__)
    for (int64_t i = 0; i < n; i++) {
        float v = tk__axpy_nan(a, x[i], y[i], a * x[i] + y[i]);
        int bits;
        memcpy(&bits, &v, sizeof bits);
        _mm_stream_si32((int *)(void *)(o + i), bits);
    }
#else
    tk__axpy_f32(o, x, y, n, a);
#endif
}

/* Elements from o to its next 64-byte line boundary, at most n. */
static inline int64_t tk__skew(const float *o, int64_t n)
{
    int64_t k = (int64_t)((-(uintptr_t)o & 63) / sizeof *o);
    return k < n ? k : n;
}

#if TK__ISA_X86
enum { TK__STEP = 4 * TK__LINE };   /* elements of a step of the line loops below */

/* One step's results into t under the NaN rule, computed again out of
 * line: inlined, the rule kept the loaded x and y in registers and the
 * loop's loads apart from its arithmetic, and handing it the vectors
 * stored them on every step. */
__attribute__((noinline, cold)) static void tk__axpy_step_rule(float *t, const float *x,
                                                              const float *y, float a)
{
    for (int i = 0; i < TK__STEP; i++)
        t[i] = a * x[i] + y[i];
    tk__axpy_fix(t, x, y, TK__STEP, a);
}

/* The prefetches of the step at c of a row of n, `ahead` (see below). */
static inline void tk__axpy_ahead(const float *x, const float *y, int64_t c, int64_t n,
                                  bool ahead)
{
    for (int l = 0; ahead && c + TK__AHEAD < n && l < 4; l++) {
        __builtin_prefetch(x + c + TK__AHEAD + TK__LINE * l);
        __builtin_prefetch(y + c + TK__AHEAD + TK__LINE * l);
    }
}

/* tk__axpy_line_nt's lines on the AVX-512 and AVX2 paths, four lines a
 * step with one NaN test for the four (their sum: a step with a NaN is
 * computed again by the rule), o starting a line; they
 * return the elements done, the last few lines left to the caller.
 * `ahead`: each step prefetches x and y TK__AHEAD elements on, as the
 * Intel tuning asks (tk__axpy_lines).  On an AMD EPYC (Zen 3), against the
 * fused streaming loop in one process, a line a step read 1.13 to 1.14
 * with the prefetches and the rule inline, 1.09 to 1.10 without the
 * prefetches, 1.03 to 1.05 with the rule out of line too; four lines a
 * step, 0.98 to 1.01 (the SSE2 line 1.09 to 1.18 in bench_kernel). */
TK__ON_AVX512 static inline int64_t tk__axpy_lines_512(float *o, const float *x, const float *y,
                                                      int64_t n, float a, bool ahead)
{
    enum { K = TK__STEP / 16 };   /* vectors a step */
    const __m512 va = _mm512_set1_ps(a);
    int64_t c = 0;
    for (; c + TK__STEP <= n; c += TK__STEP) {
        tk__axpy_ahead(x, y, c, n, ahead);
        __m512 v[K], sum = _mm512_setzero_ps();
        for (int k = 0; k < K; k++) {
            v[k] = _mm512_add_ps(_mm512_mul_ps(va, _mm512_loadu_ps(x + c + 16 * k)),
                                 _mm512_loadu_ps(y + c + 16 * k));
            sum = _mm512_add_ps(sum, v[k]);   /* NaN where any is, as above */
        }
        if (_mm512_cmp_ps_mask(sum, sum, _CMP_UNORD_Q)) {
            _Alignas(64) float t[TK__STEP];
            tk__axpy_step_rule(t, x + c, y + c, a);
            for (int k = 0; k < K; k++)
                _mm512_stream_ps(o + c + 16 * k, _mm512_load_ps(t + 16 * k));
            continue;
        }
        for (int k = 0; k < K; k++)
            _mm512_stream_ps(o + c + 16 * k, v[k]);
    }
    return c;
}

TK__ON_AVX2 static inline int64_t tk__axpy_lines_256(float *o, const float *x, const float *y,
                                                    int64_t n, float a, bool ahead)
{
    enum { K = TK__STEP / 8 };   /* vectors a step */
    const __m256 va = _mm256_set1_ps(a);
    int64_t c = 0;
    for (; c + TK__STEP <= n; c += TK__STEP) {
        tk__axpy_ahead(x, y, c, n, ahead);
        __m256 v[K], sum = _mm256_setzero_ps();
        for (int k = 0; k < K; k++) {
            v[k] = _mm256_add_ps(_mm256_mul_ps(va, _mm256_loadu_ps(x + c + 8 * k)),
                                 _mm256_loadu_ps(y + c + 8 * k));
            sum = _mm256_add_ps(sum, v[k]);   /* NaN where any is, as above */
        }
        if (_mm256_movemask_ps(_mm256_cmp_ps(sum, sum, _CMP_UNORD_Q))) {
            _Alignas(32) float t[TK__STEP];
            tk__axpy_step_rule(t, x + c, y + c, a);
            for (int k = 0; k < K; k++)
                _mm256_stream_ps(o + c + 8 * k, _mm256_load_ps(t + 8 * k));
            continue;
        }
        for (int k = 0; k < K; k++)
            _mm256_stream_ps(o + c + 8 * k, v[k]);
    }
    return c;
}

/* The lines of the path in use, each loop compiled with and without the
 * prefetches; 0 on the portable path. */
TK__ON_AVX512 static int64_t tk__axpy_lines_on_512(float *o, const float *x, const float *y,
                                                  int64_t n, float a, bool ahead)
{
    return ahead ? tk__axpy_lines_512(o, x, y, n, a, true)
                 : tk__axpy_lines_512(o, x, y, n, a, false);
}

TK__ON_AVX2 static int64_t tk__axpy_lines_on_256(float *o, const float *x, const float *y,
                                                int64_t n, float a, bool ahead)
{
    return ahead ? tk__axpy_lines_256(o, x, y, n, a, true)
                 : tk__axpy_lines_256(o, x, y, n, a, false);
}
#endif

static inline int64_t tk__axpy_lines(float *o, const float *x, const float *y, int64_t n,
                                     float a)
{
#if TK__ISA_X86
    bool ahead = tk__tune() == TK__TUNE_INTEL;
    if (tk__isa() == TK__ISA_AVX512)
        return tk__axpy_lines_on_512(o, x, y, n, a, ahead);
    if (tk__isa() == TK__ISA_AVX2)
        return tk__axpy_lines_on_256(o, x, y, n, a, ahead);
#endif
    (void)o, (void)x, (void)y, (void)n, (void)a;
    return 0;
}

/* A row of n elements by streaming stores only. */
static inline void tk__axpy_row_nt(float *o, const float *x, const float *y, int64_t n,
                                   float a)
{
    int64_t c = tk__skew(o, n);
    tk__axpy_part_nt(o, x, y, c, a);
    c += tk__axpy_lines(o + c, x + c, y + c, n - c, a);
    for (; c + TK__LINE <= n; c += TK__LINE) {
        if (c + TK__AHEAD < n) {
            __builtin_prefetch(x + c + TK__AHEAD);
            __builtin_prefetch(y + c + TK__AHEAD);
        }
        tk__axpy_line_nt(o + c, x + c, y + c, a);
    }
    tk__axpy_part_nt(o + c, x + c, y + c, n - c, a);
}

#if TK__ISA_X86
/* tk__axpy_bf16_nt's lines on the AVX-512 path: 32 results a step, from x
 * and y read before the line of o is written, streamed as one 64-byte
 * store; a line with a NaN result (which every NaN operand makes) takes
 * the rule element by element.  The compiled loop in tk__axpy_bf16_nt
 * (which the portable path still runs) goes through a buffer and 16-byte
 * stores, and took 1.2x this one's time on an Intel Xeon's AVX-512 path.
 * o starts a line; returns the elements done. */
TK__ON_AVX512 static int64_t tk__axpy_bf16_lines_512(uint16_t *o, const uint16_t *x,
                                                    const uint16_t *y, int64_t n, float a)
{
    const __m512 va = _mm512_set1_ps(a);
    int64_t c = 0;
    for (; c + 32 <= n; c += 32) {
        if (c + 2 * TK__AHEAD < n) {
            __builtin_prefetch(x + c + 2 * TK__AHEAD);
            __builtin_prefetch(y + c + 2 * TK__AHEAD);
        }
        __m256i h[2];
        __mmask16 nan = 0;
        for (int k = 0; k < 2; k++) {
            __m512 fx = _mm512_castsi512_ps(_mm512_slli_epi32(
                _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)(x + c + 16 * k))), 16));
            __m512 fy = _mm512_castsi512_ps(_mm512_slli_epi32(
                _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)(y + c + 16 * k))), 16));
            __m512 v = _mm512_add_ps(_mm512_mul_ps(va, fx), fy);
            nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
            /* TK__BF16_ROUND without its NaN lanes: those go below. */
            __m512i u = tk__bf16_biased_512(_mm512_castps_si512(v));
            h[k] = _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16));
        }
        if (nan) {
            uint16_t t[32];
            for (int k = 0; k < 32; k++)
                t[k] = tk__axpy_bf16_rule(a, x[c + k], y[c + k]);
            memcpy(h, t, sizeof t);
        }
        _mm512_stream_si512((void *)(o + c),
                            _mm512_inserti64x4(_mm512_castsi256_si512(h[0]), h[1], 1));
    }
    return c;
}

/* The same on the AVX2 path, a line as four vectors of 8 results packed
 * into two 32-byte streaming stores (the compiled loop took 1.5x to 1.8x
 * its time on an Intel Xeon). */
TK__ON_AVX2 static int64_t tk__axpy_bf16_lines_256(uint16_t *o, const uint16_t *x,
                                                  const uint16_t *y, int64_t n, float a)
{
    const __m256 va = _mm256_set1_ps(a);
    int64_t c = 0;
    for (; c + 32 <= n; c += 32) {
        if (c + 2 * TK__AHEAD < n) {
            __builtin_prefetch(x + c + 2 * TK__AHEAD);
            __builtin_prefetch(y + c + 2 * TK__AHEAD);
        }
        __m256i h[4];
        int nan = 0;
        for (int k = 0; k < 4; k++) {
            __m256 fx = _mm256_castsi256_ps(_mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128((const void *)(x + c + 8 * k))), 16));
            __m256 fy = _mm256_castsi256_ps(_mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128((const void *)(y + c + 8 * k))), 16));
            __m256 v = _mm256_add_ps(_mm256_mul_ps(va, fx), fy);
            nan |= _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            h[k] = _mm256_srli_epi32(tk__bf16_biased_256(_mm256_castps_si256(v)), 16);
        }
        /* packus interleaves 128-bit lanes; the permute puts them back in
         * order (the codes fit 16 bits, so nothing saturates). */
        __m256i lo = _mm256_permute4x64_epi64(_mm256_packus_epi32(h[0], h[1]), 0xD8),
                hi = _mm256_permute4x64_epi64(_mm256_packus_epi32(h[2], h[3]), 0xD8);
        if (nan) {
            uint16_t t[32];
            for (int k = 0; k < 32; k++)
                t[k] = tk__axpy_bf16_rule(a, x[c + k], y[c + k]);
            memcpy(&lo, t, sizeof lo);
            memcpy(&hi, t + 16, sizeof hi);
        }
        _mm256_stream_si256((void *)(o + c), lo);
        _mm256_stream_si256((void *)(o + c + 16), hi);
    }
    return c;
}
#endif

/* n bf16 results to o, its whole 64-byte lines by streaming stores (the
 * rest by ordinary stores): on the AVX-512 and AVX2 paths by their line
 * loops; on the portable path in runs of four lines (one NaN test for the
 * four), each computed into a buffer first.  Either way x and y are read
 * before o is written, so an output that is exactly an input stays
 * correct.  always_inline, as tk__axpy_f32. */
static inline __attribute__((always_inline)) void tk__axpy_bf16_nt(uint16_t *o,
                                                                 const uint16_t *x,
                                                                 const uint16_t *y,
                                                                 int64_t n, float a)
{
#if defined(__SSE2__)
    enum { L = 4 * 64 / sizeof *o };
    int64_t c = (int64_t)((-(uintptr_t)o & 63) / sizeof *o);
    c = c < n ? c : n;
    tk__axpy_bf16(o, x, y, c, a);
#if TK__ISA_X86
    if (tk__isa() == TK__ISA_AVX512)
        c += tk__axpy_bf16_lines_512(o + c, x + c, y + c, n - c, a);
    else if (tk__isa() == TK__ISA_AVX2)
        c += tk__axpy_bf16_lines_256(o + c, x + c, y + c, n - c, a);
#endif
    for (; c + L <= n; c += L) {
        if (c + 2 * TK__AHEAD + L <= n)
            for (int k = 0; k < L; k += 64 / sizeof *o) {
                __builtin_prefetch(x + c + 2 * TK__AHEAD + k);
                __builtin_prefetch(y + c + 2 * TK__AHEAD + k);
            }
        uint16_t t[L];   /* a fixed-length loop: no overlap check to pay */
        for (int k = 0; k < L; k++)
            t[k] = tk__bf16_from(a * tk__bf16_to(x[c + k]) + tk__bf16_to(y[c + k]));
        tk__axpy_fix_bf16(t, x + c, y + c, L, a);
        for (int k = 0; k < L; k += 8) {
            __m128i v;
            memcpy(&v, t + k, sizeof v);
            _mm_stream_si128((__m128i *)(void *)(o + c + k), v);
        }
    }
    tk__axpy_bf16(o + c, x + c, y + c, n - c, a);
#else
    tk__axpy_bf16(o, x, y, n, a);
#endif
}

/* The built-in body as a tk_body_fn: f32(f32(alpha*x) + y), or the
 * declared arithmetic, row by row.  Runs of the executor do not call it
 * (they compute on the matrices, see tk__axpy_row); calls, the audit and
 * the pipeline's slot-by-slot runs do, on contiguous blocks. */
TK_DISPATCH_RET(int, tk__axpy_block,
                (void *user, int64_t rows, int64_t cols, int64_t ld, const float *const *in,
                 float *out),
                (user, rows, cols, ld, in, out))
{
    const struct tk__axpy *p = user;
    const float a = p->alpha;
    for (int64_t r = 0; r < rows; r++) {
        float *o = out + r * ld;
        const float *x = in[0] + r * ld, *y = in[1] + r * ld;
        if (p->arith)
            for (int64_t c = 0; c < cols; c++)
                o[c] = tk__axpy_arith(a, x[c], y[c], p->arith);
        else
            tk__axpy_f32(o, x, y, cols, a);
    }
    return 0;
}

int tk__axpy_body(void *user, int64_t rows, int64_t cols, int64_t ld, const float *const *in,
                  float *out)
{
    return tk__axpy_block(user, rows, cols, ld, in, out);
}

/* n elements of one row of the matrices, in their dtype; `stream`: by
 * streaming stores (a long run of a large output). */
TK_DISPATCH(tk__axpy_row_paths,
            (const struct tk__axpy *p, int dtype, void *o, const void *x, const void *y,
             int64_t n, bool stream),
            (p, dtype, o, x, y, n, stream))
{
    if (dtype == TK_DTYPE_F32 && !p->arith && stream)
        tk__axpy_row_nt(o, x, y, n, p->alpha);
    else if (dtype == TK_DTYPE_F32 && !p->arith)
        tk__axpy_f32(o, x, y, n, p->alpha);
    else if (dtype == TK_DTYPE_BF16 && !p->arith && stream)
        tk__axpy_bf16_nt(o, x, y, n, p->alpha);
    else if (dtype == TK_DTYPE_BF16 && !p->arith)
        tk__axpy_bf16(o, x, y, n, p->alpha);
    else
        tk__axpy_any(dtype, o, x, y, n, p->alpha, p->arith);
}

void tk__axpy_row(const struct tk__axpy *p, int dtype, void *o, const void *x, const void *y,
                  int64_t n, bool stream)
{
    tk__axpy_row_paths(p, dtype, o, x, y, n, stream);
}
