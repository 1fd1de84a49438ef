/*
 * A SingleCellExperiment (or SummarizedExperiment) as an AnnData-shaped dataset, as
 * zellkonverter's SCE2AnnData maps it:
 *   X       logcounts if present, else counts, else the first assay (features x cells:
 *           dgCMatrix or base matrix); the other assays as layers
 *   obs     colData (an S4Vectors DataFrame; its rownames are the cells)
 *   var     rowData (the DataFrame of elementMetadata, or of rowRanges' mcols); rownames from
 *           NAMES or rowRanges' names
 *   obsm    reducedDims as X_<name lower-case> (X_umap, X_pca, X_tsne)
 *   uns     metadata's plain values as uns/metadata
 * With altExps it is several modalities (a MuData store): the main experiment (named by
 * mainExpName, else "main") and each altExp, stacked features over the same cells, with
 * colData, reducedDims and metadata global.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modalities.h"
#include "robjects.h"
#include "strfmt.h"

typedef unsigned long long ull;

static int leave(const rconv *c, const char *where, const char *why, cfs_err *err)
{
    return cfs_dataset_leave_out(c->ds, where, "%s", why) < 0 ? cfs_err_oom(err) : 0;
}

/* A DataFrame's columns (its listData) and rownames. */
static const r_obj *df_list(const r_obj *df)
{
    const r_obj *l = df && df->type == R_S4 ? r_slot(df, "listData") : NULL;
    return l && l->type == R_VEC ? l : NULL;
}

static const r_obj *df_rownames(const r_obj *df)
{
    const r_obj *r = df && df->type == R_S4 ? r_slot(df, "rownames") : NULL;
    return r && r->type == R_STR ? r : NULL;
}

/* The feature names: NAMES, else the names of rowRanges (a GRangesList's partitioning or a
 * GRanges' NAMES). */
static const r_obj *feature_names(const r_obj *sce)
{
    const r_obj *n = r_slot(sce, "NAMES");
    if (n && n->type == R_STR)
        return n;
    const r_obj *rr = r_slot(sce, "rowRanges");
    const r_obj *part = rr ? r_slot(rr, "partitioning") : NULL;
    n = part ? r_slot(part, "NAMES") : rr ? r_slot(rr, "NAMES") : NULL;
    return n && n->type == R_STR ? n : NULL;
}

static char **names_or_numbers(const r_obj *names, uint64_t n)
{
    if (names && names->length == n)
        return rc_strings(names, NULL);
    char **v = calloc(n ? n : 1, sizeof *v);
    for (uint64_t i = 0; v && i < n; i++)
        if (!(v[i] = cfs_strdupf("%llu", (ull)i))) {
            cfs_strings_free(v, (size_t)i);
            free(v);
            return NULL;
        }
    return v;
}

static int frame(const rconv *c, const char *name, const r_obj *df, const r_obj *names,
                 uint64_t n, cfs_err *err)
{
    /* Unnamed rows are numbered; a count beyond any real experiment is a damaged Dim slot
     * (a triplet matrix's dims cost no bytes), refused before it is allocated. */
    if ((!names || names->length != n) && n > RC_MAX_UNBACKED_DIM)
        return cfs_err_setc(err, CFS_EDAMAGED, "its %s claims %llu unnamed rows (a damaged "
                            "file); re-save it from R", name, (ull)n);
    char **ix = names_or_numbers(names, n);
    cfs_elem *el;
    if (!ix)
        return cfs_err_oom(err);
    if (rc_frame(c, name, ix, n, df_list(df), name, &el, err) < 0)
        return -1;
    return cfs_elem_add_or_free(c->ds->root, el, err);
}

/* The assays (X and layers) and rowData (var) of an experiment (the SCE itself or an
 * alternative experiment's SummarizedExperiment) into c->ds; *ncell and *xm (X's matrix, for
 * the cells' names) out. -1 refuses it with the reason. */
static int experiment_build(const rconv *c, const r_obj *sce, uint64_t *ncell_out,
                            const r_obj **xm_out, cfs_err *err)
{
    const r_obj *as = r_slot(sce, "assays");
    const r_obj *sl = as ? r_slot(as, "data") : NULL;
    const r_obj *list = sl ? df_list(sl) : NULL;
    const r_obj *anames = r_attr(list, "names");
    if (!list || list->length == 0)
        return cfs_err_setc(err, CFS_EREFUSED, "a %s without assays this version reads (its "
                            "assays are a %s); save it with its assays in memory",
                            r_class_name(sce), as && r_class_name(as) ? r_class_name(as) : "?");
    uint64_t xi = 0;
    for (uint64_t i = 0; i < list->length; i++)
        if (r_str_at(anames, i, NULL) && strcmp(r_str_at(anames, i, NULL), "counts") == 0)
            xi = i;
    for (uint64_t i = 0; i < list->length; i++)
        if (r_str_at(anames, i, NULL) && strcmp(r_str_at(anames, i, NULL), "logcounts") == 0)
            xi = i;
    uint64_t nfeat, ncell;
    const r_obj *xm = list->u.items[xi];
    const char *xname = r_str_at(anames, xi, NULL) ? r_str_at(anames, xi, NULL) : "1";
    const char *why = NULL;
    if (!rc_dims(xm, &nfeat, &ncell)) {
        const char *cls = r_class_name(xm);
        return cfs_err_setc(err, CFS_EREFUSED, "its assay '%s' is a %s, not a dgCMatrix or a "
                            "base matrix; save it with as(assay, \"dgCMatrix\")", xname,
                            cls ? cls : r_type_name(xm->type));
    }
    c->ds->n_obs = ncell;
    c->ds->n_vars = nfeat;
    cfs_elem *x = rc_matrix_t(c, xm, "X", &why, err);
    if (!x)
        return why ? cfs_err_setc(err, CFS_EREFUSED, "its assay '%s' is %s", xname, why)
                   : cfs_err_oom(err);
    if (cfs_elem_add_or_free(c->ds->root, x, err) < 0)
        return -1;
    cfs_elem *lay = cfs_elem_ensure_dict(c->ds->root, "layers");
    if (!lay)
        return cfs_err_oom(err);
    for (uint64_t i = 0; i < list->length; i++) {
        const char *an = r_str_at(anames, i, NULL);
        if (i == xi || !an)
            continue;
        char *where = cfs_strdupf("layers/%s", an);
        uint64_t r, k;
        int rc;
        if (!where)
            return cfs_err_oom(err);
        const r_obj *m = list->u.items[i];
        if (rc_dims(m, &r, &k) && (r != nfeat || k != ncell))
            rc = leave(c, where, "not the shape of the other assays", err);
        else {
            cfs_elem *el = rc_matrix_t(c, m, an, &why, err);
            rc = el ? cfs_elem_add_or_free(lay, el, err) : why ? leave(c, where, why, err)
                                                               : cfs_err_oom(err);
        }
        free(where);
        if (rc < 0)
            return -1;
    }
    const r_obj *feat = feature_names(sce);
    if (!feat)
        feat = rc_dimnames(xm, 0);
    const r_obj *rd = r_slot(sce, "elementMetadata");
    if (!df_list(rd) || df_list(rd)->length == 0) {
        const r_obj *rr = r_slot(sce, "rowRanges");
        const r_obj *mc = rr ? r_slot(rr, "elementMetadata") : NULL;
        if (df_list(mc))
            rd = mc;
    }
    if (frame(c, "var", rd, feat, nfeat, err) < 0)
        return -1;
    *ncell_out = ncell;
    *xm_out = xm;
    return 0;
}

/* The cells' names: colData's rownames, else X's column names (NULL: numbered). */
static const r_obj *cell_names(const r_obj *sce, const r_obj *xm)
{
    const r_obj *cells = df_rownames(r_slot(sce, "colData"));
    return cells ? cells : rc_dimnames(xm, 1);
}

/* What describes the cells: obs (colData), obsm (reducedDims), uns/metadata, into c->ds. */
static int cell_parts(const rconv *c, const r_obj *sce, const r_obj *cells, uint64_t ncell,
                      cfs_err *err)
{
    const char *why = NULL;
    if (frame(c, "obs", r_slot(sce, "colData"), cells, ncell, err) < 0)
        return -1;
    const r_obj *icd = df_list(r_slot(sce, "int_colData"));
    const r_obj *red = df_list(r_list_get(icd, "reducedDims"));
    const r_obj *rnames = r_attr(red, "names");
    cfs_elem *obsm = cfs_elem_ensure_dict(c->ds->root, "obsm");
    if (!obsm)
        return cfs_err_oom(err);
    for (uint64_t i = 0; red && i < red->length; i++) {
        const char *rn = r_str_at(rnames, i, NULL);
        char *key = rn ? rc_obsm_key(rn) : NULL;
        char *where = key ? cfs_strdupf("obsm/%s", key) : NULL;
        uint64_t r, k;
        int rc;
        if (!where) {
            free(key);
            if (!rn)
                continue;
            return cfs_err_oom(err);
        }
        const r_obj *m = red->u.items[i];
        if (!rc_dims(m, &r, &k) || r != ncell)
            rc = leave(c, where, "not a matrix of one row per cell", err);
        else if (cfs_elem_child(obsm, key))
            rc = leave(c, where, "a second reduced dimension of this name (lower-cased)", err);
        else {
            cfs_elem *el = rc_matrix(c, m, key, &why, err);
            rc = el ? cfs_elem_add_or_free(obsm, el, err) : why ? leave(c, where, why, err)
                                                                : cfs_err_oom(err);
        }
        free(key);
        free(where);
        if (rc < 0)
            return -1;
    }
    /* metadata(sce): its plain values */
    return rc_uns(c, r_slot(sce, "metadata"), "metadata", err) < 0 ? -1 : 0;
}

static int set_version(const rconv *c, const r_obj *sce, cfs_err *err)
{
    const r_obj *ver = r_list_get(r_slot(sce, "int_metadata"), "version");
    const r_obj *vv = ver && ver->type == R_VEC ? r_vec_at(ver, 0) : NULL;
    const int32_t *vi = vv && vv->type == R_INT && vv->length >= 3 ? r_ints(vv) : NULL;
    c->ds->format_version = vi ? cfs_strdupf("%s %d.%d.%d", r_class_name(sce), vi[0], vi[1],
                                             vi[2])
                               : cfs_strdupf("%s", r_class_name(sce));
    return c->ds->format_version ? 0 : cfs_err_oom(err);
}

/* An alternative experiment (altExps' SummarizedExperimentByColumn holds it in slot se) as a
 * modality's dataset over the same cells; NULL with err. */
static cfs_dataset *alt_modality(const rconv *c, const r_obj *wrapped, const r_obj *cells,
                                 uint64_t ncell, cfs_err *err)
{
    const r_obj *se = wrapped && wrapped->type == R_S4 ? r_slot(wrapped, "se") : NULL;
    if (!se || se->type != R_S4) {
        cfs_err_setc(err, CFS_EREFUSED, "not a SummarizedExperiment");
        return NULL;
    }
    rconv mc;
    cfs_dataset *sub = rc_modality_dataset(c, &mc, err);
    if (!sub)
        return NULL;
    uint64_t n = 0;
    const r_obj *xm = NULL;
    if (experiment_build(&mc, se, &n, &xm, err) < 0 ||
        (n != ncell && cfs_err_setc(err, CFS_EREFUSED, "it has %llu cells where the main "
                                    "experiment has %llu", (ull)n, (ull)ncell)) ||
        frame(&mc, "obs", NULL, cells, ncell, err) < 0) {
        cfs_dataset_free(sub);
        return NULL;
    }
    return sub;
}

/* The main experiment's name (mainExpName), or "main". */
static const char *main_name(const r_obj *sce)
{
    const char *n = r_str_at(r_list_get(r_slot(sce, "int_metadata"), "mainExpName"), 0, NULL);
    return n && *n ? n : "main";
}

/* An SCE with altExps: the main experiment and each alternative one a modality (stacked
 * features, the same cells), colData, reducedDims and metadata global. An altExp that cannot
 * be read is left out with its reason. */
static int sce_modalities(const rconv *c, const r_obj *sce, const r_obj *alt, cfs_err *err)
{
    rconv mc;
    cfs_dataset *main = rc_modality_dataset(c, &mc, err);
    if (!main)
        return -1;
    uint64_t ncell = 0;
    const r_obj *xm = NULL;
    if (experiment_build(&mc, sce, &ncell, &xm, err) < 0) {
        cfs_dataset_free(main);
        return -1;
    }
    const r_obj *cells = cell_names(sce, xm);
    if (frame(&mc, "obs", NULL, cells, ncell, err) < 0) {
        cfs_dataset_free(main);
        return -1;
    }
    if (!cfs_dataset_add_modality(c->ds, main_name(sce), main, err))
        return -1;
    const r_obj *altn = r_attr(alt, "names");
    for (uint64_t i = 0; i < alt->length; i++) {
        const char *an = r_str_at(altn, i, NULL);
        cfs_err aerr = {0};
        cfs_dataset *sub = an ? alt_modality(c, alt->u.items[i], cells, ncell, &aerr) : NULL;
        if (sub && !cfs_dataset_add_modality(c->ds, an, sub, err))
            return -1;
        if (!sub && aerr.status == CFS_ENOMEM) {
            *err = aerr;
            return -1;
        }
        if (!sub) {
            char *what = cfs_strdupf("altExp %s", an ? an : "?");
            int rc = what && cfs_dataset_leave_out(c->ds, what, "%s",
                                                   an ? aerr.msg : "it has no name") == 0;
            free(what);
            if (!rc)
                return cfs_err_oom(err);
        }
    }
    c->ds->n_obs = ncell;
    if (cell_parts(c, sce, cells, ncell, err) < 0)
        return -1;
    return cfs_mods_stack(c->ds, err);
}

int r_sce_build(const rconv *c, const r_obj *sce, cfs_err *err)
{
    const r_obj *icd = df_list(r_slot(sce, "int_colData"));
    const r_obj *alt = df_list(r_list_get(icd, "altExps"));
    int rc;
    if (alt && alt->length > 0)
        rc = sce_modalities(c, sce, alt, err);
    else {
        uint64_t ncell = 0;
        const r_obj *xm = NULL;
        rc = experiment_build(c, sce, &ncell, &xm, err);
        if (rc == 0)
            rc = cell_parts(c, sce, cell_names(sce, xm), ncell, err);
    }
    return rc < 0 ? -1 : set_version(c, sce, err);
}
