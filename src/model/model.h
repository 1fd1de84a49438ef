/*
 * The dataset model (docs/design.md §3): an AnnData-shaped tree that every format reader produces
 * and the layout step and the Zarr renderer consume. It knows nothing of Zarr, FUSE or any input
 * format. Leaves state dtype and shape from metadata; values are read on demand, by hyperslab.
 */
#ifndef CFS_MODEL_H
#define CFS_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "dtype.h"
#include "error.h"

#define CFS_MAX_DIMS 8

/* One field of a compound (record) dtype: rec-arrays in uns. Strings are fixed-width UTF-8. */
typedef struct cfs_field {
    char *name;
    cfs_dtype dtype;     /* numeric, or CFS_STRING for a fixed-width string field */
    size_t offset;       /* byte offset inside one record of the read buffer */
    size_t size;         /* bytes in the read buffer (string fields: max UTF-8 bytes, NUL-padded) */
} cfs_field;

typedef struct cfs_array cfs_array;

/*
 * How a store encodes a chunk's packed values (docs/design.md §7, encoded results): the catalog
 * gives the layout the renderer's codec this way, so that the layout can keep a matrix's chunks
 * encoded as it makes them without knowing the store's format. id tells codecs apart: an array
 * hands out an encoded chunk only to a renderer that asks for the same id.
 */
typedef struct cfs_chunk_codec {
    int id;
    /* Appends the encoded form of in[0..len) to out; typesize is one element's bytes. */
    int (*encode)(int id, size_t typesize, const void *in, size_t len, cfs_buf *out,
                  cfs_err *err);
    /* Appends the decoded bytes of in[0..len) to out. */
    int (*decode)(int id, const void *in, size_t len, cfs_buf *out, cfs_err *err);
    /* The most bytes encode may append for len bytes in. */
    size_t (*bound)(int id, size_t len);
} cfs_chunk_codec;

/* Strings freed together, one bump allocation each: where a string read for a consumer that
 * only looks at them puts its strings, packed, instead of one malloc a string. */
typedef struct cfs_strpool cfs_strpool;
cfs_strpool *cfs_strpool_new(void);
void cfs_strpool_free(cfs_strpool *pool);
/* Room for len bytes in the pool; NULL when out of memory. */
void *cfs_strpool_alloc(cfs_strpool *pool, size_t len);
/* A NUL-terminated copy of the len bytes at s, in the pool; NULL when out of memory. */
char *cfs_strpool_dup(cfs_strpool *pool, const char *s, size_t len);

typedef struct cfs_array_ops {
    /*
     * Reads the hyperslab start[d] .. start[d]+count[d] in C order into out. Numeric: packed
     * little-endian values; CFS_STRING: one malloc'd NUL-terminated UTF-8 char* per element
     * (the caller frees them); CFS_COMPOUND: packed records of arr->record_size bytes.
     * Must be safe to call from several threads (readers serialise their library internally).
     */
    int (*read)(const cfs_array *arr, const uint64_t *start, const uint64_t *count, void *out,
                cfs_err *err);
    void (*free_ctx)(void *ctx);
    /* Optional, CFS_STRING: like read, for a consumer that only looks at the strings. out
     * receives the array's own strings where it keeps them anyway (in memory, a permuted
     * view's copy of its source: valid while the array lives), else strings put in pool (valid
     * until the caller frees it); nothing is copied or freed one by one. */
    int (*read_strings)(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                        const char **out, cfs_strpool *pool, cfs_err *err);
    /* Optional: reads the whole rows (every element along dims 1..) rows[0..n) of the first
     * axis, ascending and distinct, packed in that order as read packs a slab; CFS_STRING
     * values lent as read_strings lends them. The layout reads one chunk's cells this way
     * (docs/design.md §7); cfs_array_read_rows reads arrays without it by blocks. */
    int (*read_rows)(const cfs_array *arr, const uint64_t *rows, uint64_t n, void *out,
                     cfs_strpool *pool, cfs_err *err);
    /* Optional, 1-d numeric arrays: appends chunk idx of chunk_len elements (zero past the
     * end), encoded by codec `codec_id`, to out when the array holds that chunk encoded
     * already, and returns 1; returns 0 when it does not (the caller reads and encodes). */
    int (*read_encoded)(const cfs_array *arr, uint64_t idx, uint64_t chunk_len, int codec_id,
                        cfs_buf *out, cfs_err *err);
} cfs_array_ops;

struct cfs_array {
    cfs_dtype dtype;
    int ndim;                       /* 0 for a scalar */
    uint64_t shape[CFS_MAX_DIMS];
    /* CFS_COMPOUND only */
    cfs_field *fields;
    size_t nfields;
    size_t record_size;
    const cfs_array_ops *ops;
    void *ctx;
    int refs;                       /* shared between an original and a layout view */
    /* Preferred block shape for storage (0 = no preference): the layout step asks for
     * gene-major blocks of a dense matrix, and for a gene's share of a sparse one, this way. */
    uint64_t chunk_hint[CFS_MAX_DIMS];
    /* Nonzero: the first axis holds cells in priority order, and every priority level from
     * this many rows on is a multiple of it (docs/design.md §4.1). The renderer puts chunk
     * boundaries on those levels, so reading a level reads whole chunks (§4, Chunks). */
    uint64_t level_rows;
};

typedef enum cfs_elem_kind {
    CFS_EL_ANNDATA,        /* root mapping: obs, var, X, layers, obsm, ..., raw */
    CFS_EL_RAW,            /* mapping: X, var, varm */
    CFS_EL_DICT,           /* mapping of anything */
    CFS_EL_DATAFRAME,      /* index + columns in column order */
    CFS_EL_ARRAY,          /* dense N-d numeric/bool array, or 1-d string array */
    CFS_EL_SCALAR,         /* 0-d numeric or string */
    CFS_EL_SPARSE,         /* csr/csc: data, indices, indptr */
    CFS_EL_CATEGORICAL,    /* codes + categories */
    CFS_EL_NULLABLE_INT,   /* values + mask */
    CFS_EL_NULLABLE_BOOL,  /* values + mask */
    CFS_EL_NULLABLE_STRING,/* values + mask */
    CFS_EL_RECARRAY,       /* 1-d compound array */
    CFS_EL_NULL            /* Python None */
} cfs_elem_kind;

typedef struct cfs_elem cfs_elem;

struct cfs_elem {
    cfs_elem_kind kind;
    char *name;                 /* key inside the parent; NULL for the root */

    /* mappings (ANNDATA, RAW, DICT) and DATAFRAME columns, in order */
    cfs_elem **children;
    size_t nchildren;

    /* DATAFRAME */
    cfs_elem *index;            /* ARRAY of strings (or NULLABLE_STRING) */
    char *index_name;           /* the `_index` attribute */

    /* ARRAY, SCALAR, RECARRAY: the values. SPARSE: data. CATEGORICAL: codes.
     * NULLABLE_*: values. */
    cfs_array *values;
    /* SPARSE: indices. NULLABLE_*: mask. */
    cfs_array *aux;
    /* SPARSE: indptr. */
    cfs_array *indptr;
    /* CATEGORICAL: categories (an ARRAY element). */
    cfs_elem *categories;

    bool ordered;               /* CATEGORICAL */
    bool csr;                   /* SPARSE: true = csr_matrix, false = csc_matrix */
    uint64_t sparse_shape[2];   /* SPARSE */
    char *na_value;             /* NULLABLE_STRING: "NA" / "NaN" or NULL */
};

/* Something a reader could not read and left out; the rest of the dataset is still served. */
typedef struct cfs_leftout {
    char *element;              /* e.g. "obs/qc" */
    char *reason;
} cfs_leftout;

/*
 * One modality of a dataset of several (docs/design.md §3): an AnnData of its own over a subset
 * of the dataset's cells, and how its rows and features relate to the dataset's global ones.
 * MuData modalities and an R object's assays are both this.
 */
typedef struct cfs_modality {
    char *name;
    cfs_elem *root;             /* kind CFS_EL_ANNDATA: its own obs, var, X, layers, obsm, ... */
    uint64_t n_obs, n_vars;
    /* UINT32, one per global cell (ds->n_obs): the 1-based row of that cell in this modality,
     * 0 when it has none. varmap the same per global feature (ds->n_vars). */
    cfs_array *obsmap, *varmap;
    /* What the modality's arrays read from, freed after every element of the dataset. */
    void *reader;
    void (*reader_free)(void *reader);
} cfs_modality;

/* One item of an input that holds several (an R workspace's objects), as its reader saw them
 * all: each that is a dataset is opened as one of its own (docs/design.md §3, §10). */
typedef struct cfs_part {
    char *name;                 /* its name in the input (an R object's name) */
    char *what;                 /* what it is, for people (its R class) */
    char *why_not;              /* NULL: a dataset; else why it is none */
} cfs_part;

typedef struct cfs_dataset {
    /* kind CFS_EL_ANNDATA. With modalities: the global obs, var, obsm, obsp, uns (and varm,
     * varp), no X. */
    cfs_elem *root;
    char *source;               /* path of the input */
    char *format;               /* registry name, e.g. "h5ad" (the registry sets it) */
    char *format_version;       /* e.g. "anndata 0.1.0" */
    uint64_t n_obs, n_vars;
    cfs_leftout *leftout;
    size_t nleftout;
    /* What to do when the dataset has no drawable embedding, in the reader's words (e.g. a
     * 10x .h5 "has no embedding, so open its outs/ folder"); NULL for the general advice. */
    char *no_embedding_hint;
    /* What the reader keeps open for the arrays' reads (a file handle, an archive, a spill
     * index, a worker's proxy), freed by reader_free after every element is gone. */
    void *reader;
    void (*reader_free)(void *reader);
    /* Several modalities sharing the global cells (n_obs = the global obs); 0 for a plain
     * AnnData-shaped dataset. */
    cfs_modality *mods;
    size_t nmods;
    /* An input of several parts (an R workspace of several objects): all of them, in the
     * input's order, this dataset being parts[part]. nparts 0: the input is one dataset. */
    cfs_part *parts;
    size_t nparts;
    size_t part;
} cfs_dataset;

/* Construction helpers (the readers' vocabulary). All abort-free: NULL on allocation failure. */
cfs_array *cfs_array_new(cfs_dtype dtype, int ndim, const uint64_t *shape,
                         const cfs_array_ops *ops, void *ctx);
cfs_array *cfs_array_ref(cfs_array *arr);
void cfs_array_unref(cfs_array *arr);
uint64_t cfs_array_nelems(const cfs_array *arr);
/* Bytes one element takes in a read buffer. */
size_t cfs_array_elem_size(const cfs_array *arr);
int cfs_array_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count, void *out,
                   cfs_err *err);
/* Reads CFS_STRING values for a consumer that only looks at them (see read_strings), also from
 * arrays without that op: their read's copies are moved into pool. */
int cfs_array_read_strings(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                           const char **out, cfs_strpool *pool, cfs_err *err);
/*
 * Reads the whole rows rows[0..n) of the first axis (ascending, distinct), packed in that
 * order; CFS_STRING values are put in pool (const char *), or lent by arrays that keep them.
 * Through the array's read_rows where it has one, else by cfs_array_read_rows_by_blocks.
 */
int cfs_array_read_rows(const cfs_array *arr, const uint64_t *rows, uint64_t n, void *out,
                        cfs_strpool *pool, cfs_err *err);
/* The same through read / read_strings: each block of nearby rows (at most 64 KiB between
 * two of them, 4 MiB in all) is read as one slab and the rows asked for are kept. For a
 * read_rows that only handles some cases itself. */
int cfs_array_read_rows_by_blocks(const cfs_array *arr, const uint64_t *rows, uint64_t n,
                                  void *out, cfs_strpool *pool, cfs_err *err);
/* Elements of one row (the product of dims 1..; 1 for a 1-d array). */
uint64_t cfs_array_row_elems(const cfs_array *arr);
/* Frees the strings of a CFS_STRING read buffer of n elements (not the buffer itself). */
void cfs_strings_free(char **strings, size_t n);
/* Replaces n borrowed strings by malloc'd copies (NULL by ""), for a read built on
 * read_strings. On failure frees the copies made so far and returns -1 with err set. */
int cfs_strings_own(char **strings, size_t n, cfs_err *err);

/* An in-memory array: takes ownership of data (numeric packed, or char** for strings). */
cfs_array *cfs_array_from_memory(cfs_dtype dtype, int ndim, const uint64_t *shape, void *data);

cfs_elem *cfs_elem_new(cfs_elem_kind kind, const char *name);
void cfs_elem_free(cfs_elem *el);
/* Appends child (ownership passes to parent); -1 on allocation failure or a NULL child (a
 * reader's failed allocation: the caller reports out of memory). */
int cfs_elem_add(cfs_elem *parent, cfs_elem *child);
/* cfs_elem_add for readers: on failure child is freed and err says out of memory. So
 * `return cfs_elem_add_or_free(df, make_column(...), err);` needs no NULL check. */
int cfs_elem_add_or_free(cfs_elem *parent, cfs_elem *child, cfs_err *err);
/* A new element of kind (ARRAY, SCALAR, ...) named name, holding arr as its values. It takes
 * the caller's reference to arr in every case: on allocation failure (NULL) arr is released. */
cfs_elem *cfs_elem_from_array(cfs_elem_kind kind, const char *name, cfs_array *arr);
cfs_elem *cfs_elem_child(const cfs_elem *parent, const char *name);
/* The named child if it is a dict, else a new empty dict in its place (NULL on allocation
 * failure). */
cfs_elem *cfs_elem_ensure_dict(cfs_elem *parent, const char *name);
/* Removes and frees the named child; returns 0 if removed, -1 if not present. */
int cfs_elem_remove(cfs_elem *parent, const char *name);
const char *cfs_elem_kind_name(cfs_elem_kind kind);

/* An empty dataset of the input at source; its format is set by the registry after the open. */
cfs_dataset *cfs_dataset_new(const char *source);
void cfs_dataset_free(cfs_dataset *ds);
/* Moves the AnnData-shaped dataset sub (its root, sizes, left-out list prefixed with
 * "mod/<name>/", reader) into ds as a new last modality named name, and frees sub's shell.
 * The maps are left NULL for the caller. On failure sub is freed too and err says why. */
cfs_modality *cfs_dataset_add_modality(cfs_dataset *ds, const char *name, cfs_dataset *sub,
                                       cfs_err *err);
/* The modality named name, or NULL. */
cfs_modality *cfs_dataset_modality(const cfs_dataset *ds, const char *name);
int cfs_dataset_leave_out(cfs_dataset *ds, const char *element, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Appends a part of the input (why_not NULL: a dataset); -1 on allocation failure. */
int cfs_dataset_add_part(cfs_dataset *ds, const char *name, const char *what,
                         const char *why_not);
/* How many of the input's parts are datasets (0 for an input of one dataset). */
size_t cfs_dataset_part_datasets(const cfs_dataset *ds);

#endif
