/* The large vectors of an R file, left in place or kept in memory, and reading vectors by range
 * (rvectors.h). */
#include "rvectors.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct vec_entry {
    r_sink_vec info;
    bool in_place;           /* else kept in the memsink, as mem_id */
    uint64_t mem_id;
    uint64_t seen;           /* values that passed (for the stats) */
    r_vec_stats st;
} vec_entry;

struct r_vecstore {
    int fd;
    r_memsink *mem;
    vec_entry *v;
    size_t n, cap;
};

r_vecstore *r_vecstore_new(int fd)
{
    r_vecstore *vs = calloc(1, sizeof *vs);
    if (!vs || !(vs->mem = r_memsink_new())) {
        free(vs);
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    vs->fd = fd;
    return vs;
}

void r_vecstore_free(r_vecstore *vs)
{
    if (!vs)
        return;
    if (vs->fd >= 0)
        close(vs->fd);
    r_memsink_free(vs->mem);
    free(vs->v);
    free(vs);
}

void r_vecstore_usage(const r_vecstore *vs, uint64_t *in_place, uint64_t *in_place_bytes,
                      uint64_t *kept, uint64_t *kept_bytes)
{
    uint64_t c[4] = {0};
    for (size_t i = 0; i < vs->n; i++) {
        const vec_entry *e = &vs->v[i];
        int k = e->in_place ? 0 : 2;
        c[k]++;
        c[k + 1] += e->info.length * e->info.elem_size;
    }
    if (in_place)
        *in_place = c[0];
    if (in_place_bytes)
        *in_place_bytes = c[1];
    if (kept)
        *kept = c[2];
    if (kept_bytes)
        *kept_bytes = c[3];
}

/* ---- stats ---- */

static void stats_start(r_vec_stats *st)
{
    *st = (r_vec_stats){.nondecreasing = true, .min = INT32_MAX, .max = INT32_MIN};
}

/* Adds n values that follow the seen ones. */
static void stats_add(r_vec_stats *st, uint64_t seen, const int32_t *v, size_t n)
{
    if (n == 0)
        return;
    if (seen == 0)
        st->first = v[0];
    int32_t prev = seen ? st->last : v[0];
    for (size_t k = 0; k < n; k++) {
        int32_t x = v[k];
        if (x < prev)
            st->nondecreasing = false;
        prev = x;
        if (x == R_NA_INT) {
            st->has_na = true;
            continue;
        }
        if (x < st->min)
            st->min = x;
        if (x > st->max)
            st->max = x;
    }
    st->last = v[n - 1];
}

static bool int_like(int type)
{
    return type == R_INT || type == R_LGL;
}

/* ---- the sink ---- */

static int vs_begin(void *ctx, const r_sink_vec *v, uint64_t *id, cfs_err *err)
{
    r_vecstore *vs = ctx;
    if (vs->n == vs->cap) {
        size_t cap = vs->cap ? vs->cap * 2 : 16;
        vec_entry *p = realloc(vs->v, cap * sizeof *p);
        if (!p)
            return cfs_err_oom(err);
        vs->v = p;
        vs->cap = cap;
    }
    vec_entry *e = &vs->v[vs->n];
    *e = (vec_entry){.info = *v, .in_place = vs->fd >= 0 && v->file_offset >= 0};
    stats_start(&e->st);
    if (!e->in_place) {
        r_sink m = r_memsink_sink(vs->mem);
        if (m.begin(m.ctx, v, &e->mem_id, err) != 0)
            return -1;
    }
    *id = vs->n++;
    return 0;
}

static int vs_write(void *ctx, uint64_t id, const void *data, size_t nbytes, cfs_err *err)
{
    r_vecstore *vs = ctx;
    vec_entry *e = &vs->v[id];
    size_t n = nbytes / e->info.elem_size;
    if (int_like(e->info.type))
        stats_add(&e->st, e->seen, data, n);
    e->seen += n;
    if (e->in_place)
        return 0;
    r_sink m = r_memsink_sink(vs->mem);
    return m.write(m.ctx, e->mem_id, data, nbytes, err);
}

static int vs_end(void *ctx, uint64_t id, cfs_err *err)
{
    (void)ctx, (void)id, (void)err;
    return 0;
}

r_sink r_vecstore_sink(r_vecstore *vs)
{
    return (r_sink){.ctx = vs, .begin = vs_begin, .write = vs_write, .end = vs_end};
}

/* ---- reading ---- */

static size_t value_size(int type)
{
    return type == R_REAL ? 8 : 4;
}

static int read_in_place(const r_vecstore *vs, const vec_entry *e, uint64_t start, uint64_t n,
                         void *out, cfs_err *err)
{
    size_t es = e->info.elem_size;
    unsigned char *dst = out;
    uint64_t left = n * es;
    off_t at = (off_t)((uint64_t)e->info.file_offset + start * es);
    while (left > 0) {
        ssize_t got = pread(vs->fd, dst, left > (1u << 30) ? (1u << 30) : (size_t)left, at);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return cfs_err_errno(err, errno, "cannot be read");
        if (got == 0)
            return cfs_err_setc(err, CFS_EIO, "ends before a vector it held when it was opened "
                                "(changed since?)");
        dst += got;
        left -= (uint64_t)got;
        at += got;
    }
    bool big = e->info.format == R_FORMAT_XDR;
    if (es == 8) {
        uint64_t *u = out;
        for (uint64_t k = 0; k < n; k++)
            u[k] = big ? be64toh(u[k]) : le64toh(u[k]);
    } else {
        uint32_t *u = out;
        for (uint64_t k = 0; k < n; k++)
            u[k] = big ? be32toh(u[k]) : le32toh(u[k]);
    }
    return 0;
}

int r_vec_read(const r_vecstore *vs, const r_obj *x, uint64_t start, uint64_t n, void *out,
               cfs_err *err)
{
    if (!x || (x->type != R_LGL && x->type != R_INT && x->type != R_REAL))
        return cfs_err_set(err, "internal: reading a %s as numbers",
                           x ? r_type_name(x->type) : "nothing");
    if (start > x->length || n > x->length - start)
        return cfs_err_set(err, "internal: values %llu..%llu of a vector of %llu",
                           (unsigned long long)start, (unsigned long long)(start + n),
                           (unsigned long long)x->length);
    size_t es = value_size(x->type);
    if (n == 0)
        return 0;
    if (!x->sunk) {
        memcpy(out, (const char *)x->u.data + start * es, (size_t)(n * es));
        return 0;
    }
    if (!vs || x->sink_id >= vs->n)
        return cfs_err_set(err, "internal: a vector without its store");
    const vec_entry *e = &vs->v[x->sink_id];
    if (e->in_place)
        return read_in_place(vs, e, start, n, out, err);
    size_t nbytes;
    const unsigned char *d = r_memsink_data(vs->mem, e->mem_id, &nbytes, NULL);
    if (!d || nbytes < (start + n) * es)
        return cfs_err_set(err, "internal: a vector shorter than its length");
    memcpy(out, d + start * es, (size_t)(n * es));
    return 0;
}

const void *r_vec_whole(const r_vecstore *vs, const r_obj *x, void **owned, cfs_err *err)
{
    *owned = NULL;
    if (x && !x->sunk && (x->type == R_LGL || x->type == R_INT || x->type == R_REAL)) {
        static const double none[1];
        return x->length ? x->u.data : none;
    }
    if (x && x->sunk && vs && x->sink_id < vs->n && !vs->v[x->sink_id].in_place) {
        size_t nbytes;
        return r_memsink_data(vs->mem, vs->v[x->sink_id].mem_id, &nbytes, NULL);
    }
    uint64_t n = x ? x->length : 0;
    size_t es = x ? value_size(x->type) : 1;
    if (n > SIZE_MAX / es) {
        cfs_err_oom(err);
        return NULL;
    }
    void *buf = malloc(n ? (size_t)(n * es) : 1);
    if (!buf) {
        cfs_err_oom(err);
        return NULL;
    }
    if (r_vec_read(vs, x, 0, n, buf, err) < 0) {
        free(buf);
        return NULL;
    }
    *owned = buf;
    return buf;
}

bool r_vec_stats_of(const r_vecstore *vs, const r_obj *x, r_vec_stats *st)
{
    if (!x || !int_like(x->type))
        return false;
    if (x->sunk) {
        if (!vs || x->sink_id >= vs->n)
            return false;
        *st = vs->v[x->sink_id].st;
        return true;
    }
    stats_start(st);
    stats_add(st, 0, x->u.data, (size_t)x->length);
    return true;
}
