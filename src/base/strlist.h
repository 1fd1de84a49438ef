/* A growable list of owned strings (a folder's names, a file's lines). */
#ifndef CFS_STRLIST_H
#define CFS_STRLIST_H

#include <stddef.h>

typedef struct cfs_strlist {
    char **v;
    size_t n, cap;
} cfs_strlist;

/* Appends s, whose ownership passes to the list (freed on failure); -1 for a NULL s (a failed
 * allocation of the caller's) or when out of memory. */
int cfs_strlist_push(cfs_strlist *l, char *s);
/* Frees the strings and the list's storage; the list is empty again. */
void cfs_strlist_free(cfs_strlist *l);

#endif
