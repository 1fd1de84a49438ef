#include "path.h"

#include <stdlib.h>
#include <string.h>

char *cfs_path_join(const char *a, const char *b)
{
    size_t la = a ? strlen(a) : 0, lb = strlen(b);
    char *out = malloc(la + lb + 2);
    if (!out)
        return NULL;
    size_t k = la;
    if (la)
        memcpy(out, a, la);
    if (la && lb && a[la - 1] != '/')
        out[k++] = '/';
    memcpy(out + k, b, lb + 1);
    return out;
}
