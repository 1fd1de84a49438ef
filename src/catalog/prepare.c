#include "prepare.h"

#include <stdlib.h>
#include <string.h>

#include "format.h"
#include "isolated.h"
#include "catalog.h"
#include "cellucid_meta.h"
#include "embedding.h"
#include "identity.h"
#include "layout.h"
#include "parallel.h"
#include "path.h"
#include "store.h"
#include "strfmt.h"

/* Threads that open sources at once, beside one more while workers do the reading. */
#define OPEN_THREADS 8

void cfs_prepared_refuse(cfs_prepared *p, const char *reason)
{
    free(p->refused);
    p->refused = strdup(reason);
    cfs_dataset_free(p->ds);
    p->ds = NULL;
    p->embedding = NULL;
}

/* Opens the decompressed copy of the source (compressed with codec) that the front end keeps;
 * the dataset's source is the one given. */
static int open_copy(cfs_prepared *p, const cfs_options *opts, const char *codec,
                     const cfs_isolation *iso, cfs_err *err)
{
    if (!opts->unpack.copy)
        return cfs_err_setc(err, CFS_EREFUSED, "a %s-compressed copy, which this command does "
                            "not decompress; decompress it first", codec);
    char *copy = NULL;
    if (opts->unpack.copy(opts->unpack.ctx, p->source, codec, p->progress, &copy, err) < 0)
        return -1;
    int rc = cfs_isolated_open(copy, iso, &p->ds, &p->damage, err);
    free(copy);
    if (rc == 0) {
        char *source = strdup(p->source);
        if (!source)
            return cfs_err_oom(err);
        free(p->ds->source);
        p->ds->source = source;
    }
    return rc;
}

/* Opens the source, or its decompressed copy where the front end makes one: for a compressed
 * copy a format reads only from disk, and for a compressed input of a format that reads its
 * whole input at open (R's stream: from a plain file it leaves the large vectors where they lie
 * instead of holding them in memory). The latter may wait to be opened in the background. */
static int open_source(cfs_prepared *p, const cfs_options *opts, cfs_err *err)
{
    const char *codec = NULL;
    cfs_isolation iso = cfs_options_isolation(opts);
    if (opts->unpack.copy && cfs_format_reads_whole(p->source, &codec)) {
        if (opts->unpack.defer && opts->unpack.defer(opts->unpack.ctx, p->source))
            return cfs_err_setc(err, CFS_ERETRY, "opened in the background once the mount is "
                                "up");
        if (codec)
            return open_copy(p, opts, codec, &iso, err);
    }
    /* Most sources open as they are: only a refused one is probed again for a compressed copy,
     * so the usual open reads the file's head once. */
    if (cfs_isolated_open(p->source, &iso, &p->ds, &p->damage, err) == 0)
        return 0;
    if (p->damage.happened)
        return -1;
    if (!cfs_format_needs_unpack(p->source, &codec))
        return -1;
    return open_copy(p, opts, codec, &iso, err);
}

static void open_one(cfs_prepared *p, const cfs_options *opts)
{
    cfs_err err = {0};
    cfs_layout_opts layout = opts->layout;
    const char *shown = opts->shown_root ? cfs_path_shown(opts->shown_root, p->source)
                                         : p->source;
    layout.progress = p->progress = cfs_progress_new(shown, opts->layout.log);
    cfs_cellucid_meta meta;
    if (open_source(p, opts, &err) < 0 && !p->ds && err.status == CFS_ERETRY) {
        p->pending = true;
        return;
    }
    if (!p->ds || cfs_cellucid_meta_check(p->ds, &meta, &err) < 0 ||
        (layout.source_ordered = meta.source_ordered, cfs_layout_apply(p->ds, &layout, &err)) < 0) {
        if (p->ds)
            cfs_isolated_fault(p->ds, &p->damage);     /* a worker lost laying it out */
        cfs_prepared_refuse(p, err.msg);
        return;
    }
    char *own = cfs_identity_source_id(p->ds);
    if (own) {
        p->id = own;
    } else {
        char *stem = cfs_source_stem(p->source);
        p->id = stem ? cfs_id_from_name(stem) : NULL;
        free(stem);
    }
    p->raw_id = p->id ? strdup(p->id) : NULL;
}

/* The store is made once to know it can be (a source whose store cannot be made is refused
 * now, not when it is read) and dropped: a front end makes it again when it needs it. */
static void check_store(cfs_prepared *p, const cfs_options *opts)
{
    cfs_store_opts sopts = {opts->codec};
    cfs_err err = {0};
    cfs_store *st = cfs_store_new(p->ds, &sopts, &err);
    if (st) {
        cfs_store_free(st);
        return;
    }
    cfs_isolated_fault(p->ds, &p->damage);
    cfs_prepared_refuse(p, err.msg);
}

static int name_one(cfs_prepared *p, const cfs_options *opts, cfs_err *err)
{
    char *stem = cfs_source_stem(p->source);
    p->name = stem ? cfs_identity_name(p->ds, stem, p->id) : NULL;
    free(stem);
    if (!p->name || cfs_identity_apply(p->ds, p->id, p->name, err) < 0)
        return cfs_err_oom(err);
    p->embedding = cfs_embedding_first(p->ds);
    check_store(p, opts);
    return 0;
}

/* Ids are made distinct over the datasets that opened, in source order. */
static int assign_ids(cfs_prepared_set *set, cfs_err *err)
{
    char **ids = calloc(set->n + 1, sizeof *ids);
    bool *clashed = calloc(set->n + 1, sizeof *clashed);
    size_t *owner = calloc(set->n + 1, sizeof *owner);
    size_t k = 0;
    int rc = ids && clashed && owner ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < set->n; i++) {
        bool serves = set->items[i].ds || (set->items[i].reused && set->items[i].id);
        if (set->items[i].ds && (!set->items[i].id || !set->items[i].raw_id))
            rc = -1;
        else if (serves) {
            owner[k] = i;
            ids[k++] = set->items[i].id;
        }
    }
    if (rc == 0)
        rc = cfs_catalog_distinct_ids(ids, k, clashed);
    for (size_t j = 0; rc == 0 && j < k; j++) {
        set->items[owner[j]].id = ids[j];
        set->items[owner[j]].id_clashed = clashed[j];
    }
    free(ids);
    free(clashed);
    free(owner);
    return rc < 0 ? cfs_err_oom(err) : 0;
}

/* A known source takes part in the ids with the id it was given before they were made
 * distinct, as if it had been opened. */
static int reuse(cfs_prepared *p, const cfs_known_source *k)
{
    p->reused = true;
    if (k->raw_id && !(p->id = strdup(k->raw_id)))
        return -1;
    return 0;
}

/* A known source whose distinct id is no longer the one it is served under: the id is baked
 * into its store (uns/cellucid), so it is opened again and takes the new id. */
static void reopen_if_renamed(cfs_prepared *p, const cfs_known_source *k,
                              const cfs_options *opts)
{
    if (!p->reused || !p->id || strcmp(p->id, k->id) == 0)
        return;
    char *wanted = p->id;
    bool clashed = p->id_clashed;
    p->id = NULL;
    p->reused = false;
    open_one(p, opts);
    /* Refused now, it still takes the new id: the version served under the old one must go,
     * since another source has that id now. */
    free(p->id);
    p->id = wanted;
    p->id_clashed = clashed;
}

/* One pass over the items, shared by threads: each takes the next item not taken. */
typedef struct pass {
    cfs_prepared_set *set;
    const cfs_options *opts;
    const cfs_known_source *known;
    bool naming;                /* name_one, else open_one */
    size_t next;                /* atomic */
    int failed;                 /* atomic: a name_one ran out of memory */
} pass;

static void *run_pass(void *arg)
{
    pass *ps = arg;
    size_t i;
    while ((i = __atomic_fetch_add(&ps->next, 1, __ATOMIC_RELAXED)) < ps->set->n) {
        cfs_prepared *p = &ps->set->items[i];
        cfs_err err = {0};
        if (ps->naming && p->ds && name_one(p, ps->opts, &err) < 0)
            __atomic_store_n(&ps->failed, 1, __ATOMIC_RELAXED);
        else if (!ps->naming && !(ps->known && ps->known[i].known))
            open_one(p, ps->opts);
    }
    return NULL;
}

/* Sources are opened (and named) on several threads: with reader workers the opens run in
 * the workers, so a folder of thousands opens on every core. */
static int run_passes(cfs_prepared_set *set, const cfs_options *opts,
                      const cfs_known_source *known, bool naming)
{
    cfs_isolation iso = cfs_options_isolation(opts);
    int threads = cfs_parallel_cpus(OPEN_THREADS) + (iso.off ? 0 : 1);
    if (!iso.off && threads > (int)(iso.readers ? iso.readers : CFS_ISOLATE_READERS))
        threads = (int)(iso.readers ? iso.readers : CFS_ISOLATE_READERS);
    if ((size_t)threads > set->n)
        threads = set->n ? (int)set->n : 1;
    pass ps = {set, opts, known, naming, 0, 0};
    cfs_parallel_run(threads, run_pass, &ps);
    return ps.failed ? -1 : 0;
}

int cfs_prepare_reusing(const cfs_source_list *sources, const cfs_options *opts,
                        const cfs_known_source *known, cfs_prepared_set *out, cfs_err *err)
{
    out->n = sources->n;
    out->items = calloc(sources->n ? sources->n : 1, sizeof *out->items);
    if (!out->items)
        return cfs_err_oom(err);
    for (size_t i = 0; i < sources->n; i++) {
        if (!(out->items[i].source = strdup(sources->paths[i])))
            return cfs_err_oom(err);
        if (known && known[i].known && reuse(&out->items[i], &known[i]) < 0)
            return cfs_err_oom(err);
    }
    run_passes(out, opts, known, false);
    if (assign_ids(out, err) < 0)
        return -1;
    for (size_t i = 0; known && i < out->n; i++)
        reopen_if_renamed(&out->items[i], &known[i], opts);
    if (run_passes(out, opts, known, true) < 0)
        return cfs_err_oom(err);
    return 0;
}

int cfs_prepare(const cfs_source_list *sources, const cfs_options *opts, cfs_prepared_set *out,
                cfs_err *err)
{
    return cfs_prepare_reusing(sources, opts, NULL, out, err);
}

void cfs_prepared_set_free(cfs_prepared_set *set)
{
    cfs_prepared_set_free_items(set);
    free(set->items);
    set->items = NULL;
    set->n = 0;
}

void cfs_prepared_set_free_items(cfs_prepared_set *set)
{
    for (size_t i = 0; i < set->n; i++) {
        cfs_prepared *p = &set->items[i];
        free(p->source);
        cfs_dataset_free(p->ds);     /* first: its jobs report to p->progress */
        cfs_progress_free(p->progress);
        free(p->raw_id);
        free(p->refused);
        free(p->id);
        free(p->name);
    }
}

void cfs_prepared_report(const cfs_prepared *p, const char *shown, FILE *log)
{
    const char *name = shown ? shown : p->source;
    if (p->pending) {
        cfs_log(log, "%s: opened in the background (decompressed into the cache first if "
                "compressed); served when done", name);
        return;
    }
    if (p->refused) {
        cfs_log(log, "%s: refused: %s", name, p->refused);
        return;
    }
    for (size_t i = 0; i < p->ds->nleftout; i++)
        cfs_log(log, "%s: left out %s: %s", name, p->ds->leftout[i].element,
                p->ds->leftout[i].reason);
    if (p->id_clashed)
        cfs_log(log, "%s: id clash: another source has the same id, so this one is served as "
                "'%s'", name, p->id);
    if (!p->embedding)
        cfs_log(log, "%s: not in datasets.json: %s", name,
                p->ds->no_embedding_hint ? p->ds->no_embedding_hint : CFS_NO_EMBEDDING_ADVICE);
}
