/* A dataset's identity (Cellucid's rules): its id, its name and the uns['cellucid'] it carries. */
#ifndef CFS_IDENTITY_H
#define CFS_IDENTITY_H

#include <stdbool.h>
#include <stddef.h>

#include "model.h"

#define CFS_ID_MAX 180

/* 1-180 of [A-Za-z0-9._-], starting with a letter or digit, not ending with '.'. */
bool cfs_id_valid(const char *id);
/* The file or folder name without directory and format extension (caller frees). */
char *cfs_source_stem(const char *path);
/* The folder holding the entry a local source's datasets are named after (cfs_source_stem):
 * pbmc.h5ad's folder, run1/'s for run1/outs/ (caller frees; NULL when out of memory). */
char *cfs_source_naming_folder(const char *path);
/* What a dataset of path is called before its own name: the stem, and for one part of an input
 * of several (an R workspace's object) "<stem>-<part>" (caller frees). */
char *cfs_source_part_stem(const char *path, const char *part);
/* An id derived from a name: each other code point becomes '_', cut to the rules (caller frees). */
char *cfs_id_from_name(const char *name);
/* The source's own valid uns['cellucid']['id'], or NULL (caller frees). */
char *cfs_identity_source_id(const cfs_dataset *ds);
/* The id ds (of source, and its part or NULL) asks for before ids are made distinct: its own,
 * else one from its name (cfs_source_part_stem); NULL when out of memory (caller frees). */
char *cfs_identity_wanted_id(const cfs_dataset *ds, const char *source, const char *part);
/* uns['cellucid']['name'], else uns['title'] (each only if it is text by Cellucid's rule), else
 * the text of stem (cfs_cellucid_text_from), else id (caller frees; NULL when out of memory). */
char *cfs_identity_name(const cfs_dataset *ds, const char *stem, const char *id);
/* cfs_identity_name without its last resort: NULL when neither the dataset nor stem has a
 * name that is text (or when out of memory). */
char *cfs_identity_own_name(const cfs_dataset *ds, const char *stem);
/* Sets uns/cellucid/{schema=1, id, name}, keeping the source's other keys. */
int cfs_identity_apply(cfs_dataset *ds, const char *id, const char *name, cfs_err *err);

#endif
