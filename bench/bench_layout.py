#!/usr/bin/python3
"""Benchmark of the layout engine (issue 3): prints figures as ratios against baselines measured
in the same run, on an input it generates.

    /usr/bin/python3 bench/bench_layout.py                   # 200,000 x 20,000, ~1,000 nnz/cell
    /usr/bin/python3 bench/bench_layout.py --cells 20000 --genes 5000 --nnz-per-cell 200   # quick

Input: a CSR float32 h5ad written by anndata (counts-like values, sorted column indices, ~the
asked number of nonzeros per cell, obsm X_umap). It goes to --workdir (default: a new folder
under /tmp, removed at the end unless --keep); --input reuses an h5ad made by an earlier --keep run.

Figures:
  (a) wall time of `cellucid-fs export -o memory=512M SRC OUT` (median of --export-runs runs,
      default 3) vs anndata.read_h5ad(SRC) + write_zarr (timed inside a fresh Python, imports
      excluded); ratio baseline / export.
      Target: >= 3x.
      The exports alternate with anndata's two jobs (export, (a)'s job, export, (a2)'s job,
      export): what the machine does to the first writes after a quiet spell or a mass deletion
      (see `discard`) then falls on both sides instead of on the exports alone.
  (a2) the same export against anndata doing the same job (issue 14 item 5): read_h5ad, the
      cells put in the same priority order, X.tocsc(), write_zarr (fresh Python, imports
      excluded; its peak RSS is printed too). Target: >= 3x.
  (a3) the same export against the floor measured in the same run: `cat SRC > /dev/null` plus
      writing the export's bytes (`cp -r` of the exported store: the same files and bytes).
      Target: export / floor <= 2.
  (a4) with --before BINARY: the same export by this build and by BINARY (another build, e.g.
      main's), --before-runs times each (default 4), in pairs whose order alternates, each after
      a sync; medians; ratio after / before. One run's figures (a)-(a3) move with the machine's
      load; alternating compares two builds under the same load.
  (b) peak RSS of `cellucid-fs export -o memory=256M SRC OUT`, from `/usr/bin/time -v` (Debian
      package `time`: apt-get install time; without it the figure comes from getrusage of the
      child). Target: <= 400 MB.
  (c) time to read one gene for all cells: from the export with zarr-python (X/indptr, then that
      gene's range of X/indices and X/data) vs from the source with anndata backed mode
      (read_h5ad(SRC, backed="r").X[:, g]); opening is not timed on either side; the mean over
      --read-genes genes spread over the gene axis; ratio baseline / export. Target: >= 100x.
      Each gene read from the export is checked against the source column.

The page cache is warmed with one sequential read of the source before anything is timed. No
output is deleted before a timed run: outputs are moved aside and deleted at the end (see
`discard`), since on an ext4 without a journal deleting a store's tens of thousands of files
slows the file creation that follows for the next seconds to minutes.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

warnings.simplefilter("ignore")

REPO = Path(__file__).resolve().parent.parent
MB = 1e6
TARGETS = {"a": 3.0, "b": 400.0, "c": 100.0}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def default_binary():
    return os.environ.get("CELLUCID_FS", str(REPO / "cellucid-fs"))


def dir_bytes(path):
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


# ---------------------------------------------------------------------------------------------
# the input


def print_table(rows):
    """rows of (figure, ours, baseline, ratio, target, met) as aligned columns."""
    head = ("figure", "cellucid-fs", "baseline (same run)", "ratio", "target", "met")
    table = [head] + [r[:5] + ("yes" if r[5] else "NO",) for r in rows]
    widths = [max(len(str(r[i])) for r in table) for i in range(len(head))]
    for r in table:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())


def generate(path, cells, genes, nnz_per_cell, seed, block=10_000):
    """CSR float32 h5ad, built block by block into preallocated arrays (about 8 bytes a nonzero
    for data + indices, then what anndata's write_h5ad needs)."""
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    k = min(nnz_per_cell, genes)
    cap = cells * k
    indices = np.empty(cap, dtype=np.int32)
    data = np.empty(cap, dtype=np.float32)
    indptr = np.zeros(cells + 1, dtype=np.int64)
    fill = 0
    for start in range(0, cells, block):
        stop = min(cells, start + block)
        cols = np.sort(rng.integers(0, genes, size=(stop - start, k), dtype=np.int32), axis=1)
        keep = np.ones(cols.shape, dtype=bool)
        keep[:, 1:] = cols[:, 1:] != cols[:, :-1]         # distinct genes within a cell
        counts = keep.sum(axis=1)
        got = cols[keep]
        m = got.size
        indices[fill:fill + m] = got
        data[fill:fill + m] = np.floor(rng.exponential(2.0, size=m)) + 1   # counts-like, >= 1
        indptr[start + 1:stop + 1] = fill + np.cumsum(counts)
        fill += m
    indices, data = indices[:fill], data[:fill]
    X = sp.csr_matrix((data, indices, indptr), shape=(cells, genes))
    obs = pd.DataFrame({"batch": pd.Categorical(rng.choice(["a", "b", "c", "d"], cells))},
                       index=[f"cell{i}" for i in range(cells)])
    var = pd.DataFrame(index=[f"gene{j}" for j in range(genes)])
    a = ad.AnnData(X, obs=obs, var=var, dtype=np.float32)
    a.obsm["X_umap"] = rng.standard_normal((cells, 2)).astype(np.float32)
    a.write_h5ad(path)
    return fill


def warm(path):
    with open(path, "rb") as fh:
        while fh.read(64 << 20):
            pass


# Outputs are not deleted between timed runs but moved aside, and deleted at the end: on an
# ext4 without a journal (this kind of machine's root), creating a file right after many were
# deleted makes the kernel skip each recently deleted inode (ext4 `recently_deleted`, a lookup
# per inode), which made a `cp -r` of one store take 5 to 19 s of system time and an export
# pay for the tree the run before it removed.
DISCARDED = []


def discard(path):
    path = Path(path)
    if not path.exists():
        return
    aside = path.parent / f".discarded-{len(DISCARDED)}-{path.name}"
    path.rename(aside)
    DISCARDED.append(aside)


def delete_discarded():
    while DISCARDED:
        shutil.rmtree(DISCARDED.pop(), ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# (a) export time vs anndata


def run_export(binary, src, out, memory):
    discard(out)
    t = time.perf_counter()
    r = subprocess.run([binary, "export", "-o", f"memory={memory}", str(src), str(out)],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"export failed (exit {r.returncode}):\n{r.stderr.decode(errors='replace')}")
    return dt


BASELINE = r"""
import sys, time, warnings
warnings.simplefilter("ignore")
import anndata as ad
t = time.perf_counter()
a = ad.read_h5ad(sys.argv[1])
a.write_zarr(sys.argv[2])
print(time.perf_counter() - t)
"""


SAME_JOB = r"""
import resource, sys, time, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, sys.argv[3])
import anndata as ad
from priority_reference import reference_order
t = time.perf_counter()
a = ad.read_h5ad(sys.argv[1])
a = a[reference_order(a.n_obs, 0)].copy()
a.X = a.X.tocsc()
a.write_zarr(sys.argv[2])
print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def compare_builds(binary, before, src, out, runs):
    """([seconds of this build's exports], [seconds of the other build's]). Each pair runs the
    builds in the other order than the pair before, after a sync: the export that runs second
    would otherwise always run while the first one's files are still written back."""
    after_s, before_s = [], []
    for i in range(runs):
        for which in ((0, 1) if i % 2 == 0 else (1, 0)):
            discard(out)
            os.sync()
            t = run_export(binary if which == 0 else before, src, out, "512M")
            (after_s if which == 0 else before_s).append(t)
    discard(out)
    return after_s, before_s


def run_same_job_baseline(src, out):
    """(seconds, peak RSS bytes) of anndata making what the export makes: cells in priority
    order, X gene-major."""
    discard(out)
    r = subprocess.run([sys.executable, "-c", SAME_JOB, str(src), str(out), str(REPO / "tests")],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        sys.exit(f"anndata same-job baseline failed:\n{r.stderr.decode(errors='replace')}")
    secs, rss = r.stdout.decode().strip().splitlines()[-1].split()
    discard(out)
    return float(secs), int(rss)


def floor_seconds(src, store, copy):
    """(seconds to read src, seconds to write store's files again): the least an export does."""
    t = time.perf_counter()
    subprocess.run(["sh", "-c", 'cat "$1" > /dev/null', "sh", str(src)], check=True)
    t_read = time.perf_counter() - t
    discard(copy)
    t = time.perf_counter()
    subprocess.run(["cp", "-r", str(store), str(copy)], check=True)
    t_write = time.perf_counter() - t
    discard(copy)
    return t_read, t_write


def run_anndata_baseline(src, out):
    discard(out)
    r = subprocess.run([sys.executable, "-c", BASELINE, str(src), str(out)],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        sys.exit(f"anndata baseline failed:\n{r.stderr.decode(errors='replace')}")
    return float(r.stdout.decode().strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# (b) peak RSS


RUSAGE = r"""
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def peak_rss(binary, src, out, memory):
    """(peak RSS in bytes, how it was measured)."""
    discard(out)
    cmd = [binary, "export", "-o", f"memory={memory}", str(src), str(out)]
    if os.access("/usr/bin/time", os.X_OK):
        r = subprocess.run(["/usr/bin/time", "-v", *cmd], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        err = r.stderr.decode(errors="replace")
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
        if r.returncode != 0 or not m:
            sys.exit(f"/usr/bin/time -v export failed (exit {r.returncode}):\n{err[-2000:]}")
        return int(m.group(1)) * 1024, "/usr/bin/time -v"
    log("note: /usr/bin/time is missing (Debian package `time`); using getrusage of the child")
    r = subprocess.run([sys.executable, "-c", RUSAGE, *cmd], stdout=subprocess.PIPE)
    rc, kb = r.stdout.decode().split()
    if int(rc) != 0:
        sys.exit(f"export -o memory={memory} failed (exit {rc})")
    return int(kb) * 1024, "getrusage(RUSAGE_CHILDREN)"


# ---------------------------------------------------------------------------------------------
# (c) one gene for all cells


def gene_reads(store, src, genes_to_read, n_genes):
    """(mean export seconds, mean backed seconds, note) over genes spread over the gene axis."""
    import anndata as ad
    import scipy.sparse as sp
    import zarr

    genes = sorted({int(round(x)) for x in np.linspace(0, n_genes - 1, genes_to_read)})
    g = zarr.open_consolidated(str(store), mode="r")
    enc = g["X"].attrs.get("encoding-type")
    if enc != "csc_matrix":
        return None, None, f"X is {enc} in the export, not csc_matrix: no gene-major read to time"
    pos = g["obs/cellucid_original_position"][:] if "cellucid_original_position" in g["obs"] else None
    backed = ad.read_h5ad(src, backed="r")

    t_store, t_backed = [], []
    for k in genes:
        t = time.perf_counter()
        indptr = g["X/indptr"][:]
        lo, hi = int(indptr[k]), int(indptr[k + 1])
        rows = g["X/indices"][lo:hi]
        vals = g["X/data"][lo:hi]
        t_store.append(time.perf_counter() - t)

        t = time.perf_counter()
        col = backed.X[:, k]
        t_backed.append(time.perf_counter() - t)

        # the export's gene equals the source column
        col = sp.csc_matrix(col) if sp.issparse(col) else sp.csc_matrix(np.asarray(col).reshape(-1, 1))
        src_rows = pos[rows] if pos is not None else rows
        want = dict(zip(col.indices.tolist(), col.data.tolist()))
        have = dict(zip(np.asarray(src_rows).tolist(), np.asarray(vals).tolist()))
        if want != have or len(have) != hi - lo:
            sys.exit(f"gene {k}: the export's values differ from the source column")
    backed.file.close()
    return float(np.mean(t_store)), float(np.mean(t_backed)), f"genes {genes}, each checked against the source"


# ---------------------------------------------------------------------------------------------


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cells", type=int, default=200_000)
    p.add_argument("--genes", type=int, default=20_000)
    p.add_argument("--nnz-per-cell", type=int, default=1_000)
    p.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    p.add_argument("--read-genes", type=int, default=5, help="genes averaged in (c) (default 5)")
    p.add_argument("--workdir", help="where the input and the stores go (default: a new folder under /tmp)")
    p.add_argument("--keep", action="store_true", help="keep the work folder")
    p.add_argument("--input", help="an existing CSR h5ad to use instead of generating one")
    p.add_argument("--binary", default=default_binary(), help="cellucid-fs (default $CELLUCID_FS or <repo>/cellucid-fs)")
    p.add_argument("--before", help="another cellucid-fs build to compare exports with, alternating (a4)")
    p.add_argument("--export-runs", type=int, default=3, help="exports timed for (a)-(a3), median (default 3)")
    p.add_argument("--before-runs", type=int, default=4, help="exports of each build in (a4), median (default 4)")
    args = p.parse_args()

    binary = str(Path(args.binary).resolve())
    if not os.access(binary, os.X_OK):
        sys.exit(f"{binary}: not an executable cellucid-fs; build it or pass --binary")
    made_workdir = args.workdir is None
    work = Path(tempfile.mkdtemp(prefix="cfs-bench-", dir="/tmp") if made_workdir else args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    try:
        if args.input:
            src = Path(args.input).resolve()
            import h5py

            with h5py.File(src, "r") as f:
                cells, genes = (int(x) for x in f["X"].attrs["shape"])
                nnz = int(f["X/data"].shape[0])
        else:
            src = work / "bench.h5ad"
            cells, genes = args.cells, args.genes
            log(f"generating {cells} x {genes}, ~{args.nnz_per_cell} nonzeros a cell -> {src}")
            t = time.perf_counter()
            nnz = generate(src, cells, genes, args.nnz_per_cell, args.seed)
            log(f"  {nnz} nonzeros, {src.stat().st_size / MB:.0f} MB, {time.perf_counter() - t:.1f} s")
        warm(src)

        version = subprocess.run([binary, "--version"], stdout=subprocess.PIPE).stdout.decode().strip()
        log(f"(a), (a2): {args.export_runs} exports -o memory=512M, anndata's two jobs between "
            "the first ones ...")
        a_runs, baselines = [], {}
        os.sync()
        n_exports = max(args.export_runs, 1)
        for k in range(n_exports):
            a_runs.append(run_export(binary, src, work / "out512", "512M"))
            if k == 0:
                log("(a) anndata read_h5ad + write_zarr ...")
                baselines["anndata"] = run_anndata_baseline(src, work / "anndata.zarr")
            if k == 1 or n_exports == 1:
                log("(a2) anndata read_h5ad, priority order, tocsc, write_zarr ...")
                baselines["same"] = run_same_job_baseline(src, work / "samejob.zarr")
        t_export = statistics.median(a_runs)
        store = work / "out512" / f"{src.stem}.zarr"
        t_anndata = baselines["anndata"]
        t_same, rss_same = baselines["same"]
        log("(a3) the floor: cat SRC > /dev/null, cp -r of the export ...")
        t_read, t_write = floor_seconds(src, store, work / "floor.zarr")
        t_floor = t_read + t_write
        before = None
        if args.before:
            log(f"(a4) export by this build and by {args.before}, alternated {args.before_runs} times ...")
            before = compare_builds(binary, str(Path(args.before).resolve()), src, work / "cmp",
                                    args.before_runs)
        log("(b) export -o memory=256M under /usr/bin/time -v ...")
        rss, rss_how = peak_rss(binary, src, work / "out256", "256M")
        log("(c) one gene for all cells ...")
        g_store, g_backed, g_note = gene_reads(store, src, args.read_genes, genes)

        ratio_a = t_anndata / t_export
        rss_mb = rss / MB
        ratio_c = g_backed / g_store if g_store else None
        rows = [
            ("(a) export time", f"{t_export:.2f} s",
             f"anndata read_h5ad + write_zarr {t_anndata:.2f} s",
             f"{ratio_a:.1f}x faster", f">= {TARGETS['a']:.0f}x", ratio_a >= TARGETS["a"]),
            ("(a2) export, the same job", f"{t_export:.2f} s",
             f"anndata + priority order + tocsc {t_same:.2f} s, {rss_same / MB:.0f} MB",
             f"{t_same / t_export:.1f}x faster", f">= {TARGETS['a']:.0f}x", t_same / t_export >= TARGETS["a"]),
            ("(a3) export against the floor", f"{t_export:.2f} s",
             f"cat SRC {t_read:.2f} s + cp -r store {t_write:.2f} s",
             f"{t_export / t_floor:.1f}x the floor", "<= 2x", t_export / t_floor <= 2.0),
        ]
        if before:
            after_s, before_s = statistics.median(before[0]), statistics.median(before[1])
            rows.append(("(a4) export, this build against --before", f"{after_s:.2f} s",
                         f"--before build {before_s:.2f} s (medians of {len(before[0])})",
                         f"{after_s / before_s:.2f} of the time", "<= 1", after_s <= before_s))
        rows += [
            ("(b) peak RSS, -o memory=256M", f"{rss_mb:.0f} MB", rss_how,
             "", f"<= {TARGETS['b']:.0f} MB", rss_mb <= TARGETS["b"]),
            ("(c) one gene, all cells",
             f"{g_store * 1e3:.2f} ms" if g_store else "n/a",
             f"anndata backed X[:, g] {g_backed * 1e3:.1f} ms" if g_backed else "n/a",
             f"{ratio_c:.0f}x faster" if ratio_c else "n/a", f">= {TARGETS['c']:.0f}x",
             bool(ratio_c and ratio_c >= TARGETS["c"])),
        ]
        print(f"cellucid-fs layout benchmark: {version}")
        print(f"input: {cells} cells x {genes} genes, CSR float32, {nnz} nonzeros "
              f"({nnz / cells:.0f} a cell), {src.stat().st_size / MB:.0f} MB h5ad")
        print(f"export store: {dir_bytes(store) / MB:.0f} MB; anndata write_zarr store: "
              f"{dir_bytes(work / 'anndata.zarr') / MB:.0f} MB; machine: {os.cpu_count()} CPUs")
        print(f"(c): {g_note}")
        print()
        print_table(rows)
        print()
        print(json.dumps({
            "cells": cells, "genes": genes, "nnz": nnz,
            "export_s": round(t_export, 3), "export_a_runs_s": [round(x, 3) for x in a_runs],
            "anndata_s": round(t_anndata, 3), "ratio_a": round(ratio_a, 2),
            "same_job_s": round(t_same, 3), "same_job_rss_mb": round(rss_same / MB, 1),
            "ratio_a2": round(t_same / t_export, 2), "floor_read_s": round(t_read, 3),
            "floor_write_s": round(t_write, 3), "ratio_a3": round(t_export / t_floor, 2),
            "peak_rss_mb_256M": round(rss_mb, 1),
            "gene_read_export_ms": round(g_store * 1e3, 3) if g_store else None,
            "gene_read_backed_ms": round(g_backed * 1e3, 3) if g_backed else None,
            "ratio_c": round(ratio_c, 1) if ratio_c else None,
            "export_runs_s": [round(x, 3) for x in before[0]] if before else None,
            "before_runs_s": [round(x, 3) for x in before[1]] if before else None,
        }))
    finally:
        delete_discarded()
        if args.keep:
            log(f"kept {work}")
        elif made_workdir:
            shutil.rmtree(work, ignore_errors=True)
        else:
            for name in ("bench.h5ad", "out512", "out256", "anndata.zarr", "cmp"):
                q = work / name
                if name == "bench.h5ad" and args.input:
                    continue
                shutil.rmtree(q, ignore_errors=True) if q.is_dir() else q.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
