/* Cell Ranger-style projection CSVs as obsm arrays: see projections.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup, strndup, vasprintf */
#endif

#include "projections.h"

#include "csv.h"
#include "number.h"
#include "path.h"
#include "strfmt.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define WALK_MAX_DEPTH 8
#define PROJ_MAX_COMPONENTS 10000

typedef unsigned long long ull;

/* ------------------------------------------------------------------------------------------ */
/* Finding them */

void cfs_analysis_free(cfs_analysis *a)
{
    for (size_t i = 0; i < a->n; i++) {
        free(a->v[i].path);
        free(a->v[i].rel);
        cfs_path_list_free(a->v[i].dirs, a->v[i].ndirs);
    }
    free(a->v);
    memset(a, 0, sizeof *a);
}

/* A new zeroed entry, or NULL (a->truncated set when full; NULL too on allocation failure,
 * told apart by *oom). */
static cfs_analysis_csv *push(cfs_analysis *a, bool *oom)
{
    *oom = false;
    if (a->n == CFS_ANALYSIS_MAX_FILES) {
        a->truncated = true;
        return NULL;
    }
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        cfs_analysis_csv *v = realloc(a->v, cap * sizeof *v);
        if (!v) {
            *oom = true;
            return NULL;
        }
        a->v = v;
        a->cap = cap;
    }
    cfs_analysis_csv *c = &a->v[a->n++];
    memset(c, 0, sizeof *c);
    return c;
}

int cfs_analysis_add(cfs_analysis *a, const char *path, const char *rel)
{
    bool oom;
    cfs_analysis_csv *c = push(a, &oom);
    if (!c)
        return oom ? -1 : 0;
    c->candidate = true;
    c->path = strdup(path);
    c->rel = strdup(rel);
    return c->path && c->rel ? 0 : -1;
}

/* stack[0..depth): the folders between analysis/ and abs. */
static int walk(cfs_analysis *a, const char *abs, const char *rel, const char **stack, int depth)
{
    char **names;
    size_t nn;
    if (cfs_path_list(abs, &names, &nn) < 0)
        return 0; /* an unreadable sub-folder holds nothing we can use */
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < nn; i++) {
        const char *name = names[i];
        char *p = cfs_path_join(abs, name), *r = cfs_strdupf("%s/%s", rel, name);
        struct stat st;
        if (!p || !r) {
            rc = -1;
        } else if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            /* no symlinked folders: a link cycle must not take the walk hostage */
            if (depth < WALK_MAX_DEPTH) {
                stack[depth] = name;
                rc = walk(a, p, r, stack, depth + 1);
            }
        } else if ((strcmp(name, "projection.csv") == 0 || strcmp(name, "clusters.csv") == 0) &&
                   stat(p, &st) == 0 && S_ISREG(st.st_mode) && cfs_path_inside(p, a->root)) {
            bool oom;
            cfs_analysis_csv *c = push(a, &oom);
            if (oom)
                rc = -1;
            if (c) {
                c->clusters = name[0] == 'c';
                c->path = p;
                c->rel = r;
                p = r = NULL;
                c->dirs = calloc(depth ? (size_t)depth : 1, sizeof *c->dirs);
                if (!c->dirs)
                    rc = -1;
                for (int k = 0; rc == 0 && k < depth; k++, c->ndirs++)
                    if (!(c->dirs[k] = strdup(stack[k])))
                        rc = -1;
            }
        }
        free(p);
        free(r);
    }
    cfs_path_list_free(names, nn);
    return rc;
}

int cfs_analysis_walk(cfs_analysis *a, const char *dir, const char *rel, const char *root)
{
    const char *stack[WALK_MAX_DEPTH];
    if (!cfs_path_inside(dir, root))
        return 0;
    a->root = root;
    int rc = walk(a, dir, rel, stack, 0);
    a->root = NULL;
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Barcode -> row */

int cfs_obs_barcodes(const cfs_dataset *ds, char ***names, cfs_strset **map, uint64_t *dup,
                     cfs_err *err)
{
    *names = NULL;
    *map = NULL;
    *dup = UINT64_MAX;
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
    cfs_strset *m = cfs_strset_new((size_t)n);
    for (uint64_t r = 0; m && r < n; r++) {
        int added = cfs_strset_add(m, v[r], r);
        if (added < 0) {
            cfs_strset_free(m);
            m = NULL;
        } else if (added == 0 && *dup == UINT64_MAX) {
            *dup = r;
        }
    }
    if (!m) {
        cfs_strings_free(v, (size_t)n);
        free(v);
        return cfs_err_oom(err);
    }
    *names = v;
    *map = m;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Reading one */

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* "<prefix><N>_components": the prefix length; false if the name is not of that form. */
static bool components_dir(const char *name, size_t *prefix_len)
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
    *prefix_len = start;
    return true;
}

typedef struct projection {
    const cfs_analysis_csv *csv;
    char *basis;           /* "umap", "antibody_capture_umap", ... */
    uint64_t ncomp;
    double *values;        /* n_obs x ncomp; NULL when left out */
    char *why;             /* the reason it was left out */
    bool header_ok;        /* named and sized from its header (else from its path) */
    char *key;
} projection;

/* "UMAP-1", ...: the kind's letters and the separator must match and the numbers run 1..n. */
static bool component_name(const char *f, const char *kind, size_t kl, char sep, uint64_t want)
{
    if (strncasecmp(f, kind, kl) != 0 || f[kl] != sep)
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
static char *basis_name(const cfs_analysis_csv *c, const char *kind)
{
    static const char *const known[][2] = {{"pc", "pca"}, {"tsne", "tsne"}, {"umap", "umap"}};
    const char *b = kind;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(kind, known[i][0]) == 0)
            b = known[i][1];
    char mod[512] = "";
    for (size_t i = 0; i < c->ndirs; i++) {
        const char *d = c->dirs[i];
        size_t pl;
        if (components_dir(d, &pl)) {
            if (pl > 1 && !starts_with(d, CFS_ANALYSIS_GE_PREFIX))
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
    bool loose;
} projection_walk;

static int projection_header(void *ctx, char **fld, long nf, long *nfields, char **why)
{
    const projection_walk *pw = ctx;
    projection *p = pw->p;
    const cfs_analysis_csv *c = p->csv;
    size_t kl = nf >= 2 ? strcspn(fld[1], pw->loose ? "-_" : "-") : 0;
    char sep = kl ? fld[1][kl] : '-';
    bool ok = nf >= 2 && (uint64_t)nf - 1 <= PROJ_MAX_COMPONENTS && kl > 0 &&
              (strcasecmp(fld[0], "Barcode") == 0 || (pw->loose && fld[0][0] == '\0'));
    for (long k = 1; ok && k < nf; k++)
        ok = component_name(fld[k], fld[1], kl, sep, (uint64_t)k);
    for (size_t k = 0; ok && k < kl; k++)
        ok = isalpha((unsigned char)fld[1][k]);
    if (!ok) {
        *why = cfs_strdupf("%s: the header is not Barcode,UMAP-1,UMAP-2,... (or TSNE-, PC-), as "
                           "Cell Ranger writes it", c->rel);
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

/* Reads one projection CSV against the matrix's barcodes; a failure sets p->why. Returns -1
 * only on allocation failure. */
static int read_projection(projection *p, const cfs_strset *map, uint64_t n_obs, bool loose,
                           cfs_err *err)
{
    projection_walk pw = {p, n_obs, loose};
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

/* ------------------------------------------------------------------------------------------ */
/* Attaching them */

static cfs_elem *matrix_elem(const char *name, uint64_t rows, uint64_t cols, double *data)
{
    uint64_t shape[2] = {rows, cols};
    cfs_elem *el = cfs_elem_new(CFS_EL_ARRAY, name);
    if (el && !(el->values = cfs_array_from_memory(CFS_FLOAT64, 2, shape, data))) {
        cfs_elem_free(el);
        el = NULL;
    }
    return el;
}

int cfs_projections_attach(cfs_dataset *ds, const cfs_analysis *a, const cfs_strset *map,
                           const cfs_projection_opts *opts, cfs_projection_report *report,
                           cfs_err *err)
{
    bool loose = opts && opts->loose;
    size_t np = 0;
    for (size_t i = 0; i < a->n; i++)
        np += !a->v[i].clusters;
    if (np == 0)
        return 0;
    projection *p = calloc(np, sizeof *p);
    if (!p)
        return cfs_err_oom(err);
    size_t k = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < a->n; i++) {
        const cfs_analysis_csv *c = &a->v[i];
        if (c->clusters)
            continue;
        p[k].csv = c;
        rc = read_projection(&p[k], map, ds->n_obs, loose, err);
        if (rc == 0 && !p[k].header_ok && c->candidate) {
            /* not a projection: some other table beside the matrix */
            free(p[k].why);
            p[k].why = NULL;
            continue;
        }
        if (rc == 0 && !p[k].header_ok) {
            /* named from its path alone, for the report */
            const char *kind = c->ndirs ? c->dirs[0] : "projection";
            p[k].basis = strdup(kind);
            if (!p[k].basis)
                rc = cfs_err_oom(err);
        }
        k++;
    }
    np = k;
    if (np && report)
        report->any_projection = true;
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
    cfs_elem *obsm = rc == 0 && np ? cfs_elem_ensure_dict(ds->root, "obsm") : NULL;
    if (rc == 0 && np && !obsm)
        rc = cfs_err_oom(err);
    for (size_t i = 0; rc == 0 && i < np; i++) {
        char element[600];
        snprintf(element, sizeof element, "obsm/%s", p[i].key);
        if (p[i].values && cfs_elem_child(obsm, p[i].key))
            set_why(&p[i], "%s would be a second obsm '%s'", p[i].csv->rel, p[i].key);
        if (!p[i].values) {
            if (cfs_dataset_leave_out(ds, element, "%s; it was not read",
                                      p[i].why ? p[i].why : "it cannot be read") < 0)
                rc = cfs_err_oom(err);
            continue;
        }
        cfs_elem *el = matrix_elem(p[i].key, ds->n_obs, p[i].ncomp, p[i].values);
        if (el)
            p[i].values = NULL;
        rc = cfs_elem_add_or_free(obsm, el, err);
        if (report)
            report->any_drawable = true;
    }
    for (size_t i = 0; i < k; i++) {
        free(p[i].basis);
        free(p[i].values);
        free(p[i].why);
        free(p[i].key);
    }
    free(p);
    return rc;
}
