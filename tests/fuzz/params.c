/* params.c - libFuzzer harness for the parameters of tiling, the host
 * kernel, the pipeline, compare, audit, bench and the files they write:
 * fuzzed shapes, blocks, tails, dtypes, alphas, body kinds, row gaps,
 * contracts, candidates and bench settings.  Every call returns a
 * documented status, with *out NULL on failure and a message of its own
 * (st: a success leaves the thread's message as it was); a failed run
 * leaves the output (row gaps included) byte for byte; a successful one
 * equals a scalar reference of the contract and touches no gap; inputs
 * never change.
 *
 * run_kernel: tiling and the host kernel, then the same through the
 * pipeline (run_pipeline, which writes the trace of a short modeled run)
 * and a comparison of the output with an input (run_compare).
 * run_audit: a fuzzed contract audited with a correct (host kernel or
 * scalar), wrong (one ULP off, or rounded early) or failing candidate; the
 * status, the verdict and every metric match the scalar reference, the
 * results of a complete run survive a failing one, and a report is
 * written.  run_bench: trivial or failing entries on the host, a simulated
 * profile (refused) or an external target; the callbacks come in the
 * order tk_bench(3) gives, statistics follow from the samples and are
 * readable only after a completed run, and a receipt is written.  Each
 * writer goes to a new file, over an old one, onto a directory or into a
 * missing directory (dest_open, under /tmp): it writes a whole file or
 * fails with TK_EIO, changes nothing on failure and leaves no temporary. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <tilekern.h>

#include "fuzz.h"

static bool is_float_dtype(int dtype)
{
    return tk_dtype_size(dtype) != 0 && dtype != TK_DTYPE_I32;
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

static float ftz(float v)
{
    return fpclassify(v) == FP_SUBNORMAL ? copysignf(0.0f, v) : v;
}

/* The axpy body in f32 under the TK_ARITH_* flags of tk_kernel(3). */
static float axpy(float alpha, float x, float y, int arith)
{
    bool flush = arith & TK_ARITH_FTZ;
    if (flush) {
        alpha = ftz(alpha);
        x = ftz(x);
        y = ftz(y);
    }
    float r = arith & TK_ARITH_FMA ? fmaf(alpha, x, y)
                                   : (flush ? ftz(alpha * x) : alpha * x) + y;
    return flush ? ftz(r) : r;
}

static float ref(int dtype, float alpha, float x, float y)
{
    return represent(dtype, axpy(alpha, x, y, TK_ARITH_NUMPY));  /* cast once */
}

static const float alphas[4] = {2.0f, 3.0f, -0.5f, 1e-30f};

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

/* ---- files --------------------------------------------------------------- */

/* Where a writer is sent: nowhere, a new file, over an existing file, onto
 * a directory, or into a directory that does not exist. */
enum { TO_NONE, TO_NEW, TO_OLD, TO_DIR, TO_MISSING };

typedef struct {
    int to;
    char dir[32], path[64];
} dest;

/* The size of a file (-1 when there is none) and its first bytes. */
static long file_head(const char *path, char *head, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    memset(head, 0, cap);
    size_t got = fread(head, 1, cap, f);
    check(fseek(f, 0, SEEK_END) == 0);
    long n = ftell(f);
    fclose(f);
    check(n >= (long)got);
    return n;
}

/* A fresh directory under /tmp and in it the path to write to (NULL for
 * none): "new", "old" (an existing file), "sub" (a directory) or
 * "missing/new". */
static const char *dest_open(dest *d, int to)
{
    static const char *const names[5] = {"", "new", "old", "sub", "missing/new"};
    d->to = to;
    if (to == TO_NONE)
        return NULL;
    snprintf(d->dir, sizeof d->dir, "/tmp/tk_fuzz_XXXXXX");
    check(mkdtemp(d->dir) != NULL);
    snprintf(d->path, sizeof d->path, "%s/%s", d->dir, names[to]);
    if (to == TO_OLD) {
        FILE *f = fopen(d->path, "wb");
        check(f != NULL && fputs("old\n", f) >= 0);
        check(fclose(f) == 0);
    }
    if (to == TO_DIR)
        check(mkdir(d->path, 0700) == 0);
    return d->path;
}

/* After a write that returned rc, where want is what the handle allows
 * (TK_OK, or its own refusal): a directory or a missing directory fails
 * with TK_EIO; a success is a whole file starting with `first` (0: any
 * byte); a failure changes nothing.  Then the directory goes, which fails
 * if a temporary was left in it. */
static void dest_close(dest *d, int rc, int want, char first)
{
    bool bad = d->to == TO_DIR || d->to == TO_MISSING;
    check(want ? rc == want || (bad && rc == TK_EIO) : rc == (bad ? TK_EIO : TK_OK));
    char head[8];
    long n = bad ? -1 : file_head(d->path, head, sizeof head);
    if (rc == TK_OK)
        check(n > 0 && (!first || head[0] == first));
    else if (d->to == TO_NEW)
        check(n == -1);
    else if (d->to == TO_OLD)
        check(n == 4 && memcmp(head, "old\n", 4) == 0);
    if (n >= 0)
        check(remove(d->path) == 0);
    if (d->to == TO_DIR)   /* still the directory it was */
        check(rmdir(d->path) == 0);
    check(rmdir(d->dir) == 0);
}

/* ---- tiling, kernel, pipeline, compare ----------------------------------- */

/* The same kernel and tiling through the pipeline on the host device, with
 * fuzzed slots, pipelining, hazard detection and fault.  A refused run
 * leaves the output byte for byte; a checked, accepted one computes the
 * contract; an unchecked faulty one still writes nothing outside the
 * matrix.  Inputs never change.  Given a cost model (fuzzed copy
 * engines), such a run is modeled, and a short one's trace is written. */
static void run_pipeline(bytes *b, tk_kernel *k, tk_tiling *t, tk_matrix *const *m,
                         unsigned char *const *mem, unsigned char *const *before,
                         const size_t *bytes_of, int64_t rows, int64_t cols, int64_t stride,
                         float alpha)
{
    int64_t in_slots = take(b, 0, 4), out_slots = take(b, 0, 3);
    int sync = take(b, 0, 1), detect = take(b, 0, 1), fault = take(b, 0, 5);
    int engines = take(b, 0, 2), to = take(b, TO_NONE, TO_MISSING);   /* 0: no cost model */
    tk_device *dev = (tk_device *)1;
    int rc = st(tk_device_host(&dev));
    check(rc == TK_OK ? dev != NULL : dev == NULL && rc == TK_ENOMEM);
    if (!dev)
        return;
    if (engines) {   /* the figures the host lacks for a modeled time */
        check(st(tk_device_set(dev, TK_DEVICE_HBM_BYTES_PER_S, 800000000000)) == TK_OK);
        check(st(tk_device_set(dev, TK_DEVICE_COPY_LATENCY_NS, 500)) == TK_OK);
        check(st(tk_device_set(dev, TK_DEVICE_COPY_ENGINES, engines)) == TK_OK);
        check(st(tk_device_set(dev, TK_DEVICE_COMPUTE_ELEMS_PER_S, 100000000000)) == TK_OK);
    }
    tk_pipeline *p = (tk_pipeline *)1;
    rc = st(tk_pipeline_create(&p, k, t, dev));
    check(rc == TK_OK ? p != NULL : p == NULL && rc == TK_ENOMEM);
    if (p) {
        int set[5][2] = {{TK_PIPE_INPUT_BUFFERS, (int)in_slots},
                         {TK_PIPE_OUTPUT_BUFFERS, (int)out_slots},
                         {TK_PIPE_NO_PIPELINING, sync}, {TK_PIPE_DETECT_RACES, detect},
                         {TK_PIPE_FAULT, fault}};
        for (int i = 0; i < 5; i++) {
            rc = st(tk_pipeline_set(p, set[i][0], set[i][1]));
            check(rc == TK_OK || rc == TK_ERANGE);
        }
        int64_t checked = 1;
        check(tk_pipeline_get(p, TK_PIPE_DETECT_RACES, &checked) == TK_OK);
        memcpy(mem[2], before[2], bytes_of[2]);
        rc = st(tk_pipeline_run(p, (const tk_matrix *const *)m, m[2]));
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
        /* A modeled time (and a trace) after a run that got past its checks
         * (it succeeded or found hazards) on a device with a cost model. */
        double ns;
        int modeled = st(tk_pipeline_stat(p, TK_STAT_MODELED_NS, &ns));
        bool past = rc == TK_OK || rc == TK_ERACE;
        check(modeled == (past && engines ? TK_OK : TK_ESTATE));
        int64_t tiles;   /* a trace has a few events a step: short runs only */
        check(st(tk_tiling_get(t, TK_TILING_TILES, &tiles)) == TK_OK);
        dest d;
        const char *path = dest_open(&d, tiles <= 64 ? to : TO_NONE);
        if (path)
            dest_close(&d, st(tk_pipeline_write_trace(p, path)), modeled, '{');
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
    int rc = st(tk_compare_create(&c, dtype));
    if (rc) {
        check(c == NULL && rc == TK_EDTYPE);
        return;
    }
    rc = st(tk_compare_set(c, TK_COMPARE_MAX_ULP, ulp));
    check(rc == TK_OK || rc == TK_ERANGE);
    rc = st(tk_compare_set(c, TK_COMPARE_NAN_POLICY, nan));
    check(rc == TK_OK || rc == TK_ERANGE);
    rc = st(tk_compare_set_tolerance(c, atol, rtol));
    check(rc == TK_OK || rc == TK_ERANGE);
    unsigned char *keep[2];
    for (int i = 0; i < 2; i++) {
        keep[i] = malloc(bytes_of[i ? 0 : 2]);
        check(keep[i] != NULL);
        memcpy(keep[i], mem[i ? 0 : 2], bytes_of[i ? 0 : 2]);
    }
    rc = st(tk_compare_run(c, m[2], m[0]));
    check(rc == TK_OK || rc == TK_EMISMATCH || rc == TK_EDTYPE || rc == TK_ENOMEM);
    double v;
    int got = st(tk_compare_result(c, TK_COMPARE_ELEMENTS, &v));
    check(rc == TK_OK || rc == TK_EMISMATCH ? got == TK_OK : got == TK_ESTATE);
    char text[4096];
    got = st(tk_compare_format(c, text, sizeof text));
    check(got == TK_OK || got == TK_ERANGE || got == TK_ESTATE);
    for (int i = 0; i < 2; i++) {
        check(memcmp(keep[i], mem[i ? 0 : 2], bytes_of[i ? 0 : 2]) == 0);
        free(keep[i]);
    }
    tk_compare_destroy(c);
}

/* Tiling and the host kernel over three matrices with row gaps, then the
 * pipeline and a comparison. */
static void run_kernel(bytes *b)
{
    int64_t rows = take(b, -1, 40), cols = take(b, -1, 40);
    int64_t br = take(b, -1, 48), bc = take(b, -1, 48);
    int tail = take(b, 0, 4), gap = take(b, 0, 3);
    int dt[3] = {take(b, 0, 7), take(b, 0, 7), take(b, 0, 7)};  /* 0 and 7: unknown */
    float alpha = alphas[take(b, 0, 3)];
    int body = take(b, 0, 2);   /* 0: out of range (read last: older corpora keep meaning) */

    tk_tiling *t = (tk_tiling *)1;
    int rc = st(tk_tiling_create(&t, rows, cols, br, bc));
    if (rc) {
        check(t == NULL && (rc == TK_ESHAPE || rc == TK_EINVAL || rc == TK_EOVERFLOW));
        return;
    }
    rc = st(tk_tiling_set(t, TK_TILING_TAIL, tail));
    check(rc == TK_OK || rc == TK_ERANGE || rc == TK_ELAYOUT);
    if (rows < 1 || cols < 1)
        abort();  /* the tiling refused these above */
    tk_kernel *k;
    check(st(tk_kernel_axpy(&k, alpha)) == TK_OK);
    rc = st(tk_kernel_set(k, TK_KERNEL_BODY, body ? body : 7));
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
        if (i < 2 && is_float_dtype(dt[i]))  /* finite inputs */
            for (int64_t e = 0; e < rows * stride; e++) {
                float v = (float)((e * 7 + i * 3) % 17) * 0.25f - 2.0f;
                check(tk_dtype_from_f32_n(dt[i], mem[i] + e * es, &v, 1) == TK_OK);
            }
        m[i] = (tk_matrix *)1;
        rc = st(tk_matrix_wrap(&m[i], dt[i], rows, cols, stride, mem[i]));
        check(rc == TK_OK || (rc == TK_EDTYPE && m[i] == NULL));
    }
    unsigned char *before[3];
    for (int i = 0; i < 3; i++) {
        before[i] = malloc(bytes_of[i]);
        memcpy(before[i], mem[i], bytes_of[i]);
    }
    if (m[0] && m[1] && m[2]) {
        rc = st(tk_kernel_run(k, t, (const tk_matrix *const *)m, m[2]));
        check(memcmp(mem[0], before[0], bytes_of[0]) == 0);
        check(memcmp(mem[1], before[1], bytes_of[1]) == 0);
        if (rc != TK_OK) {
            check(rc == TK_EDTYPE || rc == TK_ELAYOUT || rc == TK_ENOMEM || rc == TK_EOVERFLOW);
            check(memcmp(mem[2], before[2], bytes_of[2]) == 0);
        } else {
            check_result(dt, mem, before[2], rows, cols, stride, alpha);
        }
        run_pipeline(b, k, t, m, mem, before, bytes_of, rows, cols, stride, alpha);
        run_compare(b, m, mem, bytes_of);
    }
    for (int i = 0; i < 3; i++) {
        tk_matrix_destroy(m[i]);
        free(mem[i]);
        free(before[i]);
    }
    tk_kernel_destroy(k);
    tk_tiling_destroy(t);
}

/* ---- audit --------------------------------------------------------------- */

/* Candidates: two correct, two wrong, one failing; or none set. */
enum { CAND_HOST, CAND_SCALAR, CAND_ULP, CAND_EARLY, CAND_FAIL, CAND_NONE };

#define MAX_CASES 3
#define MAX_ELEMS 54   /* 6 x 9 */

typedef struct {
    int dtype, seed;
    int64_t rows, cols;
    float orig[2][MAX_ELEMS];
    unsigned char out[4 * MAX_ELEMS];   /* the candidate's output, as stored */
} audit_case;

typedef struct {
    tk_audit *a;
    const tk_kernel *k;
    float alpha;
    int arith, kind, sel;   /* sel: the case (and element) a wrong or failing one picks */
    int64_t br, bc;         /* the host candidate's blocks */
    bool failing;           /* fail at once, whatever the kind */
    audit_case c[MAX_CASES + 1];   /* and one added after a run */
    int n, calls;
} audit_state;

/* Finite originals, subnormals and zeros of both signs among them, whose
 * results stay inside every dtype's range (|3 * 64 + 64| < 448). */
static void fill_case(audit_case *c)
{
    static const float v[16] = {0.0f, -0.0f, 1.0f, -1.5f, 0.1f, 3.25f, 0x1p-133f,
                                1.00390625f, 0.00390625f, 64.0f, -48.5f, 1e-3f,
                                0x1p-127f, 0.333333f, -7.0f, 2e-38f};
    for (int i = 0; i < 2; i++)
        for (int64_t e = 0; e < c->rows * c->cols; e++)
            c->orig[i][e] = v[(c->seed + e * (2 * i + 3) + (c->seed >> 4) * e * e) % 16];
}

/* Element e of a matrix of `cols` columns. */
static unsigned char *elem(const tk_matrix *m, int64_t e, int64_t cols)
{
    int64_t es = tk_dtype_size(tk_matrix_dtype(m)), at = (e / cols) * tk_matrix_row_stride(m);
    return (unsigned char *)tk_matrix_data(m) + (at + e % cols) * es;
}

static float elem_f32(const tk_matrix *m, int64_t e, int64_t cols)
{
    float v;
    check(tk_dtype_to_f32_n(tk_matrix_dtype(m), &v, elem(m, e, cols), 1) == TK_OK);
    return v;
}

/* The candidate the fuzzer chose.  It first checks what the audit hands
 * it: the case's originals as stored, an output filled with NaN, and no
 * re-entry. */
static int candidate(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    audit_state *s = user;
    check(s->calls < s->n);
    audit_case *c = &s->c[s->calls];
    int d = c->dtype;
    int64_t n = c->rows * c->cols, es = tk_dtype_size(d);
    check(st(tk_audit_run(s->a)) == TK_ESTATE);
    check(tk_matrix_dtype(out) == d && tk_matrix_rows(out) == c->rows &&
          tk_matrix_cols(out) == c->cols);
    for (int64_t e = 0; e < n; e++) {
        for (int64_t j = 0; j < es; j++)
            check(elem(out, e, c->cols)[j] == 0xFF);
        for (int i = 0; i < 2; i++) {
            float want = represent(d, c->orig[i][e]), got = elem_f32(in[i], e, c->cols);
            check(memcmp(&got, &want, 4) == 0);
        }
    }
    bool picked = s->sel % MAX_CASES == s->calls;
    if ((s->kind == CAND_FAIL && picked) || s->failing)
        return -1 - s->sel;   /* any non-zero value, TK_* codes among them */
    if (s->kind == CAND_HOST) {
        tk_tiling *t;
        check(st(tk_tiling_create(&t, c->rows, c->cols, s->br, s->bc)) == TK_OK);
        check(st(tk_kernel_run(s->k, t, in, out)) == TK_OK);
        tk_tiling_destroy(t);
    } else {
        for (int64_t e = 0; e < n; e++) {
            float x = elem_f32(in[0], e, c->cols), y = elem_f32(in[1], e, c->cols);
            float v = s->kind == CAND_EARLY ? represent(d, represent(d, s->alpha * x) + y)
                                            : represent(d, axpy(s->alpha, x, y, s->arith));
            check(tk_dtype_from_f32_n(d, elem(out, e, c->cols), &v, 1) == TK_OK);
        }
    }
    /* The lowest bit of the stored code is in its first byte (little
     * endian): one ULP off, never NaN, for these finite results. */
    if (s->kind == CAND_ULP && picked)
        elem(out, s->sel / MAX_CASES % n, c->cols)[0] ^= 1;
    for (int64_t e = 0; e < n; e++)
        memcpy(c->out + e * es, elem(out, e, c->cols), (size_t)es);
    s->calls++;
    return 0;
}

/* A contract with a custom body: axpy rounded separately, or a failure. */
typedef struct {
    float alpha;
    int fail;
} custom;

static int custom_body(void *user, int64_t rows, int64_t cols, int64_t ld,
                       const float *const *in, float *out)
{
    const custom *u = user;
    if (u->fail)
        return 7;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            out[r * ld + c] = u->alpha * in[0][r * ld + c] + in[1][r * ld + c];
    return 0;
}

static double metric(const tk_audit *a, int64_t i, int which)
{
    double v;
    check(st(tk_audit_result(a, i, which, &v)) == TK_OK);
    return v;
}

/* Case i's metrics against the scalar reference of tk_audit(3), from the
 * originals and the output the candidate gave: the oracle casts the body
 * of the stored inputs once, the gap is against the body of the
 * originals, differences are f32 subtractions.  Returns the mismatches. */
static int64_t check_case(const audit_state *s, int64_t i, double atol, double rtol,
                          bool is_axpy)
{
    const audit_case *c = &s->c[i];
    int d = c->dtype;
    int64_t es = tk_dtype_size(d), mism = 0, gap_mism = 0;
    uint64_t ulp = 0;
    float impl_abs = 0, gap_abs = 0, in_part = 0, out_part = 0, scale = 0;
    double rel = 0;
    for (int64_t e = 0; e < c->rows * c->cols; e++) {
        float xo = c->orig[0][e], yo = c->orig[1][e], got;
        float t = axpy(s->alpha, represent(d, xo), represent(d, yo), s->arith);
        float o = represent(d, t), r = axpy(s->alpha, xo, yo, s->arith);
        check(tk_dtype_to_f32_n(d, &got, c->out + e * es, 1) == TK_OK);
        if (got != o) {   /* +0 and -0 agree */
            mism++;
            impl_abs = fmaxf(impl_abs, fabsf(got - o));
            uint64_t u = tk_ulp_distance(d, got, o);
            ulp = u > ulp ? u : ulp;
        }
        float g = got == r ? 0.0f : fabsf(got - r);
        gap_abs = fmaxf(gap_abs, g);
        if (r != 0.0f)
            rel = fmax(rel, (double)g / (double)fabsf(r));
        gap_mism += (double)g > atol + rtol * (double)fabsf(r);
        in_part = fmaxf(in_part, fabsf(t - r));
        out_part = fmaxf(out_part, fabsf(o - t));
        scale = fmaxf(scale, fabsf(r));
    }
    const tk_audit *a = s->a;
    int kind = s->kind;
    if (kind == CAND_HOST || kind == CAND_SCALAR)
        check(mism == 0);
    if (kind == CAND_ULP)
        check(mism == (s->sel % MAX_CASES == i) && ulp == (uint64_t)mism);
    check(metric(a, i, TK_AUDIT_PASSED) == (mism == 0));
    check(metric(a, i, TK_AUDIT_IMPL_MISMATCHES) == (double)mism);
    check(metric(a, i, TK_AUDIT_IMPL_MAX_ABS) == impl_abs);
    check(metric(a, i, TK_AUDIT_IMPL_MAX_ULP) == (double)ulp);
    check(metric(a, i, TK_AUDIT_GAP_MAX_ABS) == gap_abs);
    check(metric(a, i, TK_AUDIT_GAP_MAX_REL) == rel);
    check(metric(a, i, TK_AUDIT_GAP_INPUT_MAX_ABS) == in_part);
    check(metric(a, i, TK_AUDIT_GAP_OUTPUT_MAX_ABS) == out_part);
    check(metric(a, i, TK_AUDIT_SCALE) == scale);
    check(metric(a, i, TK_AUDIT_GAP_MISMATCHES) == (double)gap_mism);
    check(metric(a, i, TK_AUDIT_GAP_PASSED) == (gap_mism == 0));
    check(metric(a, i, TK_AUDIT_DEPTH) == 0 && metric(a, i, TK_AUDIT_OUT_DTYPE) == d);
    double why = metric(a, i, TK_AUDIT_DIAGNOSIS);
    if (!mism)
        check(why == TK_SCHEDULE_NOT_RUN);
    else if (kind == CAND_EARLY && is_axpy && d != TK_DTYPE_F32)
        check(why == TK_SCHEDULE_FINAL_CAST || why == TK_SCHEDULE_EARLY_ROUND);
    else   /* an elementwise schedule, or none */
        check((why >= TK_SCHEDULE_UNKNOWN && why <= TK_SCHEDULE_KEEP_SUBNORMAL) ||
              (why >= TK_SCHEDULE_XLA_ARITH && why <= TK_SCHEDULE_SEPARATE_FLUSH));
    check(tk_audit_schedule_name((int)why) != NULL);
    return mism;
}

/* What a case shows before a run: its shape, dtype and gap tolerance, and
 * no results; out-of-range cases, unknown metrics and an elementwise
 * case's bound are refused. */
static void check_unrun(const audit_state *s, const double *atol, const double *rtol)
{
    const tk_audit *a = s->a;
    double v = -1.0;
    check(st(tk_audit_result(a, s->n, TK_AUDIT_ROWS, &v)) == TK_ERANGE);
    check(st(tk_audit_result(a, -1, TK_AUDIT_ROWS, &v)) == TK_ERANGE && v == -1.0);
    for (int i = 0; i < s->n; i++) {
        const audit_case *c = &s->c[i];
        check(metric(a, i, TK_AUDIT_ROWS) == c->rows && metric(a, i, TK_AUDIT_COLS) == c->cols);
        check(metric(a, i, TK_AUDIT_DTYPE) == c->dtype);
        check(metric(a, i, TK_AUDIT_GAP_ATOL) == atol[c->dtype]);
        check(metric(a, i, TK_AUDIT_GAP_RTOL) == rtol[c->dtype]);
        check(st(tk_audit_result(a, i, TK_AUDIT_IMPL_MAX_ABS, &v)) == TK_ESTATE);
        check(st(tk_audit_result(a, i, TK_AUDIT_BOUND_RATIO, &v)) == TK_EINVAL);
        check(st(tk_audit_result(a, i, TK_AUDIT_IMPL_MAX_ABS - 1, &v)) == TK_EINVAL);
        check(v == -1.0);
    }
}

/* The cases' results after a completed run: the verdicts, every metric,
 * and TK_OK or TK_EMISMATCH from the run. */
static void check_results(const audit_state *s, int rc, const double *atol,
                          const double *rtol, bool is_axpy)
{
    int64_t failed = 0;
    for (int i = 0; i < s->n; i++)
        failed += check_case(s, i, atol[s->c[i].dtype], rtol[s->c[i].dtype], is_axpy) > 0;
    check(rc == (failed ? TK_EMISMATCH : TK_OK));
}

/* An audit of a fuzzed contract (axpy under its arithmetic, or a custom
 * body that may fail; blockwise before or after creation) with fuzzed gap
 * tolerance, a few small cases and a fuzzed candidate; then, maybe, a run
 * that fails part-way (the results stay), maybe a change (the results go),
 * and a report. */
static void run_audit(bytes *b)
{
    int contract = take(b, 0, 2), arith = take(b, 0, 4), body = take(b, 0, 3);
    audit_state s = {.alpha = alphas[take(b, 0, 3)]};
    s.kind = take(b, CAND_HOST, CAND_NONE);
    s.sel = take(b, 0, 255);
    s.br = take(b, 1, 8);
    s.bc = take(b, 1, 8);
    custom u = {s.alpha, contract == 2};
    tk_kernel *k;
    check(st(contract ? tk_kernel_custom(&k, 2, custom_body, &u)
                      : tk_kernel_axpy(&k, s.alpha)) == TK_OK);
    int rc = st(tk_kernel_set(k, TK_KERNEL_ARITH, arith));
    bool in_range = arith <= TK_ARITH_XLA, built_in = !contract || arith == TK_ARITH_NUMPY;
    check(in_range && built_in ? rc == TK_OK
          : (!in_range && rc == TK_ERANGE) || (!built_in && rc == TK_EINVAL));
    s.arith = rc ? TK_ARITH_NUMPY : arith;
    if (body == 2)
        check(st(tk_kernel_set(k, TK_KERNEL_BODY, TK_BODY_BLOCKWISE)) == TK_OK);
    s.k = k;
    s.a = (tk_audit *)1;
    rc = st(tk_audit_create(&s.a, k));
    check(body == 2 ? rc == TK_EINVAL && s.a == NULL : rc == TK_OK && s.a != NULL);
    if (!s.a) {
        tk_kernel_destroy(k);
        return;
    }
    if (body == 3)   /* after creation: the run refuses it */
        check(st(tk_kernel_set(k, TK_KERNEL_BODY, TK_BODY_BLOCKWISE)) == TK_OK);
    double atol[8] = {0, 1e-5, 1e-5, 0, 1e-5, 0x1p-10, 0x1p-17, 0};  /* tk_audit(3) */
    double rtol[8] = {0, 1.3e-6, 0.016, 0, 1e-3, 0x1p-3, 0x1p-2, 0};
    static const double tols[6] = {0.0, 1e-5, 0.5, -1.0, 1e300, INFINITY};
    int gd = take(b, 0, 7);
    double ga = tols[take(b, 0, 5)], gr = tols[take(b, 0, 5)];
    bool tol_ok = ga >= 0 && gr >= 0 && isfinite(ga) && isfinite(gr);
    rc = st(tk_audit_set_gap_tolerance(s.a, gd, ga, gr));
    check(is_float_dtype(gd) && tol_ok ? rc == TK_OK
          : (!is_float_dtype(gd) && rc == TK_EDTYPE) || (!tol_ok && rc == TK_ERANGE));
    if (rc == TK_OK) {
        atol[gd] = ga;
        rtol[gd] = gr;
    }
    if (s.kind != CAND_NONE)
        check(st(tk_audit_set_candidate(s.a, candidate, &s)) == TK_OK);
    for (int i = take(b, 0, MAX_CASES); i > 0; i--) {
        audit_case *c = &s.c[s.n];
        *c = (audit_case){.dtype = take(b, 0, 7)};
        c->rows = take(b, -1, 6);
        c->cols = take(b, -1, 9);
        c->seed = take(b, 0, 255);
        bool shape_ok = c->rows > 0 && c->cols > 0;
        if (shape_ok)
            fill_case(c);
        const float *orig[2] = {c->orig[0], c->orig[1]};
        rc = st(tk_audit_add_case(s.a, c->dtype, c->rows, c->cols, orig));
        bool dtype_ok = is_float_dtype(c->dtype);
        check(dtype_ok && shape_ok ? rc == TK_OK
              : (!dtype_ok && rc == TK_EDTYPE) || (!shape_ok && rc == TK_ESHAPE));
        s.n += rc == TK_OK;
    }
    check(tk_audit_case_count(s.a) == s.n);
    check_unrun(&s, atol, rtol);
    int rerun = take(b, 0, 1), format = take(b, 0, 4), to = take(b, TO_NONE, TO_MISSING);
    int change = take(b, 0, 3);   /* none, the candidate, a tolerance, a case */

    rc = st(tk_audit_run(s.a));
    bool late = body == 3, refused = s.kind == CAND_NONE || s.n == 0;
    bool fails = u.fail || (s.kind == CAND_FAIL && s.sel % MAX_CASES < s.n);
    bool has = !refused && !late && !fails;   /* results */
    if (refused)
        check(rc == TK_ESTATE || (late && rc == TK_EINVAL));
    else if (late)
        check(rc == TK_EINVAL);
    else if (!has)
        check(rc == TK_ECALLBACK);
    if (has)
        check_results(&s, rc, atol, rtol, !contract);
    else
        check_unrun(&s, atol, rtol);
    if (has && rerun) {   /* fails part-way: the results stay as they were */
        s.failing = true;
        s.calls = 0;
        check(st(tk_audit_run(s.a)) == TK_ECALLBACK);
        check_results(&s, rc, atol, rtol, !contract);
    }
    if (change == 1)
        check(st(tk_audit_set_candidate(s.a, candidate, &s)) == TK_OK);
    if (change == 2) {
        check(st(tk_audit_set_gap_tolerance(s.a, TK_DTYPE_F32, 0.0, 0.0)) == TK_OK);
        atol[TK_DTYPE_F32] = rtol[TK_DTYPE_F32] = 0.0;
    }
    if (change == 3) {
        audit_case *c = &s.c[s.n];
        *c = (audit_case){.dtype = TK_DTYPE_F32, .rows = 1, .cols = 1};
        fill_case(c);
        const float *orig[2] = {c->orig[0], c->orig[1]};
        check(st(tk_audit_add_case(s.a, c->dtype, c->rows, c->cols, orig)) == TK_OK);
        s.n++;
    }
    if (change) {   /* each discards the results */
        has = false;
        check_unrun(&s, atol, rtol);
    }
    for (int i = 0; i < s.n; i++) {   /* the originals passed in never change */
        audit_case c = s.c[i];
        fill_case(&c);
        check(memcmp(c.orig, s.c[i].orig, sizeof c.orig) == 0);
    }
    dest d;
    const char *path = dest_open(&d, to);
    if (path) {
        static const char first[5] = {0, 0, '{', '<', 0};
        bool bad = format < TK_REPORT_TEXT || format > TK_REPORT_SVG;
        dest_close(&d, st(tk_audit_write_report(s.a, path, format)),
                   bad ? TK_EINVAL : has ? TK_OK : TK_ESTATE, first[format]);
    }
    tk_audit_destroy(s.a);
    tk_kernel_destroy(k);
}

/* ---- bench --------------------------------------------------------------- */

enum { EV_COMPILE, EV_RUN, EV_SYNC };
#define MAX_ENTRIES 3
#define MAX_EVENTS (MAX_ENTRIES * (1 + 2 * (5 + 20)))   /* warm-ups, repeats <= defaults */

typedef struct bench_state bench_state;

typedef struct {
    bench_state *s;
    int index, fail_at, fail_rc, calls;
    bool compile, sync;
} bench_entry;

struct bench_state {
    tk_bench *b;
    bench_entry e[MAX_ENTRIES];
    int n;
    int64_t warmups, repeats, interleave;
    bool armed;                 /* entries fail at their fail_at-th call */
    int log[MAX_EVENTS], len;   /* the calls made: entry * 3 + EV_* */
};

static volatile unsigned sink;

/* One callback: logged, a few ns of work, and the entry's failure once
 * armed.  Its first call finds the bench refusing a run from within. */
static int event(bench_entry *e, int kind)
{
    bench_state *s = e->s;
    if (e->calls == 0)
        check(st(tk_bench_run(s->b)) == TK_ESTATE);
    check(s->len < MAX_EVENTS);
    s->log[s->len++] = e->index * 3 + kind;
    sink += (unsigned)kind;
    bool fails = s->armed && e->calls == e->fail_at;
    e->calls++;
    return fails ? e->fail_rc : 0;
}

static int compile_cb(void *user) { return event(user, EV_COMPILE); }
static int run_cb(void *user) { return event(user, EV_RUN); }
static int sync_cb(void *user) { return event(user, EV_SYNC); }

/* A run of entry i then its sync, in the expected calls. */
static int call(const bench_state *s, int i, int *seq, int len)
{
    seq[len++] = i * 3 + EV_RUN;
    if (s->e[i].sync)
        seq[len++] = i * 3 + EV_SYNC;
    return len;
}

/* The calls tk_bench(3) describes: each entry's compile and warm-ups, then
 * its samples (not interleaved) or, interleaved, rounds of one sample of
 * every entry. */
static int protocol(const bench_state *s, int *seq)
{
    int len = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->e[i].compile)
            seq[len++] = i * 3 + EV_COMPILE;
        for (int64_t w = 0; w < s->warmups; w++)
            len = call(s, i, seq, len);
        for (int64_t k = 0; !s->interleave && k < s->repeats; k++)
            len = call(s, i, seq, len);
    }
    for (int64_t k = 0; s->interleave && k < s->repeats; k++)
        for (int i = 0; i < s->n; i++)
            len = call(s, i, seq, len);
    return len;
}

/* Whether the run that made these calls stops at a failure: the calls were
 * the protocol's up to and including the first that failed. */
static bool check_calls(const bench_state *s)
{
    int seq[MAX_EVENTS], len = protocol(s, seq), calls[MAX_ENTRIES] = {0};
    bool fails = false;
    for (int j = 0; s->armed && j < len && !fails; j++) {
        const bench_entry *e = &s->e[seq[j] / 3];
        if (calls[e->index]++ == e->fail_at) {
            fails = true;
            len = j + 1;
        }
    }
    check(s->len == len && memcmp(s->log, seq, (size_t)len * sizeof *seq) == 0);
    return fails;
}

static double stat_of(const tk_bench *b, int i, int which)
{
    double v;
    check(st(tk_bench_result(b, i, which, &v)) == TK_OK);
    return v;
}

/* After a completed run: every entry has its samples, in a buffer filled
 * to capacity and no further, and statistics that follow from them. */
static void check_stats(const bench_state *s, int64_t cap, int64_t baseline)
{
    const tk_bench *b = s->b;
    double ms[24], median[MAX_ENTRIES];
    for (int i = 0; i < s->n; i++) {
        for (int j = 0; j < 24; j++)
            ms[j] = -1.0;
        check(tk_bench_samples(b, i, cap ? ms : NULL, cap) == s->repeats);
        for (int64_t j = 0; j < 24; j++)
            check(j < cap && j < s->repeats ? ms[j] >= 0 && isfinite(ms[j]) : ms[j] == -1.0);
        check(tk_bench_samples(b, i, ms, 24) == s->repeats);
        size_t n = (size_t)s->repeats;
        double lo = ms[0], hi = ms[0], sum = 0;
        for (size_t j = 0; j < n; j++) {
            lo = fmin(lo, ms[j]);
            hi = fmax(hi, ms[j]);
            sum += ms[j];
        }
        median[i] = tk_median(ms, n);
        check(stat_of(b, i, TK_BENCH_SAMPLES) == (double)n);
        check(stat_of(b, i, TK_BENCH_MIN_MS) == lo && stat_of(b, i, TK_BENCH_MAX_MS) == hi);
        check(stat_of(b, i, TK_BENCH_MEDIAN_MS) == median[i]);
        check(stat_of(b, i, TK_BENCH_P90_MS) == tk_percentile(ms, n, 90.0));
        check(stat_of(b, i, TK_BENCH_MEAN_MS) == sum / (double)n);
        check(stat_of(b, i, TK_BENCH_STDEV_MS) >= 0);
        double compile_s = stat_of(b, i, TK_BENCH_COMPILE_S);
        check(s->e[i].compile ? compile_s >= 0 : compile_s == 0);
    }
    for (int i = 0; i < s->n; i++) {   /* the baseline's median over each one's */
        double base = median[baseline], m = median[i];
        double want = m > 0 ? base / m : base > 0 ? INFINITY : 1.0;   /* a 0 ms median */
        check(stat_of(b, i, TK_BENCH_SPEEDUP) == want);
    }
    double v = -1.0;
    check(st((int)tk_bench_samples(b, s->n, ms, 24)) == TK_ERANGE);
    check(st((int)tk_bench_samples(b, -1, NULL, 0)) == TK_ERANGE);
    check(st((int)tk_bench_samples(b, 0, NULL, 1)) == TK_EINVAL);
    check(st((int)tk_bench_samples(b, 0, ms, -1)) == TK_EINVAL);
    check(st(tk_bench_result(b, s->n, TK_BENCH_MEDIAN_MS, &v)) == TK_ERANGE);
    check(st(tk_bench_result(b, 0, TK_BENCH_SPEEDUP + 1, &v)) == TK_EINVAL && v == -1.0);
}

/* Nothing to read: no completed run since the last change (and, without
 * entries, no entry 0). */
static void check_no_stats(const bench_state *s)
{
    double v = -1.0, ms[1] = {-1.0};
    int rc = st((int)tk_bench_samples(s->b, 0, ms, 1));
    check((rc == TK_ESTATE || (s->n == 0 && rc == TK_ERANGE)) && ms[0] == -1.0);
    rc = st(tk_bench_result(s->b, 0, TK_BENCH_MEDIAN_MS, &v));
    check((rc == TK_ESTATE || (s->n == 0 && rc == TK_ERANGE)) && v == -1.0);
}

/* A bench parameter set to v: TK_OK inside tk_param_bounds, else TK_ERANGE
 * and no change.  Returns the value in force. */
static int64_t set_param(tk_bench *b, int param, int64_t v)
{
    int64_t lo, hi, got;
    check(st(tk_param_bounds(param, &lo, &hi)) == TK_OK);
    check(st(tk_bench_set(b, param, v)) == (v >= lo && v <= hi ? TK_OK : TK_ERANGE));
    check(st(tk_bench_get(b, param, &got)) == TK_OK);
    return got;
}

/* A bench on the host, a simulated profile (refused) or an external TPU,
 * with fuzzed parameters (the fewest samples, few warm-ups) and up to three
 * entries with or without compile and sync, placed fuzzily, each failing at
 * a fuzzed call; run once or twice (the last run armed), then maybe
 * changed, then a receipt. */
static void run_bench(bytes *b)
{
    int target = take(b, 0, 2);
    tk_device *dev[3] = {NULL, NULL, NULL};   /* host, simulated, external */
    check(st(tk_device_host(&dev[0])) == TK_OK);
    check(st(tk_device_simulated(&dev[1], tk_device_profile_name(0))) == TK_OK);
    check(st(tk_device_external(&dev[2], "tpu", tk_device_profile_name(0))) == TK_OK);
    bench_state s = {.b = (tk_bench *)1};
    int rc = st(tk_bench_create(&s.b, dev[target]));
    check(target == 1 ? rc == TK_ENOTARGET && s.b == NULL : rc == TK_OK && s.b != NULL);
    if (s.b) {
        static const int64_t seconds[3] = {0, 86400, -1};
        s.repeats = set_param(s.b, TK_BENCH_REPEATS, take(b, 4, 6));
        s.warmups = set_param(s.b, TK_BENCH_WARMUPS, take(b, 0, 2));
        s.interleave = set_param(s.b, TK_BENCH_INTERLEAVE, take(b, 0, 2));
        set_param(s.b, TK_BENCH_MAX_SECONDS, seconds[take(b, 0, 2)]);
        int64_t baseline = set_param(s.b, TK_BENCH_BASELINE, take(b, -1, 3));
        int boundary = take(b, 0, 2);   /* none, empty, a sentence */
        if (boundary)
            check(st(tk_bench_set_boundary(s.b, boundary == 1 ? "" : "a few ns on the host"))
                  == (boundary == 1 ? TK_EINVAL : TK_OK));
        static const char *const labels[MAX_ENTRIES] = {"plain", "\"quoted\" \\",
                                                        "tab\tline\n"};
        for (int i = take(b, 0, MAX_ENTRIES); i > 0; i--) {
            int flags = take(b, 0, 15), fail = take(b, 0, 24);
            bench_entry *e = &s.e[s.n];
            *e = (bench_entry){&s, s.n, fail - 1, fail & 1 ? fail : -fail, 0, flags & 1,
                               flags & 2};
            const tk_device *place = flags >> 2 ? dev[(flags >> 2) - 1] : NULL;
            bool bad_place = place && place != dev[target];   /* others differ in platform */
            bool bad_sync = !e->sync && target == 2;   /* a TPU needs one */
            rc = st(tk_bench_add(s.b, labels[s.n], place, e->compile ? compile_cb : NULL,
                                 run_cb, e->sync ? sync_cb : NULL, e));
            check(!bad_place && !bad_sync ? rc == s.n
                  : (bad_place && rc == TK_ENOTARGET) || (bad_sync && rc == TK_EINVAL));
            s.n += rc >= 0;
        }
        check_no_stats(&s);
        bool done = false;
        int64_t cap = take(b, 0, 8);
        for (int r = take(b, 1, 2); r > 0; r--) {
            s.armed = r == 1;
            s.len = 0;
            for (int i = 0; i < s.n; i++)
                s.e[i].calls = 0;
            rc = st(tk_bench_run(s.b));
            bool empty = s.n == 0 || boundary != 2, far = baseline >= s.n;
            if (empty || far) {
                check((empty && rc == TK_ESTATE) || (far && rc == TK_ERANGE));
                check(s.len == 0);
            } else {
                check(rc == (check_calls(&s) ? TK_ECALLBACK : TK_OK));
            }
            done = rc == TK_OK;
            if (done)
                check_stats(&s, cap, baseline);
            else
                check_no_stats(&s);
        }
        int change = take(b, 0, 3);   /* none, a parameter, the boundary, an entry */
        if (change == 1)
            check(st(tk_bench_set(s.b, TK_BENCH_REPEATS, s.repeats)) == TK_OK);
        if (change == 2)
            check(st(tk_bench_set_boundary(s.b, "another sentence")) == TK_OK);
        if (change == 3)
            check(st(tk_bench_add(s.b, "more", NULL, NULL, run_cb, sync_cb, &s.e[0])) == s.n);
        if (change) {
            done = false;
            check_no_stats(&s);
        }
        dest d;
        const char *path = dest_open(&d, take(b, TO_NONE, TO_MISSING));
        if (path)
            dest_close(&d, st(tk_bench_write_receipt(s.b, path)), done ? TK_OK : TK_ESTATE,
                       '{');
    }
    tk_bench_destroy(s.b);
    for (int i = 0; i < 3; i++)
        tk_device_destroy(dev[i]);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    bytes b = {data, size};
    mark();
    run_kernel(&b);
    run_audit(&b);
    run_bench(&b);
    return 0;
}
