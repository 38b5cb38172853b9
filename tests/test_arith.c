/* test_arith.c - TK_KERNEL_ARITH: fused multiply-add and flushed
 * subnormals in the built-in axpy, on every path (host kernel under every
 * tail and body kind, f32 and bf16, strided; the pipeline; the audit's
 * oracle), against a reference written here; the cases measured in Pallas
 * interpret mode; and the audit naming a candidate that fuses or flushes. */
#include "tk_test.h"

#include <math.h>
#include <stdlib.h>

/* The reference: flush as the FTZ/DAZ modes of a vector unit do, fuse with
 * fmaf. */
static float flush(float x) { return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x; }

static float ref_axpy(float a, float x, float y, int arith)
{
    if (arith & TK_ARITH_FTZ) {
        a = flush(a), x = flush(x), y = flush(y);
        return flush(arith & TK_ARITH_FMA ? fmaf(a, x, y) : flush(a * x) + y);
    }
    return arith & TK_ARITH_FMA ? fmaf(a, x, y) : a * x + y;
}

static tk_kernel *axpy(float alpha, int arith)
{
    tk_kernel *k;
    cr_assert_eq(tk_kernel_axpy(&k, alpha), TK_OK);
    cr_assert_eq(tk_kernel_set(k, TK_KERNEL_ARITH, arith), TK_OK);
    return k;
}

/* x and y of rows x cols where a tenth of the elements sit near the
 * subnormal range (and products of them fall into it), the rest normal. */
static void fill(float *x, float *y, int64_t n, uint64_t seed)
{
    tkt_fill(x, (size_t)n, seed);
    tkt_fill(y, (size_t)n, seed + 1);
    for (int64_t i = 0; i < n; i += 10) {
        x[i] = ldexpf(x[i], -126 + (int)(i % 5));
        y[i] = i % 20 ? ldexpf(y[i], -130) : -x[i] * 3.0f;
    }
}

/* One host run of the built-in axpy against the reference, bit for bit. */
static void expect_kernel(int dtype, int arith, int tail, int body, int64_t rows,
                          int64_t cols, int64_t stride)
{
    int64_t n = rows * stride;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    float *got = malloc((size_t)n * sizeof *got);
    fill(x, y, n, (uint64_t)(arith * 7 + tail));
    tk_matrix *mx, *my, *out;
    cr_assert_eq(tk_matrix_from_f32(&mx, dtype, rows, stride, x, stride), TK_OK);
    cr_assert_eq(tk_matrix_from_f32(&my, dtype, rows, stride, y, stride), TK_OK);
    cr_assert_eq(tk_matrix_create(&out, dtype, rows, stride), TK_OK);
    /* Strided views: the first cols columns of each. */
    tk_matrix *vx, *vy, *vo;
    int64_t es = tk_dtype_size(dtype);
    (void)es;
    cr_assert_eq(tk_matrix_wrap(&vx, dtype, rows, cols, stride, tk_matrix_data(mx)), TK_OK);
    cr_assert_eq(tk_matrix_wrap(&vy, dtype, rows, cols, stride, tk_matrix_data(my)), TK_OK);
    cr_assert_eq(tk_matrix_wrap(&vo, dtype, rows, cols, stride, tk_matrix_data(out)), TK_OK);
    tk_kernel *k = axpy(3.0f, arith);
    cr_assert_eq(tk_kernel_set(k, TK_KERNEL_BODY, body), TK_OK);
    tk_tiling *t;
    cr_assert_eq(tk_tiling_create(&t, rows, cols, 8, 128), TK_OK);
    cr_assert_eq(tk_tiling_set(t, TK_TILING_TAIL, tail), TK_OK);
    const tk_matrix *in[2] = {vx, vy};
    cr_assert_eq(tk_kernel_run(k, t, in, vo), TK_OK, "%s", tk_last_error_message());
    float *px = malloc((size_t)n * sizeof *px), *py = malloc((size_t)n * sizeof *py);
    cr_assert_eq(tk_matrix_to_f32(mx, px, stride), TK_OK);
    cr_assert_eq(tk_matrix_to_f32(my, py, stride), TK_OK);
    cr_assert_eq(tk_matrix_to_f32(vo, got, stride), TK_OK);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            int64_t i = r * stride + c;
            float want = ref_axpy(3.0f, px[i], py[i], arith);
            if (dtype == TK_DTYPE_BF16)
                want = tk_bf16_to_f32(tk_bf16_from_f32(want));
            cr_assert_eq(tkt_bits(got[i]), tkt_bits(want),
                         "%s arith %d tail %d body %d at (%lld, %lld): 0x%08x, not 0x%08x",
                         tk_dtype_name(dtype), arith, tail, body, (long long)r, (long long)c,
                         tkt_bits(got[i]), tkt_bits(want));
        }
    tk_tiling_destroy(t);
    tk_kernel_destroy(k);
    tk_matrix_destroy(vx), tk_matrix_destroy(vy), tk_matrix_destroy(vo);
    tk_matrix_destroy(mx), tk_matrix_destroy(my), tk_matrix_destroy(out);
    free(x), free(y), free(got), free(px), free(py);
}

Test(arith, every_path_of_the_host_kernel)
{
    const int tails[] = {TK_TAIL_MASK, TK_TAIL_PAD, TK_TAIL_SHIFT_INWARDS};
    for (int arith = 0; arith <= TK_ARITH_XLA; arith++)
        for (int d = 0; d < 2; d++)
            for (int t = 0; t < 3; t++)
                for (int body = TK_BODY_ELEMENTWISE; body <= TK_BODY_BLOCKWISE; body++) {
                    if (body == TK_BODY_BLOCKWISE && tails[t] == TK_TAIL_SHIFT_INWARDS)
                        continue;
                    int dtype = d ? TK_DTYPE_BF16 : TK_DTYPE_F32;
                    expect_kernel(dtype, arith, tails[t], body, 17, 257, 257);
                    expect_kernel(dtype, arith, tails[t], body, 17, 257, 300);
                }
}

/* The cases measured in Pallas's TPU interpret mode (XLA on CPU), which
 * fuses and flushes; TK_ARITH_XLA gives its bits, the default numpy's. */
Test(arith, the_cases_measured_against_pallas)
{
    const struct {
        int dtype;
        float alpha;
        uint32_t x, y, numpy, xla;   /* stored bits */
    } cases[] = {
        {TK_DTYPE_F32, 2.0f, 0x00000001u, 0x00000000u, 0x00000002u, 0x00000000u},
        {TK_DTYPE_BF16, 2.0f, 0x000bu, 0x8000u, 0x0016u, 0x0000u},
        {TK_DTYPE_F32, 2.0f, 0x7f7fc99eu, 0xff7fc99eu, 0x7f800000u, 0x7f7fc99eu},
        {TK_DTYPE_F32, 3.0f, 0xbf4d4b61u, 0x3f86cc7fu, 0xbfad2493u, 0xbfad2492u},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int arith = 0; arith <= TK_ARITH_XLA; arith += TK_ARITH_XLA) {
            int dtype = cases[i].dtype;
            uint32_t xb = cases[i].x, yb = cases[i].y, ob = 0xDEADu;
            tk_matrix *x, *y, *o;
            cr_assert_eq(tk_matrix_wrap(&x, dtype, 1, 1, 1, &xb), TK_OK);
            cr_assert_eq(tk_matrix_wrap(&y, dtype, 1, 1, 1, &yb), TK_OK);
            cr_assert_eq(tk_matrix_wrap(&o, dtype, 1, 1, 1, &ob), TK_OK);
            tk_kernel *k = axpy(cases[i].alpha, arith);
            tk_tiling *t;
            cr_assert_eq(tk_tiling_create(&t, 1, 1, 8, 128), TK_OK);
            const tk_matrix *in[2] = {x, y};
            cr_assert_eq(tk_kernel_run(k, t, in, o), TK_OK);
            uint32_t got = dtype == TK_DTYPE_BF16 ? (ob & 0xFFFFu) : ob;
            uint32_t want = arith ? cases[i].xla : cases[i].numpy;
            cr_assert_eq(got, want, "case %zu arith %d: 0x%x, not 0x%x", i, arith, got, want);
            tk_tiling_destroy(t);
            tk_kernel_destroy(k);
            tk_matrix_destroy(x), tk_matrix_destroy(y), tk_matrix_destroy(o);
        }
}

Test(arith, the_pipeline_computes_what_the_kernel_does)
{
    enum { R = 40, C = 300 };
    static float x[R * C], y[R * C], a[R * C], b[R * C];
    fill(x, y, R * C, 5);
    tk_device *d;
    cr_assert_eq(tk_device_simulated(&d, "TPU v5 lite"), TK_OK);
    for (int arith = 0; arith <= TK_ARITH_XLA; arith++) {
        tk_matrix *mx, *my, *ok, *op;
        cr_assert_eq(tk_matrix_wrap(&mx, TK_DTYPE_F32, R, C, C, x), TK_OK);
        cr_assert_eq(tk_matrix_wrap(&my, TK_DTYPE_F32, R, C, C, y), TK_OK);
        cr_assert_eq(tk_matrix_wrap(&ok, TK_DTYPE_F32, R, C, C, a), TK_OK);
        cr_assert_eq(tk_matrix_wrap(&op, TK_DTYPE_F32, R, C, C, b), TK_OK);
        tk_kernel *k = axpy(0.75f, arith);
        tk_tiling *t;
        tk_pipeline *p;
        cr_assert_eq(tk_tiling_create(&t, R, C, 8, 128), TK_OK);
        cr_assert_eq(tk_pipeline_create(&p, k, t, d), TK_OK);
        const tk_matrix *in[2] = {mx, my};
        cr_assert_eq(tk_kernel_run(k, t, in, ok), TK_OK);
        cr_assert_eq(tk_pipeline_run(p, in, op), TK_OK, "%s", tk_last_error_message());
        for (int i = 0; i < R * C; i++) {
            cr_assert_eq(tkt_bits(a[i]), tkt_bits(ref_axpy(0.75f, x[i], y[i], arith)));
            cr_assert_eq(tkt_bits(b[i]), tkt_bits(a[i]), "arith %d at %d", arith, i);
        }
        tk_pipeline_destroy(p);
        tk_tiling_destroy(t);
        tk_kernel_destroy(k);
        tk_matrix_destroy(mx), tk_matrix_destroy(my), tk_matrix_destroy(ok),
            tk_matrix_destroy(op);
    }
    tk_device_destroy(d);
}

static int body(void *user, int64_t rows, int64_t cols, int64_t ld, const float *const *in,
                float *out)
{
    (void)user, (void)rows, (void)cols, (void)ld, (void)in, (void)out;
    return 0;
}

Test(arith, the_setting_is_checked)
{
    tk_kernel *k = axpy(1.0f, TK_ARITH_NUMPY), *c;
    int64_t v = -1;
    cr_assert_eq(tk_kernel_get(k, TK_KERNEL_ARITH, &v), TK_OK);
    cr_assert_eq(v, TK_ARITH_NUMPY);
    cr_assert_eq(tk_kernel_set(k, TK_KERNEL_ARITH, TK_ARITH_XLA), TK_OK);
    cr_assert_eq(tk_kernel_get(k, TK_KERNEL_ARITH, &v), TK_OK);
    cr_assert_eq(v, TK_ARITH_FMA | TK_ARITH_FTZ);
    tkt_expect_status(tk_kernel_set(k, TK_KERNEL_ARITH, 4), TK_ERANGE);
    cr_assert_eq(tk_kernel_get(k, TK_KERNEL_ARITH, &v), TK_OK);
    cr_assert_eq(v, TK_ARITH_XLA, "a refused setting changed the kernel");
    cr_assert_eq(tk_kernel_custom(&c, 2, body, NULL), TK_OK);
    tkt_expect_status(tk_kernel_set(c, TK_KERNEL_ARITH, TK_ARITH_FMA), TK_EINVAL);
    cr_assert(strstr(tk_last_error_message(), "custom body's arithmetic is its own code"),
              "%s", tk_last_error_message());
    cr_assert_eq(tk_kernel_set(c, TK_KERNEL_ARITH, TK_ARITH_NUMPY), TK_OK);
    tk_kernel_destroy(k);
    tk_kernel_destroy(c);
}

/* ---- the audit: the oracle honours the setting; the diagnosis names it -- */

/* With TK_ARITH_FTZ: zeros come out as +0 whatever their sign. */
#define UNSIGNED_ZERO 0x100

static int candidate(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    int arith = *(const int *)user & ~UNSIGNED_ZERO;
    bool unsigned_zero = *(const int *)user & UNSIGNED_ZERO;
    int64_t rows = tk_matrix_rows(out), cols = tk_matrix_cols(out);
    int dtype = tk_matrix_dtype(out);
    float *x = malloc((size_t)(rows * cols) * sizeof *x), *y = malloc((size_t)(rows * cols) * sizeof *y);
    tk_matrix_to_f32(in[0], x, cols);
    tk_matrix_to_f32(in[1], y, cols);
    for (int64_t i = 0; i < rows * cols; i++) {
        x[i] = ref_axpy(3.0f, x[i], y[i], arith);
        if (unsigned_zero && x[i] == 0.0f)
            x[i] = 0.0f;
    }
    tk_matrix *m;
    int rc = tk_matrix_from_f32(&m, dtype, rows, cols, x, cols);
    for (int64_t r = 0; !rc && r < rows; r++)
        memcpy((char *)tk_matrix_data(out) + r * tk_matrix_row_stride(out) * tk_dtype_size(dtype),
               (char *)tk_matrix_data(m) + r * cols * tk_dtype_size(dtype),
               (size_t)(cols * tk_dtype_size(dtype)));
    tk_matrix_destroy(m);
    free(x), free(y);
    return rc;
}

/* The diagnosis of a candidate computing with `cand` under a contract of
 * `contract`, on data with (subnormals) or without subnormals. */
static double audit(int contract, int cand, int dtype, bool subnormals)
{
    enum { R = 9, C = 129 };
    static float x[R * C], y[R * C];
    if (subnormals) {
        fill(x, y, R * C, 9);
    } else {
        tkt_fill(x, R * C, 9);
        tkt_fill(y, R * C, 10);
    }
    tk_kernel *k = axpy(3.0f, contract);
    tk_audit *a;
    cr_assert_eq(tk_audit_create(&a, k), TK_OK);
    cr_assert_eq(tk_audit_set_candidate(a, candidate, &cand), TK_OK);
    const float *orig[2] = {x, y};
    cr_assert_eq(tk_audit_add_case(a, dtype, R, C, orig), TK_OK);
    int rc = tk_audit_run(a);
    cr_assert(rc == TK_OK || rc == TK_EMISMATCH, "%s", tk_last_error_message());
    double d;
    cr_assert_eq(tk_audit_result(a, 0, TK_AUDIT_DIAGNOSIS, &d), TK_OK);
    cr_assert_eq(rc == TK_OK, d == TK_SCHEDULE_NOT_RUN);
    tk_audit_destroy(a);
    tk_kernel_destroy(k);
    return d;
}

/* Whether fusing changes any stored result of audit()'s data without
 * subnormals in dtype. */
static bool fusing_shows(int dtype)
{
    enum { R = 9, C = 129 };
    static float x[R * C], y[R * C];
    tkt_fill(x, R * C, 9);
    tkt_fill(y, R * C, 10);
    for (int i = 0; i < R * C; i++) {
        float px = x[i], py = y[i];
        if (dtype == TK_DTYPE_BF16) {
            px = tk_bf16_to_f32(tk_bf16_from_f32(px));
            py = tk_bf16_to_f32(tk_bf16_from_f32(py));
        }
        float a = ref_axpy(3.0f, px, py, TK_ARITH_NUMPY), b = ref_axpy(3.0f, px, py,
                                                                        TK_ARITH_FMA);
        if (dtype == TK_DTYPE_BF16 ? tk_bf16_from_f32(a) != tk_bf16_from_f32(b)
                                   : tkt_bits(a) != tkt_bits(b))
            return true;
    }
    return false;
}

Test(arith, the_audit_passes_the_declared_arithmetic_and_names_the_others)
{
    for (int d = 0; d < 2; d++) {
        int dtype = d ? TK_DTYPE_BF16 : TK_DTYPE_F32;
        double got;
        for (int arith = 0; arith <= TK_ARITH_XLA; arith++)
            cr_assert_eq(audit(arith, arith, dtype, true), TK_SCHEDULE_NOT_RUN,
                         "%s arith %d", tk_dtype_name(dtype), arith);
        /* Fusing moves an f32 result by at most an ULP, which the cast to
         * bf16 may hide: where no stored result differs, the audit passes. */
        bool differs = fusing_shows(dtype);
        int fused = differs ? TK_SCHEDULE_FUSED_MULADD : TK_SCHEDULE_NOT_RUN;
        int separate = differs ? TK_SCHEDULE_SEPARATE_MULADD : TK_SCHEDULE_NOT_RUN;
        got = audit(TK_ARITH_NUMPY, TK_ARITH_FMA, dtype, false);
        cr_assert_eq(got, fused, "%s: %g", tk_dtype_name(dtype), got);
        got = audit(TK_ARITH_XLA, TK_ARITH_NUMPY, dtype, false);
        cr_assert_eq(got, separate, "%s: %g", tk_dtype_name(dtype), got);
        cr_assert_eq(audit(TK_ARITH_NUMPY, TK_ARITH_FTZ, dtype, true),
                     TK_SCHEDULE_FLUSH_SUBNORMAL);
        cr_assert_eq(audit(TK_ARITH_XLA, TK_ARITH_FMA, dtype, true), TK_SCHEDULE_KEEP_SUBNORMAL);
        /* numpy code against the XLA contract, and XLA against numpy's: on
         * data with subnormals where fusing also shows, neither flag alone
         * explains the candidate (where fusing is hidden, the flush does). */
        got = audit(TK_ARITH_XLA, TK_ARITH_NUMPY, dtype, true);
        cr_assert_eq(got, differs ? TK_SCHEDULE_NUMPY_ARITH : TK_SCHEDULE_KEEP_SUBNORMAL,
                     "%s: %s", tk_dtype_name(dtype), tk_audit_schedule_name((int)got));
        got = audit(TK_ARITH_NUMPY, TK_ARITH_XLA, dtype, true);
        cr_assert_eq(got, differs ? TK_SCHEDULE_XLA_ARITH : TK_SCHEDULE_FLUSH_SUBNORMAL,
                     "%s: %s", tk_dtype_name(dtype), tk_audit_schedule_name((int)got));
        /* A contract with one flag against a candidate with the other:
         * both changed. */
        got = audit(TK_ARITH_FMA, TK_ARITH_FTZ, dtype, true);
        cr_assert_eq(got, differs ? TK_SCHEDULE_SEPARATE_FLUSH : TK_SCHEDULE_FLUSH_SUBNORMAL,
                     "%s: %s", tk_dtype_name(dtype), tk_audit_schedule_name((int)got));
        got = audit(TK_ARITH_FTZ, TK_ARITH_FMA, dtype, true);
        cr_assert_eq(got, differs ? TK_SCHEDULE_FUSED_KEEP_SUBNORMAL
                                  : TK_SCHEDULE_KEEP_SUBNORMAL,
                     "%s: %s", tk_dtype_name(dtype), tk_audit_schedule_name((int)got));
    }
    cr_assert_eq(fusing_shows(TK_DTYPE_F32), true, "the f32 data must show fusing");
}

/* A flush to +0 whatever the sign: the verdict takes +0 and -0 as equal,
 * so it passes a flushing contract, and the diagnosis compares as the
 * verdict does, so it names the flush against the default contract (it
 * was "unknown" when schedules had to match bit for bit). */
Test(arith, a_flush_to_unsigned_zeros_is_named_a_flush)
{
    enum { R = 9, C = 129 };
    float x[R * C], y[R * C];
    fill(x, y, R * C, 9);   /* audit()'s data */
    int negative = 0;
    for (int i = 0; i < R * C; i++)
        negative += tkt_bits(ref_axpy(3.0f, x[i], y[i], TK_ARITH_FTZ)) == 0x80000000u;
    cr_assert_gt(negative, 0, "the data must flush some results to -0");
    for (int d = 0; d < 2; d++) {
        int dtype = d ? TK_DTYPE_BF16 : TK_DTYPE_F32;
        int cand = TK_ARITH_FTZ | UNSIGNED_ZERO;
        cr_assert_eq(audit(TK_ARITH_FTZ, cand, dtype, true), TK_SCHEDULE_NOT_RUN, "%s",
                     tk_dtype_name(dtype));
        double got = audit(TK_ARITH_NUMPY, cand, dtype, true);
        cr_assert_eq(got, TK_SCHEDULE_FLUSH_SUBNORMAL, "%s: %s", tk_dtype_name(dtype),
                     tk_audit_schedule_name((int)got));
    }
    cr_assert_str_eq(tk_audit_schedule_name(TK_SCHEDULE_XLA_ARITH), "xla-arithmetic");
    cr_assert_str_eq(tk_audit_schedule_name(TK_SCHEDULE_NUMPY_ARITH), "numpy-arithmetic");
    cr_assert_str_eq(tk_audit_schedule_name(TK_SCHEDULE_FUSED_MULADD), "fused-multiply-add");
    cr_assert_str_eq(tk_audit_schedule_name(TK_SCHEDULE_SEPARATE_MULADD),
                     "separate-multiply-add");
    cr_assert_str_eq(tk_audit_schedule_name(TK_SCHEDULE_KEEP_SUBNORMAL), "subnormals-kept");
    cr_assert_str_eq(tk_audit_schedule_name(TK_SCHEDULE_FUSED_KEEP_SUBNORMAL),
                     "fused-subnormals-kept");
    cr_assert_str_eq(tk_audit_schedule_name(TK_SCHEDULE_SEPARATE_FLUSH),
                     "separate-subnormal-flush");
}
