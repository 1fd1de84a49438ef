/*
 * Progress of one source's long layout work (docs/design.md §6): the element being laid out and
 * how far, for the status document, and a log line per tenth once a job has run for two seconds.
 * Jobs report from any thread.
 */
#ifndef CFS_PROGRESS_H
#define CFS_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct cfs_progress cfs_progress;

/* log may be NULL (no lines). NULL on allocation failure: reporting to NULL does nothing. */
cfs_progress *cfs_progress_new(const char *source, FILE *log);
void cfs_progress_free(cfs_progress *p);
/* A job on element starts, goes on (fraction of it done, 0..1) and ends (also on failure).
 * Several jobs of one source may run at once: the source works until the last one ends, and
 * shows the job that reported last. */
void cfs_progress_begin(cfs_progress *p, const char *element);
void cfs_progress_note(cfs_progress *p, const char *element, double fraction);
void cfs_progress_end(cfs_progress *p, const char *element);
/* Whether work runs now; if so its element and fraction. */
bool cfs_progress_get(cfs_progress *p, char *element, size_t len, double *fraction);

#endif
