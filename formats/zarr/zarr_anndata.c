/*
 * AnnData Zarr v2 stores (folders written by anndata's write_zarr): the dataset model built
 * exactly as formats/hdf5/h5ad.c builds it from an h5ad, so the same layout step gives the
 * same store as the h5ad of the same data. Every element is dispatched on its encoding-type
 * (anndata's specs/methods.py: anndata, raw, dataframe with _index and column-order,
 * categorical, nullable-integer/boolean/string-array, csr_matrix/csc_matrix, array,
 * string-array, dict, numeric-scalar, string); elements without one are read the way anndata
 * reads them (arrays as arrays, groups as dicts). Stores of anndata 0.7 (no encoding on the
 * root; dataframes with _index, categorical columns as codes whose `categories` attribute
 * names an array in <frame>/__categories) are read with those rules and the legacy fixups of
 * h5ad_legacy.h, like an anndata 0.7 h5ad.
 *
 * An element that cannot be read (an unknown codec, a dtype this version does not serve, a
 * malformed encoding) is left out with its reason; obs, var and X must be readable.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup */
#endif

#include "format.h"
#include "array_views.h"
#include "h5ad_legacy.h"
#include "zarr_anndata.h"
#include "path.h"
#include "remote.h"
#include "utf8.h"
#include "zarr_array.h"
#include "zarr_backend.h"
#include "zarr_zipprobe.h"
#include "zarr_meta.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#define ZAD_MAX_DEPTH 64
#define ZAD_MAX_ELEMS 200000
#define ZAD_MAX_AXIS ((uint64_t)1 << 32)

#define FIX_HINT "re-write the store with anndata >= 0.8 (anndata.read_zarr(d).write_zarr(d2))"

typedef unsigned long long ull;

typedef struct rd {
    const zr_store *s;
    cfs_dataset *ds;
    bool legacy;
    size_t nelems;
} rd;

static bool streq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

static cfs_elem *elem_new(cfs_elem_kind kind, const char *raw_name)
{
    if (!raw_name)
        return cfs_elem_new(kind, NULL);
    char *name = cfs_text_to_utf8(raw_name, strlen(raw_name));
    if (!name)
        return NULL;
    cfs_elem *el = cfs_elem_new(kind, name);
    free(name);
    return el;
}

static int leave_out(rd *r, const char *path, const char *what, const cfs_err *why)
{
    char *p = cfs_text_to_utf8(path, strlen(path));
    int rc = p ? cfs_dataset_leave_out(r->ds, p, "%s; %s was not read", why->msg, what) : -1;
    free(p);
    return rc;
}

static int refuse(cfs_err *err, const char *what)
{
    char reason[sizeof err->msg];
    snprintf(reason, sizeof reason, "%s", err->msg);
    if (strstr(reason, "; "))
        return cfs_err_set(err, "%s: %s", what, reason);
    return cfs_err_set(err, "%s: %s; " FIX_HINT, what, reason);
}

static char *join(const char *parent, const char *name)
{
    return cfs_path_join(parent, name);
}

static bool numeric_dtype(cfs_dtype t)
{
    return t != CFS_STRING && t != CFS_COMPOUND;
}

static int read_index(const cfs_array *arr, uint64_t i, uint64_t *out, cfs_err *err)
{
    unsigned char buf[8] = {0};
    uint64_t one = 1;
    if (cfs_array_read(arr, &i, &one, buf, err) < 0)
        return -1;
    size_t size = cfs_dtype_size(arr->dtype);
    uint64_t v = 0;
    for (size_t k = 0; k < size; k++)
        v |= (uint64_t)buf[k] << (8 * k);
    bool neg = cfs_dtype_is_signed(arr->dtype) &&
               (size < 8 ? (v >> (8 * size - 1)) != 0 : (int64_t)v < 0);
    if (neg)
        return cfs_err_set(err, "indptr[%llu] is negative", (ull)i);
    *out = v;
    return 0;
}

static bool elem_rows(const cfs_elem *el, uint64_t *rows)
{
    const cfs_array *a = NULL;
    switch (el->kind) {
    case CFS_EL_ARRAY:
    case CFS_EL_RECARRAY:
    case CFS_EL_CATEGORICAL:
    case CFS_EL_NULLABLE_INT:
    case CFS_EL_NULLABLE_BOOL:
    case CFS_EL_NULLABLE_STRING: a = el->values; break;
    case CFS_EL_SPARSE: *rows = el->sparse_shape[0]; return true;
    case CFS_EL_DATAFRAME: return elem_rows(el->index, rows);
    default: return false;
    }
    if (!a || a->ndim < 1)
        return false;
    *rows = a->shape[0];
    return true;
}

static int need_1d(const cfs_array *a, const char *what, cfs_err *err)
{
    if (a->ndim != 1)
        return cfs_err_set(err, "its %s are %d-d, not 1-d", what, a->ndim);
    return 0;
}

/* The array child `name` of group rel. */
static int open_child(rd *r, const char *rel, const char *name, cfs_array **out, cfs_err *err)
{
    *out = NULL;
    char *crel = join(rel, name);
    if (!crel)
        return cfs_err_oom(err);
    int rc;
    zr_kind k = zr_node_kind(r->s, crel);
    if (k == ZR_NONE)
        rc = cfs_err_set(err, "its %s is missing", name);
    else if (k != ZR_ARRAY)
        rc = cfs_err_set(err, "its %s is a group, not an array", name);
    else
        rc = zr_array_open(r->s, crel, out, err);
    free(crel);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */

static int read_elem(rd *r, const char *rel, const char *name, int depth, cfs_elem **out,
                     cfs_err *err);

static const char *const array_encodings[] = {
    "array", "string-array", "numeric-scalar", "string", "rec-array", "bytes", NULL,
};
static const char *const group_encodings[] = {
    "dict", "dataframe", "categorical", "csr_matrix", "csc_matrix", "nullable-integer",
    "nullable-boolean", "nullable-string-array", "awkward-array", "anndata", "raw", NULL,
};

static bool listed(const char *const *list, const char *s)
{
    for (size_t i = 0; list[i]; i++)
        if (strcmp(s, list[i]) == 0)
            return true;
    return false;
}

static int misplaced_encoding(const char *enc, bool is_group, cfs_err *err)
{
    if (listed(is_group ? array_encodings : group_encodings, enc))
        return cfs_err_set(err, "encoding-type '%s' belongs on %s, but this is %s", enc,
                           is_group ? "an array" : "a group", is_group ? "a group" : "an array");
    return cfs_err_set(err, "unknown encoding-type '%s'", enc);
}

static int check_array_encoding(const char *enc, const cfs_array *a, cfs_err *err)
{
    if (!enc)
        return 0;
    const char *dt = cfs_dtype_name(a->dtype);
    if (streq(enc, "string-array") && (a->dtype != CFS_STRING || a->ndim < 1))
        return cfs_err_set(err, "encoding-type 'string-array' but it holds %d-d %s", a->ndim, dt);
    if (streq(enc, "string") && (a->dtype != CFS_STRING || a->ndim != 0))
        return cfs_err_set(err, "encoding-type 'string' but it holds %d-d %s", a->ndim, dt);
    if (streq(enc, "numeric-scalar") && (!numeric_dtype(a->dtype) || a->ndim != 0))
        return cfs_err_set(err, "encoding-type 'numeric-scalar' but it holds %d-d %s", a->ndim, dt);
    if (streq(enc, "rec-array") && a->dtype != CFS_COMPOUND)
        return cfs_err_set(err, "encoding-type 'rec-array' but it holds %s", dt);
    return 0;
}

static int read_array_elem(rd *r, const char *rel, const char *enc, const char *name,
                           cfs_elem **out, cfs_err *err)
{
    if (streq(enc, "null")) {
        *out = elem_new(CFS_EL_NULL, name);
        return *out ? 0 : cfs_err_oom(err);
    }
    if (enc && !listed(array_encodings, enc))
        return misplaced_encoding(enc, false, err);
    cfs_array *arr;
    if (zr_array_open(r->s, rel, &arr, err) < 0)
        return -1;
    if (check_array_encoding(enc, arr, err) < 0) {
        cfs_array_unref(arr);
        return -1;
    }
    cfs_elem *el = elem_new(arr->ndim == 0 ? CFS_EL_SCALAR : CFS_EL_ARRAY, name);
    if (!el) {
        cfs_array_unref(arr);
        return cfs_err_oom(err);
    }
    el->values = arr;
    *out = el;
    return 0;
}

/* --- dict --- */

static int read_dict(rd *r, const char *rel, const char *name, int depth, cfs_elem **out,
                     cfs_err *err)
{
    char **names;
    size_t n;
    if (zr_children(r->s, rel, &names, &n, err) < 0)
        return -1;
    cfs_elem *dict = elem_new(CFS_EL_DICT, name);
    int rc = dict ? 0 : cfs_err_oom(err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char *crel = join(rel, names[i]);
        cfs_elem *child = NULL;
        cfs_err why;
        if (!crel)
            rc = cfs_err_oom(err);
        else if (read_elem(r, crel, names[i], depth + 1, &child, &why) == 0)
            rc = cfs_elem_add_or_free(dict, child, err);
        else if (r->nelems > ZAD_MAX_ELEMS)
            rc = cfs_err_set(err, "%s", why.msg);
        else if (leave_out(r, crel, "the entry", &why) < 0)
            rc = cfs_err_oom(err);
        free(crel);
    }
    zr_names_free(names, n);
    if (rc < 0) {
        cfs_elem_free(dict);
        return -1;
    }
    *out = dict;
    return 0;
}

/* --- dataframe --- */

static int check_column(const cfs_elem *el, uint64_t nrows, cfs_err *err)
{
    uint64_t rows;
    switch (el->kind) {
    case CFS_EL_ARRAY:
    case CFS_EL_CATEGORICAL:
    case CFS_EL_NULLABLE_INT:
    case CFS_EL_NULLABLE_BOOL:
    case CFS_EL_NULLABLE_STRING: break;
    default: return cfs_err_set(err, "it is a %s, not a column", cfs_elem_kind_name(el->kind));
    }
    if (el->values->ndim != 1)
        return cfs_err_set(err, "it is %d-d, not a column", el->values->ndim);
    elem_rows(el, &rows);
    if (rows != nrows)
        return cfs_err_set(err, "it has %llu values but the dataframe has %llu rows", (ull)rows,
                           (ull)nrows);
    return 0;
}

static int read_index_elem(rd *r, const char *rel, const char *idx, int depth, cfs_elem **out,
                           cfs_err *err)
{
    char *irel = join(rel, idx);
    if (!irel)
        return cfs_err_oom(err);
    cfs_elem *index = NULL;
    int rc = read_elem(r, irel, idx, depth + 1, &index, err);
    free(irel);
    if (rc < 0)
        return cfs_err_prefix(err, "its index '%s'", idx);
    if (r->legacy && index->kind == CFS_EL_ARRAY && index->values->ndim == 1 &&
        cfs_dtype_is_integer(index->values->dtype) &&
        !(index->values = cfs_view_new(CFS_VIEW_FORMAT, index->values))) {
        cfs_elem_free(index);
        return cfs_err_oom(err);
    }
    bool strings = (index->kind == CFS_EL_ARRAY || index->kind == CFS_EL_NULLABLE_STRING) &&
                   index->values->dtype == CFS_STRING && index->values->ndim == 1;
    if (!strings) {
        cfs_elem_free(index);
        return cfs_err_set(err, "its index '%s' is not a 1-d string array", idx);
    }
    if (index->values->shape[0] > ZAD_MAX_AXIS) {
        ull rows = (ull)index->values->shape[0];
        cfs_elem_free(index);
        return cfs_err_set(err, "its index claims %llu rows, more than the %llu this reader "
                           "accepts (a corrupt header?)", rows, (ull)ZAD_MAX_AXIS);
    }
    *out = index;
    return 0;
}

static bool listed_before(char **cols, size_t i)
{
    for (size_t k = 0; k < i; k++)
        if (strcmp(cols[k], cols[i]) == 0)
            return true;
    return false;
}

/* anndata 0.7: a code column whose `categories` attribute names its categories array,
 * relative to the frame (anndata writes "__categories/<col>"). */
static int legacy_column(rd *r, const char *rel, const char *name, cfs_elem **col, cfs_err *err)
{
    char *crel = join(rel, name);
    if (!crel)
        return cfs_err_oom(err);
    json_t *attrs = NULL;
    char *catpath = NULL;
    int rc = zr_attrs(r->s, crel, &attrs, err);
    free(crel);
    if (rc == 0)
        rc = zr_attr_string(attrs, "categories", &catpath, err);
    json_decref(attrs);
    if (rc <= 0)
        return rc;
    cfs_array *cats = NULL;
    bool ordered = false;
    char *cat_rel = join(rel, catpath);
    json_t *cattrs = NULL;
    rc = cat_rel ? 0 : cfs_err_oom(err);
    if (rc == 0 && (zr_node_kind(r->s, cat_rel) != ZR_ARRAY ||
                    zr_array_open(r->s, cat_rel, &cats, err) < 0))
        rc = cfs_err_set(err, "its categories '%s' cannot be read", catpath);
    if (rc == 0 && zr_attrs(r->s, cat_rel, &cattrs, err) == 0 &&
        zr_attr_bool(cattrs, "ordered", &ordered, err) < 0)
        rc = -1;
    json_decref(cattrs);
    free(cat_rel);
    free(catpath);
    cfs_elem *c = *col;
    if (rc == 0 && (c->kind != CFS_EL_ARRAY || c->values->ndim != 1 ||
                    !cfs_dtype_is_integer(c->values->dtype)))
        rc = cfs_err_set(err, "it has categories but is not a column of integer codes");
    if (rc == 0 && need_1d(cats, "categories", err) < 0)
        rc = -1;
    if (rc < 0) {
        cfs_array_unref(cats);
        return -1;
    }
    cfs_elem *cat = elem_new(CFS_EL_CATEGORICAL, name);
    cfs_elem *cel = cfs_elem_from_array(CFS_EL_ARRAY, "categories", cats);
    if (!cat || !cel) {
        cfs_elem_free(cat);
        cfs_elem_free(cel);
        return cfs_err_oom(err);
    }
    cat->values = cfs_view_codes(c->values, cel->values->shape[0]);
    c->values = NULL;
    cat->categories = cel;
    cat->ordered = ordered;
    cfs_elem_free(c);
    *col = cat;
    if (!cat->values) {
        cfs_elem_free(cat);
        *col = NULL;
        return cfs_err_oom(err);
    }
    return 0;
}

static int read_column(rd *r, const char *rel, cfs_elem *df, char **cols, size_t i, int depth,
                       uint64_t nrows, bool v010, cfs_err *err)
{
    char *crel = join(rel, cols[i]);
    if (!crel)
        return cfs_err_oom(err);
    cfs_elem *col = NULL;
    cfs_err why;
    int rc = 0;
    bool ok = false;
    if (listed_before(cols, i))
        cfs_err_set(&why, "it is listed twice in column-order");
    else
        ok = read_elem(r, crel, cols[i], depth + 1, &col, &why) == 0 &&
             (!v010 || legacy_column(r, rel, cols[i], &col, &why) == 0) &&
             check_column(col, nrows, &why) == 0;
    if (ok) {
        rc = cfs_elem_add_or_free(df, col, err);
    } else {
        cfs_elem_free(col);
        if (leave_out(r, crel, "the column", &why) < 0)
            rc = cfs_err_oom(err);
    }
    free(crel);
    return rc;
}

/* An anndata 0.7 frame without column-order: its children but the index and __categories. */
static int legacy_column_order(rd *r, const char *rel, const char *idx, char ***cols,
                               size_t *ncols, cfs_err *err)
{
    if (zr_children(r->s, rel, cols, ncols, err) < 0)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < *ncols; i++) {
        if (streq((*cols)[i], idx) || streq((*cols)[i], "__categories"))
            free((*cols)[i]);
        else
            (*cols)[k++] = (*cols)[i];
    }
    *ncols = k;
    return 1;
}

static int read_dataframe(rd *r, const char *rel, json_t *attrs, const char *name, int depth,
                          cfs_elem **out, cfs_err *err)
{
    char *version = NULL, *idx = NULL, **cols = NULL;
    size_t ncols = 0;
    int vrc = zr_attr_string(attrs, "encoding-version", &version, err);
    if (vrc < 0)
        return -1;
    bool v010 = streq(version, "0.1.0") || (r->legacy && vrc == 0);
    free(version);
    int rc = zr_attr_string(attrs, "_index", &idx, err);
    if (rc == 0)
        return cfs_err_set(err, "the dataframe has no _index attribute");
    if (rc < 0)
        return -1;
    rc = zr_attr_strings(attrs, "column-order", &cols, &ncols, err);
    if (rc == 0 && r->legacy)
        rc = legacy_column_order(r, rel, idx, &cols, &ncols, err);
    if (rc == 0)
        cfs_err_set(err, "the dataframe has no column-order attribute");
    if (rc <= 0) {
        free(idx);
        return -1;
    }
    cfs_elem *df = elem_new(CFS_EL_DATAFRAME, name);
    rc = df ? 0 : cfs_err_oom(err);
    if (rc == 0)
        rc = read_index_elem(r, rel, idx, depth, &df->index, err);
    if (rc == 0 && !(df->index_name = strdup(idx)))
        rc = cfs_err_oom(err);
    uint64_t nrows = rc == 0 ? df->index->values->shape[0] : 0;
    for (size_t i = 0; rc == 0 && i < ncols; i++)
        rc = read_column(r, rel, df, cols, i, depth, nrows, v010, err);
    free(idx);
    zr_names_free(cols, ncols);
    if (rc < 0) {
        cfs_elem_free(df);
        return -1;
    }
    *out = df;
    return 0;
}

/* --- categorical --- */

static int read_categorical(rd *r, const char *rel, json_t *attrs, const char *name,
                            cfs_elem **out, cfs_err *err)
{
    cfs_array *codes = NULL, *cats = NULL;
    bool ordered = false;
    int rc = open_child(r, rel, "codes", &codes, err);
    if (rc == 0 && (rc = need_1d(codes, "codes", err)) == 0 && !cfs_dtype_is_integer(codes->dtype))
        rc = cfs_err_set(err, "its codes are %s, not integers", cfs_dtype_name(codes->dtype));
    if (rc == 0)
        rc = open_child(r, rel, "categories", &cats, err);
    if (rc == 0)
        rc = need_1d(cats, "categories", err);
    if (rc == 0 && zr_attr_bool(attrs, "ordered", &ordered, err) < 0)
        rc = -1;
    cfs_elem *el = NULL, *cel = NULL;
    if (rc == 0 && (!(el = elem_new(CFS_EL_CATEGORICAL, name)) ||
                    !(cel = elem_new(CFS_EL_ARRAY, "categories"))))
        rc = cfs_err_oom(err);
    if (rc < 0) {
        cfs_elem_free(el);
        cfs_array_unref(codes);
        cfs_array_unref(cats);
        return cfs_err_prefix(err, "malformed categorical");
    }
    el->values = codes;
    cel->values = cats;
    el->categories = cel;
    el->ordered = ordered;
    *out = el;
    return 0;
}

/* --- nullable --- */

static int nullable_values_ok(cfs_elem_kind kind, const cfs_array *v, cfs_err *err)
{
    const char *dt = cfs_dtype_name(v->dtype);
    if (kind == CFS_EL_NULLABLE_INT && !cfs_dtype_is_integer(v->dtype))
        return cfs_err_set(err, "a nullable-integer whose values are %s", dt);
    if (kind == CFS_EL_NULLABLE_BOOL && v->dtype != CFS_BOOL)
        return cfs_err_set(err, "a nullable-boolean whose values are %s", dt);
    if (kind == CFS_EL_NULLABLE_STRING && v->dtype != CFS_STRING)
        return cfs_err_set(err, "a nullable-string-array whose values are %s", dt);
    return 0;
}

static int read_nullable(rd *r, const char *rel, json_t *attrs, cfs_elem_kind kind,
                         const char *name, cfs_elem **out, cfs_err *err)
{
    cfs_array *values = NULL, *mask = NULL;
    char *na = NULL;
    int rc = open_child(r, rel, "values", &values, err);
    if (rc == 0 && (rc = need_1d(values, "values", err)) == 0)
        rc = nullable_values_ok(kind, values, err);
    if (rc == 0)
        rc = open_child(r, rel, "mask", &mask, err);
    if (rc == 0 && (rc = need_1d(mask, "mask values", err)) == 0 && mask->dtype != CFS_BOOL)
        rc = cfs_err_set(err, "its mask is %s, not bool", cfs_dtype_name(mask->dtype));
    if (rc == 0 && mask->shape[0] != values->shape[0])
        rc = cfs_err_set(err, "its mask has %llu entries but its values %llu",
                         (ull)mask->shape[0], (ull)values->shape[0]);
    if (rc == 0 && kind == CFS_EL_NULLABLE_STRING && zr_attr_string(attrs, "na-value", &na, err) < 0)
        rc = -1;
    cfs_elem *el = NULL;
    if (rc == 0 && !(el = elem_new(kind, name)))
        rc = cfs_err_oom(err);
    if (rc < 0) {
        cfs_array_unref(values);
        cfs_array_unref(mask);
        free(na);
        return -1;
    }
    el->values = values;
    el->aux = mask;
    el->na_value = na;
    *out = el;
    return 0;
}

/* --- sparse --- */

static int read_sparse(rd *r, const char *rel, json_t *attrs, bool csr, const char *name,
                       cfs_elem **out, cfs_err *err)
{
    cfs_array *data = NULL, *indices = NULL, *indptr = NULL;
    uint64_t shape[2];
    int rc = zr_attr_shape2(attrs, "shape", shape, err);
    if (rc == 0)
        rc = cfs_err_set(err, "it has no shape attribute");
    else if (rc > 0)
        rc = 0;
    if (rc == 0 && (shape[0] > ZAD_MAX_AXIS || shape[1] > ZAD_MAX_AXIS))
        rc = cfs_err_set(err, "its shape attribute claims %llu x %llu, beyond what this reader "
                         "accepts (a corrupt header?)", (ull)shape[0], (ull)shape[1]);
    if (rc == 0 && (open_child(r, rel, "data", &data, err) < 0 || need_1d(data, "data", err) < 0 ||
                    open_child(r, rel, "indices", &indices, err) < 0 ||
                    need_1d(indices, "indices", err) < 0 ||
                    open_child(r, rel, "indptr", &indptr, err) < 0 ||
                    need_1d(indptr, "indptr values", err) < 0))
        rc = -1;
    if (rc == 0 && !numeric_dtype(data->dtype))
        rc = cfs_err_set(err, "its data are %s, not numbers", cfs_dtype_name(data->dtype));
    if (rc == 0 && (!cfs_dtype_is_integer(indices->dtype) || !cfs_dtype_is_integer(indptr->dtype)))
        rc = cfs_err_set(err, "its indices (%s) or indptr (%s) are not integers",
                         cfs_dtype_name(indices->dtype), cfs_dtype_name(indptr->dtype));
    if (rc == 0) {
        uint64_t major = csr ? shape[0] : shape[1];
        uint64_t nptr = indptr->shape[0], nnz = data->shape[0], first, last;
        if (nptr != major + 1)
            rc = cfs_err_set(err, "its indptr has %llu entries but a %llu x %llu %s needs %llu",
                             (ull)nptr, (ull)shape[0], (ull)shape[1],
                             csr ? "csr_matrix" : "csc_matrix", (ull)(major + 1));
        else if (indices->shape[0] != nnz)
            rc = cfs_err_set(err, "its data has %llu entries but its indices %llu", (ull)nnz,
                             (ull)indices->shape[0]);
        else if (read_index(indptr, 0, &first, err) < 0 ||
                 read_index(indptr, nptr - 1, &last, err) < 0)
            rc = -1;
        else if (first != 0 || last != nnz)
            rc = cfs_err_set(err, "its indptr runs from %llu to %llu but should run from 0 to "
                             "the %llu stored entries", (ull)first, (ull)last, (ull)nnz);
    }
    cfs_elem *el = NULL;
    if (rc == 0 && !(el = elem_new(CFS_EL_SPARSE, name)))
        rc = cfs_err_oom(err);
    if (rc < 0) {
        cfs_array_unref(data);
        cfs_array_unref(indices);
        cfs_array_unref(indptr);
        return cfs_err_prefix(err, "%s", csr ? "csr_matrix" : "csc_matrix");
    }
    el->values = data;
    el->aux = indices;
    el->indptr = indptr;
    el->csr = csr;
    el->sparse_shape[0] = shape[0];
    el->sparse_shape[1] = shape[1];
    *out = el;
    return 0;
}

/* --- groups --- */

static int read_group(rd *r, const char *rel, json_t *attrs, const char *enc, const char *name,
                      int depth, cfs_elem **out, cfs_err *err)
{
    if (!enc) {
        if (r->legacy && (json_object_get(attrs, "_index") ||
                          json_object_get(attrs, "column-order")))
            return read_dataframe(r, rel, attrs, name, depth, out, err);
        return read_dict(r, rel, name, depth, out, err);
    }
    if (streq(enc, "dict"))
        return read_dict(r, rel, name, depth, out, err);
    if (streq(enc, "dataframe"))
        return read_dataframe(r, rel, attrs, name, depth, out, err);
    if (streq(enc, "categorical"))
        return read_categorical(r, rel, attrs, name, out, err);
    if (streq(enc, "csr_matrix") || streq(enc, "csc_matrix"))
        return read_sparse(r, rel, attrs, streq(enc, "csr_matrix"), name, out, err);
    if (streq(enc, "nullable-integer"))
        return read_nullable(r, rel, attrs, CFS_EL_NULLABLE_INT, name, out, err);
    if (streq(enc, "nullable-boolean"))
        return read_nullable(r, rel, attrs, CFS_EL_NULLABLE_BOOL, name, out, err);
    if (streq(enc, "nullable-string-array"))
        return read_nullable(r, rel, attrs, CFS_EL_NULLABLE_STRING, name, out, err);
    if (streq(enc, "awkward-array"))
        return cfs_err_set(err, "an awkward array, which this version cannot serve yet");
    return misplaced_encoding(enc, true, err);
}

static int read_elem(rd *r, const char *rel, const char *name, int depth, cfs_elem **out,
                     cfs_err *err)
{
    *out = NULL;
    if (++r->nelems > ZAD_MAX_ELEMS)
        return cfs_err_set(err, "the store holds more than %d elements, more than this reader "
                           "accepts", ZAD_MAX_ELEMS);
    if (depth > ZAD_MAX_DEPTH)
        return cfs_err_set(err, "it is nested more than %d levels deep", ZAD_MAX_DEPTH);
    zr_kind kind = zr_node_kind(r->s, rel);
    if (kind == ZR_NONE)
        return cfs_err_set(err, "it is missing");
    json_t *attrs;
    if (zr_attrs(r->s, rel, &attrs, err) < 0)
        return -1;
    char *enc = NULL;
    int rc = zr_attr_string(attrs, "encoding-type", &enc, err);
    if (rc >= 0)
        rc = kind == ZR_GROUP ? read_group(r, rel, attrs, enc, name, depth, out, err)
                              : read_array_elem(r, rel, enc, name, out, err);
    free(enc);
    json_decref(attrs);
    return rc < 0 ? -1 : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The AnnData slots (as h5ad.c) */

static int check_matrix(const cfs_elem *el, uint64_t rows, uint64_t cols, const char *want,
                        cfs_err *err)
{
    uint64_t shape[2];
    if (el->kind == CFS_EL_SPARSE) {
        shape[0] = el->sparse_shape[0];
        shape[1] = el->sparse_shape[1];
    } else if (el->kind == CFS_EL_ARRAY && el->values->ndim == 2 &&
               numeric_dtype(el->values->dtype)) {
        shape[0] = el->values->shape[0];
        shape[1] = el->values->shape[1];
    } else if (el->kind == CFS_EL_ARRAY) {
        return cfs_err_set(err, "it is a %d-d %s array, not a 2-d numeric matrix",
                           el->values->ndim, cfs_dtype_name(el->values->dtype));
    } else {
        return cfs_err_set(err, "it is a %s, not a matrix", cfs_elem_kind_name(el->kind));
    }
    if (shape[0] != rows || shape[1] != cols)
        return cfs_err_set(err, "its shape is %llu x %llu but %s is %llu x %llu", (ull)shape[0],
                           (ull)shape[1], want, (ull)rows, (ull)cols);
    return 0;
}

static int check_axis_entry(const cfs_elem *el, uint64_t rows, const char *axis, cfs_err *err)
{
    uint64_t n;
    bool ok_kind = el->kind == CFS_EL_SPARSE || el->kind == CFS_EL_DATAFRAME ||
                   (el->kind == CFS_EL_ARRAY && el->values->ndim >= 1);
    if (!ok_kind || !elem_rows(el, &n))
        return cfs_err_set(err, "it is a %s, not an array, sparse matrix or dataframe",
                           cfs_elem_kind_name(el->kind));
    if (n != rows)
        return cfs_err_set(err, "it has %llu rows but %s has %llu", (ull)n, axis, (ull)rows);
    return 0;
}

typedef struct slot_rule {
    uint64_t rows, cols;
    bool matrix;
    const char *want;
} slot_rule;

static int read_slot(rd *r, const char *parent, const char *name, const slot_rule *rule,
                     cfs_elem *owner, cfs_err *err)
{
    char *rel = join(parent, name);
    if (!rel)
        return cfs_err_oom(err);
    zr_kind kind = zr_node_kind(r->s, rel);
    if (kind == ZR_NONE) {
        free(rel);
        return 0;
    }
    cfs_elem *slot = elem_new(CFS_EL_DICT, name);
    if (!slot) {
        free(rel);
        return cfs_err_oom(err);
    }
    cfs_err why;
    json_t *attrs = NULL;
    char *enc = NULL;
    char **names = NULL;
    size_t n = 0;
    int rc = 0;
    if (kind != ZR_GROUP)
        rc = cfs_err_set(&why, "it is not a group");
    else if (zr_attrs(r->s, rel, &attrs, &why) < 0 ||
             zr_attr_string(attrs, "encoding-type", &enc, &why) < 0)
        rc = -1;
    else if (enc && !streq(enc, "dict"))
        rc = cfs_err_set(&why, "it has encoding-type '%s', not dict", enc);
    else if (zr_children(r->s, rel, &names, &n, &why) < 0)
        rc = -1;
    json_decref(attrs);
    free(enc);
    if (rc < 0) {
        cfs_elem_free(slot);
        rc = leave_out(r, rel, "the mapping", &why) < 0 ? cfs_err_oom(err) : 0;
        free(rel);
        return rc;
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char *crel = join(rel, names[i]);
        cfs_elem *el = NULL;
        if (!crel) {
            rc = cfs_err_oom(err);
            break;
        }
        if (read_elem(r, crel, names[i], 1, &el, &why) == 0 &&
            (rule->matrix ? check_matrix(el, rule->rows, rule->cols, rule->want, &why)
                          : check_axis_entry(el, rule->rows, rule->want, &why)) == 0) {
            rc = cfs_elem_add_or_free(slot, el, err);
        } else {
            cfs_elem_free(el);
            if (leave_out(r, crel, "the entry", &why) < 0)
                rc = cfs_err_oom(err);
        }
        free(crel);
    }
    zr_names_free(names, n);
    free(rel);
    if (rc < 0) {
        cfs_elem_free(slot);
        return -1;
    }
    return cfs_elem_add_or_free(owner, slot, err);
}

static int read_axis_frame(rd *r, const char *rel, cfs_elem **out, cfs_err *err)
{
    const char *slash = strrchr(rel, '/');
    if (read_elem(r, rel, slash ? slash + 1 : rel, 1, out, err) < 0)
        return -1;
    if ((*out)->kind != CFS_EL_DATAFRAME) {
        cfs_err_set(err, "it is a %s, not a dataframe", cfs_elem_kind_name((*out)->kind));
        cfs_elem_free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

static int read_x(rd *r, const char *rel, const char *name, uint64_t rows, uint64_t cols,
                  const char *want, cfs_elem **out, cfs_err *err)
{
    if (read_elem(r, rel, name, 1, out, err) < 0)
        return -1;
    if (check_matrix(*out, rows, cols, want, err) < 0) {
        cfs_elem_free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

static int read_raw_parts(rd *r, cfs_elem *raw, uint64_t n_obs, cfs_err *err)
{
    cfs_elem *var = NULL, *x = NULL;
    if (zr_node_kind(r->s, "raw/X") == ZR_NONE)
        return cfs_err_set(err, "raw has no X");
    if (zr_node_kind(r->s, "raw/var") == ZR_NONE)
        return cfs_err_set(err, "raw has no var");
    if (read_axis_frame(r, "raw/var", &var, err) < 0)
        return cfs_err_prefix(err, "raw/var");
    uint64_t n_raw_vars = var->index->values->shape[0];
    if (read_x(r, "raw/X", "X", n_obs, n_raw_vars, "n_obs x raw n_vars", &x, err) < 0) {
        cfs_elem_free(var);
        return cfs_err_prefix(err, "raw/X");
    }
    if (cfs_elem_add_or_free(raw, x, err) < 0) {
        cfs_elem_free(var);
        return -1;
    }
    if (cfs_elem_add_or_free(raw, var, err) < 0)
        return -1;
    slot_rule rule = {n_raw_vars, 0, false, "raw/var"};
    return read_slot(r, "raw", "varm", &rule, raw, err);
}

static int read_raw(rd *r, cfs_elem *root, uint64_t n_obs, cfs_err *err)
{
    zr_kind k = zr_node_kind(r->s, "raw");
    if (k == ZR_NONE)
        return 0;
    cfs_err why;
    cfs_elem *raw = elem_new(CFS_EL_RAW, "raw");
    if (!raw)
        return cfs_err_oom(err);
    int rc = k != ZR_GROUP ? cfs_err_set(&why, "it is not a group")
                           : read_raw_parts(r, raw, n_obs, &why);
    if (rc < 0) {
        cfs_elem_free(raw);
        if (why.status == CFS_ENOMEM)
            return cfs_err_oom(err);
        return leave_out(r, "raw", "raw", &why) < 0 ? cfs_err_oom(err) : 0;
    }
    return cfs_elem_add_or_free(root, raw, err);
}

static int read_uns(rd *r, cfs_elem *root, cfs_err *err)
{
    if (zr_node_kind(r->s, "uns") == ZR_NONE)
        return 0;
    cfs_elem *uns = NULL;
    cfs_err why;
    if (read_elem(r, "uns", "uns", 0, &uns, &why) == 0 && uns->kind != CFS_EL_DICT) {
        cfs_err_set(&why, "it is a %s, not a mapping", cfs_elem_kind_name(uns->kind));
        cfs_elem_free(uns);
        uns = NULL;
    }
    if (!uns)
        return leave_out(r, "uns", "uns", &why) < 0 ? cfs_err_oom(err) : 0;
    return cfs_elem_add_or_free(root, uns, err);
}

static int read_root(rd *r, cfs_elem *root, cfs_err *err)
{
    static const char *const axes[2] = {"obs", "var"};
    for (int i = 0; i < 2; i++) {
        cfs_elem *df;
        if (zr_node_kind(r->s, axes[i]) == ZR_NONE)
            return cfs_err_set(err, "it has no %s (AnnData needs obs and var dataframes); "
                               FIX_HINT, axes[i]);
        if (read_axis_frame(r, axes[i], &df, err) < 0)
            return refuse(err, axes[i]);
        if (cfs_elem_add_or_free(root, df, err) < 0)
            return -1;
    }
    r->ds->n_obs = root->children[0]->index->values->shape[0];
    r->ds->n_vars = root->children[1]->index->values->shape[0];
    uint64_t n_obs = r->ds->n_obs, n_vars = r->ds->n_vars;
    if (zr_node_kind(r->s, "X") != ZR_NONE) {
        cfs_elem *x;
        if (read_x(r, "X", "X", n_obs, n_vars, "n_obs x n_vars", &x, err) < 0)
            return refuse(err, "X");
        if (cfs_elem_add_or_free(root, x, err) < 0)
            return -1;
    }
    const slot_rule layers = {n_obs, n_vars, true, "n_obs x n_vars"};
    const slot_rule obsm = {n_obs, 0, false, "obs"}, varm = {n_vars, 0, false, "var"};
    const slot_rule obsp = {n_obs, n_obs, true, "n_obs x n_obs"};
    const slot_rule varp = {n_vars, n_vars, true, "n_vars x n_vars"};
    if (read_slot(r, "", "layers", &layers, root, err) < 0 ||
        read_slot(r, "", "obsm", &obsm, root, err) < 0 ||
        read_slot(r, "", "varm", &varm, root, err) < 0 ||
        read_slot(r, "", "obsp", &obsp, root, err) < 0 ||
        read_slot(r, "", "varp", &varp, root, err) < 0 || read_uns(r, root, err) < 0 ||
        read_raw(r, root, n_obs, err) < 0)
        return -1;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Classification, probe, open */

typedef enum zad_kind { ZAD_MODERN, ZAD_V07, ZAD_OTHER, ZAD_NOT } zad_kind;

/* obs/var of anndata 0.7's layout: a group with _index (and no encoding, or dataframe). */
static bool legacy_frame(const zr_store *s, const char *name)
{
    if (zr_node_kind(s, name) != ZR_GROUP)
        return false;
    json_t *attrs;
    cfs_err ignore;
    if (zr_attrs(s, name, &attrs, &ignore) < 0)
        return false;
    const char *enc = json_string_value(json_object_get(attrs, "encoding-type"));
    bool yes = (!enc || streq(enc, "dataframe")) && json_object_get(attrs, "_index");
    json_decref(attrs);
    return yes;
}

static zad_kind classify(const zr_store *s, char **root_enc, char **root_version)
{
    *root_enc = *root_version = NULL;
    if (zr_node_kind(s, "") != ZR_GROUP)
        return ZAD_NOT;
    json_t *attrs;
    cfs_err ignore;
    if (zr_attrs(s, "", &attrs, &ignore) < 0)
        return ZAD_NOT;
    int rc = zr_attr_string(attrs, "encoding-type", root_enc, &ignore);
    zr_attr_string(attrs, "encoding-version", root_version, &ignore);
    json_decref(attrs);
    if (rc > 0)
        return streq(*root_enc, "anndata") ? ZAD_MODERN : ZAD_OTHER;
    if (rc < 0)
        return ZAD_NOT;
    return legacy_frame(s, "obs") && legacy_frame(s, "var") ? ZAD_V07 : ZAD_NOT;
}

/* Whether the folder's root holds a Zarr metadata file. */
static bool root_metadata_file(const char *dir)
{
    static const char *const names[] = {"zarr.json", ".zgroup", ".zmetadata", NULL};
    bool yes = false;
    for (size_t i = 0; names[i] && !yes; i++) {
        char *p = cfs_path_join(dir, names[i]);
        yes = p && access(p, F_OK) == 0;
        free(p);
    }
    return yes;
}

/* A folder, or a zip whose central directory lists Zarr metadata at its root. */
static bool maybe_store(cfs_probe_input *in)
{
    return cfs_probe_is_dir(in) || zr_zip_probe(in);
}

static int zarr_probe(cfs_probe_input *in)
{
    if (!maybe_store(in))
        return 0;
    zr_store *s;
    cfs_err ignore;
    if (zr_store_open(cfs_probe_path(in), &s, &ignore) < 0)
        /* a folder whose root metadata is damaged: a token bid, so that opening it refuses
         * it with the reason rather than its sub-folders being taken for inputs */
        return cfs_probe_is_dir(in) && root_metadata_file(cfs_probe_path(in)) ? 1 : 0;
    char *enc, *version;
    zad_kind kind = classify(s, &enc, &version);
    free(enc);
    free(version);
    bool group = kind != ZAD_NOT || zr_node_kind(s, "") == ZR_GROUP;
    zr_store_free(s);
    /* Another Zarr group (a MuData store, images) gets a token bid: it is then an input that
     * zarr_open refuses with its reason, listed as such, not silently skipped. */
    return kind == ZAD_MODERN ? 100 : kind == ZAD_V07 ? 90 : group ? 1 : 0;
}

static void store_free(void *reader)
{
    zr_store_free(reader);
}

/* anndata 0.7's layout when the frames are (dataframe 0.1.0 or no encoding), else the modern
 * one: for a root tagged anndata around 0.7's frames (mudata 0.1's modalities) and the global
 * parts of a multimodal store. */
static zad_kind frames_kind(const zr_store *s)
{
    json_t *attrs;
    cfs_err ignore;
    if (!legacy_frame(s, "obs") || zr_attrs(s, "obs", &attrs, &ignore) < 0)
        return ZAD_MODERN;
    const char *version = json_string_value(json_object_get(attrs, "encoding-version"));
    bool old = !version || streq(version, "0.1.0");
    json_decref(attrs);
    return old ? ZAD_V07 : ZAD_MODERN;
}

int cfs_zarr_anndata_read(const char *path, bool global, cfs_dataset **out, cfs_err *err)
{
    *out = NULL;
    zr_store *s;
    if (zr_store_open(path, &s, err) < 0)
        return -1;
    return cfs_zarr_anndata_read_store(s, path, global, out, err);
}

int cfs_zarr_anndata_read_store(zr_store *s, const char *path, bool global, cfs_dataset **out,
                                cfs_err *err)
{
    *out = NULL;
    char *enc, *version;
    zad_kind kind = classify(s, &enc, &version);
    if (kind == ZAD_MODERN || (global && kind == ZAD_OTHER))
        kind = frames_kind(s);
    cfs_dataset *ds = NULL;
    int rc = 0;
    if (kind == ZAD_OTHER)
        rc = cfs_err_set(err, "a Zarr store but not AnnData (its root encoding-type is '%s', "
                         "not 'anndata'); this version reads stores written by anndata", enc);
    else if (kind == ZAD_NOT)
        rc = cfs_err_set(err, "a Zarr store but not AnnData (no anndata encoding on its root, "
                         "no obs/var); write it with anndata (adata.write_zarr) to serve it");
    char fv[128];
    const char *cons = zr_store_consolidated(s) ? ", consolidated" : "";
    const char *zip = zr_store_zipped(s) ? ", in a zip" : "";
    int zv = zr_store_version(s);
    if (kind == ZAD_V07)
        snprintf(fv, sizeof fv, "anndata 0.7 (legacy), Zarr v%d%s%s", zv, cons, zip);
    else
        snprintf(fv, sizeof fv, "anndata %.40s, Zarr v%d%s%s", version ? version : "?", zv,
                 cons, zip);
    free(enc);
    free(version);
    if (rc == 0 && (!(ds = cfs_dataset_new(path)) || !(ds->format_version = strdup(fv)) ||
                    !(ds->root = cfs_elem_new(CFS_EL_ANNDATA, NULL))))
        rc = cfs_err_oom(err);
    if (rc < 0) {
        cfs_dataset_free(ds);
        zr_store_free(s);
        return -1;
    }
    ds->reader = s;
    ds->reader_free = store_free;
    rd r = {.s = s, .ds = ds, .legacy = kind == ZAD_V07};
    if (read_root(&r, ds->root, err) < 0 || (r.legacy && cfs_h5ad_legacy_fixups(ds, err) < 0)) {
        cfs_dataset_free(ds);
        return -1;
    }
    *out = ds;
    return 0;
}

static int zarr_open(const char *path, cfs_dataset **out, cfs_err *err)
{
    return cfs_zarr_anndata_read(path, false, out, err);
}

/* A folder with a .zgroup that no format bids for is best explained here. */
static int zarr_explain(cfs_probe_input *in, cfs_err *err)
{
    if (!maybe_store(in))
        return 0;
    zr_store *s;
    cfs_err why;
    if (zr_store_open(cfs_probe_path(in), &s, &why) < 0) {
        /* a folder may be anything, unless its root holds Zarr metadata; a zip listing Zarr
         * metadata is a store that is damaged; a folder URL is named a store (.zarr, or "/"),
         * and cannot be listed: why it cannot be read (no consolidated metadata) is the reason */
        if (cfs_probe_is_dir(in) && !cfs_is_url(cfs_probe_path(in)) &&
            !root_metadata_file(cfs_probe_path(in)))
            return 0;
        *err = why;
        if (err->status == CFS_EFAIL)
            err->status = CFS_EDAMAGED;
        return -1;
    }
    bool group = zr_node_kind(s, "") == ZR_GROUP;
    bool array = zr_node_kind(s, "") == ZR_ARRAY;
    zr_store_free(s);
    if (array)
        return cfs_err_setc(err, CFS_EREFUSED, "a Zarr array, not an AnnData store; this "
                            "version reads AnnData stores (adata.write_zarr)");
    if (!group)
        return 0;
    cfs_dataset *ds = NULL;
    if (zarr_open(cfs_probe_path(in), &ds, err) < 0) {
        if (err->status == CFS_EFAIL)
            err->status = CFS_EREFUSED;
        return -1;
    }
    cfs_dataset_free(ds);
    return 1;
}

static const char *const zarr_extensions[] = {".zarr", ".zarr.zip", NULL};

const cfs_format cfs_format_zarr = {
    .name = "zarr",
    .summary = "AnnData Zarr v2 and v3 stores (.zarr folders, .zarr.zip; anndata 0.7 and later)",
    .extensions = zarr_extensions,
    .folders = true,
    .reads_urls = true,
    .url_folder_suffixes = zr_url_folder_suffixes,
    .url_folder_version_keys = zr_url_folder_version_keys,
    .probe = zarr_probe,
    .open = zarr_open,
    .explain = zarr_explain,
};
