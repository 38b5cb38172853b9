/*
 * tilekern.h - libtilekern public interface.
 *
 * libtilekern helps kernel engineers show that a custom compute kernel is
 * correct across shapes and dtypes: it maps logical shapes onto blocks,
 * runs elementwise or blockwise bodies on the host under an explicit numeric
 * contract (promote stored inputs to f32, compute, cast once), and audits any
 * implementation against two references kept apart: a represented-input
 * oracle (implementation error) and the original f32 data (precision gap).
 *
 * Conventions (see tilekern(7)):
 *  - every function returning int returns TK_OK (0) or a negative TK_E* code;
 *  - a failed call sets *out to NULL, leaves every caller-visible buffer
 *    untouched and records a message for tk_last_error_message();
 *  - handles are opaque; every create has a destroy that accepts NULL;
 *  - sizes are int64_t and are checked for overflow before any allocation;
 *  - the library never aborts, exits or prints.
 */
#ifndef TILEKERN_H
#define TILEKERN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The Makefile reads these three lines: keep their form. */
#define TK_VERSION_MAJOR 0
#define TK_VERSION_MINOR 6
#define TK_VERSION_PATCH 0
#define TK_VERSION_NUMBER \
    (TK_VERSION_MAJOR * 10000 + TK_VERSION_MINOR * 100 + TK_VERSION_PATCH)

#if defined(TK_BUILDING_LIBRARY) && defined(__GNUC__)
#define TK_API __attribute__((visibility("default")))
#else
#define TK_API
#endif

/*====================================================================
 * Status model
 *====================================================================*/

/* Every status once: X(name, value, what tk_strerror says).  Values are
 * pinned forever; new statuses go at the end with the next negative value.
 * tk_strerror and tk_status_name read this list, and a caller can too; the
 * library's build checks that each constant below has its value here. */
#define TK_STATUS_LIST(X)                                             \
    X(TK_OK, 0, "success")                                            \
    X(TK_EINVAL, -1, "invalid argument")                              \
    X(TK_ENOMEM, -2, "out of memory")                                 \
    X(TK_EOVERFLOW, -3, "size computation overflows")                 \
    X(TK_ESHAPE, -4, "shape is empty or does not match")              \
    X(TK_EDTYPE, -5, "unsupported or mismatched dtype")               \
    X(TK_ELAYOUT, -6, "block, stride or tail layout not legal here")  \
    X(TK_ERANGE, -7, "parameter value out of range")                  \
    X(TK_ECAPACITY, -8, "does not fit the on-chip memory limit")      \
    X(TK_ERACE, -9, "pipeline hazard detected")                       \
    X(TK_ENOTARGET, -10, "a real target is required")                 \
    X(TK_EMISMATCH, -11, "results do not match")                      \
    X(TK_EIO, -12, "input/output error")                              \
    X(TK_EFORMAT, -13, "malformed or unsupported file format")        \
    X(TK_ESTATE, -14, "call not valid in the current state")          \
    X(TK_ECALLBACK, -15, "a user callback failed")

/* Plain int constants, for #if and for C++ overloads alike. */
#define TK_OK 0
#define TK_EINVAL -1
#define TK_ENOMEM -2
#define TK_EOVERFLOW -3
#define TK_ESHAPE -4
#define TK_EDTYPE -5
#define TK_ELAYOUT -6
#define TK_ERANGE -7
#define TK_ECAPACITY -8
#define TK_ERACE -9
#define TK_ENOTARGET -10
#define TK_EMISMATCH -11
#define TK_EIO -12
#define TK_EFORMAT -13
#define TK_ESTATE -14
#define TK_ECALLBACK -15

TK_API unsigned tk_version_number(void);
TK_API const char *tk_version_string(void);
/* One line of key=value words: version, the dispatched path in use (isa),
 * the best one this CPU has (cpu), what TK_ISA asked, the compiler. */
TK_API const char *tk_build_info(void);
TK_API const char *tk_strerror(int status);
TK_API const char *tk_status_name(int status);
TK_API const char *tk_last_error_message(void);

/* v as the reports print it: the shortest decimal that reads back to v,
 * written as Python's repr() of a float ("0.1", "1e-05", "nan").  32 bytes
 * always suffice; a smaller size that cannot hold the text is TK_ERANGE. */
TK_API int tk_format_number(double v, char *buf, size_t size);

/* Legal range of any integer parameter of any handle. */
TK_API int tk_param_bounds(int param, int64_t *lo, int64_t *hi);

/*====================================================================
 * Dtypes and conversions
 *====================================================================*/

#define TK_DTYPE_F32 1
#define TK_DTYPE_BF16 2       /* stored as uint16_t bit patterns */
#define TK_DTYPE_I32 3        /* storage only: kernels reject it */
#define TK_DTYPE_F16 4        /* IEEE binary16, as uint16_t bits (since 0.4) */
#define TK_DTYPE_F8E4M3FN 5   /* ml_dtypes float8_e4m3fn, one byte (since 0.4) */
#define TK_DTYPE_F8E5M2 6     /* ml_dtypes float8_e5m2, one byte (since 0.4) */

TK_API const char *tk_dtype_name(int dtype);   /* "float32", NULL if unknown */
TK_API int64_t tk_dtype_size(int dtype);       /* bytes, 0 if unknown */

/* f32 -> bf16: round to nearest even; NaN -> quiet NaN keeping the sign
 * (0x7FC0/0xFFC0); +-Inf kept; overflow rounds to Inf; subnormals kept. */
TK_API uint16_t tk_bf16_from_f32(float x);
TK_API float tk_bf16_to_f32(uint16_t b);       /* exact */
TK_API int tk_bf16_from_f32_n(uint16_t *dst, const float *src, size_t n);
TK_API int tk_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n);

/* n elements between f32 and any float dtype, as ml_dtypes (and numpy,
 * for float16) convert: round to nearest even, subnormals kept; fp8
 * e4m3fn has no Inf, so Inf and overflow become NaN there.  dst holds n
 * elements of tk_dtype_size(dtype) bytes.  TK_EDTYPE for I32 or an
 * unknown dtype (since 0.4). */
TK_API int tk_dtype_from_f32_n(int dtype, void *dst, const float *src, size_t n);
TK_API int tk_dtype_to_f32_n(int dtype, float *dst, const void *src, size_t n);

/* Units in the last place between a and b in a float dtype (both values
 * are first represented in it).  +0 and -0 are 0 apart, crossing zero is
 * counted through it, any NaN gives UINT64_MAX, as do I32 and an unknown
 * dtype. */
TK_API uint64_t tk_ulp_distance(int dtype, float a, float b);

/*====================================================================
 * tk_matrix: a 2-D row-major array of one dtype, owned or borrowed
 *====================================================================*/

typedef struct tk_matrix tk_matrix;

TK_API int tk_matrix_create(tk_matrix **out, int dtype, int64_t rows,
                            int64_t cols);
TK_API int tk_matrix_wrap(tk_matrix **out, int dtype, int64_t rows,
                          int64_t cols, int64_t row_stride, void *data);
TK_API int tk_matrix_from_f32(tk_matrix **out, int dtype, int64_t rows,
                              int64_t cols, const float *src,
                              int64_t src_row_stride);
TK_API int tk_matrix_to_f32(const tk_matrix *m, float *dst,
                            int64_t dst_row_stride);
TK_API int tk_matrix_load_npy(tk_matrix **out, const char *path);
TK_API int tk_matrix_save_npy(const tk_matrix *m, const char *path);
TK_API void tk_matrix_destroy(tk_matrix *m);
TK_API int tk_matrix_dtype(const tk_matrix *m);           /* 0 for NULL */
TK_API int64_t tk_matrix_rows(const tk_matrix *m);        /* 0 for NULL */
TK_API int64_t tk_matrix_cols(const tk_matrix *m);        /* 0 for NULL */
TK_API int64_t tk_matrix_row_stride(const tk_matrix *m);  /* elements */
TK_API void *tk_matrix_data(const tk_matrix *m);

/*====================================================================
 * tk_tiling: logical shape -> grid of blocks, padding, tails
 *====================================================================*/

typedef struct tk_tiling tk_tiling;

/* Parameters (tk_tiling_set / tk_tiling_get). */
#define TK_TILING_TAIL 101             /* read-write: a TK_TAIL_* value */
#define TK_TILING_GRID_ROWS 102        /* read-only from here on */
#define TK_TILING_GRID_COLS 103
#define TK_TILING_TILES 104
#define TK_TILING_PADDED_ROWS 105
#define TK_TILING_PADDED_COLS 106
#define TK_TILING_PADDED_ELEMENTS 107  /* grid x block */
#define TK_TILING_EXTRA_ELEMENTS 108   /* elements the tail strategy adds */
#define TK_TILING_ROWS 109
#define TK_TILING_COLS 110
#define TK_TILING_BLOCK_ROWS 111
#define TK_TILING_BLOCK_COLS 112

/* Tail strategies. */
#define TK_TAIL_PAD 1             /* materialized zero padding, then crop */
#define TK_TAIL_MASK 2            /* default: edge tiles via one scratch block */
#define TK_TAIL_SHIFT_INWARDS 3   /* edge tiles shifted back inside */

TK_API int tk_tiling_create(tk_tiling **out, int64_t rows, int64_t cols,
                            int64_t block_rows, int64_t block_cols);
TK_API void tk_tiling_destroy(tk_tiling *t);
TK_API int tk_tiling_set(tk_tiling *t, int param, int64_t value);
TK_API int tk_tiling_get(const tk_tiling *t, int param, int64_t *value);
TK_API int tk_tiling_tile(const tk_tiling *t, int64_t index, int64_t *row0,
                          int64_t *col0, int64_t *rows, int64_t *cols);
TK_API int tk_pad(const tk_tiling *t, const tk_matrix *src,
                  tk_matrix **padded);
TK_API int tk_crop(const tk_tiling *t, const tk_matrix *padded,
                   tk_matrix *dst);

/*====================================================================
 * tk_kernel: what is computed, under the numeric contract
 *====================================================================*/

typedef struct tk_kernel tk_kernel;

/* A body reads n_inputs f32 tiles and writes one f32 tile, all rows x cols
 * with leading dimension ld (elements).  Return 0, or non-zero to stop the
 * run with TK_ECALLBACK. */
typedef int (*tk_body_fn)(void *user, int64_t rows, int64_t cols, int64_t ld,
                          const float *const *in, float *out);

#define TK_KERNEL_BODY 201      /* read-write: a TK_BODY_* value */
#define TK_KERNEL_INPUTS 202    /* read-only: number of inputs */
#define TK_KERNEL_ARITH 203     /* read-write, built-in bodies: TK_ARITH_* flags (0.4) */

/* The arithmetic of the built-in bodies: multiply-add separately rounded or
 * fused, subnormals (f32 operands and every f32 result) kept or flushed to
 * a zero of their sign.  The default is numpy's; XLA on CPU and TPUs fuse
 * and flush.  The cast to the output dtype follows the dtype in both.  On
 * a reduction (0.6) it is the arithmetic its audit bounds: under
 * TK_ARITH_FTZ the oracle reads subnormal f32 inputs as zeros. */
#define TK_ARITH_NUMPY 0        /* separate rounding, subnormals kept */
#define TK_ARITH_FMA 1          /* alpha * x + y fused: one rounding */
#define TK_ARITH_FTZ 2          /* subnormal operands and results become 0 */
#define TK_ARITH_XLA 3          /* TK_ARITH_FMA | TK_ARITH_FTZ */

/* Reduction contracts (since 0.4): out = cast(x @ y) of an M x K and a
 * K x N input, or the row sums out[i][0] = cast(sum_k x[i][k]) of an M x K
 * input, accumulated in TK_KERNEL_ACCUM (float32 by default) in any order.
 * The audit checks a candidate against a float64 oracle under a rigorous
 * error bound (see tk_audit.3); tk_kernel_run and the pipeline refuse them,
 * since their kernels are tk_calls. */
#define TK_KERNEL_ACCUM 204     /* reductions: TK_DTYPE_F32, _BF16 or _F16 */

/* 1 (default): a custom body that fails leaves tk_kernel_run's output as it
 * was, at the price of an output-sized undo copy.  0: no undo; the output
 * may then be partly written after TK_ECALLBACK (since 0.5). */
#define TK_KERNEL_UNDO 205

/* Threads of a run (since 0.5): 1 (default), up to TK_KERNEL_MAX_THREADS,
 * or 0 for every online core.  Results are bit-identical to one thread.  A
 * custom body is called from several threads only when TK_KERNEL_THREAD_SAFE
 * is 1 (default 0). */
#define TK_KERNEL_THREADS 206
#define TK_KERNEL_THREAD_SAFE 207
#define TK_KERNEL_MAX_THREADS 256

#define TK_BODY_ELEMENTWISE 1   /* may be called on any sub-rectangle */
#define TK_BODY_BLOCKWISE 2     /* always sees one zero-padded block */

#define TK_KERNEL_MAX_INPUTS 16

TK_API int tk_kernel_axpy(tk_kernel **out, float alpha);
TK_API int tk_kernel_custom(tk_kernel **out, int n_inputs, tk_body_fn body,
                            void *user);
TK_API int tk_kernel_matmul(tk_kernel **out);
TK_API int tk_kernel_row_sum(tk_kernel **out);
TK_API void tk_kernel_destroy(tk_kernel *k);
TK_API int tk_kernel_set(tk_kernel *k, int param, int64_t value);
TK_API int tk_kernel_get(const tk_kernel *k, int param, int64_t *value);
TK_API int tk_kernel_run(const tk_kernel *k, const tk_tiling *t,
                         const tk_matrix *const *inputs, tk_matrix *output);

/*====================================================================
 * tk_device: where work runs (host, simulated profile, external target)
 *====================================================================*/

typedef struct tk_device tk_device;

#define TK_DEVICE_ONCHIP_BYTES 301
#define TK_DEVICE_ONCHIP_LIMIT_BYTES 302
#define TK_DEVICE_HBM_BYTES_PER_S 303
#define TK_DEVICE_COPY_LATENCY_NS 304
#define TK_DEVICE_COPY_ENGINES 305
#define TK_DEVICE_COMPUTE_ELEMS_PER_S 306
#define TK_DEVICE_LAYOUT_ROWS 307
#define TK_DEVICE_LAYOUT_COLS 308

TK_API int tk_device_host(tk_device **out);
TK_API int tk_device_simulated(tk_device **out, const char *profile);
TK_API int tk_device_external(tk_device **out, const char *platform,
                              const char *device_kind);
TK_API void tk_device_destroy(tk_device *d);
TK_API int tk_device_is_simulated(const tk_device *d);  /* 1, 0; -1 if NULL */
TK_API const char *tk_device_kind(const tk_device *d);     /* "TPU v5 lite" */
TK_API const char *tk_device_platform(const tk_device *d); /* "cpu", "tpu" */
TK_API const char *tk_device_profile_name(int64_t index);  /* NULL past end */
TK_API int tk_device_set(tk_device *d, int param, int64_t value);
TK_API int tk_device_get(const tk_device *d, int param, int64_t *value);

/*====================================================================
 * tk_pipeline: tiles through multi-buffered on-chip memory (emit_pipeline),
 * simulated with exact hazard checks and a modeled (never measured) cost
 *====================================================================*/

typedef struct tk_pipeline tk_pipeline;
typedef struct tk_call tk_call;  /* see tk_call below */

#define TK_PIPE_MODE 401            /* a TK_MODE_* value */
#define TK_PIPE_INPUT_BUFFERS 402   /* slots per input: 1 to TK_PIPE_MAX_BUFFERS, default 2 */
#define TK_PIPE_OUTPUT_BUFFERS 403  /* slots for the output: 1 or 2, default 2 */
#define TK_PIPE_NO_PIPELINING 404   /* 1: synchronous copies, one slot each */
#define TK_PIPE_DETECT_RACES 405    /* 1 (default): refuse a schedule with hazards */
#define TK_PIPE_FAULT 406           /* a TK_FAULT_* value, for testing detectors */

#define TK_PIPE_MAX_BUFFERS 65536   /* in practice the on-chip limit binds first */

#define TK_MODE_SIMULATE 1   /* default: the schedule simulated on the host */
#define TK_MODE_TARGET 2     /* run on the device itself: real devices only */

#define TK_FAULT_NONE 0
#define TK_FAULT_SKIP_INPUT_WAIT 1    /* the fault step does not wait its inputs */
#define TK_FAULT_PREFETCH_OVERRUN 2   /* it prefetches one block too far ahead */
#define TK_FAULT_SKIP_OUTPUT_WAIT 3   /* it does not wait its output copy */
#define TK_FAULT_EARLY_COPY_OUT 4     /* it copies its output out before the body */

#define TK_HAZARD_UNWAITED_READ 1     /* a body reads a slot whose copy-in was not waited */
#define TK_HAZARD_OVERWRITE 2         /* a copy-in overwrites a slot still in use */
#define TK_HAZARD_UNWAITED_WRITE 3    /* a body writes a slot whose copy-out was not waited */
#define TK_HAZARD_EARLY_COPY_OUT 4    /* a copy-out starts before the body wrote the slot */
#define TK_HAZARD_NEVER_WAITED 5      /* a copy is still in flight when the pipeline ends */

#define TK_OPERAND_OUTPUT -1          /* operand number of the output in witnesses */

#define TK_STAT_STEPS 451
#define TK_STAT_COPIES_IN 452
#define TK_STAT_COPIES_OUT 453
#define TK_STAT_COPIES_SKIPPED 454
#define TK_STAT_BYTES_IN 455
#define TK_STAT_BYTES_OUT 456
#define TK_STAT_ONCHIP_BYTES 457      /* slots of every operand, as stored */
#define TK_STAT_HAZARDS 458
#define TK_STAT_MODELED_NS 459        /* modeled, never measured */
#define TK_STAT_MODELED_COMPUTE_NS 460
#define TK_STAT_MODELED_STALL_NS 461
#define TK_STAT_OVERLAP 462           /* share of copy time hidden under bodies */
#define TK_STAT_PADDED_ELEMENTS 463

TK_API int tk_pipeline_create(tk_pipeline **out, const tk_kernel *k,
                              const tk_tiling *t, const tk_device *d);
TK_API void tk_pipeline_destroy(tk_pipeline *p);
TK_API int tk_pipeline_set(tk_pipeline *p, int param, int64_t value);
TK_API int tk_pipeline_get(const tk_pipeline *p, int param, int64_t *value);
TK_API int tk_pipeline_run(tk_pipeline *p, const tk_matrix *const *inputs,
                           tk_matrix *output);
TK_API int tk_pipeline_stat(const tk_pipeline *p, int stat, double *value);
TK_API int tk_pipeline_stall(const tk_pipeline *p, int64_t step, double *ns);
TK_API int tk_pipeline_race(const tk_pipeline *p, int64_t index, int64_t *step,
                            int64_t *slot, int *operand, int *kind);
TK_API const char *tk_hazard_name(int kind);  /* "unwaited read", NULL if unknown */
TK_API int tk_pipeline_write_trace(const tk_pipeline *p, const char *path);
/* A tk_call through the pipeline simulator: each operand's blocks by its
 * index map, skipped copies, resident outputs; witnesses name output j as
 * TK_OPERAND_OUTPUT - j.  Slots per operand (0: the parameter's count). */
TK_API int tk_pipeline_create_call(tk_pipeline **out, tk_call *c, const tk_device *d);
TK_API int tk_pipeline_run_call(tk_pipeline *p, int n_inputs,
                                const tk_matrix *const *inputs, int n_outputs,
                                tk_matrix *const *outputs);
TK_API int tk_pipeline_set_buffers(tk_pipeline *p, int kind, int index,
                                   int64_t buffers);

/*====================================================================
 * tk_call: pallas_call's grid and BlockSpecs (index maps, revisited
 * outputs, many operands), run on the host
 *====================================================================*/

#define TK_CALL_MAX_RANK 3
#define TK_CALL_MAX_OPERANDS 16  /* inputs, and separately outputs */

/* Operand kinds (tk_call_set_map). */
#define TK_CALL_INPUT 1
#define TK_CALL_OUTPUT 2

/* Dimension semantics of a grid axis (tk_call_set_dimension). */
#define TK_DIM_PARALLEL 1    /* no output block may be revisited along it */
#define TK_DIM_ARBITRARY 2   /* default: steps in order, revisits allowed */

/* Parameters (tk_call_set / tk_call_get). */
#define TK_CALL_PAD 1001      /* read-write: a TK_PAD_* value, default zero */
#define TK_CALL_RANK 1002     /* read-only from here on */
#define TK_CALL_STEPS 1003
#define TK_CALL_INPUTS 1004
#define TK_CALL_OUTPUTS 1005
#define TK_CALL_UNDO 1006     /* read-write: 1 (default) keeps every output's
                                 old bytes until the run ends, so a failing
                                 body leaves them unchanged; 0 does not */
#define TK_CALL_ROUND_STEPS 1007 /* read-write (since 0.6): 1 rounds every
                                 output block to its dtype after each step,
                                 as a kernel accumulating in its output ref;
                                 0 (default) keeps it f32 until written back */

/* What reads past an input's edge see. */
#define TK_PAD_ZERO 1
#define TK_PAD_NAN 2
#define TK_PAD_VALUE 3   /* the value of tk_call_set_pad_value */

/* What the body sees of one operand at one grid step.  size is
 * sizeof(tk_block) of the library that filled it: fields are only ever
 * added at the end, so a body checks size before reading a newer field. */
typedef struct tk_block {
    size_t size;
    float *data;                  /* rows x cols f32, leading dimension ld */
    int64_t ld;
    int64_t rows, cols;           /* the block shape */
    int64_t valid_rows, valid_cols; /* the part inside the logical shape */
    int64_t block_row, block_col; /* the block index */
    int64_t grid[TK_CALL_MAX_RANK]; /* this step's grid index (unused axes 0) */
    int rank;
    int operand;                  /* its index among the inputs or outputs */
    int is_output;                /* 0 for an input (read only), 1 for an output */
} tk_block;

/* The body: blocks[0 .. inputs-1] are the inputs, then the outputs.  Return
 * 0, or non-zero to stop the run with TK_ECALLBACK. */
typedef int (*tk_call_body_fn)(void *user, tk_block *const *blocks, int n_blocks);
/* An index map that affine maps cannot express: grid index -> block index. */
typedef int (*tk_index_map_fn)(void *user, const int64_t *grid, int rank,
                               int64_t *block_row, int64_t *block_col);

TK_API int tk_call_create(tk_call **out, int rank, const int64_t *grid,
                          tk_call_body_fn body, void *user);
/* The call of tk_kernel_run(k, t, ...) on matrices of `dtype` (since 0.6):
 * t's grid, the kernel's inputs and one output, all of t's shape and
 * blocks, identity maps, the kernel's body.  With zero padding (the
 * default) tk_call_run runs it as tk_kernel_run does, threads included.
 * It copies t; k must outlive it.  Not for TK_TAIL_SHIFT_INWARDS. */
TK_API int tk_call_create_kernel(tk_call **out, const tk_kernel *k, const tk_tiling *t,
                                 int dtype);
TK_API void tk_call_destroy(tk_call *c);
/* map: 2 x (rank + 1) row-major, block_row = map[0..rank-1] . grid +
 * map[rank], block_col likewise from the second row; NULL is the identity
 * of a rank-2 grid.  Return the operand's index, or a negative status. */
TK_API int tk_call_add_input(tk_call *c, int dtype, int64_t rows, int64_t cols,
                             int64_t block_rows, int64_t block_cols,
                             const int64_t *map);
TK_API int tk_call_add_output(tk_call *c, int dtype, int64_t rows, int64_t cols,
                              int64_t block_rows, int64_t block_cols,
                              const int64_t *map);
TK_API int tk_call_set_map(tk_call *c, int kind, int index, tk_index_map_fn fn,
                           void *user);
TK_API int tk_call_set_dimension(tk_call *c, int axis, int semantics);
TK_API int tk_call_set(tk_call *c, int param, int64_t value);
TK_API int tk_call_get(const tk_call *c, int param, int64_t *value);
TK_API int tk_call_set_pad_value(tk_call *c, float value);
TK_API int tk_call_run(tk_call *c, int n_inputs, const tk_matrix *const *inputs,
                       int n_outputs, tk_matrix *const *outputs);
/* Run with zero and with NaN padding; *changed output elements differ
 * (TK_EMISMATCH when any, the first named in the message). */
TK_API int tk_call_check_padding(tk_call *c, int n_inputs,
                                 const tk_matrix *const *inputs, int64_t *changed);
/* TK_STAT_STEPS, _COPIES_IN, _COPIES_OUT, _COPIES_SKIPPED, _BYTES_IN,
 * _BYTES_OUT of the last complete run. */
TK_API int tk_call_stat(const tk_call *c, int stat, double *value);

/*====================================================================
 * tk_compare: actual versus expected, with an explicit tolerance
 *====================================================================*/

typedef struct tk_compare tk_compare;

/* Integer parameters (tk_compare_set). */
#define TK_COMPARE_MAX_ULP 601     /* -1 (default): no ULP criterion */
#define TK_COMPARE_NAN_POLICY 602  /* a TK_NAN_* value */

#define TK_NAN_MATCH 1   /* default: NaN positions must match */
#define TK_NAN_ANY 2     /* any NaN disagreement is a mismatch (NaN != NaN) */
#define TK_NAN_IGNORE 3  /* positions with a NaN on either side are skipped */

/* Results (tk_compare_result). */
#define TK_COMPARE_ELEMENTS 611
#define TK_COMPARE_MISMATCHES 612
#define TK_COMPARE_MISMATCH_PERCENT 613
#define TK_COMPARE_MAX_ABS 614
#define TK_COMPARE_MAX_REL 615
#define TK_COMPARE_MAX_ULP_SEEN 616
#define TK_COMPARE_ULP_HIST_0 617
#define TK_COMPARE_ULP_HIST_1 618
#define TK_COMPARE_ULP_HIST_2 619
#define TK_COMPARE_ULP_HIST_3PLUS 620
#define TK_COMPARE_PASSED 621
#define TK_COMPARE_ATOL 622
#define TK_COMPARE_RTOL 623

/* Where each maximum was seen (tk_compare_where). */
#define TK_WHERE_MAX_ABS 1
#define TK_WHERE_MAX_REL 2
#define TK_WHERE_MAX_ULP 3
#define TK_WHERE_FIRST_MISMATCH 4

TK_API int tk_compare_create(tk_compare **out, int dtype);
TK_API void tk_compare_destroy(tk_compare *c);
TK_API int tk_compare_set(tk_compare *c, int param, int64_t value);
TK_API int tk_compare_get(const tk_compare *c, int param, int64_t *value);
TK_API int tk_compare_set_tolerance(tk_compare *c, double atol, double rtol);
TK_API int tk_compare_run(tk_compare *c, const tk_matrix *actual,
                          const tk_matrix *expected);  /* TK_EMISMATCH */
TK_API int tk_compare_result(const tk_compare *c, int metric, double *value);
TK_API int tk_compare_where(const tk_compare *c, int which, int64_t *row,
                            int64_t *col, float *actual, float *expected);
TK_API int tk_compare_format(const tk_compare *c, char *buf, size_t size);

/*====================================================================
 * tk_audit: candidate vs represented-input oracle, and precision gap
 *====================================================================*/

typedef struct tk_audit tk_audit;

typedef int (*tk_candidate_fn)(void *user, const tk_matrix *const *inputs,
                               tk_matrix *output);
/* Progress of tk_audit_run (since 0.6): the case, the step under way
 * ("oracle", "candidate", "measure" or "diagnosis") and the fraction of
 * the step's current pass done; non-zero stops the run (TK_ECALLBACK). */
typedef int (*tk_progress_fn)(void *user, int64_t case_index, const char *step,
                              double fraction);

/* Results per case (tk_audit_result). */
#define TK_AUDIT_IMPL_MAX_ABS 701
#define TK_AUDIT_IMPL_MAX_ULP 702
#define TK_AUDIT_IMPL_MISMATCHES 703
#define TK_AUDIT_GAP_MAX_ABS 704
#define TK_AUDIT_GAP_MAX_REL 705
#define TK_AUDIT_GAP_INPUT_MAX_ABS 706
#define TK_AUDIT_GAP_OUTPUT_MAX_ABS 707
#define TK_AUDIT_PASSED 708          /* implementation verdict, 1 or 0 */
#define TK_AUDIT_GAP_PASSED 709      /* gap within the gap tolerance */
#define TK_AUDIT_GAP_ATOL 710
#define TK_AUDIT_GAP_RTOL 711
#define TK_AUDIT_SCALE 712           /* max |original reference| */
#define TK_AUDIT_DIAGNOSIS 713       /* a TK_SCHEDULE_* value */
#define TK_AUDIT_ROWS 714
#define TK_AUDIT_COLS 715
#define TK_AUDIT_DTYPE 716
#define TK_AUDIT_GAP_MISMATCHES 717
/* Reduction cases only (since 0.4); an exact contract has no bound. */
#define TK_AUDIT_BOUND_RATIO 718     /* max |candidate - oracle| / bound */
#define TK_AUDIT_BOUND 719           /* the bound where the ratio is largest */
#define TK_AUDIT_BOUND_ROW 720
#define TK_AUDIT_BOUND_COL 721
#define TK_AUDIT_DEPTH 722           /* K; 0 for an elementwise case */
#define TK_AUDIT_OUT_DTYPE 723       /* the output's dtype */

/* Rounding schedules named by the diagnosis. */
#define TK_SCHEDULE_UNKNOWN 0        /* no candidate schedule matches */
#define TK_SCHEDULE_FINAL_CAST 1     /* one cast only: inputs never represented */
#define TK_SCHEDULE_EARLY_ROUND 2    /* intermediate rounded to the dtype */
#define TK_SCHEDULE_TRUNCATE 3       /* truncation instead of RNE */
#define TK_SCHEDULE_FLUSH_SUBNORMAL 4 /* subnormals flushed to zero */
#define TK_SCHEDULE_FUSED_MULADD 5   /* multiply-add fused; the contract rounds twice (0.4) */
#define TK_SCHEDULE_SEPARATE_MULADD 6 /* rounded twice; the contract fuses (0.4) */
#define TK_SCHEDULE_KEEP_SUBNORMAL 7 /* subnormals kept; the contract flushes (0.4) */
/* Reductions (0.4): which alternative explains the candidate within its bound. */
#define TK_SCHEDULE_PRODUCTS_ROUNDED 8 /* products rounded to the storage dtype */
#define TK_SCHEDULE_K_TAIL 9         /* the last partial block of K left out */
#define TK_SCHEDULE_BF16_ACCUM 10    /* accumulated in bfloat16 */
#define TK_SCHEDULE_F16_ACCUM 11     /* accumulated in float16 */
#define TK_SCHEDULE_NO_INIT 12       /* output read before it was written */
/* Both of the built-in axpy's arithmetic flags at once (0.6). */
#define TK_SCHEDULE_XLA_ARITH 13     /* fused and flushed; the contract does neither */
#define TK_SCHEDULE_NUMPY_ARITH 14   /* rounded twice, subnormals kept; the contract is XLA's */
/* Both flags where the contract sets one of them (0.6). */
#define TK_SCHEDULE_FUSED_KEEP_SUBNORMAL 15 /* the contract flushes alone */
#define TK_SCHEDULE_SEPARATE_FLUSH 16       /* the contract fuses alone */
/* A reduction whose NaN comes from beyond K, not from its output (0.6). */
#define TK_SCHEDULE_K_TAIL_PADDING 17 /* the last partial block of K read padding */
#define TK_SCHEDULE_NOT_RUN -1       /* diagnosis not needed (passed) */

/* Report formats. */
#define TK_REPORT_TEXT 1
#define TK_REPORT_JSON 2
#define TK_REPORT_SVG 3

TK_API int tk_audit_create(tk_audit **out, const tk_kernel *contract);
TK_API void tk_audit_destroy(tk_audit *a);
TK_API int tk_audit_set_candidate(tk_audit *a, tk_candidate_fn fn,
                                  void *user);
TK_API int tk_audit_set_gap_tolerance(tk_audit *a, int dtype, double atol,
                                      double rtol);
TK_API int tk_audit_set_progress(tk_audit *a, tk_progress_fn fn, void *user);
TK_API int tk_audit_add_case(tk_audit *a, int dtype, int64_t rows,
                             int64_t cols, const float *const *originals);
/* A case of a reduction contract: originals x (m x k) and, for a matmul,
 * y (k x n; a row sum has n = 1), inputs in dtype, output in out_dtype
 * (since 0.4). */
TK_API int tk_audit_add_reduction_case(tk_audit *a, int dtype, int out_dtype, int64_t m,
                                       int64_t k, int64_t n,
                                       const float *const *originals);
TK_API int tk_audit_run(tk_audit *a);
TK_API int64_t tk_audit_case_count(const tk_audit *a);
TK_API int tk_audit_result(const tk_audit *a, int64_t case_index, int metric,
                           double *value);
TK_API const char *tk_audit_schedule_name(int schedule);
TK_API int tk_audit_check_permutation(tk_audit *a, int64_t case_index,
                                      const int64_t *order);
TK_API int tk_audit_write_report(const tk_audit *a, const char *path,
                                 int format);

/* The early-versus-final rounding counterexample: early casts `first` to
 * dtype, adds `second` in f32 and casts; late adds in f32 and casts once. */
TK_API int tk_rounding_counterexample(int dtype, float first, float second,
                                      float *early, float *late);

/* Amdahl's law: 1/((1-fraction)+fraction/local_speedup); local_speedup of
 * +Inf gives the limit 1/(1-fraction).  NaN for out-of-range arguments. */
TK_API double tk_amdahl(double fraction, double local_speedup);

/*====================================================================
 * tk_bench: compile, warm-up and synchronized samples on a real target
 *====================================================================*/

typedef struct tk_bench tk_bench;

/* A benchmark callback: 0 on success, anything else stops the run. */
typedef int (*tk_bench_fn)(void *user);

#define TK_BENCH_REPEATS 801      /* samples per entry: 5 to 1000000, default 20 */
#define TK_BENCH_WARMUPS 802      /* untimed runs first: 1 to 1000, default 5 */
#define TK_BENCH_INTERLEAVE 803   /* 1 (default): entries sampled in turn */
#define TK_BENCH_MAX_SECONDS 804  /* sampling budget; 0 (default): none */
#define TK_BENCH_BASELINE 805     /* entry that speedups compare with, default 0 */

#define TK_BENCH_COMPILE_S 811
#define TK_BENCH_MEDIAN_MS 812    /* as np.median */
#define TK_BENCH_P90_MS 813       /* as np.percentile(samples, 90) */
#define TK_BENCH_MIN_MS 814
#define TK_BENCH_MAX_MS 815
#define TK_BENCH_MEAN_MS 816
#define TK_BENCH_STDEV_MS 817     /* population, as np.std */
#define TK_BENCH_SAMPLES 818
#define TK_BENCH_SPEEDUP 819      /* baseline median / this entry's median */

TK_API int tk_bench_create(tk_bench **out, const tk_device *target);
TK_API void tk_bench_destroy(tk_bench *b);
TK_API int tk_bench_set(tk_bench *b, int param, int64_t value);
TK_API int tk_bench_get(const tk_bench *b, int param, int64_t *value);
TK_API int tk_bench_set_boundary(tk_bench *b, const char *text);
TK_API int tk_bench_add(tk_bench *b, const char *label, const tk_device *placement,
                        tk_bench_fn compile, tk_bench_fn run, tk_bench_fn sync,
                        void *user);   /* the entry's index, or a negative status */
TK_API int tk_bench_run(tk_bench *b);
TK_API int64_t tk_bench_samples(const tk_bench *b, int entry, double *out_ms,
                                int64_t capacity);  /* count, or a negative status */
TK_API int tk_bench_result(const tk_bench *b, int entry, int stat, double *value);
TK_API int tk_bench_write_receipt(const tk_bench *b, const char *path);

/* numpy's np.median and np.percentile (method "linear"), bit for bit (but
 * the sign of a zero result when -0.0 and +0.0 are both present); NaN for
 * no data, a NaN sample, or a percent outside [0, 100]. */
TK_API double tk_median(const double *x, size_t n);
TK_API double tk_percentile(const double *x, size_t n, double percent);

#ifdef __cplusplus
}
#endif
#endif /* TILEKERN_H */
