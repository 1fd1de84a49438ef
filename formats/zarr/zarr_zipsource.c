#include "zarr_zipsource.h"
#include "remote.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct zr_zipsource {
    char *url;
    cfs_remote_info info;
    zip_uint64_t pos;
    zip_error_t error;
    bool failed;                /* and why: set and taken under the backend's lock */
    cfs_err why;
};

static zip_int64_t fail(zr_zipsource *s, int ze, const cfs_err *why)
{
    zip_error_set(&s->error, ze, 0);
    if (why) {
        s->failed = true;
        s->why = *why;
    }
    return -1;
}

static zip_int64_t source_read(zr_zipsource *s, void *data, zip_uint64_t len)
{
    if (s->pos >= s->info.size)
        return 0;
    if (len > s->info.size - s->pos)
        len = s->info.size - s->pos;
    cfs_err err;
    if (cfs_remote_read(s->url, &s->info, s->pos, data, (size_t)len, &err) < 0)
        return fail(s, ZIP_ER_READ, &err);
    s->pos += len;
    return (zip_int64_t)len;
}

static zip_int64_t callback(void *user, void *data, zip_uint64_t len, zip_source_cmd_t cmd)
{
    zr_zipsource *s = user;
    switch (cmd) {
    case ZIP_SOURCE_OPEN:
        s->pos = 0;
        return 0;
    case ZIP_SOURCE_READ:
        return source_read(s, data, len);
    case ZIP_SOURCE_CLOSE:
        return 0;
    case ZIP_SOURCE_SEEK: {
        zip_int64_t to = zip_source_seek_compute_offset(s->pos, s->info.size, data, len,
                                                        &s->error);
        if (to < 0)
            return -1;
        s->pos = (zip_uint64_t)to;
        return 0;
    }
    case ZIP_SOURCE_TELL:
        return (zip_int64_t)s->pos;
    case ZIP_SOURCE_STAT: {
        zip_stat_t *st = data;
        if (len < sizeof *st)
            return fail(s, ZIP_ER_INVAL, NULL);
        zip_stat_init(st);
        st->size = s->info.size;
        st->mtime = (time_t)s->info.mtime;
        st->valid |= ZIP_STAT_SIZE | (s->info.mtime ? ZIP_STAT_MTIME : 0);
        return sizeof *st;
    }
    case ZIP_SOURCE_ERROR:
        return zip_error_to_data(&s->error, data, len);
    case ZIP_SOURCE_FREE:
        zip_error_fini(&s->error);
        free(s->url);
        free(s);
        return 0;
    case ZIP_SOURCE_SUPPORTS:
        return zip_source_make_command_bitmap(ZIP_SOURCE_OPEN, ZIP_SOURCE_READ,
                                              ZIP_SOURCE_CLOSE, ZIP_SOURCE_SEEK, ZIP_SOURCE_TELL,
                                              ZIP_SOURCE_STAT, ZIP_SOURCE_ERROR,
                                              ZIP_SOURCE_FREE, ZIP_SOURCE_SUPPORTS, -1);
    default:
        return fail(s, ZIP_ER_OPNOTSUPP, NULL);
    }
}

int zr_zipsource_open(const char *url, zip_source_t **out, zr_zipsource **state, cfs_err *err)
{
    *out = NULL;
    *state = NULL;
    zr_zipsource *s = calloc(1, sizeof *s);
    if (!s || !(s->url = strdup(url))) {
        free(s);
        return cfs_err_oom(err);
    }
    if (cfs_remote_info_of(url, &s->info, err) < 0) {
        free(s->url);
        free(s);
        return -1;
    }
    zip_error_init(&s->error);
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_function_create(callback, s, &ze);
    zip_error_fini(&ze);
    if (!src) {
        callback(s, NULL, 0, ZIP_SOURCE_FREE);
        return cfs_err_oom(err);
    }
    *out = src;
    *state = s;
    return 0;
}

bool zr_zipsource_failure(zr_zipsource *s, cfs_err *err)
{
    bool failed = s->failed;
    if (failed)
        *err = s->why;
    s->failed = false;
    return failed;
}
