"""AnnData Zarr v3 stores (formats/zarr/zarr_meta.c, zarr_array.c), written by
tests/fixtures/make_zarr_v3_zip_fixtures.py: HAND-MADE by the Zarr v3 specification from an
anndata 0.8 store (twin.zarr), values and attributes unchanged, since no Zarr v3 writer is
packaged here (no zarr-python 3, no anndata 0.11 in Debian).

The oracle: no Python Zarr v3 reader is installed either, so the test reads the v3 fixture's
values through its v2 twin: the v2 twin is read by anndata 0.8's read_zarr (independent of
cellucid-fs), and the v3 store must give the same exported store as its twin, file for file;
the export is also compared value for value with read_zarr of the twin. Then the refusals:
malformed zarr.json (the root: one line; an array's: only that array left out), an unknown
codec (that array left out by the codec's name), a truncated shard and a failed crc32c (the
chunk named).
"""
import json
import shutil
import warnings

import anndata as ad
import pytest

from conftest import (
    FIXTURES_DIR,
    assert_adata_equal,
    describe,
    left_out_lines,
    load_manifest,
    run_cfs,
    tree_bytes,
)

warnings.simplefilter("ignore")
pytestmark = pytest.mark.filterwarnings("ignore")

DIR = FIXTURES_DIR / "zarr_v3_zip"
MANIFEST = load_manifest("zarr_v3_zip", "make_zarr_v3_zip_fixtures.py")
TWIN = DIR / MANIFEST["twin"]
V3 = {**MANIFEST["v3"], "v3_zip": MANIFEST["zips"]["v3_zip"]}


def export(cfs, path, out, ok=True):
    r = run_cfs(cfs, "export", path, out)
    if ok:
        assert r.returncode == 0, describe(r)
    return r


def copy_as(tmp_path, source, sub, name):
    folder = tmp_path / sub
    folder.mkdir()
    dst = folder / name
    (shutil.copytree if source.is_dir() else shutil.copy)(source, dst)
    return dst


def plain_copy(tmp_path):
    return copy_as(tmp_path, DIR / V3["v3_plain"], "src", "data.zarr")


@pytest.mark.parametrize("name", sorted(V3))
def test_v3_gives_the_store_of_its_v2_twin(cfs, tmp_path, name):
    src = DIR / V3[name]
    a, b = tmp_path / "from_v3", tmp_path / "from_v2"
    r = export(cfs, copy_as(tmp_path, src, "v3", "data.zarr.zip" if src.is_file() else
                            "data.zarr"), a)
    assert not left_out_lines(r.stderr), r.stderr
    export(cfs, copy_as(tmp_path, TWIN, "v2", "data.zarr"), b)
    ta, tb = tree_bytes(a / "data.zarr"), tree_bytes(b / "data.zarr")
    assert sorted(ta) == sorted(tb), sorted(set(ta) ^ set(tb))
    differ = [k for k in ta if ta[k] != tb[k]]
    assert not differ, differ
    store = ad.read_zarr(str(a / "data.zarr"))
    assert_adata_equal(store, ad.read_zarr(str(TWIN)), dataset_id="data")


def test_v3_inspect_names_zarr_v3(cfs):
    r = run_cfs(cfs, "inspect", "--json", DIR / V3["v3"])
    assert r.returncode == 0, describe(r)
    ds = json.loads(r.stdout)["files"][0]
    assert ds["format"] == "zarr" and "Zarr v3, consolidated" in ds["version"], ds


def test_v3_mount_serves_the_store(cfs, tmp_path, mounts):
    folder = tmp_path / "m"
    folder.mkdir()
    shutil.copytree(DIR / V3["v3"], folder / "cells.zarr")
    m = mounts(folder)
    store = ad.read_zarr(str(m.mnt / "cells.zarr"))
    assert_adata_equal(store, ad.read_zarr(str(TWIN)), dataset_id="cells")


def test_v3_malformed_root_zarr_json_refused_in_one_line(cfs, tmp_path):
    src = plain_copy(tmp_path)
    (src / "zarr.json").write_text('{"zarr_format": 3, "node_type": ')
    r = export(cfs, src, tmp_path / "out", ok=False)
    assert r.returncode != 0, describe(r)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "data.zarr" in lines[0] and "zarr.json is not JSON" in lines[0], \
        r.stderr


def test_v3_bad_array_left_out_alone(cfs, tmp_path):
    src = plain_copy(tmp_path)
    (src / "obsm" / "X_umap" / "zarr.json").write_text("{not json")
    meta = json.loads((src / "layers" / "counts" / "zarr.json").read_text())
    meta["codecs"][0]["configuration"]["codecs"][1]["name"] = "lz77"
    (src / "layers" / "counts" / "zarr.json").write_text(json.dumps(meta))
    r = export(cfs, src, tmp_path / "out")
    lines = left_out_lines(r.stderr)
    assert any("obsm/X_umap" in ln and "zarr.json" in ln for ln in lines), r.stderr
    assert any("layers/counts" in ln and "'lz77'" in ln for ln in lines), r.stderr
    assert len(lines) == 2, lines
    store = ad.read_zarr(str(tmp_path / "out" / "data.zarr"))
    source = ad.read_zarr(str(TWIN))
    del source.obsm["X_umap"]
    del source.layers["counts"]
    assert "X_umap" not in store.obsm and "counts" not in store.layers
    assert_adata_equal(store, source, dataset_id="data")


def test_v3_truncated_shard_and_bad_checksum_name_the_chunk(cfs, tmp_path):
    src = plain_copy(tmp_path)
    shard = src / "X" / "data" / "c" / "0"
    shard.write_bytes(shard.read_bytes()[:20])
    r = export(cfs, src, tmp_path / "out1", ok=False)
    assert r.returncode != 0, describe(r)
    assert "X/data" in r.stderr and "shard c/0" in r.stderr and "truncated" in r.stderr, r.stderr

    src2 = copy_as(tmp_path, DIR / V3["v3_plain"], "src2", "data.zarr")
    chunk = src2 / "X" / "indptr" / "0"
    data = bytearray(chunk.read_bytes())
    data[-1] ^= 0xFF
    chunk.write_bytes(bytes(data))
    r = export(cfs, src2, tmp_path / "out2", ok=False)
    assert r.returncode != 0, describe(r)
    assert "X/indptr" in r.stderr and "crc32c" in r.stderr, r.stderr
