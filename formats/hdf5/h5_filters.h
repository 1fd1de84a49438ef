/*
 * The HDF5 filters cellucid-fs decodes itself, beyond libhdf5's built-in ones (gzip, shuffle,
 * Fletcher-32, szip, n-bit, scale-offset): LZF (h5py's 32000, liblzf), Blosc (32001, c-blosc,
 * every compressor and shuffle it was built with), LZ4 (32004, liblz4, hdf5plugin's framing),
 * Bitshuffle (32008, h5_bitshuffle.c; blocks uncompressed, LZ4 or zstd) and Zstandard (32015,
 * libzstd). They are registered with libhdf5 once, when the HDF5 lock is first taken
 * (hdf5_util.c), so no HDF5_PLUGIN_PATH or plugin package is needed, and a plugin of the same id
 * in libhdf5's plugin folder is never loaded. Decode side only: the encoder is absent (nothing
 * here writes HDF5). Each decoder checks every length against its buffers and returns 0 (a
 * failed read, with the reason on the HDF5 error stack) on corrupt input.
 */
#ifndef CFS_H5_FILTERS_H
#define CFS_H5_FILTERS_H

#include <hdf5.h>

#define CFS_H5Z_LZF 32000
#define CFS_H5Z_BLOSC 32001
#define CFS_H5Z_LZ4 32004
#define CFS_H5Z_BITSHUFFLE 32008
#define CFS_H5Z_ZFP 32013
#define CFS_H5Z_ZSTD 32015

/* Registers the filters above; 0, or -1 if libhdf5 refused one (the others stay registered).
 * Called once by hdf5_util.c's initialisation, before any other HDF5 call of cellucid-fs. */
int cfs_h5_filters_register(void);

/* The usual name of an HDF5 filter id ("zfp", "szip", ...), else the name stored in the file,
 * else "unnamed". */
const char *cfs_h5_filter_name(H5Z_filter_t id, const char *stored);

#endif
