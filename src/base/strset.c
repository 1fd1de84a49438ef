#include "strset.h"

#include <stdlib.h>
#include <string.h>

typedef struct entry {
    const char *key;
    uint64_t value;
} entry;

struct cfs_strset {
    entry *slots;
    size_t cap, len;   /* cap: a power of two */
};

static uint64_t fnv1a(const char *s)
{
    uint64_t h = UINT64_C(1469598103934665603);
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * UINT64_C(1099511628211);
    return h ^ (h >> 29);  /* the low bits pick the slot: fold the high ones in */
}

static entry *find(entry *slots, size_t cap, const char *s)
{
    size_t i = (size_t)fnv1a(s) & (cap - 1);
    while (slots[i].key && strcmp(slots[i].key, s) != 0)
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

cfs_strset *cfs_strset_new(size_t expected)
{
    cfs_strset *set = calloc(1, sizeof *set);
    if (!set)
        return NULL;
    set->cap = 16;
    while (set->cap < 2 * expected + 16)
        set->cap *= 2;
    if (!(set->slots = calloc(set->cap, sizeof *set->slots))) {
        free(set);
        return NULL;
    }
    return set;
}

void cfs_strset_free(cfs_strset *set)
{
    if (set) {
        free(set->slots);
        free(set);
    }
}

size_t cfs_strset_len(const cfs_strset *set)
{
    return set->len;
}

static int grow(cfs_strset *set)
{
    size_t cap = set->cap * 2;
    entry *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -1;
    for (size_t i = 0; i < set->cap; i++)
        if (set->slots[i].key)
            *find(slots, cap, set->slots[i].key) = set->slots[i];
    free(set->slots);
    set->slots = slots;
    set->cap = cap;
    return 0;
}

int cfs_strset_add(cfs_strset *set, const char *s, uint64_t value)
{
    entry *e = find(set->slots, set->cap, s);
    if (e->key)
        return 0;
    if (2 * (set->len + 1) > set->cap) {
        if (grow(set) < 0)
            return -1;
        e = find(set->slots, set->cap, s);
    }
    e->key = s;
    e->value = value;
    set->len++;
    return 1;
}

uint64_t *cfs_strset_get(const cfs_strset *set, const char *s)
{
    entry *e = find(set->slots, set->cap, s);
    return e->key ? &e->value : NULL;
}
