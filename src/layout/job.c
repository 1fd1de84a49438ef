#include "job.h"

void cfs_job_init(cfs_job *job, int (*run)(cfs_job *, cfs_err *), void (*destroy)(cfs_job *))
{
    job->run = run;
    job->destroy = destroy;
    pthread_mutex_init(&job->lock, NULL);
    job->state = 0;
    job->failure.msg[0] = '\0';
    job->refs = 1;
    job->drop = NULL;
    job->readers = 0;
    job->last_use = 0;
}

/* Under the lock: runs the job if it has to; 1 when its outputs are there, -1 when not (the
 * reason in job->failure). */
static int settle(cfs_job *job)
{
    if (job->state != 0)
        return job->state;
    int rc = job->run(job, &job->failure);
    job->state = rc == 0 ? 1 : job->failure.status == CFS_ERETRY ? 0 : -1;
    return rc == 0 ? 1 : -1;
}

int cfs_job_ensure(cfs_job *job, cfs_err *err)
{
    pthread_mutex_lock(&job->lock);
    int state = settle(job);
    if (state < 0 && err)
        *err = job->failure;
    pthread_mutex_unlock(&job->lock);
    return state < 0 ? -1 : 0;
}

static uint64_t use_clock;

int cfs_job_acquire(cfs_job *job, cfs_err *err)
{
    pthread_mutex_lock(&job->lock);
    int state = settle(job);
    if (state > 0) {
        job->readers++;
        __atomic_store_n(&job->last_use, __atomic_add_fetch(&use_clock, 1, __ATOMIC_RELAXED),
                         __ATOMIC_RELAXED);
    } else if (err) {
        *err = job->failure;
    }
    pthread_mutex_unlock(&job->lock);
    return state < 0 ? -1 : 0;
}

void cfs_job_done(cfs_job *job)
{
    pthread_mutex_lock(&job->lock);
    job->readers--;
    pthread_mutex_unlock(&job->lock);
}

bool cfs_job_try_drop(cfs_job *job)
{
    if (!job->drop || pthread_mutex_trylock(&job->lock) != 0)
        return false;
    bool idle = job->state == 1 && job->readers == 0;
    if (idle) {
        job->drop(job);
        job->state = 0;
    }
    pthread_mutex_unlock(&job->lock);
    return idle;
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
