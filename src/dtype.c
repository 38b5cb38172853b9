/* dtype.c - storage dtypes: names, sizes, conversions to and from f32 as
 * ml_dtypes and numpy define them, ULP distances. */
#include "internal.h"

#include <math.h>
#include <string.h>

const char *tk_dtype_name(int dtype)
{
    switch (dtype) {
    case TK_DTYPE_F32: return "float32";
    case TK_DTYPE_BF16: return "bfloat16";
    case TK_DTYPE_I32: return "int32";
    case TK_DTYPE_F16: return "float16";
    case TK_DTYPE_F8E4M3FN: return "float8_e4m3fn";
    case TK_DTYPE_F8E5M2: return "float8_e5m2";
    default: return NULL;
    }
}

int64_t tk_dtype_size(int dtype) { return tk__esize(dtype); }

static void tk__bulk(int dtype, bool to_f32, const void *src, void *dst, int64_t n);

uint16_t tk_bf16_from_f32(float x) { return tk__bf16_from(x); }

float tk_bf16_to_f32(uint16_t b) { return tk__bf16_to(b); }

/* The bulk loops are written branch-free over raw bits so the compiler
 * vectorizes them; they run at memory speed (see `make bench`). */
TK_DISPATCH(tk__bf16_from_f32_loop, (uint16_t *restrict dst, const float *restrict src, size_t n),
            (dst, src, n))
{
    const uint32_t *s = (const uint32_t *)(const void *)src;
    for (size_t i = 0; i < n; i++)
        dst[i] = (uint16_t)(tk__bf16_round(s[i]) >> 16);
}

TK_DISPATCH(tk__bf16_to_f32_loop, (float *restrict dst, const uint16_t *restrict src, size_t n),
            (dst, src, n))
{
    uint32_t *d = (uint32_t *)(void *)dst;
    for (size_t i = 0; i < n; i++)
        d[i] = (uint32_t)src[i] << 16;
}

/* No float32 array holds more than PTRDIFF_MAX bytes: a larger n is a
 * negative count converted to size_t, whose loop would run off memory. */
static int tk__bulk_count(const char *fn, size_t n)
{
    if (n > (size_t)PTRDIFF_MAX / sizeof(float))
        return tk__fail(TK_EOVERFLOW, "%s: n = %zu is more float32 elements than memory "
                        "holds (a negative count?)", fn, n);
    return TK_OK;
}

/* The checks of the bulk conversions, from f32 or to it (to_f32): each
 * array aligned to its element size, as the loops' wide stores need. */
static int tk__bulk_check(const char *fn, int dtype, bool to_f32, const void *dst,
                          const void *src, size_t n)
{
    if (!tk__is_float_dtype(dtype))
        return tk__fail(TK_EDTYPE, "%s: dtype %d (%s) is not a float dtype ("
                        TK__FLOAT_DTYPES ")", fn, dtype,
                        tk__dtype_label(dtype));
    if (n && (!dst || !src))
        return tk__fail(TK_EINVAL, "%s: %s is NULL with n = %zu", fn,
                        !dst ? "dst" : "src", n);
    size_t es = (size_t)tk__esize(dtype), des = to_f32 ? sizeof(float) : es,
           ses = to_f32 ? es : sizeof(float);
    if (n && ((uintptr_t)dst % des || (uintptr_t)src % ses)) {
        bool d = (uintptr_t)dst % des != 0;
        return tk__fail(TK_ELAYOUT, "%s: %s at %p is not aligned to its element size "
                        "(%zu bytes, %s)", fn, d ? "dst" : "src", d ? dst : src,
                        d ? des : ses, (d != to_f32) ? tk_dtype_name(dtype) : "float32");
    }
    return tk__bulk_count(fn, n);
}

int tk_bf16_from_f32_n(uint16_t *dst, const float *src, size_t n)
{
    int rc = tk__bulk_check("tk_bf16_from_f32_n", TK_DTYPE_BF16, false, dst, src, n);
    if (!rc && n)
        tk__bulk(TK_DTYPE_BF16, false, src, dst, (int64_t)n);
    return rc;
}

int tk_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n)
{
    int rc = tk__bulk_check("tk_bf16_to_f32_n", TK_DTYPE_BF16, true, dst, src, n);
    if (!rc && n)
        tk__bulk(TK_DTYPE_BF16, true, src, dst, (int64_t)n);
    return rc;
}

/* The f16 and fp8 loops: one per direction and dtype, so each inlines its
 * element rule and vectorizes. */
TK_DISPATCH(tk__f16_from_loop, (uint16_t *restrict d, const float *restrict s, size_t n),
            (d, s, n))
{
    for (size_t i = 0; i < n; i++)
        d[i] = tk__f16_from(s[i]);
}

TK_DISPATCH(tk__f16_to_loop, (float *restrict d, const uint16_t *restrict s, size_t n),
            (d, s, n))
{
    for (size_t i = 0; i < n; i++)
        d[i] = tk__f16_to(s[i]);
}

TK_DISPATCH(tk__e4m3_from_loop, (uint8_t *restrict d, const float *restrict s, size_t n),
            (d, s, n))
{
    for (size_t i = 0; i < n; i++)
        d[i] = tk__e4m3_from(s[i]);
}

TK_DISPATCH(tk__e4m3_to_loop, (float *restrict d, const uint8_t *restrict s, size_t n),
            (d, s, n))
{
    for (size_t i = 0; i < n; i++)
        d[i] = tk__e4m3_to(s[i]);
}

TK_DISPATCH(tk__e5m2_from_loop, (uint8_t *restrict d, const float *restrict s, size_t n),
            (d, s, n))
{
    for (size_t i = 0; i < n; i++)
        d[i] = tk__e5m2_from(s[i]);
}

TK_DISPATCH(tk__e5m2_to_loop, (float *restrict d, const uint8_t *restrict s, size_t n),
            (d, s, n))
{
    for (size_t i = 0; i < n; i++)
        d[i] = tk__e5m2_to(s[i]);
}

/* How far ahead of its reads a bulk conversion fetches its source, in
 * bytes (tk__bulk). */
#define TK__BULK_AHEAD 4096

/* ---- F16C on the x86 paths (every AVX2 CPU has it) ---------------------- */

#if TK__ISA_X86
#include <immintrin.h>

/* The x86 loops below store through these.  `nt` (tk__bulk's direct runs):
 * by streaming stores, to a destination aligned to the store's width, and
 * each step first fetches the source it will read TK__BULK_AHEAD bytes on
 * (tk__ahead), so that the fetches are spread over the run as the stores
 * are.  Otherwise ordinary stores, anywhere, and no fetches. */
static inline void tk__ahead(const void *s, size_t bytes, bool nt)
{
    for (size_t b = 0; nt && b < bytes; b += 64)
        __builtin_prefetch((const char *)s + TK__BULK_AHEAD + b);
}

TK__ON_AVX2 static inline void tk__put_128(void *d, __m128i v, bool nt)
{
    if (nt)
        _mm_stream_si128((__m128i *)d, v);
    else
        _mm_storeu_si128((__m128i *)d, v);
}

TK__ON_AVX2 static inline void tk__put_256(void *d, __m256i v, bool nt)
{
    if (nt)
        _mm256_stream_si256((__m256i *)d, v);
    else
        _mm256_storeu_si256((__m256i *)d, v);
}

TK__ON_AVX512 static inline void tk__put_512(void *d, __m512i v, bool nt)
{
    if (nt)
        _mm512_stream_si512(d, v);
    else
        _mm512_storeu_si512(d, v);
}

/* Each loop below is written once, as name_by with nt, and compiled twice
 * by TK__BOTH: name with ordinary stores and name_nt for tk__bulk's direct
 * runs.  (One function testing nt on each step took a row of 128 bfloat16
 * half again as long, 51 ns where it had taken 34, on an AMD EPYC.) */
#define TK__BOTH(on, name, td, ts)                                                    \
    on static void name(td *restrict d, const ts *restrict s, size_t n)             \
    {                                                                                \
        name##_by(d, s, n, false);                                                   \
    }                                                                                \
    on static void name##_nt(td *restrict d, const ts *restrict s, size_t n)        \
    {                                                                                \
        name##_by(d, s, n, true);                                                    \
    }

/* f32 -> f16 on the AVX2 path: F16C's vcvtps2ph rounds to
 * nearest even, keeps subnormals and overflows to Inf as tk__f16_from does,
 * but quiets a signalling NaN, which numpy does not, so eight floats with a
 * NaN among them take tk__f16_from.  (The bit rule alone ran at 1.2 to 1.3
 * times a memcpy of the source on an AVX2 AMD EPYC.) */
TK__ON_AVX2 static inline void tk__f16_from_f16c_by(uint16_t *restrict d, const float *restrict s,
                                                    size_t n, bool nt)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        tk__ahead(s + i, 32, nt);
        __m256 v = _mm256_loadu_ps(s + i);
        __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
        __m128i h;
        if (_mm256_testz_ps(nan, nan)) {
            h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
        } else {
            uint16_t t[8];
            for (int j = 0; j < 8; j++)
                t[j] = tk__f16_from(s[i + j]);
            memcpy(&h, t, sizeof h);
        }
        tk__put_128(d + i, h, nt);
    }
    for (; i < n; i++)
        d[i] = tk__f16_from(s[i]);
}
TK__BOTH(TK__ON_AVX2, tk__f16_from_f16c, uint16_t, float)

/* The same on the AVX-512 path, sixteen floats a step (in cache on an
 * Intel Xeon 0.052 ns an element, where eight a step took 0.084). */
TK__ON_AVX512 static inline void tk__f16_from_512_by(uint16_t *restrict d, const float *restrict s,
                                                     size_t n, bool nt)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        tk__ahead(s + i, 64, nt);
        __m512 v = _mm512_loadu_ps(s + i);
        __m256i h;
        if (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)) {
            uint16_t t[16];
            for (int j = 0; j < 16; j++)
                t[j] = tk__f16_from(s[i + j]);
            memcpy(&h, t, sizeof h);
        } else {
            h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
        }
        tk__put_256(d + i, h, nt);
    }
    tk__f16_from_f16c_by(d + i, s + i, n - i, nt);
}
TK__BOTH(TK__ON_AVX512, tk__f16_from_512, uint16_t, float)

/* f32 -> float8 on the AVX2 path, thirty-two floats a step, rounded by
 * one addition for normals and subnormals alike: |x| plus c, the power of
 * two 23 - mb binades above |x|'s exponent (at least the format's smallest
 * normal's), rounds |x| to the format's last place there, nearest even,
 * and the sum's bits less c's count those places, so that adding the
 * exponent's codes below gives the code (tk__narrow's result, on every
 * input short of `past`).  Magnitudes above `past` (every one rounding
 * beyond the largest finite code, Inf and NaN among them) become `over`,
 * then NaNs `nan`; the sign goes back.  Every lane compared is a magnitude
 * under 2^31, so the signed compares serve.  (On an AVX2 AMD EPYC, Zen 3,
 * e4m3fn's compiled rule ran at 1.44 times a memcpy of the source; e5m2 by
 * F16C, converting toward zero and rounding the top byte with the lost
 * bits as sticky, at 1.28 to 1.81 times a streaming copy of the source;
 * tk__narrow's two roundings picked by blend at 1.01 to 1.18 (e4m3fn) and
 * 0.99 to 1.12 (e5m2) where this loop reads 0.83 to 0.95 and 0.91 to 1.03,
 * in alternating runs of bench_dtype; in cache 0.26 ns an element where
 * 0.21 and 0.24.) */
TK__ON_AVX2 static inline void tk__fp8_from_avx2(uint8_t *restrict d, const float *restrict s,
                                                 size_t n, bool nt, int eb, int mb,
                                                 uint32_t past, int over, int nan)
{
    const int bias = (1 << (eb - 1)) - 1;
    const __m256i abs = _mm256_set1_epi32(0x7FFFFFFF), sign = _mm256_set1_epi32(0x80),
                  expo = _mm256_set1_epi32(0x7F800000),
                  least = _mm256_set1_epi32((128 - bias) << 23),
                  up = _mm256_set1_epi32((23 - mb) << 23),
                  below = _mm256_set1_epi32((128 - bias) << mb),
                  order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        tk__ahead(s + i, 128, nt);
        __m256i r[4];
        for (int k = 0; k < 4; k++) {
            __m256i u = _mm256_loadu_si256((const __m256i *)(const void *)(s + i + 8 * k));
            __m256i a = _mm256_and_si256(u, abs);
            __m256i e = _mm256_max_epi32(_mm256_and_si256(a, expo), least);
            __m256i c = _mm256_add_epi32(e, up);
            __m256i sum = _mm256_castps_si256(
                _mm256_add_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(c)));
            __m256i v = _mm256_add_epi32(_mm256_sub_epi32(sum, c),
                                         _mm256_sub_epi32(_mm256_srli_epi32(e, 23 - mb), below));
            v = _mm256_blendv_epi8(v, _mm256_set1_epi32(over),
                                   _mm256_cmpgt_epi32(a, _mm256_set1_epi32((int)past)));
            if (over != nan)   /* e5m2: NaNs apart from Inf */
                v = _mm256_blendv_epi8(v, _mm256_set1_epi32(nan), _mm256_cmpgt_epi32(a, expo));
            r[k] = _mm256_or_si256(v, _mm256_and_si256(_mm256_srli_epi32(u, 24), sign));
        }
        /* The packs work within 128-bit halves: dword j of the bytes holds
         * four codes of vector j % 4, its low half for j < 4. */
        __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(r[0], r[1]),
                                        _mm256_packs_epi32(r[2], r[3]));
        tk__put_256(d + i, _mm256_permutevar8x32_epi32(b, order), nt);
    }
    for (; i < n; i++)
        d[i] = eb == 4 ? tk__e4m3_from(s[i]) : tk__e5m2_from(s[i]);
}

/* `past`: 464 in e4m3fn rounds to 448 (ties to even), above it to NaN;
 * 61440 in e5m2 rounds to Inf (ties to even), below it to 57344. */
TK__ON_AVX2 static inline void tk__e4m3_from_avx2_by(uint8_t *restrict d, const float *restrict s,
                                                     size_t n, bool nt)
{
    tk__fp8_from_avx2(d, s, n, nt, 4, 3, 0x43E80000u, 0x7F, 0x7F);
}
TK__BOTH(TK__ON_AVX2, tk__e4m3_from_avx2, uint8_t, float)

TK__ON_AVX2 static inline void tk__e5m2_from_avx2_by(uint8_t *restrict d, const float *restrict s,
                                                     size_t n, bool nt)
{
    tk__fp8_from_avx2(d, s, n, nt, 5, 2, 0x476FFFFFu, 0x7C, 0x7E);
}
TK__BOTH(TK__ON_AVX2, tk__e5m2_from_avx2, uint8_t, float)

/* tk__fp8_from_avx2's rule on the AVX-512 path, sixty-four floats a step
 * into one 64-byte store (the bytes of four vectors packed as there), the
 * elements after the last whole step by the AVX2 loop.  In cache on an
 * AVX-512 Intel Xeon, 0.154 ns an element (e4m3fn) and 0.172 (e5m2), where
 * e4m3fn's two roundings picked by mask, sixteen a step, took 0.194, and
 * e5m2 by F16C (vcvtps2ph toward zero, the top byte rounded with the lost
 * bits as sticky) 0.208; sixteen floats a step into a vpmovdb store, 0.168
 * and 0.185. */
TK__ON_AVX512 static inline void tk__fp8_from_512(uint8_t *restrict d, const float *restrict s,
                                                  size_t n, bool nt, int eb, int mb,
                                                  uint32_t past, int over, int nan)
{
    const int bias = (1 << (eb - 1)) - 1;
    const __m512i abs = _mm512_set1_epi32(0x7FFFFFFF), sign = _mm512_set1_epi32(0x80),
                  expo = _mm512_set1_epi32(0x7F800000),
                  least = _mm512_set1_epi32((128 - bias) << 23),
                  up = _mm512_set1_epi32((23 - mb) << 23),
                  below = _mm512_set1_epi32((128 - bias) << mb),
                  order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        tk__ahead(s + i, 256, nt);
        __m512i r[4];
        for (int k = 0; k < 4; k++) {
            __m512i u = _mm512_loadu_si512(s + i + 16 * k), a = _mm512_and_si512(u, abs);
            __m512i e = _mm512_max_epi32(_mm512_and_si512(a, expo), least);
            __m512i c = _mm512_add_epi32(e, up);
            __m512i sum = _mm512_castps_si512(
                _mm512_add_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(c)));
            __m512i v = _mm512_add_epi32(_mm512_sub_epi32(sum, c),
                                         _mm512_sub_epi32(_mm512_srli_epi32(e, 23 - mb), below));
            v = _mm512_mask_mov_epi32(v, _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32((int)past)),
                                      _mm512_set1_epi32(over));
            if (over != nan)
                v = _mm512_mask_mov_epi32(v, _mm512_cmpgt_epi32_mask(a, expo),
                                          _mm512_set1_epi32(nan));
            r[k] = _mm512_or_si512(v, _mm512_and_si512(_mm512_srli_epi32(u, 24), sign));
        }
        /* Dword 4j + k of the bytes holds four codes of vector k, from its
         * 128-bit lane j. */
        __m512i b = _mm512_packus_epi16(_mm512_packs_epi32(r[0], r[1]),
                                        _mm512_packs_epi32(r[2], r[3]));
        tk__put_512(d + i, _mm512_permutexvar_epi32(order, b), nt);
    }
    tk__fp8_from_avx2(d + i, s + i, n - i, nt, eb, mb, past, over, nan);
}

TK__ON_AVX512 static inline void tk__e4m3_from_512_by(uint8_t *restrict d, const float *restrict s,
                                                      size_t n, bool nt)
{
    tk__fp8_from_512(d, s, n, nt, 4, 3, 0x43E80000u, 0x7F, 0x7F);
}
TK__BOTH(TK__ON_AVX512, tk__e4m3_from_512, uint8_t, float)

TK__ON_AVX512 static inline void tk__e5m2_from_512_by(uint8_t *restrict d, const float *restrict s,
                                                      size_t n, bool nt)
{
    tk__fp8_from_512(d, s, n, nt, 5, 2, 0x476FFFFFu, 0x7C, 0x7E);
}
TK__BOTH(TK__ON_AVX512, tk__e5m2_from_512, uint8_t, float)

/* f32 -> bfloat16 on the AVX-512 and AVX2 paths: TK__BF16_ROUND's
 * rounding (tk__bf16_biased_512, _256) shifted to each lane's code, the
 * whole rule with its NaN lanes (tk__bf16_round_512, _256) only in vectors
 * that hold a NaN.  The compiled
 * loop took 0.18 ns an element in cache on an AVX-512 Intel Xeon, this
 * one 0.13 (on its AVX2 path 0.25 and 0.155), a cost a custom body's
 * staged run pays on every result. */
TK__ON_AVX512 static inline void tk__bf16_from_512_by(uint16_t *restrict d, const float *restrict s,
                                                      size_t n, bool nt)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        tk__ahead(s + i, 64, nt);
        __m512 v = _mm512_loadu_ps(s + i);
        __m512i r = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)
                        ? tk__bf16_round_512(v)
                        : tk__bf16_biased_512(_mm512_castps_si512(v));
        tk__put_256(d + i, _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)), nt);
    }
    for (; i < n; i++)
        d[i] = tk__bf16_from(s[i]);
}
TK__BOTH(TK__ON_AVX512, tk__bf16_from_512, uint16_t, float)

/* Eight lanes' codes, as above. */
TK__ON_AVX2 static inline __m256i tk__bf16_codes_of_256(__m256 v)
{
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    __m256i r = _mm256_testz_si256(nan, nan) ? tk__bf16_biased_256(_mm256_castps_si256(v))
                                             : tk__bf16_round_256(v);
    return _mm256_srli_epi32(r, 16);
}

TK__ON_AVX2 static inline void tk__bf16_from_256_by(uint16_t *restrict d, const float *restrict s,
                                                    size_t n, bool nt)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        tk__ahead(s + i, 64, nt);
        __m256i c0 = tk__bf16_codes_of_256(_mm256_loadu_ps(s + i)),
                c1 = tk__bf16_codes_of_256(_mm256_loadu_ps(s + i + 8));
        /* packus interleaves 128-bit lanes; the permute puts them back in
         * order (the codes fit 16 bits, so nothing saturates). */
        tk__put_256(d + i, _mm256_permute4x64_epi64(_mm256_packus_epi32(c0, c1), 0xD8), nt);
    }
    for (; i < n; i++)
        d[i] = tk__bf16_from(s[i]);
}
TK__BOTH(TK__ON_AVX2, tk__bf16_from_256, uint16_t, float)

/* float8_e5m2 -> f32 on the AVX2 path: an e5m2 byte is the
 * top byte of the f16 of the same value, which F16C's vcvtph2ps widens
 * exactly; its NaNs (0x7D to 0x7F, either sign) become the quiet NaN of
 * their sign, as in tk__e5m2_to.  (The bit rule alone ran at 1.2 to 1.4
 * times a memcpy of the destination on an AVX2 AMD EPYC.) */
TK__ON_AVX2 static inline void tk__e5m2_to_f16c_by(float *restrict d, const uint8_t *restrict s,
                                                   size_t n, bool nt)
{
    const __m256i sign = _mm256_set1_epi32((int)0x80000000u),
                  inf = _mm256_set1_epi32(0x7F800000), quiet = _mm256_set1_epi32(0x7FC00000);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        tk__ahead(s + i, 8, nt);
        __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)(s + i));
        __m256i f = _mm256_castps_si256(_mm256_cvtph_ps(_mm_unpacklo_epi8(_mm_setzero_si128(),
                                                                           b)));
        __m256i nan = _mm256_cmpgt_epi32(_mm256_andnot_si256(sign, f), inf);
        f = _mm256_blendv_epi8(f, _mm256_or_si256(_mm256_and_si256(f, sign), quiet), nan);
        tk__put_256(d + i, f, nt);
    }
    for (; i < n; i++)
        d[i] = tk__e5m2_to(s[i]);
}
TK__BOTH(TK__ON_AVX2, tk__e5m2_to_f16c, float, uint8_t)

/* The same on the AVX-512 path, sixteen bytes a step (in cache on an
 * Intel Xeon 0.094 ns an element, where eight a step took 0.149). */
TK__ON_AVX512 static inline void tk__e5m2_to_512_by(float *restrict d, const uint8_t *restrict s,
                                                    size_t n, bool nt)
{
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u),
                  inf = _mm512_set1_epi32(0x7F800000), quiet = _mm512_set1_epi32(0x7FC00000);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        tk__ahead(s + i, 16, nt);
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        __m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8);   /* the f16 codes */
        __m512i f = _mm512_castps_si512(_mm512_cvtph_ps(h));
        __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_andnot_si512(sign, f), inf);
        f = _mm512_mask_mov_epi32(f, nan, _mm512_or_si512(_mm512_and_si512(f, sign), quiet));
        tk__put_512(d + i, f, nt);
    }
    tk__e5m2_to_f16c_by(d + i, s + i, n - i, nt);
}
TK__BOTH(TK__ON_AVX512, tk__e5m2_to_512, float, uint8_t)

/* f16 -> f32 on the AVX2 path: vcvtph2ps widens every f16
 * exactly, subnormals included, but quiets a signalling NaN, whose payload
 * numpy keeps, so eight halves with a NaN among them take tk__f16_to.
 * (The bit rule alone ran at 1.28 times a memcpy of the destination with
 * the AVX2 path forced on an AVX-512 AMD EPYC.) */
TK__ON_AVX2 static inline void tk__f16_to_f16c_by(float *restrict d, const uint16_t *restrict s,
                                                  size_t n, bool nt)
{
    const __m128i magnitude = _mm_set1_epi16(0x7FFF), inf = _mm_set1_epi16(0x7C00);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        tk__ahead(s + i, 16, nt);
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        __m256 f;
        if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(h, magnitude), inf))) {
            float t[8];
            for (int j = 0; j < 8; j++)
                t[j] = tk__f16_to(s[i + j]);
            f = _mm256_loadu_ps(t);
        } else {
            f = _mm256_cvtph_ps(h);
        }
        tk__put_256(d + i, _mm256_castps_si256(f), nt);
    }
    for (; i < n; i++)
        d[i] = tk__f16_to(s[i]);
}
TK__BOTH(TK__ON_AVX2, tk__f16_to_f16c, float, uint16_t)

/* The same on the AVX-512 path, sixteen halves a step (in cache on an
 * Intel Xeon 0.055 ns an element, where eight a step took 0.085). */
TK__ON_AVX512 static inline void tk__f16_to_512_by(float *restrict d, const uint16_t *restrict s,
                                                   size_t n, bool nt)
{
    const __m256i magnitude = _mm256_set1_epi16(0x7FFF), inf = _mm256_set1_epi16(0x7C00);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        tk__ahead(s + i, 32, nt);
        __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(s + i));
        __m512 f;
        if (_mm256_movemask_epi8(_mm256_cmpgt_epi16(_mm256_and_si256(h, magnitude), inf))) {
            float t[16];
            for (int j = 0; j < 16; j++)
                t[j] = tk__f16_to(s[i + j]);
            f = _mm512_loadu_ps(t);
        } else {
            f = _mm512_cvtph_ps(h);
        }
        tk__put_512(d + i, _mm512_castps_si512(f), nt);
    }
    tk__f16_to_f16c_by(d + i, s + i, n - i, nt);
}
TK__BOTH(TK__ON_AVX512, tk__f16_to_512, float, uint16_t)

/* float8_e4m3fn -> f32 on the AVX2 and AVX-512 paths: the byte's
 * magnitude shifted up 7 bits is an f16 (normal or subnormal) of the same
 * significand with an exponent 8 lower, so vcvtph2ps of it times 2^8 is the
 * value exactly; the sign is put back, and 0x7F and 0xFF become the quiet
 * NaN of their sign, as in tk__e4m3_to.  (The bit rule alone ran at 1.37
 * times a memcpy of the destination with the AVX2 path forced on an
 * AVX-512 AMD EPYC.) */
TK__ON_AVX2 static inline void tk__e4m3_to_f16c_by(float *restrict d, const uint8_t *restrict s,
                                                   size_t n, bool nt)
{
    const __m256 scale = _mm256_set1_ps(0x1p8f);
    const __m256i quiet = _mm256_set1_epi32(0x7FC00000), low7 = _mm256_set1_epi32(0x7F);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        tk__ahead(s + i, 8, nt);
        __m128i bytes = _mm_loadl_epi64((const __m128i *)(const void *)(s + i));
        __m128i h = _mm_slli_epi16(_mm_and_si128(_mm_cvtepu8_epi16(bytes), _mm_set1_epi16(0x7F)),
                                   7);
        __m256i b = _mm256_cvtepu8_epi32(bytes);
        __m256i f = _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtph_ps(h), scale));
        __m256i neg = _mm256_slli_epi32(_mm256_srli_epi32(b, 7), 31);
        __m256i nan = _mm256_cmpeq_epi32(_mm256_and_si256(b, low7), low7);
        f = _mm256_blendv_epi8(_mm256_or_si256(f, neg), _mm256_or_si256(neg, quiet), nan);
        tk__put_256(d + i, f, nt);
    }
    for (; i < n; i++)
        d[i] = tk__e4m3_to(s[i]);
}
TK__BOTH(TK__ON_AVX2, tk__e4m3_to_f16c, float, uint8_t)

/* The same on the AVX-512 path, sixteen bytes a step: the eight-lane loop
 * read up to 1.26 times a memcpy of the destination on an AVX-512 Intel
 * Xeon, bound by its arithmetic. */
TK__ON_AVX512 static inline void tk__e4m3_to_512_by(float *restrict d, const uint8_t *restrict s,
                                                    size_t n, bool nt)
{
    const __m512 scale = _mm512_set1_ps(0x1p8f);
    const __m512i quiet = _mm512_set1_epi32(0x7FC00000), low7 = _mm512_set1_epi32(0x7F);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        tk__ahead(s + i, 16, nt);
        __m128i bytes = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        __m256i h = _mm256_slli_epi16(
            _mm256_and_si256(_mm256_cvtepu8_epi16(bytes), _mm256_set1_epi16(0x7F)), 7);
        __m512i b = _mm512_cvtepu8_epi32(bytes);
        __m512i f = _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtph_ps(h), scale));
        __m512i neg = _mm512_slli_epi32(_mm512_srli_epi32(b, 7), 31);
        __mmask16 nan = _mm512_cmpeq_epi32_mask(_mm512_and_si512(b, low7), low7);
        f = _mm512_mask_mov_epi32(_mm512_or_si512(f, neg), nan, _mm512_or_si512(neg, quiet));
        tk__put_512(d + i, f, nt);
    }
    tk__e4m3_to_f16c_by(d + i, s + i, n - i, nt);
}
TK__BOTH(TK__ON_AVX512, tk__e4m3_to_512, float, uint8_t)

/* bfloat16 -> f32 on the AVX-512 and AVX2 paths: each code shifted to the
 * top of its lane. */
TK__ON_AVX512 static inline void tk__bf16_to_512_by(float *restrict d, const uint16_t *restrict s,
                                                    size_t n, bool nt)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        tk__ahead(s + i, 32, nt);
        __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(s + i));
        tk__put_512(d + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16), nt);
    }
    for (; i < n; i++)
        d[i] = tk__bf16_to(s[i]);
}
TK__BOTH(TK__ON_AVX512, tk__bf16_to_512, float, uint16_t)

TK__ON_AVX2 static inline void tk__bf16_to_256_by(float *restrict d, const uint16_t *restrict s,
                                                  size_t n, bool nt)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {   /* one load, then both stores */
        tk__ahead(s + i, 32, nt);
        __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(s + i));
        __m256i lo = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(h)), 16),
                hi = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1)), 16);
        tk__put_256(d + i, lo, nt);
        tk__put_256(d + i + 8, hi, nt);
    }
    for (; i < n; i++)
        d[i] = tk__bf16_to(s[i]);
}
TK__BOTH(TK__ON_AVX2, tk__bf16_to_256, float, uint16_t)

/* The loop of the path in use: on the x86 paths the AVX-512 one (a512)
 * where there is one, else the AVX2 one (a256, with F16C), with nt as
 * above; on the portable path the compiled one, which has no nt (tk__bulk
 * asks for none there). */
#define TK__X86_OR(a512, a256, loop, d, s, n, nt)                                  \
    (tk__isa() == TK__ISA_AVX512 ? (nt ? a512##_nt(d, s, n) : a512(d, s, n))        \
     : tk__isa() == TK__ISA_AVX2 ? (nt ? a256##_nt(d, s, n) : a256(d, s, n))        \
                                 : loop(d, s, n))
#else
#define TK__X86_OR(a512, a256, loop, d, s, n, nt) loop(d, s, n)
#endif

/* n elements between a dtype and f32 (nt: see tk__ahead). */
static void tk__to_f32(int dtype, const void *src, float *dst, int64_t n, bool nt)
{
    size_t k = (size_t)n;
    switch (dtype) {
    case TK_DTYPE_BF16:
        TK__X86_OR(tk__bf16_to_512, tk__bf16_to_256, tk__bf16_to_f32_loop, dst, src, k, nt);
        break;
    case TK_DTYPE_F16:
        TK__X86_OR(tk__f16_to_512, tk__f16_to_f16c, tk__f16_to_loop, dst, src, k, nt);
        break;
    case TK_DTYPE_F8E4M3FN:
        TK__X86_OR(tk__e4m3_to_512, tk__e4m3_to_f16c, tk__e4m3_to_loop, dst, src, k, nt);
        break;
    case TK_DTYPE_F8E5M2:
        TK__X86_OR(tk__e5m2_to_512, tk__e5m2_to_f16c, tk__e5m2_to_loop, dst, src, k, nt);
        break;
    default: memcpy(dst, src, k * sizeof(float)); break;
    }
}

static void tk__from_f32(int dtype, const float *src, void *dst, int64_t n, bool nt)
{
    size_t k = (size_t)n;
    switch (dtype) {
    case TK_DTYPE_BF16:
        TK__X86_OR(tk__bf16_from_512, tk__bf16_from_256, tk__bf16_from_f32_loop, dst, src, k,
                   nt);
        break;
    case TK_DTYPE_F16:
        TK__X86_OR(tk__f16_from_512, tk__f16_from_f16c, tk__f16_from_loop, dst, src, k, nt);
        break;
    case TK_DTYPE_F8E4M3FN:
        TK__X86_OR(tk__e4m3_from_512, tk__e4m3_from_avx2, tk__e4m3_from_loop, dst, src, k, nt);
        break;
    case TK_DTYPE_F8E5M2:
        TK__X86_OR(tk__e5m2_from_512, tk__e5m2_from_avx2, tk__e5m2_from_loop, dst, src, k, nt);
        break;
    default: memcpy(dst, src, k * sizeof(float)); break;
    }
}

/* Elements before f32 data at p reach a 64-byte boundary, for rows long
 * enough to be worth a split.  Wide loads or stores that straddle cache
 * lines ran the AVX-512 bf16 narrowing at half speed on an AMD EPYC (Zen 5)
 * when the source was 16 bytes off, as malloc returns large blocks. */
static int64_t tk__f32_head(const float *p, int64_t n)
{
    int64_t h = (int64_t)((64 - (uintptr_t)p % 64) % 64 / sizeof(float));
    return n >= 256 ? h : 0;
}

void tk__row_to_f32(int dtype, const void *src, float *dst, int64_t n)
{
    int64_t h = tk__f32_head(dst, n);
    if (h)
        tk__to_f32(dtype, src, dst, h, false);
    tk__to_f32(dtype, (const char *)src + h * tk__esize(dtype), dst + h, n - h, false);
}

void tk__row_from_f32(int dtype, const float *src, void *dst, int64_t n)
{
    int64_t h = tk__f32_head(src, n);
    if (h)
        tk__from_f32(dtype, src, dst, h, false);
    tk__from_f32(dtype, src + h, (char *)dst + h * tk__esize(dtype), n - h, false);
}

void tk__cast_through(int d, float *x, int64_t count)
{
    unsigned char code[256 * 4];
    int64_t chunk = (int64_t)(sizeof code / (size_t)tk__esize(d));
    for (int64_t e = 0; d != TK_DTYPE_F32 && e < count; e += chunk) {
        int64_t n = count - e < chunk ? count - e : chunk;
        tk__row_from_f32(d, x + e, code, n);
        tk__row_to_f32(d, code, x + e, n);
    }
}

/* Bulk conversions whose destination is TK__STREAM bytes or more write
 * its whole 64-byte lines by streaming stores, fetching the source ahead,
 * in one of two ways by vendor (tk__tune); the bits are the same.
 *
 * Intel: TK__BULK elements at a time into a block staged in cache, streamed
 * out from there.  On an Intel Xeon one core's reads are the limit:
 * ordinary stores read every destination line first, and one stream kept
 * too few lines in flight.  Widening reads one stream, each block fetching
 * the block TK__BULK_AHEAD bytes on (bf16: 1.30 times a memcpy of the
 * source with ordinary stores, 0.72 to 0.78 this way).  Narrowing reads
 * TK__BULK_STREAMS streams side by side, each over its own TK__BULK_SEG
 * elements of a group, block by block in turn, each fetching its next
 * group (bf16: 1.24 with ordinary stores, 0.93 to 1.06 staged from one
 * stream, 0.76 to 0.92 this way; widening measured slower so).
 *
 * AMD, on the x86 paths: the loops stream the results themselves, each
 * step fetching its own source TK__BULK_AHEAD bytes on (tk__ahead).  On an
 * AMD EPYC (Zen 3), whose one core reads 64 MiB in about 0.9 of a
 * streaming copy's time, bf16 narrowing read 0.84 to 0.94 that copy this
 * way, 1.0 to 1.5 staged (one stream or four), and 1.05 to 1.37 streamed
 * straight from the loop with each 128 elements' fetches issued together:
 * there the fetches must be spread as the reads are.  float32 to float32
 * is a copy, which stays staged (tk__stream_copy). */
#define TK__BULK 128
#define TK__BULK_SEG 1024
#define TK__BULK_STREAMS 4

/* n elements from src to dst, one way or the other (nt: see tk__ahead). */
static void tk__convert(int dtype, bool to_f32, const void *src, void *dst, int64_t n,
                        bool nt)
{
    if (to_f32)
        tk__to_f32(dtype, src, dst, n, nt);
    else
        tk__from_f32(dtype, src, dst, n, nt);
}

/* One staged block of the bulk conversion of n elements, elements
 * [at, at + TK__BULK), with the source of the block `ahead` elements on
 * fetched when there is one. */
static void tk__bulk_block(int dtype, bool to_f32, const unsigned char *s, unsigned char *d,
                           int64_t n, int64_t at, int64_t ahead, float *staged)
{
    size_t ses = to_f32 ? (size_t)tk__esize(dtype) : sizeof(float);
    size_t des = to_f32 ? sizeof(float) : (size_t)tk__esize(dtype);
    const unsigned char *from = s + (size_t)at * ses;
    for (size_t b = 0; at + ahead + TK__BULK <= n && b < TK__BULK * ses; b += 64)
        __builtin_prefetch(from + (size_t)ahead * ses + b);
    tk__convert(dtype, to_f32, from, staged, TK__BULK, false);
    tk__stream_copy(d + (size_t)at * des, staged, TK__BULK * des);
}

static void tk__bulk(int dtype, bool to_f32, const void *src, void *dst, int64_t n)
{
    size_t ses = to_f32 ? (size_t)tk__esize(dtype) : sizeof(float);
    size_t des = to_f32 ? sizeof(float) : (size_t)tk__esize(dtype);
    const unsigned char *s = src;
    unsigned char *d = dst;
    if ((size_t)n * des < TK__STREAM) {
        if (to_f32)
            tk__row_to_f32(dtype, src, dst, n);
        else
            tk__row_from_f32(dtype, src, dst, n);
        return;
    }
    /* Ordinary stores up to the destination's first 64-byte line and after
     * its last whole block; the whole lines in between are streamed. */
    int64_t at = (int64_t)((64 - (uintptr_t)d % 64) % 64 / des);
    tk__convert(dtype, to_f32, s, d, at, false);
    if (tk__tune() == TK__TUNE_AMD && tk__isa() != TK__ISA_PORTABLE && dtype != TK_DTYPE_F32) {
        /* Whole steps of every loop, and whole lines of every dtype. */
        int64_t m = (n - at) / 64 * 64;
        tk__convert(dtype, to_f32, s + (size_t)at * ses, d + (size_t)at * des, m, true);
        at += m;
    }
    _Alignas(64) float staged[TK__BULK];
    const int64_t group = TK__BULK_STREAMS * TK__BULK_SEG;
    for (; !to_f32 && at + group <= n; at += group)
        for (int64_t j = 0; j < TK__BULK_SEG; j += TK__BULK)
            for (int64_t k = 0; k < TK__BULK_STREAMS; k++)
                tk__bulk_block(dtype, to_f32, s, d, n, at + k * TK__BULK_SEG + j, group,
                               staged);
    for (; at + TK__BULK <= n; at += TK__BULK)
        tk__bulk_block(dtype, to_f32, s, d, n, at, (int64_t)(TK__BULK_AHEAD / ses), staged);
    tk__stream_fence();
    tk__convert(dtype, to_f32, s + (size_t)at * ses, d + (size_t)at * des, n - at, false);
}

int tk_dtype_from_f32_n(int dtype, void *dst, const float *src, size_t n)
{
    int rc = tk__bulk_check("tk_dtype_from_f32_n", dtype, false, dst, src, n);
    if (!rc && n)
        tk__bulk(dtype, false, src, dst, (int64_t)n);
    return rc;
}

int tk_dtype_to_f32_n(int dtype, float *dst, const void *src, size_t n)
{
    int rc = tk__bulk_check("tk_dtype_to_f32_n", dtype, true, dst, src, n);
    if (!rc && n)
        tk__bulk(dtype, true, src, dst, (int64_t)n);
    return rc;
}

float tk__round_to(int dtype, float x)
{
    switch (dtype) {
    case TK_DTYPE_BF16: return tk__bf16_to(tk__bf16_from(x));
    case TK_DTYPE_F16: return tk__f16_to(tk__f16_from(x));
    case TK_DTYPE_F8E4M3FN: return tk__e4m3_to(tk__e4m3_from(x));
    case TK_DTYPE_F8E5M2: return tk__e5m2_to(tk__e5m2_from(x));
    default: return x;
    }
}

uint64_t tk_ulp_distance(int dtype, float a, float b)
{
    int64_t ia, ib;
    /* NaN either way, or once represented (e4m3fn has no Inf: Inf and
     * values past 448 are its NaN). */
    if (!tk__is_float_dtype(dtype) || isnan(tk__round_to(dtype, a)) ||
        isnan(tk__round_to(dtype, b)))
        return UINT64_MAX;
    /* Both are represented in dtype first; its encodings, read as
     * sign-magnitude, are then adjacent for adjacent values. */
    uint32_t sign = 0x80000000u, ua = tk__f32_bits(a), ub = tk__f32_bits(b);
    switch (dtype) {
    case TK_DTYPE_BF16: sign = 0x8000u; ua = tk__bf16_from(a); ub = tk__bf16_from(b); break;
    case TK_DTYPE_F16: sign = 0x8000u; ua = tk__f16_from(a); ub = tk__f16_from(b); break;
    case TK_DTYPE_F8E4M3FN: sign = 0x80u; ua = tk__e4m3_from(a); ub = tk__e4m3_from(b); break;
    case TK_DTYPE_F8E5M2: sign = 0x80u; ua = tk__e5m2_from(a); ub = tk__e5m2_from(b); break;
    default: break;
    }
    ia = tk__ordered(ua, sign);
    ib = tk__ordered(ub, sign);
    return ia > ib ? (uint64_t)(ia - ib) : (uint64_t)(ib - ia);
}
