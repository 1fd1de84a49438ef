/* Spill files of the layout engine: anonymous files in the work folder (O_TMPFILE, or unlinked
 * at creation, so a crash leaves nothing behind but, without O_TMPFILE, a file killed between
 * its creation and its unlink), written through a buffer and read back with pread. */
#ifndef CFS_SPILL_H
#define CFS_SPILL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "fileio.h"

typedef struct cfs_spill {
    int fd;
    unsigned char *buf;
    size_t cap, len;
    uint64_t size;          /* bytes written to the file so far */
    bool lent;              /* buf is the caller's: cfs_spill_close leaves it */
} cfs_spill;

int cfs_spill_open(cfs_spill *s, const char *workdir, size_t buffer, cfs_err *err);
/* An anonymous work file written and read with pwrite and pread only: its descriptor. */
int cfs_spill_file(const char *workdir, cfs_err *err);
/* The same with the caller's buffer of cap bytes (one slice of a slab for many spills), which
 * stays the caller's to free, after the last flush. */
int cfs_spill_open_lent(cfs_spill *s, const char *workdir, unsigned char *buf, size_t cap,
                        cfs_err *err);
int cfs_spill_append(cfs_spill *s, const void *data, size_t len, cfs_err *err);
int cfs_spill_flush(cfs_spill *s, cfs_err *err);
void cfs_spill_close(cfs_spill *s);
/* Frees the file's pages once it has been read for the last time (the descriptor stays, for
 * cfs_spill_close): the pages the next writes need can come from them. */
void cfs_spill_release(const cfs_spill *s);
/* Removes the named spill files a killed process left in workdir; call it only while no other
 * process uses that folder (a mount holds its cache's lock). */
void cfs_spill_sweep(const char *workdir);

#endif
