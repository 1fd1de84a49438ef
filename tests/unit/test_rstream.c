/* formats/r/: the R serialization reader against files R wrote (tests/fixtures/r/, made by
 * tests/fixtures/make_r_fixtures.R): each fixture read here and printed in the generator's
 * canonical dump must equal the dump R printed of its own reading; then the header fields, the
 * helpers, the sink, and damaged input (truncations, bit flips, bad types, huge lengths, deep
 * nesting), which must fail with one line and never crash. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "robject.h"
#include "rstream.h"
#include "unit.h"

/* ---- the canonical dump: the R generator's dump_obj, in C ---- */

static void esc(FILE *o, const char *s, size_t n)
{
    if (!s) {
        fputs("NA", o);
        return;
    }
    bool plain = true;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        plain &= c >= 0x20 && c <= 0x7e && c != '"' && c != '\\';
    }
    if (plain) {
        fprintf(o, "\"%.*s\"", (int)n, s);
        return;
    }
    fputc('x', o);
    for (size_t i = 0; i < n; i++)
        fprintf(o, "%02x", (unsigned char)s[i]);
}

static void num(FILE *o, double d)
{
    if (r_is_na_real(d))
        fputs("NA", o);
    else if (isnan(d))
        fputs("NaN", o);
    else if (isinf(d))
        fputs(d > 0 ? "Inf" : "-Inf", o);
    else
        fprintf(o, "%.17g", d);
}

static const char *head_name(int t)
{
    switch (t) {
    case R_NIL: return "NULL";
    case R_SYM: return "SYM";
    case R_LIST: return "LIST";
    case R_CLO: return "CLO";
    case R_ENV: return "ENV";
    case R_LANG: return "LANG";
    case R_LGL: return "LGL";
    case R_INT: return "INT";
    case R_REAL: return "REAL";
    case R_CPLX: return "CPLX";
    case R_STR: return "STR";
    case R_VEC: return "VEC";
    case R_EXPR: return "EXPR";
    case R_EXTPTR: return "EXTPTR";
    case R_RAW: return "RAW";
    case R_S4: return "S4";
    case R_BUILTIN: return "BUILTIN";
    case R_SPECIAL: return "SPECIAL";
    default: return "?";
    }
}

typedef struct dumper {
    FILE *o;
    const r_obj *seen[64];
    int nseen;
} dumper;

static void dump_obj(dumper *d, const r_obj *x, int ind);

static void bits(FILE *o, const r_obj *x)
{
    if (x->object)
        fputs(" obj", o);
    if (x->s4)
        fputs(" s4", o);
}

typedef struct named {
    const char *name;
    const r_obj *value;
} named;

static int cmp_named(const void *a, const void *b)
{
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

static void collect(const r_obj *list, named *out, size_t *n, size_t cap, const char *skip)
{
    for (const r_obj *c = list; c && c->type == R_LIST && *n < cap; c = c->u.cons.cdr) {
        const char *t = r_sym_name(c->u.cons.tag);
        if (t && (!skip || strcmp(t, skip) != 0))
            out[(*n)++] = (named){t, c->u.cons.car};
    }
}

static void dump_attrs(dumper *d, const r_obj *x, int ind)
{
    named a[64];
    size_t n = 0;
    collect(x->attr, a, &n, 64, x->type == R_LIST || x->type == R_LANG ? "names" : NULL);
    qsort(a, n, sizeof a[0], cmp_named);
    for (size_t i = 0; i < n; i++) {
        fprintf(d->o, "%*s@", ind + 2, "");
        esc(d->o, a[i].name, strlen(a[i].name));
        fputc('\n', d->o);
        dump_obj(d, a[i].value, ind + 4);
    }
}

static void dump_obj(dumper *d, const r_obj *x, int ind)
{
    FILE *o = d->o;
    fprintf(o, "%*s", ind, "");
    switch (x->type) {
    case R_NIL:
        fputs("NULL\n", o);
        return;
    case R_SYM:
        fputs("SYM ", o);
        esc(o, x->u.sym.name, strlen(x->u.sym.name));
        bits(o, x);
        fputc('\n', o);
        break;
    case R_LGL: case R_INT: case R_REAL: case R_CPLX: case R_RAW: case R_STR:
        fprintf(o, "%s %llu", head_name(x->type), (unsigned long long)x->length);
        bits(o, x);
        if (x->length)
            fputc(':', o);
        for (uint64_t i = 0; i < x->length; i++) {
            fputc(' ', o);
            if (x->type == R_LGL || x->type == R_INT) {
                int32_t v = r_ints(x)[i];
                if (v == R_NA_INT)
                    fputs("NA", o);
                else
                    fprintf(o, "%d", x->type == R_LGL ? v != 0 : (int)v);
            } else if (x->type == R_REAL) {
                num(o, r_reals(x)[i]);
            } else if (x->type == R_CPLX) {
                num(o, r_reals(x)[2 * i]);
                fputc(',', o);
                num(o, r_reals(x)[2 * i + 1]);
            } else if (x->type == R_RAW) {
                fprintf(o, "%02x", r_raw(x)[i]);
            } else {
                size_t len;
                const char *s = r_str_at(x, i, &len);
                esc(o, s, len);
            }
        }
        fputc('\n', o);
        break;
    case R_VEC: case R_EXPR:
        fprintf(o, "%s %llu", head_name(x->type), (unsigned long long)x->length);
        bits(o, x);
        fputc('\n', o);
        for (uint64_t i = 0; i < x->length; i++)
            dump_obj(d, r_vec_at(x, i), ind + 2);
        break;
    case R_LIST: case R_LANG:
        fprintf(o, "%s %llu", head_name(x->type), (unsigned long long)r_length(x));
        bits(o, x);
        fputc('\n', o);
        for (uint64_t i = 0; i < r_length(x); i++) {
            const char *tag;
            const r_obj *c = r_pairlist_at(x, i, &tag);
            fprintf(o, "%*stag ", ind + 2, "");
            esc(o, tag, strlen(tag));
            fputc('\n', o);
            dump_obj(d, c->u.cons.car, ind + 4);
        }
        break;
    case R_ENV: {
        int k = x->u.env.kind;
        if (k == R_ENV_GLOBAL || k == R_ENV_BASE || k == R_ENV_EMPTY) {
            fprintf(o, "ENV %s\n", k == R_ENV_GLOBAL ? "global" : k == R_ENV_BASE ? "base"
                                                                             : "empty");
            return;
        }
        if (k != R_ENV_PLAIN) {
            const char *nm = k == R_ENV_BASENAMESPACE ? "base" : r_str_at(x->u.env.names, 0, NULL);
            fprintf(o, "ENV %s ", k == R_ENV_PACKAGE ? "package" : "namespace");
            esc(o, nm, nm ? strlen(nm) : 0);
            fputc('\n', o);
            return;
        }
        for (int i = 0; i < d->nseen; i++)
            if (d->seen[i] == x) {
                fputs("ENV seen\n", o);
                return;
            }
        if (d->nseen < 64)
            d->seen[d->nseen++] = x;
        named v[256];
        size_t n = 0;
        collect(x->u.env.frame, v, &n, 256, NULL);
        const r_obj *h = x->u.env.hashtab;
        for (uint64_t i = 0; h && h->type == R_VEC && i < h->length; i++)
            collect(r_vec_at(h, i), v, &n, 256, NULL);
        qsort(v, n, sizeof v[0], cmp_named);
        fprintf(o, "ENV %zu", n);
        bits(o, x);
        fputc('\n', o);
        for (size_t i = 0; i < n; i++) {
            fprintf(o, "%*svar ", ind + 2, "");
            esc(o, v[i].name, strlen(v[i].name));
            fputc('\n', o);
            dump_obj(d, v[i].value, ind + 4);
        }
        break;
    }
    default:
        fputs(head_name(x->type), o);
        bits(o, x);
        fputc('\n', o);
        if (x->type != R_S4)
            return;
    }
    dump_attrs(d, x, ind);
}

static char *dump_root(const r_file *f)
{
    char *text = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&text, &len);
    dumper d = {.o = o};
    dump_obj(&d, f->root, 0);
    fclose(o);
    return text;
}

static r_file *read_fixture(const char *name, const r_read_opts *opts, cfs_err *err)
{
    char rel[256], path[4096];
    snprintf(rel, sizeof rel, "r/%s", name);
    unit_fixture_path(path, sizeof path, rel);
    r_file *f = NULL;
    if (r_read_file(path, opts, &f, err) < 0)
        fprintf(stderr, "%s: %s\n", name, err->msg);
    return f;
}

/* Prints the first line where two dumps part, for the log. */
static void show_difference(const char *name, const char *got, const char *want)
{
    int line = 1;
    const char *g = got, *w = want;
    while (*g && *g == *w) {
        if (*g == '\n')
            line++;
        g++, w++;
    }
    const char *gs = g, *ws = w;
    while (gs > got && gs[-1] != '\n')
        gs--, ws--;
    fprintf(stderr, "%s: line %d differs:\n  read: %.*s\n  R:    %.*s\n", name, line,
            (int)strcspn(gs, "\n"), gs, (int)strcspn(ws, "\n"), ws);
}

/* Every fixture of the MANIFEST reads as R read it. */
static void test_dumps(void)
{
    size_t len;
    char *manifest = unit_slurp("r/MANIFEST", &len);
    CHECK(manifest != NULL);
    if (!manifest)
        return;
    int files = 0;
    for (char *line = strtok(manifest, "\n"); line; line = strtok(NULL, "\n")) {
        char file[128], dump[128];
        if (sscanf(line, "%127s -> %127s", file, dump) != 2)
            continue;
        char rel[256];
        snprintf(rel, sizeof rel, "r/%s", dump);
        size_t wlen;
        char *want = unit_slurp(rel, &wlen);
        cfs_err err = {0};
        r_file *f = read_fixture(file, NULL, &err);
        char *got = f ? dump_root(f) : NULL;
        bool same = got && want && strcmp(got, want) == 0;
        if (got && want && !same)
            show_difference(file, got, want);
        CHECK(same);
        files++;
        free(got);
        free(want);
        r_file_free(f);
    }
    CHECK(files >= 16);
    free(manifest);
}

static void test_headers(void)
{
    static const struct {
        const char *file;
        char format;
        int version;
        const char *enc;
        bool workspace;
        int layers;
        const char *codec0, *codec1;
    } cases[] = {
        {"v3_xdr.rds", 'X', 3, "UTF-8", false, 0, NULL, NULL},
        {"v3_gzip.rds", 'X', 3, "UTF-8", false, 1, "gzip", NULL},
        {"v3_bzip2.rds", 'X', 3, "UTF-8", false, 1, "bzip2", NULL},
        {"v3_xz.rds", 'X', 3, "UTF-8", false, 1, "xz", NULL},
        {"v2_xdr.rds", 'X', 2, "", false, 0, NULL, NULL},
        {"v3_ascii.rds", 'A', 3, "UTF-8", false, 0, NULL, NULL},
        {"v2_native.rds", 'B', 2, "", false, 1, "gzip", NULL},
        {"gzgz.rds.gz", 'X', 3, "UTF-8", false, 2, "gzip", "gzip"},
        {"two.RData", 'X', 3, "UTF-8", true, 1, "gzip", NULL},
        {"two_v2.rda", 'X', 2, "", true, 1, "bzip2", NULL},
        {"two_ascii.rda", 'A', 3, "UTF-8", true, 0, NULL, NULL},
        {"two_native.rda", 'B', 3, "UTF-8", true, 0, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cfs_err err = {0};
        r_file *f = read_fixture(cases[i].file, NULL, &err);
        CHECK(f != NULL);
        if (!f)
            continue;
        const r_header *h = &f->hdr;
        CHECK(h->format == (r_format)cases[i].format && h->version == cases[i].version &&
              strcmp(h->encoding, cases[i].enc) == 0 && h->workspace == cases[i].workspace &&
              h->layers == cases[i].layers);
        CHECK(h->writer_version == 0x040202 &&
              h->min_reader_version == (h->version == 3 ? 0x030500u : 0x020300u));
        CHECK(!cases[i].codec0 || strcmp(h->codec[0], cases[i].codec0) == 0);
        CHECK(!cases[i].codec1 || strcmp(h->codec[1], cases[i].codec1) == 0);
        r_file_free(f);
    }
}

/* The helpers a Seurat/SCE mapper uses, on the values the generator put in. */
static void test_helpers(void)
{
    cfs_err err = {0};
    r_file *f = read_fixture("v3_gzip.rds", NULL, &err);
    CHECK(f != NULL);
    if (!f)
        return;
    const r_obj *root = f->root;
    CHECK(root->type == R_VEC && r_length(root) == 41);
    const r_obj *ints = r_list_get(root, "int"), *dbl = r_list_get(root, "dbl");
    CHECK(r_ints(ints) && r_ints(ints)[1] == R_NA_INT && r_ints(ints)[3] == INT32_MAX);
    CHECK(r_reals(dbl) && r_is_na_real(r_reals(dbl)[1]) && isnan(r_reals(dbl)[2]) &&
          !r_is_na_real(r_reals(dbl)[2]) && r_reals(dbl)[0] == 1.5);
    const r_obj *chr = r_list_get(root, "chr");
    CHECK(r_str_at(chr, 1, NULL) == NULL && strcmp(r_str_at(chr, 0, NULL), "a") == 0);
    const r_obj *fac = r_list_get(root, "fac");
    CHECK(r_inherits(fac, "factor") && !r_inherits(fac, "ordered") &&
          r_length(r_attr(fac, "levels")) == 3);
    CHECK(r_inherits(r_list_get(root, "ord"), "ordered"));
    const r_obj *sp = r_list_get(root, "sparse");
    CHECK(sp && sp->type == R_S4 && sp->s4 && strcmp(r_class_name(sp), "dgCMatrix") == 0);
    const r_obj *p = r_slot(sp, "p"), *dim = r_slot(sp, "Dim");
    CHECK(r_ints(p) && r_length(p) == 3 && r_ints(p)[2] == 2);
    CHECK(r_ints(dim) && r_ints(dim)[0] == 3 && r_ints(dim)[1] == 2);
    CHECK(strcmp(r_str_at(r_attr(r_class(sp), "package"), 0, NULL), "Matrix") == 0);
    CHECK(r_slot(sp, "nope") == NULL);
    CHECK(r_is_null(r_slot(r_list_get(root, "s4null"), "s")));
    const r_obj *num4 = r_list_get(root, "s4num");
    CHECK(r_slot(num4, ".Data") == num4 && num4->type == R_REAL);
    const r_obj *env = r_list_get(root, "env");
    CHECK(r_length(r_env_get(env, "a")) == 3 && r_env_get(env, "missing") == NULL);
    CHECK(r_env_get(r_list_get(root, "env_list"), "z") != NULL);
    const r_obj *df = r_list_get(root, "df");
    CHECK(r_inherits(df, "data.frame") && r_length(r_list_get(df, "b")) == 3);
    CHECK(r_list_get(r_list_get(root, "pl"), "q") && r_list_get(root, "nul") == &r_nil);
    CHECK(strcmp(r_str_at(r_list_get(root, "latin1"), 0, NULL), "caf\xc3\xa9 \xe2\x82\xac") == 0);
    const r_obj *bytes = r_list_get(root, "bytes");
    CHECK(bytes->u.strs[0].enc == R_ENC_BYTES && bytes->u.strs[0].len == 3);
    const r_obj *ns = r_list_get(root, "ns");
    CHECK(ns->type == R_ENV && ns->u.env.kind == R_ENV_NAMESPACE &&
          strcmp(r_str_at(ns->u.env.names, 0, NULL), "stats") == 0);
    CHECK(r_list_get(root, "fn")->type == R_CLO);
    r_file_free(f);

    /* An environment that contains itself is the same node. */
    f = read_fixture("cycle.rds", NULL, &err);
    CHECK(f && f->root->type == R_ENV && r_env_get(f->root, "self") == f->root);
    r_file_free(f);

    /* An .RData's variables by name. */
    f = read_fixture("two.RData", NULL, &err);
    CHECK(f && f->root->type == R_LIST && r_length(f->root) == 2);
    CHECK(f && r_inherits(r_list_get(f->root, "a"), "data.frame") &&
          r_inherits(r_list_get(f->root, "b"), "dgCMatrix"));
    r_file_free(f);
}

/* Vectors over the threshold reach the sink with their exact values, and only those. */
static void test_sink(void)
{
    size_t rlen, ilen;
    char *rbin = unit_slurp("r/long_r.bin", &rlen), *ibin = unit_slurp("r/long_i.bin", &ilen);
    CHECK(rbin && ibin && rlen == 16000 && ilen == 8000);
    const char *files[] = {"long.rds", "long_plain.rds"};
    for (int k = 0; k < 2 && rbin && ibin; k++) {
        r_memsink *m = r_memsink_new();
        r_sink sink = r_memsink_sink(m);
        r_read_opts opts = {.sink_threshold = 1000, .sink = &sink};
        cfs_err err = {0};
        r_file *f = read_fixture(files[k], &opts, &err);
        CHECK(f != NULL);
        if (!f) {
            r_memsink_free(m);
            continue;
        }
        const r_obj *r = r_list_get(f->root, "r"), *i = r_list_get(f->root, "i"),
                    *s = r_list_get(f->root, "s");
        CHECK(r->sunk && i->sunk && s->sunk && r_reals(r) == NULL && r_length(r) == 2000);
        CHECK(!r_attr(f->root, "names")->sunk);
        size_t n;
        r_sink_vec info;
        const void *d = r_memsink_data(m, r->sink_id, &n, &info);
        CHECK(d && n == rlen && memcmp(d, rbin, n) == 0 && info.type == R_REAL &&
              info.length == 2000 && info.elem_size == 8);
        /* Uncompressed: the file offset of the values is known (for reading them in place). */
        CHECK(k == 0 ? info.file_offset == -1 : info.file_offset > 0);
        if (k == 1 && info.file_offset > 0) {
            size_t flen;
            unsigned char *file = (unsigned char *)unit_slurp("r/long_plain.rds", &flen);
            uint64_t be = 0;
            for (int b = 0; b < 8 && file; b++)
                be = be << 8 | file[info.file_offset + 8 + b]; /* the second value */
            double v;
            memcpy(&v, &be, 8);
            CHECK(v == 0.5);
            free(file);
        }
        d = r_memsink_data(m, i->sink_id, &n, &info);
        CHECK(d && n == ilen && memcmp(d, ibin, n) == 0 && info.type == R_INT);
        d = r_memsink_data(m, s->sink_id, &n, &info);
        bool seq = d && n == 3000 * 4 && info.type == R_INT;
        for (int j = 0; seq && j < 3000; j++)
            seq = ((const int32_t *)d)[j] == j + 1;
        CHECK(seq);
        r_file_free(f);
        r_memsink_free(m);
    }
    /* Without a sink the same vectors stay in the tree. */
    cfs_err err = {0};
    r_file *f = read_fixture("long.rds", NULL, &err);
    const r_obj *r = f ? r_list_get(f->root, "r") : NULL;
    CHECK(r && !r->sunk && rbin && memcmp(r_reals(r), rbin, rlen) == 0);
    r_file_free(f);
    free(rbin);
    free(ibin);
}

/* ---- damaged input ---- */

static bool one_line(const cfs_err *err)
{
    return err->msg[0] && !strchr(err->msg, '\n');
}

/* Reads len bytes: 0 or -1 with a one-line reason and a damaged/refused status. */
static bool fails_cleanly(const void *data, size_t len, const char *want)
{
    cfs_err err = {0};
    r_file *f = NULL;
    int rc = r_read_mem(data, len, NULL, &f, &err);
    r_file_free(f);
    if (rc == 0)
        return false;
    bool ok = one_line(&err) && (err.status == CFS_EDAMAGED || err.status == CFS_EREFUSED);
    if (ok && want && !strstr(err.msg, want)) {
        fprintf(stderr, "want \"%s\" in: %s\n", want, err.msg);
        ok = false;
    }
    return ok;
}

static unsigned char *gzip_bytes(const unsigned char *src, size_t n, size_t *out_len)
{
    z_stream z = {0};
    if (deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return NULL;
    size_t cap = deflateBound(&z, n);
    unsigned char *out = malloc(cap);
    z.next_in = (unsigned char *)src;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    deflate(&z, Z_FINISH);
    *out_len = cap - z.avail_out;
    deflateEnd(&z);
    return out;
}

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

static void test_damaged(void)
{
    size_t n;
    unsigned char *good = (unsigned char *)unit_slurp("r/v3_xdr.rds", &n);
    CHECK(good != NULL);
    if (!good)
        return;
    /* Every truncation fails with a reason. */
    bool all = true;
    for (size_t k = 0; k < n; k++)
        all &= fails_cleanly(good, k, NULL);
    CHECK(all);
    CHECK(fails_cleanly(good, n - 1, "ends early"));
    size_t gl;
    unsigned char *gz = (unsigned char *)unit_slurp("r/v3_gzip.rds", &gl);
    all = gz != NULL;
    for (size_t k = 0; gz && k + 12 < gl; k += 3) /* (the object ends before the CRC) */
        all &= fails_cleanly(gz, k, NULL);
    CHECK(all);
    CHECK(gz && fails_cleanly(gz, gl / 2, "gzip stream is damaged or ends early"));
    free(gz);
    /* ASCII truncations too (but for the last token, "254\n" for the end of the root's
     * attributes: cut to "25" it is another valid ending). */
    size_t al;
    unsigned char *asc = (unsigned char *)unit_slurp("r/v3_ascii.rds", &al);
    all = asc != NULL;
    for (size_t k = 0; asc && k + 4 < al; k += 5)
        all &= fails_cleanly(asc, k, NULL);
    CHECK(all);

    /* Bit flips anywhere: read or refused, never a crash (the sanitizer run catches worse). */
    unsigned char *copy = malloc(n);
    int refused = 0;
    for (size_t k = 0; k < n; k++) {
        memcpy(copy, good, n);
        copy[k] ^= (unsigned char)(1u << (k % 8));
        cfs_err err = {0};
        r_file *f = NULL;
        if (r_read_mem(copy, n, NULL, &f, &err) < 0) {
            refused++;
            if (!one_line(&err))
                fprintf(stderr, "flip at %zu: \"%s\"\n", k, err.msg);
            all &= one_line(&err);
        }
        r_file_free(f);
    }
    CHECK(all && refused > 0);
    for (size_t k = 0; asc && k < al; k += 2) {
        unsigned char *c2 = malloc(al);
        memcpy(c2, asc, al);
        c2[k] = (unsigned char)"0X\\-~ 9"[k % 7];
        cfs_err err = {0};
        r_file *f = NULL;
        if (r_read_mem(c2, al, NULL, &f, &err) < 0) {
            if (!one_line(&err))
                fprintf(stderr, "ascii change at %zu: \"%s\"\n", k, err.msg);
            all &= one_line(&err);
        }
        r_file_free(f);
        free(c2);
    }
    CHECK(all);
    free(asc);

    /* The first item's flags start at byte 23 (after "X\n", 3 ints, "UTF-8" with its length). */
    memcpy(copy, good, n);
    copy[26] = 97;
    CHECK(fails_cleanly(copy, n, "item 1: unknown SEXP type 97"));
    /* A huge length: refused against the bytes left, and in a compressed stream (where the
     * bytes left are unknown) it fails at the end without allocating it up front. */
    memcpy(copy, good, n);
    put32(copy + 27, 0x7FFFFFFF);
    CHECK(fails_cleanly(copy, n, "longer than the"));
    size_t zl;
    unsigned char *z = gzip_bytes(copy, n, &zl);
    CHECK(z && fails_cleanly(z, zl, NULL));
    free(z);
    free(copy);

    /* Hand-made streams: a long length with a bad upper part, a bad reference, deep nesting. */
    unsigned char hdr[23];
    memcpy(hdr, good, 23);
    unsigned char buf[23 + 8 * 3000 + 16];
    memcpy(buf, hdr, 23);
    put32(buf + 23, 14), put32(buf + 27, 0xFFFFFFFF), put32(buf + 31, 0x00010001);
    put32(buf + 35, 0);
    CHECK(fails_cleanly(buf, 39, "upper part"));
    put32(buf + 23, 0x000002ff);
    CHECK(fails_cleanly(buf, 27, "a reference to object 2 of the 0 seen"));
    size_t at = 23;
    for (int k = 0; k < 3000; k++, at += 8)
        put32(buf + at, 19), put32(buf + at + 4, 1);
    put32(buf + at, 254);
    CHECK(fails_cleanly(buf, at + 4, "nested deeper than 2000 levels"));
    put32(buf + 23, 0x00000009), put32(buf + 27, (uint32_t)-7);
    CHECK(fails_cleanly(buf, 31, "negative length"));
    CHECK(fails_cleanly("hello world", 11, "not an R data file"));
    CHECK(fails_cleanly("RDX9\nX\n", 7, "format version 9"));
    memcpy(buf, good, 23);
    put32(buf + 2, 4);
    CHECK(fails_cleanly(buf, 23, "version 4"));
    free(good);
}

/* The deferred-string formatting follows as.character(); checked through the fixture dumps,
 * and a compact sequence of a damaged length is refused, not expanded. */
static void test_altrep_bounds(void)
{
    size_t n;
    unsigned char *good = (unsigned char *)unit_slurp("r/v3_xdr.rds", &n);
    if (!good)
        return;
    /* Find seq1's state REAL[3] (10, 1, 1) and make its length 2^40. */
    static const unsigned char ten[8] = {0x40, 0x24, 0, 0, 0, 0, 0, 0};
    unsigned char *p = memmem(good, n, ten, 8);
    CHECK(p != NULL);
    if (p) {
        p[0] = 0x42, p[1] = 0x70; /* 2^40 */
        CHECK(fails_cleanly(good, n, "compact sequence"));
    }
    free(good);
}

void unit_rstream(void)
{
    test_dumps();
    test_headers();
    test_helpers();
    test_sink();
    test_damaged();
    test_altrep_bounds();
}
