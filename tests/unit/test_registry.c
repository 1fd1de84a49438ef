/*
 * formats/probe.c and formats/registry.c: reads at any offset, peeks into compressed streams,
 * shared probe state, the table-derived names and texts, and a format added the way every
 * format is added (one definition, one table line), which the binary does not ship.
 */
#include <bzlib.h>
#include <errno.h>
#include <lzma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "format.h"
#include "h5_dormant.h"
#include "hdf5_util.h"
#include "probe.h"
#include "store.h"
#include "unit.h"

static int write_bytes(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t put = fwrite(data, 1, len, f);
    return fclose(f) == 0 && put == len ? 0 : -1;
}

/* 10,000 bytes: "line 0000\n" ... so any offset's content is known. */
static char *numbered_text(size_t *len)
{
    char *text = malloc(10001);
    for (int i = 0; text && i < 1000; i++)
        snprintf(text + 10 * i, 11, "line %04d\n", i);
    *len = 10000;
    return text;
}

static void test_probe_reads(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/plain.txt", dir);
    size_t len;
    char *text = numbered_text(&len);
    CHECK(text && write_bytes(path, text, len) == 0);
    cfs_probe_input *in = NULL;
    cfs_err err = {0};
    CHECK(cfs_probe_input_open(path, &in, &err) == 0 && in);
    if (!in || !text) {
        free(text);
        return;
    }
    CHECK(!cfs_probe_is_dir(in) && cfs_probe_size(in) == 10000 &&
          strcmp(cfs_probe_name(in), "plain.txt") == 0);
    size_t hlen;
    const unsigned char *head = cfs_probe_head(in, &hlen);
    CHECK(hlen == CFS_PROBE_HEAD_LEN && memcmp(head, text, hlen) == 0);
    char buf[64];
    /* The tail, a read across the head's end, and a read past the end (short). */
    CHECK(cfs_probe_read(in, 9990, buf, 10) == 10 && memcmp(buf, "line 0999\n", 10) == 0);
    CHECK(cfs_probe_read(in, 4090, buf, 20) == 20 && memcmp(buf, text + 4090, 20) == 0);
    CHECK(cfs_probe_read(in, 9995, buf, 64) == 5 && memcmp(buf, "0999\n", 5) == 0);
    CHECK(cfs_probe_read(in, 20000, buf, 8) == 0);
    CHECK(cfs_probe_compression(in) == NULL);
    size_t plen = 1;
    CHECK(cfs_probe_peek(in, &plen) == NULL && plen == 0);
    cfs_probe_input_close(in);

    CHECK(cfs_probe_input_open(dir, &in, &err) == 0 && in && cfs_probe_is_dir(in));
    if (in)
        CHECK(cfs_probe_read(in, 0, buf, 8) == -1 && cfs_probe_size(in) == 0);
    cfs_probe_input_close(in);

    snprintf(path, sizeof path, "%s/missing", dir);
    CHECK(cfs_probe_input_open(path, &in, &err) == -1 && in == NULL &&
          err.status == CFS_ENOTFOUND && strncmp(err.msg, "cannot be opened: ", 18) == 0);
    CHECK(cfs_probe_input_open("/dev/null", &in, &err) == -1 && err.status == CFS_EREFUSED);
    free(text);
}

static int write_gzip(const char *path, const char *text, size_t len)
{
    gzFile g = gzopen(path, "wb");
    if (!g)
        return -1;
    int put = gzwrite(g, text, (unsigned)len);
    return gzclose(g) == Z_OK && put == (int)len ? 0 : -1;
}

static int write_bzip2(const char *path, const char *text, size_t len)
{
    unsigned int cap = (unsigned int)(len + len / 100 + 600);
    char *out = malloc(cap);
    int rc = out && BZ2_bzBuffToBuffCompress(out, &cap, (char *)text, (unsigned)len, 9, 0, 0) ==
                        BZ_OK ? write_bytes(path, out, cap) : -1;
    free(out);
    return rc;
}

static int write_xz(const char *path, const char *text, size_t len)
{
    size_t cap = lzma_stream_buffer_bound(len), used = 0;
    uint8_t *out = malloc(cap);
    int rc = out && lzma_easy_buffer_encode(6, LZMA_CHECK_CRC64, NULL, (const uint8_t *)text, len,
                                            out, &used, cap) == LZMA_OK
                 ? write_bytes(path, out, used) : -1;
    free(out);
    return rc;
}

/* A compressed copy of the numbered text shows its first 4 KiB, whatever the codec. */
static void check_peek(const char *path, const char *codec, const char *text)
{
    cfs_probe_input *in = NULL;
    cfs_err err = {0};
    CHECK(cfs_probe_input_open(path, &in, &err) == 0 && in);
    if (!in)
        return;
    const char *found = cfs_probe_compression(in);
    CHECK(found && strcmp(found, codec) == 0);
    size_t len = 0, again = 0;
    const unsigned char *peek = cfs_probe_peek(in, &len);
    CHECK(peek && len == CFS_PROBE_HEAD_LEN && memcmp(peek, text, len) == 0);
    CHECK(cfs_probe_peek(in, &again) == peek && again == len);
    cfs_probe_input_close(in);
}

static void test_probe_peek(const char *dir)
{
    size_t len;
    char *text = numbered_text(&len);
    char gz[4200], bz[4200], xz[4200], gzgz[4200], cut[4200];
    snprintf(gz, sizeof gz, "%s/t.gz", dir);
    snprintf(bz, sizeof bz, "%s/t.bz2", dir);
    snprintf(xz, sizeof xz, "%s/t.xz", dir);
    snprintf(gzgz, sizeof gzgz, "%s/t.gz.gz", dir);
    snprintf(cut, sizeof cut, "%s/cut.gz", dir);
    CHECK(text && write_gzip(gz, text, len) == 0 && write_bzip2(bz, text, len) == 0 &&
          write_xz(xz, text, len) == 0);
    check_peek(gz, "gzip", text);
    check_peek(bz, "bzip2", text);
    check_peek(xz, "xz", text);

    /* One layer only: a .gz of a gzip file shows the inner gzip header. */
    FILE *f = fopen(gz, "rb");
    char inner[20000];
    size_t n = f ? fread(inner, 1, sizeof inner, f) : 0;
    if (f)
        fclose(f);
    CHECK(n > 0 && write_gzip(gzgz, inner, n) == 0);
    cfs_probe_input *in = NULL;
    cfs_err err = {0};
    size_t plen = 0;
    CHECK(cfs_probe_input_open(gzgz, &in, &err) == 0 && in);
    const unsigned char *peek = in ? cfs_probe_peek(in, &plen) : NULL;
    CHECK(peek && plen == n && memcmp(peek, inner, plen) == 0);
    cfs_probe_input_close(in);

    /* A stream cut short gives what inflates of it, never more than was there. */
    CHECK(n > 40 && write_bytes(cut, inner, 40) == 0);
    CHECK(cfs_probe_input_open(cut, &in, &err) == 0 && in);
    peek = in ? cfs_probe_peek(in, &plen) : NULL;
    CHECK(plen < 200 && (!peek || memcmp(peek, text, plen) == 0));
    cfs_probe_input_close(in);
    free(text);
}

static int makes, releases;

static void *make_state(cfs_probe_input *in)
{
    makes++;
    return (void *)cfs_probe_name(in);
}

static void release_state(void *state)
{
    (void)state;
    releases++;
}

static void test_probe_memo(const char *dir)
{
    cfs_probe_input *in = NULL;
    cfs_err err = {0};
    static const char key_a = 0, key_b = 0;
    makes = releases = 0;
    CHECK(cfs_probe_input_open(dir, &in, &err) == 0 && in);
    if (!in)
        return;
    void *first = cfs_probe_memo(in, &key_a, make_state, release_state);
    CHECK(first && cfs_probe_memo(in, &key_a, make_state, release_state) == first && makes == 1);
    CHECK(cfs_probe_memo(in, &key_b, make_state, release_state) == first && makes == 2);
    cfs_probe_input_close(in);
    CHECK(releases == 2);
}

/* The HDF5 files this process has open. */
static ssize_t open_h5_files(void)
{
    cfs_h5_lock();
    ssize_t n = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_FILE);
    cfs_h5_unlock();
    return n;
}

static int note_file(hid_t file, void *ctx)
{
    *(hid_t *)ctx = file;
    return 1;
}

/* Every bidder of one detection sees the same HDF5 file, opened once; the registry's handle is
 * gone after the winner's open, whose file stays open through its datasets only. */
static void test_probe_shares_hdf5_file(void)
{
    char path[4096];
    unit_fixture_path(path, sizeof path, "h5ad/csr_f32.h5ad");
    cfs_probe_input *in = NULL;
    cfs_err err = {0};
    CHECK(cfs_probe_input_open(path, &in, &err) == 0 && in);
    if (!in)
        return;
    hid_t first = -1, second = -2;
    CHECK(cfs_h5_probe_offset(in) == 0);
    CHECK(cfs_h5_probe(in, note_file, &first) == 1 && cfs_h5_probe(in, note_file, &second) == 1);
    CHECK(first >= 0 && first == second && open_h5_files() == 1);
    cfs_probe_input_close(in);
    CHECK(open_h5_files() == 0);
    CHECK(cfs_format_detect(path, &err) != NULL && open_h5_files() == 0);
    cfs_dataset *ds = NULL;
    CHECK(cfs_format_open(path, &ds, &err) == 0 && ds && strcmp(ds->format, "h5ad") == 0);
    CHECK(cfs_h5_awake_files() == 1);
    cfs_dataset_free(ds);
    CHECK(open_h5_files() == 0 && cfs_h5_awake_files() == 0);
}

static void test_table_derived(const char *dir)
{
    CHECK(cfs_format_candidate_name("a/b/x.h5ad") && cfs_format_candidate_name("X.LOOM"));
    CHECK(cfs_format_candidate_name("m.h5") && !cfs_format_candidate_name("notes.txt"));
    CHECK(!cfs_format_candidate_name(".h5ad"));
    CHECK(cfs_format_stem_len("pbmc.h5ad") == 4 && cfs_format_stem_len("pbmc.h5ad.gz") == 4);
    CHECK(cfs_format_stem_len("a.loom.xz") == 1 && cfs_format_stem_len("a.tar.gz") == 8);
    CHECK(cfs_format_stem_len("a.hdf5") == 1 && cfs_format_stem_len("readme") == 6);
    CHECK(cfs_format_stem_len("GSM1_s1_matrix.mtx.gz") == 7 && cfs_format_stem_len("q.mtx") == 1);
    CHECK(cfs_format_candidate_name("d/matrix.mtx"));
    CHECK(cfs_format_stem_len("pbmc.zarr") == 4 && cfs_format_stem_len("x.ZARR") == 1);
    CHECK(cfs_format_stem_len("cite.h5mu") == 4 && cfs_format_candidate_name("d/cite.h5mu"));
    CHECK(cfs_format_stem_len("pbmc.rds") == 4 && cfs_format_stem_len("pbmc.rds.gz") == 4 &&
          cfs_format_stem_len("ws.RData") == 2 && cfs_format_stem_len("ws.rdata") == 2 &&
          cfs_format_stem_len("ws.rda.xz") == 2 && cfs_format_candidate_name("d/x.rds.bz2"));
    CHECK(cfs_format_unnamed_folder("outs", 4) && cfs_format_unnamed_folder("count", 5) &&
          !cfs_format_unnamed_folder("outs2", 5));
    char list[1200];
    cfs_format_list_text(list, sizeof list);
    int summaries = 0;
    for (const cfs_format *const *f = cfs_formats(); *f; f++)
        summaries += strstr(list, (*f)->summary) != NULL && (*f)->name && (*f)->probe &&
                     (*f)->open;
    CHECK(summaries == 9);

    /* The refusal texts come from the table. */
    char path[4200];
    cfs_err err = {0};
    snprintf(path, sizeof path, "%s/fake.loom", dir);
    CHECK(write_bytes(path, "not hdf5 at all", 15) == 0);
    CHECK(cfs_format_detect(path, &err) == NULL && err.status == CFS_EDAMAGED &&
          strcmp(err.msg, "not an HDF5 file (no HDF5 signature); it is not a .loom file, "
                          "whatever its name says: re-download or re-write it") == 0);
    snprintf(path, sizeof path, "%s/notes.txt", dir);
    CHECK(write_bytes(path, "hello", 5) == 0);
    CHECK(cfs_format_detect(path, &err) == NULL && err.status == CFS_EREFUSED &&
          strstr(err.msg, "not a recognised single-cell file") && strstr(err.msg, list));
    snprintf(path, sizeof path, "%s/empty.h5ad", dir);
    CHECK(write_bytes(path, "", 0) == 0);
    CHECK(cfs_format_detect(path, &err) == NULL && strstr(err.msg, "an empty file"));
    CHECK(cfs_format_detect(dir, &err) == NULL && strstr(err.msg, "a folder that is not") &&
          strstr(err.msg, "Cell Ranger"));
}

/* A caller (a worker process's parent, a status line) can tell damage from a refusal. */
static void test_refusal_status(void)
{
    static const struct {
        const char *fixture;
        cfs_status status;
    } cases[] = {
        {"bad/truncated.h5ad", CFS_EDAMAGED},
        {"bad/not_hdf5.h5ad", CFS_EDAMAGED},
        {"bad/not_anndata.h5ad", CFS_EREFUSED},
        {"bad/x_absurd_shape.h5ad", CFS_EREFUSED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[4096];
        unit_fixture_path(path, sizeof path, cases[i].fixture);
        cfs_dataset *ds = NULL;
        cfs_err err = {0};
        int rc = cfs_format_open(path, &ds, &err);
        CHECK(rc == -1 && ds == NULL && err.status == cases[i].status && err.msg[0]);
        if (rc == 0 || err.status != cases[i].status)
            fprintf(stderr, "  %s: %s (%s)\n", cases[i].fixture, cfs_status_name(err.status),
                    err.msg);
        cfs_dataset_free(ds);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* A demonstration format: a text file "#demo-cells" then one cell name a line. Its whole
 * definition is this section; adding it is the table line in test_demo_format. */

static const char demo_magic[] = "#demo-cells\n";

static int demo_probe(cfs_probe_input *in)
{
    size_t len;
    const unsigned char *head = cfs_probe_head(in, &len);
    return len >= sizeof demo_magic - 1 && memcmp(head, demo_magic, sizeof demo_magic - 1) == 0
               ? 100 : 0;
}

/* A dataframe indexed by the n strings of index (taken, freed on failure). */
static cfs_elem *demo_frame(const char *name, char **index, uint64_t n)
{
    cfs_array *arr = cfs_array_from_memory(CFS_STRING, 1, &n, index);
    if (!arr) {
        cfs_strings_free(index, n);
        free(index);
        return NULL;
    }
    cfs_elem *df = cfs_elem_new(CFS_EL_DATAFRAME, name);
    if (!df) {
        cfs_array_unref(arr);
        return NULL;
    }
    if ((df->index = cfs_elem_from_array(CFS_EL_ARRAY, "_index", arr)) &&
        (df->index_name = strdup("_index")))
        return df;
    cfs_elem_free(df);
    return NULL;
}

/* The cell names after the magic line, malloc'd; -1 on allocation failure. */
static int demo_cells(FILE *f, char ***cells, uint64_t *n)
{
    char line[256];
    *cells = NULL;
    *n = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char **grown = realloc(*cells, (*n + 1) * sizeof *grown);
        if (grown)
            *cells = grown;
        if (!grown || !(grown[*n] = strdup(line))) {
            cfs_strings_free(*cells, *n);
            free(*cells);
            return -1;
        }
        (*n)++;
    }
    return 0;
}

static cfs_elem *demo_x(uint64_t n)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (uint64_t i = 0; x && i < n; i++)
        x[i] = (float)(i + 1);
    uint64_t shape[2] = {n, 1};
    cfs_array *arr = x ? cfs_array_from_memory(CFS_FLOAT32, 2, shape, x) : NULL;
    if (!arr)
        free(x);
    return cfs_elem_from_array(CFS_EL_ARRAY, "X", arr);
}

static char **demo_genes(void)
{
    char **genes = malloc(sizeof *genes);
    if (genes && !(genes[0] = strdup("GENE1"))) {
        free(genes);
        genes = NULL;
    }
    return genes;
}

static int demo_read(FILE *f, cfs_dataset *ds, cfs_err *err)
{
    char line[256];
    if (!fgets(line, sizeof line, f) || strcmp(line, demo_magic) != 0)
        return cfs_err_setc(err, CFS_EDAMAGED, "no #demo-cells line");
    char **cells;
    uint64_t n;
    if (demo_cells(f, &cells, &n) < 0)
        return cfs_err_oom(err);
    ds->n_obs = n;
    ds->n_vars = 1;
    /* Each element is added as it is made: what was added is freed with the dataset. */
    if (!(ds->root = cfs_elem_new(CFS_EL_ANNDATA, NULL))) {
        cfs_strings_free(cells, n);
        free(cells);
        return cfs_err_oom(err);
    }
    if (cfs_elem_add_or_free(ds->root, demo_frame("obs", cells, n), err) < 0)
        return -1;
    char **genes = demo_genes();
    if (!genes)
        return cfs_err_oom(err);
    if (cfs_elem_add_or_free(ds->root, demo_frame("var", genes, 1), err) < 0)
        return -1;
    return cfs_elem_add_or_free(ds->root, demo_x(n), err);
}

static int demo_open(const char *path, cfs_dataset **out, cfs_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return cfs_err_errno(err, errno, "cannot be opened");
    cfs_dataset *ds = cfs_dataset_new(path);
    int rc = ds ? demo_read(f, ds, err) : cfs_err_oom(err);
    fclose(f);
    if (rc == 0 && !(ds->format_version = strdup("demo 1")))
        rc = cfs_err_oom(err);
    if (rc < 0) {
        cfs_dataset_free(ds);
        return -1;
    }
    *out = ds;
    return 0;
}

static const char *const demo_extensions[] = {".cells", NULL};

static const cfs_format demo_format = {
    .name = "demo-cells",
    .summary = "demonstration cell lists (.cells)",
    .extensions = demo_extensions,
    .probe = demo_probe,
    .open = demo_open,
};

static void test_demo_format(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/three.cells", dir);
    CHECK(write_bytes(path, "#demo-cells\nAAAC-1\nAAAG-1\nTTTC-1\n", 33) == 0);
    cfs_err err = {0};
    CHECK(cfs_format_detect(path, &err) == NULL);   /* not shipped */

    const cfs_format *const *builtin = cfs_formats();
    const cfs_format *table[8];
    size_t n = 0;
    for (; builtin[n] && n < 6; n++)
        table[n] = builtin[n];
    table[n++] = &demo_format;                     /* the one line that adds a format */
    table[n] = NULL;
    cfs_formats_replace(table);

    CHECK(cfs_format_candidate_name("x/three.cells") && cfs_format_stem_len("three.cells") == 5);
    char list[1200];
    CHECK(strstr(cfs_format_list_text(list, sizeof list), "demonstration cell lists (.cells)"));
    cfs_dataset *ds = NULL;
    CHECK(cfs_format_open(path, &ds, &err) == 0 && ds);
    if (ds) {
        CHECK(strcmp(ds->format, "demo-cells") == 0 && ds->n_obs == 3 && ds->n_vars == 1);
        /* The rest of the pipeline needs nothing of the format: it renders as any other. */
        cfs_store_opts opts = {.codec = CFS_CODEC_NONE};
        cfs_store *st = cfs_store_new(ds, &opts, &err);
        char *zm = st ? unit_store_doc(st, ".zmetadata") : NULL;
        CHECK(zm && strstr(zm, "\"X/.zarray\"") && strstr(zm, "\"obs/.zattrs\""));
        const cfs_store_node *x = NULL;
        for (size_t i = 0; st && i < st->nnodes; i++)
            if (strcmp(st->nodes[i].path, "X") == 0)
                x = &st->nodes[i];
        cfs_buf b = {0};
        float want[3] = {1, 2, 3};
        CHECK(x && cfs_store_chunk(st, x, 0, &b, &err) == 0 && b.len == sizeof want &&
              memcmp(b.data, want, sizeof want) == 0);
        cfs_buf_free(&b);
        free(zm);
        cfs_store_free(st);
    }
    cfs_dataset_free(ds);
    /* a format of one dataset per input has no parts to open */
    ds = NULL;
    CHECK(cfs_format_open_part(path, "x", &ds, &err) == -1 && !ds &&
          err.status == CFS_ENOTFOUND && strstr(err.msg, "holds one dataset"));
    cfs_formats_replace(NULL);
    CHECK(cfs_formats() == builtin && cfs_format_detect(path, &err) == NULL);
}

void unit_registry(void)
{
    char dir[] = "/tmp/cfs-unit-registry-XXXXXX";
    if (!unit_temp_dir(dir))
        return;
    test_probe_reads(dir);
    test_probe_peek(dir);
    test_probe_memo(dir);
    test_probe_shares_hdf5_file();
    test_table_derived(dir);
    test_refusal_status();
    test_demo_format(dir);
    unit_remove_folder(dir);
}
