"""Cell Ranger outs/ folders (formats/outs.c, formats/mtx.c), fixtures in tests/fixtures/outs/
from make_outs_fixtures.py: the 3-6 layout (.h5 + MatrixMarket), the >= 7 layout
(gene_expression_ names, MatrixMarket only) and the 2.x layout (filtered_gene_bc_matrices/GRCh38,
plain text), plus bad folders.

The oracle reads the source in this test, independently of the reader: X from the .h5 with h5py
or from matrix.mtx[.gz] with scipy.io.mmread (genes x cells, transposed), barcodes and features
from their .tsv[.gz]; every projection.csv and clusters.csv with the csv module (values with
float(), labels with int()). For every cell, the store's obsm rows equal the CSV's coordinates
(NaN rows for cells a CSV does not list) and its obs categoricals equal the CSV's labels
(missing for unlisted cells), with Cell Ranger's integer labels as string categories ("1", "2",
..., "10") in numeric order."""

import csv
import gzip
import json
import shutil
from pathlib import Path

import anndata as ad
import h5py
import numpy as np
import pandas as pd
import pytest
import scipy.io
import scipy.sparse as sp
from anndata.utils import make_index_unique

from conftest import (
    FIXTURES_DIR,
    assert_catalog,
    check_chunks,
    check_consolidated,
    describe,
    left_out_lines,
    load_manifest,
    not_in_catalog_lines,
    refused_lines,
    run_cfs,
)

pytestmark = pytest.mark.filterwarnings("ignore")

OUTS_DIR = FIXTURES_DIR / "outs"
MANIFEST = load_manifest("outs", "make_outs_fixtures.py")
GOOD = MANIFEST["good"]
BAD = MANIFEST["bad"]
GOOD_NAMES = sorted(GOOD)


def run_dir(entry):
    return OUTS_DIR / entry["dir"]


# ---------------------------------------------------------------------------------------------
# the oracle


def _open_text(path):
    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, "rt", newline="")
    return open(path, newline="")


def read_source(entry):
    """X (csr, cells x genes), barcodes, var (index, gene_ids[, feature_types]) of a fixture, read
    from its .h5 when it has one (that is what the reader prefers), else its MatrixMarket."""
    root = run_dir(entry)
    if "h5" in entry:
        with h5py.File(root / entry["h5"], "r") as f:
            m = f["matrix"]
            n_genes, n_cells = (int(v) for v in m["shape"][()])
            x = sp.csr_matrix((m["data"][()], m["indices"][()], m["indptr"][()]),
                              shape=(n_cells, n_genes))
            bcs = [b.decode() for b in m["barcodes"][()]]
            ft = m["features"]
            names = [b.decode() for b in ft["name"][()]]
            var = {"gene_ids": [b.decode() for b in ft["id"][()]],
                   "feature_types": [b.decode() for b in ft["feature_type"][()]],
                   "genome": [b.decode() for b in ft["genome"][()]]}
    else:
        with _open_text(root / entry["mtx"]) as fh:
            x = sp.csr_matrix(scipy.io.mmread(fh).T)
        with _open_text(root / entry["barcodes"]) as fh:
            bcs = [l.rstrip("\n") for l in fh if l.strip()]
        with _open_text(root / entry["features"]) as fh:
            rows = [l.rstrip("\n").split("\t") for l in fh if l.strip()]
        names = [r[1] for r in rows]
        var = {"gene_ids": [r[0] for r in rows]}
        if entry["features"].split("/")[-1].startswith("features"):
            var["feature_types"] = [r[2] for r in rows]
    var_names = list(make_index_unique(pd.Index(names)))
    return x, bcs, var_names, var


def read_projection_csv(path):
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    header = rows[0]
    return header, {r[0]: [float(v) for v in r[1:]] for r in rows[1:] if r}


def read_clusters_csv(path):
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["Barcode", "Cluster"]
    return {r[0]: int(r[1]) for r in rows[1:] if r}


def source_order(a):
    """The store's rows put back in source order (priority order undone)."""
    if "cellucid_original_position" not in a.obs.columns:
        return a
    pos = a.obs["cellucid_original_position"].to_numpy()
    assert pos.dtype == np.int64
    assert np.array_equal(np.sort(pos), np.arange(a.n_obs))
    order = np.argsort(pos, kind="stable")  # store row order[k] holds source row k
    x = a.X
    if sp.issparse(x):
        x = sp.csr_matrix((x.data, x.indices.astype(np.int64), x.indptr.astype(np.int64)),
                          shape=x.shape) if x.format == "csr" else \
            sp.csc_matrix((x.data, x.indices.astype(np.int64), x.indptr.astype(np.int64)),
                          shape=x.shape).tocsr()
    return ad.AnnData(X=x[order], dtype=x.dtype, obs=a.obs.iloc[order].drop(columns=["cellucid_original_position"]),
                      var=a.var, obsm={k: np.asarray(v)[order] for k, v in a.obsm.items()},
                      uns=dict(a.uns))


def assert_matches_source(a, entry):
    """The store (in source order) equals the fixture's matrix and CSVs, cell by cell."""
    root = run_dir(entry)
    x, bcs, var_names, var = read_source(entry)
    assert list(a.obs_names) == bcs
    assert list(a.var_names) == var_names
    for col, values in var.items():
        assert list(a.var[col]) == values, col
    got = a.X.toarray() if sp.issparse(a.X) else np.asarray(a.X)
    assert got.shape == x.shape
    assert np.array_equal(got, x.toarray()), "X differs from the matrix"
    assert np.issubdtype(got.dtype, np.integer)
    # embeddings: exactly the manifest's keys, each row the CSV's coordinates or NaN
    assert sorted(a.obsm.keys()) == sorted(entry["obsm"]), sorted(a.obsm.keys())
    for key, spec in entry["obsm"].items():
        header, coords = read_projection_csv(root / spec["csv"])
        v = np.asarray(a.obsm[key])
        assert v.dtype == np.float64, (key, v.dtype)
        assert v.shape == (len(bcs), len(header) - 1), (key, v.shape)
        missing = []
        for i, b in enumerate(bcs):
            if b in coords:
                assert list(v[i]) == coords[b], (key, b)
            else:
                assert np.isnan(v[i]).all(), (key, b)
                missing.append(i)
        assert missing == spec["missing"], (key, missing)
    # clusterings: string categories in numeric order, each cell's label the CSV's, missing
    # where unlisted
    cols = [c for c in a.obs.columns]
    assert sorted(cols) == sorted(entry["obs"]), cols
    for key, spec in entry["obs"].items():
        labels = read_clusters_csv(root / spec["csv"])
        col = a.obs[key]
        assert isinstance(col.dtype, pd.CategoricalDtype), (key, col.dtype)
        cats = col.cat.categories
        assert cats.dtype == object and all(isinstance(c, str) for c in cats), (key, cats.dtype)
        assert list(cats) == [str(v) for v in sorted(set(labels.values()))], key
        missing = []
        for i, b in enumerate(bcs):
            if b in labels:
                assert col.iloc[i] == str(labels[b]), (key, b)
            else:
                assert pd.isna(col.iloc[i]), (key, b)
                missing.append(i)
        assert missing == spec["missing"], (key, missing)


# ---------------------------------------------------------------------------------------------
# exports (cached per fixture and options)


@pytest.fixture(scope="session")
def exported_outs(cfs, tmp_path_factory):
    cache = {}

    def get(name, *opts, sub=""):
        key = (name, opts, sub)
        if key not in cache:
            out = tmp_path_factory.mktemp("outs-" + name) / "out"
            r = run_cfs(cfs, "export", *opts, run_dir(GOOD[name]) / sub, out)
            cache[key] = (out, r)
        return cache[key]

    return get


def read_store(out, dataset_id):
    return ad.read_zarr(str(Path(out) / f"{dataset_id}.zarr"))


# ---------------------------------------------------------------------------------------------
# the fixtures themselves


@pytest.mark.parametrize("name", GOOD_NAMES + sorted(BAD))
def test_fixture_folders_are_small(name):
    entry = GOOD.get(name) or BAD[name]
    size = sum(p.stat().st_size for p in run_dir(entry).rglob("*") if p.is_file())
    assert size < 200 * 1024, size


def test_oracle_sees_duplicates_and_layouts():
    """The fixtures exercise what the reader must handle: a duplicate symbol, both 2-d and 3-d
    projections of one basis, cells missing from a CSV, shuffled CSV rows."""
    _, _, var_names, _ = read_source(GOOD["pbmc_v3"])
    assert "GENE8-1" in var_names
    assert {"X_umap_2d", "X_umap_3d"} <= set(GOOD["pbmc_v7"]["obsm"])
    assert GOOD["pbmc_v2"]["obsm"]["X_tsne_3d"]["missing"]
    assert GOOD["pbmc_v2"]["obs"]["kmeans_3_clusters"]["missing"]
    _, bcs, _, _ = read_source(GOOD["pbmc_v7"])
    _, coords = read_projection_csv(run_dir(GOOD["pbmc_v7"]) / GOOD["pbmc_v7"]["obsm"]["X_tsne"]["csv"])
    assert list(coords) != bcs  # rows in another order than the matrix


# ---------------------------------------------------------------------------------------------
# good folders


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_store_equals_source_and_csvs(name, exported_outs):
    out, r = exported_outs(name)
    assert r.returncode == 0, describe(r)
    assert not left_out_lines(r.stderr) and not refused_lines(r.stderr), describe(r)
    a = read_store(out, GOOD[name]["id"])
    assert "cellucid_original_position" in a.obs.columns  # priority order by default
    assert_matches_source(source_order(a), GOOD[name])


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_order_original_equals_source(name, exported_outs):
    out, r = exported_outs(name, "-o", "order=original")
    assert r.returncode == 0, describe(r)
    a = read_store(out, GOOD[name]["id"])
    assert "cellucid_original_position" not in a.obs.columns
    assert_matches_source(a, GOOD[name])


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_in_catalog_under_run_folder_name(name, exported_outs):
    """The run folder and its outs/ both give the store the run's name; an outs folder has an
    embedding, so it is in datasets.json."""
    for sub in ("", "outs"):
        out, r = exported_outs(name, sub=sub)
        assert r.returncode == 0, describe(r)
        assert not not_in_catalog_lines(r.stderr), describe(r)
        assert_catalog(out, [GOOD[name]["id"]])
        check_consolidated(out / f"{GOOD[name]['id']}.zarr")
        check_chunks(out / f"{GOOD[name]['id']}.zarr")
        a = read_store(out, GOOD[name]["id"])
        assert a.uns["cellucid"]["id"] == GOOD[name]["id"]


def test_parent_folder_finds_the_outs_folders(cfs, tmp_path):
    """Exporting the folder that holds the runs finds each run (a folder recognised by its
    files, whatever its name) and nothing else."""
    src = tmp_path / "runs"
    src.mkdir()
    for name in GOOD_NAMES:
        shutil.copytree(run_dir(GOOD[name]), src / name)
    (src / "notes").mkdir()
    (src / "notes" / "readme.txt").write_text("not a data set\n")
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 0, describe(r)
    assert not refused_lines(r.stderr), describe(r)
    assert_catalog(out, [GOOD[n]["id"] for n in GOOD_NAMES])
    for name in GOOD_NAMES:
        assert_matches_source(source_order(read_store(out, GOOD[name]["id"])), GOOD[name])


def test_outs_folder_directly_inside_the_source(cfs, tmp_path):
    """SRC/outs/ (no run folder between) is named after SRC."""
    src = tmp_path / "myrun"
    shutil.copytree(run_dir(GOOD["pbmc_v2"]) / "outs", src / "outs")
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 0, describe(r)
    assert_catalog(out, ["myrun"])


def test_matrixmarket_without_h5_equals_h5(cfs, tmp_path, exported_outs):
    """The 3-6 folder without its .h5 is read from filtered_feature_bc_matrix/ (gzipped
    MatrixMarket), and gives the same cells, genes, counts, embeddings and clusters."""
    src = tmp_path / "pbmc_v3"
    shutil.copytree(run_dir(GOOD["pbmc_v3"]), src)
    (src / "outs" / "filtered_feature_bc_matrix.h5").unlink()
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", "-o", "order=original", src, out)
    assert r.returncode == 0, describe(r)
    mex = read_store(out, "pbmc_v3")
    h5_out, r2 = exported_outs("pbmc_v3", "-o", "order=original")
    h5 = read_store(h5_out, "pbmc_v3")
    assert list(mex.obs_names) == list(h5.obs_names)
    assert list(mex.var_names) == list(h5.var_names)
    for col in ("gene_ids", "feature_types"):
        assert list(mex.var[col]) == list(h5.var[col])
    assert np.array_equal(mex.X.toarray(), h5.X.toarray())
    assert mex.X.dtype == h5.X.dtype == np.int32
    for k in h5.obsm:
        assert np.array_equal(mex.obsm[k], h5.obsm[k], equal_nan=True), k
    for c in h5.obs.columns:
        assert mex.obs[c].equals(h5.obs[c]), c
    entry = dict(GOOD["pbmc_v3"])
    del entry["h5"]
    entry["dir"] = str(src)
    assert_matches_source(mex, {**entry, "dir": str(src)})
    i = run_cfs(cfs, "inspect", "--json", src)
    doc = json.loads(i.stdout)["files"][0]
    assert doc["version"] == "Cell Ranger 3-6 (MatrixMarket outs/filtered_feature_bc_matrix)"


def _mtx_lines(entry):
    with _open_text(run_dir(entry) / entry["mtx"]) as fh:
        return fh.read().split("\n")


def test_unsorted_matrixmarket_with_duplicates(cfs, tmp_path):
    """Entries in no particular order, one of them split into two duplicates: the reader sorts
    them in memory and sums the duplicates, as scipy does."""
    entry = GOOD["pbmc_v2"]
    src = tmp_path / "pbmc_v2"
    shutil.copytree(run_dir(entry), src)
    lines = _mtx_lines(entry)
    head, body = lines[:3], [l for l in lines[3:] if l]
    i, j, v = body[0].split()
    assert int(v) >= 2
    body[0] = f"{i} {j} {int(v) - 1}"
    body.append(f"{i} {j} 1")
    body = [body[k] for k in np.random.default_rng(1).permutation(len(body))]
    head[2] = head[2].rsplit(" ", 1)[0] + f" {len(body)}"
    (src / entry["mtx"]).write_text("\n".join(head + body) + "\n")
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 0, describe(r)
    assert_matches_source(source_order(read_store(out, "pbmc_v2")), entry)


# ---------------------------------------------------------------------------------------------
# inspect


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_inspect_json(name, cfs):
    r = run_cfs(cfs, "inspect", "--json", run_dir(GOOD[name]))
    assert r.returncode == 0, describe(r)
    doc = json.loads(r.stdout)["files"][0]
    assert doc["format"] == "cellranger-outs"
    assert doc["version"] == GOOD[name]["version"]
    assert doc["refused"] is None
    assert (doc["n_obs"], doc["n_vars"]) == (GOOD[name]["n_obs"], GOOD[name]["n_vars"])


# ---------------------------------------------------------------------------------------------
# bad folders


def _expect_left_out(cfs, tmp_path, name):
    entry = BAD[name]
    src = run_dir(entry)
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 0, describe(r)
    want = sorted(f"cellucid-fs: {src}: left out {el}: {msg}"
                  for el, msg in entry["expect"]["left_out"].items())
    assert sorted(left_out_lines(r.stderr)) == want, describe(r)
    assert_catalog(out, [name])
    a = source_order(read_store(out, name))
    assert sorted(a.obsm.keys()) == sorted(entry["expect"]["kept_obsm"])
    for el in entry["expect"]["left_out"]:
        part, key = el.split("/")
        assert key not in (a.obsm if part == "obsm" else a.obs.columns)
    kept = {**entry, "obsm": {k: v for k, v in entry["obsm"].items() if k in a.obsm},
            "obs": {k: v for k, v in entry["obs"].items() if k in a.obs.columns}}
    assert_matches_source(a, kept)
    return r


def test_projection_with_unknown_barcodes_left_out(cfs, tmp_path):
    _expect_left_out(cfs, tmp_path, "unknown_barcodes")


def test_malformed_rows_left_out_with_line_numbers(cfs, tmp_path):
    _expect_left_out(cfs, tmp_path, "malformed_row")


def test_truncated_mtx_gz_refused(cfs, tmp_path):
    entry = BAD["truncated_mtx"]
    src = run_dir(entry)
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 2, describe(r)
    lines = refused_lines(r.stderr)
    assert len(lines) == 1, describe(r)
    prefix = f"cellucid-fs: {src}: refused: {entry['expect']['refused']}"
    assert lines[0].startswith(prefix), lines[0]
    assert lines[0].endswith("); re-download or re-copy it"), lines[0]
    assert_catalog(out, [], stores=[])
    i = run_cfs(cfs, "inspect", "--json", src)
    doc = json.loads(i.stdout)["files"][0]
    assert doc["format"] == "cellranger-outs"
    assert doc["refused"].startswith(entry["expect"]["refused"])


def _v2_copy(tmp_path):
    entry = GOOD["pbmc_v2"]
    src = tmp_path / "pbmc_v2"
    shutil.copytree(run_dir(entry), src)
    return entry, src, _mtx_lines(entry)


def _refusal(cfs, tmp_path, src):
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 2, describe(r)
    lines = refused_lines(r.stderr)
    assert len(lines) == 1, describe(r)
    assert not (out / "pbmc_v2.zarr").exists()
    return lines[0].split(": refused: ", 1)[1]


MTX_REL = "outs/filtered_gene_bc_matrices/GRCh38/matrix.mtx"


def test_plain_mtx_missing_entries_refused(cfs, tmp_path):
    entry, src, lines = _v2_copy(tmp_path)
    nnz = int(lines[2].split()[2])
    (src / entry["mtx"]).write_text("\n".join(lines[: 3 + nnz - 5]) + "\n")
    assert _refusal(cfs, tmp_path, src) == (
        f"{MTX_REL} ends after {nnz - 5} of the {nnz} entries its size line announces (line "
        f"{3 + nnz - 5}): the file is truncated; re-download the file or write it again")


def test_plain_mtx_cut_in_its_last_line_refused(cfs, tmp_path):
    """A file cut inside its last entry ("12 3 4" of "12 3 45") must not serve a wrong count."""
    entry, src, lines = _v2_copy(tmp_path)
    text = "\n".join(lines).rstrip("\n")
    (src / entry["mtx"]).write_text(text[:-1] if text[-2] != " " else text)
    nlines = text.count("\n") + 1
    assert _refusal(cfs, tmp_path, src) == (
        f"{MTX_REL}: its last line ({nlines}) has no line end, so the file looks cut short; "
        f"re-download it (or, if it is complete, end it with a newline)")


@pytest.mark.parametrize("line,why", [
    ("0 1 3", "row index '0' is not an integer between 1 and 40 (the size line's row count)"),
    ("41 1 3", "row index '41' is not an integer between 1 and 40 (the size line's row count)"),
    ("1 51 3", "column index '51' is not an integer between 1 and 50 (the size line's column count)"),
    ("1 1 2.5", "value '2.5' is not an integer (the header says integer)"),
    ("1 1", "2 fields where an entry has 3 (row column value)"),
])
def test_plain_mtx_bad_entry_refused_with_line(line, why, cfs, tmp_path):
    entry, src, lines = _v2_copy(tmp_path)
    lines[10] = line
    (src / entry["mtx"]).write_text("\n".join(lines))
    assert _refusal(cfs, tmp_path, src) == (
        f"{MTX_REL}: line 11: {why}; re-download the file or write it again")


def test_mtx_size_line_disagreeing_with_lists_refused(cfs, tmp_path):
    """The size line is untrusted: checked against barcodes.tsv and genes.tsv before anything is
    allocated for it."""
    entry, src, lines = _v2_copy(tmp_path)
    lines[2] = "40 4000000000 " + lines[2].split()[2]
    (src / entry["mtx"]).write_text("\n".join(lines))
    d = "outs/filtered_gene_bc_matrices/GRCh38"
    assert _refusal(cfs, tmp_path, src) == (
        f"{d}/matrix.mtx is 40 x 4000000000 (its size line) but {d}/genes.tsv lists 40 features "
        f"and {d}/barcodes.tsv 50 barcodes: the files do not belong together; copy the whole "
        f"folder from one Cell Ranger run")


def test_clusters_csv_with_duplicate_barcode_left_out(cfs, tmp_path):
    entry, src, _ = _v2_copy(tmp_path)
    p = src / entry["obs"]["graphclust"]["csv"]
    rows = p.read_text().split("\n")
    rows.insert(5, rows[2])
    p.write_text("\n".join(rows))
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 0, describe(r)
    bc = rows[2].split(",")[0]
    assert left_out_lines(r.stderr) == [
        f"cellucid-fs: {src}: left out obs/graphclust: outs/analysis/clustering/graphclust/"
        f"clusters.csv: line 6 lists barcode {bc} again (first on line 3); it was not read"]
    assert "graphclust" not in read_store(out, "pbmc_v2").obs.columns


def test_no_analysis_not_in_catalog_with_advice(cfs, tmp_path):
    entry, src, _ = _v2_copy(tmp_path)
    shutil.rmtree(src / "outs" / "analysis")
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 0, describe(r)
    assert not_in_catalog_lines(r.stderr) == [
        f"cellucid-fs: {src}: not in datasets.json: it has no analysis/ folder (Cell Ranger ran "
        f"with --nosecondary?); run cellranger reanalyze, or add an embedding (e.g. scanpy's "
        f"sc.tl.umap) and export again"]
    assert_catalog(out, [], stores=["pbmc_v2"])


def test_cell_ranger_2_h5_without_analysis(cfs, tmp_path):
    """A Cell Ranger 1.2-2 run with its filtered_gene_bc_matrices_h5.h5 (read by the 10x reader)
    and no analysis/: served, not in the catalog, with advice that fits an outs/ folder."""
    src = tmp_path / "run2" / "outs"
    src.mkdir(parents=True)
    shutil.copyfile(FIXTURES_DIR / "tenx" / "dropletutils_v2.h5", src / "filtered_gene_bc_matrices_h5.h5")
    i = run_cfs(cfs, "inspect", "--json", src)
    doc = json.loads(i.stdout)["files"][0]
    assert doc["format"] == "cellranger-outs", i.stdout
    assert doc["version"] == "Cell Ranger 1.2-2.x (filtered_gene_bc_matrices_h5.h5)"
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 0, describe(r)
    assert_catalog(out, [], stores=["run2"])
    assert "no analysis/ folder" in not_in_catalog_lines(r.stderr)[0]


@pytest.mark.parametrize("layout", ["per_sample_outs/s1/count", "aggr/outs/count"])
def test_multi_and_aggr_count_folders(layout, cfs, tmp_path):
    """multi's per_sample_outs/<s>/count/ (sample_filtered_feature_bc_matrix.h5) and an aggr's
    outs/count/ are recognised by the files they hold."""
    entry = GOOD["pbmc_v3"]
    d = tmp_path / layout
    shutil.copytree(run_dir(entry) / "outs" / "analysis", d / "analysis")
    h5 = "sample_filtered_feature_bc_matrix.h5" if layout.startswith("per_sample") else \
        "filtered_feature_bc_matrix.h5"
    shutil.copyfile(run_dir(entry) / entry["h5"], d / h5)
    src = d if layout.startswith("per_sample") else tmp_path / "aggr"
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 0, describe(r)
    ids = [x["id"] for x in json.loads((out / "datasets.json").read_text())["datasets"]]
    assert ids == (["s1"] if layout.startswith("per_sample") else ["aggr"]), ids
    a = source_order(read_store(out, ids[0]))
    moved = {**entry, "dir": str(tmp_path / "moved")}
    # the oracle reads the .h5 and CSVs where they now are
    shutil.copytree(d, tmp_path / "moved" / "outs")
    if h5 != "filtered_feature_bc_matrix.h5":
        (tmp_path / "moved" / "outs" / h5).rename(tmp_path / "moved" / entry["h5"])
    assert_matches_source(a, moved)


def _multi_run(root, samples):
    """A Cell Ranger multi run at root: outs/per_sample_outs/<s>/count/ for each sample, each
    the pbmc_v3 run's matrix (as sample_filtered_feature_bc_matrix.h5) and analysis/."""
    entry = GOOD["pbmc_v3"]
    for s in samples:
        count = root / "outs" / "per_sample_outs" / s / "count"
        shutil.copytree(run_dir(entry) / "outs" / "analysis", count / "analysis")
        shutil.copyfile(run_dir(entry) / entry["h5"], count / "sample_filtered_feature_bc_matrix.h5")
    (root / "outs" / "multi" / "count").mkdir(parents=True)
    return entry


@pytest.mark.parametrize("given", ["parent", "run", "outs"])
def test_multi_run_lists_every_sample(given, cfs, tmp_path):
    """A multi run is one dataset per per_sample_outs/<sample>/count, found from the folder that
    holds the run, the run folder itself or its outs/; each is named after its sample and equals
    its source."""
    runs = tmp_path / "runs"
    entry = _multi_run(runs / "multi1", ["s1", "s2"])
    src = {"parent": runs, "run": runs / "multi1", "outs": runs / "multi1" / "outs"}[given]
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 0, describe(r)
    assert not refused_lines(r.stderr), describe(r)
    assert_catalog(out, ["s1", "s2"])
    # the oracle reads the sample's .h5 and CSVs where a count run keeps them
    for s in ("s1", "s2"):
        moved = tmp_path / f"moved-{s}"
        shutil.copytree(runs / "multi1" / "outs" / "per_sample_outs" / s / "count", moved / "outs")
        (moved / "outs" / "sample_filtered_feature_bc_matrix.h5").rename(moved / entry["h5"])
        assert_matches_source(source_order(read_store(out, s)), {**entry, "dir": str(moved)})


def test_matrix_with_a_duplicate_barcode_joins_no_csv(cfs, tmp_path):
    """A barcode listed twice by the matrix makes every CSV row ambiguous: none is read."""
    entry, src, _ = _v2_copy(tmp_path)
    p = src / entry["barcodes"]
    bcs = p.read_text().split("\n")
    bcs[4] = bcs[1]
    p.write_text("\n".join(bcs))
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 0, describe(r)
    assert left_out_lines(r.stderr) == [
        f"cellucid-fs: {src}: left out outs/analysis: the matrix lists barcode {bcs[1]} twice "
        f"(row 5), so its CSVs cannot be joined to its cells; none was read"]
    assert not_in_catalog_lines(r.stderr) == [
        f"cellucid-fs: {src}: not in datasets.json: every analysis/ projection was left out (see "
        f"the reasons above); fix or re-create the CSVs (cellranger reanalyze) and export again"]
