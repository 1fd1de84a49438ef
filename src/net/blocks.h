/*
 * The daemon's reader of URLs (docs/design.md §11): objects read in blocks over HTTP range
 * requests (range.h), each block kept by a block store the front end gives (the mount: its
 * on-disk cache, counted against cache_size; else a small memory LRU), keyed by the URL, the
 * object's version and the block's place. What a URL is (size, version) is asked again once
 * the poll interval has passed, which is how a changed object is noticed.
 */
#ifndef CFS_BLOCKS_H
#define CFS_BLOCKS_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "error.h"
#include "range.h"
#include "remote.h"

/* Produces a missing block's bytes (appended to out). */
typedef int (*cfs_block_producer)(void *ctx, cfs_buf *out, cfs_err *err);

/* Where blocks are kept: get returns key's bytes, made by produce when absent (the shape of
 * cfs_cache_get, which the mount adapts to it; cache/ is not a layer net may use). */
typedef struct cfs_block_store {
    int (*get)(void *ctx, const void *key, size_t key_len, cfs_block_producer produce,
               void *produce_ctx, cfs_buf *out, cfs_err *err);
    void *ctx;
    /* Whether key is kept (cfs_cache_size >= 0), so that a read's one request for the blocks
     * it lacks stops at one it has. NULL: not known (the request goes to the read's end). */
    bool (*has)(void *ctx, const void *key, size_t key_len);
} cfs_block_store;

typedef struct cfs_blocks_config {
    cfs_range_config http;
    double poll;            /* seconds an answer to "what is this URL now" is reused */
    size_t block_size;      /* bytes per block (the last one of an object shorter) */
    /* The formats' names of URL sources, handed to base with the reader (may be NULL) */
    const cfs_url_shapes *shapes;
} cfs_blocks_config;

#define CFS_BLOCK_SIZE ((size_t)1 << 20)
#define CFS_REMOTE_POLL 10.0
#define CFS_REMOTE_TIMEOUT 20.0

/* Initialises libcurl and makes this process read URLs through blocks (cfs_remote_set_ops). */
int cfs_blocks_start(const cfs_blocks_config *cfg, cfs_err *err);
/* Blocks go to store from now on (NULL: the memory LRU). The store must outlive its use. */
void cfs_blocks_set_store(const cfs_block_store *store);

#endif
