/*
 * Readers isolated from the daemon (docs/design.md §2.4): the one entry point by which the
 * catalog opens a source. Each source opened is served by a worker process (worker.h) through
 * proxy arrays; a worker that crashes, runs past its time limit, runs out of its memory limit or
 * breaks the protocol is killed and replaced, the request fails (CFS_EDAMAGED), and the fault is
 * kept for status.json. With isolation off, formats are opened in this process.
 *
 * Workers are a pool: at most `readers` are alive at once in the process, whatever the number of
 * sources. A source whose worker was ended to make room gets a new one at its next read, which
 * must find the file it was opened from (device, inode, size and mtime as recorded at the first
 * open) and send the same model; otherwise the read fails and the source is not read again.
 */
#ifndef CFS_ISOLATED_H
#define CFS_ISOLATED_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

typedef struct cfs_isolation {
    bool off;                   /* read in this process (-o isolate=off) */
    double open_timeout;        /* seconds an open may take (0: the default, 120) */
    double read_timeout;        /* seconds a read may take (0: the default, 60) */
    uint64_t memory;            /* a worker's address-space limit in bytes (0: none) */
    const char *exe;            /* the program a worker runs (NULL: /proc/self/exe) */
    unsigned readers;           /* workers alive at once in this process (0: the default) */
    /* The worker that opened a source stays with it, not handed on to another source's open,
     * until cfs_isolated_let_go: for reads that follow the open at once (the catalog's naming).
     * Each keeper must let go before it opens another source, or opens wait for each other. */
    bool keep_worker;
} cfs_isolation;

#define CFS_ISOLATE_OPEN_TIMEOUT 120.0
#define CFS_ISOLATE_READ_TIMEOUT 60.0
/* Workers alive at once: as many as a mount serves requests at once (fuse/fs.c). */
#define CFS_ISOLATE_READERS 16
#define CFS_ISOLATE_MAX_READERS 1024

/* What ended a worker, for status.json. */
typedef struct cfs_reader_fault {
    bool happened;
    char what[160];             /* "killed by SIGSEGV", "ran past its time limit of 60 s", ... */
    char signal[16];            /* "SIGSEGV", or "" */
    char operation[8];          /* "open" or "read" */
    char element[256];          /* the array read ("obs/cell_type/codes"), "" for an open */
    unsigned count;             /* workers this source has lost */
} cfs_reader_fault;

/* What the daemon asked a source's workers for since it was opened (status.json): requests,
 * and the rows they spanned (first-axis rows of a slab, rows of a row read; 1 for a scalar). */
typedef struct cfs_reader_stats {
    uint64_t requests;
    uint64_t rows;
    uint64_t opens;             /* by a worker: the first, and each after its worker went */
} cfs_reader_stats;

/* Detects and opens path as cfs_format_open does, in a worker unless iso->off. On failure err
 * says why; fault (may be NULL) says whether a worker fault was the reason. */
int cfs_isolated_open(const char *path, const cfs_isolation *iso, cfs_dataset **out,
                      cfs_reader_fault *fault, cfs_err *err);
/* The same for one part of an input of several (cfs_format_open_part; part NULL: the above). */
int cfs_isolated_open_part(const char *path, const char *part, const cfs_isolation *iso,
                           cfs_dataset **out, cfs_reader_fault *fault, cfs_err *err);
/* True if ds is served by workers; *stats receives their counters. */
bool cfs_isolated_stats(const cfs_dataset *ds, cfs_reader_stats *stats);
/* The reads that followed the open are done: a source opened with keep_worker lets its worker
 * go to other sources, and any values sent with the model that no read took whole are dropped
 * (a later read asks a worker). */
void cfs_isolated_let_go(const cfs_dataset *ds);
/* The workers alive in this process now (at most the readers of the last open). */
unsigned cfs_isolated_workers(void);
/* True if ds is served by workers and one of them faulted; *fault receives the first fault. */
bool cfs_isolated_fault(const cfs_dataset *ds, cfs_reader_fault *fault);

#endif
