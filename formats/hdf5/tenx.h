/* The 10x Genomics feature-barcode matrix (.h5), shared by the .h5 reader and the outs/ reader. */
#ifndef CFS_TENX_H
#define CFS_TENX_H

#include "model.h"

/*
 * Opens a Cell Ranger .h5 matrix (>= 3.0 /matrix layout, or 1.2-2.x one group per genome) as a
 * dataset: X (cells x genes, the CSC arrays read as CSR without a copy), obs index = barcodes,
 * var = features. On refusal returns -1 with a one-line reason (without the file name).
 */
int cfs_tenx_open(const char *path, cfs_dataset **out, cfs_err *err);

#endif
