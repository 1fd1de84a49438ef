#include "unpack.h"

#include <bzlib.h>
#include <errno.h>
#include <fcntl.h>
#include <lzma.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define BLOCK (256u << 10)

typedef enum { GZIP, BZIP2, XZ } codec_kind;

typedef struct decoder {
    codec_kind kind;
    z_stream z;
    bz_stream bz;
    lzma_stream xz;
    bool open;
} decoder;

static bool decoder_start(decoder *d)
{
    if (d->kind == GZIP) {
        memset(&d->z, 0, sizeof d->z);
        d->open = inflateInit2(&d->z, 16 + MAX_WBITS) == Z_OK;
    } else if (d->kind == BZIP2) {
        memset(&d->bz, 0, sizeof d->bz);
        d->open = BZ2_bzDecompressInit(&d->bz, 0, 0) == BZ_OK;
    } else {
        d->xz = (lzma_stream)LZMA_STREAM_INIT;
        /* xz joins concatenated streams itself. */
        d->open = lzma_stream_decoder(&d->xz, CFS_XZ_MEMORY_LIMIT, LZMA_CONCATENATED) == LZMA_OK;
    }
    return d->open;
}

static void decoder_end(decoder *d)
{
    if (!d->open)
        return;
    if (d->kind == GZIP)
        inflateEnd(&d->z);
    else if (d->kind == BZIP2)
        BZ2_bzDecompressEnd(&d->bz);
    else
        lzma_end(&d->xz);
    d->open = false;
}

typedef enum { STEP_MORE, STEP_MEMBER_END, STEP_ERROR } step;

/* Feeds the input at *in (*in_len bytes, both advanced), fills out[0..cap), says what came. */
static step decoder_step(decoder *d, const unsigned char **in, size_t *in_len, bool finish,
                         unsigned char *out, size_t cap, size_t *made)
{
    int rc;
    if (d->kind == GZIP) {
        d->z.next_in = (unsigned char *)*in;
        d->z.avail_in = (uInt)*in_len;
        d->z.next_out = out;
        d->z.avail_out = (uInt)cap;
        rc = inflate(&d->z, Z_NO_FLUSH);
        *made = cap - d->z.avail_out;
        *in += *in_len - d->z.avail_in;
        *in_len = d->z.avail_in;
        return rc == Z_STREAM_END ? STEP_MEMBER_END
             : rc == Z_OK || (rc == Z_BUF_ERROR && !finish) ? STEP_MORE : STEP_ERROR;
    }
    if (d->kind == BZIP2) {
        d->bz.next_in = (char *)*in;
        d->bz.avail_in = (unsigned)*in_len;
        d->bz.next_out = (char *)out;
        d->bz.avail_out = (unsigned)cap;
        rc = BZ2_bzDecompress(&d->bz);
        *made = cap - d->bz.avail_out;
        *in += *in_len - d->bz.avail_in;
        *in_len = d->bz.avail_in;
        return rc == BZ_STREAM_END ? STEP_MEMBER_END : rc == BZ_OK ? STEP_MORE : STEP_ERROR;
    }
    d->xz.next_in = *in;
    d->xz.avail_in = *in_len;
    d->xz.next_out = out;
    d->xz.avail_out = cap;
    lzma_ret r = lzma_code(&d->xz, finish ? LZMA_FINISH : LZMA_RUN);
    *made = cap - d->xz.avail_out;
    *in += *in_len - d->xz.avail_in;
    *in_len = d->xz.avail_in;
    return r == LZMA_STREAM_END ? STEP_MEMBER_END
         : r == LZMA_OK || (r == LZMA_BUF_ERROR && !finish) ? STEP_MORE : STEP_ERROR;
}

static int write_full(int fd, const unsigned char *p, size_t n, cfs_err *err)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return cfs_err_errno(err, errno, "cannot write its decompressed copy");
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static bool codec_of(const char *codec, codec_kind *kind)
{
    if (strcmp(codec, "gzip") == 0)
        *kind = GZIP;
    else if (strcmp(codec, "bzip2") == 0)
        *kind = BZIP2;
    else if (strcmp(codec, "xz") == 0)
        *kind = XZ;
    else
        return false;
    return true;
}

static bool all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

/* Feeds one block (finish: the file has ended) and writes what comes out. *ended says whether
 * the last member has ended with the input fed so far. */
static int feed(decoder *d, const unsigned char *in, size_t in_len, bool finish, int out_fd,
                const char *codec, unsigned char *obuf, bool *ended, cfs_err *err)
{
    size_t made;
    do {
        if (*ended && in_len > 0) {
            /* gzip(1) ignores zero bytes after the last member, as tape blocking leaves them. */
            if (all_zero(in, in_len))
                return 0;
            /* Another member follows (gzip -c a b > ab, pbzip2): a new decoder reads it. */
            decoder_end(d);
            if (!decoder_start(d))
                return cfs_err_oom(err);
            *ended = false;
        }
        made = 0;
        step s = decoder_step(d, &in, &in_len, finish, obuf, BLOCK, &made);
        if (made && write_full(out_fd, obuf, made, err) < 0)
            return -1;
        if (s == STEP_ERROR)
            return cfs_err_setc(err, CFS_EDAMAGED, "its %s stream is damaged%s; re-download it",
                                codec, finish ? " or ends early (truncated?)" : "");
        if (s == STEP_MEMBER_END)
            *ended = true;
    } while (in_len > 0 || made == BLOCK || (finish && !*ended && made > 0));
    return 0;
}

/* The loop over the compressed file, one member after another until it ends. */
static int run(decoder *d, int in_fd, uint64_t total, int out_fd, const char *codec,
               cfs_unpack_progress progress, void *ctx, unsigned char *ibuf, unsigned char *obuf,
               cfs_err *err)
{
    uint64_t done = 0;
    bool ended = false;
    for (;;) {
        off_t written = lseek(out_fd, 0, SEEK_CUR);
        ssize_t got = read(in_fd, ibuf, BLOCK);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return cfs_err_errno(err, errno, "cannot be read");
        done += (uint64_t)got;
        bool eof = got == 0;
        /* At the end only xz has anything left to say (LZMA_FINISH); the others have ended or
         * were cut short. */
        if ((!eof || (d->kind == XZ && !ended)) &&
            feed(d, ibuf, (size_t)got, eof, out_fd, codec, obuf, &ended, err) < 0)
            return -1;
        if (progress && !eof &&
            progress(ctx, done, total, written < 0 ? 0 : (uint64_t)written, err) != 0)
            return -1;
        if (eof)
            return ended ? 0 : cfs_err_setc(err, CFS_EDAMAGED, "its %s stream ends early "
                                            "(truncated?); re-download it", codec);
    }
}

int cfs_unpack_file(const char *src, const char *codec, int out_fd, cfs_unpack_progress progress,
                    void *ctx, cfs_err *err)
{
    decoder d = {0};
    if (!codec_of(codec, &d.kind))
        return cfs_err_setc(err, CFS_EREFUSED, "compressed with %s, which is not read", codec);
    int in_fd = open(src, O_RDONLY | O_CLOEXEC);
    if (in_fd < 0)
        return cfs_err_errno(err, errno, "cannot be opened");
    struct stat st;
    unsigned char *ibuf = malloc(BLOCK), *obuf = malloc(BLOCK);
    int rc;
    if (!ibuf || !obuf || !decoder_start(&d))
        rc = cfs_err_oom(err);
    else if (fstat(in_fd, &st) < 0)
        rc = cfs_err_errno(err, errno, "cannot be read");
    else
        rc = run(&d, in_fd, (uint64_t)st.st_size, out_fd, codec, progress, ctx, ibuf, obuf, err);
    decoder_end(&d);
    free(ibuf);
    free(obuf);
    close(in_fd);
    return rc;
}
