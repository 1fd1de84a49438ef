#!/usr/bin/python3
"""Reads a served store over HTTP with zarr and anndata, with no fsspec/aiohttp needed:

    /usr/bin/python3 example/read_over_http.py http://127.0.0.1:8000/pbmc.zarr

Prints the AnnData, its X, the first UMAP coordinates and the number of cells per label of the
first categorical or string obs column. (With python3-fsspec and python3-aiohttp installed, zarr opens the URL
itself: zarr.open_consolidated("http://127.0.0.1:8000/pbmc.zarr", mode="r").)
"""

import json
import sys
import urllib.error
import urllib.request
import warnings

warnings.simplefilter("ignore")

import anndata  # noqa: E402
import zarr  # noqa: E402

# Loopback servers only need no proxy; any proxy named in the environment is ignored.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class HTTPStore(dict):
    """A read-only zarr v2 store over HTTP. It holds the metadata documents of the store's
    .zmetadata (so zarr and anndata can list groups without a directory listing) and fetches
    every other key, a chunk, as URL/key; a 404 is a missing key."""

    def __init__(self, url):
        super().__init__()
        self.url = url.rstrip("/") + "/"
        meta = json.loads(self.fetch(".zmetadata"))
        self[".zmetadata"] = json.dumps(meta).encode()
        for key, doc in meta["metadata"].items():
            self[key] = json.dumps(doc).encode()

    def fetch(self, key):
        try:
            with OPENER.open(self.url + key, timeout=30) as r:
                return r.read()
        except urllib.error.HTTPError as e:
            if e.code == 404:
                raise KeyError(key) from None
            raise

    def __getitem__(self, key):
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        return self.fetch(key)

    def __contains__(self, key):
        try:
            self[key]
        except KeyError:
            return False
        return True


def main(url):
    store = HTTPStore(url)
    group = zarr.open_consolidated(store, mode="r")
    a = anndata.read_zarr(store)
    print(a)
    x = a.X
    print(f"X: {type(x).__name__} {x.shape} {x.dtype}"
          + (f", {x.nnz} stored values" if hasattr(x, "nnz") else ""))
    for key in ("X_umap", "X_tsne", "X_pca"):
        if key in a.obsm:
            print(f"obsm['{key}'][:3] =\n{group['obsm'][key][:3]}")
            break
    labels = [c for c in a.obs.columns if a.obs[c].dtype in ("category", object)]
    if labels:
        print(f"obs['{labels[0]}']:\n{a.obs[labels[0]].value_counts(sort=False).to_string()}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: read_over_http.py http://HOST:PORT/ID.zarr")
    main(sys.argv[1])
