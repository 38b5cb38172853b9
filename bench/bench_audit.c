/* bench_audit.c - a full two-reference audit against the fused f32 loop.
 *
 * The target (issue 12): tk_audit_run on one 4096x4096 bfloat16 axpy case
 * (represent both inputs, candidate = the host kernel with (8, 128) blocks,
 * the represented-input oracle, the original reference, every metric)
 * within 3x the fused loop out[i] = 2*x[i] + y[i] in f32 on the same shape
 * (-O3 -march=native, native.c), timed interleaved in the same run (median
 * of 15).  The baseline is the faster of two loops a user could write: the
 * plain one, and one that writes its output by streaming stores (0.66 to
 * 0.70 of the plain one's time on an AVX-512 Intel Xeon, whose 260 MiB L3
 * keeps gcc's loop and glibc's memcpy from streaming at 64 MiB).  The
 * ratio to the plain loop alone is printed beside (`_vs_plain_fused_f32`).
 *
 * Readings on one thread.  Against the faster loop the Xeon read 2.8 to
 * 3.1 (3.6 once, in a noisy stretch), 3.3 to 3.7 with the AVX2 path
 * forced: the target met in most runs, not all; since the AVX-512 first
 * pass and the fill of the candidate's output stream whole lines, 2.6 to
 * 2.7 (1.8 to 1.9 against the plain loop), and since that pass screens
 * the gap in its one loop, 2.4 to 2.75 (1.65 to 1.9); in four full
 * `make bench` runs of a later session, 2.45 to 2.79 (1.60 to 1.80).  Against the
 * plain loop, where the target was first set: the Xeon 2.0 to 2.2 (2.3 to
 * 2.4 forced to AVX2), an AVX-512 AMD EPYC (Zen 4) 2.56 to 2.64, Zen 5 2.6
 * to 3.0, an AVX2 AMD EPYC (Zen 3) 2.64 to 2.90.  What brought it there:
 * the stored inputs and the oracle written by streaming stores, the
 * oracle's cast prefetching two blocks ahead, and the built-in axpy's
 * first pass as one loop per block on each vector path (audit.c,
 * tk__first_pass_axpy_512 and _256; on the Zen 3 that pass had taken twice
 * its memory traffic's time, 16 instructions an element, now 11).
 * So LIMIT is a guard at 4.5 on the CPU's own path (9 with TK_ISA forcing
 * a lower path, or on a CPU with the portable C alone).
 *
 * On two threads (TK_KERNEL_THREADS 2, the machine's cores) the Xeon read
 * 1.8 to 2.1 against the faster loop (1.4 to 1.8 since the comparison with
 * the oracle runs on both threads), the Zen 3 1.65 to 1.82 and the Zen 5
 * 1.9 to 2.7 against the plain one (as much as one thread in runs where the
 * VM's second core gives no speedup).  Against the streaming loop the Zen 3
 * reads 3.9 to 4.2 on one thread, 3.6 to 3.9 since the AMD tuning fetches
 * nothing ahead, and 2.6 to 3.5 on two (a two-thread copy there runs 1.13
 * to 1.39 times as fast as one): LIMIT is a guard for it, and
 * LIMIT_2_THREADS a guard at 3.5 (7 on a forced path), the target 3.0 met
 * on the Xeon.
 * Prints `name: ratio` and exits 1 when a ratio is over its limit. */
#include "bench.h"

#include <stdint.h>
#include <tilekern.h>

#define ROWS 4096
#define COLS 4096
#define N ((size_t)ROWS * COLS)
#define REPS 15
#define LIMIT 4.5          /* a guard on the vector path the CPU picks; the target is 3.0 */
#define LIMIT_FORCED 9.0   /* a guard, on a path forced lower or portable C */
#define LIMIT_2_THREADS 3.5   /* a guard on the CPU's own path; the target is 3.0 */

static float *x, *y, *out;
static tk_audit *audit, *audit2;

static void run_fused(void *ctx)
{
    (void)ctx;
    bench_fused_f32(x, y, out, N, 2.0f);
}

static void run_fused_stream(void *ctx)
{
    (void)ctx;
    bench_fused_f32_stream(x, y, out, N, 2.0f);
}

/* A copy of x into out, the same 64 MiB; ctx non-NULL: by streaming stores. */
static void run_copy(void *ctx)
{
    if (ctx)
        bench_stream_copy(out, x, N * sizeof *x);
    else
        memcpy(out, x, N * sizeof *x);
}

static void run_copy_2_threads(void *ctx)
{
    bench_copy_2_threads(out, x, N * sizeof *x, ctx != NULL);
}

static void run_audit(void *ctx)
{
    if (tk_audit_run(ctx ? ctx : audit) != TK_OK) {
        fprintf(stderr, "bench_audit: %s\n", tk_last_error_message());
        exit(1);
    }
}

static int host(void *user, const tk_matrix *const *in, tk_matrix *o)
{
    tk_tiling *t;
    int rc = tk_tiling_create(&t, tk_matrix_rows(o), tk_matrix_cols(o), 8, 128);
    if (!rc)
        rc = tk_kernel_run(user, t, in, o);
    tk_tiling_destroy(t);
    return rc;
}

int main(void)
{
    bench_build_line("bench_audit");
    x = malloc(N * sizeof *x);
    y = malloc(N * sizeof *y);
    out = malloc(N * sizeof *out);
    if (!x || !y || !out) {
        fprintf(stderr, "bench_audit: out of memory\n");
        return 1;
    }
    uint64_t s = 7;
    for (size_t i = 0; i < N; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 8.0 - 4.0);
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        y[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 8.0 - 4.0);
    }
    /* audit2 runs on two threads, its passes and its candidate's kernel
     * (TK_KERNEL_THREADS of both): its speedup, and its ratio to the
     * one-thread fused loop under LIMIT_2_THREADS. */
    tk_kernel *k, *k2;
    const float *orig[2] = {x, y};
    if (tk_kernel_axpy(&k, 2.0f) || tk_audit_create(&audit, k) ||
        tk_audit_set_candidate(audit, host, k) ||
        tk_audit_add_case(audit, TK_DTYPE_BF16, ROWS, COLS, orig) ||
        tk_kernel_axpy(&k2, 2.0f) || tk_kernel_set(k2, TK_KERNEL_THREADS, 2) ||
        tk_audit_create(&audit2, k2) || tk_audit_set_candidate(audit2, host, k2) ||
        tk_audit_add_case(audit2, TK_DTYPE_BF16, ROWS, COLS, orig)) {
        fprintf(stderr, "bench_audit: %s\n", tk_last_error_message());
        return 1;
    }
    bench_fn fns[8] = {run_audit, run_fused, run_audit, run_fused_stream,
                       run_copy, run_copy, run_copy_2_threads, run_copy_2_threads};
    void *ctx[8] = {NULL, NULL, audit2, NULL, NULL, x, NULL, x};
    double med[8], gap = 0.0;
    bench_interleaved(fns, ctx, 8, REPS, med);
    /* The audit did its work: a bf16 gap exists and was measured. */
    tk_audit_result(audit, 0, TK_AUDIT_GAP_MAX_ABS, &gap);
    if (!(gap > 0.0)) {
        fprintf(stderr, "bench_audit: no gap measured\n");
        return 1;
    }
    /* The baseline: the faster of the plain and the streaming loop. */
    double fused = med[3] < med[1] ? med[3] : med[1];
    double ratio = med[0] / fused, ratio2 = med[2] / fused;
    printf("audit_fused_streaming_vs_plain: %.2f\n", med[3] / med[1]);
    printf("audit_bf16_4096x4096_vs_fused_f32: %.2f\n", ratio);
    printf("audit_bf16_4096x4096_vs_plain_fused_f32: %.2f\n", med[0] / med[1]);
    printf("audit_bf16_4096x4096_2_threads_speedup: %.2f\n", med[0] / med[2]);
    printf("audit_bf16_4096x4096_2_threads_vs_fused_f32: %.2f\n", ratio2);
    /* What a second core buys a copy, the audit's ceiling. */
    double copy1 = bench_faster_copy("audit_1_thread", med[4], med[5]);
    double copy2 = bench_faster_copy("audit_2_threads", med[6], med[7]);
    printf("audit_memcpy_2_threads_speedup: %.2f\n", copy1 / copy2);
    double limit = bench_on_cpus_path() ? LIMIT : LIMIT_FORCED;
    if (ratio > limit)
        fprintf(stderr, "bench_audit: %.2f is over the %.2fx limit\n", ratio, limit);
    double limit2 = bench_on_cpus_path() ? LIMIT_2_THREADS : 2 * LIMIT_2_THREADS;
    if (ratio2 > limit2)
        fprintf(stderr, "bench_audit: on two threads %.2f is over the %.2fx limit\n", ratio2,
                limit2);
    tk_audit_destroy(audit);
    tk_audit_destroy(audit2);
    tk_kernel_destroy(k);
    tk_kernel_destroy(k2);
    free(x);
    free(y);
    free(out);
    return ratio <= limit && ratio2 <= limit2 ? 0 : 1;
}
