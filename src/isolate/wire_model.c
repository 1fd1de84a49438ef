#include "wire_model.h"

#include <stdlib.h>
#include <string.h>

#include "embedding.h"
#include "strfmt.h"
#include "wire.h"

#define MAX_NAME (UINT32_C(1) << 16)
#define MAX_TEXT (UINT32_C(1) << 20)
#define MAX_DEPTH 64
#define MAX_ARRAYS (UINT32_C(1) << 24)
#define MAX_FIELDS 4096
#define MAX_RECORD (UINT64_C(1) << 24)

enum { HAS_VALUES = 1, HAS_AUX = 2, HAS_INDPTR = 4, HAS_INDEX = 8, HAS_CATEGORIES = 16 };

void cfs_wire_arrays_free(cfs_wire_arrays *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->path[i]);
    free(t->arr);
    free(t->path);
    memset(t, 0, sizeof *t);
}

/* The path of a member of the element at path: "obs" + "cell_type" = "obs/cell_type". */
static char *member_path(const char *path, const char *name)
{
    return *path ? cfs_strdupf("%s/%s", path, name ? name : "?") : strdup(name ? name : "?");
}

static const char *values_name(const cfs_elem *el)
{
    return el->kind == CFS_EL_SPARSE ? "data" : el->kind == CFS_EL_CATEGORICAL ? "codes" : NULL;
}

static const char *aux_name(const cfs_elem *el)
{
    return el->kind == CFS_EL_SPARSE ? "indices" : "mask";
}

/* ---- encoding (the worker) ---------------------------------------------------------------- */

static int table_add(cfs_wire_arrays *t, cfs_array *arr, char *path)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        cfs_array **a = realloc(t->arr, cap * sizeof *a);
        if (a)
            t->arr = a;
        char **p = a ? realloc(t->path, cap * sizeof *p) : NULL;
        if (!p)
            return -1;
        t->path = p;
        t->cap = cap;
    }
    t->arr[t->n] = arr;
    t->path[t->n++] = path;
    return 0;
}

static int encode_array(cfs_buf *b, cfs_array *arr, const char *path, const char *member,
                        cfs_wire_arrays *t)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->arr[i] == arr)
            return cfs_wire_put_u32(b, (uint32_t)i);
    char *own = member ? member_path(path, member) : strdup(path);
    if (!own || table_add(t, arr, own) < 0) {
        free(own);
        return -1;
    }
    int rc = cfs_wire_put_u32(b, (uint32_t)(t->n - 1)) | cfs_wire_put_u8(b, (uint8_t)arr->dtype) |
             cfs_wire_put_u8(b, (uint8_t)arr->ndim);
    for (int d = 0; d < arr->ndim; d++)
        rc |= cfs_wire_put_u64(b, arr->shape[d]) | cfs_wire_put_u64(b, arr->chunk_hint[d]);
    rc |= cfs_wire_put_u64(b, arr->record_size) | cfs_wire_put_u32(b, (uint32_t)arr->nfields);
    for (size_t f = 0; f < arr->nfields; f++)
        rc |= cfs_wire_put_str(b, arr->fields[f].name) |
              cfs_wire_put_u8(b, (uint8_t)arr->fields[f].dtype) |
              cfs_wire_put_u64(b, arr->fields[f].offset) | cfs_wire_put_u64(b, arr->fields[f].size);
    return rc;
}

static int encode_elem(cfs_buf *b, const cfs_elem *el, const char *path, cfs_wire_arrays *t)
{
    uint8_t has = (el->values ? HAS_VALUES : 0) | (el->aux ? HAS_AUX : 0) |
                  (el->indptr ? HAS_INDPTR : 0) | (el->index ? HAS_INDEX : 0) |
                  (el->categories ? HAS_CATEGORIES : 0);
    int rc = cfs_wire_put_u8(b, (uint8_t)el->kind) | cfs_wire_put_str(b, el->name) |
             cfs_wire_put_u8(b, (uint8_t)(el->ordered | el->csr << 1)) |
             cfs_wire_put_u64(b, el->sparse_shape[0]) | cfs_wire_put_u64(b, el->sparse_shape[1]) |
             cfs_wire_put_str(b, el->na_value) | cfs_wire_put_str(b, el->index_name) |
             cfs_wire_put_u8(b, has);
    if (rc == 0 && el->values)
        rc = encode_array(b, el->values, path, values_name(el), t);
    if (rc == 0 && el->aux)
        rc = encode_array(b, el->aux, path, aux_name(el), t);
    if (rc == 0 && el->indptr)
        rc = encode_array(b, el->indptr, path, "indptr", t);
    rc |= cfs_wire_put_u32(b, (uint32_t)el->nchildren);
    for (size_t i = 0; rc == 0 && i < el->nchildren; i++) {
        char *sub = member_path(path, el->children[i]->name);
        rc = sub ? encode_elem(b, el->children[i], sub, t) : -1;
        free(sub);
    }
    const cfs_elem *parts[2] = {el->index, el->categories};
    const char *names[2] = {"_index", "categories"};
    for (int k = 0; k < 2 && rc == 0; k++) {
        if (!parts[k])
            continue;
        char *sub = member_path(path, names[k]);
        rc = sub ? encode_elem(b, parts[k], sub, t) : -1;
        free(sub);
    }
    return rc;
}

/* A modality: its name and sizes, its root at mod/<name>, its maps. */
static int encode_modality(cfs_buf *b, const cfs_modality *m, cfs_wire_arrays *t)
{
    char *path = cfs_strdupf("mod/%s", m->name);
    char *obsmap = cfs_strdupf("obsmap/%s", m->name), *varmap = cfs_strdupf("varmap/%s", m->name);
    int rc = path && obsmap && varmap && m->obsmap && m->varmap ? 0 : -1;
    if (rc == 0)
        rc = cfs_wire_put_str(b, m->name) | cfs_wire_put_u64(b, m->n_obs) |
             cfs_wire_put_u64(b, m->n_vars);
    if (rc == 0)
        rc = encode_elem(b, m->root, path, t);
    if (rc == 0)
        rc = encode_array(b, m->obsmap, obsmap, NULL, t);
    if (rc == 0)
        rc = encode_array(b, m->varmap, varmap, NULL, t);
    free(path);
    free(obsmap);
    free(varmap);
    return rc;
}

/* True if arr's values may travel with the model: numeric, 1 or 2 dimensions, at most
 * CFS_WIRE_INLINE_BYTES (*nbytes). */
static bool small_numeric(const cfs_array *arr, uint64_t *nbytes)
{
    if (arr->ndim < 1 || arr->ndim > 2 || arr->dtype == CFS_STRING || arr->dtype == CFS_COMPOUND)
        return false;
    uint64_t n = cfs_dtype_size(arr->dtype);
    for (int d = 0; d < arr->ndim; d++)
        n = arr->shape[d] && n > CFS_WIRE_INLINE_BYTES / arr->shape[d] ? UINT64_MAX
                                                                        : n * arr->shape[d];
    *nbytes = n;
    return n > 0 && n <= CFS_WIRE_INLINE_BYTES;
}

/* The id of arr in t, or t->n. */
static size_t array_id(const cfs_wire_arrays *t, const cfs_array *arr)
{
    size_t i = 0;
    while (i < t->n && t->arr[i] != arr)
        i++;
    return i;
}

/* Appends arr's values under its id; false if they cannot be read now (a read reports why). */
static bool put_values(cfs_buf *b, uint32_t id, const cfs_array *arr, uint64_t nbytes, int *rc)
{
    size_t before = b->len;
    uint64_t origin[2] = {0, 0};
    cfs_err ignored;
    if (cfs_wire_put_u32(b, id) < 0 || cfs_buf_reserve(b, (size_t)nbytes) < 0) {
        *rc = -1;
        return false;
    }
    if (cfs_array_read(arr, origin, arr->shape, b->data + b->len, &ignored) < 0) {
        b->len = before;
        return false;
    }
    b->len += (size_t)nbytes;
    return true;
}

/*
 * u32 count, then per array u32 id and its values: the obsm entries the catalog's embedding
 * check will read whole (cfs_embedding_first), so that naming needs no second round trip.
 * They are the check's candidates up to the first drawable one, which the worker can tell
 * here: drawability does not depend on the cells' order. The walk stops at an entry too
 * large to send; the daemon reads that one itself, and whether it reads on depends on it.
 */
static int encode_inline(cfs_buf *b, const cfs_dataset *ds, const cfs_wire_arrays *t)
{
    size_t at = b->len;
    uint32_t count = 0;
    uint64_t total = 0, nbytes = 0;
    if (cfs_wire_put_u32(b, 0) < 0)
        return -1;
    const cfs_elem *obsm = cfs_elem_child(ds->root, "obsm"), *el;
    char why[256];
    int rc = 0;
    for (size_t k = 0; obsm && (el = cfs_embedding_candidate(obsm, k)); k++) {
        if (!cfs_embedding_shape_fits(el, ds->n_obs, why, sizeof why))
            continue;                           /* the check turns it down unread */
        const cfs_array *arr = el->values;
        size_t id = array_id(t, arr);
        if (id == t->n || !small_numeric(arr, &nbytes) || total + nbytes > CFS_WIRE_INLINE_BYTES)
            break;
        if (!put_values(b, (uint32_t)id, arr, nbytes, &rc))
            break;
        total += nbytes;
        count++;
        if (cfs_embedding_values_drawable(arr, b->data + b->len - nbytes, why, sizeof why))
            break;
    }
    for (int k = 0; k < 4; k++)
        b->data[at + k] = (unsigned char)(count >> (8 * k));
    return rc;
}

int cfs_wire_model_encode(const cfs_dataset *ds, cfs_buf *out, cfs_wire_arrays *t, cfs_err *err)
{
    int rc = cfs_wire_put_str(out, ds->format) | cfs_wire_put_str(out, ds->format_version) |
             cfs_wire_put_u64(out, ds->n_obs) | cfs_wire_put_u64(out, ds->n_vars) |
             cfs_wire_put_str(out, ds->no_embedding_hint) |
             cfs_wire_put_u32(out, (uint32_t)ds->nleftout);
    for (size_t i = 0; i < ds->nleftout; i++)
        rc |= cfs_wire_put_str(out, ds->leftout[i].element) |
              cfs_wire_put_str(out, ds->leftout[i].reason);
    if (rc == 0)
        rc = encode_elem(out, ds->root, "", t);
    rc |= cfs_wire_put_u32(out, (uint32_t)ds->nmods);
    for (size_t k = 0; rc == 0 && k < ds->nmods; k++)
        rc = encode_modality(out, &ds->mods[k], t);
    rc |= cfs_wire_put_u32(out, (uint32_t)ds->nparts);
    for (size_t k = 0; k < ds->nparts; k++)
        rc |= cfs_wire_put_str(out, ds->parts[k].name) | cfs_wire_put_str(out, ds->parts[k].what) |
              cfs_wire_put_str(out, ds->parts[k].why_not);
    rc |= cfs_wire_put_u32(out, (uint32_t)ds->part);
    if (rc == 0)
        rc = encode_inline(out, ds, t);
    return rc < 0 ? cfs_err_oom(err) : 0;
}

/* ---- decoding (the daemon) ---------------------------------------------------------------- */

typedef struct decoder {
    cfs_wire_cursor c;
    const cfs_wire_proxy *proxy;
    cfs_array **arrays;
    uint32_t n, cap;
    const char *why;            /* what was wrong, when the cursor went bad on purpose */
    bool oom;
} decoder;

static bool fail(decoder *d, const char *why)
{
    if (!d->c.bad && !d->why)
        d->why = why;
    d->c.bad = true;
    return false;
}

static bool read_fields(decoder *d, cfs_array *arr, uint32_t nfields)
{
    if (!(arr->fields = calloc(nfields, sizeof *arr->fields)))
        return d->oom = true, fail(d, "out of memory");
    for (uint32_t f = 0; f < nfields && !d->c.bad; f++) {
        cfs_field *fl = &arr->fields[f];
        arr->nfields = f + 1;
        fl->name = cfs_wire_get_str(&d->c, MAX_NAME);
        uint8_t dt = cfs_wire_get_u8(&d->c);
        fl->offset = (size_t)cfs_wire_get_u64(&d->c);
        fl->size = (size_t)cfs_wire_get_u64(&d->c);
        if (d->c.bad)
            return false;
        fl->dtype = (cfs_dtype)dt;
        if (dt > CFS_STRING || fl->size > arr->record_size ||
            fl->offset > arr->record_size - fl->size ||
            (dt != CFS_STRING && fl->size != cfs_dtype_size(fl->dtype)))
            return fail(d, "a record field outside its record");
    }
    return !d->c.bad;
}

static bool shape_fits(const cfs_array *arr)
{
    uint64_t n = 1;
    for (int k = 0; k < arr->ndim; k++) {
        if (arr->shape[k] && n > UINT64_MAX / arr->shape[k])
            return false;
        n *= arr->shape[k];
    }
    return true;
}

static cfs_array *new_array(decoder *d, const char *path)
{
    uint8_t dt = cfs_wire_get_u8(&d->c), ndim = cfs_wire_get_u8(&d->c);
    if (d->c.bad || dt > CFS_COMPOUND || ndim > CFS_MAX_DIMS)
        return fail(d, "an array of unknown dtype or too many dimensions"), NULL;
    uint64_t shape[CFS_MAX_DIMS] = {0}, hint[CFS_MAX_DIMS] = {0};
    for (int k = 0; k < ndim; k++) {
        shape[k] = cfs_wire_get_u64(&d->c);
        hint[k] = cfs_wire_get_u64(&d->c);
    }
    uint64_t record_size = cfs_wire_get_u64(&d->c);
    uint32_t nfields = cfs_wire_get_u32(&d->c);
    bool compound = dt == CFS_COMPOUND;
    if (d->c.bad || (compound ? nfields == 0 || nfields > MAX_FIELDS || record_size == 0 ||
                                    record_size > MAX_RECORD
                              : nfields != 0))
        return fail(d, "a record array without valid fields"), NULL;
    void *ctx = d->proxy->make_ctx(d->proxy->maker, d->n, path);
    cfs_array *arr = ctx ? cfs_array_new((cfs_dtype)dt, ndim, shape, d->proxy->ops, ctx) : NULL;
    if (!arr) {
        if (ctx && d->proxy->ops->free_ctx)
            d->proxy->ops->free_ctx(ctx);
        return d->oom = true, fail(d, "out of memory"), NULL;
    }
    memcpy(arr->chunk_hint, hint, sizeof hint);
    arr->record_size = compound ? (size_t)record_size : 0;
    if ((compound && !read_fields(d, arr, nfields)) || !shape_fits(arr)) {
        fail(d, "an array whose shape overflows");
        cfs_array_unref(arr);
        return NULL;
    }
    return arr;
}

/* An array reference: one met before (a new reference to it) or the next id, described. */
static cfs_array *read_array(decoder *d, const char *path, const char *member)
{
    uint32_t id = cfs_wire_get_u32(&d->c);
    if (d->c.bad || id > d->n)
        return fail(d, "an array id out of order"), NULL;
    if (id < d->n)
        return cfs_array_ref(d->arrays[id]);
    if (d->n == MAX_ARRAYS)
        return fail(d, "too many arrays"), NULL;
    if (d->n == d->cap) {
        uint32_t cap = d->cap ? d->cap * 2 : 64;
        cfs_array **grown = realloc(d->arrays, cap * sizeof *grown);
        if (!grown)
            return d->oom = true, fail(d, "out of memory"), NULL;
        d->arrays = grown;
        d->cap = cap;
    }
    char *own = member ? member_path(path, member) : strdup(path);
    cfs_array *arr = own ? new_array(d, own) : (d->oom = true, fail(d, "out of memory"), NULL);
    free(own);
    if (arr)
        d->arrays[d->n++] = arr;
    return arr ? cfs_array_ref(arr) : NULL;
}

/* The members a consumer of each kind relies on. */
static bool complete(const cfs_elem *el)
{
    switch (el->kind) {
    case CFS_EL_ARRAY:
    case CFS_EL_SCALAR:
    case CFS_EL_RECARRAY:
        return el->values && (el->kind != CFS_EL_RECARRAY || el->values->dtype == CFS_COMPOUND);
    case CFS_EL_SPARSE:
        return el->values && el->aux && el->indptr;
    case CFS_EL_CATEGORICAL:
        return el->values && el->categories && el->categories->values;
    case CFS_EL_NULLABLE_INT:
    case CFS_EL_NULLABLE_BOOL:
    case CFS_EL_NULLABLE_STRING:
        return el->values && el->aux;
    case CFS_EL_DATAFRAME:
        return !el->index || el->index->values;
    default:
        return true;
    }
}

static cfs_elem *read_elem(decoder *d, const char *parent, const char *member, int depth);

static bool read_children(decoder *d, cfs_elem *el, const char *path, int depth)
{
    uint32_t n = cfs_wire_get_u32(&d->c);
    if (d->c.bad || n > d->c.left)
        return fail(d, "more children than bytes");
    for (uint32_t i = 0; i < n && !d->c.bad; i++) {
        cfs_elem *child = read_elem(d, path, NULL, depth + 1);
        if (child && cfs_elem_add(el, child) < 0) {
            cfs_elem_free(child);
            d->oom = true;
            fail(d, "out of memory");
        }
    }
    return !d->c.bad;
}

/* An element below parent, its path made of member (index, categories) or else its name. */
static cfs_elem *read_elem(decoder *d, const char *parent, const char *member, int depth)
{
    if (depth > MAX_DEPTH)
        return fail(d, "elements nested too deep"), NULL;
    uint8_t kind = cfs_wire_get_u8(&d->c);
    char *name = NULL;
    cfs_wire_get_optstr(&d->c, MAX_NAME, &name);
    if (d->c.bad || kind > CFS_EL_NULL) {
        free(name);
        return fail(d, "an element of unknown kind"), NULL;
    }
    cfs_elem *el = cfs_elem_new((cfs_elem_kind)kind, NULL);
    char *path = !el ? NULL : depth == 0 ? strdup("") : member_path(parent, member ? member : name);
    if (!path) {
        free(name);
        cfs_elem_free(el);
        return d->oom = true, fail(d, "out of memory"), NULL;
    }
    el->name = name;
    uint8_t flags = cfs_wire_get_u8(&d->c);
    el->ordered = flags & 1;
    el->csr = (flags >> 1) & 1;
    el->sparse_shape[0] = cfs_wire_get_u64(&d->c);
    el->sparse_shape[1] = cfs_wire_get_u64(&d->c);
    cfs_wire_get_optstr(&d->c, MAX_NAME, &el->na_value);
    cfs_wire_get_optstr(&d->c, MAX_NAME, &el->index_name);
    uint8_t has = cfs_wire_get_u8(&d->c);
    if (!d->c.bad && (has & HAS_VALUES))
        el->values = read_array(d, path, values_name(el));
    if (!d->c.bad && (has & HAS_AUX))
        el->aux = read_array(d, path, aux_name(el));
    if (!d->c.bad && (has & HAS_INDPTR))
        el->indptr = read_array(d, path, "indptr");
    if (!d->c.bad)
        read_children(d, el, path, depth);
    if (!d->c.bad && (has & HAS_INDEX))
        el->index = read_elem(d, path, "_index", depth + 1);
    if (!d->c.bad && (has & HAS_CATEGORIES))
        el->categories = read_elem(d, path, "categories", depth + 1);
    if (!d->c.bad && !complete(el))
        fail(d, "an element without the arrays its kind needs");
    free(path);
    if (d->c.bad) {
        cfs_elem_free(el);
        return NULL;
    }
    return el;
}

static bool read_leftout(decoder *d, cfs_dataset *ds)
{
    uint32_t n = cfs_wire_get_u32(&d->c);
    if (d->c.bad || n > d->c.left / 8)
        return fail(d, "more left-out elements than bytes");
    for (uint32_t i = 0; i < n && !d->c.bad; i++) {
        char *element = cfs_wire_get_str(&d->c, MAX_TEXT);
        char *reason = cfs_wire_get_str(&d->c, MAX_TEXT);
        if (element && reason && cfs_dataset_leave_out(ds, element, "%s", reason) < 0) {
            d->oom = true;
            fail(d, "out of memory");
        }
        free(element);
        free(reason);
    }
    return !d->c.bad;
}

/* The input's parts, after the modalities, and which one this dataset is. */
static bool read_parts(decoder *d, cfs_dataset *ds)
{
    uint32_t n = cfs_wire_get_u32(&d->c);
    if (d->c.bad || n > d->c.left / 12)
        return fail(d, "more parts than bytes");
    for (uint32_t i = 0; i < n && !d->c.bad; i++) {
        char *name = cfs_wire_get_str(&d->c, MAX_NAME);
        char *what = name ? cfs_wire_get_str(&d->c, MAX_TEXT) : NULL;
        char *why_not = NULL;
        if (what && cfs_wire_get_optstr(&d->c, MAX_TEXT, &why_not) &&
            cfs_dataset_add_part(ds, name, what, why_not) < 0) {
            d->oom = true;
            fail(d, "out of memory");
        }
        free(name);
        free(what);
        free(why_not);
    }
    ds->part = cfs_wire_get_u32(&d->c);
    if (!d->c.bad && (n ? ds->part >= n || ds->parts[ds->part].why_not : ds->part != 0))
        fail(d, "a dataset that is not one of the input's parts");
    return !d->c.bad;
}

/* A map: one UINT32 per global cell or feature (n). */
static cfs_array *read_map(decoder *d, const char *what, const char *name, uint64_t n)
{
    char *path = cfs_strdupf("%s/%s", what, name);
    cfs_array *a = path ? read_array(d, path, NULL) : (d->oom = true, fail(d, "out of memory"), NULL);
    free(path);
    if (a && (a->dtype != CFS_UINT32 || a->ndim != 1 || a->shape[0] != n)) {
        cfs_array_unref(a);
        return fail(d, "a modality map that is not one row number per global entry"), NULL;
    }
    return a;
}

/* The modalities after the root: each a sub-dataset moved into ds, then its maps. */
static bool read_modalities(decoder *d, cfs_dataset *ds)
{
    uint32_t n = cfs_wire_get_u32(&d->c);
    if (d->c.bad || n > d->c.left / 8)
        return fail(d, "more modalities than bytes");
    for (uint32_t k = 0; k < n && !d->c.bad; k++) {
        char *name = cfs_wire_get_str(&d->c, MAX_NAME);
        uint64_t n_obs = cfs_wire_get_u64(&d->c), n_vars = cfs_wire_get_u64(&d->c);
        cfs_dataset *sub = name && !d->c.bad ? cfs_dataset_new(ds->source) : NULL;
        if (name && !d->c.bad && !sub) {
            d->oom = true;
            fail(d, "out of memory");
        }
        if (sub) {
            sub->n_obs = n_obs;
            sub->n_vars = n_vars;
            sub->root = read_elem(d, "mod", name, 1);
        }
        cfs_err ignore = {0};
        cfs_modality *m = NULL;
        if (sub && !d->c.bad && (!sub->root || sub->root->kind != CFS_EL_ANNDATA))
            fail(d, "a modality without a dataset at its root");
        if (sub && !d->c.bad) {
            m = cfs_dataset_add_modality(ds, name, sub, &ignore);
            if (!m) {
                d->oom = true;
                fail(d, "out of memory");
            }
        } else
            cfs_dataset_free(sub);
        if (m) {
            m->obsmap = read_map(d, "obsmap", name, ds->n_obs);
            m->varmap = m->obsmap ? read_map(d, "varmap", name, ds->n_vars) : NULL;
        }
        free(name);
    }
    return !d->c.bad;
}

/* The values sent with the model, given to their arrays' proxies. */
static bool read_inline(decoder *d)
{
    uint32_t n = cfs_wire_get_u32(&d->c);
    for (uint32_t i = 0; i < n && !d->c.bad; i++) {
        uint32_t id = cfs_wire_get_u32(&d->c);
        if (d->c.bad || id >= d->n)
            return fail(d, "values of an array out of order");
        cfs_array *arr = d->arrays[id];
        uint64_t nbytes = 0;
        if (!small_numeric(arr, &nbytes) || nbytes > d->c.left)
            return fail(d, "values of an array that are not sent with the model");
        if (d->proxy->keep_values &&
            d->proxy->keep_values(arr->ctx, d->c.p, (size_t)nbytes) < 0) {
            d->oom = true;
            return fail(d, "out of memory");
        }
        d->c.p += nbytes;
        d->c.left -= nbytes;
    }
    return !d->c.bad;
}

cfs_dataset *cfs_wire_model_decode(const void *bytes, size_t len, const char *source,
                                   const cfs_wire_proxy *proxy, uint32_t *narrays, cfs_err *err)
{
    decoder d = {.c = {bytes, len, false}, .proxy = proxy};
    cfs_dataset *ds = cfs_dataset_new(source);
    if (!ds) {
        cfs_err_oom(err);
        return NULL;
    }
    cfs_wire_get_optstr(&d.c, MAX_NAME, &ds->format);
    cfs_wire_get_optstr(&d.c, MAX_TEXT, &ds->format_version);
    ds->n_obs = cfs_wire_get_u64(&d.c);
    ds->n_vars = cfs_wire_get_u64(&d.c);
    cfs_wire_get_optstr(&d.c, MAX_TEXT, &ds->no_embedding_hint);
    if (!d.c.bad && read_leftout(&d, ds))
        ds->root = read_elem(&d, "", NULL, 0);
    if (!d.c.bad && (ds->root->kind != CFS_EL_ANNDATA || !ds->format))
        fail(&d, "a model without a dataset at its root");
    if (!d.c.bad && read_modalities(&d, ds) && read_parts(&d, ds))
        read_inline(&d);
    if (!d.c.bad && d.c.left)
        fail(&d, "bytes after the model");
    for (uint32_t i = 0; i < d.n; i++)
        cfs_array_unref(d.arrays[i]);       /* the elements hold theirs */
    free(d.arrays);
    *narrays = d.n;
    if (!d.c.bad)
        return ds;
    cfs_dataset_free(ds);
    if (d.oom)
        cfs_err_oom(err);
    else
        cfs_err_setc(err, CFS_EDAMAGED, "the reader sent a malformed model (%s)",
                     d.why ? d.why : "cut short");
    return NULL;
}
