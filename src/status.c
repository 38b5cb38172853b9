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

static const struct {
    const char *name, *text;
} tk__statuses[] = {
    {"TK_OK", "success"},
    {"TK_EINVAL", "invalid argument"},
    {"TK_ENOMEM", "out of memory"},
    {"TK_EOVERFLOW", "size computation overflows"},
    {"TK_ESHAPE", "shape is empty or does not match"},
    {"TK_EDTYPE", "unsupported or mismatched dtype"},
    {"TK_ELAYOUT", "block, stride or tail layout not legal here"},
    {"TK_ERANGE", "parameter value out of range"},
    {"TK_ECAPACITY", "does not fit the on-chip memory limit"},
    {"TK_ERACE", "pipeline hazard detected"},
    {"TK_ENOTARGET", "a real target is required"},
    {"TK_EMISMATCH", "results do not match"},
    {"TK_EIO", "input/output error"},
    {"TK_EFORMAT", "malformed or unsupported file format"},
    {"TK_ESTATE", "call not valid in the current state"},
    {"TK_ECALLBACK", "a user callback failed"},
};

const char *tk_strerror(int status)
{
    if (status > 0 || status < -(int)(sizeof tk__statuses / sizeof *tk__statuses - 1))
        return "unknown status";
    return tk__statuses[-status].text;
}

const char *tk_status_name(int status)
{
    if (status > 0 || status < -(int)(sizeof tk__statuses / sizeof *tk__statuses - 1))
        return "TK_UNKNOWN";
    return tk__statuses[-status].name;
}

const char *tk_last_error_message(void) { return tk__message; }

void tk__clear_error(void) { tk__message[0] = '\0'; }

int tk__fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tk__message, sizeof tk__message, fmt, ap);
    va_end(ap);
    return status;
}

int tk__bytes(int64_t rows, int64_t cols, int64_t elem, size_t *bytes)
{
    int64_t n, b;
    if (!tk__mul(rows, cols, &n) || !tk__mul(n, elem, &b) ||
        (uint64_t)b > (uint64_t)PTRDIFF_MAX)
        return tk__fail(TK_EOVERFLOW,
                        "size overflows: %lld x %lld elements of %lld bytes",
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
