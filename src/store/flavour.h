/*
 * Store flavours (docs/design.md §4.2): how a store (store.h) is rendered into keys and bytes.
 * A flavour names each node's metadata documents and renders them, and lays out each array's
 * data as keys (one file a chunk, or a shard of many chunks), below the array's folder. Every
 * front end (the mount, export to a folder or to object storage) goes through the one walk
 * here, so a flavour is written once for all of them.
 */
#ifndef CFS_FLAVOUR_H
#define CFS_FLAVOUR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "error.h"
#include "store.h"

typedef struct cfs_flavour cfs_flavour;

/* The flavour of a store written with these options. */
const cfs_flavour *cfs_flavour_of(const cfs_store_opts *opts);
/* A short name saying what the bytes are ("zarr2", ...), for cache identities and logs. */
const char *cfs_flavour_name(const cfs_flavour *fl);

/* ---- the walk ------------------------------------------------------------------------- */

/* What a front end does with a store's keys. Paths are store-relative ("" for the root). */
typedef struct cfs_walker {
    /* A node's folder, before its documents; parents come before their children. */
    int (*folder)(void *ctx, size_t node, const char *path, cfs_err *err);
    /* A document `name` in the folder of a node; text is the walker's to free. */
    int (*doc)(void *ctx, size_t node, const char *path, const char *name, char *text,
               cfs_err *err);
    /* An array's data keys (cfs_flavour_nkeys), once every document has been walked, the
     * arrays in a first view's order (cfs_store_view_order). */
    int (*data)(void *ctx, size_t node, cfs_err *err);
} cfs_walker;

/* Walks every key of st: folders and documents node by node (the root's consolidated metadata
 * among the root's documents), then the arrays' data. Stops at the first callback < 0. The
 * store's attributes must not have been dropped. */
int cfs_flavour_walk(const cfs_flavour *fl, const cfs_store *st, const cfs_walker *w, void *ctx,
                     cfs_err *err);

/* ---- an array's data keys ------------------------------------------------------------ */

/* A folder among an array's data keys: depth 0 is the array's own folder; a flavour whose keys
 * have several parts ("c/0/3") has folders below it, prefix numbering the parts so far. */
typedef struct cfs_keydir {
    uint32_t depth;
    uint64_t prefix;
} cfs_keydir;

typedef enum cfs_key_kind { CFS_KEY_NONE, CFS_KEY_FOLDER, CFS_KEY_FILE } cfs_key_kind;

/* The number of data keys (files) of an array node, numbered 0.. in C order of their grid. */
uint64_t cfs_flavour_nkeys(const cfs_flavour *fl, const cfs_store_node *node);
/* Data key k, relative to the array's folder ("0.3", "c/0/3"). */
void cfs_flavour_key(const cfs_flavour *fl, const cfs_store_node *node, uint64_t k, char *buf,
                     size_t len);
/* What `name` is in the data folder dir: a folder (*child), a key (*k) or nothing. Only the
 * canonical name of a key is one: "01" is not "1". */
cfs_key_kind cfs_flavour_lookup(const cfs_flavour *fl, const cfs_store_node *node, cfs_keydir dir,
                                const char *name, cfs_keydir *child, uint64_t *k);
/* The number of entries of the data folder dir, and entry i of it (its name in buf). */
uint64_t cfs_flavour_nentries(const cfs_flavour *fl, const cfs_store_node *node, cfs_keydir dir);
cfs_key_kind cfs_flavour_entry(const cfs_flavour *fl, const cfs_store_node *node, cfs_keydir dir,
                               uint64_t i, char *buf, size_t len, cfs_keydir *child,
                               uint64_t *k);
/* Appends the bytes of data key k (a chunk, or a whole shard) to out; never partial: on error
 * out is as it was and err says why. */
int cfs_flavour_key_bytes(const cfs_flavour *fl, const cfs_store *st, const cfs_store_node *node,
                          uint64_t k, cfs_buf *out, cfs_err *err);

#endif
