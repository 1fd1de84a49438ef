#include "h5_dormant.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hdf5_util.h"
#include "h5_whole.h"
#include "remote.h"

/* The version of a file: device, inode, size and mtime. */
typedef struct version {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} version;

/* One source file, for as long as one of its datasets is kept. */
typedef struct file_rec {
    struct file_rec *next;
    char *path;                 /* the name it was opened by */
    version ver;                /* what was found there then: a reopen must find the same */
    unsigned long fileno;       /* libhdf5's serial number of the file while open, else 0 */
    cfs_h5_dset **dsets;
    size_t n, cap;
    size_t open;                /* how many of them have an open id */
    uint64_t last_use;
} file_rec;

struct cfs_h5_dset {
    file_rec *file;
    char *path;
    hid_t dapl;
    hid_t id;                   /* -1 while closed */
};

static file_rec *files;
static size_t awake_count;      /* files with open > 0 */
static uint64_t use_clock;

static bool awake(const file_rec *f)
{
    return f->open > 0;
}

size_t cfs_h5_awake_files(void)
{
    return awake_count;
}

/* One more (or one fewer) of f's datasets has an open id. */
static void opened_one(file_rec *f)
{
    if (f->open++ == 0)
        awake_count++;
}

static void closed_one(file_rec *f)
{
    if (--f->open == 0)
        awake_count--;
}

/* Closes every dataset of f; libhdf5 closes the file with the last id on it. */
static void doze(file_rec *f)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->dsets[i]->id >= 0) {
            H5Dclose(f->dsets[i]->id);
            f->dsets[i]->id = -1;
        }
    if (awake(f))
        awake_count--;
    f->open = 0;
    f->fileno = 0;
}

/* f was just used: the least recently used files beyond the limit doze. */
static void touch(file_rec *f)
{
    f->last_use = ++use_clock;
    while (awake_count > CFS_H5_AWAKE_FILES) {
        file_rec *oldest = NULL;
        for (file_rec *g = files; g; g = g->next)
            if (g != f && awake(g) && (!oldest || g->last_use < oldest->last_use))
                oldest = g;
        if (!oldest)
            return;
        doze(oldest);
    }
}

static file_rec *find_open(unsigned long fileno)
{
    for (file_rec *f = files; f; f = f->next)
        if (awake(f) && f->fileno == fileno)
            return f;
    return NULL;
}

/* A name libhdf5 gives by get (H5Fget_name: the file's, H5Iget_name: an object's path in its
 * file), malloc'd, or NULL. */
static char *name_of(hid_t id, ssize_t (*get)(hid_t, char *, size_t))
{
    ssize_t len = get(id, NULL, 0);
    char *name = len > 0 ? malloc((size_t)len + 1) : NULL;
    if (name && get(id, name, (size_t)len + 1) != len) {
        free(name);
        name = NULL;
    }
    return name;
}

/* The version of the file libhdf5 has open as file (through its own descriptor; one read
 * whole: what was read, h5_whole.h; a URL's: what the server says of it now, remote.h). */
static int version_of(hid_t file, version *out)
{
    void *handle = NULL;
    struct stat st;
    char *url = name_of(file, H5Fget_name);
    bool remote = url && cfs_is_url(url);
    int rc = remote ? cfs_source_stat(url, &st) : 0;
    free(url);
    bool whole = !remote && cfs_h5_whole_version(file, &st) == 0;
    if (!whole && (rc < 0 || (!remote && (H5Fget_vfd_handle(file, H5P_DEFAULT, &handle) < 0 ||
                                          !handle || fstat(*(int *)handle, &st) < 0))))
        return -1;
    *out = (version){st.st_dev, st.st_ino, st.st_size, st.st_mtim};
    return 0;
}

static bool same_version(const version *a, const version *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* The record of the file dset lives in: the awake one, or a new one holding its name and the
 * version found there (no descriptor: thousands of dozing files would hold thousands). */
static file_rec *record_of(hid_t dset, cfs_err *err)
{
    hid_t file = H5Iget_file_id(dset);
    cfs_h5_objkey key;
    version ver;
    if (file < 0 || cfs_h5_object_key(dset, &key) < 0 || version_of(file, &ver) < 0) {
        if (file >= 0)
            H5Fclose(file);
        cfs_err_set(err, "libhdf5 cannot tell which file a dataset is in");
        return NULL;
    }
    file_rec *f = find_open(key.fileno);
    if (f) {
        H5Fclose(file);
        return f;
    }
    f = calloc(1, sizeof *f);
    if (!f || !(f->path = name_of(file, H5Fget_name))) {
        free(f);
        H5Fclose(file);
        cfs_err_oom(err);
        return NULL;
    }
    H5Fclose(file);
    f->ver = ver;
    f->fileno = key.fileno;
    f->next = files;
    files = f;
    return f;
}

static void drop_record(file_rec *f)
{
    for (file_rec **p = &files; *p; p = &(*p)->next)
        if (*p == f) {
            *p = f->next;
            break;
        }
    free(f->path);
    free(f->dsets);
    free(f);
}

static int add_dset(file_rec *f, cfs_h5_dset *d)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 8;
        cfs_h5_dset **grown = realloc(f->dsets, cap * sizeof *grown);
        if (!grown)
            return -1;
        f->dsets = grown;
        f->cap = cap;
    }
    f->dsets[f->n++] = d;
    return 0;
}

cfs_h5_dset *cfs_h5_dset_keep(hid_t dset, hid_t dapl, cfs_err *err)
{
    if (cfs_h5_dataset_in_file(dset, err) < 0) {
        H5Dclose(dset);
        if (dapl != H5P_DEFAULT)
            H5Pclose(dapl);
        return NULL;
    }
    cfs_h5_dset *d = calloc(1, sizeof *d);
    file_rec *f = d ? record_of(dset, err) : NULL;
    if (d && f && (d->path = name_of(dset, H5Iget_name)) && add_dset(f, d) == 0) {
        d->file = f;
        d->dapl = dapl;
        d->id = dset;
        opened_one(f);
        touch(f);
        return d;
    }
    if (d && f && f->n == 0)
        drop_record(f);
    if (!d || f)
        cfs_err_oom(err);
    if (d)
        free(d->path);
    free(d);
    H5Dclose(dset);
    if (dapl != H5P_DEFAULT)
        H5Pclose(dapl);
    return NULL;
}

/* Opens the dataset again from the file's name, if what is there is still the version it was
 * found in (the file may have been replaced, rewritten or removed while it dozed: then its
 * reads fail, never read another file). */
static int wake(cfs_h5_dset *d, cfs_err *err)
{
    hid_t fapl = cfs_h5_read_fapl(d->file->path);
    hid_t file = fapl >= 0 ? cfs_h5_whole_open(d->file->path, fapl) : -1;
    if (fapl >= 0)
        H5Pclose(fapl);
    version now;
    if (file < 0 || version_of(file, &now) < 0 || !same_version(&now, &d->file->ver)) {
        if (file >= 0)
            H5Fclose(file);
        H5Eclear2(H5E_DEFAULT);
        return cfs_err_set(err, "%s: the file was removed or replaced since it was opened",
                           d->path);
    }
    d->id = H5Dopen2(file, d->path, d->dapl);
    cfs_h5_objkey key;
    if (d->id >= 0 && !awake(d->file) && cfs_h5_object_key(d->id, &key) == 0)
        d->file->fileno = key.fileno;
    if (file >= 0)
        H5Fclose(file); /* the dataset keeps it open */
    if (d->id < 0) {
        char detail[256];
        cfs_h5_error_detail(detail, sizeof detail);
        return cfs_err_set(err, "%s cannot be opened again: %s", d->path, detail);
    }
    opened_one(d->file);
    return 0;
}

hid_t cfs_h5_dset_id(cfs_h5_dset *d, cfs_err *err)
{
    if (d->id < 0 && wake(d, err) < 0)
        return -1;
    touch(d->file);
    return d->id;
}

void cfs_h5_dset_free(cfs_h5_dset *d)
{
    if (!d)
        return;
    file_rec *f = d->file;
    if (d->id >= 0) {
        H5Dclose(d->id);
        closed_one(f);
    }
    for (size_t i = 0; i < f->n; i++)
        if (f->dsets[i] == d) {
            f->dsets[i] = f->dsets[--f->n];
            break;
        }
    if (f->n == 0)
        drop_record(f);
    if (d->dapl != H5P_DEFAULT)
        H5Pclose(d->dapl);
    free(d->path);
    free(d);
}
