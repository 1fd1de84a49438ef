/*
 * A set of borrowed NUL-terminated strings, each with a 64-bit value (a row, a counter):
 * open addressing with FNV-1a, grown at half load. Used wherever a reader must find names
 * again (barcodes to rows) or tell repeats (duplicate names).
 */
#ifndef CFS_STRSET_H
#define CFS_STRSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cfs_strset cfs_strset;

/* Room for `expected` strings before it grows; NULL on allocation failure. */
cfs_strset *cfs_strset_new(size_t expected);
void cfs_strset_free(cfs_strset *set);
size_t cfs_strset_len(const cfs_strset *set);
/* Adds s (borrowed: it must outlive the set) with value. 1 if added, 0 if s was there
 * already (its value unchanged), -1 on allocation failure. */
int cfs_strset_add(cfs_strset *set, const char *s, uint64_t value);
/* The value of s, or NULL if s is not in the set; the pointer stays valid until the next add. */
uint64_t *cfs_strset_get(const cfs_strset *set, const char *s);

#endif
