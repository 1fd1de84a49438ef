#include "entry.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

enum { HEADER = 24, KEY_MAX = 1 << 16 };
static const char MAGIC[8] = {'c', 'f', 's', '-', 'e', 'n', 't', '1'};

typedef struct header {
    uint32_t key_len, crc;
    uint64_t payload_len;
} header;

static void put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void encode(const header *h, unsigned char out[HEADER])
{
    memcpy(out, MAGIC, sizeof MAGIC);
    put_le(out + 8, h->key_len, 4);
    put_le(out + 12, h->crc, 4);
    put_le(out + 16, h->payload_len, 8);
}

static int decode(const unsigned char in[HEADER], header *h)
{
    if (memcmp(in, MAGIC, sizeof MAGIC) != 0)
        return -1;
    h->key_len = (uint32_t)get_le(in + 8, 4);
    h->crc = (uint32_t)get_le(in + 12, 4);
    h->payload_len = get_le(in + 16, 8);
    return h->key_len <= KEY_MAX ? 0 : -1;
}

static uint32_t checksum(const void *data, size_t len)
{
    return (uint32_t)crc32_z(crc32_z(0, Z_NULL, 0), data, len);
}

uint64_t cfs_entry_file_size(size_t key_len, uint64_t payload_len)
{
    return HEADER + (uint64_t)key_len + payload_len;
}

static int write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0) {
            errno = ENOSPC;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int cfs_entry_write(const char *path, const void *key, size_t key_len, const cfs_buf *payload)
{
    if (key_len > KEY_MAX) {
        errno = ENAMETOOLONG;
        return -1;
    }
    header h = {(uint32_t)key_len, checksum(payload->data, payload->len), payload->len};
    unsigned char head[HEADER];
    encode(&h, head);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    int rc = write_all(fd, head, HEADER) == 0 && write_all(fd, key, key_len) == 0 &&
                     write_all(fd, payload->data, payload->len) == 0
                 ? 0
                 : -1;
    int e = errno;
    if (close(fd) < 0 && rc == 0) {
        rc = -1;
        e = errno;
    }
    if (rc < 0) {
        unlink(path);
        errno = e;
    }
    return rc;
}

static int read_at(int fd, void *buf, size_t len, uint64_t off)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = pread(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = 0;
            return -1;
        }
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

/* The header and key of the file at fd: -1 with errno (0: not an entry file, or too short). */
static int read_head(int fd, header *h, void **key)
{
    unsigned char head[HEADER];
    if (read_at(fd, head, HEADER, 0) < 0)
        return -1;
    if (decode(head, h) < 0) {
        errno = 0;
        return -1;
    }
    if (!(*key = malloc(h->key_len ? h->key_len : 1)))
        return -1;
    if (read_at(fd, *key, h->key_len, HEADER) < 0) {
        free(*key);
        *key = NULL;
        return -1;
    }
    return 0;
}

static const char *why(int e)
{
    return e ? strerror(e) : "it is cut short or not an entry file";
}

int cfs_entry_read(int fd, const void *key, size_t key_len, uint64_t payload_len, cfs_buf *out,
                   cfs_err *err)
{
    header h;
    void *own = NULL;
    if (read_head(fd, &h, &own) < 0)
        return cfs_err_setc(err, CFS_EIO, "cannot be read: %s", why(errno));
    bool mine = h.key_len == key_len && memcmp(own, key, key_len) == 0;
    free(own);
    if (!mine)
        return cfs_err_setc(err, CFS_EDAMAGED, "holds another key than its index row");
    if (h.payload_len != payload_len)
        return cfs_err_setc(err, CFS_EDAMAGED, "holds %llu bytes, its index row says %llu",
                            (unsigned long long)h.payload_len, (unsigned long long)payload_len);
    if (cfs_buf_reserve(out, (size_t)payload_len) < 0)
        return cfs_err_oom(err);
    if (read_at(fd, out->data + out->len, (size_t)payload_len, HEADER + key_len) < 0)
        return cfs_err_setc(err, CFS_EIO, "cannot be read: %s", why(errno));
    if (checksum(out->data + out->len, (size_t)payload_len) != h.crc)
        return cfs_err_setc(err, CFS_EDAMAGED, "its bytes do not match their checksum");
    out->len += (size_t)payload_len;
    return 0;
}

int cfs_entry_identify(const char *path, void **key, size_t *key_len, uint64_t *payload_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -1;
    header h;
    struct stat sb;
    int rc = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && read_head(fd, &h, key) == 0 ? 0 : -1;
    close(fd);
    if (rc < 0)
        return -1;
    if ((uint64_t)sb.st_size != cfs_entry_file_size(h.key_len, h.payload_len)) {
        free(*key);
        *key = NULL;
        return -1;
    }
    *key_len = h.key_len;
    *payload_len = h.payload_len;
    return 0;
}
