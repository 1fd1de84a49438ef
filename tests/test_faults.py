"""Faults injected into a running mount (issue 15, item 4; docs/design.md §2.3, §6, §9): whatever
breaks, nothing wrong is ever served and nothing is lost. Every byte a read returns is compared
with `cellucid-fs export` of the same source (of one of its versions, for a source that
changes): a read either returns those bytes whole or fails with EIO, and the mount keeps
serving everything else.

- the cache folder full (a small tmpfs: ENOSPC) and made read-only while serving (an ext4 image
  with errors=remount-ro, switched read-only by its trigger_fs_error: a tmpfs cannot be remounted
  read-only while the daemon holds its index open for writing);
- the cache's SQLite index deleted, damaged or lying (keys swapped between entries) between
  mounts: rebuilt from the entry files, never trusted blindly;
- a source truncated, rewritten in place or deleted during a layout pass and during reads;
- kill -9 during an eviction and during a decompression into the cache (x.h5ad.gz): the next
  mount on the same cache serves right bytes and leaves no leftover;
- the daemon's address space limited (prlimit) below what a layout wants: `-o memory` is
  honoured, or the chunks fail with EIO and a line that says to lower it.

Needs root (mount, losetup through mount -o loop), /dev/fuse and fusermount3; every test
unmounts what it mounted in its teardown, the FUSE mounts first.
"""
import errno
import os
import random
import shutil
import sqlite3
import subprocess
import threading
import time
import warnings
from pathlib import Path

import anndata as ad
import h5py
import numpy as np
import pytest

from conftest import describe, mounted, mounts, run_cfs  # noqa: F401 - mounts is a fixture
from test_mount import (
    UsageMonitor,
    big,  # noqa: F401 - a fixture
    cache_stats,
    chunk_files,
    copy_fixtures,
    export_of,
    make_many_obsm_h5ad,
    walk,
)

warnings.simplefilter("ignore")
pytestmark = pytest.mark.filterwarnings("ignore")

INDEX = "index.sqlite"


# ---------------------------------------------------------------------------------------------
# scratch file systems for the cache folder


class Disks:
    """Small file systems mounted for one test (tmpfs, or ext4 in an image file through a loop
    device); all unmounted at teardown. Request this fixture before `mounts`, so that the
    daemons using them are gone first; one still busy is detached lazily (and reported)."""

    def __init__(self, tmp_path):
        self.tmp_path, self.points = tmp_path, []

    def _mount(self, args, point):
        point.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["mount", *args, str(point)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.fail(f"mount {' '.join(args)} {point}: {r.stderr.strip()} (the fault tests need "
                        f"root and loop devices)", pytrace=False)
        self.points.append(point)
        return point

    def tmpfs(self, point, size):
        return self._mount(["-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs"], Path(point))

    def ext4(self, point, size):
        image = self.tmp_path / f"{Path(point).name}.ext4"
        with open(image, "wb") as fh:
            fh.truncate(size)
        subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], check=True, capture_output=True)
        return self._mount(["-o", "loop,errors=remount-ro", str(image)], Path(point))

    def device(self, point):
        point = os.path.realpath(point)
        with open("/proc/self/mounts", encoding="utf-8") as fh:
            for line in fh:
                dev, where = line.split()[:2]
                if where == point:
                    return dev
        raise AssertionError(f"{point} is not mounted")

    def make_read_only(self, point):
        """The kernel's own way of turning a file system read-only under its writers: an ext4
        error with errors=remount-ro (writes fail with EROFS from then on)."""
        dev = Path(self.device(point)).name
        Path(f"/sys/fs/ext4/{dev}/trigger_fs_error").write_text("cellucid-fs fault test\n")
        with open("/proc/self/mounts", encoding="utf-8") as fh:
            opts = next(l.split()[3] for l in fh if l.split()[1] == os.path.realpath(point))
        assert opts.startswith("ro") or "emergency_ro" in opts, opts

    def unmount(self, point):
        r = subprocess.run(["umount", str(point)], capture_output=True, text=True)
        if r.returncode != 0:
            subprocess.run(["umount", "-l", str(point)], capture_output=True)
            return f"umount {point}: {r.stderr.strip()} (detached lazily)"
        return None

    def close(self):
        problems = [p for p in (self.unmount(pt) for pt in reversed(self.points) if mounted(pt)) if p]
        self.points = []
        return problems


@pytest.fixture
def disks(tmp_path):
    d = Disks(tmp_path)
    yield d
    problems = d.close()
    assert not problems, problems


# ---------------------------------------------------------------------------------------------
# reading a mount against an export


def read_or_errno(path):
    """The file's bytes, or the errno its read failed with. A read's length must be the file's
    st_size (a chunk is never served partial)."""
    try:
        size = os.stat(path).st_size
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as e:
        return e.errno
    assert len(data) == size, f"{path}: st_size {size} but {len(data)} bytes read"
    return data


def read_against(mnt, wants, files=None):
    """Reads every file of `files` (default: all of wants[0]) below mnt; each must be the bytes
    of that path in one of the exports `wants` ({rel: bytes}), or fail with EIO. Returns
    ({rel: which export it matched}, [rels that failed with EIO])."""
    files = sorted(wants[0]) if files is None else files
    matched, eio, wrong = {}, [], []
    for rel in files:
        got = read_or_errno(Path(mnt) / rel)
        if got == errno.EIO:
            eio.append(rel)
        elif isinstance(got, int):
            wrong.append(f"{rel}: {errno.errorcode.get(got, got)}")
        else:
            k = next((i for i, w in enumerate(wants) if w.get(rel) == got), None)
            if k is None:
                wrong.append(f"{rel}: {len(got)} bytes that no version's export holds")
            else:
                matched[rel] = k
    assert not wrong, f"{len(wrong)} wrong reads: {wrong[:10]}"
    return matched, eio


def export_bytes(cfs, src, out, *opts):
    export_of(cfs, src, out, *opts)
    return {rel: (Path(out) / rel).read_bytes() for rel in walk(out)[1]}


def assert_alive(m):
    """The daemon runs and answers: its status document parses, the catalog is there."""
    assert m.proc.poll() is None, f"the daemon exited with {m.proc.returncode}:\n{m.stderr()[-3000:]}"
    assert mounted(m.mnt)
    m.status()
    m.catalog()


def cache_entries(cache):
    return sorted(f for f in os.listdir(cache) if f.isdigit())


def leftovers(cache):
    """What a crash may leave in a cache folder: temporaries, work files, half copies."""
    found = [f for f in os.listdir(cache) if f.startswith("tmp-")]
    for sub in ("work", "unpacked"):
        d = Path(cache) / sub
        if d.is_dir():
            found += [f"{sub}/{f}" for f in os.listdir(d) if not (sub == "unpacked" and f.endswith(".copy"))]
    return sorted(found)


# ---------------------------------------------------------------------------------------------
# 1. the SQLite index deleted, damaged or lying between mounts


def index_fixture(cfs, tmp_path):
    """A folder whose store holds many chunks of one size (obsm arrays of one shape, stored
    uncompressed) and others, its export with compressor=none, and a cache filled by a mount."""
    src = copy_fixtures(tmp_path / "src", ["csr_f32", "categoricals"])
    make_many_obsm_h5ad(src / "many_obsm.h5ad", n_obs=4000)
    want = export_bytes(cfs, src, tmp_path / "out", "-o", "compressor=none")
    return src, want


def fill_cache(mounts, src, cache, want, opts):
    m = mounts(src, cache=cache, opts=opts)
    matched, eio = read_against(m.mnt, [want])
    assert not eio, eio[:10]
    produced = cache_stats(m)["produced"]
    m.stop()
    assert produced == len(cache_entries(cache)) > 20, (produced, cache_entries(cache))
    return produced


def damage_page(path, page=2, size=4096):
    """Overwrites one page of an SQLite file (a b-tree page of the table) with noise."""
    with open(path, "r+b") as fh:
        fh.seek((page - 1) * size)
        fh.write(random.Random(5).randbytes(size))


def swap_keys(path):
    """Rotates the keys among the rows of each payload size and key length: every such row now
    names another entry's file, of exactly the size the row implies. Returns how many rows lie."""
    db = sqlite3.connect(path)
    rows = db.execute("SELECT id, key, size FROM entries ORDER BY id").fetchall()
    by_size = {}
    for id_, key, size in rows:
        by_size.setdefault((size, len(key)), []).append((id_, key))
    lying = 0
    with db:
        for group in by_size.values():
            if len(group) < 2:
                continue
            for id_, key in group:
                db.execute("UPDATE entries SET key = ? WHERE id = ?", (b"moving|" + bytes(key), id_))
            keys = [k for _, k in group]
            for (id_, _), key in zip(group, keys[1:] + keys[:1]):
                db.execute("UPDATE entries SET key = ? WHERE id = ?", (key, id_))
            lying += len(group)
    db.close()
    return lying


@pytest.mark.parametrize("damage", ["deleted", "not_a_database", "damaged_page", "keys_swapped"])
def test_index_lost_or_damaged_between_mounts(cfs, mounts, tmp_path, damage):
    """The index is deleted, its header or a page of its table overwritten, or its rows made to
    lie (keys rotated among entries of one size, so every size check passes): the next mount
    starts, says what it found, and serves every byte right; it rebuilds the index from the
    entry files (each names its own key), so nothing is made again."""
    src, want = index_fixture(cfs, tmp_path)
    cache, opts = tmp_path / "cache", ["compressor=none"]
    produced = fill_cache(mounts, src, cache, want, opts)
    index = cache / INDEX
    assert not (cache / f"{INDEX}-wal").exists() or (cache / f"{INDEX}-wal").stat().st_size == 0
    if damage == "deleted":
        index.unlink()
    elif damage == "not_a_database":
        with open(index, "r+b") as fh:
            fh.write(b"this is no longer an SQLite file")
    elif damage == "damaged_page":
        damage_page(index)
    else:
        lying = swap_keys(index)
        assert lying >= 10, lying

    m = mounts(src, cache=cache, opts=opts)
    matched, eio = read_against(m.mnt, [want])
    assert not eio, eio[:10]
    matched, eio = read_against(m.mnt, [want])     # the kernel's copies aside: read them again
    c = cache_stats(m)
    log = m.stderr()
    assert c["entries"] == len(cache_entries(cache)) == produced, (c, produced)
    if damage != "keys_swapped":
        assert f"{index}" in log and "rebuilt" in log, log
        assert c["produced"] == 0, f"entries were made again: {c}"
    else:
        # each lying row is found out at its first hit, dropped and its entry made again
        assert "holds another key" in log, log
        assert c["produced"] == c["dropped"] == lying, (c, lying)
    m.stop()
    db = sqlite3.connect(index)
    assert db.execute("PRAGMA quick_check").fetchone() == ("ok",)
    assert db.execute("SELECT count(*) FROM entries").fetchone() == (produced,)
    db.close()


# ---------------------------------------------------------------------------------------------
# 2. the cache folder full, or made read-only, while serving


def faults_folder(cfs, tmp_path, n_obs=20_000):
    """Small fixtures (their X and layers laid out through work files) and many obsm arrays of
    random values (chunks that do not compress): a store several times a small disk."""
    src = copy_fixtures(tmp_path / "src", ["csr_f32", "raw_layers", "categoricals"])
    make_many_obsm_h5ad(src / "many_obsm.h5ad", n_obs=n_obs)
    return src, export_bytes(cfs, src, tmp_path / "out")


def laid_out(rel):
    """Whether a store file is cut from a layout job's work files (X, layers, raw/X)."""
    inner = rel.split("/", 1)[1]
    return inner.startswith(("X/", "layers/", "raw/X/"))


def test_cache_folder_full(cfs, disks, mounts, tmp_path):
    """The cache folder is a 3 MiB disk under the default 10G cache_size: once it is full, the
    cache keeps within what it holds (evicting as it goes), and every read is right; a layout
    that cannot write its work files fails its chunks with EIO and a line saying so, never
    with wrong bytes; the mount lives; a remount on the full disk serves everything right."""
    src, want = faults_folder(cfs, tmp_path)
    assert sum(map(len, want.values())) > 2 * (3 << 20)
    cache = disks.tmpfs(tmp_path / "cache", "3m")
    m = mounts(src, cache=cache)
    first, eio = read_against(m.mnt, [want])
    assert all(laid_out(rel) for rel in eio), [r for r in eio if not laid_out(r)][:10]
    assert_alive(m)
    again, eio_again = read_against(m.mnt, [want])
    c = cache_stats(m)
    log = m.stderr()
    assert "No space left on device" in log, log[-3000:]
    assert c["max_bytes"] < 3 << 20 and c["bytes"] <= c["max_bytes"], c
    assert c["evicted"] > 0, c
    for rel in eio_again:
        assert laid_out(rel) and f"{rel.rsplit('/', 1)[-1]}" in log, rel
    m.stop()
    m = mounts(src, cache=cache)
    matched, eio = read_against(m.mnt, [want])
    assert all(laid_out(rel) for rel in eio), eio[:10]
    assert_alive(m)


def test_cache_folder_made_read_only(cfs, disks, mounts, tmp_path):
    """The disk of the cache folder turns read-only under the running mount (as ext4 does after
    an I/O error): what is cached is still served, what is not is made and served uncached (a
    layout that needs new work files fails with EIO), every byte right, a line says why; after
    the disk is repaired and mounted again, a remount serves everything right from the cache
    the first mount left."""
    src, want = faults_folder(cfs, tmp_path, n_obs=4000)
    cache = disks.ext4(tmp_path / "cache", 64 << 20)
    m = mounts(src, cache=cache)
    files = sorted(want)
    early = files[::2]
    matched, eio = read_against(m.mnt, [want], early)
    assert not eio, eio[:10]
    before = cache_stats(m)["entries"]
    disks.make_read_only(cache)
    matched, eio = read_against(m.mnt, [want])
    assert all(laid_out(rel) for rel in eio), [r for r in eio if not laid_out(r)][:10]
    assert_alive(m)
    c = cache_stats(m)
    assert c["hits"] > 0 and c["entries"] == before, (c, before)
    log = m.stderr()
    assert "Read-only file system" in log, log[-3000:]
    m.stop()

    image = disks.tmp_path / "cache.ext4"
    assert disks.unmount(cache) is None
    r = subprocess.run(["e2fsck", "-fy", str(image)], capture_output=True, text=True)
    assert r.returncode in (0, 1), describe(r)
    disks._mount(["-o", "loop", str(image)], Path(cache))
    m = mounts(src, cache=cache)
    matched, eio = read_against(m.mnt, [want])
    assert not eio, eio[:10]
    c = cache_stats(m)
    assert c["hits"] >= before and c["produced"] <= len(want) - len(early), (c, before)


# ---------------------------------------------------------------------------------------------
# 3. a source truncated, rewritten or deleted while it is laid out and read


LIVE = 15.0


def second_version(v1, path):
    """A copy of v1 with other values in X, the layer, an obsm array and an obs column, written
    in place by h5py: the same size and the same HDF5 layout, so that bytes of either version
    read at the same offsets look alike to a reader."""
    shutil.copyfile(v1, path)
    with h5py.File(path, "r+") as f:
        for name in ("X/data", "layers/counts/data", "obsm/X_umap", "obs/score"):
            f[name][...] = f[name][...] * 2 + 1
    assert os.path.getsize(path) == os.path.getsize(v1)
    return Path(path)


def change_source(path, how, v2):
    if how == "truncated":
        os.truncate(path, os.path.getsize(path) // 2)
    elif how == "rewritten":            # the same inode, the same size, other bytes
        data = Path(v2).read_bytes()
        with open(path, "r+b") as fh:
            fh.write(data)
    elif how == "replaced":             # another file renamed over it
        staged = Path(path).with_name(".staged")
        shutil.copyfile(v2, staged)
        os.rename(staged, path)
    else:
        os.unlink(path)


class Readers:
    """Threads reading files of a mount, each its share in order; every result kept."""

    def __init__(self, mnt, files, n=4):
        self.mnt, self.results, self.started = Path(mnt), [], threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(files[k::n],)) for k in range(n)]
        for t in self.threads:
            t.start()

    def _run(self, files):
        self.started.set()
        for rel in files:
            got = read_or_errno(self.mnt / rel)
            self.results.append((rel, got, time.monotonic()))

    def join(self):
        for t in self.threads:
            t.join(300)
        assert not any(t.is_alive() for t in self.threads), "a reader hung"
        return self.results


def check_results(results, wants, changed):
    """Every read was one version's bytes, or EIO, or (after the change) ENOENT: the store is
    gone, or between two versions. Returns the counts of each outcome, and how many reads ended
    after the change."""
    counts, wrong = {"v1": 0, "v2": 0, "eio": 0, "gone": 0, "after": 0}, []
    for rel, got, done in results:
        counts["after"] += done > changed
        if got == errno.EIO:
            counts["eio"] += 1
        elif got == errno.ENOENT and done > changed:
            counts["gone"] += 1
        elif isinstance(got, int):
            wrong.append(f"{rel}: {errno.errorcode.get(got, got)}")
        elif got == wants[0].get(rel):
            counts["v1"] += 1
        elif len(wants) > 1 and got == wants[1].get(rel):
            counts["v2"] += 1
        else:
            wrong.append(f"{rel}: {len(got)} bytes of neither version")
    assert not wrong, f"{len(wrong)} wrong reads ({counts}): {wrong[:10]}"
    return counts


@pytest.fixture(scope="module")
def versions(cfs, big, tmp_path_factory):
    """(v1, v2, want1, want2): two versions of a 100,000-cell source and the exports of a folder
    holding it beside csr_f32, at either version."""
    d = tmp_path_factory.mktemp("versions")
    v1 = big(100_000)
    v2 = second_version(v1, d / "v2.h5ad")
    wants = []
    for k, v in enumerate((v1, v2)):
        src = copy_fixtures(d / f"src{k}", ["csr_f32"])
        shutil.copyfile(v, src / "big.h5ad")
        wants.append(export_bytes(cfs, src, d / f"out{k}", "-o", "memory=16M"))
    return v1, v2, wants[0], wants[1]


def settled(m, how, want2):
    """After the change: the source's new state is served (the new version's bytes, or the
    store gone with the source refused or gone)."""
    if how in ("rewritten", "replaced"):
        matched, eio = read_against(m.mnt, [want2], [f for f in want2 if f.startswith("big.zarr/")])
        return not eio and set(matched.values()) == {0}
    st = {Path(s["source"]).name: s for s in m.status()["sources"]}
    if how == "deleted":
        return "big.h5ad" not in st and not (m.mnt / "big.zarr").exists()
    return st.get("big.h5ad", {}).get("state") in ("refused", "damaged")


@pytest.mark.parametrize("how", ["truncated", "rewritten", "replaced", "deleted"])
def test_source_changed_during_layout(cfs, mounts, versions, tmp_path, how):
    """The source changes while its matrices are being laid out (readers of X and the layer
    wait for the pass): every read is the old version's bytes, the new one's, or EIO (ENOENT
    once the store is gone), never a mix; the new state is then served; the source beside it
    is served right throughout, and the mount lives."""
    v1, v2, want1, want2 = versions
    src = copy_fixtures(tmp_path / "src", ["csr_f32"])
    shutil.copyfile(v1, src / "big.h5ad")
    m = mounts(src, opts=["memory=16M"])
    files = sorted(f for f in want1 if f.startswith(("big.zarr/X/", "big.zarr/layers/")))
    readers = Readers(m.mnt, files)
    assert readers.started.wait(10)
    wait_until(lambda: big_progress(m)[0] in ("X", "layers/counts") and big_progress(m)[1] >= 0.3, 30,
               "a layout pass to be a third done")
    changed = time.monotonic()
    change_source(src / "big.h5ad", how, v2)
    counts = check_results(readers.join(), [want1, want2], changed)
    assert counts["after"] > 0 and counts["v1"] + counts["v2"] < len(files) or how == "replaced", counts
    wait_until(lambda: settled(m, how, want2), LIVE + 30, f"the {how} source to be served as it is now")
    bystander = [f for f in want1 if f.startswith("csr_f32.zarr/")]
    matched, eio = read_against(m.mnt, [want1], bystander)
    assert not eio, eio
    assert_alive(m)


def big_progress(m):
    """(element, fraction) of the layout work going on for big.h5ad, or (None, 0)."""
    s = next((s for s in m.status()["sources"] if s["source"].endswith("big.h5ad")), {})
    p = s.get("progress") or {}
    return p.get("element"), p.get("fraction", 0)


def wait_until(pred, timeout, what):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            if pred():
                return
            last = None
        except Exception as e:  # noqa: BLE001 - a store in flux may raise anything
            last = e
        time.sleep(0.05)
    pytest.fail(f"not within {timeout} s: {what}" + (f" (last error: {last!r})" if last else ""), pytrace=False)


@pytest.mark.parametrize("how", ["truncated", "rewritten", "deleted"])
def test_source_changed_during_reads(cfs, mounts, versions, tmp_path, how):
    """The source changes while its per-cell arrays (obs columns, obsm: read straight from the
    source, chunk by chunk) are being read cold by four readers: every read is one version's
    bytes or EIO (ENOENT once the store is gone), the new state is then served, the mount
    lives."""
    v1, v2, want1, want2 = versions
    src = copy_fixtures(tmp_path / "src", ["csr_f32"])
    shutil.copyfile(v1, src / "big.h5ad")
    m = mounts(src, opts=["memory=16M"])
    files = sorted(f for f in want1 if f.startswith(("big.zarr/obs/", "big.zarr/obsm/")) and
                   f.rsplit("/", 1)[-1] not in (".zarray", ".zattrs", ".zgroup"))
    assert len(files) >= 20, files
    readers = Readers(m.mnt, files, n=2)
    assert readers.started.wait(10)
    wait_until(lambda: len(readers.results) >= 2, 60, "the first reads")
    changed = time.monotonic()
    change_source(src / "big.h5ad", how, v2)
    counts = check_results(readers.join(), [want1, want2], changed)
    assert counts["after"] > 0, f"every read was done before the change: {counts}"
    wait_until(lambda: settled(m, how, want2), LIVE + 30, f"the {how} source to be served as it is now")
    assert_alive(m)


# ---------------------------------------------------------------------------------------------
# 4. kill -9 during an eviction and during a decompression into the cache


def kill_when(m, pred, timeout, what):
    """SIGKILLs the daemon the moment pred() holds (polled every millisecond)."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        assert m.proc.poll() is None, m.stderr()[-2000:]
        time.sleep(0.001)
    m.kill9()


def test_kill9_during_eviction_then_remount(cfs, mounts, tmp_path):
    """A 1 MiB cache evicts at nearly every chunk: the daemon is killed the moment an entry's
    file goes (its row deleted, its file unlinked, the next victim perhaps half gone), twice.
    The next mount on the same cache counts exactly the entries whose files are there, leaves
    no temporary, keeps the bound and serves every byte right."""
    src, want = faults_folder(cfs, tmp_path)
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    files = sorted(want)
    for crash in range(2):
        m = mounts(src, mnt=mnt, cache=cache, opts=["cache_size=1M"])
        readers = Readers(m.mnt, files[crash::2], n=2)
        assert readers.started.wait(10)
        held = {}

        def an_entry_went():
            now = set(cache_entries(cache))
            gone = set(held.get("last", ())) - now
            held["last"] = now
            return bool(gone) and cache_stats_quiet(m).get("evicted", 0) > 0

        kill_when(m, an_entry_went, 60, "an eviction")
        read = [(rel, got) for rel, got, _ in readers.join() if not isinstance(got, int)]
        assert read and all(got == want[rel] for rel, got in read), "a read before the kill was wrong"
    m = mounts(src, mnt=mnt, cache=cache, opts=["cache_size=1M"])
    c = cache_stats(m)
    assert c["entries"] == len(cache_entries(cache)), (c, cache_entries(cache))
    assert not leftovers(cache), leftovers(cache)
    with UsageMonitor(cache, m.pid) as mon:
        matched, eio = read_against(m.mnt, [want])
    assert not eio, eio[:10]
    assert mon.peak <= 1 << 20, mon.peak
    assert_alive(m)


def cache_stats_quiet(m):
    try:
        return m.status()["cache"]
    except (OSError, ValueError):
        return {}


@pytest.fixture(scope="module")
def gzipped_big(cfs, big, tmp_path_factory):
    """(folder holding big.h5ad.gz of 100,000 cells, the export of the uncompressed file)."""
    import gzip
    d = tmp_path_factory.mktemp("gzipped")
    plain = d / "plain"
    plain.mkdir()
    shutil.copyfile(big(100_000), plain / "big.h5ad")
    want = export_bytes(cfs, plain, d / "out")
    src = d / "src"
    src.mkdir()
    with open(big(100_000), "rb") as fin, gzip.GzipFile(src / "big.h5ad.gz", "wb", compresslevel=1,
                                                         mtime=0) as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
    return src, want


def test_kill9_during_decompression_then_remount(cfs, mounts, gzipped_big, tmp_path):
    """The daemon is killed while it decompresses x.h5ad.gz into the cache's unpacked/ (its copy
    half written): the next mount on the same cache removes the half copy, makes the copy
    again, serves the store right (the export of the uncompressed file) and leaves one copy."""
    src, want = gzipped_big
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    unpacked = cache / "unpacked"
    m = mounts(src, mnt=mnt, cache=cache)

    def half_written():
        part = [p for p in unpacked.iterdir() if ".tmp-" in p.name] if unpacked.is_dir() else []
        return bool(part) and all(p.stat().st_size > (1 << 20) for p in part)

    kill_when(m, half_written, 60, "a half-written copy in unpacked/")
    assert [p for p in unpacked.iterdir() if ".tmp-" in p.name], sorted(os.listdir(unpacked))
    m = mounts(src, mnt=mnt, cache=cache)
    wait_until(lambda: m.status()["sources"][0]["state"] == "ready", 120, "the copy to be made again")
    copies = sorted(os.listdir(unpacked))
    assert len(copies) == 1 and copies[0].endswith(".copy"), copies
    assert not leftovers(cache), leftovers(cache)
    files = [f for f in want if not f.startswith(("big.zarr/X/", "big.zarr/layers/"))]
    files += sorted(f for f in want if f.startswith("big.zarr/X/data/"))[:4]
    matched, eio = read_against(m.mnt, [want], files)
    assert not eio, eio[:10]
    assert_alive(m)


# ---------------------------------------------------------------------------------------------
# 5. the daemon's address space limited below what a layout wants


def limit_address_space(pid, headroom):
    """prlimit --as on the running daemon: what it maps now plus headroom bytes."""
    with open(f"/proc/{pid}/status", encoding="utf-8") as fh:
        size = next(int(l.split()[1]) * 1024 for l in fh if l.startswith("VmSize:"))
    limit = size + headroom
    r = subprocess.run(["prlimit", f"--pid={pid}", f"--as={limit}:{limit}"], capture_output=True, text=True)
    assert r.returncode == 0, describe(r)
    return limit


@pytest.mark.skipif(bool(os.environ.get("CELLUCID_FS_NO_RLIMIT")),
                    reason="a sanitizer's shadow memory does not fit under an address-space limit")
@pytest.mark.parametrize("memory", ["16M", "1G"])
def test_memory_limit_below_the_layout(cfs, mounts, big, tmp_path, memory):
    """The daemon may map only 128 MiB more than it does once mounted (ulimit -v, set with
    prlimit): with -o memory=16M the layout of a 40,000-cell matrix fits and every byte is
    right (its peak is about 70 MiB above the mount's); with -o memory=1G it cannot (about 200
    MiB above), and its chunks fail with EIO and a line that says to lower -o memory, while
    the rest of the store is served right and the mount lives. (The daemon's malloc arenas are
    capped, src/cli/main.c: else threads coming and going reserve 64 MiB each.)"""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copyfile(big(40_000), src / "big.h5ad")
    want = export_bytes(cfs, src, tmp_path / "out", "-o", f"memory={memory}")
    m = mounts(src, opts=[f"memory={memory}"])
    limit_address_space(m.pid, 128 << 20)
    matched, eio = read_against(m.mnt, [want])
    assert_alive(m)
    if memory == "16M":
        assert not eio, (eio[:10], m.stderr()[-3000:])
        return
    assert eio and all(laid_out(rel) for rel in eio), eio[:10]
    log = m.stderr()
    assert "out of memory" in log and "-o memory" in log, log[-3000:]
    st = m.status()["sources"][0]
    assert "-o memory" in st.get("chunk_failure", ""), st


# ---------------------------------------------------------------------------------------------
# 6. a second daemon refused on a cache in use leaves it as it is


def test_refused_second_daemon_leaves_the_cache_alone(cfs, mounts, tmp_path):
    """A daemon refused because the cache folder is in use must not open (and so reconcile)
    that cache first: the running daemon's temporaries and entries stay as they are. An entry
    whose file went between mounts loses its row at the next open and is made again."""
    src = copy_fixtures(tmp_path / "src", ["csr_f32"])
    want = export_bytes(cfs, src, tmp_path / "out")
    cache = tmp_path / "cache"
    m = mounts(src, cache=cache)
    read_against(m.mnt, [want])
    entries = cache_entries(cache)
    in_flight = cache / f"tmp-{m.pid}-999999"       # as a store of the running daemon leaves it
    in_flight.write_bytes(b"being written")
    other = tmp_path / "other"
    other.mkdir()
    r = run_cfs(cfs, "mount", "-f", "-o", f"cache_dir={cache}", src, other, timeout=30)
    assert r.returncode == 1 and "is in use by another cellucid-fs mount" in r.stderr, describe(r)
    assert in_flight.exists(), "the refused daemon reconciled the cache in use"
    assert cache_entries(cache) == entries
    in_flight.unlink()
    m.stop()

    # an entry's file lost between mounts: its row goes at open, the entry is made again
    (cache / entries[0]).unlink()
    m = mounts(src, cache=cache)
    c = cache_stats(m)
    assert c["entries"] == len(entries) - 1, c
    matched, eio = read_against(m.mnt, [want])
    assert not eio
    c = cache_stats(m)
    assert c["produced"] == 1 and c["entries"] == len(entries) == len(cache_entries(cache)), c
