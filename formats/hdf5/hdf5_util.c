#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* recursive mutexes, setenv */
#endif

#include "hdf5_util.h"
#include "h5_filters.h"
#include "h5_types.h"
#include "h5_remote.h"
#include "h5_whole.h"
#include "remote.h"

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

/* Every open file has a metadata cache whose struct is about 0.5 MiB (a hash table of 64 Ki
 * pointers), allocated zeroed from libhdf5's free list of its kind; that list keeps at most
 * 64 KiB by default, so each open got fresh pages from the kernel (our mmap threshold is
 * 128 KiB, src/cli/main.c), faulted them all in to zero them and unmapped them at close: half
 * the CPU of a reader worker opening a small source (bench_many.py, perf). Its list may keep
 * a few of them; the other lists keep libhdf5's defaults (H5FL.c). */
static void keep_metadata_cache_on_free_list(void)
{
    H5set_free_list_limits(8 << 20, 4 << 20, 4 << 20, 256 << 10, 16 << 20, 1 << 20);
}

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
    /* cellucid-fs's own filter decoders, before any file is opened: libhdf5 looks in its
     * plugin folder only for ids not registered, so these are the ones used. */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    cfs_h5_filters_register();
    /* Nothing outside the input is read: without its class, libhdf5 cannot traverse an external
     * link (a link to an object of another file), however it is reached (a soft link to one,
     * or a path through one). The readers refuse one they meet with a reason. */
    H5Lunregister(H5L_TYPE_EXTERNAL);
    keep_metadata_cache_on_free_list();
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

void cfs_h5_preload(void)
{
    cfs_h5_lock();      /* the first call initialises the library */
    cfs_h5_unlock();
}

/* ------------------------------------------------------------------------------------------ */
/* Datasets whose values are elsewhere */

int cfs_h5_dataset_in_file(hid_t dset, cfs_err *err)
{
    hid_t dcpl = H5Dget_create_plist(dset);
    if (dcpl < 0)
        return cfs_err_set(err, "its storage properties cannot be read");
    int external = H5Pget_external_count(dcpl);
    H5D_layout_t layout = H5Pget_layout(dcpl);
    H5Pclose(dcpl);
    if (external != 0)
        return cfs_err_setc(err, CFS_EREFUSED, "its values are kept in another file (HDF5 "
                            "external storage), which is not read; re-write the file with the "
                            "values inside it");
    if (layout == H5D_VIRTUAL)
        return cfs_err_setc(err, CFS_EREFUSED, "it is a virtual dataset, whose values are kept "
                            "in other datasets or files, which are not read; re-write the file "
                            "with the values inside it");
    return layout < 0 ? cfs_err_set(err, "its storage layout cannot be read") : 0;
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

hid_t cfs_h5_read_fapl(const char *path)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0)
        return -1;
    if (cfs_is_url(path)) {
        hid_t driver = cfs_h5_remote_driver();
        if (driver < 0 || H5Pset_driver(fapl, driver, NULL) < 0) {
            H5Pclose(fapl);
            return -1;
        }
    }
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
    hid_t fapl = cfs_h5_read_fapl(path);
    if (fapl < 0) {
        cfs_err_set(err, "libhdf5 could not create a file access property list");
        goto out;
    }
    file = cfs_h5_whole_open(path, fapl);
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
        cfs_err_setc(err, CFS_EDAMAGED, "not a readable HDF5 file (truncated or corrupt?): %s; "
                     "re-download or re-write it", detail);
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
        cfs_err_oom(err);
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
    cfs_h5_strtype st;
    if (a->npoints > CFS_H5_MAX_ATTR_STRINGS || cfs_h5_strtype_of(a->type, &st) < 0)
        return cfs_err_set(err, "its attribute '%s' has an unusable string type", name);
    void *raw = cfs_h5_alloc_elems(a->npoints, cfs_h5_strtype_elem_size(&st), err);
    if (!raw)
        return -1;
    hid_t mt = cfs_h5_strtype_mem(&st);
    int rc;
    if (mt < 0 || H5Aread(a->attr, mt, raw) < 0) {
        char detail[256];
        cfs_h5_error_detail(detail, sizeof detail);
        rc = cfs_err_set(err, "its attribute '%s' cannot be read: %s", name, detail);
    } else {
        rc = cfs_h5_strings_from_raw(&st, raw, (size_t)a->npoints, &cfs_h5_from_libhdf5, out, err);
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
    } else if (!(list = cfs_h5_alloc_elems(a.npoints, sizeof *list, err))) {
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

static int attr_bool_locked(hid_t obj, const char *name, bool *out, cfs_err *err)
{
    attr_val a;
    int rc = attr_open(obj, name, &a, err);
    if (rc <= 0)
        return rc;
    if (a.npoints != 1) {
        rc = cfs_err_set(err, "its attribute '%s' is not a single value", name);
    } else if (cfs_h5_is_bool_enum(a.type)) {
        int8_t v = 0;
        hid_t mt = cfs_h5_bool_mem_type();
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

/* What the HDF5 formats share during one detection. */
typedef struct probe_state {
    long long offset;   /* of the superblock, or -1 */
    hid_t file;         /* -1 until opened, or when it cannot be */
    bool tried;
} probe_state;

static const char probe_key = 0;

static long long find_signature(cfs_probe_input *in)
{
    size_t len;
    const unsigned char *head = cfs_probe_head(in, &len);
    long long off = cfs_h5_signature_offset(head, len);
    if (off >= 0)
        return off;
    for (long long at = CFS_PROBE_HEAD_LEN; at <= CFS_H5_SIGNATURE_SCAN_MAX; at *= 2) {
        unsigned char sig[CFS_H5_SIGNATURE_LEN];
        if (at + CFS_H5_SIGNATURE_LEN > (long long)cfs_probe_size(in))
            break;
        if (cfs_probe_read(in, (uint64_t)at, sig, sizeof sig) == (ssize_t)sizeof sig &&
            memcmp(sig, cfs_h5_signature, sizeof sig) == 0)
            return at;
    }
    return -1;
}

static void *probe_state_make(cfs_probe_input *in)
{
    probe_state *st = malloc(sizeof *st);
    if (st) {
        /* A gzip, bzip2 or xz stream is not an HDF5 file as it is, whatever bytes it holds: the
         * daemon asks whether a compressed copy needs decompressing, and libhdf5 is not to be
         * run on a crafted one there (docs/design.md §2.4). */
        st->offset = cfs_probe_is_dir(in) || cfs_probe_compression(in) ? -1 : find_signature(in);
        st->file = -1;
        st->tried = false;
    }
    return st;
}

static void cfs_h5_close_file(hid_t file)
{
    if (file < 0)
        return;
    cfs_h5_lock();
    H5Fclose(file);
    cfs_h5_unlock();
}

static void probe_state_release(void *state)
{
    probe_state *st = state;
    cfs_h5_close_file(st->file);
    free(st);
}

static probe_state *probe_state_of(cfs_probe_input *in)
{
    return cfs_probe_memo(in, &probe_key, probe_state_make, probe_state_release);
}

int cfs_h5_peek_probe(const unsigned char *head, size_t len)
{
    return cfs_h5_signature_offset(head, len) >= 0 ? 50 : 0;
}

long long cfs_h5_probe_offset(cfs_probe_input *in)
{
    probe_state *st = probe_state_of(in);
    return st ? st->offset : -1;
}

int cfs_h5_probe(cfs_probe_input *in, int (*bid)(hid_t file, void *ctx), void *ctx)
{
    probe_state *st = probe_state_of(in);
    if (!st || st->offset < 0)
        return 0;
    cfs_h5_lock();
    if (!st->tried) {
        cfs_err ignore;
        st->file = cfs_h5_file_open(cfs_probe_path(in), &ignore);
        st->tried = true;
    }
    int result = st->file >= 0 ? bid(st->file, ctx) : 0;
    cfs_h5_unlock();
    return result;
}

