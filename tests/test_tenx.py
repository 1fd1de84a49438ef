"""10x Genomics .h5 matrices (formats/hdf5/tenx.c), fixtures in tests/fixtures/tenx/ (DropletUtils'
write10xCounts v2/v3 from make_tenx_fixtures.R, the rest from make_tenx_fixtures.py).

The oracle reads each file with h5py in this test, independently of the reader: X is the CSR
(barcodes x features) made of data/indices/indptr/shape, obs index = barcodes, var index = the
symbols made unique (anndata.utils.make_index_unique), var columns as scanpy.read_10x_h5 makes
them (gene_ids, probe_ids for probe matrices, feature_types, then every other features/ dataset
in name order). A .h5 alone has a store but no embedding: it is not in datasets.json and stderr
gives Cellucid's advice. molecule_info.h5, h5Seurat and a damaged matrix are refused."""

import json
import re
import shutil

import anndata as ad
import h5py
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from anndata.utils import make_index_unique

from conftest import (
    FIXTURES_DIR,
    assert_catalog,
    check_chunks,
    check_consolidated,
    describe,
    left_out_lines,
    not_in_catalog_lines,
    refused_lines,
    run_cfs,
)

pytestmark = pytest.mark.filterwarnings("ignore")

TENX_DIR = FIXTURES_DIR / "tenx"

V3 = "Cell Ranger >= 3 (matrix)"
# file -> (format version, left-out elements)
GOOD = {
    "dropletutils_v2.h5": ("Cell Ranger 1.2-2 (genome GRCh38)", []),
    "dropletutils_v3.h5": (V3, []),
    "dropletutils_v3_antibody.h5": (V3, []),
    "cellranger7_features.h5": (V3, []),
    "flex_probes.h5": (V3, ["var/target_sets"]),
    "multi_genome_v2.h5": ("Cell Ranger 1.2-2 (genome hg19)", ["genome mm10"]),
}

MOLECULE_INFO = ("a Cell Ranger molecule_info.h5 (per-molecule data, not a count matrix); open the "
                 "filtered_feature_bc_matrix.h5 or the outs/ folder instead")
H5SEURAT = ('an h5Seurat file (SeuratDisk); convert it with SeuratDisk::Convert(f, dest = "h5ad") '
            "or save the Seurat object with saveRDS")


def _indptr_message(path):
    with h5py.File(path, "r") as f:
        end, nnz = int(f["matrix/indptr"][-1]), f["matrix/data"].shape[0]
    assert end > nnz, "the fixture's indptr must end past nnz"
    return (f"matrix/indptr runs to {end}, past the {nnz} entries of matrix/data and "
            f"matrix/indices (a damaged or truncated matrix); re-download the file or re-run "
            f"Cell Ranger")


REFUSED = {
    "molecule_info.h5": lambda p: MOLECULE_INFO,
    "molecule_info_v2.h5": lambda p: MOLECULE_INFO,
    "seurat.h5Seurat": lambda p: H5SEURAT,
    "indptr_past_nnz.h5": _indptr_message,
}

NO_EMBEDDING = "has no embedding, so open its outs/ folder"


def tenx_path(name):
    p = TENX_DIR / name
    if not p.is_file():
        pytest.fail(f"{p} is missing: regenerate with tests/fixtures/make_tenx_fixtures.R / .py",
                    pytrace=False)
    return p


def dataset_id(name):
    return name.rsplit(".", 1)[0]


# ---------------------------------------------------------------------------------------------
# the oracle: the file read with h5py


def _strs(values):
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in np.asarray(values).ravel()]


def _column(d):
    v = d[()]
    return v.astype(bool) if v.dtype.kind == "b" else _strs(v)


SPECIAL_FEATURES = ("name", "feature_type", "id", "gene_id", "_all_tag_keys")


def read_tenx_h5(path):
    """What the file holds, read with h5py the way scanpy.read_10x_h5 maps it (all features kept;
    symbols made unique; for a 1.x/2.x file the first genome in name order)."""
    with h5py.File(path, "r") as f:
        obs, var = {}, {}
        if "matrix" in f:
            grp = f["matrix"]
            feat = grp["features"]
            names = _strs(feat["name"][()])
            if "gene_id" in feat:
                var["gene_ids"] = _column(feat["gene_id"])
                var["probe_ids"] = _column(feat["id"])
            else:
                var["gene_ids"] = _column(feat["id"])
            var["feature_types"] = _column(feat["feature_type"])
            for k in sorted(feat.keys()):
                if isinstance(feat[k], h5py.Dataset) and k not in SPECIAL_FEATURES:
                    var[k] = _column(feat[k])
            if "filtered_barcodes" in grp:
                obs["filtered_barcodes"] = _column(grp["filtered_barcodes"])
            genome = None
        else:
            genome = sorted(k for k, v in f.items() if isinstance(v, h5py.Group))[0]
            grp = f[genome]
            names = _strs(grp["gene_names"][()])
            var["gene_ids"] = _column(grp["genes"])
        n_features, n_barcodes = (int(x) for x in grp["shape"][()])
        data = grp["data"][()]
        x = sp.csr_matrix((data, grp["indices"][()].astype(np.int64), grp["indptr"][()].astype(np.int64)),
                          shape=(n_barcodes, n_features))
        return {
            "X": x,
            "dtype": data.dtype,
            "obs_names": _strs(grp["barcodes"][()]),
            "var_names": list(make_index_unique(pd.Index(names))),
            "obs": obs,
            "var": var,
            "genome": genome,
        }


def _source_order(a):
    """(obs, X as csr) of a store in source row order (undoing priority order if present)."""
    obs, x = a.obs, sp.csr_matrix(a.X)
    if "cellucid_original_position" in obs.columns:
        pos = obs["cellucid_original_position"].to_numpy()
        assert pos.dtype == np.int64
        assert np.array_equal(np.sort(pos), np.arange(a.n_obs))
        order = np.argsort(pos, kind="stable")
        obs = obs.iloc[order].drop(columns=["cellucid_original_position"])
        x = x[order]
    return obs, x


def assert_store_matches(a, want):
    obs, x = _source_order(a)
    assert a.shape == want["X"].shape, (a.shape, want["X"].shape)
    assert sp.issparse(a.X), type(a.X)
    assert a.X.dtype == want["dtype"], (a.X.dtype, want["dtype"])
    diff = (x.astype(np.float64) - want["X"].astype(np.float64))
    assert diff.count_nonzero() == 0, "X values differ"
    assert np.array_equal(x.toarray(), want["X"].toarray())
    assert list(obs.index) == want["obs_names"]
    assert list(obs.columns) == list(want["obs"]), (list(obs.columns), list(want["obs"]))
    for k, v in want["obs"].items():
        assert obs[k].to_numpy().tolist() == list(v), k
    assert list(a.var.index) == want["var_names"]
    assert a.var.index.is_unique
    assert list(a.var.columns) == list(want["var"]), (list(a.var.columns), list(want["var"]))
    for k, v in want["var"].items():
        col = a.var[k].to_numpy()
        if isinstance(v, np.ndarray):
            assert col.dtype == bool, (k, col.dtype)
        assert col.tolist() == list(v), k
    assert set(a.obsm.keys()) == set() and set(a.layers.keys()) == set()


# ---------------------------------------------------------------------------------------------
# the oracle's own sanity (no binary)


def test_oracle_duplicates_exist_and_are_made_unique():
    """The fixtures exercise make-unique: duplicate symbols, and a name that collides with a
    suffix (DropletUtils' 'Dup-1'; cellranger7's 'GENE4-1')."""
    for name in ("dropletutils_v3.h5", "dropletutils_v2.h5", "cellranger7_features.h5", "flex_probes.h5"):
        with h5py.File(tenx_path(name), "r") as f:
            raw = _strs(f["matrix/features/name"][()] if "matrix" in f else f["GRCh38/gene_names"][()])
        assert len(set(raw)) < len(raw), name
        got = read_tenx_h5(tenx_path(name))["var_names"]
        assert len(set(got)) == len(got), name
    v3 = read_tenx_h5(tenx_path("dropletutils_v3.h5"))["var_names"]
    assert "Dup-1" in v3 and "Dup-2" in v3 and "Dup-3" in v3 and "Twin-1" in v3


def test_oracle_antibody_fixture_has_both_feature_types():
    want = read_tenx_h5(tenx_path("dropletutils_v3_antibody.h5"))
    assert set(want["var"]["feature_types"]) == {"Gene Expression", "Antibody Capture"}


# ---------------------------------------------------------------------------------------------
# good files


@pytest.fixture(scope="module")
def exported_tenx(cfs, tmp_path_factory):
    cache = {}

    def get(name, *opts):
        key = (name, opts)
        if key not in cache:
            out = tmp_path_factory.mktemp("tenx-" + dataset_id(name)) / "out"
            src = tenx_path(name)
            cache[key] = (src, out, run_cfs(cfs, "export", *opts, src, out))
        return cache[key]

    return get


@pytest.mark.parametrize("name", sorted(GOOD))
def test_store_equals_h5py_reading(name, exported_tenx):
    src, out, r = exported_tenx(name)
    assert r.returncode == 0, describe(r)
    store = out / f"{dataset_id(name)}.zarr"
    assert_store_matches(ad.read_zarr(str(store)), read_tenx_h5(src))
    check_consolidated(store)
    check_chunks(store)


@pytest.mark.parametrize("name", sorted(GOOD))
def test_order_original_equals_h5py_reading(name, exported_tenx):
    src, out, r = exported_tenx(name, "-o", "order=original")
    assert r.returncode == 0, describe(r)
    a = ad.read_zarr(str(out / f"{dataset_id(name)}.zarr"))
    assert "cellucid_original_position" not in a.obs.columns
    assert_store_matches(a, read_tenx_h5(src))


@pytest.mark.parametrize("name", sorted(GOOD))
def test_not_in_catalog_with_outs_advice(name, exported_tenx):
    src, out, r = exported_tenx(name)
    assert r.returncode == 0, describe(r)
    assert_catalog(out, [], stores=[dataset_id(name)])
    assert not_in_catalog_lines(r.stderr) == [
        f"cellucid-fs: {src}: not in datasets.json: {NO_EMBEDDING}"], describe(r)
    assert refused_lines(r.stderr) == [], describe(r)


@pytest.mark.parametrize("name", sorted(GOOD))
def test_left_out_parts_are_listed(name, exported_tenx):
    src, out, r = exported_tenx(name)
    lines = left_out_lines(r.stderr)
    want = GOOD[name][1]
    assert [l.split(": left out ", 1)[1].split(": ", 1)[0] for l in lines] == want, describe(r)
    for l in lines:
        assert l.startswith(f"cellucid-fs: {src}: left out "), l


def test_multi_genome_serves_first_and_names_the_others(exported_tenx):
    src, out, r = exported_tenx("multi_genome_v2.h5")
    (line,) = left_out_lines(r.stderr)
    assert line == (
        f"cellucid-fs: {src}: left out genome mm10: a Cell Ranger 1.x/2.x file holds one matrix "
        "per genome and only the first, 'hg19', is served; to serve 'mm10', write it alone "
        "(e.g. scanpy.read_10x_h5(f, genome='mm10').write_h5ad(...))"), line
    a = ad.read_zarr(str(out / "multi_genome_v2.zarr"))
    with h5py.File(src, "r") as f:
        assert a.n_vars == f["hg19/genes"].shape[0] and a.n_obs == f["hg19/barcodes"].shape[0]
    assert all(n.startswith("hg19_") for n in a.var.index)


def test_probe_matrix_target_sets_reason(exported_tenx):
    src, out, r = exported_tenx("flex_probes.h5")
    (line,) = left_out_lines(r.stderr)
    assert line == (f"cellucid-fs: {src}: left out var/target_sets: matrix/features/target_sets is "
                    "a group, not a column of one value per feature; the column was not read"), line


# ---------------------------------------------------------------------------------------------
# refusals


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_with_message(name, cfs, tmp_path):
    src = tenx_path(name)
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 2, describe(r)
    assert refused_lines(r.stderr) == [f"cellucid-fs: {src}: refused: {REFUSED[name](src)}"], describe(r)
    assert not (out / f"{dataset_id(name)}.zarr").exists()
    assert r.stderr.count("\n") == 1, describe(r)


def test_folder_of_tenx_files(cfs, tmp_path):
    """A folder holding every fixture: the good ones get stores (none is in the catalog), the
    others are refused, each once."""
    src = tmp_path / "src"
    src.mkdir()
    for name in list(GOOD) + list(REFUSED):
        shutil.copy(tenx_path(name), src / name)
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 2, describe(r)
    assert_catalog(out, [], stores=[dataset_id(n) for n in GOOD])
    assert len(refused_lines(r.stderr)) == len(REFUSED), describe(r)
    assert len(not_in_catalog_lines(r.stderr)) == len(GOOD), describe(r)
    for line in not_in_catalog_lines(r.stderr):
        assert line.endswith(f": not in datasets.json: {NO_EMBEDDING}"), line


def test_content_not_name_decides(cfs, tmp_path):
    """A 10x matrix named .h5ad is read as what it is; an h5ad's fallback does not take it."""
    p = tmp_path / "looks_like_anndata.h5ad"
    shutil.copy(tenx_path("dropletutils_v3.h5"), p)
    r = run_cfs(cfs, "inspect", "--json", p)
    assert r.returncode == 0, describe(r)
    (doc,) = json.loads(r.stdout)["files"]
    assert doc["format"] == "10x-h5" and doc["version"] == V3, doc


# ---------------------------------------------------------------------------------------------
# inspect


def test_inspect_json(cfs):
    paths = [tenx_path(n) for n in sorted(GOOD)] + [tenx_path(n) for n in sorted(REFUSED)]
    r = run_cfs(cfs, "inspect", "--json", *paths)
    assert r.returncode == 2, describe(r)
    docs = {d["path"]: d for d in json.loads(r.stdout)["files"]}
    for name in sorted(GOOD):
        p = tenx_path(name)
        d = docs[str(p)]
        want = read_tenx_h5(p)
        assert d["format"] == "10x-h5", d
        assert d["version"] == GOOD[name][0], d
        assert d["refused"] is None, d
        assert (d["n_obs"], d["n_vars"]) == want["X"].shape, d
        assert d["X"] == {"encoding": "csr_matrix", "dtype": str(want["dtype"])}, d
        assert [c["name"] for c in d["var"]] == list(want["var"]), d
        assert [c["name"] for c in d["obs"]] == list(want["obs"]), d
        assert [lo["element"] for lo in d["left_out"]] == GOOD[name][1], d
    for name in sorted(REFUSED):
        p = tenx_path(name)
        d = docs[str(p)]
        assert d["format"] == "10x-h5", d
        assert d["refused"] == REFUSED[name](p), d
