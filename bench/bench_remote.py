#!/usr/bin/env python3
"""A cold first view of a remote h5ad (docs/design.md §11): `cellucid-fs mount URL` over
loopback HTTP (nginx), against downloading the whole file with curl in the same run.

The script writes, with anndata, a CSR h5ad of --cells x --genes (default 200,000 x 3,000,
density 0.03: about 150 MB), serves it with the tests' nginx (tests/nginx.py), then measures:

  (a) download: `curl -s -o FILE URL` of the whole file (the baseline);
  (b) first view: from `cellucid-fs mount URL MNT` (a fresh cache) until a client has read
      datasets.json, the obs index, one obs column and obsm/X_umap of the store;
  (c) whole read: the same, then every chunk of X and of obsm/X_pca (--pca N: an N-column
      embedding, contiguous in the file, whose reads span many blocks);
  and the bytes and requests each fetched (nginx's access log). With --baseline BINARY (e.g.
  a build of an earlier commit), (b) and (c) are measured for it too, in the same run, and
  the ratios printed.

Output: a table, then one JSON line with the raw figures. Requires Debian's python3-anndata,
nginx, curl and FUSE. Options: --cells, --genes, --density, --workdir, --keep, --binary,
--baseline, --pca, --delay-ms (each request reaches nginx that much later, through a relay
of this script's: a far server's round trip, which loopback has not).
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def default_binary():
    return os.environ.get("CELLUCID_FS") or str(ROOT / "cellucid-fs")


def write_input(path, cells, genes, density, pca, seed=3):
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp
    r = np.random.default_rng(seed)
    X = sp.random(cells, genes, density=density, format="csr", dtype=np.float32, random_state=r)
    obs = pd.DataFrame({"cluster": pd.Categorical(r.integers(0, 30, cells).astype(str))},
                       index=[f"cell{i}" for i in range(cells)])
    a = ad.AnnData(X, obs=obs)
    a.obsm["X_umap"] = r.normal(size=(cells, 2)).astype(np.float32)
    if pca:     # h5py writes it contiguous: a read of it spans many blocks
        a.obsm["X_pca"] = r.normal(size=(cells, pca)).astype(np.float32)
    a.write_h5ad(path)


class DelayRelay:
    """Relays 127.0.0.1:port to upstream, holding what a client sends for delay seconds before
    passing it on: each request (and each connection's first bytes) costs a round trip."""

    def __init__(self, upstream, delay):
        self.upstream, self.delay = upstream, delay
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self._pipe, args=(client, server, self.delay),
                             daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, 0), daemon=True).start()

    @staticmethod
    def _pipe(src, dst, delay):
        try:
            while data := src.recv(1 << 16):
                if delay:
                    time.sleep(delay)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.sock.close()


def log_counts(nginx, name, since):
    lines = (nginx.dir / "access.log").read_text().splitlines()[since:]
    mine = [l for l in lines if f"GET /{name} " in l]
    return len(mine), sum(int(l.split('"')[2].split()[1]) for l in mine)


def log_len(nginx):
    p = nginx.dir / "access.log"
    return len(p.read_text().splitlines()) if p.exists() else 0


def first_view(binary, url, work, whole=False):
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
        if whole:
            for key in ("X/data", "X/indices", "X/indptr", "obsm/X_pca"):
                if key in g:
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
    ap.add_argument("--baseline", help="another cellucid-fs binary to compare with")
    ap.add_argument("--pca", type=int, default=0, help="columns of a dense obsm/X_pca")
    ap.add_argument("--delay-ms", type=float, default=0, help="added to each request")
    args = ap.parse_args()
    from nginx import Nginx
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-remote-"))
    served = work / "served"
    served.mkdir(parents=True, exist_ok=True)
    src = served / "big.h5ad"
    if not src.exists():
        write_input(src, args.cells, args.genes, args.density, args.pca)
    size = src.stat().st_size
    nginx = Nginx(served, work / "nginx").start()
    relay = DelayRelay(nginx.port, args.delay_ms / 1000) if args.delay_ms else None
    try:
        url = nginx.url("big.h5ad")
        if relay:
            url = url.replace(f":{nginx.port}/", f":{relay.port}/")
        mark = log_len(nginx)
        t = time.perf_counter()
        subprocess.run(["curl", "-s", "-o", str(work / "download.h5ad"), url], check=True)
        download = time.perf_counter() - t
        dl_requests, dl_bytes = log_counts(nginx, "big.h5ad", mark)
        runs = {}
        for label, binary in (("", args.binary), ("baseline ", args.baseline)):
            for what, whole in (("first view", False), ("whole read", True)):
                if binary:
                    mark = log_len(nginx)
                    s = first_view(binary, url, work, whole)
                    runs[label + what] = (s,) + log_counts(nginx, "big.h5ad", mark)
    finally:
        if relay:
            relay.close()
        nginx.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"remote h5ad: {args.cells} cells x {args.genes} genes, {size / 2**20:.1f} MiB"
          + (f", X_pca of {args.pca} columns" if args.pca else "")
          + (f", {args.delay_ms:g} ms added to each request" if args.delay_ms else ""))
    print(f"{'':28}{'seconds':>10}{'MiB fetched':>14}{'requests':>10}")
    print(f"{'curl, whole file':28}{download:10.2f}{dl_bytes / 2**20:14.1f}{dl_requests:10d}")
    for what, (s, requests, fetched) in runs.items():
        print(f"{'mount + ' + what:28}{s:10.2f}{fetched / 2**20:14.1f}{requests:10d}")
    view, view_requests, view_bytes = runs["first view"]
    print(f"time ratio (first view / download): {view / download:.2f}; "
          f"bytes fetched: {view_bytes / size:.3f} of the file")
    for what in ("first view", "whole read"):
        if "baseline " + what in runs:
            (s, r, _), (bs, br, _) = runs[what], runs["baseline " + what]
            print(f"{what}: time ratio (this / baseline) {s / bs:.2f}, requests {r} / {br}")
    print(json.dumps({"cells": args.cells, "genes": args.genes, "file_bytes": size,
                      "download_s": download, "download_bytes": dl_bytes,
                      "view_s": view, "view_bytes": view_bytes, "view_requests": view_requests,
                      "runs": runs}))


if __name__ == "__main__":
    main()
