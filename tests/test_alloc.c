/* test_alloc.c - every allocation the library makes, failed one at a time.
 *
 * This program replaces malloc and its kin (glibc lets a program do that)
 * with wrappers that can fail the k-th allocation of one call, alone or
 * with every one after it.  Each scenario runs its call for k = 0, 1, 2,
 * ... until a run meets no failure, both ways.  After each injected
 * failure the call must have returned TK_ENOMEM with a message, set *out
 * to NULL, left the caller's buffers, files and earlier results as they
 * were, and, once its handles are destroyed, hold no allocation the
 * library made.  A call that recovers from a failure (a thread it could
 * not start, say) must give the bits of a run without one.
 *
 * Failures go to allocations that the library makes itself, on any thread,
 * and to those the C library makes for it on the calling thread (a FILE,
 * a thread's start); Criterion's own threads are left alone.  The wrappers
 * need glibc and no sanitizer of allocations, which brings its own
 * allocator: elsewhere every test here skips.  Valgrind replaces malloc
 * too unless given --soname-synonyms=somalloc=nouserintercepts (as `make
 * valgrind` does); without it every test here fails, saying so. */
#define _GNU_SOURCE   /* dl_iterate_phdr */
#include "tk_test.h"
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>

#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#include <link.h>
#include <pthread.h>
#define TKA_ON 1

void *__libc_malloc(size_t);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void *__libc_memalign(size_t, size_t);
void __libc_free(void *);

static uintptr_t tka_lo, tka_hi;     /* the library's code */
static atomic_bool tka_armed;
static atomic_long tka_left;         /* allocations before the (first) failing one */
static bool tka_persist;             /* the ones after it fail too */
static atomic_bool tka_failed;       /* the armed call met its failure */
static _Thread_local bool tka_caller; /* this thread made the armed call */

/* The library's own allocations, live, while tracking is on. */
enum { TKA_LIVE = 4096 };
static void *tka_live[TKA_LIVE];
static atomic_bool tka_tracking, tka_full;
static pthread_mutex_t tka_lock = PTHREAD_MUTEX_INITIALIZER;

static bool tka_from_library(void *ret)
{
    return (uintptr_t)ret >= tka_lo && (uintptr_t)ret < tka_hi;
}

/* Whether this allocation is to fail. */
static bool tka_fail(void *ret)
{
    if (!atomic_load(&tka_armed) || !(tka_caller || tka_from_library(ret)))
        return false;
    long left = atomic_fetch_sub(&tka_left, 1);
    if (left != 0 && !(tka_persist && left < 0))
        return false;
    atomic_store(&tka_failed, true);
    return true;
}

static void tka_note(void *ret, void *p)
{
    if (!p || !atomic_load(&tka_tracking) || !tka_from_library(ret))
        return;
    pthread_mutex_lock(&tka_lock);
    int i = 0;
    while (i < TKA_LIVE && tka_live[i])
        i++;
    if (i < TKA_LIVE)
        tka_live[i] = p;
    else
        atomic_store(&tka_full, true);
    pthread_mutex_unlock(&tka_lock);
}

static void tka_forget(void *p)
{
    if (!p || !atomic_load(&tka_tracking))
        return;
    pthread_mutex_lock(&tka_lock);
    for (int i = 0; i < TKA_LIVE; i++)
        if (tka_live[i] == p) {
            tka_live[i] = NULL;
            break;
        }
    pthread_mutex_unlock(&tka_lock);
}

#define TKA_WRAP(call)                                                        \
    void *ret_ = __builtin_return_address(0);                                 \
    if (tka_fail(ret_)) {                                                     \
        errno = ENOMEM;                                                       \
        return NULL;                                                          \
    }                                                                         \
    void *p_ = (call);                                                        \
    tka_note(ret_, p_);                                                       \
    return p_

void *malloc(size_t n) { TKA_WRAP(__libc_malloc(n)); }
void *calloc(size_t m, size_t n) { TKA_WRAP(__libc_calloc(m, n)); }
void *aligned_alloc(size_t a, size_t n) { TKA_WRAP(__libc_memalign(a, n)); }
void *memalign(size_t a, size_t n) { TKA_WRAP(__libc_memalign(a, n)); }

void *realloc(void *old, size_t n)
{
    void *ret = __builtin_return_address(0);
    if (tka_fail(ret)) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = __libc_realloc(old, n);
    if (p || !n)
        tka_forget(old);
    tka_note(ret, p);
    return p;
}

int posix_memalign(void **out, size_t a, size_t n)
{
    void *ret = __builtin_return_address(0);
    if (tka_fail(ret))
        return ENOMEM;
    void *p = __libc_memalign(a, n);
    if (!p)
        return ENOMEM;
    tka_note(ret, p);
    *out = p;
    return 0;
}

void free(void *p)
{
    tka_forget(p);
    __libc_free(p);
}

static int tka_find(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size, (void)arg;
    if (!strstr(info->dlpi_name, "libtilekern"))
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            tka_lo = info->dlpi_addr + ph->p_vaddr;
            tka_hi = tka_lo + ph->p_memsz;
        }
    }
    return 1;
}

static void tka_arm(long k, bool persist)
{
    atomic_store(&tka_failed, false);
    tka_caller = true;
    tka_persist = persist;
    atomic_store(&tka_left, k);
    atomic_store(&tka_armed, true);
}

/* Whether the armed call met its failure. */
static bool tka_disarm(void)
{
    atomic_store(&tka_armed, false);
    tka_caller = false;
    return atomic_load(&tka_failed);
}

static void tka_init(void)
{
    dl_iterate_phdr(tka_find, NULL);
    cr_assert(tka_hi > tka_lo, "libtilekern's code not found among the loaded objects");
    /* The wrappers must be the program's malloc (valgrind, say, replaces
     * it unless told not to); else every sweep would pass, failing nothing. */
    static void *volatile probe;
    tka_arm(0, false);
    probe = malloc(1);
    bool failed = tka_disarm() && !probe;
    free(probe);
    cr_assert(failed, "the allocation wrappers are not in effect (under valgrind, pass "
              "--soname-synonyms=somalloc=nouserintercepts)");
}

static void tka_track(void)
{
    memset(tka_live, 0, sizeof tka_live);
    atomic_store(&tka_full, false);
    atomic_store(&tka_tracking, true);
}

static int tka_untrack(void)
{
    atomic_store(&tka_tracking, false);
    cr_assert(!atomic_load(&tka_full), "more live allocations than the table holds");
    int live = 0;
    for (int i = 0; i < TKA_LIVE; i++)
        live += tka_live[i] != NULL;
    return live;
}
#else
#define TKA_ON 0
#endif

/* ---- the sweep ----------------------------------------------------------- */

/* One scenario: setup and teardown run without failures; op runs with the
 * k-th allocation failing; check looks at the state after op, whose status
 * was rc. */
typedef struct tka_scenario {
    const char *name;
    void (*setup)(void *ctx);
    int (*op)(void *ctx);
    void (*check)(void *ctx, int rc);
    void (*teardown)(void *ctx);
    int ok;   /* op's status without a failure (a verdict, say) */
} tka_scenario;

/* A failed op's status and message. */
static void tka_expect_enomem(const char *name, const char *how, long k, int rc)
{
    cr_assert_eq(rc, TK_ENOMEM, "%s, %s %ld failing: %s (%s), expected TK_ENOMEM", name, how,
                 k, tk_status_name(rc), tk_last_error_message());
    cr_assert(strstr(tk_last_error_message(), "memory") != NULL,
              "%s, %s %ld failing: the message \"%s\" does not say memory", name, how, k,
              tk_last_error_message());
}

/* The scenario with its k-th allocation failing, for k = 0, 1, ... until
 * a run meets no failure: once with that allocation alone failing, once
 * with every one from it on (where the call's recovery allocates too). */
static void tka_sweep(const tka_scenario *s, void *ctx)
{
#if TKA_ON
    tka_init();
    for (int persist = 0; persist < 2; persist++) {
        const char *how = persist ? "from allocation" : "allocation";
        for (long k = 0;; k++) {
            tka_track();
            if (s->setup)
                s->setup(ctx);
            tka_arm(k, persist);
            int rc = s->op(ctx);
            bool failed = tka_disarm();
            if (failed && rc != s->ok)
                tka_expect_enomem(s->name, how, k, rc);
            if (!failed)
                cr_assert_eq(rc, s->ok, "%s without a failure: %s (%s)", s->name,
                             tk_status_name(rc), tk_last_error_message());
            s->check(ctx, rc);
            if (s->teardown)
                s->teardown(ctx);
            int live = tka_untrack();
            cr_assert_eq(live, 0, "%s, %s %ld failing: %d of the library's allocations "
                         "outlive its handles", s->name, how, k, live);
            if (!failed) {
                if (persist)
                    cr_log_info("%s: %ld allocations failed in turn", s->name, k);
                break;
            }
            cr_assert_lt(k, 100000, "%s: no end to its allocations", s->name);
        }
    }
#else
    (void)s, (void)ctx, (void)tka_expect_enomem;
    cr_skip_test("allocation failures are injected only under glibc without sanitizers");
#endif
}

/* ---- data and snapshots ---------------------------------------------------- */

static void tka_expect_bytes(const char *name, const tk_matrix *m, const void *want)
{
    cr_assert(!memcmp(tk_matrix_data(m), want, tkt_bytes(m)),
              "%s: the output is not what it should be", name);
}

static char *tka_slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s cannot be read", path);
    char *b = malloc(1 << 22);
    cr_assert_not_null(b);
    *n = fread(b, 1, 1 << 22, f);
    fclose(f);
    return b;
}

/* A directory of its own for one scenario's files. */
static void tka_dir(char *dir)
{
    strcpy(dir, "/tmp/tk_alloc_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

/* The directory holds only `file`, whose bytes are want[0 .. n). */
static void tka_expect_file(const char *name, const char *dir, const char *file,
                            const char *want, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    size_t got_n;
    char *got = tka_slurp(path, &got_n);
    cr_assert(got_n == n && !memcmp(got, want, n), "%s: %s changed", name, path);
    free(got);
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    for (struct dirent *e; (e = readdir(d));)
        cr_assert(!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
                      !strcmp(e->d_name, file),
                  "%s: %s left behind in %s", name, e->d_name, dir);
    closedir(d);
}

static void tka_rmdir(const char *dir, const char *file)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    remove(path);
    cr_assert_eq(rmdir(dir), 0, "%s is not empty", dir);
}

/* ---- creating handles ---------------------------------------------------- */

static tk_kernel *g_axpy;
static tk_tiling *g_tiling;
static tk_device *g_host;
static tk_call *g_call;
static char g_dir[64];
static const int64_t tka_grid[2] = {5, 3};
static const int64_t tka_map[6] = {1, 0, 0, 0, 1, 0};

static int tka_body(void *user, int64_t rows, int64_t cols, int64_t ld, const float *const *in,
                    float *out)
{
    (void)user;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            out[r * ld + c] = 3.0f * in[0][r * ld + c] + in[1][r * ld + c];
    return 0;
}

static int tka_call_body(void *user, tk_block *const *b, int n)
{
    (void)user;
    for (int64_t r = 0; r < b[0]->rows; r++)
        for (int64_t c = 0; c < b[0]->cols; c++)
            b[n - 1]->data[r * b[n - 1]->ld + c] = 2.0f * b[0]->data[r * b[0]->ld + c];
    return 0;
}

static void tka_globals(void)
{
    cr_assert_eq(tk_kernel_axpy(&g_axpy, 3.0f), TK_OK);
    cr_assert_eq(tk_tiling_create(&g_tiling, 33, 300, 8, 128), TK_OK);
    cr_assert_eq(tk_device_host(&g_host), TK_OK);
    cr_assert_eq(tk_call_create(&g_call, 2, tka_grid, tka_call_body, NULL), TK_OK);
    cr_assert_eq(tk_call_add_input(g_call, TK_DTYPE_F32, 40, 384, 8, 128, tka_map), 0);
    cr_assert_eq(tk_call_add_output(g_call, TK_DTYPE_F32, 40, 384, 8, 128, tka_map), 0);
}

/* Each maker creates one handle into *out, set to a junk address first so
 * that a failure must clear it. */
static char tka_junk;
#define TKA_MAKER(name, type, call)                                           \
    static int name(void **out)                                               \
    {                                                                         \
        type *h = (type *)(void *)&tka_junk;                                  \
        int rc = (call);                                                      \
        *out = h;                                                             \
        return rc;                                                            \
    }
TKA_MAKER(mk_matrix, tk_matrix, tk_matrix_create(&h, TK_DTYPE_BF16, 33, 300))
TKA_MAKER(mk_tiling, tk_tiling, tk_tiling_create(&h, 33, 300, 8, 128))
TKA_MAKER(mk_axpy, tk_kernel, tk_kernel_axpy(&h, 2.0f))
TKA_MAKER(mk_custom, tk_kernel, tk_kernel_custom(&h, 2, tka_body, NULL))
TKA_MAKER(mk_matmul, tk_kernel, tk_kernel_matmul(&h))
TKA_MAKER(mk_row_sum, tk_kernel, tk_kernel_row_sum(&h))
TKA_MAKER(mk_host, tk_device, tk_device_host(&h))
TKA_MAKER(mk_simulated, tk_device, tk_device_simulated(&h, "TPU v5 lite"))
TKA_MAKER(mk_external, tk_device, tk_device_external(&h, "tpu", "TPU v4"))
TKA_MAKER(mk_compare, tk_compare, tk_compare_create(&h, TK_DTYPE_F16))
TKA_MAKER(mk_audit, tk_audit, tk_audit_create(&h, g_axpy))
TKA_MAKER(mk_bench, tk_bench, tk_bench_create(&h, g_host))
TKA_MAKER(mk_pipeline, tk_pipeline, tk_pipeline_create(&h, g_axpy, g_tiling, g_host))
TKA_MAKER(mk_call, tk_call, tk_call_create(&h, 2, tka_grid, tka_call_body, NULL))
TKA_MAKER(mk_call_kernel, tk_call, tk_call_create_kernel(&h, g_axpy, g_tiling, TK_DTYPE_F32))
TKA_MAKER(mk_load, tk_matrix, tk_matrix_load_npy(&h, g_dir))

TKA_MAKER(mk_pipeline_call, tk_pipeline, tk_pipeline_create_call(&h, g_call, g_host))

static void drop_matrix(void *h) { tk_matrix_destroy(h); }
static void drop_tiling(void *h) { tk_tiling_destroy(h); }
static void drop_kernel(void *h) { tk_kernel_destroy(h); }
static void drop_device(void *h) { tk_device_destroy(h); }
static void drop_compare(void *h) { tk_compare_destroy(h); }
static void drop_audit(void *h) { tk_audit_destroy(h); }
static void drop_bench(void *h) { tk_bench_destroy(h); }
static void drop_pipeline(void *h) { tk_pipeline_destroy(h); }
static void drop_call(void *h) { tk_call_destroy(h); }

static const struct tka_maker {
    const char *name;
    int (*make)(void **out);
    void (*drop)(void *h);
} tka_makers[] = {
    {"tk_matrix_create", mk_matrix, drop_matrix},
    {"tk_tiling_create", mk_tiling, drop_tiling},
    {"tk_kernel_axpy", mk_axpy, drop_kernel},
    {"tk_kernel_custom", mk_custom, drop_kernel},
    {"tk_kernel_matmul", mk_matmul, drop_kernel},
    {"tk_kernel_row_sum", mk_row_sum, drop_kernel},
    {"tk_device_host", mk_host, drop_device},
    {"tk_device_simulated", mk_simulated, drop_device},
    {"tk_device_external", mk_external, drop_device},
    {"tk_compare_create", mk_compare, drop_compare},
    {"tk_audit_create", mk_audit, drop_audit},
    {"tk_bench_create", mk_bench, drop_bench},
    {"tk_pipeline_create", mk_pipeline, drop_pipeline},
    {"tk_call_create", mk_call, drop_call},
    {"tk_call_create_kernel", mk_call_kernel, drop_call},
    {"tk_pipeline_create_call", mk_pipeline_call, drop_pipeline},
    {"tk_matrix_load_npy", mk_load, drop_matrix},
};

struct make_ctx {
    const struct tka_maker *m;
    void *h;
};

static int make_op(void *ctx)
{
    struct make_ctx *c = ctx;
    return c->m->make(&c->h);
}

static void make_check(void *ctx, int rc)
{
    struct make_ctx *c = ctx;
    if (rc != TK_OK)
        cr_assert_null(c->h, "%s failed and left *out = %p", c->m->name, c->h);
    else
        cr_assert(c->h && c->h != &tka_junk, "%s succeeded without a handle", c->m->name);
}

static void make_teardown(void *ctx)
{
    struct make_ctx *c = ctx;
    if (c->h)
        c->m->drop(c->h);
    c->h = NULL;
}

Test(alloc, every_create_fails_cleanly)
{
    tka_globals();
    tka_dir(g_dir);
    /* tk_matrix_load_npy reads this file; g_dir names it from here on. */
    tk_matrix *m = tkt_matrix(TK_DTYPE_BF16, 9, 70, 3);
    strcat(g_dir, "/m.npy");
    cr_assert_eq(tk_matrix_save_npy(m, g_dir), TK_OK);
    tk_matrix_destroy(m);
    for (size_t i = 0; i < sizeof tka_makers / sizeof *tka_makers; i++) {
        struct make_ctx c = {.m = &tka_makers[i]};
        tka_scenario s = {tka_makers[i].name, NULL, make_op, make_check, make_teardown, TK_OK};
        tka_sweep(&s, &c);
    }
    remove(g_dir);
    *strrchr(g_dir, '/') = '\0';
    cr_assert_eq(rmdir(g_dir), 0);
}

/* ---- runs: outputs untouched, or the bits of a run without a failure --------- */

enum { RUN_KERNEL, RUN_PIPELINE, RUN_CALL, RUN_PIPELINE_CALL };

struct run_ctx {
    const char *name;
    int what, dtype, tail;
    int64_t rows, cols, threads;
    bool custom;
    tk_kernel *k;
    tk_tiling *t;
    tk_device *d;
    tk_pipeline *p;
    tk_call *c;
    tk_matrix *in[2], *out;
    void *before, *want;
};

static void run_setup(void *ctx)
{
    struct run_ctx *r = ctx;
    if (r->custom)
        cr_assert_eq(tk_kernel_custom(&r->k, 2, tka_body, NULL), TK_OK);
    else
        cr_assert_eq(tk_kernel_axpy(&r->k, 3.0f), TK_OK);
    cr_assert_eq(tk_kernel_set(r->k, TK_KERNEL_THREADS, r->threads), TK_OK);
    cr_assert_eq(tk_tiling_create(&r->t, r->rows, r->cols, 8, 128), TK_OK);
    cr_assert_eq(tk_tiling_set(r->t, TK_TILING_TAIL, r->tail), TK_OK);
    cr_assert_eq(tk_device_simulated(&r->d, "TPU v5 lite"), TK_OK);
    if (r->what == RUN_PIPELINE)
        cr_assert_eq(tk_pipeline_create(&r->p, r->k, r->t, r->d), TK_OK);
    if (r->what == RUN_CALL || r->what == RUN_PIPELINE_CALL)
        cr_assert_eq(tk_call_create_kernel(&r->c, r->k, r->t, r->dtype), TK_OK);
    if (r->what == RUN_PIPELINE_CALL)
        cr_assert_eq(tk_pipeline_create_call(&r->p, r->c, r->d), TK_OK);
    r->in[0] = tkt_matrix(r->dtype, r->rows, r->cols, 1);
    r->in[1] = tkt_matrix(r->dtype, r->rows, r->cols, 2);
    r->out = tkt_matrix(r->dtype, r->rows, r->cols, 3);
    r->before = tkt_snapshot(r->out);
}

static int run_op(void *ctx)
{
    struct run_ctx *r = ctx;
    const tk_matrix *const *in = (const tk_matrix *const *)r->in;
    switch (r->what) {
    case RUN_KERNEL: return tk_kernel_run(r->k, r->t, in, r->out);
    case RUN_PIPELINE: return tk_pipeline_run(r->p, in, r->out);
    case RUN_CALL: return tk_call_run(r->c, 2, in, 1, &r->out);
    default: return tk_pipeline_run_call(r->p, 2, in, 1, &r->out);
    }
}

static void run_check(void *ctx, int rc)
{
    struct run_ctx *r = ctx;
    if (!r->want) {   /* the run without a failure, first */
        r->want = tkt_snapshot(r->out);
        return;
    }
    tka_expect_bytes(r->name, r->out, rc ? r->before : r->want);
}

static void run_teardown(void *ctx)
{
    struct run_ctx *r = ctx;
    tk_pipeline_destroy(r->p);
    tk_call_destroy(r->c);
    tk_device_destroy(r->d);
    tk_tiling_destroy(r->t);
    tk_kernel_destroy(r->k);
    for (int i = 0; i < 2; i++)
        tk_matrix_destroy(r->in[i]);
    tk_matrix_destroy(r->out);
    free(r->before);
    r->p = NULL, r->c = NULL;
}

/* The run without a failure, then the sweep. */
static void run_sweep(struct run_ctx *r)
{
    run_setup(r);
    cr_assert_eq(run_op(r), TK_OK, "%s: %s", r->name, tk_last_error_message());
    run_check(r, TK_OK);
    run_teardown(r);
    tka_scenario s = {r->name, run_setup, run_op, run_check, run_teardown, TK_OK};
    tka_sweep(&s, r);
    free(r->want);
}

Test(alloc, runs_leave_outputs_untouched)
{
    static const struct {
        const char *name;
        int what, dtype, tail;
        int64_t rows, cols, threads;
        bool custom;
    } runs[] = {
        {"tk_kernel_run, bf16, mask", RUN_KERNEL, TK_DTYPE_BF16, TK_TAIL_MASK, 33, 300, 1, false},
        {"tk_kernel_run, f32, pad", RUN_KERNEL, TK_DTYPE_F32, TK_TAIL_PAD, 33, 300, 1, false},
        {"tk_kernel_run, f16, shift", RUN_KERNEL, TK_DTYPE_F16, TK_TAIL_SHIFT_INWARDS, 33, 300,
         1, false},
        {"tk_kernel_run, custom, 2 threads", RUN_KERNEL, TK_DTYPE_F32, TK_TAIL_MASK, 260, 520, 2,
         true},
        {"tk_kernel_run, e4m3fn, 2 threads", RUN_KERNEL, TK_DTYPE_F8E4M3FN, TK_TAIL_MASK, 260,
         520, 2, false},
        {"tk_pipeline_run, bf16", RUN_PIPELINE, TK_DTYPE_BF16, TK_TAIL_MASK, 33, 300, 1, false},
        {"tk_pipeline_run, custom", RUN_PIPELINE, TK_DTYPE_F32, TK_TAIL_MASK, 33, 300, 1, true},
        {"tk_call_run, bf16", RUN_CALL, TK_DTYPE_BF16, TK_TAIL_MASK, 33, 300, 1, false},
        {"tk_pipeline_run_call, f32", RUN_PIPELINE_CALL, TK_DTYPE_F32, TK_TAIL_MASK, 33, 300, 1,
         true},
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        struct run_ctx r = {.name = runs[i].name, .what = runs[i].what, .dtype = runs[i].dtype,
                            .tail = runs[i].tail, .rows = runs[i].rows, .cols = runs[i].cols,
                            .threads = runs[i].threads, .custom = runs[i].custom};
        run_sweep(&r);
    }
}

/* ---- audits and comparisons: earlier results kept ------------------------ */

/* Candidates that allocate nothing, so that every failure is the library's:
 * an elementwise axpy that truncates to bfloat16 (its f32 cases come out
 * right), and a bf16 matmul into f32 that leaves out the K tail, or with a
 * non-NULL user accumulates in bfloat16. */
enum { TKA_MAX_ELEMS = 256 * 520 };
static float tka_x[TKA_MAX_ELEMS], tka_y[TKA_MAX_ELEMS];

static int tka_truncating_axpy(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    (void)user;
    int64_t rows = tk_matrix_rows(out), cols = tk_matrix_cols(out);
    int64_t ld = tk_matrix_row_stride(out);
    if (tk_matrix_to_f32(in[0], tka_x, cols) || tk_matrix_to_f32(in[1], tka_y, cols))
        return 1;
    bool bf16 = tk_matrix_dtype(out) == TK_DTYPE_BF16;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = 3.0f * tka_x[r * cols + c] + tka_y[r * cols + c];
            if (bf16)
                ((uint16_t *)tk_matrix_data(out))[r * ld + c] = (uint16_t)(tkt_bits(v) >> 16);
            else
                ((float *)tk_matrix_data(out))[r * ld + c] = v;
        }
    return 0;
}

static int tka_matmul(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    bool bf16_accum = user != NULL;
    int64_t m = tk_matrix_rows(in[0]), k = tk_matrix_cols(in[0]), n = tk_matrix_cols(out);
    int64_t ld = tk_matrix_row_stride(out), end = bf16_accum ? k : k - k % 128;
    if (tk_matrix_to_f32(in[0], tka_x, k) || tk_matrix_to_f32(in[1], tka_y, n))
        return 1;
    for (int64_t r = 0; r < m; r++)
        for (int64_t c = 0; c < n; c++) {
            float s = 0.0f;
            for (int64_t j = 0; j < end; j++) {
                s += tka_x[r * k + j] * tka_y[j * n + c];
                if (bf16_accum)
                    s = tk_bf16_to_f32(tk_bf16_from_f32(s));
            }
            ((float *)tk_matrix_data(out))[r * ld + c] = s;
        }
    return 0;
}

enum { TKA_METRICS = TK_AUDIT_OUT_DTYPE - TK_AUDIT_IMPL_MAX_ABS + 1, TKA_CASES = 2 };

struct audit_ctx {
    const char *name;
    bool reduction, bf16_accum;
    int diagnosis;   /* of the first case */
    int64_t threads;
    tk_kernel *k;
    tk_audit *a;
    float *orig;
    double before[TKA_CASES][TKA_METRICS];
};

/* Every result of every case, as bits; a metric a case lacks reads NaN. */
static void audit_results(const tk_audit *a, double res[TKA_CASES][TKA_METRICS])
{
    cr_assert_eq(tk_audit_case_count(a), TKA_CASES);
    for (int c = 0; c < TKA_CASES; c++)
        for (int m = 0; m < TKA_METRICS; m++)
            if (tk_audit_result(a, c, TK_AUDIT_IMPL_MAX_ABS + m, &res[c][m]))
                res[c][m] = NAN;
}

static void audit_setup(void *ctx)
{
    struct audit_ctx *x = ctx;
    x->orig = malloc(4 * TKA_MAX_ELEMS * sizeof *x->orig);
    cr_assert_not_null(x->orig);
    tkt_fill(x->orig, 4 * TKA_MAX_ELEMS, 11);
    const float *o1[2] = {x->orig, x->orig + TKA_MAX_ELEMS};
    const float *o2[2] = {x->orig + 2 * TKA_MAX_ELEMS, x->orig + 3 * TKA_MAX_ELEMS};
    if (x->reduction) {
        cr_assert_eq(tk_kernel_matmul(&x->k), TK_OK);
        cr_assert_eq(tk_audit_create(&x->a, x->k), TK_OK);
        cr_assert_eq(tk_audit_set_candidate(x->a, tka_matmul, x->bf16_accum ? x : NULL),
                     TK_OK);
        cr_assert_eq(tk_audit_add_reduction_case(x->a, TK_DTYPE_BF16, TK_DTYPE_F32, 40, 300,
                                                 24, o1), TK_OK);
        cr_assert_eq(tk_audit_add_reduction_case(x->a, TK_DTYPE_BF16, TK_DTYPE_F32, 9, 520,
                                                 64, o2), TK_OK);
    } else {
        cr_assert_eq(tk_kernel_axpy(&x->k, 3.0f), TK_OK);
        cr_assert_eq(tk_audit_create(&x->a, x->k), TK_OK);
        cr_assert_eq(tk_audit_set_candidate(x->a, tka_truncating_axpy, NULL), TK_OK);
        cr_assert_eq(tk_audit_add_case(x->a, TK_DTYPE_BF16, 256, 520, o1), TK_OK);
        cr_assert_eq(tk_audit_add_case(x->a, TK_DTYPE_F32, 33, 300, o2), TK_OK);
    }
    cr_assert_eq(tk_kernel_set(x->k, TK_KERNEL_THREADS, x->threads), TK_OK);
    tkt_expect_status(tk_audit_run(x->a), TK_EMISMATCH);
    audit_results(x->a, x->before);
}

static int audit_op(void *ctx)
{
    return tk_audit_run(((struct audit_ctx *)ctx)->a);
}

/* A failed run keeps the results of the one before; a run that recovers
 * gives them again. */
static void audit_check(void *ctx, int rc)
{
    struct audit_ctx *x = ctx;
    (void)rc;
    double now[TKA_CASES][TKA_METRICS];
    audit_results(x->a, now);
    cr_assert(!memcmp(now, x->before, sizeof now), "%s: the results changed", x->name);
    double diagnosis;
    cr_assert_eq(tk_audit_result(x->a, 0, TK_AUDIT_DIAGNOSIS, &diagnosis), TK_OK);
    cr_assert_eq(diagnosis, x->diagnosis, "%s: diagnosed %s", x->name,
                 tk_audit_schedule_name((int)diagnosis));
}

static void audit_teardown(void *ctx)
{
    struct audit_ctx *x = ctx;
    tk_audit_destroy(x->a);
    tk_kernel_destroy(x->k);
    free(x->orig);
}

Test(alloc, audits_keep_their_results)
{
    static const struct audit_ctx audits[] = {
        {.name = "tk_audit_run, elementwise", .threads = 1,
         .diagnosis = TK_SCHEDULE_TRUNCATE},
        {.name = "tk_audit_run, elementwise, 2 threads", .threads = 2,
         .diagnosis = TK_SCHEDULE_TRUNCATE},
        {.name = "tk_audit_run, matmul", .reduction = true, .threads = 1,
         .diagnosis = TK_SCHEDULE_K_TAIL},
        {.name = "tk_audit_run, matmul, 2 threads", .reduction = true, .threads = 2,
         .diagnosis = TK_SCHEDULE_K_TAIL},
        {.name = "tk_audit_run, matmul accumulating in bf16", .reduction = true,
         .bf16_accum = true, .threads = 2, .diagnosis = TK_SCHEDULE_BF16_ACCUM},
    };
    for (size_t i = 0; i < sizeof audits / sizeof *audits; i++) {
        struct audit_ctx x = audits[i];
        tka_scenario s = {x.name, audit_setup, audit_op, audit_check, audit_teardown,
                          TK_EMISMATCH};
        tka_sweep(&s, &x);
    }
}

struct add_ctx {
    tk_kernel *k;
    tk_audit *a;
    bool reduction;
};

static void add_setup(void *ctx)
{
    struct add_ctx *x = ctx;
    cr_assert_eq(x->reduction ? tk_kernel_row_sum(&x->k) : tk_kernel_axpy(&x->k, 2.0f), TK_OK);
    cr_assert_eq(tk_audit_create(&x->a, x->k), TK_OK);
}

static int add_op(void *ctx)
{
    struct add_ctx *x = ctx;
    const float *o[2] = {tka_x, tka_y};
    return x->reduction ? tk_audit_add_reduction_case(x->a, TK_DTYPE_F16, TK_DTYPE_F32, 30, 40,
                                                      1, o)
                        : tk_audit_add_case(x->a, TK_DTYPE_F8E5M2, 30, 40, o);
}

static void add_check(void *ctx, int rc)
{
    struct add_ctx *x = ctx;
    cr_assert_eq(tk_audit_case_count(x->a), rc ? 0 : 1);
}

static void add_teardown(void *ctx)
{
    struct add_ctx *x = ctx;
    tk_audit_destroy(x->a);
    tk_kernel_destroy(x->k);
}

Test(alloc, adding_a_case_adds_it_whole_or_not_at_all)
{
    for (int r = 0; r < 2; r++) {
        struct add_ctx x = {.reduction = r};
        tka_scenario s = {r ? "tk_audit_add_reduction_case" : "tk_audit_add_case", add_setup,
                          add_op, add_check, add_teardown, TK_OK};
        tka_sweep(&s, &x);
    }
}

enum { TKA_COMPARE_METRICS = TK_COMPARE_RTOL - TK_COMPARE_ELEMENTS + 1 };

struct compare_ctx {
    tk_compare *c;
    tk_matrix *a, *b;
    double before[TKA_COMPARE_METRICS];
};

static void compare_results(const tk_compare *c, double *res)
{
    for (int m = 0; m < TKA_COMPARE_METRICS; m++)
        if (tk_compare_result(c, TK_COMPARE_ELEMENTS + m, &res[m]))
            res[m] = NAN;
}

static void compare_setup(void *ctx)
{
    struct compare_ctx *x = ctx;
    cr_assert_eq(tk_compare_create(&x->c, TK_DTYPE_F16), TK_OK);
    x->a = tkt_matrix(TK_DTYPE_F16, 33, 300, 5);
    x->b = tkt_matrix(TK_DTYPE_F16, 33, 300, 6);
    tkt_expect_status(tk_compare_run(x->c, x->a, x->b), TK_EMISMATCH);
    compare_results(x->c, x->before);
}

static int compare_op(void *ctx)
{
    struct compare_ctx *x = ctx;
    return tk_compare_run(x->c, x->a, x->b);
}

static void compare_check(void *ctx, int rc)
{
    struct compare_ctx *x = ctx;
    (void)rc;
    double now[TKA_COMPARE_METRICS];
    compare_results(x->c, now);
    cr_assert(!memcmp(now, x->before, sizeof now), "tk_compare_run: the metrics changed");
}

static void compare_teardown(void *ctx)
{
    struct compare_ctx *x = ctx;
    tk_compare_destroy(x->c);
    tk_matrix_destroy(x->a);
    tk_matrix_destroy(x->b);
}

Test(alloc, comparisons_keep_their_metrics)
{
    struct compare_ctx x = {0};
    tka_scenario s = {"tk_compare_run", compare_setup, compare_op, compare_check,
                      compare_teardown, TK_EMISMATCH};
    tka_sweep(&s, &x);
}

/* ---- files: the old one kept, no temporary left behind --------------------- */

enum { WRITE_NPY, WRITE_REPORT, WRITE_TRACE, WRITE_RECEIPT };

struct write_ctx {
    const char *name;
    int what, format;
    char dir[64], path[96];
    tk_matrix *m;
    tk_kernel *k;
    tk_tiling *t;
    tk_device *d;
    tk_audit *a;
    tk_pipeline *p;
    tk_bench *b;
    float *orig;
};

static const char tka_old[] = "the file before the write\n";

static int tka_probe(void *user)
{
    ++*(int *)user;
    return 0;
}

static void write_setup(void *ctx)
{
    struct write_ctx *w = ctx;
    tka_dir(w->dir);
    snprintf(w->path, sizeof w->path, "%s/out", w->dir);
    FILE *f = fopen(w->path, "wb");
    cr_assert_not_null(f);
    fputs(tka_old, f);
    fclose(f);
    static int calls;
    switch (w->what) {
    case WRITE_NPY:
        w->m = tkt_matrix(TK_DTYPE_F8E4M3FN, 9, 70, 8);
        break;
    case WRITE_REPORT:
        w->orig = malloc(2 * 33 * 300 * sizeof *w->orig);
        cr_assert_not_null(w->orig);
        tkt_fill(w->orig, 2 * 33 * 300, 12);
        cr_assert_eq(tk_kernel_axpy(&w->k, 3.0f), TK_OK);
        cr_assert_eq(tk_audit_create(&w->a, w->k), TK_OK);
        cr_assert_eq(tk_audit_set_candidate(w->a, tka_truncating_axpy, NULL), TK_OK);
        const float *o[2] = {w->orig, w->orig + 33 * 300};
        cr_assert_eq(tk_audit_add_case(w->a, TK_DTYPE_BF16, 33, 300, o), TK_OK);
        tkt_expect_status(tk_audit_run(w->a), TK_EMISMATCH);
        break;
    case WRITE_TRACE:
        cr_assert_eq(tk_kernel_axpy(&w->k, 3.0f), TK_OK);
        cr_assert_eq(tk_tiling_create(&w->t, 33, 300, 8, 128), TK_OK);
        cr_assert_eq(tk_device_simulated(&w->d, "TPU v4"), TK_OK);
        cr_assert_eq(tk_pipeline_create(&w->p, w->k, w->t, w->d), TK_OK);
        w->m = tkt_matrix(TK_DTYPE_F32, 33, 300, 9);
        const tk_matrix *in[2] = {w->m, w->m};
        cr_assert_eq(tk_pipeline_run(w->p, in, w->m), TK_OK);
        break;
    default:
        cr_assert_eq(tk_device_host(&w->d), TK_OK);
        cr_assert_eq(tk_bench_create(&w->b, w->d), TK_OK);
        cr_assert_eq(tk_bench_set_boundary(w->b, "a probe: one increment"), TK_OK);
        cr_assert_eq(tk_bench_set(w->b, TK_BENCH_REPEATS, 5), TK_OK);
        cr_assert_eq(tk_bench_add(w->b, "probe", w->d, NULL, tka_probe, tka_probe, &calls),
                     0);
        cr_assert_eq(tk_bench_run(w->b), TK_OK);
    }
}

static int write_op(void *ctx)
{
    struct write_ctx *w = ctx;
    switch (w->what) {
    case WRITE_NPY: return tk_matrix_save_npy(w->m, w->path);
    case WRITE_REPORT: return tk_audit_write_report(w->a, w->path, w->format);
    case WRITE_TRACE: return tk_pipeline_write_trace(w->p, w->path);
    default: return tk_bench_write_receipt(w->b, w->path);
    }
}

static void write_check(void *ctx, int rc)
{
    struct write_ctx *w = ctx;
    if (rc)
        tka_expect_file(w->name, w->dir, "out", tka_old, sizeof tka_old - 1);
}

static void write_teardown(void *ctx)
{
    struct write_ctx *w = ctx;
    tka_rmdir(w->dir, "out");
    tk_bench_destroy(w->b);
    tk_pipeline_destroy(w->p);
    tk_audit_destroy(w->a);
    tk_device_destroy(w->d);
    tk_tiling_destroy(w->t);
    tk_kernel_destroy(w->k);
    tk_matrix_destroy(w->m);
    free(w->orig);
}

Test(alloc, failed_writes_keep_the_old_file)
{
    static const struct write_ctx writes[] = {
        {.name = "tk_matrix_save_npy", .what = WRITE_NPY},
        {.name = "tk_audit_write_report, text", .what = WRITE_REPORT, .format = TK_REPORT_TEXT},
        {.name = "tk_audit_write_report, JSON", .what = WRITE_REPORT, .format = TK_REPORT_JSON},
        {.name = "tk_audit_write_report, SVG", .what = WRITE_REPORT, .format = TK_REPORT_SVG},
        {.name = "tk_pipeline_write_trace", .what = WRITE_TRACE},
        {.name = "tk_bench_write_receipt", .what = WRITE_RECEIPT},
    };
    for (size_t i = 0; i < sizeof writes / sizeof *writes; i++) {
        struct write_ctx w = writes[i];
        tka_scenario s = {w.name, write_setup, write_op, write_check, write_teardown, TK_OK};
        tka_sweep(&s, &w);
    }
}

/* ---- benchmarks ----------------------------------------------------------- */

struct bench_ctx {
    tk_device *d;
    tk_bench *b;
    int calls;
};

static void bench_setup(void *ctx)
{
    struct bench_ctx *x = ctx;
    cr_assert_eq(tk_device_host(&x->d), TK_OK);
    cr_assert_eq(tk_bench_create(&x->b, x->d), TK_OK);
    cr_assert_eq(tk_bench_set_boundary(x->b, "a probe: one increment"), TK_OK);
    cr_assert_eq(tk_bench_set(x->b, TK_BENCH_REPEATS, 5), TK_OK);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(tk_bench_add(x->b, "probe", x->d, tka_probe, tka_probe, tka_probe,
                                  &x->calls), i);
}

static int bench_op(void *ctx)
{
    return tk_bench_run(((struct bench_ctx *)ctx)->b);
}

static void bench_check(void *ctx, int rc)
{
    struct bench_ctx *x = ctx;
    double median;
    int got = tk_bench_result(x->b, 2, TK_BENCH_MEDIAN_MS, &median);
    cr_assert_eq(got == TK_OK, rc == TK_OK, "tk_bench_run: %s, its results: %s",
                 tk_status_name(rc), tk_status_name(got));
}

static void bench_teardown(void *ctx)
{
    struct bench_ctx *x = ctx;
    tk_bench_destroy(x->b);
    tk_device_destroy(x->d);
}

Test(alloc, benchmarks_fail_whole)
{
    struct bench_ctx x = {0};
    tka_scenario s = {"tk_bench_run", bench_setup, bench_op, bench_check, bench_teardown,
                      TK_OK};
    tka_sweep(&s, &x);
}

/* ---- the other calls that allocate -------------------------------------------- */

/* One rig for the rest: each op reads and writes only its own part of it,
 * and check compares that part with what it was or should be. */
struct misc_ctx {
    int op;
    tk_kernel *k;
    tk_tiling *t;
    tk_device *sim, *host;
    tk_matrix *m, *padded, *dst, *in[2];
    tk_call *kc;
    tk_audit *a;
    tk_pipeline *p;
    tk_bench *b;
    int64_t changed;
    int calls, index;
    double median, before[TKA_CASES][TKA_METRICS];
    float *orig;
    void *dst_before;
};

enum { MISC_PAD, MISC_WRAP, MISC_CHECK_PADDING, MISC_PERMUTATION, MISC_RACE, MISC_BOUNDARY,
       MISC_BENCH_ADD, MISC_BENCH_RESULT, MISC_OPS };

static const struct {
    const char *name;
    int ok;
} misc_ops[MISC_OPS] = {
    {"tk_pad", TK_OK},
    {"tk_matrix_wrap", TK_OK},
    {"tk_call_check_padding", TK_OK},
    {"tk_audit_check_permutation", TK_OK},
    {"tk_pipeline_run with a hazard", TK_ERACE},
    {"tk_bench_set_boundary", TK_OK},
    {"tk_bench_add", 1},        /* the entry's index */
    {"tk_bench_result", TK_OK},
};

static void misc_setup(void *ctx)
{
    struct misc_ctx *x = ctx;
    cr_assert_eq(tk_kernel_axpy(&x->k, 3.0f), TK_OK);
    cr_assert_eq(tk_tiling_create(&x->t, 33, 300, 8, 128), TK_OK);
    cr_assert_eq(tk_device_simulated(&x->sim, "TPU v5 lite"), TK_OK);
    cr_assert_eq(tk_device_host(&x->host), TK_OK);
    x->m = x->in[0] = tkt_matrix(TK_DTYPE_F32, 33, 300, 21);
    x->in[1] = tkt_matrix(TK_DTYPE_F32, 33, 300, 22);
    x->dst = tkt_matrix(TK_DTYPE_F32, 33, 300, 23);
    x->dst_before = tkt_snapshot(x->dst);
    cr_assert_eq(tk_pad(x->t, x->m, &x->padded), TK_OK);
    cr_assert_eq(tk_call_create_kernel(&x->kc, x->k, x->t, TK_DTYPE_F32), TK_OK);
    x->orig = malloc(2 * 33 * 300 * sizeof *x->orig);
    cr_assert_not_null(x->orig);
    tkt_fill(x->orig, 2 * 33 * 300, 24);
    const float *o[2] = {x->orig, x->orig + 33 * 300};
    cr_assert_eq(tk_audit_create(&x->a, x->k), TK_OK);
    cr_assert_eq(tk_audit_set_candidate(x->a, tka_truncating_axpy, NULL), TK_OK);
    cr_assert_eq(tk_audit_add_case(x->a, TK_DTYPE_BF16, 33, 300, o), TK_OK);
    cr_assert_eq(tk_audit_add_case(x->a, TK_DTYPE_F32, 33, 300, o), TK_OK);
    tkt_expect_status(tk_audit_run(x->a), TK_EMISMATCH);
    audit_results(x->a, x->before);
    cr_assert_eq(tk_pipeline_create(&x->p, x->k, x->t, x->sim), TK_OK);
    cr_assert_eq(tk_pipeline_set(x->p, TK_PIPE_FAULT, TK_FAULT_PREFETCH_OVERRUN), TK_OK);
    cr_assert_eq(tk_bench_create(&x->b, x->host), TK_OK);
    cr_assert_eq(tk_bench_set_boundary(x->b, "a probe: one increment"), TK_OK);
    cr_assert_eq(tk_bench_set(x->b, TK_BENCH_REPEATS, 5), TK_OK);
    cr_assert_eq(tk_bench_add(x->b, "probe", x->host, NULL, tka_probe, tka_probe, &x->calls),
                 0);
    cr_assert_eq(tk_bench_run(x->b), TK_OK);
    x->changed = -7;
    x->median = -7.0;
}

static int misc_op(void *ctx)
{
    struct misc_ctx *x = ctx;
    const tk_matrix *const *in = (const tk_matrix *const *)x->in;
    static const int64_t order[33] = {32, 0, 31, 1, 30, 2, 29, 3, 28, 4, 27, 5, 26, 6, 25, 7,
                                      24, 8, 23, 9, 22, 10, 21, 11, 20, 12, 19, 13, 18, 14,
                                      17, 15, 16};
    switch (x->op) {
    case MISC_PAD:
        tk_matrix_destroy(x->padded);
        x->padded = (tk_matrix *)(void *)&tka_junk;
        return tk_pad(x->t, x->m, &x->padded);
    case MISC_WRAP:
        tk_matrix_destroy(x->padded);
        x->padded = (tk_matrix *)(void *)&tka_junk;
        return tk_matrix_wrap(&x->padded, TK_DTYPE_F32, 33, 300, 300, tk_matrix_data(x->dst));
    case MISC_CHECK_PADDING: return tk_call_check_padding(x->kc, 2, in, &x->changed);
    case MISC_PERMUTATION: return tk_audit_check_permutation(x->a, 0, order);
    case MISC_RACE: return tk_pipeline_run(x->p, in, x->dst);
    case MISC_BOUNDARY: return tk_bench_set_boundary(x->b, "another boundary");
    case MISC_BENCH_ADD:
        return tk_bench_add(x->b, "probe 2", x->host, NULL, tka_probe, tka_probe, &x->calls);
    default: return tk_bench_result(x->b, 0, TK_BENCH_MEDIAN_MS, &x->median);
    }
}

static void misc_check(void *ctx, int rc)
{
    struct misc_ctx *x = ctx;
    const char *name = misc_ops[x->op].name;
    double now[TKA_CASES][TKA_METRICS];
    bool failed = rc != misc_ops[x->op].ok;
    switch (x->op) {
    case MISC_PAD:
    case MISC_WRAP:
        cr_assert(failed ? !x->padded : x->padded && x->padded != (void *)&tka_junk,
                  "%s: %s and *out = %p", name, tk_status_name(rc), (void *)x->padded);
        break;
    case MISC_CHECK_PADDING:
        cr_assert(failed ? x->changed == -7 : x->changed == 0, "%s: %s and changed = %lld",
                  name, tk_status_name(rc), (long long)x->changed);
        break;
    case MISC_PERMUTATION:
        audit_results(x->a, now);
        cr_assert(!memcmp(now, x->before, sizeof now), "%s: the results changed", name);
        break;
    case MISC_RACE:
        tka_expect_bytes(name, x->dst, x->dst_before);
        break;
    case MISC_BOUNDARY:   /* the boundary is not read back: the status and no leak */
        break;
    case MISC_BENCH_ADD:
        cr_assert_eq(tk_bench_add(x->b, "probe 3", x->host, NULL, tka_probe, tka_probe,
                                  &x->calls),
                     failed ? 1 : 2, "%s: %s, then the next entry's index", name,
                     tk_status_name(rc));
        break;
    default:
        cr_assert(failed ? x->median == -7.0 : x->median >= 0.0, "%s: %s and the median %g",
                  name, tk_status_name(rc), x->median);
    }
}

static void misc_teardown(void *ctx)
{
    struct misc_ctx *x = ctx;
    tk_bench_destroy(x->b);
    tk_pipeline_destroy(x->p);
    tk_audit_destroy(x->a);
    tk_call_destroy(x->kc);
    if (x->padded != (void *)&tka_junk)
        tk_matrix_destroy(x->padded);
    for (int i = 0; i < 2; i++)
        tk_matrix_destroy(x->in[i]);
    tk_matrix_destroy(x->dst);
    tk_device_destroy(x->sim);
    tk_device_destroy(x->host);
    tk_tiling_destroy(x->t);
    tk_kernel_destroy(x->k);
    free(x->orig);
    free(x->dst_before);
}

Test(alloc, the_other_calls_fail_cleanly)
{
    for (int op = 0; op < MISC_OPS; op++) {
        struct misc_ctx x = {.op = op};
        tka_scenario s = {misc_ops[op].name, misc_setup, misc_op, misc_check, misc_teardown,
                          misc_ops[op].ok};
        tka_sweep(&s, &x);
    }
}

/* A custom blockwise body whose tiles all run in place needs no staging:
 * on an 8 MiB f32 output with 256x512 tiles (whose band, 2 MiB, is over
 * TK__BAND) and no undo, a run allocates nothing.  It allocated room for
 * (inputs + 2) x 1024 f32 it never used, until 0.6. */
Test(alloc, whole_tiles_in_place_allocate_nothing)
{
#if TKA_ON
    enum { R = 1024, C = 2048 };
    tk_kernel *k;
    tk_tiling *t;
    tk_matrix *x, *y, *out;
    cr_assert_eq(tk_kernel_custom(&k, 2, tka_body, NULL), TK_OK);
    cr_assert_eq(tk_kernel_set(k, TK_KERNEL_BODY, TK_BODY_BLOCKWISE), TK_OK);
    cr_assert_eq(tk_kernel_set(k, TK_KERNEL_UNDO, 0), TK_OK);
    cr_assert_eq(tk_tiling_create(&t, R, C, 256, 512), TK_OK);
    cr_assert_eq(tk_matrix_create(&x, TK_DTYPE_F32, R, C), TK_OK);
    cr_assert_eq(tk_matrix_create(&y, TK_DTYPE_F32, R, C), TK_OK);
    cr_assert_eq(tk_matrix_create(&out, TK_DTYPE_F32, R, C), TK_OK);
    const tk_matrix *in[2] = {x, y};
    tka_init();
    tka_arm(0, false);
    int rc = tk_kernel_run(k, t, in, out);
    bool allocated = tka_disarm();
    cr_assert_eq(rc, TK_OK, "%s", tk_last_error_message());
    cr_assert(!allocated, "a run of whole tiles in place allocated memory");
    tk_matrix_destroy(out);
    tk_matrix_destroy(y);
    tk_matrix_destroy(x);
    tk_tiling_destroy(t);
    tk_kernel_destroy(k);
#else
    cr_skip_test("allocations are watched only under glibc without sanitizers");
#endif
}
