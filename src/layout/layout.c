#include "layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chunk_hint.h"
#include "gene_major.h"
#include "permute.h"
#include "priority.h"
#include "pulled.h"
#include "sparse_index.h"

typedef struct layout {
    cfs_elem *root;             /* the AnnData laid out: the dataset's, or one modality's */
    cfs_perm *perm;
    cfs_engine_opts engine;
    cfs_err *err;
    const char *prefix;         /* of the expression labels (progress): "" or "mod/<name>/" */
    const char *mapping;        /* being permuted: "obs", "obsm" */
} layout;

static int replace_rows(cfs_array **slot, cfs_perm *perm, bool both_axes, cfs_err *err)
{
    cfs_array *view = both_axes ? cfs_perm_rows_cols(*slot, perm) : cfs_perm_rows(*slot, perm);
    if (!view)
        return cfs_err_oom(err);
    cfs_hint_cells(view);
    cfs_array_unref(*slot);
    *slot = view;
    return 0;
}

/* A sparse element whose rows (and with both_axes, columns) are cells. */
static int permute_sparse(cfs_elem *el, cfs_perm *perm, bool both_axes, cfs_err *err)
{
    if (cfs_perm_sparse(el, perm, both_axes, err) < 0)
        return -1;
    cfs_hint_sparse_cells(el, perm->n, el->csr || both_axes);
    return 0;
}

/* Permutes the cell axis of a per-cell element (obs column, obsm entry, obs index). */
static int permute_element(layout *L, cfs_elem *el)
{
    switch (el->kind) {
    case CFS_EL_ARRAY:
        if (cfs_rows_file_wanted(el->values, &L->engine)) {
            char label[512];
            snprintf(label, sizeof label, "%s%s/%s", L->prefix, L->mapping, el->name);
            return cfs_rows_file(&el->values, L->perm, &L->engine, label, L->err);
        }
        return replace_rows(&el->values, L->perm, false, L->err);
    case CFS_EL_CATEGORICAL:
        return replace_rows(&el->values, L->perm, false, L->err);
    case CFS_EL_NULLABLE_INT:
    case CFS_EL_NULLABLE_BOOL:
    case CFS_EL_NULLABLE_STRING:
        if (replace_rows(&el->values, L->perm, false, L->err) < 0)
            return -1;
        return replace_rows(&el->aux, L->perm, false, L->err);
    case CFS_EL_SPARSE:
        return permute_sparse(el, L->perm, false, L->err);
    case CFS_EL_DATAFRAME:
        if (el->index && permute_element(L, el->index) < 0)
            return -1;
        for (size_t i = 0; i < el->nchildren; i++)
            if (permute_element(L, el->children[i]) < 0)
                return -1;
        return 0;
    default:
        return cfs_err_set(L->err, "%s: a %s cannot be reordered by cell", el->name,
                           cfs_elem_kind_name(el->kind));
    }
}

static int permute_mapping(layout *L, const char *key)
{
    L->mapping = key;
    cfs_elem *m = cfs_elem_child(L->root, key);
    for (size_t i = 0; m && i < m->nchildren; i++)
        if (permute_element(L, m->children[i]) < 0)
            return cfs_err_prefix(L->err, "%s", key);
    return 0;
}

static int permute_obsp(layout *L)
{
    cfs_elem *m = cfs_elem_child(L->root, "obsp");
    for (size_t i = 0; m && i < m->nchildren; i++) {
        cfs_elem *el = m->children[i];
        int rc = el->kind == CFS_EL_SPARSE ? permute_sparse(el, L->perm, true, L->err)
               : el->kind == CFS_EL_ARRAY ? replace_rows(&el->values, L->perm, true, L->err)
                                          : cfs_err_set(L->err, "not a matrix");
        if (rc < 0)
            return cfs_err_prefix(L->err, "obsp/%s", el->name);
    }
    return 0;
}

/* X, a layer or raw/X: gene-major, cells in stored order. */
static int expression(layout *L, cfs_elem *el, const char *label)
{
    if (el->kind == CFS_EL_SPARSE)
        return cfs_gene_major_sparse(el, L->perm, &L->engine, label, L->err);
    if (el->kind == CFS_EL_ARRAY && el->values->ndim == 2)
        return cfs_gene_major_dense(el, L->perm, &L->engine, label, L->err);
    return cfs_err_set(L->err, "%s: not a matrix", label);
}

static int expressions(layout *L)
{
    char label[512];
    cfs_elem *root = L->root, *x = cfs_elem_child(root, "X");
    snprintf(label, sizeof label, "%sX", L->prefix);
    if (x && expression(L, x, label) < 0)
        return -1;
    cfs_elem *layers = cfs_elem_child(root, "layers");
    for (size_t i = 0; layers && i < layers->nchildren; i++) {
        snprintf(label, sizeof label, "%slayers/%s", L->prefix, layers->children[i]->name);
        if (expression(L, layers->children[i], label) < 0)
            return -1;
    }
    cfs_elem *raw = cfs_elem_child(root, "raw");
    cfs_elem *raw_x = raw ? cfs_elem_child(raw, "X") : NULL;
    snprintf(label, sizeof label, "%sraw/X", L->prefix);
    return raw_x ? expression(L, raw_x, label) : 0;
}

static cfs_elem *memory_elem(cfs_elem_kind kind, const char *name, cfs_dtype t, int ndim,
                             const uint64_t *shape, const void *values, size_t bytes)
{
    void *copy = malloc(bytes ? bytes : 1);
    cfs_elem *el = copy ? cfs_elem_new(kind, name) : NULL;
    if (el) {
        memcpy(copy, values, bytes);
        el->values = cfs_array_from_memory(t, ndim, shape, copy);
    }
    if (!el || !el->values) {
        if (!el)
            free(copy);
        cfs_elem_free(el);
        return NULL;
    }
    return el;
}

static int add_original_position(layout *L)
{
    cfs_elem *obs = cfs_elem_child(L->root, "obs");
    uint64_t n = L->perm->n;
    cfs_elem_remove(obs, "cellucid_original_position");
    cfs_elem *col = memory_elem(CFS_EL_ARRAY, "cellucid_original_position", CFS_INT64, 1, &n,
                                L->perm->order, n * sizeof(uint64_t));
    if (!col || cfs_elem_add(obs, col) < 0) {
        cfs_elem_free(col);
        return cfs_err_oom(L->err);
    }
    cfs_hint_cells(col->values);
    return 0;
}

static int add_scalar(cfs_elem *dict, const char *key, cfs_dtype t, const void *v)
{
    cfs_elem *el = memory_elem(CFS_EL_SCALAR, key, t, 0, NULL, v, cfs_dtype_size(t));
    if (!el || cfs_elem_add(dict, el) < 0) {
        cfs_elem_free(el);
        return -1;
    }
    return 0;
}

/* uns/cellucid/priority = {seed, specVersion: 1, nObs, levels}. */
static int add_priority_record(layout *L, uint64_t seed)
{
    cfs_elem *meta =
        cfs_elem_ensure_dict(cfs_elem_ensure_dict(L->root, "uns"), "cellucid");
    if (!meta)
        return cfs_err_oom(L->err);
    cfs_elem_remove(meta, "priority");
    cfs_elem *rec = cfs_elem_new(CFS_EL_DICT, "priority");
    uint64_t levels[32];
    uint64_t nlevels = cfs_priority_levels(L->perm->n, levels, 32);
    int64_t spec = 1, n_obs = (int64_t)L->perm->n;
    cfs_elem *lv = memory_elem(CFS_EL_ARRAY, "levels", CFS_INT64, 1, &nlevels, levels,
                               nlevels * sizeof(uint64_t));
    bool big_seed = seed > (uint64_t)INT64_MAX;
    if (!rec || cfs_elem_add(meta, rec) < 0 || !lv || cfs_elem_add(rec, lv) < 0 ||
        add_scalar(rec, "seed", big_seed ? CFS_UINT64 : CFS_INT64, &seed) < 0 ||
        add_scalar(rec, "specVersion", CFS_INT64, &spec) < 0 ||
        add_scalar(rec, "nObs", CFS_INT64, &n_obs) < 0)
        return cfs_err_oom(L->err);
    return 0;
}

/* Every per-cell axis of root in the order of perm, expression gene-major, and obs's
 * cellucid_original_position. */
static int lay_out(layout *L)
{
    cfs_elem *obs = cfs_elem_child(L->root, "obs");
    L->mapping = "obs";
    int rc = obs ? permute_element(L, obs) : 0;
    if (rc == 0)
        rc = permute_mapping(L, "obsm");
    if (rc == 0)
        rc = permute_obsp(L);
    if (rc == 0)
        rc = expressions(L);
    if (rc == 0 && obs)
        rc = add_original_position(L);
    return rc;
}

/* A modality's rows ordered by their global cell's stored row (docs/design.md §4.2); its
 * obsmap rewritten for the new orders: stored global cell j -> stored modality row. */
static int lay_out_modality(const layout *G, cfs_modality *m)
{
    cfs_err *err = G->err;
    uint64_t n = G->perm->n;
    uint32_t *old_map = malloc((n ? n : 1) * sizeof *old_map);
    uint32_t *new_map = malloc((n ? n : 1) * sizeof *new_map);
    uint64_t *order = malloc((m->n_obs ? m->n_obs : 1) * sizeof *order);
    uint64_t start = 0, k = 0;
    int rc = old_map && new_map && order ? 0 : cfs_err_oom(err);
    if (rc == 0 && cfs_array_read(m->obsmap, &start, &n, old_map, err) < 0)
        rc = -1;
    for (uint64_t j = 0; rc == 0 && j < n; j++) {
        uint32_t row = old_map[G->perm->order[j]];
        new_map[j] = row && k < m->n_obs ? (uint32_t)(k + 1) : 0;
        if (row && k < m->n_obs)
            order[k++] = row - 1;
    }
    free(old_map);
    if (rc == 0 && k != m->n_obs)
        rc = cfs_err_set(err, "obsmap/%s maps %llu of the modality's %llu cells", m->name,
                         (unsigned long long)k, (unsigned long long)m->n_obs);
    cfs_array *map = rc == 0 ? cfs_array_from_memory(CFS_UINT32, 1, &n, new_map) : NULL;
    if (rc < 0 || !map) {
        free(new_map);
        free(order);
        return rc < 0 ? -1 : cfs_err_oom(err);
    }
    cfs_hint_cells(map);
    cfs_array_unref(m->obsmap);
    m->obsmap = map;
    char prefix[300];
    snprintf(prefix, sizeof prefix, "mod/%s/", m->name);
    layout L = *G;
    L.root = m->root;
    L.prefix = prefix;
    if (!(L.perm = cfs_perm_from_order(m->n_obs, order)))
        return cfs_err_oom(err);
    rc = lay_out(&L);
    cfs_perm_unref(L.perm);
    return rc < 0 ? cfs_err_prefix(err, "mod/%s", m->name) : 0;
}

static int apply_priority(cfs_dataset *ds, const cfs_layout_opts *opts, cfs_err *err)
{
    cfs_perm *perm = opts->source_ordered ? cfs_perm_identity(ds->n_obs)
                                          : cfs_perm_new(ds->n_obs, opts->seed);
    layout L = {ds->root, perm,
                {opts->memory, opts->workdir, opts->space, opts->progress, opts->codec},
                err, "", NULL};
    if (!L.perm)
        return cfs_err_setc(err, CFS_ENOMEM, "out of memory ordering %llu cells",
                           (unsigned long long)ds->n_obs);
    int rc = lay_out(&L);
    for (size_t i = 0; rc == 0 && i < ds->nmods; i++)
        rc = lay_out_modality(&L, &ds->mods[i]);
    if (rc == 0 && !opts->source_ordered)
        rc = add_priority_record(&L, opts->seed);
    cfs_perm_unref(L.perm);
    return rc;
}

static int apply_order(cfs_dataset *ds, const cfs_layout_opts *opts, cfs_err *err)
{
    switch (opts->order) {
    case CFS_ORDER_ORIGINAL:
        return 0;
    case CFS_ORDER_PRIORITY:
        if (!opts->workdir)
            return cfs_err_set(err, "the layout needs a work folder");
        return apply_priority(ds, opts, err);
    }
    return cfs_err_set(err, "unknown cell order");
}

int cfs_layout_apply(cfs_dataset *ds, const cfs_layout_opts *opts, cfs_err *err)
{
    if (apply_order(ds, opts, err) < 0 || cfs_pull_modality_embeddings(ds, err) < 0 ||
        cfs_sparse_unify_indices(ds->root, err) < 0)
        return -1;
    for (size_t i = 0; i < ds->nmods; i++)
        if (cfs_sparse_unify_indices(ds->mods[i].root, err) < 0)
            return cfs_err_prefix(err, "mod/%s", ds->mods[i].name);
    return 0;
}
