/* bf16.c - dtypes, f32 <-> bfloat16 conversion, ULP distances. */
#include "internal.h"

#include <string.h>

const char *tk_dtype_name(int dtype)
{
    switch (dtype) {
    case TK_DTYPE_F32: return "float32";
    case TK_DTYPE_BF16: return "bfloat16";
    case TK_DTYPE_I32: return "int32";
    default: return NULL;
    }
}

int64_t tk_dtype_size(int dtype)
{
    switch (dtype) {
    case TK_DTYPE_F32: return 4;
    case TK_DTYPE_BF16: return 2;
    case TK_DTYPE_I32: return 4;
    default: return 0;
    }
}

uint16_t tk_bf16_from_f32(float x) { return tk__bf16_from(x); }

float tk_bf16_to_f32(uint16_t b) { return tk__bf16_to(b); }

/* The bulk loops are written branch-free over raw bits so the compiler
 * vectorizes them; they run at memory speed (see `make bench`). */
static void tk__bf16_from_f32_loop(uint16_t *restrict dst,
                                   const float *restrict src, size_t n)
{
    const uint32_t *s = (const uint32_t *)(const void *)src;
    for (size_t i = 0; i < n; i++)
        dst[i] = (uint16_t)(tk__bf16_round(s[i]) >> 16);
}

static void tk__bf16_to_f32_loop(float *restrict dst,
                                 const uint16_t *restrict src, size_t n)
{
    uint32_t *d = (uint32_t *)(void *)dst;
    for (size_t i = 0; i < n; i++)
        d[i] = (uint32_t)src[i] << 16;
}

int tk_bf16_from_f32_n(uint16_t *dst, const float *src, size_t n)
{
    if (n == 0)
        return TK_OK;
    if (!dst || !src)
        return tk__fail(TK_EINVAL, "tk_bf16_from_f32_n: %s is NULL with n = %zu",
                        !dst ? "dst" : "src", n);
    tk__bf16_from_f32_loop(dst, src, n);
    return TK_OK;
}

int tk_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n)
{
    if (n == 0)
        return TK_OK;
    if (!dst || !src)
        return tk__fail(TK_EINVAL, "tk_bf16_to_f32_n: %s is NULL with n = %zu",
                        !dst ? "dst" : "src", n);
    tk__bf16_to_f32_loop(dst, src, n);
    return TK_OK;
}

void tk__row_to_f32(int dtype, const void *src, float *dst, int64_t n)
{
    if (dtype == TK_DTYPE_BF16)
        tk__bf16_to_f32_loop(dst, src, (size_t)n);
    else
        memcpy(dst, src, (size_t)n * sizeof(float));
}

void tk__row_from_f32(int dtype, const float *src, void *dst, int64_t n)
{
    if (dtype == TK_DTYPE_BF16)
        tk__bf16_from_f32_loop(dst, src, (size_t)n);
    else
        memcpy(dst, src, (size_t)n * sizeof(float));
}

/* Map sign-magnitude bits onto a line where adjacent values differ by one
 * and +0 == -0, so distances across zero count through it. */
static inline int64_t tk__ordered(uint32_t u, uint32_t sign)
{
    return (u & sign) ? -(int64_t)(u & ~sign) : (int64_t)u;
}

uint64_t tk_ulp_distance(int dtype, float a, float b)
{
    int64_t ia, ib;
    if (a != a || b != b)
        return UINT64_MAX;
    if (dtype == TK_DTYPE_F32) {
        ia = tk__ordered(tk__f32_bits(a), 0x80000000u);
        ib = tk__ordered(tk__f32_bits(b), 0x80000000u);
    } else if (dtype == TK_DTYPE_BF16) {
        ia = tk__ordered(tk_bf16_from_f32(a), 0x8000u);
        ib = tk__ordered(tk_bf16_from_f32(b), 0x8000u);
    } else {
        return UINT64_MAX;
    }
    return ia > ib ? (uint64_t)(ia - ib) : (uint64_t)(ib - ia);
}
