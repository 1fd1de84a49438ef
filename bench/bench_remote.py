#!/usr/bin/env python3
"""A cold first view of a remote h5ad (docs/design.md §11): `cellucid-fs mount URL` over
loopback HTTP (nginx), against downloading the whole file with curl in the same run.

The script writes, with anndata, a CSR h5ad of --cells x --genes (default 200,000 x 3,000,
density 0.03: about 150 MB), serves it with the tests' nginx (tests/nginx.py), then measures:

  (a) download: `curl -s -o FILE URL` of the whole file (the baseline);
  (b) first view: from `cellucid-fs mount URL MNT` (a fresh cache) until a client has read
      datasets.json, the obs index, one obs column and obsm/X_umap of the store;
  and the bytes and requests each fetched (nginx's access log).

Output: a table, then one JSON line with the raw figures. Requires Debian's python3-anndata,
nginx, curl and FUSE. Options: --cells, --genes, --density, --workdir, --keep, --binary.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def default_binary():
    return os.environ.get("CELLUCID_FS") or str(ROOT / "cellucid-fs")


def write_input(path, cells, genes, density, seed=3):
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp
    r = np.random.default_rng(seed)
    X = sp.random(cells, genes, density=density, format="csr", dtype=np.float32, random_state=r)
    obs = pd.DataFrame({"cluster": pd.Categorical(r.integers(0, 30, cells).astype(str))},
                       index=[f"cell{i}" for i in range(cells)])
    a = ad.AnnData(X, obs=obs)
    a.obsm["X_umap"] = r.normal(size=(cells, 2)).astype(np.float32)
    a.write_h5ad(path)


def log_counts(nginx, name, since):
    lines = (nginx.dir / "access.log").read_text().splitlines()[since:]
    mine = [l for l in lines if f"GET /{name} " in l]
    return len(mine), sum(int(l.split('"')[2].split()[1]) for l in mine)


def log_len(nginx):
    p = nginx.dir / "access.log"
    return len(p.read_text().splitlines()) if p.exists() else 0


def first_view(binary, url, work):
    import zarr
    mnt, cache = work / "mnt", work / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    mnt.mkdir(exist_ok=True)
    t = time.perf_counter()
    subprocess.run([binary, "mount", "-o", f"cache_dir={cache}", url, str(mnt)], check=True)
    try:
        json.loads((mnt / "datasets.json").read_text())
        g = zarr.open_consolidated(str(mnt / "big.zarr"), mode="r")
        for key in ("obs/_index", "obs/cluster/codes", "obs/cluster/categories", "obsm/X_umap"):
            g[key][...]
        return time.perf_counter() - t
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=200_000)
    ap.add_argument("--genes", type=int, default=3_000)
    ap.add_argument("--density", type=float, default=0.03)
    ap.add_argument("--workdir")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--binary", default=default_binary())
    args = ap.parse_args()
    from nginx import Nginx
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-remote-"))
    served = work / "served"
    served.mkdir(parents=True, exist_ok=True)
    src = served / "big.h5ad"
    if not src.exists():
        write_input(src, args.cells, args.genes, args.density)
    size = src.stat().st_size
    nginx = Nginx(served, work / "nginx").start()
    try:
        url = nginx.url("big.h5ad")
        mark = log_len(nginx)
        t = time.perf_counter()
        subprocess.run(["curl", "-s", "-o", str(work / "download.h5ad"), url], check=True)
        download = time.perf_counter() - t
        dl_requests, dl_bytes = log_counts(nginx, "big.h5ad", mark)
        mark = log_len(nginx)
        view = first_view(args.binary, url, work)
        view_requests, view_bytes = log_counts(nginx, "big.h5ad", mark)
    finally:
        nginx.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"remote h5ad: {args.cells} cells x {args.genes} genes, {size / 2**20:.1f} MiB")
    print(f"{'':28}{'seconds':>10}{'MiB fetched':>14}{'requests':>10}")
    print(f"{'curl, whole file':28}{download:10.2f}{dl_bytes / 2**20:14.1f}{dl_requests:10d}")
    print(f"{'mount + first view':28}{view:10.2f}{view_bytes / 2**20:14.1f}{view_requests:10d}")
    print(f"time ratio (first view / download): {view / download:.2f}; "
          f"bytes fetched: {view_bytes / size:.3f} of the file")
    print(json.dumps({"cells": args.cells, "genes": args.genes, "file_bytes": size,
                      "download_s": download, "download_bytes": dl_bytes,
                      "view_s": view, "view_bytes": view_bytes, "view_requests": view_requests}))


if __name__ == "__main__":
    main()
