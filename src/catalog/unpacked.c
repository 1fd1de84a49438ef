#include "unpacked.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "path.h"
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

/* Bytes of one member fetched so far, as bytes of the whole set. */
typedef struct set_progress {
    writer *w;
    uint64_t before, total;
} set_progress;

static int member_fetched(void *ctx, uint64_t written, uint64_t total, cfs_err *err)
{
    (void)total;
    set_progress *sp = ctx;
    return fetched(sp->w, sp->before + written, sp->total, err);
}

/* Fetches a URL's members (an object and the files beside it, §11) into the new folder dir, each
 * under its key: the copy is opened as a local folder of them. */
static int fetch_members(const cfs_url_member *m, size_t n, const char *dir, writer *w,
                         cfs_err *err)
{
    if (mkdir(dir, 0700) < 0)
        return cfs_err_errno(err, errno, "cannot create %s", dir);
    set_progress sp = {w, 0, 0};
    for (size_t i = 0; i < n; i++)
        sp.total += m[i].info.size;
    cfs_progress_begin(w->progress, "fetching");
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char *path = cfs_path_join(dir, m[i].key);
        int fd = path ? open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
        if (!path)
            rc = cfs_err_oom(err);
        else if (fd < 0)
            rc = cfs_err_errno(err, errno, "cannot create %s", path);
        else {
            rc = cfs_remote_fetch(m[i].url, &m[i].info, fd, member_fetched, &sp, err);
            if (close(fd) < 0 && rc == 0)
                rc = cfs_err_errno(err, errno, "cannot write its fetched copy");
        }
        free(path);
        sp.before += m[i].info.size;
    }
    cfs_progress_end(w->progress, "fetching");
    if (rc < 0)
        cfs_unpacked_remove(dir);
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
    cfs_url_member *m = NULL;
    size_t n = 0;
    int set = cfs_is_url(source) ? cfs_url_members(source, &m, &n, err) : 0;
    if (set != 0) {
        /* fetched with the files beside it, as they are: the reader reads them so */
        int rc = set < 0 ? -1 : fetch_members(m, n, tmp, &w, err);
        if (rc == 0 && rename(tmp, dest) < 0) {
            rc = cfs_err_errno(err, errno, "cannot name its fetched copy %s", dest);
            cfs_unpacked_remove(tmp);
        }
        cfs_url_members_free(m, n);
        free(tmp);
        return rc;
    }
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
    char *dest = cfs_strdupf("%s/unpacked-%lu", (const char *)ctx, atomic_fetch_add(&serial, 1));
    *path = NULL;
    if (!dest)
        return cfs_err_oom(err);
    int rc = cfs_unpacked_write(source, codec, dest, progress, NULL, NULL, err);
    if (rc == 0 && !(*path = cfs_unpacked_opened(source, dest)))
        rc = cfs_err_oom(err);
    free(dest);
    return rc;
}

char *cfs_unpacked_opened(const char *source, const char *dest)
{
    struct stat st;
    if (!cfs_is_url(source) || cfs_url_is_folder(source) || stat(dest, &st) < 0 ||
        !S_ISDIR(st.st_mode))
        return strdup(dest);
    char *leaf = cfs_url_leaf(source);
    char *path = leaf ? cfs_path_join(dest, leaf) : NULL;
    free(leaf);
    return path;
}

/* Calls each(ctx, path) for each entry of the folder dir (a copy's files). */
static void each_file(const char *dir, void (*each)(void *ctx, const char *path), void *ctx)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char *p = cfs_path_join(dir, e->d_name);
        if (p)
            each(ctx, p);
        free(p);
    }
    if (d)
        closedir(d);
}

static void add_size(void *ctx, const char *path)
{
    struct stat st;
    if (lstat(path, &st) == 0)
        *(uint64_t *)ctx += (uint64_t)st.st_size;
}

static void unlink_one(void *ctx, const char *path)
{
    (void)ctx;
    unlink(path);
}

int cfs_unpacked_bytes(const char *dest, uint64_t *bytes)
{
    struct stat st;
    if (lstat(dest, &st) < 0)
        return -1;
    *bytes = (uint64_t)st.st_size;
    if (S_ISDIR(st.st_mode)) {
        *bytes = 0;
        each_file(dest, add_size, bytes);
    }
    return 0;
}

void cfs_unpacked_remove(const char *dest)
{
    struct stat st;
    if (lstat(dest, &st) == 0 && S_ISDIR(st.st_mode)) {
        each_file(dest, unlink_one, NULL);
        rmdir(dest);
    } else {
        unlink(dest);
    }
}
