/* src/model/: the string pool and reads of strings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "permute.h"
#include "unit.h"

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
    cfs_err err = {0};
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

/* An array with only a read op, to exercise cfs_array_read_rows_by_blocks; counts its reads. */
static int plain_reads;

static int plain_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                      void *out, cfs_err *err)
{
    plain_reads++;
    return cfs_array_read(arr->ctx, start, count, out, err);
}

static void plain_free(void *ctx)
{
    cfs_array_unref(ctx);
}

static const cfs_array_ops plain_ops = {plain_read, plain_free, NULL, NULL, NULL};

/* Scattered rows, consecutive runs and rows far apart: the same values by the array's own
 * read_rows (memory) and by blocks, and far rows are not read together. */
static void test_read_rows(void)
{
    enum { N = 3000000, COLS = 2 };
    float *values = malloc((size_t)N * COLS * sizeof *values);
    for (uint64_t i = 0; i < (uint64_t)N * COLS; i++)
        values[i] = (float)i;
    uint64_t shape[2] = {N, COLS};
    cfs_array *mem = cfs_array_from_memory(CFS_FLOAT32, 2, shape, values);
    cfs_array *plain = cfs_array_new(CFS_FLOAT32, 2, shape, &plain_ops, cfs_array_ref(mem));
    const uint64_t rows[] = {0, 1, 2, 7, 100, 101, 2999998, 2999999};
    enum { K = sizeof rows / sizeof *rows };
    float a[K * COLS], b[K * COLS];
    cfs_err err = {0};
    CHECK(cfs_array_read_rows(mem, rows, K, a, NULL, &err) == 0);
    plain_reads = 0;
    CHECK(cfs_array_read_rows(plain, rows, K, b, NULL, &err) == 0);
    CHECK(memcmp(a, b, sizeof a) == 0 && a[2 * 3] == 14.0f && b[2 * 7 + 1] == 5999999.0f);
    /* rows 0..101 in one block, the two last ones (millions of rows away) in another */
    CHECK(plain_reads == 2);
    const uint64_t unordered[] = {5, 3}, outside[] = {N};
    CHECK(cfs_array_read_rows(plain, unordered, 2, b, NULL, &err) < 0);
    CHECK(cfs_array_read_rows(mem, outside, 1, b, NULL, &err) < 0);
    cfs_array_unref(plain);
    cfs_array_unref(mem);

    char **names = malloc(5 * sizeof *names);
    for (int i = 0; i < 5; i++) {
        names[i] = malloc(8);
        snprintf(names[i], 8, "c%d", i);
    }
    uint64_t n = 5;
    mem = cfs_array_from_memory(CFS_STRING, 1, &n, names);
    plain = cfs_array_new(CFS_STRING, 1, &n, &plain_ops, cfs_array_ref(mem));
    const uint64_t some[] = {1, 3, 4};
    const char *got[3];
    cfs_strpool *pool = cfs_strpool_new();
    CHECK(cfs_array_read_rows(plain, some, 3, got, pool, &err) == 0);
    CHECK(strcmp(got[0], "c1") == 0 && strcmp(got[1], "c3") == 0 && strcmp(got[2], "c4") == 0);
    CHECK(got[0] != names[1]);   /* the plain array's copies went to the pool */
    CHECK(cfs_array_read_rows(mem, some, 3, got, pool, &err) == 0 && got[1] == names[3]);
    cfs_strpool_free(pool);
    cfs_array_unref(plain);
    cfs_array_unref(mem);
}

void unit_model(void)
{
    test_strpool();
    test_read_strings();
    test_read_rows();
}
