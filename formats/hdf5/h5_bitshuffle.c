#include "h5_bitshuffle.h"

#include <lz4.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

/* Bitshuffle's own constants (bitshuffle_internals.h): they fix the stored layout. */
#define BSHUF_TARGET_BLOCK_BYTES 8192
#define BSHUF_BLOCK_MULT 8
#define BSHUF_MIN_BLOCK 128
#define BSHUF_HEADER 12
/* An HDF5 chunk holds at most 4 GiB - 1 bytes. */
#define BSHUF_MAX_OUT ((uint64_t)UINT32_MAX)

size_t cfs_bshuf_default_block(size_t elem_size)
{
    size_t block = BSHUF_TARGET_BLOCK_BYTES / elem_size;
    block -= block % BSHUF_BLOCK_MULT;
    return block < BSHUF_MIN_BLOCK ? BSHUF_MIN_BLOCK : block;
}

/* The 8 x 8 bit matrix in x (row r = byte r, column c = bit c) transposed. */
static uint64_t transpose8x8(uint64_t x)
{
    uint64_t t;
    t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAULL;
    x ^= t ^ (t << 7);
    t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCULL;
    x ^= t ^ (t << 14);
    t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ULL;
    x ^= t ^ (t << 28);
    return x;
}

/*
 * The transposed block is 8 * elem_size bit rows of n / 8 bytes: row 8 * b + j holds bit j of
 * byte b of every element, element i at bit i % 8 of byte i / 8. For each group of 8 elements
 * and each byte position, the 8 row bytes form an 8 x 8 bit matrix whose transpose is that
 * byte of the 8 elements.
 */
void cfs_bshuf_untranspose(const uint8_t *in, uint8_t *out, size_t n, size_t elem_size)
{
    size_t row_bytes = n / 8;
    for (size_t g = 0; g < row_bytes; g++) {
        for (size_t b = 0; b < elem_size; b++) {
            uint64_t x = 0;
            for (unsigned j = 0; j < 8; j++)
                x |= (uint64_t)in[(b * 8 + j) * row_bytes + g] << (8 * j);
            x = transpose8x8(x);
            for (unsigned k = 0; k < 8; k++)
                out[(g * 8 + k) * elem_size + b] = (uint8_t)(x >> (8 * k));
        }
    }
}

static uint64_t read_be(const uint8_t *p, unsigned len)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < len; i++)
        v = (v << 8) | p[i];
    return v;
}

/* One compressed block of nbytes (after transposition) from in[*pos..], into tmp, then
 * untransposed into out. */
static int decode_block(const uint8_t *in, size_t in_len, size_t *pos, int codec, uint8_t *tmp,
                        uint8_t *out, size_t n, size_t elem_size, const char **why)
{
    size_t nbytes = n * elem_size;
    if (in_len - *pos < 4) {
        *why = "a block header is cut off";
        return -1;
    }
    uint64_t clen = read_be(in + *pos, 4);
    *pos += 4;
    if (clen > in_len - *pos || clen > INT32_MAX) {
        *why = "a block is longer than the chunk";
        return -1;
    }
    const uint8_t *src = in + *pos;
    *pos += (size_t)clen;
    if (codec == CFS_BSHUF_LZ4) {
        int got = LZ4_decompress_safe((const char *)src, (char *)tmp, (int)clen, (int)nbytes);
        if (got < 0 || (size_t)got != nbytes) {
            *why = "an LZ4 block is corrupt";
            return -1;
        }
    } else {
        size_t got = ZSTD_decompress(tmp, nbytes, src, (size_t)clen);
        if (ZSTD_isError(got) || got != nbytes) {
            *why = "a zstd block is corrupt";
            return -1;
        }
    }
    cfs_bshuf_untranspose(tmp, out, n, elem_size);
    return 0;
}

int cfs_bshuf_decode(const uint8_t *in, size_t in_len, size_t elem_size, size_t block,
                     int codec, uint8_t **out, size_t *out_len, const char **why)
{
    *out = NULL;
    *out_len = 0;
    if (elem_size == 0 || elem_size > UINT32_MAX) {
        *why = "the element size in the filter's parameters is invalid";
        return -1;
    }
    if (codec != CFS_BSHUF_NONE && codec != CFS_BSHUF_LZ4 && codec != CFS_BSHUF_ZSTD) {
        *why = "the block codec in the filter's parameters is unknown";
        return -1;
    }
    uint64_t total = in_len;
    size_t pos = 0;
    if (codec != CFS_BSHUF_NONE) {
        if (in_len < BSHUF_HEADER) {
            *why = "the chunk is shorter than its header";
            return -1;
        }
        total = read_be(in, 8);
        uint64_t block_bytes = read_be(in + 8, 4);
        block = (size_t)(block_bytes / elem_size);
        pos = BSHUF_HEADER;
        if (total > BSHUF_MAX_OUT) {
            *why = "the chunk's decoded size is beyond an HDF5 chunk";
            return -1;
        }
        /* Every full block costs at least its 4-byte length: a header claiming far more blocks
         * than the chunk can hold is corrupt (and would only make a huge allocation). */
        if (block > 0 && total / elem_size / block > (in_len - BSHUF_HEADER) / 4) {
            *why = "the chunk's decoded size does not match its length";
            return -1;
        }
    } else if (block == 0) {
        block = cfs_bshuf_default_block(elem_size);
    }
    if (block == 0 || block % BSHUF_BLOCK_MULT) {
        *why = "the block size is not a multiple of 8 elements";
        return -1;
    }
    if (total % elem_size) {
        *why = "the chunk is not a whole number of elements";
        return -1;
    }
    size_t n = (size_t)(total / elem_size);
    uint8_t *dst = malloc(total ? (size_t)total : 1);
    size_t tmp_elems = block < n ? block : n;
    uint8_t *tmp = codec != CFS_BSHUF_NONE ? malloc(tmp_elems ? tmp_elems * elem_size : 1) : NULL;
    if (!dst || (codec != CFS_BSHUF_NONE && !tmp)) {
        free(dst);
        free(tmp);
        *why = "out of memory";
        return -1;
    }
    size_t done = 0; /* elements decoded */
    size_t last = n % block;
    last -= last % BSHUF_BLOCK_MULT;
    while (done < n - n % BSHUF_BLOCK_MULT) {
        size_t m = n - done >= block ? block : last;
        size_t bytes = m * elem_size;
        if (codec == CFS_BSHUF_NONE) {
            if (in_len - pos < bytes) {
                *why = "the chunk is cut off";
                goto fail;
            }
            cfs_bshuf_untranspose(in + pos, dst + done * elem_size, m, elem_size);
            pos += bytes;
        } else if (decode_block(in, in_len, &pos, codec, tmp, dst + done * elem_size, m,
                                elem_size, why) < 0) {
            goto fail;
        }
        done += m;
    }
    size_t rest = (n - done) * elem_size;
    if (in_len - pos < rest) {
        *why = "the chunk's last elements are cut off";
        goto fail;
    }
    memcpy(dst + done * elem_size, in + pos, rest);
    free(tmp);
    *out = dst;
    *out_len = (size_t)total;
    return 0;
fail:
    free(tmp);
    free(dst);
    return -1;
}
