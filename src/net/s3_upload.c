#include "s3_upload.h"
#include "digest.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_THREADS = 64 };

typedef struct upload {
    struct upload *next;
    char *key;
    char *content_type;
    size_t len;
    unsigned char data[];
} upload;

struct cfs_s3_uploader {
    const cfs_s3_config *cfg;
    char *bucket;
    cfs_s3_listing there;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    upload *head, *tail;
    size_t queued, in_flight, capacity;
    bool stopping, failed;
    cfs_err first_err;
    cfs_s3_upload_stats stats;
    int nthreads;
    pthread_t threads[MAX_THREADS];
    cfs_s3 *clients[MAX_THREADS];
};

static void free_upload(upload *up)
{
    if (!up)
        return;
    free(up->key);
    free(up->content_type);
    free(up);
}

static void fail(cfs_s3_uploader *u, const cfs_err *err)
{
    if (!u->failed)
        u->first_err = *err;
    u->failed = true;
}

static upload *take(cfs_s3_uploader *u)
{
    pthread_mutex_lock(&u->lock);
    while (!u->head && !u->stopping)
        pthread_cond_wait(&u->changed, &u->lock);
    upload *up = u->head;
    if (up) {
        u->head = up->next;
        if (!u->head)
            u->tail = NULL;
        u->queued--;
        u->in_flight++;
        pthread_cond_broadcast(&u->changed);
    }
    pthread_mutex_unlock(&u->lock);
    return up;
}

typedef struct worker_arg {
    cfs_s3_uploader *u;
    cfs_s3 *s3;
} worker_arg;

static void *upload_worker(void *arg)
{
    cfs_s3_uploader *u = ((worker_arg *)arg)->u;
    cfs_s3 *s3 = ((worker_arg *)arg)->s3;
    free(arg);
    upload *up;
    while ((up = take(u))) {
        cfs_err err = {0};
        int rc = cfs_s3_put(s3, u->bucket, up->key, up->data, up->len, up->content_type, &err);
        pthread_mutex_lock(&u->lock);
        if (rc < 0) {
            fail(u, &err);
        } else {
            u->stats.written++;
            u->stats.bytes_written += up->len;
        }
        u->in_flight--;
        pthread_cond_broadcast(&u->changed);
        pthread_mutex_unlock(&u->lock);
        free_upload(up);
    }
    return NULL;
}

static int start_threads(cfs_s3_uploader *u, int parallel, cfs_err *err)
{
    for (int i = 0; i < parallel; i++) {
        worker_arg *arg = malloc(sizeof *arg);
        cfs_s3 *s3 = arg ? cfs_s3_new(u->cfg, err) : NULL;
        if (!arg || !s3) {
            free(arg);
            return arg ? -1 : cfs_err_oom(err);
        }
        u->clients[i] = s3;
        *arg = (worker_arg){u, s3};
        if (pthread_create(&u->threads[i], NULL, upload_worker, arg) != 0) {
            free(arg);
            return cfs_err_set(err, "cannot start an upload thread");
        }
        u->nthreads++;
    }
    return 0;
}

cfs_s3_uploader *cfs_s3_uploader_new(const cfs_s3_config *cfg, const char *bucket,
                                     const char *prefix, int parallel, cfs_err *err)
{
    cfs_s3_uploader *u = calloc(1, sizeof *u);
    if (!u || !(u->bucket = strdup(bucket))) {
        free(u);
        cfs_err_oom(err);
        return NULL;
    }
    u->cfg = cfg;
    parallel = parallel < 1 ? 1 : parallel > MAX_THREADS ? MAX_THREADS : parallel;
    u->capacity = 2 * (size_t)parallel;
    pthread_mutex_init(&u->lock, NULL);
    pthread_cond_init(&u->changed, NULL);
    cfs_s3 *lister = cfs_s3_new(cfg, err);
    int rc = lister ? cfs_s3_list(lister, bucket, prefix, &u->there, err) : -1;
    cfs_s3_free(lister);
    if (rc == 0)
        rc = start_threads(u, parallel, err);
    if (rc < 0) {
        cfs_s3_uploader_free(u);
        return NULL;
    }
    return u;
}

/* Whether the listing taken at the start holds key with these very bytes. */
static bool already_there(const cfs_s3_uploader *u, const char *key, const void *data,
                          size_t len)
{
    const cfs_s3_object *o = cfs_s3_listing_find(&u->there, key);
    if (!o || o->size != len)
        return false;
    char md5[CFS_MD5_HEX];
    cfs_md5_hex(data, len, md5);
    return strcmp(md5, o->etag) == 0;
}

int cfs_s3_uploader_put(cfs_s3_uploader *u, const char *key, const void *data, size_t len,
                        const char *content_type, cfs_err *err)
{
    bool skip = already_there(u, key, data, len);
    upload *up = skip ? NULL : malloc(sizeof *up + len);
    if (up) {
        *up = (upload){.len = len, .key = strdup(key), .content_type = strdup(content_type)};
        memcpy(up->data, data, len);
    }
    if (!skip && (!up || !up->key || !up->content_type)) {
        free_upload(up);
        return cfs_err_oom(err);
    }
    pthread_mutex_lock(&u->lock);
    while (!skip && !u->failed && u->queued >= u->capacity)
        pthread_cond_wait(&u->changed, &u->lock);
    int rc = 0;
    if (u->failed) {
        *err = u->first_err;
        rc = -1;
        free_upload(up);
    } else if (skip) {
        u->stats.skipped++;
        u->stats.bytes_skipped += len;
    } else {
        if (u->tail)
            u->tail->next = up;
        else
            u->head = up;
        u->tail = up;
        u->queued++;
        pthread_cond_broadcast(&u->changed);
    }
    pthread_mutex_unlock(&u->lock);
    return rc;
}

int cfs_s3_uploader_drain(cfs_s3_uploader *u, cfs_err *err)
{
    pthread_mutex_lock(&u->lock);
    while (!u->failed && (u->queued > 0 || u->in_flight > 0))
        pthread_cond_wait(&u->changed, &u->lock);
    int rc = 0;
    if (u->failed) {
        *err = u->first_err;
        rc = -1;
    }
    pthread_mutex_unlock(&u->lock);
    return rc;
}

void cfs_s3_uploader_stats(cfs_s3_uploader *u, cfs_s3_upload_stats *stats)
{
    pthread_mutex_lock(&u->lock);
    *stats = u->stats;
    pthread_mutex_unlock(&u->lock);
}

void cfs_s3_uploader_free(cfs_s3_uploader *u)
{
    if (!u)
        return;
    pthread_mutex_lock(&u->lock);
    u->stopping = true;
    while (u->head) {
        upload *up = u->head;
        u->head = up->next;
        free_upload(up);
    }
    u->tail = NULL;
    u->queued = 0;
    pthread_cond_broadcast(&u->changed);
    pthread_mutex_unlock(&u->lock);
    for (int i = 0; i < u->nthreads; i++)
        pthread_join(u->threads[i], NULL);
    for (int i = 0; i < MAX_THREADS; i++)
        cfs_s3_free(u->clients[i]);
    cfs_s3_listing_free(&u->there);
    pthread_mutex_destroy(&u->lock);
    pthread_cond_destroy(&u->changed);
    free(u->bucket);
    free(u);
}
