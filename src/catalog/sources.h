/* Finding the inputs of a source folder (or a single input). */
#ifndef CFS_SOURCES_H
#define CFS_SOURCES_H

#include <stddef.h>

#include "error.h"
#include "detect.h"

typedef struct cfs_source_list {
    char **paths;          /* sorted by name */
    size_t n;
} cfs_source_list;

/*
 * A file is itself; a folder yields its top-level entries that are inputs by name (a known
 * extension) or by content, its subfolders that a format recognises (e.g. outs/), and the
 * per-sample runs of a Cell Ranger multi run (per_sample_outs/<sample>/count, in the folder,
 * its outs/, or a subfolder's). Hidden entries are skipped, and so is a symlink whose target
 * lies outside the folder. Reads only. Entries are probed by content by d (in a reader worker:
 * detect.h); one whose probe took the worker down is an input (its open then says what
 * happened). d keeps what it learnt of files for the next listing.
 */
int cfs_sources_list(const char *src, cfs_detector *d, cfs_source_list *out, cfs_err *err);
void cfs_sources_free(cfs_source_list *list);
#endif
