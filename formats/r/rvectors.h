/*
 * The large vectors of an R file (the sink robject.h hands them to) and reading any atomic
 * vector of the tree by range, wherever its values are.
 *
 * A vector of a plain binary file (uncompressed XDR or native: a .rds saved with compress =
 * FALSE, or the decompressed copy the front ends make of a compressed one, docs/design.md §2.2)
 * is left in the file: its offset is recorded as the stream passes over it, and its values are
 * read from there by range, converted from the file's byte order as they are read. Memory then
 * holds the tree and the small vectors only. The vectors of other streams (compressed, ASCII,
 * in memory) and the values of ALTREP sequences have no place in a file and are kept in memory
 * (an r_memsink).
 *
 * While the values pass, the store notes what the conversions must know of an integer or
 * logical vector without reading it again: whether it holds an NA, its least and greatest value,
 * its first and last, and whether it never decreases (a sparse matrix's pointers and indices are
 * checked with them at open).
 */
#ifndef CFS_RVECTORS_H
#define CFS_RVECTORS_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "robject.h"

typedef struct r_vec_stats {
    bool has_na;
    bool nondecreasing;      /* over every value, NA (INT32_MIN) included */
    int32_t min, max;        /* of the values that are not NA; min > max when there are none */
    int32_t first, last;     /* 0 for an empty vector */
} r_vec_stats;

typedef struct r_vecstore r_vecstore;

/* A store reading in place from fd, the file the stream is read from (taken; -1: none, every
 * large vector is kept in memory). NULL when out of memory (fd is closed then). */
r_vecstore *r_vecstore_new(int fd);
void r_vecstore_free(r_vecstore *vs);
/* The sink that fills vs (robject.h). */
r_sink r_vecstore_sink(r_vecstore *vs);
/* What vs holds: the vectors left in the file and their bytes, those kept in memory and theirs
 * (any of the pointers may be NULL). */
void r_vecstore_usage(const r_vecstore *vs, uint64_t *in_place, uint64_t *in_place_bytes,
                      uint64_t *kept, uint64_t *kept_bytes);

/* Values [start, start + n) of the LGL, INT or REAL vector x (kept in the tree, or sunk into vs)
 * in host order, as int32 (LGL, INT) or double; -1 with err when the file cannot be read or no
 * longer holds them (rewritten since: CFS_EIO). */
int r_vec_read(const r_vecstore *vs, const r_obj *x, uint64_t start, uint64_t n, void *out,
               cfs_err *err);
/* All the values of x in memory: its own where they are kept, else read into a malloc'd buffer
 * put in *owned for the caller to free (*owned NULL otherwise); NULL with err. */
const void *r_vec_whole(const r_vecstore *vs, const r_obj *x, void **owned, cfs_err *err);
/* The stats of an INT or LGL vector (noted as a sunk one passed, or computed now over a kept
 * one); false for other types. */
bool r_vec_stats_of(const r_vecstore *vs, const r_obj *x, r_vec_stats *st);

#endif
