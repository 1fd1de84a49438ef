/*
 * MatrixMarket inputs outside Cell Ranger run folders, recognised by their files (never by the
 * folder's name), each read by formats/mex.c:
 *
 *   a folder holding one unprefixed matrix (a folder input, named after the folder):
 *     Cell Ranger >= 3, STARsolo   matrix.mtx[.gz]  features.tsv[.gz]  barcodes.tsv[.gz]
 *     Cell Ranger 2                matrix.mtx       genes.tsv          barcodes.tsv
 *     kb-python (cells x genes)    cells_x_genes.mtx  .genes.txt (+ .genes.names.txt)  .barcodes.txt
 *     alevin-fry (cells x genes)   quants_mat.mtx[.gz]  quants_mat_cols.txt  quants_mat_rows.txt
 *     sci-RNA-seq3                 gene_count.mtx[.gz]  gene_annotate.csv[.gz]  cell_annotate.csv[.gz]
 *                                  (tables with headers: their columns become var/obs columns)
 *   a matrix file with a prefix (GEO uploads, one prefix per sample, several per folder; the
 *   input is the matrix file, named after its prefix):
 *     <P>matrix.mtx[.gz]  <P>features.tsv[.gz] or <P>genes.tsv[.gz]  <P>barcodes.tsv[.gz]
 *
 * Orientation comes from the lists' lengths (mex.c), a square matrix from the producer's
 * convention.
 *
 * Embeddings: a cell table's <x>umap_1, <x>umap_2 ... columns (also tSNE) are obsm X_<x>_umap;
 * and projection CSVs beside the matrix, read by formats/projections.c as the Cell Ranger reader
 * reads analysis/ (Barcode,UMAP-1,UMAP-2 ... one row per cell; also Seurat's and scanpy's
 * barcode,umap_1,umap_2 and ",UMAP_1,UMAP_2"): for a folder, its analysis/ projection.csv files
 * (Cell Ranger's layout) and every *.csv[.gz] directly in it whose header is a projection header;
 * for a <P>matrix.mtx file, its <P>*.csv[.gz] siblings (umap, tsne, projection ...) with such a
 * header. Another CSV is not an embedding and is skipped; a projection CSV that cannot be joined
 * to the cells is left out with its reason. Without any embedding the dataset's
 * no_embedding_hint says how to add one.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup */
#endif

#include "format.h"
#include "mex.h"
#include "path.h"
#include "projections.h"
#include "strfmt.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define MTX_FORMAT "mtx"
#define BID_FOLDER 60
#define BID_FILE 60

#define NO_EMBEDDING                                                                           \
    "a MatrixMarket matrix holds no embedding; put a projection.csv (Barcode,UMAP-1,UMAP-2: "  \
    "one row per cell, as Cell Ranger writes it) beside the matrix, or open the whole Cell "   \
    "Ranger outs/ folder (its analysis/ projections), or compute one (scanpy's sc.tl.umap), "  \
    "save it as .h5ad and open that"
#define ALL_LEFT_OUT                                                                           \
    "every projection CSV beside the matrix was left out (see the reasons above); fix or "     \
    "re-export it (Barcode,UMAP-1,UMAP-2, one row per cell of the matrix) and open it again"

#define REDO "re-download the file or copy it again from the pipeline's output"
#define REGROUP "copy the matrix and its lists from one run of the pipeline"
#define REGROUP_URL "serve the matrix's lists beside it under these names, or download them " \
                    "with it and open the folder"

typedef struct layout {
    const char *producer;
    const char *matrix;              /* the matrix name without .gz */
    const char *cells, *genes;       /* names without .gz */
    const char *alt_genes;           /* another gene list name (Cell Ranger 2), or NULL */
    const char *gene_names;          /* optional names list, or NULL */
    bool cells_are_rows, tables;
} layout;

static const layout layouts[] = {
    {"Cell Ranger >= 3 / STARsolo", "matrix.mtx", "barcodes.tsv", "features.tsv", "genes.tsv",
     NULL, false, false},
    {"kb-python", "cells_x_genes.mtx", "cells_x_genes.barcodes.txt", "cells_x_genes.genes.txt",
     NULL, "cells_x_genes.genes.names.txt", true, false},
    {"alevin-fry", "quants_mat.mtx", "quants_mat_rows.txt", "quants_mat_cols.txt", NULL, NULL,
     true, false},
    {"sci-RNA-seq3", "gene_count.mtx", "cell_annotate.csv", "gene_annotate.csv", NULL, NULL,
     false, true},
};
#define NLAYOUTS (sizeof layouts / sizeof layouts[0])

/* A file the matrix's folder holds: a symlink leading out of the folder is not followed. */
static bool is_file_in(const char *dir, const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && cfs_path_inside(path, dir);
}

/* Where the files beside a matrix are looked for: a local folder (a file in it, not behind a
 * symlink out of it), or, over a URL (docs/design.md §11), the server, asked by exists; the
 * same names either way, so a fetched copy holds what the reader reads of a local folder. */
typedef struct finder {
    const char *dir;            /* local */
    cfs_url_exists exists;      /* remote: paths are the names themselves */
    void *ctx;
} finder;

/* 1 with *path (malloc'd) if the finder's folder holds base, 0 if not, -1 with err. */
static int holds(const finder *fd, const char *base, char **path, cfs_err *err)
{
    if (fd->exists) {
        int rc = fd->exists(fd->ctx, base, err);
        if (rc > 0 && !(*path = strdup(base)))
            return cfs_err_oom(err);
        return rc;
    }
    char *p = cfs_path_join(fd->dir, base);
    if (!p)
        return cfs_err_oom(err);
    if (is_file_in(fd->dir, p)) {
        *path = p;
        return 1;
    }
    free(p);
    return 0;
}

/* <prefix><name>[.gz] in the finder's folder: 1 with the path of the one there (plain first),
 * 0 when neither is, -1 with err. */
static int sidecar(const finder *fd, const char *prefix, const char *name, char **path,
                   cfs_err *err)
{
    *path = NULL;
    for (int gz = 0; gz < 2; gz++) {
        char *base = cfs_strdupf("%s%s%s", prefix, name, gz ? ".gz" : "");
        int rc = base ? holds(fd, base, path, err) : cfs_err_oom(err);
        free(base);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* The layout whose matrix name `name` is (with or without .gz), or -1. */
static int layout_of(const char *name)
{
    size_t n = strlen(name);
    if (n > 3 && strcmp(name + n - 3, ".gz") == 0)
        n -= 3;
    for (size_t i = 0; i < NLAYOUTS; i++)
        if (strlen(layouts[i].matrix) == n && strncmp(name, layouts[i].matrix, n) == 0)
            return (int)i;
    return -1;
}

/* "<P>matrix.mtx[.gz]" with P not empty: the length of P, else 0. */
static size_t prefix_of(const char *name)
{
    size_t n = strlen(name);
    if (n > 3 && strcmp(name + n - 3, ".gz") == 0)
        n -= 3;
    size_t m = strlen("matrix.mtx");
    if (n > m && strncmp(name + n - m, "matrix.mtx", m) == 0)
        return n - m;
    return 0;
}

/* The folder's one unprefixed matrix: its name (malloc'd) in *name, or 0 if it holds none or
 * several; -1 on failure. */
static int folder_matrix(const char *dir, char **name)
{
    *name = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || layout_of(e->d_name) < 0)
            continue;
        /* matrix.mtx and matrix.mtx.gz side by side are one matrix (the plain one is read) */
        if (*name) {
            size_t a = strlen(*name), b = strlen(e->d_name);
            bool same = (a + 3 == b && strncmp(*name, e->d_name, a) == 0) ||
                        (b + 3 == a && strncmp(*name, e->d_name, b) == 0);
            if (!same) {
                found = 2;
                break;
            }
            if (b < a) {
                free(*name);
                if (!(*name = strdup(e->d_name))) {
                    closedir(d);
                    return -1;
                }
            }
            continue;
        }
        if (!(*name = strdup(e->d_name))) {
            closedir(d);
            return -1;
        }
        found = 1;
    }
    closedir(d);
    if (found != 1) {
        free(*name);
        *name = NULL;
        return 0;
    }
    char *p = cfs_path_join(dir, *name);
    bool ok = p && is_file_in(dir, p);
    free(p);
    if (!ok) {
        free(*name);
        *name = NULL;
    }
    return ok ? 1 : 0;
}

/* The files of the matrix dir/name; -1 with a reason naming what is missing. */
typedef struct found_files {
    char *matrix, *cells, *genes, *gene_names;
    char *matrix_rel, *cells_rel, *genes_rel, *gene_names_rel;
    int layout;        /* -1: a prefixed (GEO) matrix */
    bool legacy_genes;
} found_files;

static void found_free(found_files *f)
{
    free(f->matrix);
    free(f->cells);
    free(f->genes);
    free(f->gene_names);
    free(f->matrix_rel);
    free(f->cells_rel);
    free(f->genes_rel);
    free(f->gene_names_rel);
    memset(f, 0, sizeof *f);
}

static char *base_of(const char *path)
{
    const char *s = strrchr(path, '/');
    return strdup(s ? s + 1 : path);
}

/* The file's base name (malloc'd) in rel's words: "<rel><base>". */
static char *rel_name(const char *rel, const char *path)
{
    const char *s = strrchr(path, '/');
    return cfs_strdupf("%s%s", rel, s ? s + 1 : path);
}

/* The sidecars of the matrix name in the finder's folder. rel: the folder's part of the names
 * in messages ("" for a file input's siblings). -1 with a reason naming what is missing. */
static int locate(const finder *fd, const char *rel, const char *name, found_files *f,
                  cfs_err *err)
{
    memset(f, 0, sizeof *f);
    f->layout = layout_of(name);
    size_t pl = f->layout < 0 ? prefix_of(name) : 0;
    const layout *l = f->layout >= 0 ? &layouts[f->layout] : NULL;
    const char *cells = l ? l->cells : "barcodes.tsv";
    const char *genes = l ? l->genes : "features.tsv";
    const char *alt = l ? l->alt_genes : "genes.tsv";
    const char *where = fd->exists ? " on the server" : "";
    const char *regroup = fd->exists ? REGROUP_URL : REGROUP;
    char *prefix = strndup(name, pl);
    int rc = prefix ? 0 : cfs_err_oom(err);
    if (rc == 0) {
        f->matrix = fd->exists ? strdup(name) : cfs_path_join(fd->dir, name);
        f->matrix_rel = cfs_strdupf("%s%s", rel, name);
        rc = f->matrix && f->matrix_rel ? sidecar(fd, prefix, cells, &f->cells, err)
                                        : cfs_err_oom(err);
        if (rc == 0)
            rc = cfs_err_set(err, "%s%s has no %s%s[.gz] next to it%s (the cell list); %s", rel,
                             name, prefix, cells, where, regroup);
    }
    if (rc > 0) {
        rc = sidecar(fd, prefix, genes, &f->genes, err);
        if (rc == 0 && alt) {
            rc = sidecar(fd, prefix, alt, &f->genes, err);
            f->legacy_genes = rc > 0;
        }
        if (rc == 0)
            rc = cfs_err_set(err, "%s%s has no %s%s[.gz]%s%s%s next to it%s (the gene list); "
                             "%s", rel, name, prefix, genes, alt ? " or " : "", alt ? prefix : "",
                             alt ? alt : "", where, regroup);
    }
    if (rc > 0 && l && l->gene_names && sidecar(fd, prefix, l->gene_names, &f->gene_names,
                                                 err) < 0)
        rc = -1;
    free(prefix);
    if (rc > 0) {
        f->cells_rel = rel_name(rel, f->cells);
        f->genes_rel = rel_name(rel, f->genes);
        f->gene_names_rel = f->gene_names ? rel_name(rel, f->gene_names) : NULL;
        rc = f->cells_rel && f->genes_rel && (!f->gene_names || f->gene_names_rel)
                 ? 0 : cfs_err_oom(err);
    }
    if (rc < 0)
        found_free(f);
    return rc < 0 ? -1 : 0;
}

/* locate in the local folder dir. */
static int locate_in(const char *dir, const char *rel, const char *name, found_files *f,
                     cfs_err *err)
{
    finder fd = {.dir = dir};
    return locate(&fd, rel, name, f, err);
}

/* The text at the start of a file (inflated for a .gz) begins with %%MatrixMarket. */
static bool mm_header(cfs_probe_input *in)
{
    size_t len = 0;
    const unsigned char *h = cfs_probe_compression(in) ? cfs_probe_peek(in, &len)
                                                       : cfs_probe_head(in, &len);
    return h && len >= 14 && strncasecmp((const char *)h, "%%MatrixMarket", 14) == 0;
}

static int mtx_probe(cfs_probe_input *in)
{
    const char *path = cfs_probe_path(in);
    if (cfs_probe_is_dir(in)) {
        char *name;
        if (folder_matrix(path, &name) != 1)
            return 0;
        found_files f;
        cfs_err err = {0};
        int rc = locate_in(path, "", name, &f, &err);
        free(name);
        found_free(&f);
        return rc == 0 ? BID_FOLDER : 0;
    }
    /* a matrix file: a prefixed one (GEO), or a layout's matrix given as the input */
    const char *name = cfs_probe_name(in);
    if ((layout_of(name) < 0 && prefix_of(name) == 0) || !mm_header(in))
        return 0;
    char *dir = strdup(path);
    char *slash = dir ? strrchr(dir, '/') : NULL;
    if (!dir)
        return 0;
    if (slash)
        *slash = '\0';
    found_files f;
    cfs_err err = {0};
    int rc = locate_in(slash ? (dir[0] ? dir : "/") : ".", "", name, &f, &err);
    found_free(&f);
    free(dir);
    return rc == 0 ? BID_FILE : 0;
}

/* A matrix file that is not one (no sidecars, no header) is explained when its name says
 * MatrixMarket. */
static int mtx_explain(cfs_probe_input *in, cfs_err *err)
{
    const char *name = cfs_probe_name(in);
    size_t n = strlen(name);
    bool gz = n > 3 && strcmp(name + n - 3, ".gz") == 0;
    size_t e = gz ? n - 3 : n;
    if (cfs_probe_is_dir(in) || e < 4 || strncasecmp(name + e - 4, ".mtx", 4) != 0)
        return 0;
    if (!mm_header(in))
        return cfs_err_setc(err, CFS_EDAMAGED, "not a MatrixMarket file (it does not start with "
                            "%%%%MatrixMarket); %s", REDO);
    if (layout_of(name) < 0 && prefix_of(name) == 0)
        return cfs_err_setc(err, CFS_EREFUSED, "a MatrixMarket matrix whose cell and gene "
                            "lists cannot be found by its name (this version reads "
                            "<prefix>matrix.mtx[.gz] with <prefix>barcodes.tsv[.gz] and "
                            "<prefix>features.tsv[.gz], and the Cell Ranger, STARsolo, "
                            "kb-python, alevin-fry and sci-RNA-seq3 names); rename the files so");
    char *dir = strdup(cfs_probe_path(in));
    char *slash = dir ? strrchr(dir, '/') : NULL;
    if (!dir)
        return cfs_err_oom(err);
    if (slash)
        *slash = '\0';
    found_files f;
    int rc = locate_in(slash ? (dir[0] ? dir : "/") : ".", "", name, &f, err);
    found_free(&f);
    free(dir);
    if (rc < 0 && err->status == CFS_EFAIL)
        err->status = CFS_EREFUSED;
    return rc < 0 ? -1 : 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Projection CSVs beside the matrix */

static bool csv_name(const char *name)
{
    size_t n = strlen(name);
    if (n > 3 && strcmp(name + n - 3, ".gz") == 0)
        n -= 3;
    return n > 4 && strncasecmp(name + n - 4, ".csv", 4) == 0;
}

/* The length of the longest GEO matrix prefix in names[] that name starts with, or 0. */
static size_t owner_prefix(char **names, size_t n, const char *name)
{
    size_t best = 0;
    for (size_t i = 0; i < n; i++) {
        size_t pl = layout_of(names[i]) < 0 ? prefix_of(names[i]) : 0;
        if (pl > best && strncmp(names[i], name, pl) == 0)
            best = pl;
    }
    return best;
}

/* The candidate CSVs of the matrix dir/name: with a prefix P (a GEO file), the <P>*.csv[.gz]
 * siblings no longer prefix claims; else the folder's analysis/ projections and its *.csv[.gz]
 * that no GEO prefix claims. The matrix's own lists (sci-RNA-seq3's tables) are not candidates.
 * -1 on allocation failure. */
static int find_csvs(const char *dir, const char *name, const found_files *f, cfs_analysis *a)
{
    size_t pl = f->layout < 0 ? prefix_of(name) : 0;
    if (pl == 0) {
        char *an = cfs_path_join(dir, "analysis");
        struct stat st;
        int rc = !an ? -1 : stat(an, &st) == 0 && S_ISDIR(st.st_mode)
                                ? cfs_analysis_walk(a, an, "analysis", dir) : 0;
        free(an);
        if (rc < 0)
            return -1;
    }
    char **names;
    size_t n;
    if (cfs_path_list(dir, &names, &n) < 0)
        return 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const char *e = names[i];
        if (!csv_name(e) || owner_prefix(names, n, e) != pl || strncmp(e, name, pl) != 0)
            continue;
        char *p = cfs_path_join(dir, e);
        if (!p)
            rc = -1;
        else if (is_file_in(dir, p) && strcmp(p, f->cells) != 0 && strcmp(p, f->genes) != 0)
            rc = cfs_analysis_add(a, p, e);
        free(p);
    }
    cfs_path_list_free(names, n);
    return rc;
}

/* Adds the projection CSVs found for the matrix dir/name to ds as obsm; *pr says whether some
 * CSV was a projection and whether one was served. -1 only on failure (allocation, no readable
 * barcodes). */
static int attach_csvs(cfs_dataset *ds, const char *dir, const char *name, const found_files *f,
                       cfs_projection_report *pr, cfs_err *err)
{
    cfs_analysis a = {0};
    int rc = find_csvs(dir, name, f, &a) < 0 ? cfs_err_oom(err) : 0;
    char **names = NULL;
    cfs_strset *map = NULL;
    uint64_t dup = UINT64_MAX;
    if (rc == 0 && a.n && cfs_obs_barcodes(ds, &names, &map, &dup, err) < 0)
        rc = -1;
    if (rc == 0 && a.n && dup != UINT64_MAX) {
        /* a CSV row cannot be told which of the two cells it means */
        pr->any_projection = true;
        if (cfs_dataset_leave_out(ds, "obsm", "the cell list names barcode %s twice (row "
                                  "%llu), so no projection CSV can be joined to its cells; "
                                  "none was read", names[dup], (unsigned long long)dup + 1) < 0)
            rc = cfs_err_oom(err);
    } else if (rc == 0 && a.n) {
        cfs_projection_opts opts = {.loose = true};
        rc = cfs_projections_attach(ds, &a, map, &opts, pr, err);
    }
    if (rc == 0 && a.truncated &&
        cfs_dataset_leave_out(ds, "obsm", "the folder holds more than %d CSVs; only the first %d "
                              "(in name order) were read", CFS_ANALYSIS_MAX_FILES,
                              CFS_ANALYSIS_MAX_FILES) < 0)
        rc = cfs_err_oom(err);
    if (names) {
        cfs_strings_free(names, (size_t)ds->n_obs);
        free(names);
    }
    cfs_strset_free(map);
    cfs_analysis_free(&a);
    return rc;
}

static int mtx_open(const char *path, cfs_dataset **out, cfs_err *err)
{
    *out = NULL;
    struct stat st;
    if (stat(path, &st) < 0)
        return cfs_err_set(err, "cannot be read");
    char *dir = NULL, *name = NULL;
    const char *rel = "";
    if (S_ISDIR(st.st_mode)) {
        int rc = folder_matrix(path, &name);
        if (rc < 0)
            return cfs_err_oom(err);
        if (rc == 0)
            return cfs_err_set(err, "a folder without exactly one MatrixMarket matrix "
                               "(matrix.mtx[.gz], cells_x_genes.mtx, quants_mat.mtx or "
                               "gene_count.mtx[.gz]); open the folder of one matrix");
        dir = strdup(path);
    } else {
        dir = strdup(path);
        char *slash = dir ? strrchr(dir, '/') : NULL;
        name = base_of(path);
        if (dir && slash)
            *slash = '\0';
        else if (dir) {
            free(dir);
            dir = strdup(".");
        }
        if (dir && !dir[0]) {
            free(dir);
            dir = strdup("/");
        }
    }
    if (!dir || !name) {
        free(dir);
        free(name);
        return cfs_err_oom(err);
    }
    found_files f;
    int rc = locate_in(dir, rel, name, &f, err);
    if (rc == 0) {
        const layout *l = f.layout >= 0 ? &layouts[f.layout] : NULL;
        cfs_mex_spec spec = {
            .matrix = {f.matrix, f.matrix_rel},
            .cells = {f.cells, f.cells_rel},
            .genes = {f.genes, f.genes_rel},
            .gene_names = {f.gene_names, f.gene_names_rel},
            .cells_table = l && l->tables,
            .genes_table = l && l->tables,
            .list_headers = !l,
            .cells_are_rows = l && l->cells_are_rows,
            .redo = REDO,
            .regroup = REGROUP,
        };
        rc = cfs_mex_open(path, &spec, out, err);
        const char *producer = !l ? "GEO-style <prefix>matrix.mtx"
                             : f.layout == 0 && f.legacy_genes ? "Cell Ranger 2"
                             : l->producer;
        if (rc == 0 && !((*out)->format_version = cfs_strdupf("MatrixMarket (%s: %s)",
                                                              producer, f.matrix_rel)))
            rc = cfs_err_oom(err);
        cfs_projection_report pr = {0};
        if (rc == 0)
            rc = attach_csvs(*out, dir, name, &f, &pr, err);
        cfs_elem *obsm = rc == 0 ? cfs_elem_child((*out)->root, "obsm") : NULL;
        const char *hint = obsm && obsm->nchildren ? NULL
                         : pr.any_projection ? ALL_LEFT_OUT : NO_EMBEDDING;
        if (rc == 0 && hint && !((*out)->no_embedding_hint = strdup(hint)))
            rc = cfs_err_oom(err);
        if (rc < 0 && *out) {
            cfs_dataset_free(*out);
            *out = NULL;
        }
    }
    found_free(&f);
    free(dir);
    free(name);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Over a URL (docs/design.md §11) */

/* Appends name to out unless it is there. */
static int push_new(cfs_strlist *out, const char *name, cfs_err *err)
{
    for (size_t i = 0; i < out->n; i++)
        if (strcmp(out->v[i], name) == 0)
            return 0;
    return cfs_strlist_push(out, strdup(name)) < 0 ? cfs_err_oom(err) : 0;
}

/* The lists locate finds on the server for the matrix name, appended to out. */
static int url_lists(const finder *fd, const char *name, cfs_strlist *out, cfs_err *err)
{
    found_files f;
    if (locate(fd, "", name, &f, err) < 0)
        return -1;
    int rc = push_new(out, f.cells, err);
    if (rc == 0)
        rc = push_new(out, f.genes, err);
    if (rc == 0 && f.gene_names)
        rc = push_new(out, f.gene_names, err);
    found_free(&f);
    return rc;
}

/* A matrix URL named as a layout's or a GEO sample's: the lists beside it that locate finds. A
 * folder URL: each layout's matrix the server has (plain and .gz, as a local folder may hold
 * both) and its lists; two matrices are refused by the copy's open, as a local folder of them.
 * Projection CSVs are not looked for: their names are free, and HTTP lists no folder. */
static int mtx_url_companions(const char *name, cfs_url_exists exists, void *ctx,
                              cfs_strlist *out, cfs_err *err)
{
    finder fd = {.exists = exists, .ctx = ctx};
    if (name)
        return layout_of(name) < 0 && prefix_of(name) == 0 ? 0
               : url_lists(&fd, name, out, err) < 0 ? -1 : 1;
    bool any = false;
    for (size_t i = 0; i < NLAYOUTS; i++)
        for (int gz = 0; gz < 2; gz++) {
            char *matrix = cfs_strdupf("%s%s", layouts[i].matrix, gz ? ".gz" : "");
            int rc = matrix ? exists(ctx, matrix, err) : cfs_err_oom(err);
            if (rc > 0)
                rc = push_new(out, matrix, err) < 0 || url_lists(&fd, matrix, out, err) < 0
                         ? -1 : 1;
            free(matrix);
            if (rc < 0)
                return -1;
            any = any || rc > 0;
        }
    return any ? 1 : 0;
}

static const char *const mtx_extensions[] = {"_matrix.mtx", ".mtx", NULL};

const cfs_format cfs_format_mtx = {
    .name = MTX_FORMAT,
    .summary = "MatrixMarket matrices with their cell and gene lists (folders of one matrix, "
               "GEO <prefix>matrix.mtx.gz files)",
    .extensions = mtx_extensions,
    .folders = true,
    .url_companions = mtx_url_companions,
    .probe = mtx_probe,
    .open = mtx_open,
    .explain = mtx_explain,
};
