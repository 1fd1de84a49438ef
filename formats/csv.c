/*
 * Text tables: lines of a plain or gzip-compressed file, and CSV fields. zlib's gz* functions
 * read a file that is not gzip-compressed as it is, so one reader serves matrix.mtx and
 * matrix.mtx.gz alike. A gzip stream that ends early is reported as truncated (zlib's
 * Z_BUF_ERROR after a short read), never taken for the end of the file.
 */
#include "csv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define TEXT_BUF ((size_t)1 << 17)

typedef unsigned long long ull;

struct cfs_text {
    gzFile gz;
    char *label;
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
        return cfs_err_set(err, "out of memory");
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
        return cfs_err_set(err, "out of memory");
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
