/* internal.h - shared by the library's source files; never installed. */
#ifndef TK_INTERNAL_H
#define TK_INTERNAL_H

#define TK_BUILDING_LIBRARY 1
#include "tilekern.h"

#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#define TK_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define TK_PRINTF(f, a)
#endif

/* Record a message for tk_last_error_message() and return status, so that
 * error paths read `return tk__fail(TK_ESHAPE, "... %lld", ...);`. */
int tk__fail(int status, const char *fmt, ...) TK_PRINTF(2, 3);

/* Whose parameter a TK_* parameter is: the owner column of param.c's table. */
enum { TK__TILING, TK__KERNEL, TK__DEVICE, TK__PIPELINE, TK__BENCH, TK__COMPARE, TK__CALL };

/* A handle's tk_*_set as tk__param_set runs it. */
typedef struct tk__settable {
    const char *fn, *noun;  /* "tk_kernel_set", "kernel": for messages */
    int owner;              /* TK__KERNEL, ...: whose parameters these are */
    /* TK_ESTATE while the handle is running its callbacks (NULL: never). */
    int (*busy)(const char *fn, const void *h);
    /* The handle's own rule beyond the range (NULL: none): a status. */
    int (*admit)(const void *h, int param, int64_t value);
    void (*store)(void *h, int param, int64_t value);
    ptrdiff_t results;      /* offset of the handle's bool "the last run's
                               results are readable", or -1: none kept */
    /* TK_EINVAL where the parameter has no meaning for this handle, before
     * its value is looked at (NULL: every parameter applies). */
    int (*applies)(const void *h, int param);
} tk__settable;

/* A run of k (its own, a pipeline's or an audit's) holds it for its length
 * (delta 1, then -1; k may be NULL): tk_kernel_set refuses a held kernel
 * with TK_ESTATE,
 * since the run reads its settings throughout.  A count, since several
 * threads may run one kernel at once. */
void tk__kernel_hold(const tk_kernel *k, int delta);

/* The one setter behind every tk_*_set.  A NULL handle is TK_EINVAL, a
 * running one TK_ESTATE (busy); a parameter that is not the owner's or is
 * read-only TK_EINVAL, a value outside the table's range TK_ERANGE; then
 * the handle's admit may refuse it.  Only
 * then is the value stored, and results taken under the old settings stop
 * being readable. */
int tk__param_set(const tk__settable *s, void *h, int param, int64_t value);

/* Checked int64 arithmetic: false on overflow (result left unspecified). */
static inline bool tk__mul(int64_t a, int64_t b, int64_t *r)
{
    return !__builtin_mul_overflow(a, b, r);
}
static inline bool tk__add(int64_t a, int64_t b, int64_t *r)
{
    return !__builtin_add_overflow(a, b, r);
}

/* rows*cols*elem bytes, as size_t, or a TK_EOVERFLOW failure naming it. */
int tk__bytes(const char *fn, int64_t rows, int64_t cols, int64_t elem, size_t *bytes);

/* Scratch for the vector loops, on whole cache lines: malloc puts large
 * blocks 16 bytes into a page and small ones where the heap allows, which
 * split vectors over two lines by chance.  A custom body's results in the
 * flat run read 1.3x the built-in's time at 4095x4093 where its scratch
 * fell so, 0.9x on a line (AMD EPYC Zen 4), and the oracle's packed panels
 * cost the AVX2 matmul audit 1.2x.  NULL when out of memory or when bytes
 * rounded up overflow; free() frees it. */
static inline void *tk__lines(size_t bytes)
{
    size_t whole = bytes / 64 * 64 + 64;
    return whole > bytes ? aligned_alloc(64, whole) : NULL;
}

/* A buffer a handle keeps between runs (fresh pages fault on each): *buf
 * of *have bytes, on cache lines (tk__lines), replaced by a larger one when
 * need is more.  False, with *buf NULL and *have 0, when that allocation
 * fails. */
static inline bool tk__keep(void **buf, size_t *have, size_t need)
{
    if (*buf && *have >= need)
        return true;
    free(*buf);
    *buf = tk__lines(need);
    *have = *buf ? need : 0;
    return *buf != NULL;
}

/* tk_dtype_name for a message: "unknown" where the number is no dtype. */
static inline const char *tk__dtype_label(int dtype)
{
    const char *name = tk_dtype_name(dtype);
    return name ? name : "unknown";
}

/* tk_dtype_size, inline for the per-row paths: bytes per element, 0 for
 * an unknown dtype. */
static inline int64_t tk__esize(int dtype)
{
    switch (dtype) {
    case TK_DTYPE_F32: return 4;
    case TK_DTYPE_BF16: return 2;
    case TK_DTYPE_I32: return 4;
    case TK_DTYPE_F16: return 2;
    case TK_DTYPE_F8E4M3FN: return 1;
    case TK_DTYPE_F8E5M2: return 1;
    default: return 0;
    }
}

struct tk_matrix {
    int dtype;
    int64_t rows, cols;
    int64_t stride;   /* row stride in elements, >= cols */
    void *data;
    void *owned;      /* the allocation behind data when the matrix owns it */
};

/* Element (r, c) address helpers. */
static inline void *tk__row(const tk_matrix *m, int64_t r)
{
    return (char *)m->data + (size_t)(r * m->stride * tk__esize(m->dtype));
}

/* A validated dtype for kernels: any float dtype, not I32. */
#define TK__FLOAT_DTYPES "float32, bfloat16, float16, float8_e4m3fn or float8_e5m2"
#define TK__N_FLOAT 5                    /* how many float dtypes there are */
#define TK__DTYPE_MAX TK_DTYPE_F8E5M2    /* the largest dtype code */
static inline bool tk__is_float_dtype(int dtype)
{
    return tk__esize(dtype) > 0 && dtype != TK_DTYPE_I32;
}

/* The library's one f32 -> bf16 rule, on bits: f32 bits in, the f32 bits
 * of the bf16 value out (its bf16 bits are the upper half).  Round to
 * nearest even by adding 0x7FFF plus the lowest kept bit, so a tie carries
 * into the kept half only when that bit is odd; overflow carries into the
 * exponent and lands on Inf.  NaN must not go through the add (a payload
 * could carry into the sign): it becomes the quiet NaN of its sign.
 * Branch-free, in 32-bit lanes and with a signed compare (all SSE2 has), so
 * loops over it vectorize without narrowing.  TK__BF16_ROUND is the rule on
 * u, a uint32_t or a vector of them, given is_nan, all-ones lanes where u
 * is a NaN (u & 0x7FFFFFFF, as signed, above 0x7F800000): the executor's
 * 8-lane staging uses it on vectors. */
#define TK__BF16_ROUND(u, is_nan)                                     \
    ((((u) + 0x7FFFu + (((u) >> 16) & 1u)) & 0xFFFF0000u & ~(is_nan)) | \
     ((((u) & 0x80000000u) | 0x7FC00000u) & (is_nan)))
static inline uint32_t tk__bf16_round(uint32_t u)
{
    return TK__BF16_ROUND(u, 0u - (uint32_t)((int32_t)(u & 0x7FFFFFFFu) > 0x7F800000));
}

static inline uint32_t tk__f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float tk__f32_value(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint64_t tk__f64_bits(double f)
{
    uint64_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline double tk__f64_value(uint64_t u)
{
    double f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Map sign-magnitude bits onto a line where adjacent values differ by one
 * and +0 == -0, so distances across zero count through it. */
static inline int64_t tk__ordered(uint32_t u, uint32_t sign)
{
    return (u & sign) ? -(int64_t)(u & ~sign) : (int64_t)u;
}

/* tk_ulp_distance in float32 of two values that are not NaN: at most
 * 2^32 - 2^24 apart, so 32 bits hold it (and keep a loop's lanes narrow). */
static inline uint32_t tk__f32_ulps(float a, float b)
{
    uint32_t ua = tk__f32_bits(a), ub = tk__f32_bits(b);
    int32_t ia = (ua >> 31) ? -(int32_t)(ua & 0x7FFFFFFFu) : (int32_t)ua,
            ib = (ub >> 31) ? -(int32_t)(ub & 0x7FFFFFFFu) : (int32_t)ub;
    return ia > ib ? (uint32_t)ia - (uint32_t)ib : (uint32_t)ib - (uint32_t)ia;
}

/* One element each way: f32 -> bf16 bits, bf16 bits -> f32 (exact). */
static inline uint16_t tk__bf16_from(float f)
{
    return (uint16_t)(tk__bf16_round(tk__f32_bits(f)) >> 16);
}

static inline float tk__bf16_to(uint16_t b) { return tk__f32_value((uint32_t)b << 16); }

/* c ? a : b on all 32 bits without a branch: the f16 and fp8 rules below
 * pick with it, so the compiler keeps their loops free of control flow and
 * vectorizes them (a ternary it may turn into a branch, and it will not
 * then compute a float product on lanes that do not need it). */
static inline uint32_t tk__sel(bool c, uint32_t a, uint32_t b)
{
    uint32_t m = 0u - (uint32_t)c;
    return (a & m) | (b & ~m);
}

/* The small binary floats (f16, fp8) share one rounding rule on bits: the
 * f32 at u to eb exponent and mb mantissa bits, nearest even, subnormals
 * kept.  The result is the magnitude's encoding, past the largest finite
 * one on overflow; Inf, NaN and the sign are left to the caller.  A target
 * normal rebiases the exponent and rounds the dropped bits as bf16 does.
 * A target subnormal is |x| added to 2^(24 - bias - mb), whose last place
 * is the format's quantum: the addition rounds |x| to it, nearest even
 * under the default rounding mode that all the library's arithmetic
 * assumes, and the sum's low bits are the code (an integer shift per lane
 * instead measured 1.5 to 2.2x memcpy).  Both are computed and one is
 * picked. */
static inline uint32_t tk__narrow(uint32_t u, int eb, int mb)
{
    const int bias = (1 << (eb - 1)) - 1, shift = 23 - mb;
    const uint32_t magic = (uint32_t)(151 - bias - mb) << 23;
    uint32_t a = u & 0x7FFFFFFFu;
    uint32_t t = a - ((uint32_t)(127 - bias) << 23);
    uint32_t normal = (t + (1u << (shift - 1)) - 1 + ((t >> shift) & 1)) >> shift;
    uint32_t sub = tk__f32_bits(tk__f32_value(a) + tk__f32_value(magic)) - magic;
    return tk__sel(a >= (uint32_t)(128 - bias) << 23, normal, sub);
}

/* f32 -> f16 as numpy casts: overflow to Inf; a NaN keeps its sign and the
 * top ten bits of its payload, made nonzero when they are all zero. */
static inline uint16_t tk__f16_from(float f)
{
    uint32_t u = tk__f32_bits(f), a = u & 0x7FFFFFFFu, p = (a >> 13) & 0x3FFu;
    uint32_t r = tk__narrow(u, 5, 10);
    r = tk__sel(r > 0x7C00u, 0x7C00u, r);
    r = tk__sel(a > 0x7F800000u, 0x7C00u | p | (p == 0), r);
    return (uint16_t)(((u >> 16) & 0x8000u) | r);
}

/* f32 -> float8_e4m3fn as ml_dtypes casts: no infinities, so Inf and every
 * value rounding past 448 become the NaN 0x7F, keeping the sign. */
static inline uint8_t tk__e4m3_from(float f)
{
    uint32_t u = tk__f32_bits(f), a = u & 0x7FFFFFFFu;
    uint32_t r = tk__narrow(u, 4, 3);
    r = tk__sel(r > 0x7Eu || a > 0x7F800000u, 0x7Fu, r);
    return (uint8_t)(((u >> 24) & 0x80u) | r);
}

/* f32 -> float8_e5m2 as ml_dtypes casts: overflow to Inf, NaN to 0x7E. */
static inline uint8_t tk__e5m2_from(float f)
{
    uint32_t u = tk__f32_bits(f), a = u & 0x7FFFFFFFu;
    uint32_t r = tk__narrow(u, 5, 2);
    r = tk__sel(r > 0x7Cu, 0x7Cu, r);
    r = tk__sel(a > 0x7F800000u, 0x7Eu, r);
    return (uint8_t)(((u >> 24) & 0x80u) | r);
}

/* The other way, exactly: a normal rebiases, a subnormal is its integer
 * significand times the quantum 2^(1 - bias - mb) (an exact f32 product,
 * which raises no flag), and the all-ones exponent, Inf or NaN, is left to
 * the caller. */
static inline uint32_t tk__widen(uint32_t h, int eb, int mb, float quantum)
{
    const int bias = (1 << (eb - 1)) - 1;
    uint32_t sign = (h >> (eb + mb)) << 31, mag = h & ((1u << (eb + mb)) - 1);
    uint32_t normal = (mag << (23 - mb)) + ((uint32_t)(127 - bias) << 23);
    uint32_t sub = tk__f32_bits((float)(int32_t)mag * quantum);
    return sign | tk__sel(mag >> mb != 0, normal, sub);
}

/* f16 NaNs keep their payload, as numpy's do; fp8 NaNs become the quiet
 * NaN of their sign, as ml_dtypes' do. */
static inline float tk__f16_to(uint16_t h)
{
    uint32_t u = tk__widen(h, 5, 10, 0x1p-24f);
    uint32_t special = ((uint32_t)(h & 0x8000u) << 16) | 0x7F800000u | ((h & 0x3FFu) << 13);
    return tk__f32_value(tk__sel((h & 0x7C00u) == 0x7C00u, special, u));
}

static inline float tk__e4m3_to(uint8_t h)
{
    uint32_t u = tk__widen(h, 4, 3, 0x1p-9f);
    uint32_t nan = ((uint32_t)(h & 0x80u) << 24) | 0x7FC00000u;
    return tk__f32_value(tk__sel((h & 0x7Fu) == 0x7Fu, nan, u));
}

static inline float tk__e5m2_to(uint8_t h)
{
    uint32_t u = tk__widen(h, 5, 2, 0x1p-16f);
    uint32_t sign = (uint32_t)(h & 0x80u) << 24;
    uint32_t special = sign | tk__sel((h & 0x7Fu) == 0x7Cu, 0x7F800000u, 0x7FC00000u);
    return tk__f32_value(tk__sel((h & 0x7Cu) == 0x7Cu, special, u));
}

/* Whether float dtype wide holds every value of float dtype narrow
 * exactly: its precision and its range are at least narrow's. */
static inline bool tk__dtype_holds(int wide, int narrow)
{
    if (wide == TK_DTYPE_F32 || wide == narrow)
        return true;
    bool fp8 = narrow == TK_DTYPE_F8E4M3FN || narrow == TK_DTYPE_F8E5M2;
    return fp8 && (wide == TK_DTYPE_BF16 || wide == TK_DTYPE_F16);
}

/* f32 -> dtype -> f32: what storing x in a float dtype keeps of it. */
float tk__round_to(int dtype, float x);

/* memcpy that writes whole 64-byte lines by streaming stores on x86, for
 * copies that should not evict the working set; tk__stream_fence makes
 * them visible before anything else reads the destination. */
void tk__stream_copy(void *dst, const void *src, size_t bytes);
void tk__stream_fill(void *dst, int byte, size_t bytes);
/* Output bytes from which outputs are written with streaming stores,
 * bypassing the cache: a quarter of the development machine's L3, so the
 * output would mostly be out of cache when the run ends anyway. */
#define TK__STREAM ((size_t)8 << 20)
/* Bytes of input blocks (all operands) that a blockwise kernel run or a
 * call reads ahead in memory order: half the L2 of the development
 * machine. */
#define TK__TOUCH (512 * 1024)
void tk__stream_fence(void);
/* Read bytes of each of the n rows p[i] side by side, a line at a time,
 * only to bring them into cache ahead of a pass that needs them. */
void tk__read_ahead(const unsigned char *const *p, int n, size_t bytes);

/* Row conversion between a float dtype and f32. */
void tk__row_to_f32(int dtype, const void *src, float *dst, int64_t n);
void tk__row_from_f32(int dtype, const float *src, void *dst, int64_t n);
/* x rounded to float dtype d, in place, through a small buffer. */
void tk__cast_through(int d, float *x, int64_t count);

/* ---- kernels (kernel.c) ---------------------------------------------- */

/* The built-in axpy's parameters, which its body's user pointer points to. */
struct tk__axpy {
    float alpha;
    int arith;          /* TK_ARITH_* flags */
};

/* x, or a zero of its sign when x is subnormal: TK_ARITH_FTZ's rule. */
static inline float tk__ftz(float x)
{
    uint32_t u = tk__f32_bits(x);
    return tk__f32_value(tk__sel((u & 0x7F800000u) == 0, u & 0x80000000u, u));
}

/* r, the axpy a * x + y, under the NaN rule: a NaN operand gives its own
 * NaN, made quiet, the first of a, x, y that is one, whatever order the
 * compiler gave the operands and even where a * x is an invalid 0 * Inf:
 * every loop, path and arithmetic then gives the same bits.  A NaN the
 * arithmetic makes from numbers (Inf - Inf, 0 * Inf) is r's.  Masks, not
 * branches, so that the loops vectorize. */
static inline float tk__axpy_nan(float a, float x, float y, float r)
{
    uint32_t u = tk__f32_bits(r);
    const float v[3] = {y, x, a};   /* the last NaN of these wins */
    for (int i = 0; i < 3; i++) {
        uint32_t b = tk__f32_bits(v[i]);
        uint32_t m = 0u - (uint32_t)((b & 0x7FFFFFFFu) > 0x7F800000u);
        u = (u & ~m) | ((b | 0x00400000u) & m);
    }
    return tk__f32_value(u);
}

/* One axpy element under the arithmetic flags; with both 0 it is the
 * contract's f32(f32(a * x) + y).  Every operand and every rounded result
 * is flushed under TK_ARITH_FTZ; NaNs follow tk__axpy_nan. */
static inline float tk__axpy_arith(float a, float x, float y, int arith)
{
    bool ftz = arith & TK_ARITH_FTZ;
    if (ftz) {
        a = tk__ftz(a);
        x = tk__ftz(x);
        y = tk__ftz(y);
    }
    float r;
    if (arith & TK_ARITH_FMA) {
        r = fmaf(a, x, y);
    } else {
        float m = a * x;
        r = (ftz ? tk__ftz(m) : m) + y;
    }
    return tk__axpy_nan(a, x, y, ftz ? tk__ftz(r) : r);
}

struct tk_kernel {
    int n_inputs;
    int body_kind;      /* TK_BODY_ELEMENTWISE or TK_BODY_BLOCKWISE */
    tk_body_fn body;    /* built-in kernels set this to their own body too */
    void *user;
    bool is_axpy;       /* built-in alpha*x + y: axpy below */
    struct tk__axpy axpy;
    int reduce;         /* a TK__REDUCE_* value: 0 for elementwise contracts */
    int accum;          /* a reduction's accumulation dtype */
    bool undo;          /* TK_KERNEL_UNDO */
    int threads;        /* TK_KERNEL_THREADS: 0 is every online core */
    bool thread_safe;   /* TK_KERNEL_THREAD_SAFE */
};

enum { TK__REDUCE_NONE, TK__REDUCE_MATMUL, TK__REDUCE_ROW_SUM };

/* The one place a kernel's body is called (executor, pipeline, audit):
 * the body's own return value. */
static inline int tk__body(const tk_kernel *k, int64_t rows, int64_t cols, int64_t ld,
                           const float *const *in, float *out)
{
    return k->body(k->user, rows, cols, ld, in, out);
}

/* The threads a run of k may use: 1 for a custom body not declared
 * thread-safe, TK_KERNEL_THREADS otherwise, 0 resolved to the online cores. */
int tk__kernel_threads(const tk_kernel *k);

/* tk_kernel_run's argument checks, in the seed's order and words, with fn
 * naming the caller in messages; *aliased tells whether the output is one
 * of the inputs.  tk_pipeline_run checks its arguments the same way. */
int tk__kernel_validate(const char *fn, const tk_kernel *k, const tk_tiling *t,
                        const tk_matrix *const *inputs, const tk_matrix *output,
                        bool *aliased);

/* Who runs a kernel: the function its messages name, and whether a failing
 * custom body leaves the output as it was, with that setting's name
 * (tk_kernel_run: TK_KERNEL_UNDO; a call of a kernel: TK_CALL_UNDO). */
typedef struct {
    const char *fn, *undo_param;
    bool undo;
} tk__runner;

/* tk_kernel_run after validation, for `by`. */
int tk__kernel_exec(const tk__runner *by, const tk_kernel *k, const tk_tiling *t,
                    const tk_matrix *const *inputs, tk_matrix *output, bool aliased);

/* ---- the built-in axpy (axpy.c) and the host executor (exec.c) ---------- */

#define TK__LINE 16   /* f32 elements per 64-byte cache line */

/* The built-in axpy as a tk_body_fn (user: its struct tk__axpy). */
int tk__axpy_body(void *user, int64_t rows, int64_t cols, int64_t ld, const float *const *in,
                  float *out);
/* n elements of a row of the matrices in their dtype, o = p->alpha x + y;
 * o may be exactly x or y.  stream: by streaming stores, for long runs of
 * a large output (the caller fences before returning to the user). */
void tk__axpy_row(const struct tk__axpy *p, int dtype, void *o, const void *x, const void *y,
                  int64_t n, bool stream);

/* tk_kernel_run after validation: TK_TAIL_PAD through padded copies of
 * the inputs and output in `work` ((inputs + 1) padded planes), the other
 * tails on the matrices with `undo` (an output-sized buffer, or NULL for
 * none) saving what a custom body overwrites. */
int tk__exec_padded(const tk__runner *by, const tk_kernel *k, const tk_tiling *t,
                    const tk_matrix *const *inputs, tk_matrix *output, void *work);
int tk__exec_run(const tk__runner *by, const tk_kernel *k, const tk_tiling *t,
                 const tk_matrix *const *inputs, tk_matrix *output, bool aliased, void *undo);
/* A handle's thread pool (pool.c).  tk__pool_new returns NULL when out of
 * memory; tk__pool_stop ends the workers, which a later fan-out starts
 * again, and tk__pool_free the pool (NULL: nothing).  Neither may run
 * beside a fan-out on p. */
typedef struct tk__pool tk__pool;
tk__pool *tk__pool_new(void);
void tk__pool_stop(tk__pool *p);
void tk__pool_free(tk__pool *p);
/* fn on each of n <= TK_KERNEL_MAX_THREADS items (item i at items + i *
 * size): items 1.. on p's workers (on threads of their own where p is NULL,
 * busy with another fan-out, or its workers are in the process it was
 * forked from), item 0 (and any whose thread could not start) on the
 * calling one; returns when all are done. */
void tk__fan_out(tk__pool *p, void *items, size_t size, int64_t n, void *(*fn)(void *));
/* The pool of a kernel handle. */
tk__pool *tk__kernel_pool(const tk_kernel *k);
/* The built-in axpy of k over validated matrices, in memory order: what any
 * tiling, tail or hazard-free schedule computes with it (it is elementwise
 * and never fails).  The output may be exactly an input. */
void tk__kernel_axpy_run(const tk_kernel *k, const tk_matrix *const *inputs,
                         tk_matrix *output);

/* ---- files (file.c) ------------------------------------------------------ */

/* Every file the library writes: tk__out_open makes a fresh temporary next
 * to path (refusing a target that exists and is not a regular file), the
 * caller writes to f, tk__out_commit flushes it to disk and renames it over
 * the target; any failure (a write error included) removes the temporary
 * and leaves the target as it was.  fn names the caller in messages. */
typedef struct tk__out {
    FILE *f;
    char target[4096];
    char tmp[4096 + 20];
} tk__out;

int tk__out_open(tk__out *o, const char *fn, const char *path);
int tk__out_commit(tk__out *o, const char *fn, const char *path);
void tk__out_abort(tk__out *o);
/* The status of a stream that could not be opened, from its errno:
 * TK_ENOMEM where the C library ran out of memory, else TK_EIO. */
int tk__open_status(int err);

/* ---- devices (device.c) ---------------------------------------------- */

/* tk_device_get's figure without a message where it is unknown: false. */
bool tk__device_known(const tk_device *d, int param, int64_t *value);

/* Whether two device kinds name one chip: the same words, or two names
 * JAX reports for one profile ("TPU v5 lite", "TPU v5e"). */
bool tk__same_kind(const char *a, const char *b);

/* ---- tiling (tiling.c) ----------------------------------------------- */

/* Every derived size is computed and overflow-checked once at creation. */
struct tk_tiling {
    int64_t rows, cols;              /* logical shape */
    int64_t block_rows, block_cols;
    int64_t grid_rows, grid_cols, tiles;
    int64_t padded_rows, padded_cols, padded_elements;
    int tail;                        /* a TK_TAIL_* value */
};

/* ---- the general call (call.c), which pipeline.c also simulates ---------- */

typedef struct tk__spec {
    int dtype;
    int64_t rows, cols, block_rows, block_cols;
    int64_t grid_rows, grid_cols;           /* the operand's block grid */
    int64_t map[2][TK_CALL_MAX_RANK + 1];   /* affine: A row, then b */
    tk_index_map_fn fn;                     /* or this, when not NULL */
    void *user;
} tk__spec;

typedef struct tk__plan {
    int n;                  /* operands: inputs, then outputs */
    int64_t *idx;           /* steps x n x 2 block indices */
    int64_t *grid;          /* steps x rank grid indices */
} tk__plan;

struct tk_call {
    int rank;
    int64_t grid[TK_CALL_MAX_RANK];
    int64_t steps;
    int semantics[TK_CALL_MAX_RANK];
    tk_call_body_fn body;
    void *user;
    /* A call of a kernel (tk_call_create_kernel): its kernel, or NULL, and a
     * copy of its tiling as it was then. */
    const tk_kernel *kernel;
    tk_tiling tiling;
    int n_in, n_out;
    tk__spec in[TK_CALL_MAX_OPERANDS], out[TK_CALL_MAX_OPERANDS];
    int pad;                   /* a TK_PAD_* value */
    bool undo;                 /* TK_CALL_UNDO */
    bool round_steps;          /* TK_CALL_ROUND_STEPS */
    bool running;              /* its body or index maps are running */
    float pad_value;           /* for TK_PAD_VALUE */
    bool ran;                  /* stats below are those of a complete run */
    int64_t copies_in, copies_skipped, copies_out, bytes_in, bytes_out;
    /* The saved-output buffer, the list of blocks written back and the
     * operands' f32 blocks and panels, kept across runs (fresh pages would
     * fault on each); a call runs one run at a time, so no run needs
     * another. */
    void *work, *wrote, *panels;
    size_t work_bytes, wrote_bytes, panels_bytes;
    /* The last plan, kept while planned: every map is affine and nothing
     * that shapes the plan has changed since it was made. */
    tk__plan plan;
    bool planned;
};

/* Operand o of c: input o for o < n_in, else output o - n_in. */
static inline const tk__spec *tk__call_spec(const tk_call *c, int o)
{
    return o < c->n_in ? &c->in[o] : &c->out[o - c->n_in];
}

/* tk_call_run in two halves: check the matrices and compute (and check)
 * every block index, or take the kept plan, then execute the plan; the
 * pipeline simulates a plan between the two.  *p is the call's own, valid
 * until the call next changes.  fill is what past-edge input reads see. */
int tk__call_plan(tk_call *c, int n_inputs, const tk_matrix *const *inputs, int n_outputs,
                  tk_matrix *const *outputs, const tk__plan **p);
int tk__call_execute(tk_call *c, const tk__plan *p, const tk_matrix *const *inputs,
                     tk_matrix *const *outputs, float fill);
float tk__call_fill(const tk_call *c);
/* The pieces of a step that the pipeline's run slot by slot shares: the
 * view a body sees of operand o's block b at grid index g over data; the
 * body called on a step's views (a failure's message names fn and ends
 * with outcome, what became of the outputs); input i's block b promoted
 * into dst (fill past the edge); output j's block b cast from src into an
 * image of the output. */
void tk__call_view(const tk_call *c, int o, const int64_t *b, const int64_t *g, float *data,
                   int64_t ld, tk_block *v);
int tk__call_body(tk_call *c, tk_block *const *blocks, int64_t st, const int64_t *g,
                  const char *fn, const char *outcome);
void tk__call_copy_in(const tk_call *c, int i, const tk_matrix *m, const int64_t *b,
                      float *dst, float fill);
void tk__call_cast_out(const tk_call *c, int j, const float *src, const int64_t *b,
                       unsigned char *image);
/* rc, with the message of a failed tk_call_* or tk__call_* call (which
 * names a tk_call_ function) renamed to fn's. */
int tk__call_as(int rc, const char *fn);

/* ---- run-time dispatch (isa.c) ------------------------------------------- */

#define TK__STR2(x) #x
#define TK__STR(x) TK__STR2(x)

/* The compiled paths of the hot loops, in order of preference. */
enum { TK__ISA_PORTABLE, TK__ISA_AVX2, TK__ISA_AVX512, TK__N_ISA };

extern _Atomic int tk__isa_level;
int tk__isa_init(void);
/* The vendor tunings (tk__tune): an Intel Xeon's, the default, and an AMD
 * EPYC's.  Each picks among ways that give the same bits. */
enum { TK__TUNE_INTEL, TK__TUNE_AMD, TK__N_TUNE };
int tk__tune(void);

/* The path in use: chosen on first use, from the CPU and TK_ISA. */
static inline int tk__isa(void)
{
    int v = atomic_load_explicit(&tk__isa_level, memory_order_relaxed);
    return v >= 0 ? v : tk__isa_init();
}

#if defined(__x86_64__) && defined(__GNUC__)
#define TK__ISA_X86 1
/* flatten inlines every helper into each path, so none runs as a
 * baseline-ISA call.  No path changes a result: the IEEE operations are
 * the same on each, and -ffp-contract=off keeps FMA out unless asked. */
#define TK__ON_AVX2 __attribute__((target("avx2,fma,f16c,bmi,bmi2,popcnt"), flatten))
#ifdef TK_EMULATED_AVX512
/* The emulated AVX-512 build (make avx512-emulated): the path's intrinsics
 * are portable code (tests/avx512/immintrin.h), compiled as the AVX2
 * path is. */
#define TK__ON_AVX512 TK__ON_AVX2
#else
#define TK__ON_AVX512                                                               \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi,bmi2,popcnt"),                                                \
                   flatten))
#endif
/* TK_DISPATCH(name, (params), (args)) { body } defines a static void
 * function whose body is compiled once per path and run on the path
 * tk__isa() picks; TK_DISPATCH_RET does the same for a non-void type. */
#define TK_DISPATCH_RET(type, name, params, args)                                    \
    static inline __attribute__((always_inline)) type name##_all params;           \
    TK__ON_AVX512 static type name##_avx512 params { return name##_all args; }      \
    TK__ON_AVX2 static type name##_avx2 params { return name##_all args; }          \
    __attribute__((flatten)) static type name##_portable params { return name##_all args; } \
    static type name params                                                           \
    {                                                                                 \
        int isa = tk__isa();                                                          \
        return isa == TK__ISA_AVX512 ? name##_avx512 args                            \
               : isa == TK__ISA_AVX2 ? name##_avx2 args : name##_portable args;        \
    }                                                                                 \
    static inline __attribute__((always_inline)) type name##_all params
#define TK_DISPATCH(name, params, args)                                               \
    static inline __attribute__((always_inline)) void name##_all params;           \
    TK__ON_AVX512 static void name##_avx512 params { name##_all args; }             \
    TK__ON_AVX2 static void name##_avx2 params { name##_all args; }                 \
    __attribute__((flatten)) static void name##_portable params { name##_all args; } \
    static void name params                                                           \
    {                                                                                 \
        int isa = tk__isa();                                                          \
        if (isa == TK__ISA_AVX512)                                                    \
            name##_avx512 args;                                                       \
        else if (isa == TK__ISA_AVX2)                                                 \
            name##_avx2 args;                                                         \
        else                                                                          \
            name##_portable args;                                                     \
    }                                                                                 \
    static inline __attribute__((always_inline)) void name##_all params

#include <immintrin.h>

/* TK__BF16_ROUND on the vector paths, before the low half goes and without
 * its NaN lanes (each caller handles those): u + 0x7FFF + its bit 16, on
 * sixteen and on eight lanes. */
TK__ON_AVX512 static inline __m512i tk__bf16_biased_512(__m512i u)
{
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    return _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), odd));
}

TK__ON_AVX2 static inline __m256i tk__bf16_biased_256(__m256i u)
{
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), odd));
}

/* TK__BF16_ROUND whole, NaNs by mask: each lane's f32 bits with the low
 * half cleared, on sixteen and on eight lanes. */
TK__ON_AVX512 static inline __m512i tk__bf16_round_512(__m512 v)
{
    __m512i u = _mm512_castps_si512(v);
    __m512i r = _mm512_and_si512(tk__bf16_biased_512(u), _mm512_set1_epi32((int)0xFFFF0000u));
    return _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q),
                                _mm512_and_si512(u, _mm512_set1_epi32((int)0x80000000u)),
                                _mm512_set1_epi32(0x7FC00000));
}

TK__ON_AVX2 static inline __m256i tk__bf16_round_256(__m256 v)
{
    __m256i u = _mm256_castps_si256(v);
    __m256i r = _mm256_and_si256(tk__bf16_biased_256(u), _mm256_set1_epi32((int)0xFFFF0000u));
    __m256i nan = _mm256_or_si256(_mm256_and_si256(u, _mm256_set1_epi32((int)0x80000000u)),
                                  _mm256_set1_epi32(0x7FC00000));
    return _mm256_blendv_epi8(r, nan, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
}
#else
#define TK__ISA_X86 0
#define TK_DISPATCH_RET(type, name, params, args) static type name params
#define TK_DISPATCH(name, params, args) static void name params
#endif

/* ---- comparison, audit and reports (compare.c, audit.c, report.c) ----- */


/* Where a maximum (or the first mismatch) was seen. */
typedef struct tk__where {
    int64_t row, col;
    float actual, expected;
    bool set;
} tk__where;

/* Running comparison of actual against expected (both promoted to f32);
 * tk_compare and the audit feed it blocks of rows.  Differences are f32
 * subtractions, as numpy computes them on float32 arrays. */
typedef struct tk__cmp {
    int dtype;           /* ULP distances are measured in this dtype */
    double atol, rtol;
    int64_t max_ulp;     /* -1: no ULP criterion */
    int nan_policy;
    bool want_ulp;       /* ULP statistics (always on with a ULP criterion) */
    int64_t elements, mismatches, hist[4];
    float max_abs;       /* -1 until a comparable element was seen */
    double max_rel;      /* -1 until a non-zero reference was seen */
    uint64_t max_ulp_seen;
    tk__where where[4];  /* indexed by TK_WHERE_* - 1 */
} tk__cmp;

void tk__tolerance_default(int dtype, double *atol, double *rtol);
void tk__cmp_init(tk__cmp *s, int dtype, double atol, double rtol,
                  int64_t max_ulp, int nan_policy, bool want_ulp);
/* A contiguous block of rows x cols elements whose first element is
 * (row0, col0) of the compared matrices. */
void tk__cmp_rows(tk__cmp *s, int64_t row0, int64_t col0, int64_t rows,
                  int64_t cols, const float *actual, const float *expected);
/* The gap's screened rows (no ULP statistics, finite differences): float
 * bounds lo(e) <= atol + rtol|e| <= hi(e), and mrf under the running
 * largest relative difference, for s as it stands; a row's figures under
 * them; and the rest of the row's comparison from those figures, which
 * the audit's one-loop first pass gathers itself.  False, changing
 * nothing, where a difference is not finite: the caller compares the row
 * the general way (tk__cmp_rows). */
typedef struct tk__screen {
    float ahi, rhi, alo, rlo, mrf;
    bool screen, rel_screen;   /* false: no screen (every element tested) */
} tk__screen;
typedef struct tk__screened {
    uint32_t top;              /* bits of the largest |a - e| */
    int64_t bad;               /* differences above hi */
    int32_t maybe;             /* one between lo and hi, or no screen */
    int32_t rel_candidates;    /* one may beat the largest relative difference */
} tk__screened;
void tk__screen_of(const tk__cmp *s, tk__screen *sc);
/* n elements' figures into g (one pass the compiler vectorizes; counts in
 * chunks short enough for 32 bits).  An element above hi is also at or
 * above lo (hi(e) >= lo(e)), so the counts differ where one lies between. */
static inline void tk__screen_add(const tk__screen *sc, tk__screened *g, int64_t n,
                                  const float *a, const float *e)
{
    for (int64_t k0 = 0; k0 < n; k0 += 1 << 20) {
        int64_t k1 = n - k0 < (1 << 20) ? n : k0 + (1 << 20);
        int32_t above = 0, not_below = 0, rel = 0;
        uint32_t top = 0;
        for (int64_t c = k0; c < k1; c++) {
            float d = fabsf(a[c] - e[c]), ae = fabsf(e[c]);
            uint32_t db = tk__f32_bits(d);
            top = db > top ? db : top;
            above += d > sc->ahi + sc->rhi * ae;
            not_below += d >= sc->alo + sc->rlo * ae;
            rel |= (ae != 0.0f) & (d > sc->mrf * ae - FLT_MIN);
        }
        g->top = top > g->top ? top : g->top;
        g->bad += above;
        g->maybe |= above != not_below;
        g->rel_candidates |= rel;
    }
}
bool tk__cmp_screened_rest(tk__cmp *s, const tk__screened *g, int64_t r, int64_t c0, int64_t n,
                           const float *a, const float *e);
/* Fold `later` (a comparison of elements after all of into's, in row-major
 * order) into `into`: the state one pass over both would have left. */
void tk__cmp_merge(tk__cmp *into, const tk__cmp *later);

/* One case's results, computed by tk_audit_run. */
typedef struct tk__case_result {
    tk__cmp impl;         /* candidate vs represented-input oracle */
    tk__cmp gap;          /* candidate vs body on the original data */
    float input_part;     /* max |body(represented) - body(original)| */
    float output_part;    /* max |cast(body(represented)) - body(represented)| */
    float scale;          /* max |body(original)| */
    int diagnosis;        /* a TK_SCHEDULE_* value */
    bool bounded;         /* a reduction case: the verdict is ratio <= 1 */
    double ratio, bound;  /* max |candidate - oracle| / bound, and that bound */
    int64_t ratio_row, ratio_col;
} tk__case_result;

/* An elementwise case has rows x cols inputs and output; a reduction case
 * an output of rows x cols (m x n) from inputs m x depth and depth x cols. */
typedef struct tk__case {
    int dtype, out_dtype;
    int64_t rows, cols, depth;
    float *orig;          /* the inputs' originals, contiguous */
} tk__case;

/* The verdict of a case: exact for elementwise contracts, within the error
 * bound for reductions. */
static inline bool tk__case_passed(const tk__case_result *r)
{
    return r->bounded ? r->ratio <= 1.0 : r->impl.mismatches == 0;
}

/* What one pass of the reduction oracle (oracle.c) computes: per output
 * element the oracle sum, the sum of magnitudes and (for the gap) the
 * original data's sum. */
typedef struct {
    int64_t m, k, n;
    const float *x, *y;    /* stored inputs promoted to f32; y NULL: a row sum */
    const float *ox, *oy;  /* the originals; ox NULL: not wanted (f32 inputs) */
    int dtype;             /* round products to it (TK_SCHEDULE_PRODUCTS_ROUNDED) */
    int64_t k_end;         /* terms [0, k_end) */
    bool mag32;            /* tk__oracle_mag32: the main pass sums magnitudes in f32 */
    struct tk__progress *tick;  /* a run with progress reports; else NULL */
    bool reports;          /* the calling thread's chunk: report; others only stop */
    bool reversed;         /* tk__sums_in: terms from k - 1 down to 0 */
} tk__pass;

/* A pass's progress (tk_audit_set_progress): the calling thread reports
 * how far it is, counting the rows of the chunks every thread finished. */
typedef struct tk__progress {
    const tk_audit *a;
    int64_t index;           /* the case */
    const char *step;
    int64_t rows;            /* the pass's */
    int64_t chunk_rows;      /* the calling thread's current chunk's */
    _Atomic int64_t done;    /* rows of finished chunks */
    double last;             /* the fraction last reported */
    atomic_bool *stop;       /* the pass's threads stop when it is set */
    int rc;                  /* TK_ECALLBACK once the callback asked to stop */
} tk__progress;

/* Tell the progress callback that `fraction` of `step` of a case is done,
 * under a saved floating-point environment; TK_ECALLBACK when it stops
 * the run. */
int tk__progress_report(const tk_audit *a, int64_t index, const char *step, double fraction);

/* During a pass: `part` of the chunk p is done.  The calling thread
 * reports at most once per 1/256 of the pass; true when the run must stop
 * (the others only look). */
bool tk__tick(const tk__pass *p, double part);

/* The blocking of a matmul pass: KC terms at a time, MC rows of x packed
 * per block, output tiles of NR columns (or 2 NR) held in registers, and up
 * to KO blocks of KC terms packed at once, each tile's sums of all of them
 * added up in cache before they go to the output.  The audit of a 1024^3
 * bf16 matmul read 3.02 to 3.35 the plain f32 matmul on an AMD EPYC (Zen 4)
 * with the output's three float64 planes read and written per KC terms,
 * 2.84 to 2.93 with KO = 2, no better with 4 or 8 (more packing memory). */
enum { TK__KC = 128, TK__MC = 64, TK__NR = 8, TK__KO = 2 };
/* The AVX2 path's tiles are TK__MR rows high, and it packs TK__MC6 rows of
 * x, a whole number of pairs of such groups (oracle.c): with 64 rows, its
 * last group's padding rows cost 3% more multiply-adds, and y's panels
 * left the cache half again as often.  TK__MC_PACK: the most rows packed. */
enum { TK__MR = 6, TK__MC6 = 96, TK__MC_PACK = TK__MC6 > TK__MC ? TK__MC6 : TK__MC };

/* Doubles of packing scratch one thread's tk__oracle_sums needs for n
 * columns and k terms. */
int64_t tk__pack_doubles(int64_t n, int64_t k);
/* Per output element, in float64: the oracle s, the sum of magnitudes A
 * and (o not NULL) the original data's sum, over the terms [0, k_end); with
 * round, each product rounded to p->dtype first (no o). */
void tk__oracle_sums(const tk__pass *p, bool round, double *s, double *A, double *o,
                     double *pack);
/* Whether a matmul pass may sum its magnitudes in float32 per KC block,
 * exactly where every product of magnitudes is an exact float32 value and
 * KC of them stay finite: inputs narrower than float32, round to nearest,
 * no NaN or Inf, max |x| max |y| KC <= 2^127, and the smallest nonzero
 * |x| times the smallest nonzero |y| at least FLT_MIN. */
bool tk__oracle_mag32(const tk__pass *p);

/* Audit one reduction case (bound.c): stored inputs, the candidate, the
 * float64 oracle and bound, the gap, the diagnosis. */
int tk__audit_reduction(tk_audit *a, int64_t index, tk__case_result *res);
/* The dtype whose gap tolerance a case uses: its own, or for a reduction
 * the less precise of its input and output dtypes. */
int tk__gap_dtype(const tk__case *c);
/* A reduction case's shape against its accumulation (a worst-case bound
 * must exist) and the working memory its audit needs (it must not
 * overflow, which also bounds the copy of the originals). */
int tk__reduction_check(int acc, int reduce, int64_t m, int64_t k, int64_t n, int dtype,
                        int out_dtype);

struct tk_audit {
    const tk_kernel *k;   /* the contract; borrowed */
    tk_candidate_fn fn;
    void *user;
    tk_progress_fn progress;   /* NULL: none */
    void *progress_user;
    double gap_atol[TK__DTYPE_MAX + 1], gap_rtol[TK__DTYPE_MAX + 1];
    tk__case *cases;
    int64_t n_cases, cap;
    tk__case_result *res; /* n_cases entries after a complete run, else NULL */
    tk_kernel ran_as;     /* the contract's settings res was taken under: the
                             reports describe these, whatever it holds now */
    void *work;           /* stored inputs, output and oracle of the largest */
    size_t work_bytes;    /* case so far, kept: fresh pages fault on each run */
    tk__pool *pool;       /* the threads of its passes */
    bool running;         /* the candidate is running: no changes, no re-entry */
};

/* Shortest decimal that reads back to v, formatted like Python's repr()
 * ("0.0", "1e-05", "0.025217056274414062"); buf holds at least 32 bytes. */
void tk__repr(double v, char *buf);

/* s as a JSON string literal, quotes included, for text a caller gave. */
void tk__json_string(FILE *f, const char *s);

/* v as a JSON number, tk__repr's digits; JSON has no NaN or Inf, so those
 * become null. */
typedef struct { char s[32]; } tk__num;
tk__num tk__jn(double v);

#endif
