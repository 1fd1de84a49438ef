"""AnnData Zarr stores inside a zip (formats/zarr/zarr_backend.c): zarr-python 2.13's ZipStore
(with a duplicate entry name: the last one wins), Info-ZIP archives of the store folder (stored,
deflated, ZIP64, and entries under one top folder), written by
tests/fixtures/make_zarr_v3_zip_fixtures.py.

- the export of each zip, read by anndata.read_zarr with the priority order undone, equals
  anndata 0.8's read_zarr(zarr.ZipStore(zip)) of the source (for the top-folder zip, which
  ZipStore cannot open at its root, read_zarr of the folder it was made from), value for value;
- a zip and the folder it was made from give the same store, file for file;
- the mount serves a zip found in a folder;
- a zip with a damaged central directory is refused in one line naming the file; a damaged
  entry fails naming its key; the zip is never written.
"""
import shutil
import warnings

import anndata as ad
import pytest
import zarr

from conftest import (
    FIXTURES_DIR,
    assert_adata_equal,
    describe,
    left_out_lines,
    load_manifest,
    run_cfs,
    snapshot,
    tree_bytes,
)

warnings.simplefilter("ignore")
pytestmark = pytest.mark.filterwarnings("ignore")

DIR = FIXTURES_DIR / "zarr_v3_zip"
MANIFEST = load_manifest("zarr_v3_zip", "make_zarr_v3_zip_fixtures.py")
ZIPS = sorted(k for k in MANIFEST["zips"] if k != "v3_zip")
TWIN = DIR / MANIFEST["twin"]


def zpath(name):
    return DIR / MANIFEST["zips"][name]


def read_zip(path):
    store = zarr.ZipStore(str(path), mode="r")
    try:
        return ad.read_zarr(store)
    finally:
        store.close()


def export(cfs, path, out):
    r = run_cfs(cfs, "export", path, out)
    assert r.returncode == 0, describe(r)
    return r


def as_data(tmp_path, source, sub):
    """source copied as <sub>/data.zarr or data.zarr.zip: the dataset id 'data'."""
    folder = tmp_path / sub
    folder.mkdir()
    name = "data.zarr" if source.is_dir() else "data.zarr.zip"
    dst = folder / name
    (shutil.copytree if source.is_dir() else shutil.copy)(source, dst)
    return dst


@pytest.mark.parametrize("name", ZIPS)
def test_zip_export_equals_source(cfs, tmp_path, name):
    before = snapshot([zpath(name)])
    out = tmp_path / "out"
    r = export(cfs, zpath(name), out)
    assert not left_out_lines(r.stderr), r.stderr
    # the id: the name without .zarr.zip; a plain .zip is no format's extension and keeps it
    stem = zpath(name).name.removesuffix(".zarr.zip")
    store = ad.read_zarr(str(out / f"{stem}.zarr"))
    source = ad.read_zarr(str(TWIN)) if name == "topfolder" else read_zip(zpath(name))
    assert_adata_equal(store, source, dataset_id=stem)
    assert snapshot([zpath(name)]) == before, "the source zip was modified"


@pytest.mark.parametrize("name", ZIPS)
def test_zip_and_its_folder_give_the_same_store(cfs, tmp_path, name):
    a, b = tmp_path / "from_zip", tmp_path / "from_folder"
    export(cfs, as_data(tmp_path, zpath(name), "z"), a)
    export(cfs, as_data(tmp_path, TWIN, "f"), b)
    ta, tb = tree_bytes(a / "data.zarr"), tree_bytes(b / "data.zarr")
    assert sorted(ta) == sorted(tb), sorted(set(ta) ^ set(tb))
    differ = [k for k in ta if ta[k] != tb[k]]
    assert not differ, differ


def test_zip_inspect_names_zarr_in_a_zip(cfs):
    import json

    r = run_cfs(cfs, "inspect", "--json", zpath("zipstore"))
    assert r.returncode == 0, describe(r)
    ds = json.loads(r.stdout)["files"][0]
    assert ds["format"] == "zarr" and "in a zip" in ds["version"], ds


def test_zip_mount_serves_the_store(cfs, tmp_path, mounts):
    """A .zarr.zip, and a plain .zip found by its content, beside a zip that is not Zarr
    (ignored: not an input)."""
    import zipfile

    folder = tmp_path / "src"
    folder.mkdir()
    shutil.copy(zpath("infozip_deflated"), folder / "cells.zarr.zip")
    shutil.copy(zpath("topfolder"), folder / "more.zip")
    with zipfile.ZipFile(folder / "notes.zip", "w") as z:
        z.writestr("notes.txt", "not a store")
    m = mounts(folder)
    ids = sorted(d["id"] for d in m.catalog()["datasets"])
    assert ids == ["cells", "more.zip"], ids
    assert sorted(s["id"] for s in m.status()["sources"]) == ["cells", "more.zip"]
    store = ad.read_zarr(str(m.mnt / "cells.zarr"))
    assert_adata_equal(store, read_zip(zpath("infozip_deflated")), dataset_id="cells")


def test_zip_damaged_central_directory_refused_in_one_line(cfs, tmp_path):
    data = bytearray(zpath("infozip_stored").read_bytes())
    eocd = data.rfind(b"PK\x05\x06")
    cd_off = int.from_bytes(data[eocd + 16:eocd + 20], "little")
    last = data.rfind(b"PK\x01\x02", cd_off, eocd)
    data[last:last + 4] = b"XXXX"  # the last central directory entry's signature
    bad = tmp_path / "bad.zarr.zip"
    bad.write_bytes(bytes(data))
    r = run_cfs(cfs, "export", bad, tmp_path / "out")
    assert r.returncode != 0, describe(r)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "bad.zarr.zip" in lines[0], r.stderr
    assert "central directory" in lines[0] and "re-create the zip" in lines[0], r.stderr


def test_zip_damaged_entry_fails_naming_it(cfs, tmp_path):
    import zipfile

    src = zpath("infozip_stored")
    with zipfile.ZipFile(src) as z:
        info = z.getinfo("./obsm/X_umap/0.0") if "./obsm/X_umap/0.0" in z.namelist() \
            else z.getinfo("obsm/X_umap/0.0")
    data = bytearray(src.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start + info.compress_size // 2] ^= 0xFF  # a flipped byte: the CRC no longer matches
    bad = tmp_path / "crc.zarr.zip"
    bad.write_bytes(bytes(data))
    r = run_cfs(cfs, "export", bad, tmp_path / "out")
    assert r.returncode != 0, describe(r)
    assert "obsm/X_umap/0.0" in r.stderr and "damaged" in r.stderr, r.stderr
