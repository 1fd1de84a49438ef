/*
 * A Seurat object (SeuratObject 3.x/4.x Assay, 5.x Assay5; input-formats.md's Seurat layout) as
 * an AnnData-shaped dataset, the way SeuratDisk / anndata users expect it:
 *   obs     meta.data (rownames: the cells), and active.ident as `ident`
 *   X       the default assay's `data` (features x cells dgCMatrix: its CSC arrays are the
 *           cells x features CSR); layers `counts`, and `scale.data` when it covers every feature.
 *           An Assay5's split layers (data.1, data.2, ..., scale.data.1, ...) are joined as
 *           JoinLayers joins them (formats/r/rsplit.h)
 *   var     the assay's features, with meta.features (Assay) / meta.data (Assay5) columns and
 *           the variable features as `highly_variable`
 *   obsm    each DimReduc's cell.embeddings as X_<name lower-case> (X_umap, X_pca, X_tsne)
 *   obsp    each Graph (RNA_snn, ...) as it is
 *   uns     misc's plain values as uns/misc
 * An object with several assays is several modalities (a MuData store: docs/design.md §3):
 * one per assay, the default first, each with its X, layers and var; obs, obsm, obsp and uns
 * are the object's, global; the global var is every assay's features in turn.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modalities.h"
#include "robjects.h"
#include "rsplit.h"
#include "strfmt.h"
#include "strset.h"

typedef unsigned long long ull;

static bool same_names(const r_obj *a, const r_obj *b)
{
    if (!a || !b)
        return true;   /* nothing to contradict */
    if (a->length != b->length)
        return false;
    for (uint64_t i = 0; i < a->length; i++) {
        const char *x = r_str_at(a, i, NULL), *y = r_str_at(b, i, NULL);
        if (!x || !y || strcmp(x, y) != 0)
            return false;
    }
    return true;
}

/* el, or its absence: left out with *why, or out of memory. why is read through a pointer
 * because the call that makes el sets it, and arguments are evaluated in no set order. */
static int add_elem(const rconv *c, cfs_elem *parent, cfs_elem *el, const char *where,
                    const char *const *why, cfs_err *err)
{
    if (el)
        return cfs_elem_add_or_free(parent, el, err);
    if (!*why)
        return cfs_err_oom(err);
    return cfs_dataset_leave_out(c->ds, where, "%s", *why) < 0 ? cfs_err_oom(err) : 0;
}

static int leave(const rconv *c, const char *where, const char *why, cfs_err *err)
{
    return cfs_dataset_leave_out(c->ds, where, "%s", why) < 0 ? cfs_err_oom(err) : 0;
}

/* A layer (or X) of the assay, features x cells. */
static int layer(const rconv *c, cfs_elem *parent, const r_obj *m, const char *key,
                 const char *where, uint64_t nfeat, uint64_t ncell, const r_obj *feat,
                 cfs_err *err)
{
    uint64_t r, k;
    if (!m || r_is_null(m) || !rc_dims(m, &r, &k) || (r == 0 && k == 0))
        return 0;
    if (r != nfeat || k != ncell) {
        char why[256];
        snprintf(why, sizeof why, "it is %llu x %llu where the assay has %llu features and "
                 "%llu cells%s", (ull)r, (ull)k, (ull)nfeat, (ull)ncell,
                 r < nfeat ? " (Seurat scales only the variable features by default; "
                             "ScaleData(features = rownames(obj)) scales them all)" : "");
        return leave(c, where, why, err);
    }
    if (!same_names(rc_dimnames(m, 0), feat))
        return leave(c, where, "its features are not in the assay's order", err);
    const char *why = NULL;
    return add_elem(c, parent, rc_matrix_t(c, m, key, &why, err), where, &why, err);
}

/* var: the features, with the assay's feature data and highly_variable. */
static int var_frame(const rconv *c, const r_obj *assay, bool v5, const r_obj *feat,
                     uint64_t nfeat, cfs_err *err)
{
    char **ix = rc_strings(feat, NULL);
    const r_obj *mf = r_slot(assay, v5 ? "meta.data" : "meta.features");
    if (mf && (mf->type != R_VEC || !r_inherits(mf, "data.frame")))
        mf = NULL;
    cfs_elem *var;
    if (!ix)
        return cfs_err_oom(err);
    if (rc_frame(c, "var", ix, nfeat, mf, "var", &var, err) < 0)
        return -1;
    /* the variable features: Assay's var.features names them, Assay5's meta.data column
     * var.features holds each one's name (NA for the others) */
    const r_obj *vf = v5 ? r_list_get(mf, "var.features") : r_slot(assay, "var.features");
    if (vf && vf->type == R_STR && vf->length && !cfs_elem_child(var, "highly_variable")) {
        uint8_t *hv = calloc(nfeat ? nfeat : 1, 1);
        for (uint64_t i = 0; hv && v5 && vf->length == nfeat && i < nfeat; i++)
            hv[i] = r_str_at(vf, i, NULL) != NULL;
        cfs_strset *set = hv && !v5 ? cfs_strset_new((size_t)vf->length) : NULL;
        for (uint64_t j = 0; set && j < vf->length; j++)
            if (r_str_at(vf, j, NULL) && cfs_strset_add(set, r_str_at(vf, j, NULL), j) < 0) {
                cfs_strset_free(set);
                set = NULL;
            }
        if (hv && !v5 && !set) {
            free(hv);
            hv = NULL;
        }
        for (uint64_t i = 0; set && i < nfeat; i++) {
            const char *f = r_str_at(feat, i, NULL);
            hv[i] = f && cfs_strset_get(set, f) != NULL;
        }
        cfs_strset_free(set);
        cfs_array *a = hv ? cfs_array_from_memory(CFS_BOOL, 1, &nfeat, hv) : NULL;
        if (hv && !a)
            free(hv);
        if (cfs_elem_add_or_free(var, a ? cfs_elem_from_array(CFS_EL_ARRAY, "highly_variable",
                                                              a) : NULL, err) < 0) {
            cfs_elem_free(var);
            return -1;
        }
    }
    return cfs_elem_add_or_free(c->ds->root, var, err);
}

static int obs_frame(const rconv *c, const r_obj *so, const r_obj *cells, uint64_t ncell,
                     cfs_err *err)
{
    const r_obj *md = r_slot(so, "meta.data");
    if (md && (md->type != R_VEC || !r_inherits(md, "data.frame")))
        md = NULL;
    char **ix = rc_strings(cells, NULL);
    cfs_elem *obs;
    if (!ix)
        return cfs_err_oom(err);
    if (rc_frame(c, "obs", ix, ncell, md, "obs", &obs, err) < 0)
        return -1;
    const r_obj *id = r_slot(so, "active.ident");
    if (id && id->type == R_INT && r_inherits(id, "factor") && id->length == ncell &&
        !cfs_elem_child(obs, "ident")) {
        const char *why;
        cfs_elem *col = rc_column(c, id, "ident", ncell, &why, err);
        if (!col && !why) {
            cfs_elem_free(obs);
            return cfs_err_oom(err);
        }
        if (col && cfs_elem_add_or_free(obs, col, err) < 0) {
            cfs_elem_free(obs);
            return -1;
        }
    }
    return cfs_elem_add_or_free(c->ds->root, obs, err);
}

static int reductions(const rconv *c, const r_obj *so, const r_obj *cells, uint64_t ncell,
                      cfs_err *err)
{
    const r_obj *red = r_slot(so, "reductions");
    const r_obj *names = r_attr(red, "names");
    cfs_elem *obsm = cfs_elem_ensure_dict(c->ds->root, "obsm");
    if (!obsm)
        return cfs_err_oom(err);
    for (uint64_t i = 0; red && red->type == R_VEC && i < red->length; i++) {
        const char *name = r_str_at(names, i, NULL);
        char *key = name ? rc_obsm_key(name) : NULL;
        char *where = key ? cfs_strdupf("obsm/%s", key) : NULL;
        if (!where) {
            free(key);
            if (!name)
                continue;
            return cfs_err_oom(err);
        }
        const r_obj *emb = r_slot(red->u.items[i], "cell.embeddings");
        uint64_t r = 0, k = 0;
        int rc;
        const char *why = NULL;
        if (!emb || !rc_dims(emb, &r, &k) || r != ncell)
            rc = leave(c, where, "its cell.embeddings are not one row per cell of the object",
                       err);
        else if (cfs_elem_child(obsm, key))
            rc = leave(c, where, "a second reduction of this name (lower-cased)", err);
        else if (!same_names(rc_dimnames(emb, 0), cells))
            rc = leave(c, where, "its cells are not in the object's order", err);
        else
            rc = add_elem(c, obsm, rc_matrix(c, emb, key, &why, err), where, &why, err);
        free(key);
        free(where);
        if (rc < 0)
            return -1;
    }
    return 0;
}

static int graphs(const rconv *c, const r_obj *so, uint64_t ncell, cfs_err *err)
{
    const r_obj *g = r_slot(so, "graphs");
    const r_obj *names = r_attr(g, "names");
    if (!g || g->type != R_VEC || g->length == 0)
        return 0;
    cfs_elem *obsp = cfs_elem_ensure_dict(c->ds->root, "obsp");
    if (!obsp)
        return cfs_err_oom(err);
    for (uint64_t i = 0; i < g->length; i++) {
        const char *name = r_str_at(names, i, NULL);
        char *where = name ? cfs_strdupf("obsp/%s", name) : NULL;
        if (!where) {
            if (!name)
                continue;
            return cfs_err_oom(err);
        }
        const r_obj *m = g->u.items[i];
        uint64_t r = 0, k = 0;
        const char *why = NULL;
        int rc;
        if (!rc_is_sparse(m) || !rc_dims(m, &r, &k) || r != ncell || k != ncell)
            rc = leave(c, where, "not a cells x cells Graph (dgCMatrix) of this object", err);
        else
            rc = add_elem(c, obsp, rc_matrix(c, m, name, &why, err), where, &why, err);
        free(where);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* X and the counts layer of an Assay5 whose layers are split: data.* joined as X unless the
 * assay has a data matrix of its own (has_data), counts.* joined as counts, or as X when there
 * is no data. Without a data matrix, the assay's cells and features are its maps'. */
static int split_matrices(const rconv *c, const r_obj *assay, const char *what, bool has_data,
                          uint64_t *nfeat, uint64_t *ncell, cfs_elem **x, cfs_elem **counts,
                          cfs_err *err)
{
    const r_obj *feat = rc_dimnames(r_slot(assay, "features"), 0);
    const r_obj *cells = rc_dimnames(r_slot(assay, "cells"), 0);
    if (!feat || !cells)
        return cfs_err_setc(err, CFS_EDAMAGED, "%s of this Seurat object holds split layers "
                            "but does not name its features and cells; re-save it from R",
                            what);
    if (!has_data) {
        *nfeat = feat->length;
        *ncell = cells->length;
        if (rc_split_join(c, assay, "data", "X", what, *ncell, *nfeat, x, err) < 0)
            return -1;
    }
    bool as_x = !has_data && !*x;
    if (rc_split_join(c, assay, "counts", as_x ? "X" : "counts", what, *ncell, *nfeat,
                      as_x ? x : counts, err) < 0) {
        cfs_elem_free(*x);
        *x = NULL;
        return -1;
    }
    return 0;
}

/* An Assay5's split scale.data layers (scale.data.1, ...: each over its layer's cells and the
 * features it scaled) joined as the layer scale.data when together they cover every cell and
 * feature of the assay, as an unsplit one must (layer()); else left out with what they hold.
 * A feature a split layer lacks is 0 for its cells, as JoinLayers' StitchMatrix leaves it.
 * Split layers that cannot be joined leave scale.data out, as an unreadable one is, rather
 * than the assay. */
static int split_scale(const rconv *c, const r_obj *assay, const char *what, cfs_elem *lay,
                       uint64_t ncell, uint64_t nfeat, cfs_err *err)
{
    char why[256];
    cfs_elem *el = NULL;
    cfs_err jerr = {0};
    if (rc_split_join_covering(c, assay, "scale.data", "scale.data", what, ncell, nfeat, &el,
                               why, sizeof why, &jerr) < 0) {
        if (jerr.status == CFS_ENOMEM) {
            *err = jerr;
            return -1;
        }
        return leave(c, "layers/scale.data", jerr.msg, err);
    }
    if (el)
        return cfs_elem_add_or_free(lay, el, err);
    return why[0] ? leave(c, "layers/scale.data", why, err) : 0;
}

/* The matrices and features of assay (named name; what: "the default assay 'RNA'" or
 * "assay 'ADT'", for messages) into c->ds: X (data, or counts when it has no data), layers
 * counts and scale.data (split layers joined), var. Its cells: the assay's own names (an
 * Assay5's cells LogMap, an Assay's matrix column names), or rather obj_cells (meta.data's
 * row names) when they are as many.
 * -1 refuses the assay with the reason. */
static int assay_build(const rconv *c, const r_obj *assay, const char *what,
                       const r_obj *obj_cells, const r_obj **cells_out, uint64_t *ncell_out,
                       cfs_err *err)
{
    if (!assay || assay->type != R_S4)
        return cfs_err_setc(err, CFS_EREFUSED, "%s of this Seurat object is not an Assay", what);
    bool v5 = r_inherits(assay, "Assay5") || r_inherits(assay, "StdAssay");
    const r_obj *layers = v5 ? r_slot(assay, "layers") : NULL;
    const r_obj *data = v5 ? r_list_get(layers, "data") : r_slot(assay, "data");
    const r_obj *counts = v5 ? r_list_get(layers, "counts") : r_slot(assay, "counts");
    const r_obj *scale = v5 ? r_list_get(layers, "scale.data") : r_slot(assay, "scale.data");
    uint64_t nfeat = 0, ncell = 0;
    cfs_elem *x = NULL, *counts_el = NULL;   /* split layers, joined */
    bool data_ok = data && rc_dims(data, &nfeat, &ncell) && (nfeat || ncell);
    bool split = v5 && ((!data_ok && rc_has_split_layer(layers, "data")) ||
                        (!counts && rc_has_split_layer(layers, "counts")));
    if (split &&
        split_matrices(c, assay, what, data_ok, &nfeat, &ncell, &x, &counts_el, err) < 0)
        return -1;
    if (!data_ok && !x && counts && rc_dims(counts, &nfeat, &ncell) && (nfeat || ncell)) {
        data = counts;   /* an assay with counts only: X = counts */
        counts = NULL;
    } else if (!data_ok && !x) {
        const char *cls = data ? r_class_name(data) : NULL;
        cfs_elem_free(counts_el);
        return cfs_err_setc(err, CFS_EREFUSED, "%s of this Seurat object has no data or counts "
                            "matrix this version reads (%s); save it with its matrices in "
                            "memory (a dgCMatrix)", what,
                            cls ? cls : data ? r_type_name(data->type) : "none");
    }
    const r_obj *feat = v5 ? rc_dimnames(r_slot(assay, "features"), 0) : rc_dimnames(data, 0);
    const r_obj *cells = v5 ? rc_dimnames(r_slot(assay, "cells"), 0) : rc_dimnames(data, 1);
    if (obj_cells && obj_cells->length == ncell)
        cells = obj_cells;
    if (!feat || feat->length != nfeat || !cells || cells->length != ncell) {
        cfs_elem_free(x);
        cfs_elem_free(counts_el);
        return cfs_err_setc(err, CFS_EDAMAGED, "%s of this Seurat object does not name its "
                            "%llu features and %llu cells; re-save it from R", what,
                            (ull)nfeat, (ull)ncell);
    }
    c->ds->n_obs = ncell;
    c->ds->n_vars = nfeat;
    const char *why = NULL;
    if (!x && !(x = rc_matrix_t(c, data, "X", &why, err))) {
        cfs_elem_free(counts_el);
        return why ? cfs_err_setc(err, CFS_EREFUSED, "the data of %s is %s", what, why)
                   : cfs_err_oom(err);
    }
    cfs_elem *lay = NULL;
    if (cfs_elem_add_or_free(c->ds->root, x, err) < 0 ||
        var_frame(c, assay, v5, feat, nfeat, err) < 0 ||
        !(lay = cfs_elem_ensure_dict(c->ds->root, "layers"))) {
        cfs_elem_free(counts_el);
        return lay ? -1 : cfs_err_oom(err);
    }
    if ((counts_el && cfs_elem_add_or_free(lay, counts_el, err) < 0) ||
        layer(c, lay, counts, "counts", "layers/counts", nfeat, ncell, feat, err) < 0 ||
        layer(c, lay, scale, "scale.data", "layers/scale.data", nfeat, ncell, feat, err) < 0 ||
        (v5 && !scale && split_scale(c, assay, what, lay, ncell, nfeat, err) < 0))
        return -1;
    *cells_out = cells;
    *ncell_out = ncell;
    return 0;
}

/* The object's cells: meta.data's row names. */
static const r_obj *object_cells(const r_obj *so)
{
    const r_obj *rn = r_attr(r_slot(so, "meta.data"), "row.names");
    return rn && rn->type == R_STR ? rn : NULL;
}

/* What the object holds besides its assays: obs, obsm, obsp, uns/misc, into c->ds. */
static int object_parts(const rconv *c, const r_obj *so, const r_obj *cells, uint64_t ncell,
                        cfs_err *err)
{
    if (obs_frame(c, so, cells, ncell, err) < 0 || reductions(c, so, cells, ncell, err) < 0 ||
        graphs(c, so, ncell, err) < 0 || rc_uns(c, r_slot(so, "misc"), "misc", err) < 0)
        return -1;
    return 0;
}

static int set_version(const rconv *c, const r_obj *so, bool v5, cfs_err *err)
{
    const r_obj *ver = r_slot(so, "version");
    const r_obj *vv = ver && ver->type == R_VEC ? r_vec_at(ver, 0) : NULL;
    const int32_t *vi = vv && vv->type == R_INT && vv->length >= 3 ? r_ints(vv) : NULL;
    /* Seurat < 4 defined its classes itself: SeuratObject split from it with 4.0 */
    c->ds->format_version = vi ? cfs_strdupf("%s %d.%d.%d, %s", vi[0] < 4 ? "Seurat"
                                                                          : "SeuratObject",
                                             vi[0], vi[1], vi[2], v5 ? "Assay5" : "Assay")
                               : cfs_strdupf("SeuratObject, %s", v5 ? "Assay5" : "Assay");
    return c->ds->format_version ? 0 : cfs_err_oom(err);
}

/* One assay of several, built as a modality's dataset (its own X, layers, var; obs its cells'
 * names); NULL with err (refused: the reason) or out of memory. */
static cfs_dataset *assay_modality(const rconv *c, const r_obj *assay, const char *what,
                                   const r_obj *obj_cells, cfs_err *err)
{
    rconv mc;
    cfs_dataset *sub = rc_modality_dataset(c, &mc, err);
    if (!sub)
        return NULL;
    const r_obj *cells = NULL;
    uint64_t ncell = 0;
    cfs_elem *obs = NULL;
    char **ix = NULL;
    if (assay_build(&mc, assay, what, obj_cells, &cells, &ncell, err) < 0 ||
        !(ix = rc_strings(cells, NULL)) ||
        rc_frame(&mc, "obs", ix, ncell, NULL, "obs", &obs, err) < 0 ||
        cfs_elem_add_or_free(sub->root, obs, err) < 0) {
        if (cells && !ix)
            cfs_err_oom(err);
        cfs_dataset_free(sub);
        return NULL;
    }
    return sub;
}

/* Several assays: one modality each (the default first), the object's cells, reductions and
 * graphs global. An assay other than the default that cannot be read is left out with its
 * reason. */
static int seurat_modalities(const rconv *c, const r_obj *so, const char *const *names,
                             const r_obj *const *assays, size_t n, cfs_err *err)
{
    const r_obj *cells = object_cells(so);
    if (!cells)
        return cfs_err_setc(err, CFS_EDAMAGED, "a Seurat object whose meta.data does not name "
                            "its cells; re-save it from R");
    int rc = 0;
    for (size_t k = 0; rc == 0 && k < n; k++) {
        char *what = k == 0 ? cfs_strdupf("the default assay '%s'", names[k])
                            : cfs_strdupf("assay '%s'", names[k]);
        cfs_err aerr = {0};
        cfs_dataset *sub = what ? assay_modality(c, assays[k], what, cells, &aerr) : NULL;
        if (!what)
            rc = cfs_err_oom(err);
        else if (sub)
            rc = cfs_dataset_add_modality(c->ds, names[k], sub, err) ? 0 : -1;
        else if (k == 0 || aerr.status == CFS_ENOMEM) {
            *err = aerr;
            rc = -1;
        } else {
            char *el = cfs_strdupf("assay %s", names[k]);
            rc = el && cfs_dataset_leave_out(c->ds, el, "%s", aerr.msg) == 0 ? 0
                                                                             : cfs_err_oom(err);
            free(el);
        }
        free(what);
    }
    if (rc < 0)
        return -1;
    c->ds->n_obs = cells->length;
    if (object_parts(c, so, cells, cells->length, err) < 0)
        return -1;
    return cfs_mods_stack(c->ds, err);
}

int r_seurat_build(const rconv *c, const r_obj *so, cfs_err *err)
{
    const r_obj *assays = r_slot(so, "assays");
    const r_obj *names = r_attr(assays, "names");
    const char *def = r_str_at(r_slot(so, "active.assay"), 0, NULL);
    const r_obj *assay = def ? r_list_get(assays, def) : NULL;
    if (!assay || assay->type != R_S4)
        return cfs_err_setc(err, CFS_EREFUSED, "a Seurat object without its default assay "
                            "('%s'); re-save it from R after DefaultAssay(obj) <- \"RNA\"",
                            def ? def : "?");
    bool v5 = r_inherits(assay, "Assay5") || r_inherits(assay, "StdAssay");
    uint64_t n = assays->type == R_VEC ? assays->length : 0;
    const char **mod_names = calloc(n ? n : 1, sizeof *mod_names);
    const r_obj **mods = calloc(n ? n : 1, sizeof *mods);
    size_t nmods = 0;
    if (!mod_names || !mods) {
        free(mod_names);
        free(mods);
        return cfs_err_oom(err);
    }
    mod_names[nmods] = def;
    mods[nmods++] = assay;
    for (uint64_t i = 0; i < n; i++) {
        const char *an = r_str_at(names, i, NULL);
        if (an && strcmp(an, def) != 0) {
            mod_names[nmods] = an;
            mods[nmods++] = assays->u.items[i];
        }
    }
    int rc;
    if (nmods > 1)
        rc = seurat_modalities(c, so, mod_names, mods, nmods, err);
    else {
        char *what = cfs_strdupf("the default assay '%s'", def);
        const r_obj *cells = NULL;
        uint64_t ncell = 0;
        rc = !what ? cfs_err_oom(err)
                   : assay_build(c, assay, what, object_cells(so), &cells, &ncell, err);
        free(what);
        if (rc == 0)
            rc = object_parts(c, so, cells, ncell, err);
    }
    free(mod_names);
    free(mods);
    return rc < 0 ? -1 : set_version(c, so, v5, err);
}
