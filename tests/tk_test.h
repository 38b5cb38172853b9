/* tk_test.h - small helpers shared by the Criterion suites. */
#ifndef TK_TEST_H
#define TK_TEST_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <tilekern.h>

/* Deterministic normal-ish data: splitmix64 mapped to [-4, 4). */
static inline uint64_t tkt_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline void tkt_fill(float *x, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)(tkt_next(&seed) >> 11) / 9007199254740992.0 * 8.0 - 4.0);
}
static inline uint32_t tkt_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float tkt_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Assert a call failed with `status` and left a non-empty message. */
#define tkt_expect_status(call, status)                                        \
    do {                                                                       \
        int tkt_rc_ = (call);                                                  \
        cr_assert_eq(tkt_rc_, (status), "%s returned %s, expected %s", #call,  \
                     tk_status_name(tkt_rc_), tk_status_name(status));         \
        if ((status) != TK_OK)                                                 \
            cr_assert(tk_last_error_message()[0] != '\0',                      \
                      "%s set no error message", #call);                       \
    } while (0)

/* A matrix of dtype filled by tkt_fill from seed. */
static inline tk_matrix *tkt_matrix(int dtype, int64_t rows, int64_t cols, uint64_t seed)
{
    float *src = malloc((size_t)(rows * cols) * sizeof *src);
    cr_assert_not_null(src);
    tkt_fill(src, (size_t)(rows * cols), seed);
    tk_matrix *m;
    tkt_expect_status(tk_matrix_from_f32(&m, dtype, rows, cols, src, cols), TK_OK);
    free(src);
    return m;
}

/* Bytes of a matrix's storage, row stride included. */
static inline size_t tkt_bytes(const tk_matrix *m)
{
    return (size_t)(tk_matrix_rows(m) * tk_matrix_row_stride(m) *
                    tk_dtype_size(tk_matrix_dtype(m)));
}

/* A copy of a matrix's storage, to free. */
static inline void *tkt_snapshot(const tk_matrix *m)
{
    void *s = malloc(tkt_bytes(m));
    cr_assert_not_null(s);
    memcpy(s, tk_matrix_data(m), tkt_bytes(m));
    return s;
}

/* The JSON report of one audit, read back whole (at most size - 1 bytes). */
static inline void tkt_report_json(const tk_audit *a, char *text, size_t size)
{
    char path[] = "/tmp/tk_report_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(tk_audit_write_report(a, path, TK_REPORT_JSON), TK_OK);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    size_t n = fread(text, 1, size - 1, f);
    text[n] = 0;
    fclose(f);
    remove(path);
}

#endif
