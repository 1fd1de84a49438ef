/*
 * The layout engine for expression matrices (docs/design.md §7): X, layers and raw/X become
 * gene-major with cells in priority order, produced by one sequential pass over the source under
 * a memory budget, with spill files in a work folder. The pass runs on the first read of the
 * result.
 */
#ifndef CFS_GENE_MAJOR_H
#define CFS_GENE_MAJOR_H

#include <stdint.h>

#include "model.h"
#include "permute.h"
#include "progress.h"
#include "space.h"

/* Test hook (docs/design.md §7): milliseconds the sparse engine waits before sorting each bucket,
 * so that tests can read a gene while the pass still runs. Unset outside tests. */
#define CFS_LAYOUT_DELAY_ENV "CELLUCID_FS_TEST_LAYOUT_DELAY"

typedef struct cfs_engine_opts {
    uint64_t memory;            /* bytes the engine may hold */
    const char *workdir;        /* where spill and result files go (unlinked at creation) */
    cfs_space *space;           /* the bound their bytes count against; NULL: none */
    cfs_progress *progress;     /* where a long job reports; may be NULL */
} cfs_engine_opts;

/* Rewrites a sparse (csr or csc) cells x genes element in place into csc_matrix with rows in
 * stored order: indptr over genes and row indices ascending per gene, both
 * in one dtype (cfs_sparse_index_dtype). The pass runs in a thread of its own from the first
 * read on and serves each range of the result as soon as it is written. */
int cfs_gene_major_sparse(cfs_elem *el, cfs_perm *perm, const cfs_engine_opts *o,
                          const char *label, cfs_err *err);
/* Rewrites a dense 2-d cells x genes array in place: rows in stored order, stored in blocks of
 * many cells x few genes (cfs_hint_dense_block). */
int cfs_gene_major_dense(cfs_elem *el, cfs_perm *perm, const cfs_engine_opts *o,
                         const char *label, cfs_err *err);

#endif
