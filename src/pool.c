/* pool.c - the small thread pool a kernel or audit handle owns: workers
 * started by the handle's first run of several threads, asleep between
 * runs, ended by the handle's destroy.
 *
 * A fan-out hands item 0 to the calling thread and item i to worker i.  The
 * pool serves one fan-out at a time; another one at the same moment (a
 * concurrent run of a shared kernel, or a candidate that runs the kernel
 * whose audit pass is in progress) starts threads of its own, as does a
 * process forked from the one that started the workers, which has none of
 * them.  Workers block every signal: they run library code only, and a
 * signal meant for the application reaches one of its own threads.  Each
 * item runs under the caller's floating-point environment, as on a thread
 * the caller had just created. */
#include "internal.h"

#include <fenv.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

struct tk__pool {
    atomic_flag busy;     /* a fan-out holds the workers */
    pid_t pid;            /* the process whose threads they are */
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
};

typedef struct {
    tk__pool *p;
    int index;
} tk__worker;

static void *tk__worker_main(void *arg)
{
    tk__worker w = *(tk__worker *)arg;
    free(arg);
    tk__pool *p = w.p;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->round == seen)
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->quit)
            break;
        seen = p->round;
        if (w.index >= p->n)
            continue;   /* this round has fewer items than workers */
        void *item = p->items + (size_t)w.index * p->size;
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
    p->pid = getpid();
    return p;
}

void tk__pool_free(tk__pool *p)
{
    if (!p)
        return;
    if (p->pid == getpid()) {   /* in a forked child the workers do not exist */
        pthread_mutex_lock(&p->mu);
        p->quit = true;
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
        for (int i = 1; i <= p->started; i++)
            pthread_join(p->thread[i], NULL);
        pthread_cond_destroy(&p->done);
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->mu);
    }
    free(p);
}

/* Block every signal in the calling thread, which threads it creates
 * inherit; *old is its mask before. */
static void tk__block_signals(sigset_t *old)
{
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, old);
}

/* Start workers up to index n - 1 (p->mu held); as many as could start. */
static void tk__pool_grow(tk__pool *p, int64_t n)
{
    sigset_t old;
    tk__block_signals(&old);
    while (p->started + 1 < n) {
        tk__worker *w = malloc(sizeof *w);
        if (!w)
            break;
        *w = (tk__worker){p, p->started + 1};
        /* Its first round is the one about to start: it has seen none. */
        if (pthread_create(&p->thread[w->index], NULL, tk__worker_main, w)) {
            free(w);
            break;
        }
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

void tk__fan_out(tk__pool *p, void *items, size_t size, int64_t n, void *(*fn)(void *))
{
    char *it = items;
    if (n <= 1) {
        fn(it);
        return;
    }
    if (!p || atomic_flag_test_and_set_explicit(&p->busy, memory_order_acquire)) {
        tk__fan_out_once(it, size, n, fn);
        return;
    }
    if (p->pid != getpid()) {
        atomic_flag_clear_explicit(&p->busy, memory_order_release);
        tk__fan_out_once(it, size, n, fn);
        return;
    }
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
    atomic_flag_clear_explicit(&p->busy, memory_order_release);
}
