/*
 * Embeddings of a dataset of several modalities (docs/design.md §4.2). Cellucid draws the
 * global cells from the global obsm; when it holds no drawable float embedding, the first modality
 * (in the served order) that has drawable float embeddings lends them: each becomes global
 * obsm "<modality>:<key>" (mudata's name for what is pulled from a modality), its rows mapped
 * through obsmap, NaN for the cells the modality does not hold (Cellucid does not draw them).
 */
#ifndef CFS_PULLED_H
#define CFS_PULLED_H

#include "model.h"

/* Adds the pulled embeddings to ds->root's obsm when the rule above applies; 0 when nothing is
 * to pull. Call after the maps are final (the layout's order applied). */
int cfs_pull_modality_embeddings(cfs_dataset *ds, cfs_err *err);

#endif
