/* report.c - the audit's text table, JSON document and SVG chart. */
#include "internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TK__SCHEMA "tilekern.audit/1"

/* ---- a growable string ----------------------------------------------------- */

typedef struct tk__sb {
    char *p;
    size_t len, cap;
    bool oom;
} tk__sb;

static void tk__sb_add(tk__sb *b, const char *fmt, ...) TK_PRINTF(2, 3);
static void tk__sb_add(tk__sb *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->oom || n < 0)
        return;
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)n;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* A number for a report: Python-style shortest decimal. */
static tk__num tk__n(double v)
{
    tk__num n;
    tk__repr(v, n.s);
    return n;
}


static double tk__res(const tk_audit *a, int64_t i, int metric)
{
    double v = 0.0;
    tk_audit_result(a, i, metric, &v);
    return v;
}

static void tk__contract_text(const tk_audit *a, tk__sb *b)
{
    static const char *const arith[4] = {
        "", ", multiply-add fused", ", subnormals flushed",
        ", multiply-add fused, subnormals flushed (XLA)"};
    int f = a->ran_as.axpy.arith;
    if (a->ran_as.reduce)
        tk__sb_add(b, "%s, out = cast(%s) accumulated in %s in any order; passes within a "
                   "rigorous error bound%s", a->ran_as.reduce == TK__REDUCE_MATMUL ? "matmul" :
                   "row sum", a->ran_as.reduce == TK__REDUCE_MATMUL ? "sum_k x[i,k] * y[k,j]" :
                   "sum_k x[i,k]", tk_dtype_name(a->ran_as.accum), arith[f]);
    else if (a->ran_as.is_axpy && f & TK_ARITH_FMA)
        tk__sb_add(b, "axpy, out = cast(f32(%s * x + y))%s", tk__n(a->ran_as.axpy.alpha).s,
                   arith[f]);
    else if (a->ran_as.is_axpy)
        tk__sb_add(b, "axpy, out = cast(f32(f32(%s * x) + y))%s", tk__n(a->ran_as.axpy.alpha).s,
                   arith[f]);
    else
        tk__sb_add(b, "custom elementwise body, out = cast(body(%d inputs))",
                   a->ran_as.n_inputs);
}

/* ---- text ------------------------------------------------------------------- */

enum { TK__CELL = 48 };  /* bytes of a table cell, NUL included */

/* A reduction case's verdict in words: the bound, where the error comes
 * closest to it, and what being bit-different from the oracle means. */
static void tk__bound_text(tk__sb *b, const tk_audit *a, int64_t i)
{
    const tk__case_result *r = &a->res[i];
    int64_t n = a->cases[i].rows * a->cases[i].cols, differ = r->impl.mismatches;
    tk__sb_add(b, "case %lld error bound: largest error/bound %s at (%lld, %lld), bound %s; ",
               (long long)i, tk__n(r->ratio).s, (long long)r->ratio_row,
               (long long)r->ratio_col, tk__n(r->bound).s);
    if (tk__case_passed(r) && differ)
        tk__sb_add(b, "correct: %lld of %lld elements differ in bits from the oracle, every "
                   "one within the bound, as another summation order gives\n",
                   (long long)differ, (long long)n);
    else if (tk__case_passed(r))
        tk__sb_add(b, "correct: bit-identical to the oracle\n");
    else
        tk__sb_add(b, "WRONG: beyond the bound of %s accumulation; explained by %s\n",
                   tk_dtype_name(a->ran_as.accum), tk_audit_schedule_name(r->diagnosis));
}

/* The cells of the text table that are not one metric. */
static void tk__cell_case(const tk_audit *a, int64_t i, char *cell)
{
    (void)a;
    snprintf(cell, TK__CELL, "%lld", (long long)i);
}

static void tk__cell_shape(const tk_audit *a, int64_t i, char *cell)
{
    const tk__case *c = &a->cases[i];
    if (c->depth)
        snprintf(cell, TK__CELL, "%lld x %lld x %lld", (long long)c->rows,
                 (long long)c->depth, (long long)c->cols);
    else
        snprintf(cell, TK__CELL, "%lld x %lld", (long long)c->rows, (long long)c->cols);
}

static void tk__cell_dtype(const tk_audit *a, int64_t i, char *cell)
{
    const tk__case *c = &a->cases[i];
    if (c->out_dtype != c->dtype)
        snprintf(cell, TK__CELL, "%s->%s", tk_dtype_name(c->dtype), tk_dtype_name(c->out_dtype));
    else
        snprintf(cell, TK__CELL, "%s", tk_dtype_name(c->dtype));
}

static void tk__cell_verdict(const tk_audit *a, int64_t i, char *cell)
{
    snprintf(cell, TK__CELL, "%s", tk__res(a, i, TK_AUDIT_PASSED) != 0.0 ? "PASS" : "FAIL");
}

static void tk__cell_diagnosis(const tk_audit *a, int64_t i, char *cell)
{
    snprintf(cell, TK__CELL, "%s", tk__res(a, i, TK_AUDIT_PASSED) != 0.0 ? "-" :
             tk_audit_schedule_name((int)tk__res(a, i, TK_AUDIT_DIAGNOSIS)));
}

static void tk__cell_gap_verdict(const tk_audit *a, int64_t i, char *cell)
{
    if (tk__res(a, i, TK_AUDIT_GAP_PASSED) != 0.0)
        snprintf(cell, TK__CELL, "within");
    else
        snprintf(cell, TK__CELL, "exceeds at %.0f of %lld",
                 tk__res(a, i, TK_AUDIT_GAP_MISMATCHES),
                 (long long)(a->cases[i].rows * a->cases[i].cols));
}

/* The text table, a row per case: each column shows one metric, as every
 * report prints numbers or as a whole count, or is filled by its own cell. */
static const struct {
    const char *head;
    int metric;  /* a TK_AUDIT_* result; 0 where cell fills the column */
    bool count;
    void (*cell)(const tk_audit *a, int64_t i, char *cell);
} tk__columns[] = {
    {"case", 0, false, tk__cell_case},
    {"shape", 0, false, tk__cell_shape},
    {"dtype", 0, false, tk__cell_dtype},
    {"impl max abs", TK_AUDIT_IMPL_MAX_ABS, false, NULL},
    {"impl max ULP", TK_AUDIT_IMPL_MAX_ULP, true, NULL},
    {"impl mismatches", TK_AUDIT_IMPL_MISMATCHES, true, NULL},
    {"implementation", 0, false, tk__cell_verdict},
    {"diagnosis", 0, false, tk__cell_diagnosis},
    {"gap max abs", TK_AUDIT_GAP_MAX_ABS, false, NULL},
    {"input part", TK_AUDIT_GAP_INPUT_MAX_ABS, false, NULL},
    {"output part", TK_AUDIT_GAP_OUTPUT_MAX_ABS, false, NULL},
    {"gap max rel", TK_AUDIT_GAP_MAX_REL, false, NULL},
    {"scale", TK_AUDIT_SCALE, false, NULL},
    {"gap atol", TK_AUDIT_GAP_ATOL, false, NULL},
    {"gap rtol", TK_AUDIT_GAP_RTOL, false, NULL},
    {"gap verdict", 0, false, tk__cell_gap_verdict},
};
enum { TK__COLS = sizeof tk__columns / sizeof *tk__columns };

static void tk__text(const tk_audit *a, tk__sb *b)
{
    int64_t n = a->n_cases, passed = 0, within = 0;
    char (*cell)[TK__COLS][TK__CELL] = calloc((size_t)n + 1, sizeof *cell);
    if (!cell) {
        b->oom = true;
        return;
    }
    int width[TK__COLS] = {0};
    for (int64_t i = 0; i <= n; i++)  /* row 0 holds the heads */
        for (int j = 0; j < TK__COLS; j++) {
            char *at = cell[i][j];
            if (i == 0)
                snprintf(at, TK__CELL, "%s", tk__columns[j].head);
            else if (tk__columns[j].cell)
                tk__columns[j].cell(a, i - 1, at);
            else if (tk__columns[j].count)
                snprintf(at, TK__CELL, "%.0f", tk__res(a, i - 1, tk__columns[j].metric));
            else
                snprintf(at, TK__CELL, "%s", tk__n(tk__res(a, i - 1, tk__columns[j].metric)).s);
            int w = (int)strlen(at);
            width[j] = w > width[j] ? w : width[j];
        }
    for (int64_t i = 0; i < n; i++) {
        passed += tk__res(a, i, TK_AUDIT_PASSED) != 0.0;
        within += tk__res(a, i, TK_AUDIT_GAP_PASSED) != 0.0;
    }
    tk__sb_add(b, "libtilekern %s audit report (schema %s)\ncontract: ",
               tk_version_string(), TK__SCHEMA);
    tk__contract_text(a, b);
    if (a->ran_as.reduce)
        tk__sb_add(b, "\nimplementation check: candidate vs the represented-input oracle "
                   "(a float64 sum of the stored inputs), within a rigorous error bound "
                   "per element: gamma(k - 1 + p) sum|x y| + the oracle's own error + "
                   "half an ULP of the output cast (tk_audit(3))\n");
    else
        tk__sb_add(b, "; inputs promoted to float32, body in float32, one final cast\n"
                   "implementation check: candidate vs the represented-input oracle "
                   "(an independent untiled loop), exact: atol 0.0, rtol 0.0, max ULP 0\n");
    tk__sb_add(b, "precision gap: candidate vs the body on the original float32 data, "
               "split into the input-representation part and the output-cast part; "
               "tolerance per dtype (torch.testing defaults unless set); its verdict "
               "is separate and never merged into the implementation verdict\n"
               "scale: max |body(original data)|; differences are float32 "
               "subtractions, as numpy computes them\n\n");
    for (int64_t i = 0; i <= n; i++) {
        for (int j = 0; j < TK__COLS; j++)
            tk__sb_add(b, "%-*s%s", j == TK__COLS - 1 ? 0 : width[j], cell[i][j],
                       j == TK__COLS - 1 ? "\n" : "  ");
    }
    free(cell);
    tk__sb_add(b, "\n");
    for (int64_t i = 0; i < n; i++) {
        const tk__case_result *r = &a->res[i];
        const tk__where *w[2] = {&r->impl.where[TK_WHERE_MAX_ABS - 1],
                                 &r->gap.where[TK_WHERE_MAX_ABS - 1]};
        const char *what[2] = {"implementation max abs", "gap max abs"};
        const char *ref[2] = {"oracle", "original reference"};
        const float max[2] = {r->impl.max_abs, r->gap.max_abs};
        for (int k = 0; k < 2; k++)
            if (max[k] > 0.0f)  /* where the largest non-zero difference is */
                tk__sb_add(b, "case %lld %s at (%lld, %lld): candidate %s, %s %s\n",
                           (long long)i, what[k], (long long)w[k]->row,
                           (long long)w[k]->col, tk__n(w[k]->actual).s, ref[k],
                           tk__n(w[k]->expected).s);
        if (r->bounded)
            tk__bound_text(b, a, i);
        else if (r->impl.mismatches) {
            const tk__where *f = &r->impl.where[TK_WHERE_FIRST_MISMATCH - 1];
            tk__sb_add(b, "case %lld first implementation mismatch at (%lld, %lld): "
                       "candidate %s, oracle %s\n", (long long)i, (long long)f->row,
                       (long long)f->col, tk__n(f->actual).s, tk__n(f->expected).s);
        }
    }
    tk__sb_add(b, "\nimplementation: %lld of %lld cases %s\nprecision gap: %lld of "
               "%lld cases within the gap tolerance (a property of the dtype, reported "
               "separately)\n", (long long)passed, (long long)n, a->ran_as.reduce ?
               "within their error bound" : "match the represented-input oracle",
               (long long)within, (long long)n);
}

/* ---- JSON ------------------------------------------------------------------- */

static void tk__json_where(tk__sb *b, const char *name, const tk__where *w)
{
    if (!w->set) {
        tk__sb_add(b, "\"%s\": null", name);
        return;
    }
    tk__sb_add(b, "\"%s\": {\"row\": %lld, \"col\": %lld, \"candidate\": %s, "
               "\"reference\": %s}", name, (long long)w->row, (long long)w->col,
               tk__jn(w->actual).s, tk__jn(w->expected).s);
}

static void tk__json(const tk_audit *a, tk__sb *b)
{
    int64_t failed = 0;
    for (int64_t i = 0; i < a->n_cases; i++)
        failed += !tk__case_passed(&a->res[i]);
    tk__sb_add(b, "{\n  \"schema\": \"%s\",\n  \"library\": \"libtilekern %s\",\n"
               "  \"contract\": {\"kind\": \"%s\", \"inputs\": %d, ", TK__SCHEMA,
               tk_version_string(), a->ran_as.is_axpy ? "axpy" : a->ran_as.reduce ==
               TK__REDUCE_MATMUL ? "matmul" : a->ran_as.reduce ? "row_sum" : "custom",
               a->ran_as.n_inputs);
    static const char *const arith[4] = {"numpy", "fma", "ftz", "xla"};
    if (a->ran_as.is_axpy)
        tk__sb_add(b, "\"alpha\": %s, ", tk__jn(a->ran_as.axpy.alpha).s);
    if (a->ran_as.is_axpy || a->ran_as.reduce)
        tk__sb_add(b, "\"arith\": \"%s\", ", arith[a->ran_as.axpy.arith]);
    if (a->ran_as.reduce)
        tk__sb_add(b, "\"accumulation\": \"%s\", ", tk_dtype_name(a->ran_as.accum));
    tk__sb_add(b, "\"body\": \"%s\", \"text\": \"", a->ran_as.reduce ? "reduction" :
               "elementwise");
    tk__contract_text(a, b);
    tk__sb_add(b, "\"},\n  \"implementation_reference\": \"represented-input oracle\",\n"
               "  \"gap_reference\": \"body on the original float32 data\",\n"
               "  \"implementation_tolerance\": %s,\n  \"implementation_passed\": %s,\n"
               "  \"cases\": [\n", a->ran_as.reduce ? "\"error bound\"" :
               "{\"atol\": 0.0, \"rtol\": 0.0, \"max_ulp\": 0}", failed ? "false" : "true");
    for (int64_t i = 0; i < a->n_cases; i++) {
        const tk__case *c = &a->cases[i];
        const tk__case_result *r = &a->res[i];
        tk__sb_add(b, "    {\"index\": %lld, \"shape\": [%lld, %lld], \"label\": "
                   "\"%lld x %lld\", \"dtype\": \"%s\", \"elements\": %lld, "
                   "\"scale\": %s,\n", (long long)i, (long long)c->rows,
                   (long long)c->cols, (long long)c->rows, (long long)c->cols,
                   tk_dtype_name(c->dtype), (long long)(c->rows * c->cols),
                   tk__jn(tk__res(a, i, TK_AUDIT_SCALE)).s);
        tk__sb_add(b, "     \"implementation\": {\"max_abs\": %s, \"max_ulp\": %llu, "
                   "\"mismatches\": %lld, \"ulp_histogram\": [%lld, %lld, %lld, %lld], "
                   "\"passed\": %s, \"diagnosis\": \"%s\", ",
                   tk__jn(tk__res(a, i, TK_AUDIT_IMPL_MAX_ABS)).s,
                   (unsigned long long)r->impl.max_ulp_seen,
                   (long long)r->impl.mismatches, (long long)r->impl.hist[0],
                   (long long)r->impl.hist[1], (long long)r->impl.hist[2],
                   (long long)r->impl.hist[3], tk__case_passed(r) ? "true" : "false",
                   tk_audit_schedule_name(r->diagnosis));
        if (r->bounded)
            tk__sb_add(b, "\"depth\": %lld, \"output_dtype\": \"%s\", \"bound\": "
                       "{\"ratio\": %s, \"bound\": %s, \"row\": %lld, \"col\": %lld}, ",
                       (long long)c->depth, tk_dtype_name(c->out_dtype),
                       tk__jn(r->ratio).s, tk__jn(r->bound).s, (long long)r->ratio_row,
                       (long long)r->ratio_col);
        tk__json_where(b, "max_abs_at", &r->impl.where[TK_WHERE_MAX_ABS - 1]);
        tk__sb_add(b, ", ");
        tk__json_where(b, "first_mismatch_at",
                       &r->impl.where[TK_WHERE_FIRST_MISMATCH - 1]);
        tk__sb_add(b, "},\n     \"gap\": {\"max_abs\": %s, \"max_rel\": %s, "
                   "\"input_representation_max_abs\": %s, \"output_cast_max_abs\": %s, "
                   "\"mismatches\": %lld, \"tolerance\": {\"atol\": %s, \"rtol\": %s}, "
                   "\"passed\": %s, ",
                   tk__jn(tk__res(a, i, TK_AUDIT_GAP_MAX_ABS)).s,
                   tk__jn(tk__res(a, i, TK_AUDIT_GAP_MAX_REL)).s,
                   tk__jn(r->input_part).s, tk__jn(r->output_part).s,
                   (long long)r->gap.mismatches, tk__jn(r->gap.atol).s,
                   tk__jn(r->gap.rtol).s, r->gap.mismatches ? "false" : "true");
        tk__json_where(b, "max_abs_at", &r->gap.where[TK_WHERE_MAX_ABS - 1]);
        tk__sb_add(b, ", ");
        tk__json_where(b, "max_rel_at", &r->gap.where[TK_WHERE_MAX_REL - 1]);
        tk__sb_add(b, "}}%s\n", i + 1 < a->n_cases ? "," : "");
    }
    tk__sb_add(b, "  ]\n}\n");
}

/* ---- SVG -------------------------------------------------------------------- */

/* The smallest 1, 2, 2.5 or 5 times a power of ten that is >= v. */
static double tk__nice(double v)
{
    if (!(v > 0.0))
        return 1.0;
    double p = pow(10.0, floor(log10(v)));
    static const double steps[] = {1.0, 2.0, 2.5, 5.0, 10.0};
    for (int i = 0; i < 5; i++)
        if (steps[i] * p >= v)
            return steps[i] * p;
    return 10.0 * p;
}

static void tk__svg(const tk_audit *a, tk__sb *b)
{
    enum { W = 760, H = 460, L = 100, R = 30, T = 70, B = 90 };
    static const char *const palette[TK__N_FLOAT] = {"#4c72b0", "#dd8452", "#55a868",
                                                     "#c44e52", "#8172b3"};
    static const int all[TK__N_FLOAT] = {TK_DTYPE_F32, TK_DTYPE_BF16, TK_DTYPE_F16,
                                         TK_DTYPE_F8E4M3FN, TK_DTYPE_F8E5M2};
    /* A bar per dtype and shape: float32 and bfloat16 always, the others
     * when a case has them. */
    int dtypes[TK__N_FLOAT], nd = 0, slot[TK__DTYPE_MAX + 1] = {0};
    const char *color[TK__N_FLOAT];
    for (int d = 0; d < TK__N_FLOAT; d++) {
        bool used = d < 2;
        for (int64_t i = 0; i < a->n_cases && !used; i++)
            used = a->cases[i].dtype == all[d];
        if (used) {
            slot[all[d]] = nd;
            color[nd] = palette[d];
            dtypes[nd++] = all[d];
        }
    }
    int64_t n = a->n_cases, ng = 0;
    /* Groups: distinct shapes in order of first appearance; each bar is the
     * largest gap of that shape and dtype (NaN when absent). */
    int64_t (*shape)[2] = calloc((size_t)n, sizeof *shape);
    double (*gap)[TK__N_FLOAT] = calloc((size_t)n, sizeof *gap);
    if (!shape || !gap) {
        free(shape);
        free(gap);
        b->oom = true;
        return;
    }
    double top = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const tk__case *c = &a->cases[i];
        int64_t g = 0;
        while (g < ng && (shape[g][0] != c->rows || shape[g][1] != c->cols))
            g++;
        if (g == ng) {
            shape[ng][0] = c->rows;
            shape[ng][1] = c->cols;
            for (int s = 0; s < nd; s++)
                gap[ng][s] = NAN;
            ng++;
        }
        int s = slot[c->dtype];
        double v = tk__res(a, i, TK_AUDIT_GAP_MAX_ABS);
        if (isnan(gap[g][s]) || v > gap[g][s])
            gap[g][s] = v;
        if (isfinite(v) && v > top)
            top = v;
    }
    double ymax = tk__nice(top), pw = W - L - R, ph = H - T - B;
    double gw = pw / (double)ng, bw = gw * 0.64 / nd;
    tk__sb_add(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
               "<title>Precision gap versus original float32 data</title>\n"
               "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n"
               "<text x=\"%d\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">"
               "Precision gap versus original float32 data</text>\n"
               "<text x=\"%d\" y=\"44\" text-anchor=\"middle\" fill=\"#555\">"
               "implementation errors versus the represented-input oracle are "
               "reported separately</text>\n", W, H, W, H, W, H, W / 2, W / 2);
    for (int i = 0; i <= 5; i++) {
        double v = ymax * i / 5.0, y = T + ph - ph * i / 5.0;
        tk__sb_add(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
                   "stroke=\"#ddd\"/>\n<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">"
                   "%.4g</text>\n", L, y, W - R, y, L - 6, y + 4, v);
    }
    for (int64_t g = 0; g < ng; g++) {
        double cx = L + gw * ((double)g + 0.5);
        for (int s = 0; s < nd; s++) {
            double v = gap[g][s], x = cx - bw * nd / 2 + bw * s;
            if (isnan(v))
                continue;
            double h = isfinite(v) ? ph * v / ymax : 0.0;
            char label[32];
            snprintf(label, sizeof label, "%.4g", v);
            tk__sb_add(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                       "fill=\"%s\"><title>%s %lld x %lld: %s</title></rect>\n"
                       "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
                       "font-size=\"11\">%s</text>\n", x, T + ph - h, bw, h, color[s],
                       tk_dtype_name(dtypes[s]), (long long)shape[g][0],
                       (long long)shape[g][1], tk__n(v).s, x + bw / 2, T + ph - h - 4,
                       label);
        }
        tk__sb_add(b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%lld x %lld"
                   "</text>\n", cx, T + (int)ph + 20, (long long)shape[g][0],
                   (long long)shape[g][1]);
    }
    tk__sb_add(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n"
               "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n"
               "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">matrix shape "
               "(rows x cols)</text>\n<text transform=\"translate(24 %d) rotate(-90)\" "
               "text-anchor=\"middle\">max gap versus original float32 values</text>\n",
               L, T + (int)ph, W - R, T + (int)ph, L, T, L, T + (int)ph,
               L + (int)pw / 2, H - 40, T + (int)ph / 2);
    for (int s = 0; s < nd; s++)
        tk__sb_add(b, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                   "<text x=\"%d\" y=\"%d\">%s</text>\n", L + 10 + s * 120, H - 26,
                   color[s], L + 28 + s * 120, H - 16, tk_dtype_name(dtypes[s]));
    tk__sb_add(b, "</svg>\n");
    free(shape);
    free(gap);
}

/* ---- writing ---------------------------------------------------------------- */

int tk_audit_write_report(const tk_audit *a, const char *path, int format)
{
    if (!a || !path)
        return tk__fail(TK_EINVAL, "tk_audit_write_report: %s is NULL",
                        !a ? "handle" : "path");
    if (format < TK_REPORT_TEXT || format > TK_REPORT_SVG)
        return tk__fail(TK_EINVAL, "tk_audit_write_report: unknown format %d "
                        "(TK_REPORT_TEXT, TK_REPORT_JSON or TK_REPORT_SVG)", format);
    if (!a->res)
        return tk__fail(TK_ESTATE, "tk_audit_write_report: no results; call "
                        "tk_audit_run after the last change");
    tk__sb b = {0};
    if (format == TK_REPORT_TEXT)
        tk__text(a, &b);
    else if (format == TK_REPORT_JSON)
        tk__json(a, &b);
    else
        tk__svg(a, &b);
    if (b.oom) {
        free(b.p);
        return tk__fail(TK_ENOMEM, "tk_audit_write_report: out of memory building "
                        "the report for %s", path);
    }
    tk__out o;
    int rc = tk__out_open(&o, "tk_audit_write_report", path);
    if (!rc) {
        fwrite(b.p, 1, b.len, o.f);  /* an error shows in ferror, which commit checks */
        rc = tk__out_commit(&o, "tk_audit_write_report", path);
    }
    free(b.p);
    return rc;
}
