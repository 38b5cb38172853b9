/* exec.c - the host executor behind tk_kernel_run: tail strategies,
 * staging of operands through f32, undo of a failed custom body. */
#include "internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if TK__ISA_X86
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Elements per operand in one elementwise body call.  4 KiB of f32 keeps a
 * call's operands in L1, so the output lines saved for undo are still
 * cached when the body overwrites them (measured best of 512 to 4096). */
#define TK__SPAN 1024

/* Elements per body call of a custom body's flat run, by vendor (the
 * figures are in tk__run_flat): 256 on an Intel Xeon, 512 on an AMD EPYC. */
static int64_t tk__flat_len(void)
{
    return tk__tune() == TK__TUNE_AMD ? 512 : 256;
}

/* Bytes of a run's results streamed out between two rounds of prefetches:
 * 256 on an Intel Xeon, the whole run on an AMD EPYC. */
static size_t tk__flat_piece(void)
{
    return tk__tune() == TK__TUNE_AMD ? SIZE_MAX : 256;
}

/* The run length of a staged flat run, which fetches two runs ahead (on
 * an Intel Xeon a 4096x4096 bfloat16 run took 1.9 to 2.0 times the
 * built-in body's time with runs of 512 or 1024, 2.1 to 2.2 with 256). */
#define TK__STAGED_RUN 512

/* The most bytes of a blockwise run's band of results (tk__run_tiles):
 * half the L2 of an AMD EPYC Zen 3.  There, on 4096x4096 float32 with
 * TK_KERNEL_UNDO 0, 8x128 tiles through the band took 13.0 to 14.2 ms
 * where they took 15.5 to 16.3 writing the output in place, 8x256 14.4
 * where 17.5 (alternating processes); 256x512 tiles, whose band would be
 * 4 MiB, none faster. */
#define TK__BAND (256 * 1024)

/* Rows a blockwise walk keeps open at once. */
#define TK__GROUP 4

/* Rows ahead that staging fetches, within a tile: a staged custom
 * blockwise body on 256x512 bfloat16 tiles of a 4096x4096 run took 24.6 ms
 * on an Intel Xeon without, 17.0 to 17.3 with 32 (17.2 to 17.7 with 16,
 * 18.4 with 8), its 256 short rows of each operand a poor match for the
 * hardware prefetchers. */
#define TK__STAGE_AHEAD 32

#if TK__ISA_X86
/* Whole 64-byte lines (bytes a multiple of 64, d on a line) by the widest
 * streaming store the path has: one per line on AVX-512, where four
 * 16-byte ones held a staged bulk bf16 narrowing to 0.9 to 1.4 times a
 * streaming copy's time on an Intel Xeon. */
TK__ON_AVX512 static void tk__stream_lines_512(unsigned char *d, const unsigned char *s,
                                               size_t bytes)
{
    for (size_t i = 0; i < bytes; i += 64)
        _mm512_stream_si512((void *)(d + i), _mm512_loadu_si512((const void *)(s + i)));
}

TK__ON_AVX512 static void tk__stream_fill_512(unsigned char *d, int byte, size_t bytes)
{
    for (size_t i = 0; i < bytes; i += 64)
        _mm512_stream_si512((void *)(d + i), _mm512_set1_epi8((char)byte));
}

TK__ON_AVX2 static void tk__stream_lines_256(unsigned char *d, const unsigned char *s,
                                             size_t bytes)
{
    for (size_t i = 0; i < bytes; i += 32)
        _mm256_stream_si256((__m256i *)(void *)(d + i),
                            _mm256_loadu_si256((const __m256i *)(const void *)(s + i)));
}
#endif

/* Undo copies bypass the cache on x86: the saved old output is read back
 * only after a failed callback, and streaming it keeps it from evicting the
 * operands (a custom body measured about 1.25x the built-in this way, about
 * 2x with memcpy). */
void tk__stream_copy(void *dst, const void *src, size_t bytes)
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
    size_t whole = bytes / 64 * 64;
#if TK__ISA_X86
    if (tk__isa() == TK__ISA_AVX512)
        tk__stream_lines_512(d, s, whole);
    else if (tk__isa() == TK__ISA_AVX2)
        tk__stream_lines_256(d, s, whole);
    else
#endif
        for (size_t i = 0; i < whole; i += 16)
            _mm_stream_si128((__m128i *)(void *)(d + i),
                             _mm_loadu_si128((const __m128i *)(const void *)(s + i)));
    memcpy(d + whole, s + whole, bytes - whole);
#else
    memcpy(dst, src, bytes);
#endif
}

/* memset by the same whole-line streaming stores (one per line on
 * AVX-512: the audit's fill of a candidate's output, beside three planes
 * streamed the same way). */
void tk__stream_fill(void *dst, int byte, size_t bytes)
{
#if defined(__SSE2__)
    unsigned char *d = dst;
    size_t head = (64 - ((uintptr_t)d & 63)) & 63;
    if (head > bytes)
        head = bytes;
    memset(d, byte, head);
    d += head, bytes -= head;
    size_t whole = bytes / 64 * 64;
#if TK__ISA_X86
    if (tk__isa() == TK__ISA_AVX512)
        tk__stream_fill_512(d, byte, whole);
    else
#endif
        for (size_t i = 0; i < whole; i += 16)
            _mm_stream_si128((__m128i *)(void *)(d + i), _mm_set1_epi8((char)byte));
    memset(d + whole, byte, bytes - whole);
#else
    memset(dst, byte, bytes);
#endif
}

void tk__stream_fence(void)
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
    const tk__runner *by;
    const tk_kernel *k;
    int dtype, n;
    int64_t rows, cols, br, bc;
    size_t esize;
    const unsigned char *in[TK_KERNEL_MAX_INPUTS];
    int64_t in_ld[TK_KERNEL_MAX_INPUTS];
    unsigned char *out;
    int64_t out_ld;
    bool direct;         /* f32 with one shared stride: bodies run on the matrices */
    unsigned char *undo; /* old output, dense rows x cols; NULL when none is kept */
    bool partial;        /* undo off: a failure may leave output written */
    bool stream_out;     /* custom elementwise results go out by streaming stores */
    float *scratch;      /* staging areas of `area` floats: one per input, and
                          * one for the result */
    float *band;         /* a blockwise body's results for a tile row in place
                          * (br x out_ld floats, in scratch), or NULL */
    int64_t area;
    bool stream;         /* the output is large: the built-in body streams it */
    int64_t row0;        /* threads: this band's first row of the matrices */
    atomic_bool *stop;   /* threads: set when a body of any band failed */
} tk__exec;

/* What a band's run returns when another band's failure stopped it. */
enum { TK__STOPPED = 1 };

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
typedef float tk__vec __attribute__((vector_size(32)));
typedef uint16_t tk__h8 __attribute__((vector_size(16)));
typedef uint32_t tk__u8 __attribute__((vector_size(32)));

static inline void tk__in8(int dtype, float *d, const unsigned char *s)
{
    if (dtype == TK_DTYPE_F32) {
        tk__vec v;
        memcpy(&v, s, sizeof v);
        memcpy(d, &v, sizeof v);
        return;
    }
    /* Lane by lane, not __builtin_convertvector, which gcc 12 splits into
     * two 128-bit widenings and a merge where this is one vpmovzxwd. */
    tk__h8 h;
    memcpy(&h, s, sizeof h);
    tk__u8 u = {h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]};
    u <<= 16;
    memcpy(d, &u, sizeof u);
}

typedef int32_t tk__i8 __attribute__((vector_size(32)));

/* 8 results rounded once to the dtype, by the rule of tk__bf16_round. */
static inline void tk__out8(int dtype, unsigned char *d, const float *s)
{
    if (dtype == TK_DTYPE_F32) {
        memcpy(d, s, 8 * sizeof *s);
        return;
    }
    tk__u8 u;
    memcpy(&u, s, sizeof u);
    tk__u8 r = TK__BF16_ROUND(u, (tk__u8)((tk__i8)(u & 0x7FFFFFFFu) > 0x7F800000));
    tk__h8 h = __builtin_convertvector(r >> 16, tk__h8);
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
    int64_t es = tk__esize(dtype), r = 0;
    for (; r + TK__GROUP <= h; r += TK__GROUP) {
        int64_t c = 0;
        for (; c + TK__LINE <= w; c += TK__LINE)
            for (int64_t g = r; g < r + TK__GROUP; g++) {
                if (g + TK__STAGE_AHEAD < h) {
                    __builtin_prefetch(a.s + (g + TK__STAGE_AHEAD) * a.pitch + c * es);
                    if (b.s)
                        __builtin_prefetch(b.s + (g + TK__STAGE_AHEAD) * b.pitch + c * es);
                }
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
    /* Only the entries read are set: zeroing the whole array (a string
     * store) and reading it back stalled each call, a tenth of a staged
     * run's time. */
    tk__src op[TK_KERNEL_MAX_INPUTS + 1];
    for (int i = 0; i < e->n; i++)
        op[i] = (tk__src){tk__in_at(e, i, src.r, src.c), e->in_ld[i] * (int64_t)e->esize,
                          e->scratch + i * e->area};
    op[e->n] = (tk__src){NULL, 0, NULL};   /* an odd count's pair: b.s NULL */
    for (int i = 0; i < e->n; i += 2)
        tk__stage_pair(e->dtype, op[i], op[i + 1], ld, src.h, src.w);
}

/* h x w f32 results at src (rows ld apart) into stored rows `pitch` bytes
 * apart at dst, rounding once to `dtype`, in the order of tk__stage_pair. */
TK_DISPATCH(tk__stage_out, (int dtype, const float *src, int64_t ld, unsigned char *dst, int64_t pitch, int64_t h, int64_t w),
            (dtype, src, ld, dst, pitch, h, w))
{
    int64_t es = tk__esize(dtype), r = 0;
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
 * `stream`: a large output written by streaming stores, for one long run
 * (a contiguous elementwise run), or short pieces of f32 rows, whose lines
 * shared with other pieces are streamed too (bf16 pieces would write those
 * with ordinary stores, and a line written both ways goes out slowly). */
static void tk__axpy_rect(const tk__exec *e, tk__rect g, bool stream)
{
    stream = stream && g.h == 1 && g.w >= 2 * TK__LINE;
    for (int64_t i = 0; i < g.h; i++)
        tk__axpy_row(&e->k->axpy, e->dtype, tk__out_at(e, g.r + i, g.c),
                     tk__in_at(e, 0, g.r + i, g.c), tk__in_at(e, 1, g.r + i, g.c), g.w, stream);
}

/* Kept out of tk__call so the call made for every tile stays small. */
static int tk__call_failed(const tk__exec *e, tk__rect g, int64_t h, int64_t w, int rc)
{
    return tk__fail(TK_ECALLBACK, "%s: kernel body returned %d on a %lldx%lld region at "
                    "row %lld, col %lld; the output %s%s%s", e->by->fn, rc, (long long)h,
                    (long long)w, (long long)(e->row0 + g.r), (long long)g.c,
                    e->partial ? "may be partly written (" : "is unchanged",
                    e->partial ? e->by->undo_param : "", e->partial ? " is 0)" : "");
}

static inline int tk__call(const tk__exec *e, tk__rect g, int64_t h, int64_t w,
                           int64_t ld, const float *const *in, float *out)
{
    if (e->stop && atomic_load_explicit(e->stop, memory_order_relaxed))
        return TK__STOPPED;
    int rc = tk__body(e->k, h, w, ld, in, out);
    if (rc && e->stop)
        atomic_store_explicit(e->stop, true, memory_order_relaxed);
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
            int rc = tk__call(e, src, h, w, e->out_ld, in, res);
            if (!rc)
                tk__stream_copy(out, res, (size_t)(h * w) * sizeof *out);
            return rc;
        }
        *touched = true;
        return tk__call(e, src, h, w, e->out_ld, in, out);
    }
    *touched = false;
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
    int rc = tk__call(e, src, h, w, w, in, res);
    if (rc)
        return rc;
    tk__save(e, own);
    if (e->stream_out) {
        /* A large output takes each row rounded into scratch, then streamed:
         * ordinary stores would read each output line first (on an Intel
         * Xeon, 256x512 bfloat16 tiles of a 4096x4096 run took 15 ms this
         * way where they took 17.5). */
        unsigned char *row = (unsigned char *)(res + e->area);
        for (int64_t r = 0; r < src.h; r++) {
            tk__row_from_f32(e->dtype, res + r * w, row, src.w);
            tk__stream_copy(tk__out_at(e, src.r + r, src.c), row, (size_t)src.w * e->esize);
        }
        return TK_OK;
    }
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

/* A custom elementwise body on matrices of one contiguous run: spans of
 * the run, each body's results streamed out from scratch.  Nothing else
 * happens between two body calls: through tk__region, span by span along
 * rows, the same work measured 1.2x slower.  Matrices in another dtype
 * than f32 are staged: each span's inputs to f32 scratch, and its results
 * rounded to the dtype in scratch of their own before they go out (on an
 * Intel Xeon a 4096x4096 bfloat16 run took 3.2 times the built-in body's
 * time through tk__region, whose ordinary stores read every output line
 * first and whose spans wait for their inputs). */
static int tk__run_flat(const tk__exec *e)
{
    int64_t n = e->rows * e->cols, es = (int64_t)e->esize;
    int64_t run = e->direct ? tk__flat_len() : TK__STAGED_RUN, reach = 2 * run;
    float *res = e->scratch + e->n * e->area;
    const void *out = e->direct ? (void *)res : (void *)(res + e->area);
    for (int64_t at = 0; at < n; at += run) {
        int64_t w = run < n - at ? run : n - at;
        const float *in[TK_KERNEL_MAX_INPUTS];
        for (int i = 0; i < e->n; i++) {
            in[i] = e->direct ? tk__in_at(e, i, 0, at) : e->scratch + i * e->area;
            if (!e->direct)
                tk__row_to_f32(e->dtype, tk__in_at(e, i, 0, at), (float *)in[i], w);
        }
        int rc = tk__call(e, (tk__rect){at / e->cols, at % e->cols, 1, w}, 1, w, w, in, res);
        if (rc) {
            tk__restore(e, at / e->cols, at / e->cols + 1, at % e->cols);
            return rc;
        }
        tk__save(e, (tk__rect){0, at, 1, w});
        if (!e->direct)
            tk__row_from_f32(e->dtype, res, (void *)out, w);
        /* The results go out in pieces of whole lines, and after each the
         * inputs of the same elements two runs on (and their old output,
         * for the undo copy) are fetched: one core's reads are the limit.
         * Fetched in one burst before the call, they held the body up: on
         * an Intel Xeon a custom body without undo read 1.21-1.26 the
         * built-in with no prefetch, 1.07-1.17 with runs of 512 and the
         * next one's fetched, 1.24-1.33 with runs of 1024, 0.94-0.96 with
         * runs of 256 two calls ahead (spread so, the same).  On an AMD
         * EPYC (Zen 4), in bench_kernel, bursts read 1.49-2.16 with runs of
         * 256 and 1.08-1.44 with 512; spread, 0.83-1.42 with 512 and up to
         * 1.75 with 256: tk__flat_len picks the run length by vendor.  (The
         * high readings were runs whose scratch malloc put off a cache
         * line; on one, 0.84-0.92.)  On an AMD EPYC (Zen 3), in runs of one
         * process taking turns, pieces of 256 bytes read 1.50-1.63 the
         * built-in, the whole run at once 1.30-1.34 (with no prefetch
         * 1.24-1.38, runs of 256 the same): tk__flat_piece.  Those AMD
         * figures fetched one run ahead; on the Zen 3, two runs ahead read
         * 1.19-1.24 where one read 1.30-1.39 (four or eight, 1.31-1.33),
         * as the Xeon's runs of 256 already fetched. */
        char *d = (char *)tk__out_at(e, 0, at);
        size_t bytes = (size_t)(w * es), off = 0, piece = tk__flat_piece();
        size_t len = (64 - ((uintptr_t)d & 63)) & 63;   /* up to d's first whole line */
        int64_t ahead = at + reach, next = run < n - ahead ? run : n - ahead, b = 0;
        for (len = len ? len : piece; off < bytes; off += len, len = piece) {
            len = len < bytes - off ? len : bytes - off;
            tk__stream_copy(d + off, (const char *)out + off, len);
            for (; b < next && b < (int64_t)(off + len) / es; b += 64 / es) {   /* a line */
                for (int i = 0; i < e->n; i++)
                    __builtin_prefetch(tk__in_at(e, i, 0, ahead + b));
                if (e->undo)
                    __builtin_prefetch(tk__out_at(e, 0, ahead + b));
            }
        }
    }
    return TK_OK;
}

/* Elementwise bodies (mask, and pad on the padded copies): whole rows at a
 * time, or spans of rows; tiles play no part in the result. */
static int tk__run_elementwise(const tk__exec *e)
{
    if (e->k->is_axpy) {
        if (tk__contiguous(e))
            tk__axpy_rect(e, (tk__rect){0, 0, 1, e->rows * e->cols}, e->stream);
        else
            tk__axpy_rect(e, (tk__rect){0, 0, e->rows, e->cols}, e->stream);
        return TK_OK;
    }
    if (e->stream_out && tk__contiguous(e))
        return tk__run_flat(e);
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

/* Two 16-byte loads per 64-byte line: a loop paced like a compute loop
 * lets the hardware prefetchers run ahead (one byte load per line measured
 * about 20% slower). */
void tk__read_ahead(const unsigned char *const *p, int n, size_t bytes)
{
    typedef uint32_t tk__u4 __attribute__((vector_size(16)));
    tk__u4 acc = {0, 0, 0, 0};
    size_t b = 0;
    for (; b + 48 <= bytes; b += 64)
        for (int i = 0; i < n; i++) {
            tk__u4 lo, hi;
            memcpy(&lo, p[i] + b, sizeof lo);
            memcpy(&hi, p[i] + b + 32, sizeof hi);
            acc |= lo | hi;
        }
    for (int i = 0; i < n; i++)   /* the last line, when b stopped short */
        acc[0] |= p[i][bytes - 1];
    volatile unsigned sink = acc[0] | acc[1] | acc[2] | acc[3];
    (void)sink;
}

/* Read rows [r0, r0 + h), columns [c0, c0 + w) of every input, the inputs
 * side by side.  The output is left to the tiles' stores (reading it too
 * measured slower). */
static void tk__touch(const tk__exec *e, int64_t r0, int64_t h, int64_t c0, int64_t w)
{
    for (int64_t r = r0; r < r0 + h; r++) {
        const unsigned char *p[TK_KERNEL_MAX_INPUTS];
        for (int i = 0; i < e->n; i++)
            p[i] = tk__in_at(e, i, r, c0);
        tk__read_ahead(p, e->n, (size_t)w * e->esize);
    }
}

/* The band's results, columns [0, w), streamed out to rows
 * [to, to + e->br) of the output. */
static void tk__flush(const tk__exec *e, int64_t to, int64_t w)
{
    for (int64_t i = 0; i < e->br; i++)
        tk__stream_copy(tk__out_at(e, to + i, 0), e->band + i * e->out_ld,
                        (size_t)w * sizeof *e->band);
}

/* tk__touch of rows [r0, r0 + h), columns [0, tw), and tk__flush of the
 * band's results to rows [to, to + e->br), columns [0, fw), a KiB of each
 * row in turn: reads and writes in flight together, as in a fused loop. */
static void tk__touch_flush(const tk__exec *e, int64_t r0, int64_t h, int64_t tw, int64_t to,
                            int64_t fw)
{
    size_t tb = (size_t)tw * e->esize, fb = (size_t)fw * sizeof *e->band, chunk = 1024;
    for (int64_t i = 0; i < e->br || i < h; i++)
        for (size_t off = 0; off < tb || off < fb; off += chunk) {
            if (i < h && off < tb)   /* (whole elements: a band is only on f32 matrices) */
                tk__touch(e, r0 + i, 1, (int64_t)(off / e->esize),
                          (int64_t)((tb - off < chunk ? tb - off : chunk) / e->esize));
            if (i < e->br && off < fb)
                tk__stream_copy((char *)tk__out_at(e, to + i, 0) + off,
                                (const char *)(e->band + i * e->out_ld) + off,
                                fb - off < chunk ? fb - off : chunk);
        }
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
    /* Where one panel is a whole tile row, the band's results of a tile
     * row go out while the next one's inputs are read (pending: the rows
     * they go to; full: their columns, the whole tiles).  On an AMD EPYC
     * Zen 3, 4096x4096 f32 against the fused streaming loop: 8x128 tiles
     * 1.39-1.55 where each tile's went out after its body 1.52-1.60, 8x256
     * 1.31-1.37 where 1.39-1.43 (a KiB of each row in turn; 256 bytes or
     * 4 KiB and more, no better).  Reading the next tile row's inputs a
     * tile at a time, after each body, took 2.5-2.7. */
    bool defer = e->band && pw >= e->cols;
    int64_t pending = -1, full = e->cols / e->bc * e->bc;
    for (int64_t r0 = 0; r0 < e->rows; r0 += e->br) {
        int64_t h = e->br < e->rows - r0 ? e->br : e->rows - r0;
        /* The built-in body is elementwise: it computes the moved blocks of
         * a tile row one matrix row at a time, the same work (overlaps
         * included) in memory order instead of block by block. */
        for (int64_t r = r0 + h - e->br; shifted && e->k->is_axpy && r < r0 + h; r++)
            for (int64_t c0 = 0; c0 < e->cols; c0 += e->bc) {
                int64_t w = e->bc < e->cols - c0 ? e->bc : e->cols - c0;
                tk__axpy_rect(e, (tk__rect){r, c0 + w - e->bc, 1, e->bc},
                              e->stream && e->dtype == TK_DTYPE_F32);
            }
        bool in_place = e->direct && !shifted && h == e->br;
        for (int64_t c0 = 0; c0 < e->cols && !(shifted && e->k->is_axpy); c0 += e->bc) {
            int64_t w = e->bc < e->cols - c0 ? e->bc : e->cols - c0;
            if (pending >= 0 && c0 == 0) {
                tk__touch_flush(e, r0, h, e->cols, pending, full);
                pending = -1;
            } else if (pw && c0 % pw == 0) {
                tk__touch(e, r0, h, c0, pw < e->cols - c0 ? pw : e->cols - c0);
            }
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
                float *res = e->band ? e->band + c0 : tk__out_at(e, r0, c0);
                rc = tk__call(e, own, h, w, e->out_ld, in, res);
                for (int64_t r = 0; e->band && !defer && !rc && r < h; r++)
                    tk__stream_copy(tk__out_at(e, r0 + r, c0), res + r * e->out_ld,
                                    (size_t)w * sizeof *res);
            } else {
                if (shifted)
                    src = (tk__rect){r0 + h - e->br, c0 + w - e->bc, e->br, e->bc};
                rc = tk__region(e, src, e->br, e->bc, own, &touched);
            }
            if (rc) {
                if (defer && in_place)   /* the row's tiles before, as written without defer */
                    tk__flush(e, r0, c0);
                tk__restore(e, r0, r0 + h, touched ? c0 + w : c0);
                return rc;
            }
        }
        if (defer && in_place)
            pending = r0;
    }
    if (pending >= 0)
        tk__flush(e, pending, full);
    return TK_OK;
}

static void tk__exec_init(tk__exec *e, const tk__runner *by, const tk_kernel *k,
                          const tk_tiling *t, const tk_matrix *const *in,
                          const tk_matrix *out, bool aliased)
{
    *e = (tk__exec){.by = by, .k = k, .dtype = out->dtype, .n = k->n_inputs, .rows = out->rows,
                    .cols = out->cols, .br = t->block_rows, .bc = t->block_cols,
                    .esize = (size_t)tk__esize(out->dtype), .out = out->data,
                    .out_ld = out->stride};
    /* A custom body runs on the matrices when they are f32 with one
     * stride and its output is not an input; it is staged otherwise.  (The
     * built-in one computes on the matrices in their dtype: tk__axpy_row.) */
    e->direct = e->dtype == TK_DTYPE_F32 && !aliased;
    for (int i = 0; i < e->n; i++) {
        e->in[i] = in[i]->data;
        e->in_ld[i] = in[i]->stride;
        e->direct = e->direct && in[i]->stride == out->stride;
    }
    e->stream = (size_t)(e->rows * e->cols) * e->esize >= TK__STREAM;
}

/* Staging areas for what a custom body cannot run on in place. */
static int tk__scratch(tk__exec *e, int tail, bool blockwise)
{
    bool edges = e->rows % e->br || e->cols % e->bc;
    e->area = 0;
    e->band = NULL;
    if (e->k->is_axpy)
        return TK_OK;
    /* A large output takes results streamed out from scratch: a masked
     * elementwise run's in place, from tk__region's contiguous regions or
     * tk__run_flat's runs, or staged through f32 from tk__run_flat's alone;
     * a blockwise body's staged tiles (tk__region). */
    e->stream_out = e->stream && (blockwise || (tail == TK_TAIL_MASK &&
                                                (e->direct || tk__contiguous(e))));
    /* Whole tiles in place write their results to a band of scratch with
     * the matrices' stride, then stream them out, where the band fits
     * TK__BAND bytes and each tile's rows are whole lines of the output
     * (else they write the output itself: at 4095x4093, whose rows start
     * anywhere in a line, the band took 1.07 to 1.26 times as long). */
    bool lines = (uintptr_t)e->out % 64 == 0 && (e->out_ld * (int64_t)sizeof(float)) % 64 == 0 &&
                 (e->bc * (int64_t)sizeof(float)) % 64 == 0;
    int64_t band = blockwise && e->direct && e->stream_out && lines &&
                   e->out_ld <= TK__BAND / (int64_t)sizeof(float) / e->br
                       ? e->br * e->out_ld : 0;
    if (blockwise && (!e->direct || edges))
        e->area = e->br * e->bc;   /* no overflow: at most the padded size */
    else if (!blockwise && !e->direct)
        e->area = tail == TK_TAIL_SHIFT_INWARDS ? e->br * e->bc : TK__SPAN;
    else if (e->stream_out && !blockwise)   /* (whole tiles in place need none) */
        e->area = TK__SPAN;   /* the results' scratch */
    if (!e->area && !band)
        return TK_OK;
    /* An area per input and one for the results; staged results to stream
     * take one more, in the dtype (a blockwise body's edge tiles are staged
     * on matrices used in place); the band last, on a line. */
    size_t bytes;
    int areas = e->n + 1 + (e->stream_out && (!e->direct || blockwise));
    int rc = tk__bytes(e->by->fn, areas, e->area, sizeof(float), &bytes);
    if (rc)
        return rc;
    size_t at = (bytes + 63) / 64 * 64;
    if (!(e->scratch = tk__lines(at + (size_t)band * sizeof(float))))
        return tk__fail(TK_ENOMEM, "%s: out of memory for %zu bytes of staging",
                        e->by->fn, at + (size_t)band * sizeof(float));
    e->band = band ? (float *)((char *)e->scratch + at) : NULL;
    if (e->band)   /* a body that reads its output first reads no uninitialized memory */
        memset(e->band, 0, (size_t)band * sizeof(float));
    return TK_OK;
}

/* The built-in body is elementwise and never fails, so under either body
 * kind it computes in memory order: the same bits, the same untouched-on-
 * failure output (it cannot fail), no tile walk. */
static bool tk__blockwise(const tk__exec *e)
{
    return e->k->body_kind == TK_BODY_BLOCKWISE && !e->k->is_axpy;
}

/* Run e (its scratch already allocated) and free its scratch. */
static int tk__go(tk__exec *e, int tail)
{
    int rc;
    if (tk__blockwise(e))
        rc = tk__run_tiles(e, false);
    else if (tail == TK_TAIL_SHIFT_INWARDS)
        rc = tk__run_tiles(e, true);
    else
        rc = tk__run_elementwise(e);
    tk__stream_fence();   /* streamed lines are in memory before the caller reads them */
    free(e->scratch);
    return rc;
}

/* ---- threads -----------------------------------------------------------------
 * A run on several threads splits the rows into bands, one per thread, in
 * whole tile rows when tiles matter.  Every element is computed by the same
 * code as on one thread, so the bits are the same.  The bands run on the
 * kernel handle's pool (pool.c).  With undo, each band first saves its
 * rows, and a failure anywhere restores every row. */

typedef struct {
    tk__exec e;
    int tail;
    unsigned char *save;   /* this band's rows of the undo buffer, or NULL */
    int rc;
    char msg[512];
} tk__band;

static void *tk__band_main(void *arg)
{
    tk__band *b = arg;
    for (int64_t r = 0; b->save && r < b->e.rows; r++)
        tk__stream_copy(b->save + (size_t)(r * b->e.cols) * b->e.esize, tk__out_at(&b->e, r, 0),
                        (size_t)b->e.cols * b->e.esize);
    b->rc = tk__go(&b->e, b->tail);
    if (b->rc < 0) {   /* stop the others; the message is this thread's: carry it back */
        atomic_store_explicit(b->e.stop, true, memory_order_relaxed);
        snprintf(b->msg, sizeof b->msg, "%s", tk_last_error_message());
    }
    return NULL;
}

/* Elements below which a band is not worth a thread. */
#define TK__BAND_MIN ((int64_t)1 << 16)


static int tk__dispatch_threads(const tk__exec *e, int tail)
{
    /* Rows go to bands in units: tile rows, or single rows for elementwise
     * work.  Shift-inwards moves the last tile row up over the one before,
     * so those two share a unit (and a thread). */
    bool tiles = tail == TK_TAIL_SHIFT_INWARDS ||
                 (e->k->body_kind == TK_BODY_BLOCKWISE && !e->k->is_axpy);
    int64_t unit = tiles ? e->br : 1, units = (e->rows + unit - 1) / unit;
    if (tail == TK_TAIL_SHIFT_INWARDS && e->rows % e->br && units > 1)
        units--;
    int64_t n = tk__kernel_threads(e->k), work = e->rows * e->cols / TK__BAND_MIN;
    n = n < units ? n : units;
    n = n < work ? n : work;
    tk__band *b = n > 1 ? calloc((size_t)n, sizeof *b) : NULL;
    if (!b) {
        tk__exec one = *e;
        int rc = tk__scratch(&one, tail, tk__blockwise(&one));
        return rc ? rc : tk__go(&one, tail);
    }
    atomic_bool stop = false;
    int rc = TK_OK;
    for (int64_t i = 0; i < n; i++) {
        int64_t r0 = units * i / n * unit, r1 = i + 1 < n ? units * (i + 1) / n * unit : e->rows;
        tk__exec *x = &b[i].e;
        *x = *e;
        for (int j = 0; j < e->n; j++)
            x->in[j] = tk__in_at(e, j, r0, 0);
        x->out = tk__out_at(e, r0, 0);
        x->rows = r1 - r0;
        x->row0 = r0;
        x->undo = NULL;
        x->stop = &stop;
        b[i].tail = tail;
        b[i].save = e->undo ? tk__undo_at(e, r0, 0) : NULL;
        /* Every band's scratch before any band writes: an allocation that
         * fails leaves the output untouched. */
        if (!rc)
            rc = tk__scratch(x, tail, tk__blockwise(x));
    }
    if (rc) {
        for (int64_t i = 0; i < n; i++)
            free(b[i].e.scratch);
        free(b);
        return rc;
    }
    tk__fan_out(tk__kernel_pool(e->k), b, sizeof *b, n, tk__band_main);
    for (int64_t i = 0; i < n && !rc; i++)
        if (b[i].rc < 0)
            rc = tk__fail(b[i].rc, "%s", b[i].msg);
    if (rc && e->undo) {
        tk__stream_fence();
        for (int64_t r = 0; r < e->rows; r++)
            memcpy(tk__out_at(e, r, 0), tk__undo_at(e, r, 0), (size_t)e->cols * e->esize);
    }
    free(b);
    return rc;
}

/* TK_TAIL_PAD: the seed's wrapper.  Zero-padded copies of every input and a
 * padded output; the body runs on them with no edge tiles; the output is
 * cropped once every body call has succeeded, so no undo is needed. */
int tk__exec_padded(const tk__runner *by, const tk_kernel *k, const tk_tiling *t,
                    const tk_matrix *const *inputs, tk_matrix *output, void *work)
{
    /* The padded inputs and output side by side in work, zeroed around the
     * inputs' data and wholly for the output on every run, as fresh
     * buffers would be (work holds an earlier run's data). */
    size_t es = (size_t)tk__esize(output->dtype);
    size_t row = (size_t)t->padded_cols * es, plane = (size_t)t->padded_rows * row;
    tk_matrix pin[TK_KERNEL_MAX_INPUTS];
    const tk_matrix *pp[TK_KERNEL_MAX_INPUTS];
    tk_matrix pout = {output->dtype, t->padded_rows, t->padded_cols, t->padded_cols,
                      (unsigned char *)work + (size_t)k->n_inputs * plane, NULL};
    memset(pout.data, 0, plane);
    for (int i = 0; i < k->n_inputs; i++) {
        unsigned char *d = (unsigned char *)work + (size_t)i * plane;
        tk_matrix *m = &pin[i];
        *m = (tk_matrix){output->dtype, t->padded_rows, t->padded_cols, t->padded_cols, d,
                         NULL};
        size_t valid = (size_t)t->cols * es;
        for (int64_t r = 0; r < t->rows; r++) {
            memcpy(d + (size_t)r * row, tk__row(inputs[i], r), valid);
            memset(d + (size_t)r * row + valid, 0, row - valid);
        }
        memset(d + (size_t)t->rows * row, 0, (size_t)(t->padded_rows - t->rows) * row);
        pp[i] = m;
    }
    tk__exec e;
    tk__exec_init(&e, by, k, t, pp, &pout, false);
    int rc = tk__dispatch_threads(&e, TK_TAIL_PAD);
    return rc ? rc : tk_crop(t, &pout, output);
}

void tk__kernel_axpy_run(const tk_kernel *k, const tk_matrix *const *inputs,
                         tk_matrix *output)
{
    tk_tiling t = {.rows = output->rows, .cols = output->cols, .block_rows = output->rows,
                   .block_cols = output->cols, .tail = TK_TAIL_MASK};
    tk__exec e;
    static const tk__runner by = {"tk_kernel_run", "TK_KERNEL_UNDO", false};  /* never fails */
    tk__exec_init(&e, &by, k, &t, inputs, output, false);
    tk__dispatch_threads(&e, TK_TAIL_MASK);
}

int tk__exec_run(const tk__runner *by, const tk_kernel *k, const tk_tiling *t,
                 const tk_matrix *const *inputs, tk_matrix *output, bool aliased, void *undo)
{
    tk__exec e;
    tk__exec_init(&e, by, k, t, inputs, output, aliased);
    e.undo = undo;
    e.partial = !k->is_axpy && !by->undo;
    return tk__dispatch_threads(&e, t->tail);
}
