/* The analysis CSVs of a Cell Ranger outs/ folder (formats/csv.c's line reader and splitter, the
 * keyed walk, formats/projections.c and the clusters of formats/outs.c): the input's first byte
 * picks the file (even: analysis/umap/2_components/projection.csv, odd:
 * analysis/clustering/graphclust/clusters.csv), the rest is its content. The matrix and its lists
 * are the fixture pbmc_v3's, so the barcodes of the seeds (that fixture's own CSVs) join. The
 * folder is opened as a dataset through the registry, as a mount opens it. */
#include "fuzz_dir.h"
#include "format.h"

#define MEX "outs/filtered_feature_bc_matrix"

static const char *const CSVS[2] = {
    "outs/analysis/umap/2_components/projection.csv",
    "outs/analysis/clustering/graphclust/clusters.csv",
};

static int setup(void)
{
    static const char *const lists[] = {"matrix.mtx.gz", "features.tsv.gz", "barcodes.tsv.gz"};
    return fuzz_dir_copy_fixtures("outs/pbmc_v3/" MEX, lists, 3, MEX);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fuzz_dir_ready(setup) || size < 1)
        return 0;
    const char *mine = CSVS[data[0] & 1], *other = CSVS[!(data[0] & 1)];
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), other);
    unlink(path);
    if (fuzz_dir_write(mine, data + 1, size - 1) < 0)
        return 0;
    snprintf(path, sizeof path, "%s/outs", fuzz_dir());
    cfs_dataset *ds = NULL;
    cfs_err err = {0};
    if (cfs_format_open(path, &ds, &err) == 0)
        cfs_dataset_free(ds);
    return 0;
}
