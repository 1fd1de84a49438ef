/*
 * The reader worker (docs/design.md §2.4): the process (named CFS_WORKER_NAME) that opens one
 * source with the format registry and serves the reads of its arrays over a socket, or tells a
 * folder scan which entries are inputs (detect.h), under an address-space limit. Forked by the
 * fork server (forkserver.h), never started by hand.
 */
#ifndef CFS_WORKER_H
#define CFS_WORKER_H

#include <stdint.h>

/* A worker's process name (/proc/PID/comm), by which people and tests tell workers apart. */
#define CFS_WORKER_NAME "cfs-reader"

/* Test only: "segv@ELEMENT", "loop@ELEMENT" or "alloc@ELEMENT" makes the worker crash, spin or
 * allocate without bound when it reads that array (ELEMENT "open": when it opens; "detect": when
 * a folder scan asks whether an entry is an input), so each limit can be tested
 * deterministically. Honoured by workers only. */
#define CFS_WORKER_FAULT_ENV "CELLUCID_FS_TEST_READER_FAULT"

/* Serves until the daemon closes its end; the process's exit status. */
int cfs_reader_worker_main(int fd, uint64_t memory_limit);

#endif
