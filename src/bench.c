/* bench.c - tk_bench: the benchmark boundary.  Compile once (timed apart),
 * warm up, then time samples that each end with the caller's sync, on a
 * real target only; summaries follow numpy to the bit where numpy is the
 * reference (median, percentile). */
#include "internal.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TK__MIN_SAMPLES 5

typedef struct {
    char *label;
    tk_bench_fn compile, run, sync;
    void *user;
    double compile_s;
    double *ms;        /* samples, in the order taken */
    int64_t n;
} tk__entry;

struct tk_bench {
    const tk_device *target;
    int64_t param[5];  /* TK_BENCH_REPEATS .. TK_BENCH_BASELINE */
    char *boundary;
    tk__entry *e;
    int n, cap;
    bool done;         /* results of a complete run are in e[].ms */
    bool running;      /* tk_bench_run is calling back: no changes, no re-entry */
};

/* A bench whose run is calling back refuses changes and runs (TK_ESTATE):
 * a callback that added an entry or ran the bench again would free or grow
 * what the run is using. */
static int tk__not_running(const char *fn, const void *h)
{
    const tk_bench *b = h;
    return b->running ? tk__fail(TK_ESTATE, "%s: the bench is running (this call came from "
                                 "one of its callbacks); a running bench cannot be changed "
                                 "or run again", fn) : TK_OK;
}

static int64_t tk__bparam(const tk_bench *b, int param)
{
    return b->param[param - TK_BENCH_REPEATS];
}

/* ---- numpy's summaries ------------------------------------------------------- */

static int tk__cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A sorted copy of x, or NULL (no data, a NaN, or no memory: NaN results). */
static double *tk__sorted(const char *fn, const double *x, size_t n)
{
    if (!x || n == 0) {
        tk__fail(TK_EINVAL, "%s: no samples", fn);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if (isnan(x[i])) {
            tk__fail(TK_EINVAL, "%s: sample %zu is NaN", fn, i);
            return NULL;
        }
    double *s = malloc(n * sizeof *s);
    if (!s) {
        tk__fail(TK_ENOMEM, "%s: out of memory for %zu samples", fn, n);
        return NULL;
    }
    memcpy(s, x, n * sizeof *s);
    qsort(s, n, sizeof *s, tk__cmp_double);
    return s;
}

/* np.percentile's "linear" method on sorted data: the virtual index
 * (n - 1) * q, and numpy's two-sided lerp, which counts back from the upper
 * neighbour when the fraction is at least one half.  At or past the last
 * index numpy takes the last value as both neighbours, with the fraction
 * measured from index -1: kept, since it decides the sign of a zero. */
static double tk__linear(const double *s, size_t n, double q)
{
    double vi = (double)(n - 1) * q, lo = floor(vi), g = vi - lo;
    size_t i = (size_t)lo, j = i + 1;
    if (vi >= (double)(n - 1)) {
        i = j = n - 1;
        g = vi + 1.0;
    }
    double a = s[i], d = s[j] - a;
    return g >= 0.5 ? s[j] - d * (1.0 - g) : a + d * g;
}

double tk_median(const double *x, size_t n)
{
    double *s = tk__sorted("tk_median", x, n);
    if (!s)
        return NAN;
    /* np.median: the mean of the middle value or values, a sum that starts
     * from +0.0 (so a -0.0 middle comes out +0.0, as numpy's does). */
    double m = n % 2 ? 0.0 + s[n / 2] : ((0.0 + s[n / 2 - 1]) + s[n / 2]) / 2.0;
    free(s);
    return m;
}

double tk_percentile(const double *x, size_t n, double percent)
{
    if (!(percent >= 0.0 && percent <= 100.0)) {
        tk__fail(TK_ERANGE, "tk_percentile: percent must be in [0, 100]: got %g", percent);
        return NAN;
    }
    double *s = tk__sorted("tk_percentile", x, n);
    if (!s)
        return NAN;
    double p = tk__linear(s, n, percent / 100.0);
    free(s);
    return p;
}

/* ---- the handle ------------------------------------------------------------- */

int tk_bench_create(tk_bench **out, const tk_device *target)
{
    if (!out)
        return tk__fail(TK_EINVAL, "tk_bench_create: out is NULL");
    *out = NULL;
    if (!target)
        return tk__fail(TK_EINVAL, "tk_bench_create: target is NULL");
    if (tk_device_is_simulated(target)) {
        char plat[16] = {0};   /* "TPU", in the seed's words */
        for (size_t i = 0; i + 1 < sizeof plat && tk_device_platform(target)[i]; i++)
            plat[i] = (char)toupper((unsigned char)tk_device_platform(target)[i]);
        return tk__fail(TK_ENOTARGET, "tk_bench_create: %s benchmark requires real %s inputs; "
                        "interpretation timings are not accepted (\"%s\" is a simulated "
                        "profile)", plat, plat, tk_device_kind(target));
    }
    tk_bench *b = calloc(1, sizeof *b);
    if (!b)
        return tk__fail(TK_ENOMEM, "tk_bench_create: out of memory for the handle");
    b->target = target;
    const int64_t defaults[5] = {20, 5, 1, 0, 0};
    memcpy(b->param, defaults, sizeof defaults);
    *out = b;
    return TK_OK;
}

void tk_bench_destroy(tk_bench *b)
{
    if (!b)
        return;
    for (int i = 0; i < b->n; i++) {
        free(b->e[i].label);
        free(b->e[i].ms);
    }
    free(b->e);
    free(b->boundary);
    free(b);
}

static void tk__bench_store(void *h, int param, int64_t value)
{
    ((tk_bench *)h)->param[param - TK_BENCH_REPEATS] = value;
}

int tk_bench_set(tk_bench *b, int param, int64_t value)
{
    static const tk__settable s = {"tk_bench_set", "bench", TK__BENCH, tk__not_running, NULL,
                                   tk__bench_store, offsetof(tk_bench, done), NULL};
    return tk__param_set(&s, b, param, value);
}

int tk_bench_get(const tk_bench *b, int param, int64_t *value)
{
    if (!b || !value)
        return tk__fail(TK_EINVAL, "tk_bench_get: %s is NULL", !b ? "bench" : "value");
    if (param < TK_BENCH_REPEATS || param > TK_BENCH_BASELINE)
        return tk__fail(TK_EINVAL, "tk_bench_get: unknown parameter %d", param);
    *value = tk__bparam(b, param);
    return TK_OK;
}

static char *tk__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    return d ? memcpy(d, s, n) : NULL;
}

int tk_bench_set_boundary(tk_bench *b, const char *text)
{
    if (!b || !text)
        return tk__fail(TK_EINVAL, "tk_bench_set_boundary: %s is NULL", !b ? "bench" : "text");
    if (b->running)
        return tk__not_running("tk_bench_set_boundary", b);
    if (!text[0])
        return tk__fail(TK_EINVAL, "tk_bench_set_boundary: the boundary text is empty");
    char *copy = tk__strdup(text);
    if (!copy)
        return tk__fail(TK_ENOMEM, "tk_bench_set_boundary: out of memory");
    free(b->boundary);
    b->boundary = copy;
    b->done = false;
    return TK_OK;
}

/* The placement names where the entry's inputs live; it must be the target
 * or the same real device (platform and kind, either name of a chip). */
static bool tk__same_place(const tk_device *target, const tk_device *placement)
{
    return placement == target ||
           (!tk_device_is_simulated(placement) &&
            strcmp(tk_device_platform(placement), tk_device_platform(target)) == 0 &&
            tk__same_kind(tk_device_kind(placement), tk_device_kind(target)));
}

int tk_bench_add(tk_bench *b, const char *label, const tk_device *placement,
                 tk_bench_fn compile, tk_bench_fn run, tk_bench_fn sync, void *user)
{
    if (!b || !label || !run)
        return tk__fail(TK_EINVAL, "tk_bench_add: %s is NULL",
                        !b ? "bench" : !label ? "label" : "run");
    if (b->running)
        return tk__not_running("tk_bench_add", b);
    if (placement && !tk__same_place(b->target, placement))
        return tk__fail(TK_ENOTARGET, "tk_bench_add: \"%s\": inputs placed on %s \"%s\" are "
                        "not on the target \"%s\"; place them on the target first", label,
                        tk_device_is_simulated(placement) ? "simulated" : "device",
                        tk_device_kind(placement), tk_device_kind(b->target));
    /* Work on the host is done when run returns; a device's work is done
     * when its sync says so, and a sample without it times only the launch. */
    if (!sync && strcmp(tk_device_platform(b->target), "cpu") != 0)
        return tk__fail(TK_EINVAL, "tk_bench_add: \"%s\": a sync callback is required on "
                        "\"%s\", or samples would end before the device finishes", label,
                        tk_device_kind(b->target));
    if (b->n == INT32_MAX)
        return tk__fail(TK_ERANGE, "tk_bench_add: too many entries");
    if (b->n == b->cap) {
        int cap = b->cap ? (b->cap > INT32_MAX / 2 ? INT32_MAX : 2 * b->cap) : 4;
        tk__entry *e = realloc(b->e, (size_t)cap * sizeof *e);
        if (!e)
            return tk__fail(TK_ENOMEM, "tk_bench_add: out of memory");
        b->e = e;
        b->cap = cap;
    }
    char *copy = tk__strdup(label);
    if (!copy)
        return tk__fail(TK_ENOMEM, "tk_bench_add: out of memory");
    b->e[b->n] = (tk__entry){copy, compile, run, sync, user, 0, NULL, 0};
    b->done = false;
    return b->n++;
}

/* ---- run -------------------------------------------------------------------- */

static double tk__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int tk__called(const tk__entry *e, const char *phase, int64_t k, int rc)
{
    return tk__fail(TK_ECALLBACK, "tk_bench_run: \"%s\": %s %lld returned %d; no results "
                    "were kept", e->label, phase, (long long)k, rc);
}

/* One timed sample: run, then sync, from *last, the reading that ended
 * the sample before, to a new one, which becomes *last.  One read per
 * sample instead of two: a read took 40 to 47 ns on an Intel Xeon VM, and
 * all the harness does between samples is store the previous one. */
static int tk__sample(tk__entry *e, double *last)
{
    int rc = e->run(e->user);
    if (rc)
        return tk__called(e, "run of sample", e->n, rc);
    if (e->sync && (rc = e->sync(e->user)))
        return tk__called(e, "sync of sample", e->n, rc);
    double t = tk__now();
    e->ms[e->n++] = (t - *last) * 1e3;
    *last = t;
    return TK_OK;
}

static int tk__prepare(tk__entry *e, int64_t warmups)
{
    if (e->compile) {
        double t0 = tk__now();
        int rc = e->compile(e->user);
        if (rc)
            return tk__called(e, "compile", 0, rc);
        e->compile_s = tk__now() - t0;
    }
    for (int64_t w = 0; w < warmups; w++) {
        int rc = e->run(e->user);
        if (!rc && e->sync)
            rc = e->sync(e->user);
        if (rc)
            return tk__called(e, "warm-up", w, rc);
    }
    return TK_OK;
}

/* Samples of entries [from, to), in turn, until `repeats` each, or until
 * the budget (seconds, 0: none) is spent and each has its minimum. */
static int tk__sampling(tk_bench *b, int from, int to, int64_t repeats, double budget)
{
    double start = tk__now(), last = start;
    for (int64_t k = 0; k < repeats; k++) {
        if (budget > 0 && k >= TK__MIN_SAMPLES && last - start > budget)
            break;
        for (int j = from; j < to; j++) {
            int rc = tk__sample(&b->e[j], &last);
            if (rc)
                return rc;
        }
    }
    return TK_OK;
}

static int tk__bench_run(tk_bench *b)
{
    if (!b->n)
        return tk__fail(TK_ESTATE, "tk_bench_run: no entries; add them with tk_bench_add");
    if (!b->boundary)
        return tk__fail(TK_ESTATE, "tk_bench_run: say what a sample measures with "
                        "tk_bench_set_boundary first");
    if (tk__bparam(b, TK_BENCH_BASELINE) >= b->n)
        return tk__fail(TK_ERANGE, "tk_bench_run: baseline entry %lld, but only %d entries",
                        (long long)tk__bparam(b, TK_BENCH_BASELINE), b->n);
    int64_t repeats = tk__bparam(b, TK_BENCH_REPEATS), warmups = tk__bparam(b, TK_BENCH_WARMUPS);
    b->done = false;
    for (int i = 0; i < b->n; i++) {
        free(b->e[i].ms);
        b->e[i] = (tk__entry){b->e[i].label, b->e[i].compile, b->e[i].run, b->e[i].sync,
                              b->e[i].user, 0, malloc((size_t)repeats * sizeof(double)), 0};
        if (!b->e[i].ms)
            return tk__fail(TK_ENOMEM, "tk_bench_run: out of memory for %lld samples",
                            (long long)repeats);
    }
    /* Interleaved, every entry is compiled and warmed up first and samples
     * are taken in turn, so slow drift in the machine falls on all entries
     * alike; otherwise each entry runs its whole protocol before the next. */
    double budget = (double)tk__bparam(b, TK_BENCH_MAX_SECONDS);
    int rc = TK_OK;
    if (tk__bparam(b, TK_BENCH_INTERLEAVE)) {
        for (int i = 0; i < b->n && !rc; i++)
            rc = tk__prepare(&b->e[i], warmups);
        if (!rc)
            rc = tk__sampling(b, 0, b->n, repeats, budget);
    } else {
        for (int i = 0; i < b->n && !rc; i++)
            if (!(rc = tk__prepare(&b->e[i], warmups)))
                rc = tk__sampling(b, i, i + 1, repeats, budget);
    }
    if (rc)
        for (int i = 0; i < b->n; i++)
            b->e[i].n = 0;
    b->done = !rc;
    return rc;
}

/* ---- results ------------------------------------------------------------------ */

int tk_bench_run(tk_bench *b)
{
    if (!b)
        return tk__fail(TK_EINVAL, "tk_bench_run: bench is NULL");
    int rc = tk__not_running("tk_bench_run", b);
    if (rc)
        return rc;
    b->running = true;
    rc = tk__bench_run(b);
    b->running = false;
    return rc;
}

static int tk__entry_check(const char *fn, const tk_bench *b, int entry)
{
    if (!b)
        return tk__fail(TK_EINVAL, "%s: bench is NULL", fn);
    if (!b->done)
        return tk__fail(TK_ESTATE, "%s: no results: tk_bench_run has not completed since "
                        "the last change", fn);
    if (entry < 0 || entry >= b->n)
        return tk__fail(TK_ERANGE, "%s: entry %d is outside [0, %d)", fn, entry, b->n);
    return TK_OK;
}

int64_t tk_bench_samples(const tk_bench *b, int entry, double *out_ms, int64_t capacity)
{
    int rc = tk__entry_check("tk_bench_samples", b, entry);
    if (rc)
        return rc;
    if (capacity < 0 || (capacity > 0 && !out_ms))
        return tk__fail(TK_EINVAL, "tk_bench_samples: capacity %lld with %s buffer",
                        (long long)capacity, out_ms ? "a" : "no");
    const tk__entry *e = &b->e[entry];
    if (out_ms)
        memcpy(out_ms, e->ms, (size_t)(capacity < e->n ? capacity : e->n) * sizeof *out_ms);
    return e->n;
}

int tk_bench_result(const tk_bench *b, int entry, int stat, double *value)
{
    int rc = tk__entry_check("tk_bench_result", b, entry);
    if (rc)
        return rc;
    if (!value)
        return tk__fail(TK_EINVAL, "tk_bench_result: value is NULL");
    if (stat < TK_BENCH_COMPILE_S || stat > TK_BENCH_SPEEDUP)
        return tk__fail(TK_EINVAL, "tk_bench_result: unknown statistic %d", stat);
    const tk__entry *e = &b->e[entry];
    size_t n = (size_t)e->n;
    double v = 0, mean = 0;
    for (size_t i = 0; i < n; i++)
        mean += e->ms[i];
    mean /= (double)n;
    switch (stat) {
    case TK_BENCH_COMPILE_S: v = e->compile_s; break;
    case TK_BENCH_MEDIAN_MS: v = tk_median(e->ms, n); break;
    case TK_BENCH_P90_MS: v = tk_percentile(e->ms, n, 90.0); break;
    case TK_BENCH_MIN_MS: v = tk_percentile(e->ms, n, 0.0); break;
    case TK_BENCH_MAX_MS: v = tk_percentile(e->ms, n, 100.0); break;
    case TK_BENCH_MEAN_MS: v = mean; break;
    case TK_BENCH_STDEV_MS:
        for (size_t i = 0; i < n; i++)
            v += (e->ms[i] - mean) * (e->ms[i] - mean);
        v = sqrt(v / (double)n);
        break;
    case TK_BENCH_SAMPLES: v = (double)n; break;
    default: {
        const tk__entry *base = &b->e[tk__bparam(b, TK_BENCH_BASELINE)];
        double m0 = tk_median(base->ms, (size_t)base->n), m = tk_median(e->ms, n);
        if (isnan(m0) || isnan(m))
            v = NAN;
        else   /* a 0 ms median is below the clock's resolution */
            v = m > 0 ? m0 / m : m0 > 0 ? INFINITY : 1.0;
        break;
    }
    }
    /* Samples are never NaN, so a NaN here is tk_median or tk_percentile
     * out of memory. */
    if (isnan(v))
        return tk__fail(TK_ENOMEM, "tk_bench_result: out of memory");
    *value = v;
    return TK_OK;
}

/* ---- receipt ------------------------------------------------------------------ */

int tk_bench_write_receipt(const tk_bench *b, const char *path)
{
    int rc = tk__entry_check("tk_bench_write_receipt", b, 0);
    if (rc)
        return rc;
    if (!path)
        return tk__fail(TK_EINVAL, "tk_bench_write_receipt: path is NULL");
    tk__out o;
    if ((rc = tk__out_open(&o, "tk_bench_write_receipt", path)))
        return rc;
    FILE *f = o.f;
    fprintf(f, "{\n  \"schema\": \"tilekern.bench/1\",\n  \"library\": \"%s\",\n"
            "  \"target\": {\"platform\": ", tk_version_string());
    tk__json_string(f, tk_device_platform(b->target));
    fprintf(f, ", \"device_kind\": ");
    tk__json_string(f, tk_device_kind(b->target));
    fprintf(f, "},\n  \"boundary\": ");
    tk__json_string(f, b->boundary);
    fprintf(f, ",\n  \"clock\": \"CLOCK_MONOTONIC, one reading after each sync; a sample runs "
            "from the reading before it\",\n"
            "  \"warmups\": %lld, \"repeats\": %lld, \"interleave\": %s, "
            "\"max_seconds\": %lld,\n  \"baseline\": ",
            (long long)tk__bparam(b, TK_BENCH_WARMUPS), (long long)tk__bparam(b, TK_BENCH_REPEATS),
            tk__bparam(b, TK_BENCH_INTERLEAVE) ? "true" : "false",
            (long long)tk__bparam(b, TK_BENCH_MAX_SECONDS));
    tk__json_string(f, b->e[tk__bparam(b, TK_BENCH_BASELINE)].label);
    fprintf(f, ",\n  \"entries\": [");
    static const struct {
        int stat;
        const char *name;
    } stats[] = {{TK_BENCH_COMPILE_S, "compile_s"}, {TK_BENCH_MEDIAN_MS, "median_ms"},
                 {TK_BENCH_P90_MS, "p90_ms"},       {TK_BENCH_MIN_MS, "min_ms"},
                 {TK_BENCH_MAX_MS, "max_ms"},       {TK_BENCH_MEAN_MS, "mean_ms"},
                 {TK_BENCH_STDEV_MS, "stdev_ms"},   {TK_BENCH_SPEEDUP, "speedup"}};
    for (int i = 0; i < b->n && !rc; i++) {
        fprintf(f, "%s\n    {\"label\": ", i ? "," : "");
        tk__json_string(f, b->e[i].label);
        for (size_t s = 0; s < sizeof stats / sizeof *stats && !rc; s++) {
            double v = NAN;
            rc = tk_bench_result(b, i, stats[s].stat, &v);
            fprintf(f, ", \"%s\": ", stats[s].name);
            fputs(tk__jn(v).s, f);
        }
        fprintf(f, ",\n     \"samples_ms\": [");
        for (int64_t k = 0; k < b->e[i].n; k++) {
            fputs(k ? ", " : "", f);
            fputs(tk__jn(b->e[i].ms[k]).s, f);
        }
        fprintf(f, "]}");
    }
    fprintf(f, "\n  ]\n}\n");
    if (rc) {  /* a result could not be read: keep the old receipt */
        tk__out_abort(&o);
        return rc;
    }
    return tk__out_commit(&o, "tk_bench_write_receipt", path);
}
