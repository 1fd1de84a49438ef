/* The fuzz targets' shared piece: the input bytes as a file the readers can open by path
 * (an anonymous memfd, reached through /proc/self/fd). */
#ifndef CFS_FUZZ_FILE_H
#define CFS_FUZZ_FILE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

/* Fills path with a file holding data; returns its descriptor (close it after), or -1. */
static inline int fuzz_file(const uint8_t *data, size_t size, char *path, size_t len)
{
    int fd = memfd_create("fuzz", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    if (size && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return -1;
    }
    snprintf(path, len, "/proc/self/fd/%d", fd);
    return fd;
}

#endif
