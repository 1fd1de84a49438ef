/* Watching the source folder (docs/design.md §9): inotify, with a slow stat poll as a safety
 * net. */
#ifndef CFS_WATCH_H
#define CFS_WATCH_H

#include "volume.h"

typedef struct cfs_watch cfs_watch;

/* Starts a thread that refreshes v when src changes; NULL if it cannot start. */
cfs_watch *cfs_watch_start(const char *src, cfs_volume *v, cfs_err *err);
void cfs_watch_stop(cfs_watch *w);

#endif
