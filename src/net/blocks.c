#include "blocks.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Blocks kept in memory when no store is given (export, inspect): a pass reads on, so a few
 * suffice for the metadata libhdf5 asks for again and again. */
#define MEMORY_BLOCKS 32
/* URLs whose answer is remembered. */
#define KNOWN_URLS 256
/* At most this many blocks are asked for by one range request (16 MiB of 1 MiB blocks, a
 * fetch's piece). */
#define RUN_BLOCKS 16

typedef struct known_url {
    char *url;
    cfs_remote_info info;
    bool failed;                /* the last answer was why, not info */
    cfs_err why;
    double asked;               /* monotonic seconds */
    bool stale;                 /* a read found another version: ask again at the next look */
} known_url;

typedef struct memory_block {
    char *key;
    cfs_buf bytes;
    uint64_t used;
} memory_block;

static struct {
    pthread_mutex_t lock;
    cfs_blocks_config cfg;
    cfs_block_store store;      /* get NULL: memory */
    known_url known[KNOWN_URLS];
    size_t nknown;
    memory_block memory[MEMORY_BLOCKS];
    uint64_t clock;
} blocks = {.lock = PTHREAD_MUTEX_INITIALIZER};

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Under the lock: the entry of name, or NULL. */
static known_url *known_of(const char *name)
{
    for (size_t i = 0; i < blocks.nknown; i++)
        if (strcmp(blocks.known[i].url, name) == 0)
            return &blocks.known[i];
    return NULL;
}

/* Under the lock: remembers what name is now (or why it cannot be read). */
static void remember(const char *name, const cfs_remote_info *info, const cfs_err *why,
                     double now)
{
    known_url *k = known_of(name);
    if (!k) {
        char *kept = strdup(name);
        if (!kept)
            return;
        k = &blocks.known[blocks.nknown < KNOWN_URLS ? blocks.nknown++
                                                     : blocks.clock++ % KNOWN_URLS];
        free(k->url);
        *k = (known_url){.url = kept};
    }
    k->failed = why != NULL;
    if (why)
        k->why = *why;
    else
        k->info = *info;
    k->asked = now;
    k->stale = false;
}

/* A read of name found the object changed: the next look asks the server rather than reuse
 * the answer for the rest of the poll interval, so the new version is laid out now. */
static void forget(const char *name)
{
    pthread_mutex_lock(&blocks.lock);
    known_url *k = known_of(name);
    if (k)
        k->stale = true;
    pthread_mutex_unlock(&blocks.lock);
}

/* A range read's result: -2 (the object changed) forgets name's answer and becomes -1. */
static int read_result(const char *name, int rc)
{
    if (rc == -2)
        forget(name);
    return rc < 0 ? -1 : rc;
}

/* What name is: asked again once the poll interval has passed (failures too, so a source that
 * cannot be read is not asked at every look). A server that cannot be reached for a moment
 * (CFS_EIO) leaves the last answer standing: its datasets stay listed and their reads fail
 * until it is back; one that says the file is gone or forbidden is believed. */
static int remote_info(void *ctx, const char *name, cfs_remote_info *out, cfs_err *err)
{
    (void)ctx;
    double now = now_seconds();
    pthread_mutex_lock(&blocks.lock);
    known_url *k = known_of(name);
    if (k && !k->stale && now - k->asked < blocks.cfg.poll) {
        int rc = k->failed ? (*err = k->why, -1) : (*out = k->info, 0);
        pthread_mutex_unlock(&blocks.lock);
        return rc;
    }
    pthread_mutex_unlock(&blocks.lock);
    char *url = cfs_url_target(name);
    if (!url)
        return cfs_err_oom(err);
    int rc = cfs_range_info(url, out, err);    /* the caller names the source */
    free(url);
    pthread_mutex_lock(&blocks.lock);
    k = known_of(name);
    if (rc < 0 && err->status == CFS_EIO && k && !k->failed) {
        *out = k->info;         /* asked again at the next look */
        rc = 0;
    } else if (rc == 0 || err->status != CFS_ENOMEM) {
        remember(name, out, rc < 0 ? err : NULL, now);
    }
    pthread_mutex_unlock(&blocks.lock);
    return rc;
}

/* The blocks one read spans, from the first the store lacks to the next it has (RUN_BLOCKS at
 * most): fetched together by one range request, so a read of n missing blocks costs one round
 * trip, not n. The store still asks for each block (one it got meanwhile from another read was
 * fetched twice, never mixed: both are the same version's). */
typedef struct block_run {
    uint64_t last;              /* the read's last block */
    uint64_t first, count;      /* the blocks in bytes (count 0: none yet) */
    cfs_buf bytes;
} block_run;

typedef struct block_job {
    const char *name;           /* the source's name (its answer's key) */
    const char *url;
    const cfs_remote_info *version;
    uint64_t k;                 /* the block */
    size_t len;                 /* its length */
    block_run *run;
} block_job;

static char *block_key(const char *url, const cfs_remote_info *v, uint64_t k, size_t *len);
static bool store_has(const char *url, const cfs_remote_info *v, uint64_t k);

/* Blocks k.. of the run (to its last, or the first the store has, at most RUN_BLOCKS) by one
 * range request. */
static int fetch_run(block_job *j, cfs_err *err)
{
    block_run *r = j->run;
    uint64_t bs = blocks.cfg.block_size, size = j->version->size;
    uint64_t most = j->k + RUN_BLOCKS - 1 < r->last ? j->k + RUN_BLOCKS - 1 : r->last, end = j->k;
    while (end < most && !store_has(j->url, j->version, end + 1))
        end++;
    uint64_t off = j->k * bs, len = (end + 1) * bs < size ? (end + 1) * bs - off : size - off;
    r->count = 0;
    r->bytes.len = 0;
    if (cfs_buf_reserve(&r->bytes, (size_t)len) < 0)
        return cfs_err_oom(err);
    int rc = cfs_range_read(j->url, j->version, off, r->bytes.data, (size_t)len, err);
    if (read_result(j->name, rc) < 0)
        return cfs_err_prefix(err, "%s", j->url);
    r->bytes.len = (size_t)len;
    r->first = j->k;
    r->count = end - j->k + 1;
    return 0;
}

static int fetch_block(void *ctx, cfs_buf *out, cfs_err *err)
{
    block_job *j = ctx;
    block_run *r = j->run;
    if (!(r->count && j->k >= r->first && j->k < r->first + r->count) && fetch_run(j, err) < 0)
        return -1;
    size_t at = (size_t)((j->k - r->first) * blocks.cfg.block_size);
    return cfs_buf_append(out, r->bytes.data + at, j->len) < 0 ? cfs_err_oom(err) : 0;
}

static int memory_get(const char *key, block_job *job, cfs_buf *out, cfs_err *err)
{
    pthread_mutex_lock(&blocks.lock);
    memory_block *oldest = &blocks.memory[0];
    for (size_t i = 0; i < MEMORY_BLOCKS; i++) {
        memory_block *m = &blocks.memory[i];
        if (m->key && strcmp(m->key, key) == 0) {
            m->used = ++blocks.clock;
            int rc = cfs_buf_append(out, m->bytes.data, m->bytes.len) < 0 ? cfs_err_oom(err) : 0;
            pthread_mutex_unlock(&blocks.lock);
            return rc;
        }
        if (m->used < oldest->used)
            oldest = m;
    }
    pthread_mutex_unlock(&blocks.lock);
    size_t before = out->len;
    if (fetch_block(job, out, err) < 0)
        return -1;
    char *kept = strdup(key);
    cfs_buf copy = {0};
    if (!kept || cfs_buf_append(&copy, out->data + before, out->len - before) < 0) {
        free(kept);
        cfs_buf_free(&copy);
        return 0;               /* served, not kept */
    }
    pthread_mutex_lock(&blocks.lock);
    free(oldest->key);
    cfs_buf_free(&oldest->bytes);
    oldest->key = kept;
    oldest->bytes = copy;
    oldest->used = ++blocks.clock;
    pthread_mutex_unlock(&blocks.lock);
    return 0;
}

/* The store's key of block k of url's version (malloc'd, its length in *len), or NULL. */
static char *block_key(const char *url, const cfs_remote_info *v, uint64_t k, size_t *len)
{
    size_t cap = strlen(url) + strlen(v->version) + 64;
    char *key = malloc(cap);
    if (key)
        *len = (size_t)snprintf(key, cap, "remote1|%s|%s|%llu|%llu", url, v->version,
                                (unsigned long long)blocks.cfg.block_size, (unsigned long long)k);
    return key;
}

static cfs_block_store current_store(void)
{
    pthread_mutex_lock(&blocks.lock);
    cfs_block_store store = blocks.store;
    pthread_mutex_unlock(&blocks.lock);
    return store;
}

/* Whether block k of url's version is kept (not known: no). */
static bool store_has(const char *url, const cfs_remote_info *v, uint64_t k)
{
    cfs_block_store store = current_store();
    size_t n = 0;
    char *key = block_key(url, v, k, &n);
    bool has = false;
    if (key && store.get && store.has) {
        has = store.has(store.ctx, key, n);
    } else if (key && !store.get) {
        pthread_mutex_lock(&blocks.lock);
        for (size_t i = 0; i < MEMORY_BLOCKS && !has; i++)
            has = blocks.memory[i].key && strcmp(blocks.memory[i].key, key) == 0;
        pthread_mutex_unlock(&blocks.lock);
    }
    free(key);
    return has;
}

/* Block k of url's version into out. */
static int get_block(const char *name, const char *url, const cfs_remote_info *v, uint64_t k,
                     block_run *run, cfs_buf *out, cfs_err *err)
{
    uint64_t bs = blocks.cfg.block_size, off = k * bs;
    block_job job = {name, url, v, k, (size_t)(v->size - off < bs ? v->size - off : bs), run};
    size_t n = 0;
    char *key = block_key(url, v, k, &n);
    if (!key)
        return cfs_err_oom(err);
    cfs_block_store store = current_store();
    size_t before = out->len;
    int rc = store.get ? store.get(store.ctx, key, n, fetch_block, &job, out, err)
                       : memory_get(key, &job, out, err);
    free(key);
    if (rc == 0 && out->len - before != job.len)
        rc = cfs_err_setc(err, CFS_EIO, "%s: a kept block of %zu bytes where %zu belong", url,
                          out->len - before, job.len);
    return rc;
}

static int remote_read(void *ctx, const char *name, const cfs_remote_info *v, uint64_t off,
                       void *buf, size_t len, cfs_err *err)
{
    (void)ctx;
    char *url = cfs_url_target(name);
    if (!url)
        return cfs_err_oom(err);
    uint64_t bs = blocks.cfg.block_size;
    cfs_buf block = {0};
    block_run run = {.last = len ? (off + len - 1) / bs : 0};
    int rc = 0;
    for (uint64_t at = off; rc == 0 && at < off + len;) {
        uint64_t k = at / bs;
        block.len = 0;
        rc = get_block(name, url, v, k, &run, &block, err);
        if (rc < 0)
            break;
        uint64_t in = at - k * bs, take = block.len - in;
        if (take > off + len - at)
            take = off + len - at;
        memcpy((char *)buf + (at - off), block.data + in, take);
        at += take;
    }
    cfs_buf_free(&block);
    cfs_buf_free(&run.bytes);
    free(url);
    return rc;
}

/* A piece of an object fetched whole: straight to its file, not through the blocks. */
static int remote_fetch(void *ctx, const char *name, const cfs_remote_info *v, uint64_t off,
                        size_t len, int fd, cfs_err *err)
{
    (void)ctx;
    char *url = cfs_url_target(name);
    if (!url)
        return cfs_err_oom(err);
    int rc = read_result(name, cfs_range_fetch(url, v, off, len, fd, err));
    if (rc < 0)
        cfs_err_prefix(err, "%s", url);
    free(url);
    return rc;
}

int cfs_blocks_start(const cfs_blocks_config *cfg, cfs_err *err)
{
    if (cfs_range_global_init(&cfg->http, err) < 0)
        return -1;
    pthread_mutex_lock(&blocks.lock);
    blocks.cfg = *cfg;
    if (!blocks.cfg.block_size)
        blocks.cfg.block_size = CFS_BLOCK_SIZE;
    pthread_mutex_unlock(&blocks.lock);
    cfs_remote_ops ops = {remote_info, remote_read, NULL, remote_fetch, cfg->shapes};
    cfs_remote_set_ops(&ops);
    return 0;
}

void cfs_blocks_set_store(const cfs_block_store *store)
{
    pthread_mutex_lock(&blocks.lock);
    blocks.store = store ? *store : (cfs_block_store){0};
    pthread_mutex_unlock(&blocks.lock);
}
