/* npy.c - libFuzzer harness for the .npy reader: any bytes either load or
 * fail with a documented status and *out NULL; what loads saves and loads
 * back to the same dtype, shape and bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tilekern.h>
#include <unistd.h>

static char in_path[64], out_path[64];

static void paths(void)
{
    if (in_path[0])
        return;
    snprintf(in_path, sizeof in_path, "/tmp/tk-fuzz-npy-%d.npy", (int)getpid());
    snprintf(out_path, sizeof out_path, "/tmp/tk-fuzz-npy-%d-out.npy", (int)getpid());
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    paths();
    FILE *f = fopen(in_path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f))
        abort();
    tk_matrix *m = (tk_matrix *)1;
    int rc = tk_matrix_load_npy(&m, in_path);
    if (rc != TK_OK) {
        if (m != NULL || (rc != TK_EFORMAT && rc != TK_ESHAPE && rc != TK_EIO &&
                          rc != TK_ENOMEM && rc != TK_EOVERFLOW) ||
            !tk_last_error_message()[0])
            abort();
        return 0;
    }
    tk_matrix *back = NULL;
    if (tk_matrix_save_npy(m, out_path) || tk_matrix_load_npy(&back, out_path) ||
        tk_matrix_dtype(back) != tk_matrix_dtype(m) || tk_matrix_rows(back) != tk_matrix_rows(m) ||
        tk_matrix_cols(back) != tk_matrix_cols(m) ||
        memcmp(tk_matrix_data(back), tk_matrix_data(m),
               (size_t)(tk_matrix_rows(m) * tk_matrix_cols(m) *
                        tk_dtype_size(tk_matrix_dtype(m)))))
        abort();
    tk_matrix_destroy(back);
    tk_matrix_destroy(m);
    return 0;
}
