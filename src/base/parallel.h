/* Running one piece of work on several threads at once. */
#ifndef CFS_PARALLEL_H
#define CFS_PARALLEL_H

/* Runs fn(arg) on n threads at once (in the caller's thread when none can be started) and
 * returns when every one has returned; fn takes its share of the work from arg itself. */
void cfs_parallel_run(int n, void *(*fn)(void *), void *arg);
/* The processors online, from 1 to most. */
int cfs_parallel_cpus(int most);

#endif
