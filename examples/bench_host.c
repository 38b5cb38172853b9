/* bench_host.c - the benchmark boundary on the one real target this machine
 * has, the host CPU: the complete tk_kernel_run wrapper (logical inputs in,
 * logical output out) against a plain fused loop, compiled, warmed up and
 * sampled in turn, then a receipt.  First it shows that a simulated TPU is
 * refused: a speed claim needs a real target.  `bench_host RECEIPT.json`
 * keeps the receipt. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tilekern.h>

#define ROWS 1024
#define COLS 1024

struct work {
    tk_kernel *k;
    tk_tiling *t;
    const tk_matrix *in[2];
    tk_matrix *out;
};

static int wrapper(void *user)
{
    struct work *w = user;
    return tk_kernel_run(w->k, w->t, w->in, w->out);
}

static int fused(void *user)
{
    struct work *w = user;
    const float *x = tk_matrix_data(w->in[0]), *y = tk_matrix_data(w->in[1]);
    float *o = tk_matrix_data(w->out);
    for (size_t i = 0; i < (size_t)ROWS * COLS; i++)
        o[i] = 2.0f * x[i] + y[i];
    return 0;
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "bench_host: %s: %s: %s\n", what, tk_status_name(rc), tk_last_error_message());
    return 1;
}

int main(int argc, char **argv)
{
    tk_device *tpu, *host;
    tk_bench *b;
    int rc;
    if ((rc = tk_device_simulated(&tpu, "TPU v5 lite")))
        return fail("profile", rc);
    if (tk_bench_create(&b, tpu) != TK_ENOTARGET)
        return fail("a simulated target was accepted", TK_OK);
    printf("expected refusal: %s\n", tk_last_error_message());
    tk_device_destroy(tpu);

    static float a[ROWS * COLS], c[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++) {
        a[i] = (float)(i % 1013) * 0.01f - 5.0f;
        c[i] = (float)(i % 997) * -0.02f + 9.0f;
    }
    tk_matrix *x, *y, *out;
    struct work w;
    if ((rc = tk_matrix_from_f32(&x, TK_DTYPE_F32, ROWS, COLS, a, COLS)) ||
        (rc = tk_matrix_from_f32(&y, TK_DTYPE_F32, ROWS, COLS, c, COLS)) ||
        (rc = tk_matrix_create(&out, TK_DTYPE_F32, ROWS, COLS)) ||
        (rc = tk_kernel_axpy(&w.k, 2.0f)) ||
        (rc = tk_tiling_create(&w.t, ROWS, COLS, 8, 128)) || (rc = tk_device_host(&host)) ||
        (rc = tk_bench_create(&b, host)))
        return fail("setup", rc);
    w.in[0] = x;
    w.in[1] = y;
    w.out = out;
    if ((rc = tk_bench_set_boundary(b, "inputs already in host memory; the complete "
                                       "tk_kernel_run wrapper, logical shape in and out; "
                                       "warm runs on the host CPU")) ||
        (rc = tk_bench_set(b, TK_BENCH_REPEATS, 21)))
        return fail("settings", rc);
    if ((rc = tk_bench_add(b, "fused loop", host, NULL, fused, NULL, &w)) < 0 ||
        (rc = tk_bench_add(b, "tk_kernel_run", host, NULL, wrapper, NULL, &w)) < 0)
        return fail("add", rc);
    if ((rc = tk_bench_run(b)))
        return fail("run", rc);
    printf("%-16s %12s %12s %10s   (measured on %s)\n", "entry", "median ms", "p90 ms",
           "speedup", tk_device_kind(host));
    for (int e = 0; e < 2; e++) {
        double med, p90, speedup;
        if ((rc = tk_bench_result(b, e, TK_BENCH_MEDIAN_MS, &med)) ||
            (rc = tk_bench_result(b, e, TK_BENCH_P90_MS, &p90)) ||
            (rc = tk_bench_result(b, e, TK_BENCH_SPEEDUP, &speedup)))
            return fail("result", rc);
        printf("%-16s %12.4f %12.4f %10.2f\n", e ? "tk_kernel_run" : "fused loop", med, p90,
               speedup);
    }
    if (argc > 1 && (rc = tk_bench_write_receipt(b, argv[1])))
        return fail("receipt", rc);
    tk_bench_destroy(b);
    tk_device_destroy(host);
    tk_tiling_destroy(w.t);
    tk_kernel_destroy(w.k);
    tk_matrix_destroy(x);
    tk_matrix_destroy(y);
    tk_matrix_destroy(out);
    return 0;
}
