#include "sources.h"
#include "path.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <sys/stat.h>

#include "detect.h"
#include "format.h"
#include "remote.h"
#include "session.h"

static int compare_paths(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int push(cfs_source_list *out, const char *path)
{
    char **grown = realloc(out->paths, (out->n + 1) * sizeof *grown);
    if (!grown)
        return -1;
    out->paths = grown;
    if (!(out->paths[out->n] = strdup(path)))
        return -1;
    out->n++;
    return 0;
}

/* An entry that may be followed: not hidden, and not a symlink out of src. */
static int followable(const char *src, const char *name, const char *path, struct stat *st)
{
    if (name[0] == '.' || lstat(path, st) < 0)
        return 0;
    if (S_ISLNK(st->st_mode) && (!cfs_path_inside(path, src) || stat(path, st) < 0))
        return 0;
    return 1;
}

/* The inputs below dir that match pattern (a path whose '*' components stand for any one name):
 * where a format keeps inputs nested in a folder (docs/design.md §10). -1 only on allocation
 * failure. */
static int walk_nested(const char *src, cfs_detector *d, const char *dir, const char *pattern,
                       cfs_source_list *out)
{
    if (!*pattern)
        return cfs_detector_is_input(d, dir) ? push(out, dir) : 0;
    const char *slash = strchr(pattern, '/');
    size_t n = slash ? (size_t)(slash - pattern) : strlen(pattern);
    const char *rest = slash ? slash + 1 : "";
    struct stat st;
    int rc = 0;
    if (n != 1 || pattern[0] != '*') {
        char *name = strndup(pattern, n);
        char *path = name ? cfs_path_join(dir, name) : NULL;
        if (!path)
            rc = -1;
        else if (followable(src, name, path, &st) && S_ISDIR(st.st_mode))
            rc = walk_nested(src, d, path, rest, out);
        free(path);
        free(name);
        return rc;
    }
    DIR *listed = cfs_path_inside(dir, src) ? opendir(dir) : NULL;
    struct dirent *e;
    while (rc == 0 && listed && (e = readdir(listed))) {
        char *path = cfs_path_join(dir, e->d_name);
        if (!path)
            rc = -1;
        else if (followable(src, e->d_name, path, &st) && S_ISDIR(st.st_mode))
            rc = walk_nested(src, d, path, rest, out);
        free(path);
    }
    if (listed)
        closedir(listed);
    return rc;
}

static int push_nested(const char *src, cfs_detector *d, const char *dir, cfs_source_list *out)
{
    int rc = 0;
    for (const cfs_format *const *f = cfs_formats(); rc == 0 && *f; f++)
        for (const char *const *p = (*f)->nested; rc == 0 && p && *p; p++)
            rc = walk_nested(src, d, dir, *p, out);
    return rc;
}

/* x.h5ad.gz beside x.h5ad: the same data, read from the file that needs no decompressing. */
static bool has_uncompressed_twin(const char *path)
{
    static const char *const suffixes[] = {".gz", ".bz2", ".xz", NULL};
    size_t n = strlen(path);
    for (size_t i = 0; suffixes[i]; i++) {
        size_t k = strlen(suffixes[i]);
        if (n > k && strcmp(path + n - k, suffixes[i]) == 0) {
            char *twin = strndup(path, n - k);
            struct stat st;
            bool found = twin && stat(twin, &st) == 0 && S_ISREG(st.st_mode);
            free(twin);
            return found;
        }
    }
    return false;
}

/* A file named as an input is one without probing; any other entry is probed by content (a
 * folder is an input only when a format recognises it, a Cell Ranger outs/ folder). A published
 * view (session.h) belongs to the input beside it and is never probed. */
static int is_input(const char *dir, cfs_detector *d, const char *name, const char *path)
{
    struct stat st;
    if (cfs_session_file_name(name) || !followable(dir, name, path, &st))
        return 0;
    if (S_ISREG(st.st_mode) && has_uncompressed_twin(path))
        return 0;
    if (S_ISREG(st.st_mode) && cfs_format_candidate_name(name))
        return 1;
    return (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) && cfs_detector_is_input(d, path);
}

/* The URL a NAME.url file holds (its first line, §11), as the source "URL#NAME": the name is
 * what the dataset is called; the part after '#' is never sent. NULL when it holds none. */
static char *url_source(const char *path, const char *name)
{
    char line[4096];
    FILE *f = fopen(path, "re");
    bool got = f && fgets(line, sizeof line, f);
    if (f)
        fclose(f);
    if (!got)
        return NULL;
    size_t n = strcspn(line, "#\r\n");
    while (n && (line[n - 1] == ' ' || line[n - 1] == '\t'))
        n--;
    line[n] = '\0';
    const char *url = line + strspn(line, " \t");
    size_t stem = strlen(name) - 4;
    char *source = NULL;
    if (cfs_is_url(url) && !strpbrk(url, " \t") &&
        asprintf(&source, "%s#%.*s", url, (int)stem, name) < 0)
        source = NULL;
    return source;
}

/* NAME.url: a remote source (its URL), or the file itself when it holds no URL (refused then,
 * with the reason). 0, 1 when it is one, -1 when out of memory. Only such a name is resolved
 * (cfs_path_inside): resolving every entry cost a folder of ten thousand sources a hundred
 * thousand system calls a scan. */
static int push_url_file(const char *src, const char *name, const char *path,
                         cfs_source_list *out)
{
    size_t n = strlen(name);
    struct stat st;
    if (n <= 4 || strcmp(name + n - 4, ".url") != 0 || name[0] == '.' ||
        !cfs_path_inside(path, src) || stat(path, &st) < 0 || !S_ISREG(st.st_mode))
        return 0;
    char *source = url_source(path, name);
    int rc = push(out, source ? source : path) < 0 ? -1 : 1;
    free(source);
    return rc;
}

static int list_folder(const char *src, cfs_detector *d, cfs_source_list *out, cfs_err *err)
{
    DIR *listed = opendir(src);
    if (!listed)
        return cfs_err_set(err, "%s: cannot list the folder: %s", src, strerror(errno));
    struct dirent *e;
    int rc = push_nested(src, d, src, out) < 0 ? cfs_err_oom(err) : 0;
    while (rc == 0 && (e = readdir(listed))) {
        char *path = cfs_path_join(src, e->d_name);
        struct stat st;
        int url = path ? push_url_file(src, e->d_name, path, out) : 0;
        if (!path || url < 0)
            rc = cfs_err_oom(err);
        else if (url)
            ;
        else if (is_input(src, d, e->d_name, path))
            rc = push(out, path) < 0 ? cfs_err_oom(err) : 0;
        else if (followable(src, e->d_name, path, &st) && S_ISDIR(st.st_mode) &&
                 push_nested(src, d, path, out) < 0)
            rc = cfs_err_oom(err);
        free(path);
    }
    closedir(listed);
    return rc;
}

int cfs_sources_list(const char *src, cfs_detector *d, cfs_source_list *out, cfs_err *err)
{
    out->paths = NULL;
    out->n = 0;
    struct stat st;
    if (cfs_is_url(src))
        return push(out, src) < 0 ? cfs_err_oom(err) : 0;
    if (stat(src, &st) < 0)
        return cfs_err_set(err, "%s: cannot be read: %s", src, strerror(errno));
    /* A file is the only source. */
    if (!S_ISDIR(st.st_mode))
        return push(out, src) < 0 ? cfs_err_oom(err) : 0;
    /* So is a folder that is itself one input (an outs/ folder). */
    cfs_detection self;
    cfs_detector_ask(d, src, &self);
    int rc = self.format[0] ? (push(out, src) < 0 ? cfs_err_oom(err) : 0)
                            : list_folder(src, d, out, err);
    cfs_detector_scan_done(d);
    if (rc < 0) {
        cfs_sources_free(out);
        return rc;
    }
    if (out->n > 1)
        qsort(out->paths, out->n, sizeof *out->paths, compare_paths);
    /* A nested input may be reachable along two patterns (a multi run's samples from the run
     * folder and from its outs/). */
    size_t kept = 0;
    for (size_t i = 0; i < out->n; i++) {
        if (kept > 0 && strcmp(out->paths[kept - 1], out->paths[i]) == 0)
            free(out->paths[i]);
        else
            out->paths[kept++] = out->paths[i];
    }
    out->n = kept;
    return 0;
}

void cfs_sources_free(cfs_source_list *list)
{
    for (size_t i = 0; i < list->n; i++)
        free(list->paths[i]);
    free(list->paths);
    list->paths = NULL;
    list->n = 0;
}
