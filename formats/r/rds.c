/*
 * The `rds` format: R's serialized objects (.rds, and .rda/.RData workspaces; plain or gzip,
 * bzip2, xz compressed, which the stream peels itself, so .rds.gz is read as it is) holding a
 * Seurat or SingleCellExperiment object, mapped by formats/r/seurat.c and formats/r/sce.c.
 *
 * Detection is by content: R's serialization header ("X\n", "A\n" or "B\n" and version 2 or
 * 3) or a workspace magic ("RDX3\n", "RDA2\n", ...) in the first bytes, or in the first bytes
 * inside a gzip, bzip2 or xz file. A workspace (.rda, .RData) is an input of several parts,
 * its objects: each Seurat/SCE object is a dataset of its own, opened by name (open_part; open
 * takes the first that can be read), the others are listed as parts that are none. The whole
 * stream is read at open, small vectors into the tree and large ones into the vector store
 * (formats/r/rvectors.h: left in place in a plain file, such as the decompressed copy the front
 * ends make of a compressed one; kept in memory otherwise); the tree and the store stay with the
 * dataset (its reader), whose matrix and column arrays read them where they are.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "format.h"
#include "robjects.h"
#include "strfmt.h"

static bool r_magic(const unsigned char *h, size_t n)
{
    static const char *const ws[] = {"RDX2\n", "RDX3\n", "RDA2\n", "RDA3\n", "RDB2\n",
                                      "RDB3\n", NULL};
    for (size_t i = 0; ws[i]; i++)
        if (n >= 5 && memcmp(h, ws[i], 5) == 0)
            return true;
    if (n < 6 || h[1] != '\n')
        return false;
    if (h[0] == 'X')
        return h[2] == 0 && h[3] == 0 && h[4] == 0 && (h[5] == 2 || h[5] == 3);
    if (h[0] == 'B')
        return (h[2] == 2 || h[2] == 3) && h[3] == 0 && h[4] == 0 && h[5] == 0;
    if (h[0] == 'A')
        return (h[2] == '2' || h[2] == '3') && h[3] == '\n';
    return false;
}

static int rds_probe(cfs_probe_input *in)
{
    size_t n;
    if (cfs_probe_is_dir(in))
        return 0;
    const unsigned char *h = cfs_probe_head(in, &n);
    if (h && r_magic(h, n))
        return 90;
    if (!cfs_probe_compression(in))
        return 0;
    h = cfs_probe_peek(in, &n);
    if (h && r_magic(h, n))
        return 90;
    /* a .gz of a gzip-compressed .rds: the peek sees the inner gzip header */
    const char *name = cfs_probe_name(in);
    size_t len = strlen(name), stem = cfs_format_stem_len(name);
    if (h && n >= 2 && h[0] == 0x1f && h[1] == 0x8b && stem < len &&
        (strncasecmp(name + stem, ".rds", 4) == 0 || strncasecmp(name + stem, ".rda", 4) == 0))
        return 40;
    return 0;
}

static const char *kind_of(const r_obj *x)
{
    if (r_inherits(x, "Seurat"))
        return "seurat";
    if (r_inherits(x, "SingleCellExperiment") || r_inherits(x, "SummarizedExperiment") ||
        r_inherits(x, "RangedSummarizedExperiment"))
        return "sce";
    return NULL;
}

/* What an object is, for messages: its class, or "matrix" / its type. */
static const char *what_of(const r_obj *x)
{
    const char *cls = r_class_name(x);
    if (cls)
        return cls;
    if (r_attr(x, "dim"))
        return "matrix";
    return r_type_name(x->type);
}

#define NOT_SC "this version serves Seurat and SingleCellExperiment objects (saveRDS of one, " \
    "or a workspace holding them): convert it to one (e.g. SeuratObject::CreateSeuratObject) " \
    "or to .h5ad"

/* Vectors longer than this many elements (64 KiB of doubles) go to the vector store; the tests
 * lower it (to 1: every vector) with CFS_R_THRESHOLD_ENV, so that small fixtures are read in
 * place too. */
#define RDS_SINK_THRESHOLD 8192
#define CFS_R_THRESHOLD_ENV "CELLUCID_FS_TEST_R_SINK_THRESHOLD"

static uint64_t sink_threshold(void)
{
    const char *v = getenv(CFS_R_THRESHOLD_ENV);
    long long n = v ? atoll(v) : 0;
    return n > 0 ? (uint64_t)n : RDS_SINK_THRESHOLD;
}

/* What the dataset's arrays read: the R tree and the vector store, freed after every element. */
typedef struct rds_reader {
    r_file *file;
    r_vecstore *vecs;
} rds_reader;

static void rds_reader_free(void *p)
{
    rds_reader *rd = p;
    r_file_free(rd->file);
    r_vecstore_free(rd->vecs);
    free(rd);
}

/* Reads the file into the tree, its large vectors into a store reading in place from a
 * descriptor of its own (the same open file, so the offsets are those the stream saw). */
static int read_r_file(const char *path, r_file **f, r_vecstore **vecs, cfs_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cfs_err_errno(err, errno, "cannot be opened");
    int mine = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (mine < 0) {
        close(fd);
        return cfs_err_errno(err, errno, "cannot be opened");
    }
    if (!(*vecs = r_vecstore_new(mine))) {
        close(fd);
        return cfs_err_oom(err);
    }
    r_sink s = r_vecstore_sink(*vecs);
    r_read_opts opts = {.sink = &s, .sink_threshold = sink_threshold()};
    if (r_read_fd(fd, &opts, f, err) < 0) {
        r_vecstore_free(*vecs);
        *vecs = NULL;
        return -1;
    }
    return 0;
}

/* Maps obj (a Seurat or SCE object) onto a new dataset of path. */
static int build_object(const char *path, const rconv *parts, const r_obj *obj,
                        cfs_dataset **out, cfs_err *err)
{
    cfs_dataset *ds = cfs_dataset_new(path);
    if (!ds || !(ds->root = cfs_elem_new(CFS_EL_ANNDATA, NULL))) {
        cfs_dataset_free(ds);
        return cfs_err_oom(err);
    }
    rconv c = *parts;
    c.ds = ds;
    int rc = strcmp(kind_of(obj), "seurat") == 0 ? r_seurat_build(&c, obj, err)
                                                : r_sce_build(&c, obj, err);
    if (rc < 0) {
        cfs_dataset_free(ds);
        return -1;
    }
    *out = ds;
    return 0;
}

/* The object of a workspace item, and its name. */
static const r_obj *workspace_item(const r_file *f, uint64_t i, const char **name)
{
    const r_obj *cell = r_pairlist_at(f->root, i, name);
    return cell && *name ? cell->u.cons.car : NULL;
}

#define NOT_SC_PART "not a Seurat or SingleCellExperiment object"

/* Lists a workspace's objects as the dataset's parts, ds being the one at index `at`. */
static int add_parts(const r_file *f, cfs_dataset *ds, uint64_t at, cfs_err *err)
{
    uint64_t n = r_length(f->root);
    for (uint64_t i = 0; i < n; i++) {
        const char *name;
        const r_obj *v = workspace_item(f, i, &name);
        if (!v)
            continue;
        if (i == at)
            ds->part = ds->nparts;
        if (cfs_dataset_add_part(ds, name, what_of(v), kind_of(v) ? NULL : NOT_SC_PART) < 0)
            return cfs_err_oom(err);
    }
    return 0;
}

/* "a (data.frame), b (dgCMatrix)": a workspace's objects, for messages. */
static void workspace_names(const r_file *f, char *buf, size_t len)
{
    uint64_t n = r_length(f->root);
    size_t at = 0;
    buf[0] = '\0';
    for (uint64_t i = 0; i < n && at < len; i++) {
        const char *tag;
        const r_obj *cell = r_pairlist_at(f->root, i, &tag);
        const r_obj *v = cell ? cell->u.cons.car : NULL;
        at += (size_t)snprintf(buf + at, len - at, "%s%s (%s)", i ? ", " : "", tag ? tag : "?",
                               v ? what_of(v) : "?");
    }
}

/* A workspace's dataset: the single-cell object named part, or (part NULL) the first one that
 * can be read, the others being the input's other parts (docs/design.md §10). */
static int open_workspace(const char *path, const char *part, const r_file *f,
                          const rconv *parts, cfs_dataset **out, cfs_err *err)
{
    uint64_t n = r_length(f->root), found = n;
    size_t tried = 0;
    cfs_err first = {0};
    for (uint64_t i = 0; i < n && !*out; i++) {
        const char *name;
        const r_obj *v = workspace_item(f, i, &name);
        if (!v || (part && strcmp(name, part) != 0))
            continue;
        found = i;
        if (!kind_of(v)) {
            if (part)
                return cfs_err_setc(err, CFS_EREFUSED, "object '%s' of this workspace is an R "
                                    "%s object, " NOT_SC_PART "; " NOT_SC, name, what_of(v));
            continue;
        }
        cfs_err why = {0};
        if (build_object(path, parts, v, out, &why) == 0)
            break;
        bool last = why.status == CFS_ENOMEM || part;
        if (tried++ == 0 || last) {
            first = why;
            if (!part)      /* (the caller names a part it asked for) */
                cfs_err_prefix(&first, "object '%s'", name);
        }
        if (last)
            break;
    }
    if (*out)
        return add_parts(f, *out, found, err);
    if (part && found == n)
        return cfs_err_setc(err, CFS_ENOTFOUND, "this workspace holds no object '%s'", part);
    if (tried) {
        *err = first;
        if (tried > 1)
            cfs_err_prefix(err, "none of its %zu single-cell objects can be read", tried);
        return -1;
    }
    char names[512];
    workspace_names(f, names, sizeof names);
    return cfs_err_setc(err, CFS_EREFUSED, "an R workspace holding %s, none of them a Seurat or "
                        "SingleCellExperiment object; " NOT_SC, n ? names : "no objects");
}

static int rds_open_part(const char *path, const char *part, cfs_dataset **out, cfs_err *err)
{
    *out = NULL;
    r_vecstore *vecs = NULL;
    r_file *f = NULL;
    if (read_r_file(path, &f, &vecs, err) < 0)
        return -1;
    rconv parts = {.file = f, .vecs = vecs};
    int rc;
    if (f->hdr.workspace)
        rc = open_workspace(path, part, f, &parts, out, err);
    else if (part)
        rc = cfs_err_setc(err, CFS_ENOTFOUND, "an .rds file holds one object, not a workspace's "
                          "objects (asked for '%s')", part);
    else if (!kind_of(f->root))
        rc = cfs_err_setc(err, CFS_EREFUSED, "an R %s object, not a Seurat or "
                          "SingleCellExperiment; " NOT_SC, what_of(f->root));
    else
        rc = build_object(path, &parts, f->root, out, err);
    rds_reader *rd = rc == 0 ? malloc(sizeof *rd) : NULL;
    if (rc == 0 && !rd)
        rc = cfs_err_oom(err);
    if (rc < 0) {
        cfs_dataset_free(*out);
        *out = NULL;
        r_file_free(f);
        r_vecstore_free(vecs);
        return -1;
    }
    /* the model's large arrays are views of the tree's and the store's vectors */
    rd->file = f;
    rd->vecs = vecs;
    (*out)->reader = rd;
    (*out)->reader_free = rds_reader_free;
    return 0;
}

static int rds_open(const char *path, cfs_dataset **out, cfs_err *err)
{
    return rds_open_part(path, NULL, out, err);
}

static const char *const rds_extensions[] = {".RData", ".rds", ".rda", NULL};

const cfs_format cfs_format_rds = {
    .name = "rds",
    .summary = "R objects (Seurat and SingleCellExperiment in .rds, .rda, .RData)",
    .extensions = rds_extensions,
    .probe = rds_probe,
    .reads_whole = true,
    .open = rds_open,
    .open_part = rds_open_part,
};
