"""Sources over HTTP(S) (issue 16, docs/design.md §11): a URL, or a NAME.url file in SRC, read by
range requests through libcurl.

- parity: `export URL` of an h5ad, a loom, a 10x .h5 and an .h5mu served by nginx is byte for
  byte the export of the same file read locally.
- mount: a folder mixing a NAME.url file and a local file; anndata reads the remote store equal
  to the file read by anndata, and the store is byte for byte the export of a local copy.
- ranges: a cold first view (obs and one embedding) of a mounted URL of a larger h5ad fetches a
  small fraction of it (counted in nginx's access log), by range requests only; a read
  spanning several missing blocks is one range request.
- redirects (302, 301 then 302) are followed with the Range and If-Match kept; a loop is
  refused naming the URL.
- a file replaced under nginx between two reads (412 to If-Match, directly and behind a
  redirect) fails the read with EIO, then the new version is served at once.
- change: a file replaced under nginx is served fresh (-o remote_poll=1).
- bad remote input: 404, 403, a server without range support (python's http.server), a
  truncated body, a lying Content-Length, a server that never answers, a closed port, TLS to a
  plain-HTTP port, an https server whose certificate is not trusted: each one line naming the
  URL (and, for TLS, -o remote_cafile), within the timeout, no crash.
- TLS: with -o remote_cafile=CA the same https URL (nginx with a throwaway CA's certificate)
  exports and mounts to the local file's export.
- a server stopped mid-read gives EIO for that read, and the same read once it is back gives
  the export's bytes: never a wrong chunk.
- inputs not read in parts (a Seurat .rds, a gzipped h5ad) are fetched whole, once, into the
  work space (export) or the cache's (mount, counted against cache_size, fetched again when the
  object changes): their stores equal the local file's export. A Zarr zip is refused.

Needs nginx (Debian package `nginx`) and /dev/fuse; a missing one fails, never skips.
"""

import errno
import gzip
import json
import http.server
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr

from conftest import FIXTURES_DIR, assert_adata_equal, describe, run_cfs, tree_bytes
from nginx import Nginx, TestCA, free_port

PARITY = ["h5ad/csr_f32.h5ad", "loom/loompy3.loom", "tenx/cellranger7_features.h5",
          "mudata/citeseq.h5mu"]
FETCHED = ["rds/seurat.rds", "compressed/csr_f32.h5ad.gz"]
CHANGED = {"rds/seurat.rds": "rds/sce.rds", "compressed/csr_f32.h5ad.gz": "h5ad/categoricals.h5ad"}
TIMEOUT = 3         # -o remote_timeout for the bad-input cases
SLACK = 12          # seconds a refusal may take beyond it (process start, a worker, retries)


@pytest.fixture
def served(tmp_path):
    """A folder served by nginx; yields (folder, Nginx). Stopped at teardown."""
    root = tmp_path / "remote"
    root.mkdir()
    n = Nginx(root, tmp_path / "nginx")
    n.start()
    yield root, n
    n.stop()


def copy_fixture(rel, dest):
    shutil.copyfile(FIXTURES_DIR / rel, dest)
    return dest


def wait_for_port(port, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)


def wait_for_tree(store, want, timeout=60):
    """The store's files once they are want (a refresh lays a changed source out afresh), or
    what they are when timeout seconds have passed."""
    got = None
    deadline = time.monotonic() + timeout
    while got != want and time.monotonic() < deadline:
        time.sleep(0.5)
        try:
            got = tree_bytes(store)
        except OSError:
            got = None
    return got


def requests_for(n, name):
    """(count, body bytes) of the GET requests nginx logged for /name, and their statuses."""
    log = (n.dir / "access.log").read_text()
    lines = [l for l in log.splitlines() if f"GET /{name} " in l]
    statuses = [l.split('"')[2].split()[0] for l in lines]
    sizes = [int(l.split('"')[2].split()[1]) for l in lines]
    return len(lines), sum(sizes), statuses


@pytest.mark.parametrize("rel", PARITY + FETCHED)
def test_export_of_url_equals_local_export(cfs, served, tmp_path, rel):
    """HDF5 inputs read in parts; an R object and a gzipped h5ad cannot be: fetched once, whole,
    into the export's work folder, then read from there. Either way the local file's export."""
    root, n = served
    name = Path(rel).name
    copy_fixture(rel, root / name)
    local = tmp_path / "local"
    local.mkdir()
    copy_fixture(rel, local / name)
    r1 = run_cfs(cfs, "export", n.url(name), tmp_path / "from_url")
    r2 = run_cfs(cfs, "export", local / name, tmp_path / "from_file")
    assert r1.returncode == r2.returncode == 0, describe(r1) + describe(r2)
    assert tree_bytes(tmp_path / "from_url") == tree_bytes(tmp_path / "from_file")
    count, body, statuses = requests_for(n, name)
    assert count >= 1 and set(statuses) == {"206"}, statuses
    if rel in FETCHED:      # the probes' first block, then the fetch: not block by block again
        size = (root / name).stat().st_size
        assert body <= 2 * size + (1 << 20), (body, size)


def test_mount_folder_with_url_file(cfs, served, mounts, tmp_path):
    root, n = served
    copy_fixture("h5ad/csr_f32.h5ad", root / "pbmc.h5ad")
    src = tmp_path / "src"
    src.mkdir()
    (src / "remote_pbmc.url").write_text(n.url("pbmc.h5ad") + "\n")
    copy_fixture("h5ad/categoricals.h5ad", src / "categoricals.h5ad")
    # The oracle of the store: the export of a local copy under the same name.
    local = tmp_path / "local"
    local.mkdir()
    copy_fixture("h5ad/csr_f32.h5ad", local / "remote_pbmc.h5ad")
    r = run_cfs(cfs, "export", local / "remote_pbmc.h5ad", tmp_path / "out")
    assert r.returncode == 0, describe(r)

    m = mounts(src)
    cat = (m.mnt / "datasets.json").read_text()
    assert '"remote_pbmc"' in cat and '"categoricals"' in cat, cat
    store = m.mnt / "remote_pbmc.zarr"
    assert tree_bytes(store) == tree_bytes(tmp_path / "out" / "remote_pbmc.zarr")
    assert_adata_equal(ad.read_zarr(str(store)), ad.read_h5ad(local / "remote_pbmc.h5ad"),
                       dataset_id="remote_pbmc", dataset_name="remote_pbmc")
    status = (m.mnt / "status.json").read_text()
    assert n.url("pbmc.h5ad") in status


def write_big_h5ad(path, n_obs=60000, n_vars=4000, density=0.03):
    rng = np.random.default_rng(7)
    x = sp.random(n_obs, n_vars, density=density, format="csr", dtype=np.float32,
                  random_state=rng)
    obs = pd.DataFrame({"cluster": pd.Categorical(rng.integers(0, 12, n_obs).astype(str)),
                        "n_genes": rng.integers(100, 5000, n_obs)},
                       index=[f"cell{i}" for i in range(n_obs)])
    var = pd.DataFrame(index=[f"gene{i}" for i in range(n_vars)])
    a = ad.AnnData(x, obs=obs, var=var)
    a.obsm["X_umap"] = rng.normal(size=(n_obs, 2)).astype(np.float32)
    a.write_h5ad(path)


def test_cold_first_view_fetches_a_small_fraction(cfs, served, mounts, tmp_path):
    root, n = served
    write_big_h5ad(root / "big.h5ad")
    size = (root / "big.h5ad").stat().st_size
    m = mounts(n.url("big.h5ad"))
    g = zarr.open_consolidated(str(m.mnt / "big.zarr"), mode="r")
    for key in ("obs/_index", "obs/cluster/codes", "obs/cluster/categories", "obs/n_genes",
                "obsm/X_umap"):
        assert g[key][...].shape[0] > 0
    count, fetched, statuses = requests_for(n, "big.h5ad")
    assert set(statuses) == {"206"}, statuses
    assert fetched < size / 4, f"{fetched} of {size} bytes fetched in {count} requests"
    # and what was read is right
    local = ad.read_h5ad(root / "big.h5ad")
    order = g["obs/cellucid_original_position"][...]
    np.testing.assert_array_equal(g["obsm/X_umap"][...], local.obsm["X_umap"][order])


def test_changed_remote_file_is_served_fresh(cfs, served, mounts, tmp_path):
    root, n = served
    copy_fixture("h5ad/csr_f32.h5ad", root / "changing.h5ad")
    src = tmp_path / "src"
    src.mkdir()
    (src / "changing.url").write_text(n.url("changing.h5ad"))
    m = mounts(src, opts=["remote_poll=1"])
    store = m.mnt / "changing.zarr"
    before = ad.read_zarr(str(store)).n_obs
    new = ad.read_h5ad(FIXTURES_DIR / "h5ad/categoricals.h5ad")
    assert new.n_obs != before
    copy_fixture("h5ad/categoricals.h5ad", root / "next.h5ad")
    os.replace(root / "next.h5ad", root / "changing.h5ad")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if ad.read_zarr(str(store)).n_obs == new.n_obs:
                break
        except (OSError, KeyError, ValueError):
            pass
        time.sleep(0.3)
    got = ad.read_zarr(str(store))
    assert got.n_obs == new.n_obs
    assert_adata_equal(got, new, dataset_id="changing", dataset_name="changing")


def test_read_of_many_missing_blocks_is_one_request(cfs, served, mounts, tmp_path):
    """A read spanning several blocks the cache lacks asks for them by one range request (at
    most 16 MiB), not one request a block: a mounted 17 MiB h5ad whose 12.8 MB embedding is
    contiguous (13 blocks of 1 MiB), viewed whole, costs at most 6 requests (block by block it
    took 15); the embedding's bytes are the file's (anndata's reading)."""
    root, n = served
    rng = np.random.default_rng(5)
    n_obs = 100000
    a = ad.AnnData(sp.random(n_obs, 50, density=0.01, format="csr", dtype=np.float32,
                             random_state=rng),
                   obs=pd.DataFrame(index=[f"c{i}" for i in range(n_obs)]))
    a.obsm["X_big"] = rng.normal(size=(n_obs, 32)).astype(np.float32)     # contiguous in HDF5
    a.write_h5ad(root / "dense.h5ad")
    m = mounts(n.url("dense.h5ad"))
    g = zarr.open_consolidated(str(m.mnt / "dense.zarr"), mode="r")
    order = g["obs/cellucid_original_position"][...]
    got = g["obsm/X_big"][...]
    count, fetched, statuses = requests_for(n, "dense.h5ad")
    np.testing.assert_array_equal(got, a.obsm["X_big"][order])
    assert set(statuses) == {"206"}, statuses
    size = (root / "dense.h5ad").stat().st_size
    # block by block (before): 15 requests, 13 of them for the embedding
    assert count <= 6, f"{count} requests for a {size}-byte file"
    assert fetched <= size + (2 << 20), (fetched, size)     # a block fetched twice at most


# ---------------------------------------------------------------------------------------------
# bad remote input


class BadHandler(http.server.BaseHTTPRequestHandler):
    """Answers by path: /forbidden.h5ad 403; /changed.h5ad 412 to every request with
    If-Match (its first byte, asked without, comes right); /noranges.h5ad the whole body to any
    Range;
    /truncated.h5ad and /lying.h5ad a right first byte, then ranges whose body is cut short
    (truncated: the connection closes mid-body; lying: a Content-Length smaller than the range
    it claims); /hang.h5ad never answers."""
    body = b""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        path = self.path
        if path == "/hang.h5ad":
            time.sleep(60)
            return
        if path == "/changed.h5ad" and self.headers.get("If-Match"):
            self.send_response(412)     # what nginx answers once the file was replaced
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path == "/forbidden.h5ad":
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        total = len(self.body)
        rng = self.headers.get("Range", "")
        if path == "/noranges.h5ad" or not rng.startswith("bytes="):
            self.send_response(200)
            self.send_header("Content-Length", str(total))
            self.end_headers()
            self.wfile.write(self.body)
            return
        first, last = (int(v) for v in rng[6:].split("-"))
        last = min(last, total - 1)
        part = self.body[first:last + 1]
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {first}-{last}/{total}")
        self.send_header("ETag", '"fixed"')
        if last == first or path not in ("/truncated.h5ad", "/lying.h5ad"):
            self.send_header("Content-Length", str(len(part)))
            self.end_headers()
            self.wfile.write(part)
        elif path == "/truncated.h5ad":
            self.send_header("Content-Length", str(len(part)))
            self.end_headers()
            self.wfile.write(part[:len(part) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        else:
            self.send_header("Content-Length", str(len(part) // 2))
            self.end_headers()
            self.wfile.write(part[:len(part) // 2])


@pytest.fixture
def bad_server():
    BadHandler.body = (FIXTURES_DIR / "h5ad/csr_f32.h5ad").read_bytes()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), BadHandler)
    server.daemon_threads = True
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def refuse(cfs, url, tmp_path, what):
    start = time.monotonic()
    r = run_cfs(cfs, "export", "-o", f"remote_timeout={TIMEOUT}", url, tmp_path / "out",
                timeout=TIMEOUT + SLACK + 30)
    took = time.monotonic() - start
    assert r.returncode > 0, describe(r)
    lines = [l for l in r.stderr.splitlines() if url in l]
    assert len(lines) == 1, describe(r)
    assert what in lines[0].lower(), describe(r)
    assert took < TIMEOUT + SLACK, f"{took:.1f} s"
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.zarray"))
    return lines[0]


def test_404(cfs, served, tmp_path):
    _, n = served
    refuse(cfs, n.url("missing.h5ad"), tmp_path, "404")


def test_403(cfs, bad_server, tmp_path):
    refuse(cfs, bad_server + "/forbidden.h5ad", tmp_path, "403")


def test_server_without_range_support(cfs, tmp_path):
    root = tmp_path / "plain"
    root.mkdir()
    copy_fixture("h5ad/csr_f32.h5ad", root / "x.h5ad")
    port = free_port()
    proc = subprocess.Popen(["/usr/bin/python3", "-m", "http.server", str(port), "--bind",
                             "127.0.0.1", "--directory", str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        line = refuse(cfs, f"http://127.0.0.1:{port}/x.h5ad", tmp_path, "range requests")
        assert "download" in line
    finally:
        proc.terminate()
        proc.wait(10)


def test_truncated_body(cfs, bad_server, tmp_path):
    refuse(cfs, bad_server + "/truncated.h5ad", tmp_path, "fewer bytes")


def test_lying_content_length(cfs, bad_server, tmp_path):
    refuse(cfs, bad_server + "/lying.h5ad", tmp_path, "fewer bytes")


def test_server_that_never_answers(cfs, bad_server, tmp_path):
    refuse(cfs, bad_server + "/hang.h5ad", tmp_path, "no whole answer")


def test_closed_port(cfs, tmp_path):
    refuse(cfs, f"http://127.0.0.1:{free_port()}/x.h5ad", tmp_path, "cannot connect")


def test_tls_to_plain_http(cfs, served, tmp_path):
    _, n = served
    refuse(cfs, f"https://127.0.0.1:{n.port}/x.h5ad", tmp_path, "tls")


REDIRECTS = """
        location = /moved.h5ad { return 302 /real/x.h5ad; }
        location = /gone_for_good.h5ad { return 301 /moved.h5ad; }
        location = /loop.h5ad { return 302 /loop_again.h5ad; }
        location = /loop_again.h5ad { return 302 /loop.h5ad; }"""


@pytest.fixture
def served_redirects(tmp_path):
    """nginx serving a folder with real/x.h5ad, /moved.h5ad answering 302 to it,
    /gone_for_good.h5ad 301 to /moved.h5ad, /loop.h5ad and /loop_again.h5ad 302 to each other.
    Yields (folder, Nginx)."""
    root = tmp_path / "remote"
    (root / "real").mkdir(parents=True)
    copy_fixture("h5ad/csr_f32.h5ad", root / "real" / "x.h5ad")
    n = Nginx(root, tmp_path / "nginx", server_extra=REDIRECTS)
    n.start()
    yield root, n
    n.stop()


def log_lines(n, path):
    """The status of each GET nginx logged for path, in order (a 206 answers a request that
    carried its Range; a range-less GET would get 200 and the whole file)."""
    log = (n.dir / "access.log").read_text()
    return [l.split('"')[2].split()[0] for l in log.splitlines() if f"GET {path} " in l]


@pytest.mark.parametrize("name,hops", [("moved.h5ad", 1), ("gone_for_good.h5ad", 2)])
def test_redirected_url_reads_the_target(cfs, served_redirects, mounts, tmp_path, name, hops):
    """A URL answering 302 (or 301 then 302) to the real file is read right: every request is
    redirected, the range request at the target keeps its Range (206, never a 200 with the
    whole file) and its If-Match (the version check: below, a file replaced under a redirect
    fails the read)."""
    root, n = served_redirects
    stem = name.split(".")[0]
    local = tmp_path / "local"
    local.mkdir()
    shutil.copyfile(root / "real" / "x.h5ad", local / name)    # the dataset's name is the URL's
    r1 = run_cfs(cfs, "export", n.url(name), tmp_path / "from_url")
    r2 = run_cfs(cfs, "export", local / name, tmp_path / "from_file")
    assert r1.returncode == r2.returncode == 0, describe(r1) + describe(r2)
    want = tree_bytes(tmp_path / "from_file" / f"{stem}.zarr")
    assert tree_bytes(tmp_path / "from_url" / f"{stem}.zarr") == want
    at_target = log_lines(n, "/real/x.h5ad")
    assert at_target and set(at_target) == {"206"}, at_target
    assert log_lines(n, "/moved.h5ad") == ["302"] * len(at_target)
    if hops == 2:
        assert log_lines(n, "/gone_for_good.h5ad") == ["301"] * len(at_target)
    m = mounts(n.url(name))
    assert tree_bytes(m.mnt / f"{stem}.zarr") == want


def test_redirect_loop_names_the_url(cfs, served_redirects, tmp_path):
    _, n = served_redirects
    line = refuse(cfs, n.url("loop.h5ad"), tmp_path, "too many redirects")
    assert "loop" in line.split(n.url("loop.h5ad"), 1)[1] and "check the url" in line.lower()


def test_412_names_the_url_and_the_change(cfs, bad_server, tmp_path):
    line = refuse(cfs, bad_server + "/changed.h5ad", tmp_path, "http 412")
    assert "the file changed on the server while it was read" in line, line


@pytest.mark.parametrize("redirected", [False, True])
def test_file_replaced_during_reads_gives_eio_then_the_new_version(cfs, served_redirects, mounts,
                                                                   tmp_path, redirected):
    """A mounted URL (direct, or through a 302) whose file nginx starts serving another version
    of: a read needing blocks not yet fetched is asked with If-Match, gets 412 and fails with
    EIO (the poll interval is long: the mount still takes the old version for current); that
    failure makes the next look ask the server again, so the new version is laid out and
    served fresh. Every read that succeeds is one version's bytes, never a mix."""
    root, n = served_redirects
    target = root / "real" / "x.h5ad"
    name = "moved.h5ad" if redirected else "real/x.h5ad"
    stem = Path(name).stem
    versions = []
    for k, n_obs in enumerate((20000, 15000)):
        local = tmp_path / f"v{k}"
        local.mkdir()
        write_big_h5ad(local / f"{stem}.h5ad", n_obs=n_obs, n_vars=500, density=0.05)
        r = run_cfs(cfs, "export", local / f"{stem}.h5ad", tmp_path / f"out{k}")
        assert r.returncode == 0, describe(r)
        versions.append((local / f"{stem}.h5ad", tmp_path / f"out{k}" / f"{stem}.zarr"))
    shutil.copyfile(versions[0][0], target)
    m = mounts(n.url(name), opts=["remote_poll=3600"])
    store = m.mnt / f"{stem}.zarr"
    first = Path("obs") / "_index" / "0"
    assert (store / first).read_bytes() == (versions[0][1] / first).read_bytes()
    shutil.copyfile(versions[1][0], tmp_path / "next.h5ad")
    os.replace(tmp_path / "next.h5ad", target)
    os.utime(target, (time.time() + 5, time.time() + 5))     # another ETag for certain
    key = Path("X") / "indices" / "0"          # gene-major: a pass over the whole matrix
    with pytest.raises(OSError) as e:
        (store / key).read_bytes()
    assert e.value.errno == errno.EIO
    assert "412" in log_lines(n, "/real/x.h5ad")
    # A walk may straddle the switch (its listing the old store's, its later reads the new
    # one's), so each file is checked on its own: one version's bytes, whole.
    old, new = tree_bytes(versions[0][1]), tree_bytes(versions[1][1])
    got = None
    deadline = time.monotonic() + 60
    while got != new and time.monotonic() < deadline:
        try:
            got = tree_bytes(store)
        except OSError as err:
            assert err.errno in (errno.EIO, errno.ENOENT), err
            time.sleep(0.3)
            continue
        mixed = [k for k, v in got.items() if v != old.get(k) and v != new.get(k)]
        assert not mixed, f"neither version's bytes: {mixed[:5]}"
    assert got == new


@pytest.fixture
def served_tls(tmp_path):
    """A folder served by nginx over https only, its certificate signed by a throwaway CA;
    yields (folder, Nginx, TestCA). Stopped at teardown."""
    root = tmp_path / "remote_tls"
    root.mkdir()
    ca = TestCA(tmp_path / "ca")
    n = Nginx(root, tmp_path / "nginx_tls", tls=ca)
    n.start()
    yield root, n, ca
    n.stop()


def test_untrusted_certificate_names_the_url_and_remote_cafile(cfs, served_tls, tmp_path):
    root, n, _ = served_tls
    copy_fixture("h5ad/csr_f32.h5ad", root / "x.h5ad")
    line = refuse(cfs, n.url("x.h5ad"), tmp_path, "tls failed")
    assert "certificate" in line and "-o remote_cafile=PEM" in line, line
    assert not requests_for(n, "x.h5ad")[0]     # refused at the handshake, nothing served


def test_trusted_with_remote_cafile_equals_local_export(cfs, served_tls, mounts, tmp_path):
    root, n, ca = served_tls
    copy_fixture("h5ad/csr_f32.h5ad", root / "x.h5ad")
    local = tmp_path / "local"
    local.mkdir()
    copy_fixture("h5ad/csr_f32.h5ad", local / "x.h5ad")
    r1 = run_cfs(cfs, "export", "-o", f"remote_cafile={ca.ca}", n.url("x.h5ad"),
                 tmp_path / "from_url")
    r2 = run_cfs(cfs, "export", local / "x.h5ad", tmp_path / "from_file")
    assert r1.returncode == r2.returncode == 0, describe(r1) + describe(r2)
    want = tree_bytes(tmp_path / "from_file")
    assert tree_bytes(tmp_path / "from_url") == want
    count, _, statuses = requests_for(n, "x.h5ad")
    assert count >= 1 and set(statuses) == {"206"}, statuses
    m = mounts(n.url("x.h5ad"), opts=[f"remote_cafile={ca.ca}"])
    assert tree_bytes(m.mnt / "x.zarr") == tree_bytes(tmp_path / "from_file" / "x.zarr")
    assert_adata_equal(ad.read_zarr(str(m.mnt / "x.zarr")), ad.read_h5ad(local / "x.h5ad"),
                       dataset_id="x", dataset_name="x")


def test_server_stopped_mid_read_gives_eio_then_the_right_bytes(cfs, served, mounts, tmp_path):
    root, n = served
    write_big_h5ad(root / "big.h5ad", n_obs=20000, n_vars=500, density=0.05)
    local = tmp_path / "local"
    local.mkdir()
    shutil.copyfile(root / "big.h5ad", local / "big.h5ad")
    r = run_cfs(cfs, "export", local / "big.h5ad", tmp_path / "out")
    assert r.returncode == 0, describe(r)
    m = mounts(n.url("big.h5ad"), opts=["remote_timeout=2"])
    store = m.mnt / "big.zarr"
    assert (store / "obs" / "_index" / "0").read_bytes() == \
        (tmp_path / "out" / "big.zarr" / "obs" / "_index" / "0").read_bytes()
    n.stop()
    key = Path("X") / "indices" / "0"          # gene-major: a pass over the whole matrix
    with pytest.raises(OSError) as e:
        (store / key).read_bytes()
    assert e.value.errno == errno.EIO
    # back on the same port: the same read now gives the export's bytes
    port = n.port
    conf = n.dir / "nginx.conf"
    out = open(n.dir / "stdout.log", "ab")
    n.proc = subprocess.Popen(["nginx", "-p", str(n.dir), "-c", str(conf), "-e",
                               str(n.dir / "error.log")], stdin=subprocess.DEVNULL, stdout=out,
                              stderr=subprocess.STDOUT)
    out.close()
    wait_for_port(port)
    got = None
    deadline = time.monotonic() + 30
    while got is None and time.monotonic() < deadline:
        try:
            got = (store / key).read_bytes()
        except OSError as err:
            assert err.errno == errno.EIO
            time.sleep(0.5)
    assert got == (tmp_path / "out" / "big.zarr" / key).read_bytes()




@pytest.mark.parametrize("rel", FETCHED)
def test_inspect_of_url_fetched_whole(cfs, served, tmp_path, rel):
    root, n = served
    name = Path(rel).name
    copy_fixture(rel, root / name)
    r = run_cfs(cfs, "inspect", "--json", n.url(name))
    l = run_cfs(cfs, "inspect", "--json", FIXTURES_DIR / rel)
    assert r.returncode == l.returncode == 0, describe(r) + describe(l)
    got, want = json.loads(r.stdout)["files"][0], json.loads(l.stdout)["files"][0]
    assert got["refused"] is None, got
    for k in ("format", "version", "n_obs", "n_vars", "X", "obs"):
        assert got[k] == want[k], (k, got, want)


@pytest.mark.parametrize("rel", FETCHED)
def test_mounted_input_fetched_whole_equals_local_export(cfs, served, mounts, tmp_path, rel):
    """Mounted (as a NAME.url file): fetched in the background into the cache's work space,
    counted in it, byte for byte the export of the local file; a changed file is fetched
    again."""
    root, n = served
    name = Path(rel).name
    stem = "remote_" + name.split(".")[0]
    ext = name[len(name.split(".")[0]):]
    copy_fixture(rel, root / name)
    src = tmp_path / "src"
    src.mkdir()
    (src / f"{stem}.url").write_text(n.url(name) + "\n")
    local = tmp_path / "local"
    local.mkdir()
    copy_fixture(rel, local / (stem + ext))
    r = run_cfs(cfs, "export", local / (stem + ext), tmp_path / "out")
    assert r.returncode == 0, describe(r)
    m = mounts(src, opts=["remote_poll=1"])
    store = m.mnt / f"{stem}.zarr"
    deadline = time.monotonic() + 60
    while not store.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert tree_bytes(store) == tree_bytes(tmp_path / "out" / f"{stem}.zarr")
    copies = list((m.cache / "unpacked").glob("*.copy"))
    assert len(copies) == 1, copies
    status = (m.mnt / "status.json").read_text()
    assert n.url(name) in status

    # another object under the same URL: fetched again, its store the new file's export
    if name.endswith(".gz"):
        (root / name).write_bytes(gzip.compress((FIXTURES_DIR / CHANGED[rel]).read_bytes()))
    else:
        copy_fixture(CHANGED[rel], root / name)
    shutil.copyfile(root / name, local / (stem + ext))
    r = run_cfs(cfs, "export", local / (stem + ext), tmp_path / "out2")
    assert r.returncode == 0, describe(r)
    want = tree_bytes(tmp_path / "out2" / f"{stem}.zarr")
    assert wait_for_tree(store, want) == want
    assert len(list((m.cache / "unpacked").glob("*.copy"))) == 1


def test_fetched_copy_is_counted_against_cache_size(cfs, served, mounts, tmp_path):
    """A fetched copy larger than the cache is refused with what to do, never half-kept."""
    root, n = served
    write_big_h5ad(tmp_path / "big.h5ad", n_obs=20000, n_vars=500, density=0.05)
    (root / "big.h5ad.gz").write_bytes(gzip.compress((tmp_path / "big.h5ad").read_bytes(), 1))
    assert (root / "big.h5ad.gz").stat().st_size > 2 << 20
    src = tmp_path / "src"
    src.mkdir()
    (src / "big.url").write_text(n.url("big.h5ad.gz") + "\n")
    m = mounts(src, opts=["cache_size=2M"])
    deadline = time.monotonic() + 60
    status = ""
    while "cache_size" not in status and time.monotonic() < deadline:
        time.sleep(0.2)
        status = (m.mnt / "status.json").read_text()
    assert "does not fit in the cache" in status and "cache_size" in status, status
    assert not list((m.cache / "unpacked").iterdir())
    assert not (m.mnt / "big.zarr").exists()


# MatrixMarket over a URL: the matrix is fetched whole with the lists its reader would find beside
# it (a 404 skips a name) into one folder of the work space, and read as the local files are.
# (fixture folder, URL's path under it: a GEO sample's matrix file, a Cell Ranger 2 list named
# genes.tsv, a kb-python matrix file, and a Cell Ranger >= 3 folder URL)
MTX_URLS = [("mtx/geo", "GSM100001_ctrl_matrix.mtx.gz"),
            ("mtx/geo", "GSM100002_treated_matrix.mtx.gz"),
            ("mtx/kb/counts_unfiltered", "cells_x_genes.mtx"),
            ("mtx/cellranger3/filtered_feature_bc_matrix", "")]


def local_mtx(fixture, name, dest, stem=None):
    """The same files as a local input at dest: the sample's files (renamed to stem's prefix for a
    GEO file), or the folder. Returns the input's path."""
    src = FIXTURES_DIR / fixture
    if not name:
        shutil.copytree(src, dest / (stem or src.name))
        return dest / (stem or src.name)
    prefix = name[:-len("matrix.mtx.gz")] if name.endswith("_matrix.mtx.gz") else ""
    dest.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name.startswith(prefix) and not f.name.endswith((".csv", ".csv.gz", ".txt")) or \
                not prefix and f.is_file():
            new = (stem + "_" + f.name[len(prefix):]) if stem and prefix else f.name
            shutil.copyfile(f, dest / new)
    new_name = (stem + "_" + name[len(prefix):]) if stem and prefix else name
    return dest / new_name


@pytest.mark.parametrize("fixture,name", MTX_URLS)
def test_export_of_matrixmarket_url_equals_local_export(cfs, served, tmp_path, fixture, name):
    root, n = served
    shutil.copytree(FIXTURES_DIR / fixture, root / "fx")
    url = n.url("fx/" + name) if name else n.url("fx") + "/"
    local = local_mtx(fixture, name, tmp_path / "local", stem=None if name else "fx")
    r1 = run_cfs(cfs, "export", url, tmp_path / "from_url")
    r2 = run_cfs(cfs, "export", local, tmp_path / "from_file")
    assert r1.returncode == r2.returncode == 0, describe(r1) + describe(r2)
    got, want = tree_bytes(tmp_path / "from_url"), tree_bytes(tmp_path / "from_file")
    assert got and got == want
    # fetched once each: the probes' one-byte ranges, then the whole file
    log = (n.dir / "access.log").read_text()
    for f in (root / "fx").iterdir():
        fetched = [l for l in log.splitlines() if f"GET /fx/{f.name} " in l and '" 206 ' in l]
        assert sum(int(l.split('"')[2].split()[1]) for l in fetched) <= 2 * f.stat().st_size + 8


def test_inspect_of_matrixmarket_url(cfs, served, tmp_path):
    root, n = served
    shutil.copytree(FIXTURES_DIR / "mtx/geo", root / "geo")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = run_cfs(cfs, "inspect", "--json", n.url("geo/GSM100002_treated_matrix.mtx.gz"),
                env={**os.environ, "TMPDIR": str(tmp)})
    l = run_cfs(cfs, "inspect", "--json", FIXTURES_DIR / "mtx/geo/GSM100002_treated_matrix.mtx.gz")
    assert r.returncode == l.returncode == 0, describe(r) + describe(l)
    # its fetched copy (a folder: the matrix with the files beside it) is removed again
    assert list(tmp.iterdir()) == []
    got, want = json.loads(r.stdout)["files"][0], json.loads(l.stdout)["files"][0]
    assert got["refused"] is None, got
    for k in ("format", "version", "n_obs", "n_vars", "X", "obs", "var"):
        assert got[k] == want[k], (k, got, want)


def _served_mtx_mount(cfs, served, mounts, tmp_path, opts=()):
    """A folder holding geo.url (a GEO sample's matrix over nginx) beside a local input,
    mounted; returns (root, mount, store)."""
    root, n = served
    shutil.copytree(FIXTURES_DIR / "mtx/geo", root / "geo")
    src = tmp_path / "src"
    src.mkdir()
    (src / "ctrl.url").write_text(n.url("geo/GSM100001_ctrl_matrix.mtx.gz") + "\n")
    copy_fixture("h5ad/categoricals.h5ad", src / "categoricals.h5ad")
    m = mounts(src, opts=list(opts))
    store = m.mnt / "ctrl.zarr"
    deadline = time.monotonic() + 60
    while not store.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    return root, m, store


def test_mounted_matrixmarket_url_file_equals_local(cfs, served, mounts, tmp_path):
    """NAME.url in a folder: the store equals the export of the same files (byte for byte), and
    read by anndata equals the files read by scipy and pandas (test_mtx's oracle)."""
    from test_mtx import assert_equal, oracle
    from test_outs import source_order
    root, m, store = _served_mtx_mount(cfs, served, mounts, tmp_path, ["remote_poll=1"])
    local = local_mtx("mtx/geo", "GSM100001_ctrl_matrix.mtx.gz", tmp_path / "local", "ctrl")
    r = run_cfs(cfs, "export", local, tmp_path / "out")
    assert r.returncode == 0, describe(r)
    assert tree_bytes(store) == tree_bytes(tmp_path / "out" / "ctrl.zarr")
    e = {"matrix": "ctrl_matrix.mtx.gz", "cells": "ctrl_barcodes.tsv.gz",
         "genes": "ctrl_features.tsv.gz", "rows": "genes", "path": local,
         "gene_cols": ["gene_ids", "feature_types"]}
    assert_equal(source_order(ad.read_zarr(str(store))), oracle(e))
    copies = list((m.cache / "unpacked").glob("*.copy"))
    assert len(copies) == 1 and copies[0].is_dir(), copies
    assert sorted(p.name for p in copies[0].iterdir()) == [
        "GSM100001_ctrl_barcodes.tsv.gz", "GSM100001_ctrl_features.tsv.gz",
        "GSM100001_ctrl_matrix.mtx.gz"]
    assert (m.mnt / "categoricals.zarr").exists()


def test_replaced_companion_changes_the_store(cfs, served, mounts, tmp_path):
    """The copy's version is all its files': a new barcodes list under nginx is fetched again
    and served, as a changed local list would be."""
    root, m, store = _served_mtx_mount(cfs, served, mounts, tmp_path, ["remote_poll=1"])
    before = tree_bytes(store)
    bcs = root / "geo" / "GSM100001_ctrl_barcodes.tsv.gz"
    lines = gzip.decompress(bcs.read_bytes()).decode().splitlines()
    renamed = [f"NEW{i}-{l}" for i, l in enumerate(lines)]
    bcs.write_bytes(gzip.compress(("\n".join(renamed) + "\n").encode()))
    local = local_mtx("mtx/geo", "GSM100001_ctrl_matrix.mtx.gz", tmp_path / "local", "ctrl")
    shutil.copyfile(bcs, local.parent / "ctrl_barcodes.tsv.gz")
    r = run_cfs(cfs, "export", local, tmp_path / "out")
    assert r.returncode == 0, describe(r)
    want = tree_bytes(tmp_path / "out" / "ctrl.zarr")
    assert want != before
    assert wait_for_tree(store, want) == want
    a = ad.read_zarr(str(store))
    assert sorted(a.obs_names) == sorted(renamed)
    assert len(list((m.cache / "unpacked").glob("*.copy"))) == 1


def test_matrixmarket_url_without_cell_list_is_refused_naming_it(cfs, served, tmp_path):
    root, n = served
    copy_fixture("mtx/bad/no_lists/GSM9_x_matrix.mtx.gz", root / "GSM9_x_matrix.mtx.gz")
    line = refuse(cfs, n.url("GSM9_x_matrix.mtx.gz"), tmp_path, "gsm9_x_barcodes.tsv[.gz]")
    assert "the cell list" in line and "on the server" in line, line
    log = (n.dir / "access.log").read_text()
    assert "GET /GSM9_x_barcodes.tsv " in log and "GET /GSM9_x_barcodes.tsv.gz " in log


def test_matrixmarket_companion_forbidden_is_refused_naming_its_url(cfs, tmp_path):
    """A 404 skips a name; any other answer for a companion refuses the source, in one line
    naming the companion's URL."""
    root = tmp_path / "remote"
    shutil.copytree(FIXTURES_DIR / "mtx/geo", root)
    n = Nginx(root, tmp_path / "nginx",
              server_extra="location = /GSM100001_ctrl_barcodes.tsv { return 403; }")
    n.start()
    try:
        url = n.url("GSM100001_ctrl_matrix.mtx.gz")
        line = refuse(cfs, url, tmp_path, "403")
        assert n.url("GSM100001_ctrl_barcodes.tsv") + ":" in line, line
    finally:
        n.stop()


def test_matrixmarket_folder_url_without_matrix_is_refused(cfs, served, tmp_path):
    """A folder URL holding neither Zarr metadata nor a matrix: refused as before, saying how a
    Zarr folder is read over HTTP."""
    root, n = served
    (root / "empty").mkdir()
    refuse(cfs, n.url("empty") + "/", tmp_path, "consolidated")


# A matrix whose name says nothing of its lists (locally refused for that too) is not fetched:
# named by its extension, not taken for a compressed copy of something read over HTTP.
def test_matrix_named_otherwise_is_refused_with_what_to_do(cfs, served, tmp_path):
    root, n = served
    copy_fixture("mtx/geo/GSM100001_ctrl_matrix.mtx.gz", root / "counts.mtx.gz")
    line = refuse(cfs, n.url("counts.mtx.gz"), tmp_path, "a .mtx file is not read over http yet")
    assert "compressed copy" not in line.split("yet")[0]
    assert "download it" in line
