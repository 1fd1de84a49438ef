#include "files.h"

#include <pthread.h>
#include <stdlib.h>

struct cfs_file {
    cfs_file_version v;    /* v.ino 0: a free slot */
    bool loading;
    bool own_copy;         /* no slot was free: this reader's alone, freed at its put */
    /* A reader handed out the last byte. The kernel reads a file's pieces concurrently, so
     * the piece with the last byte is often not the last one put back: the bytes go when
     * the last reader puts its piece back. */
    bool ended;
    unsigned users;
    uint64_t last_use;
    cfs_buf bytes;
};

struct cfs_files {
    pthread_mutex_t lock;
    pthread_cond_t loaded;
    cfs_files_loader load;
    void *ctx;
    uint64_t tick;
    size_t idle_max;       /* bytes idle slots may keep (files not read to their end) */
    size_t n;
    cfs_file slot[];
};

cfs_files *cfs_files_new(size_t slots, size_t idle_max, cfs_files_loader load, void *ctx)
{
    cfs_files *f = calloc(1, sizeof *f + slots * sizeof f->slot[0]);
    if (!f)
        return NULL;
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->loaded, NULL);
    f->load = load;
    f->ctx = ctx;
    f->idle_max = idle_max;
    f->n = slots;
    return f;
}

void cfs_files_free(cfs_files *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++)
        cfs_buf_free(&f->slot[i].bytes);
    pthread_cond_destroy(&f->loaded);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

static bool same_version(const cfs_file_version *a, const cfs_file_version *b)
{
    return a->ino == b->ino && a->size == b->size && a->mtime.tv_sec == b->mtime.tv_sec &&
           a->mtime.tv_nsec == b->mtime.tv_nsec;
}

static cfs_file *find(cfs_files *f, const cfs_file_version *v)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->slot[i].v.ino && same_version(&f->slot[i].v, v))
            return &f->slot[i];
    return NULL;
}

/* A free slot, else the least recently used one nobody holds; NULL if every slot is held. */
static cfs_file *victim(cfs_files *f)
{
    cfs_file *best = NULL;
    for (size_t i = 0; i < f->n; i++) {
        cfs_file *s = &f->slot[i];
        if (!s->v.ino)
            return s;
        if (!s->users && (!best || s->last_use < best->last_use))
            best = s;
    }
    return best;
}

static void forget(cfs_file *s)
{
    cfs_buf_free(&s->bytes);
    s->v.ino = 0;
    s->ended = false;
}

/* Under the lock: the least recently used idle slots go until the idle ones keep at most
 * idle_max bytes. Files read only in part (a client's range request) would otherwise keep
 * their bytes until their slot is needed, and slots of large chunks add up. */
static void trim_idle(cfs_files *f)
{
    for (;;) {
        size_t idle = 0;
        cfs_file *oldest = NULL;
        for (size_t i = 0; i < f->n; i++) {
            cfs_file *s = &f->slot[i];
            if (!s->v.ino || s->users)
                continue;
            idle += s->bytes.cap;
            if (!oldest || s->last_use < oldest->last_use)
                oldest = s;
        }
        if (idle <= f->idle_max || !oldest)
            return;
        forget(oldest);
    }
}

static cfs_file *load_own_copy(cfs_files *f, const cfs_file_version *v, cfs_err *err)
{
    cfs_file *s = calloc(1, sizeof *s);
    if (!s) {
        cfs_err_oom(err);
        return NULL;
    }
    s->own_copy = true;
    if (f->load(f->ctx, v->ino, &s->bytes, err) < 0) {
        cfs_buf_free(&s->bytes);
        free(s);
        return NULL;
    }
    return s;
}

/* Loads into a slot claimed under the lock (loading, held once); called and returns unlocked. */
static cfs_file *load_into(cfs_files *f, cfs_file *s, cfs_err *err)
{
    int rc = f->load(f->ctx, s->v.ino, &s->bytes, err);
    pthread_mutex_lock(&f->lock);
    s->loading = false;
    if (rc < 0) {
        s->users = 0;
        forget(s);
    }
    pthread_cond_broadcast(&f->loaded);
    pthread_mutex_unlock(&f->lock);
    return rc < 0 ? NULL : s;
}

cfs_file *cfs_files_get(cfs_files *f, const cfs_file_version *v, cfs_err *err)
{
    pthread_mutex_lock(&f->lock);
    cfs_file *s;
    while ((s = find(f, v)) && s->loading)
        pthread_cond_wait(&f->loaded, &f->lock);
    if (s) {
        s->users++;
        s->last_use = ++f->tick;
        pthread_mutex_unlock(&f->lock);
        return s;
    }
    s = victim(f);
    if (!s) {
        pthread_mutex_unlock(&f->lock);
        return load_own_copy(f, v, err);
    }
    forget(s);
    s->v = *v;
    s->loading = true;
    s->users = 1;
    s->last_use = ++f->tick;
    pthread_mutex_unlock(&f->lock);
    return load_into(f, s, err);
}

const cfs_buf *cfs_file_bytes(const cfs_file *file)
{
    return &file->bytes;
}

void cfs_files_put(cfs_files *f, cfs_file *file, bool reached_end)
{
    if (file->own_copy) {
        cfs_buf_free(&file->bytes);
        free(file);
        return;
    }
    pthread_mutex_lock(&f->lock);
    file->ended |= reached_end;
    if (--file->users == 0 && file->ended)
        forget(file);
    else if (file->users == 0)
        trim_idle(f);
    pthread_mutex_unlock(&f->lock);
}
