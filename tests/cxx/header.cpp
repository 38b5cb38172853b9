// The public header is C++-clean: it compiles with -Wpedantic and links,
// and its statuses are plain ints, for overloads and for the preprocessor.
#include <tilekern.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#if !defined(TK_ECALLBACK) || TK_EINVAL != -1
#error "the status constants are not preprocessor ints"
#endif

int main()
{
    tk_matrix *m = nullptr;
    if (tk_matrix_create(&m, TK_DTYPE_F32, 4, 4) != TK_OK)
        return 1;
    const int status = tk_matrix_create(nullptr, TK_DTYPE_F32, 4, 4);
    if (std::strcmp(tk_status_name(status), "TK_EINVAL") != 0)
        return 2;
    if (std::min(status, TK_OK) != TK_EINVAL)  // one type: int
        return 3;
    // The list the header gives for a caller's own table.
#define NAME(name, value, text) #name,
    static const char *const names[] = {TK_STATUS_LIST(NAME)};
#undef NAME
    if (std::strcmp(names[-TK_ECALLBACK], "TK_ECALLBACK") != 0)
        return 4;
    tk_matrix_destroy(m);
    std::printf("C++ links libtilekern %s\n", tk_version_string());
    return 0;
}
