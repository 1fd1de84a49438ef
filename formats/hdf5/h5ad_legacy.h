/*
 * The h5ad layouts written before anndata 0.8, read the way anndata reads them
 * (../shared/reference/input-formats.md §1.3-§1.5): anndata 0.7 and SeuratDisk's Convert()
 * (categorical columns as integer codes with their categories in <frame>/__categories), and
 * anndata <= 0.6 (obs, var, obsm and varm as record datasets, categories in uns). The model
 * they give is the one the modern file of the same data gives. Callers hold cfs_h5_lock.
 */
#ifndef CFS_H5AD_LEGACY_H
#define CFS_H5AD_LEGACY_H

#include <hdf5.h>
#include <stdbool.h>

#include "model.h"

/* The categories of the code column df/col of an anndata 0.7 or SeuratDisk dataframe: the
 * column's `categories` attribute (an object reference, or a path relative to df), else
 * df/__categories/col. 1 with *cats and *ordered set, 0 if it has none, -1 with err. */
int cfs_h5ad_column_categories(hid_t df, const char *col, cfs_array **cats, bool *ordered,
                               cfs_err *err);

/* An anndata <= 0.6 obs/var record dataset loc/name as a dataframe: the first field is the
 * index (its name the index name, as anndata's read_dataframe_legacy sets it; integers become
 * decimal strings, as anndata makes them), the others are columns; a field that is not a column is left out of ds under path/<field>. */
int cfs_h5ad_record_frame(hid_t loc, const char *name, const char *path, cfs_dataset *ds,
                          cfs_elem **out, cfs_err *err);

/* An anndata <= 0.6 obsm/varm record dataset: one entry of slot per field (a field of k-value
 * arrays is an n x k entry). rows is what the axis has. */
int cfs_h5ad_record_mapping(hid_t loc, const char *name, const char *path, uint64_t rows,
                            cfs_dataset *ds, cfs_elem *slot, cfs_err *err);

/* anndata's read-time fixes of legacy files: an integer obs or var column with its categories
 * in uns/<column>_categories becomes categorical (that uns entry goes), and neighbor graphs in
 * uns/neighbors (distances, connectivities) move to obsp; the mappings every AnnData has
 * (layers, obsm, varm, obsp, varp, uns, raw's varm) are added empty where the file has none.
 * Fails only on out of memory. */
int cfs_h5ad_legacy_fixups(cfs_dataset *ds, cfs_err *err);

#endif
