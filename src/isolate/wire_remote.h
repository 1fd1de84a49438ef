/*
 * A reader worker's URL reads (docs/design.md §11): the worker has no network of its own; its
 * reads of a URL (cfs_remote_*, remote.h) are asked of its daemon over the worker's socket, in
 * the middle of the request being served, and the daemon answers them through its own reader
 * of URLs (its block cache) before it waits on for the reply.
 */
#ifndef CFS_WIRE_REMOTE_H
#define CFS_WIRE_REMOTE_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "remote.h"

/* The most bytes one read asks for; a longer read is asked in pieces. */
#define CFS_WIRE_REMOTE_MAX_READ (UINT32_C(16) << 20)

/* The worker's side: this process reads URLs by asking over fd; shapes: the formats' names of
 * URL sources (cfs_url_shapes), which base is handed with the reader. */
void cfs_wire_remote_ask_over(int fd, const cfs_url_shapes *shapes);

/* Whether a frame type is a worker's URL request. */
bool cfs_wire_remote_is_request(uint8_t type);
/* The daemon's side: receives the request's len payload bytes from fd and answers it. Only the
 * URL the worker serves (source), or a key under it when it is a folder URL, is read for it. -1 when the socket fails or the request is
 * malformed (the worker is then lost); a failed read is an answer, not a failure. */
int cfs_wire_remote_answer(int fd, uint8_t type, uint32_t len, const char *source,
                           int64_t deadline, bool *timed_out, cfs_err *err);

#endif
