/*
 * The mounted volume: the tree a mount presents (docs/design.md §1, §5, §6) — datasets.json, the
 * status document and one store per dataset — as numbered nodes a front end can look up, list and
 * read. It knows the store and the cache, not FUSE (fuse/ maps kernel requests onto this).
 * Chunk bytes are produced at their first lookup, through the cache, so their size is exact
 * from then on.
 */
#ifndef CFS_VOLUME_H
#define CFS_VOLUME_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "cache.h"
#include "buf.h"
#include "options.h"

typedef struct cfs_volume cfs_volume;

typedef struct cfs_vattr {
    uint64_t ino;
    bool is_dir;
    bool volatile_size;      /* the status document: re-read on every open */
    /* datasets.json and the published views: a new version is a new inode, so the name is
     * looked up again at every open (the inode's bytes never change) */
    bool volatile_name;
    uint64_t size;
    struct timespec mtime;
} cfs_vattr;

#define CFS_VOLUME_ROOT 1

/* unpacked_dir: where decompressed copies of compressed sources are kept (NULL: such sources
 * are refused). workdir is the caller's alone (a mount holds its cache's lock): spill files a
 * killed process left there are removed. */
cfs_volume *cfs_volume_open(const char *src, const cfs_options *opts, cfs_cache *cache,
                            const char *workdir, const char *unpacked_dir, FILE *log,
                            cfs_err *err);
void cfs_volume_close(cfs_volume *v);
/* Re-reads the source folder: new sources appear, changed ones get a fresh version (old inodes
 * keep serving the old bytes), removed ones leave. Cheap when nothing changed (stat only). */
int cfs_volume_refresh(cfs_volume *v, cfs_err *err);
/* Called after a refresh for each root entry whose kernel cache must be dropped (ino != 0:
 * also that inode's data). */
void cfs_volume_on_change(cfs_volume *v,
                          void (*invalidate)(void *ctx, uint64_t parent, const char *name,
                                             uint64_t ino),
                          void *ctx);
/* The cache may be attached after opening: a daemon opens its database after it forks. */
void cfs_volume_set_cache(cfs_volume *v, cfs_cache *cache);

/* 0, or -ENOENT / -ENOTDIR / -EIO (err says why for EIO). */
int cfs_volume_lookup(cfs_volume *v, uint64_t parent, const char *name, cfs_vattr *out,
                      cfs_err *err);
int cfs_volume_getattr(cfs_volume *v, uint64_t ino, cfs_vattr *out);
/* Calls emit for each entry of a folder, starting at entry index `from`; emit returns nonzero
 * to stop (the buffer is full). Never produces a chunk. */
int cfs_volume_readdir(cfs_volume *v, uint64_t ino, uint64_t from,
                       int (*emit)(void *ctx, const char *name, uint64_t ino, bool is_dir,
                                   uint64_t next),
                       void *ctx);
/* The whole content of a file node. */
int cfs_volume_read_all(cfs_volume *v, uint64_t ino, cfs_buf *out, cfs_err *err);

#endif
