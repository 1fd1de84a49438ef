/*
 * The on-disk LRU cache (docs/design.md §2.3): opaque keys to immutable byte strings, bounded in
 * total size, persistent across runs, safe against a kill at any instant. It knows keys and
 * bytes only, nothing of datasets.
 *
 * Each entry is one file named by its row id in the index (DIR/<id>), written under a temporary
 * name (DIR/tmp-<pid>-<n>) and renamed into place; a SQLite index (WAL, DIR/index.sqlite)
 * records id, key (the whole key, unique), size and last use. The file also names its key and
 * checksums its bytes (entry.h), and every read checks them: an index that lies is found out.
 * At open, rows without their file are dropped and whole entry files without a row are taken
 * back (an index lost or damaged is rebuilt from them), so a crash never leaves an entry that
 * is later served wrong. A disk that fills before the bound is reached lowers the bound; bytes
 * that cannot be stored are served all the same.
 */
#ifndef CFS_CACHE_H
#define CFS_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "buf.h"
#include "error.h"

typedef struct cfs_cache cfs_cache;

/* Produces the bytes of a missing entry (appends to out); -1 with err on failure. */
typedef int (*cfs_cache_producer)(void *ctx, cfs_buf *out, cfs_err *err);

typedef struct cfs_cache_stats {
    uint64_t hits, misses, produced, evicted;
    uint64_t bytes, entries;
    uint64_t work_bytes;        /* held by cfs_cache_reserve */
    uint64_t max_bytes;         /* cache_size, or less once the disk was found full */
    uint64_t store_failures;    /* produced bytes that could not be stored (served uncached) */
    uint64_t dropped;           /* entries whose file was not what the index says */
} cfs_cache_stats;

/* log (may be NULL) gets a line when the index is rebuilt, entries stop or resume being
 * stored, the bound is lowered to the disk, or an entry is dropped. */
cfs_cache *cfs_cache_open(const char *dir, uint64_t max_bytes, FILE *log, cfs_err *err);
void cfs_cache_close(cfs_cache *c);

/*
 * The bytes of key: from the cache, or made by produce (once, however many threads ask at the
 * same moment) and then stored. An entry larger than the bound is produced and returned but not
 * stored. out receives the bytes.
 */
int cfs_cache_get(cfs_cache *c, const void *key, size_t key_len, cfs_cache_producer produce,
                  void *ctx, cfs_buf *out, cfs_err *err);
/*
 * Room for bytes that are not entries but live in the same folder (a layout's work files):
 * counted against the bound from now until released, made by evicting least recently used
 * entries. -1 with err when they cannot be held: status CFS_ERETRY when the bound cannot hold
 * them beside the reservations and entries being written now, CFS_ENEVERFITS when they exceed
 * the whole bound.
 */
int cfs_cache_reserve(cfs_cache *c, uint64_t bytes, cfs_err *err);
void cfs_cache_release(cfs_cache *c, uint64_t bytes);
/* The size of key's entry if cached (no production); -1 if absent. */
int64_t cfs_cache_size(cfs_cache *c, const void *key, size_t key_len);
void cfs_cache_stats_get(cfs_cache *c, cfs_cache_stats *out);

#endif
