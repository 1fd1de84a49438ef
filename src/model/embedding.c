#include "embedding.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The check reads every row, in slabs of up to this many bytes (at least 16,384 rows): an
 * embedding of up to 64 MiB in one read, which a priority-ordered view serves from one read of
 * its source column instead of a chunk's cells at a time (docs/design.md §7). */
#define BLOCK_BYTES ((uint64_t)64 << 20)
enum { MIN_ROWS_PER_BLOCK = 16384 };

static double half_to_double(uint16_t h)
{
    int exp = (h >> 10) & 0x1f;
    double mant = h & 0x3ff;
    double v = exp == 0 ? ldexp(mant, -24) : exp == 31 ? (mant ? NAN : INFINITY)
                                                       : ldexp(mant + 1024, exp - 25);
    return (h & 0x8000) ? -v : v;
}

static double value_at(cfs_dtype t, const unsigned char *p)
{
    switch (t) {
    case CFS_BOOL: case CFS_UINT8: return *p;
    case CFS_INT8: return *(const int8_t *)p;
    case CFS_INT16: { int16_t v; memcpy(&v, p, 2); return v; }
    case CFS_UINT16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case CFS_INT32: { int32_t v; memcpy(&v, p, 4); return v; }
    case CFS_UINT32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case CFS_INT64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    case CFS_UINT64: { uint64_t v; memcpy(&v, p, 8); return (double)v; }
    case CFS_FLOAT16: { uint16_t v; memcpy(&v, p, 2); return half_to_double(v); }
    case CFS_FLOAT32: { float v; memcpy(&v, p, 4); return v; }
    case CFS_FLOAT64: { double v; memcpy(&v, p, 8); return v; }
    default: return NAN;
    }
}

typedef struct scan {
    bool any_finite_row;
    bool varies;
    bool have_first;
    double *first;      /* the first finite row, to tell "all cells at one point" */
    bool too_large;
} scan;

static void scan_block(scan *s, const cfs_array *arr, const unsigned char *buf, uint64_t rows,
                       uint64_t cols)
{
    size_t esize = cfs_dtype_size(arr->dtype);
    for (uint64_t r = 0; r < rows; r++) {
        const unsigned char *row = buf + r * cols * esize;
        bool finite = true;
        for (uint64_t c = 0; c < cols && finite; c++) {
            double v = value_at(arr->dtype, row + c * esize);
            if (!isfinite(v))
                finite = false;
            else if (fabs(v) > FLT_MAX)
                s->too_large = true;
        }
        if (!finite)
            continue;
        s->any_finite_row = true;
        for (uint64_t c = 0; c < cols; c++) {
            double v = value_at(arr->dtype, row + c * esize);
            if (!s->have_first)
                s->first[c] = v;
            else if (s->first[c] != v)
                s->varies = true;
        }
        s->have_first = true;
    }
}

static bool fail(char *why, size_t len, const char *reason)
{
    snprintf(why, len, "%s", reason);
    return false;
}

bool cfs_embedding_shape_fits(const cfs_elem *el, uint64_t n_obs, char *why, size_t why_len)
{
    if (el->kind != CFS_EL_ARRAY)
        return fail(why, why_len, "not a dense array");
    const cfs_array *arr = el->values;
    if (arr->dtype == CFS_STRING || arr->dtype == CFS_COMPOUND)
        return fail(why, why_len, "not numeric");
    if (arr->ndim < 1 || arr->ndim > 2 || arr->shape[0] != n_obs)
        return fail(why, why_len, "not one row per cell");
    if ((arr->ndim == 2 && arr->shape[1] == 0) || n_obs == 0)
        return fail(why, why_len, "has no columns");
    return true;
}

static bool verdict(const scan *s, char *why, size_t why_len)
{
    if (!s->any_finite_row)
        return fail(why, why_len, "has no finite row");
    if (s->too_large)
        return fail(why, why_len, "holds values past float32");
    if (!s->varies)
        return fail(why, why_len, "has the same coordinates for every cell");
    return true;
}

static uint64_t columns(const cfs_array *arr)
{
    return arr->ndim == 2 ? arr->shape[1] : 1;
}

bool cfs_embedding_values_drawable(const cfs_array *arr, const void *values, char *why,
                                   size_t why_len)
{
    uint64_t cols = columns(arr);
    scan s = {.first = calloc(cols, sizeof(double))};
    if (!s.first)
        return fail(why, why_len, "too large to check");
    scan_block(&s, arr, values, arr->shape[0], cols);
    free(s.first);
    return verdict(&s, why, why_len);
}

bool cfs_embedding_drawable(const cfs_elem *el, uint64_t n_obs, char *why, size_t why_len)
{
    if (!cfs_embedding_shape_fits(el, n_obs, why, why_len))
        return false;
    const cfs_array *arr = el->values;
    uint64_t cols = columns(arr);
    size_t esize = cfs_dtype_size(arr->dtype);
    uint64_t block = BLOCK_BYTES / (cols * esize);
    if (block < MIN_ROWS_PER_BLOCK)
        block = MIN_ROWS_PER_BLOCK;
    if (block > n_obs)
        block = n_obs;
    unsigned char *buf = malloc(block * cols * esize);
    scan s = {.first = calloc(cols, sizeof(double))};
    bool allocated = buf && s.first;
    bool ok = allocated;
    for (uint64_t r0 = 0; ok && r0 < n_obs; r0 += block) {
        uint64_t start[2] = {r0, 0}, count[2] = {n_obs - r0 < block ? n_obs - r0 : block, cols};
        cfs_err err;
        if (cfs_array_read(arr, start, count, buf, &err) < 0) {
            snprintf(why, why_len, "could not be read: %s", err.msg);
            ok = false;
            break;
        }
        scan_block(&s, arr, buf, count[0], cols);
    }
    free(buf);
    free(s.first);
    if (!ok)
        return allocated ? false : fail(why, why_len, "too large to check");
    return verdict(&s, why, why_len);
}

const cfs_elem *cfs_embedding_candidate(const cfs_elem *obsm, size_t k)
{
    const cfs_elem *umap = cfs_elem_child(obsm, "X_umap");
    if (umap && k == 0)
        return umap;
    size_t skip = umap ? 1 : 0;
    for (size_t i = 0; i < obsm->nchildren; i++)
        if (obsm->children[i] != umap && k == skip++)
            return obsm->children[i];
    return NULL;
}

const char *cfs_embedding_first(const cfs_dataset *ds)
{
    const cfs_elem *obsm = cfs_elem_child(ds->root, "obsm");
    const cfs_elem *el;
    char why[256];
    for (size_t k = 0; obsm && (el = cfs_embedding_candidate(obsm, k)); k++)
        if (cfs_embedding_drawable(el, ds->n_obs, why, sizeof why))
            return el->name;
    return NULL;
}
