/* The unit tests, one file per layer: a line "unit: <file> N passed, N failed" per file, then
 * the total "unit: N passed, N failed" (tests/run-suite reads that last line). */
#include <stdlib.h>
#include <string.h>

#include "forkserver.h"
#include "unit.h"

static void run(const char *name, void (*entry)(void))
{
    int passed = unit_passed, failed = unit_failed;
    entry();
    printf("unit: %s %d passed, %d failed\n", name, unit_passed - passed, unit_failed - failed);
}

int main(int argc, char **argv)
{
    /* The isolate tests start reader workers: this program is their fork server. */
    if (argc == 3 && strcmp(argv[1], CFS_FORKSERVER_FLAG) == 0)
        return cfs_forkserver_main(atoi(argv[2]));
    run("base", unit_base);
    run("model", unit_model);
    run("layout", unit_layout);
    run("store", unit_store);
    run("catalog", unit_catalog);
    run("cache", unit_cache);
    run("fuse", unit_fuse);
    run("formats", unit_formats);
    run("registry", unit_registry);
    run("fuzz regressions", unit_fuzz_regressions);
    run("rstream", unit_rstream);
    run("rvectors", unit_rvectors);
    run("rdensejoin", unit_rdensejoin);
    run("isolate", unit_isolate);
    run("zarr input", unit_zarr_input);
    run("net", unit_net);
    run("export", unit_export);
    printf("unit: %d passed, %d failed\n", unit_passed, unit_failed);
    return unit_failed != 0;
}
