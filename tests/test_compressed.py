"""Compressed copies of inputs (x.h5ad.gz, .bz2, .xz; formats/unpack.c, src/catalog/unpacked.c,
src/volume/copies.c), fixtures in tests/fixtures/compressed/ (gzip -n, bzip2 and xz of other
fixtures, tests/fixtures/make_compressed_fixtures.sh):

- export and inspect decompress into their work folder; the store is the one the uncompressed
  file gives, byte for byte (same id), and anndata reads it equal to the original;
- a folder with both x.h5ad and x.h5ad.gz serves x.h5ad only;
- a stream cut short is refused with one line, and no half copy is left anywhere;
- the mount serves them once decompressed in the background into the cache's unpacked/ folder,
  shows them working in status.json meanwhile, reuses the copy on a remount of the same
  version, counts it against cache_size (a cache too small refuses the source, naming the
  size), and deletes it when the source goes.
"""
import json
import os
import shutil
import time
import warnings
from pathlib import Path

import anndata as ad
import numpy as np
import pytest

from conftest import (
    FIXTURES_DIR,
    assert_adata_equal,
    describe,
    refused_lines,
    run_cfs,
    tree_bytes,
)

warnings.simplefilter("ignore")
pytestmark = pytest.mark.filterwarnings("ignore")

COMPRESSED = FIXTURES_DIR / "compressed"
# compressed fixture -> the fixture it is a copy of
COPIES = {
    "csr_f32.h5ad.gz": "h5ad/csr_f32.h5ad",
    "dense_f32.h5ad.bz2": "h5ad/dense_f32.h5ad",
    "categoricals.h5ad.xz": "h5ad/categoricals.h5ad",
    "userblock.h5ad.gz": "h5ad/userblock.h5ad",
    "loompy3.loom.gz": "loom/loompy3.loom",
    "dropletutils_v3.h5.gz": "tenx/dropletutils_v3.h5",
}
TIMEOUT = 20.0


def stem(name):
    return name.split(".")[0]


def wait_for(pred, what, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}", pytrace=False)


@pytest.mark.parametrize("name", sorted(COPIES))
def test_export_equals_the_uncompressed_file(cfs, tmp_path, name):
    one, two = tmp_path / "compressed", tmp_path / "plain"
    r = run_cfs(cfs, "export", COMPRESSED / name, one)
    assert r.returncode == 0 and not refused_lines(r.stderr), describe(r)
    r = run_cfs(cfs, "export", FIXTURES_DIR / COPIES[name], two)
    assert r.returncode == 0, describe(r)
    a, b = tree_bytes(one / f"{stem(name)}.zarr"), tree_bytes(two / f"{stem(name)}.zarr")
    assert sorted(a) == sorted(b)
    assert [k for k in a if a[k] != b[k]] == [], "the stores differ"
    assert not list(tmp_path.glob("*.work*")) and not list(tmp_path.glob(".*work*"))


def test_two_members_and_the_oracle(cfs, tmp_path):
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", COMPRESSED / "two_members.h5ad.gz", out)
    assert r.returncode == 0, describe(r)
    store = ad.read_zarr(str(out / "two_members.zarr"))
    assert_adata_equal(store, ad.read_h5ad(FIXTURES_DIR / "h5ad/csr_f32.h5ad"),
                       dataset_id="two_members", dataset_name="two_members")


def test_inspect_reads_a_compressed_copy(cfs, tmp_path):
    env_tmp = tmp_path / "tmp"
    env_tmp.mkdir()
    os.environ["TMPDIR"] = str(env_tmp)
    try:
        r = run_cfs(cfs, "inspect", "--json", COMPRESSED / "categoricals.h5ad.xz")
    finally:
        del os.environ["TMPDIR"]
    assert r.returncode == 0, describe(r)
    doc = json.loads(r.stdout)
    doc = doc["files"][0]
    assert doc["format"] == "h5ad" and doc["n_obs"] > 0, doc
    assert list(env_tmp.iterdir()) == [], "inspect left its decompressed copy behind"


def test_uncompressed_twin_is_served_instead(cfs, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(FIXTURES_DIR / "h5ad/csr_f32.h5ad", src / "csr_f32.h5ad")
    shutil.copy(COMPRESSED / "csr_f32.h5ad.gz", src / "csr_f32.h5ad.gz")
    shutil.copy(COMPRESSED / "dense_f32.h5ad.bz2", src / "dense_f32.h5ad.bz2")
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 0, describe(r)
    assert sorted(p.name for p in out.iterdir()) == ["csr_f32.zarr", "datasets.json",
                                                     "dense_f32.zarr"], describe(r)
    assert "id clash" not in r.stderr, r.stderr


def test_truncated_stream_is_refused_with_one_line(cfs, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(COMPRESSED / "truncated.h5ad.gz", src / "truncated.h5ad.gz")
    shutil.copy(COMPRESSED / "csr_f32.h5ad.gz", src / "csr_f32.h5ad.gz")
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 2, describe(r)
    lines = refused_lines(r.stderr)
    assert len(lines) == 1 and "truncated.h5ad.gz" in lines[0], r.stderr
    assert "gzip stream ends early" in lines[0] and "re-download" in lines[0], lines[0]
    assert (out / "csr_f32.zarr").is_dir() and not (out / "truncated.zarr").exists()
    leftovers = [p for p in tmp_path.rglob("*") if "unpacked" in p.name or ".tmp-" in p.name]
    assert leftovers == [], leftovers


def status_of(m):
    return {Path(s["source"]).name: s for s in json.loads((m.mnt / "status.json").read_text())["sources"]}


def test_mount_serves_decompressed_copies_and_keeps_them(cfs, mounts, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("csr_f32.h5ad.gz", "loompy3.loom.gz", "truncated.h5ad.gz"):
        shutil.copy(COMPRESSED / name, src / name)
    cache = tmp_path / "cache"
    m = mounts(src, cache=cache)
    wait_for(lambda: all(s["state"] != "working" for s in status_of(m).values()),
             "the copies to be made")
    st = status_of(m)
    assert st["csr_f32.h5ad.gz"]["state"] == "ready" and st["loompy3.loom.gz"]["state"] == "ready"
    assert st["truncated.h5ad.gz"]["state"] == "refused", st["truncated.h5ad.gz"]
    assert "ends early" in st["truncated.h5ad.gz"]["reason"]
    store = ad.read_zarr(str(m.mnt / "csr_f32.zarr"))
    assert_adata_equal(store, ad.read_h5ad(FIXTURES_DIR / "h5ad/csr_f32.h5ad"),
                       dataset_id="csr_f32", dataset_name="csr_f32")
    copies = sorted((cache / "unpacked").iterdir())
    assert len(copies) == 2 and all(p.suffix == ".copy" for p in copies), copies
    sizes = sum(p.stat().st_size for p in copies)
    work = json.loads((m.mnt / "status.json").read_text())["cache"]["work_bytes"]
    assert work >= sizes, f"the copies ({sizes} bytes) are not counted ({work})"
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in copies}
    m.stop()

    # Remounted at the same versions: the copies are opened again, not made again.
    m2 = mounts(src, cache=cache)
    wait_for(lambda: status_of(m2)["loompy3.loom.gz"]["state"] == "ready", "the remount")
    after = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (cache / "unpacked").iterdir()}
    assert after == before
    (src / "loompy3.loom.gz").unlink()
    wait_for(lambda: "loompy3.loom.gz" not in status_of(m2), "the source to go")
    wait_for(lambda: len(list((cache / "unpacked").iterdir())) == 1, "its copy to go")


def test_mount_refuses_a_copy_the_cache_cannot_hold(cfs, mounts, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    n = 3000
    a = ad.AnnData(np.zeros((n, 200), dtype=np.float32))      # 2.4 MB, compresses to little
    a.obsm["X_umap"] = np.zeros((n, 2), dtype=np.float32)
    a.write_h5ad(tmp_path / "big.h5ad")
    with open(tmp_path / "big.h5ad", "rb") as fin:
        import gzip
        with gzip.GzipFile(src / "big.h5ad.gz", "wb", mtime=0) as fout:
            shutil.copyfileobj(fin, fout)
    cache = tmp_path / "cache"
    m = mounts(src, cache=cache, opts=["cache_size=1M"])
    wait_for(lambda: status_of(m)["big.h5ad.gz"]["state"] != "working", "the copy to fail")
    s = status_of(m)["big.h5ad.gz"]
    assert s["state"] == "refused" and "does not fit in the cache" in s["reason"], s
    assert "cache_size" in s["reason"], s
    assert list((cache / "unpacked").iterdir()) == [], "a half copy was left"
