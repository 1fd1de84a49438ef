/* Joining path components: file system paths, HDF5 object paths and store keys alike. */
#ifndef CFS_PATH_H
#define CFS_PATH_H

/*
 * A malloc'd "a/b": one '/' between them (none added when a already ends with one); a NULL or
 * empty a gives a copy of b and an empty b a copy of a. NULL on allocation failure.
 */
char *cfs_path_join(const char *a, const char *b);

#include <stddef.h>

/*
 * The entries of folder dir, hidden ones (a leading '.') excepted, sorted by name (strcmp):
 * *names receives n malloc'd names (free with cfs_path_list_free). -1 (errno set) if the folder
 * cannot be opened, or on allocation failure.
 */
int cfs_path_list(const char *dir, char ***names, size_t *n);
void cfs_path_list_free(char **names, size_t n);

/* 1 if path, all symlinks resolved, is root or lies below it (root resolved too); 0 if not or
 * if either cannot be resolved. What keeps a reader inside the folder it was given: nothing is
 * read through a symlink leading out of it. */
int cfs_path_inside(const char *path, const char *root);

/* How path, below root or root itself, is shown to those a mount publishes to: below root, or
 * root's own name when it is root (where root lies on the machine is nobody's business); path
 * itself when it is neither. Points into path or root. */
const char *cfs_path_shown(const char *root, const char *path);

#endif
