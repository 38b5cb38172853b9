/* immintrin.h of the emulated AVX-512 build (make avx512-emulated): the
 * compiler's own header for every path up to AVX2, which runs natively,
 * then the AVX-512 intrinsics the library uses, under their own names,
 * from SIMDe's portable implementations (libsimde-dev) and, for the few
 * SIMDe 0.7 lacks, from the loops below.  So the AVX-512 path's code runs,
 * bit for bit as written, on a CPU with AVX2 alone.  The streaming stores
 * check the alignment the real instructions fault on.  Never installed,
 * never part of the shipped library. */
#ifndef TK_TESTS_AVX512_IMMINTRIN_H
#define TK_TESTS_AVX512_IMMINTRIN_H
/* -Wpedantic: include_next and the statement expression are extensions. */
#pragma GCC system_header

#include_next <immintrin.h>

#include <simde/x86/avx512.h>
#include <stdint.h>
#include <string.h>
/* SIMDe includes <complex.h>, whose macros the library's names do not expect. */
#undef I
#undef complex
#undef imaginary

#define __m512 simde__m512
#define __m512i simde__m512i
#define __mmask16 simde__mmask16

#define _mm512_add_epi32 simde_mm512_add_epi32
#define _mm512_add_ps simde_mm512_add_ps
#define _mm512_and_si512 simde_mm512_and_si512
#define _mm512_andnot_si512 simde_mm512_andnot_si512
#define _mm512_castps_si512 simde_mm512_castps_si512
#define _mm512_castsi256_si512 simde_mm512_castsi256_si512
#define _mm512_castsi512_ps simde_mm512_castsi512_ps
#define _mm512_cmp_ps_mask simde_mm512_cmp_ps_mask
#define _mm512_cmpeq_epi32_mask simde_mm512_cmpeq_epi32_mask
#define _mm512_cmpgt_epi32_mask simde_mm512_cmpgt_epi32_mask
#define _mm512_inserti64x4 simde_mm512_inserti64x4
#define _mm512_load_ps simde_mm512_load_ps
#define _mm512_loadu_ps simde_mm512_loadu_ps
#define _mm512_loadu_si512 simde_mm512_loadu_si512
#define _mm512_mask_add_epi32 simde_mm512_mask_add_epi32
#define _mm512_mask_mov_epi32 simde_mm512_mask_mov_epi32
#define _mm512_mask_or_epi32 simde_mm512_mask_or_epi32
#define _mm512_maskz_mov_epi32 simde_mm512_maskz_mov_epi32
#define _mm512_max_epi32 simde_mm512_max_epi32
#define _mm512_max_epu32 simde_mm512_max_epu32
#define _mm512_mul_ps simde_mm512_mul_ps
#define _mm512_or_si512 simde_mm512_or_si512
#define _mm512_packs_epi32 simde_mm512_packs_epi32
#define _mm512_packus_epi16 simde_mm512_packus_epi16
#define _mm512_permutexvar_epi32 simde_mm512_permutexvar_epi32
#define _mm512_set1_epi32 simde_mm512_set1_epi32
#define _mm512_set1_epi8 simde_mm512_set1_epi8
#define _mm512_set1_ps simde_mm512_set1_ps
#define _mm512_setr_epi32 simde_mm512_setr_epi32
#define _mm512_setzero_ps simde_mm512_setzero_ps
#define _mm512_setzero_si512 simde_mm512_setzero_si512
#define _mm512_slli_epi32 simde_mm512_slli_epi32
#define _mm512_srli_epi32 simde_mm512_srli_epi32
#define _mm512_storeu_ps simde_mm512_storeu_ps
#define _mm512_storeu_si512 simde_mm512_storeu_si512
#define _mm512_sub_epi32 simde_mm512_sub_epi32
#define _mm512_sub_ps simde_mm512_sub_ps

/* ---- what SIMDe 0.7 lacks, lane by lane as Intel's guide defines it ---- */

typedef union {
    simde__m512i v;
    simde__m512 f;
    uint32_t u32[16];
    float f32[16];
} tk_emu_512;

#define _mm512_mask_cmp_ps_mask(k, a, b, imm) \
    ((simde__mmask16)((k) & simde_mm512_cmp_ps_mask((a), (b), (imm))))

/* Each lane's low `size` bytes, in lane order (x86 is little-endian), and
 * back, zero-extended. */
static inline void tk_emu_narrow(simde__m512i a, void *r, size_t size)
{
    tk_emu_512 x = {.v = a};
    for (int i = 0; i < 16; i++)
        memcpy((char *)r + (size_t)i * size, &x.u32[i], size);
}

static inline simde__m512i tk_emu_widen(const void *p, size_t size)
{
    tk_emu_512 r;
    for (int i = 0; i < 16; i++) {
        r.u32[i] = 0;
        memcpy(&r.u32[i], (const char *)p + (size_t)i * size, size);
    }
    return r.v;
}

static inline __m256i tk_emu_cvtepi32_epi16(simde__m512i a)
{
    __m256i r;
    tk_emu_narrow(a, &r, 2);
    return r;
}
static inline simde__m512i tk_emu_cvtepu16_epi32(__m256i a) { return tk_emu_widen(&a, 2); }
static inline simde__m512i tk_emu_cvtepu8_epi32(__m128i a) { return tk_emu_widen(&a, 1); }
#define _mm512_cvtepi32_epi16 tk_emu_cvtepi32_epi16
#define _mm512_cvtepu16_epi32 tk_emu_cvtepu16_epi32
#define _mm512_cvtepu8_epi32 tk_emu_cvtepu8_epi32

/* The half-precision conversions by F16C's eight-lane forms (the AVX2
 * path needs F16C too), which round as the sixteen-lane ones do. */
static inline simde__m512 tk_emu_cvtph_ps(__m256i a)
{
    tk_emu_512 r;
    _mm256_storeu_ps(r.f32, _mm256_cvtph_ps(_mm256_castsi256_si128(a)));
    _mm256_storeu_ps(r.f32 + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(a, 1)));
    return r.f;
}
#define _mm512_cvtph_ps tk_emu_cvtph_ps

#define _mm512_cvtps_ph(a, imm)                                                            \
    __extension__({                                                                        \
        tk_emu_512 tk_emu_x_ = {.f = (a)};                                                 \
        _mm256_set_m128i(_mm256_cvtps_ph(_mm256_loadu_ps(tk_emu_x_.f32 + 8), (imm)),       \
                         _mm256_cvtps_ph(_mm256_loadu_ps(tk_emu_x_.f32), (imm)));          \
    })

/* The lanes folded by addition, signed maximum or unsigned maximum. */
enum { TK_EMU_ADD, TK_EMU_MAX, TK_EMU_MAXU };
static inline uint32_t tk_emu_reduce(simde__m512i a, int op)
{
    tk_emu_512 x = {.v = a};
    uint32_t r = x.u32[0];
    for (int i = 1; i < 16; i++) {
        uint32_t v = x.u32[i];
        r = op == TK_EMU_ADD ? r + v
            : op == TK_EMU_MAX ? ((int32_t)v > (int32_t)r ? v : r)
                               : (v > r ? v : r);
    }
    return r;
}
#define _mm512_reduce_add_epi32(a) ((int)tk_emu_reduce((a), TK_EMU_ADD))
#define _mm512_reduce_max_epi32(a) ((int)tk_emu_reduce((a), TK_EMU_MAX))
#define _mm512_reduce_max_epu32(a) ((unsigned)tk_emu_reduce((a), TK_EMU_MAXU))

/* A streaming store off its 64-byte line faults on the real CPU. */
static inline void tk_emu_stream_512(void *p, const void *v)
{
    if ((uintptr_t)p % 64)
        __builtin_trap();
    memcpy(p, v, 64);
}
static inline void tk_emu_stream_ps(void *p, simde__m512 a)
{
    tk_emu_stream_512(p, &a);
}
static inline void tk_emu_stream_si512(void *p, simde__m512i a)
{
    tk_emu_stream_512(p, &a);
}
#define _mm512_stream_ps tk_emu_stream_ps
#define _mm512_stream_si512 tk_emu_stream_si512

#endif
