/*
 * The bytes of the files the kernel is reading, by inode (fuse/fs.c). The kernel asks for a
 * file in pieces (readahead windows, at most max_read each), every piece a request of its own;
 * when the kernel opens files itself (no-open mode) no open ties the pieces together. Here a
 * file is fetched (from the cache, or made) once for all of its pieces, by one thread however
 * many ask at the same moment, and its bytes go when its last byte has been handed out and no
 * piece is being read, when a newer file needs the slot, or when files read only in part
 * keep too many bytes.
 */
#ifndef CFS_FUSE_FILES_H
#define CFS_FUSE_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "buf.h"
#include "error.h"

typedef struct cfs_files cfs_files;

/* Appends the whole content of inode ino to out; -1 with err on failure. */
typedef int (*cfs_files_loader)(void *ctx, uint64_t ino, cfs_buf *out, cfs_err *err);

/* What a file's bytes are of: an inode may show new bytes (datasets.json after a source
 * changes) and then has a new size or mtime. */
typedef struct cfs_file_version {
    uint64_t ino;
    uint64_t size;
    struct timespec mtime;
} cfs_file_version;

/* A file's bytes, held by a reader from cfs_files_get to cfs_files_put. */
typedef struct cfs_file cfs_file;

/* At most `slots` files keep their bytes between pieces, and those nobody is reading at most
 * idle_max bytes together. NULL when out of memory. */
cfs_files *cfs_files_new(size_t slots, size_t idle_max, cfs_files_loader load, void *ctx);
void cfs_files_free(cfs_files *f);

/* The bytes of that version of the file, loaded if no slot has them; NULL with err when the
 * load failed (nothing is kept: the next reader tries again). */
cfs_file *cfs_files_get(cfs_files *f, const cfs_file_version *v, cfs_err *err);
const cfs_buf *cfs_file_bytes(const cfs_file *file);
/* Ends a reader's hold; `reached_end`: it handed out the file's last byte, so the kernel now
 * has the whole file and the bytes need not stay. */
void cfs_files_put(cfs_files *f, cfs_file *file, bool reached_end);

#endif
