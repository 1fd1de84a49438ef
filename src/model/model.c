#include "model.h"
#include "strfmt.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cfs_array *cfs_array_new(cfs_dtype dtype, int ndim, const uint64_t *shape,
                         const cfs_array_ops *ops, void *ctx)
{
    if (ndim < 0 || ndim > CFS_MAX_DIMS)
        return NULL;
    cfs_array *arr = calloc(1, sizeof *arr);
    if (!arr)
        return NULL;
    arr->dtype = dtype;
    arr->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        arr->shape[d] = shape[d];
    arr->ops = ops;
    arr->ctx = ctx;
    arr->refs = 1;
    return arr;
}

cfs_array *cfs_array_ref(cfs_array *arr)
{
    if (arr)
        __atomic_add_fetch(&arr->refs, 1, __ATOMIC_RELAXED);
    return arr;
}

void cfs_array_unref(cfs_array *arr)
{
    if (!arr || __atomic_sub_fetch(&arr->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    if (arr->ops && arr->ops->free_ctx)
        arr->ops->free_ctx(arr->ctx);
    for (size_t i = 0; i < arr->nfields; i++)
        free(arr->fields[i].name);
    free(arr->fields);
    free(arr);
}

uint64_t cfs_array_nelems(const cfs_array *arr)
{
    uint64_t n = 1;
    for (int d = 0; d < arr->ndim; d++)
        n *= arr->shape[d];
    return n;
}

size_t cfs_array_elem_size(const cfs_array *arr)
{
    return arr->dtype == CFS_COMPOUND ? arr->record_size : cfs_dtype_size(arr->dtype);
}

static int check_slab(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                      cfs_err *err)
{
    for (int d = 0; d < arr->ndim; d++)
        if (start[d] > arr->shape[d] || count[d] > arr->shape[d] - start[d])
            return cfs_err_set(err, "read outside the array (dimension %d)", d);
    return 0;
}

int cfs_array_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count, void *out,
                   cfs_err *err)
{
    if (check_slab(arr, start, count, err) < 0)
        return -1;
    return arr->ops->read(arr, start, count, out, err);
}

/* Where a read without read_strings leaves its copies: moved into the pool. */
static int pool_copies(char **s, size_t n, cfs_strpool *pool, cfs_err *err)
{
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        const char *t = s[i] ? s[i] : "";
        char *in_pool = rc == 0 ? cfs_strpool_dup(pool, t, strlen(t)) : NULL;
        if (rc == 0 && !in_pool)
            rc = cfs_err_oom(err);
        free(s[i]);
        s[i] = in_pool;
    }
    return rc;
}

int cfs_array_read_strings(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                           const char **out, cfs_strpool *pool, cfs_err *err)
{
    if (check_slab(arr, start, count, err) < 0)
        return -1;
    if (arr->ops->read_strings)
        return arr->ops->read_strings(arr, start, count, out, pool, err);
    if (arr->ops->read(arr, start, count, (void *)out, err) < 0)
        return -1;
    uint64_t n = 1;
    for (int d = 0; d < arr->ndim; d++)
        n *= count[d];
    return pool_copies((char **)out, (size_t)n, pool, err);
}

/* Blocks double from 4 KiB to 1 MiB: a few strings cost a page, a column a few blocks. */
#define POOL_FIRST_BLOCK 4096
#define POOL_MAX_BLOCK ((size_t)1 << 20)

typedef struct pool_block {
    struct pool_block *next;
    size_t used, cap;
    char data[];
} pool_block;

struct cfs_strpool {
    pool_block *head;
    size_t next_cap;
};

cfs_strpool *cfs_strpool_new(void)
{
    cfs_strpool *pool = calloc(1, sizeof *pool);
    if (pool)
        pool->next_cap = POOL_FIRST_BLOCK;
    return pool;
}

void cfs_strpool_free(cfs_strpool *pool)
{
    if (!pool)
        return;
    for (pool_block *b = pool->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(pool);
}

void *cfs_strpool_alloc(cfs_strpool *pool, size_t len)
{
    pool_block *b = pool->head;
    if (!b || b->cap - b->used < len) {
        size_t cap = pool->next_cap > len ? pool->next_cap : len;
        if (cap > SIZE_MAX - sizeof *b || !(b = malloc(sizeof *b + cap)))
            return NULL;
        b->next = pool->head;
        b->used = 0;
        b->cap = cap;
        pool->head = b;
        if (pool->next_cap < POOL_MAX_BLOCK)
            pool->next_cap *= 2;
    }
    void *p = b->data + b->used;
    b->used += len;
    return p;
}

char *cfs_strpool_dup(cfs_strpool *pool, const char *s, size_t len)
{
    char *p = len < SIZE_MAX ? cfs_strpool_alloc(pool, len + 1) : NULL;
    if (p) {
        memcpy(p, s, len);
        p[len] = '\0';
    }
    return p;
}

void cfs_strings_free(char **strings, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(strings[i]);
}

int cfs_strings_own(char **strings, size_t n, cfs_err *err)
{
    for (size_t i = 0; i < n; i++) {
        if (!(strings[i] = strdup(strings[i] ? strings[i] : ""))) {
            cfs_strings_free(strings, i);
            return cfs_err_oom(err);
        }
    }
    return 0;
}

/* In-memory arrays: used for values a reader computes (e.g. a derived column) and by tests. */
typedef struct memory_array {
    void *data;
    size_t n;
    cfs_dtype dtype;
} memory_array;

/* Copies the hyperslab's elements (for strings: the pointers) in C order, row by row over the
 * last dimension. */
static void memory_copy(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                        void *out)
{
    const memory_array *m = arr->ctx;
    size_t esize = cfs_array_elem_size(arr);
    int nd = arr->ndim;
    if (nd == 0) {
        memcpy(out, m->data, esize);
        return;
    }
    uint64_t idx[CFS_MAX_DIMS] = {0};
    uint64_t run = count[nd - 1];
    uint64_t total = 1;
    for (int d = 0; d < nd; d++)
        total *= count[d];
    char *dst = out;
    for (uint64_t done = 0; done < total; done += run) {
        uint64_t off = 0;
        for (int d = 0; d < nd; d++)
            off = off * arr->shape[d] + start[d] + idx[d];
        memcpy(dst, (char *)m->data + off * esize, run * esize);
        dst += run * esize;
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < count[d])
                break;
            idx[d] = 0;
        }
    }
}

static uint64_t slab_elems(const cfs_array *arr, const uint64_t *count)
{
    uint64_t n = 1;
    for (int d = 0; d < arr->ndim; d++)
        n *= count[d];
    return n;
}

static int memory_read_strings(const cfs_array *arr, const uint64_t *start,
                               const uint64_t *count, const char **out, cfs_strpool *pool,
                               cfs_err *err)
{
    (void)pool;
    (void)err;
    if (slab_elems(arr, count))
        memory_copy(arr, start, count, out);
    return 0;
}

static int memory_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                       void *out, cfs_err *err)
{
    uint64_t n = slab_elems(arr, count);
    if (n == 0)
        return 0;
    memory_copy(arr, start, count, out);
    return arr->dtype == CFS_STRING ? cfs_strings_own(out, (size_t)n, err) : 0;
}

/* Rows gathered in place; strings lent, as memory_read_strings lends them. */
static int memory_read_rows(const cfs_array *arr, const uint64_t *rows, uint64_t n, void *out,
                            cfs_strpool *pool, cfs_err *err)
{
    (void)pool;
    (void)err;
    const memory_array *m = arr->ctx;
    size_t row_bytes = (size_t)cfs_array_row_elems(arr) * cfs_array_elem_size(arr);
    for (uint64_t i = 0; i < n; i++)
        memcpy((char *)out + i * row_bytes, (const char *)m->data + rows[i] * row_bytes,
               row_bytes);
    return 0;
}

static void memory_free(void *ctx)
{
    memory_array *m = ctx;
    if (!m)
        return;
    if (m->dtype == CFS_STRING)
        cfs_strings_free(m->data, m->n);
    free(m->data);
    free(m);
}

static const cfs_array_ops memory_ops = {memory_read, memory_free, memory_read_strings,
                                         memory_read_rows, NULL};

cfs_array *cfs_array_from_memory(cfs_dtype dtype, int ndim, const uint64_t *shape, void *data)
{
    memory_array *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->data = data;
    m->dtype = dtype;
    cfs_array *arr = cfs_array_new(dtype, ndim, shape, &memory_ops, m);
    if (!arr) {
        free(m);
        return NULL;
    }
    m->n = (size_t)cfs_array_nelems(arr);
    return arr;
}

cfs_elem *cfs_elem_new(cfs_elem_kind kind, const char *name)
{
    cfs_elem *el = calloc(1, sizeof *el);
    if (!el)
        return NULL;
    el->kind = kind;
    if (name && !(el->name = strdup(name))) {
        free(el);
        return NULL;
    }
    return el;
}

void cfs_elem_free(cfs_elem *el)
{
    if (!el)
        return;
    for (size_t i = 0; i < el->nchildren; i++)
        cfs_elem_free(el->children[i]);
    free(el->children);
    cfs_elem_free(el->index);
    cfs_elem_free(el->categories);
    cfs_array_unref(el->values);
    cfs_array_unref(el->aux);
    cfs_array_unref(el->indptr);
    free(el->index_name);
    free(el->na_value);
    free(el->name);
    free(el);
}

int cfs_elem_add(cfs_elem *parent, cfs_elem *child)
{
    /* A child a reader failed to allocate: refused here, so no caller appends a NULL child. */
    if (!child)
        return -1;
    cfs_elem **grown = realloc(parent->children, (parent->nchildren + 1) * sizeof *grown);
    if (!grown)
        return -1;
    parent->children = grown;
    parent->children[parent->nchildren++] = child;
    return 0;
}

int cfs_elem_add_or_free(cfs_elem *parent, cfs_elem *child, cfs_err *err)
{
    if (cfs_elem_add(parent, child) == 0)
        return 0;
    cfs_elem_free(child);
    return cfs_err_oom(err);
}

cfs_elem *cfs_elem_from_array(cfs_elem_kind kind, const char *name, cfs_array *arr)
{
    cfs_elem *el = arr ? cfs_elem_new(kind, name) : NULL;
    if (el)
        el->values = arr;
    else
        cfs_array_unref(arr);
    return el;
}

cfs_elem *cfs_elem_child(const cfs_elem *parent, const char *name)
{
    for (size_t i = 0; i < parent->nchildren; i++)
        if (parent->children[i]->name && strcmp(parent->children[i]->name, name) == 0)
            return parent->children[i];
    return NULL;
}

int cfs_elem_remove(cfs_elem *parent, const char *name)
{
    for (size_t i = 0; i < parent->nchildren; i++) {
        if (parent->children[i]->name && strcmp(parent->children[i]->name, name) == 0) {
            cfs_elem_free(parent->children[i]);
            memmove(&parent->children[i], &parent->children[i + 1],
                    (parent->nchildren - i - 1) * sizeof *parent->children);
            parent->nchildren--;
            return 0;
        }
    }
    return -1;
}

cfs_elem *cfs_elem_ensure_dict(cfs_elem *parent, const char *name)
{
    if (!parent)
        return NULL;
    cfs_elem *el = cfs_elem_child(parent, name);
    if (el && el->kind == CFS_EL_DICT)
        return el;
    if (el)
        cfs_elem_remove(parent, name);
    el = cfs_elem_new(CFS_EL_DICT, name);
    if (el && cfs_elem_add(parent, el) < 0) {
        cfs_elem_free(el);
        el = NULL;
    }
    return el;
}

const char *cfs_elem_kind_name(cfs_elem_kind kind)
{
    switch (kind) {
    case CFS_EL_ANNDATA: return "anndata";
    case CFS_EL_RAW: return "raw";
    case CFS_EL_DICT: return "dict";
    case CFS_EL_DATAFRAME: return "dataframe";
    case CFS_EL_ARRAY: return "array";
    case CFS_EL_SCALAR: return "scalar";
    case CFS_EL_SPARSE: return "sparse";
    case CFS_EL_CATEGORICAL: return "categorical";
    case CFS_EL_NULLABLE_INT: return "nullable-integer";
    case CFS_EL_NULLABLE_BOOL: return "nullable-boolean";
    case CFS_EL_NULLABLE_STRING: return "nullable-string-array";
    case CFS_EL_RECARRAY: return "rec-array";
    case CFS_EL_NULL: return "null";
    }
    return "?";
}

cfs_dataset *cfs_dataset_new(const char *source)
{
    cfs_dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        return NULL;
    if (!(ds->source = strdup(source))) {
        free(ds);
        return NULL;
    }
    return ds;
}

void cfs_dataset_free(cfs_dataset *ds)
{
    if (!ds)
        return;
    cfs_elem_free(ds->root);
    for (size_t i = 0; i < ds->nmods; i++) {
        cfs_elem_free(ds->mods[i].root);
        cfs_array_unref(ds->mods[i].obsmap);
        cfs_array_unref(ds->mods[i].varmap);
    }
    for (size_t i = 0; i < ds->nmods; i++) {
        if (ds->mods[i].reader_free)
            ds->mods[i].reader_free(ds->mods[i].reader);
        free(ds->mods[i].name);
    }
    free(ds->mods);
    for (size_t i = 0; i < ds->nleftout; i++) {
        free(ds->leftout[i].element);
        free(ds->leftout[i].reason);
    }
    free(ds->leftout);
    for (size_t i = 0; i < ds->nparts; i++) {
        free(ds->parts[i].name);
        free(ds->parts[i].what);
        free(ds->parts[i].why_not);
    }
    free(ds->parts);
    if (ds->reader_free)
        ds->reader_free(ds->reader);
    free(ds->format_version);
    free(ds->format);
    free(ds->no_embedding_hint);
    free(ds->source);
    free(ds);
}

int cfs_dataset_leave_out(cfs_dataset *ds, const char *element, const char *fmt, ...)
{
    char reason[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    cfs_leftout *grown = realloc(ds->leftout, (ds->nleftout + 1) * sizeof *grown);
    if (!grown)
        return -1;
    ds->leftout = grown;
    cfs_leftout *lo = &ds->leftout[ds->nleftout];
    lo->element = strdup(element);
    lo->reason = strdup(reason);
    if (!lo->element || !lo->reason) {
        free(lo->element);
        free(lo->reason);
        return -1;
    }
    ds->nleftout++;
    return 0;
}

int cfs_dataset_add_part(cfs_dataset *ds, const char *name, const char *what,
                         const char *why_not)
{
    cfs_part *grown = realloc(ds->parts, (ds->nparts + 1) * sizeof *grown);
    if (!grown)
        return -1;
    ds->parts = grown;
    cfs_part *p = &ds->parts[ds->nparts];
    *p = (cfs_part){strdup(name), strdup(what), why_not ? strdup(why_not) : NULL};
    if (!p->name || !p->what || (why_not && !p->why_not)) {
        free(p->name);
        free(p->what);
        free(p->why_not);
        return -1;
    }
    ds->nparts++;
    return 0;
}

size_t cfs_dataset_part_datasets(const cfs_dataset *ds)
{
    size_t n = 0;
    for (size_t i = 0; i < ds->nparts; i++)
        n += ds->parts[i].why_not == NULL;
    return n;
}

cfs_modality *cfs_dataset_modality(const cfs_dataset *ds, const char *name)
{
    for (size_t i = 0; i < ds->nmods; i++)
        if (strcmp(ds->mods[i].name, name) == 0)
            return &ds->mods[i];
    return NULL;
}

cfs_modality *cfs_dataset_add_modality(cfs_dataset *ds, const char *name, cfs_dataset *sub,
                                       cfs_err *err)
{
    cfs_modality *grown = realloc(ds->mods, (ds->nmods + 1) * sizeof *grown);
    char *copy = grown ? strdup(name) : NULL;
    if (grown)
        ds->mods = grown;
    for (size_t i = 0; copy && i < sub->nleftout; i++) {
        char *element = cfs_strdupf("mod/%s/%s", name, sub->leftout[i].element);
        if (!element || cfs_dataset_leave_out(ds, element, "%s", sub->leftout[i].reason) < 0) {
            free(copy);
            copy = NULL;
        }
        free(element);
    }
    if (!copy) {
        cfs_dataset_free(sub);
        cfs_err_oom(err);
        return NULL;
    }
    cfs_modality *m = &ds->mods[ds->nmods++];
    *m = (cfs_modality){.name = copy, .root = sub->root, .n_obs = sub->n_obs,
                        .n_vars = sub->n_vars, .reader = sub->reader,
                        .reader_free = sub->reader_free};
    sub->root = NULL;
    sub->reader_free = NULL;
    cfs_dataset_free(sub);
    return m;
}
