/* Name handling shared by readers whose formats allow duplicate names (loom, 10x). */
#ifndef CFS_NAMES_H
#define CFS_NAMES_H

#include <stddef.h>

/*
 * Makes names[0..n) unique exactly as anndata's var_names_make_unique does: the first
 * occurrence keeps its name, each later one gets "-1", "-2", ... (the first suffix not already
 * taken). Replaced strings are freed and reallocated. *changed receives how many were renamed.
 * -1 on allocation failure.
 */
int cfs_names_make_unique(char **names, size_t n, size_t *changed);

#endif
