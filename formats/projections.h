/*
 * Cell Ranger-style projection CSVs: Barcode,<NAME>-1,<NAME>-2,... one row per cell, as obsm
 * arrays. Shared by the Cell Ranger run-folder reader (formats/outs.c: analysis/<x>/projection.csv)
 * and the MatrixMarket reader (formats/mtx_folder.c: projection CSVs beside the matrix).
 *
 * Finding them: cfs_analysis_walk walks an analysis/ folder for every projection.csv and
 * clusters.csv (Cell Ranger's paths changed with its versions: flat in 1.x, N_components in 2-6,
 * gene_expression_ prefixes from 7), keeping the folders between analysis/ and each file, which
 * name the basis's modality. cfs_analysis_add adds a CSV found otherwise (a file beside a
 * matrix), as a candidate: an embedding only if its header is a projection header.
 *
 * Reading them: each projection becomes obsm float64 n_obs x N, NaN for cells the CSV does not
 * list. A CSV that cannot be joined safely to the cells (a malformed row, a barcode the matrix
 * lacks, a barcode listed twice, a value that is not a finite number) is left out whole with its
 * reason (cfs_dataset_leave_out): never a partial or shifted value.
 *
 * Naming (the Cellucid file-format rules): a projection is obsm X_<basis> (X_umap, X_tsne,
 * X_pca; the header's kind in lower case, PC -> pca). When one basis comes in several widths (a
 * 2-d and a 3-d UMAP), each is X_<basis>_<n>d (X_umap_2d, X_umap_3d): a suffixed key fills its
 * own dimension, and once X_umap_3d exists a plain X_umap would no longer fill the 2-d view.
 * Another modality's projection (analysis/umap/antibody_capture_2_components/) is
 * X_antibody_capture_umap.
 */
#ifndef CFS_PROJECTIONS_H
#define CFS_PROJECTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "strset.h"

/* Cell Ranger >= 7's folder prefix for the gene expression modality. */
#define CFS_ANALYSIS_GE_PREFIX "gene_expression_"
/* A walk reads at most this many CSVs (in name order). */
#define CFS_ANALYSIS_MAX_FILES 4096

typedef struct cfs_analysis_csv {
    bool clusters;     /* a clusters.csv (else a projection) */
    bool candidate;    /* found by its extension only: skipped silently unless its header is a
                        * projection header */
    char *path;
    char *rel;         /* its name in messages (relative to the input) */
    char **dirs;       /* the folders between analysis/ and the file */
    size_t ndirs;
} cfs_analysis_csv;

typedef struct cfs_analysis {
    cfs_analysis_csv *v;
    size_t n, cap;
    bool truncated;    /* more than CFS_ANALYSIS_MAX_FILES were found */
    const char *root;  /* during a walk: what a CSV must lie inside */
} cfs_analysis;

void cfs_analysis_free(cfs_analysis *a);

/* Appends every projection.csv and clusters.csv below dir (rel: its name in messages, e.g.
 * "outs/analysis"), in name order, not following symlinked folders. An unreadable folder holds
 * nothing, and so does what lies outside root (the input's folder) once symlinks are resolved.
 * -1 on allocation failure. */
int cfs_analysis_walk(cfs_analysis *a, const char *dir, const char *rel, const char *root);

/* Appends a candidate projection CSV (copies path and rel). -1 on allocation failure. */
int cfs_analysis_add(cfs_analysis *a, const char *path, const char *rel);

/* The dataset's obs index (its barcodes, n_obs strings) and a map barcode -> row. *dup
 * receives the first row whose barcode an earlier row already has, or UINT64_MAX. -1 with a
 * reason if there is no readable string index; on allocation failure. */
int cfs_obs_barcodes(const cfs_dataset *ds, char ***names, cfs_strset **map, uint64_t *dup,
                     cfs_err *err);

typedef struct cfs_projection_opts {
    /* Also accept the headers Seurat and scanpy exports write: barcode,umap_1,umap_2 ('_'
     * between kind and number) and an empty first field (",UMAP_1,UMAP_2" from pandas, R's
     * write.csv). Cell Ranger's own are always accepted. */
    bool loose;
} cfs_projection_opts;

typedef struct cfs_projection_report {
    bool any_projection;   /* some CSV was a projection (served or left out) */
    bool any_drawable;     /* some became an obsm array */
} cfs_projection_report;

/* Reads every projection of a (clusters.csv entries are ignored) against map (barcode -> obs
 * row) and adds each as ds's obsm X_<basis>[_<n>d]; a CSV left out is listed with its reason.
 * A key obsm already holds is left out too. -1 only on allocation failure. */
int cfs_projections_attach(cfs_dataset *ds, const cfs_analysis *a, const cfs_strset *map,
                           const cfs_projection_opts *opts, cfs_projection_report *report,
                           cfs_err *err);

#endif
