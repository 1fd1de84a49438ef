/* `-o name=value,...` options shared by every command (mount(8) style). */
#ifndef CFS_OPTIONS_H
#define CFS_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "codec.h"
#include "error.h"
#include "identity.h"
#include "isolated.h"
#include "layout.h"
#include "store.h"

/* Where a front end puts the decompressed copy of a compressed input (x.h5ad.gz) a format reads
 * only from disk: export in its work folder, the mount in its cache. */
typedef struct cfs_unpacker {
    /* The path of a decompressed copy of source (compressed with codec), made now or kept from
     * before, malloc'd into *path; progress (may be NULL) hears how far it is. NULL: such
     * inputs are refused. */
    int (*copy)(void *ctx, const char *source, const char *codec, cfs_progress *progress,
                char **path, cfs_err *err);
    /* Whether an input whose format reads it whole at open (cfs_format_reads_whole: an R file)
     * is opened later, in the background, rather than now (the mount, before it is up). NULL:
     * now. */
    bool (*defer)(void *ctx, const char *source);
    void *ctx;
} cfs_unpacker;

typedef struct cfs_options {
    cfs_codec_id codec;
    cfs_layout_opts layout;
    cfs_unpacker unpack;            /* set by the front end, not by -o */
    /* Set by the front end: log lines name sources as cfs_path_shown(shown_root, source) (the
     * mount's SRC); NULL: by the path given. */
    const char *shown_root;
    /* Readers in worker processes (-o isolate, reader_timeout, reader_memory, readers); memory
     * 0 until cfs_options_isolation gives the default. */
    cfs_isolation isolate;
    /* Sources that are URLs (-o remote_timeout, remote_poll, remote_cafile): 0 and "" for the
     * defaults; the front end hands them to src/net. */
    struct {
        double timeout, poll;
        char cafile[4096];
    } remote;
    /* s3:// sources and export to s3://: an S3-compatible service's URL (path-style); "" = AWS */
    char s3_endpoint[1024];
    /* The id datasets.json opens on when it lists it (-o default); "": the first id. */
    char default_id[CFS_ID_MAX + 1];
    /* mount only */
    char cache_dir[4096];           /* "" = the default */
    uint64_t cache_size;
    bool pass_unknown;              /* unknown names go to fuse_opts instead of failing */
    char fuse_opts[1024];           /* comma-separated options for libfuse */
} cfs_options;

#define CFS_DEFAULT_CACHE_SIZE (UINT64_C(10) << 30)

void cfs_options_init(cfs_options *o);
/* The isolation the options ask for, with the defaults filled in: a worker's memory limit is
 * 4 x memory + 1G (its reads are the layout's slabs; libraries and their caches need room). */
cfs_isolation cfs_options_isolation(const cfs_options *o);
/* What a store is made with under these options (the compressor, the Zarr format and its
 * sharding). */
cfs_store_opts cfs_options_store(const cfs_options *o);
/* Parses one comma-separated option list into o; unknown names and bad values are errors. */
int cfs_options_parse(cfs_options *o, const char *list, cfs_err *err);

#endif
