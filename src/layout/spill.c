#include "spill.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cfs_spill_open(cfs_spill *s, const char *workdir, size_t buffer, cfs_err *err)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    size_t len = strlen(workdir) + 32;
    char *path = malloc(len);
    if (!path)
        return cfs_err_oom(err);
    snprintf(path, len, "%s/spill-XXXXXX", workdir);
    s->fd = mkstemp(path);
    int e = errno;
    if (s->fd >= 0)
        unlink(path);
    free(path);
    if (s->fd < 0)
        return cfs_err_set(err, "cannot create a spill file in %s: %s", workdir, strerror(e));
    s->cap = buffer ? buffer : 1;
    if (!(s->buf = malloc(s->cap))) {
        cfs_spill_close(s);
        return cfs_err_oom(err);
    }
    return 0;
}

int cfs_spill_flush(cfs_spill *s, cfs_err *err)
{
    if (s->len == 0)
        return 0;
    if (cfs_pwrite_full(s->fd, s->buf, s->len, s->size, err) < 0)
        return -1;
    s->size += s->len;
    s->len = 0;
    return 0;
}

int cfs_spill_append(cfs_spill *s, const void *data, size_t len, cfs_err *err)
{
    if (s->len + len > s->cap && cfs_spill_flush(s, err) < 0)
        return -1;
    if (len > s->cap) {
        if (cfs_pwrite_full(s->fd, data, len, s->size, err) < 0)
            return -1;
        s->size += len;
        return 0;
    }
    memcpy(s->buf + s->len, data, len);
    s->len += len;
    return 0;
}

void cfs_spill_close(cfs_spill *s)
{
    if (s->fd >= 0)
        close(s->fd);
    free(s->buf);
    s->fd = -1;
    s->buf = NULL;
}
