/* A published view's bytes (src/catalog/session.c): the check of Cellucid's session container
 * every front end runs on a .cellucid-session file before listing it. Whatever the bytes, it
 * answers (a reason, or none) without reading outside them. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* a copy of exactly size bytes: ASan sees a read past the end */
    unsigned char *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    char why[256];
    const char *problem = cfs_session_format_problem(copy, size, why, sizeof why);
    if (problem && (problem != why || strlen(why) == 0))
        abort();
    free(copy);
    return 0;
}
