/* The spill sink: see rspill.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_TMPFILE */
#endif
#include "rspill.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"

typedef struct spill_vec {
    r_sink_vec info;
    uint64_t offset;       /* of its first value in the file */
    uint64_t written;      /* bytes of it written so far */
} spill_vec;

struct r_spill {
    int fd;
    int refs;
    uint64_t size;
    spill_vec *v;
    size_t n, cap;
};

const char *r_spill_dir(void)
{
    const char *d = getenv("CELLUCID_FS_WORK_DIR");
    if (!d || !*d)
        d = getenv("TMPDIR");
    return d && *d ? d : "/tmp";
}

/* An unlinked file in dir: O_TMPFILE, or (a file system without it) a named one unlinked at
 * once. */
static int unlinked_file(const char *dir)
{
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
        return fd;
    char path[4096];
    snprintf(path, sizeof path, "%s/.cellucid-fs-r-spill-XXXXXX", dir);
    fd = mkostemp(path, O_CLOEXEC);
    if (fd >= 0)
        unlink(path);
    return fd;
}

r_spill *r_spill_new(const char *dir, cfs_err *err)
{
    r_spill *s = calloc(1, sizeof *s);
    if (!s) {
        cfs_err_oom(err);
        return NULL;
    }
    s->refs = 1;
    if ((s->fd = unlinked_file(dir)) < 0) {
        cfs_err_setc(err, CFS_EIO, "%s: cannot create a spill file for the R object's large "
                     "vectors: %s", dir, strerror(errno));
        free(s);
        return NULL;
    }
    return s;
}

r_spill *r_spill_ref(r_spill *s)
{
    __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
    return s;
}

void r_spill_free(r_spill *s)
{
    if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    close(s->fd);
    free(s->v);
    free(s);
}

static int spill_begin(void *ctx, const r_sink_vec *v, uint64_t *id, cfs_err *err)
{
    r_spill *s = ctx;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        spill_vec *p = realloc(s->v, cap * sizeof *p);
        if (!p)
            return cfs_err_oom(err);
        s->v = p;
        s->cap = cap;
    }
    s->v[s->n] = (spill_vec){.info = *v, .offset = s->size};
    *id = s->n++;
    return 0;
}

static int spill_write(void *ctx, uint64_t id, const void *data, size_t nbytes, cfs_err *err)
{
    r_spill *s = ctx;
    spill_vec *v = &s->v[id];
    if (cfs_pwrite_full(s->fd, data, nbytes, (uint64_t)(v->offset + v->written), err) < 0) {
        cfs_err_prefix(err, "the spill file of the R object's large vectors");
        return -1;
    }
    v->written += nbytes;
    s->size = v->offset + v->written;
    return 0;
}

static int spill_end(void *ctx, uint64_t id, cfs_err *err)
{
    r_spill *s = ctx;
    const spill_vec *v = &s->v[id];
    if (v->written != v->info.length * v->info.elem_size)
        return cfs_err_setc(err, CFS_EDAMAGED, "a vector of %llu values ended after %llu bytes",
                            (unsigned long long)v->info.length,
                            (unsigned long long)v->written);
    return 0;
}

r_sink r_spill_sink(r_spill *s)
{
    return (r_sink){.ctx = s, .begin = spill_begin, .write = spill_write, .end = spill_end};
}

const r_sink_vec *r_spill_info(const r_spill *s, uint64_t id)
{
    return s && id < s->n ? &s->v[id].info : NULL;
}

uint64_t r_spill_bytes(const r_spill *s)
{
    return s ? s->size : 0;
}

int r_spill_read(const r_spill *s, uint64_t id, uint64_t first, uint64_t count, void *out,
                 cfs_err *err)
{
    const spill_vec *v = id < s->n ? &s->v[id] : NULL;
    if (!v || first > v->info.length || count > v->info.length - first)
        return cfs_err_set(err, "a read past the end of a spilled R vector");
    size_t es = v->info.elem_size;
    return cfs_pread_full(s->fd, out, (size_t)(count * es), v->offset + first * es, err);
}

typedef struct spill_array {
    r_spill *s;
    uint64_t id;
} spill_array;

static int spill_array_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                            void *out, cfs_err *err)
{
    const spill_array *a = arr->ctx;
    return r_spill_read(a->s, a->id, start[0], count[0], out, err);
}

static void spill_array_free(void *ctx)
{
    spill_array *a = ctx;
    r_spill_free(a->s);
    free(a);
}

static const cfs_array_ops spill_array_ops = {.read = spill_array_read,
                                              .free_ctx = spill_array_free};

cfs_array *r_spill_array(r_spill *s, uint64_t id, cfs_dtype dtype)
{
    const r_sink_vec *info = r_spill_info(s, id);
    if (!info || info->elem_size != cfs_dtype_size(dtype))
        return NULL;
    spill_array *a = malloc(sizeof *a);
    if (!a)
        return NULL;
    *a = (spill_array){r_spill_ref(s), id};
    uint64_t n = info->length;
    cfs_array *arr = cfs_array_new(dtype, 1, &n, &spill_array_ops, a);
    if (!arr)
        spill_array_free(a);
    return arr;
}
