/* native.c - the baselines of `make bench`: the loops a user would write for
 * each contract, compiled with -O3 -march=native for the machine running
 * the bench (the library itself is built portable and dispatches). */
#include "bench.h"

#include <stdint.h>
#include <string.h>

void bench_fused_f32(const float *restrict x, const float *restrict y, float *restrict out,
                     size_t n, float alpha)
{
    for (size_t i = 0; i < n; i++)
        out[i] = alpha * x[i] + y[i];
}

/* f32 bits to bf16 bits: round to nearest even, NaN kept quiet. */
static inline uint16_t bf16_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t r = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    return (u & 0x7FFFFFFFu) > 0x7F800000u ? (uint16_t)(((u >> 16) & 0x8000u) | 0x7FC0u) : r;
}

static inline float bf16_value(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void bench_fused_bf16(const uint16_t *restrict x, const uint16_t *restrict y,
                      uint16_t *restrict out, size_t n, float alpha)
{
    for (size_t i = 0; i < n; i++)
        out[i] = bf16_bits(alpha * bf16_value(x[i]) + bf16_value(y[i]));
}

/* o = 2x + y on a rows x cols block of each operand (row strides ldx, ldy,
 * ldo): the body of bench_call's axpy through tk_call_run and of its
 * blocked loop, one function both call. */
void bench_block_axpy(const float *x, int64_t ldx, const float *y, int64_t ldy, float *o,
                      int64_t ldo, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *restrict xr = x + r * ldx, *restrict yr = y + r * ldy;
        float *restrict orow = o + r * ldo;
        for (int64_t c = 0; c < cols; c++)
            orow[c] = 2.0f * xr[c] + yr[c];
    }
}

/* A rows x cols bf16 block (row stride ld) to dense f32, and dense f32 back
 * into one (round to nearest even, NaN kept quiet): a blocked loop's
 * conversions. */
void bench_bf16_block_in(const uint16_t *src, int64_t ld, float *restrict dst, int64_t rows,
                         int64_t cols)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dst[r * cols + c] = bf16_value(src[r * ld + c]);
}

void bench_bf16_block_out(const float *src, uint16_t *restrict dst, int64_t ld, int64_t rows,
                          int64_t cols)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dst[r * ld + c] = bf16_bits(src[r * cols + c]);
}

/* The axpy as a custom elementwise body (alpha 2), as a user would write it. */
int bench_axpy_body(void *user, int64_t rows, int64_t cols, int64_t ld,
                    const float *const *in, float *out)
{
    (void)user;
    for (int64_t r = 0; r < rows; r++) {
        const float *restrict x = in[0] + r * ld, *restrict y = in[1] + r * ld;
        float *restrict o = out + r * ld;
        for (int64_t c = 0; c < cols; c++)
            o[c] = 2.0f * x[c] + y[c];
    }
    return 0;
}

/* c = a b, n x n row-major, f32 accumulation in k order: k blocks of 64
 * so that b's rows stay in cache, the j loop vectorized. */
void bench_matmul_f32(const float *restrict a, const float *restrict b, float *restrict c,
                      int64_t n)
{
    memset(c, 0, (size_t)(n * n) * sizeof *c);
    for (int64_t k0 = 0; k0 < n; k0 += 64)
        for (int64_t i = 0; i < n; i++)
            for (int64_t k = k0; k < k0 + 64 && k < n; k++) {
                float s = a[i * n + k];
                for (int64_t j = 0; j < n; j++)
                    c[i * n + j] += s * b[k * n + j];
            }
}
