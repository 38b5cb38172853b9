/* npy_audit.c - audit a candidate output produced elsewhere (a JAX or CUDA
 * kernel, say) against the axpy contract, from .npy files.
 *
 *   npy_audit [--alpha A] [--dtype f32|bf16] [--report-dir DIR] X.npy Y.npy OUT.npy
 *   npy_audit --self-test
 *
 * X and Y are the original float32 inputs; OUT is the candidate's output,
 * float32 or bfloat16 ('<u2' bits or '<V2').  The output dtype defaults to
 * OUT's own; a float32 OUT audited as bf16 must hold bf16 values exactly.
 * Prints the two-reference report.  Exit status: 0 when the implementation
 * check passes, 1 when it fails, 2 for usage or file errors. */
#include <tilekern.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct opts {
    float alpha;
    int dtype;               /* 0: the candidate file's own */
    const char *report_dir;  /* NULL: print the text report only */
    const char *x, *y, *out;
};

static int usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--alpha A] [--dtype f32|bf16] [--report-dir DIR] "
            "X.npy Y.npy OUT.npy\n       %s --self-test\n"
            "Audits OUT against alpha*X + Y (alpha 2 by default): the represented-"
            "input oracle\n(implementation error) and the original float32 data "
            "(precision gap).\n", argv0, argv0);
    return 2;
}

static tk_matrix *load(const char *path, const char *what)
{
    tk_matrix *m;
    if (tk_matrix_load_npy(&m, path)) {
        fprintf(stderr, "npy_audit: %s %s: %s\n", what, path, tk_last_error_message());
        return NULL;
    }
    return m;
}

/* The candidate "runs" by copying the loaded output. */
static int copy_candidate(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    const tk_matrix *src = user;
    size_t es = (size_t)tk_dtype_size(tk_matrix_dtype(out));
    (void)in;
    for (int64_t r = 0; r < tk_matrix_rows(out); r++)
        memcpy((char *)tk_matrix_data(out) + (size_t)(r * tk_matrix_row_stride(out)) * es,
               (const char *)tk_matrix_data(src) +
                   (size_t)(r * tk_matrix_row_stride(src)) * es,
               (size_t)tk_matrix_cols(out) * es);
    return 0;
}

/* OUT in the audited dtype; a float32 file audited as bf16 must already
 * hold bf16 values, or it could not be that kernel's output. */
static tk_matrix *as_dtype(tk_matrix *m, int dtype, const char *path)
{
    int64_t rows = tk_matrix_rows(m), cols = tk_matrix_cols(m);
    if (tk_matrix_dtype(m) == dtype)
        return m;
    if (tk_matrix_dtype(m) != TK_DTYPE_F32) {
        fprintf(stderr, "npy_audit: %s holds %s values; --dtype %s needs float32 "
                "holding them or a %s file\n", path, tk_dtype_name(tk_matrix_dtype(m)),
                tk_dtype_name(dtype), tk_dtype_name(dtype));
        return NULL;
    }
    const float *v = tk_matrix_data(m);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float f = v[r * tk_matrix_row_stride(m) + c];
            if (f == f && tk_bf16_to_f32(tk_bf16_from_f32(f)) != f) {
                fprintf(stderr, "npy_audit: %s[%lld, %lld] = %.9g is not a bfloat16 "
                        "value, so it cannot be a bf16 output\n", path, (long long)r,
                        (long long)c, (double)f);
                return NULL;
            }
        }
    tk_matrix *b;
    float *dense = malloc((size_t)(rows * cols) * sizeof *dense);
    int rc = dense ? tk_matrix_to_f32(m, dense, cols) : TK_ENOMEM;
    if (!rc)
        rc = tk_matrix_from_f32(&b, dtype, rows, cols, dense, cols);
    free(dense);
    if (rc) {
        fprintf(stderr, "npy_audit: %s: %s\n", path, tk_last_error_message());
        return NULL;
    }
    return b;
}

static int print_text_report(const tk_audit *a)
{
    char path[] = "/tmp/npy_audit_XXXXXX";
    int fd = mkstemp(path), rc;
    if (fd < 0) {
        fprintf(stderr, "npy_audit: temporary file: %s\n", strerror(errno));
        return 2;
    }
    close(fd);
    if ((rc = tk_audit_write_report(a, path, TK_REPORT_TEXT))) {
        fprintf(stderr, "npy_audit: report: %s\n", tk_last_error_message());
        remove(path);
        return 2;
    }
    FILE *f = fopen(path, "r");
    char buf[4096];
    size_t n;
    while (f && (n = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, n, stdout);
    if (f)
        fclose(f);
    remove(path);
    return f ? 0 : 2;
}

static int write_reports(const tk_audit *a, const char *dir)
{
    static const char *const names[] = {"audit.txt", "audit.json", "audit.svg"};
    for (int i = 0; i < 3; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (tk_audit_write_report(a, path, TK_REPORT_TEXT + i)) {
            fprintf(stderr, "npy_audit: %s\n", tk_last_error_message());
            return 2;
        }
        printf("wrote %s\n", path);
    }
    return 0;
}

/* The whole audit; returns the exit status. */
static int audit_files(const struct opts *o)
{
    tk_matrix *x = load(o->x, "X"), *y = x ? load(o->y, "Y") : NULL;
    tk_matrix *out = y ? load(o->out, "OUT") : NULL, *cand = NULL;
    tk_kernel *k = NULL;
    tk_audit *a = NULL;
    float *orig = NULL;
    int status = 2, rc;
    if (!out)
        goto done;
    int64_t rows = tk_matrix_rows(x), cols = tk_matrix_cols(x);
    if (tk_matrix_dtype(x) != TK_DTYPE_F32 || tk_matrix_dtype(y) != TK_DTYPE_F32) {
        fprintf(stderr, "npy_audit: X and Y must be the original float32 data; "
                "got %s and %s\n", tk_dtype_name(tk_matrix_dtype(x)),
                tk_dtype_name(tk_matrix_dtype(y)));
        goto done;
    }
    if (tk_matrix_rows(y) != rows || tk_matrix_cols(y) != cols ||
        tk_matrix_rows(out) != rows || tk_matrix_cols(out) != cols) {
        fprintf(stderr, "npy_audit: shapes differ: X %lldx%lld, Y %lldx%lld, "
                "OUT %lldx%lld\n", (long long)rows, (long long)cols,
                (long long)tk_matrix_rows(y), (long long)tk_matrix_cols(y),
                (long long)tk_matrix_rows(out), (long long)tk_matrix_cols(out));
        goto done;
    }
    int dtype = o->dtype ? o->dtype : tk_matrix_dtype(out);
    if (!(cand = as_dtype(out, dtype, o->out)))
        goto done;
    orig = malloc((size_t)(2 * rows * cols) * sizeof *orig);
    if (!orig) {
        fprintf(stderr, "npy_audit: out of memory\n");
        goto done;
    }
    const float *planes[2] = {orig, orig + rows * cols};
    if ((rc = tk_matrix_to_f32(x, orig, cols)) ||
        (rc = tk_matrix_to_f32(y, orig + rows * cols, cols)) ||
        (rc = tk_kernel_axpy(&k, o->alpha)) || (rc = tk_audit_create(&a, k)) ||
        (rc = tk_audit_set_candidate(a, copy_candidate, cand)) ||
        (rc = tk_audit_add_case(a, dtype, rows, cols, planes))) {
        fprintf(stderr, "npy_audit: %s\n", tk_last_error_message());
        goto done;
    }
    rc = tk_audit_run(a);
    if (rc && rc != TK_EMISMATCH) {
        fprintf(stderr, "npy_audit: %s\n", tk_last_error_message());
        goto done;
    }
    if (print_text_report(a) || (o->report_dir && write_reports(a, o->report_dir)))
        goto done;
    status = rc ? 1 : 0;
done:
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
    free(orig);
    if (cand != out)
        tk_matrix_destroy(cand);
    tk_matrix_destroy(out);
    tk_matrix_destroy(y);
    tk_matrix_destroy(x);
    return status;
}

/* Write a correct and a wrong bf16 candidate for small data, audit both,
 * and check the exit statuses: 0, 1, and 2 for a missing file. */
static int self_test(void)
{
    enum { R = 5, C = 7 };
    char dir[] = "/tmp/npy_audit_self_XXXXXX", p[4][64];
    float x[R * C], y[R * C];
    tk_matrix *mx = NULL, *my = NULL, *bx = NULL, *by = NULL, *good = NULL;
    tk_kernel *k = NULL;
    tk_tiling *t = NULL;
    int failed = 1;
    if (!mkdtemp(dir)) {
        fprintf(stderr, "self-test: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    for (int i = 0; i < R * C; i++) {
        x[i] = 0.37f * (float)(i - 11);
        y[i] = 1.0f / (float)(i + 3);
    }
    const char *names[4] = {"x.npy", "y.npy", "good.npy", "bad.npy"};
    for (int i = 0; i < 4; i++)
        snprintf(p[i], sizeof p[i], "%s/%s", dir, names[i]);
    if (tk_matrix_from_f32(&mx, TK_DTYPE_F32, R, C, x, C) ||
        tk_matrix_from_f32(&my, TK_DTYPE_F32, R, C, y, C) ||
        tk_matrix_from_f32(&bx, TK_DTYPE_BF16, R, C, x, C) ||
        tk_matrix_from_f32(&by, TK_DTYPE_BF16, R, C, y, C) ||
        tk_matrix_create(&good, TK_DTYPE_BF16, R, C) || tk_kernel_axpy(&k, 2.0f) ||
        tk_tiling_create(&t, R, C, 8, 128)) {
        fprintf(stderr, "self-test: setup: %s\n", tk_last_error_message());
        goto done;
    }
    const tk_matrix *in[2] = {bx, by};
    if (tk_kernel_run(k, t, in, good) || tk_matrix_save_npy(mx, p[0]) ||
        tk_matrix_save_npy(my, p[1]) || tk_matrix_save_npy(good, p[2])) {
        fprintf(stderr, "self-test: setup: %s\n", tk_last_error_message());
        goto done;
    }
    /* One element one bf16 ULP off. */
    ((uint16_t *)tk_matrix_data(good))[C + 3] ^= 1u;
    if (tk_matrix_save_npy(good, p[3])) {
        fprintf(stderr, "self-test: setup: %s\n", tk_last_error_message());
        goto done;
    }
    struct opts o = {2.0f, TK_DTYPE_BF16, NULL, p[0], p[1], p[2]};
    int ok = audit_files(&o);
    o.out = p[3];
    int bad = audit_files(&o);
    o.out = "/nonexistent/out.npy";
    int missing = audit_files(&o);
    failed = ok != 0 || bad != 1 || missing != 2;
    printf("self-test: correct candidate exit %d (want 0), wrong candidate exit %d "
           "(want 1), missing file exit %d (want 2): %s\n", ok, bad, missing,
           failed ? "FAILED" : "ok");
done:
    for (int i = 0; i < 4; i++)
        remove(p[i]);
    rmdir(dir);
    tk_tiling_destroy(t);
    tk_kernel_destroy(k);
    tk_matrix_destroy(good);
    tk_matrix_destroy(bx);
    tk_matrix_destroy(by);
    tk_matrix_destroy(mx);
    tk_matrix_destroy(my);
    return failed;
}

int main(int argc, char **argv)
{
    struct opts o = {2.0f, 0, NULL, NULL, NULL, NULL};
    const char *files[3];
    int nfiles = 0;
    if (argc == 2 && !strcmp(argv[1], "--self-test"))
        return self_test();
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--alpha") && i + 1 < argc) {
            char *end;
            o.alpha = strtof(argv[++i], &end);
            if (*end || end == argv[i]) {
                fprintf(stderr, "npy_audit: --alpha %s is not a number\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(arg, "--dtype") && i + 1 < argc) {
            const char *d = argv[++i];
            o.dtype = !strcmp(d, "f32") ? TK_DTYPE_F32
                      : !strcmp(d, "bf16") ? TK_DTYPE_BF16 : -1;
            if (o.dtype < 0) {
                fprintf(stderr, "npy_audit: --dtype %s: use f32 or bf16\n", d);
                return 2;
            }
        } else if (!strcmp(arg, "--report-dir") && i + 1 < argc) {
            o.report_dir = argv[++i];
        } else if (arg[0] == '-' || nfiles == 3) {
            return usage(argv[0]);
        } else {
            files[nfiles++] = arg;
        }
    }
    if (nfiles != 3)
        return usage(argv[0]);
    o.x = files[0];
    o.y = files[1];
    o.out = files[2];
    return audit_files(&o);
}
