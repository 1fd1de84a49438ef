#include "remote.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static pthread_mutex_t ops_lock = PTHREAD_MUTEX_INITIALIZER;
static cfs_remote_ops current;
static _Thread_local bool failed_here;

void cfs_remote_failures_clear(void)
{
    failed_here = false;
}

bool cfs_remote_failed(void)
{
    return failed_here;
}

/* rc of a remote call, noting a failure that may pass. */
static int noted(int rc, const cfs_err *err)
{
    if (rc < 0 && (err->status == CFS_EIO || err->status == CFS_EFAIL))
        failed_here = true;
    return rc;
}

bool cfs_is_url(const char *name)
{
    return strncasecmp(name, "http://", 7) == 0 || strncasecmp(name, "https://", 8) == 0 ||
           strncmp(name, "s3://", 5) == 0;
}

/* The end of url's path: before its "?..." or "#..." part. */
static size_t path_end(const char *url)
{
    return strcspn(url, "?#");
}

bool cfs_url_is_folder(const char *url)
{
    size_t n = path_end(url);
    return cfs_is_url(url) && n > 0 &&
           (url[n - 1] == '/' || (n >= 5 && strncasecmp(url + n - 5, ".zarr", 5) == 0));
}

char *cfs_url_child(const char *folder, const char *key)
{
    size_t n = path_end(folder);
    while (n > 0 && folder[n - 1] == '/')
        n--;
    char *out = malloc(n + strlen(key) + 2);
    if (out)
        sprintf(out, "%.*s/%s", (int)n, folder, key);
    return out;
}

bool cfs_url_within(const char *url, const char *source)
{
    if (strcmp(url, source) == 0)
        return true;
    if (!cfs_url_is_folder(source))
        return false;
    char *base = cfs_url_child(source, "");
    size_t n = base ? strlen(base) : 0;
    bool under = base && strncmp(url, base, n) == 0 && url[n] && !strpbrk(url + n, "?#");
    free(base);
    for (const char *part = url + n; under && *part;) {
        size_t len = strcspn(part, "/");
        under = len > 0 && !(len == 1 && part[0] == '.') &&
                !(len == 2 && part[0] == '.' && part[1] == '.');
        part += len + (part[len] == '/');
    }
    return under;
}

void cfs_remote_set_ops(const cfs_remote_ops *ops)
{
    pthread_mutex_lock(&ops_lock);
    current = *ops;
    pthread_mutex_unlock(&ops_lock);
}

static cfs_remote_ops ops_now(void)
{
    pthread_mutex_lock(&ops_lock);
    cfs_remote_ops ops = current;
    pthread_mutex_unlock(&ops_lock);
    return ops;
}

int cfs_remote_info_of(const char *url, cfs_remote_info *out, cfs_err *err)
{
    cfs_remote_ops ops = ops_now();
    if (!ops.info)
        return cfs_err_setc(err, CFS_EREFUSED, "%s: URLs are not read here", url);
    return noted(ops.info(ops.ctx, url, out, err), err);
}

int cfs_remote_read(const char *url, const cfs_remote_info *version, uint64_t off, void *buf,
                    size_t len, cfs_err *err)
{
    cfs_remote_ops ops = ops_now();
    if (!ops.read)
        return cfs_err_setc(err, CFS_EREFUSED, "%s: URLs are not read here", url);
    if (off > version->size || len > version->size - off)
        return cfs_err_setc(err, CFS_EIO, "%s: a read of %zu bytes at %llu, past its end (%llu "
                            "bytes)", url, len, (unsigned long long)off,
                            (unsigned long long)version->size);
    return len ? noted(ops.read(ops.ctx, url, version, off, buf, len, err), err) : 0;
}

/* Bytes asked at a time by a fetch: each piece is one request, bounded by -o remote_timeout. */
#define FETCH_PIECE ((uint64_t)16 << 20)

int cfs_remote_fetch(const char *url, const cfs_remote_info *version, int fd,
                     cfs_remote_grow grow, void *grow_ctx, cfs_err *err)
{
    cfs_remote_ops ops = ops_now();
    if (!ops.fetch)
        return cfs_err_setc(err, CFS_EREFUSED, "%s: URLs are not fetched here", url);
    int rc = 0;
    for (uint64_t at = 0; rc == 0 && at < version->size; at += FETCH_PIECE) {
        uint64_t len = version->size - at < FETCH_PIECE ? version->size - at : FETCH_PIECE;
        rc = noted(ops.fetch(ops.ctx, url, version, at, (size_t)len, fd, err), err);
        if (rc == 0 && grow)
            rc = grow(grow_ctx, at + len, version->size, err);
    }
    return rc;
}

/* FNV-1a: the version string as an inode number. */
static uint64_t hash_of(const char *s)
{
    uint64_t h = UINT64_C(1469598103934665603);
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * UINT64_C(1099511628211);
    return h;
}

/* A folder URL's version: its consolidated metadata's, Zarr v2's .zmetadata (tried first: no
 * extra request for the stores most served), else Zarr v3's root zarr.json, which holds it. */
static int folder_info(const char *url, cfs_remote_info *out, cfs_err *err)
{
    static const char *const keys[] = {".zmetadata", "zarr.json"};
    int rc = -1;
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        char *key_url = cfs_url_child(url, keys[i]);
        if (!key_url)
            return cfs_err_oom(err);
        rc = cfs_remote_info_of(key_url, out, err);
        free(key_url);
        if (rc == 0 || err->status != CFS_ENOTFOUND)
            break;
    }
    return rc;
}

int cfs_source_stat(const char *name, struct stat *st)
{
    if (!cfs_is_url(name))
        return stat(name, st);
    cfs_remote_info info = {0};
    cfs_err err;
    bool folder = cfs_url_is_folder(name);
    int rc = folder ? folder_info(name, &info, &err) : cfs_remote_info_of(name, &info, &err);
    if (rc < 0 && err.status == CFS_ENOMEM) {
        errno = ENOMEM;
        return -1;
    }
    /* One that cannot be read has a version made of why: a source refused for it is tried
     * again when the reason changes (the server is back), and never matches a served one. */
    if (rc < 0)
        snprintf(info.version, sizeof info.version, "failed:%.240s", err.msg);
    memset(st, 0, sizeof *st);
    st->st_mode = folder ? S_IFDIR | 0555 : S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_ino = (ino_t)hash_of(info.version);
    st->st_size = (off_t)info.size;
    st->st_mtim.tv_sec = (time_t)info.mtime;
    return 0;
}

char *cfs_url_target(const char *url)
{
    return strndup(url, strcspn(url, "#"));
}

char *cfs_url_name(const char *url)
{
    const char *hash = strchr(url, '#');
    if (hash && hash[1])
        return strdup(hash + 1);
    size_t end = strcspn(url, "?#");
    while (end > 0 && url[end - 1] == '/')
        end--;
    size_t start = end;
    while (start > 0 && url[start - 1] != '/')
        start--;
    return strndup(url + start, end - start);
}
