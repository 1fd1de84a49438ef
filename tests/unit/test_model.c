/* src/model/: the string pool and reads of strings. */
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

void unit_model(void)
{
    test_strpool();
    test_read_strings();
}
