/*
 * Many objects PUT into one bucket by a pool of threads, each with its own connection; an object
 * already there with the same size and MD5 (its ETag) is not sent again, so a rerun after an
 * interruption sends only what is missing.
 */
#ifndef CFS_S3_UPLOAD_H
#define CFS_S3_UPLOAD_H

#include <stdint.h>

#include "s3.h"

typedef struct cfs_s3_uploader cfs_s3_uploader;

typedef struct cfs_s3_upload_stats {
    uint64_t written, skipped;              /* objects */
    uint64_t bytes_written, bytes_skipped;
} cfs_s3_upload_stats;

/* Lists what bucket holds under prefix (the objects a put may skip) and starts parallel
 * uploading threads; cfg must outlive the uploader. An unreachable server, a missing bucket or
 * refused credentials fail here, before anything is sent. */
cfs_s3_uploader *cfs_s3_uploader_new(const cfs_s3_config *cfg, const char *bucket,
                                     const char *prefix, int parallel, cfs_err *err);
/* Queues a copy of data for bucket/key (waits while the queue is full), or skips it when the
 * listing has key with this size and MD5. -1 with the error of an earlier PUT that failed. */
int cfs_s3_uploader_put(cfs_s3_uploader *u, const char *key, const void *data, size_t len,
                        const char *content_type, cfs_err *err);
/* Waits until every queued object is stored; -1 with the first failure's error. */
int cfs_s3_uploader_drain(cfs_s3_uploader *u, cfs_err *err);
void cfs_s3_uploader_stats(cfs_s3_uploader *u, cfs_s3_upload_stats *stats);
/* Stops the threads (what is still queued is dropped) and frees u. */
void cfs_s3_uploader_free(cfs_s3_uploader *u);

#endif
