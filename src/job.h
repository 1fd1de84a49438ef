/*
 * A layout job: work that produces reorganised arrays, run once, on the first read that needs
 * it (so opening a dataset stays metadata-only), shared by the arrays that view its outputs.
 */
#ifndef CFS_JOB_H
#define CFS_JOB_H

#include <pthread.h>

#include "error.h"

typedef struct cfs_job cfs_job;

struct cfs_job {
    int (*run)(cfs_job *job, cfs_err *err);
    void (*destroy)(cfs_job *job);      /* frees the outputs and the job itself */
    pthread_mutex_t lock;
    int state;                          /* 0 not run, 1 done, -1 failed */
    cfs_err failure;
    int refs;
};

void cfs_job_init(cfs_job *job, int (*run)(cfs_job *, cfs_err *), void (*destroy)(cfs_job *));
/* Runs the job if it has not run; concurrent callers wait for the one run. A failure is
 * remembered and returned to every later caller (nothing partial is ever served). */
int cfs_job_ensure(cfs_job *job, cfs_err *err);
cfs_job *cfs_job_ref(cfs_job *job);
void cfs_job_unref(cfs_job *job);

#endif
