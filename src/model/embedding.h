/* Which obsm arrays Cellucid can draw (its minimum requirement for a dataset). */
#ifndef CFS_EMBEDDING_H
#define CFS_EMBEDDING_H

#include <stdbool.h>
#include <stddef.h>

#include "model.h"

/*
 * True if el is dense, numeric, one row per cell, at least one column, with finite values
 * that fit float32 in at least one row and not the same coordinates for every cell. Reads the
 * array in bounded row blocks. When false, why receives the reason.
 */
bool cfs_embedding_drawable(const cfs_elem *el, uint64_t n_obs, char *why, size_t why_len);
/* The part of that check that needs no values: kind, dtype and shape. */
bool cfs_embedding_shape_fits(const cfs_elem *el, uint64_t n_obs, char *why, size_t why_len);
/* The part that does, on arr's whole values already read (row-major, arr's dtype). */
bool cfs_embedding_values_drawable(const cfs_array *arr, const void *values, char *why,
                                   size_t why_len);
/* The k-th obsm entry the check below looks at (X_umap, then the others in order), or NULL
 * past the last: a worker sends the values of those it will read with the model. */
const cfs_elem *cfs_embedding_candidate(const cfs_elem *obsm, size_t k);
/* The first drawable obsm key (X_umap first, then in order), or NULL. */
const char *cfs_embedding_first(const cfs_dataset *ds);

#endif
