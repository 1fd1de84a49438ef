/* Joining path components: file system paths, HDF5 object paths and store keys alike. */
#ifndef CFS_PATH_H
#define CFS_PATH_H

/*
 * A malloc'd "a/b": one '/' between them (none added when a already ends with one); a NULL or
 * empty a gives a copy of b and an empty b a copy of a. NULL on allocation failure.
 */
char *cfs_path_join(const char *a, const char *b);

#endif
