#include "worker.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "format.h"
#include "wire.h"
#include "wire_model.h"
#include "wire_remote.h"

typedef struct worker {
    int fd;
    cfs_dataset *ds;
    cfs_wire_arrays arrays;
    const char *fault;          /* the test hook's "kind@element", or NULL */
    cfs_buf reply;              /* kept between replies: see KEPT_REPLY */
} worker;

/* A reply buffer up to this size is kept for the next reply: a layout pass reads a matrix in
 * blocks of many MiB, and fresh pages for each (faulted in, zeroed, unmapped) cost more than
 * reading them. A larger one is freed after its reply. */
#define KEPT_REPLY ((size_t)64 << 20)

/* The test hook: does what it says when the worker reaches element; -1 when it ran out of
 * memory, which the request then reports as a reader would. */
static int maybe_fault(const worker *w, const char *element)
{
    const char *at = w->fault ? strchr(w->fault, '@') : NULL;
    if (!at || strcmp(at + 1, element) != 0)
        return 0;
    size_t kind = (size_t)(at - w->fault);
    if (kind == 4 && strncmp(w->fault, "segv", 4) == 0) {
        raise(SIGSEGV);
    } else if (kind == 4 && strncmp(w->fault, "loop", 4) == 0) {
        for (volatile unsigned long spin = 0;; spin++)
            ;
    } else if (kind == 5 && strncmp(w->fault, "alloc", 5) == 0) {
        /* Allocates and touches until the limit refuses, then lets go (as a reader whose
         * allocation failed would), so the reply itself can be made. */
        void **hoard = NULL;
        for (;;) {
            void **p = malloc(16u << 20);
            if (!p)
                break;
            memset(p, 1, 16u << 20);
            *p = hoard;
            hoard = p;
        }
        while (hoard) {
            void **next = *hoard;
            free(hoard);
            hoard = next;
        }
        return -1;
    }
    return 0;
}

static int reply_error(const worker *w, cfs_wire_type type, const cfs_err *e)
{
    cfs_buf b = {0};
    cfs_err err = {0};
    int rc = cfs_wire_put_u32(&b, e->status ? (uint32_t)e->status : CFS_EFAIL) |
             cfs_wire_put_str(&b, e->msg);
    rc = rc == 0 ? cfs_wire_send(w->fd, type, b.data, b.len, -1, &err) : -1;
    cfs_buf_free(&b);
    return rc;
}

/* A worker serves one source at a time: the pool hands it from one source to the next, and the
 * one it had is closed before the next is opened. */
static void close_source(worker *w)
{
    cfs_wire_arrays_free(&w->arrays);
    cfs_dataset_free(w->ds);
    w->ds = NULL;
}

static int serve_open(worker *w, cfs_wire_cursor *c)
{
    cfs_err err = {0};
    char *path = cfs_wire_get_str(c, CFS_WIRE_MAX_CONTROL);
    char *part = path && c->left ? cfs_wire_get_str(c, CFS_WIRE_MAX_CONTROL) : NULL;
    if (!path || c->bad || c->left) {
        free(path);
        free(part);
        return -1;
    }
    close_source(w);
    cfs_buf b = {0};
    int rc = maybe_fault(w, "open") < 0 ? cfs_err_oom(&err)
                                         : cfs_format_open_part(path, part, &w->ds, &err);
    free(path);
    free(part);
    if (rc == 0 && cfs_wire_put_u32(&b, CFS_OK) < 0)
        rc = cfs_err_oom(&err);
    if (rc == 0)
        rc = cfs_wire_model_encode(w->ds, &b, &w->arrays, &err);
    rc = rc == 0 ? cfs_wire_send(w->fd, CFS_WIRE_MODEL, b.data, b.len, -1, &err)
                 : reply_error(w, CFS_WIRE_MODEL, &err);
    cfs_buf_free(&b);
    return rc;
}

/* What the folder scan asks of a file or folder: the format that bids for it, and whether it is a
 * compressed copy of an input. Any number of these, before an open or without one. */
static int serve_detect(worker *w, cfs_wire_cursor *c)
{
    char *path = cfs_wire_get_str(c, CFS_WIRE_MAX_CONTROL);
    if (!path || c->left)
        return free(path), -1;
    cfs_err ignored;
    const char *codec = NULL;
    const cfs_format *f = maybe_fault(w, "detect") < 0 ? NULL : cfs_format_detect(path, &ignored);
    bool compressed = !f && cfs_format_needs_unpack(path, &codec);
    free(path);
    cfs_buf b = {0};
    cfs_err err = {0};
    int rc = cfs_wire_put_str(&b, f ? f->name : NULL) | cfs_wire_put_u8(&b, compressed);
    rc = rc == 0 ? cfs_wire_send(w->fd, CFS_WIRE_DETECTED, b.data, b.len, -1, &err) : -1;
    cfs_buf_free(&b);
    return rc;
}

/* The strings as u32 length + bytes each, after the status. */
static int put_strings(cfs_buf *b, const char *const *s, size_t n)
{
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        size_t len = s[i] ? strlen(s[i]) : 0;
        rc = len < CFS_WIRE_MAX_STRING ? cfs_wire_put_u32(b, (uint32_t)len) |
                                             cfs_buf_append(b, s[i], len)
                                       : -1;
    }
    return rc;
}

/* What a request asks for: a slab, or whole rows (rows != NULL). */
typedef struct want {
    const uint64_t *start, *count;
    const uint64_t *rows;
    uint64_t nrows;
} want;

static int read_into(const cfs_array *arr, const want *q, void *out, cfs_strpool *pool,
                     cfs_err *err)
{
    if (q->rows)
        return cfs_array_read_rows(arr, q->rows, q->nrows, out, pool, err);
    if (arr->dtype == CFS_STRING)
        return cfs_array_read_strings(arr, q->start, q->count, out, pool, err);
    return cfs_array_read(arr, q->start, q->count, out, err);
}

/* The n values asked for, appended to b. */
static int read_values(const cfs_array *arr, const want *q, uint64_t n, cfs_buf *b,
                       cfs_err *err)
{
    size_t esize = cfs_array_elem_size(arr);
    if (n > (CFS_WIRE_MAX_FRAME - 16) / (esize ? esize : 1))
        return cfs_err_setc(err, CFS_EINVALID, "a read of %llu values is over the limit",
                            (unsigned long long)n);
    if (cfs_buf_reserve(b, (size_t)n * esize) < 0)
        return cfs_err_oom(err);
    void *out = b->data + b->len;
    memset(out, 0, (size_t)n * esize);
    if (arr->dtype != CFS_STRING) {
        if (read_into(arr, q, out, NULL, err) < 0)
            return -1;
        b->len += (size_t)n * esize;
        return 0;
    }
    /* The pointers are moved out of the buffer before it is overwritten with the strings. */
    cfs_strpool *pool = cfs_strpool_new();
    const char **s = malloc((size_t)n * sizeof *s + 1);
    int rc = pool && s ? read_into(arr, q, s, pool, err) : cfs_err_oom(err);
    if (rc == 0 && put_strings(b, s, (size_t)n) < 0)
        rc = cfs_err_oom(err);
    free(s);
    cfs_strpool_free(pool);
    return rc;
}

/* Reads what q asks of array id and sends it (or the reason it could not be read). */
static int reply_values(worker *w, uint32_t id, const want *q, uint64_t n, bool overflow)
{
    cfs_err err = {0};
    /* The values are read in place after the status; 4 unsent bytes before it put them 8 bytes
     * into the (malloc-aligned) buffer, aligned for every element type a reader stores. */
    static const unsigned char unsent[4];
    cfs_buf b = w->reply;
    cfs_buf_reset(&b);
    int rc = maybe_fault(w, w->arrays.path[id]) < 0 ||
                     cfs_buf_append(&b, unsent, sizeof unsent) < 0 ||
                     cfs_wire_put_u32(&b, CFS_OK) < 0
                 ? cfs_err_oom(&err)
             : overflow ? cfs_err_setc(&err, CFS_EINVALID, "a read of too many values")
                        : read_values(w->arrays.arr[id], q, n, &b, &err);
    rc = rc == 0 ? cfs_wire_send(w->fd, CFS_WIRE_DATA, b.data + sizeof unsent,
                                 b.len - sizeof unsent, -1, &err)
                 : reply_error(w, CFS_WIRE_DATA, &err);
    if (b.cap > KEPT_REPLY)
        cfs_buf_free(&b);
    w->reply = b;
    return rc;
}

static int serve_read(worker *w, cfs_wire_cursor *c)
{
    uint32_t id = cfs_wire_get_u32(c);
    uint8_t ndim = cfs_wire_get_u8(c);
    uint64_t start[CFS_MAX_DIMS] = {0}, count[CFS_MAX_DIMS] = {0};
    if (c->bad || !w->ds || id >= w->arrays.n || ndim != w->arrays.arr[id]->ndim)
        return -1;
    uint64_t n = 1;
    bool overflow = false;
    for (int d = 0; d < ndim; d++) {
        start[d] = cfs_wire_get_u64(c);
        count[d] = cfs_wire_get_u64(c);
        overflow |= count[d] && n > UINT64_MAX / count[d];
        n *= count[d];
    }
    if (c->bad || c->left)
        return -1;
    want q = {start, count, NULL, 0};
    return reply_values(w, id, &q, n, overflow);
}

/* Whole rows: the row list is checked by cfs_array_read_rows (ascending, inside the array). */
static int serve_read_rows(worker *w, cfs_wire_cursor *c)
{
    uint32_t id = cfs_wire_get_u32(c);
    uint64_t nrows = cfs_wire_get_u64(c);
    if (c->bad || !w->ds || id >= w->arrays.n || w->arrays.arr[id]->ndim < 1 ||
        nrows > CFS_WIRE_MAX_ROWS || c->left != nrows * 8)
        return -1;
    uint64_t *rows = malloc((size_t)nrows * sizeof *rows + 1);
    if (!rows)
        return -1;
    for (uint64_t i = 0; i < nrows; i++)
        rows[i] = cfs_wire_get_u64(c);
    uint64_t row_elems = cfs_array_row_elems(w->arrays.arr[id]);
    bool overflow = row_elems && nrows > UINT64_MAX / row_elems;
    want q = {NULL, NULL, rows, nrows};
    int rc = reply_values(w, id, &q, nrows * row_elems, overflow);
    free(rows);
    return rc;
}

/* A sanitizer reserves terabytes of address space for its shadow memory, which an
 * address-space limit leaves no room for: in a sanitizer build the worker's memory limit is
 * not applied (the suite's ASan and TSan stages). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CFS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CFS_SANITIZED 1
#endif
#endif
#ifndef CFS_SANITIZED
#define CFS_SANITIZED 0
#endif

int cfs_reader_worker_main(int fd, uint64_t memory_limit)
{
    signal(SIGPIPE, SIG_IGN);
    if (memory_limit && !CFS_SANITIZED) {
        struct rlimit rl = {memory_limit, memory_limit};
        setrlimit(RLIMIT_AS, &rl);
    }
    worker w = {.fd = fd, .fault = getenv(CFS_WORKER_FAULT_ENV)};
    /* a worker has no network: its daemon reads URLs */
    cfs_wire_remote_ask_over(fd, cfs_format_url_shapes());
    unsigned char *payload = malloc(CFS_WIRE_MAX_REQUEST);
    int status = payload ? 0 : 1;
    while (status == 0) {
        uint8_t type;
        uint32_t len;
        bool timed_out = false;
        cfs_err err = {0};
        if (cfs_wire_recv_header(fd, &type, &len, CFS_WIRE_MAX_REQUEST, -1, &timed_out, &err) < 0 ||
            cfs_wire_recv_exact(fd, payload, len, -1, &timed_out, &err) < 0)
            break;              /* the daemon closed its end: done */
        cfs_wire_cursor c = {payload, len, false};
        int rc = type == CFS_WIRE_OPEN ? serve_open(&w, &c)
                 : type == CFS_WIRE_READ ? serve_read(&w, &c)
                 : type == CFS_WIRE_READ_ROWS ? serve_read_rows(&w, &c)
                 : type == CFS_WIRE_DETECT ? serve_detect(&w, &c) : -1;
        if (rc < 0)
            status = 2;         /* a request it does not understand, or the socket failed */
    }
    free(payload);
    cfs_buf_free(&w.reply);
    close_source(&w);
    close(fd);
    return status;
}
