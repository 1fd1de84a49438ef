#include "detect.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format.h"
#include "spawn.h"
#include "strset.h"
#include "wire.h"

/* A reply: a format name (u32 length and at most 31 bytes) and a byte. */
#define MAX_REPLY 64

/* The answer about one file, and the file it was about. */
typedef struct known {
    char *path;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    cfs_detection found;
    bool asked;             /* since the last scan ended */
} known;

struct cfs_detector {
    pthread_mutex_t lock;   /* one question at a time on the worker's socket */
    cfs_isolation iso;
    cfs_worker_proc w;
    bool alive;
    known *memo;
    size_t nmemo, cap;
    cfs_strset *index;      /* path -> its place in memo (NULL when out of memory: a scan) */
};

cfs_detector *cfs_detector_new(const cfs_isolation *iso)
{
    cfs_detector *d = calloc(1, sizeof *d);
    if (d) {
        pthread_mutex_init(&d->lock, NULL);
        d->iso = *iso;
        d->w.fd = -1;
        d->index = cfs_strset_new(16);
    }
    return d;
}

void cfs_detector_free(cfs_detector *d)
{
    if (!d)
        return;
    if (d->alive)
        cfs_worker_end(&d->w, NULL, 0);
    for (size_t i = 0; i < d->nmemo; i++)
        free(d->memo[i].path);
    free(d->memo);
    cfs_strset_free(d->index);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

static void detect_here(const char *path, cfs_detection *out)
{
    cfs_err ignored;
    const char *codec = NULL;
    const cfs_format *f = cfs_format_detect(path, &ignored);
    if (f)
        snprintf(out->format, sizeof out->format, "%s", f->name);
    else
        out->compressed = cfs_format_needs_unpack(path, &codec);
}

static int decode_reply(const unsigned char *p, uint32_t len, cfs_detection *out, cfs_err *err)
{
    cfs_wire_cursor c = {p, len, false};
    char *name = NULL;
    bool ok = cfs_wire_get_optstr(&c, sizeof out->format - 1, &name);
    uint8_t compressed = cfs_wire_get_u8(&c);
    ok = ok && !c.bad && !c.left && compressed <= 1;
    if (ok) {
        snprintf(out->format, sizeof out->format, "%s", name ? name : "");
        out->compressed = compressed;
    }
    free(name);
    return ok ? 0 : cfs_err_setc(err, CFS_EIO, "a malformed detection reply");
}

/* Under the lock: a worker of this process (one started before the daemon forked is let go). */
static int ensure_worker(cfs_detector *d, cfs_err *err)
{
    if (d->alive && d->w.owner != getpid()) {
        cfs_worker_end(&d->w, NULL, 0);
        d->alive = false;
    }
    if (d->alive)
        return 0;
    if (cfs_worker_spawn(d->iso.exe ? d->iso.exe : "/proc/self/exe", d->iso.memory, &d->w,
                         err) < 0)
        return -1;
    d->alive = true;
    return 0;
}

/* Under the lock. */
static int ask_worker(cfs_detector *d, const char *path, cfs_detection *out, cfs_err *err)
{
    if (ensure_worker(d, err) < 0)
        return -1;
    double limit = d->iso.open_timeout > 0 ? d->iso.open_timeout : CFS_ISOLATE_OPEN_TIMEOUT;
    int64_t deadline = cfs_wire_deadline(limit);
    cfs_buf req = {0};
    int rc = cfs_wire_put_str(&req, path) < 0
                 ? cfs_err_oom(err)
                 : cfs_wire_send(d->w.fd, CFS_WIRE_DETECT, req.data, req.len, deadline, err);
    cfs_buf_free(&req);
    uint8_t type = 0;
    uint32_t len = 0;
    bool timed_out = false;
    unsigned char reply[MAX_REPLY];
    if (rc == 0)
        rc = cfs_wire_recv_header(d->w.fd, &type, &len, sizeof reply, deadline, &timed_out, err);
    if (rc == 0 && type != CFS_WIRE_DETECTED)
        rc = cfs_err_setc(err, CFS_EIO, "a reply of the wrong type");
    if (rc == 0)
        rc = cfs_wire_recv_exact(d->w.fd, reply, len, deadline, &timed_out, err);
    return rc == 0 ? decode_reply(reply, len, out, err) : -1;
}

/* Under the lock. */
static void detect(cfs_detector *d, const char *path, cfs_detection *out)
{
    memset(out, 0, sizeof *out);
    if (d->iso.off) {
        detect_here(path, out);
        return;
    }
    cfs_err err;
    if (ask_worker(d, path, out, &err) == 0)
        return;
    memset(out, 0, sizeof *out);
    out->lost = true;
    if (d->alive)
        cfs_worker_end(&d->w, NULL, 0);
    d->alive = false;
}

static bool same_file(const known *k, const struct stat *st)
{
    return k->dev == st->st_dev && k->ino == st->st_ino && k->size == st->st_size &&
           k->mtime.tv_sec == st->st_mtim.tv_sec && k->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* Under the lock: the answer kept for path, NULL if none. */
static known *find(cfs_detector *d, const char *path)
{
    if (d->index) {
        uint64_t *at = cfs_strset_get(d->index, path);
        return at ? &d->memo[*at] : NULL;
    }
    for (size_t i = 0; i < d->nmemo; i++)
        if (strcmp(d->memo[i].path, path) == 0)
            return &d->memo[i];
    return NULL;
}

/* Under the lock: the index of memo made again (after memo was compacted). */
static void reindex(cfs_detector *d)
{
    cfs_strset_free(d->index);
    d->index = cfs_strset_new(d->nmemo);
    for (size_t i = 0; d->index && i < d->nmemo; i++)
        if (cfs_strset_add(d->index, d->memo[i].path, i) < 0) {
            cfs_strset_free(d->index);
            d->index = NULL;
        }
}

/* Under the lock: keeps found for the file path is now (st); nothing when out of memory. */
static void remember(cfs_detector *d, const char *path, const struct stat *st,
                     const cfs_detection *found)
{
    known *k = find(d, path);
    if (!k) {
        if (d->nmemo == d->cap) {
            size_t cap = d->cap ? 2 * d->cap : 16;
            known *grown = realloc(d->memo, cap * sizeof *grown);
            if (!grown)
                return;
            d->memo = grown;
            d->cap = cap;
        }
        char *copy = strdup(path);
        if (!copy)
            return;
        k = &d->memo[d->nmemo++];
        k->path = copy;
        if (d->index && cfs_strset_add(d->index, copy, d->nmemo - 1) < 0) {
            cfs_strset_free(d->index);
            d->index = NULL;
        }
    }
    k->dev = st->st_dev;
    k->ino = st->st_ino;
    k->size = st->st_size;
    k->mtime = st->st_mtim;
    k->found = *found;
    k->asked = true;
}

void cfs_detector_ask(cfs_detector *d, const char *path, cfs_detection *out)
{
    struct stat st;
    bool file = stat(path, &st) == 0 && S_ISREG(st.st_mode);
    pthread_mutex_lock(&d->lock);
    known *k = file ? find(d, path) : NULL;
    if (k && same_file(k, &st)) {
        k->asked = true;
        *out = k->found;
    } else {
        detect(d, path, out);
        if (file)
            remember(d, path, &st, out);
    }
    pthread_mutex_unlock(&d->lock);
}

bool cfs_detector_is_input(cfs_detector *d, const char *path)
{
    cfs_detection found;
    cfs_detector_ask(d, path, &found);
    return found.format[0] || found.compressed || found.lost;
}

void cfs_detector_scan_done(cfs_detector *d)
{
    pthread_mutex_lock(&d->lock);
    if (d->alive)
        cfs_worker_end(&d->w, NULL, 0);
    d->alive = false;
    size_t kept = 0;
    for (size_t i = 0; i < d->nmemo; i++) {
        if (d->memo[i].asked) {
            d->memo[i].asked = false;
            d->memo[kept++] = d->memo[i];
        } else {
            free(d->memo[i].path);
        }
    }
    d->nmemo = kept;
    reindex(d);
    pthread_mutex_unlock(&d->lock);
}
