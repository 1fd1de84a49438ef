/*
 * The fork server (docs/design.md §2.4): the process `cellucid-fs --reader-forkserver FD` that
 * starts reader workers for the daemon. Starting a worker by fork and exec of the program costs
 * the dynamic loading of libhdf5 and its dozens of libraries, tens of milliseconds, and a folder
 * of ten thousand sources opens ten thousand workers; this process has loaded them once and
 * forks each worker from itself. It never reads a source, so every worker starts as fresh as an
 * exec'd one. Started by spawn.c, never by hand.
 *
 * The daemon sends a u64 memory limit with one socket end (SCM_RIGHTS); the server forks a
 * worker serving that socket and answers with its pid (an i32, or -errno). Workers are forked
 * as the daemon's children (CLONE_PARENT), so the daemon reaps them and learns how they ended,
 * and they die with it as the server does.
 */
#ifndef CFS_FORKSERVER_H
#define CFS_FORKSERVER_H

#include <stdint.h>

/* The hidden command-line flag that runs the fork server. */
#define CFS_FORKSERVER_FLAG "--reader-forkserver"

/* Serves fork requests on FD until the daemon closes it; the process's exit status. */
int cfs_forkserver_main(int fd);

#endif
