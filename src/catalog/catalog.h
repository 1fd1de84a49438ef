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
/* A dataset datasets.json lists, and its published view (session.h) when it has one. */
typedef struct cfs_catalog_entry {
    const char *id;
    const char *session_sha256;         /* lowercase hex of the view's bytes; NULL: none */
    size_t session_len;                 /* how many bytes it has */
} cfs_catalog_entry;

/* The id the catalog opens on: wanted (-o default; NULL or "" for none) when listed, else the
 * first id in sorted order; NULL when nothing is listed. Points into e or wanted. */
const char *cfs_catalog_default(const cfs_catalog_entry *e, size_t n, const char *wanted);
/* The line saying why the catalog does not open on wanted (it is not listed), or NULL when it
 * does or none was wanted (caller frees). */
char *cfs_catalog_default_note(const cfs_catalog_entry *e, size_t n, const char *wanted);
/* datasets.json for the listed entries, sorted by id, opening on cfs_catalog_default; caller
 * frees. */
char *cfs_catalog_json(const cfs_catalog_entry *e, size_t n, const char *wanted_default);

#endif
