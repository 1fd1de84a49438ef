/*
 * numcodecs' compressors, decode side (see zarr_codecs.h). Chunk sizes: a decoded chunk may
 * not exceed ZR_MAX_DECODED, whatever its header claims.
 */
#include "zarr_codecs.h"
#include "unpack.h"
#include "crc32c.h"

#include <blosc.h>
#include <bzlib.h>
#include <lz4.h>
#include <lzma.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#define ZR_MAX_DECODED ((size_t)1 << 31)

static const char *const known[] = {"blosc", "zstd", "zlib", "gzip", "lz4", "bz2", "lzma", NULL};

int zr_codec_check(json_t *compressor, cfs_err *err)
{
    const char *id = json_string_value(json_object_get(compressor, "id"));
    if (!id)
        return cfs_err_set(err, "its compressor has no id");
    for (size_t i = 0; known[i]; i++)
        if (strcmp(id, known[i]) == 0) {
            json_t *fmt = json_object_get(compressor, "format");
            if (strcmp(id, "lzma") == 0 && json_is_integer(fmt) && json_integer_value(fmt) == 3)
                return cfs_err_setc(err, CFS_EREFUSED, "it is compressed with the codec 'lzma' "
                                    "in its raw format (format 3), which this version cannot "
                                    "decode; re-write it with lzma's default xz format");
            return 0;
        }
    return cfs_err_setc(err, CFS_EREFUSED, "it is compressed with the codec '%s', which this "
                        "version cannot decode (it reads blosc, zstd, zlib, gzip, lz4, bz2 and "
                        "lzma); re-write it with one of those", id);
}

/* A growing output buffer for the streaming decoders. */
typedef struct grow {
    unsigned char *data;
    size_t len, cap;
} grow;

static int grow_room(grow *g, size_t expect, cfs_err *err)
{
    if (g->cap - g->len >= 4096 && g->cap)
        return 0;
    size_t cap = g->cap ? g->cap * 2 : expect ? expect + 64 : 65536;
    if (cap > ZR_MAX_DECODED + 65536)
        return cfs_err_setc(err, CFS_EDAMAGED, "a chunk decodes to more than %zu bytes",
                            ZR_MAX_DECODED);
    unsigned char *p = realloc(g->data, cap);
    if (!p)
        return cfs_err_oom(err);
    g->data = p;
    g->cap = cap;
    return 0;
}

static int damaged(grow *g, const char *codec, const char *what, cfs_err *err)
{
    free(g->data);
    g->data = NULL;
    return cfs_err_setc(err, CFS_EDAMAGED, "a chunk does not decode as %s (%s): the store is "
                        "damaged; re-write it", codec, what);
}

static int blosc_dec(const unsigned char *in, size_t n, grow *g, cfs_err *err)
{
    size_t nbytes = 0;
    if (n < BLOSC_MIN_HEADER_LENGTH || blosc_cbuffer_validate(in, n, &nbytes) < 0)
        return damaged(g, "blosc", "bad header", err);
    if (nbytes > ZR_MAX_DECODED)
        return damaged(g, "blosc", "too big", err);
    if (!(g->data = malloc(nbytes ? nbytes : 1)))
        return cfs_err_oom(err);
    int r = nbytes ? blosc_decompress_ctx(in, g->data, nbytes, 1) : 0;
    if (r < 0 || (size_t)r != nbytes)
        return damaged(g, "blosc", "bad data", err);
    g->len = nbytes;
    return 0;
}

static int zstd_dec(const unsigned char *in, size_t n, size_t expect, grow *g, cfs_err *err)
{
    ZSTD_DStream *z = ZSTD_createDStream();
    if (!z)
        return cfs_err_oom(err);
    ZSTD_inBuffer ib = {in, n, 0};
    size_t r = 1;
    while (ib.pos < ib.size || r != 0) {
        if (grow_room(g, expect, err) < 0) {
            ZSTD_freeDStream(z);
            free(g->data);
            g->data = NULL;
            return -1;
        }
        size_t before = ib.pos;
        ZSTD_outBuffer ob = {g->data + g->len, g->cap - g->len, 0};
        r = ZSTD_decompressStream(z, &ob, &ib);
        g->len += ob.pos;
        if (ZSTD_isError(r) || (ob.pos == 0 && ib.pos == before)) {
            ZSTD_freeDStream(z);
            return damaged(g, "zstd", ZSTD_isError(r) ? ZSTD_getErrorName(r) : "truncated", err);
        }
    }
    ZSTD_freeDStream(z);
    return 0;
}

static int zlib_dec(const char *codec, const unsigned char *in, size_t n, size_t expect,
                    grow *g, cfs_err *err)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 15 + 32) != Z_OK) /* zlib or gzip, by the header */
        return cfs_err_oom(err);
    z.next_in = (unsigned char *)in;
    int rc = Z_OK;
    size_t left = n;
    while (rc != Z_STREAM_END) {
        if (grow_room(g, expect, err) < 0) {
            inflateEnd(&z);
            free(g->data);
            g->data = NULL;
            return -1;
        }
        uInt chunk_in = left > UINT32_MAX ? UINT32_MAX : (uInt)left;
        z.avail_in = chunk_in;
        size_t room = g->cap - g->len;
        z.next_out = g->data + g->len;
        z.avail_out = room > UINT32_MAX ? UINT32_MAX : (uInt)room;
        uInt before_out = z.avail_out;
        rc = inflate(&z, Z_NO_FLUSH);
        left -= chunk_in - z.avail_in;
        g->len += before_out - z.avail_out;
        if (rc == Z_STREAM_END && left > 0 && strcmp(codec, "gzip") == 0) {
            /* another gzip member */
            if (inflateReset(&z) != Z_OK)
                break;
            rc = Z_OK;
        } else if (rc != Z_OK && rc != Z_STREAM_END && !(rc == Z_BUF_ERROR && z.avail_out == 0)) {
            inflateEnd(&z);
            return damaged(g, codec, z.msg ? z.msg : "truncated", err);
        } else if (rc == Z_BUF_ERROR && left == 0 && z.avail_out != 0) {
            inflateEnd(&z);
            return damaged(g, codec, "truncated", err);
        }
    }
    inflateEnd(&z);
    return 0;
}

static int lz4_dec(const unsigned char *in, size_t n, grow *g, cfs_err *err)
{
    if (n < 4)
        return damaged(g, "lz4", "no size header", err);
    size_t size = (size_t)in[0] | (size_t)in[1] << 8 | (size_t)in[2] << 16 | (size_t)in[3] << 24;
    if (size > (size_t)INT32_MAX || n - 4 > (size_t)INT32_MAX)
        return damaged(g, "lz4", "too big", err);
    /* An LZ4 block expands at most 255-fold (a match's length bytes add at most 255 each), so
     * a larger size in the header is a damaged one, refused before it is allocated. */
    if (size / 255 > n - 4 + 16)
        return damaged(g, "lz4", "its size header exceeds what the block can hold", err);
    if (!(g->data = malloc(size ? size : 1)))
        return cfs_err_oom(err);
    int r = size ? LZ4_decompress_safe((const char *)in + 4, (char *)g->data, (int)(n - 4),
                                       (int)size)
                 : 0;
    if (r < 0 || (size_t)r != size)
        return damaged(g, "lz4", "bad block", err);
    g->len = size;
    return 0;
}

static int bz2_dec(const unsigned char *in, size_t n, size_t expect, grow *g, cfs_err *err)
{
    bz_stream z;
    memset(&z, 0, sizeof z);
    if (BZ2_bzDecompressInit(&z, 0, 0) != BZ_OK)
        return cfs_err_oom(err);
    z.next_in = (char *)in;
    z.avail_in = n > UINT32_MAX ? UINT32_MAX : (unsigned)n;
    int rc = BZ_OK;
    while (rc != BZ_STREAM_END) {
        if (grow_room(g, expect, err) < 0) {
            BZ2_bzDecompressEnd(&z);
            free(g->data);
            g->data = NULL;
            return -1;
        }
        size_t room = g->cap - g->len;
        z.next_out = (char *)g->data + g->len;
        z.avail_out = room > UINT32_MAX ? UINT32_MAX : (unsigned)room;
        unsigned before = z.avail_out;
        rc = BZ2_bzDecompress(&z);
        g->len += before - z.avail_out;
        if (rc != BZ_OK && rc != BZ_STREAM_END) {
            BZ2_bzDecompressEnd(&z);
            return damaged(g, "bz2", "bad data", err);
        }
        if (rc == BZ_OK && z.avail_in == 0 && z.avail_out != 0) {
            BZ2_bzDecompressEnd(&z);
            return damaged(g, "bz2", "truncated", err);
        }
    }
    BZ2_bzDecompressEnd(&z);
    return 0;
}

static int lzma_dec(const unsigned char *in, size_t n, size_t expect, grow *g, cfs_err *err)
{
    lzma_stream z = LZMA_STREAM_INIT;
    if (lzma_auto_decoder(&z, CFS_XZ_MEMORY_LIMIT, LZMA_CONCATENATED) != LZMA_OK)
        return cfs_err_oom(err);
    z.next_in = in;
    z.avail_in = n;
    lzma_ret rc = LZMA_OK;
    while (rc != LZMA_STREAM_END) {
        if (grow_room(g, expect, err) < 0) {
            lzma_end(&z);
            free(g->data);
            g->data = NULL;
            return -1;
        }
        z.next_out = g->data + g->len;
        z.avail_out = g->cap - g->len;
        size_t before = z.avail_out;
        rc = lzma_code(&z, z.avail_in ? LZMA_RUN : LZMA_FINISH);
        g->len += before - z.avail_out;
        if (rc != LZMA_OK && rc != LZMA_STREAM_END) {
            lzma_end(&z);
            return damaged(g, "lzma", rc == LZMA_BUF_ERROR ? "truncated"
                                      : rc == LZMA_MEMLIMIT_ERROR
                                          ? "its header asks for more than 512 MiB to decode"
                                          : "bad data", err);
        }
    }
    lzma_end(&z);
    return 0;
}

int zr_codec_decode(json_t *compressor, const unsigned char *in, size_t n, size_t expect,
                    unsigned char **out, size_t *outlen, cfs_err *err)
{
    *out = NULL;
    *outlen = 0;
    grow g = {0};
    const char *id = json_string_value(json_object_get(compressor, "id"));
    int rc;
    if (!id)
        rc = cfs_err_set(err, "its compressor has no id");
    else if (strcmp(id, "blosc") == 0)
        rc = blosc_dec(in, n, &g, err);
    else if (strcmp(id, "zstd") == 0)
        rc = zstd_dec(in, n, expect, &g, err);
    else if (strcmp(id, "zlib") == 0 || strcmp(id, "gzip") == 0)
        rc = zlib_dec(id, in, n, expect, &g, err);
    else if (strcmp(id, "lz4") == 0)
        rc = lz4_dec(in, n, &g, err);
    else if (strcmp(id, "bz2") == 0)
        rc = bz2_dec(in, n, expect, &g, err);
    else if (strcmp(id, "lzma") == 0)
        rc = lzma_dec(in, n, expect, &g, err);
    else
        rc = zr_codec_check(compressor, err);
    if (rc < 0) {
        free(g.data);
        return -1;
    }
    *out = g.data ? g.data : malloc(1);
    *outlen = g.len;
    return *out ? 0 : cfs_err_oom(err);
}

static int crc32c_strip(unsigned char *in, size_t *n, cfs_err *err)
{
    if (*n < 4)
        return cfs_err_setc(err, CFS_EDAMAGED, "a chunk is shorter than its crc32c checksum: "
                            "the store is damaged; re-write it");
    const unsigned char *p = in + *n - 4;
    uint32_t want = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                    (uint32_t)p[3] << 24;
    if (cfs_crc32c(in, *n - 4) != want)
        return cfs_err_setc(err, CFS_EDAMAGED, "a chunk fails its crc32c checksum: the store "
                            "is damaged; re-write it");
    *n -= 4;
    return 0;
}

int zr_codec_decode3(json_t *b2b, unsigned char *in, size_t n, size_t expect,
                     unsigned char **out, size_t *outlen, cfs_err *err)
{
    *out = NULL;
    *outlen = 0;
    for (size_t i = json_array_size(b2b); i-- > 0;) {
        const char *name = json_string_value(json_object_get(json_array_get(b2b, i), "name"));
        if (strcmp(name, "crc32c") == 0) {
            if (crc32c_strip(in, &n, err) < 0) {
                free(in);
                return -1;
            }
            continue;
        }
        json_t *v2 = json_pack("{ss}", "id", name);
        unsigned char *dec = NULL;
        size_t declen = 0;
        int rc = v2 ? zr_codec_decode(v2, in, n, i == 0 ? expect : 0, &dec, &declen, err)
                    : cfs_err_oom(err);
        json_decref(v2);
        free(in);
        if (rc < 0)
            return -1;
        in = dec;
        n = declen;
    }
    *out = in;
    *outlen = n;
    return 0;
}
