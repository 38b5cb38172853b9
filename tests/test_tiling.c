/* test_tiling.c - tk_tiling: grid arithmetic, tile regions, tail strategies'
 * extra work, tk_pad and tk_crop. */
#include "tk_test.h"

#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>

struct geometry {
    int64_t rows, cols, br, bc;
};

ParameterizedTestParameters(tiling, geometry)
{
    static const int64_t shapes[][2] = {{1, 1},   {8, 128},  {9, 129}, {17, 257},
                                        {15, 255}, {4095, 4093}, {3, 1000}};
    static const int64_t blocks[][2] = {{1, 1}, {2, 4}, {8, 128}, {16, 256}, {256, 512}};
    static struct geometry p[7 * 5];
    size_t n = 0;
    for (int s = 0; s < 7; s++)
        for (int b = 0; b < 5; b++)
            p[n++] = (struct geometry){shapes[s][0], shapes[s][1], blocks[b][0], blocks[b][1]};
    return cr_make_param_array(struct geometry, p, n);
}

static int64_t get(const tk_tiling *t, int param)
{
    int64_t v = -12345;
    tkt_expect_status(tk_tiling_get(t, param, &v), TK_OK);
    return v;
}

/* Grid, padded sizes and tile regions, each checked against a count made
 * by stepping through the shape one block at a time. */
ParameterizedTest(struct geometry *p, tiling, geometry)
{
    tk_tiling *t;
    tkt_expect_status(tk_tiling_create(&t, p->rows, p->cols, p->br, p->bc), TK_OK);
    int64_t gr = 0, gc = 0, edge = 0;
    for (int64_t r = 0; r < p->rows; r += p->br)
        gr++;
    for (int64_t c = 0; c < p->cols; c += p->bc)
        gc++;
    cr_assert_eq(get(t, TK_TILING_ROWS), p->rows);
    cr_assert_eq(get(t, TK_TILING_COLS), p->cols);
    cr_assert_eq(get(t, TK_TILING_BLOCK_ROWS), p->br);
    cr_assert_eq(get(t, TK_TILING_BLOCK_COLS), p->bc);
    cr_assert_eq(get(t, TK_TILING_GRID_ROWS), gr);
    cr_assert_eq(get(t, TK_TILING_GRID_COLS), gc);
    cr_assert_eq(get(t, TK_TILING_TILES), gr * gc);
    cr_assert_eq(get(t, TK_TILING_PADDED_ROWS), gr * p->br);
    cr_assert_eq(get(t, TK_TILING_PADDED_COLS), gc * p->bc);
    cr_assert_eq(get(t, TK_TILING_PADDED_ELEMENTS), gr * gc * p->br * p->bc);
    cr_assert_eq(get(t, TK_TILING_TAIL), TK_TAIL_MASK, "mask is the default");

    /* Tiles come in row-major grid order and their valid regions cover
     * every element exactly once. */
    unsigned char *cover = calloc((size_t)(p->rows * p->cols), 1);
    cr_assert_not_null(cover);
    for (int64_t i = 0; i < gr * gc; i++) {
        int64_t r0, c0, h, w;
        tkt_expect_status(tk_tiling_tile(t, i, &r0, &c0, &h, &w), TK_OK);
        cr_assert_eq(r0, i / gc * p->br);
        cr_assert_eq(c0, i % gc * p->bc);
        cr_assert(h >= 1 && h <= p->br && w >= 1 && w <= p->bc);
        cr_assert(h == p->br || r0 + h == p->rows, "a short tile must end the matrix");
        cr_assert(w == p->bc || c0 + w == p->cols, "a narrow tile must end the matrix");
        edge += h < p->br || w < p->bc;
        for (int64_t r = r0; r < r0 + h; r++)
            for (int64_t c = c0; c < c0 + w; c++)
                cover[r * p->cols + c]++;
    }
    for (int64_t e = 0; e < p->rows * p->cols; e++)
        cr_assert_eq(cover[e], 1, "element %lld covered %d times", (long long)e, cover[e]);
    free(cover);

    /* Extra elements per operand: pad writes the whole padded copy, mask
     * stages each edge tile as one block, shift-inwards recomputes the
     * overlap of the moved tiles. */
    tkt_expect_status(tk_tiling_set(t, TK_TILING_TAIL, TK_TAIL_PAD), TK_OK);
    cr_assert_eq(get(t, TK_TILING_EXTRA_ELEMENTS), gr * gc * p->br * p->bc);
    tkt_expect_status(tk_tiling_set(t, TK_TILING_TAIL, TK_TAIL_MASK), TK_OK);
    cr_assert_eq(get(t, TK_TILING_EXTRA_ELEMENTS), edge * p->br * p->bc);
    if (p->rows >= p->br && p->cols >= p->bc) {
        tkt_expect_status(tk_tiling_set(t, TK_TILING_TAIL, TK_TAIL_SHIFT_INWARDS), TK_OK);
        cr_assert_eq(get(t, TK_TILING_EXTRA_ELEMENTS),
                     gr * gc * p->br * p->bc - p->rows * p->cols);
        cr_assert_eq(get(t, TK_TILING_TAIL), TK_TAIL_SHIFT_INWARDS);
    } else {
        tkt_expect_status(tk_tiling_set(t, TK_TILING_TAIL, TK_TAIL_SHIFT_INWARDS), TK_ELAYOUT);
        char want[64];
        snprintf(want, sizeof want, "got %lldx%lld with block %lldx%lld", (long long)p->rows,
                 (long long)p->cols, (long long)p->br, (long long)p->bc);
        cr_assert(strstr(tk_last_error_message(), want), "%s", tk_last_error_message());
        cr_assert_eq(get(t, TK_TILING_TAIL), TK_TAIL_MASK, "a refused tail was kept");
    }
    tk_tiling_destroy(t);
}

/* The seed's configuration sweep: a 15x255 matrix on blocks (8,128) and
 * (16,256) has 4096 padded elements either way (the seed printed 4096 for
 * each block with 2 and 3 buffers: pipeline/seed_configuration_sweep). */
Test(tiling, seed_configuration_sweep)
{
    const int64_t blocks[][2] = {{8, 128}, {16, 256}};
    for (int b = 0; b < 2; b++) {
        tk_tiling *t;
        tkt_expect_status(tk_tiling_create(&t, 15, 255, blocks[b][0], blocks[b][1]), TK_OK);
        int64_t gm = (15 + blocks[b][0] - 1) / blocks[b][0];
        int64_t gn = (255 + blocks[b][1] - 1) / blocks[b][1];
        cr_assert_eq(get(t, TK_TILING_PADDED_ELEMENTS), gm * gn * blocks[b][0] * blocks[b][1]);
        cr_assert_eq(get(t, TK_TILING_PADDED_ELEMENTS), 4096);
        tk_tiling_destroy(t);
    }
}

Test(tiling, create_rejections)
{
    tk_tiling *t = (tk_tiling *)&t;
    tkt_expect_status(tk_tiling_create(&t, 0, 5, 8, 128), TK_ESHAPE);
    cr_assert_null(t);
    cr_assert(strstr(tk_last_error_message(), "0x5"), "%s", tk_last_error_message());
    t = (tk_tiling *)&t;
    tkt_expect_status(tk_tiling_create(&t, 3, -1, 8, 128), TK_ESHAPE);
    cr_assert_null(t);
    cr_assert(strstr(tk_last_error_message(), "3x-1"), "%s", tk_last_error_message());
    t = (tk_tiling *)&t;
    tkt_expect_status(tk_tiling_create(&t, 3, 4, 8, 0), TK_EINVAL);
    cr_assert_null(t);
    cr_assert(strstr(tk_last_error_message(),
                     "two positive integer block dimensions required: got 8x0"),
              "%s", tk_last_error_message());
    t = (tk_tiling *)&t;
    tkt_expect_status(tk_tiling_create(&t, 3, 4, -2, 4), TK_EINVAL);
    cr_assert_null(t);
    cr_assert(strstr(tk_last_error_message(), "-2x4"), "%s", tk_last_error_message());
    /* Padding up to the block overflows int64. */
    t = (tk_tiling *)&t;
    tkt_expect_status(tk_tiling_create(&t, INT64_MAX, 1, 2, 1), TK_EOVERFLOW);
    cr_assert_null(t);
    t = (tk_tiling *)&t;
    tkt_expect_status(tk_tiling_create(&t, INT64_C(1) << 32, INT64_C(1) << 32, 1, 1),
                      TK_EOVERFLOW);
    cr_assert_null(t);
    tkt_expect_status(tk_tiling_create(NULL, 3, 4, 8, 128), TK_EINVAL);
    tk_tiling_destroy(NULL);
}

Test(tiling, parameter_rejections)
{
    tk_tiling *t;
    tkt_expect_status(tk_tiling_create(&t, 16, 256, 8, 128), TK_OK);
    const int64_t bad[] = {0, 4, -1, INT64_MIN};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tkt_expect_status(tk_tiling_set(t, TK_TILING_TAIL, bad[i]), TK_ERANGE);
        cr_assert_eq(get(t, TK_TILING_TAIL), TK_TAIL_MASK);
    }
    const int read_only[] = {TK_TILING_GRID_ROWS, TK_TILING_TILES, TK_TILING_PADDED_ELEMENTS,
                             TK_TILING_EXTRA_ELEMENTS, TK_TILING_BLOCK_COLS};
    for (size_t i = 0; i < sizeof read_only / sizeof *read_only; i++) {
        tkt_expect_status(tk_tiling_set(t, read_only[i], 1), TK_EINVAL);
        cr_assert(strstr(tk_last_error_message(), "read-only"), "%s", tk_last_error_message());
    }
    tkt_expect_status(tk_tiling_set(t, TK_KERNEL_BODY, 1), TK_EINVAL);
    tkt_expect_status(tk_tiling_set(t, 9999, 1), TK_EINVAL);
    tkt_expect_status(tk_tiling_set(NULL, TK_TILING_TAIL, TK_TAIL_PAD), TK_EINVAL);
    int64_t v = 42;
    tkt_expect_status(tk_tiling_get(t, 9999, &v), TK_EINVAL);
    cr_assert_eq(v, 42);
    tkt_expect_status(tk_tiling_get(t, TK_TILING_TAIL, NULL), TK_EINVAL);
    tkt_expect_status(tk_tiling_get(NULL, TK_TILING_TAIL, &v), TK_EINVAL);
    cr_assert_eq(v, 42);

    int64_t r0 = -7, c0 = -7, h = -7, w = -7;
    const int64_t bad_index[] = {-1, 4, INT64_MAX};
    for (size_t i = 0; i < sizeof bad_index / sizeof *bad_index; i++) {
        tkt_expect_status(tk_tiling_tile(t, bad_index[i], &r0, &c0, &h, &w), TK_ERANGE);
        cr_assert(r0 == -7 && c0 == -7 && h == -7 && w == -7, "outputs written on failure");
    }
    cr_assert(strstr(tk_last_error_message(), "[0, 4)"), "%s", tk_last_error_message());
    tkt_expect_status(tk_tiling_tile(t, 0, NULL, &c0, &h, &w), TK_EINVAL);
    tkt_expect_status(tk_tiling_tile(NULL, 0, &r0, &c0, &h, &w), TK_EINVAL);
    tk_tiling_destroy(t);
}

/* ---- tk_pad and tk_crop -------------------------------------------------------------- */

struct pad_case {
    int dtype;
    int64_t rows, cols, br, bc;
};

ParameterizedTestParameters(tiling, pad_and_crop)
{
    static const int64_t geo[][4] = {{15, 255, 8, 128}, {1, 1, 2, 4}, {8, 128, 8, 128},
                                     {17, 257, 16, 256}};
    static struct pad_case p[3 * 4];
    size_t n = 0;
    for (int d = TK_DTYPE_F32; d <= TK_DTYPE_I32; d++)
        for (int g = 0; g < 4; g++)
            p[n++] = (struct pad_case){d, geo[g][0], geo[g][1], geo[g][2], geo[g][3]};
    return cr_make_param_array(struct pad_case, p, n);
}

/* Padding copies the logical part bit for bit and zero-fills the rest;
 * cropping brings back exactly the original into a strided destination,
 * leaving the gaps between its rows alone. */
ParameterizedTest(struct pad_case *p, tiling, pad_and_crop)
{
    size_t es = (size_t)tk_dtype_size(p->dtype);
    size_t n = (size_t)(p->rows * p->cols);
    unsigned char *data = malloc(n * es);
    cr_assert_not_null(data);
    uint64_t seed = 3;
    for (size_t i = 0; i < n * es; i++)
        data[i] = (unsigned char)(tkt_next(&seed) | 1);   /* never a zero byte */
    tk_matrix *src, *padded = (tk_matrix *)&padded, *dst;
    tkt_expect_status(tk_matrix_wrap(&src, p->dtype, p->rows, p->cols, p->cols, data), TK_OK);
    tk_tiling *t;
    tkt_expect_status(tk_tiling_create(&t, p->rows, p->cols, p->br, p->bc), TK_OK);
    tkt_expect_status(tk_pad(t, src, &padded), TK_OK);
    int64_t pr = get(t, TK_TILING_PADDED_ROWS), pc = get(t, TK_TILING_PADDED_COLS);
    cr_assert_eq(tk_matrix_rows(padded), pr);
    cr_assert_eq(tk_matrix_cols(padded), pc);
    cr_assert_eq(tk_matrix_dtype(padded), p->dtype);
    const unsigned char *pd = tk_matrix_data(padded);
    size_t pstride = (size_t)tk_matrix_row_stride(padded) * es;
    for (int64_t r = 0; r < pr; r++)
        for (int64_t c = 0; c < pc; c++) {
            const unsigned char *got = pd + (size_t)r * pstride + (size_t)c * es;
            if (r < p->rows && c < p->cols)
                cr_assert(!memcmp(got, data + (size_t)(r * p->cols + c) * es, es),
                          "(%lld, %lld) not copied", (long long)r, (long long)c);
            else
                for (size_t b = 0; b < es; b++)
                    cr_assert_eq(got[b], 0, "padding (%lld, %lld) is not zero", (long long)r,
                                 (long long)c);
        }

    int64_t dstride = p->cols + 2;
    unsigned char *dbuf = malloc((size_t)(p->rows * dstride) * es);
    cr_assert_not_null(dbuf);
    memset(dbuf, 0xA5, (size_t)(p->rows * dstride) * es);
    tkt_expect_status(tk_matrix_wrap(&dst, p->dtype, p->rows, p->cols, dstride, dbuf), TK_OK);
    tkt_expect_status(tk_crop(t, padded, dst), TK_OK);
    for (int64_t r = 0; r < p->rows; r++) {
        cr_assert(!memcmp(dbuf + (size_t)(r * dstride) * es, data + (size_t)(r * p->cols) * es,
                          (size_t)p->cols * es), "row %lld not restored", (long long)r);
        for (size_t b = (size_t)p->cols * es; b < (size_t)dstride * es; b++)
            cr_assert_eq(dbuf[(size_t)(r * dstride) * es + b], 0xA5, "row gap written");
    }
    tk_matrix_destroy(padded);
    tk_matrix_destroy(dst);
    tk_matrix_destroy(src);
    tk_tiling_destroy(t);
    free(dbuf);
    free(data);
}

Test(tiling, pad_and_crop_rejections)
{
    tk_tiling *t;
    tk_matrix *src, *wrong, *padded = (tk_matrix *)&padded, *dst, *bf;
    tkt_expect_status(tk_tiling_create(&t, 15, 255, 8, 128), TK_OK);
    tkt_expect_status(tk_matrix_create(&src, TK_DTYPE_F32, 15, 255), TK_OK);
    tkt_expect_status(tk_matrix_create(&wrong, TK_DTYPE_F32, 15, 256), TK_OK);
    tkt_expect_status(tk_pad(t, wrong, &padded), TK_ESHAPE);
    cr_assert_null(padded);
    cr_assert(strstr(tk_last_error_message(), "15x256"), "%s", tk_last_error_message());
    tkt_expect_status(tk_pad(NULL, src, &padded), TK_EINVAL);
    tkt_expect_status(tk_pad(t, NULL, &padded), TK_EINVAL);
    tkt_expect_status(tk_pad(t, src, NULL), TK_EINVAL);
    tkt_expect_status(tk_pad(t, src, &padded), TK_OK);

    float *dbuf = malloc(15 * 255 * sizeof *dbuf);
    cr_assert_not_null(dbuf);
    tkt_fill(dbuf, 15 * 255, 9);
    float *dsnap = malloc(15 * 255 * sizeof *dsnap);
    cr_assert_not_null(dsnap);
    memcpy(dsnap, dbuf, 15 * 255 * sizeof *dbuf);
    tkt_expect_status(tk_matrix_wrap(&dst, TK_DTYPE_F32, 15, 255, 255, dbuf), TK_OK);
    /* A padded matrix of the wrong shape, a destination of the wrong shape
     * and a destination of another dtype: each leaves dst as it was. */
    tkt_expect_status(tk_crop(t, wrong, dst), TK_ESHAPE);
    cr_assert(strstr(tk_last_error_message(), "16x256"), "%s", tk_last_error_message());
    cr_assert(!memcmp(dbuf, dsnap, 15 * 255 * sizeof *dbuf));
    tkt_fill(tk_matrix_data(wrong), 15 * 256, 10);
    void *wrong_before = malloc(15 * 256 * sizeof(float));
    cr_assert_not_null(wrong_before);
    memcpy(wrong_before, tk_matrix_data(wrong), 15 * 256 * sizeof(float));
    tkt_expect_status(tk_crop(t, padded, wrong), TK_ESHAPE);
    cr_assert(!memcmp(tk_matrix_data(wrong), wrong_before, 15 * 256 * sizeof(float)));
    free(wrong_before);
    tkt_expect_status(tk_matrix_create(&bf, TK_DTYPE_BF16, 16, 256), TK_OK);
    tkt_expect_status(tk_crop(t, bf, dst), TK_EDTYPE);
    cr_assert(strstr(tk_last_error_message(), "bfloat16"), "%s", tk_last_error_message());
    cr_assert(!memcmp(dbuf, dsnap, 15 * 255 * sizeof *dbuf));
    tkt_expect_status(tk_crop(NULL, padded, dst), TK_EINVAL);
    tkt_expect_status(tk_crop(t, NULL, dst), TK_EINVAL);
    tkt_expect_status(tk_crop(t, padded, NULL), TK_EINVAL);
    cr_assert(!memcmp(dbuf, dsnap, 15 * 255 * sizeof *dbuf));
    tk_matrix_destroy(bf);
    tk_matrix_destroy(dst);
    tk_matrix_destroy(padded);
    tk_matrix_destroy(wrong);
    tk_matrix_destroy(src);
    tk_tiling_destroy(t);
    free(dbuf);
    free(dsnap);
}
