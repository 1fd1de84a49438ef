#include "progress.h"
#include "strfmt.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct cfs_progress {
    pthread_mutex_t lock;
    char *source;
    FILE *log;
    char element[256];
    struct timespec started;
    double fraction;
    int decile;
    int running;                /* jobs begun and not ended */
};

cfs_progress *cfs_progress_new(const char *source, FILE *log)
{
    cfs_progress *p = calloc(1, sizeof *p);
    if (!p || !(p->source = strdup(source))) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->lock, NULL);
    p->log = log;
    return p;
}

void cfs_progress_free(cfs_progress *p)
{
    if (!p)
        return;
    pthread_mutex_destroy(&p->lock);
    free(p->source);
    free(p);
}

static double seconds_since(const struct timespec *t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t->tv_sec) + (double)(now.tv_nsec - t->tv_nsec) / 1e9;
}

/* Under the lock: element is the job shown from now on. */
static void show(cfs_progress *p, const char *element)
{
    if (strncmp(p->element, element, sizeof p->element) == 0)
        return;
    snprintf(p->element, sizeof p->element, "%s", element);
    clock_gettime(CLOCK_MONOTONIC, &p->started);
    p->decile = 0;
    p->fraction = 0;
}

void cfs_progress_begin(cfs_progress *p, const char *element)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->running++;
    p->element[0] = '\0';
    show(p, element);
    pthread_mutex_unlock(&p->lock);
}

void cfs_progress_note(cfs_progress *p, const char *element, double fraction)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    show(p, element);
    p->fraction = fraction < 0 ? 0 : fraction < 1 ? fraction : 1;
    int decile = (int)(p->fraction * 10);
    if (p->log && decile > p->decile && seconds_since(&p->started) > 2.0) {
        p->decile = decile;
        cfs_log(p->log, "%s: laying out %s: %d%%", p->source, element, decile * 10);
    }
    pthread_mutex_unlock(&p->lock);
}

void cfs_progress_end(cfs_progress *p, const char *element)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    if (p->running > 0)
        p->running--;
    bool last = p->running == 0;
    pthread_mutex_unlock(&p->lock);
    /* Only the last job's end shows: another still running keeps its own figure. */
    if (last)
        cfs_progress_note(p, element, 1);
}

bool cfs_progress_get(cfs_progress *p, char *element, size_t len, double *fraction)
{
    if (!p)
        return false;
    pthread_mutex_lock(&p->lock);
    bool working = p->running > 0;
    if (working) {
        snprintf(element, len, "%s", p->element);
        *fraction = p->fraction;
    }
    pthread_mutex_unlock(&p->lock);
    return working;
}
