/* bench_dtype.c - bulk f32 <-> f16 and fp8 conversion against memcpy.
 *
 * tk_dtype_from_f32_n on 64 MiB of f32, and tk_dtype_to_f32_n expanding the
 * result back into 64 MiB of f32, against a copy of the same 64 MiB (the
 * faster of memcpy and a streaming copy, as in bench_bf16.c), timed
 * interleaved in the same run (median of 15) with every buffer flushed from
 * the caches before each call, for float16, float8_e4m3fn and float8_e5m2.
 * Limit 1.2 both ways: against that copy an Intel Xeon with 260 MiB of L3
 * reads 0.81 to 0.83 narrowing and 0.57 to 0.77 expanding (0.77 to 1.16,
 * float16 expanding the highest, before the flush, when which call found
 * its source in the L3 depended on the order of the calls).
 * The figures that follow were measured against memcpy alone: with AVX-512
 * narrowing measured
 * 0.7 to 1.02 and expanding 0.57 to 1.06 on an AMD EPYC (one e5m2 run in a
 * full `make bench`), 0.73 to 1.07 and 0.64 to 1.06 on an Intel Xeon (1.16
 * to 1.41 before large destinations were streamed and e4m3fn had its
 * AVX-512 loops).  On an AVX2-only AMD EPYC (Zen 3) e4m3fn narrowing read
 * 1.44 with the compiled rule and failed the limit; with its own AVX2 loop
 * it reads 0.85 to 0.89 in two `make bench` runs, the other conversions
 * 0.49 to 1.04.  With the AVX2 path forced (TK_ISA) on the AVX-512
 * machines, narrowing read 0.96 to 1.38 on the EPYC and 0.93 to 1.5 on the
 * Xeon with e4m3fn's compiled rule the slowest; since its loop the Xeon
 * reads 0.58 to 0.93 narrowing and 0.52 to 0.70 expanding with that path
 * forced, 0.50 to 0.71 and 0.49 to 0.68 on its own.  The portable SSE2 code narrows at 1.9 to 3.6.
 * Against the faster copy the Zen 3 read 1.10 to 1.81 narrowing (e5m2 the
 * highest) and 0.93 to 1.61 expanding with the staged blocks; with the
 * AMD tuning's loops streaming their results, and e5m2 narrowed on the
 * f32 bits, 0.87 to 1.19 and 0.58 to 0.87; since fp8 narrowing rounds
 * normals and subnormals by one addition, e4m3fn 0.83 to 0.95 and e5m2
 * 0.91 to 1.03 where they read 1.01 to 1.18 and 0.99 to 1.12 (alternating
 * runs).  On an Intel Xeon (AVX-512), fp8 narrowing by that rule, 64
 * floats a step, reads 0.79 to 0.80 as the Xeon's own loops did (0.87 to
 * 0.88 where 0.89 to 0.91 under TK_TUNE=amd), 20% faster in cache;
 * float16 by AVX-512's sixteen-lane conversions 0.79 to 0.80 narrowing
 * where F16C's eight-lane ones read 0.81 to 0.82, and 0.65 to 0.68
 * widening as before (35% faster in cache), and e5m2 widening 0.51 to
 * 0.52 where eight lanes by F16C read 0.59 to 0.62.
 * Prints `name: ratio` lines
 * and exits 1 when a ratio is over its limit. */
#include "bench.h"

#include <math.h>
#include <stdint.h>
#include <tilekern.h>

#define N ((size_t)16 << 20)   /* floats: 64 MiB */
#define REPS 15
#define LIMIT_TO 1.2
#define LIMIT_FROM 1.2

static float *src, *back, *copy_dst;
static unsigned char *small;

static void run_memcpy(void *ctx)
{
    (void)ctx;
    memcpy(copy_dst, src, N * sizeof(float));
}

static void run_stream_copy(void *ctx)
{
    (void)ctx;
    bench_stream_copy(copy_dst, src, N * sizeof(float));
}

static void run_from(void *ctx)
{
    if (tk_dtype_from_f32_n(*(int *)ctx, small, src, N) != TK_OK)
        abort();
}

static void run_to(void *ctx)
{
    if (tk_dtype_to_f32_n(*(int *)ctx, back, small, N) != TK_OK)
        abort();
}

int main(void)
{
    bench_build_line("bench_dtype");
    src = malloc(N * sizeof(float));
    back = malloc(N * sizeof(float));
    copy_dst = malloc(N * sizeof(float));
    small = malloc(N * 2);
    if (!src || !back || !copy_dst || !small) {
        fprintf(stderr, "bench_dtype: out of memory\n");
        return 1;
    }
    /* Values over the formats' whole ranges, subnormals and overflow
     * included, with every 1024th element NaN or +-Inf, so that a branchy
     * special-case path would show in the timing. */
    uint64_t s = 1;
    for (size_t i = 0; i < N; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        src[i] = ldexpf((float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0),
                        (int)(s >> 3 & 63) - 28);
        if (i % 1024 == 0)
            src[i] = (const float[]){NAN, INFINITY, -INFINITY}[i / 1024 % 3];
    }
    static const int dtypes[] = {TK_DTYPE_F16, TK_DTYPE_F8E4M3FN, TK_DTYPE_F8E5M2};
    int over = 0;
    for (int d = 0; d < 3; d++) {
        int dtype = dtypes[d];
        bench_fn fns[] = {run_memcpy, run_stream_copy, run_from, run_to};
        void *ctx[] = {NULL, NULL, (void *)&dtypes[d], (void *)&dtypes[d]};
        double med[4];
        const bench_buf bufs[] = {{src, N * sizeof(float)}, {back, N * sizeof(float)},
                                  {copy_dst, N * sizeof(float)}, {small, N * 2}};
        double *rounds = bench_rounds(fns, ctx, 4, REPS, bufs, 4);
        bench_medians(rounds, 4, REPS, med);
        char name[64];
        snprintf(name, sizeof name, "%s_64MiB", tk_dtype_name(dtype));
        bench_faster_copy(name, med[0], med[1]);
        int base = med[1] < med[0];   /* the faster copy */
        /* The round trip must be right too, or the timing means nothing:
         * converting back and forth again gives the same codes. */
        for (size_t i = 0; i < N; i += 4099) {
            unsigned char again[2];
            size_t es = (size_t)tk_dtype_size(dtype);
            tk_dtype_from_f32_n(dtype, again, &back[i], 1);
            if (memcmp(again, small + i * es, es) != 0 && back[i] == back[i]) {
                fprintf(stderr, "bench_dtype: %s round trip differs at %zu\n",
                        tk_dtype_name(dtype), i);
                return 1;
            }
        }
        for (int k = 0; k < 2; k++) {
            double ratio = bench_round_ratio(rounds, REPS, k + 2, base);
            printf("%s_%s_f32_n_64MiB_vs_memcpy: %.2f\n", tk_dtype_name(dtype),
                   k ? "to" : "from", ratio);
            /* 4 + es bytes move per element, 8 per float of the memcpy. */
            printf("%s_%s_f32_n_64MiB_of_memcpy: %.2f\n", tk_dtype_name(dtype),
                   k ? "to" : "from", (4.0 + (double)tk_dtype_size(dtype)) / 8.0 / ratio);
            over |= ratio > (k ? LIMIT_TO : LIMIT_FROM);
        }
        free(rounds);
    }
    if (over)
        fprintf(stderr, "bench_dtype: a conversion is over its limit (%.2fx memcpy "
                "narrowing, %.2fx expanding)\n", LIMIT_FROM, LIMIT_TO);
    free(src);
    free(back);
    free(copy_dst);
    free(small);
    return over;
}
