/* test_pipeline.c - tk_pipeline: emit_pipeline schedules against tk_kernel_run
 * (itself checked bit for bit against an untiled oracle in test_kernel.c),
 * hazards from deliberate faults, capacity and layout checks, the cost
 * model against figures computed here from the device, and the trace. */
#include "tk_test.h"

#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static double stat(const tk_pipeline *p, int which)
{
    double v = -1;
    tkt_expect_status(tk_pipeline_stat(p, which, &v), TK_OK);
    return v;
}

static int64_t figure(const tk_device *d, int param)
{
    int64_t v = -1;
    tkt_expect_status(tk_device_get(d, param, &v), TK_OK);
    return v;
}

/* Everything a test needs: x, y, an output, tk_kernel_run's answer. */
struct rig {
    tk_kernel *k;
    tk_tiling *t;
    tk_device *d;
    tk_pipeline *p;
    tk_matrix *x, *y, *out, *want;
    const tk_matrix *in[2];
    void *before;
};

static void rig_open(struct rig *g, const char *profile, int dtype, int64_t rows, int64_t cols,
                     int64_t br, int64_t bc)
{
    tkt_expect_status(tk_kernel_axpy(&g->k, 2.0f), TK_OK);
    tkt_expect_status(tk_tiling_create(&g->t, rows, cols, br, bc), TK_OK);
    if (profile)
        tkt_expect_status(tk_device_simulated(&g->d, profile), TK_OK);
    else
        tkt_expect_status(tk_device_host(&g->d), TK_OK);
    tkt_expect_status(tk_pipeline_create(&g->p, g->k, g->t, g->d), TK_OK);
    g->x = tkt_matrix(dtype, rows, cols, 71);
    g->y = tkt_matrix(dtype, rows, cols, 72);
    g->out = tkt_matrix(dtype, rows, cols, 73);
    g->want = tkt_matrix(dtype, rows, cols, 74);
    g->in[0] = g->x;
    g->in[1] = g->y;
    tkt_expect_status(tk_kernel_run(g->k, g->t, g->in, g->want), TK_OK);
    g->before = tkt_snapshot(g->out);
}

static void rig_close(struct rig *g)
{
    free(g->before);
    tk_pipeline_destroy(g->p);
    tk_device_destroy(g->d);
    tk_tiling_destroy(g->t);
    tk_kernel_destroy(g->k);
    tk_matrix *m[] = {g->x, g->y, g->out, g->want};
    for (int i = 0; i < 4; i++)
        tk_matrix_destroy(m[i]);
}

static void expect_result(const struct rig *g, const char *what)
{
    cr_assert(memcmp(tk_matrix_data(g->out), tk_matrix_data(g->want), tkt_bytes(g->out)) == 0,
              "%s: the pipeline's output differs from tk_kernel_run's", what);
}

static void expect_unchanged(const struct rig *g, const char *what)
{
    cr_assert(memcmp(tk_matrix_data(g->out), g->before, tkt_bytes(g->out)) == 0,
              "%s: the output buffer changed", what);
}

/* ---- the seed's configuration sweep -------------------------------------------- */

/* 15x255 f32, blocks (8,128) and (16,256), 2 and 3 buffers: the same output
 * every time, and 4096 padded elements each, as the seed prints. */
Test(pipeline, seed_configuration_sweep)
{
    static const int64_t blocks[2][2] = {{8, 128}, {16, 256}};
    for (int b = 0; b < 2; b++)
        for (int64_t buffers = 2; buffers <= 3; buffers++) {
            struct rig g;
            rig_open(&g, "TPU v5 lite", TK_DTYPE_F32, 15, 255, blocks[b][0], blocks[b][1]);
            tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_INPUT_BUFFERS, buffers), TK_OK);
            tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_OK);
            char what[64];
            snprintf(what, sizeof what, "block %lldx%lld, %lld buffers",
                     (long long)blocks[b][0], (long long)blocks[b][1], (long long)buffers);
            expect_result(&g, what);
            int64_t grid_r = (15 + blocks[b][0] - 1) / blocks[b][0];
            int64_t grid_c = (255 + blocks[b][1] - 1) / blocks[b][1];
            double padded = (double)(grid_r * grid_c * blocks[b][0] * blocks[b][1]);
            cr_assert_eq(stat(g.p, TK_STAT_PADDED_ELEMENTS), padded, "%s", what);
            cr_assert_eq(stat(g.p, TK_STAT_PADDED_ELEMENTS), 4096.0, "%s: the seed's figure",
                         what);
            cr_assert_eq(stat(g.p, TK_STAT_STEPS), (double)(grid_r * grid_c));
            /* Two inputs with `buffers` slots each, two output slots. */
            double block_bytes = (double)(blocks[b][0] * blocks[b][1] * 4);
            cr_assert_eq(stat(g.p, TK_STAT_ONCHIP_BYTES), (2.0 * buffers + 2) * block_bytes);
            cr_assert_eq(stat(g.p, TK_STAT_HAZARDS), 0);
            rig_close(&g);
        }
}

/* ---- every schedule computes tk_kernel_run's output ------------------------------- */

struct sched {
    int dtype;
    int64_t rows, cols, br, bc, in_buffers, out_buffers, sync;
};

ParameterizedTestParameters(pipeline, schedules)
{
    static const int64_t shapes[][4] = {{1, 1, 8, 128},    {8, 128, 8, 128},
                                        {17, 257, 8, 128}, {15, 255, 16, 256},
                                        {40, 300, 16, 128}};
    /* Input slots 1 to 5 with two output slots (one output slot is a hazard,
     * below), then no pipelining. */
    static struct sched p[5 * 2 * 6];
    size_t n = 0;
    for (int s = 0; s < 5; s++)
        for (int d = 0; d < 2; d++)
            for (int64_t v = 0; v < 6; v++)
                p[n++] = (struct sched){d ? TK_DTYPE_BF16 : TK_DTYPE_F32, shapes[s][0],
                                        shapes[s][1], shapes[s][2], shapes[s][3],
                                        v < 5 ? 1 + v : 1, v < 5 ? 2 : 1, v == 5};
    return cr_make_param_array(struct sched, p, n);
}

ParameterizedTest(struct sched *s, pipeline, schedules)
{
    struct rig g;
    rig_open(&g, "TPU v4", s->dtype, s->rows, s->cols, s->br, s->bc);
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_INPUT_BUFFERS, s->in_buffers), TK_OK);
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_OUTPUT_BUFFERS, s->out_buffers), TK_OK);
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_NO_PIPELINING, s->sync), TK_OK);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_OK);
    char what[96];
    snprintf(what, sizeof what, "%lldx%lld %s, block %lldx%lld, %lld+%lld buffers%s",
             (long long)s->rows, (long long)s->cols, tk_dtype_name(s->dtype), (long long)s->br,
             (long long)s->bc, (long long)s->in_buffers, (long long)s->out_buffers,
             s->sync ? ", no pipelining" : "");
    expect_result(&g, what);
    /* Checked free of hazards, the built-in body computes without slots;
     * unchecked, the same schedule runs slot by slot, to the same bits. */
    memcpy(tk_matrix_data(g.out), g.before, tkt_bytes(g.out));
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_DETECT_RACES, 0), TK_OK);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_OK);
    expect_result(&g, what);
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_DETECT_RACES, 1), TK_OK);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_OK);
    int64_t tiles;
    tkt_expect_status(tk_tiling_get(g.t, TK_TILING_TILES, &tiles), TK_OK);
    double block_bytes = (double)(s->br * s->bc * tk_dtype_size(s->dtype));
    cr_assert_eq(stat(g.p, TK_STAT_STEPS), (double)tiles, "%s", what);
    cr_assert_eq(stat(g.p, TK_STAT_COPIES_IN), 2.0 * tiles, "%s", what);
    cr_assert_eq(stat(g.p, TK_STAT_COPIES_OUT), (double)tiles, "%s", what);
    cr_assert_eq(stat(g.p, TK_STAT_COPIES_SKIPPED), 0);
    cr_assert_eq(stat(g.p, TK_STAT_BYTES_IN), 2.0 * tiles * block_bytes, "%s", what);
    cr_assert_eq(stat(g.p, TK_STAT_BYTES_OUT), tiles * block_bytes, "%s", what);
    cr_assert_eq(stat(g.p, TK_STAT_ONCHIP_BYTES),
                 (2.0 * s->in_buffers + s->out_buffers) * block_bytes, "%s", what);
    cr_assert_eq(stat(g.p, TK_STAT_HAZARDS), 0, "%s", what);
    /* Stalls add up, and the modeled time covers compute and stalls. */
    double sum = 0, ns;
    for (int64_t k = 0; k < tiles; k++) {
        tkt_expect_status(tk_pipeline_stall(g.p, k, &ns), TK_OK);
        cr_assert(ns >= 0);
        sum += ns;
    }
    cr_assert_float_eq(sum, stat(g.p, TK_STAT_MODELED_STALL_NS), 1e-6 * sum + 1e-9);
    cr_assert(stat(g.p, TK_STAT_MODELED_NS) >=
              stat(g.p, TK_STAT_MODELED_COMPUTE_NS) + stat(g.p, TK_STAT_MODELED_STALL_NS) -
                  1e-6, "%s", what);
    double overlap = stat(g.p, TK_STAT_OVERLAP);
    cr_assert(overlap >= 0 && overlap <= 1, "%s: overlap %g", what, overlap);
    if (s->sync)
        cr_assert_eq(overlap, 0, "%s: nothing may be in flight during a body", what);
    rig_close(&g);
}

/* ---- the cost model, computed here from the device's figures ------------------- */

/* Without pipelining every step is copy in, body, copy out, one after the
 * other; the two inputs' copies run side by side on two engines. */
Test(pipeline, synchronous_time_is_the_sum_of_its_parts)
{
    struct rig g;
    rig_open(&g, "TPU v5p", TK_DTYPE_BF16, 64, 512, 32, 256);
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_NO_PIPELINING, 1), TK_OK);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_OK);
    expect_result(&g, "synchronous");
    double lat = (double)figure(g.d, TK_DEVICE_COPY_LATENCY_NS);
    double bw = (double)figure(g.d, TK_DEVICE_HBM_BYTES_PER_S);
    double rate = (double)figure(g.d, TK_DEVICE_COMPUTE_ELEMS_PER_S);
    double copy = lat + 32.0 * 256 * 2 / bw * 1e9, body = 32.0 * 256 / rate * 1e9;
    double steps = 2 * 2;
    cr_assert_float_eq(stat(g.p, TK_STAT_MODELED_NS), steps * (2 * copy + body), 1e-6);
    cr_assert_float_eq(stat(g.p, TK_STAT_MODELED_COMPUTE_NS), steps * body, 1e-6);
    cr_assert_float_eq(stat(g.p, TK_STAT_MODELED_STALL_NS), steps * 2 * copy, 1e-6);
    rig_close(&g);
}

/* Double buffering hides copies behind bodies: on a long grid of large
 * blocks the modeled time approaches the copy traffic at HBM bandwidth
 * (the bound), is below the synchronous time, and overlap rises. */
Test(pipeline, double_buffering_overlaps)
{
    struct rig g;
    rig_open(&g, "TPU v6e", TK_DTYPE_F32, 1024, 1024, 128, 512);
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_NO_PIPELINING, 1), TK_OK);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_OK);
    double sync_ns = stat(g.p, TK_STAT_MODELED_NS);
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_NO_PIPELINING, 0), TK_OK);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_OK);
    expect_result(&g, "double buffered");
    double piped = stat(g.p, TK_STAT_MODELED_NS);
    double bw = (double)figure(g.d, TK_DEVICE_HBM_BYTES_PER_S);
    double engines = (double)figure(g.d, TK_DEVICE_COPY_ENGINES);
    double traffic = (stat(g.p, TK_STAT_BYTES_IN) + stat(g.p, TK_STAT_BYTES_OUT)) / bw * 1e9;
    cr_assert(piped < sync_ns, "pipelined %g ns, synchronous %g ns", piped, sync_ns);
    cr_assert(piped >= traffic / engines, "faster than the engines could copy");
    cr_assert(stat(g.p, TK_STAT_OVERLAP) > 0);
    rig_close(&g);
}

/* ---- hazards ------------------------------------------------------------------------ */

struct fault_case {
    int64_t fault, in_buffers, out_buffers;
    int kind;   /* the hazard the fault must produce */
};

ParameterizedTestParameters(pipeline, faults_are_detected)
{
    static struct fault_case p[] = {
        {TK_FAULT_SKIP_INPUT_WAIT, 2, 2, TK_HAZARD_UNWAITED_READ},
        {TK_FAULT_SKIP_INPUT_WAIT, 4, 2, TK_HAZARD_UNWAITED_READ},
        {TK_FAULT_PREFETCH_OVERRUN, 2, 2, TK_HAZARD_OVERWRITE},
        {TK_FAULT_PREFETCH_OVERRUN, 3, 2, TK_HAZARD_OVERWRITE},
        {TK_FAULT_SKIP_OUTPUT_WAIT, 2, 2, TK_HAZARD_UNWAITED_WRITE},
        {TK_FAULT_SKIP_OUTPUT_WAIT, 3, 2, TK_HAZARD_UNWAITED_WRITE},
        {TK_FAULT_EARLY_COPY_OUT, 2, 2, TK_HAZARD_EARLY_COPY_OUT},
        {TK_FAULT_EARLY_COPY_OUT, 1, 2, TK_HAZARD_EARLY_COPY_OUT},
    };
    return cr_make_param_array(struct fault_case, p, sizeof p / sizeof p[0]);
}

/* A 4x3 grid: the fault is made at step 6.  The run is refused with
 * TK_ERACE, the output untouched, and a witness names the hazard at the
 * step where it happens. */
ParameterizedTest(struct fault_case *f, pipeline, faults_are_detected)
{
    struct rig g;
    rig_open(&g, "TPU v5 lite", TK_DTYPE_F32, 32, 384, 8, 128);
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_INPUT_BUFFERS, f->in_buffers), TK_OK);
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_OUTPUT_BUFFERS, f->out_buffers), TK_OK);
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_FAULT, f->fault), TK_OK);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_ERACE);
    cr_assert(strstr(tk_last_error_message(), tk_hazard_name(f->kind)), "%s",
              tk_last_error_message());
    expect_unchanged(&g, "refused run");
    /* Where the fault acts: the step itself, or for a skipped output wait
     * the next step's body, which writes the slot still being copied. */
    int64_t want_step = 6 + (f->fault == TK_FAULT_SKIP_OUTPUT_WAIT);
    double n = stat(g.p, TK_STAT_HAZARDS);
    bool found = false;
    for (int64_t i = 0; i < (int64_t)n; i++) {
        int64_t step, slot;
        int operand, kind;
        tkt_expect_status(tk_pipeline_race(g.p, i, &step, &slot, &operand, &kind), TK_OK);
        cr_assert(step >= 0 && step < 12 && slot >= 0 && slot < 3);
        cr_assert(operand == TK_OPERAND_OUTPUT || (operand >= 0 && operand < 2));
        found = found || (kind == f->kind && step == want_step);
    }
    cr_assert(found, "no %s witness at step %lld among %g", tk_hazard_name(f->kind),
              (long long)want_step, n);
    int64_t step;
    tkt_expect_status(tk_pipeline_race(g.p, (int64_t)n, &step, NULL, NULL, NULL), TK_ERANGE);
    /* The same schedule with the fault removed passes. */
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_FAULT, TK_FAULT_NONE), TK_OK);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_OK);
    expect_result(&g, "no fault");
    rig_close(&g);
}

/* One output slot, as emit_pipeline runs it: a step waits the previous
 * step's copy-out, so the next body writes the slot still being copied
 * out.  Pallas's interpret mode reports that race too; only a one-step grid,
 * or no pipelining (each step waits its own copy-out), is safe. */
Test(pipeline, one_output_slot_is_a_hazard)
{
    struct rig g;
    rig_open(&g, "TPU v5 lite", TK_DTYPE_F32, 8, 512, 8, 128);
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_OUTPUT_BUFFERS, 1), TK_OK);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_ERACE);
    expect_unchanged(&g, "one output slot");
    int64_t step, slot;
    int operand, kind;
    tkt_expect_status(tk_pipeline_race(g.p, 0, &step, &slot, &operand, &kind), TK_OK);
    cr_assert(step == 1 && slot == 0 && operand == TK_OPERAND_OUTPUT &&
              kind == TK_HAZARD_UNWAITED_WRITE, "step %lld slot %lld operand %d kind %d",
              (long long)step, (long long)slot, operand, kind);
    cr_assert_eq(stat(g.p, TK_STAT_HAZARDS), 3.0, "steps 1, 2 and 3 each write too early");
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_NO_PIPELINING, 1), TK_OK);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_OK);
    expect_result(&g, "no pipelining");
    rig_close(&g);
    rig_open(&g, "TPU v5 lite", TK_DTYPE_F32, 8, 128, 8, 128);
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_OUTPUT_BUFFERS, 1), TK_OK);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_OK);
    expect_result(&g, "one step");
    rig_close(&g);
}

/* Unchecked, a prefetch overrun really corrupts the result: the hazard is
 * not a false alarm. */
Test(pipeline, unchecked_overrun_corrupts)
{
    struct rig g;
    rig_open(&g, "TPU v5 lite", TK_DTYPE_F32, 32, 384, 8, 128);
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_FAULT, TK_FAULT_PREFETCH_OVERRUN), TK_OK);
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_DETECT_RACES, 0), TK_OK);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_OK);
    cr_assert(memcmp(tk_matrix_data(g.out), tk_matrix_data(g.want), tkt_bytes(g.out)) != 0);
    double v;
    tkt_expect_status(tk_pipeline_stat(g.p, TK_STAT_HAZARDS, &v), TK_ESTATE);
    tkt_expect_status(tk_pipeline_race(g.p, 0, NULL, NULL, NULL, NULL), TK_ESTATE);
    rig_close(&g);
}

/* ---- what is refused before anything runs ------------------------------------------ */

Test(pipeline, capacity_is_checked_first)
{
    struct rig g;
    /* 1024x1024 f32 blocks are 4 MiB: 2 x 2 + 2 slots is 24 MiB, over v5e's
     * 16 MiB scoped limit; one slot per input and two output slots (16 MiB)
     * fit. */
    rig_open(&g, "TPU v5 lite", TK_DTYPE_F32, 1024, 2048, 1024, 1024);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_ECAPACITY);
    cr_assert(strstr(tk_last_error_message(), "25165824"), "%s", tk_last_error_message());
    cr_assert(strstr(tk_last_error_message(), "16777216"), "%s", tk_last_error_message());
    expect_unchanged(&g, "over capacity");
    double v;
    tkt_expect_status(tk_pipeline_stat(g.p, TK_STAT_STEPS, &v), TK_ESTATE);
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_INPUT_BUFFERS, 1), TK_OK);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_OK);
    expect_result(&g, "one slot per input");
    cr_assert_eq(stat(g.p, TK_STAT_ONCHIP_BYTES), 4.0 * 4194304);
    /* Buffer counts beyond 3 are what the capacity allows, no more. */
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_INPUT_BUFFERS, 2), TK_OK);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_ECAPACITY);
    rig_close(&g);
    /* A scoped limit set above VMEM (128 MiB on v5e) cannot make memory:
     * 4096x8192 f32 blocks are 128 MiB a slot, and six need 768 MiB. */
    rig_open(&g, "TPU v5 lite", TK_DTYPE_F32, 8, 128, 4096, 8192);
    tkt_expect_status(tk_device_set(g.d, TK_DEVICE_ONCHIP_LIMIT_BYTES, INT64_C(1) << 40), TK_OK);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_ECAPACITY);
    cr_assert(strstr(tk_last_error_message(), "on-chip limit of 134217728"), "%s",
              tk_last_error_message());
    expect_unchanged(&g, "over VMEM");
    rig_close(&g);
}

/* A block may be far larger than its matrix: 2^62 f32 elements are more
 * bytes than int64 holds, which must not wrap to a block that "fits". */
Test(pipeline, a_block_too_large_to_count_overflows)
{
    struct rig g;
    rig_open(&g, "TPU v5 lite", TK_DTYPE_F32, 8, 128, INT64_C(1) << 31, INT64_C(1) << 31);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_EOVERFLOW);
    cr_assert(strstr(tk_last_error_message(), "2147483648x2147483648 block of float32"), "%s",
              tk_last_error_message());
    expect_unchanged(&g, "overflow");
    double v;
    tkt_expect_status(tk_pipeline_stat(g.p, TK_STAT_STEPS, &v), TK_ESTATE);
    rig_close(&g);
}

Test(pipeline, blocks_must_be_layout_tiles)
{
    struct rig g;
    rig_open(&g, "TPU v4", TK_DTYPE_F32, 16, 256, 4, 128);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_ELAYOUT);
    cr_assert(strstr(tk_last_error_message(), "pipeline blocks must be multiples of (8,128)"),
              "%s", tk_last_error_message());
    cr_assert(strstr(tk_last_error_message(), "got 4x128"), "%s", tk_last_error_message());
    expect_unchanged(&g, "bad layout");
    rig_close(&g);
    /* A block that spans the matrix is laid out whatever its shape, as
     * Pallas lays out a block equal to the array (the seed's 15x255). */
    rig_open(&g, "TPU v4", TK_DTYPE_F32, 15, 255, 15, 255);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_OK);
    expect_result(&g, "one block spanning 15x255");
    rig_close(&g);
    rig_open(&g, "TPU v4", TK_DTYPE_F32, 15, 256, 15, 128);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_OK);
    expect_result(&g, "15x128 blocks spanning 15 rows");
    rig_close(&g);
    /* The host takes any block, but models nothing until its figures are set. */
    rig_open(&g, NULL, TK_DTYPE_BF16, 16, 256, 4, 100);
    /* A successful run leaves the thread's last message as it was. */
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_FAULT, 99), TK_ERANGE);
    char before[512];
    snprintf(before, sizeof before, "%s", tk_last_error_message());
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_OK);
    cr_assert_str_eq(tk_last_error_message(), before);
    expect_result(&g, "host, 4x100 blocks");
    cr_assert_eq(stat(g.p, TK_STAT_STEPS), 12);
    double v = 7;
    tkt_expect_status(tk_pipeline_stat(g.p, TK_STAT_MODELED_NS, &v), TK_ESTATE);
    cr_assert(strstr(tk_last_error_message(), "TK_DEVICE_HBM_BYTES_PER_S"), "%s",
              tk_last_error_message());
    cr_assert_eq(v, 7);
    tkt_expect_status(tk_pipeline_write_trace(g.p, "unused.json"), TK_ESTATE);
    rig_close(&g);
}

/* A device that does not know its layout tile or on-chip limit cannot be
 * checked: TK_ESTATE, in the device's own words. */
Test(pipeline, unknown_device_figures)
{
    struct rig g;
    rig_open(&g, "TPU v4", TK_DTYPE_F32, 16, 256, 8, 128);
    tk_device *mystery;
    tkt_expect_status(tk_device_external(&mystery, "tpu", "Mystery chip"), TK_OK);
    tk_pipeline *p;
    tkt_expect_status(tk_pipeline_create(&p, g.k, g.t, mystery), TK_OK);
    tkt_expect_status(tk_pipeline_run(p, g.in, g.out), TK_ESTATE);
    cr_assert(strstr(tk_last_error_message(), "tk_pipeline_run: tk_device_get: "
                                              "TK_DEVICE_LAYOUT_ROWS"),
              "%s", tk_last_error_message());
    cr_assert(strstr(tk_last_error_message(), "Mystery chip"), "%s", tk_last_error_message());
    expect_unchanged(&g, "unknown figures");
    tk_pipeline_destroy(p);
    tk_device_destroy(mystery);
    rig_close(&g);
}

Test(pipeline, shift_inwards_and_bad_arguments_are_refused)
{
    struct rig g;
    rig_open(&g, "TPU v4", TK_DTYPE_F32, 16, 256, 8, 128);
    tkt_expect_status(tk_tiling_set(g.t, TK_TILING_TAIL, TK_TAIL_SHIFT_INWARDS), TK_OK);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_ELAYOUT);
    expect_unchanged(&g, "shift-inwards");
    tkt_expect_status(tk_tiling_set(g.t, TK_TILING_TAIL, TK_TAIL_PAD), TK_OK);
    /* tk_kernel_run's checks, in its words, under this function's name. */
    const tk_matrix *other[] = {g.x, g.want};
    tk_matrix *wide = tkt_matrix(TK_DTYPE_F32, 16, 255, 75);
    const tk_matrix *shapes[] = {g.x, wide};
    tkt_expect_status(tk_pipeline_run(g.p, shapes, g.out), TK_ESHAPE);
    cr_assert(strstr(tk_last_error_message(), "tk_pipeline_run: inputs must be nonempty "
                                              "matrices with identical shapes"),
              "%s", tk_last_error_message());
    tkt_expect_status(tk_pipeline_run(g.p, other, g.out), TK_OK);   /* pad: fine */
    tkt_expect_status(tk_pipeline_run(NULL, g.in, g.out), TK_EINVAL);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, NULL), TK_EINVAL);
    tk_pipeline *p = (tk_pipeline *)&p;
    tkt_expect_status(tk_pipeline_create(&p, g.k, NULL, g.d), TK_EINVAL);
    cr_assert_null(p);
    tkt_expect_status(tk_pipeline_create(NULL, g.k, g.t, g.d), TK_EINVAL);
    tk_matrix_destroy(wide);
    rig_close(&g);
}

Test(pipeline, parameters)
{
    struct rig g;
    rig_open(&g, "TPU v4", TK_DTYPE_F32, 8, 128, 8, 128);
    static const int64_t defaults[][2] = {
        {TK_PIPE_MODE, TK_MODE_SIMULATE}, {TK_PIPE_INPUT_BUFFERS, 2},
        {TK_PIPE_OUTPUT_BUFFERS, 2},      {TK_PIPE_NO_PIPELINING, 0},
        {TK_PIPE_DETECT_RACES, 1},        {TK_PIPE_FAULT, TK_FAULT_NONE}};
    for (int i = 0; i < 6; i++) {
        int param = (int)defaults[i][0];
        int64_t v = -5, lo, hi;
        tkt_expect_status(tk_pipeline_get(g.p, param, &v), TK_OK);
        cr_assert_eq(v, defaults[i][1], "parameter %d", param);
        tkt_expect_status(tk_param_bounds(param, &lo, &hi), TK_OK);
        tkt_expect_status(tk_pipeline_set(g.p, param, hi + 1), TK_ERANGE);
        tkt_expect_status(tk_pipeline_set(g.p, param, lo - 1), TK_ERANGE);
        tkt_expect_status(tk_pipeline_get(g.p, param, &v), TK_OK);
        cr_assert_eq(v, defaults[i][1], "a refused value changed parameter %d", param);
    }
    int64_t lo, hi;
    tkt_expect_status(tk_param_bounds(TK_PIPE_INPUT_BUFFERS, &lo, &hi), TK_OK);
    cr_assert(lo == 1 && hi == TK_PIPE_MAX_BUFFERS);
    tkt_expect_status(tk_pipeline_set(g.p, TK_STAT_STEPS, 1), TK_EINVAL);
    tkt_expect_status(tk_pipeline_set(NULL, TK_PIPE_MODE, 1), TK_EINVAL);
    double v;
    tkt_expect_status(tk_pipeline_stat(g.p, TK_STAT_STEPS, &v), TK_ESTATE);
    tkt_expect_status(tk_pipeline_stat(g.p, 9999, &v), TK_EINVAL);
    tkt_expect_status(tk_pipeline_stall(g.p, 0, &v), TK_ESTATE);
    cr_assert_str_eq(tk_hazard_name(TK_HAZARD_OVERWRITE), "overwrite of a slot in use");
    cr_assert_null(tk_hazard_name(0));
    cr_assert_null(tk_hazard_name(6));
    tk_pipeline_destroy(NULL);
    rig_close(&g);
}

/* ---- target mode, callbacks, trace --------------------------------------------------- */

Test(pipeline, target_mode_needs_a_real_device)
{
    struct rig g;
    rig_open(&g, "TPU v5 lite", TK_DTYPE_F32, 16, 256, 8, 128);
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_MODE, TK_MODE_TARGET), TK_OK);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_ENOTARGET);
    cr_assert(strstr(tk_last_error_message(), "simulation fallback is disabled"), "%s",
              tk_last_error_message());
    cr_assert(strstr(tk_last_error_message(), "TPU v5 lite"), "%s", tk_last_error_message());
    expect_unchanged(&g, "simulated target");
    tk_device *ext;
    tkt_expect_status(tk_device_external(&ext, "tpu", "TPU v5 lite"), TK_OK);
    tk_pipeline *p;
    tkt_expect_status(tk_pipeline_create(&p, g.k, g.t, ext), TK_OK);
    tkt_expect_status(tk_pipeline_set(p, TK_PIPE_MODE, TK_MODE_TARGET), TK_OK);
    tkt_expect_status(tk_pipeline_run(p, g.in, g.out), TK_ENOTARGET);
    expect_unchanged(&g, "external target");
    tk_pipeline_destroy(p);
    tk_device_destroy(ext);
    rig_close(&g);
    /* The host is real: target mode runs tk_kernel_run and models nothing. */
    rig_open(&g, NULL, TK_DTYPE_BF16, 16, 256, 8, 128);
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_MODE, TK_MODE_TARGET), TK_OK);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_OK);
    expect_result(&g, "host target");
    double v;
    tkt_expect_status(tk_pipeline_stat(g.p, TK_STAT_STEPS, &v), TK_ESTATE);
    rig_close(&g);
}

static int failing_body(void *user, int64_t rows, int64_t cols, int64_t ld,
                        const float *const *in, float *out)
{
    long *calls = user;
    if (++*calls == 3)
        return 42;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            out[r * ld + c] = in[0][r * ld + c];
    return 0;
}

Test(pipeline, failing_callback_leaves_the_output)
{
    struct rig g;
    rig_open(&g, "TPU v4", TK_DTYPE_F32, 32, 256, 8, 128);
    long calls = 0;
    tk_kernel *k;
    tkt_expect_status(tk_kernel_custom(&k, 1, failing_body, &calls), TK_OK);
    tk_pipeline *p;
    tkt_expect_status(tk_pipeline_create(&p, k, g.t, g.d), TK_OK);
    tkt_expect_status(tk_pipeline_run(p, g.in, g.out), TK_ECALLBACK);
    cr_assert(strstr(tk_last_error_message(), "returned 42 at step 2"), "%s",
              tk_last_error_message());
    cr_assert_eq(calls, 3, "the run went on after the failure");
    expect_unchanged(&g, "failed callback");
    tk_pipeline_destroy(p);
    tk_kernel_destroy(k);
    rig_close(&g);
}

/* The trace has one body per step and one event per copy, all marked as
 * modeled; an unwritable path is TK_EIO. */
Test(pipeline, chrome_trace)
{
    struct rig g;
    rig_open(&g, "TPU v5p", TK_DTYPE_F32, 24, 256, 8, 128);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_OK);
    char path[] = "/tmp/tk_trace_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    tkt_expect_status(tk_pipeline_write_trace(g.p, path), TK_OK);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    char line[512];
    int bodies = 0, copies = 0, modeled = 0;
    while (fgets(line, sizeof line, f)) {
        bodies += strstr(line, "\"name\": \"body\"") != NULL;
        copies += strstr(line, "\"name\": \"copy in") || strstr(line, "\"name\": \"copy out");
        modeled += strstr(line, "modeled") != NULL;
    }
    fclose(f);
    remove(path);
    cr_assert_eq(bodies, (int)stat(g.p, TK_STAT_STEPS));
    cr_assert_eq(copies, (int)(stat(g.p, TK_STAT_COPIES_IN) + stat(g.p, TK_STAT_COPIES_OUT)));
    cr_assert(modeled > bodies, "every event is marked modeled");
    tkt_expect_status(tk_pipeline_write_trace(g.p, "/nonexistent/dir/trace.json"), TK_EIO);
    tkt_expect_status(tk_pipeline_write_trace(g.p, "/dev/null"), TK_EIO);
    cr_assert(strstr(tk_last_error_message(), "is not a regular file (a device)"), "%s",
              tk_last_error_message());
    tkt_expect_status(tk_pipeline_write_trace(g.p, NULL), TK_EINVAL);
    rig_close(&g);
}

/* Statistics describe the settings they were taken with: any accepted
 * tk_pipeline_set or tk_pipeline_set_buffers retires them, a refused one
 * keeps them. */
Test(pipeline, a_new_setting_retires_the_statistics)
{
    struct rig g;
    double v;
    rig_open(&g, "TPU v5 lite", TK_DTYPE_F32, 16, 256, 8, 128);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_OK);
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_INPUT_BUFFERS, 0), TK_ERANGE);
    cr_assert(strstr(tk_last_error_message(), "TK_PIPE_INPUT_BUFFERS = 0 is outside [1, "),
              "%s", tk_last_error_message());
    tkt_expect_status(tk_pipeline_set(g.p, TK_KERNEL_THREADS, 1), TK_EINVAL);
    tkt_expect_status(tk_pipeline_set_buffers(g.p, TK_CALL_INPUT, 5, 2), TK_ERANGE);
    cr_assert_eq(stat(g.p, TK_STAT_STEPS), 4.0);
    tkt_expect_status(tk_pipeline_set(g.p, TK_PIPE_INPUT_BUFFERS, 3), TK_OK);
    tkt_expect_status(tk_pipeline_stat(g.p, TK_STAT_STEPS, &v), TK_ESTATE);
    tkt_expect_status(tk_pipeline_run(g.p, g.in, g.out), TK_OK);
    tkt_expect_status(tk_pipeline_set_buffers(g.p, TK_CALL_INPUT, 0, 2), TK_OK);
    tkt_expect_status(tk_pipeline_stat(g.p, TK_STAT_STEPS, &v), TK_ESTATE);
    rig_close(&g);
}

/* ---- re-entry ------------------------------------------------------------------ */

struct pipe_reentry {
    tk_pipeline *self;
    tk_kernel *k;
    const tk_matrix *const *in;
    tk_matrix *out;
    int run, set, buffers, kernel_set, calls;
};

static int pipe_reentrant(void *user, int64_t rows, int64_t cols, int64_t ld,
                          const float *const *in, float *out)
{
    struct pipe_reentry *r = user;
    if (r->calls++ == 0) {
        r->run = tk_pipeline_run(r->self, r->in, r->out);
        r->set = tk_pipeline_set(r->self, TK_PIPE_INPUT_BUFFERS, 3);
        r->buffers = tk_pipeline_set_buffers(r->self, TK_CALL_INPUT, 0, 3);
        r->kernel_set = tk_kernel_set(r->k, TK_KERNEL_UNDO, 0);
    }
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            out[i * ld + j] = 2.0f * in[0][i * ld + j] + in[1][i * ld + j];
    return 0;
}

/* A body that reruns or changes the pipeline running it, or its kernel, is
 * refused (a rerun would free the schedule and slots in use). */
Test(pipeline, a_body_cannot_rerun_or_change_its_own_pipeline)
{
    struct rig g;
    rig_open(&g, "TPU v5 lite", TK_DTYPE_F32, 16, 256, 8, 128);
    struct pipe_reentry r = {.in = g.in, .out = g.out};
    tkt_expect_status(tk_kernel_custom(&r.k, 2, pipe_reentrant, &r), TK_OK);
    tkt_expect_status(tk_pipeline_create(&r.self, r.k, g.t, g.d), TK_OK);
    tkt_expect_status(tk_pipeline_run(r.self, g.in, g.out), TK_OK);
    cr_assert_eq(r.run, TK_ESTATE);
    cr_assert_eq(r.set, TK_ESTATE);
    cr_assert_eq(r.buffers, TK_ESTATE);
    cr_assert_eq(r.kernel_set, TK_ESTATE, "the pipeline holds its kernel");
    expect_result(&g, "the run went on");
    tkt_expect_status(tk_pipeline_set(r.self, TK_PIPE_INPUT_BUFFERS, 3), TK_OK);
    tk_pipeline_destroy(r.self);
    tk_kernel_destroy(r.k);
    rig_close(&g);
}
