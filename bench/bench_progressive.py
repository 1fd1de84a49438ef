#!/usr/bin/python3
"""Benchmark of progressive reading (issue 14, items 1-4): what a share of the cells and one gene
cost over HTTP, on inputs it generates, with nginx (Debian) serving mounts and exports. Every
figure is printed next to its baseline measured in the same run, as a ratio.

    /usr/bin/python3 bench/bench_progressive.py --baseline-binary /tmp/cfs-base/cellucid-fs
    /usr/bin/python3 bench/bench_progressive.py --small 20000 --large 200000 \\
        --gene-cells 20000 --gene-genes 2000 --gene-nnz 200        # a quick check

Inputs (bench_layout.py's generator: CSR float32 h5ad, obs index `cell<i>`, categorical `batch`,
obsm X_umap):
  - the view inputs: --small (100,000) and --large (1,000,000) cells x --view-genes (200) genes,
    --view-nnz (20) nonzeros a cell;
  - the gene input: --gene-cells (200,000) x --gene-genes (20,000), --gene-nnz (1,000) nonzeros a
    cell (bench_layout.py's default input).

With --baseline-binary (another build, e.g. main before this change) every figure is also
measured for it, in the same run, and the two are compared ("before" / "after").

Figures:
  (a) cold first view: a new mount on an empty cache (nginx already serving its folder); from the
      moment it serves, over HTTP on one keep-alive connection: .zmetadata, then the chunks
      holding the first level (the first levels[0] = 1,024 cells) of obs/_index, of obs/batch
      (codes, then categories) and of obsm/X_umap. Median of --cold-runs runs. Shown for the
      small and the large input, and their ratio large / small (target <= 1.5). (a') is the same
      timed from the start of `cellucid-fs mount`. Bytes are checked against the export.
  (a2) cold whole columns: the same mount, continuing until every chunk of those three arrays
      has been read (what issue 4's "cold first view" measured).
  (b) warm whole column: every chunk of obs/_index, obs/batch/codes and obsm/X_umap through nginx
      on the mount after (a) (every chunk made, the kernel's cache warm after one pass), (b1) on
      one keep-alive connection, one request at a time, (b6) on 6 connections at once (a
      browser's per-host limit), (bp) on one connection with every request sent at once (HTTP/1.1
      pipelining, as an HTTP/2 client multiplexes); median of --passes passes. Ratio after /
      before, target <= 1.2. Then (b1) and (bp) again from nginx on the export (the same chunk
      files on the work folder's own filesystem, no FUSE): what the chunk count costs over HTTP
      by itself, after / before, and the mount against those plain files.
  (c) one gene over HTTP, from nginx on the export of the gene input: for --read-genes (50) genes
      spread over the gene axis, X/indptr's chunk(s), then every chunk of X/data and X/indices
      that the gene's range touches. Bytes fetched (data + indices) against that range's share of
      the compressed bytes (each touched chunk's size times the part of it in the range): median
      and worst over the genes (target: median <= 3); the same for the range's prefix of the
      first chunk-aligned level (the gene's cells among the first 16,384: the entries with a row
      index below it); time per gene (the gene's requests one after another, warm, median of 3
      rounds). And the chunk count of X/data (<= 100,000).
  (d) the cold first gene: a new mount on an empty cache of the gene input; from the moment it
      serves, zarr-python opens the store and reads one gene (X/indptr, then the gene's range of
      X/indices and X/data; a gene three quarters along the axis, so not among the first
      buckets in order), checked against the source column; the mount is then stopped (the rest
      of the pass is cancelled). Against anndata's backed X[:, g] on the same CSR h5ad (opening
      not timed), in the same run, runs interleaved; median of --cold-runs. Target: <= 2.
      --skip-gene-http leaves (c) out and keeps (d).
"""

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np

warnings.simplefilter("ignore")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_layout  # noqa: E402  (the generator)
import bench_mount as bm  # noqa: E402  (mounts, nginx, HTTP client, cleanup)
from bench_layout import MB, default_binary, log, print_table, warm  # noqa: E402

VIEW_ARRAYS = ("obs/_index", "obs/batch/codes", "obs/batch/categories", "obsm/X_umap")
WHOLE_ARRAYS = ("obs/_index", "obs/batch/codes", "obsm/X_umap")
LEVEL = 16384


def zarray_of(meta, arr):
    return meta["metadata"][f"{arr}/.zarray"]


def chunk_keys_for_rows(za, rows):
    """Keys of the chunks holding rows [0, rows) (every chunk along the other axes)."""
    keys = bm.chunk_keys(za)
    if not za["shape"]:
        return keys
    last = max(0, math.ceil(min(rows, za["shape"][0]) / za["chunks"][0]) - 1)
    return [k for k in keys if int(k.split(".")[0]) <= last]


def store_id_of(src):
    return Path(src).name[: -len(".h5ad")]


# ---------------------------------------------------------------------------------------------
# (a), (a2): cold first view and cold whole columns


def cold_run(binary, src, work, nginx, tag, run, out_store):
    """One fresh mount: the first view, then the rest of the three columns. Returns a dict of
    seconds (mounted, view, whole) and the mount (left mounted)."""
    mnt = work / f"mnt-{tag}"
    cache = work / f"cache-{tag}-{run}"
    shutil.rmtree(cache, ignore_errors=True)
    store_id = store_id_of(src)
    client = bm.Client(nginx.port)
    t0 = time.perf_counter()
    m = bm.mount(binary, src.parent, mnt, cache, [], work / "logs")
    t_mounted = time.perf_counter() - t0
    meta_raw = client.get_ok(f"{store_id}.zarr/.zmetadata")
    meta = json.loads(meta_raw)
    got = {".zmetadata": meta_raw}
    steps = [(".zmetadata", time.perf_counter() - t0 - t_mounted)]
    first = min(1024, zarray_of(meta, "obs/_index")["shape"][0])    # levels[0]
    for arr in VIEW_ARRAYS:
        t = time.perf_counter()
        for k in chunk_keys_for_rows(zarray_of(meta, arr), first):
            got[f"{arr}/{k}"] = client.get_ok(f"{store_id}.zarr/{arr}/{k}")
        steps.append((arr, time.perf_counter() - t))
    t_view = time.perf_counter() - t0
    view_files = len(got) - 1
    for arr in WHOLE_ARRAYS:
        for k in bm.chunk_keys(zarray_of(meta, arr)):
            if f"{arr}/{k}" not in got:
                got[f"{arr}/{k}"] = client.get_ok(f"{store_id}.zarr/{arr}/{k}")
    t_whole = time.perf_counter() - t0
    client.close()
    for rel, body in got.items():
        if rel != ".zmetadata" and body != (out_store / rel).read_bytes():
            raise RuntimeError(f"(a) {rel} over HTTP from the mount differs from the export")
    return {"mounted": t_mounted, "view": t_view - t_mounted, "view_with_mount": t_view,
            "whole": t_whole - t_mounted, "view_files": view_files, "steps": steps,
            "reader": m.status()["sources"][0].get("reader")}, m


def fetch_pass(port, store_id, keys, connections):
    """Seconds to fetch every key, on `connections` keep-alive connections at once."""
    parts = [keys[i::connections] for i in range(connections)]
    errors = []

    def one(part):
        c = bm.Client(port)
        try:
            for k in part:
                c.get_ok(f"{store_id}.zarr/{k}")
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
        finally:
            c.close()

    threads = [threading.Thread(target=one, args=(p,)) for p in parts]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    dt = time.perf_counter() - t
    if errors:
        raise RuntimeError(f"(b) {errors[:3]}")
    return dt


def pipelined_pass(port, store_id, keys):
    """Seconds to fetch every key on one connection, every request sent at once (HTTP/1.1
    pipelining: what an HTTP/2 client's multiplexing does), each response read whole."""
    import socket

    t = time.perf_counter()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"".join(f"GET {bm.quote(f'{store_id}.zarr/{k}')} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
                          for k in keys))
    f = sock.makefile("rb")
    for k in keys:
        status = f.readline()
        length = None
        while (line := f.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if not status.startswith(b"HTTP/1.1 200") or length is None or len(f.read(length)) != length:
            raise RuntimeError(f"(b) pipelined GET {k}: {status!r}")
    dt = time.perf_counter() - t
    f.close()
    sock.close()
    return dt


def warm_passes(port, store_id, keys, passes, connections=(1,)):
    """(b) on one server, its kernel cache warmed by a first pass: the median of `passes` passes
    on each of `connections` ("b<c>"), pipelined ("bp"), and pipelined per array."""
    fetch_pass(port, store_id, keys, 1)
    out = {f"b{c}": statistics.median(fetch_pass(port, store_id, keys, c) for _ in range(passes))
           for c in connections}
    out["bp"] = statistics.median(pipelined_pass(port, store_id, keys) for _ in range(passes))
    out["per_array"] = {a: statistics.median(pipelined_pass(port, store_id, [k for k in keys if k.startswith(a + "/")])
                                             for _ in range(passes)) for a in WHOLE_ARRAYS}
    return out


def plain_files(args, side, tag, out, work, store_id, keys):
    """(b) again on the export: the same chunk files served by nginx from the work folder's own
    filesystem, no FUSE. What a column's chunk count costs over HTTP by itself."""
    nginx = bm.nginx_on(out, work / f"nginx-plain-{tag}")
    try:
        b = warm_passes(nginx.port, store_id, keys, args.passes)
    finally:
        nginx.stop()
    log(f"  {side} {tag} the same from the export's plain files: 1 connection {b['b1'] * 1e3:.1f} ms, "
        f"pipelined {b['bp'] * 1e3:.1f} ms (" +
        ", ".join(f"{a} {v * 1e3:.1f}" for a, v in b["per_array"].items()) + ")")
    return b


def views(args, side, binary, src, work, tag):
    """(a), (a2) and (b) for one binary on one input: medians."""
    out = work / f"export-{tag}"
    bm.run_export(binary, src.parent, out, [])
    out_store = out / f"{store_id_of(src)}.zarr"
    (work / f"mnt-{tag}").mkdir(exist_ok=True)
    nginx = bm.nginx_on(work / f"mnt-{tag}", work / f"nginx-{tag}")
    runs, m = [], None
    for run in range(args.cold_runs):
        if m is not None and m.stop():
            raise RuntimeError("unclean unmount")
        r, m = cold_run(binary, src, work, nginx, tag, run, out_store)
        runs.append(r)
        log(f"  {side} {tag} run {run + 1}: mount {r['mounted'] * 1e3:.0f} ms, first view "
            f"{r['view'] * 1e3:.1f} ms ({r['view_files']} files: "
            + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in r["steps"])
            + f"), whole columns {r['whole'] * 1e3:.0f} ms; reader {r['reader']}")
    store_id = store_id_of(src)
    meta = json.loads((out_store / ".zmetadata").read_bytes())
    keys = [f"{a}/{k}" for a in WHOLE_ARRAYS for k in bm.chunk_keys(zarray_of(meta, a))]
    nbytes = sum((out_store / k).stat().st_size for k in keys)
    warm = warm_passes(nginx.port, store_id, keys, args.passes, connections=(1, 6))
    b1, b6, bp, per = warm["b1"], warm["b6"], warm["bp"], warm["per_array"]
    log(f"  {side} {tag} warm whole columns: 1 connection {b1 * 1e3:.1f} ms, 6 {b6 * 1e3:.1f} ms, pipelined "
        f"{bp * 1e3:.1f} ms (" + ", ".join(f"{a} {v * 1e3:.1f}" for a, v in per.items()) + f"); {len(keys)} files, "
        f"{nbytes / MB:.2f} MB")
    nginx.stop()
    if m.stop():
        raise RuntimeError("unclean unmount")
    plain = plain_files(args, side, tag, out, work, store_id, keys)
    med = {k: statistics.median(r[k] for r in runs) for k in ("mounted", "view", "view_with_mount", "whole")}
    med.update(b1=b1, b6=b6, bp=bp, per_array=per, files=len(keys), bytes=nbytes, view_files=runs[0]["view_files"],
               runs=[round(r["view"], 4) for r in runs], plain=plain)
    shutil.rmtree(out, ignore_errors=True)
    return med


# ---------------------------------------------------------------------------------------------
# (c): one gene


def chunk_span(c, lo, hi):
    """Chunk indices touched by elements [lo, hi) with c elements a chunk."""
    return range(lo // c, (hi - 1) // c + 1) if hi > lo else range(0)


def gene_ranges(store, genes_at):
    """(lo, hi) of each gene and its entries among the first LEVEL cells, from the store."""
    import zarr

    g = zarr.open_consolidated(str(store), mode="r")
    indptr = np.asarray(g["X/indptr"][:], dtype=np.int64)
    indices = g["X/indices"]
    out = []
    for gene in genes_at:
        lo, hi = int(indptr[gene]), int(indptr[gene + 1])
        rows = np.asarray(indices[lo:hi])
        out.append((lo, hi, int(np.searchsorted(rows, LEVEL))))
    return out


def gene_figures(args, side, binary, src, work, ranges_ref):
    out = work / f"export-genes-{side}"
    t = time.perf_counter()
    bm.run_export(binary, src.parent, out, [])
    t_export = time.perf_counter() - t
    store_id = store_id_of(src)
    store = out / f"{store_id}.zarr"
    nginx = bm.nginx_on(out, work / f"nginx-genes-{side}")
    za = {p: json.loads((store / "X" / p / ".zarray").read_bytes()) for p in ("data", "indices", "indptr")}
    client = bm.Client(nginx.port)
    rows = []
    for gene, (lo, hi, cut) in ranges_ref:
        rounds = []
        fetched = 0
        for _ in range(3):
            t = time.perf_counter()
            cp = za["indptr"]["chunks"][0]
            for i in sorted({gene // cp, (gene + 1) // cp}):
                client.get_ok(f"{store_id}.zarr/X/indptr/{i}")
            fetched = 0
            for p in ("data", "indices"):
                for i in chunk_span(za[p]["chunks"][0], lo, hi):
                    fetched += len(client.get_ok(f"{store_id}.zarr/X/{p}/{i}"))
            rounds.append(time.perf_counter() - t)
        share = pre_fetch = pre_share = 0.0
        for p in ("data", "indices"):
            c, n = za[p]["chunks"][0], za[p]["shape"][0]
            for span, acc in (((lo, hi), "all"), ((lo, lo + cut), "pre")):
                for i in chunk_span(c, *span):
                    clen = min(c, n - i * c)
                    part = min(span[1], (i + 1) * c) - max(span[0], i * c)
                    size = (store / "X" / p / str(i)).stat().st_size
                    if acc == "all":
                        share += size * part / clen
                    else:
                        pre_share += size * part / clen
                        pre_fetch += size
        rows.append({"gene": gene, "nnz": hi - lo, "first_level_nnz": cut, "fetched": fetched,
                     "share": share, "ratio": fetched / share if share else float("nan"),
                     "prefix_fetched": pre_fetch, "prefix_share": pre_share,
                     "prefix_ratio": pre_fetch / pre_share if pre_share else float("nan"),
                     "seconds": statistics.median(rounds)})
    client.close()
    nginx.stop()
    nchunks = math.ceil(za["data"]["shape"][0] / za["data"]["chunks"][0])
    ratios = [r["ratio"] for r in rows]
    pre = [r["prefix_ratio"] for r in rows if not math.isnan(r["prefix_ratio"])]
    res = {"chunk": za["data"]["chunks"][0], "chunks": nchunks, "export_s": t_export,
           "median_ratio": statistics.median(ratios), "worst_ratio": max(ratios),
           "median_prefix_ratio": statistics.median(pre) if pre else float("nan"),
           "worst_prefix_ratio": max(pre) if pre else float("nan"),
           "median_fetched": statistics.median(r["fetched"] for r in rows),
           "median_share": statistics.median(r["share"] for r in rows),
           "median_seconds": statistics.median(r["seconds"] for r in rows),
           "median_nnz": statistics.median(r["nnz"] for r in rows)}
    shutil.rmtree(out, ignore_errors=True)
    return res


# ---------------------------------------------------------------------------------------------
# (d): the first gene on a fresh mount


def backed_gene(src, gene):
    """(seconds, column as {source row: value}) of anndata's backed X[:, gene] (opening not timed)."""
    import anndata as ad
    import scipy.sparse as sp

    a = ad.read_h5ad(src, backed="r")
    t = time.perf_counter()
    col = a.X[:, gene]
    dt = time.perf_counter() - t
    a.file.close()
    col = sp.csc_matrix(col)
    return dt, dict(zip(col.indices.tolist(), col.data.tolist()))


def first_gene_run(binary, src, work, side, run, gene, want):
    """Seconds from a fresh mount's first read to one gene read whole with zarr-python (X/indptr,
    then the gene's range of X/indices and X/data), then checked against the source column; the
    mount is stopped at once (the rest of the layout pass is cancelled)."""
    import zarr

    cache = work / f"cache-first-{side}-{run}"
    shutil.rmtree(cache, ignore_errors=True)
    m = bm.mount(binary, src.parent, work / f"mnt-first-{side}", cache, [], work / "logs")
    try:
        t = time.perf_counter()
        g = zarr.open_consolidated(str(m.mnt / f"{store_id_of(src)}.zarr"), mode="r")
        ptr = g["X/indptr"][gene:gene + 2]
        lo, hi = int(ptr[0]), int(ptr[1])
        rows = np.asarray(g["X/indices"][lo:hi])
        vals = np.asarray(g["X/data"][lo:hi])
        dt = time.perf_counter() - t
        st = m.status()["sources"][0]
        pos = np.asarray(g["obs/cellucid_original_position"][:])
        have = dict(zip(pos[rows].tolist(), vals.tolist()))
        if have != want or len(have) != hi - lo:
            raise RuntimeError(f"(d) gene {gene} from the mount differs from the source column")
    finally:
        if m.stop():
            raise RuntimeError("unclean unmount")
    shutil.rmtree(cache, ignore_errors=True)
    return dt, st.get("progress")


def first_gene_figures(args, binaries, src, work, gene):
    """(d): the median over --cold-runs runs of each binary and of anndata, runs interleaved."""
    times = {side: [] for side in binaries}
    times["anndata"] = []
    want = None
    for run in range(args.cold_runs):
        dt, want = backed_gene(src, gene)
        times["anndata"].append(dt)
        for side, binary in binaries.items():
            dt, progress = first_gene_run(binary, src, work, side, run, gene, want)
            times[side].append(dt)
            log(f"  (d) run {run + 1}, {side}: {dt:.2f} s (the pass then: {progress}); anndata backed "
                f"{times['anndata'][-1]:.2f} s")
    return {"gene": gene, "nnz": len(want), **{k: statistics.median(v) for k, v in times.items()},
            "runs": {k: [round(x, 3) for x in v] for k, v in times.items()}}


# ---------------------------------------------------------------------------------------------


def make_input(path, cells, genes, nnz, seed):
    path.parent.mkdir(parents=True, exist_ok=True)
    log(f"generating {cells} x {genes}, ~{nnz} nonzeros a cell -> {path}")
    t = time.perf_counter()
    n = bench_layout.generate(path, cells, genes, nnz, seed)
    log(f"  {n} nonzeros, {path.stat().st_size / MB:.0f} MB, {time.perf_counter() - t:.1f} s")
    warm(path)
    return path


def bench(args, binaries, work):
    (work / "logs").mkdir(exist_ok=True)
    results = {"args": {k: v for k, v in vars(args).items() if k not in ("workdir",)}}
    view = {}
    if not args.skip_views:
        small = make_input(work / "small" / "view_small.h5ad", args.small, args.view_genes, args.view_nnz,
                           args.seed)
        large = make_input(work / "large" / "view_large.h5ad", args.large, args.view_genes, args.view_nnz,
                           args.seed)
    for side, binary in binaries.items() if not args.skip_views else ():
        for tag, src in (("small", small), ("large", large)):
            log(f"(a), (b) {side}, {tag} input ...")
            view[(side, tag)] = views(args, side, binary, src, work, f"{side}-{tag}")
    results["view"] = {f"{s}/{t}": v for (s, t), v in view.items()}
    genes = None
    if not args.skip_genes:
        gsrc = (Path(args.gene_input).resolve() if args.gene_input else
                make_input(work / "genes" / "genes.h5ad", args.gene_cells, args.gene_genes, args.gene_nnz, args.seed))
        warm(gsrc)
        ref_out = work / "export-ref"
        bm.run_export(list(binaries.values())[0], gsrc.parent, ref_out, [])
        ref_store = ref_out / "genes.zarr"
        import zarr

        indptr = np.asarray(zarr.open_consolidated(str(ref_store), mode="r")["X/indptr"][:])
        nonempty = np.nonzero(np.diff(indptr) > 0)[0]
        pick = nonempty[np.linspace(0, len(nonempty) - 1, args.read_genes).astype(int)]
        ranges = gene_ranges(ref_store, pick)
        shutil.rmtree(ref_out, ignore_errors=True)
        genes = {}
        for side, binary in binaries.items() if not args.skip_gene_http else ():
            log(f"(c) {side}: export of the gene input, {args.read_genes} genes over HTTP ...")
            genes[side] = gene_figures(args, side, binary, gsrc, work, list(zip(pick.tolist(), ranges)))
        results["genes"] = genes
        # A gene three quarters along the axis: its bucket is not among the first the pass sorts.
        first = int(nonempty[(3 * len(nonempty)) // 4])
        log(f"(d) the first gene ({first}) on a fresh mount against anndata backed X[:, g] ...")
        results["first_gene"] = first_gene_figures(args, binaries, gsrc, work, first)
    report(args, binaries, view, genes, results.get("first_gene"))
    print(json.dumps(results, default=float), flush=True)


def ms(x):
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.2f} s"


def report(args, binaries, view, genes, first=None):
    sides = list(binaries)
    after = sides[0]
    before = sides[1] if len(sides) > 1 else None
    print("progressive reading benchmark; binaries: " + ", ".join(f"{s}: {b}" for s, b in binaries.items()))
    print(f"view inputs: {args.small} and {args.large} cells x {args.view_genes} genes; "
          f"gene input: {args.gene_cells} x {args.gene_genes}, ~{args.gene_nnz} nonzeros a cell; "
          f"{os.cpu_count()} CPUs")
    rows = []
    for side in sides if view else ():
        s, lg = view[(side, "small")], view[(side, "large")]
        r = lg["view"] / s["view"]
        rows.append((f"(a) cold first view, {side}", f"{ms(lg['view'])} at {args.large}",
                     f"{ms(s['view'])} at {args.small}", f"{r:.2f}", "<= 1.5", r <= 1.5))
        r = lg["view_with_mount"] / s["view_with_mount"]
        rows.append((f"(a') the same with the mount's start, {side}", f"{ms(lg['view_with_mount'])}",
                     f"{ms(s['view_with_mount'])}", f"{r:.2f}", "-", True))
        r = lg["whole"] / s["whole"]
        rows.append((f"(a2) cold whole columns, {side}", f"{ms(lg['whole'])}", f"{ms(s['whole'])}",
                     f"{r:.2f}", "-", True))
    if before and view:
        for tag, n in (("small", args.small), ("large", args.large)):
            a, b = view[(after, tag)], view[(before, tag)]
            rows.append((f"(a) first view at {n}: after / before", ms(a["view"]), ms(b["view"]),
                         f"{a['view'] / b['view']:.2f}", "-", True))
            rows.append((f"(a2) cold whole columns at {n}: after / before", ms(a["whole"]), ms(b["whole"]),
                         f"{a['whole'] / b['whole']:.2f}", "-", True))
            for k, label in (("b1", "1 connection"), ("b6", "6 connections"), ("bp", "pipelined")):
                r = a[k] / b[k]
                rows.append((f"(b) warm whole columns at {n}, {label}: after / before",
                             f"{ms(a[k])} ({a['files']} files)", f"{ms(b[k])} ({b['files']} files)",
                             f"{r:.2f}", "<= 1.2", r <= 1.2))
            for k, label in (("b1", "1 connection"), ("bp", "pipelined")):
                r = a["plain"][k] / b["plain"][k]
                rows.append((f"(b) the same from plain files (the exports, no FUSE) at {n}, {label}: after / before",
                             ms(a["plain"][k]), ms(b["plain"][k]), f"{r:.2f}", "-", True))
            for arr in WHOLE_ARRAYS:
                r = a["plain"]["per_array"][arr] / b["plain"]["per_array"][arr]
                rows.append((f"(b) plain files at {n}, pipelined, {arr}: after / before",
                             ms(a["plain"]["per_array"][arr]), ms(b["plain"]["per_array"][arr]), f"{r:.2f}", "-", True))
    for side in sides if view else ():
        for tag, n in (("small", args.small), ("large", args.large)):
            v = view[(side, tag)]
            for k, label in (("b1", "1 connection"), ("bp", "pipelined")):
                r = v[k] / v["plain"][k]
                rows.append((f"(b) warm whole columns at {n}, {label}, {side}: mount / plain files",
                             ms(v[k]), ms(v["plain"][k]), f"{r:.2f}", "-", True))
    if genes:
        for side in sides:
            gfig = genes[side]
            rows.append((f"(c) one gene, bytes fetched / its share, {side}",
                         f"median {gfig['median_ratio']:.2f}, worst {gfig['worst_ratio']:.2f}",
                         f"{gfig['median_fetched'] / 1e3:.0f} KB of {gfig['median_share'] / 1e3:.0f} KB",
                         f"{gfig['median_ratio']:.2f}", "<= 3", gfig["median_ratio"] <= 3))
            rows.append((f"(c) its first {LEVEL} cells, {side}",
                         f"median {gfig['median_prefix_ratio']:.2f}, worst {gfig['worst_prefix_ratio']:.2f}",
                         "-", f"{gfig['median_prefix_ratio']:.2f}", "-", True))
            rows.append((f"(c) time a gene, {side}", ms(gfig["median_seconds"]),
                         f"X/data: {gfig['chunks']} chunks of {gfig['chunk']}", "-", "<= 100000 chunks",
                         gfig["chunks"] <= 100000))
        if before:
            a, b = genes[after], genes[before]
            rows.append(("(c) bytes a gene: after / before", f"{a['median_fetched'] / 1e3:.0f} KB",
                         f"{b['median_fetched'] / 1e3:.0f} KB", f"{a['median_fetched'] / b['median_fetched']:.3f}",
                         "-", True))
            rows.append(("(c) time a gene: after / before", ms(a["median_seconds"]), ms(b["median_seconds"]),
                         f"{a['median_seconds'] / b['median_seconds']:.2f}", "-", True))
            rows.append(("(c) export of the gene input: after / before", f"{a['export_s']:.1f} s",
                         f"{b['export_s']:.1f} s", f"{a['export_s'] / b['export_s']:.2f}", "-", True))
    for side in sides if first else ():
        r = first[side] / first["anndata"]
        rows.append((f"(d) cold first gene ({first['nnz']} nonzeros), {side}", ms(first[side]),
                     f"anndata backed X[:, g] {ms(first['anndata'])}", f"{r:.2f}", "<= 2", r <= 2))
    print()
    print_table(rows)
    print()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", type=int, default=100_000)
    p.add_argument("--large", type=int, default=1_000_000)
    p.add_argument("--view-genes", type=int, default=200)
    p.add_argument("--view-nnz", type=int, default=20)
    p.add_argument("--gene-cells", type=int, default=200_000)
    p.add_argument("--gene-genes", type=int, default=20_000)
    p.add_argument("--gene-nnz", type=int, default=1_000)
    p.add_argument("--read-genes", type=int, default=50)
    p.add_argument("--gene-input", help="an h5ad to use as the gene input instead of generating one "
                                        "(alone in its folder)")
    p.add_argument("--skip-genes", action="store_true", help="leave out (c)")
    p.add_argument("--skip-views", action="store_true", help="leave out (a) and (b)")
    p.add_argument("--skip-gene-http", action="store_true", help="leave out (c) (keeps (d))")
    p.add_argument("--cold-runs", type=int, default=3)
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir")
    p.add_argument("--keep", action="store_true")
    p.add_argument("--binary", default=default_binary())
    p.add_argument("--baseline-binary", help="another build, measured in the same run (before)")
    args = p.parse_args()
    binaries = {"after": str(Path(args.binary).resolve())}
    if args.baseline_binary:
        binaries["before"] = str(Path(args.baseline_binary).resolve())
    for b in binaries.values():
        if not os.access(b, os.X_OK):
            sys.exit(f"{b}: not an executable cellucid-fs")
    made = args.workdir is None
    work = Path(tempfile.mkdtemp(prefix="cfs-bench-progressive-", dir="/tmp") if made else args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, bm.on_signal)
    status = 0
    try:
        bench(args, binaries, work)
    except (KeyboardInterrupt, bm.Interrupted) as e:
        log(f"interrupted ({e!r})")
        status = 130
    except Exception as e:  # noqa: BLE001
        log(f"error: {e!r}")
        status = 1
        for m in bm.ALL_MOUNTS:
            tail = m.log_tail()
            if tail.strip():
                log(f"--- {m.log_path} ---\n{tail}")
    finally:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        problems = bm.cleanup()
        if problems:
            log("cleanup problems:\n  " + "\n  ".join(problems))
            status = status or 1
        else:
            log(f"cleanup: {len(bm.ALL_MOUNTS)} mounts unmounted, {len(bm.ALL_PROCS)} processes gone")
        left = [m.mnt for m in bm.ALL_MOUNTS if bm.mounted(m.mnt)]
        if args.keep or left:
            log(f"kept {work}")
        elif made:
            shutil.rmtree(work, ignore_errors=True)
    sys.exit(status)


if __name__ == "__main__":
    main()
