/* Zarr v2 metadata documents (.zarray, .zattrs, .zgroup, .zmetadata), serialised the way
 * zarr-python writes them (indent 4, sorted keys, ASCII) so every store is reproducible. */
#ifndef CFS_ZMETA_H
#define CFS_ZMETA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

/* NumPy typestr of a numeric dtype ("|b1", "<i4", "<f2", ...); "|O" for CFS_STRING. */
const char *cfs_zarr_dtype(cfs_dtype t);
/* The concrete fill value of a dtype: 0, 0.0, false or "" (new reference). */
json_t *cfs_zarr_fill_value(cfs_dtype t);
/* A .zarray document; steals references to dtype, fill_value, compressor and filters. */
json_t *cfs_zarray_doc(int ndim, const uint64_t *shape, const uint64_t *chunks, json_t *dtype,
                       json_t *fill_value, json_t *compressor, json_t *filters);
json_t *cfs_zgroup_doc(void);
/* {"encoding-type": type, "encoding-version": version} */
json_t *cfs_encoding_attrs(const char *type, const char *version);
/* A JSON string of the base64 of nbytes zero bytes (zarr's fill value of a record dtype). */
json_t *cfs_json_zero_base64(size_t nbytes);
/* A JSON array of n uint64 values. */
json_t *cfs_json_u64_array(int n, const uint64_t *values);
/* Serialises a document; the caller frees. NULL on allocation failure. */
char *cfs_zmeta_dump(const json_t *doc);

#endif
