#include "h5_remote.h"

#include <stdlib.h>
#include <string.h>

#include "hdf5_util.h"
#include "remote.h"

/* Blocks an open file keeps: the superblock's, the root's and a few the reads go on from. */
#define KEPT_BLOCKS 8

typedef struct kept_block {
    uint64_t index;
    size_t len;
    unsigned char *bytes;       /* NULL: empty slot */
    uint64_t used;
} kept_block;

typedef struct remote_file {
    H5FD_t pub;                 /* first: libhdf5 sees this */
    char *url;
    cfs_remote_info info;
    haddr_t eoa;
    kept_block kept[KEPT_BLOCKS];
    uint64_t clock;
} remote_file;

static hid_t driver_id = -1;

static void push_error(const cfs_err *err)
{
    H5Epush2(H5E_DEFAULT, __FILE__, __func__, __LINE__, H5E_ERR_CLS, H5E_VFL, H5E_READERROR,
             "%s", err->msg);
}

static H5FD_t *remote_open(const char *name, unsigned flags, hid_t fapl, haddr_t maxaddr)
{
    (void)fapl;
    (void)maxaddr;
    cfs_err err = {0};
    if (flags & (H5F_ACC_RDWR | H5F_ACC_CREAT | H5F_ACC_TRUNC)) {
        cfs_err_set(&err, "%s: a URL is read only", name);
        push_error(&err);
        return NULL;
    }
    remote_file *f = calloc(1, sizeof *f);
    if (!f || !(f->url = strdup(name))) {
        free(f);
        return NULL;
    }
    if (cfs_remote_info_of(name, &f->info, &err) < 0) {
        push_error(&err);
        free(f->url);
        free(f);
        return NULL;
    }
    return &f->pub;
}

static herr_t remote_close(H5FD_t *file)
{
    remote_file *f = (remote_file *)file;
    for (size_t i = 0; i < KEPT_BLOCKS; i++)
        free(f->kept[i].bytes);
    free(f->url);
    free(f);
    return 0;
}

static int remote_cmp(const H5FD_t *a, const H5FD_t *b)
{
    const remote_file *x = (const remote_file *)a, *y = (const remote_file *)b;
    int c = strcmp(x->url, y->url);
    return c ? c : strcmp(x->info.version, y->info.version);
}

static herr_t remote_query(const H5FD_t *file, unsigned long *flags)
{
    (void)file;
    *flags = 0;
    return 0;
}

static haddr_t remote_get_eoa(const H5FD_t *file, H5FD_mem_t type)
{
    (void)type;
    return ((const remote_file *)file)->eoa;
}

static herr_t remote_set_eoa(H5FD_t *file, H5FD_mem_t type, haddr_t addr)
{
    (void)type;
    ((remote_file *)file)->eoa = addr;
    return 0;
}

static haddr_t remote_get_eof(const H5FD_t *file, H5FD_mem_t type)
{
    (void)type;
    return (haddr_t)((const remote_file *)file)->info.size;
}

static herr_t remote_get_handle(H5FD_t *file, hid_t fapl, void **handle)
{
    (void)fapl;
    *handle = file;
    return 0;
}

/* The block holding index, kept or fetched into the least recently used slot. */
static const kept_block *block_at(remote_file *f, uint64_t index, cfs_err *err)
{
    kept_block *slot = &f->kept[0];
    for (size_t i = 0; i < KEPT_BLOCKS; i++) {
        kept_block *k = &f->kept[i];
        if (k->bytes && k->index == index) {
            k->used = ++f->clock;
            return k;
        }
        if (!k->bytes || (slot->bytes && k->used < slot->used))
            slot = k;
    }
    uint64_t off = index * CFS_REMOTE_BLOCK;
    size_t len = (size_t)(f->info.size - off < CFS_REMOTE_BLOCK ? f->info.size - off
                                                                : CFS_REMOTE_BLOCK);
    unsigned char *bytes = slot->bytes ? slot->bytes : malloc(CFS_REMOTE_BLOCK);
    if (!bytes) {
        cfs_err_oom(err);
        return NULL;
    }
    slot->bytes = bytes;
    if (cfs_remote_read(f->url, &f->info, off, bytes, len, err) < 0) {
        free(slot->bytes);
        slot->bytes = NULL;
        return NULL;
    }
    slot->index = index;
    slot->len = len;
    slot->used = ++f->clock;
    return slot;
}

static herr_t remote_read(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                          void *buf)
{
    (void)type;
    (void)dxpl;
    remote_file *f = (remote_file *)file;
    cfs_err err = {0};
    unsigned char *out = buf;
    /* Past the end reads as zeros, as libhdf5's own drivers read it. */
    uint64_t end = addr + size, have = end < f->info.size ? end : f->info.size;
    if (addr < have && size >= CFS_REMOTE_BLOCK) {
        /* A large read (a chunk of a matrix) goes whole, past the kept blocks. */
        if (cfs_remote_read(f->url, &f->info, addr, out, (size_t)(have - addr), &err) < 0) {
            push_error(&err);
            return -1;
        }
    } else {
        for (uint64_t at = addr; at < have;) {
            const kept_block *k = block_at(f, at / CFS_REMOTE_BLOCK, &err);
            if (!k) {
                push_error(&err);
                return -1;
            }
            uint64_t in = at - k->index * CFS_REMOTE_BLOCK, take = k->len - in;
            if (take > have - at)
                take = have - at;
            memcpy(out + (at - addr), k->bytes + in, take);
            at += take;
        }
    }
    if (have < end)
        memset(out + (have > addr ? have - addr : 0), 0, (size_t)(end - (have > addr ? have : addr)));
    return 0;
}

static herr_t remote_write(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                           const void *buf)
{
    (void)file, (void)type, (void)dxpl, (void)addr, (void)size, (void)buf;
    return -1;
}

static herr_t remote_truncate(H5FD_t *file, hid_t dxpl, hbool_t closing)
{
    (void)file, (void)dxpl, (void)closing;
    return 0;
}

static const H5FD_class_t remote_class = {
    .name = "cellucid-remote",
    .maxaddr = (haddr_t)1 << 62,
    .fc_degree = H5F_CLOSE_WEAK,
    .open = remote_open,
    .close = remote_close,
    .cmp = remote_cmp,
    .query = remote_query,
    .get_eoa = remote_get_eoa,
    .set_eoa = remote_set_eoa,
    .get_eof = remote_get_eof,
    .get_handle = remote_get_handle,
    .read = remote_read,
    .write = remote_write,
    .truncate = remote_truncate,
    .fl_map = H5FD_FLMAP_DICHOTOMY,
};

hid_t cfs_h5_remote_driver(void)
{
    if (driver_id < 0)
        driver_id = H5FDregister(&remote_class);
    return driver_id;
}
