/*
 * What the HDF5 readers (h5ad.c, loom.c, tenx.c; outs.c through tenx.h) share: the lock around
 * every libhdf5 call, finding the signature and opening files read-only, attributes and group
 * listings in any of the forms writers leave, the size ceilings checked before allocating, and
 * the probe the HDF5 formats share during one detection. HDF5 types to model dtypes are in
 * h5_types.h, datasets opened as model arrays (read on demand, by hyperslab) in h5_array.h.
 */
#ifndef CFS_HDF5_UTIL_H
#define CFS_HDF5_UTIL_H

#include <hdf5.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "format.h"

/*
 * libhdf5 is not thread-efficient (and Debian's serial build is not guaranteed thread-safe):
 * every HDF5 call of every reader happens under this lock. It is recursive, so a reader may hold
 * it across a whole open while the helpers below take it again. Every helper here locks itself;
 * callers that make raw H5* calls must hold it.
 */
void cfs_h5_lock(void);
/* Initialises libhdf5 (and registers our filters) now rather than at the first call. */
void cfs_h5_preload(void);
void cfs_h5_unlock(void);

/* User blocks are powers of two >= 512, so the signature is looked for at 0, 512, 1024, ...
 * up to this offset (libhdf5 itself goes further; files with > 1 MiB user blocks are unheard of). */
#define CFS_H5_SIGNATURE_SCAN_MAX ((long long)1 << 20)
#define CFS_H5_SIGNATURE_LEN 8
extern const unsigned char cfs_h5_signature[CFS_H5_SIGNATURE_LEN];

/* Offset of the HDF5 signature (0, 512, 1024, ...) in the file's first bytes, or -1. */
long long cfs_h5_signature_offset(const unsigned char *head, size_t len);

/* Opens a file read-only, without file locking (the source is never written or locked). The
 * file stays open until its last object id is closed, so arrays may outlive the file id.
 * Returns a file id, or -1 with libhdf5's own reason in err. */
hid_t cfs_h5_file_open(const char *path, cfs_err *err);
/* cfs_h5_file_open for a reader's input: a failure says the file is damaged and what to do.
 * The model's arrays keep their own dataset handles (h5_dormant.h), so the reader closes the
 * file id once its open is done, whatever the outcome. */
hid_t cfs_h5_input_open(const char *path, cfs_err *err);
/* The file access properties of every open here: read-only use, weak close, no locking; a URL
 * (remote.h) is read through the remote driver (h5_remote.h). Call under cfs_h5_lock. */
hid_t cfs_h5_read_fapl(const char *path);

/* The most specific message on this thread's HDF5 error stack ("" if none), e.g. "truncated
 * file: eof = 1024, ...". Call it right after the failing call. */
void cfs_h5_error_detail(char *buf, size_t len);

/* Names of the links in a group, in name order (h5py's iteration order). The names are the raw
 * link names (use them for H5 calls). Free with cfs_h5_names_free. */
int cfs_h5_group_names(hid_t grp, char ***names, size_t *n, cfs_err *err);
void cfs_h5_names_free(char **names, size_t n);

/*
 * Attributes. Each returns 1 if the attribute was read, 0 if it is absent, -1 (with err) if it
 * is present but unusable.
 */
/* A string in any HDF5 form: variable or fixed length, ASCII or UTF-8, any padding, scalar or a
 * 1-element array. */
int cfs_h5_attr_string(hid_t obj, const char *name, char **out, cfs_err *err);
/* A list of strings: a string array, a single string (a 1-element list), or an empty array of
 * any type (h5py writes an empty list as float64[0]). Free with cfs_h5_names_free. */
int cfs_h5_attr_strings(hid_t obj, const char *name, char ***out, size_t *n, cfs_err *err);
/* h5py's FALSE/TRUE enum or any integer (non-zero = true); scalar or 1-element. */
int cfs_h5_attr_bool(hid_t obj, const char *name, bool *out, cfs_err *err);
/* Two non-negative integers of any integer type (a sparse matrix's `shape`). */
int cfs_h5_attr_shape2(hid_t obj, const char *name, uint64_t out[2], cfs_err *err);

/* Dimension and element-count ceilings: a header claiming more is refused before anything is
 * allocated (docs/design.md §6). 2^32 per axis is beyond any single-cell data set. */
#define CFS_H5_MAX_AXIS ((uint64_t)1 << 32)
#define CFS_H5_MAX_ELEMS ((uint64_t)1 << 50)

/*
 * Datasets. Their types: h5_types.h; datasets as arrays of the model: h5_array.h.
 */
/* True if the dataset's dataspace is H5S_NULL (h5py's empty dataset; anndata's `null`). */
bool cfs_h5_dataset_is_null(hid_t dset);
/* Identity of an object inside its file, to catch groups that link back to an ancestor. */
typedef struct cfs_h5_objkey {
    unsigned long fileno;
    unsigned char token[16];
} cfs_h5_objkey;
int cfs_h5_object_key(hid_t obj, cfs_h5_objkey *key);
bool cfs_h5_objkey_eq(const cfs_h5_objkey *a, const cfs_h5_objkey *b);

/* True if the dataset has an attribute of that name. */
bool cfs_h5_has_attr(hid_t obj, const char *name);

/* The peek_probe of the HDF5 formats: the decompressed stream starts an HDF5 file (its signature
 * at 0, 512, 1024 or 2048), which libhdf5 can open only once it is a file on disk. */
int cfs_h5_peek_probe(const unsigned char *head, size_t len);

/* The offset of the input's HDF5 superblock, or -1 (a folder, or not HDF5): looked for once per
 * detection, in the first bytes and then by reads at 4 KiB, 8 KiB, ... (cfs_probe_read). */
long long cfs_h5_probe_offset(cfs_probe_input *in);

/*
 * The probe every HDF5 format shares: asks bid(file, ctx) for a confidence under the lock; 0 for
 * folders, non-HDF5 content or an unreadable file. The file is the input's shared one (kept in
 * its cfs_probe_memo), opened at the first probe: opening an HDF5 file builds a metadata cache
 * of about half a MiB, so once per detection, not once per bidder. The registry keeps the input
 * open until the chosen format's open has run, because libhdf5 then serves that open (same
 * device and inode) from the file already open, its metadata cache warm from the probes.
 */
int cfs_h5_probe(cfs_probe_input *in, int (*bid)(hid_t file, void *ctx), void *ctx);

/* 0 if the values of dataset dset are in its own file; -1 with the reason when libhdf5 would
 * read them from another file (external storage, or a virtual dataset): nothing outside the
 * input is read, whatever its bytes say. */
int cfs_h5_dataset_in_file(hid_t dset, cfs_err *err);

#endif
