/* tiling.c - tk_tiling: a logical shape on a grid of blocks; pad and crop. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

int tk_tiling_create(tk_tiling **out, int64_t rows, int64_t cols,
                     int64_t block_rows, int64_t block_cols)
{
    if (!out)
        return tk__fail(TK_EINVAL, "tk_tiling_create: out is NULL");
    *out = NULL;
    if (rows < 1 || cols < 1)
        return tk__fail(TK_ESHAPE, "tk_tiling_create: shape must be positive: got %lldx%lld",
                        (long long)rows, (long long)cols);
    if (block_rows < 1 || block_cols < 1)
        return tk__fail(TK_EINVAL, "tk_tiling_create: two positive integer block "
                        "dimensions required: got %lldx%lld", (long long)block_rows,
                        (long long)block_cols);
    tk_tiling g = {.rows = rows, .cols = cols, .block_rows = block_rows,
                   .block_cols = block_cols, .tail = TK_TAIL_MASK};
    /* Ceiling division written so that it cannot overflow. */
    g.grid_rows = rows / block_rows + (rows % block_rows != 0);
    g.grid_cols = cols / block_cols + (cols % block_cols != 0);
    if (!tk__mul(g.grid_rows, block_rows, &g.padded_rows) ||
        !tk__mul(g.grid_cols, block_cols, &g.padded_cols) ||
        !tk__mul(g.padded_rows, g.padded_cols, &g.padded_elements) ||
        !tk__mul(g.grid_rows, g.grid_cols, &g.tiles))
        return tk__fail(TK_EOVERFLOW, "tk_tiling_create: padding %lldx%lld up to "
                        "blocks of %lldx%lld overflows int64", (long long)rows,
                        (long long)cols, (long long)block_rows, (long long)block_cols);
    tk_tiling *t = malloc(sizeof *t);
    if (!t)
        return tk__fail(TK_ENOMEM, "tk_tiling_create: out of memory for the handle");
    *t = g;
    *out = t;
    return TK_OK;
}

void tk_tiling_destroy(tk_tiling *t) { free(t); }

static int tk__tiling_admit(const void *h, int param, int64_t value)
{
    const tk_tiling *t = h;
    (void)param;  /* TK_TILING_TAIL is the only writable one */
    if (value == TK_TAIL_SHIFT_INWARDS && (t->rows < t->block_rows || t->cols < t->block_cols))
        return tk__fail(TK_ELAYOUT, "tk_tiling_set: shift-inwards needs an extent of at "
                        "least the block in both dimensions: got %lldx%lld with block "
                        "%lldx%lld", (long long)t->rows, (long long)t->cols,
                        (long long)t->block_rows, (long long)t->block_cols);
    return TK_OK;
}

static void tk__tiling_store(void *h, int param, int64_t value)
{
    (void)param;
    ((tk_tiling *)h)->tail = (int)value;
}

int tk_tiling_set(tk_tiling *t, int param, int64_t value)
{
    static const tk__settable s = {"tk_tiling_set", "tiling", TK__TILING, NULL,
                                   tk__tiling_admit, tk__tiling_store, -1, NULL};
    return tk__param_set(&s, t, param, value);
}

/* Elements per operand that the current tail strategy copies or computes
 * beyond one pass over the logical shape (see tk_tiling(3)). */
static int64_t tk__extra_elements(const tk_tiling *t)
{
    int64_t logical = t->rows * t->cols;   /* <= padded_elements: no overflow */
    int64_t full = (t->rows / t->block_rows) * (t->cols / t->block_cols);
    switch (t->tail) {
    case TK_TAIL_PAD:
        return t->padded_elements;
    case TK_TAIL_MASK:
        return (t->tiles - full) * t->block_rows * t->block_cols;
    default: /* TK_TAIL_SHIFT_INWARDS: every tile is one whole block */
        return t->padded_elements - logical;
    }
}

int tk_tiling_get(const tk_tiling *t, int param, int64_t *value)
{
    if (!t || !value)
        return tk__fail(TK_EINVAL, "tk_tiling_get: %s is NULL", !t ? "tiling" : "value");
    int64_t v;
    switch (param) {
    case TK_TILING_TAIL: v = t->tail; break;
    case TK_TILING_GRID_ROWS: v = t->grid_rows; break;
    case TK_TILING_GRID_COLS: v = t->grid_cols; break;
    case TK_TILING_TILES: v = t->tiles; break;
    case TK_TILING_PADDED_ROWS: v = t->padded_rows; break;
    case TK_TILING_PADDED_COLS: v = t->padded_cols; break;
    case TK_TILING_PADDED_ELEMENTS: v = t->padded_elements; break;
    case TK_TILING_EXTRA_ELEMENTS: v = tk__extra_elements(t); break;
    case TK_TILING_ROWS: v = t->rows; break;
    case TK_TILING_COLS: v = t->cols; break;
    case TK_TILING_BLOCK_ROWS: v = t->block_rows; break;
    case TK_TILING_BLOCK_COLS: v = t->block_cols; break;
    default:
        return tk__fail(TK_EINVAL, "tk_tiling_get: unknown parameter %d", param);
    }
    *value = v;
    return TK_OK;
}

int tk_tiling_tile(const tk_tiling *t, int64_t index, int64_t *row0,
                   int64_t *col0, int64_t *rows, int64_t *cols)
{
    if (!t || !row0 || !col0 || !rows || !cols)
        return tk__fail(TK_EINVAL, "tk_tiling_tile: %s is NULL",
                        !t ? "tiling" : "an output pointer");
    if (index < 0 || index >= t->tiles)
        return tk__fail(TK_ERANGE, "tk_tiling_tile: tile index %lld is outside [0, %lld)",
                        (long long)index, (long long)t->tiles);
    /* Grid order is row-major, the last axis fastest. */
    int64_t r0 = index / t->grid_cols * t->block_rows;
    int64_t c0 = index % t->grid_cols * t->block_cols;
    *row0 = r0;
    *col0 = c0;
    *rows = t->rows - r0 < t->block_rows ? t->rows - r0 : t->block_rows;
    *cols = t->cols - c0 < t->block_cols ? t->cols - c0 : t->block_cols;
    return TK_OK;
}

int tk_pad(const tk_tiling *t, const tk_matrix *src, tk_matrix **padded)
{
    if (!padded)
        return tk__fail(TK_EINVAL, "tk_pad: padded is NULL");
    *padded = NULL;
    if (!t || !src)
        return tk__fail(TK_EINVAL, "tk_pad: %s is NULL", !t ? "tiling" : "src");
    if (src->rows != t->rows || src->cols != t->cols)
        return tk__fail(TK_ESHAPE, "tk_pad: source is %lldx%lld but the tiling is for "
                        "%lldx%lld", (long long)src->rows, (long long)src->cols,
                        (long long)t->rows, (long long)t->cols);
    tk_matrix *p;
    /* tk_matrix_create zero-fills, so only the logical part is copied. */
    int rc = tk_matrix_create(&p, src->dtype, t->padded_rows, t->padded_cols);
    if (rc)
        return rc;
    size_t row_bytes = (size_t)(src->cols * tk__esize(src->dtype));
    for (int64_t r = 0; r < src->rows; r++)
        memcpy(tk__row(p, r), tk__row(src, r), row_bytes);
    *padded = p;
    return TK_OK;
}

int tk_crop(const tk_tiling *t, const tk_matrix *padded, tk_matrix *dst)
{
    if (!t || !padded || !dst)
        return tk__fail(TK_EINVAL, "tk_crop: %s is NULL",
                        !t ? "tiling" : !padded ? "padded" : "dst");
    if (padded->rows != t->padded_rows || padded->cols != t->padded_cols)
        return tk__fail(TK_ESHAPE, "tk_crop: padded matrix is %lldx%lld but the tiling "
                        "pads to %lldx%lld", (long long)padded->rows,
                        (long long)padded->cols, (long long)t->padded_rows,
                        (long long)t->padded_cols);
    if (dst->rows != t->rows || dst->cols != t->cols)
        return tk__fail(TK_ESHAPE, "tk_crop: destination is %lldx%lld but the tiling "
                        "is for %lldx%lld", (long long)dst->rows, (long long)dst->cols,
                        (long long)t->rows, (long long)t->cols);
    if (dst->dtype != padded->dtype)
        return tk__fail(TK_EDTYPE, "tk_crop: padded matrix is %s but the destination "
                        "is %s", tk_dtype_name(padded->dtype), tk_dtype_name(dst->dtype));
    size_t row_bytes = (size_t)(dst->cols * tk__esize(dst->dtype));
    for (int64_t r = 0; r < dst->rows; r++)
        memmove(tk__row(dst, r), tk__row(padded, r), row_bytes);
    return TK_OK;
}
