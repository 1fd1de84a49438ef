/* Large working buffers (the layout engine's source blocks, spill buffers and sort buffers). */
#ifndef CFS_BIGMEM_H
#define CFS_BIGMEM_H

#include <stddef.h>

/* Buffers from this size on ask for huge pages. */
#define CFS_BIGMEM_HUGE ((size_t)4 << 20)

/*
 * malloc(len) (len 0: 1 byte), free()d as usual; from CFS_BIGMEM_HUGE on, its pages are asked
 * to be huge (MADV_HUGEPAGE: THP is 'madvise' on Debian 12). A buffer of tens of megabytes that
 * is written all over then costs a few hundred page faults instead of thousands, and a few TLB
 * entries: on a virtual machine each fault on fresh memory is a trip to the host.
 */
void *cfs_big_alloc(size_t len);

#endif
