/* The Zarr v2 flavour (docs/design.md §4): .zgroup or .zarray and .zattrs in every node's
 * folder, .zmetadata at the root, a file a chunk named "i.j", as anndata 0.8 on zarr-python 2
 * writes them. */
#include "flavour_impl.h"
#include "path.h"

#include <stdlib.h>
#include <string.h>

#include "zmeta.h"

/* numpy's typestr of one record field. */
static json_t *field_dtype(const cfs_field *f)
{
    if (f->dtype == CFS_STRING)
        return json_sprintf("<U%zu", f->size);
    return json_string(cfs_zarr_dtype(f->dtype));
}

static json_t *records_dtype(const cfs_array *arr)
{
    json_t *list = json_array();
    for (size_t i = 0; list && i < arr->nfields; i++)
        json_array_append_new(list, json_pack("[s, o]", arr->fields[i].name,
                                              field_dtype(&arr->fields[i])));
    return list;
}

static json_t *zarray_of(const cfs_store_node *n)
{
    json_t *dtype = NULL, *fill = NULL, *filters = json_null();
    switch (n->elem) {
    case CFS_ELEM_NUMERIC:
        dtype = json_string(cfs_zarr_dtype(n->arr->dtype));
        fill = cfs_zarr_fill_value(n->arr->dtype);
        break;
    case CFS_ELEM_STRING:
        dtype = json_string(cfs_zarr_dtype(CFS_STRING));
        fill = cfs_zarr_fill_value(CFS_STRING);
        filters = json_pack("[{s:s}]", "id", "vlen-utf8");
        break;
    case CFS_ELEM_FIXED_STRING:
        dtype = json_sprintf("<U%zu", n->fixed_len / 4);
        fill = json_string("");
        break;
    case CFS_ELEM_RECORDS:
        dtype = records_dtype(n->arr);
        fill = cfs_json_zero_base64(n->elem_size);
        break;
    }
    return cfs_zarray_doc(n->ndim, n->shape, n->chunks, dtype, fill, cfs_codec_config(n->codec),
                          filters);
}

/* The serialised document, or NULL when out of memory (doc is released). */
static char *dump(json_t *doc)
{
    char *s = doc ? cfs_zmeta_dump(doc) : NULL;
    json_decref(doc);
    return s;
}

static int set_meta(json_t *meta, const char *path, const char *doc, json_t *value)
{
    char *key = cfs_path_join(path, doc);
    if (!key || !value) {
        free(key);
        json_decref(value);
        return -1;
    }
    int rc = json_object_set_new(meta, key, value);
    free(key);
    return rc;
}

/* .zmetadata: every node's documents under their keys. */
static char *zmetadata(const cfs_store *st)
{
    json_t *meta = json_object();
    int rc = meta ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < st->nnodes; i++) {
        const cfs_store_node *n = &st->nodes[i];
        rc |= set_meta(meta, n->path, ".zattrs", json_incref(n->attrs));
        if (n->is_array)
            rc |= set_meta(meta, n->path, ".zarray", zarray_of(n));
        else
            rc |= set_meta(meta, n->path, ".zgroup", cfs_zgroup_doc());
    }
    if (rc != 0) {
        json_decref(meta);
        return NULL;
    }
    return dump(json_pack("{s:o, s:i}", "metadata", meta, "zarr_consolidated_format", 1));
}

static int emit(const cfs_walker *w, void *ctx, size_t node, const char *path, const char *name,
                char *text, cfs_err *err)
{
    if (!text)
        return cfs_err_setc(err, CFS_ENOMEM, "out of memory rendering %s/%s", path, name);
    return w->doc(ctx, node, path, name, text, err);
}

static int node_docs(const cfs_store *st, size_t i, const cfs_walker *w, void *ctx, cfs_err *err)
{
    const cfs_store_node *n = &st->nodes[i];
    if (emit(w, ctx, i, n->path, ".zattrs", cfs_zmeta_dump(n->attrs), err) < 0)
        return -1;
    if (n->is_array ? emit(w, ctx, i, n->path, ".zarray", dump(zarray_of(n)), err) < 0
                    : emit(w, ctx, i, n->path, ".zgroup", dump(cfs_zgroup_doc()), err) < 0)
        return -1;
    return i == 0 ? emit(w, ctx, i, n->path, ".zmetadata", zmetadata(st), err) : 0;
}

const cfs_flavour cfs_flavour_zarr_v2 = {
    .name = "zarr2",
    .key_prefix = NULL,
    .key_sep = '.',
    .node_docs = node_docs,
};
