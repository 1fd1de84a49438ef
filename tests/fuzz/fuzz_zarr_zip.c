/* AnnData Zarr stores inside a zip (formats/zarr/zarr_backend.c, zarr_zipprobe.c): the input
 * is a whole zip file, opened as a dataset through the registry, so the central directory
 * probe, libzip's reading, the entry index (duplicates, a top folder) and the metadata and
 * AnnData dispatch all run on it; then every array's first element is read, which reads
 * entries (stored, deflated, with their CRC) and decodes chunks. */
#include "fuzz_file.h"

#include <stdlib.h>
#include <string.h>

#include "format.h"

static void read_array(const cfs_array *a)
{
    if (!a || a->ndim > CFS_MAX_DIMS)
        return;
    uint64_t start[CFS_MAX_DIMS] = {0}, count[CFS_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++) {
        if (a->shape[d] == 0)
            return;
        count[d] = 1;
    }
    unsigned char buf[16] = {0};
    cfs_err err = {0};
    if (cfs_array_read(a, start, count, buf, &err) == 0 && a->dtype == CFS_STRING)
        cfs_strings_free((char **)buf, 1);
}

static void read_first(const cfs_elem *el)
{
    if (!el)
        return;
    read_array(el->values);
    read_array(el->aux);
    read_array(el->indptr);
    read_first(el->index);
    read_first(el->categories);
    for (size_t i = 0; i < el->nchildren; i++)
        read_first(el->children[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_file(data, size, path, sizeof path);
    if (fd < 0)
        return 0;
    cfs_dataset *ds = NULL;
    cfs_err err = {0};
    if (cfs_format_open(path, &ds, &err) == 0) {
        read_first(ds->root);
        cfs_dataset_free(ds);
    }
    close(fd);
    return 0;
}
