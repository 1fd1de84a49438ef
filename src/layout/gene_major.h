/*
 * The layout engine for expression matrices (docs/design.md §7): X, layers and raw/X become
 * gene-major with cells in priority order, produced by one sequential pass over the source under
 * a memory budget, with spill files in a work folder. The pass runs on the first read of the
 * result.
 */
#ifndef CFS_GENE_MAJOR_H
#define CFS_GENE_MAJOR_H

#include <stdbool.h>
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
    const cfs_chunk_codec *codec; /* sparse results are kept in chunks it encodes; may be NULL */
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

/* A per-cell array (obsm) is read whole into memory and served permuted (permute.h) while it is
 * at most 1/CFS_ROWS_HELD_SHARE of the memory budget; a larger one is put in stored order in a
 * work file by one sequential pass in blocks of the budget (cfs_rows_file), so that -o memory
 * bounds both. */
#define CFS_ROWS_HELD_SHARE 8u

/* Whether a per-cell array of cells x columns goes through cfs_rows_file. */
bool cfs_rows_file_wanted(const cfs_array *a, const cfs_engine_opts *o);
/* Replaces *slot (a dense cells x columns array, not strings) with a view of its rows in stored
 * order, made by one pass over the source into a work file on the first read, read back with
 * pread; chunked along cells as every per-cell array (cfs_hint_cells). */
int cfs_rows_file(cfs_array **slot, cfs_perm *perm, const cfs_engine_opts *o, const char *label,
                  cfs_err *err);

#endif
