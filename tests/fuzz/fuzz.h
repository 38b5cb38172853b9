/* fuzz.h - what the libFuzzer harnesses of tests/fuzz share: the fuzzer's
 * bytes read as small choices, a check that names its line, and the check
 * that each failure writes a message of its own. */
#ifndef TK_FUZZ_H
#define TK_FUZZ_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tilekern.h>

typedef struct { const unsigned char *p; size_t n; } bytes;

/* An int in [lo, hi]; lo once the bytes run out, so that a short input
 * makes the low choices (call.c and bound.c make those the plain ones). */
static inline int take(bytes *b, int lo, int hi)
{
    int v = b->n ? b->p[0] : 0;
    if (b->n) {
        b->p++;
        b->n--;
    }
    return lo + v % (hi - lo + 1);
}

static inline void fuzz_fail(const char *file, int line)
{
    fprintf(stderr, "%s:%d: check failed\n", file, line);
    abort();
}
#define check(ok) ((ok) ? (void)0 : fuzz_fail(__FILE__, __LINE__))

/* The thread's message as st() last saw it. */
static inline char *fuzz_seen(void)
{
    static char seen[512];
    return seen;
}

/* Overwrite the thread's message with a known failure's, so that the next
 * failure is seen to write its own. */
static inline void mark(void)
{
    check(tk_audit_case_count(NULL) == TK_EINVAL);
    snprintf(fuzz_seen(), 512, "%s", tk_last_error_message());
}

/* rc, once the thread's message agrees with it: a failure wrote a
 * non-empty message of its own, a success left the message as it was. */
static inline int st(int rc)
{
    const char *m = tk_last_error_message();
    if (rc < 0) {
        check(m[0] != '\0' && strcmp(m, fuzz_seen()) != 0);
        mark();
    } else {
        check(strcmp(m, fuzz_seen()) == 0);
    }
    return rc;
}

#endif
