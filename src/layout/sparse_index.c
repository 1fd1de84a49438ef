#include "sparse_index.h"

#include <stdlib.h>

#include "permute.h"

cfs_dtype cfs_sparse_index_dtype(uint64_t nnz, uint64_t minor_n)
{
    const uint64_t limit = UINT64_C(1) << 31;
    return nnz < limit && minor_n < limit ? CFS_INT32 : CFS_INT64;
}

cfs_dtype cfs_sparse_elem_index_dtype(const cfs_elem *el)
{
    uint64_t minor_n = el->csr ? el->sparse_shape[1] : el->sparse_shape[0];
    return cfs_sparse_index_dtype(el->values->shape[0], minor_n);
}

/* A 1-d integer array read in another integer dtype (values are known to fit). */
static int cast_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                     void *out, cfs_err *err)
{
    const cfs_array *src = arr->ctx;
    void *raw = malloc((count[0] ? count[0] : 1) * cfs_dtype_size(src->dtype));
    if (!raw)
        return cfs_err_oom(err);
    int rc = cfs_array_read(src, start, count, raw, err);
    for (uint64_t i = 0; rc == 0 && i < count[0]; i++) {
        int64_t v = cfs_int_get(src->dtype, raw, i);
        if (arr->dtype == CFS_INT32 && (v < INT32_MIN || v > INT32_MAX))
            rc = cfs_err_set(err, "a sparse index (%lld) is out of range", (long long)v);
        else
            cfs_int_set(arr->dtype, out, i, v);
    }
    free(raw);
    return rc;
}

static void cast_free(void *ctx)
{
    cfs_array_unref(ctx);
}

static const cfs_array_ops cast_ops = {cast_read, cast_free, NULL, NULL, NULL};

static int cast_in_place(cfs_array **slot, cfs_dtype dtype, cfs_err *err)
{
    if ((*slot)->dtype == dtype)
        return 0;
    if (!cfs_dtype_is_integer((*slot)->dtype) || (*slot)->ndim != 1)
        return cfs_err_set(err, "a sparse index array is not a 1-d integer array");
    cfs_array *view = cfs_array_new(dtype, 1, (*slot)->shape, &cast_ops, *slot);
    if (!view)
        return cfs_err_oom(err);
    view->chunk_hint[0] = (*slot)->chunk_hint[0];
    view->level_rows = (*slot)->level_rows;
    *slot = view;   /* the view owns the reference the slot held */
    return 0;
}

int cfs_sparse_unify_indices(cfs_elem *el, cfs_err *err)
{
    if (el->kind == CFS_EL_SPARSE) {
        cfs_dtype t = cfs_sparse_elem_index_dtype(el);
        if (cast_in_place(&el->aux, t, err) < 0 || cast_in_place(&el->indptr, t, err) < 0)
            return cfs_err_prefix(err, "%s", el->name ? el->name : "");
    }
    for (size_t i = 0; i < el->nchildren; i++)
        if (cfs_sparse_unify_indices(el->children[i], err) < 0)
            return -1;
    return 0;
}
