/*
 * The store (docs/design.md §4): a dataset model described as the nodes of a consolidated
 * AnnData Zarr store (groups and arrays with their attributes, each array's element form, shape,
 * chunk grid and codec) and the encoded bytes of each chunk, made on request. The description is
 * neutral to the Zarr format: a flavour (flavour.h) renders it into keys and bytes. It is built
 * with the AnnData encodings the target format writes (opts.format), as anndata does. The
 * export writer and the FUSE mount are two front ends over this.
 */
#ifndef CFS_STORE_H
#define CFS_STORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "codec.h"
#include "model.h"

/* The Zarr format a store is written for (0 is v2, the default). */
typedef enum cfs_zarr_format { CFS_ZARR_V2 = 2, CFS_ZARR_V3 = 3 } cfs_zarr_format;

typedef struct cfs_store_opts {
    cfs_codec_id codec;
    cfs_zarr_format format;     /* 0: CFS_ZARR_V2 */
    bool shards;                /* v3: arrays are sharded (flavour.h) */
} cfs_store_opts;

/* How an array's elements are laid out in its chunks. */
typedef enum cfs_store_elem {
    CFS_ELEM_NUMERIC,       /* numbers or bools, little endian (dtype) */
    CFS_ELEM_STRING,        /* UTF-8 strings, vlen-utf8 framed */
    CFS_ELEM_FIXED_STRING,  /* a 0-d string as fixed-width UTF-32 (numpy's <U), as anndata on
                             * zarr-python 2 writes string scalars */
    CFS_ELEM_RECORDS        /* records: numeric fields, string fields as fixed-width UTF-32 */
} cfs_store_elem;

typedef struct cfs_store_node {
    char *path;            /* store-relative, "" for the root */
    bool is_array;
    json_t *attrs;         /* always present, possibly {}; NULL once dropped */
    /* arrays only: */
    cfs_array *arr;
    cfs_store_elem elem;
    int ndim;
    uint64_t shape[CFS_MAX_DIMS];
    uint64_t chunks[CFS_MAX_DIMS];
    uint64_t grid[CFS_MAX_DIMS];
    uint64_t nchunks;
    cfs_codec_id codec;    /* none for 0-d arrays: scalars are stored raw */
    size_t elem_size;      /* decoded bytes per element (strings: before framing) */
    unsigned char *fixed;  /* CFS_ELEM_FIXED_STRING: its encoded bytes (4 a code point) */
    size_t fixed_len;
} cfs_store_node;

typedef struct cfs_store {
    cfs_store_node *nodes;  /* parents before their children, the root first */
    size_t nnodes;
    cfs_store_opts opts;
} cfs_store;

/* Builds the store of a dataset; the dataset must outlive the store. */
cfs_store *cfs_store_new(const cfs_dataset *ds, const cfs_store_opts *opts, cfs_err *err);
void cfs_store_free(cfs_store *st);

/* Frees the attributes once the rendered documents are kept elsewhere (a mount's tree):
 * afterwards no document can be rendered; chunks are made as before. */
void cfs_store_drop_docs(cfs_store *st);
/* The node's parent (the node whose path is this one's without its last part); the root's
 * is itself. */
size_t cfs_store_parent(const cfs_store *st, size_t node);
/* Node indices in the order a first view reads their chunks (consolidated metadata comes
 * before any chunk): the obs index and columns, obsm, the var index and columns, then the rest
 * in store order. order has st->nnodes entries. */
void cfs_store_view_order(const cfs_store *st, size_t *order);
/* Appends the encoded bytes of chunk idx (C order over the grid) of an array node to out.
 * Never partial: on error out is left as it was and err says why. */
int cfs_store_chunk(const cfs_store *st, const cfs_store_node *node, uint64_t idx, cfs_buf *out,
                    cfs_err *err);

#endif
