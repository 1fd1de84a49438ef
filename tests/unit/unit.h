/* A tiny test harness: each CHECK counts; the runner prints "N passed, N failed". */
#ifndef CFS_UNIT_H
#define CFS_UNIT_H

#include <stdio.h>

extern int unit_passed, unit_failed;

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (cond) {                                                                      \
            unit_passed++;                                                               \
        } else {                                                                         \
            unit_failed++;                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);     \
        }                                                                                \
    } while (0)

#endif
