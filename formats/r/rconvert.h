/*
 * From R objects (robject.h) to the dataset model: the conversions formats/r/seurat.c and
 * formats/r/sce.c share. Numeric vectors the model can serve as they are (matrix values,
 * indices and pointers, numeric columns, embeddings) become views (rc_view) read by range where
 * the values are: in the r_file's tree, or in its vector store (formats/r/rvectors.h: in place
 * in a plain file, else in memory), which live as long as the dataset. What must be reshaped is
 * copied: factors, nullable columns, strings, triplet and symmetric matrices.
 *
 * Columns (a data.frame's, a DataFrame's): a factor becomes a categorical keeping R's level
 * order and unused levels (NA code -1; "ordered" too); logical and integer vectors with an NA
 * become nullable-boolean / nullable-integer, without one bool / int32; double vectors float64
 * (NA is a NaN); character vectors strings, or with an NA a categorical (categories sorted as
 * pandas sorts them, NA code -1: what anndata 0.8 writes for a string column with missing
 * values). Anything else is left out with its reason.
 */
#ifndef CFS_R_CONVERT_H
#define CFS_R_CONVERT_H

#include "model.h"
#include "robject.h"
#include "rvectors.h"

typedef struct rconv {
    const r_file *file;
    const r_vecstore *vecs;
    cfs_dataset *ds;
} rconv;

/* The values of an INT/LGL/REAL vector in memory (r_vec_whole: *owned is a copy to free, or
 * NULL); NULL for another type, or with *owned NULL and err set when it cannot be read. */
const void *rc_values(const rconv *c, const r_obj *x, void **owned, cfs_err *err);
/* An array of dtype t over the values of the LGL/INT/REAL vector x, read where they are as the
 * array is read: REAL as float64, INT as int32 or float64, LGL as bool or float64 (NA as NaN in
 * float64). ndim 1, or 2 with shape[0] x shape[1]: x's values in C order, or with colmajor in
 * R's column-major order (served in C order). x and c's store must outlive it (they live until
 * the dataset's reader_free, after every element). NULL when out of memory. */
cfs_array *rc_view(const rconv *c, const r_obj *x, cfs_dtype t, int ndim, const uint64_t *shape,
                   bool colmajor);
/* Copies of a STR's strings (NA as "NA" when na is NULL, else na), n strings; NULL on OOM. */
char **rc_strings(const r_obj *x, const char *na);
/* A string array element of STR x. */
cfs_elem *rc_string_elem(const char *name, const r_obj *x);
/* n copies of names given as a malloc'd array: a string array element taking them. */
cfs_elem *rc_strings_elem(const char *name, char **v, uint64_t n);
/* One column of n values, or NULL with *why set (left out) or err set (*why NULL: OOM). */
cfs_elem *rc_column(const rconv *c, const r_obj *v, const char *name, uint64_t n,
                    const char **why, cfs_err *err);
/* A data frame element: index (n strings, taken) and the columns of the list cols (named by
 * its names attribute; a nested DataFrame or data.frame flattened as outer.inner); columns that
 * cannot be served are left out as <where>/<col>. */
int rc_frame(const rconv *c, const char *name, char **index, uint64_t n, const r_obj *cols,
             const char *where, cfs_elem **out, cfs_err *err);

/* ---- matrices (formats/r/rmatrix.c) ---- */

/* The most rows or columns a dimension may claim with nothing in the file to back it (a
 * triplet matrix's Dim slot, unnamed cells): far more cells or features than any experiment
 * holds (2^27), so a larger one is a damaged length, refused before it is allocated. */
#define RC_MAX_UNBACKED_DIM ((uint64_t)1 << 27)

/* A matrix's dims: a Matrix package matrix's Dim slot or a base matrix's dim attribute. */
bool rc_dims(const r_obj *m, uint64_t *nrow, uint64_t *ncol);
/* A Matrix package sparse matrix ([dln][gst][CRT]Matrix: dgCMatrix, dgTMatrix, dgRMatrix,
 * lgCMatrix, ngCMatrix, dsCMatrix, ...) or a Graph. */
bool rc_is_sparse(const r_obj *m);
/* A base matrix (numeric, integer or logical with a dim attribute), dgeMatrix or lgeMatrix. */
bool rc_is_dense(const r_obj *m);
/* The names along axis 0 (rows) or 1 (columns) of a matrix (Dimnames slot or dimnames
 * attribute), a STR or NULL. */
const r_obj *rc_dimnames(const r_obj *m, int axis);
/* A matrix stored features x cells (R's orientation) as the cells x features element name.
 * Sparse: a general column-compressed matrix's arrays are the transpose's CSR (a row-compressed
 * one's its CSC), borrowed; triplets, symmetric and unit-triangular matrices are expanded to
 * every entry and compressed, repeated entries summed; logical and pattern values are bool
 * (float64 with NaN when one is NA). Dense: R's column-major order is the transpose's
 * row-major one. NULL with *why or err. */
cfs_elem *rc_matrix_t(const rconv *c, const r_obj *m, const char *name, const char **why,
                      cfs_err *err);
/* A matrix kept as it is (rows x cols). For obsm (cells x k) and obsp (cells x cells). */
cfs_elem *rc_matrix(const rconv *c, const r_obj *m, const char *name, const char **why,
                    cfs_err *err);

/* ---- shared by the conversions ---- */

/* An empty dataset of c's source for one modality of the object (an AnnData root), and in *mc
 * the conversion into it; NULL with err (out of memory). */
cfs_dataset *rc_modality_dataset(const rconv *c, rconv *mc, cfs_err *err);

/* An element of kind holding data (taken; freed on failure); NULL when data is NULL or on
 * allocation failure. */
cfs_elem *rc_mem_elem(cfs_elem_kind kind, const char *name, cfs_dtype t, int ndim,
                      const uint64_t *shape, void *data);

/* The plain values of the named list (numbers, strings, logicals, lists of them; others left
 * out as uns/<key>/<name>) as the dict uns/<key>; nothing when it has none. */
int rc_uns(const rconv *c, const r_obj *list, const char *key, cfs_err *err);

/* "X_" + name lower-cased, with umap/pca/tsne as anndata names them (malloc'd). */
char *rc_obsm_key(const char *name);

#endif
