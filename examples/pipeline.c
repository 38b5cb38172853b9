/* pipeline.c - the seed's configuration sweep through tk_pipeline: a 15x255
 * axpy on the simulated "TPU v5 lite" with two block shapes and two buffer
 * counts, each output checked bit for bit against the host executor, the
 * modeled cost printed (modeled, not measured), then a deliberate fault
 * caught by the hazard check.  `pipeline TRACE.json` also writes the last
 * sweep entry's Chrome trace. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tilekern.h>

#define ROWS 15
#define COLS 255

static int fail(const char *what, int rc)
{
    fprintf(stderr, "pipeline: %s: %s: %s\n", what, tk_status_name(rc), tk_last_error_message());
    return 1;
}

int main(int argc, char **argv)
{
    static float a[ROWS * COLS], b[ROWS * COLS];
    unsigned seed = 8;
    for (int i = 0; i < ROWS * COLS; i++) {   /* any fixed data will do */
        seed = seed * 1103515245u + 12345u;
        a[i] = (float)(seed >> 8) / 16777216.0f * 4.0f - 2.0f;
        b[i] = (float)(i % 17) * 0.25f - 2.0f;
    }
    tk_matrix *x, *y, *out, *host;
    tk_kernel *k;
    tk_device *d;
    int rc;
    if ((rc = tk_matrix_from_f32(&x, TK_DTYPE_F32, ROWS, COLS, a, COLS)) ||
        (rc = tk_matrix_from_f32(&y, TK_DTYPE_F32, ROWS, COLS, b, COLS)) ||
        (rc = tk_matrix_create(&out, TK_DTYPE_F32, ROWS, COLS)) ||
        (rc = tk_matrix_create(&host, TK_DTYPE_F32, ROWS, COLS)) ||
        (rc = tk_kernel_axpy(&k, 2.0f)) || (rc = tk_device_simulated(&d, "TPU v5 lite")))
        return fail("setup", rc);
    const tk_matrix *in[] = {x, y};
    size_t bytes = (size_t)ROWS * COLS * sizeof(float);

    printf("%-10s %-8s %-16s %-18s %-10s %s\n", "block", "buffers", "padded elements",
           "modeled time (ns)", "overlap", "same as host");
    static const int64_t blocks[2][2] = {{8, 128}, {16, 256}};
    tk_pipeline *p = NULL;
    tk_tiling *t = NULL;
    for (int i = 0; i < 2; i++) {
        tk_pipeline_destroy(p);
        tk_tiling_destroy(t);
        if ((rc = tk_tiling_create(&t, ROWS, COLS, blocks[i][0], blocks[i][1])) ||
            (rc = tk_kernel_run(k, t, in, host)) || (rc = tk_pipeline_create(&p, k, t, d)))
            return fail("tiling", rc);
        for (int64_t buffers = 2; buffers <= 3; buffers++) {
            double padded, modeled, overlap;
            if ((rc = tk_pipeline_set(p, TK_PIPE_INPUT_BUFFERS, buffers)) ||
                (rc = tk_pipeline_run(p, in, out)) ||
                (rc = tk_pipeline_stat(p, TK_STAT_PADDED_ELEMENTS, &padded)) ||
                (rc = tk_pipeline_stat(p, TK_STAT_MODELED_NS, &modeled)) ||
                (rc = tk_pipeline_stat(p, TK_STAT_OVERLAP, &overlap)))
                return fail("run", rc);
            int same = memcmp(tk_matrix_data(out), tk_matrix_data(host), bytes) == 0;
            char block[16];
            snprintf(block, sizeof block, "(%lld,%lld)", (long long)blocks[i][0],
                     (long long)blocks[i][1]);
            printf("%-10s %-8lld %-16.0f %-18.1f %-10.3f %s\n", block, (long long)buffers,
                   padded, modeled, overlap, same ? "yes" : "NO");
            if (!same)
                return 1;
        }
    }
    if (argc > 1 && (rc = tk_pipeline_write_trace(p, argv[1])))
        return fail("trace", rc);

    /* The same schedule with a wait left out is refused, with a witness. */
    tk_pipeline_set(p, TK_PIPE_FAULT, TK_FAULT_SKIP_INPUT_WAIT);
    rc = tk_pipeline_run(p, in, out);
    int64_t step, slot;
    int operand, kind;
    if (rc != TK_ERACE || tk_pipeline_race(p, 0, &step, &slot, &operand, &kind))
        return fail("the fault was not caught", rc);
    printf("fault caught: %s\nfirst witness: %s at step %lld, slot %lld, input %d\n",
           tk_last_error_message(), tk_hazard_name(kind), (long long)step, (long long)slot,
           operand);
    tk_pipeline_destroy(p);
    tk_tiling_destroy(t);
    tk_device_destroy(d);
    tk_kernel_destroy(k);
    tk_matrix_destroy(x);
    tk_matrix_destroy(y);
    tk_matrix_destroy(out);
    tk_matrix_destroy(host);
    return 0;
}
