/*
 * The index of a Zarr v3 shard (sharding_indexed): count pairs of little-endian uint64
 * (offset, nbytes), one per inner chunk in C order, at the shard's start or end, followed by
 * their crc32c (little-endian uint32) when the index codecs end with crc32c. Both values
 * 2^64-1: the inner chunk is missing (all fill).
 */
#ifndef CFS_ZARR_SHARD_H
#define CFS_ZARR_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Where inner chunk lin (< count) lies in the len bytes of shard: 1 with *off and *nbytes
 * (inside the shard), 0 when it is missing, -1 with the reason (a shard shorter than its
 * index, a failed checksum, an entry beyond the shard's end). */
int zr_shard_locate(const unsigned char *shard, size_t len, uint64_t count, uint64_t lin,
                    bool index_at_start, bool index_crc, uint64_t *off, uint64_t *nbytes,
                    cfs_err *err);

#endif
