#include "copies.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "remote.h"
#include "strfmt.h"
#include "unpacked.h"

/* Reservations grow in steps while a copy is written, so a decompression that cannot fit stops
 * early instead of filling the disk. */
#define GROW_STEP (UINT64_C(64) << 20)

typedef struct held {
    char *name;             /* file name in dir */
    uint64_t bytes;         /* counted against the cache */
} held;

struct cfs_copies {
    char *dir;
    pthread_mutex_t lock;
    cfs_cache *cache;
    held *held;
    size_t nheld;
    atomic_bool stopping;
};

cfs_copies *cfs_copies_new(const char *dir)
{
    cfs_copies *c = calloc(1, sizeof *c);
    if (!c || !(c->dir = strdup(dir))) {
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

void cfs_copies_free(cfs_copies *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nheld; i++) {
        if (c->cache)
            cfs_cache_release(c->cache, c->held[i].bytes);
        free(c->held[i].name);
    }
    free(c->held);
    pthread_mutex_destroy(&c->lock);
    free(c->dir);
    free(c);
}

void cfs_copies_set_cache(cfs_copies *c, cfs_cache *cache)
{
    pthread_mutex_lock(&c->lock);
    c->cache = cache;
    pthread_mutex_unlock(&c->lock);
}

void cfs_copies_stop(cfs_copies *c)
{
    if (c)
        atomic_store(&c->stopping, true);
}

/* A copy's name: the source's path and version, hashed (FNV-1a), so another version of the
 * source, or another source, never finds this copy. */
static char *copy_name(const char *source, const struct stat *st)
{
    char *id = cfs_strdupf("%s|%llu:%llu:%lld:%lld.%09ld", source, (unsigned long long)st->st_dev,
                           (unsigned long long)st->st_ino, (long long)st->st_size,
                           (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
    if (!id)
        return NULL;
    uint64_t h = UINT64_C(1469598103934665603);
    for (const char *p = id; *p; p++)
        h = (h ^ (unsigned char)*p) * UINT64_C(1099511628211);
    free(id);
    return cfs_strdupf("%016llx.copy", (unsigned long long)h);
}

static held *find_held(cfs_copies *c, const char *name)
{
    for (size_t i = 0; i < c->nheld; i++)
        if (strcmp(c->held[i].name, name) == 0)
            return &c->held[i];
    return NULL;
}

/* Under the lock: counts bytes more for name (held already, or held from now). */
static int hold(cfs_copies *c, const char *name, uint64_t bytes, cfs_err *err)
{
    held *h = find_held(c, name);
    if (!h) {
        held *grown = realloc(c->held, (c->nheld + 1) * sizeof *grown);
        char *copy = strdup(name);
        if (!grown || !copy) {
            free(copy);
            if (grown)
                c->held = grown;
            return cfs_err_oom(err);
        }
        c->held = grown;
        h = &c->held[c->nheld++];
        *h = (held){copy, 0};
    }
    if (bytes && cfs_cache_reserve(c->cache, bytes, err) < 0)
        return -1;
    h->bytes += bytes;
    return 0;
}

/* Under the lock: gives back what name holds and forgets it. */
static void unhold(cfs_copies *c, const char *name)
{
    held *h = find_held(c, name);
    if (!h)
        return;
    if (c->cache)
        cfs_cache_release(c->cache, h->bytes);
    free(h->name);
    *h = c->held[--c->nheld];
}

typedef struct growing {
    cfs_copies *c;
    const char *name;
    uint64_t counted;
    bool no_room;           /* the cache refused more */
} growing;

static int grow(void *ctx, uint64_t written, cfs_err *err)
{
    growing *g = ctx;
    if (atomic_load(&g->c->stopping))
        return cfs_err_setc(err, CFS_ERETRY, "the mount is going away");
    if (written <= g->counted)
        return 0;
    uint64_t more = (written - g->counted + GROW_STEP - 1) / GROW_STEP * GROW_STEP;
    pthread_mutex_lock(&g->c->lock);
    int rc = hold(g->c, g->name, more, err);
    pthread_mutex_unlock(&g->c->lock);
    if (rc < 0) {
        g->no_room = err->status != CFS_ENOMEM;
        return -1;
    }
    g->counted += more;
    return 0;
}

/* Not CFS_ERETRY: that would leave the source waiting for a mount that is up already. */
static int too_big(cfs_err *err, uint64_t bytes)
{
    char why[sizeof err->msg / 2];
    snprintf(why, sizeof why, "%.500s", err->msg);
    return cfs_err_setc(err, err->status == CFS_ENEVERFITS ? CFS_ENEVERFITS : CFS_EFAIL,
                        "its decompressed copy (%.1f MiB so far) does not fit in the cache (%s); "
                        "raise -o cache_size or decompress it beside the source",
                        (double)bytes / (1 << 20), why);
}

/* Writes the copy, counting it as it grows, then exactly. */
static int make_copy(cfs_copies *c, const char *source, const char *codec, const char *name,
                     const char *path, cfs_progress *progress, cfs_err *err)
{
    growing g = {c, name, 0, false};
    int rc = cfs_unpacked_write(source, codec, path, progress, grow, &g, err);
    uint64_t size = 0;
    if (rc == 0 && cfs_unpacked_bytes(path, &size) < 0)
        rc = cfs_err_errno(err, errno, "its decompressed copy %s is gone", path);
    pthread_mutex_lock(&c->lock);
    if (rc == 0 && size > g.counted && (rc = hold(c, name, size - g.counted, err)) < 0)
        g.no_room = err->status != CFS_ENOMEM;
    if (rc == 0 && size < g.counted) {
        held *h = find_held(c, name);
        cfs_cache_release(c->cache, g.counted - size);
        h->bytes = size;
    }
    if (rc < 0) {
        unhold(c, name);
        cfs_unpacked_remove(path);
    }
    pthread_mutex_unlock(&c->lock);
    if (rc < 0 && g.no_room)
        too_big(err, g.counted);
    return rc;
}

int cfs_copies_get(cfs_copies *c, const char *source, const char *codec, cfs_progress *progress,
                   char **path, cfs_err *err)
{
    *path = NULL;
    pthread_mutex_lock(&c->lock);
    bool ready = c->cache != NULL;
    pthread_mutex_unlock(&c->lock);
    if (!ready)
        return cfs_err_setc(err, CFS_ERETRY, "decompressed once the mount is up");
    struct stat src, st;
    if (cfs_source_stat(source, &src) < 0)
        return cfs_err_errno(err, errno, "cannot be read");
    char *name = copy_name(source, &src);
    *path = name ? cfs_strdupf("%s/%s", c->dir, name) : NULL;
    if (!*path) {
        free(name);
        return cfs_err_oom(err);
    }
    int rc;
    uint64_t size;
    if (lstat(*path, &st) == 0 && (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) &&
        cfs_unpacked_bytes(*path, &size) == 0) {
        /* Kept from an earlier mount: counted again, not made again. */
        pthread_mutex_lock(&c->lock);
        rc = find_held(c, name) ? 0 : hold(c, name, size, err);
        pthread_mutex_unlock(&c->lock);
        if (rc < 0)
            too_big(err, size);
    } else {
        rc = make_copy(c, source, codec, name, *path, progress, err);
    }
    free(name);
    /* a URL fetched with the files beside it: its folder, opened at the object's file */
    char *opened = rc == 0 ? cfs_unpacked_opened(source, *path) : NULL;
    if (rc == 0 && !opened)
        rc = cfs_err_oom(err);
    if (rc == 0) {
        free(*path);
        *path = opened;
    }
    if (rc < 0) {
        free(*path);
        *path = NULL;
    }
    return rc;
}

void cfs_copies_retire(cfs_copies *c, const char *source, const struct stat *version)
{
    char *name = copy_name(source, version);
    char *path = name ? cfs_strdupf("%s/%s", c->dir, name) : NULL;
    pthread_mutex_lock(&c->lock);
    if (name && find_held(c, name)) {
        unhold(c, name);
        if (path)
            cfs_unpacked_remove(path);
    }
    pthread_mutex_unlock(&c->lock);
    free(path);
    free(name);
}

void cfs_copies_prune(cfs_copies *c, const cfs_source_list *sources)
{
    char **keep = calloc(sources->n + 1, sizeof *keep);
    for (size_t i = 0; keep && i < sources->n; i++) {
        struct stat st;
        if (cfs_source_stat(sources->paths[i], &st) == 0)
            keep[i] = copy_name(sources->paths[i], &st);
    }
    DIR *d = keep ? opendir(c->dir) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        bool wanted = false;
        for (size_t i = 0; i < sources->n && !wanted; i++)
            wanted = keep[i] && strcmp(keep[i], e->d_name) == 0;
        pthread_mutex_lock(&c->lock);
        bool in_use = find_held(c, e->d_name) != NULL;
        pthread_mutex_unlock(&c->lock);
        if (!wanted && !in_use) {
            char *path = cfs_strdupf("%s/%s", c->dir, e->d_name);
            if (path)
                cfs_unpacked_remove(path);
            free(path);
        }
    }
    if (d)
        closedir(d);
    for (size_t i = 0; keep && i < sources->n; i++)
        free(keep[i]);
    free(keep);
}
