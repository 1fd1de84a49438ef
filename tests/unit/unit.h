/* A tiny test harness: each CHECK counts; main.c prints "N passed, N failed" per file and in all. */
#ifndef CFS_UNIT_H
#define CFS_UNIT_H

#include <stddef.h>
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

/* One entry per test file (tests/unit/test_<name>.c); main.c runs each and reports its count. */
void unit_base(void);
void unit_model(void);
void unit_layout(void);
void unit_store(void);
void unit_catalog(void);
void unit_cache(void);
void unit_fuse(void);
void unit_formats(void);
void unit_registry(void);
void unit_fuzz_regressions(void);
void unit_zarr_input(void);
void unit_rstream(void);
void unit_rvectors(void);
void unit_rdensejoin(void);
void unit_isolate(void);
void unit_net(void);
void unit_export(void);

/* Shared helpers (unit.c). */

/* buf = $srcdir/tests/fixtures/<rel> ("." when srcdir is unset). */
void unit_fixture_path(char *buf, size_t len, const char *rel);
/* The bytes of tests/fixtures/<rel> (malloc'd, NUL-terminated, *len without the NUL), or NULL. */
char *unit_slurp(const char *rel, size_t *len);
/* mkdtemp(tmpl) as one CHECK; returns tmpl, or NULL when it failed. */
char *unit_temp_dir(char *tmpl);
/* rm -rf dir as one CHECK. */
void unit_remove_folder(const char *dir);
/* Starts n (at most 16) threads of fn(arg) at once and joins them: 1 if every one returned
 * non-NULL. */
int unit_all_succeed(int n, void *(*fn)(void *), void *arg);
/* The document at key (".zmetadata", "m/.zarray") as the store's flavour renders it (malloc'd),
 * or NULL (test_store.c). */
struct cfs_store;
char *unit_store_doc(const struct cfs_store *st, const char *key);

#endif
