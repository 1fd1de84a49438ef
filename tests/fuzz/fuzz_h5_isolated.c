/* HDF5 inputs (.h5ad, .loom, 10x .h5, .h5mu) through the worker path (src/isolate): libhdf5 is
 * not hardened against malformed files, so its crashes, hangs and runaway allocations are
 * expected here, inside the worker; what is fuzzed is that the daemon's side (the spawn, the
 * wire, the proxy arrays, the model sent back, the fault bookkeeping) survives every one of them
 * and only ever returns an error. The input is written to a file in /dev/shm, which a worker
 * (the cellucid-fs binary `make` built, or $CFS_FUZZ_WORKER) opens through the registry; then
 * the first element of every array is read from it. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz_read.h"
#include "isolated.h"

/* make passes the path bare (a quoted string does not survive its shell's word splitting) */
#define FUZZ_STRING(x) #x
#define FUZZ_XSTRING(x) FUZZ_STRING(x)
#ifdef FUZZ_WORKER_PATH
#define FUZZ_WORKER FUZZ_XSTRING(FUZZ_WORKER_PATH)
#else
#define FUZZ_WORKER "cellucid-fs"
#endif

static char input_path[64];

static int write_input(const uint8_t *data, size_t size)
{
    if (!input_path[0])
        snprintf(input_path, sizeof input_path, "/dev/shm/cfs-fuzz-h5-%d.h5ad", (int)getpid());
    int fd = open(input_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    int rc = size == 0 || write(fd, data, size) == (ssize_t)size ? 0 : -1;
    close(fd);
    return rc;
}

static void remove_input(void)
{
    if (input_path[0])
        unlink(input_path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool registered;
    if (!registered) {
        atexit(remove_input);
        registered = true;
    }
    if (write_input(data, size) < 0)
        return 0;
    const char *exe = getenv("CFS_FUZZ_WORKER");
    /* Limits well inside libFuzzer's own -timeout and -rss_limit_mb: a worker that spins or
     * allocates is the worker's fault, ended by the daemon's side, not a finding. */
    cfs_isolation iso = {.open_timeout = 2, .read_timeout = 2, .memory = UINT64_C(512) << 20,
                         .exe = exe && *exe ? exe : FUZZ_WORKER};
    cfs_dataset *ds = NULL;
    cfs_reader_fault fault = {0};
    cfs_err err = {0};
    if (cfs_isolated_open(input_path, &iso, &ds, &fault, &err) == 0) {
        fuzz_read_first(ds->root);
        cfs_isolated_fault(ds, &fault);
        cfs_dataset_free(ds);
    }
    return 0;
}
