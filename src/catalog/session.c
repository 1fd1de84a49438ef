#include "session.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "identity.h"
#include "path.h"
#include "remote.h"
#include "strfmt.h"

/* The container every Cellucid session file is (the viewer's session/bundle/format.js): this
 * magic, the manifest's length (u32, little-endian) and the manifest (a JSON object whose
 * "chunks" list each chunk's storedBytes), then each chunk framed by its length, to the end. */
static const char MAGIC[] = "CELLUCID_SESSION\n";
#define MAGIC_LEN (sizeof MAGIC - 1)
#define MAX_MANIFEST_BYTES (16u << 20)

bool cfs_session_file_name(const char *name)
{
    size_t n = strlen(name), k = strlen(CFS_SESSION_SUFFIX);
    return n >= k && strcmp(name + n - k, CFS_SESSION_SUFFIX) == 0;
}

char *cfs_session_served_name(const char *id)
{
    return cfs_strdupf("%s%s", id, CFS_SESSION_SUFFIX);
}

/* Where the view of (source, part) would be: NULL when it can have none (a URL outside a
 * folder; a part whose name is no file name), and *oom when out of memory. */
static char *view_path(const char *folder, const char *source, const char *part, bool *oom)
{
    bool url = cfs_is_url(source);
    char *stem = cfs_source_part_stem(source, part);
    char *dir = url ? (folder ? strdup(folder) : NULL) : cfs_source_naming_folder(source);
    char *path = NULL;
    if (!stem || (!dir && (!url || folder)))
        *oom = true;
    else if (dir && stem[0] && stem[0] != '.' && !strchr(stem, '/') &&
             !(path = cfs_strdupf("%s/%s%s", dir, stem, CFS_SESSION_SUFFIX)))
        *oom = true;
    free(stem);
    free(dir);
    return path;
}

/* Whether something is at path: its version (the target's, for a symlink that has one). */
static bool found_at(const char *path, struct stat *version)
{
    if (lstat(path, version) < 0)
        return false;
    if (S_ISLNK(version->st_mode)) {
        struct stat target;
        if (stat(path, &target) == 0)
            *version = target;
    }
    return true;
}

int cfs_session_look(const char *folder, const char *source, const char *part, cfs_session *out,
                     cfs_err *err)
{
    memset(out, 0, sizeof *out);
    bool oom = false;
    char *own = view_path(folder, source, part, &oom);
    if (own && found_at(own, &out->version)) {
        out->file = own;
        return 0;
    }
    free(own);
    /* Beside an input of several datasets, a view named after the input names none of them. */
    char *whole = part && !oom ? view_path(folder, source, NULL, &oom) : NULL;
    if (whole && found_at(whole, &out->version)) {
        out->file = whole;
        out->whole_input = true;
        return 0;
    }
    free(whole);
    memset(&out->version, 0, sizeof out->version);
    return oom ? cfs_err_oom(err) : 0;
}

bool cfs_session_moved(const cfs_session *held, const cfs_session *now)
{
    if (!held->file || !now->file)
        return held->file != now->file;
    return strcmp(held->file, now->file) != 0 || !cfs_same_version(&held->version, &now->version);
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The chunk frames after the manifest, each its storedBytes long, reaching exactly the end. */
static const char *frames_problem(const json_t *chunks, const unsigned char *b, size_t n,
                                  size_t pos, char *why, size_t len)
{
    size_t i;
    json_t *c;
    json_array_foreach(chunks, i, c) {
        json_t *stored = json_object_get(c, "storedBytes");
        if (!json_is_integer(stored) || json_integer_value(stored) < 0) {
            snprintf(why, len, "chunk %zu of its manifest has no storedBytes", i);
            return why;
        }
        if (n - pos < 4) {
            snprintf(why, len, "it ends before chunk %zu (cut short?)", i);
            return why;
        }
        uint32_t framed = le32(b + pos);
        if ((json_int_t)framed != json_integer_value(stored)) {
            snprintf(why, len, "chunk %zu is framed as %u bytes, its manifest says %lld", i,
                     framed, (long long)json_integer_value(stored));
            return why;
        }
        if (framed > n - pos - 4) {
            snprintf(why, len, "it ends inside chunk %zu (cut short?)", i);
            return why;
        }
        pos += 4 + (size_t)framed;
    }
    if (pos != n) {
        snprintf(why, len, "%zu bytes follow its last chunk", n - pos);
        return why;
    }
    return NULL;
}

const char *cfs_session_format_problem(const unsigned char *b, size_t n, char *why, size_t len)
{
    if (n < MAGIC_LEN || memcmp(b, MAGIC, MAGIC_LEN) != 0) {
        snprintf(why, len, "it does not begin with CELLUCID_SESSION");
        return why;
    }
    if (n < MAGIC_LEN + 4) {
        snprintf(why, len, "it ends inside its header (cut short?)");
        return why;
    }
    uint32_t m = le32(b + MAGIC_LEN);
    if (m == 0 || m > MAX_MANIFEST_BYTES) {
        snprintf(why, len, "its manifest length, %u bytes, is not 1 byte to 16 MiB", m);
        return why;
    }
    if (m > n - MAGIC_LEN - 4) {
        snprintf(why, len, "it ends inside its manifest (cut short?)");
        return why;
    }
    json_error_t jerr;
    json_t *manifest = json_loadb((const char *)b + MAGIC_LEN + 4, m, 0, &jerr);
    json_t *chunks = json_object_get(manifest, "chunks");
    const char *problem = NULL;
    if (!json_is_object(manifest)) {
        snprintf(why, len, "its manifest is not a JSON object");
        problem = why;
    } else if (!json_is_array(chunks)) {
        snprintf(why, len, "its manifest has no chunks list");
        problem = why;
    } else {
        problem = frames_problem(chunks, b, n, MAGIC_LEN + 4 + m, why, len);
    }
    json_decref(manifest);
    return problem;
}

static int refuse(cfs_session *s, const char *why, cfs_err *err)
{
    if (!(s->refused = strdup(why)))
        return cfs_err_oom(err);
    return 0;
}

static int refuse_errno(cfs_session *s, int errnum, cfs_err *err)
{
    char why[256];
    snprintf(why, sizeof why, "cannot be read: %s", strerror(errnum));
    return refuse(s, why, err);
}

/* What fd holds, up to one byte more than the `expected` bytes fstat said it has (*got of
 * them: more or fewer when it is being written); NULL with errno when it cannot be read. */
static unsigned char *read_whole(int fd, size_t expected, size_t *got)
{
    unsigned char *buf = malloc(expected + 1);
    *got = 0;
    while (buf && *got <= expected) {
        ssize_t r = read(fd, buf + *got, expected + 1 - *got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            errno = e;
            return NULL;
        }
        if (r == 0)
            break;
        *got += (size_t)r;
    }
    return buf;
}

/* Reads the regular file fd is once (version: its fstat), checks it and digests what was read. */
static int take_bytes(cfs_session *s, int fd, const struct stat *version, cfs_err *err)
{
    size_t size = (size_t)version->st_size, got = 0;
    unsigned char *bytes = read_whole(fd, size, &got);
    if (!bytes)
        return errno == ENOMEM ? cfs_err_oom(err) : refuse_errno(s, errno, err);
    struct stat after;
    if (got != size || fstat(fd, &after) < 0 || !cfs_same_version(version, &after) ||
        !cfs_same_version(version, &s->version)) {
        free(bytes);
        return cfs_err_setc(err, CFS_ERETRY, "%s: changed while it was read", s->file);
    }
    char problem[256], why[512];
    if (cfs_session_format_problem(bytes, size, problem, sizeof problem)) {
        free(bytes);
        snprintf(why, sizeof why, "not a Cellucid session file: %s; publish the view again "
                 "from Cellucid", problem);
        return refuse(s, why, err);
    }
    s->bytes = bytes;
    s->len = size;
    cfs_sha256_hex(bytes, size, s->sha256);
    return 0;
}

/* Without leaving the folder given (a single input's own folder): as the folder scan does. */
static bool symlink_out(const char *file, const char *folder)
{
    struct stat st;
    if (lstat(file, &st) < 0 || !S_ISLNK(st.st_mode))
        return false;
    char *own = folder ? NULL : strdup(file);
    if (own)
        *strrchr(own, '/') = '\0';
    bool out = !cfs_path_inside(file, folder ? folder : own ? own : "/");
    free(own);
    return out;
}

int cfs_session_take(cfs_session *s, const char *folder, const char *not_listed, cfs_err *err)
{
    if (!s->file)
        return 0;
    if (not_listed)
        return refuse(s, not_listed, err);
    if (s->whole_input)
        return refuse(s, "named after an input of several datasets: name each one's view after "
                      "its dataset, <input>-<object>" CFS_SESSION_SUFFIX, err);
    if (symlink_out(s->file, folder))
        return refuse(s, "a symlink leading out of the source folder: put the file itself there",
                      err);
    int fd = open(s->file, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return refuse_errno(s, errno, err);
    struct stat st;
    int rc;
    if (fstat(fd, &st) < 0)
        rc = refuse_errno(s, errno, err);
    else if (!S_ISREG(st.st_mode))
        rc = refuse(s, "not a file", err);
    else if (st.st_size == 0)
        rc = refuse(s, "empty: publish the view again from Cellucid", err);
    else if ((uint64_t)st.st_size > CFS_SESSION_MAX_BYTES)
        rc = refuse(s, "larger than 64 MiB, which no published view is: publish the view "
                    "again from Cellucid", err);
    else
        rc = take_bytes(s, fd, &st, err);
    close(fd);
    return rc;
}

const char *cfs_session_unlisted(const cfs_prepared *p)
{
    if (!p->ds)
        return "its source is refused";
    if (!p->embedding)
        return "its dataset is not in datasets.json (no drawable embedding)";
    return NULL;
}

void cfs_session_report(const cfs_session *s, const char *shown, FILE *log)
{
    if (s->file && s->refused)
        cfs_log(log, "%s: not listed: %s", shown ? shown : s->file, s->refused);
}

void cfs_session_clear(cfs_session *s)
{
    free(s->file);
    free(s->bytes);
    free(s->refused);
    memset(s, 0, sizeof *s);
}
