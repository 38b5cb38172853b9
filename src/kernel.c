/* kernel.c - tk_kernel: the kernel contract (built-in and custom bodies,
 * their parameters), validation of a run, and tk_kernel_run, which hands
 * the run to the host executor (exec.c). */
#if defined(__linux__)
#define _GNU_SOURCE   /* sched_getaffinity, CPU_COUNT */
#include <sched.h>
#endif
#include "internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- handles ------------------------------------------------------------ */

/* The handle is the first member, so a tk_kernel * is also a box *.  The
 * work buffer is a cache that tk_kernel_run keeps across runs (a fresh
 * buffer costs a page fault per 4 KiB on every run): the padded copies of
 * TK_TAIL_PAD, or a custom body's undo copy.  work_busy hands it to one
 * run at a time. */
struct tk__kernel_box {
    tk_kernel k;
    atomic_int users;  /* runs in progress: tk__kernel_hold */
    atomic_flag work_busy;
    void *work;
    size_t work_bytes;
    tk__pool *pool;    /* the threads of its runs */
};

static int tk__kernel_new(tk_kernel **out, const char *fn, int n_inputs,
                          tk_body_fn body, void *user, bool is_axpy, float alpha)
{
    struct tk__kernel_box *b = malloc(sizeof *b);
    tk__pool *pool = b ? tk__pool_new() : NULL;
    if (!pool) {
        free(b);
        return tk__fail(TK_ENOMEM, "%s: out of memory for the handle", fn);
    }
    b->k = (tk_kernel){n_inputs, TK_BODY_ELEMENTWISE, body, user, is_axpy,
                       {alpha, TK_ARITH_NUMPY}, TK__REDUCE_NONE, TK_DTYPE_F32, true, 1,
                       false};
    if (is_axpy)
        b->k.user = &b->k.axpy;
    atomic_init(&b->users, 0);
    atomic_flag_clear(&b->work_busy);
    b->work = NULL;
    b->work_bytes = 0;
    b->pool = pool;
    *out = &b->k;
    return TK_OK;
}

int tk_kernel_axpy(tk_kernel **out, float alpha)
{
    if (!out)
        return tk__fail(TK_EINVAL, "tk_kernel_axpy: out is NULL");
    *out = NULL;
    return tk__kernel_new(out, "tk_kernel_axpy", 2, tk__axpy_body, NULL, true, alpha);
}

int tk_kernel_custom(tk_kernel **out, int n_inputs, tk_body_fn body, void *user)
{
    if (!out)
        return tk__fail(TK_EINVAL, "tk_kernel_custom: out is NULL");
    *out = NULL;
    if (n_inputs < 1 || n_inputs > TK_KERNEL_MAX_INPUTS)
        return tk__fail(TK_ERANGE, "tk_kernel_custom: n_inputs must be in [1, %d]: got %d",
                        TK_KERNEL_MAX_INPUTS, n_inputs);
    if (!body)
        return tk__fail(TK_EINVAL, "tk_kernel_custom: body is NULL");
    return tk__kernel_new(out, "tk_kernel_custom", n_inputs, body, user, false, 0.0f);
}

/* Reductions have no body: the audit computes their oracle itself. */
static int tk__reduction_new(tk_kernel **out, const char *fn, int n_inputs, int reduce)
{
    if (!out)
        return tk__fail(TK_EINVAL, "%s: out is NULL", fn);
    *out = NULL;
    int rc = tk__kernel_new(out, fn, n_inputs, NULL, NULL, false, 0.0f);
    if (!rc)
        (*out)->reduce = reduce;
    return rc;
}

int tk_kernel_matmul(tk_kernel **out)
{
    return tk__reduction_new(out, "tk_kernel_matmul", 2, TK__REDUCE_MATMUL);
}

int tk_kernel_row_sum(tk_kernel **out)
{
    return tk__reduction_new(out, "tk_kernel_row_sum", 1, TK__REDUCE_ROW_SUM);
}

void tk_kernel_destroy(tk_kernel *k)
{
    if (!k)
        return;
    struct tk__kernel_box *b = (struct tk__kernel_box *)k;
    tk__pool_free(b->pool);
    free(b->work);
    free(b);
}

tk__pool *tk__kernel_pool(const tk_kernel *k)
{
    return ((const struct tk__kernel_box *)k)->pool;
}

/* The accumulation is a reduction's, the body kind an elementwise
 * contract's: asked of the other kind, tk_kernel_set and tk_kernel_get
 * fail whatever the value. */
static int tk__kernel_applies(const char *fn, const tk_kernel *k, int param)
{
    if (param == TK_KERNEL_ACCUM && !k->reduce)
        return tk__fail(TK_EINVAL, "%s: TK_KERNEL_ACCUM is for reduction contracts "
                        "(tk_kernel_matmul, tk_kernel_row_sum)", fn);
    if (param == TK_KERNEL_BODY && k->reduce)
        return tk__fail(TK_EINVAL, "%s: TK_KERNEL_BODY is for elementwise contracts; a "
                        "reduction (tk_kernel_matmul, tk_kernel_row_sum) has no body to call",
                        fn);
    return TK_OK;
}

static int tk__kernel_set_applies(const void *h, int param)
{
    return tk__kernel_applies("tk_kernel_set", h, param);
}

static int tk__kernel_admit(const void *h, int param, int64_t value)
{
    const tk_kernel *k = h;
    if (param == TK_KERNEL_ACCUM && value != TK_DTYPE_F32 && value != TK_DTYPE_BF16 &&
        value != TK_DTYPE_F16)
        return tk__fail(TK_EDTYPE, "tk_kernel_set: TK_KERNEL_ACCUM %lld (%s): a "
                        "reduction accumulates in float32, bfloat16 or float16",
                        (long long)value, tk_dtype_name((int)value));
    /* A reduction's arithmetic is its candidate's: the flag the audit's
     * bound and oracle follow (TK_ARITH_FMA changes neither: the bound
     * covers a fused multiply-add). */
    if (param == TK_KERNEL_ARITH && !k->is_axpy && !k->reduce && value != TK_ARITH_NUMPY)
        return tk__fail(TK_EINVAL, "tk_kernel_set: TK_KERNEL_ARITH %lld is for the built-in "
                        "bodies and reductions; a custom body's arithmetic is its own code",
                        (long long)value);
    return TK_OK;
}

static void tk__kernel_store(void *h, int param, int64_t value)
{
    tk_kernel *k = h;
    switch (param) {
    case TK_KERNEL_BODY: k->body_kind = (int)value; break;
    case TK_KERNEL_ARITH: k->axpy.arith = (int)value; break;
    case TK_KERNEL_ACCUM: k->accum = (int)value; break;
    case TK_KERNEL_UNDO: k->undo = value; break;
    case TK_KERNEL_THREADS:
        k->threads = (int)value;
        if (value == 1)   /* the handle's workers end; none runs (tk__kernel_busy) */
            tk__pool_stop(tk__kernel_pool(k));
        break;
    default: k->thread_safe = value; break;  /* TK_KERNEL_THREAD_SAFE */
    }
}

void tk__kernel_hold(const tk_kernel *k, int delta)
{
    if (!k)
        return;
    /* Only the count changes: the handle was allocated writable. */
    atomic_fetch_add_explicit(&((struct tk__kernel_box *)k)->users, delta,
                              memory_order_acq_rel);
}

static int tk__kernel_busy(const char *fn, const void *h)
{
    const struct tk__kernel_box *b = h;
    return atomic_load_explicit(&b->users, memory_order_acquire)
               ? tk__fail(TK_ESTATE, "%s: the kernel is running (this call came from a "
                          "callback of the run, or another thread runs it); a running kernel "
                          "cannot be changed", fn)
               : TK_OK;
}

int tk_kernel_set(tk_kernel *k, int param, int64_t value)
{
    static const tk__settable s = {"tk_kernel_set", "kernel", TK__KERNEL, tk__kernel_busy,
                                   tk__kernel_admit, tk__kernel_store, -1,
                                   tk__kernel_set_applies};
    return tk__param_set(&s, k, param, value);
}

int tk_kernel_get(const tk_kernel *k, int param, int64_t *value)
{
    if (!k || !value)
        return tk__fail(TK_EINVAL, "tk_kernel_get: %s is NULL", !k ? "kernel" : "value");
    int rc = tk__kernel_applies("tk_kernel_get", k, param);
    if (rc)
        return rc;
    switch (param) {
    case TK_KERNEL_BODY: *value = k->body_kind; return TK_OK;
    case TK_KERNEL_INPUTS: *value = k->n_inputs; return TK_OK;
    case TK_KERNEL_ARITH: *value = k->axpy.arith; return TK_OK;
    case TK_KERNEL_UNDO: *value = k->undo; return TK_OK;
    case TK_KERNEL_THREADS: *value = k->threads; return TK_OK;
    case TK_KERNEL_THREAD_SAFE: *value = k->thread_safe; return TK_OK;
    case TK_KERNEL_ACCUM: *value = k->accum; return TK_OK;
    default:
        return tk__fail(TK_EINVAL, "tk_kernel_get: unknown parameter %d", param);
    }
}

int tk__kernel_threads(const tk_kernel *k)
{
    if (!k->is_axpy && !k->reduce && !k->thread_safe)
        return 1;   /* a custom body not declared thread-safe */
    if (k->threads)
        return k->threads;
    /* The cores this process may run on (taskset, a cpuset), not the
     * machine's: a job pinned to 2 of 64 would start 64 threads. */
    long n = -1;
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        n = CPU_COUNT(&set);
#endif
    if (n < 1)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > TK_KERNEL_MAX_THREADS ? TK_KERNEL_MAX_THREADS : (int)n;
}

/* ---- validation (the seed's order and wording) --------------------------------- */

/* floor(x / d) for d > 0. */
static int64_t tk__floor_div(int64_t x, int64_t d)
{
    return x / d - (x % d < 0);
}

/* Whether two matrices share a byte: their spans first, then row by row
 * (rows of two matrices interleaved in one buffer, as the two halves of a
 * wider array, share none).  Row i of a, [lo, hi), meets row j of b where
 * lo - wb < j sb - (pb - pa) < hi, in bytes from a's first. */
static bool tk__overlap(const tk_matrix *a, const tk_matrix *b)
{
    int64_t es = tk__esize(a->dtype), eb = tk__esize(b->dtype);
    int64_t sa = a->stride * es, wa = a->cols * es, sb = b->stride * eb, wb = b->cols * eb;
    int64_t na = (a->rows - 1) * sa + wa, nb = (b->rows - 1) * sb + wb;
    int64_t off = (int64_t)((uintptr_t)b->data - (uintptr_t)a->data);
    if (!(off < na && -off < nb))
        return false;
    for (int64_t i = 0; i < a->rows; i++) {
        int64_t lo = i * sa - off, hi = lo + wa;   /* from b's first byte */
        int64_t j0 = tk__floor_div(lo - wb, sb) + 1, j1 = -tk__floor_div(-hi, sb) - 1;
        j0 = j0 > 0 ? j0 : 0;
        j1 = j1 < b->rows - 1 ? j1 : b->rows - 1;
        if (j0 <= j1)
            return true;
    }
    return false;
}

int tk__kernel_validate(const char *fn, const tk_kernel *k, const tk_tiling *t,
                        const tk_matrix *const *inputs, const tk_matrix *output,
                        bool *aliased)
{
    if (!k || !t || !inputs || !output)
        return tk__fail(TK_EINVAL, "%s: %s is NULL", fn, !k ? "kernel" : !t ? "tiling"
                        : !inputs ? "inputs" : "output");
    if (k->reduce)
        return tk__fail(TK_EINVAL, "%s: a %s contract is audited under its error bound "
                        "(tk_audit_add_reduction_case), not run; write its kernel as a "
                        "tk_call", fn, k->reduce == TK__REDUCE_MATMUL ? "matmul" : "row-sum");
    for (int i = 0; i < k->n_inputs; i++)
        if (!inputs[i])
            return tk__fail(TK_EINVAL, "%s: input %d of %d is NULL", fn, i,
                            k->n_inputs);
    const tk_matrix *x = inputs[0];
    /* tk_matrix guarantees two positive dims, so "nonempty" holds already. */
    for (int i = 1; i < k->n_inputs; i++)
        if (inputs[i]->rows != x->rows || inputs[i]->cols != x->cols)
            return tk__fail(TK_ESHAPE, "%s: inputs must be nonempty matrices "
                            "with identical shapes: got %lldx%lld and %lldx%lld", fn,
                            (long long)x->rows, (long long)x->cols,
                            (long long)inputs[i]->rows, (long long)inputs[i]->cols);
    for (int i = 0; i < k->n_inputs; i++) {
        if (inputs[i]->dtype == x->dtype && tk__is_float_dtype(x->dtype))
            continue;
        if (k->n_inputs == 1)
            return tk__fail(TK_EDTYPE, "%s: an input of a float dtype ("
                            TK__FLOAT_DTYPES ") required: got %s", fn, tk_dtype_name(x->dtype));
        return tk__fail(TK_EDTYPE, "%s: inputs of one float dtype ("
                        TK__FLOAT_DTYPES ") required: got %s and %s", fn, tk_dtype_name(x->dtype),
                        tk_dtype_name(inputs[i ? i : 1]->dtype));
    }
    /* Positive block dims are guaranteed by tk_tiling_create. */
    if (output->rows != x->rows || output->cols != x->cols)
        return tk__fail(TK_ESHAPE, "%s: output must have the inputs' shape "
                        "%lldx%lld: got %lldx%lld", fn, (long long)x->rows, (long long)x->cols,
                        (long long)output->rows, (long long)output->cols);
    if (output->dtype != x->dtype)
        return tk__fail(TK_EDTYPE, "%s: output must be %s like the inputs: "
                        "got %s", fn, tk_dtype_name(x->dtype), tk_dtype_name(output->dtype));
    if (t->rows != x->rows || t->cols != x->cols)
        return tk__fail(TK_ESHAPE, "%s: the tiling is for %lldx%lld but the "
                        "inputs are %lldx%lld", fn, (long long)t->rows, (long long)t->cols,
                        (long long)x->rows, (long long)x->cols);
    if (t->tail == TK_TAIL_SHIFT_INWARDS && k->body_kind == TK_BODY_BLOCKWISE)
        return tk__fail(TK_ELAYOUT, "%s: shift-inwards would change the block "
                        "a blockwise body sees; use TK_TAIL_MASK or TK_TAIL_PAD", fn);
    *aliased = false;
    for (int i = 0; i < k->n_inputs; i++) {
        if (!tk__overlap(inputs[i], output))
            continue;
        if (inputs[i]->data != output->data || inputs[i]->stride != output->stride)
            return tk__fail(TK_ELAYOUT, "%s: the output overlaps input %d "
                            "without being the same matrix", fn, i);
        if (t->tail == TK_TAIL_SHIFT_INWARDS)
            return tk__fail(TK_ELAYOUT, "%s: shift-inwards recomputes overlapping "
                            "blocks and cannot write over input %d", fn, i);
        *aliased = true;
    }
    return TK_OK;
}

/* ---- tk_kernel_run --------------------------------------------------------------- */

int tk_kernel_run(const tk_kernel *k, const tk_tiling *t, const tk_matrix *const *inputs,
                  tk_matrix *output)
{
    bool aliased = false;
    int rc = tk__kernel_validate("tk_kernel_run", k, t, inputs, output, &aliased);
    if (rc)
        return rc;
    tk__runner by = {"tk_kernel_run", "TK_KERNEL_UNDO", k->undo};
    return tk__kernel_exec(&by, k, t, inputs, output, aliased);
}

int tk__kernel_exec(const tk__runner *by, const tk_kernel *k, const tk_tiling *t,
                    const tk_matrix *const *inputs, tk_matrix *output, bool aliased)
{
    int rc;
    bool pad = t->tail == TK_TAIL_PAD;
    if (!pad && (k->is_axpy || !by->undo)) {  /* the built-in body never fails */
        tk__kernel_hold(k, 1);
        rc = tk__exec_run(by, k, t, inputs, output, aliased, NULL);
        tk__kernel_hold(k, -1);
        return rc;
    }

    /* The work buffer: padded copies of every operand (the output is
     * written only by the final crop), or the undo copy of the output. */
    size_t bytes;
    int64_t es = tk__esize(output->dtype);
    if ((rc = pad ? tk__bytes(by->fn, k->n_inputs + 1, t->padded_elements, es, &bytes)
                  : tk__bytes(by->fn, output->rows, output->cols, es, &bytes)))
        return tk__fail(rc, "%s: %s of %lldx%lld %s overflows", by->fn,
                        pad ? "the padded copies" : "the undo copy",
                        (long long)(pad ? t->padded_rows : output->rows),
                        (long long)(pad ? t->padded_cols : output->cols),
                        tk_dtype_name(output->dtype));
    struct tk__kernel_box *b = (struct tk__kernel_box *)k;   /* only the cache changes */
    bool cached = !atomic_flag_test_and_set_explicit(&b->work_busy, memory_order_acquire);
    if (cached)
        tk__keep(&b->work, &b->work_bytes, bytes);
    void *work = cached ? b->work : tk__lines(bytes);
    if (!work)
        rc = tk__fail(TK_ENOMEM, "%s: out of memory for %zu bytes of %s", by->fn, bytes,
                      pad ? "padded copies" : "undo");
    else {
        tk__kernel_hold(k, 1);
        rc = pad ? tk__exec_padded(by, k, t, inputs, output, work)
                 : tk__exec_run(by, k, t, inputs, output, aliased, work);
        tk__kernel_hold(k, -1);
    }
    if (cached)
        atomic_flag_clear_explicit(&b->work_busy, memory_order_release);
    else
        free(work);
    return rc;
}
