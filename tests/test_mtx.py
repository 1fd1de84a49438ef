"""MatrixMarket inputs (formats/mtx_folder.c, formats/mex.c, formats/mtx.c), fixtures in
tests/fixtures/mtx/ from make_mtx_fixtures.py (scipy.io.mmwrite) and make_mtx_fixtures.R
(Matrix::writeMM), plus Cell Ranger's MEX folders of tests/fixtures/outs/ opened directly.

The oracle reads each input in this test, independently of the reader: the matrix with
scipy.io.mmread (transposed when rows are genes), the lists with pandas (read_csv; TSVs without
a header), var_names made unique with anndata's make_index_unique, gene ids as var['gene_ids'],
feature types as var['feature_types']; sci-RNA-seq3's tables as pandas reads them, with
anndata's strings_to_categoricals applied (anndata does it when it writes), and their
<x>umap_k / <x>tsne_k columns as obsm; projection CSVs beside a matrix (proj_* fixtures) as
pandas reads them (read_csv, index_col=0, float_precision="round_trip"), rows aligned to the barcodes, NaN for cells a CSV
does not list. The store, read with anndata.read_zarr (exported and mounted) and put back in
source order, must equal it value for value."""

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
    left_out_lines,
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
PROJ = MANIFEST["projections"]
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
    a = _oracle_lists(e, d, x)
    for key, csv in e.get("projections", {}).items():
        # round_trip: pandas' default float parser may be 1 ulp off the correctly rounded value
        df = pd.read_csv(d / csv, index_col=0, float_precision="round_trip")
        assert not df.index.duplicated().any() and df.index.isin(a.obs_names).all(), csv
        a.obsm[key] = df.reindex(a.obs_names).to_numpy(dtype=np.float64)
    return a


def _oracle_lists(e, d, x):
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


# ---------------------------------------------------------------------------------------------
# projection CSVs beside the matrix (formats/projections.c, shared with the outs reader)


def _left_out_want(src, e):
    return sorted(f"cellucid-fs: {src}: left out {el}: {msg}" for el, msg in e["left_out"].items())


@pytest.mark.parametrize("name", sorted(PROJ))
def test_projection_csvs_are_obsm(name, cfs, tmp_path):
    """Each projection CSV beside the matrix is an obsm array equal to the CSV read with pandas;
    a CSV that is not a projection (qc_metrics.csv) is skipped silently; a broken one is left
    out with its reason and the dataset still served."""
    e = {**PROJ[name], "path": MTX_DIR / PROJ[name]["path"]}
    out = tmp_path / "out"
    r = export(cfs, e["path"], out)
    assert sorted(left_out_lines(r.stderr)) == _left_out_want(e["path"], e), describe(r)
    a = source_order(ad.read_zarr(str(out / f"{e['id']}.zarr")))
    o = oracle(e)
    assert_equal(a, o)
    for k, v in a.obsm.items():
        assert np.asarray(v).dtype == np.float64, k
    if e["projections"]:
        assert_catalog(out, [e["id"]])
        assert not not_in_catalog_lines(r.stderr), describe(r)
    else:
        assert_catalog(out, [], stores=[e["id"]])
        lines = not_in_catalog_lines(r.stderr)
        assert len(lines) == 1 and "every projection CSV beside the matrix was left out" in \
            lines[0], describe(r)


def test_projection_naming_and_missing_cells():
    """Two t-SNE widths are X_tsne_2d and X_tsne_3d; analysis/pca/5_components is X_pca; the
    3-d t-SNE lists all but two cells, whose rows are NaN (the oracle's reindex)."""
    e = {**PROJ["proj_cellranger3"], "path": MTX_DIR / PROJ["proj_cellranger3"]["path"]}
    o = oracle(e)
    assert sorted(o.obsm) == ["X_pca", "X_tsne_2d", "X_tsne_3d", "X_umap"]
    assert o.obsm["X_tsne_3d"].shape[1] == 3 and o.obsm["X_pca"].shape[1] == 5
    assert np.isnan(o.obsm["X_tsne_3d"]).all(axis=1).sum() == 2


def test_geo_prefix_projection_export_whole_folder(cfs, tmp_path):
    """The GEO folder: each prefix takes only its own <prefix>*.csv[.gz]."""
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", MTX_DIR / "proj_geo", out)
    assert r.returncode == 0, describe(r)
    want = []
    for e in PROJ.values():
        if e["path"].startswith("proj_geo/"):
            want += _left_out_want(MTX_DIR / e["path"], e)
    assert sorted(left_out_lines(r.stderr)) == sorted(want), describe(r)
    ids = [e["id"] for e in PROJ.values() if e["path"].startswith("proj_geo/")]
    drawable = [e["id"] for e in PROJ.values()
                if e["path"].startswith("proj_geo/") and e["projections"]]
    assert_catalog(out, drawable, stores=ids)
    for i in ids:
        e = {**PROJ[i], "path": MTX_DIR / PROJ[i]["path"]}
        assert_equal(source_order(ad.read_zarr(str(out / f"{i}.zarr"))), oracle(e))


def test_projection_csvs_mounted(cfs, mounts, tmp_path):
    """Mounted: datasets.json lists the datasets with a projection; status.json lists the broken
    CSV as left out with the export's reason; each store equals its oracle."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copytree(MTX_DIR / "proj_cellranger3", src / "proj_cellranger3")
    for f in (MTX_DIR / "proj_geo").iterdir():
        shutil.copy(f, src / f.name)
    m = mounts(src)
    status = json.loads((m.mnt / "status.json").read_text())
    srcs = {Path(x["source"]).name: x for x in status["sources"]}
    for name, e in PROJ.items():
        x = srcs[Path(e["path"]).name]
        assert x["state"] == "ready" and x["id"] == e["id"], x
        assert {y["element"]: y["reason"] for y in x["left_out"]} == e["left_out"], x
        assert x["in_catalog"] is bool(e["projections"]), x
        o = oracle({**e, "path": MTX_DIR / e["path"]})
        assert_equal(source_order(ad.read_zarr(str(m.mnt / f"{e['id']}.zarr"))), o)
    cat = json.loads((m.mnt / "datasets.json").read_text())
    assert sorted(d["id"] for d in cat["datasets"]) == sorted(
        e["id"] for e in PROJ.values() if e["projections"])


def _copy_cr3(tmp_path):
    d = tmp_path / "cr3"
    shutil.copytree(MTX_DIR / "proj_cellranger3", d)
    for f in ("umap.csv", "tsne.csv", "tsne_3d.csv"):
        (d / f).unlink()
    shutil.rmtree(d / "analysis")
    return d


def test_broken_projection_left_out_rest_served(cfs, tmp_path):
    """A projection CSV with a wrong field count is left out naming its line; another CSV of the
    folder is still served."""
    d = _copy_cr3(tmp_path)
    bcs = read_lines(d / "barcodes.tsv.gz")
    good = pd.DataFrame({"UMAP-1": np.arange(len(bcs), dtype=float),
                         "UMAP-2": np.ones(len(bcs))}, index=pd.Index(bcs, name="Barcode"))
    good.to_csv(d / "umap.csv")
    text = good.rename(columns={"UMAP-1": "TSNE-1", "UMAP-2": "TSNE-2"}).to_csv()
    rows = text.split("\n")
    rows[3] = rows[3].rsplit(",", 1)[0]   # line 4 lacks its last field
    (d / "tsne.csv").write_text("\n".join(rows))
    out = tmp_path / "out"
    r = export(cfs, d, out)
    lines = left_out_lines(r.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"cellucid-fs: {d}: left out obsm/X_tsne: "
                                                   "tsne.csv: line 4"), describe(r)
    assert lines[0].endswith("; it was not read"), lines[0]
    a = source_order(ad.read_zarr(str(out / "cr3.zarr")))
    assert sorted(a.obsm) == ["X_umap"]
    assert np.array_equal(np.asarray(a.obsm["X_umap"]), good.reindex(a.obs_names).to_numpy())
    assert_catalog(out, ["cr3"])


def test_no_embedding_hint_says_how_to_add_one(cfs, tmp_path):
    """Without a projection CSV (only a table that is not one) the dataset is served, not
    listed, and the hint names the CSV to add."""
    d = _copy_cr3(tmp_path)
    out = tmp_path / "out"
    r = export(cfs, d, out)
    assert not left_out_lines(r.stderr), describe(r)
    assert_catalog(out, [], stores=["cr3"])
    lines = not_in_catalog_lines(r.stderr)
    assert len(lines) == 1 and "put a projection.csv (Barcode,UMAP-1,UMAP-2" in lines[0] and \
        "beside the matrix" in lines[0], describe(r)
