"""A folder as a user downloads it from GEO and collaborators, one input of every kind the
readers know (older h5ad, HDF5 filters, a gzipped copy, a MatrixMarket folder, GEO samples by
prefix, a loom without CellID, a file whose uns['cellucid'] is partly wrong) beside inputs that
must be refused (a later uns['cellucid'] schema, a truncated download), mounted and exported:

- status.json lists every source: served ("ready") with its format, or refused with its reason;
- datasets.json lists exactly the served datasets that have a drawable embedding;
- every served store reads back with anndata and has the source's cell and gene counts, and the
  mount serves the same bytes as the export.
"""
import json
import shutil
import time
import warnings
from pathlib import Path

import anndata as ad
import pytest

from conftest import FIXTURES_DIR, describe, in_catalog, run_cfs, tree_bytes

warnings.simplefilter("ignore")
pytestmark = pytest.mark.filterwarnings("ignore")

# name in the folder -> (fixture, format when served, served?; None: a sidecar, not a source)
INPUTS = {
    "v07.h5ad": ("legacy_h5ad/v07.h5ad", "h5ad", True),
    "seurat.h5ad": ("legacy_h5ad/seurat.h5ad", "h5ad", True),
    "blosc_zstd_bitshuffle.h5ad": ("filters/blosc_zstd_bitshuffle.h5ad", "h5ad", True),
    "csr_f32.h5ad.gz": ("compressed/csr_f32.h5ad.gz", "h5ad", True),
    "pbmc_cr3": ("mtx/cellranger3/filtered_feature_bc_matrix", "mtx", True),
    "GSM100001_ctrl_matrix.mtx.gz": ("mtx/geo/GSM100001_ctrl_matrix.mtx.gz", "mtx", True),
    "GSM100001_ctrl_barcodes.tsv.gz": ("mtx/geo/GSM100001_ctrl_barcodes.tsv.gz", None, None),
    "GSM100001_ctrl_features.tsv.gz": ("mtx/geo/GSM100001_ctrl_features.tsv.gz", None, None),
    "loompy_barcodes.loom": ("loom/loompy_barcodes.loom", "loom", True),
    "wrong_meta.h5ad": ("cellucid_meta/wrong.h5ad", "h5ad", True),
    "later_schema.h5ad": ("cellucid_meta/later_schema.h5ad", None, False),
    "truncated.h5ad.gz": ("compressed/truncated.h5ad.gz", None, False),
}
SOURCES = {k: v for k, v in INPUTS.items() if v[2] is not None}


def make_folder(root):
    src = root / "downloads"
    src.mkdir()
    for name, (fixture, _, _) in INPUTS.items():
        p = FIXTURES_DIR / fixture
        if p.is_dir():
            shutil.copytree(p, src / name)
        else:
            shutil.copy(p, src / name)
    return src


def check_status(status, stores):
    by_name = {Path(s["source"]).name: s for s in status["sources"]}
    assert sorted(by_name) == sorted(SOURCES), sorted(by_name)
    for name, (_, fmt, served) in SOURCES.items():
        s = by_name[name]
        if served:
            assert s["state"] == "ready" and s["format"] == fmt, s
            assert s["reason"] is None and s["id"], s
        else:
            assert s["state"] == "refused" and s["reason"], s
    assert "schema" in by_name["later_schema.h5ad"]["reason"]
    assert "ends early" in by_name["truncated.h5ad.gz"]["reason"]
    left = {x["element"] for x in by_name["wrong_meta.h5ad"]["left_out"]}
    assert "uns/cellucid/colour" in left and "uns/cellucid/defaults/knn" in left, left
    served_ids = {by_name[n]["id"] for n, v in SOURCES.items() if v[2]}
    assert served_ids == set(stores), (served_ids, sorted(stores))
    return by_name


def check_catalog(catalog, stores, by_name):
    drawable = {sid for sid, a in stores.items() if in_catalog(a)}
    listed = {d["id"] for d in catalog["datasets"]}
    assert listed == drawable, (listed, drawable)
    for s in by_name.values():
        if s["state"] == "ready":
            assert s["in_catalog"] is (s["id"] in drawable), s


def read_stores(root):
    return {p.name[:-5]: ad.read_zarr(str(p)) for p in sorted(root.glob("*.zarr"))}


def test_export_of_a_mixed_folder(cfs, tmp_path):
    src = make_folder(tmp_path)
    out = tmp_path / "site"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 2, describe(r)          # two sources are refused
    stores = read_stores(out)
    assert len(stores) == sum(1 for v in SOURCES.values() if v[2]), sorted(stores)
    for a in stores.values():
        assert a.n_obs > 0 and a.n_vars > 0 and "cellucid_original_position" in a.obs


def test_mount_of_a_mixed_folder(cfs, mounts, tmp_path):
    src = make_folder(tmp_path)
    out = tmp_path / "site"
    run_cfs(cfs, "export", src, out)
    m = mounts(src)
    deadline = time.monotonic() + 30
    while True:
        status = json.loads((m.mnt / "status.json").read_text())
        if all(s["state"] != "working" for s in status["sources"]):
            break
        assert time.monotonic() < deadline, status
        time.sleep(0.1)
    stores = read_stores(m.mnt)
    by_name = check_status(status, stores)
    check_catalog(json.loads((m.mnt / "datasets.json").read_text()), stores, by_name)
    # The mount serves what export wrote, byte for byte.
    for sid in stores:
        a, b = tree_bytes(m.mnt / f"{sid}.zarr"), tree_bytes(out / f"{sid}.zarr")
        assert sorted(a) == sorted(b) and [k for k in a if a[k] != b[k]] == [], sid
