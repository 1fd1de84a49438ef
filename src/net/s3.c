/* S3 requests: one signed request per call, a failure one line naming the object and what to do. */
#include "s3.h"
#include "digest.h"
#include "strfmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tries per request: transport failures, throttling (503 SlowDown) and 5xx are retried. */
enum { S3_ATTEMPTS = 5 };

struct cfs_s3 {
    const cfs_s3_config *cfg;
    cfs_http *http;
};

void cfs_s3_signing_set(const cfs_s3_config *cfg, const void *body, size_t len,
                        cfs_s3_signing *out)
{
    snprintf(out->sigv4, sizeof out->sigv4, "aws:amz:%s:s3", cfg->region);
    snprintf(out->userpwd, sizeof out->userpwd, "%s:%s", cfg->creds.access_key,
             cfg->creds.secret_key);
    char sha[CFS_SHA256_HEX];
    cfs_sha256_hex(body ? body : "", body ? len : 0, sha);
    snprintf(out->sha_line, sizeof out->sha_line, "x-amz-content-sha256: %s", sha);
    out->token_line[0] = '\0';
    if (cfg->creds.session_token[0])
        snprintf(out->token_line, sizeof out->token_line, "x-amz-security-token: %s",
                 cfg->creds.session_token);
}

cfs_s3 *cfs_s3_new(const cfs_s3_config *cfg, cfs_err *err)
{
    cfs_s3 *s3 = calloc(1, sizeof *s3);
    if (!s3) {
        cfs_err_oom(err);
        return NULL;
    }
    if (!(s3->http = cfs_http_new(S3_ATTEMPTS, cfg->cafile, err))) {
        free(s3);
        return NULL;
    }
    s3->cfg = cfg;
    return s3;
}

void cfs_s3_free(cfs_s3 *s3)
{
    if (!s3)
        return;
    cfs_http_free(s3->http);
    free(s3);
}

/* The text of <tag>...</tag> in an S3 error document, into out ("" if absent). */
static void xml_field(const cfs_buf *body, const char *tag, char *out, size_t cap)
{
    out[0] = '\0';
    char open[64], close[64];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    char *text = strndup(body->data ? (const char *)body->data : "", body->len);
    const char *a = text ? strstr(text, open) : NULL;
    const char *b = a ? strstr(a, close) : NULL;
    if (a && b) {
        a += strlen(open);
        size_t n = (size_t)(b - a) < cap - 1 ? (size_t)(b - a) : cap - 1;
        memcpy(out, a, n);
        out[n] = '\0';
    }
    free(text);
}

static const char *where(const cfs_s3_config *cfg)
{
    return cfg->endpoint[0] ? cfg->endpoint : "AWS";
}

/* An error for an answer other than the one hoped for: what S3 said and what to do. */
static int status_error(const cfs_s3 *s3, const char *method, const char *bucket,
                        const char *key, const cfs_http_response *resp, cfs_err *err)
{
    char code[128], message[256];
    xml_field(&resp->body, "Code", code, sizeof code);
    xml_field(&resp->body, "Message", message, sizeof message);
    const char *at = where(s3->cfg);
    if (resp->status == 404 && (strcmp(code, "NoSuchBucket") == 0 || !key[0]))
        return cfs_err_setc(err, CFS_ENOTFOUND, "s3://%s/ at %s: no such bucket; create it "
                            "first (e.g. aws s3 mb s3://%s)", bucket, at, bucket);
    if (resp->status == 404)
        return cfs_err_setc(err, CFS_ENOTFOUND, "s3://%s/%s at %s: no such object", bucket, key,
                            at);
    if (resp->status == 403 || resp->status == 401)
        return cfs_err_setc(err, CFS_EIO, "%s s3://%s/%s at %s: %ld %s: access denied; check "
                            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or ~/.aws/credentials), "
                            "AWS_REGION and the bucket's policy", method, bucket, key, at,
                            resp->status, code[0] ? code : "Forbidden");
    return cfs_err_setc(err, CFS_EIO, "%s s3://%s/%s at %s: HTTP %ld%s%s%s%s", method, bucket,
                        key, at, resp->status, code[0] ? " " : "", code, message[0] ? ": " : "",
                        message);
}

/* Performs one signed request on bucket/key?query; resp's status is left to the caller. */
static int request(cfs_s3 *s3, const char *method, const char *bucket, const char *key,
                   const char *query, const void *body, size_t len, const char *content_type,
                   uint64_t range_start, uint64_t range_len, cfs_http_response *resp,
                   cfs_err *err)
{
    char *url = cfs_s3_object_url(s3->cfg, bucket, key, query);
    if (!url)
        return cfs_err_oom(err);
    cfs_s3_signing sign;
    cfs_s3_signing_set(s3->cfg, body, len, &sign);
    char type_line[160];
    const char *headers[4] = {sign.sha_line};
    size_t n = 1;
    if (content_type) {
        snprintf(type_line, sizeof type_line, "Content-Type: %s", content_type);
        headers[n++] = type_line;
    }
    if (sign.token_line[0])
        headers[n++] = sign.token_line;
    headers[n] = NULL;
    cfs_http_request req = {
        .method = method, .url = url, .headers = headers, .body = body, .body_len = len,
        .range_start = range_start, .range_len = range_len,
        .aws_sigv4 = sign.sigv4, .userpwd = sign.userpwd,
    };
    int rc = cfs_http_perform(s3->http, &req, resp, err);
    if (rc < 0)
        cfs_err_prefix(err, "s3://%s/%s", bucket, key);
    free(url);
    return rc;
}

int cfs_s3_put(cfs_s3 *s3, const char *bucket, const char *key, const void *data, size_t len,
               const char *content_type, cfs_err *err)
{
    cfs_http_response resp = {0};
    int rc = request(s3, "PUT", bucket, key, NULL, data ? data : "", len,
                     content_type ? content_type : "application/octet-stream", 0, 0, &resp, err);
    if (rc == 0 && resp.status != 200)
        rc = status_error(s3, "PUT", bucket, key, &resp, err);
    if (rc == 0 && resp.etag[0]) {
        /* A single PUT's ETag is the MD5 of what the server stored: a check of the transfer. */
        char md5[CFS_MD5_HEX], quoted[CFS_MD5_HEX + 2];
        cfs_md5_hex(data ? data : "", len, md5);
        snprintf(quoted, sizeof quoted, "\"%s\"", md5);
        if (strcmp(resp.etag, quoted) != 0 && strcmp(resp.etag, md5) != 0)
            rc = cfs_err_setc(err, CFS_EIO, "PUT s3://%s/%s at %s: the server stored other "
                              "bytes than were sent (ETag %s, MD5 %s); try again", bucket, key,
                              where(s3->cfg), resp.etag, md5);
    }
    cfs_http_response_free(&resp);
    return rc;
}

int cfs_s3_get(cfs_s3 *s3, const char *bucket, const char *key, uint64_t range_start,
               uint64_t range_len, cfs_http_response *resp, cfs_err *err)
{
    int rc = request(s3, "GET", bucket, key, NULL, NULL, 0, NULL, range_start, range_len, resp,
                     err);
    if (rc == 0 && resp->status != 200 && resp->status != 206)
        rc = status_error(s3, "GET", bucket, key, resp, err);
    return rc;
}

int cfs_s3_head(cfs_s3 *s3, const char *bucket, const char *key, cfs_http_response *resp,
                cfs_err *err)
{
    int rc = request(s3, "HEAD", bucket, key, NULL, NULL, 0, NULL, 0, 0, resp, err);
    if (rc == 0 && resp->status != 200)
        rc = status_error(s3, "HEAD", bucket, key, resp, err);
    return rc;
}

int cfs_s3_list(cfs_s3 *s3, const char *bucket, const char *prefix, cfs_s3_listing *out,
                cfs_err *err)
{
    memset(out, 0, sizeof *out);
    char *token = NULL, *eprefix = cfs_http_escape(prefix, false);
    cfs_http_response resp = {0};
    int rc = eprefix ? 0 : cfs_err_oom(err);
    bool more = rc == 0;
    while (more) {
        /* Parameters in sorted order, each escaped: the canonical query SigV4 signs. */
        char *etoken = token ? cfs_http_escape(token, false) : NULL;
        char *query = cfs_strdupf("%s%s%sencoding-type=url&list-type=2&prefix=%s",
                                  etoken ? "continuation-token=" : "", etoken ? etoken : "",
                                  etoken ? "&" : "", eprefix);
        free(etoken);
        free(token);
        token = NULL;
        rc = query ? request(s3, "GET", bucket, "", query, NULL, 0, NULL, 0, 0, &resp, err)
                   : cfs_err_oom(err);
        free(query);
        if (rc == 0 && resp.status != 200)
            rc = status_error(s3, "GET", bucket, "", &resp, err);
        if (rc == 0)
            rc = cfs_s3_listing_parse((const char *)resp.body.data, resp.body.len, out, &token,
                                      err);
        if (rc < 0)
            cfs_err_prefix(err, "listing s3://%s/%s", bucket, prefix);
        more = rc == 0 && token;
    }
    free(token);
    free(eprefix);
    cfs_http_response_free(&resp);
    if (rc == 0)
        cfs_s3_listing_sort(out);
    else
        cfs_s3_listing_free(out);
    return rc;
}
