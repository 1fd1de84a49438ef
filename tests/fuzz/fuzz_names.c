/* The cell and gene lists beside a MatrixMarket matrix (formats/mex.c, with formats/names.c's
 * unique names): Cell Ranger's barcodes.tsv and features.tsv (tab-separated, no header, GEO's
 * with one) and sci-RNA-seq3's cell_annotate.csv / gene_annotate.csv tables. The input's first
 * byte picks the case: bit 0 the list (cells or genes), bit 1 the fixture whose matrix and other
 * list are used (pbmc_v3's Cell Ranger folder or sci_rna_seq3's tables), bit 2 a GEO header
 * line allowed, bits 3-4 the gene fields required (any, 2, 3); the rest is the list. */
#include "fuzz_dir.h"
#include "mex.h"

typedef struct fixture {
    const char *dir, *matrix, *cells, *genes;
    bool tables;
} fixture;

static const fixture FIXTURES[2] = {
    {"outs/pbmc_v3/outs/filtered_feature_bc_matrix", "matrix.mtx.gz", "barcodes.tsv.gz",
     "features.tsv.gz", false},
    {"mtx/sci_rna_seq3", "gene_count.mtx.gz", "cell_annotate.csv.gz", "gene_annotate.csv.gz",
     true},
};

/* Each fixture's three files in <fuzz_dir>/<i>/, where the fuzzed list goes too. */
static int setup(void)
{
    for (int i = 0; i < 2; i++) {
        const fixture *f = &FIXTURES[i];
        const char *names[3] = {f->matrix, f->cells, f->genes};
        if (fuzz_dir_copy_fixtures(f->dir, names, 3, i ? "1" : "0") < 0)
            return -1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fuzz_dir_ready(setup) || size < 1)
        return 0;
    unsigned pick = data[0];
    bool cells = pick & 1;
    int which = (pick >> 1) & 1;
    const fixture *f = &FIXTURES[which];
    char rel[64], matrix[1024], list[1024], kept[1024];
    snprintf(rel, sizeof rel, "%d/fuzzed.%s", which, f->tables ? "csv" : "tsv");
    if (fuzz_dir_write(rel, data + 1, size - 1) < 0)
        return 0;
    snprintf(matrix, sizeof matrix, "%s/%d/%s", fuzz_dir(), which, f->matrix);
    snprintf(list, sizeof list, "%s/%s", fuzz_dir(), rel);
    snprintf(kept, sizeof kept, "%s/%d/%s", fuzz_dir(), which, cells ? f->genes : f->cells);
    static const int gene_fields[4] = {0, 2, 3, 3};
    cfs_mex_spec spec = {
        .matrix = {matrix, "matrix.mtx.gz"},
        .cells = {cells ? list : kept, cells ? "fuzzed" : "cells"},
        .genes = {cells ? kept : list, cells ? "genes" : "fuzzed"},
        .cells_table = f->tables,
        .genes_table = f->tables,
        .gene_fields = gene_fields[(pick >> 3) & 3],
        .list_headers = (pick >> 2) & 1,
        .fixed = !f->tables,
        .redo = "re-download the file",
        .regroup = "copy the whole folder",
    };
    cfs_dataset *ds = NULL;
    cfs_err err = {0};
    if (cfs_mex_open(fuzz_dir(), &spec, &ds, &err) == 0)
        cfs_dataset_free(ds);
    return 0;
}
