/*
 * Amazon S3 and S3-compatible object storage (Ceph RADOS Gateway, MinIO, ...): s3:// URLs,
 * where to send a request and with which credentials, and the requests themselves, signed with
 * SigV4 by libcurl.
 */
#ifndef CFS_S3_H
#define CFS_S3_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "http.h"

/* Whether s is an s3:// URL. */
bool cfs_s3_is_url(const char *s);
/* Splits "s3://bucket/key" into malloc'd bucket and key (key may be ""); a missing or invalid
 * bucket name is an error naming the URL. */
int cfs_s3_url_parse(const char *url, char **bucket, char **key, cfs_err *err);

typedef struct cfs_s3_creds {
    char access_key[256];
    char secret_key[256];
    char session_token[4096];       /* "" if none */
} cfs_s3_creds;

/* Reads profile's keys (aws_access_key_id, aws_secret_access_key, aws_session_token) from the
 * text of an AWS credentials file (INI). CFS_ENOTFOUND if the profile or its keys are absent. */
int cfs_s3_creds_parse(const char *text, const char *profile, cfs_s3_creds *creds, cfs_err *err);

typedef struct cfs_s3_config {
    char endpoint[1024];            /* "scheme://host[:port]" with path-style addressing; "" AWS */
    char region[64];
    cfs_s3_creds creds;
    char cafile[4096];              /* a CA bundle (PEM) for an https endpoint; "" the system's */
} cfs_s3_config;

/*
 * The configuration of the environment (cafile left "": the caller's option): endpoint (NULL or "": AWS's, virtual-hosted), region
 * from AWS_REGION / AWS_DEFAULT_REGION (else us-east-1), credentials from AWS_ACCESS_KEY_ID /
 * AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, else the AWS_PROFILE (else "default") profile of
 * AWS_SHARED_CREDENTIALS_FILE (else ~/.aws/credentials).
 */
int cfs_s3_config_load(cfs_s3_config *cfg, const char *endpoint, cfs_err *err);

/* The https URL of bucket/key (key "" for the bucket itself), the key percent-encoded, query
 * (may be NULL) appended after '?'. NULL: no memory. */
char *cfs_s3_object_url(const cfs_s3_config *cfg, const char *bucket, const char *key,
                        const char *query);

/* What a signed request needs besides its URL: libcurl's SigV4 parameters (CURLOPT_AWS_SIGV4,
 * CURLOPT_USERPWD) and the headers S3 wants with them (libcurl 7.88 signs the payload's SHA-256
 * but does not send it; S3 and radosgw need it as x-amz-content-sha256; a session's token). */
typedef struct cfs_s3_signing {
    char sigv4[128];
    char userpwd[520];
    char sha_line[100];
    char token_line[4200];          /* "" if no session token */
} cfs_s3_signing;
/* The signing of a request on cfg carrying body (NULL: none) of len bytes. */
void cfs_s3_signing_set(const cfs_s3_config *cfg, const void *body, size_t len,
                        cfs_s3_signing *out);

/* A client for one thread at a time: the configuration (not copied, must outlive it) and a
 * connection. */
typedef struct cfs_s3 cfs_s3;
cfs_s3 *cfs_s3_new(const cfs_s3_config *cfg, cfs_err *err);
void cfs_s3_free(cfs_s3 *s3);

/* Stores data as bucket/key. content_type NULL: application/octet-stream. */
int cfs_s3_put(cfs_s3 *s3, const char *bucket, const char *key, const void *data, size_t len,
               const char *content_type, cfs_err *err);
/* Reads bucket/key (range_len 0: whole; else that many bytes from range_start) into resp;
 * anything but 200/206 is an error (CFS_ENOTFOUND for a missing object or bucket). */
int cfs_s3_get(cfs_s3 *s3, const char *bucket, const char *key, uint64_t range_start,
               uint64_t range_len, cfs_http_response *resp, cfs_err *err);
/* Size, ETag and Last-Modified of bucket/key into resp (no body). */
int cfs_s3_head(cfs_s3 *s3, const char *bucket, const char *key, cfs_http_response *resp,
                cfs_err *err);

typedef struct cfs_s3_object {
    char *key;
    uint64_t size;
    char etag[80];                  /* without quotes */
} cfs_s3_object;

typedef struct cfs_s3_listing {
    cfs_s3_object *items;           /* sorted by key (strcmp) */
    size_t n;
} cfs_s3_listing;

/* Every object of bucket whose key starts with prefix (ListObjectsV2, all pages). */
int cfs_s3_list(cfs_s3 *s3, const char *bucket, const char *prefix, cfs_s3_listing *out,
                cfs_err *err);
/* Appends the objects of one ListObjectsV2 page (an XML document of len bytes) to out; *next
 * is the malloc'd continuation token when the listing goes on, else NULL. */
int cfs_s3_listing_parse(const char *xml, size_t len, cfs_s3_listing *out, char **next,
                         cfs_err *err);
/* Sorts out by key. */
void cfs_s3_listing_sort(cfs_s3_listing *out);
/* The object of listing (sorted) with this key, or NULL. */
const cfs_s3_object *cfs_s3_listing_find(const cfs_s3_listing *l, const char *key);
void cfs_s3_listing_free(cfs_s3_listing *l);

#endif
