/*
 * The layout step: the seam between the dataset model and the renderer (DESIGN §4, §7).
 * It turns a dataset as its reader presents it into the dataset the store serves. With
 * order=original (the only order before the layout engine lands) cells keep their source
 * order and every element keeps its source encoding.
 */
#ifndef CFS_LAYOUT_H
#define CFS_LAYOUT_H

#include "model.h"

typedef enum cfs_cell_order {
    CFS_ORDER_ORIGINAL
} cfs_cell_order;

typedef struct cfs_layout_opts {
    cfs_cell_order order;
} cfs_layout_opts;

/* Rewrites ds in place into its served layout; -1 with a reason in err. */
int cfs_layout_apply(cfs_dataset *ds, const cfs_layout_opts *opts, cfs_err *err);

#endif
