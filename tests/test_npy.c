/* test_npy.c - tk_matrix_load_npy / tk_matrix_save_npy: round trips, the
 * header grammar, every rejection, and a light fuzz of truncations and
 * header byte flips. */
#include "tk_test.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Each test runs in its own process with its own directory. */
static char tdir[64];

static void setup(void)
{
    strcpy(tdir, "/tmp/tk_npy_XXXXXX");
    cr_assert_not_null(mkdtemp(tdir), "mkdtemp: %s", strerror(errno));
}

static void teardown(void)
{
    DIR *d = opendir(tdir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", tdir, e->d_name);
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            unlink(p);
    }
    closedir(d);
    rmdir(tdir);
}

TestSuite(npy, .init = setup, .fini = teardown);

static const char *path_of(const char *name)
{
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", tdir, name);
    return p;
}

/* Entries of the test's own directory, temporaries included. */
static int entries(void)
{
    DIR *d = opendir(tdir);
    cr_assert_not_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static void write_bytes(const char *path, const void *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(buf, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

/* Whole file into a malloc'd buffer; *n gets its size. */
static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    unsigned char *buf = NULL;
    size_t cap = 0;
    *n = 0;
    for (;;) {
        buf = realloc(buf, cap += 4096);
        cr_assert_not_null(buf);
        size_t got = fread(buf + *n, 1, cap - *n, f);
        *n += got;
        if (got == 0)
            break;
    }
    fclose(f);
    return buf;
}

/* A .npy image: preamble for `major`.0, the header text as given (no
 * padding added), then `data`.  Returns the size; buf must be big enough. */
static size_t npy_image(unsigned char *buf, int major, const char *header,
                        const void *data, size_t data_len)
{
    size_t h = strlen(header), at = 8;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    for (int i = 0; i < (major == 1 ? 2 : 4); i++)
        buf[at++] = (unsigned char)(h >> (8 * i));
    memcpy(buf + at, header, h);
    memcpy(buf + at + h, data, data_len);
    return at + h + data_len;
}

static void write_npy(const char *path, int major, const char *header,
                      const void *data, size_t data_len)
{
    unsigned char buf[4096];
    cr_assert_leq(strlen(header) + data_len + 12, sizeof buf);
    write_bytes(path, buf, npy_image(buf, major, header, data, data_len));
}

/* A non-NULL pointer that must come back as NULL after a failed load. */
static char sentinel;
#define SENTINEL ((tk_matrix *)(void *)&sentinel)

static void expect_load_fails(const char *path, int status, const char *needle)
{
    tk_matrix *m = SENTINEL;
    tkt_expect_status(tk_matrix_load_npy(&m, path), status);
    cr_assert_null(m, "%s: *out was not set to NULL", path);
    if (needle)
        cr_assert(strstr(tk_last_error_message(), needle),
                  "message \"%s\" lacks \"%s\"", tk_last_error_message(), needle);
}

/* ---- round trips ------------------------------------------------------- */

struct shape { int64_t rows, cols; };

static const struct shape shapes[] = {{1, 1}, {3, 5}, {17, 129}, {64, 1}, {1, 300}};

/* Save m, check the file layout, load it back and compare every bit. */
static void round_trip(const tk_matrix *m)
{
    const char *p = path_of("rt.npy");
    int64_t rows = tk_matrix_rows(m), cols = tk_matrix_cols(m);
    int64_t size = tk_dtype_size(tk_matrix_dtype(m));
    size_t row_bytes = (size_t)(cols * size);
    tkt_expect_status(tk_matrix_save_npy(m, p), TK_OK);

    size_t n;
    unsigned char *file = read_bytes(p, &n);
    cr_assert(memcmp(file, "\x93NUMPY\x01\x00", 8) == 0, "not a version 1.0 file");
    size_t data_at = 10 + (size_t)(file[8] | file[9] << 8);
    cr_assert_eq(data_at % 64, 0, "header ends at %zu, not a multiple of 64", data_at);
    cr_assert_eq(file[data_at - 1], '\n');
    cr_assert_eq(n, data_at + (size_t)rows * row_bytes);
    for (int64_t r = 0; r < rows; r++)
        cr_assert(memcmp(file + data_at + (size_t)r * row_bytes,
                         (const char *)tk_matrix_data(m) +
                             (size_t)(r * tk_matrix_row_stride(m) * size),
                         row_bytes) == 0, "row %lld differs in the file", (long long)r);
    free(file);

    tk_matrix *back = NULL;
    tkt_expect_status(tk_matrix_load_npy(&back, p), TK_OK);
    cr_assert_eq(tk_matrix_dtype(back), tk_matrix_dtype(m));
    cr_assert_eq(tk_matrix_rows(back), rows);
    cr_assert_eq(tk_matrix_cols(back), cols);
    cr_assert_eq(tk_matrix_row_stride(back), cols);
    for (int64_t r = 0; r < rows; r++)
        cr_assert(memcmp((const char *)tk_matrix_data(back) + (size_t)r * row_bytes,
                         (const char *)tk_matrix_data(m) +
                             (size_t)(r * tk_matrix_row_stride(m) * size),
                         row_bytes) == 0, "row %lld differs after loading", (long long)r);
    tk_matrix_destroy(back);
}

/* Random bits (specials included) in every element of an owned matrix. */
static tk_matrix *random_matrix(int dtype, struct shape s, uint64_t seed)
{
    tk_matrix *m = NULL;
    tkt_expect_status(tk_matrix_create(&m, dtype, s.rows, s.cols), TK_OK);
    unsigned char *d = tk_matrix_data(m);
    for (size_t i = 0; i < (size_t)(s.rows * s.cols * tk_dtype_size(dtype)); i++)
        d[i] = (unsigned char)tkt_next(&seed);
    return m;
}

Test(npy, round_trip_every_dtype_and_shape)
{
    const int dtypes[] = {TK_DTYPE_F32, TK_DTYPE_BF16, TK_DTYPE_I32};
    for (size_t d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            tk_matrix *m = random_matrix(dtypes[d], shapes[s], 7 * d + s);
            round_trip(m);
            tk_matrix_destroy(m);
        }
}

/* A borrowed matrix with row stride > cols saves its logical rows only. */
Test(npy, round_trip_strided_borrowed)
{
    const int dtypes[] = {TK_DTYPE_F32, TK_DTYPE_BF16, TK_DTYPE_I32};
    uint32_t buf[7 * 13];
    uint64_t seed = 42;
    for (size_t i = 0; i < sizeof buf / sizeof *buf; i++)
        buf[i] = (uint32_t)tkt_next(&seed);
    for (size_t d = 0; d < 3; d++) {
        tk_matrix *m = NULL;
        tkt_expect_status(tk_matrix_wrap(&m, dtypes[d], 7, 9, 13, buf), TK_OK);
        round_trip(m);
        tk_matrix_destroy(m);
    }
}

/* Versions 2.0 and 3.0 differ from 1.0 only in a 4-byte header length. */
Test(npy, loads_versions_1_2_and_3)
{
    float data[6];
    tkt_fill(data, 6, 3);
    for (int major = 1; major <= 3; major++) {
        const char *p = path_of("v.npy");
        write_npy(p, major, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n",
                  data, sizeof data);
        tk_matrix *m = NULL;
        tkt_expect_status(tk_matrix_load_npy(&m, p), TK_OK);
        cr_assert_eq(tk_matrix_rows(m), 2);
        cr_assert_eq(tk_matrix_cols(m), 3);
        cr_assert(memcmp(tk_matrix_data(m), data, sizeof data) == 0, "version %d", major);
        tk_matrix_destroy(m);
    }
}

/* ---- the header grammar ------------------------------------------------ */

struct accepted {
    const char *header;
    int dtype;
    int64_t rows, cols;
};

static const struct accepted accepted[] = {
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", TK_DTYPE_F32, 2, 3},
    {"{'shape': (2, 3), 'fortran_order': False, 'descr': '<i4'}", TK_DTYPE_I32, 2, 3},
    {"{\"descr\": \"<u2\", \"fortran_order\": False, \"shape\": (3, 2)}",
     TK_DTYPE_BF16, 3, 2},
    {"{'descr':'<V2','fortran_order':False,'shape':(1,6,)}", TK_DTYPE_BF16, 1, 6},
    {" \t{ 'descr' : '<f4' ,\n 'fortran_order' : False , 'shape' : ( 6 , 1 ) , } \r\n",
     TK_DTYPE_F32, 6, 1},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }", TK_DTYPE_F32, 2, 3},
};

Test(npy, header_grammar_accepts_what_python_reads)
{
    unsigned char data[24];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (unsigned char)(i * 37 + 1);
    for (size_t i = 0; i < sizeof accepted / sizeof *accepted; i++) {
        const struct accepted *a = &accepted[i];
        size_t bytes = (size_t)(a->rows * a->cols * tk_dtype_size(a->dtype));
        write_npy(path_of("g.npy"), 1, a->header, data, bytes);
        tk_matrix *m = NULL;
        int rc = tk_matrix_load_npy(&m, path_of("g.npy"));
        cr_assert_eq(rc, TK_OK, "header %s: %s", a->header, tk_last_error_message());
        cr_assert_eq(tk_matrix_dtype(m), a->dtype, "header %s", a->header);
        cr_assert_eq(tk_matrix_rows(m), a->rows, "header %s", a->header);
        cr_assert_eq(tk_matrix_cols(m), a->cols, "header %s", a->header);
        cr_assert(memcmp(tk_matrix_data(m), data, bytes) == 0, "header %s", a->header);
        tk_matrix_destroy(m);
    }
}

struct rejected {
    const char *header;
    int status;
    const char *needle;   /* expected in the message */
};

#define F32_2x3 "'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)"

static const struct rejected rejected[] = {
    {"{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3)}", TK_EFORMAT,
     "descr '>f4' is big-endian"},
    {"{'descr': '>u2', 'fortran_order': False, 'shape': (2, 3)}", TK_EFORMAT,
     "descr '>u2' is big-endian"},
    {"{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3)}", TK_EFORMAT,
     "descr '<f8' is not supported"},
    {"{'descr': '|V2', 'fortran_order': False, 'shape': (2, 3)}", TK_EFORMAT,
     "descr '|V2' is not supported"},
    {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 3)}", TK_EFORMAT,
     "expected a string for 'descr'"},
    {"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3)}", TK_EFORMAT,
     "fortran_order is True"},
    {"{'descr': '<f4', 'fortran_order': Truex, 'shape': (2, 3)}", TK_EFORMAT,
     "True or False"},
    {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3)}", TK_EFORMAT, "True or False"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (6,)}", TK_EFORMAT,
     "shape (6,) is 1-D"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': ()}", TK_EFORMAT,
     "shape () is 0-D"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3)}", TK_EFORMAT,
     "shape (1, 2, 3) is 3-D"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3)}", TK_ESHAPE,
     "shape (0, 3) is empty"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 0)}", TK_ESHAPE,
     "shape (2, 0) is empty"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (6)}", TK_EFORMAT,
     "expected ',' after the only dimension"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}", TK_EFORMAT,
     "expected ',' or ')'"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3)}", TK_EFORMAT,
     "expected a dimension"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (02, 3)}", TK_EFORMAT,
     "without leading zeros"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3,,)}", TK_EFORMAT,
     "expected a dimension"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}", TK_EFORMAT,
     "a tuple for 'shape'"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}",
     TK_EOVERFLOW, "too large"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999, 1)}",
     TK_EOVERFLOW, "does not fit in int64"},
    {"{'descr': '<f4', 'fortran_order': False}", TK_EFORMAT, "lacks the key 'shape'"},
    {"{'fortran_order': False, 'shape': (2, 3)}", TK_EFORMAT, "lacks the key 'descr'"},
    {"{'descr': '<f4', 'shape': (2, 3)}", TK_EFORMAT, "lacks the key 'fortran_order'"},
    {"{" F32_2x3 ", 'descr': '<f4'}", TK_EFORMAT, "repeats key 'descr'"},
    {"{" F32_2x3 ", 'extra': 1}", TK_EFORMAT, "unknown key 'extra'"},
    {"{" F32_2x3 ",,}", TK_EFORMAT, "expected a quoted key"},
    {"{" F32_2x3 "} x", TK_EFORMAT, "only white space after the header dict"},
    {"{" F32_2x3 "}}", TK_EFORMAT, "only white space after the header dict"},
    {"{" F32_2x3, TK_EFORMAT, "found end of header"},
    {"{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)}", TK_EFORMAT,
     "expected ',' or '}'"},
    {"{'descr' '<f4', 'fortran_order': False, 'shape': (2, 3)}", TK_EFORMAT,
     "expected ':'"},
    {"{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3)}", TK_EFORMAT,
     "expected ',' or '}'"},
    {"{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2, 3)}", TK_EFORMAT,
     "without escapes"},
    {"{'descr': '<f4", TK_EFORMAT, "a closing quote"},
    {"('descr', '<f4')", TK_EFORMAT, "'{' opening the header dict"},
    {"", TK_EFORMAT, "found end of header"},
};

Test(npy, header_grammar_rejects_with_a_message)
{
    float data[6] = {0};
    for (size_t i = 0; i < sizeof rejected / sizeof *rejected; i++) {
        const struct rejected *r = &rejected[i];
        write_npy(path_of("r.npy"), 1, r->header, data, sizeof data);
        tk_matrix *m = SENTINEL;
        int rc = tk_matrix_load_npy(&m, path_of("r.npy"));
        cr_assert_eq(rc, r->status, "header %s: %s, expected %s (%s)", r->header,
                     tk_status_name(rc), tk_status_name(r->status),
                     tk_last_error_message());
        cr_assert_null(m, "header %s", r->header);
        cr_assert(strstr(tk_last_error_message(), r->needle),
                  "header %s: message \"%s\" lacks \"%s\"", r->header,
                  tk_last_error_message(), r->needle);
        cr_assert(strstr(tk_last_error_message(), path_of("r.npy")),
                  "message \"%s\" does not name the path", tk_last_error_message());
    }
}

/* A NUL, control or non-ASCII byte inside the header is a syntax error. */
Test(npy, header_with_nul_or_non_ascii_bytes)
{
    const struct { const char *tmpl; unsigned char byte; const char *needle; } cases[] = {
        {"{'descr': '<f#', 'fortran_order': False, 'shape': (1, 1)}", 0x00, "without escapes"},
        {"{'descr': '<f#', 'fortran_order': False, 'shape': (1, 1)}", 0xC3, "without escapes"},
        {"{'descr': '<f4',#'fortran_order': False, 'shape': (1, 1)}", 0x00,
         "expected a quoted key or '}', found byte 0x00"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1)}#", 0x0B,
         "found byte 0x0b"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char header[128];
        strcpy(header, cases[i].tmpl);
        size_t n = strlen(header);
        *strchr(header, '#') = (char)cases[i].byte;
        unsigned char buf[256] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)n, 0};
        memcpy(buf + 10, header, n);
        write_bytes(path_of("nul.npy"), buf, 10 + n + 4);   /* 4 zero data bytes */
        expect_load_fails(path_of("nul.npy"), TK_EFORMAT, cases[i].needle);
    }
}

/* ---- preamble, sizes, files -------------------------------------------- */

Test(npy, rejects_bad_magic_and_versions)
{
    float data[6] = {0};
    unsigned char buf[256];
    const char *h = "{" F32_2x3 "}\n";
    size_t n = npy_image(buf, 1, h, data, sizeof data);
    const char *p = path_of("m.npy");

    buf[1] = 'n';   /* "\x93nUMPY" */
    write_bytes(p, buf, n);
    expect_load_fails(p, TK_EFORMAT, "not a .npy file");
    buf[1] = 'N';

    for (int v = 0; v < 3; v++) {
        const unsigned char major[] = {0, 4, 1}, minor[] = {0, 0, 1};
        buf[6] = major[v];
        buf[7] = minor[v];
        write_bytes(p, buf, n);
        char needle[64];
        snprintf(needle, sizeof needle, "version %u.%u is not supported", major[v],
                 minor[v]);
        expect_load_fails(p, TK_EFORMAT, needle);
    }
}

Test(npy, rejects_header_longer_than_the_limit)
{
    unsigned char buf[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0, 0, 0x10, 0};
    write_bytes(path_of("big.npy"), buf, sizeof buf);   /* claims 1 MiB */
    expect_load_fails(path_of("big.npy"), TK_EFORMAT, "truncated");
    buf[10] = 0x20;                                      /* 2 MiB */
    write_bytes(path_of("big.npy"), buf, sizeof buf);
    expect_load_fails(path_of("big.npy"), TK_EFORMAT, "header length 2097152 exceeds");
}

Test(npy, rejects_truncated_and_oversized_data)
{
    float data[7];
    tkt_fill(data, 7, 9);
    const char *h = "{" F32_2x3 "}\n";
    write_npy(path_of("short.npy"), 1, h, data, 6 * sizeof(float) - 1);
    expect_load_fails(path_of("short.npy"), TK_EFORMAT, "needs 24 data bytes, only 23");
    write_npy(path_of("long.npy"), 1, h, data, 6 * sizeof(float) + 1);
    expect_load_fails(path_of("long.npy"), TK_EFORMAT, "has 1 bytes after the 24");
    write_npy(path_of("long.npy"), 2, h, data, 7 * sizeof(float));
    expect_load_fails(path_of("long.npy"), TK_EFORMAT, "has 4 bytes after the 24");
}

Test(npy, missing_file_and_directory_are_io_errors)
{
    expect_load_fails(path_of("absent.npy"), TK_EIO, strerror(ENOENT));
    expect_load_fails(tdir, TK_EIO, strerror(EISDIR));
}

Test(npy, null_arguments)
{
    tk_matrix *m = SENTINEL;
    tkt_expect_status(tk_matrix_load_npy(NULL, path_of("x.npy")), TK_EINVAL);
    tkt_expect_status(tk_matrix_load_npy(&m, NULL), TK_EINVAL);
    cr_assert_null(m);

    tk_matrix *a = NULL;
    tkt_expect_status(tk_matrix_create(&a, TK_DTYPE_F32, 2, 2), TK_OK);
    tkt_expect_status(tk_matrix_save_npy(NULL, path_of("x.npy")), TK_EINVAL);
    tkt_expect_status(tk_matrix_save_npy(a, NULL), TK_EINVAL);
    cr_assert_eq(access(path_of("x.npy"), F_OK), -1, "a failed save created a file");
    tk_matrix_destroy(a);
}

Test(npy, failed_saves_are_io_errors_naming_path_and_cause)
{
    tk_matrix *a = NULL;
    tkt_expect_status(tk_matrix_create(&a, TK_DTYPE_BF16, 3, 3), TK_OK);
    tkt_expect_status(tk_matrix_save_npy(a, path_of("no/such/dir.npy")), TK_EIO);
    cr_assert(strstr(tk_last_error_message(), "no/such/dir.npy"));
    cr_assert(strstr(tk_last_error_message(), strerror(ENOENT)),
              "%s", tk_last_error_message());
    tkt_expect_status(tk_matrix_save_npy(a, tdir), TK_EIO);
    cr_assert(strstr(tk_last_error_message(), "is not a regular file (a directory)"),
              "%s", tk_last_error_message());
    tk_matrix_destroy(a);
}

/* A target the caller may not write is refused as open(O_WRONLY) would
 * refuse it, though renaming over it needs only the directory (run as
 * nobody in a child where the test runs as root, whom no permission stops);
 * a name of 250 bytes takes a temporary under NAME_MAX; an empty path is
 * named. */
Test(npy, a_read_only_file_is_kept_a_long_name_saved_an_empty_path_named)
{
    tk_matrix *a = NULL;
    tkt_expect_status(tk_matrix_create(&a, TK_DTYPE_F32, 2, 2), TK_OK);
    memset(tk_matrix_data(a), 0, 16);
    char name[251];
    memset(name, 'n', 250);
    name[250] = '\0';
    tkt_expect_status(tk_matrix_save_npy(a, path_of(name)), TK_OK);
    tkt_expect_status(tk_matrix_save_npy(a, ""), TK_EIO);
    cr_assert(strstr(tk_last_error_message(), "the path is empty"), "%s",
              tk_last_error_message());
    const char *ro = path_of("ro.npy");
    FILE *f = fopen(ro, "w");
    fputs("old", f);
    fclose(f);
    cr_assert_eq(chmod(ro, 0444), 0);
    cr_assert_eq(chmod(tdir, 0777), 0);
    pid_t pid = fork();
    if (pid == 0) {
        if (geteuid() == 0 && (setgid(65534) || setuid(65534)))
            _exit(2);
        int rc = tk_matrix_save_npy(a, ro);
        _exit(rc == TK_EIO && strstr(tk_last_error_message(), "is not writable") ? 0 : 1);
    }
    int status = -1;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    char text[8] = {0};
    f = fopen(ro, "r");
    cr_assert(f && fgets(text, sizeof text, f) && !strcmp(text, "old"));
    fclose(f);
    cr_assert_eq(entries(), 2, "a temporary remains");
    tk_matrix_destroy(a);
}

/* Only a regular file, or a missing one, is replaced: a device is refused
 * and stays what it was. */
Test(npy, a_device_is_refused_not_replaced)
{
    tk_matrix *a = NULL;
    tkt_expect_status(tk_matrix_create(&a, TK_DTYPE_F32, 64, 64), TK_OK);
    tkt_expect_status(tk_matrix_save_npy(a, "/dev/null"), TK_EIO);
    cr_assert(strstr(tk_last_error_message(), "\"/dev/null\" is not a regular file (a device)"),
              "%s", tk_last_error_message());
    struct stat st;
    cr_assert(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode), "/dev/null was replaced");
    tk_matrix_destroy(a);
}

/* Eight threads saving one path: every save succeeds (each has its own
 * temporary) and the file left is one whole save.  The path is made once,
 * before the threads start: path_of's buffer is not for sharing. */
static tk_matrix *shared;

static void *save_often(void *path)
{
    for (int i = 0; i < 50; i++)
        if (tk_matrix_save_npy(shared, path) != TK_OK)
            return (void *)1;
    return NULL;
}

Test(npy, concurrent_saves_of_one_path_all_succeed)
{
    tkt_expect_status(tk_matrix_create(&shared, TK_DTYPE_F32, 16, 16), TK_OK);
    memset(tk_matrix_data(shared), 0, 16 * 16 * 4);
    char path[512];
    snprintf(path, sizeof path, "%s", path_of("race.npy"));
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, save_often, path), 0);
    for (int i = 0; i < 8; i++) {
        void *failed;
        pthread_join(t[i], &failed);
        cr_assert_null(failed, "a concurrent save failed");
    }
    tk_matrix *back = NULL;
    tkt_expect_status(tk_matrix_load_npy(&back, path), TK_OK);
    cr_assert_eq(tk_matrix_rows(back), 16);
    tk_matrix_destroy(back);
    tk_matrix_destroy(shared);
}

/* The files next to the target: how many names start with base. */
/* A save that fails midway (RLIMIT_FSIZE: EFBIG) leaves the old file byte
 * for byte and no temporary; neither a planted symlink nor an unrelated
 * file at the old fixed name "<path>.tmp" is touched. */
Test(npy, failed_write_removes_the_partial_file)
{
    tk_matrix *small = NULL;
    tkt_expect_status(tk_matrix_create(&small, TK_DTYPE_F32, 1, 2), TK_OK);
    memset(tk_matrix_data(small), 0, 8);
    tkt_expect_status(tk_matrix_save_npy(small, path_of("part.npy")), TK_OK);
    FILE *f = fopen(path_of("part.npy"), "rb");
    unsigned char before[256];
    size_t nb = fread(before, 1, sizeof before, f);
    fclose(f);
    FILE *other = fopen(path_of("part.npy.tmp"), "w");
    fputs("unrelated", other);
    fclose(other);
    tk_matrix_destroy(small);
    signal(SIGXFSZ, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 100;
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0, "%s", strerror(errno));
    tk_matrix *a = NULL;
    tkt_expect_status(tk_matrix_create(&a, TK_DTYPE_F32, 64, 64), TK_OK);
    int rc = tk_matrix_save_npy(a, path_of("part.npy"));
    setrlimit(RLIMIT_FSIZE, &old);
    cr_assert_eq(rc, TK_EIO, "%s", tk_status_name(rc));
    cr_assert(strstr(tk_last_error_message(), strerror(EFBIG)), "%s",
              tk_last_error_message());
    f = fopen(path_of("part.npy"), "rb");
    unsigned char after[256];
    size_t na = fread(after, 1, sizeof after, f);
    fclose(f);
    cr_assert(na == nb && !memcmp(before, after, nb), "the old file changed");
    cr_assert_eq(entries(), 2, "a temporary remains next to part.npy");
    other = fopen(path_of("part.npy.tmp"), "r");
    char text[16] = {0};
    cr_assert(other && fgets(text, sizeof text, other) && !strcmp(text, "unrelated"));
    fclose(other);
    tk_matrix_destroy(a);
}

/* A FIFO has no size to check up front: truncation and trailing bytes are
 * found while reading. */
static int load_through_fifo(const unsigned char *bytes, size_t n, tk_matrix **m)
{
    const char *p = path_of("fifo");
    unlink(p);
    cr_assert_eq(mkfifo(p, 0600), 0, "mkfifo: %s", strerror(errno));
    pid_t child = fork();
    cr_assert_geq(child, 0);
    if (child == 0) {
        FILE *f = fopen(p, "wb");
        size_t w = f ? fwrite(bytes, 1, n, f) : 0;
        _exit(f && w == n && fclose(f) == 0 ? 0 : 1);
    }
    int rc = tk_matrix_load_npy(m, p);
    int st;
    cr_assert_eq(waitpid(child, &st, 0), child);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the FIFO writer failed");
    return rc;
}

Test(npy, loads_from_a_fifo)
{
    float data[7];
    tkt_fill(data, 7, 13);
    unsigned char buf[256];
    size_t n = npy_image(buf, 1, "{" F32_2x3 "}\n", data, sizeof data);
    tk_matrix *m = NULL;
    tkt_expect_status(load_through_fifo(buf, n - 4, &m), TK_OK);
    cr_assert(memcmp(tk_matrix_data(m), data, 6 * sizeof(float)) == 0);
    tk_matrix_destroy(m);

    m = SENTINEL;
    tkt_expect_status(load_through_fifo(buf, n, &m), TK_EFORMAT);
    cr_assert_null(m);
    cr_assert(strstr(tk_last_error_message(), "bytes after the 24 data bytes"), "%s",
              tk_last_error_message());
    m = SENTINEL;
    tkt_expect_status(load_through_fifo(buf, n - 5, &m), TK_EFORMAT);
    cr_assert_null(m);
    cr_assert(strstr(tk_last_error_message(), "needs 24 bytes, only 23 present"), "%s",
              tk_last_error_message());
}

/* ---- light fuzz --------------------------------------------------------- */

/* Every proper prefix of a valid file fails cleanly. */
Test(npy, fuzz_every_truncation_fails)
{
    tk_matrix *m = random_matrix(TK_DTYPE_BF16, (struct shape){3, 5}, 11);
    const char *p = path_of("full.npy");
    tkt_expect_status(tk_matrix_save_npy(m, p), TK_OK);
    tk_matrix_destroy(m);
    size_t n;
    unsigned char *file = read_bytes(p, &n);
    for (size_t len = 0; len < n; len++) {
        write_bytes(path_of("cut.npy"), file, len);
        tk_matrix *out = SENTINEL;
        int rc = tk_matrix_load_npy(&out, path_of("cut.npy"));
        cr_assert_eq(rc, TK_EFORMAT, "prefix of %zu bytes: %s", len, tk_status_name(rc));
        cr_assert_null(out, "prefix of %zu bytes", len);
        cr_assert(tk_last_error_message()[0], "prefix of %zu bytes: no message", len);
    }
    free(file);
}

/* Byte flips in the preamble and header: a load either fails cleanly or
 * gives a matrix that the file's size accounts for. */
Test(npy, fuzz_header_byte_flips)
{
    tk_matrix *m = random_matrix(TK_DTYPE_F32, (struct shape){2, 3}, 5);
    const char *p = path_of("full.npy");
    tkt_expect_status(tk_matrix_save_npy(m, p), TK_OK);
    tk_matrix_destroy(m);
    size_t n;
    unsigned char *file = read_bytes(p, &n);
    const size_t header_end = n - 6 * sizeof(float);
    const unsigned char values[] = {0x00, ' ', '\n', '9', '0', ',', ')', '\'', 0xFF};
    int failed = 0, tried = 0;
    for (size_t at = 0; at < header_end; at++)
        for (size_t v = 0; v < sizeof values + 3; v++) {
            unsigned char keep = file[at];
            /* A few chosen bytes, then three single-bit flips. */
            file[at] = v < sizeof values ? values[v] : keep ^ (unsigned char)(1u << (v * 3 % 8));
            if (file[at] == keep)
                continue;
            write_bytes(path_of("flip.npy"), file, n);
            file[at] = keep;
            tk_matrix *out = SENTINEL;
            int rc = tk_matrix_load_npy(&out, path_of("flip.npy"));
            tried++;
            if (rc == TK_OK) {
                cr_assert_geq(at, 6, "a flipped magic byte %zu loaded", at);
                size_t bytes = (size_t)(tk_matrix_rows(out) * tk_matrix_cols(out) *
                                        tk_dtype_size(tk_matrix_dtype(out)));
                cr_assert_eq(bytes, 6 * sizeof(float), "byte %zu: a %lldx%lld load", at,
                             (long long)tk_matrix_rows(out), (long long)tk_matrix_cols(out));
                tk_matrix_destroy(out);
                continue;
            }
            failed++;
            cr_assert_null(out, "byte %zu value %zu", at, v);
            cr_assert(tk_last_error_message()[0], "byte %zu value %zu: no message", at, v);
            cr_assert(rc == TK_EFORMAT || rc == TK_ESHAPE || rc == TK_EOVERFLOW,
                      "byte %zu: %s", at, tk_status_name(rc));
        }
    /* Only padding and white space tolerate a change. */
    cr_assert_gt(failed, tried / 2, "%d of %d mutations failed", failed, tried);
    free(file);
}

/* The same from a working directory deeper than PATH_MAX, where realpath
 * fails though the link can be followed: the link stays (it was replaced
 * by the file when the writer resolved links with realpath). */
Test(npy, a_save_through_a_symlink_from_a_deep_directory_keeps_the_link)
{
    char name[201];
    memset(name, 'd', 200);
    name[200] = '\0';
    cr_assert_eq(chdir(tdir), 0, "%s", strerror(errno));
    enum { DEPTH = 25 };   /* 25 x 201 bytes: past PATH_MAX (4096) */
    for (int i = 0; i < DEPTH; i++) {
        cr_assert_eq(mkdir(name, 0700), 0, "%s", strerror(errno));
        cr_assert_eq(chdir(name), 0, "%s", strerror(errno));
    }
    tk_matrix *m = NULL, *back = NULL;
    tkt_expect_status(tk_matrix_create(&m, TK_DTYPE_F32, 1, 2), TK_OK);
    float *d = tk_matrix_data(m);
    d[0] = 1.5f, d[1] = -2.0f;
    cr_assert_eq(symlink("named.npy", "link.npy"), 0, "%s", strerror(errno));
    for (int i = 0; i < 2; i++) {   /* the file is created, then replaced */
        d[0] = (float)i;
        tkt_expect_status(tk_matrix_save_npy(m, "link.npy"), TK_OK);
        struct stat st;
        cr_assert_eq(lstat("link.npy", &st), 0);
        cr_assert(S_ISLNK(st.st_mode), "save %d replaced the link", i);
        tkt_expect_status(tk_matrix_load_npy(&back, "named.npy"), TK_OK);
        cr_assert_eq(memcmp(tk_matrix_data(back), d, sizeof(float) * 2), 0);
        tk_matrix_destroy(back);
    }
    tk_matrix_destroy(m);
    unlink("link.npy");
    unlink("named.npy");
    for (int i = 0; i < DEPTH; i++) {
        cr_assert_eq(chdir(".."), 0, "%s", strerror(errno));
        cr_assert_eq(rmdir(name), 0, "%s", strerror(errno));
    }
}

/* Through a symlink the file it names is written, and the link stays: also
 * when that file does not exist yet (a dangling link, followed link by
 * link, relative to the link's own directory), as open(O_CREAT) does. */
Test(npy, a_save_through_a_symlink_writes_the_file_it_names)
{
    tk_matrix *m = NULL, *back = NULL;
    tkt_expect_status(tk_matrix_create(&m, TK_DTYPE_F32, 2, 3), TK_OK);
    float *d = tk_matrix_data(m);
    for (int i = 0; i < 6; i++)
        d[i] = (float)i - 2.5f;
    static const char *links[][2] = {{"dangling.npy", "named.npy"},
                                     {"first.npy", "second.npy"},
                                     {"second.npy", "end.npy"},
                                     {"to_named.npy", "named.npy"}};
    for (int i = 0; i < 4; i++) {
        char link[512];
        snprintf(link, sizeof link, "%s", path_of(links[i][0]));
        cr_assert_eq(symlink(links[i][1], link), 0, "%s", strerror(errno));
    }
    /* named.npy is created through dangling.npy, then written through to_named.npy;
     * end.npy through two links. */
    const char *via[] = {"dangling.npy", "to_named.npy", "first.npy"};
    const char *file[] = {"named.npy", "named.npy", "end.npy"};
    for (int i = 0; i < 3; i++) {
        d[0] = (float)i;
        tkt_expect_status(tk_matrix_save_npy(m, path_of(via[i])), TK_OK);
        struct stat st;
        cr_assert_eq(lstat(path_of(via[i]), &st), 0);
        cr_assert(S_ISLNK(st.st_mode), "%s is no longer a link", via[i]);
        cr_assert_eq(lstat(path_of(file[i]), &st), 0, "%s: %s", file[i], strerror(errno));
        cr_assert(S_ISREG(st.st_mode));
        tkt_expect_status(tk_matrix_load_npy(&back, path_of(file[i])), TK_OK);
        cr_assert_eq(memcmp(tk_matrix_data(back), d, sizeof(float) * 6), 0);
        tk_matrix_destroy(back);
    }
    struct stat st;
    cr_assert_eq(lstat(path_of("second.npy"), &st), 0);
    cr_assert(S_ISLNK(st.st_mode), "the middle link stays");
    /* A link whose target, joined to its directory, is too long to follow
     * is refused: replacing the link would be the old bug. */
    static char far[4096];
    size_t len = 0;
    while (len < 4084)   /* 4089 bytes: a link's own limit is 4095 */
        len += (size_t)snprintf(far + len, sizeof far - len, "./");
    snprintf(far + len, sizeof far - len, "t.npy");
    cr_assert_eq(symlink(far, path_of("far.npy")), 0, "%s", strerror(errno));
    tkt_expect_status(tk_matrix_save_npy(m, path_of("far.npy")), TK_EIO);
    cr_assert(strstr(tk_last_error_message(), "cannot follow the symlink"), "%s",
              tk_last_error_message());
    cr_assert_eq(lstat(path_of("far.npy"), &st), 0);
    cr_assert(S_ISLNK(st.st_mode), "a link too long to follow was replaced");
    /* 40 links are followed, as the kernel follows them; 41 are a loop to it. */
    for (int chain = 40; chain <= 41; chain++) {
        char name[64], next[64];
        for (int i = 0; i < chain; i++) {
            snprintf(name, sizeof name, "c%d_%d.npy", chain, i);
            snprintf(next, sizeof next, "c%d_%d.npy", chain, i + 1);
            cr_assert_eq(symlink(next, path_of(name)), 0, "%s", strerror(errno));
        }
        snprintf(name, sizeof name, "c%d_0.npy", chain);
        snprintf(next, sizeof next, "c%d_%d.npy", chain, chain);
        tkt_expect_status(tk_matrix_save_npy(m, path_of(name)), chain == 40 ? TK_OK : TK_EIO);
        cr_assert_eq(lstat(path_of(next), &st) == 0, chain == 40, "chain of %d", chain);
    }
    tk_matrix_destroy(m);
}
