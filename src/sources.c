#include "sources.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../formats/format.h"

static int compare_paths(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int cfs_path_inside(const char *path, const char *src)
{
    char rp[PATH_MAX], rs[PATH_MAX];
    if (!realpath(path, rp) || !realpath(src, rs))
        return 0;
    size_t n = strlen(rs);
    if (n == 1)
        return 1;
    return strncmp(rp, rs, n) == 0 && (rp[n] == '\0' || rp[n] == '/');
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

static int is_input(const char *dir, const char *name, const char *path)
{
    struct stat st;
    if (name[0] == '.' || lstat(path, &st) < 0)
        return 0;
    if (S_ISLNK(st.st_mode) && (!cfs_path_inside(path, dir) || stat(path, &st) < 0))
        return 0;
    cfs_err ignored;
    /* A folder is an input only when a format recognises it (a Cell Ranger outs/ folder). */
    if (S_ISDIR(st.st_mode))
        return cfs_format_detect(path, &ignored) != NULL;
    if (!S_ISREG(st.st_mode))
        return 0;
    if (cfs_format_candidate_name(name))
        return 1;
    return cfs_format_detect(path, &ignored) != NULL;
}

int cfs_sources_list(const char *src, cfs_source_list *out, cfs_err *err)
{
    out->paths = NULL;
    out->n = 0;
    struct stat st;
    if (stat(src, &st) < 0)
        return cfs_err_set(err, "%s: cannot be read: %s", src, strerror(errno));
    cfs_err ignored;
    /* A file, or a folder that is itself one input (an outs/ folder), is the only source. */
    if (!S_ISDIR(st.st_mode) || cfs_format_detect(src, &ignored) != NULL)
        return push(out, src) < 0 ? cfs_err_set(err, "out of memory") : 0;
    DIR *d = opendir(src);
    if (!d)
        return cfs_err_set(err, "%s: cannot list the folder: %s", src, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        size_t len = strlen(src) + strlen(e->d_name) + 2;
        char *path = malloc(len);
        if (!path) {
            rc = cfs_err_set(err, "out of memory");
            break;
        }
        snprintf(path, len, "%s/%s", src, e->d_name);
        if (is_input(src, e->d_name, path) && push(out, path) < 0)
            rc = cfs_err_set(err, "out of memory");
        free(path);
    }
    closedir(d);
    if (rc < 0) {
        cfs_sources_free(out);
        return rc;
    }
    if (out->n > 1)
        qsort(out->paths, out->n, sizeof *out->paths, compare_paths);
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
