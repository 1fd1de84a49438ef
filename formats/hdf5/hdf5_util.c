#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* recursive mutexes, setenv */
#endif

#include "hdf5_util.h"
#include "h5_dormant.h"

#include "utf8.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* H5Pset_file_locking arrived in 1.10.7 and 1.12.1 (not 1.12.0). */
#if H5_VERSION_GE(1, 12, 1) || (H5_VERS_MAJOR == 1 && H5_VERS_MINOR == 10 && H5_VERS_RELEASE >= 7)
#define CFS_H5_HAVE_FILE_LOCKING_API 1
#else
#define CFS_H5_HAVE_FILE_LOCKING_API 0
#endif

#if H5_VERSION_GE(1, 12, 0)
#define cfs_h5_reclaim(type, space, buf) H5Treclaim((type), (space), H5P_DEFAULT, (buf))
#else
#define cfs_h5_reclaim(type, space, buf) H5Dvlen_reclaim((type), (space), H5P_DEFAULT, (buf))
#endif

/* ------------------------------------------------------------------------------------------ */
/* The lock */

static pthread_mutex_t h5_mutex;
static pthread_once_t h5_once = PTHREAD_ONCE_INIT;
/* The automatic error printer is per-thread state in a thread-safe libhdf5, so every thread
 * that ever calls HDF5 must silence it once, not just the first. */
static _Thread_local bool h5_quiet;

static void h5_init(void)
{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&h5_mutex, &attr);
    pthread_mutexattr_destroy(&attr);
#if !CFS_H5_HAVE_FILE_LOCKING_API
    /* Without the property-list switch, this is the only way to keep libhdf5 from locking (and
     * failing on read-only media); it must be set before the library initialises. */
    setenv("HDF5_USE_FILE_LOCKING", "FALSE", 0);
#endif
}

void cfs_h5_lock(void)
{
    pthread_once(&h5_once, h5_init);
    pthread_mutex_lock(&h5_mutex);
    if (!h5_quiet) {
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
        h5_quiet = true;
    }
}

void cfs_h5_unlock(void)
{
    pthread_mutex_unlock(&h5_mutex);
}

/* ------------------------------------------------------------------------------------------ */
/* Signature, files, errors, groups */

const unsigned char cfs_h5_signature[CFS_H5_SIGNATURE_LEN] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

long long cfs_h5_signature_offset(const unsigned char *head, size_t len)
{
    for (size_t off = 0; off + CFS_H5_SIGNATURE_LEN <= len; off = off ? off * 2 : 512) {
        if (memcmp(head + off, cfs_h5_signature, CFS_H5_SIGNATURE_LEN) == 0)
            return (long long)off;
        if ((long long)off >= CFS_H5_SIGNATURE_SCAN_MAX)
            break;
    }
    return -1;
}

typedef struct detail_ctx {
    char *buf;
    size_t len;
} detail_ctx;

static herr_t detail_walk(unsigned n, const H5E_error2_t *e, void *data)
{
    detail_ctx *d = data;
    if (n == 0 && e->desc)
        snprintf(d->buf, d->len, "%s", e->desc);
    return 0;
}

void cfs_h5_error_detail(char *buf, size_t len)
{
    if (!len)
        return;
    buf[0] = '\0';
    detail_ctx d = {buf, len};
    cfs_h5_lock();
    /* Upward starts at the innermost frame, which names the actual cause ("truncated file",
     * "required filter is not registered") rather than the API call that failed. */
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, detail_walk, &d);
    cfs_h5_unlock();
}

hid_t cfs_h5_read_fapl(void)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0)
        return -1;
    /* WEAK: the file really closes when its last object does, so an array that outlives the
     * dataset's file id still reads correctly instead of holding a dead id. */
    H5Pset_fclose_degree(fapl, H5F_CLOSE_WEAK);
#if CFS_H5_HAVE_FILE_LOCKING_API
    H5Pset_file_locking(fapl, false, true);
#endif
    return fapl;
}

hid_t cfs_h5_file_open(const char *path, cfs_err *err)
{
    cfs_h5_lock();
    hid_t file = -1;
    hid_t fapl = cfs_h5_read_fapl();
    if (fapl < 0) {
        cfs_err_set(err, "libhdf5 could not create a file access property list");
        goto out;
    }
    file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (file < 0) {
        char detail[512];
        cfs_h5_error_detail(detail, sizeof detail);
        cfs_err_set(err, "%s", detail[0] ? detail : "libhdf5 could not open it");
    }
    H5Pclose(fapl);
out:
    cfs_h5_unlock();
    return file;
}

hid_t cfs_h5_input_open(const char *path, cfs_err *err)
{
    hid_t file = cfs_h5_file_open(path, err);
    if (file < 0) {
        char detail[sizeof err->msg];
        snprintf(detail, sizeof detail, "%s", err->msg);
        cfs_err_set(err, "not a readable HDF5 file (truncated or corrupt?): %s; re-download or "
                    "re-write it", detail);
    }
    return file;
}

void cfs_h5_names_free(char **names, size_t n)
{
    if (!names)
        return;
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* A group listing far beyond any AnnData file is a corrupt or hostile header. */
#define CFS_H5_MAX_LINKS 1000000

static char *link_name(hid_t grp, hsize_t i)
{
    ssize_t len = H5Lget_name_by_idx(grp, ".", H5_INDEX_NAME, H5_ITER_INC, i, NULL, 0, H5P_DEFAULT);
    if (len < 0)
        return NULL;
    char *name = malloc((size_t)len + 1);
    if (!name)
        return NULL;
    if (H5Lget_name_by_idx(grp, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, (size_t)len + 1,
                           H5P_DEFAULT) < 0) {
        free(name);
        return NULL;
    }
    return name;
}

int cfs_h5_group_names(hid_t grp, char ***names, size_t *n, cfs_err *err)
{
    *names = NULL;
    *n = 0;
    cfs_h5_lock();
    int rc = -1;
    H5G_info_t info;
    if (H5Gget_info(grp, &info) < 0) {
        cfs_err_set(err, "its members cannot be listed");
        goto out;
    }
    if (info.nlinks > CFS_H5_MAX_LINKS) {
        cfs_err_set(err, "claims %llu members, more than the %d this reader accepts",
                    (unsigned long long)info.nlinks, CFS_H5_MAX_LINKS);
        goto out;
    }
    char **list = calloc(info.nlinks ? (size_t)info.nlinks : 1, sizeof *list);
    if (!list) {
        cfs_err_set(err, "out of memory");
        goto out;
    }
    for (hsize_t i = 0; i < info.nlinks; i++) {
        if (!(list[i] = link_name(grp, i))) {
            cfs_h5_names_free(list, (size_t)i);
            cfs_err_set(err, "member %llu of the group cannot be named", (unsigned long long)i);
            goto out;
        }
    }
    *names = list;
    *n = (size_t)info.nlinks;
    rc = 0;
out:
    cfs_h5_unlock();
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* UTF-8 */

char *cfs_h5_utf8_dup(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    if (cfs_utf8_valid(u, len)) {
        char *out = malloc(len + 1);
        if (out) {
            memcpy(out, s, len);
            out[len] = '\0';
        }
        return out;
    }
    char *out = malloc(2 * len + 1);
    if (!out)
        return NULL;
    size_t j = 0;
    for (size_t i = 0; i < len; i++) {
        if (u[i] < 0x80) {
            out[j++] = (char)u[i];
        } else {
            out[j++] = (char)(0xc0 | (u[i] >> 6));
            out[j++] = (char)(0x80 | (u[i] & 0x3f));
        }
    }
    out[j] = '\0';
    return out;
}

/* ------------------------------------------------------------------------------------------ */
/* Strings in every HDF5 form */

typedef struct strtype {
    bool vlen;
    size_t size;       /* fixed length: bytes per element */
    H5T_str_t pad;
    H5T_cset_t cset;
} strtype;

static int strtype_of(hid_t type, strtype *st)
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
static hid_t strtype_mem(const strtype *st)
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

static size_t strtype_elem_size(const strtype *st)
{
    return st->vlen ? sizeof(char *) : st->size;
}

/* Where a read's strings go, and who allocated its vlen buffers: libhdf5 for attributes (its
 * allocator need not be malloc, so it must free them), ours for dataset reads (vlen_xfer),
 * which allocates in the pool when there is one, else with malloc. */
typedef struct str_dest {
    bool ours;
    cfs_strpool *pool;      /* NULL: every string malloc'd on its own */
} str_dest;

static const str_dest FROM_LIBHDF5 = {false, NULL};

static void vlen_release(char *s, const str_dest *d)
{
    if (!s || (d->ours && d->pool))
        return; /* pool memory goes with the pool */
    if (d->ours)
        free(s);
    else
        H5free_memory(s);
}

/* A malloc'd clean string moved where the read wants it. */
static char *settle(char *s, const str_dest *d)
{
    if (!s || !d->pool)
        return s;
    char *in_pool = cfs_strpool_dup(d->pool, s, strlen(s));
    free(s);
    return in_pool;
}

/* A fixed-length element as a clean UTF-8 string: cut at the first NUL (NULLPAD values like
 * "0\0" exist) and right-trimmed for SPACEPAD. */
static char *fixed_element(const strtype *st, const char *raw, const str_dest *d)
{
    const char *nul = memchr(raw, '\0', st->size);
    size_t len = nul ? (size_t)(nul - raw) : st->size;
    if (st->pad == H5T_STR_SPACEPAD)
        while (len > 0 && raw[len - 1] == ' ')
            len--;
    return settle(cfs_h5_utf8_dup(raw, len), d);
}

/* A vlen element as a clean UTF-8 string, consuming it: one we allocated that is valid (nearly
 * every one) is handed on where it is; others are copied, Latin-1 transcoded to UTF-8. */
static char *vlen_element(char *s, const str_dest *d)
{
    size_t len = s ? strlen(s) : 0;
    if (s && d->ours && cfs_utf8_valid((const unsigned char *)s, len))
        return s;
    char *out = settle(cfs_h5_utf8_dup(s ? s : "", len), d);
    vlen_release(s, d);
    return out;
}

static char *string_element(const strtype *st, char *raw, const str_dest *d)
{
    return st->vlen ? vlen_element(*(char **)raw, d) : fixed_element(st, raw, d);
}

/* Converts n raw elements into clean strings in out, consuming the vlen buffers. */
static int strings_from_raw(const strtype *st, void *raw, size_t n, const str_dest *d,
                            char **out, cfs_err *err)
{
    size_t esize = strtype_elem_size(st);
    size_t done = 0;
    while (done < n && (out[done] = string_element(st, (char *)raw + done * esize, d)))
        done++;
    if (done == n)
        return 0;
    if (!d->pool)
        cfs_strings_free(out, done);
    for (size_t i = done + 1; st->vlen && i < n; i++)
        vlen_release(((char **)raw)[i], d);
    return cfs_err_set(err, "out of memory");
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
 * the pool (packed, freed as one) or with malloc, so strings_from_raw hands a valid one on
 * where it is instead of copying it (a column of 200,000 cell names is read at its first
 * chunk). */
static hid_t vlen_xfer(cfs_strpool *pool)
{
    hid_t x = H5Pcreate(H5P_DATASET_XFER);
    if (x >= 0 && H5Pset_vlen_mem_manager(x, vlen_alloc, pool, vlen_free, pool) < 0) {
        H5Pclose(x);
        return -1;
    }
    return x;
}

static void *alloc_elems(uint64_t n, size_t esize, cfs_err *err)
{
    size_t bytes;
    if (n > SIZE_MAX || __builtin_mul_overflow((size_t)n, esize, &bytes)) {
        cfs_err_set(err, "a read of %llu elements is too large", (unsigned long long)n);
        return NULL;
    }
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p)
        cfs_err_set(err, "out of memory (%zu bytes)", bytes);
    return p;
}

/* ------------------------------------------------------------------------------------------ */
/* Attributes */

typedef struct attr_val {
    hid_t attr, type, space;
    H5T_class_t tclass;
    int rank;
    uint64_t npoints;
} attr_val;

static void attr_close(attr_val *a)
{
    if (a->space >= 0)
        H5Sclose(a->space);
    if (a->type >= 0)
        H5Tclose(a->type);
    if (a->attr >= 0)
        H5Aclose(a->attr);
}

/* 1 if open, 0 if absent, -1 on error. */
static int attr_open(hid_t obj, const char *name, attr_val *a, cfs_err *err)
{
    a->attr = a->type = a->space = -1;
    htri_t ex = H5Aexists(obj, name);
    if (ex < 0)
        return cfs_err_set(err, "its attribute '%s' cannot be looked up", name);
    if (ex == 0)
        return 0;
    a->attr = H5Aopen(obj, name, H5P_DEFAULT);
    if (a->attr >= 0)
        a->type = H5Aget_type(a->attr);
    if (a->type >= 0)
        a->space = H5Aget_space(a->attr);
    if (a->space < 0) {
        attr_close(a);
        return cfs_err_set(err, "its attribute '%s' cannot be opened", name);
    }
    a->tclass = H5Tget_class(a->type);
    H5S_class_t sc = H5Sget_simple_extent_type(a->space);
    a->rank = sc == H5S_SIMPLE ? H5Sget_simple_extent_ndims(a->space) : 0;
    hssize_t np = sc == H5S_NULL ? 0 : H5Sget_simple_extent_npoints(a->space);
    a->npoints = np > 0 ? (uint64_t)np : 0;
    return 1;
}

#define CFS_H5_MAX_ATTR_STRINGS 10000000

static int attr_read_strings(const attr_val *a, const char *name, char **out, cfs_err *err)
{
    strtype st;
    if (a->npoints > CFS_H5_MAX_ATTR_STRINGS || strtype_of(a->type, &st) < 0)
        return cfs_err_set(err, "its attribute '%s' has an unusable string type", name);
    void *raw = alloc_elems(a->npoints, strtype_elem_size(&st), err);
    if (!raw)
        return -1;
    hid_t mt = strtype_mem(&st);
    int rc;
    if (mt < 0 || H5Aread(a->attr, mt, raw) < 0) {
        char detail[256];
        cfs_h5_error_detail(detail, sizeof detail);
        rc = cfs_err_set(err, "its attribute '%s' cannot be read: %s", name, detail);
    } else {
        rc = strings_from_raw(&st, raw, (size_t)a->npoints, &FROM_LIBHDF5, out, err);
    }
    if (mt >= 0)
        H5Tclose(mt);
    free(raw);
    return rc;
}

static int attr_string_locked(hid_t obj, const char *name, char **out, cfs_err *err)
{
    attr_val a;
    int rc = attr_open(obj, name, &a, err);
    if (rc <= 0)
        return rc;
    if (a.tclass != H5T_STRING || a.npoints != 1)
        rc = cfs_err_set(err, "its attribute '%s' is not a single string", name);
    else
        rc = attr_read_strings(&a, name, out, err) < 0 ? -1 : 1;
    attr_close(&a);
    return rc;
}

int cfs_h5_attr_string(hid_t obj, const char *name, char **out, cfs_err *err)
{
    *out = NULL;
    cfs_h5_lock();
    int rc = attr_string_locked(obj, name, out, err);
    cfs_h5_unlock();
    return rc;
}

static int attr_strings_locked(hid_t obj, const char *name, char ***out, size_t *n, cfs_err *err)
{
    attr_val a;
    int rc = attr_open(obj, name, &a, err);
    if (rc <= 0)
        return rc;
    char **list = NULL;
    if (a.npoints > 0 && a.tclass != H5T_STRING) {
        rc = cfs_err_set(err, "its attribute '%s' is not a list of strings", name);
    } else if (!(list = alloc_elems(a.npoints, sizeof *list, err))) {
        rc = -1;
    } else if (a.npoints > 0 && attr_read_strings(&a, name, list, err) < 0) {
        free(list);
        list = NULL;
        rc = -1;
    } else {
        *out = list;
        *n = (size_t)a.npoints;
    }
    attr_close(&a);
    return rc;
}

int cfs_h5_attr_strings(hid_t obj, const char *name, char ***out, size_t *n, cfs_err *err)
{
    *out = NULL;
    *n = 0;
    cfs_h5_lock();
    int rc = attr_strings_locked(obj, name, out, n, err);
    cfs_h5_unlock();
    return rc;
}

/* h5py's numpy-bool type: an enum with exactly the members FALSE and TRUE over an integer. */
static bool is_bool_enum(hid_t type)
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

/* A one-byte enum with h5py's member names: enum-to-enum conversion maps by name, so any
 * FALSE/TRUE enum (int8, uint8, big-endian, other values) reads as 0/1 bytes. */
static hid_t bool_mem_type(void)
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

static int attr_bool_locked(hid_t obj, const char *name, bool *out, cfs_err *err)
{
    attr_val a;
    int rc = attr_open(obj, name, &a, err);
    if (rc <= 0)
        return rc;
    if (a.npoints != 1) {
        rc = cfs_err_set(err, "its attribute '%s' is not a single value", name);
    } else if (is_bool_enum(a.type)) {
        int8_t v = 0;
        hid_t mt = bool_mem_type();
        if (mt < 0 || H5Aread(a.attr, mt, &v) < 0)
            rc = cfs_err_set(err, "its attribute '%s' cannot be read", name);
        else
            *out = v != 0;
        if (mt >= 0)
            H5Tclose(mt);
    } else if (a.tclass == H5T_INTEGER) {
        long long v = 0;
        if (H5Aread(a.attr, H5T_NATIVE_LLONG, &v) < 0)
            rc = cfs_err_set(err, "its attribute '%s' cannot be read", name);
        else
            *out = v != 0;
    } else {
        rc = cfs_err_set(err, "its attribute '%s' is not a bool", name);
    }
    attr_close(&a);
    return rc;
}

int cfs_h5_attr_bool(hid_t obj, const char *name, bool *out, cfs_err *err)
{
    cfs_h5_lock();
    int rc = attr_bool_locked(obj, name, out, err);
    cfs_h5_unlock();
    return rc;
}

static int attr_shape2_locked(hid_t obj, const char *name, uint64_t out[2], cfs_err *err)
{
    attr_val a;
    int rc = attr_open(obj, name, &a, err);
    if (rc <= 0)
        return rc;
    long long v[2] = {0, 0};
    if (a.tclass != H5T_INTEGER || a.npoints != 2 || a.rank != 1)
        rc = cfs_err_set(err, "its attribute '%s' is not two integers", name);
    else if (H5Aread(a.attr, H5T_NATIVE_LLONG, v) < 0) /* uint64 beyond int64 clips: absurd anyway */
        rc = cfs_err_set(err, "its attribute '%s' cannot be read", name);
    else if (v[0] < 0 || v[1] < 0)
        rc = cfs_err_set(err, "its attribute '%s' is negative (%lld, %lld)", name, v[0], v[1]);
    else {
        out[0] = (uint64_t)v[0];
        out[1] = (uint64_t)v[1];
    }
    attr_close(&a);
    return rc;
}

int cfs_h5_attr_shape2(hid_t obj, const char *name, uint64_t out[2], cfs_err *err)
{
    cfs_h5_lock();
    int rc = attr_shape2_locked(obj, name, out, err);
    cfs_h5_unlock();
    return rc;
}

int cfs_h5_object_key(hid_t obj, cfs_h5_objkey *key)
{
    memset(key, 0, sizeof *key);
    cfs_h5_lock();
#if H5_VERSION_GE(1, 12, 0)
    H5O_info2_t info;
    herr_t rc = H5Oget_info3(obj, &info, H5O_INFO_BASIC);
    if (rc >= 0)
        memcpy(key->token, &info.token, sizeof info.token < sizeof key->token
                                             ? sizeof info.token : sizeof key->token);
#else
    H5O_info_t info;
    herr_t rc = H5Oget_info2(obj, &info, H5O_INFO_BASIC);
    if (rc >= 0)
        memcpy(key->token, &info.addr, sizeof info.addr);
#endif
    if (rc >= 0)
        key->fileno = info.fileno;
    cfs_h5_unlock();
    return rc < 0 ? -1 : 0;
}

bool cfs_h5_objkey_eq(const cfs_h5_objkey *a, const cfs_h5_objkey *b)
{
    return a->fileno == b->fileno && memcmp(a->token, b->token, sizeof a->token) == 0;
}

bool cfs_h5_has_attr(hid_t obj, const char *name)
{
    cfs_h5_lock();
    bool has = H5Aexists(obj, name) > 0;
    cfs_h5_unlock();
    return has;
}

/* ------------------------------------------------------------------------------------------ */
/* Types */

static bool is_complex(hid_t type)
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
        snprintf(buf, len, "%s",
                 is_bool_enum(type) ? "bool" : "an enumeration (not h5py's FALSE/TRUE bool)");
        return;
    case H5T_COMPOUND:
        if (is_complex(type))
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

/* How to read one HDF5 type: the model dtype and a memory type (always a fresh id, or -1 for
 * compound types, which are read field by field). */
typedef struct type_plan {
    cfs_dtype dtype;
    hid_t mem;
    strtype st;
} type_plan;

static int refuse_type(hid_t type, cfs_err *err)
{
    char desc[96];
    cfs_h5_type_describe(type, desc, sizeof desc);
    return cfs_err_set(err, "its values are %s, which this reader does not support", desc);
}

static int plan_integer(hid_t type, type_plan *p, cfs_err *err)
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

static int plan_float(hid_t type, type_plan *p, cfs_err *err)
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

static int plan_type(hid_t type, type_plan *p, cfs_err *err)
{
    p->mem = -1;
    switch (H5Tget_class(type)) {
    case H5T_INTEGER: return plan_integer(type, p, err);
    case H5T_FLOAT: return plan_float(type, p, err);
    case H5T_STRING:
        if (strtype_of(type, &p->st) < 0)
            return cfs_err_set(err, "its values have an unusable string type");
        p->dtype = CFS_STRING;
        p->mem = strtype_mem(&p->st);
        return p->mem < 0 ? cfs_err_set(err, "libhdf5 could not make a string type") : 0;
    case H5T_ENUM:
        if (!is_bool_enum(type))
            return refuse_type(type, err);
        p->dtype = CFS_BOOL;
        p->mem = bool_mem_type();
        return p->mem < 0 ? cfs_err_set(err, "libhdf5 could not make a bool type") : 0;
    case H5T_COMPOUND:
        if (is_complex(type))
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
    type_plan p;
    int rc = plan_type(type, &p, err);
    if (rc == 0)
        *out = p.dtype;
    if (p.mem >= 0)
        H5Tclose(p.mem);
    cfs_h5_unlock();
    return rc;
}

bool cfs_h5_dataset_is_null(hid_t dset)
{
    cfs_h5_lock();
    bool null = false;
    hid_t space = H5Dget_space(dset);
    if (space >= 0) {
        null = H5Sget_simple_extent_type(space) == H5S_NULL;
        H5Sclose(space);
    }
    cfs_h5_unlock();
    return null;
}

/* ------------------------------------------------------------------------------------------ */
/* Opening datasets: filters and chunk cache */

static const char *filter_name(H5Z_filter_t id, const char *stored)
{
    switch (id) {
    case 32000: return "lzf";
    case 32001: return "blosc";
    case 32004: return "lz4";
    case 32008: return "bitshuffle";
    case 32013: return "zfp";
    case 32015: return "zstd";
    case 307: return "bzip2";
    default: return stored[0] ? stored : "unnamed";
    }
}

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
            return cfs_err_set(err, "it is compressed with HDF5 filter %d (%s), which this libhdf5 "
                               "cannot decode; re-write the file with gzip compression or none",
                               (int)id, filter_name(id, stored));
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
    if (check_filters(dcpl, err) < 0) {
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
    type_plan plan;
    char *name;       /* for messages */
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

static int read_strings_ds(const h5_array *a, hid_t dset, hid_t ms, hid_t fs, uint64_t n,
                           char **out, cfs_strpool *pool, cfs_err *err)
{
    void *raw = alloc_elems(n, strtype_elem_size(&a->plan.st), err);
    if (!raw)
        return -1;
    hid_t xfer = vlen_xfer(pool);
    str_dest d = {true, pool};
    int rc;
    if (xfer < 0 || H5Dread(dset, a->plan.mem, ms, fs, xfer, raw) < 0) {
        char detail[256];
        cfs_h5_error_detail(detail, sizeof detail);
        rc = cfs_err_set(err, "reading %s failed: %s", a->name, detail);
    } else {
        rc = strings_from_raw(&a->plan.st, raw, (size_t)n, &d, out, err);
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

static int read_locked(const h5_array *a, int ndim, const uint64_t *start, const uint64_t *count,
                       uint64_t n, void *out, cfs_strpool *pool, cfs_err *err)
{
    hid_t dset = cfs_h5_dset_id(a->dset, err);
    if (dset < 0)
        return -1;
    hsize_t hn = n;
    hid_t fs = H5Dget_space(dset);
    hid_t ms = H5Screate_simple(1, &hn, NULL);
    int rc = 0;
    if (fs < 0 || ms < 0 || select_slab(fs, ndim, start, count) < 0) {
        rc = cfs_err_set(err, "reading %s failed: the selection cannot be made", a->name);
    } else if (a->plan.dtype == CFS_STRING) {
        rc = read_strings_ds(a, dset, ms, fs, n, out, pool, err);
    } else if (H5Dread(dset, a->plan.mem, ms, fs, H5P_DEFAULT, out) < 0) {
        char detail[256];
        cfs_h5_error_detail(detail, sizeof detail);
        rc = cfs_err_set(err, "reading %s failed: %s", a->name, detail);
    }
    if (ms >= 0)
        H5Sclose(ms);
    if (fs >= 0)
        H5Sclose(fs);
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
    cfs_h5_lock();
    int rc = read_locked(a, arr->ndim, start, count, n, out, pool, err);
    cfs_h5_unlock();
    if (rc == 0 && arr->dtype == CFS_BOOL) {
        /* Values outside the FALSE/TRUE enum convert to all-ones bytes; a bool is 0 or 1. */
        unsigned char *b = out;
        for (uint64_t i = 0; i < n; i++)
            b[i] = b[i] != 0;
    }
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

static const cfs_array_ops h5_array_ops = {h5_array_read, h5_array_free, h5_array_read_strings};

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
        rc = cfs_err_set(err, "out of memory");
    if (rc == 0 && plan_type(type, &a->plan, err) < 0)
        rc = -1;
    if (rc == 0 && !(a->name = strdup(name)))
        rc = cfs_err_set(err, "out of memory");
    if (rc == 0 && !(arr = cfs_array_new(a->plan.dtype, ndim, shape, &h5_array_ops, a)))
        rc = cfs_err_set(err, "out of memory");
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
    strtype st;
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
    type_plan p;
    int rc = 0;
    if (H5Tget_class(mt) == H5T_COMPOUND || plan_type(mt, &p, err) < 0) {
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
        return cfs_err_set(err, "out of memory");
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
        rc = cfs_err_set(err, "out of memory");
    for (size_t i = 0; i < p->nf; i++) {
        rec_field *f = &p->f[i];
        f->out_size = f->is_str ? 1 : cfs_dtype_size(f->dtype);
        /* Every vlen string is handed back to libhdf5, also after a failure. */
        for (uint64_t r = 0; f->is_str && r < p->n; r++) {
            char *raw = tmp + r * p->tmp_size + f->tmp_off;
            char *s = NULL;
            if (rc == 0 && !(s = string_element(&f->st, raw, &FROM_LIBHDF5)))
                rc = cfs_err_set(err, "out of memory");
            else if (rc < 0 && f->st.vlen) /* not consumed by string_element */
                vlen_release(*(char **)raw, &FROM_LIBHDF5);
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
    char *buf = alloc_elems(p->n, rs, err);
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
        return cfs_err_set(err, "out of memory");
    for (size_t i = 0; i < p->nf; i++) {
        fields[i].name = cfs_h5_utf8_dup(p->f[i].raw_name, strlen(p->f[i].raw_name));
        fields[i].dtype = p->f[i].dtype;
        fields[i].offset = p->f[i].out_off;
        fields[i].size = p->f[i].out_size;
        if (!fields[i].name) {
            for (size_t k = 0; k < i; k++)
                free(fields[k].name);
            free(fields);
            return cfs_err_set(err, "out of memory");
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
        return cfs_err_set(err, "out of memory");
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
            cfs_err_set(err, "out of memory");
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
    bool plain = type >= 0 && !(H5Tget_class(type) == H5T_COMPOUND && !is_complex(type));
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

static hid_t probe_file(const cfs_probe_input *in)
{
    cfs_probe_hdf5 *h5 = in->hdf5;
    if (!h5)
        return -1;
    if (!h5->tried) {
        cfs_err ignore;
        h5->file = cfs_h5_file_open(in->path, &ignore);
        h5->tried = true;
    }
    return h5->file;
}

int cfs_h5_probe(const cfs_probe_input *in, int (*bid)(hid_t file, void *ctx), void *ctx)
{
    if (in->is_dir || in->hdf5_offset < 0)
        return 0;
    cfs_h5_lock();
    hid_t file = probe_file(in);
    int result = file >= 0 ? bid(file, ctx) : 0;
    cfs_h5_unlock();
    return result;
}

static void cfs_h5_close_file(hid_t file)
{
    if (file < 0)
        return;
    cfs_h5_lock();
    H5Fclose(file);
    cfs_h5_unlock();
}

void cfs_h5_probe_release(cfs_probe_hdf5 *h5)
{
    if (h5->file >= 0)
        cfs_h5_close_file(h5->file);
    h5->file = -1;
    h5->tried = false;
}

