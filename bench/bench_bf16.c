/* bench_bf16.c - bulk f32 <-> bf16 conversion against memcpy.
 *
 * The requirement: converting a 64 MiB f32 buffer (tk_bf16_from_f32_n) and
 * expanding its bf16 image back into 64 MiB of f32 (tk_bf16_to_f32_n) each
 * take at most 1.05x a copy of the same 64 MiB source into a 64 MiB
 * destination, timed interleaved in the same run (median of 25), on the
 * dispatched path.  The copy is the faster of memcpy and a copy by
 * streaming stores.  Every buffer is flushed from the caches before each
 * call (bench_interleaved_cold): on an Intel Xeon with 260 MiB of L3 the
 * copy otherwise read its source from the cache, where the conversion
 * before it had left it, while expanding read the bf16 image that
 * narrowing had streamed out to memory, and expanding measured 0.82 on one
 * day and 1.07 to 1.13 on another.  From memory on both sides that Xeon
 * reads 0.82 to 0.92 narrowing and 0.69 to 0.72 expanding.  Earlier
 * readings, warm and against memcpy alone: 0.55 to 0.66 with AVX2 or
 * AVX-512 on an AMD EPYC; on the Xeon 0.76 to 0.92 narrowing and 0.72 to
 * 0.79 widening (1.24 and 1.30 before large destinations were streamed),
 * 0.66 and 0.54 with the AVX2 path forced; the portable SSE2 path 0.93
 * narrowing on the EPYC, 1.39 on the Xeon.  Against the faster copy an
 * AVX2 AMD EPYC (Zen 3, where the streaming copy takes 0.57 to 0.67 of
 * memcpy's time and reading the source alone 0.86 to 0.92 of the copy's)
 * read 1.08 to 1.5 narrowing with the blocks staged in cache, and 0.86 to
 * 0.94 since the AMD tuning streams from the loop (0.61 to 0.81
 * widening).  Prints `name: ratio` lines and exits 1 when a ratio is over
 * the limit. */
#include "bench.h"

#include <math.h>
#include <stdint.h>
#include <tilekern.h>

#define N ((size_t)16 << 20)   /* floats: 64 MiB */
#define REPS 25
#define LIMIT 1.05

static float *f32_src, *f32_dst, *copy_dst;
static uint16_t *bf16;

static void run_memcpy(void *ctx)
{
    (void)ctx;
    memcpy(copy_dst, f32_src, N * sizeof(float));
}

static void run_stream_copy(void *ctx)
{
    (void)ctx;
    bench_stream_copy(copy_dst, f32_src, N * sizeof(float));
}

static void run_from_f32(void *ctx)
{
    (void)ctx;
    if (tk_bf16_from_f32_n(bf16, f32_src, N) != TK_OK)
        abort();
}

static void run_to_f32(void *ctx)
{
    (void)ctx;
    if (tk_bf16_to_f32_n(f32_dst, bf16, N) != TK_OK)
        abort();
}

int main(void)
{
    bench_build_line("bench_bf16");
    f32_src = malloc(N * sizeof(float));
    f32_dst = malloc(N * sizeof(float));
    copy_dst = malloc(N * sizeof(float));
    bf16 = malloc(N * sizeof(uint16_t));
    if (!f32_src || !f32_dst || !copy_dst || !bf16) {
        fprintf(stderr, "bench_bf16: out of memory\n");
        return 1;
    }
    /* Values in [-4, 4) with every 1024th element NaN or +-Inf, so that a
     * branchy special-case path would show in the timing. */
    uint64_t s = 1;
    for (size_t i = 0; i < N; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        f32_src[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 8.0 - 4.0);
        if (i % 1024 == 0)
            f32_src[i] = (const float[]){NAN, INFINITY, -INFINITY}[i / 1024 % 3];
    }

    bench_fn fns[] = {run_memcpy, run_stream_copy, run_from_f32, run_to_f32};
    void *ctx[] = {NULL, NULL, NULL, NULL};
    double med[4];
    const bench_buf bufs[] = {{f32_src, N * sizeof(float)}, {f32_dst, N * sizeof(float)},
                              {copy_dst, N * sizeof(float)}, {bf16, N * sizeof(uint16_t)}};
    double *rounds = bench_rounds(fns, ctx, 4, REPS, bufs, 4);
    bench_medians(rounds, 4, REPS, med);
    bench_faster_copy("bf16_64MiB", med[0], med[1]);
    int base = med[1] < med[0];   /* the faster copy */

    /* The round trip must be right too, or the timing means nothing. */
    for (size_t i = 0; i < N; i++) {
        uint32_t back;
        memcpy(&back, &f32_dst[i], sizeof back);
        if (tk_bf16_from_f32(f32_src[i]) != bf16[i] || back != (uint32_t)bf16[i] << 16) {
            fprintf(stderr, "bench_bf16: wrong result at element %zu\n", i);
            return 1;
        }
    }

    const char *names[] = {"bf16_from_f32_n_64MiB", "bf16_to_f32_n_64MiB"};
    int over = 0;
    for (int i = 0; i < 2; i++) {
        double ratio = bench_round_ratio(rounds, REPS, i + 2, base);
        printf("%s_vs_memcpy: %.2f\n", names[i], ratio);
        /* 6 bytes move per element either way, 8 per float of the memcpy. */
        printf("%s_of_memcpy: %.2f\n", names[i], 6.0 / 8.0 / ratio);
        over |= ratio > LIMIT;
    }
    free(rounds);
    if (over)
        fprintf(stderr, "bench_bf16: a conversion is slower than %.2fx memcpy\n", LIMIT);
    free(f32_src);
    free(f32_dst);
    free(copy_dst);
    free(bf16);
    return over;
}
