/*
 * The order in which a running layout pass makes its parts (docs/design.md §7): the parts a
 * reader waits for first, the one it waited for longest first, then the rest in order; and
 * which parts have landed. Not thread-safe: its user holds the lock (the job's).
 */
#ifndef CFS_SCHEDULE_H
#define CFS_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cfs_schedule {
    size_t n;
    unsigned char *state;       /* per part: 0 to make, 1 being made, 2 landed */
    uint64_t *wanted;           /* per part: 0, or when a reader first waited for it */
    uint64_t clock;
    size_t next;                /* no part before it is left to make */
    size_t landed;
} cfs_schedule;

/* n parts, none made; -1 out of memory. s is zeroed or was set up before (then it starts
 * afresh). */
int cfs_schedule_init(cfs_schedule *s, size_t n);
void cfs_schedule_free(cfs_schedule *s);
/* Whether parts [first, last] have all landed; if not, a reader waits for the ones that have not
 * (they are made before the others). */
bool cfs_schedule_ready(cfs_schedule *s, size_t first, size_t last);
/* The part to make next (now being made), or n when none is left to make. */
size_t cfs_schedule_claim(cfs_schedule *s);
void cfs_schedule_land(cfs_schedule *s, size_t part);

#endif
