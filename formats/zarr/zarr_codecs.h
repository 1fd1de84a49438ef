/*
 * The compressors numcodecs writes into Zarr v2 stores, decoded through their libraries:
 * blosc (c-blosc 1: every cname and shuffle its frame records), zstd, zlib, gzip, lz4
 * (numcodecs' framing: a 4-byte little-endian size, then one LZ4 block), bz2 and lzma (xz and
 * "alone" containers). A compressor not listed is refused by name, so the array it encodes is
 * left out and the rest of the dataset served.
 */
#ifndef CFS_ZARR_CODECS_H
#define CFS_ZARR_CODECS_H

#include <jansson.h>
#include <stddef.h>

#include "error.h"

/* 0 if compressor (a .zarray "compressor" object) is one this version decodes; else -1 with
 * a reason naming the codec. */
int zr_codec_check(json_t *compressor, cfs_err *err);
/* Decodes the n bytes at in. expect: the decoded size when the caller knows it (numeric
 * chunks), else 0. *out is malloc'd. -1 with the reason on damaged input. */
int zr_codec_decode(json_t *compressor, const unsigned char *in, size_t n, size_t expect,
                    unsigned char **out, size_t *outlen, cfs_err *err);

/* Zarr v3: undoes the bytes-to-bytes codecs b2b (a list in encode order: blosc, zstd, gzip,
 * crc32c, whose checksum is verified) on the n bytes at in, last first. in is taken over
 * (freed or returned as *out). -1 with the reason on damaged input or a failed checksum. */
int zr_codec_decode3(json_t *b2b, unsigned char *in, size_t n, size_t expect,
                     unsigned char **out, size_t *outlen, cfs_err *err);

#endif
