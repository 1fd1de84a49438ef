#include "spill.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SPILL_PREFIX "spill-"

/* An anonymous file in workdir. With O_TMPFILE it never has a name; else it has one from
 * mkstemp to unlink, and a process killed in that instant leaves it (cfs_spill_sweep). */
static int anonymous_file(const char *workdir, cfs_err *err)
{
#ifdef O_TMPFILE
    int fd = open(workdir, O_TMPFILE | O_RDWR | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
        return fd >= 0 ? fd : cfs_err_set(err, "cannot create a spill file in %s: %s", workdir,
                                          strerror(errno));
#endif
    size_t len = strlen(workdir) + 32;
    char *path = malloc(len);
    if (!path)
        return cfs_err_oom(err);
    snprintf(path, len, "%s/" SPILL_PREFIX "XXXXXX", workdir);
    int fd2 = mkstemp(path);
    int e = errno;
    if (fd2 >= 0)
        unlink(path);
    free(path);
    if (fd2 < 0)
        return cfs_err_set(err, "cannot create a spill file in %s: %s", workdir, strerror(e));
    return fd2;
}

int cfs_spill_file(const char *workdir, cfs_err *err)
{
    return anonymous_file(workdir, err);
}

static int open_file(cfs_spill *s, const char *workdir, cfs_err *err)
{
    memset(s, 0, sizeof *s);
    s->fd = anonymous_file(workdir, err);
    if (s->fd >= 0)
        return 0;
    s->fd = -1;
    return -1;
}

int cfs_spill_open(cfs_spill *s, const char *workdir, size_t buffer, cfs_err *err)
{
    if (open_file(s, workdir, err) < 0)
        return -1;
    s->cap = buffer ? buffer : 1;
    if (!(s->buf = malloc(s->cap))) {
        cfs_spill_close(s);
        return cfs_err_oom(err);
    }
    return 0;
}

int cfs_spill_open_lent(cfs_spill *s, const char *workdir, unsigned char *buf, size_t cap,
                        cfs_err *err)
{
    if (open_file(s, workdir, err) < 0)
        return -1;
    s->buf = buf;
    s->cap = cap;
    s->lent = true;
    return 0;
}

void cfs_spill_sweep(const char *workdir)
{
    DIR *d = opendir(workdir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, SPILL_PREFIX, strlen(SPILL_PREFIX)) == 0)
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
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

void cfs_spill_release(const cfs_spill *s)
{
    /* Nothing reads the file after this; if the truncation fails, the pages go at the close. */
    if (s->fd >= 0 && ftruncate(s->fd, 0) < 0)
        return;
}

void cfs_spill_close(cfs_spill *s)
{
    if (s->fd >= 0)
        close(s->fd);
    if (!s->lent)
        free(s->buf);
    s->fd = -1;
    s->buf = NULL;
}
