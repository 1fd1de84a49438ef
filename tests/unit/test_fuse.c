/* fuse/: the open files' bytes (fuse/files.h). */
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "files.h"
#include "unit.h"

/* fuse/files.h: the loader writes the inode number as bytes, counts its calls and fails for
 * inode 13. */
typedef struct counting_loader {
    pthread_mutex_t lock;
    int calls;
} counting_loader;

static int load_ino(void *ctx, uint64_t ino, cfs_buf *out, cfs_err *err)
{
    counting_loader *l = ctx;
    pthread_mutex_lock(&l->lock);
    l->calls++;
    pthread_mutex_unlock(&l->lock);
    usleep(10000); /* concurrent pieces pile up meanwhile */
    if (ino == 13)
        return cfs_err_set(err, "unlucky");
    char text[32];
    int n = snprintf(text, sizeof text, "file %llu", (unsigned long long)ino);
    return cfs_buf_append(out, text, (size_t)n) < 0 ? cfs_err_set(err, "out of memory") : 0;
}

static void *read_piece(void *files)
{
    cfs_err err;
    cfs_file_version v = {7, 6, {1, 0}};
    cfs_file *f = cfs_files_get(files, &v, &err);
    int ok = f && cfs_file_bytes(f)->len == 6 && memcmp(cfs_file_bytes(f)->data, "file 7", 6) == 0;
    if (f)
        cfs_files_put(files, f, false);
    return ok ? files : NULL;
}

static int loads_of(cfs_files *files, counting_loader *l, uint64_t ino, struct timespec mtime,
                    bool reached_end)
{
    int before = l->calls;
    cfs_err err;
    cfs_file_version v = {ino, 6, mtime};
    cfs_file *f = cfs_files_get(files, &v, &err);
    if (f)
        cfs_files_put(files, f, reached_end);
    return f ? l->calls - before : -1;
}

static void test_files(void)
{
    counting_loader l = {PTHREAD_MUTEX_INITIALIZER, 0};
    cfs_files *files = cfs_files_new(2, 1 << 20, load_ino, &l);
    CHECK(files != NULL);
    if (!files)
        return;
    /* Single flight: 8 pieces of one file asked for at once cause one load. */
    CHECK(unit_all_succeed(8, read_piece, files) && l.calls == 1);
    struct timespec t1 = {1, 0}, t2 = {2, 0};
    CHECK(loads_of(files, &l, 7, t1, false) == 0);
    /* Another version of the same inode (datasets.json after a change) is never served old. */
    CHECK(loads_of(files, &l, 7, t2, false) == 1);
    /* Two slots: a third file pushes out the least recently used (7 at t1). */
    CHECK(loads_of(files, &l, 8, t1, false) == 1);
    CHECK(loads_of(files, &l, 7, t2, false) == 0 && loads_of(files, &l, 7, t1, false) == 1);
    /* The piece with the last byte lets the bytes go: the kernel has the whole file. */
    CHECK(loads_of(files, &l, 7, t1, true) == 0 && loads_of(files, &l, 7, t1, false) == 1);
    /* A failed load keeps nothing: the next reader tries again. */
    cfs_err err;
    cfs_file_version bad = {13, 6, t1};
    CHECK(cfs_files_get(files, &bad, &err) == NULL && strcmp(err.msg, "unlucky") == 0);
    CHECK(loads_of(files, &l, 13, t1, false) == -1 && l.calls == 7);
    cfs_files_free(files);
}

/* The kernel reads a file's pieces at once: the piece with the last byte is often put back
 * before another, and the bytes still go once every piece is back. */
static void test_files_last_piece_first(void)
{
    counting_loader l = {PTHREAD_MUTEX_INITIALIZER, 0};
    cfs_files *files = cfs_files_new(2, 1 << 20, load_ino, &l);
    CHECK(files != NULL);
    if (!files)
        return;
    cfs_err err;
    struct timespec t1 = {1, 0};
    cfs_file_version v = {7, 6, t1};
    cfs_file *early = cfs_files_get(files, &v, &err);
    cfs_file *last = cfs_files_get(files, &v, &err);
    CHECK(early && last && early == last && l.calls == 1);
    if (last)
        cfs_files_put(files, last, true);
    if (early)
        cfs_files_put(files, early, false);
    CHECK(loads_of(files, &l, 7, t1, false) == 1);
    cfs_files_free(files);
}

/* Files read in part keep at most the idle bound: the least recently used go first. */
static void test_files_idle_bound(void)
{
    counting_loader l = {PTHREAD_MUTEX_INITIALIZER, 0};
    /* each loaded file keeps a 256-byte buffer: two fit in 600 bytes, three do not */
    cfs_files *files = cfs_files_new(4, 600, load_ino, &l);
    CHECK(files != NULL);
    if (!files)
        return;
    struct timespec t1 = {1, 0};
    CHECK(loads_of(files, &l, 1, t1, false) == 1 && loads_of(files, &l, 2, t1, false) == 1);
    CHECK(loads_of(files, &l, 1, t1, false) == 0);
    CHECK(loads_of(files, &l, 3, t1, false) == 1);      /* 2, the least recent, goes */
    CHECK(loads_of(files, &l, 1, t1, false) == 0 && loads_of(files, &l, 3, t1, false) == 0);
    CHECK(loads_of(files, &l, 2, t1, false) == 1);
    cfs_files_free(files);
}

void unit_fuse(void)
{
    test_files();
    test_files_last_piece_first();
    test_files_idle_bound();
}
