/* Unit tests of the renderer pieces: metadata JSON, vlen-utf8 framing, chunk addressing,
 * codec round trips, ids and the catalog. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "../../cache/cache.h"
#include "../../formats/names.h"
#include "../../fuse/files.h"
#include "../../src/catalog.h"
#include "../../src/chunking.h"
#include "../../src/codec.h"
#include "../../src/gene_major.h"
#include "../../src/identity.h"
#include "../../src/priority.h"
#include "../../src/model.h"
#include "../../src/store.h"
#include "../../src/vlen.h"
#include "../../src/zmeta.h"
#include "unit.h"

int unit_passed, unit_failed;

static void test_zarray_json(void)
{
    uint64_t shape[2] = {5, 4}, chunks[2] = {5, 4};
    json_t *doc = cfs_zarray_doc(2, shape, chunks, json_string(cfs_zarr_dtype(CFS_FLOAT32)),
                                 cfs_zarr_fill_value(CFS_FLOAT32),
                                 cfs_codec_config(CFS_CODEC_BLOSC_LZ4), json_null());
    char *text = cfs_zmeta_dump(doc);
    /* Exactly what zarr-python 2 writes for the same array (json indent=4, sort_keys). */
    const char *expected =
        "{\n    \"chunks\": [\n        5,\n        4\n    ],\n    \"compressor\": {\n"
        "        \"blocksize\": 0,\n        \"clevel\": 5,\n        \"cname\": \"lz4\",\n"
        "        \"id\": \"blosc\",\n        \"shuffle\": 1\n    },\n    \"dtype\": \"<f4\",\n"
        "    \"fill_value\": 0.0,\n    \"filters\": null,\n    \"order\": \"C\",\n"
        "    \"shape\": [\n        5,\n        4\n    ],\n    \"zarr_format\": 2\n}";
    CHECK(text && strcmp(text, expected) == 0);
    if (text && strcmp(text, expected) != 0)
        fprintf(stderr, "got:\n%s\n", text);
    free(text);
    json_decref(doc);

    CHECK(strcmp(cfs_zarr_dtype(CFS_BOOL), "|b1") == 0);
    CHECK(strcmp(cfs_zarr_dtype(CFS_INT8), "|i1") == 0);
    CHECK(strcmp(cfs_zarr_dtype(CFS_UINT64), "<u8") == 0);
    CHECK(strcmp(cfs_zarr_dtype(CFS_FLOAT16), "<f2") == 0);
    CHECK(strcmp(cfs_zarr_dtype(CFS_STRING), "|O") == 0);
    json_t *fv = cfs_zarr_fill_value(CFS_STRING);
    CHECK(json_is_string(fv) && strcmp(json_string_value(fv), "") == 0);
    json_decref(fv);
    fv = cfs_zarr_fill_value(CFS_BOOL);
    CHECK(json_is_false(fv));
    json_decref(fv);

    /* Non-ASCII attribute text is escaped, as Python's ensure_ascii does. */
    json_t *attrs = json_pack("{s:s}", "name", "Zelltyp_\xc3\xa4");
    char *a = cfs_zmeta_dump(attrs);
    CHECK(a && strcasestr(a, "Zelltyp_\\u00e4") != NULL);
    free(a);
    json_decref(attrs);
}

static void test_vlen(void)
{
    char *strings[] = {"a", "", "\xe7\xbb\x86\xe8\x83\x9e", NULL};
    cfs_buf b = {0};
    cfs_err err;
    CHECK(cfs_vlen_encode(strings, 4, &b, &err) == 0);
    static const unsigned char expected[] = {4, 0, 0, 0, 1, 0, 0, 0, 'a', 0, 0, 0, 0,
                                             6, 0, 0, 0, 0xe7, 0xbb, 0x86, 0xe8, 0x83, 0x9e,
                                             0, 0, 0, 0};
    CHECK(b.len == sizeof expected && memcmp(b.data, expected, sizeof expected) == 0);
    char **back;
    size_t n;
    CHECK(cfs_vlen_decode(b.data, b.len, &back, &n, &err) == 0 && n == 4);
    if (n == 4) {
        CHECK(strcmp(back[0], "a") == 0 && strcmp(back[1], "") == 0);
        CHECK(strcmp(back[2], strings[2]) == 0 && strcmp(back[3], "") == 0);
        cfs_strings_free(back, n);
        free(back);
    }
    /* Invalid UTF-8 becomes U+FFFD, so decoders never fail on a chunk. */
    char *bad[] = {"x\xff" "y"};
    cfs_buf_reset(&b);
    CHECK(cfs_vlen_encode(bad, 1, &b, &err) == 0);
    CHECK(b.len == 4 + 4 + 5 && memcmp(b.data + 8, "x\xef\xbf\xbdy", 5) == 0);
    /* Truncated and lying buffers are rejected, not overrun. */
    CHECK(cfs_vlen_decode(b.data, b.len - 1, &back, &n, &err) < 0);
    unsigned char liar[8] = {0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0};
    CHECK(cfs_vlen_decode(liar, sizeof liar, &back, &n, &err) < 0);
    cfs_buf_free(&b);
}

static void test_chunk_addressing(void)
{
    uint64_t shape[2] = {10, 3}, chunks[2] = {4, 3}, grid[2];
    CHECK(cfs_chunk_grid(2, shape, chunks, grid) == 3 && grid[0] == 3 && grid[1] == 1);
    char key[64];
    cfs_chunk_key(2, grid, 2, key, sizeof key);
    CHECK(strcmp(key, "2.0") == 0);
    uint64_t idx;
    CHECK(cfs_chunk_parse_key(2, grid, "1.0", &idx) == 0 && idx == 1);
    CHECK(cfs_chunk_parse_key(2, grid, "3.0", &idx) < 0);
    CHECK(cfs_chunk_parse_key(2, grid, "01.0", &idx) < 0);
    CHECK(cfs_chunk_parse_key(2, grid, "1", &idx) < 0);
    CHECK(cfs_chunk_parse_key(2, grid, "1.0.0", &idx) < 0);
    cfs_chunk_key(0, grid, 0, key, sizeof key);
    CHECK(strcmp(key, "0") == 0);

    /* Small arrays are one chunk; big ones are cut along cells into bounded chunks. */
    uint64_t s1[1] = {1000}, c1[1];
    cfs_chunk_shape(1, s1, 4, c1);
    CHECK(c1[0] == 1000);
    uint64_t big[2] = {2000000, 50}, cb[2], gb[2];
    cfs_chunk_shape(2, big, 4, cb);
    CHECK(cb[1] == 50 && cb[0] * 50 * 4 <= (8u << 20) && cb[0] * 50 * 4 >= (256u << 10));
    CHECK(cfs_chunk_grid(2, big, cb, gb) <= CFS_CHUNK_MAX_COUNT);
    uint64_t wide[2] = {100, 10000000}, cw[2];
    cfs_chunk_shape(2, wide, 8, cw);
    CHECK(cw[0] == 1 && cw[1] * 8 <= (8u << 20));
    uint64_t huge[1] = {UINT64_C(1) << 40}, ch[1], gh[1];
    cfs_chunk_shape(1, huge, 1, ch);
    CHECK(cfs_chunk_grid(1, huge, ch, gh) <= CFS_CHUNK_MAX_COUNT);
    uint64_t empty[1] = {0}, ce[1], ge[1];
    cfs_chunk_shape(1, empty, 4, ce);
    CHECK(ce[0] == 1 && cfs_chunk_grid(1, empty, ce, ge) == 0);
}

static void test_codecs(void)
{
    enum { N = 100000 };
    int32_t *values = malloc(N * sizeof *values);
    for (int i = 0; i < N; i++)
        values[i] = i / 7;
    cfs_codec_id ids[] = {CFS_CODEC_BLOSC_LZ4, CFS_CODEC_ZSTD, CFS_CODEC_ZLIB, CFS_CODEC_GZIP,
                          CFS_CODEC_NONE};
    for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++) {
        cfs_buf enc = {0}, dec = {0}, again = {0};
        cfs_err err;
        CHECK(cfs_codec_encode(ids[k], 4, values, N * 4, &enc, &err) == 0);
        CHECK(cfs_codec_decode(ids[k], enc.data, enc.len, &dec, &err) == 0);
        CHECK(dec.len == N * 4 && memcmp(dec.data, values, N * 4) == 0);
        /* Same input, same bytes: stores are reproducible. */
        CHECK(cfs_codec_encode(ids[k], 4, values, N * 4, &again, &err) == 0);
        CHECK(again.len == enc.len && memcmp(again.data, enc.data, enc.len) == 0);
        if (ids[k] != CFS_CODEC_NONE)
            CHECK(enc.len < N * 4 / 4);
        cfs_buf_free(&enc);
        cfs_buf_free(&dec);
        cfs_buf_free(&again);
    }
    cfs_buf enc = {0};
    cfs_err err;
    cfs_codec_encode(CFS_CODEC_GZIP, 1, "abc", 3, &enc, &err);
    CHECK(enc.len > 10 && enc.data[0] == 0x1f && enc.data[1] == 0x8b);
    CHECK(enc.data[4] == 0 && enc.data[5] == 0 && enc.data[6] == 0 && enc.data[7] == 0);
    cfs_buf_free(&enc);
    cfs_codec_id id;
    CHECK(cfs_codec_parse("zstd", &id) == 0 && id == CFS_CODEC_ZSTD);
    CHECK(cfs_codec_parse("snappy", &id) < 0);
    cfs_buf junk = {0};
    CHECK(cfs_codec_decode(CFS_CODEC_BLOSC_LZ4, "garbage-garbage-garbage", 23, &junk, &err) < 0);
    cfs_buf_free(&junk);
    free(values);
}

static void test_ids(void)
{
    CHECK(cfs_id_valid("pbmc"));
    CHECK(cfs_id_valid("a.b_c-1"));
    CHECK(!cfs_id_valid(""));
    CHECK(!cfs_id_valid("_x"));
    CHECK(!cfs_id_valid("x."));
    CHECK(!cfs_id_valid("a b"));
    char *id = cfs_id_from_name("Zelltyp \xc3\xa4 atlas");
    CHECK(strcmp(id, "Zelltyp___atlas") == 0);
    free(id);
    id = cfs_id_from_name("__.x.");
    CHECK(strcmp(id, "x") == 0);
    free(id);
    id = cfs_id_from_name("\xe7\xbb\x86");
    CHECK(strcmp(id, "dataset") == 0);
    free(id);
    char *stem = cfs_source_stem("/data/pbmc.h5ad");
    CHECK(strcmp(stem, "pbmc") == 0);
    free(stem);
    stem = cfs_source_stem("/data/run1/outs/");
    CHECK(strcmp(stem, "run1") == 0);
    free(stem);
    stem = cfs_source_stem("run/outs/per_sample_outs/s1/count");
    CHECK(strcmp(stem, "s1") == 0);
    free(stem);
    stem = cfs_source_stem("a.b.H5AD");
    CHECK(strcmp(stem, "a.b") == 0);
    free(stem);

    char *ids[3] = {strdup("a"), strdup("a"), strdup("a-2")};
    bool clashed[3];
    CHECK(cfs_catalog_distinct_ids(ids, 3, clashed) == 0);
    CHECK(strcmp(ids[0], "a") == 0 && strcmp(ids[1], "a-3") == 0 && strcmp(ids[2], "a-2") == 0);
    CHECK(!clashed[0] && clashed[1] && !clashed[2]);
    char *json = cfs_catalog_json(ids, 3);
    CHECK(json && strstr(json, "\"default\": \"a\"") && strstr(json, "\"path\": \"a-3.zarr/\""));
    CHECK(json && strstr(json, "a-2.zarr/") < strstr(json, "a-3.zarr/"));
    free(json);
    for (int i = 0; i < 3; i++)
        free(ids[i]);
}

/* A 2-d in-memory array rendered by the store: edge chunks are padded with the fill value. */
static void test_store_chunks(void)
{
    enum { ROWS = 3, COLS = 2 };
    int16_t *data = malloc(ROWS * COLS * sizeof *data);
    for (int i = 0; i < ROWS * COLS; i++)
        data[i] = (int16_t)(i + 1);
    uint64_t shape[2] = {ROWS, COLS};
    cfs_elem *root = cfs_elem_new(CFS_EL_ANNDATA, NULL);
    cfs_elem *arr = cfs_elem_new(CFS_EL_ARRAY, "m");
    arr->values = cfs_array_from_memory(CFS_INT16, 2, shape, data);
    cfs_elem_add(root, arr);
    cfs_dataset ds = {.root = root};
    cfs_store_opts opts = {CFS_CODEC_NONE};
    cfs_err err;
    cfs_store *st = cfs_store_new(&ds, &opts, &err);
    CHECK(st && st->nnodes == 2);
    if (st && st->nnodes == 2) {
        cfs_store_node *n = &st->nodes[1];
        CHECK(strcmp(n->path, "m") == 0 && n->nchunks == 1);
        /* Force a grid with an overhanging edge chunk. */
        n->chunks[0] = 2;
        n->nchunks = cfs_chunk_grid(2, n->shape, n->chunks, n->grid);
        CHECK(n->nchunks == 2);
        cfs_buf b = {0};
        CHECK(cfs_store_chunk(st, n, 1, &b, &err) == 0);
        int16_t expect[4] = {5, 6, 0, 0};
        CHECK(b.len == sizeof expect && memcmp(b.data, expect, sizeof expect) == 0);
        cfs_buf_free(&b);
        char *zm = cfs_store_zmetadata(st);
        CHECK(zm && strstr(zm, "\"m/.zarray\"") && strstr(zm, "\"m/.zattrs\"") &&
              strstr(zm, "\".zgroup\"") && strstr(zm, "\"zarr_consolidated_format\": 1"));
        free(zm);
    }
    cfs_store_free(st);
    cfs_elem_free(root);
}

static void test_priority(void)
{
    /* splitmix64's published first output for state 0 (x + golden gamma). */
    CHECK(cfs_splitmix64(0) == UINT64_C(0xE220A8397B1DCDAF));
    uint64_t *order = cfs_priority_order(5000, 7);
    uint64_t prev_key = 0;
    int sorted = 1, perm = 1;
    unsigned char seen[5000] = {0};
    uint64_t s = cfs_splitmix64(7);
    for (uint64_t j = 0; j < 5000; j++) {
        uint64_t key = cfs_splitmix64(s ^ order[j]);
        if (j && key < prev_key)
            sorted = 0;
        prev_key = key;
        if (order[j] >= 5000 || seen[order[j]]++)
            perm = 0;
    }
    CHECK(sorted && perm);
    free(order);
    uint64_t levels[32];
    CHECK(cfs_priority_levels(1, levels, 32) == 1 && levels[0] == 1);
    CHECK(cfs_priority_levels(1024, levels, 32) == 1 && levels[0] == 1024);
    CHECK(cfs_priority_levels(1025, levels, 32) == 2 && levels[0] == 1024 && levels[1] == 1025);
    CHECK(cfs_priority_levels(100000, levels, 32) == 5 && levels[3] == 65536 &&
          levels[4] == 100000);
}

/* A 4 x 3 csr through the gene-major engine with a tiny budget: csc, rows permuted, sorted. */
static void test_gene_major_sparse(void)
{
    enum { N = 4, G = 3, NNZ = 6 };
    /* rows: 0:[g0=1,g2=2] 1:[g1=3] 2:[g0=4,g1=5] 3:[g2=6] */
    float data[NNZ] = {1, 2, 3, 4, 5, 6};
    int32_t indices[NNZ] = {0, 2, 1, 0, 1, 2};
    int64_t indptr[N + 1] = {0, 2, 3, 5, 6};
    uint64_t nnz = NNZ, np1 = N + 1;
    cfs_elem *el = cfs_elem_new(CFS_EL_SPARSE, "X");
    el->csr = true;
    el->sparse_shape[0] = N;
    el->sparse_shape[1] = G;
    void *d = malloc(sizeof data), *i = malloc(sizeof indices), *p = malloc(sizeof indptr);
    memcpy(d, data, sizeof data);
    memcpy(i, indices, sizeof indices);
    memcpy(p, indptr, sizeof indptr);
    el->values = cfs_array_from_memory(CFS_FLOAT32, 1, &nnz, d);
    el->aux = cfs_array_from_memory(CFS_INT32, 1, &nnz, i);
    el->indptr = cfs_array_from_memory(CFS_INT64, 1, &np1, p);
    cfs_perm *perm = cfs_perm_new(N, 0);
    cfs_engine_opts o = {4u << 20, "/tmp", NULL, NULL};
    cfs_err err;
    CHECK(cfs_gene_major_sparse(el, perm, &o, "X", &err) == 0);
    CHECK(!el->csr && el->indptr->dtype == CFS_INT64 && el->aux->dtype == CFS_INT32);
    int64_t optr[G + 1];
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
        for (int64_t k = optr[g]; k < optr[g + 1]; k++) {
            CHECK(k == optr[g] || orow[k] > orow[k - 1]);
            CHECK(dense[perm->order[orow[k]]][g] == oval[k]);
        }
    cfs_perm_unref(perm);
    cfs_elem_free(el);
}

/* Duplicate names get anndata's var_names_make_unique suffixes (checked against anndata). */
static void test_unique_names(void)
{
    const char *in[] = {"a", "a", "b", "a-1", "a", "b"};
    const char *want[] = {"a", "a-2", "b", "a-1", "a-3", "b-1"};
    char *names[6];
    for (int i = 0; i < 6; i++)
        names[i] = strdup(in[i]);
    size_t changed;
    CHECK(cfs_names_make_unique(names, 6, &changed) == 0 && changed == 3);
    for (int i = 0; i < 6; i++) {
        CHECK(strcmp(names[i], want[i]) == 0);
        free(names[i]);
    }
}

/* Starts n (at most 16) threads of fn(arg) at once and joins them: 1 if every one returned
 * non-NULL. */
static int all_succeed(int n, void *(*fn)(void *), void *arg)
{
    pthread_t t[16];
    int started = 0, ok = 1;
    for (; started < n && started < 16; started++)
        if (pthread_create(&t[started], NULL, fn, arg) != 0)
            break;
    for (int i = 0; i < started; i++) {
        void *r = NULL;
        pthread_join(t[i], &r);
        ok &= r != NULL;
    }
    return ok && started == n;
}

typedef struct producer {
    pthread_mutex_t lock;
    int calls;
    size_t size;
    char fill;
} producer;

static int produce(void *ctx, cfs_buf *out, cfs_err *err)
{
    producer *p = ctx;
    pthread_mutex_lock(&p->lock);
    p->calls++;
    pthread_mutex_unlock(&p->lock);
    usleep(20000); /* long enough for concurrent readers to pile up */
    if (cfs_buf_reserve(out, p->size) < 0)
        return cfs_err_set(err, "out of memory");
    memset(out->data + out->len, p->fill, p->size);
    out->len += p->size;
    return 0;
}

typedef struct reader_arg {
    cfs_cache *cache;
    producer *prod;
} reader_arg;

static void *reader(void *arg)
{
    reader_arg *r = arg;
    cfs_buf b = {0};
    cfs_err err;
    int ok = cfs_cache_get(r->cache, "same", 4, produce, r->prod, &b, &err) == 0 &&
             b.len == r->prod->size && b.data[0] == r->prod->fill;
    cfs_buf_free(&b);
    return ok ? arg : NULL;
}

static void test_cache(void)
{
    char dir[] = "/tmp/cfs-unit-cache-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    cfs_err err;
    cfs_cache *c = cfs_cache_open(dir, 10000, &err);
    CHECK(c != NULL);
    if (!c)
        return;
    producer p = {PTHREAD_MUTEX_INITIALIZER, 0, 3000, 'a'};
    cfs_buf b = {0};
    CHECK(cfs_cache_get(c, "k1", 2, produce, &p, &b, &err) == 0 && b.len == 3000);
    cfs_buf_reset(&b);
    CHECK(cfs_cache_get(c, "k1", 2, produce, &p, &b, &err) == 0 && b.len == 3000 && p.calls == 1);
    CHECK(cfs_cache_size(c, "k1", 2) == 3000 && cfs_cache_size(c, "nope", 4) == -1);
    /* The bound holds: four 3000-byte entries cannot all stay in 10000 bytes. */
    for (int i = 2; i <= 4; i++) {
        char key[8];
        snprintf(key, sizeof key, "k%d", i);
        cfs_buf_reset(&b);
        CHECK(cfs_cache_get(c, key, strlen(key), produce, &p, &b, &err) == 0);
    }
    cfs_cache_stats st;
    cfs_cache_stats_get(c, &st);
    CHECK(st.bytes <= 10000 && st.evicted == 1 && cfs_cache_size(c, "k1", 2) == -1);
    /* Single flight: 16 concurrent readers of a missing entry cause one production. */
    producer q = {PTHREAD_MUTEX_INITIALIZER, 0, 100, 'z'};
    reader_arg shared = {c, &q};
    CHECK(all_succeed(16, reader, &shared) && q.calls == 1);
    cfs_cache_close(c);
    /* Persistent, and crash leftovers are dropped at open: a stray temporary and an entry file
     * whose index row never committed. */
    char stray[256];
    snprintf(stray, sizeof stray, "%s/tmp-1-1", dir);
    FILE *f = fopen(stray, "w");
    if (f)
        fclose(f);
    snprintf(stray, sizeof stray, "%s/999999", dir);
    f = fopen(stray, "w");
    if (f)
        fclose(f);
    c = cfs_cache_open(dir, 10000, &err);
    CHECK(c != NULL);
    if (!c)
        return;
    struct stat sb;
    CHECK(stat(stray, &sb) < 0);
    cfs_buf_reset(&b);
    p.calls = 0;
    CHECK(cfs_cache_get(c, "k4", 2, produce, &p, &b, &err) == 0 && p.calls == 0 && b.len == 3000);
    /* An entry larger than the bound is served but not kept. */
    producer big = {PTHREAD_MUTEX_INITIALIZER, 0, 20000, 'b'};
    cfs_buf_reset(&b);
    CHECK(cfs_cache_get(c, "big", 3, produce, &big, &b, &err) == 0 && b.len == 20000);
    CHECK(cfs_cache_size(c, "big", 3) == -1);
    cfs_cache_close(c);
    cfs_buf_free(&b);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* fuse/files.h: the loader writes the inode number as bytes, counts its calls and fails for
 * inode 13. */
typedef struct counting_loader {
    pthread_mutex_t lock;
    int calls;
} counting_loader;

static int load_ino(void *ctx, uint64_t ino, cfs_buf *out, cfs_err *err)
{
    counting_loader *l = ctx;
    pthread_mutex_lock(&l->lock);
    l->calls++;
    pthread_mutex_unlock(&l->lock);
    usleep(10000); /* concurrent pieces pile up meanwhile */
    if (ino == 13)
        return cfs_err_set(err, "unlucky");
    char text[32];
    int n = snprintf(text, sizeof text, "file %llu", (unsigned long long)ino);
    return cfs_buf_append(out, text, (size_t)n) < 0 ? cfs_err_set(err, "out of memory") : 0;
}

static void *read_piece(void *files)
{
    cfs_err err;
    cfs_file_version v = {7, 6, {1, 0}};
    cfs_file *f = cfs_files_get(files, &v, &err);
    int ok = f && cfs_file_bytes(f)->len == 6 && memcmp(cfs_file_bytes(f)->data, "file 7", 6) == 0;
    if (f)
        cfs_files_put(files, f, false);
    return ok ? files : NULL;
}

static int loads_of(cfs_files *files, counting_loader *l, uint64_t ino, struct timespec mtime,
                    bool reached_end)
{
    int before = l->calls;
    cfs_err err;
    cfs_file_version v = {ino, 6, mtime};
    cfs_file *f = cfs_files_get(files, &v, &err);
    if (f)
        cfs_files_put(files, f, reached_end);
    return f ? l->calls - before : -1;
}

static void test_files(void)
{
    counting_loader l = {PTHREAD_MUTEX_INITIALIZER, 0};
    cfs_files *files = cfs_files_new(2, load_ino, &l);
    CHECK(files != NULL);
    if (!files)
        return;
    /* Single flight: 8 pieces of one file asked for at once cause one load. */
    CHECK(all_succeed(8, read_piece, files) && l.calls == 1);
    struct timespec t1 = {1, 0}, t2 = {2, 0};
    CHECK(loads_of(files, &l, 7, t1, false) == 0);
    /* Another version of the same inode (datasets.json after a change) is never served old. */
    CHECK(loads_of(files, &l, 7, t2, false) == 1);
    /* Two slots: a third file pushes out the least recently used (7 at t1). */
    CHECK(loads_of(files, &l, 8, t1, false) == 1);
    CHECK(loads_of(files, &l, 7, t2, false) == 0 && loads_of(files, &l, 7, t1, false) == 1);
    /* The piece with the last byte lets the bytes go: the kernel has the whole file. */
    CHECK(loads_of(files, &l, 7, t1, true) == 0 && loads_of(files, &l, 7, t1, false) == 1);
    /* A failed load keeps nothing: the next reader tries again. */
    cfs_err err;
    cfs_file_version bad = {13, 6, t1};
    CHECK(cfs_files_get(files, &bad, &err) == NULL && strcmp(err.msg, "unlucky") == 0);
    CHECK(loads_of(files, &l, 13, t1, false) == -1 && l.calls == 7);
    cfs_files_free(files);
}

int main(void)
{
    test_cache();
    test_files();
    test_unique_names();
    test_priority();
    test_gene_major_sparse();
    test_zarray_json();
    test_vlen();
    test_chunk_addressing();
    test_codecs();
    test_ids();
    test_store_chunks();
    printf("unit: %d passed, %d failed\n", unit_passed, unit_failed);
    return unit_failed != 0;
}
