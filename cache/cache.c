#include "cache.h"
#include "entry.h"
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
    FILE *log;
    bool store_failing;              /* the last entry could not be written */
    bool shrunk;                     /* the bound was lowered to what the disk holds */
};

/* The index's format (PRAGMA user_version): its rows name entry files with a header (entry.h).
 * An index of another format is rebuilt from the files, which drops files without a header. */
enum { INDEX_FORMAT = 2 };
/* Entries found untrustworthy are logged up to this many times per run. */
enum { DROPS_LOGGED = 20 };

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

/* Under a transaction: makes the numbered file at path, which has no row, an entry again if it
 * is a whole entry file (a store whose commit was lost, or an index lost or rebuilt). Its use is
 * the oldest, so it goes first. */
static bool adopt(cfs_cache *c, sqlite3_stmt *insert, uint64_t id, const char *path)
{
    void *key;
    size_t key_len;
    uint64_t len;
    if (cfs_entry_identify(path, &key, &key_len, &len) < 0)
        return false;
    sqlite3_bind_int64(insert, 1, (sqlite3_int64)id);
    sqlite3_bind_blob(insert, 2, key, (int)key_len, SQLITE_STATIC);
    sqlite3_bind_int64(insert, 3, (sqlite3_int64)len);
    bool ok = sqlite3_step(insert) == SQLITE_DONE;     /* a key stored twice: the later goes */
    sqlite3_reset(insert);
    sqlite3_clear_bindings(insert);
    free(key);
    if (ok) {
        c->used += cfs_entry_file_size(key_len, len);
        c->stats.entries++;
    }
    return ok;
}

/* A row is an entry only when its file exists with the size its row implies: anything else is a
 * crash's leftover, dropped here, before anything is served. Numbered files without a row are
 * taken back when they are whole entry files (each names its key), and removed otherwise, as
 * are the temporaries. Returns how many files were taken back. */
static int64_t reconcile(cfs_cache *c, cfs_err *err)
{
    sqlite3_stmt *st, *known = NULL, *insert = NULL;
    if (sqlite3_prepare_v2(c->db, "SELECT id, size, length(key) FROM entries", -1, &st, NULL) !=
        SQLITE_OK)
        return cfs_err_set(err, "cache index: %s", sqlite3_errmsg(c->db));
    int64_t *stale = NULL;
    size_t nstale = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0), size = sqlite3_column_int64(st, 1);
        uint64_t bytes = cfs_entry_file_size((size_t)sqlite3_column_int64(st, 2), (uint64_t)size);
        char path[4096];
        entry_path(c, id, path, sizeof path);
        struct stat sb;
        if (size >= 0 && stat(path, &sb) == 0 && (uint64_t)sb.st_size == bytes) {
            c->used += bytes;
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
    bool begun = sqlite3_exec(c->db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK;
    for (size_t i = 0; i < nstale; i++) {
        char sql[64];
        snprintf(sql, sizeof sql, "DELETE FROM entries WHERE id = %lld", (long long)stale[i]);
        db_exec(c, sql, err);
    }
    free(stale);
    int64_t adopted = 0;
    if (sqlite3_prepare_v2(c->db, "SELECT 1 FROM entries WHERE id = ?", -1, &known, NULL) !=
            SQLITE_OK ||
        sqlite3_prepare_v2(c->db, "INSERT INTO entries (id, key, size, used) VALUES (?, ?, ?, 0)",
                           -1, &insert, NULL) != SQLITE_OK) {
        sqlite3_finalize(known);
        if (begun)
            sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
        return cfs_err_set(err, "cache index: %s", sqlite3_errmsg(c->db));
    }
    DIR *d = opendir(c->dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        uint64_t id;
        bool numbered = cfs_parse_u64(e->d_name, &id) && id <= INT64_MAX;
        bool kept = false;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", c->dir, e->d_name);
        if (numbered) {
            sqlite3_bind_int64(known, 1, (sqlite3_int64)id);
            kept = sqlite3_step(known) == SQLITE_ROW;
            sqlite3_reset(known);
            if (!kept && (kept = adopt(c, insert, id, path)))
                adopted++;
        }
        if ((numbered && !kept) || strncmp(e->d_name, "tmp-", 4) == 0)
            unlink(path);
    }
    if (d)
        closedir(d);
    sqlite3_finalize(known);
    sqlite3_finalize(insert);
    if (begun && sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        return cfs_err_set(err, "cache index: %s", sqlite3_errmsg(c->db));
    return adopted;
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

/* A single integer a statement gives, or -1. */
static int64_t db_int(cfs_cache *c, const char *sql)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(c->db, sql, -1, &st, NULL) != SQLITE_OK)
        return -1;
    int64_t v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return v;
}

/* Whether the index can be trusted to be what this version wrote: its pages whole (SQLite's
 * quick check), its format this one. A reason in err when not. */
static bool index_sound(cfs_cache *c, cfs_err *err)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(c->db, "PRAGMA quick_check", -1, &st, NULL) != SQLITE_OK) {
        cfs_err_set(err, "is damaged (%s)", sqlite3_errmsg(c->db));
        return false;
    }
    int rc = sqlite3_step(st);
    const unsigned char *first = rc == SQLITE_ROW ? sqlite3_column_text(st, 0) : NULL;
    bool whole = first && strcmp((const char *)first, "ok") == 0;
    if (!whole)
        cfs_err_set(err, "is damaged (%.200s)", first ? (const char *)first
                                                       : sqlite3_errmsg(c->db));
    sqlite3_finalize(st);
    if (!whole)
        return false;
    int64_t tables = db_int(c, "SELECT count(*) FROM sqlite_master WHERE name = 'entries'");
    int64_t format = db_int(c, "PRAGMA user_version");
    if (tables > 0 && format != INDEX_FORMAT) {
        cfs_err_set(err, "was written by another version of cellucid-fs");
        return false;
    }
    return true;
}

/* Why an index could not be opened: what the caller may do about it. */
typedef enum index_trouble { INDEX_OTHER, INDEX_DAMAGED, INDEX_FULL } index_trouble;

/* Under open_index: -1 with err saying why the last SQLite call failed, and what kind of
 * trouble it is. */
static int index_failed(cfs_cache *c, index_trouble *trouble, cfs_err *err)
{
    int code = sqlite3_errcode(c->db) & 0xff, e = sqlite3_system_errno(c->db);
    *trouble = code == SQLITE_CORRUPT || code == SQLITE_NOTADB ? INDEX_DAMAGED
               : code == SQLITE_FULL || e == ENOSPC || e == EDQUOT ? INDEX_FULL
                                                                   : INDEX_OTHER;
    return cfs_err_set(err, "%s (%s)", *trouble == INDEX_DAMAGED ? "is damaged" : "cannot be used",
                       sqlite3_errmsg(c->db));
}

/* Opens and checks DIR/index.sqlite: 0, or -1 with err and the trouble: INDEX_DAMAGED when the
 * file is there but cannot be trusted (the caller may then delete it and make it anew),
 * INDEX_FULL when its disk has no room for it. *created when it had no table yet. */
static int open_index(cfs_cache *c, const char *path, index_trouble *trouble, bool *created,
                      cfs_err *err)
{
    *trouble = INDEX_OTHER;
    *created = false;
    if (sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                          SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK)
        return index_failed(c, trouble, err);
    sqlite3_busy_timeout(c->db, 5000);
    if (sqlite3_exec(c->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", NULL, NULL,
                     NULL) != SQLITE_OK)
        return index_failed(c, trouble, err);
    if (!index_sound(c, err)) {
        *trouble = INDEX_DAMAGED;
        return -1;
    }
    *created = db_int(c, "SELECT count(*) FROM sqlite_master WHERE name = 'entries'") == 0;
    char sql[320];
    snprintf(sql, sizeof sql, "CREATE TABLE IF NOT EXISTS entries (id INTEGER PRIMARY KEY, key "
                              "BLOB UNIQUE NOT NULL, size INTEGER NOT NULL, used INTEGER NOT "
                              "NULL); CREATE INDEX IF NOT EXISTS entries_used ON entries(used);"
                              "PRAGMA user_version = %d;", INDEX_FORMAT);
    if (sqlite3_exec(c->db, sql, NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(c->db, "SELECT id, size FROM entries WHERE key = ?", -1, &c->find_st,
                           NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(c->db, "UPDATE entries SET used = ? WHERE id = ?", -1, &c->touch_st,
                           NULL) != SQLITE_OK)
        return index_failed(c, trouble, err);
    return 0;
}

static void close_index(cfs_cache *c)
{
    sqlite3_finalize(c->find_st);
    sqlite3_finalize(c->touch_st);
    sqlite3_close(c->db);
    c->find_st = c->touch_st = NULL;
    c->db = NULL;
}

static void remove_index(const char *path)
{
    static const char *const parts[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s%s", path, parts[i]);
        unlink(p);
    }
}

/* Removes every entry file and temporary; how many entries went. */
static int64_t empty_folder(cfs_cache *c)
{
    int64_t gone = 0;
    DIR *d = opendir(c->dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        uint64_t id;
        bool numbered = cfs_parse_u64(e->d_name, &id);
        if (!numbered && strncmp(e->d_name, "tmp-", 4) != 0)
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", c->dir, e->d_name);
        if (unlink(path) == 0 && numbered)
            gone++;
    }
    if (d)
        closedir(d);
    return gone;
}

cfs_cache *cfs_cache_open(const char *dir, uint64_t max_bytes, FILE *log, cfs_err *err)
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
    c->log = log;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->landed, NULL);
    char path[4096];
    snprintf(path, sizeof path, "%s/index.sqlite", dir);
    index_trouble trouble;
    bool created;
    cfs_err why = {0};
    bool usable = open_index(c, path, &trouble, &created, &why) == 0;
    if (!usable && trouble != INDEX_OTHER) {
        /* Damaged, its rows cannot be trusted: the entry files say what they hold, so they make
         * it anew. No room for it on a full disk: the entries go too, so that it fits. */
        close_index(c);
        remove_index(path);
        if (trouble == INDEX_FULL) {
            int64_t gone = empty_folder(c);
            if (log)
                fprintf(log, "cellucid-fs: cache %s: its disk is full, with no room for its "
                             "index: emptied (%lld entries)\n", dir, (long long)gone);
            memset(&why, 0, sizeof why);
        }
        cfs_err again = {0};
        usable = open_index(c, path, &trouble, &created, &again) == 0;
        if (!usable)
            why = again;
    }
    cfs_err failed = {0};
    int64_t adopted = usable ? reconcile(c, &failed) : -1;
    if (adopted < 0 && usable)
        why = failed;
    if (adopted < 0 || read_clock(c) < 0) {
        cfs_err_set(err, "%s: the cache index %s", path, why.msg[0] ? why.msg : "cannot be read");
        cfs_cache_close(c);
        return NULL;
    }
    if (log && created && (why.msg[0] || adopted > 0))
        fprintf(log, "cellucid-fs: cache index %s %s: rebuilt from its entry files (%lld kept)\n",
                path, why.msg[0] ? why.msg : "was missing", (long long)adopted);
    return c;
}

void cfs_cache_close(cfs_cache *c)
{
    if (!c)
        return;
    if (c->db) {
        flush_touches(c);
        close_index(c);
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
static int open_entry(cfs_cache *c, const void *key, size_t key_len, int64_t *id, int64_t *size)
{
    if (find(c, key, key_len, id, size) < 0)
        return -1;
    char path[4096];
    entry_path(c, *id, path, sizeof path);
    return open(path, O_RDONLY | O_CLOEXEC);
}

/* Under the lock: forgets the entry (row and file) whose file was not what its row says. */
static void drop_entry(cfs_cache *c, int64_t id, size_t key_len, int64_t size, const cfs_err *why)
{
    char sql[64], path[4096];
    snprintf(sql, sizeof sql, "DELETE FROM entries WHERE id = %lld", (long long)id);
    entry_path(c, id, path, sizeof path);
    if (sqlite3_exec(c->db, sql, NULL, NULL, NULL) == SQLITE_OK && sqlite3_changes(c->db) > 0) {
        uint64_t bytes = cfs_entry_file_size(key_len, (uint64_t)size);
        unlink(path);
        c->used -= bytes < c->used ? bytes : c->used;
        c->stats.entries--;
    }
    if (c->log && c->stats.dropped < DROPS_LOGGED)
        fprintf(c->log, "cellucid-fs: cache entry %s %s: dropped, made again%s\n", path, why->msg,
                c->stats.dropped + 1 == DROPS_LOGGED ? " (further ones are not logged)" : "");
    c->stats.dropped++;
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
        if (sqlite3_prepare_v2(c->db, "SELECT id, size, length(key) FROM entries ORDER BY used "
                                      "LIMIT 1", -1, &st, NULL) != SQLITE_OK)
            return false;
        int have = sqlite3_step(st) == SQLITE_ROW;
        int64_t id = have ? sqlite3_column_int64(st, 0) : 0;
        uint64_t bytes = have ? cfs_entry_file_size((size_t)sqlite3_column_int64(st, 2),
                                                    (uint64_t)sqlite3_column_int64(st, 1))
                              : 0;
        sqlite3_finalize(st);
        if (!have)
            return false;       /* everything left is being written: no room now */
        char sql[64], path[4096];
        snprintf(sql, sizeof sql, "DELETE FROM entries WHERE id = %lld", (long long)id);
        if (sqlite3_exec(c->db, sql, NULL, NULL, NULL) != SQLITE_OK)
            return false;
        entry_path(c, id, path, sizeof path);
        unlink(path);
        c->used -= bytes < c->used ? bytes : c->used;
        c->stats.evicted++;
        c->stats.entries--;
    }
    return true;
}

/* Under the lock: the folder's disk is full before the bound is reached (cache_size is larger
 * than the disk holds): the bound becomes what the cache holds now, so entries are evicted to
 * make room from now on instead of failing. */
static void shrink_to_disk(cfs_cache *c, int e)
{
    uint64_t now = c->used + c->reserved + c->work;
    if (now >= c->max_bytes)
        return;
    if (c->log && !c->shrunk)
        fprintf(c->log, "cellucid-fs: cache %s: %s with %.1f MiB in the cache: it keeps within "
                        "that from now (cache_size is %.1f MiB; free space there or lower it)\n",
                c->dir, strerror(e), (double)now / (1 << 20), (double)c->max_bytes / (1 << 20));
    c->max_bytes = now;
    c->shrunk = true;
}

/* Under the lock: logs when entries stop being stored, and when they are stored again. */
static void note_store(cfs_cache *c, bool ok, const char *why)
{
    if (!ok)
        c->stats.store_failures++;
    if (ok == !c->store_failing)
        return;
    c->store_failing = !ok;
    if (!c->log)
        return;
    if (ok)
        fprintf(c->log, "cellucid-fs: cache %s: entries are stored again\n", c->dir);
    else
        fprintf(c->log, "cellucid-fs: cache %s: cannot store entries (%s): chunks are served "
                        "uncached until it can\n", c->dir, why);
}

/* Under the lock: the new entry's row, and its file renamed into place, in one transaction.
 * *full when the index found no room on the disk. */
static bool commit_entry(cfs_cache *c, const void *key, size_t key_len, size_t len,
                         const char *tmp, bool *full, char *why, size_t why_len)
{
    sqlite3_stmt *st = NULL;
    char path[4096] = "";
    bool renamed = false;
    bool ok = sqlite3_exec(c->db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK &&
              sqlite3_prepare_v2(c->db, "INSERT INTO entries (key, size, used) VALUES (?, ?, ?)",
                                 -1, &st, NULL) == SQLITE_OK;
    if (ok) {
        sqlite3_bind_blob(st, 1, key, (int)key_len, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)len);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)++c->clock);
        ok = sqlite3_step(st) == SQLITE_DONE;
    }
    sqlite3_finalize(st);
    if (!ok)
        snprintf(why, why_len, "its index: %s", sqlite3_errmsg(c->db));
    if (ok) {
        entry_path(c, sqlite3_last_insert_rowid(c->db), path, sizeof path);
        ok = renamed = rename(tmp, path) == 0;
        if (!ok)
            snprintf(why, why_len, "%s", strerror(errno));
    }
    if (ok && sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        snprintf(why, why_len, "its index: %s", sqlite3_errmsg(c->db));
        ok = false;
    }
    if (!ok) {
        *full = (sqlite3_errcode(c->db) & 0xff) == SQLITE_FULL;
        sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
        unlink(renamed ? path : tmp);
    }
    return ok;
}

/* Stores produced bytes: the entry file first under a temporary name, then index row and rename
 * in one transaction. A crash between any two steps leaves a leftover reconcile() drops or takes
 * back whole. Bytes that cannot be stored are served all the same (not kept). */
static void store(cfs_cache *c, const void *key, size_t key_len, const cfs_buf *data)
{
    uint64_t bytes = cfs_entry_file_size(key_len, data->len);
    for (int attempt = 0; attempt < 2; attempt++) {
        pthread_mutex_lock(&c->lock);
        bool room = make_room(c, bytes);
        if (room)
            c->reserved += bytes;
        uint64_t n = ++c->tmp_counter;
        pthread_mutex_unlock(&c->lock);
        if (!room)
            return;
        char tmp[4096], why[512];
        snprintf(tmp, sizeof tmp, "%s/tmp-%ld-%llu", c->dir, (long)getpid(), (unsigned long long)n);
        int written = cfs_entry_write(tmp, key, key_len, data);
        int e = errno;
        pthread_mutex_lock(&c->lock);
        c->reserved -= bytes;
        bool full = written < 0 && (e == ENOSPC || e == EDQUOT);
        bool ok = false;
        if (written < 0)
            snprintf(why, sizeof why, "%s", strerror(e));
        else
            ok = commit_entry(c, key, key_len, data->len, tmp, &full, why, sizeof why);
        if (ok) {
            c->used += bytes;
            c->stats.entries++;
        }
        if (full && attempt == 0) {
            shrink_to_disk(c, ENOSPC);
            /* The write-ahead log gives back the room it took; then evictions make more. */
            sqlite3_exec(c->db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL);
        }
        if (ok || !full || attempt == 1)
            note_store(c, ok, why);
        pthread_mutex_unlock(&c->lock);
        if (ok || !full)
            return;
    }
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
    bool trusted = true;     /* until an entry of this key was not what its row says */
    for (;;) {
        int64_t id, size;
        int fd = trusted ? open_entry(c, key, key_len, &id, &size) : -1;
        if (fd >= 0) {
            pthread_mutex_unlock(&c->lock);
            size_t before = out->len;
            cfs_err why;
            int rc = cfs_entry_read(fd, key, key_len, (uint64_t)size, out, &why);
            close(fd);
            pthread_mutex_lock(&c->lock);
            if (rc == 0) {
                c->stats.hits++;
                pthread_mutex_unlock(&c->lock);
                return 0;
            }
            out->len = before;
            if (why.status == CFS_ENOMEM) {
                pthread_mutex_unlock(&c->lock);
                *err = why;
                return -1;
            }
            drop_entry(c, id, key_len, size, &why);
            trusted = false;
            continue;
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
