#include "h5_filters.h"

#include <blosc.h>
#include <errno.h>
#include <lz4.h>
#include <lzf.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "h5_bitshuffle.h"

/* An HDF5 chunk holds at most 4 GiB - 1 bytes: no decoded chunk may claim more. */
#define MAX_CHUNK ((uint64_t)UINT32_MAX)

/* The reason a chunk could not be decoded, on the HDF5 error stack under the failed read (the
 * innermost entry: cfs_h5_error_detail reports it). Returns 0, the filter's failure value. */
static size_t fail(const char *filter, const char *why)
{
    H5Epush2(H5E_DEFAULT, __FILE__, filter, __LINE__, H5E_ERR_CLS, H5E_PLINE, H5E_CALLBACK,
             "%s filter: %s", filter, why);
    return 0;
}

static uint64_t read_be(const unsigned char *p, unsigned len)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < len; i++)
        v = (v << 8) | p[i];
    return v;
}

/* Replaces the filter's input buffer by the decoded one (both malloc'd, as libhdf5 frees and
 * allocates pipeline buffers with the C library's allocator). */
static size_t hand_over(void **buf, size_t *buf_size, void *out, size_t out_size, size_t len)
{
    free(*buf);
    *buf = out;
    *buf_size = out_size;
    return len;
}

/* ------------------------------------------------------------------------------------------ */
/* LZF (h5py's lzf_filter.c): the chunk is one LZF stream; cd_values[2] is the chunk's size. */

static size_t lzf_filter(unsigned flags, size_t cd_nelmts, const unsigned cd_values[],
                         size_t nbytes, size_t *buf_size, void **buf)
{
    if (!(flags & H5Z_FLAG_REVERSE))
        return fail("lzf", "encoding is not supported");
    if (nbytes == 0 || nbytes > UINT_MAX)
        return fail("lzf", "the chunk's length is invalid");
    size_t cap = cd_nelmts >= 3 && cd_values[2] ? cd_values[2] : *buf_size;
    if (cap == 0)
        cap = nbytes;
    for (;;) {
        void *out = malloc(cap);
        if (!out)
            return fail("lzf", "out of memory");
        errno = 0;
        unsigned got = lzf_decompress(*buf, (unsigned)nbytes, out, (unsigned)cap);
        if (got)
            return hand_over(buf, buf_size, out, cap, got);
        free(out);
        /* A stored chunk size too small (never written so by h5py): grow, up to a chunk's
         * ceiling. */
        if (errno != E2BIG || cap >= MAX_CHUNK / 2)
            return fail("lzf", "the chunk is corrupt");
        cap *= 2;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Blosc (hdf5-blosc's blosc_filter.c): the chunk is one self-describing Blosc buffer. */

/* True if the linked c-blosc decodes the compressor library a buffer names ("BloscLZ", "LZ4",
 * "Snappy", "Zlib", "Zstd"): checked first, as c-blosc prints to stderr on one it lacks. */
static bool blosc_compressor_built(const char *lib)
{
    char name[16];
    size_t n = 0;
    if (!lib)
        return false;
    for (; lib[n] && n + 1 < sizeof name; n++)
        name[n] = (char)((lib[n] >= 'A' && lib[n] <= 'Z') ? lib[n] - 'A' + 'a' : lib[n]);
    name[n] = '\0';
    for (const char *list = blosc_list_compressors(); list && *list;) {
        size_t len = strcspn(list, ",");
        if (len == n && strncmp(list, name, n) == 0)
            return true;
        list += len + (list[len] == ',');
    }
    return false;
}

static size_t blosc_filter(unsigned flags, size_t cd_nelmts, const unsigned cd_values[],
                           size_t nbytes, size_t *buf_size, void **buf)
{
    (void)cd_nelmts;
    (void)cd_values;
    if (!(flags & H5Z_FLAG_REVERSE))
        return fail("blosc", "encoding is not supported");
    size_t out_len = 0;
    if (nbytes < BLOSC_MIN_HEADER_LENGTH || blosc_cbuffer_validate(*buf, nbytes, &out_len) < 0)
        return fail("blosc", "the chunk's header is corrupt");
    if (!blosc_compressor_built(blosc_cbuffer_complib(*buf)))
        return fail("blosc", "the chunk uses a compressor this c-blosc was built without");
    void *out = malloc(out_len ? out_len : 1);
    if (!out)
        return fail("blosc", "out of memory");
    int got = blosc_decompress_ctx(*buf, out, out_len, 1);
    if (got < 0 || (size_t)got != out_len) {
        free(out);
        return fail("blosc", "the chunk is corrupt");
    }
    return hand_over(buf, buf_size, out, out_len ? out_len : 1, out_len);
}

/* ------------------------------------------------------------------------------------------ */
/* LZ4 (hdf5plugin's H5Zlz4.c): decoded size (big-endian u64), block size (big-endian u32), then
 * per block its stored length (big-endian u32) and the block, LZ4-compressed or, when the
 * length equals the block's size, stored as it is. */

static size_t lz4_filter(unsigned flags, size_t cd_nelmts, const unsigned cd_values[],
                         size_t nbytes, size_t *buf_size, void **buf)
{
    (void)cd_nelmts;
    (void)cd_values;
    if (!(flags & H5Z_FLAG_REVERSE))
        return fail("lz4", "encoding is not supported");
    const unsigned char *in = *buf;
    if (nbytes < 12)
        return fail("lz4", "the chunk is shorter than its header");
    uint64_t total = read_be(in, 8), block = read_be(in + 8, 4);
    if (total > MAX_CHUNK)
        return fail("lz4", "the chunk's decoded size is beyond an HDF5 chunk");
    if (block > total)
        block = total;
    if (total && (block == 0 || total / block > (nbytes - 12) / 4))
        return fail("lz4", "the chunk's block size does not match its length");
    unsigned char *out = malloc(total ? (size_t)total : 1);
    if (!out)
        return fail("lz4", "out of memory");
    size_t pos = 12;
    for (uint64_t done = 0; done < total;) {
        size_t bs = (size_t)(total - done < block ? total - done : block);
        if (nbytes - pos < 4) {
            free(out);
            return fail("lz4", "a block header is cut off");
        }
        uint64_t clen = read_be(in + pos, 4);
        pos += 4;
        if (clen > nbytes - pos) {
            free(out);
            return fail("lz4", "a block is longer than the chunk");
        }
        if (clen == bs) {
            memcpy(out + done, in + pos, bs);
        } else {
            int got = LZ4_decompress_safe((const char *)in + pos, (char *)out + done, (int)clen,
                                          (int)bs);
            if (got < 0 || (size_t)got != bs) {
                free(out);
                return fail("lz4", "a block is corrupt");
            }
        }
        pos += (size_t)clen;
        done += bs;
    }
    return hand_over(buf, buf_size, out, total ? (size_t)total : 1, (size_t)total);
}

/* ------------------------------------------------------------------------------------------ */
/* Bitshuffle (bshuf_h5filter.c): cd_values[2] element size, [3] block size in elements (0:
 * default), [4] block codec (0 none, 2 LZ4, 3 zstd). */

static size_t bitshuffle_filter(unsigned flags, size_t cd_nelmts, const unsigned cd_values[],
                                size_t nbytes, size_t *buf_size, void **buf)
{
    if (!(flags & H5Z_FLAG_REVERSE))
        return fail("bitshuffle", "encoding is not supported");
    if (cd_nelmts < 3)
        return fail("bitshuffle", "the filter's parameters are incomplete");
    size_t block = cd_nelmts > 3 ? cd_values[3] : 0;
    int codec = cd_nelmts > 4 ? (int)cd_values[4] : CFS_BSHUF_NONE;
    uint8_t *out = NULL;
    size_t out_len = 0;
    const char *why = "";
    if (cfs_bshuf_decode(*buf, nbytes, cd_values[2], block, codec, &out, &out_len, &why) < 0)
        return fail("bitshuffle", why);
    return hand_over(buf, buf_size, out, out_len ? out_len : 1, out_len);
}

/* ------------------------------------------------------------------------------------------ */
/* Zstandard (HDF5Plugin-Zstandard): the chunk is zstd frames. Decoded by streaming into a
 * buffer of the frame's stated size (grown when a frame states none or more frames follow), so
 * a wrong stated size cannot overflow it. */

static size_t zstd_filter(unsigned flags, size_t cd_nelmts, const unsigned cd_values[],
                          size_t nbytes, size_t *buf_size, void **buf)
{
    (void)cd_nelmts;
    (void)cd_values;
    if (!(flags & H5Z_FLAG_REVERSE))
        return fail("zstd", "encoding is not supported");
    unsigned long long stated = ZSTD_getFrameContentSize(*buf, nbytes);
    if (stated == ZSTD_CONTENTSIZE_ERROR)
        return fail("zstd", "the chunk is not a zstd frame");
    if (stated != ZSTD_CONTENTSIZE_UNKNOWN && stated > MAX_CHUNK)
        return fail("zstd", "the chunk's decoded size is beyond an HDF5 chunk");
    size_t cap = stated == ZSTD_CONTENTSIZE_UNKNOWN ? 4 * nbytes : (size_t)stated;
    if (cap < 64)
        cap = 64;
    ZSTD_DStream *ds = ZSTD_createDStream();
    unsigned char *out = malloc(cap);
    if (!ds || !out) {
        ZSTD_freeDStream(ds);
        free(out);
        return fail("zstd", "out of memory");
    }
    ZSTD_initDStream(ds);
    ZSTD_inBuffer src = {*buf, nbytes, 0};
    ZSTD_outBuffer dst = {out, cap, 0};
    const char *why = NULL;
    for (;;) {
        size_t r = ZSTD_decompressStream(ds, &dst, &src);
        if (ZSTD_isError(r)) {
            why = "the chunk is corrupt";
            break;
        }
        if (src.pos == src.size && r == 0)
            break; /* every frame ended with the input */
        if (dst.pos < dst.size) {
            if (src.pos == src.size) {
                why = "the chunk is cut off";
                break;
            }
            continue;
        }
        if (cap >= MAX_CHUNK) {
            why = "the chunk decodes beyond an HDF5 chunk";
            break;
        }
        size_t grown = cap > MAX_CHUNK / 2 ? (size_t)MAX_CHUNK : cap * 2;
        unsigned char *more = realloc(out, grown);
        if (!more) {
            why = "out of memory";
            break;
        }
        out = more;
        cap = grown;
        dst.dst = out;
        dst.size = cap;
    }
    ZSTD_freeDStream(ds);
    if (why) {
        free(out);
        return fail("zstd", why);
    }
    return hand_over(buf, buf_size, out, cap, dst.pos);
}

/* ------------------------------------------------------------------------------------------ */
/* Registration and names */

#define FILTER_CLASS(id, name, fn) \
    {H5Z_CLASS_T_VERS, (H5Z_filter_t)(id), 0, 1, name, NULL, NULL, (H5Z_func_t)(fn)}

static const H5Z_class2_t filters[] = {
    FILTER_CLASS(CFS_H5Z_LZF, "lzf (cellucid-fs, liblzf)", lzf_filter),
    FILTER_CLASS(CFS_H5Z_BLOSC, "blosc (cellucid-fs, c-blosc)", blosc_filter),
    FILTER_CLASS(CFS_H5Z_LZ4, "lz4 (cellucid-fs, liblz4)", lz4_filter),
    FILTER_CLASS(CFS_H5Z_BITSHUFFLE, "bitshuffle (cellucid-fs)", bitshuffle_filter),
    FILTER_CLASS(CFS_H5Z_ZSTD, "zstd (cellucid-fs, libzstd)", zstd_filter),
};

int cfs_h5_filters_register(void)
{
    int rc = 0;
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
        if (H5Zregister(&filters[i]) < 0)
            rc = -1;
    return rc;
}

const char *cfs_h5_filter_name(H5Z_filter_t id, const char *stored)
{
    /* The ids registered with The HDF Group that single-cell files are seen with. */
    switch (id) {
    case H5Z_FILTER_DEFLATE: return "gzip";
    case H5Z_FILTER_SHUFFLE: return "shuffle";
    case H5Z_FILTER_FLETCHER32: return "fletcher32";
    case H5Z_FILTER_SZIP: return "szip";
    case H5Z_FILTER_NBIT: return "nbit";
    case H5Z_FILTER_SCALEOFFSET: return "scaleoffset";
    case 305: return "lzo";
    case 307: return "bzip2";
    case CFS_H5Z_LZF: return "lzf";
    case CFS_H5Z_BLOSC: return "blosc";
    case 32002: return "mafisc";
    case 32003: return "snappy";
    case CFS_H5Z_LZ4: return "lz4";
    case CFS_H5Z_BITSHUFFLE: return "bitshuffle";
    case CFS_H5Z_ZFP: return "zfp";
    case 32014: return "fpzip";
    case CFS_H5Z_ZSTD: return "zstd";
    case 32017: return "sz";
    case 32018: return "fcidecomp";
    case 32024: return "sz3";
    case 32026: return "blosc2";
    default: return stored && stored[0] ? stored : "unnamed";
    }
}
