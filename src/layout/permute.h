/*
 * Cells in priority order: the permutation, and views of small per-cell arrays (obs columns,
 * obsm, obsp) read whole once and served permuted. The expression matrices go through the
 * gene-major engine instead (gene_major.h): they are too big to hold.
 */
#ifndef CFS_PERMUTE_H
#define CFS_PERMUTE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "model.h"

typedef struct cfs_perm {
    uint64_t n;
    uint64_t *order;    /* order[j]: original row stored at row j */
    uint64_t *pos;      /* pos[i]: stored row of original row i; see cfs_perm_pos */
    pthread_mutex_t pos_lock;
    int refs;
} cfs_perm;

cfs_perm *cfs_perm_new(uint64_t n, uint64_t seed);
/* The permutation of a given order (taken, freed on failure: NULL). */
cfs_perm *cfs_perm_from_order(uint64_t n, uint64_t *order);
/* Rows as they are: for a source already stored in priority order. */
cfs_perm *cfs_perm_identity(uint64_t n);
/* The inverse of order, made at the first call: only matrices and cell graphs need it, and at
 * open it would be n fresh words written in random order. NULL when out of memory. */
const uint64_t *cfs_perm_pos(cfs_perm *p);
cfs_perm *cfs_perm_ref(cfs_perm *p);
void cfs_perm_unref(cfs_perm *p);

/* A view makes a chunk from that chunk's cells alone while they, and those it read the same
 * way before, are at most 1/CFS_PIECEWISE_SHARE of the array, for at most CFS_PIECEWISE_READS
 * chunks; then it reads the array whole, once, and serves the rest from that (permute.c,
 * docs/design.md §7). */
#define CFS_PIECEWISE_READS 4u
#define CFS_PIECEWISE_SHARE 8u

/* A view of src (rows = cells) in stored order, made as CFS_PIECEWISE_READS says. */
cfs_array *cfs_perm_rows(cfs_array *src, cfs_perm *perm);
/* The same for a dense cells x cells matrix (obsp): rows and columns permuted. */
cfs_array *cfs_perm_rows_cols(cfs_array *src, cfs_perm *perm);
/* Rewrites a sparse element in place: rows (cells) and, when both_axes, columns permuted;
 * the encoding (csr/csc) and index dtypes are kept. When cells are its major axis (csr, or
 * both_axes) its chunks are made as CFS_PIECEWISE_READS says, from the source's indptr read
 * whole and each chunk's own stored rows; else it is read whole on first use. */
int cfs_perm_sparse(cfs_elem *el, cfs_perm *perm, bool both_axes, cfs_err *err);

/* Integer helpers shared with the gene-major engine. */
int64_t cfs_int_get(cfs_dtype t, const void *base, uint64_t i);
void cfs_int_set(cfs_dtype t, void *base, uint64_t i, int64_t v);

#endif
