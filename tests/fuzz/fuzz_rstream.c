/* R serialization streams (formats/r/): .rds and .rda, every format and compression. */
#include <stddef.h>
#include <stdint.h>

#include "robject.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* sequences of up to 2^20 values: bigger ones cost time, not coverage */
    r_read_opts opts = {.sink_threshold = 4096, .max_generated = (uint64_t)1 << 20};
    r_file *f = NULL;
    cfs_err err = {0};
    if (r_read_mem(data, size, &opts, &f, &err) == 0)
        r_file_free(f);
    return 0;
}
