/*
 * 10x Genomics feature-barcode matrices (.h5): Cell Ranger >= 3 (one /matrix group with a
 * features/ table) and Cell Ranger 1.2-2.x (one group per genome with genes/gene_names).
 *
 * The matrix is CSC over (features x barcodes): its data/indices/indptr are exactly a CSR over
 * (barcodes x features), so X is those three datasets, unread and uncopied. Only the two ends of
 * indptr are read at open to check the structure. var is what scanpy.read_10x_h5 makes of the
 * features (index = symbols, made unique as anndata's var_names_make_unique does; gene_ids,
 * feature_types, genome and every other per-feature dataset as columns); obs index = barcodes.
 *
 * Files that are recognisably something else of the same family (a molecule_info.h5, an
 * h5Seurat file) are claimed by the probe so that they are refused with what to do instead.
 *
 * The whole open runs under the HDF5 lock; arrays keep their dataset ids open afterwards.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup */
#endif

#include "format.h"
#include "h5_array.h"
#include "hdf5_util.h"
#include "names.h"
#include "tenx.h"
#include "utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TENX_FORMAT "10x-h5"
#define TENX_NO_EMBEDDING "has no embedding, so open its outs/ folder"
#define DAMAGED_HINT "re-download the file or re-run Cell Ranger"
#define MOLECULE_INFO_REASON                                                                   \
    "a Cell Ranger molecule_info.h5 (per-molecule data, not a count matrix); open the "        \
    "filtered_feature_bc_matrix.h5 or the outs/ folder instead"
#define H5SEURAT_REASON                                                                        \
    "an h5Seurat file (SeuratDisk); convert it with SeuratDisk::Convert(f, dest = \"h5ad\") "  \
    "or save the Seurat object with saveRDS"

/* Probe bids: above the h5ad fallback (0 for these layouts), below a modern h5ad (100). */
#define BID_MATRIX 95     /* a complete /matrix group, or a genome group of 1.x/2.x */
#define BID_RECOGNISED 80 /* molecule_info.h5 / h5Seurat: ours to refuse */
#define BID_PARTIAL 60    /* a /matrix group missing members: ours to explain */

typedef unsigned long long ull;

typedef enum tenx_kind {
    TENX_NOT,
    TENX_V3,            /* Cell Ranger >= 3: /matrix group */
    TENX_LEGACY,        /* Cell Ranger 1.2-2.x: one group per genome */
    TENX_MOLECULE_INFO, /* per-molecule table: refused */
    TENX_H5SEURAT,      /* SeuratDisk: refused */
} tenx_kind;

static const char *const matrix_members[] = {"barcodes", "data", "indices", "indptr", "shape",
                                             NULL};
static const char *const legacy_members[] = {"barcodes", "data",  "indices",    "indptr",
                                             "shape",    "genes", "gene_names", NULL};

/* ------------------------------------------------------------------------------------------ */
/* Small helpers (all called with the HDF5 lock held) */

/* What loc/name is: H5I_GROUP, H5I_DATASET, or H5I_BADID if absent, unopenable or a link to
 * another file (never followed). */
static H5I_type_t child_type(hid_t loc, const char *name)
{
    if (H5Lexists(loc, name, H5P_DEFAULT) <= 0)
        return H5I_BADID;
    H5L_info_t li;
    if (H5Lget_info(loc, name, &li, H5P_DEFAULT) < 0 ||
        (li.type != H5L_TYPE_HARD && li.type != H5L_TYPE_SOFT))
        return H5I_BADID;
    hid_t obj = H5Oopen(loc, name, H5P_DEFAULT);
    if (obj < 0)
        return H5I_BADID;
    H5I_type_t t = H5Iget_type(obj);
    H5Oclose(obj);
    return t == H5I_GROUP || t == H5I_DATASET ? t : H5I_BADID;
}

static bool has_dataset(hid_t loc, const char *name)
{
    return child_type(loc, name) == H5I_DATASET;
}

static bool has_group(hid_t loc, const char *name)
{
    return child_type(loc, name) == H5I_GROUP;
}

static bool has_all_datasets(hid_t grp, const char *const *names)
{
    for (size_t i = 0; names[i]; i++)
        if (!has_dataset(grp, names[i]))
            return false;
    return true;
}

static hid_t group_open(hid_t loc, const char *name)
{
    return has_group(loc, name) ? H5Gopen2(loc, name, H5P_DEFAULT) : -1;
}

/* A reason that does not yet say what to do gets the damaged-file advice. Returns -1. */
static int with_hint(cfs_err *err)
{
    if (strstr(err->msg, "; "))
        return -1;
    char reason[sizeof err->msg];
    snprintf(reason, sizeof reason, "%s", err->msg);
    return cfs_err_set(err, "%s; " DAMAGED_HINT, reason);
}

/* One element of a 1-d integer array as uint64; negative values are refused. */
static int read_uint(const cfs_array *arr, uint64_t i, const char *what, uint64_t *out,
                     cfs_err *err)
{
    unsigned char buf[8] = {0};
    uint64_t one = 1;
    if (cfs_array_read(arr, &i, &one, buf, err) < 0) {
        cfs_err_prefix(err, "%s cannot be read", what);
        return with_hint(err);
    }
    size_t size = cfs_dtype_size(arr->dtype);
    uint64_t v = 0;
    for (size_t k = 0; k < size; k++)
        v |= (uint64_t)buf[k] << (8 * k);
    bool negative = cfs_dtype_is_signed(arr->dtype) &&
                    (size < 8 ? (v >> (8 * size - 1)) != 0 : (int64_t)v < 0);
    if (negative)
        return cfs_err_set(err, "%s[%llu] is negative (a damaged matrix); " DAMAGED_HINT, what,
                           (ull)i);
    *out = v;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Classification */

/* Root groups of a 1.x/2.x file that hold a whole genome's matrix, in name order (h5py's and
 * scanpy's order). Other root members (PyTables leave stray datasets) are ignored. */
static int legacy_genomes(hid_t file, char ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    char **names;
    size_t nn;
    cfs_err ignore;
    if (cfs_h5_group_names(file, &names, &nn, &ignore) < 0)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < nn; i++) {
        hid_t g = group_open(file, names[i]);
        bool genome = g >= 0 && has_all_datasets(g, legacy_members);
        if (g >= 0)
            H5Gclose(g);
        if (genome)
            names[k++] = names[i];
        else
            free(names[i]);
    }
    if (k == 0) {
        free(names);
        return 0;
    }
    *out = names;
    *n = k;
    return 0;
}

static bool is_molecule_info(hid_t file)
{
    return (has_dataset(file, "barcode_idx") && has_dataset(file, "feature_idx")) ||
           (has_dataset(file, "barcode") && has_dataset(file, "gene") &&
            has_dataset(file, "reads"));
}

static bool is_h5seurat(hid_t file)
{
    return H5Aexists(file, "active.assay") > 0 && H5Aexists(file, "version") > 0 &&
           has_group(file, "assays") && child_type(file, "cell.names") != H5I_BADID;
}

/* genomes (TENX_LEGACY only) is filled when asked for. */
static tenx_kind classify(hid_t file, char ***genomes, size_t *ngenomes)
{
    if (genomes) {
        *genomes = NULL;
        *ngenomes = 0;
    }
    if (has_group(file, "matrix"))
        return TENX_V3;
    /* An AnnData or MuData file (anndata >= 0.8 marks its root) is none of these; asking each
     * of its groups whether it is a genome was a sixth of opening a small h5ad. */
    if (H5Aexists(file, "encoding-type") > 0)
        return TENX_NOT;
    char **g = NULL;
    size_t ng = 0;
    if (legacy_genomes(file, &g, &ng) == 0 && ng > 0) {
        if (genomes) {
            *genomes = g;
            *ngenomes = ng;
        } else {
            cfs_h5_names_free(g, ng);
        }
        return TENX_LEGACY;
    }
    if (is_molecule_info(file))
        return TENX_MOLECULE_INFO;
    if (is_h5seurat(file))
        return TENX_H5SEURAT;
    return TENX_NOT;
}

/* ------------------------------------------------------------------------------------------ */
/* The matrix (shared by both layouts) */

typedef struct matrix_parts {
    cfs_array *barcodes, *data, *indices, *indptr;
    uint64_t n_features, n_barcodes;
} matrix_parts;

static void matrix_parts_free(matrix_parts *m)
{
    cfs_array_unref(m->barcodes);
    cfs_array_unref(m->data);
    cfs_array_unref(m->indices);
    cfs_array_unref(m->indptr);
    memset(m, 0, sizeof *m);
}

/* loc/name as a 1-d array; the reason names prefix/name. */
static int open_1d(hid_t loc, const char *prefix, const char *name, cfs_array **out,
                   cfs_err *err)
{
    if (cfs_h5_array_open(loc, name, out, err) < 0) {
        cfs_err_prefix(err, "%s/%s", prefix, name);
        return with_hint(err);
    }
    if ((*out)->ndim != 1) {
        int nd = (*out)->ndim;
        cfs_array_unref(*out);
        *out = NULL;
        return cfs_err_set(err, "%s/%s is %d-d, not 1-d; " DAMAGED_HINT, prefix, name, nd);
    }
    return 0;
}

static bool numeric(cfs_dtype t)
{
    return t != CFS_STRING && t != CFS_COMPOUND;
}

static int matrix_shape(hid_t grp, const char *prefix, matrix_parts *m, cfs_err *err)
{
    cfs_array *shape;
    if (open_1d(grp, prefix, "shape", &shape, err) < 0)
        return -1;
    int rc = 0;
    char what[256];
    snprintf(what, sizeof what, "%s/shape", prefix);
    if (!cfs_dtype_is_integer(shape->dtype) || shape->shape[0] != 2)
        rc = cfs_err_set(err, "%s is not two integers (features, barcodes); " DAMAGED_HINT,
                         what);
    else if (read_uint(shape, 0, what, &m->n_features, err) < 0 ||
             read_uint(shape, 1, what, &m->n_barcodes, err) < 0)
        rc = -1;
    else if (m->n_features > CFS_H5_MAX_AXIS || m->n_barcodes > CFS_H5_MAX_AXIS)
        rc = cfs_err_set(err, "%s claims %llu features x %llu barcodes, beyond the %llu this "
                         "reader accepts (a corrupt header?); " DAMAGED_HINT, what,
                         (ull)m->n_features, (ull)m->n_barcodes, (ull)CFS_H5_MAX_AXIS);
    cfs_array_unref(shape);
    return rc;
}

static int matrix_arrays(hid_t grp, const char *prefix, matrix_parts *m, cfs_err *err)
{
    if (open_1d(grp, prefix, "barcodes", &m->barcodes, err) < 0 ||
        open_1d(grp, prefix, "data", &m->data, err) < 0 ||
        open_1d(grp, prefix, "indices", &m->indices, err) < 0 ||
        open_1d(grp, prefix, "indptr", &m->indptr, err) < 0)
        return -1;
    if (m->barcodes->dtype != CFS_STRING)
        return cfs_err_set(err, "%s/barcodes holds %s, not strings; " DAMAGED_HINT, prefix,
                           cfs_dtype_name(m->barcodes->dtype));
    if (!numeric(m->data->dtype))
        return cfs_err_set(err, "%s/data holds %s, not numbers; " DAMAGED_HINT, prefix,
                           cfs_dtype_name(m->data->dtype));
    if (!cfs_dtype_is_integer(m->indices->dtype) || !cfs_dtype_is_integer(m->indptr->dtype))
        return cfs_err_set(err, "%s/indices (%s) or %s/indptr (%s) are not integers; "
                           DAMAGED_HINT, prefix, cfs_dtype_name(m->indices->dtype), prefix,
                           cfs_dtype_name(m->indptr->dtype));
    return 0;
}

/* Lengths against the shape, and indptr's two ends (two tiny reads, never the matrix). */
static int matrix_consistent(const char *prefix, const matrix_parts *m, cfs_err *err)
{
    uint64_t nbc = m->barcodes->shape[0], nptr = m->indptr->shape[0];
    uint64_t nnz = m->data->shape[0], nind = m->indices->shape[0];
    if (nbc != m->n_barcodes)
        return cfs_err_set(err, "%s/shape says %llu features x %llu barcodes but %s/barcodes "
                           "holds %llu (a damaged matrix); " DAMAGED_HINT, prefix,
                           (ull)m->n_features, (ull)m->n_barcodes, prefix, (ull)nbc);
    if (nptr != m->n_barcodes + 1)
        return cfs_err_set(err, "%s/indptr has %llu entries but %llu barcodes need %llu (a "
                           "damaged matrix); " DAMAGED_HINT, prefix, (ull)nptr,
                           (ull)m->n_barcodes, (ull)(m->n_barcodes + 1));
    if (nind != nnz)
        return cfs_err_set(err, "%s/data holds %llu entries but %s/indices %llu (a damaged "
                           "matrix); " DAMAGED_HINT, prefix, (ull)nnz, prefix, (ull)nind);
    char what[256];
    snprintf(what, sizeof what, "%s/indptr", prefix);
    uint64_t first, last;
    if (read_uint(m->indptr, 0, what, &first, err) < 0 ||
        read_uint(m->indptr, nptr - 1, what, &last, err) < 0)
        return -1;
    if (first != 0)
        return cfs_err_set(err, "%s starts at %llu, not 0 (a damaged matrix); " DAMAGED_HINT,
                           what, (ull)first);
    if (last > nnz)
        return cfs_err_set(err, "%s runs to %llu, past the %llu entries of %s/data and "
                           "%s/indices (a damaged or truncated matrix); " DAMAGED_HINT, what,
                           (ull)last, (ull)nnz, prefix, prefix);
    if (last < nnz)
        return cfs_err_set(err, "%s ends at %llu but %s/data holds %llu entries (a damaged "
                           "matrix); " DAMAGED_HINT, what, (ull)last, prefix, (ull)nnz);
    return 0;
}

static int read_matrix(hid_t grp, const char *prefix, const char *const *members,
                       matrix_parts *m, cfs_err *err)
{
    memset(m, 0, sizeof *m);
    for (size_t i = 0; members[i]; i++)
        if (!has_dataset(grp, members[i]))
            return cfs_err_set(err, "a 10x matrix without %s/%s (an incomplete or damaged "
                               "file); " DAMAGED_HINT, prefix, members[i]);
    if (matrix_shape(grp, prefix, m, err) < 0 || matrix_arrays(grp, prefix, m, err) < 0 ||
        matrix_consistent(prefix, m, err) < 0) {
        matrix_parts_free(m);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Elements */

/* A dataframe whose index is the given string array (ownership passes). */
static cfs_elem *frame_new(const char *name, cfs_array *index)
{
    cfs_elem *df = cfs_elem_new(CFS_EL_DATAFRAME, name);
    if (!df) {
        cfs_array_unref(index);
        return NULL;
    }
    if (!(df->index = cfs_elem_from_array(CFS_EL_ARRAY, "_index", index)) ||
        !(df->index_name = strdup("_index"))) {
        cfs_elem_free(df);
        return NULL;
    }
    return df;
}

/* The symbols read whole and made unique (anndata's var_names_make_unique), as an in-memory
 * string array. */
static int unique_names(const cfs_array *names, const char *what, cfs_array **out, cfs_err *err)
{
    uint64_t n = names->shape[0], start = 0;
    char **buf = calloc(n ? (size_t)n : 1, sizeof *buf);
    if (!buf)
        return cfs_err_oom(err);
    if (cfs_array_read(names, &start, &n, buf, err) < 0) {
        free(buf);
        cfs_err_prefix(err, "%s cannot be read", what);
        return with_hint(err);
    }
    size_t changed;
    if (cfs_names_make_unique(buf, (size_t)n, &changed) < 0 ||
        !(*out = cfs_array_from_memory(CFS_STRING, 1, &n, buf))) {
        cfs_strings_free(buf, (size_t)n);
        free(buf);
        return cfs_err_oom(err);
    }
    return 0;
}

/* A per-row column read from loc/src as column `name` of df, or left out with its reason
 * (under the store path `<frame>/<name>`). Fails only on allocation failure. */
static int add_column(cfs_dataset *ds, cfs_elem *df, hid_t loc, const char *prefix,
                      const char *src, const char *name, uint64_t nrows, const char *rows_what,
                      cfs_err *err)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", df->name, name);
    cfs_array *a = NULL;
    cfs_err why;
    bool ok = false;
    H5I_type_t t = child_type(loc, src);
    if (t == H5I_GROUP) {
        cfs_err_set(&why, "%s/%s is a group, not a column of one value per %s", prefix, src,
                    rows_what);
    } else if (t != H5I_DATASET) {
        cfs_err_set(&why, "%s/%s cannot be opened (a link to another file, which is not "
                    "followed, or a dangling link)", prefix, src);
    } else if (cfs_h5_array_open(loc, src, &a, &why) < 0) {
        cfs_err_prefix(&why, "%s/%s", prefix, src);
    } else if (a->dtype == CFS_COMPOUND || a->ndim != 1) {
        cfs_err_set(&why, "%s/%s is a %d-d %s array, not a column", prefix, src, a->ndim,
                    cfs_dtype_name(a->dtype));
    } else if (a->shape[0] != nrows) {
        cfs_err_set(&why, "%s/%s has %llu values but there are %llu %ss", prefix, src,
                    (ull)a->shape[0], (ull)nrows, rows_what);
    } else {
        ok = true;
    }
    if (ok)
        return cfs_elem_add_or_free(df, cfs_elem_from_array(CFS_EL_ARRAY, name, a), err);
    cfs_array_unref(a);
    if (cfs_dataset_leave_out(ds, path, "%s; the column was not read", why.msg) < 0)
        return cfs_err_oom(err);
    return 0;
}

/* obs: barcodes, and (probe matrices) filtered_barcodes as scanpy reads it. */
static int build_obs(cfs_dataset *ds, hid_t grp, const char *prefix, matrix_parts *m,
                     cfs_err *err)
{
    cfs_elem *obs = frame_new("obs", cfs_array_ref(m->barcodes));
    if (!obs)
        return cfs_err_oom(err);
    if (child_type(grp, "filtered_barcodes") != H5I_BADID &&
        add_column(ds, obs, grp, prefix, "filtered_barcodes", "filtered_barcodes",
                   m->n_barcodes, "barcode", err) < 0) {
        cfs_elem_free(obs);
        return -1;
    }
    return cfs_elem_add_or_free(ds->root, obs, err);
}

static int build_x(cfs_dataset *ds, matrix_parts *m, cfs_err *err)
{
    cfs_elem *x = cfs_elem_new(CFS_EL_SPARSE, "X");
    if (!x)
        return cfs_err_oom(err);
    x->values = cfs_array_ref(m->data);
    x->aux = cfs_array_ref(m->indices);
    x->indptr = cfs_array_ref(m->indptr);
    x->csr = true; /* CSC over (features x barcodes) == CSR over (barcodes x features) */
    x->sparse_shape[0] = m->n_barcodes;
    x->sparse_shape[1] = m->n_features;
    return cfs_elem_add_or_free(ds->root, x, err);
}

/* var's index: symbols from grp/src, one per feature, made unique. */
static int var_frame(hid_t grp, const char *prefix, const char *src, uint64_t n_features,
                     cfs_elem **out, cfs_err *err)
{
    cfs_array *names, *unique;
    if (!has_dataset(grp, src))
        return cfs_err_set(err, "a 10x matrix without %s/%s (the feature names); " DAMAGED_HINT,
                           prefix, src);
    if (open_1d(grp, prefix, src, &names, err) < 0)
        return -1;
    int rc = 0;
    char what[256];
    snprintf(what, sizeof what, "%s/%s", prefix, src);
    if (names->dtype != CFS_STRING)
        rc = cfs_err_set(err, "%s holds %s, not strings; " DAMAGED_HINT, what,
                         cfs_dtype_name(names->dtype));
    else if (names->shape[0] != n_features)
        rc = cfs_err_set(err, "%s holds %llu names but the matrix has %llu features (a damaged "
                         "matrix); " DAMAGED_HINT, what, (ull)names->shape[0], (ull)n_features);
    else
        rc = unique_names(names, what, &unique, err);
    cfs_array_unref(names);
    if (rc < 0)
        return -1;
    if (!(*out = frame_new("var", unique)))
        return cfs_err_oom(err);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Cell Ranger >= 3 */

/* features/ datasets that are not further var columns (scanpy's list). */
static bool feature_special(const char *name)
{
    static const char *const special[] = {"name", "feature_type", "id", "gene_id",
                                          "_all_tag_keys", NULL};
    for (size_t i = 0; special[i]; i++)
        if (strcmp(name, special[i]) == 0)
            return true;
    return false;
}

static int v3_columns(cfs_dataset *ds, cfs_elem *var, hid_t feat, uint64_t n, cfs_err *err)
{
    const char *prefix = "matrix/features";
    /* scanpy: probe matrices (a gene_id column) have id = probe ids. */
    bool probes = child_type(feat, "gene_id") != H5I_BADID;
    struct {
        const char *src, *name;
    } fixed[] = {
        {probes ? "gene_id" : "id", "gene_ids"},
        {probes ? "id" : NULL, "probe_ids"},
        {"feature_type", "feature_types"},
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (fixed[i].src && H5Lexists(feat, fixed[i].src, H5P_DEFAULT) > 0 &&
            add_column(ds, var, feat, prefix, fixed[i].src, fixed[i].name, n, "feature", err) < 0)
            return -1;
    char **names;
    size_t nn;
    if (cfs_h5_group_names(feat, &names, &nn, err) < 0)
        return cfs_err_prefix(err, "%s", prefix);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < nn; i++) {
        if (feature_special(names[i]))
            continue;
        char *name = cfs_text_to_utf8(names[i], strlen(names[i]));
        if (!name)
            rc = cfs_err_oom(err);
        else if (cfs_elem_child(var, name))
            rc = cfs_dataset_leave_out(ds, "var", "%s/%s would be a second var column '%s'; "
                                       "the column was not read", prefix, name, name) < 0
                     ? cfs_err_oom(err) : 0;
        else
            rc = add_column(ds, var, feat, prefix, names[i], name, n, "feature", err);
        free(name);
    }
    cfs_h5_names_free(names, nn);
    return rc;
}

static int open_v3(cfs_dataset *ds, hid_t file, cfs_err *err)
{
    hid_t g = H5Gopen2(file, "matrix", H5P_DEFAULT);
    if (g < 0)
        return cfs_err_set(err, "its /matrix group cannot be opened; " DAMAGED_HINT);
    matrix_parts m;
    hid_t feat = -1;
    cfs_elem *var = NULL;
    int rc = read_matrix(g, "matrix", matrix_members, &m, err);
    if (rc == 0 && (feat = group_open(g, "features")) < 0)
        rc = cfs_err_set(err, "a 10x matrix without its matrix/features group (the feature "
                         "names and ids); " DAMAGED_HINT);
    if (rc == 0)
        rc = var_frame(feat, "matrix/features", "name", m.n_features, &var, err);
    if (rc == 0)
        rc = v3_columns(ds, var, feat, m.n_features, err);
    if (rc == 0) {
        ds->n_obs = m.n_barcodes;
        ds->n_vars = m.n_features;
        rc = build_obs(ds, g, "matrix", &m, err);
    }
    if (rc == 0) {
        rc = cfs_elem_add_or_free(ds->root, var, err);
        var = NULL;
    }
    if (rc == 0)
        rc = build_x(ds, &m, err);
    cfs_elem_free(var);
    if (feat >= 0)
        H5Gclose(feat);
    H5Gclose(g);
    matrix_parts_free(&m);
    if (rc == 0 && !(ds->format_version = strdup("Cell Ranger >= 3 (matrix)")))
        rc = cfs_err_oom(err);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Cell Ranger 1.2-2.x */

static int open_legacy(cfs_dataset *ds, hid_t file, char **genomes, size_t ngenomes,
                       cfs_err *err)
{
    /* One matrix per genome over its own barcodes; scanpy reads one. The first (name order, as
     * h5py and scanpy list them) is served, the others are listed as left out. */
    const char *genome = genomes[0];
    char *gname = cfs_text_to_utf8(genome, strlen(genome));
    if (!gname)
        return cfs_err_oom(err);
    hid_t g = H5Gopen2(file, genome, H5P_DEFAULT);
    if (g < 0) {
        cfs_err_set(err, "its genome group /%s cannot be opened; " DAMAGED_HINT, gname);
        free(gname);
        return -1;
    }
    matrix_parts m;
    cfs_elem *var = NULL;
    int rc = read_matrix(g, gname, legacy_members, &m, err);
    if (rc == 0)
        rc = var_frame(g, gname, "gene_names", m.n_features, &var, err);
    if (rc == 0)
        rc = add_column(ds, var, g, gname, "genes", "gene_ids", m.n_features, "feature", err);
    if (rc == 0) {
        ds->n_obs = m.n_barcodes;
        ds->n_vars = m.n_features;
        rc = build_obs(ds, g, gname, &m, err);
    }
    if (rc == 0) {
        rc = cfs_elem_add_or_free(ds->root, var, err);
        var = NULL;
    }
    if (rc == 0)
        rc = build_x(ds, &m, err);
    cfs_elem_free(var);
    H5Gclose(g);
    matrix_parts_free(&m);
    for (size_t i = 1; rc == 0 && i < ngenomes; i++) {
        char *other = cfs_text_to_utf8(genomes[i], strlen(genomes[i]));
        char element[300];
        snprintf(element, sizeof element, "genome %s", other ? other : "?");
        if (!other ||
            cfs_dataset_leave_out(ds, element, "a Cell Ranger 1.x/2.x file holds one matrix per "
                                  "genome and only the first, '%s', is served; to serve '%s', "
                                  "write it alone (e.g. scanpy.read_10x_h5(f, genome='%s')"
                                  ".write_h5ad(...))", gname, other, other) < 0)
            rc = cfs_err_oom(err);
        free(other);
    }
    char fv[300];
    snprintf(fv, sizeof fv, "Cell Ranger 1.2-2 (genome %s)", gname);
    if (rc == 0 && !(ds->format_version = strdup(fv)))
        rc = cfs_err_oom(err);
    free(gname);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Probe, open */

static int tenx_bid(hid_t file, void *ctx)
{
    (void)ctx;
    switch (classify(file, NULL, NULL)) {
    case TENX_V3: {
        hid_t g = H5Gopen2(file, "matrix", H5P_DEFAULT);
        int bid = g >= 0 && has_all_datasets(g, matrix_members) ? BID_MATRIX : BID_PARTIAL;
        if (g >= 0)
            H5Gclose(g);
        return bid;
    }
    case TENX_LEGACY: return BID_MATRIX;
    case TENX_MOLECULE_INFO:
    case TENX_H5SEURAT: return BID_RECOGNISED;
    case TENX_NOT: break;
    }
    return 0;
}

static int tenx_probe(cfs_probe_input *in)
{
    return cfs_h5_probe(in, tenx_bid, NULL);
}

static int build(const char *path, hid_t file, tenx_kind kind, char **genomes, size_t ngenomes,
                 cfs_dataset **out, cfs_err *err)
{
    cfs_dataset *ds = cfs_dataset_new(path);
    if (!ds || !(ds->root = cfs_elem_new(CFS_EL_ANNDATA, NULL))) {
        cfs_dataset_free(ds);
        return cfs_err_oom(err);
    }
    int rc = kind == TENX_V3 ? open_v3(ds, file, err)
                             : open_legacy(ds, file, genomes, ngenomes, err);
    if (rc < 0) {
        cfs_dataset_free(ds);
        return -1;
    }
    *out = ds;
    return 0;
}

static int open_locked(const char *path, cfs_dataset **out, cfs_err *err)
{
    hid_t file = cfs_h5_input_open(path, err);
    if (file < 0)
        return -1;
    char **genomes;
    size_t ngenomes;
    tenx_kind kind = classify(file, &genomes, &ngenomes);
    int rc;
    switch (kind) {
    case TENX_V3:
    case TENX_LEGACY:
        rc = build(path, file, kind, genomes, ngenomes, out, err);
        break;
    case TENX_MOLECULE_INFO: rc = cfs_err_set(err, MOLECULE_INFO_REASON); break;
    case TENX_H5SEURAT: rc = cfs_err_set(err, H5SEURAT_REASON); break;
    default:
        rc = cfs_err_set(err, "an HDF5 file but not a 10x Genomics matrix (no /matrix group and "
                         "no genome group with barcodes, data, indices, indptr, shape, genes "
                         "and gene_names); open the Cell Ranger filtered_feature_bc_matrix.h5");
        break;
    }
    H5Fclose(file);
    cfs_h5_names_free(genomes, ngenomes);
    return rc;
}

int cfs_tenx_open(const char *path, cfs_dataset **out, cfs_err *err)
{
    *out = NULL;
    cfs_h5_lock();
    int rc = open_locked(path, out, err);
    cfs_h5_unlock();
    return rc;
}

/* A .h5 alone: served, but without an embedding; Cellucid's advice says where one is. The
 * outs/ reader calls cfs_tenx_open directly and gives its own (it has the projections). */
static int tenx_open(const char *path, cfs_dataset **out, cfs_err *err)
{
    if (cfs_tenx_open(path, out, err) < 0)
        return -1;
    if (((*out)->no_embedding_hint = strdup(TENX_NO_EMBEDDING)))
        return 0;
    cfs_dataset_free(*out);
    *out = NULL;
    return cfs_err_oom(err);
}

static const char *const tenx_extensions[] = {".hdf5", ".h5", ".he5", NULL};

const cfs_format cfs_format_tenx = {
    .name = TENX_FORMAT,
    .summary = "10x Genomics feature-barcode matrices (.h5, Cell Ranger 1.2 and later)",
    .extensions = tenx_extensions,
    .container = "HDF5",
    .probe = tenx_probe,
    .peek_probe = cfs_h5_peek_probe,
    .open = tenx_open,
};
