/* src/layout/: priority order, permutations, the gene-major engine and its work space,
 * one index dtype per sparse matrix. */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "codec.h"
#include "gene_major.h"
#include "job.h"
#include "kept_chunks.h"
#include "model.h"
#include "permute.h"
#include "priority.h"
#include "schedule.h"
#include "space.h"
#include "spill.h"
#include "sparse_index.h"
#include "unit.h"

static int by_key_then_row(const void *pa, const void *pb)
{
    const uint64_t *a = pa, *b = pb;
    if (a[0] != b[0])
        return a[0] < b[0] ? -1 : 1;
    return a[1] < b[1] ? -1 : a[1] > b[1];
}

/* The order against its definition, computed the plain way: (key, row) pairs, qsort. */
static int order_matches_definition(uint64_t n, uint64_t seed)
{
    uint64_t *order = cfs_priority_order(n, seed);
    uint64_t *pairs = malloc((n ? n : 1) * 2 * sizeof *pairs);
    int same = order && pairs;
    uint64_t s = cfs_splitmix64(seed);
    for (uint64_t i = 0; same && i < n; i++) {
        pairs[2 * i] = cfs_splitmix64(s ^ i);
        pairs[2 * i + 1] = i;
    }
    if (same)
        qsort(pairs, n, 2 * sizeof *pairs, by_key_then_row);
    for (uint64_t j = 0; same && j < n; j++)
        same = order[j] == pairs[2 * j + 1];
    free(order);
    free(pairs);
    return same;
}

static void test_priority(void)
{
    /* splitmix64's published first output for state 0 (x + golden gamma). */
    CHECK(cfs_splitmix64(0) == UINT64_C(0xE220A8397B1DCDAF));
    static const uint64_t sizes[] = {0, 1, 2, 3, 17, 1024, 1025, 5000, 100003};
    int all = 1;
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
        for (uint64_t seed = 0; seed < 3; seed++)
            all &= order_matches_definition(sizes[k], seed * 7919);
    CHECK(all);
    uint64_t levels[32];
    CHECK(cfs_priority_levels(1, levels, 32) == 1 && levels[0] == 1);
    CHECK(cfs_priority_levels(1024, levels, 32) == 1 && levels[0] == 1024);
    CHECK(cfs_priority_levels(1025, levels, 32) == 2 && levels[0] == 1024 && levels[1] == 1025);
    CHECK(cfs_priority_levels(100000, levels, 32) == 5 && levels[3] == 65536 &&
          levels[4] == 100000);
}

/* The inverse order is made once, on demand, and inverts order. */
static void test_perm_pos(void)
{
    cfs_perm *p = cfs_perm_new(1000, 3);
    CHECK(p && p->pos == NULL);
    if (!p)
        return;
    const uint64_t *pos = cfs_perm_pos(p);
    int inverse = pos != NULL;
    for (uint64_t j = 0; inverse && j < p->n; j++)
        inverse = pos[p->order[j]] == j;
    CHECK(inverse && cfs_perm_pos(p) == pos);
    cfs_perm_unref(p);
}

/* An n x g float32 CSR element over copies of the given arrays. */
static cfs_elem *csr_elem(uint64_t n, uint64_t g, uint64_t nnz, const float *data,
                          const int32_t *indices, const int64_t *indptr)
{
    uint64_t np1 = n + 1;
    cfs_elem *el = cfs_elem_new(CFS_EL_SPARSE, "X");
    el->csr = true;
    el->sparse_shape[0] = n;
    el->sparse_shape[1] = g;
    void *d = malloc(nnz * sizeof *data), *i = malloc(nnz * sizeof *indices);
    void *p = malloc(np1 * sizeof *indptr);
    memcpy(d, data, nnz * sizeof *data);
    memcpy(i, indices, nnz * sizeof *indices);
    memcpy(p, indptr, np1 * sizeof *indptr);
    el->values = cfs_array_from_memory(CFS_FLOAT32, 1, &nnz, d);
    el->aux = cfs_array_from_memory(CFS_INT32, 1, &nnz, i);
    el->indptr = cfs_array_from_memory(CFS_INT64, 1, &np1, p);
    return el;
}

/* A 4 x 3 csr through the gene-major engine with a tiny budget: csc, rows permuted, sorted. */
static void test_gene_major_sparse(void)
{
    enum { N = 4, G = 3, NNZ = 6 };
    /* rows: 0:[g0=1,g2=2] 1:[g1=3] 2:[g0=4,g1=5] 3:[g2=6] */
    float data[NNZ] = {1, 2, 3, 4, 5, 6};
    int32_t indices[NNZ] = {0, 2, 1, 0, 1, 2};
    int64_t indptr[N + 1] = {0, 2, 3, 5, 6};
    cfs_elem *el = csr_elem(N, G, NNZ, data, indices, indptr);
    cfs_perm *perm = cfs_perm_new(N, 0);
    cfs_engine_opts o = {.memory = 4u << 20, .workdir = "/tmp"};
    cfs_err err;
    CHECK(cfs_gene_major_sparse(el, perm, &o, "X", &err) == 0);
    CHECK(!el->csr && el->indptr->dtype == CFS_INT32 && el->aux->dtype == CFS_INT32);
    int32_t optr[G + 1];
    int32_t orow[NNZ];
    float oval[NNZ];
    uint64_t z[1] = {0}, cg[1] = {G + 1}, cn[1] = {NNZ};
    CHECK(cfs_array_read(el->indptr, z, cg, optr, &err) == 0);
    CHECK(cfs_array_read(el->aux, z, cn, orow, &err) == 0);
    CHECK(cfs_array_read(el->values, z, cn, oval, &err) == 0);
    CHECK(optr[0] == 0 && optr[1] == 2 && optr[2] == 4 && optr[3] == 6);
    /* Each gene's rows ascend and map back to the source value through the permutation. */
    float dense[N][G] = {{1, 0, 2}, {0, 3, 0}, {4, 5, 0}, {0, 0, 6}};
    for (int g = 0; g < G; g++)
        for (int32_t k = optr[g]; k < optr[g + 1]; k++) {
            CHECK(k == optr[g] || orow[k] > orow[k - 1]);
            CHECK(dense[perm->order[orow[k]]][g] == oval[k]);
        }
    cfs_perm_unref(perm);
    cfs_elem_free(el);
}

/* A random n x g float32 sparse element, csr (rows of cells) or csc (columns of genes), with
 * distinct entries whose values are their source positions. `skew`: most entries fall in the
 * first genes; `dense_row`: row 0 holds genes [0, dense_row); `shuffled`: each major's minor
 * indices are not in order. */
typedef struct random_sparse {
    uint64_t n, g, per_major;
    bool csr, skew, shuffled;
    uint64_t dense_row;
    uint64_t seed;
} random_sparse;

static uint64_t next_rand(uint64_t *s)
{
    *s = cfs_splitmix64(*s);
    return *s;
}

static cfs_elem *random_sparse_elem(const random_sparse *r, uint64_t *nnz_out)
{
    uint64_t majors = r->csr ? r->n : r->g, minors = r->csr ? r->g : r->n;
    uint64_t cap = majors * r->per_major + r->dense_row;
    int32_t *ind = malloc(cap * sizeof *ind);
    int64_t *ptr = malloc((majors + 1) * sizeof *ptr);
    unsigned char *seen = calloc(minors, 1);
    uint64_t s = r->seed, nnz = 0;
    ptr[0] = 0;
    for (uint64_t m = 0; m < majors; m++) {
        uint64_t first = nnz;
        uint64_t want = r->csr && m == 0 && r->dense_row ? r->dense_row : r->per_major;
        for (uint64_t t = 0; t < want * 4 && nnz - first < want; t++) {
            uint64_t x = r->csr && m == 0 && r->dense_row ? t : next_rand(&s) % minors;
            if (r->skew && r->csr && next_rand(&s) % 4)
                x %= 10;        /* three quarters of a row's entries in genes 0..9 */
            if (r->skew && !r->csr && m >= 10 && next_rand(&s) % 4)
                break;          /* genes past the tenth hold few entries */
            if (x >= minors || seen[x])
                continue;
            seen[x] = 1;
            ind[nnz++] = (int32_t)x;
        }
        for (uint64_t k = first; k < nnz; k++)
            seen[ind[k]] = 0;
        if (!r->shuffled) {
            for (uint64_t k = first + 1; k < nnz; k++)       /* insertion sort: short majors */
                for (uint64_t q = k; q > first && ind[q - 1] > ind[q]; q--) {
                    int32_t t = ind[q];
                    ind[q] = ind[q - 1];
                    ind[q - 1] = t;
                }
        }
        ptr[m + 1] = (int64_t)nnz;
    }
    float *data = malloc((nnz ? nnz : 1) * sizeof *data);
    for (uint64_t k = 0; k < nnz; k++)
        data[k] = (float)k;
    cfs_elem *el = csr_elem(r->csr ? r->n : r->g, r->csr ? r->g : r->n, nnz, data, ind, ptr);
    el->csr = r->csr;
    el->sparse_shape[0] = r->n;
    el->sparse_shape[1] = r->g;
    free(ind);
    free(ptr);
    free(seen);
    free(data);
    *nnz_out = nnz;
    return el;
}

static int by_gene_then_row(const void *pa, const void *pb)
{
    const uint64_t *a = pa, *b = pb;
    if (a[0] != b[0])
        return a[0] < b[0] ? -1 : 1;
    return a[1] < b[1] ? -1 : a[1] > b[1];
}

/* The engine's result against the plain way: (gene, stored row, source position) triples,
 * qsort, and indptr counted. */
static bool gene_major_matches_with(const random_sparse *r, uint64_t memory,
                                    const cfs_chunk_codec *codec)
{
    uint64_t nnz;
    cfs_elem *el = random_sparse_elem(r, &nnz);
    uint64_t majors = r->csr ? r->n : r->g;
    int64_t *ptr = malloc((majors + 1) * sizeof *ptr);
    int32_t *ind = malloc((nnz ? nnz : 1) * sizeof *ind);
    uint64_t z[1] = {0}, cm[1] = {majors + 1}, cn[1] = {nnz};
    cfs_err err;
    bool ok = cfs_array_read(el->indptr, z, cm, ptr, &err) == 0 &&
              cfs_array_read(el->aux, z, cn, ind, &err) == 0;
    cfs_perm *perm = cfs_perm_new(r->n, 7);
    const uint64_t *pos = cfs_perm_pos(perm);
    uint64_t *want = malloc((nnz ? nnz : 1) * 3 * sizeof *want);
    for (uint64_t m = 0; ok && m < majors; m++)
        for (int64_t k = ptr[m]; k < ptr[m + 1]; k++) {
            uint64_t cell = r->csr ? m : (uint64_t)ind[k], gene = r->csr ? (uint64_t)ind[k] : m;
            want[3 * k] = gene;
            want[3 * k + 1] = pos[cell];
            want[3 * k + 2] = (uint64_t)k;
        }
    qsort(want, nnz, 3 * sizeof *want, by_gene_then_row);
    cfs_engine_opts o = {.memory = memory, .workdir = "/tmp", .codec = codec};
    ok = ok && cfs_gene_major_sparse(el, perm, &o, "X", &err) == 0;
    /* The results' index dtype is the engine's choice: read as int64. */
    void *optr = malloc((r->g + 1) * sizeof(int64_t));
    void *orow = malloc((nnz ? nnz : 1) * sizeof(int64_t));
    float *oval = malloc((nnz ? nnz : 1) * sizeof *oval);
    uint64_t cg[1] = {r->g + 1};
    ok = ok && cfs_array_read(el->indptr, z, cg, optr, &err) == 0 &&
         cfs_array_read(el->aux, z, cn, orow, &err) == 0 &&
         cfs_array_read(el->values, z, cn, oval, &err) == 0;
    cfs_dtype it = el->aux->dtype;
    for (uint64_t g = 0, k = 0; ok && g < r->g; g++) {
        ok = (uint64_t)cfs_int_get(it, optr, g) == k;
        for (; ok && k < nnz && want[3 * k] == g; k++)
            ok = (uint64_t)cfs_int_get(it, orow, k) == want[3 * k + 1] &&
                 oval[k] == (float)want[3 * k + 2];
    }
    ok = ok && (uint64_t)cfs_int_get(it, optr, r->g) == nnz;
    free(ptr);
    free(ind);
    free(want);
    free(optr);
    free(orow);
    free(oval);
    cfs_perm_unref(perm);
    cfs_elem_free(el);
    return ok;
}

/* Results kept raw (no codec) and as the store's chunks (kept_chunks.h), read back by ranges. */
static bool gene_major_matches(const random_sparse *r, uint64_t memory)
{
    return gene_major_matches_with(r, memory, NULL) &&
           gene_major_matches_with(r, memory, cfs_codec_for_layout(CFS_CODEC_BLOSC_LZ4));
}

/* The engine's paths, each against the plain way: a bucket over its sorter's share, sorted in
 * gene sub-ranges read in pieces (skewed genes, 64 KiB); a long run (a dense row); genes wider
 * than 16 bits relative to their bucket with rows out of order; csc sources; a plain one; a
 * row split into several runs of one bucket. */
static void test_gene_major_paths(void)
{
    random_sparse skewed = {.n = 3000, .g = 400, .per_major = 60, .csr = true, .skew = true,
                            .seed = 1};
    CHECK(gene_major_matches(&skewed, 64u << 10));
    random_sparse long_run = {.n = 40, .g = 24000, .per_major = 30, .csr = true,
                              .dense_row = 12000, .seed = 2};
    CHECK(gene_major_matches(&long_run, 128u << 10));
    long_run.shuffled = true;
    CHECK(gene_major_matches(&long_run, 128u << 10));
    random_sparse wide = {.n = 50, .g = 300000, .per_major = 600, .csr = true,
                          .shuffled = true, .seed = 3};
    CHECK(gene_major_matches(&wide, 64u << 10));
    random_sparse csc = {.n = 2000, .g = 300, .per_major = 600, .csr = false, .skew = true,
                         .seed = 4};
    CHECK(gene_major_matches(&csc, 64u << 10));
    csc.skew = false;
    csc.shuffled = true;
    CHECK(gene_major_matches(&csc, 4u << 20));
    random_sparse plain = {.n = 5000, .g = 1000, .per_major = 50, .csr = true, .seed = 5};
    CHECK(gene_major_matches(&plain, 4u << 20));
    /* A row with more entries in one bucket than a run holds. */
    random_sparse huge_row = {.n = 10, .g = 600000, .per_major = 10, .csr = true,
                              .dense_row = 70000, .seed = 6};
    CHECK(gene_major_matches(&huge_row, 32u << 20));
}

/* Compares each chunk of arr (chunk_len entries) the pass kept encoded with the codec's encoding
 * of the values read back, zero past the end; counts the chunks kept encoded and those left
 * raw (shared by two sorted ranges), which a renderer encodes itself, and adds the bytes they
 * take to *bytes when given (encoded, or a whole chunk raw). */
static bool kept_chunks_right(cfs_array *arr, uint64_t nnz, uint64_t len, cfs_codec_id codec,
                              unsigned *kept, unsigned *left, uint64_t *bytes)
{
    size_t es = cfs_dtype_size(arr->dtype);
    unsigned char *vals = malloc(len * es);
    bool ok = vals != NULL;
    cfs_err err;
    for (uint64_t j = 0; ok && j * len < nnz; j++) {
        cfs_buf got = {0}, want = {0};
        uint64_t st[1] = {j * len}, n[1] = {nnz - j * len < len ? nnz - j * len : len};
        memset(vals, 0, len * es);
        int rc = arr->ops->read_encoded(arr, j, len, (int)codec, &got, &err);
        ok = rc >= 0 && cfs_array_read(arr, st, n, vals, &err) == 0 &&
             cfs_codec_encode(codec, es, vals, len * es, &want, &err) == 0;
        if (ok && rc == 1)
            ok = got.len == want.len && memcmp(got.data, want.data, got.len) == 0;
        *(rc == 1 ? kept : left) += 1;
        if (bytes)
            *bytes += rc == 1 ? got.len : len * es;
        cfs_buf_free(&got);
        cfs_buf_free(&want);
    }
    /* Asked with another codec or chunk length, the array has none: the renderer encodes. */
    cfs_buf other = {0};
    ok = ok && arr->ops->read_encoded(arr, 0, len, (int)(codec + 1) % 5, &other, &err) == 0 &&
         arr->ops->read_encoded(arr, 0, len * 2, (int)codec, &other, &err) == 0 &&
         other.len == 0;
    free(vals);
    return ok;
}

/* The pass keeps the store's chunks (kept_chunks.h) with every codec: each chunk lying in one
 * sorted range is the renderer's encoding of its values, the last one zero padded; the chunks
 * two ranges share (here about half: buckets of few genes) are left raw and read back right. */
static void test_gene_major_kept_chunks(void)
{
    random_sparse r = {.n = 3000, .g = 400, .per_major = 60, .csr = true, .skew = true,
                       .seed = 8};
    cfs_codec_id codecs[] = {CFS_CODEC_BLOSC_LZ4, CFS_CODEC_ZSTD, CFS_CODEC_ZLIB,
                             CFS_CODEC_GZIP, CFS_CODEC_NONE};
    for (size_t c = 0; c < sizeof codecs / sizeof codecs[0]; c++) {
        uint64_t nnz;
        cfs_elem *el = random_sparse_elem(&r, &nnz);
        cfs_perm *perm = cfs_perm_new(r.n, 7);
        cfs_engine_opts o = {.memory = c == 0 ? 1u << 20 : 4u << 20, .workdir = "/tmp",
                             .codec = cfs_codec_for_layout(codecs[c])};
        cfs_err err;
        CHECK(cfs_gene_major_sparse(el, perm, &o, "X", &err) == 0);
        unsigned kept = 0, left = 0;
        uint64_t len = el->values->chunk_hint[0];
        CHECK(len > 0 && len < nnz / 8 && el->aux->chunk_hint[0] == len);
        CHECK(kept_chunks_right(el->values, nnz, len, codecs[c], &kept, &left, NULL));
        CHECK(kept_chunks_right(el->aux, nnz, len, codecs[c], &kept, &left, NULL));
        CHECK(kept > 0 && left > 0);
        cfs_perm_unref(perm);
        cfs_elem_free(el);
    }
    /* No hint: the whole array is the store's one chunk, and one sorted range keeps it. */
    random_sparse tiny = {.n = 30, .g = 20, .per_major = 5, .csr = true, .seed = 9};
    uint64_t nnz;
    cfs_elem *el = random_sparse_elem(&tiny, &nnz);
    cfs_perm *perm = cfs_perm_new(tiny.n, 7);
    cfs_engine_opts o = {.memory = 4u << 20, .workdir = "/tmp",
                         .codec = cfs_codec_for_layout(CFS_CODEC_BLOSC_LZ4)};
    cfs_err err;
    unsigned kept = 0, left = 0;
    CHECK(cfs_gene_major_sparse(el, perm, &o, "X", &err) == 0 && el->values->chunk_hint[0] == 0);
    CHECK(kept_chunks_right(el->values, nnz, nnz, CFS_CODEC_BLOSC_LZ4, &kept, &left, NULL));
    CHECK(kept == 1 && left == 0);
    cfs_perm_unref(perm);
    cfs_elem_free(el);
}

/* One index dtype per sparse matrix: the boundaries of the rule, and a csr element whose
 * reader gives uint16 indices and int64 indptr read back as int32, values kept; an index that
 * does not fit int32 fails the read instead of wrapping. */
static void test_sparse_index_dtype(void)
{
    const uint64_t lim = UINT64_C(1) << 31;
    CHECK(cfs_sparse_index_dtype(0, 0) == CFS_INT32);
    CHECK(cfs_sparse_index_dtype(lim - 1, lim - 1) == CFS_INT32);
    CHECK(cfs_sparse_index_dtype(lim, 10) == CFS_INT64);
    CHECK(cfs_sparse_index_dtype(10, lim) == CFS_INT64);

    cfs_elem *el = cfs_elem_new(CFS_EL_SPARSE, "X");
    uint64_t nnz = 3, nptr = 3;
    float *data = malloc(nnz * sizeof *data);
    uint16_t *ind = malloc(nnz * sizeof *ind);
    int64_t *ptr = malloc(nptr * sizeof *ptr);
    data[0] = 1, data[1] = 2, data[2] = 3;
    ind[0] = 0, ind[1] = 65535, ind[2] = 7;
    ptr[0] = 0, ptr[1] = 2, ptr[2] = 3;
    el->values = cfs_array_from_memory(CFS_FLOAT32, 1, &nnz, data);
    el->aux = cfs_array_from_memory(CFS_UINT16, 1, &nnz, ind);
    el->indptr = cfs_array_from_memory(CFS_INT64, 1, &nptr, ptr);
    el->csr = true;
    el->sparse_shape[0] = 2;
    el->sparse_shape[1] = 70000;
    cfs_elem *root = cfs_elem_new(CFS_EL_ANNDATA, NULL);
    CHECK(cfs_elem_add(root, NULL) < 0 && root->nchildren == 0); /* a failed allocation */
    CHECK(cfs_elem_add(root, el) == 0 && root->nchildren == 1);
    cfs_err err = {0};
    CHECK(cfs_sparse_unify_indices(root, &err) == 0);
    CHECK(el->aux->dtype == CFS_INT32 && el->indptr->dtype == CFS_INT32);
    int32_t got_ind[3] = {0}, got_ptr[3] = {0};
    uint64_t start[1] = {0};
    CHECK(cfs_array_read(el->aux, start, &nnz, got_ind, &err) == 0);
    CHECK(cfs_array_read(el->indptr, start, &nptr, got_ptr, &err) == 0);
    CHECK(got_ind[0] == 0 && got_ind[1] == 65535 && got_ind[2] == 7);
    CHECK(got_ptr[0] == 0 && got_ptr[1] == 2 && got_ptr[2] == 3);
    cfs_array *before = el->aux;
    CHECK(cfs_sparse_unify_indices(root, &err) == 0 && el->aux == before); /* already one dtype */
    cfs_elem_free(root);

    /* A damaged source: an int64 index past int32 in a matrix the rule stores as int32. */
    cfs_elem *bad = cfs_elem_new(CFS_EL_SPARSE, "bad");
    uint64_t one = 1, two = 2;
    int64_t *bind = malloc(sizeof *bind), *bptr = malloc(2 * sizeof *bptr);
    float *bdata = malloc(sizeof *bdata);
    bind[0] = INT64_C(1) << 40, bptr[0] = 0, bptr[1] = 1, bdata[0] = 1;
    bad->values = cfs_array_from_memory(CFS_FLOAT32, 1, &one, bdata);
    bad->aux = cfs_array_from_memory(CFS_INT64, 1, &one, bind);
    bad->indptr = cfs_array_from_memory(CFS_INT64, 1, &two, bptr);
    bad->csr = true;
    bad->sparse_shape[0] = 1;
    bad->sparse_shape[1] = 5;
    CHECK(cfs_sparse_unify_indices(bad, &err) == 0);
    int32_t v = 0;
    CHECK(cfs_array_read(bad->aux, start, &one, &v, &err) < 0 && strstr(err.msg, "out of range"));
    cfs_elem_free(bad);
}

/* A bound that counts what is held against a limit the test moves. The pass runs in a thread of
 * its own, so `held` is atomic. */
typedef struct counting_bound {
    uint64_t held, limit;
    uint64_t whole;             /* bytes over this never fit; 0: no such limit */
} counting_bound;

static int bound_reserve(void *ctx, uint64_t bytes, cfs_err *err)
{
    counting_bound *s = ctx;
    if (s->whole && bytes > s->whole)
        return cfs_err_setc(err, CFS_ENEVERFITS, "never");
    if (__atomic_load_n(&s->held, __ATOMIC_SEQ_CST) + bytes > s->limit)
        return cfs_err_setc(err, CFS_ERETRY, "no room");
    __atomic_add_fetch(&s->held, bytes, __ATOMIC_SEQ_CST);
    return 0;
}

static void bound_release(void *ctx, uint64_t bytes)
{
    __atomic_sub_fetch(&((counting_bound *)ctx)->held, bytes, __ATOMIC_SEQ_CST);
}

/* A gene range is served before its pass has ended: the pass gives its spill back a little
 * later, in its own thread. Whether `held` comes to `want` within ten seconds. */
static bool held_settles(counting_bound *s, uint64_t want)
{
    for (int i = 0; i < 10000 && __atomic_load_n(&s->held, __ATOMIC_SEQ_CST) != want; i++)
        nanosleep(&(struct timespec){0, 1000000L}, NULL);
    return __atomic_load_n(&s->held, __ATOMIC_SEQ_CST) == want;
}

/* A 3 x 2 CSR element; `scale` makes two of them tell apart. */
static cfs_elem *small_csr(float scale)
{
    float data[4] = {1 * scale, 2 * scale, 3 * scale, 4 * scale};
    int32_t indices[4] = {0, 1, 1, 0};
    int64_t indptr[4] = {0, 2, 3, 4};
    return csr_elem(3, 2, 4, data, indices, indptr);
}

static float value_sum(cfs_elem *el, cfs_err *err)
{
    float out[4], sum = -1;
    uint64_t z[1] = {0}, cn[1] = {4};
    if (cfs_array_read(el->values, z, cn, out, err) == 0)
        sum = out[0] + out[1] + out[2] + out[3];
    return sum;
}

/* Work space: a refusal fails that reader only and the job runs again for the next; results
 * of a finished job give way to another job's work and come back, right, when read again;
 * every byte is released when the results go. */
static void test_gene_major_space(void)
{
    cfs_perm *perm = cfs_perm_new(3, 0);
    counting_bound cb = {0, 10, 0};
    cfs_space_bound bound = {bound_reserve, bound_release, &cb};
    cfs_space *space = cfs_space_new(&bound);
    cfs_engine_opts o = {.memory = 4u << 20, .workdir = "/tmp", .space = space};
    cfs_err err;
    cfs_elem *a = small_csr(1), *b = small_csr(10);
    CHECK(cfs_gene_major_sparse(a, perm, &o, "A", &err) == 0);
    CHECK(cfs_gene_major_sparse(b, perm, &o, "B", &err) == 0);
    CHECK(value_sum(a, &err) < 0 && strstr(err.msg, "A: ") && strstr(err.msg, "no room"));
    CHECK(cb.held == 0);
    /* Room for one job's spill + results at a time: 4 records of 6 bytes and at most 4 run
     * headers of 6, then 4 x 8 bytes of results. */
    cb.limit = 80;
    CHECK(value_sum(a, &err) == 10);
    CHECK(held_settles(&cb, 32));       /* the spill went back after the pass */
    CHECK(value_sum(b, &err) == 100);   /* A's results were dropped to make room */
    CHECK(held_settles(&cb, 32));
    CHECK(value_sum(a, &err) == 10 && held_settles(&cb, 32));
    /* Work beyond the whole bound fails at once, drops nothing, and fails for good. */
    cfs_elem *c = small_csr(100);
    CHECK(cfs_gene_major_sparse(c, perm, &o, "C", &err) == 0);
    cb.whole = 50;
    CHECK(value_sum(c, &err) < 0 && strstr(err.msg, "never") && held_settles(&cb, 32));
    cb.whole = 0;
    CHECK(value_sum(c, &err) < 0 && held_settles(&cb, 32));
    CHECK(value_sum(a, &err) == 10);    /* A's results were not dropped for C */
    cfs_elem_free(c);
    cfs_elem_free(a);
    cfs_elem_free(b);
    CHECK(held_settles(&cb, 0));
    /* With a codec the results are counted at its bound for the pass, then at what their files
     * hold: each chunk kept encoded at its length, each chunk two ranges share raw. */
    random_sparse r = {.n = 3000, .g = 400, .per_major = 60, .csr = true, .skew = true,
                       .seed = 8};
    uint64_t nnz, held = 0;
    cfs_elem *d = random_sparse_elem(&r, &nnz);
    cfs_perm *pd = cfs_perm_new(r.n, 7);
    cfs_engine_opts oc = o;
    oc.memory = 1u << 20;
    oc.codec = cfs_codec_for_layout(CFS_CODEC_BLOSC_LZ4);
    cb.limit = 1u << 30;
    unsigned kept = 0, left = 0;
    CHECK(cfs_gene_major_sparse(d, pd, &oc, "D", &err) == 0);
    uint64_t len = d->values->chunk_hint[0];
    CHECK(kept_chunks_right(d->values, nnz, len, CFS_CODEC_BLOSC_LZ4, &kept, &left, &held));
    CHECK(kept_chunks_right(d->aux, nnz, len, CFS_CODEC_BLOSC_LZ4, &kept, &left, &held));
    uint64_t reserved = cfs_kept_bound(oc.codec, cfs_dtype_size(d->values->dtype), nnz, len) +
                        cfs_kept_bound(oc.codec, cfs_dtype_size(d->aux->dtype), nnz, len);
    CHECK(kept > 0 && left > 0 && held < reserved && held_settles(&cb, held));
    cfs_elem_free(d);
    cfs_perm_unref(pd);
    CHECK(held_settles(&cb, 0));
    cfs_space_free(space);
    cfs_perm_unref(perm);
}

/* The order of a running pass: the parts readers wait for, the earliest wait first, then the
 * rest in order; a landed part is ready; every part is made once. */
static void test_schedule(void)
{
    cfs_schedule s = {0};
    CHECK(cfs_schedule_init(&s, 6) == 0);
    CHECK(cfs_schedule_claim(&s) == 0);
    CHECK(!cfs_schedule_ready(&s, 4, 4));           /* a reader waits for 4 ... */
    CHECK(!cfs_schedule_ready(&s, 1, 2));           /* ... then one for 1 and 2 */
    CHECK(!cfs_schedule_ready(&s, 4, 4));           /* 4 keeps its first place */
    CHECK(cfs_schedule_claim(&s) == 4);
    CHECK(cfs_schedule_claim(&s) == 1);
    CHECK(!cfs_schedule_ready(&s, 0, 0));           /* being made is not landed */
    cfs_schedule_land(&s, 4);
    cfs_schedule_land(&s, 0);
    CHECK(cfs_schedule_ready(&s, 4, 4) && cfs_schedule_ready(&s, 0, 0) && s.landed == 2);
    CHECK(!cfs_schedule_ready(&s, 0, 1));
    CHECK(cfs_schedule_claim(&s) == 2);
    CHECK(cfs_schedule_claim(&s) == 3);
    CHECK(cfs_schedule_claim(&s) == 5);
    CHECK(cfs_schedule_claim(&s) == 6);             /* none left */
    for (size_t p = 1; p < 6; p++)
        cfs_schedule_land(&s, p);
    cfs_schedule_land(&s, 3);                       /* landing twice counts once */
    CHECK(cfs_schedule_ready(&s, 0, 5) && s.landed == 6);
    CHECK(cfs_schedule_init(&s, 2) == 0 && s.landed == 0 && !cfs_schedule_ready(&s, 0, 1));
    cfs_schedule_free(&s);
}

/* A job that serves PARTS parts, making each when the test lets it (gate), in the schedule's
 * order; it can fail after `fail_after` parts. */
enum { PARTS = 5 };

typedef struct fake_job {
    cfs_job job;
    cfs_schedule sched;         /* set up afresh when outputs are dropped; under the job's lock */
    size_t gate, made, order[PARTS];
    int fail_after;             /* -1: never */
    cfs_status fail_status;
    int runs, drops, asked;
    int *destroyed;
} fake_job;

static int fake_run(cfs_job *job, cfs_err *err)
{
    fake_job *f = (fake_job *)job;
    pthread_mutex_lock(&job->lock);
    f->runs++;
    f->made = 0;
    int rc = 0;
    while (rc == 0 && f->made < PARTS) {
        while (f->made >= f->gate && !cfs_job_cancelled(job))
            pthread_cond_wait(&job->changed, &job->lock);
        if (cfs_job_cancelled(job)) {
            rc = cfs_err_set(err, "cancelled");
        } else if ((int)f->made == f->fail_after) {
            rc = cfs_err_setc(err, f->fail_status, "failed after %zu", f->made);
        } else {
            size_t p = cfs_schedule_claim(&f->sched);
            f->order[f->made++] = p;
            cfs_schedule_land(&f->sched, p);
            cfs_job_landed(job);
        }
    }
    pthread_mutex_unlock(&job->lock);
    return rc;
}

static bool fake_ready(cfs_job *job, const void *part)
{
    fake_job *f = (fake_job *)job;
    size_t p = *(const size_t *)part;
    f->asked++;
    return cfs_schedule_ready(&f->sched, p, p);
}

static void fake_drop(cfs_job *job)
{
    fake_job *f = (fake_job *)job;
    cfs_schedule_init(&f->sched, PARTS);
    f->drops++;
}

static int dropped_at_destroy;

static void fake_destroy(cfs_job *job)
{
    fake_job *f = (fake_job *)job;
    cfs_schedule_free(&f->sched);
    dropped_at_destroy = f->drops;
    (*f->destroyed)++;
    free(f);
}

static fake_job *fake_new(int *destroyed)
{
    fake_job *f = calloc(1, sizeof *f);
    cfs_schedule_init(&f->sched, PARTS);
    cfs_job_init(&f->job, fake_run, fake_destroy);
    f->job.drop = fake_drop;
    f->job.part_ready = fake_ready;
    f->fail_after = -1;
    f->destroyed = destroyed;
    return f;
}

/* Reads of one field of the fake under the job's lock. */
static int fake_get(fake_job *f, const int *field)
{
    pthread_mutex_lock(&f->job.lock);
    int v = *field;
    pthread_mutex_unlock(&f->job.lock);
    return v;
}

static void fake_open_gate(fake_job *f, size_t gate)
{
    pthread_mutex_lock(&f->job.lock);
    f->gate = gate;
    pthread_cond_broadcast(&f->job.changed);
    pthread_mutex_unlock(&f->job.lock);
}

/* Whether `*field` (read under the job's lock) reaches at least want within ten seconds. */
static bool fake_reaches(fake_job *f, const int *field, int want)
{
    for (int i = 0; i < 10000 && fake_get(f, field) < want; i++)
        nanosleep(&(struct timespec){0, 1000000L}, NULL);
    return fake_get(f, field) >= want;
}

/* A reader of one part in a thread of its own; it keeps the part while `hold` is set. */
typedef struct part_reader {
    fake_job *f;
    size_t part;
    int rc, returned, hold;
    cfs_err err;
    pthread_t thread;
} part_reader;

static void *read_part(void *arg)
{
    part_reader *r = arg;
    int rc = cfs_job_acquire_part(&r->f->job, &r->part, &r->err);
    __atomic_store_n(&r->rc, rc, __ATOMIC_SEQ_CST);
    __atomic_store_n(&r->returned, 1, __ATOMIC_SEQ_CST);
    while (rc == 0 && __atomic_load_n(&r->hold, __ATOMIC_SEQ_CST))
        nanosleep(&(struct timespec){0, 1000000L}, NULL);
    if (rc == 0)
        cfs_job_done(&r->f->job);
    return NULL;
}

static void reader_start(part_reader *r, fake_job *f, size_t part, int hold)
{
    *r = (part_reader){.f = f, .part = part, .hold = hold};
    pthread_create(&r->thread, NULL, read_part, r);
}

static bool returned(part_reader *r)
{
    return __atomic_load_n(&r->returned, __ATOMIC_SEQ_CST) != 0;
}

/* Readers of a job that serves parts: each waits for its own part only, and the parts readers
 * wait for are made first; failures go to every reader (CFS_ERETRY: the next reader runs the
 * job again); a failed run's outputs go only once its readers are done; the last unref of a
 * running job cancels it and joins its thread. */
static void test_job_parts(void)
{
    int destroyed = 0;
    fake_job *f = fake_new(&destroyed);
    part_reader a, b, c;
    reader_start(&a, f, 3, 0);                      /* starts the run, waits for part 3 */
    CHECK(fake_reaches(f, &f->asked, 1));
    reader_start(&b, f, 1, 0);
    CHECK(fake_reaches(f, &f->asked, 2));
    /* The run's thread may not have started yet when both have asked (a loaded machine). */
    CHECK(fake_reaches(f, &f->runs, 1));
    CHECK(!returned(&a) && !returned(&b) && fake_get(f, &f->runs) == 1);
    fake_open_gate(f, 1);                           /* one part: the first one waited for */
    pthread_join(a.thread, NULL);
    CHECK(a.rc == 0 && !returned(&b));
    fake_open_gate(f, PARTS);
    pthread_join(b.thread, NULL);
    CHECK(b.rc == 0);
    reader_start(&c, f, 4, 0);
    pthread_join(c.thread, NULL);
    CHECK(c.rc == 0 && f->runs == 1 && f->job.state == 1);
    CHECK(f->order[0] == 3 && f->order[1] == 1 && f->order[2] == 0 && f->order[3] == 2 &&
          f->order[4] == 4);
    cfs_job_unref(&f->job);
    CHECK(destroyed == 1);

    /* A failure after two parts: a reader of a landed part is served, and the outputs are
     * dropped only once it is done; every reader after gets the failure, and no run again. */
    destroyed = 0;
    f = fake_new(&destroyed);
    f->fail_after = 2;
    f->fail_status = CFS_EIO;
    f->gate = 2;
    reader_start(&a, f, 0, 1);                      /* keeps part 0 */
    while (!returned(&a))
        nanosleep(&(struct timespec){0, 1000000L}, NULL);
    CHECK(a.rc == 0);
    reader_start(&b, f, 4, 0);
    CHECK(fake_reaches(f, &f->asked, 2));
    fake_open_gate(f, PARTS);                       /* the run fails now */
    int ending = 0;
    for (int i = 0; i < 10000 && !ending; i++) {
        pthread_mutex_lock(&f->job.lock);
        ending = f->job.ending;
        pthread_mutex_unlock(&f->job.lock);
        nanosleep(&(struct timespec){0, 1000000L}, NULL);
    }
    CHECK(ending && fake_get(f, &f->drops) == 0 && !returned(&b));
    __atomic_store_n(&a.hold, 0, __ATOMIC_SEQ_CST);
    pthread_join(a.thread, NULL);
    pthread_join(b.thread, NULL);
    CHECK(b.rc < 0 && b.err.status == CFS_EIO && f->drops == 1);
    reader_start(&c, f, 0, 0);
    pthread_join(c.thread, NULL);
    CHECK(c.rc < 0 && c.err.status == CFS_EIO && strstr(c.err.msg, "failed after 2") &&
          f->runs == 1);
    cfs_job_unref(&f->job);
    CHECK(destroyed == 1);

    /* CFS_ERETRY fails the readers of that run; the next reader runs the job again. */
    destroyed = 0;
    f = fake_new(&destroyed);
    f->fail_after = 0;
    f->fail_status = CFS_ERETRY;
    f->gate = PARTS;
    reader_start(&a, f, 2, 0);
    pthread_join(a.thread, NULL);
    CHECK(a.rc < 0 && a.err.status == CFS_ERETRY && f->runs == 1 && f->job.state == 0);
    pthread_mutex_lock(&f->job.lock);
    f->fail_after = -1;
    pthread_mutex_unlock(&f->job.lock);
    reader_start(&b, f, 2, 0);
    pthread_join(b.thread, NULL);
    CHECK(b.rc == 0 && f->runs == 2);
    cfs_job_unref(&f->job);
    CHECK(destroyed == 1);

    /* The last reference goes while the run goes on after its reader left (a dataset closed
     * mid-pass): the run is cancelled, its outputs dropped and its thread joined. */
    destroyed = 0;
    f = fake_new(&destroyed);
    f->gate = 1;
    reader_start(&a, f, 0, 0);
    pthread_join(a.thread, NULL);
    CHECK(a.rc == 0 && fake_get(f, &f->runs) == 1);
    cfs_job_unref(&f->job);         /* the run waits at its gate: cancelled */
    CHECK(destroyed == 1 && dropped_at_destroy == 1);
}

static int names_in(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

/* A spill file has no name while it is used, and a name a killed process left is swept. */
static void test_spill_names(void)
{
    char tmpl[] = "/tmp/cfs-unit-spill-XXXXXX";
    char *dir = unit_temp_dir(tmpl);
    if (!dir)
        return;
    cfs_spill s;
    cfs_err err = {0};
    CHECK(cfs_spill_open(&s, dir, 64, &err) == 0 && names_in(dir) == 0);
    CHECK(cfs_spill_append(&s, "bytes", 5, &err) == 0 && cfs_spill_flush(&s, &err) == 0);
    cfs_spill_close(&s);
    char left[4200], other[4200];
    snprintf(left, sizeof left, "%s/spill-Ab12Cd", dir);
    snprintf(other, sizeof other, "%s/kept", dir);
    FILE *a = fopen(left, "w"), *b = fopen(other, "w");
    if (a)
        fclose(a);
    if (b)
        fclose(b);
    CHECK(names_in(dir) == 2);
    cfs_spill_sweep(dir);
    CHECK(names_in(dir) == 1 && access(other, F_OK) == 0);
    unit_remove_folder(dir);
}

/* A spill over a lent buffer writes through it like its own, and its close leaves the buffer
 * to the lender; a release frees the file's bytes once they are read. */
static void test_spill_lent(void)
{
    char tmpl[] = "/tmp/cfs-unit-spill-XXXXXX";
    char *dir = unit_temp_dir(tmpl);
    if (!dir)
        return;
    unsigned char *slab = malloc(16), got[11] = {0};
    cfs_spill s[2];
    cfs_err err = {0};
    CHECK(slab && cfs_spill_open_lent(&s[0], dir, slab, 8, &err) == 0 &&
          cfs_spill_open_lent(&s[1], dir, slab + 8, 8, &err) == 0);
    CHECK(cfs_spill_append(&s[0], "spill ", 6, &err) == 0 &&
          cfs_spill_append(&s[1], "other", 5, &err) == 0 &&
          cfs_spill_append(&s[0], "bytes", 5, &err) == 0 && cfs_spill_flush(&s[0], &err) == 0 &&
          cfs_spill_flush(&s[1], &err) == 0);
    CHECK(s[0].size == 11 && pread(s[0].fd, got, 11, 0) == 11 &&
          memcmp(got, "spill bytes", 11) == 0);
    CHECK(s[1].size == 5 && pread(s[1].fd, got, 5, 0) == 5 && memcmp(got, "other", 5) == 0);
    struct stat st;
    cfs_spill_release(&s[0]);
    CHECK(fstat(s[0].fd, &st) == 0 && st.st_size == 0);
    cfs_spill_close(&s[0]);
    cfs_spill_close(&s[1]);
    memcpy(slab, "still ours", 10);     /* the closes left it: ASan would see a double free */
    free(slab);
    unit_remove_folder(dir);
}

/* The files this process holds open under dir, unlinked (the engine's work files): how many
 * are empty, how many hold bytes. */
static void count_work_files(const char *dir, unsigned *empty, unsigned *full)
{
    *empty = *full = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    size_t dlen = strlen(dir);
    while (d && (de = readdir(d))) {
        char link[300], target[4096];
        snprintf(link, sizeof link, "/proc/self/fd/%s", de->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        struct stat st;
        if (n <= 0 || strncmp(target, dir, dlen) != 0 || target[dlen] != '/')
            continue;
        target[n] = '\0';
        if (!strstr(target, " (deleted)") || stat(link, &st) != 0)
            continue;
        *(st.st_size == 0 ? empty : full) += 1;
    }
    if (d)
        closedir(d);
}

/* A bucket's spill file is emptied once the bucket is sorted, while the others wait their turn
 * (the test hook holds each sorter before a bucket); when the pass ends only the results hold
 * bytes. */
static void test_spill_emptied_per_bucket(void)
{
    char tmpl[] = "/tmp/cfs-unit-work-XXXXXX";
    char *dir = unit_temp_dir(tmpl);
    if (!dir)
        return;
    random_sparse r = {.n = 5000, .g = 1000, .per_major = 50, .csr = true, .seed = 10};
    uint64_t nnz;
    cfs_elem *el = random_sparse_elem(&r, &nnz);
    cfs_perm *perm = cfs_perm_new(r.n, 7);
    cfs_engine_opts o = {.memory = 4u << 20, .workdir = dir};
    cfs_err err;
    setenv(CFS_LAYOUT_DELAY_ENV, "150", 1);
    CHECK(cfs_gene_major_sparse(el, perm, &o, "X", &err) == 0);
    unsetenv(CFS_LAYOUT_DELAY_ENV);
    int32_t ptr[2];
    float *vals = malloc(nnz * sizeof *vals);
    uint64_t z[1] = {0}, two[1] = {2}, all[1] = {nnz};
    CHECK(vals && cfs_array_read(el->indptr, z, two, ptr, &err) == 0);
    uint64_t first[1] = {(uint64_t)ptr[0]}, gene[1] = {(uint64_t)(ptr[1] - ptr[0])};
    unsigned empty, full;
    /* The first gene's bucket is sorted first; two sorters, each held 150 ms a bucket. */
    CHECK(cfs_array_read(el->values, first, gene, vals, &err) == 0);
    count_work_files(dir, &empty, &full);
    CHECK(empty >= 1 && full >= 10);
    CHECK(cfs_array_read(el->values, z, all, vals, &err) == 0);
    count_work_files(dir, &empty, &full);
    CHECK(full == 2);   /* the values and the row indices; spill files empty or closed */
    free(vals);
    cfs_perm_unref(perm);
    cfs_elem_free(el);
    unit_remove_folder(dir);
}

void unit_layout(void)
{
    test_priority();
    test_perm_pos();
    test_gene_major_sparse();
    test_gene_major_paths();
    test_gene_major_kept_chunks();
    test_sparse_index_dtype();
    test_gene_major_space();
    test_schedule();
    test_job_parts();
    test_spill_names();
    test_spill_lent();
    test_spill_emptied_per_bucket();
}
