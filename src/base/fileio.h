/* Whole reads and writes at an offset, retried through short counts and EINTR: what the work
 * files of the layout and the readers' spill files are read and written with. */
#ifndef CFS_FILEIO_H
#define CFS_FILEIO_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* -1 with err (the system's reason) unless all len bytes were written at off. */
int cfs_pwrite_full(int fd, const void *buf, size_t len, uint64_t off, cfs_err *err);
/* -1 with err (the system's reason, or a file shorter than off + len) unless all len bytes
 * were read from off. */
int cfs_pread_full(int fd, void *buf, size_t len, uint64_t off, cfs_err *err);

#endif
