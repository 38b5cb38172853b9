/* npy.c - tk_matrix <-> NumPy .npy files (format versions 1.0, 2.0, 3.0).
 *
 * A .npy file is the magic "\x93NUMPY", a major and minor version byte, the
 * header length (2 bytes little-endian in 1.0, 4 bytes in 2.0 and 3.0), a
 * Python dict literal with the keys 'descr', 'fortran_order' and 'shape',
 * then the raw array data.  Only 2-D, C-order, little-endian float32, int32
 * and bfloat16 (as uint16 bits or a 2-byte void) arrays are accepted. */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The data is read into and written from the matrix bytes unchanged. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c stores .npy data as-is: little-endian hosts only"
#endif

#define TK__NPY_MAGIC "\x93NUMPY"
#define TK__NPY_PREAMBLE 8                 /* magic + 2 version bytes */
#define TK__NPY_MAX_HEADER (1ul << 20)     /* larger headers are refused */
#define TK__NPY_ALIGN 64                   /* numpy's header alignment */
#define TK__NPY_SUPPORTED "'<f4', '<i4', '<u2' and '<V2' (bf16), '<f2', '<V1' " \
    "(float8_e4m3fn) and '<f1' (float8_e5m2)"

static const struct {
    const char *descr;
    int dtype;
} tk__npy_descrs[] = {
    {"<f4", TK_DTYPE_F32},
    {"<i4", TK_DTYPE_I32},
    {"<u2", TK_DTYPE_BF16},   /* first match is what tk_matrix_save_npy writes */
    {"<V2", TK_DTYPE_BF16},   /* what ml_dtypes.bfloat16 arrays save as */
    {"<f2", TK_DTYPE_F16},
    /* ml_dtypes saves float8_e4m3fn as '<V1' (numpy reads it back as '|V1'),
     * as it does its other one-byte types: such a file is taken as the one
     * tilekern has.  float8_e5m2 alone saves as '<f1'. */
    {"<V1", TK_DTYPE_F8E4M3FN},
    {"|V1", TK_DTYPE_F8E4M3FN},
    {"<f1", TK_DTYPE_F8E5M2},
    {"|f1", TK_DTYPE_F8E5M2},
};

/* ---- header parser -------------------------------------------------- */

typedef struct {
    const char *path;
    const char *start, *p, *end;   /* header text; p is the cursor */
} tk__npy_parser;

typedef struct {
    const char *descr;        /* span inside the header text */
    size_t descr_len;
    int fortran;              /* -1 until the key is seen */
    const char *shape;        /* tuple text, quoted in messages */
    size_t shape_len;
    int ndim;                 /* -1 until the key is seen */
    int64_t dims[2];          /* the first two dimensions */
} tk__npy_header;

static int tk__npy_syntax(const tk__npy_parser *ps, const char *expected)
{
    char found[16];
    if (ps->p == ps->end)
        snprintf(found, sizeof found, "end of header");
    else if (*ps->p >= 0x20 && *ps->p < 0x7F)
        snprintf(found, sizeof found, "'%c'", *ps->p);
    else
        snprintf(found, sizeof found, "byte 0x%02x", (unsigned)(unsigned char)*ps->p);
    return tk__fail(TK_EFORMAT, "%s: malformed .npy header at header byte %td: "
                    "expected %s, found %s", ps->path, ps->p - ps->start,
                    expected, found);
}

static void tk__npy_skip_space(tk__npy_parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' ||
                               *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

/* Skip white space, then consume c if it is next. */
static bool tk__npy_accept(tk__npy_parser *ps, char c)
{
    tk__npy_skip_space(ps);
    if (ps->p < ps->end && *ps->p == c) {
        ps->p++;
        return true;
    }
    return false;
}

/* A quoted string without escapes: 'x' or "x". */
static int tk__npy_string(tk__npy_parser *ps, const char *expected,
                          const char **s, size_t *n)
{
    tk__npy_skip_space(ps);
    if (ps->p == ps->end || (*ps->p != '\'' && *ps->p != '"'))
        return tk__npy_syntax(ps, expected);
    char quote = *ps->p++;
    const char *begin = ps->p;
    while (ps->p < ps->end && *ps->p != quote) {
        if (*ps->p < 0x20 || *ps->p >= 0x7F || *ps->p == '\\')
            return tk__npy_syntax(ps, "a printable character without escapes");
        ps->p++;
    }
    if (ps->p == ps->end)
        return tk__npy_syntax(ps, "a closing quote");
    *s = begin;
    *n = (size_t)(ps->p - begin);
    ps->p++;
    return TK_OK;
}

static bool tk__npy_word(tk__npy_parser *ps, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return false;
    /* "Truex" is an identifier, not True. */
    const char *after = ps->p + n;
    if (after < ps->end && (*after == '_' || (*after >= '0' && *after <= '9') ||
                            ((*after | 0x20) >= 'a' && (*after | 0x20) <= 'z')))
        return false;
    ps->p = after;
    return true;
}

static int tk__npy_bool(tk__npy_parser *ps, int *v)
{
    tk__npy_skip_space(ps);
    if (tk__npy_word(ps, "True"))
        *v = 1;
    else if (tk__npy_word(ps, "False"))
        *v = 0;
    else
        return tk__npy_syntax(ps, "True or False for 'fortran_order'");
    return TK_OK;
}

/* A non-negative decimal integer as Python writes it (no leading zeros), with
 * the 'L' suffix that numpy wrote under Python 2 accepted. */
static int tk__npy_int(tk__npy_parser *ps, int64_t *v)
{
    tk__npy_skip_space(ps);
    const char *begin = ps->p;
    int64_t x = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        if (!tk__mul(x, 10, &x) || !tk__add(x, *ps->p - '0', &x))
            return tk__fail(TK_EOVERFLOW, "%s: .npy shape dimension %.*s... "
                            "does not fit in int64", ps->path,
                            (int)(ps->p - begin + 1), begin);
        ps->p++;
    }
    if (ps->p == begin)
        return tk__npy_syntax(ps, "a dimension (non-negative integer)");
    if (*begin == '0' && ps->p - begin > 1) {
        ps->p = begin;
        return tk__npy_syntax(ps, "a dimension without leading zeros");
    }
    if (ps->p < ps->end && (*ps->p == 'L' || *ps->p == 'l'))
        ps->p++;
    *v = x;
    return TK_OK;
}

/* A tuple of dimensions: (), (n,), (n, m), (n, m,), ... */
static int tk__npy_shape(tk__npy_parser *ps, tk__npy_header *h)
{
    int rc;
    bool comma = false;
    tk__npy_skip_space(ps);
    h->shape = ps->p;
    if (!tk__npy_accept(ps, '('))
        return tk__npy_syntax(ps, "a tuple for 'shape'");
    h->ndim = 0;
    if (!tk__npy_accept(ps, ')'))
        for (;;) {
            int64_t d = 0;
            if ((rc = tk__npy_int(ps, &d)))
                return rc;
            if (h->ndim < 2)
                h->dims[h->ndim] = d;
            h->ndim++;   /* cannot overflow: each dimension takes 2+ bytes */
            comma = tk__npy_accept(ps, ',');
            if (tk__npy_accept(ps, ')'))
                break;
            if (!comma)
                return tk__npy_syntax(ps, "',' or ')' in 'shape'");
        }
    /* (n) is a parenthesized integer in Python, not a tuple. */
    if (h->ndim == 1 && !comma) {
        ps->p--;
        return tk__npy_syntax(ps, "',' after the only dimension of 'shape'");
    }
    h->shape_len = (size_t)(ps->p - h->shape);
    return TK_OK;
}

static bool tk__npy_is(const char *s, size_t n, const char *word)
{
    return strlen(word) == n && memcmp(s, word, n) == 0;
}

/* { 'descr': str, 'fortran_order': bool, 'shape': tuple } in any order, each
 * key exactly once, an optional trailing comma, then only white space. */
static int tk__npy_dict(tk__npy_parser *ps, tk__npy_header *h)
{
    int rc;
    h->descr = NULL;
    h->fortran = -1;
    h->ndim = -1;
    if (!tk__npy_accept(ps, '{'))
        return tk__npy_syntax(ps, "'{' opening the header dict");
    while (!tk__npy_accept(ps, '}')) {
        const char *key;
        size_t n;
        if ((rc = tk__npy_string(ps, "a quoted key or '}'", &key, &n)))
            return rc;
        if (!tk__npy_accept(ps, ':'))
            return tk__npy_syntax(ps, "':' after a key");
        bool dup;
        if (tk__npy_is(key, n, "descr")) {
            dup = h->descr != NULL;
            rc = tk__npy_string(ps, "a string for 'descr'", &h->descr, &h->descr_len);
        } else if (tk__npy_is(key, n, "fortran_order")) {
            dup = h->fortran >= 0;
            rc = tk__npy_bool(ps, &h->fortran);
        } else if (tk__npy_is(key, n, "shape")) {
            dup = h->ndim >= 0;
            rc = tk__npy_shape(ps, h);
        } else {
            return tk__fail(TK_EFORMAT, "%s: .npy header has unknown key '%.*s' "
                            "(only 'descr', 'fortran_order' and 'shape' are allowed)",
                            ps->path, (int)(n < 40 ? n : 40), key);
        }
        if (rc)
            return rc;
        if (dup)
            return tk__fail(TK_EFORMAT, "%s: .npy header repeats key '%.*s'",
                            ps->path, (int)n, key);
        if (tk__npy_accept(ps, ','))
            continue;
        if (tk__npy_accept(ps, '}'))
            break;
        return tk__npy_syntax(ps, "',' or '}' after a value");
    }
    tk__npy_skip_space(ps);
    if (ps->p != ps->end)
        return tk__npy_syntax(ps, "only white space after the header dict");
    const char *missing = !h->descr ? "descr" : h->fortran < 0 ? "fortran_order"
                        : h->ndim < 0 ? "shape" : NULL;
    if (missing)
        return tk__fail(TK_EFORMAT, "%s: .npy header lacks the key '%s'", ps->path,
                        missing);
    return TK_OK;
}

/* What the header says must be a 2-D, C-order array of a supported dtype
 * with no zero dimension. */
static int tk__npy_check(const char *path, const tk__npy_header *h, int *dtype)
{
    for (size_t i = 0; i < sizeof tk__npy_descrs / sizeof *tk__npy_descrs; i++)
        if (tk__npy_is(h->descr, h->descr_len, tk__npy_descrs[i].descr))
            *dtype = tk__npy_descrs[i].dtype;
    int n = (int)(h->descr_len < 40 ? h->descr_len : 40);
    if (!*dtype && h->descr_len && h->descr[0] == '>')
        return tk__fail(TK_EFORMAT, "%s: descr '%.*s' is big-endian; only little-endian "
                        TK__NPY_SUPPORTED " are supported", path, n, h->descr);
    if (!*dtype)
        return tk__fail(TK_EFORMAT, "%s: descr '%.*s' is not supported; only "
                        TK__NPY_SUPPORTED " are", path, n, h->descr);
    if (h->fortran)
        return tk__fail(TK_EFORMAT, "%s: fortran_order is True; only C-order "
                        "(row-major) arrays are supported", path);
    int shape_len = (int)(h->shape_len < 80 ? h->shape_len : 80);
    if (h->ndim != 2)
        return tk__fail(TK_EFORMAT, "%s: shape %.*s is %d-D; only 2-D arrays are "
                        "supported", path, shape_len, h->shape, h->ndim);
    if (h->dims[0] == 0 || h->dims[1] == 0)
        return tk__fail(TK_ESHAPE, "%s: shape %.*s is empty; a tk_matrix has at least "
                        "one row and one column", path, shape_len, h->shape);
    return TK_OK;
}

/* ---- loading -------------------------------------------------------- */

/* Read exactly n bytes: TK_EIO on a read error, TK_EFORMAT when the file
 * ends first. */
static int tk__npy_read(FILE *f, void *buf, size_t n, const char *path,
                        const char *what)
{
    size_t got = fread(buf, 1, n, f);
    if (got == n)
        return TK_OK;
    if (ferror(f))
        return tk__fail(TK_EIO, "%s: read error in the %s: %s", path, what,
                        strerror(errno));
    return tk__fail(TK_EFORMAT, "%s: truncated .npy file: the %s needs %zu bytes, "
                    "only %zu present", path, what, n, got);
}

/* Everything after the magic check: the header, the checks on it, the data. */
static int tk__npy_load(FILE *f, const char *path, const unsigned char *pre,
                        tk_matrix **out)
{
    unsigned char len[4];
    size_t len_size = pre[6] == 1 ? 2 : 4;
    int rc = tk__npy_read(f, len, len_size, path, "header length");
    if (rc)
        return rc;
    size_t hlen = (size_t)len[0] | (size_t)len[1] << 8;
    if (len_size == 4)
        hlen |= (size_t)len[2] << 16 | (size_t)len[3] << 24;
    if (hlen > TK__NPY_MAX_HEADER)
        return tk__fail(TK_EFORMAT, "%s: .npy header length %zu exceeds the limit "
                        "of %lu bytes", path, hlen, TK__NPY_MAX_HEADER);

    char *text = malloc(hlen ? hlen : 1);
    if (!text)
        return tk__fail(TK_ENOMEM, "%s: out of memory for a %zu-byte header", path,
                        hlen);
    tk__npy_header h;
    tk__npy_parser ps = {path, text, text, text + hlen};
    int dtype = 0;
    if (!(rc = tk__npy_read(f, text, hlen, path, "header")) &&
        !(rc = tk__npy_dict(&ps, &h)))
        rc = tk__npy_check(path, &h, &dtype);
    free(text);   /* h's spans point into text: no use of them below */
    if (rc)
        return rc;

    int64_t rows = h.dims[0], cols = h.dims[1];
    size_t bytes;
    if ((rc = tk__bytes("tk_matrix_load_npy", rows, cols, tk__esize(dtype), &bytes)))
        return tk__fail(rc, "%s: a %lldx%lld %s array is too large to address",
                        path, (long long)rows, (long long)cols, tk_dtype_name(dtype));
    /* A regular file's size is known: check it before allocating so that a
     * corrupt shape is a format error, not an allocation failure. */
    struct stat st;
    size_t offset = TK__NPY_PREAMBLE + len_size + hlen;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) &&
        (uint64_t)st.st_size != (uint64_t)offset + bytes) {
        if ((uint64_t)st.st_size < (uint64_t)offset + bytes)
            return tk__fail(TK_EFORMAT, "%s: truncated .npy file: a %lldx%lld %s array "
                            "needs %zu data bytes, only %llu present", path,
                            (long long)rows, (long long)cols, tk_dtype_name(dtype),
                            bytes, (unsigned long long)st.st_size - offset);
        return tk__fail(TK_EFORMAT, "%s: .npy file has %llu bytes after the %zu "
                        "data bytes of its %lldx%lld %s array", path,
                        (unsigned long long)st.st_size - offset - bytes, bytes,
                        (long long)rows, (long long)cols, tk_dtype_name(dtype));
    }

    tk_matrix *m;
    if ((rc = tk_matrix_create(&m, dtype, rows, cols))) {
        char why[256];   /* the message is rewritten below: copy it first */
        snprintf(why, sizeof why, "%s", tk_last_error_message());
        return tk__fail(rc, "%s: %s", path, why);
    }
    /* tk_matrix_create makes contiguous rows: the data reads in one go.  The
     * trailing-byte check also covers files that are not regular. */
    if (!(rc = tk__npy_read(f, m->data, bytes, path, "array data")) &&
        fgetc(f) != EOF)
        rc = tk__fail(TK_EFORMAT, "%s: .npy file has bytes after the %zu data bytes "
                      "of its %lldx%lld %s array", path, bytes, (long long)rows,
                      (long long)cols, tk_dtype_name(dtype));
    if (rc) {
        tk_matrix_destroy(m);
        return rc;
    }
    *out = m;
    return TK_OK;
}

int tk_matrix_load_npy(tk_matrix **out, const char *path)
{
    if (!out)
        return tk__fail(TK_EINVAL, "tk_matrix_load_npy: out is NULL");
    *out = NULL;
    if (!path)
        return tk__fail(TK_EINVAL, "tk_matrix_load_npy: path is NULL");
    FILE *f = fopen(path, "rb");
    if (!f) {
        int err = errno;
        return tk__fail(tk__open_status(err), "%s: cannot open: %s", path, strerror(err));
    }
    unsigned char pre[TK__NPY_PREAMBLE];
    int rc = tk__npy_read(f, pre, sizeof pre, path, "magic and version");
    if (!rc && memcmp(pre, TK__NPY_MAGIC, 6) != 0)
        rc = tk__fail(TK_EFORMAT, "%s: not a .npy file (the magic \\x93NUMPY is "
                      "missing)", path);
    if (!rc && (pre[6] < 1 || pre[6] > 3 || pre[7] != 0))
        rc = tk__fail(TK_EFORMAT, "%s: .npy format version %u.%u is not supported "
                      "(1.0, 2.0 and 3.0 are)", path, pre[6], pre[7]);
    if (!rc)
        rc = tk__npy_load(f, path, pre, out);
    fclose(f);
    return rc;
}

/* ---- saving --------------------------------------------------------- */

int tk_matrix_save_npy(const tk_matrix *m, const char *path)
{
    if (!m || !path)
        return tk__fail(TK_EINVAL, "tk_matrix_save_npy: %s is NULL",
                        !m ? "matrix" : "path");
    const char *descr = NULL;
    for (size_t i = 0; !descr && i < sizeof tk__npy_descrs / sizeof *tk__npy_descrs; i++)
        if (tk__npy_descrs[i].dtype == m->dtype)
            descr = tk__npy_descrs[i].descr;

    /* Version 1.0, laid out as numpy writes it: the dict, spaces, '\n', the
     * whole preamble + header a multiple of 64 bytes. */
    char head[256];
    int n = snprintf(head + 10, sizeof head - 10,
                     "{'descr': '%s', 'fortran_order': False, 'shape': (%lld, %lld), }",
                     descr, (long long)m->rows, (long long)m->cols);
    size_t total = ((size_t)n + 11 + TK__NPY_ALIGN - 1) / TK__NPY_ALIGN * TK__NPY_ALIGN;
    memcpy(head, TK__NPY_MAGIC "\x01\x00", 8);
    head[8] = (char)((total - 10) & 0xFF);
    head[9] = (char)((total - 10) >> 8);
    memset(head + 10 + n, ' ', total - 10 - (size_t)n);
    head[total - 1] = '\n';

    tk__out o;
    int rc = tk__out_open(&o, "tk_matrix_save_npy", path);
    if (rc)
        return rc;
    size_t row = (size_t)m->cols * (size_t)tk__esize(m->dtype);
    fwrite(head, 1, total, o.f);  /* errors show in ferror, which commit checks */
    /* Borrowed matrices may have a row stride > cols: write logical rows. */
    if (m->stride == m->cols)
        fwrite(m->data, 1, row * (size_t)m->rows, o.f);
    for (int64_t r = 0; m->stride != m->cols && r < m->rows; r++)
        fwrite(tk__row(m, r), 1, row, o.f);
    return tk__out_commit(&o, "tk_matrix_save_npy", path);
}
