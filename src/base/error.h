/* Errors travel up as values: a fixed buffer holding one human-readable line. */
#ifndef CFS_ERROR_H
#define CFS_ERROR_H

#include <stddef.h>

typedef struct cfs_err {
    char msg[1024];
} cfs_err;

/* Sets err->msg (printf-style) and returns -1 so callers can `return cfs_err_set(...)`. */
int cfs_err_set(cfs_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends "prefix: " to an existing message; returns -1. */
int cfs_err_prefix(cfs_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
