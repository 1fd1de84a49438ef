#!/usr/bin/env python3
"""A large Seurat object saved by R: `cellucid-fs export` of it against R reading the same file
(`readRDS`), in the same run: time and peak memory.

R writes the object at benchmark time (tests/fixtures/make_big_seurat.R: --cells x --genes,
default 200,000 x 2,000, 5 % of the entries set in counts and data, a factor and a numeric
meta.data column, pca (30 dims) and umap; saveRDS with gzip, R's default). Then:

  (a) export time: `cellucid-fs export -o memory=256M big.rds OUT`, from start to exit,
      against `Rscript -e 'readRDS(big.rds)'` alone (R's start included: R's start alone is
      printed too);
  (b) peak memory (VmHWM polled from /proc): of the export process and of its reader worker
      (the R file is opened in the worker), against readRDS's peak and against the size of the
      decompressed stream (what holding the object's vectors takes);
  (c) the same two figures for `cellucid-fs inspect big.rds` (opening alone);
  (d) with --baseline-binary, (a) and (b) for another build too (e.g. main before a change).

SeuratDisk-style conversion (SeuratDisk::Convert, zellkonverter) is timed when R has the
package, else the script says it is not installed. Output: a table, then one JSON line with the
raw figures. Requires Rscript with Debian's r-cran-seuratobject (r-cran-seurat). Options:
--cells, --genes, --memory, --input (reuse an .rds), --workdir, --keep, --binary,
--baseline-binary.
"""
import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAKE = REPO / "tests" / "fixtures" / "make_big_seurat.R"
MB = 2**20


def default_binary():
    return os.environ.get("CELLUCID_FS") or str(REPO / "cellucid-fs")


def _children(pid):
    out = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    return out


def _hwm(pid):
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def measured(argv):
    """Runs argv: (seconds, peak VmHWM of it, the largest peak VmHWM of the processes it started),
    polled from /proc while they run. (The kernel's ru_maxrss is not used: a child's counts the
    memory of this process at the fork.)"""
    t = time.perf_counter()
    p = subprocess.Popen([str(a) for a in argv], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    peaks = {}
    while p.poll() is None:
        todo = [p.pid]
        while todo:
            pid = todo.pop()
            todo += _children(pid)
            peaks[pid] = max(peaks.get(pid, 0), _hwm(pid))
        time.sleep(0.01)
    seconds = time.perf_counter() - t
    err = p.stderr.read().decode(errors="replace")
    if p.returncode != 0:
        sys.exit(f"{' '.join(map(str, argv))} failed ({p.returncode}):\n{err}")
    main = peaks.pop(p.pid, 0)
    return seconds, main, max(peaks.values(), default=0)


def has_r_package(name):
    r = subprocess.run(["Rscript", "-e", f'cat(requireNamespace("{name}", quietly = TRUE))'],
                       capture_output=True, text=True)
    return r.stdout.strip() == "TRUE"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cells", type=int, default=200_000)
    p.add_argument("--genes", type=int, default=2_000)
    p.add_argument("--memory", default="256M")
    p.add_argument("--input", help="an .rds an earlier --keep run made")
    p.add_argument("--workdir")
    p.add_argument("--keep", action="store_true")
    p.add_argument("--binary", default=default_binary())
    p.add_argument("--baseline-binary", help="another build, measured in the same run")
    a = p.parse_args()
    if not shutil.which("Rscript"):
        sys.exit("Rscript is not installed: apt-get install r-cran-seurat")
    work = Path(a.workdir or tempfile.mkdtemp(prefix="cfs-bench-rds-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        rds = Path(a.input) if a.input else work / "big.rds"
        if not rds.exists():
            t = time.perf_counter()
            subprocess.run(["Rscript", str(MAKE), str(rds), str(a.cells), str(a.genes)],
                           check=True)
            print(f"R wrote {rds} in {time.perf_counter() - t:.0f} s", file=sys.stderr)
        size_gz = rds.stat().st_size
        raw = 0
        with gzip.open(rds, "rb") as fh:   # also warms the page cache with the file
            for block in iter(lambda: fh.read(1 << 20), b""):
                raw += len(block)
        r_start, r_start_rss, _ = measured(["Rscript", "-e", "invisible(0)"])
        r_read, r_main, r_child = measured(["Rscript", "-e", f'invisible(readRDS("{rds}"))'])
        r_rss = max(r_main, r_child)
        out = work / "out"
        shutil.rmtree(out, ignore_errors=True)
        e_time, e_main, e_worker = measured(
            [a.binary, "export", "-o", f"memory={a.memory}", rds, out])
        i_time, i_main, i_worker = measured([a.binary, "inspect", rds])
        base = None
        if a.baseline_binary:
            shutil.rmtree(work / "out-baseline", ignore_errors=True)
            base = measured([a.baseline_binary, "export", "-o", f"memory={a.memory}", rds,
                             work / "out-baseline"])
        store = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
        e_peak = max(e_main, e_worker)
        i_peak = max(i_main, i_worker)
        conv = "not installed (SeuratDisk, zellkonverter)"
        if has_r_package("SeuratDisk"):
            h5 = work / "big.h5Seurat"
            c_time, c_main, c_child = measured([
                "Rscript", "-e", f'suppressMessages(library(SeuratDisk)); so <- readRDS("{rds}"); '
                f'SaveH5Seurat(so, "{h5}", overwrite = TRUE); Convert("{h5}", dest = "h5ad", '
                'overwrite = TRUE)'])
            conv = (f"{c_time:.1f} s, {max(c_main, c_child) / MB:.0f} MB "
                    f"(export / conversion {e_time / c_time:.2f}x)")
        rows = [
            ("(a) export time", f"{e_time:.1f} s", f"readRDS {r_read:.1f} s",
             f"{e_time / r_read:.2f}x"),
            ("(b) export peak RSS", f"{e_peak / MB:.0f} MB", f"readRDS {r_rss / MB:.0f} MB",
             f"{e_peak / r_rss:.2f}x"),
            ("    export process", f"{e_main / MB:.0f} MB", f"-o memory={a.memory}", ""),
            ("    its reader worker", f"{e_worker / MB:.0f} MB",
             f"decompressed {raw / MB:.0f} MB", f"{e_worker / raw:.3f}"),
            ("(c) inspect time", f"{i_time:.1f} s", f"readRDS {r_read:.1f} s",
             f"{i_time / r_read:.2f}x"),
            ("    inspect peak RSS", f"{i_peak / MB:.0f} MB", f"readRDS {r_rss / MB:.0f} MB",
             f"{i_peak / r_rss:.2f}x"),
            ("    its reader worker", f"{i_worker / MB:.0f} MB",
             f"decompressed {raw / MB:.0f} MB", f"{i_worker / raw:.3f}"),
        ]
        if base:
            b_peak = max(base[1], base[2])
            rows += [
                ("(d) baseline build export", f"{base[0]:.1f} s", f"this build {e_time:.1f} s",
                 f"{e_time / base[0]:.2f}x"),
                ("    its peak RSS", f"{b_peak / MB:.0f} MB", f"this build {e_peak / MB:.0f} MB",
                 f"{e_peak / b_peak:.2f}x"),
            ]
        print(f"input: {a.cells} cells x {a.genes} genes Seurat object, {size_gz / MB:.0f} MB "
              f"saveRDS (gzip), {raw / MB:.0f} MB decompressed; store {store / MB:.0f} MB; "
              f"R's start alone {r_start:.1f} s, {r_start_rss / MB:.0f} MB")
        print(f"{'figure':24} {'cellucid-fs':14} {'baseline (same run)':24} ratio")
        for r in rows:
            print(f"{r[0]:24} {r[1]:14} {r[2]:24} {r[3]}")
        print(f"SeuratDisk-style conversion: {conv}")
        print(json.dumps({
            "cells": a.cells, "genes": a.genes, "rds_bytes": size_gz, "raw_bytes": raw,
            "memory": a.memory, "export_s": round(e_time, 2), "export_peak": e_peak,
            "export_process_peak": e_main, "export_worker_peak": e_worker,
            "inspect_s": round(i_time, 2), "inspect_peak": i_peak, "inspect_worker_peak": i_worker,
            "baseline_export_s": base and round(base[0], 2),
            "baseline_export_peak": base and max(base[1], base[2]),
            "readrds_s": round(r_read, 2),
            "readrds_peak": r_rss, "r_start_s": round(r_start, 2), "store_bytes": store}))
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
