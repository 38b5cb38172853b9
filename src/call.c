/* call.c - tk_call: pallas_call's grid and BlockSpecs, run on the host.
 *
 * A grid of rank 1 to 3 runs in row-major order, last axis fastest.  Each
 * operand has its own shape, dtype, block shape and index map (affine, or a
 * callback).  Every block index of every step is computed and checked before
 * anything runs, so a bad map, a revisit along a parallel axis or a
 * non-consecutive revisit of an output block leaves the outputs untouched.
 * Then, per step: an input block is promoted to f32 (padding filled past the
 * operand's edge) only when its index differs from the previous step's; an
 * output block starts as NaN, stays resident while its index repeats, and
 * is cast once and written back (past-edge elements dropped) when the index
 * changes or the grid ends.  The old contents of every block written back
 * are kept, so a failing body leaves the outputs as they were. */
#include "internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static const char *tk__kind_name(int kind)
{
    return kind == TK_CALL_INPUT ? "input" : "output";
}

int tk_call_create(tk_call **out, int rank, const int64_t *grid, tk_call_body_fn body,
                   void *user)
{
    if (!out)
        return tk__fail(TK_EINVAL, "tk_call_create: out is NULL");
    *out = NULL;
    if (rank < 1 || rank > TK_CALL_MAX_RANK)
        return tk__fail(TK_ERANGE, "tk_call_create: grid rank %d is outside [1, %d]", rank,
                        TK_CALL_MAX_RANK);
    if (!grid || !body)
        return tk__fail(TK_EINVAL, "tk_call_create: %s is NULL", !grid ? "grid" : "body");
    int64_t steps = 1;
    for (int a = 0; a < rank; a++) {
        if (grid[a] < 1)
            return tk__fail(TK_ESHAPE, "tk_call_create: grid axis %d has extent %lld; "
                            "every extent must be at least 1", a, (long long)grid[a]);
        if (!tk__mul(steps, grid[a], &steps))
            return tk__fail(TK_EOVERFLOW, "tk_call_create: the grid's step count "
                            "overflows int64 at axis %d", a);
    }
    tk_call *c = calloc(1, sizeof *c);
    if (!c)
        return tk__fail(TK_ENOMEM, "tk_call_create: out of memory for the handle");
    c->rank = rank;
    memcpy(c->grid, grid, (size_t)rank * sizeof *grid);
    c->steps = steps;
    for (int a = 0; a < TK_CALL_MAX_RANK; a++)
        c->semantics[a] = TK_DIM_ARBITRARY;
    c->body = body;
    c->user = user;
    c->pad = TK_PAD_ZERO;
    c->undo = true;
    *out = c;
    return TK_OK;
}

/* The body of a call of a kernel: the kernel's body on a step's blocks.
 * They share one leading dimension: such a call promotes every input
 * block (tk__call_execute), and a pipeline's slots are whole blocks. */
static int tk__kernel_block(void *user, tk_block *const *b, int n)
{
    const tk_kernel *k = ((const tk_call *)user)->kernel;
    const float *in[TK_KERNEL_MAX_INPUTS];
    for (int i = 0; i < n - 1; i++)
        in[i] = b[i]->data;
    return tk__body(k, b[n - 1]->rows, b[n - 1]->cols, b[n - 1]->ld, in, b[n - 1]->data);
}

int tk_call_create_kernel(tk_call **out, const tk_kernel *k, const tk_tiling *t, int dtype)
{
    if (!out)
        return tk__fail(TK_EINVAL, "tk_call_create_kernel: out is NULL");
    *out = NULL;
    if (!k || !t)
        return tk__fail(TK_EINVAL, "tk_call_create_kernel: %s is NULL", !k ? "kernel" : "tiling");
    if (k->reduce)
        return tk__fail(TK_EINVAL, "tk_call_create_kernel: a %s contract has no body to run; "
                        "write its kernel as a tk_call of its own",
                        k->reduce == TK__REDUCE_MATMUL ? "matmul" : "row-sum");
    if (t->tail == TK_TAIL_SHIFT_INWARDS)
        return tk__fail(TK_ELAYOUT, "tk_call_create_kernel: shift-inwards moves edge blocks "
                        "off multiples of the block shape, which no index map expresses; use "
                        "TK_TAIL_MASK or TK_TAIL_PAD");
    if (!tk__is_float_dtype(dtype))
        return tk__fail(TK_EDTYPE, "tk_call_create_kernel: dtype %d (%s) is not "
                        TK__FLOAT_DTYPES, dtype,
                        tk__dtype_label(dtype));
    tk_call *c;
    int64_t grid[2] = {t->grid_rows, t->grid_cols};
    int rc = tk_call_create(&c, 2, grid, tk__kernel_block, NULL);
    for (int i = 0; i <= k->n_inputs && !rc; i++) {
        int index = (i < k->n_inputs ? tk_call_add_input : tk_call_add_output)(
            c, dtype, t->rows, t->cols, t->block_rows, t->block_cols, NULL);
        rc = index < 0 ? index : TK_OK;
    }
    if (rc) {
        tk_call_destroy(c);
        return tk__call_as(rc, "tk_call_create_kernel");
    }
    c->user = c;
    c->kernel = k;
    c->tiling = *t;
    *out = c;
    return TK_OK;
}

/* A call whose body or index maps are running refuses runs and changes
 * (TK_ESTATE): a change would resize or rewrite what the run is using. */
static int tk__not_running(const char *fn, const void *h)
{
    const tk_call *c = h;
    return c && c->running ? tk__fail(TK_ESTATE, "%s: the call is running (this call came "
                                      "from its body or an index map); a running call cannot "
                                      "be changed or run again", fn) : TK_OK;
}

static void tk__plan_free(tk__plan *p)
{
    free(p->idx);
    free(p->grid);
    p->idx = p->grid = NULL;
}

void tk_call_destroy(tk_call *c)
{
    if (c) {
        free(c->work);
        free(c->wrote);
        free(c->panels);
        tk__plan_free(&c->plan);
    }
    free(c);
}

/* The index of the new operand, or a negative status. */
static int tk__add_operand(tk_call *c, int kind, int dtype, int64_t rows, int64_t cols,
                   int64_t block_rows, int64_t block_cols, const int64_t *map)
{
    const char *fn = kind == TK_CALL_INPUT ? "tk_call_add_input" : "tk_call_add_output";
    if (!c)
        return tk__fail(TK_EINVAL, "%s: call is NULL", fn);
    if (c->running)
        return tk__not_running(fn, c);
    if (c->kernel)
        return tk__fail(TK_ESTATE, "%s: a call of a kernel has its kernel's operands", fn);
    int *n = kind == TK_CALL_INPUT ? &c->n_in : &c->n_out;
    if (*n == TK_CALL_MAX_OPERANDS)
        return tk__fail(TK_ERANGE, "%s: a call takes at most %d %ss", fn,
                        TK_CALL_MAX_OPERANDS, tk__kind_name(kind));
    if (!tk__is_float_dtype(dtype))
        return tk__fail(TK_EDTYPE, "%s: dtype %d (%s) is not " TK__FLOAT_DTYPES, fn, dtype,
                        tk__dtype_label(dtype));
    if (rows < 1 || cols < 1)
        return tk__fail(TK_ESHAPE, "%s: shape must be positive: got %lldx%lld", fn,
                        (long long)rows, (long long)cols);
    if (block_rows < 1 || block_cols < 1)
        return tk__fail(TK_EINVAL, "%s: two positive integer block dimensions required: "
                        "got %lldx%lld", fn, (long long)block_rows, (long long)block_cols);
    if (!map && c->rank != 2)
        return tk__fail(TK_EINVAL, "%s: map is NULL, which means the identity (i, j) -> "
                        "(i, j), only for a rank-2 grid; this grid has rank %d", fn,
                        c->rank);
    size_t bytes;
    int rc = tk__bytes(fn, block_rows, block_cols, sizeof(float), &bytes);
    if (rc || (rc = tk__bytes(fn, rows, cols, tk__esize(dtype), &bytes)))
        return tk__fail(rc, "%s: %lldx%lld %s with %lldx%lld blocks overflows", fn,
                        (long long)rows, (long long)cols, tk_dtype_name(dtype),
                        (long long)block_rows, (long long)block_cols);
    tk__spec s = {.dtype = dtype, .rows = rows, .cols = cols, .block_rows = block_rows,
                  .block_cols = block_cols,
                  .grid_rows = rows / block_rows + (rows % block_rows != 0),
                  .grid_cols = cols / block_cols + (cols % block_cols != 0)};
    for (int r = 0; r < 2; r++)
        for (int a = 0; a <= c->rank; a++)
            s.map[r][a] = map ? map[r * (c->rank + 1) + a] : (a == r);
    (kind == TK_CALL_INPUT ? c->in : c->out)[*n] = s;
    c->ran = c->planned = false;
    return (*n)++;
}

int tk_call_add_input(tk_call *c, int dtype, int64_t rows, int64_t cols,
                      int64_t block_rows, int64_t block_cols, const int64_t *map)
{
    return tk__add_operand(c, TK_CALL_INPUT, dtype, rows, cols, block_rows, block_cols, map);
}

int tk_call_add_output(tk_call *c, int dtype, int64_t rows, int64_t cols,
                       int64_t block_rows, int64_t block_cols, const int64_t *map)
{
    return tk__add_operand(c, TK_CALL_OUTPUT, dtype, rows, cols, block_rows, block_cols, map);
}

int tk_call_set_map(tk_call *c, int kind, int index, tk_index_map_fn fn, void *user)
{
    if (!c || !fn)
        return tk__fail(TK_EINVAL, "tk_call_set_map: %s is NULL", !c ? "call" : "fn");
    if (c->running)
        return tk__not_running("tk_call_set_map", c);
    if (c->kernel)
        return tk__fail(TK_ESTATE, "tk_call_set_map: a call of a kernel maps every operand "
                        "by the identity");
    if (kind != TK_CALL_INPUT && kind != TK_CALL_OUTPUT)
        return tk__fail(TK_EINVAL, "tk_call_set_map: kind %d is not TK_CALL_INPUT or "
                        "TK_CALL_OUTPUT", kind);
    int n = kind == TK_CALL_INPUT ? c->n_in : c->n_out;
    if (index < 0 || index >= n)
        return tk__fail(TK_ERANGE, "tk_call_set_map: %s %d is outside [0, %d)",
                        tk__kind_name(kind), index, n);
    tk__spec *s = kind == TK_CALL_INPUT ? &c->in[index] : &c->out[index];
    s->fn = fn;
    s->user = user;
    c->ran = c->planned = false;
    return TK_OK;
}

int tk_call_set_dimension(tk_call *c, int axis, int semantics)
{
    if (!c)
        return tk__fail(TK_EINVAL, "tk_call_set_dimension: call is NULL");
    if (c->running)
        return tk__not_running("tk_call_set_dimension", c);
    if (axis < 0 || axis >= c->rank)
        return tk__fail(TK_ERANGE, "tk_call_set_dimension: axis %d is outside [0, %d)",
                        axis, c->rank);
    if (semantics != TK_DIM_PARALLEL && semantics != TK_DIM_ARBITRARY)
        return tk__fail(TK_EINVAL, "tk_call_set_dimension: semantics %d is not "
                        "TK_DIM_PARALLEL or TK_DIM_ARBITRARY", semantics);
    c->semantics[axis] = semantics;
    c->ran = c->planned = false;
    return TK_OK;
}

static void tk__call_store(void *h, int param, int64_t value)
{
    tk_call *c = h;
    if (param == TK_CALL_PAD)
        c->pad = (int)value;
    else if (param == TK_CALL_UNDO)
        c->undo = value;
    else
        c->round_steps = value;  /* TK_CALL_ROUND_STEPS */
}

int tk_call_set(tk_call *c, int param, int64_t value)
{
    static const tk__settable s = {"tk_call_set", "call", TK__CALL, tk__not_running, NULL,
                                   tk__call_store, offsetof(tk_call, ran), NULL};
    return tk__param_set(&s, c, param, value);
}

int tk_call_get(const tk_call *c, int param, int64_t *value)
{
    if (!c || !value)
        return tk__fail(TK_EINVAL, "tk_call_get: %s is NULL", !c ? "call" : "value");
    switch (param) {
    case TK_CALL_PAD: *value = c->pad; return TK_OK;
    case TK_CALL_RANK: *value = c->rank; return TK_OK;
    case TK_CALL_STEPS: *value = c->steps; return TK_OK;
    case TK_CALL_INPUTS: *value = c->n_in; return TK_OK;
    case TK_CALL_OUTPUTS: *value = c->n_out; return TK_OK;
    case TK_CALL_UNDO: *value = c->undo; return TK_OK;
    case TK_CALL_ROUND_STEPS: *value = c->round_steps; return TK_OK;
    default: return tk__fail(TK_EINVAL, "tk_call_get: unknown parameter %d", param);
    }
}

int tk_call_set_pad_value(tk_call *c, float value)
{
    if (!c)
        return tk__fail(TK_EINVAL, "tk_call_set_pad_value: call is NULL");
    if (c->running)
        return tk__not_running("tk_call_set_pad_value", c);
    c->pad = TK_PAD_VALUE;
    c->pad_value = value;
    c->ran = false;
    return TK_OK;
}

/* ---- the schedule: every block index of every step ------------------------ */

static void tk__grid_text(const tk_call *c, const int64_t *g, char *buf, size_t size)
{
    size_t len = (size_t)snprintf(buf, size, "(");
    for (int a = 0; a < c->rank && len < size; a++)
        len += (size_t)snprintf(buf + len, size - len, "%s%lld", a ? ", " : "",
                                (long long)g[a]);
    if (len < size)
        snprintf(buf + len, size - len, "%s)", c->rank == 1 ? "," : "");
}

static const tk__spec *tk__op(const tk_call *c, int o, int *kind, int *index)
{
    *kind = o < c->n_in ? TK_CALL_INPUT : TK_CALL_OUTPUT;
    *index = o < c->n_in ? o : o - c->n_in;
    return tk__call_spec(c, o);
}

/* Block index of operand o at grid index g, checked against its block grid. */
static int tk__map(const tk_call *c, int o, const int64_t *g, int64_t *b)
{
    int kind, index;
    const tk__spec *s = tk__op(c, o, &kind, &index);
    char gt[96];
    bool ok = true;
    if (s->fn) {
        int rc = s->fn(s->user, g, c->rank, &b[0], &b[1]);
        if (rc) {
            tk__grid_text(c, g, gt, sizeof gt);
            return tk__fail(TK_ECALLBACK, "tk_call_run: the index map of %s %d returned %d "
                            "at grid index %s", tk__kind_name(kind), index, rc, gt);
        }
    } else {
        for (int r = 0; r < 2; r++) {
            int64_t v = s->map[r][c->rank], t;
            for (int a = 0; a < c->rank; a++)
                ok = ok && tk__mul(s->map[r][a], g[a], &t) && tk__add(v, t, &v);
            b[r] = v;
        }
    }
    if (ok && b[0] >= 0 && b[0] < s->grid_rows && b[1] >= 0 && b[1] < s->grid_cols)
        return TK_OK;
    tk__grid_text(c, g, gt, sizeof gt);
    if (!ok)
        return tk__fail(TK_ERANGE, "tk_call_run: the index map of %s %d overflows at grid "
                        "index %s", tk__kind_name(kind), index, gt);
    return tk__fail(TK_ERANGE, "tk_call_run: the index map of %s %d sends grid index %s to "
                    "block (%lld, %lld), outside its %lldx%lld block grid (%lldx%lld in "
                    "%lldx%lld blocks)", tk__kind_name(kind), index, gt, (long long)b[0],
                    (long long)b[1], (long long)s->grid_rows, (long long)s->grid_cols,
                    (long long)s->rows, (long long)s->cols, (long long)s->block_rows,
                    (long long)s->block_cols);
}

static bool tk__same(const int64_t *a, const int64_t *b) { return a[0] == b[0] && a[1] == b[1]; }

/* Output o's visits: no revisit along a parallel axis, no non-consecutive
 * revisit (a block written back would be overwritten). */
static int tk__check_revisits(const tk_call *c, const tk__plan *p, int o)
{
    int kind, index;
    const tk__spec *s = tk__op(c, o, &kind, &index);
    char g0[96], g1[96];
    /* A residency that spans a change of a parallel axis is a revisit along
     * it; with the non-consecutive check below, that covers every case. */
    for (int64_t st = 1; st < c->steps; st++) {
        const int64_t *b = &p->idx[(st * p->n + o) * 2];
        if (!tk__same(b, &p->idx[((st - 1) * p->n + o) * 2]))
            continue;
        const int64_t *g = &p->grid[st * c->rank], *prev = g - c->rank;
        for (int a = 0; a < c->rank; a++) {
            if (c->semantics[a] != TK_DIM_PARALLEL || g[a] == prev[a])
                continue;
            tk__grid_text(c, prev, g0, sizeof g0);
            tk__grid_text(c, g, g1, sizeof g1);
            return tk__fail(TK_ELAYOUT, "tk_call_run: output %d is revisited along parallel "
                            "axis %d: grid indices %s and %s both map to its block (%lld, "
                            "%lld); an axis an output block is revisited along must be "
                            "TK_DIM_ARBITRARY", index, a, g0, g1, (long long)b[0],
                            (long long)b[1]);
        }
    }
    int64_t cells = s->grid_rows * s->grid_cols;  /* <= rows*cols: no overflow */
    unsigned char *seen = calloc((size_t)cells / 8 + 1, 1);
    if (!seen)
        return tk__fail(TK_ENOMEM, "tk_call_run: out of memory for the revisit check");
    int rc = TK_OK;
    int64_t left = 0;  /* the step that last changed to another block */
    for (int64_t st = 0; st < c->steps && !rc; st++) {
        const int64_t *b = &p->idx[(st * p->n + o) * 2];
        if (st > 0 && tk__same(b, &p->idx[((st - 1) * p->n + o) * 2]))
            continue;
        int64_t cell = b[0] * s->grid_cols + b[1];
        if (seen[cell / 8] & (1u << (cell % 8))) {
            tk__grid_text(c, &p->grid[st * c->rank], g1, sizeof g1);
            rc = tk__fail(TK_ELAYOUT, "tk_call_run: output %d's block (%lld, %lld) is "
                          "visited again at step %lld, grid index %s, after it was written "
                          "back (it last left another block at step %lld); an output "
                          "block may only be revisited on consecutive steps", index,
                          (long long)b[0], (long long)b[1], (long long)st, g1,
                          (long long)left);
        }
        seen[cell / 8] |= (unsigned char)(1u << (cell % 8));
        left = st;
    }
    free(seen);
    return rc;
}

/* Build c's plan, kept (planned) when every map is affine: a callback may
 * answer differently from run to run, so its maps are asked on each. */
static int tk__make_plan(tk_call *c)
{
    tk__plan *p = &c->plan;
    tk__plan_free(p);
    c->planned = false;
    p->n = c->n_in + c->n_out;
    size_t idx_bytes, grid_bytes;
    int rc = tk__bytes("tk_call_run", c->steps, (int64_t)p->n * 2, sizeof(int64_t), &idx_bytes);
    if (rc || (rc = tk__bytes("tk_call_run", c->steps, c->rank, sizeof(int64_t), &grid_bytes)))
        return rc;
    p->idx = malloc(idx_bytes ? idx_bytes : 1);
    p->grid = malloc(grid_bytes);
    if (!p->idx || !p->grid) {
        tk__plan_free(p);
        return tk__fail(TK_ENOMEM, "tk_call_run: out of memory for a %lld-step schedule",
                        (long long)c->steps);
    }
    int64_t g[TK_CALL_MAX_RANK] = {0};
    for (int64_t st = 0; st < c->steps; st++) {
        memcpy(&p->grid[st * c->rank], g, (size_t)c->rank * sizeof *g);
        for (int o = 0; o < p->n; o++)
            if ((rc = tk__map(c, o, g, &p->idx[(st * p->n + o) * 2]))) {
                tk__plan_free(p);
                return rc;
            }
        for (int a = c->rank - 1; a >= 0 && ++g[a] == c->grid[a]; a--)
            g[a] = 0;  /* row-major: the last axis runs fastest */
    }
    for (int o = c->n_in; o < p->n; o++)
        if ((rc = tk__check_revisits(c, p, o))) {
            tk__plan_free(p);
            return rc;
        }
    c->planned = true;
    for (int o = 0; o < p->n; o++)
        c->planned = c->planned && !(o < c->n_in ? c->in[o] : c->out[o - c->n_in]).fn;
    return TK_OK;
}

/* ---- running it -------------------------------------------------------- */

static int tk__check_matrices(const tk_call *c, int kind, int n, const tk_matrix *const *m)
{
    int want = kind == TK_CALL_INPUT ? c->n_in : c->n_out;
    if (n != want)
        return tk__fail(TK_EINVAL, "tk_call_run: %d %ss given, the call has %d", n,
                        tk__kind_name(kind), want);
    if (n && !m)
        return tk__fail(TK_EINVAL, "tk_call_run: the %s array is NULL", tk__kind_name(kind));
    for (int i = 0; i < n; i++) {
        const tk__spec *s = kind == TK_CALL_INPUT ? &c->in[i] : &c->out[i];
        if (!m[i])
            return tk__fail(TK_EINVAL, "tk_call_run: %s %d is NULL", tk__kind_name(kind), i);
        if (m[i]->dtype != s->dtype)
            return tk__fail(TK_EDTYPE, "tk_call_run: %s %d is %s; the call declares %s",
                            tk__kind_name(kind), i, tk__dtype_label(m[i]->dtype),
                            tk_dtype_name(s->dtype));
        if (m[i]->rows != s->rows || m[i]->cols != s->cols)
            return tk__fail(TK_ESHAPE, "tk_call_run: %s %d is %lldx%lld; the call declares "
                            "%lldx%lld", tk__kind_name(kind), i, (long long)m[i]->rows,
                            (long long)m[i]->cols, (long long)s->rows, (long long)s->cols);
    }
    return TK_OK;
}

/* The matrices of a run: each operand's dtype and shape and, for a call of
 * a kernel, what tk_kernel_run accepts (an output overlapping an input
 * without being that matrix is refused); *aliased: the output is one. */
static int tk__check_run(const tk_call *c, int n_inputs, const tk_matrix *const *inputs,
                         int n_outputs, tk_matrix *const *outputs, bool *aliased)
{
    int rc = tk__check_matrices(c, TK_CALL_INPUT, n_inputs, inputs);
    if (!rc)
        rc = tk__check_matrices(c, TK_CALL_OUTPUT, n_outputs,
                                (const tk_matrix *const *)outputs);
    *aliased = false;
    if (!rc && c->kernel)
        rc = tk__kernel_validate("tk_call_run", c->kernel, &c->tiling, inputs, outputs[0],
                                 aliased);
    return rc;
}

/* What a run needs besides the plan: per operand an f32 panel of up to
 * `panel` blocks side by side (one block for an input read in place), and
 * the saved contents of every output block written back. */
typedef struct tk__run {
    float *blocks[2 * TK_CALL_MAX_OPERANDS];
    tk_block view[2 * TK_CALL_MAX_OPERANDS];
    tk_block *ptr[2 * TK_CALL_MAX_OPERANDS];
    struct { float *data; int64_t ld; } cur[2 * TK_CALL_MAX_OPERANDS];  /* each block now */
    struct { int64_t b[2], nb; } res[TK_CALL_MAX_OPERANDS];  /* each output's held blocks */
    int64_t panel;           /* the most steps one stretch covers */
    unsigned char *undo;     /* old output bytes, in write-back order */
    size_t undo_len;
    struct { int out; int64_t b[2], nb; } *wrote;  /* the write-backs, in order */
    int64_t n_wrote;
    bool stream;             /* outputs are large: write-backs stream past the cache */
    bool direct[TK_CALL_MAX_OPERANDS];  /* f32 inputs read in place */
} tk__run;

static void tk__valid(const tk__spec *s, const int64_t *b, int64_t *vr, int64_t *vc)
{
    int64_t r = s->rows - b[0] * s->block_rows, cc = s->cols - b[1] * s->block_cols;
    *vr = r < s->block_rows ? r : s->block_rows;
    *vc = cc < s->block_cols ? cc : s->block_cols;
}

/* The valid rows of nb blocks side by side from b along its block row,
 * and their valid width (only the last can end at the edge). */
static void tk__valid_run(const tk__spec *s, const int64_t *b, int64_t nb, int64_t *vr,
                          int64_t *w)
{
    int64_t last[2] = {b[0], b[1] + nb - 1}, vc;
    tk__valid(s, last, vr, &vc);
    *w = (nb - 1) * s->block_cols + vc;
}

/* Promote nb input blocks of m from b along its block row into dst, side
 * by side (leading dimension nb block_cols), past-edge elements set to
 * fill. */
static void tk__copy_in(const tk__spec *s, const tk_matrix *m, const int64_t *b, int64_t nb,
                        float *dst, float fill)
{
    int64_t vr, w, ld = nb * s->block_cols;
    tk__valid_run(s, b, nb, &vr, &w);
    size_t es = (size_t)tk__esize(s->dtype);
    for (int64_t r = 0; r < s->block_rows; r++) {
        float *row = dst + r * ld;
        int64_t n = r < vr ? w : 0;
        if (n)
            tk__row_to_f32(s->dtype, (const char *)tk__row(m, b[0] * s->block_rows + r) +
                           (size_t)(b[1] * s->block_cols) * es, row, n);
        for (int64_t j = n; j < ld; j++)
            row[j] = fill;
    }
}

/* The bytes of output block b inside its logical shape, row by row. */
static char *tk__out_row(const tk__spec *s, tk_matrix *m, const int64_t *b, int64_t r)
{
    return (char *)tk__row(m, b[0] * s->block_rows + r) +
           (size_t)(b[1] * s->block_cols) * (size_t)tk__esize(s->dtype);
}

/* A resident output block starts as v everywhere; dispatched, since every
 * block of a large grid is filled once (16-byte stores were a sixth of an
 * elementwise call's time). */
TK_DISPATCH(tk__fill, (float *restrict dst, int64_t n, float v), (dst, n, v))
{
    for (int64_t e = 0; e < n; e++)
        dst[e] = v;
}

/* Whether operands [0, n) at step k each have the block one column on
 * from step k - 1's, in the same block row. */
static bool tk__beside(const tk__plan *p, int64_t k, int n)
{
    for (int o = 0; o < n; o++) {
        const int64_t *b0 = &p->idx[((k - 1) * p->n + o) * 2], *b1 = &p->idx[(k * p->n + o) * 2];
        if (b1[0] != b0[0] || b1[1] != b0[1] + 1)
            return false;
    }
    return true;
}

/* Rows tk__touch reads side by side. */
#define TK__SIDE 16

/* From step st on, the steps whose input blocks lie side by side along
 * their block rows (each input's block column one more per step, the
 * block row the same), up to TK__TOUCH bytes: read their rows first, each
 * in memory order, so the body finds them in cache.  A block is a few
 * short rows (8 of 512 bytes for 8x128 f32), which the hardware
 * prefetchers do not follow block by block.  only: just the inputs it
 * marks (the inputs read in place, while a stretch promotes the others).
 * Returns the step after the run. */
static int64_t tk__touch(const tk_call *c, const tk__plan *p, const tk_matrix *const *inputs,
                         int64_t st, const bool *only)
{
    int64_t end = st + 1, per = 0;
    for (int i = 0; i < c->n_in && per <= TK__TOUCH; i++)  /* no more once it is too big */
        per += c->in[i].block_rows * c->in[i].block_cols * tk__esize(c->in[i].dtype);
    while (end < c->steps && per <= TK__TOUCH && (end - st + 1) * per <= TK__TOUCH &&
           tk__beside(p, end, c->n_in))
        end++;
    if (end - st < 2)
        return end;
    /* Up to TK__SIDE rows of equal length side by side, the inputs' one
     * after another: one stream at a time left an Intel Xeon's core short
     * of reads in flight (the seed's axpy through the call, 8x128 f32
     * blocks: 30 ms a run reading row by row, 21 to 23 with 8 or 16 rows
     * side by side). */
    const unsigned char *rows[TK__SIDE];
    int k = 0;
    size_t nk = 0;
    for (int i = 0; i < c->n_in; i++) {
        if (only && !only[i])
            continue;
        const tk__spec *s = &c->in[i];
        const int64_t *b0 = &p->idx[(st * p->n + i) * 2];
        int64_t last[2] = {b0[0], b0[1] + (end - st - 1)}, vr, vc;
        tk__valid(s, last, &vr, &vc);  /* the same rows as the first block's */
        size_t es = (size_t)tk__esize(s->dtype);
        size_t n = (size_t)((end - st - 1) * s->block_cols + vc) * es;
        for (int64_t r = 0; r < vr; r++) {
            if (k && (k == TK__SIDE || n != nk)) {
                tk__read_ahead(rows, k, nk);
                k = 0;
            }
            nk = n;
            rows[k++] = (const unsigned char *)tk__row(inputs[i], b0[0] * s->block_rows + r) +
                (size_t)(b0[1] * s->block_cols) * es;
        }
    }
    if (k)
        tk__read_ahead(rows, k, nk);
    return end;
}

/* Cast output j's nb blocks from b along its block row once into m (valid
 * part only) from src, side by side, saving what they held. */
static void tk__write_back(const tk__spec *s, int j, tk_matrix *m, const int64_t *b,
                           int64_t nb, const float *src, tk__run *run)
{
    int64_t vr, w, ld = nb * s->block_cols;
    tk__valid_run(s, b, nb, &vr, &w);
    size_t es = (size_t)tk__esize(s->dtype), n = (size_t)w * es;
    for (int64_t r = 0; r < vr; r++) {
        char *dst = tk__out_row(s, m, b, r);
        if (run->undo) {
            tk__stream_copy(run->undo + run->undo_len, dst, n);
            run->undo_len += n;
        }
        if (!run->stream) {
            tk__row_from_f32(s->dtype, src + r * ld, dst, w);
            continue;
        }
        /* A large output goes out by streaming stores: f32 straight from the
         * block, other dtypes through a cast piece in cache. */
        if (s->dtype == TK_DTYPE_F32) {
            tk__stream_copy(dst, src + r * ld, n);
            continue;
        }
        unsigned char piece[4096];
        int64_t per = (int64_t)(sizeof piece / es);
        for (int64_t at = 0; at < w; at += per) {
            int64_t k = w - at < per ? w - at : per;
            tk__row_from_f32(s->dtype, src + r * ld + at, piece, k);
            tk__stream_copy(dst + (size_t)at * es, piece, (size_t)k * es);
        }
    }
    if (run->undo) {
        run->wrote[run->n_wrote].out = j;
        run->wrote[run->n_wrote].nb = nb;
        memcpy(run->wrote[run->n_wrote++].b, b, sizeof run->wrote->b);
    }
}

/* Put back, last first, every block tk__write_back wrote. */
static void tk__undo(const tk_call *c, tk_matrix *const *outputs, tk__run *run)
{
    tk__stream_fence();
    while (run->n_wrote > 0) {
        int j = run->wrote[--run->n_wrote].out;
        const int64_t *b = run->wrote[run->n_wrote].b;
        int64_t vr, w;
        tk__valid_run(&c->out[j], b, run->wrote[run->n_wrote].nb, &vr, &w);
        size_t n = (size_t)w * (size_t)tk__esize(c->out[j].dtype);
        for (int64_t r = vr - 1; r >= 0; r--) {
            run->undo_len -= n;
            memcpy(tk__out_row(&c->out[j], outputs[j], b, r), run->undo + run->undo_len, n);
        }
    }
}

/* The pieces of a step, here and in the pipeline's run slot by slot
 * (internal.h). */
void tk__call_view(const tk_call *c, int o, const int64_t *b, const int64_t *g, float *data,
                   int64_t ld, tk_block *v)
{
    int kind, index;
    const tk__spec *s = tk__op(c, o, &kind, &index);
    int64_t vr, vc;
    tk__valid(s, b, &vr, &vc);
    *v = (tk_block){.size = sizeof(tk_block), .data = data, .ld = ld, .rows = s->block_rows,
                    .cols = s->block_cols, .valid_rows = vr, .valid_cols = vc,
                    .block_row = b[0], .block_col = b[1], .rank = c->rank, .operand = index,
                    .is_output = kind == TK_CALL_OUTPUT};
    memcpy(v->grid, g, (size_t)c->rank * sizeof *g);
}

int tk__call_body(tk_call *c, tk_block *const *blocks, int64_t st, const int64_t *g,
                  const char *fn, const char *outcome)
{
    /* The output blocks as the run made them: the body may write the views. */
    tk_block out[TK_CALL_MAX_OPERANDS];
    bool round = c->round_steps;
    for (int j = 0; round && j < c->n_out; j++)
        out[j] = *blocks[c->n_in + j];
    int rc = c->body(c->user, blocks, c->n_in + c->n_out);
    if (!rc) {
        /* TK_CALL_ROUND_STEPS: each output block through its dtype, as the
         * kernel's output ref would hold it. */
        for (int j = 0; round && j < c->n_out; j++)
            for (int64_t r = 0; r < out[j].rows; r++)
                tk__cast_through(c->out[j].dtype, out[j].data + r * out[j].ld, out[j].cols);
        return TK_OK;
    }
    char gt[96];
    tk__grid_text(c, g, gt, sizeof gt);
    return tk__fail(TK_ECALLBACK, "%s: the body returned %d at step %lld, grid index %s; %s",
                    fn, rc, (long long)st, gt, outcome);
}

void tk__call_copy_in(const tk_call *c, int i, const tk_matrix *m, const int64_t *b,
                      float *dst, float fill)
{
    tk__copy_in(&c->in[i], m, b, 1, dst, fill);
}

void tk__call_cast_out(const tk_call *c, int j, const float *src, const int64_t *b,
                       unsigned char *image)
{
    const tk__spec *s = &c->out[j];
    int64_t vr, vc, es = tk__esize(s->dtype);
    tk__valid(s, b, &vr, &vc);
    for (int64_t r = 0; r < vr; r++)
        tk__row_from_f32(s->dtype, src + r * s->block_cols,
                         image + ((b[0] * s->block_rows + r) * s->cols +
                                  b[1] * s->block_cols) * es, vc);
}

/* f32 bytes of the panels (every operand but the inputs read in place)
 * that one stretch of side-by-side steps fills: a quarter of a Zen 3's
 * L2, so they are still there when the body reads them. */
#define TK__PANEL (24 * 1024)

/* From step st, the steps (at most panel) in which every operand moves one
 * block along its block row, each to a new block at st too: an elementwise
 * walk.  They share one panel per operand, so that inputs are promoted and
 * outputs written back in rows of the whole stretch (8x128 blocks are 8
 * short rows each, a pattern the hardware prefetchers follow badly).
 * Returns the step after them; st + 1 when no stretch starts at st. */
static int64_t tk__stretch(const tk_call *c, const tk__plan *p, int64_t panel, int64_t st)
{
    int64_t end = st + 1;
    for (int o = 0; o < p->n && st > 0 && panel > 1; o++)
        if (tk__same(&p->idx[(st * p->n + o) * 2], &p->idx[((st - 1) * p->n + o) * 2]))
            return end;
    while (end < c->steps && end - st < panel && tk__beside(p, end, p->n))
        end++;
    return end;
}

/* At the start of the stretch of nb steps from st: promote each input not
 * read in place into its panel, and start fetching the nb blocks after
 * them along the same rows, the next stretch's, while this one's bodies
 * run (a bf16 axpy in 8x128 blocks: 7.4 ms against 10.4 ms reading every
 * stretch ahead in memory order first, on an AVX-512 AMD EPYC). */
static void tk__stretch_in(const tk_call *c, const tk__plan *p, const tk_matrix *const *inputs,
                           const tk__run *run, int64_t st, int64_t nb, float fill)
{
    for (int i = 0; i < c->n_in; i++) {
        if (run->direct[i])
            continue;
        const tk__spec *s = &c->in[i];
        const int64_t *b = &p->idx[(st * p->n + i) * 2];
        tk__copy_in(s, inputs[i], b, nb, run->blocks[i], fill);
        int64_t c0 = (b[1] + nb) * s->block_cols, w = nb * s->block_cols,
                es = tk__esize(s->dtype);
        for (int64_t r = b[0] * s->block_rows; c0 + w <= s->cols && r < s->rows &&
             r < (b[0] + 1) * s->block_rows; r++) {
            const char *q = (const char *)tk__row(inputs[i], r) + c0 * es;
            for (int64_t k = 0; k < w * es; k += 64)
                __builtin_prefetch(q + k);
        }
    }
}

static int tk__execute(tk_call *c, const tk__plan *p, const tk_matrix *const *inputs,
                       tk_matrix *const *outputs, float fill, tk__run *run)
{
    int64_t copies_in = 0, skipped = 0, copies_out = 0, bytes_in = 0, bytes_out = 0;
    const float nan = NAN;  /* outputs start uninitialized, as on the chip */
    int64_t touched = 0;    /* the first step not read ahead */
    int64_t first = 0, end = 0;  /* the stretch step st is in */
    for (int64_t st = 0; st < c->steps; st++) {
        const int64_t *g = &p->grid[st * c->rank];
        if (st == end) {
            first = st;
            end = tk__stretch(c, p, run->panel, st);
            if (end - first > 1)
                tk__stretch_in(c, p, inputs, run, st, end - first, fill);
        }
        if (st == touched)  /* a stretch's own inputs are read above */
            touched = tk__touch(c, p, inputs, st, end - first > 1 ? run->direct : NULL);
        int64_t nb = end - first, at = st - first;
        for (int o = 0; o < p->n; o++) {
            int kind, index;
            const tk__spec *s = tk__op(c, o, &kind, &index);
            const int64_t *b = &p->idx[(st * p->n + o) * 2];
            bool same = st > 0 && tk__same(b, &p->idx[((st - 1) * p->n + o) * 2]);
            int64_t vr, vc;
            tk__valid(s, b, &vr, &vc);
            if (kind == TK_CALL_INPUT && !same) {
                float *data = run->blocks[o] + at * s->block_cols;
                int64_t ld = nb * s->block_cols;
                if (run->direct[index] && vr == s->block_rows && vc == s->block_cols) {
                    /* A whole f32 block needs no promotion: the body reads it in place. */
                    data = (float *)tk__row(inputs[index], b[0] * s->block_rows) +
                           b[1] * s->block_cols;
                    ld = inputs[index]->stride;
                } else if (run->direct[index] || nb == 1) {
                    data = run->blocks[o];
                    ld = s->block_cols;
                    tk__copy_in(s, inputs[index], b, 1, data, fill);
                }
                run->cur[o].data = data;
                run->cur[o].ld = ld;
                copies_in++;
                bytes_in += vr * vc * tk__esize(s->dtype);
            } else if (kind == TK_CALL_INPUT) {
                skipped++;
            } else if (!same) {
                if (at == 0) {
                    if (st > 0)
                        tk__write_back(s, index, outputs[index], run->res[index].b,
                                       run->res[index].nb, run->blocks[o], run);
                    tk__fill(run->blocks[o], s->block_rows * s->block_cols * nb, nan);
                    memcpy(run->res[index].b, b, sizeof run->res->b);
                    run->res[index].nb = nb;
                }
                run->cur[o].data = run->blocks[o] + at * s->block_cols;
                run->cur[o].ld = nb * s->block_cols;
                copies_out++;
                bytes_out += vr * vc * tk__esize(s->dtype);
            }
            tk__call_view(c, o, b, g, run->cur[o].data, run->cur[o].ld, &run->view[o]);
            run->ptr[o] = &run->view[o];
        }
        int rc = tk__call_body(c, run->ptr, st, g, "tk_call_run",
                               run->undo ? "the outputs are unchanged"
                                         : "the outputs may be partly written "
                                           "(TK_CALL_UNDO is 0)");
        if (rc) {
            if (run->undo)
                tk__undo(c, outputs, run);
            else
                tk__stream_fence();  /* the blocks written back are in memory */
            return rc;
        }
    }
    for (int j = 0; j < c->n_out; j++)
        tk__write_back(&c->out[j], j, outputs[j], run->res[j].b, run->res[j].nb,
                       run->blocks[c->n_in + j], run);
    tk__stream_fence();
    c->copies_in = copies_in;
    c->copies_skipped = skipped;
    c->copies_out = copies_out;
    c->bytes_in = bytes_in;
    c->bytes_out = bytes_out;
    c->ran = true;
    return TK_OK;
}

/* The floats of operand o's blocks, whole cache lines: a panel of
 * run->panel blocks, or one for an input read in place; false on overflow. */
static bool tk__block_floats(const tk_call *c, const tk__run *run, int o, int64_t *floats)
{
    int kind, index;
    const tk__spec *s = tk__op(c, o, &kind, &index);
    int64_t nb = kind == TK_CALL_INPUT && run->direct[index] ? 1 : run->panel, f;
    bool ok = tk__mul(s->block_rows * s->block_cols, nb, &f) && tk__add(f, 15, &f);
    *floats = f / 16 * 16;
    return ok;
}

/* Stretches share panels unless an input overlaps an output (aliased):
 * then every step promotes its own blocks after the previous write-back,
 * so that what a later step reads never depends on the panel size. */
static int tk__run_alloc(tk_call *c, int n, tk__run *run, bool aliased)
{
    size_t undo = 0;
    int64_t per = 0, floats = 16;  /* panel bytes per step; room to start on a line */
    bool ok = true;
    for (int o = 0; o < n; o++) {
        int kind, index;
        const tk__spec *s = tk__op(c, o, &kind, &index);
        if (kind == TK_CALL_OUTPUT || !run->direct[index])  /* one block fits (added) */
            ok = ok && tk__add(per, s->block_rows * s->block_cols * 4, &per);
        if (kind == TK_CALL_OUTPUT)
            undo += (size_t)(s->rows * s->cols) * (size_t)tk__esize(s->dtype);
    }
    run->panel = !ok || aliased || !per ? 1 : TK__PANEL / per;
    run->panel = run->panel < 1 ? 1 : run->panel > c->steps ? c->steps : run->panel;
    for (int o = 0; o < n; o++) {
        int64_t f;
        ok = ok && tk__block_floats(c, run, o, &f) && tk__add(floats, f, &floats);
    }
    size_t bytes;
    int rc = ok ? tk__bytes("tk_call_run", floats, 1, sizeof(float), &bytes) : TK_EOVERFLOW;
    if (rc)
        return tk__fail(TK_EOVERFLOW, "tk_call_run: the operands' f32 blocks overflow");
    /* One run at a time (re-entry is refused), so no run needs another's
     * buffers: the call keeps them (fresh pages would fault on every run). */
    if (!tk__keep(&c->panels, &c->panels_bytes, bytes))
        return tk__fail(TK_ENOMEM, "tk_call_run: out of memory for %zu bytes of blocks",
                        bytes);
    /* Each operand's blocks start on a cache line, so that their rows do
     * not straddle lines (with malloc's 16-byte offset the bf16 axpy in
     * bench_call took 30% longer). */
    float *at = (float *)(void *)(((uintptr_t)c->panels + 63) / 64 * 64);
    for (int o = 0; o < n; o++) {
        int64_t f;
        tk__block_floats(c, run, o, &f);
        run->blocks[o] = at;
        at += f;
    }
    if (!c->undo)
        return TK_OK;  /* nothing is saved: undo and wrote stay NULL */
    size_t wrote;
    rc = tk__bytes("tk_call_run", c->steps, c->n_out, sizeof *run->wrote, &wrote);
    if (rc)
        return rc;
    if (!tk__keep(&c->work, &c->work_bytes, undo) ||
        !tk__keep(&c->wrote, &c->wrote_bytes, wrote))
        return tk__fail(TK_ENOMEM, "tk_call_run: out of memory for %zu bytes of saved "
                        "output", undo);
    run->undo = c->work;
    run->wrote = c->wrote;
    return TK_OK;
}

/* Whether m's memory overlaps one of the outputs' (then its blocks are
 * copied in, so that a write-back never changes what a later step reads). */
static bool tk__aliased(const tk_matrix *m, int n, tk_matrix *const *outputs)
{
    const char *a = m->data, *a_end = (const char *)tk__row(m, m->rows);
    for (int j = 0; j < n; j++) {
        const char *b = outputs[j]->data, *b_end = (const char *)tk__row(outputs[j],
                                                                         outputs[j]->rows);
        if (a < b_end && b < a_end)
            return true;
    }
    return false;
}

int tk__call_as(int rc, const char *fn)
{
    const char *msg = tk_last_error_message(), *colon = strchr(msg, ':');
    if (rc == TK_OK || strncmp(msg, "tk_call_", strlen("tk_call_")) != 0 || !colon)
        return rc;
    char rest[1024];
    snprintf(rest, sizeof rest, "%s", colon + 1);
    return tk__fail(rc, "%s:%s", fn, rest);
}

int tk__call_plan(tk_call *c, int n_inputs, const tk_matrix *const *inputs, int n_outputs,
                  tk_matrix *const *outputs, const tk__plan **p)
{
    bool aliased;
    int rc = tk__check_run(c, n_inputs, inputs, n_outputs, outputs, &aliased);
    if (rc)
        return rc;
    if (c->n_out == 0)
        return tk__fail(TK_ESTATE, "tk_call_run: the call has no output; add one with "
                        "tk_call_add_output");
    if (c->running)
        return tk__not_running("tk_call_run", c);
    if (!c->planned) {
        c->running = true;  /* the index maps run */
        rc = tk__make_plan(c);
        c->running = false;
    }
    if (!rc)
        *p = &c->plan;
    return rc;
}

int tk__call_execute(tk_call *c, const tk__plan *p, const tk_matrix *const *inputs,
                     tk_matrix *const *outputs, float fill)
{
    tk__run run = {0};
    bool aliased = false;
    for (int i = 0; i < c->n_in; i++) {
        bool over = tk__aliased(inputs[i], c->n_out, outputs);
        run.direct[i] = c->in[i].dtype == TK_DTYPE_F32 && !over && !c->kernel;
        aliased |= over;
    }
    size_t out_bytes = 0;
    for (int j = 0; j < c->n_out; j++)
        out_bytes += (size_t)(c->out[j].rows * c->out[j].cols) *
                     (size_t)tk__esize(c->out[j].dtype);
    run.stream = out_bytes >= TK__STREAM;
    int rc = tk__not_running("tk_call_run", c);
    if (!rc && !(rc = tk__run_alloc(c, p->n, &run, aliased))) {
        c->running = true;  /* the body runs */
        tk__kernel_hold(c->kernel, 1);
        rc = tk__execute(c, p, inputs, outputs, fill, &run);
        tk__kernel_hold(c->kernel, -1);
        c->running = false;
    }
    return rc;
}

/* A call of a kernel with zero fill is tk_kernel_run on its tiling, run
 * by the kernel's executor (its fused passes and threads): the same bits
 * as the steps below, which the tests compare, and the same statistics,
 * since every step copies in one new block of each operand. */
static int tk__run_as_kernel(tk_call *c, const tk_matrix *const *inputs, tk_matrix *output,
                           bool aliased)
{
    tk__runner by = {"tk_call_run", "TK_CALL_UNDO", c->undo};
    c->running = true;  /* the body runs */
    int rc = tk__kernel_exec(&by, c->kernel, &c->tiling, inputs, output, aliased);
    c->running = false;
    if (rc)
        return rc;
    int64_t bytes = c->out[0].rows * c->out[0].cols * tk__esize(c->out[0].dtype);
    c->copies_in = c->steps * c->n_in;
    c->copies_skipped = 0;
    c->copies_out = c->steps;
    c->bytes_in = bytes * c->n_in;
    c->bytes_out = bytes;
    c->ran = true;
    return TK_OK;
}

/* Validate, plan and run with the given fill for past-edge input reads. */
static int tk__call(tk_call *c, int n_inputs, const tk_matrix *const *inputs,
                    int n_outputs, tk_matrix *const *outputs, float fill)
{
    if (c->kernel && fill == 0.0f && !signbit(fill)) {   /* -0 is a fill of its own */
        bool aliased;
        int rc = tk__check_run(c, n_inputs, inputs, n_outputs, outputs, &aliased);
        if (!rc)
            rc = tk__not_running("tk_call_run", c);
        return rc ? rc : tk__run_as_kernel(c, inputs, outputs[0], aliased);
    }
    const tk__plan *p = NULL;
    int rc = tk__call_plan(c, n_inputs, inputs, n_outputs, outputs, &p);
    return rc ? rc : tk__call_execute(c, p, inputs, outputs, fill);
}

float tk__call_fill(const tk_call *c)
{
    return c->pad == TK_PAD_ZERO ? 0.0f : c->pad == TK_PAD_NAN ? NAN : c->pad_value;
}

int tk_call_run(tk_call *c, int n_inputs, const tk_matrix *const *inputs, int n_outputs,
                tk_matrix *const *outputs)
{
    if (!c)
        return tk__fail(TK_EINVAL, "tk_call_run: call is NULL");
    return tk__call(c, n_inputs, inputs, n_outputs, outputs, tk__call_fill(c));
}

int tk_call_check_padding(tk_call *c, int n_inputs, const tk_matrix *const *inputs,
                          int64_t *changed)
{
    if (!c || !changed)
        return tk__fail(TK_EINVAL, "tk_call_check_padding: %s is NULL",
                        !c ? "call" : "changed");
    /* Two runs into scratch outputs: zero fill, then NaN fill. */
    tk_matrix *out[2][TK_CALL_MAX_OPERANDS] = {{NULL}};
    int rc = TK_OK;
    for (int k = 0; k < 2 && !rc; k++)
        for (int j = 0; j < c->n_out && !rc; j++)
            rc = tk_matrix_create(&out[k][j], c->out[j].dtype, c->out[j].rows,
                                  c->out[j].cols);
    for (int k = 0; k < 2 && !rc; k++)
        rc = tk__call_as(tk__call(c, n_inputs, inputs, c->n_out, out[k], k ? NAN : 0.0f),
                         "tk_call_check_padding");
    int64_t n = 0;
    int first_out = -1;
    int64_t first_r = 0, first_c = 0;
    for (int j = 0; j < c->n_out && !rc; j++) {
        const tk__spec *s = &c->out[j];
        size_t es = (size_t)tk__esize(s->dtype);
        for (int64_t r = 0; r < s->rows; r++) {
            const char *a = tk__row(out[0][j], r), *b = tk__row(out[1][j], r);
            for (int64_t e = 0; e < s->cols; e++)
                if (memcmp(a + (size_t)e * es, b + (size_t)e * es, es)) {
                    if (n++ == 0) {
                        first_out = j;
                        first_r = r;
                        first_c = e;
                    }
                }
        }
    }
    if (!rc && n) {
        float z, f;
        const tk__spec *s = &c->out[first_out];
        size_t es = (size_t)tk__esize(s->dtype);
        tk__row_to_f32(s->dtype, (const char *)tk__row(out[0][first_out], first_r) +
                       (size_t)first_c * es, &z, 1);
        tk__row_to_f32(s->dtype, (const char *)tk__row(out[1][first_out], first_r) +
                       (size_t)first_c * es, &f, 1);
        rc = tk__fail(TK_EMISMATCH, "tk_call_check_padding: %lld output element(s) depend "
                      "on what reads past an input's edge see; first: output %d (%lld, "
                      "%lld) is %.9g with zero padding and %.9g with NaN padding",
                      (long long)n, first_out, (long long)first_r, (long long)first_c,
                      (double)z, (double)f);
    }
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < c->n_out; j++)
            tk_matrix_destroy(out[k][j]);
    if (!rc || rc == TK_EMISMATCH)
        *changed = n;
    return rc;
}

int tk_call_stat(const tk_call *c, int stat, double *value)
{
    if (!c || !value)
        return tk__fail(TK_EINVAL, "tk_call_stat: %s is NULL", !c ? "call" : "value");
    int64_t v;
    switch (stat) {
    case TK_STAT_STEPS: v = c->steps; break;
    case TK_STAT_COPIES_IN: v = c->copies_in; break;
    case TK_STAT_COPIES_OUT: v = c->copies_out; break;
    case TK_STAT_COPIES_SKIPPED: v = c->copies_skipped; break;
    case TK_STAT_BYTES_IN: v = c->bytes_in; break;
    case TK_STAT_BYTES_OUT: v = c->bytes_out; break;
    default:
        return tk__fail(TK_EINVAL, "tk_call_stat: statistic %d is not one of a call's "
                        "(TK_STAT_STEPS, _COPIES_IN, _COPIES_OUT, _COPIES_SKIPPED, "
                        "_BYTES_IN, _BYTES_OUT)", stat);
    }
    if (!c->ran)
        return tk__fail(TK_ESTATE, "tk_call_stat: no complete tk_call_run since the call "
                        "last changed");
    *value = (double)v;
    return TK_OK;
}
