#!/usr/bin/python3
"""Benchmark of a mount of many small sources (issue 14, item 7): what a lab folder of thousands
of files costs to mount, in time, memory, descriptors and processes, as figures and as ratios
between folder sizes measured in the same run.

    /usr/bin/python3 bench/bench_many.py                                  # 100, 1,000, 10,000
    /usr/bin/python3 bench/bench_many.py --sizes 100,1000                 # quick check
    /usr/bin/python3 bench/bench_many.py --baseline-binary /tmp/base/cellucid-fs   # before/after

Input: --sizes folders of small CSR float32 h5ad sources (--cells x --genes, default 80 x 230,
--nnz-per-cell 20, a 4-category obs column and obsm X_umap), written at benchmark time with
anndata by bench_layout.py's generator: --distinct of them (default 200, each its own seed), the
rest byte copies of those under their own names (anndata writes one such file in about 0.1 s, so
10,000 written one by one would take most of the run; a copy is a file of its own, with its own
inode). The folders share their files through hard links. Everything goes to a new folder under
/tmp (removed at the end unless --keep).

For each size and each binary (this build, then --baseline-binary if given), --runs times (median),
with a fresh cache dir each time, `cellucid-fs mount -f`:
  (a) mount time: from the start of `cellucid-fs mount` until MNT/datasets.json lists every
      source (polled every 10 ms); the CPU seconds the daemon and its workers (those alive and
      those it reaped) used by then, since wall time on a shared machine is mostly waiting for
      a core; and the 1-minute load average then;
  (b) at that moment: the daemon's RSS, its reader workers' RSS summed, and the PSS of both
      (/proc/PID/smaps_rollup: shared pages divided among the processes sharing them, so the sum is
      what the mount costs the machine), the descriptors open in the daemon and in its workers,
      and the number of worker processes;
  (c) then every store is used as a first view would: its .zmetadata, and every chunk of
      obsm/X_umap and of obs/batch/codes (one after another, one thread): the time for all of them,
      and (b)'s figures again after it (peak RSS of the daemon, VmHWM, too). Every
      chunk read is compared with the `export` of the distinct source it is a copy of (a copy's
      metadata differ by its id and name).
  (d) the time from `fusermount3 -u` until the daemon has exited (it ends its workers first).
Figures are printed per size, with the ratios 1,000 / 100 and 10,000 / 1,000 (10: the figure
grows as the number of sources). Mounts are unmounted whatever happens (bench_mount.py's machinery), and the script
checks that no mount or process of its own is left.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_mount  # noqa: E402  (Mount, cleanup, signal handling)
from bench_layout import default_binary, generate, log, print_table  # noqa: E402
from conftest import chunk_keys  # noqa: E402

GOALS = {"mount_s": 10.0, "pss_mb": 1024.0}   # at 10,000 sources
MB = 1 << 20


# ---------------------------------------------------------------------------------------------
# input


def make_folders(work, sizes, distinct, cells, genes, nnz):
    """Folders src-N of N sources each; returns (folders, the distinct files)."""
    pool = work / "pool"
    pool.mkdir()
    n_max = max(sizes)
    distinct = min(distinct, n_max)
    t = time.perf_counter()
    originals = []
    for i in range(distinct):
        p = pool / f"s{i:05d}.h5ad"
        generate(p, cells, genes, nnz, seed=i)
        originals.append(p)
    log(f"wrote {distinct} sources with anndata in {time.perf_counter() - t:.1f} s")
    for i in range(distinct, n_max):
        shutil.copyfile(originals[i % distinct], pool / f"s{i:05d}.h5ad")
    folders = {}
    for n in sizes:
        d = work / f"src-{n}"
        d.mkdir()
        for i in range(n):
            os.link(pool / f"s{i:05d}.h5ad", d / f"s{i:05d}.h5ad")
        folders[n] = d
    return folders, originals


def export_references(binary, originals, work):
    """The export of the distinct sources: {index: {relative path: bytes}} of their chunks."""
    d = work / "distinct"
    d.mkdir()
    for p in originals:
        os.link(p, d / p.name)
    out = work / "export"
    r = subprocess.run([binary, "export", str(d), str(out)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"export of the distinct sources failed: {r.stderr}")
    refs = {}
    for i, p in enumerate(originals):
        store = out / f"{p.stem}.zarr"
        refs[i] = {f.relative_to(store).as_posix(): f.read_bytes()
                   for f in store.rglob("*") if f.is_file() and not f.name.startswith(".")}
    return refs


# ---------------------------------------------------------------------------------------------
# processes


def children(pid):
    """Pids whose parent is pid."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as fh:
                stat = fh.read().decode(errors="replace")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(d))
    return out


def proc_figures(pid):
    """{rss, hwm, pss (bytes), fds, comm} of one process, or None if it is gone."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        status = Path(f"/proc/{pid}/status").read_text()
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None

    def kb(text, key):
        for line in text.splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        return 0

    return {"rss": kb(status, "VmRSS"), "hwm": kb(status, "VmHWM"), "pss": kb(rollup, "Pss"),
            "fds": fds, "comm": comm, "cpu": cpu_seconds(pid)}


def cpu_seconds(pid):
    """CPU seconds of a process (user + system), with those of its children it has reaped."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def resources(pid):
    """The daemon's figures and its children's summed: the reader workers, and the fork server
    that starts them (where there is one; not counted as a worker)."""
    d = proc_figures(pid)
    kids = [f for f in map(proc_figures, children(pid)) if f]
    workers = [f for f in kids if f["comm"] != "cfs-forkserver"]
    return {
        "daemon_rss_mb": d["rss"] / MB, "daemon_hwm_mb": d["hwm"] / MB,
        "workers_rss_mb": sum(w["rss"] for w in workers) / MB,
        "pss_mb": (d["pss"] + sum(w["pss"] for w in kids)) / MB,
        "daemon_fds": d["fds"], "worker_fds": sum(w["fds"] for w in kids),
        "workers": len(workers),
        "cpu_s": d["cpu"] + sum(w["cpu"] for w in kids), "daemon_cpu_s": d["cpu"],
        "load": os.getloadavg()[0],
    }


# ---------------------------------------------------------------------------------------------
# one mount


def wait_catalog(mnt, n, proc, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the mount exited with {proc.returncode}")
        try:
            cat = json.loads((mnt / "datasets.json").read_text())
            if len(cat["datasets"]) == n:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.01)
    raise RuntimeError(f"datasets.json did not list {n} datasets within {timeout} s")


def first_views(mnt, ids, references):
    """Reads .zmetadata and every chunk of obsm/X_umap and obs/batch/codes of every store,
    comparing chunks with the export of the source it is a copy of (ids are s00000, ...)."""
    files = 0
    for i in ids:
        reference = references[int(i[1:]) % len(references)]
        store = mnt / f"{i}.zarr"
        meta = json.loads((store / ".zmetadata").read_bytes())["metadata"]
        files += 1
        for arr in ("obsm/X_umap", "obs/batch/codes"):
            for k in chunk_keys(meta[f"{arr}/.zarray"]):
                body = (store / arr / k).read_bytes()
                files += 1
                if body != reference[f"{arr}/{k}"]:
                    raise RuntimeError(f"{i}.zarr/{arr}/{k} differs from the export")
    return files


def one_mount(binary, src, n, work, opts, run, references, timeout):
    mnt = work / "mnt"
    cache = work / f"cache-d{run}"
    shutil.rmtree(cache, ignore_errors=True)
    bench_mount.READY_TIMEOUT = timeout
    m = bench_mount.Mount(binary, src, mnt, cache, opts, work / "logs" / f"mount-{run}.log")
    bench_mount.ALL_MOUNTS.append(m)
    (work / "logs").mkdir(exist_ok=True)
    t0 = time.perf_counter()
    try:
        m.start()
        bench_mount.ALL_PROCS.append(m.proc)
        wait_catalog(mnt, n, m.proc, timeout)
        t_mount = time.perf_counter() - t0
        at_mount = resources(m.proc.pid)
        ids = sorted(d["id"] for d in json.loads((mnt / "datasets.json").read_text())["datasets"])
        t = time.perf_counter()
        files = first_views(mnt, ids, references)
        t_views = time.perf_counter() - t
        after = resources(m.proc.pid)
    finally:
        m.stop_timeout = timeout
        t = time.perf_counter()
        problems = m.stop()
        t_stop = time.perf_counter() - t
        shutil.rmtree(cache, ignore_errors=True)
    if problems:
        raise RuntimeError("; ".join(problems))
    return {"mount_s": t_mount, "views_s": t_views, "files": files, "at_mount": at_mount,
            "after": after, "unmount_s": t_stop}


def median_of(results, path):
    vals = []
    for r in results:
        v = r
        for k in path:
            v = v[k]
        vals.append(v)
    return statistics.median(vals)


# ---------------------------------------------------------------------------------------------


def report(label, sizes, fig):
    rows = []
    keys = [("mount_s", "(a) mount until datasets.json is complete", "{:.2f} s"),
            (("at_mount", "cpu_s"), "(a) CPU by then, daemon + workers", "{:.2f} s"),
            (("at_mount", "daemon_cpu_s"), "(a) of which the daemon", "{:.2f} s"),
            (("at_mount", "load"), "(a) load average (1 min) then", "{:.1f}"),
            (("at_mount", "pss_mb"), "(b) PSS, daemon + workers", "{:.0f} MB"),
            (("at_mount", "daemon_rss_mb"), "(b) daemon RSS", "{:.0f} MB"),
            (("at_mount", "workers_rss_mb"), "(b) workers' RSS, summed", "{:.0f} MB"),
            (("at_mount", "daemon_fds"), "(b) descriptors in the daemon", "{:.0f}"),
            (("at_mount", "worker_fds"), "(b) descriptors in the workers (and fork server)", "{:.0f}"),
            (("at_mount", "workers"), "(b) worker processes", "{:.0f}"),
            ("views_s", "(c) first view of every store", "{:.2f} s"),
            (("after", "pss_mb"), "(c) PSS after, daemon + workers", "{:.0f} MB"),
            (("after", "daemon_hwm_mb"), "(c) daemon peak RSS", "{:.0f} MB"),
            (("after", "daemon_fds"), "(c) descriptors in the daemon after", "{:.0f}"),
            (("after", "workers"), "(c) worker processes after", "{:.0f}"),
            ("unmount_s", "(d) unmount until the daemon exited", "{:.2f} s")]
    print(f"\n{label}")
    head = ["figure"] + [f"{n:,} sources" for n in sizes] + \
        [f"{b:,} / {a:,}" for a, b in zip(sizes, sizes[1:])]
    rows.append(head)
    for key, name, fmt in keys:
        path = key if isinstance(key, tuple) else (key,)
        vals = [median_of(fig[n], path) for n in sizes]
        ratios = [f"{b / a:.2f}" if a else "-" for a, b in zip(vals, vals[1:])]
        rows.append([name] + [fmt.format(v) for v in vals] + ratios)
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(head))]
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))


def bench(args, work):
    sizes = sorted(int(s) for s in args.sizes.split(","))
    folders, originals = make_folders(work, sizes, args.distinct, args.cells, args.genes,
                                      args.nnz_per_cell)
    # Copies have ids of their own, so their metadata differ; their chunks are their original's.
    references = export_references(args.binary, originals, work)
    binaries = [("this build", args.binary, sizes)]
    if args.baseline_binary:
        base_sizes = sorted(int(s) for s in (args.baseline_sizes or args.sizes).split(","))
        if not set(base_sizes) <= set(sizes):
            raise RuntimeError("--baseline-sizes must be among --sizes")
        binaries.append(("baseline", str(Path(args.baseline_binary).resolve()), base_sizes))
    opts = args.option
    results = {}
    run = 0
    for label, binary, label_sizes in binaries:
        fig = {}
        for n in label_sizes:
            fig[n] = []
            for _ in range(args.runs):
                r = one_mount(binary, folders[n], n, work, opts, run, references, args.timeout)
                run += 1
                fig[n].append(r)
                log(f"{label}, {n} sources: mount {r['mount_s']:.2f} s, "
                    f"PSS {r['at_mount']['pss_mb']:.0f} MB, daemon fds "
                    f"{r['at_mount']['daemon_fds']}, workers {r['at_mount']['workers']}; "
                    f"views {r['views_s']:.2f} s, after: PSS {r['after']['pss_mb']:.0f} MB, "
                    f"fds {r['after']['daemon_fds']}, workers {r['after']['workers']}")
        results[label] = fig
    print(f"cellucid-fs many-sources benchmark: sources of {args.cells} x {args.genes} "
          f"(~{args.nnz_per_cell} nonzeros a cell), {args.distinct} written by anndata, the rest "
          f"copies; options {','.join(opts) or '(defaults)'}; median of {args.runs}; "
          f"{os.cpu_count()} CPUs")
    for label, binary, label_sizes in binaries:
        report(f"{label} ({binary})", label_sizes, results[label])
    big = max(sizes)
    mine = results["this build"][big]
    t, pss = median_of(mine, ("mount_s",)), median_of(mine, ("after", "pss_mb"))
    print()
    print_table([(f"{big:,} sources: mount", f"{t:.2f} s", "-", "-", f"< {GOALS['mount_s']:.0f} s",
                  t < GOALS["mount_s"]),
                 (f"{big:,} sources: PSS after first views", f"{pss:.0f} MB", "-", "-",
                  f"< {GOALS['pss_mb']:.0f} MB", pss < GOALS["pss_mb"])])
    if args.baseline_binary:
        base = results["baseline"]
        mine = results["this build"]
        print("\nthis build / baseline: " + ", ".join(
            f"{n:,} sources: mount {median_of(mine[n], ('mount_s',)) / median_of(base[n], ('mount_s',)):.3f}, "
            f"PSS {median_of(mine[n], ('after', 'pss_mb')) / median_of(base[n], ('after', 'pss_mb')):.3f}"
            for n in sorted(base)))
    print(json.dumps({label: {str(n): runs for n, runs in fig.items()} for label, fig in results.items()}))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="100,1000,10000", help="folder sizes (default 100,1000,10000)")
    p.add_argument("--distinct", type=int, default=200, help="sources written by anndata (default 200)")
    p.add_argument("--cells", type=int, default=80)
    p.add_argument("--genes", type=int, default=230)
    p.add_argument("--nnz-per-cell", type=int, default=20)
    p.add_argument("--runs", type=int, default=1, help="mounts per size and binary, median (default 1)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds a mount may take (default 900)")
    p.add_argument("-o", "--option", action="append", default=[], help="a mount option; repeatable")
    p.add_argument("--baseline-binary", help="another build to measure in the same run")
    p.add_argument("--baseline-sizes", help="the sizes measured with --baseline-binary (default --sizes): "
                   "a build with a worker per source needs about 3 MB and a process a source")
    p.add_argument("--binary", default=default_binary())
    p.add_argument("--keep", action="store_true", help="keep the work folder")
    args = p.parse_args()
    args.binary = str(Path(args.binary).resolve())
    work = Path(tempfile.mkdtemp(prefix="cfs-bench-many-", dir="/tmp"))
    sys.exit(bench_mount.guarded(lambda: bench(args, work), work, args.keep))


if __name__ == "__main__":
    main()
