#include "range.h"
#include "s3.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* Handles kept for reuse, so their connections (and TLS sessions) are too. */
#define KEPT_HANDLES 16
#define MAX_ATTEMPTS 5

static struct {
    pthread_mutex_t lock;
    CURL *kept[KEPT_HANDLES];
    size_t nkept;
    double timeout;
    char cafile[4096];
    /* s3:// sources: the environment's configuration, loaded at the first one */
    char s3_endpoint[1024];
    bool s3_loaded, s3_anonymous;
    cfs_s3_config s3;
    cfs_err s3_why;
    int s3_rc;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .timeout = 20};

static atomic_uint_fast64_t sent_requests, received_bytes;

int cfs_range_global_init(const cfs_range_config *cfg, cfs_err *err)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return cfs_err_set(err, "libcurl could not be initialised");
    if (cfg->timeout > 0)
        pool.timeout = cfg->timeout;
    snprintf(pool.cafile, sizeof pool.cafile, "%s", cfg->cafile ? cfg->cafile : "");
    snprintf(pool.s3_endpoint, sizeof pool.s3_endpoint, "%s",
             cfg->s3_endpoint ? cfg->s3_endpoint : "");
    return 0;
}

void cfs_range_counts(uint64_t *requests, uint64_t *bytes)
{
    *requests = atomic_load(&sent_requests);
    *bytes = atomic_load(&received_bytes);
}

static CURL *handle_take(void)
{
    pthread_mutex_lock(&pool.lock);
    CURL *c = pool.nkept ? pool.kept[--pool.nkept] : NULL;
    pthread_mutex_unlock(&pool.lock);
    return c ? c : curl_easy_init();
}

static void handle_give(CURL *c)
{
    pthread_mutex_lock(&pool.lock);
    if (pool.nkept < KEPT_HANDLES) {
        pool.kept[pool.nkept++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&pool.lock);
    if (c)
        curl_easy_cleanup(c);
}

/* One answer: its last response's status and headers (a redirect's are replaced by the next
 * response's), and its body, at most want bytes (more is an error: overflow), into body or,
 * with fd >= 0, written to fd at fd_off. */
typedef struct answer {
    char *body;
    int fd;
    uint64_t fd_off;
    size_t want, got;
    int write_errno;            /* a write to fd failed: why */
    bool overflow;
    char etag[200], last_modified[64], content_range[128];
    bool ranges_none;
} answer;

static void header_value(const char *line, size_t n, const char *name, char *dst, size_t cap)
{
    size_t k = strlen(name);
    if (n <= k || strncasecmp(line, name, k) != 0)
        return;
    line += k;
    n -= k;
    while (n && (*line == ' ' || *line == '\t'))
        line++, n--;
    while (n && (line[n - 1] == '\r' || line[n - 1] == '\n' || line[n - 1] == ' '))
        n--;
    snprintf(dst, cap, "%.*s", (int)(n < cap ? n : cap - 1), line);
}

static size_t on_header(char *line, size_t size, size_t n, void *ctx)
{
    answer *a = ctx;
    size_t len = size * n;
    if (len >= 5 && strncmp(line, "HTTP/", 5) == 0) {
        a->etag[0] = a->last_modified[0] = a->content_range[0] = '\0';
        a->ranges_none = false;
    }
    header_value(line, len, "etag:", a->etag, sizeof a->etag);
    header_value(line, len, "last-modified:", a->last_modified, sizeof a->last_modified);
    header_value(line, len, "content-range:", a->content_range, sizeof a->content_range);
    char ranges[32] = "";
    header_value(line, len, "accept-ranges:", ranges, sizeof ranges);
    if (strcasecmp(ranges, "none") == 0)
        a->ranges_none = true;
    return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *ctx)
{
    answer *a = ctx;
    size_t len = size * n;
    if (len > a->want - a->got) {
        a->overflow = true;
        return 0;               /* stops the transfer */
    }
    if (a->fd < 0) {
        memcpy(a->body + a->got, data, len);
    } else {
        for (size_t done = 0; done < len;) {
            ssize_t n = pwrite(a->fd, data + done, len - done, (off_t)(a->fd_off + a->got + done));
            if (n <= 0) {
                a->write_errno = n < 0 ? errno : EIO;
                return 0;
            }
            done += (size_t)n;
        }
    }
    a->got += len;
    return len;
}

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void pause_seconds(double s)
{
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&t, NULL);
}

/* What a failed transfer means for people, and whether trying again may help. */
static bool transport_failure(CURLcode rc, const char *detail, double timeout, cfs_err *err)
{
    const char *what = detail[0] ? detail : curl_easy_strerror(rc);
    switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
        cfs_err_setc(err, CFS_EIO, "the host cannot be found (%s); check the URL", what);
        return true;
    case CURLE_COULDNT_CONNECT:
        cfs_err_setc(err, CFS_EIO, "cannot connect (%s); check the host and port and that the "
                     "server is up", what);
        return true;
    case CURLE_OPERATION_TIMEDOUT:
        cfs_err_setc(err, CFS_EIO, "no whole answer within %g s (%s); check the server or "
                     "raise -o remote_timeout", timeout, what);
        return true;
    case CURLE_PARTIAL_FILE:
        cfs_err_setc(err, CFS_EIO, "the server sent fewer bytes than it announced (a truncated "
                     "body or a false Content-Length: %s)", what);
        return true;
    case CURLE_RECV_ERROR: case CURLE_SEND_ERROR: case CURLE_GOT_NOTHING:
        cfs_err_setc(err, CFS_EIO, "the connection broke (%s)", what);
        return true;
    case CURLE_SSL_CONNECT_ERROR: case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM: case CURLE_SSL_CACERT_BADFILE: case CURLE_SSL_ISSUER_ERROR:
        cfs_err_setc(err, CFS_EIO, "TLS failed (%s); check that the server speaks https on that "
                     "port and that its certificate is trusted (-o remote_cafile=PEM)", what);
        return false;
    case CURLE_TOO_MANY_REDIRECTS:
        cfs_err_setc(err, CFS_EIO, "too many redirects (%s): the URL redirects in a loop or "
                     "through too many hops; check the URL, or give the one it ends at", what);
        return false;
    case CURLE_UNSUPPORTED_PROTOCOL:
        cfs_err_setc(err, CFS_EREFUSED, "redirected to a protocol other than http(s) (%s)", what);
        return false;
    default:
        cfs_err_setc(err, CFS_EIO, "the request failed (%s)", what);
        return false;
    }
}

/* A status other than the one expected; *retry when the server may answer later. */
static void status_failure(long status, bool *retry, cfs_err *err)
{
    *retry = status >= 500 || status == 429 || status == 408;
    if (status == 404 || status == 410)
        cfs_err_setc(err, CFS_ENOTFOUND, "HTTP %ld: the server has no such file; check the URL",
                     status);
    else if (status == 401 || status == 403)
        cfs_err_setc(err, CFS_EREFUSED, "HTTP %ld: the server refuses to serve it; check the URL "
                     "and its access rights", status);
    else if (status == 412)
        cfs_err_setc(err, CFS_EIO, "HTTP 412: the file changed on the server while it was read; "
                     "its new version is served once it is laid out again");
    else
        cfs_err_setc(err, CFS_EIO, "HTTP %ld from the server", status);
}

/* Where a GET of url goes and how it is signed: an s3:// URL becomes its object's https URL
 * (s3_config.c) with s3.c's SigV4 signing; any other goes as it is, unsigned. */
typedef struct target {
    char *url;                  /* malloc'd */
    bool sign;
    cfs_s3_signing signing;
} target;

static int s3_config(cfs_s3_config *cfg, bool *anonymous, cfs_err *err)
{
    pthread_mutex_lock(&pool.lock);
    if (!pool.s3_loaded) {
        pool.s3_loaded = true;
        pool.s3_rc = cfs_s3_config_load(&pool.s3, pool.s3_endpoint, &pool.s3_why);
        /* No credentials anywhere: public objects are still read, unsigned. */
        pool.s3_anonymous = pool.s3_rc < 0 && pool.s3_why.status == CFS_ENOTFOUND;
        if (pool.s3_anonymous)
            pool.s3_rc = 0;
    }
    int rc = pool.s3_rc;
    if (rc < 0)
        *err = pool.s3_why;
    *cfg = pool.s3;
    *anonymous = pool.s3_anonymous;
    pthread_mutex_unlock(&pool.lock);
    return rc;
}

static int target_of(const char *url, target *t, cfs_err *err)
{
    memset(t, 0, sizeof *t);
    if (!cfs_s3_is_url(url))
        return (t->url = strdup(url)) ? 0 : cfs_err_oom(err);
    cfs_s3_config *cfg = malloc(sizeof *cfg);
    char *bucket = NULL, *key = NULL;
    bool anonymous = false;
    int rc = cfg ? s3_config(cfg, &anonymous, err) : cfs_err_oom(err);
    if (rc == 0)
        rc = cfs_s3_url_parse(url, &bucket, &key, err);
    if (rc == 0 && !key[0])
        rc = cfs_err_setc(err, CFS_EINVALID, "an s3:// source names an object "
                          "(s3://bucket/key), not a bucket");
    if (rc == 0 && !(t->url = cfs_s3_object_url(cfg, bucket, key, NULL)))
        rc = cfs_err_oom(err);
    if (rc == 0 && !anonymous) {
        t->sign = true;
        cfs_s3_signing_set(cfg, NULL, 0, &t->signing);
    }
    free(bucket);
    free(key);
    free(cfg);
    return rc;
}

/* The request's header lines: the target's signing headers, If-Match. */
static int header_lines(const target *t, const char *if_match, struct curl_slist **out,
                        cfs_err *err)
{
    char match[256];
    const char *lines[3] = {NULL};
    size_t n = 0;
    if (t->sign) {
        lines[n++] = t->signing.sha_line;
        if (t->signing.token_line[0])
            lines[n++] = t->signing.token_line;
    }
    if (if_match) {
        snprintf(match, sizeof match, "If-Match: %s", if_match);
        lines[n++] = match;
    }
    *out = NULL;
    for (size_t i = 0; i < n; i++) {
        struct curl_slist *next = curl_slist_append(*out, lines[i]);
        if (!next) {
            curl_slist_free_all(*out);
            *out = NULL;
            return cfs_err_oom(err);
        }
        *out = next;
    }
    return 0;
}

/* GET url's bytes first..last (inclusive) into a (a->body, a->want set), headers with them;
 * if_match (may be NULL) sent as If-Match. *status receives the final HTTP status. Retries
 * what may pass within the budget. */
static int get_range(const char *url, uint64_t first, uint64_t last, const char *if_match,
                     answer *a, long *status, cfs_err *err)
{
    double start = now_seconds(), budget = pool.timeout, backoff = 0.2;
    char range[64];
    snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)first,
             (unsigned long long)last);
    target t;
    struct curl_slist *headers = NULL;
    if (target_of(url, &t, err) < 0)
        return -1;
    if (header_lines(&t, if_match, &headers, err) < 0) {
        free(t.url);
        return -1;
    }
    int rc = -1;
    for (int attempt = 1;; attempt++) {
        double left = budget - (now_seconds() - start);
        CURL *c = handle_take();
        if (!c) {
            rc = cfs_err_oom(err);
            break;
        }
        char detail[CURL_ERROR_SIZE] = "";
        curl_easy_reset(c);
        curl_easy_setopt(c, CURLOPT_URL, t.url);
        curl_easy_setopt(c, CURLOPT_RANGE, range);
        if (t.sign) {
            curl_easy_setopt(c, CURLOPT_AWS_SIGV4, t.signing.sigv4);
            curl_easy_setopt(c, CURLOPT_USERPWD, t.signing.userpwd);
        }
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, NULL);    /* bytes as stored */
        long ms = left > 0.05 ? (long)(left * 1000) : 50;
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ms);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, ms < 10000 ? ms : 10000L);
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, detail);
        curl_easy_setopt(c, CURLOPT_USERAGENT, "cellucid-fs/" PACKAGE_VERSION);
        if (pool.cafile[0])
            curl_easy_setopt(c, CURLOPT_CAINFO, pool.cafile);
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, a);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
        a->got = 0;
        a->overflow = false;
        atomic_fetch_add(&sent_requests, 1);
        CURLcode cc = curl_easy_perform(c);
        atomic_fetch_add(&received_bytes, a->got);
        *status = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, NULL);
        handle_give(c);
        bool retry;
        if (cc == CURLE_WRITE_ERROR && a->write_errno) {
            rc = cfs_err_errno(err, a->write_errno, "cannot write what was fetched");
            break;
        }
        if (cc == CURLE_OK || (cc == CURLE_WRITE_ERROR && a->overflow)) {
            if (*status == 206 || *status == 200 || *status == 416) {
                rc = 0;         /* the caller checks what came */
                break;
            }
            status_failure(*status, &retry, err);
        } else {
            retry = transport_failure(cc, detail, budget, err);
        }
        if (!retry || attempt == MAX_ATTEMPTS || now_seconds() - start + backoff >= budget)
            break;
        pause_seconds(backoff);
        backoff *= 2;
    }
    curl_slist_free_all(headers);
    free(t.url);
    return rc;
}

/* "bytes FIRST-LAST/TOTAL" (TOTAL may be "*": unknown). */
static bool parse_content_range(const char *s, uint64_t *first, uint64_t *last, uint64_t *total,
                                bool *total_known)
{
    unsigned long long f, l, t;
    int n = 0;
    if (strncasecmp(s, "bytes ", 6) != 0)
        return false;
    s += 6;
    if (sscanf(s, "%llu-%llu/%n", &f, &l, &n) == 2 && n > 0) {
        *first = f;
        *last = l;
        *total_known = strcmp(s + n, "*") != 0;
        if (*total_known && sscanf(s + n, "%llu", &t) == 1)
            *total = t;
        return !*total_known || sscanf(s + n, "%llu", &t) == 1;
    }
    if (sscanf(s, "*/%llu", &t) == 1) {     /* a 416's: the size alone */
        *first = 1;
        *last = 0;
        *total = t;
        *total_known = true;
        return true;
    }
    return false;
}

static const char *refused_ranges =
    "the server does not answer range requests (it sends the whole file every time); download "
    "it (curl -O URL) and use the copy, or serve it from a server that supports ranges (nginx, "
    "Apache, S3 and its kin)";

int cfs_range_info(const char *url, cfs_remote_info *out, cfs_err *err)
{
    char byte[1];
    answer a = {.body = byte, .fd = -1, .want = 1};
    long status = 0;
    if (get_range(url, 0, 0, NULL, &a, &status, err) < 0)
        return -1;
    uint64_t first = 0, last = 0, total = 0;
    bool known = false;
    if (status == 200 || a.ranges_none)
        return cfs_err_setc(err, CFS_EREFUSED, "%s", refused_ranges);
    if (!parse_content_range(a.content_range, &first, &last, &total, &known) || !known)
        return cfs_err_setc(err, CFS_EREFUSED, "the server's answer to a range request has no "
                            "usable Content-Range (\"%s\"); %s", a.content_range, refused_ranges);
    if (status == 416 ? total != 0 : (first != 0 || last != 0 || a.got != 1))
        return cfs_err_setc(err, CFS_EIO, "the server answered another range than asked "
                            "(\"%s\")", a.content_range);
    memset(out, 0, sizeof *out);
    out->size = total;
    out->mtime = a.last_modified[0] ? (int64_t)curl_getdate(a.last_modified, NULL) : 0;
    if (out->mtime < 0)
        out->mtime = 0;
    if (a.etag[0])
        snprintf(out->version, sizeof out->version, "etag:%s", a.etag);
    else if (a.last_modified[0])
        snprintf(out->version, sizeof out->version, "modified:%s:%llu", a.last_modified,
                 (unsigned long long)total);
    else
        snprintf(out->version, sizeof out->version, "size:%llu", (unsigned long long)total);
    return 0;
}

/* Whether the answer's validators are the version's (an answer without them is taken on its
 * Content-Range's total). */
static bool same_version(const answer *a, const cfs_remote_info *v)
{
    if (strncmp(v->version, "etag:", 5) == 0)
        return !a->etag[0] || strcmp(a->etag, v->version + 5) == 0;
    if (strncmp(v->version, "modified:", 9) == 0)
        return !a->last_modified[0] ||
               strncmp(a->last_modified, v->version + 9, strlen(a->last_modified)) == 0;
    return true;
}

/* The bytes off..off+len-1 of the version of url into a (its sink set), checked. */
static int read_checked(const char *url, const cfs_remote_info *version, uint64_t off,
                        size_t len, answer *a, cfs_err *err)
{
    /* If-Match compares strongly: a weak ETag (W/"...") never matches, so it is checked on the
     * answer only. */
    const char *etag = strncmp(version->version, "etag:", 5) == 0 ? version->version + 5 : NULL;
    const char *if_match = etag && strncmp(etag, "W/", 2) != 0 ? etag : NULL;
    a->want = len;
    long status = 0;
    if (get_range(url, off, off + len - 1, if_match, a, &status, err) < 0)
        return status == 412 ? -2 : -1;
    uint64_t first = 0, last = 0, total = 0;
    bool known = false;
    if (status != 206)
        return cfs_err_setc(err, CFS_EIO, "%s", status == 200 ? refused_ranges
                                                             : "the server refused the range");
    if (!parse_content_range(a->content_range, &first, &last, &total, &known) || first != off ||
        last != off + len - 1)
        return cfs_err_setc(err, CFS_EIO, "the server answered another range than asked "
                            "(\"%s\" for %llu-%llu)", a->content_range, (unsigned long long)off,
                            (unsigned long long)(off + len - 1));
    if ((known && total != version->size) || !same_version(a, version)) {
        cfs_err_setc(err, CFS_EIO, "the file changed on the server while it was read; its new "
                     "version is served once it is laid out again");
        return -2;
    }
    if (a->overflow || a->got != len)
        return cfs_err_setc(err, CFS_EIO, "the server sent %s bytes than the %zu asked for "
                            "(a truncated body or a false Content-Length)",
                            a->overflow ? "more" : "fewer", len);
    return 0;
}

int cfs_range_read(const char *url, const cfs_remote_info *version, uint64_t off, void *buf,
                  size_t len, cfs_err *err)
{
    answer a = {.body = buf, .fd = -1};
    return read_checked(url, version, off, len, &a, err);
}

int cfs_range_fetch(const char *url, const cfs_remote_info *version, uint64_t off, size_t len,
                    int fd, cfs_err *err)
{
    answer a = {.fd = fd, .fd_off = off};
    return read_checked(url, version, off, len, &a, err);
}
