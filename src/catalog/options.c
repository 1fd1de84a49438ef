#include "options.h"
#include "number.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void cfs_options_init(cfs_options *o)
{
    memset(o, 0, sizeof *o);
    o->codec = CFS_CODEC_BLOSC_LZ4;
    o->layout.order = CFS_ORDER_PRIORITY;
    o->layout.memory = CFS_LAYOUT_DEFAULT_MEMORY;
    o->cache_size = CFS_DEFAULT_CACHE_SIZE;
}

static int set_seed(cfs_options *o, const char *value, cfs_err *err)
{
    if (!cfs_parse_u64(value, &o->layout.seed))
        return cfs_err_setc(err, CFS_EINVALID,
                            "priority_seed=%s: not an integer from 0 to 2^64-1", value);
    return 0;
}

static int set_memory(cfs_options *o, const char *value, cfs_err *err)
{
    uint64_t v;
    if (!cfs_parse_size(value, &v) || v < (4u << 20))
        return cfs_err_setc(err, CFS_EINVALID,
                            "memory=%s: not a size of at least 4M (e.g. 256M, 2G)", value);
    o->layout.memory = v;
    return 0;
}

static int set_cache_size(cfs_options *o, const char *value, cfs_err *err)
{
    uint64_t v;
    if (!cfs_parse_size(value, &v) || v < (1u << 20))
        return cfs_err_setc(err, CFS_EINVALID,
                            "cache_size=%s: not a size of at least 1M (e.g. 512M, 20G)",
                           value);
    o->cache_size = v;
    return 0;
}

static int set_cache_dir(cfs_options *o, const char *value, cfs_err *err)
{
    if (!*value || strlen(value) >= sizeof o->cache_dir)
        return cfs_err_setc(err, CFS_EINVALID, "cache_dir=%s: needs a folder path", value);
    strcpy(o->cache_dir, value);
    return 0;
}

static int set_compressor(cfs_options *o, const char *value, cfs_err *err)
{
    if (cfs_codec_parse(value, &o->codec) < 0)
        return cfs_err_setc(err, CFS_EINVALID,
                            "compressor=%s: unknown; use blosc, zstd, zlib, gzip or none",
                           value);
    return 0;
}

static int set_order(cfs_options *o, const char *value, cfs_err *err)
{
    if (strcmp(value, "original") == 0) {
        o->layout.order = CFS_ORDER_ORIGINAL;
        return 0;
    }
    if (strcmp(value, "priority") == 0) {
        o->layout.order = CFS_ORDER_PRIORITY;
        return 0;
    }
    return cfs_err_setc(err, CFS_EINVALID,
                        "order=%s: unknown; use order=priority or order=original", value);
}

static int set_isolate(cfs_options *o, const char *value, cfs_err *err)
{
    if (strcmp(value, "on") != 0 && strcmp(value, "off") != 0)
        return cfs_err_setc(err, CFS_EINVALID, "isolate=%s: use isolate=on or isolate=off", value);
    o->isolate.off = strcmp(value, "off") == 0;
    return 0;
}

static int set_reader_timeout(cfs_options *o, const char *value, cfs_err *err)
{
    uint64_t v;
    if (!cfs_parse_u64(value, &v) || v < 1 || v > 86400)
        return cfs_err_setc(err, CFS_EINVALID, "reader_timeout=%s: not a number of seconds from "
                            "1 to 86400", value);
    o->isolate.read_timeout = (double)v;
    o->isolate.open_timeout = 2.0 * (double)v;
    return 0;
}

static int set_reader_memory(cfs_options *o, const char *value, cfs_err *err)
{
    uint64_t v;
    if (!cfs_parse_size(value, &v) || v < (64u << 20))
        return cfs_err_setc(err, CFS_EINVALID,
                            "reader_memory=%s: not a size of at least 64M (e.g. 1G)", value);
    o->isolate.memory = v;
    return 0;
}

static int set_readers(cfs_options *o, const char *value, cfs_err *err)
{
    uint64_t v;
    if (!cfs_parse_u64(value, &v) || v < 1 || v > CFS_ISOLATE_MAX_READERS)
        return cfs_err_setc(err, CFS_EINVALID, "readers=%s: not a number of workers from 1 to %d",
                            value, CFS_ISOLATE_MAX_READERS);
    o->isolate.readers = (unsigned)v;
    return 0;
}

static int set_seconds(double *dst, const char *name, const char *value, cfs_err *err)
{
    uint64_t v;
    if (!cfs_parse_u64(value, &v) || v < 1 || v > 86400)
        return cfs_err_setc(err, CFS_EINVALID, "%s=%s: not a number of seconds from 1 to 86400",
                            name, value);
    *dst = (double)v;
    return 0;
}

static int set_remote_timeout(cfs_options *o, const char *value, cfs_err *err)
{
    return set_seconds(&o->remote.timeout, "remote_timeout", value, err);
}

static int set_remote_poll(cfs_options *o, const char *value, cfs_err *err)
{
    return set_seconds(&o->remote.poll, "remote_poll", value, err);
}

static int set_remote_cafile(cfs_options *o, const char *value, cfs_err *err)
{
    if (!*value || strlen(value) >= sizeof o->remote.cafile)
        return cfs_err_setc(err, CFS_EINVALID, "remote_cafile=%s: not a usable path", value);
    snprintf(o->remote.cafile, sizeof o->remote.cafile, "%s", value);
    return 0;
}

static int set_s3_endpoint(cfs_options *o, const char *value, cfs_err *err)
{
    if (strncmp(value, "http://", 7) != 0 && strncmp(value, "https://", 8) != 0)
        return cfs_err_setc(err, CFS_EINVALID, "s3_endpoint=%s: not an http:// or https:// URL "
                            "(e.g. s3_endpoint=http://127.0.0.1:7480)", value);
    if (strlen(value) >= sizeof o->s3_endpoint)
        return cfs_err_setc(err, CFS_EINVALID, "s3_endpoint: longer than %zu bytes",
                            sizeof o->s3_endpoint - 1);
    strcpy(o->s3_endpoint, value);
    return 0;
}

/* Any valid id: one not listed now may be once its source appears (the catalog then falls
 * back to its first id and says so). */
static int set_default(cfs_options *o, const char *value, cfs_err *err)
{
    if (!cfs_id_valid(value))
        return cfs_err_setc(err, CFS_EINVALID, "default=%s: not a dataset id (1 to 180 ASCII "
                            "letters, digits, '.', '_' or '-', starting with a letter or digit, "
                            "not ending with '.')", value);
    strcpy(o->default_id, value);
    return 0;
}

cfs_store_opts cfs_options_store(const cfs_options *o)
{
    return (cfs_store_opts){o->codec, CFS_ZARR_V2, false};
}

cfs_isolation cfs_options_isolation(const cfs_options *o)
{
    cfs_isolation iso = o->isolate;
    if (!iso.memory)
        iso.memory = 4 * o->layout.memory + (UINT64_C(1) << 30);
    return iso;
}

static const struct {
    const char *name;
    int (*set)(cfs_options *o, const char *value, cfs_err *err);
} option_table[] = {
    {"compressor", set_compressor},
    {"order", set_order},
    {"priority_seed", set_seed},
    {"memory", set_memory},
    {"cache_dir", set_cache_dir},
    {"cache_size", set_cache_size},
    {"isolate", set_isolate},
    {"reader_timeout", set_reader_timeout},
    {"reader_memory", set_reader_memory},
    {"readers", set_readers},
    {"remote_timeout", set_remote_timeout},
    {"remote_poll", set_remote_poll},
    {"remote_cafile", set_remote_cafile},
    {"s3_endpoint", set_s3_endpoint},
    {"default", set_default},
};

/* Options this program does not know are libfuse's when mounting (allow_other, ...). */
static int pass_to_fuse(cfs_options *o, const char *item, const char *value, cfs_err *err)
{
    size_t have = strlen(o->fuse_opts);
    int n = snprintf(o->fuse_opts + have, sizeof o->fuse_opts - have, "%s%s%s%s",
                     have ? "," : "", item, value ? "=" : "", value ? value : "");
    if (n < 0 || (size_t)n >= sizeof o->fuse_opts - have)
        return cfs_err_setc(err, CFS_EINVALID, "too many mount options");
    return 0;
}

static int parse_one(cfs_options *o, char *item, cfs_err *err)
{
    char *eq = strchr(item, '=');
    if (eq)
        *eq = '\0';
    for (size_t i = 0; i < sizeof option_table / sizeof option_table[0]; i++) {
        if (strcmp(item, option_table[i].name) != 0)
            continue;
        if (!eq)
            return cfs_err_setc(err, CFS_EINVALID, "option '%s' needs a value (name=value)", item);
        return option_table[i].set(o, eq + 1, err);
    }
    if (o->pass_unknown)
        return pass_to_fuse(o, item, eq ? eq + 1 : NULL, err);
    if (!eq)
        return cfs_err_setc(err, CFS_EINVALID, "option '%s' needs a value (name=value)", item);
    return cfs_err_setc(err, CFS_EINVALID, "unknown option '%s' (see cellucid-fs --help)", item);
}

int cfs_options_parse(cfs_options *o, const char *list, cfs_err *err)
{
    char *copy = strdup(list);
    if (!copy)
        return cfs_err_oom(err);
    int rc = 0;
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item && rc == 0;
         item = strtok_r(NULL, ",", &save))
        rc = parse_one(o, item, err);
    free(copy);
    return rc;
}
