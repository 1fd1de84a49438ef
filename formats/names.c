#include "names.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An open-addressing set of borrowed strings, with a per-name counter for the suffixes. */
typedef struct name_set {
    const char **keys;
    size_t *counter;
    size_t cap, len;
} name_set;

static uint64_t hash(const char *s)
{
    uint64_t h = UINT64_C(1469598103934665603);
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * UINT64_C(1099511628211);
    return h;
}

static size_t slot(const name_set *set, const char *s)
{
    size_t i = (size_t)hash(s) & (set->cap - 1);
    while (set->keys[i] && strcmp(set->keys[i], s) != 0)
        i = (i + 1) & (set->cap - 1);
    return i;
}

static int set_init(name_set *set, size_t n)
{
    set->cap = 16;
    while (set->cap < 2 * n + 16)
        set->cap *= 2;
    set->len = 0;
    set->keys = calloc(set->cap, sizeof *set->keys);
    set->counter = calloc(set->cap, sizeof *set->counter);
    return set->keys && set->counter ? 0 : -1;
}

/* Returns the slot of s, inserting it if absent (the set is sized for every insertion). */
static size_t set_add(name_set *set, const char *s, int *added)
{
    size_t i = slot(set, s);
    *added = set->keys[i] == NULL;
    if (*added) {
        set->keys[i] = s;
        set->len++;
    }
    return i;
}

int cfs_names_make_unique(char **names, size_t n, size_t *changed)
{
    *changed = 0;
    name_set set;
    /* Every original name plus every new one: at most 2n entries. */
    if (set_init(&set, 2 * n) < 0) {
        free(set.keys);
        free(set.counter);
        return -1;
    }
    unsigned char *dup = calloc(n ? n : 1, 1);
    int rc = dup ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        int added;
        set_add(&set, names[i], &added);
        dup[i] = !added;
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (!dup[i])
            continue;
        size_t base = slot(&set, names[i]);
        size_t len = strlen(names[i]) + 24;
        char *fresh = NULL;
        for (;;) {
            free(fresh);
            fresh = malloc(len);
            if (!fresh) {
                rc = -1;
                break;
            }
            snprintf(fresh, len, "%s-%zu", names[i], ++set.counter[base]);
            if (set.keys[slot(&set, fresh)] == NULL)
                break;
        }
        if (rc < 0)
            break;
        int added;
        set_add(&set, fresh, &added);
        /* A duplicate's own string is not a key of the set (its first occurrence's is). */
        free(names[i]);
        names[i] = fresh;
        (*changed)++;
    }
    free(dup);
    free(set.keys);
    free(set.counter);
    return rc;
}
