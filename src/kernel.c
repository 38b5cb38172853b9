/* kernel.c - tk_kernel: bodies under the numeric contract, and the host
 * executor behind tk_kernel_run (tail strategies, staging, undo). */
#include "internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Elements per operand in one elementwise body call.  4 KiB of f32 keeps a
 * call's operands in L1, so the output lines saved for undo are still
 * cached when the body overwrites them (measured best of 512 to 4096). */
#define TK__SPAN 1024

/* Bytes of a panel of tiles (all operands) that a blockwise run reads
 * ahead in memory order: half the L2 of the development machine. */
#define TK__TOUCH (512 * 1024)

/* Output bytes from which the built-in body writes the output with
 * streaming stores, bypassing the cache: a quarter of the development
 * machine's L3, so the output would mostly be out of cache when the run
 * ends anyway. */
#define TK__STREAM ((size_t)8 << 20)

/* Rows a blockwise walk keeps open at once, and f32 elements per 64-byte
 * line. */
#define TK__GROUP 4
#define TK__LINE 16

/* ---- handles ------------------------------------------------------------ */

/* The handle is the first member, so a tk_kernel * is also a box *.  The
 * undo buffer is a cache that tk_kernel_run keeps across runs of a custom
 * kernel (a fresh buffer of the output's size costs a page fault per 4 KiB
 * on every run); undo_busy hands it to one run at a time. */
struct tk__kernel_box {
    tk_kernel k;
    atomic_flag undo_busy;
    void *undo;
    size_t undo_bytes;
};

static int tk__axpy_body(void *user, int64_t rows, int64_t cols, int64_t ld,
                         const float *const *in, float *out);

static int tk__kernel_new(tk_kernel **out, const char *fn, int n_inputs,
                          tk_body_fn body, void *user, bool is_axpy, float alpha)
{
    struct tk__kernel_box *b = malloc(sizeof *b);
    if (!b)
        return tk__fail(TK_ENOMEM, "%s: out of memory for the handle", fn);
    b->k = (tk_kernel){n_inputs, TK_BODY_ELEMENTWISE, body, user, is_axpy,
                       {alpha, false, TK_ARITH_NUMPY}, TK__REDUCE_NONE, TK_DTYPE_F32, true};
    if (is_axpy)
        b->k.user = &b->k.axpy;
    atomic_flag_clear(&b->undo_busy);
    b->undo = NULL;
    b->undo_bytes = 0;
    *out = &b->k;
    return TK_OK;
}

int tk_kernel_axpy(tk_kernel **out, float alpha)
{
    if (!out)
        return tk__fail(TK_EINVAL, "tk_kernel_axpy: out is NULL");
    *out = NULL;
    return tk__kernel_new(out, "tk_kernel_axpy", 2, tk__axpy_body, NULL, true, alpha);
}

int tk_kernel_custom(tk_kernel **out, int n_inputs, tk_body_fn body, void *user)
{
    if (!out)
        return tk__fail(TK_EINVAL, "tk_kernel_custom: out is NULL");
    *out = NULL;
    if (n_inputs < 1 || n_inputs > TK_KERNEL_MAX_INPUTS)
        return tk__fail(TK_ERANGE, "tk_kernel_custom: n_inputs must be in [1, %d]: got %d",
                        TK_KERNEL_MAX_INPUTS, n_inputs);
    if (!body)
        return tk__fail(TK_EINVAL, "tk_kernel_custom: body is NULL");
    return tk__kernel_new(out, "tk_kernel_custom", n_inputs, body, user, false, 0.0f);
}

/* Reductions have no body: the audit computes their oracle itself. */
static int tk__reduction_new(tk_kernel **out, const char *fn, int n_inputs, int reduce)
{
    if (!out)
        return tk__fail(TK_EINVAL, "%s: out is NULL", fn);
    *out = NULL;
    int rc = tk__kernel_new(out, fn, n_inputs, NULL, NULL, false, 0.0f);
    if (!rc)
        (*out)->reduce = reduce;
    return rc;
}

int tk_kernel_matmul(tk_kernel **out)
{
    return tk__reduction_new(out, "tk_kernel_matmul", 2, TK__REDUCE_MATMUL);
}

int tk_kernel_row_sum(tk_kernel **out)
{
    return tk__reduction_new(out, "tk_kernel_row_sum", 1, TK__REDUCE_ROW_SUM);
}

void tk_kernel_destroy(tk_kernel *k)
{
    if (!k)
        return;
    struct tk__kernel_box *b = (struct tk__kernel_box *)k;
    free(b->undo);
    free(b);
}

int tk_kernel_set(tk_kernel *k, int param, int64_t value)
{
    if (!k)
        return tk__fail(TK_EINVAL, "tk_kernel_set: kernel is NULL");
    if (param != TK_KERNEL_BODY && param != TK_KERNEL_INPUTS && param != TK_KERNEL_ARITH &&
        param != TK_KERNEL_ACCUM && param != TK_KERNEL_UNDO)
        return tk__fail(TK_EINVAL, "tk_kernel_set: unknown parameter %d", param);
    /* TK_KERNEL_INPUTS fails here as read-only. */
    int rc = tk__param_check("tk_kernel", param, value);
    if (rc)
        return rc;
    if (param == TK_KERNEL_BODY) {
        k->body_kind = (int)value;
        return TK_OK;
    }
    if (param == TK_KERNEL_UNDO) {
        k->undo = value;
        return TK_OK;
    }
    if (param == TK_KERNEL_ACCUM) {
        if (!k->reduce)
            return tk__fail(TK_EINVAL, "tk_kernel_set: TK_KERNEL_ACCUM is for reduction "
                            "contracts (tk_kernel_matmul, tk_kernel_row_sum)");
        if (value == TK_DTYPE_I32)
            return tk__fail(TK_EDTYPE, "tk_kernel_set: TK_KERNEL_ACCUM %lld (int32): a "
                            "reduction accumulates in float32, bfloat16 or float16",
                            (long long)value);
        k->accum = (int)value;
        return TK_OK;
    }
    if (!k->is_axpy && value != TK_ARITH_NUMPY)
        return tk__fail(TK_EINVAL, "tk_kernel_set: TK_KERNEL_ARITH %lld is for the built-in "
                        "bodies; a custom body's arithmetic is its own code",
                        (long long)value);
    k->axpy.arith = (int)value;
    return TK_OK;
}

int tk_kernel_get(const tk_kernel *k, int param, int64_t *value)
{
    if (!k || !value)
        return tk__fail(TK_EINVAL, "tk_kernel_get: %s is NULL", !k ? "kernel" : "value");
    switch (param) {
    case TK_KERNEL_BODY: *value = k->body_kind; return TK_OK;
    case TK_KERNEL_INPUTS: *value = k->n_inputs; return TK_OK;
    case TK_KERNEL_ARITH: *value = k->axpy.arith; return TK_OK;
    case TK_KERNEL_UNDO: *value = k->undo; return TK_OK;
    case TK_KERNEL_ACCUM:
        if (!k->reduce)
            return tk__fail(TK_EINVAL, "tk_kernel_get: TK_KERNEL_ACCUM is for reduction "
                            "contracts");
        *value = k->accum;
        return TK_OK;
    default:
        return tk__fail(TK_EINVAL, "tk_kernel_get: unknown parameter %d", param);
    }
}

int tk__kernel_apply(const tk_kernel *k, int64_t rows, int64_t cols, int64_t ld,
                     const float *const *in, float *out)
{
    int rc = k->body(k->user, rows, cols, ld, in, out);
    if (rc)
        return tk__fail(TK_ECALLBACK, "kernel body returned %d on a %lldx%lld region",
                        rc, (long long)rows, (long long)cols);
    return TK_OK;
}

/* ---- element loops ---------------------------------------------------------
 * No restrict: the output may be exactly an input, which is correct here
 * because each element is read before it is written; the compiler
 * vectorizes these loops behind a runtime overlap check. */

static void tk__axpy_f32(float *o, const float *x, const float *y, int64_t n, float a)
{
    for (int64_t i = 0; i < n; i++)
        o[i] = a * x[i] + y[i];
}

static void tk__axpy_bf16(uint16_t *o, const uint16_t *x, const uint16_t *y, int64_t n,
                          float a)
{
    for (int64_t i = 0; i < n; i++)
        o[i] = tk__bf16_from(a * tk__bf16_to(x[i]) + tk__bf16_to(y[i]));
}

/* Any dtype under any arithmetic, through f32 chunks: each chunk of x and
 * y is promoted before any of its results is stored, so o may be x or y. */
static void tk__axpy_any(int dtype, void *o, const void *x, const void *y, int64_t n,
                         float a, int arith)
{
    enum { CHUNK = 256 };
    float fx[CHUNK], fy[CHUNK];
    size_t es = (size_t)tk_dtype_size(dtype);
    for (int64_t i = 0; i < n; i += CHUNK) {
        int64_t m = n - i < CHUNK ? n - i : CHUNK;
        tk__row_to_f32(dtype, (const char *)x + (size_t)i * es, fx, m);
        tk__row_to_f32(dtype, (const char *)y + (size_t)i * es, fy, m);
        if (arith)
            for (int64_t j = 0; j < m; j++)
                fx[j] = tk__axpy_arith(a, fx[j], fy[j], arith);
        else
            tk__axpy_f32(fx, fx, fy, m, a);
        tk__row_from_f32(dtype, fx, (char *)o + (size_t)i * es, m);
    }
}

typedef float tk__vec __attribute__((vector_size(32)));

/* One line to a 64-byte aligned o by streaming stores, which write the line
 * without first reading its old contents from memory as an ordinary store
 * does.  Only x86 has them here; elsewhere the stores are ordinary. */
static inline void tk__axpy_line_nt(float *o, const float *x, const float *y, float a)
{
#if defined(__SSE2__)
    for (int k = 0; k < TK__LINE; k += 4) {
        __m128 vx, vy;
        memcpy(&vx, x + k, sizeof vx);
        memcpy(&vy, y + k, sizeof vy);
        _mm_stream_ps(o + k, _mm_add_ps(_mm_mul_ps(_mm_set1_ps(a), vx), vy));
    }
#else
    tk__axpy_f32(o, x, y, TK__LINE, a);
#endif
}

/* n elements of a line by 4-byte streaming stores: a line that two tiles
 * share is then written by streaming stores only (ordinary stores on the
 * shared lines, streaming ones elsewhere, measured about 1.6x slower on
 * 8x128 blocks of rows that straddle lines). */
static inline void tk__axpy_part_nt(float *o, const float *x, const float *y, int64_t n,
                                    float a)
{
#if defined(__SSE2__)
    for (int64_t i = 0; i < n; i++) {
        float v = a * x[i] + y[i];
        int bits;
        memcpy(&bits, &v, sizeof bits);
        _mm_stream_si32((int *)(void *)(o + i), bits);
    }
#else
    tk__axpy_f32(o, x, y, n, a);
#endif
}

/* Elements from o to its next 64-byte line boundary, at most n. */
static inline int64_t tk__skew(const float *o, int64_t n)
{
    int64_t k = (int64_t)((-(uintptr_t)o & 63) / sizeof *o);
    return k < n ? k : n;
}

/* A row of n elements by streaming stores only. */
static inline void tk__axpy_row_nt(float *o, const float *x, const float *y, int64_t n,
                                   float a)
{
    int64_t c = tk__skew(o, n);
    tk__axpy_part_nt(o, x, y, c, a);
    for (; c + TK__LINE <= n; c += TK__LINE)
        tk__axpy_line_nt(o + c, x + c, y + c, a);
    tk__axpy_part_nt(o + c, x + c, y + c, n - c, a);
}

/* n bf16 results to o, its whole 64-byte lines by streaming stores: each
 * line is computed into a buffer first, from x and y read before o is
 * written, so an output that is exactly an input stays correct. */
static inline void tk__axpy_bf16_nt(uint16_t *o, const uint16_t *x, const uint16_t *y,
                                    int64_t n, float a)
{
#if defined(__SSE2__)
    enum { L = 64 / sizeof *o };
    int64_t c = (int64_t)((-(uintptr_t)o & 63) / sizeof *o);
    c = c < n ? c : n;
    tk__axpy_bf16(o, x, y, c, a);
    for (; c + L <= n; c += L) {
        uint16_t t[L];
        tk__axpy_bf16(t, x + c, y + c, L, a);
        for (int k = 0; k < L; k += 8) {
            __m128i v;
            memcpy(&v, t + k, sizeof v);
            _mm_stream_si128((__m128i *)(void *)(o + c + k), v);
        }
    }
    tk__axpy_bf16(o + c, x + c, y + c, n - c, a);
#else
    tk__axpy_bf16(o, x, y, n, a);
#endif
}

/* The built-in body as a tk_body_fn: f32(f32(alpha*x) + y), or the
 * declared arithmetic, row by row.  Runs of the executor do not call it
 * (they compute on the matrices, see tk__axpy_rect); the pipeline, calls
 * and the audit do, on contiguous blocks. */
TK_DISPATCH_RET(int, tk__axpy_body,
                (void *user, int64_t rows, int64_t cols, int64_t ld, const float *const *in,
                 float *out),
                (user, rows, cols, ld, in, out))
{
    const struct tk__axpy *p = user;
    const float a = p->alpha;
    for (int64_t r = 0; r < rows; r++) {
        float *o = out + r * ld;
        const float *x = in[0] + r * ld, *y = in[1] + r * ld;
        if (p->arith)
            for (int64_t c = 0; c < cols; c++)
                o[c] = tk__axpy_arith(a, x[c], y[c], p->arith);
        else
            tk__axpy_f32(o, x, y, cols, a);
    }
    return 0;
}

/* Undo copies bypass the cache on x86: the saved old output is read back
 * only after a failed callback, and streaming it keeps it from evicting the
 * operands (a custom body measured about 1.25x the built-in this way, about
 * 2x with memcpy). */
static void tk__stream_copy(void *dst, const void *src, size_t bytes)
{
#if defined(__SSE2__)
    unsigned char *d = dst;
    const unsigned char *s = src;
    /* Only whole 64-byte lines are streamed: a line written partly by
     * streaming stores and partly by ordinary ones goes out to memory as a
     * slow partial write. */
    size_t head = (64 - ((uintptr_t)d & 63)) & 63;
    if (head > bytes)
        head = bytes;
    memcpy(d, s, head);
    d += head, s += head, bytes -= head;
    for (; bytes >= 64; bytes -= 64, d += 64, s += 64)
        for (int i = 0; i < 64; i += 16)
            _mm_stream_si128((__m128i *)(void *)(d + i),
                             _mm_loadu_si128((const __m128i *)(const void *)(s + i)));
    memcpy(d, s, bytes);
#else
    memcpy(dst, src, bytes);
#endif
}

static void tk__stream_fence(void)
{
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

/* ---- the executor ------------------------------------------------------------ */

typedef struct {
    int64_t r, c, h, w;
} tk__rect;

typedef struct {
    const tk_kernel *k;
    int dtype, n;
    int64_t rows, cols, br, bc;
    size_t esize;
    const unsigned char *in[TK_KERNEL_MAX_INPUTS];
    int64_t in_ld[TK_KERNEL_MAX_INPUTS];
    unsigned char *out;
    int64_t out_ld;
    bool direct;         /* f32 with one shared stride: bodies run on the matrices */
    struct tk__axpy axpy; /* the built-in body's parameters for such runs */
    unsigned char *undo; /* old output, dense rows x cols; NULL when none is kept */
    bool partial;        /* TK_KERNEL_UNDO 0: a failure may leave output written */
    bool stream_out;     /* custom elementwise results go out by streaming stores */
    float *scratch;      /* staging areas of `area` floats: one per input, and
                          * one for the result */
    int64_t area;
} tk__exec;

static inline const void *tk__in_at(const tk__exec *e, int i, int64_t r, int64_t c)
{
    return e->in[i] + (size_t)(r * e->in_ld[i] + c) * e->esize;
}
static inline void *tk__out_at(const tk__exec *e, int64_t r, int64_t c)
{
    return e->out + (size_t)(r * e->out_ld + c) * e->esize;
}
static inline unsigned char *tk__undo_at(const tk__exec *e, int64_t r, int64_t c)
{
    return e->undo + (size_t)(r * e->cols + c) * e->esize;
}

/* Staging converts between stored rows and f32 scratch 8 elements per
 * vector: scalar loops of a fixed length compile to unrolled scalar code,
 * and a memcpy call per short run costs more than the copy.  Scratch never
 * overlaps the matrices, so a run's last vector may go back over elements
 * already done, which leaves them as they are. */
typedef uint16_t tk__h8 __attribute__((vector_size(16)));
typedef uint32_t tk__u8 __attribute__((vector_size(32)));
typedef int32_t tk__i8 __attribute__((vector_size(32)));

static inline void tk__in8(int dtype, float *d, const unsigned char *s)
{
    if (dtype == TK_DTYPE_F32) {
        tk__vec v;
        memcpy(&v, s, sizeof v);
        memcpy(d, &v, sizeof v);
        return;
    }
    tk__h8 h;
    memcpy(&h, s, sizeof h);
    tk__u8 u = __builtin_convertvector(h, tk__u8) << 16;
    memcpy(d, &u, sizeof u);
}

/* tk__bf16_round on 8 lanes: nearest even, NaN kept quiet with its sign. */
static inline void tk__out8(int dtype, unsigned char *d, const float *s)
{
    if (dtype == TK_DTYPE_F32) {
        memcpy(d, s, 8 * sizeof *s);
        return;
    }
    tk__u8 u;
    memcpy(&u, s, sizeof u);
    tk__u8 r = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    tk__u8 nan = (u & 0x80000000u) | 0x7FC00000u;
    tk__u8 is_nan = (tk__u8)((tk__i8)(u & 0x7FFFFFFFu) > 0x7F800000);
    tk__h8 h = __builtin_convertvector(((r & ~is_nan) | (nan & is_nan)) >> 16, tk__h8);
    memcpy(d, &h, sizeof h);
}

/* f32 and bf16 take 8-lane vectors here; the other dtypes, rarer on this
 * path, their own bulk loops. */
static inline void tk__in_line(int dtype, float *d, const unsigned char *s, int64_t n)
{
    int64_t es = dtype == TK_DTYPE_F32 ? 4 : 2;
    if (n < 8 || (dtype != TK_DTYPE_F32 && dtype != TK_DTYPE_BF16)) {
        tk__row_to_f32(dtype, s, d, n);
        return;
    }
    for (int64_t j = 0; j < n; j += 8) {
        int64_t k = j + 8 <= n ? j : n - 8;
        tk__in8(dtype, d + k, s + k * es);
    }
}

static inline void tk__out_line(int dtype, unsigned char *d, const float *s, int64_t n)
{
    int64_t es = dtype == TK_DTYPE_F32 ? 4 : 2;
    if (n < 8 || (dtype != TK_DTYPE_F32 && dtype != TK_DTYPE_BF16)) {
        tk__row_from_f32(dtype, s, d, n);
        return;
    }
    for (int64_t j = 0; j < n; j += 8) {
        int64_t k = j + 8 <= n ? j : n - 8;
        tk__out8(dtype, d + k * es, s + k);
    }
}

/* An operand to stage: stored rows `pitch` bytes apart from s, f32 to d. */
typedef struct {
    const unsigned char *s;
    int64_t pitch;
    float *d;
} tk__src;

/* Stage h x w elements of operands a and b (b.s NULL: a alone) into f32
 * rows ld elements apart, TK__GROUP rows at a time, a line of each row and
 * both operands in turn: several short runs open at once keep the hardware
 * prefetchers busy where a row at a time leaves them waiting at every row
 * start, and a loop over any number of operands measured 10% slower than
 * pairs. */
TK_DISPATCH(tk__stage_pair, (int dtype, tk__src a, tk__src b, int64_t ld, int64_t h, int64_t w),
            (dtype, a, b, ld, h, w))
{
    int64_t es = tk_dtype_size(dtype), r = 0;
    for (; r + TK__GROUP <= h; r += TK__GROUP) {
        int64_t c = 0;
        for (; c + TK__LINE <= w; c += TK__LINE)
            for (int64_t g = r; g < r + TK__GROUP; g++) {
                tk__in_line(dtype, a.d + g * ld + c, a.s + g * a.pitch + c * es, TK__LINE);
                if (b.s)
                    tk__in_line(dtype, b.d + g * ld + c, b.s + g * b.pitch + c * es, TK__LINE);
            }
        for (int64_t g = r; g < r + TK__GROUP && c < w; g++) {
            tk__in_line(dtype, a.d + g * ld + c, a.s + g * a.pitch + c * es, w - c);
            if (b.s)
                tk__in_line(dtype, b.d + g * ld + c, b.s + g * b.pitch + c * es, w - c);
        }
    }
    for (; r < h; r++) {
        tk__in_line(dtype, a.d + r * ld, a.s + r * a.pitch, w);
        if (b.s)
            tk__in_line(dtype, b.d + r * ld, b.s + r * b.pitch, w);
    }
}

/* Stage the inputs at src into their scratch areas (rows ld apart), two at
 * a time. */
static void tk__stage_in(const tk__exec *e, tk__rect src, int64_t ld)
{
    tk__src op[TK_KERNEL_MAX_INPUTS + 1] = {{0}};
    for (int i = 0; i < e->n; i++)
        op[i] = (tk__src){tk__in_at(e, i, src.r, src.c), e->in_ld[i] * (int64_t)e->esize,
                          e->scratch + i * e->area};
    for (int i = 0; i < e->n; i += 2)
        tk__stage_pair(e->dtype, op[i], op[i + 1], ld, src.h, src.w);
}

/* h x w f32 results at src (rows ld apart) into stored rows `pitch` bytes
 * apart at dst, rounding once to `dtype`, in the order of tk__stage_pair. */
TK_DISPATCH(tk__stage_out, (int dtype, const float *src, int64_t ld, unsigned char *dst, int64_t pitch, int64_t h, int64_t w),
            (dtype, src, ld, dst, pitch, h, w))
{
    int64_t es = tk_dtype_size(dtype), r = 0;
    for (; r + TK__GROUP <= h; r += TK__GROUP) {
        int64_t c = 0;
        for (; c + TK__LINE <= w; c += TK__LINE)
            for (int64_t g = r; g < r + TK__GROUP; g++)
                tk__out_line(dtype, dst + g * pitch + c * es, src + g * ld + c, TK__LINE);
        for (int64_t g = r; g < r + TK__GROUP && c < w; g++)
            tk__out_line(dtype, dst + g * pitch + c * es, src + g * ld + c, w - c);
    }
    for (; r < h; r++)
        tk__out_line(dtype, dst + r * pitch, src + r * ld, w);
}

/* Inline, so that runs without undo pay only the test (an out-of-line
 * call per tile cost the 8x128 blockwise axpy a few percent). */
static inline void tk__save(const tk__exec *e, tk__rect g)
{
    if (!e->undo)
        return;
    for (int64_t i = 0; i < g.h; i++)
        tk__stream_copy(tk__undo_at(e, g.r + i, g.c), tk__out_at(e, g.r + i, g.c),
                        (size_t)g.w * e->esize);
}

/* Work is written in row-major order, so what a failed run has written is
 * rows [0, full) plus, below them, rows [full, end) left of column c. */
static void tk__restore(const tk__exec *e, int64_t full, int64_t end, int64_t c)
{
    if (!e->undo)
        return;
    tk__stream_fence();
    for (int64_t r = 0; r < end; r++)
        memcpy(tk__out_at(e, r, 0), tk__undo_at(e, r, 0),
               (size_t)(r < full ? e->cols : c) * e->esize);
}

/* The built-in axpy on rows of the matrices themselves, in their dtype.
 * One long run (a contiguous elementwise run) of a large output is
 * written by streaming stores. */
TK_DISPATCH(tk__axpy_rect, (const tk__exec *e, tk__rect g), (e, g))
{
    const struct tk__axpy *p = &e->axpy;
    bool stream = p->stream && g.h == 1 && g.w >= 2 * TK__LINE;
    for (int64_t i = 0; i < g.h; i++) {
        void *o = tk__out_at(e, g.r + i, g.c);
        const void *x = tk__in_at(e, 0, g.r + i, g.c), *y = tk__in_at(e, 1, g.r + i, g.c);
        if (e->dtype == TK_DTYPE_F32 && !p->arith && stream)
            tk__axpy_row_nt(o, x, y, g.w, p->alpha);
        else if (e->dtype == TK_DTYPE_F32 && !p->arith)
            tk__axpy_f32(o, x, y, g.w, p->alpha);
        else if (e->dtype == TK_DTYPE_BF16 && !p->arith && stream)
            tk__axpy_bf16_nt(o, x, y, g.w, p->alpha);
        else if (e->dtype == TK_DTYPE_BF16 && !p->arith)
            tk__axpy_bf16(o, x, y, g.w, p->alpha);
        else
            tk__axpy_any(e->dtype, o, x, y, g.w, p->alpha, p->arith);
    }
}

/* Kept out of tk__call so the call made for every tile stays small. */
static int tk__call_failed(const tk__exec *e, tk__rect g, int64_t h, int64_t w, int rc)
{
    return tk__fail(TK_ECALLBACK, "tk_kernel_run: kernel body returned %d on a %lldx%lld "
                    "region at row %lld, col %lld; the output is %s", rc, (long long)h,
                    (long long)w, (long long)g.r, (long long)g.c,
                    e->partial ? "partly written (TK_KERNEL_UNDO is 0)" : "unchanged");
}

static inline int tk__call(const tk__exec *e, void *user, tk__rect g, int64_t h, int64_t w,
                           int64_t ld, const float *const *in, float *out)
{
    int rc = e->k->body(user, h, w, ld, in, out);
    return rc ? tk__call_failed(e, g, h, w, rc) : TK_OK;
}

/* Run the body on an h x w area whose top-left src.h x src.w part holds the
 * operands at src (the rest zero) and write that part of the result to src.
 * `own` is the part of src not written before, saved for undo.  *touched
 * tells whether the output was written before the body returned. */
static int tk__region(const tk__exec *e, tk__rect src, int64_t h, int64_t w, tk__rect own,
                      bool *touched)
{
    const float *in[TK_KERNEL_MAX_INPUTS];
    if (e->direct && src.h == h && src.w == w) {
        for (int i = 0; i < e->n; i++)
            in[i] = tk__in_at(e, i, src.r, src.c);
        tk__save(e, own);
        float *out = tk__out_at(e, src.r, src.c);
        /* A large output takes a contiguous region's results from scratch
         * by streaming stores, as the built-in body writes it: ordinary
         * stores would first read each output line from memory. */
        if (e->stream_out && (h == 1 || e->out_ld == w)) {
            float *res = e->scratch + e->n * e->area;
            *touched = false;
            int rc = tk__call(e, e->k->user, src, h, w, e->out_ld, in, res);
            if (!rc)
                tk__stream_copy(out, res, (size_t)(h * w) * sizeof *out);
            return rc;
        }
        *touched = true;
        return tk__call(e, e->k->user, src, h, w, e->out_ld, in, out);
    }
    *touched = false;
    /* The built-in body reads each element before writing it, so its
     * result may overwrite staged input 0 (a smaller scratch stays in
     * cache: 256x512 blocks measured 5% faster). */
    float *res = e->scratch + e->n * e->area;
    for (int i = 0; i < e->n; i++) {
        float *d = e->scratch + i * e->area;
        /* The zero padding goes first: a pad of at most one vector is
         * cleared by a store ending at the row's end, and staging then
         * writes the valid part of it. */
        for (int64_t r = 0; r < h; r++) {
            int64_t valid = r < src.h ? src.w : 0;
            if (valid < w && w - valid <= 8 && w >= 8)
                memcpy(d + r * w + w - 8, &(tk__vec){0}, sizeof(tk__vec));
            else if (valid < w)
                memset(d + r * w + valid, 0, (size_t)(w - valid) * sizeof *d);
        }
        in[i] = d;
    }
    tk__stage_in(e, src, w);
    int rc = tk__call(e, e->k->user, src, h, w, w, in, res);
    if (rc)
        return rc;
    tk__save(e, own);
    tk__stage_out(e->dtype, res, w, tk__out_at(e, src.r, src.c), e->out_ld * (int64_t)e->esize,
                  src.h, src.w);
    return TK_OK;
}

static bool tk__contiguous(const tk__exec *e)
{
    for (int i = 0; i < e->n; i++)
        if (e->in_ld[i] != e->cols)
            return false;
    return e->out_ld == e->cols;
}

/* Elementwise bodies (mask, and pad on the padded copies): whole rows at a
 * time, or spans of rows; tiles play no part in the result. */
static int tk__run_elementwise(const tk__exec *e)
{
    if (e->k->is_axpy) {
        if (tk__contiguous(e))
            tk__axpy_rect(e, (tk__rect){0, 0, 1, e->rows * e->cols});
        else
            tk__axpy_rect(e, (tk__rect){0, 0, e->rows, e->cols});
        return TK_OK;
    }
    int64_t band = e->cols <= TK__SPAN ? TK__SPAN / e->cols : 1;
    for (int64_t r = 0; r < e->rows; r += band) {
        int64_t h = band < e->rows - r ? band : e->rows - r;
        for (int64_t c = 0; c < e->cols; c += TK__SPAN) {
            int64_t w = TK__SPAN < e->cols - c ? TK__SPAN : e->cols - c;
            tk__rect g = {r, c, h, w};
            bool touched;
            int rc = tk__region(e, g, h, w, g, &touched);
            if (rc) {
                if (!touched)
                    tk__restore(e, r, r + 1, c);
                else if (w == e->cols)
                    tk__restore(e, r + h, r + h, 0);
                else
                    tk__restore(e, r, r + 1, c + w);
                return rc;
            }
        }
    }
    return TK_OK;
}

/* Where tk__touch leaves what it read, so the reads are not optimized away. */
static atomic_uint tk__touched;

/* Read rows [r0, r0 + h), columns [c0, c0 + w) of every input, the inputs
 * side by side, through two 16-byte loads per 64-byte line: a loop paced
 * like a compute loop lets the hardware prefetchers run ahead (one byte
 * load per line measured about 20% slower).  The output is left to the
 * tiles' stores (reading it too measured slower). */
static void tk__touch(const tk__exec *e, int64_t r0, int64_t h, int64_t c0, int64_t w)
{
    typedef uint32_t tk__u4 __attribute__((vector_size(16)));
    tk__u4 acc = {0, 0, 0, 0};
    size_t bytes = (size_t)w * e->esize;
    for (int64_t r = r0; r < r0 + h; r++) {
        const unsigned char *p[TK_KERNEL_MAX_INPUTS];
        for (int i = 0; i < e->n; i++)
            p[i] = tk__in_at(e, i, r, c0);
        size_t b = 0;
        for (; b + 48 <= bytes; b += 64)
            for (int i = 0; i < e->n; i++) {
                tk__u4 lo, hi;
                memcpy(&lo, p[i] + b, sizeof lo);
                memcpy(&hi, p[i] + b + 32, sizeof hi);
                acc |= lo | hi;
            }
        for (int i = 0; i < e->n; i++)   /* the last line, when b stopped short */
            acc[0] |= p[i][bytes - 1];
    }
    atomic_store_explicit(&tk__touched, acc[0] | acc[1] | acc[2] | acc[3],
                          memory_order_relaxed);
}

/* Blockwise custom bodies see whole blocks, tiles in grid order;
 * shift-inwards runs elementwise bodies on blocks moved back inside the
 * matrix.
 *
 * A block visit keeps block_rows x operands short streams open at once,
 * which the hardware prefetchers follow badly (a row-by-row blockwise axpy
 * measured about 2x the fused loop).  When a panel of whole tiles fits
 * TK__TOUCH bytes (the output counted, which the tiles then write), its
 * inputs are first read in memory order and the tiles find them in cache
 * (8x128 f32 blocks: 1.3 to 1.45x the fused loop, against 2x without).
 * Larger tiles come from memory; reading them ahead into the L3 measured
 * slower. */
static int tk__run_tiles(const tk__exec *e, bool shifted)
{
    /* Panel width in columns, whole tiles; 0 when not even one fits. */
    int64_t pw = TK__TOUCH / ((e->n + 1) * e->br * (int64_t)e->esize) / e->bc * e->bc;
    if (shifted)
        pw = 0;
    for (int64_t r0 = 0; r0 < e->rows; r0 += e->br) {
        int64_t h = e->br < e->rows - r0 ? e->br : e->rows - r0;
        /* The built-in body is elementwise: it computes the moved blocks of
         * a tile row one matrix row at a time, the same work (overlaps
         * included) in memory order instead of block by block. */
        for (int64_t r = r0 + h - e->br; shifted && e->k->is_axpy && r < r0 + h; r++)
            for (int64_t c0 = 0; c0 < e->cols; c0 += e->bc) {
                int64_t w = e->bc < e->cols - c0 ? e->bc : e->cols - c0;
                tk__axpy_rect(e, (tk__rect){r, c0 + w - e->bc, 1, e->bc});
            }
        bool in_place = e->direct && !shifted && h == e->br;
        for (int64_t c0 = 0; c0 < e->cols && !(shifted && e->k->is_axpy); c0 += e->bc) {
            int64_t w = e->bc < e->cols - c0 ? e->bc : e->cols - c0;
            if (pw && c0 % pw == 0)
                tk__touch(e, r0, h, c0, pw < e->cols - c0 ? pw : e->cols - c0);
            tk__rect own = {r0, c0, h, w}, src = own;
            bool touched = true;
            int rc;
            if (in_place && w == e->bc) {
                /* A whole tile in place calls the body straight from here:
                 * little work between two body calls lets the processor
                 * start a tile's loads while the previous tile's are still
                 * in flight (through tk__region, the blockwise axpy
                 * measured 10 to 20% slower). */
                const float *in[TK_KERNEL_MAX_INPUTS];
                for (int i = 0; i < e->n; i++)
                    in[i] = tk__in_at(e, i, r0, c0);
                tk__save(e, own);
                rc = tk__call(e, e->k->user, own, h, w, e->out_ld, in,
                              tk__out_at(e, r0, c0));
            } else {
                if (shifted)
                    src = (tk__rect){r0 + h - e->br, c0 + w - e->bc, e->br, e->bc};
                rc = tk__region(e, src, e->br, e->bc, own, &touched);
            }
            if (rc) {
                tk__restore(e, r0, r0 + h, touched ? c0 + w : c0);
                return rc;
            }
        }
    }
    return TK_OK;
}

static void tk__exec_init(tk__exec *e, const tk_kernel *k, const tk_tiling *t,
                          const tk_matrix *const *in, const tk_matrix *out, bool aliased)
{
    *e = (tk__exec){.k = k, .dtype = out->dtype, .n = k->n_inputs, .rows = out->rows,
                    .cols = out->cols, .br = t->block_rows, .bc = t->block_cols,
                    .esize = (size_t)tk_dtype_size(out->dtype), .out = out->data,
                    .out_ld = out->stride};
    /* A custom body runs on the matrices when they are f32 with one
     * stride and its output is not an input; it is staged otherwise.  (The
     * built-in one computes on the matrices in their dtype: tk__axpy_rect.) */
    e->direct = e->dtype == TK_DTYPE_F32 && !aliased;
    for (int i = 0; i < e->n; i++) {
        e->in[i] = in[i]->data;
        e->in_ld[i] = in[i]->stride;
        e->direct = e->direct && in[i]->stride == out->stride;
    }
    e->axpy = k->axpy;
    e->axpy.stream = (size_t)(e->rows * e->cols) * e->esize >= TK__STREAM;
}

/* Staging areas for what a custom body cannot run on in place. */
static int tk__scratch(tk__exec *e, int tail, bool blockwise)
{
    bool edges = e->rows % e->br || e->cols % e->bc;
    e->area = 0;
    if (e->k->is_axpy)
        return TK_OK;
    if (blockwise && (!e->direct || edges))
        e->area = e->br * e->bc;   /* no overflow: at most the padded size */
    else if (!blockwise && !e->direct)
        e->area = tail == TK_TAIL_SHIFT_INWARDS ? e->br * e->bc : TK__SPAN;
    else if (!blockwise && tail == TK_TAIL_MASK && e->axpy.stream)
        e->area = TK__SPAN, e->stream_out = true;   /* the results' scratch */
    if (!e->area)
        return TK_OK;
    size_t bytes;
    int rc = tk__bytes(e->n + 1, e->area, sizeof(float), &bytes);
    if (rc)
        return rc;
    if (!(e->scratch = malloc(bytes)))
        return tk__fail(TK_ENOMEM, "tk_kernel_run: out of memory for %zu bytes of "
                        "staging", bytes);
    return TK_OK;
}

static int tk__dispatch(tk__exec *e, int tail)
{
    /* The built-in body is elementwise and never fails, so under either
     * body kind it computes in memory order: the same bits, the same
     * untouched-on-failure output (it cannot fail), no tile walk. */
    bool blockwise = e->k->body_kind == TK_BODY_BLOCKWISE && !e->k->is_axpy;
    int rc = tk__scratch(e, tail, blockwise);
    if (rc)
        return rc;
    if (blockwise)
        rc = tk__run_tiles(e, false);
    else if (tail == TK_TAIL_SHIFT_INWARDS)
        rc = tk__run_tiles(e, true);
    else
        rc = tk__run_elementwise(e);
    tk__stream_fence();   /* streamed lines are in memory before the caller reads them */
    free(e->scratch);
    return rc;
}

/* TK_TAIL_PAD: the seed's wrapper.  Zero-padded copies of every input and a
 * padded output; the body runs on them with no edge tiles; the output is
 * cropped once every body call has succeeded, so no undo is needed. */
static int tk__run_padded(const tk_kernel *k, const tk_tiling *t,
                          const tk_matrix *const *inputs, tk_matrix *output)
{
    tk_matrix *pin[TK_KERNEL_MAX_INPUTS] = {0}, *pout = NULL;
    int rc = TK_OK;
    for (int i = 0; i < k->n_inputs && !rc; i++)
        rc = tk_pad(t, inputs[i], &pin[i]);
    if (!rc)
        rc = tk_matrix_create(&pout, output->dtype, t->padded_rows, t->padded_cols);
    if (!rc) {
        tk__exec e;
        tk__exec_init(&e, k, t, (const tk_matrix *const *)pin, pout, false);
        rc = tk__dispatch(&e, TK_TAIL_PAD);
    }
    if (!rc)
        rc = tk_crop(t, pout, output);
    for (int i = 0; i < k->n_inputs; i++)
        tk_matrix_destroy(pin[i]);
    tk_matrix_destroy(pout);
    return rc;
}

/* ---- validation (the seed's order and wording) --------------------------------- */

static bool tk__overlap(const tk_matrix *a, const tk_matrix *b)
{
    const unsigned char *pa = a->data, *pb = b->data;
    size_t na = (size_t)((a->rows - 1) * a->stride + a->cols) * (size_t)tk_dtype_size(a->dtype);
    size_t nb = (size_t)((b->rows - 1) * b->stride + b->cols) * (size_t)tk_dtype_size(b->dtype);
    return (uintptr_t)pa < (uintptr_t)pb + nb && (uintptr_t)pb < (uintptr_t)pa + na;
}

int tk__kernel_validate(const char *fn, const tk_kernel *k, const tk_tiling *t,
                        const tk_matrix *const *inputs, const tk_matrix *output,
                        bool *aliased)
{
    if (!k || !t || !inputs || !output)
        return tk__fail(TK_EINVAL, "%s: %s is NULL", fn, !k ? "kernel" : !t ? "tiling"
                        : !inputs ? "inputs" : "output");
    if (k->reduce)
        return tk__fail(TK_EINVAL, "%s: a %s contract is audited under its error bound "
                        "(tk_audit_add_reduction_case), not run; write its kernel as a "
                        "tk_call", fn, k->reduce == TK__REDUCE_MATMUL ? "matmul" : "row-sum");
    for (int i = 0; i < k->n_inputs; i++)
        if (!inputs[i])
            return tk__fail(TK_EINVAL, "%s: input %d of %d is NULL", fn, i,
                            k->n_inputs);
    const tk_matrix *x = inputs[0];
    /* tk_matrix guarantees two positive dims, so "nonempty" holds already. */
    for (int i = 1; i < k->n_inputs; i++)
        if (inputs[i]->rows != x->rows || inputs[i]->cols != x->cols)
            return tk__fail(TK_ESHAPE, "%s: inputs must be nonempty matrices "
                            "with identical shapes: got %lldx%lld and %lldx%lld", fn,
                            (long long)x->rows, (long long)x->cols,
                            (long long)inputs[i]->rows, (long long)inputs[i]->cols);
    for (int i = 0; i < k->n_inputs; i++) {
        if (inputs[i]->dtype == x->dtype && tk__is_float_dtype(x->dtype))
            continue;
        if (k->n_inputs == 1)
            return tk__fail(TK_EDTYPE, "%s: an input of a float dtype ("
                            TK__FLOAT_DTYPES ") required: got %s", fn, tk_dtype_name(x->dtype));
        return tk__fail(TK_EDTYPE, "%s: inputs of one float dtype ("
                        TK__FLOAT_DTYPES ") required: got %s and %s", fn, tk_dtype_name(x->dtype),
                        tk_dtype_name(inputs[i ? i : 1]->dtype));
    }
    /* Positive block dims are guaranteed by tk_tiling_create. */
    if (output->rows != x->rows || output->cols != x->cols)
        return tk__fail(TK_ESHAPE, "%s: output must have the inputs' shape "
                        "%lldx%lld: got %lldx%lld", fn, (long long)x->rows, (long long)x->cols,
                        (long long)output->rows, (long long)output->cols);
    if (output->dtype != x->dtype)
        return tk__fail(TK_EDTYPE, "%s: output must be %s like the inputs: "
                        "got %s", fn, tk_dtype_name(x->dtype), tk_dtype_name(output->dtype));
    if (t->rows != x->rows || t->cols != x->cols)
        return tk__fail(TK_ESHAPE, "%s: the tiling is for %lldx%lld but the "
                        "inputs are %lldx%lld", fn, (long long)t->rows, (long long)t->cols,
                        (long long)x->rows, (long long)x->cols);
    if (t->tail == TK_TAIL_SHIFT_INWARDS && k->body_kind == TK_BODY_BLOCKWISE)
        return tk__fail(TK_ELAYOUT, "%s: shift-inwards would change the block "
                        "a blockwise body sees; use TK_TAIL_MASK or TK_TAIL_PAD", fn);
    *aliased = false;
    for (int i = 0; i < k->n_inputs; i++) {
        if (!tk__overlap(inputs[i], output))
            continue;
        if (inputs[i]->data != output->data || inputs[i]->stride != output->stride)
            return tk__fail(TK_ELAYOUT, "%s: the output overlaps input %d "
                            "without being the same matrix", fn, i);
        if (t->tail == TK_TAIL_SHIFT_INWARDS)
            return tk__fail(TK_ELAYOUT, "%s: shift-inwards recomputes overlapping "
                            "blocks and cannot write over input %d", fn, i);
        *aliased = true;
    }
    return TK_OK;
}

/* ---- tk_kernel_run --------------------------------------------------------------- */

void tk__kernel_axpy_run(const tk_kernel *k, const tk_matrix *const *inputs,
                         tk_matrix *output)
{
    tk_tiling t = {.rows = output->rows, .cols = output->cols, .block_rows = output->rows,
                   .block_cols = output->cols, .tail = TK_TAIL_MASK};
    tk__exec e;
    tk__exec_init(&e, k, &t, inputs, output, false);
    tk__dispatch(&e, TK_TAIL_MASK);
}

int tk_kernel_run(const tk_kernel *k, const tk_tiling *t, const tk_matrix *const *inputs,
                  tk_matrix *output)
{
    bool aliased = false;
    int rc = tk__kernel_validate("tk_kernel_run", k, t, inputs, output, &aliased);
    if (rc)
        return rc;
    if (t->tail == TK_TAIL_PAD)
        return tk__run_padded(k, t, inputs, output);

    tk__exec e;
    tk__exec_init(&e, k, t, inputs, output, aliased);
    e.partial = !k->undo;
    if (k->is_axpy || !k->undo)   /* the built-in body never fails */
        return tk__dispatch(&e, t->tail);

    size_t bytes;
    if ((rc = tk__bytes(e.rows, e.cols, (int64_t)e.esize, &bytes)))
        return rc;
    struct tk__kernel_box *b = (struct tk__kernel_box *)k;   /* only the cache changes */
    bool cached = !atomic_flag_test_and_set_explicit(&b->undo_busy, memory_order_acquire);
    if (cached && b->undo_bytes < bytes) {
        free(b->undo);
        b->undo = malloc(bytes);
        b->undo_bytes = b->undo ? bytes : 0;
    }
    e.undo = cached ? b->undo : malloc(bytes);
    if (!e.undo)
        rc = tk__fail(TK_ENOMEM, "tk_kernel_run: out of memory for %zu bytes of undo", bytes);
    else
        rc = tk__dispatch(&e, t->tail);
    tk__stream_fence();
    if (cached)
        atomic_flag_clear_explicit(&b->undo_busy, memory_order_release);
    else
        free(e.undo);
    return rc;
}
