/* Inputs the fuzz targets (tests/fuzz/, `make fuzz-run`) found, kept in
 * tests/fuzz/regressions/<target>/ and checked here on every build: each must now fail cleanly
 * with a reason, as the fix made it. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cellucid_meta.h"
#include "format.h"
#include "fuzz_uns_json.h"
#include "robject.h"
#include "unit.h"
#include "zarr_codecs.h"

static unsigned char *slurp(const char *rel, size_t *len)
{
    char path[4096];
    const char *srcdir = getenv("srcdir");
    snprintf(path, sizeof path, "%s/tests/fuzz/regressions/%s", srcdir ? srcdir : ".", rel);
    FILE *f = fopen(path, "rb");
    unsigned char *data = malloc(1 << 16);
    *len = f && data ? fread(data, 1, 1 << 16, f) : 0;
    if (f)
        fclose(f);
    return data;
}

/* An lzma header claiming a dictionary of gigabytes: liblzma allocated it. The decoders' memory
 * limit (CFS_XZ_MEMORY_LIMIT) refuses it as damaged. */
static void test_lzma_huge_dictionary(void)
{
    size_t len;
    unsigned char *data = slurp("fuzz_zarr_codecs/lzma-huge-dictionary", &len);
    CHECK(data && len > 2);
    /* The harness's choice: first byte picks the spec (6: lzma), the second the size. */
    json_t *spec = json_loads("{\"id\":\"lzma\",\"format\":1,\"check\":-1}", 0, NULL);
    unsigned char *out = NULL;
    size_t outlen = 0;
    cfs_err err = {0};
    CHECK(data && data[0] % 7 == 6);
    CHECK(spec && data && zr_codec_decode(spec, data + 2, len - 2, 0, &out, &outlen, &err) == -1 &&
          err.status == CFS_EDAMAGED && strstr(err.msg, "lzma") && strstr(err.msg, "512 MiB"));
    free(out);
    json_decref(spec);
    free(data);
}

/* An R stream (rel) that must be refused for an ALTREP sequence longer than max_generated
 * values (0: the reader's own bound). */
static void check_altrep_refused(const char *rel, uint64_t max_generated)
{
    size_t len;
    unsigned char *data = slurp(rel, &len);
    r_read_opts opts = {.sink_threshold = 4096, .max_generated = max_generated};
    r_file *f = NULL;
    cfs_err err = {0};
    CHECK(data && len > 0);
    CHECK(data && r_read_mem(data, len, &opts, &f, &err) == -1 && f == NULL &&
          err.status == CFS_EDAMAGED && strstr(err.msg, "ALTREP sequence"));
    free(data);
}

/* A compact integer sequence of hundreds of millions of values: a few bytes in the stream,
 * gigabytes once expanded. Without a sink to take it, it is refused (R_MAX_GENERATED_IN_MEMORY). */
static void test_altrep_huge_sequence(void)
{
    check_altrep_refused("fuzz_rstream/altrep-huge-sequence", 0);
}

/* A compact sequence of tens of millions of values: read whole it cost the fuzzer its time
 * limit. Within the reader's bound it is read; with the fuzzer's lower bound, refused. */
static void test_altrep_long_sequence(void)
{
    check_altrep_refused("fuzz_rstream/altrep-long-sequence", (uint64_t)1 << 20);
}

/* An lz4 chunk of a few bytes whose size header claims gigabytes: it was allocated before the
 * block was decoded. A block expands at most 255-fold, so the header is refused first. */
static void test_lz4_huge_size_header(void)
{
    size_t len;
    unsigned char *data = slurp("fuzz_zarr_codecs/lz4-huge-size-header", &len);
    json_t *spec = json_loads("{\"id\":\"lz4\",\"acceleration\":1}", 0, NULL);
    unsigned char *out = NULL;
    size_t outlen = 0;
    cfs_err err = {0};
    CHECK(data && len > 6 && data[0] % 7 == 4);
    CHECK(spec && data && zr_codec_decode(spec, data + 2, len - 2, 0, &out, &outlen, &err) == -1 &&
          err.status == CFS_EDAMAGED && strstr(err.msg, "lz4") && strstr(err.msg, "size header"));
    free(out);
    json_decref(spec);
    free(data);
}

/* Opens regressions/fuzz_rds/<name> with the rds format. */
static int open_rds_regression(const char *name, cfs_dataset **ds, cfs_err *err)
{
    char path[4096];
    const char *srcdir = getenv("srcdir");
    snprintf(path, sizeof path, "%s/tests/fuzz/regressions/fuzz_rds/%s", srcdir ? srcdir : ".",
             name);
    const cfs_format *rds = NULL;
    for (const cfs_format *const *f = cfs_formats(); *f; f++)
        if (strcmp((*f)->name, "rds") == 0)
            rds = *f;
    *ds = NULL;
    return rds ? rds->open(path, ds, err) : -2;
}

/* A Seurat object whose counts are a dsCMatrix of 14 x 10: a symmetric matrix that is not
 * square. Its mirrored entries were written past the column pointers. Now the layer is left
 * out with the reason (which the Seurat mapping used to lose, saying "out of memory"). */
static void test_symmetric_not_square(void)
{
    cfs_dataset *ds = NULL;
    cfs_err err = {0};
    CHECK(open_rds_regression("symmetric-not-square", &ds, &err) == 0);
    bool left_out = false;
    for (size_t i = 0; ds && i < ds->nleftout; i++)
        left_out |= strcmp(ds->leftout[i].element, "layers/counts") == 0 &&
                    strstr(ds->leftout[i].reason, "not square") != NULL;
    CHECK(left_out);
    cfs_dataset_free(ds);
}

/* An SCE whose triplet matrix claims a billion unnamed features: their numbers were allocated
 * (8 GB). Now refused as damaged before that. */
static void test_unnamed_huge_dims(void)
{
    cfs_dataset *ds = NULL;
    cfs_err err = {0};
    CHECK(open_rds_regression("unnamed-huge-dims", &ds, &err) == -1 && !ds &&
          err.status == CFS_EDAMAGED && strstr(err.msg, "unnamed rows"));
}

/* An SCE whose counts are a triplet matrix claiming 1.1e9 x 2.0e9 over a few entries: room
 * for a diagonal of 1.1e9 triplets (18 GB) was asked for whatever its class. Now room is
 * made for what the class implies, and a Dim larger than any experiment is refused. */
static void test_triplet_huge_dims(void)
{
    cfs_dataset *ds = NULL;
    cfs_err err = {0};
    CHECK(open_rds_regression("triplet-huge-dims", &ds, &err) == -1 && !ds &&
          strstr(err.msg, "larger than any experiment"));
}

/* defaults/obsKeys naming a column obs lacks (as the fixture wrong.h5ad does): the keys read
 * were not freed. The key is left out with its reason; ASan's leak check (the suite's sanitizer
 * stage) sees the strings freed. */
static void test_obs_keys_missing_column(void)
{
    size_t len;
    unsigned char *data = slurp("fuzz_cellucid_meta/obs-keys-missing-column", &len);
    json_t *doc = data ? json_loadb((const char *)data, len, 0, NULL) : NULL;
    char path[4096];
    const char *srcdir = getenv("srcdir");
    snprintf(path, sizeof path, "%s/tests/fixtures/cellucid_meta/valid.h5ad",
             srcdir ? srcdir : ".");
    cfs_dataset *ds = NULL;
    cfs_err err = {0};
    CHECK(doc && cfs_format_open(path, &ds, &err) == 0);
    if (doc && ds) {
        cfs_elem *uns = cfs_elem_ensure_dict(ds->root, "uns");
        cfs_elem_remove(uns, "cellucid");
        CHECK(cfs_elem_add(uns, fuzz_uns_from_json("cellucid", doc, 0)) == 0);
        cfs_cellucid_meta out = {0};
        CHECK(cfs_cellucid_meta_check(ds, &out, &err) == 0);
        bool named = false;
        for (size_t i = 0; i < ds->nleftout; i++)
            named |= strstr(ds->leftout[i].element, "obsKeys") != NULL;
        CHECK(named);
        cfs_dataset_free(ds);
    }
    json_decref(doc);
    free(data);
}

void unit_fuzz_regressions(void)
{
    test_obs_keys_missing_column();
    test_symmetric_not_square();
    test_unnamed_huge_dims();
    test_triplet_huge_dims();
    test_lz4_huge_size_header();
    test_altrep_long_sequence();
    test_lzma_huge_dictionary();
    test_altrep_huge_sequence();
}
