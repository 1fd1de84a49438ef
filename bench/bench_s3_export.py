#!/usr/bin/env python3
"""`cellucid-fs export` to object storage against the same export to a local folder, in the same
run: a single-node Ceph RADOS Gateway on loopback (tests/rgw.py; memstore, so the gateway's own
storage is memory) and a folder on the local disk.

anndata writes the input at benchmark time (--cells x --genes, 2 % of X set, float32 CSR, a UMAP).
Then, each --repeat times (the best is kept):
  (a) folder: `cellucid-fs export big.h5ad OUT`;
  (b) s3:     `cellucid-fs export -o s3_endpoint=... big.h5ad s3://bench/runN/` (empty prefix);
  (c) rerun:  the same export again onto (b)'s prefix (every object already there: listing and
      MD5 comparison only).
Prints the seconds, objects and MB of each, the ratios (b)/(a) and (c)/(a), and one JSON line.
Requires Debian's ceph-mon ceph-osd radosgw ceph-common (as root). Options: --cells, --genes,
--repeat, --binary, --workdir.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import rgw  # noqa: E402
from bench_layout import generate  # noqa: E402


def timed(args, env=None):
    t0 = time.monotonic()
    r = subprocess.run(args, capture_output=True, text=True, env=env)
    dt = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f"{' '.join(map(str, args))}: exit {r.returncode}\n{r.stderr}")
    return dt, r.stderr


def folder_size(root):
    files = [p for p in Path(root).rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cells", type=int, default=100_000)
    ap.add_argument("--genes", type=int, default=2_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--binary", default=os.environ.get("CELLUCID_FS", str(REPO / "cellucid-fs")))
    ap.add_argument("--workdir")
    a = ap.parse_args()
    missing = rgw.missing_binaries()
    if missing:
        sys.exit(f"missing {', '.join(missing)}: apt-get install {rgw.PACKAGES}")
    work = Path(a.workdir or tempfile.mkdtemp(prefix="cfs-bench-s3-"))
    src = work / "big.h5ad"
    if not src.exists():
        generate(src, a.cells, a.genes, max(1, a.genes // 50), seed=1)   # 2 % set
    gateway = rgw.Rgw(Path(tempfile.mkdtemp(prefix="cfs-rgw-")))
    env = dict(os.environ, AWS_ACCESS_KEY_ID=rgw.ACCESS_KEY, AWS_SECRET_ACCESS_KEY=rgw.SECRET_KEY)
    best = {"folder": 1e9, "s3": 1e9, "rerun": 1e9}
    try:
        t0 = time.monotonic()
        gateway.start()
        started = time.monotonic() - t0
        gateway.s3().make_bucket("bench")
        s3_args = [a.binary, "export", "-o", f"s3_endpoint={gateway.endpoint}", str(src)]
        for i in range(a.repeat):
            out = work / f"out{i}"
            dt, _ = timed([a.binary, "export", str(src), str(out)])
            best["folder"] = min(best["folder"], dt)
            objects, size = folder_size(out)
            dt, log = timed(s3_args + [f"s3://bench/run{i}/"], env)
            best["s3"] = min(best["s3"], dt)
            written = int(re.search(r"(\d+) objects written", log).group(1))
            assert written == objects, (written, objects)
            dt, log = timed(s3_args + [f"s3://bench/run{i}/"], env)
            best["rerun"] = min(best["rerun"], dt)
            assert re.search(rf" 0 objects written .* {objects} skipped", log), log
    finally:
        gateway.stop()
        shutil.rmtree(gateway.d, ignore_errors=True)
    print(f"input: {a.cells} cells x {a.genes} genes, {src.stat().st_size / 2**20:.0f} MiB h5ad; "
          f"export: {objects} objects, {size / 2**20:.1f} MiB; gateway started in {started:.0f} s")
    print(f"{'export to':<34}{'seconds':>9}{'ratio':>8}")
    print(f"{'local folder':<34}{best['folder']:>9.2f}{1:>8.2f}")
    print(f"{'RADOS Gateway (empty prefix)':<34}{best['s3']:>9.2f}"
          f"{best['s3'] / best['folder']:>8.2f}")
    print(f"{'RADOS Gateway (rerun, all there)':<34}{best['rerun']:>9.2f}"
          f"{best['rerun'] / best['folder']:>8.2f}")
    print(json.dumps({"cells": a.cells, "genes": a.genes, "objects": objects, "bytes": size,
                      "folder_s": best["folder"], "s3_s": best["s3"], "rerun_s": best["rerun"]}))


if __name__ == "__main__":
    main()
