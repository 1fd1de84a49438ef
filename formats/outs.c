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
 * tree (Cell Ranger's paths changed with its versions: flat in 1.x, N_components in 2-6,
 * gene_expression_ prefixes from 7). Projections become obsm arrays (float64, NaN for cells the
 * CSV does not list), clusterings obs categoricals (Cell Ranger's integer labels as string
 * categories in numeric order, code -1 for cells the CSV does not list). A CSV that cannot be joined safely to
 * the matrix (a malformed row, a barcode the matrix lacks, a barcode listed twice) is left out
 * whole with its reason: never a partial or shifted value.
 *
 * Naming (the Cellucid file-format rules): a projection is obsm X_<basis> (X_umap, X_tsne,
 * X_pca). When one basis comes in several widths (a 2-d and a 3-d UMAP), each is
 * X_<basis>_<n>d (X_umap_2d, X_umap_3d): a suffixed key fills its own dimension, and once
 * X_umap_3d exists a plain X_umap would no longer fill the 2-d view. Another modality's
 * projection (antibody_capture_2_components) is X_antibody_capture_umap.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup, strndup */
#endif

#include "csv.h"
#include "strfmt.h"
#include "format.h"
#include "mex.h"
#include "number.h"
#include "path.h"
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
#define WALK_MAX_DEPTH 8
#define WALK_MAX_FILES 4096
#define PROJ_MAX_COMPONENTS 10000
#define GE_PREFIX "gene_expression_"

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

typedef struct str_list {
    char **v;
    size_t n, cap;
} str_list;

static void str_list_free(str_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

/* Appends s (ownership passes; freed on failure). */
static int str_list_push(str_list *l, char *s)
{
    if (!s)
        return -1;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            free(s);
            return -1;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = s;
    return 0;
}

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

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Entries of a folder (not hidden), sorted by name. */
static int list_dir(const char *path, str_list *out)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)))
        if (e->d_name[0] != '.')
            rc = str_list_push(out, strdup(e->d_name));
    closedir(d);
    if (rc == 0 && out->n)
        qsort(out->v, out->n, sizeof *out->v, cmp_str);
    return rc;
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
    str_list genomes;    /* MEX legacy: every genome folder (the first is served) */
} outs_matrix;

static void matrix_free(outs_matrix *mx)
{
    free(mx->base);
    free(mx->base_rel);
    free(mx->dir);
    free(mx->rel);
    str_list_free(&mx->genomes);
    memset(mx, 0, sizeof *mx);
}

/* Genome folders of filtered_gene_bc_matrices/ that hold a matrix. */
static int legacy_genomes(const char *base, str_list *out)
{
    char *top = cfs_path_join(base, LEGACY_MEX_DIR);
    str_list names = {0};
    int rc = top ? list_dir(top, &names) : -1;
    for (size_t i = 0; rc == 0 && i < names.n; i++) {
        char *g = cfs_path_join(top, names.v[i]);
        if (!g) {
            rc = -1;
            break;
        }
        if (first_file(g, mtx_names))
            rc = str_list_push(out, strdup(names.v[i]));
        free(g);
    }
    str_list_free(&names);
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
/* Barcode -> row */

/* Builds the map (borrowing names); *dup receives the first row whose barcode an earlier row
 * already has, or UINT64_MAX. NULL on allocation failure. */
static cfs_strset *map_build(char **names, uint64_t n, uint64_t *dup)
{
    *dup = UINT64_MAX;
    cfs_strset *m = cfs_strset_new((size_t)n);
    for (uint64_t r = 0; m && r < n; r++) {
        int added = cfs_strset_add(m, names[r], r);
        if (added < 0) {
            cfs_strset_free(m);
            return NULL;
        }
        if (added == 0 && *dup == UINT64_MAX)
            *dup = r;
    }
    return m;
}

/* ------------------------------------------------------------------------------------------ */
/* analysis/ CSVs */

typedef enum csv_kind { CSV_PROJECTION, CSV_CLUSTERS } csv_kind;

typedef struct analysis_csv {
    csv_kind kind;
    char *path;
    char *rel;             /* relative to the folder given */
    str_list dirs;         /* folders between analysis/ and the file */
} analysis_csv;

typedef struct analysis {
    analysis_csv *v;
    size_t n, cap;
    bool truncated;
} analysis;

static void analysis_free(analysis *a)
{
    for (size_t i = 0; i < a->n; i++) {
        free(a->v[i].path);
        free(a->v[i].rel);
        str_list_free(&a->v[i].dirs);
    }
    free(a->v);
}

static int walk(analysis *a, const char *abs, const char *rel, str_list *dirs, int depth)
{
    str_list names = {0};
    if (list_dir(abs, &names) < 0) {
        str_list_free(&names);
        return 0; /* an unreadable sub-folder holds nothing we can use */
    }
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < names.n; i++) {
        const char *name = names.v[i];
        char *p = cfs_path_join(abs, name), *r = cfs_strdupf("%s/%s", rel, name);
        struct stat st;
        if (!p || !r) {
            rc = -1;
        } else if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            /* no symlinked folders: a link cycle must not take the walk hostage */
            if (depth < WALK_MAX_DEPTH) {
                rc = str_list_push(dirs, strdup(name));
                if (rc == 0) {
                    rc = walk(a, p, r, dirs, depth + 1);
                    free(dirs->v[--dirs->n]);
                }
            }
        } else if ((strcmp(name, "projection.csv") == 0 || strcmp(name, "clusters.csv") == 0) &&
                   stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            if (a->n == WALK_MAX_FILES) {
                a->truncated = true;
            } else {
                if (a->n == a->cap) {
                    size_t cap = a->cap ? a->cap * 2 : 16;
                    analysis_csv *v = realloc(a->v, cap * sizeof *v);
                    if (!v) {
                        rc = -1;
                        goto next;
                    }
                    a->v = v;
                    a->cap = cap;
                }
                analysis_csv *c = &a->v[a->n++];
                memset(c, 0, sizeof *c);
                c->kind = name[0] == 'p' ? CSV_PROJECTION : CSV_CLUSTERS;
                c->path = p;
                c->rel = r;
                p = r = NULL;
                for (size_t k = 0; rc == 0 && k < dirs->n; k++)
                    rc = str_list_push(&c->dirs, strdup(dirs->v[k]));
            }
        }
    next:
        free(p);
        free(r);
    }
    str_list_free(&names);
    return rc;
}

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* "<prefix><N>_components": the prefix length and N; false if the name is not of that form. */
static bool components_dir(const char *name, size_t *prefix_len, uint64_t *n)
{
    const char *suffix = "_components";
    size_t len = strlen(name), sl = strlen(suffix);
    if (len <= sl || strcmp(name + len - sl, suffix) != 0)
        return false;
    size_t end = len - sl, start = end;
    while (start > 0 && isdigit((unsigned char)name[start - 1]))
        start--;
    if (start == end || (start > 0 && name[start - 1] != '_'))
        return false;
    uint64_t v = 0;
    for (size_t i = start; i < end && v < PROJ_MAX_COMPONENTS * 10ull; i++)
        v = v * 10 + (uint64_t)(name[i] - '0');
    *prefix_len = start;
    *n = v;
    return true;
}

/* ---- projections ---- */

typedef struct projection {
    const analysis_csv *csv;
    char *basis;           /* "umap", "antibody_capture_umap", ... */
    uint64_t ncomp;
    double *values;        /* n_obs x ncomp; NULL when left out */
    char *why;             /* the reason it was left out */
    bool header_ok;        /* named and sized from its header (else from its path) */
    char *key;
} projection;

/* "UMAP-1", ...: the kind's letters must match and the numbers run 1..n. */
static bool component_name(const char *f, const char *kind, size_t kl, uint64_t want)
{
    if (strncasecmp(f, kind, kl) != 0 || f[kl] != '-')
        return false;
    uint64_t v = 0;
    const char *p = f + kl + 1;
    if (!*p)
        return false;
    for (; *p; p++) {
        if (!isdigit((unsigned char)*p) || v > PROJ_MAX_COMPONENTS)
            return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    return v == want;
}

static char *lower_dup(const char *s, size_t n)
{
    char *d = strndup(s, n);
    for (char *p = d; p && *p; p++)
        *p = (char)tolower((unsigned char)*p);
    return d;
}

/* Appends "part_" to buf (bounded). */
static void append_part(char *buf, size_t cap, const char *part, size_t plen)
{
    size_t len = strlen(buf);
    if (len + plen + 2 > cap)
        return;
    memcpy(buf + len, part, plen);
    buf[len + plen] = '_';
    buf[len + plen + 1] = '\0';
}

/* The basis from the header's kind (PC -> pca) and the path's modality: folder names that are
 * not a basis's own, and a components folder's prefix other than gene_expression_
 * (antibody_capture_2_components -> antibody_capture_umap). */
static char *basis_name(const analysis_csv *c, const char *kind)
{
    static const char *const known[][2] = {{"pc", "pca"}, {"tsne", "tsne"}, {"umap", "umap"}};
    const char *b = kind;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(kind, known[i][0]) == 0)
            b = known[i][1];
    char mod[512] = "";
    for (size_t i = 0; i < c->dirs.n; i++) {
        const char *d = c->dirs.v[i];
        size_t pl;
        uint64_t n;
        if (components_dir(d, &pl, &n)) {
            if (pl > 1 && !starts_with(d, GE_PREFIX))
                append_part(mod, sizeof mod, d, pl - 1);
        } else if (strcmp(d, "pca") != 0 && strcmp(d, "tsne") != 0 && strcmp(d, "umap") != 0 &&
                   strcmp(d, b) != 0 && strcmp(d, "dimensionality_reduction") != 0) {
            append_part(mod, sizeof mod, d, strlen(d));
        }
    }
    return cfs_strdupf("%s%s", mod, b);
}

static void set_why(projection *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_why(projection *p, const char *fmt, ...)
{
    free(p->why);
    p->why = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&p->why, fmt, ap) < 0)
        p->why = NULL;
    va_end(ap);
    free(p->values);
    p->values = NULL;
}

typedef struct projection_walk {
    projection *p;
    uint64_t n_obs;
} projection_walk;

static int projection_header(void *ctx, char **fld, long nf, long *nfields, char **why)
{
    const projection_walk *pw = ctx;
    projection *p = pw->p;
    const analysis_csv *c = p->csv;
    size_t kl = nf >= 2 ? strcspn(fld[1], "-") : 0;
    bool ok = nf >= 2 && (uint64_t)nf - 1 <= PROJ_MAX_COMPONENTS &&
              strcasecmp(fld[0], "Barcode") == 0 && kl > 0;
    for (long k = 1; ok && k < nf; k++)
        ok = component_name(fld[k], fld[1], kl, (uint64_t)k);
    for (size_t k = 0; ok && k < kl; k++)
        ok = isalpha((unsigned char)fld[1][k]);
    if (!ok) {
        *why = cfs_strdupf("%s: the header is not Barcode,UMAP-1,UMAP-2,... (or TSNE-, PC-), as Cell "
                    "Ranger writes it", c->rel);
        return 1;
    }
    char *kind = lower_dup(fld[1], kl);
    p->basis = kind ? basis_name(c, kind) : NULL;
    free(kind);
    p->ncomp = (uint64_t)nf - 1;
    p->header_ok = true;
    uint64_t nc = p->ncomp, n_obs = pw->n_obs;
    if (!p->basis || (n_obs && nc > SIZE_MAX / sizeof(double) / n_obs) ||
        !(p->values = malloc((n_obs ? n_obs * nc : 1) * sizeof(double))))
        return -1;
    for (uint64_t i = 0; i < n_obs * nc; i++)
        p->values[i] = NAN;
    *nfields = nf;
    return 0;
}

static int projection_row(void *ctx, uint64_t r, uint64_t ln, char **fld, char **why)
{
    projection *p = ((const projection_walk *)ctx)->p;
    uint64_t nc = p->ncomp;
    for (uint64_t k = 0; k < nc; k++)
        if (!cfs_parse_double(fld[k + 1], true, &p->values[r * nc + k])) {
            *why = cfs_strdupf("%s: line %llu: '%.40s' (column %llu) is not a finite number",
                        p->csv->rel, (ull)ln, fld[k + 1], (ull)k + 2);
            return 1;
        }
    return 0;
}

/* Reads one projection.csv against the matrix's barcodes; a failure sets p->why. Returns -1
 * only on allocation failure. */
static int read_projection(projection *p, const cfs_strset *map, uint64_t n_obs, cfs_err *err)
{
    projection_walk pw = {p, n_obs};
    unsigned char *seen = calloc(n_obs ? n_obs : 1, 1);
    cfs_csv_walk w = {p->csv->path, p->csv->rel, map, n_obs, seen,
                      projection_header, projection_row, &pw};
    char *why = NULL;
    int rc = seen ? cfs_csv_walk_run(&w, &why) : -1;
    free(seen);
    if (rc == 0 && why)
        set_why(p, "%s", why);
    free(why);
    return rc < 0 ? cfs_err_oom(err) : 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- clusterings ---- */

/* The obs column of a clusters.csv: its folders after clustering/, gene_expression_ dropped,
 * joined by '_' (graphclust, kmeans_3_clusters; 1.x kmeans/3_clusters -> kmeans_3_clusters). */
static char *cluster_name(const analysis_csv *c)
{
    char name[512] = "";
    size_t nl = 0;
    for (size_t i = 0; i < c->dirs.n; i++) {
        const char *d = c->dirs.v[i];
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
    const analysis_csv *c;
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
static int parse_clusters(const analysis_csv *c, const cfs_strset *map, uint64_t n_obs,
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
static int read_clusters(const analysis_csv *c, const char *name, const cfs_strset *map,
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

/* The obs index as strings (the .h5 reader's barcodes). */
static int obs_names(const cfs_dataset *ds, char ***out, cfs_err *err)
{
    cfs_elem *obs = cfs_elem_child(ds->root, "obs");
    if (!obs || !obs->index || !obs->index->values ||
        obs->index->values->dtype != CFS_STRING || obs->index->values->ndim != 1 ||
        obs->index->values->shape[0] != ds->n_obs)
        return cfs_err_set(err, "the matrix has no barcode list");
    uint64_t n = ds->n_obs, start = 0;
    char **v = calloc(n ? n : 1, sizeof *v);
    if (!v)
        return cfs_err_oom(err);
    if (cfs_array_read(obs->index->values, &start, &n, v, err) < 0) {
        free(v);
        return cfs_err_prefix(err, "its barcodes cannot be read");
    }
    *out = v;
    return 0;
}

static int attach_projections(cfs_dataset *ds, const analysis *a, const cfs_strset *map,
                              version_hints *vh, cfs_err *err)
{
    size_t np = 0;
    for (size_t i = 0; i < a->n; i++)
        np += a->v[i].kind == CSV_PROJECTION;
    if (np == 0)
        return 0;
    vh->any_projection = true;
    projection *p = calloc(np, sizeof *p);
    if (!p)
        return cfs_err_oom(err);
    size_t k = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < a->n; i++) {
        if (a->v[i].kind != CSV_PROJECTION)
            continue;
        p[k].csv = &a->v[i];
        rc = read_projection(&p[k], map, ds->n_obs, err);
        if (rc == 0 && !p[k].header_ok) {
            /* named from its path alone, for the report */
            const analysis_csv *c = &a->v[i];
            const char *kind = c->dirs.n ? c->dirs.v[0] : "projection";
            p[k].basis = strdup(kind);
            if (!p[k].basis)
                rc = cfs_err_oom(err);
        }
        k++;
    }
    /* keys: X_<basis>, or X_<basis>_<n>d when the basis comes in several widths */
    for (size_t i = 0; rc == 0 && i < np; i++) {
        bool several = false, dup_of_earlier = false;
        for (size_t j = 0; j < np; j++) {
            if (j == i || !p[j].header_ok || !p[i].header_ok ||
                strcmp(p[j].basis, p[i].basis) != 0)
                continue;
            if (p[j].ncomp != p[i].ncomp)
                several = true;
            else if (j < i && p[j].values)
                dup_of_earlier = true;
        }
        p[i].key = several ? cfs_strdupf("X_%s_%llud", p[i].basis, (ull)p[i].ncomp)
                           : cfs_strdupf("X_%s", p[i].basis);
        if (!p[i].key) {
            rc = cfs_err_oom(err);
            break;
        }
        if (p[i].values && dup_of_earlier)
            for (size_t j = 0; j < i; j++)
                if (p[j].values && p[j].header_ok && p[j].ncomp == p[i].ncomp &&
                    strcmp(p[j].basis, p[i].basis) == 0) {
                    set_why(&p[i], "%s is a second %llu-component %s projection (the first, "
                            "%s, is served)", p[i].csv->rel, (ull)p[i].ncomp, p[i].basis,
                            p[j].csv->rel);
                    break;
                }
    }
    cfs_elem *obsm = rc == 0 ? cfs_elem_ensure_dict(ds->root, "obsm") : NULL;
    if (rc == 0 && !obsm)
        rc = cfs_err_oom(err);
    for (size_t i = 0; rc == 0 && i < np; i++) {
        char element[600];
        snprintf(element, sizeof element, "obsm/%s", p[i].key);
        if (!p[i].values) {
            if (cfs_dataset_leave_out(ds, element, "%s; it was not read",
                                      p[i].why ? p[i].why : "it cannot be read") < 0)
                rc = cfs_err_oom(err);
            continue;
        }
        uint64_t shape[2] = {ds->n_obs, p[i].ncomp};
        cfs_elem *el = mem_elem(CFS_EL_ARRAY, p[i].key, CFS_FLOAT64, 2, shape, p[i].values);
        if (el)
            p[i].values = NULL;
        rc = add(obsm, el, err);
        vh->any_drawable = true;
    }
    for (size_t i = 0; i < np; i++) {
        free(p[i].basis);
        free(p[i].values);
        free(p[i].why);
        free(p[i].key);
    }
    free(p);
    return rc;
}

static int attach_clusters(cfs_dataset *ds, const analysis *a, const cfs_strset *map,
                           cfs_err *err)
{
    cfs_elem *obs = cfs_elem_child(ds->root, "obs");
    for (size_t i = 0; i < a->n; i++) {
        const analysis_csv *c = &a->v[i];
        if (c->kind != CSV_CLUSTERS)
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

static void version_from_paths(const analysis *a, version_hints *vh)
{
    for (size_t i = 0; i < a->n; i++) {
        const str_list *d = &a->v[i].dirs;
        for (size_t k = 0; k < d->n; k++)
            if (starts_with(d->v[k], GE_PREFIX))
                vh->gene_expression = true;
        if (d->n == 1 && a->v[i].kind == CSV_PROJECTION)
            vh->flat = true; /* analysis/pca/projection.csv */
        if (d->n >= 1 && strcmp(d->v[0], "kmeans") == 0)
            vh->flat = true; /* analysis/kmeans/10_clusters/clusters.csv */
    }
}

static int attach_analysis(cfs_dataset *ds, const outs_matrix *mx, version_hints *vh,
                           bool *have_analysis, cfs_err *err)
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
    analysis a = {0};
    str_list dirs = {0};
    int rc = walk(&a, dir, rel, &dirs, 0) < 0 ? cfs_err_oom(err) : 0;
    str_list_free(&dirs);
    version_from_paths(&a, vh);
    char **names = NULL;
    cfs_strset *map = NULL;
    if (rc == 0 && a.n && obs_names(ds, &names, err) < 0)
        rc = -1;
    uint64_t dup = UINT64_MAX;
    if (rc == 0 && a.n && !(map = map_build(names, ds->n_obs, &dup)))
        rc = cfs_err_oom(err);
    if (rc == 0 && a.n && dup != UINT64_MAX) {
        /* a CSV row cannot be told which of the two cells it means */
        vh->any_projection = true;
        if (cfs_dataset_leave_out(ds, rel, "the matrix lists barcode %s twice (row %llu), so "
                                  "its CSVs cannot be joined to its cells; none was read",
                                  names[dup], (ull)dup + 1) < 0)
            rc = cfs_err_oom(err);
    } else {
        if (rc == 0 && a.n)
            rc = attach_projections(ds, &a, map, vh, err);
        if (rc == 0 && a.n)
            rc = attach_clusters(ds, &a, map, err);
    }
    if (rc == 0 && a.truncated &&
        cfs_dataset_leave_out(ds, rel, "it holds more than %d CSVs; only the first %d (in name "
                              "order) were read", WALK_MAX_FILES, WALK_MAX_FILES) < 0)
        rc = cfs_err_oom(err);
    if (names) {
        cfs_strings_free(names, (size_t)ds->n_obs);
        free(names);
    }
    cfs_strset_free(map);
    analysis_free(&a);
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
    int rc;
    if (mx.kind == MX_H5) {
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
        rc = attach_analysis(ds, &mx, &vh, &have_analysis, err);
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
