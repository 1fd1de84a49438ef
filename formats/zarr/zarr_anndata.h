/*
 * The AnnData Zarr reader's entry for other Zarr readers: an AnnData group of a store (a MuData
 * modality, mod/<name>, is a store of its own), read with every rule of a whole AnnData store.
 */
#ifndef CFS_ZARR_ANNDATA_H
#define CFS_ZARR_ANNDATA_H

#include <stdbool.h>

#include "model.h"
#include "zarr_meta.h"

/* Reads the AnnData store at path (a folder) into a new dataset; global: the root of a
 * multimodal store (its own root encoding), whose obs, var, obsm, obsp, uns... are read as an
 * AnnData's. -1 with the reason in err. */
int cfs_zarr_anndata_read(const char *path, bool global, cfs_dataset **out, cfs_err *err);

/* The same for an open store (or a group's view of one, zr_store_group): the dataset takes
 * over the caller's reference to s, also on failure; path names the dataset's source. */
int cfs_zarr_anndata_read_store(zr_store *s, const char *path, bool global, cfs_dataset **out,
                                cfs_err *err);

#endif
