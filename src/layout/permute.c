#include "permute.h"

#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "priority.h"

cfs_perm *cfs_perm_from_order(uint64_t n, uint64_t *order)
{
    cfs_perm *p = order ? calloc(1, sizeof *p) : NULL;
    if (!p) {
        free(order);
        return NULL;
    }
    p->n = n;
    p->refs = 1;
    p->order = order;
    pthread_mutex_init(&p->pos_lock, NULL);
    return p;
}

cfs_perm *cfs_perm_new(uint64_t n, uint64_t seed)
{
    return cfs_perm_from_order(n, cfs_priority_order(n, seed));
}

cfs_perm *cfs_perm_identity(uint64_t n)
{
    uint64_t *order = malloc((n ? n : 1) * sizeof *order);
    for (uint64_t j = 0; order && j < n; j++)
        order[j] = j;
    return cfs_perm_from_order(n, order);
}

const uint64_t *cfs_perm_pos(cfs_perm *p)
{
    pthread_mutex_lock(&p->pos_lock);
    if (!p->pos && (p->pos = malloc((p->n ? p->n : 1) * sizeof *p->pos)))
        for (uint64_t j = 0; j < p->n; j++)
            p->pos[p->order[j]] = j;
    pthread_mutex_unlock(&p->pos_lock);
    return p->pos;
}

cfs_perm *cfs_perm_ref(cfs_perm *p)
{
    __atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
    return p;
}

void cfs_perm_unref(cfs_perm *p)
{
    if (!p || __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    pthread_mutex_destroy(&p->pos_lock);
    free(p->order);
    free(p->pos);
    free(p);
}

int64_t cfs_int_get(cfs_dtype t, const void *base, uint64_t i)
{
    const unsigned char *p = (const unsigned char *)base + i * cfs_dtype_size(t);
    switch (t) {
    case CFS_INT8: return *(const int8_t *)p;
    case CFS_UINT8: case CFS_BOOL: return *p;
    case CFS_INT16: { int16_t v; memcpy(&v, p, 2); return v; }
    case CFS_UINT16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case CFS_INT32: { int32_t v; memcpy(&v, p, 4); return v; }
    case CFS_UINT32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case CFS_INT64: { int64_t v; memcpy(&v, p, 8); return v; }
    case CFS_UINT64: { uint64_t v; memcpy(&v, p, 8); return (int64_t)v; }
    default: return 0;
    }
}

void cfs_int_set(cfs_dtype t, void *base, uint64_t i, int64_t v)
{
    unsigned char *p = (unsigned char *)base + i * cfs_dtype_size(t);
    switch (t) {
    case CFS_INT8: case CFS_UINT8: case CFS_BOOL: *p = (unsigned char)v; break;
    case CFS_INT16: case CFS_UINT16: { uint16_t x = (uint16_t)v; memcpy(p, &x, 2); break; }
    case CFS_INT32: case CFS_UINT32: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); break; }
    case CFS_INT64: case CFS_UINT64: memcpy(p, &v, 8); break;
    default: break;
    }
}

/* ---- row-permuted views ------------------------------------------------------------------ */

/*
 * A view makes a slab it is asked for (a chunk) from that slab's cells alone, read from the
 * source as a sorted set of rows, as CFS_PIECEWISE_READS says (permute.h). A set of rows costs
 * a reader several times what the same rows cost in a sequential read (libhdf5: about 2 us a
 * variable-length string against 0.25 us), so past an eighth of the column reading all of it is
 * cheaper, and a client that reads on past the first levels reads it all anyway.
 */

typedef struct rows_view {
    cfs_job job;
    cfs_array *src;
    cfs_perm *perm;
    void *whole;            /* the source in original order, C order */
    cfs_strpool *strings;   /* CFS_STRING: where whole's strings live (or the source's own) */
    uint64_t nelems;
    bool cols_too;          /* a cells x cells matrix: columns are permuted as well */
    pthread_mutex_t lock;   /* guards reads and rows_read */
    unsigned reads;         /* slabs read piece by piece so far */
    uint64_t rows_read;     /* and their rows */
    bool loaded;            /* whole is there */
} rows_view;

static int rows_load(cfs_job *job, cfs_err *err)
{
    rows_view *v = (rows_view *)job;
    const cfs_array *src = v->src;
    size_t esize = cfs_array_elem_size(src);
    v->nelems = cfs_array_nelems(src);
    if (v->nelems > SIZE_MAX / (esize ? esize : 1))
        return cfs_err_set(err, "array too large to permute");
    v->whole = calloc(v->nelems ? v->nelems : 1, esize);
    if (!v->whole)
        return cfs_err_setc(err, CFS_ENOMEM, "out of memory reading a per-cell array whole");
    uint64_t start[CFS_MAX_DIMS] = {0};
    int rc;
    if (src->dtype != CFS_STRING)
        rc = cfs_array_read(src, start, src->shape, v->whole, err);
    else if (!(v->strings = cfs_strpool_new()))
        rc = cfs_err_setc(err, CFS_ENOMEM, "out of memory reading a per-cell array whole");
    else
        rc = cfs_array_read_strings(src, start, src->shape, v->whole, v->strings, err);
    if (rc < 0) {
        free(v->whole);
        v->whole = NULL;
        cfs_strpool_free(v->strings);
        v->strings = NULL;
    }
    return rc;
}

static void rows_destroy(cfs_job *job)
{
    rows_view *v = (rows_view *)job;
    cfs_strpool_free(v->strings);
    free(v->whole);
    cfs_array_unref(v->src);
    cfs_perm_unref(v->perm);
    pthread_mutex_destroy(&v->lock);
    free(v);
}

/* Copies the hyperslab of one row (dims 1..) of a C-order array into out; returns bytes. */
static size_t copy_row_slab(const cfs_array *a, const unsigned char *row, const uint64_t *start,
                            const uint64_t *count, unsigned char *out)
{
    size_t esize = cfs_array_elem_size(a);
    int nd = a->ndim;
    uint64_t inner = 1;
    for (int d = 1; d < nd; d++)
        inner *= count[d];
    if (nd == 1) {
        memcpy(out, row, esize);
        return esize;
    }
    uint64_t idx[CFS_MAX_DIMS] = {0};
    uint64_t run = count[nd - 1];
    unsigned char *dst = out;
    for (uint64_t done = 0; done < inner; done += run) {
        uint64_t off = 0;
        for (int d = 1; d < nd; d++)
            off = off * a->shape[d] + start[d] + idx[d];
        memcpy(dst, row + off * esize, run * esize);
        dst += run * esize;
        for (int d = nd - 2; d >= 1; d--) {
            if (++idx[d] < count[d])
                break;
            idx[d] = 0;
        }
    }
    return (size_t)(dst - out);
}

/* Copies whole rows of a few bytes each: a call of memcpy a row would cost more than the copy. */
#define COPY_ROWS(BYTES)                                                                   \
    for (uint64_t r = 0; r < n; r++)                                                      \
        memcpy(dst + r * (BYTES), from[r], (BYTES));

static bool copy_whole_rows(const unsigned char *const *from, uint64_t n, size_t row_bytes,
                            unsigned char *dst)
{
    switch (row_bytes) {
    case 1: COPY_ROWS(1) return true;
    case 4: COPY_ROWS(4) return true;
    case 8: COPY_ROWS(8) return true;
    case 16: COPY_ROWS(16) return true;
    default: return false;
    }
}

/* Copies a slab's rows (out of order[]'s source rows, one pointer each) into out. */
static void place_rows(const cfs_array *arr, const rows_view *v, const unsigned char *const *from,
                       const uint64_t *start, const uint64_t *count, void *out)
{
    size_t esize = cfs_array_elem_size(arr);
    unsigned char *dst = out;
    bool whole_rows = !v->cols_too;
    for (int d = 1; d < arr->ndim; d++)
        whole_rows &= start[d] == 0 && count[d] == arr->shape[d];
    if (whole_rows &&
        copy_whole_rows(from, count[0], (size_t)cfs_array_row_elems(arr) * esize, dst))
        return;
    for (uint64_t r = 0; r < count[0]; r++) {
        const unsigned char *row = from[r];
        if (v->cols_too) {
            for (uint64_t c = 0; c < count[1]; c++)
                memcpy(dst + c * esize, row + v->perm->order[start[1] + c] * esize, esize);
            dst += count[1] * esize;
        } else {
            dst += copy_row_slab(arr, row, start, count, dst);
        }
    }
}

typedef struct row_pick {
    uint64_t row;           /* in the source */
    uint64_t slot;          /* in the slab */
} row_pick;

static int compare_picks(const void *a, const void *b)
{
    const row_pick *x = a, *y = b;
    return x->row < y->row ? -1 : x->row > y->row;
}

/* The slab's cells read from the source as rows in source order, then put in stored order. */
static int gather_piece(const cfs_array *arr, const rows_view *v, const uint64_t *start,
                        const uint64_t *count, void *out, cfs_strpool *pool, cfs_err *err)
{
    uint64_t m = count[0];
    size_t row_bytes = (size_t)cfs_array_row_elems(v->src) * cfs_array_elem_size(v->src);
    row_pick *pick = malloc((m ? m : 1) * sizeof *pick);
    uint64_t *rows = malloc((m ? m : 1) * sizeof *rows);
    const unsigned char **from = malloc((m ? m : 1) * sizeof *from);
    unsigned char *values = malloc((m ? m : 1) * row_bytes + 1);
    int rc = pick && rows && from && values ? 0 : cfs_err_oom(err);
    for (uint64_t i = 0; rc == 0 && i < m; i++)
        pick[i] = (row_pick){v->perm->order[start[0] + i], i};
    if (rc == 0)
        qsort(pick, m, sizeof *pick, compare_picks);
    for (uint64_t i = 0; rc == 0 && i < m; i++)
        rows[i] = pick[i].row;
    if (rc == 0)
        rc = cfs_array_read_rows(v->src, rows, m, values, pool, err);
    for (uint64_t i = 0; rc == 0 && i < m; i++)
        from[pick[i].slot] = values + i * row_bytes;
    if (rc == 0)
        place_rows(arr, v, from, start, count, out);
    free(pick);
    free(rows);
    free(from);
    free(values);
    return rc;
}

/* Whether this slab is read piece by piece (see CFS_PIECEWISE_READS). */
static bool piecewise(rows_view *v, const uint64_t *count)
{
    if (__atomic_load_n(&v->loaded, __ATOMIC_ACQUIRE))
        return false;
    pthread_mutex_lock(&v->lock);
    bool yes = v->reads < CFS_PIECEWISE_READS &&
               (v->rows_read + count[0]) * CFS_PIECEWISE_SHARE <= v->perm->n;
    if (yes) {
        v->reads++;
        v->rows_read += count[0];
    }
    pthread_mutex_unlock(&v->lock);
    return yes;
}

/* The slab's values; strings lent from the view's copy of the source or put in pool. */
static int rows_gather(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                       void *out, cfs_strpool *pool, cfs_err *err)
{
    rows_view *v = arr->ctx;
    if (piecewise(v, count))
        return gather_piece(arr, v, start, count, out, pool, err);
    if (cfs_job_ensure(&v->job, err) < 0)
        return -1;
    __atomic_store_n(&v->loaded, true, __ATOMIC_RELEASE);
    /* In batches of rows, so that a slab of a million rows needs no million pointers. */
    enum { BATCH = 4096 };
    const unsigned char *from[BATCH];
    size_t row_bytes = (size_t)cfs_array_row_elems(arr) * cfs_array_elem_size(arr);
    size_t out_row = row_bytes;
    if (arr->ndim > 1) {
        out_row = cfs_array_elem_size(arr);
        for (int d = 1; d < arr->ndim; d++)
            out_row *= count[d];
    }
    uint64_t s0[CFS_MAX_DIMS] = {0}, n0[CFS_MAX_DIMS] = {0};
    memcpy(s0, start, (size_t)arr->ndim * sizeof *s0);
    memcpy(n0, count, (size_t)arr->ndim * sizeof *n0);
    for (uint64_t r0 = 0; r0 < count[0]; r0 += BATCH) {
        n0[0] = count[0] - r0 < BATCH ? count[0] - r0 : BATCH;
        s0[0] = start[0] + r0;
        for (uint64_t r = 0; r < n0[0]; r++)
            from[r] = (const unsigned char *)v->whole + v->perm->order[s0[0] + r] * row_bytes;
        place_rows(arr, v, from, s0, n0, (unsigned char *)out + r0 * out_row);
    }
    return 0;
}

static int rows_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                     void *out, cfs_err *err)
{
    if (arr->dtype != CFS_STRING)
        return rows_gather(arr, start, count, out, NULL, err);
    /* The view keeps its strings, or lends a pool's: a reader gets copies it frees. */
    cfs_strpool *pool = cfs_strpool_new();
    int rc = pool ? rows_gather(arr, start, count, out, pool, err) : cfs_err_oom(err);
    uint64_t n = 1;
    for (int d = 0; d < arr->ndim; d++)
        n *= count[d];
    if (rc == 0)
        rc = cfs_strings_own(out, (size_t)n, err);
    cfs_strpool_free(pool);
    return rc;
}

static int rows_read_strings(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                             const char **out, cfs_strpool *pool, cfs_err *err)
{
    return rows_gather(arr, start, count, out, pool, err);
}

static void rows_free_ctx(void *ctx)
{
    cfs_job_unref(&((rows_view *)ctx)->job);
}

static const cfs_array_ops rows_ops = {rows_read, rows_free_ctx, rows_read_strings, NULL, NULL};

cfs_array *cfs_perm_rows(cfs_array *src, cfs_perm *perm)
{
    rows_view *v = calloc(1, sizeof *v);
    if (!v)
        return NULL;
    cfs_job_init(&v->job, rows_load, rows_destroy);
    pthread_mutex_init(&v->lock, NULL);
    v->src = cfs_array_ref(src);
    v->perm = cfs_perm_ref(perm);
    cfs_array *arr = cfs_array_new(src->dtype, src->ndim, src->shape, &rows_ops, v);
    if (!arr) {
        cfs_job_unref(&v->job);
        return NULL;
    }
    if (src->dtype == CFS_COMPOUND) {
        /* Records keep their layout: share the field list by copying it. */
        arr->record_size = src->record_size;
        arr->nfields = src->nfields;
        arr->fields = calloc(src->nfields ? src->nfields : 1, sizeof *arr->fields);
        for (size_t i = 0; arr->fields && i < src->nfields; i++) {
            arr->fields[i] = src->fields[i];
            arr->fields[i].name = strdup(src->fields[i].name);
        }
    }
    return arr;
}

cfs_array *cfs_perm_rows_cols(cfs_array *src, cfs_perm *perm)
{
    cfs_array *arr = cfs_perm_rows(src, perm);
    if (arr)
        ((rows_view *)arr->ctx)->cols_too = true;
    return arr;
}
