/* An Assay5's split layers joined as JoinLayers joins them (rsplit.h). */
#include "rsplit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdensejoin.h"

typedef unsigned long long ull;

/* A run of entries of the joined matrix read from one layer: entries [start, start + len) of
 * the join are entries [src, src + len) of layer part. Rows of a layer that follow each other
 * in the assay's cell order make one run, so a layer of consecutive cells is one run. */
typedef struct run {
    uint64_t start, src, len;
    uint32_t part;
} run;

/* The runs of a join, shared by its values and its indices (freed with the last of them). */
typedef struct runs {
    run *v;
    uint64_t n;
    int refs;
} runs;

static void runs_unref(runs *r)
{
    if (r && __atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        free(r->v);
        free(r);
    }
}

/* A 1-d array made of runs of the parts' arrays (the layers' values, or their indices mapped
 * to the assay's features). */
typedef struct joined {
    cfs_array **src;        /* nparts */
    int32_t **feature;      /* nparts, or NULL: a layer's feature i is the assay's feature[i]
                             * (NULL for a layer of every feature) */
    uint32_t nparts;
    runs *runs;
} joined;

static void joined_free(void *ctx)
{
    joined *j = ctx;
    for (uint32_t k = 0; k < j->nparts; k++) {
        cfs_array_unref(j->src[k]);
        if (j->feature)
            free(j->feature[k]);
    }
    free(j->src);
    free(j->feature);
    runs_unref(j->runs);
    free(j);
}

/* The first run that ends after entry k. */
static uint64_t run_at(const joined *j, uint64_t k)
{
    uint64_t lo = 0, hi = j->runs->n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (j->runs->v[mid].start + j->runs->v[mid].len <= k)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int joined_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                       void *out, cfs_err *err)
{
    const joined *j = arr->ctx;
    size_t esize = cfs_array_elem_size(arr);
    uint64_t k = start[0], end = start[0] + count[0];
    char *dst = out;
    for (uint64_t r = run_at(j, k); k < end; r++) {
        if (r >= j->runs->n)
            return cfs_err_setc(err, CFS_EFAIL, "read past the joined split layers");
        const run *ru = &j->runs->v[r];
        uint64_t off = k - ru->start, n = ru->len - off;
        if (n > end - k)
            n = end - k;
        uint64_t s[1] = {ru->src + off}, c[1] = {n};
        if (cfs_array_read(j->src[ru->part], s, c, dst, err) < 0)
            return -1;
        const int32_t *map = j->feature ? j->feature[ru->part] : NULL;
        for (uint64_t i = 0; map && i < n; i++) {
            int32_t *v = (int32_t *)dst + i;
            *v = map[*v];   /* indices were checked against the layer's shape */
        }
        dst += n * esize;
        k += n;
    }
    return 0;
}

static const cfs_array_ops JOINED_OPS = {.read = joined_read, .free_ctx = joined_free};

/* Whether layer ln is one of name's split layers: name.<suffix>. */
static bool split_of(const char *ln, const char *name)
{
    size_t len = strlen(name);
    return ln && strncmp(ln, name, len) == 0 && ln[len] == '.' && ln[len + 1];
}

/* How many split layers of name the list of layers holds. */
static uint32_t count_split(const r_obj *layers, const char *name)
{
    const r_obj *names = r_attr(layers, "names");
    uint32_t n = 0;
    for (uint64_t i = 0; layers && layers->type == R_VEC && names && i < names->length &&
                         i < layers->length && n < UINT32_MAX; i++)
        n += split_of(r_str_at(names, i, NULL), name);
    return n;
}

bool rc_has_split_layer(const r_obj *layers, const char *name)
{
    return count_split(layers, name) > 0;
}

/* A LogMap (a logical matrix: names x layers) in memory. */
typedef struct logmap {
    const int32_t *v;
    void *owned;
    uint64_t nrow, ncol;
    const r_obj *layers;    /* its column names */
} logmap;

static int logmap_of(const rconv *c, const r_obj *lm, uint64_t nrow, logmap *out, cfs_err *err)
{
    const r_obj *d = r_attr(lm, "dim");
    const int32_t *dv = d && d->type == R_INT && d->length == 2 ? r_ints(d) : NULL;
    *out = (logmap){0};
    if (!lm || lm->type != R_LGL || !dv || dv[0] < 0 || dv[1] < 0 || (uint64_t)dv[0] != nrow ||
        lm->length != (uint64_t)dv[0] * (uint64_t)dv[1] || !(out->layers = rc_dimnames(lm, 1)))
        return -1;
    out->nrow = (uint64_t)dv[0];
    out->ncol = (uint64_t)dv[1];
    out->v = rc_values(c, lm, &out->owned, err);
    return out->v ? 0 : -1;
}

/* The column of layer name, or -1. */
static int64_t logmap_column(const logmap *m, const char *name)
{
    for (uint64_t k = 0; k < m->ncol && k < m->layers->length; k++) {
        const char *n = r_str_at(m->layers, k, NULL);
        if (n && strcmp(n, name) == 0)
            return (int64_t)k;
    }
    return -1;
}

static uint64_t logmap_count(const logmap *m, int64_t col)
{
    uint64_t n = 0;
    for (uint64_t i = 0; i < m->nrow; i++)
        n += m->v[(uint64_t)col * m->nrow + i] == 1;
    return n;
}

/* What the join is made of while it is built. */
typedef struct split {
    const rconv *c;
    const char *what;
    logmap cells, feats;
    uint32_t *owner;        /* ncell: 1 + the part holding the cell, 0 none */
    uint32_t *row;          /* ncell: the cell's row in that part */
    uint8_t *held;          /* nfeat: whether a part holds the feature */
    int32_t **feature;      /* nparts: each part's features in the assay's order, NULL: all */
    int64_t **ptr;          /* nparts: each sparse part's row pointers */
    cfs_elem **parts;       /* nparts: each layer as a cells x features element */
    uint32_t nparts;
} split;

static void split_free(split *s)
{
    free(s->cells.owned);
    free(s->feats.owned);
    free(s->owner);
    free(s->row);
    free(s->held);
    for (uint32_t k = 0; k < s->nparts; k++) {
        if (s->feature)
            free(s->feature[k]);
        free(s->ptr[k]);
        cfs_elem_free(s->parts[k]);
    }
    free(s->feature);
    free(s->ptr);
    free(s->parts);
}

/* why: what is wrong with the layer, and what to do (after verb: "is ", or ""). */
static int refuse(const split *s, const char *layer, const char *verb, const char *why,
                  cfs_err *err)
{
    return cfs_err_setc(err, CFS_EREFUSED, "%s of this Seurat object holds split layers; "
                        "layer %s %s%s", s->what, layer, verb, why);
}

static int read_ptr(const cfs_array *p, uint64_t n, int64_t **out, cfs_err *err)
{
    void *buf = malloc((n ? n : 1) * 8);
    uint64_t s[1] = {0}, cnt[1] = {n};
    *out = buf;
    if (!buf)
        return cfs_err_oom(err);
    if (p->dtype != CFS_INT32 && p->dtype != CFS_INT64)
        return cfs_err_setc(err, CFS_EFAIL, "row pointers of type %s", cfs_dtype_name(p->dtype));
    if (cfs_array_read(p, s, cnt, buf, err) < 0)
        return -1;
    if (p->dtype == CFS_INT32)   /* widened in place, from the end */
        for (uint64_t i = n; i-- > 0;)
            (*out)[i] = ((int32_t *)buf)[i];
    return 0;
}

static bool sparse_part(const cfs_elem *el)
{
    return el->kind == CFS_EL_SPARSE && el->csr && el->aux->dtype == CFS_INT32;
}

/* A base matrix (or dgeMatrix) as rc_matrix_t presents it: a 2-d numeric array. */
static bool dense_part(const cfs_elem *el)
{
    return el->kind == CFS_EL_ARRAY && el->values->ndim == 2 &&
           (el->values->dtype == CFS_FLOAT64 || el->values->dtype == CFS_INT32 ||
            el->values->dtype == CFS_BOOL);
}

/* What part k of the join is, checked against the first part: a layer of another kind is
 * refused. JoinLayers would make the join's kind the first layer's (StitchMatrix dispatches
 * on it), so the same object joined after reordering its layers would change from sparse to
 * dense; a user who split a dense layer and a sparse one rather wants to be told, and
 * JoinLayers in R says which one they get. */
static int part_kind(const split *s, const char *name, const cfs_elem *el, uint64_t nc,
                     uint64_t nf, cfs_err *err)
{
    bool sparse = sparse_part(el);
    if (!sparse && !dense_part(el))
        return refuse(s, name, "", "is neither a column-compressed sparse matrix (dgCMatrix) "
                      "nor a base matrix, the kinds of split layer this version joins; run "
                      "obj <- JoinLayers(obj) in R and save it again", err);
    if (s->nparts > 0 && sparse != sparse_part(s->parts[0]))
        return refuse(s, name, "", sparse ? "is sparse where the first split layer is a dense "
                                            "matrix; run obj <- JoinLayers(obj) in R and save "
                                            "it again"
                                          : "is a dense matrix where the first split layer is "
                                            "sparse; run obj <- JoinLayers(obj) in R and save "
                                            "it again", err);
    uint64_t r = sparse ? el->sparse_shape[0] : el->values->shape[0];
    uint64_t k = sparse ? el->sparse_shape[1] : el->values->shape[1];
    if (r != nc || k != nf)
        return refuse(s, name, "", "is not as large as the cells and features the assay's "
                      "maps give it (a damaged file); re-save it from R", err);
    if (sparse && s->nparts > 0 && el->values->dtype != s->parts[0]->values->dtype)
        return refuse(s, name, "", "holds values of another type than the first layer's; "
                      "run obj <- JoinLayers(obj) in R and save it again", err);
    return 0;
}

/* Layer name of the assay, part k: its matrix as a cells x features element, which cells and
 * features it holds. */
static int add_part(split *s, const char *name, const r_obj *m, uint64_t nfeat, cfs_err *err)
{
    uint32_t k = s->nparts;
    int64_t ccol = logmap_column(&s->cells, name), fcol = logmap_column(&s->feats, name);
    if (ccol < 0 || fcol < 0)
        return refuse(s, name, "", "is not in the assay's cells and features maps (a damaged "
                      "file); re-save it from R", err);
    const char *why = NULL;
    cfs_elem *el = rc_matrix_t(s->c, m, name, &why, err);
    if (!el)
        return why ? refuse(s, name, "is ", why, err) : cfs_err_oom(err);
    uint64_t nc = logmap_count(&s->cells, ccol), nf = logmap_count(&s->feats, fcol);
    if (part_kind(s, name, el, nc, nf, err) < 0) {
        cfs_elem_free(el);
        return -1;
    }
    s->parts[k] = el;
    s->nparts++;
    if (sparse_part(el) && read_ptr(el->indptr, nc + 1, &s->ptr[k], err) < 0)
        return -1;
    for (uint64_t i = 0, j = 0; i < s->cells.nrow; i++) {
        if (s->cells.v[(uint64_t)ccol * s->cells.nrow + i] != 1)
            continue;
        if (s->owner[i])
            return refuse(s, name, "", "holds a cell another layer holds too (a damaged "
                          "file); re-save it from R", err);
        s->owner[i] = k + 1;
        s->row[i] = (uint32_t)j++;
    }
    for (uint64_t i = 0; i < nfeat; i++)
        s->held[i] |= s->feats.v[(uint64_t)fcol * s->feats.nrow + i] == 1;
    if (nf == nfeat)
        return 0;   /* every feature: its columns are the assay's */
    int32_t *map = malloc((nf ? nf : 1) * sizeof *map);
    if (!map)
        return cfs_err_oom(err);
    for (uint64_t i = 0, j = 0; i < nfeat; i++)
        if (s->feats.v[(uint64_t)fcol * s->feats.nrow + i] == 1)
            map[j++] = (int32_t)i;
    s->feature[k] = map;
    return 0;
}

/* The joined row pointers, and the runs of both joined arrays (*rs). */
static int64_t *join_rows(split *s, uint64_t ncell, uint64_t *nnz, runs **rs, cfs_err *err)
{
    int64_t *p = malloc((ncell + 1) * sizeof *p);
    *rs = calloc(1, sizeof **rs);
    run *v = malloc((ncell ? ncell : 1) * sizeof *v);
    uint64_t n = 0;
    if (!p || !*rs || !v) {
        free(p);
        free(*rs);
        free(v);
        cfs_err_oom(err);
        return NULL;
    }
    p[0] = 0;
    for (uint64_t i = 0; i < ncell; i++) {
        uint64_t len = 0;
        if (s->owner[i]) {
            uint32_t k = s->owner[i] - 1;
            const int64_t *pk = s->ptr[k];
            uint64_t src = (uint64_t)pk[s->row[i]];
            len = (uint64_t)(pk[s->row[i] + 1] - pk[s->row[i]]);
            if (len && n && v[n - 1].part == k && v[n - 1].src + v[n - 1].len == src)
                v[n - 1].len += len;
            else if (len)
                v[n++] = (run){(uint64_t)p[i], src, len, k};
        }
        p[i + 1] = p[i] + (int64_t)len;
    }
    *nnz = (uint64_t)p[ncell];
    run *shrunk = realloc(v, (n ? n : 1) * sizeof *v);
    **rs = (runs){.v = shrunk ? shrunk : v, .n = n, .refs = 2};
    return p;
}

static joined *joined_new(uint32_t nparts, bool mapped)
{
    joined *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->src = calloc(nparts ? nparts : 1, sizeof *j->src);
    j->feature = mapped ? calloc(nparts ? nparts : 1, sizeof *j->feature) : NULL;
    if (!j->src || (mapped && !j->feature)) {
        free(j->src);
        free(j->feature);
        free(j);
        return NULL;
    }
    j->nparts = nparts;
    return j;
}

/* The joined values and indices over s's sparse parts (taking their feature maps), sharing
 * rs; NULL with both freed (and rs released twice) when out of memory. */
static int joined_pair(split *s, runs *rs, joined **values, joined **indices)
{
    *values = joined_new(s->nparts, false);
    *indices = joined_new(s->nparts, true);
    if (!*values || !*indices) {
        if (*values)
            joined_free(*values);
        if (*indices)
            joined_free(*indices);
        runs_unref(rs);
        runs_unref(rs);
        return -1;
    }
    (*values)->runs = (*indices)->runs = rs;
    for (uint32_t k = 0; k < s->nparts; k++) {
        (*values)->src[k] = cfs_array_ref(s->parts[k]->values);
        (*indices)->src[k] = cfs_array_ref(s->parts[k]->aux);
        (*indices)->feature[k] = s->feature[k];
        s->feature[k] = NULL;
    }
    return 0;
}

/* The joined arrays of the sparse parts as the element key. */
static cfs_elem *join_sparse(split *s, const char *key, uint64_t ncell, uint64_t nfeat,
                             cfs_err *err)
{
    uint64_t nnz;
    runs *rs;
    joined *values, *indices;
    int64_t *p = join_rows(s, ncell, &nnz, &rs, err);
    if (!p)
        return NULL;
    if (joined_pair(s, rs, &values, &indices) < 0) {
        free(p);
        cfs_err_oom(err);
        return NULL;
    }
    uint64_t np = ncell + 1;
    /* int32 where it fits, as the layers' own pointers are (narrowed in place, from the start) */
    cfs_dtype pt = nnz <= INT32_MAX ? CFS_INT32 : CFS_INT64;
    for (uint64_t i = 0; pt == CFS_INT32 && i < np; i++)
        ((int32_t *)p)[i] = (int32_t)p[i];
    cfs_array *x = cfs_array_new(s->parts[0]->values->dtype, 1, &nnz, &JOINED_OPS, values);
    if (!x)
        joined_free(values);
    cfs_array *ix = cfs_array_new(CFS_INT32, 1, &nnz, &JOINED_OPS, indices);
    if (!ix)
        joined_free(indices);
    cfs_array *ptr = cfs_array_from_memory(pt, 1, &np, p);
    if (!ptr)
        free(p);
    cfs_elem *el = NULL;
    if (x && ix && ptr) {
        el = cfs_elem_from_array(CFS_EL_SPARSE, key, x);   /* takes x, also on failure */
        x = NULL;
    }
    if (!el) {
        cfs_array_unref(x);
        cfs_array_unref(ix);
        cfs_array_unref(ptr);
        cfs_err_oom(err);
        return NULL;
    }
    el->aux = ix;
    el->indptr = ptr;
    el->csr = true;
    el->sparse_shape[0] = ncell;
    el->sparse_shape[1] = nfeat;
    return el;
}

/* The dense parts joined as the element key (taking s's cell and feature maps). */
static cfs_elem *join_dense(split *s, const char *key, uint64_t ncell, uint64_t nfeat,
                            cfs_err *err)
{
    cfs_array **part = calloc(s->nparts, sizeof *part);
    if (!part) {
        cfs_err_oom(err);
        return NULL;
    }
    for (uint32_t k = 0; k < s->nparts; k++)
        part[k] = cfs_array_ref(s->parts[k]->values);
    rc_dense_parts p = {.part = part, .feature = s->feature, .owner = s->owner, .row = s->row,
                        .nparts = s->nparts};
    s->feature = NULL;   /* the join's now */
    s->owner = s->row = NULL;
    cfs_array *a = rc_dense_join(&p, ncell, nfeat);
    cfs_elem *el = a ? cfs_elem_from_array(CFS_EL_ARRAY, key, a) : NULL;   /* takes a */
    if (!el)
        cfs_err_oom(err);
    return el;
}

/* Whether the parts hold every cell and feature of the assay; else why (n bytes) says what
 * they lack. */
static bool covering(const split *s, const char *name, uint64_t ncell, uint64_t nfeat,
                     char *why, size_t n)
{
    uint64_t nc = 0, nf = 0;
    for (uint64_t i = 0; i < ncell; i++)
        nc += s->owner[i] != 0;
    for (uint64_t i = 0; i < nfeat; i++)
        nf += s->held[i];
    if (nc == ncell && nf == nfeat)
        return true;
    snprintf(why, n, "its split layers %s.* together hold %llu of the assay's %llu features "
             "and %llu of its %llu cells%s", name, (ull)nf, (ull)nfeat, (ull)nc, (ull)ncell,
             nf < nfeat ? " (Seurat scales only the variable features by default; "
                          "ScaleData(features = rownames(obj)) scales them all)" : "");
    return false;
}

/* rc_split_join, and with why (n bytes) rc_split_join_covering. */
static int split_join(const rconv *c, const r_obj *assay, const char *name, const char *key,
                      const char *what, uint64_t ncell, uint64_t nfeat, cfs_elem **out,
                      char *why, size_t nwhy, cfs_err *err)
{
    const r_obj *layers = r_slot(assay, "layers");
    const r_obj *names = r_attr(layers, "names");
    split s = {.c = c, .what = what};
    uint32_t n = count_split(layers, name);
    *out = NULL;
    if (n == 0)
        return 0;
    if (nfeat > INT32_MAX || ncell > UINT32_MAX)
        return cfs_err_setc(err, CFS_EREFUSED, "%s of this Seurat object holds split layers "
                            "of %llu cells and %llu features, more than this version joins; "
                            "run obj <- JoinLayers(obj) in R and save it again", what,
                            (ull)ncell, (ull)nfeat);
    int rc = -1;
    if (logmap_of(c, r_slot(assay, "cells"), ncell, &s.cells, err) < 0 ||
        logmap_of(c, r_slot(assay, "features"), nfeat, &s.feats, err) < 0) {
        if (err->status == CFS_OK)
            cfs_err_setc(err, CFS_EDAMAGED, "%s of this Seurat object holds split layers but "
                         "its cells or features map is not a logical matrix of its %llu cells "
                         "or %llu features by layer; re-save it from R", what, (ull)ncell,
                         (ull)nfeat);
        goto done;
    }
    s.owner = calloc(ncell ? ncell : 1, sizeof *s.owner);
    s.row = calloc(ncell ? ncell : 1, sizeof *s.row);
    s.held = calloc(nfeat ? nfeat : 1, 1);
    s.feature = calloc(n, sizeof *s.feature);
    s.ptr = calloc(n, sizeof *s.ptr);
    s.parts = calloc(n, sizeof *s.parts);
    if (!s.owner || !s.row || !s.held || !s.feature || !s.ptr || !s.parts) {
        cfs_err_oom(err);
        goto done;
    }
    for (uint64_t i = 0; i < names->length && i < layers->length; i++) {
        const char *ln = r_str_at(names, i, NULL);
        if (split_of(ln, name) && add_part(&s, ln, layers->u.items[i], nfeat, err) < 0)
            goto done;
    }
    if (why && !covering(&s, name, ncell, nfeat, why, nwhy)) {
        rc = 0;
        goto done;
    }
    *out = sparse_part(s.parts[0]) ? join_sparse(&s, key, ncell, nfeat, err)
                                   : join_dense(&s, key, ncell, nfeat, err);
    rc = *out ? 0 : -1;
done:
    split_free(&s);
    return rc;
}

int rc_split_join(const rconv *c, const r_obj *assay, const char *name, const char *key,
                  const char *what, uint64_t ncell, uint64_t nfeat, cfs_elem **out,
                  cfs_err *err)
{
    return split_join(c, assay, name, key, what, ncell, nfeat, out, NULL, 0, err);
}

int rc_split_join_covering(const rconv *c, const r_obj *assay, const char *name,
                           const char *key, const char *what, uint64_t ncell, uint64_t nfeat,
                           cfs_elem **out, char *why, size_t nwhy, cfs_err *err)
{
    why[0] = '\0';
    return split_join(c, assay, name, key, what, ncell, nfeat, out, why, nwhy, err);
}
