/* `cellucid-fs export`: the store front end that writes every key to a real folder. */
#ifndef CFS_EXPORT_H
#define CFS_EXPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "options.h"
#include "sink.h"
#include "store.h"

/* Writes every key of st below root in sink, with `writers` data key writers at once (0: one a
 * CPU); what was written is discarded on error. */
int cfs_export_store_into(const cfs_store *st, cfs_sink *sink, const char *root, int writers,
                          cfs_err *err);
/* Puts the document text (freed) as dir/name. */
int cfs_export_doc(cfs_sink *sink, const char *dir, const char *name, char *text, cfs_err *err);

/* Writes every key of st below dir (which must not exist) with `writers` chunk writers at once
 * (0: one a CPU, as an export does); nothing partial is left on error. */
int cfs_export_store(const cfs_store *st, const char *dir, int writers, cfs_err *err);

/*
 * Exports src (one input or a folder) into sink: every store, then datasets.json once they are
 * all stored. work (must not exist) holds the layout's work files meanwhile and is removed.
 * Returns as cfs_export.
 */
int cfs_export_into(const char *src, const cfs_options *opts, cfs_sink *sink, FILE *log,
                    const char *work, cfs_err *err);

/* Exports src into s3://bucket/prefix/ (export_s3.c): opts->s3_endpoint, the environment's
 * credentials; objects already there with the same bytes are not sent again; a summary on log. */
int cfs_export_s3(const char *src, const char *url, const cfs_options *opts, FILE *log,
                  cfs_err *err);

/*
 * Exports src (one input or a folder) into out (a folder, or an s3:// URL). Returns 0 if every source was exported,
 * 2 if some were refused (reported on log), -1 on a fatal error (err; nothing written).
 */
int cfs_export(const char *src, const char *out, const cfs_options *opts, bool force, FILE *log,
               cfs_err *err);

#endif
