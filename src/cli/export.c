#include "export.h"
#include "format.h"
#include "unpacked.h"
#include "path.h"
#include "s3.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "catalog.h"
#include "prepare.h"
#include "session.h"
#include "sources.h"
#include "strfmt.h"

static int write_file(const char *path, const void *data, size_t len, cfs_err *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return cfs_err_set(err, "%s: cannot create: %s", path, strerror(errno));
    const char *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            cfs_err_set(err, "%s: write failed: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    if (close(fd) < 0)
        return cfs_err_set(err, "%s: write failed: %s", path, strerror(errno));
    return 0;
}

/* The folder sink: keys are paths below root. */
typedef struct folder_sink {
    cfs_sink base;
    const char *root;
} folder_sink;

static int folder_dir(cfs_sink *s, const char *key, cfs_err *err)
{
    char *path = cfs_path_join(((folder_sink *)s)->root, key);
    int rc = path ? 0 : cfs_err_oom(err);
    if (rc == 0 && mkdir(path, 0755) < 0)
        rc = cfs_err_set(err, "%s: cannot create: %s", path, strerror(errno));
    free(path);
    return rc;
}

static int folder_put(cfs_sink *s, const char *key, const void *data, size_t len, bool json,
                      cfs_err *err)
{
    (void)json;
    char *path = cfs_path_join(((folder_sink *)s)->root, key);
    int rc = path ? write_file(path, data, len, err) : cfs_err_oom(err);
    free(path);
    return rc;
}

static void remove_tree(const char *path);

static void folder_discard(cfs_sink *s, const char *key)
{
    char *path = cfs_path_join(((folder_sink *)s)->root, key);
    if (path)
        remove_tree(path);
    free(path);
}

static int folder_drain(cfs_sink *s, cfs_err *err)
{
    (void)s;
    (void)err;
    return 0;
}

static folder_sink folder_sink_at(const char *root)
{
    return (folder_sink){{folder_dir, folder_put, folder_discard, folder_drain}, root};
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void remove_tree(const char *path)
{
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int cfs_export_store(const cfs_store *st, const char *dir, int writers, cfs_err *err)
{
    folder_sink sink = folder_sink_at(NULL);
    return cfs_export_store_into(st, &sink.base, dir, writers, err);
}

/* Writes one prepared dataset's store into the staging folder; a failure refuses it. */
static void export_one(cfs_prepared *p, const cfs_options *opts, cfs_sink *sink)
{
    cfs_err err = {0};
    cfs_store_opts sopts = cfs_options_store(opts);
    cfs_store *st = cfs_store_new(p->ds, &sopts, &err);
    char *name = malloc(strlen(p->id) + sizeof ".zarr");
    int rc = st && name ? 0 : -1;
    if (rc == 0) {
        sprintf(name, "%s.zarr", p->id);
        rc = cfs_export_store_into(st, sink, name, 0, &err);
    }
    if (rc < 0) {
        char reason[sizeof err.msg + 64];
        snprintf(reason, sizeof reason, "%s; check that the file is complete and readable",
                 err.msg[0] ? err.msg : "out of memory");
        cfs_prepared_refuse(p, reason);
    }
    cfs_store_free(st);
    free(name);
}

/* The view of a dataset, read once; one being written is read again a few times. */
static int read_view(const char *folder, const cfs_prepared *p, cfs_session *view, cfs_err *err)
{
    for (int attempt = 1;; attempt++) {
        if (cfs_session_look(folder, p->source, p->part, view, err) < 0)
            return -1;
        if (cfs_session_take(view, folder, cfs_session_unlisted(p), err) == 0)
            return 0;
        if (err->status != CFS_ERETRY || attempt == 5) {
            cfs_session_clear(view);
            if (err->status != CFS_ERETRY)
                return -1;
            return cfs_session_look(folder, p->source, p->part, view, err) < 0 ||
                   !(view->refused = strdup("it kept changing while it was read: export again "
                                            "once it is written")) ? cfs_err_oom(err) : 0;
        }
        cfs_session_clear(view);
        nanosleep(&(struct timespec){0, 200000000}, NULL);
    }
}

/* The published views of the listed datasets, then (once they are stored) datasets.json. */
static int write_catalog(const char *src, const cfs_prepared_set *set, const cfs_options *opts,
                         cfs_sink *sink, FILE *log, cfs_err *err)
{
    struct stat st;
    const char *folder = stat(src, &st) == 0 && S_ISDIR(st.st_mode) ? src : NULL;
    cfs_catalog_entry *listed = calloc(set->n + 1, sizeof *listed);
    cfs_session *views = calloc(set->n + 1, sizeof *views);
    int rc = listed && views ? 0 : cfs_err_oom(err);
    size_t k = 0;
    for (size_t i = 0; rc == 0 && i < set->n; i++) {
        const cfs_prepared *p = &set->items[i];
        cfs_session *view = &views[i];
        rc = read_view(folder, p, view, err);
        cfs_session_report(view, NULL, log);
        if (rc < 0 || !p->ds || !p->embedding)
            continue;
        listed[k++] = (cfs_catalog_entry){p->id, view->bytes ? view->sha256 : NULL, view->len};
        char *name = view->bytes ? cfs_session_served_name(p->id) : NULL;
        if (view->bytes)
            rc = name ? sink->put(sink, name, view->bytes, view->len, false, err)
                      : cfs_err_oom(err);
        free(name);
    }
    char *note = rc == 0 ? cfs_catalog_default_note(listed, k, opts->default_id) : NULL;
    if (note)
        cfs_log(log, "%s", note);
    free(note);
    if (rc == 0 && sink->drain(sink, err) == 0)
        rc = cfs_export_doc(sink, "", "datasets.json",
                            cfs_catalog_json(listed, k, opts->default_id), err);
    else
        rc = -1;
    for (size_t i = 0; views && i < set->n; i++)
        cfs_session_clear(&views[i]);
    free(views);
    free(listed);
    return rc;
}

/* The staging folder is a hidden sibling of out, so the final rename stays on one filesystem. */
static char *sibling_path(const char *out, const char *tag)
{
    char *a = strdup(out), *b = strdup(out);
    char *path = NULL;
    if (a && b) {
        const char *dir = dirname(a), *base = basename(b);
        size_t len = strlen(dir) + strlen(base) + strlen(tag) + 32;
        if ((path = malloc(len)))
            snprintf(path, len, "%s/.%s.%s-%ld", dir, base, tag, (long)getpid());
    }
    free(a);
    free(b);
    return path;
}

static int check_paths(const char *src, const char *out, bool force, cfs_err *err)
{
    struct stat st;
    if (lstat(out, &st) == 0 && !force)
        return cfs_err_set(err, "%s already exists; pass --force to replace it", out);
    char *copy = strdup(out);
    if (!copy)
        return cfs_err_oom(err);
    int inside = cfs_path_inside(dirname(copy), src);
    free(copy);
    struct stat sst;
    if (inside && stat(src, &sst) == 0 && S_ISDIR(sst.st_mode))
        return cfs_err_set(err, "%s is inside the source folder %s; cellucid-fs never writes to "
                                "its sources, so choose an output folder elsewhere", out, src);
    return 0;
}

/* Moves the staging folder into place, replacing an old out (--force) only once all is done. */
static int publish(const char *stage, const char *out, cfs_err *err)
{
    struct stat st;
    char *old = NULL;
    if (lstat(out, &st) == 0) {
        if (!(old = sibling_path(out, "old")) || rename(out, old) < 0) {
            free(old);
            return cfs_err_set(err, "%s: cannot be replaced: %s", out, strerror(errno));
        }
    }
    if (rename(stage, out) < 0) {
        int e = errno;
        if (old)
            rename(old, out);
        free(old);
        return cfs_err_set(err, "%s: cannot be written: %s", out, strerror(e));
    }
    if (old)
        remove_tree(old);
    free(old);
    return 0;
}

/* Every store, then the published views, then (once they are all stored) the catalog: a reader
 * never sees a catalog listing a store or a view not yet whole. */
static int export_prepared(const char *src, cfs_prepared_set *set, const cfs_options *opts,
                           cfs_sink *sink, FILE *log, cfs_err *err)
{
    int refused = 0;
    for (size_t i = 0; i < set->n; i++) {
        if (set->items[i].ds)
            export_one(&set->items[i], opts, sink);
        cfs_prepared_report(&set->items[i], NULL, log);
        refused |= set->items[i].refused != NULL;
    }
    if (sink->drain(sink, err) < 0 || write_catalog(src, set, opts, sink, log, err) < 0 ||
        sink->drain(sink, err) < 0)
        return -1;
    return refused ? 2 : 0;
}

static int export_sources(const char *src, const cfs_options *opts, cfs_sink *sink, FILE *log,
                          const char *work, cfs_err *err)
{
    cfs_source_list sources;
    cfs_isolation iso = cfs_options_isolation(opts);
    cfs_detector *detector = cfs_detector_new(&iso);
    int listed = detector ? cfs_sources_list(src, detector, &sources, err) : cfs_err_oom(err);
    cfs_detector_free(detector);
    if (listed < 0)
        return -1;
    if (mkdir(work, 0700) < 0) {
        cfs_sources_free(&sources);
        return cfs_err_set(err, "%s: cannot create: %s", work, strerror(errno));
    }
    if (sources.n == 0) {
        cfs_sources_free(&sources);
        remove_tree(work);
        char list[768];
        return cfs_err_setc(err, CFS_ENOTFOUND, "%s: no single-cell input found (looked by "
                            "content for %s)", src, cfs_format_list_text(list, sizeof list));
    }
    cfs_prepared_set set = {0};
    int rc = cfs_prepare(&sources, opts, &set, err);
    if (rc == 0)
        rc = export_prepared(src, &set, opts, sink, log, err);
    cfs_prepared_set_free(&set);
    cfs_sources_free(&sources);
    remove_tree(work);
    return rc;
}

int cfs_export_into(const char *src, const cfs_options *opts_in, cfs_sink *sink, FILE *log,
                    const char *work, cfs_err *err)
{
    cfs_options options = *opts_in;
    options.layout.log = log;
    options.layout.workdir = work;
    /* Decompressed copies of compressed inputs live in the work folder, gone with it. */
    options.unpack = (cfs_unpacker){.copy = cfs_unpacked_in_folder, .ctx = (void *)work};
    return export_sources(src, &options, sink, log, work, err);
}

int cfs_export(const char *src, const char *out, const cfs_options *opts, bool force,
               FILE *log, cfs_err *err)
{
    if (cfs_s3_is_url(out))
        return cfs_export_s3(src, out, opts, log, err);
    if (check_paths(src, out, force, err) < 0)
        return -1;
    char *work = sibling_path(out, "work"), *stage = sibling_path(out, "tmp");
    int rc = work && stage ? 0 : cfs_err_oom(err);
    if (rc == 0 && mkdir(stage, 0755) < 0)
        rc = cfs_err_set(err, "%s: cannot create: %s", stage, strerror(errno));
    else if (rc == 0) {
        folder_sink sink = folder_sink_at(stage);
        rc = cfs_export_into(src, opts, &sink.base, log, work, err);
        if (rc >= 0 && publish(stage, out, err) < 0)
            rc = -1;
        if (rc < 0)
            remove_tree(stage);
    }
    free(work);
    free(stage);
    return rc;
}
