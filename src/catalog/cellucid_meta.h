/*
 * What a source says about itself in uns['cellucid'], checked by Cellucid's key table (schema 1):
 * schema, id, name, description, citation, source, defaults, outlierQuantiles, priority and the
 * records the packages keep (history_applied, gene_sets, pulled). Cellucid refuses a file with a
 * wrong key; a served store must always open, so a wrong key or value is left out of the dataset
 * instead, with its reason (status.json and the export log list it). A later schema refuses the
 * source, naming it.
 */
#ifndef CFS_CELLUCID_META_H
#define CFS_CELLUCID_META_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

typedef struct cfs_cellucid_meta {
    /* The source's own priority record describes its cells (a cellucid.prepare() output): the
     * cells are stored in priority order already and keep it. */
    bool source_ordered;
} cfs_cellucid_meta;

/* Checks ds's uns/cellucid, leaving out what is wrong. -1 with the reason in err when the
 * source must be refused (a later schema) or on allocation failure. */
int cfs_cellucid_meta_check(cfs_dataset *ds, cfs_cellucid_meta *out, cfs_err *err);

#endif
