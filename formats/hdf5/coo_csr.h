/* Graphs: COO (a, b, w) -> CSR, duplicate edges summed (as scipy's tocsr does), and the CSR as
 * a sparse element of the dataset model. */
#ifndef CFS_COO_CSR_H
#define CFS_COO_CSR_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

/* Edges a[i] -> b[i] of weight w[i] (nnz elements of dtype wt), all malloc'd. */
typedef struct cfs_coo {
    uint32_t *a, *b;
    unsigned char *w;
    cfs_dtype wt;
    uint64_t nnz;
} cfs_coo;

typedef struct cfs_csr {
    void *data;
    void *indices;      /* int32 (or int64 past 2^31 vertices) */
    int32_t *indptr;
    uint64_t nnz;
    bool wide;
} cfs_csr;

void cfs_coo_free(cfs_coo *g);
/* The n x n CSR matrix of g (every vertex < n), in malloc'd buffers; -1 with err. */
int cfs_coo_to_csr(const cfs_coo *g, uint64_t n, cfs_csr *m, cfs_err *err);
/* A sparse element named name of m (whose buffers it takes over, also on failure). */
int cfs_csr_elem(const char *name, cfs_csr *m, cfs_dtype wt, uint64_t n, cfs_elem **out,
                 cfs_err *err);

#endif
