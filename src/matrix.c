/* matrix.c - tk_matrix: 2-D row-major arrays, owned or borrowed. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static int tk__check_shape(const char *fn, int dtype, int64_t rows, int64_t cols)
{
    if (!tk_dtype_name(dtype))
        return tk__fail(TK_EDTYPE, "%s: unknown dtype %d (use TK_DTYPE_F32, "
                        "TK_DTYPE_BF16, TK_DTYPE_I32, TK_DTYPE_F16, TK_DTYPE_F8E4M3FN "
                        "or TK_DTYPE_F8E5M2)", fn, dtype);
    if (rows < 1 || cols < 1)
        return tk__fail(TK_ESHAPE, "%s: shape must be positive: got %lldx%lld",
                        fn, (long long)rows, (long long)cols);
    return TK_OK;
}

/* Allocate the handle and, when data is NULL, zeroed owned storage whose
 * first row starts on a 64-byte cache line (calloc alone gives 16 bytes:
 * rows that straddle lines cost a blockwise walk about 15%). */
static int tk__matrix_new(tk_matrix **out, const char *fn, int dtype,
                          int64_t rows, int64_t cols, int64_t stride, void *data)
{
    size_t bytes;
    int rc = tk__bytes(fn, rows, stride, tk__esize(dtype), &bytes);
    if (rc)
        return tk__fail(rc, "%s: %lldx%lld %s matrix (row stride %lld) overflows",
                        fn, (long long)rows, (long long)cols,
                        tk_dtype_name(dtype), (long long)stride);
    tk_matrix *m = malloc(sizeof *m);
    if (!m)
        return tk__fail(TK_ENOMEM, "%s: out of memory for the handle", fn);
    *m = (tk_matrix){dtype, rows, cols, stride, data, NULL};
    if (!data) {
        if (bytes > SIZE_MAX - 63 || !(m->owned = calloc(1, bytes + 63))) {
            free(m);
            return tk__fail(TK_ENOMEM, "%s: out of memory for %zu bytes", fn, bytes);
        }
        m->data = (void *)(((uintptr_t)m->owned + 63) & ~(uintptr_t)63);
    }
    *out = m;
    return TK_OK;
}

int tk_matrix_create(tk_matrix **out, int dtype, int64_t rows, int64_t cols)
{
    if (!out)
        return tk__fail(TK_EINVAL, "tk_matrix_create: out is NULL");
    *out = NULL;
    int rc = tk__check_shape("tk_matrix_create", dtype, rows, cols);
    return rc ? rc : tk__matrix_new(out, "tk_matrix_create", dtype, rows, cols, cols, NULL);
}

int tk_matrix_wrap(tk_matrix **out, int dtype, int64_t rows, int64_t cols,
                   int64_t row_stride, void *data)
{
    if (!out)
        return tk__fail(TK_EINVAL, "tk_matrix_wrap: out is NULL");
    *out = NULL;
    int rc = tk__check_shape("tk_matrix_wrap", dtype, rows, cols);
    if (rc)
        return rc;
    if (!data)
        return tk__fail(TK_EINVAL, "tk_matrix_wrap: data is NULL for a %lldx%lld matrix",
                        (long long)rows, (long long)cols);
    if (row_stride < cols)
        return tk__fail(TK_ELAYOUT, "tk_matrix_wrap: row stride %lld is smaller than "
                        "cols %lld", (long long)row_stride, (long long)cols);
    /* Elements that straddle their size could never reach the line
     * boundaries the streaming loops start from (and are not C objects). */
    if ((uintptr_t)data % (uintptr_t)tk__esize(dtype))
        return tk__fail(TK_ELAYOUT, "tk_matrix_wrap: data at %p is not aligned to its "
                        "%lld-byte %s elements", data, (long long)tk__esize(dtype),
                        tk_dtype_name(dtype));
    return tk__matrix_new(out, "tk_matrix_wrap", dtype, rows, cols, row_stride, data);
}

/* The caller's f32 array, rows of `stride` floats, the last `cols` long,
 * must be addressable, as tk_matrix_wrap requires of a matrix's rows. */
static int tk__f32_span(const char *fn, const char *what, int64_t rows, int64_t cols,
                        int64_t stride)
{
    int64_t span;
    if (!tk__mul(rows - 1, stride, &span) || !tk__add(span, cols, &span) ||
        span > PTRDIFF_MAX / (int64_t)sizeof(float))
        return tk__fail(TK_EOVERFLOW, "%s: %lld rows of %s row stride %lld are more "
                        "float32 elements than memory holds", fn, (long long)rows, what,
                        (long long)stride);
    return TK_OK;
}

int tk_matrix_from_f32(tk_matrix **out, int dtype, int64_t rows, int64_t cols,
                       const float *src, int64_t src_row_stride)
{
    if (!out)
        return tk__fail(TK_EINVAL, "tk_matrix_from_f32: out is NULL");
    *out = NULL;
    int rc = tk__check_shape("tk_matrix_from_f32", dtype, rows, cols);
    if (rc)
        return rc;
    if (!tk__is_float_dtype(dtype))
        return tk__fail(TK_EDTYPE, "tk_matrix_from_f32: f32 data can be represented "
                        "in a float dtype, not %s", tk_dtype_name(dtype));
    if (!src)
        return tk__fail(TK_EINVAL, "tk_matrix_from_f32: src is NULL");
    if (src_row_stride < cols)
        return tk__fail(TK_ELAYOUT, "tk_matrix_from_f32: source row stride %lld is "
                        "smaller than cols %lld", (long long)src_row_stride,
                        (long long)cols);
    if ((rc = tk__f32_span("tk_matrix_from_f32", "source", rows, cols, src_row_stride)))
        return rc;
    tk_matrix *m;
    if ((rc = tk__matrix_new(&m, "tk_matrix_from_f32", dtype, rows, cols, cols, NULL)))
        return rc;
    for (int64_t r = 0; r < rows; r++)
        tk__row_from_f32(dtype, src + r * src_row_stride, tk__row(m, r), cols);
    *out = m;
    return TK_OK;
}

int tk_matrix_to_f32(const tk_matrix *m, float *dst, int64_t dst_row_stride)
{
    if (!m || !dst)
        return tk__fail(TK_EINVAL, "tk_matrix_to_f32: %s is NULL", !m ? "matrix" : "dst");
    if (!tk__is_float_dtype(m->dtype))
        return tk__fail(TK_EDTYPE, "tk_matrix_to_f32: %s matrices are storage only; "
                        "a float dtype required", tk_dtype_name(m->dtype));
    if (dst_row_stride < m->cols)
        return tk__fail(TK_ELAYOUT, "tk_matrix_to_f32: destination row stride %lld is "
                        "smaller than cols %lld", (long long)dst_row_stride,
                        (long long)m->cols);
    int rc = tk__f32_span("tk_matrix_to_f32", "destination", m->rows, m->cols,
                          dst_row_stride);
    if (rc)
        return rc;
    for (int64_t r = 0; r < m->rows; r++)
        tk__row_to_f32(m->dtype, tk__row(m, r), dst + r * dst_row_stride, m->cols);
    return TK_OK;
}

void tk_matrix_destroy(tk_matrix *m)
{
    if (!m)
        return;
    free(m->owned);
    free(m);
}

int tk_matrix_dtype(const tk_matrix *m) { return m ? m->dtype : 0; }
int64_t tk_matrix_rows(const tk_matrix *m) { return m ? m->rows : 0; }
int64_t tk_matrix_cols(const tk_matrix *m) { return m ? m->cols : 0; }
int64_t tk_matrix_row_stride(const tk_matrix *m) { return m ? m->stride : 0; }
void *tk_matrix_data(const tk_matrix *m) { return m ? m->data : NULL; }
