/*
 * The `rds` format: R's serialized objects (.rds, and .rda/.RData workspaces; plain or gzip,
 * bzip2, xz compressed, which the stream peels itself, so .rds.gz is read as it is) holding a
 * Seurat or SingleCellExperiment object, mapped by formats/r/seurat.c and formats/r/sce.c.
 *
 * Detection is by content: R's serialization header ("X\n", "A\n" or "B\n" and version 2 or
 * 3) or a workspace magic ("RDX3\n", "RDA2\n", ...) in the first bytes, or in the first bytes
 * inside a gzip, bzip2 or xz file. A workspace's first Seurat/SCE object is the dataset; the
 * others are left out by name (one input per object, `<file>-<object>`, is a later step of the
 * registry). The whole stream is read at open, small vectors into the tree and large ones into
 * the vector store (formats/r/rvectors.h: left in place in a plain file, such as the
 * decompressed copy the front ends make of a compressed one; kept in memory otherwise); the
 * tree and the store stay with the dataset (its reader), whose matrix and column arrays read
 * them where they are.
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

static int rds_open(const char *path, cfs_dataset **out, cfs_err *err)
{
    *out = NULL;
    r_vecstore *vecs = NULL;
    r_file *f = NULL;
    if (read_r_file(path, &f, &vecs, err) < 0)
        return -1;
    const r_obj *obj = NULL;
    const char *objname = NULL;
    int rc = 0;
    if (f->hdr.workspace) {
        uint64_t n = r_length(f->root);
        char names[512] = "";
        size_t at = 0;
        for (uint64_t i = 0; i < n; i++) {
            const char *tag;
            const r_obj *cell = r_pairlist_at(f->root, i, &tag);
            const r_obj *v = cell ? cell->u.cons.car : NULL;
            if (v && kind_of(v) && !obj) {
                obj = v;
                objname = tag;
            }
            if (at < sizeof names)
                at += (size_t)snprintf(names + at, sizeof names - at, "%s%s (%s)",
                                       i ? ", " : "", tag, v ? what_of(v) : "?");
        }
        if (!obj)
            rc = cfs_err_setc(err, CFS_EREFUSED, "an R workspace holding %s, none of them a "
                              "Seurat or SingleCellExperiment object; " NOT_SC,
                              n ? names : "no objects");
    } else {
        obj = f->root;
        if (!kind_of(obj))
            rc = cfs_err_setc(err, CFS_EREFUSED, "an R %s object, not a Seurat or "
                              "SingleCellExperiment; " NOT_SC, what_of(obj));
    }
    cfs_dataset *ds = NULL;
    if (rc == 0 && (!(ds = cfs_dataset_new(path)) || !(ds->root = cfs_elem_new(CFS_EL_ANNDATA,
                                                                               NULL))))
        rc = cfs_err_oom(err);
    if (rc == 0) {
        rconv c = {.file = f, .vecs = vecs, .ds = ds};
        rc = strcmp(kind_of(obj), "seurat") == 0 ? r_seurat_build(&c, obj, err)
                                                : r_sce_build(&c, obj, err);
        if (rc < 0 && objname)
            cfs_err_prefix(err, "object '%s'", objname);
    }
    if (rc == 0 && f->hdr.workspace) {
        uint64_t n = r_length(f->root);
        for (uint64_t i = 0; rc == 0 && i < n; i++) {
            const char *tag;
            const r_obj *cell = r_pairlist_at(f->root, i, &tag);
            const r_obj *v = cell ? cell->u.cons.car : NULL;
            if (!v || v == obj || !kind_of(v))
                continue;
            char *what = cfs_strdupf("object %s", tag);
            if (!what || cfs_dataset_leave_out(ds, what, "a second single-cell object (class %s) "
                                               "of this workspace: the store shows '%s'; one "
                                               "input per object is a later step (save it with "
                                               "saveRDS to open it)", what_of(v), objname) < 0)
                rc = cfs_err_oom(err);
            free(what);
        }
    }
    rds_reader *rd = rc == 0 ? malloc(sizeof *rd) : NULL;
    if (rc == 0 && !rd)
        rc = cfs_err_oom(err);
    if (rc < 0) {
        cfs_dataset_free(ds);
        r_file_free(f);
        r_vecstore_free(vecs);
        return -1;
    }
    /* the model's large arrays are views of the tree's and the store's vectors */
    rd->file = f;
    rd->vecs = vecs;
    ds->reader = rd;
    ds->reader_free = rds_reader_free;
    *out = ds;
    return 0;
}

static const char *const rds_extensions[] = {".RData", ".rds", ".rda", NULL};

const cfs_format cfs_format_rds = {
    .name = "rds",
    .summary = "R objects (Seurat and SingleCellExperiment in .rds, .rda, .RData)",
    .extensions = rds_extensions,
    .probe = rds_probe,
    .reads_whole = true,
    .open = rds_open,
};
