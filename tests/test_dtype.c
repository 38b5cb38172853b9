/* test_dtype.c - conversions between f32 and the storage dtypes, and ULP
 * distances.  bf16: every bf16 pattern, every f32 pattern against an
 * independent reference, the stated ties, subnormals and specials, the bulk
 * variants.  f16 and fp8: every encoding against a decoder written from the
 * formats' definitions, the rounding at every midpoint, the specials. */
#include "tk_test.h"

#include <criterion/parameterized.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>

/* Reference f32 -> bf16, written apart from the library: keep the high half,
 * then round up when the dropped low half is above one half, or exactly one
 * half with an odd kept half.  Any NaN becomes the quiet NaN with its sign. */
static uint16_t ref_bf16(uint32_t u)
{
    uint32_t hi = u >> 16, lo = u & 0xFFFFu;
    uint32_t nan = (u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0;
    /* Carries into the exponent as needed: 0x7F7F + 1 is Inf. */
    uint32_t up = lo > 0x8000u || (lo == 0x8000u && (hi & 1u));
    return (uint16_t)(nan ? (hi & 0x8000u) | 0x7FC0u : hi + up);
}

static bool bf16_is_nan(uint16_t b) { return (b & 0x7F80u) == 0x7F80u && (b & 0x7Fu); }

static uint16_t from_bits(uint32_t u) { return tk_bf16_from_f32(tkt_float(u)); }

/* ---- the stated cases ---------------------------------------------------- */

Test(bf16, ties_round_to_even)
{
    /* 1 + 2^-8 is half a bf16 ulp above 1.0 (even): it stays 1.0. */
    cr_assert_eq(tkt_bits(tk_bf16_to_f32(tk_bf16_from_f32(1.0f + 0x1p-8f))),
                 tkt_bits(1.0f));
    /* 1 + 3*2^-8 lies between 1 + 2^-7 (odd) and 1 + 2^-6 (even): it goes up. */
    cr_assert_eq(tkt_bits(tk_bf16_to_f32(tk_bf16_from_f32(1.0f + 3 * 0x1p-8f))),
                 tkt_bits(1.0f + 0x1p-6f));
    /* Just above and below the tie. */
    cr_assert_eq(tk_bf16_to_f32(tk_bf16_from_f32(nextafterf(1.0f + 0x1p-8f, 2.0f))),
                 1.0f + 0x1p-7f);
    cr_assert_eq(tk_bf16_to_f32(tk_bf16_from_f32(nextafterf(1.0f + 3 * 0x1p-8f, 1.0f))),
                 1.0f + 0x1p-7f);
    /* Negative ties mirror the positive ones. */
    cr_assert_eq(tkt_bits(tk_bf16_to_f32(tk_bf16_from_f32(-1.0f - 0x1p-8f))),
                 tkt_bits(-1.0f));
}

/* DESIGN's counterexample: rounding the intermediate early loses the sum. */
Test(bf16, early_rounding_counterexample)
{
    float early = tk_bf16_to_f32(tk_bf16_from_f32(
        tk_bf16_to_f32(tk_bf16_from_f32(1.00390625f)) + 0.00390625f));
    float late = tk_bf16_to_f32(tk_bf16_from_f32(1.00390625f + 0.00390625f));
    cr_assert_eq(early, 1.0f);
    cr_assert_eq(late, 1.0078125f);
}

Test(bf16, overflow_infinities_and_zeros)
{
    cr_assert_eq(from_bits(0x7F7F8000u), 0x7F80u, "max-finite tie rounds to +Inf");
    cr_assert_eq(from_bits(0xFF7F8000u), 0xFF80u, "and to -Inf when negative");
    cr_assert_eq(from_bits(0x7F7F7FFFu), 0x7F7Fu, "below the tie stays finite");
    cr_assert_eq(tk_bf16_from_f32(FLT_MAX), 0x7F80u, "FLT_MAX is past the last tie");
    cr_assert_eq(tk_bf16_from_f32(INFINITY), 0x7F80u);
    cr_assert_eq(tk_bf16_from_f32(-INFINITY), 0xFF80u);
    cr_assert_eq(tk_bf16_from_f32(0.0f), 0x0000u);
    cr_assert_eq(tk_bf16_from_f32(-0.0f), 0x8000u);
}

Test(bf16, subnormals_are_kept)
{
    cr_assert_eq(from_bits(0x00010000u), 0x0001u, "smallest bf16 subnormal");
    cr_assert_eq(from_bits(0x00000001u), 0x0000u, "smallest f32 subnormal rounds to 0");
    cr_assert_eq(from_bits(0x00008000u), 0x0000u, "tie to even 0");
    cr_assert_eq(from_bits(0x00018000u), 0x0002u, "tie to even 2");
    cr_assert_eq(from_bits(0x00008001u), 0x0001u, "above the tie");
    cr_assert_eq(from_bits(0x80008000u), 0x8000u, "negative tie to -0");
    cr_assert_eq(from_bits(0x007FFFFFu), 0x0080u, "largest subnormal rounds to FLT_MIN");
    cr_assert_eq(tkt_bits(tk_bf16_to_f32(0x0001u)), 0x00010000u);
}

Test(bf16, nan_becomes_quiet_nan_keeping_sign)
{
    const uint32_t pos[] = {0x7FC00000u, 0x7F800001u, 0x7FFFFFFFu, 0x7FA00000u, 0x7F80FFFFu};
    for (size_t i = 0; i < sizeof pos / sizeof *pos; i++) {
        cr_assert_eq(from_bits(pos[i]), 0x7FC0u, "0x%08x", pos[i]);
        cr_assert_eq(from_bits(pos[i] | 0x80000000u), 0xFFC0u, "0x%08x",
                     pos[i] | 0x80000000u);
    }
}

/* ---- every bf16 pattern ---------------------------------------------------- */

Test(bf16, every_bf16_pattern_round_trips)
{
    for (uint32_t b = 0; b <= 0xFFFFu; b++) {
        float f = tk_bf16_to_f32((uint16_t)b);
        if (tkt_bits(f) != b << 16)
            cr_assert_fail("tk_bf16_to_f32(0x%04x) = 0x%08x, not bits << 16", b, tkt_bits(f));
        uint16_t back = tk_bf16_from_f32(f);
        uint16_t want = bf16_is_nan((uint16_t)b) ? (uint16_t)((b & 0x8000u) | 0x7FC0u)
                                                 : (uint16_t)b;
        if (back != want)
            cr_assert_fail("0x%04x -> f32 -> 0x%04x, expected 0x%04x", b, back, want);
    }
}

Test(bf16, bulk_to_f32_is_exact_for_every_pattern)
{
    static uint16_t src[65536];
    static float dst[65536];
    for (uint32_t b = 0; b <= 0xFFFFu; b++)
        src[b] = (uint16_t)b;
    tkt_expect_status(tk_bf16_to_f32_n(dst, src, 65536), TK_OK);
    for (uint32_t b = 0; b <= 0xFFFFu; b++)
        if (tkt_bits(dst[b]) != b << 16)
            cr_assert_fail("tk_bf16_to_f32_n: 0x%04x -> 0x%08x", b, tkt_bits(dst[b]));
}

/* ---- every f32 pattern ----------------------------------------------------- */

#define PARTS 8
#define BLOCK 65536u

/* The sweep checks arithmetic, not memory; under AddressSanitizer (about a
 * minute for all 2^32) sanitizer builds visit every 16th block instead. */
#if defined(__SANITIZE_ADDRESS__)
#define BLOCK_STEP 16u
#else
#define BLOCK_STEP 1u
#endif

ParameterizedTestParameters(bf16, every_f32_pattern)
{
    static unsigned parts[PARTS];
    for (unsigned i = 0; i < PARTS; i++)
        parts[i] = i;
    return cr_make_param_array(unsigned, parts, PARTS);
}

/* One eighth of all 2^32 patterns per test: the bulk conversion of each
 * 64 Ki block, the scalar conversion and the reference must all agree. */
ParameterizedTest(unsigned *part, bf16, every_f32_pattern)
{
    static uint32_t src[BLOCK];
    static uint16_t bulk[BLOCK];
    const uint64_t span = (1ull << 32) / PARTS;
    const uint64_t first = *part * span;
    for (uint64_t base = first; base < first + span; base += BLOCK * BLOCK_STEP) {
        for (uint32_t i = 0; i < BLOCK; i++)
            src[i] = (uint32_t)base + i;
        tk_bf16_from_f32_n(bulk, (const float *)(const void *)src, BLOCK);
        /* One pass counts disagreements; a second one names the first. */
        uint32_t wrong = 0;
        for (uint32_t i = 0; i < BLOCK; i++) {
            uint16_t want = ref_bf16(src[i]);
            wrong += (from_bits(src[i]) != want) | (bulk[i] != want);
        }
        for (uint32_t i = 0; wrong && i < BLOCK; i++)
            if (bulk[i] != ref_bf16(src[i]) || from_bits(src[i]) != bulk[i])
                cr_assert_fail("f32 0x%08x: reference 0x%04x, scalar 0x%04x, bulk 0x%04x",
                               src[i], ref_bf16(src[i]), from_bits(src[i]), bulk[i]);
    }
}

/* ---- bulk edges --------------------------------------------------------------- */

/* Every length 0..70 at every alignment: results equal the scalar, and
 * nothing past n is written. */
Test(bf16, bulk_lengths_and_alignments)
{
    enum { N = 70, GUARD = 8 };
    float src[N + 4];
    uint64_t seed = 17;
    for (size_t i = 0; i < N + 4; i++)
        src[i] = tkt_float((uint32_t)tkt_next(&seed));
    for (size_t off = 0; off < 4; off++)
        for (size_t n = 0; n <= N; n++) {
            uint16_t h[N + 4 + GUARD];
            float f[N + 4 + GUARD];
            memset(h, 0xA5, sizeof h);
            memset(f, 0xA5, sizeof f);
            tkt_expect_status(tk_bf16_from_f32_n(h + off, src + off, n), TK_OK);
            for (size_t i = 0; i < n; i++)
                cr_assert_eq(h[off + i], tk_bf16_from_f32(src[off + i]), "n %zu i %zu", n, i);
            tkt_expect_status(tk_bf16_to_f32_n(f + off, h + off, n), TK_OK);
            for (size_t i = 0; i < n; i++)
                cr_assert_eq(tkt_bits(f[off + i]), (uint32_t)h[off + i] << 16);
            for (size_t i = off + n; i < N + 4 + GUARD; i++) {
                cr_assert_eq(h[i], 0xA5A5u, "n %zu wrote h[%zu]", n, i);
                cr_assert_eq(tkt_bits(f[i]), 0xA5A5A5A5u, "n %zu wrote f[%zu]", n, i);
            }
        }
}

/* A 64 MiB buffer of random patterns in one call agrees with the scalar. */
Test(bf16, bulk_matches_scalar_on_a_large_buffer)
{
    const size_t n = (size_t)1 << 24;
    uint32_t *src = malloc(n * sizeof *src);
    uint16_t *dst = malloc(n * sizeof *dst);
    cr_assert(src && dst);
    uint64_t seed = 23;
    for (size_t i = 0; i < n; i++)
        src[i] = (uint32_t)tkt_next(&seed);
    tkt_expect_status(tk_bf16_from_f32_n(dst, (const float *)(const void *)src, n), TK_OK);
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++)
        wrong += from_bits(src[i]) != dst[i];
    for (size_t i = 0; wrong && i < n; i++)
        cr_assert_eq(dst[i], from_bits(src[i]), "element %zu, f32 0x%08x", i, src[i]);

    float *back = malloc(n * sizeof *back);
    cr_assert_not_null(back);
    tkt_expect_status(tk_bf16_to_f32_n(back, dst, n), TK_OK);
    for (size_t i = 0; i < n; i++)
        wrong += tkt_bits(back[i]) != (uint32_t)dst[i] << 16;
    cr_assert_eq(wrong, 0, "tk_bf16_to_f32_n is not bits << 16 on %zu elements", wrong);
    free(back);
    free(dst);
    free(src);
}

Test(bf16, bulk_null_pointers)
{
    float f[4] = {1, 2, 3, 4};
    uint16_t h[4] = {9, 9, 9, 9};
    tkt_expect_status(tk_bf16_from_f32_n(NULL, f, 4), TK_EINVAL);
    tkt_expect_status(tk_bf16_from_f32_n(h, NULL, 4), TK_EINVAL);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(h[i], 9, "a failed call wrote dst[%d]", i);
    tkt_expect_status(tk_bf16_to_f32_n(NULL, h, 4), TK_EINVAL);
    tkt_expect_status(tk_bf16_to_f32_n(f, NULL, 4), TK_EINVAL);
    /* A negative count converted to size_t: refused, not run off memory. */
    tkt_expect_status(tk_bf16_to_f32_n(f, h, (size_t)-1), TK_EOVERFLOW);
    cr_assert(strstr(tk_last_error_message(), "tk_bf16_to_f32_n: n = 18446744073709551615"),
              "%s", tk_last_error_message());
    tkt_expect_status(tk_bf16_from_f32_n(h, f, (size_t)-4), TK_EOVERFLOW);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(h[i], 9, "a failed call wrote dst[%d]", i);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(f[i], (float)(i + 1), "a failed call wrote dst[%d]", i);
    /* n == 0 is a no-op that touches neither pointer. */
    tkt_expect_status(tk_bf16_from_f32_n(NULL, NULL, 0), TK_OK);
    tkt_expect_status(tk_bf16_to_f32_n(NULL, NULL, 0), TK_OK);
}

Test(bf16, dtype_names_and_sizes)
{
    cr_assert_str_eq(tk_dtype_name(TK_DTYPE_F32), "float32");
    cr_assert_str_eq(tk_dtype_name(TK_DTYPE_BF16), "bfloat16");
    cr_assert_str_eq(tk_dtype_name(TK_DTYPE_I32), "int32");
    cr_assert_eq(tk_dtype_size(TK_DTYPE_F32), (int64_t)sizeof(float));
    cr_assert_eq(tk_dtype_size(TK_DTYPE_BF16), (int64_t)sizeof(uint16_t));
    cr_assert_eq(tk_dtype_size(TK_DTYPE_I32), (int64_t)sizeof(int32_t));
    const int unknown[] = {0, -1, 7, 99};
    for (size_t i = 0; i < 4; i++) {
        cr_assert_null(tk_dtype_name(unknown[i]));
        cr_assert_eq(tk_dtype_size(unknown[i]), 0);
    }
}

/* ---- tk_ulp_distance ------------------------------------------------------------ */

Test(ulp, f32_zero_and_sign_crossing)
{
    float min_sub = tkt_float(1u);
    cr_assert_eq(tk_ulp_distance(TK_DTYPE_F32, 0.0f, -0.0f), 0);
    cr_assert_eq(tk_ulp_distance(TK_DTYPE_F32, -min_sub, min_sub), 2);
    cr_assert_eq(tk_ulp_distance(TK_DTYPE_F32, min_sub, -min_sub), 2);
    cr_assert_eq(tk_ulp_distance(TK_DTYPE_F32, -0.0f, min_sub), 1);
    cr_assert_eq(tk_ulp_distance(TK_DTYPE_F32, FLT_MAX, INFINITY), 1);
    cr_assert_eq(tk_ulp_distance(TK_DTYPE_F32, -FLT_MAX, -INFINITY), 1);
    /* Every positive pattern up to Inf is one step; -Inf is as far below. */
    uint64_t up = tk_ulp_distance(TK_DTYPE_F32, 0.0f, INFINITY);
    cr_assert_eq(up, tkt_bits(INFINITY));
    cr_assert_eq(tk_ulp_distance(TK_DTYPE_F32, -INFINITY, INFINITY), 2 * up);
}

Test(ulp, nan_and_unknown_dtype)
{
    const int dtypes[] = {TK_DTYPE_F32, TK_DTYPE_BF16};
    for (size_t d = 0; d < 2; d++) {
        cr_assert_eq(tk_ulp_distance(dtypes[d], NAN, 1.0f), UINT64_MAX);
        cr_assert_eq(tk_ulp_distance(dtypes[d], 1.0f, -NAN), UINT64_MAX);
        cr_assert_eq(tk_ulp_distance(dtypes[d], NAN, NAN), UINT64_MAX);
    }
    cr_assert_eq(tk_ulp_distance(0, 1.0f, 1.0f), UINT64_MAX);
    cr_assert_eq(tk_ulp_distance(99, 1.0f, 2.0f), UINT64_MAX);
    cr_assert_eq(tk_ulp_distance(-1, 0.0f, 0.0f), UINT64_MAX);
}

/* k steps of nextafterf from a start are k ULPs apart, in both orders. */
Test(ulp, f32_matches_nextafter_walks)
{
    uint64_t seed = 3;
    for (int trial = 0; trial < 2000; trial++) {
        uint32_t bits = (uint32_t)tkt_next(&seed);
        /* A third of the starts sit a few hundred steps from zero. */
        if (trial % 3 == 0)
            bits = (bits & 0x80000000u) | (bits & 0x1FFu);
        float a = tkt_float(bits);
        if (isnan(a) || isinf(a))
            continue;
        float b = a, dir = (trial & 1) ? INFINITY : -INFINITY;
        uint64_t k = tkt_next(&seed) % 1000;
        uint64_t steps = 0;
        while (steps < k && !isinf(b)) {
            b = nextafterf(b, dir);
            steps++;
        }
        cr_assert_eq(tk_ulp_distance(TK_DTYPE_F32, a, b), steps, "%a .. %a", a, b);
        cr_assert_eq(tk_ulp_distance(TK_DTYPE_F32, b, a), steps, "%a .. %a", b, a);
    }
}

/* BF16 reference: the rank of a value in the sorted list of the distinct
 * non-NaN bf16 values (-0 folded into +0). */
static float ranked[65536];
static size_t n_ranked;

static int cmp_float(const void *x, const void *y)
{
    float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

static size_t rank_of(float v)
{
    size_t lo = 0, hi = n_ranked;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ranked[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    cr_assert(lo < n_ranked && ranked[lo] == v, "%a is not a bf16 value", v);
    return lo;
}

static void build_ranks(void)
{
    n_ranked = 0;
    for (uint32_t b = 0; b <= 0xFFFFu; b++)
        if (!bf16_is_nan((uint16_t)b) && b != 0x8000u)
            ranked[n_ranked++] = tkt_float(b << 16);
    qsort(ranked, n_ranked, sizeof *ranked, cmp_float);
}

Test(ulp, bf16_matches_rank_reference, .init = build_ranks)
{
    uint64_t seed = 5;
    for (int trial = 0; trial < 200000; trial++) {
        /* Random f32 inputs: both are represented in bf16 first. */
        float a = tkt_float((uint32_t)tkt_next(&seed));
        float b = trial % 4 ? tkt_float((uint32_t)tkt_next(&seed))
                            : tkt_float(tkt_bits(a) + (uint32_t)(tkt_next(&seed) % 0x40000u));
        if (isnan(a) || isnan(b))
            continue;
        size_t ra = rank_of(tk_bf16_to_f32(ref_bf16(tkt_bits(a))));
        size_t rb = rank_of(tk_bf16_to_f32(ref_bf16(tkt_bits(b))));
        uint64_t want = ra > rb ? ra - rb : rb - ra;
        cr_assert_eq(tk_ulp_distance(TK_DTYPE_BF16, a, b), want, "%a .. %a", a, b);
    }
}

Test(ulp, bf16_edges)
{
    float min_sub = tk_bf16_to_f32(0x0001u);
    cr_assert_eq(tk_ulp_distance(TK_DTYPE_BF16, -min_sub, min_sub), 2);
    cr_assert_eq(tk_ulp_distance(TK_DTYPE_BF16, 0.0f, -0.0f), 0);
    cr_assert_eq(tk_ulp_distance(TK_DTYPE_BF16, 1.0f, tk_bf16_to_f32(0x3F81u)), 1);
    cr_assert_eq(tk_ulp_distance(TK_DTYPE_BF16, tk_bf16_to_f32(0x7F7Fu), INFINITY), 1);
    /* Values that represent as the same bf16 are 0 apart... */
    cr_assert_eq(tk_ulp_distance(TK_DTYPE_BF16, 1.0f, 1.0f + 0x1p-9f), 0);
    cr_assert_eq(tk_ulp_distance(TK_DTYPE_BF16, FLT_MAX, INFINITY), 0);
    /* ...and the smallest f32 subnormal represents as 0. */
    cr_assert_eq(tk_ulp_distance(TK_DTYPE_BF16, tkt_float(1u), -0.0f), 0);
}

/* ---- f16 and fp8 ----------------------------------------------------------
 * The reference decodes an encoding from the format's definition in double:
 * (-1)^s 2^(e - bias) (1 + m / 2^mb), or 2^(1 - bias) m / 2^mb when e = 0. */

typedef struct {
    int dtype, eb, mb;
    bool has_inf;             /* e4m3fn has none: its all-ones code is NaN */
} small_fmt;

static const small_fmt small_fmts[] = {
    {TK_DTYPE_F16, 5, 10, true},
    {TK_DTYPE_F8E4M3FN, 4, 3, false},
    {TK_DTYPE_F8E5M2, 5, 2, true},
};

static unsigned n_codes(small_fmt f) { return 1u << (1 + f.eb + f.mb); }

/* 1 for NaN, 2 for Inf, else 0 with *v the value. */
static int ref_decode(small_fmt f, unsigned h, double *v)
{
    unsigned mag = h & ((1u << (f.eb + f.mb)) - 1), e = mag >> f.mb;
    unsigned m = mag & ((1u << f.mb) - 1), emax = (1u << f.eb) - 1;
    int bias = (1 << (f.eb - 1)) - 1;
    if (f.has_inf && e == emax)
        return m ? 1 : 2;
    if (!f.has_inf && mag == (1u << (f.eb + f.mb)) - 1)
        return 1;
    double x = e ? ldexp(1.0 + ldexp(m, -f.mb), (int)e - bias) : ldexp(m, 1 - bias - f.mb);
    *v = h >> (f.eb + f.mb) ? -x : x;
    return 0;
}

static unsigned encode(small_fmt f, float x)
{
    unsigned char b[2] = {0};
    cr_assert_eq(tk_dtype_from_f32_n(f.dtype, b, &x, 1), TK_OK);
    return f.dtype == TK_DTYPE_F16 ? (unsigned)b[0] | (unsigned)b[1] << 8 : b[0];
}

static float decode(small_fmt f, unsigned h)
{
    unsigned char b[2] = {(unsigned char)h, (unsigned char)(h >> 8)};
    float x;
    cr_assert_eq(tk_dtype_to_f32_n(f.dtype, &x, b, 1), TK_OK);
    return x;
}

Test(small, names_and_sizes)
{
    cr_assert_str_eq(tk_dtype_name(TK_DTYPE_F16), "float16");
    cr_assert_str_eq(tk_dtype_name(TK_DTYPE_F8E4M3FN), "float8_e4m3fn");
    cr_assert_str_eq(tk_dtype_name(TK_DTYPE_F8E5M2), "float8_e5m2");
    cr_assert_eq(tk_dtype_size(TK_DTYPE_F16), 2);
    cr_assert_eq(tk_dtype_size(TK_DTYPE_F8E4M3FN), 1);
    cr_assert_eq(tk_dtype_size(TK_DTYPE_F8E5M2), 1);
}

Test(small, every_code_decodes_to_its_value)
{
    for (size_t k = 0; k < sizeof small_fmts / sizeof *small_fmts; k++) {
        small_fmt f = small_fmts[k];
        for (unsigned h = 0; h < n_codes(f); h++) {
            double v = 0;
            int kind = ref_decode(f, h, &v);
            uint32_t got = tkt_bits(decode(f, h)), sign = (uint32_t)(h >> (f.eb + f.mb)) << 31;
            if (kind == 1 && f.dtype == TK_DTYPE_F16)   /* numpy keeps the payload */
                cr_assert_eq(got, sign | 0x7F800000u | (h & 0x3FFu) << 13, "f16 0x%04x", h);
            else if (kind == 1)                          /* ml_dtypes: quiet NaN */
                cr_assert_eq(got, sign | 0x7FC00000u, "%s 0x%02x", tk_dtype_name(f.dtype), h);
            else if (kind == 2)
                cr_assert_eq(got, sign | 0x7F800000u, "%s 0x%x", tk_dtype_name(f.dtype), h);
            else
                cr_assert_eq(got, tkt_bits((float)v), "%s 0x%x: 0x%08x, not %a",
                             tk_dtype_name(f.dtype), h, got, v);
        }
    }
}

/* Every value rounds to itself, and at every midpoint between neighbours
 * (and one f32 step either side of it) to the nearer, the even one on a
 * tie; past the largest finite value, Inf or (e4m3fn) NaN. */
Test(small, round_to_nearest_even_at_every_midpoint)
{
    for (size_t k = 0; k < sizeof small_fmts / sizeof *small_fmts; k++) {
        small_fmt f = small_fmts[k];
        unsigned half = n_codes(f) / 2;
        for (unsigned s = 0; s < 2; s++)
            for (unsigned h = 0; h + 1 < half; h++) {
                unsigned lo = s * half + h, hi = lo + 1;
                double a, b;
                if (ref_decode(f, lo, &a))
                    continue;   /* Inf and NaN codes */
                cr_assert_eq(encode(f, (float)a), lo, "%s 0x%x", tk_dtype_name(f.dtype), lo);
                /* After the largest finite value, hi is Inf or NaN: the
                 * midpoint is then with the value one more ULP would give. */
                if (ref_decode(f, hi, &b))
                    b = a + ldexp(s ? -1.0 : 1.0, ilogb(a) - f.mb);
                float mid = (float)((a + b) / 2);
                float below = nextafterf(mid, (float)a), above = nextafterf(mid, (float)b);
                unsigned even = lo & 1 ? hi : lo;
                cr_assert_eq(encode(f, below), lo, "%s just past 0x%x", tk_dtype_name(f.dtype), lo);
                cr_assert_eq(encode(f, mid), even, "%s tie after 0x%x", tk_dtype_name(f.dtype), lo);
                cr_assert_eq(encode(f, above), hi, "%s just before 0x%x", tk_dtype_name(f.dtype), hi);
            }
    }
}

/* A bulk conversion (vector paths, eight at a time) gives what one value
 * at a time gives (the scalar rule), in both directions: on every midpoint
 * and its neighbours, every code's value, and random f32 patterns, NaNs
 * among them, at every offset in a block of eight. */
Test(small, bulk_equals_one_at_a_time)
{
    enum { RANDOM = 1 << 20 };
    for (size_t k = 0; k < sizeof small_fmts / sizeof *small_fmts; k++) {
        small_fmt f = small_fmts[k];
        size_t cap = RANDOM + 4 * (size_t)n_codes(f) + 15, n = 0;
        float *x = malloc(cap * sizeof *x);
        unsigned char *bulk = malloc(cap * 2), *codes = malloc((size_t)n_codes(f) * 2);
        cr_assert(x && bulk && codes);
        for (unsigned h = 0; h + 1 < n_codes(f); h++) {
            double a, b;
            if (ref_decode(f, h, &a) || ref_decode(f, h + 1, &b) ||
                (h + 1) % (n_codes(f) / 2) == 0)   /* no midpoint across the sign */
                continue;
            float mid = (float)((a + b) / 2);
            x[n++] = (float)a;
            x[n++] = mid;
            x[n++] = nextafterf(mid, (float)a);
            x[n++] = nextafterf(mid, (float)b);
        }
        uint64_t seed = 31 + k;
        for (size_t i = 0; i < RANDOM; i++) {
            uint32_t u = (uint32_t)tkt_next(&seed);
            memcpy(&x[n++], &u, sizeof u);
        }
        size_t es = f.dtype == TK_DTYPE_F16 ? 2 : 1;
        /* Every float offset within a 64-byte line: the bulk loops do the
         * elements before an aligned one first; those, then a sample. */
        for (size_t off = 0; off < 16; off++) {
            tkt_expect_status(tk_dtype_from_f32_n(f.dtype, bulk, x + off, n - off), TK_OK);
            for (size_t i = 0; i < n - off; i += off && i >= 64 ? 4099 : 1) {
                unsigned got = es == 2 ? (unsigned)bulk[2 * i] | (unsigned)bulk[2 * i + 1] << 8
                                       : bulk[i];
                cr_assert_eq(got, encode(f, x[off + i]), "%s: f32 0x%08x",
                             tk_dtype_name(f.dtype), tkt_bits(x[off + i]));
            }
        }
        for (unsigned h = 0; h < n_codes(f); h++) {
            codes[es * h] = (unsigned char)h;
            if (es == 2)
                codes[2 * h + 1] = (unsigned char)(h >> 8);
        }
        for (size_t off = 0; off < 16; off++) {   /* the destination at each offset */
            tkt_expect_status(tk_dtype_to_f32_n(f.dtype, x + off, codes, n_codes(f)), TK_OK);
            for (unsigned h = 0; h < n_codes(f); h++)
                cr_assert_eq(tkt_bits(x[off + h]), tkt_bits(decode(f, h)), "%s code 0x%x",
                             tk_dtype_name(f.dtype), h);
        }
        free(x);
        free(bulk);
        free(codes);
    }
}

/* Conversions of 8 MiB or more stream their output past the cache: each
 * dtype, both ways, at two destination offsets, equals the same conversion
 * done in pieces too small to stream, and writes nothing past the end. */
Test(small, streamed_bulk_equals_pieces)
{
    enum { PIECE = 4096, GUARD = 64 };
    const size_t n = ((size_t)1 << 23) + 37;   /* 8 Mi codes of one byte, and a tail */
    /* Line-aligned buffers, so that offset 0 starts a line. */
    const size_t d_bytes = 2 * n + GUARD + 64 - (2 * n + GUARD) % 64,
                 back_bytes = 4 * (n + GUARD) + 64 - 4 * (n + GUARD) % 64;
    uint32_t *x = malloc(n * sizeof *x);
    float *back = aligned_alloc(64, back_bytes), *want_back = malloc(n * sizeof *back);
    unsigned char *d = aligned_alloc(64, d_bytes), *want = malloc(2 * n);
    cr_assert(x && back && want_back && d && want);
    uint64_t seed = 41;
    for (size_t i = 0; i < n; i++)
        x[i] = (uint32_t)tkt_next(&seed);
    const int dtypes[] = {TK_DTYPE_BF16, TK_DTYPE_F16, TK_DTYPE_F8E4M3FN, TK_DTYPE_F8E5M2};
    for (size_t k = 0; k < 4; k++) {
        int dt = dtypes[k];
        size_t es = (size_t)tk_dtype_size(dt);
        const float *src = (const float *)(const void *)x;
        for (size_t i = 0; i < n; i += PIECE)
            tk_dtype_from_f32_n(dt, want + i * es, src + i, n - i < PIECE ? n - i : PIECE);
        for (size_t i = 0; i < n; i += PIECE)
            tk_dtype_to_f32_n(dt, want_back + i, want + i * es, n - i < PIECE ? n - i : PIECE);
        for (size_t off = 0; off < 2; off++) {   /* on a line, and one element off it */
            memset(d, 0xA5, d_bytes);
            memset(back, 0xA5, back_bytes);
            tkt_expect_status(tk_dtype_from_f32_n(dt, d + off * es, src, n), TK_OK);
            tkt_expect_status(tk_dtype_to_f32_n(dt, back + off, want, n), TK_OK);
            size_t bad = n;
            for (size_t i = 0; i < n * es && bad == n; i++)
                if (d[off * es + i] != want[i])
                    bad = i / es;
            cr_assert_eq(bad, n, "%s narrowing at offset %zu: element %zu of f32 0x%08x",
                         tk_dtype_name(dt), off, bad, bad < n ? x[bad] : 0u);
            cr_assert_eq(memcmp(back + off, want_back, n * sizeof *back), 0,
                         "%s widening at offset %zu", tk_dtype_name(dt), off);
            /* Nothing outside the destinations changed, before or after. */
            size_t outside = 0;
            for (size_t i = 0; i < d_bytes; i++)
                outside += (i < off * es || i >= (off + n) * es) && d[i] != 0xA5;
            for (size_t i = 0; i < back_bytes / 4; i++)
                outside += (i < off || i >= off + n) && tkt_bits(back[i]) != 0xA5A5A5A5u;
            cr_assert_eq(outside, 0, "%s at offset %zu: %zu elements written outside",
                         tk_dtype_name(dt), off, outside);
        }
    }
    free(x);
    free(back);
    free(want_back);
    free(d);
    free(want);
}

Test(small, overflow_infinity_and_nan)
{
    float big[] = {1e30f, INFINITY, FLT_MAX};
    for (size_t i = 0; i < 3; i++)
        for (unsigned s = 0; s < 2; s++) {
            float x = s ? -big[i] : big[i];
            cr_assert_eq(encode(small_fmts[0], x), s << 15 | 0x7C00u, "f16 %g", (double)x);
            cr_assert_eq(encode(small_fmts[1], x), s << 7 | 0x7Fu, "e4m3fn %g", (double)x);
            cr_assert_eq(encode(small_fmts[2], x), s << 7 | 0x7Cu, "e5m2 %g", (double)x);
        }
    /* f16 NaNs keep the sign and the payload's top ten bits, made nonzero
     * (numpy's rule); the fp8 NaNs are the one quiet NaN of their sign. */
    const uint32_t nans[] = {0x7F800001u, 0x7FC00000u, 0x7FA00000u, 0xFFFFFFFFu, 0x7F802000u};
    const unsigned f16[] = {0x7C01u, 0x7E00u, 0x7D00u, 0xFFFFu, 0x7C01u};
    for (size_t i = 0; i < 5; i++) {
        float x = tkt_float(nans[i]);
        unsigned s = nans[i] >> 31;
        cr_assert_eq(encode(small_fmts[0], x), f16[i], "f16 of 0x%08x", nans[i]);
        cr_assert_eq(encode(small_fmts[1], x), s << 7 | 0x7Fu, "e4m3fn of 0x%08x", nans[i]);
        cr_assert_eq(encode(small_fmts[2], x), s << 7 | 0x7Eu, "e5m2 of 0x%08x", nans[i]);
    }
    /* Subnormal f32 inputs are far below every subnormal here: signed zero. */
    for (size_t k = 0; k < 3; k++) {
        cr_assert_eq(encode(small_fmts[k], tkt_float(0x00000001u)), 0u);
        cr_assert_eq(encode(small_fmts[k], tkt_float(0x80000001u)), n_codes(small_fmts[k]) / 2);
    }
}

Test(small, ulp_distance_counts_codes)
{
    for (size_t k = 0; k < sizeof small_fmts / sizeof *small_fmts; k++) {
        small_fmt f = small_fmts[k];
        double a, b;
        for (unsigned h = 0; h + 1 < n_codes(f) / 2; h++)
            if (!ref_decode(f, h, &a) && !ref_decode(f, h + 1, &b))
                cr_assert_eq(tk_ulp_distance(f.dtype, (float)a, (float)b), 1,
                             "%s 0x%x", tk_dtype_name(f.dtype), h);
        unsigned top = f.has_inf ? (n_codes(f) / 2 - 1) >> f.mb << f.mb : n_codes(f) / 2 - 2;
        ref_decode(f, top - 1, &a);
        cr_assert_eq(tk_ulp_distance(f.dtype, (float)-a, (float)a), 2ull * (top - 1),
                     "%s across zero", tk_dtype_name(f.dtype));
    }
}

Test(small, ulp_distance_of_e4m3fn_nan_is_undefined)
{
    /* e4m3fn has no Inf: Inf and values past 448 are its NaN, no number. */
    cr_assert_eq(tk_ulp_distance(TK_DTYPE_F8E4M3FN, 448.0f, 1000.0f), UINT64_MAX);
    cr_assert_eq(tk_ulp_distance(TK_DTYPE_F8E4M3FN, INFINITY, -INFINITY), UINT64_MAX);
    cr_assert_eq(tk_ulp_distance(TK_DTYPE_F8E4M3FN, 448.0f, 416.0f), 1);
    cr_assert_eq(tk_ulp_distance(TK_DTYPE_F8E5M2, INFINITY, 57344.0f), 1);
}

Test(small, bulk_conversions_check_their_arguments)
{
    float x[4] = {1, 2, 3, 4};
    _Alignas(16) unsigned char d[16];
    memset(d, 0xAB, sizeof d);
    tkt_expect_status(tk_dtype_from_f32_n(TK_DTYPE_I32, d, x, 4), TK_EDTYPE);
    cr_assert(strstr(tk_last_error_message(),
                     "tk_dtype_from_f32_n: dtype 3 (int32) is not a float"),
              "%s", tk_last_error_message());
    tkt_expect_status(tk_dtype_to_f32_n(99, x, d, 4), TK_EDTYPE);
    cr_assert(strstr(tk_last_error_message(), "tk_dtype_to_f32_n: dtype 99 (unknown)"), "%s",
              tk_last_error_message());
    tkt_expect_status(tk_dtype_from_f32_n(TK_DTYPE_F16, NULL, x, 4), TK_EINVAL);
    cr_assert(strstr(tk_last_error_message(), "dst is NULL with n = 4"), "%s",
              tk_last_error_message());
    tkt_expect_status(tk_dtype_to_f32_n(TK_DTYPE_F16, x, NULL, 4), TK_EINVAL);
    tkt_expect_status(tk_dtype_from_f32_n(TK_DTYPE_F16, NULL, NULL, 0), TK_OK);
    tkt_expect_status(tk_dtype_from_f32_n(TK_DTYPE_F8E5M2, d, x, (size_t)1 << 62),
                      TK_EOVERFLOW);
    tkt_expect_status(tk_dtype_to_f32_n(TK_DTYPE_F16, x, d, (size_t)-2), TK_EOVERFLOW);
    /* An array off its element size's alignment: named, nothing written
     * (the streaming loops' wide stores need it; bytes are always in line). */
    tkt_expect_status(tk_dtype_from_f32_n(TK_DTYPE_BF16, d + 1, x, 4), TK_ELAYOUT);
    cr_assert(strstr(tk_last_error_message(), "tk_dtype_from_f32_n: dst at ") &&
              strstr(tk_last_error_message(), "is not aligned to its element size "
                                              "(2 bytes, bfloat16)"),
              "%s", tk_last_error_message());
    tkt_expect_status(tk_dtype_to_f32_n(TK_DTYPE_F16, x, d + 3, 4), TK_ELAYOUT);
    cr_assert(strstr(tk_last_error_message(), "tk_dtype_to_f32_n: src at ") &&
              strstr(tk_last_error_message(), "(2 bytes, float16)"),
              "%s", tk_last_error_message());
    tkt_expect_status(tk_dtype_from_f32_n(TK_DTYPE_F8E5M2, d + 1, x, 0), TK_OK);
    for (size_t i = 0; i < sizeof d; i++)
        cr_assert_eq(d[i], 0xAB, "a refused call wrote byte %zu", i);
    cr_assert(x[0] == 1.0f && x[3] == 4.0f, "a refused call wrote its float32 array");
    tkt_expect_status(tk_dtype_from_f32_n(TK_DTYPE_F8E4M3FN, d + 1, x, 4), TK_OK);
    cr_assert(d[0] == 0xAB && d[1] != 0xAB && d[5] == 0xAB, "an fp8 destination at any byte");
    /* The bulk paths agree with one element at a time on every length
     * (vector bodies and scalar tails alike). */
    float src[300], back[300];
    unsigned char bulk[600];
    for (int i = 0; i < 300; i++)
        src[i] = ldexpf((float)(i * 37 % 101) - 50.0f, i % 40 - 20);
    for (size_t k = 0; k < 3; k++)
        for (size_t n = 1; n <= 300; n += 29) {
            small_fmt f = small_fmts[k];
            size_t es = (size_t)tk_dtype_size(f.dtype);
            cr_assert_eq(tk_dtype_from_f32_n(f.dtype, bulk, src, n), TK_OK);
            cr_assert_eq(tk_dtype_to_f32_n(f.dtype, back, bulk, n), TK_OK);
            for (size_t i = 0; i < n; i++) {
                unsigned h = es == 2 ? (unsigned)bulk[2 * i] | (unsigned)bulk[2 * i + 1] << 8
                                     : bulk[i];
                cr_assert_eq(h, encode(f, src[i]), "%s n %zu at %zu", tk_dtype_name(f.dtype), n, i);
                cr_assert_eq(tkt_bits(back[i]), tkt_bits(decode(f, h)));
            }
        }
}
