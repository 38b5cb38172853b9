// The public header is C++-clean: it compiles with -Wpedantic and links.
#include <tilekern.h>

#include <cstdio>
#include <cstring>

int main()
{
    tk_matrix *m = nullptr;
    if (tk_matrix_create(&m, TK_DTYPE_F32, 4, 4) != TK_OK)
        return 1;
    const int status = tk_matrix_create(nullptr, TK_DTYPE_F32, 4, 4);
    if (std::strcmp(tk_status_name(status), "TK_EINVAL") != 0)
        return 2;
    tk_matrix_destroy(m);
    std::printf("C++ links libtilekern %s\n", tk_version_string());
    return 0;
}
