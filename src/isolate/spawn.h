/*
 * Reader worker processes (docs/design.md §2.4): forked by the fork server (forkserver.h), a
 * process started by fork and exec of the program itself (never a bare fork of a multi-threaded
 * daemon) from one thread that lives as long as the process, so the parent-death signals of the
 * server and of the workers (the daemon's children) fire only when the process ends; ended by
 * SIGKILL and reaped, so none outlives its owner or stays a zombie.
 */
#ifndef CFS_SPAWN_H
#define CFS_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

typedef struct cfs_worker_proc {
    pid_t pid;
    int fd;             /* the daemon's end of the socket */
    pid_t owner;        /* the process that started it: only it may reap it */
} cfs_worker_proc;

/* Starts a reader worker with an address-space limit of memory bytes (0: none), forked by the
 * fork server of exe (started at the first call, and again if it died). */
int cfs_worker_spawn(const char *exe, uint64_t memory, cfs_worker_proc *out, cfs_err *err);
/* Ends the worker: SIGKILL, reaped; how receives how it ended ("killed by SIGSEGV", "exited
 * with status 2"), when it ended of itself before the kill (or "" if it was alive). A worker
 * this process did not start (a daemon's, started before the daemon forked) is only let go. */
void cfs_worker_end(cfs_worker_proc *w, char *how, size_t len);

#endif
