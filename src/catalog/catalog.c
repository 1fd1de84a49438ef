#include "catalog.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "identity.h"
#include "session.h"
#include "strfmt.h"
#include "strset.h"

/* Sets, not scans: a folder of ten thousand sources has fifty million pairs of ids. */
typedef struct id_sets {
    cfs_strset *earlier;        /* the ids given so far */
    cfs_strset *wanted;         /* the ids later sources want, with how many want each */
    char **replaced;            /* wanted ids given up, freed with the sets that borrow them */
} id_sets;

static bool in_use(const id_sets *s, const char *id)
{
    const uint64_t *later = cfs_strset_get(s->wanted, id);
    return cfs_strset_get(s->earlier, id) || (later && *later > 0);
}

/* ids[i] as a distinct id: itself, or the first free "-2", "-3", ... of it. */
static int distinct_one(id_sets *s, char **ids, size_t i, bool *clashed)
{
    uint64_t *wants = cfs_strset_get(s->wanted, ids[i]);
    if (wants)
        (*wants)--;     /* its own wish is not a later one */
    clashed[i] = false;
    if (cfs_strset_get(s->earlier, ids[i])) {
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
            if (!in_use(s, fresh))
                break;
        }
        s->replaced[i] = base;
        ids[i] = fresh;
        clashed[i] = true;
    }
    return cfs_strset_add(s->earlier, ids[i], i) < 0 ? -1 : 0;
}

int cfs_catalog_distinct_ids(char **ids, size_t n, bool *clashed)
{
    id_sets s = {cfs_strset_new(n), cfs_strset_new(n), calloc(n ? n : 1, sizeof(char *))};
    int rc = s.earlier && s.wanted && s.replaced ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        int added = cfs_strset_add(s.wanted, ids[i], 1);
        if (added == 0)
            (*cfs_strset_get(s.wanted, ids[i]))++;
        rc = added < 0 ? -1 : 0;
    }
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = distinct_one(&s, ids, i, clashed);
    cfs_strset_free(s.earlier);
    cfs_strset_free(s.wanted);
    for (size_t i = 0; s.replaced && i < n; i++)
        free(s.replaced[i]);
    free(s.replaced);
    return rc;
}

static int compare_entries(const void *a, const void *b)
{
    return strcmp(((const cfs_catalog_entry *)a)->id, ((const cfs_catalog_entry *)b)->id);
}

const char *cfs_catalog_default(const cfs_catalog_entry *e, size_t n, const char *wanted)
{
    const char *first = NULL;
    for (size_t i = 0; i < n; i++) {
        if (wanted && strcmp(e[i].id, wanted) == 0)
            return wanted;
        if (!first || strcmp(e[i].id, first) < 0)
            first = e[i].id;
    }
    return first;
}

char *cfs_catalog_default_note(const cfs_catalog_entry *e, size_t n, const char *wanted)
{
    if (!wanted || !wanted[0])
        return NULL;
    const char *chosen = cfs_catalog_default(e, n, wanted);
    if (chosen == wanted)
        return NULL;
    return chosen ? cfs_strdupf("default=%s is not in datasets.json: it opens on %s, the first "
                                "id", wanted, chosen)
                  : cfs_strdupf("default=%s is not in datasets.json, which lists no dataset",
                                wanted);
}

/* An entry's JSON: ids use only URL-unreserved characters, so the paths made of them are their
 * own canonical URL encoding. */
static json_t *entry_json(const cfs_catalog_entry *e)
{
    char *path = cfs_strdupf("%s.zarr/", e->id);
    json_t *j = path ? json_pack("{s:s, s:s}", "id", e->id, "path", path) : NULL;
    free(path);
    if (j && e->session_sha256) {
        char *name = cfs_session_served_name(e->id);
        json_t *view = name ? json_pack("{s:s, s:I, s:s}", "path", name, "bytes",
                                        (json_int_t)e->session_len, "sha256", e->session_sha256)
                            : NULL;
        free(name);
        if (!view || json_object_set_new(j, "session", view) < 0) {
            json_decref(j);
            j = NULL;
        }
    }
    return j;
}

char *cfs_catalog_json(const cfs_catalog_entry *e, size_t n, const char *wanted_default)
{
    cfs_catalog_entry *sorted = malloc((n ? n : 1) * sizeof *sorted);
    if (!sorted)
        return NULL;
    if (n)
        memcpy(sorted, e, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, compare_entries);
    json_t *list = json_array();
    bool ok = list != NULL;
    for (size_t i = 0; ok && i < n; i++)
        ok = json_array_append_new(list, entry_json(&sorted[i])) == 0;
    json_t *doc = ok ? json_pack("{s:i, s:s?, s:O}", "schema", 2, "default",
                                 cfs_catalog_default(sorted, n, wanted_default), "datasets", list)
                     : NULL;
    json_decref(list);
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
