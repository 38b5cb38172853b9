/* status.c - version, status codes, thread-local error messages. */
#include "internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

static _Thread_local char tk__message[512];

unsigned tk_version_number(void) { return TK_VERSION_NUMBER; }

const char *tk_version_string(void)
{
    return TK__STR(TK_VERSION_MAJOR) "." TK__STR(TK_VERSION_MINOR) "." TK__STR(
        TK_VERSION_PATCH);
}

/* Indexed by -status. */
static const struct {
    const char *name, *text;
} tk__statuses[] = {
#define TK__STATUS_ENTRY(name, value, text) [-(value)] = {#name, text},
    TK_STATUS_LIST(TK__STATUS_ENTRY)
#undef TK__STATUS_ENTRY
};

/* Each constant has its list value, and the list runs 0, -1, -2, ...
 * without a gap (so no entry above is left NULL). */
enum { TK__STATUSES = 0
#define TK__STATUS_COUNT(name, value, text) +1
    TK_STATUS_LIST(TK__STATUS_COUNT)
#undef TK__STATUS_COUNT
};
#define TK__STATUS_CHECK(name, value, text)                                         \
    _Static_assert(name == (value) && -(value) < TK__STATUSES, #name " disagrees with " \
                   "TK_STATUS_LIST");
TK_STATUS_LIST(TK__STATUS_CHECK)
#undef TK__STATUS_CHECK
_Static_assert(sizeof tk__statuses / sizeof *tk__statuses == TK__STATUSES,
               "TK_STATUS_LIST has a gap");

static bool tk__status_known(int status)
{
    return status <= 0 && status > -(int)(sizeof tk__statuses / sizeof *tk__statuses);
}

const char *tk_strerror(int status)
{
    return tk__status_known(status) ? tk__statuses[-status].text : "unknown status";
}

const char *tk_status_name(int status)
{
    return tk__status_known(status) ? tk__statuses[-status].name : "TK_UNKNOWN";
}

const char *tk_last_error_message(void) { return tk__message; }


int tk__fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tk__message, sizeof tk__message, fmt, ap);
    va_end(ap);
    return status;
}

int tk__bytes(const char *fn, int64_t rows, int64_t cols, int64_t elem, size_t *bytes)
{
    int64_t n, b;
    if (!tk__mul(rows, cols, &n) || !tk__mul(n, elem, &b) ||
        (uint64_t)b > (uint64_t)PTRDIFF_MAX)
        return tk__fail(TK_EOVERFLOW,
                        "%s: size overflows: %lld x %lld elements of %lld bytes", fn,
                        (long long)rows, (long long)cols, (long long)elem);
    *bytes = (size_t)b;
    return TK_OK;
}

double tk_amdahl(double fraction, double local_speedup)
{
    if (!(fraction >= 0.0 && fraction <= 1.0) || !(local_speedup > 0.0))
        return NAN;
    if (isinf(local_speedup))
        return 1.0 / (1.0 - fraction);
    return 1.0 / ((1.0 - fraction) + fraction / local_speedup);
}
