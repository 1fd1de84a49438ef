/*
 * The h5ad reader's entry for other HDF5 readers: an AnnData group anywhere in a file (a MuData
 * modality), read with every rule of a whole .h5ad file (modern and legacy layouts).
 */
#ifndef CFS_H5AD_H
#define CFS_H5AD_H

#include <hdf5.h>
#include <stdbool.h>

#include "model.h"

/* Reads the AnnData whose root is the group (or file) loc into a new dataset of source; the
 * caller holds the HDF5 lock. global: loc is the root of a multimodal file (its own root
 * encoding), whose obs, var, obsm, obsp, uns... are read as an AnnData's (no X needed). -1 with
 * the reason (the h5ad refusal) in err. */
int cfs_h5ad_read_group(const char *source, hid_t loc, bool global, cfs_dataset **out,
                        cfs_err *err);

#endif
