/*
 * An HDF5 virtual file driver over cfs_remote (remote.h): libhdf5 opens a URL as it opens a
 * file, its reads answered by range requests (docs/design.md §11), without libhdf5's ROS3
 * driver. Each open file keeps a few aligned blocks, so libhdf5's many small metadata reads
 * cost one request per block, not one each.
 */
#ifndef CFS_H5_REMOTE_H
#define CFS_H5_REMOTE_H

#include <hdf5.h>

/* The driver's id (registered at the first call); call under cfs_h5_lock. -1 on failure. */
hid_t cfs_h5_remote_driver(void);

#endif
