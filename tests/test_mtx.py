"""MatrixMarket inputs (formats/mtx_folder.c, formats/mex.c, formats/mtx.c), fixtures in
tests/fixtures/mtx/ from make_mtx_fixtures.py (scipy.io.mmwrite) and make_mtx_fixtures.R
(Matrix::writeMM), plus Cell Ranger's MEX folders of tests/fixtures/outs/ opened directly.

The oracle reads each input in this test, independently of the reader: the matrix with
scipy.io.mmread (transposed when rows are genes), the lists with pandas (read_csv; TSVs without
a header), var_names made unique with anndata's make_index_unique, gene ids as var['gene_ids'],
feature types as var['feature_types']; sci-RNA-seq3's tables as pandas reads them, with
anndata's strings_to_categoricals applied (anndata does it when it writes), and their
<x>umap_k / <x>tsne_k columns as obsm. The store, read with anndata.read_zarr (exported and
mounted) and put back in source order, must equal it value for value."""

import gzip
import json
import shutil
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.io
import scipy.sparse as sp
from anndata.utils import make_index_unique

from conftest import (
    FIXTURES_DIR,
    assert_catalog,
    describe,
    load_manifest,
    not_in_catalog_lines,
    refused_lines,
    run_cfs,
)
from test_outs import source_order

pytestmark = pytest.mark.filterwarnings("ignore")

MTX_DIR = FIXTURES_DIR / "mtx"
MANIFEST = load_manifest("mtx", "make_mtx_fixtures.py")
GOOD, GEO, BAD = MANIFEST["good"], MANIFEST["geo"], MANIFEST["bad"]
OUTS = FIXTURES_DIR / "outs"

# Cell Ranger's own MEX folders, opened directly (today's outs fixtures)
CR_FOLDERS = {
    "outs_v3": {"path": OUTS / "pbmc_v3/outs/filtered_feature_bc_matrix",
                "id": "filtered_feature_bc_matrix", "matrix": "matrix.mtx.gz",
                "cells": "barcodes.tsv.gz", "genes": "features.tsv.gz", "rows": "genes",
                "gene_cols": ["gene_ids", "feature_types"]},
    "outs_v2": {"path": OUTS / "pbmc_v2/outs/filtered_gene_bc_matrices/GRCh38", "id": "GRCh38",
                "matrix": "matrix.mtx", "cells": "barcodes.tsv", "genes": "genes.tsv",
                "rows": "genes", "gene_cols": ["gene_ids"]},
}
ALL = {**{k: {**v, "path": MTX_DIR / v["path"]} for k, v in GOOD.items()}, **CR_FOLDERS}
NAMES = sorted(ALL)


def folder_of(e):
    p = Path(e["path"])
    return p.parent if p.is_file() else p


def _open(path):
    return gzip.open(path, "rt", newline="") if str(path).endswith(".gz") else open(path, newline="")


def read_lines(path):
    with _open(path) as fh:
        return [l.rstrip("\n") for l in fh if l.strip()]


def oracle(e):
    """The AnnData the input means, read with scipy and pandas."""
    d = folder_of(e)
    with _open(d / e["matrix"]) as fh:
        m = scipy.io.mmread(fh)
    x = sp.csr_matrix(m.T if e["rows"] == "genes" else m)
    if e.get("tables"):
        obs = pd.read_csv(d / e["cells"], index_col=0)
        obs.index = obs.index.astype(str)
        var = pd.read_csv(d / e["genes"])
        var.index = make_index_unique(pd.Index(var["gene_short_name"].astype(str)))
        a = ad.AnnData(X=x, obs=obs, var=var, dtype=x.dtype)
        a.strings_to_categoricals()
        for key, cols in e.get("obsm", {}).items():
            a.obsm[key] = obs[cols].to_numpy(dtype=np.float64)
        return a
    bcs = read_lines(d / e["cells"])
    rows = [l.split("\t") for l in read_lines(d / e["genes"])]
    if e.get("gene_header"):
        rows = rows[1:]
    if "gene_names" in e:
        names = read_lines(d / e["gene_names"])
    elif len(rows[0]) >= 2:
        names = [r[1] for r in rows]
    else:
        names = [r[0] for r in rows]
    var = pd.DataFrame(index=make_index_unique(pd.Index(names)))
    if "gene_ids" in e["gene_cols"]:
        var["gene_ids"] = [r[0] for r in rows]
    if "feature_types" in e["gene_cols"]:
        var["feature_types"] = [r[2] for r in rows]
    return ad.AnnData(X=x, obs=pd.DataFrame(index=bcs), var=var, dtype=x.dtype)


def assert_equal(a, o):
    assert list(a.obs_names) == list(o.obs_names)
    assert list(a.var_names) == list(o.var_names)
    got = a.X.toarray() if sp.issparse(a.X) else np.asarray(a.X)
    assert got.shape == o.shape
    assert np.array_equal(got, o.X.toarray()), "X differs from scipy.io.mmread"
    assert got.dtype.kind == o.X.dtype.kind, (got.dtype, o.X.dtype)
    assert list(a.var.columns) == list(o.var.columns)
    for c in o.var.columns:
        assert list(a.var[c].astype(str)) == list(o.var[c].astype(str)), c
    assert list(a.obs.columns) == list(o.obs.columns)
    for c in o.obs.columns:
        w, g = o.obs[c], a.obs[c]
        if isinstance(w.dtype, pd.CategoricalDtype):
            assert isinstance(g.dtype, pd.CategoricalDtype), c
            assert list(g.cat.categories) == list(w.cat.categories), c
            assert np.array_equal(g.cat.codes.to_numpy(), w.cat.codes.to_numpy()), c
        elif w.dtype.kind == "f":
            assert g.dtype == w.dtype, c
            assert np.array_equal(g.to_numpy(), w.to_numpy(), equal_nan=True), c
        else:
            assert g.dtype.kind == w.dtype.kind, (c, g.dtype, w.dtype)
            assert list(g) == list(w), c
    assert sorted(a.obsm.keys()) == sorted(o.obsm.keys())
    for k in o.obsm:
        assert np.array_equal(np.asarray(a.obsm[k]), o.obsm[k], equal_nan=True), k


def export(cfs, src, out, *opts):
    r = run_cfs(cfs, "export", *opts, src, out)
    assert r.returncode == 0, describe(r)
    assert not refused_lines(r.stderr), describe(r)
    return r


@pytest.mark.parametrize("name", NAMES)
def test_export_equals_mmread_and_lists(name, cfs, tmp_path):
    e = ALL[name]
    out = tmp_path / "out"
    r = export(cfs, e["path"], out)
    a = source_order(ad.read_zarr(str(out / f"{e['id']}.zarr")))
    assert_equal(a, oracle(e))
    if e.get("obsm"):
        assert_catalog(out, [e["id"]])
    else:
        # served without an embedding; the hint says how to add one
        assert_catalog(out, [], stores=[e["id"]])
        lines = not_in_catalog_lines(r.stderr)
        assert len(lines) == 1 and "holds no embedding" in lines[0], describe(r)


@pytest.mark.parametrize("name", ["cellranger3", "kb", "sci_rna_seq3", "r_symmetric"])
def test_order_original_and_inspect(name, cfs, tmp_path):
    if name not in ALL:
        pytest.skip("R fixtures not generated")
    e = ALL[name]
    out = tmp_path / "out"
    export(cfs, e["path"], out, "-o", "order=original")
    a = ad.read_zarr(str(out / f"{e['id']}.zarr"))
    assert "cellucid_original_position" not in a.obs.columns
    assert_equal(a, oracle(e))
    i = run_cfs(cfs, "inspect", "--json", e["path"])
    doc = json.loads(i.stdout)["files"][0]
    assert doc["format"] == "mtx", doc


def test_mounted_equals_oracle(cfs, mounts, tmp_path):
    """A folder of inputs, mounted: each store read through the mount equals its oracle."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("cellranger3", "kb", "sci_rna_seq3", "alevin_fry"):
        shutil.copytree(folder_of(ALL[name]), src / name)
    m = mounts(src)
    status = json.loads((m.mnt / "status.json").read_text())
    text = json.dumps(status)
    for name in ("cellranger3", "kb", "sci_rna_seq3", "alevin_fry"):
        assert name in text, text
        a = source_order(ad.read_zarr(str(m.mnt / f"{name}.zarr")))
        assert_equal(a, oracle(ALL[name]))
    cat = json.loads((m.mnt / "datasets.json").read_text())
    assert [d["id"] for d in cat["datasets"]] == ["sci_rna_seq3"]


def test_geo_folder_one_dataset_per_prefix(cfs, tmp_path):
    out = tmp_path / "out"
    export(cfs, MTX_DIR / "geo", out)
    have = sorted(p.name for p in out.iterdir() if p.name.endswith(".zarr"))
    assert have == sorted(f"{v['id']}.zarr" for v in GEO.values()), have
    for e in GEO.values():
        e = {**e, "path": MTX_DIR / e["path"]}
        a = source_order(ad.read_zarr(str(out / f"{e['id']}.zarr")))
        assert_equal(a, oracle(e))


def test_geo_matrix_file_alone(cfs, tmp_path):
    e = {**GEO["GSM100002_treated"]}
    e["path"] = MTX_DIR / e["path"]
    out = tmp_path / "out"
    export(cfs, e["path"], out)
    assert_equal(source_order(ad.read_zarr(str(out / f"{e['id']}.zarr"))), oracle(e))


def test_outs_run_folder_stays_outs(cfs, tmp_path):
    """A Cell Ranger run folder is the outs reader's, not one MatrixMarket input per matrix."""
    i = run_cfs(cfs, "inspect", "--json", OUTS / "pbmc_v7")
    assert json.loads(i.stdout)["files"][0]["format"] == "cellranger-outs"
    out = tmp_path / "out"
    export(cfs, OUTS / "pbmc_v7", out)
    assert sorted(p.name for p in out.iterdir() if p.name.endswith(".zarr")) == ["pbmc_v7.zarr"]


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_one_clear_line(name, cfs, tmp_path):
    e = BAD[name]
    src = MTX_DIR / e["path"]
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 2, describe(r)
    lines = refused_lines(r.stderr)
    assert len(lines) == 1, describe(r)
    assert lines[0].startswith(f"cellucid-fs: {src}: refused: {e['refused']}"), lines[0]
