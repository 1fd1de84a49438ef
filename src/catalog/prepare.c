#include "prepare.h"
#include "remote.h"

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

/* Opens the decompressed copy of the source (compressed with codec) that the front end keeps,
 * or a URL's fetched copy; the dataset's source is the one given. */
static int open_copy(cfs_prepared *p, const cfs_options *opts, const char *codec,
                     const cfs_isolation *iso, cfs_err *err)
{
    if (!opts->unpack.copy && cfs_is_url(p->source))
        return cfs_err_setc(err, CFS_EREFUSED, "an input read whole, which this command does "
                            "not fetch; download it first");
    if (!opts->unpack.copy)
        return cfs_err_setc(err, CFS_EREFUSED, "a %s-compressed copy, which this command does "
                            "not decompress; decompress it first", codec);
    char *copy = NULL;
    if (opts->unpack.copy(opts->unpack.ctx, p->source, codec, p->progress, &copy, err) < 0)
        return -1;
    int rc = cfs_isolated_open_part(copy, p->part, iso, &p->ds, &p->damage, err);
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
    iso.keep_worker = true;             /* for read_for_naming; open_one lets go */
    bool remote = cfs_is_url(p->source);
    /* A URL not read in parts is fetched once into the work space (§11), in the background. */
    bool fetched = remote && cfs_format_fetched_whole(p->source, &codec);
    if (fetched || (!remote && opts->unpack.copy && cfs_format_reads_whole(p->source, &codec))) {
        if (opts->unpack.copy && opts->unpack.defer && opts->unpack.defer(opts->unpack.ctx,
                                                                          p->source))
            return cfs_err_setc(err, CFS_ERETRY, "opened in the background once the mount is "
                                "up");
        if (codec || fetched)
            return open_copy(p, opts, codec, &iso, err);
    }
    /* Most sources open as they are: only a refused one is probed again for a compressed copy,
     * so the usual open reads the file's head once. */
    if (cfs_isolated_open_part(p->source, p->part, &iso, &p->ds, &p->damage, err) == 0)
        return 0;
    if (p->damage.happened)
        return -1;
    if (remote || !cfs_format_needs_unpack(p->source, &codec))
        return -1;
    return open_copy(p, opts, codec, &iso, err);
}

/* The id an opened dataset asks for: the source's own, else from its file's name (and part). */
static void set_raw_id(cfs_prepared *p)
{
    free(p->id);
    free(p->raw_id);
    p->id = cfs_identity_wanted_id(p->ds, p->source, p->part);
    p->raw_id = p->id ? strdup(p->id) : NULL;
}

/* The dataset's own name, or NULL: it is named by its id then (name_one). */
static void set_own_name(cfs_prepared *p)
{
    char *stem = cfs_source_part_stem(p->source, p->part);
    free(p->name);
    p->name = stem ? cfs_identity_own_name(p->ds, stem) : NULL;
    free(stem);
}

/* The store is made once to know it can be (a source whose store cannot be made is refused,
 * once ids are made, not when it is read) and dropped: a front end makes it again when it
 * needs it. It is made with the id the dataset asks for: the distinct id and the name given
 * later change only strings in memory (uns/cellucid). */
static void check_store(cfs_prepared *p, const char *id, const cfs_options *opts)
{
    cfs_store_opts sopts = cfs_options_store(opts);
    cfs_err err = {0};
    cfs_store *st = NULL;
    if (cfs_identity_apply(p->ds, id, p->name ? p->name : id, &err) == 0)
        st = cfs_store_new(p->ds, &sopts, &err);
    if (st) {
        cfs_store_free(st);
        return;
    }
    cfs_isolated_fault(p->ds, &p->damage);
    p->unservable = strdup(err.msg);
    if (!p->unservable)
        cfs_prepared_refuse(p, err.msg);
}

/* What naming needs of the source itself (its own name, its first drawable embedding, whether
 * its store can be made) is read right after the open, while the source still has its reader
 * worker (kept from the open until open_one lets go): between the opening and the naming pass
 * the pool hands its workers on to other sources (16 workers for thousands of sources), and a
 * read after that opens the source again in another worker (docs/design.md §2.4), which cost
 * every source a second open. */
static void read_for_naming(cfs_prepared *p, const char *id, const cfs_options *opts)
{
    if (!id)
        return;                 /* out of memory: the ids fail */
    p->read_for_naming = true;
    set_own_name(p);
    p->embedding = cfs_embedding_first(p->ds);
    check_store(p, id, opts);
}

static void open_one(cfs_prepared *p, const cfs_options *opts)
{
    cfs_err err = {0};
    cfs_layout_opts layout = opts->layout;
    layout.codec = cfs_codec_for_layout(opts->codec);
    /* A part's progress is named by its source: status.json names the part beside it. */
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
        cfs_isolated_let_go(p->ds);
        cfs_prepared_refuse(p, err.msg);
        return;
    }
    set_raw_id(p);
    /* An input of several datasets becomes an item per part first (expand_parts), named by
     * its part: read when named. */
    if (p->part || cfs_dataset_part_datasets(p->ds) < 2)
        read_for_naming(p, p->raw_id, opts);
    cfs_isolated_let_go(p->ds);
}

static int name_one(cfs_prepared *p, const cfs_options *opts, cfs_err *err)
{
    if (!p->read_for_naming) {
        read_for_naming(p, p->id, opts);
        if (!p->ds)
            return 0;                   /* refused: out of memory */
    }
    if (p->unservable) {
        cfs_prepared_refuse(p, p->unservable);
        return 0;
    }
    if (!p->name && !(p->name = strdup(p->id)))
        return cfs_err_oom(err);
    return cfs_identity_apply(p->ds, p->id, p->name, err);
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

/* The set being made, and what the caller serves of each item (NULL: it was opened). */
typedef struct builder {
    cfs_prepared_set *set;
    size_t cap;
    const cfs_known_dataset **known;
} builder;

static int grow(builder *b)
{
    if (b->set->n < b->cap)
        return 0;
    size_t cap = b->cap ? b->cap * 2 : 16;
    cfs_prepared *items = realloc(b->set->items, cap * sizeof *items);
    if (items)
        b->set->items = items;
    const cfs_known_dataset **known = items ? realloc(b->known, cap * sizeof *known) : NULL;
    if (!known)
        return -1;
    b->known = known;
    b->cap = cap;
    return 0;
}

static cfs_prepared *add_item(builder *b, const char *source, size_t from, const char *part)
{
    if (grow(b) < 0)
        return NULL;
    cfs_prepared *p = &b->set->items[b->set->n];
    *p = (cfs_prepared){.source = strdup(source), .part = part ? strdup(part) : NULL,
                        .from = from};
    if (!p->source || (part && !p->part)) {
        free(p->source);
        free(p->part);
        return NULL;
    }
    b->known[b->set->n++] = NULL;
    return p;
}

/* Moves an item of another set to the end of this one. */
static int move_item(builder *b, const cfs_prepared *p, const cfs_known_dataset *known)
{
    if (grow(b) < 0)
        return -1;
    b->set->items[b->set->n] = *p;
    b->known[b->set->n++] = known;
    return 0;
}

/* A known dataset takes part in the ids with the id it was given before they were made
 * distinct, as if it had been opened. */
static int reuse(builder *b, const char *source, size_t from, const cfs_known_dataset *k)
{
    cfs_prepared *p = add_item(b, source, from, k->part);
    if (!p)
        return -1;
    b->known[b->set->n - 1] = k;
    p->reused = true;
    if (k->raw_id && !(p->id = strdup(k->raw_id)))
        return -1;
    return 0;
}

/* The item opened, in place of the one with this part of its source: it keeps its dataset
 * and is named by its part. */
static void take_opened(cfs_prepared *q, const cfs_prepared *opened)
{
    char *part = q->part;
    free(q->source);
    *q = *opened;
    q->part = part;
    set_raw_id(q);
}

/* Each item opened that holds several datasets (its reader lists them as parts) becomes an
 * item per part, in the input's order, in its place: the one opened keeps its dataset, the
 * others wait for the next opening pass. How many items wait so; -1 when out of memory. */
static ptrdiff_t expand_parts(builder *b)
{
    cfs_prepared_set old = *b->set;
    const cfs_known_dataset **old_known = b->known;
    *b->set = (cfs_prepared_set){0};
    b->known = NULL;
    b->cap = 0;
    ptrdiff_t waiting = 0;
    size_t i = 0;
    for (; waiting >= 0 && i < old.n; i++) {
        cfs_prepared *p = &old.items[i];
        if (!p->ds || cfs_dataset_part_datasets(p->ds) < 2) {
            if (move_item(b, p, old_known[i]) < 0)
                break;
            continue;
        }
        const cfs_dataset *ds = p->ds;
        bool moved = false;
        for (size_t k = 0; k < ds->nparts && waiting >= 0; k++) {
            if (ds->parts[k].why_not)
                continue;
            cfs_prepared *q = add_item(b, p->source, p->from, ds->parts[k].name);
            if (!q)
                waiting = -1;
            else if (k == ds->part)
                take_opened(q, p), moved = true;
            else
                waiting++;
        }
        if (!moved) {
            cfs_prepared_set one = {p, 1};
            cfs_prepared_set_free_items(&one);
        }
    }
    if (i < old.n) {                    /* out of memory: what was not moved goes */
        cfs_prepared_set rest = {old.items + i, old.n - i};
        cfs_prepared_set_free_items(&rest);
        waiting = -1;
    }
    free(old.items);
    free(old_known);
    return waiting;
}

/* A known dataset whose distinct id is no longer the one it is served under: the id is baked
 * into its store (uns/cellucid), so it is opened again and takes the new id. */
static void reopen_if_renamed(cfs_prepared *p, const cfs_known_dataset *k,
                              const cfs_options *opts)
{
    if (!k || !p->reused || !p->id || strcmp(p->id, k->id) == 0)
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
        else if (!ps->naming && !p->reused && !p->ds && !p->refused && !p->pending)
            open_one(p, ps->opts);      /* not served already, nor opened yet */
    }
    return NULL;
}

/* Sources are opened (and named) on several threads: with reader workers the opens run in
 * the workers, so a folder of thousands opens on every core. */
static int run_passes(cfs_prepared_set *set, const cfs_options *opts, bool naming)
{
    cfs_isolation iso = cfs_options_isolation(opts);
    int threads = cfs_parallel_cpus(OPEN_THREADS) + (iso.off ? 0 : 1);
    if (!iso.off && threads > (int)(iso.readers ? iso.readers : CFS_ISOLATE_READERS))
        threads = (int)(iso.readers ? iso.readers : CFS_ISOLATE_READERS);
    if ((size_t)threads > set->n)
        threads = set->n ? (int)set->n : 1;
    pass ps = {set, opts, naming, 0, 0};
    cfs_parallel_run(threads, run_pass, &ps);
    return ps.failed ? -1 : 0;
}

int cfs_prepare_reusing(const cfs_source_list *sources, const cfs_options *opts,
                        const cfs_known_source *known, cfs_prepared_set *out, cfs_err *err)
{
    *out = (cfs_prepared_set){0};
    builder b = {.set = out};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < sources->n; i++) {
        if (known && known[i].n)
            for (size_t k = 0; rc == 0 && k < known[i].n; k++)
                rc = reuse(&b, sources->paths[i], i, &known[i].datasets[k]);
        else if (!add_item(&b, sources->paths[i], i, NULL))
            rc = -1;
    }
    if (rc == 0) {
        run_passes(out, opts, false);
        ptrdiff_t waiting = expand_parts(&b);
        if (waiting > 0)
            run_passes(out, opts, false);
        rc = waiting < 0 ? -1 : 0;
    }
    if (rc == 0 && !out->items && !(out->items = calloc(1, sizeof *out->items)))
        rc = -1;
    if (rc < 0) {
        free(b.known);
        return cfs_err_oom(err);
    }
    if (assign_ids(out, err) < 0) {
        free(b.known);
        return -1;
    }
    for (size_t i = 0; i < out->n; i++)
        reopen_if_renamed(&out->items[i], b.known[i], opts);
    free(b.known);
    if (run_passes(out, opts, true) < 0)
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
        free(p->part);
        cfs_dataset_free(p->ds);     /* first: its jobs report to p->progress */
        cfs_progress_free(p->progress);
        free(p->raw_id);
        free(p->refused);
        free(p->unservable);
        free(p->id);
        free(p->name);
    }
}

void cfs_prepared_report(const cfs_prepared *p, const char *shown, FILE *log)
{
    char named[4096];
    const char *name = shown ? shown : p->source;
    if (p->part) {
        snprintf(named, sizeof named, "%s (object %s)", name, p->part);
        name = named;
    }
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
