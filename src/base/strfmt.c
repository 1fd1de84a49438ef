#include "strfmt.h"

#include <stdarg.h>
#include <stdio.h>

char *cfs_strdupf(const char *fmt, ...)
{
    char *s = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    return n < 0 ? NULL : s;
}
