/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as Zarr v3's crc32c codec and
 * sharding index checksums use it; zlib offers only CRC-32. */
#ifndef CFS_CRC32C_H
#define CFS_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of n bytes (of "123456789": 0xE3069283). */
uint32_t cfs_crc32c(const void *data, size_t n);

#endif
