/* formats/: HDF5 string reads, probes sharing one file, dormant files, unique names. */
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format.h"
#include "h5_dormant.h"
#include "h5_whole.h"
#include "hdf5_util.h"
#include "model.h"
#include "names.h"
#include "unit.h"


/* The fixture at rel (under tests/fixtures/) opened; NULL (a failed check) if it is not. */
static cfs_dataset *open_fixture(const char *rel)
{
    char path[4096];
    unit_fixture_path(path, sizeof path, rel);
    cfs_dataset *ds = NULL;
    cfs_err err = {0};
    CHECK(cfs_format_open(path, &ds, &err) == 0);
    return ds;
}

/* An HDF5 string column read into a pool holds what a plain read copies out. */
static void test_h5_read_strings(void)
{
    cfs_dataset *ds = open_fixture("h5ad/nonascii.h5ad");
    cfs_err err = {0};
    const cfs_elem *obs = ds ? cfs_elem_child(ds->root, "obs") : NULL;
    const cfs_array *index = obs && obs->index ? obs->index->values : NULL;
    CHECK(index && index->dtype == CFS_STRING && index->ndim == 1);
    if (!index) {
        cfs_dataset_free(ds);
        return;
    }
    uint64_t start = 0, n = index->shape[0];
    char **copies = calloc(n, sizeof *copies);
    const char **pooled = calloc(n, sizeof *pooled);
    cfs_strpool *pool = cfs_strpool_new();
    CHECK(cfs_array_read(index, &start, &n, copies, &err) == 0 &&
          cfs_array_read_strings(index, &start, &n, pooled, pool, &err) == 0);
    /* The fixture's names, as its generator writes them (make_h5ad_fixtures.py). */
    int same = n == 10;
    for (uint64_t i = 0; same && i < n; i++) {
        char want[32];
        snprintf(want, sizeof want, "\xe7\xbb\x86\xe8\x83\x9e_%llu", (unsigned long long)i);
        same = copies[i] && pooled[i] && strcmp(copies[i], want) == 0 &&
               strcmp(pooled[i], want) == 0;
    }
    CHECK(same);
    cfs_strings_free(copies, n);
    free(copies);
    free(pooled);
    cfs_strpool_free(pool);
    cfs_dataset_free(ds);
}

/* The obs index of an opened h5ad, read whole into names[0..n). */
static int read_index(cfs_dataset *ds, char ***names, uint64_t *n, cfs_err *err)
{
    const cfs_elem *obs = cfs_elem_child(ds->root, "obs");
    const cfs_array *index = obs && obs->index ? obs->index->values : NULL;
    if (!index)
        return -1;
    uint64_t start = 0;
    *n = index->shape[0];
    *names = calloc(*n, sizeof **names);
    if (!*names)
        return -1;
    if (cfs_array_read(index, &start, n, *names, err) < 0) {
        free(*names);       /* a failed read leaves no string allocated */
        *names = NULL;
        return -1;
    }
    return 0;
}

/* names[0..n) are the obs names csr_f32.h5ad's generator writes (make_h5ad_fixtures.py,
 * fx_csr_f32): AAAC-0 .. AAAC-29. */
static int is_csr_f32_index(char **names, uint64_t n)
{
    int same = names && n == 30;
    for (uint64_t k = 0; same && k < n; k++) {
        char want[32];
        snprintf(want, sizeof want, "AAAC-%llu", (unsigned long long)k);
        same = names[k] && strcmp(names[k], want) == 0;
    }
    return same;
}

static int open_descriptors(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    while (d && readdir(d))
        n++;
    if (d)
        closedir(d);
    return n;
}

/* More sources than may stay open: the least recently used files close their datasets (and
 * so themselves, holding no descriptor); a read of one opens it again by its name and reads
 * what it read before. One replaced or renamed away meanwhile fails its reads (it is never read
 * from the file now at its path); renamed back, it is the same version and reads again. */
static void test_dormant_files(void)
{
    enum { N = CFS_H5_AWAKE_FILES + 4 };
    char dir[] = "/tmp/cfs-unit-dormant-XXXXXX", src[4096], other[4096], path[N][256];
    char cmd[10000];
    unit_temp_dir(dir);
    int fds_before = open_descriptors();
    unit_fixture_path(src, sizeof src, "h5ad/csr_f32.h5ad");
    unit_fixture_path(other, sizeof other, "h5ad/dense_f32.h5ad");
    cfs_dataset *ds[N] = {0};
    cfs_err err = {0};
    int opened = 1;
    for (int i = 0; i < N && opened; i++) {
        snprintf(path[i], sizeof path[i], "%s/s%d.h5ad", dir, i);
        snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src, path[i]);
        opened = system(cmd) == 0 && cfs_format_open(path[i], &ds[i], &err) == 0;
    }
    CHECK(opened && cfs_h5_awake_files() == CFS_H5_AWAKE_FILES);
    CHECK(open_descriptors() <= fds_before + CFS_H5_AWAKE_FILES);
    /* s0 and s1 doze; s0 is replaced at its path, s1 renamed away and back. */
    snprintf(cmd, sizeof cmd, "cp '%s' '%s.new' && mv '%s.new' '%s' && mv '%s' '%s.moved'",
             other, path[0], path[0], path[0], path[1], path[1]);
    CHECK(system(cmd) == 0);
    char **names = NULL, **again = NULL, **replaced = NULL;
    uint64_t n = 0, n2 = 0, n0 = 0;
    CHECK(ds[1] && read_index(ds[1], &names, &n, &err) < 0 &&
          strstr(err.msg, "removed or replaced") != NULL);
    snprintf(cmd, sizeof cmd, "mv '%s.moved' '%s'", path[1], path[1]);
    CHECK(system(cmd) == 0);
    CHECK(ds[1] && read_index(ds[1], &names, &n, &err) == 0);
    CHECK(cfs_h5_awake_files() == CFS_H5_AWAKE_FILES);
    CHECK(ds[N - 1] && read_index(ds[N - 1], &again, &n2, &err) == 0 && n2 == n);
    /* Both read what the fixture holds, not merely the same as each other. */
    CHECK(is_csr_f32_index(names, n));
    CHECK(is_csr_f32_index(again, n2));
    CHECK(ds[0] && read_index(ds[0], &replaced, &n0, &err) < 0 &&
          strstr(err.msg, "removed or replaced") != NULL);
    if (names)
        cfs_strings_free(names, n);
    if (again)
        cfs_strings_free(again, n2);
    free(names);
    free(again);
    free(replaced);
    for (int i = 0; i < N; i++)
        cfs_dataset_free(ds[i]);
    CHECK(cfs_h5_awake_files() == 0);
    unit_remove_folder(dir);
}

/* Under cfs_h5_lock: path opened as the formats open it (cfs_h5_whole_open). */
static hid_t open_h5(const char *path, bool *in_memory)
{
    hid_t fapl = cfs_h5_read_fapl(path);
    hid_t file = fapl >= 0 ? cfs_h5_whole_open(path, fapl) : -1;
    if (fapl >= 0)
        H5Pclose(fapl);
    hid_t access = file >= 0 ? H5Fget_access_plist(file) : -1;
    *in_memory = access >= 0 && H5Pget_driver(access) == H5FD_CORE;
    if (access >= 0)
        H5Pclose(access);
    return file;
}

/* A small local file is read whole by the core driver, with the version stat found before and
 * after; a larger one is opened on disk and has no such version; a version is known for the
 * last 1,024 files opened whole only (h5_whole.c), so an older one is not taken for another's. */
static void test_whole_files(void)
{
    char dir[] = "/tmp/cfs-unit-whole-XXXXXX", src[1024], small[256], other[256], big[256];
    char cmd[8192];
    unit_temp_dir(dir);
    unit_fixture_path(src, sizeof src, "h5ad/csr_f32.h5ad");
    snprintf(small, sizeof small, "%s/small.h5ad", dir);
    snprintf(other, sizeof other, "%s/other.h5ad", dir);
    snprintf(big, sizeof big, "%s/big.h5ad", dir);
    /* Past its end of address an HDF5 file may hold anything: a valid file over the bound. */
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && cp '%s' '%s' && cp '%s' '%s' && truncate -s 2M '%s'",
             src, small, src, other, src, big, big);
    CHECK(system(cmd) == 0);
    struct stat st_small, st_big, version;
    CHECK(stat(small, &st_small) == 0 && stat(big, &st_big) == 0);
    CHECK(st_small.st_size <= CFS_H5_WHOLE_BYTES && st_big.st_size > CFS_H5_WHOLE_BYTES);
    cfs_h5_lock();
    bool in_memory = false;
    hid_t a = open_h5(small, &in_memory);
    CHECK(a >= 0 && in_memory);
    CHECK(a >= 0 && cfs_h5_whole_version(a, &version) == 0 &&
          version.st_dev == st_small.st_dev && version.st_ino == st_small.st_ino &&
          version.st_size == st_small.st_size &&
          version.st_mtim.tv_sec == st_small.st_mtim.tv_sec &&
          version.st_mtim.tv_nsec == st_small.st_mtim.tv_nsec);
    hid_t b = open_h5(big, &in_memory);
    CHECK(b >= 0 && !in_memory && cfs_h5_whole_version(b, &version) < 0);
    if (b >= 0)
        H5Fclose(b);
    int whole = 0;
    for (int i = 0; i < 1024; i++) {
        hid_t o = open_h5(other, &in_memory);
        whole += o >= 0 && in_memory && cfs_h5_whole_version(o, &version) == 0 &&
                 version.st_ino != st_small.st_ino;
        if (o >= 0)
            H5Fclose(o);
    }
    CHECK(whole == 1024);
    CHECK(a >= 0 && cfs_h5_whole_version(a, &version) < 0);
    if (a >= 0)
        H5Fclose(a);
    cfs_h5_unlock();
    unit_remove_folder(dir);
}

/* Duplicate names get anndata's var_names_make_unique suffixes (checked against anndata). */
static void test_unique_names(void)
{
    const char *in[] = {"a", "a", "b", "a-1", "a", "b"};
    const char *want[] = {"a", "a-2", "b", "a-1", "a-3", "b-1"};
    char *names[6];
    for (int i = 0; i < 6; i++)
        names[i] = strdup(in[i]);
    size_t changed;
    CHECK(cfs_names_make_unique(names, 6, &changed) == 0 && changed == 3);
    for (int i = 0; i < 6; i++) {
        CHECK(strcmp(names[i], want[i]) == 0);
        free(names[i]);
    }
}

/* Every range of an array of n int32 or float64 values read on its own holds what the whole
 * read holds there. */
static int ranges_agree(const cfs_array *a, const void *whole, uint64_t n, cfs_err *err)
{
    size_t es = cfs_array_elem_size(a);
    char *part = malloc(n * es + 1);
    int ok = part != NULL;
    for (uint64_t s = 0; ok && s < n; s++)
        for (uint64_t c = 1; ok && s + c <= n; c++)
            ok = cfs_array_read(a, &s, &c, part, err) == 0 &&
                 memcmp(part, (const char *)whole + s * es, c * es) == 0;
    free(part);
    return ok;
}

/* An Assay5's split layers joined (formats/r/rsplit.c): seurat_split.rds's X is made of runs
 * of two layers whose cells alternate, the second without two features; any range of its
 * values and indices reads what the whole read holds there, and each row's indices are the
 * assay's features, ascending. */
static void test_split_layers_ranges(void)
{
    cfs_dataset *ds = open_fixture("rds/seurat_split.rds");
    cfs_err err = {0};
    const cfs_elem *x = ds ? cfs_elem_child(ds->root, "X") : NULL;
    CHECK(x && x->kind == CFS_EL_SPARSE && x->csr && x->sparse_shape[0] == 10 &&
          x->sparse_shape[1] == 14 && x->aux->dtype == CFS_INT32 &&
          x->indptr->dtype == CFS_INT32 && x->values->dtype == CFS_FLOAT64);
    if (!x || x->kind != CFS_EL_SPARSE || x->aux->dtype != CFS_INT32 ||
        x->indptr->dtype != CFS_INT32 || x->values->dtype != CFS_FLOAT64) {
        cfs_dataset_free(ds);
        return;
    }
    uint64_t nnz = x->values->shape[0], np = 11, zero = 0;
    int32_t *ix = malloc(nnz * sizeof *ix), p[11];
    double *v = malloc(nnz * sizeof *v);
    CHECK(ix && v && nnz > 0 && x->aux->shape[0] == nnz &&
          cfs_array_read(x->indptr, &zero, &np, p, &err) == 0 &&
          cfs_array_read(x->aux, &zero, &nnz, ix, &err) == 0 &&
          cfs_array_read(x->values, &zero, &nnz, v, &err) == 0);
    int rows_ok = p[0] == 0 && (uint64_t)p[10] == nnz;
    for (int r = 0; rows_ok && r < 10; r++)
        for (int32_t k = p[r]; rows_ok && k < p[r + 1]; k++)
            rows_ok = ix[k] >= 0 && ix[k] < 14 && (k == p[r] || ix[k - 1] < ix[k]) &&
                      /* the even cells (sample s2) lack Gene3 and Gene9 */
                      (r % 2 == 0 || (ix[k] != 2 && ix[k] != 8));
    CHECK(rows_ok);
    CHECK(ranges_agree(x->aux, ix, nnz, &err) && ranges_agree(x->values, v, nnz, &err));
    free(ix);
    free(v);
    cfs_dataset_free(ds);
}

void unit_formats(void)
{
    test_split_layers_ranges();
    test_h5_read_strings();
    test_dormant_files();
    test_whole_files();
    test_unique_names();
}
