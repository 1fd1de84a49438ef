"""`cellucid-fs mount` end to end (issue 4, docs/design.md §1, §4-§9): a real FUSE mount of SRC on MNT.

Every test mounts with `-f` under subprocess.Popen (so the daemon's pid is known), a cache dir
of its own in tmp_path, and unmounts in the fixture's teardown even on failure
(`fusermount3 -u`, else `fusermount3 -uz`, then the daemon is waited for and, if it is still
there, terminated / killed): no mount and no process is left behind.

- tree: the mount of every good fixture is byte for byte the tree `export` writes of the same
  folder (plus status.json); st_size is exact; anndata reads every store equal to its source;
  every store opens consolidated; status.json describes every source.
- http: nginx (tests/nginx.py) serving MNT: Content-Length and bodies of every file of two
  stores, a Range request, 404 for missing keys, zarr-python and anndata reading a store over
  HTTP through consolidated metadata.
- cache: a small cache_size bounds the cache folder while more than that is read (entries are
  evicted, bytes stay right); a remount recomputes nothing; another compressor never gets a
  stale entry.
- crash: kill -9 of the daemon while chunks are being made, then a remount with the same cache:
  every file is still right.
- concurrency: 16 readers of one cold store get the export's bytes; one production per chunk.
- status.json: every read after its figures change gets them, whole and newly dated (locally
  and through nginx).
- read-only: every kind of write gets EROFS, also as the very first open of a mount.
- refused sources: listed in status.json with the export's reasons; the rest is served.
- live sources (test_live_*, at the end): add, rewrite, delete a source while mounted.

Needs /dev/fuse + fusermount3 and nginx (Debian package `nginx`); a missing one fails the tests
that need it, never a silent skip.
"""

import errno
import json
import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time
import warnings
from pathlib import Path

import anndata as ad
import numcodecs
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr

from conftest import (
    BAD,
    GOOD,
    GOOD_NAMES,
    LEFT_OUT_NAMES,
    REFUSED_NAMES,
    assert_adata_equal,
    check_consolidated,
    describe,
    fixture_id,
    fixture_name,
    good_path,
    bad_path,
    in_catalog,
    left_out_lines,
    mounted,
    mounts,
    nginx_on,
    not_in_catalog_lines,
    refused_lines,
    read_catalog,
    run_cfs,
    snapshot,
    strip_format_ext,
)

warnings.simplefilter("ignore")
pytestmark = pytest.mark.filterwarnings("ignore")

LIVE_TIMEOUT = 10.0
META_NAMES = (".zarray", ".zattrs", ".zgroup", ".zmetadata")


# ---------------------------------------------------------------------------------------------
# inputs and helpers


def copy_fixtures(dst, names):
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for n in names:
        shutil.copyfile(good_path(n), dst / GOOD[n]["file"])
    return dst


def make_big_h5ad(path, n_obs, n_vars=2000, per_cell=60, seed=7, layers=True):
    """A CSR float32 h5ad of n_obs cells (~per_cell entries each), obs categorical + float,
    obsm X_umap and X_pca, optionally a sparse layer: enough chunks, and chunks big enough, to
    exercise the cache and the layout engine."""
    rng = np.random.default_rng(seed)
    cols = np.sort(rng.integers(0, n_vars, size=(n_obs, per_cell)), axis=1)
    keep = np.ones(cols.shape, dtype=bool)
    keep[:, 1:] = cols[:, 1:] != cols[:, :-1]
    indptr = np.zeros(n_obs + 1, dtype=np.int64)
    np.cumsum(keep.sum(axis=1), out=indptr[1:])
    indices = cols[keep].astype(np.int32)
    data = rng.integers(1, 50, size=indices.size).astype(np.float32)
    X = sp.csr_matrix((data, indices, indptr), shape=(n_obs, n_vars))
    obs = pd.DataFrame({"batch": pd.Categorical(rng.choice(["a", "b", "c"], n_obs)),
                        "score": rng.random(n_obs)}, index=[f"cell{i}" for i in range(n_obs)])
    a = ad.AnnData(X, obs=obs, var=pd.DataFrame(index=[f"g{j}" for j in range(n_vars)]), dtype=np.float32)
    a.obsm["X_umap"] = rng.standard_normal((n_obs, 2)).astype(np.float32)
    a.obsm["X_pca"] = rng.standard_normal((n_obs, 20)).astype(np.float32)
    if layers:
        a.layers["counts"] = sp.csr_matrix(X * 2)
    a.write_h5ad(path)
    return Path(path)


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """big(n_obs) -> path of a generated big h5ad (cached per module)."""
    cache = {}

    def get(n_obs):
        if n_obs not in cache:
            d = tmp_path_factory.mktemp(f"big{n_obs}")
            cache[n_obs] = make_big_h5ad(d / "big.h5ad", n_obs)
        return cache[n_obs]

    return get


def assert_big_equal(store, src, did):
    """assert_adata_equal for the generated big datasets without densifying their matrices:
    X and layers compare as sparse structure + values (priority order undone), the rest with
    assert_adata_equal."""
    pos = store.obs["cellucid_original_position"].to_numpy()
    assert np.array_equal(np.sort(pos), np.arange(store.n_obs)), "not a permutation"
    order = np.argsort(pos, kind="stable")
    assert sorted(store.layers.keys()) == sorted(src.layers.keys())
    pairs = [("X", store.X, src.X)] + [(f"layers/{k}", store.layers[k], src.layers[k]) for k in src.layers]
    for name, a, b in pairs:
        assert sp.issparse(a) and sp.issparse(b), name
        a, b = sp.csr_matrix(a)[order], sp.csr_matrix(b)
        a.sort_indices()
        b.sort_indices()
        assert a.dtype == b.dtype and a.shape == b.shape, (name, a.dtype, b.dtype, a.shape, b.shape)
        assert np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices), f"{name}: structure"
        assert np.array_equal(a.data, b.data), f"{name}: values"

    def light(x):
        return ad.AnnData(X=None, obs=x.obs, var=x.var, uns=dict(x.uns), obsm=dict(x.obsm), varm=dict(x.varm),
                          obsp=dict(x.obsp))

    assert_adata_equal(light(store), light(src), dataset_id=did, dataset_name=did)


def export_of(cfs, src, out, *opts, expect_rc=0):
    r = run_cfs(cfs, "export", *opts, src, out)
    assert r.returncode == expect_rc, describe(r)
    return r


def walk(root, skip_top=()):
    """(dirs, files) below root, as sorted relative posix paths; names in skip_top are ignored
    at the top level."""
    root = Path(root)
    dirs, files = [], []
    for d, dn, fn in os.walk(root):
        rel = Path(d).relative_to(root)
        if rel == Path("."):
            dn[:] = [x for x in dn if x not in skip_top]
            fn = [x for x in fn if x not in skip_top]
        dirs += [(rel / x).as_posix() for x in dn]
        files += [(rel / x).as_posix() for x in fn]
    return sorted(dirs), sorted(files)


def read_checked(path):
    """The file's bytes; its st_size (stat before the read) must equal their number."""
    size = os.stat(path).st_size
    data = Path(path).read_bytes()
    assert len(data) == size, f"{path}: st_size {size} but {len(data)} bytes read"
    return data


def assert_same_tree(mnt, out, skip_top=("status.json",)):
    """`diff -r MNT OUT` is empty (but for status.json): same folders, same files, same bytes,
    and every file of the mount has st_size = its bytes. Returns {rel: bytes}."""
    md, mf = walk(mnt, skip_top)
    od, of = walk(out)
    assert md == od, f"folders differ: only in the mount {sorted(set(md) - set(od))[:20]}, " \
                     f"only in the export {sorted(set(od) - set(md))[:20]}"
    assert mf == of, f"files differ: only in the mount {sorted(set(mf) - set(of))[:20]}, " \
                     f"only in the export {sorted(set(of) - set(mf))[:20]}"
    got, differ = {}, []
    for rel in mf:
        got[rel] = read_checked(Path(mnt) / rel)
        if got[rel] != (Path(out) / rel).read_bytes():
            differ.append(rel)
    assert not differ, f"{len(differ)} files differ between the mount and the export: {differ[:20]}"
    return got


def chunk_files(store):
    """Relative paths of the chunk files (not metadata documents) of a store folder."""
    _, files = walk(store)
    return [f for f in files if f.rsplit("/", 1)[-1] not in META_NAMES]


def open_deleted_under(pid, folder):
    """Bytes of the files process pid holds open that were unlinked from under folder (the
    layout engine's work files are unlinked at creation, so only /proc sees them)."""
    total, prefix = 0, os.path.realpath(folder) + "/"
    fds = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fds)
    except FileNotFoundError:
        return 0
    for n in names:
        try:
            target = os.readlink(f"{fds}/{n}")
            if target.startswith(prefix) and target.endswith(" (deleted)"):
                total += os.stat(f"{fds}/{n}").st_size
        except (FileNotFoundError, PermissionError):
            pass
    return total


def cache_usage(cache, pid=None):
    """Bytes of every file under the cache folder except the SQLite index (index.sqlite*):
    entries, temporaries, layout-engine files, and (given the daemon's pid) the unlinked work
    files it holds open there."""
    total = 0
    for d, _, files in os.walk(cache):
        for f in files:
            if f.startswith("index.sqlite"):
                continue
            try:
                total += os.lstat(os.path.join(d, f)).st_size
            except FileNotFoundError:
                pass
    return total + (open_deleted_under(pid, cache) if pid else 0)


class UsageMonitor:
    """Samples cache_usage(cache, pid) every few ms on a thread; .peak is the largest seen."""

    def __init__(self, cache, pid=None):
        self.cache, self.pid, self.peak, self.samples, self.error = cache, pid, 0, 0, None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            while not self._stop.is_set():
                self.peak = max(self.peak, cache_usage(self.cache, self.pid))
                self.samples += 1
                time.sleep(0.002)
        except Exception as e:  # noqa: BLE001 - reported by __exit__, not lost with the thread
            self.error = e

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, cache_usage(self.cache, self.pid))
        assert self.error is None, f"the cache sampler failed: {self.error!r}"
        assert self.samples >= 10, f"the cache was sampled only {self.samples} times"


def cache_stats(m):
    c = m.status()["cache"]
    for k in ("hits", "misses", "produced", "evicted", "bytes", "entries"):
        assert isinstance(c.get(k), int) and not isinstance(c.get(k), bool) and c[k] >= 0, c
    return c


def wait_for(pred, timeout, what):
    """Polls pred() (exceptions count as not yet) until it is truthy; fails naming `what` and
    the last exception."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            v = pred()
            if v:
                return v
            last = None
        except Exception as e:  # noqa: BLE001 - a half-made store may raise anything
            last = e
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout} s: {what}" + (f" (last error: {last!r})" if last else ""),
                        pytrace=False)
        time.sleep(0.1)


def by_source(status):
    return {Path(s["source"]).name: s for s in status["sources"]}


# ---------------------------------------------------------------------------------------------
# 1. the tree: every good fixture


def test_mount_equals_export_every_fixture(cfs, mounts, oracle, tmp_path):
    src = copy_fixtures(tmp_path / "src", GOOD_NAMES)
    out = tmp_path / "out"
    export_of(cfs, src, out)
    m = mounts(src)

    top = sorted(os.listdir(m.mnt))
    assert top == sorted(os.listdir(out) + ["status.json"]), top
    assert_same_tree(m.mnt, out)

    for name in GOOD_NAMES:
        did = fixture_id(name)
        store = m.mnt / f"{did}.zarr"
        check_consolidated(store)
        g = zarr.open_consolidated(str(store), mode="r")
        assert g.attrs["encoding-type"] == "anndata", dict(g.attrs)
        assert_adata_equal(ad.read_zarr(str(store)), oracle(name), dataset_id=did, dataset_name=fixture_name(name))

    st = m.status()
    assert list(st.keys()) == ["sources", "catalog", "cache"], list(st.keys())
    first = sorted(d["id"] for d in read_catalog(m.mnt)["datasets"])[0]
    assert st["catalog"] == {"default": first, "default_asked": None, "default_note": None}
    srcs = by_source(st)
    assert sorted(srcs) == sorted(GOOD[n]["file"] for n in GOOD_NAMES), sorted(srcs)
    for name in GOOD_NAMES:
        s = srcs[GOOD[name]["file"]]
        for key in ("source", "id", "format", "version", "state", "reason", "in_catalog", "left_out"):
            assert key in s, (key, s)
        assert s["state"] == "ready" and s["reason"] is None, s
        assert s["id"] == fixture_id(name), s
        assert s["format"] == "h5ad", s
        assert s["left_out"] == [], s
        listed = in_catalog(oracle(name))
        assert s["in_catalog"] is listed, s
        assert ("not_in_catalog" in s) is (not listed), s
    cache_stats(m)


# ---------------------------------------------------------------------------------------------
# 2. nginx on the mount


class HTTPStore(zarr.storage.BaseStore):
    """A read-only zarr store whose keys are GETs below a URL (404 = missing key)."""

    def __init__(self, server, prefix):
        self.server, self.prefix = server, prefix.strip("/")
        self.requests = []

    def __getitem__(self, key):
        status, headers, body = self.server.request(f"{self.prefix}/{key}")
        self.requests.append((key, status))
        if status == 404:
            raise KeyError(key)
        if status != 200:
            raise AssertionError(f"GET {self.prefix}/{key}: HTTP {status}")
        assert int(headers["content-length"]) == len(body), (key, headers)
        return body

    def __contains__(self, key):
        try:
            self[key]
            return True
        except KeyError:
            return False

    def __setitem__(self, key, value):
        raise PermissionError("read-only")

    def __delitem__(self, key):
        raise PermissionError("read-only")

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 0


def test_nginx_serves_the_mount(cfs, mounts, nginx_on, oracle, big, tmp_path):
    src = copy_fixtures(tmp_path / "src", ["raw_layers"])
    shutil.copyfile(big(40_000), src / "big.h5ad")
    out = tmp_path / "out"
    export_of(cfs, src, out)
    m = mounts(src)
    web = nginx_on(m.mnt)

    # every file of two stores (and the catalog): 200, Content-Length = size = bytes
    checked = 0
    for rel in ["datasets.json"] + [f"{s}/{f}" for s in ("raw_layers.zarr", "big.zarr")
                                    for f in walk(out / s)[1]]:
        want = (out / rel).read_bytes()
        size = os.stat(m.mnt / rel).st_size
        status, headers, body = web.request(rel)
        assert status == 200, (rel, status, web.log_tail())
        assert int(headers["content-length"]) == size == len(want), (rel, headers.get("content-length"), size)
        assert body == want, f"{rel}: body differs from the export's bytes"
        checked += 1
    assert checked > 60, checked

    # HEAD gives the exact length too (zarrita's sharded path relies on it)
    for rel in ("big.zarr/X/data/0", "raw_layers.zarr/.zmetadata"):
        status, headers, body = web.request(rel, method="HEAD")
        assert status == 200 and int(headers["content-length"]) == len((out / rel).read_bytes()), (rel, headers)
        assert body == b""

    # a Range request
    for rel in ("big.zarr/X/data/0", "raw_layers.zarr/.zmetadata"):
        want = (out / rel).read_bytes()
        assert len(want) > 100, (rel, len(want))
        status, headers, body = web.request(rel, headers={"Range": "bytes=10-99"})
        assert status == 206, (rel, status)
        assert headers.get("content-range") == f"bytes 10-99/{len(want)}", headers
        assert int(headers["content-length"]) == 90 and body == want[10:100], (rel, headers)
    status, headers, body = web.request("big.zarr/X/data/0", headers={"Range": "bytes=-50"})
    want = (out / "big.zarr/X/data/0").read_bytes()
    assert status == 206 and body == want[-50:], (status, headers)

    # missing keys are 404 (and stay cheap: ask twice)
    for rel in ("big.zarr/X/data/999999", "big.zarr/X/data/0.0", "big.zarr/.zarray", "big.zarr/obs/.zarray",
                "big.zarr/nonexistent/.zattrs", "nope.zarr/.zgroup", "raw_layers.zarr/X/data/7/1",
                "raw_layers.zarr/zarr.json"):
        for _ in range(2):
            status, _, _ = web.request(rel)
            assert status == 404, (rel, status)

    # zarr-python over HTTP, consolidated: every array equals the mount's files read locally;
    # anndata reads the consolidated group over HTTP equal to the source
    from anndata._io.specs import read_elem

    for did in ("big", "raw_layers"):
        store = HTTPStore(web, f"{did}.zarr")
        g = zarr.open_consolidated(store, mode="r")
        local = zarr.open_consolidated(str(m.mnt / f"{did}.zarr"), mode="r")
        arrays = []
        local.visititems(lambda name, obj: arrays.append(name) if isinstance(obj, zarr.Array) else None)
        assert any(a.startswith("X") for a in arrays), arrays
        for name in arrays:
            a, b = g[name][...], local[name][...]
            assert a.dtype == b.dtype and a.shape == b.shape, name
            assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), f"{did}/{name} differs over HTTP"
        assert (".zmetadata", 200) in store.requests
        bad = [(k, s) for k, s in store.requests if s not in (200, 404)]
        assert not bad, bad
        if did == "raw_layers":
            assert_adata_equal(read_elem(g), oracle("raw_layers"), dataset_id="raw_layers", dataset_name="raw_layers")
    big_http = read_elem(zarr.open_consolidated(HTTPStore(web, "big.zarr"), mode="r"))
    assert_big_equal(big_http, ad.read_h5ad(big(40_000)), "big")


def daemon_context_switches(pid):
    n = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            status = Path(f"/proc/{pid}/task/{t}/status").read_text()
        except OSError:
            continue    # a thread that ended
        n += sum(int(line.split()[1]) for line in status.splitlines() if "ctxt_switches:" in line)
    return n


def test_warm_chunks_served_without_the_daemon(cfs, mounts, nginx_on, tmp_path):
    """A chunk read once is served to a static server from the kernel's page cache: no open,
    no getattr, no read reaches the daemon (kernel opens, keep_cache, long attribute and entry
    timeouts). The daemon's cache counters see the first pass and nothing of the next two."""
    src = copy_fixtures(tmp_path / "src", ["raw_layers", "csr_f32"])
    out = tmp_path / "out"
    export_of(cfs, src, out)
    m = mounts(src)
    web = nginx_on(m.mnt)
    files = [f"{s}/{f}" for s in ("raw_layers.zarr", "csr_f32.zarr") for f in walk(out / s)[1]]
    assert len(files) > 40, files

    def one_pass():
        for rel in files:
            status, _, body = web.request(rel)
            assert status == 200 and body == (out / rel).read_bytes(), (rel, status)

    one_pass()
    first = cache_stats(m)
    assert first["produced"] + first["hits"] + first["misses"] > 0, first
    switches = daemon_context_switches(m.proc.pid)
    one_pass()
    one_pass()
    # each request the daemon answered would wake one of its threads: 2 x len(files) at least
    woken = daemon_context_switches(m.proc.pid) - switches
    assert woken < len(files) // 2, (woken, len(files))
    again = cache_stats(m)
    assert {k: again[k] for k in ("hits", "misses", "produced")} == \
        {k: first[k] for k in ("hits", "misses", "produced")}, (first, again)


def test_status_fresh_at_every_read(cfs, mounts, nginx_on, tmp_path):
    """status.json changes under one inode: every read after a change of its bytes gets the new
    bytes whole (st_size = bytes read, valid JSON), dated anew (the ETag moves with them); bytes
    that did not change keep their date. The same through nginx (Content-Length = body)."""
    src = copy_fixtures(tmp_path / "src", ["csr_f32"])
    m = mounts(src)
    status, store = m.mnt / "status.json", m.mnt / "csr_f32.zarr"
    web = nginx_on(m.mnt)

    def by_read():
        """As a reader without stat: open, read(2) until EOF."""
        fd = os.open(status, os.O_RDONLY)
        try:
            parts = []
            while part := os.read(fd, 256):
                parts.append(part)
            return b"".join(parts)
        finally:
            os.close(fd)

    def by_http():
        code, headers, body = web.request("status.json")
        assert code == 200 and int(headers["content-length"]) == len(body), (code, headers, len(body))
        return body, headers["etag"]

    def produced(data):
        return json.loads(data)["cache"]["produced"]

    first = read_checked(status)
    mtime = os.stat(status).st_mtime_ns
    assert read_checked(status) == first and os.stat(status).st_mtime_ns == mtime, "unchanged bytes, new date"
    body, etag = by_http()
    assert body == first and by_http() == (body, etag)
    for k, chunk in enumerate(chunk_files(store)[:6]):
        (store / chunk).read_bytes()     # its first lookup makes it: the counters move
        how = [lambda: read_checked(status), by_read, lambda: by_http()[0]][k % 3]
        now = how()
        assert produced(now) == produced(first) + k + 1, (k, chunk, now)
        assert os.stat(status).st_mtime_ns > mtime, "new bytes, same date"
        mtime = os.stat(status).st_mtime_ns
    body2, etag2 = by_http()
    assert etag2 != etag and produced(body2) == produced(first) + 6


# ---------------------------------------------------------------------------------------------
# 3. the cache


SMALL_CACHE = 1 << 20    # cache_size=1M, the smallest accepted


def make_many_obsm_h5ad(path, n_obs=20_000, entries=10, dims=8, seed=3):
    """Cells with many random (incompressible) obsm entries of ~0.6 MiB (one chunk each, each
    below a 1 MiB bound) and a small X: a store several times the bound, little layout work."""
    rng = np.random.default_rng(seed)
    X = sp.random(n_obs, 50, density=0.05, format="csr", dtype=np.float32, random_state=seed)
    a = ad.AnnData(X, obs=pd.DataFrame(index=[f"c{i}" for i in range(n_obs)]), dtype=np.float32)
    a.obsm["X_umap"] = rng.standard_normal((n_obs, 2)).astype(np.float32)
    for k in range(entries):
        a.obsm[f"X_rand{k}"] = rng.standard_normal((n_obs, dims)).astype(np.float32)
    a.write_h5ad(path)


def test_cache_bound_holds_and_evicts(cfs, mounts, tmp_path):
    """More than cache_size is read: the cache folder (entries, temporaries, layout work files
    the daemon holds open; the SQLite index aside) never exceeds the bound, entries are
    evicted, the bytes stay right (read again, and after a remount whose kernel caches are
    cold)."""
    src = copy_fixtures(tmp_path / "src", ["csr_f32", "raw_layers", "categoricals"])
    make_many_obsm_h5ad(src / "many_obsm.h5ad")
    out = tmp_path / "out"
    export_of(cfs, src, out)
    total = sum(len((out / f).read_bytes()) for f in walk(out)[1])
    assert total > 4 * SMALL_CACHE, total
    cache = tmp_path / "cache"

    m = mounts(src, cache=cache, opts=["cache_size=1M"])
    with UsageMonitor(cache, m.pid) as mon:
        assert_same_tree(m.mnt, out)
        assert_same_tree(m.mnt, out)
    c = cache_stats(m)
    assert mon.peak <= SMALL_CACHE, f"the cache folder reached {mon.peak} bytes (bound {SMALL_CACHE})"
    assert mon.peak > SMALL_CACHE // 2, f"the sampler saw at most {mon.peak} bytes: it did not see the cache"
    assert c["evicted"] > 0, c
    assert c["bytes"] <= SMALL_CACHE, c
    entries = [f for f in os.listdir(cache) if f.isdigit()]
    assert c["entries"] == len(entries), (c, len(entries))
    assert c["bytes"] == sum(os.path.getsize(cache / f) for f in entries), c
    m.stop()

    m = mounts(src, mnt=m.mnt, cache=cache, opts=["cache_size=1M"])
    with UsageMonitor(cache, m.pid) as mon:
        assert_same_tree(m.mnt, out)
    assert mon.peak <= SMALL_CACHE, f"the cache folder reached {mon.peak} bytes after the remount"
    c = cache_stats(m)
    assert c["evicted"] > 0 and c["bytes"] <= SMALL_CACHE, c


def test_layout_work_counts_against_the_bound(cfs, mounts, big, tmp_path):
    """The layout's work files (spill and results, unlinked but held open) count against
    cache_size: X and a layer each need ~47 MiB of work (their results counted at ~19 MiB, the
    codec's worst), and once laid out their results hold ~8.5 MiB each. Under a 52 MiB bound,
    laying out the layer drops X's idle results (counted in status.json), the folder never
    exceeds the bound, and every byte is the export's, X read again included."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copyfile(big(40_000), src / "big.h5ad")
    out = tmp_path / "out"
    export_of(cfs, src, out)
    cache, bound = tmp_path / "cache", 52 << 20
    m = mounts(src, cache=cache, opts=["cache_size=52M"])
    with UsageMonitor(cache, m.pid) as mon:
        assert_same_tree(m.mnt, out)
        c = cache_stats(m)
        assert c["max_bytes"] == bound and 0 < c["work_bytes"] <= bound, c
        assert c["work_dropped"] >= 1, c
    assert mon.peak <= bound, f"the cache folder and work files reached {mon.peak} bytes (bound {bound})"
    # When the spill pass ends, its files (up to 28 of X's 47 MiB) are all there; from then on each
    # is truncated once its bucket is sorted, while the results grow.
    assert mon.peak > 24 << 20, f"the work files were not seen ({mon.peak} bytes at most)"
    assert m.status()["sources"][0]["state"] == "ready"


def test_layout_results_count_what_they_hold(cfs, mounts, big, tmp_path):
    """A pass reserves its results at the codec's worst case (every chunk incompressible); once
    they are written only what their files hold stays counted against cache_size, so the rest
    goes back to the cache: status.json's work bytes equal the work files the daemon holds open
    (only the results' are left once the pass ends), well under the reservation."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copyfile(big(40_000), src / "big.h5ad")
    out = tmp_path / "out"
    export_of(cfs, src, out)
    cache = tmp_path / "cache"
    m = mounts(src, cache=cache)
    assert (m.mnt / "big.zarr/X/data/0").read_bytes() == (out / "big.zarr/X/data/0").read_bytes()
    held = wait_for(lambda: (lambda w, h: h if w == h else 0)(cache_stats(m)["work_bytes"],
                                                              open_deleted_under(m.pid, cache)),
                    60, "status.json's work bytes equal the work files held open")
    meta = {a: json.loads((out / f"big.zarr/X/{a}/.zarray").read_text()) for a in ("data", "indices")}
    raw = sum(z["shape"][0] * np.dtype(z["dtype"]).itemsize for z in meta.values())
    stored = sum((out / f).stat().st_size for f in walk(out)[1]
                 if f.startswith(("big.zarr/X/data/", "big.zarr/X/indices/")) and not f.endswith(".zarray"))
    # the reservation was at least the raw values and indices; what is held is about the store's
    assert 0.9 * stored <= held < 0.8 * raw, (held, stored, raw)


def test_layout_work_waits_for_room(cfs, mounts, big, tmp_path):
    """8 readers of random chunks of X and of a layer at once, under a bound that holds one
    layout's work at a time: a layout that does not fit waits for the running one (never an
    EIO), idle results are dropped and made again, every byte is the export's, the bound holds."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copyfile(big(40_000), src / "big.h5ad")
    out = tmp_path / "out"
    export_of(cfs, src, out)
    files = [f for f in walk(out)[1] if f.startswith(("big.zarr/X/", "big.zarr/layers/"))]
    cache, bound = tmp_path / "cache", 52 << 20
    m = mounts(src, cache=cache, opts=["cache_size=52M"])
    problems, reads = [], []

    def reader(seed):
        rng = random.Random(seed)
        for _ in range(40):
            rel = rng.choice(files)
            try:
                if (m.mnt / rel).read_bytes() != (out / rel).read_bytes():
                    problems.append((rel, "wrong bytes"))
                reads.append(rel)
            except OSError as e:
                problems.append((rel, repr(e)))

    with UsageMonitor(cache, m.pid) as mon:
        threads = [threading.Thread(target=reader, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    assert not any(t.is_alive() for t in threads), "a reader hung"
    assert not problems, problems[:5]
    assert len(reads) == 8 * 40
    assert mon.peak <= bound, f"the cache folder and work files reached {mon.peak} bytes (bound {bound})"
    c = cache_stats(m)
    assert c["work_dropped"] >= 1 and c["work_bytes"] <= bound, c


def test_layout_work_larger_than_the_bound(cfs, mounts, big, tmp_path):
    """A bound too small for a layout's work: the expression chunks fail with EIO, the status
    document names the chunk and says to raise cache_size, the log says so too, and everything
    else of the store (and the other datasets) is served right."""
    src = copy_fixtures(tmp_path / "src", ["csr_f32"])
    shutil.copyfile(big(40_000), src / "big.h5ad")
    out = tmp_path / "out"
    export_of(cfs, src, out)
    m = mounts(src, opts=["cache_size=16M"])
    with pytest.raises(OSError) as e:
        (m.mnt / "big.zarr" / "X" / "data" / "0").read_bytes()
    assert e.value.errno == errno.EIO, e.value
    st = by_source(m.status())["big.h5ad"]
    assert st["state"] == "ready" and "raise -o cache_size" in st.get("chunk_failure", ""), st
    assert st["chunk_failure"].startswith("X/data/0: ") and "X: its layout needs" in st["chunk_failure"], st
    assert "raise -o cache_size" in m.stderr(), m.stderr()
    for rel in walk(out)[1]:
        if rel.startswith(("big.zarr/X/", "big.zarr/layers/")):
            continue
        assert read_checked(m.mnt / rel) == (out / rel).read_bytes(), rel


def test_cache_reused_on_remount_and_keyed_by_options(cfs, mounts, tmp_path):
    src = copy_fixtures(tmp_path / "src", ["csr_f32", "raw_layers", "categoricals", "dense_f32", "nullable"])
    out = tmp_path / "out"
    export_of(cfs, src, out)
    cache = tmp_path / "cache"
    nchunks = sum(len(chunk_files(out / d)) for d in os.listdir(out) if d.endswith(".zarr"))

    m = mounts(src, cache=cache)
    assert_same_tree(m.mnt, out)
    first = cache_stats(m)
    assert first["produced"] == nchunks and first["evicted"] == 0, (first, nchunks)
    # store files are dated by their source version (stable ETags); the catalog may be dated
    # by the mount
    store_files = [f for f in walk(out)[1] if f != "datasets.json"]
    mtimes = {f: os.stat(m.mnt / f).st_mtime_ns for f in store_files}
    m.stop()

    # a remount with unchanged sources and options recomputes nothing; sizes and mtimes (ETags)
    # are those of the first mount
    m = mounts(src, mnt=m.mnt, cache=cache)
    assert_same_tree(m.mnt, out)
    again = cache_stats(m)
    assert again["produced"] == 0 and again["misses"] == 0, again
    assert again["hits"] >= nchunks, again
    assert again["entries"] == first["entries"], (first, again)
    assert {f: os.stat(m.mnt / f).st_mtime_ns for f in store_files} == mtimes
    m.stop()

    # another compressor with the same cache: zstd stores, every chunk made afresh
    out_z = tmp_path / "out-zstd"
    export_of(cfs, src, out_z, "-o", "compressor=zstd")
    m = mounts(src, mnt=m.mnt, cache=cache, opts=["compressor=zstd"])
    got = assert_same_tree(m.mnt, out_z)
    z = cache_stats(m)
    assert z["produced"] == nchunks, (z, nchunks)
    zstd, blosc = numcodecs.Zstd(), numcodecs.Blosc()
    decoded = 0
    for rel in got:
        if not rel.endswith("/.zarray"):
            continue
        za = json.loads(got[rel])
        adir = rel[: -len("/.zarray")]
        scalar = za["shape"] == [] and za["compressor"] is None   # as zarr-python writes scalars
        assert scalar or za["compressor"]["id"] == "zstd", (rel, za["compressor"])
        old = json.loads((out / rel).read_bytes())["compressor"]
        for ck in chunk_files(m.mnt / adir):
            a = got[f"{adir}/{ck}"] if scalar else zstd.decode(got[f"{adir}/{ck}"])
            b = (out / adir / ck).read_bytes()
            b = blosc.decode(b) if old else b
            assert bytes(a) == bytes(b), f"{adir}/{ck}: the zstd chunk holds other values than the blosc one"
            decoded += 1
    assert decoded == nchunks, (decoded, nchunks)


# ---------------------------------------------------------------------------------------------
# 4. kill -9 during chunk production


def test_kill9_during_production_then_remount(cfs, mounts, big, tmp_path):
    """Two crashes: SIGKILL 50 ms into the layout job of X (4 readers waiting on it), then
    SIGKILL the moment the first chunk entry lands in the cache (others being made and stored).
    After each, `fusermount3 -uz`; a remount with the same cache serves every file right, reuses
    what the crashes left in the cache and leaves no temporary."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copyfile(big(100_000), src / "big.h5ad")
    out = tmp_path / "out"
    export_of(cfs, src, out)
    files = walk(out / "big.zarr")[1]
    nchunks = len(chunk_files(out / "big.zarr"))
    # the reorganised arrays first (they need the layout job), then everything else
    order = sorted(files, key=lambda f: (not f.startswith(("X/", "layers/")), f))
    cache = tmp_path / "cache"
    mnt = tmp_path / "mnt"

    def entries():
        return [f for f in os.listdir(cache) if f.isdigit()]

    for when in ("during the layout job", "as the first entry lands"):
        m = mounts(src, mnt=mnt, cache=cache, opts=["memory=16M"])
        before = len(entries())
        started, done, errors = threading.Event(), [], []

        def reader(files):
            started.set()
            for f in files:
                try:
                    done.append((f, (m.mnt / "big.zarr" / f).read_bytes()))
                except OSError as e:
                    errors.append((f, e))
                    return

        threads = [threading.Thread(target=reader, args=(order[k::4],)) for k in range(4)]
        for t in threads:
            t.start()
        assert started.wait(10), "the readers did not start"
        if when == "during the layout job":
            time.sleep(0.05)
            # the status document shows the work going on (docs/design.md §6)
            st = m.status()["sources"][0]
            assert st["state"] == "working", st
            assert st["progress"]["element"] in ("X", "layers/counts"), st
            assert 0 <= st["progress"]["fraction"] < 1, st
        else:
            deadline = time.monotonic() + 30
            while len(entries()) == before and time.monotonic() < deadline:
                time.sleep(0.001)
            assert len(entries()) > before, "no entry landed within 30 s: the kill would not be the one named"
        m.kill9()
        for t in threads:
            t.join(30)
            assert not t.is_alive(), "a reader hung after the daemon was killed"
        assert errors, f"every read finished before the kill ({when}): the kill was not during production"
        assert len(entries()) < nchunks, f"all chunks were stored before the kill ({when})"
        for f, data in done:     # whatever was read before the crash was right
            assert data == (out / "big.zarr" / f).read_bytes(), f"{f} read before the kill ({when}) differs"

    m = mounts(src, mnt=mnt, cache=cache, opts=["memory=16M"])
    kept = cache_stats(m)["entries"]
    assert kept == len(entries()), (kept, sorted(os.listdir(cache)))
    assert not [f for f in os.listdir(cache) if f.startswith("tmp-")], sorted(os.listdir(cache))
    assert_same_tree(m.mnt, out)
    c = cache_stats(m)
    assert c["produced"] == nchunks - kept, f"{kept} entries survived the crashes, yet: {c}"
    assert c["entries"] == nchunks == len(entries()), c


# ---------------------------------------------------------------------------------------------
# 5. 16 parallel readers of one cold store


def test_parallel_readers_single_flight(cfs, mounts, big, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copyfile(big(40_000), src / "big.h5ad")
    shutil.copyfile(good_path("raw_layers"), src / "raw_layers.h5ad")
    out = tmp_path / "out"
    export_of(cfs, src, out)
    store = "big.zarr"
    files = walk(out / store)[1]
    chunks = chunk_files(out / store)
    assert len(chunks) >= 20, chunks
    want = {f: (out / store / f).read_bytes() for f in files}

    m = mounts(src)
    before = cache_stats(m)
    assert before["produced"] == 0 and before["entries"] == 0, before
    barrier = threading.Barrier(16)
    results, failures = [None] * 16, []

    def reader(k):
        mine = list(files)
        random.Random(k).shuffle(mine)
        got = {}
        try:
            barrier.wait(30)
            for f in mine:
                got[f] = read_checked(m.mnt / store / f)
        except Exception as e:  # noqa: BLE001
            failures.append((k, repr(e)))
        results[k] = got

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a reader hung"
    assert not failures, failures
    for k, got in enumerate(results):
        bad = sorted(f for f in files if got.get(f) != want[f])
        assert not bad, f"reader {k}: {len(bad)} files differ from the export: {bad[:10]}"
    c = cache_stats(m)
    assert c["produced"] == len(chunks), f"{c['produced']} productions for {len(chunks)} distinct chunks: {c}"
    assert c["misses"] == len(chunks) and c["entries"] == len(chunks), c


# ---------------------------------------------------------------------------------------------
# 6. read-only


def test_read_only_erofs(cfs, mounts, tmp_path):
    src = copy_fixtures(tmp_path / "src", ["csr_f32"])
    before_src = snapshot([src])
    m = mounts(src)
    mnt = m.mnt
    store = mnt / "csr_f32.zarr"
    chunk = store / "obs" / "n_genes" / "0"
    # The first open of a mount is the one the daemon answers to put the kernel in no-open mode
    # (it opens files itself from then on): a write open first, then after reads, is EROFS.
    first = {}
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC):
        try:
            os.close(os.open(chunk, flags))
            first[flags] = "succeeded"
        except OSError as e:
            if e.errno != errno.EROFS:
                first[flags] = f"errno {e.errno} ({errno.errorcode.get(e.errno)}), expected EROFS"
    assert not first, first
    before = {p: read_checked(p) for p in (mnt / "datasets.json", store / ".zattrs", chunk)}

    attempts = {
        "create a file": lambda: open(mnt / "new.txt", "w"),
        "create a file in an array": lambda: open(store / "X" / "data" / "new", "wb"),
        "create with O_CREAT|O_EXCL": lambda: os.open(mnt / "excl", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644),
        "open the catalog for writing": lambda: open(mnt / "datasets.json", "r+"),
        "append to .zattrs": lambda: open(store / ".zattrs", "a"),
        "open a chunk O_WRONLY": lambda: os.open(chunk, os.O_WRONLY),
        "truncate a chunk": lambda: os.truncate(chunk, 0),
        "mkdir": lambda: os.mkdir(mnt / "newdir"),
        "mkdir in a store": lambda: os.mkdir(store / "newgroup"),
        "unlink": lambda: os.unlink(mnt / "datasets.json"),
        "unlink a chunk": lambda: os.unlink(chunk),
        "rmdir a store": lambda: os.rmdir(store),
        "rename": lambda: os.rename(mnt / "datasets.json", mnt / "moved.json"),
        "chmod": lambda: os.chmod(mnt / "datasets.json", 0o666),
        "utime": lambda: os.utime(chunk, (0, 0)),
        "symlink": lambda: os.symlink("datasets.json", mnt / "link"),
    }
    wrong = {}
    for what, f in attempts.items():
        try:
            r = f()
        except OSError as e:
            if e.errno != errno.EROFS:
                wrong[what] = f"errno {e.errno} ({errno.errorcode.get(e.errno)}), expected EROFS"
            continue
        if hasattr(r, "close"):
            r.close()
        elif isinstance(r, int):
            os.close(r)
        wrong[what] = "succeeded"
    assert not wrong, wrong
    assert {p: read_checked(p) for p in before} == before
    assert sorted(os.listdir(mnt)) == ["csr_f32.zarr", "datasets.json", "status.json"]
    assert snapshot([src]) == before_src, "the source folder changed"


# ---------------------------------------------------------------------------------------------
# 7. refused sources


def test_refused_sources_listed_rest_served(cfs, mounts, oracle, tmp_path):
    src = copy_fixtures(tmp_path / "src", ["csr_f32", "no_embedding"])
    for n in sorted(BAD):
        shutil.copyfile(bad_path(n), src / BAD[n]["file"])
    out = tmp_path / "out"
    r = export_of(cfs, src, out, expect_rc=2)
    m = mounts(src)

    assert (m.mnt / "datasets.json").read_bytes() == (out / "datasets.json").read_bytes()
    ids = [d["id"] for d in m.catalog()["datasets"]]
    expect_listed = sorted(["csr_f32"] + [n for n in LEFT_OUT_NAMES if in_catalog(oracle(n, bad=True))])
    assert ids == expect_listed, ids
    assert_same_tree(m.mnt, out)

    srcs = by_source(m.status())
    assert sorted(srcs) == sorted(os.listdir(src)), sorted(srcs)
    for n in REFUSED_NAMES:
        fn = BAD[n]["file"]
        s = srcs[fn]
        assert s["state"] == "refused" and s["in_catalog"] is False, s
        reason = s["reason"]
        assert isinstance(reason, str) and "\n" not in reason and "; " in reason, s
        assert re.search(BAD[n]["phrase"], reason.split("; ", 1)[0], re.IGNORECASE), (BAD[n]["phrase"], reason)
        line = [l for l in refused_lines(r.stderr) if fn in l]
        assert len(line) == 1 and line[0].endswith(": refused: " + reason), \
            f"status reason {reason!r} is not the export's {line}"
        assert not (m.mnt / f"{Path(fn).stem}.zarr").exists()
    for n in LEFT_OUT_NAMES:
        s = srcs[BAD[n]["file"]]
        assert s["state"] == "ready" and s["reason"] is None, s
        assert sorted(x["element"] for x in s["left_out"]) == sorted(BAD[n]["left_out"]), s
        lines = [l for l in left_out_lines(r.stderr) if BAD[n]["file"] in l]
        for x in s["left_out"]:
            assert x["reason"] and any(l.endswith(f": left out {x['element']}: {x['reason']}") for l in lines), \
                (x, lines)
        assert_adata_equal(ad.read_zarr(str(m.mnt / f"{s['id']}.zarr")), oracle(n, bad=True),
                           dataset_id=s["id"], dataset_name=Path(BAD[n]["file"]).stem)
    for n in ("csr_f32", "no_embedding"):
        s = srcs[GOOD[n]["file"]]
        assert s["state"] == "ready", s
        assert_adata_equal(ad.read_zarr(str(m.mnt / f"{fixture_id(n)}.zarr")), oracle(n),
                           dataset_id=fixture_id(n), dataset_name=fixture_name(n))
    assert srcs["no_embedding.h5ad"]["in_catalog"] is False


def test_status_not_in_catalog_says_what_to_do(cfs, mounts, tmp_path):
    """A dataset without a drawable embedding: status.json says why and what to do (issue 4),
    in the export's words."""
    src = copy_fixtures(tmp_path / "src", ["no_embedding", "csr_f32"])
    r = export_of(cfs, src, tmp_path / "out")
    m = mounts(src)
    s = by_source(m.status())["no_embedding.h5ad"]
    assert s["in_catalog"] is False, s
    line = [l for l in not_in_catalog_lines(r.stderr) if "no_embedding.h5ad" in l]
    assert len(line) == 1, describe(r)
    export_words = line[0].split(": not in datasets.json: ", 1)[1]
    assert s.get("not_in_catalog") == export_words, \
        f"status.json says {s.get('not_in_catalog')!r}; the export says {export_words!r}"


# ---------------------------------------------------------------------------------------------
# 8. live sources (docs/design.md §9): add, rewrite, delete while mounted


def _catalog_ids(m):
    return [d["id"] for d in m.catalog()["datasets"]]


def _store_equals(m, did, oracle, fixture, filename):
    """MNT/<did>.zarr reads equal to the good fixture `fixture` served under `filename`."""
    name = GOOD[fixture].get("expect_name") or strip_format_ext(filename)
    assert_adata_equal(ad.read_zarr(str(m.mnt / f"{did}.zarr")), oracle(fixture), dataset_id=did, dataset_name=name)
    return True


def test_live_add_source(cfs, mounts, oracle, tmp_path):
    src = copy_fixtures(tmp_path / "src", ["csr_f32"])
    m = mounts(src)
    assert _catalog_ids(m) == ["csr_f32"]
    assert not (m.mnt / "added.zarr").exists()      # a negative lookup the kernel may remember
    # one file copied in place (as cp does), one renamed into place (as careful tools do)
    shutil.copyfile(good_path("dense_f32"), src / "added.h5ad")
    staged = tmp_path / "staged.h5ad"
    shutil.copyfile(good_path("categoricals"), staged)
    os.rename(staged, src / "renamed.h5ad")

    wait_for(lambda: _catalog_ids(m) == ["added", "csr_f32", "renamed"], LIVE_TIMEOUT,
             "datasets.json lists the added sources")
    wait_for(lambda: _store_equals(m, "added", oracle, "dense_f32", "added.h5ad"), LIVE_TIMEOUT,
             "added.zarr is readable and equals its source")
    wait_for(lambda: _store_equals(m, "renamed", oracle, "categoricals", "renamed.h5ad"), LIVE_TIMEOUT,
             "renamed.zarr is readable and equals its source")
    srcs = by_source(m.status())
    assert srcs["added.h5ad"]["state"] == "ready" and srcs["renamed.h5ad"]["state"] == "ready", srcs
    check_consolidated(m.mnt / "added.zarr")
    _store_equals(m, "csr_f32", oracle, "csr_f32", "csr_f32.h5ad")


class OpenWatch:
    """The names of the files opened in a folder, from inotify (IN_OPEN) through libc."""

    IN_OPEN, IN_NONBLOCK = 0x20, 0o4000

    def __init__(self, folder):
        import ctypes
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(self.IN_NONBLOCK)
        assert self.fd >= 0, f"inotify_init1: errno {ctypes.get_errno()}"
        wd = self.libc.inotify_add_watch(self.fd, str(folder).encode(), self.IN_OPEN)
        assert wd >= 0, f"inotify_add_watch: errno {ctypes.get_errno()}"

    def names(self):
        """Names opened since the last call."""
        import struct
        got = []
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return got
            off = 0
            while off < len(buf):
                _, _, _, length = struct.unpack_from("iIII", buf, off)
                got.append(buf[off + 16: off + 16 + length].rstrip(b"\0").decode())
                off += 16 + length

    def close(self):
        os.close(self.fd)


def test_live_change_opens_only_what_changed(cfs, mounts, oracle, tmp_path):
    """Adding a source opens that source only: the ones served at an unchanged version are not
    read again (inotify sees every open under SRC). A new source that takes an existing one's
    id (it sorts first) has that one opened again under its new id, so both stores are right."""
    src = copy_fixtures(tmp_path / "src", ["csr_f32", "categoricals"])
    shutil.copyfile(good_path("dense_f32"), src / "b.hdf5")
    m = mounts(src)
    assert _catalog_ids(m) == ["b", "categoricals", "csr_f32"]
    watch = OpenWatch(src)
    try:
        shutil.copyfile(good_path("nullable"), src / "added.h5ad")
        wait_for(lambda: "added" in _catalog_ids(m), LIVE_TIMEOUT, "datasets.json lists added")
        opened = set(watch.names()) - {"added.h5ad", ""}     # "": the folder, listed
        assert not opened, f"unchanged sources were opened again: {sorted(opened)}"
        _store_equals(m, "added", oracle, "nullable", "added.h5ad")

        shutil.copyfile(good_path("csr_f32"), src / "b.h5ad")     # sorts before b.hdf5
        wait_for(lambda: _catalog_ids(m) == ["added", "b", "b-2", "categoricals", "csr_f32"],
                 LIVE_TIMEOUT, "b.h5ad takes the id b, b.hdf5 becomes b-2")
        opened = set(watch.names()) - {"b.h5ad", ""}
        assert opened == {"b.hdf5"}, f"opened again: {sorted(opened)} (only b.hdf5, renamed, should be)"
    finally:
        watch.close()
    _store_equals(m, "b", oracle, "csr_f32", "b.h5ad")
    _store_equals(m, "b-2", oracle, "dense_f32", "b.hdf5")
    _store_equals(m, "csr_f32", oracle, "csr_f32", "csr_f32.h5ad")


def test_live_rewrite_source(cfs, mounts, oracle, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copyfile(good_path("csr_f32"), src / "data.h5ad")
    m = mounts(src)
    _store_equals(m, "data", oracle, "csr_f32", "data.h5ad")   # read it all: kernel and chunk caches warm
    old_obs = (m.mnt / "data.zarr" / ".zmetadata").read_bytes()

    shutil.copyfile(good_path("categoricals"), src / "data.h5ad")   # same name, new content
    wait_for(lambda: _store_equals(m, "data", oracle, "categoricals", "data.h5ad"), LIVE_TIMEOUT,
             "data.zarr (obs, X, ...) reflects the rewritten source")
    assert (m.mnt / "data.zarr" / ".zmetadata").read_bytes() != old_obs
    out = tmp_path / "out"
    export_of(cfs, src, out)
    assert_same_tree(m.mnt, out)

    # and back, by rename over it (a new inode)
    staged = tmp_path / "staged.h5ad"
    shutil.copyfile(good_path("raw_layers"), staged)
    os.rename(staged, src / "data.h5ad")
    wait_for(lambda: _store_equals(m, "data", oracle, "raw_layers", "data.h5ad"), LIVE_TIMEOUT,
             "data.zarr reflects the source renamed over the old one")


def test_live_delete_source(cfs, mounts, oracle, tmp_path):
    src = copy_fixtures(tmp_path / "src", ["csr_f32", "dense_f32"])
    m = mounts(src)
    _store_equals(m, "dense_f32", oracle, "dense_f32", "dense_f32.h5ad")
    assert _catalog_ids(m) == ["csr_f32", "dense_f32"]

    os.unlink(src / "dense_f32.h5ad")
    wait_for(lambda: _catalog_ids(m) == ["csr_f32"], LIVE_TIMEOUT, "datasets.json no longer lists dense_f32")
    wait_for(lambda: not (m.mnt / "dense_f32.zarr").exists(), LIVE_TIMEOUT, "dense_f32.zarr is gone")
    assert sorted(os.listdir(m.mnt)) == ["csr_f32.zarr", "datasets.json", "status.json"]
    assert "dense_f32.h5ad" not in by_source(m.status())
    _store_equals(m, "csr_f32", oracle, "csr_f32", "csr_f32.h5ad")
