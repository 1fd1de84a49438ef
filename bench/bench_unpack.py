#!/usr/bin/env python3
"""A large gzipped copy (x.h5ad.gz) served by the mount: how long until it is ready, against
`gunzip -c` of the same file in the same run, and what it costs in memory and in the cache.

The script writes, with anndata, a dense float32 h5ad of --cells x --genes (default 20,000 x
25,000: 2.0 GB) of Poisson(0.1) counts, gzips it (`gzip -1 -n`), then measures:

  (a) ready time: from `cellucid-fs mount` until status.json lists the source ready (the copy is
      made in the background after the mount is up), against `gunzip -c > file` (baseline);
  (b) the daemon's peak RSS (VmHWM) with -o memory=256M, against the copy's size;
  (c) the cache: work_bytes in status.json (the copy counted against cache_size) against the
      copy's size, and a second mount of the same version: ready time with the copy reused.

Output: a table, then one JSON line with the raw figures. Requires Debian's python3-anndata and
gzip; FUSE (/dev/fuse, fusermount3). Options: --cells, --genes, --workdir, --keep, --binary.
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


def default_binary():
    return os.environ.get("CELLUCID_FS") or str(Path(__file__).resolve().parent.parent / "cellucid-fs")


def write_input(path, cells, genes, seed):
    import anndata as ad
    r = np.random.default_rng(seed)
    X = np.empty((cells, genes), dtype=np.float32)
    step = 1000
    for i in range(0, cells, step):
        X[i:i + step] = r.poisson(0.1, size=(min(step, cells - i), genes))
    a = ad.AnnData(X)
    a.obsm["X_umap"] = r.normal(size=(cells, 2)).astype(np.float32)
    a.write_h5ad(path)


def timed(argv, **kw):
    t = time.perf_counter()
    subprocess.run(argv, check=True, **kw)
    return time.perf_counter() - t


def status(mnt):
    return json.loads((mnt / "status.json").read_text())


def vm_hwm(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def mount_until_ready(binary, src, mnt, cache, opts, timeout=3600):
    mnt.mkdir(exist_ok=True)
    t = time.perf_counter()
    proc = subprocess.Popen([binary, "mount", "-f", "-o", f"cache_dir={cache},{opts}", str(src),
                             str(mnt)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while True:
            if proc.poll() is not None:
                sys.exit(f"the mount exited: {proc.stderr.read().decode()}")
            try:
                st = status(mnt)
                if st["sources"] and all(s["state"] == "ready" for s in st["sources"]):
                    break
                if any(s["state"] == "refused" for s in st["sources"]):
                    sys.exit(f"refused: {st}")
            except (FileNotFoundError, json.JSONDecodeError, OSError):
                pass
            if time.perf_counter() - t > timeout:
                sys.exit("the source did not become ready")
            time.sleep(0.05)
        ready = time.perf_counter() - t
        return ready, vm_hwm(proc.pid), st["cache"]["work_bytes"]
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cells", type=int, default=20_000)
    p.add_argument("--genes", type=int, default=25_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir")
    p.add_argument("--keep", action="store_true")
    p.add_argument("--binary", default=default_binary())
    a = p.parse_args()
    work = Path(a.workdir or tempfile.mkdtemp(prefix="cfs-bench-unpack-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        src = work / "src"
        src.mkdir(exist_ok=True)
        plain = work / "big.h5ad"
        gz = src / "big.h5ad.gz"
        if not gz.exists():
            write_input(plain, a.cells, a.genes, a.seed)
            with open(gz, "wb") as out:
                subprocess.run(["gzip", "-1", "-n", "-c", str(plain)], stdout=out, check=True)
            plain.unlink()
        size_gz = gz.stat().st_size
        with open(work / "gunzipped.h5ad", "wb") as out:
            t_gunzip = timed(["gunzip", "-c", str(gz)], stdout=out)
        size = (work / "gunzipped.h5ad").stat().st_size
        (work / "gunzipped.h5ad").unlink()
        cache = work / "cache"
        ready, rss, counted = mount_until_ready(a.binary, src, work / "mnt", cache,
                                                "memory=256M,cache_size=8G")
        again, _, _ = mount_until_ready(a.binary, src, work / "mnt", cache,
                                        "memory=256M,cache_size=8G")
        rows = [
            ("(a) ready, cold", f"{ready:.1f} s", f"gunzip -c {t_gunzip:.1f} s", f"{ready / t_gunzip:.2f}x"),
            ("(b) daemon peak RSS", f"{rss / 2**20:.0f} MB", f"copy {size / 2**20:.0f} MB", f"{rss / size:.3f}"),
            ("(c) counted in the cache", f"{counted / 2**20:.0f} MB", f"copy {size / 2**20:.0f} MB", f"{counted / size:.3f}"),
            ("(c') ready, copy reused", f"{again:.2f} s", f"cold {ready:.1f} s", f"{again / ready:.3f}"),
        ]
        print(f"input: {a.cells} x {a.genes} dense float32, {size / 2**30:.2f} GB h5ad, "
              f"{size_gz / 2**20:.0f} MB gzipped")
        print(f"{'figure':28} {'cellucid-fs':14} {'baseline (same run)':22} ratio")
        for r in rows:
            print(f"{r[0]:28} {r[1]:14} {r[2]:22} {r[3]}")
        print(json.dumps({"cells": a.cells, "genes": a.genes, "bytes": size, "gz_bytes": size_gz,
                          "gunzip_s": round(t_gunzip, 2), "ready_s": round(ready, 2),
                          "peak_rss": rss, "counted": counted, "reused_ready_s": round(again, 3)}))
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
