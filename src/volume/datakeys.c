/* An array's data keys in the mounted tree (docs/design.md §4.2, §8): the folders among them
 * and the data key files (chunks, or shards of many), made at their first lookup with their
 * exact size, their bytes made once through the cache from the version their store was opened
 * at. */
#include "volume_impl.h"
#include "remote.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t slot_hash(uint32_t ds, uint32_t node, uint32_t depth, uint64_t chunk)
{
    uint64_t h = ((uint64_t)ds << 40) ^ ((uint64_t)node << 20) ^ ((uint64_t)depth << 52) ^ chunk;
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    return h ^ (h >> 33);
}

static uint64_t map_find(const cfs_volume *v, uint32_t ds, uint32_t node, uint32_t depth,
                         uint64_t chunk)
{
    if (!v->map_cap)
        return 0;
    uint64_t h = slot_hash(ds, node, depth, chunk);
    for (size_t i = h & (v->map_cap - 1);; i = (i + 1) & (v->map_cap - 1)) {
        const chunk_slot *s = &v->map[i];
        if (!s->ino)
            return 0;
        if (s->key == h && s->ds == ds && s->node == node && s->depth == depth &&
            s->chunk == chunk)
            return s->ino;
    }
}

static int map_put(cfs_volume *v, uint32_t ds, uint32_t node, uint32_t depth, uint64_t chunk,
                   uint64_t ino)
{
    if (2 * (v->map_len + 1) > v->map_cap) {
        size_t cap = v->map_cap ? v->map_cap * 2 : 1024;
        chunk_slot *fresh = calloc(cap, sizeof *fresh);
        if (!fresh)
            return -1;
        for (size_t i = 0; i < v->map_cap; i++) {
            chunk_slot s = v->map[i];
            if (!s.ino)
                continue;
            size_t j = s.key & (cap - 1);
            while (fresh[j].ino)
                j = (j + 1) & (cap - 1);
            fresh[j] = s;
        }
        free(v->map);
        v->map = fresh;
        v->map_cap = cap;
    }
    uint64_t h = slot_hash(ds, node, depth, chunk);
    size_t i = h & (v->map_cap - 1);
    while (v->map[i].ino)
        i = (i + 1) & (v->map_cap - 1);
    v->map[i] = (chunk_slot){h, ds, node, depth, chunk, ino};
    v->map_len++;
    return 0;
}

typedef struct chunk_job_ctx {
    const cfs_flavour *fl;
    const cfs_store *st;
    const cfs_store_node *node;
    uint64_t idx;
    const char *source;
    const struct stat *version;
} chunk_job_ctx;

/* A data key is made from the version its store was opened at, or not at all: a source
 * rewritten in place or cut short while its bytes were read gives a reader a mix of two
 * versions, or zeros past its new end, with no error. So the source must still be that version
 * once the bytes are made (a write changes its mtime before its bytes; a truncation its size). */
static int produce_chunk(void *ctx, cfs_buf *out, cfs_err *err)
{
    chunk_job_ctx *c = ctx;
    int rc = cfs_flavour_key_bytes(c->fl, c->st, c->node, c->idx, out, err);
    struct stat now;
    if (cfs_source_stat(c->source, &now) == 0 && cfs_vol_same_version(&now, c->version))
        return rc;
    char was[sizeof err->msg / 2] = "";
    if (rc < 0)
        snprintf(was, sizeof was, " (%.500s)", err->msg);
    return cfs_err_setc(err, CFS_EIO, "its source changed or went while the chunk was made%s", was);
}

static char *chunk_cache_key(const cfs_volume *v, uint32_t ds, const cfs_store_node *sn,
                             uint64_t idx, size_t *len)
{
    size_t n = strlen(v->ds[ds]->identity) + strlen(sn->path) + 32;
    char *key = malloc(n);
    if (key)
        *len = (size_t)snprintf(key, n, "%s%s|%llu", v->ds[ds]->identity, sn->path,
                                (unsigned long long)idx);
    return key;
}

static int chunk_bytes_of(cfs_volume *v, uint32_t ds, uint32_t node, uint64_t idx, cfs_buf *out,
                          cfs_err *err);

/* Under the lock: the status document shows the last data key that failed until its array
 * produces one again (a failure for want of work space may pass). */
static void note_chunk_result(cfs_volume *v, ds_entry *e, uint32_t node, uint64_t idx,
                              const char *failure)
{
    if (!failure) {
        if (e->chunk_failure && e->failed_node == node) {
            free(e->chunk_failure);
            e->chunk_failure = NULL;
        }
        return;
    }
    const cfs_store_node *sn = &e->store->nodes[node];
    char key[256];
    cfs_flavour_key(v->fl, sn, idx, key, sizeof key);
    size_t len = strlen(sn->path) + strlen(key) + strlen(failure) + 4;
    char *text = malloc(len);
    if (!text)
        return;
    snprintf(text, len, "%s/%s: %s", sn->path, key, failure);
    free(e->chunk_failure);
    e->chunk_failure = text;
    e->failed_node = node;
}

/* Data key bytes of a version that may be retired meanwhile: it stays open while producing. */
int cfs_vol_key_bytes(cfs_volume *v, uint32_t ds, uint32_t node, uint64_t idx, cfs_buf *out,
                       cfs_err *err)
{
    pthread_mutex_lock(&v->lock);
    ds_entry *e = v->ds[ds];
    bool usable = e->store != NULL;
    if (usable)
        e->active++;
    pthread_mutex_unlock(&v->lock);
    if (!usable)
        return cfs_err_set(err, "%s changed or was removed", cfs_vol_shown_source(v, e->p.source));
    int rc = chunk_bytes_of(v, ds, node, idx, out, err);
    pthread_mutex_lock(&v->lock);
    note_chunk_result(v, e, node, idx, rc < 0 ? err->msg : NULL);
    if (rc < 0) {
        /* The log names the file that failed: the store and the key's path in it. */
        const cfs_store_node *sn = &e->store->nodes[node];
        char key[256];
        cfs_flavour_key(v->fl, sn, idx, key, sizeof key);
        cfs_err_prefix(err, "%s.zarr/%s/%s", e->p.id, sn->path, key);
    }
    e->active--;
    cfs_vol_close_if_idle(e);
    pthread_mutex_unlock(&v->lock);
    return rc;
}

static int chunk_bytes_of(cfs_volume *v, uint32_t ds, uint32_t node, uint64_t idx, cfs_buf *out,
                          cfs_err *err)
{
    const cfs_store_node *sn = &v->ds[ds]->store->nodes[node];
    size_t klen;
    char *key = chunk_cache_key(v, ds, sn, idx, &klen);
    if (!key)
        return cfs_err_oom(err);
    chunk_job_ctx ctx = {v->fl, v->ds[ds]->store, sn, idx, v->ds[ds]->p.source,
                         &v->ds[ds]->version};
    int rc = cfs_cache_get(v->cache, key, klen, produce_chunk, &ctx, out, err);
    free(key);
    return rc;
}

/* Under the lock: the inode of a data key folder, made at its first lookup. */
static uint64_t key_folder(cfs_volume *v, uint32_t ds, uint32_t node, uint64_t parent,
                           cfs_keydir dir, const char *name)
{
    uint64_t ino = map_find(v, ds, node, dir.depth, dir.prefix);
    if (ino)
        return ino;
    vnode d = {.kind = VN_KEYDIR, .ds = ds, .node = node, .depth = dir.depth,
               .chunk = dir.prefix, .parent = parent, .name = strdup(name)};
    ino = d.name ? cfs_vol_add_vnode(v, d) : 0;
    if (!ino)
        free(d.name);
    else if (map_put(v, ds, node, dir.depth, dir.prefix, ino) < 0)
        ino = 0;
    return ino;
}

/* A data key file comes to exist at its first lookup: its bytes are made then (through the
 * cache, once however many ask), so the size the kernel learns is exact. */
static int lookup_chunk(cfs_volume *v, uint32_t ds, uint32_t node, uint64_t idx,
                        const char *name, cfs_vattr *out, cfs_err *err)
{
    pthread_mutex_lock(&v->lock);
    uint64_t ino = map_find(v, ds, node, KEY_DEPTH, idx);
    if (ino)
        cfs_vol_attr_of(v, ino, out);
    pthread_mutex_unlock(&v->lock);
    if (ino)
        return 0;
    cfs_buf bytes = {0};
    int rc = cfs_vol_key_bytes(v, ds, node, idx, &bytes, err);
    uint64_t size = bytes.len;
    cfs_buf_free(&bytes);
    if (rc < 0)
        return -EIO;
    pthread_mutex_lock(&v->lock);
    ino = map_find(v, ds, node, KEY_DEPTH, idx);
    if (!ino) {
        vnode c = {.kind = VN_CHUNK, .ds = ds, .node = node, .chunk = idx, .size = size,
                   .name = strdup(name)};
        ino = c.name ? cfs_vol_add_vnode(v, c) : 0;
        if (ino && map_put(v, ds, node, KEY_DEPTH, idx, ino) < 0)
            ino = 0;
    }
    if (ino)
        cfs_vol_attr_of(v, ino, out);
    pthread_mutex_unlock(&v->lock);
    return ino ? 0 : (cfs_err_oom(err), -EIO);
}

/* Under the lock: the array node and data folder a folder's data keys are listed from (its
 * own folder, or a key folder); false when it has none. */
bool cfs_vol_data_folder(const cfs_volume *v, const vnode *p, const cfs_store_node **sn,
                        cfs_keydir *dir)
{
    const cfs_store *st = (p->kind == VN_DIR || p->kind == VN_KEYDIR) ? v->ds[p->ds]->store : NULL;
    if (!st || !st->nodes[p->node].is_array)
        return false;
    *sn = &st->nodes[p->node];
    *dir = p->kind == VN_KEYDIR ? (cfs_keydir){p->depth, p->chunk} : (cfs_keydir){0, 0};
    return true;
}

/* Called with the lock held, returns without it: a name among the data keys of the folder
 * parent (an array's folder or a key folder below it). */
int cfs_vol_lookup_key(cfs_volume *v, uint64_t parent, const char *name, cfs_vattr *out,
                      cfs_err *err)
{
    const vnode *p = &v->v[parent - 1];
    const cfs_store_node *sn;
    cfs_keydir dir, child;
    uint64_t idx = 0;
    cfs_key_kind kind = cfs_vol_data_folder(v, p, &sn, &dir)
                            ? cfs_flavour_lookup(v->fl, sn, dir, name, &child, &idx)
                            : CFS_KEY_NONE;
    uint32_t ds = p->ds, node = p->node;
    if (kind == CFS_KEY_FOLDER) {
        uint64_t ino = key_folder(v, ds, node, parent, child, name);
        if (ino)
            cfs_vol_attr_of(v, ino, out);
        pthread_mutex_unlock(&v->lock);
        return ino ? 0 : (cfs_err_oom(err), -EIO);
    }
    pthread_mutex_unlock(&v->lock);
    return kind == CFS_KEY_FILE ? lookup_chunk(v, ds, node, idx, name, out, err) : -ENOENT;
}

