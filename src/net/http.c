#include "http.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* A stalled transfer (under 1 byte/s for this long) is a timeout, so nothing hangs for ever. */
enum { CONNECT_TIMEOUT_S = 10, STALL_TIMEOUT_S = 30 };

struct cfs_http {
    CURL *curl;
    int attempts;
    char errbuf[CURL_ERROR_SIZE];
    char *cafile;                  /* NULL: the system's */
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

/* curl_global_init is not thread-safe: done once, before any handle. */
static void global_init(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

cfs_http *cfs_http_new(int attempts, const char *cafile, cfs_err *err)
{
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK) {
        cfs_err_setc(err, CFS_EIO, "libcurl: %s", curl_easy_strerror(global_rc));
        return NULL;
    }
    cfs_http *h = calloc(1, sizeof *h);
    if (!h || !(h->curl = curl_easy_init()) ||
        (cafile && cafile[0] && !(h->cafile = strdup(cafile)))) {
        if (h && h->curl)
            curl_easy_cleanup(h->curl);
        free(h);
        cfs_err_oom(err);
        return NULL;
    }
    h->attempts = attempts < 1 ? 1 : attempts;
    return h;
}

void cfs_http_free(cfs_http *h)
{
    if (!h)
        return;
    curl_easy_cleanup(h->curl);
    free(h->cafile);
    free(h);
}

void cfs_http_response_free(cfs_http_response *resp)
{
    cfs_buf_free(&resp->body);
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    cfs_http_response *resp = arg;
    return cfs_buf_append(&resp->body, data, size * n) < 0 ? 0 : size * n;
}

/* Copies a header's value (trimmed) into out when line is "name: value". */
static void header_value(const char *line, size_t len, const char *name, char *out, size_t cap)
{
    size_t nlen = strlen(name);
    if (len <= nlen + 1 || strncasecmp(line, name, nlen) != 0 || line[nlen] != ':')
        return;
    const char *v = line + nlen + 1, *end = line + len;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
        end--;
    size_t n = (size_t)(end - v) < cap - 1 ? (size_t)(end - v) : cap - 1;
    memcpy(out, v, n);
    out[n] = '\0';
}

static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
    cfs_http_response *resp = arg;
    size_t len = size * n;
    char length[32] = "";
    /* A new status line (a redirect or a 100 Continue came first) starts the headers anew. */
    if (len > 5 && strncmp(data, "HTTP/", 5) == 0) {
        resp->etag[0] = resp->last_modified[0] = '\0';
        resp->content_length = -1;
    }
    header_value(data, len, "ETag", resp->etag, sizeof resp->etag);
    header_value(data, len, "Last-Modified", resp->last_modified, sizeof resp->last_modified);
    header_value(data, len, "Content-Length", length, sizeof length);
    if (length[0])
        resp->content_length = strtoll(length, NULL, 10);
    return len;
}

static int set_request(cfs_http *h, const cfs_http_request *req, struct curl_slist **hdrs,
                       cfs_http_response *resp)
{
    CURL *c = h->curl;
    curl_easy_reset(c);
    *hdrs = NULL;
    for (const char *const *line = req->headers; line && *line; line++) {
        struct curl_slist *next = curl_slist_append(*hdrs, *line);
        if (!next)
            return -1;
        *hdrs = next;
    }
    char range[64];
    if (req->range_len > 0) {
        snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)req->range_start,
                 (unsigned long long)(req->range_start + req->range_len - 1));
        curl_easy_setopt(c, CURLOPT_RANGE, range);
    }
    curl_easy_setopt(c, CURLOPT_URL, req->url);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, h->errbuf);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, (long)CONNECT_TIMEOUT_S);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)STALL_TIMEOUT_S);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hdrs);
    if (h->cafile)
        curl_easy_setopt(c, CURLOPT_CAINFO, h->cafile);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, resp);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, resp);
    if (strcmp(req->method, "HEAD") == 0) {
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    } else if (strcmp(req->method, "GET") != 0) {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
    }
    if (req->body) {
        /* As POST fields (sent with the method above): libcurl's SigV4 hashes these bytes as
         * the payload, so the signature covers the body actually sent. */
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, req->body);
    }
    if (req->aws_sigv4) {
        curl_easy_setopt(c, CURLOPT_AWS_SIGV4, req->aws_sigv4);
        curl_easy_setopt(c, CURLOPT_USERPWD, req->userpwd);
    }
    return 0;
}

static bool retryable_transport(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return true;
    default:
        return false;
    }
}

static bool retryable_status(long status)
{
    return status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
}

static const char *transport_advice(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
        return "check the host name";
    case CURLE_COULDNT_CONNECT:
        return "check that the server is up and the address and port are right";
    case CURLE_OPERATION_TIMEDOUT:
        return "the server did not answer in time; try again later";
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
        return "TLS failed: check that the server speaks https on that port and that its "
               "certificate is trusted (a private CA: -o remote_cafile=PEM)";
    case CURLE_TOO_MANY_REDIRECTS:
        return "the URL redirects in a loop or through too many hops; check it";
    default:
        return "check the URL and the network";
    }
}

static void backoff(int attempt)
{
    double s = 0.25 * (double)(1 << (attempt < 5 ? attempt : 5));
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

int cfs_http_perform(cfs_http *h, const cfs_http_request *req, cfs_http_response *resp,
                     cfs_err *err)
{
    CURLcode rc = CURLE_OK;
    for (int attempt = 0; attempt < h->attempts; attempt++) {
        if (attempt > 0)
            backoff(attempt - 1);
        struct curl_slist *hdrs;
        cfs_buf_reset(&resp->body);
        resp->status = 0;
        resp->etag[0] = resp->last_modified[0] = '\0';
        resp->content_length = -1;
        h->errbuf[0] = '\0';
        if (set_request(h, req, &hdrs, resp) < 0) {
            curl_slist_free_all(hdrs);
            return cfs_err_oom(err);
        }
        rc = curl_easy_perform(h->curl);
        curl_slist_free_all(hdrs);
        if (rc == CURLE_OK) {
            curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &resp->status);
            if (!retryable_status(resp->status) || attempt + 1 == h->attempts)
                return 0;
        } else if (!retryable_transport(rc)) {
            break;
        }
    }
    return cfs_err_setc(err, CFS_EIO, "%s %s: %s; %s", req->method, req->url,
                        h->errbuf[0] ? h->errbuf : curl_easy_strerror(rc), transport_advice(rc));
}

char *cfs_http_escape(const char *s, bool keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    char *out = malloc(3 * strlen(s) + 1), *o = out;
    if (!out)
        return NULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '_' || *p == '.' || *p == '~' || (keep_slash && *p == '/')) {
            *o++ = (char)*p;
        } else {
            *o++ = '%';
            *o++ = hex[*p >> 4];
            *o++ = hex[*p & 15];
        }
    }
    *o = '\0';
    return out;
}
