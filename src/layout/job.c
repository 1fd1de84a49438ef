#include "job.h"

void cfs_job_init(cfs_job *job, int (*run)(cfs_job *, cfs_err *), void (*destroy)(cfs_job *))
{
    job->run = run;
    job->destroy = destroy;
    pthread_mutex_init(&job->lock, NULL);
    pthread_cond_init(&job->changed, NULL);
    job->state = 0;
    job->failure.status = CFS_OK;
    job->failure.msg[0] = '\0';
    job->refs = 1;
    job->drop = NULL;
    job->readers = 0;
    job->last_use = 0;
    job->part_ready = NULL;
    job->thread_live = job->running = job->ending = false;
    job->runs = 0;
    job->cancel = 0;
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

/* Under the lock: a reader starts on the outputs. */
static void pin(cfs_job *job)
{
    job->readers++;
    __atomic_store_n(&job->last_use, __atomic_add_fetch(&use_clock, 1, __ATOMIC_RELAXED),
                     __ATOMIC_RELAXED);
}

int cfs_job_acquire(cfs_job *job, cfs_err *err)
{
    pthread_mutex_lock(&job->lock);
    int state = settle(job);
    if (state > 0)
        pin(job);
    else if (err)
        *err = job->failure;
    pthread_mutex_unlock(&job->lock);
    return state < 0 ? -1 : 0;
}

/* The run of a job with part_ready, in a thread of its own (or its reader's, when no thread
 * starts). A failed run's outputs go once nobody reads its landed parts. */
static void *run_parts(void *arg)
{
    cfs_job *job = arg;
    cfs_err err = {CFS_OK, ""};
    int rc = job->run(job, &err);
    pthread_mutex_lock(&job->lock);
    if (rc < 0) {
        job->ending = true;
        while (job->readers > 0)
            pthread_cond_wait(&job->changed, &job->lock);
        if (job->drop)
            job->drop(job);
        if (err.status == CFS_OK)
            err.status = CFS_EFAIL;
    }
    job->failure = rc < 0 ? err : (cfs_err){CFS_OK, ""};
    job->state = rc == 0 ? 1 : err.status == CFS_ERETRY ? 0 : -1;
    job->running = job->ending = false;
    job->runs++;
    pthread_cond_broadcast(&job->changed);
    pthread_mutex_unlock(&job->lock);
    return NULL;
}

/* Under the lock, with no run under way: starts one. The thread of the last run has ended
 * (it only returns after its last unlock), so joining it here does not wait. */
static void start_run(cfs_job *job)
{
    if (job->thread_live)
        pthread_join(job->thread, NULL);
    job->thread_live = false;
    job->running = true;
    if (pthread_create(&job->thread, NULL, run_parts, job) == 0) {
        job->thread_live = true;
        return;
    }
    pthread_mutex_unlock(&job->lock);
    run_parts(job);
    pthread_mutex_lock(&job->lock);
}

int cfs_job_acquire_part(cfs_job *job, const void *part, cfs_err *err)
{
    pthread_mutex_lock(&job->lock);
    bool watching = false;      /* whether this reader has seen a run under way or started one */
    uint64_t run = 0;
    int rc;
    for (;;) {
        if (job->state != 0) {
            rc = job->state > 0 ? 0 : -1;
            break;
        }
        if (!job->running) {
            /* The run this reader waited for failed with CFS_ERETRY: so does the reader. */
            if (watching && job->runs != run && job->failure.status != CFS_OK) {
                rc = -1;
                break;
            }
            watching = true;
            run = job->runs;
            start_run(job);
            continue;
        }
        if (!watching) {
            watching = true;
            run = job->runs;
        }
        if (!job->ending && job->part_ready(job, part)) {
            rc = 0;
            break;
        }
        pthread_cond_wait(&job->changed, &job->lock);
    }
    if (rc == 0)
        pin(job);
    else if (err)
        *err = job->failure;
    pthread_mutex_unlock(&job->lock);
    return rc;
}

void cfs_job_done(cfs_job *job)
{
    pthread_mutex_lock(&job->lock);
    if (--job->readers == 0 && job->ending)
        pthread_cond_broadcast(&job->changed);
    pthread_mutex_unlock(&job->lock);
}

void cfs_job_landed(cfs_job *job)
{
    pthread_cond_broadcast(&job->changed);
}

bool cfs_job_cancelled(cfs_job *job)
{
    return __atomic_load_n(&job->cancel, __ATOMIC_RELAXED) != 0;
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
    /* Nobody else holds the job: only its run's thread may still use it. */
    __atomic_store_n(&job->cancel, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&job->lock);
    bool live = job->thread_live;
    pthread_t thread = live ? job->thread : pthread_self();
    pthread_mutex_unlock(&job->lock);
    if (live)
        pthread_join(thread, NULL);
    pthread_mutex_destroy(&job->lock);
    pthread_cond_destroy(&job->changed);
    job->destroy(job);
}
