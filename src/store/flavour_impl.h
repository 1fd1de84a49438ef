/* What a flavour is made of (flavour.c walks and names keys with it; zarr_v2.c, ... fill it). */
#ifndef CFS_FLAVOUR_IMPL_H
#define CFS_FLAVOUR_IMPL_H

#include "flavour.h"

struct cfs_flavour {
    const char *name;
    /* Data keys: parts joined by key_sep ('.': one name "0.3"; '/': a folder a part), after
     * key_prefix if any ("c/0/3"); a 0-d array's one key is key_prefix, else "0". */
    const char *key_prefix;
    char key_sep;
    /* The documents of a node, each given to w->doc. */
    int (*node_docs)(const cfs_store *st, size_t node, const cfs_walker *w, void *ctx,
                     cfs_err *err);
    /* Data files along each axis (NULL: one a chunk, the chunk grid). */
    void (*data_grid)(const cfs_store_node *n, uint64_t *grid);
    /* The bytes of data key k (NULL: chunk k). */
    int (*data_bytes)(const cfs_store *st, const cfs_store_node *n, uint64_t k, cfs_buf *out,
                      cfs_err *err);
};

extern const cfs_flavour cfs_flavour_zarr_v2;

#endif
