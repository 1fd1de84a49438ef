/*
 * The reader worker's protocol (docs/design.md §2.4): frames over a stream socket, each a
 * little-endian u32 length, a u8 type and length-1 payload bytes, and the primitive values their
 * payloads are made of. Neither side trusts the other's bytes: every length is checked against
 * the frame and against a limit before anything is allocated or copied.
 */
#ifndef CFS_WIRE_H
#define CFS_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "error.h"

typedef enum cfs_wire_type {
    CFS_WIRE_OPEN = 1,      /* daemon: str path [, str part] */
    CFS_WIRE_MODEL = 2,     /* worker: u32 status, then the model (wire_model.h) or str reason */
    CFS_WIRE_READ = 3,      /* daemon: u32 array id, u8 ndim, u64 start[ndim], u64 count[ndim] */
    CFS_WIRE_DATA = 4,      /* worker: u32 status, then the values or str reason */
    CFS_WIRE_READ_ROWS = 5, /* daemon: u32 array id, u64 n, u64 rows[n] (ascending): whole rows */
    CFS_WIRE_DETECT = 6,    /* daemon: str path (is it an input? detect.h) */
    CFS_WIRE_DETECTED = 7,  /* worker: optstr format name, u8 a compressed copy of an input */
    /* A worker reading a URL asks its daemon (wire_remote.h), between a request and its reply: */
    CFS_WIRE_REMOTE_INFO = 8,   /* worker: str url */
    CFS_WIRE_REMOTE_READ = 9,   /* worker: str url, str version, u64 size, u64 mtime, u64 off,
                                 * u32 len */
    CFS_WIRE_REMOTE_ANSWER = 10, /* daemon: u32 status, then u64 size, u64 mtime, str version
                                  * (info) or the len bytes (read), or str reason */
} cfs_wire_type;

/* Frames larger than this are refused by both sides (a read reply of numeric values is at most
 * its slab: the daemon checks it is exactly that). */
#define CFS_WIRE_MAX_FRAME (UINT32_C(1) << 31)
/* A control frame (open, read request, a reason) is at most this. */
#define CFS_WIRE_MAX_CONTROL (UINT32_C(1) << 16)
/* Rows in one row read: its request is at most 8 bytes a row more than a control frame. */
#define CFS_WIRE_MAX_ROWS UINT32_C(65536)
#define CFS_WIRE_MAX_REQUEST (CFS_WIRE_MAX_CONTROL + 8 * CFS_WIRE_MAX_ROWS)
/* One string inside a payload. */
#define CFS_WIRE_MAX_STRING (UINT32_C(1) << 24)

/* Deadline in milliseconds of CLOCK_MONOTONIC, or -1 for none. */
int64_t cfs_wire_deadline(double seconds);

/* Sends a frame of type with payload (len bytes); -1 with err on failure or past the deadline
 * (status CFS_EIO; errno-style reason). */
int cfs_wire_send(int fd, cfs_wire_type type, const void *payload, size_t len, int64_t deadline,
                  cfs_err *err);
/* Receives a frame header: its type and payload length (<= max). 0 on success; -1 with err on
 * end of stream, a frame over max, or past the deadline (*timed_out set). */
int cfs_wire_recv_header(int fd, uint8_t *type, uint32_t *len, uint32_t max, int64_t deadline,
                         bool *timed_out, cfs_err *err);
/* Receives exactly len payload bytes into dst. */
int cfs_wire_recv_exact(int fd, void *dst, size_t len, int64_t deadline, bool *timed_out,
                        cfs_err *err);

/* Payload building (cfs_buf; -1 only when out of memory). */
int cfs_wire_put_u8(cfs_buf *b, uint8_t v);
int cfs_wire_put_u32(cfs_buf *b, uint32_t v);
int cfs_wire_put_u64(cfs_buf *b, uint64_t v);
/* u32 length then the bytes; NULL is written as length 0xffffffff (cfs_wire_get_optstr). */
int cfs_wire_put_str(cfs_buf *b, const char *s);

/* Payload reading: a cursor over bytes received, which fails (and stays failed) at the first
 * value that does not fit in what is left or breaks a limit. */
typedef struct cfs_wire_cursor {
    const unsigned char *p;
    size_t left;
    bool bad;
} cfs_wire_cursor;

uint8_t cfs_wire_get_u8(cfs_wire_cursor *c);
uint32_t cfs_wire_get_u32(cfs_wire_cursor *c);
uint64_t cfs_wire_get_u64(cfs_wire_cursor *c);
/* A malloc'd NUL-terminated copy of a string of at most max bytes without NUL inside; NULL (and
 * the cursor bad) if it does not fit, or on allocation failure. */
char *cfs_wire_get_str(cfs_wire_cursor *c, uint32_t max);
/* The same, where NULL was written: *s is NULL then; false when the cursor went bad. */
bool cfs_wire_get_optstr(cfs_wire_cursor *c, uint32_t max, char **s);
/* Points at the next n bytes and skips them; NULL (cursor bad) if fewer are left. */
const unsigned char *cfs_wire_get_bytes(cfs_wire_cursor *c, size_t n);

#endif
