#include "cellucid_meta.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cellucid_text.h"
#include "identity.h"
#include "priority.h"
#include "utf8.h"

typedef enum verdict { KEEP, WRONG, REFUSE } verdict;

typedef struct checker {
    cfs_dataset *ds;
    cfs_elem *meta;
    char why[512];
    cfs_cellucid_meta *out;
} checker;

static verdict wrong(checker *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static verdict wrong(checker *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, sizeof c->why, fmt, ap);
    va_end(ap);
    return WRONG;
}

/* ------------------------------------------------------------------------------------------ */
/* Values as anndata stores Python values: 0-d datasets, 1-d arrays, groups */

/* Where a 0-d value is read: at the origin, one element. */
static const uint64_t ORIGIN[1] = {0}, ONE[1] = {1};

static bool is_scalar(const cfs_elem *el)
{
    return el->kind == CFS_EL_SCALAR && el->values;
}

static bool is_mapping(const cfs_elem *el)
{
    return el->kind == CFS_EL_DICT;
}

/* Text: a string, or a one-element list of one (read as that string). Malloc'd, or NULL. */
static char *read_text(const cfs_elem *el)
{
    bool one = el->kind == CFS_EL_ARRAY && el->values && el->values->ndim == 1 &&
               el->values->shape[0] == 1;
    if ((!is_scalar(el) && !one) || el->values->dtype != CFS_STRING)
        return NULL;
    char *s = NULL;
    uint64_t start[1] = {0}, count[1] = {1};
    cfs_err ignored;
    return cfs_array_read(el->values, start, count, &s, &ignored) == 0 ? s : NULL;
}

/* A 0-d integer (or bool-free) value as int64 when it fits; false otherwise. */
static bool read_integer(const cfs_elem *el, int64_t *out, bool *huge)
{
    *huge = false;
    if (!is_scalar(el) || !cfs_dtype_is_integer(el->values->dtype) ||
        el->values->dtype == CFS_BOOL)
        return false;
    uint64_t raw = 0;
    cfs_err ignored;
    if (el->values->dtype == CFS_UINT64) {
        if (cfs_array_read(el->values, ORIGIN, ONE, &raw, &ignored) < 0)
            return false;
        *huge = raw > (uint64_t)INT64_MAX;
        *out = (int64_t)raw;
        return true;
    }
    unsigned char buf[8] = {0};
    if (cfs_array_read(el->values, ORIGIN, ONE, buf, &ignored) < 0)
        return false;
    switch (el->values->dtype) {
    case CFS_INT8: *out = *(int8_t *)buf; break;
    case CFS_INT16: *out = *(int16_t *)buf; break;
    case CFS_INT32: *out = *(int32_t *)buf; break;
    case CFS_INT64: *out = *(int64_t *)buf; break;
    case CFS_UINT8: *out = *(uint8_t *)buf; break;
    case CFS_UINT16: *out = *(uint16_t *)buf; break;
    case CFS_UINT32: *out = *(uint32_t *)buf; break;
    default: return false;
    }
    return true;
}

static bool read_bool(const cfs_elem *el, bool *out)
{
    unsigned char b = 0;
    cfs_err ignored;
    if (!is_scalar(el) || el->values->dtype != CFS_BOOL ||
        cfs_array_read(el->values, ORIGIN, ONE, &b, &ignored) < 0)
        return false;
    *out = b != 0;
    return true;
}

/* A 1-d array of non-negative integers, malloc'd into *vals. */
static bool read_counts(const cfs_elem *el, uint64_t **vals, uint64_t *n)
{
    *vals = NULL;
    if (el->kind != CFS_EL_ARRAY || !el->values || el->values->ndim != 1 ||
        !cfs_dtype_is_integer(el->values->dtype) || el->values->dtype == CFS_BOOL)
        return false;
    *n = el->values->shape[0];
    size_t es = cfs_dtype_size(el->values->dtype);
    unsigned char *raw = malloc((*n ? *n : 1) * es);
    *vals = malloc((*n ? *n : 1) * sizeof **vals);
    uint64_t start[1] = {0}, count[1] = {*n};
    cfs_err ignored;
    bool ok = raw && *vals && cfs_array_read(el->values, start, count, raw, &ignored) == 0;
    bool is_signed = cfs_dtype_is_signed(el->values->dtype);
    for (uint64_t i = 0; ok && i < *n; i++) {
        int64_t v = 0;
        uint64_t u = 0;
        const unsigned char *p = raw + i * es;
        switch (es) {
        case 1: v = is_signed ? *(const int8_t *)p : *(const uint8_t *)p; break;
        case 2: v = is_signed ? *(const int16_t *)p : *(const uint16_t *)p; break;
        case 4: v = is_signed ? *(const int32_t *)p : (int64_t)*(const uint32_t *)p; break;
        default: memcpy(&u, p, 8); v = (int64_t)u; break;
        }
        ok = !(is_signed && v < 0);
        (*vals)[i] = es == 8 && !is_signed ? u : (uint64_t)v;
    }
    free(raw);
    if (!ok) {
        free(*vals);
        *vals = NULL;
    }
    return ok;
}

/* An absolute http(s) URL with a host. */
static bool url_ok(const char *s)
{
    const char *rest = strncmp(s, "https://", 8) == 0 ? s + 8
                     : strncmp(s, "http://", 7) == 0  ? s + 7 : NULL;
    if (!rest || !*rest || strchr("/?#:", *rest))
        return false;
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p <= 0x20 || *p == 0x7f)
            return false;
    return true;
}

static cfs_elem *child_of(const cfs_elem *parent, const char *name)
{
    return parent ? cfs_elem_child(parent, name) : NULL;
}

static bool has_element(const cfs_dataset *ds, const char *group, const char *name)
{
    return child_of(child_of(ds->root, group), name) != NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* The keys */

static verdict check_schema(checker *c, cfs_elem *el)
{
    int64_t v;
    bool huge;
    if (!read_integer(el, &v, &huge))
        return wrong(c, "'schema' is not an integer");
    if (huge || v > 1) {
        snprintf(c->why, sizeof c->why, "uns['cellucid']['schema'] is %lld, written for a later "
                 "Cellucid than this version knows (schema 1); upgrade cellucid-fs, or write the "
                 "file again with the Cellucid package of schema 1", (long long)v);
        return REFUSE;
    }
    return v == 1 ? KEEP : wrong(c, "'schema' is %lld, not 1", (long long)v);
}

static verdict check_id(checker *c, cfs_elem *el)
{
    char *id = read_text(el);
    verdict v = id && cfs_id_valid(id) ? KEEP
              : wrong(c, "'id' is not 1-180 ASCII letters, digits, '.', '_' or '-' starting "
                         "with a letter or digit and not ending with '.'");
    free(id);
    return v;
}

static verdict check_text_key(checker *c, cfs_elem *el, bool may_be_empty)
{
    char *s = read_text(el);
    verdict v = s && cfs_cellucid_text_ok(s, may_be_empty) ? KEEP
              : wrong(c, "'%s' is not text without white space at its ends or characters with "
                         "no glyph", el->name);
    free(s);
    return v;
}

static verdict check_name(checker *c, cfs_elem *el)
{
    return check_text_key(c, el, false);
}

static verdict check_description(checker *c, cfs_elem *el)
{
    return check_text_key(c, el, true);
}

/* {<text_key>: text, url: an http(s) URL (optional)}, nothing else. */
static verdict check_reference(checker *c, cfs_elem *el, const char *text_key)
{
    if (!is_mapping(el))
        return wrong(c, "'%s' is not a mapping {%s, url}", el->name, text_key);
    bool have_text = false;
    for (size_t i = 0; i < el->nchildren; i++) {
        cfs_elem *f = el->children[i];
        char *s = read_text(f);
        bool is_text = strcmp(f->name, text_key) == 0, is_url = strcmp(f->name, "url") == 0;
        bool ok = s && ((is_text && cfs_cellucid_text_ok(s, false)) || (is_url && url_ok(s)));
        free(s);
        if (!ok)
            return wrong(c, "'%s/%s' is %s", el->name, f->name,
                         is_url ? "not an absolute http(s) URL"
                         : is_text ? "not text" : "not a key of it (it has text and url)");
        have_text |= is_text;
    }
    return have_text ? KEEP : wrong(c, "'%s' has no '%s'", el->name, text_key);
}

static verdict check_citation(checker *c, cfs_elem *el)
{
    return check_reference(c, el, "text");
}

static verdict check_source(checker *c, cfs_elem *el)
{
    return check_reference(c, el, "name");
}

static verdict check_mapping(checker *c, cfs_elem *el)
{
    return is_mapping(el) ? KEEP : wrong(c, "'%s' is not a mapping", el->name);
}

static verdict check_history(checker *c, cfs_elem *el)
{
    char *s = read_text(el);
    free(s);
    return s ? KEEP : wrong(c, "'history_applied' is not text");
}

/* {seed, specVersion, nObs, levels} describing the source's cells: then they are in priority
 * order already. One that does not is left out (the store gets its own), never refused. */
static verdict check_priority(checker *c, cfs_elem *el)
{
    if (!is_mapping(el))
        return wrong(c, "'priority' is not a mapping {seed, specVersion, nObs, levels}");
    static const char *const keys[] = {"seed", "specVersion", "nObs", "levels"};
    int64_t seed = -1, spec = -1, n_obs = -1;
    bool huge_seed = false, huge;
    uint64_t *levels = NULL, nlevels = 0;
    for (size_t i = 0; i < el->nchildren; i++) {
        cfs_elem *f = el->children[i];
        bool ok = strcmp(f->name, keys[0]) == 0   ? read_integer(f, &seed, &huge_seed)
                : strcmp(f->name, keys[1]) == 0   ? read_integer(f, &spec, &huge) && !huge
                : strcmp(f->name, keys[2]) == 0   ? read_integer(f, &n_obs, &huge) && !huge
                : strcmp(f->name, keys[3]) == 0   ? (free(levels), read_counts(f, &levels, &nlevels))
                                                  : false;
        if (!ok) {
            bool known = false;
            for (size_t k = 0; k < 4; k++)
                known |= strcmp(f->name, keys[k]) == 0;
            free(levels);
            return wrong(c, "'priority/%s' is not %s", f->name,
                         !known ? "a key of it (seed, specVersion, nObs, levels)"
                         : strcmp(f->name, "levels") == 0 ? "a list of cell counts"
                                                          : "an integer");
        }
    }
    uint64_t want[32];
    size_t nwant = cfs_priority_levels(c->ds->n_obs, want, 32);
    bool levels_right = levels && nlevels == nwant &&
                        memcmp(levels, want, nwant * sizeof *want) == 0;
    free(levels);
    if ((seed < 0 && !huge_seed) || spec < 0 || n_obs < 0 || !levels)
        return wrong(c, "'priority' lacks seed, specVersion, nObs or levels");
    if (spec != 1)
        return wrong(c, "'priority/specVersion' is %lld; this version knows priority order 1",
                     (long long)spec);
    if ((uint64_t)n_obs != c->ds->n_obs)
        return wrong(c, "'priority' does not describe the file's cells (nObs %lld, the file has "
                     "%llu)", (long long)n_obs, (unsigned long long)c->ds->n_obs);
    if (!levels_right)
        return wrong(c, "'priority/levels' are not priority order 1's levels for %llu cells",
                     (unsigned long long)c->ds->n_obs);
    c->out->source_ordered = true;
    return KEEP;
}

/* ------------------------------------------------------------------------------------------ */
/* defaults: each entry is kept or left out on its own */

static bool embedding_ok(checker *c, cfs_elem *el, int dims)
{
    char *key = read_text(el);
    const cfs_elem *columns = NULL;
    if (!key && is_mapping(el)) {
        cfs_elem *k = child_of(el, "key");
        key = k ? read_text(k) : NULL;
        columns = child_of(el, "columns");
        if (el->nchildren != (columns ? 2u : 1u))
            columns = NULL, free(key), key = NULL;
    }
    const cfs_elem *arr = key ? child_of(child_of(c->ds->root, "obsm"), key) : NULL;
    free(key);
    if (!arr || arr->kind != CFS_EL_ARRAY || !arr->values || arr->values->ndim != 2)
        return false;
    uint64_t width = arr->values->shape[1], *cols = NULL, n = 0;
    if (!columns)
        return width >= (uint64_t)dims;
    bool ok = read_counts(columns, &cols, &n) && n == (uint64_t)dims;
    for (uint64_t i = 0; ok && i < n; i++)
        ok = cols[i] < width;
    free(cols);
    return ok;
}

static bool text_names(checker *c, cfs_elem *el, const char *group)
{
    char *s = read_text(el);
    bool ok = s && has_element(c->ds, group, s);
    free(s);
    return ok;
}

static bool expression_ok(checker *c, cfs_elem *el)
{
    char *s = read_text(el);
    bool ok = s && (strcmp(s, "X") == 0 ? child_of(c->ds->root, "X") != NULL
                    : strcmp(s, "raw/X") == 0 ? child_of(child_of(c->ds->root, "raw"), "X") != NULL
                    : strncmp(s, "layers/", 7) == 0 ? has_element(c->ds, "layers", s + 7)
                                                    : false);
    free(s);
    return ok;
}

static bool obs_keys_ok(checker *c, cfs_elem *el)
{
    if (el->kind != CFS_EL_ARRAY || !el->values || el->values->ndim != 1 ||
        el->values->dtype != CFS_STRING)
        return false;
    uint64_t n = el->values->shape[0], start[1] = {0}, count[1] = {n};
    char **keys = calloc(n ? n : 1, sizeof *keys);
    cfs_err ignored;
    bool read = keys && cfs_array_read(el->values, start, count, keys, &ignored) == 0;
    bool ok = read;
    for (uint64_t i = 0; ok && i < n; i++)
        ok = keys[i] && has_element(c->ds, "obs", keys[i]);
    /* Every string read is freed, the keys after one the obs lacks too. */
    if (read)
        cfs_strings_free(keys, n);
    free(keys);
    return ok;
}

/* What an entry of defaults must be; NULL for a key outside the table. */
static const char *default_wrong(checker *c, cfs_elem *el)
{
    const char *k = el->name;
    bool b;
    int64_t v;
    bool huge;
    if (strncmp(k, "embedding", 9) == 0 && k[9] >= '1' && k[9] <= '3' && strcmp(k + 10, "d") == 0)
        return embedding_ok(c, el, k[9] - '0') ? NULL
               : "not an obsm key of an embedding that wide, nor {key, columns} with valid "
                 "0-based columns";
    if (strcmp(k, "knn") == 0)
        return text_names(c, el, "obsp") ? NULL : "not an obsp key of this file";
    if (strcmp(k, "latentKey") == 0)
        return text_names(c, el, "obsm") ? NULL : "not an obsm key of this file";
    if (strcmp(k, "geneIdColumn") == 0)
        return text_names(c, el, "var") ? NULL : "not a var column of this file";
    if (strcmp(k, "expression") == 0)
        return expression_ok(c, el) ? NULL : "not X, raw/X or layers/<name> of this file";
    if (strcmp(k, "obsKeys") == 0)
        return obs_keys_ok(c, el) ? NULL : "not a list of obs columns of this file";
    if (strcmp(k, "normalizeEmbeddings") == 0)
        return read_bool(el, &b) ? NULL : "not true or false";
    if (strcmp(k, "centroidMinPoints") == 0)
        return read_integer(el, &v, &huge) && v > 0 ? NULL : "not a positive integer";
    if (strcmp(k, "vectorFieldDefault") == 0) {
        char *s = read_text(el);
        bool ok = s && cfs_cellucid_text_ok(s, false);
        free(s);
        return ok ? NULL : "not a vector field id";
    }
    if (strcmp(k, "modality") == 0)
        return "for a file of several modalities; this one has one";
    return "not a launch default Cellucid knows";
}

static int check_defaults(checker *c, cfs_elem *defaults, cfs_err *err)
{
    if (!is_mapping(defaults))
        return 1;
    for (size_t i = 0; i < defaults->nchildren;) {
        cfs_elem *el = defaults->children[i];
        const char *why = default_wrong(c, el);
        if (!why) {
            i++;
            continue;
        }
        char path[256];
        snprintf(path, sizeof path, "uns/cellucid/defaults/%s", el->name);
        if (cfs_dataset_leave_out(c->ds, path, "%s (uns['cellucid'] schema 1); the default was "
                                  "not kept", why) < 0)
            return cfs_err_oom(err);
        cfs_elem_remove(defaults, el->name);
    }
    return 0;
}

static verdict check_outliers(checker *c, cfs_elem *el)
{
    if (!is_mapping(el))
        return wrong(c, "'outlierQuantiles' is not a mapping {latentKey, minPoints, fields}");
    cfs_elem *latent = child_of(el, "latentKey"), *min = child_of(el, "minPoints"),
             *fields = child_of(el, "fields");
    int64_t v;
    bool huge;
    if (el->nchildren != 3 || !latent || !min || !fields)
        return wrong(c, "'outlierQuantiles' is not exactly {latentKey, minPoints, fields}");
    if (!text_names(c, latent, "obsm"))
        return wrong(c, "'outlierQuantiles/latentKey' is not an obsm key of this file");
    if (!read_integer(min, &v, &huge) || v <= 0)
        return wrong(c, "'outlierQuantiles/minPoints' is not a positive integer");
    if (!is_mapping(fields))
        return wrong(c, "'outlierQuantiles/fields' is not a mapping");
    for (size_t i = 0; i < fields->nchildren; i++) {
        const cfs_elem *f = fields->children[i];
        const cfs_elem *col = child_of(child_of(c->ds->root, "obs"), f->name);
        if (f->kind != CFS_EL_ARRAY || !f->values || f->values->ndim != 1 ||
            f->values->dtype != CFS_FLOAT32 || f->values->shape[0] != c->ds->n_obs)
            return wrong(c, "'outlierQuantiles/fields/%s' is not a float32 array of one value "
                         "a cell", f->name);
        if (!col || col->kind != CFS_EL_CATEGORICAL)
            return wrong(c, "'outlierQuantiles/fields/%s' names no categorical obs column",
                         f->name);
    }
    return KEEP;
}

static const struct {
    const char *key;
    verdict (*check)(checker *c, cfs_elem *el);
} table[] = {
    {"schema", check_schema},       {"id", check_id},
    {"name", check_name},           {"description", check_description},
    {"citation", check_citation},   {"source", check_source},
    {"defaults", check_mapping},    {"outlierQuantiles", check_outliers},
    {"priority", check_priority},   {"history_applied", check_history},
    {"gene_sets", check_mapping},   {"pulled", check_mapping},
};

static verdict check_key(checker *c, cfs_elem *el)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(el->name, table[i].key) == 0)
            return table[i].check(c, el);
    return wrong(c, "'%s' is not a key of uns['cellucid']", el->name);
}

int cfs_cellucid_meta_check(cfs_dataset *ds, cfs_cellucid_meta *out, cfs_err *err)
{
    memset(out, 0, sizeof *out);
    checker c = {.ds = ds, .meta = child_of(child_of(ds->root, "uns"), "cellucid"), .out = out};
    if (!c.meta)
        return 0;
    if (!is_mapping(c.meta)) {
        if (cfs_dataset_leave_out(ds, "uns/cellucid", "not a mapping; uns['cellucid'] is "
                                  "Cellucid's record of the file (schema 1)") < 0)
            return cfs_err_oom(err);
        cfs_elem_remove(child_of(ds->root, "uns"), "cellucid");
        return 0;
    }
    for (size_t i = 0; i < c.meta->nchildren;) {
        cfs_elem *el = c.meta->children[i];
        verdict v = check_key(&c, el);
        if (v == REFUSE)
            return cfs_err_setc(err, CFS_EREFUSED, "%s", c.why);
        if (v == KEEP) {
            i++;
            continue;
        }
        char path[256];
        snprintf(path, sizeof path, "uns/cellucid/%s", el->name);
        if (cfs_dataset_leave_out(ds, path, "%s (uns['cellucid'] schema 1); the key was not "
                                  "kept", c.why) < 0)
            return cfs_err_oom(err);
        cfs_elem_remove(c.meta, el->name);
    }
    cfs_elem *defaults = child_of(c.meta, "defaults");
    return defaults ? check_defaults(&c, defaults, err) < 0 ? -1 : 0 : 0;
}
