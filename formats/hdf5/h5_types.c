#include "h5_types.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hdf5_util.h"
#include "utf8.h"

/* Strings in every HDF5 form */

int cfs_h5_strtype_of(hid_t type, cfs_h5_strtype *st)
{
    htri_t v = H5Tis_variable_str(type);
    if (v < 0)
        return -1;
    st->vlen = v > 0;
    st->size = H5Tget_size(type);
    st->pad = H5Tget_strpad(type);
    st->cset = H5Tget_cset(type);
    if (!st->vlen && st->size == 0)
        return -1;
    return 0;
}

/* The memory type that reads the file's strings without conversion: HDF5 does not convert
 * between character sets, so the memory cset must match the file's. */
hid_t cfs_h5_strtype_mem(const cfs_h5_strtype *st)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0)
        return -1;
    if (H5Tset_size(t, st->vlen ? H5T_VARIABLE : st->size) < 0 ||
        H5Tset_cset(t, st->cset == H5T_CSET_UTF8 ? H5T_CSET_UTF8 : H5T_CSET_ASCII) < 0 ||
        H5Tset_strpad(t, st->vlen ? H5T_STR_NULLTERM : st->pad) < 0) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

size_t cfs_h5_strtype_elem_size(const cfs_h5_strtype *st)
{
    return st->vlen ? sizeof(char *) : st->size;
}

const cfs_h5_str_dest cfs_h5_from_libhdf5 = {false, NULL};

void cfs_h5_vlen_release(char *s, const cfs_h5_str_dest *d)
{
    if (!s || (d->ours && d->pool))
        return; /* pool memory goes with the pool */
    if (d->ours)
        free(s);
    else
        H5free_memory(s);
}

/* A malloc'd clean string moved where the read wants it. */
static char *settle(char *s, const cfs_h5_str_dest *d)
{
    if (!s || !d->pool)
        return s;
    char *in_pool = cfs_strpool_dup(d->pool, s, strlen(s));
    free(s);
    return in_pool;
}

/* A fixed-length element as a clean UTF-8 string: cut at the first NUL (NULLPAD values like
 * "0\0" exist) and right-trimmed for SPACEPAD. */
static char *fixed_element(const cfs_h5_strtype *st, const char *raw, const cfs_h5_str_dest *d)
{
    const char *nul = memchr(raw, '\0', st->size);
    size_t len = nul ? (size_t)(nul - raw) : st->size;
    if (st->pad == H5T_STR_SPACEPAD)
        while (len > 0 && raw[len - 1] == ' ')
            len--;
    return settle(cfs_text_to_utf8(raw, len), d);
}

/* A vlen element as a clean UTF-8 string, consuming it: one we allocated that is valid (nearly
 * every one) is handed on where it is; others are copied, Latin-1 transcoded to UTF-8. */
static char *vlen_element(char *s, const cfs_h5_str_dest *d)
{
    size_t len = s ? strlen(s) : 0;
    if (s && d->ours && cfs_utf8_valid((const unsigned char *)s, len))
        return s;
    char *out = settle(cfs_text_to_utf8(s ? s : "", len), d);
    cfs_h5_vlen_release(s, d);
    return out;
}

char *cfs_h5_string_element(const cfs_h5_strtype *st, char *raw, const cfs_h5_str_dest *d)
{
    return st->vlen ? vlen_element(*(char **)raw, d) : fixed_element(st, raw, d);
}

/* Converts n raw elements into clean strings in out, consuming the vlen buffers. */
int cfs_h5_strings_from_raw(const cfs_h5_strtype *st, void *raw, size_t n,
                            const cfs_h5_str_dest *d, char **out, cfs_err *err)
{
    size_t esize = cfs_h5_strtype_elem_size(st);
    size_t done = 0;
    while (done < n && (out[done] = cfs_h5_string_element(st, (char *)raw + done * esize, d)))
        done++;
    if (done == n)
        return 0;
    if (!d->pool)
        cfs_strings_free(out, done);
    for (size_t i = done + 1; st->vlen && i < n; i++)
        cfs_h5_vlen_release(((char **)raw)[i], d);
    return cfs_err_oom(err);
}

static void *vlen_alloc(size_t size, void *pool)
{
    return pool ? cfs_strpool_alloc(pool, size) : malloc(size);
}

static void vlen_free(void *p, void *pool)
{
    if (!pool)
        free(p);
}

/* The transfer property list of dataset string reads: libhdf5 allocates each vlen string in
 * the pool (packed, freed as one) or with malloc, so cfs_h5_strings_from_raw hands a valid one on
 * where it is instead of copying it (a column of 200,000 cell names is read at its first
 * chunk). Its conversion buffer is sized to the read: libhdf5 (before 1.14) allocates and zeroes
 * the whole buffer, 1 MiB by default, for every read that converts, however few values it
 * reads; a larger read is converted in pieces of it. */
hid_t cfs_h5_vlen_xfer(cfs_strpool *pool, uint64_t n)
{
    const uint64_t per_value = 32, least = 4096, most = UINT64_C(1) << 20;
    uint64_t bytes = n < most / per_value ? n * per_value : most;
    hid_t x = H5Pcreate(H5P_DATASET_XFER);
    if (x >= 0 && (H5Pset_vlen_mem_manager(x, vlen_alloc, pool, vlen_free, pool) < 0 ||
                   H5Pset_buffer(x, bytes < least ? least : bytes, NULL, NULL) < 0)) {
        H5Pclose(x);
        return -1;
    }
    return x;
}

void *cfs_h5_alloc_elems(uint64_t n, size_t esize, cfs_err *err)
{
    size_t bytes;
    if (n > SIZE_MAX || __builtin_mul_overflow((size_t)n, esize, &bytes)) {
        cfs_err_set(err, "a read of %llu elements is too large", (unsigned long long)n);
        return NULL;
    }
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p)
        cfs_err_setc(err, CFS_ENOMEM, "out of memory (%zu bytes)", bytes);
    return p;
}

/* h5py's numpy-bool type: an enum with exactly the members FALSE and TRUE over an integer. */
bool cfs_h5_is_bool_enum(hid_t type)
{
    if (H5Tget_class(type) != H5T_ENUM || H5Tget_nmembers(type) != 2)
        return false;
    bool seen_false = false, seen_true = false;
    for (unsigned i = 0; i < 2; i++) {
        char *m = H5Tget_member_name(type, i);
        if (!m)
            return false;
        seen_false |= strcmp(m, "FALSE") == 0;
        seen_true |= strcmp(m, "TRUE") == 0;
        H5free_memory(m);
    }
    hid_t super = H5Tget_super(type);
    bool int_base = super >= 0 && H5Tget_class(super) == H5T_INTEGER;
    if (super >= 0)
        H5Tclose(super);
    return seen_false && seen_true && int_base;
}

bool cfs_h5_is_r_logical_enum(hid_t type)
{
    if (H5Tget_class(type) != H5T_ENUM || H5Tget_nmembers(type) != 3)
        return false;
    int seen = 0;
    for (unsigned i = 0; i < 3; i++) {
        char *m = H5Tget_member_name(type, i);
        if (!m)
            return false;
        seen |= strcmp(m, "FALSE") == 0 ? 1 : strcmp(m, "TRUE") == 0 ? 2
              : strcmp(m, "NA") == 0 ? 4 : 0;
        H5free_memory(m);
    }
    hid_t super = H5Tget_super(type);
    bool int_base = super >= 0 && H5Tget_class(super) == H5T_INTEGER;
    if (super >= 0)
        H5Tclose(super);
    return seen == 7 && int_base;
}

hid_t cfs_h5_r_logical_mem_type(void)
{
    static const char *const names[] = {"FALSE", "TRUE", "NA"};
    hid_t t = H5Tenum_create(H5T_NATIVE_INT8);
    for (int8_t v = 0; t >= 0 && v < 3; v++)
        if (H5Tenum_insert(t, names[v], &v) < 0) {
            H5Tclose(t);
            t = -1;
        }
    return t;
}

/* A one-byte enum with h5py's member names: enum-to-enum conversion maps by name, so any
 * FALSE/TRUE enum (int8, uint8, big-endian, other values) reads as 0/1 bytes. */
hid_t cfs_h5_bool_mem_type(void)
{
    hid_t t = H5Tenum_create(H5T_NATIVE_INT8);
    if (t < 0)
        return -1;
    int8_t v = 0;
    if (H5Tenum_insert(t, "FALSE", &v) < 0) {
        H5Tclose(t);
        return -1;
    }
    v = 1;
    if (H5Tenum_insert(t, "TRUE", &v) < 0) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

/* ------------------------------------------------------------------------------------------ */
/* Types */

bool cfs_h5_is_complex(hid_t type)
{
    if (H5Tget_class(type) != H5T_COMPOUND || H5Tget_nmembers(type) != 2)
        return false;
    bool complex = true;
    for (unsigned i = 0; i < 2; i++) {
        char *m = H5Tget_member_name(type, i);
        complex &= m && strcmp(m, i == 0 ? "r" : "i") == 0;
        if (m)
            H5free_memory(m);
        complex &= H5Tget_member_class(type, i) == H5T_FLOAT;
    }
    return complex;
}

void cfs_h5_type_describe(hid_t type, char *buf, size_t len)
{
    size_t size = H5Tget_size(type);
    switch (H5Tget_class(type)) {
    case H5T_INTEGER:
        snprintf(buf, len, "%sint%zu", H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "", size * 8);
        return;
    case H5T_FLOAT: snprintf(buf, len, "float%zu", size * 8); return;
    case H5T_STRING: snprintf(buf, len, "string"); return;
    case H5T_ENUM:
        snprintf(buf, len, "%s", cfs_h5_is_bool_enum(type)        ? "bool"
                                 : cfs_h5_is_r_logical_enum(type) ? "R logical (FALSE, TRUE, NA)"
                                 : "an enumeration (not h5py's FALSE/TRUE bool)");
        return;
    case H5T_COMPOUND:
        if (cfs_h5_is_complex(type))
            snprintf(buf, len, "complex%zu", size * 8);
        else
            snprintf(buf, len, "a compound (record) type");
        return;
    case H5T_REFERENCE: snprintf(buf, len, "an HDF5 object reference"); return;
    case H5T_OPAQUE: snprintf(buf, len, "opaque bytes"); return;
    case H5T_ARRAY: snprintf(buf, len, "an HDF5 array type (array-valued elements)"); return;
    case H5T_VLEN: snprintf(buf, len, "a variable-length sequence type"); return;
    case H5T_BITFIELD: snprintf(buf, len, "a bitfield"); return;
    case H5T_TIME: snprintf(buf, len, "an HDF5 time type"); return;
    default: snprintf(buf, len, "an unknown HDF5 type"); return;
    }
}

static int refuse_type(hid_t type, cfs_err *err)
{
    char desc[96];
    cfs_h5_type_describe(type, desc, sizeof desc);
    return cfs_err_set(err, "its values are %s, which this reader does not support", desc);
}

static int plan_integer(hid_t type, cfs_h5_type_plan *p, cfs_err *err)
{
    static const cfs_dtype sdt[4] = {CFS_INT8, CFS_INT16, CFS_INT32, CFS_INT64};
    static const cfs_dtype udt[4] = {CFS_UINT8, CFS_UINT16, CFS_UINT32, CFS_UINT64};
    size_t size = H5Tget_size(type);
    int idx = size == 1 ? 0 : size == 2 ? 1 : size == 4 ? 2 : size == 8 ? 3 : -1;
    if (idx < 0)
        return refuse_type(type, err);
    bool sign = H5Tget_sign(type) != H5T_SGN_NONE;
    hid_t smem[4] = {H5T_STD_I8LE, H5T_STD_I16LE, H5T_STD_I32LE, H5T_STD_I64LE};
    hid_t umem[4] = {H5T_STD_U8LE, H5T_STD_U16LE, H5T_STD_U32LE, H5T_STD_U64LE};
    p->dtype = sign ? sdt[idx] : udt[idx];
    p->mem = H5Tcopy(sign ? smem[idx] : umem[idx]);
    return p->mem < 0 ? cfs_err_set(err, "libhdf5 could not copy a type") : 0;
}

/* IEEE binary16: sign at 15, exponent 10..14 with bias 15, mantissa 0..9, implied bit. */
static bool is_ieee_half(hid_t type)
{
    size_t spos, epos, esize, mpos, msize;
    if (H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0)
        return false;
    return spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10 &&
           H5Tget_ebias(type) == 15 && H5Tget_norm(type) == H5T_NORM_IMPLIED;
}

static int plan_float(hid_t type, cfs_h5_type_plan *p, cfs_err *err)
{
    size_t size = H5Tget_size(type);
    if (size == 2) {
        /* libhdf5 1.10 has no predefined half type: read the bytes through a little-endian copy
         * of the file's own type, which is no conversion at all on a little-endian file. */
        if (!is_ieee_half(type))
            return cfs_err_set(err, "its values are a 16-bit float that is not IEEE half precision");
        p->dtype = CFS_FLOAT16;
        p->mem = H5Tcopy(type);
        if (p->mem >= 0 && H5Tset_order(p->mem, H5T_ORDER_LE) < 0) {
            H5Tclose(p->mem);
            p->mem = -1;
        }
    } else if (size == 4 || size == 8) {
        p->dtype = size == 4 ? CFS_FLOAT32 : CFS_FLOAT64;
        p->mem = H5Tcopy(size == 4 ? H5T_IEEE_F32LE : H5T_IEEE_F64LE);
    } else {
        return refuse_type(type, err);
    }
    return p->mem < 0 ? cfs_err_set(err, "libhdf5 could not copy a type") : 0;
}

int cfs_h5_plan_type(hid_t type, cfs_h5_type_plan *p, cfs_err *err)
{
    p->mem = -1;
    switch (H5Tget_class(type)) {
    case H5T_INTEGER: return plan_integer(type, p, err);
    case H5T_FLOAT: return plan_float(type, p, err);
    case H5T_STRING:
        if (cfs_h5_strtype_of(type, &p->st) < 0)
            return cfs_err_set(err, "its values have an unusable string type");
        p->dtype = CFS_STRING;
        p->mem = cfs_h5_strtype_mem(&p->st);
        return p->mem < 0 ? cfs_err_set(err, "libhdf5 could not make a string type") : 0;
    case H5T_ENUM:
        if (cfs_h5_is_r_logical_enum(type)) {
            /* Read as its codes (0, 1, 2); the h5ad reader makes them a nullable bool. */
            p->dtype = CFS_INT8;
            p->mem = cfs_h5_r_logical_mem_type();
            return p->mem < 0 ? cfs_err_set(err, "libhdf5 could not make an enum type") : 0;
        }
        if (!cfs_h5_is_bool_enum(type))
            return refuse_type(type, err);
        p->dtype = CFS_BOOL;
        p->mem = cfs_h5_bool_mem_type();
        return p->mem < 0 ? cfs_err_set(err, "libhdf5 could not make a bool type") : 0;
    case H5T_COMPOUND:
        if (cfs_h5_is_complex(type))
            return refuse_type(type, err);
        p->dtype = CFS_COMPOUND;
        return 0;
    default:
        return refuse_type(type, err);
    }
}

int cfs_h5_dtype_of(hid_t type, cfs_dtype *out, cfs_err *err)
{
    cfs_h5_lock();
    cfs_h5_type_plan p;
    int rc = cfs_h5_plan_type(type, &p, err);
    if (rc == 0)
        *out = p.dtype;
    if (p.mem >= 0)
        H5Tclose(p.mem);
    cfs_h5_unlock();
    return rc;
}
