#include "h5_array.h"

#include <stdlib.h>
#include <string.h>

#include "h5_dormant.h"
#include "h5_filters.h"
#include "h5_types.h"
#include "hdf5_util.h"
#include "remote.h"
#include "utf8.h"

/* Opening datasets: filters and chunk cache */

/* Refuses at open a pipeline libhdf5 cannot decode, so the mount never lists an array whose
 * every chunk read would fail. */
static int check_filters(hid_t dcpl, cfs_err *err)
{
    int nf = H5Pget_nfilters(dcpl);
    for (int i = 0; i < nf; i++) {
        unsigned flags = 0, config = 0;
        size_t nvals = 0;
        char stored[64] = "";
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &nvals, NULL, sizeof stored,
                                         stored, &config);
        if (id < 0)
            return cfs_err_set(err, "its compression filters cannot be listed");
        unsigned info = 0;
        if (H5Zfilter_avail(id) <= 0 || H5Zget_filter_info(id, &info) < 0 ||
            !(info & H5Z_FILTER_CONFIG_DECODE_ENABLED))
            return cfs_err_set(err, "it is compressed with HDF5 filter %d (%s), which this version "
                               "cannot decode; re-write it with gzip or no compression",
                               (int)id, cfs_h5_filter_name(id, stored));
    }
    return 0;
}

#define CFS_H5_CACHE_MIN ((size_t)1 << 20)
#define CFS_H5_CACHE_MAX ((size_t)16 << 20)
#define CFS_H5_CACHE_SLOTS 10007

/* A chunk cache that holds one full "row" of chunks (every chunk a row-range read touches) plus
 * one, bounded: the default 1 MiB cache re-decompresses a chunk for every row range otherwise.
 * 0 if the dataset is not chunked and compressed (nothing to gain). */
static size_t chunk_cache_bytes(hid_t dset, hid_t dcpl)
{
    if (H5Pget_layout(dcpl) != H5D_CHUNKED || H5Pget_nfilters(dcpl) <= 0)
        return 0;
    hsize_t cdims[H5S_MAX_RANK], dims[H5S_MAX_RANK];
    int rank = H5Pget_chunk(dcpl, H5S_MAX_RANK, cdims);
    hid_t space = H5Dget_space(dset), type = H5Dget_type(dset);
    int srank = space >= 0 ? H5Sget_simple_extent_dims(space, dims, NULL) : -1;
    size_t tsize = type >= 0 ? H5Tget_size(type) : 0;
    if (space >= 0)
        H5Sclose(space);
    if (type >= 0)
        H5Tclose(type);
    if (rank <= 0 || rank != srank || tsize == 0)
        return 0;
    double chunk = (double)tsize, across = 1;
    for (int d = 0; d < rank; d++) {
        chunk *= (double)cdims[d];
        if (d > 0 && cdims[d] > 0)
            across *= (double)((dims[d] + cdims[d] - 1) / cdims[d]);
    }
    double want = chunk * (across + 1);
    if (want < (double)CFS_H5_CACHE_MIN)
        return CFS_H5_CACHE_MIN;
    return want > (double)CFS_H5_CACHE_MAX ? CFS_H5_CACHE_MAX : (size_t)want;
}

/* The dataset again, with its access property list in *dapl (kept for later reopens). */
static hid_t reopen_with_cache(hid_t loc, const char *name, hid_t dset, size_t cache,
                               hid_t *dapl)
{
    hid_t pl = H5Pcreate(H5P_DATASET_ACCESS);
    if (pl < 0)
        return dset;
    hid_t again = -1;
    /* w0 = 1: chunks are read front to back, a fully read chunk is done with. */
    if (H5Pset_chunk_cache(pl, CFS_H5_CACHE_SLOTS, cache, 1.0) >= 0)
        again = H5Dopen2(loc, name, pl);
    if (again < 0) {
        H5Pclose(pl);
        return dset;
    }
    H5Dclose(dset);
    *dapl = pl;
    return again;
}

/* An open dataset whose filters libhdf5 can decode, and the access properties it was opened
 * with (H5P_DEFAULT, or a chunk cache sized for row-range reads: the caller closes it). */
static hid_t dataset_open(hid_t loc, const char *name, hid_t *dapl, cfs_err *err)
{
    *dapl = H5P_DEFAULT;
    hid_t dset = H5Dopen2(loc, name, H5P_DEFAULT);
    if (dset < 0) {
        cfs_err_set(err, "'%s' is missing or not a dataset", name);
        return -1;
    }
    hid_t dcpl = H5Dget_create_plist(dset);
    if (dcpl < 0) {
        H5Dclose(dset);
        cfs_err_set(err, "'%s' has no readable creation properties", name);
        return -1;
    }
    if (check_filters(dcpl, err) < 0 || cfs_h5_dataset_in_file(dset, err) < 0) {
        H5Pclose(dcpl);
        H5Dclose(dset);
        return -1;
    }
    size_t cache = chunk_cache_bytes(dset, dcpl);
    H5Pclose(dcpl);
    return cache ? reopen_with_cache(loc, name, dset, cache, dapl) : dset;
}

/* ------------------------------------------------------------------------------------------ */
/* Dataset-backed arrays */

typedef struct h5_array {
    cfs_h5_dset *dset;
    cfs_h5_type_plan plan;
    char *name;       /* for messages */
    /* A field array (one member of a 1-d compound dataset): plan.mem is a compound of that one
     * member, the dataset's one axis is the array's first; per_row > 1 for a member of an HDF5
     * array type [k], whose k values are the array's second axis. */
    bool field;
    uint64_t per_row;
} h5_array;

static void h5_array_free(void *ctx)
{
    h5_array *a = ctx;
    if (!a)
        return;
    cfs_h5_lock();
    if (a->plan.mem >= 0)
        H5Tclose(a->plan.mem);
    cfs_h5_dset_free(a->dset);
    cfs_h5_unlock();
    free(a->name);
    free(a);
}

/* A dataset that opened but whose chunks do not read (truncated, a corrupt compressed chunk). */
#define READ_FAILED_HINT "the file is damaged: re-download or re-create it"

/* Why a read failed: a URL's read that may pass (remote.h) is not damage, and the next read
 * tries again (CFS_ERETRY; the mount answers EIO meanwhile). */
static int read_failed(const h5_array *a, cfs_err *err)
{
    char detail[768];
    cfs_h5_error_detail(detail, sizeof detail);
    if (cfs_remote_failed())
        return cfs_err_setc(err, CFS_ERETRY, "reading %s failed: %s", a->name, detail);
    return cfs_err_set(err, "reading %s failed: %s; " READ_FAILED_HINT, a->name, detail);
}

static int read_strings_ds(const h5_array *a, hid_t dset, hid_t ms, hid_t fs, uint64_t n,
                           char **out, cfs_strpool *pool, cfs_err *err)
{
    void *raw = cfs_h5_alloc_elems(n, cfs_h5_strtype_elem_size(&a->plan.st), err);
    if (!raw)
        return -1;
    hid_t xfer = cfs_h5_vlen_xfer(pool, n);
    cfs_h5_str_dest d = {true, pool};
    int rc;
    if (xfer < 0 || H5Dread(dset, a->plan.mem, ms, fs, xfer, raw) < 0) {
        rc = read_failed(a, err);
    } else {
        rc = cfs_h5_strings_from_raw(&a->plan.st, raw, (size_t)n, &d, out, err);
    }
    if (xfer >= 0)
        H5Pclose(xfer);
    free(raw);
    return rc;
}

static int select_slab(hid_t fs, int ndim, const uint64_t *start, const uint64_t *count)
{
    if (ndim == 0)
        return 0;
    hsize_t hs[CFS_MAX_DIMS], hc[CFS_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        hs[d] = start[d];
        hc[d] = count[d];
    }
    return H5Sselect_hyperslab(fs, H5S_SELECT_SET, hs, NULL, hc, NULL) < 0 ? -1 : 0;
}

/* What a read selects in the file: a hyperslab (points NULL) or a list of points. */
typedef struct selection {
    int ndim;
    const uint64_t *start, *count;
    const hsize_t *points;
    uint64_t npoints;
} selection;

static int select_in(hid_t fs, const selection *sel)
{
    if (sel->points)
        return H5Sselect_elements(fs, H5S_SELECT_SET, sel->npoints, sel->points) < 0 ? -1 : 0;
    return select_slab(fs, sel->ndim, sel->start, sel->count);
}

/* Reads the selection's n values (n / per_row records for field arrays) into out. */
static int read_locked(const h5_array *a, const selection *sel, uint64_t n, void *out,
                       cfs_strpool *pool, cfs_err *err)
{
    cfs_remote_failures_clear();
    hid_t dset = cfs_h5_dset_id(a->dset, err);
    if (dset < 0)
        return -1;
    hsize_t hn = a->field ? n / a->per_row : n; /* field arrays: whole records */
    hid_t fs = H5Dget_space(dset);
    hid_t ms = H5Screate_simple(1, &hn, NULL);
    int rc = 0;
    if (fs < 0 || ms < 0 || select_in(fs, sel) < 0) {
        rc = cfs_err_set(err, "reading %s failed: the selection cannot be made", a->name);
    } else if (a->plan.dtype == CFS_STRING) {
        rc = read_strings_ds(a, dset, ms, fs, n, out, pool, err);
    } else if (H5Dread(dset, a->plan.mem, ms, fs, H5P_DEFAULT, out) < 0) {
        rc = read_failed(a, err);
    }
    if (ms >= 0)
        H5Sclose(ms);
    if (fs >= 0)
        H5Sclose(fs);
    return rc;
}

static int h5_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count, void *out,
                   cfs_strpool *pool, cfs_err *err);

/* Values outside the FALSE/TRUE enum convert to all-ones bytes; a bool is 0 or 1. */
static void bools_0_or_1(unsigned char *b, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        b[i] = b[i] != 0;
}

/* A field array of [k] values read for fewer than its k columns: whole records, then the
 * columns asked for. */
static int field_columns_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                              void *out, cfs_err *err)
{
    const h5_array *a = arr->ctx;
    size_t es = cfs_dtype_size(arr->dtype);
    uint64_t s2[2] = {start[0], 0}, c2[2] = {count[0], a->per_row};
    unsigned char *tmp = cfs_h5_alloc_elems(count[0] * a->per_row, es, err);
    if (!tmp)
        return -1;
    int rc = h5_read(arr, s2, c2, tmp, NULL, err);
    for (uint64_t r = 0; rc == 0 && r < count[0]; r++)
        memcpy((unsigned char *)out + r * count[1] * es, tmp + (r * a->per_row + start[1]) * es,
               (size_t)count[1] * es);
    free(tmp);
    return rc;
}

/* A read into out; strings go to pool, or are malloc'd one by one without it. */
static int h5_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count, void *out,
                   cfs_strpool *pool, cfs_err *err)
{
    const h5_array *a = arr->ctx;
    uint64_t n = 1;
    for (int d = 0; d < arr->ndim; d++) {
        if (start[d] > arr->shape[d] || count[d] > arr->shape[d] - start[d])
            return cfs_err_set(err, "reading %s failed: outside the array", a->name);
        n *= count[d]; /* bounded by the element count checked at open */
    }
    if (n == 0)
        return 0;
    if (a->field && a->per_row > 1 && (start[1] != 0 || count[1] != a->per_row))
        return field_columns_read(arr, start, count, out, err);
    selection sel = {a->field ? 1 : arr->ndim, start, count, NULL, 0};
    cfs_h5_lock();
    int rc = read_locked(a, &sel, n, out, pool, err);
    cfs_h5_unlock();
    if (rc == 0 && arr->dtype == CFS_BOOL)
        bools_0_or_1(out, n);
    return rc;
}

static int h5_array_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                         void *out, cfs_err *err)
{
    return h5_read(arr, start, count, out, NULL, err);
}

static int h5_array_read_strings(const cfs_array *arr, const uint64_t *start,
                                 const uint64_t *count, const char **out, cfs_strpool *pool,
                                 cfs_err *err)
{
    return h5_read(arr, start, count, out, pool, err);
}

/* Rows up to this many elements wide are read as one point selection: libhdf5 gathers the
 * points in one pass (through its sieve buffer, or each chunk once). Wider rows are read by
 * blocks of nearby rows, since each point costs libhdf5 about 0.1 us. (A union of hyperslabs
 * costs it time quadratic in their number: 3 s for 16,384 rows.) */
#define POINT_ROW_ELEMS 64u

/* The rows as one point selection (every element of each row, in C order). */
static int h5_array_read_rows(const cfs_array *arr, const uint64_t *rows, uint64_t n, void *out,
                              cfs_strpool *pool, cfs_err *err)
{
    const h5_array *a = arr->ctx;
    uint64_t row_elems = cfs_array_row_elems(arr);
    if (a->field || row_elems == 0 || row_elems > POINT_ROW_ELEMS)
        return cfs_array_read_rows_by_blocks(arr, rows, n, out, pool, err);
    int nd = arr->ndim;
    uint64_t npoints = n * row_elems;
    hsize_t *coords = malloc((size_t)npoints * (size_t)nd * sizeof *coords);
    if (!coords)
        return cfs_err_oom(err);
    hsize_t *c = coords;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t idx[CFS_MAX_DIMS] = {0};
        for (uint64_t e = 0; e < row_elems; e++) {
            *c++ = rows[i];
            for (int d = 1; d < nd; d++)
                *c++ = idx[d];
            for (int d = nd - 1; d >= 1; d--) {
                if (++idx[d] < arr->shape[d])
                    break;
                idx[d] = 0;
            }
        }
    }
    selection sel = {nd, NULL, NULL, coords, npoints};
    cfs_h5_lock();
    int rc = read_locked(a, &sel, npoints, out, pool, err);
    cfs_h5_unlock();
    free(coords);
    if (rc == 0 && arr->dtype == CFS_BOOL)
        bools_0_or_1(out, npoints);
    return rc;
}

static const cfs_array_ops h5_array_ops = {h5_array_read, h5_array_free,
                                           h5_array_read_strings, h5_array_read_rows, NULL};

/* The dataset's shape, checked against the ceilings before anyone allocates from it. */
static int dataset_shape(hid_t dset, const char *name, int *ndim, uint64_t *shape, cfs_err *err)
{
    hid_t space = H5Dget_space(dset);
    if (space < 0)
        return cfs_err_set(err, "'%s' has no readable dataspace", name);
    H5S_class_t sc = H5Sget_simple_extent_type(space);
    hsize_t dims[H5S_MAX_RANK];
    int rank = sc == H5S_SIMPLE ? H5Sget_simple_extent_dims(space, dims, NULL) : 0;
    H5Sclose(space);
    if (sc == H5S_NULL)
        return cfs_err_set(err, "'%s' holds no data (an empty HDF5 dataspace)", name);
    if (rank < 0 || rank > CFS_MAX_DIMS)
        return cfs_err_set(err, "'%s' has %d dimensions, more than the %d supported", name, rank,
                           CFS_MAX_DIMS);
    uint64_t total = 1;
    for (int d = 0; d < rank; d++) {
        if (dims[d] > CFS_H5_MAX_ELEMS || (dims[d] && total > CFS_H5_MAX_ELEMS / dims[d]))
            return cfs_err_set(err, "'%s' claims more than 2^50 elements (a corrupt header?)", name);
        total *= dims[d];
        shape[d] = dims[d];
    }
    *ndim = rank;
    return 0;
}

/* Takes over dset and dapl (kept by the array, or closed on failure). */
static int plain_array_open(hid_t dset, hid_t dapl, hid_t type, const char *name,
                            cfs_array **out, cfs_err *err)
{
    uint64_t shape[CFS_MAX_DIMS];
    int ndim;
    h5_array *a = NULL;
    cfs_array *arr = NULL;
    int rc = dataset_shape(dset, name, &ndim, shape, err);
    if (rc == 0 && !(a = calloc(1, sizeof *a)))
        rc = cfs_err_oom(err);
    if (rc == 0 && cfs_h5_plan_type(type, &a->plan, err) < 0)
        rc = -1;
    if (rc == 0 && !(a->name = strdup(name)))
        rc = cfs_err_oom(err);
    if (rc == 0 && !(arr = cfs_array_new(a->plan.dtype, ndim, shape, &h5_array_ops, a)))
        rc = cfs_err_oom(err);
    if (rc < 0) {
        h5_array_free(a);
        H5Dclose(dset);
        if (dapl != H5P_DEFAULT)
            H5Pclose(dapl);
        return -1;
    }
    if (!(a->dset = cfs_h5_dset_keep(dset, dapl, err))) {
        cfs_array_unref(arr); /* frees a */
        return -1;
    }
    *out = arr;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Rec-arrays: compound datasets, read whole at open */

#define CFS_H5_REC_MAX_BYTES ((size_t)256 << 20)
#define CFS_H5_REC_MAX_FIELDS 4096

typedef struct rec_field {
    char *raw_name;     /* HDF5 member name (libhdf5-allocated) */
    cfs_dtype dtype;
    bool is_str;
    cfs_h5_strtype st;
    hid_t mem;          /* member type in the read buffer */
    size_t tmp_off;     /* offset in the read buffer */
    size_t out_off, out_size;
} rec_field;

typedef struct rec_plan {
    rec_field *f;
    size_t nf;
    hid_t tmp;          /* compound read type */
    size_t tmp_size;
    uint64_t n;
    char **strs;        /* n * nf converted strings (NULL for numeric fields) */
} rec_plan;

static void rec_plan_free(rec_plan *p)
{
    for (size_t i = 0; i < p->nf; i++) {
        if (p->f[i].raw_name)
            H5free_memory(p->f[i].raw_name);
        if (p->f[i].mem >= 0)
            H5Tclose(p->f[i].mem);
    }
    if (p->strs)
        cfs_strings_free(p->strs, (size_t)p->n * p->nf);
    free(p->strs);
    free(p->f);
    if (p->tmp >= 0)
        H5Tclose(p->tmp);
}

static int rec_field_plan(hid_t ftype, unsigned i, rec_field *f, cfs_err *err)
{
    f->mem = -1;
    f->raw_name = H5Tget_member_name(ftype, i);
    hid_t mt = H5Tget_member_type(ftype, i);
    if (!f->raw_name || mt < 0) {
        if (mt >= 0)
            H5Tclose(mt);
        return cfs_err_set(err, "a record field cannot be described");
    }
    cfs_h5_type_plan p;
    int rc = 0;
    if (H5Tget_class(mt) == H5T_COMPOUND || cfs_h5_plan_type(mt, &p, err) < 0) {
        char desc[96];
        cfs_h5_type_describe(mt, desc, sizeof desc);
        rc = cfs_err_set(err, "its record field '%s' is %s, which this reader does not support",
                         f->raw_name, desc);
    } else {
        f->dtype = p.dtype;
        f->is_str = p.dtype == CFS_STRING;
        f->st = p.st;
        f->mem = p.mem;
    }
    H5Tclose(mt);
    return rc;
}

/* Builds the compound type the records are read into: numeric fields little-endian, string
 * fields in their own form (libhdf5 converts neither cset nor fixed <-> variable length). */
static int rec_plan_make(hid_t ftype, rec_plan *p, cfs_err *err)
{
    int nm = H5Tget_nmembers(ftype);
    if (nm <= 0 || nm > CFS_H5_REC_MAX_FIELDS)
        return cfs_err_set(err, "its record type has %d fields", nm);
    if (!(p->f = calloc((size_t)nm, sizeof *p->f)))
        return cfs_err_oom(err);
    for (int i = 0; i < nm; i++)
        p->f[i].mem = -1;
    p->nf = (size_t)nm;
    for (size_t i = 0; i < p->nf; i++) {
        if (rec_field_plan(ftype, (unsigned)i, &p->f[i], err) < 0)
            return -1;
        p->f[i].tmp_off = p->tmp_size;
        p->tmp_size += H5Tget_size(p->f[i].mem);
    }
    if ((p->tmp = H5Tcreate(H5T_COMPOUND, p->tmp_size)) < 0)
        return cfs_err_set(err, "libhdf5 could not make a record type");
    for (size_t i = 0; i < p->nf; i++)
        if (H5Tinsert(p->tmp, p->f[i].raw_name, p->f[i].tmp_off, p->f[i].mem) < 0)
            return cfs_err_set(err, "libhdf5 could not make a record type");
    return 0;
}

/* Converts every string field, frees libhdf5's vlen strings, and fixes the output layout:
 * a string field is as wide as its longest UTF-8 value (at least 1), NUL-padded. */
static int rec_strings(rec_plan *p, char *tmp, cfs_err *err)
{
    int rc = 0;
    size_t total = (size_t)p->n * p->nf;
    if (!(p->strs = calloc(total ? total : 1, sizeof *p->strs)))
        rc = cfs_err_oom(err);
    for (size_t i = 0; i < p->nf; i++) {
        rec_field *f = &p->f[i];
        f->out_size = f->is_str ? 1 : cfs_dtype_size(f->dtype);
        /* Every vlen string is handed back to libhdf5, also after a failure. */
        for (uint64_t r = 0; f->is_str && r < p->n; r++) {
            char *raw = tmp + r * p->tmp_size + f->tmp_off;
            char *s = NULL;
            if (rc == 0 && !(s = cfs_h5_string_element(&f->st, raw, &cfs_h5_from_libhdf5)))
                rc = cfs_err_oom(err);
            else if (rc < 0 && f->st.vlen) /* not consumed by cfs_h5_string_element */
                cfs_h5_vlen_release(*(char **)raw, &cfs_h5_from_libhdf5);
            if (s) {
                p->strs[r * p->nf + i] = s;
                if (strlen(s) > f->out_size)
                    f->out_size = strlen(s);
            }
        }
    }
    return rc;
}

static int rec_pack(rec_plan *p, const char *tmp, char **outbuf, size_t *record_size,
                    cfs_err *err)
{
    size_t rs = 0;
    for (size_t i = 0; i < p->nf; i++) {
        p->f[i].out_off = rs;
        rs += p->f[i].out_size;
    }
    char *buf = cfs_h5_alloc_elems(p->n, rs, err);
    if (!buf)
        return -1;
    for (uint64_t r = 0; r < p->n; r++) {
        for (size_t i = 0; i < p->nf; i++) {
            const rec_field *f = &p->f[i];
            char *dst = buf + r * rs + f->out_off;
            if (f->is_str) {
                const char *s = p->strs[r * p->nf + i];
                memcpy(dst, s, strlen(s)); /* the rest stays NUL from calloc */
            } else {
                memcpy(dst, tmp + r * p->tmp_size + f->tmp_off, f->out_size);
            }
        }
    }
    *outbuf = buf;
    *record_size = rs;
    return 0;
}

static int rec_fields(const rec_plan *p, cfs_field **out, cfs_err *err)
{
    cfs_field *fields = calloc(p->nf, sizeof *fields);
    if (!fields)
        return cfs_err_oom(err);
    for (size_t i = 0; i < p->nf; i++) {
        fields[i].name = cfs_text_to_utf8(p->f[i].raw_name, strlen(p->f[i].raw_name));
        fields[i].dtype = p->f[i].dtype;
        fields[i].offset = p->f[i].out_off;
        fields[i].size = p->f[i].out_size;
        if (!fields[i].name) {
            for (size_t k = 0; k < i; k++)
                free(fields[k].name);
            free(fields);
            return cfs_err_oom(err);
        }
    }
    *out = fields;
    return 0;
}

static int rec_read(hid_t dset, rec_plan *p, char **tmp, const char *name, cfs_err *err)
{
    size_t bytes;
    if (p->n > SIZE_MAX || __builtin_mul_overflow((size_t)p->n, p->tmp_size, &bytes) ||
        bytes > CFS_H5_REC_MAX_BYTES)
        return cfs_err_set(err, "'%s' is a record array of more than %zu MiB, too large to read "
                           "at open", name, CFS_H5_REC_MAX_BYTES >> 20);
    if (!(*tmp = calloc(bytes ? bytes : 1, 1)))
        return cfs_err_oom(err);
    if (p->n > 0 && H5Dread(dset, p->tmp, H5S_ALL, H5S_ALL, H5P_DEFAULT, *tmp) < 0) {
        char detail[256];
        cfs_h5_error_detail(detail, sizeof detail);
        return cfs_err_set(err, "reading '%s' failed: %s", name, detail);
    }
    return 0;
}

static int rec_array_open(hid_t dset, hid_t ftype, const char *name, cfs_array **out,
                          cfs_err *err)
{
    uint64_t shape[CFS_MAX_DIMS];
    int ndim;
    if (dataset_shape(dset, name, &ndim, shape, err) < 0)
        return -1;
    if (ndim != 1)
        return cfs_err_set(err, "'%s' is a %d-d record array; only 1-d ones are supported", name,
                           ndim);
    rec_plan p = {.tmp = -1, .n = shape[0]};
    char *tmp = NULL, *buf = NULL;
    size_t rs = 0;
    cfs_field *fields = NULL;
    int rc = -1;
    if (rec_plan_make(ftype, &p, err) == 0 && rec_read(dset, &p, &tmp, name, err) == 0 &&
        rec_strings(&p, tmp, err) == 0 && rec_pack(&p, tmp, &buf, &rs, err) == 0 &&
        rec_fields(&p, &fields, err) == 0) {
        cfs_array *arr = cfs_array_from_memory(CFS_COMPOUND, 1, shape, buf);
        if (arr) {
            arr->fields = fields;
            arr->nfields = p.nf;
            arr->record_size = rs;
            *out = arr;
            buf = NULL;
            fields = NULL;
            rc = 0;
        } else {
            cfs_err_oom(err);
        }
    }
    for (size_t i = 0; fields && i < p.nf; i++)
        free(fields[i].name);
    free(fields);
    free(buf);
    free(tmp);
    rec_plan_free(&p);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */

static int array_open_locked(hid_t loc, const char *name, cfs_array **out, cfs_err *err)
{
    hid_t dapl;
    hid_t dset = dataset_open(loc, name, &dapl, err);
    if (dset < 0)
        return -1;
    hid_t type = H5Dget_type(dset);
    int rc;
    bool plain = type >= 0 && !(H5Tget_class(type) == H5T_COMPOUND && !cfs_h5_is_complex(type));
    if (plain) {
        rc = plain_array_open(dset, dapl, type, name, out, err); /* owns dset, dapl now */
    } else {
        rc = type < 0 ? cfs_err_set(err, "'%s' has no readable datatype", name)
                      : rec_array_open(dset, type, name, out, err);
        H5Dclose(dset);
        if (dapl != H5P_DEFAULT)
            H5Pclose(dapl);
    }
    if (type >= 0)
        H5Tclose(type);
    return rc;
}

int cfs_h5_array_open(hid_t loc, const char *name, cfs_array **out, cfs_err *err)
{
    *out = NULL;
    cfs_h5_lock();
    int rc = array_open_locked(loc, name, out, err);
    cfs_h5_unlock();
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Field arrays: one member of a 1-d compound dataset, read on demand */

/* What the member values are (numbers, bools or strings; HDF5 arrays [k] of numbers): plans
 * a's read as a compound of that one member. */
static int field_plan(hid_t ftype, unsigned i, h5_array *a, uint64_t *k, cfs_err *err)
{
    char *mname = H5Tget_member_name(ftype, i);
    hid_t mt = H5Tget_member_type(ftype, i), base = -1, inner = -1;
    int rc = 0;
    *k = 1;
    if (!mname || mt < 0) {
        rc = cfs_err_set(err, "a record field cannot be described");
    } else if (H5Tget_class(mt) == H5T_ARRAY) {
        hsize_t dims[H5S_MAX_RANK];
        int rank = H5Tget_array_ndims(mt);
        base = H5Tget_super(mt);
        H5T_class_t bc = base >= 0 ? H5Tget_class(base) : H5T_NO_CLASS;
        if (rank != 1 || H5Tget_array_dims2(mt, dims) != 1)
            rc = cfs_err_set(err, "its field '%s' holds %d-d values; only 1-d ones are supported",
                             mname, rank);
        else if (bc != H5T_INTEGER && bc != H5T_FLOAT &&
                 !(bc == H5T_ENUM && cfs_h5_is_bool_enum(base)))
            rc = cfs_err_set(err, "its field '%s' holds arrays that are not numbers", mname);
        else if (dims[0] == 0 || dims[0] > CFS_H5_MAX_AXIS)
            rc = cfs_err_set(err, "its field '%s' holds arrays of %llu values", mname,
                             (unsigned long long)dims[0]);
        else
            *k = dims[0];
    }
    hid_t elem = base >= 0 ? base : mt;
    if (rc == 0 && cfs_h5_plan_type(elem, &a->plan, err) < 0)
        rc = -1;
    if (rc == 0 && a->plan.dtype == CFS_COMPOUND)
        rc = cfs_err_set(err, "its field '%s' holds records (nested records are not supported)",
                         mname);
    if (rc == 0 && *k > 1) {
        hsize_t d = *k;
        if ((inner = H5Tarray_create2(a->plan.mem, 1, &d)) < 0)
            rc = cfs_err_set(err, "libhdf5 could not make an array type");
    }
    if (rc == 0) {
        hid_t mem = inner >= 0 ? inner : a->plan.mem;
        hid_t wrap = H5Tcreate(H5T_COMPOUND, H5Tget_size(mem));
        if (wrap < 0 || H5Tinsert(wrap, mname, 0, mem) < 0) {
            if (wrap >= 0)
                H5Tclose(wrap);
            rc = cfs_err_set(err, "libhdf5 could not make a record type");
        } else {
            H5Tclose(a->plan.mem);
            a->plan.mem = wrap;
        }
    }
    if (inner >= 0)
        H5Tclose(inner);
    if (base >= 0)
        H5Tclose(base);
    if (mt >= 0)
        H5Tclose(mt);
    if (mname)
        H5free_memory(mname);
    return rc;
}

static int field_open_locked(hid_t loc, const char *name, unsigned member, cfs_array **out,
                             cfs_err *err)
{
    hid_t dapl;
    hid_t dset = dataset_open(loc, name, &dapl, err);
    if (dset < 0)
        return -1;
    hid_t type = H5Dget_type(dset);
    uint64_t shape[CFS_MAX_DIMS], k = 1;
    int ndim = 0, rc = 0;
    h5_array *a = calloc(1, sizeof *a);
    cfs_array *arr = NULL;
    if (!a)
        rc = cfs_err_oom(err);
    else
        a->plan.mem = -1;
    if (rc == 0 && (type < 0 || H5Tget_class(type) != H5T_COMPOUND ||
                    H5Tget_nmembers(type) <= (int)member))
        rc = cfs_err_set(err, "'%s' has no record field %u", name, member);
    if (rc == 0 && dataset_shape(dset, name, &ndim, shape, err) < 0)
        rc = -1;
    if (rc == 0 && ndim != 1)
        rc = cfs_err_set(err, "'%s' is a %d-d record array, not 1-d", name, ndim);
    if (rc == 0 && field_plan(type, member, a, &k, err) < 0)
        rc = -1;
    if (rc == 0 && shape[0] > CFS_H5_MAX_ELEMS / k)
        rc = cfs_err_set(err, "'%s' claims more than 2^50 elements (a corrupt header?)", name);
    if (rc == 0 && !(a->name = strdup(name)))
        rc = cfs_err_oom(err);
    if (rc == 0) {
        a->field = true;
        a->per_row = k;
        shape[1] = k;
        if (!(arr = cfs_array_new(a->plan.dtype, k > 1 ? 2 : 1, shape, &h5_array_ops, a)))
            rc = cfs_err_oom(err);
    }
    if (type >= 0)
        H5Tclose(type);
    if (rc < 0) {
        h5_array_free(a);
        H5Dclose(dset);
        if (dapl != H5P_DEFAULT)
            H5Pclose(dapl);
        return -1;
    }
    if (!(a->dset = cfs_h5_dset_keep(dset, dapl, err))) {
        cfs_array_unref(arr); /* frees a */
        return -1;
    }
    *out = arr;
    return 0;
}

int cfs_h5_field_array_open(hid_t loc, const char *name, unsigned member, cfs_array **out,
                            cfs_err *err)
{
    *out = NULL;
    cfs_h5_lock();
    int rc = field_open_locked(loc, name, member, out, err);
    cfs_h5_unlock();
    return rc;
}
