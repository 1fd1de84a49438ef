#include "gene_major.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bigmem.h"
#include "chunk_hint.h"
#include "parallel.h"
#include "job.h"
#include "kept_chunks.h"
#include "schedule.h"
#include "sparse_index.h"
#include "spill.h"

enum { MAX_BUCKETS = 256 };

/* ---- sparse: csr/csc source -> csc over genes, rows in stored order ----------------------- */

typedef struct sparse_engine {
    cfs_job job;
    cfs_array *data, *indices, *indptr;     /* the source */
    bool src_csr;
    uint64_t n_obs, n_vars, nnz;
    cfs_perm *perm;
    cfs_engine_opts opts;
    char *workdir, *label;
    cfs_dtype out_index;                    /* int32 or int64 */
    unsigned test_delay_ms;                 /* CFS_LAYOUT_DELAY_ENV: each bucket waits this long */
    /* results */
    int64_t *out_indptr;                    /* n_vars + 1 */
    cfs_kept_chunks kept[2];                /* nnz values, nnz row indices */
    uint64_t chunk_len[2];                  /* the store's chunk of each (their hints) */
    uint64_t result_bytes;                  /* held in opts.space while the results live */
    /* Under the job's lock, while the pass runs: what readers may read already (§7). */
    bool indptr_ready;                      /* out_indptr is complete (the spill has ended) */
    uint64_t width;                         /* genes per bucket */
    cfs_schedule sched;                     /* the buckets: the ones readers wait for go first */
} sparse_engine;

/*
 * The spill files hold runs: the entries of one stored row that fall in one bucket, as a header
 * (stored row in 4 bytes, then the run's record count in 2) and its records (the gene relative to
 * its bucket, in gsize bytes, then the value bytes). A csr source gives one run per row and
 * bucket, so the row is written once for many entries, and a bucket is put in row order by
 * sorting its runs rather than its entries; a csc source gives runs of one entry.
 */
typedef struct rec_layout {
    size_t gsize, vsize, size;
} rec_layout;

enum { RUN_HEADER = 6, RUN_MAX = UINT16_MAX };

static void put_header(unsigned char *dst, uint32_t j, uint32_t count)
{
    uint16_t c = (uint16_t)count;
    memcpy(dst, &j, 4);
    memcpy(dst + 4, &c, 2);
}

static uint32_t run_count(const unsigned char *run)
{
    uint16_t c;
    memcpy(&c, run + 4, 2);
    return c;
}

static void report(const sparse_engine *e, double f)
{
    cfs_progress_note(e->opts.progress, e->label, f);
}

static int cancelled(const sparse_engine *e, cfs_err *err)
{
    return cfs_err_set(err, "%s: the layout was stopped (the dataset is closing)", e->label);
}

typedef struct buckets {
    cfs_spill *spill;
    size_t n;
    uint64_t width;         /* genes per bucket */
    uint64_t *counts;       /* nnz per gene */
    uint64_t *runs;         /* runs per bucket */
} buckets;

/* One sorter's workspace, kept across buckets: fresh pages for every bucket cost faults. */
typedef struct sort_ws {
    unsigned char *recs;    /* a bucket's runs, as spilled (or the chosen genes' part of them) */
    uint64_t *keys, *tmp;   /* per run: stored row << 32 | where it starts in recs */
    unsigned char *out;     /* the bucket's row indices, then its values */
    size_t recs_cap, keys_cap, tmp_cap, out_cap;            /* bytes */
    cfs_kept_writer kept[2];                                /* values, row indices */
} sort_ws;

static int grow(void **p, size_t *cap, uint64_t want)
{
    if (want <= *cap && *p)
        return 0;
    free(*p);
    /* A sorter's buffers are tens of megabytes written all over (the scatter). */
    *p = want <= SIZE_MAX ? cfs_big_alloc((size_t)want) : NULL;
    *cap = *p ? (size_t)want : 0;
    return *p ? 0 : -1;
}

static void workspace_free(sort_ws *ws)
{
    free(ws->recs);
    free(ws->keys);
    free(ws->tmp);
    free(ws->out);
    cfs_kept_writer_free(&ws->kept[0]);
    cfs_kept_writer_free(&ws->kept[1]);
}

static int workspace(sort_ws *ws, uint64_t recs_bytes, uint64_t runs, uint64_t n, size_t outsize)
{
    uint64_t kb = runs * sizeof(uint64_t);
    return grow((void **)&ws->recs, &ws->recs_cap, recs_bytes) < 0 ||
                   grow((void **)&ws->keys, &ws->keys_cap, kb) < 0 ||
                   grow((void **)&ws->tmp, &ws->tmp_cap, kb) < 0 ||
                   grow((void **)&ws->out, &ws->out_cap, n * outsize) < 0
               ? -1
               : 0;
}

static int read_int_array(const cfs_array *a, uint64_t start, uint64_t count, int64_t *out,
                          cfs_err *err)
{
    size_t esize = cfs_dtype_size(a->dtype);
    void *raw = malloc((count ? count : 1) * esize);
    if (!raw)
        return cfs_err_oom(err);
    uint64_t s[1] = {start}, c[1] = {count};
    int rc = cfs_array_read(a, s, c, raw, err);
    for (uint64_t i = 0; rc == 0 && i < count; i++)
        out[i] = cfs_int_get(a->dtype, raw, i);
    free(raw);
    return rc;
}

/* Widens a block of source indices of any integer type, the type switch outside the loop. */
static void widen_indices(cfs_dtype t, const void *raw, uint64_t n, int64_t *out)
{
#define WIDEN(T)                                                                           \
    for (uint64_t i = 0; i < n; i++) {                                                     \
        T v;                                                                               \
        memcpy(&v, (const unsigned char *)raw + i * sizeof(T), sizeof(T));                 \
        out[i] = (int64_t)v;                                                               \
    }
    switch (t) {
    case CFS_INT8: WIDEN(int8_t) break;
    case CFS_UINT8: WIDEN(uint8_t) break;
    case CFS_INT16: WIDEN(int16_t) break;
    case CFS_UINT16: WIDEN(uint16_t) break;
    case CFS_INT32: WIDEN(int32_t) break;
    case CFS_UINT32: WIDEN(uint32_t) break;
    case CFS_UINT64: WIDEN(uint64_t) break;
    default: WIDEN(int64_t) break;
    }
#undef WIDEN
}

static void put_record(unsigned char *dst, const rec_layout *rl, uint64_t gene,
                       const unsigned char *v)
{
    if (rl->gsize == 2) {
        uint16_t g = (uint16_t)gene;
        memcpy(dst, &g, 2);
    } else {
        uint32_t g = (uint32_t)gene;
        memcpy(dst, &g, 4);
    }
    if (rl->vsize == 4)
        memcpy(dst + rl->gsize, v, 4);
    else
        memcpy(dst + rl->gsize, v, rl->vsize);
}

static uint64_t get_gene(const unsigned char *p, size_t gsize)
{
    if (gsize == 2) {
        uint16_t g;
        memcpy(&g, p, 2);
        return g;
    }
    uint32_t g;
    memcpy(&g, p, 4);
    return g;
}

/* Appends one run to its bucket's buffer: the hot path of the pass, so it writes in place when
 * the run fits, and record by record through the buffer when it does not. */
static int spill_run(cfs_spill *sp, const rec_layout *rl, uint32_t j, uint32_t count,
                     const int64_t *genes, uint64_t base, const unsigned char *v, cfs_err *err)
{
    size_t need = RUN_HEADER + (size_t)count * rl->size;
    if (sp->len + need > sp->cap && cfs_spill_flush(sp, err) < 0)
        return -1;
    if (need <= sp->cap) {
        unsigned char *dst = sp->buf + sp->len;
        put_header(dst, j, count);
        dst += RUN_HEADER;
        for (uint32_t i = 0; i < count; i++, dst += rl->size)
            put_record(dst, rl, (uint64_t)genes[i] - base, v + i * rl->vsize);
        sp->len += need;
        return 0;
    }
    unsigned char header[RUN_HEADER];
    put_header(header, j, count);
    if (cfs_spill_append(sp, header, RUN_HEADER, err) < 0)
        return -1;
    unsigned char rec[16];
    for (uint32_t i = 0; i < count; i++) {
        put_record(rec, rl, (uint64_t)genes[i] - base, v + i * rl->vsize);
        if (cfs_spill_append(sp, rec, rl->size, err) < 0)
            return -1;
    }
    return 0;
}

/* One block of source entries: read by a helper thread while the block before is spilled. */
typedef struct src_block {
    const sparse_engine *e;
    uint64_t k0, n;
    void *ibuf, *vbuf;
    int rc;
    cfs_err err;
} src_block;

static void *read_block(void *arg)
{
    src_block *r = arg;
    uint64_t s[1] = {r->k0}, c[1] = {r->n};
    r->rc = cfs_array_read(r->e->indices, s, c, r->ibuf, &r->err) < 0 ||
                    cfs_array_read(r->e->data, s, c, r->vbuf, &r->err) < 0
                ? -1
                : 0;
    return NULL;
}

/* Where the spill pass is: the source's indptr, the major (row of a csr source, column of a
 * csc one) it has reached, and each gene's bucket. A csr row whose genes are not in bucket
 * order is first grouped by bucket in the scratch arrays (one run per row and bucket). */
typedef struct spill_cursor {
    const int64_t *ptr;
    uint64_t major_n, major;
    const uint64_t *pos;        /* source row -> stored row */
    const uint32_t *bucket_of;  /* gene -> bucket */
    int64_t *scratch_genes;     /* a block's worth, allocated when first needed */
    unsigned char *scratch_values;
    uint64_t *scratch_at;       /* per bucket */
} spill_cursor;

static int out_of_range(uint64_t k, cfs_err *err)
{
    return cfs_err_set(err, "entry %llu has an index out of range", (unsigned long long)k);
}

/* Groups the m entries of one row by bucket (stable) into the cursor's scratch arrays. */
static int group_by_bucket(const buckets *b, const rec_layout *rl, spill_cursor *cur,
                           uint64_t block, const int64_t *genes, const unsigned char *v,
                           uint64_t m)
{
    if (!cur->scratch_genes) {
        cur->scratch_genes = malloc(block * sizeof *cur->scratch_genes);
        cur->scratch_values = malloc(block * rl->vsize);
        cur->scratch_at = malloc((b->n + 1) * sizeof *cur->scratch_at);
        if (!cur->scratch_genes || !cur->scratch_values || !cur->scratch_at)
            return -1;
    }
    uint64_t *at = cur->scratch_at;
    memset(at, 0, (b->n + 1) * sizeof *at);
    for (uint64_t i = 0; i < m; i++)
        at[cur->bucket_of[genes[i]] + 1]++;
    for (size_t k = 1; k <= b->n; k++)
        at[k] += at[k - 1];
    for (uint64_t i = 0; i < m; i++) {
        uint64_t to = at[cur->bucket_of[genes[i]]]++;
        cur->scratch_genes[to] = genes[i];
        memcpy(cur->scratch_values + to * rl->vsize, v + i * rl->vsize, rl->vsize);
    }
    return 0;
}

/* Spills the m entries of one csr row (stored row j), one run per bucket they touch. */
static int spill_row(buckets *b, const rec_layout *rl, spill_cursor *cur, uint64_t block,
                     uint32_t j, uint64_t k, const int64_t *genes, const unsigned char *v,
                     uint64_t m, uint64_t n_vars, cfs_err *err)
{
    bool in_order = true;
    for (uint64_t i = 0; i < m; i++) {
        if (genes[i] < 0 || (uint64_t)genes[i] >= n_vars)
            return out_of_range(k + i, err);
        b->counts[genes[i]]++;
        if (i && cur->bucket_of[genes[i]] < cur->bucket_of[genes[i - 1]])
            in_order = false;
    }
    if (!in_order) {
        if (group_by_bucket(b, rl, cur, block, genes, v, m) < 0)
            return cfs_err_oom(err);
        genes = cur->scratch_genes;
        v = cur->scratch_values;
    }
    for (uint64_t i = 0; i < m;) {
        uint32_t bucket = cur->bucket_of[genes[i]];
        uint64_t i1 = i + 1;
        while (i1 < m && i1 - i < RUN_MAX && cur->bucket_of[genes[i1]] == bucket)
            i1++;
        b->runs[bucket]++;
        if (spill_run(&b->spill[bucket], rl, j, (uint32_t)(i1 - i), genes + i,
                      (uint64_t)bucket * b->width, v + i * rl->vsize, err) < 0)
            return -1;
        i = i1;
    }
    return 0;
}

/* Spills the m entries of one csc column (gene g): each entry is a run of its own. */
static int spill_column(const sparse_engine *e, buckets *b, const rec_layout *rl,
                        const spill_cursor *cur, int64_t g, uint64_t k, const int64_t *cells,
                        const unsigned char *v, uint64_t m, cfs_err *err)
{
    if ((uint64_t)g >= e->n_vars)
        return out_of_range(k, err);
    uint32_t bucket = cur->bucket_of[g];
    for (uint64_t i = 0; i < m; i++) {
        if (cells[i] < 0 || (uint64_t)cells[i] >= e->n_obs)
            return out_of_range(k + i, err);
        b->counts[g]++;
        b->runs[bucket]++;
        if (spill_run(&b->spill[bucket], rl, (uint32_t)cur->pos[cells[i]], 1, &g,
                      (uint64_t)bucket * b->width, v + i * rl->vsize, err) < 0)
            return -1;
    }
    return 0;
}

/* Spills entries [k0, k0 + n) (their minor indices widened, their values in vbuf), one major
 * at a time: within it the cell (csr) or the gene (csc) is fixed. */
static int spill_block(sparse_engine *e, buckets *b, const rec_layout *rl, spill_cursor *cur,
                       uint64_t block, uint64_t k0, uint64_t n, const int64_t *minor,
                       const unsigned char *vbuf, cfs_err *err)
{
    uint64_t k = 0;
    while (k < n) {
        while (cur->major < cur->major_n && (uint64_t)cur->ptr[cur->major + 1] <= k0 + k)
            cur->major++;
        if (cur->major == cur->major_n)     /* past the last major's end: indptr is wrong */
            return out_of_range(k0 + k, err);
        uint64_t end = (uint64_t)cur->ptr[cur->major + 1] - k0;
        if (end > n)
            end = n;
        int rc = e->src_csr
                     ? spill_row(b, rl, cur, block, (uint32_t)cur->pos[cur->major], k0 + k,
                                 minor + k, vbuf + k * rl->vsize, end - k, e->n_vars, err)
                     : spill_column(e, b, rl, cur, (int64_t)cur->major, k0 + k, minor + k,
                                    vbuf + k * rl->vsize, end - k, err);
        if (rc < 0)
            return -1;
        k = end;
    }
    return 0;
}

/* Source entries read at once: two blocks are in flight, each within 1/16 of the budget. */
static uint64_t source_block(const sparse_engine *e, const rec_layout *rl)
{
    size_t isize = cfs_dtype_size(e->indices->dtype);
    uint64_t block = e->opts.memory / 16 / (isize + rl->vsize + 8);
    return block < 4096 ? 4096 : block;
}

/* Pass over the source, in storage order, spilling each nonzero to its gene bucket. The next
 * block is read (by the reader worker, or libhdf5) while this one is spilled. */
static int spill_source(sparse_engine *e, buckets *b, const rec_layout *rl, cfs_err *err)
{
    spill_cursor cur = {.major_n = e->src_csr ? e->n_obs : e->n_vars};
    int64_t *ptr = malloc((cur.major_n + 1) * sizeof *ptr);
    if (!ptr || read_int_array(e->indptr, 0, cur.major_n + 1, ptr, err) < 0) {
        free(ptr);
        return ptr ? -1 : cfs_err_oom(err);
    }
    cur.ptr = ptr;
    size_t isize = cfs_dtype_size(e->indices->dtype);
    uint64_t block = source_block(e, rl);
    void *ibuf[2] = {cfs_big_alloc(block * isize), cfs_big_alloc(block * isize)};
    void *vbuf[2] = {cfs_big_alloc(block * rl->vsize), cfs_big_alloc(block * rl->vsize)};
    int64_t *minor = cfs_big_alloc(block * sizeof *minor);
    uint32_t *bucket_of = malloc((e->n_vars ? e->n_vars : 1) * sizeof *bucket_of);
    cur.pos = cfs_perm_pos(e->perm);
    cur.bucket_of = bucket_of;
    int rc = ibuf[0] && ibuf[1] && vbuf[0] && vbuf[1] && minor && bucket_of && cur.pos
                 ? 0
                 : cfs_err_oom(err);
    for (uint64_t g = 0; rc == 0 && g < e->n_vars; g++)
        bucket_of[g] = (uint32_t)(g / b->width);
    src_block now = {e, 0, e->nnz < block ? e->nnz : block, ibuf[0], vbuf[0], 0, {0}};
    if (rc == 0 && e->nnz)
        read_block(&now);
    for (int side = 0; rc == 0 && now.k0 < e->nnz; side ^= 1) {
        if (now.rc < 0) {
            *err = now.err;
            rc = -1;
            break;
        }
        uint64_t k1 = now.k0 + now.n;
        src_block next = {e, k1, e->nnz - k1 < block ? e->nnz - k1 : block, ibuf[side ^ 1],
                          vbuf[side ^ 1], 0, {0}};
        pthread_t reader;
        bool ahead = k1 < e->nnz && pthread_create(&reader, NULL, read_block, &next) == 0;
        widen_indices(e->indices->dtype, now.ibuf, now.n, minor);
        rc = cfs_job_cancelled(&e->job)
                 ? cancelled(e, err)
                 : spill_block(e, b, rl, &cur, block, now.k0, now.n, minor, now.vbuf, err);
        report(e, (double)k1 / (double)(e->nnz ? e->nnz : 1) * 0.7);
        if (ahead)
            pthread_join(reader, NULL);
        else if (rc == 0 && k1 < e->nnz)
            read_block(&next);
        now = next;
    }
    for (size_t i = 0; rc == 0 && i < b->n; i++)
        rc = cfs_spill_flush(&b->spill[i], err);
    free(ptr);
    for (int i = 0; i < 2; i++) {
        free(ibuf[i]);
        free(vbuf[i]);
    }
    free(minor);
    free(bucket_of);
    free(cur.scratch_genes);
    free(cur.scratch_values);
    free(cur.scratch_at);
    return rc;
}

/* Sorts the run keys by stored row (LSD radix on the key's high half, stable), in digits as
 * narrow as the row count allows: fewer buckets per pass scatter into fewer cache lines. An
 * even number of passes leaves the keys back in keys. */
static void sort_runs(uint64_t *keys, uint64_t *tmp, uint64_t n, uint64_t n_obs)
{
    int bits = 1;
    while (bits < 32 && (UINT64_C(1) << bits) < n_obs)
        bits++;
    int passes = (bits + 10) / 11;
    if (passes % 2)
        passes++;
    int digit = (bits + passes - 1) / passes;
    size_t count[1 << 16];
    uint64_t mask = (UINT64_C(1) << digit) - 1;
    for (int p = 0, shift = 32; p < passes; p++, shift += digit) {
        memset(count, 0, ((size_t)mask + 1) * sizeof *count);
        for (uint64_t i = 0; i < n; i++)
            count[(keys[i] >> shift) & mask]++;
        size_t sum = 0;
        for (size_t d = 0; d <= mask; d++) {
            size_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        for (uint64_t i = 0; i < n; i++)
            tmp[count[(keys[i] >> shift) & mask]++] = keys[i];
        uint64_t *t = keys;
        keys = tmp;
        tmp = t;
    }
}

/* Finds the runs in the first `bytes` (< 2^32) of ws->recs: their keys. */
static uint64_t index_runs(sort_ws *ws, uint64_t bytes, size_t rs)
{
    uint64_t r = 0;
    for (uint64_t at = 0; at < bytes; r++) {
        uint32_t j;
        memcpy(&j, ws->recs + at, 4);
        uint32_t count = run_count(ws->recs + at);
        ws->keys[r] = (uint64_t)j << 32 | at;
        at += RUN_HEADER + (uint64_t)count * rs;
    }
    return r;
}

/* Runs are visited in row order, each somewhere else in memory: the next ones are fetched
 * while this one is scattered, in two steps, since a run is longer than a cache line (a csr
 * row's part in one bucket: tens of records) and only its header says how long. A run's header
 * is fetched RUN_PREFETCH runs ahead; half as far ahead, the header has come and the rest of
 * the run is fetched. Fetching only the first line left the scatter waiting on the others (it
 * took a third less time once they were fetched too). */
enum { RUN_PREFETCH = 64 };

static void prefetch_run(const unsigned char *run, size_t rs)
{
    const unsigned char *end = run + RUN_HEADER + (size_t)run_count(run) * rs;
    for (uintptr_t line = ((uintptr_t)run | 63) + 1; line < (uintptr_t)end; line += 64)
        __builtin_prefetch((const void *)line);
}

/*
 * Puts the n records of a bucket's runs (ws->recs, `bytes` long) in the result layout: the runs
 * sorted by stored row, then each record scattered to its gene (counting, stable), so that each
 * gene's row indices ascend, its values alongside. Writes them at entry `first` of the results.
 */
static int sort_and_write(sparse_engine *e, sort_ws *ws, uint64_t bytes, uint64_t n,
                          const rec_layout *rl, const uint64_t *gene_counts, uint64_t ngenes,
                          uint64_t *gene_start, uint64_t first, cfs_err *err)
{
    uint64_t nruns = index_runs(ws, bytes, rl->size);
    sort_runs(ws->keys, ws->tmp, nruns, e->n_obs);
    uint64_t sum = 0;
    for (uint64_t g = 0; g < ngenes; g++) {
        gene_start[g] = sum;
        sum += gene_counts[g];
    }
    size_t vsize = rl->vsize, isize = cfs_dtype_size(e->out_index);
    unsigned char *ind = ws->out, *val = ws->out + n * isize;
    bool narrow = e->out_index == CFS_INT32, small_gene = rl->gsize == 2;
    for (uint64_t r = 0; r < nruns; r++) {
        if (r + RUN_PREFETCH < nruns)
            __builtin_prefetch(ws->recs + (ws->keys[r + RUN_PREFETCH] & UINT32_MAX));
        if (r + RUN_PREFETCH / 2 < nruns)
            prefetch_run(ws->recs + (ws->keys[r + RUN_PREFETCH / 2] & UINT32_MAX), rl->size);
        const unsigned char *p = ws->recs + (ws->keys[r] & UINT32_MAX);
        uint32_t j;
        memcpy(&j, p, 4);
        uint32_t count = run_count(p);
        p += RUN_HEADER;
        int64_t wide = j;
        for (uint32_t i = 0; i < count; i++, p += rl->size) {
            uint64_t g = small_gene ? get_gene(p, 2) : get_gene(p, 4);
            uint64_t k = gene_start[g]++;
            if (narrow)
                memcpy(ind + k * 4, &j, 4);
            else
                memcpy(ind + k * 8, &wide, 8);
            if (vsize == 4)
                memcpy(val + k * 4, p + rl->gsize, 4);
            else
                memcpy(val + k * vsize, p + rl->gsize, vsize);
        }
    }
    if (cfs_kept_write(&e->kept[1], &ws->kept[1], ind, first, n, err) < 0 ||
        cfs_kept_write(&e->kept[0], &ws->kept[0], val, first, n, err) < 0)
        return -1;
    return 0;
}

/* Copies the part of one run that falls in genes [lo, hi) of its bucket to dst, the genes
 * re-based to lo; returns the bytes written (none when no record falls there). */
static size_t keep_genes(unsigned char *dst, const unsigned char *run, const rec_layout *rl,
                         uint64_t lo, uint64_t hi)
{
    uint32_t count = run_count(run), kept = 0;
    const unsigned char *p = run + RUN_HEADER;
    unsigned char *q = dst + RUN_HEADER;
    for (uint32_t i = 0; i < count; i++, p += rl->size) {
        uint64_t g = get_gene(p, rl->gsize);
        if (g < lo || g >= hi)
            continue;
        put_record(q, rl, g - lo, p + rl->gsize);
        q += rl->size;
        kept++;
    }
    if (!kept)
        return 0;
    uint32_t j;
    memcpy(&j, run, 4);
    put_header(dst, j, kept);
    return RUN_HEADER + (size_t)kept * rl->size;
}

/* Reads the runs of bucket b into ws->recs: all of them (whole), or the part of them in genes
 * [lo, hi) of the bucket, the file read in pieces, a run cut at a piece's end carried into the
 * next. */
static int load_runs(const cfs_spill *sp, sort_ws *ws, bool whole, uint64_t lo, uint64_t hi,
                     const rec_layout *rl, uint64_t memory, uint64_t *bytes, cfs_err *err)
{
    if (whole) {
        *bytes = sp->size;
        return cfs_pread_full(sp->fd, ws->recs, sp->size, 0, err);
    }
    size_t piece = (size_t)(memory / 4);
    if (piece < (64u << 10))
        piece = 64u << 10;
    if (piece > (8u << 20))
        piece = 8u << 20;
    unsigned char *io = malloc(piece);
    if (!io)
        return cfs_err_setc(err, CFS_ENOMEM, "out of memory sorting a bucket");
    uint64_t have = 0, at = 0;
    size_t held = 0;            /* bytes read into io and not yet taken */
    int rc = 0;
    while (rc == 0) {
        size_t want = piece - held;
        if (want > sp->size - at)
            want = (size_t)(sp->size - at);
        if (want && cfs_pread_full(sp->fd, io + held, want, at, err) < 0) {
            rc = -1;
            break;
        }
        at += want;
        held += want;
        size_t used = 0;
        while (held - used >= RUN_HEADER) {
            size_t len = RUN_HEADER + (size_t)run_count(io + used) * rl->size;
            if (len > held - used)
                break;
            have += keep_genes(ws->recs + have, io + used, rl, lo, hi);
            used += len;
        }
        memmove(io, io + used, held - used);
        held -= used;
        if (at == sp->size) {
            if (held)
                rc = cfs_err_set(err, "a spill file ends inside a run");
            break;
        }
        if (held == piece) {     /* one run longer than a piece: a larger piece */
            unsigned char *wider = realloc(io, piece * 2);
            if (!wider)
                rc = cfs_err_setc(err, CFS_ENOMEM, "out of memory sorting a bucket");
            else
                io = wider, piece *= 2;
        }
    }
    free(io);
    *bytes = have;
    return rc;
}

/* Bytes a sorter holds per entry of a part of a bucket, where each entry may be a run of its
 * own: the run, its key, its place and the entry's results. */
static uint64_t part_entry_bytes(const sparse_engine *e, const rec_layout *rl)
{
    return RUN_HEADER + rl->size + 2 * sizeof(uint64_t) + rl->vsize +
           cfs_dtype_size(e->out_index);
}

/* Processes genes [g0, g1) of bucket b (whole: all of its genes): reads its runs (or those
 * genes' part of them), sorts and writes them. */
static int emit_range(sparse_engine *e, const buckets *bk, sort_ws *ws, size_t b, uint64_t g0,
                      uint64_t g1, bool whole, const rec_layout *rl, uint64_t memory,
                      cfs_err *err)
{
    uint64_t base = b * bk->width, n = 0, bytes = 0;
    for (uint64_t g = g0; g < g1; g++)
        n += bk->counts[g];
    uint64_t recs = whole ? bk->spill[b].size : n * (RUN_HEADER + rl->size);
    uint64_t runs = whole ? bk->runs[b] : n;
    uint64_t *start = malloc((g1 - g0 + 1) * sizeof *start);
    int rc = start && workspace(ws, recs, runs, n, rl->vsize + cfs_dtype_size(e->out_index)) == 0
                 ? 0
                 : cfs_err_setc(err, CFS_ENOMEM, "out of memory sorting a bucket");
    if (rc == 0)
        rc = load_runs(&bk->spill[b], ws, whole, g0 - base, g1 - base, rl, memory, &bytes, err);
    if (rc == 0 && (whole || g1 == base + bk->width || g1 == e->n_vars))
        cfs_spill_release(&bk->spill[b]);
    if (rc == 0)
        rc = sort_and_write(e, ws, bytes, n, rl, bk->counts + g0, g1 - g0, start,
                            (uint64_t)e->out_indptr[g0], err);
    free(start);
    return rc;
}

/* Emits bucket b whole when it fits this sorter's share of the budget, else in gene
 * sub-ranges that each fit. */
static int emit_bucket(sparse_engine *e, const buckets *bk, sort_ws *ws, size_t b,
                       const rec_layout *rl, uint64_t memory, cfs_err *err)
{
    uint64_t g0 = b * bk->width, end = g0 + bk->width < e->n_vars ? g0 + bk->width : e->n_vars;
    if (g0 >= end)          /* the last buckets may start past the last gene */
        return 0;
    uint64_t n = 0, out = rl->vsize + cfs_dtype_size(e->out_index);
    for (uint64_t g = g0; g < end; g++)
        n += bk->counts[g];
    /* A key holds a run's place in 32 bits. */
    if (bk->spill[b].size + bk->runs[b] * 2 * sizeof(uint64_t) + n * out <= memory &&
        bk->spill[b].size <= UINT32_MAX)
        return emit_range(e, bk, ws, b, g0, end, true, rl, memory, err);
    uint64_t fit = memory / part_entry_bytes(e, rl);
    if (fit > UINT32_MAX / (RUN_HEADER + rl->size))
        fit = UINT32_MAX / (RUN_HEADER + rl->size);
    while (g0 < end) {
        uint64_t g1 = g0;
        n = 0;
        /* At least one gene, even past the budget: a gene's rows cannot be split. */
        while (g1 < end && (g1 == g0 || n + bk->counts[g1] <= fit))
            n += bk->counts[g1++];
        if (emit_range(e, bk, ws, b, g0, g1, false, rl, memory, err) < 0)
            return -1;
        g0 = g1;
    }
    return 0;
}

/* Buckets are sorted by SORTERS threads at once, each with its share of the memory budget;
 * they write disjoint ranges of the result files. Which bucket goes next is the schedule's
 * choice (one a reader waits for first), made under the job's lock; a bucket written is served
 * at once (result_read). */
enum { SORTERS = 2 };

typedef struct emit_pool {
    sparse_engine *e;
    const buckets *bk;
    const rec_layout *rl;
    int failed;             /* under the job's lock */
    cfs_err err;
} emit_pool;

/* The test hook's pause before a bucket, cut short when the job is cancelled. */
static void test_delay(sparse_engine *e)
{
    for (unsigned waited = 0; waited < e->test_delay_ms && !cfs_job_cancelled(&e->job);
         waited += 10)
        nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
}

static void *sorter(void *arg)
{
    emit_pool *p = arg;
    sparse_engine *e = p->e;
    sort_ws ws = {0};
    cfs_err err;
    for (;;) {
        pthread_mutex_lock(&e->job.lock);
        size_t b = p->failed || cfs_job_cancelled(&e->job) ? p->bk->n
                                                           : cfs_schedule_claim(&e->sched);
        pthread_mutex_unlock(&e->job.lock);
        if (b >= p->bk->n)
            break;
        test_delay(e);
        int rc = cfs_job_cancelled(&e->job)
                     ? cancelled(e, &err)
                     : emit_bucket(e, p->bk, &ws, b, p->rl, e->opts.memory / SORTERS, &err);
        pthread_mutex_lock(&e->job.lock);
        if (rc < 0 && !p->failed) {
            p->failed = 1;
            p->err = err;
        }
        if (rc == 0) {
            cfs_schedule_land(&e->sched, b);
            cfs_job_landed(&e->job);
        }
        size_t done = e->sched.landed;
        pthread_mutex_unlock(&e->job.lock);
        report(e, 0.7 + 0.3 * (double)done / (double)p->bk->n);
    }
    workspace_free(&ws);
    return NULL;
}

static int emit_all(sparse_engine *e, const buckets *bk, const rec_layout *rl, cfs_err *err)
{
    emit_pool pool = {.e = e, .bk = bk, .rl = rl};
    cfs_parallel_run(SORTERS, sorter, &pool);
    if (pool.failed) {
        *err = pool.err;
        return -1;
    }
    return 0;
}

/* Work bytes counted against the space before they are written. A refusal may pass (other
 * work ends, entries are evicted), so the job is left to run again, unless the bytes exceed
 * the whole bound. */
static int reserve_work(const cfs_engine_opts *o, const char *label, uint64_t bytes,
                        cfs_err *err)
{
    cfs_err why;
    if (cfs_space_reserve(o->space, bytes, &why) == 0)
        return 0;
    return cfs_err_setc(err, why.status == CFS_ENEVERFITS ? CFS_ENEVERFITS : CFS_ERETRY,
                        "%s: its layout needs %.1f MiB of work files: %s; raise -o cache_size",
                        label, (double)bytes / (1 << 20), why.msg);
}

/* A finished job's results may give way to other work; it runs again when read again. */
static int hold_results(const cfs_engine_opts *o, cfs_job *job, cfs_err *err)
{
    if (cfs_space_hold(o->space, job) < 0) {
        job->drop(job);
        return cfs_err_oom(err);
    }
    return 0;
}

static int result_file(const char *workdir, int *fd, cfs_err *err)
{
    *fd = cfs_spill_file(workdir, err);
    return *fd < 0 ? -1 : 0;
}

/* The results go (a failed run's, or a finished job's to make room): a later run starts from
 * empty files. Under the job's lock, or with nobody else left. */
static void release_results(sparse_engine *e)
{
    cfs_space_release(e->opts.space, e->result_bytes);
    e->result_bytes = 0;
    cfs_kept_close(&e->kept[0]);
    cfs_kept_close(&e->kept[1]);
    free(e->out_indptr);
    e->out_indptr = NULL;
    e->indptr_ready = false;
    cfs_schedule_free(&e->sched);
}

/* Bucket count: each bucket is sorted in one go (a sorter holds its runs, their keys and the
 * results), and there are enough of them that a reader waiting for one bucket waits for a
 * small share of the sorting (MIN_BUCKETS), unless that makes buckets smaller than
 * MIN_BUCKET_BYTES of records. */
enum { MIN_BUCKETS = 64, MIN_BUCKET_BYTES = 64 << 10 };

static size_t bucket_count(const sparse_engine *e, const rec_layout *rl)
{
    /* A csr row's run holds many entries; a csc source's holds one. */
    uint64_t per = rl->size + rl->vsize + cfs_dtype_size(e->out_index) +
                   (e->src_csr ? 4 : RUN_HEADER + 2 * sizeof(uint64_t));
    uint64_t want = e->nnz * per * SORTERS / (e->opts.memory ? e->opts.memory : 1) + 1;
    uint64_t small = e->nnz * rl->size / MIN_BUCKET_BYTES + 1;
    if (want < MIN_BUCKETS)
        want = small < MIN_BUCKETS ? small : MIN_BUCKETS;
    if (want > MAX_BUCKETS)
        want = MAX_BUCKETS;
    if (want > e->n_vars)
        want = e->n_vars ? e->n_vars : 1;
    return (size_t)want;
}

/* The spill files' bytes at most: every entry's record and every run's header. A csr source
 * has at most one run per bucket for each piece of a row (a row, or its part in one block),
 * plus one for every RUN_MAX entries of a longer one. */
static uint64_t spill_bound(const sparse_engine *e, const buckets *b, const rec_layout *rl)
{
    uint64_t runs = e->nnz;
    if (e->src_csr) {
        uint64_t pieces = e->n_obs + e->nnz / source_block(e, rl) + 1;
        if (pieces <= UINT64_MAX / b->n && pieces * b->n + e->nnz / RUN_MAX < runs)
            runs = pieces * b->n + e->nnz / RUN_MAX;
    }
    return e->nnz * rl->size + runs * RUN_HEADER;
}

/* The spill pass has made out_indptr: readers of X/indptr go on, the others learn which bucket
 * holds their range. */
static void indptr_landed(sparse_engine *e, const buckets *b)
{
    int64_t sum = 0;
    for (uint64_t g = 0; g < e->n_vars; g++) {
        e->out_indptr[g] = sum;
        sum += (int64_t)b->counts[g];
    }
    e->out_indptr[e->n_vars] = sum;
    pthread_mutex_lock(&e->job.lock);
    e->indptr_ready = true;
    cfs_job_landed(&e->job);
    pthread_mutex_unlock(&e->job.lock);
}

/* A failed pass leaves its results to the job, which drops them once nobody reads them. */
static int sparse_pass(sparse_engine *e, cfs_err *err)
{
    size_t vsize = cfs_dtype_size(e->data->dtype);
    rec_layout rl = {4, vsize, 4 + vsize};
    buckets b = {0};
    b.n = bucket_count(e, &rl);
    b.width = (e->n_vars + b.n - 1) / b.n;
    if (b.width == 0)
        b.width = 1;
    if (b.width <= UINT16_MAX + 1u) {
        rl.gsize = 2;
        rl.size = 2 + vsize;
    }
    uint64_t spill_bytes = spill_bound(e, &b, &rl);
    size_t isize = cfs_dtype_size(e->out_index);
    uint64_t result_bytes = cfs_kept_bound(e->opts.codec, vsize, e->nnz, e->chunk_len[0]) +
                            cfs_kept_bound(e->opts.codec, isize, e->nnz, e->chunk_len[1]);
    int rc = reserve_work(&e->opts, e->label, spill_bytes + result_bytes, err);
    if (rc < 0)
        return rc;
    b.spill = calloc(b.n, sizeof *b.spill);
    b.counts = calloc(e->n_vars + 1, sizeof *b.counts);
    b.runs = calloc(b.n, sizeof *b.runs);
    pthread_mutex_lock(&e->job.lock);
    e->result_bytes = result_bytes;
    e->width = b.width;
    if (cfs_schedule_init(&e->sched, b.n) < 0)
        rc = -1;
    pthread_mutex_unlock(&e->job.lock);
    e->out_indptr = malloc((e->n_vars + 1) * sizeof *e->out_indptr);
    if (rc < 0 || !b.spill || !b.counts || !b.runs || !e->out_indptr) {
        free(b.spill);
        free(b.counts);
        free(b.runs);
        cfs_space_release(e->opts.space, spill_bytes);
        return cfs_err_oom(err);
    }
    size_t buffer = (size_t)(e->opts.memory / 8 / b.n);
    if (buffer > (1u << 20))
        buffer = 1u << 20;
    if (buffer == 0)
        buffer = 1;
    /* One slab for all the spill buffers: large enough for huge pages (bigmem.h). */
    unsigned char *slab = cfs_big_alloc(buffer * b.n);
    size_t opened = 0;
    if (!slab)
        rc = cfs_err_oom(err);
    for (; rc == 0 && opened < b.n; opened++)
        rc = cfs_spill_open_lent(&b.spill[opened], e->workdir, slab + opened * buffer, buffer,
                                 err);
    if (rc == 0)
        rc = cfs_kept_open(&e->kept[0], e->workdir, e->opts.codec, vsize, e->nnz,
                           e->chunk_len[0], err);
    if (rc == 0)
        rc = cfs_kept_open(&e->kept[1], e->workdir, e->opts.codec, isize, e->nnz,
                           e->chunk_len[1], err);
    if (rc == 0)
        rc = spill_source(e, &b, &rl, err);
    if (rc == 0)
        indptr_landed(e, &b);
    /* The spill buffers are no longer needed: their memory goes to the sorters. */
    free(slab);
    for (size_t i = 0; i < opened; i++)
        b.spill[i].buf = NULL;
    if (rc == 0)
        rc = emit_all(e, &b, &rl, err);
    for (size_t i = 0; i < opened; i++)
        cfs_spill_close(&b.spill[i]);
    cfs_space_release(e->opts.space, spill_bytes);
    free(b.spill);
    free(b.counts);
    free(b.runs);
    return rc;
}

/* A pass bounded by -o memory that ran out of memory: the process may allocate less than that
 * (ulimit -v, a container's limit), and retrying will not help; lowering the bound will. */
static int memory_failure(const cfs_engine_opts *o, cfs_err *err)
{
    if (err->status != CFS_ENOMEM)
        return -1;
    char was[sizeof err->msg / 2];
    snprintf(was, sizeof was, "%.400s", err->msg);
    return cfs_err_setc(err, CFS_ENOMEM, "%s: its layout works in -o memory=%.0fM, more than "
                        "this process could allocate (ulimit -v?); lower -o memory",
                        was, (double)o->memory / (1 << 20));
}

/* The results were counted at their bound before the pass (every chunk at its codec's worst);
 * once written, only what their files hold stays counted, so the rest of the bound goes back to
 * the cache (encoded results are about a third of it). */
static void keep_what_results_take(sparse_engine *e)
{
    pthread_mutex_lock(&e->job.lock);
    uint64_t held = cfs_kept_bytes(&e->kept[0]) + cfs_kept_bytes(&e->kept[1]);
    if (held < e->result_bytes) {
        cfs_space_release(e->opts.space, e->result_bytes - held);
        e->result_bytes = held;
    }
    pthread_mutex_unlock(&e->job.lock);
}

/* In the job's thread (cfs_job_acquire_part). */
static int sparse_run(cfs_job *job, cfs_err *err)
{
    sparse_engine *e = (sparse_engine *)job;
    cfs_progress_begin(e->opts.progress, e->label);
    int rc = sparse_pass(e, err);
    cfs_progress_end(e->opts.progress, e->label);
    if (rc < 0)
        return memory_failure(&e->opts, err);
    keep_what_results_take(e);
    /* A finished job's results may give way to other work; it runs again when read again. */
    if (cfs_space_hold(e->opts.space, job) < 0)
        rc = cfs_err_oom(err);
    return rc;
}

static void sparse_drop(cfs_job *job)
{
    release_results((sparse_engine *)job);
}

static void sparse_destroy(cfs_job *job)
{
    sparse_engine *e = (sparse_engine *)job;
    cfs_space_unhold(e->opts.space, job);
    release_results(e);
    cfs_array_unref(e->data);
    cfs_array_unref(e->indices);
    cfs_array_unref(e->indptr);
    cfs_perm_unref(e->perm);
    free(e->workdir);
    free(e->label);
    free(e);
}

typedef struct sparse_result {
    sparse_engine *engine;
    int which;              /* 0 data, 1 indices, 2 indptr */
} sparse_result;

typedef struct result_part {
    int which;
    uint64_t start, count;
} result_part;

/* The gene holding entry k < nnz: the last gene whose range starts at or before it. */
static uint64_t gene_of_entry(const sparse_engine *e, uint64_t k)
{
    uint64_t lo = 0, hi = e->n_vars;        /* out_indptr[lo] <= k < out_indptr[hi] */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if ((uint64_t)e->out_indptr[mid] <= k)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Under the job's lock while the pass runs: indptr once the spill has ended; a range of entries
 * once every bucket of the genes it crosses is written. */
static bool part_ready(cfs_job *job, const void *arg)
{
    const sparse_engine *e = (const sparse_engine *)job;
    const result_part *p = arg;
    if (!e->indptr_ready)
        return false;
    if (p->which == 2 || p->count == 0)
        return true;
    uint64_t first = gene_of_entry(e, p->start) / e->width;
    uint64_t last = gene_of_entry(e, p->start + p->count - 1) / e->width;
    return cfs_schedule_ready(&((sparse_engine *)job)->sched, first, last);
}

static int result_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                       void *out, cfs_err *err)
{
    sparse_result *r = arr->ctx;
    sparse_engine *e = r->engine;
    result_part part = {r->which, start[0], count[0]};
    if (cfs_job_acquire_part(&e->job, &part, err) < 0)
        return -1;
    int rc = 0;
    if (r->which == 2)
        for (uint64_t k = 0; k < count[0]; k++)
            cfs_int_set(arr->dtype, out, k, e->out_indptr[start[0] + k]);
    else
        rc = cfs_kept_read(&e->kept[r->which], start[0], count[0], out, err);
    cfs_job_done(&e->job);
    return rc;
}

/* The store's chunk as the pass kept it, encoded (kept_chunks.h). */
static int result_encoded(const cfs_array *arr, uint64_t idx, uint64_t chunk_len, int codec_id,
                          cfs_buf *out, cfs_err *err)
{
    sparse_result *r = arr->ctx;
    sparse_engine *e = r->engine;
    if (r->which == 2 || chunk_len == 0 || chunk_len != e->chunk_len[r->which] ||
        !e->opts.codec || codec_id != e->opts.codec->id ||
        idx >= (e->nnz + chunk_len - 1) / chunk_len)
        return 0;
    uint64_t start = idx * chunk_len;
    result_part part = {r->which, start, e->nnz - start < chunk_len ? e->nnz - start : chunk_len};
    if (cfs_job_acquire_part(&e->job, &part, err) < 0)
        return -1;
    int rc = cfs_kept_encoded(&e->kept[r->which], idx, chunk_len, codec_id, out, err);
    cfs_job_done(&e->job);
    return rc;
}

static void result_free(void *ctx)
{
    sparse_result *r = ctx;
    cfs_job_unref(&r->engine->job);
    free(r);
}

static const cfs_array_ops result_ops = {result_read, result_free, NULL, NULL, result_encoded};

static cfs_array *result_array(sparse_engine *e, int which, cfs_dtype dtype, uint64_t len)
{
    sparse_result *r = malloc(sizeof *r);
    if (!r)
        return NULL;
    r->engine = e;
    r->which = which;
    cfs_job_ref(&e->job);
    cfs_array *a = cfs_array_new(dtype, 1, &len, &result_ops, r);
    if (!a)
        result_free(r);
    return a;
}

int cfs_gene_major_sparse(cfs_elem *el, cfs_perm *perm, const cfs_engine_opts *o,
                          const char *label, cfs_err *err)
{
    if (el->sparse_shape[0] > UINT32_MAX)
        return cfs_err_set(err, "%s: more than 2^32 cells", label);
    sparse_engine *e = calloc(1, sizeof *e);
    if (!e)
        return cfs_err_oom(err);
    cfs_job_init(&e->job, sparse_run, sparse_destroy);
    e->job.drop = sparse_drop;
    e->job.part_ready = part_ready;
    const char *delay = getenv(CFS_LAYOUT_DELAY_ENV);
    e->test_delay_ms = delay ? (unsigned)strtoul(delay, NULL, 10) : 0;
    e->data = cfs_array_ref(el->values);
    e->indices = cfs_array_ref(el->aux);
    e->indptr = cfs_array_ref(el->indptr);
    e->src_csr = el->csr;
    e->n_obs = el->sparse_shape[0];
    e->n_vars = el->sparse_shape[1];
    e->nnz = el->values->shape[0];
    e->perm = cfs_perm_ref(perm);
    e->opts = *o;
    e->workdir = strdup(o->workdir);
    e->label = strdup(label);
    cfs_kept_init(&e->kept[0]);
    cfs_kept_init(&e->kept[1]);
    e->out_index = cfs_sparse_index_dtype(e->nnz, e->n_obs);
    cfs_array *d = result_array(e, 0, el->values->dtype, e->nnz);
    cfs_array *i = result_array(e, 1, e->out_index, e->nnz);
    cfs_array *p = result_array(e, 2, e->out_index, e->n_vars + 1);
    cfs_job_unref(&e->job);
    if (!d || !i || !p || !e->workdir || !e->label) {
        cfs_array_unref(d);
        cfs_array_unref(i);
        cfs_array_unref(p);
        return cfs_err_oom(err);
    }
    /* One gene's nonzeros are read as one range, from its first priority cells on. */
    size_t vsize = cfs_dtype_size(d->dtype), isize = cfs_dtype_size(i->dtype);
    uint64_t gene = el->sparse_shape[1] ? i->shape[0] / el->sparse_shape[1] : i->shape[0];
    cfs_hint_ranges(d, gene, vsize > isize ? vsize : isize);
    cfs_hint_ranges(i, gene, vsize > isize ? vsize : isize);
    /* No hint: the whole array is one chunk (it fits the renderer's whole-array rule). */
    e->chunk_len[0] = d->chunk_hint[0] ? d->chunk_hint[0] : e->nnz;
    e->chunk_len[1] = i->chunk_hint[0] ? i->chunk_hint[0] : e->nnz;
    cfs_array_unref(el->values);
    cfs_array_unref(el->aux);
    cfs_array_unref(el->indptr);
    el->values = d;
    el->aux = i;
    el->indptr = p;
    el->csr = false;
    return 0;
}

/* ---- dense: rows permuted, stored gene-group-major ----------------------------------------- */

/*
 * The result file Q holds, for each group of G genes, every stored row's G values: a block of
 * (rows x G) is one contiguous range, so a chunk is one pread.
 */
typedef struct dense_engine {
    cfs_job job;
    cfs_array *src;
    cfs_perm *perm;
    cfs_engine_opts opts;
    char *workdir, *label;
    uint64_t n_obs, n_vars, group;
    size_t esize;
    int fd;
    uint64_t result_bytes;      /* held in opts.space while Q lives */
} dense_engine;

static uint64_t group_width(const dense_engine *e, uint64_t gg)
{
    uint64_t g0 = gg * e->group;
    return e->n_vars - g0 < e->group ? e->n_vars - g0 : e->group;
}

static uint64_t group_offset(const dense_engine *e, uint64_t gg)
{
    return gg * e->group * e->n_obs * e->esize;
}

/* Writes rows [r0, r0+n) of the stored matrix (C order in buf) into Q, group by group. */
static int scatter_rows(dense_engine *e, const unsigned char *buf, uint64_t r0, uint64_t n,
                        unsigned char *tmp, cfs_err *err)
{
    uint64_t ngroups = (e->n_vars + e->group - 1) / e->group;
    size_t row = e->n_vars * e->esize;
    for (uint64_t gg = 0; gg < ngroups; gg++) {
        uint64_t w = group_width(e, gg);
        size_t wb = w * e->esize;
        for (uint64_t r = 0; r < n; r++)
            memcpy(tmp + r * wb, buf + r * row + gg * e->group * e->esize, wb);
        if (cfs_pwrite_full(e->fd, tmp, n * wb, group_offset(e, gg) + r0 * wb, err) < 0)
            return -1;
    }
    return 0;
}

static int read_rows(const dense_engine *e, uint64_t r0, uint64_t n, void *buf, cfs_err *err)
{
    uint64_t start[2] = {r0, 0}, count[2] = {n, e->n_vars};
    return cfs_array_read(e->src, start, count, buf, err);
}

static void release_q(dense_engine *e)
{
    cfs_space_release(e->opts.space, e->result_bytes);
    e->result_bytes = 0;
    if (e->fd >= 0)
        close(e->fd);
    e->fd = -1;
}

/* Pass 1 puts source rows at their stored place in a row-major file; pass 2 regroups it, unless
 * a group is a whole row: then that file is Q. */
static int dense_pass(dense_engine *e, cfs_err *err)
{
    size_t row = e->n_vars * e->esize;
    uint64_t block = e->opts.memory / 4 / (row ? row : 1);
    if (block == 0)
        block = 1;
    if (block > e->n_obs)
        block = e->n_obs ? e->n_obs : 1;
    if (e->n_obs == 0 || row == 0)
        return 0;
    bool regroup = e->group < e->n_vars;
    uint64_t matrix = e->n_obs * row;
    int rc = reserve_work(&e->opts, e->label, regroup ? 2 * matrix : matrix, err);
    if (rc < 0)
        return rc;
    e->result_bytes = matrix;
    unsigned char *buf = malloc(block * row), *tmp = regroup ? malloc(block * row) : NULL;
    const uint64_t *pos = cfs_perm_pos(e->perm);
    cfs_spill rows = {.fd = -1};
    if (!buf || (regroup && !tmp) || !pos)
        rc = cfs_err_oom(err);
    if (rc == 0 && regroup)
        rc = result_file(e->workdir, &e->fd, err);
    if (rc == 0)
        rc = cfs_spill_open(&rows, e->workdir, 1, err);
    for (uint64_t r0 = 0; rc == 0 && r0 < e->n_obs; r0 += block) {
        uint64_t n = e->n_obs - r0 < block ? e->n_obs - r0 : block;
        rc = read_rows(e, r0, n, buf, err);
        for (uint64_t r = 0; rc == 0 && r < n; r++)
            rc = cfs_pwrite_full(rows.fd, buf + r * row, row, pos[r0 + r] * row, err);
        cfs_progress_note(e->opts.progress, e->label, 0.7 * (double)(r0 + n) / (double)e->n_obs);
    }
    for (uint64_t r0 = 0; rc == 0 && regroup && r0 < e->n_obs; r0 += block) {
        uint64_t n = e->n_obs - r0 < block ? e->n_obs - r0 : block;
        rc = cfs_pread_full(rows.fd, buf, n * row, r0 * row, err);
        if (rc == 0)
            rc = scatter_rows(e, buf, r0, n, tmp, err);
    }
    if (regroup) {
        cfs_space_release(e->opts.space, matrix);
    } else if (rc == 0) {
        e->fd = rows.fd;
        rows.fd = -1;
    }
    cfs_spill_close(&rows);
    free(buf);
    free(tmp);
    if (rc < 0)
        release_q(e);
    return rc;
}

static int dense_run(cfs_job *job, cfs_err *err)
{
    dense_engine *e = (dense_engine *)job;
    cfs_progress_begin(e->opts.progress, e->label);
    int rc = dense_pass(e, err);
    cfs_progress_end(e->opts.progress, e->label);
    return rc == 0 ? hold_results(&e->opts, job, err) : memory_failure(&e->opts, err);
}

static void dense_drop(cfs_job *job)
{
    release_q((dense_engine *)job);
}

static void dense_destroy(cfs_job *job)
{
    dense_engine *e = (dense_engine *)job;
    cfs_space_unhold(e->opts.space, job);
    release_q(e);
    cfs_array_unref(e->src);
    cfs_perm_unref(e->perm);
    free(e->workdir);
    free(e->label);
    free(e);
}

/* The reader's part of dense_read, while the job is acquired. */
static int dense_copy(const dense_engine *e, const uint64_t *start, const uint64_t *count,
                      void *out, cfs_err *err)
{
    uint64_t g_end = start[1] + count[1];
    unsigned char *dst = out;
    for (uint64_t gg = start[1] / e->group; gg * e->group < g_end; gg++) {
        uint64_t w = group_width(e, gg), g0 = gg * e->group;
        uint64_t lo = start[1] > g0 ? start[1] - g0 : 0;
        uint64_t hi = g_end - g0 < w ? g_end - g0 : w;
        size_t wb = w * e->esize;
        unsigned char *blk = malloc((count[0] ? count[0] : 1) * wb);
        if (!blk)
            return cfs_err_oom(err);
        if (cfs_pread_full(e->fd, blk, count[0] * wb, group_offset(e, gg) + start[0] * wb,
                           err) < 0) {
            free(blk);
            return -1;
        }
        uint64_t out_col = g0 + lo - start[1];
        for (uint64_t r = 0; r < count[0]; r++)
            memcpy(dst + (r * count[1] + out_col) * e->esize, blk + r * wb + lo * e->esize,
                   (hi - lo) * e->esize);
        free(blk);
    }
    return 0;
}

static int dense_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                      void *out, cfs_err *err)
{
    dense_engine *e = arr->ctx;
    if (cfs_job_acquire(&e->job, err) < 0)
        return -1;
    int rc = dense_copy(e, start, count, out, err);
    cfs_job_done(&e->job);
    return rc;
}

static void dense_free_ctx(void *ctx)
{
    cfs_job_unref(&((dense_engine *)ctx)->job);
}

static const cfs_array_ops dense_ops = {dense_read, dense_free_ctx, NULL, NULL, NULL};

/* A dense engine over the 2-d array *slot, whose view replaces it; group 0: blocks of genes as
 * X's (cfs_hint_dense_block), else whole rows in a file of stored rows. */
static int dense_view(cfs_array **slot, cfs_perm *perm, const cfs_engine_opts *o,
                      const char *label, bool whole_rows, cfs_err *err)
{
    cfs_array *src = *slot;
    dense_engine *e = calloc(1, sizeof *e);
    if (!e)
        return cfs_err_oom(err);
    cfs_job_init(&e->job, dense_run, dense_destroy);
    e->job.drop = dense_drop;
    e->src = cfs_array_ref(src);
    e->perm = cfs_perm_ref(perm);
    e->opts = *o;
    e->workdir = strdup(o->workdir);
    e->label = strdup(label);
    e->n_obs = src->shape[0];
    e->n_vars = src->shape[1];
    e->esize = cfs_dtype_size(src->dtype);
    e->fd = -1;
    uint64_t rows = 0;
    if (whole_rows)
        e->group = e->n_vars ? e->n_vars : 1;
    else
        cfs_hint_dense_block(e->n_obs, e->n_vars, e->esize, &rows, &e->group);
    cfs_array *view = cfs_array_new(src->dtype, 2, src->shape, &dense_ops, e);
    if (!view || !e->workdir || !e->label) {
        if (view)
            cfs_array_unref(view);
        else
            cfs_job_unref(&e->job);
        return cfs_err_oom(err);
    }
    if (whole_rows) {
        cfs_hint_cells(view);
    } else {
        view->chunk_hint[0] = rows;
        view->chunk_hint[1] = e->group;
    }
    cfs_array_unref(*slot);
    *slot = view;
    return 0;
}

int cfs_gene_major_dense(cfs_elem *el, cfs_perm *perm, const cfs_engine_opts *o,
                         const char *label, cfs_err *err)
{
    return dense_view(&el->values, perm, o, label, false, err);
}

bool cfs_rows_file_wanted(const cfs_array *a, const cfs_engine_opts *o)
{
    if (!o || !o->workdir || a->ndim != 2 || a->dtype == CFS_STRING || a->dtype == CFS_COMPOUND)
        return false;
    uint64_t row = a->shape[1] * cfs_dtype_size(a->dtype), held = o->memory / CFS_ROWS_HELD_SHARE;
    /* Claimed shapes may be absurd (a damaged file): compared without overflowing. */
    return row && (a->shape[1] > UINT64_MAX / 16 || a->shape[0] > held / row);
}

int cfs_rows_file(cfs_array **slot, cfs_perm *perm, const cfs_engine_opts *o, const char *label,
                  cfs_err *err)
{
    return dense_view(slot, perm, o, label, true, err);
}
