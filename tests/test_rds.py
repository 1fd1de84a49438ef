"""R objects (formats/r/rds.c, seurat.c, sce.c): Seurat and SingleCellExperiment objects saved by
R itself (tests/fixtures/make_seurat_fixtures.R: SeuratObject 4.1, SingleCellExperiment 1.20;
the Assay5 object built in SeuratObject 5's class layout, see the script) as .rds (gzip and xz),
.RData and .rda.

The oracle is R's own reading of each saved file (readRDS / load and the SeuratObject / SCE
accessors), dumped by the script into <file>.oracle/: the matrices as MatrixMarket files with 17
significant digits, the data frames as CSV with each column's R class and factor levels, the
embeddings as CSV. This test turns that dump into the AnnData an anndata user expects (factors
as categoricals keeping level order and unused levels, logical/integer columns with NA as
nullable columns, numeric NA as NaN, character columns with NA as categoricals; matrices as
cells x features) and compares it with anndata.read_zarr of the exported and of the mounted
store, value for value (conftest.assert_adata_equal undoes the priority order)."""

import bz2
import gzip
import json
import lzma
import os
import shutil
import subprocess
import time
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.io
import scipy.sparse as sp

import test_mudata
from test_compressed import wait_for
from conftest import (
    FIXTURES_DIR,
    assert_adata_equal,
    assert_catalog,
    describe,
    left_out_lines,
    refused_lines,
    run_cfs,
    tree_bytes,
)

pytestmark = pytest.mark.filterwarnings("ignore")

RDS = FIXTURES_DIR / "rds"

# file -> (store id, kind, oracle folder, what is left out)
SEURAT = {
    "seurat.rds": {"id": "seurat"},
    "seurat_xz.rds": {"id": "seurat_xz"},
    "seurat.RData": {"id": "seurat"},
    "seurat_v5.rds": {"id": "seurat_v5", "v5": True},
    # an Assay5 with split layers (counts.s1, counts.s2, data.s1, data.s2; interleaved cells,
    # s2 without two features): read as JoinLayers joins them (the oracle joins them in R)
    "seurat_split.rds": {"id": "seurat_split", "v5": True},
    # its data joined (a layer of its own), its counts still split
    "seurat_split_counts.rds": {"id": "seurat_split_counts", "v5": True},
    # seurat_split.rds with scale.data split too, each sample's over the features it holds:
    # together every feature, so a layer (s2's cells 0 at the two it lacks)
    "seurat_split_scaled.rds": {"id": "seurat_split_scaled", "v5": True},
    # the split layers dense base matrices (counts integer): joined dense, as float64 as R's
    # join; its split scale.data covers the variable features only: left out
    "seurat_split_dense.rds": {"id": "seurat_split_dense", "v5": True, "left_out": [
        "layers/scale.data: its split layers scale.data.* together hold 3 of the assay's 14 "
        "features and 10 of its 10 cells (Seurat scales only the variable features by "
        "default; ScaleData(features = rownames(obj)) scales them all)"]},
    # two assays: a MuData store, one modality each (the default first)
    "seurat_adt.rds": {"id": "seurat_adt", "modalities": ["RNA", "ADT"], "left_out": [
        "mod/RNA/layers/scale.data: it is 3 x 10 where the assay has 14 features and 10 cells "
        "(Seurat scales only the variable features by default; ScaleData(features = "
        "rownames(obj)) scales them all)"]},
    "seurat_scaled.rds": {"id": "seurat_scaled"},
    # Seurat 3.2 and 3.0 objects (classes of package "Seurat", hand-built: see the script)
    "seurat_v3.rds": {"id": "seurat_v3"},
    "seurat_v30.rds": {"id": "seurat_v30"},
    # the objects of workspaces (<file>:<object>), each its own dataset <file>-<object>
    "both.rda:so": {"id": "both-so", "oracle": "both.rda.oracle/so"},
    "split.RData:so_split": {"id": "split-so_split", "oracle": "split.RData.oracle/so_split",
                             "v5": True},
    "split.RData:so": {"id": "split-so", "oracle": "split.RData.oracle/so"},
    "mixed.RData:adt": {"id": "mixed-adt", "oracle": "mixed.RData.oracle/adt",
                        "modalities": ["RNA", "ADT"], "left_out": [
        "(object adt): left out mod/RNA/layers/scale.data: it is 3 x 10 where"]},
}
SCE = {
    "sce.rds": {"id": "sce", "oracle": "sce.rds.oracle"},
    "both.rda:sce": {"id": "both-sce", "oracle": "both.rda.oracle/sce"},
    # an object name that is no path component: its id is made of safe characters, its name
    # (uns/cellucid/name) is the file's and the object's
    "mixed.RData:sce/alt": {"id": "mixed-sce_alt", "name": "mixed-sce/alt",
                            "oracle": "mixed.RData.oracle/sce_alt",
                            "counts_only": True, "modalities": ["main", "ADT"],
                            "left_out": ["(object sce/alt): left out uns/metadata/fn"]},
    "sce_t.rds": {"id": "sce_t", "counts_only": True, "int_layer": True},
    # every Matrix package class an assay may be; Date, POSIXct, difftime, integer64 columns
    "sce_types.rds": {"id": "sce_types", "matrix_classes": True},
    # an altExp: a MuData store, the main experiment and the altExp each a modality
    "sce_alt.rds": {"id": "sce_alt", "counts_only": True, "modalities": ["main", "ADT"],
                    "left_out": ["uns/metadata/fn: not a plain value"]},
}
ALL = {**SEURAT, **SCE}
FILES = sorted(f for f in ALL if ":" not in f)
# a workspace -> its objects that are datasets, in the file's order
WORKSPACES = {"both.rda": ["both.rda:sce", "both.rda:so"],
              "mixed.RData": ["mixed.RData:adt", "mixed.RData:sce/alt"],
              "split.RData": ["split.RData:so_split", "split.RData:so"]}
# split.RData's so_bpcells: split layers kept on disk by BPCells, refused
BPCELLS_REFUSED = ("the default assay 'RNA' of this Seurat object holds split layers; layer "
                   "data.s1 is a matrix stored outside the file (DelayedArray/HDF5Array/"
                   "BPCells); save the object with its values in memory (e.g. as(x, "
                   "\"dgCMatrix\"))")


def _mm(path):
    return sp.csr_matrix(scipy.io.mmread(str(path)))


def _column(values, cls, levels):
    na = np.array([v == "NA" for v in values])
    if cls == "factor":
        cats = levels.split("|") if levels else []
        return pd.Categorical([None if m else v for v, m in zip(values, na)], categories=cats)
    if cls == "numeric":
        return np.array([np.nan if m else float(v) for v, m in zip(values, na)], dtype=np.float64)
    if cls == "integer":
        if na.any():
            return pd.array([None if m else int(v) for v, m in zip(values, na)], dtype="Int32")
        return np.array([int(v) for v in values], dtype=np.int32)
    if cls == "logical":
        b = [None if m else v == "TRUE" for v, m in zip(values, na)]
        return pd.array(b, dtype="boolean") if na.any() else np.array(b, dtype=bool)
    if cls == "difftime":   # its units are not kept: the numbers are
        return _column(values, "numeric", levels)
    if cls == "integer64":
        if na.any():
            return pd.array([None if m else int(v) for v, m in zip(values, na)], dtype="Int64")
        return np.array([int(v) for v in values], dtype=np.int64)
    # Date and POSIXct: ISO 8601 text (POSIXct in UTC), as R's dump wrote them
    assert cls in ("character", "Date", "POSIXct"), cls
    if na.any():
        cats = sorted({v for v, m in zip(values, na) if not m})
        return pd.Categorical([None if m else v for v, m in zip(values, na)], categories=cats)
    return np.array(list(values), dtype=object)


def _frame(d, what):
    raw = pd.read_csv(d / f"{what}.csv", dtype=str, keep_default_na=False)
    types = pd.read_csv(d / f"{what}_types.csv", dtype=str, keep_default_na=False)
    cols = {}
    for _, t in types.iterrows():
        cols[t["column"]] = _column(list(raw[t["column"]]), t["class"], t["levels"])
    return pd.DataFrame(cols, index=pd.Index(list(raw["name"]), dtype=object))


def _embedding(path):
    """A dense matrix R wrote (write_dense: g17's text, NA for NA and NaN)."""
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    v = df.drop(columns=["name"]).replace("NA", "nan")
    return v.to_numpy().astype(np.float64), list(df["name"])


def _joined(d, stem):
    """A layer of R's dump: sparse (<stem>.mtx), or dense (<stem>.csv: split base matrices
    joined as JoinLayers joins them, a double matrix)."""
    if (d / f"{stem}.mtx").exists():
        return _mm(d / f"{stem}.mtx").T.tocsr()
    return _embedding(d / f"{stem}.csv")[0]


def oracle(file):
    """The AnnData R's dump of file means."""
    e = ALL[file]
    d = RDS / e.get("oracle", f"{file}.oracle")
    obs, var = _frame(d, "obs"), _frame(d, "var")
    obsm, obsp, layers = {}, {}, {}
    for p in sorted(d.glob("obsm_*.csv")):
        m, names = _embedding(p)
        obsm["X_" + p.stem[len("obsm_"):].lower()] = m
    uns = {}
    if e.get("matrix_classes"):
        x, layers, obsm = _assays_by_class(d)
    elif file in SCE and e.get("counts_only"):
        x = _mm(d / "assay_counts.mtx").T.tocsr()   # a dgCMatrix, or a dgTMatrix (sce_t)
        if (d / "metadata.tsv").exists():
            uns["metadata"] = _plain_values(d / "metadata.tsv")
        if e.get("int_layer"):   # an integer base matrix: int32, dense
            layers["int"] = np.asarray(_mm(d / "assay_int.mtx").T.todense()).astype(np.int32)
    elif file in SCE:
        x = np.asarray(_mm(d / "assay_logcounts.mtx").T.todense())   # a base matrix in R
        layers["counts"] = _mm(d / "assay_counts.mtx").T.tocsr()
    else:
        x = _joined(d, "X")
        layers["counts"] = _joined(d, "counts")
        if (d / "scale.data.csv").exists():   # covers every feature: a dense layer
            layers["scale.data"], _ = _embedding(d / "scale.data.csv")
        for p in sorted(d.glob("obsp_*.mtx")):
            obsp[p.stem[len("obsp_"):]] = sp.csc_matrix(scipy.io.mmread(str(p)))
        if e.get("v5"):
            var["highly_variable"] = np.asarray(var["var.features"].notna(), dtype=bool)
        else:
            hv = set((d / "variable_features.txt").read_text().split())
            var["highly_variable"] = np.array([g in hv for g in var.index], dtype=bool)
    return ad.AnnData(X=x, obs=obs, var=var, obsm=obsm, obsp=obsp, layers=layers, uns=uns,
                      dtype=np.float64)


def _mm_na(path):
    """A MatrixMarket file whose values may be NA (R's NA in a logical matrix), as csr."""
    lines = [ln for ln in path.read_text().splitlines() if not ln.startswith("%")]
    nr, nc, _ = map(int, lines[0].split())
    ijx = [ln.split() for ln in lines[1:]]
    i = np.array([int(t[0]) - 1 for t in ijx], dtype=np.int64)
    j = np.array([int(t[1]) - 1 for t in ijx], dtype=np.int64)
    x = np.array([np.nan if t[2] == "NA" else float(t[2]) for t in ijx])
    return sp.csr_matrix((x, (i, j)), shape=(nr, nc))


def _assays_by_class(d):
    """X (logcounts), layers and obsm of sce_types.rds: each assay as its R class means it:
    double classes float64 sparse, logical and pattern ones bool (float64 with NaN when one is
    NA), a dgeMatrix dense; the reducedDim knn a symmetric sparse matrix, UMAP dense."""
    classes = pd.read_csv(d / "assay_classes.csv", dtype=str)
    layers = {}
    for name, cls in zip(classes["assay"], classes["class"]):
        m = _mm_na(d / f"assay_{name}.mtx").T.tocsr()
        if cls == "dgeMatrix":
            m = np.asarray(m.todense())
        elif cls[0] in "ln" and not np.isnan(m.data).any():
            m = m.astype(bool)
        layers[name] = m
    x = layers.pop("logcounts")
    umap, _ = _embedding(d / "obsm_UMAP.csv")
    return x, layers, {"X_knn": sp.csc_matrix(scipy.io.mmread(str(d / "obsm_knn.mtx"))),
                       "X_umap": umap}


def _plain_values(path):
    """R's dump of a list's plain values (path, class, length, values) as uns holds them:
    length-1 vectors as scalars, longer ones as arrays, lists as dicts."""
    out = {}
    for line in path.read_text().splitlines():
        keys, cls, n, vals = line.split("\t")
        v = vals.split("|")
        conv = {"numeric": lambda s: np.float64(float(s)), "integer": lambda s: np.int32(int(s)),
                "logical": lambda s: np.bool_(s == "TRUE"), "character": str}[cls]
        if int(n) == 1:
            value = conv(v[0])
        elif cls == "character":
            value = np.array(v, dtype=object)
        else:
            value = np.array([conv(s) for s in v])
        node = out
        parts = keys.strip("/").split("/")
        for k in parts[:-1]:
            node = node.setdefault(k, {})
        node[parts[-1]] = value
    return out


def check_store(path, file, ds_id=None):
    ds_id = ds_id or ALL[file]["id"]
    name = ALL[file].get("name", ds_id)
    if ALL[file].get("modalities"):
        return check_modal_store(path, file, ds_id, name)
    store = ad.read_zarr(str(path))
    assert_adata_equal(store, oracle(file), dataset_id=ds_id, dataset_name=name)


def _other_modality(d, name, cells):
    """A Seurat assay (assay_<name>/: data, counts) or an SCE altExp (altexp_<name>/: its
    assays by class, X logcounts if present else counts else the first) as R dumped it."""
    md = d / f"assay_{name}"
    if md.exists():
        return ad.AnnData(X=_mm(md / "X.mtx").T.tocsr(), obs=cells, var=_frame(md, "var"),
                          layers={"counts": _mm(md / "counts.mtx").T.tocsr()}, dtype=np.float64)
    md = d / f"altexp_{name}"
    classes = pd.read_csv(md / "assay_classes.csv", dtype=str)
    assays = {}
    for a, cls, typ in zip(classes["assay"], classes["class"], classes["type"]):
        m = _mm(md / f"assay_{a}.mtx").T.tocsr()
        if cls == "matrix":   # a base matrix: dense, int32 if integer
            m = np.asarray(m.todense()).astype(np.int32 if typ == "integer" else np.float64)
        assays[a] = m
    names = list(assays)
    xname = next((n for n in ("logcounts", "counts") if n in assays), names[0])
    x = assays.pop(xname)
    return ad.AnnData(X=x, obs=cells, var=_frame(md, "var"), layers=assays, dtype=x.dtype)


def check_modal_store(path, file, ds_id, name):
    """An R object of several modalities (a Seurat object's assays, an SCE's main and
    alternative experiments) as a MuData store: the object's obs, obsm, obsp and uns global,
    each modality with its X, layers and var, the global var every modality's features in
    turn, each map naming the right rows."""
    e = ALL[file]
    whole = oracle(file)   # the default assay as one AnnData, with the object's parts
    d = RDS / e.get("oracle", f"{file}.oracle")
    st = test_mudata.Store(path)
    assert dict(st.root.attrs) == {"encoding-type": "MuData", "encoding-version": "0.1.0",
                                   "axis": 0}
    assert list(st.mods) == e["modalities"]
    glob = ad.AnnData(obs=st.obs, obsm=dict(st.obsm), obsp=dict(st.obsp), uns=dict(st.uns))
    want = ad.AnnData(obs=whole.obs, obsm=dict(whole.obsm), obsp=dict(whole.obsp),
                      uns=dict(whole.uns))
    assert_adata_equal(glob, want, dataset_id=ds_id, dataset_name=name)
    cells = pd.DataFrame(index=whole.obs_names)
    mods = {e["modalities"][0]: ad.AnnData(X=whole.X, obs=cells, var=whole.var,
                                           layers=dict(whole.layers), dtype=np.float64)}
    for name in e["modalities"][1:]:
        mods[name] = _other_modality(d, name, cells)
    offset = 0
    gpos = st.obs["cellucid_original_position"].to_numpy()
    for name, want_mod in mods.items():
        assert_adata_equal(st.mods[name], want_mod)
        mpos = st.mods[name].obs["cellucid_original_position"].to_numpy()
        # every assay holds every cell: global cell j is row obsmap[j] - 1 of the modality
        assert np.array_equal(mpos[st.obsmap[name].astype(np.int64) - 1], gpos), name
        n = want_mod.n_vars
        block = np.zeros(len(st.var), dtype=np.uint32)
        block[offset:offset + n] = np.arange(1, n + 1)
        assert np.array_equal(st.varmap[name], block), name
        assert list(st.var.index[offset:offset + n]) == list(want_mod.var_names), name
        offset += n
    assert offset == len(st.var)


def export(cfs, src, out):
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 0, describe(r)
    assert not refused_lines(r.stderr), describe(r)
    return r


@pytest.mark.parametrize("file", FILES)
def test_export_equals_r(file, cfs, tmp_path):
    e = ALL[file]
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(RDS / file, src / file)
    out = tmp_path / "out"
    r = export(cfs, src / file, out)
    check_store(out / f"{e['id']}.zarr", file)
    assert_catalog(out, [e["id"]])
    lines = left_out_lines(r.stderr)
    want = e.get("left_out", [])
    assert len(lines) == len(want), describe(r)
    for w, line in zip(want, lines):
        assert w in line, describe(r)


@pytest.mark.parametrize("name,make", [
    ("plain.rds", lambda raw, gz: raw),                  # saveRDS(compress = FALSE)'s bytes
    ("twice.rds.gz", lambda raw, gz: gzip.compress(gz)),  # a .gz of the gzip-compressed .rds
    ("b.rds.bz2", lambda raw, gz: bz2.compress(raw)),
    ("x.rda.xz", None),
])
def test_compressed_copies(name, make, cfs, tmp_path):
    """R's bytes of seurat.rds uncompressed, gzip'ed again, or bzip2'ed; and seurat.RData as
    .rda.xz: each equal to R's reading (a compressed one read from its decompressed copy in the
    export's work folder, which goes with it)."""
    src = tmp_path / "src"
    src.mkdir()
    gz = (RDS / "seurat.rds").read_bytes()
    if make is None:
        data, file = lzma.compress(gzip.decompress((RDS / "seurat.RData").read_bytes())), "seurat.RData"
    else:
        data, file = make(gzip.decompress(gz), gz), "seurat.rds"
    (src / name).write_bytes(data)
    out = tmp_path / "out"
    r = export(cfs, src / name, out)
    ds_id = name.split(".")[0]
    check_store(out / f"{ds_id}.zarr", file, ds_id)
    assert_catalog(out, [ds_id])
    assert not list(tmp_path.glob(".*work*")), "the work folder (and the copy) was left"


def _uncompressed(data):
    """R's serialized bytes without their compression layers (saveRDS(compress = FALSE)'s)."""
    while True:
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        elif data[:6] == b"\xfd7zXZ\x00":
            data = lzma.decompress(data)
        elif data[:3] == b"BZh":
            data = bz2.decompress(data)
        else:
            return data


# Vectors longer than 3 values go to the vector store (formats/r/rds.c), so that these small
# files are read in place (dims and version numbers stay in the tree, as under the real
# threshold of 8192).
IN_PLACE_ENV = "CELLUCID_FS_TEST_R_SINK_THRESHOLD"


@pytest.mark.parametrize("key", sorted(ALL))
def test_read_in_place_equals_r(key, cfs, tmp_path, monkeypatch):
    """Each fixture uncompressed (XDR, big-endian), its vectors left in the file and read from
    there by range as the store is read (the threshold lowered to 3 values): equal to R's
    reading, value for value; each single-cell object of a workspace (key file:object) too."""
    monkeypatch.setenv(IN_PLACE_ENV, "3")
    file = key.split(":")[0]
    src = tmp_path / file
    src.write_bytes(_uncompressed((RDS / file).read_bytes()))
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    # split.RData holds an object refused (so_bpcells: test_workspace_objects_export_equal_r)
    assert r.returncode == (2 if file == "split.RData" else 0), describe(r)
    check_store(out / f"{ALL[key]['id']}.zarr", key)


NATIVE = """
args <- commandArgs(TRUE)
obj <- readRDS(args[1])
con <- file(args[2], "wb"); serialize(obj, con, xdr = FALSE); close(con)
"""


@pytest.mark.parametrize("file", ["seurat.rds", "sce_types.rds", "seurat_v5.rds",
                                  "seurat_split.rds", "seurat_split_dense.rds"])
def test_native_binary_in_place_equals_r(file, cfs, tmp_path, monkeypatch):
    """The object as R's native little-endian binary (serialize(xdr = FALSE), written by R at
    test time), its vectors read in place: equal to R's reading."""
    if not shutil.which("Rscript"):
        pytest.skip("Rscript is not installed (apt-get install r-base-core)")
    native = tmp_path / file
    subprocess.run(["Rscript", "-e", NATIVE, str(RDS / file), str(native)], check=True,
                   capture_output=True, timeout=300)
    assert native.read_bytes()[:2] == b"B\n"
    monkeypatch.setenv(IN_PLACE_ENV, "3")
    out = tmp_path / "out"
    export(cfs, native, out)
    check_store(out / f"{ALL[file]['id']}.zarr", file)


# ---- large objects: memory bounded, the mount's background open ----

BIG_CELLS, BIG_GENES = 40000, 2000


@pytest.fixture(scope="module")
def big_seurat(tmp_path_factory):
    """A 40,000-cell Seurat object (4 million non-zeros in counts and data, pca and umap;
    about 110 MB uncompressed, 40 MB as saveRDS writes it), written by R at test time with
    tests/fixtures/make_big_seurat.R, and R's reading of it (cells.csv, genes.csv)."""
    if not shutil.which("Rscript"):
        pytest.skip("Rscript with SeuratObject is not installed "
                    "(apt-get install r-cran-seuratobject)")
    d = tmp_path_factory.mktemp("big_seurat")
    subprocess.run(["Rscript", str(FIXTURES_DIR / "make_big_seurat.R"), str(d / "big.rds"),
                    str(BIG_CELLS), str(BIG_GENES), str(d / "oracle")], check=True,
                   capture_output=True, timeout=600)
    return d / "big.rds", d / "oracle"


def check_big_store(store, oracle_dir):
    """The store against R's reading: every cell's and gene's sums of counts and data, the
    cluster factor, the score column and the embeddings' columns, value for value."""
    a = ad.read_zarr(str(store))
    cells = pd.read_csv(oracle_dir / "cells.csv", dtype=str).set_index("name")
    genes = pd.read_csv(oracle_dir / "genes.csv", dtype=str).set_index("name")
    num = lambda col: col.astype(float).to_numpy()
    assert a.shape == (len(cells), len(genes))
    order = pd.Index(a.obs_names).get_indexer(cells.index)
    assert (order >= 0).all()
    gorder = pd.Index(a.var_names).get_indexer(genes.index)
    assert (gorder >= 0).all()
    x, counts = a.X.tocsr(), a.layers["counts"].tocsr()
    np.testing.assert_allclose(np.asarray(counts.sum(axis=1)).ravel()[order], num(cells["counts"]),
                               rtol=1e-12)
    np.testing.assert_allclose(np.asarray(x.sum(axis=1)).ravel()[order], num(cells["data"]),
                               rtol=1e-12)
    np.testing.assert_allclose(np.asarray(counts.sum(axis=0)).ravel()[gorder], num(genes["counts"]),
                               rtol=1e-12)
    np.testing.assert_allclose(np.asarray(x.sum(axis=0)).ravel()[gorder], num(genes["data"]),
                               rtol=1e-12)
    assert list(a.obs["cluster"].cat.categories) == ["B", "T", "NK", "unused"]
    assert list(a.obs["cluster"].astype(str).to_numpy()[order]) == list(cells["cluster"])
    assert np.array_equal(a.obs["score"].to_numpy()[order], num(cells["score"]))
    for key, col, want in [("X_pca", 0, "PC_1"), ("X_pca", 29, "PC_30"), ("X_umap", 0, "UMAP_1"),
                           ("X_umap", 1, "UMAP_2")]:
        assert np.array_equal(a.obsm[key][order, col], num(cells[want])), key


def _peak_rss(argv):
    """Runs argv; its exit code, and the peak resident memory (VmHWM, bytes) of it and of each
    process it started, polled from /proc while they run (a reader worker exits with it)."""
    p = subprocess.Popen([str(a) for a in argv], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    peak = {}

    def children(pid):
        out = []
        for t in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []:
            try:
                out += [int(c) for c in open(f"/proc/{pid}/task/{t}/children").read().split()]
            except OSError:
                pass
        return out

    while p.poll() is None:
        todo = [p.pid]
        while todo:
            pid = todo.pop()
            todo += children(pid)
            try:
                for line in open(f"/proc/{pid}/status"):
                    if line.startswith("VmHWM"):
                        peak[pid] = max(peak.get(pid, 0), int(line.split()[1]) * 1024)
            except OSError:
                pass
        time.sleep(0.01)
    stderr = p.stderr.read().decode(errors="replace")
    return p.returncode, peak, stderr


def test_big_object_opens_in_bounded_memory(cfs, big_seurat, tmp_path):
    """The saveRDS (gzip) of a 40,000-cell object: export reads it from its decompressed copy
    in the work folder, its large vectors read in place there, so the reader worker's peak
    memory stays well below the vectors it serves (what holding them would take), and the store
    equals R's reading. The copy is gone after the export."""
    rds, oracle_dir = big_seurat
    raw = len(_uncompressed(rds.read_bytes()))
    out = tmp_path / "out"
    rc, peak, stderr = _peak_rss([cfs, "export", "-o", "memory=64M", rds, out])
    assert rc == 0, stderr
    assert not refused_lines(stderr) and not left_out_lines(stderr), stderr
    assert len(peak) >= 2, f"no reader worker was seen: {peak}"
    worker = max(v for pid, v in peak.items() if pid != min(peak))
    # A sanitizer's shadow memory and freed-memory quarantine are not the reader's: there only
    # the store is checked.
    if not os.environ.get("CELLUCID_FS_SANITIZER"):
        assert worker < raw / 2, f"the reader's peak {worker >> 20} MiB for {raw >> 20} MiB of vectors"
    check_big_store(out / "big.zarr", oracle_dir)
    assert not list(tmp_path.glob(".*work*")), "the work folder (and the copy) was left"


def test_mount_opens_r_sources_in_background(cfs, mounts, big_seurat, tmp_path):
    """A folder of R sources and an h5ad, mounted: the R sources open in the background
    (status.json shows them working while the h5ad is served), then each store equals its
    export. A compressed R source is read from its decompressed copy in the cache's unpacked/
    (every layer peeled: a .rds.gz of a gzip .rds too), counted against cache_size; an
    uncompressed one is read in place, with no copy."""
    rds, oracle_dir = big_seurat
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(rds, src / "big.rds")
    gz = (RDS / "seurat.rds").read_bytes()
    (src / "twice.rds.gz").write_bytes(gzip.compress(gz))
    (src / "plain.rds").write_bytes(gzip.decompress(gz))
    shutil.copy(FIXTURES_DIR / "h5ad" / "csr_f32.h5ad", src / "cells.h5ad")
    cache = tmp_path / "cache"
    m = mounts(src, cache=cache)
    first = {Path(s["source"]).name: s for s in m.status()["sources"]}
    assert first["big.rds"]["state"] == "working", first["big.rds"]
    assert first["big.rds"]["progress"]["element"] in ("opening", "decompressing"), first
    assert first["cells.h5ad"]["state"] == "ready", first["cells.h5ad"]
    h5 = ad.read_zarr(str(m.mnt / "cells.zarr"))     # served meanwhile
    assert h5.n_obs > 0
    status = m.wait_opened(timeout=300)
    assert {k: v["state"] for k, v in status.items()} == {
        "big.rds": "ready", "twice.rds.gz": "ready", "plain.rds": "ready", "cells.h5ad": "ready"}
    copies = sorted((cache / "unpacked").iterdir())
    assert len(copies) == 2 and all(p.suffix == ".copy" for p in copies), copies
    assert all(p.read_bytes()[:2] == b"X\n" for p in copies), "a copy is still compressed"
    sizes = sum(p.stat().st_size for p in copies)
    assert sizes == len(_uncompressed(rds.read_bytes())) + len(gzip.decompress(gz))
    work = m.status()["cache"]["work_bytes"]
    assert work >= sizes, f"the copies ({sizes} bytes) are not counted ({work})"
    check_big_store(m.mnt / "big.zarr", oracle_dir)
    check_store(m.mnt / "twice.zarr", "seurat.rds", "twice")
    check_store(m.mnt / "plain.zarr", "seurat.rds", "plain")
    out = tmp_path / "out"
    export(cfs, src, out)
    for ds in ("big", "twice", "plain", "cells"):
        a, b = tree_bytes(m.mnt / f"{ds}.zarr"), tree_bytes(out / f"{ds}.zarr")
        assert sorted(a) == sorted(b), ds
        assert [k for k in a if a[k] != b[k]] == [], f"{ds}: the mounted store differs"


def test_inspect_says_what_it_is(cfs):
    r = run_cfs(cfs, "inspect", "--json", RDS / "seurat_v5.rds", RDS / "sce.rds",
                RDS / "seurat_v3.rds", RDS / "seurat_v30.rds")
    assert r.returncode == 0, describe(r)
    docs = json.loads(r.stdout)["files"]
    assert [d["format"] for d in docs] == ["rds"] * 4, docs
    assert [d["version"] for d in docs] == [
        "SeuratObject 5.0.1, Assay5", "SingleCellExperiment 1.20.0",
        "Seurat 3.2.3, Assay", "Seurat 3.0.2, Assay"], docs


def test_mounted_equals_r(cfs, mounts, tmp_path):
    """A folder of R files, mounted: each store read through the mount equals R's reading."""
    src = tmp_path / "src"
    src.mkdir()
    files = ["seurat.rds", "seurat_xz.rds", "seurat_v5.rds", "seurat_adt.rds", "sce.rds",
             "frame.rds"]
    for f in files:
        shutil.copy(RDS / f, src / f)
    m = mounts(src)
    m.wait_opened()
    for f in files[:-1]:
        check_store(m.mnt / f"{ALL[f]['id']}.zarr", f)
    cat = json.loads((m.mnt / "datasets.json").read_text())
    assert [d["id"] for d in cat["datasets"]] == ["sce", "seurat", "seurat_adt", "seurat_v5",
                                                  "seurat_xz"], cat
    status = json.dumps(json.loads((m.mnt / "status.json").read_text()))
    assert "frame.rds" in status and "not a Seurat or SingleCellExperiment" in status, status


def test_assay_modalities_used_as_anndata(cfs, tmp_path):
    """Each assay of a two-assay Seurat store used the way people use an AnnData: a subset of
    its cells and features, copied, written and read back, holds the subset's values."""
    out = tmp_path / "out"
    export(cfs, RDS / "seurat_adt.rds", out)
    for name in ["RNA", "ADT"]:
        a = ad.read_zarr(str(out / "seurat_adt.zarr" / "mod" / name))
        cells = a.obs_names[[0, 3, 5, 7]]
        genes = a.var_names[: max(2, a.n_vars // 2)]
        sub = a[cells, genes].copy()
        assert sub.shape == (4, len(genes))
        full = a.X.toarray()
        rows = [list(a.obs_names).index(c) for c in cells]
        cols = [list(a.var_names).index(g) for g in genes]
        assert np.array_equal(sub.X.toarray(), full[np.ix_(rows, cols)]), name
        sub.write_h5ad(tmp_path / f"{name}.h5ad")
        back = ad.read_h5ad(tmp_path / f"{name}.h5ad")
        assert np.array_equal(back.X.toarray(), sub.X.toarray()), name
        assert np.array_equal(back.layers["counts"].toarray(), sub.layers["counts"].toarray())


@pytest.mark.parametrize("file,dense,keys", [
    ("seurat_split.rds", False, ["counts", None]),
    ("seurat_split_scaled.rds", False, ["counts", None, "scale.data"]),
    ("seurat_split_dense.rds", True, ["counts", None])])
def test_split_layers_joined_as_join_layers(file, dense, keys, cfs, tmp_path):
    """Each cell's row comes from the split layer holding it, and a feature its layer lacks is
    zero for its cells: sparse layers joined sparse, base matrices dense (float64, as R's join
    of them), split scale.data a dense layer when it covers every feature (the whole store
    equals R's joined layers: test_export_equals_r; read in place and spilled:
    test_read_in_place_equals_r, test_spilled_vectors_give_the_same_store)."""
    export(cfs, RDS / file, tmp_path / "out")
    a = ad.read_zarr(str(tmp_path / "out" / f"{file.split('.')[0]}.zarr"))
    order = np.argsort(a.obs["cellucid_original_position"].to_numpy())
    genes = list(a.var_names)
    lacking = [genes.index("Gene3"), genes.index("Gene9")]
    assert sorted(a.layers.keys()) == sorted(k for k in keys if k), a.layers.keys()
    for key in keys:
        m = (a.layers[key] if key else a.X)[order]
        assert sp.issparse(m) == (dense is False and key != "scale.data"), key
        x = np.asarray(m.toarray() if sp.issparse(m) else m)
        if not sp.issparse(m):
            assert x.dtype == np.float64, key
        # the odd cells are sample s1's, the even ones s2's, which lacks Gene3 and Gene9
        assert np.array_equal(x[1::2][:, lacking], np.zeros((len(x[1::2]), 2))), key
        assert np.nan_to_num(x[0::2][:, lacking]).any(), key
        assert np.nan_to_num(x[1::2]).any(), key


MIXED = """
suppressPackageStartupMessages(library(Matrix))
args <- commandArgs(TRUE)
so <- readRDS(args[1])
a5 <- so@assays$RNA   # an Assay5: its class is not defined here, so set with attr()
l <- attr(a5, "layers")
for (n in c("data.s2", "scale.data.s2")) l[[n]] <- as(l[[n]], "CsparseMatrix")
attr(a5, "layers") <- l
assays <- so@assays; assays$RNA <- a5
slot(so, "assays", check = FALSE) <- assays
saveRDS(so, args[2])
"""


def test_split_layers_sparse_and_dense_refused(cfs, tmp_path):
    """seurat_split_dense.rds with one data layer (and one scale.data layer) made a dgCMatrix
    (by R at test time): the assay is refused naming the layer, what is wrong and what to do;
    scale.data split that way is left out with the same reason, not the object refused."""
    if not shutil.which("Rscript"):
        pytest.skip("Rscript is not installed (apt-get install r-base-core)")
    src = tmp_path / "src"
    src.mkdir()
    subprocess.run(["Rscript", "-e", MIXED, str(RDS / "seurat_split_dense.rds"),
                    str(src / "mixed.rds")], check=True, capture_output=True, timeout=300)
    r = run_cfs(cfs, "export", src / "mixed.rds", tmp_path / "out")
    assert r.returncode == 2, describe(r)
    lines = refused_lines(r.stderr)
    assert len(lines) == 1 and (
        "the default assay 'RNA' of this Seurat object holds split layers; layer data.s2 is "
        "sparse where the first split layer is a dense matrix; run obj <- JoinLayers(obj) in R "
        "and save it again") in lines[0], describe(r)
    # the same with data and counts joined (as JoinLayers(obj, layers = c("data", "counts"))
    # leaves them): only scale.data is split, and it is left out
    fix = MIXED.replace("saveRDS(so, args[2])", """
a5 <- so@assays$RNA
j <- function(l) { m <- matrix(0, nrow(a5@features), nrow(a5@cells))
  for (n in grep(paste0("^", l, "[.]"), names(a5@layers), value = TRUE))
    m[a5@features[, n], a5@cells[, n]] <- as.matrix(a5@layers[[n]])
  m }
keep <- grep("^scale[.]data[.]", names(a5@layers), value = TRUE)
attr(a5, "layers") <- c(list(counts = j("counts"), data = j("data")), a5@layers[keep])
cm <- as.matrix(a5@cells)[, keep]; fm <- as.matrix(a5@features)[, keep]
attr(a5, "cells") <- new("LogMap", cbind(counts = TRUE, data = TRUE, cm))
attr(a5, "features") <- new("LogMap", cbind(counts = TRUE, data = TRUE, fm))
assays <- so@assays; assays$RNA <- a5
slot(so, "assays", check = FALSE) <- assays
saveRDS(so, args[2])""")
    subprocess.run(["Rscript", "-e", fix, str(RDS / "seurat_split_dense.rds"),
                    str(src / "mixed.rds")], check=True, capture_output=True, timeout=300)
    r = export(cfs, src / "mixed.rds", tmp_path / "out2")
    lines = left_out_lines(r.stderr)
    assert len(lines) == 1 and (
        "layers/scale.data: the default assay 'RNA' of this Seurat object holds split layers; "
        "layer scale.data.s2 is sparse where the first split layer is a dense matrix") in lines[0], \
        describe(r)


def test_not_single_cell_refused_one_line(cfs, tmp_path):
    """A plain data.frame in an .rds, and a workspace of other objects: one line each."""
    for src, want in [(RDS / "frame.rds", "frame.rds: refused: an R data.frame object, not a "
                                          "Seurat or SingleCellExperiment; "),
                      (FIXTURES_DIR / "r" / "two.RData",
                       "two.RData: refused: an R workspace holding a (data.frame), b "
                       "(dgCMatrix), none of them a Seurat or SingleCellExperiment object; ")]:
        out = tmp_path / f"out_{src.stem}"
        r = run_cfs(cfs, "export", src, out)
        assert r.returncode != 0, describe(r)
        lines = refused_lines(r.stderr)
        assert len(lines) == 1 and want in lines[0], describe(r)
        assert "convert it" in lines[0], lines[0]
        assert not list(out.glob("*.zarr")) if out.exists() else True


# ---------------------------------------------------------------------------------------------
# large vectors read by range (formats/r/rvectors.c): the fixtures are small, so the test hook
# CELLUCID_FS_TEST_R_SINK_THRESHOLD makes every vector of more than 8 values a "large" one

SPILL = "CELLUCID_FS_TEST_R_SINK_THRESHOLD"


@pytest.mark.parametrize("file", ["seurat.rds", "seurat_v5.rds", "sce.rds", "sce_t.rds",
                                  "seurat_adt.rds", "seurat_split.rds",
                                  "seurat_split_dense.rds", "seurat_split_scaled.rds"])
def test_spilled_vectors_give_the_same_store(file, cfs, tmp_path, monkeypatch):
    """Large vectors read by range from the file (or its decompressed copy) make the store the
    in-memory reading makes, byte for byte; and it still equals R's reading."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(RDS / file, src / file)
    export(cfs, src / file, tmp_path / "memory")
    monkeypatch.setenv(SPILL, "8")
    export(cfs, src / file, tmp_path / "spilled")
    assert tree_bytes(tmp_path / "spilled") == tree_bytes(tmp_path / "memory")
    check_store(tmp_path / "spilled" / f"{ALL[file]['id']}.zarr", file)


# ---------------------------------------------------------------------------------------------
# workspaces of several objects: each Seurat or SCE object is a dataset <file>-<object>


@pytest.mark.parametrize("workspace", sorted(WORKSPACES))
def test_workspace_objects_export_equal_r(workspace, cfs, tmp_path):
    """Each single-cell object of a workspace is exported as a store of its own, named
    <file>-<object>, equal to R's load() of it; an object that is none (mixed.RData's
    data.frame) is no store and no refusal; one that cannot be read (split.RData's so_bpcells,
    whose layers are on disk) is refused naming the object, and does not hide the others."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(RDS / workspace, src / workspace)
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src / workspace, out)
    keys = WORKSPACES[workspace]
    ids = [ALL[k]["id"] for k in keys]
    for k in keys:
        check_store(out / f"{ALL[k]['id']}.zarr", k)
    assert_catalog(out, ids)
    assert sorted(p.name for p in out.iterdir()) == sorted([f"{i}.zarr" for i in ids] +
                                                           ["datasets.json"])
    lines = left_out_lines(r.stderr)
    want = [w for k in keys for w in ALL[k].get("left_out", [])]
    assert len(lines) == len(want), describe(r)
    for w in want:
        assert any(w in line for line in lines), describe(r)
    refused = refused_lines(r.stderr)
    if workspace == "split.RData":
        assert r.returncode == 2, describe(r)
        assert refused == [f"cellucid-fs: {src / workspace} (object so_bpcells): refused: "
                           + BPCELLS_REFUSED], describe(r)
    else:
        assert r.returncode == 0 and not refused, describe(r)


def test_one_object_workspace_keeps_the_plain_name(cfs, tmp_path):
    """A workspace of one Seurat object is <file>.zarr, as an .rds of it would be."""
    out = tmp_path / "out"
    export(cfs, RDS / "seurat.RData", out)
    assert_catalog(out, ["seurat"])


def test_workspace_objects_mounted(cfs, mounts, tmp_path):
    """Mounted: a store and a catalog entry per object, each equal to R's reading; status.json
    names each one's source and object. A new source beside them leaves them as they were
    (same inodes: not opened again); a workspace rewritten with other objects serves those."""
    src = tmp_path / "src"
    src.mkdir()
    for f in ["both.rda", "mixed.RData", "split.RData", "seurat.rds"]:
        shutil.copy(RDS / f, src / f)
    m = mounts(src)
    m.wait_opened()     # R sources open in the background once the mount is up
    keys = [k for w in ["both.rda", "mixed.RData", "split.RData"] for k in WORKSPACES[w]]
    for k in keys:
        check_store(m.mnt / f"{ALL[k]['id']}.zarr", k)
    ids = sorted([ALL[k]["id"] for k in keys] + ["seurat"])
    assert [d["id"] for d in m.catalog()["datasets"]] == ids
    status = {(e["source"], e.get("object")): e for e in m.status()["sources"]}
    assert {k: e["id"] for k, e in status.items()} == {
        ("both.rda", "sce"): "both-sce", ("both.rda", "so"): "both-so",
        ("mixed.RData", "adt"): "mixed-adt", ("mixed.RData", "sce/alt"): "mixed-sce_alt",
        ("split.RData", "so_split"): "split-so_split", ("split.RData", "so_bpcells"): None,
        ("split.RData", "so"): "split-so",
        ("seurat.rds", None): "seurat"}, status
    assert "object" not in status[("seurat.rds", None)]
    assert status[("split.RData", "so_bpcells")]["state"] == "refused"
    assert "BPCells" in status[("split.RData", "so_bpcells")]["reason"]
    assert all(e["state"] == "ready" for k, e in status.items() if k[1] != "so_bpcells"), status

    ino = (m.mnt / "both-so.zarr").stat().st_ino
    shutil.copy(RDS / "sce.rds", src / "sce.rds")
    wait_for(lambda: "sce" in [d["id"] for d in m.catalog()["datasets"]], "sce.rds served")
    assert (m.mnt / "both-so.zarr").stat().st_ino == ino
    check_store(m.mnt / "both-so.zarr", "both.rda:so")

    shutil.copy(RDS / "both.rda", src / ".mixed.tmp")
    os.replace(src / ".mixed.tmp", src / "mixed.RData")
    wait_for(lambda: {"mixed-sce", "mixed-so"} <= {d["id"] for d in m.catalog()["datasets"]},
             "the rewritten workspace's objects served")
    cat = [d["id"] for d in m.catalog()["datasets"]]
    assert "mixed-adt" not in cat and "mixed-sce_alt" not in cat, cat
    assert not (m.mnt / "mixed-adt.zarr").exists()
    check_store(m.mnt / "mixed-so.zarr", "both.rda:so", "mixed-so")
    check_store(m.mnt / "mixed-sce.zarr", "both.rda:sce", "mixed-sce")


def test_inspect_lists_each_object(cfs):
    """inspect names every object of a workspace, its class and what it becomes: a dataset
    (its id and its whole description) or none (why not)."""
    r = run_cfs(cfs, "inspect", "--json", RDS / "mixed.RData")
    assert r.returncode == 0, describe(r)
    objs = json.loads(r.stdout)["files"][0]["objects"]
    assert [(o["name"], o["class"], o.get("id")) for o in objs] == [
        ("adt", "Seurat", "mixed-adt"), ("meta", "data.frame", None),
        ("sce/alt", "SingleCellExperiment", "mixed-sce_alt")], objs
    assert objs[1]["not_a_dataset"] == "not a Seurat or SingleCellExperiment object"
    assert "dataset" not in objs[1]
    adt, sce = objs[0]["dataset"], objs[2]["dataset"]
    assert adt["version"] == "SeuratObject 4.1.3, Assay"
    assert [m["name"] for m in adt["modalities"]] == ["RNA", "ADT"]
    assert sce["version"] == "SingleCellExperiment 1.20.0" and sce["n_obs"] == 10
    assert [m["name"] for m in sce["modalities"]] == ["main", "ADT"]
    text = run_cfs(cfs, "inspect", RDS / "mixed.RData", RDS / "split.RData")
    assert text.returncode == 2, describe(text)     # split.RData's so_bpcells is refused
    lines = text.stdout.splitlines()
    for want in ["  object adt (Seurat) -> mixed-adt.zarr",
                 "  object meta (data.frame): not a dataset: not a Seurat or "
                 "SingleCellExperiment object",
                 "  object sce/alt (SingleCellExperiment) -> mixed-sce_alt.zarr",
                 "  object so_split (Seurat) -> split-so_split.zarr",
                 "  object so_bpcells (Seurat)", "  object so (Seurat) -> split-so.zarr"]:
        assert want in lines, text.stdout
    assert any(l.startswith("    refused: the default assay 'RNA'") for l in lines), text.stdout
