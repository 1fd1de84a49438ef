#include "job.h"

void cfs_job_init(cfs_job *job, int (*run)(cfs_job *, cfs_err *), void (*destroy)(cfs_job *))
{
    job->run = run;
    job->destroy = destroy;
    pthread_mutex_init(&job->lock, NULL);
    job->state = 0;
    job->failure.msg[0] = '\0';
    job->refs = 1;
}

int cfs_job_ensure(cfs_job *job, cfs_err *err)
{
    pthread_mutex_lock(&job->lock);
    if (job->state == 0)
        job->state = job->run(job, &job->failure) < 0 ? -1 : 1;
    int state = job->state;
    if (state < 0 && err)
        *err = job->failure;
    pthread_mutex_unlock(&job->lock);
    return state < 0 ? -1 : 0;
}

cfs_job *cfs_job_ref(cfs_job *job)
{
    __atomic_add_fetch(&job->refs, 1, __ATOMIC_RELAXED);
    return job;
}

void cfs_job_unref(cfs_job *job)
{
    if (!job || __atomic_sub_fetch(&job->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    pthread_mutex_destroy(&job->lock);
    job->destroy(job);
}
