#include "cache.h"
#include "number.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A key some thread is producing right now: others wait on it instead of producing again. */
typedef struct flight {
    struct flight *next;
    void *key;
    size_t key_len;
    int waiters;
    int done;
} flight;

/* LRU touches waiting to be written: one transaction for many, instead of a write to the index
 * on every hit. A crash loses at most these, which only makes the LRU order a little stale. */
enum { TOUCH_BATCH = 512 };

typedef struct touch {
    int64_t id;
    uint64_t used;
} touch;

struct cfs_cache {
    char *dir;
    uint64_t max_bytes;
    uint64_t used, reserved;         /* entries; entries being written */
    uint64_t work;                   /* cfs_cache_reserve's bytes */
    uint64_t clock;                  /* LRU time: grows with every use */
    uint64_t tmp_counter;
    sqlite3 *db;
    pthread_mutex_t lock;            /* guards everything here, the db included */
    pthread_cond_t landed;
    flight *flights;
    cfs_cache_stats stats;
    sqlite3_stmt *find_st, *touch_st;
    touch touches[TOUCH_BATCH];
    size_t ntouches;
};

static void flush_touches(cfs_cache *c);

static int db_exec(cfs_cache *c, const char *sql, cfs_err *err)
{
    char *msg = NULL;
    if (sqlite3_exec(c->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        cfs_err_set(err, "cache index: %s", msg ? msg : "error");
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

static void entry_path(const cfs_cache *c, int64_t id, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%lld", c->dir, (long long)id);
}

/* A row is an entry only when its file exists with its size: anything else is a crash's
 * leftover, dropped here, before anything is served. */
static int reconcile(cfs_cache *c, cfs_err *err)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(c->db, "SELECT id, size FROM entries", -1, &st, NULL) != SQLITE_OK)
        return cfs_err_set(err, "cache index: %s", sqlite3_errmsg(c->db));
    int64_t *stale = NULL;
    size_t nstale = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0), size = sqlite3_column_int64(st, 1);
        char path[4096];
        entry_path(c, id, path, sizeof path);
        struct stat sb;
        if (stat(path, &sb) == 0 && sb.st_size == size) {
            c->used += (uint64_t)size;
            c->stats.entries++;
            continue;
        }
        int64_t *grown = realloc(stale, (nstale + 1) * sizeof *stale);
        if (grown) {
            stale = grown;
            stale[nstale++] = id;
        }
    }
    sqlite3_finalize(st);
    for (size_t i = 0; i < nstale; i++) {
        char sql[64];
        snprintf(sql, sizeof sql, "DELETE FROM entries WHERE id = %lld", (long long)stale[i]);
        db_exec(c, sql, err);
    }
    free(stale);
    /* Files the index does not know (temporaries, uncommitted inserts) go. */
    DIR *d = opendir(c->dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        uint64_t id;
        bool numbered = cfs_parse_u64(e->d_name, &id);
        bool known = false;
        if (numbered) {
            sqlite3_stmt *q;
            if (sqlite3_prepare_v2(c->db, "SELECT 1 FROM entries WHERE id = ?", -1, &q, NULL) ==
                SQLITE_OK) {
                sqlite3_bind_int64(q, 1, (sqlite3_int64)id);
                known = sqlite3_step(q) == SQLITE_ROW;
                sqlite3_finalize(q);
            }
        }
        if ((numbered && !known) || strncmp(e->d_name, "tmp-", 4) == 0) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", c->dir, e->d_name);
            unlink(path);
        }
    }
    if (d)
        closedir(d);
    return 0;
}

static int read_clock(cfs_cache *c)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(c->db, "SELECT coalesce(max(used), 0) FROM entries", -1, &st, NULL) !=
        SQLITE_OK)
        return -1;
    if (sqlite3_step(st) == SQLITE_ROW)
        c->clock = (uint64_t)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return 0;
}

static int make_dirs(const char *dir, cfs_err *err)
{
    char *p = strdup(dir);
    if (!p)
        return cfs_err_oom(err);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        mkdir(p, 0700);
        *s = '/';
    }
    int rc = mkdir(p, 0700) == 0 || errno == EEXIST ? 0 : -1;
    free(p);
    return rc < 0 ? cfs_err_set(err, "%s: cannot create the cache folder: %s", dir,
                                strerror(errno))
                  : 0;
}

cfs_cache *cfs_cache_open(const char *dir, uint64_t max_bytes, cfs_err *err)
{
    if (make_dirs(dir, err) < 0)
        return NULL;
    cfs_cache *c = calloc(1, sizeof *c);
    if (!c || !(c->dir = strdup(dir))) {
        free(c);
        cfs_err_oom(err);
        return NULL;
    }
    c->max_bytes = max_bytes;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->landed, NULL);
    char path[4096];
    snprintf(path, sizeof path, "%s/index.sqlite", dir);
    if (sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                          SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK) {
        cfs_err_set(err, "%s: cannot open the cache index: %s", path, sqlite3_errmsg(c->db));
        cfs_cache_close(c);
        return NULL;
    }
    sqlite3_busy_timeout(c->db, 5000);
    if (db_exec(c, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                   "CREATE TABLE IF NOT EXISTS entries (id INTEGER PRIMARY KEY, key BLOB UNIQUE "
                   "NOT NULL, size INTEGER NOT NULL, used INTEGER NOT NULL);"
                   "CREATE INDEX IF NOT EXISTS entries_used ON entries(used);", err) < 0 ||
        reconcile(c, err) < 0 || read_clock(c) < 0) {
        cfs_cache_close(c);
        return NULL;
    }
    if (sqlite3_prepare_v2(c->db, "SELECT id, size FROM entries WHERE key = ?", -1, &c->find_st,
                           NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(c->db, "UPDATE entries SET used = ? WHERE id = ?", -1, &c->touch_st,
                           NULL) != SQLITE_OK) {
        cfs_err_set(err, "%s: cache index: %s", path, sqlite3_errmsg(c->db));
        cfs_cache_close(c);
        return NULL;
    }
    return c;
}

void cfs_cache_close(cfs_cache *c)
{
    if (!c)
        return;
    if (c->db) {
        flush_touches(c);
        sqlite3_finalize(c->find_st);
        sqlite3_finalize(c->touch_st);
        sqlite3_close(c->db);
    }
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->landed);
    free(c->dir);
    free(c);
}

/* Under the lock: writes the touches held back, in one transaction. */
static void flush_touches(cfs_cache *c)
{
    if (c->ntouches == 0 || !c->touch_st)
        return;
    bool begun = sqlite3_exec(c->db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    for (size_t i = 0; i < c->ntouches; i++) {
        sqlite3_bind_int64(c->touch_st, 1, (sqlite3_int64)c->touches[i].used);
        sqlite3_bind_int64(c->touch_st, 2, c->touches[i].id);
        sqlite3_step(c->touch_st);
        sqlite3_reset(c->touch_st);
    }
    if (begun)
        sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL);
    c->ntouches = 0;
}

/* Under the lock: the entry's id and size, touching its LRU time. */
static int find(cfs_cache *c, const void *key, size_t key_len, int64_t *id, int64_t *size)
{
    sqlite3_stmt *st = c->find_st;
    sqlite3_bind_blob(st, 1, key, (int)key_len, SQLITE_STATIC);
    int found = sqlite3_step(st) == SQLITE_ROW;
    if (found) {
        *id = sqlite3_column_int64(st, 0);
        *size = sqlite3_column_int64(st, 1);
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (!found)
        return -1;
    if (c->ntouches == TOUCH_BATCH)
        flush_touches(c);
    c->touches[c->ntouches++] = (touch){*id, ++c->clock};
    return 0;
}

int64_t cfs_cache_size(cfs_cache *c, const void *key, size_t key_len)
{
    int64_t id, size;
    pthread_mutex_lock(&c->lock);
    int rc = find(c, key, key_len, &id, &size);
    pthread_mutex_unlock(&c->lock);
    return rc < 0 ? -1 : size;
}

/* Under the lock: opens the entry's file. An open file keeps its bytes even if the entry is
 * evicted meanwhile, so a reader never sees a vanished entry. */
static int open_entry(cfs_cache *c, const void *key, size_t key_len, int64_t *size)
{
    int64_t id;
    if (find(c, key, key_len, &id, size) < 0)
        return -1;
    char path[4096];
    entry_path(c, id, path, sizeof path);
    return open(path, O_RDONLY | O_CLOEXEC);
}

static int read_fd(int fd, int64_t size, cfs_buf *out, cfs_err *err)
{
    if (cfs_buf_reserve(out, (size_t)size) < 0) {
        close(fd);
        return cfs_err_oom(err);
    }
    size_t got = 0;
    while (got < (size_t)size) {
        ssize_t n = pread(fd, out->data + out->len + got, (size_t)size - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            close(fd);
            return cfs_err_set(err, "cache entry unreadable: %s", n < 0 ? strerror(errno)
                                                                        : "short file");
        }
        got += (size_t)n;
    }
    close(fd);
    out->len += got;
    return 0;
}

/* Under the lock: frees least recently used entries until `need` more bytes fit. Nothing is
 * evicted for bytes that could not fit even in an empty index. */
static bool make_room(cfs_cache *c, uint64_t need)
{
    if (need > c->max_bytes || c->reserved + c->work > c->max_bytes - need)
        return false;
    if (c->used + c->reserved + c->work + need > c->max_bytes)
        flush_touches(c);     /* the victims are chosen by the true order */
    while (c->used + c->reserved + c->work + need > c->max_bytes) {
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(c->db, "SELECT id, size FROM entries ORDER BY used LIMIT 1", -1,
                               &st, NULL) != SQLITE_OK)
            return false;
        int have = sqlite3_step(st) == SQLITE_ROW;
        int64_t id = have ? sqlite3_column_int64(st, 0) : 0;
        int64_t size = have ? sqlite3_column_int64(st, 1) : 0;
        sqlite3_finalize(st);
        if (!have)
            return false;       /* everything left is being written: no room now */
        char sql[64], path[4096];
        snprintf(sql, sizeof sql, "DELETE FROM entries WHERE id = %lld", (long long)id);
        if (sqlite3_exec(c->db, sql, NULL, NULL, NULL) != SQLITE_OK)
            return false;
        entry_path(c, id, path, sizeof path);
        unlink(path);
        c->used -= (uint64_t)size;
        c->stats.evicted++;
        c->stats.entries--;
    }
    return true;
}

static int write_tmp(const char *path, const cfs_buf *data)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    size_t off = 0;
    while (off < data->len) {
        ssize_t n = write(fd, data->data + off, data->len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            close(fd);
            unlink(path);
            return -1;
        }
        off += (size_t)n;
    }
    return close(fd);
}

/* Stores produced bytes: file first under a temporary name, then index row and rename in one
 * transaction. A crash between any two steps leaves a leftover reconcile() drops. */
static void store(cfs_cache *c, const void *key, size_t key_len, const cfs_buf *data)
{
    pthread_mutex_lock(&c->lock);
    bool room = make_room(c, data->len);
    if (room)
        c->reserved += data->len;
    uint64_t n = ++c->tmp_counter;
    pthread_mutex_unlock(&c->lock);
    if (!room)
        return;
    char tmp[4096], path[4096];
    snprintf(tmp, sizeof tmp, "%s/tmp-%ld-%llu", c->dir, (long)getpid(), (unsigned long long)n);
    int written = write_tmp(tmp, data);
    pthread_mutex_lock(&c->lock);
    c->reserved -= data->len;
    sqlite3_stmt *st = NULL;
    bool ok = written == 0 && sqlite3_exec(c->db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    if (ok && sqlite3_prepare_v2(c->db, "INSERT INTO entries (key, size, used) VALUES (?, ?, ?)",
                                 -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_blob(st, 1, key, (int)key_len, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)data->len);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)++c->clock);
        ok = sqlite3_step(st) == SQLITE_DONE;
        sqlite3_finalize(st);
        entry_path(c, sqlite3_last_insert_rowid(c->db), path, sizeof path);
        ok = ok && rename(tmp, path) == 0;
        ok = ok && sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK;
        if (ok) {
            c->used += data->len;
            c->stats.entries++;
        }
    }
    if (!ok) {
        sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
        unlink(tmp);
    }
    pthread_mutex_unlock(&c->lock);
}

int cfs_cache_reserve(cfs_cache *c, uint64_t bytes, cfs_err *err)
{
    pthread_mutex_lock(&c->lock);
    bool fits = make_room(c, bytes);
    if (fits)
        c->work += bytes;
    uint64_t work = c->work, max = c->max_bytes;
    pthread_mutex_unlock(&c->lock);
    if (fits)
        return 0;
    if (bytes > max) {
        return cfs_err_setc(err, CFS_ENEVERFITS, "the cache's bound is %.1f MiB",
                            (double)max / (1 << 20));
    }
    return cfs_err_setc(err, CFS_ERETRY, "the cache's bound is %.1f MiB, %.1f MiB of it reserved",
                       (double)max / (1 << 20), (double)work / (1 << 20));
}

void cfs_cache_release(cfs_cache *c, uint64_t bytes)
{
    pthread_mutex_lock(&c->lock);
    c->work -= bytes < c->work ? bytes : c->work;
    pthread_mutex_unlock(&c->lock);
}

static flight *find_flight(cfs_cache *c, const void *key, size_t key_len)
{
    for (flight *f = c->flights; f; f = f->next)
        if (f->key_len == key_len && memcmp(f->key, key, key_len) == 0)
            return f;
    return NULL;
}

static void land(cfs_cache *c, flight *f)
{
    for (flight **p = &c->flights; *p; p = &(*p)->next) {
        if (*p == f) {
            *p = f->next;
            break;
        }
    }
    f->done = 1;
    pthread_cond_broadcast(&c->landed);
    if (f->waiters == 0) {
        free(f->key);
        free(f);
    }
}

int cfs_cache_get(cfs_cache *c, const void *key, size_t key_len, cfs_cache_producer produce,
                  void *ctx, cfs_buf *out, cfs_err *err)
{
    pthread_mutex_lock(&c->lock);
    for (;;) {
        int64_t size;
        int fd = open_entry(c, key, key_len, &size);
        if (fd >= 0) {
            c->stats.hits++;
            pthread_mutex_unlock(&c->lock);
            return read_fd(fd, size, out, err);
        }
        flight *f = find_flight(c, key, key_len);
        if (!f)
            break;
        f->waiters++;
        while (!f->done)
            pthread_cond_wait(&c->landed, &c->lock);
        if (--f->waiters == 0) {
            free(f->key);
            free(f);
        }
        /* Landed: look again; if it failed or was too big to store, this thread produces. */
    }
    flight *f = calloc(1, sizeof *f);
    if (f && !(f->key = malloc(key_len ? key_len : 1))) {
        free(f);
        f = NULL;
    }
    if (f) {
        memcpy(f->key, key, key_len);
        f->key_len = key_len;
        f->next = c->flights;
        c->flights = f;
    }
    c->stats.misses++;
    pthread_mutex_unlock(&c->lock);
    size_t before = out->len;
    int rc = produce(ctx, out, err);
    if (rc == 0) {
        cfs_buf made = {out->data + before, out->len - before, out->len - before};
        store(c, key, key_len, &made);
    } else {
        out->len = before;
    }
    pthread_mutex_lock(&c->lock);
    if (rc == 0)
        c->stats.produced++;
    if (f)
        land(c, f);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

void cfs_cache_stats_get(cfs_cache *c, cfs_cache_stats *out)
{
    pthread_mutex_lock(&c->lock);
    *out = c->stats;
    out->bytes = c->used;
    out->work_bytes = c->work;
    out->max_bytes = c->max_bytes;
    pthread_mutex_unlock(&c->lock);
}
