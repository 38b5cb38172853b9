/* fuzz.h - what the libFuzzer harnesses of tests/fuzz share: the fuzzer's
 * bytes read as small choices, and a check that names its line. */
#ifndef TK_FUZZ_H
#define TK_FUZZ_H

#include <stdio.h>
#include <stdlib.h>

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

#endif
