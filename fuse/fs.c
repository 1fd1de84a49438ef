/*
 * Kernel requests to volume nodes, through libfuse's low-level API: stable inode numbers, long
 * entry and attribute timeouts (content is immutable per source version), cached negative
 * lookups (clients probe for keys that do not exist), keep_cache, read-only. Where the kernel
 * can, it opens files itself (no-open mode): a warm file costs a static server no round trip.
 */
#define FUSE_USE_VERSION 312

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blocks.h"
#include "cache.h"
#include "remote.h"
#include "volume.h"
#include "watch.h"
#include "files.h"
#include "guard.h"
#include "mount.h"
#include "strfmt.h"

enum { LONG_TIMEOUT = 86400 };

/* The status document as the kernel was last told it is (rendered at a lookup): the reads that
 * follow must get bytes of exactly that size, and its mtime (so nginx's ETag) moves whenever
 * its bytes do. */
typedef struct status_doc {
    pthread_mutex_t lock;
    uint64_t ino;
    cfs_buf text;
    struct timespec mtime;
} status_doc;

/* What the request handlers share. */
typedef struct mount_state {
    cfs_volume *vol;
    cfs_files *files;
    status_doc status;
    bool kernel_opens;      /* the kernel's no-open mode (op_open) */
} mount_state;

/* Slots of fuse/files.h: twice the loop's threads, so that the files being read at one moment
 * do not push each other out between their pieces. */
enum { LOOP_THREADS = 16, FILE_SLOTS = 2 * LOOP_THREADS };
/* Bytes kept by files nobody reads at the moment: a client that asked for a part of a file
 * (an HTTP range) may never come back for the rest, and the kernel keeps what it was given. */
#define FILE_IDLE_BYTES ((size_t)32 << 20)

static mount_state *state_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

static cfs_volume *volume_of(fuse_req_t req)
{
    return state_of(req)->vol;
}

static void to_stat(const cfs_vattr *a, struct stat *st)
{
    memset(st, 0, sizeof *st);
    st->st_ino = a->ino;
    st->st_mode = a->is_dir ? S_IFDIR | 0555 : S_IFREG | 0444;
    st->st_nlink = a->is_dir ? 2 : 1;
    st->st_size = (off_t)a->size;
    st->st_blksize = 65536;
    st->st_blocks = (blkcnt_t)((a->size + 511) / 512);
    st->st_mtim = st->st_ctim = st->st_atim = a->mtime;
}

static void reply_piece(fuse_req_t req, const cfs_buf *b, size_t size, off_t off)
{
    size_t start = (size_t)off < b->len ? (size_t)off : b->len;
    size_t n = b->len - start < size ? b->len - start : size;
    fuse_reply_buf(req, (const char *)b->data + start, n);
}

/* A time after prev: the kernel drops a file's cached pages when its mtime moves, and two
 * renderings may fall within one tick of the clock. */
static struct timespec later_than(struct timespec prev)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (now.tv_sec > prev.tv_sec || (now.tv_sec == prev.tv_sec && now.tv_nsec > prev.tv_nsec))
        return now;
    prev.tv_nsec++;
    if (prev.tv_nsec == 1000000000L) {
        prev.tv_sec++;
        prev.tv_nsec = 0;
    }
    return prev;
}

static bool same_bytes(const cfs_buf *a, const cfs_buf *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

/* Renders the status document; a new text becomes the one reads get, with a new mtime. The
 * size and mtime of a are those of the text reads get. */
static void status_refresh(mount_state *s, cfs_vattr *a)
{
    status_doc *d = &s->status;
    cfs_buf fresh = {0};
    cfs_err err = {0};
    int rc = cfs_volume_read_all(s->vol, a->ino, &fresh, &err);
    pthread_mutex_lock(&d->lock);
    if (rc == 0 && (d->ino != a->ino || !same_bytes(&fresh, &d->text))) {
        cfs_buf old = d->text;
        d->text = fresh;
        fresh = old;
        d->ino = a->ino;
        d->mtime = later_than(d->mtime);
    }
    a->size = d->ino == a->ino ? d->text.len : 0;
    a->mtime = d->mtime;
    pthread_mutex_unlock(&d->lock);
    cfs_buf_free(&fresh);
}

/* The size and mtime of the status text reads get now. A getattr does not render it anew: a
 * reader's fstat and its reads to EOF (the kernel asks getattr again at a read past the size it
 * knows) must see one text, or the reader gets the head of one and the tail of another. Only a
 * lookup, that is a new open or stat by name, renders it. */
static void status_told(mount_state *s, cfs_vattr *a)
{
    status_doc *d = &s->status;
    pthread_mutex_lock(&d->lock);
    bool known = d->ino == a->ino;
    if (known) {
        a->size = d->text.len;
        a->mtime = d->mtime;
    }
    pthread_mutex_unlock(&d->lock);
    if (!known)
        status_refresh(s, a);
}

static bool is_status(mount_state *s, fuse_ino_t ino)
{
    pthread_mutex_lock(&s->status.lock);
    bool known = s->status.ino == ino;
    pthread_mutex_unlock(&s->status.lock);
    return known;
}

static void read_status(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off)
{
    status_doc *d = &state_of(req)->status;
    pthread_mutex_lock(&d->lock);
    if (d->ino != ino) {
        /* A read before any lookup of the status document: render it now. */
        pthread_mutex_unlock(&d->lock);
        cfs_vattr a = {.ino = ino};
        status_refresh(state_of(req), &a);
        pthread_mutex_lock(&d->lock);
    }
    reply_piece(req, &d->text, size, off);
    pthread_mutex_unlock(&d->lock);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    cfs_vattr a;
    cfs_err err = {0};
    int rc = cfs_volume_lookup(volume_of(req), parent, name, &a, &err);
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    if (rc == -ENOENT) {
        /* A negative entry: ino 0 with a timeout makes the kernel remember the 404. */
        e.entry_timeout = LONG_TIMEOUT;
        fuse_reply_entry(req, &e);
        return;
    }
    if (rc < 0) {
        if (rc == -EIO)     /* the volume's message names the file */
            cfs_log(stderr, "%s", err.msg);
        fuse_reply_err(req, -rc);
        return;
    }
    if (a.volatile_size)
        status_refresh(state_of(req), &a);
    e.ino = a.ino;
    e.generation = 1;
    to_stat(&a, &e.attr);
    e.attr_timeout = a.volatile_size ? 0 : LONG_TIMEOUT;
    /* datasets.json and the views it names change together: each open looks both up again,
     * so no kernel entry pairs a new catalog with an old view, or the other way round */
    e.entry_timeout = a.volatile_size || a.volatile_name ? 0 : LONG_TIMEOUT;
    fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    cfs_vattr a;
    if (cfs_volume_getattr(volume_of(req), ino, &a) < 0) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    if (a.volatile_size)
        status_told(state_of(req), &a);
    struct stat st;
    to_stat(&a, &st);
    fuse_reply_attr(req, &st, a.volatile_size ? 0 : LONG_TIMEOUT);
}

typedef struct dir_fill {
    fuse_req_t req;
    char *buf;
    size_t size, used;
} dir_fill;

static int emit_entry(void *ctx, const char *name, uint64_t ino, bool is_dir, uint64_t next)
{
    dir_fill *f = ctx;
    struct stat st = {.st_ino = ino, .st_mode = is_dir ? S_IFDIR : S_IFREG};
    size_t need = fuse_add_direntry(f->req, NULL, 0, name, NULL, 0);
    if (f->used + need > f->size)
        return 1;
    fuse_add_direntry(f->req, f->buf + f->used, f->size - f->used, name, &st, (off_t)next);
    f->used += need;
    return 0;
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    (void)fi;
    dir_fill f = {req, malloc(size), size, 0};
    if (!f.buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    int rc = cfs_volume_readdir(volume_of(req), ino, (uint64_t)off, emit_entry, &f);
    if (rc < 0)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_buf(req, f.buf, f.used);
    free(f.buf);
}

/* Reads: a file's bytes are fetched at the first read that reaches us (never at open, so a warm
 * file, served by the kernel's page cache, never touches the cache index) and shared by all the
 * pieces the kernel asks for (fuse/files.h). */
static int load_file(void *ctx, uint64_t ino, cfs_buf *out, cfs_err *err)
{
    return cfs_volume_read_all(ctx, ino, out, err);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    /* A second guard: on the ro mount the VFS refuses write opens before they get here. */
    if ((fi->flags & O_ACCMODE) != O_RDONLY) {
        fuse_reply_err(req, EROFS);
        return;
    }
    if (state_of(req)->kernel_opens) {
        /* From now on the kernel opens files itself, with keep_cache: no open and no release
         * round trip per request of a static server, which opens the file for each. */
        fuse_reply_err(req, ENOSYS);
        return;
    }
    cfs_vattr a;
    if (cfs_volume_getattr(volume_of(req), ino, &a) < 0) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    fi->keep_cache = !a.volatile_size;
    fi->direct_io = a.volatile_size;
    fuse_reply_open(req, fi);
}

static void read_failed(fuse_req_t req, fuse_ino_t ino, const cfs_err *err)
{
    /* Never a partial or wrong chunk: the read fails and the mount goes on. */
    cfs_log(stderr, "inode %llu: %s", (unsigned long long)ino, err->msg);
    fuse_reply_err(req, EIO);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    (void)fi;
    mount_state *s = state_of(req);
    if (is_status(s, ino)) {
        /* Its getattr renders it: not once more for every read. */
        read_status(req, ino, size, off);
        return;
    }
    cfs_vattr a;
    cfs_err err = {0};
    if (cfs_volume_getattr(s->vol, ino, &a) < 0) {
        cfs_err_set(&err, "no such file");
        read_failed(req, ino, &err);
        return;
    }
    if (a.volatile_size) {
        read_status(req, ino, size, off);
        return;
    }
    cfs_file_version v = {ino, a.size, a.mtime};
    cfs_file *file = cfs_files_get(s->files, &v, &err);
    if (!file) {
        read_failed(req, ino, &err);
        return;
    }
    const cfs_buf *b = cfs_file_bytes(file);
    reply_piece(req, b, size, off);
    cfs_files_put(s->files, file, (size_t)off + size >= b->len);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    mount_state *s = userdata;
    /* Page-cached status.json stays fresh only if the kernel drops its pages when the mtime
     * moves (status_refresh), so the kernel opening files needs both. */
    unsigned both = FUSE_CAP_NO_OPEN_SUPPORT | FUSE_CAP_AUTO_INVAL_DATA;
    s->kernel_opens = (conn->capable & both) == both;
    if (s->kernel_opens)
        conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
    /* readdirplus would make the kernel stat every listed chunk, forcing its synthesis. */
    conn->want &= ~(unsigned)(FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO);
    conn->want |= FUSE_CAP_ASYNC_READ;
    conn->max_read = 1 << 20;    /* must equal the max_read mount option */
}

static const struct fuse_lowlevel_ops ops = {
    .init = op_init,
    .lookup = op_lookup,
    .getattr = op_getattr,
    .readdir = op_readdir,
    .open = op_open,
    .read = op_read,
};

/* $XDG_CACHE_HOME/cellucid-fs, or /var/cache/cellucid-fs for root, else ~/.cache/... */
static void default_cache_dir(char *buf, size_t len)
{
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (xdg && *xdg) {
        snprintf(buf, len, "%s/cellucid-fs", xdg);
    } else if (geteuid() == 0) {
        snprintf(buf, len, "/var/cache/cellucid-fs");
    } else {
        const char *home = getenv("HOME");
        snprintf(buf, len, "%s/.cache/cellucid-fs", home && *home ? home : "/tmp");
    }
}

static int check_paths(const char *src, const char *mnt)
{
    struct stat st;
    if (!cfs_is_url(src) && stat(src, &st) < 0) {
        fprintf(stderr, "cellucid-fs: %s: cannot be read: %s\n", src, strerror(errno));
        return -1;
    }
    if (stat(mnt, &st) < 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "cellucid-fs: %s: the mount point must be an existing folder\n", mnt);
        return -1;
    }
    if (cfs_guard_is_mount_point(mnt)) {
        fprintf(stderr, "cellucid-fs: %s is already a mount point; unmount it first "
                        "(fusermount3 -u %s) or mount elsewhere\n", mnt, mnt);
        return -1;
    }
    char rs[PATH_MAX], rm[PATH_MAX];
    if (!cfs_is_url(src) && realpath(src, rs) && realpath(mnt, rm) && strncmp(rm, rs, strlen(rs)) == 0 &&
        (rm[strlen(rs)] == '/' || rm[strlen(rs)] == '\0')) {
        fprintf(stderr, "cellucid-fs: %s is inside the source %s; mount it elsewhere\n", mnt, src);
        return -1;
    }
    return 0;
}

/* libfuse's options for a mount of src. The source names the mount (fsname: the SOURCE of
 * findmnt and df), as mount(8) names the others, so that mount -a finds an fstab line's folder
 * already mounted; in libfuse's option syntax a backslash makes the next character plain. */
static char *session_options(const char *src, const char *fuse_opts)
{
    char *opts = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&opts, &len);
    if (!out)
        return NULL;
    fputs("ro,fsname=", out);
    for (const char *c = src; *c; c++) {
        if (*c == ',' || *c == '\\')
            fputc('\\', out);
        fputc(*c, out);
    }
    fprintf(out, ",subtype=cellucid-fs,max_read=1048576%s%s", fuse_opts[0] ? "," : "", fuse_opts);
    if (fclose(out) != 0) {
        free(opts);
        return NULL;
    }
    return opts;
}

static struct fuse_session *new_session(const char *src, const char *fuse_opts, bool debug,
                                        mount_state *st)
{
    char *opts = session_options(src, fuse_opts);
    if (!opts)
        return NULL;
    char *argv[] = {"cellucid-fs", "-o", opts, debug ? "-d" : NULL, NULL};
    struct fuse_args args = FUSE_ARGS_INIT(debug ? 4 : 3, argv);
    struct fuse_session *se = fuse_session_new(&args, &ops, sizeof ops, st);
    /* The parse leaves args holding copies of what it did not take: they are ours to free. */
    fuse_opt_free_args(&args);
    free(opts);
    return se;
}

/* After a source changes: drop the kernel's cached entry (and data) of what changed. */
static void invalidate(void *ctx, uint64_t parent, const char *name, uint64_t ino)
{
    struct fuse_session *se = ctx;
    fuse_lowlevel_notify_inval_entry(se, parent, name, strlen(name));
    if (ino)
        fuse_lowlevel_notify_inval_inode(se, ino, 0, 0);
}

static int serve(struct fuse_session *se)
{
    struct fuse_loop_config *cfg = fuse_loop_cfg_create();
    if (!cfg)
        return -1;
    fuse_loop_cfg_set_clone_fd(cfg, 0);
    fuse_loop_cfg_set_max_threads(cfg, LOOP_THREADS);
    int rc = fuse_session_loop_mt(se, cfg);
    fuse_loop_cfg_destroy(cfg);
    return rc;
}

/* The blocks of remote sources (src/net) kept in the cache, beside the chunks (§11). */
static int cache_block_get(void *cache, const void *key, size_t key_len, cfs_block_producer make,
                           void *make_ctx, cfs_buf *out, cfs_err *err)
{
    return cfs_cache_get(cache, key, key_len, make, make_ctx, out, err);
}

static bool cache_block_has(void *cache, const void *key, size_t key_len)
{
    return cfs_cache_size(cache, key, key_len) >= 0;
}

int cfs_fuse_mount(const char *src, const char *mnt, const cfs_options *opts, bool foreground,
                   bool debug)
{
    if (check_paths(src, mnt) < 0)
        return 1;
    /* The daemon runs in "/": every path it keeps must be absolute. */
    char abs_src[PATH_MAX], cache_dir[4096], work[4200], unpacked[4200];
    if (cfs_is_url(src)) {
        snprintf(abs_src, sizeof abs_src, "%s", src);
    } else if (!realpath(src, abs_src)) {
        fprintf(stderr, "cellucid-fs: %s: %s\n", src, strerror(errno));
        return 1;
    }
    src = abs_src;
    if (opts->cache_dir[0] && opts->cache_dir[0] != '/') {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd)) {
            fprintf(stderr, "cellucid-fs: cannot resolve cache_dir=%s\n", opts->cache_dir);
            return 1;
        }
        if (strlen(cwd) + strlen(opts->cache_dir) + 2 > sizeof cache_dir) {
            fprintf(stderr, "cellucid-fs: cache_dir=%s: path too long\n", opts->cache_dir);
            return 1;
        }
        strcpy(cache_dir, cwd);
        strcat(cache_dir, "/");
        strcat(cache_dir, opts->cache_dir);
    } else if (opts->cache_dir[0]) {
        snprintf(cache_dir, sizeof cache_dir, "%s", opts->cache_dir);
    } else {
        default_cache_dir(cache_dir, sizeof cache_dir);
    }
    snprintf(work, sizeof work, "%s/work", cache_dir);
    snprintf(unpacked, sizeof unpacked, "%s/unpacked", cache_dir);
    /* Everything that can fail loudly happens before the daemon detaches from the terminal. */
    cfs_err err = {0};
    /* The lock before the cache is opened: opening reconciles the folder, which would take
     * away the temporaries and new entries of a daemon using it. Held until the daemon exits:
     * it is inherited across the daemon's fork. */
    int lock = cfs_cache_make_dir(cache_dir, &err) == 0 ? cfs_guard_lock_cache(cache_dir, &err)
                                                         : -1;
    if (lock < 0) {
        fprintf(stderr, "cellucid-fs: %s\n", err.msg);
        return 1;
    }
    cfs_cache *probe = cfs_cache_open(cache_dir, opts->cache_size, stderr, &err);
    if (!probe) {
        fprintf(stderr, "cellucid-fs: %s\n", err.msg);
        close(lock);
        return 1;
    }
    cfs_cache_close(probe);
    mkdir(work, 0700);
    mkdir(unpacked, 0700);
    cfs_volume *vol = cfs_volume_open(src, opts, NULL, work, unpacked, stderr, &err);
    if (!vol) {
        fprintf(stderr, "cellucid-fs: %s\n", err.msg);
        return 1;
    }
    mount_state st = {.vol = vol,
                      .files = cfs_files_new(FILE_SLOTS, FILE_IDLE_BYTES, load_file, vol)};
    pthread_mutex_init(&st.status.lock, NULL);
    struct fuse_session *se = st.files ? new_session(src, opts->fuse_opts, debug, &st) : NULL;
    int status = 1;
    if (se && fuse_set_signal_handlers(se) == 0) {
        if (fuse_session_mount(se, mnt) == 0) {
            fuse_daemonize(foreground || debug);
            cfs_guard_note_pid(lock);
            /* SQLite connections must not cross a fork: the daemon opens its own. */
            cfs_cache *cache = cfs_cache_open(cache_dir, opts->cache_size, stderr, &err);
            cfs_watch *watch = NULL;
            if (cache) {
                cfs_volume_set_cache(vol, cache);
                cfs_block_store blocks = {cache_block_get, cache, cache_block_has};
                cfs_blocks_set_store(&blocks);
                cfs_volume_on_change(vol, invalidate, se);
                /* Threads start after the fork: the watcher, then libfuse's workers. */
                watch = cfs_watch_start(src, vol, &err);
                if (!watch)
                    fprintf(stderr, "cellucid-fs: %s (sources are not watched)\n", err.msg);
                /* An unmount or a signal ends the loop normally. */
                status = serve(se) == 0 || fuse_session_exited(se) ? 0 : 1;
                cfs_watch_stop(watch);
            } else {
                fprintf(stderr, "cellucid-fs: %s\n", err.msg);
            }
            fuse_session_unmount(se);
            cfs_volume_close(vol);
            vol = NULL;
            cfs_blocks_set_store(NULL);
            cfs_cache_close(cache);
        }
        fuse_remove_signal_handlers(se);
    }
    if (se)
        fuse_session_destroy(se);
    cfs_files_free(st.files);
    cfs_buf_free(&st.status.text);
    pthread_mutex_destroy(&st.status.lock);
    cfs_volume_close(vol);
    close(lock);
    return status;
}
