#include "priority.h"

#include <stdbool.h>
#include <stdlib.h>

uint64_t cfs_splitmix64(uint64_t x)
{
    uint64_t z = x + UINT64_C(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

typedef struct keyed {
    uint64_t key;
    uint64_t row;
} keyed;

static bool keyed_before(const keyed *a, const keyed *b)
{
    return a->key < b->key || (a->key == b->key && a->row < b->row);
}

/* At most four rows a bucket on average: the counts are fresh memory (a fresh page costs more
 * than sorting its rows), and a bucket stays tiny. */
static int bucket_bits(uint64_t n)
{
    int bits = 1;
    while ((UINT64_C(4) << bits) < n)
        bits++;
    return bits;
}

/* Sorts one bucket's rows by (key, row). Keys are splitmix64 outputs, uniform over 2^64, so a
 * bucket holds a handful of rows and insertion sort is the fast way. */
static void sort_bucket(uint64_t *rows, size_t m, uint64_t mixed, keyed *scratch)
{
    for (size_t i = 0; i < m; i++) {
        keyed k = {cfs_splitmix64(mixed ^ rows[i]), rows[i]};
        size_t j = i;
        for (; j > 0 && keyed_before(&k, &scratch[j - 1]); j--)
            scratch[j] = scratch[j - 1];
        scratch[j] = k;
    }
    for (size_t i = 0; i < m; i++)
        rows[i] = scratch[i].row;
}

/* One counting pass and one scatter pass over the top bits of the keys put every row in its
 * bucket in ascending row order, straight into order; each bucket is then sorted on its own.
 * Keys are recomputed rather than stored: that costs less than 16 bytes of fresh memory a row. */
uint64_t *cfs_priority_order(uint64_t n, uint64_t seed)
{
    if (n >= UINT32_MAX || n > SIZE_MAX / sizeof(uint64_t))
        return NULL; /* bucket offsets are 32-bit */
    int bits = bucket_bits(n);
    size_t nb = (size_t)1 << bits;
    uint32_t *end = calloc(nb, sizeof *end);
    uint64_t *order = malloc((n ? n : 1) * sizeof *order);
    uint64_t mixed = cfs_splitmix64(seed);
    keyed *scratch = NULL;
    if (!end || !order)
        goto fail;
    for (uint64_t i = 0; i < n; i++)
        end[cfs_splitmix64(mixed ^ i) >> (64 - bits)]++;
    uint32_t sum = 0, biggest = 0;
    for (size_t b = 0; b < nb; b++) {
        biggest = end[b] > biggest ? end[b] : biggest;
        sum += end[b];
        end[b] = sum - end[b]; /* the bucket's start, for now */
    }
    if (!(scratch = malloc((biggest ? biggest : 1) * sizeof *scratch)))
        goto fail;
    for (uint64_t i = 0; i < n; i++)
        order[end[cfs_splitmix64(mixed ^ i) >> (64 - bits)]++] = i;
    for (size_t b = 0, begin = 0; b < nb; begin = end[b++])
        sort_bucket(order + begin, end[b] - begin, mixed, scratch);
    free(scratch);
    free(end);
    return order;
fail:
    free(end);
    free(order);
    return NULL;
}

size_t cfs_priority_levels(uint64_t n, uint64_t *levels, size_t max)
{
    size_t k = 0;
    for (uint64_t level = 1024; level < n && k + 1 < max; level *= 4) {
        levels[k++] = level;
        if (level > UINT64_MAX / 4)
            break;
    }
    if (k < max)
        levels[k++] = n;
    return k;
}
