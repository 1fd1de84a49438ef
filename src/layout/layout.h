/*
 * The layout step: the seam between the dataset model and the renderer (docs/design.md §4, §7).
 * order=priority (the default) stores cells in priority order v1 on every per-cell axis, adds
 * obs/cellucid_original_position and uns/cellucid/priority, and makes X, layers and raw/X
 * gene-major (a source already in priority order keeps its order and record). order=original serves the source as it is.
 */
#ifndef CFS_LAYOUT_H
#define CFS_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model.h"
#include "progress.h"
#include "space.h"

typedef enum cfs_cell_order {
    CFS_ORDER_PRIORITY,
    CFS_ORDER_ORIGINAL
} cfs_cell_order;

typedef struct cfs_layout_opts {
    cfs_cell_order order;
    uint64_t seed;
    /* The source stores its cells in priority order already, and says so with a valid record
     * of its own (uns/cellucid/priority, a cellucid.prepare() output): its order and its record
     * are kept, and seed is not used. Set per dataset by the caller. */
    bool source_ordered;
    uint64_t memory;            /* the engine's memory budget in bytes */
    const char *workdir;        /* spill files; must be set for order=priority */
    cfs_space *space;           /* what the work files' bytes count against; NULL: nothing */
    FILE *log;                  /* long jobs' progress lines; NULL: none */
    cfs_progress *progress;     /* the dataset's progress, set by cfs_prepare; may be NULL */
    /* The store's codec: the expression matrices' chunks are kept encoded as the pass makes
     * them (docs/design.md §7). NULL: their values are kept as they are. */
    const cfs_chunk_codec *codec;
} cfs_layout_opts;

#define CFS_LAYOUT_DEFAULT_MEMORY (UINT64_C(512) << 20)

/* Rewrites ds in place into its served layout; -1 with a reason in err. */
int cfs_layout_apply(cfs_dataset *ds, const cfs_layout_opts *opts, cfs_err *err);

#endif
