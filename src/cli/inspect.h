/* `cellucid-fs inspect`: what a reader sees in an input, for people (text) and scripts (JSON). */
#ifndef CFS_INSPECT_H
#define CFS_INSPECT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

/* The description of one input (never NULL except on allocation failure). */
json_t *cfs_inspect_file(const char *path);
/* Prints descriptions of paths; returns 0, or 2 if one was refused. */
int cfs_inspect(char *const *paths, int n, bool as_json, FILE *out);

#endif
