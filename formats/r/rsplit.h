/*
 * An Assay5's split layers (SeuratObject 5: after split(), or merge() of objects, a layer is
 * kept as one matrix per sample: counts.1, counts.2, ..., data.1, ...) joined into the one
 * matrix SeuratObject's JoinLayers makes of them: every cell of the assay a row, taken from the
 * layer that holds it, every feature of the assay a column, zero where that layer does not
 * have the feature. The assay's `cells` and `features` LogMaps (a logical matrix, names x
 * layers) say which cells and features each layer holds: its rows and columns are those, in
 * the assay's order. The joined matrix is a view over the layers' own arrays: nothing is copied
 * but its row pointers and the map of each layer's features to the assay's.
 *
 * Layers that are dgCMatrix join as a sparse matrix; layers that are base matrices (as split()
 * leaves a dense layer, and scale.data always) as JoinLayers joins them, a dense double
 * matrix, zero where a layer lacks a feature (formats/r/rdensejoin.h). Some of each are
 * refused: JoinLayers would make the first one's kind of all of them.
 */
#ifndef CFS_R_SPLIT_H
#define CFS_R_SPLIT_H

#include "rconvert.h"

/* Whether the list of layers holds layer name split: a layer named name.<suffix>. */
bool rc_has_split_layer(const r_obj *layers, const char *name);

/* The split layers name.<suffix> of the Assay5 assay joined as the cells x features sparse
 * element key (ncell x nfeat: the assay's cells and features LogMaps' rows); *out NULL when
 * it has no such layers. -1 with err: refused (what names the assay in the message) or out of
 * memory. */
int rc_split_join(const rconv *c, const r_obj *assay, const char *name, const char *key,
                  const char *what, uint64_t ncell, uint64_t nfeat, cfs_elem **out,
                  cfs_err *err);
/* rc_split_join for a layer that is one only when it covers the whole assay (scale.data,
 * issue 11): when the split layers together lack a cell or feature of the assay, *out is NULL
 * and why (nwhy bytes; "" otherwise) says what they hold, for the list of what is left out. */
int rc_split_join_covering(const rconv *c, const r_obj *assay, const char *name,
                           const char *key, const char *what, uint64_t ncell, uint64_t nfeat,
                           cfs_elem **out, char *why, size_t nwhy, cfs_err *err);

#endif
