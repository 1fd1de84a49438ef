/*
 * How the layout asks the renderer for the chunks of the arrays it makes (docs/design.md §4,
 * Chunks). Per-cell arrays are cut on the priority levels; arrays read by ranges (a gene's
 * nonzeros, a level's share of a cell graph's entries) are cut so that one range costs about
 * its own bytes; dense expression is cut into blocks of one level's cells by few genes.
 */
#ifndef CFS_CHUNK_HINT_H
#define CFS_CHUNK_HINT_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* The renderer's bounds (src/store/chunking.h), which hints keep too. */
#define CFS_HINT_MAX_CHUNK_BYTES (UINT64_C(8) << 20)
#define CFS_HINT_MAX_CHUNKS UINT64_C(100000)
/* A range chunk is never smaller than this: below it a request costs more than its bytes. */
#define CFS_HINT_MIN_CHUNK_BYTES (UINT64_C(16) << 10)

/* arr's first axis holds cells in priority order: chunked on the levels (level_rows). */
void cfs_hint_cells(cfs_array *arr);
/* A sparse element over cells (csr rows, or both axes of an obsp entry): indptr is per cell,
 * data and indices get chunks of about one first level's share of the entries. Nothing for a
 * csc matrix whose columns are not cells (its entries are not in cell order). */
void cfs_hint_sparse_cells(cfs_elem *el, uint64_t n_cells, bool cells_major);
/* A 1-d array of total elements of esize bytes read by ranges of about `range` elements from
 * their start (a gene's nonzeros): chunks of half a range, to a power of two, within the bounds;
 * nothing when the whole array is at most one such chunk. */
void cfs_hint_ranges(cfs_array *arr, uint64_t range, size_t esize);
/* Cells and genes per chunk of a dense cells x genes matrix in priority order: one level's
 * cells (as many as fit 8 MiB), one gene, more genes only where the chunk count needs them. */
void cfs_hint_dense_block(uint64_t n_obs, uint64_t n_vars, size_t esize, uint64_t *rows,
                          uint64_t *genes);

#endif
