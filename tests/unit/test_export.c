/* The export's chunk writers (src/cli/export.c). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chunking.h"
#include "export.h"
#include "model.h"
#include "store.h"
#include "unit.h"

enum { ARRAYS = 3, CHUNKS = 24 };

/* What the arrays' reads saw: how many reads of each array were under way at once; an array
 * is left to hand out while it has chunks neither read nor being read (with two writers, one
 * handed out and not yet being read is the reader's own, so the count is exact). */
typedef struct handout {
    pthread_mutex_t lock;
    int reading[ARRAYS];
    int in_flight, most_in_flight;
    int shared;             /* reads that began while another read of the same array ran */
    int shared_with_others_left;    /* ... while another array still had chunks to hand out */
    int done[ARRAYS];       /* chunks read, per array */
} handout;

static handout seen = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int slow_read(const cfs_array *arr, const uint64_t *start, const uint64_t *count,
                     void *out, cfs_err *err)
{
    (void)err;
    int k = (int)(intptr_t)arr->ctx;
    pthread_mutex_lock(&seen.lock);
    bool others_left = false;
    for (int j = 0; j < ARRAYS; j++)
        others_left |= j != k && seen.done[j] + seen.reading[j] < CHUNKS;
    if (seen.reading[k]) {
        seen.shared++;
        seen.shared_with_others_left += others_left;
    }
    seen.reading[k]++;
    if (++seen.in_flight > seen.most_in_flight)
        seen.most_in_flight = seen.in_flight;
    pthread_mutex_unlock(&seen.lock);
    /* b is slow: a writer that takes chunks in turn alone would come back to b while the
     * other still writes into it. */
    nanosleep(&(struct timespec){0, (k == 1 ? 6 : 1) * 1000 * 1000}, NULL);
    memset(out, k, count[0] * sizeof(int32_t));
    (void)start;
    pthread_mutex_lock(&seen.lock);
    seen.reading[k]--;
    seen.in_flight--;
    seen.done[k]++;
    pthread_mutex_unlock(&seen.lock);
    return 0;
}

static const cfs_array_ops slow_ops = {slow_read, NULL, NULL, NULL, NULL};

/*
 * Chunks are handed out from an array nobody else is writing into while there is one (creating
 * a file holds its folder's lock, and workers in one folder wait for each other): two writers
 * never read one array at once while another array has chunks left, even when one array's
 * chunks take six times as long as the others'.
 */
static void test_one_worker_a_folder(void)
{
    char tmpl[] = "/tmp/cfs-unit-export-XXXXXX";
    char *dir = unit_temp_dir(tmpl);
    if (!dir)
        return;
    cfs_elem *root = cfs_elem_new(CFS_EL_ANNDATA, NULL);
    uint64_t shape[1] = {CHUNKS};
    for (int k = 0; k < ARRAYS; k++) {
        char name[8] = {(char)('a' + k), 0};
        cfs_elem *el = cfs_elem_new(CFS_EL_ARRAY, name);
        el->values = cfs_array_new(CFS_INT32, 1, shape, &slow_ops, (void *)(intptr_t)k);
        cfs_elem_add(root, el);
    }
    cfs_dataset ds = {.root = root};
    cfs_store_opts opts = {.codec = CFS_CODEC_NONE};
    cfs_err err = {0};
    cfs_store *st = cfs_store_new(&ds, &opts, &err);
    CHECK(st != NULL);
    for (size_t i = 0; st && i < st->nnodes; i++)
        if (st->nodes[i].is_array) {        /* one element a chunk */
            st->nodes[i].chunks[0] = 1;
            st->nodes[i].nchunks = cfs_chunk_grid(1, st->nodes[i].shape, st->nodes[i].chunks,
                                                  st->nodes[i].grid);
        }
    char out[4200];
    snprintf(out, sizeof out, "%s/store", dir);
    CHECK(st && cfs_export_store(st, out, 2, &err) == 0);   /* exact for two writers */
    for (int k = 0; k < ARRAYS; k++)
        CHECK(seen.done[k] == CHUNKS);
    CHECK(seen.most_in_flight >= 2);        /* the writers did run at once */
    CHECK(seen.shared_with_others_left == 0);
    cfs_store_free(st);
    cfs_elem_free(root);
    unit_remove_folder(dir);
}

void unit_export(void)
{
    test_one_worker_a_folder();
}
