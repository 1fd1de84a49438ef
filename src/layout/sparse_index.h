/*
 * One index dtype per sparse matrix (docs/priority-order.md, "Sparse index dtypes"): `indices`
 * and `indptr` of every sparse element share one dtype, int32 where every value of both fits,
 * else int64, because scipy refuses to index a matrix whose two index arrays differ (anndata
 * keeps the dtypes it reads, so a[cells] would fail).
 */
#ifndef CFS_SPARSE_INDEX_H
#define CFS_SPARSE_INDEX_H

#include "model.h"

/* int32 when nnz <= 2^31 - 1 and the indexed (minor) axis has fewer than 2^31 entries. */
cfs_dtype cfs_sparse_index_dtype(uint64_t nnz, uint64_t minor_n);
/* The dtype a sparse element's indices and indptr are stored in. */
cfs_dtype cfs_sparse_elem_index_dtype(const cfs_elem *el);
/* Gives every sparse element under root (uns included) that index dtype, through converting
 * views where the reader's arrays have another. */
int cfs_sparse_unify_indices(cfs_elem *root, cfs_err *err);

#endif
