/*
 * The virtual store (docs/design.md §4): renders a dataset model as a consolidated AnnData Zarr v2
 * store. Metadata documents are computed when the store is built (from metadata only); chunk
 * bytes are produced on request. The export writer and the FUSE mount are two front ends over
 * this.
 */
#ifndef CFS_STORE_H
#define CFS_STORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "codec.h"
#include "model.h"

typedef struct cfs_store_opts {
    cfs_codec_id codec;
} cfs_store_opts;

typedef enum cfs_doc_kind { CFS_DOC_ZGROUP, CFS_DOC_ZATTRS, CFS_DOC_ZARRAY } cfs_doc_kind;

typedef struct cfs_store_node {
    char *path;            /* store-relative, "" for the root */
    bool is_array;
    json_t *zattrs;        /* always present, possibly {} */
    json_t *zarray;        /* arrays only */
    /* arrays only: */
    cfs_array *arr;
    int ndim;
    uint64_t shape[CFS_MAX_DIMS];
    uint64_t chunks[CFS_MAX_DIMS];
    uint64_t grid[CFS_MAX_DIMS];
    uint64_t nchunks;
    cfs_codec_id codec;
    size_t elem_size;      /* decoded bytes per element (strings: before framing) */
    unsigned char *fixed;  /* 0-d fixed-width string scalar: its encoded bytes */
    size_t fixed_len;
} cfs_store_node;

typedef struct cfs_store {
    cfs_store_node *nodes;
    size_t nnodes;
    cfs_store_opts opts;
} cfs_store;

/* Builds the store of a dataset; the dataset must outlive the store. */
cfs_store *cfs_store_new(const cfs_dataset *ds, const cfs_store_opts *opts, cfs_err *err);
void cfs_store_free(cfs_store *st);

/* Frees the documents' trees once their text is kept elsewhere (a mount's tree): afterwards
 * cfs_store_doc and cfs_store_zmetadata give NULL, chunks are made as before. */
void cfs_store_drop_docs(cfs_store *st);
/* The serialised document of a node (caller frees); NULL if the node has no such document. */
char *cfs_store_doc(const cfs_store_node *node, cfs_doc_kind kind);
/* The serialised .zmetadata (caller frees). */
char *cfs_store_zmetadata(const cfs_store *st);
/* Key of chunk idx of an array node, relative to the node ("0.1"). */
void cfs_store_chunk_key(const cfs_store_node *node, uint64_t idx, char *buf, size_t len);
/* Appends the encoded bytes of chunk idx of an array node to out. Never partial: on error out
 * is left as it was and err says why. */
int cfs_store_chunk(const cfs_store *st, const cfs_store_node *node, uint64_t idx, cfs_buf *out,
                    cfs_err *err);

#endif
