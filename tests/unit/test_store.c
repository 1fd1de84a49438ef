/* src/store/: metadata JSON, vlen-utf8 framing, chunk addressing, codec round trips, the
 * store's chunks and its flavours' keys. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chunking.h"
#include "codec.h"
#include "flavour.h"
#include "model.h"
#include "path.h"
#include "store.h"
#include "vlen.h"
#include "zmeta.h"
#include "unit.h"

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

/* A document found by the walk, by its store key. */
typedef struct doc_search {
    const char *key;
    char *text;
} doc_search;

static int find_folder(void *ctx, size_t node, const char *path, cfs_err *err)
{
    (void)ctx;
    (void)node;
    (void)path;
    (void)err;
    return 0;
}

static int find_doc(void *ctx, size_t node, const char *path, const char *name, char *text,
                    cfs_err *err)
{
    (void)node;
    (void)err;
    doc_search *s = ctx;
    char *key = cfs_path_join(path, name);
    if (key && !s->text && strcmp(key, s->key) == 0)
        s->text = text;
    else
        free(text);
    free(key);
    return 0;
}

static int find_data(void *ctx, size_t node, cfs_err *err)
{
    (void)ctx;
    (void)node;
    (void)err;
    return 0;
}

char *unit_store_doc(const cfs_store *st, const char *key)
{
    static const cfs_walker walker = {find_folder, find_doc, find_data};
    doc_search s = {key, NULL};
    cfs_err err;
    if (cfs_flavour_walk(cfs_flavour_of(&st->opts), st, &walker, &s, &err) < 0) {
        free(s.text);
        return NULL;
    }
    return s.text;
}

static void test_chunk_addressing(void)
{
    uint64_t shape[2] = {10, 3}, chunks[2] = {4, 3}, grid[2];
    CHECK(cfs_chunk_grid(2, shape, chunks, grid) == 3 && grid[0] == 3 && grid[1] == 1);
    cfs_store_node n = {.is_array = true, .ndim = 2, .shape = {10, 3}, .chunks = {4, 3},
                        .grid = {3, 1}, .nchunks = 3};
    cfs_store_opts v2 = {CFS_CODEC_NONE, CFS_ZARR_V2, false};
    const cfs_flavour *fl = cfs_flavour_of(&v2);
    char key[64];
    CHECK(cfs_flavour_nkeys(fl, &n) == 3);
    cfs_flavour_key(fl, &n, 2, key, sizeof key);
    CHECK(strcmp(key, "2.0") == 0);
    uint64_t idx;
    cfs_keydir top = {0, 0}, child;
    CHECK(cfs_flavour_lookup(fl, &n, top, "1.0", &child, &idx) == CFS_KEY_FILE && idx == 1);
    CHECK(cfs_flavour_lookup(fl, &n, top, "3.0", &child, &idx) == CFS_KEY_NONE);
    CHECK(cfs_flavour_lookup(fl, &n, top, "01.0", &child, &idx) == CFS_KEY_NONE);
    CHECK(cfs_flavour_lookup(fl, &n, top, "1", &child, &idx) == CFS_KEY_NONE);
    CHECK(cfs_flavour_lookup(fl, &n, top, "1.0.0", &child, &idx) == CFS_KEY_NONE);
    CHECK(cfs_flavour_nentries(fl, &n, top) == 3);
    CHECK(cfs_flavour_entry(fl, &n, top, 1, key, sizeof key, &child, &idx) == CFS_KEY_FILE &&
          idx == 1 && strcmp(key, "1.0") == 0);
    cfs_store_node scalar = {.is_array = true, .ndim = 0, .nchunks = 1};
    cfs_flavour_key(fl, &scalar, 0, key, sizeof key);
    CHECK(strcmp(key, "0") == 0);
    CHECK(cfs_flavour_lookup(fl, &scalar, top, "0", &child, &idx) == CFS_KEY_FILE && idx == 0);

    /* Small arrays are one chunk; big ones are cut along cells into bounded chunks. */
    uint64_t s1[1] = {1000}, c1[1];
    cfs_chunk_shape(1, s1, 4, 0, c1);
    CHECK(c1[0] == 1000);
    uint64_t big[2] = {2000000, 50}, cb[2], gb[2];
    cfs_chunk_shape(2, big, 4, 0, cb);
    CHECK(cb[1] == 50 && cb[0] * 50 * 4 <= (8u << 20) && cb[0] * 50 * 4 >= (256u << 10));
    CHECK(cfs_chunk_grid(2, big, cb, gb) <= CFS_CHUNK_MAX_COUNT);
    uint64_t wide[2] = {100, 10000000}, cw[2];
    cfs_chunk_shape(2, wide, 8, 0, cw);
    CHECK(cw[0] == 1 && cw[1] * 8 <= (8u << 20));
    uint64_t huge[1] = {UINT64_C(1) << 40}, ch[1], gh[1];
    cfs_chunk_shape(1, huge, 1, 0, ch);
    CHECK(cfs_chunk_grid(1, huge, ch, gh) <= CFS_CHUNK_MAX_COUNT);
    uint64_t empty[1] = {0}, ce[1], ge[1];
    cfs_chunk_shape(1, empty, 4, 0, ce);
    CHECK(ce[0] == 1 && cfs_chunk_grid(1, empty, ce, ge) == 0);
}

/* Cells in priority order are cut on the levels from level_rows on (docs/design.md §4). */
static void test_level_chunks(void)
{
    const uint64_t L = 16384;
    /* Fewer cells than a level: one chunk, as small arrays are. */
    uint64_t few[1] = {16000}, c[2], g[2];
    cfs_chunk_shape(1, few, 4, L, c);
    CHECK(c[0] == 16000);
    /* A 1-d column of 200,000 cells (0.8 MB, one chunk by bytes alone) is cut every level. */
    uint64_t col[1] = {200000};
    cfs_chunk_shape(1, col, 4, L, c);
    CHECK(c[0] == L && cfs_chunk_grid(1, col, c, g) == 13);
    /* Strings count their estimate; records and narrow types keep the whole level. */
    cfs_chunk_shape(1, col, CFS_STRING_BYTES_ESTIMATE, L, c);
    CHECK(c[0] == L);
    cfs_chunk_shape(1, col, 1, L, c);
    CHECK(c[0] == L);
    /* Wide rows: a divisor of the level, as many rows as fit 8 MiB. */
    uint64_t pca[2] = {1000000, 150};
    cfs_chunk_shape(2, pca, 4, L, c);
    CHECK(c[1] == 150 && L % c[0] == 0 && c[0] == 8192 && c[0] * 150 * 4 <= (8u << 20));
    uint64_t wider[2] = {1000000, 20000};
    cfs_chunk_shape(2, wider, 8, L, c);
    CHECK(L % c[0] == 0 && c[0] * 20000 * 8 <= (8u << 20) && c[0] * 2 * 20000 * 8 > (8u << 20));
    /* A level that is not a power of two keeps its divisors. */
    cfs_chunk_shape(2, pca, 4, 3 * 5 * 7 * 1000, c);
    CHECK((3 * 5 * 7 * 1000) % c[0] == 0 && c[0] * 150 * 4 <= (8u << 20));
    /* A single row over 8 MiB, or more chunks than the bound: the byte rule. */
    uint64_t huge_row[2] = {100, 10000000};
    cfs_chunk_shape(2, huge_row, 8, L, c);
    CHECK(c[0] == 1 && c[1] * 8 <= (8u << 20));
    uint64_t many[1] = {UINT64_C(1) << 40};
    cfs_chunk_shape(1, many, 1, L, c);
    CHECK(cfs_chunk_grid(1, many, c, g) <= CFS_CHUNK_MAX_COUNT);
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
    /* Incompressible bytes stay within the bound the layout reserves work space by. */
    uint64_t x = 1;
    unsigned char *noise = malloc(N);
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        noise[i] = (unsigned char)(x >> 56);
    }
    for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++)
        for (size_t len = 0; len <= N; len += N / 4 + 1) {
            cfs_buf b = {0};
            CHECK(cfs_codec_encode(ids[k], 1, noise, len, &b, &err) == 0);
            CHECK(b.len <= cfs_codec_bound(ids[k], len));
            cfs_buf_free(&b);
        }
    free(noise);
    cfs_buf junk = {0};
    CHECK(cfs_codec_decode(CFS_CODEC_BLOSC_LZ4, "garbage-garbage-garbage", 23, &junk, &err) < 0);
    cfs_buf_free(&junk);
    free(values);
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
    cfs_store_opts opts = {.codec = CFS_CODEC_NONE};
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
        char *zm = unit_store_doc(st, ".zmetadata");
        CHECK(zm && strstr(zm, "\"m/.zarray\"") && strstr(zm, "\"m/.zattrs\"") &&
              strstr(zm, "\".zgroup\"") && strstr(zm, "\"zarr_consolidated_format\": 1"));
        free(zm);
    }
    cfs_store_free(st);
    cfs_elem_free(root);
}

/* A 1-d array that holds chunk 1 encoded already (with zstd, 4 elements a chunk) and fails
 * chunk 2. */
static int kept_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                     void *out, cfs_err *err)
{
    (void)arr;
    (void)err;
    for (uint64_t i = 0; i < count[0]; i++)
        ((int32_t *)out)[i] = (int32_t)(start[0] + i);
    return 0;
}

static int kept_encoded(const cfs_array *arr, uint64_t idx, uint64_t chunk_len, int codec_id,
                        cfs_buf *out, cfs_err *err)
{
    (void)arr;
    if (idx == 2)
        return cfs_err_set(err, "no such work file");
    if (idx != 1 || chunk_len != 4 || codec_id != CFS_CODEC_ZSTD)
        return 0;
    return cfs_buf_append(out, "KEPT", 4) < 0 ? cfs_err_oom(err) : 1;
}

static const cfs_array_ops kept_ops = {kept_read, NULL, NULL, NULL, kept_encoded};

/* The renderer takes the chunks an array holds encoded as they are, encodes the others
 * itself, and fails a chunk whose kept bytes cannot be read, naming it. */
static void test_store_kept_chunks(void)
{
    uint64_t len = 10;
    cfs_elem *root = cfs_elem_new(CFS_EL_ANNDATA, NULL);
    cfs_elem *el = cfs_elem_new(CFS_EL_ARRAY, "v");
    el->values = cfs_array_new(CFS_INT32, 1, &len, &kept_ops, NULL);
    el->values->chunk_hint[0] = 4;
    cfs_elem_add(root, el);
    cfs_dataset ds = {.root = root};
    cfs_store_opts opts = {.codec = CFS_CODEC_ZSTD};
    cfs_err err;
    cfs_store *st = cfs_store_new(&ds, &opts, &err);
    CHECK(st && st->nnodes == 2 && st->nodes[1].nchunks == 3);
    if (st && st->nnodes == 2 && st->nodes[1].nchunks == 3) {
        cfs_store_node *n = &st->nodes[1];
        cfs_buf b = {0}, dec = {0};
        CHECK(cfs_store_chunk(st, n, 1, &b, &err) == 0);
        CHECK(b.len == 4 && memcmp(b.data, "KEPT", 4) == 0);
        cfs_buf_reset(&b);
        CHECK(cfs_store_chunk(st, n, 0, &b, &err) == 0);
        int32_t first[4] = {0, 1, 2, 3};
        CHECK(cfs_codec_decode(CFS_CODEC_ZSTD, b.data, b.len, &dec, &err) == 0);
        CHECK(dec.len == sizeof first && memcmp(dec.data, first, sizeof first) == 0);
        cfs_buf_reset(&b);
        CHECK(cfs_store_chunk(st, n, 2, &b, &err) < 0 && b.len == 0);
        CHECK(strstr(err.msg, "v: ") && strstr(err.msg, "no such work file"));
        cfs_buf_free(&b);
        cfs_buf_free(&dec);
    }
    cfs_store_free(st);
    cfs_elem_free(root);
}

void unit_store(void)
{
    test_zarray_json();
    test_vlen();
    test_chunk_addressing();
    test_level_chunks();
    test_codecs();
    test_store_chunks();
    test_store_kept_chunks();
}
