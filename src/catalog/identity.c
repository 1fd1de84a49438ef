#include "identity.h"
#include "format.h"
#include "cellucid_text.h"
#include "remote.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static bool id_char(unsigned char c)
{
    return isascii(c) && (isalnum(c) || c == '.' || c == '_' || c == '-');
}

bool cfs_id_valid(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > CFS_ID_MAX || !isalnum((unsigned char)id[0]) || !isascii(id[0]) ||
        id[n - 1] == '.')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!id_char((unsigned char)id[i]))
            return false;
    return true;
}

/* Where in the local path the name of its datasets is: its last component, or the folder
 * holding it when that is a folder whose name says nothing of its data (Cell Ranger's run1/outs/
 * after its run; multi's per_sample_outs/<sample>/count/ after its sample; the formats say
 * which names those are): [*start, *start + *len), *own false then. */
static void naming_entry(const char *path, size_t *start, size_t *len, bool *own)
{
    size_t end = strlen(path);
    while (end > 1 && path[end - 1] == '/')
        end--;
    size_t base = end;
    while (base > 0 && path[base - 1] != '/')
        base--;
    *own = true;
    *start = base;
    *len = end - base;
    if (base > 1 && cfs_format_unnamed_folder(path + base, end - base)) {
        size_t parent_end = base - 1, parent = parent_end;
        while (parent > 0 && path[parent - 1] != '/')
            parent--;
        if (parent_end > parent) {
            *own = false;
            *start = parent;
            *len = parent_end - parent;
        }
    }
}

char *cfs_source_stem(const char *path)
{
    if (cfs_is_url(path)) {
        char *name = cfs_url_name(path);
        if (name)
            name[cfs_format_stem_len(name)] = '\0';
        return name;
    }
    size_t start, len;
    bool own;
    naming_entry(path, &start, &len, &own);
    char *name = strndup(path + start, len);
    if (name && own)
        name[cfs_format_stem_len(name)] = '\0';
    return name;
}

char *cfs_source_naming_folder(const char *path)
{
    size_t start, len;
    bool own;
    naming_entry(path, &start, &len, &own);
    return start == 0 ? strdup(".") : strndup(path, start > 1 ? start - 1 : 1);
}

char *cfs_source_part_stem(const char *path, const char *part)
{
    char *stem = cfs_source_stem(path);
    if (!stem || !part)
        return stem;
    size_t n = strlen(stem), k = strlen(part);
    char *s = realloc(stem, n + k + 2);
    if (!s) {
        free(stem);
        return NULL;
    }
    s[n] = '-';
    memcpy(s + n + 1, part, k + 1);
    return s;
}

char *cfs_id_from_name(const char *name)
{
    size_t n = strlen(name);
    char *id = malloc(n + sizeof "dataset");
    if (!id)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if ((c & 0xc0) == 0x80)
            continue;              /* continuation byte: its code point is already '_' */
        id[k++] = id_char(c) ? (char)c : '_';
    }
    id[k] = '\0';
    size_t lead = 0;
    while (id[lead] && !isalnum((unsigned char)id[lead]))
        lead++;
    memmove(id, id + lead, k - lead + 1);
    k -= lead;
    if (k > CFS_ID_MAX)
        id[k = CFS_ID_MAX] = '\0';
    while (k > 0 && id[k - 1] == '.')
        id[--k] = '\0';
    if (k == 0)
        strcpy(id, "dataset");
    return id;
}

/* The value of a 0-d string element at a/b, or NULL. */
static char *string_scalar(const cfs_elem *parent, const char *name)
{
    const cfs_elem *el = parent ? cfs_elem_child(parent, name) : NULL;
    if (!el || el->kind != CFS_EL_SCALAR || el->values->dtype != CFS_STRING)
        return NULL;
    char *value = NULL;
    uint64_t origin[1] = {0}, one[1] = {1};
    cfs_err err;
    if (cfs_array_read(el->values, origin, one, &value, &err) < 0)
        return NULL;
    return value;
}

static cfs_elem *mapping_child(const cfs_elem *parent, const char *name)
{
    cfs_elem *el = parent ? cfs_elem_child(parent, name) : NULL;
    return el && el->kind == CFS_EL_DICT ? el : NULL;
}

char *cfs_identity_source_id(const cfs_dataset *ds)
{
    const cfs_elem *meta = mapping_child(mapping_child(ds->root, "uns"), "cellucid");
    char *id = string_scalar(meta, "id");
    if (id && !cfs_id_valid(id)) {
        free(id);
        id = NULL;
    }
    return id;
}

char *cfs_identity_own_name(const cfs_dataset *ds, const char *stem)
{
    const cfs_elem *uns = mapping_child(ds->root, "uns");
    char *candidates[2] = {string_scalar(mapping_child(uns, "cellucid"), "name"),
                           string_scalar(uns, "title")};
    char *name = NULL;
    for (int i = 0; i < 2; i++) {
        if (!name && candidates[i] && cfs_cellucid_text_ok(candidates[i], false))
            name = candidates[i];
        else
            free(candidates[i]);
    }
    /* A file's name may hold any bytes but '/' and NUL: the name keeps what is text of it. */
    return name ? name : cfs_cellucid_text_from(stem);
}

char *cfs_identity_name(const cfs_dataset *ds, const char *stem, const char *id)
{
    char *name = cfs_identity_own_name(ds, stem);
    return name ? name : strdup(id);
}

static cfs_elem *scalar_elem(const char *key, cfs_dtype dtype, void *value)
{
    cfs_elem *el = cfs_elem_new(CFS_EL_SCALAR, key);
    if (el && !(el->values = cfs_array_from_memory(dtype, 0, NULL, value))) {
        cfs_elem_free(el);
        el = NULL;
    }
    return el;
}

static int put_scalar(cfs_elem *meta, const char *key, cfs_dtype dtype, void *value)
{
    cfs_elem_remove(meta, key);
    cfs_elem *el = scalar_elem(key, dtype, value);
    if (!el) {
        if (dtype == CFS_STRING)
            free(*(char **)value);
        free(value);
        return -1;
    }
    if (cfs_elem_add(meta, el) < 0) {
        cfs_elem_free(el);
        return -1;
    }
    return 0;
}

static int put_string(cfs_elem *meta, const char *key, const char *text)
{
    char **holder = malloc(sizeof *holder);
    if (!holder)
        return -1;
    if (!(*holder = strdup(text))) {
        free(holder);
        return -1;
    }
    return put_scalar(meta, key, CFS_STRING, holder);
}

int cfs_identity_apply(cfs_dataset *ds, const char *id, const char *name, cfs_err *err)
{
    cfs_elem *uns = cfs_elem_ensure_dict(ds->root, "uns");
    cfs_elem *meta = uns ? cfs_elem_ensure_dict(uns, "cellucid") : NULL;
    int64_t *schema = malloc(sizeof *schema);
    if (!meta || !schema) {
        free(schema);
        return cfs_err_oom(err);
    }
    *schema = 1;
    if (put_scalar(meta, "schema", CFS_INT64, schema) < 0 || put_string(meta, "id", id) < 0 ||
        put_string(meta, "name", name) < 0)
        return cfs_err_oom(err);
    return 0;
}

char *cfs_identity_wanted_id(const cfs_dataset *ds, const char *source, const char *part)
{
    char *id = cfs_identity_source_id(ds);
    if (id)
        return id;
    char *stem = cfs_source_part_stem(source, part);
    id = stem ? cfs_id_from_name(stem) : NULL;
    free(stem);
    return id;
}
