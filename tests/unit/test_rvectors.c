/* formats/r/rvectors.c: the large vectors of an R file left in place in a plain file (XDR and
 * native), read back by range equal to what the stream read; kept in memory for a compressed
 * stream; their stats; a file cut short after opening fails the read, never gives other
 * bytes. Fixtures: tests/fixtures/r/ (made by tests/fixtures/make_r_fixtures.R). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "robject.h"
#include "rvectors.h"
#include "unit.h"

/* Reads path with a store over its own descriptor, vectors over threshold elements sunk. */
static r_file *read_with_store(const char *path, uint64_t threshold, r_vecstore **vs)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    *vs = fd >= 0 ? r_vecstore_new(dup(fd)) : NULL;
    if (!*vs) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    r_sink sink = r_vecstore_sink(*vs);
    r_read_opts opts = {.sink = &sink, .sink_threshold = threshold};
    r_file *f = NULL;
    cfs_err err = {0};
    if (r_read_fd(fd, &opts, &f, &err) < 0)
        fprintf(stderr, "%s: %s\n", path, err.msg);
    return f;
}

static r_file *read_fixture_with_store(const char *name, uint64_t threshold, r_vecstore **vs)
{
    char rel[256], path[4096];
    snprintf(rel, sizeof rel, "r/%s", name);
    unit_fixture_path(path, sizeof path, rel);
    return read_with_store(path, threshold, vs);
}

/* long.rds / long_plain.rds: list(r = (1:2000) / 4, i = (1:2000) %% 97, s = 1:3000). */
static void test_long(void)
{
    size_t rlen, ilen;
    char *rbin = unit_slurp("r/long_r.bin", &rlen), *ibin = unit_slurp("r/long_i.bin", &ilen);
    CHECK(rbin && ibin && rlen == 16000 && ilen == 8000);
    const char *files[] = {"long_plain.rds", "long.rds"};
    for (int k = 0; k < 2 && rbin && ibin; k++) {
        r_vecstore *vs;
        r_file *f = read_fixture_with_store(files[k], 1000, &vs);
        CHECK(f != NULL);
        if (!f) {
            r_vecstore_free(vs);
            continue;
        }
        const r_obj *r = r_list_get(f->root, "r"), *i = r_list_get(f->root, "i"),
                    *s = r_list_get(f->root, "s");
        CHECK(r->sunk && i->sunk && s->sunk);
        uint64_t in_place, in_place_bytes, kept;
        r_vecstore_usage(vs, &in_place, &in_place_bytes, &kept, NULL);
        /* plain: r and i stay in the file; s is an ALTREP sequence, made, so kept */
        CHECK(k == 0 ? in_place == 2 && in_place_bytes == rlen + ilen && kept == 1
                     : in_place == 0 && kept == 3);
        double *rv = malloc(rlen);
        int32_t iv[2000], sv[3000];
        cfs_err err = {0};
        CHECK(rv && r_vec_read(vs, r, 0, 2000, rv, &err) == 0 && memcmp(rv, rbin, rlen) == 0);
        CHECK(r_vec_read(vs, i, 0, 2000, iv, &err) == 0 && memcmp(iv, ibin, ilen) == 0);
        /* a range inside, converted from XDR as it is read */
        double part[7];
        CHECK(r_vec_read(vs, r, 1234, 7, part, &err) == 0 &&
              memcmp(part, rbin + 1234 * 8, sizeof part) == 0 && part[0] == 1235 / 4.0);
        CHECK(r_vec_read(vs, r, 1999, 2, part, &err) == -1); /* past the end */
        bool seq = r_vec_read(vs, s, 0, 3000, sv, &err) == 0;
        for (int j = 0; seq && j < 3000; j++)
            seq = sv[j] == j + 1;
        CHECK(seq);
        r_vec_stats st;
        CHECK(r_vec_stats_of(vs, i, &st) && !st.has_na && st.min == 0 && st.max == 96 &&
              st.first == 1 && st.last == 2000 % 97 && !st.nondecreasing);
        CHECK(r_vec_stats_of(vs, s, &st) && st.nondecreasing && st.first == 1 &&
              st.last == 3000 && st.min == 1 && st.max == 3000);
        CHECK(!r_vec_stats_of(vs, r, &st));
        void *owned;
        const double *w = r_vec_whole(vs, r, &owned, &err);
        CHECK(w && memcmp(w, rbin, rlen) == 0 && (k == 0) == (owned != NULL));
        free(owned);
        free(rv);
        r_file_free(f);
        r_vecstore_free(vs);
    }
    free(rbin);
    free(ibin);
}

/* Walks two readings of the same file side by side: every atomic vector of a (every one sunk)
 * read through the store equals the same vector of b (kept in the tree). */
static void same_vectors(const r_vecstore *vs, const r_obj *a, const r_obj *b, int depth,
                         int *compared, bool *ok)
{
    if (!a || !b || depth > 60 || !*ok)
        return;
    if (a->type != b->type) {
        *ok = false;
        return;
    }
    if (a->type == R_LGL || a->type == R_INT || a->type == R_REAL) {
        size_t n = (size_t)b->length, es = a->type == R_REAL ? 8 : 4;
        void *buf = malloc(n ? n * es : 1);
        cfs_err err = {0};
        *ok = buf && a->length == b->length && (a->sunk || n <= 1) &&
              r_vec_read(vs, a, 0, n, buf, &err) == 0 && (n == 0 || memcmp(buf, b->u.data, n * es) == 0);
        free(buf);
        (*compared)++;
    } else if (a->type == R_VEC || a->type == R_EXPR) {
        for (uint64_t k = 0; k < a->length && k < b->length; k++)
            same_vectors(vs, a->u.items[k], b->u.items[k], depth + 1, compared, ok);
    } else if (a->type == R_LIST || a->type == R_LANG || a->type == R_CLO || a->type == R_PROM ||
               a->type == R_DOT) {
        same_vectors(vs, a->u.cons.car, b->u.cons.car, depth + 1, compared, ok);
        same_vectors(vs, a->u.cons.cdr, b->u.cons.cdr, depth + 1, compared, ok);
    }
    if (a->type != R_ENV && a->type != R_SYM)
        same_vectors(vs, a->attr, b->attr, depth + 1, compared, ok);
}

/* Every vector of files in each binary format, left in place (threshold 1), reads back as the
 * stream read it: XDR's big-endian and native's little-endian values both converted. */
static void test_every_vector_in_place(void)
{
    const char *files[] = {"v3_xdr.rds", "v2_xdr.rds", "v3_native.rds", "two_native.rda",
                           "seurat.rds", "sce.rds", "two.RData"};
    for (size_t k = 0; k < sizeof files / sizeof *files; k++) {
        r_vecstore *vs;
        r_file *a = read_fixture_with_store(files[k], 1, &vs);
        char rel[256], path[4096];
        snprintf(rel, sizeof rel, "r/%s", files[k]);
        unit_fixture_path(path, sizeof path, rel);
        r_file *b = NULL;
        cfs_err err = {0};
        CHECK(a && r_read_file(path, NULL, &b, &err) == 0);
        int compared = 0;
        bool ok = a && b;
        if (ok)
            same_vectors(vs, a->root, b->root, 0, &compared, &ok);
        uint64_t in_place = 0;
        if (vs)
            r_vecstore_usage(vs, &in_place, NULL, NULL, NULL);
        /* the gzip-compressed ones keep their vectors in memory */
        bool plain = strstr(files[k], "xdr") || strstr(files[k], "native");
        CHECK(ok && compared > 3 && (plain ? in_place > 3 : in_place == 0));
        if (!ok)
            fprintf(stderr, "%s: a vector read through the store differs\n", files[k]);
        r_file_free(a);
        r_file_free(b);
        r_vecstore_free(vs);
    }
}

/* A file cut short after it was opened: reading the vector it no longer holds fails with one
 * line (CFS_EIO), it never gives other bytes. */
static void test_file_changed(void)
{
    size_t len;
    char *bytes = unit_slurp("r/long_plain.rds", &len);
    char path[] = "/tmp/cfs-rvectors-XXXXXX";
    int fd = bytes ? mkstemp(path) : -1;
    CHECK(fd >= 0 && write(fd, bytes, len) == (ssize_t)len);
    if (fd >= 0)
        close(fd);
    r_vecstore *vs;
    r_file *f = fd >= 0 ? read_with_store(path, 1000, &vs) : NULL;
    CHECK(f != NULL);
    if (f) {
        CHECK(truncate(path, (off_t)len / 4) == 0);
        double v[2000];
        cfs_err err = {0};
        CHECK(r_vec_read(vs, r_list_get(f->root, "r"), 0, 2000, v, &err) == -1 &&
              err.status == CFS_EIO && !strchr(err.msg, '\n'));
        r_file_free(f);
        r_vecstore_free(vs);
    }
    if (fd >= 0)
        unlink(path);
    free(bytes);
}

void unit_rvectors(void)
{
    test_long();
    test_every_vector_in_place();
    test_file_changed();
}
