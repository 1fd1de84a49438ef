/* `cellucid-fs export`: the store front end that writes every key to a real folder. */
#ifndef CFS_EXPORT_H
#define CFS_EXPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "options.h"
#include "store.h"

/* Writes every key of st below dir (which must not exist); nothing partial is left on error. */
int cfs_export_store(const cfs_store *st, const char *dir, cfs_err *err);

/*
 * Exports src (one input or a folder) into out. Returns 0 if every source was exported,
 * 2 if some were refused (reported on log), -1 on a fatal error (err; nothing written).
 */
int cfs_export(const char *src, const char *out, const cfs_options *opts, bool force, FILE *log,
               cfs_err *err);

#endif
