#include "store.h"
#include "path.h"

#include <stdlib.h>
#include <string.h>

#include "chunking.h"
#include "utf8.h"
#include "vlen.h"
#include "zmeta.h"

/* ---- building the node list ---------------------------------------------------------------- */

typedef struct builder {
    cfs_store *st;
    size_t cap;
    cfs_err *err;
} builder;

static cfs_store_node *push_node(builder *b, const char *path, json_t *attrs)
{
    if (!attrs) {
        cfs_err_setc(b->err, CFS_ENOMEM, "out of memory building %s", path);
        return NULL;
    }
    if (b->st->nnodes == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        cfs_store_node *grown = realloc(b->st->nodes, cap * sizeof *grown);
        if (!grown) {
            json_decref(attrs);
            cfs_err_setc(b->err, CFS_ENOMEM, "out of memory building %s", path);
            return NULL;
        }
        b->st->nodes = grown;
        b->cap = cap;
    }
    cfs_store_node *n = &b->st->nodes[b->st->nnodes];
    memset(n, 0, sizeof *n);
    n->attrs = attrs;
    if (!(n->path = strdup(path))) {
        json_decref(attrs);
        cfs_err_setc(b->err, CFS_ENOMEM, "out of memory building %s", path);
        return NULL;
    }
    b->st->nnodes++;
    return n;
}

static int add_group(builder *b, const char *path, json_t *attrs)
{
    return push_node(b, path, attrs) ? 0 : -1;
}

/* Bytes one record takes in Zarr: string fields become UTF-32 (4 bytes a code point). */
static size_t zarr_record_size(const cfs_array *arr)
{
    size_t n = 0;
    for (size_t i = 0; i < arr->nfields; i++)
        n += arr->fields[i].dtype == CFS_STRING ? 4 * arr->fields[i].size : arr->fields[i].size;
    return n;
}

static cfs_store_elem elem_of(const cfs_array *arr)
{
    if (arr->dtype == CFS_STRING)
        return CFS_ELEM_STRING;
    return arr->dtype == CFS_COMPOUND ? CFS_ELEM_RECORDS : CFS_ELEM_NUMERIC;
}

static int add_array(builder *b, const char *path, cfs_array *arr, json_t *attrs)
{
    cfs_store_node *n = push_node(b, path, attrs);
    if (!n)
        return -1;
    n->arr = cfs_array_ref(arr);
    n->is_array = true;
    n->elem = elem_of(arr);
    n->ndim = arr->ndim;
    memcpy(n->shape, arr->shape, sizeof n->shape);
    n->elem_size = n->elem == CFS_ELEM_RECORDS ? zarr_record_size(arr) : cfs_dtype_size(arr->dtype);
    for (size_t i = 0; n->elem == CFS_ELEM_RECORDS && i < arr->nfields; i++)
        if (arr->fields[i].dtype == CFS_COMPOUND)
            return cfs_err_set(b->err, "%s: a record field has a type Zarr cannot hold", path);
    size_t chunk_elem = arr->dtype == CFS_STRING ? CFS_STRING_BYTES_ESTIMATE : n->elem_size;
    if (n->ndim > 0 && arr->chunk_hint[0])
        memcpy(n->chunks, arr->chunk_hint, sizeof n->chunks);
    else
        cfs_chunk_shape(n->ndim, n->shape, chunk_elem, arr->level_rows, n->chunks);
    n->nchunks = cfs_chunk_grid(n->ndim, n->shape, n->chunks, n->grid);
    /* Scalars are stored raw, as zarr-python stores anndata's 0-d arrays. */
    n->codec = n->ndim == 0 ? CFS_CODEC_NONE : b->st->opts.codec;
    return 0;
}

/* Writes UTF-8 text as `width` UTF-32LE code units, zero padded (numpy's <U); invalid bytes
 * become U+FFFD, as the vlen framing replaces them. */
static int utf8_to_utf32(const char *s, size_t width, unsigned char *out)
{
    memset(out, 0, 4 * width);
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), k = 0;
    for (size_t i = 0; i < n; k++) {
        uint32_t cp;
        size_t len = cfs_utf8_decode(p + i, n - i, &cp);
        if (len == 0) {
            cp = 0xfffd;
            len = 1;
        }
        if (k == width)
            return -1;
        out[4 * k] = cp & 0xff;
        out[4 * k + 1] = (cp >> 8) & 0xff;
        out[4 * k + 2] = (cp >> 16) & 0xff;
        out[4 * k + 3] = (cp >> 24) & 0xff;
        i += len;
    }
    return 0;
}

static size_t utf8_codepoints(const char *s)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        n += (*p & 0xc0) != 0x80;
    return n;
}

/* A 0-d string: fixed-width <U as anndata on zarr-python 2 writes it to v2; a 0-d vlen string
 * as anndata >= 0.12 on zarr-python 3 writes it to v3. */
static int add_string_scalar(builder *b, const char *path, cfs_array *arr, json_t *attrs)
{
    if (b->st->opts.format == CFS_ZARR_V3)
        return add_array(b, path, arr, attrs);
    char *value = NULL;
    uint64_t origin[1] = {0}, one[1] = {1};
    if (cfs_array_read(arr, origin, one, &value, b->err) < 0) {
        json_decref(attrs);
        return cfs_err_prefix(b->err, "%s", path);
    }
    /* numpy gives "" the dtype <U1, never <U0. */
    size_t width = utf8_codepoints(value);
    if (width == 0)
        width = 1;
    cfs_store_node *n = push_node(b, path, attrs);
    if (!n) {
        free(value);
        return -1;
    }
    n->is_array = true;
    n->elem = CFS_ELEM_FIXED_STRING;
    n->codec = CFS_CODEC_NONE;
    n->nchunks = 1;
    n->elem_size = 4 * width;
    n->fixed_len = 4 * width;
    n->fixed = malloc(n->fixed_len ? n->fixed_len : 1);
    if (!n->fixed) {
        free(value);
        return cfs_err_setc(b->err, CFS_ENOMEM, "out of memory building %s", path);
    }
    utf8_to_utf32(value, width, n->fixed);
    free(value);
    return 0;
}

static json_t *array_attrs(const cfs_array *arr)
{
    return cfs_encoding_attrs(arr->dtype == CFS_STRING ? "string-array" : "array", "0.2.0");
}

static int render(builder *b, const char *path, const cfs_elem *el);

static int render_child(builder *b, const char *path, const char *name, const cfs_elem *el)
{
    char *p = cfs_path_join(path, name);
    if (!p)
        return cfs_err_oom(b->err);
    int rc = render(b, p, el);
    free(p);
    return rc;
}

static int add_child_array(builder *b, const char *path, const char *name, cfs_array *arr,
                           json_t *attrs)
{
    char *p = cfs_path_join(path, name);
    if (!p) {
        json_decref(attrs);
        return cfs_err_oom(b->err);
    }
    int rc = add_array(b, p, arr, attrs);
    free(p);
    return rc;
}

static int render_mapping(builder *b, const char *path, const cfs_elem *el, const char *type)
{
    if (add_group(b, path, cfs_encoding_attrs(type, "0.1.0")) < 0)
        return -1;
    for (size_t i = 0; i < el->nchildren; i++)
        if (render_child(b, path, el->children[i]->name, el->children[i]) < 0)
            return -1;
    return 0;
}

static int render_dataframe(builder *b, const char *path, const cfs_elem *el)
{
    json_t *attrs = cfs_encoding_attrs("dataframe", "0.2.0");
    json_t *order = json_array();
    for (size_t i = 0; order && i < el->nchildren; i++)
        json_array_append_new(order, json_string(el->children[i]->name));
    const char *index_name = el->index_name ? el->index_name : "_index";
    if (attrs) {
        json_object_set_new(attrs, "_index", json_string(index_name));
        json_object_set_new(attrs, "column-order", order ? order : json_array());
    }
    if (add_group(b, path, attrs) < 0)
        return -1;
    if (el->index && render_child(b, path, index_name, el->index) < 0)
        return -1;
    for (size_t i = 0; i < el->nchildren; i++)
        if (render_child(b, path, el->children[i]->name, el->children[i]) < 0)
            return -1;
    return 0;
}

static int render_sparse(builder *b, const char *path, const cfs_elem *el)
{
    json_t *attrs = cfs_encoding_attrs(el->csr ? "csr_matrix" : "csc_matrix", "0.1.0");
    if (attrs)
        json_object_set_new(attrs, "shape", cfs_json_u64_array(2, el->sparse_shape));
    if (add_group(b, path, attrs) < 0)
        return -1;
    if (add_child_array(b, path, "data", el->values, json_object()) < 0 ||
        add_child_array(b, path, "indices", el->aux, json_object()) < 0 ||
        add_child_array(b, path, "indptr", el->indptr, json_object()) < 0)
        return -1;
    return 0;
}

static int render_categorical(builder *b, const char *path, const cfs_elem *el)
{
    json_t *attrs = cfs_encoding_attrs("categorical", "0.2.0");
    if (attrs)
        json_object_set_new(attrs, "ordered", json_boolean(el->ordered));
    if (add_group(b, path, attrs) < 0)
        return -1;
    if (add_child_array(b, path, "codes", el->values, array_attrs(el->values)) < 0)
        return -1;
    return render_child(b, path, "categories", el->categories);
}

static int render_nullable(builder *b, const char *path, const cfs_elem *el, const char *type)
{
    json_t *attrs = cfs_encoding_attrs(type, "0.1.0");
    if (attrs && el->na_value)
        json_object_set_new(attrs, "na-value", json_string(el->na_value));
    if (add_group(b, path, attrs) < 0)
        return -1;
    if (add_child_array(b, path, "values", el->values, array_attrs(el->values)) < 0 ||
        add_child_array(b, path, "mask", el->aux, array_attrs(el->aux)) < 0)
        return -1;
    return 0;
}

static int render_null(builder *b, const char *path)
{
    /* anndata >= 0.12 writes None as a 0-d bool array tagged `null`. */
    bool *value = calloc(1, sizeof *value);
    cfs_array *arr = value ? cfs_array_from_memory(CFS_BOOL, 0, NULL, value) : NULL;
    if (!arr) {
        free(value);
        return cfs_err_oom(b->err);
    }
    int rc = add_array(b, path, arr, cfs_encoding_attrs("null", "0.1.0"));
    cfs_array_unref(arr);
    return rc;
}

static int render(builder *b, const char *path, const cfs_elem *el)
{
    switch (el->kind) {
    case CFS_EL_ANNDATA: return render_mapping(b, path, el, "anndata");
    case CFS_EL_RAW: return render_mapping(b, path, el, "raw");
    case CFS_EL_DICT: return render_mapping(b, path, el, "dict");
    case CFS_EL_DATAFRAME: return render_dataframe(b, path, el);
    case CFS_EL_ARRAY: return add_array(b, path, el->values, array_attrs(el->values));
    case CFS_EL_SCALAR:
        if (el->values->dtype == CFS_STRING)
            return add_string_scalar(b, path, el->values, cfs_encoding_attrs("string", "0.2.0"));
        return add_array(b, path, el->values, cfs_encoding_attrs("numeric-scalar", "0.2.0"));
    case CFS_EL_SPARSE: return render_sparse(b, path, el);
    case CFS_EL_CATEGORICAL: return render_categorical(b, path, el);
    case CFS_EL_NULLABLE_INT: return render_nullable(b, path, el, "nullable-integer");
    case CFS_EL_NULLABLE_BOOL: return render_nullable(b, path, el, "nullable-boolean");
    case CFS_EL_NULLABLE_STRING: return render_nullable(b, path, el, "nullable-string-array");
    case CFS_EL_RECARRAY: return add_array(b, path, el->values, cfs_encoding_attrs("rec-array", "0.2.0"));
    case CFS_EL_NULL: return render_null(b, path);
    }
    return cfs_err_set(b->err, "%s: unknown element kind", path);
}

/* obsmap/ or varmap/: a dict of one uint32 array per modality, as anndata writes mudata's. */
static int render_maps(builder *b, const cfs_dataset *ds, const char *key)
{
    if (add_group(b, key, cfs_encoding_attrs("dict", "0.1.0")) < 0)
        return -1;
    for (size_t i = 0; i < ds->nmods; i++) {
        const cfs_modality *m = &ds->mods[i];
        cfs_array *map = key[0] == 'o' ? m->obsmap : m->varmap;
        if (add_child_array(b, key, m->name, map, array_attrs(map)) < 0)
            return -1;
    }
    return 0;
}

/*
 * A dataset of several modalities as a MuData store, in mudata's own layout: the root tagged
 * MuData, the global elements, mod/<name> each an AnnData group (mod/'s mod-order keeps the
 * modalities' order), obsmap/ and varmap/.
 */
static int render_multimodal(builder *b, const cfs_dataset *ds)
{
    json_t *attrs = cfs_encoding_attrs("MuData", "0.1.0");
    json_t *order = json_array();
    if (attrs)
        json_object_set_new(attrs, "axis", json_integer(0));
    for (size_t i = 0; order && i < ds->nmods; i++)
        json_array_append_new(order, json_string(ds->mods[i].name));
    json_t *mod_attrs = order ? json_pack("{s:o}", "mod-order", order) : NULL;
    if (add_group(b, "", attrs) < 0) {
        json_decref(mod_attrs);
        return -1;
    }
    for (size_t i = 0; i < ds->root->nchildren; i++)
        if (render_child(b, "", ds->root->children[i]->name, ds->root->children[i]) < 0) {
            json_decref(mod_attrs);
            return -1;
        }
    if (add_group(b, "mod", mod_attrs) < 0)
        return -1;
    for (size_t i = 0; i < ds->nmods; i++)
        if (render_child(b, "mod", ds->mods[i].name, ds->mods[i].root) < 0)
            return -1;
    return render_maps(b, ds, "obsmap") < 0 ? -1 : render_maps(b, ds, "varmap");
}

cfs_store *cfs_store_new(const cfs_dataset *ds, const cfs_store_opts *opts, cfs_err *err)
{
    cfs_store *st = calloc(1, sizeof *st);
    if (!st) {
        cfs_err_oom(err);
        return NULL;
    }
    st->opts = *opts;
    builder b = {st, 0, err};
    if ((ds->nmods ? render_multimodal(&b, ds) : render(&b, "", ds->root)) < 0) {
        cfs_store_free(st);
        return NULL;
    }
    return st;
}

void cfs_store_drop_docs(cfs_store *st)
{
    for (size_t i = 0; i < st->nnodes; i++) {
        json_decref(st->nodes[i].attrs);
        st->nodes[i].attrs = NULL;
    }
}

void cfs_store_free(cfs_store *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->nnodes; i++) {
        cfs_store_node *n = &st->nodes[i];
        free(n->path);
        json_decref(n->attrs);
        cfs_array_unref(n->arr);
        free(n->fixed);
    }
    free(st->nodes);
    free(st);
}

/* ---- the tree and a first view's order ------------------------------------------------- */

size_t cfs_store_parent(const cfs_store *st, size_t node)
{
    const char *path = st->nodes[node].path;
    const char *slash = strrchr(path, '/');
    size_t plen = slash ? (size_t)(slash - path) : 0;
    if (!path[0])
        return node;
    /* Nodes come parents first: the nearest earlier node with the prefix is the parent. */
    for (size_t k = node; k-- > 0;)
        if (strlen(st->nodes[k].path) == plen && strncmp(st->nodes[k].path, path, plen) == 0)
            return k;
    return 0;
}

/* Where a node comes in a first view: a viewer shows cells (obs) on an embedding (obsm), then
 * names genes (var); a MuData modality's elements count as the dataset's own. */
static int view_rank(const char *path)
{
    if (strncmp(path, "mod/", 4) == 0) {
        const char *rest = strchr(path + 4, '/');
        path = rest ? rest + 1 : "";
    }
    static const char *const first[] = {"obs", "obsm", "var", "uns"};
    for (int r = 0; r < 4; r++) {
        size_t n = strlen(first[r]);
        if (strncmp(path, first[r], n) == 0 && (path[n] == '/' || path[n] == '\0'))
            return r;
    }
    return 4;
}

void cfs_store_view_order(const cfs_store *st, size_t *order)
{
    size_t k = 0;
    for (int rank = 0; rank <= 4; rank++)
        for (size_t i = 0; i < st->nnodes; i++)
            if (view_rank(st->nodes[i].path) == rank)
                order[k++] = i;
}

/* ---- chunks ------------------------------------------------------------------------------ */

/*
 * Copies a hyperslab of `count` elements (C order, packed) into the full chunk buffer whose
 * shape is `chunks`, at the chunk's origin: edge chunks keep the fill value beyond the array.
 */
static void scatter(unsigned char *dst, const uint64_t *chunks, const unsigned char *src,
                    const uint64_t *count, int ndim, size_t esize)
{
    uint64_t idx[CFS_MAX_DIMS] = {0};
    uint64_t run = count[ndim - 1] * esize;
    uint64_t rows = 1;
    for (int d = 0; d < ndim - 1; d++)
        rows *= count[d];
    for (uint64_t r = 0; r < rows; r++) {
        uint64_t off = 0;
        for (int d = 0; d < ndim - 1; d++)
            off = off * chunks[d] + idx[d];
        off *= chunks[ndim - 1];
        memcpy(dst + off * esize, src + r * run, run);
        for (int d = ndim - 2; d >= 0; d--) {
            if (++idx[d] < count[d])
                break;
            idx[d] = 0;
        }
    }
}

/* The hyperslab's values. Encoding only looks at strings, so they are read into a pool freed
 * with the chunk (*strings), or are the array's own. */
static int read_slab(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                     void *out, cfs_strpool **strings, cfs_err *err)
{
    *strings = NULL;
    if (arr->dtype != CFS_STRING)
        return cfs_array_read(arr, start, count, out, err);
    if (!(*strings = cfs_strpool_new()))
        return cfs_err_oom(err);
    return cfs_array_read_strings(arr, start, count, out, *strings, err);
}

/* Reads the chunk's hyperslab into a full-chunk buffer (zero / NULL filled past the edge). */
static unsigned char *read_chunk_values(const cfs_store_node *n, uint64_t idx, uint64_t *nelems,
                                        cfs_strpool **strings, cfs_err *err)
{
    uint64_t coords[CFS_MAX_DIMS], start[CFS_MAX_DIMS], count[CFS_MAX_DIMS];
    cfs_chunk_coords(n->ndim, n->grid, idx, coords);
    uint64_t full = 1, part = 1;
    bool edge = false;
    for (int d = 0; d < n->ndim; d++) {
        start[d] = coords[d] * n->chunks[d];
        count[d] = n->shape[d] - start[d] < n->chunks[d] ? n->shape[d] - start[d] : n->chunks[d];
        edge |= count[d] != n->chunks[d];
        full *= n->chunks[d];
        part *= count[d];
    }
    size_t esize = cfs_array_elem_size(n->arr);
    if (full > SIZE_MAX / (esize ? esize : 1)) {
        cfs_err_set(err, "%s: chunk too large", n->path);
        return NULL;
    }
    unsigned char *buf = calloc(full ? full : 1, esize);
    unsigned char *tmp = edge ? calloc(part ? part : 1, esize) : buf;
    if (!buf || !tmp) {
        free(buf);
        if (edge)
            free(tmp);
        cfs_err_setc(err, CFS_ENOMEM, "out of memory reading %s", n->path);
        return NULL;
    }
    if (read_slab(n->arr, start, count, tmp, strings, err) < 0) {
        cfs_strpool_free(*strings);
        cfs_err_prefix(err, "%s", n->path);
        free(buf);
        if (edge)
            free(tmp);
        return NULL;
    }
    if (edge) {
        if (n->ndim > 0)
            scatter(buf, n->chunks, tmp, count, n->ndim, esize);
        free(tmp);
    }
    *nelems = full;
    return buf;
}

/* Model records (fixed-width UTF-8 string fields) to Zarr records (UTF-32 string fields). */
static unsigned char *records_to_zarr(const cfs_store_node *n, const unsigned char *rec,
                                      uint64_t nrec, cfs_err *err)
{
    const cfs_array *arr = n->arr;
    unsigned char *out = calloc(nrec ? nrec : 1, n->elem_size);
    char *field = malloc(arr->record_size + 1);
    if (!out || !field) {
        free(out);
        free(field);
        cfs_err_oom(err);
        return NULL;
    }
    for (uint64_t r = 0; r < nrec; r++) {
        unsigned char *dst = out + r * n->elem_size;
        const unsigned char *src = rec + r * arr->record_size;
        for (size_t f = 0; f < arr->nfields; f++) {
            const cfs_field *fd = &arr->fields[f];
            if (fd->dtype == CFS_STRING) {
                memcpy(field, src + fd->offset, fd->size);
                field[fd->size] = '\0';
                utf8_to_utf32(field, fd->size, dst);
                dst += 4 * fd->size;
            } else {
                memcpy(dst, src + fd->offset, fd->size);
                dst += fd->size;
            }
        }
    }
    free(field);
    return out;
}

static int encode_values(const cfs_store_node *n, unsigned char *values, uint64_t nelems,
                         cfs_buf *out, cfs_err *err)
{
    if (n->arr->dtype == CFS_STRING) {
        cfs_buf framed = {0};
        int rc = cfs_vlen_encode((char *const *)values, (size_t)nelems, &framed, err);
        if (rc == 0)
            rc = cfs_codec_encode(n->codec, 1, framed.data, framed.len, out, err);
        cfs_buf_free(&framed);
        return rc;
    }
    if (n->arr->dtype == CFS_COMPOUND) {
        unsigned char *z = records_to_zarr(n, values, nelems, err);
        if (!z)
            return -1;
        int rc = cfs_codec_encode(n->codec, n->elem_size, z, nelems * n->elem_size, out, err);
        free(z);
        return rc;
    }
    return cfs_codec_encode(n->codec, n->elem_size, values, nelems * n->elem_size, out, err);
}

/* A chunk the array holds encoded already, with this node's codec and chunk length (the layout's
 * encoded results, docs/design.md §7): 1 when appended to out, 0 when the array has none. */
static int take_encoded(const cfs_store_node *n, uint64_t idx, cfs_buf *out, cfs_err *err)
{
    const cfs_array *arr = n->arr;
    if (n->ndim != 1 || arr->dtype == CFS_STRING || arr->dtype == CFS_COMPOUND ||
        !arr->ops->read_encoded)
        return 0;
    size_t before = out->len;
    int rc = arr->ops->read_encoded(arr, idx, n->chunks[0], (int)n->codec, out, err);
    if (rc < 0)
        out->len = before;
    return rc;
}

int cfs_store_chunk(const cfs_store *st, const cfs_store_node *n, uint64_t idx, cfs_buf *out,
                    cfs_err *err)
{
    (void)st;
    if (!n->is_array || idx >= n->nchunks)
        return cfs_err_set(err, "%s: no chunk %llu", n->path, (unsigned long long)idx);
    if (n->fixed)
        return cfs_buf_append(out, n->fixed, n->fixed_len) < 0 ? cfs_err_oom(err)
                                                              : 0;
    size_t before = out->len;
    int kept = take_encoded(n, idx, out, err);
    if (kept != 0)
        return kept < 0 ? cfs_err_prefix(err, "%s", n->path) : 0;
    uint64_t nelems = 0;
    cfs_strpool *strings = NULL;
    unsigned char *values = read_chunk_values(n, idx, &nelems, &strings, err);
    if (!values)
        return -1;
    int rc = encode_values(n, values, nelems, out, err);
    cfs_strpool_free(strings);
    free(values);
    if (rc < 0) {
        out->len = before;
        return cfs_err_prefix(err, "%s", n->path);
    }
    return 0;
}
