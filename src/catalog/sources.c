#include "sources.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format.h"

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

/* An entry that may be followed: not hidden, and not a symlink out of src. */
static int followable(const char *src, const char *name, const char *path, struct stat *st)
{
    if (name[0] == '.' || lstat(path, st) < 0)
        return 0;
    if (S_ISLNK(st->st_mode) && (!cfs_path_inside(path, src) || stat(path, st) < 0))
        return 0;
    return 1;
}

static char *join(const char *dir, const char *name)
{
    size_t len = strlen(dir) + strlen(name) + 2;
    char *path = malloc(len);
    if (path)
        snprintf(path, len, "%s/%s", dir, name);
    return path;
}

/* A Cell Ranger multi run holds one run per sample, per_sample_outs/<sample>/count, below the
 * run folder or its outs/: each one a format recognises is an input. */
static int push_multi_samples(const char *src, const char *dir, cfs_source_list *out)
{
    static const char *const holders[] = {"per_sample_outs", "outs/per_sample_outs", NULL};
    int rc = 0;
    for (size_t h = 0; rc == 0 && holders[h]; h++) {
        char *samples = join(dir, holders[h]);
        DIR *d = samples && cfs_path_inside(samples, src) ? opendir(samples) : NULL;
        struct dirent *e;
        while (rc == 0 && d && (e = readdir(d))) {
            struct stat st;
            char *sample = join(samples, e->d_name);
            char *count = sample ? join(sample, "count") : NULL;
            cfs_err ignored;
            if (!count)
                rc = -1;
            else if (followable(src, e->d_name, sample, &st) && S_ISDIR(st.st_mode) &&
                     followable(src, "count", count, &st) && S_ISDIR(st.st_mode) &&
                     cfs_format_detect(count, &ignored) != NULL)
                rc = push(out, count);
            free(count);
            free(sample);
        }
        if (d)
            closedir(d);
        if (!samples)
            rc = -1;
        free(samples);
    }
    return rc;
}

static int is_input(const char *dir, const char *name, const char *path)
{
    struct stat st;
    if (!followable(dir, name, path, &st))
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
    int rc = push_multi_samples(src, src, out) < 0 ? cfs_err_set(err, "out of memory") : 0;
    while (rc == 0 && (e = readdir(d))) {
        char *path = join(src, e->d_name);
        struct stat st;
        if (!path)
            rc = cfs_err_set(err, "out of memory");
        else if (is_input(src, e->d_name, path))
            rc = push(out, path) < 0 ? cfs_err_set(err, "out of memory") : 0;
        else if (followable(src, e->d_name, path, &st) && S_ISDIR(st.st_mode) &&
                 push_multi_samples(src, path, out) < 0)
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
    /* A multi run's samples are reachable from the run folder and from its outs/. */
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
