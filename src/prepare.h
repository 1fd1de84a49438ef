/*
 * From a list of inputs to the datasets a front end serves: open each with its reader, apply the
 * layout, give each a distinct id and a name, and record what was refused or left out. Shared
 * by export and (later) the mount.
 */
#ifndef CFS_PREPARE_H
#define CFS_PREPARE_H

#include <stdbool.h>
#include <stdio.h>

#include "model.h"
#include "options.h"
#include "progress.h"
#include "sources.h"

/* What a dataset without a drawable embedding is told, unless its reader says better. */
#define CFS_NO_EMBEDDING_ADVICE                                                              \
    "no obsm array can be drawn as an embedding; add one (e.g. scanpy's sc.tl.umap) and "   \
    "export again"

typedef struct cfs_prepared {
    char *source;
    cfs_dataset *ds;           /* NULL when refused */
    char *refused;             /* one-line reason (without the file name) or NULL */
    char *id;
    char *name;
    bool id_clashed;
    const char *embedding;     /* first drawable obsm key, or NULL: not listed in the catalog */
    cfs_progress *progress;    /* its layout jobs' progress (may be NULL) */
} cfs_prepared;

typedef struct cfs_prepared_set {
    cfs_prepared *items;
    size_t n;
} cfs_prepared_set;

int cfs_prepare(const cfs_source_list *sources, const cfs_options *opts, cfs_prepared_set *out,
                cfs_err *err);
/* Marks one prepared dataset refused (e.g. a chunk could not be produced), freeing its model. */
void cfs_prepared_refuse(cfs_prepared *p, const char *reason);
void cfs_prepared_set_free(cfs_prepared_set *set);
/* Frees what each item owns, not the item array. */
void cfs_prepared_set_free_items(cfs_prepared_set *set);
/* Writes the one-line reports (refused, left out, id clashes, not in catalog) to log. */
void cfs_prepared_report(const cfs_prepared *p, FILE *log);

#endif
