/* Arrays over R vectors, read by range where their values are (rconvert.h, rc_view): in the
 * tree, in memory, or in place in the file (formats/r/rvectors.h). */
#include "rconvert.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 16384   /* values converted at a time */

typedef struct rview {
    const r_vecstore *vs;
    const r_obj *x;
    bool colmajor;
    uint64_t rows, cols;   /* 2-d: the served shape */
} rview;

/* Values [from, from + n) of the vector as dtype t into out. */
static int convert_range(const rview *v, cfs_dtype t, uint64_t from, uint64_t n, void *out,
                         cfs_err *err)
{
    int type = v->x->type;
    if ((type == R_REAL && t == CFS_FLOAT64) || (type != R_REAL && t == CFS_INT32))
        return r_vec_read(v->vs, v->x, from, n, out, err);
    int32_t tmp[BLOCK];
    for (uint64_t done = 0; done < n;) {
        size_t k = n - done < BLOCK ? (size_t)(n - done) : BLOCK;
        if (r_vec_read(v->vs, v->x, from + done, k, tmp, err) < 0)
            return -1;
        if (t == CFS_BOOL) {
            uint8_t *b = (uint8_t *)out + done;
            for (size_t i = 0; i < k; i++)
                b[i] = tmp[i] != 0;
        } else {
            double *d = (double *)out + done;
            for (size_t i = 0; i < k; i++)
                d[i] = tmp[i] == R_NA_INT ? NAN : type == R_LGL ? (double)(tmp[i] != 0)
                                                                : (double)tmp[i];
        }
        done += k;
    }
    return 0;
}

static int view_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                     void *out, cfs_err *err)
{
    const rview *v = arr->ctx;
    cfs_dtype t = arr->dtype;
    size_t es = cfs_dtype_size(t);
    if (arr->ndim == 1)
        return convert_range(v, t, start[0], count[0], out, err);
    uint64_t r0 = start[0], nr = count[0], c0 = start[1], nc = count[1];
    if (nr == 0 || nc == 0)
        return 0;
    if (!v->colmajor) {
        if (c0 == 0 && nc == v->cols)
            return convert_range(v, t, r0 * v->cols, nr * nc, out, err);
        for (uint64_t i = 0; i < nr; i++)
            if (convert_range(v, t, (r0 + i) * v->cols + c0, nc,
                              (char *)out + i * nc * es, err) < 0)
                return -1;
        return 0;
    }
    /* R's column j holds the served column j: one range per column, spread over the rows */
    unsigned char *col = malloc(nr * es);
    if (!col)
        return cfs_err_oom(err);
    for (uint64_t j = 0; j < nc; j++) {
        if (convert_range(v, t, (c0 + j) * v->rows + r0, nr, col, err) < 0) {
            free(col);
            return -1;
        }
        unsigned char *dst = (unsigned char *)out + j * es;
        for (uint64_t i = 0; i < nr; i++)
            memcpy(dst + i * nc * es, col + i * es, es);
    }
    free(col);
    return 0;
}

static const cfs_array_ops view_ops = {.read = view_read, .free_ctx = free};

cfs_array *rc_view(const rconv *c, const r_obj *x, cfs_dtype t, int ndim,
                   const uint64_t *shape, bool colmajor)
{
    rview *v = malloc(sizeof *v);
    if (!v)
        return NULL;
    *v = (rview){.vs = c->vecs, .x = x, .colmajor = colmajor && ndim == 2,
                 .rows = shape[0], .cols = ndim == 2 ? shape[1] : 1};
    cfs_array *a = cfs_array_new(t, ndim, shape, &view_ops, v);
    if (!a)
        free(v);
    return a;
}
