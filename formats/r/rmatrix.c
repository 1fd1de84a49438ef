/* Matrices of R objects as model elements (see rconvert.h): base matrices, the Matrix
 * package's sparse classes and its general dense ones. */
#include "rconvert.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/*
 * A Matrix package sparse class by the three letters of its name (input-formats.md §8.12):
 * values (d double, l logical, n pattern: no x slot), structure (g general, s symmetric: one
 * triangle stored, t triangular: a unit diagonal not stored when diag is "U") and storage (C
 * column-compressed: i, p; R row-compressed: j, p; T triplets: i, j). SeuratObject's Graph
 * extends dgCMatrix.
 */
typedef struct sparse_class {
    char values, structure, storage;
} sparse_class;

static bool sparse_class_of(const r_obj *m, sparse_class *sc)
{
    if (!m || m->type != R_S4)
        return false;
    if (r_inherits(m, "Graph") || r_inherits(m, "dgCMatrix")) {
        *sc = (sparse_class){'d', 'g', 'C'};
        return true;
    }
    const char *cls = r_class_name(m);
    if (!cls || strlen(cls) != 9 || strcmp(cls + 3, "Matrix") != 0 || !strchr("dln", cls[0]) ||
        !strchr("gst", cls[1]) || !strchr("CRT", cls[2]))
        return false;
    *sc = (sparse_class){cls[0], cls[1], cls[2]};
    return true;
}

/* dgeMatrix, lgeMatrix: a general dense matrix whose values are its x slot. */
static bool dense_matrix_class(const r_obj *m)
{
    return m && m->type == R_S4 && (r_inherits(m, "dgeMatrix") || r_inherits(m, "lgeMatrix"));
}

bool rc_is_sparse(const r_obj *m)
{
    sparse_class sc;
    return sparse_class_of(m, &sc);
}

bool rc_is_dense(const r_obj *m)
{
    if (dense_matrix_class(m))
        return true;
    const r_obj *d = r_attr(m, "dim");
    return m && (m->type == R_REAL || m->type == R_INT || m->type == R_LGL) && d &&
           d->type == R_INT && d->length == 2;
}

/* The vector holding a dense matrix's values: itself, or a Matrix class's x slot. */
static const r_obj *dense_values(const r_obj *m)
{
    return dense_matrix_class(m) ? r_slot(m, "x") : m;
}

bool rc_dims(const r_obj *m, uint64_t *nrow, uint64_t *ncol)
{
    bool s4 = rc_is_sparse(m) || dense_matrix_class(m);
    const r_obj *d = s4 ? r_slot(m, "Dim") : rc_is_dense(m) ? r_attr(m, "dim") : NULL;
    const int32_t *v = d && d->type == R_INT && d->length == 2 ? r_ints(d) : NULL;
    if (!v || v[0] < 0 || v[1] < 0)
        return false;
    *nrow = (uint64_t)v[0];
    *ncol = (uint64_t)v[1];
    if (rc_is_sparse(m))
        return true;
    /* a dense matrix holds exactly its cells (a damaged dim attribute says otherwise) */
    const r_obj *x = dense_values(m);
    return x && (x->type == R_REAL || x->type == R_INT || x->type == R_LGL) &&
           *nrow * *ncol == x->length;
}

const r_obj *rc_dimnames(const r_obj *m, int axis)
{
    bool s4 = rc_is_sparse(m) || dense_matrix_class(m);
    const r_obj *dn = s4 ? r_slot(m, "Dimnames") : r_attr(m, "dimnames");
    const r_obj *v = dn && dn->type == R_VEC ? r_vec_at(dn, (uint64_t)axis) : NULL;
    return v && v->type == R_STR ? v : NULL;
}

/* ---- sparse ---- */

/* Compressed arrays of a sparse matrix as the model holds them: values (float64, or bool for
 * logical and pattern matrices without NA), indices and pointers; views of the slots, or
 * arrays of their own. by_row: the pointers run over R's rows (CSR of R's matrix). */
typedef struct sparse_parts {
    cfs_array *x, *ix, *p;
    uint64_t nnz, np;
    bool by_row;
} sparse_parts;

static void sparse_parts_free(sparse_parts *s)
{
    cfs_array_unref(s->x);
    cfs_array_unref(s->ix);
    cfs_array_unref(s->p);
    *s = (sparse_parts){0};
}

static const char *const BAD_SLOTS =
    "a sparse matrix whose slots are not as the Matrix package writes them";
static const char *const BAD_INDICES =
    "a sparse matrix whose indices or pointers contradict its shape (a damaged file)";

/* The x slot, or NULL (a pattern matrix has none); *why set when it is malformed. */
static const r_obj *sparse_values(const r_obj *m, sparse_class sc, uint64_t n, const char **why)
{
    if (sc.values == 'n')
        return NULL;
    const r_obj *x = r_slot(m, "x");
    if (!x || x->type != (sc.values == 'd' ? R_REAL : R_LGL) || x->length != n)
        *why = BAD_SLOTS;
    return *why ? NULL : x;
}

/* The index and pointer slots of a C or R matrix, checked against its shape by their stats
 * (noted as the stream passed, so their values are not read again here). */
static int compressed_indices(const rconv *c, const r_obj *m, bool by_row, uint64_t rrows,
                              uint64_t rcols, const r_obj **io, const r_obj **po,
                              const char **why)
{
    const r_obj *i = r_slot(m, by_row ? "j" : "i"), *p = r_slot(m, "p");
    uint64_t outer = by_row ? rrows : rcols, inner = by_row ? rcols : rrows;
    r_vec_stats is, ps;
    if (!i || !p || i->type != R_INT || p->type != R_INT || p->length != outer + 1 ||
        !r_vec_stats_of(c->vecs, i, &is) || !r_vec_stats_of(c->vecs, p, &ps)) {
        *why = BAD_SLOTS;
        return -1;
    }
    uint64_t nnz = i->length;
    bool ok = ps.first == 0 && ps.last >= 0 && (uint64_t)ps.last == nnz && ps.nondecreasing &&
              !ps.has_na && !is.has_na && (nnz == 0 || (is.min >= 0 && (uint64_t)is.max < inner));
    if (!ok) {
        *why = BAD_INDICES;
        return -1;
    }
    *io = i;
    *po = p;
    return 0;
}

/* A general C or R matrix: views of its index, pointer and value slots (logical values as bool,
 * or float64 with NaN when one is NA; a pattern matrix's as ones). -1 with *why (malformed) or
 * without (out of memory). */
static int compressed_parts(const rconv *c, const r_obj *m, sparse_class sc, uint64_t rrows,
                            uint64_t rcols, sparse_parts *s, const char **why)
{
    bool by_row = sc.storage == 'R';
    const r_obj *i, *p;
    if (compressed_indices(c, m, by_row, rrows, rcols, &i, &p, why) < 0)
        return -1;
    uint64_t nnz = i->length, np = p->length;
    const r_obj *x = sparse_values(m, sc, nnz, why);
    if (*why)
        return -1;
    r_vec_stats xs;
    bool na = sc.values == 'l' && r_vec_stats_of(c->vecs, x, &xs) && xs.has_na;
    cfs_dtype t = sc.values == 'd' || na ? CFS_FLOAT64 : CFS_BOOL;
    *s = (sparse_parts){.ix = rc_view(c, i, CFS_INT32, 1, &nnz, false),
                        .p = rc_view(c, p, CFS_INT32, 1, &np, false), .nnz = nnz, .np = np,
                        .by_row = by_row};
    if (x) {
        s->x = rc_view(c, x, t, 1, &nnz, false);
    } else {
        uint8_t *ones = malloc(nnz ? nnz : 1);
        if (ones)
            memset(ones, 1, nnz);
        s->x = ones ? cfs_array_from_memory(CFS_BOOL, 1, &nnz, ones) : NULL;
        if (ones && !s->x)
            free(ones);
    }
    if (!s->x || !s->ix || !s->p) {
        sparse_parts_free(s);
        return -1;
    }
    return 0;
}

typedef struct triplet {
    int32_t i, j;
    double x;
} triplet;

static int cmp_triplet(const void *a, const void *b)
{
    const triplet *s = a, *t = b;
    if (s->j != t->j)
        return s->j < t->j ? -1 : 1;
    return s->i < t->i ? -1 : s->i > t->i;
}

static double stored_value(const void *xv, sparse_class sc, uint64_t k)
{
    if (sc.values == 'd')
        return ((const double *)xv)[k];
    if (sc.values == 'n')
        return 1;
    int32_t v = ((const int32_t *)xv)[k];
    return v == R_NA_LGL ? NAN : v != 0;
}

/* The slots a triplet expansion reads whole, in memory: borrowed from the tree, or copies
 * (owned[]) read from the file. */
typedef struct whole_slots {
    const int32_t *i, *j, *p;
    const void *x;
    void *owned[4];
} whole_slots;

static void whole_slots_free(whole_slots *w)
{
    for (int k = 0; k < 4; k++)
        free(w->owned[k]);
}

/* Slot vector v in memory into *dst; false when it cannot be read (*why set) or out of memory
 * (*why NULL). */
static bool load(const rconv *c, const r_obj *v, const void **dst, void **owned,
                 const char **why)
{
    cfs_err err = {0};
    *dst = v ? rc_values(c, v, owned, &err) : NULL;
    if (!*dst && err.status != CFS_ENOMEM)
        *why = BAD_SLOTS;
    return *dst != NULL;
}

/* A triangular matrix whose diagonal is all ones and not stored (diag "U"). */
static bool unit_diagonal(const r_obj *m, sparse_class sc)
{
    const char *d = r_str_at(r_slot(m, "diag"), 0, NULL);
    return sc.structure == 't' && d && strcmp(d, "U") == 0;
}

/* The entries a matrix stores as triplets (R's row and column), with room for the entries
 * implied_entries adds (a symmetric matrix's mirror, a unit diagonal); NULL with *why
 * (malformed) or without (out of memory). */
static triplet *stored_entries(const rconv *c, const r_obj *m, sparse_class sc, uint64_t rrows,
                               uint64_t rcols, uint64_t *n, const char **why)
{
    whole_slots w = {0};
    const r_obj *i, *j = NULL, *p = NULL;
    bool by_row = sc.storage == 'R';
    triplet *t = NULL;
    if (sc.storage == 'T') {
        i = r_slot(m, "i");
        j = r_slot(m, "j");
        if (!i || !j || i->type != R_INT || j->type != R_INT || i->length != j->length) {
            *why = BAD_SLOTS;
            return NULL;
        }
    } else if (compressed_indices(c, m, by_row, rrows, rcols, &i, &p, why) < 0) {
        return NULL;
    }
    *n = i->length;
    const r_obj *x = sparse_values(m, sc, *n, why);
    if (*why || !load(c, i, (const void **)&w.i, &w.owned[0], why) ||
        (j && !load(c, j, (const void **)&w.j, &w.owned[1], why)) ||
        (p && !load(c, p, (const void **)&w.p, &w.owned[2], why)) ||
        (x && !load(c, x, &w.x, &w.owned[3], why)))
        goto done;
    for (uint64_t k = 0; j && k < *n; k++)
        if (w.i[k] < 0 || (uint64_t)w.i[k] >= rrows || w.j[k] < 0 ||
            (uint64_t)w.j[k] >= rcols) {
            *why = BAD_INDICES;
            goto done;
        }
    uint64_t diag = rrows < rcols ? rrows : rcols;
    uint64_t room = *n + (sc.structure == 's' ? *n : 0) + (unit_diagonal(m, sc) ? diag : 0);
    if (!(t = malloc((room ? room : 1) * sizeof *t)))
        goto done;
    if (sc.storage == 'T')
        for (uint64_t k = 0; k < *n; k++)
            t[k] = (triplet){w.i[k], w.j[k], stored_value(w.x, sc, k)};
    else
        for (uint64_t o = 0; o < (by_row ? rrows : rcols); o++)
            for (int32_t k = w.p[o]; k < w.p[o + 1]; k++) {
                int32_t outer = (int32_t)o;
                t[k] = (triplet){by_row ? outer : w.i[k], by_row ? w.i[k] : outer,
                                 stored_value(w.x, sc, (uint64_t)k)};
            }
done:
    whole_slots_free(&w);
    return t;
}

/* What a symmetric or unit-triangular matrix leaves out: the other triangle's mirror, the
 * unit diagonal. */
static uint64_t implied_entries(const r_obj *m, sparse_class sc, uint64_t rrows, uint64_t rcols,
                                triplet *t, uint64_t n)
{
    uint64_t total = n;
    if (sc.structure == 's')
        for (uint64_t k = 0; k < n; k++)
            if (t[k].i != t[k].j)
                t[total++] = (triplet){t[k].j, t[k].i, t[k].x};
    if (unit_diagonal(m, sc))
        for (uint64_t k = 0; k < rrows && k < rcols; k++)
            t[total++] = (triplet){(int32_t)k, (int32_t)k, 1};
    return total;
}

/* Triplets as CSC arrays over R's columns: sorted by column then row, repeated entries summed
 * (the Matrix package's meaning of them); logical and pattern values become bool unless one
 * is NA. */
static int compress_triplets(triplet *t, uint64_t n, uint64_t rcols, sparse_class sc,
                             sparse_parts *s)
{
    qsort(t, n, sizeof *t, cmp_triplet);
    double *x = malloc((n ? n : 1) * sizeof *x);
    int32_t *ix = malloc((n ? n : 1) * sizeof *ix), *p = calloc(rcols + 1, sizeof *p);
    if (!x || !ix || !p) {
        free(x);
        free(ix);
        free(p);
        return -1;
    }
    uint64_t nnz = 0;
    for (uint64_t k = 0; k < n; k++) {
        if (nnz && t[k].i == ix[nnz - 1] && t[k].j == t[k - 1].j) {
            x[nnz - 1] += t[k].x;
            continue;
        }
        x[nnz] = t[k].x;
        ix[nnz] = t[k].i;
        p[t[k].j + 1]++;
        nnz++;
    }
    for (uint64_t k = 0; k < rcols; k++)
        p[k + 1] += p[k];
    bool na = false;
    for (uint64_t k = 0; sc.values != 'd' && k < nnz && !na; k++)
        na = isnan(x[k]);
    cfs_dtype t_x = CFS_FLOAT64;
    if (sc.values != 'd' && !na) {
        uint8_t *b = (uint8_t *)x;   /* in place: byte k is written after double k is read */
        for (uint64_t k = 0; k < nnz; k++)
            b[k] = x[k] != 0;
        t_x = CFS_BOOL;
    }
    uint64_t np = rcols + 1;
    *s = (sparse_parts){.x = cfs_array_from_memory(t_x, 1, &nnz, x),
                        .ix = cfs_array_from_memory(CFS_INT32, 1, &nnz, ix),
                        .p = cfs_array_from_memory(CFS_INT32, 1, &np, p), .nnz = nnz, .np = np};
    /* what an array took is its to free */
    if (!s->x)
        free(x);
    if (!s->ix)
        free(ix);
    if (!s->p)
        free(p);
    if (!s->x || !s->ix || !s->p) {
        sparse_parts_free(s);
        return -1;
    }
    return 0;
}

static int sparse_parts_of(const rconv *c, const r_obj *m, sparse_class sc, uint64_t rrows,
                           uint64_t rcols, sparse_parts *s, const char **why)
{
    if (sc.structure == 'g' && sc.storage != 'T')
        return compressed_parts(c, m, sc, rrows, rcols, s, why);
    if (sc.structure != 'g' && rrows != rcols) {
        *why = "a symmetric or triangular matrix that is not square (a damaged file)";
        return -1;
    }
    /* Its columns' pointers (and a unit diagonal) are made here, from Dim alone. */
    if (rrows > RC_MAX_UNBACKED_DIM || rcols > RC_MAX_UNBACKED_DIM) {
        *why = "a sparse matrix whose dimensions are larger than any experiment (a damaged "
               "file)";
        return -1;
    }
    uint64_t n;
    triplet *t = stored_entries(c, m, sc, rrows, rcols, &n, why);
    if (!t)
        return -1;
    n = implied_entries(m, sc, rrows, rcols, t, n);
    int rc = compress_triplets(t, n, rcols, sc, s);
    free(t);
    return rc;
}

/* A sparse matrix (R's dims rrows x rcols) as a sparse element: of the transpose (transposed)
 * or of itself. */
static cfs_elem *sparse(const rconv *c, const r_obj *m, const char *name, bool transposed,
                        uint64_t rrows, uint64_t rcols, const char **why)
{
    sparse_class sc;
    sparse_parts s = {0};
    if (!sparse_class_of(m, &sc) || sparse_parts_of(c, m, sc, rrows, rcols, &s, why) < 0)
        return NULL;
    bool csr = s.by_row != transposed;
    cfs_elem *el = cfs_elem_from_array(CFS_EL_SPARSE, name, s.x);
    cfs_array *a[3] = {NULL, s.ix, s.p};
    s.x = s.ix = s.p = NULL;
    if (!el) {
        cfs_array_unref(a[1]);
        cfs_array_unref(a[2]);
        return NULL;
    }
    el->aux = a[1];
    el->indptr = a[2];
    el->csr = csr;
    el->sparse_shape[0] = transposed ? rcols : rrows;
    el->sparse_shape[1] = transposed ? rrows : rcols;
    return el;
}

/* ---- dense ---- */

/* A dense matrix rows x cols, column-major, as a C-order array of shape (a, b), a view of its
 * values: transposed (a = cols) keeps R's order; not transposed (a = rows) reads each of R's
 * columns as a column. Doubles stay float64, integers int32 and logicals bool unless they hold
 * an NA (then float64 with NaN). */
static cfs_elem *dense(const rconv *c, const r_obj *m, const char *name, bool transposed,
                       uint64_t rows, uint64_t cols, const char **why)
{
    const r_obj *vals = dense_values(m);
    if (!vals || (vals->type != R_REAL && vals->type != R_INT && vals->type != R_LGL)) {
        *why = "a matrix whose values are not stored as R writes them";
        return NULL;
    }
    r_vec_stats st;
    bool na = r_vec_stats_of(c->vecs, vals, &st) && st.has_na;
    cfs_dtype t = vals->type == R_REAL || na ? CFS_FLOAT64
                  : vals->type == R_INT      ? CFS_INT32
                                             : CFS_BOOL;
    uint64_t shape[2] = {transposed ? cols : rows, transposed ? rows : cols};
    return cfs_elem_from_array(CFS_EL_ARRAY, name, rc_view(c, vals, t, 2, shape, !transposed));
}

/* A matrix whose values are kept outside the file: a DelayedArray or HDF5Array class, or
 * one of BPCells' (IterableMatrix and its subclasses, MatrixDir, ..., known by their package). */
static bool stored_outside(const r_obj *m)
{
    const char *cls = r_class_name(m);
    const char *pkg = r_str_at(r_attr(r_class(m), "package"), 0, NULL);
    return (pkg && strcmp(pkg, "BPCells") == 0) ||
           (cls && (strstr(cls, "Delayed") || strstr(cls, "HDF5") ||
                    strstr(cls, "IterableMatrix")));
}

static cfs_elem *matrix(const rconv *c, const r_obj *m, const char *name, bool transposed,
                        const char **why)
{
    uint64_t rows, cols;
    *why = NULL;
    if (!rc_dims(m, &rows, &cols)) {
        *why = stored_outside(m)
                   ? "a matrix stored outside the file (DelayedArray/HDF5Array/BPCells); "
                     "save the object with its values in memory (e.g. as(x, \"dgCMatrix\"))"
                   : "not a matrix this version reads (a base matrix, a Matrix package sparse "
                     "matrix or dgeMatrix); convert it with as(x, \"CsparseMatrix\")";
        return NULL;
    }
    if (rc_is_sparse(m))
        return sparse(c, m, name, transposed, rows, cols, why);
    return dense(c, m, name, transposed, rows, cols, why);
}

cfs_elem *rc_matrix_t(const rconv *c, const r_obj *m, const char *name, const char **why,
                      cfs_err *err)
{
    (void)err;
    return matrix(c, m, name, true, why);
}

cfs_elem *rc_matrix(const rconv *c, const r_obj *m, const char *name, const char **why,
                    cfs_err *err)
{
    (void)err;
    return matrix(c, m, name, false, why);
}
