/*
 * Errors travel up as values: a status code, which callers (and a worker process reporting to
 * its parent) branch on, and one human-readable line, which people read.
 */
#ifndef CFS_ERROR_H
#define CFS_ERROR_H

#include <stddef.h>

typedef enum cfs_status {
    CFS_OK = 0,
    CFS_EFAIL,        /* failed, for a reason only the message says */
    CFS_ENOMEM,       /* out of memory */
    CFS_EREFUSED,     /* not an input this version reads (or not this reader's kind) */
    CFS_EDAMAGED,     /* the input says it is one thing and its bytes contradict it */
    CFS_EIO,          /* reading or writing failed */
    CFS_ENOTFOUND,    /* no such file, element or key */
    CFS_EINVALID,     /* a bad argument or option from the user */
    CFS_ERETRY,       /* nothing wrong: try again later (e.g. the work space is in use) */
    CFS_ENEVERFITS,   /* bigger than its whole bound: retrying will not help */
} cfs_status;

typedef struct cfs_err {
    cfs_status status;
    char msg[1024];
} cfs_err;

/* Sets err (status CFS_EFAIL, message printf-style) and returns -1, so callers can
 * `return cfs_err_set(...)`. */
int cfs_err_set(cfs_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same with a status. */
int cfs_err_setc(cfs_err *err, cfs_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "out of memory", status CFS_ENOMEM; returns -1. */
int cfs_err_oom(cfs_err *err);
/* The message printf-style, then ": " and strerror(errnum); the status follows errnum
 * (ENOENT: not found, ENOMEM: out of memory, ENOSPC/EDQUOT: never fits, else I/O). */
int cfs_err_errno(cfs_err *err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to an existing message, keeping its status; returns -1. */
int cfs_err_prefix(cfs_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A short name for a status ("out of memory", "refused", ...), for logs and status.json. */
const char *cfs_status_name(cfs_status status);

#endif
