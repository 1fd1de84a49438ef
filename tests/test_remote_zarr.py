"""AnnData Zarr stores over HTTP (issue 16, docs/design.md §11, formats/zarr/zarr_backend.c):
a `.zarr.zip` URL read in place by libzip over range requests, and a consolidated Zarr folder
URL (v2's .zmetadata, or v3's consolidated metadata inline in the root's zarr.json) read key by
key (URL/KEY), both through the same reader of URLs as HDF5 inputs (the daemon fetching for the
reader workers).

- parity: `export URL` of a zip and of a consolidated folder (v2; v3 with sharded arrays and
  every chunk key encoding, and a v3 MuData store) served by nginx is byte for byte the export
  of the same store read locally; the mounted store, read by anndata.read_zarr, equals
  anndata's reading of the local fixture (for v3, of the v2 store it was re-written from).
- ranges: a cold first view of a mounted `.zarr.zip` URL, and of a v3 folder URL, of a larger
  store fetches a small fraction of it (nginx's access log), by range requests only.
- a chunk the server has not (404) is a missing chunk: its fill value, as zarr-python reads it;
  a chunk it refuses (403) fails the export and the mounted read (EIO) naming its URL, never a
  fill; a folder without consolidated metadata (v2, or a v3 zarr.json without it) is refused
  in one line naming its URL and saying to consolidate it or serve it zipped.

Needs nginx (Debian package `nginx`) and /dev/fuse; a missing one fails, never skips.
"""

import errno
import os
import shutil
import time
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr

from conftest import FIXTURES_DIR, assert_adata_equal, describe, run_cfs, tree_bytes
from nginx import Nginx
from test_remote import requests_for


def statuses_under(n, name):
    """The statuses of the GET requests nginx logged for /name and the keys under it (but the
    look for the root metadata of the other Zarr version, which the store has not: 404)."""
    log = (n.dir / "access.log").read_text()
    other = (f"GET /{name}/zarr.json ", f"GET /{name}/.zmetadata ")
    return [l.split('"')[2].split()[0] for l in log.splitlines()
            if (f"GET /{name} " in l or f"GET /{name}/" in l)
            and not (any(o in l for o in other) and l.split('"')[2].split()[0] == "404")]

ZIP = FIXTURES_DIR / "zarr_v3_zip" / "zipstore.zarr.zip"       # zarr-python 2.13's ZipStore
ZIP_TWIN = FIXTURES_DIR / "zarr_v3_zip" / "twin.zarr"           # the folder it was made from
FOLDER = FIXTURES_DIR / "zarr" / "consolidated.zarr"
V3 = FIXTURES_DIR / "zarr_v3_zip" / "v3.zarr"                   # hand-made from ZIP_TWIN
V3_PLAIN = FIXTURES_DIR / "zarr_v3_zip" / "v3_plain.zarr"       # v3.zarr, not consolidated
MU_V3 = FIXTURES_DIR / "mudata" / "citeseq_v3.zarr"


def serve(tmp_path, server_extra=""):
    root = tmp_path / "remote"
    root.mkdir(exist_ok=True)
    n = Nginx(root, tmp_path / "nginx", server_extra=server_extra)
    return root, n


@pytest.fixture
def nginx_stop():
    started = []
    yield started.append
    for n in started:
        n.stop()


def put(src, dest):
    if Path(src).is_dir():
        shutil.copytree(src, dest)
    else:
        shutil.copyfile(src, dest)
    return dest


def export_both(cfs, tmp_path, url, local):
    r1 = run_cfs(cfs, "export", url, tmp_path / "from_url")
    r2 = run_cfs(cfs, "export", local, tmp_path / "from_file")
    assert r1.returncode == r2.returncode == 0, describe(r1) + describe(r2)
    return tree_bytes(tmp_path / "from_url"), tree_bytes(tmp_path / "from_file")


# (a trailing slash names a folder, so only the folder is given one)
@pytest.mark.parametrize("fixture,name,oracle,slash", [
    (ZIP, "pbmc.zarr.zip", ZIP_TWIN, ""), (FOLDER, "pbmc.zarr", FOLDER, ""),
    (FOLDER, "pbmc.zarr", FOLDER, "/"), (V3, "pbmc.zarr", ZIP_TWIN, ""),
    (V3, "pbmc.zarr", ZIP_TWIN, "/")])
def test_store_url_export_and_mount_equal_local(cfs, tmp_path, mounts, nginx_stop, fixture,
                                                 name, oracle, slash):
    root, n = serve(tmp_path)
    nginx_stop(n.start())
    put(fixture, root / name)
    (tmp_path / "local").mkdir()
    local = put(fixture, tmp_path / "local" / name)
    url = n.url(name) + slash
    got, want = export_both(cfs, tmp_path, url, local)
    assert got == want and any(k.endswith(".zarray") for k in got)
    statuses = statuses_under(n, name)
    assert statuses and set(statuses) == {"206"}, statuses

    m = mounts(url)
    store = m.mnt / "pbmc.zarr"
    assert tree_bytes(store) == tree_bytes(tmp_path / "from_file" / "pbmc.zarr")
    assert_adata_equal(ad.read_zarr(str(store)), ad.read_zarr(str(oracle)),
                       dataset_id="pbmc")


def test_v3_folder_url_poll_asks_the_key_that_answered(cfs, tmp_path, mounts, nginx_stop):
    """A v3 folder's version is its zarr.json's: each poll asks it, not first .zmetadata (which
    the store has not) and then it."""
    root, n = serve(tmp_path)
    nginx_stop(n.start())
    put(V3, root / "pbmc.zarr")
    m = mounts(n.url("pbmc.zarr"), opts=["remote_poll=1"])
    assert (m.mnt / "pbmc.zarr" / ".zmetadata").exists()

    def count(key):
        log = (n.dir / "access.log").read_text()
        return sum(f"GET /pbmc.zarr/{key} " in l for l in log.splitlines())

    v2_before, v3_before = count(".zmetadata"), count("zarr.json")
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        (m.mnt / "status.json").read_text()
        os.listdir(m.mnt)
        time.sleep(0.3)
    assert count("zarr.json") >= v3_before + 2, "no poll in 4 s at remote_poll=1"
    assert count(".zmetadata") == v2_before


def write_big_zip(path, n_obs=60000, n_vars=4000, density=0.03):
    rng = np.random.default_rng(7)
    x = sp.random(n_obs, n_vars, density=density, format="csr", dtype=np.float32,
                  random_state=rng)
    obs = pd.DataFrame({"cluster": pd.Categorical(rng.integers(0, 12, n_obs).astype(str))},
                       index=[f"cell{i}" for i in range(n_obs)])
    a = ad.AnnData(x, obs=obs, var=pd.DataFrame(index=[f"gene{i}" for i in range(n_vars)]))
    a.obsm["X_umap"] = rng.normal(size=(n_obs, 2)).astype(np.float32)
    store = zarr.ZipStore(str(path), mode="w")
    a.write_zarr(store)
    store.close()
    return a


def test_cold_first_view_of_a_zip_url_fetches_a_small_fraction(cfs, tmp_path, mounts,
                                                               nginx_stop):
    root, n = serve(tmp_path)
    nginx_stop(n.start())
    local = write_big_zip(root / "big.zarr.zip")
    size = (root / "big.zarr.zip").stat().st_size
    m = mounts(n.url("big.zarr.zip"))
    g = zarr.open_consolidated(str(m.mnt / "big.zarr"), mode="r")
    for key in ("obs/_index", "obs/cluster/codes", "obsm/X_umap"):
        assert g[key][...].shape[0] > 0
    count, fetched, statuses = requests_for(n, "big.zarr.zip")
    assert set(statuses) == {"206"}, statuses
    assert fetched < size / 4, f"{fetched} of {size} bytes fetched in {count} requests"
    order = g["obs/cellucid_original_position"][...]
    np.testing.assert_array_equal(g["obsm/X_umap"][...], local.obsm["X_umap"][order])


CHUNK = "obsm/X_umap/0.0"


def test_absent_chunk_is_its_fill_value(cfs, tmp_path, nginx_stop):
    root, n = serve(tmp_path)
    nginx_stop(n.start())
    put(FOLDER, root / "pbmc.zarr")
    (root / "pbmc.zarr" / CHUNK).unlink()
    (tmp_path / "local").mkdir()
    local = put(root / "pbmc.zarr", tmp_path / "local" / "pbmc.zarr")
    got, want = export_both(cfs, tmp_path, n.url("pbmc.zarr"), local)
    assert got == want
    # the oracle: anndata (zarr-python) reads the missing chunk as its fill value
    assert_adata_equal(ad.read_zarr(str(tmp_path / "from_url" / "pbmc.zarr")),
                       ad.read_zarr(str(local)), dataset_id="pbmc")
    _, _, statuses = requests_for(n, f"pbmc.zarr/{CHUNK}")
    assert statuses and set(statuses) == {"404"}, statuses


def test_forbidden_chunk_fails_naming_its_url_never_a_fill(cfs, tmp_path, mounts, nginx_stop):
    root, n = serve(tmp_path, f"location = /pbmc.zarr/{CHUNK} {{ return 403; }}")
    nginx_stop(n.start())
    put(FOLDER, root / "pbmc.zarr")
    url = n.url("pbmc.zarr")
    r = run_cfs(cfs, "export", url, tmp_path / "out")
    assert r.returncode != 0, describe(r)
    assert f"{url}/{CHUNK}" in r.stderr and "403" in r.stderr, describe(r)

    m = mounts(url)
    store = m.mnt / "pbmc.zarr"
    assert (store / "obs" / ".zattrs").read_bytes()
    with pytest.raises(OSError) as e:
        for chunk in sorted((store / "obsm" / "X_umap").iterdir()):
            chunk.read_bytes()
    assert e.value.errno == errno.EIO


def test_v3_mudata_folder_url_exports_as_local(cfs, tmp_path, nginx_stop):
    root, n = serve(tmp_path)
    nginx_stop(n.start())
    put(MU_V3, root / "citeseq.zarr")
    (tmp_path / "local").mkdir()
    local = put(MU_V3, tmp_path / "local" / "citeseq.zarr")
    got, want = export_both(cfs, tmp_path, n.url("citeseq.zarr"), local)
    assert got == want
    assert {"citeseq.zarr/mod/rna/.zgroup", "citeseq.zarr/mod/prot/.zgroup"} <= set(got)
    statuses = statuses_under(n, "citeseq.zarr")
    assert statuses and set(statuses) <= {"206", "404"}, statuses


def write_big_v3(folder, tmp_path):
    """A v3 folder re-written, as the v3 fixtures are, from anndata's v2 store of a larger
    dataset (X's data sharded)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "make_v3", FIXTURES_DIR / "make_zarr_v3_zip_fixtures.py")
    make_v3 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_v3)
    rng = np.random.default_rng(11)
    n_obs, n_vars = 20000, 2000
    x = sp.random(n_obs, n_vars, density=0.02, format="csr", dtype=np.float32,
                  random_state=rng)
    obs = pd.DataFrame({"cluster": pd.Categorical(rng.integers(0, 12, n_obs).astype(str))},
                       index=[f"cell{i}" for i in range(n_obs)])
    a = ad.AnnData(x, obs=obs, var=pd.DataFrame(index=[f"gene{i}" for i in range(n_vars)]))
    a.obsm["X_umap"] = rng.normal(size=(n_obs, 2)).astype(np.float32)
    a.write_zarr(str(tmp_path / "big_v2.zarr"))
    make_v3.to_v3(str(tmp_path / "big_v2.zarr"), str(folder), consolidate=True)
    return a


def test_cold_first_view_of_a_v3_folder_url_fetches_a_small_fraction(cfs, tmp_path, mounts,
                                                                     nginx_stop):
    root, n = serve(tmp_path)
    nginx_stop(n.start())
    local = write_big_v3(root / "big.zarr", tmp_path)
    size = sum(p.stat().st_size for p in (root / "big.zarr").rglob("*") if p.is_file())
    m = mounts(n.url("big.zarr"))
    g = zarr.open_consolidated(str(m.mnt / "big.zarr"), mode="r")
    for key in ("obs/_index", "obs/cluster/codes", "obsm/X_umap"):
        assert g[key][...].shape[0] > 0
    log = (n.dir / "access.log").read_text().splitlines()
    got = [l for l in log if "GET /big.zarr/" in l and l.split('"')[2].split()[0] == "206"]
    fetched = sum(int(l.split('"')[2].split()[1]) for l in got)
    assert got and fetched < size / 4, f"{fetched} of {size} bytes fetched in {len(got)} requests"
    assert not any("/X/data/" in l for l in got), "a first view fetched X's shards"
    order = g["obs/cellucid_original_position"][...]
    np.testing.assert_array_equal(g["obsm/X_umap"][...], local.obsm["X_umap"][order])


@pytest.mark.parametrize("fixture", [FIXTURES_DIR / "zarr" / "plain.zarr", V3_PLAIN])
def test_folder_url_without_consolidated_metadata_is_refused(cfs, tmp_path, nginx_stop, fixture):
    root, n = serve(tmp_path)
    nginx_stop(n.start())
    put(fixture, root / "plain.zarr")
    url = n.url("plain.zarr")
    r = run_cfs(cfs, "export", url, tmp_path / "out")
    assert r.returncode > 0, describe(r)
    lines = [l for l in r.stderr.splitlines() if url in l]
    assert len(lines) == 1, describe(r)
    assert all(w in lines[0] for w in ("consolidate", ".zarr.zip", "HTTP lists no folder")), \
        describe(r)
