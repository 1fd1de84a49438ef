/*
 * A Seurat object (SeuratObject 3.x/4.x Assay, 5.x Assay5; input-formats.md's Seurat layout) as
 * an AnnData-shaped dataset, the way SeuratDisk / anndata users expect it:
 *   obs     meta.data (rownames: the cells), and active.ident as `ident`
 *   X       the default assay's `data` (features x cells dgCMatrix: its CSC arrays are the
 *           cells x features CSR); layers `counts`, and `scale.data` when it covers every feature
 *   var     the assay's features, with meta.features (Assay) / meta.data (Assay5) columns and
 *           the variable features as `highly_variable`
 *   obsm    each DimReduc's cell.embeddings as X_<name lower-case> (X_umap, X_pca, X_tsne)
 *   obsp    each Graph (RNA_snn, ...) as it is
 *   uns     misc's plain values as uns/misc
 * Other assays are left out with their names: one store holds one assay until the MuData store
 * (not written yet) shows them as modalities.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "robjects.h"
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

/* The first layer name of a split Assay5 ("counts.1", "data.ctrl"), or NULL. */
static const char *split_layers(const r_obj *layers)
{
    const r_obj *names = r_attr(layers, "names");
    for (uint64_t i = 0; names && i < names->length; i++) {
        const char *n = r_str_at(names, i, NULL);
        if (n && (strncmp(n, "counts.", 7) == 0 || strncmp(n, "data.", 5) == 0))
            return n;
    }
    return NULL;
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
    for (uint64_t i = 0; assays->type == R_VEC && i < assays->length; i++) {
        const char *an = r_str_at(names, i, NULL);
        if (!an || strcmp(an, def) == 0)
            continue;
        char what[200];
        snprintf(what, sizeof what, "assay %s", an);
        char why[512];
        snprintf(why, sizeof why, "a second assay of this Seurat object (%s, class %s): the store "
                 "shows the default assay '%s' only (one MuData store with a modality per assay "
                 "is not written yet; to serve this one: DefaultAssay(obj) <- \"%s\" and save "
                 "again)", an,
                 r_class_name(assays->u.items[i]) ? r_class_name(assays->u.items[i]) : "?",
                 def, an);
        if (leave(c, what, why, err) < 0)
            return -1;
    }
    bool v5 = r_inherits(assay, "Assay5") || r_inherits(assay, "StdAssay");
    const r_obj *layers = v5 ? r_slot(assay, "layers") : NULL;
    const r_obj *data = v5 ? r_list_get(layers, "data") : r_slot(assay, "data");
    const r_obj *counts = v5 ? r_list_get(layers, "counts") : r_slot(assay, "counts");
    const r_obj *scale = v5 ? r_list_get(layers, "scale.data") : r_slot(assay, "scale.data");
    uint64_t nfeat = 0, ncell = 0;
    bool data_ok = data && rc_dims(data, &nfeat, &ncell) && (nfeat || ncell);
    if (!data_ok && counts && rc_dims(counts, &nfeat, &ncell) && (nfeat || ncell)) {
        data = counts;   /* an Assay5 with counts only: X = counts */
        counts = NULL;
    } else if (!data_ok && v5 && split_layers(layers)) {
        return cfs_err_setc(err, CFS_EREFUSED, "the default assay '%s' of this Seurat object "
                            "holds split layers (%s): one matrix per sample is not read yet; "
                            "run obj <- JoinLayers(obj) in R and save it again", def,
                            split_layers(layers));
    } else if (!data_ok) {
        const char *cls = data ? r_class_name(data) : NULL;
        return cfs_err_setc(err, CFS_EREFUSED, "the default assay '%s' of this Seurat object "
                            "has no data or counts matrix this version reads (%s); save it with "
                            "its matrices in memory (a dgCMatrix)", def,
                            cls ? cls : data ? r_type_name(data->type) : "none");
    }
    const r_obj *feat = v5 ? rc_dimnames(r_slot(assay, "features"), 0) : rc_dimnames(data, 0);
    const r_obj *cells = v5 ? rc_dimnames(r_slot(assay, "cells"), 0) : rc_dimnames(data, 1);
    const r_obj *md = r_slot(so, "meta.data");
    const r_obj *rn = r_attr(md, "row.names");
    if (rn && rn->type == R_STR && rn->length == ncell)
        cells = rn;
    if (!feat || feat->length != nfeat || !cells || cells->length != ncell)
        return cfs_err_setc(err, CFS_EDAMAGED, "the default assay '%s' of this Seurat object "
                            "does not name its %llu features and %llu cells; re-save it from R",
                            def, (ull)nfeat, (ull)ncell);
    c->ds->n_obs = ncell;
    c->ds->n_vars = nfeat;
    const char *why = NULL;
    cfs_elem *x = rc_matrix_t(c, data, "X", &why, err);
    if (!x)
        return why ? cfs_err_setc(err, CFS_EREFUSED, "the data of assay '%s' is %s", def, why)
                   : cfs_err_oom(err);
    if (cfs_elem_add_or_free(c->ds->root, x, err) < 0 || obs_frame(c, so, cells, ncell, err) < 0 ||
        var_frame(c, assay, v5, feat, nfeat, err) < 0)
        return -1;
    cfs_elem *lay = cfs_elem_ensure_dict(c->ds->root, "layers");
    if (!lay)
        return cfs_err_oom(err);
    if (layer(c, lay, counts, "counts", "layers/counts", nfeat, ncell, feat, err) < 0 ||
        layer(c, lay, scale, "scale.data", "layers/scale.data", nfeat, ncell, feat, err) < 0)
        return -1;
    if (reductions(c, so, cells, ncell, err) < 0 || graphs(c, so, ncell, err) < 0 ||
        rc_uns(c, r_slot(so, "misc"), "misc", err) < 0)
        return -1;
    const r_obj *ver = r_slot(so, "version");
    const r_obj *vv = ver && ver->type == R_VEC ? r_vec_at(ver, 0) : NULL;
    const int32_t *vi = vv && vv->type == R_INT && vv->length >= 3 ? r_ints(vv) : NULL;
    c->ds->format_version = vi ? cfs_strdupf("SeuratObject %d.%d.%d, %s", vi[0], vi[1], vi[2],
                                             v5 ? "Assay5" : "Assay")
                               : cfs_strdupf("SeuratObject, %s", v5 ? "Assay5" : "Assay");
    return c->ds->format_version ? 0 : cfs_err_oom(err);
}
