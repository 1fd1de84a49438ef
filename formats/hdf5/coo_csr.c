#include "coo_csr.h"

#include <stdlib.h>
#include <string.h>

#include "elems.h"

void cfs_coo_free(cfs_coo *g)
{
    free(g->a);
    free(g->b);
    free(g->w);
}

static void add_weight(unsigned char *dst, const unsigned char *src, cfs_dtype t)
{
#define ADD_AS(type)                                                                          \
    do {                                                                                      \
        type x_, y_;                                                                          \
        memcpy(&x_, dst, sizeof x_);                                                          \
        memcpy(&y_, src, sizeof y_);                                                          \
        x_ = (type)(x_ + y_);                                                                 \
        memcpy(dst, &x_, sizeof x_);                                                          \
    } while (0)
    switch (t) {
    case CFS_BOOL: *dst = *dst || *src; break;
    case CFS_INT8: ADD_AS(int8_t); break;
    case CFS_INT16: ADD_AS(int16_t); break;
    case CFS_INT32: ADD_AS(uint32_t); break; /* wraps like numpy, without signed overflow */
    case CFS_INT64: ADD_AS(uint64_t); break;
    case CFS_UINT8: ADD_AS(uint8_t); break;
    case CFS_UINT16: ADD_AS(uint16_t); break;
    case CFS_UINT32: ADD_AS(uint32_t); break;
    case CFS_UINT64: ADD_AS(uint64_t); break;
    case CFS_FLOAT32: ADD_AS(float); break;
    case CFS_FLOAT64: ADD_AS(double); break;
    default: break;
    }
#undef ADD_AS
}

/* Stable counting sort of the edge order perm by key[] (values < n). */
static int counting_sort(const uint32_t *key, uint64_t n, const uint32_t *in, uint32_t *out,
                         uint64_t nnz, uint64_t *counts)
{
    memset(counts, 0, (size_t)(n + 1) * sizeof *counts);
    for (uint64_t i = 0; i < nnz; i++)
        counts[key[in ? in[i] : i] + 1]++;
    for (uint64_t k = 0; k < n; k++)
        counts[k + 1] += counts[k];
    for (uint64_t i = 0; i < nnz; i++) {
        uint32_t e = in ? in[i] : (uint32_t)i;
        out[counts[key[e]]++] = e;
    }
    return 0;
}

int cfs_coo_to_csr(const cfs_coo *g, uint64_t n, cfs_csr *m, cfs_err *err)
{
    uint64_t *counts = cfs_elems_alloc(n + 1, sizeof *counts, err);
    uint32_t *p1 = counts ? cfs_elems_alloc(g->nnz, sizeof *p1, err) : NULL;
    uint32_t *p2 = p1 ? cfs_elems_alloc(g->nnz, sizeof *p2, err) : NULL;
    size_t ws = cfs_dtype_size(g->wt);
    m->wide = n > (uint64_t)INT32_MAX;
    m->data = p2 ? cfs_elems_alloc(g->nnz, ws, err) : NULL;
    m->indices = m->data ? cfs_elems_alloc(g->nnz, m->wide ? 8 : 4, err) : NULL;
    m->indptr = m->indices ? cfs_elems_alloc(n + 1, sizeof *m->indptr, err) : NULL;
    int rc = m->indptr ? 0 : -1;
    if (rc == 0) {
        counting_sort(g->b, n, NULL, p1, g->nnz, counts); /* by column ... */
        counting_sort(g->a, n, p1, p2, g->nnz, counts);   /* ... then stably by row */
        uint64_t k = 0, row = 0;
        m->indptr[0] = 0;
        for (uint64_t i = 0; i < g->nnz; i++) {
            uint32_t e = p2[i];
            while (row < g->a[e])
                m->indptr[++row] = (int32_t)k;
            bool same = k > (uint64_t)m->indptr[row] &&
                        (m->wide ? ((int64_t *)m->indices)[k - 1] == (int64_t)g->b[e]
                                 : ((int32_t *)m->indices)[k - 1] == (int32_t)g->b[e]);
            if (same) {
                add_weight((unsigned char *)m->data + (k - 1) * ws, g->w + (size_t)e * ws, g->wt);
                continue;
            }
            memcpy((unsigned char *)m->data + k * ws, g->w + (size_t)e * ws, ws);
            if (m->wide)
                ((int64_t *)m->indices)[k] = g->b[e];
            else
                ((int32_t *)m->indices)[k] = (int32_t)g->b[e];
            k++;
        }
        while (row < n)
            m->indptr[++row] = (int32_t)k;
        m->nnz = k;
    }
    free(counts);
    free(p1);
    free(p2);
    if (rc < 0) {
        free(m->data);
        free(m->indices);
        free(m->indptr);
    }
    return rc;
}

int cfs_csr_elem(const char *name, cfs_csr *m, cfs_dtype wt, uint64_t n, cfs_elem **out,
                 cfs_err *err)
{
    uint64_t np1 = n + 1;
    cfs_elem *el = cfs_elem_new(CFS_EL_SPARSE, name);
    if (el) {
        el->values = cfs_array_from_memory(wt, 1, &m->nnz, m->data);
        if (el->values)
            m->data = NULL;
        el->aux = cfs_array_from_memory(m->wide ? CFS_INT64 : CFS_INT32, 1, &m->nnz, m->indices);
        if (el->aux)
            m->indices = NULL;
        el->indptr = cfs_array_from_memory(CFS_INT32, 1, &np1, m->indptr);
        if (el->indptr)
            m->indptr = NULL;
    }
    free(m->data);
    free(m->indices);
    free(m->indptr);
    if (!el || !el->values || !el->aux || !el->indptr) {
        cfs_elem_free(el);
        return cfs_err_oom(err);
    }
    el->csr = true;
    el->sparse_shape[0] = el->sparse_shape[1] = n;
    *out = el;
    return 0;
}
