/* call.c - libFuzzer harness for tk_call: fuzzed grids of rank 1 to 3,
 * inputs and outputs of every float dtype with row gaps, block shapes with
 * tails, affine index maps (identities, broadcasts, k-loops, strides,
 * offsets, some out of range) given as matrices or as callbacks, parallel
 * axes, padding fills, undo, output blocks rounded after every step or
 * not, and bodies or maps that fail at a fuzzed step.
 *
 * The reference is tk_call(3)'s semantics written plainly: the steps in
 * row-major order; every block index checked first (TK_ERANGE outside its
 * grid, TK_ELAYOUT for an output revisited along a parallel axis or after
 * it was written back, TK_ECALLBACK for a failing map), the outputs then
 * untouched; an input block promoted with the padding fill past its edge;
 * an output block filled with NaN when its index changes, rounded to its
 * dtype after every step with TK_CALL_ROUND_STEPS, and written back, cast,
 * when it changes again or the grid ends.  The body is one
 * function that both sides run on their blocks.  A run must match the
 * reference's status, output bytes (row gaps included), statistics and,
 * inside the body, every field of every block; inputs never change.  A
 * second run of the same call (its block indices kept), and a third after
 * a dimension is set again, must do the same; a callback map is asked for
 * every step on every run.  Faults in the maps are found before the body
 * runs.  A body that fails leaves the outputs as they were with undo, and
 * without it each element either as it was or as the complete run leaves
 * it (an output block is written back once), the failing step's block as
 * it was, and a message that says so.  tk_call_check_padding counts the
 * elements that differ between zero and NaN fills.  The pipeline simulator
 * on the host device, with fuzzed slot counts, runs the same call: refused
 * for a hazard (TK_ERACE) with nothing run, or with tk_call_run's results
 * and its failures.  Failures return a documented status with a message
 * of their own; successes leave the thread's message as it was. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tilekern.h>

#include "fuzz.h"

enum { MAX_IN = 3, MAX_OUT = 2, MAX_OPS = MAX_IN + MAX_OUT, MAX_STEPS = 6 * 6 * 6 };

typedef struct {
    int dtype;
    int64_t rows, cols, br, bc, stride;   /* stride in elements */
    int64_t map[2 * (TK_CALL_MAX_RANK + 1)];
    bool callback;
    int64_t fail_at;                      /* the callback map fails at this step */
    unsigned char *mem, *before;
    size_t bytes;
    tk_matrix *m;
} operand;

typedef struct {
    int rank, n_in, n_out;
    int64_t grid[TK_CALL_MAX_RANK], steps;
    bool parallel[TK_CALL_MAX_RANK];
    int pad;                              /* 0: leave the default (zero) */
    float pad_value;
    int undo;
    bool round;                           /* TK_CALL_ROUND_STEPS */
    int64_t body_fails_at;                /* -1: never */
    operand op[MAX_OPS];                  /* inputs, then outputs */
    /* The reference's block indices, step by step. */
    int64_t bi[MAX_STEPS][MAX_OPS][2];
    int64_t calls;                        /* body calls in the current run */
    bool asked[MAX_STEPS][MAX_OPS];       /* a callback map asked, this run */
} spec;

static const int dtypes[5] = {TK_DTYPE_F32, TK_DTYPE_BF16, TK_DTYPE_F16, TK_DTYPE_F8E4M3FN,
                              TK_DTYPE_F8E5M2};
static const float pad_values[4] = {-0.0f, 1.5f, 1e30f, -INFINITY};

static void grid_index(const spec *s, int64_t step, int64_t *g)
{
    for (int a = s->rank - 1; a >= 0; a--) {
        g[a] = step % s->grid[a];
        step /= s->grid[a];
    }
}

static void apply_map(const spec *s, const operand *o, const int64_t *g, int64_t *bi)
{
    for (int r = 0; r < 2; r++) {
        const int64_t *row = o->map + r * (s->rank + 1);
        int64_t v = row[s->rank];
        for (int a = 0; a < s->rank; a++)
            v += row[a] * g[a];
        bi[r] = v;
    }
}

/* A callback map: the operand's affine map, failing at one step. */
typedef struct { spec *s; int op; } map_user;
static map_user map_users[MAX_OPS];

static int callback_map(void *user, const int64_t *g, int rank, int64_t *row, int64_t *col)
{
    map_user *u = user;
    spec *s = u->s;
    const operand *o = &s->op[u->op];
    check(rank == s->rank);
    int64_t step = 0, bi[2];
    for (int a = 0; a < rank; a++) {
        check(g[a] >= 0 && g[a] < s->grid[a]);
        step = step * s->grid[a] + g[a];
    }
    s->asked[step][u->op] = true;
    if (step == o->fail_at)
        return 5;
    apply_map(s, o, g, bi);
    *row = bi[0];
    *col = bi[1];
    return 0;
}

/* ---- the body, run by both sides ----------------------------------------- */

typedef struct {
    float *data;
    int64_t ld, rows, cols;
} view;

/* Each output element: its resident value (1 on the first visit, when it
 * is NaN), halved, plus every input's element at the same place folded
 * into the input's block, plus a weighted sum of each input's whole block
 * (its padding included), plus a little of the step. */
static void compute(const spec *s, int64_t step, const view *in, view *out)
{
    float whole = 0.0f;
    for (int i = 0; i < s->n_in; i++)
        for (int64_t r = 0; r < in[i].rows; r++)
            for (int64_t c = 0; c < in[i].cols; c++)
                whole += (float)((r * 7 + c * 3) % 5 + 1) * 0.0625f *
                         in[i].data[r * in[i].ld + c];
    for (int o = 0; o < s->n_out; o++)
        for (int64_t r = 0; r < out[o].rows; r++)
            for (int64_t c = 0; c < out[o].cols; c++) {
                float *p = &out[o].data[r * out[o].ld + c];
                float v = isnan(*p) ? 1.0f : *p * 0.5f;
                for (int i = 0; i < s->n_in; i++)
                    v += (float)(i + 1 + o) *
                         in[i].data[(r % in[i].rows) * in[i].ld + c % in[i].cols];
                *p = v + whole + 0.25f * (float)step;
            }
}

static int body(void *user, tk_block *const *blocks, int n_blocks)
{
    spec *s = user;
    check(n_blocks == s->n_in + s->n_out);
    int64_t step = s->calls++ % s->steps, g[TK_CALL_MAX_RANK] = {0};  /* runs in turn */
    grid_index(s, step, g);
    view v[MAX_OPS];
    for (int i = 0; i < n_blocks; i++) {
        const tk_block *b = blocks[i];
        const operand *o = &s->op[i];
        int64_t r0 = s->bi[step][i][0] * o->br, c0 = s->bi[step][i][1] * o->bc;
        check(b->size >= sizeof(tk_block) && b->data && b->ld >= o->bc);
        check(b->rows == o->br && b->cols == o->bc);
        check(b->block_row == s->bi[step][i][0] && b->block_col == s->bi[step][i][1]);
        check(b->valid_rows == (o->rows - r0 < o->br ? o->rows - r0 : o->br));
        check(b->valid_cols == (o->cols - c0 < o->bc ? o->cols - c0 : o->bc));
        check(b->rank == s->rank && b->is_output == (i >= s->n_in));
        check(b->operand == (i < s->n_in ? i : i - s->n_in));
        for (int a = 0; a < TK_CALL_MAX_RANK; a++)
            check(b->grid[a] == (a < s->rank ? g[a] : 0));
        v[i] = (view){b->data, b->ld, b->rows, b->cols};
    }
    if (step == s->body_fails_at)
        return 3;
    compute(s, step, v, v + s->n_in);
    return 0;
}

/* ---- the reference ---------------------------------------------------- */

/* Whether operand i has the same block at steps t and u. */
static bool same_block(const spec *s, int64_t t, int64_t u, int i)
{
    return s->bi[t][i][0] == s->bi[u][i][0] && s->bi[t][i][1] == s->bi[u][i][1];
}

typedef struct { int64_t steps, in, skipped, out, bytes_in, bytes_out; } stats;

static float stored(const operand *o, int64_t r, int64_t c)
{
    float f;
    size_t es = (size_t)tk_dtype_size(o->dtype);
    check(tk_dtype_to_f32_n(o->dtype, &f, o->mem + ((size_t)(r * o->stride + c)) * es, 1) ==
          TK_OK);
    return f;
}

/* The block indices of every step, and the failures the checks may give
 * (more than one when the call has more than one fault): their count. */
static int reference_checks(spec *s, int *errs)
{
    bool range = false, layout = false, failed_map = false;
    for (int64_t t = 0; t < s->steps; t++) {
        int64_t g[TK_CALL_MAX_RANK];
        grid_index(s, t, g);
        for (int i = 0; i < s->n_in + s->n_out; i++) {
            const operand *o = &s->op[i];
            if (o->callback && t == o->fail_at)
                failed_map = true;
            apply_map(s, o, g, s->bi[t][i]);
            int64_t nr = (o->rows + o->br - 1) / o->br, nc = (o->cols + o->bc - 1) / o->bc;
            if (s->bi[t][i][0] < 0 || s->bi[t][i][0] >= nr || s->bi[t][i][1] < 0 ||
                s->bi[t][i][1] >= nc)
                range = true;
        }
    }
    for (int o = s->n_in; o < s->n_in + s->n_out; o++)
        for (int64_t t = 0; t < s->steps; t++)
            for (int64_t u = 0; u < t; u++) {
                if (!same_block(s, t, u, o))
                    continue;
                int64_t gt[TK_CALL_MAX_RANK], gu[TK_CALL_MAX_RANK];
                grid_index(s, t, gt);
                grid_index(s, u, gu);
                /* From two indices on a parallel axis, or back after
                 * another block. */
                for (int a = 0; a < s->rank; a++)
                    layout |= s->parallel[a] && gt[a] != gu[a];
                layout |= !same_block(s, t - 1, t, o);
            }
    int n = 0;
    if (failed_map)
        errs[n++] = TK_ECALLBACK;
    if (range)
        errs[n++] = TK_ERANGE;
    if (layout)
        errs[n++] = TK_ELAYOUT;
    return n;
}

/* The outputs' bytes after a complete run with this fill past the inputs'
 * edges, into want[o], and the stats. */
static void reference_run(spec *s, float fill, unsigned char **want, stats *ref)
{
    float *blk[MAX_OPS];
    memset(ref, 0, sizeof *ref);
    for (int i = 0; i < s->n_in + s->n_out; i++) {
        blk[i] = malloc((size_t)(s->op[i].br * s->op[i].bc) * sizeof(float));
        check(blk[i] != NULL);
    }
    for (int o = 0; o < s->n_out; o++)
        memcpy(want[o], s->op[s->n_in + o].before, s->op[s->n_in + o].bytes);
    for (int64_t t = 0; t <= s->steps; t++) {
        /* Write back the outputs whose block changes (all, at the end). */
        for (int i = s->n_in; i < s->n_in + s->n_out && t > 0; i++) {
            const operand *o = &s->op[i];
            if (t < s->steps && same_block(s, t, t - 1, i))
                continue;
            int64_t r0 = s->bi[t - 1][i][0] * o->br, c0 = s->bi[t - 1][i][1] * o->bc;
            size_t es = (size_t)tk_dtype_size(o->dtype);
            int64_t vr = 0, vc = 0;
            for (int64_t r = 0; r < o->br && r0 + r < o->rows; r++, vr++)
                for (vc = 0; vc < o->bc && c0 + vc < o->cols; vc++)
                    check(tk_dtype_from_f32_n(o->dtype,
                                              want[i - s->n_in] +
                                                  (size_t)((r0 + r) * o->stride + c0 + vc) * es,
                                              &blk[i][r * o->bc + vc], 1) == TK_OK);
            ref->out++;
            ref->bytes_out += vr * vc * (int64_t)es;
        }
        if (t == s->steps)
            break;
        for (int i = 0; i < s->n_in + s->n_out; i++) {
            const operand *o = &s->op[i];
            bool same = t > 0 && same_block(s, t, t - 1, i);
            if (i >= s->n_in) {
                if (!same)
                    for (int64_t e = 0; e < o->br * o->bc; e++)
                        blk[i][e] = NAN;
                continue;
            }
            if (same) {
                ref->skipped++;
                continue;
            }
            int64_t r0 = s->bi[t][i][0] * o->br, c0 = s->bi[t][i][1] * o->bc, valid = 0;
            for (int64_t r = 0; r < o->br; r++)
                for (int64_t c = 0; c < o->bc; c++) {
                    bool inside = r0 + r < o->rows && c0 + c < o->cols;
                    blk[i][r * o->bc + c] = inside ? stored(o, r0 + r, c0 + c) : fill;
                    valid += inside;
                }
            ref->in++;
            ref->bytes_in += valid * tk_dtype_size(o->dtype);
        }
        view v[MAX_OPS];
        for (int i = 0; i < s->n_in + s->n_out; i++)
            v[i] = (view){blk[i], s->op[i].bc, s->op[i].br, s->op[i].bc};
        compute(s, t, v, v + s->n_in);
        for (int i = s->n_in; i < s->n_in + s->n_out && s->round; i++)   /* the output refs */
            for (int64_t e = 0; e < s->op[i].br * s->op[i].bc; e++) {
                unsigned char code[4];
                check(tk_dtype_from_f32_n(s->op[i].dtype, code, &blk[i][e], 1) == TK_OK);
                check(tk_dtype_to_f32_n(s->op[i].dtype, &blk[i][e], code, 1) == TK_OK);
            }
    }
    ref->steps = s->steps;
    for (int i = 0; i < s->n_in + s->n_out; i++)
        free(blk[i]);
}

/* ---- one fuzzed call ---------------------------------------------------- */

static void make_operand(bytes *b, spec *s, operand *o, bool output)
{
    o->dtype = dtypes[take(b, 0, 4)];
    o->br = take(b, 1, 12);
    o->bc = take(b, 1, 12);
    int64_t blocks[2];
    bool identity = s->rank >= 2 && take(b, 0, 1);
    for (int r = 0; r < 2; r++) {
        int64_t *row = o->map + r * (s->rank + 1), hi = 0, lo = 0;
        for (int a = 0; a < s->rank; a++) {
            row[a] = identity ? (a == r) : take(b, 0, 7) < 5 ? take(b, 0, 1) : take(b, -1, 2);
            int64_t span = row[a] * (s->grid[a] - 1);
            hi += span > 0 ? span : 0;
            lo += span < 0 ? span : 0;
        }
        /* An offset that keeps the indices in range, mostly. */
        row[s->rank] = identity ? 0 : -lo + take(b, 0, 1);
        if (take(b, 0, 15) == 15)
            row[s->rank] += take(b, -2, 1);
        blocks[r] = row[s->rank] + hi + 1 + take(b, 0, 1);
        if (take(b, 0, 15) == 15)
            blocks[r] -= take(b, 1, 2);   /* too few blocks */
        if (blocks[r] < 1)
            blocks[r] = 1;
    }
    o->rows = (blocks[0] - 1) * o->br + take(b, 1, (int)o->br);
    o->cols = (blocks[1] - 1) * o->bc + take(b, 1, (int)o->bc);
    o->stride = o->cols + take(b, 0, 2);
    o->callback = take(b, 0, 3) == 3;
    o->fail_at = o->callback && take(b, 0, 7) == 7 ? take(b, 0, (int)s->steps - 1) : -1;
    size_t es = (size_t)tk_dtype_size(o->dtype);
    o->bytes = (size_t)(o->rows * o->stride) * es;
    o->mem = malloc(o->bytes);
    o->before = malloc(o->bytes);
    check(o->mem && o->before);
    /* Outputs and row gaps: any bytes; inputs: small values mostly, any
     * code (NaN and infinities among them) now and then. */
    uint64_t seed = (uint64_t)take(b, 0, 255) * 0x9E3779B97F4A7C15ull + 1;
    for (size_t k = 0; k < o->bytes; k++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        o->mem[k] = (unsigned char)(seed >> 56);
    }
    if (!output && take(b, 0, 3) != 3)
        for (int64_t r = 0; r < o->rows; r++)
            for (int64_t c = 0; c < o->cols; c++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                float f = (float)(seed >> 60) * 0.125f - 1.0f;
                check(tk_dtype_from_f32_n(o->dtype, o->mem + (size_t)(r * o->stride + c) * es,
                                          &f, 1) == TK_OK);
            }
    memcpy(o->before, o->mem, o->bytes);
    check(tk_matrix_wrap(&o->m, o->dtype, o->rows, o->cols, o->stride, o->mem) == TK_OK);
}

/* A run of the call, or of the pipeline p simulating it on the host: once
 * its schedule is free of hazards it computes what tk_call_run does, and
 * when it is not (TK_ERACE) it runs nothing. */
static void run_once(spec *s, tk_call *c, tk_pipeline *p, const int *errs, int n_errs,
                     unsigned char **want, const stats *ref)
{
    const tk_matrix *in[MAX_IN];
    tk_matrix *out[MAX_OUT];
    for (int i = 0; i < s->n_in; i++)
        in[i] = s->op[i].m;
    for (int o = 0; o < s->n_out; o++)
        out[o] = s->op[s->n_in + o].m;
    /* Outputs start from their old bytes on every run. */
    for (int o = 0; o < s->n_out; o++)
        memcpy(s->op[s->n_in + o].mem, s->op[s->n_in + o].before, s->op[s->n_in + o].bytes);
    s->calls = 0;
    memset(s->asked, 0, sizeof s->asked);
    mark();
    int rc = p ? tk_pipeline_run_call(p, s->n_in, in, s->n_out, out)
               : tk_call_run(c, s->n_in, in, s->n_out, out);
    bool partly = strstr(tk_last_error_message(), "partly written") != NULL;
    st(rc);
    if (p && rc == TK_ERACE) {
        check(!n_errs && s->calls == 0);
        n_errs = 1;   /* the outputs as they were */
    } else if (n_errs) {   /* found before anything runs */
        bool listed = false;
        for (int k = 0; k < n_errs; k++)
            listed |= rc == errs[k];
        check(listed && s->calls == 0);
    } else if (s->body_fails_at >= 0) {
        check(rc == TK_ECALLBACK && s->calls == s->body_fails_at + 1);
        check(s->undo == !partly);
    } else {
        check(rc == TK_OK);
    }
    for (int i = 0; i < s->n_in; i++)
        check(memcmp(s->op[i].mem, s->op[i].before, s->op[i].bytes) == 0);
    for (int o = 0; o < s->n_out; o++) {
        const operand *op = &s->op[s->n_in + o];
        if (rc == TK_OK) {
            check(memcmp(op->mem, want[o], op->bytes) == 0);
        } else if (!n_errs && !s->undo) {
            /* Each element as it was or as a complete run leaves it (a
             * block is written back once), the failing step's block as it
             * was. */
            size_t es = (size_t)tk_dtype_size(op->dtype);
            for (size_t e = 0; e < op->bytes; e += es)
                check(!memcmp(op->mem + e, op->before + e, es) ||
                      !memcmp(op->mem + e, want[o] + e, es));
            const int64_t *bi = s->bi[s->body_fails_at][s->n_in + o];
            for (int64_t r = bi[0] * op->br; r < (bi[0] + 1) * op->br && r < op->rows; r++)
                for (int64_t k = bi[1] * op->bc; k < (bi[1] + 1) * op->bc && k < op->cols; k++) {
                    size_t at = (size_t)(r * op->stride + k) * es;
                    check(!memcmp(op->mem + at, op->before + at, es));
                }
        } else {
            check(memcmp(op->mem, op->before, op->bytes) == 0);
        }
    }
    if (rc == TK_OK) {
        check(s->calls == s->steps);
        for (int64_t t = 0; t < s->steps; t++)   /* callbacks asked on every run */
            for (int i = 0; i < s->n_in + s->n_out; i++)
                check(!s->op[i].callback || s->asked[t][i]);
    }
    if (rc == TK_OK && !p) {
        double v[6];
        static const int which[6] = {TK_STAT_STEPS, TK_STAT_COPIES_IN, TK_STAT_COPIES_SKIPPED,
                                     TK_STAT_COPIES_OUT, TK_STAT_BYTES_IN, TK_STAT_BYTES_OUT};
        for (int k = 0; k < 6; k++)
            check(tk_call_stat(c, which[k], &v[k]) == TK_OK);
        check(v[0] == (double)ref->steps && v[1] == (double)ref->in &&
              v[2] == (double)ref->skipped && v[3] == (double)ref->out &&
              v[4] == (double)ref->bytes_in && v[5] == (double)ref->bytes_out);
    }
}

/* tk_call_check_padding: the output elements whose bytes differ between
 * a run with zero and one with NaN past the inputs' edges. */
static void check_padding(spec *s, tk_call *c, const int *errs, int n_errs,
                          unsigned char **scratch)
{
    const tk_matrix *in[MAX_IN];
    for (int i = 0; i < s->n_in; i++)
        in[i] = s->op[i].m;
    int64_t changed = -7, want = 0;
    if (!n_errs && s->body_fails_at < 0) {
        unsigned char *nan_run[MAX_OUT];
        stats ref;
        for (int o = 0; o < s->n_out; o++) {
            nan_run[o] = malloc(s->op[s->n_in + o].bytes);
            check(nan_run[o] != NULL);
        }
        reference_run(s, 0.0f, scratch, &ref);
        reference_run(s, NAN, nan_run, &ref);
        for (int o = 0; o < s->n_out; o++) {
            const operand *op = &s->op[s->n_in + o];
            size_t es = (size_t)tk_dtype_size(op->dtype);
            for (int64_t r = 0; r < op->rows; r++)
                for (int64_t k = 0; k < op->cols; k++) {
                    size_t at = (size_t)(r * op->stride + k) * es;
                    want += memcmp(scratch[o] + at, nan_run[o] + at, es) != 0;
                }
            free(nan_run[o]);
        }
    }
    s->calls = 0;
    mark();
    int rc = st(tk_call_check_padding(c, s->n_in, in, &changed));
    for (int i = 0; i < s->n_in; i++)
        check(memcmp(s->op[i].mem, s->op[i].before, s->op[i].bytes) == 0);
    if (n_errs) {
        bool listed = false;
        for (int k = 0; k < n_errs; k++)
            listed |= rc == errs[k];
        check(listed && changed == -7);
    } else if (s->body_fails_at >= 0) {
        check(rc == TK_ECALLBACK && changed == -7);
    } else {
        check(rc == (want ? TK_EMISMATCH : TK_OK) && changed == want &&
              s->calls == 2 * s->steps);
    }
}

static void run_call(bytes *b)
{
    static spec s;
    memset(&s, 0, sizeof s);
    s.rank = take(b, 1, TK_CALL_MAX_RANK);
    s.steps = 1;
    for (int a = 0; a < s.rank; a++) {
        s.grid[a] = take(b, 1, 6);
        s.steps *= s.grid[a];
    }
    s.n_in = take(b, 0, MAX_IN);
    s.n_out = take(b, 1, MAX_OUT);
    for (int i = 0; i < s.n_in + s.n_out; i++)
        make_operand(b, &s, &s.op[i], i >= s.n_in);
    for (int a = 0; a < s.rank; a++)
        s.parallel[a] = take(b, 0, 2) == 2;
    int pad = take(b, 0, 3);
    s.pad = pad == 1 ? TK_PAD_ZERO : pad == 2 ? TK_PAD_NAN : pad == 3 ? TK_PAD_VALUE : 0;
    s.pad_value = pad_values[take(b, 0, 3)];
    s.undo = take(b, 0, 3) != 3;
    s.body_fails_at = take(b, 0, 5) == 5 ? take(b, 0, (int)s.steps - 1) : -1;
    s.round = take(b, 0, 3) == 3;

    tk_call *c = NULL;
    check(tk_call_create(&c, s.rank, s.grid, body, &s) == TK_OK && c);
    for (int i = 0; i < s.n_in + s.n_out; i++) {
        operand *o = &s.op[i];
        bool output = i >= s.n_in;
        int idx = output ? tk_call_add_output(c, o->dtype, o->rows, o->cols, o->br, o->bc, o->map)
                         : tk_call_add_input(c, o->dtype, o->rows, o->cols, o->br, o->bc, o->map);
        check(idx == (output ? i - s.n_in : i));
        if (o->callback) {
            map_users[i] = (map_user){&s, i};
            check(tk_call_set_map(c, output ? TK_CALL_OUTPUT : TK_CALL_INPUT, idx, callback_map,
                                  &map_users[i]) == TK_OK);
        }
    }
    for (int a = 0; a < s.rank; a++)
        check(tk_call_set_dimension(c, a, s.parallel[a] ? TK_DIM_PARALLEL : TK_DIM_ARBITRARY) ==
              TK_OK);
    if (s.pad == TK_PAD_VALUE)
        check(tk_call_set_pad_value(c, s.pad_value) == TK_OK);
    else if (s.pad)
        check(tk_call_set(c, TK_CALL_PAD, s.pad) == TK_OK);
    check(tk_call_set(c, TK_CALL_UNDO, s.undo) == TK_OK);
    check(tk_call_set(c, TK_CALL_ROUND_STEPS, s.round) == TK_OK);

    int errs[3], n_errs = reference_checks(&s, errs);
    unsigned char *want[MAX_OUT] = {NULL};
    stats ref = {0};
    for (int o = 0; o < s.n_out; o++) {
        want[o] = malloc(s.op[s.n_in + o].bytes);
        check(want[o] != NULL);
    }
    float fill = s.pad == TK_PAD_NAN ? NAN : s.pad == TK_PAD_VALUE ? s.pad_value : 0.0f;
    if (!n_errs)
        reference_run(&s, fill, want, &ref);
    run_once(&s, c, NULL, errs, n_errs, want, &ref);
    run_once(&s, c, NULL, errs, n_errs, want, &ref);   /* its block indices kept */
    /* Setting a dimension, even as it was, makes them computed again. */
    check(tk_call_set_dimension(c, s.rank - 1, s.parallel[s.rank - 1] ? TK_DIM_PARALLEL
                                                                      : TK_DIM_ARBITRARY) ==
          TK_OK);
    run_once(&s, c, NULL, errs, n_errs, want, &ref);
    /* The pipeline simulator on the host (layout tile 1x1), with fuzzed
     * slots: one output slot is a hazard on more than one step. */
    static tk_device *host;
    if (!host)
        check(tk_device_host(&host) == TK_OK);
    tk_pipeline *p = NULL;
    check(tk_pipeline_create_call(&p, c, host) == TK_OK && p);
    for (int i = 0; i < s.n_in; i++)
        check(tk_pipeline_set_buffers(p, TK_CALL_INPUT, i, take(b, 0, 3)) == TK_OK);
    for (int o = 0; o < s.n_out; o++)
        check(tk_pipeline_set_buffers(p, TK_CALL_OUTPUT, o, take(b, 0, 2)) == TK_OK);
    run_once(&s, c, p, errs, n_errs, want, &ref);
    tk_pipeline_destroy(p);
    check_padding(&s, c, errs, n_errs, want);

    tk_call_destroy(c);
    for (int o = 0; o < s.n_out; o++)
        free(want[o]);
    for (int i = 0; i < s.n_in + s.n_out; i++) {
        tk_matrix_destroy(s.op[i].m);
        free(s.op[i].mem);
        free(s.op[i].before);
    }
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    bytes b = {data, size};
    run_call(&b);
    return 0;
}
