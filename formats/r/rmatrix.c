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
 * logical and pattern matrices without NA), indices and pointers, each borrowed from the
 * reader or owned. by_row: the pointers run over R's rows (CSR of R's matrix). */
typedef struct sparse_parts {
    cfs_dtype dtype;
    void *x;
    int32_t *ix, *p;
    cfs_array *x_spilled, *ix_spilled;  /* the values / indices read from the spill file */
    uint64_t nnz, np;
    bool x_owned, ip_owned, by_row;
} sparse_parts;

static void sparse_parts_free(sparse_parts *s)
{
    if (s->x_owned)
        free(s->x);
    if (s->ip_owned) {
        free(s->ix);
        free(s->p);
    }
    cfs_array_unref(s->x_spilled);
    cfs_array_unref(s->ix_spilled);
    *s = (sparse_parts){0};
}

static const char *const BAD_SLOTS =
    "a sparse matrix whose slots are not as the Matrix package writes them";
static const char *const BAD_INDICES =
    "a sparse matrix whose indices or pointers contradict its shape (a damaged file)";

/* The x slot's values, or NULL (a pattern matrix has none); *why set when it is malformed. */
static const void *sparse_values(const rconv *c, const r_obj *m, sparse_class sc, uint64_t n,
                                 const char **why)
{
    if (sc.values == 'n')
        return NULL;
    const r_obj *x = r_slot(m, "x");
    const void *v = rc_values(c, x);
    if (!v || x->type != (sc.values == 'd' ? R_REAL : R_LGL) || x->length != n)
        *why = BAD_SLOTS;
    return v;
}

/* Logical values (or none: pattern) as bool, or as float64 with NaN when one is NA. */
static int logical_values(const int32_t *lv, uint64_t n, sparse_parts *s)
{
    bool na = false;
    for (uint64_t k = 0; lv && k < n && !na; k++)
        na = lv[k] == R_NA_LGL;
    s->dtype = na ? CFS_FLOAT64 : CFS_BOOL;
    s->x = malloc(n ? n * cfs_dtype_size(s->dtype) : 1);
    s->x_owned = true;
    if (!s->x)
        return -1;
    for (uint64_t k = 0; k < n; k++) {
        if (na)
            ((double *)s->x)[k] = lv[k] == R_NA_LGL ? NAN : lv[k] != 0;
        else
            ((uint8_t *)s->x)[k] = !lv || lv[k] != 0;
    }
    return 0;
}

/* Whether every index of a spilled INT vector lies in [0, inner), read back in blocks (the
 * vector stays on disk). False also when it cannot be read. */
static bool spilled_in_range(const rconv *c, const r_obj *i, uint64_t inner)
{
    enum { BLOCK = 1 << 16 };
    int32_t *buf = malloc(BLOCK * sizeof *buf);
    bool ok = buf != NULL;
    cfs_err ignored;
    for (uint64_t k0 = 0; ok && k0 < i->length; k0 += BLOCK) {
        uint64_t n = i->length - k0 < BLOCK ? i->length - k0 : BLOCK;
        ok = r_spill_read(c->spill, i->sink_id, k0, n, buf, &ignored) == 0;
        for (uint64_t k = 0; ok && k < n; k++)
            ok = buf[k] >= 0 && (uint64_t)buf[k] < inner;
    }
    free(buf);
    return ok;
}

/* The index and pointer slots of a C or R matrix, checked against its shape; *ixo is NULL
 * when the indices are in the spill file (then they were checked there). */
static int compressed_indices(const rconv *c, const r_obj *m, bool by_row, uint64_t rrows,
                              uint64_t rcols, const int32_t **ixo, const int32_t **po,
                              uint64_t *nnzo, const char **why)
{
    const r_obj *i = r_slot(m, by_row ? "j" : "i"), *p = r_slot(m, "p");
    bool spilled = rc_spilled(c, i) && i->type == R_INT;
    const int32_t *iv = spilled ? NULL : rc_values(c, i), *pv = rc_values(c, p);
    uint64_t outer = by_row ? rrows : rcols, inner = by_row ? rcols : rrows;
    if ((!iv && !spilled) || !pv || i->type != R_INT || p->type != R_INT ||
        p->length != outer + 1) {
        *why = BAD_SLOTS;
        return -1;
    }
    uint64_t nnz = i->length;
    bool ok = pv[0] == 0 && (uint64_t)pv[outer] == nnz;
    for (uint64_t k = 0; ok && k < outer; k++)
        ok = pv[k] <= pv[k + 1];
    if (ok && spilled)
        ok = spilled_in_range(c, i, inner);
    for (uint64_t k = 0; ok && iv && k < nnz; k++)
        ok = iv[k] >= 0 && (uint64_t)iv[k] < inner;
    if (!ok) {
        *why = BAD_INDICES;
        return -1;
    }
    *ixo = iv;
    *po = pv;
    *nnzo = nnz;
    return 0;
}

/* A general C or R matrix: its index and pointer slots borrowed, and its values too when they
 * are doubles. -1 with *why (malformed) or without (out of memory). */
static int compressed_parts(const rconv *c, const r_obj *m, sparse_class sc, uint64_t rrows,
                            uint64_t rcols, sparse_parts *s, const char **why)
{
    bool by_row = sc.storage == 'R';
    const int32_t *iv, *pv;
    uint64_t nnz;
    if (compressed_indices(c, m, by_row, rrows, rcols, &iv, &pv, &nnz, why) < 0)
        return -1;
    const r_obj *xs = sc.values == 'd' ? r_slot(m, "x") : NULL;
    bool x_spilled = xs && rc_spilled(c, xs);
    const void *x = NULL;
    if (x_spilled && (xs->type != R_REAL || xs->length != nnz))
        *why = BAD_SLOTS;
    else if (!x_spilled)
        x = sparse_values(c, m, sc, nnz, why);
    if (*why)
        return -1;
    *s = (sparse_parts){.dtype = CFS_FLOAT64, .x = (void *)x, .ix = (int32_t *)iv,
                        .p = (int32_t *)pv, .nnz = nnz, .np = (by_row ? rrows : rcols) + 1,
                        .by_row = by_row};
    const r_obj *is = r_slot(m, by_row ? "j" : "i");
    if ((x_spilled && !(s->x_spilled = rc_vector_array(c, xs, CFS_FLOAT64, NULL))) ||
        (!iv && !(s->ix_spilled = rc_vector_array(c, is, CFS_INT32, NULL))))
        return -1;
    return sc.values == 'd' ? 0 : logical_values(x, nnz, s);
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

/* The entries a matrix stores as triplets (R's row and column), with room for as many again
 * (a symmetric matrix's mirror) plus a diagonal; NULL with *why (malformed) or without (out of
 * memory). */
static triplet *stored_entries(const rconv *c, const r_obj *m, sparse_class sc, uint64_t rrows,
                               uint64_t rcols, uint64_t *n, const char **why)
{
    const int32_t *iv, *jv = NULL, *pv = NULL;
    bool by_row = sc.storage == 'R';
    if (sc.storage == 'T') {
        const r_obj *i = r_slot(m, "i"), *j = r_slot(m, "j");
        iv = rc_values(c, i);
        jv = rc_values(c, j);
        if (!iv || !jv || i->type != R_INT || j->type != R_INT || i->length != j->length) {
            *why = BAD_SLOTS;
            return NULL;
        }
        *n = i->length;
        for (uint64_t k = 0; k < *n; k++)
            if (iv[k] < 0 || (uint64_t)iv[k] >= rrows || jv[k] < 0 || (uint64_t)jv[k] >= rcols) {
                *why = BAD_INDICES;
                return NULL;
            }
    } else if (compressed_indices(c, m, by_row, rrows, rcols, &iv, &pv, n, why) < 0) {
        return NULL;
    } else if (!iv && !(iv = rc_values(c, r_slot(m, by_row ? "j" : "i")))) {
        return NULL;     /* spilled, and it could not be read back */
    }
    const void *xv = sparse_values(c, m, sc, *n, why);
    if (*why)
        return NULL;
    uint64_t diag = rrows < rcols ? rrows : rcols;
    triplet *t = malloc((2 * *n + diag + 1) * sizeof *t);
    if (!t)
        return NULL;
    if (sc.storage == 'T')
        for (uint64_t k = 0; k < *n; k++)
            t[k] = (triplet){iv[k], jv[k], stored_value(xv, sc, k)};
    else
        for (uint64_t o = 0; o < (by_row ? rrows : rcols); o++)
            for (int32_t k = pv[o]; k < pv[o + 1]; k++) {
                int32_t outer = (int32_t)o;
                t[k] = (triplet){by_row ? outer : iv[k], by_row ? iv[k] : outer,
                                 stored_value(xv, sc, (uint64_t)k)};
            }
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
    const char *d = r_str_at(r_slot(m, "diag"), 0, NULL);
    if (sc.structure == 't' && d && strcmp(d, "U") == 0)
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
    *s = (sparse_parts){.dtype = CFS_FLOAT64, .x = x, .x_owned = true, .ip_owned = true,
                        .ix = malloc((n ? n : 1) * sizeof(int32_t)),
                        .p = calloc(rcols + 1, sizeof(int32_t)), .np = rcols + 1};
    if (!s->x || !s->ix || !s->p) {
        sparse_parts_free(s);
        return -1;
    }
    uint64_t nnz = 0;
    for (uint64_t k = 0; k < n; k++) {
        if (nnz && t[k].i == s->ix[nnz - 1] && t[k].j == t[k - 1].j) {
            x[nnz - 1] += t[k].x;
            continue;
        }
        x[nnz] = t[k].x;
        s->ix[nnz] = t[k].i;
        s->p[t[k].j + 1]++;
        nnz++;
    }
    for (uint64_t k = 0; k < rcols; k++)
        s->p[k + 1] += s->p[k];
    s->nnz = nnz;
    bool na = false;
    for (uint64_t k = 0; sc.values != 'd' && k < nnz && !na; k++)
        na = isnan(x[k]);
    if (sc.values != 'd' && !na) {
        uint8_t *b = (uint8_t *)x;   /* in place: byte k is written after double k is read */
        for (uint64_t k = 0; k < nnz; k++)
            b[k] = x[k] != 0;
        s->dtype = CFS_BOOL;
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
    cfs_array *a[3] = {
        s.x_spilled ? cfs_array_ref(s.x_spilled)
        : s.x_owned ? cfs_array_from_memory(s.dtype, 1, &s.nnz, s.x)
                    : rc_borrowed(s.dtype, s.nnz, s.x),
        s.ix_spilled ? cfs_array_ref(s.ix_spilled)
        : s.ip_owned ? cfs_array_from_memory(CFS_INT32, 1, &s.nnz, s.ix)
                     : rc_borrowed(CFS_INT32, s.nnz, s.ix),
        s.ip_owned ? cfs_array_from_memory(CFS_INT32, 1, &s.np, s.p) : rc_borrowed(CFS_INT32, s.np, s.p)};
    bool csr = s.by_row != transposed;
    /* what an array took is no longer ours to free */
    if (s.x_owned && a[0])
        s.x = NULL;
    if (s.ip_owned && a[1])
        s.ix = NULL;
    if (s.ip_owned && a[2])
        s.p = NULL;
    sparse_parts_free(&s);
    cfs_elem *el = a[0] && a[1] && a[2] ? cfs_elem_from_array(CFS_EL_SPARSE, name, a[0]) : NULL;
    if (!el) {
        if (!(a[0] && a[1] && a[2]))
            cfs_array_unref(a[0]);
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

/* A dense matrix rows x cols, column-major, as a C-order array of shape (a, b): transposed
 * (a = cols) keeps R's order; not transposed (a = rows) reorders. Doubles stay float64,
 * integers int32 and logicals bool unless they hold an NA (then float64 with NaN). */
static cfs_elem *dense(const rconv *c, const r_obj *m, const char *name, bool transposed,
                       uint64_t rows, uint64_t cols, const char **why)
{
    const r_obj *vals = dense_values(m);
    const void *v = rc_values(c, vals);
    if (!v) {
        *why = "a matrix whose values are not stored as R writes them";
        return NULL;
    }
    uint64_t n = rows * cols;
    bool na = false;
    for (uint64_t k = 0; vals->type != R_REAL && k < n && !na; k++)
        na = ((const int32_t *)v)[k] == R_NA_INT;
    cfs_dtype t = vals->type == R_REAL || na ? CFS_FLOAT64
                  : vals->type == R_INT      ? CFS_INT32
                                             : CFS_BOOL;
    size_t es = cfs_dtype_size(t);
    uint8_t *d = malloc(n ? n * es : 1);
    if (!d)
        return NULL;
    for (uint64_t j = 0; j < cols; j++)
        for (uint64_t i = 0; i < rows; i++) {
            uint64_t src = j * rows + i, dst = transposed ? src : i * cols + j;
            if (vals->type == R_REAL)
                ((double *)d)[dst] = ((const double *)v)[src];
            else {
                int32_t k = ((const int32_t *)v)[src];
                if (t == CFS_FLOAT64)
                    ((double *)d)[dst] = k == R_NA_INT ? NAN : (double)k;
                else if (t == CFS_INT32)
                    ((int32_t *)d)[dst] = k;
                else
                    d[dst] = k != 0;
            }
        }
    uint64_t shape[2] = {transposed ? cols : rows, transposed ? rows : cols};
    return rc_mem_elem(CFS_EL_ARRAY, name, t, 2, shape, d);
}

static cfs_elem *matrix(const rconv *c, const r_obj *m, const char *name, bool transposed,
                        const char **why)
{
    uint64_t rows, cols;
    *why = NULL;
    if (!rc_dims(m, &rows, &cols)) {
        const char *cls = r_class_name(m);
        *why = cls && (strstr(cls, "Delayed") || strstr(cls, "HDF5") || strstr(cls, "IterableMatrix"))
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
