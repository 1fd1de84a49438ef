/* AnnData Zarr stores inside a zip (formats/zarr/zarr_backend.c, zarr_zipprobe.c): the input
 * is a whole zip file, opened as a dataset through the registry, so the central directory
 * probe, libzip's reading, the entry index (duplicates, a top folder) and the metadata and
 * AnnData dispatch all run on it; then every array's first element is read, which reads
 * entries (stored, deflated, with their CRC) and decodes chunks. */
#include "fuzz_file.h"

#include "format.h"
#include "fuzz_read.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_file(data, size, path, sizeof path);
    if (fd < 0)
        return 0;
    cfs_dataset *ds = NULL;
    cfs_err err = {0};
    if (cfs_format_open(path, &ds, &err) == 0) {
        fuzz_read_first(ds->root);
        cfs_dataset_free(ds);
    }
    close(fd);
    return 0;
}
