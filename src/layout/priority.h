/* Priority order, version 1 (docs/design.md §4.1): a seeded shuffle whose every prefix is a
 * uniform random sample of the cells. */
#ifndef CFS_PRIORITY_H
#define CFS_PRIORITY_H

#include <stddef.h>
#include <stdint.h>

/* The first priority level per-cell chunks are cut on: every level from it on (1024 * 4^k,
 * k >= 2) is a multiple of it (docs/design.md §4, Chunks). */
#define CFS_PRIORITY_CHUNK_LEVEL UINT64_C(16384)

uint64_t cfs_splitmix64(uint64_t x);
/* order[j] = the original row stored at row j, for n rows; NULL on allocation failure or for
 * n >= 2^32 - 1 (beyond any data set, and its 32-bit bucket offsets). */
uint64_t *cfs_priority_order(uint64_t n, uint64_t seed);
/* levels: 1024*4^k while < n, then n. Returns the count written (at most 32). */
size_t cfs_priority_levels(uint64_t n, uint64_t *levels, size_t max);

#endif
