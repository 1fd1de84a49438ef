/*
 * A MatrixMarket matrix with its cell and gene lists as a dataset (see mex.h). The lists are
 * read whole (they are small next to the matrix) and checked against the matrix's size line
 * before the matrix is indexed, so a size line that lies allocates nothing.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strdup */
#endif

#include "mex.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "csv.h"
#include "mtx.h"
#include "names.h"
#include "number.h"
#include "strfmt.h"
#include "strset.h"
#include "strlist.h"
#include "utf8.h"

#define TABLE_MAX_COLUMNS 4096

typedef unsigned long long ull;

/* Removes the first line (a header). */
static void lines_drop_first(cfs_strlist *l)
{
    if (!l->n)
        return;
    free(l->v[0]);
    memmove(l->v, l->v + 1, (l->n - 1) * sizeof *l->v);
    l->n--;
}

/* Every line of a list file (as UTF-8; other text is taken as Latin-1); empty lines are
 * allowed only at its end. */
static int read_list(const cfs_mex_file *f, const char *redo, cfs_strlist *out, cfs_err *err)
{
    cfs_text *t;
    if (cfs_text_open(f->path, f->rel, &t, err) < 0)
        return -1;
    char *line;
    size_t len;
    int rc;
    uint64_t blank_at = 0;
    while ((rc = cfs_text_line(t, &line, &len, err)) > 0) {
        if (len == 0) {
            if (!blank_at)
                blank_at = cfs_text_lineno(t);
            continue;
        }
        if (blank_at) {
            rc = cfs_err_set(err, "%s: line %llu is empty; %s", f->rel, (ull)blank_at, redo);
            break;
        }
        if (!cfs_text_terminated(t)) {
            rc = cfs_err_set(err, "%s: its last line (%llu) has no line end, so the file looks "
                             "cut short; %s", f->rel, (ull)cfs_text_lineno(t), redo);
            break;
        }
        if (cfs_strlist_push(out, cfs_text_to_utf8(line, len)) < 0) {
            rc = cfs_err_oom(err);
            break;
        }
    }
    cfs_text_close(t);
    if (rc < 0)
        cfs_strlist_free(out);
    return rc < 0 ? -1 : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* CSV tables (a header, then one row per cell or gene) */

typedef struct table {
    long ncols;
    char **header;          /* ncols */
    char ***rows;           /* nrows x ncols */
    size_t nrows;
} table;

static void table_free(table *t)
{
    for (size_t r = 0; r < t->nrows; r++) {
        cfs_strings_free(t->rows[r], (size_t)t->ncols);
        free(t->rows[r]);
    }
    free(t->rows);
    if (t->header)
        cfs_strings_free(t->header, (size_t)t->ncols);
    free(t->header);
    memset(t, 0, sizeof *t);
}

static char **split_copy(char *line, long n, char **fld)
{
    char **v = calloc((size_t)n, sizeof *v);
    for (long k = 0; v && k < n; k++)
        if (!(v[k] = strdup(fld[k]))) {
            cfs_strings_free(v, (size_t)k);
            free(v);
            return NULL;
        }
    (void)line;
    return v;
}

/* Splits a list's lines into a table: the first line is the header. */
static int read_table(const cfs_mex_file *f, cfs_strlist *l, const char *redo, table *t,
                      cfs_err *err)
{
    memset(t, 0, sizeof *t);
    if (l->n == 0)
        return cfs_err_set(err, "%s is empty (a table with a header line is expected); %s",
                           f->rel, redo);
    char **fld = malloc(TABLE_MAX_COLUMNS * sizeof *fld);
    if (!fld)
        return cfs_err_oom(err);
    int rc = 0;
    long n = cfs_csv_split(l->v[0], ',', fld, TABLE_MAX_COLUMNS);
    if (n < 1 || n > TABLE_MAX_COLUMNS)
        rc = cfs_err_set(err, "%s: line 1 is not a CSV header (%s); %s", f->rel,
                         n < 1 ? "a quote is not closed" : "more than 4096 columns", redo);
    else if (!(t->header = split_copy(l->v[0], n, fld)) ||
             !(t->rows = calloc(l->n, sizeof *t->rows)))
        rc = cfs_err_oom(err);
    if (rc == 0)
        t->ncols = n;
    for (size_t i = 1; rc == 0 && i < l->n; i++) {
        long m = cfs_csv_split(l->v[i], ',', fld, TABLE_MAX_COLUMNS);
        if (m != n) {
            rc = m < 0 ? cfs_err_set(err, "%s: line %zu: a quote is not closed; %s", f->rel,
                                     i + 1, redo)
                       : cfs_err_set(err, "%s: line %zu has %ld fields where the header has "
                                     "%ld; %s", f->rel, i + 1, m, n, redo);
            break;
        }
        if (!(t->rows[t->nrows] = split_copy(l->v[i], n, fld)))
            rc = cfs_err_oom(err);
        else
            t->nrows++;
    }
    free(fld);
    if (rc < 0)
        table_free(t);
    return rc;
}

/* pandas.read_csv's default NA tokens. */
static bool na_token(const char *s)
{
    static const char *const na[] = {
        "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
        "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null", NULL,
    };
    for (size_t i = 0; na[i]; i++)
        if (strcmp(s, na[i]) == 0)
            return true;
    return false;
}

static cfs_elem *mem_elem(cfs_elem_kind kind, const char *name, cfs_dtype t, int ndim,
                          const uint64_t *shape, void *data)
{
    cfs_array *a = cfs_array_from_memory(t, ndim, shape, data);
    if (!a) {
        free(data);
        return NULL;
    }
    return cfs_elem_from_array(kind, name, a);
}

/* A string array element of n strings (ownership of strs and its strings passes). */
static cfs_elem *strings_elem(const char *name, char **strs, uint64_t n)
{
    cfs_array *a = cfs_array_from_memory(CFS_STRING, 1, &n, strs);
    if (!a) {
        cfs_strings_free(strs, (size_t)n);
        free(strs);
        return NULL;
    }
    return cfs_elem_from_array(CFS_EL_ARRAY, name, a);
}

/* Column col of the table's rows as strings (copies). */
static char **column_strings(const table *t, long col)
{
    char **v = calloc(t->nrows ? t->nrows : 1, sizeof *v);
    for (size_t r = 0; v && r < t->nrows; r++)
        if (!(v[r] = strdup(t->rows[r][col]))) {
            cfs_strings_free(v, r);
            free(v);
            return NULL;
        }
    return v;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A string column: categorical when a value repeats or is missing (anndata's
 * strings_to_categoricals; categories sorted as pandas sorts them), else a string array. */
static cfs_elem *string_column(const table *t, long col, const char *name)
{
    uint64_t n = t->nrows;
    bool missing = false;
    cfs_strset *seen = cfs_strset_new((size_t)n);
    bool repeats = false;
    if (!seen)
        return NULL;
    for (size_t r = 0; r < n; r++) {
        const char *s = t->rows[r][col];
        if (na_token(s)) {
            missing = true;
            continue;
        }
        int added = cfs_strset_add(seen, s, r);
        if (added < 0) {
            cfs_strset_free(seen);
            return NULL;
        }
        if (added == 0)
            repeats = true;
    }
    cfs_strset_free(seen);
    if (!missing && !repeats) {
        char **v = column_strings(t, col);
        return v ? strings_elem(name, v, n) : NULL;
    }
    /* the distinct values, sorted */
    const char **cats = malloc((n ? n : 1) * sizeof *cats);
    if (!cats)
        return NULL;
    size_t k = 0;
    for (size_t r = 0; r < n; r++)
        if (!na_token(t->rows[r][col]))
            cats[k++] = t->rows[r][col];
    qsort(cats, k, sizeof *cats, cmp_str);
    size_t ncat = 0;
    for (size_t i = 0; i < k; i++)
        if (ncat == 0 || strcmp(cats[ncat - 1], cats[i]) != 0)
            cats[ncat++] = cats[i];
    cfs_dtype ct = ncat <= INT8_MAX ? CFS_INT8 : ncat <= INT16_MAX ? CFS_INT16 : CFS_INT32;
    void *codes = malloc((n ? n : 1) * cfs_dtype_size(ct));
    char **cv = calloc(ncat ? ncat : 1, sizeof *cv);
    bool ok = codes && cv;
    for (size_t i = 0; ok && i < ncat; i++)
        ok = (cv[i] = strdup(cats[i])) != NULL;
    for (size_t r = 0; ok && r < n; r++) {
        int64_t code = -1;
        const char *s = t->rows[r][col];
        if (!na_token(s)) {
            size_t lo = 0, hi = ncat;
            while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (strcmp(cats[mid], s) < 0)
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
    free(cats);
    if (!ok) {
        free(codes);
        if (cv)
            cfs_strings_free(cv, ncat);
        free(cv);
        return NULL;
    }
    cfs_elem *el = mem_elem(CFS_EL_CATEGORICAL, name, ct, 1, &n, codes);
    if (!el) {
        cfs_strings_free(cv, ncat);
        free(cv);
        return NULL;
    }
    if (!(el->categories = strings_elem("categories", cv, ncat))) {
        cfs_elem_free(el);
        return NULL;
    }
    return el;
}

/* A column typed as pandas.read_csv types it: int64, float64 (NaN for NA tokens), else
 * strings. *numeric tells which. */
static cfs_elem *table_column(const table *t, long col, const char *name, bool *numeric)
{
    uint64_t n = t->nrows;
    bool ints = true, nums = true;
    for (size_t r = 0; r < n && nums; r++) {
        const char *s = t->rows[r][col];
        int64_t i;
        double d;
        if (na_token(s)) {
            ints = false;
            continue;
        }
        if (ints && cfs_parse_i64(s, &i))
            continue;
        ints = false;
        if (!cfs_parse_double(s, false, &d))
            nums = false;
    }
    *numeric = nums;
    if (!nums)
        return string_column(t, col, name);
    if (ints && n) {
        int64_t *v = malloc(n * sizeof *v);
        for (size_t r = 0; v && r < n; r++)
            cfs_parse_i64(t->rows[r][col], &v[r]);
        return v ? mem_elem(CFS_EL_ARRAY, name, CFS_INT64, 1, &n, v) : NULL;
    }
    double *v = malloc((n ? n : 1) * sizeof *v);
    for (size_t r = 0; v && r < n; r++)
        if (na_token(t->rows[r][col]) || !cfs_parse_double(t->rows[r][col], false, &v[r]))
            v[r] = NAN;
    return v ? mem_elem(CFS_EL_ARRAY, name, CFS_FLOAT64, 1, &n, v) : NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Embedding columns of a cell table */

bool cfs_mex_embedding_column(const char *name, size_t *prefix_len, size_t *basis_len,
                              unsigned *k)
{
    static const char *const bases[] = {"umap", "tsne", NULL};
    size_t n = strlen(name), d = n;
    while (d > 0 && isdigit((unsigned char)name[d - 1]))
        d--;
    if (d == n || n - d > 3 || name[d] == '0')
        return false;
    unsigned v = (unsigned)atoi(name + d);
    size_t end = d;
    if (end > 0 && (name[end - 1] == '_' || name[end - 1] == '-' || name[end - 1] == '.'))
        end--;
    for (size_t b = 0; bases[b]; b++) {
        size_t bl = strlen(bases[b]);
        if (end >= bl && strncasecmp(name + end - bl, bases[b], bl) == 0) {
            *prefix_len = end - bl;
            *basis_len = bl;
            *k = v;
            return true;
        }
    }
    return false;
}

/* obsm keys: X_<basis>, or X_<prefix>_<basis> (lower case, other characters as '_'). */
static char *embedding_key(const char *name, size_t pl, size_t bl)
{
    size_t p = pl;
    while (p > 0 && (name[p - 1] == '_' || name[p - 1] == '-' || name[p - 1] == '.'))
        p--;
    char *key = cfs_strdupf("X_%.*s%s%.*s", (int)p, name, p ? "_" : "", (int)bl, name + pl);
    for (char *c = key ? key + 2 : NULL; c && *c; c++)
        *c = isalnum((unsigned char)*c) ? (char)tolower((unsigned char)*c) : '_';
    return key;
}

/* Groups of numeric columns <prefix><basis>_1..k (k >= 2) become obsm arrays. */
static int table_embeddings(cfs_dataset *ds, const table *t, const bool *numeric,
                            cfs_err *err)
{
    uint64_t n = t->nrows;
    unsigned char *used = calloc((size_t)t->ncols, 1);
    if (!used)
        return cfs_err_oom(err);
    int rc = 0;
    for (long c = 1; rc == 0 && c < t->ncols; c++) {
        size_t pl, bl;
        unsigned k;
        const char *name = t->header[c];
        if (used[c] || !numeric[c] || !cfs_mex_embedding_column(name, &pl, &bl, &k) || k != 1)
            continue;
        /* its components 1, 2, ...: same prefix, basis and separator, numeric */
        long comp[16];
        unsigned nk = 0;
        size_t stem = strlen(name) - 1;  /* the name without its "1" */
        for (unsigned want = 1; want <= 16; want++) {
            long found = -1;
            for (long d = 1; d < t->ncols && found < 0; d++) {
                const char *o = t->header[d];
                char *digits = NULL;
                if (!used[d] && numeric[d] && strncmp(o, name, stem) == 0 &&
                    (digits = cfs_strdupf("%u", want)) && strcmp(o + stem, digits) == 0)
                    found = d;
                free(digits);
            }
            if (found < 0)
                break;
            comp[nk++] = found;
        }
        if (nk < 2)
            continue;
        char *key = embedding_key(name, pl, bl);
        if (!key) {
            rc = cfs_err_oom(err);
            break;
        }
        cfs_elem *obsm = cfs_elem_ensure_dict(ds->root, "obsm");
        if (!obsm) {
            free(key);
            rc = cfs_err_oom(err);
            break;
        }
        if (cfs_elem_child(obsm, key)) {
            if (cfs_dataset_leave_out(ds, key, "columns %s.. would be a second obsm '%s'; they "
                                      "stay obs columns", name, key) < 0)
                rc = cfs_err_oom(err);
            free(key);
            continue;
        }
        double *v = malloc((n ? n * nk : 1) * sizeof *v);
        for (uint64_t r = 0; v && r < n; r++)
            for (unsigned j = 0; j < nk; j++) {
                const char *s = t->rows[r][comp[j]];
                if (na_token(s) || !cfs_parse_double(s, false, &v[r * nk + j]))
                    v[r * nk + j] = NAN;
            }
        for (unsigned j = 0; j < nk; j++)
            used[comp[j]] = 1;
        uint64_t shape[2] = {n, nk};
        rc = cfs_elem_add_or_free(obsm, v ? mem_elem(CFS_EL_ARRAY, key, CFS_FLOAT64, 2, shape, v)
                                          : NULL, err);
        free(key);
    }
    free(used);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* obs and var */

static cfs_elem *frame(const char *name, char **index, uint64_t n)
{
    cfs_elem *df = cfs_elem_new(CFS_EL_DATAFRAME, name);
    cfs_elem *ix = strings_elem("_index", index, n);
    if (!df || !ix || !(df->index_name = strdup("_index"))) {
        cfs_elem_free(df);
        cfs_elem_free(ix);
        return NULL;
    }
    df->index = ix;
    return df;
}

/* Every column of the table but skip (the index) as a column of df; *numeric per column. */
static int table_columns(cfs_elem *df, const table *t, long skip, bool *numeric, cfs_err *err)
{
    for (long c = 0; c < t->ncols; c++) {
        numeric[c] = false;
        if (c == skip)
            continue;
        const char *name = t->header[c];
        if (!*name || strcmp(name, "_index") == 0 || cfs_elem_child(df, name))
            continue;   /* pandas would rename it; an unnamed or repeated column is skipped */
        if (cfs_elem_add_or_free(df, table_column(t, c, name, &numeric[c]), err) < 0)
            return -1;
    }
    return 0;
}

static int obs_from_list(cfs_dataset *ds, cfs_strlist *l, cfs_err *err)
{
    uint64_t n = l->n;
    char **v = l->v ? l->v : calloc(1, sizeof *v);
    l->v = NULL;
    l->n = l->cap = 0;
    if (!v)
        return cfs_err_oom(err);
    return cfs_elem_add_or_free(ds->root, frame("obs", v, n), err);
}

static int obs_from_table(cfs_dataset *ds, const table *t, cfs_err *err)
{
    char **ix = column_strings(t, 0);
    cfs_elem *obs = ix ? frame("obs", ix, t->nrows) : NULL;
    bool *numeric = calloc((size_t)t->ncols, sizeof *numeric);
    int rc = obs && numeric ? table_columns(obs, t, 0, numeric, err) : cfs_err_oom(err);
    if (rc == 0)
        rc = cfs_elem_add_or_free(ds->root, obs, err);
    else
        cfs_elem_free(obs);
    if (rc == 0)
        rc = table_embeddings(ds, t, numeric, err);
    free(numeric);
    return rc;
}

static int var_from_table(cfs_dataset *ds, const table *t, cfs_err *err)
{
    long name_col = 0;
    for (long c = 0; c < t->ncols; c++)
        if (strcmp(t->header[c], "gene_short_name") == 0 || strcmp(t->header[c], "gene_name") == 0)
            name_col = c;
    char **ix = column_strings(t, name_col);
    size_t changed;
    if (ix && cfs_names_make_unique(ix, t->nrows, &changed) < 0) {
        cfs_strings_free(ix, t->nrows);
        free(ix);
        ix = NULL;
    }
    cfs_elem *var = ix ? frame("var", ix, t->nrows) : NULL;
    bool *numeric = calloc((size_t)t->ncols, sizeof *numeric);
    /* every column stays a column, the names' too (the index is made unique) */
    int rc = var && numeric ? table_columns(var, t, -1, numeric, err) : cfs_err_oom(err);
    free(numeric);
    if (rc < 0) {
        cfs_elem_free(var);
        return -1;
    }
    return cfs_elem_add_or_free(ds->root, var, err);
}

/* Gene lines: id[\tname[\ttype]] -> index (names made unique), gene_ids, feature_types. */
static int var_from_list(cfs_dataset *ds, const cfs_mex_spec *s, cfs_strlist *l,
                         cfs_strlist *names_list, cfs_err *err)
{
    uint64_t n = l->n;
    size_t cells = n ? (size_t)n : 1;
    long want = s->gene_fields;
    if (want == 0 && n) {
        char *fld[3];
        char *copy = strdup(l->v[0]);
        if (!copy)
            return cfs_err_oom(err);
        want = cfs_csv_split(copy, '\t', fld, 3);
        free(copy);
        if (want > 3)
            want = 3;
        if (want < 1)
            want = 1;
    }
    bool has_names = want >= 2 || names_list;
    char **ids = calloc(cells, sizeof *ids), **names = calloc(cells, sizeof *names);
    char **types = want >= 3 ? calloc(cells, sizeof *types) : NULL;
    int rc = ids && names && (want < 3 || types) ? 0 : cfs_err_oom(err);
    for (uint64_t i = 0; rc == 0 && i < n; i++) {
        char *fld[3];
        long nf = cfs_csv_split(l->v[i], '\t', fld, 3);
        if (nf < want) {
            if (s->gene_fields)
                rc = cfs_err_set(err, "%s: line %llu has %ld tab-separated field%s where Cell "
                                 "Ranger writes %s; %s", s->genes.rel, (ull)i + 1,
                                 nf < 0 ? 0 : nf, nf == 1 ? "" : "s",
                                 want == 2 ? "2 (id, symbol)" : "3 (id, name, type)", s->redo);
            else
                rc = cfs_err_set(err, "%s: line %llu has %ld tab-separated field%s where its "
                                 "first line has %ld; %s", s->genes.rel, (ull)i + 1,
                                 nf < 0 ? 0 : nf, nf == 1 ? "" : "s", want, s->redo);
            break;
        }
        const char *name = names_list ? names_list->v[i] : want >= 2 ? fld[1] : fld[0];
        if (!(ids[i] = strdup(fld[0])) || !(names[i] = strdup(name)) ||
            (types && !(types[i] = strdup(fld[2]))))
            rc = cfs_err_oom(err);
    }
    size_t changed;
    if (rc == 0 && cfs_names_make_unique(names, (size_t)n, &changed) < 0)
        rc = cfs_err_oom(err);
    if ((rc < 0 || !has_names) && ids) {
        cfs_strings_free(ids, (size_t)n);
        free(ids);
        ids = NULL;
    }
    if (rc < 0) {
        if (names)
            cfs_strings_free(names, (size_t)n);
        if (types)
            cfs_strings_free(types, (size_t)n);
        free(names);
        free(types);
        return -1;
    }
    cfs_elem *var = frame("var", names, n);
    if (!var) {
        if (ids)
            cfs_strings_free(ids, (size_t)n);
        if (types)
            cfs_strings_free(types, (size_t)n);
        free(ids);
        free(types);
        return cfs_err_oom(err);
    }
    cfs_elem *gid = ids ? strings_elem("gene_ids", ids, n) : NULL;
    cfs_elem *ft = types ? strings_elem("feature_types", types, n) : NULL;
    rc = 0;
    if (ids)
        rc = cfs_elem_add_or_free(var, gid, err);
    if (types && rc == 0)
        rc = cfs_elem_add_or_free(var, ft, err);
    else if (types)
        cfs_elem_free(ft);
    if (rc < 0) {
        cfs_elem_free(var);
        return -1;
    }
    return cfs_elem_add_or_free(ds->root, var, err);
}

/* ------------------------------------------------------------------------------------------ */
/* Open */

/* Which way the matrix lies, from the size line and the lists' lengths (headers dropped from
 * lists one line too long, when allowed). 1 cells are rows, 0 genes are rows, -1 refused. */
static int orientation(const cfs_mex_spec *s, uint64_t rows, uint64_t cols, cfs_strlist *cl,
                       cfs_strlist *gl, cfs_err *err)
{
    uint64_t b = cl->n - (s->cells_table && cl->n ? 1 : 0);
    uint64_t f = gl->n - (s->genes_table && gl->n ? 1 : 0);
    bool gxc = rows == f && cols == b, cxg = rows == b && cols == f;
    if (!gxc && !cxg && s->list_headers) {
        /* a header line on either list (or both) */
        for (int drop = 1; drop < 4 && !gxc && !cxg; drop++) {
            uint64_t b2 = b - (uint64_t)((drop & 1) && !s->cells_table && b > 0);
            uint64_t f2 = f - (uint64_t)((drop & 2) && !s->genes_table && f > 0);
            if ((rows == f2 && cols == b2) || (rows == b2 && cols == f2)) {
                if (b2 != b)
                    lines_drop_first(cl);
                if (f2 != f)
                    lines_drop_first(gl);
                b = b2;
                f = f2;
                gxc = rows == f && cols == b;
                cxg = rows == b && cols == f;
            }
        }
    }
    if (s->fixed && s->cells_are_rows ? !cxg : s->fixed && !gxc)
        gxc = cxg = false;
    if (!gxc && !cxg)
        return cfs_err_set(err, "%s is %llu x %llu (its size line) but %s lists %llu features "
                           "and %s %llu barcodes: the files do not belong together; %s",
                           s->matrix.rel, (ull)rows, (ull)cols, s->genes.rel, (ull)f,
                           s->cells.rel, (ull)b, s->regroup);
    if (gxc && cxg)
        return s->cells_are_rows ? 1 : 0;
    return cxg ? 1 : 0;
}

int cfs_mex_open(const char *source, const cfs_mex_spec *s, cfs_dataset **out, cfs_err *err)
{
    *out = NULL;
    cfs_strlist cl = {0}, gl = {0}, nl = {0};
    table ct = {0}, gt = {0};
    cfs_mtx *m = NULL;
    cfs_dataset *ds = NULL;
    int rc = read_list(&s->cells, s->redo, &cl, err);
    if (rc == 0)
        rc = read_list(&s->genes, s->redo, &gl, err);
    if (rc == 0 && s->gene_names.path)
        rc = read_list(&s->gene_names, s->redo, &nl, err);
    if (rc == 0)
        rc = cfs_mtx_open(s->matrix.path, s->matrix.rel, &m, err);
    int cells_rows = 0;
    uint64_t rows = 0, cols = 0, nnz;
    if (rc == 0) {
        cfs_mtx_size(m, &rows, &cols, &nnz);
        /* checked before the index allocates anything for the size line's claims */
        cells_rows = orientation(s, rows, cols, &cl, &gl, err);
        rc = cells_rows < 0 ? -1 : 0;
    }
    if (rc == 0 && s->gene_names.path && nl.n != gl.n - (s->genes_table ? 1 : 0))
        rc = cfs_err_set(err, "%s lists %zu names for the %zu genes of %s: the files do not "
                         "belong together; %s", s->gene_names.rel, nl.n, gl.n, s->genes.rel,
                         s->regroup);
    if (rc == 0 && s->cells_table)
        rc = read_table(&s->cells, &cl, s->redo, &ct, err);
    if (rc == 0 && s->genes_table)
        rc = read_table(&s->genes, &gl, s->redo, &gt, err);
    if (rc == 0)
        rc = cfs_mtx_index(m, cells_rows == 0, err);
    if (rc == 0 && (!(ds = cfs_dataset_new(source)) ||
                    !(ds->root = cfs_elem_new(CFS_EL_ANNDATA, NULL))))
        rc = cfs_err_oom(err);
    if (rc == 0) {
        ds->n_obs = cells_rows ? rows : cols;
        ds->n_vars = cells_rows ? cols : rows;
        rc = s->cells_table ? obs_from_table(ds, &ct, err) : obs_from_list(ds, &cl, err);
    }
    if (rc == 0)
        rc = s->genes_table ? var_from_table(ds, &gt, err)
                            : var_from_list(ds, s, &gl, s->gene_names.path ? &nl : NULL, err);
    if (rc == 0)
        rc = cfs_elem_add_or_free(ds->root, cfs_mtx_sparse(m, "X"), err);
    cfs_mtx_close(m);
    cfs_strlist_free(&cl);
    cfs_strlist_free(&gl);
    cfs_strlist_free(&nl);
    table_free(&ct);
    table_free(&gt);
    if (rc < 0) {
        cfs_dataset_free(ds);
        return -1;
    }
    *out = ds;
    return 0;
}
