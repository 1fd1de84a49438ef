/*
 * The metadata of a Zarr store in a folder or a zip (zarr_backend.h;
 * ../shared/reference/zarr-anndata-fuse.md §2): which nodes are groups and which arrays, their
 * attributes, and an array's description (shape, chunks, data type, element order, chunk keys,
 * codecs, fill value), the same for Zarr v2 (.zgroup, .zarray, .zattrs) and Zarr v3 (zarr.json,
 * node_type, attributes, codecs), which the layers above never tell apart. Consolidated
 * metadata (v2: a root .zmetadata; v3: "consolidated_metadata" inside the root's zarr.json) is
 * used when present, each key it lacks read from its own file. Every file is opened read-only,
 * and nothing is read through a symlink leading out of the store's folder.
 */
#ifndef CFS_ZARR_META_H
#define CFS_ZARR_META_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct zr_store zr_store;

/* The store at path (a folder, a zip, or their URL): reads its consolidated metadata when there
 * is some. -1 with the reason if the folder cannot be resolved, its consolidated metadata is
 * not that, or it is a folder URL without any (refused: HTTP lists no folder). */
int zr_store_open(const char *path, zr_store **out, cfs_err *err);
/* The group at rel of an open store, as a store of its own: its keys are read under rel from
 * the same folder or zip, with the same consolidated metadata. It holds a reference to parent.
 * -1 with the reason when rel is no group. */
int zr_store_group(zr_store *parent, const char *rel, zr_store **out, cfs_err *err);
/* Another reference to s: each is let go by zr_store_free. */
zr_store *zr_store_ref(zr_store *s);
void zr_store_free(zr_store *s);
bool zr_store_consolidated(const zr_store *s);
/* 2 or 3: the store's Zarr format (a root zarr.json makes it 3). */
int zr_store_version(const zr_store *s);
/* Whether the store is read from a zip file. */
bool zr_store_zipped(const zr_store *s);

typedef enum zr_kind { ZR_NONE, ZR_GROUP, ZR_ARRAY } zr_kind;

/* What the node at rel ("" for the root, "obs/_index" ...) is. */
zr_kind zr_node_kind(const zr_store *s, const char *rel);
/* The node's .zattrs (a new reference; an empty object when it has none). -1 with the reason
 * when it is not a JSON object. */
int zr_attrs(const zr_store *s, const char *rel, json_t **out, cfs_err *err);
/* The names of the group's child nodes (groups and arrays), sorted (strcmp). */
int zr_children(const zr_store *s, const char *rel, char ***names, size_t *n, cfs_err *err);
void zr_names_free(char **names, size_t n);
/* The whole file at rel: 1 with *data (malloc'd) and *len, 0 if there is none, -1 with the
 * reason if it cannot be read (or lies behind a symlink out of the store). */
int zr_file_read(const zr_store *s, const char *rel, unsigned char **data, size_t *len,
                 cfs_err *err);

typedef enum zr_tkind {
    ZR_T_BOOL, ZR_T_INT, ZR_T_UINT, ZR_T_FLOAT, ZR_T_UNICODE, ZR_T_BYTES, ZR_T_OBJECT
} zr_tkind;

typedef enum zr_object_codec { ZR_VLEN_NONE, ZR_VLEN_UTF8, ZR_VLEN_BYTES } zr_object_codec;

/* An array's metadata (.zarray or zarr.json), checked. */
typedef struct zr_meta {
    int ndim;
    uint64_t shape[CFS_MAX_DIMS], chunks[CFS_MAX_DIMS];
    zr_tkind tkind;
    size_t itemsize;          /* bytes per stored element (ZR_T_OBJECT: 0) */
    bool big_endian;
    cfs_dtype dtype;          /* what the model sees */
    /* Stored axis j of a chunk is the array's axis perm[j] (order "C": identity, "F":
     * reversed, v3: the transpose codec's order). */
    int perm[CFS_MAX_DIMS];
    char sep;                 /* dimension separator '.' or '/' */
    bool key_prefix_c;        /* v3 "default" chunk keys: "c/0/1" */
    json_t *compressor;       /* v2: NULL: none (a reference owned here) */
    json_t *b2b;              /* v3: the bytes-to-bytes codecs in encode order (a list) */
    /* v3 sharding_indexed: each shard (shard[] elements) holds inner chunks (chunks[]) and an
     * index of (offset, nbytes) pairs at its start or end, with a crc32c when index_crc. */
    bool sharded, index_at_start, index_crc;
    uint64_t shard[CFS_MAX_DIMS];
    zr_object_codec object_codec;
    /* The fill value as one element of the model's read buffer (numeric), or as a string. */
    unsigned char fill[8];
    char *fill_str;
} zr_meta;

/* The array at rel. -1 with the reason (what is wrong, naming an unknown codec or dtype). */
int zr_meta_read(const zr_store *s, const char *rel, zr_meta *m, cfs_err *err);
void zr_meta_clear(zr_meta *m);

/* Attribute helpers on a .zattrs object: 1 if present with the right type, 0 if absent, -1
 * with the reason if present with another type. */
int zr_attr_string(json_t *attrs, const char *key, char **out, cfs_err *err);
/* A list of strings (a single string counts as a one-element list, as h5py gives it). */
int zr_attr_strings(json_t *attrs, const char *key, char ***out, size_t *n, cfs_err *err);
int zr_attr_bool(json_t *attrs, const char *key, bool *out, cfs_err *err);
/* Two non-negative integers ("shape" of a sparse matrix). */
int zr_attr_shape2(json_t *attrs, const char *key, uint64_t out[2], cfs_err *err);

#endif
