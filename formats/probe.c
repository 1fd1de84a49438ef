#include "probe.h"
#include "unpack.h"
#include "remote.h"

#include <bzlib.h>
#include <errno.h>
#include <fcntl.h>
#include <lzma.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* Sharers of one detection: the HDF5 family, perhaps an archive family; a handful at most. */
#define MAX_MEMOS 8
/* Compressed bytes the peek reads at most: far more than any stream's first 4 KiB need. */
#define PEEK_INPUT_MAX (1u << 20)

typedef struct memo {
    const void *key;
    void *state;
    void (*release)(void *state);
} memo;

struct cfs_probe_input {
    char *path;
    const char *name;
    char *url_name;             /* a URL's name (remote.h), which name points to */
    bool remote;
    cfs_remote_info info;       /* a URL's version, which every read of it is of */
    bool is_dir;
    int fd;
    uint64_t size;
    unsigned char head[CFS_PROBE_HEAD_LEN];
    size_t head_len;
    bool peeked;
    unsigned char peek[CFS_PROBE_HEAD_LEN];
    size_t peek_len;
    memo memos[MAX_MEMOS];
    size_t nmemos;
};

static ssize_t pread_full(int fd, void *buf, size_t len, uint64_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

static int open_file(cfs_probe_input *in, cfs_err *err)
{
    /* O_NOATIME where permitted: probing a folder must not change what it looks like. */
    in->fd = open(in->path, O_RDONLY | O_CLOEXEC | O_NOATIME);
    if (in->fd < 0 && errno == EPERM)
        in->fd = open(in->path, O_RDONLY | O_CLOEXEC);
    if (in->fd < 0)
        return cfs_err_errno(err, errno, "cannot be opened");
    struct stat st;
    ssize_t got = fstat(in->fd, &st) == 0 ? pread_full(in->fd, in->head, sizeof in->head, 0) : -1;
    if (got < 0)
        return cfs_err_errno(err, errno, "cannot be read");
    in->size = (uint64_t)st.st_size;
    in->head_len = (size_t)got;
    return 0;
}

/* A URL's bytes through the process's reader of URLs (remote.h). */
static ssize_t remote_read(cfs_probe_input *in, void *buf, size_t len, uint64_t off)
{
    cfs_err ignored;
    if (off >= in->info.size)
        return 0;
    if (len > in->info.size - off)
        len = (size_t)(in->info.size - off);
    return cfs_remote_read(in->path, &in->info, off, buf, len, &ignored) < 0 ? -1 : (ssize_t)len;
}

static int open_url(cfs_probe_input *in, cfs_err *err)
{
    in->remote = true;
    if (!(in->url_name = cfs_url_name(in->path)))
        return cfs_err_oom(err);
    in->name = in->url_name;
    if (cfs_url_is_folder(in->path)) {
        in->is_dir = true;      /* read key by key by the formats that read folder URLs */
        return 0;
    }
    if (cfs_remote_info_of(in->path, &in->info, err) < 0)
        return -1;
    in->size = in->info.size;
    size_t want = in->size < sizeof in->head ? (size_t)in->size : sizeof in->head;
    if (want && cfs_remote_read(in->path, &in->info, 0, in->head, want, err) < 0)
        return -1;
    in->head_len = want;
    return 0;
}

int cfs_probe_input_open(const char *path, cfs_probe_input **out, cfs_err *err)
{
    *out = NULL;
    cfs_probe_input *in = calloc(1, sizeof *in);
    if (!in || !(in->path = strdup(path))) {
        free(in);
        return cfs_err_oom(err);
    }
    in->fd = -1;
    const char *slash = strrchr(in->path, '/');
    in->name = slash ? slash + 1 : in->path;
    struct stat st;
    int rc = 0;
    if (cfs_is_url(path))
        rc = open_url(in, err);
    else if (stat(path, &st) < 0)
        rc = cfs_err_errno(err, errno, "cannot be opened");
    else if (S_ISDIR(st.st_mode))
        in->is_dir = true;
    else if (!S_ISREG(st.st_mode))
        rc = cfs_err_setc(err, CFS_EREFUSED, "not a regular file or a folder");
    else
        rc = open_file(in, err);
    if (rc < 0) {
        cfs_probe_input_close(in);
        return -1;
    }
    *out = in;
    return 0;
}

void cfs_probe_input_close(cfs_probe_input *in)
{
    if (!in)
        return;
    for (size_t i = in->nmemos; i-- > 0;)
        if (in->memos[i].state && in->memos[i].release)
            in->memos[i].release(in->memos[i].state);
    if (in->fd >= 0)
        close(in->fd);
    free(in->path);
    free(in->url_name);
    free(in);
}

const char *cfs_probe_path(const cfs_probe_input *in)
{
    return in->path;
}

bool cfs_probe_is_dir(const cfs_probe_input *in)
{
    return in->is_dir;
}

uint64_t cfs_probe_size(const cfs_probe_input *in)
{
    return in->size;
}

const char *cfs_probe_name(const cfs_probe_input *in)
{
    return in->name;
}

ssize_t cfs_probe_read(cfs_probe_input *in, uint64_t off, void *buf, size_t len)
{
    if (in->remote && off + len > in->head_len)
        return remote_read(in, buf, len, off);
    if (in->is_dir || (in->fd < 0 && !in->remote))
        return -1;
    if (off + len <= in->head_len) {
        memcpy(buf, in->head + off, len);
        return (ssize_t)len;
    }
    return pread_full(in->fd, buf, len, off);
}

const unsigned char *cfs_probe_head(const cfs_probe_input *in, size_t *len)
{
    *len = in->head_len;
    return in->head;
}

const char *cfs_probe_compression(const cfs_probe_input *in)
{
    const unsigned char *h = in->head;
    size_t n = in->head_len;
    if (n >= 3 && h[0] == 0x1f && h[1] == 0x8b && h[2] == 8)
        return "gzip";
    if (n >= 4 && memcmp(h, "BZh", 3) == 0 && h[3] >= '1' && h[3] <= '9')
        return "bzip2";
    if (n >= 6 && memcmp(h, "\xfd" "7zXZ\0", 6) == 0)
        return "xz";
    return NULL;
}

/* One decoder behind three libraries: feed compressed bytes, take what comes out. */
typedef struct inflater {
    int kind; /* 0 gzip, 1 bzip2, 2 xz */
    z_stream z;
    bz_stream bz;
    lzma_stream xz;
} inflater;

static bool inflater_init(inflater *f, const char *codec)
{
    memset(f, 0, sizeof *f);
    if (strcmp(codec, "gzip") == 0)
        return f->kind = 0, inflateInit2(&f->z, 16 + MAX_WBITS) == Z_OK;
    if (strcmp(codec, "bzip2") == 0)
        return f->kind = 1, BZ2_bzDecompressInit(&f->bz, 0, 0) == BZ_OK;
    f->kind = 2;
    f->xz = (lzma_stream)LZMA_STREAM_INIT;
    return lzma_stream_decoder(&f->xz, CFS_XZ_MEMORY_LIMIT, 0) == LZMA_OK;
}

/* Inflates from in[0..n) into out[*have..cap); false at the stream's end or on an error. */
static bool inflater_step(inflater *f, const unsigned char *in, size_t n, unsigned char *out,
                          size_t cap, size_t *have)
{
    size_t room = cap - *have;
    bool more;
    if (f->kind == 0) {
        f->z.next_in = (unsigned char *)in;
        f->z.avail_in = (uInt)n;
        f->z.next_out = out + *have;
        f->z.avail_out = (uInt)room;
        more = inflate(&f->z, Z_NO_FLUSH) == Z_OK;
        *have += room - f->z.avail_out;
        return more && f->z.avail_in == 0;
    }
    if (f->kind == 1) {
        f->bz.next_in = (char *)in;
        f->bz.avail_in = (unsigned)n;
        f->bz.next_out = (char *)out + *have;
        f->bz.avail_out = (unsigned)room;
        more = BZ2_bzDecompress(&f->bz) == BZ_OK;
        *have += room - f->bz.avail_out;
        return more && f->bz.avail_in == 0;
    }
    f->xz.next_in = in;
    f->xz.avail_in = n;
    f->xz.next_out = out + *have;
    f->xz.avail_out = room;
    more = lzma_code(&f->xz, LZMA_RUN) == LZMA_OK;
    *have += room - f->xz.avail_out;
    return more && f->xz.avail_in == 0;
}

static void inflater_end(inflater *f)
{
    if (f->kind == 0)
        inflateEnd(&f->z);
    else if (f->kind == 1)
        BZ2_bzDecompressEnd(&f->bz);
    else
        lzma_end(&f->xz);
}

static void peek_once(cfs_probe_input *in)
{
    const char *codec = cfs_probe_compression(in);
    inflater f;
    if (!codec || !inflater_init(&f, codec))
        return;
    unsigned char block[16384];
    uint64_t off = 0;
    size_t have = 0;
    while (have < sizeof in->peek && off < PEEK_INPUT_MAX) {
        ssize_t n = cfs_probe_read(in, off, block, sizeof block);
        if (n <= 0 || !inflater_step(&f, block, (size_t)n, in->peek, sizeof in->peek, &have))
            break;
        off += (uint64_t)n;
    }
    inflater_end(&f);
    in->peek_len = have;
}

const unsigned char *cfs_probe_peek(cfs_probe_input *in, size_t *len)
{
    if (!in->peeked) {
        in->peeked = true;
        if (!in->is_dir)
            peek_once(in);
    }
    *len = in->peek_len;
    return in->peek_len ? in->peek : NULL;
}

void *cfs_probe_memo(cfs_probe_input *in, const void *key, void *(*make)(cfs_probe_input *in),
                     void (*release)(void *state))
{
    for (size_t i = 0; i < in->nmemos; i++)
        if (in->memos[i].key == key)
            return in->memos[i].state;
    if (in->nmemos == MAX_MEMOS)
        return NULL;
    memo *m = &in->memos[in->nmemos++];
    m->key = key;
    m->release = release;
    m->state = make(in);
    return m->state;
}
