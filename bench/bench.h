/* bench.h - timing helpers for `make bench`: interleaved runs, medians,
 * results printed as `name: ratio` against a baseline timed in the same run. */
#ifndef TK_BENCH_H
#define TK_BENCH_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tilekern.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

/* In native.c (-O3 -march=native), as the baselines below. */
void bench_stream_copy(void *restrict dst, const void *restrict src, size_t bytes);

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int bench_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of n samples (sorts in place). */
static inline double bench_median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, bench_cmp);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

typedef void (*bench_fn)(void *ctx);

/* A buffer bench_interleaved_cold flushes from the caches. */
typedef struct {
    const void *p;
    size_t bytes;
} bench_buf;

/* Write back and drop p's lines from every cache level (x86; elsewhere
 * nothing). */
static inline void bench_flush(const void *p, size_t bytes)
{
#if defined(__CLFLUSHOPT__)   /* -march=native: unordered, so many at once */
    for (size_t i = 0; i < bytes; i += 64)
        _mm_clflushopt((void *)((const char *)p + i));
    _mm_mfence();
#elif defined(__SSE2__)
    for (size_t i = 0; i < bytes; i += 64)
        _mm_clflush((const char *)p + i);
    _mm_mfence();
#else
    (void)p, (void)bytes;
#endif
}

/* Time `n_fns` functions interleaved (fn0, fn1, ..., fn0, fn1, ...) for
 * `reps` rounds after one warm-up each, with every buffer in bufs flushed
 * from the caches before each call (untimed): returns the times, s[f * reps
 * + r] that of fns[f] in round r (the caller frees s).  The flush makes
 * each call read and write memory: a last-level cache that holds a 64 MiB
 * operand (a Xeon's 260 MiB) otherwise favours whichever call finds its
 * source left there by the one before it. */
static inline double *bench_rounds(bench_fn *fns, void **ctx, int n_fns, int reps,
                                   const bench_buf *bufs, int n_bufs)
{
    double *s = calloc((size_t)(n_fns * reps), sizeof *s);
    if (!s) { fprintf(stderr, "bench: out of memory\n"); exit(1); }
    for (int f = 0; f < n_fns; f++)
        fns[f](ctx[f]);
    for (int r = 0; r < reps; r++)
        for (int f = 0; f < n_fns; f++) {
            for (int b = 0; b < n_bufs; b++)
                bench_flush(bufs[b].p, bufs[b].bytes);
            double t0 = bench_now();
            fns[f](ctx[f]);
            s[f * reps + r] = bench_now() - t0;
        }
    return s;
}

/* Each function's median time from bench_rounds' s, into med[]. */
static inline void bench_medians(const double *s, int n_fns, int reps, double *med)
{
    double *x = malloc((size_t)reps * sizeof *x);
    if (!x) { fprintf(stderr, "bench: out of memory\n"); exit(1); }
    for (int f = 0; f < n_fns; f++) {
        memcpy(x, s + f * reps, (size_t)reps * sizeof *x);
        med[f] = bench_median(x, reps);
    }
    free(x);
}

/* The median over rounds of fns[f]'s time over fns[base]'s in the same
 * round.  A VM whose memory slows and recovers during a bench slows both
 * sides of a round alike, where the median of each side alone may fall in
 * a different state: two identical runs of 4095x4093 f32 read 1.04 and
 * 1.09 the fused loop in one `make bench` that way. */
static inline double bench_round_ratio(const double *s, int reps, int f, int base)
{
    double *x = malloc((size_t)reps * sizeof *x);
    if (!x) { fprintf(stderr, "bench: out of memory\n"); exit(1); }
    for (int r = 0; r < reps; r++)
        x[r] = s[f * reps + r] / s[base * reps + r];
    double m = bench_median(x, reps);
    free(x);
    return m;
}

/* bench_rounds' medians, with the buffers flushed before each call. */
static inline void bench_interleaved_cold(bench_fn *fns, void **ctx, int n_fns, int reps,
                                          double *med, const bench_buf *bufs, int n_bufs)
{
    double *s = bench_rounds(fns, ctx, n_fns, reps, bufs, n_bufs);
    bench_medians(s, n_fns, reps, med);
    free(s);
}

/* Time `n_fns` functions interleaved (fn0, fn1, ..., fn0, fn1, ...) for
 * `reps` rounds after one warm-up each; medians land in med[]. */
static inline void bench_interleaved(bench_fn *fns, void **ctx, int n_fns,
                                     int reps, double *med)
{
    bench_interleaved_cold(fns, ctx, n_fns, reps, med, NULL, 0);
}

/* One line naming the library's build and dispatched path and the CPU
 * model, so that every figure says what it was measured on. */
static inline void bench_build_line(const char *prog)
{
    char model[128] = "unknown", line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
            model[strcspn(model, "\n")] = 0;
            break;
        }
    if (f)
        fclose(f);
    /* The last-level cache: 64 MiB operands fit in some (a Xeon's 260 MiB). */
    char llc[32] = "unknown";
    if ((f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r"))) {
        if (fgets(llc, sizeof llc, f))
            llc[strcspn(llc, "\n")] = 0;
        fclose(f);
    }
    printf("%s: build: %s; cpu model: %s; L3: %s\n", prog, tk_build_info(), model, llc);
}

/* Whether the library runs the vector path this CPU picks, as a user gets
 * it (TK_ISA unset, or naming that path): where the issues' targets hold.
 * False when TK_ISA forced a lower path, or on a CPU with the portable C
 * alone (no AVX2 on x86, any other architecture), where they are guards. */
static inline int bench_on_cpus_path(void)
{
    const char *b = tk_build_info(), *isa = strstr(b, "isa="), *cpu = strstr(b, " cpu=");
    if (!isa || !cpu || strncmp(isa + 4, "portable ", 9) == 0)
        return 0;
    size_t n = strcspn(isa + 4, " ");
    return n == strcspn(cpu + 5, " ") && strncmp(isa + 4, cpu + 5, n) == 0;
}

/* The copy a ratio `_vs_memcpy` or `_of_memcpy` is taken against: the
 * faster of glibc's memcpy (median t_memcpy) and a copy by streaming
 * stores (t_stream), timed in the same rounds; says which, and by how much. */
static inline double bench_faster_copy(const char *name, double t_memcpy, double t_stream)
{
    printf("%s_streaming_copy_vs_memcpy: %.2f\n", name, t_stream / t_memcpy);
    return t_stream < t_memcpy ? t_stream : t_memcpy;
}

struct bench_half {
    char *dst;
    const char *src;
    size_t bytes;
    bool stream;
};

static void *bench_copy_half(void *arg)
{
    const struct bench_half *h = arg;
    if (h->stream)
        bench_stream_copy(h->dst, h->src, h->bytes);
    else
        memcpy(h->dst, h->src, h->bytes);
    return NULL;
}

/* A copy on two threads, half each (`stream`: by streaming stores): the
 * bandwidth two cores reach. */
static inline void bench_copy_2_threads(void *dst, const void *src, size_t bytes, bool stream)
{
    size_t half = bytes / 2;
    struct bench_half h[2] = {{dst, src, half, stream},
                              {(char *)dst + half, (const char *)src + half, bytes - half,
                               stream}};
    pthread_t t;
    if (pthread_create(&t, NULL, bench_copy_half, &h[1])) {
        fprintf(stderr, "bench: no second thread\n");
        exit(1);
    }
    bench_copy_half(&h[0]);
    pthread_join(t, NULL);
}

/* The baselines, in native.c: compiled with -O3 -march=native. */
void bench_fused_f32(const float *restrict x, const float *restrict y, float *restrict out,
                     size_t n, float alpha);
void bench_fused_bf16(const uint16_t *restrict x, const uint16_t *restrict y,
                      uint16_t *restrict out, size_t n, float alpha);
void bench_fused_f32_stream(const float *restrict x, const float *restrict y,
                            float *restrict out, size_t n, float alpha);
void bench_fused_bf16_stream(const uint16_t *restrict x, const uint16_t *restrict y,
                             uint16_t *restrict out, size_t n, float alpha);
int bench_axpy_body(void *user, int64_t rows, int64_t cols, int64_t ld,
                    const float *const *in, float *out);
void bench_block_axpy(const float *x, int64_t ldx, const float *y, int64_t ldy, float *o,
                      int64_t ldo, int64_t rows, int64_t cols);
void bench_bf16_block_in(const uint16_t *src, int64_t ld, float *restrict dst, int64_t rows,
                         int64_t cols);
void bench_bf16_block_out(const float *src, uint16_t *restrict dst, int64_t ld, int64_t rows,
                          int64_t cols);
void bench_matmul_f32(const float *restrict a, const float *restrict b, float *restrict c,
                      int64_t n);

#endif
