/*
 * Dataset handles that are closed while idle and opened again at their next use. An open HDF5
 * file costs about half a MiB of metadata cache, and each open dataset more: a mount of a
 * folder of many sources would hold all of them for as long as it runs. So only the datasets
 * of the most recently used files stay open; when a file's datasets are all closed, libhdf5
 * closes the file (they are opened with the weak close degree) and its memory goes back to
 * libhdf5's free lists for the next file.
 *
 * A dozing file holds no descriptor (a folder of thousands of sources would hold thousands): a
 * dataset is opened again by the file's name, and what is found there must be the version the
 * model was built from (device, inode, size and mtime recorded at the first open). A file
 * removed, renamed, replaced or rewritten meanwhile is not opened again: its reads fail, never
 * read another file (a file renamed back is the same version and reads again). Every function
 * here is called under cfs_h5_lock.
 */
#ifndef CFS_H5_DORMANT_H
#define CFS_H5_DORMANT_H

#include <hdf5.h>
#include <stddef.h>

#include "error.h"

/* Files whose datasets stay open (the least recently used beyond this are closed). */
#define CFS_H5_AWAKE_FILES 16

typedef struct cfs_h5_dset cfs_h5_dset;

/* Takes over dset, an open dataset; dapl is the access property list it is opened again with
 * (taken over too; H5P_DEFAULT for none). NULL with err if it cannot be kept, or if its values
 * are in another file (cfs_h5_dataset_in_file): dset and dapl are then closed. */
cfs_h5_dset *cfs_h5_dset_keep(hid_t dset, hid_t dapl, cfs_err *err);
/* The dataset's id, opened again if it was closed; valid until the lock is released. -1 with
 * err if the file cannot be opened again. */
hid_t cfs_h5_dset_id(cfs_h5_dset *d, cfs_err *err);
void cfs_h5_dset_free(cfs_h5_dset *d);
/* How many files have datasets open now (for tests). */
size_t cfs_h5_awake_files(void);

#endif
