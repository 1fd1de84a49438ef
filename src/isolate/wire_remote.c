#include "wire_remote.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "remote.h"
#include "wire.h"

static pthread_mutex_t ask_lock = PTHREAD_MUTEX_INITIALIZER;

/* Sends a request and receives the answer's status (and reason) into err; *len the rest. */
static int ask(int fd, cfs_wire_type type, const cfs_buf *req, uint32_t *len, cfs_err *err)
{
    bool timed_out = false;
    uint8_t rtype = 0;
    unsigned char head[4];
    if (cfs_wire_send(fd, type, req->data, req->len, -1, err) < 0 ||
        cfs_wire_recv_header(fd, &rtype, len, CFS_WIRE_MAX_FRAME - 1, -1, &timed_out, err) < 0)
        return -1;
    if (rtype != CFS_WIRE_REMOTE_ANSWER || *len < 4 ||
        cfs_wire_recv_exact(fd, head, 4, -1, &timed_out, err) < 0)
        return cfs_err_setc(err, CFS_EIO, "the daemon's answer to a URL read was malformed");
    *len -= 4;
    cfs_wire_cursor c = {head, 4, false};
    uint32_t status = cfs_wire_get_u32(&c);
    if (status == CFS_OK)
        return 0;
    char msg[CFS_WIRE_MAX_CONTROL];
    if (*len >= sizeof msg || cfs_wire_recv_exact(fd, msg, *len, -1, &timed_out, err) < 0)
        return cfs_err_setc(err, CFS_EIO, "the daemon's answer to a URL read was malformed");
    cfs_wire_cursor m = {(unsigned char *)msg, *len, false};
    char *text = cfs_wire_get_str(&m, CFS_WIRE_MAX_CONTROL);
    cfs_err_setc(err, status <= CFS_ENEVERFITS ? (cfs_status)status : CFS_EIO, "%s",
                 text ? text : "a URL read failed");
    free(text);
    return -1;
}

static int ask_info(void *ctx, const char *url, cfs_remote_info *out, cfs_err *err)
{
    int fd = *(int *)ctx;
    cfs_buf req = {0};
    uint32_t len = 0;
    if (cfs_wire_put_str(&req, url) < 0)
        return cfs_err_oom(err);
    pthread_mutex_lock(&ask_lock);
    int rc = ask(fd, CFS_WIRE_REMOTE_INFO, &req, &len, err);
    unsigned char body[16 + 4 + sizeof out->version];
    bool timed_out = false;
    if (rc == 0 && (len > sizeof body || cfs_wire_recv_exact(fd, body, len, -1, &timed_out,
                                                             err) < 0))
        rc = cfs_err_setc(err, CFS_EIO, "the daemon's answer to a URL read was malformed");
    pthread_mutex_unlock(&ask_lock);
    cfs_buf_free(&req);
    if (rc < 0)
        return -1;
    cfs_wire_cursor c = {body, len, false};
    memset(out, 0, sizeof *out);
    out->size = cfs_wire_get_u64(&c);
    out->mtime = (int64_t)cfs_wire_get_u64(&c);
    char *version = cfs_wire_get_str(&c, sizeof out->version - 1);
    if (!version || c.left) {
        free(version);
        return cfs_err_setc(err, CFS_EIO, "the daemon's answer to a URL read was malformed");
    }
    strcpy(out->version, version);
    free(version);
    return 0;
}

static int ask_read_piece(int fd, const char *url, const cfs_remote_info *v, uint64_t off,
                          void *buf, uint32_t n, cfs_err *err)
{
    cfs_buf req = {0};
    if ((cfs_wire_put_str(&req, url) | cfs_wire_put_str(&req, v->version) |
         cfs_wire_put_u64(&req, v->size) | cfs_wire_put_u64(&req, (uint64_t)v->mtime) |
         cfs_wire_put_u64(&req, off) | cfs_wire_put_u32(&req, n)) < 0)
        return cfs_buf_free(&req), cfs_err_oom(err);
    uint32_t len = 0;
    bool timed_out = false;
    pthread_mutex_lock(&ask_lock);
    int rc = ask(fd, CFS_WIRE_REMOTE_READ, &req, &len, err);
    if (rc == 0 && (len != n || cfs_wire_recv_exact(fd, buf, n, -1, &timed_out, err) < 0))
        rc = cfs_err_setc(err, CFS_EIO, "the daemon's answer to a URL read was malformed");
    pthread_mutex_unlock(&ask_lock);
    cfs_buf_free(&req);
    return rc;
}

static int ask_read(void *ctx, const char *url, const cfs_remote_info *v, uint64_t off, void *buf,
                    size_t len, cfs_err *err)
{
    int fd = *(int *)ctx;
    for (size_t done = 0; done < len;) {
        uint32_t n = len - done < CFS_WIRE_REMOTE_MAX_READ ? (uint32_t)(len - done)
                                                           : CFS_WIRE_REMOTE_MAX_READ;
        if (ask_read_piece(fd, url, v, off + done, (char *)buf + done, n, err) < 0)
            return -1;
        done += n;
    }
    return 0;
}

void cfs_wire_remote_ask_over(int fd, const cfs_url_shapes *shapes)
{
    static int asked_fd;
    asked_fd = fd;
    /* fetches: the daemon's */
    cfs_remote_ops ops = {ask_info, ask_read, &asked_fd, NULL, shapes};
    cfs_remote_set_ops(&ops);
}

bool cfs_wire_remote_is_request(uint8_t type)
{
    return type == CFS_WIRE_REMOTE_INFO || type == CFS_WIRE_REMOTE_READ;
}

static int send_error(int fd, const cfs_err *e, int64_t deadline, cfs_err *err)
{
    cfs_buf b = {0};
    int rc = cfs_wire_put_u32(&b, e->status ? (uint32_t)e->status : CFS_EFAIL) |
             cfs_wire_put_str(&b, e->msg);
    rc = rc == 0 ? cfs_wire_send(fd, CFS_WIRE_REMOTE_ANSWER, b.data, b.len, deadline, err)
                 : cfs_err_oom(err);
    cfs_buf_free(&b);
    return rc;
}

static int answer_info(int fd, const char *url, int64_t deadline, cfs_err *err)
{
    cfs_remote_info info;
    cfs_err why = {0};
    if (cfs_remote_info_of(url, &info, &why) < 0)
        return send_error(fd, &why, deadline, err);
    cfs_buf b = {0};
    int rc = (cfs_wire_put_u32(&b, CFS_OK) | cfs_wire_put_u64(&b, info.size) |
              cfs_wire_put_u64(&b, (uint64_t)info.mtime) | cfs_wire_put_str(&b, info.version))
                 ? cfs_err_oom(err)
                 : cfs_wire_send(fd, CFS_WIRE_REMOTE_ANSWER, b.data, b.len, deadline, err);
    cfs_buf_free(&b);
    return rc;
}

static int answer_read(int fd, const char *url, cfs_wire_cursor *c, int64_t deadline,
                       cfs_err *err)
{
    cfs_remote_info v = {0};
    char *version = cfs_wire_get_str(c, sizeof v.version - 1);
    v.size = cfs_wire_get_u64(c);
    v.mtime = (int64_t)cfs_wire_get_u64(c);
    uint64_t off = cfs_wire_get_u64(c);
    uint32_t n = cfs_wire_get_u32(c);
    if (!version || c->bad || c->left || n > CFS_WIRE_REMOTE_MAX_READ) {
        free(version);
        return cfs_err_setc(err, CFS_EIO, "a malformed URL read request");
    }
    strcpy(v.version, version);
    free(version);
    cfs_buf b = {0};
    cfs_err why = {0};
    if (cfs_buf_reserve(&b, 4 + (size_t)n) < 0)
        return cfs_err_oom(err);
    cfs_wire_put_u32(&b, CFS_OK);
    int rc = cfs_remote_read(url, &v, off, b.data + 4, n, &why) < 0
                 ? send_error(fd, &why, deadline, err)
                 : cfs_wire_send(fd, CFS_WIRE_REMOTE_ANSWER, b.data, 4 + (size_t)n, deadline,
                                 err);
    cfs_buf_free(&b);
    return rc;
}

int cfs_wire_remote_answer(int fd, uint8_t type, uint32_t len, const char *source,
                           int64_t deadline, bool *timed_out, cfs_err *err)
{
    if (len > CFS_WIRE_MAX_CONTROL)
        return cfs_err_setc(err, CFS_EIO, "a URL request over the limit");
    unsigned char payload[CFS_WIRE_MAX_CONTROL];
    if (cfs_wire_recv_exact(fd, payload, len, deadline, timed_out, err) < 0)
        return -1;
    cfs_wire_cursor c = {payload, len, false};
    char *url = cfs_wire_get_str(&c, CFS_WIRE_MAX_CONTROL);
    int rc;
    if (!url || c.bad)
        rc = cfs_err_setc(err, CFS_EIO, "a malformed URL request");
    else if (!source || !cfs_url_within(url, source))
        rc = cfs_err_setc(err, CFS_EIO, "a URL request for %s, which is not its source", url);
    else if (type == CFS_WIRE_REMOTE_INFO)
        rc = c.left ? cfs_err_setc(err, CFS_EIO, "a malformed URL request")
                    : answer_info(fd, url, deadline, err);
    else
        rc = answer_read(fd, url, &c, deadline, err);
    free(url);
    return rc;
}
