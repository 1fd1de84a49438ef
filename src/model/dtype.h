/* Element types of the dataset model. Values are always little-endian in memory buffers. */
#ifndef CFS_DTYPE_H
#define CFS_DTYPE_H

#include <stdbool.h>
#include <stddef.h>

typedef enum cfs_dtype {
    CFS_BOOL,
    CFS_INT8,
    CFS_INT16,
    CFS_INT32,
    CFS_INT64,
    CFS_UINT8,
    CFS_UINT16,
    CFS_UINT32,
    CFS_UINT64,
    CFS_FLOAT16,
    CFS_FLOAT32,
    CFS_FLOAT64,
    CFS_STRING, /* UTF-8, one malloc'd char* per element in read buffers */
    CFS_COMPOUND /* fixed-size record; see cfs_array.fields */
} cfs_dtype;

/* Bytes per element in a read buffer (sizeof(char *) for CFS_STRING, 0 for CFS_COMPOUND). */
size_t cfs_dtype_size(cfs_dtype t);
/* numpy-style name: "bool", "int8", ..., "float64", "str", "record". */
const char *cfs_dtype_name(cfs_dtype t);
bool cfs_dtype_is_integer(cfs_dtype t);
bool cfs_dtype_is_signed(cfs_dtype t);
bool cfs_dtype_is_float(cfs_dtype t);

#endif
