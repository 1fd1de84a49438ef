/*
 * The dense matrix SeuratObject's JoinLayers makes of an Assay5's split layers when they are
 * base matrices (StitchMatrix's matrix method): a double matrix of zeros, cells x features,
 * each layer's values put at the rows of its cells and the columns of its features. Served as
 * a view over the layers' own arrays (formats/r/rsplit.c builds it): a block of the join is
 * read from the layers holding its rows, zero where a row's layer lacks a feature or no layer
 * holds the row.
 */
#ifndef CFS_R_DENSEJOIN_H
#define CFS_R_DENSEJOIN_H

#include "model.h"

/* What the join reads from, all taken by rc_dense_join (freed with the array, or on failure):
 * part[k] a layer as its cells x features array (float64, int32 or bool: served as float64,
 * as R's join is double), feature[k] its columns' features in the assay's order (ascending;
 * NULL: every feature), owner[i] 1 + the part holding the assay's cell i (0: none) and row[i]
 * the cell's row in it. */
typedef struct rc_dense_parts {
    cfs_array **part;
    int32_t **feature;
    uint32_t *owner, *row;
    uint32_t nparts;
} rc_dense_parts;

/* The ncell x nfeat float64 join; NULL when out of memory (p's arrays freed either way). */
cfs_array *rc_dense_join(rc_dense_parts *p, uint64_t ncell, uint64_t nfeat);

#endif
