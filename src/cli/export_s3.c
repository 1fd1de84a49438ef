/* `cellucid-fs export SRC s3://bucket/prefix/`: the export's keys as objects, PUT in parallel,
 * what is already there with the same bytes skipped, datasets.json last. */
#include "export.h"
#include "path.h"
#include "s3_upload.h"
#include "strfmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* PUTs in flight at once: the time of one is mostly waiting on the network. */
enum { S3_PARALLEL = 16 };

typedef struct s3_sink {
    cfs_sink base;
    cfs_s3_uploader *up;
    const char *prefix;            /* "" or ending in '/' */
} s3_sink;

static int s3_dir(cfs_sink *s, const char *key, cfs_err *err)
{
    (void)s;
    (void)key;
    (void)err;
    return 0;
}

static int s3_put(cfs_sink *s, const char *key, const void *data, size_t len, bool json,
                  cfs_err *err)
{
    s3_sink *sink = (s3_sink *)s;
    char *full = cfs_path_join(sink->prefix, key);
    int rc = full ? cfs_s3_uploader_put(sink->up, full, data, len,
                                        json ? "application/json" : "application/octet-stream",
                                        err)
                  : cfs_err_oom(err);
    free(full);
    return rc;
}

/* A store that failed stays as far as it was written: not in datasets.json, so no reader looks
 * at it; a later export writes it whole. */
static void s3_discard(cfs_sink *s, const char *key)
{
    (void)s;
    (void)key;
}

static int s3_drain(cfs_sink *s, cfs_err *err)
{
    return cfs_s3_uploader_drain(((s3_sink *)s)->up, err);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The work folder of the layout: under TMPDIR, as no local OUT has a sibling to offer. */
static char *work_folder(void)
{
    const char *tmp = getenv("TMPDIR");
    return cfs_strdupf("%s/.cellucid-fs-export-work-%ld", tmp && tmp[0] ? tmp : "/tmp",
                       (long)getpid());
}

static void summary(FILE *log, const char *url, cfs_s3_uploader *up, double seconds)
{
    cfs_s3_upload_stats st;
    cfs_s3_uploader_stats(up, &st);
    fprintf(log, "cellucid-fs: exported to %s: %llu objects written (%.1f MB), %llu skipped "
                 "(already there, %.1f MB), in %.1f s\n", url,
            (unsigned long long)st.written, (double)st.bytes_written / 1e6,
            (unsigned long long)st.skipped, (double)st.bytes_skipped / 1e6, seconds);
}

int cfs_export_s3(const char *src, const char *url, const cfs_options *opts, FILE *log,
                  cfs_err *err)
{
    double t0 = now_seconds();
    char *bucket = NULL, *key = NULL, *prefix = NULL, *work = NULL;
    cfs_s3_config *cfg = malloc(sizeof *cfg);
    cfs_s3_uploader *up = NULL;
    int rc = cfg ? cfs_s3_url_parse(url, &bucket, &key, err) : cfs_err_oom(err);
    if (rc == 0)
        rc = cfs_s3_config_load(cfg, opts->s3_endpoint, err);
    if (rc == 0)
        snprintf(cfg->cafile, sizeof cfg->cafile, "%s", opts->remote.cafile);
    if (rc == 0) {
        size_t n = strlen(key);
        prefix = cfs_strdupf("%s%s", key, n && key[n - 1] != '/' ? "/" : "");
        work = work_folder();
        rc = prefix && work ? 0 : cfs_err_oom(err);
    }
    if (rc == 0 && !(up = cfs_s3_uploader_new(cfg, bucket, prefix, S3_PARALLEL, err)))
        rc = -1;
    if (rc == 0) {
        s3_sink sink = {{s3_dir, s3_put, s3_discard, s3_drain}, up, prefix};
        rc = cfs_export_into(src, opts, &sink.base, log, work, err);
        if (rc >= 0)
            summary(log, url, up, now_seconds() - t0);
    }
    cfs_s3_uploader_free(up);
    free(cfg);
    free(bucket);
    free(key);
    free(prefix);
    free(work);
    return rc;
}
