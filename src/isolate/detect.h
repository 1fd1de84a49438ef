/*
 * Which entries of a source folder are inputs, asked of a reader worker (docs/design.md §2.4).
 * A format's probe reads the entry's bytes with the format's library (libhdf5 opens an HDF5
 * file and reads attributes of its groups), so a damaged file met by a folder scan can crash
 * or hang it as an open would: the probes run in a worker, as opens do. One worker answers
 * the questions of a scan (a lost one is replaced at the next); a file's answer is kept
 * while the file is unchanged (device, inode, size, mtime), so a file that hangs its probe
 * costs the time limit once, not at every scan. With isolation off, the probes run in this
 * process. A detector may be used from several threads.
 */
#ifndef CFS_DETECT_H
#define CFS_DETECT_H

#include <stdbool.h>

#include "isolated.h"

typedef struct cfs_detection {
    char format[32];        /* the registry name of the format that bids highest, or "" */
    bool compressed;        /* a compressed copy of an input (cfs_format_needs_unpack) */
    bool lost;              /* the probe took its worker down: a crash, or a limit passed */
} cfs_detection;

typedef struct cfs_detector cfs_detector;

/* A detector with iso's limits (an open's time limit per question); NULL when out of memory. */
cfs_detector *cfs_detector_new(const cfs_isolation *iso);
/* What path is. */
void cfs_detector_ask(cfs_detector *d, const char *path, cfs_detection *out);
/* Whether path is an input to open: a format bids for it, it is a compressed copy of one, or
 * its probe took the worker down (the open then says what happened, as for any damaged file). */
bool cfs_detector_is_input(cfs_detector *d, const char *path);
/* Ends a scan: forgets the answers about files not asked about since the last scan ended (gone
 * from the folder), and ends the worker (no process waits between scans). */
void cfs_detector_scan_done(cfs_detector *d);
/* Ends its worker. NULL is ignored. */
void cfs_detector_free(cfs_detector *d);

#endif
