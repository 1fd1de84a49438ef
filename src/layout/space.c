#include "space.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct cfs_space {
    cfs_space_bound bound;
    pthread_mutex_t lock;       /* guards holders; jobs' locks are only try-locked under it */
    pthread_cond_t freed;       /* some reserved bytes were released */
    cfs_job **holders;
    size_t n, cap;
    uint64_t dropped;
    uint64_t outstanding;       /* reserved, not released (atomic: released with or without lock) */
};

/* A reservation that does not fit while other work holds space waits for it, looking again at
 * least this often (a reader done with results that may now be dropped does not signal). */
#define RECHECK_NS 100000000L

cfs_space *cfs_space_new(const cfs_space_bound *bound)
{
    cfs_space *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->bound = *bound;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->freed, NULL);
    return s;
}

void cfs_space_free(cfs_space *s)
{
    if (!s)
        return;
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->freed);
    free(s->holders);
    free(s);
}

static uint64_t last_use(const cfs_job *job)
{
    return __atomic_load_n(&job->last_use, __ATOMIC_RELAXED);
}

/* Under the lock: drops the least recently used idle holder; false if none is idle. A job
 * that is running or being read is skipped, never waited for (try-lock only). The use times
 * move meanwhile (readers touch them under their job's lock): each pick is a fresh scan. */
static bool drop_one(cfs_space *s)
{
    bool *tried = calloc(s->n ? s->n : 1, sizeof *tried);
    if (!tried)
        return false;
    for (size_t attempt = 0; attempt < s->n; attempt++) {
        size_t best = s->n;
        for (size_t i = 0; i < s->n; i++)
            if (!tried[i] && (best == s->n || last_use(s->holders[i]) < last_use(s->holders[best])))
                best = i;
        tried[best] = true;
        if (cfs_job_try_drop(s->holders[best])) {
            s->holders[best] = s->holders[--s->n];
            s->dropped++;
            free(tried);
            return true;
        }
    }
    free(tried);
    return false;
}

static void wait_for_release(cfs_space *s)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += RECHECK_NS;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&s->freed, &s->lock, &until);
}

int cfs_space_reserve(cfs_space *s, uint64_t bytes, cfs_err *err)
{
    if (!s || bytes == 0)
        return 0;
    pthread_mutex_lock(&s->lock);
    int rc;
    while ((rc = s->bound.reserve(s->bound.ctx, bytes, err)) < 0) {
        if (err->status == CFS_ENEVERFITS)
            break;
        if (drop_one(s))
            continue;
        /* Other layouts run or are being read: their space comes back. With none, it never
         * fits, and the bound's reason is the answer. */
        if (__atomic_load_n(&s->outstanding, __ATOMIC_ACQUIRE) == 0)
            break;
        wait_for_release(s);
    }
    if (rc == 0)
        __atomic_add_fetch(&s->outstanding, bytes, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void cfs_space_release(cfs_space *s, uint64_t bytes)
{
    if (!s || !bytes)
        return;
    s->bound.release(s->bound.ctx, bytes);
    __atomic_sub_fetch(&s->outstanding, bytes, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&s->freed);
}

int cfs_space_hold(cfs_space *s, cfs_job *job)
{
    if (!s)
        return 0;
    pthread_mutex_lock(&s->lock);
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        cfs_job **grown = realloc(s->holders, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&s->lock);
            return -1;
        }
        s->holders = grown;
        s->cap = cap;
    }
    s->holders[s->n++] = job;
    pthread_mutex_unlock(&s->lock);
    return 0;
}

void cfs_space_unhold(cfs_space *s, cfs_job *job)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n; i++)
        if (s->holders[i] == job) {
            s->holders[i] = s->holders[--s->n];
            break;
        }
    pthread_mutex_unlock(&s->lock);
}

uint64_t cfs_space_dropped(cfs_space *s)
{
    if (!s)
        return 0;
    pthread_mutex_lock(&s->lock);
    uint64_t n = s->dropped;
    pthread_mutex_unlock(&s->lock);
    return n;
}
