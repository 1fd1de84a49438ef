/*
 * Arrays of the dataset model backed by HDF5 datasets: shape and dtype from metadata, values
 * read on demand by hyperslab under the lock, through dataset handles that sleep while idle
 * (h5_dormant.h).
 */
#ifndef CFS_H5_ARRAY_H
#define CFS_H5_ARRAY_H

#include <hdf5.h>

#include "model.h"

/*
 * Opens loc/name as an array of the dataset model. The dataset stays open (with a chunk cache
 * sized for row-range reads when it is chunked and compressed) until the array is freed.
 * Compound datasets (rec-arrays, which live in uns and are small) are read whole at open
 * instead, so their variable-length string fields get exact fixed widths. Filters neither
 * libhdf5 nor h5_filters.c decodes (e.g. ZFP) are refused here rather than at the first read.
 */
int cfs_h5_array_open(hid_t loc, const char *name, cfs_array **out, cfs_err *err);

/*
 * One field (member) of a 1-d compound dataset as an array of its own, read on demand: anndata
 * <= 0.6 wrote obs, var, obsm and varm as such record datasets. A field of numbers, bools or
 * strings is 1-d; a field of HDF5 arrays of k numbers (an obsm embedding) is n x k.
 */
int cfs_h5_field_array_open(hid_t loc, const char *name, unsigned member, cfs_array **out,
                            cfs_err *err);

#endif
