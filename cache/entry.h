/*
 * One cache entry's file (docs/design.md §2.3): a header of 24 bytes (magic "cfs-ent1", u32 key
 * length, u32 CRC-32 of the payload, u64 payload length; little-endian), the key, the payload.
 * The file says what it holds, so an index row that names the wrong file is found out at the
 * read, and a lost or damaged index is rebuilt from the files.
 */
#ifndef CFS_ENTRY_H
#define CFS_ENTRY_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "error.h"

/* The bytes the file of an entry takes: header, key, payload. */
uint64_t cfs_entry_file_size(size_t key_len, uint64_t payload_len);
/* Creates the file at path (it must not exist) holding key and payload. -1 with errno set (the
 * half-written file removed). */
int cfs_entry_write(const char *path, const void *key, size_t key_len, const cfs_buf *payload);
/* Appends the payload of the entry file open at fd to out, after checking that it is key's,
 * payload_len bytes long and matches its checksum. -1 with err saying what was found instead. */
int cfs_entry_read(int fd, const void *key, size_t key_len, uint64_t payload_len, cfs_buf *out,
                   cfs_err *err);
/* The key (malloc'd) and payload length of the entry file at path, its payload unread: -1 when
 * it is not an entry file or its size is not the one its header implies. */
int cfs_entry_identify(const char *path, void **key, size_t *key_len, uint64_t *payload_len);

#endif
