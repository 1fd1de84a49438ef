/*
 * The decode side of Bitshuffle (HDF5 filter 32008), written from its published layout (the
 * bitshuffle package's bitshuffle_core.c, bitshuffle.c and bshuf_h5filter.c): no C library of
 * it is packaged in Debian. Every length is checked against the buffers; nothing here calls
 * libhdf5. h5_filters.c wraps it as the HDF5 filter.
 */
#ifndef CFS_H5_BITSHUFFLE_H
#define CFS_H5_BITSHUFFLE_H

#include <stddef.h>
#include <stdint.h>

/* Block codecs of a bitshuffle stream (cd_values[4] of the filter). */
enum {
    CFS_BSHUF_NONE = 0,
    CFS_BSHUF_LZ4 = 2,
    CFS_BSHUF_ZSTD = 3,
};

/* The block size (in elements) bitshuffle uses when the filter's is 0: about 8 KiB of data, a
 * multiple of 8, at least 128 elements. */
size_t cfs_bshuf_default_block(size_t elem_size);

/* Undoes the bit transposition of one block of n elements (n a multiple of 8) of elem_size
 * bytes: in and out both hold n * elem_size bytes and do not overlap. */
void cfs_bshuf_untranspose(const uint8_t *in, uint8_t *out, size_t n, size_t elem_size);

/*
 * Decodes one chunk as the filter stores it: for the LZ4 and zstd codecs a 12-byte header
 * (decoded size, big-endian u64; block size in bytes, big-endian u32) and then per block a
 * big-endian u32 compressed length and the block; for no codec the transposed blocks as they
 * are. In both, the elements after the last multiple of 8 are stored untransposed at the end.
 * block is the filter's block size in elements (0: the default; ignored with a codec, whose
 * header carries it). On success *out is a malloc'd buffer of *out_len bytes and 0 is
 * returned; on corrupt or inconsistent input, -1 and *why says what (a static string).
 */
int cfs_bshuf_decode(const uint8_t *in, size_t in_len, size_t elem_size, size_t block,
                     int codec, uint8_t **out, size_t *out_len, const char **why);

#endif
