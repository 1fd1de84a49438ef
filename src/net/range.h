/*
 * One HTTP(S) range request through libcurl, checked (docs/design.md §11): the status, the
 * Content-Range, the validators and the body's exact length, so that a short, long or foreign
 * answer is an error and never data. Retries with backoff within a time budget.
 */
#ifndef CFS_RANGE_H
#define CFS_RANGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "remote.h"

typedef struct cfs_range_config {
    double timeout;         /* seconds for one request and its retries, all told */
    const char *cafile;     /* extra CA bundle (PEM), or NULL */
    const char *s3_endpoint;    /* s3:// sources: an S3-compatible service, or NULL (AWS) */
} cfs_range_config;

/* Once per process, before any thread asks. */
int cfs_range_global_init(const cfs_range_config *cfg, cfs_err *err);

/* url is http://, https:// or s3://bucket/key (a GET signed as src/net/s3.c signs, with the
 * environment's credentials; without any, unsigned: a public object). */

/* What url is now: its size and version, from a one-byte range request. A server that answers
 * ranges with the whole file is refused (CFS_EREFUSED) with what to do. */
int cfs_range_info(const char *url, cfs_remote_info *out, cfs_err *err);

/* Exactly len bytes at off of the version of url. -1 with err on failure; -2 (err's status
 * CFS_EIO) when the object is no longer that version: a 412 to If-Match, or an answer with
 * other validators or another total size. */
int cfs_range_read(const char *url, const cfs_remote_info *version, uint64_t off, void *buf,
                  size_t len, cfs_err *err);

/* The same, written to fd at off (pwrite) instead of into memory: a piece of an object fetched
 * whole into a file (§11). */
int cfs_range_fetch(const char *url, const cfs_remote_info *version, uint64_t off, size_t len,
                    int fd, cfs_err *err);

/* Requests sent and body bytes received since the start (for bench and status). */
void cfs_range_counts(uint64_t *requests, uint64_t *bytes);

#endif
