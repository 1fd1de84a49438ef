/* Zarr v2 compressors: the numcodecs ids and byte formats every client decodes. */
#ifndef CFS_CODEC_H
#define CFS_CODEC_H

#include <jansson.h>
#include <stddef.h>

#include "buf.h"
#include "error.h"
#include "model.h"

typedef enum cfs_codec_id {
    CFS_CODEC_BLOSC_LZ4, /* {"id":"blosc","cname":"lz4","clevel":5,"shuffle":1,"blocksize":0} */
    CFS_CODEC_ZSTD,      /* {"id":"zstd","level":1} */
    CFS_CODEC_ZLIB,      /* {"id":"zlib","level":1} */
    CFS_CODEC_GZIP,      /* {"id":"gzip","level":1} */
    CFS_CODEC_NONE       /* null */
} cfs_codec_id;

/* Parses an option value ("blosc", "zstd", "zlib", "gzip", "none"); -1 if unknown. */
int cfs_codec_parse(const char *name, cfs_codec_id *out);
const char *cfs_codec_name(cfs_codec_id id);
/* The `compressor` member of a .zarray (a new reference; json_null() for none). */
json_t *cfs_codec_config(cfs_codec_id id);
/* Appends the encoded form of in[0..len) to out. typesize drives blosc's shuffle. */
int cfs_codec_encode(cfs_codec_id id, size_t typesize, const void *in, size_t len, cfs_buf *out,
                     cfs_err *err);
/* Inverse of encode (used by tests and to verify cached entries). */
int cfs_codec_decode(cfs_codec_id id, const void *in, size_t len, cfs_buf *out, cfs_err *err);

/* The most bytes cfs_codec_encode appends for len bytes in. */
size_t cfs_codec_bound(cfs_codec_id id, size_t len);
/* The codec as the layout calls it (model.h), to keep a matrix's chunks encoded as it makes
 * them (docs/design.md §7). */
const cfs_chunk_codec *cfs_codec_for_layout(cfs_codec_id id);

#endif
