/*
 * AnnData .h5ad: builds the dataset model from metadata. Every element is dispatched on its
 * encoding-type attribute, as anndata's own reader does; elements without one are read the way
 * anndata reads them (datasets as arrays, groups as dicts, h5sparse groups as sparse). Files
 * written before anndata 0.8 (no encoding on the root: anndata 0.7, anndata <= 0.6 and
 * SeuratDisk's Convert()) are read with the legacy rules of h5ad_legacy.h, so they give the
 * model of the modern file of the same data.
 *
 * The whole open runs under the HDF5 lock; arrays keep their dataset ids open afterwards.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup */
#endif

#include "format.h"
#include "h5ad.h"
#include "array_views.h"
#include "h5_array.h"
#include "h5ad_legacy.h"
#include "h5_types.h"
#include "hdf5_util.h"
#include "path.h"
#include "utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A pathological uns (or a link cycle) must not take an open hostage. */
#define H5AD_MAX_DEPTH 64
#define H5AD_MAX_ELEMS 200000

#define FIX_HINT "re-write the file with anndata >= 0.8 (anndata.read_h5ad(f).write_h5ad(f2))"

/* What wrote the file, from its root (classify). */
typedef enum h5ad_kind {
    H5AD_MODERN,    /* root encoding-type anndata */
    H5AD_V07,       /* anndata 0.7: no root encoding, obs/var dataframe groups */
    H5AD_SEURAT,    /* SeuratDisk's Convert(): the 0.7 layout, categories without references */
    H5AD_V06,       /* anndata <= 0.6: obs/var record datasets */
    H5AD_NOROOT,    /* no root encoding, but dataframes of a later encoding-version */
    H5AD_OTHER,     /* another root encoding (MuData, ...) */
    H5AD_NOT,       /* HDF5, but nothing AnnData-like */
} h5ad_kind;

typedef struct rd {
    cfs_dataset *ds;
    bool legacy;    /* written before anndata 0.8 */
    size_t nelems;
    cfs_h5_objkey open_groups[H5AD_MAX_DEPTH + 2]; /* the groups being read, outermost first */
    int nopen;
} rd;

typedef unsigned long long ull;

/* ------------------------------------------------------------------------------------------ */
/* Small helpers */

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

/* "parent/name" with the name made valid UTF-8 (it ends up in messages and JSON). An empty
 * name (a column-order or _index entry of "") keeps its '/' ("obs/"). */
static char *path_join(const char *parent, const char *raw_name)
{
    char *name = cfs_text_to_utf8(raw_name, strlen(raw_name));
    if (!name || *name || !parent || !*parent) {
        char *out = name ? cfs_path_join(parent, name) : NULL;
        free(name);
        return out;
    }
    free(name);
    char *out = malloc(strlen(parent) + 2);
    if (out)
        sprintf(out, "%s/", parent);
    return out;
}

static bool streq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

/* what: "the column", "the entry", ... ; the reason comes first, as in "left out obs/x: ...". */
static int leave_out(rd *r, const char *path, const char *what, const cfs_err *why)
{
    return cfs_dataset_leave_out(r->ds, path, "%s; %s was not read", why->msg, what);
}

/* A refusal of the whole file: "what: reason; what to do". Reasons that already say what to
 * do (they carry a "; ") are not given a second hint. */
static int refuse(cfs_err *err, const char *what)
{
    char reason[sizeof err->msg];
    snprintf(reason, sizeof reason, "%s", err->msg);
    if (strstr(reason, "; "))
        return cfs_err_set(err, "%s: %s", what, reason);
    return cfs_err_set(err, "%s: %s; " FIX_HINT, what, reason);
}

/* Opens loc/name as an object, refusing links that lead out of the file. */
static hid_t object_open(hid_t loc, const char *name, cfs_err *err)
{
    if (H5Lexists(loc, name, H5P_DEFAULT) <= 0) {
        cfs_err_set(err, "it is missing");
        return -1;
    }
    H5L_info_t li;
    if (H5Lget_info(loc, name, &li, H5P_DEFAULT) < 0) {
        cfs_err_set(err, "its link cannot be read");
        return -1;
    }
    if (li.type != H5L_TYPE_HARD && li.type != H5L_TYPE_SOFT) {
        cfs_err_set(err, "it is a link to another file; such links are not followed");
        return -1;
    }
    hid_t obj = H5Oopen(loc, name, H5P_DEFAULT);
    if (obj < 0)
        cfs_err_set(err, "it cannot be opened (a dangling link?)");
    return obj;
}

/* Reads one integer element of a 1-d integer array as uint64 (sparse indptr ends). */
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
    if (cfs_dtype_is_signed(arr->dtype) && size < 8 && (v >> (8 * size - 1)))
        return cfs_err_set(err, "indptr[%llu] is negative", (ull)i);
    if (cfs_dtype_is_signed(arr->dtype) && size == 8 && (int64_t)v < 0)
        return cfs_err_set(err, "indptr[%llu] is negative", (ull)i);
    *out = v;
    return 0;
}

static bool numeric_dtype(cfs_dtype t)
{
    return t != CFS_STRING && t != CFS_COMPOUND;
}

/* Rows (first-axis length) of an element, and whether it has any. */
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

/* ------------------------------------------------------------------------------------------ */
/* Element readers */

static int read_elem(rd *r, hid_t loc, const char *name, const char *path, int depth,
                     cfs_elem **out, cfs_err *err);

static int open_array(hid_t grp, const char *name, cfs_array **out, cfs_err *err)
{
    if (cfs_h5_array_open(grp, name, out, err) < 0)
        return -1;
    return 0;
}

static int need_1d(const cfs_array *a, const char *what, cfs_err *err)
{
    if (a->ndim != 1)
        return cfs_err_set(err, "its %s are %d-d, not 1-d", what, a->ndim);
    return 0;
}

/* --- datasets --- */

static const char *const dataset_encodings[] = {
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

/* An encoding-type this object cannot carry: a clearer reason than "unknown" when it is a
 * known encoding on the wrong kind of object. */
static int misplaced_encoding(const char *enc, bool is_group, cfs_err *err)
{
    if (listed(is_group ? dataset_encodings : group_encodings, enc))
        return cfs_err_set(err, "encoding-type '%s' belongs on a %s, but this is a %s", enc,
                           is_group ? "dataset" : "group", is_group ? "group" : "dataset");
    return cfs_err_set(err, "unknown encoding-type '%s'", enc);
}

/* Does the array fit what its encoding-type promises? */
static int check_dataset_encoding(const char *enc, const cfs_array *a, cfs_err *err)
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
    if (streq(enc, "array") && a->dtype == CFS_COMPOUND)
        return cfs_err_set(err, "encoding-type 'array' but it holds records");
    return 0;
}

/* anndata's h5ad.read_dataset, for a dataset without encoding in a legacy file: a 1-element
 * array of fixed-length strings is a scalar (writers before 0.7 stored scalars so). */
static bool legacy_scalar_string(hid_t obj, const cfs_array *a)
{
    if (a->dtype != CFS_STRING || a->ndim != 1 || a->shape[0] != 1)
        return false;
    hid_t t = H5Dget_type(obj);
    bool fixed = t >= 0 && H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) == 0;
    if (t >= 0)
        H5Tclose(t);
    return fixed;
}

static int read_dataset(rd *r, hid_t loc, hid_t obj, const char *enc, const char *name,
                        cfs_elem **out, cfs_err *err)
{
    if (streq(enc, "null") || cfs_h5_dataset_is_null(obj)) {
        *out = elem_new(CFS_EL_NULL, name);
        return *out ? 0 : cfs_err_oom(err);
    }
    if (enc && !listed(dataset_encodings, enc))
        return misplaced_encoding(enc, false, err);
    cfs_array *arr;
    if (open_array(loc, name, &arr, err) < 0)
        return -1;
    if (check_dataset_encoding(enc, arr, err) < 0) {
        cfs_array_unref(arr);
        return -1;
    }
    if (!enc && r->legacy && legacy_scalar_string(obj, arr))
        arr->ndim = 0; /* its one element, read with an empty selection */
    cfs_elem_kind kind = arr->dtype == CFS_COMPOUND ? CFS_EL_RECARRAY
                         : arr->ndim == 0           ? CFS_EL_SCALAR
                                                    : CFS_EL_ARRAY;
    cfs_elem *el = elem_new(kind, name);
    if (!el) {
        cfs_array_unref(arr);
        return cfs_err_oom(err);
    }
    el->values = arr;
    *out = el;
    return 0;
}

/* --- dict --- */

static int read_dict(rd *r, hid_t grp, const char *name, const char *path, int depth,
                     cfs_elem **out, cfs_err *err)
{
    char **names;
    size_t n;
    if (cfs_h5_group_names(grp, &names, &n, err) < 0)
        return -1;
    cfs_elem *dict = elem_new(CFS_EL_DICT, name);
    int rc = dict ? 0 : cfs_err_oom(err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char *cpath = path_join(path, names[i]);
        cfs_elem *child = NULL;
        cfs_err why;
        if (!cpath)
            rc = cfs_err_oom(err);
        else if (read_elem(r, grp, names[i], cpath, depth + 1, &child, &why) == 0)
            rc = cfs_elem_add_or_free(dict, child, err);
        else if (r->nelems > H5AD_MAX_ELEMS)
            rc = cfs_err_set(err, "%s", why.msg); /* the whole mapping is cut, not each entry */
        else if (leave_out(r, cpath, "the entry", &why) < 0)
            rc = cfs_err_oom(err);
        free(cpath);
    }
    cfs_h5_names_free(names, n);
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

static int read_index_elem(rd *r, hid_t grp, const char *idx, const char *path, int depth,
                           cfs_elem **out, cfs_err *err)
{
    char *ipath = path_join(path, idx);
    if (!ipath)
        return cfs_err_oom(err);
    cfs_elem *index = NULL;
    int rc = read_elem(r, grp, idx, ipath, depth + 1, &index, err);
    free(ipath);
    if (rc < 0)
        return cfs_err_prefix(err, "its index '%s'", idx);
    if (r->legacy && index->kind == CFS_EL_ARRAY && index->values->ndim == 1 &&
        cfs_dtype_is_integer(index->values->dtype) &&
        !(index->values = cfs_view_new(CFS_VIEW_FORMAT, index->values))) {
        /* anndata makes an integer index strings ("Transforming to str index") */
        cfs_elem_free(index);
        return cfs_err_oom(err);
    }
    bool strings = (index->kind == CFS_EL_ARRAY || index->kind == CFS_EL_NULLABLE_STRING) &&
                   index->values->dtype == CFS_STRING && index->values->ndim == 1;
    if (!strings) {
        cfs_elem_free(index);
        return cfs_err_set(err, "its index '%s' is not a 1-d string array", idx);
    }
    uint64_t rows = index->values->shape[0];
    if (rows > CFS_H5_MAX_AXIS) {
        cfs_elem_free(index);
        return cfs_err_set(err, "its index claims %llu rows, more than the %llu this reader "
                           "accepts (a corrupt header?)", (ull)rows, (ull)CFS_H5_MAX_AXIS);
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

/* A column of a dataframe of anndata 0.7's layout (encoding-version 0.1.0, or SeuratDisk's):
 * integer codes whose categories are elsewhere (h5ad_legacy.h) become a categorical. */
static int legacy_column(hid_t grp, const char *name, cfs_elem **col, cfs_err *err)
{
    cfs_array *cats;
    bool ordered;
    int rc = cfs_h5ad_column_categories(grp, name, &cats, &ordered, err);
    if (rc <= 0)
        return rc;
    cfs_elem *c = *col;
    if (c->kind != CFS_EL_ARRAY || c->values->ndim != 1) {
        cfs_array_unref(cats);
        return cfs_err_set(err, "it has categories but is a %s, not a column of integer codes",
                           cfs_elem_kind_name(c->kind));
    }
    if (!cfs_dtype_is_integer(c->values->dtype)) {
        cfs_array_unref(cats);
        return cfs_err_set(err, "it has categories but its codes are %s, not integers",
                           cfs_dtype_name(c->values->dtype));
    }
    cfs_elem *cat = elem_new(CFS_EL_CATEGORICAL, name);
    cfs_elem *cel = cfs_elem_from_array(CFS_EL_ARRAY, "categories", cats);
    if (!cat || !cel) {
        cfs_elem_free(cat);
        cfs_elem_free(cel);
        return cfs_err_oom(err);
    }
    cat->values = cfs_view_codes(c->values, cel->values->shape[0]); /* pandas' codes type */
    c->values = NULL;
    cat->categories = cel;
    cat->ordered = ordered;
    if (!cat->values) {
        cfs_elem_free(cat);
        return cfs_err_oom(err);
    }
    cfs_elem_free(c);
    *col = cat;
    return 0;
}

/* R's logical (hdf5r's FALSE/TRUE/NA enum, as SeuratDisk writes a logical metadata column),
 * read as its codes: a nullable boolean, as pandas' "boolean" column anndata writes for it. */
static int r_logical_column(hid_t grp, const char *name, cfs_elem **col, cfs_err *err)
{
    hid_t d = H5Dopen2(grp, name, H5P_DEFAULT);
    hid_t t = d >= 0 ? H5Dget_type(d) : -1;
    bool logical = t >= 0 && cfs_h5_is_r_logical_enum(t);
    if (t >= 0)
        H5Tclose(t);
    if (d >= 0)
        H5Dclose(d);
    cfs_elem *c = *col;
    if (!logical || c->kind != CFS_EL_ARRAY || c->values->ndim != 1)
        return 0;
    cfs_elem *nb = elem_new(CFS_EL_NULLABLE_BOOL, name);
    if (!nb || !(nb->values = cfs_view_equals(c->values, 1)) ||
        !(nb->aux = cfs_view_equals(c->values, 2))) {
        cfs_elem_free(nb);
        return cfs_err_oom(err);
    }
    cfs_elem_free(c);
    *col = nb;
    return 0;
}

/* One column: read, checked, added, or left out with its reason. Fails only on OOM. */
static int read_column(rd *r, hid_t grp, cfs_elem *df, char **cols, size_t i, const char *path,
                       int depth, uint64_t nrows, bool v010, cfs_err *err)
{
    char *cpath = path_join(path, cols[i]);
    if (!cpath)
        return cfs_err_oom(err);
    cfs_elem *col = NULL;
    cfs_err why;
    int rc = 0;
    bool ok = false;
    if (listed_before(cols, i))
        cfs_err_set(&why, "it is listed twice in column-order");
    else
        ok = read_elem(r, grp, cols[i], cpath, depth + 1, &col, &why) == 0 &&
             (!v010 || legacy_column(grp, cols[i], &col, &why) == 0) &&
             r_logical_column(grp, cols[i], &col, &why) == 0 &&
             check_column(col, nrows, &why) == 0;
    if (ok) {
        rc = cfs_elem_add_or_free(df, col, err);
    } else {
        cfs_elem_free(col);
        if (leave_out(r, cpath, "the column", &why) < 0)
            rc = cfs_err_oom(err);
    }
    free(cpath);
    return rc;
}

/* SeuratDisk's reader takes the row names from the `_index` attribute, else an `_index` or an
 * `index` child; a legacy file's frame is read the same way. */
static int legacy_index_name(hid_t grp, char **idx, cfs_err *err)
{
    static const char *const names[] = {"_index", "index"};
    for (int i = 0; i < 2; i++)
        if (H5Lexists(grp, names[i], H5P_DEFAULT) > 0)
            return (*idx = strdup(names[i])) ? 1 : cfs_err_oom(err);
    return 0;
}

/* A legacy frame without column-order (SeuratDisk writes one; be lenient): its children but
 * the index and __categories, in name order. */
static int legacy_column_order(hid_t grp, const char *idx, char ***cols, size_t *ncols,
                               cfs_err *err)
{
    if (cfs_h5_group_names(grp, cols, ncols, err) < 0)
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

/* *v010: anndata 0.7's dataframe (encoding-version 0.1.0, or a legacy file's frame), whose
 * categorical columns are codes with their categories elsewhere. */
static int dataframe_attrs(rd *r, hid_t grp, char **idx, char ***cols, size_t *ncols, bool *v010,
                           cfs_err *err)
{
    char *version = NULL;
    int vrc = cfs_h5_attr_string(grp, "encoding-version", &version, err);
    if (vrc < 0)
        return -1;
    *v010 = streq(version, "0.1.0") || (r->legacy && vrc == 0);
    free(version);
    int rc = cfs_h5_attr_string(grp, "_index", idx, err);
    if (rc == 0 && r->legacy)
        rc = legacy_index_name(grp, idx, err);
    if (rc == 0)
        return cfs_err_set(err, "the dataframe has no _index attribute");
    if (rc < 0)
        return -1;
    rc = cfs_h5_attr_strings(grp, "column-order", cols, ncols, err);
    if (rc == 0 && r->legacy)
        rc = legacy_column_order(grp, *idx, cols, ncols, err);
    if (rc == 0)
        cfs_err_set(err, "the dataframe has no column-order attribute");
    if (rc <= 0) {
        free(*idx);
        *idx = NULL;
        return -1;
    }
    return 0;
}

static int read_dataframe(rd *r, hid_t grp, const char *name, const char *path, int depth,
                          cfs_elem **out, cfs_err *err)
{
    char *idx = NULL, **cols = NULL;
    size_t ncols = 0;
    bool v010;
    if (dataframe_attrs(r, grp, &idx, &cols, &ncols, &v010, err) < 0)
        return -1;
    cfs_elem *df = elem_new(CFS_EL_DATAFRAME, name);
    int rc = df ? 0 : cfs_err_oom(err);
    if (rc == 0)
        rc = read_index_elem(r, grp, idx, path, depth, &df->index, err);
    if (rc == 0 && !(df->index_name = strdup(idx)))
        rc = cfs_err_oom(err);
    uint64_t nrows = rc == 0 ? df->index->values->shape[0] : 0;
    for (size_t i = 0; rc == 0 && i < ncols; i++)
        rc = read_column(r, grp, df, cols, i, path, depth, nrows, v010, err);
    free(idx);
    cfs_h5_names_free(cols, ncols);
    if (rc < 0) {
        cfs_elem_free(df);
        return -1;
    }
    *out = df;
    return 0;
}

/* --- categorical --- */

static int read_categorical(hid_t grp, const char *name, cfs_elem **out, cfs_err *err)
{
    cfs_array *codes = NULL, *cats = NULL;
    bool ordered = false;
    int rc = open_array(grp, "codes", &codes, err);
    if (rc == 0 && (rc = need_1d(codes, "codes", err)) == 0 && !cfs_dtype_is_integer(codes->dtype))
        rc = cfs_err_set(err, "its codes are %s, not integers", cfs_dtype_name(codes->dtype));
    if (rc == 0)
        rc = open_array(grp, "categories", &cats, err);
    if (rc == 0 && (rc = need_1d(cats, "categories", err)) == 0 && cats->dtype == CFS_COMPOUND)
        rc = cfs_err_set(err, "its categories are records");
    if (rc == 0 && cfs_h5_attr_bool(grp, "ordered", &ordered, err) < 0)
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

static int read_nullable(hid_t grp, cfs_elem_kind kind, const char *name, cfs_elem **out,
                         cfs_err *err)
{
    cfs_array *values = NULL, *mask = NULL;
    char *na = NULL;
    int rc = open_array(grp, "values", &values, err);
    if (rc == 0 && (rc = need_1d(values, "values", err)) == 0)
        rc = nullable_values_ok(kind, values, err);
    if (rc == 0)
        rc = open_array(grp, "mask", &mask, err);
    if (rc == 0 && (rc = need_1d(mask, "mask values", err)) == 0 && mask->dtype != CFS_BOOL)
        rc = cfs_err_set(err, "its mask is %s, not bool", cfs_dtype_name(mask->dtype));
    if (rc == 0 && mask->shape[0] != values->shape[0])
        rc = cfs_err_set(err, "its mask has %llu entries but its values %llu",
                         (ull)mask->shape[0], (ull)values->shape[0]);
    if (rc == 0 && kind == CFS_EL_NULLABLE_STRING &&
        cfs_h5_attr_string(grp, "na-value", &na, err) < 0)
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

typedef struct sparse_parts {
    cfs_array *data, *indices, *indptr;
    uint64_t shape[2];
    bool csr;
} sparse_parts;

static void sparse_parts_free(sparse_parts *p)
{
    cfs_array_unref(p->data);
    cfs_array_unref(p->indices);
    cfs_array_unref(p->indptr);
}

static int sparse_shape(hid_t grp, const char *attr, sparse_parts *p, cfs_err *err)
{
    int rc = cfs_h5_attr_shape2(grp, attr, p->shape, err);
    if (rc == 0)
        return cfs_err_set(err, "it has no %s attribute", attr);
    if (rc < 0)
        return -1;
    if (p->shape[0] > CFS_H5_MAX_AXIS || p->shape[1] > CFS_H5_MAX_AXIS)
        return cfs_err_set(err, "its shape attribute claims %llu x %llu, beyond the %llu rows or "
                           "columns this reader accepts (a corrupt header?)", (ull)p->shape[0],
                           (ull)p->shape[1], (ull)CFS_H5_MAX_AXIS);
    return 0;
}

static int sparse_arrays(hid_t grp, sparse_parts *p, cfs_err *err)
{
    if (open_array(grp, "data", &p->data, err) < 0 || need_1d(p->data, "data", err) < 0 ||
        open_array(grp, "indices", &p->indices, err) < 0 ||
        need_1d(p->indices, "indices", err) < 0 || open_array(grp, "indptr", &p->indptr, err) < 0 ||
        need_1d(p->indptr, "indptr values", err) < 0)
        return -1;
    if (!numeric_dtype(p->data->dtype))
        return cfs_err_set(err, "its data are %s, not numbers", cfs_dtype_name(p->data->dtype));
    if (!cfs_dtype_is_integer(p->indices->dtype) || !cfs_dtype_is_integer(p->indptr->dtype))
        return cfs_err_set(err, "its indices (%s) or indptr (%s) are not integers",
                           cfs_dtype_name(p->indices->dtype), cfs_dtype_name(p->indptr->dtype));
    return 0;
}

/* Structure only: lengths, and indptr's two ends (two tiny reads, never the matrix). */
static int sparse_consistent(const sparse_parts *p, cfs_err *err)
{
    uint64_t major = p->csr ? p->shape[0] : p->shape[1];
    uint64_t nptr = p->indptr->shape[0], nnz = p->data->shape[0];
    if (nptr != major + 1)
        return cfs_err_set(err, "its indptr has %llu entries but a %llu x %llu %s needs %llu",
                           (ull)nptr, (ull)p->shape[0], (ull)p->shape[1],
                           p->csr ? "csr_matrix" : "csc_matrix", (ull)(major + 1));
    if (p->indices->shape[0] != nnz)
        return cfs_err_set(err, "its data has %llu entries but its indices %llu", (ull)nnz,
                           (ull)p->indices->shape[0]);
    uint64_t first, last;
    if (read_index(p->indptr, 0, &first, err) < 0 || read_index(p->indptr, nptr - 1, &last, err) < 0)
        return -1;
    if (first != 0 || last != nnz)
        return cfs_err_set(err, "its indptr runs from %llu to %llu but should run from 0 to the "
                           "%llu stored entries", (ull)first, (ull)last, (ull)nnz);
    return 0;
}

/* shape_attr: "shape", or "h5sparse_shape" for the h5sparse groups of anndata < 0.7. */
static int read_sparse(hid_t grp, bool csr, const char *shape_attr, const char *name,
                       cfs_elem **out, cfs_err *err)
{
    sparse_parts p = {.csr = csr};
    cfs_elem *el = NULL;
    if (sparse_shape(grp, shape_attr, &p, err) < 0 || sparse_arrays(grp, &p, err) < 0 ||
        sparse_consistent(&p, err) < 0 ||
        (!(el = elem_new(CFS_EL_SPARSE, name)) && cfs_err_oom(err))) {
        sparse_parts_free(&p);
        return cfs_err_prefix(err, "%s", csr ? "csr_matrix" : "csc_matrix");
    }
    el->values = p.data;
    el->aux = p.indices;
    el->indptr = p.indptr;
    el->csr = csr;
    el->sparse_shape[0] = p.shape[0];
    el->sparse_shape[1] = p.shape[1];
    *out = el;
    return 0;
}

/* The sparse groups of anndata's h5sparse (before 0.7): h5sparse_format "csr" or "csc" and
 * h5sparse_shape; anndata reads them in any file. */
static int read_h5sparse(hid_t grp, const char *name, cfs_elem **out, cfs_err *err)
{
    char *fmt = NULL;
    if (cfs_h5_attr_string(grp, "h5sparse_format", &fmt, err) < 0)
        return -1;
    bool csr = streq(fmt, "csr"), csc = streq(fmt, "csc");
    if (!csr && !csc)
        cfs_err_set(err, "a sparse matrix whose h5sparse_format is '%s', not csr or csc",
                    fmt ? fmt : "");
    free(fmt);
    if (!csr && !csc)
        return -1;
    return read_sparse(grp, csr, "h5sparse_shape", name, out, err);
}

/* --- groups --- */

static int read_group(rd *r, hid_t grp, const char *enc, const char *name, const char *path,
                      int depth, cfs_elem **out, cfs_err *err)
{
    if (!enc) {
        if (cfs_h5_has_attr(grp, "h5sparse_format"))
            return read_h5sparse(grp, name, out, err);
        if (r->legacy && (cfs_h5_has_attr(grp, "_index") || cfs_h5_has_attr(grp, "column-order")))
            return read_dataframe(r, grp, name, path, depth, out, err);
        return read_dict(r, grp, name, path, depth, out, err);
    }
    if (streq(enc, "dict"))
        return read_dict(r, grp, name, path, depth, out, err);
    if (streq(enc, "dataframe"))
        return read_dataframe(r, grp, name, path, depth, out, err);
    if (streq(enc, "categorical"))
        return read_categorical(grp, name, out, err);
    if (streq(enc, "csr_matrix") || streq(enc, "csc_matrix"))
        return read_sparse(grp, streq(enc, "csr_matrix"), "shape", name, out, err);
    if (streq(enc, "nullable-integer"))
        return read_nullable(grp, CFS_EL_NULLABLE_INT, name, out, err);
    if (streq(enc, "nullable-boolean"))
        return read_nullable(grp, CFS_EL_NULLABLE_BOOL, name, out, err);
    if (streq(enc, "nullable-string-array"))
        return read_nullable(grp, CFS_EL_NULLABLE_STRING, name, out, err);
    if (streq(enc, "awkward-array"))
        return cfs_err_set(err, "an awkward array, which this version cannot serve yet");
    return misplaced_encoding(enc, true, err);
}

/* h5py follows soft and hard links, so a group may contain itself: refuse a group that is
 * already being read further up instead of recursing until the depth limit. */
static int read_group_guarded(rd *r, hid_t grp, const char *enc, const char *name,
                              const char *path, int depth, cfs_elem **out, cfs_err *err)
{
    cfs_h5_objkey key;
    if (cfs_h5_object_key(grp, &key) < 0)
        return cfs_err_set(err, "its object header cannot be read");
    for (int i = 0; i < r->nopen; i++)
        if (cfs_h5_objkey_eq(&key, &r->open_groups[i]))
            return cfs_err_set(err, "it links back to a group that contains it (a cycle)");
    if (r->nopen >= (int)(sizeof r->open_groups / sizeof r->open_groups[0]))
        return cfs_err_set(err, "it is nested more than %d levels deep", H5AD_MAX_DEPTH);
    r->open_groups[r->nopen++] = key;
    int rc = read_group(r, grp, enc, name, path, depth, out, err);
    r->nopen--;
    return rc;
}

static int read_elem(rd *r, hid_t loc, const char *name, const char *path, int depth,
                     cfs_elem **out, cfs_err *err)
{
    *out = NULL;
    if (++r->nelems > H5AD_MAX_ELEMS)
        return cfs_err_set(err, "the file holds more than %d elements, more than this reader "
                           "accepts", H5AD_MAX_ELEMS);
    if (depth > H5AD_MAX_DEPTH)
        return cfs_err_set(err, "it is nested more than %d levels deep", H5AD_MAX_DEPTH);
    hid_t obj = object_open(loc, name, err);
    if (obj < 0)
        return -1;
    char *enc = NULL;
    int rc = cfs_h5_attr_string(obj, "encoding-type", &enc, err);
    if (rc >= 0) {
        H5I_type_t t = H5Iget_type(obj);
        if (t == H5I_GROUP)
            rc = read_group_guarded(r, obj, enc, name, path, depth, out, err);
        else if (t == H5I_DATASET)
            rc = read_dataset(r, loc, obj, enc, name, out, err);
        else
            rc = cfs_err_set(err, "it is a named datatype, not data");
    }
    free(enc);
    H5Oclose(obj);
    return rc < 0 ? -1 : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The AnnData slots */

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

/* What a mapping slot (layers, obsm, ...) accepts for each of its entries. */
typedef struct slot_rule {
    uint64_t rows, cols;
    bool matrix;         /* layers/obsp/varp: rows x cols; obsm/varm: rows only */
    const char *want;    /* "n_obs x n_vars", or the axis name */
} slot_rule;

static int check_slot_entry(const cfs_elem *el, const slot_rule *rule, cfs_err *err)
{
    return rule->matrix ? check_matrix(el, rule->rows, rule->cols, rule->want, err)
                        : check_axis_entry(el, rule->rows, rule->want, err);
}

static int read_slot_entry(rd *r, hid_t grp, const char *name, const char *path,
                           const slot_rule *rule, cfs_elem *slot, cfs_err *err)
{
    char *cpath = path_join(path, name);
    if (!cpath)
        return cfs_err_oom(err);
    cfs_elem *el = NULL;
    cfs_err why;
    int rc = 0;
    if (read_elem(r, grp, name, cpath, 1, &el, &why) == 0 && check_slot_entry(el, rule, &why) == 0)
        rc = cfs_elem_add_or_free(slot, el, err);
    else {
        cfs_elem_free(el);
        if (leave_out(r, cpath, "the entry", &why) < 0)
            rc = cfs_err_oom(err);
    }
    free(cpath);
    return rc;
}

static int read_slot_group(rd *r, hid_t grp, const char *path, const slot_rule *rule,
                           cfs_elem *slot, cfs_err *err)
{
    char *enc = NULL;
    if (cfs_h5_attr_string(grp, "encoding-type", &enc, err) < 0)
        return -1;
    bool dict = !enc || streq(enc, "dict");
    if (!dict)
        cfs_err_set(err, "it has encoding-type '%s', not dict", enc);
    free(enc);
    if (!dict)
        return -1;
    char **names;
    size_t n;
    if (cfs_h5_group_names(grp, &names, &n, err) < 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = read_slot_entry(r, grp, names[i], path, rule, slot, err);
    cfs_h5_names_free(names, n);
    return rc;
}

static bool is_record_dataset(hid_t obj)
{
    if (H5Iget_type(obj) != H5I_DATASET)
        return false;
    hid_t t = H5Dget_type(obj);
    bool yes = t >= 0 && H5Tget_class(t) == H5T_COMPOUND && !cfs_h5_is_complex(t);
    if (t >= 0)
        H5Tclose(t);
    return yes;
}

/* A mapping slot of the root or raw: absent is fine; unreadable as a whole is left out. */
static int read_slot(rd *r, hid_t parent, const char *name, const char *path,
                     const slot_rule *rule, cfs_elem *owner, cfs_err *err)
{
    if (H5Lexists(parent, name, H5P_DEFAULT) <= 0)
        return 0;
    cfs_elem *slot = elem_new(CFS_EL_DICT, name);
    if (!slot)
        return cfs_err_oom(err);
    cfs_err why;
    hid_t grp = object_open(parent, name, &why);
    int rc = 0;
    if (grp >= 0 && r->legacy && !rule->matrix && is_record_dataset(grp)) {
        H5Oclose(grp); /* anndata <= 0.6: one entry per field */
        if (cfs_h5ad_record_mapping(parent, name, path, rule->rows, r->ds, slot, err) < 0) {
            cfs_elem_free(slot);
            return -1;
        }
        return cfs_elem_add_or_free(owner, slot, err);
    }
    if (grp >= 0 && H5Iget_type(grp) != H5I_GROUP)
        rc = cfs_err_set(&why, "it is not a group");
    else if (grp < 0 || read_slot_group(r, grp, path, rule, slot, &why) < 0)
        rc = -1;
    if (grp >= 0)
        H5Oclose(grp);
    if (rc < 0) {
        cfs_elem_free(slot);
        return leave_out(r, path, "the mapping", &why) < 0 ? cfs_err_oom(err) : 0;
    }
    return cfs_elem_add_or_free(owner, slot, err);
}

/* obs or var (or raw/var): must be a dataframe; its defects refuse the owner. */
static int read_axis_frame(rd *r, hid_t parent, const char *name, const char *path,
                           cfs_elem **out, cfs_err *err)
{
    if (r->legacy) {
        hid_t obj = object_open(parent, name, err);
        if (obj < 0)
            return -1;
        bool rec = is_record_dataset(obj);
        H5Oclose(obj);
        if (rec) /* anndata <= 0.6 */
            return cfs_h5ad_record_frame(parent, name, path, r->ds, out, err);
    }
    if (read_elem(r, parent, name, path, 1, out, err) < 0)
        return -1;
    if ((*out)->kind != CFS_EL_DATAFRAME) {
        cfs_err_set(err, "it is a %s, not a dataframe", cfs_elem_kind_name((*out)->kind));
        cfs_elem_free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

/* Gives el (which the caller still owns) another name: raw.X in the file is X in raw. */
static int rename_elem(cfs_elem *el, const char *name, cfs_err *err)
{
    char *n = strdup(name);
    if (!n)
        return cfs_err_oom(err);
    free(el->name);
    el->name = n;
    return 0;
}

static int read_x(rd *r, hid_t parent, const char *link, const char *path, uint64_t rows,
                  uint64_t cols, const char *want, cfs_elem **out, cfs_err *err)
{
    if (read_elem(r, parent, link, path, 1, out, err) < 0)
        return -1;
    if (check_matrix(*out, rows, cols, want, err) < 0) {
        cfs_elem_free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

/* Where raw's parts are: in the raw group, or (anndata <= 0.6) raw.X, raw.var and raw.varm at
 * the root. */
typedef struct raw_names {
    const char *x, *var, *varm;
} raw_names;

static const raw_names raw_group_names = {"X", "var", "varm"};
static const raw_names raw_root_names = {"raw.X", "raw.var", "raw.varm"};

static int read_raw_parts(rd *r, hid_t grp, const raw_names *nm, cfs_elem *raw, uint64_t n_obs,
                          cfs_err *err)
{
    cfs_elem *var = NULL, *x = NULL;
    bool root = nm == &raw_root_names;
    if (H5Lexists(grp, nm->x, H5P_DEFAULT) <= 0)
        return cfs_err_set(err, "raw has no X");
    if (H5Lexists(grp, nm->var, H5P_DEFAULT) <= 0)
        return cfs_err_set(err, "raw has no var");
    if (read_axis_frame(r, grp, nm->var, root ? "raw.var" : "raw/var", &var, err) < 0)
        return cfs_err_prefix(err, root ? "raw.var" : "raw/var");
    uint64_t n_raw_vars = var->index->values->shape[0];
    if (rename_elem(var, "var", err) < 0)
        return -1;
    if (read_x(r, grp, nm->x, root ? "raw.X" : "raw/X", n_obs, n_raw_vars, "n_obs x raw n_vars",
               &x, err) < 0) {
        cfs_elem_free(var);
        return cfs_err_prefix(err, root ? "raw.X" : "raw/X");
    }
    if (rename_elem(x, "X", err) < 0) {
        cfs_elem_free(x);
        cfs_elem_free(var);
        return -1;
    }
    if (cfs_elem_add_or_free(raw, x, err) < 0) {
        cfs_elem_free(var);
        return -1;
    }
    if (cfs_elem_add_or_free(raw, var, err) < 0)
        return -1;
    slot_rule rule = {n_raw_vars, 0, false, root ? "raw.var" : "raw/var"};
    if (read_slot(r, grp, nm->varm, root ? "raw.varm" : "raw/varm", &rule, raw, err) < 0)
        return -1;
    cfs_elem *varm = root ? cfs_elem_child(raw, nm->varm) : NULL;
    return varm ? rename_elem(varm, "varm", err) : 0;
}

static int read_raw(rd *r, hid_t file, cfs_elem *root, uint64_t n_obs, cfs_err *err)
{
    bool group = H5Lexists(file, "raw", H5P_DEFAULT) > 0;
    bool at_root = r->legacy && (H5Lexists(file, "raw.X", H5P_DEFAULT) > 0 ||
                                 H5Lexists(file, "raw.var", H5P_DEFAULT) > 0);
    if (!group && !at_root)
        return 0;
    cfs_err why;
    cfs_elem *raw = elem_new(CFS_EL_RAW, "raw");
    if (!raw)
        return cfs_err_oom(err);
    hid_t grp = group ? object_open(file, "raw", &why) : -1;
    int rc = 0;
    if (group && at_root)
        rc = cfs_err_set(&why, "the file has both a raw group and anndata 0.6's raw.X/raw.var, "
                         "and anndata refuses such a file");
    else if (at_root)
        rc = read_raw_parts(r, file, &raw_root_names, raw, n_obs, &why);
    else if (grp >= 0 && H5Iget_type(grp) != H5I_GROUP)
        rc = cfs_err_set(&why, "it is not a group");
    else if (grp < 0 || read_raw_parts(r, grp, &raw_group_names, raw, n_obs, &why) < 0)
        rc = -1;
    if (grp >= 0)
        H5Oclose(grp);
    if (rc < 0) {
        cfs_elem_free(raw);
        return leave_out(r, "raw", "raw", &why) < 0 ? cfs_err_oom(err) : 0;
    }
    return cfs_elem_add_or_free(root, raw, err);
}

static int read_uns(rd *r, hid_t file, cfs_elem *root, cfs_err *err)
{
    if (H5Lexists(file, "uns", H5P_DEFAULT) <= 0)
        return 0;
    cfs_elem *uns = NULL;
    cfs_err why;
    if (read_elem(r, file, "uns", "uns", 0, &uns, &why) == 0 && uns->kind != CFS_EL_DICT) {
        cfs_err_set(&why, "it is a %s, not a mapping", cfs_elem_kind_name(uns->kind));
        cfs_elem_free(uns);
        uns = NULL;
    }
    if (!uns)
        return leave_out(r, "uns", "uns", &why) < 0 ? cfs_err_oom(err) : 0;
    return cfs_elem_add_or_free(root, uns, err);
}

static int read_frames(rd *r, hid_t file, cfs_elem *root, cfs_err *err)
{
    static const char *const axes[2] = {"obs", "var"};
    for (int i = 0; i < 2; i++) {
        cfs_elem *df;
        if (H5Lexists(file, axes[i], H5P_DEFAULT) <= 0)
            return cfs_err_set(err, "it has no %s (AnnData needs obs and var dataframes); "
                               FIX_HINT, axes[i]);
        if (read_axis_frame(r, file, axes[i], axes[i], &df, err) < 0)
            return refuse(err, axes[i]);
        if (cfs_elem_add_or_free(root, df, err) < 0)
            return -1;
    }
    r->ds->n_obs = root->children[0]->index->values->shape[0];
    r->ds->n_vars = root->children[1]->index->values->shape[0];
    return 0;
}

static int read_root(rd *r, hid_t file, cfs_elem *root, cfs_err *err)
{
    if (read_frames(r, file, root, err) < 0)
        return -1;
    uint64_t n_obs = r->ds->n_obs, n_vars = r->ds->n_vars;
    if (H5Lexists(file, "X", H5P_DEFAULT) > 0) {
        cfs_elem *x;
        if (read_x(r, file, "X", "X", n_obs, n_vars, "n_obs x n_vars", &x, err) < 0)
            return refuse(err, "X");
        if (cfs_elem_add_or_free(root, x, err) < 0)
            return -1;
    }
    const slot_rule layers = {n_obs, n_vars, true, "n_obs x n_vars"};
    const slot_rule obsm = {n_obs, 0, false, "obs"}, varm = {n_vars, 0, false, "var"};
    const slot_rule obsp = {n_obs, n_obs, true, "n_obs x n_obs"};
    const slot_rule varp = {n_vars, n_vars, true, "n_vars x n_vars"};
    if (read_slot(r, file, "layers", "layers", &layers, root, err) < 0 ||
        read_slot(r, file, "obsm", "obsm", &obsm, root, err) < 0 ||
        read_slot(r, file, "varm", "varm", &varm, root, err) < 0 ||
        read_slot(r, file, "obsp", "obsp", &obsp, root, err) < 0 ||
        read_slot(r, file, "varp", "varp", &varp, root, err) < 0 ||
        read_uns(r, file, root, err) < 0 || read_raw(r, file, root, n_obs, err) < 0)
        return -1;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Classification, probe, open */

/* obs/var as a legacy file has them: a record dataset (anndata <= 0.6: *record), or a group
 * that is a dataframe by its encoding-type or (SeuratDisk, without encodings) its _index or
 * column-order attribute. */
static bool legacy_frame(hid_t file, const char *name, bool *record)
{
    cfs_err ignore;
    hid_t obj = H5Lexists(file, name, H5P_DEFAULT) > 0 ? H5Oopen(file, name, H5P_DEFAULT) : -1;
    if (obj < 0)
        return false;
    bool yes = false;
    if (H5Iget_type(obj) == H5I_GROUP) {
        char *enc = NULL;
        int rc = cfs_h5_attr_string(obj, "encoding-type", &enc, &ignore);
        yes = rc > 0 ? streq(enc, "dataframe")
                     : rc == 0 && (cfs_h5_has_attr(obj, "_index") ||
                                   cfs_h5_has_attr(obj, "column-order"));
        free(enc);
    } else {
        yes = *record = is_record_dataset(obj);
    }
    H5Oclose(obj);
    return yes;
}

/* SeuratDisk's Convert(): a frame without encoding, or a __categories entry whose code column
 * has no categories reference (anndata 0.7 always writes one). */
static bool seurat_frame(hid_t file, const char *name)
{
    hid_t g = H5Oopen(file, name, H5P_DEFAULT);
    if (g < 0)
        return false;
    bool yes = !cfs_h5_has_attr(g, "encoding-type");
    char **names = NULL;
    size_t n = 0;
    cfs_err ignore;
    hid_t cg = !yes && H5Lexists(g, "__categories", H5P_DEFAULT) > 0
                   ? H5Gopen2(g, "__categories", H5P_DEFAULT) : -1;
    if (cg >= 0 && cfs_h5_group_names(cg, &names, &n, &ignore) == 0) {
        for (size_t i = 0; !yes && i < n; i++) {
            hid_t col = H5Lexists(g, names[i], H5P_DEFAULT) > 0
                            ? H5Oopen(g, names[i], H5P_DEFAULT) : -1;
            if (col >= 0) {
                yes = !cfs_h5_has_attr(col, "categories");
                H5Oclose(col);
            }
        }
        cfs_h5_names_free(names, n);
    }
    if (cg >= 0)
        H5Gclose(cg);
    H5Oclose(g);
    return yes;
}

static h5ad_kind classify_frames(hid_t file, char **root_version);

static h5ad_kind classify(hid_t file, char **root_enc, char **root_version)
{
    cfs_err ignore;
    *root_enc = *root_version = NULL;
    int rc = cfs_h5_attr_string(file, "encoding-type", root_enc, &ignore);
    if (rc < 0)
        return H5AD_NOT;
    if (rc > 0) {
        cfs_h5_attr_string(file, "encoding-version", root_version, &ignore);
        if (!streq(*root_enc, "anndata"))
            return H5AD_OTHER;
        /* mudata 0.1 tagged its modalities anndata around anndata 0.7's layout. */
        char *frames = NULL;
        bool v07 = classify_frames(file, &frames) == H5AD_V07;
        free(frames);
        return v07 ? H5AD_V07 : H5AD_MODERN;
    }
    return classify_frames(file, root_version);
}

/* A root without encoding: what its obs and var frames say (*root_version: their version). */
static h5ad_kind classify_frames(hid_t file, char **root_version)
{
    cfs_err ignore;
    bool rec_obs = false, rec_var = false;
    if (!legacy_frame(file, "obs", &rec_obs) || !legacy_frame(file, "var", &rec_var))
        return H5AD_NOT;
    if (rec_obs || rec_var)
        return H5AD_V06;
    if (seurat_frame(file, "obs") || seurat_frame(file, "var"))
        return H5AD_SEURAT;
    char *version = NULL;
    hid_t obs = H5Oopen(file, "obs", H5P_DEFAULT);
    if (obs >= 0) {
        cfs_h5_attr_string(obs, "encoding-version", &version, &ignore);
        H5Oclose(obs);
    }
    h5ad_kind kind = !version || streq(version, "0.1.0") ? H5AD_V07 : H5AD_NOROOT;
    *root_version = version; /* the frames' version, for the label */
    return kind;
}

static bool kind_legacy(h5ad_kind kind)
{
    return kind == H5AD_V07 || kind == H5AD_SEURAT || kind == H5AD_V06 || kind == H5AD_NOROOT;
}

static int h5ad_bid(hid_t file, void *ctx)
{
    (void)ctx;
    char *enc, *version;
    h5ad_kind kind = classify(file, &enc, &version);
    free(enc);
    free(version);
    return kind == H5AD_MODERN ? 100 : kind_legacy(kind) ? 90 : 0;
}

static int h5ad_probe(cfs_probe_input *in)
{
    return cfs_h5_probe(in, h5ad_bid, NULL);
}

static int refuse_kind(h5ad_kind kind, const char *enc, cfs_err *err)
{
    if (kind == H5AD_OTHER)
        return cfs_err_set(err, "an HDF5 file but not AnnData (its root encoding-type is '%s', "
                           "not 'anndata'); this version reads .h5ad files written by anndata",
                           enc);
    return cfs_err_set(err, "an HDF5 file but not AnnData (no anndata encoding on its root, no "
                       "obs/var); write it with anndata (adata.write_h5ad) to serve it");
}

static int build(const char *path, hid_t file, h5ad_kind kind, const char *version,
                 cfs_dataset **out, cfs_err *err)
{
    cfs_dataset *ds = cfs_dataset_new(path);
    char fv[128];
    if (kind == H5AD_V07)
        snprintf(fv, sizeof fv, "anndata 0.7 (legacy)");
    else if (kind == H5AD_SEURAT)
        snprintf(fv, sizeof fv, "SeuratDisk Convert() (anndata 0.7 layout, legacy)");
    else if (kind == H5AD_V06)
        snprintf(fv, sizeof fv, "anndata <= 0.6 (legacy)");
    else if (kind == H5AD_NOROOT)
        snprintf(fv, sizeof fv, "anndata, no root encoding (dataframe %.40s; legacy)", version);
    else
        snprintf(fv, sizeof fv, "anndata %s", version ? version : "?");
    if (!ds || !(ds->format_version = strdup(fv)) ||
        !(ds->root = cfs_elem_new(CFS_EL_ANNDATA, NULL))) {
        cfs_dataset_free(ds);
        return cfs_err_oom(err);
    }
    rd r = {.ds = ds, .legacy = kind_legacy(kind)};
    /* The root counts as open: a link from uns to "/" would otherwise copy the file into uns. */
    if (cfs_h5_object_key(file, &r.open_groups[0]) == 0)
        r.nopen = 1;
    if (read_root(&r, file, ds->root, err) < 0 ||
        (r.legacy && cfs_h5ad_legacy_fixups(ds, err) < 0)) {
        cfs_dataset_free(ds);
        return -1;
    }
    *out = ds;
    return 0;
}

int cfs_h5ad_read_group(const char *source, hid_t loc, bool global, cfs_dataset **out,
                        cfs_err *err)
{
    char *enc, *version;
    h5ad_kind kind = classify(loc, &enc, &version);
    if (global && kind == H5AD_OTHER) {
        /* The global parts of a multimodal file: anndata's elements under another root. */
        free(version);
        version = NULL;
        kind = classify_frames(loc, &version);
        if (kind == H5AD_NOROOT)
            kind = H5AD_MODERN;
    }
    int rc;
    if (kind != H5AD_MODERN && !kind_legacy(kind))
        rc = refuse_kind(kind, enc, err);
    else
        rc = build(source, loc, kind, version, out, err);
    free(enc);
    free(version);
    return rc;
}

static int open_locked(const char *path, cfs_dataset **out, cfs_err *err)
{
    hid_t file = cfs_h5_input_open(path, err);
    if (file < 0)
        return -1;
    int rc = cfs_h5ad_read_group(path, file, false, out, err);
    H5Fclose(file);
    return rc;
}

static int h5ad_open(const char *path, cfs_dataset **out, cfs_err *err)
{
    *out = NULL;
    cfs_h5_lock();
    int rc = open_locked(path, out, err);
    cfs_h5_unlock();
    return rc;
}

/* An HDF5 file no reader bids for is best explained by the h5ad reader's refusal: it says
 * whether the file is damaged, from an older anndata, or simply not AnnData. */
static int h5ad_explain(cfs_probe_input *in, cfs_err *err)
{
    if (cfs_h5_probe_offset(in) < 0)
        return 0;
    cfs_dataset *ds = NULL;
    if (h5ad_open(cfs_probe_path(in), &ds, err) < 0)
        return -1;
    cfs_dataset_free(ds);
    return 1;
}

static const char *const h5ad_extensions[] = {".h5ad", NULL};

const cfs_format cfs_format_h5ad = {
    .name = "h5ad",
    .summary = "AnnData .h5ad files (anndata 0.6 and later, SeuratDisk's Convert())",
    .extensions = h5ad_extensions,
    .container = "HDF5",
    .probe = h5ad_probe,
    .peek_probe = cfs_h5_peek_probe,
    .open = h5ad_open,
    .explain = h5ad_explain,
    .preload = cfs_h5_preload,      /* the library every HDF5 format shares */
};
