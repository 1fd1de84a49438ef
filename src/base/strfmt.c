#include "strfmt.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "utf8.h"

char *cfs_strdupf(const char *fmt, ...)
{
    char *s = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    return n < 0 ? NULL : s;
}

void cfs_log(FILE *log, const char *fmt, ...)
{
    if (!log)
        return;
    char *text = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&text, fmt, ap);
    va_end(ap);
    char *shown = n < 0 ? NULL : cfs_text_shown(text);
    fprintf(log, "cellucid-fs: %s\n", shown ? shown : "(out of memory for a log line)");
    free(shown);
    free(text);
}
