#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int cfs_err_set(cfs_err *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int cfs_err_prefix(cfs_err *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* Messages are cut at the buffer's end rather than refused: a long path must not hide the
     * reason entirely, so the prefix is bounded to half the buffer. */
    size_t plen = strnlen(prefix, sizeof err->msg / 2);
    size_t olen = strnlen(err->msg, sizeof err->msg - 1);
    if (plen + 2 + olen > sizeof err->msg - 1)
        olen = sizeof err->msg - 1 - plen - 2;
    memmove(err->msg + plen + 2, err->msg, olen);
    memcpy(err->msg, prefix, plen);
    err->msg[plen] = ':';
    err->msg[plen + 1] = ' ';
    err->msg[plen + 2 + olen] = '\0';
    return -1;
}
