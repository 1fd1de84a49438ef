/* R objects as datasets (formats/r/): an .rds or .rda stream opened by the rds format, so that
 * what the stream reader accepts also goes through the Seurat and SingleCellExperiment
 * mappings and the Matrix classes, and every array of the dataset is then read whole; of a
 * workspace, another single-cell object is then opened by name and read the same way. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format.h"
#include "fuzz_file.h"
#include "fuzz_read.h"

static const cfs_format *rds_format(void)
{
    for (const cfs_format *const *f = cfs_formats(); *f; f++)
        if (strcmp((*f)->name, "rds") == 0)
            return *f;
    return NULL;
}

static void read_whole(const cfs_array *a)
{
    uint64_t n = a ? cfs_array_nelems(a) : 0;
    if (!a || n > (1u << 20))
        return;
    uint64_t start[CFS_MAX_DIMS] = {0}, count[CFS_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++)
        count[d] = a->shape[d];
    void *out = calloc(n ? n : 1, cfs_array_elem_size(a));
    cfs_err err = {0};
    if (out && cfs_array_read(a, start, count, out, &err) == 0 && a->dtype == CFS_STRING)
        cfs_strings_free(out, (size_t)n);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const cfs_format *rds = rds_format();
    char path[64];
    int fd = rds ? fuzz_file(data, size, path, sizeof path) : -1;
    if (fd < 0)
        return 0;
    cfs_dataset *ds = NULL;
    cfs_err err = {0};
    char *other = NULL;
    if (rds->open(path, &ds, &err) == 0) {
        fuzz_read_each(ds->root, read_whole);
        /* a workspace's other objects are opened by name: the last one that is a dataset */
        for (size_t k = ds->nparts; k-- > 0 && !other;)
            if (k != ds->part && !ds->parts[k].why_not)
                other = strdup(ds->parts[k].name);
        cfs_dataset_free(ds);
    }
    ds = NULL;
    if (other && rds->open_part(path, other, &ds, &err) == 0) {
        fuzz_read_each(ds->root, read_whole);
        cfs_dataset_free(ds);
    }
    free(other);
    close(fd);
    return 0;
}
