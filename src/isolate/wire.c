#include "wire.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t cfs_wire_deadline(double seconds)
{
    return seconds > 0 ? now_ms() + (int64_t)(seconds * 1000) : -1;
}

/* Waits until fd is ready for events; 0, or -1 with *timed_out set past the deadline. */
static int wait_ready(int fd, short events, int64_t deadline, bool *timed_out, cfs_err *err)
{
    for (;;) {
        int ms = -1;
        if (deadline >= 0) {
            int64_t left = deadline - now_ms();
            if (left <= 0) {
                *timed_out = true;
                return cfs_err_setc(err, CFS_EIO, "no answer within the time limit");
            }
            ms = left > 1000000 ? 1000000 : (int)left;
        }
        struct pollfd p = {fd, events, 0};
        int n = poll(&p, 1, ms);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return cfs_err_errno(err, errno, "waiting for the reader");
    }
}

/* Sends the header and the payload in one call: a round trip with a worker costs the daemon a
 * system call less per frame (thousands of small sources each make a few). */
static int send_all(int fd, struct iovec *iov, int niov, int64_t deadline, cfs_err *err)
{
    bool timed_out = false;
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
    while (msg.msg_iovlen > 0) {
        ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            while (msg.msg_iovlen > 0 && (size_t)n >= msg.msg_iov->iov_len) {
                n -= (ssize_t)msg.msg_iov->iov_len;
                msg.msg_iov++;
                msg.msg_iovlen--;
            }
            if (msg.msg_iovlen > 0) {
                msg.msg_iov->iov_base = (char *)msg.msg_iov->iov_base + n;
                msg.msg_iov->iov_len -= (size_t)n;
            }
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_ready(fd, POLLOUT, deadline, &timed_out, err) < 0)
                return -1;
        } else if (n < 0 && errno != EINTR) {
            return cfs_err_errno(err, errno, "writing to the reader");
        }
    }
    return 0;
}

int cfs_wire_send(int fd, cfs_wire_type type, const void *payload, size_t len, int64_t deadline,
                  cfs_err *err)
{
    if (len >= CFS_WIRE_MAX_FRAME)
        return cfs_err_setc(err, CFS_EIO, "a frame of %zu bytes is over the limit", len);
    unsigned char head[5];
    uint32_t n = (uint32_t)len + 1;
    for (int i = 0; i < 4; i++)
        head[i] = (unsigned char)(n >> (8 * i));
    head[4] = (unsigned char)type;
    struct iovec iov[2] = {{head, sizeof head}, {(void *)payload, len}};
    return send_all(fd, iov, len ? 2 : 1, deadline, err);
}

int cfs_wire_recv_exact(int fd, void *dst, size_t len, int64_t deadline, bool *timed_out,
                        cfs_err *err)
{
    char *p = dst;
    /* What has arrived is taken before waiting: a frame's payload mostly follows its header
     * in the same segment, and a poll before each recv cost a system call for nothing. */
    while (len > 0) {
        ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n == 0) {
            return cfs_err_setc(err, CFS_EIO, "the reader closed its end");
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (wait_ready(fd, POLLIN, deadline, timed_out, err) < 0)
                return -1;
        } else if (errno != EINTR) {
            return cfs_err_errno(err, errno, "reading from the reader");
        }
    }
    return 0;
}

int cfs_wire_recv_header(int fd, uint8_t *type, uint32_t *len, uint32_t max, int64_t deadline,
                         bool *timed_out, cfs_err *err)
{
    unsigned char head[5];
    if (cfs_wire_recv_exact(fd, head, sizeof head, deadline, timed_out, err) < 0)
        return -1;
    uint32_t n = 0;
    for (int i = 0; i < 4; i++)
        n |= (uint32_t)head[i] << (8 * i);
    if (n == 0 || n - 1 > max || n - 1 >= CFS_WIRE_MAX_FRAME)
        return cfs_err_setc(err, CFS_EIO, "a malformed frame (length %u, at most %u allowed)",
                            n, max);
    *type = head[4];
    *len = n - 1;
    return 0;
}

int cfs_wire_put_u8(cfs_buf *b, uint8_t v)
{
    return cfs_buf_append(b, &v, 1);
}

int cfs_wire_put_u32(cfs_buf *b, uint32_t v)
{
    return cfs_buf_append_u32le(b, v);
}

int cfs_wire_put_u64(cfs_buf *b, uint64_t v)
{
    return cfs_buf_append_u32le(b, (uint32_t)v) | cfs_buf_append_u32le(b, (uint32_t)(v >> 32));
}

int cfs_wire_put_str(cfs_buf *b, const char *s)
{
    if (!s)
        return cfs_wire_put_u32(b, UINT32_MAX);
    size_t n = strlen(s);
    if (n >= CFS_WIRE_MAX_STRING)
        n = CFS_WIRE_MAX_STRING - 1;     /* cut: a name or a reason, never data */
    return cfs_wire_put_u32(b, (uint32_t)n) | cfs_buf_append(b, s, n);
}

const unsigned char *cfs_wire_get_bytes(cfs_wire_cursor *c, size_t n)
{
    if (c->bad || n > c->left) {
        c->bad = true;
        return NULL;
    }
    const unsigned char *p = c->p;
    c->p += n;
    c->left -= n;
    return p;
}

uint8_t cfs_wire_get_u8(cfs_wire_cursor *c)
{
    const unsigned char *p = cfs_wire_get_bytes(c, 1);
    return p ? p[0] : 0;
}

uint32_t cfs_wire_get_u32(cfs_wire_cursor *c)
{
    const unsigned char *p = cfs_wire_get_bytes(c, 4);
    uint32_t v = 0;
    for (int i = 0; p && i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

uint64_t cfs_wire_get_u64(cfs_wire_cursor *c)
{
    uint64_t lo = cfs_wire_get_u32(c);
    return lo | (uint64_t)cfs_wire_get_u32(c) << 32;
}

bool cfs_wire_get_optstr(cfs_wire_cursor *c, uint32_t max, char **s)
{
    *s = NULL;
    uint32_t n = cfs_wire_get_u32(c);
    if (c->bad || n == UINT32_MAX)
        return !c->bad;
    const unsigned char *p = n <= max ? cfs_wire_get_bytes(c, n) : NULL;
    if (!p || memchr(p, '\0', n) || !(*s = malloc((size_t)n + 1))) {
        c->bad = true;
        return false;
    }
    memcpy(*s, p, n);
    (*s)[n] = '\0';
    return true;
}

char *cfs_wire_get_str(cfs_wire_cursor *c, uint32_t max)
{
    char *s = NULL;
    if (cfs_wire_get_optstr(c, max, &s) && !s)
        c->bad = true;
    return s;
}
