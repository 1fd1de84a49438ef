/*
 * Disk space for the layout engine's work files, under a bound it does not own: the mount's
 * cache, so that cache_size bounds everything in the cache folder. A reservation first evicts
 * cached chunks (the bound's own eviction); when that is not enough, finished jobs whose
 * results nobody reads give way (least recently used first; they run again when read again),
 * and a reservation that still does not fit while other work holds space waits for it. An
 * export has no bound: a NULL space grants every reservation.
 */
#ifndef CFS_SPACE_H
#define CFS_SPACE_H

#include <stdint.h>

#include "error.h"
#include "job.h"

typedef struct cfs_space cfs_space;

/* The bound: reserve makes room for `bytes` or returns -1 with a reason (status CFS_ERETRY:
 * not now; CFS_ENEVERFITS: never, the bytes exceed the whole bound); release gives them back. */
typedef struct cfs_space_bound {
    int (*reserve)(void *ctx, uint64_t bytes, cfs_err *err);
    void (*release)(void *ctx, uint64_t bytes);
    void *ctx;
} cfs_space_bound;

cfs_space *cfs_space_new(const cfs_space_bound *bound);
void cfs_space_free(cfs_space *s);
/* Room for `bytes` of work files: dropping idle jobs' results if the bound refuses, waiting
 * while other reservations are out; -1 with the bound's reason in err when it cannot fit now
 * with nothing else out, or at once (status CFS_ENEVERFITS) when it exceeds the whole bound. The
 * caller must hold no reservation of its own (it could wait for itself). */
int cfs_space_reserve(cfs_space *s, uint64_t bytes, cfs_err *err);
void cfs_space_release(cfs_space *s, uint64_t bytes);
/* job's results hold space now and may be dropped (cfs_job_try_drop) to make room. Its drop
 * and destroy release that space; destroy calls cfs_space_unhold first. */
int cfs_space_hold(cfs_space *s, cfs_job *job);
void cfs_space_unhold(cfs_space *s, cfs_job *job);
/* How many times results were dropped to make room (for the status document). */
uint64_t cfs_space_dropped(cfs_space *s);

#endif
