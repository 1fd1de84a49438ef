/*
 * A layout job: work that produces reorganised arrays, run once, on the first read that needs
 * it (so opening a dataset stays metadata-only), shared by the arrays that view its outputs.
 */
#ifndef CFS_JOB_H
#define CFS_JOB_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "error.h"

typedef struct cfs_job cfs_job;

struct cfs_job {
    int (*run)(cfs_job *job, cfs_err *err);
    void (*destroy)(cfs_job *job);      /* frees the outputs and the job itself */
    void (*drop)(cfs_job *job);         /* frees the outputs only; NULL: they are kept */
    pthread_mutex_t lock;
    int state;                          /* 0 not run (or to run again), 1 done, -1 failed */
    cfs_err failure;
    int refs;
    int readers;                        /* between cfs_job_acquire and cfs_job_done */
    uint64_t last_use;                  /* a clock shared by all jobs: larger is more recent */
};

void cfs_job_init(cfs_job *job, int (*run)(cfs_job *, cfs_err *), void (*destroy)(cfs_job *));
/* Runs the job if it has not run; concurrent callers wait for the one run. A failure is
 * remembered and returned to every later caller (nothing partial is ever served), unless its
 * status is CFS_ERETRY (no disk space under the cache bound now): that error goes to this
 * caller and the next caller runs the job again. */
int cfs_job_ensure(cfs_job *job, cfs_err *err);
/* cfs_job_ensure for a reader of outputs that may be dropped: they stay until cfs_job_done. */
int cfs_job_acquire(cfs_job *job, cfs_err *err);
void cfs_job_done(cfs_job *job);
/* Drops the outputs of a finished job nobody is reading, so that the next reader runs it
 * again. Never waits: false if the job is busy, not done, or keeps its outputs. */
bool cfs_job_try_drop(cfs_job *job);
cfs_job *cfs_job_ref(cfs_job *job);
void cfs_job_unref(cfs_job *job);

#endif
