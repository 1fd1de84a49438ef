#!/usr/bin/python3
"""Benchmark of the mount (issue 4): prints figures as ratios against baselines measured in the
same run, on an input it generates, with nginx (Debian) serving the mount over HTTP.

    /usr/bin/python3 bench/bench_mount.py                   # 200,000 x 20,000, ~1,000 nnz/cell
    /usr/bin/python3 bench/bench_mount.py --cells 20000 --genes 2000 --nnz-per-cell 100 --seconds 5

Input: the CSR float32 h5ad of bench_layout.py, made by its generator (obs has the 4-category
categorical `batch`, obsm has X_umap); --input reuses an h5ad (e.g. from bench_layout.py --keep).
Everything goes to --workdir (default: a new folder under /tmp, removed at the end unless --keep).
The source is read once before anything is timed, so the page cache is warm on both sides.

nginx is started as tests/nginx.py does: in the foreground, one process (`master_process off`),
with its own prefix, logs and temporary folders in the work folder, on 127.0.0.1 and a free port.
Run as root, nginx keeps root's uid and reads the mount without `allow_other`. Each mount is
`cellucid-fs mount -f -o cache_dir=...` in a session of its own. Whatever happens (an error,
Ctrl-C, SIGTERM), nginx is stopped first, then every mount is unmounted with `fusermount3 -u`
(falling back to `fusermount3 -uz`) and its daemon waited for (terminated, then killed, if it
lingers); the script then checks that no mount or process of its own is left.

Figures:
  (a) cold first view: with a fresh cache dir, from the moment the new mount serves (MNT is a
      mount point) to the last byte of, fetched over HTTP from nginx on the mount on one
      keep-alive connection:
      .zmetadata, then every chunk of obs/_index, of one categorical obs column (codes and
      categories; `batch`, else the first categorical, else cellucid_original_position) and of
      obsm/X_umap (else the first obsm entry), the chunk keys computed from .zmetadata. Median of
      --cold-runs runs, each checked byte for byte against `export`. Baseline: anndata read_h5ad +
      write_zarr of the same file, timed inside a fresh Python (imports excluded).
      Ratio baseline / ours. Target: >= 100x. Also shown, as (a'), the same view timed from the
      start of `cellucid-fs mount` (a dataset first viewed right as the mount starts).
  (b) warm throughput: every chunk of the store read through nginx on one keep-alive connection,
      from the mount (after a warm-up pass, which is also the pass that makes every chunk) and
      from the `export` of the same file with the same options (after a warm-up pass too);
      --passes measured passes per side, alternating (each repeats the store until
      --min-pass-seconds), median MB/s. Ratio mount / disk.
      Target: >= 0.9 (issue 14 item 8). The daemon's CPU seconds and context switches during the
      measured mount passes are shown too: the kernel serves a warm chunk without asking it.
  (c) --clients (64) threads, each with its own keep-alive http.client connection, fetch random
      chunk keys of the store through nginx for --seconds (30) s; every body is compared with the
      exported file (size and BLAKE2b digest). Counted: requests, errors (not 200, or a broken
      connection) and wrong bytes. The mount is a fresh one on the cache of (b) (kernel caches
      cold, every chunk served by the daemon from its cache); the same clients on nginx over the
      export give the requests/s baseline. Target: zero errors, zero wrong bytes.
  (d) a folder of 100 (--many) copies of a small fixture (tests/fixtures/h5ad/csr_f32.h5ad):
      from the start of `cellucid-fs mount` until MNT/datasets.json lists all of them; median of
      --cold-runs runs, each with a fresh cache dir. Baseline: `cellucid-fs export` of the same
      folder. Target: < 1 s.
"""

import argparse
import hashlib
import http.client
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import warnings
from pathlib import Path

warnings.simplefilter("ignore")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))

import bench_layout  # noqa: E402  (the generator, the anndata baseline, defaults)
from bench_layout import MB, default_binary, log, print_table, warm  # noqa: E402
from conftest import chunk_keys, mounted  # noqa: E402  (tests/conftest.py)

try:
    import nginx as test_nginx  # noqa: E402  (tests/nginx.py: config, start, stop)
except ImportError as e:  # it needs pytest (Debian python3-pytest) for its failure reports
    sys.exit(f"cannot import tests/nginx.py ({e}); install python3-pytest")

TARGETS = {"a": 100.0, "b": 0.9, "d": 1.0}
META_NAMES = (".zarray", ".zattrs", ".zgroup", ".zmetadata")
READY_TIMEOUT = 60.0
OWN_NAMES = ("bench.h5ad", "export", "anndata.zarr", "mnt", "mnt-many", "many", "many-export", "logs")


class Interrupted(BaseException):
    """SIGTERM / SIGHUP, turned into an exception so that the cleanup runs."""


def on_signal(signum, frame):
    raise Interrupted(f"signal {signum}")


# ---------------------------------------------------------------------------------------------
# processes: mounts and nginx, all tracked so that the cleanup can reach them


class Mount:
    """One `cellucid-fs mount -f` serving src on mnt, in a session of its own (so a Ctrl-C
    reaches only this script, which then unmounts in order)."""

    stop_timeout = 15     # seconds the daemon may take to exit after the unmount

    def __init__(self, binary, src, mnt, cache, opts, log_path):
        self.binary, self.src, self.mnt, self.cache = binary, Path(src), Path(mnt), Path(cache)
        self.opts = list(opts)
        self.log_path = Path(log_path)
        self.proc = None

    def start(self):
        """Starts the daemon and returns once MNT is a mount point (polled every millisecond);
        the caller times from just before this call."""
        self.mnt.mkdir(parents=True, exist_ok=True)
        if mounted(self.mnt):
            raise RuntimeError(f"{self.mnt} is already a mount point")
        o = ",".join([f"cache_dir={self.cache}"] + self.opts)
        argv = [self.binary, "mount", "-f", "-o", o, str(self.src), str(self.mnt)]
        with open(self.log_path, "ab") as fh:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        LIVE.append(self)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if mounted(self.mnt):
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"cellucid-fs mount exited with {self.proc.returncode} before serving:\n"
                                   f"{' '.join(argv)}\n{self.log_tail()}")
            time.sleep(0.001)
        raise RuntimeError(f"{self.mnt} was not mounted within {READY_TIMEOUT} s:\n{self.log_tail()}")

    def log_tail(self):
        return self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""

    def status(self):
        return json.loads((self.mnt / "status.json").read_text(encoding="utf-8"))

    def stop(self):
        """Unmount (fusermount3 -u, else -uz) and make sure the daemon is gone. Returns the
        problems seen (an empty list for a clean unmount)."""
        problems = []
        if mounted(self.mnt):
            r = subprocess.run(["fusermount3", "-u", str(self.mnt)], stdin=subprocess.DEVNULL,
                               capture_output=True, text=True)
            if r.returncode != 0:
                problems.append(f"{self.mnt}: fusermount3 -u failed ({r.stderr.strip()}); used -uz")
                subprocess.run(["fusermount3", "-uz", str(self.mnt)], stdin=subprocess.DEVNULL, capture_output=True)
        p = self.proc
        if p is not None:
            try:
                p.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                problems.append(f"{self.mnt}: the daemon (pid {p.pid}) did not exit within "
                                f"{self.stop_timeout} s of the unmount")
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
            if p.returncode not in (0, None):
                problems.append(f"{self.mnt}: the daemon exited with {p.returncode}")
        if mounted(self.mnt):
            subprocess.run(["fusermount3", "-uz", str(self.mnt)], stdin=subprocess.DEVNULL, capture_output=True)
        if self in LIVE:
            LIVE.remove(self)
        return problems


class Nginx(test_nginx.Nginx):
    """tests/nginx.py's nginx, with its pytest failures turned into RuntimeError."""

    def start(self, timeout=10.0):
        SERVERS.append(self)
        try:
            return super().start(timeout)
        except test_nginx.pytest.fail.Exception as e:
            raise RuntimeError(f"nginx: {e}") from None


LIVE = []      # mounts that may still be mounted / running
SERVERS = []   # nginx instances (stop() is idempotent)
ALL_MOUNTS = []
ALL_PROCS = []


def mount(binary, src, mnt, cache, opts, logdir):
    m = Mount(binary, src, mnt, cache, opts, Path(logdir) / f"mount-{len(ALL_MOUNTS)}.log")
    ALL_MOUNTS.append(m)
    m.start()
    ALL_PROCS.append(m.proc)
    return m


def nginx_on(root, workdir, http_extra=""):
    n = Nginx(root, workdir, http_extra)
    n.start()
    ALL_PROCS.append(n.proc)
    return n


def cleanup():
    """nginx first (it may hold files of the mount open), then every mount. Returns problems."""
    problems = []
    for n in list(SERVERS):
        try:
            n.stop()
        except Exception as e:  # noqa: BLE001  (keep tearing the rest down)
            problems.append(f"nginx stop: {e!r}")
    for m in reversed(list(LIVE)):
        try:
            problems += m.stop()
        except Exception as e:  # noqa: BLE001
            problems.append(f"{m.mnt}: {e!r}")
    for m in ALL_MOUNTS:
        if mounted(m.mnt):
            problems.append(f"{m.mnt} is still mounted")
    for p in ALL_PROCS:
        if p is not None and p.poll() is None:
            problems.append(f"process {p.pid} ({' '.join(map(str, p.args[:2]))}) is still running")
    return problems


def guarded(run, work, keep):
    """Runs run() with Ctrl-C, SIGTERM and SIGHUP turned into exceptions, then (whatever
    happened) stops nginx and every mount, checks nothing is left, and removes the work folder
    unless keep or something is still mounted. Returns the exit status."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    status = 0
    try:
        run()
    except (KeyboardInterrupt, Interrupted) as e:
        log(f"interrupted ({e!r})")
        status = 130
    except Exception as e:  # noqa: BLE001  (report it, then clean up)
        log(f"error: {e}")
        for m in ALL_MOUNTS:
            tail = m.log_tail()
            if tail.strip():
                log(f"--- {m.log_path} ---\n{tail}")
        status = 1
    finally:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        problems = cleanup()
        if problems:
            log("cleanup problems:\n  " + "\n  ".join(problems))
            status = status or 1
        left = [m.mnt for m in ALL_MOUNTS if mounted(m.mnt)]
        if keep or left:
            log(f"kept {work}" + (f" (still mounted: {left})" if left else ""))
        else:
            shutil.rmtree(work, ignore_errors=True)
    return status


# ---------------------------------------------------------------------------------------------
# HTTP


def quote(key):
    return "/" + urllib.parse.quote(key.lstrip("/"))


class Client:
    """One keep-alive http.client connection; reconnects after a close or an error."""

    def __init__(self, port, timeout=120):
        self.port, self.timeout = port, timeout
        self.conn = None

    def get(self, key):
        """(status, body)."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        try:
            self.conn.request("GET", quote(key))
            r = self.conn.getresponse()
            body = r.read()
        except BaseException:
            self.close()
            raise
        if r.will_close:
            self.close()
        return r.status, body

    def get_ok(self, key):
        status, body = self.get(key)
        if status != 200:
            raise RuntimeError(f"GET {key}: HTTP {status}")
        return body

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def store_chunks(store):
    """Relative paths of every chunk file of an exported store (everything but the metadata
    documents), sorted."""
    out = []
    for d, _, files in os.walk(store):
        for f in files:
            if f not in META_NAMES:
                out.append((Path(d) / f).relative_to(store).as_posix())
    return sorted(out)


def digest(b):
    return hashlib.blake2b(b, digest_size=16).digest()


# ---------------------------------------------------------------------------------------------
# (a) cold first view


def first_view_arrays(meta):
    """(obs index, categorical column (name, arrays), embedding) of a store, from .zmetadata."""
    m = meta["metadata"]
    groups = {k[: -len("/.zattrs")] for k in m if k.endswith("/.zattrs")}

    def attrs(g):
        return m.get(f"{g}/.zattrs", {})

    index = attrs("obs").get("_index", "_index")
    cats = [c for c in attrs("obs").get("column-order", [])
            if attrs(f"obs/{c}").get("encoding-type") == "categorical"]
    if "batch" in cats:
        cat = "batch"
    elif cats:
        cat = cats[0]
    else:
        cat = "cellucid_original_position"
    cat_arrays = ([f"obs/{cat}/codes", f"obs/{cat}/categories"] if f"obs/{cat}" in groups
                  else [f"obs/{cat}"])
    obsm = sorted(k.split("/")[1] for k in m if k.startswith("obsm/") and k.endswith("/.zarray"))
    emb = "X_umap" if "X_umap" in obsm else (obsm[0] if obsm else None)
    if emb is None:
        raise RuntimeError("the store has no obsm array to fetch")
    return f"obs/{index}", (cat, cat_arrays), f"obsm/{emb}"


def cold_view(binary, src, store_id, work, opts, n, out_store, run):
    """One cold first view: nginx already on MNT, then mount with a fresh cache and fetch.
    Returns (seconds, bytes, files, the mount (left mounted), what was fetched)."""
    mnt = work / "mnt"
    cache = work / f"cache-a{run}"
    shutil.rmtree(cache, ignore_errors=True)
    client = Client(n.port)
    t0 = time.perf_counter()
    m = mount(binary, src, mnt, cache, opts, work / "logs")
    steps = [("mounted", time.perf_counter() - t0)]
    meta_raw = client.get_ok(f"{store_id}.zarr/.zmetadata")
    steps.append((".zmetadata", time.perf_counter() - t0))
    meta = json.loads(meta_raw)
    index, (cat, cat_arrays), emb = first_view_arrays(meta)
    got = {".zmetadata": meta_raw}
    for arr in [index, *cat_arrays, emb]:
        za = meta["metadata"][f"{arr}/.zarray"]
        for k in chunk_keys(za):
            got[f"{arr}/{k}"] = client.get_ok(f"{store_id}.zarr/{arr}/{k}")
        steps.append((arr.rsplit("/", 1)[1] if arr.count("/") > 1 else arr.split("/", 1)[1],
                      time.perf_counter() - t0))
    dt = time.perf_counter() - t0
    # time spent on each step (not cumulative)
    m.steps = [(name, t - (steps[i - 1][1] if i else 0.0)) for i, (name, t) in enumerate(steps)]
    client.close()
    for rel, body in got.items():
        if body != (out_store / rel).read_bytes():
            raise RuntimeError(f"(a) {rel} over HTTP from the mount differs from the export")
    what = f"{index}, obs/{cat} ({' + '.join(a.rsplit('/', 1)[1] for a in cat_arrays)}), {emb}"
    return dt, sum(map(len, got.values())), len(got), m, what


# ---------------------------------------------------------------------------------------------
# (b) warm throughput


def daemon_work(pid):
    """(CPU seconds, context switches) of the daemon's threads so far: a warm pass served by
    the kernel's page cache adds neither."""
    cpu, switches = 0.0, 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            fields = Path(f"/proc/{pid}/task/{t}/stat").read_text().rsplit(")", 1)[1].split()
            status = Path(f"/proc/{pid}/task/{t}/status").read_text()
        except OSError:
            continue
        cpu += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        switches += sum(int(line.split()[1]) for line in status.splitlines() if "ctxt_switches:" in line)
    return cpu, switches


def read_all(port, store_id, keys, min_seconds=0.0):
    """(seconds, bytes) of one pass over every key on one keep-alive connection, repeated
    until at least min_seconds have passed (so that a small store still gives a stable figure)."""
    c = Client(port)
    total = 0
    t = time.perf_counter()
    while True:
        for k in keys:
            total += len(c.get_ok(f"{store_id}.zarr/{k}"))
        dt = time.perf_counter() - t
        if dt >= min_seconds:
            break
    c.close()
    return dt, total


# ---------------------------------------------------------------------------------------------
# (c) concurrent clients


def hammer(port, store_id, keys, want, clients, seconds, seed):
    """clients threads fetching random keys for `seconds`. Returns a dict of counts."""
    samples = []

    def check(store, key, t, t_end, status, body, error):
        out = {"requests": 1, "bytes": len(body) if body is not None else 0}
        what = error or (f"HTTP {status}" if status != 200 else None)
        if what is None and (len(body) != want[key][0] or digest(body) != want[key][1]):
            out["wrong"] = 1
            what = f"{len(body)} bytes differ from the export's {want[key][0]}"
        elif what is not None:
            out["errors"] = 1
        if what is not None and len(samples) < 10:
            samples.append(f"{key}: {what}")
        return out

    got = run_clients(port, [(store_id, k) for k in keys], clients, seconds, seed, check)
    return {"requests": got.get("requests", 0), "errors": got.get("errors", 0) + got["hung"],
            "wrong": got.get("wrong", 0), "bytes": got.get("bytes", 0), "seconds": got["seconds"],
            "hung": got["hung"], "samples": samples}


def run_clients(port, targets, clients, seconds, seed, check):
    """`clients` threads fetching random (store, file) pairs for `seconds`; check(store, key,
    t_start, t_end, status, body, error) classifies each request into the returned counts."""
    stop = threading.Event()
    counts = [None] * clients
    start = threading.Barrier(clients + 1)

    def worker(k):
        rng = random.Random(seed * 1000 + k)
        c = Client(port, timeout=120)
        mine = {}
        try:
            start.wait(60)
        except threading.BrokenBarrierError:
            return
        deadline = time.monotonic() + seconds
        while not stop.is_set() and time.monotonic() < deadline:
            store, key = rng.choice(targets)
            t = time.monotonic()
            status = body = error = None
            try:
                status, body = c.get(f"{store}.zarr/{key}")
            except (OSError, http.client.HTTPException) as e:
                error = repr(e)
            for name, n in check(store, key, t, time.monotonic(), status, body, error).items():
                mine[name] = mine.get(name, 0) + n
        c.close()
        counts[k] = mine

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    try:
        start.wait(60)
        t0 = time.perf_counter()
        for t in threads:
            t.join(seconds + 180)
        elapsed = time.perf_counter() - t0
    finally:
        stop.set()
    total = {"hung": sum(t.is_alive() for t in threads), "seconds": elapsed}
    for mine in counts:
        for name, n in (mine or {}).items():
            total[name] = total.get(name, 0) + n
    return total


# ---------------------------------------------------------------------------------------------
# (d) a folder of many small inputs


def many_mount(binary, srcd, work, opts, expect, run):
    mnt = work / "mnt-many"
    cache = work / f"cache-d{run}"
    shutil.rmtree(cache, ignore_errors=True)
    t0 = time.perf_counter()
    m = mount(binary, srcd, mnt, cache, opts, work / "logs")
    t_mounted = time.perf_counter() - t0
    deadline = time.monotonic() + READY_TIMEOUT
    listed = -1
    while time.monotonic() < deadline:
        try:
            listed = len(json.loads((mnt / "datasets.json").read_bytes())["datasets"])
        except (OSError, ValueError, KeyError):
            listed = -1
        if listed == expect:
            break
        time.sleep(0.001)
    dt = time.perf_counter() - t0
    problems = m.stop()
    if problems:
        raise RuntimeError("(d) unclean unmount: " + "; ".join(problems))
    if listed != expect:
        raise RuntimeError(f"(d) datasets.json listed {listed} of {expect} datasets after {READY_TIMEOUT} s")
    return dt, t_mounted


# ---------------------------------------------------------------------------------------------


def run_export(binary, src, out, opts):
    shutil.rmtree(out, ignore_errors=True)
    cmd = [binary, "export"] + (["-o", ",".join(opts)] if opts else []) + [str(src), str(out)]
    t = time.perf_counter()
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {r.returncode}):\n{r.stderr.decode(errors='replace')}")
    return dt


def bench(args, binary, work):
    opts = list(args.option)
    if args.input:
        src = Path(args.input).resolve()
        import h5py

        with h5py.File(src, "r") as f:
            cells, genes = (int(x) for x in f["X"].attrs["shape"])
            nnz = int(f["X/data"].shape[0]) if isinstance(f["X"], h5py.Group) else cells * genes
    else:
        src = work / "bench.h5ad"
        cells, genes = args.cells, args.genes
        log(f"generating {cells} x {genes}, ~{args.nnz_per_cell} nonzeros a cell -> {src}")
        t = time.perf_counter()
        nnz = bench_layout.generate(src, cells, genes, args.nnz_per_cell, args.seed)
        log(f"  {nnz} nonzeros, {src.stat().st_size / MB:.0f} MB, {time.perf_counter() - t:.1f} s")
    warm(src)
    (work / "logs").mkdir(exist_ok=True)
    version = subprocess.run([binary, "--version"], stdout=subprocess.PIPE).stdout.decode().strip()

    log("export of the same file (the disk side of (b) and (c), and the reference bytes) ...")
    out = work / "export"
    t_export = run_export(binary, src, out, opts)
    stores = sorted(p for p in out.iterdir() if p.name.endswith(".zarr"))
    if len(stores) != 1:
        raise RuntimeError(f"the export holds {len(stores)} stores, expected one")
    out_store = stores[0]
    store_id = out_store.name[: -len(".zarr")]
    keys = store_chunks(out_store)
    store_bytes = sum((out_store / k).stat().st_size for k in keys)

    # (a) ------------------------------------------------------------------------------------
    log("(a) anndata read_h5ad + write_zarr (fresh Python) ...")
    t_anndata = bench_layout.run_anndata_baseline(src, work / "anndata.zarr")
    shutil.rmtree(work / "anndata.zarr", ignore_errors=True)
    n_mnt = nginx_on(work / "mnt", work / "nginx-mnt")
    cold, cold_steps, cold_with_mount = [], [], []
    m = None
    for run in range(args.cold_runs):
        log(f"(a) cold first view, run {run + 1} of {args.cold_runs} ...")
        if m is not None:
            problems = m.stop()
            if problems:
                raise RuntimeError("(a) unclean unmount: " + "; ".join(problems))
        dt, nbytes, nfiles, m, what = cold_view(binary, src, store_id, work, opts, n_mnt, out_store, run)
        cold_with_mount.append(dt)
        cold.append(dt - m.steps[0][1])
        cold_steps.append(m.steps)
        log(f"  {dt * 1e3:.0f} ms for {nfiles} files, {nbytes / MB:.2f} MB: "
            + ", ".join(f"{k} {v * 1e3:.0f}" for k, v in m.steps) + " ms")
    t_cold = statistics.median(cold)
    t_cold_mount = statistics.median(cold_with_mount)
    steps_med = cold_steps[cold.index(t_cold)] if t_cold in cold else cold_steps[-1]

    # (b) ------------------------------------------------------------------------------------
    n_disk = nginx_on(out, work / "nginx-disk")
    log(f"(b) warm-up passes: {len(keys)} chunks, {store_bytes / MB:.0f} MB (the mount's makes every chunk) ...")
    t_make, b1 = read_all(n_mnt.port, store_id, keys)
    t_disk_first, b2 = read_all(n_disk.port, store_id, keys)
    if b1 != store_bytes or b2 != store_bytes:
        raise RuntimeError(f"(b) warm-up read {b1} / {b2} bytes, the export holds {store_bytes}")
    mps_mnt, mps_disk = [], []
    daemon_before = daemon_work(m.proc.pid)
    for p in range(args.passes):
        for side, port, acc in (("mount", n_mnt.port, mps_mnt), ("disk", n_disk.port, mps_disk)):
            dt, b = read_all(port, store_id, keys, args.min_pass_seconds)
            acc.append(b / MB / dt)
        log(f"  pass {p + 1}: mount {mps_mnt[-1]:.0f} MB/s, disk {mps_disk[-1]:.0f} MB/s")
    daemon_after = daemon_work(m.proc.pid)
    warm_cpu = daemon_after[0] - daemon_before[0]
    warm_switches = daemon_after[1] - daemon_before[1]
    mb_mnt, mb_disk = statistics.median(mps_mnt), statistics.median(mps_disk)
    ratio_b = mb_mnt / mb_disk

    # (c) ------------------------------------------------------------------------------------
    log("(c) reference digests of the export ...")
    want = {}
    for k in keys:
        b = (out_store / k).read_bytes()
        want[k] = (len(b), digest(b))
    problems = m.stop()
    if problems:
        raise RuntimeError("(b) unclean unmount: " + "; ".join(problems))
    m = mount(binary, src, work / "mnt", work / f"cache-a{args.cold_runs - 1}", opts, work / "logs")
    log(f"(c) {args.clients} clients for {args.seconds:g} s on a fresh mount (cache of (b)) ...")
    hc = hammer(n_mnt.port, store_id, keys, want, args.clients, args.seconds, args.seed)
    cache_c = m.status().get("cache", {})
    log(f"  {hc['requests']} requests, {hc['errors']} errors, {hc['wrong']} wrong; cache {cache_c}")
    log(f"(c) the same clients on nginx over the export for {args.seconds:g} s ...")
    hd = hammer(n_disk.port, store_id, keys, want, args.clients, args.seconds, args.seed)
    log(f"  {hd['requests']} requests, {hd['errors']} errors, {hd['wrong']} wrong")
    rps_mnt, rps_disk = hc["requests"] / hc["seconds"], hd["requests"] / hd["seconds"]
    for n in (n_mnt, n_disk):
        n.stop()
    problems = m.stop()
    if problems:
        raise RuntimeError("(c) unclean unmount: " + "; ".join(problems))

    # (d) ------------------------------------------------------------------------------------
    fixture = Path(args.small_fixture)
    if not fixture.is_absolute() and not fixture.exists():
        fixture = REPO / "tests" / "fixtures" / "h5ad" / fixture
    srcd = work / "many"
    shutil.rmtree(srcd, ignore_errors=True)
    srcd.mkdir()
    for i in range(args.many):
        shutil.copyfile(fixture, srcd / f"small{i:03d}.h5ad")
    log(f"(d) export of {args.many} copies of {fixture.name} (baseline) ...")
    t_many_export = run_export(binary, srcd, work / "many-export", opts)
    listed = json.loads((work / "many-export" / "datasets.json").read_bytes())["datasets"]
    if len(listed) != args.many:
        raise RuntimeError(f"(d) {fixture.name} is not listed in datasets.json ({len(listed)} of "
                           f"{args.many} listed); pick a fixture with a drawable embedding")
    shutil.rmtree(work / "many-export", ignore_errors=True)
    many, many_mounted = [], []
    for run in range(args.cold_runs):
        dt, t_mounted = many_mount(binary, srcd, work, opts, args.many, run)
        many.append(dt)
        many_mounted.append(t_mounted)
        log(f"(d) run {run + 1}: {dt * 1e3:.0f} ms ({t_mounted * 1e3:.0f} ms until MNT was a mount point)")
    t_many = statistics.median(many)

    # report ---------------------------------------------------------------------------------
    ratio_a = t_anndata / t_cold
    ratio_a_mount = t_anndata / t_cold_mount
    ok_c = hc["errors"] == 0 and hc["wrong"] == 0 and hc["requests"] > 0
    rows = [
        ("(a) cold first view", f"{t_cold * 1e3:.0f} ms",
         f"anndata read_h5ad + write_zarr {t_anndata:.2f} s",
         f"{ratio_a:.0f}x faster", f">= {TARGETS['a']:.0f}x", ratio_a >= TARGETS["a"]),
        ("(a') the same, mount start included", f"{t_cold_mount * 1e3:.0f} ms",
         f"anndata read_h5ad + write_zarr {t_anndata:.2f} s",
         f"{ratio_a_mount:.0f}x faster", f">= {TARGETS['a']:.0f}x", ratio_a_mount >= TARGETS["a"]),
        ("(b) warm throughput, every chunk", f"{mb_mnt:.0f} MB/s via mount",
         f"nginx on the export {mb_disk:.0f} MB/s", f"{ratio_b:.2f}", f">= {TARGETS['b']}",
         ratio_b >= TARGETS["b"]),
        (f"(c) {args.clients} clients, {args.seconds:g} s",
         f"{hc['requests']} req ({rps_mnt:.0f}/s), {hc['errors']} errors, {hc['wrong']} wrong",
         f"nginx on the export {rps_disk:.0f} req/s", f"{rps_mnt / rps_disk:.2f} (req/s)",
         "0 errors, 0 wrong", ok_c),
        (f"(d) mount {args.many} small inputs", f"{t_many * 1e3:.0f} ms",
         f"export of the folder {t_many_export:.2f} s", f"{t_many_export / t_many:.1f}x faster",
         f"< {TARGETS['d']:.0f} s", t_many < TARGETS["d"]),
    ]
    print(f"cellucid-fs mount benchmark: {version}; nginx {nginx_version()}; machine: {os.cpu_count()} CPUs")
    print(f"input: {cells} cells x {genes} genes, CSR float32, {nnz} nonzeros ({nnz / cells:.0f} a cell), "
          f"{src.stat().st_size / MB:.0f} MB h5ad; options: {','.join(opts) or '(defaults)'}")
    print(f"store {store_id}.zarr: {len(keys)} chunks, {store_bytes / MB:.0f} MB; export took {t_export:.1f} s")
    print(f"(a): {what}; runs {', '.join(f'{x * 1e3:.0f}' for x in cold)} ms (median shown); "
          f"bytes checked against the export; the median run's steps: "
          + ", ".join(f"{k} {v * 1e3:.0f}" for k, v in steps_med) + " ms")
    print(f"(b): {args.passes} passes a side (each >= {args.min_pass_seconds:g} s), one connection; mount passes "
          f"{', '.join(f'{x:.0f}' for x in mps_mnt)} MB/s, disk {', '.join(f'{x:.0f}' for x in mps_disk)} MB/s; "
          f"the mount's first pass (every chunk made) took {t_make:.1f} s "
          f"({store_bytes / MB / t_make:.0f} MB/s), disk's first {t_disk_first:.1f} s; the daemon during the "
          f"measured passes: {warm_cpu:.2f} CPU s, {warm_switches} context switches (the kernel serves a warm "
          f"chunk without asking it)")
    print(f"(c): mount {hc['bytes'] / MB / hc['seconds']:.0f} MB/s, disk {hd['bytes'] / MB / hd['seconds']:.0f} MB/s; "
          f"disk side {hd['errors']} errors, {hd['wrong']} wrong; mount cache counters {json.dumps(cache_c)}"
          + (f"; first problems: {hc['samples']}" if hc["samples"] else ""))
    print(f"(d): copies of {fixture.name}; runs {', '.join(f'{x * 1e3:.0f}' for x in many)} ms (median shown), "
          f"of which until MNT was a mount point {', '.join(f'{x * 1e3:.0f}' for x in many_mounted)} ms")
    print()
    print_table(rows)
    print()
    print(json.dumps({
        "cells": cells, "genes": genes, "nnz": nnz, "chunks": len(keys), "store_mb": round(store_bytes / MB, 1),
        "cold_view_s": round(t_cold, 4), "cold_view_runs_s": [round(x, 4) for x in cold],
        "cold_view_with_mount_s": round(t_cold_mount, 4), "ratio_a_with_mount": round(ratio_a_mount, 1),
        "cold_view_steps_s": {k: round(v, 4) for k, v in steps_med},
        "anndata_s": round(t_anndata, 3), "ratio_a": round(ratio_a, 1),
        "warm_mount_mb_s": round(mb_mnt, 1), "warm_disk_mb_s": round(mb_disk, 1), "ratio_b": round(ratio_b, 3),
        "first_pass_mount_s": round(t_make, 2), "warm_daemon_cpu_s": round(warm_cpu, 3),
        "warm_daemon_switches": warm_switches,
        "clients": args.clients, "seconds": args.seconds,
        "c_requests": hc["requests"], "c_errors": hc["errors"], "c_wrong": hc["wrong"],
        "c_rps_mount": round(rps_mnt, 1), "c_rps_disk": round(rps_disk, 1),
        "c_disk_errors": hd["errors"], "c_disk_wrong": hd["wrong"], "c_cache": cache_c,
        "many": args.many, "many_mount_s": round(t_many, 4), "many_runs_s": [round(x, 4) for x in many],
        "many_mounted_s": [round(x, 4) for x in many_mounted],
        "many_export_s": round(t_many_export, 3),
    }), flush=True)


def binary_and_workdir(args, prefix, what):
    """(the binary, resolved; the work folder: --workdir, else a new one under /tmp named
    prefix...; whether it was made here), once the binary and FUSE are there (else exits)."""
    binary = str(Path(args.binary).resolve())
    if not os.access(binary, os.X_OK):
        sys.exit(f"{binary}: not an executable cellucid-fs; build it or pass --binary")
    if not os.path.exists("/dev/fuse") or not shutil.which("fusermount3"):
        sys.exit(f"{what} needs /dev/fuse and fusermount3 (Debian package fuse3)")
    made_workdir = args.workdir is None
    work = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp") if made_workdir else args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    return binary, work, made_workdir


def run_guarded(body, work, keep, made_workdir, remove_own):
    """Runs body(); whatever happens (an error, Ctrl-C, SIGTERM), then stops nginx and every
    mount and checks that none is left. The work folder goes if the script made it (else
    remove_own() removes what the script made in it), unless keep or a mount is left. Returns
    the exit status."""
    signal.signal(signal.SIGINT, signal.default_int_handler)   # even if started with SIGINT ignored
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    status = 0
    try:
        body()
    except KeyboardInterrupt:
        log("interrupted")
        status = 130
    except Interrupted as e:
        log(f"interrupted ({e})")
        status = 143
    except Exception as e:  # noqa: BLE001  (report it, then clean up)
        log(f"error: {e}")
        status = 1
        for mnt in ALL_MOUNTS:
            tail = mnt.log_tail()
            if tail.strip():
                log(f"--- {mnt.log_path} ---\n{tail}")
    finally:
        # nothing interrupts the cleanup
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        problems = cleanup()
        left = [m.mnt for m in ALL_MOUNTS if mounted(m.mnt)]
        if problems:
            log("cleanup problems:\n  " + "\n  ".join(problems))
            status = status or 1
        else:
            log(f"cleanup: {len(ALL_MOUNTS)} mounts unmounted, {len(ALL_PROCS)} processes gone")
        if keep or left:
            log(f"kept {work}" + (f" (still mounted: {left})" if left else ""))
        elif made_workdir:
            shutil.rmtree(work, ignore_errors=True)
        else:
            remove_own()
    return status


def nginx_version():
    try:
        r = subprocess.run([test_nginx.nginx_binary(), "-v"], capture_output=True, text=True)
        return r.stderr.strip().split("/")[-1]
    except BaseException:  # noqa: BLE001  (nginx_binary fails through pytest)
        return "?"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cells", type=int, default=200_000)
    p.add_argument("--genes", type=int, default=20_000)
    p.add_argument("--nnz-per-cell", type=int, default=1_000)
    p.add_argument("--seed", type=int, default=0, help="generator and client seed (default 0)")
    p.add_argument("--input", help="an existing CSR h5ad to use instead of generating one")
    p.add_argument("--seconds", type=float, default=30.0, help="duration of (c) on each side (default 30)")
    p.add_argument("--clients", type=int, default=64, help="concurrent HTTP clients in (c) (default 64)")
    p.add_argument("--passes", type=int, default=5, help="measured passes a side in (b) (default 5)")
    p.add_argument("--min-pass-seconds", type=float, default=1.0,
                   help="a measured pass of (b) repeats the store until this long (default 1)")
    p.add_argument("--cold-runs", type=int, default=3, help="runs of (a) and of (d), median (default 3)")
    p.add_argument("--many", type=int, default=100, help="small inputs in (d) (default 100)")
    p.add_argument("--small-fixture", default="csr_f32.h5ad",
                   help="the input copied for (d) (default tests/fixtures/h5ad/csr_f32.h5ad)")
    p.add_argument("-o", "--option", action="append", default=[],
                   help="a cellucid-fs option (NAME=VALUE) given to both export and mount; repeatable")
    p.add_argument("--workdir", help="where everything goes (default: a new folder under /tmp)")
    p.add_argument("--keep", action="store_true", help="keep the work folder")
    p.add_argument("--binary", default=default_binary(), help="cellucid-fs (default $CELLUCID_FS or <repo>/cellucid-fs)")
    args = p.parse_args()
    if args.cold_runs < 1 or args.passes < 1 or args.clients < 1 or args.many < 1:
        p.error("--cold-runs, --passes, --clients and --many must be at least 1")

    binary, work, made_workdir = binary_and_workdir(args, "cfs-bench-mount-", "the mount benchmark")

    def remove_own():
        for q in work.iterdir():    # only what this script made
            ours = (q.name in OWN_NAMES or q.name.startswith(("cache-a", "cache-d", "nginx-"))) \
                and not (args.input and q.resolve() == Path(args.input).resolve())
            if ours:
                shutil.rmtree(q, ignore_errors=True) if q.is_dir() else q.unlink(missing_ok=True)

    status = run_guarded(lambda: bench(args, binary, work), work, args.keep, made_workdir, remove_own)
    sys.exit(status)


if __name__ == "__main__":
    main()
