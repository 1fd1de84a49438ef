#include "dtype.h"

size_t cfs_dtype_size(cfs_dtype t)
{
    switch (t) {
    case CFS_BOOL: case CFS_INT8: case CFS_UINT8: return 1;
    case CFS_INT16: case CFS_UINT16: case CFS_FLOAT16: return 2;
    case CFS_INT32: case CFS_UINT32: case CFS_FLOAT32: return 4;
    case CFS_INT64: case CFS_UINT64: case CFS_FLOAT64: return 8;
    case CFS_STRING: return sizeof(char *);
    case CFS_COMPOUND: return 0;
    }
    return 0;
}

const char *cfs_dtype_name(cfs_dtype t)
{
    static const char *const names[] = {
        "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float16", "float32", "float64", "str", "record",
    };
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

bool cfs_dtype_is_integer(cfs_dtype t)
{
    return t >= CFS_INT8 && t <= CFS_UINT64;
}

bool cfs_dtype_is_signed(cfs_dtype t)
{
    return t >= CFS_INT8 && t <= CFS_INT64;
}

bool cfs_dtype_is_float(cfs_dtype t)
{
    return t >= CFS_FLOAT16 && t <= CFS_FLOAT64;
}
