/* pipeline.c - tk_pipeline: tiles through multi-buffered on-chip memory the
 * way Pallas's emit_pipeline moves them.  A run builds the static schedule
 * (copies in, waits, body calls, copies out, in program order), checks it
 * for hazards from slot lifetimes, times it with a discrete-event model of
 * the device (modeled, never measured), and executes it on the host for
 * the data. */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TK__IN_START, TK__IN_WAIT, TK__BODY, TK__OUT_START, TK__OUT_WAIT };

/* One operation of the schedule.  Copies and waits name one operand. */
typedef struct {
    int kind;
    int operand;        /* input number, or TK_OPERAND_OUTPUT */
    int64_t block;      /* grid step whose block is moved or computed */
    int64_t step;       /* grid step during which the operation is issued */
    int64_t slot;
} tk__op;

typedef struct {
    int64_t step, slot;
    int operand, kind;
} tk__race;

/* A modeled copy (when it ran, on which copy engine) or, for a wait, the
 * stall it caused (engine -1). */
typedef struct {
    double start, end;
    int64_t engine;
} tk__copy;

struct tk_pipeline {
    const tk_kernel *k;   /* a kernel over a tiling, */
    const tk_tiling *t;
    tk_call *call;        /* or a general call */
    const tk_device *d;
    /* Slots of one operand, from tk_pipeline_set_buffers; 0: the parameter. */
    int64_t buffers[2][TK_CALL_MAX_OPERANDS];
    int64_t param[6];   /* TK_PIPE_MODE .. TK_PIPE_FAULT */
    /* What the last run found; ran is false until a run got that far. */
    bool ran, modeled, checked;
    bool running;           /* a run is calling the body: tk__not_running */
    char unmodeled[256];    /* why nothing was modeled */
    int64_t steps, copies_in, copies_out, skipped, bytes_in, bytes_out, onchip, padded;
    tk__race *races;
    int64_t n_races, races_cap;
    double modeled_ns, compute_ns, stall_ns, overlap;
    double *stall;          /* per step */
    tk__op *ops;
    int64_t n_ops;
    tk__copy *copies;       /* per op: copy starts and waits */
    double *body_start;     /* per step */
    double body_ns;
    /* The host run's slots and output image, kept for the next run. */
    void *work;
    size_t work_bytes;
};

static int64_t tk__param(const tk_pipeline *p, int param)
{
    return p->param[param - TK_PIPE_MODE];
}

int tk_pipeline_create(tk_pipeline **out, const tk_kernel *k, const tk_tiling *t,
                       const tk_device *d)
{
    if (!out)
        return tk__fail(TK_EINVAL, "tk_pipeline_create: out is NULL");
    *out = NULL;
    if (!k || !t || !d)
        return tk__fail(TK_EINVAL, "tk_pipeline_create: %s is NULL",
                        !k ? "kernel" : !t ? "tiling" : "device");
    tk_pipeline *p = calloc(1, sizeof *p);
    if (!p)
        return tk__fail(TK_ENOMEM, "tk_pipeline_create: out of memory for the handle");
    p->k = k;
    p->t = t;
    p->d = d;
    const int64_t defaults[6] = {TK_MODE_SIMULATE, 2, 2, 0, 1, TK_FAULT_NONE};
    memcpy(p->param, defaults, sizeof defaults);
    *out = p;
    return TK_OK;
}

int tk_pipeline_create_call(tk_pipeline **out, tk_call *c, const tk_device *d)
{
    if (!out)
        return tk__fail(TK_EINVAL, "tk_pipeline_create_call: out is NULL");
    *out = NULL;
    if (!c || !d)
        return tk__fail(TK_EINVAL, "tk_pipeline_create_call: %s is NULL", !c ? "call" : "device");
    tk_pipeline *p = calloc(1, sizeof *p);
    if (!p)
        return tk__fail(TK_ENOMEM, "tk_pipeline_create_call: out of memory for the handle");
    p->call = c;
    p->d = d;
    const int64_t defaults[6] = {TK_MODE_SIMULATE, 2, 2, 0, 1, TK_FAULT_NONE};
    memcpy(p->param, defaults, sizeof defaults);
    *out = p;
    return TK_OK;
}

/* A pipeline whose body is running refuses runs and changes (TK_ESTATE):
 * a run frees and rebuilds the schedule and slots the body is using. */
static int tk__not_running(const char *fn, const void *h)
{
    const tk_pipeline *p = h;
    return p && p->running ? tk__fail(TK_ESTATE, "%s: the pipeline is running (this call "
                                      "came from its body); a running pipeline cannot be "
                                      "changed or run again", fn) : TK_OK;
}

int tk_pipeline_set_buffers(tk_pipeline *p, int kind, int index, int64_t buffers)
{
    if (!p)
        return tk__fail(TK_EINVAL, "tk_pipeline_set_buffers: pipeline is NULL");
    if (p->running)
        return tk__not_running("tk_pipeline_set_buffers", p);
    if (kind != TK_CALL_INPUT && kind != TK_CALL_OUTPUT)
        return tk__fail(TK_EINVAL, "tk_pipeline_set_buffers: kind %d is not TK_CALL_INPUT "
                        "or TK_CALL_OUTPUT", kind);
    bool in = kind == TK_CALL_INPUT;
    int n = p->call ? (in ? p->call->n_in : p->call->n_out) : (in ? p->k->n_inputs : 1);
    if (index < 0 || index >= n)
        return tk__fail(TK_ERANGE, "tk_pipeline_set_buffers: %s %d is outside [0, %d)",
                        in ? "input" : "output", index, n);
    int64_t lo, hi;  /* the parameter's range, from the one table of bounds */
    tk_param_bounds(in ? TK_PIPE_INPUT_BUFFERS : TK_PIPE_OUTPUT_BUFFERS, &lo, &hi);
    if (buffers != 0 && (buffers < lo || buffers > hi))
        return tk__fail(TK_ERANGE, "tk_pipeline_set_buffers: %lld slots for %s %d is outside "
                        "[%lld, %lld] (0 goes back to the parameter)", (long long)buffers,
                        in ? "input" : "output", index, (long long)lo, (long long)hi);
    p->buffers[in ? 0 : 1][index] = buffers;
    p->ran = false;  /* the statistics describe the old slot counts */
    return TK_OK;
}

static void tk__forget(tk_pipeline *p)
{
    free(p->races);
    free(p->stall);
    free(p->ops);
    free(p->copies);
    free(p->body_start);
    p->races = NULL;
    p->stall = NULL;
    p->ops = NULL;
    p->copies = NULL;
    p->body_start = NULL;
    p->n_races = p->races_cap = p->n_ops = 0;
    p->ran = p->modeled = p->checked = false;
    p->unmodeled[0] = 0;
    p->steps = p->copies_in = p->copies_out = p->skipped = p->bytes_in = p->bytes_out = 0;
    p->onchip = p->padded = 0;
    p->modeled_ns = p->compute_ns = p->stall_ns = p->overlap = p->body_ns = 0;
}

void tk_pipeline_destroy(tk_pipeline *p)
{
    if (!p)
        return;
    tk__forget(p);
    free(p->work);
    free(p);
}

static void tk__pipeline_store(void *h, int param, int64_t value)
{
    ((tk_pipeline *)h)->param[param - TK_PIPE_MODE] = value;
}

int tk_pipeline_set(tk_pipeline *p, int param, int64_t value)
{
    static const tk__settable s = {"tk_pipeline_set", "pipeline", TK__PIPELINE,
                                   tk__not_running, NULL, tk__pipeline_store,
                                   offsetof(tk_pipeline, ran), NULL};
    return tk__param_set(&s, p, param, value);
}

int tk_pipeline_get(const tk_pipeline *p, int param, int64_t *value)
{
    if (!p || !value)
        return tk__fail(TK_EINVAL, "tk_pipeline_get: %s is NULL", !p ? "pipeline" : "value");
    if (param < TK_PIPE_MODE || param > TK_PIPE_FAULT)
        return tk__fail(TK_EINVAL, "tk_pipeline_get: unknown parameter %d", param);
    *value = tk__param(p, param);
    return TK_OK;
}

/* ---- the schedule ------------------------------------------------------- */

typedef struct {
    tk__op *op;
    int64_t n, cap;
} tk__ops;

/* a itself, or a larger copy when it holds n of *cap elements already
 * (doubling from `first`); NULL, with a unchanged, when memory runs out. */
static void *tk__room(void *a, int64_t *cap, int64_t n, size_t size, int64_t first)
{
    if (n < *cap)
        return a;
    int64_t c = *cap ? 2 * *cap : first;
    void *grown = realloc(a, (size_t)c * size);
    if (grown)
        *cap = c;
    return grown;
}

static bool tk__emit(tk__ops *s, int kind, int operand, int64_t block, int64_t step,
                     int64_t slot)
{
    tk__op *op = tk__room(s->op, &s->cap, s->n, sizeof *op, 64);
    if (!op)
        return false;
    s->op = op;
    s->op[s->n++] = (tk__op){kind, operand, block, step, slot};
    return true;
}

/* What the schedule is built from.  Operand o is input o for o < n_in, else
 * output o - n_in; use[k * n + o] numbers the block operand o uses at step k
 * (its fetch, for an input: a new number whenever the block index changes;
 * its residency, for an output).  A tk_tiling grid uses a new block of every
 * operand at every step: use is then k. */
typedef struct tk__flow {
    int n_in, n_out;
    int64_t steps;
    int64_t *use;
    int64_t buffers[2 * TK_CALL_MAX_OPERANDS];  /* slots per operand */
    int64_t bytes[2 * TK_CALL_MAX_OPERANDS];    /* stored bytes of one block */
    int64_t elems;                              /* f32 elements a body computes */
    bool sync;                                  /* no pipelining */
    const char *fn;                             /* the caller, for messages */
} tk__flow;

/* The operand number witnesses and copies carry: an input's index, or
 * TK_OPERAND_OUTPUT - j for output j. */
static int tk__who(const tk__flow *f, int o)
{
    return o < f->n_in ? o : TK_OPERAND_OUTPUT - (o - f->n_in);
}

static int tk__operand_of(const tk__flow *f, int who)
{
    return who >= 0 ? who : f->n_in + (TK_OPERAND_OUTPUT - who);
}

static int64_t tk__use(const tk__flow *f, int64_t k, int o)
{
    return f->use[k * (f->n_in + f->n_out) + o];
}

/* Whether operand o starts a block at step k (a fetch; for an output, a
 * residency), and whether it ends one there. */
static bool tk__starts(const tk__flow *f, int64_t k, int o)
{
    return k == 0 || tk__use(f, k, o) != tk__use(f, k - 1, o);
}

static bool tk__ends(const tk__flow *f, int64_t k, int o)
{
    return k == f->steps - 1 || tk__use(f, k, o) != tk__use(f, k + 1, o);
}

/* The copy-out of every output block whose residency ends at step k. */
static bool tk__emit_copies_out(tk__ops *s, const tk__flow *f, int64_t k)
{
    bool ok = true;
    for (int o = f->n_in; o < f->n_in + f->n_out && ok; o++)
        if (tk__ends(f, k, o))
            ok = tk__emit(s, TK__OUT_START, tk__who(f, o), tk__use(f, k, o), k,
                          tk__use(f, k, o) % f->buffers[o]);
    return ok;
}

/* The emit_pipeline schedule (DESIGN's table), generalized to blocks that
 * repeat: with B slots for an input, its fetch c + B - 1 starts during the
 * step that starts fetch c, and a step that starts a fetch waits it before
 * the body; steps that reuse the previous block copy nothing.  An output
 * block is copied out after the body of the last step of its residency,
 * which then waits the previous residency's copy-out whatever the output's
 * slot count, as emit_pipeline does: with one slot the next body writes the
 * slot still being copied out, a hazard.  Only without pipelining does a
 * step wait its own copy-out.  The fault, if any, is made at step steps / 2,
 * or the first step after it where it can act. */
/* Whether fault can act at step k: an input starts a block there (for a
 * prefetch overrun, one whose prefetch has a block to copy), or an output's
 * residency ends there (with a copy-out to wait, for a skipped output wait:
 * the previous one when pipelining, its own without). */
static bool tk__fault_applies(const tk__flow *f, int64_t fault, int64_t k)
{
    bool input = fault == TK_FAULT_SKIP_INPUT_WAIT || fault == TK_FAULT_PREFETCH_OVERRUN;
    int64_t last = f->steps - 1;
    for (int o = input ? 0 : f->n_in; o < (input ? f->n_in : f->n_in + f->n_out); o++) {
        int64_t ahead = tk__use(f, k, o) + (f->buffers[o] > 1 ? f->buffers[o] - 1 : 0);
        if (input ? tk__starts(f, k, o) && (fault == TK_FAULT_SKIP_INPUT_WAIT ||
                                            ahead <= tk__use(f, last, o))
                  : tk__ends(f, k, o) && (fault != TK_FAULT_SKIP_OUTPUT_WAIT ||
                                          tk__use(f, k, o) - !f->sync >= 0))
            return true;
    }
    return false;
}

static bool tk__schedule(tk__ops *s, const tk__flow *f, int64_t fault)
{
    int n = f->n_in + f->n_out;
    int64_t at = f->steps / 2, most = 1, last = f->steps - 1;
    bool ok = true;
    /* Where blocks repeat, the first step from the middle on where it acts. */
    while (fault != TK_FAULT_NONE && at < last && !tk__fault_applies(f, fault, at))
        at++;
    for (int i = 0; i < f->n_in; i++)
        most = f->buffers[i] > most ? f->buffers[i] : most;
    for (int64_t c = 0; c + 1 < most; c++)   /* the prologue, input after input */
        for (int i = 0; i < f->n_in && ok; i++)
            if (c + 1 < f->buffers[i] && c <= tk__use(f, last, i))
                ok = tk__emit(s, TK__IN_START, i, c, 0, c % f->buffers[i]);
    for (int64_t k = 0; k < f->steps && ok; k++) {
        bool here = k == at;
        for (int i = 0; i < f->n_in && ok; i++) {
            if (!tk__starts(f, k, i))
                continue;
            int64_t b = f->buffers[i], ahead = tk__use(f, k, i) + (b > 1 ? b - 1 : 0);
            if (here && fault == TK_FAULT_PREFETCH_OVERRUN)
                ahead++;
            if (ahead <= tk__use(f, last, i))
                ok = tk__emit(s, TK__IN_START, i, ahead, k, ahead % b);
        }
        for (int i = 0; i < f->n_in && ok && !(here && fault == TK_FAULT_SKIP_INPUT_WAIT); i++)
            if (tk__starts(f, k, i))
                ok = tk__emit(s, TK__IN_WAIT, i, tk__use(f, k, i), k,
                              tk__use(f, k, i) % f->buffers[i]);
        bool early = here && fault == TK_FAULT_EARLY_COPY_OUT;
        if (early)
            ok = ok && tk__emit_copies_out(s, f, k);
        ok = ok && tk__emit(s, TK__BODY, 0, k, k, 0);
        if (!early)
            ok = ok && tk__emit_copies_out(s, f, k);
        for (int o = f->n_in; o < n && ok; o++) {
            if (!tk__ends(f, k, o) || (here && fault == TK_FAULT_SKIP_OUTPUT_WAIT))
                continue;
            int64_t wait = tk__use(f, k, o) - !f->sync;
            if (wait >= 0)
                ok = tk__emit(s, TK__OUT_WAIT, tk__who(f, o), wait, k, wait % f->buffers[o]);
        }
    }
    for (int o = f->n_in; o < n && ok && !f->sync && f->steps > 0; o++)
        ok = tk__emit(s, TK__OUT_WAIT, tk__who(f, o), tk__use(f, last, o), last,
                      tk__use(f, last, o) % f->buffers[o]);
    return ok;
}

/* ---- hazards -------------------------------------------------------------
 * Found from the order of operations alone, so the answer is exact and the
 * same on every run.  A slot holds one block; it is in flight from the
 * start of its copy to the wait for it, and an input slot is in use until
 * the body of its block has run. */

typedef struct {
    int64_t block;     /* -1: empty */
    bool in_flight;
    bool consumed;     /* input: its body has run; output: copied out */
    bool complete;     /* output: the last body of its block's residency has run */
} tk__slot;

static bool tk__race_add(tk_pipeline *p, int64_t step, int64_t slot, int operand, int kind)
{
    tk__race *r = tk__room(p->races, &p->races_cap, p->n_races, sizeof *r, 16);
    if (!r)
        return false;
    p->races = r;
    p->races[p->n_races++] = (tk__race){step, slot, operand, kind};
    return true;
}

static int tk__check(tk_pipeline *p, const tk__flow *f)
{
    int n = f->n_in + f->n_out;
    int64_t first[2 * TK_CALL_MAX_OPERANDS + 1];  /* operand o's slots start here */
    first[0] = 0;
    for (int o = 0; o < n; o++)
        first[o + 1] = first[o] + f->buffers[o];
    tk__slot *slot = malloc((size_t)first[n] * sizeof *slot);
    if (!slot)
        return tk__fail(TK_ENOMEM, "%s: out of memory for the hazard check", f->fn);
    for (int64_t i = 0; i < first[n]; i++)
        slot[i] = (tk__slot){-1, false, true, false};
    bool ok = true;
    for (int64_t i = 0; i < p->n_ops && ok; i++) {
        const tk__op *op = &p->ops[i];
        int o = tk__operand_of(f, op->operand);
        tk__slot *s = &slot[first[o] + op->slot];
        switch (op->kind) {
        case TK__IN_START:
            if (s->in_flight || !s->consumed)
                ok = tk__race_add(p, op->step, op->slot, op->operand, TK_HAZARD_OVERWRITE);
            *s = (tk__slot){op->block, true, false, false};
            break;
        case TK__IN_WAIT:
        case TK__OUT_WAIT:
            if (s->block == op->block)
                s->in_flight = false;
            break;
        case TK__BODY:
            for (int j = 0; j < n && ok; j++) {
                int64_t b = tk__use(f, op->block, j), at = b % f->buffers[j];
                tk__slot *x = &slot[first[j] + at];
                if (j < f->n_in) {
                    if (x->block != b || x->in_flight)
                        ok = tk__race_add(p, op->step, at, j, TK_HAZARD_UNWAITED_READ);
                    /* A block is in use until the last step that reads it. */
                    if (x->block == b && tk__ends(f, op->block, j))
                        x->consumed = true;
                } else {
                    if (x->in_flight)
                        ok = tk__race_add(p, op->step, at, tk__who(f, j),
                                          TK_HAZARD_UNWAITED_WRITE);
                    x->consumed = false;   /* written, not yet copied out */
                    x->block = b;
                    x->complete = tk__ends(f, op->block, j);
                }
            }
            break;
        case TK__OUT_START:
            /* Before the block's last body: a resident output's earlier
             * steps wrote the slot, and its copy would miss the rest. */
            if (s->block != op->block || s->consumed || !s->complete)
                ok = tk__race_add(p, op->step, op->slot, op->operand,
                                  TK_HAZARD_EARLY_COPY_OUT);
            *s = (tk__slot){op->block, true, true, false};
            break;
        }
    }
    for (int o = 0; o < n && ok; o++)
        for (int64_t i = first[o]; i < first[o + 1] && ok; i++)
            if (slot[i].in_flight)
                ok = tk__race_add(p, p->steps - 1, i - first[o], tk__who(f, o),
                                  TK_HAZARD_NEVER_WAITED);
    free(slot);
    return ok ? TK_OK : tk__fail(TK_ENOMEM, "%s: out of memory for witnesses", f->fn);
}

/* ---- the cost model ------------------------------------------------------
 * One core issues the operations in order: a copy starts when it is issued
 * and a copy engine is free, and takes the copy latency plus its bytes at
 * HBM bandwidth; a wait stalls the core until its copy ends; a body takes
 * the block's elements at the compute rate. */

static int tk__figure(tk_pipeline *p, int param, int64_t *v)
{
    /* A figure the device lacks is not the run's failure: keep
     * tk_device_get's words (they name the figure) for the stats, and leave
     * the thread's message as it was, as a successful call must. */
    char before[1024];
    snprintf(before, sizeof before, "%s", tk_last_error_message());
    int rc = tk_device_get(p->d, param, v);
    if (rc) {
        snprintf(p->unmodeled, sizeof p->unmodeled, "%s", tk_last_error_message());
        tk__fail(TK_OK, "%s", before);
    }
    return rc;
}

/* Time of body intervals [start, start + len) that overlaps [a, b).  Bodies
 * run one after another, so their ends ascend; *at is the first body ending
 * after the previous copy's start, and copies start in nearly ascending
 * order, so walking from it is a step or two. */
static double tk__overlap_with_bodies(const tk_pipeline *p, double a, double b, int64_t *at)
{
    int64_t lo = *at;
    while (lo > 0 && p->body_start[lo - 1] + p->body_ns > a)
        lo--;
    while (lo < p->steps && p->body_start[lo] + p->body_ns <= a)
        lo++;
    *at = lo;   /* the first body ending after a */
    double sum = 0;
    for (int64_t k = lo; k < p->steps && p->body_start[k] < b; k++) {
        double s = p->body_start[k] > a ? p->body_start[k] : a;
        double e = p->body_start[k] + p->body_ns < b ? p->body_start[k] + p->body_ns : b;
        sum += e > s ? e - s : 0;
    }
    return sum;
}

static int tk__model(tk_pipeline *p, const tk__flow *f)
{
    int64_t bw, lat, engines, rate;
    if (tk__figure(p, TK_DEVICE_HBM_BYTES_PER_S, &bw) ||
        tk__figure(p, TK_DEVICE_COPY_LATENCY_NS, &lat) ||
        tk__figure(p, TK_DEVICE_COPY_ENGINES, &engines) ||
        tk__figure(p, TK_DEVICE_COMPUTE_ELEMS_PER_S, &rate))
        return TK_OK;   /* nothing modeled; the stats say why */
    /* The op that last started each operand's block (blocks number from 0
     * to at most steps - 1), or -1: what a wait waits for. */
    int n = f->n_in + f->n_out;
    size_t last_bytes;
    if (tk__bytes(f->fn, p->steps, n, sizeof(int64_t), &last_bytes))
        return tk__fail(TK_EOVERFLOW, "%s: the cost model's %lld-step table overflows",
                        f->fn, (long long)p->steps);
    double *free_at = calloc((size_t)engines, sizeof *free_at);
    int64_t *last = malloc(last_bytes ? last_bytes : 1);
    p->copies = calloc((size_t)p->n_ops, sizeof *p->copies);
    p->body_start = calloc((size_t)p->steps, sizeof *p->body_start);
    if (!free_at || !last || !p->copies || !p->body_start) {
        free(free_at);
        free(last);
        return tk__fail(TK_ENOMEM, "%s: out of memory for the cost model", f->fn);
    }
    for (int64_t i = 0; i < p->steps * n; i++)
        last[i] = -1;
    p->body_ns = (double)f->elems / (double)rate * 1e9;
    double t = 0, copy_ns = 0, hidden = 0, end = 0;
    for (int64_t i = 0; i < p->n_ops; i++) {
        const tk__op *o = &p->ops[i];
        if (o->kind == TK__IN_START || o->kind == TK__OUT_START) {
            int64_t e = 0;
            for (int64_t j = 1; j < engines; j++)
                if (free_at[j] < free_at[e])
                    e = j;
            double bytes = (double)f->bytes[tk__operand_of(f, o->operand)];
            double start = t > free_at[e] ? t : free_at[e];
            p->copies[i] = (tk__copy){start, start + (double)lat + bytes / (double)bw * 1e9, e};
            last[tk__operand_of(f, o->operand) * p->steps + o->block] = i;
            free_at[e] = p->copies[i].end;
            end = end > free_at[e] ? end : free_at[e];
        } else if (o->kind == TK__BODY) {
            p->body_start[o->block] = t;
            t += p->body_ns;
        } else {
            /* The copy this waits for: the latest start of that block (a
             * faulty schedule may never have started it).  An operand's
             * copies go one way, in or out, so its block names the kind. */
            int64_t j = last[tk__operand_of(f, o->operand) * p->steps + o->block];
            p->copies[i] = (tk__copy){t, t, -1};
            if (j >= 0 && p->copies[j].end > t) {
                p->stall[o->step] += p->copies[j].end - t;
                t = p->copies[i].end = p->copies[j].end;
            }
        }
    }
    int64_t at = 0;
    for (int64_t i = 0; i < p->n_ops; i++) {
        const tk__op *o = &p->ops[i];
        if (o->kind != TK__IN_START && o->kind != TK__OUT_START)
            continue;
        copy_ns += p->copies[i].end - p->copies[i].start;
        hidden += tk__overlap_with_bodies(p, p->copies[i].start, p->copies[i].end, &at);
    }
    free(free_at);
    free(last);
    p->modeled_ns = t > end ? t : end;
    p->compute_ns = p->body_ns * (double)p->steps;
    p->stall_ns = 0;
    for (int64_t k = 0; k < p->steps; k++)
        p->stall_ns += p->stall[k];
    p->overlap = copy_ns > 0 ? hidden / copy_ns : 0;
    p->modeled = true;
    return TK_OK;
}

/* ---- the data ------------------------------------------------------------
 * A schedule runs on the host with f32 slots, a kernel's as the call of
 * its tiling (tk__kernel_call): each operand's slots hold f32 blocks of its
 * own shape, NaN at first, as Pallas's interpret mode fills on-chip memory
 * (a body or a faulty schedule that reads a slot nothing wrote shows NaN
 * rather than zeros); a copy-in promotes the block its fetch number names
 * (the call's pad fill, zero for a kernel, past the edge); a body sees its
 * step's slots; a copy-out casts its block's valid part into an image of
 * its output.  The images start as copies of the outputs (blocks no step
 * maps keep their bytes) and reach them only when every step has
 * succeeded.  Data moves when a copy starts, so a schedule run with its
 * hazards unchecked computes what that order of operations implies.  The
 * built-in body on a schedule checked free of hazards computes the same
 * bits without slots (tk__kernel_axpy_run), and so does a call's host run
 * (tk__call_execute). */

/* c's schedule f on the host, slot by slot (above); fn and outcome word a
 * failing body's message.  Kept in the pipeline: each operand's fetch or
 * residency numbers' first steps, the slots, the images. */
static int tk__execute_call(tk_pipeline *p, tk_call *c, const tk__plan *plan,
                            const tk_matrix *const *inputs, tk_matrix *const *outputs,
                            const tk__flow *f, const char *outcome)
{
    int n = plan->n;
    /* Byte offsets in p->work: the first steps, each operand's slots, each
     * output's image, each part on a cache line. */
    int64_t slot_at[2 * TK_CALL_MAX_OPERANDS + 1], image_at[TK_CALL_MAX_OPERANDS + 1], sz;
    bool ok = tk__mul(f->steps, n, &sz) && tk__mul(sz, 8, &sz) && tk__add(sz, 63, &sz);
    slot_at[0] = sz / 64 * 64;
    for (int o = 0; o < n && ok; o++) {
        const tk__spec *s = tk__call_spec(c, o);
        ok = tk__mul(f->buffers[o], s->block_rows * s->block_cols * 4, &sz) &&
             tk__add(sz, slot_at[o] + 63, &sz);
        slot_at[o + 1] = sz / 64 * 64;
    }
    image_at[0] = slot_at[n];
    for (int j = 0; j < c->n_out && ok; j++) {   /* each image fits: it is an output's size */
        ok = tk__add(c->out[j].rows * c->out[j].cols * tk__esize(c->out[j].dtype),
                     image_at[j] + 63, &sz);
        image_at[j + 1] = sz / 64 * 64;
    }
    size_t bytes;
    int rc = ok ? tk__bytes(f->fn, image_at[c->n_out], 1, 1, &bytes) : TK_EOVERFLOW;
    if (rc)
        return tk__fail(TK_EOVERFLOW, "%s: the slots, output images and step numbers of a "
                        "run slot by slot overflow", f->fn);
    /* p->work is malloc's: its lines are 64-byte aligned only by chance, so
     * the offsets are from the first line in it. */
    if (!tk__keep(&p->work, &p->work_bytes, bytes + 64))
        return tk__fail(TK_ENOMEM, "%s: out of memory for %zu bytes of slots and output "
                        "images", f->fn, bytes);
    unsigned char *w = (unsigned char *)(((uintptr_t)p->work + 63) / 64 * 64);
    int64_t *first = (int64_t *)(void *)w;  /* first[o * steps + u]: number u of o's start */
    for (int64_t k = 0; k < f->steps; k++)
        for (int o = 0; o < n; o++)
            if (tk__starts(f, k, o))
                first[o * f->steps + tk__use(f, k, o)] = k;
    for (float *v = (float *)(void *)(w + slot_at[0]); v < (float *)(void *)(w + slot_at[n]);)
        *v++ = NAN;
    for (int j = 0; j < c->n_out; j++) {
        size_t row = (size_t)(outputs[j]->cols * tk__esize(outputs[j]->dtype));
        for (int64_t r = 0; r < outputs[j]->rows; r++)
            memcpy(w + image_at[j] + (size_t)r * row, tk__row(outputs[j], r), row);
    }
    float fill = tk__call_fill(c);
    c->ran = false;   /* the call's statistics describe host runs */
    c->running = true;
    for (int64_t i = 0; i < p->n_ops && !rc; i++) {
        const tk__op *op = &p->ops[i];
        int o = tk__operand_of(f, op->operand);
        const tk__spec *s = tk__call_spec(c, o);
        /* A copy's slot, and the block index where its number starts. */
        float *slot = (float *)(void *)(w + slot_at[o]) + op->slot * s->block_rows *
                                                          s->block_cols;
        bool copy = op->kind == TK__IN_START || op->kind == TK__OUT_START;
        const int64_t *b = copy ? &plan->idx[(first[o * f->steps + op->block] * n + o) * 2]
                                : NULL;
        tk_block view[2 * TK_CALL_MAX_OPERANDS], *ptr[2 * TK_CALL_MAX_OPERANDS];
        switch (op->kind) {
        case TK__IN_START:
            tk__call_copy_in(c, o, inputs[o], b, slot, fill);
            break;
        case TK__BODY:
            for (int q = 0; q < n; q++) {
                const tk__spec *t = tk__call_spec(c, q);
                int64_t u = tk__use(f, op->block, q);
                tk__call_view(c, q, &plan->idx[(op->block * n + q) * 2],
                              &plan->grid[op->block * c->rank],
                              (float *)(void *)(w + slot_at[q]) + u % f->buffers[q] *
                                  t->block_rows * t->block_cols, t->block_cols, &view[q]);
                ptr[q] = &view[q];
            }
            rc = tk__call_body(c, ptr, op->block, &plan->grid[op->block * c->rank], f->fn,
                               outcome);
            break;
        case TK__OUT_START:
            tk__call_cast_out(c, o - c->n_in, slot, b, w + image_at[o - c->n_in]);
            break;
        default:   /* waits move no data */
            break;
        }
    }
    c->running = false;
    for (int j = 0; j < c->n_out && !rc; j++) {
        size_t row = (size_t)(outputs[j]->cols * tk__esize(outputs[j]->dtype));
        for (int64_t r = 0; r < outputs[j]->rows; r++)
            memcpy(tk__row(outputs[j], r), w + image_at[j] + (size_t)r * row, row);
    }
    return rc;
}

/* ---- run ---------------------------------------------------------------- */

static int tk__run_target(const tk_pipeline *p, const tk_matrix *const *inputs,
                          tk_matrix *output)
{
    if (tk_device_is_simulated(p->d))
        return tk__fail(TK_ENOTARGET, "tk_pipeline_run: a real target is required; "
                        "simulation fallback is disabled (\"%s\" is a simulated profile)",
                        tk_device_kind(p->d));
    if (strcmp(tk_device_platform(p->d), "cpu") != 0)
        return tk__fail(TK_ENOTARGET, "tk_pipeline_run: \"%s\" (%s) is driven by the caller, "
                        "not by the library", tk_device_kind(p->d),
                        tk_device_platform(p->d));
    return tk_kernel_run(p->k, p->t, inputs, output);
}

/* Pallas's rule for a block of a rows x cols operand: each dimension a
 * multiple of the layout tile's (lr x lc), or the operand's whole extent. */
static bool tk__laid_out(int64_t br, int64_t bc, int64_t rows, int64_t cols, int64_t lr,
                         int64_t lc)
{
    return (br % lr == 0 || br == rows) && (bc % lc == 0 || bc == cols);
}

/* Blocks must be whole layout tiles, and every operand's slots must fit the
 * device's on-chip limit, before anything runs: the scoped limit, or the
 * memory itself where a limit set above it (a kernel's vmem_limit_bytes
 * cannot make VMEM). */
static int tk__layout(const tk_pipeline *p, const char *fn, int64_t *lr, int64_t *lc,
                      int64_t *limit)
{
    int rc = tk_device_get(p->d, TK_DEVICE_LAYOUT_ROWS, lr);
    if (!rc)
        rc = tk_device_get(p->d, TK_DEVICE_LAYOUT_COLS, lc);
    if (!rc)
        rc = tk_device_get(p->d, TK_DEVICE_ONCHIP_LIMIT_BYTES, limit);
    if (rc) {   /* tk_device_get's words name the figure; keep them */
        char why[256];
        snprintf(why, sizeof why, "%s", tk_last_error_message());
        return tk__fail(rc, "%s: %s", fn, why);
    }
    int64_t memory;
    if (tk__device_known(p->d, TK_DEVICE_ONCHIP_BYTES, &memory) && memory < *limit)
        *limit = memory;
    return TK_OK;
}

/* The slots of every operand: buffers x block bytes, summed into p->onchip;
 * false on overflow. */
static bool tk__onchip(tk_pipeline *p, const tk__flow *f)
{
    p->onchip = 0;
    for (int o = 0; o < f->n_in + f->n_out; o++) {
        int64_t v;
        if (!tk__mul(f->buffers[o], f->bytes[o], &v) || !tk__add(p->onchip, v, &p->onchip))
            return false;
    }
    return true;
}

static int tk__fits(tk_pipeline *p, const tk__flow *f, int dtype)
{
    int64_t lr, lc, limit, br = p->t->block_rows, bc = p->t->block_cols;
    int n = f->n_in;
    int rc = tk__layout(p, f->fn, &lr, &lc, &limit);
    if (rc)
        return rc;
    if (!tk__laid_out(br, bc, p->t->rows, p->t->cols, lr, lc))
        return tk__fail(TK_ELAYOUT, "tk_pipeline_run: pipeline blocks must be multiples of "
                        "(%lld,%lld), the \"%s\" layout tile, or span the matrix: got "
                        "%lldx%lld over %lldx%lld", (long long)lr, (long long)lc,
                        tk_device_kind(p->d), (long long)br, (long long)bc,
                        (long long)p->t->rows, (long long)p->t->cols);
    if (!tk__onchip(p, f))
        return tk__fail(TK_EOVERFLOW, "tk_pipeline_run: on-chip bytes of %lldx%lld blocks "
                        "overflow", (long long)br, (long long)bc);
    int64_t in_slots = 0;
    for (int i = 0; i < n; i++)
        in_slots += f->buffers[i];
    if (p->onchip > limit)
        return tk__fail(TK_ECAPACITY, "tk_pipeline_run: %d input(s) with %lld slot(s) in all "
                        "+ %lld output slot(s) of %lldx%lld %s blocks need %lld bytes, over "
                        "the \"%s\" on-chip limit of %lld", n, (long long)in_slots,
                        (long long)f->buffers[n], (long long)br, (long long)bc,
                        tk_dtype_name(dtype),
                        (long long)p->onchip, tk_device_kind(p->d), (long long)limit);
    return TK_OK;
}

/* Operand o's slot count: its own, else the parameter; 1 without pipelining. */
static int64_t tk__buffers(const tk_pipeline *p, const tk__flow *f, int o)
{
    if (f->sync)
        return 1;
    bool in = o < f->n_in;
    int64_t own = p->buffers[in ? 0 : 1][in ? o : o - f->n_in];
    return own ? own : tk__param(p, in ? TK_PIPE_INPUT_BUFFERS : TK_PIPE_OUTPUT_BUFFERS);
}

/* Build the schedule of f, check it for hazards and model it; TK_ERACE
 * names the first hazard.  Nothing has touched the outputs yet. */
static int tk__simulate(tk_pipeline *p, const tk__flow *f)
{
    tk__ops s = {0};
    p->steps = f->steps;
    p->stall = calloc((size_t)p->steps, sizeof *p->stall);
    if (!p->stall || !tk__schedule(&s, f, tk__param(p, TK_PIPE_FAULT))) {
        free(s.op);
        return tk__fail(TK_ENOMEM, "%s: out of memory for a %lld-step schedule", f->fn,
                        (long long)p->steps);
    }
    p->ops = s.op;
    p->n_ops = s.n;
    bool ok = true;
    for (int64_t i = 0; i < s.n; i++) {
        int64_t bytes = f->bytes[tk__operand_of(f, s.op[i].operand)];
        if (s.op[i].kind == TK__IN_START) {
            p->copies_in++;
            ok = ok && tk__add(p->bytes_in, bytes, &p->bytes_in);
        } else if (s.op[i].kind == TK__OUT_START) {
            p->copies_out++;
            ok = ok && tk__add(p->bytes_out, bytes, &p->bytes_out);
        }
    }
    if (!ok)
        return tk__fail(TK_EOVERFLOW, "%s: the bytes of %lld copies overflow", f->fn,
                        (long long)(p->copies_in + p->copies_out));
    for (int i = 0; i < f->n_in; i++)   /* steps that reuse the previous block */
        p->skipped += f->steps - 1 - tk__use(f, f->steps - 1, i);
    p->ran = true;
    p->checked = tk__param(p, TK_PIPE_DETECT_RACES);
    int rc;
    if ((p->checked && (rc = tk__check(p, f))) || (rc = tk__model(p, f)))
        return rc;
    if (!p->n_races)
        return TK_OK;
    const tk__race *r = &p->races[0];
    char operand[32];
    if (r->operand >= 0)
        snprintf(operand, sizeof operand, "input %d", r->operand);
    else if (f->n_out == 1)
        snprintf(operand, sizeof operand, "the output");
    else
        snprintf(operand, sizeof operand, "output %d", TK_OPERAND_OUTPUT - r->operand);
    return tk__fail(TK_ERACE, "%s: %lld hazard(s); first: %s at step %lld, "
                    "slot %lld of %s; the %s unchanged", f->fn, (long long)p->n_races,
                    tk_hazard_name(r->kind), (long long)r->step, (long long)r->slot,
                    operand, f->n_out == 1 ? "output is" : "outputs are");
}

/* A kernel's schedule f run slot by slot as the call of its tiling
 * (tk_call_create_kernel), zero past the edge. */
static int tk__kernel_call(tk_pipeline *p, const tk_matrix *const *inputs, tk_matrix *output,
                           const tk__flow *f)
{
    tk_call *c;
    const tk__plan *plan;
    int rc = tk_call_create_kernel(&c, p->k, p->t, output->dtype);
    if (!rc)
        rc = tk__call_plan(c, f->n_in, inputs, 1, &output, &plan);
    if (!rc)
        rc = tk__execute_call(p, c, plan, inputs, &output, f, "the output is unchanged");
    tk_call_destroy(c);
    return tk__call_as(rc, f->fn);
}

static int tk__pipeline_run(tk_pipeline *p, const tk_matrix *const *inputs, tk_matrix *output)
{
    if (p->call)
        return tk__fail(TK_ESTATE, "tk_pipeline_run: this pipeline simulates a tk_call; run "
                        "it with tk_pipeline_run_call");
    bool aliased;   /* harmless here: the output is written once, at the end */
    int rc = tk__kernel_validate("tk_pipeline_run", p->k, p->t, inputs, output, &aliased);
    if (rc)
        return rc;
    tk__forget(p);
    if (tk__param(p, TK_PIPE_MODE) == TK_MODE_TARGET)
        return tk__run_target(p, inputs, output);
    if (p->t->tail == TK_TAIL_SHIFT_INWARDS)
        return tk__fail(TK_ELAYOUT, "tk_pipeline_run: a pipeline visits the padded grid; "
                        "shift-inwards would move its blocks (use TK_TAIL_MASK or TK_TAIL_PAD)");
    int n = p->k->n_inputs;
    int64_t es = tk__esize(output->dtype), area = p->t->block_rows * p->t->block_cols;
    tk__flow f = {.n_in = n, .n_out = 1, .steps = p->t->tiles, .elems = area,
                  .sync = tk__param(p, TK_PIPE_NO_PIPELINING), .fn = "tk_pipeline_run"};
    for (int o = 0; o <= n; o++) {
        f.buffers[o] = tk__buffers(p, &f, o);
        /* A block may be far larger than the matrices it tiles. */
        if (!tk__mul(area, es, &f.bytes[o]))
            return tk__fail(TK_EOVERFLOW, "tk_pipeline_run: a %lldx%lld block of %s is "
                            "more bytes than int64 holds", (long long)p->t->block_rows,
                            (long long)p->t->block_cols, tk_dtype_name(output->dtype));
    }
    if ((rc = tk__fits(p, &f, output->dtype)))
        return rc;
    p->padded = p->t->padded_elements;
    /* Every step of a tk_tiling grid uses a new block of every operand. */
    size_t bytes;
    if ((rc = tk__bytes("tk_pipeline_run", f.steps, n + 1, sizeof *f.use, &bytes)))
        return rc;
    if (!(f.use = malloc(bytes)))
        return tk__fail(TK_ENOMEM, "tk_pipeline_run: out of memory for a %lld-step schedule",
                        (long long)f.steps);
    for (int64_t k = 0; k < f.steps; k++)
        for (int o = 0; o <= n; o++)
            f.use[k * (n + 1) + o] = k;
    rc = tk__simulate(p, &f);
    if (!rc && p->k->is_axpy && p->checked)
        tk__kernel_axpy_run(p->k, inputs, output);
    else if (!rc)
        rc = tk__kernel_call(p, inputs, output, &f);
    free(f.use);
    return rc;
}

/* tk__laid_out for every operand of a call. */
static int tk__fits_call(tk_pipeline *p, const tk__flow *f)
{
    int64_t lr, lc, limit;
    int rc = tk__layout(p, f->fn, &lr, &lc, &limit);
    for (int o = 0; o < f->n_in + f->n_out && !rc; o++) {
        bool in = o < f->n_in;
        const tk__spec *s = tk__call_spec(p->call, o);
        if (!tk__laid_out(s->block_rows, s->block_cols, s->rows, s->cols, lr, lc))
            rc = tk__fail(TK_ELAYOUT, "tk_pipeline_run_call: pipeline blocks must be multiples "
                          "of (%lld,%lld), the \"%s\" layout tile, or span the operand: %s "
                          "%d has %lldx%lld blocks over %lldx%lld", (long long)lr,
                          (long long)lc, tk_device_kind(p->d), in ? "input" : "output",
                          in ? o : o - f->n_in, (long long)s->block_rows,
                          (long long)s->block_cols, (long long)s->rows, (long long)s->cols);
    }
    if (rc)
        return rc;
    int64_t acc = 0;   /* -1 on overflow */
    for (int j = 0; j < f->n_out && acc >= 0; j++) {
        const tk__spec *s = &p->call->out[j];
        int o = f->n_in + j;
        /* The body accumulates in f32 and the block is cast once, when it is
         * written back: on the chip a residency of several steps in a
         * narrower dtype needs an f32 accumulator beside the slots (a
         * Pallas kernel's scratch), unless TK_CALL_ROUND_STEPS has the
         * kernel accumulate in the output's own slot. */
        bool several = f->steps > 0 && tk__use(f, f->steps - 1, o) < f->steps - 1;
        if (several && s->dtype != TK_DTYPE_F32 && !p->call->round_steps &&
            !tk__add(acc, s->block_rows * s->block_cols * 4, &acc))
            acc = -1;
    }
    if (acc < 0 || !tk__onchip(p, f) || !tk__add(p->onchip, acc, &p->onchip))
        return tk__fail(TK_EOVERFLOW, "tk_pipeline_run_call: on-chip bytes overflow");
    if (p->onchip <= limit)
        return TK_OK;
    int big = 0;  /* the operand whose slots take the most */
    for (int o = 1; o < f->n_in + f->n_out; o++)
        if (f->buffers[o] * f->bytes[o] > f->buffers[big] * f->bytes[big])
            big = o;
    char accs[64] = "";
    if (acc)
        snprintf(accs, sizeof accs, " and %lld bytes of f32 accumulators", (long long)acc);
    return tk__fail(TK_ECAPACITY, "tk_pipeline_run_call: the slots of every operand%s need "
                    "%lld bytes, over the \"%s\" on-chip limit of %lld; the most, "
                    "%lld bytes, are %s %d's %lld slot(s) of %lld", accs, (long long)p->onchip,
                    tk_device_kind(p->d), (long long)limit,
                    (long long)(f->buffers[big] * f->bytes[big]),
                    big < f->n_in ? "input" : "output", big < f->n_in ? big : big - f->n_in,
                    (long long)f->buffers[big], (long long)f->bytes[big]);
}

static int tk__pipeline_run_call(tk_pipeline *p, int n_inputs, const tk_matrix *const *inputs,
                                 int n_outputs, tk_matrix *const *outputs)
{
    if (!p->call)
        return tk__fail(TK_ESTATE, "tk_pipeline_run_call: this pipeline runs a tk_kernel; "
                        "run it with tk_pipeline_run");
    tk_call *c = p->call;
    const tk__plan *plan;
    int rc = tk__call_as(tk__call_plan(c, n_inputs, inputs, n_outputs, outputs, &plan),
                         "tk_pipeline_run_call");
    if (rc)
        return rc;
    tk__forget(p);
    if (tk__param(p, TK_PIPE_MODE) == TK_MODE_TARGET) {
        if (tk_device_is_simulated(p->d) || strcmp(tk_device_platform(p->d), "cpu") != 0)
            rc = tk__fail(TK_ENOTARGET, "tk_pipeline_run_call: a real target is required and "
                          "only the host is driven by the library (\"%s\" is %s)",
                          tk_device_kind(p->d), tk_device_is_simulated(p->d)
                          ? "a simulated profile" : "driven by the caller");
        else
            rc = tk__call_as(tk__call_execute(c, plan, inputs, outputs, tk__call_fill(c)),
                             "tk_pipeline_run_call");
        return rc;
    }
    int n = plan->n;
    tk__flow f = {.n_in = c->n_in, .n_out = c->n_out, .steps = c->steps,
                  .sync = tk__param(p, TK_PIPE_NO_PIPELINING), .fn = "tk_pipeline_run_call"};
    for (int o = 0; o < n; o++) {
        const tk__spec *s = tk__call_spec(c, o);
        int64_t area = s->block_rows * s->block_cols;  /* checked when it was added */
        f.buffers[o] = tk__buffers(p, &f, o);
        f.bytes[o] = area * tk__esize(s->dtype);  /* at most 4x the f32 block */
        f.elems = area > f.elems ? area : f.elems;
        int64_t padded, pr, pc;
        if (o >= c->n_in && !(tk__mul(s->grid_rows, s->block_rows, &pr) &&
                              tk__mul(s->grid_cols, s->block_cols, &pc) &&
                              tk__mul(pr, pc, &padded) &&
                              tk__add(p->padded, padded, &p->padded)))
            rc = tk__fail(TK_EOVERFLOW, "tk_pipeline_run_call: the padded elements of "
                          "output %d overflow int64", o - c->n_in);
    }
    size_t bytes;
    if (!rc && !(rc = tk__bytes("tk_pipeline_run_call", f.steps, n, sizeof *f.use, &bytes)) &&
        !(f.use = malloc(bytes)))
        rc = tk__fail(TK_ENOMEM, "tk_pipeline_run_call: out of memory for a %lld-step "
                      "schedule", (long long)f.steps);
    if (rc)
        return rc;
    /* Number each operand's blocks: a new one whenever the index changes. */
    for (int64_t k = 0; k < f.steps; k++)
        for (int o = 0; o < n; o++) {
            const int64_t *b = &plan->idx[(k * n + o) * 2];
            bool same = k > 0 && b[0] == b[-2 * n] && b[1] == b[-2 * n + 1];
            f.use[k * n + o] = k == 0 ? 0 : f.use[(k - 1) * n + o] + !same;
        }
    if ((rc = tk__fits_call(p, &f))) {
        free(f.use);
        return rc;
    }
    rc = tk__simulate(p, &f);
    /* Checked free of hazards, the schedule computes what the host run
     * does; unchecked, it runs slot by slot. */
    if (!rc)
        rc = p->checked ? tk__call_as(tk__call_execute(c, plan, inputs, outputs,
                                                       tk__call_fill(c)),
                                      "tk_pipeline_run_call")
                        : tk__execute_call(p, c, plan, inputs, outputs, &f,
                                           "the outputs are unchanged");
    free(f.use);
    return rc;
}

int tk_pipeline_run(tk_pipeline *p, const tk_matrix *const *inputs, tk_matrix *output)
{
    int rc = tk__not_running("tk_pipeline_run", p);
    if (rc || !p)
        return rc ? rc : tk__fail(TK_EINVAL, "tk_pipeline_run: pipeline is NULL");
    p->running = true;
    tk__kernel_hold(p->k, 1);
    rc = tk__pipeline_run(p, inputs, output);
    tk__kernel_hold(p->k, -1);
    p->running = false;
    return rc;
}

int tk_pipeline_run_call(tk_pipeline *p, int n_inputs, const tk_matrix *const *inputs,
                         int n_outputs, tk_matrix *const *outputs)
{
    int rc = tk__not_running("tk_pipeline_run_call", p);
    if (rc || !p)
        return rc ? rc : tk__fail(TK_EINVAL, "tk_pipeline_run_call: pipeline is NULL");
    p->running = true;
    tk__kernel_hold(p->call ? p->call->kernel : NULL, 1);   /* a call of a kernel */
    rc = tk__pipeline_run_call(p, n_inputs, inputs, n_outputs, outputs);
    tk__kernel_hold(p->call ? p->call->kernel : NULL, -1);
    p->running = false;
    return rc;
}

/* ---- results ------------------------------------------------------------ */

int tk_pipeline_stat(const tk_pipeline *p, int stat, double *value)
{
    if (!p || !value)
        return tk__fail(TK_EINVAL, "tk_pipeline_stat: %s is NULL", !p ? "pipeline" : "value");
    if (stat < TK_STAT_STEPS || stat > TK_STAT_PADDED_ELEMENTS)
        return tk__fail(TK_EINVAL, "tk_pipeline_stat: unknown statistic %d", stat);
    if (!p->ran)
        return tk__fail(TK_ESTATE, "tk_pipeline_stat: no simulated run yet (a target run "
                        "models nothing)");
    bool modeled_stat = stat >= TK_STAT_MODELED_NS && stat <= TK_STAT_OVERLAP;
    if (modeled_stat && !p->modeled)
        return tk__fail(TK_ESTATE, "tk_pipeline_stat: nothing was modeled: %s", p->unmodeled);
    if (stat == TK_STAT_HAZARDS && !p->checked)
        return tk__fail(TK_ESTATE, "tk_pipeline_stat: race detection was off for the last run");
    switch (stat) {
    case TK_STAT_STEPS: *value = (double)p->steps; break;
    case TK_STAT_COPIES_IN: *value = (double)p->copies_in; break;
    case TK_STAT_COPIES_OUT: *value = (double)p->copies_out; break;
    case TK_STAT_COPIES_SKIPPED: *value = (double)p->skipped; break;
    case TK_STAT_BYTES_IN: *value = (double)p->bytes_in; break;
    case TK_STAT_BYTES_OUT: *value = (double)p->bytes_out; break;
    case TK_STAT_ONCHIP_BYTES: *value = (double)p->onchip; break;
    case TK_STAT_HAZARDS: *value = (double)p->n_races; break;
    case TK_STAT_MODELED_NS: *value = p->modeled_ns; break;
    case TK_STAT_MODELED_COMPUTE_NS: *value = p->compute_ns; break;
    case TK_STAT_MODELED_STALL_NS: *value = p->stall_ns; break;
    case TK_STAT_OVERLAP: *value = p->overlap; break;
    default: *value = (double)p->padded; break;
    }
    return TK_OK;
}

int tk_pipeline_stall(const tk_pipeline *p, int64_t step, double *ns)
{
    if (!p || !ns)
        return tk__fail(TK_EINVAL, "tk_pipeline_stall: %s is NULL", !p ? "pipeline" : "ns");
    if (!p->ran || !p->modeled)
        return tk__fail(TK_ESTATE, "tk_pipeline_stall: nothing was modeled%s%s",
                        p->ran ? ": " : " yet", p->ran ? p->unmodeled : "");
    if (step < 0 || step >= p->steps)
        return tk__fail(TK_ERANGE, "tk_pipeline_stall: step %lld is outside [0, %lld)",
                        (long long)step, (long long)p->steps);
    *ns = p->stall[step];
    return TK_OK;
}

int tk_pipeline_race(const tk_pipeline *p, int64_t index, int64_t *step, int64_t *slot,
                     int *operand, int *kind)
{
    if (!p)
        return tk__fail(TK_EINVAL, "tk_pipeline_race: pipeline is NULL");
    if (!p->ran || !p->checked)
        return tk__fail(TK_ESTATE, "tk_pipeline_race: no run with race detection yet");
    if (index < 0 || index >= p->n_races)
        return tk__fail(TK_ERANGE, "tk_pipeline_race: index %lld is outside [0, %lld)",
                        (long long)index, (long long)p->n_races);
    const tk__race *r = &p->races[index];
    if (step)
        *step = r->step;
    if (slot)
        *slot = r->slot;
    if (operand)
        *operand = r->operand;
    if (kind)
        *kind = r->kind;
    return TK_OK;
}

const char *tk_hazard_name(int kind)
{
    static const char *const names[] = {"unwaited read", "overwrite of a slot in use",
                                        "unwaited write", "early copy-out", "never waited"};
    return kind >= TK_HAZARD_UNWAITED_READ && kind <= TK_HAZARD_NEVER_WAITED
               ? names[kind - 1] : NULL;
}

/* ---- Chrome trace ----------------------------------------------------------
 * chrome://tracing and Perfetto read it: the core (bodies, stalls) as one
 * thread, each copy engine as another; times in microseconds, modeled. */

static void tk__trace_event(FILE *f, bool *first, const char *name, int64_t tid, double ts,
                            double dur, int64_t step)
{
    fprintf(f, "%s\n{\"name\": \"%s\", \"cat\": \"modeled\", \"ph\": \"X\", \"pid\": 0, "
            "\"tid\": %lld, \"ts\": %.6f, \"dur\": %.6f, \"args\": {\"step\": %lld}}",
            *first ? "" : ",", name, (long long)tid, ts / 1e3, dur / 1e3, (long long)step);
    *first = false;
}

int tk_pipeline_write_trace(const tk_pipeline *p, const char *path)
{
    if (!p || !path)
        return tk__fail(TK_EINVAL, "tk_pipeline_write_trace: %s is NULL",
                        !p ? "pipeline" : "path");
    if (!p->ran || !p->modeled)
        return tk__fail(TK_ESTATE, "tk_pipeline_write_trace: nothing was modeled%s%s",
                        p->ran ? ": " : " yet", p->ran ? p->unmodeled : "");
    tk__out o;
    int rc = tk__out_open(&o, "tk_pipeline_write_trace", path);
    if (rc)
        return rc;
    FILE *f = o.f;
    int64_t engines = 1;
    for (int64_t i = 0; i < p->n_ops; i++)
        if (p->ops[i].kind == TK__IN_START || p->ops[i].kind == TK__OUT_START)
            engines = p->copies[i].engine + 1 > engines ? p->copies[i].engine + 1 : engines;
    fprintf(f, "{\"displayTimeUnit\": \"ns\", \"otherData\": {\"timing\": \"modeled, "
            "not measured\", \"device\": ");
    tk__json_string(f, tk_device_kind(p->d));
    fprintf(f, ", \"steps\": %lld, \"modeled_ns\": %.3f},\n\"traceEvents\": [",
            (long long)p->steps, p->modeled_ns);
    fprintf(f, "\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": 0, "
            "\"args\": {\"name\": \"core\"}}");
    bool first = false;
    for (int64_t e = 0; e < engines; e++)
        fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %lld, "
                "\"args\": {\"name\": \"copy engine %lld\"}}", (long long)(e + 1), (long long)e);
    for (int64_t i = 0; i < p->n_ops; i++) {
        const tk__op *o = &p->ops[i];
        const tk__copy *c = &p->copies[i];
        char name[64];
        if (o->kind == TK__BODY) {
            tk__trace_event(f, &first, "body", 0, p->body_start[o->block], p->body_ns,
                            o->block);
        } else if (c->engine < 0) {
            if (c->end > c->start)
                tk__trace_event(f, &first, "stall", 0, c->start, c->end - c->start, o->step);
        } else {
            if (o->kind == TK__IN_START)
                snprintf(name, sizeof name, "copy in: input %d, block %lld, slot %lld",
                         o->operand, (long long)o->block, (long long)o->slot);
            else
                snprintf(name, sizeof name, "copy out: output %d, block %lld, slot %lld",
                         TK_OPERAND_OUTPUT - o->operand, (long long)o->block,
                         (long long)o->slot);
            tk__trace_event(f, &first, name, c->engine + 1, c->start, c->end - c->start,
                            o->step);
        }
    }
    fprintf(f, "\n]}\n");
    return tk__out_commit(&o, "tk_pipeline_write_trace", path);
}
