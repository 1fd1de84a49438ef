#include "array_views.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "elems.h"
#include "html_unescape.h"

typedef struct view {
    cfs_view_kind kind;
    cfs_array *inner;
    int64_t value;          /* CFS_VIEW_EQUALS */
} view;

static uint64_t slab_elems(int ndim, const uint64_t *count)
{
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= count[d];
    return n;
}

static int transpose_read(const view *v, const uint64_t *start, const uint64_t *count, void *out,
                          cfs_err *err)
{
    uint64_t is[2] = {start[1], start[0]}, ic[2] = {count[1], count[0]};
    size_t es = cfs_array_elem_size(v->inner);
    uint64_t n = count[0] * count[1];
    if (n == 0)
        return 0;
    void *tmp = cfs_elems_alloc(n, es, err);
    if (!tmp)
        return -1;
    int rc = cfs_array_read(v->inner, is, ic, tmp, err);
    if (rc == 0)
        cfs_elems_transpose(tmp, out, count[1], count[0], es);
    free(tmp);
    return rc;
}

static int format_read(const view *v, uint64_t n, const uint64_t *start, const uint64_t *count,
                       void *out, cfs_err *err)
{
    void *tmp = cfs_elems_alloc(n, cfs_array_elem_size(v->inner), err);
    if (!tmp)
        return -1;
    int rc = cfs_array_read(v->inner, start, count, tmp, err);
    char **s = out;
    for (uint64_t i = 0; rc == 0 && i < n; i++) {
        bool neg;
        uint64_t mag = cfs_elems_int(tmp, v->inner->dtype, (size_t)i, &neg);
        char buf[32];
        snprintf(buf, sizeof buf, "%s%llu", neg ? "-" : "", (unsigned long long)mag);
        if (!(s[i] = strdup(buf))) {
            cfs_strings_free(s, (size_t)i);
            rc = cfs_err_oom(err);
        }
    }
    free(tmp);
    return rc;
}

/* Integers written as the signed type of arr (codes: -1 and up), refusing a value that does
 * not fit rather than wrapping it. */
static int codes_read(const cfs_array *arr, const view *v, uint64_t n, const uint64_t *start,
                      const uint64_t *count, void *out, cfs_err *err)
{
    void *tmp = cfs_elems_alloc(n, cfs_array_elem_size(v->inner), err);
    if (!tmp)
        return -1;
    int rc = cfs_array_read(v->inner, start, count, tmp, err);
    size_t es = cfs_dtype_size(arr->dtype);
    uint64_t max = es >= 8 ? (uint64_t)INT64_MAX : ((uint64_t)1 << (8 * es - 1)) - 1;
    for (uint64_t i = 0; rc == 0 && i < n; i++) {
        bool neg;
        uint64_t mag = cfs_elems_int(tmp, v->inner->dtype, (size_t)i, &neg);
        if (neg ? mag > max + 1 : mag > max) {
            rc = cfs_err_set(err, "a categorical code (%s%llu) is outside the %s the categories "
                             "call for", neg ? "-" : "", (unsigned long long)mag,
                             cfs_dtype_name(arr->dtype));
            break;
        }
        int64_t val = neg ? -(int64_t)(mag - 1) - 1 : (int64_t)mag;
        unsigned char *o = (unsigned char *)out + i * es;
        for (size_t b = 0; b < es; b++) /* little-endian two's complement */
            o[b] = (unsigned char)((uint64_t)val >> (8 * b));
    }
    free(tmp);
    return rc;
}

static int equals_read(const view *v, uint64_t n, const uint64_t *start, const uint64_t *count,
                       void *out, cfs_err *err)
{
    void *tmp = cfs_elems_alloc(n, cfs_array_elem_size(v->inner), err);
    if (!tmp)
        return -1;
    int rc = cfs_array_read(v->inner, start, count, tmp, err);
    unsigned char *o = out;
    for (uint64_t i = 0; rc == 0 && i < n; i++) {
        bool neg;
        uint64_t mag = cfs_elems_int(tmp, v->inner->dtype, (size_t)i, &neg);
        o[i] = (neg ? -(int64_t)(mag - 1) - 1 : (int64_t)mag) == v->value;
    }
    free(tmp);
    return rc;
}

static int view_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                     void *out, cfs_err *err)
{
    const view *v = arr->ctx;
    uint64_t n = slab_elems(arr->ndim, count);
    if (n == 0)
        return 0;
    switch (v->kind) {
    case CFS_VIEW_TRANSPOSE: return transpose_read(v, start, count, out, err);
    case CFS_VIEW_SQUEEZE: {
        uint64_t s[2] = {start[0], 0}, c[2] = {count[0], 1};
        return cfs_array_read(v->inner, s, c, out, err);
    }
    case CFS_VIEW_UNESCAPE:
        if (cfs_array_read(v->inner, start, count, out, err) < 0)
            return -1;
        return cfs_html_unescape_all(out, (size_t)n, err);
    case CFS_VIEW_FORMAT: return format_read(v, n, start, count, out, err);
    case CFS_VIEW_CODES: return codes_read(arr, v, n, start, count, out, err);
    case CFS_VIEW_EQUALS: return equals_read(v, n, start, count, out, err);
    }
    return cfs_err_set(err, "unknown view");
}

static void view_free(void *ctx)
{
    view *v = ctx;
    if (!v)
        return;
    cfs_array_unref(v->inner);
    free(v);
}

static const cfs_array_ops view_ops = {view_read, view_free, NULL, NULL, NULL};

cfs_array *cfs_view_new(cfs_view_kind kind, cfs_array *inner)
{
    uint64_t shape[CFS_MAX_DIMS];
    int ndim = inner->ndim;
    cfs_dtype dt = inner->dtype;
    memcpy(shape, inner->shape, sizeof shape);
    if (kind == CFS_VIEW_TRANSPOSE) {
        shape[0] = inner->shape[1];
        shape[1] = inner->shape[0];
    } else if (kind == CFS_VIEW_SQUEEZE) {
        ndim = 1;
    } else if (kind == CFS_VIEW_CODES) {
        cfs_array_unref(inner); /* needs its type: cfs_view_codes */
        return NULL;
    } else {
        dt = CFS_STRING;
    }
    view *v = calloc(1, sizeof *v);
    cfs_array *arr = v ? cfs_array_new(dt, ndim, shape, &view_ops, v) : NULL;
    if (!arr) {
        free(v);
        cfs_array_unref(inner);
        return NULL;
    }
    v->kind = kind;
    v->inner = inner;
    return arr;
}

cfs_dtype cfs_codes_dtype(uint64_t ncategories)
{
    return ncategories < 127 ? CFS_INT8 : ncategories < 32767 ? CFS_INT16
           : ncategories < 2147483647 ? CFS_INT32 : CFS_INT64;
}

cfs_array *cfs_view_codes(cfs_array *inner, uint64_t ncategories)
{
    cfs_dtype dt = cfs_codes_dtype(ncategories);
    if (inner->dtype == dt)
        return inner;
    view *v = calloc(1, sizeof *v);
    cfs_array *arr = v ? cfs_array_new(dt, inner->ndim, inner->shape, &view_ops, v) : NULL;
    if (!arr) {
        free(v);
        cfs_array_unref(inner);
        return NULL;
    }
    v->kind = CFS_VIEW_CODES;
    v->inner = inner;
    return arr;
}

cfs_array *cfs_view_equals(cfs_array *inner, int64_t value)
{
    view *v = calloc(1, sizeof *v);
    cfs_array *arr = v ? cfs_array_new(CFS_BOOL, inner->ndim, inner->shape, &view_ops, v) : NULL;
    if (!arr) {
        free(v);
        return NULL;
    }
    v->kind = CFS_VIEW_EQUALS;
    v->inner = cfs_array_ref(inner);
    v->value = value;
    return arr;
}
