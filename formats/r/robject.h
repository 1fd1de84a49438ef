/*
 * R objects read from a serialization stream (rstream.h; input-formats.md §8.4-8.12): a tree of
 * r_obj nodes -- a graph, really: symbols, environments and external pointers are shared
 * through the stream's reference table, and an environment may contain itself -- owned by one
 * r_file and freed with it.
 *
 * What each type keeps:
 *   vectors (LGL, INT, REAL, CPLX, RAW)  their values in host order (LGL and INT as int32, NA
 *       = INT32_MIN; REAL with NA as R's NaN of payload 1954; CPLX as re, im pairs), or, when
 *       longer than the sink threshold, nothing: the values went to the sink (`sunk`, `sink_id`).
 *   STR  its strings as r_str: UTF-8 (Latin-1 and the writer's native encoding transcoded),
 *       bytes-encoded strings as their bytes, NA_character_ as s == NULL.
 *   VEC (list), EXPR  their elements.
 *   LIST (pairlist), LANG (call), DOT, CLO, PROM  cons cells: car, cdr, tag (a closure's car
 *       is its formals, cdr its body, tag its environment; a promise's car its value, cdr its
 *       expression, tag its environment).
 *   SYM  its name (UTF-8). CHAR a lone string (rare outside vectors). SPECIAL/BUILTIN their name.
 *   ENV  its kind (a plain environment, or global, base, empty, namespace:base, a namespace or
 *       package by its name strings), its enclosure, frame (a tagged pairlist) and hash table (a
 *       list of such pairlists); r_env_get looks a name up in both.
 *   S4  nothing but its attributes, which are its slots.
 *   BCODE  nothing: byte code is parsed (its symbols enter the reference table) and discarded.
 *   EXTPTR, WEAKREF  nothing (an external pointer's protected value and tag are read and
 *       dropped).
 * ALTREP objects are reconstructed as the ordinary vectors they stand for: compact_intseq and
 * compact_realseq (1:n, seq_len), deferred_string (as.character of numbers, formatted as R
 * does), wrap_* (the wrapped vector); an ALTREP class of a package is refused by name.
 *
 * Memory is bounded by design: a vector longer than opts.sink_threshold elements is not kept
 * but handed to the sink in chunks as it is read (formats/r/rvectors.h's store leaves it in the
 * file when the file is a plain binary one, and reads it there later); with no sink, every
 * vector is kept. Lengths are checked against the bytes left where they are
 * known (uncompressed files), and storage grows only as values actually arrive, so a damaged
 * length costs no more memory than the stream holds. Nesting is limited to opts.max_depth.
 */
#ifndef CFS_ROBJECT_H
#define CFS_ROBJECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "rstream.h"

typedef enum r_type {
    R_NIL = 0, R_SYM = 1, R_LIST = 2, R_CLO = 3, R_ENV = 4, R_PROM = 5, R_LANG = 6,
    R_SPECIAL = 7, R_BUILTIN = 8, R_CHAR = 9, R_LGL = 10, R_INT = 13, R_REAL = 14,
    R_CPLX = 15, R_STR = 16, R_DOT = 17, R_VEC = 19, R_EXPR = 20, R_BCODE = 21,
    R_EXTPTR = 22, R_WEAKREF = 23, R_RAW = 24, R_S4 = 25,
    R_MISSINGARG = 251,  /* the empty argument (a formal without default) */
    R_UNBOUND = 252      /* the unbound-value marker */
} r_type;

typedef enum r_env_kind {
    R_ENV_PLAIN, R_ENV_GLOBAL, R_ENV_BASE, R_ENV_EMPTY, R_ENV_BASENAMESPACE,
    R_ENV_NAMESPACE, R_ENV_PACKAGE, R_ENV_PERSIST
} r_env_kind;

/* A CHARSXP's declared encoding. */
typedef enum r_enc { R_ENC_NATIVE, R_ENC_UTF8, R_ENC_LATIN1, R_ENC_BYTES, R_ENC_ASCII } r_enc;

#define R_NA_INT INT32_MIN
#define R_NA_LGL INT32_MIN

/* One string of a STR vector: NUL-terminated, len bytes (which may hold a NUL); NULL = NA. */
typedef struct r_str {
    char *s;
    uint32_t len;
    uint8_t enc; /* r_enc as declared; s is UTF-8 unless it is R_ENC_BYTES */
} r_str;

typedef struct r_obj r_obj;
struct r_obj {
    uint8_t type;          /* r_type */
    bool object;           /* the object bit (a class attribute) */
    bool s4;               /* the S4 bit (gp bit 4) */
    bool sunk;             /* a vector whose values went to the sink */
    uint16_t gp;           /* the 16 "levels" bits as written */
    r_obj *attr;           /* a tagged pairlist, or NULL */
    uint64_t length;       /* vectors: elements; STR/VEC/EXPR: items */
    uint64_t sink_id;      /* sunk vectors: the sink's handle */
    union {
        void *data;        /* LGL/INT: int32_t[], REAL: double[], CPLX: double[2n], RAW */
        r_str *strs;       /* STR */
        r_obj **items;     /* VEC, EXPR */
        struct { r_obj *car, *cdr, *tag; } cons;
        struct { char *name; } sym;      /* SYM, SPECIAL, BUILTIN */
        r_str chr;                       /* CHAR */
        struct {
            uint8_t kind;                /* r_env_kind */
            bool locked;
            r_obj *enclos, *frame, *hashtab;
            r_obj *names;                /* NAMESPACE/PACKAGE/PERSIST: their STR of names */
        } env;
    } u;
};

/* What the sink is told of a large vector before its values. */
typedef struct r_sink_vec {
    r_type type;           /* R_LGL, R_INT, R_REAL, R_CPLX or R_RAW */
    uint64_t length;       /* elements */
    size_t elem_size;      /* bytes per element as delivered: 4, 8, 16 or 1 */
    int64_t file_offset;   /* an uncompressed binary file's offset of the values, else -1 */
    r_format format;       /* how they are encoded there */
} r_sink_vec;

/* Receives large vectors: begin (gives the handle kept in the node's sink_id), then the values
 * in order, in host order, in chunks, then end. A non-zero return stops the read with err. */
typedef struct r_sink {
    void *ctx;
    int (*begin)(void *ctx, const r_sink_vec *v, uint64_t *id, cfs_err *err);
    int (*write)(void *ctx, uint64_t id, const void *data, size_t nbytes, cfs_err *err);
    int (*end)(void *ctx, uint64_t id, cfs_err *err);
} r_sink;

#define R_DEFAULT_SINK_THRESHOLD ((uint64_t)1 << 20)
#define R_DEFAULT_MAX_DEPTH 2000
/* The longest vector an ALTREP sequence may expand to in memory (without a sink taking it):
 * a compact sequence is a few bytes in the file whatever its length, so a damaged or hostile
 * one could otherwise ask for any amount of memory. 2^26 values (512 MiB of doubles) is far
 * beyond the cell and gene counts such sequences index. */
#define R_MAX_GENERATED_IN_MEMORY ((uint64_t)1 << 26)
/* An ALTREP sequence longer than this is refused (its length costs no stream bytes). */
#define R_MAX_EXPANDED ((uint64_t)1 << 32)

typedef struct r_read_opts {
    uint64_t sink_threshold;  /* 0: R_DEFAULT_SINK_THRESHOLD */
    const r_sink *sink;       /* NULL: every vector is kept in memory */
    unsigned max_depth;       /* 0: R_DEFAULT_MAX_DEPTH */
    uint64_t max_generated;   /* 0: R_MAX_GENERATED_IN_MEMORY */
} r_read_opts;

typedef struct r_file {
    r_header hdr;
    r_obj *root;              /* the object (an .rda's: a tagged pairlist of its variables) */
    uint64_t items;           /* items read */
    uint64_t bytes_kept;      /* bytes of vector values and strings held in memory */
    struct r_arena *arena;
} r_file;

/* Reads the object of an .rds or the variables of an .rda/.RData (opts may be NULL). */
int r_read_file(const char *path, const r_read_opts *opts, r_file **out, cfs_err *err);
/* The same from an open file (at offset 0), which it takes. */
int r_read_fd(int fd, const r_read_opts *opts, r_file **out, cfs_err *err);
int r_read_mem(const void *data, size_t len, const r_read_opts *opts, r_file **out,
               cfs_err *err);
void r_file_free(r_file *f);

/* ---- helpers ---- */

/* The shared NULL node: what the helpers return for "no such" where a node is expected. */
extern r_obj r_nil;

bool r_is_null(const r_obj *x);
const char *r_type_name(int type);
/* Elements of a vector, cells of a pairlist, 0 for NULL, 1 for anything else. */
uint64_t r_length(const r_obj *x);
/* The attribute called name, or NULL. */
const r_obj *r_attr(const r_obj *x, const char *name);
/* An S4 slot: the attribute, with the stored "\001NULL\001" symbol turned into &r_nil, and
 * ".Data" the object itself for S4 objects that extend a basic type. NULL if absent. */
const r_obj *r_slot(const r_obj *x, const char *name);
/* The class attribute (a STR) or NULL; r_class_name its first element. */
const r_obj *r_class(const r_obj *x);
const char *r_class_name(const r_obj *x);
bool r_inherits(const r_obj *x, const char *cls);
/* The element called name of a list (by its names attribute) or of a pairlist (by tag). */
const r_obj *r_list_get(const r_obj *x, const char *name);
/* A variable of an environment (frame or hash table), or NULL. */
const r_obj *r_env_get(const r_obj *env, const char *name);
/* A pairlist's cell i (0-based) and its tag's name ("" when untagged). */
const r_obj *r_pairlist_at(const r_obj *x, uint64_t i, const char **tag);

/* Typed views of in-memory vectors: NULL for another type or a sunk vector. */
const int32_t *r_ints(const r_obj *x);   /* INT and LGL */
const double *r_reals(const r_obj *x);   /* REAL; CPLX as re, im pairs */
const uint8_t *r_raw(const r_obj *x);
/* String i of a STR (NULL for NA or out of range); *len its bytes if len is given. */
const char *r_str_at(const r_obj *x, uint64_t i, size_t *len);
/* Element i of a VEC/EXPR, NULL out of range. */
const r_obj *r_vec_at(const r_obj *x, uint64_t i);
const char *r_sym_name(const r_obj *x);

bool r_is_na_real(double v);           /* R's NA_real_ (not any NaN) */
double r_na_real(void);

/* The in-memory sink: keeps each large vector's bytes; for tests and callers that want them
 * apart from the tree. */
typedef struct r_memsink r_memsink;
r_memsink *r_memsink_new(void);
void r_memsink_free(r_memsink *m);
/* The sink that fills m. */
r_sink r_memsink_sink(r_memsink *m);
/* The bytes of vector id (as written to it), NULL if unknown. */
const void *r_memsink_data(const r_memsink *m, uint64_t id, size_t *nbytes,
                           r_sink_vec *info);

#endif
