/*
 * The metadata of a Zarr v2 store in a folder (../shared/reference/zarr-anndata-fuse.md §2):
 * which nodes are groups and which arrays (.zgroup, .zarray), their attributes (.zattrs), and
 * an array's description (shape, chunks, dtype, order, dimension separator, compressor,
 * filters, fill value). A root .zmetadata (zarr-python's consolidated metadata) is used when
 * present, each key it lacks read from its own file. Every file is opened read-only, and
 * nothing is read through a symlink leading out of the store's folder.
 */
#ifndef CFS_ZARR_META_H
#define CFS_ZARR_META_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct zr_store zr_store;

/* The store at path (a folder): reads .zmetadata when there is one. -1 with the reason if the
 * folder cannot be resolved or its .zmetadata is not consolidated metadata. */
int zr_store_open(const char *path, zr_store **out, cfs_err *err);
void zr_store_free(zr_store *s);
bool zr_store_consolidated(const zr_store *s);

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

/* An array's .zarray, checked. */
typedef struct zr_meta {
    int ndim;
    uint64_t shape[CFS_MAX_DIMS], chunks[CFS_MAX_DIMS];
    zr_tkind tkind;
    size_t itemsize;          /* bytes per stored element (ZR_T_OBJECT: 0) */
    bool big_endian;
    cfs_dtype dtype;          /* what the model sees */
    bool fortran;             /* order "F" */
    char sep;                 /* dimension separator '.' or '/' */
    json_t *compressor;       /* NULL: none (a reference owned here) */
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
