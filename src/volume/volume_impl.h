/* What volume.c and datakeys.c share: the tree's nodes, the dataset entries and the volume
 * itself, and the helpers both use. Not for other layers. */
#ifndef CFS_VOLUME_IMPL_H
#define CFS_VOLUME_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "copies.h"
#include "flavour.h"
#include "prepare.h"
#include "space.h"
#include "sources.h"
#include "volume.h"

/* VN_DIR is a store node's folder, VN_KEYDIR a folder among an array's data keys (a flavour's
 * "c/0/" of "c/0/3"), VN_CHUNK a data key: one chunk, or a shard of many. */
typedef enum vn_kind {
    VN_ROOT, VN_CATALOG, VN_STATUS, VN_DIR, VN_DOC, VN_KEYDIR, VN_CHUNK
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
    char *text;             /* VN_CATALOG and VN_DOC: the bytes */
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
    const cfs_flavour *fl;      /* how every store is rendered into keys and bytes */
    cfs_detector *detector;     /* which entries of src are inputs, kept from scan to scan */
    void (*invalidate)(void *ctx, uint64_t parent, const char *name, uint64_t ino);
    void *invalidate_ctx;
};

static inline bool cfs_vol_is_folder(vn_kind kind)
{
    return kind == VN_ROOT || kind == VN_DIR || kind == VN_KEYDIR;
}

/* Under the lock, all of them. */
uint64_t cfs_vol_add_vnode(cfs_volume *v, vnode n);     /* its ino; 0 when out of memory */
void cfs_vol_attr_of(const cfs_volume *v, uint64_t ino, cfs_vattr *a);
/* Frees a retired version's store and reader once nothing uses them. */
void cfs_vol_close_if_idle(ds_entry *e);
/* A source as status.json and the log show it: below SRC. */
const char *cfs_vol_shown_source(const cfs_volume *v, const char *source);
bool cfs_vol_same_version(const struct stat *a, const struct stat *b);

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
