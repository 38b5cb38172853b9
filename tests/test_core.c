/* test_core.c - status model, version, parameter ranges, tk_matrix. */
#include "tk_test.h"

#include <criterion/parameterized.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- status and version ------------------------------------------------ */

Test(status, codes_are_pinned)
{
    const int codes[] = {TK_OK, TK_EINVAL, TK_ENOMEM, TK_EOVERFLOW, TK_ESHAPE,
                         TK_EDTYPE, TK_ELAYOUT, TK_ERANGE, TK_ECAPACITY, TK_ERACE,
                         TK_ENOTARGET, TK_EMISMATCH, TK_EIO, TK_EFORMAT, TK_ESTATE,
                         TK_ECALLBACK};
    const char *names[] = {"TK_OK", "TK_EINVAL", "TK_ENOMEM", "TK_EOVERFLOW",
                           "TK_ESHAPE", "TK_EDTYPE", "TK_ELAYOUT", "TK_ERANGE",
                           "TK_ECAPACITY", "TK_ERACE", "TK_ENOTARGET",
                           "TK_EMISMATCH", "TK_EIO", "TK_EFORMAT", "TK_ESTATE",
                           "TK_ECALLBACK"};
    for (int i = 0; i < 16; i++) {
        cr_assert_eq(codes[i], -i, "%s moved", names[i]);
        cr_assert_str_eq(tk_status_name(codes[i]), names[i]);
        cr_assert_str_neq(tk_strerror(codes[i]), "unknown status");
    }
}

Test(status, unknown_codes_have_fallbacks)
{
    const int bad[] = {1, -16, -1000, 1000, INT32_MIN, INT32_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_assert_str_eq(tk_strerror(bad[i]), "unknown status");
        cr_assert_str_eq(tk_status_name(bad[i]), "TK_UNKNOWN");
    }
}

Test(status, version_matches_header)
{
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", TK_VERSION_MAJOR, TK_VERSION_MINOR,
             TK_VERSION_PATCH);
    cr_assert_str_eq(tk_version_string(), want);
    cr_assert_eq(tk_version_number(), (unsigned)TK_VERSION_NUMBER);
    cr_assert_eq(tk_version_number(),
                 (unsigned)(TK_VERSION_MAJOR * 10000 + TK_VERSION_MINOR * 100 +
                            TK_VERSION_PATCH));
}

/* The build line: its words in order, a known path, the path in use never
 * above the CPU's, a known tuning (TK_TUNE's when it names one), and the
 * same text on every call; no call changes the thread's last error
 * message. */
Test(status, build_info_names_the_dispatched_path)
{
    const char *before = tk_last_error_message();
    char version[16], isa[16], cpu[16], asked[16], cc[32], tune[16], tune_asked[16];
    const char *line = tk_build_info();
    cr_assert_eq(sscanf(line, "version=%15s isa=%15s cpu=%15s TK_ISA=%15s compiler=%31s "
                        "tune=%15s TK_TUNE=%15s",
                        version, isa, cpu, asked, cc, tune, tune_asked),
                 7, "%s", line);
    cr_assert(strcmp(tune, "intel") == 0 || strcmp(tune, "amd") == 0, "%s", line);
    const char *tune_env = getenv("TK_TUNE");
    if (!tune_env || !*tune_env)
        cr_assert_str_eq(tune_asked, "unset");
    else if (strcmp(tune_env, "intel") == 0 || strcmp(tune_env, "amd") == 0)
        cr_assert(strcmp(tune, tune_env) == 0 && strcmp(tune_asked, tune_env) == 0, "%s", line);
    else
        cr_assert_str_eq(tune_asked, "unknown");
    cr_assert_str_eq(version, tk_version_string());
    const char *paths[] = {"portable", "avx2", "avx512"};
    int in_use = -1, best = -1;
    for (int i = 0; i < 3; i++) {
        in_use = strcmp(isa, paths[i]) == 0 ? i : in_use;
        best = strcmp(cpu, paths[i]) == 0 ? i : best;
    }
    cr_assert(in_use >= 0 && best >= in_use, "%s", line);
    const char *env = getenv("TK_ISA");
    if (!env || !*env)
        cr_assert(strcmp(asked, "unset") == 0 && in_use == best, "%s", line);
    cr_assert_eq(tk_build_info(), line);
    cr_assert_str_eq(tk_last_error_message(), before);
}

Test(status, message_names_offending_values)
{
    tk_matrix *m = (tk_matrix *)&m;
    tkt_expect_status(tk_matrix_create(&m, TK_DTYPE_F32, 3, -5), TK_ESHAPE);
    cr_assert_null(m);
    cr_assert(strstr(tk_last_error_message(), "3x-5") != NULL, "message: %s",
              tk_last_error_message());
}

static void *other_thread_message(void *arg)
{
    (void)arg;
    /* A fresh thread has no message of its own yet. */
    return (void *)(tk_last_error_message()[0] == '\0' ? "empty" : "leaked");
}

#include <pthread.h>
Test(status, message_is_thread_local)
{
    tk_matrix *m;
    tk_matrix_create(&m, 99, 1, 1);
    cr_assert(tk_last_error_message()[0] != '\0');
    pthread_t t;
    void *r;
    cr_assert_eq(pthread_create(&t, NULL, other_thread_message, NULL), 0);
    pthread_join(t, &r);
    cr_assert_str_eq((const char *)r, "empty");
}

/* ---- parameter ranges -------------------------------------------------- */

Test(params, bounds_of_known_parameters)
{
    int64_t lo = 7, hi = 7;
    cr_assert_eq(tk_param_bounds(TK_TILING_TAIL, &lo, &hi), TK_OK);
    cr_assert_eq(lo, TK_TAIL_PAD);
    cr_assert_eq(hi, TK_TAIL_SHIFT_INWARDS);
    cr_assert_eq(tk_param_bounds(TK_KERNEL_BODY, &lo, &hi), TK_OK);
    cr_assert_eq(lo, TK_BODY_ELEMENTWISE);
    cr_assert_eq(hi, TK_BODY_BLOCKWISE);
    cr_assert_eq(tk_param_bounds(TK_COMPARE_NAN_POLICY, &lo, &hi), TK_OK);
    cr_assert_eq(lo, TK_NAN_MATCH);
    cr_assert_eq(hi, TK_NAN_IGNORE);
}

Test(params, unknown_parameter_is_rejected_untouched)
{
    int64_t lo = 7, hi = 9;
    tkt_expect_status(tk_param_bounds(424242, &lo, &hi), TK_EINVAL);
    cr_assert(strstr(tk_last_error_message(), "424242"));
    cr_assert_eq(lo, 7);
    cr_assert_eq(hi, 9);
    tkt_expect_status(tk_param_bounds(TK_TILING_TAIL, NULL, &hi), TK_EINVAL);
    cr_assert_eq(hi, 9);
}

Test(amdahl, bound_and_limit)
{
    /* Computed independently here; the library must agree exactly. */
    double p = 0.3, s = 2.0;
    double want = 1.0 / ((1.0 - p) + p / s), limit = 1.0 / (1.0 - p);
    cr_assert_eq(tk_amdahl(p, s), want);
    cr_assert_eq(tk_amdahl(p, INFINITY), limit);
    cr_assert_eq(tk_amdahl(0.0, 5.0), 1.0);
    cr_assert(isnan(tk_amdahl(-0.1, 2.0)));
    cr_assert(isnan(tk_amdahl(1.5, 2.0)));
    cr_assert(isnan(tk_amdahl(0.3, 0.0)));
    cr_assert(isnan(tk_amdahl(NAN, 2.0)));
}

/* ---- tk_matrix --------------------------------------------------------- */

struct shape { int dtype; int64_t rows, cols; };

ParameterizedTestParameters(matrix, create_is_zeroed)
{
    static struct shape p[] = {
        {TK_DTYPE_F32, 1, 1}, {TK_DTYPE_BF16, 9, 129}, {TK_DTYPE_I32, 17, 257},
        {TK_DTYPE_F32, 4095, 3}, {TK_DTYPE_BF16, 1, 4093},
    };
    return cr_make_param_array(struct shape, p, sizeof p / sizeof *p);
}

ParameterizedTest(struct shape *p, matrix, create_is_zeroed)
{
    tk_matrix *m = NULL;
    cr_assert_eq(tk_matrix_create(&m, p->dtype, p->rows, p->cols), TK_OK);
    cr_assert_eq(tk_matrix_dtype(m), p->dtype);
    cr_assert_eq(tk_matrix_rows(m), p->rows);
    cr_assert_eq(tk_matrix_cols(m), p->cols);
    cr_assert_eq(tk_matrix_row_stride(m), p->cols);
    cr_assert_eq((uintptr_t)tk_matrix_data(m) % 64, 0, "owned storage starts on a cache line");
    const unsigned char *d = tk_matrix_data(m);
    size_t bytes = (size_t)(p->rows * p->cols * tk_dtype_size(p->dtype));
    for (size_t i = 0; i < bytes; i++)
        cr_assert_eq(d[i], 0, "byte %zu not zero", i);
    tk_matrix_destroy(m);
}

Test(matrix, from_f32_represents_and_to_f32_is_exact)
{
    enum { R = 9, C = 129, S = 131 };
    static float src[R * S], back[R * C];
    tkt_fill(src, R * S, 42);
    src[0] = 1.00390625f; /* a tie that rounds to even in bf16 */
    for (int dt = TK_DTYPE_F32; dt <= TK_DTYPE_BF16; dt++) {
        tk_matrix *m = NULL;
        cr_assert_eq(tk_matrix_from_f32(&m, dt, R, C, src, S), TK_OK);
        cr_assert_eq((uintptr_t)tk_matrix_data(m) % 64, 0);
        cr_assert_eq(tk_matrix_to_f32(m, back, C), TK_OK);
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++) {
                float want = src[r * S + c];
                if (dt == TK_DTYPE_BF16) {
                    /* Independent RNE on the bits (no NaN in this data). */
                    uint32_t u = tkt_bits(want), low = u & 0xFFFF, hi = u >> 16;
                    if (low > 0x8000 || (low == 0x8000 && (hi & 1)))
                        hi++;
                    want = tkt_float(hi << 16);
                }
                cr_assert_eq(tkt_bits(back[r * C + c]), tkt_bits(want),
                             "dtype %d (%d,%d)", dt, r, c);
            }
        if (dt == TK_DTYPE_BF16)
            cr_assert_eq(tkt_bits(back[0]), tkt_bits(1.0f));
        tk_matrix_destroy(m);
    }
}

Test(matrix, wrap_borrows_with_stride)
{
    uint16_t buf[3 * 8];
    for (int i = 0; i < 24; i++)
        buf[i] = (uint16_t)(0x3F80 + i);
    tk_matrix *m = NULL;
    cr_assert_eq(tk_matrix_wrap(&m, TK_DTYPE_BF16, 3, 5, 8, buf), TK_OK);
    cr_assert_eq(tk_matrix_data(m), (void *)buf);
    cr_assert_eq(tk_matrix_row_stride(m), 8);
    float out[3 * 6];
    memset(out, 0xAB, sizeof out);
    cr_assert_eq(tk_matrix_to_f32(m, out, 6), TK_OK);
    for (int r = 0; r < 3; r++) {
        for (int c = 0; c < 5; c++)
            cr_assert_eq(tkt_bits(out[r * 6 + c]), (uint32_t)buf[r * 8 + c] << 16);
        cr_assert_eq(tkt_bits(out[r * 6 + 5]), 0xABABABABu, "padding column written");
    }
    tk_matrix_destroy(m); /* borrowed: buf stays ours */
    cr_assert_eq(buf[23], 0x3F80 + 23);
}

Test(matrix, destroy_and_accessors_accept_null)
{
    tk_matrix_destroy(NULL);
    cr_assert_eq(tk_matrix_dtype(NULL), 0);
    cr_assert_eq(tk_matrix_rows(NULL), 0);
    cr_assert_eq(tk_matrix_cols(NULL), 0);
    cr_assert_eq(tk_matrix_row_stride(NULL), 0);
    cr_assert_null(tk_matrix_data(NULL));
}

/* Every rejection sets *out = NULL and names the values. */
Test(matrix, bad_input_is_rejected)
{
    float f[16] = {0};
    tk_matrix *m;
#define REJECT(call, status, needle)                                           \
    do {                                                                       \
        m = (tk_matrix *)f;                                                    \
        tkt_expect_status(call, status);                                       \
        cr_assert_null(m, "%s left *out set", #call);                          \
        cr_assert(strstr(tk_last_error_message(), needle), "%s: message '%s' " \
                  "lacks '%s'", #call, tk_last_error_message(), needle);       \
    } while (0)
    REJECT(tk_matrix_create(&m, 0, 2, 2), TK_EDTYPE, "unknown dtype 0");
    REJECT(tk_matrix_create(&m, 7, 2, 2), TK_EDTYPE, "unknown dtype 7");
    REJECT(tk_matrix_create(&m, TK_DTYPE_F32, 0, 2), TK_ESHAPE, "0x2");
    REJECT(tk_matrix_create(&m, TK_DTYPE_F32, 2, -1), TK_ESHAPE, "2x-1");
    REJECT(tk_matrix_create(&m, TK_DTYPE_F32, INT64_MAX, 2), TK_EOVERFLOW, "overflows");
    REJECT(tk_matrix_create(&m, TK_DTYPE_BF16, (int64_t)1 << 40, (int64_t)1 << 40),
           TK_EOVERFLOW, "1099511627776x1099511627776");
    REJECT(tk_matrix_wrap(&m, TK_DTYPE_F32, 2, 4, 3, f), TK_ELAYOUT, "stride 3");
    REJECT(tk_matrix_wrap(&m, TK_DTYPE_F32, 2, 4, 4, (char *)f + 2), TK_ELAYOUT,
           "not aligned to its 4-byte float32 elements");
    REJECT(tk_matrix_wrap(&m, TK_DTYPE_BF16, 2, 4, 4, (char *)f + 1), TK_ELAYOUT,
           "not aligned to its 2-byte bfloat16 elements");
    REJECT(tk_matrix_wrap(&m, TK_DTYPE_F32, 2, 4, 4, NULL), TK_EINVAL, "NULL");
    REJECT(tk_matrix_wrap(&m, TK_DTYPE_F32, 2, -4, 4, f), TK_ESHAPE, "2x-4");
    REJECT(tk_matrix_wrap(&m, TK_DTYPE_F32, INT64_MAX / 2, 4, 4, f), TK_EOVERFLOW,
           "overflows");
    REJECT(tk_matrix_from_f32(&m, TK_DTYPE_I32, 2, 2, f, 2), TK_EDTYPE, "int32");
    REJECT(tk_matrix_from_f32(&m, TK_DTYPE_F32, 2, 2, NULL, 2), TK_EINVAL, "NULL");
    REJECT(tk_matrix_from_f32(&m, TK_DTYPE_F32, 2, 2, f, 1), TK_ELAYOUT, "stride 1");
    REJECT(tk_matrix_from_f32(&m, TK_DTYPE_BF16, 0, 0, f, 1), TK_ESHAPE, "0x0");
#undef REJECT
    tkt_expect_status(tk_matrix_create(NULL, TK_DTYPE_F32, 1, 1), TK_EINVAL);
    tkt_expect_status(tk_matrix_wrap(NULL, TK_DTYPE_F32, 1, 1, 1, f), TK_EINVAL);
    tkt_expect_status(tk_matrix_from_f32(NULL, TK_DTYPE_F32, 1, 1, f, 1), TK_EINVAL);
}

Test(matrix, to_f32_rejections_leave_dst_untouched)
{
    tk_matrix *m = NULL, *i32 = NULL;
    cr_assert_eq(tk_matrix_create(&m, TK_DTYPE_F32, 2, 4), TK_OK);
    cr_assert_eq(tk_matrix_create(&i32, TK_DTYPE_I32, 2, 4), TK_OK);
    float dst[8];
    for (int i = 0; i < 8; i++)
        dst[i] = (float)i + 0.5f;
    tkt_expect_status(tk_matrix_to_f32(m, dst, 3), TK_ELAYOUT);
    tkt_expect_status(tk_matrix_to_f32(i32, dst, 4), TK_EDTYPE);
    tkt_expect_status(tk_matrix_to_f32(NULL, dst, 4), TK_EINVAL);
    tkt_expect_status(tk_matrix_to_f32(m, NULL, 4), TK_EINVAL);
    /* A stride whose rows no memory holds: refused, not written through. */
    tkt_expect_status(tk_matrix_to_f32(m, dst, INT64_MAX / 2), TK_EOVERFLOW);
    cr_assert(strstr(tk_last_error_message(), "destination row stride 4611686018427387903"),
              "%s", tk_last_error_message());
    for (int i = 0; i < 8; i++)
        cr_assert_eq(dst[i], (float)i + 0.5f, "dst[%d] changed", i);
    tk_matrix *out = (tk_matrix *)dst;
    tkt_expect_status(tk_matrix_from_f32(&out, TK_DTYPE_BF16, 2, 4, dst, INT64_MAX / 3),
                      TK_EOVERFLOW);
    cr_assert_null(out);
    tk_matrix_destroy(m);
    tk_matrix_destroy(i32);
}
