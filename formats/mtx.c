/*
 * MatrixMarket coordinate reader (see mtx.h for the memory model). Every line is validated at
 * index time, so a damaged file is refused when it is opened, not when a chunk is first read;
 * a file that changes afterwards is caught by the re-parse (each entry must fall in the major
 * row the index put it in) and fails that read.
 */
#include "mtx.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "csv.h"
#include "number.h"

#define STREAM_BLOCK ((uint64_t)1 << 16)
#define DAMAGED "re-download the file or write it again"

typedef unsigned long long ull;

typedef union mval {
    int64_t i;
    double d;
} mval;

struct cfs_mtx {
    pthread_mutex_t lock;
    int refs;
    char *label;
    cfs_text *text;             /* NULL once the entries are in memory */
    cfs_mtx_field field;
    cfs_mtx_symmetry symmetry;
    uint64_t rows, cols, nnz_declared;
    uint64_t header_lines;      /* lines up to and including the size line */
    bool entry_unterminated;    /* the last entry read had no line end */

    bool indexed, by_column, in_memory;
    uint64_t n_major, n_minor, nnz;
    int64_t *indptr;            /* n_major + 1 */
    cfs_dtype value_dtype, index_dtype;
    void *mem_values, *mem_indices;

    /* streaming: where the text is, and the last block parsed */
    uint64_t next;              /* index of the entry the text is positioned at (UINT64_MAX:
                                   unknown, rewind first) */
    uint64_t cur_major;         /* major row that entry `next` belongs to */
    uint64_t blk_start, blk_n, blk_cap;
    void *blk_values, *blk_indices;
};

/* ------------------------------------------------------------------------------------------ */
/* Lines and numbers */

static int line_error(const cfs_mtx *m, cfs_err *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int line_error(const cfs_mtx *m, cfs_err *err, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return cfs_err_set(err, "%s: line %llu: %s; " DAMAGED, m->label,
                       (ull)cfs_text_lineno(m->text), what);
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* Splits at runs of spaces/tabs, in place; returns the token count (may exceed max). */
static size_t tokens(char *p, char **tok, size_t max)
{
    size_t n = 0;
    for (;;) {
        while (is_blank(*p))
            p++;
        if (*p == '\0')
            return n;
        if (n < max)
            tok[n] = p;
        n++;
        while (*p && !is_blank(*p))
            p++;
        if (*p == '\0')
            return n;
        *p++ = '\0';
    }
}

/* A 1-based index token within 1..limit, as a 0-based index. */
static int parse_index(const cfs_mtx *m, const char *tok, uint64_t limit, const char *what,
                       uint64_t *out, cfs_err *err)
{
    uint64_t v;
    if (!cfs_parse_u64(tok, &v) || v < 1 || v > limit)
        return line_error(m, err, "%s index '%.40s' is not an integer between 1 and %llu (the "
                          "size line's %s count)", what, tok, (ull)limit, what);
    *out = v - 1;
    return 0;
}

/* The next entry (0-based i, j): 1, 0 at the end of the file, -1 with a reason. Blank lines and
 * comment lines among the entries are skipped. */
static int next_entry(cfs_mtx *m, uint64_t *i, uint64_t *j, mval *v, cfs_err *err)
{
    for (;;) {
        char *line;
        size_t len;
        int rc = cfs_text_line(m->text, &line, &len, err);
        if (rc <= 0)
            return rc;
        char *p = line;
        while (is_blank(*p))
            p++;
        if (*p == '\0' || *p == '%')
            continue;
        char *tok[3];
        size_t want = m->field == CFS_MTX_PATTERN ? 2 : 3;
        size_t nt = tokens(p, tok, 3);
        if (nt != want)
            return line_error(m, err, "%zu fields where an entry has %zu (row column%s)", nt,
                              want, want == 3 ? " value" : "");
        if (parse_index(m, tok[0], m->rows, "row", i, err) < 0 ||
            parse_index(m, tok[1], m->cols, "column", j, err) < 0)
            return -1;
        switch (m->field) {
        case CFS_MTX_INTEGER:
            if (!cfs_parse_i64(tok[2], &v->i))
                return line_error(m, err, "value '%.40s' is not an integer (the header says "
                                  "integer)", tok[2]);
            break;
        case CFS_MTX_REAL:
            if (!cfs_parse_double(tok[2], false, &v->d))
                return line_error(m, err, "value '%.40s' is not a number", tok[2]);
            break;
        case CFS_MTX_PATTERN:
            v->d = 1.0;
            break;
        }
        m->entry_unterminated = !cfs_text_terminated(m->text);
        return 1;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Header */

static int parse_header(cfs_mtx *m, cfs_err *err)
{
    char *line;
    size_t len;
    int rc = cfs_text_line(m->text, &line, &len, err);
    if (rc < 0)
        return -1;
    if (rc == 0)
        return cfs_err_set(err, "%s is empty; " DAMAGED, m->label);
    char *tok[6];
    size_t nt = tokens(line, tok, 6);
    if (nt == 0 || strcasecmp(tok[0], "%%MatrixMarket") != 0)
        return line_error(m, err, "not a MatrixMarket header (the file does not start with "
                          "%%%%MatrixMarket)");
    if (nt != 5)
        return line_error(m, err, "the MatrixMarket header has %zu words, not 5 (%%%%MatrixMarket "
                          "matrix coordinate <field> <symmetry>)", nt);
    if (strcasecmp(tok[1], "matrix") != 0)
        return line_error(m, err, "a MatrixMarket '%.40s', not a matrix", tok[1]);
    if (strcasecmp(tok[2], "array") == 0)
        return line_error(m, err, "a dense MatrixMarket array; only coordinate (sparse) files "
                          "are read");
    if (strcasecmp(tok[2], "coordinate") != 0)
        return line_error(m, err, "unknown MatrixMarket format '%.40s' (not coordinate)", tok[2]);
    if (strcasecmp(tok[3], "integer") == 0)
        m->field = CFS_MTX_INTEGER;
    else if (strcasecmp(tok[3], "real") == 0 || strcasecmp(tok[3], "double") == 0)
        m->field = CFS_MTX_REAL;
    else if (strcasecmp(tok[3], "pattern") == 0)
        m->field = CFS_MTX_PATTERN;
    else if (strcasecmp(tok[3], "complex") == 0)
        return line_error(m, err, "a matrix of complex values, which cannot be served");
    else
        return line_error(m, err, "unknown MatrixMarket field '%.40s' (not integer, real or "
                          "pattern)", tok[3]);
    if (strcasecmp(tok[4], "general") == 0)
        m->symmetry = CFS_MTX_GENERAL;
    else if (strcasecmp(tok[4], "symmetric") == 0 || strcasecmp(tok[4], "hermitian") == 0)
        m->symmetry = CFS_MTX_SYMMETRIC;   /* a real hermitian matrix is symmetric */
    else if (strcasecmp(tok[4], "skew-symmetric") == 0)
        m->symmetry = CFS_MTX_SKEW;
    else
        return line_error(m, err, "unknown MatrixMarket symmetry '%.40s' (not general, "
                          "symmetric or skew-symmetric)", tok[4]);
    if (m->symmetry == CFS_MTX_SKEW && m->field == CFS_MTX_PATTERN)
        return line_error(m, err, "a skew-symmetric pattern matrix, which has no values to "
                          "negate; write it as general");
    for (;;) {
        if ((rc = cfs_text_line(m->text, &line, &len, err)) < 0)
            return -1;
        if (rc == 0)
            return cfs_err_set(err, "%s ends before its size line (after line %llu): the file "
                               "is truncated; " DAMAGED, m->label,
                               (ull)cfs_text_lineno(m->text));
        char *p = line;
        while (is_blank(*p))
            p++;
        if (*p != '\0' && *p != '%')
            break;
    }
    nt = tokens(line, tok, 4);
    if (nt != 3 || !cfs_parse_u64(tok[0], &m->rows) || !cfs_parse_u64(tok[1], &m->cols) ||
        !cfs_parse_u64(tok[2], &m->nnz_declared))
        return line_error(m, err, "not a size line 'rows columns entries' (three integers)");
    if (m->rows > CFS_MTX_MAX_AXIS || m->cols > CFS_MTX_MAX_AXIS)
        return line_error(m, err, "the size line claims %llu x %llu, beyond any single-cell "
                          "matrix (at most %llu per axis)", (ull)m->rows, (ull)m->cols,
                          (ull)CFS_MTX_MAX_AXIS);
    if (m->nnz_declared > CFS_MTX_MAX_NNZ ||
        (m->nnz_declared > 0 &&
         (m->cols == 0 || (m->nnz_declared - 1) / m->cols >= m->rows)))
        return line_error(m, err, "the size line claims %llu entries, more than a %llu x %llu "
                          "matrix holds", (ull)m->nnz_declared, (ull)m->rows, (ull)m->cols);
    if (m->symmetry != CFS_MTX_GENERAL && m->rows != m->cols)
        return line_error(m, err, "a %s matrix of %llu x %llu: a symmetric matrix is square",
                          m->symmetry == CFS_MTX_SKEW ? "skew-symmetric" : "symmetric",
                          (ull)m->rows, (ull)m->cols);
    m->header_lines = cfs_text_lineno(m->text);
    return 0;
}

int cfs_mtx_open(const char *path, const char *label, cfs_mtx **out, cfs_err *err)
{
    *out = NULL;
    cfs_mtx *m = calloc(1, sizeof *m);
    if (!m || !(m->label = strdup(label))) {
        free(m);
        return cfs_err_oom(err);
    }
    pthread_mutex_init(&m->lock, NULL);
    m->refs = 1;
    m->next = UINT64_MAX;
    if (cfs_text_open(path, label, &m->text, err) < 0 || parse_header(m, err) < 0) {
        cfs_mtx_close(m);
        return -1;
    }
    *out = m;
    return 0;
}

void cfs_mtx_size(const cfs_mtx *m, uint64_t *rows, uint64_t *cols, uint64_t *nnz)
{
    *rows = m->rows;
    *cols = m->cols;
    *nnz = m->nnz_declared;
}

cfs_mtx_field cfs_mtx_field_of(const cfs_mtx *m)
{
    return m->field;
}

cfs_mtx_symmetry cfs_mtx_symmetry_of(const cfs_mtx *m)
{
    return m->symmetry;
}

uint64_t cfs_mtx_nnz(const cfs_mtx *m)
{
    return m->nnz;
}

bool cfs_mtx_in_memory(const cfs_mtx *m)
{
    return m->in_memory;
}

/* ------------------------------------------------------------------------------------------ */
/* Index */

static int rewind_entries(cfs_mtx *m, cfs_err *err)
{
    m->next = UINT64_MAX;
    if (cfs_text_rewind(m->text, err) < 0)
        return -1;
    for (uint64_t l = 0; l < m->header_lines; l++) {
        char *line;
        size_t len;
        int rc = cfs_text_line(m->text, &line, &len, err);
        if (rc < 0)
            return -1;
        if (rc == 0)
            return cfs_err_set(err, "%s changed since it was opened (it is shorter); export or "
                               "mount it again", m->label);
    }
    m->next = 0;
    m->cur_major = 0;
    return 0;
}

static void set_value(cfs_dtype t, void *base, uint64_t k, mval v)
{
    switch (t) {
    case CFS_INT32: ((int32_t *)base)[k] = (int32_t)v.i; break;
    case CFS_INT64: ((int64_t *)base)[k] = v.i; break;
    default: ((double *)base)[k] = v.d; break;
    }
}

static void set_index(cfs_dtype t, void *base, uint64_t k, uint64_t i)
{
    if (t == CFS_INT32)
        ((int32_t *)base)[k] = (int32_t)i;
    else
        ((int64_t *)base)[k] = (int64_t)i;
}

typedef struct ent {
    uint64_t minor;
    uint64_t pos;       /* order in the file: duplicates are summed in file order */
    mval v;
} ent;

static int cmp_ent(const void *a, const void *b)
{
    const ent *x = a, *y = b;
    if (x->minor != y->minor)
        return x->minor < y->minor ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int changed(const cfs_mtx *m, cfs_err *err)
{
    return cfs_err_set(err, "%s changed since it was opened (line %llu no longer matches); "
                       "export or mount it again", m->label, (ull)cfs_text_lineno(m->text));
}

/* Unsorted entries or duplicates: sort them in memory (counting sort by major row, then each
 * row by minor index), summing duplicates. */
static int sort_in_memory(cfs_mtx *m, cfs_err *err)
{
    uint64_t n = (uint64_t)m->indptr[m->n_major];   /* with the mirrored entries */
    if (n > SIZE_MAX / sizeof(ent))
        return cfs_err_setc(err, CFS_ENOMEM, "out of memory sorting %s", m->label);
    ent *e = malloc((n ? n : 1) * sizeof *e);
    uint64_t *fill = malloc((m->n_major ? m->n_major : 1) * sizeof *fill);
    int rc = e && fill ? 0 : cfs_err_setc(err, CFS_ENOMEM,
                                          "out of memory sorting the %llu entries of %s",
                                          (ull)n, m->label);
    if (rc == 0)
        rc = rewind_entries(m, err);
    for (uint64_t r = 0; rc == 0 && r < m->n_major; r++)
        fill[r] = (uint64_t)m->indptr[r];
    for (uint64_t k = 0, pos = 0; rc == 0 && k < m->nnz_declared; k++) {
        uint64_t i, j;
        mval v;
        int got = next_entry(m, &i, &j, &v, err);
        if (got <= 0) {
            rc = got < 0 ? -1 : changed(m, err);
            break;
        }
        /* a symmetric file lists one triangle: the entry stands for (i, j) and (j, i) */
        int copies = m->symmetry != CFS_MTX_GENERAL && i != j ? 2 : 1;
        for (int c = 0; c < copies; c++) {
            uint64_t r = c ? j : i, q = c ? i : j;
            mval w = v;
            if (c && m->symmetry == CFS_MTX_SKEW) {
                if (m->field == CFS_MTX_INTEGER)
                    w.i = -v.i;
                else
                    w.d = -v.d;
            }
            uint64_t maj = m->by_column ? q : r;
            if (fill[maj] >= (uint64_t)m->indptr[maj + 1]) {
                rc = changed(m, err);
                break;
            }
            e[fill[maj]++] = (ent){m->by_column ? r : q, pos++, w};
        }
    }
    free(fill);
    /* sort each row, sum duplicates, compact in place */
    uint64_t w = 0;
    bool fits32 = true;
    for (uint64_t r = 0; rc == 0 && r < m->n_major; r++) {
        uint64_t a = (uint64_t)m->indptr[r], b = (uint64_t)m->indptr[r + 1];
        qsort(e + a, b - a, sizeof *e, cmp_ent);
        m->indptr[r] = (int64_t)w;
        for (uint64_t k = a; k < b; k++) {
            if (w > (uint64_t)m->indptr[r] && e[w - 1].minor == e[k].minor) {
                if (m->field != CFS_MTX_INTEGER) {
                    e[w - 1].v.d += e[k].v.d;
                } else if (__builtin_add_overflow(e[w - 1].v.i, e[k].v.i, &e[w - 1].v.i)) {
                    rc = cfs_err_set(err, "%s: duplicate entries for row %llu column %llu sum "
                                     "past 64-bit integers; " DAMAGED, m->label,
                                     (ull)(m->by_column ? e[k].minor : r) + 1,
                                     (ull)(m->by_column ? r : e[k].minor) + 1);
                    break;
                }
            } else {
                e[w++] = e[k];
            }
        }
    }
    if (rc == 0) {
        m->indptr[m->n_major] = (int64_t)w;
        m->nnz = w;
        for (uint64_t k = 0; m->field == CFS_MTX_INTEGER && k < w; k++)
            if (e[k].v.i < INT32_MIN || e[k].v.i > INT32_MAX)
                fits32 = false;
        m->value_dtype = m->field != CFS_MTX_INTEGER ? CFS_FLOAT64 : fits32 ? CFS_INT32
                                                                            : CFS_INT64;
        size_t vs = cfs_dtype_size(m->value_dtype), is = cfs_dtype_size(m->index_dtype);
        m->mem_values = malloc((w ? w : 1) * vs);
        m->mem_indices = malloc((w ? w : 1) * is);
        if (!m->mem_values || !m->mem_indices)
            rc = cfs_err_setc(err, CFS_ENOMEM,
                              "out of memory holding the %llu entries of %s", (ull)w,
                             m->label);
        for (uint64_t k = 0; rc == 0 && k < w; k++) {
            set_value(m->value_dtype, m->mem_values, k, e[k].v);
            set_index(m->index_dtype, m->mem_indices, k, e[k].minor);
        }
    }
    free(e);
    if (rc == 0) {
        m->in_memory = true;
        cfs_text_close(m->text);
        m->text = NULL;
    }
    return rc;
}

int cfs_mtx_index(cfs_mtx *m, bool by_column, cfs_err *err)
{
    if (m->indexed)
        return 0;
    m->by_column = by_column;
    m->n_major = by_column ? m->cols : m->rows;
    m->n_minor = by_column ? m->rows : m->cols;
    if (m->n_major >= SIZE_MAX / sizeof(int64_t) - 1 ||
        !(m->indptr = calloc((size_t)m->n_major + 1, sizeof(int64_t))))
        return cfs_err_setc(err, CFS_ENOMEM, "out of memory indexing %s (%llu %s)", m->label,
                           (ull)m->n_major, by_column ? "columns" : "rows");
    m->index_dtype = m->n_minor <= INT32_MAX ? CFS_INT32 : CFS_INT64;
    bool sorted = true, fits32 = true;
    uint64_t prev_major = 0, prev_minor = 0;
    for (uint64_t k = 0; k < m->nnz_declared; k++) {
        uint64_t i, j;
        mval v;
        int rc = next_entry(m, &i, &j, &v, err);
        if (rc < 0)
            return -1;
        if (rc == 0)
            return cfs_err_set(err, "%s ends after %llu of the %llu entries its size line "
                               "announces (line %llu): the file is truncated; " DAMAGED,
                               m->label, (ull)k, (ull)m->nnz_declared,
                               (ull)cfs_text_lineno(m->text));
        uint64_t maj = by_column ? j : i, mn = by_column ? i : j;
        if (k > 0 && (maj < prev_major || (maj == prev_major && mn <= prev_minor)))
            sorted = false;
        prev_major = maj;
        prev_minor = mn;
        m->indptr[maj + 1]++;
        if (m->symmetry != CFS_MTX_GENERAL && i != j) {
            /* the mirrored entry: held in memory, sorted with the others */
            m->indptr[mn + 1]++;
            sorted = false;
            if (m->symmetry == CFS_MTX_SKEW && m->field == CFS_MTX_INTEGER && v.i == INT64_MIN)
                return line_error(m, err, "value '%lld' cannot be negated for the mirrored "
                                  "entry of a skew-symmetric matrix", (long long)v.i);
        }
        if (m->field == CFS_MTX_INTEGER && (v.i < INT32_MIN || v.i > INT32_MAX))
            fits32 = false;
    }
    uint64_t i, j;
    mval v;
    int rc = next_entry(m, &i, &j, &v, err);
    if (rc < 0)
        return -1;
    if (rc > 0)
        return line_error(m, err, "more entries than the %llu its size line announces",
                          (ull)m->nnz_declared);
    /* A last entry without its line end may have been cut in its value (45 read as 4). */
    if (m->entry_unterminated)
        return cfs_err_set(err, "%s: its last line (%llu) has no line end, so the file looks cut "
                           "short; re-download it (or, if it is complete, end it with a newline)",
                           m->label, (ull)cfs_text_lineno(m->text));
    for (uint64_t r = 0; r < m->n_major; r++)
        m->indptr[r + 1] += m->indptr[r];
    m->indexed = true;
    if (!sorted)
        return sort_in_memory(m, err);
    m->nnz = m->nnz_declared;
    m->value_dtype = m->field != CFS_MTX_INTEGER ? CFS_FLOAT64 : fits32 ? CFS_INT32 : CFS_INT64;
    m->next = UINT64_MAX;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Reading */

/* Parses entries [k0, k0 + want) into the block, from where the text is (or the top). */
static int stream_fill(cfs_mtx *m, uint64_t k0, uint64_t want, cfs_err *err)
{
    m->blk_n = 0;
    if (want > m->blk_cap) {
        size_t vs = cfs_dtype_size(m->value_dtype), is = cfs_dtype_size(m->index_dtype);
        if (want > SIZE_MAX / 8)
            return cfs_err_oom(err);
        void *nv = realloc(m->blk_values, (size_t)want * vs);
        if (nv)
            m->blk_values = nv;
        void *ni = nv ? realloc(m->blk_indices, (size_t)want * is) : NULL;
        if (ni)
            m->blk_indices = ni;
        if (!nv || !ni)
            return cfs_err_setc(err, CFS_ENOMEM, "out of memory reading %s", m->label);
        m->blk_cap = want;
    }
    if (m->next > k0 && rewind_entries(m, err) < 0)
        return -1;
    while (m->next < k0 + want) {
        uint64_t i, j;
        mval v;
        int rc = next_entry(m, &i, &j, &v, err);
        if (rc <= 0) {
            m->next = UINT64_MAX;
            return rc < 0 ? -1 : changed(m, err);
        }
        uint64_t maj = m->by_column ? j : i, mn = m->by_column ? i : j;
        while (m->cur_major < m->n_major && (uint64_t)m->indptr[m->cur_major + 1] <= m->next)
            m->cur_major++;
        if (maj != m->cur_major ||
            (m->value_dtype == CFS_INT32 && (v.i < INT32_MIN || v.i > INT32_MAX))) {
            m->next = UINT64_MAX;
            return changed(m, err);
        }
        if (m->next >= k0) {
            set_value(m->value_dtype, m->blk_values, m->next - k0, v);
            set_index(m->index_dtype, m->blk_indices, m->next - k0, mn);
        }
        m->next++;
    }
    m->blk_start = k0;
    m->blk_n = want;
    return 0;
}

enum part_kind { PART_DATA, PART_INDICES, PART_INDPTR };

typedef struct part {
    cfs_mtx *m;
    enum part_kind kind;
} part;

static int part_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                     void *out, cfs_err *err)
{
    const part *p = arr->ctx;
    cfs_mtx *m = p->m;
    uint64_t k0 = start[0], n = count[0];
    if (n == 0)
        return 0;
    if (p->kind == PART_INDPTR) {
        memcpy(out, m->indptr + k0, (size_t)n * sizeof(int64_t));
        return 0;
    }
    bool data = p->kind == PART_DATA;
    size_t es = cfs_dtype_size(arr->dtype);
    if (m->in_memory) {
        memcpy(out, (const char *)(data ? m->mem_values : m->mem_indices) + k0 * es,
               (size_t)n * es);
        return 0;
    }
    pthread_mutex_lock(&m->lock);
    int rc = 0;
    if (!(k0 >= m->blk_start && k0 + n <= m->blk_start + m->blk_n)) {
        uint64_t want = n > STREAM_BLOCK ? n : STREAM_BLOCK;
        if (want > m->nnz - k0)
            want = m->nnz - k0;
        rc = stream_fill(m, k0, want, err);
    }
    if (rc == 0)
        memcpy(out, (const char *)(data ? m->blk_values : m->blk_indices) +
                        (k0 - m->blk_start) * es,
               (size_t)n * es);
    pthread_mutex_unlock(&m->lock);
    return rc;
}

static void part_free(void *ctx)
{
    part *p = ctx;
    if (p)
        cfs_mtx_close(p->m);
    free(p);
}

static const cfs_array_ops part_ops = {part_read, part_free, NULL, NULL, NULL};

static cfs_array *part_array(cfs_mtx *m, enum part_kind kind, cfs_dtype t, uint64_t len)
{
    part *p = malloc(sizeof *p);
    if (!p)
        return NULL;
    p->m = m;
    p->kind = kind;
    cfs_array *a = cfs_array_new(t, 1, &len, &part_ops, p);
    if (!a) {
        free(p);
        return NULL;
    }
    __atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED);
    return a;
}

cfs_elem *cfs_mtx_sparse(cfs_mtx *m, const char *name)
{
    if (!m->indexed)
        return NULL;
    cfs_elem *el = cfs_elem_new(CFS_EL_SPARSE, name);
    if (!el)
        return NULL;
    el->csr = true;
    el->sparse_shape[0] = m->n_major;
    el->sparse_shape[1] = m->n_minor;
    el->values = part_array(m, PART_DATA, m->value_dtype, m->nnz);
    el->aux = part_array(m, PART_INDICES, m->index_dtype, m->nnz);
    el->indptr = part_array(m, PART_INDPTR, CFS_INT64, m->n_major + 1);
    if (!el->values || !el->aux || !el->indptr) {
        cfs_elem_free(el);
        return NULL;
    }
    return el;
}

void cfs_mtx_close(cfs_mtx *m)
{
    if (!m || __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    cfs_text_close(m->text);
    pthread_mutex_destroy(&m->lock);
    free(m->indptr);
    free(m->mem_values);
    free(m->mem_indices);
    free(m->blk_values);
    free(m->blk_indices);
    free(m->label);
    free(m);
}
