/* Reading R objects from a serialization stream into r_obj nodes (robject.h): the item
 * dispatch, the reference table, ALTREP reconstruction, byte code skipping, and the helpers. */
#include "robject.h"

#include <iconv.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "utf8.h"

/* Pseudo-types of the stream (serialize.c). */
enum {
    REFSXP = 255, NILVALUE_SXP = 254, GLOBALENV_SXP = 253, UNBOUNDVALUE_SXP = 252,
    MISSINGARG_SXP = 251, BASENAMESPACE_SXP = 250, NAMESPACESXP = 249, PACKAGESXP = 248,
    PERSISTSXP = 247, BCREPDEF = 244, BCREPREF = 243, EMPTYENV_SXP = 242, BASEENV_SXP = 241,
    ATTRLANGSXP = 240, ATTRLISTSXP = 239, ALTREP_SXP = 238
};

#define CHUNK ((size_t)1 << 16) /* elements read (or handed to a sink) at a time */
#define SLAB 512

r_obj r_nil = {.type = R_NIL};

typedef struct slab {
    struct slab *next;
    unsigned used;
    r_obj nodes[SLAB];
} slab;

struct r_arena {
    slab *slabs;
    r_obj *singletons[256]; /* GLOBALENV_SXP etc., made on first use */
};

typedef struct rd {
    r_stream *s;
    r_file *f;
    cfs_err *err;
    const r_sink *sink;
    uint64_t threshold;
    unsigned max_depth;
    uint64_t max_generated;
    bool in_memory;         /* reading an ALTREP state that is rebuilt: never to the sink */
    r_obj **refs;
    size_t nrefs, caprefs;
    char native[64];        /* the writer's native encoding, "" if unknown */
} rd;

/* ---- nodes ---- */

static r_obj *node(rd *r, int type)
{
    slab *s = r->f->arena->slabs;
    if (!s || s->used == SLAB) {
        s = calloc(1, sizeof *s);
        if (!s) {
            cfs_err_oom(r->err);
            return NULL;
        }
        s->next = r->f->arena->slabs;
        r->f->arena->slabs = s;
    }
    r_obj *x = &s->nodes[s->used++];
    x->type = (uint8_t)type;
    return x;
}

static void node_free(r_obj *x)
{
    switch (x->type) {
    case R_LGL: case R_INT: case R_REAL: case R_CPLX: case R_RAW:
        free(x->u.data);
        break;
    case R_STR:
        if (x->u.strs)
            for (uint64_t i = 0; i < x->length; i++)
                free(x->u.strs[i].s);
        free(x->u.strs);
        break;
    case R_VEC: case R_EXPR:
        free(x->u.items);
        break;
    case R_SYM: case R_SPECIAL: case R_BUILTIN:
        free(x->u.sym.name);
        break;
    case R_CHAR:
        free(x->u.chr.s);
        break;
    default:
        break;
    }
}

void r_file_free(r_file *f)
{
    if (!f)
        return;
    if (f->arena) {
        for (slab *s = f->arena->slabs, *next; s; s = next) {
            next = s->next;
            for (unsigned i = 0; i < s->used; i++)
                node_free(&s->nodes[i]);
            free(s);
        }
        free(f->arena);
    }
    free(f);
}

/* ---- errors ---- */

/* A name from the file fit for a one-line message: at most 60 bytes, controls as '?'. */
static const char *shown(const char *s, char *buf, size_t cap)
{
    size_t n = 0;
    for (; s[n] && n + 1 < cap && n < 60; n++)
        buf[n] = (unsigned char)s[n] < 0x20 || s[n] == 0x7f ? '?' : s[n];
    buf[n] = 0;
    return buf;
}

static void *damaged(rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void *damaged(rd *r, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cfs_err_setc(r->err, CFS_EDAMAGED, "%s (at byte %llu)", msg,
                 (unsigned long long)r_stream_offset(r->s));
    return NULL;
}

const char *r_type_name(int type)
{
    switch (type) {
    case R_NIL: return "NULL";
    case R_SYM: return "symbol";
    case R_LIST: return "pairlist";
    case R_CLO: return "closure";
    case R_ENV: return "environment";
    case R_PROM: return "promise";
    case R_LANG: return "call";
    case R_SPECIAL: return "special";
    case R_BUILTIN: return "builtin";
    case R_CHAR: return "string";
    case R_LGL: return "logical vector";
    case R_INT: return "integer vector";
    case R_REAL: return "double vector";
    case R_CPLX: return "complex vector";
    case R_STR: return "character vector";
    case R_DOT: return "...";
    case R_VEC: return "list";
    case R_EXPR: return "expression";
    case R_BCODE: return "byte code";
    case R_EXTPTR: return "external pointer";
    case R_WEAKREF: return "weak reference";
    case R_RAW: return "raw vector";
    case R_S4: return "S4 object";
    case R_MISSINGARG: return "missing argument";
    case R_UNBOUND: return "unbound value";
    default: return "unknown type";
    }
}

/* ---- reference table ---- */

static int add_ref(rd *r, r_obj *x)
{
    if (r->nrefs == r->caprefs) {
        size_t cap = r->caprefs ? r->caprefs * 2 : 256;
        r_obj **p = realloc(r->refs, cap * sizeof *p);
        if (!p)
            return cfs_err_oom(r->err);
        r->refs = p;
        r->caprefs = cap;
    }
    r->refs[r->nrefs++] = x;
    return 0;
}

/* ---- lengths and room ---- */

static int read_length(rd *r, uint64_t *n)
{
    int32_t len;
    if (r_stream_int(r->s, &len, r->err) < 0)
        return -1;
    if (len < -1)
        return damaged(r, "a negative vector length %d", (int)len), -1;
    if (len >= 0)
        return *n = (uint64_t)len, 0;
    int32_t hl[2];
    if (r_stream_ints(r->s, hl, 2, r->err) < 0)
        return -1;
    if ((uint32_t)hl[0] > 65536)
        return damaged(r, "a long vector length whose upper part %u is over 65536",
                       (unsigned)hl[0]), -1;
    *n = ((uint64_t)(uint32_t)hl[0] << 32) | (uint32_t)hl[1];
    return 0;
}

/* Refuses n elements of at least `each` stream bytes when fewer bytes are left. */
static int check_room(rd *r, uint64_t n, unsigned each, const char *what)
{
    uint64_t left = r_stream_bytes_left(r->s);
    if (r->f->hdr.format == R_FORMAT_ASCII && each > 2)
        each = 2;
    if (left != UINT64_MAX && n > left / each)
        return damaged(r, "a %s of %llu elements, longer than the %llu bytes left", what,
                       (unsigned long long)n, (unsigned long long)left), -1;
    return 0;
}

static size_t elem_size(int type)
{
    return type == R_REAL ? 8 : type == R_CPLX ? 16 : type == R_RAW ? 1 : 4;
}

static int read_values(rd *r, int type, void *dst, size_t n)
{
    if (type == R_LGL || type == R_INT)
        return r_stream_ints(r->s, dst, n, r->err);
    if (type == R_REAL)
        return r_stream_doubles(r->s, dst, n, r->err);
    if (type == R_CPLX)
        return r_stream_doubles(r->s, dst, 2 * n, r->err);
    return r_stream_raw(r->s, dst, n, r->err);
}

/* Grows *p (of *cap elements of size sz) to hold at least want elements, doubling. */
static int grow(rd *r, void **p, uint64_t *cap, uint64_t want, size_t sz)
{
    if (want <= *cap)
        return 0;
    uint64_t c = *cap ? *cap : 16;
    while (c < want)
        c *= 2;
    if (c > SIZE_MAX / sz)
        return cfs_err_oom(r->err);
    void *q = realloc(*p, (size_t)(c * sz));
    if (!q)
        return cfs_err_oom(r->err);
    *p = q;
    *cap = c;
    return 0;
}

static bool to_sink(const rd *r, uint64_t n)
{
    return r->sink && !r->in_memory && n > r->threshold;
}

/* Values produced rather than read (ALTREP sequences) go the same way: gen fills a chunk. */
typedef void (*gen_fn)(void *ctx, uint64_t from, size_t n, void *dst);

/* The n values of an atomic vector into x: kept, or handed to the sink. gen NULL: read them. */
static int fill_atomic(rd *r, r_obj *x, uint64_t n, gen_fn gen, void *ctx)
{
    int type = x->type;
    size_t sz = elem_size(type);
    x->length = n;
    if (to_sink(r, n)) {
        r_sink_vec v = {.type = type, .length = n, .elem_size = sz,
                        .file_offset = gen ? -1 : r_stream_file_offset(r->s),
                        .format = r->f->hdr.format};
        if (r->sink->begin(r->sink->ctx, &v, &x->sink_id, r->err) != 0)
            return -1;
        void *buf = malloc(CHUNK * sz);
        if (!buf)
            return cfs_err_oom(r->err);
        for (uint64_t done = 0; done < n;) {
            size_t k = n - done < CHUNK ? (size_t)(n - done) : CHUNK;
            if (gen)
                gen(ctx, done, k, buf);
            else if (read_values(r, type, buf, k) < 0)
                return free(buf), -1;
            if (r->sink->write(r->sink->ctx, x->sink_id, buf, k * sz, r->err) != 0)
                return free(buf), -1;
            done += k;
        }
        free(buf);
        x->sunk = true;
        return r->sink->end(r->sink->ctx, x->sink_id, r->err) != 0 ? -1 : 0;
    }
    if (gen && n > r->max_generated) {
        damaged(r, "an ALTREP sequence of %llu values, more than this reader expands in memory "
                "(%llu)", (unsigned long long)n, (unsigned long long)r->max_generated);
        return -1;
    }
    uint64_t cap = 0;
    void *data = NULL;
    /* a generated vector's length is certain (and bounded above): one allocation */
    if (gen && grow(r, &data, &cap, n, sz) < 0)
        return -1;
    for (uint64_t done = 0; done < n;) {
        size_t k = n - done < CHUNK ? (size_t)(n - done) : CHUNK;
        if (grow(r, &data, &cap, done + k, sz) < 0)
            return free(data), -1;
        void *at = (char *)data + done * sz;
        if (gen)
            gen(ctx, done, k, at);
        else if (read_values(r, type, at, k) < 0)
            return free(data), -1;
        done += k;
    }
    x->u.data = data;
    r->f->bytes_kept += n * sz;
    return 0;
}

/* ---- strings ---- */

static const uint16_t cp1252_high[32] = {
    0x20AC, 0x81, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160,
    0x2039, 0x0152, 0x8D, 0x017D, 0x8F, 0x90, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013,
    0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x9D, 0x017E, 0x0178};

/* Single-byte text as UTF-8: Latin-1, or Windows-1252 (cp1252) for bytes 0x80-0x9F. */
static char *single_byte_to_utf8(const char *s, size_t n, bool cp1252, size_t *out_len)
{
    char *out = malloc(n * 3 + 1);
    if (!out)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned c = (unsigned char)s[i];
        uint32_t cp = cp1252 && c >= 0x80 && c < 0xA0 ? cp1252_high[c - 0x80] : c;
        k += cfs_utf8_put(out + k, cp);
    }
    out[k] = 0;
    *out_len = k;
    return out;
}

static bool enc_is(const char *enc, const char *const *names)
{
    for (; *names; names++)
        if (strcasecmp(enc, *names) == 0)
            return true;
    return false;
}

/* Text in a named encoding as UTF-8 through iconv; NULL if it does not convert. */
static char *iconv_to_utf8(const char *enc, const char *s, size_t n, size_t *out_len)
{
    iconv_t cd = iconv_open("UTF-8", enc);
    if (cd == (iconv_t)-1)
        return NULL;
    size_t cap = n * 4 + 1, left = cap - 1;
    char *out = malloc(cap), *o = out, *in = (char *)s;
    size_t inleft = n;
    if (out && iconv(cd, &in, &inleft, &o, &left) == (size_t)-1) {
        free(out);
        out = NULL;
    }
    iconv_close(cd);
    if (out) {
        *o = 0;
        *out_len = (size_t)(o - out);
    }
    return out;
}

/* The bytes buf[0..n) (malloc'd, n+1 long) as UTF-8 per their encoding; takes buf. */
static int to_utf8(rd *r, r_enc enc, char *buf, size_t n, r_str *out)
{
    static const char *const utf8[] = {"UTF-8", "utf8", NULL};
    static const char *const latin1[] = {"latin1", "ISO-8859-1", "ISO8859-1", "ISO_8859-1",
                                         NULL};
    static const char *const cp1252[] = {"CP1252", "windows-1252", "WINDOWS-1252", NULL};
    char *conv = NULL;
    size_t len = n;
    buf[n] = 0;
    if (enc == R_ENC_BYTES) {
        conv = buf;
    } else if (enc == R_ENC_LATIN1) {
        conv = single_byte_to_utf8(buf, n, true, &len);
    } else if (enc == R_ENC_NATIVE && r->native[0] && !enc_is(r->native, utf8)) {
        if (enc_is(r->native, latin1) || enc_is(r->native, cp1252))
            conv = single_byte_to_utf8(buf, n, true, &len);
        else
            conv = iconv_to_utf8(r->native, buf, n, &len);
    }
    if (!conv && cfs_utf8_valid((unsigned char *)buf, n))
        conv = buf; /* UTF-8, ASCII, or native text that is valid UTF-8 */
    if (!conv) { /* marked UTF-8 but not, or an unknown native encoding: Latin-1 */
        conv = cfs_text_to_utf8(buf, n);
        len = conv ? strlen(conv) : 0;
    }
    if (conv != buf)
        free(buf);
    if (!conv)
        return cfs_err_oom(r->err);
    if (len > UINT32_MAX)
        return free(conv), damaged(r, "a string of %zu bytes", len), -1;
    out->s = conv;
    out->len = (uint32_t)len;
    out->enc = (uint8_t)enc;
    r->f->bytes_kept += len;
    return 0;
}

/* A CHARSXP's body (its flags word read, gp in lev) into *out. */
static int read_charsxp(rd *r, unsigned lev, r_str *out)
{
    int32_t len;
    if (r_stream_int(r->s, &len, r->err) < 0)
        return -1;
    memset(out, 0, sizeof *out);
    if (len == -1)
        return 0; /* NA_character_ */
    if (len < 0)
        return damaged(r, "a string of negative length %d", (int)len), -1;
    if (check_room(r, (uint64_t)len, 1, "string") < 0)
        return -1;
    /* Allocated as the bytes arrive, so a damaged length costs only what the stream holds. */
    size_t n = (size_t)len, have = 0, cap = n < (1u << 20) ? n + 1 : (1u << 20);
    char *buf = malloc(cap);
    if (!buf)
        return cfs_err_oom(r->err);
    while (have < n) {
        if (have + 1 >= cap) {
            size_t c = cap * 2 > n + 1 ? n + 1 : cap * 2;
            char *p = realloc(buf, c);
            if (!p)
                return free(buf), cfs_err_oom(r->err);
            buf = p;
            cap = c;
        }
        size_t k = n - have < cap - 1 - have ? n - have : cap - 1 - have;
        if (r_stream_string(r->s, buf + have, k, r->err) < 0)
            return free(buf), -1;
        have += k;
    }
    r_enc enc = lev & (1u << 3) ? R_ENC_UTF8 : lev & (1u << 2) ? R_ENC_LATIN1
              : lev & (1u << 1) ? R_ENC_BYTES : lev & (1u << 6) ? R_ENC_ASCII : R_ENC_NATIVE;
    return to_utf8(r, enc, buf, n, out);
}

/* ---- items ---- */

static r_obj *read_item(rd *r, unsigned depth);
static r_obj *read_body(rd *r, uint32_t flags, unsigned depth);

static bool is_cons(int t)
{
    return t == R_LIST || t == R_CLO || t == R_PROM || t == R_LANG || t == R_DOT;
}

static void set_bits(r_obj *x, uint32_t flags)
{
    if (x == &r_nil)
        return;
    x->object = (flags >> 8) & 1;
    x->gp = (uint16_t)(flags >> 12);
    x->s4 = (x->gp >> 4) & 1;
}

static r_obj *singleton(rd *r, int code, int type, int env_kind)
{
    r_obj **slot = &r->f->arena->singletons[code];
    if (!*slot) {
        *slot = node(r, type);
        if (*slot)
            (*slot)->u.env.kind = (uint8_t)env_kind;
    }
    return *slot;
}

/* A pairlist chain read iteratively (a long attribute list or call must not recurse). */
static r_obj *read_cons_chain(rd *r, uint32_t flags, unsigned depth)
{
    r_obj *head = NULL, **link = &head;
    for (;;) {
        r_obj *cell = node(r, (int)(flags & 0xFF));
        if (!cell)
            return NULL;
        set_bits(cell, flags);
        *link = cell;
        if ((flags & (1u << 9)) && !(cell->attr = read_item(r, depth + 1)))
            return NULL;
        if ((flags & (1u << 10)) && !(cell->u.cons.tag = read_item(r, depth + 1)))
            return NULL;
        if (!(cell->u.cons.car = read_item(r, depth + 1)))
            return NULL;
        int32_t f;
        if (r_stream_int(r->s, &f, r->err) < 0)
            return NULL;
        flags = (uint32_t)f;
        if (!is_cons((int)(flags & 0xFF))) {
            if (!(cell->u.cons.cdr = read_body(r, flags, depth + 1)))
                return NULL;
            return head;
        }
        r->f->items++;
        link = &cell->u.cons.cdr;
    }
}

static r_obj *read_string_vec(rd *r, unsigned depth, r_obj **out)
{
    int32_t v[2];
    if (r_stream_ints(r->s, v, 2, r->err) < 0)
        return NULL;
    if (v[0] != 0)
        return damaged(r, "a name vector with a names field %d (only 0 is written)", (int)v[0]);
    if (v[1] < 0 || check_room(r, (uint64_t)v[1], 8, "name vector") < 0)
        return v[1] < 0 ? damaged(r, "a name vector of negative length %d", (int)v[1]) : NULL;
    r_obj *x = node(r, R_STR);
    if (!x)
        return NULL;
    (void)depth;
    uint64_t cap = 0;
    for (int32_t i = 0; i < v[1]; i++) {
        int32_t f;
        if (r_stream_int(r->s, &f, r->err) < 0)
            return NULL;
        r->f->items++;
        if ((f & 0xFF) != R_CHAR)
            return damaged(r, "element %d of a name vector is a %s, not a string", (int)i,
                           r_type_name(f & 0xFF));
        if (grow(r, (void **)&x->u.strs, &cap, (uint64_t)i + 1, sizeof(r_str)) < 0)
            return NULL;
        x->length = (uint64_t)i;
        if (read_charsxp(r, (uint32_t)f >> 12, &x->u.strs[i]) < 0)
            return NULL;
        x->length = (uint64_t)i + 1;
    }
    *out = x;
    return x;
}

static r_obj *read_str(rd *r, unsigned depth)
{
    uint64_t n;
    if (read_length(r, &n) < 0 || check_room(r, n, 8, "character vector") < 0)
        return NULL;
    r_obj *x = node(r, R_STR);
    if (!x)
        return NULL;
    uint64_t cap = 0;
    for (uint64_t i = 0; i < n; i++) {
        int32_t f;
        if (r_stream_int(r->s, &f, r->err) < 0)
            return NULL;
        r->f->items++;
        if ((f & 0xFF) != R_CHAR)
            return damaged(r, "element %llu of a character vector is a %s, not a string",
                           (unsigned long long)i + 1, r_type_name(f & 0xFF));
        if (grow(r, (void **)&x->u.strs, &cap, i + 1, sizeof(r_str)) < 0)
            return NULL;
        if (read_charsxp(r, (uint32_t)f >> 12, &x->u.strs[i]) < 0)
            return NULL;
        x->length = i + 1;
        if ((f & (1u << 9)) && !read_item(r, depth + 1)) /* old files: read and dropped */
            return NULL;
    }
    r->f->bytes_kept += n * sizeof(r_str);
    return x;
}

static r_obj *read_list(rd *r, int type, unsigned depth)
{
    uint64_t n;
    if (read_length(r, &n) < 0 || check_room(r, n, 4, "list") < 0)
        return NULL;
    r_obj *x = node(r, type);
    if (!x)
        return NULL;
    uint64_t cap = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (grow(r, (void **)&x->u.items, &cap, i + 1, sizeof(r_obj *)) < 0)
            return NULL;
        r_obj *e = read_item(r, depth + 1);
        if (!e)
            return NULL;
        x->u.items[i] = e;
        x->length = i + 1;
    }
    r->f->bytes_kept += n * sizeof(r_obj *);
    return x;
}

/* ---- byte code (parsed and discarded; its symbols still enter the reference table) ---- */

static int read_bc1(rd *r, int32_t nreps, unsigned depth);

static int read_bclang(rd *r, int32_t type, int32_t nreps, unsigned depth)
{
    for (;;) {
        if (depth > r->max_depth)
            return damaged(r, "byte code nested deeper than %u levels", r->max_depth), -1;
        if (type == BCREPREF) {
            int32_t i;
            if (r_stream_int(r->s, &i, r->err) < 0)
                return -1;
            if (i < 0 || i >= nreps)
                return damaged(r, "a byte-code shared cell %d of %d", (int)i, (int)nreps), -1;
            return 0;
        }
        if (type != BCREPDEF && type != R_LANG && type != R_LIST && type != ATTRLANGSXP &&
            type != ATTRLISTSXP)
            return read_item(r, depth + 1) ? 0 : -1;
        if (type == BCREPDEF) {
            int32_t v[2];
            if (r_stream_ints(r->s, v, 2, r->err) < 0)
                return -1;
            if (v[0] < 0 || v[0] >= nreps)
                return damaged(r, "a byte-code shared cell %d of %d", (int)v[0],
                               (int)nreps), -1;
            type = v[1];
            if (type != R_LANG && type != R_LIST && type != ATTRLANGSXP &&
                type != ATTRLISTSXP)
                return damaged(r, "a byte-code shared cell of type %d", (int)type), -1;
        }
        if ((type == ATTRLANGSXP || type == ATTRLISTSXP) && !read_item(r, depth + 1))
            return -1;
        if (!read_item(r, depth + 1)) /* tag */
            return -1;
        int32_t t;
        if (r_stream_int(r->s, &t, r->err) < 0 || read_bclang(r, t, nreps, depth + 1) < 0)
            return -1; /* car */
        if (r_stream_int(r->s, &type, r->err) < 0) /* cdr: the loop */
            return -1;
        depth++;
    }
}

static int read_bc1(rd *r, int32_t nreps, unsigned depth)
{
    if (depth > r->max_depth)
        return damaged(r, "byte code nested deeper than %u levels", r->max_depth), -1;
    if (!read_item(r, depth + 1)) /* the code: an integer vector */
        return -1;
    int32_t n;
    if (r_stream_int(r->s, &n, r->err) < 0)
        return -1;
    if (n < 0 || check_room(r, (uint64_t)n, 4, "byte-code constant pool") < 0)
        return n < 0 ? damaged(r, "%d byte-code constants", (int)n), -1 : -1;
    for (int32_t i = 0; i < n; i++) {
        int32_t type;
        if (r_stream_int(r->s, &type, r->err) < 0)
            return -1;
        int rc;
        if (type == R_BCODE)
            rc = read_bc1(r, nreps, depth + 1);
        else if (type == R_LANG || type == R_LIST || type == BCREPDEF || type == BCREPREF ||
                 type == ATTRLANGSXP || type == ATTRLISTSXP)
            rc = read_bclang(r, type, nreps, depth + 1);
        else
            rc = read_item(r, depth + 1) ? 0 : -1;
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* ---- ALTREP ---- */

typedef struct seq {
    double first, step;
} seq;

static void gen_intseq(void *ctx, uint64_t from, size_t n, void *dst)
{
    const seq *q = ctx;
    int32_t *d = dst;
    for (size_t i = 0; i < n; i++)
        d[i] = (int32_t)(q->first + (double)(from + i) * q->step);
}

static void gen_realseq(void *ctx, uint64_t from, size_t n, void *dst)
{
    const seq *q = ctx;
    double *d = dst;
    for (size_t i = 0; i < n; i++)
        d[i] = q->first + (double)(from + i) * q->step;
}

/* A double as as.character() writes it: 15 significant digits, trailing zeros dropped, fixed
 * notation unless scientific is narrower by more than scipen characters. */
static void format_real(double v, int scipen, char dec, char *out, size_t cap)
{
    if (isnan(v)) {
        snprintf(out, cap, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, cap, v > 0 ? "Inf" : "-Inf");
        return;
    }
    if (v == 0) {
        snprintf(out, cap, "0");
        return;
    }
    char e[40];
    snprintf(e, sizeof e, "%.14e", v);
    char *ex = strchr(e, 'e');
    int e10 = atoi(ex + 1);
    /* Mantissa digits after dropping trailing zeros. */
    char *last = ex - 1;
    while (*last == '0')
        last--;
    if (*last == '.')
        last--;
    int digits = 0;
    for (char *p = e; p <= last; p++)
        digits += *p >= '0' && *p <= '9';
    char sci[48];
    snprintf(sci, sizeof sci, "%.*s%s", (int)(last - e + 1), e, ex);
    int decimals = digits - 1 - e10 > 0 ? digits - 1 - e10 : 0;
    char fix[400];
    snprintf(fix, sizeof fix, "%.*f", decimals, v);
    const char *pick = (long)strlen(fix) <= (long)strlen(sci) + scipen ? fix : sci;
    snprintf(out, cap, "%s", pick);
    if (dec != '.')
        for (char *p = out; *p; p++)
            if (*p == '.')
                *p = dec;
}

static r_obj *deferred_string(rd *r, const r_obj *state)
{
    if (state->type != R_LIST)
        return damaged(r, "a deferred string whose state is a %s", r_type_name(state->type));
    const r_obj *v = state->u.cons.car, *info = state->u.cons.cdr;
    if (!v || (v->type != R_INT && v->type != R_REAL) || v->sunk)
        return damaged(r, "a deferred string of a %s", v ? r_type_name(v->type) : "nothing");
    int scipen = 0;
    char dec = '.';
    if (info && info->type == R_INT && info->length >= 1 && info->u.data &&
        ((int32_t *)info->u.data)[0] != R_NA_INT)
        scipen = ((int32_t *)info->u.data)[0];
    const r_obj *od = r_attr(info, "OutDec");
    const char *ods = od ? r_str_at(od, 0, NULL) : NULL;
    if (ods && ods[0] && !ods[1])
        dec = ods[0];
    r_obj *x = node(r, R_STR);
    if (!x)
        return NULL;
    if (v->length && !(x->u.strs = calloc((size_t)v->length, sizeof(r_str))))
        return cfs_err_oom(r->err), NULL;
    for (uint64_t i = 0; i < v->length; i++) {
        char buf[420];
        if (v->type == R_INT) {
            int32_t k = ((int32_t *)v->u.data)[i];
            if (k == R_NA_INT) {
                x->length = i + 1;
                continue;
            }
            snprintf(buf, sizeof buf, "%" PRId32, k);
        } else {
            double d = ((double *)v->u.data)[i];
            if (r_is_na_real(d)) {
                x->length = i + 1;
                continue;
            }
            format_real(d, scipen, dec, buf, sizeof buf);
        }
        size_t n = strlen(buf);
        if (!(x->u.strs[i].s = strdup(buf)))
            return cfs_err_oom(r->err), NULL;
        x->u.strs[i].len = (uint32_t)n;
        x->u.strs[i].enc = R_ENC_ASCII;
        x->length = i + 1;
        r->f->bytes_kept += n;
    }
    return x;
}

static const double *seq_state(rd *r, const r_obj *state, double out[3])
{
    if (state->length != 3 || state->sunk)
        return damaged(r, "a compact sequence whose state is a %s of length %llu",
                       r_type_name(state->type), (unsigned long long)state->length);
    for (int i = 0; i < 3; i++)
        if (state->type == R_REAL)
            out[i] = ((double *)state->u.data)[i];
        else if (state->type == R_INT)
            out[i] = ((int32_t *)state->u.data)[i];
        else
            return damaged(r, "a compact sequence whose state is a %s",
                           r_type_name(state->type));
    if (!(out[0] >= 0 && out[0] <= (double)R_MAX_EXPANDED) || out[0] != floor(out[0]) ||
        !isfinite(out[1]) || !isfinite(out[2]))
        return damaged(r, "a compact sequence of length %g from %g by %g", out[0], out[1],
                       out[2]);
    return out;
}

static r_obj *read_altrep(rd *r, uint32_t flags, unsigned depth)
{
    r_obj *info = read_item(r, depth + 1);
    if (!info)
        return NULL;
    const char *cls = NULL, *pkg = NULL;
    int base = -1;
    if (info->type == R_LIST && info->u.cons.car && info->u.cons.car->type == R_SYM) {
        cls = info->u.cons.car->u.sym.name;
        const r_obj *c2 = info->u.cons.cdr;
        if (c2 && c2->type == R_LIST && c2->u.cons.car && c2->u.cons.car->type == R_SYM) {
            pkg = c2->u.cons.car->u.sym.name;
            const r_obj *c3 = c2->u.cons.cdr, *t;
            if (c3 && c3->type == R_LIST && (t = c3->u.cons.car) && t->type == R_INT &&
                t->length == 1 && t->u.data)
                base = ((int32_t *)t->u.data)[0];
        }
    }
    if (!cls || !pkg || base < 0)
        return damaged(r, "an ALTREP object whose class information is malformed");
    /* what the reconstruction looks at stays in the tree, whatever the sink's threshold */
    bool deferred = strcmp(cls, "deferred_string") == 0;
    bool compact = strcmp(cls, "compact_intseq") == 0 || strcmp(cls, "compact_realseq") == 0;
    bool was = r->in_memory;
    r->in_memory = was || deferred || compact;
    r_obj *state = read_item(r, depth + 1);
    r->in_memory = was;
    if (!state)
        return NULL;
    r_obj *attr = read_item(r, depth + 1);
    if (!attr)
        return NULL;
    r_obj *x = NULL;
    if (strcmp(cls, "compact_intseq") == 0 || strcmp(cls, "compact_realseq") == 0) {
        bool is_int = cls[8] == 'i';
        double st[3];
        if (!seq_state(r, state, st))
            return NULL;
        seq q = {st[1], st[2]};
        if (is_int) {
            double lastv = st[1] + (st[0] > 0 ? st[0] - 1 : 0) * st[2];
            if ((st[2] != 1 && st[2] != -1) || st[1] != floor(st[1]) ||
                fabs(st[1]) > INT32_MAX || fabs(lastv) > INT32_MAX)
                return damaged(r, "a compact integer sequence from %g by %g of length %g",
                               st[1], st[2], st[0]);
        }
        if (!(x = node(r, is_int ? R_INT : R_REAL)) ||
            fill_atomic(r, x, (uint64_t)st[0], is_int ? gen_intseq : gen_realseq, &q) < 0)
            return NULL;
    } else if (deferred) {
        if (!(x = deferred_string(r, state)))
            return NULL;
    } else if (strncmp(cls, "wrap_", 5) == 0 && strcmp(pkg, "base") == 0) {
        static const struct { const char *name; int type; } wraps[] = {
            {"wrap_integer", R_INT}, {"wrap_logical", R_LGL}, {"wrap_real", R_REAL},
            {"wrap_complex", R_CPLX}, {"wrap_raw", R_RAW}, {"wrap_string", R_STR},
            {"wrap_list", R_VEC}};
        int want = -1;
        for (size_t i = 0; i < sizeof wraps / sizeof wraps[0]; i++)
            if (strcmp(cls, wraps[i].name) == 0)
                want = wraps[i].type;
        char b1[64];
        if (want < 0)
            return cfs_err_setc(r->err, CFS_EREFUSED, "an ALTREP object of class %s, which "
                                "is not read", shown(cls, b1, sizeof b1)), NULL;
        x = state->type == R_LIST ? state->u.cons.car : NULL;
        if (!x || x->type != want)
            return damaged(r, "a %s wrapping a %s", shown(cls, b1, sizeof b1),
                           x ? r_type_name(x->type) : "nothing");
    } else {
        char b1[64], b2[64];
        return cfs_err_setc(r->err, CFS_EREFUSED, "an ALTREP object of class %s from package "
                            "%s, which only that package can rebuild (its data is not in "
                            "the file)", shown(cls, b1, sizeof b1), shown(pkg, b2, sizeof b2)),
               NULL;
    }
    if (x->type != (unsigned)base) {
        char b1[64];
        return damaged(r, "an ALTREP %s declared as type %d", shown(cls, b1, sizeof b1), base);
    }
    x->attr = attr->type == R_NIL ? NULL : attr;
    set_bits(x, flags);
    return x;
}

/* ---- the dispatch ---- */

static r_obj *read_item(rd *r, unsigned depth)
{
    if (depth > r->max_depth)
        return damaged(r, "objects nested deeper than %u levels", r->max_depth);
    int32_t f;
    if (r_stream_int(r->s, &f, r->err) < 0)
        return NULL;
    return read_body(r, (uint32_t)f, depth);
}

static r_obj *read_body(rd *r, uint32_t flags, unsigned depth)
{
    r->f->items++;
    int type = (int)(flags & 0xFF);
    bool has_attr = flags & (1u << 9);
    r_obj *x = NULL;
    switch (type) {
    case NILVALUE_SXP:
    case R_NIL:
        return &r_nil;
    case GLOBALENV_SXP:
        return singleton(r, type, R_ENV, R_ENV_GLOBAL);
    case BASEENV_SXP:
        return singleton(r, type, R_ENV, R_ENV_BASE);
    case EMPTYENV_SXP:
        return singleton(r, type, R_ENV, R_ENV_EMPTY);
    case BASENAMESPACE_SXP:
        return singleton(r, type, R_ENV, R_ENV_BASENAMESPACE);
    case UNBOUNDVALUE_SXP:
        return singleton(r, type, R_UNBOUND, 0);
    case MISSINGARG_SXP:
        return singleton(r, type, R_MISSINGARG, 0);
    case REFSXP: {
        int32_t i = (int32_t)(flags >> 8);
        if (i == 0 && r_stream_int(r->s, &i, r->err) < 0)
            return NULL;
        if (i < 1 || (size_t)i > r->nrefs)
            return damaged(r, "a reference to object %d of the %zu seen", (int)i, r->nrefs);
        return r->refs[i - 1];
    }
    case PERSISTSXP:
    case PACKAGESXP:
    case NAMESPACESXP: {
        r_obj *names = NULL;
        if (!read_string_vec(r, depth, &names) || !(x = node(r, R_ENV)))
            return NULL;
        x->u.env.kind = type == PERSISTSXP ? R_ENV_PERSIST : type == PACKAGESXP
                      ? R_ENV_PACKAGE : R_ENV_NAMESPACE;
        x->u.env.names = names;
        return add_ref(r, x) < 0 ? NULL : x;
    }
    case ALTREP_SXP:
        return read_altrep(r, flags, depth);
    case R_SYM: {
        r_obj *c = read_item(r, depth + 1);
        if (!c)
            return NULL;
        if (c->type != R_CHAR || !c->u.chr.s)
            return damaged(r, "a symbol whose name is a %s", c->type == R_CHAR
                           ? "missing string" : r_type_name(c->type));
        if (!(x = node(r, R_SYM)))
            return NULL;
        x->u.sym.name = c->u.chr.s; /* taken over: the string node is not referenced */
        c->u.chr.s = NULL;
        return add_ref(r, x) < 0 ? NULL : x;
    }
    case R_ENV: {
        int32_t locked;
        if (r_stream_int(r->s, &locked, r->err) < 0 || !(x = node(r, R_ENV)) ||
            add_ref(r, x) < 0)
            return NULL;
        x->u.env.locked = locked != 0;
        if (!(x->u.env.enclos = read_item(r, depth + 1)) ||
            !(x->u.env.frame = read_item(r, depth + 1)) ||
            !(x->u.env.hashtab = read_item(r, depth + 1)) ||
            !(x->attr = read_item(r, depth + 1)))
            return NULL;
        if (x->attr == &r_nil)
            x->attr = NULL;
        x->object = r_attr(x, "class") != NULL;
        return x;
    }
    case R_LIST: case R_CLO: case R_PROM: case R_LANG: case R_DOT:
        return read_cons_chain(r, flags, depth);
    case R_EXTPTR:
        if (!(x = node(r, R_EXTPTR)) || add_ref(r, x) < 0 || !read_item(r, depth + 1) ||
            !read_item(r, depth + 1))
            return NULL;
        break;
    case R_WEAKREF:
        if (!(x = node(r, R_WEAKREF)) || add_ref(r, x) < 0)
            return NULL;
        break;
    case R_SPECIAL:
    case R_BUILTIN: {
        int32_t n;
        if (r_stream_int(r->s, &n, r->err) < 0)
            return NULL;
        if (n < 0 || n > 4096)
            return damaged(r, "a builtin name of %d bytes", (int)n);
        if (!(x = node(r, type)))
            return NULL;
        if (!(x->u.sym.name = malloc((size_t)n + 1)))
            return cfs_err_oom(r->err), NULL;
        if (r_stream_string(r->s, x->u.sym.name, (size_t)n, r->err) < 0)
            return NULL;
        x->u.sym.name[n] = 0;
        break;
    }
    case R_CHAR:
        if (!(x = node(r, R_CHAR)) || read_charsxp(r, flags >> 12, &x->u.chr) < 0)
            return NULL;
        if (has_attr && !read_item(r, depth + 1)) /* old files: read and dropped */
            return NULL;
        set_bits(x, flags);
        return x;
    case R_LGL: case R_INT: case R_REAL: case R_CPLX: case R_RAW: {
        uint64_t n;
        if (read_length(r, &n) < 0 ||
            check_room(r, n, (unsigned)elem_size(type), r_type_name(type)) < 0 ||
            !(x = node(r, type)) || fill_atomic(r, x, n, NULL, NULL) < 0)
            return NULL;
        break;
    }
    case R_STR:
        if (!(x = read_str(r, depth)))
            return NULL;
        break;
    case R_VEC:
    case R_EXPR:
        if (!(x = read_list(r, type, depth)))
            return NULL;
        break;
    case R_BCODE: {
        int32_t nreps;
        if (r_stream_int(r->s, &nreps, r->err) < 0)
            return NULL;
        if (nreps < 0 || check_room(r, (uint64_t)nreps, 4, "byte-code table") < 0)
            return nreps < 0 ? damaged(r, "a byte-code table of %d cells", (int)nreps) : NULL;
        if (read_bc1(r, nreps, depth + 1) < 0 || !(x = node(r, R_BCODE)))
            return NULL;
        break;
    }
    case R_S4:
        if (!(x = node(r, R_S4)))
            return NULL;
        break;
    default:
        return damaged(r, "unknown SEXP type %d", type);
    }
    if (has_attr) {
        r_obj *a = read_item(r, depth + 1);
        if (!a)
            return NULL;
        x->attr = a == &r_nil ? NULL : a;
    }
    set_bits(x, flags);
    return x;
}

static int read_all(r_stream *s, const r_header *hdr, const r_read_opts *opts, r_file **out,
                    cfs_err *err)
{
    r_file *f = calloc(1, sizeof *f);
    if (!f || !(f->arena = calloc(1, sizeof *f->arena))) {
        free(f);
        r_stream_close(s);
        return cfs_err_oom(err);
    }
    f->hdr = *hdr;
    rd r = {.s = s, .f = f, .err = err};
    r.sink = opts ? opts->sink : NULL;
    r.threshold = opts && opts->sink_threshold ? opts->sink_threshold
                : R_DEFAULT_SINK_THRESHOLD;
    r.max_depth = opts && opts->max_depth ? opts->max_depth : R_DEFAULT_MAX_DEPTH;
    r.max_generated = opts && opts->max_generated ? opts->max_generated
                    : R_MAX_GENERATED_IN_MEMORY;
    snprintf(r.native, sizeof r.native, "%s", hdr->encoding);
    f->root = read_item(&r, 0);
    if (f->root && hdr->workspace && f->root->type != R_LIST && f->root->type != R_NIL) {
        damaged(&r, "an R workspace whose contents are a %s, not a list of variables",
                r_type_name(f->root->type));
        f->root = NULL;
    }
    free(r.refs);
    r_stream_close(s);
    if (!f->root) {
        cfs_err_prefix(err, "item %llu", (unsigned long long)f->items);
        r_file_free(f);
        return -1;
    }
    *out = f;
    return 0;
}

int r_read_file(const char *path, const r_read_opts *opts, r_file **out, cfs_err *err)
{
    *out = NULL;
    r_stream *s;
    r_header hdr;
    if (r_stream_open(path, &s, &hdr, err) < 0)
        return -1;
    return read_all(s, &hdr, opts, out, err);
}

int r_read_fd(int fd, const r_read_opts *opts, r_file **out, cfs_err *err)
{
    *out = NULL;
    r_stream *s;
    r_header hdr;
    if (r_stream_open_fd(fd, &s, &hdr, err) < 0)
        return -1;
    return read_all(s, &hdr, opts, out, err);
}

int r_read_mem(const void *data, size_t len, const r_read_opts *opts, r_file **out,
               cfs_err *err)
{
    *out = NULL;
    r_stream *s;
    r_header hdr;
    if (r_stream_open_mem(data, len, &s, &hdr, err) < 0)
        return -1;
    return read_all(s, &hdr, opts, out, err);
}

/* ---- helpers ---- */

/* A further cell of a pairlist or call (whose first cell is a LANG, the rest LIST cells). */
static bool is_tail(const r_obj *c)
{
    return c && (c->type == R_LIST || c->type == R_DOT);
}

bool r_is_null(const r_obj *x)
{
    return !x || x->type == R_NIL;
}

uint64_t r_length(const r_obj *x)
{
    if (r_is_null(x))
        return 0;
    switch (x->type) {
    case R_LGL: case R_INT: case R_REAL: case R_CPLX: case R_RAW: case R_STR: case R_VEC:
    case R_EXPR:
        return x->length;
    case R_LIST: case R_LANG: case R_DOT: {
        uint64_t n = 1;
        for (const r_obj *c = x->u.cons.cdr; is_tail(c); c = c->u.cons.cdr)
            n++;
        return n;
    }
    default:
        return 1;
    }
}

const char *r_sym_name(const r_obj *x)
{
    return x && x->type == R_SYM ? x->u.sym.name : NULL;
}

static const r_obj *by_tag(const r_obj *list, const char *name)
{
    if (!list || (list->type != R_LIST && list->type != R_LANG && list->type != R_DOT))
        return NULL;
    for (const r_obj *c = list; c; c = is_tail(c->u.cons.cdr) ? c->u.cons.cdr : NULL) {
        const char *t = r_sym_name(c->u.cons.tag);
        if (t && strcmp(t, name) == 0)
            return c->u.cons.car;
    }
    return NULL;
}

const r_obj *r_attr(const r_obj *x, const char *name)
{
    return x ? by_tag(x->attr, name) : NULL;
}

const r_obj *r_slot(const r_obj *x, const char *name)
{
    if (!x)
        return NULL;
    if (strcmp(name, ".Data") == 0 && x->s4 && x->type != R_S4)
        return x;
    const r_obj *a = r_attr(x, name);
    const char *s = r_sym_name(a);
    return s && strcmp(s, "\001NULL\001") == 0 ? &r_nil : a;
}

const r_obj *r_class(const r_obj *x)
{
    const r_obj *c = r_attr(x, "class");
    return c && c->type == R_STR ? c : NULL;
}

const char *r_class_name(const r_obj *x)
{
    return r_str_at(r_class(x), 0, NULL);
}

bool r_inherits(const r_obj *x, const char *cls)
{
    const r_obj *c = r_class(x);
    for (uint64_t i = 0; c && i < c->length; i++) {
        const char *s = r_str_at(c, i, NULL);
        if (s && strcmp(s, cls) == 0)
            return true;
    }
    return false;
}

const r_obj *r_list_get(const r_obj *x, const char *name)
{
    if (!x)
        return NULL;
    if (is_cons(x->type))
        return by_tag(x, name);
    if (x->type != R_VEC && x->type != R_EXPR)
        return NULL;
    const r_obj *names = r_attr(x, "names");
    if (!names || names->type != R_STR)
        return NULL;
    for (uint64_t i = 0; i < names->length && i < x->length; i++) {
        const char *s = r_str_at(names, i, NULL);
        if (s && strcmp(s, name) == 0)
            return x->u.items[i];
    }
    return NULL;
}

const r_obj *r_env_get(const r_obj *env, const char *name)
{
    if (!env || env->type != R_ENV)
        return NULL;
    const r_obj *v = by_tag(env->u.env.frame, name);
    const r_obj *h = env->u.env.hashtab;
    for (uint64_t i = 0; !v && h && h->type == R_VEC && i < h->length; i++)
        v = by_tag(h->u.items[i], name);
    return v;
}

const r_obj *r_pairlist_at(const r_obj *x, uint64_t i, const char **tag)
{
    if (!x || (x->type != R_LIST && x->type != R_LANG && x->type != R_DOT))
        return NULL;
    for (const r_obj *c = x; c; c = is_tail(c->u.cons.cdr) ? c->u.cons.cdr : NULL, i--)
        if (i == 0) {
            if (tag)
                *tag = r_sym_name(c->u.cons.tag) ? r_sym_name(c->u.cons.tag) : "";
            return c;
        }
    return NULL;
}

const int32_t *r_ints(const r_obj *x)
{
    return x && (x->type == R_INT || x->type == R_LGL) && !x->sunk ? x->u.data : NULL;
}

const double *r_reals(const r_obj *x)
{
    return x && (x->type == R_REAL || x->type == R_CPLX) && !x->sunk ? x->u.data : NULL;
}

const uint8_t *r_raw(const r_obj *x)
{
    return x && x->type == R_RAW && !x->sunk ? x->u.data : NULL;
}

const char *r_str_at(const r_obj *x, uint64_t i, size_t *len)
{
    if (!x || x->type != R_STR || i >= x->length)
        return NULL;
    if (len)
        *len = x->u.strs[i].len;
    return x->u.strs[i].s;
}

const r_obj *r_vec_at(const r_obj *x, uint64_t i)
{
    return x && (x->type == R_VEC || x->type == R_EXPR) && i < x->length ? x->u.items[i]
                                                                       : NULL;
}

bool r_is_na_real(double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return isnan(v) && (uint32_t)bits == 1954;
}

double r_na_real(void)
{
    uint64_t bits = 0x7FF00000000007A2ull;
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* ---- the in-memory sink ---- */

typedef struct mem_vec {
    r_sink_vec info;
    unsigned char *data;
    size_t len, cap;
} mem_vec;

struct r_memsink {
    mem_vec *v;
    size_t n, cap;
};

r_memsink *r_memsink_new(void)
{
    return calloc(1, sizeof(r_memsink));
}

void r_memsink_free(r_memsink *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++)
        free(m->v[i].data);
    free(m->v);
    free(m);
}

static int mem_begin(void *ctx, const r_sink_vec *v, uint64_t *id, cfs_err *err)
{
    r_memsink *m = ctx;
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 8;
        mem_vec *p = realloc(m->v, cap * sizeof *p);
        if (!p)
            return cfs_err_oom(err);
        m->v = p;
        m->cap = cap;
    }
    m->v[m->n] = (mem_vec){.info = *v};
    *id = m->n++;
    return 0;
}

static int mem_write(void *ctx, uint64_t id, const void *data, size_t nbytes, cfs_err *err)
{
    r_memsink *m = ctx;
    mem_vec *v = &m->v[id];
    if (v->len + nbytes > v->cap) {
        size_t cap = v->cap ? v->cap : 4096;
        while (cap < v->len + nbytes)
            cap *= 2;
        unsigned char *p = realloc(v->data, cap);
        if (!p)
            return cfs_err_oom(err);
        v->data = p;
        v->cap = cap;
    }
    memcpy(v->data + v->len, data, nbytes);
    v->len += nbytes;
    return 0;
}

static int mem_end(void *ctx, uint64_t id, cfs_err *err)
{
    (void)ctx, (void)id, (void)err;
    return 0;
}

r_sink r_memsink_sink(r_memsink *m)
{
    return (r_sink){.ctx = m, .begin = mem_begin, .write = mem_write, .end = mem_end};
}

const void *r_memsink_data(const r_memsink *m, uint64_t id, size_t *nbytes, r_sink_vec *info)
{
    if (!m || id >= m->n)
        return NULL;
    if (nbytes)
        *nbytes = m->v[id].len;
    if (info)
        *info = m->v[id].info;
    return m->v[id].data ? (const void *)m->v[id].data : (const void *)"";
}
