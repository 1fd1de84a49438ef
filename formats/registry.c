/*
 * The format table and content detection. Formats bid on what the registry learned about an
 * input (its first bytes, where its HDF5 superblock is); the name never decides.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pread */
#endif

#include "format.h"
#include "hdf5_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

extern const cfs_format cfs_format_h5ad;
extern const cfs_format cfs_format_loom;
extern const cfs_format cfs_format_tenx;
extern const cfs_format cfs_format_outs;

static const cfs_format *const formats[] = {
    &cfs_format_h5ad,
    &cfs_format_loom,
    &cfs_format_tenx,
    &cfs_format_outs,
    NULL,
};

/* The HDF5 reader whose refusal best explains an HDF5 file that no reader bid for: its open
 * says whether the file is damaged or simply not its kind. */
static const cfs_format *const hdf5_fallback = &cfs_format_h5ad;

#define HEAD_LEN 4096

static const char *const candidate_exts[] = {
    ".h5ad", ".h5", ".hdf5", ".he5", ".loom", ".h5mu", NULL,
};

static const char *candidate_ext(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; candidate_exts[i]; i++) {
        size_t e = strlen(candidate_exts[i]);
        if (n > e && strcasecmp(name + n - e, candidate_exts[i]) == 0)
            return candidate_exts[i];
    }
    return NULL;
}

int cfs_format_candidate_name(const char *name)
{
    const char *base = strrchr(name, '/');
    return candidate_ext(base ? base + 1 : name) != NULL;
}

/* The superblock offset: the head covers 0..2048; bigger user blocks are checked by pread. */
static long long find_hdf5(int fd, const unsigned char *head, size_t len, off_t size)
{
    long long off = cfs_h5_signature_offset(head, len);
    if (off >= 0)
        return off;
    for (long long at = HEAD_LEN; at <= CFS_H5_SIGNATURE_SCAN_MAX; at *= 2) {
        unsigned char sig[CFS_H5_SIGNATURE_LEN];
        if (at + CFS_H5_SIGNATURE_LEN > (long long)size)
            break;
        if (pread(fd, sig, sizeof sig, (off_t)at) == (ssize_t)sizeof sig &&
            memcmp(sig, cfs_h5_signature, sizeof sig) == 0)
            return at;
    }
    return -1;
}

static int read_head(const char *path, unsigned char *head, size_t *len, long long *h5off,
                     cfs_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cfs_err_set(err, "cannot be opened: %s", strerror(errno));
    struct stat st;
    ssize_t got = fstat(fd, &st) == 0 ? pread(fd, head, HEAD_LEN, 0) : -1;
    if (got < 0) {
        int e = errno;
        close(fd);
        return cfs_err_set(err, "cannot be read: %s", strerror(e));
    }
    *len = (size_t)got;
    *h5off = find_hdf5(fd, head, *len, st.st_size);
    close(fd);
    return 0;
}

static int fill_input(const char *path, unsigned char *head, cfs_probe_hdf5 *h5,
                      cfs_probe_input *in, cfs_err *err)
{
    struct stat st;
    memset(in, 0, sizeof *in);
    in->path = path;
    in->hdf5 = h5;
    in->hdf5_offset = -1;
    if (stat(path, &st) < 0)
        return cfs_err_set(err, "cannot be opened: %s", strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        in->is_dir = 1;
        return 0;
    }
    if (!S_ISREG(st.st_mode))
        return cfs_err_set(err, "not a regular file or a folder");
    in->head = head;
    return read_head(path, head, &in->head_len, &in->hdf5_offset, err);
}

/* Why nobody bid. For an HDF5 file the fallback reader's own refusal is the best reason. */
static const cfs_format *explain(const cfs_probe_input *in, cfs_err *err)
{
    if (in->hdf5_offset >= 0) {
        cfs_dataset *ds = NULL;
        if (hdf5_fallback->open(in->path, &ds, err) < 0)
            return NULL;
        cfs_dataset_free(ds); /* it reads after all (its probe was too strict) */
        return hdf5_fallback;
    }
    const char *base = strrchr(in->path, '/');
    const char *ext = candidate_ext(base ? base + 1 : in->path);
    if (in->is_dir)
        cfs_err_set(err, "a folder that is not a single-cell data set this version reads (the "
                    "folders it reads are Cell Ranger runs, recognised by their "
                    "filtered_feature_bc_matrix.h5 or filtered_feature_bc_matrix/)");
    else if (in->head_len == 0)
        cfs_err_set(err, "an empty file (0 bytes); re-download or re-write it");
    else if (ext)
        cfs_err_set(err, "not an HDF5 file (no HDF5 signature); it is not a %s file, whatever "
                    "its name says: re-download or re-write it", ext);
    else
        cfs_err_set(err, "not a recognised single-cell file (not HDF5; this version reads "
                    "AnnData .h5ad files): convert it to .h5ad");
    return NULL;
}

/* The winner for in; in->hdf5 may be left open for the winner's open (the caller releases it). */
static const cfs_format *detect(cfs_probe_input *in, cfs_err *err)
{
    const cfs_format *best = NULL;
    int best_bid = 0;
    for (size_t i = 0; formats[i]; i++) {
        int bid = formats[i]->probe(in);
        if (bid > best_bid) {
            best_bid = bid;
            best = formats[i];
        }
    }
    return best ? best : explain(in, err);
}

const cfs_format *cfs_format_detect(const char *path, cfs_err *err)
{
    unsigned char head[HEAD_LEN];
    cfs_probe_hdf5 h5 = CFS_PROBE_HDF5_INIT;
    cfs_probe_input in;
    if (fill_input(path, head, &h5, &in, err) < 0)
        return NULL;
    const cfs_format *f = detect(&in, err);
    cfs_h5_probe_release(&h5);
    return f;
}

int cfs_format_open(const char *path, cfs_dataset **out, cfs_err *err)
{
    *out = NULL;
    unsigned char head[HEAD_LEN];
    cfs_probe_hdf5 h5 = CFS_PROBE_HDF5_INIT;
    cfs_probe_input in;
    if (fill_input(path, head, &h5, &in, err) < 0)
        return -1;
    const cfs_format *f = detect(&in, err);
    int rc = f ? f->open(path, out, err) : -1;
    cfs_h5_probe_release(&h5);
    return rc;
}
