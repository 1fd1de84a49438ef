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
/* The first drawable obsm key (X_umap first, then in order), or NULL. */
const char *cfs_embedding_first(const cfs_dataset *ds);

#endif
