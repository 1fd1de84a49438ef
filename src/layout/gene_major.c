#include "gene_major.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chunk_hint.h"
#include "parallel.h"
#include "job.h"
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
    int data_fd, index_fd;                  /* nnz values / nnz row indices */
    uint64_t result_bytes;                  /* held in opts.space while the results live */
    /* Under the job's lock, while the pass runs: what readers may read already (§7). */
    bool indptr_ready;                      /* out_indptr is complete (the spill has ended) */
    uint64_t width;                         /* genes per bucket */
    cfs_schedule sched;                     /* the buckets: the ones readers wait for go first */
} sparse_engine;

/* One spilled nonzero: stored row, gene (relative to its bucket), then the value bytes. */
typedef struct rec_layout {
    size_t vsize, size;
} rec_layout;

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
} buckets;

/* One sorter's workspace, kept across buckets: fresh pages for every bucket cost faults. */
typedef struct sort_ws {
    unsigned char *a, *tmp;
    uint64_t cap;           /* records a and tmp hold */
} sort_ws;

static int workspace(sort_ws *ws, uint64_t n, size_t rs)
{
    if (n <= ws->cap && ws->a)
        return 0;
    free(ws->a);
    free(ws->tmp);
    ws->a = malloc((n ? n : 1) * rs);
    ws->tmp = malloc((n ? n : 1) * rs);
    ws->cap = n;
    return ws->a && ws->tmp ? 0 : -1;
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

/* Appends one record to its bucket's buffer: the hot path of the pass, so it writes in place. */
static int spill_record(cfs_spill *sp, uint32_t j, uint32_t g, const unsigned char *v,
                        size_t vsize, cfs_err *err)
{
    size_t rs = 8 + vsize;
    if (sp->len + rs > sp->cap && cfs_spill_flush(sp, err) < 0)
        return -1;
    unsigned char *dst = sp->buf + sp->len;
    memcpy(dst, &j, 4);
    memcpy(dst + 4, &g, 4);
    if (vsize == 4)
        memcpy(dst + 8, v, 4);
    else
        memcpy(dst + 8, v, vsize);
    sp->len += rs;
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
 * csc one) it has reached, and each gene's bucket. */
typedef struct spill_cursor {
    const int64_t *ptr;
    uint64_t major_n, major;
    const uint64_t *pos;        /* source row -> stored row */
    const uint32_t *bucket_of;  /* gene -> bucket */
} spill_cursor;

/* Spills entries [k0, k0 + n) (their minor indices widened, their values in vbuf), one major
 * at a time: within it the cell (csr) or the gene (csc) is fixed. */
static int spill_block(sparse_engine *e, buckets *b, const rec_layout *rl, spill_cursor *cur,
                       uint64_t k0, uint64_t n, const int64_t *minor, const unsigned char *vbuf,
                       cfs_err *err)
{
    uint64_t k = 0;
    while (k < n) {
        while (cur->major < cur->major_n && (uint64_t)cur->ptr[cur->major + 1] <= k0 + k)
            cur->major++;
        if (cur->major == cur->major_n)     /* past the last major's end: indptr is wrong */
            return cfs_err_set(err, "entry %llu has an index out of range",
                               (unsigned long long)(k0 + k));
        uint64_t end = (uint64_t)cur->ptr[cur->major + 1] - k0;
        if (end > n)
            end = n;
        for (; k < end; k++) {
            uint64_t cell = e->src_csr ? cur->major : (uint64_t)minor[k];
            uint64_t gene = e->src_csr ? (uint64_t)minor[k] : cur->major;
            if (minor[k] < 0 || cell >= e->n_obs || gene >= e->n_vars)
                return cfs_err_set(err, "entry %llu has an index out of range",
                                   (unsigned long long)(k0 + k));
            uint32_t bucket = cur->bucket_of[gene];
            b->counts[gene]++;
            if (spill_record(&b->spill[bucket], (uint32_t)cur->pos[cell],
                             (uint32_t)(gene - bucket * b->width), vbuf + k * rl->vsize,
                             rl->vsize, err) < 0)
                return -1;
        }
    }
    return 0;
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
    /* Two blocks in flight: each gets half of what one block had before. */
    uint64_t block = e->opts.memory / 16 / (isize + rl->vsize + 8);
    if (block < 4096)
        block = 4096;
    void *ibuf[2] = {malloc(block * isize), malloc(block * isize)};
    void *vbuf[2] = {malloc(block * rl->vsize), malloc(block * rl->vsize)};
    int64_t *minor = malloc(block * sizeof *minor);
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
                 : spill_block(e, b, rl, &cur, now.k0, now.n, minor, now.vbuf, err);
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
    return rc;
}

/* One stable scatter pass keyed by one digit of the stored row; the record size is a
 * compile-time constant in the common cases so the copy is a move, not a call. */
#define MOVE_LOOP(RS)                                                                      \
    for (uint64_t i = 0; i < n; i++) {                                                     \
        uint32_t j;                                                                        \
        memcpy(&j, a + i * (RS), 4);                                                       \
        memcpy(tmp + count[(j >> shift) & mask]++ * (RS), a + i * (RS), (RS));             \
    }

static void move_records(const unsigned char *a, unsigned char *tmp, uint64_t n, size_t rs,
                         size_t *count, int shift, uint32_t mask)
{
    switch (rs) {
    case 12: MOVE_LOOP(12) break;
    case 16: MOVE_LOOP(16) break;
    case 10: MOVE_LOOP(10) break;
    case 9: MOVE_LOOP(9) break;
    default: MOVE_LOOP(rs) break;
    }
}

/*
 * Sorts n records by stored row (LSD radix, stable), then scatters them by gene (counting,
 * stable) straight into the result layout: each gene's row indices ascending, its values
 * alongside. tmp (n records) is reused for the scattered indices and values, which fit since
 * an index takes at most the 8 bytes of a record's row and gene.
 */
static int sort_and_write(sparse_engine *e, unsigned char *a, unsigned char *tmp, uint64_t n,
                          size_t rs, const uint64_t *gene_counts, uint64_t ngenes,
                          uint64_t *gene_start, uint64_t first, cfs_err *err)
{
    /* Digits as narrow as the row count allows: fewer buckets per pass scatter into fewer
     * cache lines. An even number of passes leaves the records back in a. */
    int bits = 1;
    while (bits < 32 && (UINT64_C(1) << bits) < e->n_obs)
        bits++;
    int passes = (bits + 10) / 11;
    if (passes % 2)
        passes++;
    int digit = (bits + passes - 1) / passes;
    size_t count[1 << 16];
    uint32_t mask = (uint32_t)((1u << digit) - 1);
    for (int p = 0, shift = 0; p < passes; p++, shift += digit) {
        memset(count, 0, ((size_t)mask + 1) * sizeof *count);
        for (uint64_t i = 0; i < n; i++) {
            uint32_t j;
            memcpy(&j, a + i * rs, 4);
            count[(j >> shift) & mask]++;
        }
        size_t sum = 0;
        for (size_t d = 0; d <= mask; d++) {
            size_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        move_records(a, tmp, n, rs, count, shift, mask);
        unsigned char *t = a;
        a = tmp;
        tmp = t;
    }
    uint64_t sum = 0;
    for (uint64_t g = 0; g < ngenes; g++) {
        gene_start[g] = sum;
        sum += gene_counts[g];
    }
    size_t vsize = rs - 8, isize = cfs_dtype_size(e->out_index);
    unsigned char *ind = tmp, *val = tmp + n * isize;
    bool narrow = e->out_index == CFS_INT32;
    for (uint64_t i = 0; i < n; i++) {
        const unsigned char *r = a + i * rs;
        uint32_t j, g;
        memcpy(&j, r, 4);
        memcpy(&g, r + 4, 4);
        uint64_t k = gene_start[g]++;
        if (narrow) {
            memcpy(ind + k * 4, &j, 4);
        } else {
            int64_t wide = j;
            memcpy(ind + k * 8, &wide, 8);
        }
        if (vsize == 4)
            memcpy(val + k * 4, r + 8, 4);
        else
            memcpy(val + k * vsize, r + 8, vsize);
    }
    if (cfs_pwrite_full(e->index_fd, ind, n * isize, first * isize, err) < 0 ||
        cfs_pwrite_full(e->data_fd, val, n * vsize, first * vsize, err) < 0)
        return -1;
    return 0;
}

/*
 * Processes genes [g0, g1) of bucket b: reads the bucket's spill file, keeps those genes'
 * records (all of them when the range is the whole bucket), sorts and writes them.
 */
static int emit_range(sparse_engine *e, const buckets *bk, sort_ws *ws, size_t b, uint64_t g0,
                      uint64_t g1, size_t rs, uint64_t memory, cfs_err *err)
{
    uint64_t base = b * bk->width, n = 0;
    for (uint64_t g = g0; g < g1; g++)
        n += bk->counts[g];
    if (workspace(ws, n, rs) < 0)
        return cfs_err_setc(err, CFS_ENOMEM, "out of memory sorting a bucket");
    unsigned char *a = ws->a, *tmp = ws->tmp;
    uint64_t *start = malloc((g1 - g0 + 1) * sizeof *start);
    size_t chunk = (size_t)(memory / 4 / rs);
    if (chunk < 4096)
        chunk = 4096;
    if (chunk > (1u << 20))
        chunk = 1u << 20;
    unsigned char *io = malloc(chunk * rs);
    int rc = a && tmp && start && io ? 0 : cfs_err_setc(err, CFS_ENOMEM,
                                                        "out of memory sorting a bucket");
    uint64_t have = 0, total = bk->spill[b].size / rs;
    if (rc == 0 && total == n && g0 == base) {
        /* The whole bucket: its records are read as they are, genes already bucket-local. */
        rc = cfs_pread_full(bk->spill[b].fd, a, n * rs, 0, err);
        have = n;
        total = 0;
    }
    for (uint64_t r0 = 0; rc == 0 && r0 < total; r0 += chunk) {
        uint64_t m = total - r0 < chunk ? total - r0 : chunk;
        rc = cfs_pread_full(bk->spill[b].fd, io, m * rs, r0 * rs, err);
        for (uint64_t i = 0; rc == 0 && i < m; i++) {
            uint32_t g;
            memcpy(&g, io + i * rs + 4, 4);
            if (base + g < g0 || base + g >= g1)
                continue;
            /* Re-base the gene so sort_bucket's counting pass indexes from 0. */
            uint32_t local = (uint32_t)(base + g - g0);
            memcpy(a + have * rs, io + i * rs, rs);
            memcpy(a + have * rs + 4, &local, 4);
            have++;
        }
    }
    if (rc == 0)
        rc = sort_and_write(e, a, tmp, have, rs, bk->counts + g0, g1 - g0, start,
                            (uint64_t)e->out_indptr[g0], err);
    free(start);
    free(io);
    return rc;
}

/* Emits bucket b in gene sub-ranges that each fit this sorter's share of the budget. */
static int emit_bucket(sparse_engine *e, const buckets *bk, sort_ws *ws, size_t b, size_t rs,
                       uint64_t memory, cfs_err *err)
{
    uint64_t g0 = b * bk->width, end = g0 + bk->width < e->n_vars ? g0 + bk->width : e->n_vars;
    uint64_t fit = memory / (2 * rs + 8);
    while (g0 < end) {
        uint64_t g1 = g0, n = 0;
        /* At least one gene, even past the budget: a gene's rows cannot be split. */
        while (g1 < end && (g1 == g0 || n + bk->counts[g1] <= fit))
            n += bk->counts[g1++];
        if (emit_range(e, bk, ws, b, g0, g1, rs, memory, err) < 0)
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
    size_t rs;
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
                     : emit_bucket(e, p->bk, &ws, b, p->rs, e->opts.memory / SORTERS, &err);
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
    free(ws.a);
    free(ws.tmp);
    return NULL;
}

static int emit_all(sparse_engine *e, const buckets *bk, size_t rs, cfs_err *err)
{
    emit_pool pool = {.e = e, .bk = bk, .rs = rs};
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
    cfs_spill s;
    if (cfs_spill_open(&s, workdir, 1, err) < 0)
        return -1;
    *fd = s.fd;
    s.fd = -1;
    cfs_spill_close(&s);
    return 0;
}

/* The results go (a failed run's, or a finished job's to make room): a later run starts from
 * empty files. Under the job's lock, or with nobody else left. */
static void release_results(sparse_engine *e)
{
    cfs_space_release(e->opts.space, e->result_bytes);
    e->result_bytes = 0;
    if (e->data_fd >= 0)
        close(e->data_fd);
    if (e->index_fd >= 0)
        close(e->index_fd);
    e->data_fd = e->index_fd = -1;
    free(e->out_indptr);
    e->out_indptr = NULL;
    e->indptr_ready = false;
    cfs_schedule_free(&e->sched);
}

/* Bucket count: each bucket is sorted in one go (a sorter holds 2 records + 8 bytes each), and
 * there are enough of them that a reader waiting for one bucket waits for a small share of the
 * sorting (MIN_BUCKETS), unless that makes buckets smaller than MIN_BUCKET_BYTES of records. */
enum { MIN_BUCKETS = 64, MIN_BUCKET_BYTES = 64 << 10 };

static size_t bucket_count(const sparse_engine *e, const rec_layout *rl)
{
    uint64_t want = e->nnz * (2 * rl->size + 8) * SORTERS / (e->opts.memory ? e->opts.memory : 1) + 1;
    uint64_t small = e->nnz * rl->size / MIN_BUCKET_BYTES + 1;
    if (want < MIN_BUCKETS)
        want = small < MIN_BUCKETS ? small : MIN_BUCKETS;
    if (want > MAX_BUCKETS)
        want = MAX_BUCKETS;
    if (want > e->n_vars)
        want = e->n_vars ? e->n_vars : 1;
    return (size_t)want;
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
    rec_layout rl = {cfs_dtype_size(e->data->dtype), 8 + cfs_dtype_size(e->data->dtype)};
    buckets b = {0};
    b.n = bucket_count(e, &rl);
    b.width = (e->n_vars + b.n - 1) / b.n;
    if (b.width == 0)
        b.width = 1;
    uint64_t spill_bytes = e->nnz * rl.size;
    uint64_t result_bytes = e->nnz * (rl.vsize + cfs_dtype_size(e->out_index));
    int rc = reserve_work(&e->opts, e->label, spill_bytes + result_bytes, err);
    if (rc < 0)
        return rc;
    b.spill = calloc(b.n, sizeof *b.spill);
    b.counts = calloc(e->n_vars + 1, sizeof *b.counts);
    pthread_mutex_lock(&e->job.lock);
    e->result_bytes = result_bytes;
    e->width = b.width;
    if (cfs_schedule_init(&e->sched, b.n) < 0)
        rc = -1;
    pthread_mutex_unlock(&e->job.lock);
    e->out_indptr = malloc((e->n_vars + 1) * sizeof *e->out_indptr);
    if (rc < 0 || !b.spill || !b.counts || !e->out_indptr) {
        free(b.spill);
        free(b.counts);
        cfs_space_release(e->opts.space, spill_bytes);
        return cfs_err_oom(err);
    }
    size_t buffer = (size_t)(e->opts.memory / 8 / b.n);
    if (buffer > (1u << 20))
        buffer = 1u << 20;
    size_t opened = 0;
    for (; rc == 0 && opened < b.n; opened++)
        rc = cfs_spill_open(&b.spill[opened], e->workdir, buffer, err);
    if (rc == 0)
        rc = result_file(e->workdir, &e->index_fd, err);
    if (rc == 0)
        rc = result_file(e->workdir, &e->data_fd, err);
    if (rc == 0)
        rc = spill_source(e, &b, &rl, err);
    if (rc == 0)
        indptr_landed(e, &b);
    /* The spill buffers are no longer needed: their memory goes to the sorters. */
    for (size_t i = 0; i < opened; i++) {
        free(b.spill[i].buf);
        b.spill[i].buf = NULL;
    }
    if (rc == 0)
        rc = emit_all(e, &b, rl.size, err);
    for (size_t i = 0; i < opened; i++)
        cfs_spill_close(&b.spill[i]);
    cfs_space_release(e->opts.space, spill_bytes);
    free(b.spill);
    free(b.counts);
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

/* In the job's thread (cfs_job_acquire_part). */
static int sparse_run(cfs_job *job, cfs_err *err)
{
    sparse_engine *e = (sparse_engine *)job;
    cfs_progress_begin(e->opts.progress, e->label);
    int rc = sparse_pass(e, err);
    cfs_progress_end(e->opts.progress, e->label);
    if (rc < 0)
        return memory_failure(&e->opts, err);
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
    size_t esize = cfs_dtype_size(arr->dtype);
    int rc = 0;
    if (r->which == 2)
        for (uint64_t k = 0; k < count[0]; k++)
            cfs_int_set(arr->dtype, out, k, e->out_indptr[start[0] + k]);
    else
        rc = cfs_pread_full(r->which == 0 ? e->data_fd : e->index_fd, out, count[0] * esize,
                            start[0] * esize, err);
    cfs_job_done(&e->job);
    return rc;
}

static void result_free(void *ctx)
{
    sparse_result *r = ctx;
    cfs_job_unref(&r->engine->job);
    free(r);
}

static const cfs_array_ops result_ops = {result_read, result_free, NULL, NULL};

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
    e->data_fd = e->index_fd = -1;
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

static const cfs_array_ops dense_ops = {dense_read, dense_free_ctx, NULL, NULL};

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
