/*
 * A libzip source reading a zip given as a URL through the process's reader of URLs
 * (remote.h, docs/design.md §11): libzip asks for the end record, the central directory and
 * the entries it opens, and only those are fetched (by blocks, as every remote read).
 */
#ifndef CFS_ZARR_ZIPSOURCE_H
#define CFS_ZARR_ZIPSOURCE_H

#include <stdbool.h>
#include <zip.h>

#include "error.h"

typedef struct zr_zipsource zr_zipsource;

/* A source over url (its version asked now, every read of it must find it again); -1 with the
 * reason. *state is the source's own record, owned by the source (freed with it): it keeps the
 * reason of the last failed read for zr_zipsource_failure. */
int zr_zipsource_open(const char *url, zip_source_t **out, zr_zipsource **state, cfs_err *err);

/* Whether a read of the source failed since the last call, and then why (err set, status
 * kept: an HTTP failure is not damage). Clears what it reports. */
bool zr_zipsource_failure(zr_zipsource *state, cfs_err *err);

#endif
