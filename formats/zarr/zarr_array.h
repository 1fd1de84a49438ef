/*
 * A Zarr array (v2 or v3, sharded or not) of a store as a model array (model.h): its chunk files are read on demand,
 * only those a read touches, whatever their shape against the block asked for; C and F order;
 * a missing chunk is its fill value. Values come out as the model has them: little-endian
 * numbers, bool as 0/1, strings (vlen-utf8 and vlen-bytes objects, fixed-width <U and |S) as
 * UTF-8. The store must outlive the array (the dataset's reader owns it).
 */
#ifndef CFS_ZARR_ARRAY_H
#define CFS_ZARR_ARRAY_H

#include "model.h"
#include "zarr_meta.h"

/* The array at rel; -1 with the reason (its metadata's defect, an unknown codec by name). */
int zr_array_open(const zr_store *s, const char *rel, cfs_array **out, cfs_err *err);

#endif
