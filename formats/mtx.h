/*
 * MatrixMarket coordinate files (matrix.mtx, matrix.mtx.gz), read as a CSR matrix of the dataset
 * model: `%%MatrixMarket matrix coordinate integer|real|double|pattern general|symmetric|
 * skew-symmetric`, comment lines,
 * the size line `M N NNZ`, then NNZ entries `i j [value]` (1-based).
 *
 * Reading is in two steps so that the size line, which is untrusted, can be checked against the
 * caller's sidecar files (barcodes, features) before anything is allocated for it:
 *
 *   cfs_mtx_open   reads the header and the size line only;
 *   cfs_mtx_index  reads every entry once, validating each line (errors name the file and the
 *                  line), and indexes the matrix as CSR over one of its axes.
 *
 * Memory. When the entries are sorted along the chosen major axis with strictly increasing
 * minor indices (Cell Ranger writes its genes x cells matrix column by column), only the indptr
 * is held (8 bytes per major row); data and indices are parsed again from the file when they are
 * read, as a forward stream with a cache of the last block, so a sequential pass (the layout
 * engine's, or an export's) costs one more pass over the file and a backward read restarts from
 * the top. Otherwise (unsorted entries or duplicates, which are summed as scipy does) the
 * entries are sorted in memory at index time: about 40 bytes per entry at the peak (24 to
 * sort them, plus the result), 8-16 after. A symmetric file (one triangle listed, mirrored as
 * scipy.io.mmread does; negated for skew-symmetric) is always held in memory.
 */
#ifndef CFS_MTX_H
#define CFS_MTX_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

/* Axis ceiling: a size line claiming more is refused before anything is allocated. */
#define CFS_MTX_MAX_AXIS ((uint64_t)1 << 32)
#define CFS_MTX_MAX_NNZ ((uint64_t)1 << 48)

typedef enum cfs_mtx_field {
    CFS_MTX_INTEGER,
    CFS_MTX_REAL,        /* "real" or "double" */
    CFS_MTX_PATTERN      /* no values: each entry is 1 */
} cfs_mtx_field;

typedef enum cfs_mtx_symmetry {
    CFS_MTX_GENERAL,
    CFS_MTX_SYMMETRIC,   /* "symmetric" (or a real "hermitian"): one triangle, mirrored */
    CFS_MTX_SKEW         /* "skew-symmetric": mirrored entries negated */
} cfs_mtx_symmetry;

typedef struct cfs_mtx cfs_mtx;

/* Reads the header and the size line. label names the file in messages. -1 with a one-line
 * reason naming label, the line and what to do. */
int cfs_mtx_open(const char *path, const char *label, cfs_mtx **out, cfs_err *err);

/* The size line. */
void cfs_mtx_size(const cfs_mtx *m, uint64_t *rows, uint64_t *cols, uint64_t *nnz);
cfs_mtx_field cfs_mtx_field_of(const cfs_mtx *m);
cfs_mtx_symmetry cfs_mtx_symmetry_of(const cfs_mtx *m);

/*
 * Reads every entry once and indexes the matrix as CSR whose major axis is the file's columns
 * (by_column: a genes x cells file served as cells x genes) or its rows. Allocates 8 bytes per
 * major row: check the size line first. Values are int32 (integer files whose values all fit),
 * int64, or float64 (real; pattern files get 1.0, as scipy reads them); indices int32 when the
 * minor axis fits, else int64; indptr int64.
 */
int cfs_mtx_index(cfs_mtx *m, bool by_column, cfs_err *err);

/* After cfs_mtx_index: entries after summing duplicates, and whether they are held in memory. */
uint64_t cfs_mtx_nnz(const cfs_mtx *m);
bool cfs_mtx_in_memory(const cfs_mtx *m);

/* After cfs_mtx_index: a SPARSE element (csr, shape [major, minor]) named name whose arrays
 * keep the matrix open. NULL on allocation failure. */
cfs_elem *cfs_mtx_sparse(cfs_mtx *m, const char *name);

/* Drops the caller's reference (arrays made by cfs_mtx_sparse keep theirs). */
void cfs_mtx_close(cfs_mtx *m);

#endif
