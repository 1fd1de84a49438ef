/* MatrixMarket files (formats/mtx.c): the header, the size line and every entry. */
#include "fuzz_file.h"
#include "mtx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_file(data, size, path, sizeof path);
    if (fd < 0)
        return 0;
    cfs_mtx *m = NULL;
    cfs_err err = {0};
    if (cfs_mtx_open(path, "fuzz.mtx", &m, &err) == 0) {
        uint64_t rows, cols, nnz;
        cfs_mtx_size(m, &rows, &cols, &nnz);
        /* The callers check the size line against the lists first; a fuzzer has none. */
        if (rows <= 100000 && cols <= 100000 && nnz <= 1000000)
            cfs_mtx_index(m, size % 2 == 0, &err);
        cfs_mtx_close(m);
    }
    close(fd);
    return 0;
}
