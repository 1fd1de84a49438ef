/* `-o name=value,...` options shared by every command (mount(8) style). */
#ifndef CFS_OPTIONS_H
#define CFS_OPTIONS_H

#include "codec.h"
#include "error.h"
#include "layout.h"

typedef struct cfs_options {
    cfs_codec_id codec;
    cfs_layout_opts layout;
} cfs_options;

void cfs_options_init(cfs_options *o);
/* Parses one comma-separated option list into o; unknown names and bad values are errors. */
int cfs_options_parse(cfs_options *o, const char *list, cfs_err *err);

#endif
