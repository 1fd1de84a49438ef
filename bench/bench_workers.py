#!/usr/bin/python3
"""Benchmark of the reader workers (docs/design.md §2.4): what isolating the readers costs and
what it gains, as ratios of runs in-process (-o isolate=off) and isolated, in one run.

    /usr/bin/python3 bench/bench_workers.py                      # 4 sources of 20,000 x 2,000
    /usr/bin/python3 bench/bench_workers.py --sources 8 --cells 50000 --genes 5000

Input: a folder of --sources CSR h5ad files made by bench_layout.py's generator (different seeds).
Figures, each the median of --runs:
  (a) export of the folder: seconds in-process and isolated, ratio isolated / in-process;
  (b) mount, cold cache: one thread per source reads every chunk of its store at once (the
      sources' reads in parallel: in-process they share one HDF5 lock, isolated each has its
      own worker); seconds from the first read to the last byte, ratio in-process / isolated
      (above 1: isolation is faster);
  (c) the per-read cost of the proxy: export of one source (its layout pass reads the matrix in
      slabs through the worker), ratio isolated / in-process.
Mounts are unmounted whatever happens; the work folder is removed unless --keep.
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_layout import generate, warm  # noqa: E402


def default_binary():
    return os.environ.get("CELLUCID_FS", str(Path(__file__).resolve().parent.parent / "cellucid-fs"))


def export(binary, src, out, opts):
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    r = subprocess.run([binary, "export", "-o", opts, str(src), str(out)], capture_output=True)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"export failed (exit {r.returncode}):\n{r.stderr.decode(errors='replace')}")
    return dt


def chunk_files(store):
    return [p for p in store.rglob("*") if p.is_file() and not p.name.startswith(".")]


def read_store(store):
    n = 0
    for p in chunk_files(store):
        with open(p, "rb") as fh:
            n += len(fh.read())
    return n


def mounted_read(binary, src, work, opts, k):
    mnt, cache = work / f"mnt{k}", work / f"cache{k}"
    mnt.mkdir()
    proc = subprocess.Popen([binary, "mount", "-f", "-o", f"cache_dir={cache},{opts}", str(src),
                             str(mnt)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (mnt / "datasets.json").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit("the mount did not come up")
            time.sleep(0.05)
        ids = json.loads((mnt / "datasets.json").read_text())
        stores = sorted(p for p in mnt.iterdir() if p.name.endswith(".zarr"))
        t = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(len(stores)) as pool:
            total = sum(pool.map(read_store, stores))
        dt = time.perf_counter() - t
        assert total > 0 and ids
        return dt
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sources", type=int, default=4)
    ap.add_argument("--cells", type=int, default=20000)
    ap.add_argument("--genes", type=int, default=2000)
    ap.add_argument("--nnz-per-cell", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--binary", default=default_binary())
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    try:
        src = work / "src"
        src.mkdir()
        for i in range(a.sources):
            generate(src / f"s{i}.h5ad", a.cells, a.genes, a.nnz_per_cell, seed=i)
            warm(src / f"s{i}.h5ad")
        one = src / "s0.h5ad"
        modes = {"in-process": "isolate=off", "isolated": "isolate=on"}
        fig = {m: {"a": [], "b": [], "c": []} for m in modes}
        k = 0
        for _ in range(a.runs):
            for m, o in modes.items():
                fig[m]["a"].append(export(a.binary, src, work / "out", o))
                fig[m]["c"].append(export(a.binary, one, work / "out1", o))
                fig[m]["b"].append(mounted_read(a.binary, src, work, o, k))
                k += 1
        med = {m: {f: statistics.median(v) for f, v in fig[m].items()} for m in modes}
        print(f"{a.sources} sources of {a.cells} x {a.genes}, ~{a.nnz_per_cell} nnz/cell, "
              f"median of {a.runs}")
        print(f"(a) export of the folder: in-process {med['in-process']['a']:.2f} s, isolated "
              f"{med['isolated']['a']:.2f} s, isolated / in-process "
              f"{med['isolated']['a'] / med['in-process']['a']:.2f}")
        print(f"(b) mount, every chunk of every store, one thread per source: in-process "
              f"{med['in-process']['b']:.2f} s, isolated {med['isolated']['b']:.2f} s, "
              f"in-process / isolated {med['in-process']['b'] / med['isolated']['b']:.2f}")
        print(f"(c) export of one source (layout pass through the proxy): in-process "
              f"{med['in-process']['c']:.2f} s, isolated {med['isolated']['c']:.2f} s, "
              f"isolated / in-process {med['isolated']['c'] / med['in-process']['c']:.2f}")
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
