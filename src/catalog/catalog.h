/* The catalog (docs/design.md §5): distinct dataset ids and the datasets.json that lists them. */
#ifndef CFS_CATALOG_H
#define CFS_CATALOG_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Makes wanted[0..n) distinct in place, in the given order (callers pass sources sorted by
 * path, so the result is deterministic): a clash gets "-2", "-3", ... appended (cut to stay a
 * valid id). clashed[i] is set when ids[i] was changed. -1 on allocation failure.
 */
int cfs_catalog_distinct_ids(char **ids, size_t n, bool *clashed);
/* datasets.json for the listed ids (sorted by id; default = the first); caller frees. */
char *cfs_catalog_json(char *const *ids, size_t n);

#endif
