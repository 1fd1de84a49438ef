#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup */
#endif

#include "path.h"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

char *cfs_path_join(const char *a, const char *b)
{
    size_t la = a ? strlen(a) : 0, lb = strlen(b);
    char *out = malloc(la + lb + 2);
    if (!out)
        return NULL;
    size_t k = la;
    if (la)
        memcpy(out, a, la);
    if (la && lb && a[la - 1] != '/')
        out[k++] = '/';
    memcpy(out + k, b, lb + 1);
    return out;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int cfs_path_list(const char *dir, char ***names, size_t *n)
{
    *names = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    char **v = NULL;
    size_t len = 0, cap = 0;
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (len == cap) {
            size_t c = cap ? cap * 2 : 16;
            char **nv = realloc(v, c * sizeof *nv);
            if (!nv) {
                rc = -1;
                break;
            }
            v = nv;
            cap = c;
        }
        if (!(v[len] = strdup(e->d_name)))
            rc = -1;
        else
            len++;
    }
    closedir(d);
    if (rc < 0) {
        cfs_path_list_free(v, len);
        return -1;
    }
    if (len)
        qsort(v, len, sizeof *v, cmp_name);
    *names = v;
    *n = len;
    return 0;
}

void cfs_path_list_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

int cfs_path_inside(const char *path, const char *root)
{
    char rp[PATH_MAX], rs[PATH_MAX];
    if (!realpath(path, rp) || !realpath(root, rs))
        return 0;
    size_t n = strlen(rs);
    if (n == 1)
        return 1;
    return strncmp(rp, rs, n) == 0 && (rp[n] == '\0' || rp[n] == '/');
}

const char *cfs_path_shown(const char *root, const char *path)
{
    size_t n = strlen(root);
    if (strncmp(path, root, n) == 0 && path[n] == '/' && path[n + 1])
        return path + n + 1;
    const char *slash = strrchr(root, '/');
    return strcmp(path, root) == 0 && slash && slash[1] ? slash + 1 : path;
}
