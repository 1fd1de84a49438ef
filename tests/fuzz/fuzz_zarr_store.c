/* AnnData Zarr stores (formats/zarr/): the input is a store's consolidated metadata
 * (.zmetadata), which alone describes every group and array; the store is opened as a dataset
 * through the registry, so detection, the metadata and the AnnData dispatch all run on it. */
#include "format.h"
#include "fuzz_dir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char zgroup[] = "{\"zarr_format\": 2}";
    if (fuzz_dir_write(".zgroup", zgroup, sizeof zgroup - 1) < 0 ||
        fuzz_dir_write(".zmetadata", data, size) < 0)
        return 0;
    cfs_dataset *ds = NULL;
    cfs_err err = {0};
    if (cfs_format_open(fuzz_dir(), &ds, &err) == 0)
        cfs_dataset_free(ds);
    return 0;
}
