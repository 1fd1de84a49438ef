/*
 * Text tables: lines of a plain or gzip-compressed file, and CSV fields. zlib's gz* functions
 * read a file that is not gzip-compressed as it is, so one reader serves matrix.mtx and
 * matrix.mtx.gz alike. A gzip stream that ends early is reported as truncated (zlib's
 * Z_BUF_ERROR after a short read), never taken for the end of the file.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* vasprintf */
#endif

#include "csv.h"
#include "strfmt.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define TEXT_BUF ((size_t)1 << 17)

typedef unsigned long long ull;

struct cfs_text {
    gzFile gz;
    char *label;
    size_t path_len;        /* zlib's messages start with the path: "PATH: what" */
    unsigned char *buf;
    size_t pos, end;
    bool eof;
    bool truncated;         /* zlib reported the gzip stream cut short: data before it first */
    bool terminated;        /* the last line returned ended with a newline */
    bool gzipped;
    char *line;             /* a line that spans refills is gathered here */
    size_t line_cap;
    uint64_t lineno;
};

int cfs_text_open(const char *path, const char *label, cfs_text **out, cfs_err *err)
{
    *out = NULL;
    cfs_text *t = calloc(1, sizeof *t);
    if (!t || !(t->label = strdup(label)) || !(t->buf = malloc(TEXT_BUF + 1))) {
        if (t)
            free(t->label);
        free(t);
        return cfs_err_oom(err);
    }
    errno = 0;
    t->gz = gzopen(path, "rbe");
    if (!t->gz) {
        int e = errno;
        cfs_err_set(err, "%s cannot be opened: %s", label, e ? strerror(e) : "out of memory");
        free(t->buf);
        free(t->label);
        free(t);
        return -1;
    }
    t->path_len = strlen(path);
    gzbuffer(t->gz, 1u << 17);
    t->gzipped = gzdirect(t->gz) == 0;
    *out = t;
    return 0;
}

/* Fills the buffer; 0 at the end of the file. */
static int refill(cfs_text *t, cfs_err *err)
{
    t->pos = t->end = 0;
    if (t->truncated)
        return cfs_err_set(err, "%s is truncated: its gzip stream ends early (after line %llu); "
                           "re-download or re-copy it", t->label, (ull)t->lineno);
    int n = gzread(t->gz, t->buf, (unsigned)TEXT_BUF);
    int errnum = Z_OK;
    const char *msg = gzerror(t->gz, &errnum);
    /* The label names the file: the path (absolute in a mount) stays out of the message. */
    if (msg && strlen(msg) > t->path_len + 2 && msg[t->path_len] == ':')
        msg += t->path_len + 2;
    if (n < 0 || (errnum != Z_OK && errnum != Z_BUF_ERROR)) {
        if (errnum == Z_ERRNO)
            return cfs_err_set(err, "%s cannot be read (after line %llu): %s; check the disk "
                               "or copy the file again", t->label, (ull)t->lineno,
                               strerror(errno));
        return cfs_err_set(err, "%s is not a valid gzip file: %s (after line %llu); "
                           "re-download or re-copy it", t->label, msg ? msg : "corrupt data",
                           (ull)t->lineno);
    }
    /* Z_BUF_ERROR: the stream was cut short. What came before it is handed out first (the
     * lines it completes); the error is reported at the next refill, so a line the cut went
     * through is never returned. */
    if (errnum == Z_BUF_ERROR) {
        t->truncated = true;
        if (n <= 0)
            return refill(t, err);
    }
    if (n == 0)
        t->eof = true;
    t->end = (size_t)n;
    return 0;
}

static int grow_line(cfs_text *t, size_t need, cfs_err *err)
{
    if (need <= t->line_cap)
        return 0;
    size_t cap = t->line_cap ? t->line_cap : 256;
    while (cap < need)
        cap *= 2;
    char *p = realloc(t->line, cap);
    if (!p)
        return cfs_err_oom(err);
    t->line = p;
    t->line_cap = cap;
    return 0;
}

static int too_long(cfs_text *t, cfs_err *err)
{
    return cfs_err_set(err, "%s: line %llu is longer than %zu bytes (not a text table?); "
                       "re-download or re-write the file", t->label, (ull)t->lineno + 1,
                       CFS_TEXT_MAX_LINE);
}

int cfs_text_line(cfs_text *t, char **line, size_t *len, cfs_err *err)
{
    size_t have = 0;
    char *result = NULL;
    size_t rlen = 0;
    bool newline = false;
    for (;;) {
        if (t->pos == t->end) {
            if (t->eof) {
                if (have == 0)
                    return 0;
                break;
            }
            if (refill(t, err) < 0)
                return -1;
            continue;
        }
        unsigned char *start = t->buf + t->pos;
        size_t avail = t->end - t->pos;
        unsigned char *nl = memchr(start, '\n', avail);
        size_t take = nl ? (size_t)(nl - start) : avail;
        if (have == 0 && nl) {
            if (take > CFS_TEXT_MAX_LINE)
                return too_long(t, err);
            *nl = '\0';
            result = (char *)start;
            rlen = take;
            t->pos += take + 1;
            newline = true;
            goto done;
        }
        if (have + take > CFS_TEXT_MAX_LINE)
            return too_long(t, err);
        if (grow_line(t, have + take + 1, err) < 0)
            return -1;
        memcpy(t->line + have, start, take);
        have += take;
        t->pos += take + (nl ? 1 : 0);
        if (nl) {
            newline = true;
            break;
        }
    }
    if (grow_line(t, have + 1, err) < 0)
        return -1;
    t->line[have] = '\0';
    result = t->line;
    rlen = have;
done:
    t->lineno++;
    t->terminated = newline;
    if (rlen && result[rlen - 1] == '\r')
        result[--rlen] = '\0';
    if (memchr(result, '\0', rlen))
        return cfs_err_set(err, "%s: line %llu holds a NUL byte (a binary file, not text); "
                           "re-download or re-write the file", t->label, (ull)t->lineno);
    *line = result;
    *len = rlen;
    return 1;
}

bool cfs_text_terminated(const cfs_text *t)
{
    return t->terminated;
}

uint64_t cfs_text_lineno(const cfs_text *t)
{
    return t->lineno;
}

bool cfs_text_gzipped(const cfs_text *t)
{
    return t->gzipped;
}

const char *cfs_text_label(const cfs_text *t)
{
    return t->label;
}

int cfs_text_rewind(cfs_text *t, cfs_err *err)
{
    if (gzrewind(t->gz) < 0)
        return cfs_err_set(err, "%s cannot be read again: %s", t->label, strerror(errno));
    t->pos = t->end = 0;
    t->eof = false;
    t->truncated = false;
    t->lineno = 0;
    return 0;
}

void cfs_text_close(cfs_text *t)
{
    if (!t)
        return;
    gzclose_r(t->gz);
    free(t->buf);
    free(t->line);
    free(t->label);
    free(t);
}

long cfs_csv_split(char *line, char sep, char **fields, size_t max)
{
    long n = 0;
    char *p = line;
    for (;;) {
        char *start = p, *w = p;
        if (*p == '"') {
            p++;
            for (;;) {
                if (*p == '\0')
                    return -1;
                if (*p == '"') {
                    if (p[1] == '"') {
                        *w++ = '"';
                        p += 2;
                        continue;
                    }
                    p++;
                    break;
                }
                *w++ = *p++;
            }
            if (*p != sep && *p != '\0')
                return -1;
        } else {
            while (*p && *p != sep)
                p++;
            w = p;
        }
        char end = *p;
        *w = '\0';
        if ((size_t)n < max)
            fields[n] = start;
        n++;
        if (end == '\0')
            return n;
        p++;
    }
}

typedef unsigned long long ull;

/* The data lines of a walk: 0 (with *why or not), -1 on allocation failure. */
static int walk_rows(const cfs_csv_walk *w, cfs_text *t, char **fld, long nf,
                     uint64_t *first_line, char **why)
{
    char *line, *unknown_first = NULL;
    size_t len;
    uint64_t unknown = 0, unknown_line = 0, rows = 0;
    cfs_err err;
    int rc;
    while ((rc = cfs_text_line(t, &line, &len, &err)) > 0) {
        uint64_t ln = cfs_text_lineno(t);
        if (len == 0)
            continue;
        if (!cfs_text_terminated(t)) {
            /* A CSV's last line without its line end may have been cut in a value. */
            *why = cfs_strdupf("%s: its last line (%llu) has no line end, so the file looks cut short",
                        w->label, (ull)ln);
            goto out;
        }
        long got = cfs_csv_split(line, ',', fld, (size_t)nf + 1);
        if (got != nf) {
            *why = got < 0 ? cfs_strdupf("%s: line %llu has an unclosed quote", w->label, (ull)ln)
                           : cfs_strdupf("%s: line %llu has %ld field%s where the header has %ld",
                                  w->label, (ull)ln, got, got == 1 ? "" : "s", nf);
            goto out;
        }
        const uint64_t *r = cfs_strset_get(w->keys, fld[0]);
        if (!r) {
            if (unknown++ == 0) {
                unknown_first = strdup(fld[0]);
                unknown_line = ln;
            }
            continue;
        }
        if (w->seen[*r]) {
            *why = cfs_strdupf("%s: line %llu lists barcode %s again (first on line %llu)", w->label,
                        (ull)ln, fld[0], (ull)first_line[*r]);
            goto out;
        }
        uint64_t row = *r;
        int k = w->row(w->ctx, row, ln, fld, why);
        if (k < 0) {
            free(unknown_first);
            return -1;
        }
        if (k > 0)
            goto out;
        w->seen[row] = 1;
        first_line[row] = ln;
        rows++;
    }
    if (rc < 0)
        *why = strdup(err.msg);
    else if (unknown)
        *why = cfs_strdupf("%s names %llu barcode%s the matrix lacks (first: %s, line %llu)", w->label,
                    (ull)unknown, unknown == 1 ? "" : "s", unknown_first ? unknown_first : "?",
                    (ull)unknown_line);
    else if (rows == 0)
        *why = cfs_strdupf("%s lists no cell", w->label);
    else {
        free(unknown_first);
        return 0;
    }
out:
    free(unknown_first);
    return *why ? 0 : -1;
}

int cfs_csv_walk_run(const cfs_csv_walk *w, char **why)
{
    *why = NULL;
    cfs_text *t;
    cfs_err err;
    if (cfs_text_open(w->path, w->label, &t, &err) < 0)
        return (*why = strdup(err.msg)) ? 0 : -1;
    char *line, **fld = NULL;
    uint64_t *first_line = NULL;
    size_t len;
    int rc = cfs_text_line(t, &line, &len, &err);
    if (rc <= 0) {
        *why = rc < 0 ? strdup(err.msg) : cfs_strdupf("%s is empty", w->label);
        rc = *why ? 0 : -1;
        goto out;
    }
    size_t maxf = 1;
    for (const char *q = line; *q; q++)
        maxf += *q == ',';
    if (!(fld = calloc(maxf, sizeof *fld))) {
        rc = -1;
        goto out;
    }
    long nf = 0;
    rc = w->header(w->ctx, fld, cfs_csv_split(line, ',', fld, maxf), &nf, why);
    if (rc != 0) {
        rc = rc < 0 ? -1 : *why ? 0 : -1;
        goto out;
    }
    char **row = (size_t)nf + 1 > maxf ? realloc(fld, ((size_t)nf + 1) * sizeof *fld) : fld;
    if (row)
        fld = row;
    first_line = calloc(w->nrows ? w->nrows : 1, sizeof *first_line);
    rc = row && first_line ? walk_rows(w, t, fld, nf, first_line, why) : -1;
out:
    cfs_text_close(t);
    free(fld);
    free(first_line);
    return rc;
}
