/* oracle.c - the float64 oracle of reduction audits (bound.c): per output
 * element the sum of the stored inputs' products, of their magnitudes and
 * of the original inputs' products.
 *
 * This file alone is compiled with FMA contraction (the Makefile): every
 * product here is of two floats, exact in float64, so a fused multiply-add
 * rounds exactly as the separate add does, and each path gives the portable
 * C's bits (tests/python/test_isa.py compares the reports), but for the
 * sign of a NaN sum, which follows the operand order the compiler picked
 * (the audit reports none: a NaN bound is the canonical NaN).  Where a CPU's
 * adds and multiplies share ports (Intel's), fusing halves the work.
 *
 * A matmul's main pass sums the magnitudes in float32 within each KC block
 * where tk__oracle_mag32 allows it: there every product of magnitudes is
 * exact in float32 and every partial sum normal and finite, so fusing
 * changes no bit either, and a vector holds twice the terms. */
#include "internal.h"

#include <fenv.h>
#include <math.h>
#include <string.h>

/* KC-term blocks packed at once for k terms. */
static int64_t tk__subs(int64_t k)
{
    int64_t blocks = (k + TK__KC - 1) / TK__KC;
    return blocks < 1 ? 1 : blocks < TK__KO ? blocks : TK__KO;
}

/* Doubles of packing scratch one thread's pass needs for n columns and k
 * terms: per packed KC-term block, a panel of y (value, magnitude,
 * original) per NR columns, and one of x (the same three) per row of an MC
 * block rounded up to whole groups (TK__MC_PACK). */
int64_t tk__pack_doubles(int64_t n, int64_t k)
{
    return tk__subs(k) *
           (TK__KC * ((n + TK__NR - 1) / TK__NR) * TK__NR * 3 + TK__MC_PACK * TK__KC * 3);
}

/* Where a packed x block of kc terms holds row r's term k of sum q (0 the
 * value, 1 its magnitude, 2 the original): by row pairs, per term the
 * three of each row (tk__tile), or with groups by groups of TK__MR rows,
 * per sum per term the group's rows side by side (tk__tile6). */
static inline int64_t tk__xat(bool groups, int64_t kc, int64_t r, int64_t k, int q)
{
    if (groups)
        return ((r / TK__MR * 3 + q) * kc + k) * TK__MR + r % TK__MR;
    return ((r / 2 * kc + k) * 2 + r % 2) * 3 + q;
}

/* Four doubles (one AVX2 register); aligned(8) so that a packed panel
 * needs no more.  Eight would be one AVX-512 register, but gcc spills them
 * on the other paths.  tk__f8: the eight float32 magnitudes of a panel. */
typedef double tk__d4 __attribute__((vector_size(32), aligned(8)));
typedef float tk__f8 __attribute__((vector_size(32), aligned(4)));

bool tk__oracle_mag32(const tk__pass *p)
{
    /* float32 products need 48 bits; a directed rounding mode may lose two
     * units in the last place an addition, which the bound does not allow. */
    if (!p->y || p->dtype == TK_DTYPE_F32 || fegetround() != FE_TONEAREST)
        return false;
    /* The largest magnitude and the smallest nonzero one of x and of y, as
     * bits (a zero's wraps past every other). */
    uint32_t top[2] = {0, 0}, low[2] = {UINT32_MAX, UINT32_MAX};
    const float *v[2] = {p->x, p->y};
    int64_t len[2] = {p->m * p->k, p->k * p->n};
    for (int i = 0; i < 2; i++)
        for (int64_t e = 0; e < len[i]; e++) {
            uint32_t b = tk__f32_bits(v[i][e]) & 0x7FFFFFFFu;
            top[i] = b > top[i] ? b : top[i];
            low[i] = b - 1 < low[i] ? b - 1 : low[i];
        }
    if (top[0] >= 0x7F800000u || top[1] >= 0x7F800000u)   /* Inf or NaN */
        return false;
    /* Then every product of two significands of at most 12 bits is at
     * least FLT_MIN (zeros aside), and KC of them at most 2^127. */
    double big = (double)tk__f32_value(top[0]) * tk__f32_value(top[1]) * TK__KC;
    double small = (double)tk__f32_value(low[0] + 1) * tk__f32_value(low[1] + 1);
    return big <= 0x1p127 && (low[0] == UINT32_MAX || low[1] == UINT32_MAX ||
                              small >= 0x1p-126);
}

/* One output tile of 2 rows by NR = 8 columns: the sums over kc terms of
 * x y, |x| |y| and, when orig, ox oy, into acc (per sum and row, two
 * halves).  xp holds per term (x, |x|, ox) of each row, yp per term the NR
 * values of y, |y| and oy; with mag32 each magnitude slot holds a float32
 * (yp's: NR of them), and the magnitudes are summed in float32. */
static inline __attribute__((always_inline)) void tk__tile(const double *xp, const double *yp,
                                                           int64_t kc, bool orig, bool mag32,
                                                           tk__d4 *acc)
{
    tk__d4 s00 = {0}, s01 = {0}, s10 = {0}, s11 = {0}, a00 = {0}, a01 = {0}, a10 = {0},
           a11 = {0}, o00 = {0}, o01 = {0}, o10 = {0}, o11 = {0};
    tk__f8 m0 = {0}, m1 = {0};
    for (int64_t k = 0; k < kc; k++, xp += 6, yp += 3 * TK__NR) {
        const tk__d4 *v = (const tk__d4 *)yp;
        s00 += xp[0] * v[0];
        s01 += xp[0] * v[1];
        s10 += xp[3] * v[0];
        s11 += xp[3] * v[1];
        if (mag32) {
            tk__f8 w = *(const tk__f8 *)(const void *)(yp + TK__NR);
            m0 += *(const float *)(const void *)(xp + 1) * w;
            m1 += *(const float *)(const void *)(xp + 4) * w;
        } else {
            a00 += xp[1] * v[2];
            a01 += xp[1] * v[3];
            a10 += xp[4] * v[2];
            a11 += xp[4] * v[3];
        }
        if (orig) {
            o00 += xp[2] * v[4];
            o01 += xp[2] * v[5];
            o10 += xp[5] * v[4];
            o11 += xp[5] * v[5];
        }
    }
    if (mag32)
        for (int c = 0; c < 4; c++) {
            a00[c] = m0[c], a01[c] = m0[c + 4];
            a10[c] = m1[c], a11[c] = m1[c + 4];
        }
    acc[0] = s00, acc[1] = s01, acc[2] = s10, acc[3] = s11;
    acc[4] = a00, acc[5] = a01, acc[6] = a10, acc[7] = a11;
    acc[8] = o00, acc[9] = o01, acc[10] = o10, acc[11] = o11;
}

#if TK__ISA_X86
/* Eight doubles, one AVX-512 register; sixteen floats, another. */
typedef double tk__d8 __attribute__((vector_size(64), aligned(8)));
typedef float tk__f16 __attribute__((vector_size(64), aligned(4)));

/* The AVX-512 tile: 4 rows by 2 NR = 16 columns, two neighbouring y panels
 * (y0, y1) and two row pairs of x (x0, x1), its three sums in 24 of the 32
 * registers (with mag32 the magnitudes' in 4), so that a term's vector
 * loads and broadcasts stay under its multiply-adds (the 2 x 8 tile has as
 * many loads as multiply-adds, and ran at half this one's speed on an
 * AVX-512 AMD EPYC).  Each element's terms are added in k order from zero,
 * as in tk__tile: the same bits.  The block's sums are then added into
 * run[0..2]. */
static inline __attribute__((always_inline)) void tk__tile16(const double *x0,
                                                             const double *x1,
                                                             const double *y0,
                                                             const double *y1, int64_t kc,
                                                             bool orig, bool mag32,
                                                             double run[3][4][2 * TK__NR])
{
    tk__d8 sum[3][4][2] = {{{{0}}}};
    tk__f16 mag[4] = {{0}};
    for (int64_t k = 0; k < kc; k++) {
        const tk__d8 *v[2] = {(const tk__d8 *)(y0 + k * 3 * TK__NR),
                              (const tk__d8 *)(y1 + k * 3 * TK__NR)};
        const double *xr[4] = {x0 + k * 6, x0 + k * 6 + 3, x1 + k * 6, x1 + k * 6 + 3};
        tk__f16 w = {0};
        if (mag32)
            w = __builtin_shufflevector(*(const tk__f8 *)(const void *)(v[0] + 1),
                                        *(const tk__f8 *)(const void *)(v[1] + 1), 0, 1, 2,
                                        3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            if (mag32)
                mag[r] += *(const float *)(const void *)(xr[r] + 1) * w;
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                sum[0][r][h] += xr[r][0] * v[h][0];
                if (!mag32)
                    sum[1][r][h] += xr[r][1] * v[h][1];
                if (orig)
                    sum[2][r][h] += xr[r][2] * v[h][2];
            }
        }
    }
    if (mag32)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            sum[1][r][0] = __builtin_convertvector(
                __builtin_shufflevector(mag[r], mag[r], 0, 1, 2, 3, 4, 5, 6, 7), tk__d8);
            sum[1][r][1] = __builtin_convertvector(
                __builtin_shufflevector(mag[r], mag[r], 8, 9, 10, 11, 12, 13, 14, 15), tk__d8);
        }
#pragma GCC unroll 3
    for (int q = 0; q < 3; q++)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
                if (q < 2 || orig)
                    *(tk__d8 *)(void *)(run[q][r] + h * TK__NR) += sum[q][r][h];
}

/* On the AVX-512 path, the 4 x 16 tiles of one packed x block (mc rows)
 * against every pair of y panels, over the nb packed KC-term blocks (kc[b]
 * terms each; x's xs doubles apart, y's ys), added into s, A and o (offset
 * to the block's first row); returns how many panels they covered, whose
 * last mc % 4 rows the caller's 2 x 8 tiles still owe.  Elsewhere, none.
 * A tile's running sums stay in run, in cache, over its nb blocks, so the
 * output in memory is read and written once per nb blocks (see TK__KO). */
TK__ON_AVX512 static void tk__wide_pairs(const double *xp, const double *yp, int64_t xs,
                                         int64_t ys, const int64_t *kc, int nb, int64_t mc,
                                         int64_t pairs, int64_t n, double *s, double *A,
                                         double *o, bool mag32)
{
    for (int64_t t = 0; t < pairs * 2; t += 2)
        for (int64_t r = 0; r + 4 <= mc; r += 4) {
            int64_t at = r * n + t * TK__NR, cols = n - t * TK__NR;
            double *const out[3] = {s + at, A + at, o ? o + at : NULL};
            double run[3][4][2 * TK__NR];
            cols = cols < 2 * TK__NR ? cols : 2 * TK__NR;
            if (cols < 2 * TK__NR)   /* columns past the matrix: summed, never stored */
                memset(run, 0, sizeof run);
            for (int q = 0; q < (o ? 3 : 2); q++)
                for (int i = 0; i < 4; i++)
                    if (cols == 2 * TK__NR)   /* inlined as vector moves */
                        memcpy(run[q][i], out[q] + i * n, sizeof run[q][i]);
                    else
                        memcpy(run[q][i], out[q] + i * n, (size_t)cols * sizeof(double));
            for (int b = 0; b < nb; b++) {
                const double *x0 = xp + b * xs + tk__xat(false, kc[b], r, 0, 0),
                             *y0 = yp + b * ys + t * kc[b] * 3 * TK__NR;
                const double *x1 = x0 + kc[b] * 6, *y1 = y0 + kc[b] * 3 * TK__NR;
                if (mag32)   /* three copies of the tile, one per kind of pass */
                    tk__tile16(x0, x1, y0, y1, kc[b], true, true, run);
                else if (o)
                    tk__tile16(x0, x1, y0, y1, kc[b], true, false, run);
                else
                    tk__tile16(x0, x1, y0, y1, kc[b], false, false, run);
            }
            for (int q = 0; q < (o ? 3 : 2); q++)
                for (int i = 0; i < 4; i++)
                    if (cols == 2 * TK__NR)
                        memcpy(out[q] + i * n, run[q][i], sizeof run[q][i]);
                    else
                        memcpy(out[q] + i * n, run[q][i], (size_t)cols * sizeof(double));
        }
}

/* The AVX2 tile: 6 rows by NR = 8 columns of one of the three sums (the
 * values', the magnitudes' or the originals'), into run.  Its 12
 * accumulators, two y vectors and a broadcast fill the 16 registers, so a
 * term takes 12 multiply-adds and only 8 loads: the 2 x 8 tile with its
 * three sums at once has as many loads as multiply-adds, and the loads
 * bound it.  xp holds the group's 6 rows of the sum per term (tk__xat), yp
 * the sum's panel, NR values per term.  Each element's terms are added in k
 * order from zero, as in tk__tile, and the block's sum to run: the same
 * bits. */
static inline __attribute__((always_inline)) void tk__tile6(const double *xp, const double *yp,
                                                            int64_t kc,
                                                            double run[][TK__NR])
{
    tk__d4 acc[TK__MR][2] = {{{0}}};
    for (int64_t k = 0; k < kc; k++) {
        const tk__d4 *v = (const tk__d4 *)(yp + k * TK__NR);
        tk__d4 v0 = v[0], v1 = v[1];
#pragma GCC unroll 6
        for (int r = 0; r < TK__MR; r++) {
            acc[r][0] += xp[k * TK__MR + r] * v0;
            acc[r][1] += xp[k * TK__MR + r] * v1;
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < TK__MR; r++) {
        *(tk__d4 *)(void *)run[r] += acc[r][0];
        *(tk__d4 *)(void *)(run[r] + 4) += acc[r][1];
    }
}

/* The AVX2 path's float32 magnitudes (mag32): g groups of 6 rows (x's
 * second xg doubles after the first) by NR columns (yp: the magnitudes'
 * panel, NR floats in each NR doubles), each row's eight sums in one
 * register.  Two groups give the 12 independent chains that keep
 * both multiply-add units busy through their latency; one group's 6 ran
 * at 59% of that rate.  The same order of terms as tk__tile: the same
 * bits. */
static inline __attribute__((always_inline)) void tk__tile_mag(const double *xp, int64_t xg,
                                                               const double *yp, int64_t kc,
                                                               int g,
                                                               double run[][TK__NR])
{
    tk__f8 m[2 * TK__MR] = {{0}};
    for (int64_t k = 0; k < kc; k++) {
        tk__f8 w = *(const tk__f8 *)(const void *)(yp + k * TK__NR);
#pragma GCC unroll 12
        for (int r = 0; r < g * TK__MR; r++)
            m[r] += *(const float *)(const void *)(xp + r / TK__MR * xg + k * TK__MR +
                                                   r % TK__MR) * w;
    }
#pragma GCC unroll 12
    for (int r = 0; r < g * TK__MR; r++)
        for (int c = 0; c < TK__NR; c++)
            run[r][c] += m[r][c];
}

/* On the AVX2 path, every row of one packed x block (mc rows, packed in
 * groups of 6; the last group's rows past mc are zeros, summed and never
 * stored) against every y panel, one sum at a time, over the nb packed
 * blocks, added into s, A and o as tk__wide_pairs does (first: the first
 * blocks of terms, which write them).  A column of tiles keeps its sums in
 * run, in cache, while one block's panel of y stays in cache and the
 * groups' rows of x stream past it; with both blocks' panels and a group's
 * rows at once, they filled most ways of the cache's sets.  y is packed in
 * a plane of panels per sum, so that a pass reads only lines of its own
 * sum (the three sums side by side cost 5% more time). */
TK__ON_AVX2 static void tk__groups_avx2(const double *xp, const double *yp, int64_t xs,
                                        int64_t ys, const int64_t *kc, int nb, int64_t mc,
                                        int64_t tiles, int64_t n, double *s, double *A,
                                        double *o, bool mag32, bool first)
{
    double *const plane[3] = {s, A, o};
    double run[TK__MC6][TK__NR];
    for (int q = 0; q < (o ? 3 : 2); q++) {
        /* Two groups at a time for the float32 magnitudes. */
        int64_t step = mag32 && q == 1 ? 2 * TK__MR : TK__MR;
        for (int64_t t = 0; t < tiles; t++) {
            int64_t cols = n - t * TK__NR < TK__NR ? n - t * TK__NR : TK__NR;
            double *out = plane[q] + t * TK__NR;
            /* The last group's padding rows too: summed, never stored. */
            for (int64_t i = 0; i < (mc + TK__MR - 1) / TK__MR * TK__MR; i++)
                if (first || i >= mc)
                    memset(run[i], 0, sizeof run[i]);
                else if (cols == TK__NR)   /* inlined as vector moves */
                    memcpy(run[i], out + i * n, sizeof run[i]);
                else
                    memcpy(run[i], out + i * n, (size_t)cols * sizeof(double));
            for (int b = 0; b < nb; b++) {
                const double *y0 = yp + b * ys + (q * tiles + t) * kc[b] * TK__NR;
                int64_t xg = 3 * kc[b] * TK__MR;   /* from one group's rows to the next's */
                for (int64_t r = 0; r < mc; r += step) {
                    const double *x0 = xp + b * xs + tk__xat(true, kc[b], r, 0, q);
                    /* The next column's output rows, which the walk down
                     * a column finds in memory, not in cache. */
                    for (int64_t i = r; !first && b == 0 && i < r + step && i < mc &&
                                        t + 1 < tiles; i++)
                        __builtin_prefetch(out + i * n + TK__NR, 1);
                    if (step == TK__MR)
                        tk__tile6(x0, y0, kc[b], run + r);
                    else if (mc - r > TK__MR)
                        tk__tile_mag(x0, xg, y0, kc[b], 2, run + r);
                    else
                        tk__tile_mag(x0, xg, y0, kc[b], 1, run + r);
                }
            }
            for (int64_t i = 0; i < mc; i++)
                if (cols == TK__NR)
                    memcpy(out + i * n, run[i], sizeof run[i]);
                else
                    memcpy(out + i * n, run[i], (size_t)cols * sizeof(double));
        }
    }
}

/* The wide tiles of the AVX-512 path over an x block: the panels they
 * covered, whose last mc % 4 rows the caller's 2 x 8 tiles still owe. */
static int64_t tk__wide(const double *xp, const double *yp, int64_t xs, int64_t ys,
                        const int64_t *kc, int nb, int64_t mc, int64_t tiles, int64_t n,
                        double *s, double *A, double *o, bool mag32)
{
    if (tk__isa() != TK__ISA_AVX512)
        return 0;
    tk__wide_pairs(xp, yp, xs, ys, kc, nb, mc, tiles / 2, n, s, A, o, mag32);
    return tiles / 2 * 2;
}
#else
static int64_t tk__wide(const double *xp, const double *yp, int64_t xs, int64_t ys,
                        const int64_t *kc, int nb, int64_t mc, int64_t tiles, int64_t n,
                        double *s, double *A, double *o, bool mag32)
{
    (void)xp, (void)yp, (void)xs, (void)ys, (void)kc, (void)nb, (void)mc, (void)tiles,
        (void)n, (void)s, (void)A, (void)o, (void)mag32;
    return 0;
}

static void tk__groups_avx2(const double *xp, const double *yp, int64_t xs, int64_t ys,
                            const int64_t *kc, int nb, int64_t mc, int64_t tiles, int64_t n,
                            double *s, double *A, double *o, bool mag32, bool first)
{
    (void)xp, (void)yp, (void)xs, (void)ys, (void)kc, (void)nb, (void)mc, (void)tiles,
        (void)n, (void)s, (void)A, (void)o, (void)mag32, (void)first;
}
#endif

/* The portable and AVX-512 paths over one packed x block (mc rows, in row
 * pairs), added into s, A and o (offset to its first row): the AVX-512
 * tiles where they fit, 2 x 8 tiles elsewhere. */
static inline __attribute__((always_inline)) void tk__pairs(const double *xp, const double *yp,
                                                            int64_t xs, int64_t ys,
                                                            const int64_t *kc, int nb,
                                                            int64_t mc, int64_t tiles, int64_t n,
                                                            double *s, double *A, double *o,
                                                            bool mag32)
{
    int64_t wide = tk__wide(xp, yp, xs, ys, kc, nb, mc, tiles, n, s, A, o, mag32);
    for (int64_t t = 0; t < tiles; t++)
        for (int64_t r = t < wide ? mc / 4 * 4 : 0; r < mc; r += 2)
            for (int b = 0; b < nb; b++) {
                tk__d4 acc[12];
                const double *xt = xp + b * xs + tk__xat(false, kc[b], r, 0, 0),
                             *yt = yp + b * ys + t * kc[b] * 3 * TK__NR;
                if (mag32)   /* three copies of the tile, one per kind of pass */
                    tk__tile(xt, yt, kc[b], true, true, acc);
                else if (o)
                    tk__tile(xt, yt, kc[b], true, false, acc);
                else
                    tk__tile(xt, yt, kc[b], false, false, acc);
                for (int64_t h = 0; h < 2 && r + h < mc; h++) {
                    int64_t at = (r + h) * n + t * TK__NR;
                    for (int64_t c = 0; c < TK__NR && t * TK__NR + c < n; c++) {
                        s[at + c] += acc[2 * h + c / 4][c % 4];
                        A[at + c] += acc[4 + 2 * h + c / 4][c % 4];
                        if (o)
                            o[at + c] += acc[8 + 2 * h + c / 4][c % 4];
                    }
                }
            }
}

/* Per output element, in float64: the oracle s, the sum of magnitudes A
 * (for the bound) and the original data's sum o (for the gap), over the
 * terms [0, k_end).  The products of two floats are exact in float64, so
 * only the additions round; each element's terms are added in a fixed
 * order (k order; for a matmul's main pass, blocks of KC in k order, each
 * block's sum added to the running one), whatever the path or the split of
 * rows between threads.  A matmul packs y by KC-term panels of NR columns
 * and x by MC-row blocks, KO blocks of terms at a time, and keeps each
 * tile's sums in registers over a panel (2 x NR with all three sums, 4 x 16
 * on the AVX-512 path, 6 x NR one sum at a time on the AVX2 path); its main
 * pass (o) with p->mag32 sums a block's magnitudes in float32 and adds that
 * sum to A.
 * round: each product rounded to p->dtype first (a diagnosis pass; no o). */
TK_DISPATCH(tk__sums, (const tk__pass *p, bool round, double *s, double *A, double *o,
                       double *pack), (p, round, s, A, o, pack))
{
    int64_t n = p->n, m = p->m;
    /* x packed for tk__groups_avx2, whose first blocks of terms write the
     * sums: no zeros before. */
    bool groups = TK__ISA_X86 && tk__isa() == TK__ISA_AVX2 && p->y && !round && p->k_end > 0;
    if (!groups) {
        memset(s, 0, (size_t)(m * n) * sizeof *s);
        memset(A, 0, (size_t)(m * n) * sizeof *A);
        if (o)
            memset(o, 0, (size_t)(m * n) * sizeof *o);
    }
    if (!p->y) {   /* a row sum: one column */
        for (int64_t i = 0; i < m; i++)
            for (int64_t k = 0; k < p->k_end; k++) {
                s[i] += p->x[i * p->k + k];
                A[i] += fabsf(p->x[i * p->k + k]);
                if (o)
                    o[i] += p->ox[i * p->k + k];
            }
        return;
    }
    if (round) {   /* the diagnosis only: row by row, k in order */
        for (int64_t i = 0; i < m; i++) {
            for (int64_t k = 0; k < p->k_end; k++) {
                double a = p->x[i * p->k + k];
                const float *yk = p->y + k * n;
                for (int64_t j = 0; j < n; j++) {
                    float t = tk__round_to(p->dtype, (float)(a * yk[j]));
                    s[i * n + j] += t;
                    A[i * n + j] += fabsf(t);
                }
            }
            if (p->tick && tk__tick(p, (double)(i + 1) / (double)m))
                return;
        }
        return;
    }
    int64_t tiles = (n + TK__NR - 1) / TK__NR;
    bool mag32 = p->mag32 && o;   /* the main pass */
    int64_t mcb = groups ? TK__MC6 : TK__MC;   /* x's rows packed at once */
    /* Up to KO blocks of KC terms packed at once: y's panels ys doubles
     * apart, x's xs (tk__pack_doubles counts them). */
    int64_t ys = TK__KC * tiles * TK__NR * 3, xs = TK__MC_PACK * TK__KC * 3, subs = tk__subs(p->k);
    double *yp = pack, *xp = pack + subs * ys;
    for (int64_t k0 = 0; k0 < p->k_end; k0 += subs * TK__KC) {
        int64_t kc[TK__KO], terms = 0;
        int nb = 0;
        for (; nb < subs && k0 + terms < p->k_end; nb++) {
            kc[nb] = p->k_end - k0 - terms < TK__KC ? p->k_end - k0 - terms : TK__KC;
            terms += kc[nb];
        }
        for (int b = 0; b < nb; b++)
            for (int64_t t = 0; t < tiles; t++)
                for (int64_t k = 0; k < kc[b]; k++) {
                    /* The three sums' values span apart: side by side, or
                     * with groups a plane of panels per sum. */
                    int64_t span = groups ? tiles * kc[b] * TK__NR : TK__NR;
                    double *d = yp + b * ys + (t * kc[b] + k) * (groups ? 1 : 3) * TK__NR,
                           *dv = d + span, *dox = dv + span;
                    float *dm = (float *)(void *)dv;
                    const float *yk = p->y + (k0 + b * TK__KC + k) * n;
                    const float *oyk = p->oy ? p->oy + (k0 + b * TK__KC + k) * n : NULL;
                    if ((t + 1) * TK__NR <= n) {   /* a whole panel: no tests, vectorized */
                        for (int64_t c = 0; c < TK__NR; c++) {
                            d[c] = yk[t * TK__NR + c];
                            if (mag32)
                                dm[c] = fabsf(yk[t * TK__NR + c]);
                            else
                                dv[c] = fabsf(yk[t * TK__NR + c]);
                            dox[c] = oyk ? oyk[t * TK__NR + c] : 0.0;
                        }
                        continue;
                    }
                    for (int64_t c = 0; c < TK__NR; c++) {
                        int64_t j = t * TK__NR + c;
                        d[c] = j < n ? yk[j] : 0.0;
                        if (mag32)
                            dm[c] = j < n ? fabsf(yk[j]) : 0.0f;
                        else
                            dv[c] = j < n ? fabsf(yk[j]) : 0.0;
                        dox[c] = j < n && oyk ? oyk[j] : 0.0;
                    }
                }
        for (int64_t i0 = 0; i0 < m; i0 += mcb) {
            int64_t mc = m - i0 < mcb ? m - i0 : mcb;
            /* An odd block's last row pads; so do a last group's rows. */
            int64_t packed = groups ? (mc + TK__MR - 1) / TK__MR * TK__MR
                                    : (mc + 1) / 2 * 2;
            for (int b = 0; b < nb; b++)
                for (int64_t r = 0; r < packed; r++)
                    for (int64_t k = 0; k < kc[b]; k++) {
                        double *d = xp + b * xs;
                        bool in = r < mc;
                        float v = in ? p->x[(i0 + r) * p->k + k0 + b * TK__KC + k] : 0.0f;
                        d[tk__xat(groups, kc[b], r, k, 0)] = v;
                        if (mag32)
                            *(float *)(void *)(d + tk__xat(groups, kc[b], r, k, 1)) = fabsf(v);
                        else
                            d[tk__xat(groups, kc[b], r, k, 1)] = fabsf(v);
                        d[tk__xat(groups, kc[b], r, k, 2)] =
                            in && p->ox ? p->ox[(i0 + r) * p->k + k0 + b * TK__KC + k] : 0.0;
                    }
            if (groups)
                tk__groups_avx2(xp, yp, xs, ys, kc, nb, mc, tiles, n, s + i0 * n, A + i0 * n,
                                o ? o + i0 * n : NULL, mag32, k0 == 0);
            else
                tk__pairs(xp, yp, xs, ys, kc, nb, mc, tiles, n, s + i0 * n, A + i0 * n,
                          o ? o + i0 * n : NULL, mag32);
            /* Done: k0 terms of every row, and terms more of the first i0 + mc. */
            if (p->tick && tk__tick(p, ((double)k0 + (double)terms * (double)(i0 + mc) /
                                        (double)m) / (double)p->k_end))
                return;
        }
    }
}

void tk__oracle_sums(const tk__pass *p, bool round, double *s, double *A, double *o,
                     double *pack)
{
    tk__sums(p, round, s, A, o, pack);
}
