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

void cfs_prepared_refuse(cfs_prepared *p, const char *reason)
{
    free(p->refused);
    p->refused = strdup(reason);
    cfs_dataset_free(p->ds);
    p->ds = NULL;
    p->embedding = NULL;
}

/* Opens the source, or for a compressed copy a format reads only from disk, its decompressed
 * copy where the front end keeps them; the dataset's source is the one given either way. */
static int open_source(cfs_prepared *p, const cfs_options *opts, cfs_err *err)
{
    /* Most sources open as they are: only a refused one is probed again for a compressed copy,
     * so the usual open reads the file's head once. */
    const char *codec = NULL;
    cfs_isolation iso = cfs_options_isolation(opts);
    if (cfs_isolated_open_part(p->source, p->part, &iso, &p->ds, &p->damage, err) == 0)
        return 0;
    if (p->damage.happened)
        return -1;
    if (!cfs_format_needs_unpack(p->source, &codec))
        return -1;
    if (!opts->unpack.copy)
        return cfs_err_setc(err, CFS_EREFUSED, "a %s-compressed copy, which this command does "
                            "not decompress; decompress it first", codec);
    char *copy = NULL;
    if (opts->unpack.copy(opts->unpack.ctx, p->source, codec, p->progress, &copy, err) < 0)
        return -1;
    int rc = cfs_isolated_open_part(copy, p->part, &iso, &p->ds, &p->damage, err);
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

/* The id an opened dataset asks for: the source's own, else from its file's name (and part). */
static void set_raw_id(cfs_prepared *p)
{
    free(p->id);
    free(p->raw_id);
    p->id = cfs_identity_wanted_id(p->ds, p->source, p->part);
    p->raw_id = p->id ? strdup(p->id) : NULL;
}

static void open_one(cfs_prepared *p, const cfs_options *opts)
{
    cfs_err err = {0};
    cfs_layout_opts layout = opts->layout;
    layout.progress = p->progress = cfs_progress_new(p->source, opts->layout.log);
    /* A part's progress is named by its source: status.json names the part beside it. */
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
    set_raw_id(p);
}

static int name_one(cfs_prepared *p, cfs_err *err)
{
    char *stem = cfs_source_part_stem(p->source, p->part);
    p->name = stem ? cfs_identity_name(p->ds, stem) : NULL;
    free(stem);
    if (!p->name || cfs_identity_apply(p->ds, p->id, p->name, err) < 0)
        return cfs_err_oom(err);
    p->embedding = cfs_embedding_first(p->ds);
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

/* The set being made, and what the caller serves of each item (NULL: it was opened). */
typedef struct builder {
    cfs_prepared_set *set;
    size_t cap;
    const cfs_known_dataset **known;
} builder;

static cfs_prepared *add_item(builder *b, const char *source, size_t from, const char *part)
{
    if (b->set->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 16;
        cfs_prepared *items = realloc(b->set->items, cap * sizeof *items);
        if (items)
            b->set->items = items;
        const cfs_known_dataset **known = items ? realloc(b->known, cap * sizeof *known) : NULL;
        if (!known)
            return NULL;
        b->known = known;
        b->cap = cap;
    }
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

/* Opens a source; one that holds several datasets (its reader lists them as parts) becomes an
 * item per part, in the input's order, each opened by name but the one opened already. */
static int open_source_items(builder *b, const char *source, size_t from,
                             const cfs_options *opts)
{
    cfs_prepared *p = add_item(b, source, from, NULL);
    if (!p)
        return -1;
    open_one(p, opts);
    if (!p->ds || cfs_dataset_part_datasets(p->ds) < 2)
        return 0;
    cfs_prepared opened = *p;
    b->set->n--;
    const cfs_dataset *ds = opened.ds;
    for (size_t k = 0; k < ds->nparts; k++) {
        if (ds->parts[k].why_not)
            continue;
        cfs_prepared *q = add_item(b, source, from, ds->parts[k].name);
        if (!q) {
            cfs_prepared_set one = {&opened, 1};
            cfs_prepared_set_free_items(&one);
            return -1;
        }
        if (k != ds->part) {
            open_one(q, opts);
            continue;
        }
        /* the one opened, now named by its part */
        char *part = q->part;
        free(q->source);
        *q = opened;
        q->part = part;
        set_raw_id(q);
    }
    return 0;
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
        else
            rc = open_source_items(&b, sources->paths[i], i, opts);
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
    for (size_t i = 0; i < out->n; i++)
        if (out->items[i].ds && name_one(&out->items[i], err) < 0)
            return -1;
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
        fprintf(log, "cellucid-fs: %s: decompressing into the cache; served when done\n",
                name);
        return;
    }
    if (p->refused) {
        fprintf(log, "cellucid-fs: %s: refused: %s\n", name, p->refused);
        return;
    }
    for (size_t i = 0; i < p->ds->nleftout; i++)
        fprintf(log, "cellucid-fs: %s: left out %s: %s\n", name, p->ds->leftout[i].element,
                p->ds->leftout[i].reason);
    if (p->id_clashed)
        fprintf(log, "cellucid-fs: %s: id clash: another source has the same id, so this one is "
                     "served as '%s'\n", name, p->id);
    if (!p->embedding)
        fprintf(log, "cellucid-fs: %s: not in datasets.json: %s\n", name,
                p->ds->no_embedding_hint ? p->ds->no_embedding_hint : CFS_NO_EMBEDDING_ADVICE);
}
