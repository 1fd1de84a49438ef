#include "space.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct cfs_space {
    cfs_space_bound bound;
    pthread_mutex_t lock;       /* guards holders; taken before any job's lock, never after */
    cfs_job **holders;
    size_t n, cap;
    uint64_t dropped;
};

cfs_space *cfs_space_new(const cfs_space_bound *bound)
{
    cfs_space *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->bound = *bound;
    pthread_mutex_init(&s->lock, NULL);
    return s;
}

void cfs_space_free(cfs_space *s)
{
    if (!s)
        return;
    pthread_mutex_destroy(&s->lock);
    free(s->holders);
    free(s);
}

static int by_last_use(const void *a, const void *b)
{
    uint64_t x = __atomic_load_n(&(*(cfs_job *const *)a)->last_use, __ATOMIC_RELAXED);
    uint64_t y = __atomic_load_n(&(*(cfs_job *const *)b)->last_use, __ATOMIC_RELAXED);
    return x < y ? -1 : x > y;
}

/* Under the lock: drops the least recently used idle holder; false if none is idle. A job
 * that is running or being read is skipped, never waited for (try-lock only). */
static bool drop_one(cfs_space *s)
{
    cfs_job **order = malloc((s->n ? s->n : 1) * sizeof *order);
    if (!order)
        return false;
    memcpy(order, s->holders, s->n * sizeof *order);
    qsort(order, s->n, sizeof *order, by_last_use);
    bool dropped = false;
    for (size_t i = 0; i < s->n && !dropped; i++) {
        if (!cfs_job_try_drop(order[i]))
            continue;
        dropped = true;
        s->dropped++;
        for (size_t k = 0; k < s->n; k++)
            if (s->holders[k] == order[i]) {
                s->holders[k] = s->holders[--s->n];
                break;
            }
    }
    free(order);
    return dropped;
}

int cfs_space_reserve(cfs_space *s, uint64_t bytes, cfs_err *err)
{
    if (!s || bytes == 0)
        return 0;
    pthread_mutex_lock(&s->lock);
    int rc;
    while ((rc = s->bound.reserve(s->bound.ctx, bytes, err)) < 0 && drop_one(s))
        ;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void cfs_space_release(cfs_space *s, uint64_t bytes)
{
    if (s && bytes)
        s->bound.release(s->bound.ctx, bytes);
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
