#include "isolated.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format.h"
#include "spawn.h"
#include "wire.h"
#include "wire_model.h"
#include "wire_remote.h"
#include "remote.h"

/* After this many lost workers a source gets no new one until it changes. */
#define MAX_FAULTS 3
/* A model is metadata: far below a data frame. */
#define MAX_MODEL (UINT32_C(1) << 28)

/* The version of the source a dataset was opened from: a later worker must find the same. */
typedef struct identity {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} identity;

/* What the dataset's reader is: the worker serving its arrays, shared by their proxies. */
typedef struct handle {
    pthread_mutex_t lock;       /* one request at a time on the worker's socket */
    int refs;                   /* the dataset and each proxy */
    char *path, *part, *exe;    /* part: NULL for the whole input */
    double open_timeout, read_timeout;
    uint64_t memory;
    cfs_worker_proc w;
    bool alive;                 /* it has a worker, counted in the pool (under lock and the pool's) */
    bool kept;                  /* its worker is not handed on (under the pool's lock) */
    struct proxy *holding;      /* proxies still holding values sent with the model (lock) */
    struct handle *newer, *older;   /* the pool's order of use, while alive */
    identity version;
    bool changed;               /* a later worker found another file: not read again */
    uint64_t digest;            /* of the model its first worker sent: a replacement's must match */
    uint32_t narrays;
    bool *poisoned;             /* arrays whose read lost a worker: not read again */
    bool given_up;
    /* Apart from the request lock: status.json asks for the fault while a read may be running. */
    pthread_mutex_t fault_lock;
    cfs_reader_fault fault;
    cfs_reader_stats stats;     /* atomics: what was asked of the workers */
} handle;

typedef struct proxy {
    handle *h;
    uint32_t id;
    char *path;
    unsigned char *values;      /* sent with the model, until a read took them all */
    struct proxy *next_holding, *prev_holding;  /* in h->holding while values are held */
} proxy;

/* The live workers of this process, most recently used first. A handle's lock is taken before
 * the pool's; the pool takes another handle's lock only by trylock, to end its idle worker. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t idle;        /* a request ended: a worker may be free to end */
    unsigned waiting;
    handle *newest, *oldest;
    unsigned live, limit;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, NULL, NULL, 0,
          CFS_ISOLATE_READERS};

/* Under the pool's lock. */
static void pool_unlink(handle *h)
{
    *(h->newer ? &h->newer->older : &pool.newest) = h->older;
    *(h->older ? &h->older->newer : &pool.oldest) = h->newer;
    h->newer = h->older = NULL;
}

static void pool_link_newest(handle *h)
{
    h->older = pool.newest;
    *(pool.newest ? &pool.newest->newer : &pool.oldest) = h;
    pool.newest = h;
}

/* Under h's lock: its worker is gone (or never came); its place in the pool is free. */
static void end_worker(handle *h, char *how, size_t len)
{
    cfs_worker_end(&h->w, how, len);
    pthread_mutex_lock(&pool.lock);
    if (h->alive) {
        h->alive = false;
        pool_unlink(h);
        pool.live--;
        pthread_cond_broadcast(&pool.idle);
    }
    pthread_mutex_unlock(&pool.lock);
}

/* Under the pool's lock: the least recently used idle worker (not h's, nor one kept by its
 * source) with its lock taken, or NULL if every live worker is serving a request or kept. */
static handle *idle_worker(const handle *h)
{
    handle *victim = pool.oldest;
    while (victim && (victim == h || victim->kept || pthread_mutex_trylock(&victim->lock) != 0))
        victim = victim->newer;
    return victim;
}

/* Under h's lock, h without a worker: a place in the pool, and the process of the least
 * recently used idle worker when the pool is full (its source gets another at its next read);
 * waited for while every worker is serving. True when h was handed a process; false when it
 * must start one. */
static bool pool_enter(handle *h)
{
    bool handed = false;
    pthread_mutex_lock(&pool.lock);
    while (pool.live >= pool.limit && !handed) {
        handle *victim = idle_worker(h);
        if (!victim) {
            pool.waiting++;
            pthread_cond_wait(&pool.idle, &pool.lock);
            pool.waiting--;
            continue;
        }
        pool_unlink(victim);
        victim->alive = false;
        if (victim->w.owner == getpid()) {
            h->w = victim->w;
            handed = true;
        } else {
            cfs_worker_end(&victim->w, NULL, 0);   /* the parent's, before the daemon forked */
            pool.live--;
        }
        victim->w = (cfs_worker_proc){0, -1, 0};
        pthread_mutex_unlock(&victim->lock);
    }
    if (!handed)
        pool.live++;
    pool_link_newest(h);
    h->alive = true;
    pthread_mutex_unlock(&pool.lock);
    return handed;
}

/* After a request on h (its lock let go): h is the most recently used, and its worker may be
 * the one a waiting open can end. */
static void pool_used(handle *h)
{
    pthread_mutex_lock(&pool.lock);
    if (h->alive && pool.newest != h) {
        pool_unlink(h);
        pool_link_newest(h);
    }
    if (pool.waiting)
        pthread_cond_broadcast(&pool.idle);
    pthread_mutex_unlock(&pool.lock);
}

static uint64_t digest_of(const unsigned char *p, size_t n)
{
    uint64_t h = UINT64_C(1469598103934665603);
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * UINT64_C(1099511628211);
    return h;
}

static void handle_unref(void *reader)
{
    handle *h = reader;
    if (!h || __atomic_sub_fetch(&h->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    pthread_mutex_lock(&h->lock);       /* the pool may be ending its worker */
    end_worker(h, NULL, 0);
    pthread_mutex_unlock(&h->lock);
    pthread_mutex_destroy(&h->lock);
    pthread_mutex_destroy(&h->fault_lock);
    free(h->poisoned);
    free(h->path);
    free(h->part);
    free(h->exe);
    free(h);
}

static handle *handle_new(const char *path, const char *part, const cfs_isolation *iso)
{
    handle *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    pthread_mutex_init(&h->lock, NULL);
    pthread_mutex_init(&h->fault_lock, NULL);
    h->refs = 1;
    h->w.fd = -1;
    h->path = strdup(path);
    h->part = part ? strdup(part) : NULL;
    h->exe = strdup(iso->exe ? iso->exe : "/proc/self/exe");
    h->open_timeout = iso->open_timeout > 0 ? iso->open_timeout : CFS_ISOLATE_OPEN_TIMEOUT;
    h->read_timeout = iso->read_timeout > 0 ? iso->read_timeout : CFS_ISOLATE_READ_TIMEOUT;
    h->memory = iso->memory;
    if (!h->path || !h->exe || (part && !h->part)) {
        handle_unref(h);
        return NULL;
    }
    return h;
}

/* Under the lock: the worker is gone or broke the protocol. It is ended and the fault kept;
 * err says what the request that met it is told. Returns -1. */
static int lose_worker(handle *h, const char *operation, const char *element, bool timed_out,
                       const char *why, cfs_err *err)
{
    char how[64];
    end_worker(h, how, sizeof how);
    char what[160];
    if (timed_out)
        snprintf(what, sizeof what, "ran past its time limit of %g s (killed)",
                 strcmp(operation, "open") == 0 ? h->open_timeout : h->read_timeout);
    else
        snprintf(what, sizeof what, "%s%s", how[0] ? "was " : "", how[0] ? how : why);
    pthread_mutex_lock(&h->fault_lock);
    if (!h->fault.happened) {
        h->fault.happened = true;
        snprintf(h->fault.what, sizeof h->fault.what, "%s", what);
        const char *sig = strstr(how, "SIG");
        snprintf(h->fault.signal, sizeof h->fault.signal, "%s", sig ? sig : "");
        snprintf(h->fault.operation, sizeof h->fault.operation, "%s", operation);
        snprintf(h->fault.element, sizeof h->fault.element, "%s", element ? element : "");
    }
    if (++h->fault.count >= MAX_FAULTS)
        h->given_up = true;
    pthread_mutex_unlock(&h->fault_lock);
    if (element)
        return cfs_err_setc(err, CFS_EDAMAGED, "its reader %s reading %s: the file is damaged; "
                            "re-download or re-write it", what, element);
    return cfs_err_setc(err, CFS_EDAMAGED, "its reader %s while opening it: the file is "
                        "damaged; re-download or re-write it", what);
}

/* What a lost worker did when it did not die of itself: ran out of memory, or err's reason. */
static void describe_loss(const handle *h, bool out_of_memory, const cfs_err *err, char *why,
                          size_t len)
{
    if (out_of_memory)
        snprintf(why, len, "ran out of its memory limit of %llu MiB (killed)",
                 (unsigned long long)(h->memory >> 20));
    else
        snprintf(why, len, "broke off (%.900s)", err->msg);
}

/* A reply's status and, when not CFS_OK, its reason into err (the rest of a short frame). */
static int read_status(handle *h, uint32_t len, int64_t deadline, bool *timed_out,
                       cfs_status *status, cfs_err *err)
{
    unsigned char head[4];
    if (len < 4 || cfs_wire_recv_exact(h->w.fd, head, 4, deadline, timed_out, err) < 0)
        return len < 4 ? cfs_err_setc(err, CFS_EIO, "a reply without a status") : -1;
    cfs_wire_cursor c = {head, 4, false};
    uint32_t s = cfs_wire_get_u32(&c);
    *status = s <= CFS_ENEVERFITS ? (cfs_status)s : CFS_EFAIL;
    if (s == CFS_OK)
        return 0;
    unsigned char msg[CFS_WIRE_MAX_CONTROL];
    if (len - 4 > sizeof msg)
        return cfs_err_setc(err, CFS_EIO, "an error reply over the limit");
    if (cfs_wire_recv_exact(h->w.fd, msg, len - 4, deadline, timed_out, err) < 0)
        return -1;
    cfs_wire_cursor m = {msg, len - 4, false};
    char *text = cfs_wire_get_str(&m, CFS_WIRE_MAX_CONTROL);
    if (!text || m.left) {
        free(text);
        return cfs_err_setc(err, CFS_EIO, "a malformed error reply");
    }
    cfs_err_setc(err, *status, "%s", text);
    free(text);
    return 0;
}

/* Receives the header of the reply to a request, answering the worker's URL reads on the way
 * (wire_remote.h): the time they take is the daemon's, not the worker's, so the deadline moves
 * on by it. */
static int recv_reply_header(handle *h, uint8_t *type, uint32_t *len, uint32_t max,
                             int64_t *deadline, bool *timed_out, cfs_err *err)
{
    for (;;) {
        if (cfs_wire_recv_header(h->w.fd, type, len, max, *deadline, timed_out, err) < 0)
            return -1;
        if (!cfs_wire_remote_is_request(*type))
            return 0;
        int64_t asked = cfs_wire_deadline(1);
        double limit = h->read_timeout > 0 ? h->read_timeout : 60;
        if (cfs_wire_remote_answer(h->w.fd, *type, *len, h->path, cfs_wire_deadline(limit),
                                   timed_out, err) < 0)
            return -1;
        if (*deadline >= 0)
            *deadline += cfs_wire_deadline(1) - asked;
    }
}

/* Under the lock: a worker (one handed over by the pool, or a new one) opens the source; model
 * receives its model. 0; -1 when the source is refused (err); -2 when the worker was lost
 * (fault kept). */
static int start_worker(handle *h, cfs_buf *model, cfs_err *err)
{
    bool handed = pool_enter(h);
    if (!handed && cfs_worker_spawn(h->exe, h->memory, &h->w, err) < 0) {
        end_worker(h, NULL, 0);
        return -1;
    }
    int64_t deadline = cfs_wire_deadline(h->open_timeout);
    __atomic_add_fetch(&h->stats.opens, 1, __ATOMIC_RELAXED);
    cfs_buf req = {0};
    bool timed_out = false;
    uint8_t type = 0;
    uint32_t len = 0;
    cfs_status status = CFS_OK;
    if (cfs_wire_put_str(&req, h->path) < 0 ||
        (h->part && cfs_wire_put_str(&req, h->part) < 0)) {
        cfs_buf_free(&req);
        end_worker(h, NULL, 0);
        return cfs_err_oom(err);
    }
    int rc = cfs_wire_send(h->w.fd, CFS_WIRE_OPEN, req.data, req.len, deadline, err);
    if (rc < 0 && handed) {
        /* A worker handed over idle was gone before it heard of this source (killed from
         * outside): this source is not to blame; a new worker is asked instead. */
        cfs_worker_end(&h->w, NULL, 0);
        rc = cfs_worker_spawn(h->exe, h->memory, &h->w, err) < 0 ? -3
             : cfs_wire_send(h->w.fd, CFS_WIRE_OPEN, req.data, req.len, deadline, err);
        if (rc == -3) {
            cfs_buf_free(&req);
            end_worker(h, NULL, 0);
            return -1;
        }
    }
    cfs_buf_free(&req);
    if (rc == 0)
        rc = recv_reply_header(h, &type, &len, MAX_MODEL, &deadline, &timed_out, err);
    if (rc == 0 && type != CFS_WIRE_MODEL)
        rc = cfs_err_setc(err, CFS_EIO, "a reply of the wrong type");
    if (rc == 0)
        rc = read_status(h, len, deadline, &timed_out, &status, err);
    if (rc == 0 && status == CFS_OK && cfs_buf_reserve(model, len - 4) < 0) {
        end_worker(h, NULL, 0);
        return cfs_err_oom(err);
    }
    if (rc == 0 && status == CFS_OK)
        rc = cfs_wire_recv_exact(h->w.fd, model->data, len - 4, deadline, &timed_out, err);
    if (rc < 0 || status == CFS_ENOMEM) {
        char why[sizeof err->msg];
        describe_loss(h, status == CFS_ENOMEM, err, why, sizeof why);
        lose_worker(h, "open", NULL, timed_out, why, err);
        return -2;
    }
    if (status != CFS_OK) {
        end_worker(h, NULL, 0);            /* refused: nothing to serve */
        return -1;
    }
    model->len = len - 4;
    return 0;
}

static int version_of(const char *path, identity *out)
{
    struct stat st;
    if (cfs_source_stat(path, &st) < 0)
        return -1;
    *out = (identity){st.st_dev, st.st_ino, st.st_size, st.st_mtim};
    return 0;
}

static bool same_version(const identity *a, const identity *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* Under the lock: whether path is still the version the dataset was opened from. */
static bool still_the_version(const handle *h)
{
    identity now;
    return version_of(h->path, &now) == 0 && same_version(&now, &h->version);
}

/* Under the lock: the file is another one now; it is not read again (the caller lays the new
 * one out afresh when it notices, src/volume/watch.c). */
static int changed(handle *h, cfs_err *err)
{
    h->changed = true;
    return cfs_err_setc(err, CFS_EIO, "the file changed or was removed since it was opened; "
                        "its new version is served once it is laid out again");
}

/* Under the lock: a worker that serves this process, started again if it was lost or ended to
 * make room, on the version of the file the dataset was opened from. */
static int ensure_worker(handle *h, cfs_err *err)
{
    if (h->alive && h->w.owner != getpid())
        end_worker(h, NULL, 0);             /* the parent's, before the daemon forked */
    if (h->alive)
        return 0;
    if (h->given_up)
        return cfs_err_setc(err, CFS_EDAMAGED, "its reader %s %s%s earlier: the file is "
                            "damaged; re-download or re-write it", h->fault.what,
                            h->fault.element[0] ? "reading " : "while opening it",
                            h->fault.element);
    if (h->changed || !still_the_version(h))
        return changed(h, err);
    cfs_buf model = {0};
    int rc = start_worker(h, &model, err);
    if (rc == 0 && (digest_of(model.data, model.len) != h->digest || !still_the_version(h))) {
        end_worker(h, NULL, 0);
        rc = changed(h, err);
    }
    cfs_buf_free(&model);
    return rc < 0 ? -1 : 0;
}

typedef enum read_mode { NUMERIC, STRINGS_OWN, STRINGS_POOL } read_mode;

/* The strings of a reply: u32 length + bytes each, exactly n of them filling the payload. */
static int decode_strings(const unsigned char *p, size_t len, size_t n, read_mode mode,
                          void *out, cfs_strpool *pool, cfs_err *err)
{
    cfs_wire_cursor c = {p, len, false};
    char **own = out;
    const char **pooled = out;
    for (size_t i = 0; i < n; i++) {
        uint32_t sl = cfs_wire_get_u32(&c);
        const unsigned char *s = sl < CFS_WIRE_MAX_STRING ? cfs_wire_get_bytes(&c, sl) : NULL;
        char *copy = !s ? NULL
                     : mode == STRINGS_OWN ? strndup((const char *)s, sl)
                                           : cfs_strpool_dup(pool, (const char *)s, sl);
        if (!copy) {
            if (mode == STRINGS_OWN)
                cfs_strings_free(own, i);
            return s ? cfs_err_oom(err) : cfs_err_setc(err, CFS_EIO, "malformed strings");
        }
        if (mode == STRINGS_OWN)
            own[i] = copy;
        else
            pooled[i] = copy;
    }
    if (c.left) {
        if (mode == STRINGS_OWN)
            cfs_strings_free(own, n);
        return cfs_err_setc(err, CFS_EIO, "bytes after the strings");
    }
    return 0;
}

/* Under the lock, with a live worker: sends one request of type (its payload in req) and
 * receives its n values. 0; -1 with err from the reader (the worker lives on); -2 when the
 * worker must be lost (*timed_out says whether by its deadline). */
static int exchange(handle *h, cfs_wire_type type, const cfs_buf *req, const cfs_array *arr,
                    uint64_t n, read_mode mode, void *out, cfs_strpool *pool, bool *timed_out,
                    cfs_err *err)
{
    int64_t deadline = cfs_wire_deadline(h->read_timeout);
    int rc = cfs_wire_send(h->w.fd, type, req->data, req->len, deadline, err);
    uint8_t rtype = 0;
    uint32_t len = 0;
    cfs_status status = CFS_OK;
    if (rc == 0)
        rc = recv_reply_header(h, &rtype, &len, CFS_WIRE_MAX_FRAME - 1, &deadline, timed_out,
                               err);
    if (rc == 0 && rtype != CFS_WIRE_DATA)
        rc = cfs_err_setc(err, CFS_EIO, "a reply of the wrong type");
    if (rc == 0)
        rc = read_status(h, len, deadline, timed_out, &status, err);
    if (rc < 0 || status == CFS_ENOMEM)
        return -2;
    if (status != CFS_OK)
        return -1;
    size_t payload = len - 4;
    if (mode == NUMERIC) {
        uint64_t expected = n * cfs_array_elem_size(arr);
        if (payload != expected)
            return cfs_err_setc(err, CFS_EIO, "a reply of %zu bytes for %llu expected", payload,
                                (unsigned long long)expected), -2;
        return cfs_wire_recv_exact(h->w.fd, out, payload, deadline, timed_out, err) < 0 ? -2 : 0;
    }
    if (payload / 4 < n)
        return cfs_err_setc(err, CFS_EIO, "fewer strings than asked for"), -2;
    unsigned char *bytes = malloc(payload ? payload : 1);
    if (!bytes)
        return cfs_err_oom(err), -2;     /* the rest of the reply cannot be skipped */
    rc = cfs_wire_recv_exact(h->w.fd, bytes, payload, deadline, timed_out, err) < 0 ? -2
         : decode_strings(bytes, payload, (size_t)n, mode, out, pool, err) < 0      ? -2
                                                                                     : 0;
    free(bytes);
    return rc;
}

static void count_request(handle *h, uint64_t rows)
{
    __atomic_add_fetch(&h->stats.requests, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&h->stats.rows, rows, __ATOMIC_RELAXED);
}

/* Under the lock, with a live worker: one read of a slab. */
static int request(handle *h, const proxy *px, const cfs_array *arr, const uint64_t *start,
                   const uint64_t *count, read_mode mode, void *out, cfs_strpool *pool,
                   bool *timed_out, cfs_err *err)
{
    cfs_buf req = {0};
    int rc = cfs_wire_put_u32(&req, px->id) | cfs_wire_put_u8(&req, (uint8_t)arr->ndim);
    uint64_t n = 1;
    for (int d = 0; d < arr->ndim; d++) {
        rc |= cfs_wire_put_u64(&req, start[d]) | cfs_wire_put_u64(&req, count[d]);
        n *= count[d];
    }
    count_request(h, arr->ndim ? count[0] : 1);
    rc = rc < 0 ? cfs_err_oom(err)
                : exchange(h, CFS_WIRE_READ, &req, arr, n, mode, out, pool, timed_out, err);
    cfs_buf_free(&req);
    return rc;
}

/* Under the lock, with a live worker: one read of whole rows (at most CFS_WIRE_MAX_ROWS). */
static int request_rows(handle *h, const proxy *px, const cfs_array *arr, const uint64_t *rows,
                        uint64_t n, read_mode mode, void *out, cfs_strpool *pool,
                        bool *timed_out, cfs_err *err)
{
    cfs_buf req = {0};
    int rc = cfs_wire_put_u32(&req, px->id) | cfs_wire_put_u64(&req, n);
    for (uint64_t i = 0; i < n; i++)
        rc |= cfs_wire_put_u64(&req, rows[i]);
    count_request(h, n);
    rc = rc < 0 ? cfs_err_oom(err)
                : exchange(h, CFS_WIRE_READ_ROWS, &req, arr, n * cfs_array_row_elems(arr),
                           mode, out, pool, timed_out, err);
    cfs_buf_free(&req);
    return rc;
}

/* What one proxy call asks for: a slab, or whole rows. */
typedef struct ask {
    const uint64_t *start, *count;      /* a slab */
    const uint64_t *rows;               /* or these rows (rows != NULL) */
    uint64_t nrows;
} ask;

/* Under h's lock (or before the dataset is handed out). */
static void drop_values(proxy *px)
{
    if (!px->values)
        return;
    free(px->values);
    px->values = NULL;
    *(px->prev_holding ? &px->prev_holding->next_holding : &px->h->holding) = px->next_holding;
    if (px->next_holding)
        px->next_holding->prev_holding = px->prev_holding;
    px->next_holding = px->prev_holding = NULL;
}

/* Under the lock: serves q from the values sent with the model, if it has them and q lies
 * within them (1 or 2 dimensions); they go once a read took all of them, as naming's embedding
 * check does (wire_model.h). */
static bool read_kept(proxy *px, const cfs_array *arr, const ask *q, void *out)
{
    if (!px->values)
        return false;
    uint64_t rows = arr->shape[0], cols = arr->ndim == 2 ? arr->shape[1] : 1;
    size_t esize = cfs_array_elem_size(arr), row_bytes = (size_t)cols * esize;
    unsigned char *dst = out;
    bool whole;
    if (q->rows) {
        for (uint64_t i = 0; i < q->nrows; i++)
            if (q->rows[i] >= rows)
                return false;
        for (uint64_t i = 0; i < q->nrows; i++)
            memcpy(dst + i * row_bytes, px->values + q->rows[i] * row_bytes, row_bytes);
        whole = q->nrows == rows;
    } else {
        uint64_t r0 = q->start[0], nr = q->count[0];
        uint64_t c0 = arr->ndim == 2 ? q->start[1] : 0, nc = arr->ndim == 2 ? q->count[1] : 1;
        if (r0 > rows || nr > rows - r0 || c0 > cols || nc > cols - c0)
            return false;
        for (uint64_t r = 0; r < nr; r++)
            memcpy(dst + r * nc * esize, px->values + ((r0 + r) * cols + c0) * esize,
                   (size_t)nc * esize);
        whole = nr == rows && nc == cols;
    }
    if (whole)
        drop_values(px);
    return true;
}

static int proxy_read_as(const cfs_array *arr, const ask *q, read_mode mode, void *out,
                         cfs_strpool *pool, cfs_err *err)
{
    proxy *px = arr->ctx;
    handle *h = px->h;
    pthread_mutex_lock(&h->lock);
    if (mode == NUMERIC && read_kept(px, arr, q, out)) {
        pthread_mutex_unlock(&h->lock);
        return 0;               /* no worker asked */
    }
    int rc;
    if (h->poisoned[px->id])
        rc = cfs_err_setc(err, CFS_EDAMAGED, "its reader %s reading %s earlier: the file is "
                          "damaged; re-download or re-write it", h->fault.what, px->path);
    else
        rc = ensure_worker(h, err);
    /* A read needs its worker only while it runs: the pool may end it between reads. */
    bool timed_out = false;
    if (rc == 0 && !q->rows)
        rc = request(h, px, arr, q->start, q->count, mode, out, pool, &timed_out, err);
    else if (rc == 0)
        rc = request_rows(h, px, arr, q->rows, q->nrows, mode, out, pool, &timed_out, err);
    if (rc == -2) {
        char why[sizeof err->msg];
        describe_loss(h, err->status == CFS_ENOMEM, err, why, sizeof why);
        h->poisoned[px->id] = true;
        rc = lose_worker(h, "read", px->path, timed_out, why, err);
    }
    pthread_mutex_unlock(&h->lock);
    pool_used(h);
    return rc;
}

static int proxy_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                      void *out, cfs_err *err)
{
    ask q = {start, count, NULL, 0};
    return proxy_read_as(arr, &q, arr->dtype == CFS_STRING ? STRINGS_OWN : NUMERIC, out, NULL,
                         err);
}

static int proxy_read_strings(const cfs_array *arr, const uint64_t *start,
                              const uint64_t *count, const char **out, cfs_strpool *pool,
                              cfs_err *err)
{
    ask q = {start, count, NULL, 0};
    return proxy_read_as(arr, &q, STRINGS_POOL, out, pool, err);
}

/* Rows in requests of at most CFS_WIRE_MAX_ROWS rows and a reply frame's worth of values. */
static int proxy_read_rows(const cfs_array *arr, const uint64_t *rows, uint64_t n, void *out,
                           cfs_strpool *pool, cfs_err *err)
{
    size_t row_bytes = (size_t)cfs_array_row_elems(arr) * cfs_array_elem_size(arr);
    uint64_t per = (CFS_WIRE_MAX_FRAME / 2) / (row_bytes ? row_bytes : 1);
    if (per > CFS_WIRE_MAX_ROWS)
        per = CFS_WIRE_MAX_ROWS;
    if (per == 0)
        return cfs_array_read_rows_by_blocks(arr, rows, n, out, pool, err);
    read_mode mode = arr->dtype == CFS_STRING ? STRINGS_POOL : NUMERIC;
    for (uint64_t i = 0; i < n; i += per) {
        ask q = {NULL, NULL, rows + i, n - i < per ? n - i : per};
        if (proxy_read_as(arr, &q, mode, (char *)out + i * row_bytes, pool, err) < 0)
            return -1;
    }
    return 0;
}

static void proxy_free(void *ctx)
{
    proxy *px = ctx;
    if (!px)
        return;
    pthread_mutex_lock(&px->h->lock);
    drop_values(px);
    pthread_mutex_unlock(&px->h->lock);
    handle_unref(px->h);
    free(px->path);
    free(px);
}

static const cfs_array_ops proxy_ops = {proxy_read, proxy_free, proxy_read_strings,
                                        proxy_read_rows, NULL};

static void *make_proxy(void *maker, uint32_t id, const char *path)
{
    handle *h = maker;
    proxy *px = calloc(1, sizeof *px);
    if (!px || !(px->path = strdup(path))) {
        free(px);
        return NULL;
    }
    px->h = h;
    px->id = id;
    __atomic_add_fetch(&h->refs, 1, __ATOMIC_RELAXED);
    return px;
}

static int keep_values(void *ctx, const void *values, size_t len)
{
    proxy *px = ctx;
    drop_values(px);
    if (!(px->values = malloc(len ? len : 1)))
        return -1;
    memcpy(px->values, values, len);
    px->next_holding = px->h->holding;
    if (px->h->holding)
        px->h->holding->prev_holding = px;
    px->h->holding = px;
    return 0;
}

static int open_isolated(const char *path, const char *part, const cfs_isolation *iso,
                         cfs_dataset **out, cfs_reader_fault *fault, cfs_err *err)
{
    handle *h = handle_new(path, part, iso);
    if (!h)
        return cfs_err_oom(err);
    if (version_of(path, &h->version) < 0) {
        handle_unref(h);
        return cfs_err_errno(err, errno, "%s", path);
    }
    cfs_buf model = {0};
    pthread_mutex_lock(&h->lock);
    h->kept = iso->keep_worker;         /* before pool_enter links it: never handed on */
    int rc = start_worker(h, &model, err);
    if (rc == -2 && fault)
        *fault = h->fault;
    pthread_mutex_unlock(&h->lock);
    pool_used(h);
    cfs_dataset *ds = NULL;
    if (rc == 0) {
        h->digest = digest_of(model.data, model.len);
        cfs_wire_proxy maker = {&proxy_ops, make_proxy, h, keep_values};
        ds = cfs_wire_model_decode(model.data, model.len, path, &maker, &h->narrays, err);
    }
    cfs_buf_free(&model);
    if (ds && !(h->poisoned = calloc(h->narrays + 1, sizeof *h->poisoned))) {
        cfs_dataset_free(ds);
        ds = NULL;
        cfs_err_oom(err);
    }
    if (!ds) {
        handle_unref(h);
        return -1;
    }
    ds->reader = h;
    ds->reader_free = handle_unref;
    *out = ds;
    return 0;
}

int cfs_isolated_open(const char *path, const cfs_isolation *iso, cfs_dataset **out,
                      cfs_reader_fault *fault, cfs_err *err)
{
    return cfs_isolated_open_part(path, NULL, iso, out, fault, err);
}

int cfs_isolated_open_part(const char *path, const char *part, const cfs_isolation *iso,
                           cfs_dataset **out, cfs_reader_fault *fault, cfs_err *err)
{
    if (fault)
        memset(fault, 0, sizeof *fault);
    if (iso->off)
        return cfs_format_open_part(path, part, out, err);
    pthread_mutex_lock(&pool.lock);
    pool.limit = iso->readers ? iso->readers : CFS_ISOLATE_READERS;
    pthread_mutex_unlock(&pool.lock);
    return open_isolated(path, part, iso, out, fault, err);
}

bool cfs_isolated_stats(const cfs_dataset *ds, cfs_reader_stats *stats)
{
    if (!ds || ds->reader_free != handle_unref)
        return false;
    handle *h = ds->reader;
    stats->requests = __atomic_load_n(&h->stats.requests, __ATOMIC_RELAXED);
    stats->rows = __atomic_load_n(&h->stats.rows, __ATOMIC_RELAXED);
    stats->opens = __atomic_load_n(&h->stats.opens, __ATOMIC_RELAXED);
    return true;
}

void cfs_isolated_let_go(const cfs_dataset *ds)
{
    if (!ds || ds->reader_free != handle_unref)
        return;
    handle *h = ds->reader;
    pthread_mutex_lock(&pool.lock);
    if (h->kept && pool.waiting)
        pthread_cond_broadcast(&pool.idle);
    h->kept = false;
    pthread_mutex_unlock(&pool.lock);
    /* The values sent with the model were for those reads: not held for a later one. */
    pthread_mutex_lock(&h->lock);
    while (h->holding)
        drop_values(h->holding);
    pthread_mutex_unlock(&h->lock);
}

unsigned cfs_isolated_workers(void)
{
    pthread_mutex_lock(&pool.lock);
    unsigned live = pool.live;
    pthread_mutex_unlock(&pool.lock);
    return live;
}

bool cfs_isolated_fault(const cfs_dataset *ds, cfs_reader_fault *fault)
{
    if (!ds || ds->reader_free != handle_unref)
        return false;
    handle *h = ds->reader;
    pthread_mutex_lock(&h->fault_lock);
    *fault = h->fault;
    pthread_mutex_unlock(&h->fault_lock);
    return fault->happened;
}
