/*
 * How HDF5 datatypes are read into the dataset model, shared by the attribute readers
 * (hdf5_util.c) and the dataset-backed arrays (h5_array.c): the model dtype and memory type of
 * each file type, and strings of every HDF5 form (fixed or variable length, ASCII or UTF-8, any
 * padding) made clean UTF-8 (utf8.h's policy: what is not valid UTF-8 was Latin-1). Callers
 * hold cfs_h5_lock.
 */
#ifndef CFS_H5_TYPES_H
#define CFS_H5_TYPES_H

#include <hdf5.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* Maps an HDF5 datatype to a model dtype, or fails with a reason naming the type. Compound
 * types map to CFS_COMPOUND (rec-arrays); complex numbers are refused. Takes the lock. */
int cfs_h5_dtype_of(hid_t type, cfs_dtype *out, cfs_err *err);
/* A human-readable name of an HDF5 datatype, for messages ("int32", "complex", ...). */
void cfs_h5_type_describe(hid_t type, char *buf, size_t len);

/* h5py's numpy-bool type: an enum with exactly the members FALSE and TRUE over an integer. */
bool cfs_h5_is_bool_enum(hid_t type);
/* R's logical as hdf5r writes it (SeuratDisk): an enum with exactly FALSE, TRUE and NA. */
bool cfs_h5_is_r_logical_enum(hid_t type);
/* A one-byte enum FALSE = 0, TRUE = 1, NA = 2 that such an enum reads into; -1 on failure. */
hid_t cfs_h5_r_logical_mem_type(void);
/* A one-byte FALSE/TRUE enum that any such enum reads into as 0/1 bytes; -1 on failure. */
hid_t cfs_h5_bool_mem_type(void);
/* A compound of two floats named r and i (h5py's complex numbers). */
bool cfs_h5_is_complex(hid_t type);

/* A string type as the file has it. */
typedef struct cfs_h5_strtype {
    bool vlen;
    size_t size;       /* fixed length: bytes per element */
    H5T_str_t pad;
    H5T_cset_t cset;
} cfs_h5_strtype;

/* -1 if type is not a usable string type. */
int cfs_h5_strtype_of(hid_t type, cfs_h5_strtype *st);
/* The memory type that reads the file's strings without conversion (a fresh id, or -1). */
hid_t cfs_h5_strtype_mem(const cfs_h5_strtype *st);
/* Bytes per element in a read buffer: a pointer for vlen strings. */
size_t cfs_h5_strtype_elem_size(const cfs_h5_strtype *st);

/* Where a read's strings go, and who allocated its vlen buffers: libhdf5 for attributes (its
 * allocator need not be malloc, so it must free them), ours for dataset reads (cfs_h5_vlen_xfer),
 * which allocates in the pool when there is one, else with malloc. */
typedef struct cfs_h5_str_dest {
    bool ours;
    cfs_strpool *pool;      /* NULL: every string malloc'd on its own */
} cfs_h5_str_dest;

/* Attribute reads: libhdf5 allocated the vlen strings. */
extern const cfs_h5_str_dest cfs_h5_from_libhdf5;
/* The transfer property list of a dataset read of n strings into d = {true, pool} (-1 on
 * failure). */
hid_t cfs_h5_vlen_xfer(cfs_strpool *pool, uint64_t n);
/* Frees one vlen string of a read that was not consumed. */
void cfs_h5_vlen_release(char *s, const cfs_h5_str_dest *d);
/* One raw element (a vlen pointer, consumed, or fixed-length bytes) as a clean UTF-8 string
 * where d wants it; NULL on allocation failure. */
char *cfs_h5_string_element(const cfs_h5_strtype *st, char *raw, const cfs_h5_str_dest *d);
/* Converts n raw elements into clean strings in out, consuming the vlen buffers. */
int cfs_h5_strings_from_raw(const cfs_h5_strtype *st, void *raw, size_t n,
                            const cfs_h5_str_dest *d, char **out, cfs_err *err);
/* calloc of n elements of esize bytes (at least 1 byte), or NULL with err. */
void *cfs_h5_alloc_elems(uint64_t n, size_t esize, cfs_err *err);

/* How to read one HDF5 type: the model dtype and a memory type (always a fresh id, or -1 for
 * compound types, which are read field by field). */
typedef struct cfs_h5_type_plan {
    cfs_dtype dtype;
    hid_t mem;
    cfs_h5_strtype st;
} cfs_h5_type_plan;

/* Plans the read of type (p->mem is -1 or a fresh id the caller closes, also on failure). */
int cfs_h5_plan_type(hid_t type, cfs_h5_type_plan *p, cfs_err *err);

#endif
