/* `cellucid-fs mount`: the FUSE front end over the volume (docs/design.md §8). */
#ifndef CFS_FUSE_MOUNT_H
#define CFS_FUSE_MOUNT_H

#include <stdbool.h>

#include "options.h"

/* Mounts src on mnt and serves until unmounted (fusermount3 -u mnt). Returns the exit status. */
int cfs_fuse_mount(const char *src, const char *mnt, const cfs_options *opts, bool foreground,
                   bool debug);

#endif
