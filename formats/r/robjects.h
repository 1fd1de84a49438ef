/*
 * The single-cell objects of an R file, each mapped onto a dataset whose root the caller made:
 * Seurat (formats/r/seurat.c) and SingleCellExperiment / SummarizedExperiment
 * (formats/r/sce.c). -1 with a one-line reason in err refuses the object; what is only left
 * out goes to c->ds's left-out list.
 */
#ifndef CFS_R_OBJECTS_H
#define CFS_R_OBJECTS_H

#include "rconvert.h"

int r_seurat_build(const rconv *c, const r_obj *so, cfs_err *err);
int r_sce_build(const rconv *c, const r_obj *sce, cfs_err *err);

#endif
