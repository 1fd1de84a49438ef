/* Detection of a Zarr store inside a zip from the probe's reads alone: the zip's end record at
 * its tail (ZIP64 too), then its central directory's names, looking for Zarr metadata at the
 * root or under one top folder (zr_backend_root_meta_name). Nothing is opened with libzip
 * until this says yes. */
#ifndef CFS_ZARR_ZIPPROBE_H
#define CFS_ZARR_ZIPPROBE_H

#include <stdbool.h>

#include "probe.h"

bool zr_zip_probe(cfs_probe_input *in);

#endif
