/*
 * A Zarr store's keys in a folder or a zip, local or URLs (see zarr_backend.h). A zip is opened
 * once with libzip (read-only, without ZIP_CHECKCONS, which refuses ZipStore's duplicate
 * names); its entry names are indexed here, sorted, the last entry of a name winning. libzip's
 * archive handle is not safe for concurrent use, so reads of one zip take its lock.
 */
#include "zarr_backend.h"
#include "path.h"
#include "remote.h"
#include "strlist.h"
#include "zarr_zipsource.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

/* A value bigger than this is refused rather than read (a corrupt store). */
#define ZR_MAX_FILE ((size_t)1 << 31)

typedef struct zentry {
    char *name;       /* without the top folder */
    zip_uint64_t index;
} zentry;

struct zr_backend {
    char *url;        /* folder URL: as given */
    char *root;       /* folder: as given */
    char *real_root;  /* folder: resolved, for the symlink check */
    zip_t *zip;
    zr_zipsource *remote_zip; /* a zip URL's source: why its reads failed */
    pthread_mutex_t lock;
    zentry *entries;  /* sorted by name, one per name */
    size_t nentries;
};

bool zr_backend_is_zip(const zr_backend *b)
{
    return b->zip != NULL;
}

const char *zr_backend_url(const zr_backend *b)
{
    return b->url;
}

/* ------------------------------------------------------------------------------------------ */
/* folder */

/* The resolved path of key, if it stays inside the store: 1; 0 if it does not exist; -1 if it
 * leads out of the store (err says so). */
static int resolve(const zr_backend *b, const char *key, char **out, cfs_err *err)
{
    char *full = cfs_path_join(b->root, key);
    if (!full)
        return cfs_err_oom(err);
    char *real = realpath(full, NULL);
    free(full);
    if (!real) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0;
        return cfs_err_setc(err, CFS_EIO, "%s cannot be resolved: %s", key, strerror(errno));
    }
    size_t n = strlen(b->real_root);
    if (strncmp(real, b->real_root, n) != 0 || (real[n] != '/' && real[n] != '\0')) {
        free(real);
        return cfs_err_setc(err, CFS_EREFUSED, "%s is a symlink leading out of the store, "
                            "which is not followed; copy what it points to into the store", key);
    }
    *out = real;
    return 1;
}

static int folder_read(const zr_backend *b, const char *key, unsigned char **data, size_t *len,
                       cfs_err *err)
{
    char *path = NULL;
    int rc = resolve(b, key, &path, err);
    if (rc <= 0)
        return rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    free(path);
    if (fd < 0)
        return errno == ENOENT ? 0
                               : cfs_err_setc(err, CFS_EIO, "%s cannot be opened: %s", key,
                                              strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return S_ISDIR(st.st_mode) ? 0 : cfs_err_setc(err, CFS_EIO, "%s is not a file", key);
    }
    if ((uint64_t)st.st_size > ZR_MAX_FILE) {
        close(fd);
        return cfs_err_setc(err, CFS_EDAMAGED, "%s is %llu bytes, more than a chunk may be",
                            key, (unsigned long long)st.st_size);
    }
    size_t n = (size_t)st.st_size;
    unsigned char *buf = malloc(n ? n : 1);
    if (!buf) {
        close(fd);
        return cfs_err_oom(err);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            close(fd);
            free(buf);
            return cfs_err_setc(err, CFS_EIO, "%s cannot be read: %s", key,
                                e ? strerror(e) : "it shrank while being read");
        }
        got += (size_t)r;
    }
    close(fd);
    *data = buf;
    *len = n;
    return 1;
}

static int folder_dirs(const zr_backend *b, const char *prefix, cfs_strlist *out, cfs_err *err)
{
    char *dir = NULL;
    int rc = resolve(b, prefix, &dir, err);
    if (rc <= 0)
        return rc;
    char **list = NULL;
    size_t n = 0;
    if (cfs_path_list(dir, &list, &n) == 0) {
        for (size_t i = 0; i < n && rc >= 0; i++) {
            char *child = cfs_path_join(dir, list[i]);
            struct stat st;
            if (child && stat(child, &st) == 0 && S_ISDIR(st.st_mode))
                rc = cfs_strlist_push(out, strdup(list[i]));
            free(child);
        }
        cfs_path_list_free(list, n);
    }
    free(dir);
    return rc < 0 ? cfs_err_oom(err) : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* folder URL: each key GET'd from URL/KEY, through the process's reader of URLs (remote.h) */

/* A key the server does not have (404, 410) is none: a chunk not written, its fill value, as
 * zarr-python takes it. Any other failure is an error naming the key's URL, never a fill. */
static int url_read(const zr_backend *b, const char *key, unsigned char **data, size_t *len,
                    cfs_err *err)
{
    char *url = cfs_url_child(b->url, key);
    if (!url)
        return cfs_err_oom(err);
    cfs_remote_info info;
    unsigned char *buf = NULL;
    int rc = cfs_remote_info_of(url, &info, err);
    if (rc < 0 && err->status == CFS_ENOTFOUND)
        rc = 0;
    else if (rc < 0)
        rc = cfs_err_prefix(err, "%s", url);
    else if (info.size > ZR_MAX_FILE)
        rc = cfs_err_setc(err, CFS_EDAMAGED, "%s is %llu bytes, more than a chunk may be", url,
                          (unsigned long long)info.size);
    else if (!(buf = malloc(info.size ? (size_t)info.size : 1)))
        rc = cfs_err_oom(err);
    else if (cfs_remote_read(url, &info, 0, buf, (size_t)info.size, err) < 0)
        rc = cfs_err_prefix(err, "%s", url);
    else
        rc = 1;
    free(url);
    if (rc <= 0) {
        free(buf);
        return rc;
    }
    *data = buf;
    *len = (size_t)info.size;
    return 1;
}

/* A folder URL is read from its consolidated metadata, which lists its nodes (HTTP has no
 * listing of a folder): the metadata layer refuses one without (zr_backend_url). */
static int url_open(zr_backend *b, const char *url, cfs_err *err)
{
    return (b->url = strdup(url)) ? 0 : cfs_err_oom(err);
}

/* ------------------------------------------------------------------------------------------ */
/* zip */

static int cmp_entry(const void *a, const void *b)
{
    const zentry *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    /* equal names: the later entry first, so that dedup keeps it */
    return c ? c : (x->index < y->index) - (x->index > y->index);
}

static int cmp_key(const void *key, const void *e)
{
    return strcmp(key, ((const zentry *)e)->name);
}

static const zentry *zip_find(const zr_backend *b, const char *key)
{
    return b->nentries ? bsearch(key, b->entries, b->nentries, sizeof *b->entries, cmp_key)
                       : NULL;
}

static bool is_root_meta(const char *leaf, size_t len)
{
    static const char *const names[] = {".zgroup", ".zarray", ".zmetadata", ".zattrs",
                                        "zarr.json", NULL};
    for (size_t i = 0; names[i]; i++)
        if (strlen(names[i]) == len && memcmp(leaf, names[i], len) == 0)
            return true;
    return false;
}

bool zr_backend_root_meta_name(const char *name, size_t len)
{
    if (len >= 2 && name[0] == '.' && name[1] == '/') {
        name += 2;
        len -= 2;
    }
    const char *slash = memchr(name, '/', len);
    if (!slash)
        return is_root_meta(name, len);
    size_t rest = len - (size_t)(slash + 1 - name);
    return !memchr(slash + 1, '/', rest) && is_root_meta(slash + 1, rest);
}

/* The top folder ("x.zarr/") every entry lies under when the root holds no metadata but that
 * folder does; "" otherwise. */
static char *top_folder(zip_t *z, zip_int64_t n)
{
    char *top = NULL;
    bool meta_at_root = false, meta_in_top = false;
    for (zip_int64_t i = 0; i < n; i++) {
        const char *name = zip_get_name(z, (zip_uint64_t)i, ZIP_FL_ENC_RAW);
        if (!name)
            continue;
        if (name[0] == '.' && name[1] == '/')
            name += 2;
        const char *slash = strchr(name, '/');
        if (!slash) {
            meta_at_root |= is_root_meta(name, strlen(name));
            if (*name)
                meta_at_root |= !top; /* a file at the root: no common top folder */
            continue;
        }
        size_t tl = (size_t)(slash - name) + 1;
        if (!top)
            top = strndup(name, tl);
        else if (strlen(top) != tl || strncmp(top, name, tl) != 0)
            meta_at_root = true; /* two top folders */
        if (!strchr(slash + 1, '/') && is_root_meta(slash + 1, strlen(slash + 1)))
            meta_in_top = true;
    }
    if (meta_at_root || !meta_in_top || !top) {
        free(top);
        return strdup("");
    }
    return top;
}

static int zip_index(zr_backend *b, cfs_err *err)
{
    zip_int64_t n = zip_get_num_entries(b->zip, 0);
    if (n < 0)
        n = 0;
    char *top = top_folder(b->zip, n);
    if (!top || !(b->entries = calloc((size_t)n + 1, sizeof *b->entries))) {
        free(top);
        return cfs_err_oom(err);
    }
    size_t tl = strlen(top), k = 0;
    for (zip_int64_t i = 0; i < n; i++) {
        const char *name = zip_get_name(b->zip, (zip_uint64_t)i, ZIP_FL_ENC_RAW);
        if (!name)
            continue;
        if (name[0] == '.' && name[1] == '/')
            name += 2;
        size_t len = strlen(name);
        if (len == 0 || name[len - 1] == '/' || strncmp(name, top, tl) != 0)
            continue; /* folders are implied by the names under them */
        if (!(b->entries[k].name = strdup(name + tl))) {
            free(top);
            b->nentries = k;
            return cfs_err_oom(err);
        }
        b->entries[k++].index = (zip_uint64_t)i;
    }
    free(top);
    qsort(b->entries, k, sizeof *b->entries, cmp_entry);
    size_t w = 0;
    for (size_t i = 0; i < k; i++) {
        if (w && strcmp(b->entries[w - 1].name, b->entries[i].name) == 0) {
            free(b->entries[i].name);
            continue;
        }
        b->entries[w++] = b->entries[i];
    }
    b->nentries = w;
    return 0;
}

/* The archive at path, or at a URL through a source of its own (only what libzip reads of it
 * is fetched). */
static zip_t *zip_open_any(zr_backend *b, const char *path, int *ze, cfs_err *err)
{
    if (!cfs_is_url(path))
        return zip_open(path, ZIP_RDONLY, ze);
    zip_source_t *src;
    if (zr_zipsource_open(path, &src, &b->remote_zip, err) < 0)
        return NULL;
    zip_error_t e;
    zip_error_init(&e);
    zip_t *z = zip_open_from_source(src, ZIP_RDONLY, &e);
    *ze = zip_error_code_zip(&e);
    zip_error_fini(&e);
    if (!z) {
        cfs_err why;
        if (zr_zipsource_failure(b->remote_zip, &why))
            *err = why;
        else
            err->status = CFS_OK;
        zip_source_free(src);
        b->remote_zip = NULL;
    }
    return z;
}

static int zip_open_store(zr_backend *b, const char *path, cfs_err *err)
{
    int ze = 0;
    err->status = CFS_OK;
    b->zip = zip_open_any(b, path, &ze, err);
    if (!b->zip && err->status != CFS_OK)
        return -1;      /* the URL could not be read: why, not damage */
    if (!b->zip) {
        zip_error_t e;
        zip_error_init_with_code(&e, ze);
        int rc = cfs_err_setc(err, ze == ZIP_ER_OPEN || ze == ZIP_ER_READ ? CFS_EIO
                                                                            : CFS_EDAMAGED,
                              "is a zip that cannot be read (%s): its central directory is "
                              "damaged or missing; re-create the zip from the store folder",
                              zip_error_strerror(&e));
        zip_error_fini(&e);
        return rc;
    }
    pthread_mutex_init(&b->lock, NULL);
    return zip_index(b, err);
}

static int zip_read(const zr_backend *b, const char *key, unsigned char **data, size_t *len,
                    cfs_err *err)
{
    const zentry *e = zip_find(b, key);
    if (!e)
        return 0;
    pthread_mutex_t *lock = (pthread_mutex_t *)&b->lock;
    pthread_mutex_lock(lock);
    zip_stat_t st;
    int rc = 0;
    unsigned char *buf = NULL;
    zip_file_t *f = NULL;
    if (zip_stat_index(b->zip, e->index, 0, &st) < 0 || !(st.valid & ZIP_STAT_SIZE))
        rc = cfs_err_setc(err, CFS_EDAMAGED, "%s: its zip entry cannot be read (%s); "
                          "re-create the zip", key, zip_strerror(b->zip));
    else if (st.size > ZR_MAX_FILE)
        rc = cfs_err_setc(err, CFS_EDAMAGED, "%s is %llu bytes, more than a chunk may be", key,
                          (unsigned long long)st.size);
    else if (!(buf = malloc(st.size ? (size_t)st.size : 1)))
        rc = cfs_err_oom(err);
    else if (!(f = zip_fopen_index(b->zip, e->index, 0)))
        rc = cfs_err_setc(err, CFS_EDAMAGED, "%s: its zip entry cannot be opened (%s); "
                          "re-create the zip", key, zip_strerror(b->zip));
    size_t got = 0;
    while (rc == 0 && got < st.size) {
        zip_int64_t r = zip_fread(f, buf + got, st.size - got);
        if (r <= 0)
            rc = cfs_err_setc(err, CFS_EDAMAGED, "%s: its zip entry is damaged (%s); "
                              "re-create the zip", key,
                              r < 0 ? zip_file_strerror(f) : "shorter than its size");
        else
            got += (size_t)r;
    }
    /* libzip checks the CRC at the end of the data: one more read reports a mismatch */
    unsigned char probe;
    if (rc == 0 && zip_fread(f, &probe, 1) < 0)
        rc = cfs_err_setc(err, CFS_EDAMAGED, "%s: its zip entry is damaged (%s); re-create "
                          "the zip", key, zip_file_strerror(f));
    if (f)
        zip_fclose(f);
    cfs_err why;
    if (b->remote_zip && zr_zipsource_failure(b->remote_zip, &why)) {
        *err = why;     /* the URL could not be read: why, not damage */
        rc = cfs_err_prefix(err, "%s", key);
    }
    pthread_mutex_unlock(lock);
    if (rc < 0) {
        free(buf);
        return -1;
    }
    *data = buf;
    *len = got;
    return 1;
}

static int zip_dirs(const zr_backend *b, const char *prefix, cfs_strlist *out, cfs_err *err)
{
    size_t pl = strlen(prefix);
    for (size_t i = 0; i < b->nentries; i++) {
        const char *name = b->entries[i].name;
        if (pl && (strncmp(name, prefix, pl) != 0 || name[pl] != '/'))
            continue;
        const char *child = name + (pl ? pl + 1 : 0);
        const char *slash = strchr(child, '/');
        if (!slash || slash == child)
            continue;
        size_t cl = (size_t)(slash - child);
        bool seen = false;
        for (size_t k = 0; k < out->n && !seen; k++)
            seen = strlen(out->v[k]) == cl && strncmp(out->v[k], child, cl) == 0;
        if (!seen && cfs_strlist_push(out, strndup(child, cl)) < 0)
            return cfs_err_oom(err);
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */

const char *const zr_url_folder_suffixes[] = {".zarr", NULL};
const char *const zr_url_folder_version_keys[] = {".zmetadata", "zarr.json", NULL};

int zr_backend_open(const char *path, zr_backend **out, cfs_err *err)
{
    *out = NULL;
    zr_backend *b = calloc(1, sizeof *b);
    if (!b)
        return cfs_err_oom(err);
    struct stat st;
    int rc;
    if (cfs_url_is_folder(path)) {
        rc = url_open(b, path, err);
    } else if (cfs_is_url(path) || (stat(path, &st) == 0 && S_ISREG(st.st_mode))) {
        rc = zip_open_store(b, path, err);
    } else if (!(b->root = strdup(path))) {
        rc = cfs_err_oom(err);
    } else if (!(b->real_root = realpath(path, NULL))) {
        rc = cfs_err_setc(err, CFS_EIO, "cannot be resolved: %s", strerror(errno));
    } else {
        rc = 0;
    }
    if (rc < 0) {
        zr_backend_free(b);
        return -1;
    }
    *out = b;
    return 0;
}

void zr_backend_free(zr_backend *b)
{
    if (!b)
        return;
    if (b->zip) {
        zip_discard(b->zip);
        pthread_mutex_destroy(&b->lock);
    }
    for (size_t i = 0; i < b->nentries; i++)
        free(b->entries[i].name);
    free(b->entries);
    free(b->url);
    free(b->root);
    free(b->real_root);
    free(b);
}

int zr_backend_read(const zr_backend *b, const char *key, unsigned char **data, size_t *len,
                    cfs_err *err)
{
    *data = NULL;
    *len = 0;
    return b->zip ? zip_read(b, key, data, len, err)
           : b->url ? url_read(b, key, data, len, err)
                    : folder_read(b, key, data, len, err);
}

bool zr_backend_has(const zr_backend *b, const char *key)
{
    if (b->zip)
        return zip_find(b, key) != NULL;
    if (b->url)
        return false;   /* its consolidated metadata lists its nodes */
    char *path = NULL;
    cfs_err ignore;
    struct stat st;
    bool yes = resolve(b, key, &path, &ignore) > 0 && stat(path, &st) == 0 &&
               S_ISREG(st.st_mode);
    free(path);
    return yes;
}

int zr_backend_dirs(const zr_backend *b, const char *prefix, char ***names, size_t *n,
                    cfs_err *err)
{
    cfs_strlist l = {0};
    int rc = b->zip ? zip_dirs(b, prefix, &l, err)
             : b->url ? 0     /* HTTP lists no folder: the consolidated metadata does */
                      : folder_dirs(b, prefix, &l, err);
    if (rc < 0) {
        cfs_strlist_free(&l);
        return -1;
    }
    *names = l.v;
    *n = l.n;
    return 0;
}
