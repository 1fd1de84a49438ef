/* Zarr chunk codecs (formats/zarr/zarr_codecs.c): the first byte picks a compressor, the rest
 * is a chunk, decoded with and without an expected size. */
#include <stdint.h>
#include <stdlib.h>

#include <jansson.h>

#include "zarr_codecs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const specs[] = {
        "{\"id\":\"blosc\",\"cname\":\"lz4\",\"clevel\":5,\"shuffle\":1,\"blocksize\":0}",
        "{\"id\":\"zstd\",\"level\":1}", "{\"id\":\"zlib\",\"level\":1}",
        "{\"id\":\"gzip\",\"level\":1}", "{\"id\":\"lz4\",\"acceleration\":1}",
        "{\"id\":\"bz2\",\"level\":1}", "{\"id\":\"lzma\",\"format\":1,\"check\":-1}",
    };
    enum { NSPECS = sizeof specs / sizeof specs[0] };
    if (size < 2)
        return 0;
    json_t *spec = json_loads(specs[data[0] % NSPECS], 0, NULL);
    if (!spec)
        return 0;
    size_t expect = data[1] % 2 ? 0 : (size_t)data[1] * 64;
    unsigned char *out = NULL;
    size_t len = 0;
    cfs_err err = {0};
    if (zr_codec_decode(spec, data + 2, size - 2, expect, &out, &len, &err) == 0)
        free(out);
    json_decref(spec);
    return 0;
}
