/* candidate.c - the audit candidate of bench_python.py, in C: the host
 * kernel with (8, 128) blocks, as bench_audit.c has it.  Built as a small
 * shared object so that Python can hand it to tk_audit_set_candidate: the
 * same audit is then driven from C and from Python in one process. */
#include <tilekern.h>

int bench_candidate(void *user, const tk_matrix *const *in, tk_matrix *out)
{
    tk_tiling *t;
    int rc = tk_tiling_create(&t, tk_matrix_rows(out), tk_matrix_cols(out), 8, 128);
    if (!rc)
        rc = tk_kernel_run(user, t, in, out);
    tk_tiling_destroy(t);
    return rc;
}
