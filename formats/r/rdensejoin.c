/* The join of dense split layers, read from the layers (rdensejoin.h). */
#include "rdensejoin.h"

#include <stdlib.h>
#include <string.h>

typedef struct dense_join {
    rc_dense_parts p;
    uint64_t nfeat;
} dense_join;

static void parts_free(rc_dense_parts *p)
{
    for (uint32_t k = 0; k < p->nparts; k++) {
        if (p->part)
            cfs_array_unref(p->part[k]);
        if (p->feature)
            free(p->feature[k]);
    }
    free(p->part);
    free(p->feature);
    free(p->owner);
    free(p->row);
}

static void dense_join_free(void *ctx)
{
    dense_join *d = ctx;
    parts_free(&d->p);
    free(d);
}

/* The first of the part's n columns whose feature is at least f. */
static uint64_t first_column(const int32_t *feature, uint64_t n, uint64_t f)
{
    if (!feature)
        return f < n ? f : n;
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if ((uint64_t)feature[mid] < f)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static double as_double(const void *v, cfs_dtype t, uint64_t j)
{
    if (t == CFS_FLOAT64)
        return ((const double *)v)[j];
    if (t == CFS_INT32)
        return ((const int32_t *)v)[j];
    return ((const uint8_t *)v)[j] != 0;
}

/* Columns [c0, c0 + nc) of the join's row i into out; tmp holds nc values of any part. */
static int read_row(const dense_join *d, uint64_t i, uint64_t c0, uint64_t nc, double *out,
                    void *tmp, cfs_err *err)
{
    memset(out, 0, nc * sizeof *out);
    if (!d->p.owner[i])
        return 0;
    uint32_t k = d->p.owner[i] - 1;
    const cfs_array *part = d->p.part[k];
    const int32_t *feature = d->p.feature[k];
    uint64_t ncol = part->shape[1];
    uint64_t lo = first_column(feature, ncol, c0), hi = first_column(feature, ncol, c0 + nc);
    if (hi == lo)
        return 0;
    uint64_t s[2] = {d->p.row[i], lo}, c[2] = {1, hi - lo};
    if (cfs_array_read(part, s, c, tmp, err) < 0)
        return -1;
    for (uint64_t j = 0; j < hi - lo; j++) {
        uint64_t f = feature ? (uint64_t)feature[lo + j] : lo + j;
        out[f - c0] = as_double(tmp, part->dtype, j);
    }
    return 0;
}

static int dense_join_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                           void *out, cfs_err *err)
{
    const dense_join *d = arr->ctx;
    uint64_t nc = count[1];
    void *tmp = malloc((nc ? nc : 1) * sizeof(double));
    if (!tmp)
        return cfs_err_oom(err);
    int rc = 0;
    for (uint64_t r = 0; rc == 0 && r < count[0]; r++)
        rc = read_row(d, start[0] + r, start[1], nc, (double *)out + r * nc, tmp, err);
    free(tmp);
    return rc;
}

/* The layout reads a chunk's cells (scattered rows, in priority order) this way: each row
 * from its own layer, with no slab of rows around it. */
static int dense_join_read_rows(const cfs_array *arr, const uint64_t *rows, uint64_t n,
                                void *out, cfs_strpool *pool, cfs_err *err)
{
    (void)pool;
    const dense_join *d = arr->ctx;
    void *tmp = malloc((d->nfeat ? d->nfeat : 1) * sizeof(double));
    if (!tmp)
        return cfs_err_oom(err);
    int rc = 0;
    for (uint64_t r = 0; rc == 0 && r < n; r++)
        rc = read_row(d, rows[r], 0, d->nfeat, (double *)out + r * d->nfeat, tmp, err);
    free(tmp);
    return rc;
}

static const cfs_array_ops DENSE_JOIN_OPS = {
    .read = dense_join_read, .free_ctx = dense_join_free, .read_rows = dense_join_read_rows};

cfs_array *rc_dense_join(rc_dense_parts *p, uint64_t ncell, uint64_t nfeat)
{
    dense_join *d = malloc(sizeof *d);
    if (!d) {
        parts_free(p);
        return NULL;
    }
    *d = (dense_join){.p = *p, .nfeat = nfeat};
    uint64_t shape[2] = {ncell, nfeat};
    cfs_array *a = cfs_array_new(CFS_FLOAT64, 2, shape, &DENSE_JOIN_OPS, d);
    if (!a)
        dense_join_free(d);
    return a;
}
