/* `-o name=value,...` options shared by every command (mount(8) style). */
#ifndef CFS_OPTIONS_H
#define CFS_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "codec.h"
#include "error.h"
#include "layout.h"

typedef struct cfs_options {
    cfs_codec_id codec;
    cfs_layout_opts layout;
    /* mount only */
    char cache_dir[4096];           /* "" = the default */
    uint64_t cache_size;
    bool pass_unknown;              /* unknown names go to fuse_opts instead of failing */
    char fuse_opts[1024];           /* comma-separated options for libfuse */
} cfs_options;

#define CFS_DEFAULT_CACHE_SIZE (UINT64_C(10) << 30)

void cfs_options_init(cfs_options *o);
/* Parses one comma-separated option list into o; unknown names and bad values are errors. */
int cfs_options_parse(cfs_options *o, const char *list, cfs_err *err);

#endif
