/* Whole reads and writes at an offset: see fileio.h. */
#include "fileio.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

int cfs_pwrite_full(int fd, const void *buf, size_t len, uint64_t off, cfs_err *err)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = pwrite(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return cfs_err_set(err, "writing a work file failed: %s",
                               n < 0 ? strerror(errno) : "no space?");
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

int cfs_pread_full(int fd, void *buf, size_t len, uint64_t off, cfs_err *err)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = pread(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return cfs_err_set(err, "reading a work file failed: %s",
                               n < 0 ? strerror(errno) : "unexpected end");
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}
