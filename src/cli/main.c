/* The command line: cellucid-fs mount | export | inspect | --help | --version. */
#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "mount.h"
#include "export.h"
#include "inspect.h"
#include "options.h"
#include "format.h"
#include "number.h"
#include "forkserver.h"
#include "blocks.h"

static const char usage[] =
    "Usage: cellucid-fs mount [-f] [-d] [-o OPT[,OPT...]] SRC MNT\n"
    "       cellucid-fs export [-o OPT[,OPT...]] [--force] SRC OUT\n"
    "       cellucid-fs inspect [--json] FILE...\n"
    "       cellucid-fs --help | --version\n"
    "\n"
    "Presents single-cell inputs as consolidated AnnData Zarr v2 stores.\n"
    "\n"
    "Inputs (recognised by content, not by name):\n"
    "%s"
    "\n"
    "Commands:\n"
    "  mount SRC MNT    serve the same stores and datasets.json read-only on the folder MNT,\n"
    "                   chunks made on first read and kept in an on-disk cache;\n"
    "                   unmount with fusermount3 -u MNT\n"
    "  export SRC OUT   write one <id>.zarr/ store per input in SRC (a file or a folder)\n"
    "                   and a datasets.json catalog into the new folder OUT, or, when OUT\n"
    "                   is s3://BUCKET/PREFIX/, as objects under PREFIX (datasets.json last;\n"
    "                   objects already there with the same bytes are skipped, so a rerun\n"
    "                   finishes an interrupted export); credentials from AWS_ACCESS_KEY_ID,\n"
    "                   AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN) or ~/.aws/credentials\n"
    "  inspect FILE...  show what each input holds and what would be left out\n"
    "\n"
    "Published views: NAME.cellucid-session beside an input (NAME is the input's name\n"
    "without its extension: pbmc.h5ad, pbmc.h5ad.gz -> pbmc; run1/outs/ -> run1; object o\n"
    "of x.RData -> x-o) is its dataset's default view in Cellucid: served as\n"
    "<id>.cellucid-session beside the store and listed in datasets.json with its exact\n"
    "length and SHA-256; one that is empty, over 64 MiB or not a session file is not\n"
    "listed (status.json and the log say why), and never refuses its dataset.\n"
    "\n"
    "Options:\n"
    "  -o compressor=NAME  chunk compressor: blosc (default; blosc lz4, byte shuffle),\n"
    "                      zstd, zlib, gzip or none\n"
    "  -o order=priority   cells in priority order v1, expression gene-major (default)\n"
    "  -o order=original   cells in source order, every element in its source encoding\n"
    "  -o priority_seed=N  seed of the priority order (0 to 2^64-1, default 0)\n"
    "  -o memory=SIZE      memory budget of the layout engine (e.g. 256M, 2G; default 512M)\n"
    "  -o cache_dir=DIR    the chunk cache (mount; default $XDG_CACHE_HOME/cellucid-fs,\n"
    "                      /var/cache/cellucid-fs for root)\n"
    "  -o cache_size=SIZE  the cache's hard size bound (mount; default 10G)\n"
    "  -o isolate=off      read inputs in this process, not in worker processes\n"
    "  -o reader_timeout=S time limit of one read by a worker (default 60 s)\n"
    "  -o reader_memory=SIZE  memory limit of a worker (default 4 x memory + 1G)\n"
    "  -o readers=N        worker processes alive at once (1 to 1024, default 16)\n"
    "  -o s3_endpoint=URL  an S3-compatible service (s3:// sources and export; path-style, e.g.\n"
    "                      http://127.0.0.1:7480; default AWS, region from AWS_REGION)\n"
    "  -o default=ID       the dataset datasets.json opens on (mount, export); an id not\n"
    "                      listed falls back to the first id, as status.json and the log say\n"
    "  -o OPT              other options go to FUSE (mount: allow_other, ...)\n"
    "  -f, -d              stay in the foreground; -d also prints FUSE requests (mount)\n"
    "  --force             replace an existing OUT (export)\n"
    "  --json              machine-readable output (inspect)\n"
    "\n"
    "Exit status: 0 success, 1 usage or fatal error, 2 an input was refused.\n"
    "See cellucid-fs(1).\n";

/* The usage text with the format table's list in it. */
static void print_usage(FILE *out)
{
    char *formats = NULL;
    size_t len = 0;
    FILE *list = open_memstream(&formats, &len);
    if (list) {
        cfs_format_print_list(list, "  ");
        fclose(list);
    }
    fprintf(out, usage, formats ? formats : "");
    free(formats);
}

typedef struct cli {
    cfs_options opts;
    bool force, json, foreground, debug;
    char **args;
    int nargs;
} cli;

/* Options may come before or after the paths, as with mount(8). */
static int parse_cli(cli *c, int argc, char **argv, cfs_err *err)
{
    cfs_options_init(&c->opts);
    c->opts.pass_unknown = strcmp(argv[1], "mount") == 0;
    c->args = calloc((size_t)argc + 1, sizeof *c->args);
    if (!c->args)
        return cfs_err_oom(err);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-o") == 0) {
            if (++i == argc)
                return cfs_err_set(err, "-o needs an option list");
            if (cfs_options_parse(&c->opts, argv[i], err) < 0)
                return -1;
        } else if (strncmp(a, "-o", 2) == 0) {
            if (cfs_options_parse(&c->opts, a + 2, err) < 0)
                return -1;
        } else if (strcmp(a, "--force") == 0) {
            c->force = true;
        } else if (c->opts.pass_unknown && strcmp(a, "-f") == 0) {
            c->foreground = true;
        } else if (c->opts.pass_unknown && strcmp(a, "-d") == 0) {
            c->debug = true;
        } else if (strcmp(a, "--json") == 0) {
            c->json = true;
        } else if (strcmp(a, "--") == 0) {
            while (++i < argc)
                c->args[c->nargs++] = argv[i];
        } else if (a[0] == '-' && a[1]) {
            return cfs_err_set(err, "unknown flag '%s' (see cellucid-fs --help)", a);
        } else {
            c->args[c->nargs++] = argv[i];
        }
    }
    return 0;
}

static int run_export(cli *c)
{
    if (c->nargs != 2) {
        fputs("cellucid-fs: export needs SRC and OUT\n", stderr);
        print_usage(stderr);
        return 1;
    }
    cfs_err err = {0};
    int rc = cfs_export(c->args[0], c->args[1], &c->opts, c->force, stderr, &err);
    if (rc < 0) {
        fprintf(stderr, "cellucid-fs: %s\n", err.msg);
        return 1;
    }
    return rc;
}

static int run_mount(cli *c)
{
    if (c->nargs != 2) {
        fputs("cellucid-fs: mount needs SRC and MNT\n", stderr);
        print_usage(stderr);
        return 1;
    }
    return cfs_fuse_mount(c->args[0], c->args[1], &c->opts, c->foreground, c->debug);
}

static int run_inspect(cli *c)
{
    if (c->nargs < 1) {
        fputs("cellucid-fs: inspect needs at least one FILE\n", stderr);
        print_usage(stderr);
        return 1;
    }
    return cfs_inspect(c->args, c->nargs, c->json, stdout);
}

/* URLs are read by this process through src/net; its reader workers ask it (§11). */
static int start_remote(const cfs_options *o, cfs_err *err)
{
    cfs_blocks_config cfg = {
        .http = {o->remote.timeout > 0 ? o->remote.timeout : CFS_REMOTE_TIMEOUT,
                 o->remote.cafile[0] ? o->remote.cafile : NULL,
                 o->s3_endpoint[0] ? o->s3_endpoint : NULL},
        .poll = o->remote.poll > 0 ? o->remote.poll : CFS_REMOTE_POLL,
        .block_size = CFS_REMOTE_BLOCK,
        .shapes = cfs_format_url_shapes(),     /* base names no format's files (§2.1) */
    };
    return cfs_blocks_start(&cfg, err);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_usage(stderr);
        return 1;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        print_usage(stdout);
        return 0;
    }
#ifdef M_ARENA_MAX
    /* glibc gives each new thread a malloc arena reserving 64 MiB of address space, up to 8 a
     * core: a daemon whose FUSE and layout threads come and go would grow its address space by
     * hundreds of MiB it never uses, and fail under ulimit -v (design §6.2). Four keep the
     * threads' allocations apart enough. */
    mallopt(M_ARENA_MAX, 4);
    /* glibc raises its mmap threshold each time a large block is freed, so a long-running
     * daemon ends up keeping chunk-sized buffers (hundreds of KiB to MiB, made and freed all
     * day) in its heaps, where freed space is scattered and not given back: its resident
     * memory creeps up with the work done. A fixed threshold keeps them mapped on their own
     * and returned when freed, so what stays resident is what is in use. */
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
    /* The reader workers' fork server started by this program (src/isolate/spawn.c), not by
     * people. */
    uint64_t fd;
    if (strcmp(argv[1], CFS_FORKSERVER_FLAG) == 0 && argc == 3 && cfs_parse_u64(argv[2], &fd) &&
        fd < 1024)
        return cfs_forkserver_main((int)fd);
    if (strcmp(argv[1], "--version") == 0) {
        printf("cellucid-fs %s\n", PACKAGE_VERSION);
        return 0;
    }
    bool is_export = strcmp(argv[1], "export") == 0, is_mount = strcmp(argv[1], "mount") == 0;
    if (!is_export && !is_mount && strcmp(argv[1], "inspect") != 0) {
        fprintf(stderr, "cellucid-fs: unknown command '%s'\n", argv[1]);
        print_usage(stderr);
        return 1;
    }
    cli c = {0};
    cfs_err err = {0};
    int rc;
    if (parse_cli(&c, argc, argv, &err) < 0) {
        fprintf(stderr, "cellucid-fs: %s\n", err.msg);
        rc = 1;
    } else if (start_remote(&c.opts, &err) < 0) {
        fprintf(stderr, "cellucid-fs: %s\n", err.msg);
        rc = 1;
    } else {
        rc = is_export ? run_export(&c) : is_mount ? run_mount(&c) : run_inspect(&c);
    }
    free(c.args);
    return rc;
}
