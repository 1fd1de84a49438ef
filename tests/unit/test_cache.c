/* cache/: the bounded on-disk cache, single flight, crash leftovers and work reservations. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "unit.h"

typedef struct producer {
    pthread_mutex_t lock;
    int calls;
    size_t size;
    char fill;
} producer;

static int produce(void *ctx, cfs_buf *out, cfs_err *err)
{
    producer *p = ctx;
    pthread_mutex_lock(&p->lock);
    p->calls++;
    pthread_mutex_unlock(&p->lock);
    usleep(20000); /* long enough for concurrent readers to pile up */
    if (cfs_buf_reserve(out, p->size) < 0)
        return cfs_err_set(err, "out of memory");
    memset(out->data + out->len, p->fill, p->size);
    out->len += p->size;
    return 0;
}

typedef struct reader_arg {
    cfs_cache *cache;
    producer *prod;
} reader_arg;

static void *reader(void *arg)
{
    reader_arg *r = arg;
    cfs_buf b = {0};
    cfs_err err;
    int ok = cfs_cache_get(r->cache, "same", 4, produce, r->prod, &b, &err) == 0 &&
             b.len == r->prod->size && b.data[0] == r->prod->fill;
    cfs_buf_free(&b);
    return ok ? arg : NULL;
}

/* A cache of 10000 bytes in a new folder named from the template dir. */
static cfs_cache *temp_cache(char *dir, cfs_err *err)
{
    unit_temp_dir(dir);
    cfs_cache *c = cfs_cache_open(dir, 10000, NULL, err);
    CHECK(c != NULL);
    return c;
}

/* Creates (or empties) the file at path: 0, or -1 when it could not be written. */
static int make_empty_file(const char *path)
{
    FILE *f = fopen(path, "w");
    return f && fclose(f) == 0 ? 0 : -1;
}

static void test_cache(void)
{
    char dir[] = "/tmp/cfs-unit-cache-XXXXXX";
    cfs_err err;
    cfs_cache *c = temp_cache(dir, &err);
    if (!c)
        return;
    producer p = {PTHREAD_MUTEX_INITIALIZER, 0, 3000, 'a'};
    cfs_buf b = {0};
    CHECK(cfs_cache_get(c, "k1", 2, produce, &p, &b, &err) == 0 && b.len == 3000);
    cfs_buf_reset(&b);
    CHECK(cfs_cache_get(c, "k1", 2, produce, &p, &b, &err) == 0 && b.len == 3000 && p.calls == 1);
    CHECK(cfs_cache_size(c, "k1", 2) == 3000 && cfs_cache_size(c, "nope", 4) == -1);
    /* The bound holds: four 3000-byte entries cannot all stay in 10000 bytes. */
    for (int i = 2; i <= 4; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", i);
        cfs_buf_reset(&b);
        CHECK(cfs_cache_get(c, key, strlen(key), produce, &p, &b, &err) == 0);
    }
    cfs_cache_stats st;
    cfs_cache_stats_get(c, &st);
    CHECK(st.bytes <= 10000 && st.evicted == 1 && cfs_cache_size(c, "k1", 2) == -1);
    /* Single flight: 16 concurrent readers of a missing entry cause one production. */
    producer q = {PTHREAD_MUTEX_INITIALIZER, 0, 100, 'z'};
    reader_arg shared = {c, &q};
    CHECK(unit_all_succeed(16, reader, &shared) && q.calls == 1);
    cfs_cache_close(c);
    /* Persistent, and crash leftovers are dropped at open: a stray temporary and an entry file
     * whose index row never committed. */
    char stray_tmp[256], stray_entry[256];
    snprintf(stray_tmp, sizeof stray_tmp, "%s/tmp-1-1", dir);
    snprintf(stray_entry, sizeof stray_entry, "%s/999999", dir);
    CHECK(make_empty_file(stray_tmp) == 0);
    CHECK(make_empty_file(stray_entry) == 0);
    c = cfs_cache_open(dir, 10000, NULL, &err);
    CHECK(c != NULL);
    if (!c)
        return;
    struct stat sb;
    CHECK(stat(stray_tmp, &sb) < 0 && errno == ENOENT);
    CHECK(stat(stray_entry, &sb) < 0 && errno == ENOENT);
    cfs_buf_reset(&b);
    p.calls = 0;
    CHECK(cfs_cache_get(c, "k4", 2, produce, &p, &b, &err) == 0 && p.calls == 0 && b.len == 3000);
    /* An entry larger than the bound is served but not kept. */
    producer big = {PTHREAD_MUTEX_INITIALIZER, 0, 20000, 'b'};
    cfs_buf_reset(&b);
    CHECK(cfs_cache_get(c, "big", 3, produce, &big, &b, &err) == 0 && b.len == 20000);
    CHECK(cfs_cache_size(c, "big", 3) == -1);
    cfs_cache_close(c);
    cfs_buf_free(&b);
    unit_remove_folder(dir);
}

/* Work files count against the bound: a reservation evicts entries, entries then fit only
 * beside it, and what cannot fit even in an empty cache is refused without evicting. */
static void test_cache_work(void)
{
    char dir[] = "/tmp/cfs-unit-cachework-XXXXXX";
    cfs_err err;
    cfs_cache *c = temp_cache(dir, &err);
    if (!c)
        return;
    producer p = {PTHREAD_MUTEX_INITIALIZER, 0, 3000, 'w'};
    cfs_buf b = {0};
    for (int i = 0; i < 3; i++) {
        char key[16];
        snprintf(key, sizeof key, "w%d", i);
        cfs_buf_reset(&b);
        CHECK(cfs_cache_get(c, key, strlen(key), produce, &p, &b, &err) == 0);
    }
    CHECK(cfs_cache_reserve(c, 20000, &err) == -1 && err.status == CFS_ENEVERFITS);
    cfs_cache_stats st;
    cfs_cache_stats_get(c, &st);
    CHECK(st.entries == 3 && st.evicted == 0 && st.work_bytes == 0);
    CHECK(cfs_cache_reserve(c, 6000, &err) == 0);
    cfs_cache_stats_get(c, &st);
    CHECK(st.work_bytes == 6000 && st.bytes + st.work_bytes <= 10000 && st.evicted == 2);
    cfs_buf_reset(&b);
    CHECK(cfs_cache_get(c, "w9", 2, produce, &p, &b, &err) == 0);
    cfs_cache_stats_get(c, &st);
    CHECK(st.bytes + st.work_bytes <= 10000 && cfs_cache_size(c, "w9", 2) == 3000);
    CHECK(cfs_cache_reserve(c, 5000, &err) < 0 && err.status == CFS_ERETRY);
    cfs_cache_release(c, 6000);
    CHECK(cfs_cache_reserve(c, 5000, &err) == 0);
    cfs_cache_release(c, 5000);
    cfs_cache_stats_get(c, &st);
    CHECK(st.work_bytes == 0);
    cfs_cache_close(c);
    cfs_buf_free(&b);
    unit_remove_folder(dir);
}

/* Entry files say what they hold: a lost index is rebuilt from them, and an entry whose bytes
 * were altered is made again, never served. */
static void test_cache_entries_checked(void)
{
    char dir[] = "/tmp/cfs-unit-cacheentries-XXXXXX";
    cfs_err err;
    cfs_cache *c = temp_cache(dir, &err);
    if (!c)
        return;
    producer p = {PTHREAD_MUTEX_INITIALIZER, 0, 1000, 'e'};
    cfs_buf b = {0};
    CHECK(cfs_cache_get(c, "e1", 2, produce, &p, &b, &err) == 0);
    cfs_buf_reset(&b);
    CHECK(cfs_cache_get(c, "e2", 2, produce, &p, &b, &err) == 0 && p.calls == 2);
    cfs_cache_close(c);
    char path[256];
    snprintf(path, sizeof path, "%s/index.sqlite", dir);
    CHECK(unlink(path) == 0);
    c = cfs_cache_open(dir, 10000, NULL, &err);
    CHECK(c != NULL);
    if (!c)
        return;
    cfs_cache_stats st;
    cfs_cache_stats_get(c, &st);
    CHECK(st.entries == 2);
    cfs_buf_reset(&b);
    CHECK(cfs_cache_get(c, "e1", 2, produce, &p, &b, &err) == 0 && p.calls == 2 && b.len == 1000);
    /* One byte of e2's payload changed (the file's last byte): found out, made again. */
    int64_t size = cfs_cache_size(c, "e2", 2);
    CHECK(size == 1000);
    for (int id = 1; id <= 2; id++) {
        snprintf(path, sizeof path, "%s/%d", dir, id);
        FILE *f = fopen(path, "r+b");
        if (f && fseek(f, -1, SEEK_END) == 0)
            fputc('X', f);
        if (f)
            fclose(f);
    }
    cfs_buf_reset(&b);
    CHECK(cfs_cache_get(c, "e2", 2, produce, &p, &b, &err) == 0 && p.calls == 3 &&
          b.len == 1000 && b.data[999] == 'e');
    cfs_cache_stats_get(c, &st);
    CHECK(st.dropped == 1 && st.entries == 2);
    cfs_cache_close(c);
    cfs_buf_free(&b);
    unit_remove_folder(dir);
}

void unit_cache(void)
{
    test_cache();
    test_cache_work();
    test_cache_entries_checked();
}
