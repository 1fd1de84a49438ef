/* The fuzz targets' folder of files: a private folder (in /dev/shm when it can) removed when the
 * fuzzer exits, files written into it from the input or copied from the fixtures. The fixtures
 * are found through $CFS_FUZZ_FIXTURES (tests/fuzz/run sets it), else FUZZ_FIXTURES, the source
 * tree's tests/fixtures/ as `make fuzz` compiled it in. */
#ifndef CFS_FUZZ_DIR_H
#define CFS_FUZZ_DIR_H

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef FUZZ_FIXTURES
#define FUZZ_FIXTURES "tests/fixtures"
#endif

static char fuzz_dir_path[64];

static int fuzz_dir_remove_one(const char *path, const struct stat *st, int type, struct FTW *f)
{
    (void)st, (void)type, (void)f;
    return remove(path);
}

static void fuzz_dir_remove(void)
{
    nftw(fuzz_dir_path, fuzz_dir_remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* The folder, made on the first call; NULL if it cannot be. */
static inline const char *fuzz_dir(void)
{
    if (fuzz_dir_path[0])
        return fuzz_dir_path;
    snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "/dev/shm/cfs-fuzz-XXXXXX");
    if (!mkdtemp(fuzz_dir_path)) {
        snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "/tmp/cfs-fuzz-XXXXXX");
        if (!mkdtemp(fuzz_dir_path)) {
            fuzz_dir_path[0] = 0;
            return NULL;
        }
    }
    atexit(fuzz_dir_remove);
    return fuzz_dir_path;
}

/* Writes data as <fuzz_dir>/rel, making its folders. */
static inline int fuzz_dir_write(const char *rel, const void *data, size_t size)
{
    char path[1024];
    const char *dir = fuzz_dir();
    if (!dir)
        return -1;
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    for (char *p = path + strlen(dir) + 1; (p = strchr(p, '/')); p++) {
        *p = 0;
        mkdir(path, 0700);
        *p = '/';
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    ssize_t put = size ? write(fd, data, size) : 0;
    close(fd);
    return put == (ssize_t)size ? 0 : -1;
}

/* The fixture tests/fixtures/<rel>'s path. */
static inline void fuzz_fixture_path(const char *rel, char *path, size_t len)
{
    const char *root = getenv("CFS_FUZZ_FIXTURES");
    snprintf(path, len, "%s/%s", root && root[0] ? root : FUZZ_FIXTURES, rel);
}

/* Copies the fixture tests/fixtures/<rel> to <fuzz_dir>/to. */
static inline int fuzz_dir_copy_fixture(const char *rel, const char *to)
{
    char path[1024];
    fuzz_fixture_path(rel, path, sizeof path);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz: cannot read the fixture %s (set CFS_FUZZ_FIXTURES)\n", path);
        return -1;
    }
    char *data = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n == cap) {
            char *more = realloc(data, cap = cap ? 2 * cap : 1 << 16);
            if (!more)
                break;
            data = more;
        }
        got = fread(data + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    fclose(f);
    int rc = fuzz_dir_write(to, data, n);
    free(data);
    return rc;
}

/* Copies the fixtures <from>/<names[i]> to <fuzz_dir>/<to>/<names[i]>. */
static inline int fuzz_dir_copy_fixtures(const char *from, const char *const *names, size_t n,
                                         const char *to)
{
    char src[512], dst[512];
    for (size_t i = 0; i < n; i++) {
        snprintf(src, sizeof src, "%s/%s", from, names[i]);
        snprintf(dst, sizeof dst, "%s/%s", to, names[i]);
        if (fuzz_dir_copy_fixture(src, dst) < 0)
            return -1;
    }
    return 0;
}

/* Whether setup (run on the first call only) made the folder's fixed files. */
static inline int fuzz_dir_ready(int (*setup)(void))
{
    static int ready;
    if (!ready)
        ready = setup() == 0 ? 1 : -1;
    return ready > 0;
}

#endif
