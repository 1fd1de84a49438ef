/* Sparse per-cell matrices (a csr obsm entry, an obsp entry) in stored order (permute.h). */
#include "permute.h"

#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "sparse_index.h"

typedef struct sparse_job {
    cfs_job job;
    cfs_array *data, *indices, *indptr;   /* sources */
    cfs_perm *perm;
    bool csr, both_axes;
    uint64_t major_n;                     /* rows for csr, columns for csc */
    cfs_dtype out_index;                  /* of out_indices and out_indptr */
    void *out_data, *out_indices, *out_indptr;
} sparse_job;

static void *read_whole(const cfs_array *a, cfs_err *err)
{
    size_t esize = cfs_array_elem_size(a);
    uint64_t n = cfs_array_nelems(a);
    void *buf = calloc(n ? n : 1, esize);
    uint64_t start[1] = {0};
    if (!buf) {
        cfs_err_oom(err);
        return NULL;
    }
    if (cfs_array_read(a, start, a->shape, buf, err) < 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

typedef struct entry {
    int64_t major, minor;
    uint64_t src;
} entry;

static int compare_entries(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->major != y->major)
        return x->major < y->major ? -1 : 1;
    if (x->minor != y->minor)
        return x->minor < y->minor ? -1 : 1;
    return x->src < y->src ? -1 : x->src > y->src;
}

static int sparse_run(cfs_job *job, cfs_err *err)
{
    sparse_job *s = (sparse_job *)job;
    void *data = read_whole(s->data, err), *ind = data ? read_whole(s->indices, err) : NULL;
    void *ptr = ind ? read_whole(s->indptr, err) : NULL;
    uint64_t nnz = s->data->shape[0];
    entry *e = ptr ? malloc((nnz ? nnz : 1) * sizeof *e) : NULL;
    size_t vsize = cfs_array_elem_size(s->data);
    int rc = -1;
    if (!e)
        goto done;
    const uint64_t *pos = cfs_perm_pos(s->perm);
    if (!pos) {
        cfs_err_oom(err);
        goto done;
    }
    /* Rows are cells: for csr the major axis, for csc the minor one. */
    bool remap_major = s->csr || s->both_axes, remap_minor = !s->csr || s->both_axes;
    for (uint64_t m = 0; m < s->major_n; m++) {
        int64_t lo = cfs_int_get(s->indptr->dtype, ptr, m), hi = cfs_int_get(s->indptr->dtype, ptr, m + 1);
        if (lo < 0 || hi < lo || (uint64_t)hi > nnz) {
            cfs_err_set(err, "indptr is not monotonic within the stored entries");
            goto done;
        }
        for (int64_t k = lo; k < hi; k++) {
            int64_t minor = cfs_int_get(s->indices->dtype, ind, (uint64_t)k);
            if (minor < 0 || (remap_minor && (uint64_t)minor >= s->perm->n)) {
                cfs_err_set(err, "an index is out of range");
                goto done;
            }
            e[k].major = remap_major ? (int64_t)pos[m] : (int64_t)m;
            e[k].minor = remap_minor ? (int64_t)pos[minor] : minor;
            e[k].src = (uint64_t)k;
        }
    }
    qsort(e, nnz, sizeof *e, compare_entries);
    s->out_data = malloc((nnz ? nnz : 1) * vsize);
    s->out_indices = malloc((nnz ? nnz : 1) * cfs_dtype_size(s->out_index));
    s->out_indptr = calloc(s->major_n + 1, cfs_dtype_size(s->out_index));
    if (!s->out_data || !s->out_indices || !s->out_indptr) {
        cfs_err_oom(err);
        goto done;
    }
    uint64_t k = 0;
    for (uint64_t m = 0; m <= s->major_n; m++) {
        cfs_int_set(s->out_index, s->out_indptr, m, (int64_t)k);
        while (k < nnz && (uint64_t)e[k].major == m) {
            memcpy((char *)s->out_data + k * vsize, (char *)data + e[k].src * vsize, vsize);
            cfs_int_set(s->out_index, s->out_indices, k, e[k].minor);
            k++;
        }
    }
    rc = 0;
done:
    free(data);
    free(ind);
    free(ptr);
    free(e);
    return rc;
}

static void sparse_destroy(cfs_job *job)
{
    sparse_job *s = (sparse_job *)job;
    cfs_array_unref(s->data);
    cfs_array_unref(s->indices);
    cfs_array_unref(s->indptr);
    cfs_perm_unref(s->perm);
    free(s->out_data);
    free(s->out_indices);
    free(s->out_indptr);
    free(s);
}

typedef struct sparse_part {
    sparse_job *job;
    int which;              /* 0 data, 1 indices, 2 indptr */
} sparse_part;

static int part_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                     void *out, cfs_err *err)
{
    sparse_part *p = arr->ctx;
    if (cfs_job_ensure(&p->job->job, err) < 0)
        return -1;
    void *src = p->which == 0 ? p->job->out_data : p->which == 1 ? p->job->out_indices
                                                                 : p->job->out_indptr;
    size_t esize = cfs_array_elem_size(arr);
    memcpy(out, (char *)src + start[0] * esize, count[0] * esize);
    return 0;
}

static void part_free(void *ctx)
{
    sparse_part *p = ctx;
    cfs_job_unref(&p->job->job);
    free(p);
}

static const cfs_array_ops part_ops = {part_read, part_free, NULL, NULL};

static cfs_array *part_array(sparse_job *job, int which, cfs_dtype dtype, const cfs_array *like)
{
    sparse_part *p = malloc(sizeof *p);
    if (!p)
        return NULL;
    p->job = job;
    p->which = which;
    cfs_job_ref(&job->job);
    cfs_array *a = cfs_array_new(dtype, 1, like->shape, &part_ops, p);
    if (!a)
        part_free(p);
    return a;
}

int cfs_perm_sparse(cfs_elem *el, cfs_perm *perm, bool both_axes, cfs_err *err)
{
    sparse_job *s = calloc(1, sizeof *s);
    if (!s)
        return cfs_err_oom(err);
    cfs_job_init(&s->job, sparse_run, sparse_destroy);
    s->data = cfs_array_ref(el->values);
    s->indices = cfs_array_ref(el->aux);
    s->indptr = cfs_array_ref(el->indptr);
    s->perm = cfs_perm_ref(perm);
    s->csr = el->csr;
    s->both_axes = both_axes;
    s->major_n = el->csr ? el->sparse_shape[0] : el->sparse_shape[1];
    s->out_index = cfs_sparse_elem_index_dtype(el);
    cfs_array *d = part_array(s, 0, el->values->dtype, el->values),
              *i = part_array(s, 1, s->out_index, el->aux),
              *p = part_array(s, 2, s->out_index, el->indptr);
    cfs_job_unref(&s->job);
    if (!d || !i || !p) {
        cfs_array_unref(d);
        cfs_array_unref(i);
        cfs_array_unref(p);
        return cfs_err_oom(err);
    }
    cfs_array_unref(el->values);
    cfs_array_unref(el->aux);
    cfs_array_unref(el->indptr);
    el->values = d;
    el->aux = i;
    el->indptr = p;
    return 0;
}
