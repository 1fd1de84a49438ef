#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int set_va(cfs_err *err, cfs_status status, const char *fmt, va_list ap)
{
    err->status = status;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    return -1;
}

int cfs_err_set(cfs_err *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    set_va(err, CFS_EFAIL, fmt, ap);
    va_end(ap);
    return -1;
}

int cfs_err_setc(cfs_err *err, cfs_status status, const char *fmt, ...)
{
    if (!err)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    set_va(err, status, fmt, ap);
    va_end(ap);
    return -1;
}

int cfs_err_oom(cfs_err *err)
{
    return cfs_err_setc(err, CFS_ENOMEM, "out of memory");
}

static cfs_status status_of_errno(int errnum)
{
    switch (errnum) {
    case ENOENT:
    case ENOTDIR:
        return CFS_ENOTFOUND;
    case ENOMEM:
        return CFS_ENOMEM;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
        return CFS_ENEVERFITS;
    default:
        return CFS_EIO;
    }
}

int cfs_err_errno(cfs_err *err, int errnum, const char *fmt, ...)
{
    if (!err)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    set_va(err, status_of_errno(errnum), fmt, ap);
    va_end(ap);
    size_t len = strnlen(err->msg, sizeof err->msg);
    snprintf(err->msg + len, sizeof err->msg - len, ": %s", strerror(errnum));
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
    if (err->status == CFS_OK)
        err->status = CFS_EFAIL;
    return -1;
}

const char *cfs_status_name(cfs_status status)
{
    switch (status) {
    case CFS_OK: return "ok";
    case CFS_EFAIL: return "failed";
    case CFS_ENOMEM: return "out of memory";
    case CFS_EREFUSED: return "refused";
    case CFS_EDAMAGED: return "damaged input";
    case CFS_EIO: return "I/O error";
    case CFS_ENOTFOUND: return "not found";
    case CFS_EINVALID: return "invalid argument";
    case CFS_ERETRY: return "retry later";
    case CFS_ENEVERFITS: return "never fits";
    }
    return "unknown";
}
