/*
 * HTTP(S) requests through libcurl, for the object-storage sink and remote sources: one
 * connection-keeping handle per thread, retries with backoff, errors as one line naming the URL.
 */
#ifndef CFS_HTTP_H
#define CFS_HTTP_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "error.h"

typedef struct cfs_http_request {
    const char *method;            /* "GET", "PUT", "HEAD", "DELETE" */
    const char *url;
    const char *const *headers;    /* "Name: value" lines, NULL-terminated; may be NULL */
    const void *body;              /* sent as is (PUT, POST); NULL: none */
    size_t body_len;
    uint64_t range_start;          /* with range_len > 0: Range: bytes=start-(start+len-1) */
    uint64_t range_len;
    /* SigV4 signing by libcurl (CURLOPT_AWS_SIGV4, e.g. "aws:amz:us-east-1:s3") with userpwd
     * "ACCESS:SECRET"; NULL: unsigned. */
    const char *aws_sigv4;
    const char *userpwd;
} cfs_http_request;

typedef struct cfs_http_response {
    long status;                   /* the last attempt's HTTP status */
    cfs_buf body;                  /* owned: cfs_http_response_free */
    char etag[128];                /* as sent, quotes included; "" if none */
    char last_modified[64];
    int64_t content_length;        /* -1 if not sent */
} cfs_http_response;

typedef struct cfs_http cfs_http;

/* A handle for one thread at a time; attempts = tries per request (transport failures, 429 and
 * 5xx are retried with a doubling backoff from 0.25 s); cafile (NULL or "": the system's) the
 * CA bundle https servers are checked with (-o remote_cafile, as range.c's). */
cfs_http *cfs_http_new(int attempts, const char *cafile, cfs_err *err);
void cfs_http_free(cfs_http *h);

/*
 * Performs req. 0 when an HTTP answer came (any status: the caller judges it; 5xx only once the
 * attempts are used up), -1 with err ("METHOD URL: what happened; what to do") when none did:
 * unreachable host, TLS failure, timeout.
 */
int cfs_http_perform(cfs_http *h, const cfs_http_request *req, cfs_http_response *resp,
                     cfs_err *err);
void cfs_http_response_free(cfs_http_response *resp);

/* Percent-encodes s: every byte but A-Z a-z 0-9 - _ . ~ (and '/' if keep_slash: a path).
 * NULL: no memory. */
char *cfs_http_escape(const char *s, bool keep_slash);

#endif
