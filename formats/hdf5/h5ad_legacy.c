/*
 * Legacy h5ad layouts (see h5ad_legacy.h): anndata 0.7's and SeuratDisk's categorical columns,
 * anndata <= 0.6's record datasets, and the read-time fixes anndata applies to such files.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup */
#endif

#include "h5ad_legacy.h"

#include <stdlib.h>
#include <string.h>

#include "array_views.h"
#include "elems.h"
#include "h5_array.h"
#include "hdf5_util.h"
#include "path.h"
#include "strfmt.h"
#include "utf8.h"

/* ------------------------------------------------------------------------------------------ */
/* anndata 0.7 / SeuratDisk categorical columns */

/* The object the column's `categories` attribute names: an object reference (anndata 0.7's
 * h5ad), or a path relative to the dataframe (0.7's zarr layout, and development versions). */
static hid_t categories_target(hid_t df, hid_t col, cfs_err *err)
{
    hid_t attr = H5Aopen(col, "categories", H5P_DEFAULT);
    hid_t t = attr >= 0 ? H5Aget_type(attr) : -1;
    hid_t target = -1;
    if (t >= 0 && H5Tget_class(t) == H5T_REFERENCE) {
        hobj_ref_t ref;
        if (H5Aread(attr, H5T_STD_REF_OBJ, &ref) < 0 ||
            (target = H5Rdereference2(col, H5P_DEFAULT, H5R_OBJECT, &ref)) < 0)
            cfs_err_set(err, "its categories attribute is a reference that cannot be followed");
    } else if (t >= 0 && H5Tget_class(t) == H5T_STRING) {
        char *p = NULL;
        if (cfs_h5_attr_string(col, "categories", &p, err) > 0) {
            if (H5Lexists(df, p, H5P_DEFAULT) > 0)
                target = H5Oopen(df, p, H5P_DEFAULT);
            if (target < 0)
                cfs_err_set(err, "its categories attribute names '%s', which is missing", p);
        }
        free(p);
    } else {
        cfs_err_set(err, "its categories attribute is neither a reference nor a path");
    }
    if (t >= 0)
        H5Tclose(t);
    if (attr >= 0)
        H5Aclose(attr);
    return target;
}

int cfs_h5ad_column_categories(hid_t df, const char *col, cfs_array **cats, bool *ordered,
                               cfs_err *err)
{
    *cats = NULL;
    *ordered = false;
    hid_t obj = H5Oopen(df, col, H5P_DEFAULT);
    if (obj < 0)
        return 0;
    hid_t target = -1;
    int rc = 0;
    if (H5Aexists(obj, "categories") > 0) {
        if ((target = categories_target(df, obj, err)) < 0)
            rc = -1;
    } else if (H5Lexists(df, "__categories", H5P_DEFAULT) > 0) {
        /* SeuratDisk writes the categories without the reference. */
        hid_t cg = H5Gopen2(df, "__categories", H5P_DEFAULT);
        if (cg >= 0 && H5Lexists(cg, col, H5P_DEFAULT) > 0)
            target = H5Oopen(cg, col, H5P_DEFAULT);
        if (cg >= 0)
            H5Gclose(cg);
    }
    H5Oclose(obj);
    if (rc < 0 || target < 0)
        return rc;
    char where[4096];
    if (H5Iget_type(target) != H5I_DATASET)
        rc = cfs_err_set(err, "its categories are not a dataset");
    else if (H5Iget_name(target, where, sizeof where) <= 0 || strlen(where) >= sizeof where - 1)
        rc = cfs_err_set(err, "its categories have no usable name");
    else if (cfs_h5_attr_bool(target, "ordered", ordered, err) < 0)
        rc = -1;
    else if (cfs_h5_array_open(df, where, cats, err) < 0)
        rc = -1;
    else if ((*cats)->ndim != 1 || (*cats)->dtype == CFS_COMPOUND)
        rc = cfs_err_set(err, "its categories are not a 1-d array");
    H5Oclose(target);
    if (rc < 0) {
        cfs_array_unref(*cats);
        *cats = NULL;
        return cfs_err_prefix(err, "malformed categorical");
    }
    return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* anndata <= 0.6 record datasets */

/* The fields' names (UTF-8) of the compound dataset loc/name; *n = 0 if it has none. */
static int record_fields(hid_t loc, const char *name, char ***out, size_t *n, cfs_err *err)
{
    *out = NULL;
    *n = 0;
    hid_t dset = H5Dopen2(loc, name, H5P_DEFAULT);
    hid_t t = dset >= 0 ? H5Dget_type(dset) : -1;
    int nm = t >= 0 && H5Tget_class(t) == H5T_COMPOUND ? H5Tget_nmembers(t) : -1;
    int rc = 0;
    if (nm < 0)
        rc = cfs_err_set(err, "it is not a record dataset");
    else if (nm > 0 && !(*out = calloc((size_t)nm, sizeof **out)))
        rc = cfs_err_oom(err);
    for (int i = 0; rc == 0 && i < nm; i++) {
        char *raw = H5Tget_member_name(t, (unsigned)i);
        if (!raw) {
            rc = cfs_err_set(err, "a record field has no name");
            break;
        }
        (*out)[i] = cfs_text_to_utf8(raw, strlen(raw));
        H5free_memory(raw);
        if (!(*out)[i])
            rc = cfs_err_oom(err);
        *n = (size_t)i + 1;
    }
    if (t >= 0)
        H5Tclose(t);
    if (dset >= 0)
        H5Dclose(dset);
    if (rc < 0) {
        cfs_h5_names_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

static int leave_field_out(cfs_dataset *ds, const char *path, const char *field, const char *what,
                           const cfs_err *why, cfs_err *err)
{
    char *p = cfs_path_join(path, field);
    int rc = p ? cfs_dataset_leave_out(ds, p, "%s; %s was not read", why->msg, what) : -1;
    free(p);
    return rc < 0 ? cfs_err_oom(err) : 0;
}

int cfs_h5ad_record_frame(hid_t loc, const char *name, const char *path, cfs_dataset *ds,
                          cfs_elem **out, cfs_err *err)
{
    *out = NULL;
    char **fields;
    size_t nf;
    if (record_fields(loc, name, &fields, &nf, err) < 0)
        return -1;
    if (nf == 0) {
        cfs_h5_names_free(fields, nf);
        return cfs_err_set(err, "it is a record dataset without fields (no index)");
    }
    cfs_array *idx = NULL;
    cfs_elem *df = cfs_elem_new(CFS_EL_DATAFRAME, name);
    int rc = df ? 0 : cfs_err_oom(err);
    if (rc == 0 && cfs_h5_field_array_open(loc, name, 0, &idx, err) < 0)
        rc = cfs_err_prefix(err, "its first field '%s' (the index)", fields[0]);
    if (rc == 0 && idx->ndim == 1 && cfs_dtype_is_integer(idx->dtype) &&
        !(idx = cfs_view_new(CFS_VIEW_FORMAT, idx))) /* anndata: "Transforming to str index" */
        rc = cfs_err_oom(err);
    if (rc == 0 && (idx->dtype != CFS_STRING || idx->ndim != 1)) {
        cfs_array_unref(idx);
        rc = cfs_err_set(err, "its first field '%s' (the index) is not strings", fields[0]);
    }
    if (rc == 0 && (!(df->index = cfs_elem_from_array(CFS_EL_ARRAY, fields[0], idx)) ||
                    !(df->index_name = strdup(fields[0]))))
        rc = cfs_err_oom(err);
    for (size_t i = 1; rc == 0 && i < nf; i++) {
        cfs_array *col;
        cfs_err why;
        if (cfs_h5_field_array_open(loc, name, (unsigned)i, &col, &why) < 0)
            rc = leave_field_out(ds, path, fields[i], "the column", &why, err);
        else if (col->ndim != 1) {
            cfs_array_unref(col);
            cfs_err_set(&why, "it holds %llu values a row, not one",
                        (unsigned long long)col->shape[1]);
            rc = leave_field_out(ds, path, fields[i], "the column", &why, err);
        } else
            rc = cfs_elem_add_or_free(df, cfs_elem_from_array(CFS_EL_ARRAY, fields[i], col), err);
    }
    cfs_h5_names_free(fields, nf);
    if (rc < 0) {
        cfs_elem_free(df);
        return -1;
    }
    *out = df;
    return 0;
}

int cfs_h5ad_record_mapping(hid_t loc, const char *name, const char *path, uint64_t rows,
                            cfs_dataset *ds, cfs_elem *slot, cfs_err *err)
{
    char **fields;
    size_t nf;
    cfs_err why;
    if (record_fields(loc, name, &fields, &nf, &why) < 0)
        return cfs_dataset_leave_out(ds, path, "%s; the mapping was not read", why.msg) < 0
                   ? cfs_err_oom(err) : 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < nf; i++) {
        cfs_array *a;
        if (cfs_h5_field_array_open(loc, name, (unsigned)i, &a, &why) < 0) {
            rc = leave_field_out(ds, path, fields[i], "the entry", &why, err);
        } else if (a->shape[0] != rows) {
            cfs_err_set(&why, "it has %llu rows but the axis has %llu",
                        (unsigned long long)a->shape[0], (unsigned long long)rows);
            cfs_array_unref(a);
            rc = leave_field_out(ds, path, fields[i], "the entry", &why, err);
        } else {
            rc = cfs_elem_add_or_free(slot, cfs_elem_from_array(CFS_EL_ARRAY, fields[i], a), err);
        }
    }
    cfs_h5_names_free(fields, nf);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* anndata's read-time fixes */

/* Categories from uns: an array, or a single category written as a scalar. */
static cfs_array *uns_categories(const cfs_elem *el)
{
    if (el->kind == CFS_EL_ARRAY && el->values->ndim == 1 && el->values->dtype != CFS_COMPOUND)
        return cfs_array_ref(el->values);
    if (el->kind != CFS_EL_SCALAR || el->values->ndim != 0)
        return NULL;
    cfs_err ignore;
    size_t es = cfs_array_elem_size(el->values);
    void *buf = calloc(1, es);
    uint64_t zero = 0, one = 1;
    if (!buf || cfs_array_read(el->values, &zero, &one, buf, &ignore) < 0) {
        free(buf);
        return NULL;
    }
    cfs_array *a = cfs_array_from_memory(el->values->dtype, 1, &one, buf);
    if (!a) {
        if (el->values->dtype == CFS_STRING)
            cfs_strings_free(buf, 1);
        free(buf);
    }
    return a;
}

/* anndata's test: every code below the number of categories (and none below -1, which
 * pandas refuses). Reads the codes once. */
static bool codes_fit(const cfs_array *codes, uint64_t ncats)
{
    cfs_err ignore;
    uint64_t n = codes->shape[0], zero = 0;
    void *buf = cfs_elems_alloc(n, cfs_dtype_size(codes->dtype), &ignore);
    if (!buf)
        return false;
    bool ok = cfs_array_read(codes, &zero, &n, buf, &ignore) == 0;
    for (uint64_t i = 0; ok && i < n; i++) {
        bool neg;
        uint64_t v = cfs_elems_int(buf, codes->dtype, (size_t)i, &neg);
        ok = neg ? v <= 1 : v < ncats;
    }
    free(buf);
    return ok;
}

/* Makes frame's column named col categorical over cats if its codes fit. 1 if it did. */
static int to_categorical(cfs_elem *frame, const char *col, cfs_array *cats, cfs_err *err)
{
    for (size_t i = 0; frame && i < frame->nchildren; i++) {
        cfs_elem *c = frame->children[i];
        if (strcmp(c->name, col) != 0)
            continue;
        if (c->kind != CFS_EL_ARRAY || c->values->ndim != 1 ||
            !cfs_dtype_is_integer(c->values->dtype) || !codes_fit(c->values, cats->shape[0]))
            return 0;
        cfs_elem *cat = cfs_elem_new(CFS_EL_CATEGORICAL, col);
        cfs_elem *cel = cfs_elem_from_array(CFS_EL_ARRAY, "categories", cfs_array_ref(cats));
        if (!cat || !cel) {
            cfs_elem_free(cat);
            cfs_elem_free(cel);
            return cfs_err_oom(err);
        }
        cat->values = cfs_view_codes(c->values, cats->shape[0]); /* pandas' codes type */
        c->values = NULL;
        cat->categories = cel;
        frame->children[i] = cat;
        cfs_elem_free(c);
        return cat->values ? 1 : cfs_err_oom(err);
    }
    return 0;
}

/* "<name>_categories" names the column name with every "_categories" taken out, as anndata's
 * _clean_uns does (str.replace). */
static char *category_column(const char *key)
{
    static const char suffix[] = "_categories";
    size_t n = strlen(key), sl = sizeof suffix - 1;
    if (n < sl || strcmp(key + n - sl, suffix) != 0)
        return NULL;
    char *out = malloc(n + 1), *o = out;
    if (!out)
        return NULL;
    for (const char *p = key; *p;) {
        if (strncmp(p, suffix, sl) == 0)
            p += sl;
        else
            *o++ = *p++;
    }
    *o = '\0';
    return out;
}

static int clean_uns(cfs_elem *root, cfs_err *err)
{
    cfs_elem *uns = cfs_elem_child(root, "uns");
    if (!uns || uns->kind != CFS_EL_DICT)
        return 0;
    cfs_elem *frames[2] = {cfs_elem_child(root, "obs"), cfs_elem_child(root, "var")};
    for (size_t i = 0; i < uns->nchildren;) {
        char *col = category_column(uns->children[i]->name);
        cfs_array *cats = col ? uns_categories(uns->children[i]) : NULL;
        int used = 0;
        for (int f = 0; cats && f < 2; f++) {
            int rc = to_categorical(frames[f], col, cats, err);
            if (rc < 0) {
                cfs_array_unref(cats);
                free(col);
                return -1;
            }
            used |= rc;
        }
        cfs_array_unref(cats);
        free(col);
        if (used)
            cfs_elem_remove(uns, uns->children[i]->name);
        else
            i++;
    }
    return 0;
}

/* anndata's _move_adj_mtx: uns/neighbors/{distances,connectivities} to obsp. */
static int move_adjacency(cfs_dataset *ds, cfs_err *err)
{
    static const char *const keys[2] = {"distances", "connectivities"};
    cfs_elem *uns = cfs_elem_child(ds->root, "uns");
    cfs_elem *nb = uns ? cfs_elem_child(uns, "neighbors") : NULL;
    if (!nb || nb->kind != CFS_EL_DICT)
        return 0;
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < nb->nchildren; i++) {
            cfs_elem *m = nb->children[i];
            if (strcmp(m->name, keys[k]) != 0)
                continue;
            uint64_t r, c;
            if (m->kind == CFS_EL_SPARSE) {
                r = m->sparse_shape[0];
                c = m->sparse_shape[1];
            } else if (m->kind == CFS_EL_ARRAY && m->values->ndim == 2) {
                r = m->values->shape[0];
                c = m->values->shape[1];
            } else {
                break;
            }
            if (r != ds->n_obs || c != ds->n_obs)
                break;
            cfs_elem *obsp = cfs_elem_ensure_dict(ds->root, "obsp");
            if (!obsp)
                return cfs_err_oom(err);
            cfs_elem_remove(obsp, keys[k]);
            memmove(&nb->children[i], &nb->children[i + 1],
                    (nb->nchildren - i - 1) * sizeof *nb->children);
            nb->nchildren--;
            if (cfs_elem_add_or_free(obsp, m, err) < 0)
                return -1;
            break;
        }
    }
    return 0;
}

/* The mappings an AnnData always has, empty where the file had nothing (anndata 0.7 writes no
 * group for an empty mapping, 0.8 writes an empty one): the modern file's model has them. */
static int add_missing(cfs_elem *owner, const char *const *names, cfs_err *err)
{
    for (size_t i = 0; owner && names[i]; i++)
        if (!cfs_elem_child(owner, names[i]) &&
            cfs_elem_add_or_free(owner, cfs_elem_new(CFS_EL_DICT, names[i]), err) < 0)
            return -1;
    return 0;
}

int cfs_h5ad_legacy_fixups(cfs_dataset *ds, cfs_err *err)
{
    static const char *const slots[] = {"layers", "obsm", "varm", "obsp", "varp", "uns", NULL};
    static const char *const raw_slots[] = {"varm", NULL};
    if (clean_uns(ds->root, err) < 0 || move_adjacency(ds, err) < 0 ||
        add_missing(ds->root, slots, err) < 0)
        return -1;
    return add_missing(cfs_elem_child(ds->root, "raw"), raw_slots, err);
}
