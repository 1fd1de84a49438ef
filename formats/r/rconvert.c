/* From R objects to the dataset model: see rconvert.h. */
#include "rconvert.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strfmt.h"

const void *rc_values(const rconv *c, const r_obj *x, void **owned, cfs_err *err)
{
    *owned = NULL;
    if (!x || (x->type != R_INT && x->type != R_LGL && x->type != R_REAL))
        return NULL;
    return r_vec_whole(c->vecs, x, owned, err);
}

char **rc_strings(const r_obj *x, const char *na)
{
    uint64_t n = r_length(x);
    char **v = calloc(n ? n : 1, sizeof *v);
    for (uint64_t i = 0; v && i < n; i++) {
        const char *s = r_str_at(x, i, NULL);
        if (!(v[i] = strdup(s ? s : na ? na : "NA"))) {
            cfs_strings_free(v, (size_t)i);
            free(v);
            return NULL;
        }
    }
    return v;
}

cfs_elem *rc_strings_elem(const char *name, char **v, uint64_t n)
{
    if (!v)
        return NULL;
    cfs_array *a = cfs_array_from_memory(CFS_STRING, 1, &n, v);
    if (!a) {
        cfs_strings_free(v, (size_t)n);
        free(v);
        return NULL;
    }
    return cfs_elem_from_array(CFS_EL_ARRAY, name, a);
}

cfs_elem *rc_string_elem(const char *name, const r_obj *x)
{
    return rc_strings_elem(name, rc_strings(x, NULL), r_length(x));
}

cfs_elem *rc_mem_elem(cfs_elem_kind kind, const char *name, cfs_dtype t, int ndim,
                          const uint64_t *shape, void *data)
{
    if (!data)
        return NULL;
    cfs_array *a = cfs_array_from_memory(t, ndim, shape, data);
    if (!a) {
        free(data);
        return NULL;
    }
    return cfs_elem_from_array(kind, name, a);
}

cfs_dataset *rc_modality_dataset(const rconv *c, rconv *mc, cfs_err *err)
{
    cfs_dataset *sub = cfs_dataset_new(c->ds->source);
    if (!sub || !(sub->root = cfs_elem_new(CFS_EL_ANNDATA, NULL))) {
        cfs_dataset_free(sub);
        cfs_err_oom(err);
        return NULL;
    }
    *mc = (rconv){.file = c->file, .vecs = c->vecs, .ds = sub};
    return sub;
}

static void *copy_of(const void *src, size_t n, size_t size)
{
    void *v = malloc(n ? n * size : 1);
    if (v && n)
        memcpy(v, src, n * size);
    return v;
}

/* Codes (int8/16/32 by the number of categories) for n values; code(i) gives -1 for NA. */
static cfs_elem *categorical(const char *name, uint64_t n, const int32_t *codes, char **cats,
                             uint64_t ncat, bool ordered)
{
    cfs_dtype ct = ncat <= INT8_MAX ? CFS_INT8 : ncat <= INT16_MAX ? CFS_INT16 : CFS_INT32;
    void *v = malloc(n ? n * cfs_dtype_size(ct) : 1);
    for (uint64_t i = 0; v && i < n; i++) {
        int32_t k = codes[i];
        if (ct == CFS_INT8)
            ((int8_t *)v)[i] = (int8_t)k;
        else if (ct == CFS_INT16)
            ((int16_t *)v)[i] = (int16_t)k;
        else
            ((int32_t *)v)[i] = k;
    }
    cfs_elem *el = v ? rc_mem_elem(CFS_EL_CATEGORICAL, name, ct, 1, &n, v) : NULL;
    if (!el) {
        cfs_strings_free(cats, (size_t)ncat);
        free(cats);
        return NULL;
    }
    el->ordered = ordered;
    if (!(el->categories = rc_strings_elem("categories", cats, ncat))) {
        cfs_elem_free(el);
        return NULL;
    }
    return el;
}

/* The values of v in memory for a conversion (*owned: a copy to free, or NULL); NULL with *why
 * when they cannot be read, or without: out of memory. */
static const void *whole(const rconv *c, const r_obj *v, void **owned, const char **why)
{
    cfs_err err = {0};
    const void *x = rc_values(c, v, owned, &err);
    if (!x && err.status != CFS_ENOMEM)
        *why = err.status ? "its values cannot be read from the file (changed since it was "
                            "opened?)"
                          : "not stored as R writes it";
    return x;
}

static cfs_elem *factor_column(const rconv *c, const r_obj *v, const char *name, uint64_t n,
                               const char **why)
{
    const r_obj *lev = r_attr(v, "levels");
    uint64_t ncat = lev && lev->type == R_STR ? lev->length : 0;
    if (lev && lev->type != R_STR) {
        *why = "a factor whose levels are not stored as R writes them";
        return NULL;
    }
    void *owned;
    const int32_t *x = whole(c, v, &owned, why);
    int32_t *codes = x ? malloc(n ? n * sizeof *codes : 1) : NULL;
    if (!codes) {
        free(owned);
        return NULL;
    }
    for (uint64_t i = 0; i < n; i++)
        codes[i] = x[i] == R_NA_INT || x[i] < 1 || (uint64_t)x[i] > ncat ? -1 : x[i] - 1;
    free(owned);
    cfs_elem *el = categorical(name, n, codes, rc_strings(lev, NULL), ncat,
                               r_inherits(v, "ordered"));
    free(codes);
    return el;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A character vector with NA: a categorical of its distinct values, sorted. */
static cfs_elem *string_categorical(const r_obj *v, const char *name, uint64_t n)
{
    const char **vals = malloc((n ? n : 1) * sizeof *vals);
    int32_t *codes = malloc((n ? n : 1) * sizeof *codes);
    char **cats = NULL;
    size_t k = 0, ncat = 0;
    cfs_elem *el = NULL;
    if (!vals || !codes)
        goto done;
    for (uint64_t i = 0; i < n; i++)
        if (r_str_at(v, i, NULL))
            vals[k++] = r_str_at(v, i, NULL);
    qsort(vals, k, sizeof *vals, cmp_str);
    for (size_t i = 0; i < k; i++)
        if (ncat == 0 || strcmp(vals[ncat - 1], vals[i]) != 0)
            vals[ncat++] = vals[i];
    if (!(cats = calloc(ncat ? ncat : 1, sizeof *cats)))
        goto done;
    for (size_t i = 0; i < ncat; i++)
        if (!(cats[i] = strdup(vals[i]))) {
            cfs_strings_free(cats, i);
            free(cats);
            goto done;
        }
    for (uint64_t i = 0; i < n; i++) {
        const char *s = r_str_at(v, i, NULL);
        codes[i] = -1;
        if (s) {
            const char **hit = bsearch(&s, vals, ncat, sizeof *vals, cmp_str);
            codes[i] = (int32_t)(hit - vals);
        }
    }
    el = categorical(name, n, codes, cats, ncat, false);
done:
    free(vals);
    free(codes);
    return el;
}

static cfs_elem *nullable(cfs_elem_kind kind, const char *name, uint64_t n, const int32_t *x)
{
    bool b = kind == CFS_EL_NULLABLE_BOOL;
    void *val = malloc(n ? n * (b ? 1 : sizeof(int32_t)) : 1);
    uint8_t *mask = malloc(n ? n : 1);
    if (!val || !mask) {
        free(val);
        free(mask);
        return NULL;
    }
    for (uint64_t i = 0; i < n; i++) {
        bool na = x[i] == R_NA_INT;
        mask[i] = na;
        if (b)
            ((uint8_t *)val)[i] = !na && x[i] != 0;
        else
            ((int32_t *)val)[i] = na ? 0 : x[i];
    }
    cfs_elem *el = rc_mem_elem(kind, name, b ? CFS_BOOL : CFS_INT32, 1, &n, val);
    cfs_array *m = el ? cfs_array_from_memory(CFS_BOOL, 1, &n, mask) : NULL;
    if (!m) {
        if (!el)
            return NULL;
        free(mask);
        cfs_elem_free(el);
        return NULL;
    }
    el->aux = m;
    return el;
}

/* One Date (days since 1970-01-01) or POSIXct (seconds since then, UTC) value as ISO 8601
 * text into buf: "2024-05-01", "2024-05-01T12:30:05Z", "...T12:30:05.25Z". A POSIXct is
 * written in UTC whatever its tzone attribute: the same instant, without needing the
 * time-zone database. False for NA and non-finite values. */
static bool iso_time(double v, bool date, char *buf, size_t len)
{
    if (!isfinite(v) || fabs(v) > 1e15)
        return false;
    double whole = floor(v);
    time_t t = date ? (time_t)whole * 86400 : (time_t)whole;
    struct tm tm;
    if (!gmtime_r(&t, &tm))
        return false;
    size_t k = strftime(buf, len, date ? "%Y-%m-%d" : "%Y-%m-%dT%H:%M:%S", &tm);
    if (k == 0)
        return false;
    double frac = date ? 0 : v - whole;
    if (frac > 0) {
        char f[16];
        snprintf(f, sizeof f, "%.6f", frac);   /* "0.250000" */
        size_t e = strlen(f);
        while (e > 2 && f[e - 1] == '0')
            e--;
        if (e > 2 && k + e - 1 < len) {
            memcpy(buf + k, f + 1, e - 1);
            k += e - 1;
        }
    }
    if (!date && k + 1 < len)
        buf[k++] = 'Z';
    buf[k] = '\0';
    return true;
}

/* A Date or POSIXct column as strings (with an NA: a categorical, as for a character
 * column). */
static cfs_elem *time_column(const double *x, const char *name, uint64_t n, bool date)
{
    r_str *strs = calloc(n ? n : 1, sizeof *strs);
    r_obj text = {.type = R_STR, .length = n};
    bool na = false, ok = strs != NULL;
    for (uint64_t i = 0; ok && i < n; i++) {
        char buf[64];
        if (!iso_time(x[i], date, buf, sizeof buf)) {
            na = true;
            continue;
        }
        ok = (strs[i].s = strdup(buf)) != NULL;
        strs[i].len = ok ? (uint32_t)strlen(buf) : 0;
        strs[i].enc = R_ENC_UTF8;
    }
    text.u.strs = strs;
    cfs_elem *el = !ok ? NULL : na ? string_categorical(&text, name, n) : rc_string_elem(name, &text);
    for (uint64_t i = 0; strs && i < n; i++)
        free(strs[i].s);
    free(strs);
    return el;
}

/* bit64's integer64: doubles whose 8 bytes are an int64 (NA: INT64_MIN), as int64, or with an
 * NA as a nullable integer. */
static cfs_elem *integer64_column(const double *x, const char *name, uint64_t n)
{
    int64_t *v = malloc(n ? n * sizeof *v : 1);
    uint8_t *mask = malloc(n ? n : 1);
    bool na = false;
    for (uint64_t i = 0; v && mask && i < n; i++) {
        memcpy(&v[i], &x[i], sizeof v[i]);
        mask[i] = v[i] == INT64_MIN;
        na |= mask[i];
        if (mask[i])
            v[i] = 0;
    }
    if (!v || !mask) {
        free(v);
        free(mask);
        return NULL;
    }
    if (!na) {
        free(mask);
        return rc_mem_elem(CFS_EL_ARRAY, name, CFS_INT64, 1, &n, v);
    }
    cfs_elem *el = rc_mem_elem(CFS_EL_NULLABLE_INT, name, CFS_INT64, 1, &n, v);
    if (!el || !(el->aux = cfs_array_from_memory(CFS_BOOL, 1, &n, mask))) {
        free(mask);
        cfs_elem_free(el);
        return NULL;
    }
    return el;
}

cfs_elem *rc_column(const rconv *c, const r_obj *v, const char *name, uint64_t n,
                    const char **why, cfs_err *err)
{
    (void)err;
    *why = NULL;
    if (r_length(v) != n || r_attr(v, "dim")) {
        *why = r_attr(v, "dim") ? "a matrix column (not one value per row)"
                                : "its length is not the number of rows";
        return NULL;
    }
    if (v->type == R_INT && r_inherits(v, "factor"))
        return factor_column(c, v, name, n, why);
    if (v->type == R_STR) {
        for (uint64_t i = 0; i < n; i++)
            if (!r_str_at(v, i, NULL))
                return string_categorical(v, name, n);
        return rc_string_elem(name, v);
    }
    if (v->type != R_REAL && v->type != R_INT && v->type != R_LGL) {
        *why = v->type == R_VEC ? "a list column (not one value per row)"
                                : "an R column type not served";
        return NULL;
    }
    bool date = r_inherits(v, "Date"), int64 = r_inherits(v, "integer64");
    if (v->type == R_REAL && (date || r_inherits(v, "POSIXct") || int64)) {
        void *owned;
        const double *x = whole(c, v, &owned, why);
        cfs_elem *el = !x ? NULL : int64 ? integer64_column(x, name, n)
                                         : time_column(x, name, n, date);
        free(owned);
        return el;
    }
    r_vec_stats st;
    bool na = r_vec_stats_of(c->vecs, v, &st) && st.has_na;
    if (!na) {
        cfs_dtype t = v->type == R_REAL ? CFS_FLOAT64 : v->type == R_INT ? CFS_INT32 : CFS_BOOL;
        return cfs_elem_from_array(CFS_EL_ARRAY, name, rc_view(c, v, t, 1, &n, false));
    }
    void *owned;
    const int32_t *iv = whole(c, v, &owned, why);
    cfs_elem *el = iv ? nullable(v->type == R_LGL ? CFS_EL_NULLABLE_BOOL : CFS_EL_NULLABLE_INT,
                                 name, n, iv)
                      : NULL;
    free(owned);
    return el;
}

/* The columns of a nested data frame: a DataFrame's listData, a data.frame's list. */
static const r_obj *nested_columns(const r_obj *v)
{
    if (v && v->type == R_S4 && (r_inherits(v, "DataFrame") || r_inherits(v, "DFrame"))) {
        const r_obj *l = r_slot(v, "listData");
        return l && l->type == R_VEC ? l : NULL;
    }
    return v && v->type == R_VEC && r_inherits(v, "data.frame") ? v : NULL;
}

/* The columns of cols into df, named prefix + name (nested data frames flattened as
 * outer.inner, as as.data.frame names them), depth levels at most. */
static int add_columns(const rconv *c, cfs_elem *df, const r_obj *cols, const char *prefix,
                       uint64_t n, const char *where, int depth, cfs_err *err)
{
    const r_obj *names = r_attr(cols, "names");
    uint64_t ncol = cols && cols->type == R_VEC ? cols->length : 0;
    for (uint64_t j = 0; j < ncol; j++) {
        const char *cn0 = r_str_at(names, j, NULL);
        char *cn = cn0 && *cn0 ? cfs_strdupf("%s%s", prefix, cn0) : NULL;
        const char *why = NULL;
        int rc = 0;
        if (cn0 && *cn0 && !cn)
            return cfs_err_oom(err);
        const r_obj *v = cols->u.items[j];
        const r_obj *inner = nested_columns(v);
        if (!cn || strcmp(cn, "_index") == 0 || cfs_elem_child(df, cn)) {
            rc = cfs_dataset_leave_out(c->ds, where, "column %s%llu has no name, a repeated "
                                       "one or '_index'", prefix, (unsigned long long)j + 1);
            rc = rc < 0 ? cfs_err_oom(err) : 0;
        } else if (inner && depth < 8) {
            char *pre = cfs_strdupf("%s.", cn);
            rc = pre ? add_columns(c, df, inner, pre, n, where, depth + 1, err)
                     : cfs_err_oom(err);
            free(pre);
        } else {
            cfs_elem *col = rc_column(c, v, cn, n, &why, err);
            if (col)
                rc = cfs_elem_add_or_free(df, col, err);
            else if (!why)
                rc = cfs_err_oom(err);
            else {
                char *el = cfs_strdupf("%s/%s", where, cn);
                rc = el ? cfs_dataset_leave_out(c->ds, el, "%s", why) : -1;
                free(el);
                rc = rc < 0 ? cfs_err_oom(err) : 0;
            }
        }
        free(cn);
        if (rc < 0)
            return -1;
    }
    return 0;
}

int rc_frame(const rconv *c, const char *name, char **index, uint64_t n, const r_obj *cols,
             const char *where, cfs_elem **out, cfs_err *err)
{
    *out = NULL;
    cfs_elem *df = cfs_elem_new(CFS_EL_DATAFRAME, name);
    cfs_elem *ix = rc_strings_elem("_index", index, n);
    if (!df || !ix || !(df->index_name = strdup("_index"))) {
        cfs_elem_free(df);
        cfs_elem_free(ix);
        return cfs_err_oom(err);
    }
    df->index = ix;
    if (add_columns(c, df, cols, "", n, where, 0, err) < 0) {
        cfs_elem_free(df);
        return -1;
    }
    *out = df;
    return 0;
}

char *rc_obsm_key(const char *name)
{
    char *k = cfs_strdupf("X_%s", name);
    for (char *s = k ? k + 2 : NULL; s && *s; s++)
        *s = (char)tolower((unsigned char)*s);
    return k;
}

/* One plain value (a vector without attributes but names, or a named list of such) as an uns
 * element, or NULL with *why (left out) or without (OOM). */
static cfs_elem *plain_value(const rconv *c, const r_obj *v, const char *name, int depth,
                             const char *where, const char **why, cfs_err *err);

static int plain_list(const rconv *c, cfs_elem *dict, const r_obj *list, const char *where,
                      int depth, cfs_err *err)
{
    const r_obj *names = r_attr(list, "names");
    for (uint64_t i = 0; list && list->type == R_VEC && i < list->length; i++) {
        const char *k = r_str_at(names, i, NULL);
        char *el = cfs_strdupf("%s/%s", where, k && *k ? k : "?");
        const char *why = NULL;
        int rc = 0;
        if (!el)
            return cfs_err_oom(err);
        if (!k || !*k || cfs_elem_child(dict, k))
            rc = cfs_dataset_leave_out(c->ds, el, "an unnamed or repeated list element") < 0
                     ? cfs_err_oom(err) : 0;
        else {
            cfs_elem *x = plain_value(c, list->u.items[i], k, depth, el, &why, err);
            rc = x ? cfs_elem_add_or_free(dict, x, err)
                   : !why ? cfs_err_oom(err)   /* the only failure below is OOM */
                          : cfs_dataset_leave_out(c->ds, el, "%s", why) < 0 ? cfs_err_oom(err)
                                                                              : 0;
        }
        free(el);
        if (rc < 0)
            return -1;
    }
    return 0;
}

static cfs_elem *plain_value(const rconv *c, const r_obj *v, const char *name, int depth,
                             const char *where, const char **why, cfs_err *err)
{
    *why = NULL;
    for (const r_obj *a = v->attr; a && a->type == R_LIST; a = a->u.cons.cdr) {
        const char *t = r_sym_name(a->u.cons.tag);
        if (!t || strcmp(t, "names") != 0) {
            *why = "not a plain value (an R object with attributes or a class)";
            return NULL;
        }
    }
    if (v->type == R_VEC) {
        cfs_elem *d = depth < 8 ? cfs_elem_new(CFS_EL_DICT, name) : NULL;
        if (!d) {
            if (depth >= 8)
                *why = "nested too deeply";
            return NULL;
        }
        if (plain_list(c, d, v, where, depth + 1, err) < 0) {
            cfs_elem_free(d);
            return NULL;
        }
        return d;
    }
    uint64_t n = r_length(v);
    int ndim = n == 1 ? 0 : 1;
    if (v->type == R_STR) {
        for (uint64_t i = 0; i < n; i++)
            if (!r_str_at(v, i, NULL)) {
                *why = "a character vector with NA";
                return NULL;
            }
        char **s = rc_strings(v, NULL);
        cfs_array *a = s ? cfs_array_from_memory(CFS_STRING, ndim, &n, s) : NULL;
        if (s && !a) {
            cfs_strings_free(s, (size_t)n);
            free(s);
        }
        return a ? cfs_elem_from_array(ndim ? CFS_EL_ARRAY : CFS_EL_SCALAR, name, a) : NULL;
    }
    if (v->type != R_REAL && v->type != R_INT && v->type != R_LGL) {
        *why = "not a plain value (only numbers, strings, logicals and lists of them are)";
        return NULL;
    }
    void *owned;
    const void *x = whole(c, v, &owned, why);
    if (!x)
        return NULL;
    void *d = NULL;
    cfs_dtype t = v->type == R_REAL ? CFS_FLOAT64 : v->type == R_INT ? CFS_INT32 : CFS_BOOL;
    if (v->type != R_REAL)
        for (uint64_t i = 0; i < n; i++)
            if (((const int32_t *)x)[i] == R_NA_INT) {
                *why = "an integer or logical vector with NA";
                free(owned);
                return NULL;
            }
    if (t == CFS_BOOL) {
        uint8_t *b = malloc(n ? n : 1);
        for (uint64_t i = 0; b && i < n; i++)
            b[i] = ((const int32_t *)x)[i] != 0;
        d = b;
    } else
        d = owned ? owned : copy_of(x, n, t == CFS_FLOAT64 ? 8 : 4);
    if (d != owned)
        free(owned);
    cfs_array *a = d ? cfs_array_from_memory(t, ndim, &n, d) : NULL;
    if (d && !a)
        free(d);
    return a ? cfs_elem_from_array(ndim ? CFS_EL_ARRAY : CFS_EL_SCALAR, name, a) : NULL;
}

int rc_uns(const rconv *c, const r_obj *list, const char *key, cfs_err *err)
{
    if (!list || list->type != R_VEC || list->length == 0)
        return 0;
    cfs_elem *uns = cfs_elem_ensure_dict(c->ds->root, "uns");
    cfs_elem *d = uns ? cfs_elem_new(CFS_EL_DICT, key) : NULL;
    char *where = cfs_strdupf("uns/%s", key);
    int rc = d && where ? plain_list(c, d, list, where, 0, err) : cfs_err_oom(err);
    free(where);
    if (rc < 0 || d->nchildren == 0) {
        cfs_elem_free(d);
        return rc;
    }
    return cfs_elem_add_or_free(uns, d, err);
}
