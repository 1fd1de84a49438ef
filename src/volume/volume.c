#include "volume_impl.h"
#include "remote.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "catalog.h"
#include "copies.h"
#include "flavour.h"
#include "path.h"
#include "prepare.h"
#include "sources.h"
#include "spill.h"
#include "store.h"
#include "strfmt.h"
#include "strset.h"
#include "utf8.h"

uint64_t cfs_vol_add_vnode(cfs_volume *v, vnode n)
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

uint64_t cfs_vol_add_file(cfs_volume *v, uint64_t parent, vnode n)
{
    n.parent = parent;
    uint64_t ino = n.name ? cfs_vol_add_vnode(v, n) : 0;
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
    return cfs_vol_add_file(v, parent, n);
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
    return (v->ds[ds]->dir_ino = cfs_vol_add_file(v, CFS_VOLUME_ROOT, d)) ? 0 : -1;
}

/* The walk that puts a store into the tree: its nodes' folders and documents (data keys
 * appear at lookup). */
typedef struct tree_walk {
    cfs_volume *v;
    uint32_t ds;
    const cfs_store *st;
    uint64_t *dir_of;       /* per store node: its folder's inode */
} tree_walk;

static int tree_folder(void *ctx, size_t node, const char *path, cfs_err *err)
{
    tree_walk *t = ctx;
    if (node == 0) {
        t->dir_of[0] = t->v->ds[t->ds]->dir_ino;
        return 0;
    }
    uint64_t parent = t->dir_of[cfs_store_parent(t->st, node)];
    vnode d = {.kind = VN_DIR, .ds = t->ds, .node = (uint32_t)node,
               .name = strdup(last_component(path))};
    return (t->dir_of[node] = cfs_vol_add_file(t->v, parent, d)) ? 0 : cfs_err_oom(err);
}

static int tree_doc(void *ctx, size_t node, const char *path, const char *name, char *text,
                    cfs_err *err)
{
    (void)path;
    tree_walk *t = ctx;
    return add_doc(t->v, t->dir_of[node], t->ds, (uint32_t)node, name, text) ? 0
                                                                               : cfs_err_oom(err);
}

static int tree_data(void *ctx, size_t node, cfs_err *err)
{
    (void)ctx;
    (void)node;
    (void)err;
    return 0;
}

/* Under the lock: one dataset's store, in its folder, as folders and metadata files. */
static int add_store(cfs_volume *v, uint32_t ds, cfs_err *err)
{
    const cfs_store *st = v->ds[ds]->store;
    tree_walk t = {v, ds, st, calloc(st->nnodes ? st->nnodes : 1, sizeof *t.dir_of)};
    static const cfs_walker walker = {tree_folder, tree_doc, tree_data};
    int rc = t.dir_of ? cfs_flavour_walk(v->fl, st, &walker, &t, err) : cfs_err_oom(err);
    free(t.dir_of);
    return rc;
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

/* The datasets datasets.json lists, with the views served beside them (caller frees). */
static cfs_catalog_entry *catalog_entries(const cfs_volume *v, size_t *n)
{
    cfs_catalog_entry *list = calloc(v->nds + 1, sizeof *list);
    *n = 0;
    for (size_t i = 0; list && i < v->nds; i++) {
        const ds_entry *e = v->ds[i];
        if (!e->live || !e->served || !e->p.embedding)
            continue;
        bool view = e->session_ino != 0;    /* served: its bytes are the node's */
        list[(*n)++] = (cfs_catalog_entry){e->p.id, view ? e->session.sha256 : NULL,
                                           e->session.len};
    }
    return list;
}

static char *catalog_text(const cfs_volume *v)
{
    size_t n;
    cfs_catalog_entry *list = catalog_entries(v, &n);
    char *text = list ? cfs_catalog_json(list, n, v->opts.default_id) : NULL;
    free(list);
    return text;
}

bool cfs_vol_same_version(const struct stat *a, const struct stat *b)
{
    return cfs_same_version(a, b);
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
        if (same_part(v->ds[k]->p.part, part) && cfs_vol_same_version(&v->ds[k]->version, version))
            return k;
    return -1;
}

/* How many live entries the source has at this version (several: one per part). */
static size_t live_count(const cfs_volume *v, const live_index *ix, const char *source,
                         const struct stat *version)
{
    size_t n = 0;
    for (ptrdiff_t k = first_live(v, ix, source); k >= 0; k = next_live(v, ix, k))
        n += cfs_vol_same_version(&v->ds[k]->version, version);
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

void cfs_vol_remove_child(cfs_volume *v, uint64_t parent, uint64_t child)
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

void cfs_vol_note_stale(stale_names *s, const char *name)
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
const char *cfs_vol_shown_source(const cfs_volume *v, const char *source)
{
    return cfs_path_shown(v->src, source);
}

/* Under the lock: takes a freshly opened version in as a new live entry. Its version is the
 * stat taken before opening: a file changed during the open then differs at the next pass. */
static int adopt(cfs_volume *v, cfs_prepared *p, cfs_session *view, const struct stat *before,
                 stale_names *stale)
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
    cfs_prepared_report(&e->p, cfs_vol_shown_source(v, e->p.source), v->log);
    if (e->served) {
        if (add_store_folder(v, idx, e->p.id) < 0)
            return -1;
        cfs_vol_note_stale(stale, v->v[e->dir_ino - 1].name);
    }
    cfs_vol_session_adopt(v, e, view, stale);
    return 0;
}

/* Under the lock: frees a retired version's store and reader once nothing uses them. Its file
 * may have been rewritten in place, so it must not be read again (and libhdf5 would hand the
 * stale open file to the next open of the same inode). */
void cfs_vol_close_if_idle(ds_entry *e)
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
        cfs_store_opts sopts = cfs_options_store(&v->opts);
        st = cfs_store_new(e->p.ds, &sopts, err);
        pthread_mutex_lock(&v->lock);
        e->active--;
        if (st && e->live) {
            e->store = st;
            rc = add_store(v, ds, err) == 0 ? 0 : -EIO;
            e->populated = rc == 0;
            cfs_store_drop_docs(st);
        } else {
            cfs_store_free(st);
            rc = st ? -ENOENT : -EIO;
        }
        cfs_vol_close_if_idle(e);
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
    if (v->copies &&
        !(cfs_source_stat(e->p.source, &now) == 0 && cfs_vol_same_version(&now, &e->version)))
        cfs_copies_retire(v->copies, e->p.source, &e->version);
    if (e->dir_ino) {
        cfs_vol_remove_child(v, CFS_VOLUME_ROOT, e->dir_ino);
        cfs_vol_note_stale(stale, v->v[e->dir_ino - 1].name);
    }
    cfs_vol_session_retire(v, e, stale);
    cfs_vol_close_if_idle(e);
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
            current = cfs_vol_same_version(&now[*at], &e->version);
        for (size_t i = 0; !listed && i < sources->n && !current; i++)
            current = strcmp(sources->paths[i], e->p.source) == 0 &&
                      cfs_vol_same_version(&now[i], &e->version);
        if (!current)
            retire(v, e, stale);
    }
    cfs_strset_free(listed);
}

static int merge(cfs_volume *v, cfs_prepared_set *set, cfs_session *views,
                 const struct stat *before, stale_names *stale)
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
        rc = adopt(v, p, &views[i], &before[p->from], stale);
    }
    live_index_free(&ix);
    for (size_t k = 0; k < old; k++)
        if (v->ds[k]->live && !keep[k])
            retire(v, v->ds[k], stale);
    free(keep);
    return cfs_vol_publish_catalog(v, stale) < 0 ? -1 : rc;
}

int cfs_vol_replace_version(cfs_volume *v, uint64_t *current, uint64_t *prev, uint64_t fresh)
{
    vnode *root = &v->v[CFS_VOLUME_ROOT - 1];
    size_t at = root->nchildren;
    for (size_t i = 0; *current && i < root->nchildren; i++)
        if (root->children[i] == *current)
            at = i;
    if (fresh && at < root->nchildren)
        root->children[at] = fresh;
    else if (at < root->nchildren)
        cfs_vol_remove_child(v, CFS_VOLUME_ROOT, *current);
    else if (fresh && add_child(v, CFS_VOLUME_ROOT, fresh) < 0)
        return -1;
    if (*prev) {
        free(v->v[*prev - 1].text);
        v->v[*prev - 1].text = NULL;
    }
    *prev = *current;
    *current = fresh;
    return 0;
}

/* A new version is a new node (docs/design.md §8): the kernel looks the name up again at each
 * open, and an inode's bytes never change under a reader. */
int cfs_vol_publish_catalog(cfs_volume *v, stale_names *stale)
{
    char *text = catalog_text(v);
    if (!text)
        return -1;
    const char *now = v->v[v->catalog_ino - 1].text;
    if (now && strcmp(now, text) == 0) {
        free(text);
        return 0;
    }
    vnode fresh = {.kind = VN_CATALOG, .name = strdup("datasets.json"), .text = text,
                   .size = strlen(text), .parent = CFS_VOLUME_ROOT};
    /* Its ETag (mtime + size) must change whenever its bytes do. */
    clock_gettime(CLOCK_REALTIME, &fresh.mtime);
    uint64_t ino = fresh.name ? cfs_vol_add_vnode(v, fresh) : 0;
    if (!ino) {
        free(fresh.name);
        free(text);
        return -1;
    }
    if (cfs_vol_replace_version(v, &v->catalog_ino, &v->catalog_prev_ino, ino) < 0)
        return -1;
    v->v[CFS_VOLUME_ROOT - 1].mtime = fresh.mtime;
    cfs_vol_note_stale(stale, "datasets.json");
    return 0;
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
            if (cfs_vol_same_version(&v->ds[k]->version, &now[i])) {
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
            if (cfs_vol_same_version(&e->version, &now[i]))
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

/* Takes in what changed among the sources: opens the new and changed ones (reading metadata
 * only, outside the lock, so serving goes on meanwhile) with their views, and retires what
 * left. */
static int refresh_sources(cfs_volume *v, const cfs_source_list *sources, stale_names *stale,
                           cfs_err *err)
{
    cfs_prepared_set set = {0};
    struct stat *before = calloc(sources->n + 1, sizeof *before);
    for (size_t i = 0; before && i < sources->n; i++)
        cfs_source_stat(sources->paths[i], &before[i]);
    cfs_known_source *known = before ? calloc(sources->n + 1, sizeof *known) : NULL;
    if (known) {
        pthread_mutex_lock(&v->lock);
        retire_changed(v, sources, before, stale);
        if (note_known(v, sources, before, known) < 0) {
            known_free(known, sources->n);
            known = NULL;
        }
        pthread_mutex_unlock(&v->lock);
    }
    int rc = known ? cfs_prepare_reusing(sources, &v->opts, known, &set, err)
                   : cfs_err_oom(err);
    known_free(known, sources->n);
    cfs_session *views = rc == 0 ? calloc(set.n + 1, sizeof *views) : NULL;
    if (rc == 0 && (!views || cfs_vol_sessions_of_new(v, &set, views, err) < 0))
        rc = cfs_err_oom(err);
    pthread_mutex_lock(&v->lock);
    if (rc == 0 && merge(v, &set, views, before, stale) < 0)
        rc = cfs_err_oom(err);
    pthread_mutex_unlock(&v->lock);
    for (size_t i = 0; views && i < set.n; i++)
        cfs_session_clear(&views[i]);       /* those not taken in */
    free(views);
    free(before);
    cfs_prepared_set_free(&set);
    return rc;
}

/* Drops the kernel's entries of what changed (a negative one of a name that now exists too):
 * datasets.json last, after the stores and views it names. */
static void invalidate_stale(cfs_volume *v, stale_names *stale)
{
    for (int catalog = 0; catalog < 2; catalog++)
        for (size_t i = 0; i < stale->n; i++) {
            bool is_catalog = strcmp(stale->names[i], "datasets.json") == 0;
            if (is_catalog == (catalog == 1) && v->invalidate)
                v->invalidate(v->invalidate_ctx, CFS_VOLUME_ROOT, stale->names[i], 0);
        }
    for (size_t i = 0; i < stale->n; i++)
        free(stale->names[i]);
    free(stale->names);
}

int cfs_volume_refresh(cfs_volume *v, cfs_err *err)
{
    pthread_mutex_lock(&v->refreshing);
    cfs_source_list sources;
    int rc = cfs_sources_list(v->src, v->detector, &sources, err);
    pthread_mutex_lock(&v->lock);
    bool same = rc == 0 && v->catalog_ino && unchanged(v, &sources);
    pthread_mutex_unlock(&v->lock);
    stale_names stale = {0};
    if (rc == 0 && !same)
        rc = refresh_sources(v, &sources, &stale, err);
    /* A view changes without its source: looked at on every pass (a stat each). */
    if (rc == 0)
        rc = cfs_vol_sessions_refresh(v, &stale, err);
    invalidate_stale(v, &stale);
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
    if (!root.name || cfs_vol_add_vnode(v, root) != CFS_VOLUME_ROOT)
        return cfs_err_oom(err);
    vnode cat = {.kind = VN_CATALOG, .name = strdup("datasets.json"), .text = catalog_text(v)};
    vnode status = {.kind = VN_STATUS, .name = strdup("status.json")};
    if (!cat.text)
        return cfs_err_oom(err);
    cat.size = strlen(cat.text);
    clock_gettime(CLOCK_REALTIME, &cat.mtime);
    v->v[CFS_VOLUME_ROOT - 1].mtime = cat.mtime;
    status.mtime = cat.mtime;
    v->catalog_ino = cfs_vol_add_file(v, CFS_VOLUME_ROOT, cat);
    if (!v->catalog_ino || !cfs_vol_add_file(v, CFS_VOLUME_ROOT, status))
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
    cfs_store_opts sopts = cfs_options_store(opts);
    v->fl = cfs_flavour_of(&sopts);
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
        cfs_session_clear(&e->session);
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

void cfs_vol_attr_of(const cfs_volume *v, uint64_t ino, cfs_vattr *a)
{
    const vnode *n = &v->v[ino - 1];
    memset(a, 0, sizeof *a);
    a->ino = ino;
    a->is_dir = cfs_vol_is_folder(n->kind);
    a->size = n->size;
    a->volatile_size = n->kind == VN_STATUS;
    a->volatile_name = n->kind == VN_CATALOG || n->kind == VN_SESSION;
    /* Per source version: an ETag (mtime + size) changes exactly when the source does. */
    if (n->kind == VN_DIR || n->kind == VN_DOC || n->kind == VN_KEYDIR || n->kind == VN_CHUNK)
        a->mtime = v->ds[n->ds]->version.st_mtim;
    else
        a->mtime = n->mtime;
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
    if (!cfs_vol_is_folder(p->kind)) {
        pthread_mutex_unlock(&v->lock);
        return -ENOTDIR;
    }
    for (size_t i = 0; i < p->nchildren; i++) {
        if (strcmp(v->v[p->children[i] - 1].name, name) == 0) {
            cfs_vol_attr_of(v, p->children[i], out);
            pthread_mutex_unlock(&v->lock);
            return 0;
        }
    }
    return cfs_vol_lookup_key(v, parent, name, out, err);
}

int cfs_volume_getattr(cfs_volume *v, uint64_t ino, cfs_vattr *out)
{
    pthread_mutex_lock(&v->lock);
    int ok = ino >= 1 && ino <= v->n;
    if (ok)
        cfs_vol_attr_of(v, ino, out);
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
    if (ino < 1 || ino > v->n || !cfs_vol_is_folder(v->v[ino - 1].kind)) {
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
    uint64_t parent_ino = d->kind == VN_ROOT ? ino : d->parent;
    uint64_t nfixed = 2 + d->nchildren;
    const cfs_store_node *sn = NULL;
    cfs_keydir dir = {0, 0};
    uint64_t nkeys =
        cfs_vol_data_folder(v, d, &sn, &dir) ? cfs_flavour_nentries(v->fl, sn, dir) : 0;
    for (uint64_t i = from; i < nfixed + nkeys; i++) {
        int full;
        if (i == 0)
            full = emit(ctx, ".", ino, true, i + 1);
        else if (i == 1)
            full = emit(ctx, "..", parent_ino, true, i + 1);
        else if (i < nfixed) {
            const vnode *c = &v->v[d->children[i - 2] - 1];
            full = emit(ctx, c->name, d->children[i - 2], cfs_vol_is_folder(c->kind), i + 1);
        } else {
            /* Data keys are listed without making them; their inode comes at lookup, so the
             * listing gives a placeholder number (readdir inodes are informative only). */
            char key[256];
            cfs_keydir child;
            uint64_t k;
            cfs_key_kind kind = cfs_flavour_entry(v->fl, sn, dir, i - nfixed, key, sizeof key,
                                                  &child, &k);
            full = emit(ctx, key, (UINT64_C(1) << 62) + i, kind == CFS_KEY_FOLDER, i + 1);
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

/* Under the lock: the dataset datasets.json opens on, and why it is not the one -o default
 * names when it is not. */
static json_t *catalog_status(const cfs_volume *v)
{
    size_t n;
    cfs_catalog_entry *list = catalog_entries(v, &n);
    const char *wanted = v->opts.default_id;
    const char *chosen = list ? cfs_catalog_default(list, n, wanted) : NULL;
    char *note = list ? cfs_catalog_default_note(list, n, wanted) : NULL;
    json_t *j = json_pack("{s:s?, s:s?, s:s?}", "default", chosen, "default_asked",
                          wanted[0] ? wanted : NULL, "default_note", note);
    free(note);
    free(list);
    return j;
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
                              shown_json(cfs_vol_shown_source(v, p->source)), "object",
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
        json_t *view = cfs_vol_session_status(v, v->ds[i]);
        if (view)
            json_object_set_new(e, "session", view);
        json_array_append_new(list, e);
    }
    json_t *catalog = catalog_status(v);
    pthread_mutex_unlock(&v->lock);
    cfs_cache_stats cs;
    cfs_cache_stats_get(v->cache, &cs);
    json_t *doc = json_pack("{s:o, s:o, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
                            "s:I}}", "sources", list, "catalog", catalog, "cache",
                            "hits", (json_int_t)cs.hits, "misses", (json_int_t)cs.misses,
                            "produced", (json_int_t)cs.produced, "evicted",
                            (json_int_t)cs.evicted, "bytes", (json_int_t)cs.bytes, "entries",
                            (json_int_t)cs.entries, "work_bytes", (json_int_t)cs.work_bytes,
                            "work_dropped", (json_int_t)cfs_space_dropped(v->work_space),
                            "max_bytes", (json_int_t)cs.max_bytes, "store_failures",
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
    if ((n.kind == VN_DOC || n.kind == VN_CATALOG || n.kind == VN_SESSION) && n.text)
        rc = cfs_buf_append(out, n.text, n.size) < 0 ? cfs_err_oom(err) : 0;
    else if (n.kind == VN_CATALOG || n.kind == VN_SESSION)  /* replaced twice, bytes let go */
        rc = cfs_err_set(err, "%s: replaced by newer versions; read it again", n.name);
    pthread_mutex_unlock(&v->lock);
    if (n.kind == VN_CHUNK) {
        rc = cfs_vol_key_bytes(v, n.ds, n.node, n.chunk, out, err);
        if (rc == 0 && out->len != n.size)
            rc = cfs_err_set(err, "chunk %s changed size", n.name);
    } else if (n.kind == VN_STATUS) {
        char *text = status_text(v);
        rc = text && cfs_buf_append(out, text, strlen(text)) == 0 ? 0
                                                                   : cfs_err_oom(err);
        free(text);
    } else if (cfs_vol_is_folder(n.kind)) {
        rc = cfs_err_set(err, "a folder");
    }
    return rc;
}
