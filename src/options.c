#include "options.h"

#include <stdlib.h>
#include <string.h>

void cfs_options_init(cfs_options *o)
{
    o->codec = CFS_CODEC_BLOSC_LZ4;
    o->layout.order = CFS_ORDER_ORIGINAL;
}

static int set_compressor(cfs_options *o, const char *value, cfs_err *err)
{
    if (cfs_codec_parse(value, &o->codec) < 0)
        return cfs_err_set(err, "compressor=%s: unknown; use blosc, zstd, zlib, gzip or none",
                           value);
    return 0;
}

static int set_order(cfs_options *o, const char *value, cfs_err *err)
{
    if (strcmp(value, "original") == 0) {
        o->layout.order = CFS_ORDER_ORIGINAL;
        return 0;
    }
    return cfs_err_set(err, "order=%s: unknown; use order=original", value);
}

static const struct {
    const char *name;
    int (*set)(cfs_options *o, const char *value, cfs_err *err);
} option_table[] = {
    {"compressor", set_compressor},
    {"order", set_order},
};

static int parse_one(cfs_options *o, char *item, cfs_err *err)
{
    char *eq = strchr(item, '=');
    if (!eq)
        return cfs_err_set(err, "option '%s' needs a value (name=value)", item);
    *eq = '\0';
    for (size_t i = 0; i < sizeof option_table / sizeof option_table[0]; i++)
        if (strcmp(item, option_table[i].name) == 0)
            return option_table[i].set(o, eq + 1, err);
    return cfs_err_set(err, "unknown option '%s' (see cellucid-fs --help)", item);
}

int cfs_options_parse(cfs_options *o, const char *list, cfs_err *err)
{
    char *copy = strdup(list);
    if (!copy)
        return cfs_err_set(err, "out of memory");
    int rc = 0;
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item && rc == 0;
         item = strtok_r(NULL, ",", &save))
        rc = parse_one(o, item, err);
    free(copy);
    return rc;
}
