/* audit.c - the main job (`make run`): the seed's whole correctness protocol
 * carried out with libtilekern on the seed's frozen data.
 *
 *   build/examples/audit [FIXTURE_DIR]      (default tests/fixtures)
 *
 * Its lines follow the seed's "Recorded reference execution" block one for
 * one, so the two can be compared; every figure is computed here by the
 * library.  Reports go to report/ under the current directory.  The exit
 * status is 0 only when every check passes. */
#include <tilekern.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *fixtures = "tests/fixtures";
static int failures;

static void fail(const char *what, int rc)
{
    fprintf(stderr, "FAILED: %s: %s (%s)\n", what, tk_status_name(rc),
            tk_last_error_message());
    failures++;
}

/* One float32 fixture, copied out as contiguous f32. */
static float *load(const char *name, int64_t *rows, int64_t *cols)
{
    char path[1024];
    tk_matrix *m;
    snprintf(path, sizeof path, "%s/%s", fixtures, name);
    int rc = tk_matrix_load_npy(&m, path);
    if (rc) {
        fprintf(stderr, "cannot load %s: %s\n", path, tk_last_error_message());
        exit(2);
    }
    *rows = tk_matrix_rows(m);
    *cols = tk_matrix_cols(m);
    float *x = malloc((size_t)(*rows * *cols) * sizeof *x);
    if (!x || (rc = tk_matrix_to_f32(m, x, *cols))) {
        fprintf(stderr, "cannot read %s: %s\n", path,
                x ? tk_last_error_message() : "out of memory");
        exit(2);
    }
    tk_matrix_destroy(m);
    return x;
}

/* The candidate, as in the seed: the kernel through a double-buffered
 * pipeline on the simulated "TPU v5 lite", (8, 128) blocks, hazards checked
 * (a hazard fails the run); the schedule executes on the host. */
struct candidate {
    const tk_kernel *k;
    const tk_device *d;
    int64_t block_rows, block_cols, buffers;
};

static int pipeline_candidate(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    const struct candidate *c = user;
    tk_tiling *t = NULL;
    tk_pipeline *p = NULL;
    int rc = tk_tiling_create(&t, tk_matrix_rows(out), tk_matrix_cols(out), c->block_rows,
                              c->block_cols);
    if (!rc && !(rc = tk_pipeline_create(&p, c->k, t, c->d)) &&
        !(rc = tk_pipeline_set(p, TK_PIPE_INPUT_BUFFERS, c->buffers)))
        rc = tk_pipeline_run(p, in, out);
    tk_pipeline_destroy(p);
    tk_tiling_destroy(t);
    return rc;
}

static double result(const tk_audit *a, int64_t i, int metric)
{
    double v = NAN;
    int rc = tk_audit_result(a, i, metric, &v);
    if (rc)
        fail("tk_audit_result", rc);
    return v;
}

/* "[[a, b], [c, d]]" of one metric, float32 then bfloat16 per shape. */
static void print_pairs(const char *label, const tk_audit *a, int metric)
{
    char num[40];
    printf("%s: [", label);
    for (int64_t i = 0; i < tk_audit_case_count(a); i++) {
        tk_format_number(result(a, i, metric), num, sizeof num);
        printf("%s%s%s", i % 2 ? ", " : i ? ", [" : "[", num, i % 2 ? "]" : "");
    }
    printf("]\n");
}

/* Step 2: the shape/dtype matrix against both references. */
static tk_audit *shape_dtype_matrix(const struct candidate *h)
{
    static const char *const shapes[] = {"1x1", "8x128", "9x129", "17x257"};
    tk_audit *a;
    int rc = tk_audit_create(&a, h->k);
    if (rc) {
        fail("tk_audit_create", rc);
        return NULL;
    }
    tk_audit_set_candidate(a, pipeline_candidate, (void *)h);
    for (int s = 0; s < 4; s++) {
        char name[64];
        int64_t rows, cols;
        snprintf(name, sizeof name, "seed42_x_%s.npy", shapes[s]);
        float *x = load(name, &rows, &cols);
        snprintf(name, sizeof name, "seed42_y_%s.npy", shapes[s]);
        float *y = load(name, &rows, &cols);
        const float *orig[2] = {x, y};
        if ((rc = tk_audit_add_case(a, TK_DTYPE_F32, rows, cols, orig)) ||
            (rc = tk_audit_add_case(a, TK_DTYPE_BF16, rows, cols, orig)))
            fail("tk_audit_add_case", rc);
        free(x);
        free(y);
    }
    rc = tk_audit_run(a);
    if (rc && rc != TK_EMISMATCH) {
        fail("tk_audit_run", rc);
        tk_audit_destroy(a);
        return NULL;
    }
    if (rc)
        fail("implementation check against the represented-input oracle", rc);
    print_pairs("Kernel errors versus represented-input oracle", a,
                TK_AUDIT_IMPL_MAX_ABS);
    print_pairs("Gaps versus original float32 data", a, TK_AUDIT_GAP_MAX_ABS);
    /* Step 3: a benchmark of the simulated target must be refused. */
    tk_bench *b = NULL;
    rc = tk_bench_create(&b, h->d);
    if (rc != TK_ENOTARGET) {
        fail("a simulated target was accepted for timing", rc);
        tk_bench_destroy(b);
    } else {
        const char *why = strchr(tk_last_error_message(), ':');
        printf("Expected benchmark refusal: %s\n", why ? why + 2 : tk_last_error_message());
    }
    printf("CPU correctness audit complete; no TPU latency or speedup measured\n");
    return a;
}

/* The joint row permutation experiment on the next draws of the generator. */
static void permutation(const struct candidate *h)
{
    static const int64_t order[9] = {8, 0, 7, 1, 6, 2, 5, 3, 4};
    int64_t rows, cols;
    float *x = load("seed42_perm_a_9x129.npy", &rows, &cols);
    float *y = load("seed42_perm_b_9x129.npy", &rows, &cols);
    const float *orig[2] = {x, y};
    tk_audit *a = NULL;
    int rc;
    if ((rc = tk_audit_create(&a, h->k)) ||
        (rc = tk_audit_set_candidate(a, pipeline_candidate, (void *)h)) ||
        (rc = tk_audit_add_case(a, TK_DTYPE_F32, rows, cols, orig)) ||
        (rc = tk_audit_check_permutation(a, 0, order)))
        fail("joint row permutation", rc);
    else
        printf("Joint row permutation preserves output identity\n");
    tk_audit_destroy(a);
    free(x);
    free(y);
}

static void counterexample(void)
{
    float early, late;
    char e[40], l[40];
    int rc = tk_rounding_counterexample(TK_DTYPE_BF16, 1.00390625f, 0.00390625f,
                                        &early, &late);
    if (rc || early == late) {
        fail("early versus final-only rounding must differ", rc);
        return;
    }
    tk_format_number(early, e, sizeof e);
    tk_format_number(late, l, sizeof l);
    printf("Early/final-only rounding: %s %s\n", e, l);
}

/* The (15, 255) sweep: two block shapes, two buffer counts, one expected. */
static void sweep(const struct candidate *c)
{
    static const int64_t blocks[2][2] = {{8, 128}, {16, 256}};
    int64_t rows, cols;
    float *x = load("sweep_a_15x255.npy", &rows, &cols);
    float *y = load("sweep_b_15x255.npy", &rows, &cols);
    float *want = malloc((size_t)(rows * cols) * sizeof *want);
    tk_matrix *in[2] = {NULL, NULL}, *expected = NULL, *out = NULL;
    tk_compare *cmp = NULL;
    int rc = want ? TK_OK : TK_ENOMEM;
    for (int64_t i = 0; want && i < rows * cols; i++)
        want[i] = 2.0f * x[i] + y[i];
    if (rc || (rc = tk_matrix_from_f32(&in[0], TK_DTYPE_F32, rows, cols, x, cols)) ||
        (rc = tk_matrix_from_f32(&in[1], TK_DTYPE_F32, rows, cols, y, cols)) ||
        (rc = tk_matrix_from_f32(&expected, TK_DTYPE_F32, rows, cols, want, cols)) ||
        (rc = tk_compare_create(&cmp, TK_DTYPE_F32)) ||
        (rc = tk_compare_set_tolerance(cmp, 1e-6, 1e-6))) {
        fail("sweep setup", rc);
        goto done;
    }
    for (int b = 0; b < 2; b++)
        for (int buffers = 2; buffers <= 3; buffers++) {
            tk_tiling *t = NULL;
            tk_pipeline *p = NULL;
            double padded = 0;
            if ((rc = tk_matrix_create(&out, TK_DTYPE_F32, rows, cols)) ||
                (rc = tk_tiling_create(&t, rows, cols, blocks[b][0], blocks[b][1])) ||
                (rc = tk_pipeline_create(&p, c->k, t, c->d)) ||
                (rc = tk_pipeline_set(p, TK_PIPE_INPUT_BUFFERS, buffers)) ||
                (rc = tk_pipeline_run(p, (const tk_matrix *const *)in, out)) ||
                (rc = tk_compare_run(cmp, out, expected)) ||
                (rc = tk_pipeline_stat(p, TK_STAT_PADDED_ELEMENTS, &padded)))
                fail("(15, 255) sweep", rc);
            else
                printf("Configuration, padded elements: (%lld, %lld) %d %.0f\n",
                       (long long)blocks[b][0], (long long)blocks[b][1], buffers, padded);
            tk_pipeline_destroy(p);
            tk_tiling_destroy(t);
            tk_matrix_destroy(out);
            out = NULL;
        }
done:
    tk_compare_destroy(cmp);
    tk_matrix_destroy(expected);
    tk_matrix_destroy(in[0]);
    tk_matrix_destroy(in[1]);
    free(want);
    free(x);
    free(y);
}

/* f32 with bf16, and int32 with int32, must both be refused as TK_EDTYPE. */
static void rejections(const tk_kernel *k)
{
    static const int pairs[2][3] = {{TK_DTYPE_F32, TK_DTYPE_BF16, TK_DTYPE_F32},
                                    {TK_DTYPE_I32, TK_DTYPE_I32, TK_DTYPE_I32}};
    int rejected = 0;
    for (int p = 0; p < 2; p++) {
        tk_matrix *m[3] = {NULL, NULL, NULL};
        tk_tiling *t = NULL;
        int rc = TK_OK;
        for (int i = 0; i < 3 && !rc; i++)
            rc = tk_matrix_create(&m[i], pairs[p][i], 8, 128);
        if (!rc)
            rc = tk_tiling_create(&t, 8, 128, 8, 128);
        if (!rc && tk_kernel_run(k, t, (const tk_matrix *const *)m, m[2]) == TK_EDTYPE)
            rejected++;
        else
            fprintf(stderr, "FAILED: %s + %s was not rejected with TK_EDTYPE\n",
                    tk_dtype_name(pairs[p][0]), tk_dtype_name(pairs[p][1]));
        tk_tiling_destroy(t);
        for (int i = 0; i < 3; i++)
            tk_matrix_destroy(m[i]);
    }
    if (rejected == 2)
        printf("Mixed and integer dtypes rejected\n");
    else
        failures++;
}

static void amdahl(void)
{
    char s[40], l[40];
    double speedup = tk_amdahl(0.3, 2.0), limit = tk_amdahl(0.3, INFINITY);
    if (!(speedup > 1.0 && limit > speedup)) {
        fprintf(stderr, "FAILED: Amdahl bound %g, limit %g\n", speedup, limit);
        failures++;
        return;
    }
    tk_format_number(speedup, s, sizeof s);
    tk_format_number(limit, l, sizeof l);
    printf("Modeled twofold-local speedup and zero-cost limit: %s %s\n", s, l);
}

/* The text, JSON and SVG reports of the shape/dtype matrix, in report/. */
static void write_reports(const tk_audit *a)
{
    static const char *const files[] = {"report/audit.txt", "report/audit.json",
                                        "report/audit.svg"};
    if (mkdir("report", 0777) && errno != EEXIST) {
        fprintf(stderr, "FAILED: mkdir report: %s\n", strerror(errno));
        failures++;
    }
    int rc, written = 0;
    for (int f = 0; f < 3; f++)
        if ((rc = tk_audit_write_report(a, files[f], TK_REPORT_TEXT + f)))
            fail(files[f], rc);
        else
            written++;
    if (written == 3)
        printf("Reports written: %s, %s, %s\n", files[0], files[1], files[2]);
}

int main(int argc, char **argv)
{
    if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
        fprintf(stderr, "usage: %s [FIXTURE_DIR]\n", argv[0]);
        return 2;
    }
    if (argc == 2)
        fixtures = argv[1];
    tk_kernel *k;
    int rc = tk_kernel_axpy(&k, 2.0f);
    if (rc) {
        fail("tk_kernel_axpy", rc);
        return 1;
    }
    tk_device *d;
    if ((rc = tk_device_simulated(&d, "TPU v5 lite"))) {
        fail("tk_device_simulated", rc);
        tk_kernel_destroy(k);
        return 1;
    }
    struct candidate h = {k, d, 8, 128, 2};
    printf("Candidate: tk_pipeline on the simulated \"TPU v5 lite\", blocks (8, 128), "
           "2 input buffers, hazards checked; the schedule executes on the host\n");
    tk_audit *matrix = shape_dtype_matrix(&h);
    permutation(&h);
    counterexample();
    sweep(&h);
    rejections(k);
    amdahl();
    if (matrix)
        write_reports(matrix);
    tk_audit_destroy(matrix);
    tk_device_destroy(d);
    tk_kernel_destroy(k);
    if (failures) {
        printf("FAIL: kernels-04 (%d checks failed)\n", failures);
        return 1;
    }
    printf("PASS: kernels-04\n");
    return 0;
}
