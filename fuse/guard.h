/*
 * One daemon per mount point and per cache folder: a second `mount` on a folder that is already
 * a mount point would stack a second daemon over the first, and two daemons on one cache folder
 * would each evict what the other serves.
 */
#ifndef CFS_GUARD_H
#define CFS_GUARD_H

#include <stdbool.h>

#include "error.h"

/* True if path (an existing folder) is a mount point now (/proc/self/mountinfo). */
bool cfs_guard_is_mount_point(const char *path);

/* Locks the cache folder for this process and its children (flock on <dir>/lock, which holds
 * the pid of the daemon using it). A lock left by a daemon that died is free again (the kernel
 * drops it with the process), so it is taken over. Returns the lock's descriptor, kept open
 * for the daemon's life; -1 with the holder's pid in err if another daemon uses the folder. */
int cfs_guard_lock_cache(const char *dir, cfs_err *err);
/* Writes the caller's pid into the lock (after the daemon has forked). */
void cfs_guard_note_pid(int fd);

#endif
