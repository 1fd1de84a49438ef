/* AnnData Zarr stores (formats/zarr/): the input is a store's consolidated metadata
 * (.zmetadata), which alone describes every group and array; the store is opened as a dataset
 * through the registry, so detection, the metadata and the AnnData dispatch all run on it. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format.h"

static int write_file(const char *dir, const char *name, const void *data, size_t size)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    ssize_t put = size ? write(fd, data, size) : 0;
    close(fd);
    return put == (ssize_t)size ? 0 : -1;
}

static char dir[64];

/* The store's folder goes with the process. */
static void remove_dir(void)
{
    char path[512];
    static const char *const names[] = {".zgroup", ".zmetadata"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/dev/shm/cfs-fuzz-zarr-XXXXXX");
        if (!mkdtemp(dir)) {
            snprintf(dir, sizeof dir, "/tmp/cfs-fuzz-zarr-XXXXXX");
            if (!mkdtemp(dir))
                return 0;
        }
        atexit(remove_dir);
    }
    static const char zgroup[] = "{\"zarr_format\": 2}";
    if (write_file(dir, ".zgroup", zgroup, sizeof zgroup - 1) < 0 ||
        write_file(dir, ".zmetadata", data, size) < 0)
        return 0;
    cfs_dataset *ds = NULL;
    cfs_err err = {0};
    if (cfs_format_open(dir, &ds, &err) == 0)
        cfs_dataset_free(ds);
    return 0;
}
