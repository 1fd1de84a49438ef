#include "bigmem.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

void *cfs_big_alloc(size_t len)
{
    void *p = malloc(len ? len : 1);
    if (!p || len < CFS_BIGMEM_HUGE)
        return p;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1), hi = ((uintptr_t)p + len) & ~(page - 1);
    if (hi > lo)    /* advice only: without it the buffer works the same */
        (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    return p;
}
