#!/usr/bin/python3
"""Soak of the mount (issue 15): 64 HTTP clients through nginx for 10 minutes on a folder of
several datasets whose working set is larger than the cache, while one source is rewritten
every minute. Not a test (it takes minutes); it prints its figures.

    nice /usr/bin/python3 bench/bench_soak.py                      # 10 minutes
    /usr/bin/python3 bench/bench_soak.py --minutes 1 --rewrite-every 20     # a quick look

Input: --datasets CSR float32 h5ad files made by bench_layout.py's generator (--cells x --genes,
about --nnz-per-cell nonzeros a cell, each with its own seed) with a dense obsm/X_pca of
--pca-dims columns added, one of which, live.h5ad, has two versions: B is A with every value of
X, X_umap and X_pca changed and the same nonzero pattern, so both have the same chunk keys and
different bytes. Each version is exported (`cellucid-fs export`, the same options as the mount):
those stores are what every body is compared with. A first mount with a large cache reads every
file once, and status.json then says what the mount holds when all is read: the chunks, and the
layout's work files (X laid out gene-major), together the working set. The soak's mount gets a
cache_size of the work files at their peak, room for one more layout, and --cache-fraction of the
chunks (default a half): chunks are evicted and made again all along, mostly X_pca's, which need
no layout. (With less, a dataset whose work files were dropped is laid out again at its next read
of X, and with clients on every dataset at once the layouts take turns dropping each other's
work files: --cache-size shows it.)

While --clients threads (64) each fetch random files of random stores through nginx on the
mount on their own keep-alive connection for --minutes, live.h5ad is replaced every
--rewrite-every seconds (60) by the other version (copied to a hidden name in SRC, then renamed
over it), and every second status.json's cache counters and the RSS of the daemon and of its
reader workers are sampled.

Counted:
  errors         a response other than 200 (or a broken connection), except for the one below
  retired        a failed request for a file of live's store while a rewrite happened, from
                 --window seconds (15) before it started to its end: the documented EIO for a
                 file of the retired version read after it was retired (HTTP 500, or a body cut
                 short when nginx had sent its headers), or a 404 while the new version opens
                 (the store is not listed meanwhile)
  wrong bytes    a body that is not the export's (for live's store: neither version's)
  stale          a body of live's store of a version that was replaced more than --window
                 seconds before the request started
  cache bound    the largest sample of the cache's entries and reservations (`bytes` +
                 `work_bytes`) against `max_bytes`; and the evictions over the run
  RSS            the daemon's resident memory at the first and the last minute (medians) and its
                 peak; the reader workers' sum at its peak. Every sample (with the daemon's
                 anonymous and file-backed shares) is written to samples.json in the work folder
Baseline: the same clients on nginx over the exported stores for --baseline-seconds (30):
requests/s, and the ratio mount / disk.

Processes are handled as bench_mount.py handles them (nginx in the foreground from
tests/nginx.py, mounts in sessions of their own, everything stopped and checked at the end,
whatever happens).
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_layout import MB, default_binary, generate, log, print_table  # noqa: E402
# processes, HTTP clients and the cleanup are bench_mount.py's
from bench_mount import (binary_and_workdir, digest, mount, nginx_on, run_clients,  # noqa: E402
                         run_export, run_guarded)
from test_isolation import workers_of  # noqa: E402  (tests/test_isolation.py)

LIVE = "live"
# nginx is one process here (tests/nginx.py): with its reads in a thread pool, a read of the
# mount that waits for a layout does not stop every other client's (Debian's nginx has threads).
NGINX_AIO = "    aio threads;"


# ---------------------------------------------------------------------------------------------
# the input


def add_pca(path, dims, seed):
    """A dense obsm/X_pca of `dims` float32 columns (as anndata writes one): chunks that do not
    compress and need no layout, most of the working set."""
    import h5py
    import numpy as np

    with h5py.File(path, "r+") as f:
        n = f["obsm/X_umap"].shape[0]
        rng = np.random.default_rng(seed)
        d = f["obsm"].create_dataset("X_pca", data=rng.standard_normal((n, dims), dtype=np.float32))
        d.attrs["encoding-type"] = "array"
        d.attrs["encoding-version"] = "0.2.0"


def make_versions(path_a, path_b):
    """B: A with every stored value of X and obsm/X_umap changed, the nonzero pattern kept."""
    import h5py

    shutil.copyfile(path_a, path_b)
    with h5py.File(path_b, "r+") as f:
        x = f["X/data"]
        for start in range(0, x.shape[0], 1 << 22):
            stop = min(x.shape[0], start + (1 << 22))
            x[start:stop] = x[start:stop] * 2 + 1
        for name in ("X_umap", "X_pca"):
            f["obsm"][name][...] = f["obsm"][name][...] + 1


def store_files(store):
    """{relative path: (size, digest)} of every file of an exported store."""
    out = {}
    for d, _, files in os.walk(store):
        for f in files:
            p = Path(d) / f
            b = p.read_bytes()
            out[p.relative_to(store).as_posix()] = (len(b), digest(b))
    return out


def dir_size(path):
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


# ---------------------------------------------------------------------------------------------
# what happens during the run


class Timeline:
    """When live.h5ad was replaced, and by which version."""

    def __init__(self):
        self.lock = threading.Lock()
        # (monotonic time, the version in SRC from then on); the first was there from the start
        self.events = [(float("-inf"), "A")]

    def add(self, t, version):
        with self.lock:
            self.events.append((t, version))

    def between(self, a, b):
        """(the versions in SRC at some time from a to b, whether one was replaced then)."""
        with self.lock:
            seen = {v for t, v in self.events if a <= t <= b}
            before = [v for t, v in self.events if t < a]
            if before:
                seen.add(before[-1])
            return seen, any(a <= t <= b for t, _ in self.events[1:])


def rewriter(src, versions, every, stop, timeline):
    """Replaces src/live.h5ad by the other version every `every` seconds."""
    current = "A"
    while not stop.wait(every):
        current = "B" if current == "A" else "A"
        tmp = src / f".{LIVE}.h5ad.tmp"
        shutil.copyfile(versions[current], tmp)
        os.replace(tmp, src / f"{LIVE}.h5ad")
        timeline.add(time.monotonic(), current)
        log(f"  {time.strftime('%H:%M:%S')} live.h5ad is now version {current}")


def rss_kib(pid, field="VmRSS"):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def sampler(m, every, stop, samples, t0):
    """Every `every` seconds: status.json's cache counters, the daemon's and workers' RSS."""
    while not stop.wait(every):
        try:
            cache = m.status()["cache"]
        except (OSError, ValueError, KeyError) as e:
            samples.append({"t": time.monotonic() - t0, "error": repr(e)})
            continue
        workers = workers_of(m.proc.pid)
        samples.append({"t": time.monotonic() - t0, "bytes": cache["bytes"],
                        "work_bytes": cache["work_bytes"], "max_bytes": cache["max_bytes"],
                        "evicted": cache["evicted"], "produced": cache["produced"],
                        "work_dropped": cache["work_dropped"],
                        "rss_kib": rss_kib(m.proc.pid),
                        "anon_kib": rss_kib(m.proc.pid, "RssAnon"),
                        "file_kib": rss_kib(m.proc.pid, "RssFile"),
                        "workers": len(workers),
                        "workers_rss_kib": sum(rss_kib(p) for p in workers)})


class Checker:
    """Classifies each request (see the module doc) and keeps a few samples of each kind."""

    def __init__(self, want, live_versions, timeline, window):
        self.want, self.live, self.timeline, self.window = want, live_versions, timeline, window
        self.lock = threading.Lock()
        self.samples = {}

    def note(self, kind, text):
        with self.lock:
            s = self.samples.setdefault(kind, [])
            if len(s) < 5:
                s.append(text)

    def __call__(self, store, key, t, t_end, status, body, error):
        out = {"requests": 1}
        if body is not None:
            out["bytes"] = len(body)
        # the versions a request may see: those in SRC from `window` before it to its end
        versions, rewritten = self.timeline.between(t - self.window, t_end)
        if error is not None or status != 200:
            what = error or f"HTTP {status}"
            if store == LIVE and rewritten:
                out["retired"] = 1
                self.note("retired", f"{key}: {what}")
            else:
                out["errors"] = 1
                self.note("errors", f"{store}.zarr/{key}: {what}")
            return out
        got = (len(body), digest(body))
        if store != LIVE:
            if got != self.want[store].get(key):
                out["wrong"] = 1
                self.note("wrong", f"{store}.zarr/{key}: {len(body)} bytes differ from the export")
            return out
        matches = [v for v, files in self.live.items() if files.get(key) == got]
        if not matches:
            out["wrong"] = 1
            self.note("wrong", f"{LIVE}.zarr/{key}: {len(body)} bytes are neither version's")
            return out
        if not versions & set(matches):
            out["stale"] = 1
            self.note("stale", f"{LIVE}.zarr/{key}: version {matches[0]}, more than "
                               f"{self.window:g} s after it was replaced")
        return out


# ---------------------------------------------------------------------------------------------


def measure_working_set(binary, src, work, opts, targets):
    """What the mount holds once every file was read, with a cache far larger than that:
    (bytes of chunks, bytes of the layout's work files, the work files' peak meanwhile: a layout
    needs more while it runs), as status.json counts them."""
    cache = work / "cache-measure"
    shutil.rmtree(cache, ignore_errors=True)
    m = mount(binary, src, work / "mnt", cache, opts + ["cache_size=100G"], work / "logs")
    samples = []
    stop = threading.Event()
    watch = threading.Thread(target=sampler, args=(m, 0.05, stop, samples, time.monotonic()), daemon=True)
    watch.start()
    for store, key in targets:
        (work / "mnt" / f"{store}.zarr" / key).read_bytes()
    stop.set()
    watch.join(30)
    c = m.status()["cache"]
    peak = max([s["work_bytes"] for s in samples if "work_bytes" in s] + [c["work_bytes"]])
    problems = m.stop()
    shutil.rmtree(cache, ignore_errors=True)
    if problems:
        raise RuntimeError("unclean unmount: " + "; ".join(problems))
    return c["bytes"], c["work_bytes"], peak


def median_of(samples, key, lo, hi):
    vals = [s[key] for s in samples if key in s and lo <= s["t"] < hi]
    return statistics.median(vals) if vals else 0


def soak(args, binary, work):
    opts = list(args.option)
    src = work / "src"
    versions = {"A": work / "live-A.h5ad", "B": work / "live-B.h5ad"}
    if not src.is_dir():
        src.mkdir()
        log(f"generating {args.datasets} datasets of {args.cells} x {args.genes}, "
            f"~{args.nnz_per_cell} nonzeros a cell")
        for i in range(args.datasets - 1):
            generate(src / f"ds{i}.h5ad", args.cells, args.genes, args.nnz_per_cell, args.seed + i)
            add_pca(src / f"ds{i}.h5ad", args.pca_dims, args.seed + i)
        generate(versions["A"], args.cells, args.genes, args.nnz_per_cell, args.seed + 100)
        add_pca(versions["A"], args.pca_dims, args.seed + 100)
        make_versions(versions["A"], versions["B"])
    shutil.copyfile(versions["A"], src / f"{LIVE}.h5ad")

    log("exporting both versions")
    run_export(binary, src, work / "export-A", opts)
    live_b = work / "live-B-src"
    shutil.rmtree(live_b, ignore_errors=True)
    live_b.mkdir()
    shutil.copyfile(versions["B"], live_b / f"{LIVE}.h5ad")
    run_export(binary, live_b, work / "export-B", opts)
    stores = sorted(p.name[:-5] for p in (work / "export-A").iterdir() if p.name.endswith(".zarr"))
    want = {s: store_files(work / "export-A" / f"{s}.zarr") for s in stores}
    live_versions = {"A": want[LIVE], "B": store_files(work / "export-B" / f"{LIVE}.zarr")}
    if sorted(live_versions["A"]) != sorted(live_versions["B"]):
        raise RuntimeError("the two versions of live.h5ad have different store files")
    targets = [(s, k) for s in stores for k in sorted(want[s])]
    store_bytes = sum(dir_size(work / "export-A" / f"{s}.zarr") for s in stores)
    (work / "logs").mkdir(exist_ok=True)
    chunk_bytes, work_bytes, peak_work = measure_working_set(binary, src, work, opts, targets)
    working_set = chunk_bytes + work_bytes
    # the work files, room for two layouts running at once, and a share of the chunks
    cache_size = args.cache_size or max(1 << 20, int(2 * peak_work - work_bytes +
                                                     chunk_bytes * args.cache_fraction))
    log(f"{len(stores)} stores, {len(targets)} files, {store_bytes / MB:.1f} MB exported; the "
        f"mount holds {chunk_bytes / MB:.1f} MB of chunks and {work_bytes / MB:.1f} MB of layout "
        f"work files once all is read ({peak_work / MB:.1f} MB at the peak); cache_size "
        f"{cache_size / MB:.1f} MB")

    cache = work / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    m = mount(binary, src, work / "mnt", cache, opts + [f"cache_size={cache_size}"], work / "logs")
    n = nginx_on(work / "mnt", work / "nginx", NGINX_AIO)
    timeline = Timeline()
    stop = threading.Event()
    samples = []
    t0 = time.monotonic()
    threads = [threading.Thread(target=rewriter, args=(src, versions, args.rewrite_every, stop, timeline),
                                daemon=True),
               threading.Thread(target=sampler, args=(m, 1.0, stop, samples, t0), daemon=True)]
    for t in threads:
        t.start()
    log(f"soak: {args.clients} clients for {args.minutes} min, live.h5ad rewritten every "
        f"{args.rewrite_every} s")
    check = Checker(want, live_versions, timeline, args.window)
    try:
        got = run_clients(n.port, targets, args.clients, args.minutes * 60, args.seed, check)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    end_status = m.status()
    alive = m.proc.poll() is None
    n.stop()

    log(f"baseline: the same clients on nginx over the export for {args.baseline_seconds} s")
    nb = nginx_on(work / "export-A", work / "nginx-export", NGINX_AIO)
    base_check = Checker(want, {"A": want[LIVE], "B": want[LIVE]}, Timeline(), 0)
    base = run_clients(nb.port, targets, args.clients, args.baseline_seconds, args.seed + 1, base_check)
    nb.stop()

    (work / "samples.json").write_text(json.dumps(samples))
    ok = [s for s in samples if "bytes" in s]
    over = [s for s in ok if s["bytes"] + s["work_bytes"] > s["max_bytes"]]
    peak = max(ok, key=lambda s: s["bytes"] + s["work_bytes"]) if ok else None
    dur = samples[-1]["t"] if samples else 0
    rss_first = median_of(ok, "rss_kib", 0, 60) / 1024
    rss_last = median_of(ok, "rss_kib", dur - 60, dur + 1) / 1024
    rss_peak = max((s["rss_kib"] for s in ok), default=0) / 1024
    workers_peak = max((s["workers_rss_kib"] for s in ok), default=0) / 1024
    evicted = (ok[-1]["evicted"] - ok[0]["evicted"]) if ok else 0
    produced = (ok[-1]["produced"] - ok[0]["produced"]) if ok else 0
    dropped = (ok[-1]["work_dropped"] - ok[0]["work_dropped"]) if ok else 0
    rate = got.get("requests", 0) / got["seconds"]
    base_rate = base.get("requests", 0) / base["seconds"]
    rewrites = len(timeline.events) - 1

    print()
    print(f"soak: {args.datasets} datasets ({len(targets)} files, working set {working_set / MB:.1f} MB), "
          f"cache_size {cache_size / MB:.1f} MB, {args.clients} clients, {got['seconds'] / 60:.1f} min, "
          f"{rewrites} rewrites")
    rows = [
        ("requests/s through nginx", f"{rate:.0f}", f"{base_rate:.0f} (export on disk)",
         f"{rate / base_rate:.2f}" if base_rate else "-", "-", True),
        ("errors (other than retired)", got.get("errors", 0) + got["hung"], base.get("errors", 0), "-", "0",
         got.get("errors", 0) + got["hung"] == 0),
        ("retired-version EIO", got.get("retired", 0), "-", "-", "documented", True),
        ("wrong bytes", got.get("wrong", 0), base.get("wrong", 0), "-", "0", got.get("wrong", 0) == 0),
        ("stale version served", got.get("stale", 0), "-", "-", "0", got.get("stale", 0) == 0),
        ("cache bound exceeded (samples)", f"{len(over)} of {len(ok)}", "-", "-", "0", not over),
        ("cache peak / bound (MB)",
         f"{(peak['bytes'] + peak['work_bytes']) / MB:.1f} / {peak['max_bytes'] / MB:.1f}" if peak else "-",
         "-", "-", "<= 1", True),
        ("chunks evicted / made, work files dropped", f"{evicted} / {produced}, {dropped}", "-", "-",
         "> 0", evicted + dropped > 0),
        ("daemon RSS first / last minute (MiB)", f"{rss_first:.0f} / {rss_last:.0f}", "-",
         f"{rss_last / rss_first:.2f}" if rss_first else "-", "flat", True),
        ("daemon RSS peak (MiB)", f"{rss_peak:.0f}", "-", "-", "-", True),
        ("reader workers' RSS peak (MiB)", f"{workers_peak:.0f}", "-", "-", "-", True),
        ("daemon alive at the end", "yes" if alive else "NO", "-", "-", "yes", alive),
    ]
    print_table(rows)
    for kind, lines in sorted(check.samples.items()):
        print(f"  {kind}: " + "; ".join(lines))
    live_status = next((s for s in end_status["sources"] if s["source"] == f"{LIVE}.h5ad"), {})
    print(f"  live.h5ad at the end: {live_status.get('state')}")
    print(json.dumps({
        "datasets": args.datasets, "files": len(targets), "store_bytes": store_bytes,
        "working_set_bytes": working_set,
        "cache_size": cache_size, "clients": args.clients, "seconds": round(got["seconds"], 1),
        "rewrites": rewrites, "requests": got.get("requests", 0), "bytes": got.get("bytes", 0),
        "errors": got.get("errors", 0), "hung": got["hung"], "retired": got.get("retired", 0),
        "wrong": got.get("wrong", 0), "stale": got.get("stale", 0), "samples": len(ok),
        "bound_exceeded": len(over), "peak_cache_bytes": peak["bytes"] + peak["work_bytes"] if peak else None,
        "evicted": evicted, "produced": produced, "work_dropped": dropped,
        "rss_first_mib": round(rss_first, 1),
        "rss_last_mib": round(rss_last, 1), "rss_peak_mib": round(rss_peak, 1),
        "workers_rss_peak_mib": round(workers_peak, 1), "baseline_requests_per_s": round(base_rate, 1),
        "requests_per_s": round(rate, 1), "alive": alive,
    }), flush=True)
    problems = m.stop()
    if problems:
        raise RuntimeError("unclean unmount: " + "; ".join(problems))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0, help="how long the clients run (default 10)")
    p.add_argument("--clients", type=int, default=64, help="concurrent HTTP clients (default 64)")
    p.add_argument("--datasets", type=int, default=6, help="datasets in SRC, live.h5ad included (default 6)")
    p.add_argument("--cells", type=int, default=50_000)
    p.add_argument("--genes", type=int, default=2_000)
    p.add_argument("--nnz-per-cell", type=int, default=20)
    p.add_argument("--pca-dims", type=int, default=50, help="columns of each dataset's obsm/X_pca (default 50)")
    p.add_argument("--cache-fraction", type=float, default=0.5,
                   help="the share of the chunks that cache_size holds beside the layout's work "
                        "files (default 1/2)")
    p.add_argument("--cache-size", type=int, help="cache_size in bytes, instead of the above")
    p.add_argument("--rewrite-every", type=float, default=60.0, help="seconds between rewrites (default 60)")
    p.add_argument("--window", type=float, default=15.0,
                   help="seconds after a rewrite in which live's failures are the retired version's (default 15)")
    p.add_argument("--baseline-seconds", type=float, default=30.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--option", action="append", default=[],
                   help="a cellucid-fs option (NAME=VALUE) given to export and mount; repeatable")
    p.add_argument("--workdir", help="where everything goes (default: a new folder under /tmp)")
    p.add_argument("--keep", action="store_true", help="keep the work folder (a later --workdir run reuses its input)")
    p.add_argument("--binary", default=default_binary(), help="cellucid-fs (default $CELLUCID_FS or <repo>/cellucid-fs)")
    args = p.parse_args()
    if args.datasets < 2 or args.clients < 1 or args.minutes <= 0 or not 0 < args.cache_fraction < 1:
        p.error("--datasets >= 2, --clients >= 1, --minutes > 0 and 0 < --cache-fraction < 1")

    binary, work, made_workdir = binary_and_workdir(args, "cfs-bench-soak-", "the soak")

    # with --workdir, what it made there stays for a later run to reuse (the input above all)
    status = run_guarded(lambda: soak(args, binary, work), work, args.keep, made_workdir, lambda: None)
    sys.exit(status)


if __name__ == "__main__":
    main()
