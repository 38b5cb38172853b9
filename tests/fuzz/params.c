/* params.c - libFuzzer harness for tiling and the host kernel: fuzzed
 * shapes, blocks, tails, dtypes, alphas, body kinds and row gaps.  Every call returns a
 * documented status with *out NULL on failure; a failed run leaves the
 * output (row gaps included) byte for byte; a successful one equals a
 * scalar reference of the contract and touches no gap; inputs never
 * change.  Then the same through the pipeline (run_pipeline), and a
 * comparison of the output with an input (run_compare). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <tilekern.h>

typedef struct { const unsigned char *p; size_t n; } bytes;

static int take(bytes *b, int lo, int hi)  /* an int in [lo, hi] */
{
    int v = b->n ? b->p[0] : 0;
    if (b->n) {
        b->p++;
        b->n--;
    }
    return lo + v % (hi - lo + 1);
}

static void check(int ok)
{
    if (!ok)
        abort();
}

/* v represented in a float dtype and promoted back. */
static float represent(int dtype, float v)
{
    unsigned char code[4];
    float back;
    check(tk_dtype_from_f32_n(dtype, code, &v, 1) == TK_OK);
    check(tk_dtype_to_f32_n(dtype, &back, code, 1) == TK_OK);
    return back;
}

static float ref(int dtype, float alpha, float x, float y)
{
    return represent(dtype, alpha * x + y);  /* separately rounded, cast once */
}

/* A successful run's output: each element the contract's result of the
 * stored inputs, every row gap as it was. */
static void check_result(const int *dt, unsigned char *const *mem, const unsigned char *before,
                         int64_t rows, int64_t cols, int64_t stride, float alpha)
{
    int64_t es = tk_dtype_size(dt[2]);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < stride; c++) {
            size_t at = (size_t)((r * stride + c) * es);
            if (c >= cols) {  /* a gap: untouched */
                check(memcmp(mem[2] + at, before + at, (size_t)es) == 0);
                continue;
            }
            float x, y, got;   /* one dtype throughout, or the run failed */
            check(tk_dtype_to_f32_n(dt[0], &x, mem[0] + at, 1) == TK_OK);
            check(tk_dtype_to_f32_n(dt[1], &y, mem[1] + at, 1) == TK_OK);
            check(tk_dtype_to_f32_n(dt[2], &got, mem[2] + at, 1) == TK_OK);
            float want = ref(dt[2], alpha, x, y);
            check(memcmp(&got, &want, 4) == 0 || (isnan(got) && isnan(want)));
        }
}

/* The same kernel and tiling through the pipeline on the host device, with
 * fuzzed slots, pipelining, hazard detection and fault.  A refused run
 * leaves the output byte for byte; a checked, accepted one computes the
 * contract; an unchecked faulty one still writes nothing outside the
 * matrix.  Inputs never change. */
static void run_pipeline(bytes *b, tk_kernel *k, tk_tiling *t, tk_matrix *const *m,
                         unsigned char *const *mem, unsigned char *const *before,
                         const size_t *bytes_of, int64_t rows, int64_t cols, int64_t stride,
                         float alpha)
{
    int64_t in_slots = take(b, 0, 4), out_slots = take(b, 0, 3);
    int sync = take(b, 0, 1), detect = take(b, 0, 1), fault = take(b, 0, 5);
    tk_device *dev = (tk_device *)1;
    int rc = tk_device_host(&dev);
    check(rc == TK_OK ? dev != NULL : dev == NULL && rc == TK_ENOMEM);
    if (!dev)
        return;
    tk_pipeline *p = (tk_pipeline *)1;
    rc = tk_pipeline_create(&p, k, t, dev);
    check(rc == TK_OK ? p != NULL : p == NULL && rc == TK_ENOMEM);
    if (p) {
        int set[5][2] = {{TK_PIPE_INPUT_BUFFERS, (int)in_slots},
                         {TK_PIPE_OUTPUT_BUFFERS, (int)out_slots},
                         {TK_PIPE_NO_PIPELINING, sync}, {TK_PIPE_DETECT_RACES, detect},
                         {TK_PIPE_FAULT, fault}};
        for (int i = 0; i < 5; i++) {
            rc = tk_pipeline_set(p, set[i][0], set[i][1]);
            check(rc == TK_OK || rc == TK_ERANGE);
        }
        int64_t checked = 1;
        check(tk_pipeline_get(p, TK_PIPE_DETECT_RACES, &checked) == TK_OK);
        memcpy(mem[2], before[2], bytes_of[2]);
        rc = tk_pipeline_run(p, (const tk_matrix *const *)m, m[2]);
        check(memcmp(mem[0], before[0], bytes_of[0]) == 0);
        check(memcmp(mem[1], before[1], bytes_of[1]) == 0);
        if (rc != TK_OK) {
            /* TK_ESTATE: the host's on-chip figure (its L2) is unknown here */
            check(rc == TK_EDTYPE || rc == TK_ELAYOUT || rc == TK_ENOMEM ||
                  rc == TK_EOVERFLOW || rc == TK_ERACE || rc == TK_ECAPACITY ||
                  rc == TK_ESTATE);
            check(memcmp(mem[2], before[2], bytes_of[2]) == 0);
        } else if (checked) {
            int dt[3] = {tk_matrix_dtype(m[0]), tk_matrix_dtype(m[1]), tk_matrix_dtype(m[2])};
            check_result(dt, mem, before[2], rows, cols, stride, alpha);
        } else {
            int64_t es = tk_dtype_size(tk_matrix_dtype(m[2]));
            for (int64_t r = 0; r < rows; r++)   /* the row gaps */
                check(memcmp(mem[2] + (r * stride + cols) * es,
                             before[2] + (r * stride + cols) * es,
                             (size_t)((stride - cols) * es)) == 0);
        }
    }
    tk_pipeline_destroy(p);
    tk_device_destroy(dev);
}

/* A comparison of the output with input 0 under fuzzed dtype, ULP limit,
 * NaN policy and tolerances: a documented status, *out NULL when creation
 * fails, results readable after a run, both matrices unchanged. */
static void run_compare(bytes *b, tk_matrix *const *m, unsigned char *const *mem,
                        const size_t *bytes_of)
{
    int dtype = take(b, 0, 7), ulp = take(b, -2, 3), nan = take(b, 0, 4);
    static const double tols[5] = {0.0, 1e-5, 0.5, -1.0, 1e300};
    double atol = tols[take(b, 0, 4)], rtol = tols[take(b, 0, 4)];
    tk_compare *c = (tk_compare *)1;
    int rc = tk_compare_create(&c, dtype);
    if (rc) {
        check(c == NULL && rc == TK_EDTYPE);
        return;
    }
    rc = tk_compare_set(c, TK_COMPARE_MAX_ULP, ulp);
    check(rc == TK_OK || rc == TK_ERANGE);
    rc = tk_compare_set(c, TK_COMPARE_NAN_POLICY, nan);
    check(rc == TK_OK || rc == TK_ERANGE);
    rc = tk_compare_set_tolerance(c, atol, rtol);
    check(rc == TK_OK || rc == TK_ERANGE);
    unsigned char *keep[2];
    for (int i = 0; i < 2; i++) {
        keep[i] = malloc(bytes_of[i ? 0 : 2]);
        check(keep[i] != NULL);
        memcpy(keep[i], mem[i ? 0 : 2], bytes_of[i ? 0 : 2]);
    }
    rc = tk_compare_run(c, m[2], m[0]);
    check(rc == TK_OK || rc == TK_EMISMATCH || rc == TK_EDTYPE || rc == TK_ENOMEM);
    double v;
    int got = tk_compare_result(c, TK_COMPARE_ELEMENTS, &v);
    check(rc == TK_OK || rc == TK_EMISMATCH ? got == TK_OK : got == TK_ESTATE);
    char text[4096];
    got = tk_compare_format(c, text, sizeof text);
    check(got == TK_OK || got == TK_ERANGE || got == TK_ESTATE);
    for (int i = 0; i < 2; i++) {
        check(memcmp(keep[i], mem[i ? 0 : 2], bytes_of[i ? 0 : 2]) == 0);
        free(keep[i]);
    }
    tk_compare_destroy(c);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    bytes b = {data, size};
    int64_t rows = take(&b, -1, 40), cols = take(&b, -1, 40);
    int64_t br = take(&b, -1, 48), bc = take(&b, -1, 48);
    int tail = take(&b, 0, 4), gap = take(&b, 0, 3);
    int dt[3] = {take(&b, 0, 7), take(&b, 0, 7), take(&b, 0, 7)};  /* 0 and 7: unknown */
    static const float alphas[4] = {2.0f, 3.0f, -0.5f, 1e-30f};
    float alpha = alphas[take(&b, 0, 3)];
    int body = take(&b, 0, 2);   /* 0: out of range (read last: older corpora keep meaning) */

    tk_tiling *t = (tk_tiling *)1;
    int rc = tk_tiling_create(&t, rows, cols, br, bc);
    if (rc) {
        check(t == NULL && (rc == TK_ESHAPE || rc == TK_EINVAL || rc == TK_EOVERFLOW));
        return 0;
    }
    rc = tk_tiling_set(t, TK_TILING_TAIL, tail);
    check(rc == TK_OK || rc == TK_ERANGE || rc == TK_ELAYOUT);
    if (rows < 1 || cols < 1)
        abort();  /* the tiling refused these above */
    tk_kernel *k;
    check(tk_kernel_axpy(&k, alpha) == TK_OK);
    rc = tk_kernel_set(k, TK_KERNEL_BODY, body ? body : 7);
    check(body ? rc == TK_OK : rc == TK_ERANGE);
    /* Three matrices with a row gap, over buffers whose gaps hold a pattern. */
    int64_t stride = cols + gap;
    unsigned char *mem[3];
    tk_matrix *m[3] = {NULL, NULL, NULL};
    size_t bytes_of[3];
    for (int i = 0; i < 3; i++) {
        int64_t es = tk_dtype_size(dt[i]) ? tk_dtype_size(dt[i]) : 4;
        bytes_of[i] = (size_t)(rows * stride * es);
        mem[i] = malloc(bytes_of[i]);
        for (size_t j = 0; j < bytes_of[i]; j++)
            mem[i][j] = (unsigned char)(j * 37 + i);
        if (i < 2 && dt[i] != TK_DTYPE_I32 && tk_dtype_size(dt[i]))  /* finite inputs */
            for (int64_t e = 0; e < rows * stride; e++) {
                float v = (float)((e * 7 + i * 3) % 17) * 0.25f - 2.0f;
                check(tk_dtype_from_f32_n(dt[i], mem[i] + e * es, &v, 1) == TK_OK);
            }
        m[i] = (tk_matrix *)1;
        rc = tk_matrix_wrap(&m[i], dt[i], rows, cols, stride, mem[i]);
        check(rc == TK_OK || (rc == TK_EDTYPE && m[i] == NULL));
    }
    unsigned char *before[3];
    for (int i = 0; i < 3; i++) {
        before[i] = malloc(bytes_of[i]);
        memcpy(before[i], mem[i], bytes_of[i]);
    }
    if (m[0] && m[1] && m[2]) {
        rc = tk_kernel_run(k, t, (const tk_matrix *const *)m, m[2]);
        check(memcmp(mem[0], before[0], bytes_of[0]) == 0);
        check(memcmp(mem[1], before[1], bytes_of[1]) == 0);
        if (rc != TK_OK) {
            check(rc == TK_EDTYPE || rc == TK_ELAYOUT || rc == TK_ENOMEM || rc == TK_EOVERFLOW);
            check(memcmp(mem[2], before[2], bytes_of[2]) == 0);
        } else {
            check_result(dt, mem, before[2], rows, cols, stride, alpha);
        }
        run_pipeline(&b, k, t, m, mem, before, bytes_of, rows, cols, stride, alpha);
        run_compare(&b, m, mem, bytes_of);
    }
    for (int i = 0; i < 3; i++) {
        tk_matrix_destroy(m[i]);
        free(mem[i]);
        free(before[i]);
    }
    tk_kernel_destroy(k);
    tk_tiling_destroy(t);
    return 0;
}
