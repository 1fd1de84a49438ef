#include "unpacked.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strfmt.h"
#include "unpack.h"

typedef struct writer {
    cfs_progress *progress;
    cfs_unpacked_grow grow;
    void *grow_ctx;
} writer;

static int note(void *ctx, uint64_t done, uint64_t total, uint64_t written, cfs_err *err)
{
    writer *w = ctx;
    cfs_progress_note(w->progress, "decompressing", total ? (double)done / (double)total : 0);
    return w->grow ? w->grow(w->grow_ctx, written, err) : 0;
}

int cfs_unpacked_write(const char *source, const char *codec, const char *dest,
                       cfs_progress *progress, cfs_unpacked_grow grow, void *grow_ctx,
                       cfs_err *err)
{
    writer w = {progress, grow, grow_ctx};
    char *tmp = cfs_strdupf("%s.tmp-%ld", dest, (long)getpid());
    if (!tmp)
        return cfs_err_oom(err);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        int rc = cfs_err_errno(err, errno, "cannot create %s", tmp);
        free(tmp);
        return rc;
    }
    cfs_progress_begin(progress, "decompressing");
    int rc = cfs_unpack_file(source, codec, fd, note, &w, err);
    if (close(fd) < 0 && rc == 0)
        rc = cfs_err_errno(err, errno, "cannot write its decompressed copy");
    if (rc == 0 && rename(tmp, dest) < 0)
        rc = cfs_err_errno(err, errno, "cannot name its decompressed copy %s", dest);
    cfs_progress_end(progress, "decompressing");
    if (rc < 0)
        unlink(tmp);
    free(tmp);
    return rc;
}

int cfs_unpacked_in_folder(void *ctx, const char *source, const char *codec,
                           cfs_progress *progress, char **path, cfs_err *err)
{
    static atomic_ulong serial;
    *path = cfs_strdupf("%s/unpacked-%lu", (const char *)ctx, atomic_fetch_add(&serial, 1));
    if (!*path)
        return cfs_err_oom(err);
    if (cfs_unpacked_write(source, codec, *path, progress, NULL, NULL, err) == 0)
        return 0;
    free(*path);
    *path = NULL;
    return -1;
}
