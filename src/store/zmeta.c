#include "zmeta.h"

#include <stdlib.h>

const char *cfs_zarr_dtype(cfs_dtype t)
{
    switch (t) {
    case CFS_BOOL: return "|b1";
    case CFS_INT8: return "|i1";
    case CFS_INT16: return "<i2";
    case CFS_INT32: return "<i4";
    case CFS_INT64: return "<i8";
    case CFS_UINT8: return "|u1";
    case CFS_UINT16: return "<u2";
    case CFS_UINT32: return "<u4";
    case CFS_UINT64: return "<u8";
    case CFS_FLOAT16: return "<f2";
    case CFS_FLOAT32: return "<f4";
    case CFS_FLOAT64: return "<f8";
    case CFS_STRING: return "|O";
    case CFS_COMPOUND: break;
    }
    return NULL;
}

json_t *cfs_zarr_fill_value(cfs_dtype t)
{
    if (t == CFS_BOOL)
        return json_false();
    if (t == CFS_STRING)
        return json_string("");
    if (cfs_dtype_is_float(t))
        return json_real(0.0);
    return json_integer(0);
}

static const char base64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

json_t *cfs_json_zero_base64(size_t nbytes)
{
    size_t len = (nbytes + 2) / 3 * 4;
    char *s = malloc(len + 1);
    if (!s)
        return NULL;
    for (size_t i = 0; i < len; i++)
        s[i] = base64_alphabet[0];
    size_t rem = nbytes % 3;
    if (rem == 1)
        s[len - 2] = s[len - 1] = '=';
    else if (rem == 2)
        s[len - 1] = '=';
    s[len] = '\0';
    json_t *j = json_string(s);
    free(s);
    return j;
}

json_t *cfs_json_u64_array(int n, const uint64_t *values)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer((json_int_t)values[i]));
    return a;
}

json_t *cfs_zarray_doc(int ndim, const uint64_t *shape, const uint64_t *chunks, json_t *dtype,
                       json_t *fill_value, json_t *compressor, json_t *filters)
{
    return json_pack("{s:o, s:o, s:o, s:o, s:o, s:s, s:o, s:i}",
                     "chunks", cfs_json_u64_array(ndim, chunks),
                     "compressor", compressor,
                     "dtype", dtype,
                     "fill_value", fill_value,
                     "filters", filters,
                     "order", "C",
                     "shape", cfs_json_u64_array(ndim, shape),
                     "zarr_format", 2);
}

json_t *cfs_zgroup_doc(void)
{
    return json_pack("{s:i}", "zarr_format", 2);
}

json_t *cfs_encoding_attrs(const char *type, const char *version)
{
    return json_pack("{s:s, s:s}", "encoding-type", type, "encoding-version", version);
}

char *cfs_zmeta_dump(const json_t *doc)
{
    return json_dumps(doc, JSON_INDENT(4) | JSON_SORT_KEYS | JSON_ENSURE_ASCII |
                               JSON_REAL_PRECISION(17));
}
