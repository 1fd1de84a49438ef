/*
 * From a list of inputs to the datasets a front end serves: open each with its reader, apply the
 * layout, give each a distinct id and a name, and record what was refused or left out. Shared
 * by export (src/cli/export.c) and the mounted volume (src/volume/volume.c), which prepares
 * again only the sources that changed (cfs_prepare_reusing).
 */
#ifndef CFS_PREPARE_H
#define CFS_PREPARE_H

#include <stdbool.h>
#include <stdio.h>

#include "isolated.h"
#include "model.h"
#include "options.h"
#include "progress.h"
#include "sources.h"

/* What a dataset without a drawable embedding is told, unless its reader says better. */
#define CFS_NO_EMBEDDING_ADVICE                                                              \
    "no obsm array can be drawn as an embedding; add one (e.g. scanpy's sc.tl.umap) and "   \
    "export again"

typedef struct cfs_prepared {
    char *source;
    /* The input's part this dataset is (an R workspace's object), when the input holds several
     * datasets: each is an item of its own. NULL: the input is one dataset. */
    char *part;
    size_t from;               /* the index of its source in the list prepared */
    cfs_dataset *ds;           /* NULL when refused */
    char *refused;             /* one-line reason (without the file name) or NULL */
    char *id;
    char *name;
    bool id_clashed;
    const char *embedding;     /* first drawable obsm key, or NULL: not listed in the catalog */
    cfs_progress *progress;    /* its layout jobs' progress (may be NULL) */
    char *raw_id;              /* its id before ids were made distinct */
    bool reused;               /* the caller's open version serves it (cfs_prepare_reusing) */
    /* Not opened yet: its decompressed copy is made later, or it is opened in the background
     * (the unpacker said CFS_ERETRY, or to defer it). No dataset, no reason; the caller
     * prepares it again when the mount is up. */
    bool pending;
    /* Its store cannot be made (why): it is refused once ids are made distinct, taking part
     * in them as it did when this was found out after them. */
    char *unservable;
    bool read_for_naming;      /* its name, embedding and store check were read (prepare.c) */
    /* A reader worker was lost opening or laying it out (refused then), as status.json shows
     * it; a worker lost later is asked of the dataset (cfs_isolated_fault). */
    cfs_reader_fault damage;
} cfs_prepared;

/* What a caller already serves of one dataset of a source, at the version it has now. */
typedef struct cfs_known_dataset {
    const char *part;          /* NULL: the source is one dataset */
    const char *raw_id;        /* NULL: it was refused */
    const char *id;
} cfs_known_dataset;

/* What a caller serves of a source: its n datasets (n 0: nothing; the source is opened). */
typedef struct cfs_known_source {
    size_t n;
    const cfs_known_dataset *datasets;
} cfs_known_source;

/* The items come in source order, the parts of a source in the input's order. */
typedef struct cfs_prepared_set {
    cfs_prepared *items;
    size_t n;
} cfs_prepared_set;

int cfs_prepare(const cfs_source_list *sources, const cfs_options *opts, cfs_prepared_set *out,
                cfs_err *err);
/* cfs_prepare for a folder of which the caller serves some sources already (known[i]): their
 * datasets are not opened again, unless the ids made distinct give one another id than it
 * has, and come out with only `source`, `part`, `from`, `id` and `reused` set. */
int cfs_prepare_reusing(const cfs_source_list *sources, const cfs_options *opts,
                        const cfs_known_source *known, cfs_prepared_set *out, cfs_err *err);
/* Marks one prepared dataset refused (e.g. a chunk could not be produced), freeing its model. */
void cfs_prepared_refuse(cfs_prepared *p, const char *reason);
void cfs_prepared_set_free(cfs_prepared_set *set);
/* Frees what each item owns, not the item array. */
void cfs_prepared_set_free_items(cfs_prepared_set *set);
/* Writes the one-line reports (refused, left out, id clashes, not in catalog) to log, naming
 * the source as shown (NULL: its path), and its part: a mount's log names it relative to SRC,
 * as status.json does, since both may be seen by those the stores are published to. */
void cfs_prepared_report(const cfs_prepared *p, const char *shown, FILE *log);

#endif
