/* internal.h - shared by the library's source files; never installed. */
#ifndef TK_INTERNAL_H
#define TK_INTERNAL_H

#define TK_BUILDING_LIBRARY 1
#include "tilekern.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define TK_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define TK_PRINTF(f, a)
/* ---- kernels (kernel.c) ---------------------------------------------- */

struct tk_kernel {
    int n_inputs;
    int body_kind;      /* TK_BODY_ELEMENTWISE or TK_BODY_BLOCKWISE */
    tk_body_fn body;    /* built-in kernels set this to their own body too */
    void *user;
    bool is_axpy;       /* built-in alpha*x + y: alpha below */
    float alpha;
};

/* Call k's body once; a non-zero return becomes TK_ECALLBACK with a
 * message.  Used by the host executor and by the audit's references. */
int tk__kernel_apply(const tk_kernel *k, int64_t rows, int64_t cols, int64_t ld,
                     const float *const *in, float *out);

#endif

/* Record a message for tk_last_error_message() and return status, so that
 * error paths read `return tk__fail(TK_ESHAPE, "... %lld", ...);`. */
int tk__fail(int status, const char *fmt, ...) TK_PRINTF(2, 3);
void tk__clear_error(void);

/* TK_EINVAL for unknown or read-only params, TK_ERANGE outside bounds. */
int tk__param_check(const char *handle, int param, int64_t value);

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
int tk__bytes(int64_t rows, int64_t cols, int64_t elem, size_t *bytes);

struct tk_matrix {
    int dtype;
    int64_t rows, cols;
    int64_t stride;   /* row stride in elements, >= cols */
    void *data;
    bool owned;
};

/* Element (r, c) address helpers. */
static inline void *tk__row(const tk_matrix *m, int64_t r)
{
    return (char *)m->data + (size_t)(r * m->stride * tk_dtype_size(m->dtype));
}

/* A validated dtype for kernels: F32 or BF16. */
static inline bool tk__is_float_dtype(int dtype)
{
    return dtype == TK_DTYPE_F32 || dtype == TK_DTYPE_BF16;
}

/* Row conversion between stored dtype and f32 (F32 or BF16 only). */
void tk__row_to_f32(int dtype, const void *src, float *dst, int64_t n);
void tk__row_from_f32(int dtype, const float *src, void *dst, int64_t n);

/* ---- kernels (kernel.c) ---------------------------------------------- */

struct tk_kernel {
    int n_inputs;
    int body_kind;      /* TK_BODY_ELEMENTWISE or TK_BODY_BLOCKWISE */
    tk_body_fn body;    /* built-in kernels set this to their own body too */
    void *user;
    bool is_axpy;       /* built-in alpha*x + y: alpha below */
    float alpha;
};

/* Call k's body once; a non-zero return becomes TK_ECALLBACK with a
 * message.  Used by the host executor and by the audit's references. */
int tk__kernel_apply(const tk_kernel *k, int64_t rows, int64_t cols, int64_t ld,
                     const float *const *in, float *out);

#endif
