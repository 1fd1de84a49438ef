#include "unpacked.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "probe.h"
#include "remote.h"
#include "strfmt.h"
#include "unpack.h"

/* A compressed file inside a compressed file (a .rds.gz of a gzip-compressed .rds) is
 * decompressed again, up to this many layers in all. */
#define MAX_LAYERS 3

typedef struct writer {
    cfs_progress *progress;
    cfs_unpacked_grow grow;
    void *grow_ctx;
    uint64_t below;         /* bytes of the layer decompressed before, still on disk */
} writer;

static int note(void *ctx, uint64_t done, uint64_t total, uint64_t written, cfs_err *err)
{
    writer *w = ctx;
    cfs_progress_note(w->progress, "decompressing", total ? (double)done / (double)total : 0);
    return w->grow ? w->grow(w->grow_ctx, w->below + written, err) : 0;
}

/* Decompresses source into a new file at path. */
static int unpack_into(const char *source, const char *codec, const char *path, writer *w,
                       cfs_err *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return cfs_err_errno(err, errno, "cannot create %s", path);
    int rc = cfs_unpack_file(source, codec, fd, note, w, err);
    if (close(fd) < 0 && rc == 0)
        rc = cfs_err_errno(err, errno, "cannot write its decompressed copy");
    if (rc < 0)
        unlink(path);
    return rc;
}

/* The compression of the file at path by its magic, or NULL. */
static const char *compression_of(const char *path)
{
    cfs_probe_input *in;
    cfs_err ignored;
    if (cfs_probe_input_open(path, &in, &ignored) < 0)
        return NULL;
    const char *codec = cfs_probe_compression(in);
    cfs_probe_input_close(in);
    return codec;
}

/* Peels the layers left in the copy at tmp (the outer one decompressed): each into tmp2, which
 * then takes tmp's place. */
static int unpack_inner(const char *tmp, writer *w, cfs_err *err)
{
    char *tmp2 = cfs_strdupf("%s.inner", tmp);
    if (!tmp2)
        return cfs_err_oom(err);
    int rc = 0;
    const char *codec;
    for (int layer = 1; rc == 0 && layer < MAX_LAYERS && (codec = compression_of(tmp)); layer++) {
        struct stat st;
        w->below = stat(tmp, &st) == 0 ? (uint64_t)st.st_size : 0;
        rc = unpack_into(tmp, codec, tmp2, w, err);
        if (rc == 0 && rename(tmp2, tmp) < 0) {
            rc = cfs_err_errno(err, errno, "cannot name its decompressed copy %s", tmp);
            unlink(tmp2);
        }
    }
    free(tmp2);
    return rc;
}

static int fetched(void *ctx, uint64_t written, uint64_t total, cfs_err *err)
{
    writer *w = ctx;
    cfs_progress_note(w->progress, "fetching", total ? (double)written / (double)total : 1);
    return w->grow ? w->grow(w->grow_ctx, written, err) : 0;
}

/* Fetches the URL source whole into a new file at path (streaming, piece by piece). */
static int fetch_into(const char *source, const char *path, writer *w, cfs_err *err)
{
    cfs_remote_info version;
    if (cfs_remote_info_of(source, &version, err) < 0)
        return -1;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return cfs_err_errno(err, errno, "cannot create %s", path);
    cfs_progress_begin(w->progress, "fetching");
    int rc = cfs_remote_fetch(source, &version, fd, fetched, w, err);
    cfs_progress_end(w->progress, "fetching");
    if (close(fd) < 0 && rc == 0)
        rc = cfs_err_errno(err, errno, "cannot write its fetched copy");
    if (rc < 0)
        unlink(path);
    return rc;
}

int cfs_unpacked_write(const char *source, const char *codec, const char *dest,
                       cfs_progress *progress, cfs_unpacked_grow grow, void *grow_ctx,
                       cfs_err *err)
{
    writer w = {progress, grow, grow_ctx, 0};
    char *tmp = cfs_strdupf("%s.tmp-%ld", dest, (long)getpid());
    if (!tmp)
        return cfs_err_oom(err);
    /* A URL: fetched first, then its layers peeled like a compressed copy's inner ones. */
    int rc = cfs_is_url(source) ? fetch_into(source, tmp, &w, err) : 0;
    cfs_progress_begin(progress, "decompressing");
    if (rc == 0 && !cfs_is_url(source))
        rc = unpack_into(source, codec, tmp, &w, err);
    if (rc == 0)
        rc = unpack_inner(tmp, &w, err);
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
