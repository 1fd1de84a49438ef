#include "kept_chunks.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fileio.h"
#include "spill.h"

/* Encoded chunks gather in a writer up to this many bytes before one pwrite. */
enum { FLUSH_BYTES = 1 << 20 };

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

uint64_t cfs_kept_bound(const cfs_chunk_codec *codec, size_t esize, uint64_t total,
                        uint64_t chunk_len)
{
    if (!codec || total == 0)
        return total * esize;
    uint64_t nchunks = (total + chunk_len - 1) / chunk_len;
    uint64_t chunk = chunk_len * esize;
    uint64_t encoded = codec->bound(codec->id, (size_t)chunk);
    return nchunks * (encoded > chunk ? encoded : chunk);
}

uint64_t cfs_kept_bytes(cfs_kept_chunks *k)
{
    if (!k->codec)
        return k->total * k->esize;
    pthread_mutex_lock(&k->lock);
    uint64_t raw = k->slots * k->chunk_len * k->esize;
    pthread_mutex_unlock(&k->lock);
    return __atomic_load_n(&k->tail, __ATOMIC_RELAXED) + raw;
}

void cfs_kept_init(cfs_kept_chunks *k)
{
    memset(k, 0, sizeof *k);
    k->raw_fd = k->enc_fd = -1;
    pthread_mutex_init(&k->lock, NULL);
}

int cfs_kept_open(cfs_kept_chunks *k, const char *workdir, const cfs_chunk_codec *codec,
                  size_t esize, uint64_t total, uint64_t chunk_len, cfs_err *err)
{
    cfs_kept_close(k);
    k->codec = codec;
    k->esize = esize;
    k->total = total;
    k->chunk_len = chunk_len ? chunk_len : 1;
    k->nchunks = (total + k->chunk_len - 1) / k->chunk_len;
    if (codec && k->nchunks) {
        k->off = calloc(k->nchunks, sizeof *k->off);
        k->len = calloc(k->nchunks, sizeof *k->len);
        k->slot = calloc(k->nchunks, sizeof *k->slot);
        if (!k->off || !k->len || !k->slot) {
            cfs_kept_close(k);
            return cfs_err_oom(err);
        }
    }
    if ((k->raw_fd = cfs_spill_file(workdir, err)) < 0 ||
        (codec && (k->enc_fd = cfs_spill_file(workdir, err)) < 0)) {
        cfs_kept_close(k);
        return -1;
    }
    return 0;
}

void cfs_kept_close(cfs_kept_chunks *k)
{
    if (k->raw_fd >= 0)
        close(k->raw_fd);
    if (k->enc_fd >= 0)
        close(k->enc_fd);
    free(k->off);
    free(k->len);
    free(k->slot);
    pthread_mutex_destroy(&k->lock);
    cfs_kept_init(k);
}

void cfs_kept_writer_free(cfs_kept_writer *w)
{
    cfs_buf_free(&w->enc);
    free(w->pending);
    free(w->ends);
    free(w->pad);
    memset(w, 0, sizeof *w);
}

/* Writes the writer's encoded chunks at the end of the file in one go, then says where each is. */
static int flush(cfs_kept_chunks *k, cfs_kept_writer *w, cfs_err *err)
{
    if (w->npending == 0)
        return 0;
    uint64_t at = __atomic_fetch_add(&k->tail, (uint64_t)w->enc.len, __ATOMIC_RELAXED);
    if (cfs_pwrite_full(k->enc_fd, w->enc.data, w->enc.len, at, err) < 0)
        return -1;
    size_t begin = 0;
    for (size_t i = 0; i < w->npending; i++) {
        k->off[w->pending[i]] = at + begin;
        k->len[w->pending[i]] = (uint32_t)(w->ends[i] - begin);
        begin = w->ends[i];
    }
    w->npending = 0;
    cfs_buf_reset(&w->enc);
    return 0;
}

static int note_pending(cfs_kept_writer *w, uint64_t chunk, cfs_err *err)
{
    if (w->npending == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        uint64_t *p = realloc(w->pending, cap * sizeof *p);
        if (p)
            w->pending = p;
        size_t *e = realloc(w->ends, cap * sizeof *e);
        if (e)
            w->ends = e;
        if (!p || !e)
            return cfs_err_oom(err);
        w->cap = cap;
    }
    w->pending[w->npending] = chunk;
    w->ends[w->npending++] = w->enc.len;
    return 0;
}

/* The last chunk is shorter than the others: the store's chunk is zero past the end. */
static const void *padded(cfs_kept_writer *w, const void *values, size_t have, size_t whole,
                          cfs_err *err)
{
    if (whole > w->pad_cap) {
        free(w->pad);
        w->pad_cap = 0;
        if (!(w->pad = malloc(whole))) {
            cfs_err_oom(err);
            return NULL;
        }
        w->pad_cap = whole;
    }
    memcpy(w->pad, values, have);
    memset(w->pad + have, 0, whole - have);
    return w->pad;
}

static int encode_chunk(cfs_kept_chunks *k, cfs_kept_writer *w, uint64_t j,
                        const unsigned char *values, cfs_err *err)
{
    uint64_t start = j * k->chunk_len, n = min_u64(k->chunk_len, k->total - start);
    size_t whole = (size_t)(k->chunk_len * k->esize);
    const void *in = values;
    if (n < k->chunk_len && !(in = padded(w, values, (size_t)(n * k->esize), whole, err)))
        return -1;
    size_t before = w->enc.len;
    if (k->codec->encode(k->codec->id, k->esize, in, whole, &w->enc, err) < 0)
        return -1;
    if (w->enc.len - before > UINT32_MAX)
        return cfs_err_set(err, "an encoded chunk of %zu bytes", w->enc.len - before);
    if (note_pending(w, j, err) < 0)
        return -1;
    return w->enc.len >= FLUSH_BYTES ? flush(k, w, err) : 0;
}

/* The chunk's place in the raw file, given to the first range that writes a part of it. */
static uint64_t slot_of(cfs_kept_chunks *k, uint64_t j)
{
    pthread_mutex_lock(&k->lock);
    if (!k->slot[j])
        k->slot[j] = k->slots++ * k->chunk_len * k->esize + 1;
    uint64_t at = k->slot[j] - 1;
    pthread_mutex_unlock(&k->lock);
    return at;
}

int cfs_kept_write(cfs_kept_chunks *k, cfs_kept_writer *w, const void *values, uint64_t first,
                   uint64_t n, cfs_err *err)
{
    const unsigned char *v = values;
    size_t es = k->esize;
    if (!k->codec || n == 0)
        return cfs_pwrite_full(k->raw_fd, v, (size_t)(n * es), first * es, err);
    uint64_t end = first + n, c = k->chunk_len;
    for (uint64_t j = first / c; j < k->nchunks && j * c < end; j++) {
        uint64_t lo = j * c, hi = min_u64(lo + c, k->total);
        int rc;
        if (lo >= first && hi <= end) {
            rc = encode_chunk(k, w, j, v + (lo - first) * es, err);
        } else {
            /* Shared with a neighbouring range: this range's part, raw, in the chunk's slot. */
            uint64_t a = lo > first ? lo : first, b = min_u64(hi, end);
            rc = cfs_pwrite_full(k->raw_fd, v + (a - first) * es, (size_t)((b - a) * es),
                                 slot_of(k, j) + (a - lo) * es, err);
        }
        if (rc < 0)
            return -1;
    }
    return flush(k, w, err);
}

static int read_chunk_part(const cfs_kept_chunks *k, uint64_t j, uint64_t a, uint64_t b,
                           unsigned char *out, cfs_buf *enc, cfs_buf *dec, cfs_err *err)
{
    size_t es = k->esize;
    if (k->len[j] == 0)
        return k->slot[j] ? cfs_pread_full(k->raw_fd, out, (size_t)((b - a) * es),
                                           k->slot[j] - 1 + (a - j * k->chunk_len) * es, err)
                          : cfs_err_set(err, "a chunk of the layout's results was never made");
    cfs_buf_reset(enc);
    cfs_buf_reset(dec);
    if (cfs_buf_reserve(enc, k->len[j]) < 0)
        return cfs_err_oom(err);
    if (cfs_pread_full(k->enc_fd, enc->data, k->len[j], k->off[j], err) < 0)
        return -1;
    enc->len = k->len[j];
    if (k->codec->decode(k->codec->id, enc->data, enc->len, dec, err) < 0)
        return cfs_err_prefix(err, "a kept chunk of the layout");
    if (dec->len != k->chunk_len * es)
        return cfs_err_set(err, "a kept chunk of the layout decodes to %zu bytes, not %llu",
                           dec->len, (unsigned long long)(k->chunk_len * es));
    memcpy(out, dec->data + (a - j * k->chunk_len) * es, (size_t)((b - a) * es));
    return 0;
}

int cfs_kept_read(const cfs_kept_chunks *k, uint64_t start, uint64_t count, void *out,
                  cfs_err *err)
{
    size_t es = k->esize;
    if (!k->codec)
        return cfs_pread_full(k->raw_fd, out, (size_t)(count * es), start * es, err);
    cfs_buf enc = {0}, dec = {0};
    unsigned char *o = out;
    uint64_t end = start + count, c = k->chunk_len;
    int rc = 0;
    for (uint64_t j = start / c; rc == 0 && j < k->nchunks && j * c < end; j++) {
        uint64_t a = j * c > start ? j * c : start, b = min_u64((j + 1) * c, end);
        rc = read_chunk_part(k, j, a, b, o + (a - start) * es, &enc, &dec, err);
    }
    cfs_buf_free(&enc);
    cfs_buf_free(&dec);
    return rc;
}

int cfs_kept_encoded(const cfs_kept_chunks *k, uint64_t idx, uint64_t chunk_len, int codec_id,
                     cfs_buf *out, cfs_err *err)
{
    if (!k->codec || k->codec->id != codec_id || chunk_len != k->chunk_len ||
        idx >= k->nchunks || k->len[idx] == 0)
        return 0;
    if (cfs_buf_reserve(out, k->len[idx]) < 0)
        return cfs_err_oom(err);
    if (cfs_pread_full(k->enc_fd, out->data + out->len, k->len[idx], k->off[idx], err) < 0)
        return -1;
    out->len += k->len[idx];
    return 1;
}
