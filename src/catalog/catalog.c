#include "catalog.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "identity.h"

static bool taken(char *const *ids, size_t n, const char *id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] && strcmp(ids[i], id) == 0)
            return true;
    return false;
}

int cfs_catalog_distinct_ids(char **ids, size_t n, bool *clashed)
{
    for (size_t i = 0; i < n; i++) {
        clashed[i] = false;
        if (!taken(ids, i, ids[i]))
            continue;
        char *base = ids[i];
        char *fresh = malloc(CFS_ID_MAX + 1);
        if (!fresh)
            return -1;
        for (unsigned k = 2;; k++) {
            char suffix[16];
            int slen = snprintf(suffix, sizeof suffix, "-%u", k);
            size_t keep = strlen(base);
            if (keep + (size_t)slen > CFS_ID_MAX)
                keep = CFS_ID_MAX - (size_t)slen;
            memcpy(fresh, base, keep);
            memcpy(fresh + keep, suffix, (size_t)slen + 1);
            /* Also avoid ids later sources want for themselves. */
            if (!taken(ids, i, fresh) && !taken(ids + i + 1, n - i - 1, fresh))
                break;
        }
        free(base);
        ids[i] = fresh;
        clashed[i] = true;
    }
    return 0;
}

static int compare_ids(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

char *cfs_catalog_json(char *const *ids, size_t n)
{
    char **sorted = malloc((n ? n : 1) * sizeof *sorted);
    if (!sorted)
        return NULL;
    memcpy(sorted, ids, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, compare_ids);
    json_t *list = json_array();
    for (size_t i = 0; list && i < n; i++) {
        /* Ids use only URL-unreserved characters, so the path needs no escaping. */
        char *path = malloc(strlen(sorted[i]) + sizeof ".zarr/");
        if (!path)
            break;
        sprintf(path, "%s.zarr/", sorted[i]);
        json_array_append_new(list, json_pack("{s:s, s:s}", "id", sorted[i], "path", path));
        free(path);
    }
    json_t *doc = json_pack("{s:i, s:s?, s:o}", "schema", 2, "default", n ? sorted[0] : NULL,
                            "datasets", list);
    free(sorted);
    char *text = doc ? json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(doc);
    if (!text)
        return NULL;
    size_t len = strlen(text);
    char *with_newline = realloc(text, len + 2);
    if (!with_newline) {
        free(text);
        return NULL;
    }
    with_newline[len] = '\n';
    with_newline[len + 1] = '\0';
    return with_newline;
}
