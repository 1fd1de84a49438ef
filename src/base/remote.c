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

static const cfs_url_shapes *shapes_now(void);

static bool ends_with_case(const char *s, size_t n, const char *end)
{
    size_t e = strlen(end);
    return n >= e && strncasecmp(s + n - e, end, e) == 0;
}

bool cfs_url_is_folder(const char *url)
{
    size_t n = path_end(url);
    if (!cfs_is_url(url) || n == 0)
        return false;
    if (url[n - 1] == '/')
        return true;
    const cfs_url_shapes *sh = shapes_now();
    for (const char *const *s = sh ? sh->folder_suffixes : NULL; s && *s; s++)
        if (ends_with_case(url, n, *s))
            return true;
    return false;
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

char *cfs_url_sibling(const char *url, const char *key)
{
    if (cfs_url_is_folder(url))
        return cfs_url_child(url, key);
    size_t n = path_end(url);
    while (n > 0 && url[n - 1] != '/')
        n--;
    char *out = malloc(n + strlen(key) + 1);
    if (out)
        sprintf(out, "%.*s%s", (int)n, url, key);
    return out;
}

char *cfs_url_leaf(const char *url)
{
    size_t end = path_end(url);
    while (end > 0 && url[end - 1] == '/')
        end--;
    size_t start = end;
    while (start > 0 && url[start - 1] != '/')
        start--;
    return strndup(url + start, end - start);
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

static const cfs_url_shapes *shapes_now(void)
{
    return ops_now().shapes;
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

/* The way each folder URL's version was found last (the index of the folder version key that
 * answered, or past them: its companions), tried first at the next look: a Zarr v3 folder's
 * poll does not begin with a 404 for v2's key each time. A few hundred folders are
 * remembered; one forgotten is asked in order again. */
#define REMEMBERED_FOLDERS 256

static struct {
    pthread_mutex_t lock;
    struct {
        char *url;
        size_t way;
    } v[REMEMBERED_FOLDERS];
    size_t n, next;
} answered = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* SIZE_MAX when none is remembered. */
static size_t way_of(const char *url)
{
    size_t way = SIZE_MAX;
    pthread_mutex_lock(&answered.lock);
    for (size_t i = 0; i < answered.n && way == SIZE_MAX; i++)
        if (strcmp(answered.v[i].url, url) == 0)
            way = answered.v[i].way;
    pthread_mutex_unlock(&answered.lock);
    return way;
}

static void remember_way(const char *url, size_t way)
{
    pthread_mutex_lock(&answered.lock);
    size_t i = 0;
    while (i < answered.n && strcmp(answered.v[i].url, url) != 0)
        i++;
    if (i == answered.n) {
        char *kept = strdup(url);
        if (kept) {
            i = answered.n < REMEMBERED_FOLDERS ? answered.n++
                                                : answered.next++ % REMEMBERED_FOLDERS;
            free(answered.v[i].url);
            answered.v[i].url = kept;
        }
    }
    if (i < answered.n)
        answered.v[i].way = way;
    pthread_mutex_unlock(&answered.lock);
}

void cfs_url_members_free(cfs_url_member *m, size_t n)
{
    for (size_t i = 0; m && i < n; i++) {
        free(m[i].key);
        free(m[i].url);
    }
    free(m);
}

/* The info of key beside (or in) url; its URL prefixes any failure but a missing key. */
static int key_info(const char *url, const char *key, cfs_remote_info *out, cfs_err *err)
{
    char *key_url = cfs_url_sibling(url, key);
    if (!key_url)
        return cfs_err_oom(err);
    int rc = cfs_remote_info_of(key_url, out, err);
    if (rc < 0 && err->status != CFS_ENOTFOUND && err->status != CFS_ENOMEM)
        cfs_err_prefix(err, "%s", key_url);
    free(key_url);
    return rc;
}

static int key_exists(void *ctx, const char *key, cfs_err *err)
{
    cfs_remote_info info;
    if (key_info(ctx, key, &info, err) == 0)
        return 1;
    return err->status == CFS_ENOTFOUND ? 0 : -1;
}

static int add_member(cfs_url_member **m, size_t *n, const char *key, const char *url,
                      const cfs_remote_info *info, cfs_err *err)
{
    cfs_url_member *grown = realloc(*m, (*n + 1) * sizeof *grown);
    if (!grown)
        return cfs_err_oom(err);
    *m = grown;
    cfs_url_member *e = &grown[*n];
    *e = (cfs_url_member){strdup(key), strdup(url), *info};
    if (!e->key || !e->url) {
        free(e->key);
        free(e->url);
        return cfs_err_oom(err);
    }
    (*n)++;
    return 0;
}

/* The members of url as its companions hook lists them (not asking its folder version keys);
 * *claimed: whether the hook took url for its input, so that a failure is that input's refusal
 * (one before, the object's own, is not). */
static int list_members(const char *url, cfs_url_member **out, size_t *n, bool *claimed,
                        cfs_err *err)
{
    *out = NULL;
    *n = 0;
    *claimed = false;
    const cfs_url_shapes *sh = shapes_now();
    if (!sh || !sh->companions)
        return 0;
    bool folder = cfs_url_is_folder(url);
    char *leaf = folder ? NULL : cfs_url_leaf(url);
    char *target = cfs_url_target(url);
    cfs_strlist keys = {0};
    cfs_remote_info info;
    int rc = (!folder && !leaf) || !target ? cfs_err_oom(err) : 0;
    /* an object is asked first: one the server lacks is refused for that, not for its lists */
    if (rc == 0 && !folder)
        rc = cfs_remote_info_of(url, &info, err);
    if (rc == 0) {
        rc = sh->companions(leaf, key_exists, target, &keys, err);
        *claimed = rc != 0;
    }
    if (rc > 0 && !folder && add_member(out, n, leaf, target, &info, err) < 0)
        rc = -1;
    for (size_t i = 0; rc > 0 && i < keys.n; i++) {
        char *key_url = strchr(keys.v[i], '/') ? NULL : cfs_url_sibling(target, keys.v[i]);
        if (!key_url)
            rc = strchr(keys.v[i], '/') ? cfs_err_setc(err, CFS_EINVALID, "a companion key "
                                                       "with a '/' (%s)", keys.v[i])
                                        : cfs_err_oom(err);
        else if (key_info(target, keys.v[i], &info, err) < 0 ||
                 add_member(out, n, keys.v[i], key_url, &info, err) < 0)
            rc = -1;
        free(key_url);
    }
    cfs_strlist_free(&keys);
    free(leaf);
    free(target);
    if (rc <= 0) {
        cfs_url_members_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

/* FNV-1a, continued from h. */
static uint64_t hash_more(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * UINT64_C(1099511628211);
    return h;
}

#define FNV_START UINT64_C(1469598103934665603)

/* One version made of all the members' (each its ETag, else Last-Modified and size): any of
 * them changed, added or gone changes it. 0 when url has no members (ENOTFOUND in err). */
static int members_info(const char *url, cfs_remote_info *out, bool *claimed, cfs_err *err)
{
    cfs_url_member *m;
    size_t n;
    int rc = list_members(url, &m, &n, claimed, err);
    if (rc == 0)
        return cfs_err_setc(err, CFS_ENOTFOUND, "none of the files its formats read there");
    if (rc < 0)
        return -1;
    uint64_t h = FNV_START;
    *out = (cfs_remote_info){0};
    for (size_t i = 0; i < n; i++) {
        char size[24];
        snprintf(size, sizeof size, "|%llu|", (unsigned long long)m[i].info.size);
        h = hash_more(hash_more(hash_more(hash_more(h, m[i].key), "|"), m[i].info.version), size);
        out->size += m[i].info.size;
        if (m[i].info.mtime > out->mtime)
            out->mtime = m[i].info.mtime;
    }
    snprintf(out->version, sizeof out->version, "members:%zu:%016llx", n, (unsigned long long)h);
    cfs_url_members_free(m, n);
    return 0;
}

/* A folder URL's version: the first way the server answers, of its folder version keys in order
 * (a Zarr store's consolidated metadata) and then its companions (a folder of a matrix and its
 * lists); the way that answered last is tried first. */
static int folder_info(const char *url, cfs_remote_info *out, bool *claimed, cfs_err *err)
{
    *claimed = false;
    const cfs_url_shapes *sh = shapes_now();
    size_t nkeys = 0;
    while (sh && sh->folder_version_keys && sh->folder_version_keys[nkeys])
        nkeys++;
    size_t first = way_of(url);
    int rc = cfs_err_setc(err, CFS_ENOTFOUND, "no folder this version reads over HTTP");
    for (size_t i = 0; i <= nkeys + 1; i++) {
        size_t way = i == 0 ? first : i - 1;
        if ((i == 0 && first > nkeys) || (i > 0 && way == first))
            continue;
        cfs_err why;
        rc = way < nkeys ? key_info(url, sh->folder_version_keys[way], out, &why)
                         : members_info(url, out, claimed, &why);
        if (rc == 0) {
            if (way != first)
                remember_way(url, way);
            return 0;
        }
        /* a key's 404 is the reason kept (the last key's): the companions' is no news */
        if (why.status != CFS_ENOTFOUND || way < nkeys || i == 0)
            *err = why;
        if (why.status != CFS_ENOTFOUND)
            return -1;
    }
    return rc;
}

int cfs_url_members(const char *url, cfs_url_member **out, size_t *n, cfs_err *err)
{
    *out = NULL;
    *n = 0;
    bool claimed = false;
    if (cfs_url_is_folder(url)) {
        /* a folder its version keys answer for is read key by key, not fetched */
        cfs_remote_info info;
        if (folder_info(url, &info, &claimed, err) < 0)
            return claimed ? -1 : 0;
        if (strncmp(info.version, "members:", 8) != 0)
            return 0;
    }
    int rc = list_members(url, out, n, &claimed, err);
    return rc < 0 && !claimed && err->status != CFS_ENOMEM ? 0 : rc;
}

static int object_info(const char *url, cfs_remote_info *out, cfs_err *err)
{
    bool claimed;
    int rc = members_info(url, out, &claimed, err);
    return claimed || err->status == CFS_ENOMEM ? rc : cfs_remote_info_of(url, out, err);
}

bool cfs_same_version(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

int cfs_source_stat(const char *name, struct stat *st)
{
    if (!cfs_is_url(name))
        return stat(name, st);
    cfs_remote_info info = {0};
    cfs_err err;
    bool folder = cfs_url_is_folder(name);
    bool claimed;
    int rc = folder ? folder_info(name, &info, &claimed, &err) : object_info(name, &info, &err);
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
    st->st_ino = (ino_t)hash_more(FNV_START, info.version);
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
    return cfs_url_leaf(url);
}
