/* Unit tests of the renderer pieces: metadata JSON, vlen-utf8 framing, chunk addressing,
 * codec round trips, ids and the catalog. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "hdf5_util.h"
#include "h5_dormant.h"
#include "names.h"
#include "files.h"
#include "catalog.h"
#include "chunking.h"
#include "codec.h"
#include "gene_major.h"
#include "identity.h"
#include "permute.h"
#include "priority.h"
#include "sparse_index.h"
#include "model.h"
#include "store.h"
#include "utf8.h"
#include "vlen.h"
#include "zmeta.h"
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

static void fixture_path(char *buf, size_t len, const char *rel)
{
    const char *top = getenv("srcdir");
    snprintf(buf, len, "%s/tests/fixtures/%s", top ? top : ".", rel);
}

static int note_file(hid_t file, void *ctx)
{
    *(hid_t *)ctx = file;
    return 1;
}

static ssize_t open_files(void)
{
    cfs_h5_lock();
    ssize_t n = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_FILE);
    cfs_h5_unlock();
    return n;
}

static void test_utf8_valid(void)
{
    const unsigned char *u = (const unsigned char *)"cell_000123-AACGT";
    CHECK(cfs_utf8_valid(u, 17) && cfs_utf8_valid(u, 0));
    CHECK(cfs_utf8_valid((const unsigned char *)"barcode_\xe7\xbb\x86\xe8\x83\x9e!", 15));
    CHECK(!cfs_utf8_valid((const unsigned char *)"barcode_\xc0\xaf", 10));     /* overlong */
    CHECK(!cfs_utf8_valid((const unsigned char *)"\xed\xa0\x80", 3));           /* surrogate */
    CHECK(!cfs_utf8_valid((const unsigned char *)"abcdefghi\xe7\xbb", 11));     /* truncated */
    CHECK(!cfs_utf8_valid((const unsigned char *)"abcdefgh\xff" "abcdefgh", 17));  /* Latin-1 */
}

static void fixture_path(char *buf, size_t len, const char *rel);

/* Many strings, some bigger than a block: every one intact, freed as one. */
static void test_strpool(void)
{
    cfs_strpool *pool = cfs_strpool_new();
    char *first = pool ? cfs_strpool_dup(pool, "cell_0", 6) : NULL;
    int intact = first != NULL;
    char big[5000];
    memset(big, 'g', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    char *large = pool ? cfs_strpool_dup(pool, big, strlen(big)) : NULL;
    for (int i = 0; intact && i < 100000; i++) {
        char name[32];
        int len = snprintf(name, sizeof name, "cell_%d", i);
        char *s = cfs_strpool_dup(pool, name, (size_t)len);
        intact = s && strcmp(s, name) == 0;
    }
    CHECK(intact && strcmp(first, "cell_0") == 0 && large && strcmp(large, big) == 0);
    cfs_strpool_free(pool);
}

/* A consumer that only looks at strings gets the array's own where it keeps them, else strings
 * in its pool; a read still gets copies of its own. */
static void test_read_strings(void)
{
    char **data = malloc(3 * sizeof *data);
    data[0] = strdup("x");
    data[1] = strdup("yy");
    data[2] = strdup("zzz");
    uint64_t n = 3, start = 0;
    cfs_array *mem = cfs_array_from_memory(CFS_STRING, 1, &n, data);
    cfs_strpool *pool = cfs_strpool_new();
    const char *got[3];
    cfs_err err = {{0}};
    CHECK(cfs_array_read_strings(mem, &start, &n, got, pool, &err) == 0);
    CHECK(got[0] == data[0] && got[2] == data[2]);
    char *copies[3];
    CHECK(cfs_array_read(mem, &start, &n, copies, &err) == 0 && copies[1] != data[1] &&
          strcmp(copies[1], "yy") == 0);
    cfs_strings_free(copies, 3);
    cfs_perm *perm = cfs_perm_new(3, 0);
    cfs_array *view = perm ? cfs_perm_rows(mem, perm) : NULL;
    CHECK(view && cfs_array_read_strings(view, &start, &n, got, pool, &err) == 0);
    int permuted = view != NULL;
    for (uint64_t j = 0; permuted && j < 3; j++)
        permuted = got[j] == data[perm->order[j]];
    CHECK(permuted);
    cfs_array_unref(view);
    cfs_perm_unref(perm);
    cfs_array_unref(mem);
    cfs_strpool_free(pool);
}

/* An HDF5 string column read into a pool holds what a plain read copies out. */
static void test_h5_read_strings(void)
{
    char path[4096];
    fixture_path(path, sizeof path, "h5ad/nonascii.h5ad");
    cfs_dataset *ds = NULL;
    cfs_err err = {{0}};
    CHECK(cfs_format_open(path, &ds, &err) == 0);
    const cfs_elem *obs = ds ? cfs_elem_child(ds->root, "obs") : NULL;
    const cfs_array *index = obs && obs->index ? obs->index->values : NULL;
    CHECK(index && index->dtype == CFS_STRING && index->ndim == 1);
    if (!index) {
        cfs_dataset_free(ds);
        return;
    }
    uint64_t start = 0, n = index->shape[0];
    char **copies = calloc(n, sizeof *copies);
    const char **pooled = calloc(n, sizeof *pooled);
    cfs_strpool *pool = cfs_strpool_new();
    CHECK(cfs_array_read(index, &start, &n, copies, &err) == 0 &&
          cfs_array_read_strings(index, &start, &n, pooled, pool, &err) == 0);
    /* The fixture's names, as its generator writes them (make_h5ad_fixtures.py). */
    int same = n == 10;
    for (uint64_t i = 0; same && i < n; i++) {
        char want[32];
        snprintf(want, sizeof want, "\xe7\xbb\x86\xe8\x83\x9e_%llu", (unsigned long long)i);
        same = copies[i] && pooled[i] && strcmp(copies[i], want) == 0 &&
               strcmp(pooled[i], want) == 0;
    }
    CHECK(same);
    cfs_strings_free(copies, n);
    free(copies);
    free(pooled);
    cfs_strpool_free(pool);
    cfs_dataset_free(ds);
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

/* Every bidder of one detection sees the same HDF5 file, opened once; the registry's handle is
 * gone after the winner's open, whose file stays open through its datasets only. */
static void test_probe_shares_file(void)
{
    char path[4096];
    fixture_path(path, sizeof path, "h5ad/csr_f32.h5ad");
    cfs_probe_hdf5 h5 = CFS_PROBE_HDF5_INIT;
    cfs_probe_input in = {.path = path, .hdf5_offset = 0, .hdf5 = &h5};
    hid_t first = -1, second = -2;
    CHECK(cfs_h5_probe(&in, note_file, &first) == 1 && cfs_h5_probe(&in, note_file, &second) == 1);
    CHECK(first >= 0 && first == second && open_files() == 1);
    cfs_h5_probe_release(&h5);
    CHECK(open_files() == 0 && h5.file < 0);
    cfs_err err = {{0}};
    CHECK(cfs_format_detect(path, &err) != NULL && open_files() == 0);
    cfs_dataset *ds = NULL;
    CHECK(cfs_format_open(path, &ds, &err) == 0 && ds && open_files() == 0);
    CHECK(cfs_h5_awake_files() == 1);
    cfs_dataset_free(ds);
    CHECK(open_files() == 0 && cfs_h5_awake_files() == 0);
}

static void remove_folder(const char *dir);

/* The obs index of an opened h5ad, read whole into names[0..n). */
static int read_index(cfs_dataset *ds, char ***names, uint64_t *n, cfs_err *err)
{
    const cfs_elem *obs = cfs_elem_child(ds->root, "obs");
    const cfs_array *index = obs && obs->index ? obs->index->values : NULL;
    if (!index)
        return -1;
    uint64_t start = 0;
    *n = index->shape[0];
    *names = calloc(*n, sizeof **names);
    return *names ? cfs_array_read(index, &start, n, *names, err) : -1;
}

/* More sources than may stay open: the least recently used files close their datasets (and
 * so themselves); a read of one opens it again, the same inode even after it was renamed, and
 * reads what it read before. One replaced meanwhile fails its reads (it is never read from
 * the file now at its path). */
static void test_dormant_files(void)
{
    enum { N = CFS_H5_AWAKE_FILES + 4 };
    char dir[] = "/tmp/cfs-unit-dormant-XXXXXX", src[4096], other[4096], path[N][256];
    char cmd[10000];
    CHECK(mkdtemp(dir) != NULL);
    fixture_path(src, sizeof src, "h5ad/csr_f32.h5ad");
    fixture_path(other, sizeof other, "h5ad/dense_f32.h5ad");
    cfs_dataset *ds[N] = {0};
    cfs_err err = {{0}};
    int opened = 1;
    for (int i = 0; i < N && opened; i++) {
        snprintf(path[i], sizeof path[i], "%s/s%d.h5ad", dir, i);
        snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src, path[i]);
        opened = system(cmd) == 0 && cfs_format_open(path[i], &ds[i], &err) == 0;
    }
    CHECK(opened && cfs_h5_awake_files() == CFS_H5_AWAKE_FILES);
    /* s0 and s1 doze; s0 is replaced at its path, s1 renamed. */
    snprintf(cmd, sizeof cmd, "cp '%s' '%s.new' && mv '%s.new' '%s' && mv '%s' '%s.moved'",
             other, path[0], path[0], path[0], path[1], path[1]);
    CHECK(system(cmd) == 0);
    char **names = NULL, **again = NULL, **replaced = NULL;
    uint64_t n = 0, n2 = 0, n0 = 0;
    CHECK(ds[1] && read_index(ds[1], &names, &n, &err) == 0);
    CHECK(cfs_h5_awake_files() == CFS_H5_AWAKE_FILES);
    CHECK(ds[N - 1] && read_index(ds[N - 1], &again, &n2, &err) == 0 && n2 == n);
    int same = names && again;
    for (uint64_t k = 0; same && k < n; k++)
        same = names[k] && again[k] && strcmp(names[k], again[k]) == 0;
    CHECK(same);
    CHECK(ds[0] && read_index(ds[0], &replaced, &n0, &err) < 0 &&
          strstr(err.msg, "removed or replaced") != NULL);
    if (names)
        cfs_strings_free(names, n);
    if (again)
        cfs_strings_free(again, n2);
    free(names);
    free(again);
    free(replaced);
    for (int i = 0; i < N; i++)
        cfs_dataset_free(ds[i]);
    CHECK(cfs_h5_awake_files() == 0);
    remove_folder(dir);
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

/* A cache of 10000 bytes in a new folder named from the template dir. */
static cfs_cache *temp_cache(char *dir, cfs_err *err)
{
    CHECK(mkdtemp(dir) != NULL);
    cfs_cache *c = cfs_cache_open(dir, 10000, err);
    CHECK(c != NULL);
    return c;
}

static void remove_folder(const char *dir)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

static void test_cache(void)
{
    char dir[] = "/tmp/cfs-unit-cache-XXXXXX";
    cfs_err err;
    cfs_cache *c = temp_cache(dir, &err);
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
        char key[16];
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
    remove_folder(dir);
}

/* Work files count against the bound: a reservation evicts entries, entries then fit only
 * beside it, and what cannot fit even in an empty cache is refused without evicting. */
static void test_cache_work(void)
{
    char dir[] = "/tmp/cfs-unit-cachework-XXXXXX";
    cfs_err err;
    cfs_cache *c = temp_cache(dir, &err);
    if (!c)
        return;
    producer p = {PTHREAD_MUTEX_INITIALIZER, 0, 3000, 'w'};
    cfs_buf b = {0};
    for (int i = 0; i < 3; i++) {
        char key[16];
        snprintf(key, sizeof key, "w%d", i);
        cfs_buf_reset(&b);
        CHECK(cfs_cache_get(c, key, strlen(key), produce, &p, &b, &err) == 0);
    }
    CHECK(cfs_cache_reserve(c, 20000, &err) == CFS_CACHE_NEVER_FITS);
    cfs_cache_stats st;
    cfs_cache_stats_get(c, &st);
    CHECK(st.entries == 3 && st.evicted == 0 && st.work_bytes == 0);
    CHECK(cfs_cache_reserve(c, 6000, &err) == 0);
    cfs_cache_stats_get(c, &st);
    CHECK(st.work_bytes == 6000 && st.bytes + st.work_bytes <= 10000 && st.evicted == 2);
    cfs_buf_reset(&b);
    CHECK(cfs_cache_get(c, "w9", 2, produce, &p, &b, &err) == 0);
    cfs_cache_stats_get(c, &st);
    CHECK(st.bytes + st.work_bytes <= 10000 && cfs_cache_size(c, "w9", 2) == 3000);
    CHECK(cfs_cache_reserve(c, 5000, &err) < 0);
    cfs_cache_release(c, 6000);
    CHECK(cfs_cache_reserve(c, 5000, &err) == 0);
    cfs_cache_release(c, 5000);
    cfs_cache_stats_get(c, &st);
    CHECK(st.work_bytes == 0);
    cfs_cache_close(c);
    cfs_buf_free(&b);
    remove_folder(dir);
}

/* A bound that counts what is held against a limit the test moves. */
typedef struct counting_bound {
    uint64_t held, limit;
    uint64_t whole;             /* bytes over this never fit; 0: no such limit */
} counting_bound;

static int bound_reserve(void *ctx, uint64_t bytes, cfs_err *err)
{
    counting_bound *s = ctx;
    if (s->whole && bytes > s->whole) {
        cfs_err_set(err, "never");
        return CFS_SPACE_NEVER_FITS;
    }
    if (s->held + bytes > s->limit)
        return cfs_err_set(err, "no room");
    s->held += bytes;
    return 0;
}

static void bound_release(void *ctx, uint64_t bytes)
{
    ((counting_bound *)ctx)->held -= bytes;
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
    /* Room for one job's spill + results (4 x 12 + 4 x 8 bytes) at a time. */
    cb.limit = 80;
    CHECK(value_sum(a, &err) == 10);
    CHECK(cb.held == 32);               /* the spill went back after the pass */
    CHECK(value_sum(b, &err) == 100);   /* A's results were dropped to make room */
    CHECK(cb.held == 32);
    CHECK(value_sum(a, &err) == 10 && cb.held == 32);
    /* Work beyond the whole bound fails at once, drops nothing, and fails for good. */
    cfs_elem *c = small_csr(100);
    CHECK(cfs_gene_major_sparse(c, perm, &o, "C", &err) == 0);
    cb.whole = 50;
    CHECK(value_sum(c, &err) < 0 && strstr(err.msg, "never") && cb.held == 32);
    cb.whole = 0;
    CHECK(value_sum(c, &err) < 0 && cb.held == 32);
    CHECK(value_sum(a, &err) == 10);    /* A's results were not dropped for C */
    cfs_elem_free(c);
    cfs_elem_free(a);
    cfs_elem_free(b);
    CHECK(cb.held == 0);
    cfs_space_free(space);
    cfs_perm_unref(perm);
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

/* Two jobs of one source at once: it works until the last one ends, showing the job that
 * reported last. */
static void test_progress(void)
{
    cfs_progress *p = cfs_progress_new("/data/a.h5ad", NULL);
    char element[64];
    double f = -1;
    CHECK(p && !cfs_progress_get(p, element, sizeof element, &f));
    cfs_progress_begin(p, "X");
    cfs_progress_begin(p, "layers/counts");
    cfs_progress_note(p, "X", 0.25);
    CHECK(cfs_progress_get(p, element, sizeof element, &f) && strcmp(element, "X") == 0 &&
          f == 0.25);
    cfs_progress_end(p, "X");
    cfs_progress_note(p, "layers/counts", 0.5);
    CHECK(cfs_progress_get(p, element, sizeof element, &f) &&
          strcmp(element, "layers/counts") == 0 && f == 0.5);
    cfs_progress_end(p, "layers/counts");
    CHECK(!cfs_progress_get(p, element, sizeof element, &f));
    cfs_progress_free(p);
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
    cfs_err err = {{0}};
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

int main(void)
{
    test_cache();
    test_cache_work();
    test_gene_major_space();
    test_progress();
    test_files();
    test_unique_names();
    test_priority();
    test_perm_pos();
    test_utf8_valid();
    test_strpool();
    test_read_strings();
    test_h5_read_strings();
    test_probe_shares_file();
    test_dormant_files();
    test_gene_major_sparse();
    test_sparse_index_dtype();
    test_zarray_json();
    test_vlen();
    test_chunk_addressing();
    test_codecs();
    test_ids();
    test_store_chunks();
    printf("unit: %d passed, %d failed\n", unit_passed, unit_failed);
    return unit_failed != 0;
}
