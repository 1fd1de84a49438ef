/*
 * One MatrixMarket matrix with its cell and gene lists, as a dataset: what Cell Ranger's MEX
 * folders (formats/outs.c) and the other producers' layouts (formats/mtx_folder.c) share.
 *
 * The lists: tab-separated lines without a header (Cell Ranger's barcodes.tsv and
 * features.tsv, STARsolo's, kb-python's and alevin-fry's .txt lists, GEO uploads'), or CSV
 * tables with a header whose first column names the cells (sci-RNA-seq3's cell_annotate.csv,
 * gene_annotate.csv), whose other columns become obs/var columns.
 *
 * var as scanpy's read_10x_mtx makes it: the index is the gene names (the second field of a
 * gene line, or the separate names list) made unique as anndata's var_names_make_unique does,
 * gene_ids the first field, feature_types the third; a list of one field per line is the index
 * alone. Table columns are typed as pandas.read_csv types them (int64, float64 with NaN for
 * pandas' NA tokens, else strings) and strings become categoricals when a value repeats or is
 * missing, as anndata's strings_to_categoricals does when it writes the table.
 */
#ifndef CFS_MEX_H
#define CFS_MEX_H

#include <stdbool.h>

#include "model.h"

typedef struct cfs_mex_file {
    const char *path;      /* NULL: none */
    const char *rel;       /* the name in messages */
} cfs_mex_file;

typedef struct cfs_mex_spec {
    cfs_mex_file matrix;
    cfs_mex_file cells;        /* barcodes (required) */
    cfs_mex_file genes;        /* features (required) */
    cfs_mex_file gene_names;   /* kb-python's genes.names.txt: one symbol per gene, optional */
    bool cells_table, genes_table;   /* CSV tables with a header (sci-RNA-seq3) */
    /* Fields every gene line must have (Cell Ranger: 3, genes.tsv 2); 0 for any number, as
     * many as the first line has (at most 3 are read). */
    int gene_fields;
    /* A list one line longer than its axis of the matrix starts with a header line (GEO). */
    bool list_headers;
    /* The producer's convention: rows are cells (kb-python, alevin-fry), else genes; decides
     * a square matrix, and is the only orientation accepted when `fixed`. */
    bool cells_are_rows;
    bool fixed;
    /* The end of a refusal, what to do: "re-download the file or re-run Cell Ranger" and
     * "copy the whole folder from one Cell Ranger run". */
    const char *redo, *regroup;
} cfs_mex_spec;

/* The dataset of source (its path, ds->source). -1 with a one-line reason naming the file. */
int cfs_mex_open(const char *source, const cfs_mex_spec *spec, cfs_dataset **out,
                 cfs_err *err);

/* True if name names obsm coordinates in a cell table's column: "<prefix>umap_<k>",
 * "<prefix>tsne_<k>" (also UMAP1, tSNE-2, ...): *prefix_len receives the length before the
 * basis, *basis_len the basis's, *k the component. */
bool cfs_mex_embedding_column(const char *name, size_t *prefix_len, size_t *basis_len,
                              unsigned *k);

#endif
