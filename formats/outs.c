/*
 * Cell Ranger output folders (outs/, an aggr's count/, multi's per_sample_outs/<s>/count/),
 * recognised by the files they hold whatever their name: the filtered matrix plus the analysis/
 * projections and clusterings Cell Ranger computed.
 *
 * The matrix: the filtered .h5 (read by the 10x reader, formats/hdf5/tenx.c) when there is one, else
 * the MatrixMarket folder (filtered_feature_bc_matrix/ of Cell Ranger >= 3, or Cell Ranger 2's
 * filtered_gene_bc_matrices/<genome>/), plain or gzipped, read by formats/mtx.c: the genes x
 * cells file is indexed as CSR over cells (see mtx.h for what is held in memory).
 *
 * The analysis: every projection.csv and clusters.csv below analysis/, found by walking the
 * tree (formats/projections.c: Cell Ranger's paths changed with its versions). Projections
 * become obsm arrays, read and named by projections.c (X_umap, X_tsne, X_pca, X_<basis>_<n>d,
 * X_<modality>_umap; see projections.h); clusterings obs categoricals (Cell Ranger's integer
 * labels as string categories in numeric order, code -1 for cells the CSV does not list). A CSV
 * that cannot be joined safely to the matrix (a malformed row, a barcode the matrix lacks, a
 * barcode listed twice) is left out whole with its reason: never a partial or shifted value.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup, strndup */
#endif

#include "csv.h"
#include "strlist.h"
#include "strfmt.h"
#include "format.h"
#include "mex.h"
#include "number.h"
#include "path.h"
#include "projections.h"
#include "strset.h"
#include "tenx.h"

#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define OUTS_FORMAT "cellranger-outs"
#define BID_OUTS 80
#define GE_PREFIX CFS_ANALYSIS_GE_PREFIX

#define NO_PROJECTION                                                                          \
    "its analysis/ folder holds no projection.csv (Cell Ranger ran with --nosecondary?); run " \
    "cellranger reanalyze, or add an embedding (e.g. scanpy's sc.tl.umap) and export again"
#define NO_ANALYSIS                                                                            \
    "it has no analysis/ folder (Cell Ranger ran with --nosecondary?); run cellranger "        \
    "reanalyze, or add an embedding (e.g. scanpy's sc.tl.umap) and export again"
#define ALL_LEFT_OUT                                                                           \
    "every analysis/ projection was left out (see the reasons above); fix or re-create the "   \
    "CSVs (cellranger reanalyze) and export again"

typedef unsigned long long ull;

/* The filtered .h5 names, in order of preference, then the MatrixMarket folders. */
static const char *const h5_names[] = {
    "filtered_feature_bc_matrix.h5",
    "sample_filtered_feature_bc_matrix.h5",
    "filtered_gene_bc_matrices_h5.h5",
    NULL,
};
static const char *const mex_dirs[] = {
    "filtered_feature_bc_matrix",
    "sample_filtered_feature_bc_matrix",
    NULL,
};
#define LEGACY_MEX_DIR "filtered_gene_bc_matrices"
/* Where a run folder keeps them: the folder itself, its outs/, an aggr's count/. */
static const char *const bases[] = {"", "outs", "count", "outs/count", NULL};

static bool is_file(const char *dir, const char *name)
{
    char *p = cfs_path_join(dir, name);
    struct stat st;
    bool ok = p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
    free(p);
    return ok;
}

static bool is_dir(const char *dir, const char *name)
{
    char *p = cfs_path_join(dir, name);
    struct stat st;
    bool ok = p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
    free(p);
    return ok;
}

/* Entries of a folder (not hidden), sorted by name. */
static int list_dir(const char *path, cfs_strlist *out)
{
    char **names;
    size_t n;
    if (cfs_path_list(path, &names, &n) < 0)
        return -1;
    cfs_strlist_free(out);
    out->v = names;
    out->n = out->cap = n;
    return 0;
}

/* The first of the names that is a file in dir, or NULL. */
static const char *first_file(const char *dir, const char *const *names)
{
    for (size_t i = 0; names[i]; i++)
        if (is_file(dir, names[i]))
            return names[i];
    return NULL;
}

static const char *const mtx_names[] = {"matrix.mtx.gz", "matrix.mtx", NULL};

/* ------------------------------------------------------------------------------------------ */
/* Finding the matrix */

typedef enum matrix_kind { MX_NONE, MX_H5, MX_MEX } matrix_kind;

typedef struct outs_matrix {
    matrix_kind kind;
    char *base;          /* the folder holding it (path given, or path/outs, ...) */
    char *base_rel;      /* base relative to the path given: "" or "outs/" ... */
    char *dir;           /* MEX: the folder of matrix.mtx[.gz]; H5: the .h5 file */
    char *rel;           /* dir relative to the path given, for messages */
    bool legacy;         /* Cell Ranger 1.x/2.x names */
    cfs_strlist genomes;    /* MEX legacy: every genome folder (the first is served) */
} outs_matrix;

static void matrix_free(outs_matrix *mx)
{
    free(mx->base);
    free(mx->base_rel);
    free(mx->dir);
    free(mx->rel);
    cfs_strlist_free(&mx->genomes);
    memset(mx, 0, sizeof *mx);
}

/* Genome folders of filtered_gene_bc_matrices/ that hold a matrix. */
static int legacy_genomes(const char *base, cfs_strlist *out)
{
    char *top = cfs_path_join(base, LEGACY_MEX_DIR);
    cfs_strlist names = {0};
    int rc = top ? list_dir(top, &names) : -1;
    for (size_t i = 0; rc == 0 && i < names.n; i++) {
        char *g = cfs_path_join(top, names.v[i]);
        if (!g) {
            rc = -1;
            break;
        }
        if (first_file(g, mtx_names))
            rc = cfs_strlist_push(out, strdup(names.v[i]));
        free(g);
    }
    cfs_strlist_free(&names);
    free(top);
    return rc;
}

/* Fills mx from base if it holds a filtered matrix; 1 found, 0 not, -1 allocation failure. */
static int matrix_in(const char *base, outs_matrix *mx)
{
    const char *h5 = first_file(base, h5_names);
    if (h5) {
        mx->kind = MX_H5;
        mx->legacy = strcmp(h5, "filtered_gene_bc_matrices_h5.h5") == 0;
        return (mx->dir = cfs_path_join(base, h5)) && (mx->rel = strdup(h5)) ? 1 : -1;
    }
    for (size_t i = 0; mex_dirs[i]; i++) {
        char *d = cfs_path_join(base, mex_dirs[i]);
        if (!d)
            return -1;
        if (first_file(d, mtx_names)) {
            mx->kind = MX_MEX;
            mx->dir = d;
            return (mx->rel = strdup(mex_dirs[i])) ? 1 : -1;
        }
        free(d);
    }
    if (!is_dir(base, LEGACY_MEX_DIR))
        return 0;
    if (legacy_genomes(base, &mx->genomes) < 0)
        return -1;
    if (mx->genomes.n == 0)
        return 0;
    mx->kind = MX_MEX;
    mx->legacy = true;
    char *top = cfs_path_join(base, LEGACY_MEX_DIR);
    mx->dir = top ? cfs_path_join(top, mx->genomes.v[0]) : NULL;
    free(top);
    mx->rel = cfs_strdupf("%s/%s", LEGACY_MEX_DIR, mx->genomes.v[0]);
    return mx->dir && mx->rel ? 1 : -1;
}

/* The folder's matrix: in the folder itself or its outs/ (count/, outs/count/). */
static int find_matrix(const char *path, outs_matrix *mx)
{
    memset(mx, 0, sizeof *mx);
    for (size_t i = 0; bases[i]; i++) {
        char *base = bases[i][0] ? cfs_path_join(path, bases[i]) : strdup(path);
        if (!base)
            return -1;
        struct stat st;
        int rc = stat(base, &st) == 0 && S_ISDIR(st.st_mode) ? matrix_in(base, mx) : 0;
        if (rc == 1) {
            mx->base = base;
            mx->base_rel = bases[i][0] ? cfs_strdupf("%s/", bases[i]) : strdup("");
            char *rel = mx->base_rel ? cfs_strdupf("%s%s", mx->base_rel, mx->rel) : NULL;
            free(mx->rel);
            mx->rel = rel;
            if (!mx->base_rel || !rel) {
                matrix_free(mx);
                return -1;
            }
            return 1;
        }
        free(base);
        if (rc < 0) {
            matrix_free(mx);
            return -1;
        }
        matrix_free(mx);
    }
    return 0;
}

static int outs_probe(cfs_probe_input *in)
{
    if (!cfs_probe_is_dir(in))
        return 0;
    outs_matrix mx;
    int rc = find_matrix(cfs_probe_path(in), &mx);
    matrix_free(&mx);
    return rc == 1 ? BID_OUTS : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Model helpers */

static cfs_elem *mem_elem(cfs_elem_kind kind, const char *name, cfs_dtype t, int ndim,
                          const uint64_t *shape, void *data)
{
    cfs_elem *el = cfs_elem_new(kind, name);
    if (el && !(el->values = cfs_array_from_memory(t, ndim, shape, data))) {
        cfs_elem_free(el);
        el = NULL;
    }
    return el;
}

/* A string array element of n strings (ownership of strs and its strings passes). */
static cfs_elem *strings_elem(const char *name, char **strs, uint64_t n)
{
    cfs_elem *el = mem_elem(CFS_EL_ARRAY, name, CFS_STRING, 1, &n, strs);
    if (!el) {
        cfs_strings_free(strs, (size_t)n);
        free(strs);
    }
    return el;
}

static int add(cfs_elem *parent, cfs_elem *child, cfs_err *err)
{
    if (child && cfs_elem_add(parent, child) == 0)
        return 0;
    cfs_elem_free(child);
    return cfs_err_oom(err);
}

/* ------------------------------------------------------------------------------------------ */
/* The MatrixMarket folder */

typedef struct mex_files {
    char *matrix, *features, *barcodes;          /* paths */
    char *matrix_rel, *features_rel, *barcodes_rel;
    bool legacy_genes;                           /* genes.tsv: id and symbol only */
} mex_files;

static void mex_files_free(mex_files *f)
{
    free(f->matrix);
    free(f->features);
    free(f->barcodes);
    free(f->matrix_rel);
    free(f->features_rel);
    free(f->barcodes_rel);
}

/* Nothing is read outside the folder given: a file of it that is a symlink leading out (or in
 * a folder that is one) refuses the folder rather than serve what lies elsewhere. */
static int leads_out(const char *rel, cfs_err *err)
{
    return cfs_err_setc(err, CFS_EREFUSED, "%s is a symlink leading out of the folder, and "
                        "nothing outside it is read; copy the file into the folder, or mount "
                        "the folder it leads to", rel);
}

static int mex_pick(const outs_matrix *mx, const char *const *names, char **path, char **rel)
{
    const char *name = first_file(mx->dir, names);
    if (!name)
        return 0;
    *path = cfs_path_join(mx->dir, name);
    *rel = cfs_strdupf("%s/%s", mx->rel, name);
    return *path && *rel ? 1 : -1;
}

static int mex_locate(const outs_matrix *mx, mex_files *f, cfs_err *err)
{
    static const char *const features[] = {"features.tsv.gz", "features.tsv", NULL};
    static const char *const genes[] = {"genes.tsv.gz", "genes.tsv", NULL};
    static const char *const barcodes[] = {"barcodes.tsv.gz", "barcodes.tsv", NULL};
    memset(f, 0, sizeof *f);
    int rc = mex_pick(mx, mtx_names, &f->matrix, &f->matrix_rel);
    if (rc > 0 && (rc = mex_pick(mx, features, &f->features, &f->features_rel)) == 0) {
        rc = mex_pick(mx, genes, &f->features, &f->features_rel);
        f->legacy_genes = rc > 0;
    }
    if (rc < 0)
        return cfs_err_oom(err);
    if (rc == 0)
        return cfs_err_set(err, "%s/ has a matrix but no features.tsv.gz or genes.tsv (the gene "
                           "list); copy the whole folder from the Cell Ranger run", mx->rel);
    if ((rc = mex_pick(mx, barcodes, &f->barcodes, &f->barcodes_rel)) < 0)
        return cfs_err_oom(err);
    if (rc == 0)
        return cfs_err_set(err, "%s/ has a matrix but no barcodes.tsv.gz or barcodes.tsv (the "
                           "cell list); copy the whole folder from the Cell Ranger run", mx->rel);
    return 0;
}

static int open_mex(const char *path, const outs_matrix *mx, cfs_dataset **out, cfs_err *err)
{
    mex_files f;
    int rc = mex_locate(mx, &f, err);
    const char *const files[] = {f.matrix, f.features, f.barcodes};
    const char *const rels[] = {f.matrix_rel, f.features_rel, f.barcodes_rel};
    for (size_t i = 0; rc == 0 && i < 3; i++)
        if (!cfs_path_inside(files[i], path))
            rc = leads_out(rels[i], err);
    if (rc == 0) {
        cfs_mex_spec spec = {
            .matrix = {f.matrix, f.matrix_rel},
            .cells = {f.barcodes, f.barcodes_rel},
            .genes = {f.features, f.features_rel},
            .gene_fields = f.legacy_genes ? 2 : 3,
            .fixed = true,   /* Cell Ranger writes genes x cells */
            .redo = "re-download the file or re-run Cell Ranger",
            .regroup = "copy the whole folder from one Cell Ranger run",
        };
        rc = cfs_mex_open(path, &spec, out, err);
    }
    for (size_t i = 1; rc == 0 && i < mx->genomes.n; i++) {
        char element[300];
        snprintf(element, sizeof element, "genome %s", mx->genomes.v[i]);
        if (cfs_dataset_leave_out(*out, element, "%s%s/ holds one matrix per genome and only "
                                  "the first, '%s', is served; to serve '%s', open %s%s/%s alone",
                                  mx->base_rel, LEGACY_MEX_DIR, mx->genomes.v[0],
                                  mx->genomes.v[i], mx->base_rel, LEGACY_MEX_DIR,
                                  mx->genomes.v[i]) < 0)
            rc = cfs_err_oom(err);
    }
    mex_files_free(&f);
    if (rc < 0 && *out) {
        cfs_dataset_free(*out);
        *out = NULL;
    }
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* analysis/ CSVs (found by projections.c; the projections read there, the clusterings here) */

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- clusterings ---- */

/* The obs column of a clusters.csv: its folders after clustering/, gene_expression_ dropped,
 * joined by '_' (graphclust, kmeans_3_clusters; 1.x kmeans/3_clusters -> kmeans_3_clusters). */
static char *cluster_name(const cfs_analysis_csv *c)
{
    char name[512] = "";
    size_t nl = 0;
    for (size_t i = 0; i < c->ndirs; i++) {
        const char *d = c->dirs[i];
        if (i == 0 && strcmp(d, "clustering") == 0)
            continue;
        if (starts_with(d, GE_PREFIX) && d[strlen(GE_PREFIX)])
            d += strlen(GE_PREFIX);
        int w = snprintf(name + nl, sizeof name - nl, "%s%s", nl ? "_" : "", d);
        if (w < 0 || (size_t)w >= sizeof name - nl)
            return NULL;
        nl += (size_t)w;
    }
    return strdup(nl ? name : "clusters");
}

typedef struct cluster_rows {
    int64_t *label;        /* per cell, valid where seen */
    unsigned char *seen;
    uint64_t rows;
} cluster_rows;

typedef struct cluster_walk {
    const cfs_analysis_csv *c;
    cluster_rows *cr;
} cluster_walk;

static int clusters_header(void *ctx, char **fld, long nf, long *nfields, char **why)
{
    const cluster_walk *cw = ctx;
    if (nf != 2 || strcasecmp(fld[0], "Barcode") != 0 || strcasecmp(fld[1], "Cluster") != 0) {
        *why = cfs_strdupf("%s: the header is not Barcode,Cluster, as Cell Ranger writes it",
                    cw->c->rel);
        return 1;
    }
    *nfields = 2;
    return 0;
}

static int clusters_row(void *ctx, uint64_t r, uint64_t ln, char **fld, char **why)
{
    const cluster_walk *cw = ctx;
    int64_t v;
    if (!cfs_parse_i64(fld[1], &v)) {
        *why = cfs_strdupf("%s: line %llu: cluster '%.40s' is not an integer", cw->c->rel, (ull)ln,
                    fld[1]);
        return 1;
    }
    cw->cr->label[r] = v;
    cw->cr->rows++;
    return 0;
}

/* Parses a clusters.csv; *msg says why it is left out (NULL: it parsed). -1 on allocation
 * failure. */
static int parse_clusters(const cfs_analysis_csv *c, const cfs_strset *map, uint64_t n_obs,
                          cluster_rows *cr, char **msg)
{
    cluster_walk cw = {c, cr};
    cfs_csv_walk w = {c->path, c->rel, map, n_obs, cr->seen, clusters_header, clusters_row, &cw};
    return cfs_csv_walk_run(&w, msg);
}

/* The categories of a clustering: Cell Ranger's integer labels as strings ("1", "2", ...), in
 * numeric order. Strings because JS viewers (Vitessce's AnnData loader) show numeric categories
 * by their codes, and because scanpy and Seurat users see cluster labels as strings. */
static cfs_elem *label_strings(const int64_t *labels, uint64_t n)
{
    char **strs = calloc(n ? n : 1, sizeof *strs);
    for (uint64_t i = 0; strs && i < n; i++)
        if (!(strs[i] = cfs_strdupf("%lld", (long long)labels[i]))) {
            cfs_strings_free(strs, (size_t)i);
            free(strs);
            return NULL;
        }
    return strs ? strings_elem("categories", strs, n) : NULL;
}

/* The categorical: categories = the distinct labels in numeric order, as strings; codes index
 * them, -1 for cells the CSV does not list. NULL on allocation failure. */
static cfs_elem *categorical(const char *name, const cluster_rows *cr, uint64_t n_obs)
{
    int64_t *cats = malloc((cr->rows ? cr->rows : 1) * sizeof *cats);
    if (!cats)
        return NULL;
    uint64_t k = 0;
    for (uint64_t r = 0; r < n_obs; r++)
        if (cr->seen[r])
            cats[k++] = cr->label[r];
    qsort(cats, k, sizeof *cats, cmp_i64);
    uint64_t ncat = 0;
    for (uint64_t i = 0; i < k; i++)
        if (ncat == 0 || cats[ncat - 1] != cats[i])
            cats[ncat++] = cats[i];
    cfs_dtype ct = ncat <= INT8_MAX ? CFS_INT8 : ncat <= INT16_MAX ? CFS_INT16 : CFS_INT32;
    void *codes = malloc((n_obs ? n_obs : 1) * cfs_dtype_size(ct));
    if (!codes) {
        free(cats);
        return NULL;
    }
    for (uint64_t r = 0; r < n_obs; r++) {
        int64_t code = -1;
        if (cr->seen[r]) {
            uint64_t lo = 0, hi = ncat;
            while (lo < hi) {
                uint64_t mid = (lo + hi) / 2;
                if (cats[mid] < cr->label[r])
                    lo = mid + 1;
                else
                    hi = mid;
            }
            code = (int64_t)lo;
        }
        if (ct == CFS_INT8)
            ((int8_t *)codes)[r] = (int8_t)code;
        else if (ct == CFS_INT16)
            ((int16_t *)codes)[r] = (int16_t)code;
        else
            ((int32_t *)codes)[r] = (int32_t)code;
    }
    cfs_elem *el = mem_elem(CFS_EL_CATEGORICAL, name, ct, 1, &n_obs, codes);
    if (!el) {
        free(codes);
        free(cats);
        return NULL;
    }
    el->categories = label_strings(cats, ncat);
    free(cats);
    if (!el->categories) {
        cfs_elem_free(el);
        return NULL;
    }
    return el;
}

/* Reads one clusters.csv as the obs categorical `name`; *why when it is left out. -1 only on
 * allocation failure. */
static int read_clusters(const cfs_analysis_csv *c, const char *name, const cfs_strset *map,
                         uint64_t n_obs, cfs_elem **out, char **why, cfs_err *err)
{
    *out = NULL;
    size_t n = n_obs ? (size_t)n_obs : 1;
    cluster_rows cr = {malloc(n * sizeof(int64_t)), calloc(n, 1), 0};
    int rc = cr.label && cr.seen ? parse_clusters(c, map, n_obs, &cr, why) : -1;
    if (rc == 0 && !*why && !(*out = categorical(name, &cr, n_obs)))
        rc = -1;
    free(cr.label);
    free(cr.seen);
    return rc < 0 ? cfs_err_oom(err) : 0;
}

/* ---- attaching them ---- */

typedef struct version_hints {
    bool gene_expression;  /* Cell Ranger >= 7 names */
    bool flat;             /* Cell Ranger 1.x names (pca/projection.csv, kmeans/N_clusters) */
    bool any_projection;
    bool any_drawable;
} version_hints;

static int attach_clusters(cfs_dataset *ds, const cfs_analysis *a, const cfs_strset *map,
                           cfs_err *err)
{
    cfs_elem *obs = cfs_elem_child(ds->root, "obs");
    for (size_t i = 0; i < a->n; i++) {
        const cfs_analysis_csv *c = &a->v[i];
        if (!c->clusters)
            continue;
        char *name = cluster_name(c);
        if (!name)
            return cfs_err_oom(err);
        char element[600];
        snprintf(element, sizeof element, "obs/%s", name);
        int rc = 0;
        if (cfs_elem_child(obs, name) || strcmp(name, "_index") == 0) {
            rc = cfs_dataset_leave_out(ds, element, "%s would be a second obs column '%s'; it "
                                       "was not read", c->rel, name) < 0 ? cfs_err_oom(err) : 0;
        } else {
            cfs_elem *el;
            char *why = NULL;
            rc = read_clusters(c, name, map, ds->n_obs, &el, &why, err);
            if (rc == 0 && why) {
                rc = cfs_dataset_leave_out(ds, element, "%s; it was not read", why) < 0
                         ? cfs_err_oom(err) : 0;
                free(why);
            } else if (rc == 0) {
                rc = add(obs, el, err);
            }
        }
        free(name);
        if (rc < 0)
            return -1;
    }
    return 0;
}

static void version_from_paths(const cfs_analysis *a, version_hints *vh)
{
    for (size_t i = 0; i < a->n; i++) {
        const cfs_analysis_csv *c = &a->v[i];
        for (size_t k = 0; k < c->ndirs; k++)
            if (starts_with(c->dirs[k], GE_PREFIX))
                vh->gene_expression = true;
        if (c->ndirs == 1 && !c->clusters)
            vh->flat = true; /* analysis/pca/projection.csv */
        if (c->ndirs >= 1 && strcmp(c->dirs[0], "kmeans") == 0)
            vh->flat = true; /* analysis/kmeans/10_clusters/clusters.csv */
    }
}

static int attach_analysis(cfs_dataset *ds, const char *path, const outs_matrix *mx,
                           version_hints *vh, bool *have_analysis, cfs_err *err)
{
    *have_analysis = false;
    char *dir = cfs_path_join(mx->base, "analysis");
    char *rel = cfs_strdupf("%sanalysis", mx->base_rel);
    if (!dir || !rel) {
        free(dir);
        free(rel);
        return cfs_err_oom(err);
    }
    struct stat st;
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        free(dir);
        free(rel);
        return 0;
    }
    *have_analysis = true;
    cfs_analysis a = {0};
    int rc = cfs_analysis_walk(&a, dir, rel, path) < 0 ? cfs_err_oom(err) : 0;
    version_from_paths(&a, vh);
    char **names = NULL;
    cfs_strset *map = NULL;
    uint64_t dup = UINT64_MAX;
    if (rc == 0 && a.n && cfs_obs_barcodes(ds, &names, &map, &dup, err) < 0)
        rc = -1;
    if (rc == 0 && a.n && dup != UINT64_MAX) {
        /* a CSV row cannot be told which of the two cells it means */
        vh->any_projection = true;
        if (cfs_dataset_leave_out(ds, rel, "the matrix lists barcode %s twice (row %llu), so "
                                  "its CSVs cannot be joined to its cells; none was read",
                                  names[dup], (ull)dup + 1) < 0)
            rc = cfs_err_oom(err);
    } else {
        cfs_projection_report pr = {0};
        if (rc == 0 && a.n)
            rc = cfs_projections_attach(ds, &a, map, NULL, &pr, err);
        vh->any_projection |= pr.any_projection;
        vh->any_drawable |= pr.any_drawable;
        if (rc == 0 && a.n)
            rc = attach_clusters(ds, &a, map, err);
    }
    if (rc == 0 && a.truncated &&
        cfs_dataset_leave_out(ds, rel, "it holds more than %d CSVs; only the first %d (in name "
                              "order) were read", CFS_ANALYSIS_MAX_FILES,
                              CFS_ANALYSIS_MAX_FILES) < 0)
        rc = cfs_err_oom(err);
    if (names) {
        cfs_strings_free(names, (size_t)ds->n_obs);
        free(names);
    }
    cfs_strset_free(map);
    cfs_analysis_free(&a);
    free(dir);
    free(rel);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Open */

static int set_version(cfs_dataset *ds, const outs_matrix *mx, const version_hints *vh,
                       bool have_analysis)
{
    char fv[600];
    if (vh->gene_expression)
        snprintf(fv, sizeof fv, "Cell Ranger >= 7 (gene_expression_ analysis; %s%s)",
                 mx->kind == MX_MEX ? "MatrixMarket " : "", mx->rel);
    else if (mx->legacy && vh->flat)
        snprintf(fv, sizeof fv, "Cell Ranger 1.x (%s%s)", mx->kind == MX_MEX ? "MatrixMarket "
                                                                              : "", mx->rel);
    else if (mx->legacy)
        snprintf(fv, sizeof fv, "Cell Ranger %s (%s%s)", mx->kind == MX_MEX ? "2.x" : "1.2-2.x",
                 mx->kind == MX_MEX ? "MatrixMarket " : "", mx->rel);
    else
        snprintf(fv, sizeof fv, "Cell Ranger %s (%s%s)", have_analysis ? "3-6" : ">= 3",
                 mx->kind == MX_MEX ? "MatrixMarket " : "", mx->rel);
    free(ds->format_version);
    return (ds->format_version = strdup(fv)) ? 0 : -1;
}

static int outs_open(const char *path, cfs_dataset **out, cfs_err *err)
{
    *out = NULL;
    outs_matrix mx;
    int found = find_matrix(path, &mx);
    if (found < 0)
        return cfs_err_oom(err);
    if (found == 0)
        return cfs_err_set(err, "a folder without a Cell Ranger filtered matrix "
                           "(filtered_feature_bc_matrix.h5 or a filtered_feature_bc_matrix/ "
                           "folder); open the run's outs/ folder");
    cfs_dataset *ds = NULL;
    int rc = 0;
    if (!cfs_path_inside(mx.dir, path))
        rc = leads_out(mx.rel, err);
    else if (mx.kind == MX_H5) {
        rc = cfs_tenx_open(mx.dir, &ds, err);
        if (rc < 0) {
            cfs_err_prefix(err, "%s", mx.rel);
        } else {
            char *src = strdup(path);
            if (!src) {
                rc = cfs_err_oom(err);
            } else {
                free(ds->source);
                ds->source = src;
            }
        }
    } else {
        rc = open_mex(path, &mx, &ds, err);
    }
    version_hints vh = {0};
    bool have_analysis = false;
    if (rc == 0)
        rc = attach_analysis(ds, path, &mx, &vh, &have_analysis, err);
    if (rc == 0 && set_version(ds, &mx, &vh, have_analysis) < 0)
        rc = cfs_err_oom(err);
    const char *hint = !have_analysis ? NO_ANALYSIS
                     : !vh.any_projection ? NO_PROJECTION
                     : !vh.any_drawable ? ALL_LEFT_OUT : NULL;
    if (rc == 0 && hint && !(ds->no_embedding_hint = strdup(hint)))
        rc = cfs_err_oom(err);
    matrix_free(&mx);
    if (rc < 0) {
        cfs_dataset_free(ds);
        return -1;
    }
    *out = ds;
    return 0;
}

/* A multi run keeps one count run per sample below the run folder or its outs/. */
static const char *const multi_samples[] = {
    "per_sample_outs/*/count", "outs/per_sample_outs/*/count", NULL,
};

static const char *const run_folder_names[] = {"outs", "count", NULL};

const cfs_format cfs_format_outs = {
    .name = OUTS_FORMAT,
    .summary = "Cell Ranger run folders (outs/ with filtered_feature_bc_matrix, .h5 or "
               "MatrixMarket)",
    .folders = true,
    .unnamed_folders = run_folder_names,
    .nested = multi_samples,
    .probe = outs_probe,
    .open = outs_open,
};
