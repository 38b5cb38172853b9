/* test_bench.c - tk_bench: the benchmark boundary refuses simulated targets
 * and misplaced inputs before any callback, follows compile / warm-up /
 * synchronized samples, and summarizes with numpy's rules (checked against
 * numpy itself in tests/python/test_ctypes.py). */
#include "tk_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Callbacks that log what happened, in order. */
struct probe {
    char name;
    int compiles, runs, syncs;
    int fail_at_run;   /* > 0: the n-th run fails */
    char *log;         /* one char per sampled-or-not run: the name */
    int *logged;
};

static int p_compile(void *u)
{
    ((struct probe *)u)->compiles++;
    return 0;
}
static int p_run(void *u)
{
    struct probe *p = u;
    p->runs++;
    if (p->log)
        p->log[(*p->logged)++] = p->name;
    return p->runs == p->fail_at_run ? 7 : 0;
}
static int p_sync(void *u)
{
    ((struct probe *)u)->syncs++;
    return 0;
}

static tk_bench *host_bench(tk_device **host)
{
    tk_bench *b;
    tkt_expect_status(tk_device_host(host), TK_OK);
    tkt_expect_status(tk_bench_create(&b, *host), TK_OK);
    tkt_expect_status(tk_bench_set_boundary(b, "a probe: nothing but the callbacks"), TK_OK);
    return b;
}

Test(bench, simulated_targets_are_refused_before_any_callback)
{
    tk_device *sim, *host;
    tkt_expect_status(tk_device_simulated(&sim, "TPU v5 lite"), TK_OK);
    tk_bench *b = (tk_bench *)&b;
    tkt_expect_status(tk_bench_create(&b, sim), TK_ENOTARGET);
    cr_assert_null(b);
    cr_assert(strstr(tk_last_error_message(), "TPU benchmark requires real TPU inputs; "
                                              "interpretation timings are not accepted"),
              "%s", tk_last_error_message());
    /* Inputs placed on a simulated device, or on another real device. */
    b = host_bench(&host);
    struct probe p = {'a', 0, 0, 0, 0, NULL, NULL};
    tkt_expect_status(tk_bench_add(b, "sim", sim, p_compile, p_run, p_sync, &p), TK_ENOTARGET);
    tk_device *ext;
    tkt_expect_status(tk_device_external(&ext, "tpu", "TPU v4"), TK_OK);
    tkt_expect_status(tk_bench_add(b, "elsewhere", ext, p_compile, p_run, p_sync, &p),
                      TK_ENOTARGET);
    cr_assert(strstr(tk_last_error_message(), "TPU v4"), "%s", tk_last_error_message());
    cr_assert_eq(p.compiles + p.runs + p.syncs, 0, "a callback ran");
    tkt_expect_status(tk_bench_run(b), TK_ESTATE);   /* nothing was added */
    /* On an external target every entry needs a sync. */
    tk_bench *eb;
    tkt_expect_status(tk_bench_create(&eb, ext), TK_OK);
    tkt_expect_status(tk_bench_add(eb, "no sync", ext, NULL, p_run, NULL, &p), TK_EINVAL);
    cr_assert(strstr(tk_last_error_message(), "sync"), "%s", tk_last_error_message());
    cr_assert_eq(tk_bench_add(eb, "synced", ext, NULL, p_run, p_sync, &p), 0);
    tk_bench_destroy(eb);
    /* JAX's two names of one chip place inputs on the same target; another
     * chip's do not. */
    tk_device *lite, *v5e;
    tkt_expect_status(tk_device_external(&lite, "tpu", "TPU v5 lite"), TK_OK);
    tkt_expect_status(tk_device_external(&v5e, "tpu", "TPU v5e"), TK_OK);
    tkt_expect_status(tk_bench_create(&eb, lite), TK_OK);
    cr_assert_eq(tk_bench_add(eb, "v5e", v5e, NULL, p_run, p_sync, &p), 0, "%s",
                 tk_last_error_message());
    tkt_expect_status(tk_bench_add(eb, "v4", ext, NULL, p_run, p_sync, &p), TK_ENOTARGET);
    tk_bench_destroy(eb);
    tk_device_destroy(v5e);
    tk_device_destroy(lite);
    tk_bench_destroy(b);
    tk_device_destroy(ext);
    tk_device_destroy(host);
    tk_device_destroy(sim);
}

Test(bench, the_protocol)
{
    tk_device *host;
    tk_bench *b = host_bench(&host);
    char log[256];
    int logged = 0;
    struct probe a = {'a', 0, 0, 0, 0, log, &logged}, c = {'c', 0, 0, 0, 0, log, &logged};
    tkt_expect_status(tk_bench_set(b, TK_BENCH_REPEATS, 6), TK_OK);
    tkt_expect_status(tk_bench_set(b, TK_BENCH_WARMUPS, 2), TK_OK);
    cr_assert_eq(tk_bench_add(b, "a", host, p_compile, p_run, p_sync, &a), 0);
    cr_assert_eq(tk_bench_add(b, "c", NULL, NULL, p_run, NULL, &c), 1);
    tkt_expect_status(tk_bench_run(b), TK_OK);
    cr_assert_eq(a.compiles, 1);
    cr_assert_eq(a.runs, 2 + 6);
    cr_assert_eq(a.syncs, 2 + 6, "every warm-up and sample ends with sync");
    cr_assert_eq(c.runs, 2 + 6);
    /* Interleaved: both warm up, then samples alternate. */
    log[logged] = 0;
    cr_assert_str_eq(log, "aaccacacacacacac");
    double ms[8];
    cr_assert_eq(tk_bench_samples(b, 0, ms, 8), 6);
    double med, p90, lo, hi, n, speed, mean, sd;
    tkt_expect_status(tk_bench_result(b, 0, TK_BENCH_MEDIAN_MS, &med), TK_OK);
    tkt_expect_status(tk_bench_result(b, 0, TK_BENCH_P90_MS, &p90), TK_OK);
    tkt_expect_status(tk_bench_result(b, 0, TK_BENCH_MIN_MS, &lo), TK_OK);
    tkt_expect_status(tk_bench_result(b, 0, TK_BENCH_MAX_MS, &hi), TK_OK);
    tkt_expect_status(tk_bench_result(b, 0, TK_BENCH_SAMPLES, &n), TK_OK);
    tkt_expect_status(tk_bench_result(b, 0, TK_BENCH_SPEEDUP, &speed), TK_OK);
    tkt_expect_status(tk_bench_result(b, 0, TK_BENCH_MEAN_MS, &mean), TK_OK);
    tkt_expect_status(tk_bench_result(b, 0, TK_BENCH_STDEV_MS, &sd), TK_OK);
    cr_assert_eq(med, tk_median(ms, 6));
    cr_assert_eq(p90, tk_percentile(ms, 6, 90));
    cr_assert(lo <= med && med <= p90 && p90 <= hi && lo >= 0);
    cr_assert(lo <= mean && mean <= hi && sd >= 0 && sd <= hi - lo);
    cr_assert_eq(n, 6);
    cr_assert_eq(speed, 1.0, "the baseline against itself");
    double c_med, c_speed;
    tkt_expect_status(tk_bench_result(b, 1, TK_BENCH_MEDIAN_MS, &c_med), TK_OK);
    tkt_expect_status(tk_bench_result(b, 1, TK_BENCH_SPEEDUP, &c_speed), TK_OK);
    cr_assert_eq(c_speed, med / c_med);
    /* Not interleaved: each entry's whole protocol, one after the other. */
    logged = 0;
    tkt_expect_status(tk_bench_set(b, TK_BENCH_INTERLEAVE, 0), TK_OK);
    tkt_expect_status(tk_bench_run(b), TK_OK);
    log[logged] = 0;
    cr_assert_str_eq(log, "aaaaaaaacccccccc");
    cr_assert_eq(a.compiles, 2);
    /* Results are gone once the entries change. */
    cr_assert_eq(tk_bench_add(b, "late", NULL, NULL, p_run, NULL, &c), 2);
    tkt_expect_status((int)tk_bench_samples(b, 0, ms, 8), TK_ESTATE);
    tkt_expect_status(tk_bench_result(b, 0, TK_BENCH_MEDIAN_MS, &med), TK_ESTATE);
    tk_bench_destroy(b);
    tk_device_destroy(host);
}

Test(bench, a_failing_callback_keeps_no_results)
{
    tk_device *host;
    tk_bench *b = host_bench(&host);
    struct probe a = {'a', 0, 0, 0, 9, NULL, NULL};   /* 5 warm-ups, then sample 3 fails */
    tkt_expect_status(tk_bench_add(b, "flaky", NULL, p_compile, p_run, p_sync, &a), TK_OK);
    tkt_expect_status(tk_bench_run(b), TK_ECALLBACK);
    cr_assert(strstr(tk_last_error_message(), "\"flaky\": run of sample 3 returned 7"), "%s",
              tk_last_error_message());
    cr_assert_eq(a.runs, 9, "the run went on after the failure");
    double v;
    tkt_expect_status(tk_bench_result(b, 0, TK_BENCH_MEDIAN_MS, &v), TK_ESTATE);
    tkt_expect_status(tk_bench_write_receipt(b, "unused.json"), TK_ESTATE);
    tk_bench_destroy(b);
    tk_device_destroy(host);
}

Test(bench, refusals)
{
    tk_device *host;
    tkt_expect_status(tk_device_host(&host), TK_OK);
    tk_bench *b;
    tkt_expect_status(tk_bench_create(&b, host), TK_OK);
    struct probe a = {'a', 0, 0, 0, 0, NULL, NULL};
    tkt_expect_status(tk_bench_add(b, "a", NULL, NULL, p_run, NULL, &a), TK_OK);
    tkt_expect_status(tk_bench_run(b), TK_ESTATE);   /* no boundary stated */
    cr_assert(strstr(tk_last_error_message(), "tk_bench_set_boundary"), "%s",
              tk_last_error_message());
    tkt_expect_status(tk_bench_set_boundary(b, ""), TK_EINVAL);
    tkt_expect_status(tk_bench_set_boundary(b, "the callbacks"), TK_OK);
    tkt_expect_status(tk_bench_set(b, TK_BENCH_REPEATS, 4), TK_ERANGE);   /* at least 5 */
    tkt_expect_status(tk_bench_set(b, TK_BENCH_WARMUPS, 0), TK_ERANGE);
    tkt_expect_status(tk_bench_set(b, TK_BENCH_BASELINE, 1), TK_OK);
    tkt_expect_status(tk_bench_run(b), TK_ERANGE);   /* only one entry */
    cr_assert_eq(a.runs, 0);
    tkt_expect_status(tk_bench_set(b, TK_BENCH_BASELINE, 0), TK_OK);
    tkt_expect_status(tk_bench_add(b, NULL, NULL, NULL, p_run, NULL, &a), TK_EINVAL);
    tkt_expect_status(tk_bench_add(b, "x", NULL, NULL, NULL, NULL, &a), TK_EINVAL);
    tkt_expect_status(tk_bench_set(b, TK_PIPE_MODE, 1), TK_EINVAL);
    int64_t v;
    tkt_expect_status(tk_bench_get(b, TK_BENCH_REPEATS, &v), TK_OK);
    cr_assert_eq(v, 20);
    tkt_expect_status(tk_bench_get(b, TK_BENCH_WARMUPS, &v), TK_OK);
    cr_assert_eq(v, 5);
    tkt_expect_status(tk_bench_run(b), TK_OK);
    double ms[1];
    cr_assert_eq(tk_bench_samples(b, 0, NULL, 0), 20, "a count without copying");
    tkt_expect_status((int)tk_bench_samples(b, 0, NULL, 1), TK_EINVAL);
    tkt_expect_status((int)tk_bench_samples(b, 1, ms, 1), TK_ERANGE);
    double r;
    tkt_expect_status(tk_bench_result(b, 0, 9999, &r), TK_EINVAL);
    tkt_expect_status(tk_bench_write_receipt(b, "/nonexistent/dir/r.json"), TK_EIO);
    tkt_expect_status(tk_bench_write_receipt(b, "/dev/null"), TK_EIO);
    cr_assert(strstr(tk_last_error_message(), "is not a regular file (a device)"), "%s",
              tk_last_error_message());
    tk_bench_destroy(b);
    tk_bench_destroy(NULL);
    tk_device_destroy(host);
}

static int sleepy(void *u)
{
    (void)u;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    return 0;
}

/* A one-second budget stops 20 ms samples well before 1000 of them, but
 * never before five. */
Test(bench, the_budget_stops_sampling)
{
    tk_device *host;
    tk_bench *b = host_bench(&host);
    tkt_expect_status(tk_bench_set(b, TK_BENCH_REPEATS, 1000), TK_OK);
    tkt_expect_status(tk_bench_set(b, TK_BENCH_WARMUPS, 1), TK_OK);
    tkt_expect_status(tk_bench_set(b, TK_BENCH_MAX_SECONDS, 1), TK_OK);
    tkt_expect_status(tk_bench_add(b, "sleepy", NULL, NULL, sleepy, NULL, NULL), TK_OK);
    tkt_expect_status(tk_bench_run(b), TK_OK);
    int64_t n = tk_bench_samples(b, 0, NULL, 0);
    cr_assert(n >= 5 && n < 200, "%lld samples", (long long)n);
    double med;
    tkt_expect_status(tk_bench_result(b, 0, TK_BENCH_MEDIAN_MS, &med), TK_OK);
    cr_assert(med >= 20.0, "a 20 ms sleep timed at %g ms", med);
    tk_bench_destroy(b);
    tk_device_destroy(host);
}

/* Clock readings a callback pair takes as run starts and as sync ends. */
struct stamps {
    int n;
    double start[16], end[16];
    long sleep_ns;
};

static double stamp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static int stamp_run(void *u)
{
    struct stamps *s = u;
    s->start[s->n] = stamp_now();
    struct timespec ts = {0, s->sleep_ns};
    if (s->sleep_ns)
        nanosleep(&ts, NULL);
    return 0;
}
static int stamp_sync(void *u)
{
    struct stamps *s = u;
    s->end[s->n++] = stamp_now();
    return 0;
}

/* A sample holds its own entry's run and sync, and nothing of the entry
 * sampled before it: interleaved with a 2 ms entry, each sample of a
 * no-op entry lies between the 2 ms entry's sync and its next run.  And
 * the samples tile the sampling: together they cover everything from the
 * first sampled run to the last sampled sync. */
Test(bench, samples_hold_their_own_callbacks_and_tile_the_sampling)
{
    tk_device *host;
    tk_bench *b = host_bench(&host);
    enum { REPEATS = 6 };
    struct stamps slow = {.sleep_ns = 2000000}, quick = {0};
    tkt_expect_status(tk_bench_set(b, TK_BENCH_REPEATS, REPEATS), TK_OK);
    tkt_expect_status(tk_bench_set(b, TK_BENCH_WARMUPS, 1), TK_OK);
    cr_assert_eq(tk_bench_add(b, "slow", NULL, NULL, stamp_run, stamp_sync, &slow), 0);
    cr_assert_eq(tk_bench_add(b, "quick", NULL, NULL, stamp_run, stamp_sync, &quick), 1);
    tkt_expect_status(tk_bench_run(b), TK_OK);
    double ms_slow[REPEATS], ms_quick[REPEATS];
    cr_assert_eq(tk_bench_samples(b, 0, ms_slow, REPEATS), REPEATS);
    cr_assert_eq(tk_bench_samples(b, 1, ms_quick, REPEATS), REPEATS);
    const double eps = 1e-6;   /* ms: the rounding of the subtractions and sums */
    double total = 0.0;
    for (int k = 0; k < REPEATS; k++)
        total += ms_slow[k] + ms_quick[k];
    cr_assert_geq(total + eps, (quick.end[REPEATS] - slow.start[1]) * 1e3,
                  "the samples leave gaps: %g ms of %g", total,
                  (quick.end[REPEATS] - slow.start[1]) * 1e3);
    for (int k = 0; k < REPEATS; k++) {
        int i = k + 1;   /* after the warm-up */
        cr_assert_geq(ms_slow[k] + eps, (slow.end[i] - slow.start[i]) * 1e3, "sample %d", k);
        cr_assert_geq(ms_quick[k] + eps, (quick.end[i] - quick.start[i]) * 1e3, "sample %d", k);
        if (k + 1 < REPEATS)
            cr_assert_leq(ms_quick[k], (slow.start[i + 1] - slow.end[i]) * 1e3 + eps,
                          "quick sample %d holds some of the slow entry (%g ms)", k,
                          ms_quick[k]);
        if (k > 0)
            cr_assert_leq(ms_slow[k], (quick.start[i] - quick.end[i - 1]) * 1e3 + eps,
                          "slow sample %d holds some of the quick entry", k);
    }
    tk_bench_destroy(b);
    tk_device_destroy(host);
}

/* The summaries on edge cases; numpy itself is the reference in the
 * Python tests. */
Test(bench, median_and_percentile)
{
    const double x[] = {4.0, 1.0, 3.0, 2.0};
    cr_assert_eq(tk_median(x, 4), (2.0 + 3.0) / 2.0);
    cr_assert_eq(tk_median(x, 3), 3.0);
    cr_assert_eq(tk_percentile(x, 4, 0), 1.0);
    cr_assert_eq(tk_percentile(x, 4, 100), 4.0);
    cr_assert_eq(tk_percentile(x, 1, 37.5), 4.0);
    cr_assert_eq(x[0], 4.0, "the input was sorted in place");
    /* 50% of 4 values: virtual index 1.5, so the upper-neighbour form. */
    cr_assert_eq(tk_percentile(x, 4, 50), 3.0 - (3.0 - 2.0) * (1.0 - 0.5));
    cr_assert(isnan(tk_percentile(x, 4, 100.5)));
    cr_assert(strstr(tk_last_error_message(), "100.5"), "%s", tk_last_error_message());
    cr_assert(isnan(tk_percentile(x, 4, -1)));
    cr_assert(isnan(tk_percentile(x, 4, NAN)));
    cr_assert(isnan(tk_median(x, 0)));
    cr_assert(isnan(tk_median(NULL, 3)));
    const double nan_in[] = {1.0, NAN, 2.0};
    cr_assert(isnan(tk_median(nan_in, 3)));
    cr_assert(strstr(tk_last_error_message(), "sample 1 is NaN"), "%s",
              tk_last_error_message());
}

/* ---- re-entry ------------------------------------------------------------------ */

struct bench_reentry {
    tk_bench *self;
    int add, run, set, boundary, calls;
};

static int touchy(void *user)
{
    struct bench_reentry *r = user;
    if (r->calls++ == 0) {
        r->add = tk_bench_add(r->self, "late", NULL, NULL, touchy, NULL, r);
        r->run = tk_bench_run(r->self);
        r->set = tk_bench_set(r->self, TK_BENCH_REPEATS, 9);
        r->boundary = tk_bench_set_boundary(r->self, "changed mid-run");
    }
    return 0;
}

Test(bench, a_callback_cannot_change_or_rerun_its_own_bench)
{
    tk_device *host;
    struct bench_reentry r = {0};
    tkt_expect_status(tk_device_host(&host), TK_OK);
    tkt_expect_status(tk_bench_create(&r.self, host), TK_OK);
    tkt_expect_status(tk_bench_set_boundary(r.self, "a callback that re-enters"), TK_OK);
    cr_assert_eq(tk_bench_add(r.self, "touchy", NULL, NULL, touchy, NULL, &r), 0);
    tkt_expect_status(tk_bench_run(r.self), TK_OK);
    cr_assert_eq(r.add, TK_ESTATE);
    cr_assert_eq(r.run, TK_ESTATE);
    cr_assert_eq(r.set, TK_ESTATE);
    cr_assert_eq(r.boundary, TK_ESTATE);
    double n;
    tkt_expect_status(tk_bench_result(r.self, 0, TK_BENCH_SAMPLES, &n), TK_OK);
    cr_assert_eq(n, 20.0, "the run kept its own parameters");
    cr_assert_eq(tk_bench_samples(r.self, 1, NULL, 0), TK_ERANGE, "no entry was added");
    tk_bench_destroy(r.self);
    tk_device_destroy(host);
}
