/* Decompressing compressed copies (formats/unpack.c): gzip, bzip2 and xz streams. */
#include <fcntl.h>

#include "fuzz_file.h"
#include "unpack.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const codecs[] = {"gzip", "bzip2", "xz"};
    if (size < 1)
        return 0;
    char path[64];
    int fd = fuzz_file(data + 1, size - 1, path, sizeof path);
    int out = open("/dev/null", O_WRONLY | O_CLOEXEC);
    cfs_err err = {0};
    if (fd >= 0 && out >= 0)
        cfs_unpack_file(path, codecs[data[0] % 3], out, NULL, NULL, &err);
    if (out >= 0)
        close(out);
    if (fd >= 0)
        close(fd);
    return 0;
}
