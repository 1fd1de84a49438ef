/*
 * Where a Zarr store's keys live: a folder, or a zip file (zarr-python's ZipStore, or Info-ZIP
 * archives of a store folder, stored or deflated, ZIP64), read through libzip without
 * extracting anything. The metadata layer (zarr_meta.c) sees keys ("X/.zarray", "obs/zarr.json",
 * "X/c/0/1") and never which of the two holds them.
 *
 * In a zip, a name listed twice is the last entry of that name (ZipStore appends a key it
 * rewrites); a zip whose root holds no Zarr metadata but whose every entry lies under one top
 * folder holding it (an archive of the folder itself, `zip -r x.zip x.zarr`) is read from that
 * folder.
 *
 * Over HTTP (docs/design.md §11): a zip URL is read in place by libzip over the process's reader
 * of URLs (zarr_zipsource.h); a folder URL (cfs_url_is_folder) key by key, URL/KEY, and only
 * from its consolidated metadata (v2's .zmetadata or v3's inline consolidated_metadata in the
 * root's zarr.json; HTTP lists no folder, and zarr_meta.c refuses a folder URL without it): a key the server has not (404) is
 * none, any other failure an error naming the key's URL.
 */
#ifndef CFS_ZARR_BACKEND_H
#define CFS_ZARR_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

typedef struct zr_backend zr_backend;

/* Over HTTP (docs/design.md §11), what the Zarr formats tell base through the registry: URLs
 * ending so are folder URLs (and any ending in "/"), and a folder URL's version is its
 * consolidated metadata's, v2's .zmetadata (asked first: the stores most served), else v3's
 * root zarr.json, which holds it. NULL-terminated. */
extern const char *const zr_url_folder_suffixes[];
extern const char *const zr_url_folder_version_keys[];

/* The folder or zip file at path (or URL); -1 with the reason (a zip's damaged central
 * directory). */
int zr_backend_open(const char *path, zr_backend **out, cfs_err *err);
void zr_backend_free(zr_backend *b);
bool zr_backend_is_zip(const zr_backend *b);
/* A folder URL's URL (as given), else NULL: a store that must be read from its consolidated
 * metadata alone. */
const char *zr_backend_url(const zr_backend *b);

/* The whole value of key: 1 with *data (malloc'd) and *len, 0 if there is none, -1 with the
 * reason if it cannot be read (or lies behind a symlink out of the store's folder). */
int zr_backend_read(const zr_backend *b, const char *key, unsigned char **data, size_t *len,
                    cfs_err *err);
/* Whether key is a value (a file) of the store. */
bool zr_backend_has(const zr_backend *b, const char *key);
/* The names one level under prefix ("" for the root) that hold further keys (sub-folders),
 * unsorted. 0, or -1 with the reason. */
int zr_backend_dirs(const zr_backend *b, const char *prefix, char ***names, size_t *n,
                    cfs_err *err);

/* Whether name (an entry's name in a zip's central directory) is Zarr metadata at the root of
 * a store, or under one top folder: what detection looks for. */
bool zr_backend_root_meta_name(const char *name, size_t len);

#endif
