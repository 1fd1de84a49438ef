#ifndef CFS_H5_WHOLE_H
#define CFS_H5_WHOLE_H

/*
 * Small local files read whole: libhdf5 reads a file's metadata piece by piece (some seventy
 * reads for a small h5ad), which a folder of thousands of small sources pays thousands of times.
 * A regular file of at most CFS_H5_WHOLE_BYTES is read whole at the open by libhdf5's core
 * driver (no backing store) and read from memory after. Its version (device, inode, size,
 * mtime), found the same before and after the read, is kept for the file: a file in memory has
 * no descriptor to ask later (h5_dormant.c checks a reopened file against it).
 */

#include <hdf5.h>
#include <sys/stat.h>

#define CFS_H5_WHOLE_BYTES ((off_t)1 << 20)

/* H5Fopen(path) read-only with fapl (cfs_h5_read_fapl's), from memory where path is a small
 * regular file. Call under cfs_h5_lock. */
hid_t cfs_h5_whole_open(const char *path, hid_t fapl);
/* 0 with *st the version read, if file was opened from memory here; else -1. Call under
 * cfs_h5_lock. */
int cfs_h5_whole_version(hid_t file, struct stat *st);

#endif
