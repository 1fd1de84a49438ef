#include "codec.h"

#include <blosc.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

/* Levels match numcodecs' defaults, so a store reads the same as one zarr-python writes. */
enum { BLOSC_CLEVEL = 5, ZSTD_LEVEL = 1, ZLIB_LEVEL = 1 };

static const char *const codec_names[] = {"blosc", "zstd", "zlib", "gzip", "none"};

int cfs_codec_parse(const char *name, cfs_codec_id *out)
{
    for (size_t i = 0; i < sizeof codec_names / sizeof codec_names[0]; i++) {
        if (strcmp(name, codec_names[i]) == 0) {
            *out = (cfs_codec_id)i;
            return 0;
        }
    }
    return -1;
}

const char *cfs_codec_name(cfs_codec_id id)
{
    return codec_names[id];
}

json_t *cfs_codec_config(cfs_codec_id id)
{
    switch (id) {
    case CFS_CODEC_BLOSC_LZ4:
        return json_pack("{s:s, s:s, s:i, s:i, s:i}", "id", "blosc", "cname", "lz4", "clevel",
                         BLOSC_CLEVEL, "shuffle", BLOSC_SHUFFLE, "blocksize", 0);
    case CFS_CODEC_ZSTD:
        return json_pack("{s:s, s:i}", "id", "zstd", "level", ZSTD_LEVEL);
    case CFS_CODEC_ZLIB:
        return json_pack("{s:s, s:i}", "id", "zlib", "level", ZLIB_LEVEL);
    case CFS_CODEC_GZIP:
        return json_pack("{s:s, s:i}", "id", "gzip", "level", ZLIB_LEVEL);
    case CFS_CODEC_NONE:
        break;
    }
    return json_null();
}

static int encode_blosc(size_t typesize, const void *in, size_t len, cfs_buf *out, cfs_err *err)
{
    if (len > BLOSC_MAX_BUFFERSIZE)
        return cfs_err_set(err, "chunk of %zu bytes is too large for blosc", len);
    if (typesize == 0 || typesize > BLOSC_MAX_TYPESIZE)
        typesize = 1;
    size_t cap = len + BLOSC_MAX_OVERHEAD;
    if (cfs_buf_reserve(out, cap) < 0)
        return cfs_err_setc(err, CFS_ENOMEM, "out of memory encoding a chunk");
    /* The context variant is thread-safe and single-threaded internally: parallelism comes
     * from encoding many chunks at once, and one thread keeps the bytes reproducible. */
    int n = blosc_compress_ctx(BLOSC_CLEVEL, BLOSC_SHUFFLE, typesize, len, in,
                               out->data + out->len, cap, "lz4", 0, 1);
    if (n <= 0)
        return cfs_err_set(err, "blosc compression failed (%d)", n);
    out->len += (size_t)n;
    return 0;
}

static int encode_zstd(const void *in, size_t len, cfs_buf *out, cfs_err *err)
{
    size_t cap = ZSTD_compressBound(len);
    if (cfs_buf_reserve(out, cap) < 0)
        return cfs_err_setc(err, CFS_ENOMEM, "out of memory encoding a chunk");
    size_t n = ZSTD_compress(out->data + out->len, cap, in, len, ZSTD_LEVEL);
    if (ZSTD_isError(n))
        return cfs_err_set(err, "zstd compression failed: %s", ZSTD_getErrorName(n));
    out->len += n;
    return 0;
}

/* windowBits 15 writes a zlib stream, 31 a gzip member (with mtime 0: reproducible bytes). */
static int encode_deflate(int window_bits, const void *in, size_t len, cfs_buf *out,
                          cfs_err *err)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, ZLIB_LEVEL, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return cfs_err_set(err, "zlib initialisation failed");
    size_t cap = deflateBound(&zs, len) + 32;
    if (len > UINT_MAX || cfs_buf_reserve(out, cap) < 0) {
        deflateEnd(&zs);
        return cfs_err_set(err, "chunk of %zu bytes cannot be deflated", len);
    }
    zs.next_in = (Bytef *)in;
    zs.avail_in = (uInt)len;
    zs.next_out = out->data + out->len;
    zs.avail_out = (uInt)cap;
    int rc = deflate(&zs, Z_FINISH);
    size_t produced = cap - zs.avail_out;
    deflateEnd(&zs);
    if (rc != Z_STREAM_END)
        return cfs_err_set(err, "deflate failed (%d)", rc);
    out->len += produced;
    return 0;
}

int cfs_codec_encode(cfs_codec_id id, size_t typesize, const void *in, size_t len, cfs_buf *out,
                     cfs_err *err)
{
    switch (id) {
    case CFS_CODEC_BLOSC_LZ4: return encode_blosc(typesize, in, len, out, err);
    case CFS_CODEC_ZSTD: return encode_zstd(in, len, out, err);
    case CFS_CODEC_ZLIB: return encode_deflate(15, in, len, out, err);
    case CFS_CODEC_GZIP: return encode_deflate(31, in, len, out, err);
    case CFS_CODEC_NONE:
        if (cfs_buf_append(out, in, len) < 0)
            return cfs_err_setc(err, CFS_ENOMEM, "out of memory encoding a chunk");
        return 0;
    }
    return cfs_err_set(err, "unknown codec");
}

static int decode_inflate(int window_bits, const void *in, size_t len, cfs_buf *out,
                          cfs_err *err)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (len > UINT_MAX || inflateInit2(&zs, window_bits) != Z_OK)
        return cfs_err_set(err, "zlib initialisation failed");
    zs.next_in = (Bytef *)in;
    zs.avail_in = (uInt)len;
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
        if (cfs_buf_reserve(out, 65536) < 0) {
            inflateEnd(&zs);
            return cfs_err_setc(err, CFS_ENOMEM, "out of memory decoding a chunk");
        }
        size_t room = out->cap - out->len;
        if (room > UINT_MAX)
            room = UINT_MAX;
        zs.next_out = out->data + out->len;
        zs.avail_out = (uInt)room;
        rc = inflate(&zs, Z_NO_FLUSH);
        out->len += room - zs.avail_out;
        if (rc != Z_OK && rc != Z_STREAM_END) {
            inflateEnd(&zs);
            return cfs_err_set(err, "corrupt deflate stream (%d)", rc);
        }
    }
    inflateEnd(&zs);
    return 0;
}

int cfs_codec_decode(cfs_codec_id id, const void *in, size_t len, cfs_buf *out, cfs_err *err)
{
    switch (id) {
    case CFS_CODEC_BLOSC_LZ4: {
        size_t nbytes, cbytes, blocksize;
        if (len < BLOSC_MIN_HEADER_LENGTH)
            return cfs_err_set(err, "blosc frame too short");
        blosc_cbuffer_sizes(in, &nbytes, &cbytes, &blocksize);
        if (cbytes != len || cfs_buf_reserve(out, nbytes) < 0)
            return cfs_err_set(err, "bad blosc frame");
        int n = blosc_decompress_ctx(in, out->data + out->len, nbytes, 1);
        if (n < 0 || (size_t)n != nbytes)
            return cfs_err_set(err, "blosc decompression failed (%d)", n);
        out->len += nbytes;
        return 0;
    }
    case CFS_CODEC_ZSTD: {
        unsigned long long n = ZSTD_getFrameContentSize(in, len);
        if (n == ZSTD_CONTENTSIZE_ERROR || n == ZSTD_CONTENTSIZE_UNKNOWN || n > SIZE_MAX / 2 ||
            cfs_buf_reserve(out, (size_t)n) < 0)
            return cfs_err_set(err, "bad zstd frame");
        size_t got = ZSTD_decompress(out->data + out->len, (size_t)n, in, len);
        if (ZSTD_isError(got) || got != n)
            return cfs_err_set(err, "zstd decompression failed");
        out->len += got;
        return 0;
    }
    case CFS_CODEC_ZLIB: return decode_inflate(15, in, len, out, err);
    case CFS_CODEC_GZIP: return decode_inflate(31, in, len, out, err);
    case CFS_CODEC_NONE:
        if (cfs_buf_append(out, in, len) < 0)
            return cfs_err_setc(err, CFS_ENOMEM, "out of memory decoding a chunk");
        return 0;
    }
    return cfs_err_set(err, "unknown codec");
}

size_t cfs_codec_bound(cfs_codec_id id, size_t len)
{
    switch (id) {
    case CFS_CODEC_BLOSC_LZ4: return len + BLOSC_MAX_OVERHEAD;
    case CFS_CODEC_ZSTD: return ZSTD_compressBound(len);
    case CFS_CODEC_ZLIB:
    case CFS_CODEC_GZIP:
        /* zlib's deflateBound for the default window and memory level, plus a gzip header
         * and trailer, plus the slack encode_deflate reserves. */
        return len + (len >> 12) + (len >> 14) + (len >> 25) + 13 + 18 + 32;
    case CFS_CODEC_NONE: break;
    }
    return len;
}

static int chunk_encode(int id, size_t typesize, const void *in, size_t len, cfs_buf *out,
                        cfs_err *err)
{
    return cfs_codec_encode((cfs_codec_id)id, typesize, in, len, out, err);
}

static int chunk_decode(int id, const void *in, size_t len, cfs_buf *out, cfs_err *err)
{
    return cfs_codec_decode((cfs_codec_id)id, in, len, out, err);
}

static size_t chunk_bound(int id, size_t len)
{
    return cfs_codec_bound((cfs_codec_id)id, len);
}

const cfs_chunk_codec *cfs_codec_for_layout(cfs_codec_id id)
{
    static const cfs_chunk_codec codecs[] = {
        {CFS_CODEC_BLOSC_LZ4, chunk_encode, chunk_decode, chunk_bound},
        {CFS_CODEC_ZSTD, chunk_encode, chunk_decode, chunk_bound},
        {CFS_CODEC_ZLIB, chunk_encode, chunk_decode, chunk_bound},
        {CFS_CODEC_GZIP, chunk_encode, chunk_decode, chunk_bound},
        {CFS_CODEC_NONE, chunk_encode, chunk_decode, chunk_bound},
    };
    return &codecs[id];
}
