/*
 * Loom (loompy's HDF5 layout: 3.0.0, 2.0.1 and the older layouts still around) as the dataset
 * model, read the way anndata.read_loom (anndata 0.8) and loompy.connect read it:
 *
 *   /matrix, /layers/<l>     genes x cells, dense   ->  X, layers (cells x genes, through a view
 *                                                        that transposes each hyperslab it reads)
 *   /col_attrs/<a>           one value per cell     ->  obs columns (1-d, or (n, 1)); obsm (2-d);
 *                                                        SCENIC's compound Embedding and
 *                                                        Embeddings_X/_Y pairs -> obsm (n, 2);
 *                                                        other compounds -> an obsm dataframe
 *   /row_attrs/<a>           one value per gene     ->  var, varm (the same rules)
 *   /col_graphs, /col_edges  COO (a, b, w)          ->  obsp (CSR, built at open: graphs are small)
 *   /row_graphs, /row_edges                         ->  varp
 *   /attrs/<g> (3.0), root HDF5 attributes (older)  ->  uns
 *
 * As in anndata.read_loom: X is the layer 'spliced' when there is one (the main matrix is then
 * the layer 'matrix'); obs is indexed by CellID and var by Gene, and the index attribute is not
 * kept as a column. Where those are missing, obs_names/cell_names and var_names/gene_names/
 * Accession are used (anndata.write_loom writes obs_names/var_names), else 0..n-1. Gene names
 * are made unique as anndata's var_names_make_unique does. Strings are unescaped as loompy does
 * (XML character references of loom 2.x's 7-bit strings).
 *
 * Orientation is checked against the attributes: /matrix must be (genes, cells) with one
 * row_attrs value per gene and one col_attrs value per cell. A file whose attributes all fit the
 * transposed shape (a writer that stored cells x genes) is read that way; an attribute that fits
 * neither is left out with its reason; a file none of whose attributes fit is refused.
 *
 * The whole open runs under the HDF5 lock; arrays keep their dataset ids open afterwards and
 * take the lock only for their reads.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup */
#endif

#include "array_views.h"
#include "coo_csr.h"
#include "elems.h"
#include "format.h"
#include "h5_array.h"
#include "h5_dormant.h"
#include "h5_types.h"
#include "hdf5_util.h"
#include "html_unescape.h"
#include "names.h"
#include "path.h"
#include "strset.h"
#include "utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef unsigned long long ull;

#define LOOM_HINT "re-write it with loompy (loompy.create) or anndata (adata.write_loom)"
/* A graph is turned into CSR in memory at open: this many edges at most (~1.5 GiB of work). */
#define LOOM_MAX_GRAPH_EDGES ((uint64_t)1 << 26)
/* Global attributes are read whole at open. */
#define LOOM_MAX_ATTR_ELEMS ((uint64_t)1 << 24)
#define LOOM_MAX_FIELDS 65536

/* ------------------------------------------------------------------------------------------ */
/* Small helpers */

static bool streq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

static bool numeric_dtype(cfs_dtype t)
{
    return t != CFS_STRING && t != CFS_COMPOUND;
}

/* Leaves out parent/name with a printf-style reason; -1 only on allocation failure. */
static int leave_out(cfs_dataset *ds, const char *parent, const char *name, cfs_err *err,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int leave_out(cfs_dataset *ds, const char *parent, const char *name, cfs_err *err,
                     const char *fmt, ...)
{
    char reason[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    char *path = name[0] ? cfs_path_join(parent, name) : strdup(parent);
    int rc = path ? cfs_dataset_leave_out(ds, path, "%s", reason) : -1;
    free(path);
    return rc < 0 ? cfs_err_oom(err) : 0;
}

/* The little-endian HDF5 type of a numeric model dtype (a library constant), or -1. */
static hid_t le_type(cfs_dtype t)
{
    switch (t) {
    case CFS_INT8: return H5T_STD_I8LE;
    case CFS_INT16: return H5T_STD_I16LE;
    case CFS_INT32: return H5T_STD_I32LE;
    case CFS_INT64: return H5T_STD_I64LE;
    case CFS_UINT8: return H5T_STD_U8LE;
    case CFS_UINT16: return H5T_STD_U16LE;
    case CFS_UINT32: return H5T_STD_U32LE;
    case CFS_UINT64: return H5T_STD_U64LE;
    case CFS_FLOAT32: return H5T_IEEE_F32LE;
    case CFS_FLOAT64: return H5T_IEEE_F64LE;
    default: return -1;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Numeric fields of compound datasets (SCENIC's embeddings, regulon AUCs) as an (n, k) or n
 * array: each column is one member, read by HDF5 member selection, converted to one dtype. */

typedef struct field_col {
    cfs_h5_dset *dset;
    hid_t mtype;        /* compound memory type holding only this member */
} field_col;

typedef struct fields_array {
    field_col *cols;
    size_t ncols;
    size_t es;
    char *name;         /* for messages */
} fields_array;

static void fields_free(void *ctx)
{
    fields_array *f = ctx;
    if (!f)
        return;
    cfs_h5_lock();
    for (size_t i = 0; i < f->ncols; i++) {
        if (f->cols[i].mtype >= 0)
            H5Tclose(f->cols[i].mtype);
        cfs_h5_dset_free(f->cols[i].dset);
    }
    cfs_h5_unlock();
    free(f->cols);
    free(f->name);
    free(f);
}

static int fields_read_col(const fields_array *f, const field_col *c, uint64_t r0, uint64_t nr,
                           void *buf, cfs_err *err)
{
    hid_t dset = cfs_h5_dset_id(c->dset, err);
    if (dset < 0)
        return -1;
    hsize_t hs = r0, hc = nr, hn = nr;
    hid_t fs = H5Dget_space(dset), ms = H5Screate_simple(1, &hn, NULL);
    int rc = 0;
    if (fs < 0 || ms < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, &hs, NULL, &hc, NULL) < 0) {
        rc = cfs_err_set(err, "reading %s failed: the selection cannot be made", f->name);
    } else if (H5Dread(dset, c->mtype, ms, fs, H5P_DEFAULT, buf) < 0) {
        char detail[256];
        cfs_h5_error_detail(detail, sizeof detail);
        rc = cfs_err_set(err, "reading %s failed: %s", f->name, detail);
    }
    if (ms >= 0)
        H5Sclose(ms);
    if (fs >= 0)
        H5Sclose(fs);
    return rc;
}

static int fields_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                       void *out, cfs_err *err)
{
    const fields_array *f = arr->ctx;
    uint64_t c0 = arr->ndim == 2 ? start[1] : 0, nc = arr->ndim == 2 ? count[1] : 1;
    uint64_t nr = count[0];
    if (nr == 0 || nc == 0)
        return 0;
    unsigned char *tmp = cfs_elems_alloc(nr * nc, f->es, err);
    if (!tmp)
        return -1;
    int rc = 0;
    cfs_h5_lock();
    for (uint64_t c = 0; rc == 0 && c < nc; c++)
        rc = fields_read_col(f, &f->cols[c0 + c], start[0], nr, tmp + c * nr * f->es, err);
    cfs_h5_unlock();
    if (rc == 0)
        cfs_elems_transpose(tmp, out, nc, nr, f->es); /* column blocks -> rows */
    free(tmp);
    return rc;
}

static const cfs_array_ops fields_ops = {fields_read, fields_free, NULL, NULL, NULL};

/* The model dtype of member m of a compound type if it is a number (float16 read as float32),
 * else -1 with a reason. */
static int member_dtype(hid_t ctype, unsigned m, const char *name, cfs_dtype *out, cfs_err *err)
{
    hid_t mt = H5Tget_member_type(ctype, m);
    if (mt < 0)
        return cfs_err_set(err, "its field '%s' cannot be described", name);
    int rc = 0;
    H5T_class_t cls = H5Tget_class(mt);
    if (cls != H5T_INTEGER && cls != H5T_FLOAT) {
        char desc[96];
        cfs_h5_type_describe(mt, desc, sizeof desc);
        rc = cfs_err_set(err, "its field '%s' holds %s, not numbers", name, desc);
    } else if (cfs_h5_dtype_of(mt, out, err) < 0) {
        rc = -1;
    } else if (*out == CFS_FLOAT16) {
        *out = CFS_FLOAT32;
    }
    H5Tclose(mt);
    return rc;
}

typedef struct field_ref {
    const char *dset;   /* raw link name inside the group */
    const char *member; /* raw member name */
} field_ref;

/* One column per reference: n rows, and ndim 1 (one column) or 2. */
static int fields_open(hid_t grp, const field_ref *refs, size_t ncols, int ndim, uint64_t n,
                       const char *label, cfs_array **out, cfs_err *err)
{
    fields_array *f = calloc(1, sizeof *f);
    if (!f || !(f->cols = calloc(ncols, sizeof *f->cols)) || !(f->name = strdup(label))) {
        fields_free(f);
        return cfs_err_oom(err);
    }
    for (size_t i = 0; i < ncols; i++)
        f->cols[i].mtype = -1;
    f->ncols = ncols;
    cfs_dtype dt = CFS_FLOAT64;
    cfs_dtype *dts = calloc(ncols, sizeof *dts);
    int rc = dts ? 0 : cfs_err_oom(err);
    for (size_t i = 0; rc == 0 && i < ncols; i++) {
        hid_t d = H5Dopen2(grp, refs[i].dset, H5P_DEFAULT);
        hid_t t = d >= 0 ? H5Dget_type(d) : -1;
        int m = t >= 0 ? H5Tget_member_index(t, refs[i].member) : -1;
        if (m < 0)
            rc = cfs_err_set(err, "its field '%s' cannot be opened", refs[i].member);
        else
            rc = member_dtype(t, (unsigned)m, refs[i].member, &dts[i], err);
        if (t >= 0)
            H5Tclose(t);
        if (rc == 0 && !(f->cols[i].dset = cfs_h5_dset_keep(d, H5P_DEFAULT, err)))
            rc = -1;
        else if (rc < 0 && d >= 0)
            H5Dclose(d);
    }
    if (rc == 0) {
        dt = dts[0];
        for (size_t i = 1; i < ncols; i++)
            if (dts[i] != dt)
                dt = CFS_FLOAT64;
        f->es = cfs_dtype_size(dt);
    }
    for (size_t i = 0; rc == 0 && i < ncols; i++) {
        hid_t ct = f->cols[i].mtype = H5Tcreate(H5T_COMPOUND, f->es);
        if (ct < 0 || H5Tinsert(ct, refs[i].member, 0, le_type(dt)) < 0)
            rc = cfs_err_set(err, "libhdf5 could not make a record type");
    }
    free(dts);
    uint64_t shape[2] = {n, ncols};
    cfs_array *arr = rc == 0 ? cfs_array_new(dt, ndim, shape, &fields_ops, f) : NULL;
    if (rc == 0 && !arr)
        rc = cfs_err_oom(err);
    if (rc < 0) {
        fields_free(f);
        return -1;
    }
    *out = arr;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* HDF5 objects */

typedef enum obj_kind { OBJ_NONE, OBJ_GROUP, OBJ_DATASET, OBJ_OTHER } obj_kind;

/* What loc/name is, following hard and soft links only (never into another file). */
static obj_kind object_kind(hid_t loc, const char *name)
{
    if (H5Lexists(loc, name, H5P_DEFAULT) <= 0)
        return OBJ_NONE;
    H5L_info_t li;
    if (H5Lget_info(loc, name, &li, H5P_DEFAULT) < 0 ||
        (li.type != H5L_TYPE_HARD && li.type != H5L_TYPE_SOFT))
        return OBJ_OTHER;
    hid_t obj = H5Oopen(loc, name, H5P_DEFAULT);
    if (obj < 0)
        return OBJ_OTHER;
    H5I_type_t t = H5Iget_type(obj);
    H5Oclose(obj);
    return t == H5I_GROUP ? OBJ_GROUP : t == H5I_DATASET ? OBJ_DATASET : OBJ_OTHER;
}

/* Opens loc/name as a group if it is one, else -1. */
static hid_t group_open(hid_t loc, const char *name)
{
    return object_kind(loc, name) == OBJ_GROUP ? H5Gopen2(loc, name, H5P_DEFAULT) : -1;
}

/* Rank and dims of a dataset (rank -1 if unusable, 0 for a scalar). */
static int dataset_dims(hid_t dset, uint64_t *shape)
{
    hid_t space = H5Dget_space(dset);
    if (space < 0)
        return -1;
    H5S_class_t sc = H5Sget_simple_extent_type(space);
    int rank = 0;
    if (sc == H5S_SIMPLE) {
        hsize_t dims[H5S_MAX_RANK];
        rank = H5Sget_simple_extent_dims(space, dims, NULL);
        if (rank > CFS_MAX_DIMS)
            rank = -1;
        for (int d = 0; d < rank; d++)
            shape[d] = dims[d];
    } else if (sc != H5S_SCALAR) {
        rank = -1;
    }
    H5Sclose(space);
    return rank;
}

/* ------------------------------------------------------------------------------------------ */
/* Attribute groups (row_attrs, col_attrs): what each member is, from metadata */

typedef struct attr_info {
    char *raw;          /* link name */
    char *name;         /* valid UTF-8 */
    bool dataset, compound, string;
    int ndim;           /* -1 when unusable */
    uint64_t shape[CFS_MAX_DIMS];
    bool used;          /* consumed as the index or as the second half of an embedding pair */
} attr_info;

typedef struct attr_list {
    const char *group;  /* "row_attrs" / "col_attrs" */
    hid_t grp;          /* -1 if the file has none */
    attr_info *a;
    size_t n;
} attr_list;

static void attr_list_free(attr_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->a[i].raw);
        free(l->a[i].name);
    }
    free(l->a);
    if (l->grp >= 0)
        H5Gclose(l->grp);
}

static void describe(hid_t grp, attr_info *ai)
{
    ai->ndim = -1;
    if (object_kind(grp, ai->raw) != OBJ_DATASET)
        return;
    hid_t d = H5Dopen2(grp, ai->raw, H5P_DEFAULT);
    if (d < 0)
        return;
    ai->dataset = true;
    ai->ndim = dataset_dims(d, ai->shape);
    hid_t t = H5Dget_type(d);
    if (t >= 0) {
        ai->compound = H5Tget_class(t) == H5T_COMPOUND;
        ai->string = H5Tget_class(t) == H5T_STRING;
        H5Tclose(t);
    }
    H5Dclose(d);
}

static int attr_list_load(hid_t file, const char *group, attr_list *l, cfs_err *err)
{
    memset(l, 0, sizeof *l);
    l->group = group;
    l->grp = group_open(file, group);
    if (l->grp < 0)
        return 0;
    char **names;
    size_t n;
    if (cfs_h5_group_names(l->grp, &names, &n, err) < 0)
        return cfs_err_prefix(err, "its %s", group);
    if (!(l->a = calloc(n ? n : 1, sizeof *l->a))) {
        cfs_h5_names_free(names, n);
        return cfs_err_oom(err);
    }
    l->n = n;
    for (size_t i = 0; i < n; i++) {
        l->a[i].raw = names[i];
        names[i] = NULL;
        if (!(l->a[i].name = cfs_text_to_utf8(l->a[i].raw, strlen(l->a[i].raw)))) {
            cfs_h5_names_free(names, n);
            return cfs_err_oom(err);
        }
        describe(l->grp, &l->a[i]);
    }
    cfs_h5_names_free(names, n);
    return 0;
}

static attr_info *attr_find(const attr_list *l, const char *raw)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->a[i].raw, raw) == 0)
            return &l->a[i];
    return NULL;
}

/* One value per element of an axis of length len (as (len, ...) or, for a 2-d numeric
 * attribute from an R writer, (k, len)). */
static bool fits(const attr_info *ai, uint64_t len)
{
    if (!ai->dataset || ai->ndim < 1)
        return false;
    return ai->shape[0] == len || (ai->ndim == 2 && !ai->compound && ai->shape[1] == len);
}

static size_t count_fits(const attr_list *l, uint64_t len)
{
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++)
        k += fits(&l->a[i], len);
    return k;
}

static size_t count_data(const attr_list *l)
{
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++)
        k += l->a[i].dataset && l->a[i].ndim >= 1;
    return k;
}

/* ------------------------------------------------------------------------------------------ */
/* The reader's state */

typedef struct axis {
    attr_list attrs;
    const char *df;          /* "obs" / "var" */
    const char *multi;       /* "obsm" / "varm" */
    const char *pairs;       /* "obsp" / "varp" */
    const char *graphs[2];   /* "col_graphs", "col_edges" */
    const char *unit;        /* "cells" / "genes" */
    const char *const *index_names;
    bool cells;
    uint64_t len;
    cfs_array *index;        /* the index values (a reference kept for obsm dataframes) */
    const char *index_key;   /* its name: the attribute's, or "_index" for 0..n-1 */
} axis;

typedef struct lrd {
    cfs_dataset *ds;
    hid_t file;
    uint64_t mshape[2];      /* /matrix as stored */
    bool swapped;            /* /matrix is stored cells x genes */
    axis ax[2];              /* 0: var (rows of a loom), 1: obs (columns) */
} lrd;

/* The index attributes, the standard one first (anndata.read_loom's defaults, taken as they are).
 * For cells the others are the names loompy users give cell names, matched without case and
 * taken only when their values are unique. */
static const char *const obs_index_names[] = {"CellID", "obs_names", "cell_names", "id", "barcode",
                                              NULL};
static const char *const var_index_names[] = {"Gene", "var_names", "gene_names", "Accession", NULL};

/* "/matrix (genes x cells: 40 x 60)" for messages. */
static void matrix_desc(const lrd *r, char *buf, size_t len)
{
    snprintf(buf, len, "/matrix (%s: %llu x %llu)", r->swapped ? "cells x genes" : "genes x cells",
             (ull)r->mshape[0], (ull)r->mshape[1]);
}

/* ------------------------------------------------------------------------------------------ */
/* Columns, obsm/varm entries and the index */

/* Opens an attribute as a 1-d column array of len values (from (len), (len, 1) or (1, len)),
 * strings unescaped. */
static int open_column(hid_t grp, const attr_info *ai, cfs_array **out, cfs_err *err)
{
    cfs_array *arr = NULL;
    if (cfs_h5_array_open(grp, ai->raw, &arr, err) < 0)
        return -1;
    if (arr->dtype == CFS_COMPOUND) {
        cfs_array_unref(arr);
        return cfs_err_set(err, "it holds records");
    }
    if (arr->ndim == 2 && arr->shape[0] == 1 && arr->shape[1] != 1)
        arr = cfs_view_new(CFS_VIEW_TRANSPOSE, arr);
    if (arr && arr->ndim == 2)
        arr = cfs_view_new(CFS_VIEW_SQUEEZE, arr);
    if (arr && arr->dtype == CFS_STRING)
        arr = cfs_view_new(CFS_VIEW_UNESCAPE, arr);
    if (!arr)
        return cfs_err_oom(err);
    *out = arr;
    return 0;
}

static bool index_capable(const attr_info *ai, uint64_t len)
{
    if (!ai->dataset || ai->compound || ai->ndim < 1 || ai->ndim > 2 || ai->shape[0] != len)
        return false;
    return ai->ndim == 1 || ai->shape[1] == 1;
}

/* 0..n-1 as strings (what anndata makes of a RangeIndex). */
static cfs_array *positions(uint64_t n)
{
    char **s = calloc(n ? (size_t)n : 1, sizeof *s);
    if (!s)
        return NULL;
    for (uint64_t i = 0; i < n; i++) {
        char buf[24];
        snprintf(buf, sizeof buf, "%llu", (ull)i);
        if (!(s[i] = strdup(buf))) {
            cfs_strings_free(s, (size_t)i);
            free(s);
            return NULL;
        }
    }
    cfs_array *arr = cfs_array_from_memory(CFS_STRING, 1, &n, s);
    if (!arr) {
        cfs_strings_free(s, (size_t)n);
        free(s);
    }
    return arr;
}

/* Reads the gene names whole, makes them unique and says so (naming the first renamed one). */
static int unique_names(lrd *r, cfs_array **arr, cfs_err *err)
{
    uint64_t n = (*arr)->shape[0], start = 0;
    char **names = cfs_elems_alloc(n, sizeof *names, err);
    char **orig = names ? cfs_elems_alloc(n, sizeof *orig, err) : NULL;
    if (!orig) {
        free(names);
        return -1;
    }
    if (cfs_array_read(*arr, &start, &n, names, err) < 0) {
        free(names);
        free(orig);
        return -1;
    }
    int rc = 0;
    for (uint64_t i = 0; rc == 0 && i < n; i++)
        if (!(orig[i] = strdup(names[i]))) {
            cfs_strings_free(orig, (size_t)i);
            rc = cfs_err_oom(err);
        }
    size_t changed = 0;
    cfs_array *mem = NULL;
    if (rc == 0 && (cfs_names_make_unique(names, (size_t)n, &changed) < 0 ||
                    !(mem = cfs_array_from_memory(CFS_STRING, 1, &n, names)))) {
        cfs_strings_free(orig, (size_t)n);
        rc = cfs_err_oom(err);
    }
    if (rc < 0) {
        cfs_strings_free(names, (size_t)n);
        free(names);
        free(orig);
        return -1;
    }
    cfs_array_unref(*arr);
    *arr = mem;
    for (uint64_t i = 0; rc == 0 && changed > 0 && i < n; i++) {
        if (strcmp(orig[i], names[i]) == 0)
            continue;
        if (cfs_dataset_leave_out(r->ds, "var/_index",
                                  "%zu duplicate gene name%s made unique as anndata's "
                                  "var_names_make_unique does (%s -> %s, ...); the file's own "
                                  "names are not kept",
                                  changed, changed == 1 ? " was" : "s were", orig[i], names[i]) < 0)
            rc = cfs_err_oom(err);
        break;
    }
    cfs_strings_free(orig, (size_t)n);
    free(orig);
    return rc;
}

static attr_info *attr_find_nocase(const attr_list *l, const char *raw)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcasecmp(l->a[i].raw, raw) == 0)
            return &l->a[i];
    return NULL;
}

/* 1 if the n strings of arr are distinct, 0 if not, -1 with err on failure. */
static int all_distinct(const cfs_array *arr, uint64_t n, cfs_err *err)
{
    const char **names = malloc((n ? n : 1) * sizeof *names);
    cfs_strpool *pool = cfs_strpool_new();
    cfs_strset *set = cfs_strset_new((size_t)n);
    uint64_t start = 0;
    int rc = names && pool && set ? cfs_array_read_strings(arr, &start, &n, names, pool, err)
                                  : cfs_err_oom(err);
    for (uint64_t i = 0; rc == 0 && i < n; i++) {
        int added = cfs_strset_add(set, names[i] ? names[i] : "", i);
        rc = added < 0 ? cfs_err_oom(err) : added == 0 ? 1 : 0;
    }
    cfs_strset_free(set);
    cfs_strpool_free(pool);
    free(names);
    return rc < 0 ? -1 : rc == 1 ? 0 : 1;
}

/* The index of an axis: the first usable candidate attribute, else 0..n-1. */
static int read_index(lrd *r, axis *ax, cfs_elem *df, cfs_err *err)
{
    cfs_array *arr = NULL;
    const char *chosen = NULL;
    for (size_t k = 0; ax->index_names[k] && !arr; k++) {
        bool fallback = ax->cells && k > 0;
        attr_info *ai = fallback ? attr_find_nocase(&ax->attrs, ax->index_names[k])
                                 : attr_find(&ax->attrs, ax->index_names[k]);
        if (!ai || !index_capable(ai, ax->len))
            continue;
        cfs_err why;
        if (open_column(ax->attrs.grp, ai, &arr, &why) < 0) {
            arr = NULL;
            continue; /* it stays a column, and is left out there with its reason */
        }
        if (cfs_dtype_is_integer(arr->dtype) && arr->dtype != CFS_BOOL) {
            arr = cfs_view_new(CFS_VIEW_FORMAT, arr);
            if (!arr)
                return cfs_err_oom(err);
        } else if (arr->dtype != CFS_STRING) {
            cfs_array_unref(arr);
            arr = NULL;
            continue;
        }
        int distinct = fallback ? all_distinct(arr, ax->len, err) : 1;
        if (distinct <= 0) {
            cfs_array_unref(arr);
            arr = NULL;
            if (distinct < 0)
                return -1;
            continue; /* not names: a column like any other */
        }
        ai->used = true;
        chosen = ai->name;
    }
    if (!arr && !(arr = positions(ax->len)))
        return cfs_err_oom(err);
    if (!ax->cells && chosen && unique_names(r, &arr, err) < 0) {
        cfs_array_unref(arr);
        return -1;
    }
    const char *key = chosen ? chosen : "_index";
    if (!(df->index = cfs_elem_from_array(CFS_EL_ARRAY, key, cfs_array_ref(arr))) ||
        (chosen && !(df->index_name = strdup(chosen)))) {
        cfs_array_unref(arr);
        return cfs_err_oom(err);
    }
    ax->index = arr;
    ax->index_key = key;
    return 0;
}

static cfs_elem *ensure_multi(cfs_elem **multi, const char *name)
{
    if (!*multi)
        *multi = cfs_elem_new(CFS_EL_DICT, name);
    return *multi;
}

static int add_multi(cfs_elem **multi, const char *slot, cfs_elem *el, cfs_err *err)
{
    if (!el)
        return cfs_err_oom(err);
    if (!ensure_multi(multi, slot)) {
        cfs_elem_free(el);
        return cfs_err_oom(err);
    }
    return cfs_elem_add_or_free(*multi, el, err);
}

static int mismatch(lrd *r, const axis *ax, const attr_info *ai, const char *slot, cfs_err *err)
{
    char md[128];
    matrix_desc(r, md, sizeof md);
    if (ai->ndim < 1)
        return leave_out(r->ds, slot, ai->name, err,
                         "%s/%s is a single value, not one per %s; the attribute was not read",
                         ax->attrs.group, ai->name, ax->cells ? "cell" : "gene");
    return leave_out(r->ds, slot, ai->name, err,
                     "%s/%s has %llu values but %s has %llu %s; the attribute was not read",
                     ax->attrs.group, ai->name, (ull)ai->shape[0], md, (ull)ax->len, ax->unit);
}

/* A 1-d (or (n, 1)) attribute as a column. */
static int add_column(lrd *r, const axis *ax, const attr_info *ai, cfs_elem *df, cfs_err *err)
{
    cfs_array *arr = NULL;
    cfs_err why;
    if (open_column(ax->attrs.grp, ai, &arr, &why) < 0)
        return leave_out(r->ds, ax->df, ai->name, err, "%s; the attribute was not read", why.msg);
    cfs_elem *el = cfs_elem_from_array(CFS_EL_ARRAY, ai->name, arr);
    return el ? cfs_elem_add_or_free(df, el, err) : cfs_err_oom(err);
}

/* A 2-d (or n-d) numeric attribute as an obsm/varm array, (len, k) as loompy writes it or
 * (k, len) as R writers leave it. */
static int add_matrix_attr(lrd *r, const axis *ax, const attr_info *ai, cfs_elem **multi,
                           cfs_err *err)
{
    cfs_array *arr = NULL;
    cfs_err why;
    if (cfs_h5_array_open(ax->attrs.grp, ai->raw, &arr, &why) < 0)
        return leave_out(r->ds, ax->multi, ai->name, err, "%s; the attribute was not read",
                         why.msg);
    if (!numeric_dtype(arr->dtype)) {
        const char *what = arr->dtype == CFS_STRING ? "strings" : "records";
        cfs_array_unref(arr);
        return leave_out(r->ds, ax->multi, ai->name, err,
                         "%s/%s is a %d-d array of %s; %s holds numbers, so it was not read",
                         ax->attrs.group, ai->name, ai->ndim, what, ax->multi);
    }
    if (arr->shape[0] != ax->len && !(arr = cfs_view_new(CFS_VIEW_TRANSPOSE, arr)))
        return cfs_err_oom(err);
    return add_multi(multi, ax->multi, cfs_elem_from_array(CFS_EL_ARRAY, ai->name, arr), err);
}

/* The raw member names of a compound dataset; free with cfs_h5_names_free. */
static int member_names(hid_t grp, const char *raw, char ***out, size_t *n, cfs_err *err)
{
    *out = NULL;
    *n = 0;
    hid_t d = H5Dopen2(grp, raw, H5P_DEFAULT);
    hid_t t = d >= 0 ? H5Dget_type(d) : -1;
    int nm = t >= 0 ? H5Tget_nmembers(t) : -1;
    int rc = 0;
    if (nm <= 0 || nm > LOOM_MAX_FIELDS)
        rc = cfs_err_set(err, "its record type cannot be described");
    char **names = rc == 0 ? calloc((size_t)nm, sizeof *names) : NULL;
    if (rc == 0 && !names)
        rc = cfs_err_oom(err);
    for (int i = 0; rc == 0 && i < nm; i++) {
        char *m = H5Tget_member_name(t, (unsigned)i);
        if (!m || !(names[i] = strdup(m)))
            rc = m ? cfs_err_oom(err) : cfs_err_set(err, "its record field %d cannot be named", i);
        if (m)
            H5free_memory(m);
    }
    if (t >= 0)
        H5Tclose(t);
    if (d >= 0)
        H5Dclose(d);
    if (rc < 0) {
        cfs_h5_names_free(names, nm > 0 ? (size_t)nm : 0);
        return -1;
    }
    *out = names;
    *n = (size_t)nm;
    return 0;
}

static bool has_name(char **names, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], s) == 0)
            return true;
    return false;
}

/* SCENIC's col_attrs/Embedding: every field a coordinate -> obsm (n, k). */
static int add_embedding(lrd *r, const axis *ax, const attr_info *ai, char **fields, size_t nf,
                         cfs_elem **multi, cfs_err *err)
{
    field_ref *refs = calloc(nf, sizeof *refs);
    char *label = cfs_path_join(ax->attrs.group, ai->name);
    if (!refs || !label) {
        free(refs);
        free(label);
        return cfs_err_oom(err);
    }
    for (size_t i = 0; i < nf; i++)
        refs[i] = (field_ref){ai->raw, fields[i]};
    cfs_array *arr = NULL;
    cfs_err why;
    int rc = fields_open(ax->attrs.grp, refs, nf, 2, ax->len, label, &arr, &why);
    free(refs);
    free(label);
    if (rc < 0)
        return leave_out(r->ds, ax->multi, ai->name, err, "%s/%s: %s; the embedding was not read",
                         ax->attrs.group, ai->name, why.msg);
    return add_multi(multi, ax->multi, cfs_elem_from_array(CFS_EL_ARRAY, ai->name, arr), err);
}

/* SCENIC's Embeddings_X / Embeddings_Y: one field per embedding id in each -> one obsm (n, 2)
 * entry per id, named Embeddings_<id>. */
static int add_embedding_pairs(lrd *r, const axis *ax, const attr_info *xa, attr_info *ya,
                               char **xf, size_t nxf, cfs_elem **multi, cfs_err *err)
{
    char **yf;
    size_t nyf;
    cfs_err why;
    if (member_names(ax->attrs.grp, ya->raw, &yf, &nyf, &why) < 0)
        return leave_out(r->ds, ax->multi, ya->name, err, "%s; the embeddings were not read",
                         why.msg);
    ya->used = true;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < nxf; i++) {
        char *fname = cfs_text_to_utf8(xf[i], strlen(xf[i]));
        size_t klen = fname ? strlen("Embeddings_") + strlen(fname) + 1 : 0;
        char *key = fname ? malloc(klen) : NULL;
        if (!key) {
            free(fname);
            rc = cfs_err_oom(err);
            break;
        }
        snprintf(key, klen, "Embeddings_%s", fname);
        if (!has_name(yf, nyf, xf[i])) {
            rc = leave_out(r->ds, ax->multi, key, err,
                           "%s/%s has no field '%s' to pair with %s/%s's; the embedding was not "
                           "read", ax->attrs.group, ya->name, fname, ax->attrs.group, xa->name);
        } else {
            field_ref refs[2] = {{xa->raw, xf[i]}, {ya->raw, xf[i]}};
            cfs_array *arr = NULL;
            char label[512];
            snprintf(label, sizeof label, "%s/%s+%s[%s]", ax->attrs.group, xa->name, ya->name,
                     fname);
            if (fields_open(ax->attrs.grp, refs, 2, 2, ax->len, label, &arr, &why) < 0)
                rc = leave_out(r->ds, ax->multi, key, err, "%s/%s and %s: %s; the embedding was "
                               "not read", ax->attrs.group, xa->name, ya->name, why.msg);
            else
                rc = add_multi(multi, ax->multi, cfs_elem_from_array(CFS_EL_ARRAY, key, arr), err);
        }
        free(key);
        free(fname);
    }
    cfs_h5_names_free(yf, nyf);
    return rc;
}

/* Any other compound attribute (RegulonsAUC, Clusterings, Regulons, ...): an obsm/varm
 * dataframe with one numeric column per field, indexed like obs/var. */
static int add_record_frame(lrd *r, const axis *ax, const attr_info *ai, char **fields, size_t nf,
                            cfs_elem **multi, cfs_err *err)
{
    cfs_elem *df = cfs_elem_new(CFS_EL_DATAFRAME, ai->name);
    char *path = cfs_path_join(ax->multi, ai->name);
    int rc = df && path ? 0 : cfs_err_oom(err);
    /* Indexed like obs/var, under the same name (as a frame built from obs would be). */
    bool named = strcmp(ax->index_key, "_index") != 0;
    if (rc == 0 &&
        (!(df->index =
               cfs_elem_from_array(CFS_EL_ARRAY, ax->index_key, cfs_array_ref(ax->index))) ||
         (named && !(df->index_name = strdup(ax->index_key)))))
        rc = cfs_err_oom(err);
    for (size_t i = 0; rc == 0 && i < nf; i++) {
        char *fname = cfs_text_to_utf8(fields[i], strlen(fields[i]));
        char label[512];
        field_ref ref = {ai->raw, fields[i]};
        cfs_array *arr = NULL;
        cfs_err why;
        if (!fname) {
            rc = cfs_err_oom(err);
            break;
        }
        snprintf(label, sizeof label, "%s/%s[%s]", ax->attrs.group, ai->name, fname);
        if (strcmp(fname, ax->index_key) == 0)
            rc = leave_out(r->ds, path, fname, err, "%s/%s: its field '%s' has the name of the "
                           "frame's index; the field was not read", ax->attrs.group, ai->name,
                           fname);
        else if (fields_open(ax->attrs.grp, &ref, 1, 1, ax->len, label, &arr, &why) < 0)
            rc = leave_out(r->ds, path, fname, err, "%s/%s: %s; the field was not read",
                           ax->attrs.group, ai->name, why.msg);
        else
            rc = cfs_elem_add_or_free(df, cfs_elem_from_array(CFS_EL_ARRAY, fname, arr), err);
        free(fname);
    }
    free(path);
    if (rc == 0 && df->nchildren == 0) {
        cfs_elem_free(df);
        return leave_out(r->ds, ax->multi, ai->name, err,
                         "%s/%s is a record array without numeric fields; it was not read",
                         ax->attrs.group, ai->name);
    }
    if (rc < 0) {
        cfs_elem_free(df);
        return -1;
    }
    return add_multi(multi, ax->multi, df, err);
}

static int add_compound(lrd *r, const axis *ax, attr_info *ai, cfs_elem **multi, cfs_err *err)
{
    if (ai->ndim != 1 || ai->shape[0] != ax->len)
        return mismatch(r, ax, ai, ax->multi, err);
    char **fields;
    size_t nf;
    cfs_err why;
    if (member_names(ax->attrs.grp, ai->raw, &fields, &nf, &why) < 0)
        return leave_out(r->ds, ax->multi, ai->name, err, "%s; the attribute was not read",
                         why.msg);
    int rc;
    attr_info *ya = NULL;
    if (ax->cells && streq(ai->raw, "Embeddings_X") &&
        (ya = attr_find(&ax->attrs, "Embeddings_Y")) && ya->compound && ya->ndim == 1 &&
        ya->shape[0] == ax->len && !ya->used)
        rc = add_embedding_pairs(r, ax, ai, ya, fields, nf, multi, err);
    else if (ax->cells && streq(ai->raw, "Embedding"))
        rc = add_embedding(r, ax, ai, fields, nf, multi, err);
    else
        rc = add_record_frame(r, ax, ai, fields, nf, multi, err);
    cfs_h5_names_free(fields, nf);
    return rc;
}

/* One attribute: a column, an obsm/varm entry, or left out with its reason. -1 only on
 * allocation failure. */
static int add_attr(lrd *r, const axis *ax, attr_info *ai, cfs_elem *df, cfs_elem **multi,
                    cfs_err *err)
{
    if (!ai->dataset)
        return leave_out(r->ds, ax->df, ai->name, err,
                         "%s/%s is not a dataset; the attribute was not read", ax->attrs.group,
                         ai->name);
    if (ai->compound)
        return add_compound(r, ax, ai, multi, err);
    if (ai->ndim == 1)
        return ai->shape[0] == ax->len ? add_column(r, ax, ai, df, err)
                                       : mismatch(r, ax, ai, ax->df, err);
    if (ai->ndim < 1)
        return mismatch(r, ax, ai, ax->df, err);
    bool column = ai->ndim == 2 && ((ai->shape[0] == ax->len && ai->shape[1] == 1) ||
                                    (ai->shape[1] == ax->len && ai->shape[0] == 1));
    if (column)
        return add_column(r, ax, ai, df, err);
    bool rows = ai->shape[0] == ax->len || (ai->ndim == 2 && ai->shape[1] == ax->len);
    return rows ? add_matrix_attr(r, ax, ai, multi, err) : mismatch(r, ax, ai, ax->multi, err);
}

static int read_axis(lrd *r, axis *ax, cfs_elem *root, cfs_elem **multi, cfs_err *err)
{
    cfs_elem *df = cfs_elem_new(CFS_EL_DATAFRAME, ax->df);
    if (!df)
        return cfs_err_oom(err);
    int rc = read_index(r, ax, df, err);
    for (size_t i = 0; rc == 0 && i < ax->attrs.n; i++) {
        attr_info *ai = &ax->attrs.a[i];
        if (ai->used)
            continue;
        if (strcmp(ai->name, ax->index_key) == 0) /* only "_index" can clash: 0..n-1 took it */
            rc = leave_out(r->ds, ax->df, ai->name, err, "%s/%s has the name the index of "
                           "positions takes in the store; the attribute was not read",
                           ax->attrs.group, ai->name);
        else
            rc = add_attr(r, ax, ai, df, multi, err);
    }
    if (rc < 0) {
        cfs_elem_free(df);
        return -1;
    }
    return cfs_elem_add_or_free(root, df, err);
}

/* ------------------------------------------------------------------------------------------ */
/* X and layers */

static int open_matrix(lrd *r, hid_t loc, const char *name, cfs_array **out, cfs_err *err)
{
    cfs_array *arr = NULL;
    if (cfs_h5_array_open(loc, name, &arr, err) < 0)
        return -1;
    if (arr->ndim != 2 || !numeric_dtype(arr->dtype)) {
        cfs_err_set(err, "it is a %d-d %s array, not a 2-d numeric matrix", arr->ndim,
                    cfs_dtype_name(arr->dtype));
        cfs_array_unref(arr);
        return -1;
    }
    if (arr->shape[0] != r->mshape[0] || arr->shape[1] != r->mshape[1]) {
        cfs_err_set(err, "its shape is %llu x %llu but /matrix is %llu x %llu",
                    (ull)arr->shape[0], (ull)arr->shape[1], (ull)r->mshape[0], (ull)r->mshape[1]);
        cfs_array_unref(arr);
        return -1;
    }
    if (!r->swapped && !(arr = cfs_view_new(CFS_VIEW_TRANSPOSE, arr)))
        return cfs_err_oom(err);
    *out = arr;
    return 0;
}

static int read_expression(lrd *r, cfs_array *main_x, cfs_elem *root, cfs_err *err)
{
    cfs_elem *layers = cfs_elem_new(CFS_EL_DICT, "layers");
    if (!layers) {
        cfs_array_unref(main_x);
        return cfs_err_oom(err);
    }
    hid_t grp = group_open(r->file, "layers");
    char **names = NULL;
    size_t n = 0;
    int rc = 0;
    if (grp >= 0 && cfs_h5_group_names(grp, &names, &n, err) < 0) {
        cfs_err why = *err;
        n = 0;
        rc = leave_out(r->ds, "layers", "", err, "%s; no layer was read", why.msg);
    }
    cfs_array *spliced = NULL;
    bool own_matrix_layer = false;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char *name = cfs_text_to_utf8(names[i], strlen(names[i]));
        cfs_array *arr = NULL;
        cfs_err why;
        if (!name)
            rc = cfs_err_oom(err);
        else if (object_kind(grp, names[i]) != OBJ_DATASET)
            rc = leave_out(r->ds, "layers", name, err, "layers/%s is not a dataset; the layer "
                           "was not read", name);
        else if (open_matrix(r, grp, names[i], &arr, &why) < 0)
            rc = leave_out(r->ds, "layers", name, err, "layers/%s: %s; the layer was not read",
                           name, why.msg);
        else {
            if (streq(name, "spliced"))
                spliced = cfs_array_ref(arr);
            own_matrix_layer |= streq(name, "matrix");
            rc = cfs_elem_add_or_free(layers, cfs_elem_from_array(CFS_EL_ARRAY, name, arr), err);
        }
        free(name);
    }
    cfs_h5_names_free(names, n);
    if (grp >= 0)
        H5Gclose(grp);
    /* anndata.read_loom (X_name='spliced'): X is the spliced layer when there is one, and the
     * main matrix becomes the layer 'matrix' (a layer of that name in the file wins). */
    cfs_elem *x = NULL;
    if (rc == 0 && spliced) {
        x = cfs_elem_from_array(CFS_EL_ARRAY, "X", spliced);
        spliced = NULL;
        if (!own_matrix_layer) {
            cfs_elem *m = cfs_elem_from_array(CFS_EL_ARRAY, "matrix", main_x);
            main_x = NULL;
            if (!m || cfs_elem_add(layers, m) < 0) {
                cfs_elem_free(m);
                rc = cfs_err_oom(err);
            } else {
                /* first, as anndata lists it */
                memmove(layers->children + 1, layers->children,
                        (layers->nchildren - 1) * sizeof *layers->children);
                layers->children[0] = m;
            }
        }
    } else if (rc == 0) {
        x = cfs_elem_from_array(CFS_EL_ARRAY, "X", main_x);
        main_x = NULL;
    }
    cfs_array_unref(spliced);
    cfs_array_unref(main_x);
    if (rc == 0 && !x)
        rc = cfs_err_oom(err);
    if (rc == 0)
        rc = cfs_elem_add_or_free(root, x, err);
    else
        cfs_elem_free(x);
    if (rc == 0 && layers->nchildren > 0)
        return cfs_elem_add_or_free(root, layers, err);
    cfs_elem_free(layers);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Graphs: read as COO (a, b, w), made CSR by coo_csr.h */

/* Reads an integer vertex array into uint32 (every vertex < n <= 2^32). */
static int read_vertices(const cfs_array *arr, const char *what, uint64_t n, uint32_t **out,
                         cfs_err *err)
{
    uint64_t len = arr->shape[0], start = 0;
    void *raw = cfs_elems_alloc(len, cfs_dtype_size(arr->dtype), err);
    uint32_t *v = raw ? cfs_elems_alloc(len, sizeof *v, err) : NULL;
    int rc = v ? cfs_array_read(arr, &start, &len, raw, err) : -1;
    for (uint64_t i = 0; rc == 0 && i < len; i++) {
        bool neg;
        uint64_t x = cfs_elems_int(raw, arr->dtype, (size_t)i, &neg);
        if (neg || x >= n)
            rc = cfs_err_set(err, "%s[%llu] is %s%llu, outside 0..%llu", what, (ull)i,
                             neg ? "-" : "", (ull)x, (ull)(n ? n - 1 : 0));
        else
            v[i] = (uint32_t)x;
    }
    free(raw);
    if (rc < 0) {
        free(v);
        return -1;
    }
    *out = v;
    return 0;
}

static int need_vector(const cfs_array *arr, const char *what, bool integer, cfs_err *err)
{
    if (arr->ndim != 1)
        return cfs_err_set(err, "its %s is %d-d, not 1-d", what, arr->ndim);
    if (integer && (!cfs_dtype_is_integer(arr->dtype) || arr->dtype == CFS_BOOL))
        return cfs_err_set(err, "its %s holds %s, not integers", what, cfs_dtype_name(arr->dtype));
    if (!integer && (!numeric_dtype(arr->dtype) || arr->dtype == CFS_FLOAT16))
        return cfs_err_set(err, "its %s holds %s, which this reader does not sum", what,
                           cfs_dtype_name(arr->dtype));
    return 0;
}

static int read_coo(hid_t g, uint64_t n, cfs_coo *out, cfs_err *err)
{
    cfs_array *a = NULL, *b = NULL, *w = NULL;
    int rc = 0;
    if (cfs_h5_array_open(g, "a", &a, err) < 0 || cfs_h5_array_open(g, "b", &b, err) < 0 ||
        cfs_h5_array_open(g, "w", &w, err) < 0 || need_vector(a, "a", true, err) < 0 ||
        need_vector(b, "b", true, err) < 0 || need_vector(w, "w", false, err) < 0)
        rc = -1;
    else if (a->shape[0] != b->shape[0] || a->shape[0] != w->shape[0])
        rc = cfs_err_set(err, "its a, b and w have %llu, %llu and %llu entries, not one each per "
                         "edge", (ull)a->shape[0], (ull)b->shape[0], (ull)w->shape[0]);
    else if (a->shape[0] > LOOM_MAX_GRAPH_EDGES)
        rc = cfs_err_set(err, "it has %llu edges, more than the %llu this reader builds in memory",
                         (ull)a->shape[0], (ull)LOOM_MAX_GRAPH_EDGES);
    if (rc == 0) {
        uint64_t len = w->shape[0], start = 0;
        out->nnz = len;
        out->wt = w->dtype;
        if (read_vertices(a, "a", n, &out->a, err) < 0 ||
            read_vertices(b, "b", n, &out->b, err) < 0 ||
            !(out->w = cfs_elems_alloc(len, cfs_dtype_size(w->dtype), err)) ||
            cfs_array_read(w, &start, &len, out->w, err) < 0)
            rc = -1;
    }
    cfs_array_unref(a);
    cfs_array_unref(b);
    cfs_array_unref(w);
    return rc;
}

static int read_graph(hid_t grp, const char *raw, const char *name, uint64_t n, cfs_elem **out,
                      cfs_err *err)
{
    if (object_kind(grp, raw) != OBJ_GROUP)
        return cfs_err_set(err, "it is not a group of a, b and w");
    hid_t g = H5Gopen2(grp, raw, H5P_DEFAULT);
    if (g < 0)
        return cfs_err_set(err, "it cannot be opened");
    cfs_coo c = {0};
    cfs_csr m = {0};
    int rc = read_coo(g, n, &c, err);
    H5Gclose(g);
    if (rc == 0 && (rc = cfs_coo_to_csr(&c, n, &m, err)) == 0)
        rc = cfs_csr_elem(name, &m, c.wt, n, out, err);
    cfs_coo_free(&c);
    return rc;
}

static int read_graphs(lrd *r, const axis *ax, cfs_elem *root, cfs_err *err)
{
    cfs_elem *dict = cfs_elem_new(CFS_EL_DICT, ax->pairs);
    if (!dict)
        return cfs_err_oom(err);
    int rc = 0;
    for (int k = 0; rc == 0 && k < 2; k++) {
        hid_t grp = group_open(r->file, ax->graphs[k]);
        char **names = NULL;
        size_t n = 0;
        if (grp >= 0 && cfs_h5_group_names(grp, &names, &n, err) < 0) {
            cfs_err why = *err;
            n = 0;
            rc = leave_out(r->ds, ax->pairs, ax->graphs[k], err, "%s; its graphs were not read",
                           why.msg);
        }
        for (size_t i = 0; rc == 0 && i < n; i++) {
            char *name = cfs_text_to_utf8(names[i], strlen(names[i]));
            cfs_elem *el = NULL;
            cfs_err why;
            if (!name)
                rc = cfs_err_oom(err);
            else if (cfs_elem_child(dict, name))
                rc = 0; /* the col_graphs one is the current copy of an old col_edges one */
            else if (read_graph(grp, names[i], name, ax->len, &el, &why) < 0)
                rc = leave_out(r->ds, ax->pairs, name, err, "%s/%s: %s; the graph was not read",
                               ax->graphs[k], name, why.msg);
            else
                rc = cfs_elem_add_or_free(dict, el, err);
            free(name);
        }
        cfs_h5_names_free(names, n);
        if (grp >= 0)
            H5Gclose(grp);
    }
    if (rc == 0 && dict->nchildren > 0)
        return cfs_elem_add_or_free(root, dict, err);
    cfs_elem_free(dict);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Global attributes -> uns */

static cfs_elem *memory_elem(const char *name, cfs_dtype t, int ndim, const uint64_t *shape,
                             void *data)
{
    cfs_array *arr = cfs_array_from_memory(t, ndim, shape, data);
    if (!arr)
        return NULL;
    return cfs_elem_from_array(ndim == 0 ? CFS_EL_SCALAR : CFS_EL_ARRAY, name, arr);
}

/* A root HDF5 attribute (loom before 3.0) as an uns value. */
static int read_root_attr(hid_t file, const char *raw, const char *name, cfs_elem **out,
                          cfs_err *err)
{
    hid_t a = H5Aopen(file, raw, H5P_DEFAULT);
    hid_t t = a >= 0 ? H5Aget_type(a) : -1, s = a >= 0 ? H5Aget_space(a) : -1;
    int rc = 0;
    uint64_t shape[CFS_MAX_DIMS];
    int ndim = 0;
    hssize_t np = 0;
    if (t < 0 || s < 0) {
        rc = cfs_err_set(err, "it cannot be opened");
    } else if (H5Sget_simple_extent_type(s) == H5S_NULL) {
        rc = cfs_err_set(err, "it holds no value (an empty HDF5 dataspace)");
    } else {
        hsize_t dims[H5S_MAX_RANK];
        ndim = H5Sget_simple_extent_dims(s, dims, NULL);
        np = H5Sget_simple_extent_npoints(s);
        if (ndim < 0 || ndim > CFS_MAX_DIMS || np < 0 || (uint64_t)np > LOOM_MAX_ATTR_ELEMS)
            rc = cfs_err_set(err, "it has an unusable shape");
        for (int d = 0; rc == 0 && d < ndim; d++)
            shape[d] = dims[d];
    }
    H5T_class_t cls = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
    cfs_dtype dt = CFS_FLOAT64;
    void *data = NULL;
    size_t n = (size_t)(np > 0 ? np : 0);
    if (rc == 0 && cls == H5T_STRING) {
        char **list;
        size_t got;
        if (cfs_h5_attr_strings(file, raw, &list, &got, err) <= 0 || got != n) {
            rc = -1;
        } else if (cfs_html_unescape_all(list, got, err) < 0) {
            free(list);
            rc = -1;
        } else {
            data = list;
            dt = CFS_STRING;
        }
    } else if (rc == 0 && (cls == H5T_INTEGER || cls == H5T_FLOAT)) {
        if (cfs_h5_dtype_of(t, &dt, err) < 0 || le_type(dt) < 0)
            rc = cfs_err_set(err, "its values are %s, which this reader does not support",
                             cfs_dtype_name(dt));
        else if (!(data = cfs_elems_alloc(n, cfs_dtype_size(dt), err)))
            rc = -1;
        else if (H5Aread(a, le_type(dt), data) < 0)
            rc = cfs_err_set(err, "it cannot be read");
    } else if (rc == 0) {
        char desc[96];
        cfs_h5_type_describe(t, desc, sizeof desc);
        rc = cfs_err_set(err, "its value is %s, which this reader does not support", desc);
    }
    if (s >= 0)
        H5Sclose(s);
    if (t >= 0)
        H5Tclose(t);
    if (a >= 0)
        H5Aclose(a);
    if (rc == 0 && !(*out = memory_elem(name, dt, ndim, shape, data))) {
        if (dt == CFS_STRING)
            cfs_strings_free(data, n);
        rc = cfs_err_oom(err);
    }
    if (rc < 0)
        free(data);
    return rc;
}

typedef struct name_list {
    char **names;
    size_t n, cap;
} name_list;

static herr_t collect_attr(hid_t loc, const char *name, const H5A_info_t *info, void *data)
{
    (void)loc;
    (void)info;
    name_list *l = data;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        char **grown = realloc(l->names, cap * sizeof *grown);
        if (!grown)
            return -1;
        l->names = grown;
        l->cap = cap;
    }
    if (!(l->names[l->n] = strdup(name)))
        return -1;
    l->n++;
    return l->n > 100000 ? -1 : 0;
}

static int read_root_attrs(lrd *r, cfs_elem *uns, cfs_err *err)
{
    name_list l = {0};
    hsize_t idx = 0;
    if (H5Aiterate2(r->file, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attr, &l) < 0) {
        cfs_h5_names_free(l.names, l.n);
        return leave_out(r->ds, "uns", "", err,
                         "the file's root attributes cannot be listed; no global attribute was "
                         "read");
    }
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < l.n; i++) {
        char *name = cfs_text_to_utf8(l.names[i], strlen(l.names[i]));
        cfs_elem *el = NULL;
        cfs_err why;
        if (!name)
            rc = cfs_err_oom(err);
        else if (read_root_attr(r->file, l.names[i], name, &el, &why) < 0)
            rc = leave_out(r->ds, "uns", name, err,
                           "the global attribute %s: %s; it was not read", name, why.msg);
        else
            rc = cfs_elem_add_or_free(uns, el, err);
        free(name);
    }
    cfs_h5_names_free(l.names, l.n);
    return rc;
}

/* /attrs/<name> (loom 3.0) as an uns value. */
static int read_attrs_entry(hid_t grp, const char *raw, const char *name, cfs_elem **out,
                            cfs_err *err)
{
    if (object_kind(grp, raw) != OBJ_DATASET)
        return cfs_err_set(err, "it is not a dataset");
    cfs_array *arr = NULL;
    if (cfs_h5_array_open(grp, raw, &arr, err) < 0)
        return -1;
    if (arr->dtype == CFS_STRING && !(arr = cfs_view_new(CFS_VIEW_UNESCAPE, arr)))
        return cfs_err_oom(err);
    cfs_elem_kind kind = arr->dtype == CFS_COMPOUND ? CFS_EL_RECARRAY
                         : arr->ndim == 0           ? CFS_EL_SCALAR
                                                    : CFS_EL_ARRAY;
    return (*out = cfs_elem_from_array(kind, name, arr)) ? 0 : cfs_err_oom(err);
}

static int read_globals(lrd *r, cfs_elem *root, cfs_err *err)
{
    cfs_elem *uns = cfs_elem_new(CFS_EL_DICT, "uns");
    if (!uns)
        return cfs_err_oom(err);
    int rc = 0;
    /* loompy: the /attrs group (3.0) replaces the root attributes (2.x) wholesale. */
    hid_t grp = group_open(r->file, "attrs");
    if (grp < 0) {
        rc = read_root_attrs(r, uns, err);
    } else {
        char **names = NULL;
        size_t n = 0;
        if (cfs_h5_group_names(grp, &names, &n, err) < 0) {
            cfs_err why = *err;
            n = 0;
            rc = leave_out(r->ds, "uns", "", err, "/attrs: %s; no global attribute was read",
                           why.msg);
        }
        for (size_t i = 0; rc == 0 && i < n; i++) {
            char *name = cfs_text_to_utf8(names[i], strlen(names[i]));
            cfs_elem *el = NULL;
            cfs_err why;
            if (!name)
                rc = cfs_err_oom(err);
            else if (read_attrs_entry(grp, names[i], name, &el, &why) < 0)
                rc = leave_out(r->ds, "uns", name, err,
                               "the global attribute attrs/%s: %s; it was not read", name, why.msg);
            else
                rc = cfs_elem_add_or_free(uns, el, err);
            free(name);
        }
        cfs_h5_names_free(names, n);
        H5Gclose(grp);
    }
    if (rc == 0 && uns->nchildren > 0)
        return cfs_elem_add_or_free(root, uns, err);
    cfs_elem_free(uns);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Version, orientation, the whole file */

/* LOOM_SPEC_VERSION as loompy finds it: /attrs first, then the root attribute. NULL if none. */
static char *spec_version(hid_t file)
{
    cfs_err ignore;
    char *v = NULL;
    hid_t grp = group_open(file, "attrs");
    if (grp >= 0 && object_kind(grp, "LOOM_SPEC_VERSION") == OBJ_DATASET) {
        cfs_array *arr = NULL;
        if (cfs_h5_array_open(grp, "LOOM_SPEC_VERSION", &arr, &ignore) == 0) {
            uint64_t zero[1] = {0}, one[1] = {1};
            char *s[1] = {NULL};
            if (arr->dtype == CFS_STRING && cfs_array_nelems(arr) == 1 &&
                cfs_array_read(arr, zero, one, s, &ignore) == 0)
                v = s[0];
            cfs_array_unref(arr);
        }
    }
    if (grp >= 0)
        H5Gclose(grp);
    if (!v && cfs_h5_attr_string(file, "LOOM_SPEC_VERSION", &v, &ignore) <= 0)
        v = NULL;
    if (v && strlen(v) > 32)
        v[32] = '\0';
    return v;
}

static const char *first_length(const attr_list *l, char *buf, size_t len)
{
    for (size_t i = 0; i < l->n; i++) {
        if (l->a[i].dataset && l->a[i].ndim >= 1) {
            snprintf(buf, len, "%s/%s has %llu values", l->group, l->a[i].name,
                     (ull)l->a[i].shape[0]);
            return buf;
        }
    }
    snprintf(buf, len, "%s is empty", l->group);
    return buf;
}

/* Chooses how /matrix is laid out from the attribute lengths; refuses when nothing fits. */
static int orient(lrd *r, cfs_err *err)
{
    uint64_t n0 = r->mshape[0], n1 = r->mshape[1];
    const attr_list *rows = &r->ax[0].attrs, *cols = &r->ax[1].attrs;
    size_t normal = count_fits(rows, n0) + count_fits(cols, n1);
    size_t swapped = count_fits(rows, n1) + count_fits(cols, n0);
    r->swapped = n0 != n1 && swapped > normal;
    if (count_data(rows) + count_data(cols) > 0 && normal == 0 && swapped == 0) {
        char a[300], b[300];
        return cfs_err_set(err, "its attributes fit neither axis of /matrix (%llu x %llu): %s, %s; "
                           "a loom /matrix is genes x cells with one row_attrs value per gene and "
                           "one col_attrs value per cell; " LOOM_HINT, (ull)n0, (ull)n1,
                           first_length(rows, a, sizeof a), first_length(cols, b, sizeof b));
    }
    r->ax[0].len = r->swapped ? n1 : n0;
    r->ax[1].len = r->swapped ? n0 : n1;
    return 0;
}

static void axes_init(lrd *r)
{
    axis *var = &r->ax[0], *obs = &r->ax[1];
    var->df = "var";
    var->multi = "varm";
    var->pairs = "varp";
    var->graphs[0] = "row_graphs";
    var->graphs[1] = "row_edges";
    var->unit = "genes";
    var->index_names = var_index_names;
    var->cells = false;
    obs->df = "obs";
    obs->multi = "obsm";
    obs->pairs = "obsp";
    obs->graphs[0] = "col_graphs";
    obs->graphs[1] = "col_edges";
    obs->unit = "cells";
    obs->index_names = obs_index_names;
    obs->cells = true;
    var->attrs.grp = obs->attrs.grp = -1;
}

static int read_main_matrix(lrd *r, cfs_array **out, cfs_err *err)
{
    obj_kind k = object_kind(r->file, "matrix");
    if (k != OBJ_DATASET)
        return cfs_err_set(err, "a loom file needs a /matrix dataset (genes x cells) and this one "
                           "has %s; " LOOM_HINT,
                           k == OBJ_NONE ? "none" : "a /matrix that is not a dataset");
    cfs_array *arr = NULL;
    if (cfs_h5_array_open(r->file, "matrix", &arr, err) < 0)
        return cfs_err_prefix(err, "its /matrix cannot be read");
    if (arr->ndim != 2 || !numeric_dtype(arr->dtype)) {
        cfs_err_set(err, "its /matrix is a %d-d %s array, not a 2-d numeric genes x cells "
                    "matrix; " LOOM_HINT, arr->ndim, cfs_dtype_name(arr->dtype));
        cfs_array_unref(arr);
        return -1;
    }
    if (arr->shape[0] > CFS_H5_MAX_AXIS || arr->shape[1] > CFS_H5_MAX_AXIS) {
        cfs_err_set(err, "its /matrix claims %llu x %llu, beyond the %llu rows or columns this "
                    "reader accepts (a corrupt header?)", (ull)arr->shape[0], (ull)arr->shape[1],
                    (ull)CFS_H5_MAX_AXIS);
        cfs_array_unref(arr);
        return -1;
    }
    r->mshape[0] = arr->shape[0];
    r->mshape[1] = arr->shape[1];
    *out = arr;
    return 0;
}

static int read_root(lrd *r, cfs_err *err)
{
    cfs_array *matrix = NULL;
    if (read_main_matrix(r, &matrix, err) < 0)
        return -1;
    if (attr_list_load(r->file, "row_attrs", &r->ax[0].attrs, err) < 0 ||
        attr_list_load(r->file, "col_attrs", &r->ax[1].attrs, err) < 0 || orient(r, err) < 0) {
        cfs_array_unref(matrix);
        return -1;
    }
    if (!r->swapped && !(matrix = cfs_view_new(CFS_VIEW_TRANSPOSE, matrix)))
        return cfs_err_oom(err);
    cfs_elem *root = r->ds->root, *obsm = NULL, *varm = NULL;
    r->ds->n_obs = r->ax[1].len;
    r->ds->n_vars = r->ax[0].len;
    int rc = read_axis(r, &r->ax[1], root, &obsm, err);
    if (rc == 0)
        rc = read_axis(r, &r->ax[0], root, &varm, err);
    if (rc == 0)
        rc = read_expression(r, matrix, root, err);
    else
        cfs_array_unref(matrix);
    if (rc == 0 && obsm) {
        rc = cfs_elem_add_or_free(root, obsm, err);
        obsm = NULL;
    }
    if (rc == 0 && varm) {
        rc = cfs_elem_add_or_free(root, varm, err);
        varm = NULL;
    }
    cfs_elem_free(obsm);
    cfs_elem_free(varm);
    if (rc == 0)
        rc = read_graphs(r, &r->ax[1], root, err);
    if (rc == 0)
        rc = read_graphs(r, &r->ax[0], root, err);
    if (rc == 0)
        rc = read_globals(r, root, err);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Probe and open */

/* 100 for the loom layout (a 2-d /matrix dataset with row_attrs and col_attrs groups); 60 when
 * one of the two groups is missing (an old or partial writer); half that for a /matrix of
 * another rank (refused at open, with the reason); 0 otherwise. A /matrix group is 10x. */
static int loom_bid(hid_t file, void *ctx)
{
    (void)ctx;
    if (object_kind(file, "matrix") != OBJ_DATASET)
        return 0;
    hid_t d = H5Dopen2(file, "matrix", H5P_DEFAULT);
    uint64_t shape[CFS_MAX_DIMS];
    int rank = d >= 0 ? dataset_dims(d, shape) : -1;
    if (d >= 0)
        H5Dclose(d);
    int groups = (object_kind(file, "row_attrs") == OBJ_GROUP) +
                 (object_kind(file, "col_attrs") == OBJ_GROUP);
    /* A /matrix of another rank is still a loom file, ours to refuse with why. */
    if (groups == 0 || rank < 0)
        return 0;
    return (groups == 2 ? 100 : 60) / (rank == 2 ? 1 : 2);
}

static int loom_probe(cfs_probe_input *in)
{
    return cfs_h5_probe(in, loom_bid, NULL);
}

static int build(const char *path, hid_t file, cfs_dataset **out, cfs_err *err)
{
    cfs_dataset *ds = cfs_dataset_new(path);
    char *version = spec_version(file);
    char fv[96];
    if (version)
        snprintf(fv, sizeof fv, "loom %s", version);
    else
        snprintf(fv, sizeof fv, "loom old (no LOOM_SPEC_VERSION)");
    free(version);
    if (!ds || !(ds->format_version = strdup(fv)) ||
        !(ds->root = cfs_elem_new(CFS_EL_ANNDATA, NULL))) {
        cfs_dataset_free(ds);
        return cfs_err_oom(err);
    }
    lrd r = {.ds = ds, .file = file};
    axes_init(&r);
    int rc = read_root(&r, err);
    for (int i = 0; i < 2; i++) {
        attr_list_free(&r.ax[i].attrs);
        cfs_array_unref(r.ax[i].index);
    }
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
    int rc = build(path, file, out, err);
    H5Fclose(file);
    return rc;
}

static int loom_open(const char *path, cfs_dataset **out, cfs_err *err)
{
    *out = NULL;
    cfs_h5_lock();
    int rc = open_locked(path, out, err);
    cfs_h5_unlock();
    return rc;
}

static const char *const loom_extensions[] = {".loom", NULL};

const cfs_format cfs_format_loom = {
    .name = "loom",
    .summary = "Loom files (.loom, loompy 2 and 3 and older)",
    .extensions = loom_extensions,
    .container = "HDF5",
    .probe = loom_probe,
    .peek_probe = cfs_h5_peek_probe,
    .open = loom_open,
};
