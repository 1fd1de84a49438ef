/*
 * Decompressing a gzip, bzip2 or xz copy of an input (x.h5ad.gz) into a file, for the formats
 * that need their file on disk with random access (the HDF5 ones): streaming, in bounded
 * memory, every member of a multi-member stream, and a stream that ends early is an error, never
 * a short file taken for the whole.
 */
#ifndef CFS_UNPACK_H
#define CFS_UNPACK_H

#include <stdint.h>

#include "error.h"

/* What an xz or lzma decoder may allocate: a stream can claim any dictionary size in its header,
 * and liblzma would allocate it (xz -9 needs 65 MiB, numcodecs' LZMA 9 MiB). A stream that
 * needs more is refused as damaged instead of taking the machine's memory. */
#define CFS_XZ_MEMORY_LIMIT (UINT64_C(512) << 20)

/* Told how far the decompression is (compressed bytes read of the whole, bytes written); a
 * non-zero return stops it, with the reason the callback put in err. */
typedef int (*cfs_unpack_progress)(void *ctx, uint64_t done, uint64_t total, uint64_t written,
                                   cfs_err *err);

/* Decompresses src (codec "gzip", "bzip2" or "xz") into out_fd from its current offset. -1 with
 * the reason in err: CFS_EDAMAGED for a damaged or truncated stream, the write's errno status
 * (CFS_ENEVERFITS for a full disk) otherwise. */
int cfs_unpack_file(const char *src, const char *codec, int out_fd, cfs_unpack_progress progress,
                    void *ctx, cfs_err *err);

#endif
