/* formats/r/rdensejoin.c: the dense join of split layers read by block and by scattered rows
 * equals the join made by hand (StitchMatrix's: zeros, then each layer's values at its cells'
 * rows and its features' columns), whatever the layers' dtypes. */
#include <stdlib.h>
#include <string.h>

#include "rdensejoin.h"
#include "unit.h"

enum { NCELL = 5, NFEAT = 4 };

/* Part 0: float64, cells 0, 2, 4, every feature. Part 1: int32, cells 1 and 3, features 1
 * and 3. No part holds a cell beyond them. */
static cfs_array *join_of_two(void)
{
    double *a = malloc(3 * NFEAT * sizeof *a);
    int32_t *b = malloc(2 * 2 * sizeof *b);
    int32_t *feature1 = malloc(2 * sizeof *feature1);
    rc_dense_parts p = {.part = calloc(2, sizeof *p.part), .feature = calloc(2, sizeof *p.feature),
                        .owner = calloc(NCELL, sizeof *p.owner),
                        .row = calloc(NCELL, sizeof *p.row), .nparts = 2};
    if (!a || !b || !feature1 || !p.part || !p.feature || !p.owner || !p.row)
        return NULL;
    for (int i = 0; i < 3 * NFEAT; i++)
        a[i] = 0.5 + i;
    for (int i = 0; i < 4; i++)
        b[i] = -(i + 1);
    feature1[0] = 1;
    feature1[1] = 3;
    uint64_t sa[2] = {3, NFEAT}, sb[2] = {2, 2};
    p.part[0] = cfs_array_from_memory(CFS_FLOAT64, 2, sa, a);
    p.part[1] = cfs_array_from_memory(CFS_INT32, 2, sb, b);
    p.feature[1] = feature1;
    for (uint32_t i = 0; i < NCELL; i++) {
        p.owner[i] = i % 2 ? 2 : 1;
        p.row[i] = i / 2;
    }
    return rc_dense_join(&p, NCELL, NFEAT);
}

static double expected(uint64_t i, uint64_t f)
{
    if (i % 2 == 0)
        return 0.5 + (double)((i / 2) * NFEAT + f);
    if (f == 1 || f == 3)
        return -(double)((i / 2) * 2 + (f == 3) + 1);
    return 0;
}

static void test_blocks_and_rows(void)
{
    cfs_array *j = join_of_two();
    CHECK(j && j->dtype == CFS_FLOAT64 && j->shape[0] == NCELL && j->shape[1] == NFEAT);
    if (!j)
        return;
    cfs_err err = {0};
    /* every block, so that each starts and ends inside and outside a part's features */
    for (uint64_t r0 = 0; r0 < NCELL; r0++)
        for (uint64_t c0 = 0; c0 < NFEAT; c0++)
            for (uint64_t nc = 1; c0 + nc <= NFEAT; nc++) {
                uint64_t s[2] = {r0, c0}, c[2] = {NCELL - r0, nc};
                double out[NCELL * NFEAT];
                CHECK(cfs_array_read(j, s, c, out, &err) == 0);
                for (uint64_t i = 0; i < c[0]; i++)
                    for (uint64_t f = 0; f < nc; f++)
                        CHECK(out[i * nc + f] == expected(r0 + i, c0 + f));
            }
    uint64_t rows[3] = {1, 2, 4};
    double out[3 * NFEAT];
    CHECK(cfs_array_read_rows(j, rows, 3, out, NULL, &err) == 0);
    for (uint64_t r = 0; r < 3; r++)
        for (uint64_t f = 0; f < NFEAT; f++)
            CHECK(out[r * NFEAT + f] == expected(rows[r], f));
    cfs_array_unref(j);
}

void unit_rdensejoin(void)
{
    test_blocks_and_rows();
}
