/* A Zarr v3 shard's index (see zarr_shard.h). */
#include "zarr_shard.h"
#include "crc32c.h"

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

int zr_shard_locate(const unsigned char *shard, size_t len, uint64_t count, uint64_t lin,
                    bool index_at_start, bool index_crc, uint64_t *off, uint64_t *nbytes,
                    cfs_err *err)
{
    if (count > (SIZE_MAX - 4) / 16 || lin >= count)
        return cfs_err_setc(err, CFS_EDAMAGED, "its index would hold %llu entries; re-write the store",
                            (unsigned long long)count);
    size_t isize = (size_t)count * 16 + (index_crc ? 4 : 0);
    if (len < isize)
        return cfs_err_setc(err, CFS_EDAMAGED, "truncated (%zu bytes, shorter than its "
                            "index of %zu); re-write the store", len, isize);
    const unsigned char *index = index_at_start ? shard : shard + len - isize;
    if (index_crc && cfs_crc32c(index, (size_t)count * 16) != (uint32_t)le(index + count * 16, 4))
        return cfs_err_setc(err, CFS_EDAMAGED, "its index fails its checksum (crc32c); re-write the store");
    *off = le(index + lin * 16, 8);
    *nbytes = le(index + lin * 16 + 8, 8);
    if (*off == UINT64_MAX && *nbytes == UINT64_MAX)
        return 0;
    if (*off > len || *nbytes > len - *off)
        return cfs_err_setc(err, CFS_EDAMAGED, "truncated (an inner chunk lies beyond its "
                            "%zu bytes); re-write the store", len);
    return 1;
}
