/* native.c - the baselines of `make bench`: the loops a user would write for
 * each contract, compiled with -O3 -march=native for the machine running
 * the bench (the library itself is built portable and dispatches). */
#include "bench.h"

#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

/* A copy that writes by streaming stores, around the caches, as a user
 * would write one for a large buffer.  glibc's memcpy streams only above a
 * threshold it sets from the size of the last-level cache (99 MiB on a
 * Xeon with 260 MiB of L3, less than 64 MiB on the AMD EPYCs), so the
 * faster of the two is the machine's copy bandwidth. */
void bench_stream_copy(void *restrict dst, const void *restrict src, size_t bytes)
{
#if defined(__AVX512F__)
    enum { W = 64 };
#elif defined(__AVX__)
    enum { W = 32 };
#elif defined(__SSE2__)
    enum { W = 16 };
#else
    enum { W = 0 };
#endif
    char *d = dst;
    const char *s = src;
    /* Streaming stores need an aligned destination: memcpy up to it. */
    size_t head = W ? (size_t)(-(uintptr_t)d & (uintptr_t)(W - 1)) : bytes;
    head = head < bytes ? head : bytes;
    memcpy(d, s, head);
    size_t i = head;
#if defined(__AVX512F__)
    for (; i + W <= bytes; i += W)
        _mm512_stream_si512((void *)(d + i), _mm512_loadu_si512((const void *)(s + i)));
#elif defined(__AVX__)
    for (; i + W <= bytes; i += W)
        _mm256_stream_si256((__m256i *)(void *)(d + i),
                            _mm256_loadu_si256((const __m256i *)(const void *)(s + i)));
#elif defined(__SSE2__)
    for (; i + W <= bytes; i += W)
        _mm_stream_si128((__m128i *)(void *)(d + i),
                         _mm_loadu_si128((const __m128i *)(const void *)(s + i)));
#endif
#if defined(__SSE2__)
    _mm_sfence();
#endif
    memcpy(d + i, s + i, bytes - i);
}

void bench_fused_f32(const float *restrict x, const float *restrict y, float *restrict out,
                     size_t n, float alpha)
{
    for (size_t i = 0; i < n; i++)
        out[i] = alpha * x[i] + y[i];
}

/* Sixty-four bytes from line (aligned) to d (aligned) by streaming stores. */
static inline void stream_line(void *d, const void *line)
{
#if defined(__AVX512F__)
    _mm512_stream_si512(d, _mm512_load_si512(line));
#elif defined(__AVX__)
    for (int k = 0; k < 64; k += 32)
        _mm256_stream_si256((__m256i *)((char *)d + k),
                            _mm256_load_si256((const __m256i *)((const char *)line + k)));
#elif defined(__SSE2__)
    for (int k = 0; k < 64; k += 16)
        _mm_stream_si128((__m128i *)((char *)d + k),
                         _mm_load_si128((const __m128i *)((const char *)line + k)));
#else
    memcpy(d, line, 64);
#endif
}

static inline void stream_fence(void)
{
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

/* The fused loop with streaming stores: each 64-byte line of out computed
 * by the plain loop into a line in registers, then written around the
 * caches, as a user would write it for an output larger than the cache. */
void bench_fused_f32_stream(const float *restrict x, const float *restrict y,
                            float *restrict out, size_t n, float alpha)
{
    size_t head = (size_t)(-(uintptr_t)out & 63) / sizeof *out, i;
    head = head < n ? head : n;
    bench_fused_f32(x, y, out, head, alpha);
    for (i = head; i + 16 <= n; i += 16) {
        _Alignas(64) float line[16];
        for (int j = 0; j < 16; j++)
            line[j] = alpha * x[i + j] + y[i + j];
        stream_line(out + i, line);
    }
    stream_fence();
    bench_fused_f32(x + i, y + i, out + i, n - i, alpha);
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

void bench_fused_bf16_stream(const uint16_t *restrict x, const uint16_t *restrict y,
                             uint16_t *restrict out, size_t n, float alpha)
{
    size_t head = (size_t)(-(uintptr_t)out & 63) / sizeof *out, i;
    head = head < n ? head : n;
    bench_fused_bf16(x, y, out, head, alpha);
    for (i = head; i + 32 <= n; i += 32) {
        _Alignas(64) uint16_t line[32];
        for (int j = 0; j < 32; j++)
            line[j] = bf16_bits(alpha * bf16_value(x[i + j]) + bf16_value(y[i + j]));
        stream_line(out + i, line);
    }
    stream_fence();
    bench_fused_bf16(x + i, y + i, out + i, n - i, alpha);
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
