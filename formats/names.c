#include "names.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strset.h"

int cfs_names_make_unique(char **names, size_t n, size_t *changed)
{
    *changed = 0;
    /* Every name (borrowed), with the counter of its suffixes; every new one joins it. */
    cfs_strset *set = cfs_strset_new(2 * n);
    unsigned char *dup = calloc(n ? n : 1, 1);
    int rc = set && dup ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        int added = cfs_strset_add(set, names[i], 0);
        if (added < 0)
            rc = -1;
        dup[i] = added == 0;
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (!dup[i])
            continue;
        size_t len = strlen(names[i]) + 24;
        char *fresh = NULL;
        for (;;) {
            free(fresh);
            fresh = malloc(len);
            if (!fresh) {
                rc = -1;
                break;
            }
            uint64_t *counter = cfs_strset_get(set, names[i]);
            snprintf(fresh, len, "%s-%zu", names[i], (size_t)++*counter);
            if (!cfs_strset_get(set, fresh))
                break;
        }
        if (rc < 0)
            break;
        if (cfs_strset_add(set, fresh, 0) < 0) {
            free(fresh);
            rc = -1;
            break;
        }
        /* A duplicate's own string is not a key of the set (its first occurrence's is). */
        free(names[i]);
        names[i] = fresh;
        (*changed)++;
    }
    free(dup);
    cfs_strset_free(set);
    return rc;
}
