/* One store's keys into a sink (sink.h), through the store's flavour: the walk puts the folders
 * and documents, then a pool of writers puts the arrays' data keys. */
#include "export.h"
#include "flavour.h"
#include "parallel.h"
#include "path.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_WORKERS = 8 };

int cfs_export_doc(cfs_sink *sink, const char *dir, const char *name, char *text, cfs_err *err)
{
    char *key = cfs_path_join(dir, name);
    int rc = text && key ? sink->put(sink, key, text, strlen(text), true, err)
                         : cfs_err_oom(err);
    free(key);
    free(text);
    return rc;
}

/* The walk over a store's keys: folders and documents go to the sink at once; the arrays are
 * left for the writers, in a first view's order. */
typedef struct export_walk {
    const cfs_flavour *fl;
    const cfs_store *st;
    cfs_sink *sink;
    const char *root;
    size_t *arrays;
    size_t narrays;
} export_walk;

static int walk_folder(void *ctx, size_t node, const char *path, cfs_err *err)
{
    (void)node;
    export_walk *x = ctx;
    if (!path[0])
        return 0;               /* the store's own folder is made before the walk */
    char *dir = cfs_path_join(x->root, path);
    int rc = dir ? x->sink->dir(x->sink, dir, err) : cfs_err_oom(err);
    free(dir);
    return rc;
}

static int walk_doc(void *ctx, size_t node, const char *path, const char *name, char *text,
                    cfs_err *err)
{
    (void)node;
    export_walk *x = ctx;
    char *dir = cfs_path_join(x->root, path);
    if (!dir) {
        free(text);
        return cfs_err_oom(err);
    }
    int rc = cfs_export_doc(x->sink, dir, name, text, err);
    free(dir);
    return rc;
}

/* The folders among an array's data keys below dir (a flavour whose keys have several parts);
 * the entries of one data folder are all folders or all keys. */
static int make_key_folders(export_walk *x, const cfs_store_node *n, cfs_keydir dir,
                            const char *path, cfs_err *err)
{
    uint64_t count = cfs_flavour_nentries(x->fl, n, dir);
    int rc = 0;
    for (uint64_t i = 0; rc == 0 && i < count; i++) {
        char name[64];
        cfs_keydir child;
        uint64_t k;
        if (cfs_flavour_entry(x->fl, n, dir, i, name, sizeof name, &child, &k) != CFS_KEY_FOLDER)
            break;
        char *sub = cfs_path_join(path, name);
        rc = sub ? x->sink->dir(x->sink, sub, err) : cfs_err_oom(err);
        if (rc == 0)
            rc = make_key_folders(x, n, child, sub, err);
        free(sub);
    }
    return rc;
}

static int walk_data(void *ctx, size_t node, cfs_err *err)
{
    export_walk *x = ctx;
    x->arrays[x->narrays++] = node;
    char *dir = cfs_path_join(x->root, x->st->nodes[node].path);
    int rc = dir ? make_key_folders(x, &x->st->nodes[node], (cfs_keydir){0, 0}, dir, err)
                 : cfs_err_oom(err);
    free(dir);
    return rc;
}

/* Data keys are made by a small pool: reads serialise in the reader, encoding runs in parallel.
 * Keys are handed out from the arrays in turn, and from an array no other worker is writing
 * into while there is one: creating a file holds its folder's lock, so workers writing into one
 * folder (X/data's tens of thousands of chunks) would wait for each other, and the kernel spins
 * a waiter on that lock (12 % of an export's samples when handing out in turn alone let two
 * workers meet in one folder). */
typedef struct key_job {
    const export_walk *x;
    uint64_t *next;         /* per array: its next key */
    uint64_t *count;        /* per array: its keys */
    unsigned *writing;      /* per array: workers writing one of its keys now */
    size_t turn;            /* the array whose turn it is */
    pthread_mutex_t lock;
    int failed;
    cfs_err err;
} key_job;

/* Under the job's lock: the next array in turn with keys left, one nobody writes into first. */
static bool pick_array(const key_job *job, bool alone, size_t *a)
{
    size_t na = job->x->narrays;
    for (size_t i = 0; i < na; i++) {
        size_t k = (job->turn + i) % na;
        if (job->next[k] < job->count[k] && (!alone || job->writing[k] == 0)) {
            *a = k;
            return true;
        }
    }
    return false;
}

static bool next_key(key_job *job, size_t *a, uint64_t *key)
{
    pthread_mutex_lock(&job->lock);
    bool more = !job->failed && (pick_array(job, true, a) || pick_array(job, false, a));
    if (more) {
        *key = job->next[*a]++;
        job->writing[*a]++;
        job->turn = *a + 1;
    }
    pthread_mutex_unlock(&job->lock);
    return more;
}

static int write_key(const export_walk *x, const cfs_store_node *n, uint64_t k, cfs_buf *buf,
                     cfs_err *err)
{
    char key[256];
    cfs_flavour_key(x->fl, n, k, key, sizeof key);
    cfs_buf_reset(buf);
    if (cfs_flavour_key_bytes(x->fl, x->st, n, k, buf, err) < 0)
        return -1;
    char *dir = cfs_path_join(x->root, n->path);
    char *path = dir ? cfs_path_join(dir, key) : NULL;
    int rc = path ? x->sink->put(x->sink, path, buf->data, buf->len, false, err)
                  : cfs_err_oom(err);
    free(dir);
    free(path);
    return rc;
}

static void *key_worker(void *arg)
{
    key_job *job = arg;
    cfs_buf buf = {0};
    size_t a;
    uint64_t k;
    cfs_err err;
    while (next_key(job, &a, &k)) {
        int rc = write_key(job->x, &job->x->st->nodes[job->x->arrays[a]], k, &buf, &err);
        pthread_mutex_lock(&job->lock);
        job->writing[a]--;
        if (rc < 0 && !job->failed) {
            job->err = err;
            job->failed = 1;
        }
        pthread_mutex_unlock(&job->lock);
    }
    cfs_buf_free(&buf);
    return NULL;
}

/* writers: key writers at once; 0 for one a CPU. */
static int write_keys(const export_walk *x, int writers, cfs_err *err)
{
    size_t n = x->narrays ? x->narrays : 1;
    key_job job = {.x = x};
    job.next = calloc(n, sizeof *job.next);
    job.count = calloc(n, sizeof *job.count);
    job.writing = calloc(n, sizeof *job.writing);
    int rc = job.next && job.count && job.writing ? 0 : cfs_err_oom(err);
    for (size_t i = 0; rc == 0 && i < x->narrays; i++)
        job.count[i] = cfs_flavour_nkeys(x->fl, &x->st->nodes[x->arrays[i]]);
    if (rc == 0) {
        pthread_mutex_init(&job.lock, NULL);
        cfs_parallel_run(writers > 0 ? writers : cfs_parallel_cpus(MAX_WORKERS), key_worker,
                         &job);
        pthread_mutex_destroy(&job.lock);
        if (job.failed) {
            *err = job.err;
            rc = -1;
        }
    }
    free(job.next);
    free(job.count);
    free(job.writing);
    return rc;
}

int cfs_export_store_into(const cfs_store *st, cfs_sink *sink, const char *root, int writers,
                          cfs_err *err)
{
    export_walk x = {cfs_flavour_of(&st->opts), st, sink, root,
                     malloc((st->nnodes ? st->nnodes : 1) * sizeof *x.arrays), 0};
    static const cfs_walker walker = {walk_folder, walk_doc, walk_data};
    if (!x.arrays)
        return cfs_err_oom(err);
    int rc = sink->dir(sink, root, err);
    if (rc < 0) {
        free(x.arrays);
        return rc;
    }
    rc = cfs_flavour_walk(x.fl, st, &walker, &x, err);
    if (rc == 0)
        rc = write_keys(&x, writers, err);
    if (rc < 0)
        sink->discard(sink, root);
    free(x.arrays);
    return rc;
}
