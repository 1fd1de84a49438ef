/* The R serialization byte source: layers of decompression under a buffered reader, the
 * container magic and stream header, and the primitives of the three formats (rstream.h). */
#include "rstream.h"
#include "unpack.h"

#include <bzlib.h>
#include <ctype.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <lzma.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define BUF_CAP (64u << 10)

typedef enum { L_FILE, L_MEM, L_GZIP, L_BZIP2, L_XZ } layer_kind;

/* One source of bytes with its own buffer: the file (or memory), or a decoder reading the layer
 * below. buf[pos..len) is what is read and not yet taken. */
typedef struct layer {
    layer_kind kind;
    struct layer *below;
    int fd;
    uint64_t file_read;      /* L_FILE: bytes read from the file so far */
    unsigned char *own;      /* the buffer (NULL for L_MEM, whose buf is the caller's bytes) */
    const unsigned char *buf;
    size_t pos, len;
    z_stream z;
    bz_stream bz;
    lzma_stream xz;
    bool open, ended;
} layer;

struct r_stream {
    layer *layers[R_STREAM_MAX_LAYERS + 1];
    int nlayers;
    layer *top;
    uint64_t taken;          /* bytes taken from the top layer */
    uint64_t file_size;
    r_format format;
    bool plain_file;         /* no decoder and a binary format: offsets are file offsets */
};

static const char *codec_name(layer_kind k)
{
    return k == L_GZIP ? "gzip" : k == L_BZIP2 ? "bzip2" : "xz";
}

static bool decoder_start(layer *l)
{
    if (l->kind == L_GZIP) {
        memset(&l->z, 0, sizeof l->z);
        l->open = inflateInit2(&l->z, 16 + MAX_WBITS) == Z_OK;
    } else if (l->kind == L_BZIP2) {
        memset(&l->bz, 0, sizeof l->bz);
        l->open = BZ2_bzDecompressInit(&l->bz, 0, 0) == BZ_OK;
    } else {
        l->xz = (lzma_stream)LZMA_STREAM_INIT;
        l->open = lzma_stream_decoder(&l->xz, CFS_XZ_MEMORY_LIMIT, LZMA_CONCATENATED) == LZMA_OK;
    }
    l->ended = false;
    return l->open;
}

static void decoder_end(layer *l)
{
    if (!l->open)
        return;
    if (l->kind == L_GZIP)
        inflateEnd(&l->z);
    else if (l->kind == L_BZIP2)
        BZ2_bzDecompressEnd(&l->bz);
    else if (l->kind == L_XZ)
        lzma_end(&l->xz);
    l->open = false;
}

static ssize_t layer_more(layer *l, cfs_err *err);

/* Makes room at the end of l's buffer: moves the untaken bytes to its start. */
static void compact(layer *l)
{
    if (l->pos > 0) {
        memmove(l->own, l->own + l->pos, l->len - l->pos);
        l->len -= l->pos;
        l->pos = 0;
    }
}

/* One decoder step over the bytes waiting in the layer below; *made output bytes appended. */
static int decode_step(layer *l, bool finish, size_t *made, cfs_err *err)
{
    layer *b = l->below;
    const unsigned char *in = b->buf + b->pos;
    size_t in_len = b->len - b->pos, cap = BUF_CAP - l->len;
    unsigned char *out = l->own + l->len;
    int state; /* 0 more, 1 member end, -1 error */
    if (l->kind == L_GZIP) {
        l->z.next_in = (unsigned char *)in;
        l->z.avail_in = (uInt)in_len;
        l->z.next_out = out;
        l->z.avail_out = (uInt)cap;
        int rc = inflate(&l->z, Z_NO_FLUSH);
        *made = cap - l->z.avail_out;
        b->pos += in_len - l->z.avail_in;
        state = rc == Z_STREAM_END ? 1 : rc == Z_OK || (rc == Z_BUF_ERROR && !finish) ? 0 : -1;
    } else if (l->kind == L_BZIP2) {
        l->bz.next_in = (char *)in;
        l->bz.avail_in = (unsigned)in_len;
        l->bz.next_out = (char *)out;
        l->bz.avail_out = (unsigned)cap;
        int rc = BZ2_bzDecompress(&l->bz);
        *made = cap - l->bz.avail_out;
        b->pos += in_len - l->bz.avail_in;
        state = rc == BZ_STREAM_END ? 1 : rc == BZ_OK ? 0 : -1;
    } else {
        l->xz.next_in = in;
        l->xz.avail_in = in_len;
        l->xz.next_out = out;
        l->xz.avail_out = cap;
        lzma_ret rc = lzma_code(&l->xz, finish ? LZMA_FINISH : LZMA_RUN);
        *made = cap - l->xz.avail_out;
        b->pos += in_len - l->xz.avail_in;
        state = rc == LZMA_STREAM_END ? 1
              : rc == LZMA_OK || (rc == LZMA_BUF_ERROR && !finish) ? 0 : -1;
    }
    l->len += *made;
    if (state < 0)
        return cfs_err_setc(err, CFS_EDAMAGED, "its %s stream is damaged%s; re-download it",
                            codec_name(l->kind), finish ? " or ends early (truncated?)" : "");
    if (state == 1)
        l->ended = true;
    if (state == 0 && finish && *made == 0)
        return cfs_err_setc(err, CFS_EDAMAGED, "its %s stream ends early (truncated?); "
                            "re-download it", codec_name(l->kind));
    return 0;
}

/* After a member's end: skips zero padding (gzip(1) ignores it) and starts a decoder for the
 * member that follows (gzip -c a b > ab, pbzip2); 0 with *eof when nothing follows. */
static int next_member(layer *l, bool *eof, cfs_err *err)
{
    layer *b = l->below;
    for (;;) {
        while (b->pos < b->len && b->buf[b->pos] == 0)
            b->pos++;
        if (b->pos < b->len)
            break;
        ssize_t got = layer_more(b, err);
        if (got < 0)
            return -1;
        if (got == 0)
            return *eof = true, 0;
    }
    if (l->kind == L_XZ) /* xz joins its streams itself: anything after is not xz */
        return *eof = true, 0;
    decoder_end(l);
    if (!decoder_start(l))
        return cfs_err_oom(err);
    *eof = false;
    return 0;
}

/* Appends bytes to l's buffer: how many (0 at the end of the stream), -1 with err set. */
static ssize_t layer_more(layer *l, cfs_err *err)
{
    if (l->kind == L_MEM)
        return 0;
    compact(l);
    if (l->len == BUF_CAP)
        return cfs_err_setc(err, CFS_EFAIL, "internal: read-ahead buffer full"), -1;
    if (l->kind == L_FILE) {
        for (;;) {
            ssize_t got = read(l->fd, l->own + l->len, BUF_CAP - l->len);
            if (got < 0 && errno == EINTR)
                continue;
            if (got < 0)
                return cfs_err_errno(err, errno, "cannot be read"), -1;
            l->len += (size_t)got;
            l->file_read += (uint64_t)got;
            return got;
        }
    }
    size_t made = 0;
    while (made == 0) {
        if (l->ended) {
            bool eof;
            if (next_member(l, &eof, err) < 0)
                return -1;
            if (eof)
                return 0;
        }
        bool finish = false;
        if (l->below->pos == l->below->len) {
            ssize_t got = layer_more(l->below, err);
            if (got < 0)
                return -1;
            finish = got == 0;
        }
        if (decode_step(l, finish, &made, err) < 0)
            return -1;
    }
    return (ssize_t)made;
}

/* Makes n <= BUF_CAP bytes wait in l's buffer if the stream has them; the count waiting. */
static ssize_t layer_peek(layer *l, size_t n, cfs_err *err)
{
    while (l->len - l->pos < n) {
        ssize_t got = layer_more(l, err);
        if (got < 0)
            return -1;
        if (got == 0)
            break;
    }
    return (ssize_t)(l->len - l->pos);
}

static layer *layer_new(layer_kind kind, layer *below)
{
    layer *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->kind = kind;
    l->below = below;
    l->fd = -1;
    if (kind != L_MEM) {
        l->own = malloc(BUF_CAP);
        l->buf = l->own;
        if (!l->own || (kind != L_FILE && !decoder_start(l))) {
            free(l->own);
            free(l);
            return NULL;
        }
    }
    return l;
}

void r_stream_close(r_stream *s)
{
    if (!s)
        return;
    for (int i = s->nlayers - 1; i >= 0; i--) {
        layer *l = s->layers[i];
        decoder_end(l);
        if (l->kind == L_FILE && l->fd >= 0)
            close(l->fd);
        free(l->own);
        free(l);
    }
    free(s);
}

/* ---- primitives ---- */

static int ended_early(r_stream *s, cfs_err *err)
{
    return cfs_err_setc(err, CFS_EDAMAGED, "the R stream ends early at byte %llu (truncated?)",
                        (unsigned long long)s->taken);
}

/* Makes n <= BUF_CAP bytes wait at the top; -1 (truncated, or a read error) otherwise. */
static int need(r_stream *s, size_t n, cfs_err *err)
{
    layer *t = s->top;
    if (t->len - t->pos >= n)
        return 0;
    ssize_t got = layer_peek(t, n, err);
    if (got < 0)
        return -1;
    return (size_t)got < n ? ended_early(s, err) : 0;
}

static int take(r_stream *s, void *dst, size_t n, cfs_err *err)
{
    layer *t = s->top;
    unsigned char *d = dst;
    while (n > 0) {
        if (t->pos == t->len) {
            ssize_t got = layer_more(t, err);
            if (got < 0)
                return -1;
            if (got == 0)
                return ended_early(s, err);
        }
        size_t k = t->len - t->pos < n ? t->len - t->pos : n;
        memcpy(d, t->buf + t->pos, k);
        t->pos += k;
        s->taken += k;
        d += k;
        n -= k;
    }
    return 0;
}

/* The next byte, or -1 at the end of the stream, -2 on a read error. */
static int next_char(r_stream *s, cfs_err *err)
{
    layer *t = s->top;
    if (t->pos == t->len) {
        ssize_t got = layer_more(t, err);
        if (got <= 0)
            return got < 0 ? -2 : -1;
    }
    s->taken++;
    return t->buf[t->pos++];
}

static void unget_char(r_stream *s)
{
    s->top->pos--;
    s->taken--;
}

/* An ASCII token (whitespace-separated) into buf[0..size). */
static int word(r_stream *s, char *buf, size_t size, cfs_err *err)
{
    int c;
    do
        c = next_char(s, err);
    while (c >= 0 && isspace(c));
    if (c == -2)
        return -1;
    if (c < 0)
        return ended_early(s, err);
    size_t n = 0;
    while (c >= 0 && !isspace(c)) {
        if (n + 1 >= size)
            return cfs_err_setc(err, CFS_EDAMAGED, "an ASCII token longer than %zu characters "
                                "at byte %llu", size - 1, (unsigned long long)s->taken);
        buf[n++] = (char)c;
        c = next_char(s, err);
    }
    if (c == -2)
        return -1;
    buf[n] = 0;
    return 0;
}

static int bad_token(r_stream *s, const char *what, const char *tok, cfs_err *err)
{
    return cfs_err_setc(err, CFS_EDAMAGED, "\"%.40s\" at byte %llu is not %s", tok,
                        (unsigned long long)s->taken, what);
}

static int ascii_int(r_stream *s, int32_t *v, cfs_err *err)
{
    char tok[128];
    if (word(s, tok, sizeof tok, err) < 0)
        return -1;
    if (strcmp(tok, "NA") == 0)
        return *v = INT32_MIN, 0;
    char *end;
    errno = 0;
    long x = strtol(tok, &end, 10);
    if (errno || end == tok || *end || x < INT32_MIN || x > INT32_MAX)
        return bad_token(s, "an integer", tok, err);
    *v = (int32_t)x;
    return 0;
}

static double na_real(void)
{
    uint64_t bits = 0x7FF00000000007A2ull;
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

static int ascii_double(r_stream *s, double *v, cfs_err *err)
{
    char tok[128];
    if (word(s, tok, sizeof tok, err) < 0)
        return -1;
    if (strcmp(tok, "NA") == 0)
        return *v = na_real(), 0;
    if (strcmp(tok, "NaN") == 0)
        return *v = NAN, 0;
    if (strcmp(tok, "Inf") == 0)
        return *v = INFINITY, 0;
    if (strcmp(tok, "-Inf") == 0)
        return *v = -INFINITY, 0;
    char *end;
    *v = strtod(tok, &end);
    if (end == tok || *end)
        return bad_token(s, "a number", tok, err);
    return 0;
}

int r_stream_int(r_stream *s, int32_t *v, cfs_err *err)
{
    return r_stream_ints(s, v, 1, err);
}

int r_stream_ints(r_stream *s, int32_t *v, size_t n, cfs_err *err)
{
    if (s->format == R_FORMAT_ASCII) {
        for (size_t i = 0; i < n; i++)
            if (ascii_int(s, &v[i], err) < 0)
                return -1;
        return 0;
    }
    if (n == 1) { /* the common case: flags words and lengths */
        if (need(s, 4, err) < 0)
            return -1;
        uint32_t u;
        memcpy(&u, s->top->buf + s->top->pos, 4);
        s->top->pos += 4;
        s->taken += 4;
        *v = (int32_t)(s->format == R_FORMAT_XDR ? be32toh(u) : le32toh(u));
        return 0;
    }
    if (take(s, v, n * 4, err) < 0)
        return -1;
    uint32_t *u = (uint32_t *)v;
    if (s->format == R_FORMAT_XDR)
        for (size_t i = 0; i < n; i++)
            u[i] = be32toh(u[i]);
    else
        for (size_t i = 0; i < n; i++)
            u[i] = le32toh(u[i]);
    return 0;
}

int r_stream_doubles(r_stream *s, double *v, size_t n, cfs_err *err)
{
    if (s->format == R_FORMAT_ASCII) {
        for (size_t i = 0; i < n; i++)
            if (ascii_double(s, &v[i], err) < 0)
                return -1;
        return 0;
    }
    if (take(s, v, n * 8, err) < 0)
        return -1;
    uint64_t *u = (uint64_t *)v;
    if (s->format == R_FORMAT_XDR)
        for (size_t i = 0; i < n; i++)
            u[i] = be64toh(u[i]);
    else
        for (size_t i = 0; i < n; i++)
            u[i] = le64toh(u[i]);
    return 0;
}

static int hex_digit(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int r_stream_raw(r_stream *s, uint8_t *v, size_t n, cfs_err *err)
{
    if (s->format != R_FORMAT_ASCII)
        return take(s, v, n, err);
    for (size_t i = 0; i < n; i++) {
        char tok[128];
        if (word(s, tok, sizeof tok, err) < 0)
            return -1;
        int hi = hex_digit((unsigned char)tok[0]);
        int lo = tok[0] && tok[1] ? hex_digit((unsigned char)tok[1]) : -2;
        if (hi < 0 || lo == -1 || (tok[0] && tok[1] && tok[2]))
            return bad_token(s, "a hexadecimal byte", tok, err);
        v[i] = (uint8_t)(lo == -2 ? hi : hi * 16 + lo);
    }
    return 0;
}

int r_stream_string(r_stream *s, char *v, size_t n, cfs_err *err)
{
    if (s->format != R_FORMAT_ASCII)
        return take(s, v, n, err);
    if (n == 0)
        return 0;
    int c;
    do
        c = next_char(s, err);
    while (c >= 0 && isspace(c));
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            c = next_char(s, err);
        if (c == -2)
            return -1;
        if (c < 0)
            return ended_early(s, err);
        if (c != '\\') {
            v[i] = (char)c;
            continue;
        }
        c = next_char(s, err);
        if (c == -2)
            return -1;
        if (c < 0)
            return ended_early(s, err);
        switch (c) {
        case 'n': v[i] = '\n'; break;
        case 't': v[i] = '\t'; break;
        case 'v': v[i] = '\v'; break;
        case 'b': v[i] = '\b'; break;
        case 'r': v[i] = '\r'; break;
        case 'f': v[i] = '\f'; break;
        case 'a': v[i] = '\a'; break;
        case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
            int d = 0, j = 0;
            while (c >= '0' && c < '8' && j < 3) {
                d = d * 8 + (c - '0');
                j++;
                c = j < 3 ? next_char(s, err) : c;
                if (j < 3 && c == -2)
                    return -1;
            }
            if (j < 3 && c >= 0)
                unget_char(s);
            v[i] = (char)d;
            break;
        }
        default: v[i] = (char)c; /* \\ \? \' \" and anything else: the character itself */
        }
    }
    return 0;
}

/* ---- opening ---- */

static const char *compression_of(const unsigned char *h, size_t n, layer_kind *kind)
{
    if (n >= 3 && h[0] == 0x1f && h[1] == 0x8b && h[2] == 8)
        return *kind = L_GZIP, "gzip";
    if (n >= 4 && memcmp(h, "BZh", 3) == 0 && h[3] >= '1' && h[3] <= '9')
        return *kind = L_BZIP2, "bzip2";
    if (n >= 6 && memcmp(h, "\xfd" "7zXZ\0", 6) == 0)
        return *kind = L_XZ, "xz";
    return NULL;
}

static int read_header(r_stream *s, r_header *hdr, cfs_err *err)
{
    memset(hdr, 0, sizeof *hdr);
    for (;;) {
        ssize_t got = layer_peek(s->top, 6, err);
        if (got < 0)
            return -1;
        layer_kind kind;
        const char *codec = compression_of(s->top->buf + s->top->pos, (size_t)got, &kind);
        if (!codec)
            break;
        if (s->nlayers > R_STREAM_MAX_LAYERS)
            return cfs_err_setc(err, CFS_EREFUSED, "compressed more than %d times over",
                                R_STREAM_MAX_LAYERS);
        layer *l = layer_new(kind, s->top);
        if (!l)
            return cfs_err_oom(err);
        s->layers[s->nlayers++] = l;
        s->top = l;
        hdr->codec[hdr->layers++] = codec;
    }
    ssize_t got = layer_peek(s->top, 5, err);
    if (got < 0)
        return -1;
    const unsigned char *h = s->top->buf + s->top->pos;
    char want = 0;
    if (got >= 5 && h[0] == 'R' && h[1] == 'D' && strchr("XAB", h[2]) && h[2] &&
        isdigit(h[3]) && h[4] == '\n') {
        if (h[3] != '2' && h[3] != '3')
            return cfs_err_setc(err, CFS_EREFUSED, "an R workspace of format version %c, which "
                                "is not read (versions 2 and 3 are)", h[3]);
        hdr->workspace = true;
        want = (char)h[2];
        s->top->pos += 5;
        s->taken += 5;
    }
    char fmt[2];
    if (layer_peek(s->top, 2, err) < 0)
        return -1;
    if (s->top->len - s->top->pos < 2)
        return cfs_err_setc(err, CFS_EREFUSED, "not an R data file (too short)");
    memcpy(fmt, s->top->buf + s->top->pos, 2);
    if (fmt[0] == '\n' && fmt[1] == 'A') { /* R tolerates a newline left by an ASCII stream */
        s->top->pos++;
        s->taken++;
        if (need(s, 2, err) < 0)
            return -1;
        memcpy(fmt, s->top->buf + s->top->pos, 2);
    }
    if (!strchr("XAB", fmt[0]) || !fmt[0] || fmt[1] != '\n')
        return cfs_err_setc(err, CFS_EREFUSED, hdr->workspace
                            ? "an R workspace whose stream has no format mark (X, A or B)"
                            : "not an R data file (no RDS or RDA magic)");
    if (want && want != fmt[0])
        return cfs_err_setc(err, CFS_EDAMAGED, "an R workspace marked RD%c whose stream is "
                            "of format %c", want, fmt[0]);
    s->top->pos += 2;
    s->taken += 2;
    s->format = hdr->format = (r_format)fmt[0];
    int32_t v[3];
    if (r_stream_ints(s, v, 3, err) < 0)
        return -1;
    if (v[0] != 2 && v[0] != 3)
        return cfs_err_setc(err, CFS_EREFUSED, "R serialization version %d, which is not read "
                            "(versions 2 and 3 are)", (int)v[0]);
    hdr->version = v[0];
    hdr->writer_version = (uint32_t)v[1];
    hdr->min_reader_version = (uint32_t)v[2];
    if (hdr->version == 3) {
        int32_t nelen;
        if (r_stream_int(s, &nelen, err) < 0)
            return -1;
        if (nelen < 0 || nelen >= (int32_t)sizeof hdr->encoding)
            return cfs_err_setc(err, CFS_EDAMAGED, "the R stream header names an encoding of "
                                "%d bytes (at most 63 are possible)", (int)nelen);
        if (r_stream_string(s, hdr->encoding, (size_t)nelen, err) < 0)
            return -1;
        hdr->encoding[nelen] = 0;
    }
    s->plain_file = s->nlayers == 1 && s->top->kind == L_FILE && s->format != R_FORMAT_ASCII;
    return 0;
}

static int open_with(r_stream *s, r_stream **out, r_header *hdr, cfs_err *err)
{
    s->top = s->layers[0];
    s->nlayers = 1;
    if (read_header(s, hdr, err) < 0) {
        r_stream_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

int r_stream_open(const char *path, r_stream **out, r_header *hdr, cfs_err *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cfs_err_errno(err, errno, "cannot be opened");
    return r_stream_open_fd(fd, out, hdr, err);
}

int r_stream_open_fd(int fd, r_stream **out, r_header *hdr, cfs_err *err)
{
    *out = NULL;
    r_stream *s = calloc(1, sizeof *s);
    layer *l = s ? layer_new(L_FILE, NULL) : NULL;
    if (!l) {
        free(s);
        close(fd);
        return cfs_err_oom(err);
    }
    s->layers[0] = l;
    s->nlayers = 1;
    l->fd = fd;
    struct stat st;
    if (fstat(l->fd, &st) != 0) {
        int e = errno;
        r_stream_close(s);
        return cfs_err_errno(err, e, "cannot be opened");
    }
    s->file_size = (uint64_t)st.st_size;
    return open_with(s, out, hdr, err);
}

int r_stream_open_mem(const void *data, size_t len, r_stream **out, r_header *hdr, cfs_err *err)
{
    *out = NULL;
    r_stream *s = calloc(1, sizeof *s);
    layer *l = s ? layer_new(L_MEM, NULL) : NULL;
    if (!l) {
        free(s);
        return cfs_err_oom(err);
    }
    l->buf = data;
    l->len = len;
    s->layers[0] = l;
    return open_with(s, out, hdr, err);
}

uint64_t r_stream_offset(const r_stream *s)
{
    return s->taken;
}

int64_t r_stream_file_offset(const r_stream *s)
{
    if (!s->plain_file)
        return -1;
    const layer *l = s->top;
    return (int64_t)(l->file_read - (l->len - l->pos));
}

uint64_t r_stream_bytes_left(const r_stream *s)
{
    if (s->nlayers == 1 && s->top->kind == L_MEM)
        return s->top->len - s->top->pos;
    int64_t off = r_stream_file_offset(s);
    if (off < 0 && !(s->nlayers == 1 && s->top->kind == L_FILE))
        return UINT64_MAX;
    const layer *l = s->top;
    uint64_t at = l->file_read - (l->len - l->pos);
    return s->file_size > at ? s->file_size - at : 0;
}
