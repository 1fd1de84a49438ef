/* The reader worker protocol (src/isolate): a model tree survives the trip from worker to daemon,
 * and malformed bytes or frames are refused, never trusted; the pool of workers stays within its
 * bound and a source reopened by a new worker must be the version first opened. */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "embedding.h"
#include "format.h"
#include "isolated.h"
#include "unit.h"
#include "wire.h"
#include "wire_model.h"

static cfs_array *numbers(cfs_dtype dt, uint64_t n)
{
    uint64_t shape[1] = {n};
    void *data = calloc(n ? n : 1, cfs_dtype_size(dt));
    return cfs_array_from_memory(dt, 1, shape, data);
}

static cfs_array *strings(uint64_t n)
{
    uint64_t shape[1] = {n};
    char **s = calloc(n ? n : 1, sizeof *s);
    for (uint64_t i = 0; i < n; i++)
        s[i] = strdup("x");
    return cfs_array_from_memory(CFS_STRING, 1, shape, s);
}

static cfs_dataset *sample_model(void)
{
    cfs_dataset *ds = cfs_dataset_new("/in.h5ad");
    ds->format = strdup("h5ad");
    ds->format_version = strdup("anndata 0.1.0");
    ds->n_obs = 3;
    ds->n_vars = 2;
    ds->no_embedding_hint = strdup("open its outs/ folder");
    cfs_dataset_leave_out(ds, "uns/odd", "a reason");
    ds->root = cfs_elem_new(CFS_EL_ANNDATA, NULL);
    cfs_elem *obs = cfs_elem_new(CFS_EL_DATAFRAME, "obs");
    obs->index = cfs_elem_from_array(CFS_EL_ARRAY, "_index", strings(3));
    obs->index_name = strdup("cell");
    cfs_elem *cat = cfs_elem_from_array(CFS_EL_CATEGORICAL, "type", numbers(CFS_INT8, 3));
    cat->categories = cfs_elem_from_array(CFS_EL_ARRAY, NULL, strings(2));
    cat->ordered = true;
    cfs_elem_add(obs, cat);
    cfs_elem *ni = cfs_elem_from_array(CFS_EL_NULLABLE_INT, "n", numbers(CFS_INT64, 3));
    ni->aux = numbers(CFS_BOOL, 3);
    cfs_elem_add(obs, ni);
    cfs_elem_add(ds->root, obs);
    cfs_elem *x = cfs_elem_from_array(CFS_EL_SPARSE, "X", numbers(CFS_FLOAT32, 4));
    x->aux = numbers(CFS_INT32, 4);
    x->indptr = numbers(CFS_INT64, 4);
    x->csr = true;
    x->sparse_shape[0] = 3;
    x->sparse_shape[1] = 2;
    x->values->chunk_hint[0] = 2;
    cfs_elem_add(ds->root, x);
    cfs_elem *obsm = cfs_elem_new(CFS_EL_DICT, "obsm");
    uint64_t shape[2] = {3, 2};
    cfs_array *umap = cfs_array_from_memory(CFS_FLOAT64, 2, shape, calloc(6, 8));
    cfs_elem_add(obsm, cfs_elem_from_array(CFS_EL_ARRAY, "X_umap", umap));
    cfs_elem_add(obsm, cfs_elem_from_array(CFS_EL_ARRAY, "same", cfs_array_ref(umap)));
    cfs_elem_add(ds->root, obsm);
    cfs_elem *uns = cfs_elem_new(CFS_EL_DICT, "uns");
    uint64_t one[1] = {1};
    cfs_array *rec = cfs_array_from_memory(CFS_COMPOUND, 1, one, calloc(1, 16));
    rec->record_size = 16;
    rec->nfields = 2;
    rec->fields = calloc(2, sizeof *rec->fields);
    rec->fields[0] = (cfs_field){strdup("a"), CFS_INT32, 0, 4};
    rec->fields[1] = (cfs_field){strdup("s"), CFS_STRING, 4, 12};
    cfs_elem_add(uns, cfs_elem_from_array(CFS_EL_RECARRAY, "rec", rec));
    cfs_elem_add(uns, cfs_elem_new(CFS_EL_NULL, "none"));
    cfs_elem_add(ds->root, uns);
    return ds;
}

typedef struct fake_ctx {
    uint32_t id;
    char path[128];
} fake_ctx;

static int fake_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                     void *out, cfs_err *err)
{
    (void)arr, (void)start, (void)count, (void)out;
    return cfs_err_set(err, "not read in this test");
}

static const cfs_array_ops fake_ops = {fake_read, free, NULL, NULL, NULL};

static void *fake_make(void *maker, uint32_t id, const char *path)
{
    (void)maker;
    fake_ctx *c = calloc(1, sizeof *c);
    if (c) {
        c->id = id;
        snprintf(c->path, sizeof c->path, "%s", path);
    }
    return c;
}

static const cfs_wire_proxy fake_proxy = {&fake_ops, fake_make, NULL, NULL};

static bool same_array(const cfs_array *a, const cfs_array *b)
{
    if (!a || !b)
        return a == b;
    bool same = a->dtype == b->dtype && a->ndim == b->ndim && a->nfields == b->nfields &&
                a->record_size == b->record_size &&
                memcmp(a->shape, b->shape, sizeof a->shape) == 0 &&
                memcmp(a->chunk_hint, b->chunk_hint, sizeof a->chunk_hint) == 0;
    for (size_t f = 0; same && f < a->nfields; f++)
        same = strcmp(a->fields[f].name, b->fields[f].name) == 0 &&
               a->fields[f].dtype == b->fields[f].dtype &&
               a->fields[f].offset == b->fields[f].offset && a->fields[f].size == b->fields[f].size;
    return same;
}

static bool same_str(const char *a, const char *b)
{
    return a && b ? strcmp(a, b) == 0 : a == b;
}

static bool same_elem(const cfs_elem *a, const cfs_elem *b)
{
    if (!a || !b)
        return a == b;
    bool same = a->kind == b->kind && same_str(a->name, b->name) &&
                a->nchildren == b->nchildren && a->ordered == b->ordered && a->csr == b->csr &&
                a->sparse_shape[0] == b->sparse_shape[0] &&
                a->sparse_shape[1] == b->sparse_shape[1] && same_str(a->na_value, b->na_value) &&
                same_str(a->index_name, b->index_name) && same_array(a->values, b->values) &&
                same_array(a->aux, b->aux) && same_array(a->indptr, b->indptr) &&
                same_elem(a->index, b->index) && same_elem(a->categories, b->categories);
    for (size_t i = 0; same && i < a->nchildren; i++)
        same = same_elem(a->children[i], b->children[i]);
    return same;
}

static const char *path_of(const cfs_array *arr)
{
    return ((const fake_ctx *)arr->ctx)->path;
}

static void round_trip(void)
{
    cfs_dataset *ds = sample_model();
    cfs_buf b = {0};
    cfs_wire_arrays t = {0};
    cfs_err err = {0};
    CHECK(cfs_wire_model_encode(ds, &b, &t, &err) == 0);
    CHECK(t.n == 10);          /* the shared X_umap array once */
    uint32_t n = 0;
    cfs_dataset *back = cfs_wire_model_decode(b.data, b.len, "/in.h5ad", &fake_proxy, &n, &err);
    CHECK(back && n == t.n);
    if (back) {
        CHECK(same_elem(ds->root, back->root));
        CHECK(strcmp(back->format, "h5ad") == 0 && strcmp(back->format_version, "anndata 0.1.0") == 0);
        CHECK(back->n_obs == 3 && back->n_vars == 2 && back->nleftout == 1);
        CHECK(strcmp(back->leftout[0].element, "uns/odd") == 0);
        CHECK(strcmp(back->no_embedding_hint, "open its outs/ folder") == 0);
        const cfs_elem *obs = cfs_elem_child(back->root, "obs");
        const cfs_elem *x = cfs_elem_child(back->root, "X");
        const cfs_elem *obsm = cfs_elem_child(back->root, "obsm");
        CHECK(strcmp(path_of(obs->index->values), "obs/_index") == 0);
        CHECK(strcmp(path_of(obs->children[0]->values), "obs/type/codes") == 0);
        CHECK(strcmp(path_of(obs->children[0]->categories->values), "obs/type/categories") == 0);
        CHECK(strcmp(path_of(obs->children[1]->aux), "obs/n/mask") == 0);
        CHECK(strcmp(path_of(x->aux), "X/indices") == 0 && strcmp(path_of(x->values), "X/data") == 0);
        CHECK(obsm->children[0]->values == obsm->children[1]->values);
        CHECK(obsm->children[0]->values->refs == 2);
    }
    /* The worker names each array as the daemon does. */
    if (back) {
        const fake_ctx *index = cfs_elem_child(back->root, "obs")->index->values->ctx;
        CHECK(index->id < t.n && strcmp(t.path[index->id], "obs/_index") == 0);
    }
    cfs_dataset_free(back);

    /* Cut anywhere, it is refused; a trailing byte too. */
    int refused = 0;
    for (size_t len = 0; len < b.len; len++) {
        cfs_dataset *cut = cfs_wire_model_decode(b.data, len, "/in", &fake_proxy, &n, &err);
        refused += !cut && err.status == CFS_EDAMAGED;
        cfs_dataset_free(cut);
    }
    CHECK(refused == (int)b.len);
    cfs_buf_append(&b, "", 1);
    CHECK(!cfs_wire_model_decode(b.data, b.len, "/in", &fake_proxy, &n, &err) &&
          strstr(err.msg, "bytes after"));
    b.len--;
    /* Any one byte changed: refused or a model that holds together (ASan/UBSan watch). */
    for (size_t i = 0; i < b.len; i++) {
        unsigned char keep = b.data[i];
        for (int v = 0; v < 3; v++) {
            b.data[i] = v == 0 ? 0xff : v == 1 ? 0x00 : (unsigned char)(keep ^ 0x80);
            cfs_dataset_free(cfs_wire_model_decode(b.data, b.len, "/in", &fake_proxy, &n, &err));
        }
        b.data[i] = keep;
    }
    cfs_wire_arrays_free(&t);
    cfs_buf_free(&b);
    cfs_dataset_free(ds);
}

/* A dataset of two modalities: each one's root, sizes and maps cross as they are, under
 * mod/<name>, obsmap/<name> and varmap/<name>; a map of the wrong length is refused. */
static void round_trip_modalities(void)
{
    cfs_dataset *ds = sample_model();
    cfs_elem_remove(ds->root, "X");
    uint64_t nobs = 3, nvars = 2;
    const char *names[2] = {"rna", "prot"};
    for (int k = 0; k < 2; k++) {
        cfs_dataset *sub = cfs_dataset_new("/in.h5mu");
        sub->root = cfs_elem_new(CFS_EL_ANNDATA, NULL);
        sub->n_obs = 3 - (uint64_t)k;
        sub->n_vars = 1;
        cfs_elem_add(sub->root, cfs_elem_from_array(CFS_EL_ARRAY, "X", numbers(CFS_FLOAT32, 3)));
        cfs_modality *m = cfs_dataset_add_modality(ds, names[k], sub, NULL);
        CHECK(m != NULL);
        if (!m)
            continue;
        m->obsmap = cfs_array_from_memory(CFS_UINT32, 1, &nobs, calloc(3, 4));
        m->varmap = cfs_array_from_memory(CFS_UINT32, 1, &nvars, calloc(2, 4));
    }
    cfs_buf b = {0};
    cfs_wire_arrays t = {0};
    cfs_err err = {0};
    uint32_t n = 0;
    CHECK(cfs_wire_model_encode(ds, &b, &t, &err) == 0);
    cfs_dataset *back = cfs_wire_model_decode(b.data, b.len, "/in.h5mu", &fake_proxy, &n, &err);
    CHECK(back && back->nmods == 2);
    for (size_t k = 0; back && k < back->nmods && k < 2; k++) {
        const cfs_modality *m = &back->mods[k];
        CHECK(strcmp(m->name, names[k]) == 0 && m->n_obs == 3 - k && m->n_vars == 1);
        CHECK(same_elem(ds->mods[k].root, m->root));
        CHECK(strcmp(path_of(cfs_elem_child(m->root, "X")->values),
                     k ? "mod/prot/X" : "mod/rna/X") == 0);
        CHECK(m->obsmap && m->obsmap->shape[0] == 3 && m->varmap && m->varmap->shape[0] == 2);
        CHECK(strcmp(path_of(m->obsmap), k ? "obsmap/prot" : "obsmap/rna") == 0);
    }
    cfs_dataset_free(back);
    cfs_wire_arrays_free(&t);
    cfs_buf_free(&b);
    /* an obsmap that is not one row number per global cell */
    ds->n_obs = 4;
    CHECK(cfs_wire_model_encode(ds, &b, &t, &err) == 0);
    CHECK(!cfs_wire_model_decode(b.data, b.len, "/in.h5mu", &fake_proxy, &n, &err) &&
          strstr(err.msg, "modality map"));
    cfs_wire_arrays_free(&t);
    cfs_buf_free(&b);
    cfs_dataset_free(ds);
}

/* An input of several parts (an R workspace's objects): the list and which one the dataset is
 * cross as they are; a dataset that is not one of the datasets among them is refused. */
static void round_trip_parts(void)
{
    cfs_dataset *ds = sample_model();
    CHECK(cfs_dataset_add_part(ds, "so", "Seurat", NULL) == 0);
    CHECK(cfs_dataset_add_part(ds, "meta", "data.frame", "not a Seurat object") == 0);
    CHECK(cfs_dataset_add_part(ds, "sce/alt", "SingleCellExperiment", NULL) == 0);
    CHECK(cfs_dataset_part_datasets(ds) == 2);
    ds->part = 2;
    cfs_buf b = {0};
    cfs_wire_arrays t = {0};
    cfs_err err = {0};
    uint32_t n = 0;
    CHECK(cfs_wire_model_encode(ds, &b, &t, &err) == 0);
    cfs_dataset *back = cfs_wire_model_decode(b.data, b.len, "/in.rda", &fake_proxy, &n, &err);
    CHECK(back && back->nparts == 3 && back->part == 2);
    for (size_t k = 0; back && k < 3; k++)
        CHECK(same_str(back->parts[k].name, ds->parts[k].name) &&
              same_str(back->parts[k].what, ds->parts[k].what) &&
              same_str(back->parts[k].why_not, ds->parts[k].why_not));
    cfs_dataset_free(back);
    cfs_wire_arrays_free(&t);
    cfs_buf_free(&b);
    for (size_t part = 1; part <= 3; part += 2) {     /* none, and past the end */
        ds->part = part;
        CHECK(cfs_wire_model_encode(ds, &b, &t, &err) == 0);
        CHECK(!cfs_wire_model_decode(b.data, b.len, "/in.rda", &fake_proxy, &n, &err) &&
              strstr(err.msg, "not one of the input's parts"));
        cfs_wire_arrays_free(&t);
        cfs_buf_free(&b);
    }
    cfs_dataset_free(ds);
}

static void frames(void)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    cfs_err err = {0};
    bool timed_out = false;
    uint8_t type;
    uint32_t len;
    char got[8];
    CHECK(cfs_wire_send(sv[0], CFS_WIRE_OPEN, "abc", 3, -1, &err) == 0);
    CHECK(cfs_wire_recv_header(sv[1], &type, &len, 16, -1, &timed_out, &err) == 0 &&
          type == CFS_WIRE_OPEN && len == 3);
    CHECK(cfs_wire_recv_exact(sv[1], got, 3, -1, &timed_out, &err) == 0 && memcmp(got, "abc", 3) == 0);
    /* A length of zero (no type byte) and one over the limit are refused. */
    CHECK(write(sv[0], "\0\0\0\0\1", 5) == 5);
    CHECK(cfs_wire_recv_header(sv[1], &type, &len, 16, -1, &timed_out, &err) < 0);
    CHECK(write(sv[0], "\xff\0\0\0\1", 5) == 5);
    CHECK(cfs_wire_recv_header(sv[1], &type, &len, 16, -1, &timed_out, &err) < 0 &&
          strstr(err.msg, "malformed frame"));
    /* Nothing comes: the deadline ends the wait. */
    CHECK(cfs_wire_recv_header(sv[1], &type, &len, 16, cfs_wire_deadline(0.05), &timed_out,
                               &err) < 0 && timed_out);
    /* A frame cut short by the other side's end. */
    CHECK(write(sv[0], "\x09\0\0\0\4ab", 7) == 7);
    close(sv[0]);
    timed_out = false;
    CHECK(cfs_wire_recv_header(sv[1], &type, &len, 16, -1, &timed_out, &err) == 0 && len == 8);
    CHECK(cfs_wire_recv_exact(sv[1], got, len, -1, &timed_out, &err) < 0 && !timed_out);
    close(sv[1]);

    /* Cursor: a string longer than what is left, or holding a NUL, is refused. */
    unsigned char s1[] = {5, 0, 0, 0, 'a', 'b'};
    cfs_wire_cursor c = {s1, sizeof s1, false};
    CHECK(!cfs_wire_get_str(&c, 100) && c.bad);
    unsigned char s2[] = {2, 0, 0, 0, 'a', 0};
    c = (cfs_wire_cursor){s2, sizeof s2, false};
    CHECK(!cfs_wire_get_str(&c, 100) && c.bad);
    unsigned char s3[] = {2, 0, 0, 0, 'a', 'b'};
    c = (cfs_wire_cursor){s3, sizeof s3, false};
    CHECK(!cfs_wire_get_str(&c, 1) && c.bad);
    c = (cfs_wire_cursor){s3, sizeof s3, false};
    char *ok = cfs_wire_get_str(&c, 2);
    CHECK(ok && strcmp(ok, "ab") == 0 && !c.left);
    free(ok);
}

static int copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    char buf[65536];
    size_t n;
    int rc = in && out ? 0 : -1;
    while (rc == 0 && (n = fread(buf, 1, sizeof buf, in)) > 0)
        rc = fwrite(buf, 1, n, out) == n ? 0 : -1;
    if (in)
        fclose(in);
    if (out && fclose(out) != 0)
        rc = -1;
    return rc;
}

/* The first n values of obs/leiden/codes, through ds's reader. */
static int first_codes(const cfs_dataset *ds, int8_t *out, uint64_t n, cfs_err *err)
{
    const cfs_elem *col = cfs_elem_child(cfs_elem_child(ds->root, "obs"), "leiden");
    uint64_t start = 0, count = n;
    return col ? cfs_array_read(col->values, &start, &count, out, err) : -1;
}

/* A source whose worker the pool ended is read by a new one, which must find the same file: a
 * copy renamed over it (the same bytes, so the same model) or a new mtime is refused. */
static void pool_and_versions(void)
{
    char tmpl[] = "/tmp/cfs-unit-pool-XXXXXX";
    char *dir = unit_temp_dir(tmpl);
    if (!dir)
        return;
    char fixture[1024], other[1024], a[256], b[256], fresh[256];
    unit_fixture_path(fixture, sizeof fixture, "h5ad/csr_f32.h5ad");
    unit_fixture_path(other, sizeof other, "h5ad/categoricals.h5ad");
    snprintf(a, sizeof a, "%s/a.h5ad", dir);
    snprintf(b, sizeof b, "%s/b.h5ad", dir);
    snprintf(fresh, sizeof fresh, "%s/.fresh", dir);
    CHECK(copy_file(fixture, a) == 0 && copy_file(other, b) == 0);
    cfs_isolation iso = {.readers = 1};
    cfs_dataset *da = NULL, *db = NULL, *local = NULL;
    cfs_err err = {0};
    CHECK(cfs_isolated_open(a, &iso, &da, NULL, &err) == 0);
    CHECK(cfs_isolated_open(b, &iso, &db, NULL, &err) == 0);   /* ends a's worker */
    CHECK(cfs_isolated_workers() == 1);
    CHECK(cfs_format_open(a, &local, &err) == 0);
    int8_t got[8] = {0}, want[8] = {1};
    CHECK(da && local && first_codes(da, got, 8, &err) == 0 && first_codes(local, want, 8, &err) == 0);
    CHECK(memcmp(got, want, sizeof got) == 0);
    CHECK(cfs_isolated_workers() == 1);
    const cfs_elem *bx = db ? cfs_elem_child(db->root, "X") : NULL;
    uint64_t start = 0, count = 1;
    float f;
    CHECK(bx && cfs_array_read(bx->values, &start, &count, &f, &err) == 0);  /* ends a's again */

    /* An mtime moved while no worker has the file open. */
    struct timespec later[2] = {{0, UTIME_OMIT}, {1700000000, 0}};
    CHECK(utimensat(AT_FDCWD, a, later, 0) == 0);
    CHECK(da && first_codes(da, got, 8, &err) < 0 && err.status == CFS_EIO &&
          strstr(err.msg, "changed"));
    cfs_dataset_free(da);

    /* The same bytes under a new inode. */
    CHECK(cfs_isolated_open(a, &iso, &da, NULL, &err) == 0);
    CHECK(bx && cfs_array_read(bx->values, &start, &count, &f, &err) == 0);
    CHECK(copy_file(fixture, fresh) == 0 && rename(fresh, a) == 0);
    err = (cfs_err){0};
    CHECK(da && first_codes(da, got, 8, &err) < 0 && err.status == CFS_EIO &&
          strstr(err.msg, "changed"));
    CHECK(da && first_codes(da, got, 8, &err) < 0);            /* and not tried again */
    cfs_dataset_free(da);
    cfs_dataset_free(db);
    cfs_dataset_free(local);
    CHECK(cfs_isolated_workers() == 0);
    unit_remove_folder(dir);
}

typedef struct other_open {
    const char *path;
    cfs_dataset *ds;
    int done;
} other_open;

static void *open_other(void *arg)
{
    other_open *o = arg;
    cfs_isolation iso = {.readers = 1};
    cfs_err err = {0};
    if (cfs_isolated_open(o->path, &iso, &o->ds, NULL, &err) < 0)
        o->ds = NULL;
    __atomic_store_n(&o->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* The whole of obsm/key (n x 2) through ds's reader. */
static int read_embedding(const cfs_dataset *ds, const char *key, void *out, uint64_t n,
                          cfs_err *err)
{
    const cfs_elem *e = cfs_elem_child(cfs_elem_child(ds->root, "obsm"), key);
    uint64_t start[2] = {0, 0}, count[2] = {n, 2};
    return e ? cfs_array_read(e->values, start, count, out, err) : -1;
}

/* A source opened with keep_worker keeps its worker for the reads that follow its open (the
 * catalog's naming): another source's open waits for cfs_isolated_let_go instead of taking it,
 * so the kept source is opened once. Values sent with the model serve those reads and are
 * dropped at the let-go, read from a worker after. */
static void kept_worker(void)
{
    char a[1024], b[1024];
    unit_fixture_path(a, sizeof a, "h5ad/csr_f32.h5ad");
    unit_fixture_path(b, sizeof b, "h5ad/categoricals.h5ad");
    cfs_isolation iso = {.readers = 1, .keep_worker = true};
    cfs_dataset *da = NULL;
    cfs_err err = {0};
    CHECK(cfs_isolated_open(a, &iso, &da, NULL, &err) == 0);
    if (!da)
        return;
    other_open other = {b, NULL, 0};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, open_other, &other) == 0);
    struct timespec pause = {0, 200 * 1000 * 1000};
    nanosleep(&pause, NULL);        /* room for the other open to take the worker, if it could */
    CHECK(!__atomic_load_n(&other.done, __ATOMIC_ACQUIRE));
    int8_t got[8];
    CHECK(first_codes(da, got, 8, &err) == 0);
    double tsne[30][2];
    CHECK(read_embedding(da, "X_tsne", tsne, 30, &err) == 0);  /* not sent: X_umap draws */
    cfs_reader_stats stats = {0};
    CHECK(cfs_isolated_stats(da, &stats) && stats.opens == 1 && stats.requests == 2);
    cfs_isolated_let_go(da);
    pthread_join(t, NULL);
    CHECK(other.done && other.ds);
    CHECK(cfs_isolated_workers() == 1);
    CHECK(first_codes(da, got, 8, &err) == 0);                  /* a's worker went to b */
    CHECK(cfs_isolated_stats(da, &stats) && stats.opens == 2 && stats.requests == 3);
    float umap[30][2];
    CHECK(read_embedding(da, "X_umap", umap, 30, &err) == 0);  /* sent, dropped: asked */
    CHECK(cfs_isolated_stats(da, &stats) && stats.requests == 4);
    cfs_dataset *local = NULL;
    float want[30][2];
    CHECK(cfs_format_open(a, &local, &err) == 0 && read_embedding(local, "X_umap", want, 30,
                                                                   &err) == 0);
    CHECK(memcmp(umap, want, sizeof want) == 0);
    cfs_dataset_free(local);
    cfs_dataset_free(other.ds);
    cfs_dataset_free(da);
    CHECK(cfs_isolated_workers() == 0);
}

/* The requests naming's embedding check makes of source (none: what it reads came with the
 * model), with the key it found (NULL for none); then a read of an n_obs x 2 entry, which
 * the model no longer holds (not sent, or taken by the check), so one request. */
static void naming_asks_nothing(const char *fixture, const char *want_first, const char *then_read,
                                uint64_t n_obs)
{
    char path[1024];
    unit_fixture_path(path, sizeof path, fixture);
    cfs_isolation iso = {.readers = 1, .keep_worker = true};
    cfs_dataset *ds = NULL;
    cfs_err err = {0};
    CHECK(cfs_isolated_open(path, &iso, &ds, NULL, &err) == 0);
    if (!ds)
        return;
    const char *first = cfs_embedding_first(ds);
    CHECK(want_first ? first && strcmp(first, want_first) == 0 : first == NULL);
    cfs_reader_stats stats = {0};
    CHECK(cfs_isolated_stats(ds, &stats) && stats.opens == 1 && stats.requests == 0);
    double got[64];
    CHECK(n_obs <= 32 && read_embedding(ds, then_read, got, n_obs, &err) == 0);
    CHECK(cfs_isolated_stats(ds, &stats) && stats.requests == 1);
    cfs_isolated_let_go(ds);
    cfs_dataset_free(ds);
}

/* The worker sends the values of the obsm entries the check reads, up to the first drawable
 * one: X_umap, drawable, alone (X_const, after it, is not sent); with none drawable, the
 * NaN-only X_nan, which the check reads before it passes over the dataframe and the sparse
 * matrix without reading them. */
static void values_sent_for_naming(void)
{
    naming_asks_nothing("h5ad/obsm_undrawable.h5ad", "X_umap", "X_const", 12);
    naming_asks_nothing("h5ad/no_embedding.h5ad", NULL, "X_nan", 10);
}

void unit_isolate(void)
{
    round_trip();
    round_trip_modalities();
    round_trip_parts();
    frames();
    pool_and_versions();
    kept_worker();
    values_sent_for_naming();
}
