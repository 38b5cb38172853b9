/* threads.c - `make tsan`: eight threads at once, each with handles of its
 * own and all sharing some read-only ones (kernels, a tiling, the inputs;
 * one kernel runs on three threads, so its runs contend for its workers),
 * run kernels under every tail, a pipeline, an audit with its report, a
 * compare, a bench and deliberate errors.  Built with -fsanitize=thread;
 * ThreadSanitizer must report nothing.  Each thread also checks that the
 * error message it reads is its own.  Exit 0 when every check passed. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tilekern.h>

#define THREADS 8
#define ROWS 40
#define COLS 300

static tk_kernel *shared_kernel;
static tk_tiling *shared_tiling;
static tk_matrix *shared_in[2];
static float xs[ROWS * COLS], ys[ROWS * COLS];
/* 512x512: four bands of 65536 elements, so three threads split it. */
#define WIDE 512
static tk_kernel *wide_kernel;
static tk_tiling *wide_tiling;
static tk_matrix *wide_in[2], *wide_ref;
static const char *dir = ".";

static int nothing(void *user)
{
    (void)user;
    return 0;
}

/* A kernel of this thread's own on three threads of its own (bands of a
 * matrix big enough to be split), every tail and both body kinds, built-in
 * and a thread-safe custom body, against one thread's result. */
static int axpy_body(void *user, int64_t rows, int64_t cols, int64_t ld,
                     const float *const *in, float *out)
{
    (void)user;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            out[r * ld + c] = 2.0f * in[0][r * ld + c] + in[1][r * ld + c];
    return 0;
}

/* The host kernel of `user` on 8x128 blocks, as an audit's candidate. */
static int host_of(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    tk_tiling *t = NULL;
    int rc = tk_tiling_create(&t, tk_matrix_rows(out), tk_matrix_cols(out), 8, 128);
    if (!rc)
        rc = tk_kernel_run(user, t, in, out);
    tk_tiling_destroy(t);
    return rc;
}

/* The host kernel, then one element moved: a candidate the audit measures. */
static int one_off(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    int rc = host_of(user, in, out);
    uint16_t *o = tk_matrix_data(out);
    o[12345] ^= 1;
    return rc;
}

/* A plain matmul of the stored inputs in float32, cast once: a reduction
 * candidate that runs while the audit's threads compute the oracle. */
static int matmul_of(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    (void)user;
    int64_t m = tk_matrix_rows(in[0]), k = tk_matrix_cols(in[0]), n = tk_matrix_cols(in[1]);
    float *x = malloc(sizeof(float) * (size_t)(m * k));
    float *y = malloc(sizeof(float) * (size_t)(k * n));
    int rc = !x || !y || tk_matrix_to_f32(in[0], x, k) || tk_matrix_to_f32(in[1], y, n);
    float *o = tk_matrix_data(out);
    for (int64_t i = 0; !rc && i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int64_t kk = 0; kk < k; kk++)
                acc += x[i * k + kk] * y[kk * n + j];
            o[i * n + j] = acc;
        }
    free(x);
    free(y);
    return rc;
}

static const char *threaded_runs(void)
{
    enum { R = 333, C = 600 };
    static const int tails[3] = {TK_TAIL_MASK, TK_TAIL_PAD, TK_TAIL_SHIFT_INWARDS};
    tk_matrix *m[4] = {NULL, NULL, NULL, NULL};   /* x, y, one thread, three */
    tk_kernel *k[2] = {NULL, NULL};
    tk_tiling *t = NULL;
    const char *why = NULL;
    for (int i = 0; i < 4 && !why; i++)
        if (tk_matrix_create(&m[i], TK_DTYPE_F32, R, C))
            why = "threaded matrices";
    for (int i = 0; i < 2 && !why; i++)
        memcpy(tk_matrix_data(m[i]), i ? ys : xs, sizeof xs);   /* the first rows */
    if (!why && (tk_kernel_axpy(&k[0], 2.0f) || tk_kernel_custom(&k[1], 2, axpy_body, NULL) ||
                 tk_kernel_set(k[1], TK_KERNEL_THREAD_SAFE, 1) || tk_tiling_create(&t, R, C, 8, 128)))
        why = "threaded kernels";
    const tk_matrix *in[2] = {m[0], m[1]};
    for (int i = 0; !why && i < 12; i++) {
        tk_kernel *kk = k[i / 6];
        int tail = tails[i % 3], body = i % 6 < 3 ? TK_BODY_ELEMENTWISE : TK_BODY_BLOCKWISE;
        if (tail == TK_TAIL_SHIFT_INWARDS && body == TK_BODY_BLOCKWISE)
            continue;
        if (tk_tiling_set(t, TK_TILING_TAIL, tail) || tk_kernel_set(kk, TK_KERNEL_BODY, body) ||
            tk_kernel_set(kk, TK_KERNEL_THREADS, 1) || tk_kernel_run(kk, t, in, m[2]) ||
            tk_kernel_set(kk, TK_KERNEL_THREADS, 3) || tk_kernel_run(kk, t, in, m[3]) ||
            memcmp(tk_matrix_data(m[2]), tk_matrix_data(m[3]), (size_t)R * C * 4))
            why = "a kernel run on three threads";
    }
    /* Audits whose passes run on the contract kernel's three threads: the
     * host kernel (one pass), and a candidate one element off, whose output
     * the second pass then reads. */
    float *ox = malloc(sizeof(float) * R * C), *oy = malloc(sizeof(float) * R * C);
    for (int i = 0; ox && oy && i < R * C; i++)
        ox[i] = xs[i % (ROWS * COLS)], oy[i] = ys[i % (ROWS * COLS)];
    const float *orig[2] = {ox, oy};
    tk_audit *a = NULL;
    if (!why && (!ox || !oy))
        why = "memory for the audit's originals";
    for (int i = 0; !why && i < 2; i++) {
        if (tk_kernel_set(k[0], TK_KERNEL_BODY, TK_BODY_ELEMENTWISE) ||
            tk_kernel_set(k[0], TK_KERNEL_THREADS, 3) || tk_audit_create(&a, k[0]) ||
            tk_audit_set_candidate(a, i ? one_off : host_of, k[0]) ||
            tk_audit_add_case(a, TK_DTYPE_BF16, R, C, orig) ||
            tk_audit_run(a) != (i ? TK_EMISMATCH : TK_OK))
            why = "an audit on three threads";
        tk_audit_destroy(a);
        a = NULL;
    }
    /* A matmul audit: the candidate on this thread while two others start
     * the oracle's sums, then all three. */
    tk_kernel *mm = NULL;
    if (!why && (tk_kernel_matmul(&mm) || tk_kernel_set(mm, TK_KERNEL_THREADS, 3) ||
                 tk_audit_create(&a, mm) || tk_audit_set_candidate(a, matmul_of, NULL) ||
                 tk_audit_add_reduction_case(a, TK_DTYPE_BF16, TK_DTYPE_F32, 64, 96, 40, orig) ||
                 tk_audit_run(a)))
        why = "a matmul audit on three threads";
    tk_audit_destroy(a);
    tk_kernel_destroy(mm);
    free(ox);
    free(oy);
    tk_tiling_destroy(t);
    for (int i = 0; i < 2; i++)
        tk_kernel_destroy(k[i]);
    for (int i = 0; i < 4; i++)
        tk_matrix_destroy(m[i]);
    return why;
}

/* One thread's work; the failure it returns names what went wrong. */
static const char *work(int id)
{
    static const int tails[3] = {TK_TAIL_MASK, TK_TAIL_PAD, TK_TAIL_SHIFT_INWARDS};
    char path[512], want[64];
    tk_matrix *out = NULL, *ref = NULL;
    tk_tiling *t = NULL;
    tk_device *dev = NULL, *host_dev = NULL;
    tk_pipeline *p = NULL;
    tk_audit *a = NULL;
    tk_compare *c = NULL;
    tk_bench *b = NULL;
    const char *why = NULL;
    if (tk_matrix_create(&out, TK_DTYPE_F32, ROWS, COLS) ||
        tk_matrix_create(&ref, TK_DTYPE_F32, ROWS, COLS) ||
        tk_kernel_run(shared_kernel, shared_tiling, (const tk_matrix *const *)shared_in, ref))
        why = "setup";
    for (int i = 0; !why && i < 3; i++) {
        if (tk_tiling_create(&t, ROWS, COLS, 8, 128) || tk_tiling_set(t, TK_TILING_TAIL, tails[i]) ||
            tk_kernel_run(shared_kernel, t, (const tk_matrix *const *)shared_in, out) ||
            memcmp(tk_matrix_data(out), tk_matrix_data(ref), sizeof xs))
            why = "a kernel run under a tail";
        tk_tiling_destroy(t);
        t = NULL;
    }
    if (!why)
        why = threaded_runs();
    for (int i = 0; !why && i < 3; i++) {
        tk_matrix *w = NULL;
        if (tk_matrix_create(&w, TK_DTYPE_F32, WIDE, WIDE) ||
            tk_kernel_run(wide_kernel, wide_tiling, (const tk_matrix *const *)wide_in, w) ||
            memcmp(tk_matrix_data(w), tk_matrix_data(wide_ref), WIDE * WIDE * sizeof(float)))
            why = "a shared kernel's run on three threads beside the others";
        tk_matrix_destroy(w);
    }
    if (!why && (tk_tiling_create(&t, 48, 384, 8, 128) ||
                 tk_device_simulated(&dev, "TPU v5 lite") ||
                 tk_pipeline_create(&p, shared_kernel, t, dev)))
        why = "pipeline setup";
    if (!why) {
        tk_matrix *pin[2] = {NULL, NULL}, *pout = NULL;
        if (tk_matrix_create(&pin[0], TK_DTYPE_F32, 48, 384) ||
            tk_matrix_create(&pin[1], TK_DTYPE_F32, 48, 384) ||
            tk_matrix_create(&pout, TK_DTYPE_F32, 48, 384))
            why = "pipeline matrices";
        else {
            memset(tk_matrix_data(pin[0]), 0, 48 * 384 * 4);
            memset(tk_matrix_data(pin[1]), 0, 48 * 384 * 4);
            if (tk_pipeline_run(p, (const tk_matrix *const *)pin, pout))
                why = "a pipeline run";
            snprintf(path, sizeof path, "%s/trace-%d.json", dir, id);
            if (!why && tk_pipeline_write_trace(p, path))
                why = "a trace";
        }
        tk_matrix_destroy(pin[0]);
        tk_matrix_destroy(pin[1]);
        tk_matrix_destroy(pout);
    }
    const float *orig[2] = {xs, ys};
    if (!why && (tk_audit_create(&a, shared_kernel) ||
                 tk_audit_set_candidate(a, host_of, shared_kernel) ||
                 tk_audit_add_case(a, TK_DTYPE_BF16, ROWS, COLS, orig) || tk_audit_run(a)))
        why = "an audit";
    snprintf(path, sizeof path, "%s/audit-%d.json", dir, id);
    if (!why && tk_audit_write_report(a, path, TK_REPORT_JSON))
        why = "a report";
    if (!why && (tk_compare_create(&c, TK_DTYPE_F32) || tk_compare_run(c, out, ref)))
        why = "a compare";
    if (!why && (tk_device_host(&host_dev) || tk_bench_create(&b, host_dev) ||
                 tk_bench_set_boundary(b, "nothing") ||
                 tk_bench_add(b, "nothing", NULL, NULL, nothing, NULL, NULL) < 0 ||
                 tk_bench_set(b, TK_BENCH_REPEATS, 5) || tk_bench_run(b)))
        why = "a bench";
    /* A deliberate error whose message only this thread can have caused. */
    snprintf(want, sizeof want, "%lldx7", (long long)(-100 - id));
    tk_matrix *bad = NULL;
    if (!why && (tk_matrix_create(&bad, TK_DTYPE_F32, -100 - id, 7) != TK_ESHAPE ||
                 !strstr(tk_last_error_message(), want)))
        why = "its own error message";
    tk_bench_destroy(b);
    tk_device_destroy(host_dev);
    tk_compare_destroy(c);
    tk_audit_destroy(a);
    tk_pipeline_destroy(p);
    tk_device_destroy(dev);
    tk_tiling_destroy(t);
    tk_matrix_destroy(out);
    tk_matrix_destroy(ref);
    return why;
}

static void *thread(void *arg)
{
    int id = (int)(intptr_t)arg;
    /* Every thread races to the first tk_build_info and the first dispatch. */
    if (strncmp(tk_build_info(), "version=", 8) != 0) {
        fprintf(stderr, "tsan: thread %d: tk_build_info gave \"%s\"\n", id, tk_build_info());
        return (void *)1;
    }
    for (int round = 0; round < 3; round++) {
        const char *why = work(id);
        if (why) {
            fprintf(stderr, "tsan: thread %d failed %s: %s\n", id, why, tk_last_error_message());
            return (void *)1;
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        dir = argv[1];
    for (int i = 0; i < ROWS * COLS; i++) {
        xs[i] = (float)(i % 13) * 0.25f - 1.5f;
        ys[i] = (float)(i % 7) * 0.5f;
    }
    if (tk_kernel_axpy(&shared_kernel, 2.0f) ||
        tk_tiling_create(&shared_tiling, ROWS, COLS, 8, 128) ||
        tk_matrix_wrap(&shared_in[0], TK_DTYPE_F32, ROWS, COLS, COLS, xs) ||
        tk_matrix_wrap(&shared_in[1], TK_DTYPE_F32, ROWS, COLS, COLS, ys) ||
        tk_kernel_axpy(&wide_kernel, 0.75f) || tk_kernel_set(wide_kernel, TK_KERNEL_THREADS, 3) ||
        tk_tiling_create(&wide_tiling, WIDE, WIDE, 8, 128) ||
        tk_matrix_create(&wide_in[0], TK_DTYPE_F32, WIDE, WIDE) ||
        tk_matrix_create(&wide_in[1], TK_DTYPE_F32, WIDE, WIDE) ||
        tk_matrix_create(&wide_ref, TK_DTYPE_F32, WIDE, WIDE)) {
        fprintf(stderr, "tsan: setup: %s\n", tk_last_error_message());
        return 1;
    }
    for (int i = 0; i < WIDE * WIDE; i++) {
        ((float *)tk_matrix_data(wide_in[0]))[i] = (float)(i % 11) * 0.125f - 0.5f;
        ((float *)tk_matrix_data(wide_in[1]))[i] = (float)(i % 5) * 0.375f;
    }
    tk_kernel *one;   /* the reference: one thread */
    if (tk_kernel_axpy(&one, 0.75f) ||
        tk_kernel_run(one, wide_tiling, (const tk_matrix *const *)wide_in, wide_ref)) {
        fprintf(stderr, "tsan: setup: %s\n", tk_last_error_message());
        return 1;
    }
    tk_kernel_destroy(one);
    pthread_t t[THREADS];
    int failed = 0;
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, thread, (void *)(intptr_t)i))
            return 1;
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        failed += r != NULL;
    }
    tk_matrix_destroy(shared_in[0]);
    tk_matrix_destroy(shared_in[1]);
    tk_tiling_destroy(shared_tiling);
    tk_kernel_destroy(shared_kernel);
    tk_kernel_destroy(wide_kernel);
    tk_tiling_destroy(wide_tiling);
    for (int i = 0; i < 2; i++)
        tk_matrix_destroy(wide_in[i]);
    tk_matrix_destroy(wide_ref);
    printf("tsan: %d threads x 3 rounds: %s\n", THREADS, failed ? "FAILED" : "every check passed");
    return failed != 0;
}
