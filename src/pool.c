/* pool.c - the small thread pool a kernel or audit handle owns: workers
 * started by the handle's first run of several threads, asleep between
 * runs, ended by the handle's destroy (or, for a kernel, by setting
 * TK_KERNEL_THREADS to 1).
 *
 * A fan-out hands item 0 to the calling thread and item i to worker i.  The
 * pool serves one fan-out at a time.  Another one at the same moment starts
 * threads of its own: a concurrent run of a shared kernel, a thread-safe
 * body that runs its own kernel from inside a band, a contract kernel's
 * audit pass run by two audits.  So does a process forked after the workers
 * started, which has none of them.  Workers block the asynchronous signals
 * (a signal meant for the application reaches one of its own threads) but
 * not the ones a fault raises, so the application's handlers still see
 * those.  Each item runs under the caller's floating-point environment; the
 * workers keep the CPU affinity and priority of the thread that started
 * them. */
#include "internal.h"

#include <fenv.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

struct tk__pool {
    atomic_flag busy;     /* a fan-out holds the workers */
    unsigned fork_gen;    /* tk__fork_gen when the workers started */
    pid_t pid;            /* and the process they started in */
    pthread_mutex_t mu;
    pthread_cond_t wake;  /* a round started, or quit */
    pthread_cond_t done;  /* pending reached 0 */
    int started;          /* workers 1..started run */
    bool quit;
    uint64_t round;       /* counts fan-outs: a worker takes each round once */
    int64_t n, pending;   /* this round's items; workers still on theirs */
    char *items;
    size_t size;
    void *(*fn)(void *);
    fenv_t env;           /* the caller's floating-point environment */
    pthread_t thread[TK_KERNEL_MAX_THREADS];
    struct tk__worker {
        tk__pool *p;
        int index;
        uint64_t seen;    /* the last round before it started */
    } worker[TK_KERNEL_MAX_THREADS];
};

/* Counts forks, in the child: a pool whose workers started in an earlier
 * generation, or in another process, has none in this one.  Each test
 * covers a gap of the other: a grandchild can get the pid of an ancestor
 * that has ended, and a child made without fork() (_Fork, a raw clone)
 * runs no handler, nor does any if registering it failed. */
static atomic_uint tk__fork_gen;
static pthread_once_t tk__fork_once = PTHREAD_ONCE_INIT;

static void tk__forked(void)
{
    atomic_fetch_add(&tk__fork_gen, 1);
}

static void tk__count_forks(void)
{
    pthread_atfork(NULL, NULL, tk__forked);
}

static void *tk__worker_main(void *arg)
{
    struct tk__worker *w = arg;
    tk__pool *p = w->p;
    uint64_t seen = w->seen;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->round == seen)
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->quit)
            break;
        seen = p->round;
        if (w->index >= p->n)
            continue;   /* this round has fewer items than workers */
        void *item = p->items + (size_t)w->index * p->size;
        void *(*fn)(void *) = p->fn;
        fenv_t env = p->env;
        pthread_mutex_unlock(&p->mu);
        fesetenv(&env);
        fn(item);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

tk__pool *tk__pool_new(void)
{
    tk__pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    if (pthread_mutex_init(&p->mu, NULL)) {
        free(p);
        return NULL;
    }
    if (pthread_cond_init(&p->wake, NULL)) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return NULL;
    }
    if (pthread_cond_init(&p->done, NULL)) {
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return NULL;
    }
    atomic_flag_clear(&p->busy);
    pthread_once(&tk__fork_once, tk__count_forks);
    return p;
}

/* Whether p's workers, if any, are threads of this process. */
static bool tk__pool_here(const tk__pool *p)
{
    return p->fork_gen == atomic_load(&tk__fork_gen) && p->pid == getpid();
}

/* The workers end (no fan-out uses them); joining them is not a
 * cancellation point, as a fan-out's waits are not. */
static void tk__pool_end(tk__pool *p)
{
    int cancel;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i <= p->started; i++)
        pthread_join(p->thread[i], NULL);
    p->started = 0;
    p->quit = false;
    pthread_setcancelstate(cancel, NULL);
}

void tk__pool_stop(tk__pool *p)
{
    /* A run that holds the workers (a misuse: the caller set the kernel
     * beside it) keeps them: ending them under it would hang it. */
    if (!p || atomic_flag_test_and_set_explicit(&p->busy, memory_order_acquire))
        return;
    if (p->started && tk__pool_here(p))
        tk__pool_end(p);
    atomic_flag_clear_explicit(&p->busy, memory_order_release);
}

void tk__pool_free(tk__pool *p)
{
    if (!p)
        return;
    /* In a forked child the workers do not exist, and the lock and
     * conditions may be copies taken while one of them held them. */
    if (!p->started || tk__pool_here(p)) {
        if (p->started)
            tk__pool_end(p);
        pthread_cond_destroy(&p->done);
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->mu);
    }
    free(p);
}

/* Block the asynchronous signals in the calling thread, which threads it
 * creates inherit; *old is its mask before.  The ones a fault raises stay
 * open: blocked, they would end the process past the application's
 * handlers. */
static void tk__block_signals(sigset_t *old)
{
    static const int fault[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS};
    sigset_t mask;
    sigfillset(&mask);
    for (size_t i = 0; i < sizeof fault / sizeof fault[0]; i++)
        sigdelset(&mask, fault[i]);
    pthread_sigmask(SIG_SETMASK, &mask, old);
}

/* Start workers up to index n - 1 (p->mu held); as many as could start. */
static void tk__pool_grow(tk__pool *p, int64_t n)
{
    if (!p->started) {
        p->fork_gen = atomic_load(&tk__fork_gen);
        p->pid = getpid();
    }
    sigset_t old;
    tk__block_signals(&old);
    while (p->started + 1 < n) {
        int i = p->started + 1;
        /* Its first round is the one about to start. */
        p->worker[i] = (struct tk__worker){p, i, p->round};
        if (pthread_create(&p->thread[i], NULL, tk__worker_main, &p->worker[i]))
            break;
        p->started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Threads of this fan-out's own, ended before it returns. */
static void tk__fan_out_once(char *items, size_t size, int64_t n, void *(*fn)(void *))
{
    pthread_t thread[TK_KERNEL_MAX_THREADS];
    bool started[TK_KERNEL_MAX_THREADS] = {false};
    sigset_t old;
    tk__block_signals(&old);
    /* A thread that cannot start leaves its item to this one. */
    for (int64_t i = 1; i < n; i++)
        started[i] = pthread_create(&thread[i], NULL, fn, items + i * size) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    for (int64_t i = 0; i < n; i++)
        if (!started[i])
            fn(items + i * size);
    for (int64_t i = 1; i < n; i++)
        if (started[i])
            pthread_join(thread[i], NULL);
}

/* The pool's round, on p->mu's terms. */
static void tk__fan_out_pool(tk__pool *p, char *it, size_t size, int64_t n, void *(*fn)(void *))
{
    pthread_mutex_lock(&p->mu);
    tk__pool_grow(p, n);
    int64_t workers = p->started + 1 < n ? p->started : n - 1;
    p->items = it;
    p->size = size;
    p->fn = fn;
    fegetenv(&p->env);
    p->n = workers + 1;
    p->pending = workers;
    p->round++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    /* Item 0, and those of the workers that could not start. */
    fn(it);
    for (int64_t i = workers + 1; i < n; i++)
        fn(it + i * size);
    pthread_mutex_lock(&p->mu);
    while (p->pending)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void tk__fan_out(tk__pool *p, void *items, size_t size, int64_t n, void *(*fn)(void *))
{
    char *it = items;
    if (n <= 1) {
        fn(it);
        return;
    }
    /* The waits below are cancellation points; a cancelled caller would
     * leave the pool locked and the workers' items unjoined. */
    int cancel;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
    if (!p || atomic_flag_test_and_set_explicit(&p->busy, memory_order_acquire)) {
        tk__fan_out_once(it, size, n, fn);
    } else {
        if (p->started && !tk__pool_here(p))
            tk__fan_out_once(it, size, n, fn);
        else
            tk__fan_out_pool(p, it, size, n, fn);
        atomic_flag_clear_explicit(&p->busy, memory_order_release);
    }
    pthread_setcancelstate(cancel, NULL);
}
