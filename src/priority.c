#include "priority.h"

#include <stdlib.h>
#include <string.h>

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

/* LSD radix sort on (key, row): rows start ascending and every pass is stable, so ties in key
 * stay ordered by row, as the definition requires. */
static void radix_sort(keyed *a, keyed *tmp, uint64_t n)
{
    size_t count[1 << 16];
    for (int shift = 0; shift < 64; shift += 16) {
        memset(count, 0, sizeof count);
        for (uint64_t i = 0; i < n; i++)
            count[(a[i].key >> shift) & 0xffff]++;
        size_t sum = 0;
        for (size_t b = 0; b < (1 << 16); b++) {
            size_t c = count[b];
            count[b] = sum;
            sum += c;
        }
        for (uint64_t i = 0; i < n; i++)
            tmp[count[(a[i].key >> shift) & 0xffff]++] = a[i];
        memcpy(a, tmp, n * sizeof *a);
    }
}

uint64_t *cfs_priority_order(uint64_t n, uint64_t seed)
{
    if (n > SIZE_MAX / sizeof(keyed))
        return NULL;
    keyed *a = malloc((n ? n : 1) * sizeof *a);
    keyed *tmp = malloc((n ? n : 1) * sizeof *tmp);
    uint64_t *order = malloc((n ? n : 1) * sizeof *order);
    if (!a || !tmp || !order) {
        free(a);
        free(tmp);
        free(order);
        return NULL;
    }
    uint64_t mixed_seed = cfs_splitmix64(seed);
    for (uint64_t i = 0; i < n; i++) {
        a[i].key = cfs_splitmix64(mixed_seed ^ i);
        a[i].row = i;
    }
    radix_sort(a, tmp, n);
    for (uint64_t j = 0; j < n; j++)
        order[j] = a[j].row;
    free(a);
    free(tmp);
    return order;
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
