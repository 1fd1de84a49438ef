#!/usr/bin/env python3
"""A large Seurat object (.rds) exported: time and peak memory, against R reading the same file.

R writes the input at benchmark time (Rscript with Debian's r-cran-seurat): --cells cells x
--genes genes (default 200,000 x 2,000), --per-cell nonzeros a cell drawn at random (default
100; repeats summed), counts as a dgCMatrix, NormalizeData's log-normalised data beside them,
and a 2-d "umap" reduction, saved with saveRDS (gzip, R's default). Then, in one run:

  (a) `cellucid-fs export -o memory=256M` of the file: wall time, and the peak RSS of the largest
      process (the export or its reader worker: getrusage(RUSAGE_CHILDREN)'s ru_maxrss);
  (b) the baseline: `Rscript -e 'x <- readRDS(f)'` alone, its wall time and peak RSS;
  (c) with --baseline-binary, (a) for another build too (e.g. main before a change).

Output: a table with the ratios, then one JSON line with the raw figures. Every process is
run to its end; the work folder (--workdir, default under /tmp) is removed unless --keep.
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

R_WRITER = r"""
args <- commandArgs(trailingOnly = TRUE)
n <- as.integer(args[1]); g <- as.integer(args[2]); k <- as.integer(args[3]); out <- args[4]
suppressMessages({library(Matrix); library(Seurat)})
set.seed(1)
m <- sparseMatrix(i = sample.int(g, n * k, replace = TRUE), j = rep(seq_len(n), each = k),
                  x = as.numeric(rpois(n * k, 2) + 1), dims = c(g, n),
                  dimnames = list(paste0("G", seq_len(g)), paste0("C", seq_len(n))))
s <- CreateSeuratObject(counts = m)
s <- NormalizeData(s, verbose = FALSE)
emb <- matrix(rnorm(n * 2), n, 2, dimnames = list(colnames(s), c("UMAP_1", "UMAP_2")))
s[["umap"]] <- CreateDimReducObject(embeddings = emb, key = "UMAP_", assay = "RNA")
saveRDS(s, out)
"""


def default_binary():
    return os.environ.get("CELLUCID_FS") or str(Path(__file__).resolve().parent.parent / "cellucid-fs")


def run_measured(argv):
    """(seconds, peak RSS in bytes of the largest process it started) of one child process.
    RUSAGE_CHILDREN is the maximum over every child waited for so far, so each measurement runs
    in a fresh Python whose only child is argv."""
    probe = ("import resource, subprocess, sys, time\n"
             "t = time.perf_counter()\n"
             "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
             "dt = time.perf_counter() - t\n"
             "if r.returncode: sys.stderr.write(r.stderr.decode(errors='replace')); sys.exit(r.returncode)\n"
             "print(dt, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\n")
    r = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{' '.join(map(str, argv))} failed:\n{r.stderr[-3000:]}")
    dt, rss = r.stdout.split()
    return float(dt), int(rss)


def export(binary, src, out, memory):
    shutil.rmtree(out, ignore_errors=True)
    return run_measured([binary, "export", "-o", f"memory={memory}", src, out])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cells", type=int, default=200_000)
    p.add_argument("--genes", type=int, default=2_000)
    p.add_argument("--per-cell", type=int, default=100)
    p.add_argument("--memory", default="256M", help="export's -o memory (default 256M)")
    p.add_argument("--binary", default=default_binary())
    p.add_argument("--baseline-binary", help="another build, measured in the same run")
    p.add_argument("--input", help="an existing .rds to use instead of writing one")
    p.add_argument("--workdir")
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="cfs-bench-rds-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        src = Path(args.input) if args.input else work / "seurat.rds"
        if not args.input:
            print(f"writing {args.cells} x {args.genes}, {args.per_cell} nonzeros a cell, with R ...",
                  file=sys.stderr)
            script = work / "write.R"
            script.write_text(R_WRITER)
            t = time.perf_counter()
            subprocess.run(["Rscript", script, str(args.cells), str(args.genes),
                            str(args.per_cell), src], check=True)
            print(f"  {src.stat().st_size / 2**20:.0f} MB in {time.perf_counter() - t:.0f} s",
                  file=sys.stderr)
        subprocess.run(["cat", src], stdout=subprocess.DEVNULL, check=True)   # warm the page cache
        print("R readRDS ...", file=sys.stderr)
        r_s, r_rss = run_measured(["Rscript", "-e", f"x <- readRDS('{src}')"])
        print("cellucid-fs export ...", file=sys.stderr)
        c_s, c_rss = export(args.binary, src, work / "out", args.memory)
        b = None
        if args.baseline_binary:
            print("baseline build's export ...", file=sys.stderr)
            b = export(args.baseline_binary, src, work / "out-baseline", args.memory)
        rows = [("R readRDS alone", r_s, r_rss, "", ""),
                (f"export -o memory={args.memory}", c_s, c_rss, f"{c_s / r_s:.2f}", f"{c_rss / r_rss:.2f}")]
        if b:
            rows.append((f"baseline build's export", b[0], b[1], f"{b[0] / r_s:.2f}", f"{b[1] / r_rss:.2f}"))
        print(f"\ninput: {src.name}, {src.stat().st_size / 2**20:.0f} MB ({args.cells} x {args.genes}, "
              f"{args.per_cell} nonzeros a cell drawn)")
        print(f"{'':34} {'seconds':>9} {'peak RSS MB':>12} {'time / R':>9} {'RSS / R':>8}")
        for name, s, rss, tr, mr in rows:
            print(f"{name:34} {s:9.1f} {rss / 2**20:12.0f} {tr:>9} {mr:>8}")
        print(json.dumps({"cells": args.cells, "genes": args.genes, "per_cell": args.per_cell,
                          "rds_mb": round(src.stat().st_size / 2**20, 1), "memory": args.memory,
                          "r_s": round(r_s, 2), "r_rss_mb": round(r_rss / 2**20),
                          "export_s": round(c_s, 2), "export_rss_mb": round(c_rss / 2**20),
                          "baseline_s": b and round(b[0], 2),
                          "baseline_rss_mb": b and round(b[1] / 2**20)}))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
