/*
 * A layout job: work that produces reorganised arrays, run once, on the first read that needs
 * it (so opening a dataset stays metadata-only), shared by the arrays that view its outputs.
 *
 * Two kinds. A plain job runs in the thread of the reader that needs it first, and its outputs
 * are read once it has finished (cfs_job_ensure, cfs_job_acquire). A job that serves parts of
 * its outputs as they land (`part_ready` set; cfs_job_acquire_part) runs in a thread of its own,
 * started by its first reader; each reader waits only for the parts it reads.
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
    /* Under the lock, while the job runs: whether `part` of the outputs has landed; if not,
     * the job learns that a reader waits for it. NULL: a plain job. */
    bool (*part_ready)(cfs_job *job, const void *part);
    pthread_mutex_t lock;
    pthread_cond_t changed;             /* a part landed, a run ended, a reader left */
    int state;                          /* 0 not run (or to run again), 1 done, -1 failed */
    cfs_err failure;
    int refs;
    int readers;                        /* between cfs_job_acquire and cfs_job_done */
    uint64_t last_use;                  /* a clock shared by all jobs: larger is more recent */
    /* A job with part_ready: */
    pthread_t thread;
    bool thread_live;                   /* started and not joined */
    bool running;                       /* a run is under way */
    bool ending;                        /* the run failed: no reader starts on its parts */
    uint64_t runs;                      /* runs ended: a waiting reader sees its run end */
    int cancel;                         /* the job is being destroyed (atomic) */
};

void cfs_job_init(cfs_job *job, int (*run)(cfs_job *, cfs_err *), void (*destroy)(cfs_job *));
/* Runs the job if it has not run; concurrent callers wait for the one run. A failure is
 * remembered and returned to every later caller (nothing partial is ever served), unless its
 * status is CFS_ERETRY (no disk space under the cache bound now): that error goes to this
 * caller and the next caller runs the job again. */
int cfs_job_ensure(cfs_job *job, cfs_err *err);
/* cfs_job_ensure for a reader of outputs that may be dropped: they stay until cfs_job_done. */
int cfs_job_acquire(cfs_job *job, cfs_err *err);
/* For a job with part_ready: starts its run in a thread of its own if none is under way and it
 * has not finished, then waits until `part` has landed (or the whole run has). The part stays
 * until cfs_job_done. Failures as for cfs_job_ensure: a run that fails with CFS_ERETRY fails the
 * readers that waited for it, and the next reader starts another. A run that fails otherwise
 * waits for the readers of its landed parts to finish before its outputs are dropped. */
int cfs_job_acquire_part(cfs_job *job, const void *part, cfs_err *err);
void cfs_job_done(cfs_job *job);
/* From a job's run, under the lock: some part has landed; the readers waiting look again. */
void cfs_job_landed(cfs_job *job);
/* From a job's run: the job is being destroyed; the run should fail soon (any status). */
bool cfs_job_cancelled(cfs_job *job);
/* Drops the outputs of a finished job nobody is reading, so that the next reader runs it
 * again. Never waits: false if the job is busy, not done, or keeps its outputs. */
bool cfs_job_try_drop(cfs_job *job);
cfs_job *cfs_job_ref(cfs_job *job);
/* The last reference destroys the job; a run under way is cancelled and its thread joined. */
void cfs_job_unref(cfs_job *job);

#endif
