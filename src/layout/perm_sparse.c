/* Sparse per-cell matrices (a csr obsm entry, an obsp entry) in stored order (permute.h). */
#include "permute.h"

#include <pthread.h>
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
    /* Cells on the major axis: chunks made from their own stored rows (permute.h). */
    bool cells_major;
    pthread_mutex_t lock;                 /* guards the fields below */
    int64_t *src_ptr;                     /* major_n + 1: the source's indptr */
    int64_t *out_ptr;                     /* major_n + 1: where stored row j's entries start */
    unsigned reads;                       /* chunks of entries made piece by piece */
    uint64_t entries_read;                /* and their entries */
    bool loaded;                          /* the whole job ran */
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
    pthread_mutex_destroy(&s->lock);
    free(s->src_ptr);
    free(s->out_ptr);
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

/* ---- piece by piece: a chunk from its own stored rows ---------------------------------- */

/* Under the lock: the source's indptr, read whole (a stored row's place depends on the lengths
 * of every row before it), and each stored row's place. */
static int places_locked(sparse_job *s, cfs_err *err)
{
    if (s->out_ptr)
        return 0;
    void *raw = read_whole(s->indptr, err);
    int64_t *src = raw ? malloc((s->major_n + 1) * sizeof *src) : NULL;
    int64_t *dst = src ? malloc((s->major_n + 1) * sizeof *dst) : NULL;
    int rc = dst ? 0 : raw ? cfs_err_oom(err) : -1;
    uint64_t nnz = s->data->shape[0];
    for (uint64_t m = 0; rc == 0 && m <= s->major_n; m++) {
        src[m] = cfs_int_get(s->indptr->dtype, raw, m);
        if (src[m] < 0 || (uint64_t)src[m] > nnz || (m && src[m] < src[m - 1]))
            rc = cfs_err_set(err, "indptr is not monotonic within the stored entries");
    }
    const uint64_t *order = s->perm->order;
    if (rc == 0)
        dst[0] = 0;
    for (uint64_t j = 0; rc == 0 && j < s->major_n; j++)
        dst[j + 1] = dst[j] + src[order[j] + 1] - src[order[j]];
    free(raw);
    if (rc < 0) {
        free(src);
        free(dst);
        return -1;
    }
    s->src_ptr = src;
    s->out_ptr = dst;
    return 0;
}

/* Whether a chunk of n entries is made piece by piece; the places are ready when it is. */
static bool piecewise(sparse_job *s, uint64_t n, cfs_err *err, int *rc)
{
    *rc = 0;
    pthread_mutex_lock(&s->lock);
    bool yes = !s->loaded && s->reads < CFS_PIECEWISE_READS &&
               (s->entries_read + n) * CFS_PIECEWISE_SHARE <= s->data->shape[0];
    if (yes && (*rc = places_locked(s, err)) == 0) {
        s->reads++;
        s->entries_read += n;
    }
    pthread_mutex_unlock(&s->lock);
    return yes;
}

/* The first stored row whose entries end after entry k. */
static uint64_t row_of(const int64_t *out_ptr, uint64_t rows, uint64_t k)
{
    uint64_t lo = 0, hi = rows;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if ((uint64_t)out_ptr[mid + 1] <= k)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

typedef struct span {
    int64_t lo, hi;         /* the source entries of a stored row */
    uint64_t row;           /* the stored row */
    uint64_t at;            /* where they land in the read buffers */
} span;

static int compare_spans(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Entries [k0, k0 + n) of data (which 0) or indices (1): the stored rows holding them, their
 * source entries read as one sorted set, each row's entries sorted as sparse_run sorts them. */
static int entries_piece(const sparse_job *s, int which, uint64_t k0, uint64_t n, void *out,
                         cfs_err *err)
{
    if (n == 0)
        return 0;
    uint64_t j0 = row_of(s->out_ptr, s->major_n, k0);
    uint64_t j1 = row_of(s->out_ptr, s->major_n, k0 + n - 1) + 1;
    uint64_t base = (uint64_t)s->out_ptr[j0], total = (uint64_t)s->out_ptr[j1] - base;
    size_t vsize = cfs_array_elem_size(s->data), isize = cfs_array_elem_size(s->indices);
    span *sp = malloc((j1 - j0) * sizeof *sp);
    uint64_t *where = malloc(total * sizeof *where);
    unsigned char *ind = malloc(total * isize), *val = which == 0 ? malloc(total * vsize) : NULL;
    entry *e = malloc(total * sizeof *e);
    int rc = sp && where && ind && e && (which != 0 || val) ? 0 : cfs_err_oom(err);
    for (uint64_t j = j0; rc == 0 && j < j1; j++) {
        uint64_t m = s->perm->order[j];
        sp[j - j0] = (span){s->src_ptr[m], s->src_ptr[m + 1], j, 0};
    }
    if (rc == 0)
        qsort(sp, j1 - j0, sizeof *sp, compare_spans);
    uint64_t at = 0;
    for (uint64_t r = 0; rc == 0 && r < j1 - j0; r++) {
        sp[r].at = at;
        for (int64_t k = sp[r].lo; k < sp[r].hi; k++)
            where[at++] = (uint64_t)k;
    }
    if (rc == 0)
        rc = cfs_array_read_rows(s->indices, where, total, ind, NULL, err);
    if (rc == 0 && which == 0)
        rc = cfs_array_read_rows(s->data, where, total, val, NULL, err);
    const uint64_t *pos = rc == 0 ? cfs_perm_pos(s->perm) : NULL;
    if (rc == 0 && !pos)
        rc = cfs_err_oom(err);
    bool remap_minor = !s->csr || s->both_axes;
    for (uint64_t r = 0; rc == 0 && r < j1 - j0; r++) {
        uint64_t len = (uint64_t)(sp[r].hi - sp[r].lo), first = (uint64_t)s->out_ptr[sp[r].row];
        entry *row = e + (first - base);
        for (uint64_t i = 0; rc == 0 && i < len; i++) {
            int64_t minor = cfs_int_get(s->indices->dtype, ind, sp[r].at + i);
            if (minor < 0 || (remap_minor && (uint64_t)minor >= s->perm->n))
                rc = cfs_err_set(err, "an index is out of range");
            row[i] = (entry){0, remap_minor ? (int64_t)pos[minor] : minor, sp[r].at + i};
        }
        if (rc == 0)
            qsort(row, len, sizeof *row, compare_entries);
    }
    for (uint64_t k = 0; rc == 0 && k < n; k++) {
        const entry *x = &e[k0 - base + k];
        if (which == 0)
            memcpy((unsigned char *)out + k * vsize, val + x->src * vsize, vsize);
        else
            cfs_int_set(s->out_index, out, k, x->minor);
    }
    free(sp);
    free(where);
    free(ind);
    free(val);
    free(e);
    return rc;
}

static int part_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                     void *out, cfs_err *err)
{
    sparse_part *p = arr->ctx;
    sparse_job *s = p->job;
    if (s->cells_major && p->which == 2) {
        /* indptr from the places, whether or not the whole job ran: the same values */
        pthread_mutex_lock(&s->lock);
        int rc = places_locked(s, err);
        pthread_mutex_unlock(&s->lock);
        for (uint64_t k = 0; rc == 0 && k < count[0]; k++)
            cfs_int_set(s->out_index, out, k, s->out_ptr[start[0] + k]);
        return rc;
    }
    int rc = 0;
    if (s->cells_major && piecewise(s, count[0], err, &rc))
        return rc < 0 ? -1 : entries_piece(s, p->which, start[0], count[0], out, err);
    if (rc < 0)
        return -1;
    if (cfs_job_ensure(&s->job, err) < 0)
        return -1;
    pthread_mutex_lock(&s->lock);
    s->loaded = true;
    pthread_mutex_unlock(&s->lock);
    void *src = p->which == 0 ? s->out_data : p->which == 1 ? s->out_indices : s->out_indptr;
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

static const cfs_array_ops part_ops = {part_read, part_free, NULL, NULL, NULL};

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
    s->cells_major = el->csr || both_axes;
    pthread_mutex_init(&s->lock, NULL);
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
