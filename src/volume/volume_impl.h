/* What volume.c and datakeys.c share: the tree's nodes, the dataset entries and the volume
 * itself, and the helpers both use. Not for other layers. */
#ifndef CFS_VOLUME_IMPL_H
#define CFS_VOLUME_IMPL_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "copies.h"
#include "flavour.h"
#include "prepare.h"
#include "session.h"
#include "space.h"
#include "sources.h"
#include "volume.h"

/* VN_DIR is a store node's folder, VN_KEYDIR a folder among an array's data keys (a flavour's
 * "c/0/" of "c/0/3"), VN_CHUNK a data key: one chunk, or a shard of many. VN_SESSION is a
 * dataset's published view beside its store (sessions.c). */
typedef enum vn_kind {
    VN_ROOT, VN_CATALOG, VN_STATUS, VN_DIR, VN_DOC, VN_KEYDIR, VN_CHUNK, VN_SESSION
} vn_kind;

/* The depth a data key has in the map of made inodes (key folders have theirs, from 1). */
#define KEY_DEPTH UINT32_MAX

typedef struct vnode {
    vn_kind kind;
    uint32_t ds;            /* prepared dataset index */
    uint32_t node;          /* store node index (VN_DIR, VN_DOC, VN_KEYDIR, VN_CHUNK) */
    uint32_t depth;         /* VN_KEYDIR: its depth below the array's folder */
    uint64_t chunk;         /* VN_CHUNK: the data key; VN_KEYDIR: the parts before it */
    char *name;
    char *text;             /* VN_CATALOG, VN_DOC, VN_SESSION: the bytes (a replaced view's
                             * are freed: NULL) */
    uint64_t size;
    uint64_t *children;     /* folders (not chunks): inos, in listing order */
    size_t nchildren;
    uint64_t parent;
    struct timespec mtime;  /* nodes outside a store: when they last changed */
} vnode;

/* The inodes of data keys and key folders made so far: (ds, node, depth, key or prefix). */
typedef struct chunk_slot {
    uint64_t key;           /* (ds, node, depth, chunk) hashed */
    uint32_t ds, node, depth;
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
    cfs_session session;        /* its published view as last found (sessions.c) */
    uint64_t session_ino;       /* <id>.cellucid-session serving session.bytes, 0 if none */
    uint64_t session_prev_ino;  /* the version it replaced, still readable (sessions.c) */
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
    uint64_t catalog_ino;       /* datasets.json now: a new node for each version */
    uint64_t catalog_prev_ino;  /* the version before, still readable */
    char *src;
    FILE *log;
    cfs_cache *cache;
    cfs_space *work_space;      /* the layout's work files count against the cache's bound */
    cfs_copies *copies;         /* decompressed copies of compressed sources; NULL: none */
    pthread_t unpacker;         /* opens the sources waiting for their copy, once mounted */
    bool unpacker_started;
    cfs_options opts;
    const cfs_flavour *fl;      /* how every store is rendered into keys and bytes */
    cfs_detector *detector;     /* which entries of src are inputs, kept from scan to scan */
    void (*invalidate)(void *ctx, uint64_t parent, const char *name, uint64_t ino);
    void *invalidate_ctx;
};

static inline bool cfs_vol_is_folder(vn_kind kind)
{
    return kind == VN_ROOT || kind == VN_DIR || kind == VN_KEYDIR;
}

/* Root entries whose kernel entries must be dropped once the lock is released. */
typedef struct stale_names {
    char **names;
    size_t n;
} stale_names;

/* Under the lock, all of them. */
uint64_t cfs_vol_add_vnode(cfs_volume *v, vnode n);     /* its ino; 0 when out of memory */
/* n as a child of parent (n's name and text are freed when it cannot be): its ino, or 0. */
uint64_t cfs_vol_add_file(cfs_volume *v, uint64_t parent, vnode n);
void cfs_vol_remove_child(cfs_volume *v, uint64_t parent, uint64_t child);
/* A root file *current replaced by its new version fresh (a node of the root not listed in it
 * yet; 0: by nothing), at its place: *current keeps its bytes for a reader that looked it up
 * just before, as *prev, whose own bytes go (a read of it then fails). -1 when out of memory. */
int cfs_vol_replace_version(cfs_volume *v, uint64_t *current, uint64_t *prev, uint64_t fresh);
void cfs_vol_note_stale(stale_names *s, const char *name);
/* Makes datasets.json anew from the live entries (their sessions as they are now). */
int cfs_vol_publish_catalog(cfs_volume *v, stale_names *stale);
void cfs_vol_attr_of(const cfs_volume *v, uint64_t ino, cfs_vattr *a);
/* Frees a retired version's store and reader once nothing uses them. */
void cfs_vol_close_if_idle(ds_entry *e);
/* A source as status.json and the log show it: below SRC. */
const char *cfs_vol_shown_source(const cfs_volume *v, const char *source);
bool cfs_vol_same_version(const struct stat *a, const struct stat *b);

/* sessions.c: the published views beside the stores. */
/* Without the lock: the views of the datasets of set not served yet (not `reused`), read before
 * they are taken in; views[i] is set[i]'s. -1 only when out of memory. */
int cfs_vol_sessions_of_new(cfs_volume *v, const cfs_prepared_set *set, cfs_session *views,
                            cfs_err *err);
/* Under the lock: e's view is now s (moved into e), served beside its store when listed. */
void cfs_vol_session_adopt(cfs_volume *v, ds_entry *e, cfs_session *s, stale_names *stale);
/* Under the lock: e leaves the tree; so does its view. */
void cfs_vol_session_retire(cfs_volume *v, ds_entry *e, stale_names *stale);
/* Without the lock: finds the views of the live entries that were added, changed or removed
 * since, takes them in and republishes datasets.json if so. */
int cfs_vol_sessions_refresh(cfs_volume *v, stale_names *stale, cfs_err *err);
/* Under the lock: e's view as status.json shows it, or NULL when it has none. */
json_t *cfs_vol_session_status(const cfs_volume *v, const ds_entry *e);

/* datakeys.c: an array's data keys in the tree. */
/* Whether p (a node's folder or a key folder) lists data keys: its array node and data folder. */
bool cfs_vol_data_folder(const cfs_volume *v, const vnode *p, const cfs_store_node **sn,
                         cfs_keydir *dir);
/* Called with the lock held, returns without it: `name` among the data keys of the folder
 * parent; a key folder or a data key is made at its first lookup. 0, -ENOENT or -EIO. */
int cfs_vol_lookup_key(cfs_volume *v, uint64_t parent, const char *name, cfs_vattr *out,
                       cfs_err *err);
/* Without the lock: the bytes of data key idx of a store node, through the cache. */
int cfs_vol_key_bytes(cfs_volume *v, uint32_t ds, uint32_t node, uint64_t idx, cfs_buf *out,
                      cfs_err *err);

#endif
