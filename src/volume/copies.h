/*
 * The mount's decompressed copies of compressed sources (x.h5ad.gz), and the fetched copies of
 * URLs not read in parts (docs/design.md §11): files in the cache folder's unpacked/, one per
 * source version (a URL's: cfs_source_stat), kept across mounts (a remount of the same version
 * opens the copy again instead of decompressing) and counted against the cache's bound for as
 * long as they exist. A copy is written whole or not at all; a cache too small for it is a
 * clear error, never a half file.
 */
#ifndef CFS_COPIES_H
#define CFS_COPIES_H

#include <stdbool.h>
#include <sys/stat.h>

#include "cache.h"
#include "error.h"
#include "progress.h"
#include "sources.h"

typedef struct cfs_copies cfs_copies;

/* dir must exist. NULL on allocation failure. */
cfs_copies *cfs_copies_new(const char *dir);
/* Gives back the bytes counted for the copies (the files stay, for the next mount). */
void cfs_copies_free(cfs_copies *c);
/* The bound copies are counted against; until it is set, cfs_copies_get answers CFS_ERETRY. */
void cfs_copies_set_cache(cfs_copies *c, cfs_cache *cache);
/* Makes running and later decompressions stop (the mount is going away). */
void cfs_copies_stop(cfs_copies *c);

/* The path (malloc'd) of the decompressed copy of source at its current version: the one kept
 * from before, or one made now (progress, which may be NULL, shows "decompressing"). A URL
 * fetched with the files beside it is a folder of them, and the path its object's file there
 * (cfs_unpacked_opened). */
int cfs_copies_get(cfs_copies *c, const char *source, const char *codec, cfs_progress *progress,
                   char **path, cfs_err *err);
/* The source at this version is no longer served: its copy goes, and its bytes. */
void cfs_copies_retire(cfs_copies *c, const char *source, const struct stat *version);
/* Deletes the copies (and unfinished ones) that belong to none of these sources as they are. */
void cfs_copies_prune(cfs_copies *c, const cfs_source_list *sources);

#endif
