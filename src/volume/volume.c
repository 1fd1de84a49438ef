#include "volume.h"
#include "remote.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "catalog.h"
#include "chunking.h"
#include "copies.h"
#include "path.h"
#include "prepare.h"
#include "sources.h"
#include "spill.h"
#include "store.h"
#include "strfmt.h"
#include "strset.h"
#include "utf8.h"

typedef enum vn_kind { VN_ROOT, VN_CATALOG, VN_STATUS, VN_DIR, VN_DOC, VN_CHUNK } vn_kind;

typedef struct vnode {
    vn_kind kind;
    uint32_t ds;            /* prepared dataset index */
    uint32_t node;          /* store node index (VN_DIR, VN_DOC, VN_CHUNK) */
    uint64_t chunk;
    char *name;
    char *text;             /* VN_CATALOG and VN_DOC: the bytes */
    uint64_t size;
    uint64_t *children;     /* folders (not chunks): inos, in listing order */
    size_t nchildren;
    uint64_t parent;
    struct timespec mtime;  /* nodes outside a store: when they last changed */
} vnode;

typedef struct chunk_slot {
    uint64_t key;           /* (ds, node, chunk) hashed */
    uint32_t ds, node;
    uint64_t chunk;
    uint64_t ino;
} chunk_slot;

/* One version of one source. Entries are never freed while mounted: the kernel may still hold
 * inodes of a replaced version, and they keep serving that version's bytes, never a mix. */
typedef struct ds_entry {
    cfs_prepared p;
    bool served;                /* it has a store (not refused) */
    /* Its store, made at the first lookup inside its folder (a folder of thousands of sources
     * is mostly never read: their documents are not kept); NULL until then and once retired. */
    cfs_store *store;
    bool populated;             /* its folders and documents are in the tree */
    char *identity;             /* the cache key prefix (source version + options) */
    struct stat version;        /* dev, ino, size, mtime of the source when opened */
    uint64_t dir_ino;           /* its <id>.zarr folder, 0 if none */
    bool live;                  /* part of the current tree */
    int active;                 /* chunk productions running on this version */
    char *chunk_failure;        /* the last chunk that could not be produced, and why */
    uint32_t failed_node;       /* its store node: a later success there clears it */
} ds_entry;

struct cfs_volume {
    pthread_mutex_t lock;   /* guards the node table, the chunk map and the entries */
    pthread_mutex_t refreshing;
    pthread_mutex_t populating;     /* one store made at a time, and each once */
    vnode *v;
    size_t n, cap;
    chunk_slot *map;
    size_t map_cap, map_len;
    ds_entry **ds;
    size_t nds;
    uint64_t catalog_ino;
    char *src;
    FILE *log;
    cfs_cache *cache;
    cfs_space *work_space;      /* the layout's work files count against the cache's bound */
    cfs_copies *copies;         /* decompressed copies of compressed sources; NULL: none */
    pthread_t unpacker;         /* opens the sources waiting for their copy, once mounted */
    bool unpacker_started;
    cfs_options opts;
    cfs_detector *detector;     /* which entries of src are inputs, kept from scan to scan */
    void (*invalidate)(void *ctx, uint64_t parent, const char *name, uint64_t ino);
    void *invalidate_ctx;
};

static uint64_t add_vnode(cfs_volume *v, vnode n)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 256;
        vnode *grown = realloc(v->v, cap * sizeof *grown);
        if (!grown)
            return 0;
        v->v = grown;
        v->cap = cap;
    }
    v->v[v->n++] = n;
    return v->n;            /* ino = index + 1; 1 is the root */
}

/* Children arrays double when full (their length a power of two): the root of a folder of
 * ten thousand sources is not copied ten thousand times. */
static int add_child(cfs_volume *v, uint64_t parent, uint64_t child)
{
    vnode *p = &v->v[parent - 1];
    size_t n = p->nchildren;
    if ((n & (n - 1)) == 0) {
        uint64_t *grown = realloc(p->children, (n ? 2 * n : 1) * sizeof *grown);
        if (!grown)
            return -1;
        p->children = grown;
    }
    p->children[p->nchildren++] = child;
    return 0;
}

static uint64_t add_file(cfs_volume *v, uint64_t parent, vnode n)
{
    n.parent = parent;
    uint64_t ino = n.name ? add_vnode(v, n) : 0;
    if (!ino || add_child(v, parent, ino) < 0) {
        free(n.name);
        free(n.text);
        return 0;
    }
    return ino;
}

static uint64_t add_doc(cfs_volume *v, uint64_t parent, uint32_t ds, uint32_t node,
                        const char *name, char *text)
{
    if (!text)
        return 0;
    vnode n = {.kind = VN_DOC, .ds = ds, .node = node, .name = strdup(name), .text = text,
               .size = strlen(text)};
    return add_file(v, parent, n);
}

static const char *last_component(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Under the lock: the <id>.zarr folder of a served dataset; what is inside comes at its first
 * lookup (add_store). */
static int add_store_folder(cfs_volume *v, uint32_t ds, const char *id)
{
    char *name = malloc(strlen(id) + sizeof ".zarr");
    if (name)
        sprintf(name, "%s.zarr", id);
    vnode d = {.kind = VN_DIR, .ds = ds, .node = 0, .name = name};
    return (v->ds[ds]->dir_ino = add_file(v, CFS_VOLUME_ROOT, d)) ? 0 : -1;
}

/* Under the lock: one dataset's store, in its folder, as folders and metadata files; chunk
 * files appear at lookup. */
static int add_store(cfs_volume *v, uint32_t ds)
{
    const cfs_store *st = v->ds[ds]->store;
    uint64_t *dir_of = calloc(st->nnodes, sizeof *dir_of);
    if (!dir_of)
        return -1;
    for (uint32_t i = 0; i < st->nnodes; i++) {
        const cfs_store_node *sn = &st->nodes[i];
        if (i == 0) {
            dir_of[0] = v->ds[ds]->dir_ino;
        } else {
            /* The parent is the node whose path is this one's prefix: nodes come parents first. */
            uint64_t parent = dir_of[0];
            const char *slash = strrchr(sn->path, '/');
            size_t plen = slash ? (size_t)(slash - sn->path) : 0;
            for (uint32_t k = i; k-- > 0;)
                if (strlen(st->nodes[k].path) == plen &&
                    strncmp(st->nodes[k].path, sn->path, plen) == 0) {
                    parent = dir_of[k];
                    break;
                }
            vnode d = {.kind = VN_DIR, .ds = ds, .node = i, .name = strdup(last_component(sn->path))};
            if (!(dir_of[i] = add_file(v, parent, d)))
                break;
        }
        if (!add_doc(v, dir_of[i], ds, i, ".zattrs", cfs_store_doc(sn, CFS_DOC_ZATTRS)) ||
            !add_doc(v, dir_of[i], ds, i, sn->is_array ? ".zarray" : ".zgroup",
                     cfs_store_doc(sn, sn->is_array ? CFS_DOC_ZARRAY : CFS_DOC_ZGROUP)) ||
            (i == 0 && !add_doc(v, dir_of[i], ds, i, ".zmetadata", cfs_store_zmetadata(st)))) {
            dir_of[i] = 0;
            break;
        }
    }
    int ok = st->nnodes == 0 || dir_of[st->nnodes - 1] != 0;
    free(dir_of);
    return ok ? 0 : -1;
}

/* The cache key prefix: which bytes a chunk has depends on the source version and options, and
 * on the store layout's own version (v2: one index dtype per sparse matrix; v3: cells chunked on
 * the priority levels, gene-major ranges chunked by a gene's share), so a cache made by an older
 * build never serves its chunks. */
static char *identity_of(const cfs_prepared *p, const cfs_options *o, const struct stat *version)
{
    const struct stat sb = *version;
    char *s = malloc(512 + strlen(p->source) + strlen(p->id));
    if (s)
        sprintf(s, "v3|%llu:%llu:%lld:%lld.%09ld|%s|%s|%d|%llu|", (unsigned long long)sb.st_dev,
                (unsigned long long)sb.st_ino, (long long)sb.st_size, (long long)sb.st_mtim.tv_sec,
                sb.st_mtim.tv_nsec, p->id, cfs_codec_name(o->codec), (int)o->layout.order,
                (unsigned long long)o->layout.seed);
    return s;
}

static char *catalog_text(const cfs_volume *v)
{
    char **ids = calloc(v->nds + 1, sizeof *ids);
    size_t k = 0;
    for (size_t i = 0; ids && i < v->nds; i++)
        if (v->ds[i]->live && v->ds[i]->served && v->ds[i]->p.embedding)
            ids[k++] = v->ds[i]->p.id;
    char *text = ids ? cfs_catalog_json(ids, k) : NULL;
    free(ids);
    return text;
}

static bool same_version(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

static bool same_part(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

/* Under the lock: the live entries by source, so that a pass over a folder of thousands of
 * sources finds each in one step. A source of several datasets (one per part) has several: the
 * index holds its last, and prev[] chains each to the one before. The strings are the
 * entries' own, which live until unmount. */
typedef struct live_index {
    cfs_strset *last;           /* NULL when out of memory: the lookups then scan */
    ptrdiff_t *prev;
} live_index;

static void live_index_free(live_index *ix)
{
    cfs_strset_free(ix->last);
    free(ix->prev);
    *ix = (live_index){0};
}

static live_index index_live(const cfs_volume *v)
{
    live_index ix = {cfs_strset_new(v->nds), malloc((v->nds + 1) * sizeof *ix.prev)};
    bool ok = ix.last && ix.prev;
    for (size_t i = 0; ok && i < v->nds; i++) {
        if (!v->ds[i]->live)
            continue;
        uint64_t *k = cfs_strset_get(ix.last, v->ds[i]->p.source);
        ix.prev[i] = k ? (ptrdiff_t)*k : -1;
        if (k)
            *k = i;
        else
            ok = cfs_strset_add(ix.last, v->ds[i]->p.source, i) >= 0;
    }
    if (!ok)
        live_index_free(&ix);
    return ix;
}

/* The source's live entries, last first: the first, then next_live of each until -1. */
static ptrdiff_t first_live(const cfs_volume *v, const live_index *ix, const char *source)
{
    if (ix->last) {
        const uint64_t *k = cfs_strset_get(ix->last, source);
        return k ? (ptrdiff_t)*k : -1;
    }
    for (size_t i = v->nds; i-- > 0;)
        if (v->ds[i]->live && strcmp(v->ds[i]->p.source, source) == 0)
            return (ptrdiff_t)i;
    return -1;
}

static ptrdiff_t next_live(const cfs_volume *v, const live_index *ix, ptrdiff_t k)
{
    if (ix->last)
        return ix->prev[k];
    const char *source = v->ds[k]->p.source;
    while (k-- > 0)
        if (v->ds[k]->live && strcmp(v->ds[k]->p.source, source) == 0)
            return k;
    return -1;
}

/* Where in v->ds the live entry of a source's dataset (part: NULL for a source of one) at this
 * version is, if it is already served; -1 if not. */
static ptrdiff_t find_live(const cfs_volume *v, const live_index *ix, const char *source,
                           const char *part, const struct stat *version)
{
    for (ptrdiff_t k = first_live(v, ix, source); k >= 0; k = next_live(v, ix, k))
        if (same_part(v->ds[k]->p.part, part) && same_version(&v->ds[k]->version, version))
            return k;
    return -1;
}

/* How many live entries the source has at this version (several: one per part). */
static size_t live_count(const cfs_volume *v, const live_index *ix, const char *source,
                         const struct stat *version)
{
    size_t n = 0;
    for (ptrdiff_t k = first_live(v, ix, source); k >= 0; k = next_live(v, ix, k))
        n += same_version(&v->ds[k]->version, version);
    return n;
}

/* True when the folder's sources and their versions are exactly what is served (a source of
 * several datasets has several live entries). */
static bool unchanged(cfs_volume *v, const cfs_source_list *sources)
{
    size_t live = 0, matched = 0;
    for (size_t i = 0; i < v->nds; i++) {
        if (v->ds[i]->live && v->ds[i]->p.pending)
            return false;       /* it waits to be opened */
        live += v->ds[i]->live;
    }
    live_index ix = index_live(v);
    bool same = true;
    for (size_t i = 0; i < sources->n && same; i++) {
        struct stat sb;
        size_t k = cfs_source_stat(sources->paths[i], &sb) < 0 ? 0 : live_count(v, &ix, sources->paths[i], &sb);
        same = k > 0;
        matched += k;
    }
    live_index_free(&ix);
    return same && matched == live;
}

static void remove_child(cfs_volume *v, uint64_t parent, uint64_t child)
{
    vnode *p = &v->v[parent - 1];
    for (size_t i = 0; i < p->nchildren; i++)
        if (p->children[i] == child) {
            memmove(&p->children[i], &p->children[i + 1],
                    (p->nchildren - i - 1) * sizeof *p->children);
            p->nchildren--;
            return;
        }
}

/* Names whose kernel entries must be dropped once the lock is released. */
typedef struct stale_names {
    char **names;
    size_t n;
} stale_names;

static void note_stale(stale_names *s, const char *name)
{
    char **grown = realloc(s->names, (s->n + 1) * sizeof *grown);
    if (grown && (grown[s->n] = strdup(name))) {
        s->names = grown;
        s->n++;
    } else if (grown) {
        s->names = grown;
    }
}

/* A source as status.json and the log show it: below SRC. */
static const char *shown_source(const cfs_volume *v, const char *source)
{
    return cfs_path_shown(v->src, source);
}

/* Under the lock: takes a freshly opened version in as a new live entry. Its version is the
 * stat taken before opening: a file changed during the open then differs at the next pass. */
static int adopt(cfs_volume *v, cfs_prepared *p, const struct stat *before, stale_names *stale)
{
    ds_entry *e = calloc(1, sizeof *e);
    ds_entry **grown = e ? realloc(v->ds, (v->nds + 1) * sizeof *grown) : NULL;
    if (!grown) {
        free(e);
        return -1;
    }
    v->ds = grown;
    e->p = *p;
    memset(p, 0, sizeof *p);      /* the entry owns it now */
    e->live = true;
    uint32_t idx = (uint32_t)v->nds;
    v->ds[v->nds++] = e;
    e->version = *before;             /* a refused source is retried when it changes too */
    e->served = e->p.ds != NULL;      /* prepared: its store can be made (cfs_prepare) */
    if (e->served && !(e->identity = identity_of(&e->p, &v->opts, &e->version)))
        return -1;
    cfs_prepared_report(&e->p, shown_source(v, e->p.source), v->log);
    if (e->served) {
        if (add_store_folder(v, idx, e->p.id) < 0)
            return -1;
        note_stale(stale, v->v[e->dir_ino - 1].name);
    }
    return 0;
}

/* Under the lock: frees a retired version's store and reader once nothing uses them. Its file
 * may have been rewritten in place, so it must not be read again (and libhdf5 would hand the
 * stale open file to the next open of the same inode). */
static void close_if_idle(ds_entry *e)
{
    if (e->live || e->active > 0)
        return;
    cfs_store_free(e->store);
    e->store = NULL;
    cfs_dataset_free(e->p.ds);
    e->p.ds = NULL;
    e->p.embedding = NULL;      /* it named a key of that dataset */
}

/* Without the lock: the store of a served dataset and what is in its folder, made once, at the
 * first lookup or listing inside it. The store is made outside the lock (a string scalar is
 * read from the source); its documents' trees are dropped once the tree has their text. 0, or
 * -ENOENT (retired meanwhile) or -EIO (err). */
static int populate(cfs_volume *v, uint32_t ds, cfs_err *err)
{
    pthread_mutex_lock(&v->populating);
    pthread_mutex_lock(&v->lock);
    ds_entry *e = v->ds[ds];
    bool todo = !e->populated && e->live && e->p.ds;
    int rc = e->populated ? 0 : -ENOENT;
    if (todo)
        e->active++;
    pthread_mutex_unlock(&v->lock);
    cfs_store *st = NULL;
    if (todo) {
        cfs_store_opts sopts = {v->opts.codec};
        st = cfs_store_new(e->p.ds, &sopts, err);
        pthread_mutex_lock(&v->lock);
        e->active--;
        if (st && e->live) {
            e->store = st;
            rc = add_store(v, ds) == 0 ? 0 : (cfs_err_oom(err), -EIO);
            e->populated = rc == 0;
            cfs_store_drop_docs(st);
        } else {
            cfs_store_free(st);
            rc = st ? -ENOENT : -EIO;
        }
        close_if_idle(e);
        pthread_mutex_unlock(&v->lock);
    }
    pthread_mutex_unlock(&v->populating);
    return rc;
}

/* Under the lock: whether the folder ino is a store folder whose content is not made yet. */
static bool unpopulated(const cfs_volume *v, uint64_t ino)
{
    const vnode *n = &v->v[ino - 1];
    return n->kind == VN_DIR && !v->ds[n->ds]->populated;
}

/* Under the lock: a version no longer in the folder leaves the tree. */
static void retire(cfs_volume *v, ds_entry *e, stale_names *stale)
{
    e->live = false;
    /* The copy of a version that is still the file's (a pending entry replaced by its opened
     * one, a new id) stays; that of a changed or removed source goes. */
    struct stat now;
    if (v->copies && !(cfs_source_stat(e->p.source, &now) == 0 && same_version(&now, &e->version)))
        cfs_copies_retire(v->copies, e->p.source, &e->version);
    if (e->dir_ino) {
        remove_child(v, CFS_VOLUME_ROOT, e->dir_ino);
        note_stale(stale, v->v[e->dir_ino - 1].name);
    }
    close_if_idle(e);
}

/* Under the lock: retires every live version whose source is gone or has changed, before the
 * folder is opened again. */
static void retire_changed(cfs_volume *v, const cfs_source_list *sources,
                           const struct stat *now, stale_names *stale)
{
    cfs_strset *listed = cfs_strset_new(sources->n);
    for (size_t i = 0; listed && i < sources->n; i++)
        if (cfs_strset_add(listed, sources->paths[i], i) < 0) {
            cfs_strset_free(listed);
            listed = NULL;
        }
    for (size_t k = 0; k < v->nds; k++) {
        ds_entry *e = v->ds[k];
        if (!e->live)
            continue;
        bool current = false;
        const uint64_t *at = listed ? cfs_strset_get(listed, e->p.source) : NULL;
        if (at)
            current = same_version(&now[*at], &e->version);
        for (size_t i = 0; !listed && i < sources->n && !current; i++)
            current = strcmp(sources->paths[i], e->p.source) == 0 &&
                      same_version(&now[i], &e->version);
        if (!current)
            retire(v, e, stale);
    }
    cfs_strset_free(listed);
}

static int merge(cfs_volume *v, cfs_prepared_set *set, const struct stat *before,
                 stale_names *stale)
{
    bool *keep = calloc(v->nds + 1, sizeof *keep);
    if (!keep)
        return -1;
    int rc = 0;
    size_t old = v->nds;
    live_index ix = index_live(v);      /* of the entries before this pass adds any */
    for (size_t i = 0; rc == 0 && i < set->n; i++) {
        cfs_prepared *p = &set->items[i];
        ptrdiff_t k = find_live(v, &ix, p->source, p->part, &before[p->from]);
        const ds_entry *same = k >= 0 ? v->ds[k] : NULL;
        if (same && !same->p.pending && (!same->p.id || !p->id || strcmp(same->p.id, p->id) == 0)) {
            keep[k] = true;
            continue;
        }
        rc = adopt(v, p, &before[p->from], stale);
    }
    live_index_free(&ix);
    for (size_t k = 0; k < old; k++)
        if (v->ds[k]->live && !keep[k])
            retire(v, v->ds[k], stale);
    free(keep);
    char *text = catalog_text(v);
    if (!text)
        return -1;
    vnode *cat = &v->v[v->catalog_ino - 1];
    if (!cat->text || strcmp(cat->text, text) != 0) {
        note_stale(stale, "datasets.json");
        /* Its ETag (mtime + size) must change whenever its bytes do. */
        clock_gettime(CLOCK_REALTIME, &cat->mtime);
        v->v[CFS_VOLUME_ROOT - 1].mtime = cat->mtime;
    }
    free(cat->text);
    cat->text = text;
    cat->size = strlen(text);
    return rc;
}

/* Under the lock: the sources served already at their current version are not opened again:
 * known[i] lists each of its datasets (entries live until unmount, so their strings outlast
 * the refresh; the lists are the caller's to free). -1 when out of memory. */
static int note_known(cfs_volume *v, const cfs_source_list *sources, const struct stat *now,
                      cfs_known_source *known)
{
    live_index ix = index_live(v);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < sources->n; i++) {
        size_t n = 0;
        bool pending = false;
        for (ptrdiff_t k = first_live(v, &ix, sources->paths[i]); k >= 0; k = next_live(v, &ix, k))
            if (same_version(&v->ds[k]->version, &now[i])) {
                pending |= v->ds[k]->p.pending;
                n++;
            }
        cfs_known_dataset *list = n && !pending ? calloc(n, sizeof *list) : NULL;
        if (n && !pending && !list) {
            rc = -1;
            break;
        }
        /* it waits to be opened (pending): it is not known yet */
        size_t at = n;          /* the chain runs last first: the list is in the input's order */
        for (ptrdiff_t k = first_live(v, &ix, sources->paths[i]); list && k >= 0;
             k = next_live(v, &ix, k)) {
            const ds_entry *e = v->ds[k];
            if (same_version(&e->version, &now[i]))
                list[--at] = (cfs_known_dataset){e->p.part, e->served ? e->p.raw_id : NULL,
                                                 e->p.id};
        }
        known[i] = (cfs_known_source){list ? n : 0, list};
    }
    live_index_free(&ix);
    return rc;
}

static void known_free(cfs_known_source *known, size_t n)
{
    for (size_t i = 0; known && i < n; i++)
        free((void *)known[i].datasets);
    free(known);
}

int cfs_volume_refresh(cfs_volume *v, cfs_err *err)
{
    pthread_mutex_lock(&v->refreshing);
    cfs_source_list sources;
    int rc = cfs_sources_list(v->src, v->detector, &sources, err);
    pthread_mutex_lock(&v->lock);
    bool same = rc == 0 && v->catalog_ino && unchanged(v, &sources);
    pthread_mutex_unlock(&v->lock);
    if (rc < 0 || same) {
        if (rc == 0)
            cfs_sources_free(&sources);
        pthread_mutex_unlock(&v->refreshing);
        return rc;
    }
    /* Opening reads metadata only; it runs outside the lock so serving goes on meanwhile. */
    cfs_prepared_set set = {0};
    stale_names stale = {0};
    struct stat *before = calloc(sources.n + 1, sizeof *before);
    for (size_t i = 0; before && i < sources.n; i++)
        cfs_source_stat(sources.paths[i], &before[i]);
    cfs_known_source *known = before ? calloc(sources.n + 1, sizeof *known) : NULL;
    if (known) {
        pthread_mutex_lock(&v->lock);
        retire_changed(v, &sources, before, &stale);
        if (note_known(v, &sources, before, known) < 0) {
            known_free(known, sources.n);
            known = NULL;
        }
        pthread_mutex_unlock(&v->lock);
    }
    rc = known ? cfs_prepare_reusing(&sources, &v->opts, known, &set, err)
               : cfs_err_oom(err);
    known_free(known, sources.n);
    pthread_mutex_lock(&v->lock);
    if (rc == 0 && merge(v, &set, before, &stale) < 0)
        rc = cfs_err_oom(err);
    pthread_mutex_unlock(&v->lock);
    free(before);
    for (size_t i = 0; i < stale.n; i++) {
        if (v->invalidate)
            v->invalidate(v->invalidate_ctx, CFS_VOLUME_ROOT, stale.names[i],
                          strcmp(stale.names[i], "datasets.json") == 0 ? v->catalog_ino : 0);
        free(stale.names[i]);
    }
    free(stale.names);
    cfs_prepared_set_free(&set);
    cfs_sources_free(&sources);
    pthread_mutex_unlock(&v->refreshing);
    return rc;
}

void cfs_volume_on_change(cfs_volume *v,
                          void (*invalidate)(void *ctx, uint64_t parent, const char *name,
                                             uint64_t ino),
                          void *ctx)
{
    v->invalidate = invalidate;
    v->invalidate_ctx = ctx;
}

static int build(cfs_volume *v, cfs_err *err)
{
    vnode root = {.kind = VN_ROOT, .name = strdup("")};
    if (!root.name || add_vnode(v, root) != CFS_VOLUME_ROOT)
        return cfs_err_oom(err);
    vnode cat = {.kind = VN_CATALOG, .name = strdup("datasets.json"), .text = catalog_text(v)};
    vnode status = {.kind = VN_STATUS, .name = strdup("status.json")};
    if (!cat.text)
        return cfs_err_oom(err);
    cat.size = strlen(cat.text);
    clock_gettime(CLOCK_REALTIME, &cat.mtime);
    v->v[CFS_VOLUME_ROOT - 1].mtime = cat.mtime;
    status.mtime = cat.mtime;
    v->catalog_ino = add_file(v, CFS_VOLUME_ROOT, cat);
    if (!v->catalog_ino || !add_file(v, CFS_VOLUME_ROOT, status))
        return cfs_err_oom(err);
    return cfs_volume_refresh(v, err);
}

/* The cache may be set after the layout was applied (after the daemon forks): the space asks
 * for it at each reservation. */
static int reserve_work(void *ctx, uint64_t bytes, cfs_err *err)
{
    cfs_volume *v = ctx;
    return v->cache ? cfs_cache_reserve(v->cache, bytes, err) : 0;
}

static void release_work(void *ctx, uint64_t bytes)
{
    cfs_volume *v = ctx;
    if (v->cache)
        cfs_cache_release(v->cache, bytes);
}

/* Sources whose decompressed copy could not be made before the mount was up (no cache yet)
 * are opened now, in the background: status.json shows them working meanwhile. */
static void *open_waiting(void *arg)
{
    cfs_volume *v = arg;
    cfs_err err = {0};
    if (cfs_volume_refresh(v, &err) < 0)
        cfs_log(v->log, "%s", err.msg);
    return NULL;
}

static bool any_pending(cfs_volume *v)
{
    bool pending = false;
    pthread_mutex_lock(&v->lock);
    for (size_t i = 0; i < v->nds && !pending; i++)
        pending = v->ds[i]->live && v->ds[i]->p.pending;
    pthread_mutex_unlock(&v->lock);
    return pending;
}

void cfs_volume_set_cache(cfs_volume *v, cfs_cache *cache)
{
    v->cache = cache;
    if (!v->copies)
        return;
    cfs_copies_set_cache(v->copies, cache);
    cfs_source_list sources;
    cfs_err err;
    if (cfs_sources_list(v->src, v->detector, &sources, &err) == 0) {
        cfs_copies_prune(v->copies, &sources);   /* copies of sources gone or changed since */
        cfs_sources_free(&sources);
    }
    if (any_pending(v))
        v->unpacker_started = pthread_create(&v->unpacker, NULL, open_waiting, v) == 0;
}

/* The unpacker of the mount's sources: copies in the cache folder, with the progress of the
 * entry that waits for it (status.json shows that one). */
static int volume_unpack(void *ctx, const char *source, const char *codec, cfs_progress *progress,
                         char **path, cfs_err *err)
{
    cfs_volume *v = ctx;
    pthread_mutex_lock(&v->lock);
    for (size_t i = 0; i < v->nds; i++)
        if (v->ds[i]->live && v->ds[i]->p.pending && strcmp(v->ds[i]->p.source, source) == 0)
            progress = v->ds[i]->p.progress;
    pthread_mutex_unlock(&v->lock);
    return cfs_copies_get(v->copies, source, codec, progress, path, err);
}

/* R sources read their whole file at open: until the mount is up (the cache is set after the
 * daemon forks), they wait to be opened in the background, as copies do. */
static bool volume_defer(void *ctx, const char *source)
{
    (void)source;
    const cfs_volume *v = ctx;
    return v->cache == NULL;
}

cfs_volume *cfs_volume_open(const char *src, const cfs_options *opts, cfs_cache *cache,
                            const char *workdir, const char *unpacked_dir, FILE *log, cfs_err *err)
{
    cfs_volume *v = calloc(1, sizeof *v);
    if (!v || !(v->src = strdup(src))) {
        free(v);
        cfs_err_oom(err);
        return NULL;
    }
    pthread_mutex_init(&v->lock, NULL);
    pthread_mutex_init(&v->refreshing, NULL);
    pthread_mutex_init(&v->populating, NULL);
    v->cache = cache;
    v->log = log;
    v->opts = *opts;
    v->opts.layout.workdir = workdir;
    v->opts.layout.log = log;
    /* The mount holds its cache's lock: a spill file named in the work folder is a killed
     * daemon's. */
    if (workdir)
        cfs_spill_sweep(workdir);
    cfs_space_bound bound = {reserve_work, release_work, v};
    if (!(v->work_space = cfs_space_new(&bound))) {
        cfs_volume_close(v);
        cfs_err_oom(err);
        return NULL;
    }
    v->opts.layout.space = v->work_space;
    v->opts.shown_root = v->src;
    cfs_isolation iso = cfs_options_isolation(&v->opts);
    if (!(v->detector = cfs_detector_new(&iso))) {
        cfs_volume_close(v);
        cfs_err_oom(err);
        return NULL;
    }
    if (unpacked_dir) {
        if (!(v->copies = cfs_copies_new(unpacked_dir))) {
            cfs_volume_close(v);
            cfs_err_oom(err);
            return NULL;
        }
        v->opts.unpack = (cfs_unpacker){.copy = volume_unpack, .defer = volume_defer, .ctx = v};
        cfs_copies_set_cache(v->copies, cache);
    }
    if (build(v, err) < 0) {
        cfs_volume_close(v);
        return NULL;
    }
    return v;
}

void cfs_volume_close(cfs_volume *v)
{
    if (!v)
        return;
    cfs_copies_stop(v->copies);
    if (v->unpacker_started)
        pthread_join(v->unpacker, NULL);
    for (size_t i = 0; i < v->n; i++) {
        free(v->v[i].name);
        free(v->v[i].text);
        free(v->v[i].children);
    }
    free(v->v);
    free(v->map);
    for (size_t i = 0; i < v->nds; i++) {
        ds_entry *e = v->ds[i];
        cfs_store_free(e->store);
        free(e->identity);
        free(e->chunk_failure);
        cfs_prepared_set one = {&e->p, 1};
        cfs_prepared_set_free_items(&one);
        free(e);
    }
    free(v->ds);
    cfs_space_free(v->work_space);     /* after the datasets: their jobs hold space */
    cfs_copies_free(v->copies);        /* after the datasets: they read the copies */
    cfs_detector_free(v->detector);
    free(v->src);
    pthread_mutex_destroy(&v->lock);
    pthread_mutex_destroy(&v->refreshing);
    pthread_mutex_destroy(&v->populating);
    free(v);
}

/* ---- attributes and lookup --------------------------------------------------------------- */

static void attr_of(const cfs_volume *v, uint64_t ino, cfs_vattr *a)
{
    const vnode *n = &v->v[ino - 1];
    memset(a, 0, sizeof *a);
    a->ino = ino;
    a->is_dir = n->kind == VN_ROOT || n->kind == VN_DIR;
    a->size = n->size;
    a->volatile_size = n->kind == VN_STATUS;
    /* Per source version: an ETag (mtime + size) changes exactly when the source does. */
    if (n->kind == VN_DIR || n->kind == VN_DOC || n->kind == VN_CHUNK)
        a->mtime = v->ds[n->ds]->version.st_mtim;
    else
        a->mtime = n->mtime;
}

static uint64_t slot_hash(uint32_t ds, uint32_t node, uint64_t chunk)
{
    uint64_t h = ((uint64_t)ds << 40) ^ ((uint64_t)node << 20) ^ chunk;
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    return h ^ (h >> 33);
}

static uint64_t map_find(const cfs_volume *v, uint32_t ds, uint32_t node, uint64_t chunk)
{
    if (!v->map_cap)
        return 0;
    uint64_t h = slot_hash(ds, node, chunk);
    for (size_t i = h & (v->map_cap - 1);; i = (i + 1) & (v->map_cap - 1)) {
        const chunk_slot *s = &v->map[i];
        if (!s->ino)
            return 0;
        if (s->key == h && s->ds == ds && s->node == node && s->chunk == chunk)
            return s->ino;
    }
}

static int map_put(cfs_volume *v, uint32_t ds, uint32_t node, uint64_t chunk, uint64_t ino)
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
    uint64_t h = slot_hash(ds, node, chunk);
    size_t i = h & (v->map_cap - 1);
    while (v->map[i].ino)
        i = (i + 1) & (v->map_cap - 1);
    v->map[i] = (chunk_slot){h, ds, node, chunk, ino};
    v->map_len++;
    return 0;
}

typedef struct chunk_job_ctx {
    const cfs_store *st;
    const cfs_store_node *node;
    uint64_t idx;
    const char *source;
    const struct stat *version;
} chunk_job_ctx;

/* A chunk is made from the version its store was opened at, or not at all: a source rewritten
 * in place or cut short while its bytes were read gives a reader a mix of two versions, or
 * zeros past its new end, with no error. So the source must still be that version once the
 * bytes are made (a write changes its mtime before its bytes; a truncation its size). */
static int produce_chunk(void *ctx, cfs_buf *out, cfs_err *err)
{
    chunk_job_ctx *c = ctx;
    int rc = cfs_store_chunk(c->st, c->node, c->idx, out, err);
    struct stat now;
    if (cfs_source_stat(c->source, &now) == 0 && same_version(&now, c->version))
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

/* Under the lock: the status document shows the last chunk that failed until its array
 * produces a chunk again (a failure for want of work space may pass). */
static void note_chunk_result(ds_entry *e, uint32_t node, uint64_t idx, const char *failure)
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
    cfs_chunk_key(sn->ndim, sn->grid, idx, key, sizeof key);
    size_t len = strlen(sn->path) + strlen(key) + strlen(failure) + 4;
    char *text = malloc(len);
    if (!text)
        return;
    snprintf(text, len, "%s/%s: %s", sn->path, key, failure);
    free(e->chunk_failure);
    e->chunk_failure = text;
    e->failed_node = node;
}

/* Chunk bytes of a version that may be retired meanwhile: it stays open while producing. */
static int chunk_bytes(cfs_volume *v, uint32_t ds, uint32_t node, uint64_t idx, cfs_buf *out,
                       cfs_err *err)
{
    pthread_mutex_lock(&v->lock);
    ds_entry *e = v->ds[ds];
    bool usable = e->store != NULL;
    if (usable)
        e->active++;
    pthread_mutex_unlock(&v->lock);
    if (!usable)
        return cfs_err_set(err, "%s changed or was removed", shown_source(v, e->p.source));
    int rc = chunk_bytes_of(v, ds, node, idx, out, err);
    pthread_mutex_lock(&v->lock);
    note_chunk_result(e, node, idx, rc < 0 ? err->msg : NULL);
    if (rc < 0) {
        /* The log names the file that failed: the store and the chunk's path in it. */
        const cfs_store_node *sn = &e->store->nodes[node];
        char key[256];
        cfs_chunk_key(sn->ndim, sn->grid, idx, key, sizeof key);
        cfs_err_prefix(err, "%s.zarr/%s/%s", e->p.id, sn->path, key);
    }
    e->active--;
    close_if_idle(e);
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
    chunk_job_ctx ctx = {v->ds[ds]->store, sn, idx, v->ds[ds]->p.source, &v->ds[ds]->version};
    int rc = cfs_cache_get(v->cache, key, klen, produce_chunk, &ctx, out, err);
    free(key);
    return rc;
}

/* A chunk file comes to exist at its first lookup: its bytes are made then (through the cache,
 * once however many ask), so the size the kernel learns is exact. */
static int lookup_chunk(cfs_volume *v, uint32_t ds, uint32_t node, const char *name,
                        cfs_vattr *out, cfs_err *err)
{
    pthread_mutex_lock(&v->lock);
    const cfs_store *st = v->ds[ds]->store;
    uint64_t idx;
    int parsed = st ? cfs_chunk_parse_key(st->nodes[node].ndim, st->nodes[node].grid, name, &idx)
                    : -1;
    pthread_mutex_unlock(&v->lock);
    if (parsed < 0)
        return -ENOENT;
    pthread_mutex_lock(&v->lock);
    uint64_t ino = map_find(v, ds, node, idx);
    if (ino)
        attr_of(v, ino, out);
    pthread_mutex_unlock(&v->lock);
    if (ino)
        return 0;
    cfs_buf bytes = {0};
    int rc = chunk_bytes(v, ds, node, idx, &bytes, err);
    uint64_t size = bytes.len;
    cfs_buf_free(&bytes);
    if (rc < 0)
        return -EIO;
    pthread_mutex_lock(&v->lock);
    ino = map_find(v, ds, node, idx);
    if (!ino) {
        vnode c = {.kind = VN_CHUNK, .ds = ds, .node = node, .chunk = idx, .size = size,
                   .name = strdup(name)};
        ino = c.name ? add_vnode(v, c) : 0;
        if (ino && map_put(v, ds, node, idx, ino) < 0)
            ino = 0;
    }
    if (ino)
        attr_of(v, ino, out);
    pthread_mutex_unlock(&v->lock);
    return ino ? 0 : (cfs_err_oom(err), -EIO);
}

int cfs_volume_lookup(cfs_volume *v, uint64_t parent, const char *name, cfs_vattr *out,
                      cfs_err *err)
{
    pthread_mutex_lock(&v->lock);
    if (parent == 0 || parent > v->n) {
        pthread_mutex_unlock(&v->lock);
        return -ENOENT;
    }
    if (unpopulated(v, parent)) {
        uint32_t ds = v->v[parent - 1].ds;
        pthread_mutex_unlock(&v->lock);
        int rc = populate(v, ds, err);
        if (rc < 0)
            return rc;
        pthread_mutex_lock(&v->lock);
    }
    const vnode *p = &v->v[parent - 1];
    if (p->kind != VN_ROOT && p->kind != VN_DIR) {
        pthread_mutex_unlock(&v->lock);
        return -ENOTDIR;
    }
    for (size_t i = 0; i < p->nchildren; i++) {
        if (strcmp(v->v[p->children[i] - 1].name, name) == 0) {
            attr_of(v, p->children[i], out);
            pthread_mutex_unlock(&v->lock);
            return 0;
        }
    }
    bool array = p->kind == VN_DIR && v->ds[p->ds]->store &&
                 v->ds[p->ds]->store->nodes[p->node].is_array;
    uint32_t ds = p->ds, node = p->node;
    pthread_mutex_unlock(&v->lock);
    return array ? lookup_chunk(v, ds, node, name, out, err) : -ENOENT;
}

int cfs_volume_getattr(cfs_volume *v, uint64_t ino, cfs_vattr *out)
{
    pthread_mutex_lock(&v->lock);
    int ok = ino >= 1 && ino <= v->n;
    if (ok)
        attr_of(v, ino, out);
    bool status = ok && v->v[ino - 1].kind == VN_STATUS;
    pthread_mutex_unlock(&v->lock);
    if (status) {
        cfs_buf b = {0};
        cfs_err err;
        if (cfs_volume_read_all(v, ino, &b, &err) == 0)
            out->size = b.len;
        cfs_buf_free(&b);
    }
    return ok ? 0 : -ENOENT;
}

/* ---- listing and content ----------------------------------------------------------------- */

int cfs_volume_readdir(cfs_volume *v, uint64_t ino, uint64_t from,
                       int (*emit)(void *ctx, const char *name, uint64_t ino, bool is_dir,
                                   uint64_t next),
                       void *ctx)
{
    pthread_mutex_lock(&v->lock);
    if (ino < 1 || ino > v->n || (v->v[ino - 1].kind != VN_ROOT && v->v[ino - 1].kind != VN_DIR)) {
        pthread_mutex_unlock(&v->lock);
        return -ENOTDIR;
    }
    if (unpopulated(v, ino)) {
        uint32_t ds = v->v[ino - 1].ds;
        pthread_mutex_unlock(&v->lock);
        cfs_err err = {0};
        int rc = populate(v, ds, &err);
        if (rc < 0) {
            if (rc == -EIO && v->log)
                fprintf(v->log, "cellucid-fs: %s\n", err.msg);
            return rc;
        }
        pthread_mutex_lock(&v->lock);
    }
    const vnode *d = &v->v[ino - 1];
    uint64_t parent_ino = d->kind == VN_DIR ? d->parent : ino;
    uint64_t nfixed = 2 + d->nchildren;
    const cfs_store_node *sn = d->kind == VN_DIR && v->ds[d->ds]->store
                                   ? &v->ds[d->ds]->store->nodes[d->node]
                                   : NULL;
    uint64_t nchunks = sn && sn->is_array ? sn->nchunks : 0;
    for (uint64_t i = from; i < nfixed + nchunks; i++) {
        int full;
        if (i == 0)
            full = emit(ctx, ".", ino, true, i + 1);
        else if (i == 1)
            full = emit(ctx, "..", parent_ino, true, i + 1);
        else if (i < nfixed) {
            const vnode *c = &v->v[d->children[i - 2] - 1];
            full = emit(ctx, c->name, d->children[i - 2], c->kind == VN_DIR, i + 1);
        } else {
            /* Chunk names are listed without making them; their inode comes at lookup, so
             * the listing gives a placeholder number (readdir inodes are informative only). */
            char key[256];
            cfs_store_chunk_key(sn, i - nfixed, key, sizeof key);
            full = emit(ctx, key, (UINT64_C(1) << 62) + i, false, i + 1);
        }
        if (full)
            break;
    }
    pthread_mutex_unlock(&v->lock);
    return 0;
}

/* Text of status.json as cfs_text_shown shows it (names and reasons come from the inputs, and
 * jansson takes UTF-8 alone: a source named in Latin-1 was missing); null for NULL. */
static json_t *shown_json(const char *s)
{
    char *t = s ? cfs_text_shown(s) : NULL;
    json_t *j = t ? json_string(t) : s ? NULL : json_null();
    free(t);
    return j;
}

/* A source whose reader worker was lost: what happened, for status.json. */
static json_t *damage_json(const cfs_reader_fault *f)
{
    return json_pack("{s:s, s:s?, s:s, s:o, s:i}", "what", f->what, "signal",
                     f->signal[0] ? f->signal : NULL, "operation", f->operation, "element",
                     shown_json(f->element[0] ? f->element : NULL), "workers_lost",
                     (int)f->count);
}

/* Why a source is damaged, when it is still served (a worker lost reading one element). */
static void damage_reason(const cfs_reader_fault *f, char *buf, size_t len)
{
    snprintf(buf, len, "its reader %s %s%s: the file is damaged; re-download or re-write it",
             f->what, f->element[0] ? "reading " : "while opening it", f->element);
}

static char *status_text(cfs_volume *v)
{
    json_t *list = json_array();
    pthread_mutex_lock(&v->lock);
    for (size_t i = 0; i < v->nds; i++) {
        if (!v->ds[i]->live)
            continue;
        const cfs_prepared *p = &v->ds[i]->p;
        json_t *left = json_array();
        for (size_t k = 0; p->ds && k < p->ds->nleftout; k++)
            json_array_append_new(left, json_pack("{s:o, s:o}", "element",
                                                  shown_json(p->ds->leftout[k].element),
                                                  "reason",
                                                  shown_json(p->ds->leftout[k].reason)));
        char element[256];
        double fraction = 0;
        bool working = !p->refused && cfs_progress_get(p->progress, element, sizeof element,
                                                       &fraction);
        if (p->pending && !working) {
            snprintf(element, sizeof element, "opening");
            working = true;
        }
        cfs_reader_fault damage = p->damage;
        if (!damage.happened && p->ds)
            cfs_isolated_fault(p->ds, &damage);
        char damaged[512];
        if (damage.happened && !p->refused)
            damage_reason(&damage, damaged, sizeof damaged);
        const char *state = damage.happened ? "damaged" : p->refused ? "refused"
                            : working ? "working" : "ready";
        json_t *e = json_pack("{s:o, s:o*, s:s?, s:s?, s:o, s:s, s:o, s:b, s:o}", "source",
                              shown_json(shown_source(v, p->source)), "object",
                              p->part ? shown_json(p->part) : NULL, "id",
                              p->refused ? NULL : p->id, "format", p->ds ? p->ds->format : NULL,
                              "version", shown_json(p->ds ? p->ds->format_version : NULL),
                              "state", state, "reason",
                              shown_json(p->refused          ? p->refused
                                         : damage.happened ? damaged : NULL),
                              "in_catalog", p->ds && p->embedding, "left_out", left);
        if (damage.happened)
            json_object_set_new(e, "damage", damage_json(&damage));
        cfs_reader_stats asked;
        if (p->ds && cfs_isolated_stats(p->ds, &asked))
            json_object_set_new(e, "reader", json_pack("{s:I, s:I, s:I}", "requests",
                                                       (json_int_t)asked.requests, "rows",
                                                       (json_int_t)asked.rows, "opens",
                                                       (json_int_t)asked.opens));
        if (working)
            json_object_set_new(e, "progress", json_pack("{s:o, s:f}", "element",
                                                         shown_json(element), "fraction",
                                                         fraction));
        if (v->ds[i]->chunk_failure)
            json_object_set_new(e, "chunk_failure", shown_json(v->ds[i]->chunk_failure));
        if (p->ds && !p->embedding)
            json_object_set_new(e, "not_in_catalog",
                                shown_json(p->ds->no_embedding_hint
                                               ? p->ds->no_embedding_hint
                                               : CFS_NO_EMBEDDING_ADVICE));
        json_array_append_new(list, e);
    }
    pthread_mutex_unlock(&v->lock);
    cfs_cache_stats cs;
    cfs_cache_stats_get(v->cache, &cs);
    json_t *doc = json_pack("{s:o, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}}",
                            "sources", list, "cache", "hits", (json_int_t)cs.hits, "misses",
                            (json_int_t)cs.misses, "produced", (json_int_t)cs.produced,
                            "evicted", (json_int_t)cs.evicted, "bytes", (json_int_t)cs.bytes,
                            "entries", (json_int_t)cs.entries, "work_bytes",
                            (json_int_t)cs.work_bytes, "work_dropped",
                            (json_int_t)cfs_space_dropped(v->work_space), "max_bytes",
                            (json_int_t)cs.max_bytes, "store_failures",
                            (json_int_t)cs.store_failures, "dropped", (json_int_t)cs.dropped);
    char *text = doc ? json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(doc);
    return text;
}

int cfs_volume_read_all(cfs_volume *v, uint64_t ino, cfs_buf *out, cfs_err *err)
{
    pthread_mutex_lock(&v->lock);
    if (ino < 1 || ino > v->n) {
        pthread_mutex_unlock(&v->lock);
        return cfs_err_set(err, "no such file");
    }
    vnode n = v->v[ino - 1];
    int rc = 0;
    if (n.kind == VN_DOC || n.kind == VN_CATALOG)
        rc = cfs_buf_append(out, n.text, n.size) < 0 ? cfs_err_oom(err) : 0;
    pthread_mutex_unlock(&v->lock);
    if (n.kind == VN_CHUNK) {
        rc = chunk_bytes(v, n.ds, n.node, n.chunk, out, err);
        if (rc == 0 && out->len != n.size)
            rc = cfs_err_set(err, "chunk %s changed size", n.name);
    } else if (n.kind == VN_STATUS) {
        char *text = status_text(v);
        rc = text && cfs_buf_append(out, text, strlen(text)) == 0 ? 0
                                                                   : cfs_err_oom(err);
        free(text);
    } else if (n.kind == VN_ROOT || n.kind == VN_DIR) {
        rc = cfs_err_set(err, "a folder");
    }
    return rc;
}
