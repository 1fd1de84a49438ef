"""Loom inputs (formats/hdf5/loom.c) end to end: `cellucid-fs export` of every fixture of
tests/fixtures/loom (written by tests/fixtures/make_loom_fixtures.py) reads with
anndata.read_zarr equal, value for value, to what anndata.read_loom and loompy read from the
file (or, where loompy cannot read it, to h5py's reading of the loom spec); bad files are
refused or have their part left out with the reason; `inspect --json` reports the loom version.

Where the store deliberately differs from anndata.read_loom, the oracle is adjusted and the test
says so:
  - X keeps the file's dtype (anndata.read_loom casts X to float32 by default; loompy does not),
    and X/layers are dense as the file is (read_loom(sparse=True) makes them csr);
  - gene names are made unique as anndata's var_names_make_unique does;
  - col_graphs/row_graphs (loompy's) become obsp/varp, global attributes (loompy's attrs) uns;
  - SCENIC's compound col attrs become obsm entries (read_loom cannot read them at all).
"""

import html
import json
import shutil
import warnings
from pathlib import Path

import anndata as ad
import h5py
import loompy
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from conftest import (
    FIXTURES_DIR,
    NOT_IN_CATALOG,
    assert_adata_equal,
    assert_catalog,
    check_chunks,
    check_consolidated,
    describe,
    expected_id,
    left_out_lines,
    load_manifest,
    not_in_catalog_lines,
    refused_lines,
    run_cfs,
)

warnings.simplefilter("ignore")
pytestmark = pytest.mark.filterwarnings("ignore")

LOOM_DIR = FIXTURES_DIR / "loom"
MANIFEST = load_manifest("loom", "make_loom_fixtures.py")
GOOD = MANIFEST["fixtures"]
BAD = MANIFEST["bad"]
GOOD_NAMES = sorted(GOOD)
LEFT_OUT_NAMES = sorted(k for k, v in BAD.items() if v["expect"] == "left_out")
REFUSED_NAMES = sorted(k for k, v in BAD.items() if v["expect"] == "refused")


def loom_path(name):
    e = GOOD.get(name) or BAD[name]
    return LOOM_DIR / e["file"]


def loom_id(name):
    return expected_id(Path(loom_path(name)).name[: -len(".loom")])


@pytest.fixture(scope="session")
def exported(cfs, tmp_path_factory):
    """exported(name, *opts) -> (OUT, CompletedProcess) of `cellucid-fs export FILE OUT`."""
    cache = {}

    def get(name, *opts):
        key = (name, opts)
        if key not in cache:
            out = tmp_path_factory.mktemp("loom-" + name) / "out"
            args = ["export", *opts, loom_path(name), out]
            cache[key] = (out, run_cfs(cfs, *args))
        return cache[key]

    return get


def read_store(out, name):
    return ad.read_zarr(str(Path(out) / f"{loom_id(name)}.zarr"))


# ---------------------------------------------------------------------------------------------
# oracles


def _dense(x):
    return x.toarray() if sp.issparse(x) else np.asarray(x)


def loom_strings(values):
    """What loompy makes of a string attribute: text, XML character references unescaped."""
    out = []
    for v in np.asarray(values).ravel():
        out.append(html.unescape(v.decode("utf-8") if isinstance(v, bytes) else str(v)))
    return np.array(out, dtype=object)


def loompy_graphs(p, validate=True):
    with loompy.connect(str(p), "r", validate=validate) as lc:
        obsp = {k: sp.csr_matrix(lc.col_graphs[k].tocsr()) for k in lc.col_graphs.keys()}
        varp = {k: sp.csr_matrix(lc.row_graphs[k].tocsr()) for k in lc.row_graphs.keys()}
        uns = {k: v for k, v in lc.attrs.items()}
    return obsp, varp, uns


def h5py_graphs(f, group, n):
    out = {}
    if group in f:
        for k, g in f[group].items():
            out[k] = sp.coo_matrix((g["w"][()], (g["a"][()], g["b"][()])), shape=(n, n)).tocsr()
    return out


def native_x(p, swapped=False):
    """X as the file stores it (layer 'spliced' if any, as anndata.read_loom picks it)."""
    with h5py.File(p, "r") as f:
        src = f["layers/spliced"] if "layers" in f and "spliced" in f["layers"] else f["matrix"]
        m = src[()]
    return m if swapped else m.T


def read_loom_oracle(name, tmp_path):
    e = GOOD.get(name) or BAD[name]
    o = e["oracle"]
    p = loom_path(name)
    args = dict(o.get("args", {}))
    validate = args.get("validate", True)
    src = p
    if o["kind"] == "read_loom_drop":
        src = Path(tmp_path) / ("oracle-" + p.name)
        shutil.copyfile(p, src)
        with h5py.File(src, "r+") as f:
            for el in o["elements"]:
                del f[el]
    a = ad.read_loom(str(src), **args)
    # anndata.read_loom casts X to float32; the store keeps the file's dtype (values must agree)
    x = native_x(p)
    assert np.array_equal(_dense(a.X), x.astype(np.float32)), "read_loom's X is not the file's"
    a.X = x
    for k in list(a.layers.keys()):
        a.layers[k] = _dense(a.layers[k])
    if o.get("make_unique"):
        a.var_names_make_unique()
    if o.get("graphs") == "h5py":
        with h5py.File(p, "r") as f:
            obsp = h5py_graphs(f, "col_edges", a.n_obs)
            varp = h5py_graphs(f, "row_edges", a.n_vars)
        uns = loompy_graphs(src, validate)[2]
    else:
        obsp, varp, uns = loompy_graphs(src, validate)
    for k, v in obsp.items():
        a.obsp[k] = v
    for k, v in varp.items():
        a.varp[k] = v
    a.uns = uns
    return plain_strings(a)


def _plain(values):
    return [str(x) if isinstance(x, str) else x for x in values]


def plain_strings(a):
    """loompy hands out numpy.str_ for strings without a character reference (html.unescape
    returns its argument then) and str for the others; anndata.read_zarr gives str."""
    for df in (a.obs, a.var):
        df.index = pd.Index(_plain(df.index), dtype=object, name=df.index.name)
        for c in df.columns:
            if df[c].dtype == object:
                df[c] = pd.array(_plain(df[c]), dtype=object)
    for k, v in a.uns.items():
        if isinstance(v, np.ndarray) and v.dtype == object:
            a.uns[k] = np.array(_plain(v.ravel()), dtype=object).reshape(v.shape)
    return a


def h5py_axis(group, index_name, n):
    """A loom attribute group read by the spec: (n,), (n,1), (1,n) -> column; (n,k), (k,n) -> m."""
    cols, multi = {}, {}
    for k, d in group.items():
        v = d[()]
        if v.dtype.kind in "SO":
            v = loom_strings(v).reshape(v.shape)
        if v.ndim == 2 and 1 in v.shape:
            v = v.reshape(-1)
        if v.ndim == 1:
            cols[k] = v
        elif v.shape[0] == n:
            multi[k] = v
        else:
            multi[k] = np.ascontiguousarray(v.T)
    index = cols.pop(index_name)
    df = pd.DataFrame(cols, index=pd.Index(index, name=index_name))
    return df, multi


def h5py_oracle(name):
    e = GOOD[name]
    swapped = e["oracle"].get("swapped", False)
    p = loom_path(name)
    with h5py.File(p, "r") as f:
        x = f["matrix"][()]
        x = x if swapped else x.T
        n_obs, n_vars = x.shape
        layers = {k: (v[()] if swapped else v[()].T) for k, v in f.get("layers", {}).items()}
        obs, obsm = h5py_axis(f["col_attrs"], "CellID", n_obs)
        var, varm = h5py_axis(f["row_attrs"], "Gene", n_vars)
        uns = {}
        if "attrs" in f:
            uns = {k: f["attrs"][k][()] for k in f["attrs"]}
        else:
            uns = {k: v for k, v in f.attrs.items()}
        uns = {k: (str(loom_strings([v])[0]) if isinstance(v, (bytes, str)) else v)
               for k, v in uns.items()}
        obsp = h5py_graphs(f, "col_graphs", n_obs)
        varp = h5py_graphs(f, "row_graphs", n_vars)
    a = ad.AnnData(x, obs=obs, var=var, obsm=obsm, varm=varm, layers=layers, uns=uns,
                   obsp=obsp, varp=varp, dtype=x.dtype)
    return a


def scenic_extras(p, a):
    """SCENIC's compound columns, as the store serves them."""
    with h5py.File(p, "r") as f:
        ca, ra = f["col_attrs"], f["row_attrs"]
        emb = ca["Embedding"][()]
        a.obsm["Embedding"] = np.column_stack([emb["_X"], emb["_Y"]])
        ex, ey = ca["Embeddings_X"][()], ca["Embeddings_Y"][()]
        for fld in ex.dtype.names:
            a.obsm[f"Embeddings_{fld}"] = np.column_stack([ex[fld], ey[fld]])
        for key in ("RegulonsAUC", "Clusterings"):
            rec = ca[key][()]
            a.obsm[key] = pd.DataFrame({fld: rec[fld] for fld in rec.dtype.names},
                                       index=a.obs_names.copy())
        rec = ra["Regulons"][()]
        a.varm["Regulons"] = pd.DataFrame({fld: rec[fld] for fld in rec.dtype.names},
                                          index=a.var_names.copy())
    return a


@pytest.fixture(scope="session")
def oracle(tmp_path_factory):
    cache = {}
    d = tmp_path_factory.mktemp("loom-oracle")

    def get(name):
        if name not in cache:
            e = GOOD.get(name) or BAD[name]
            kind = e["oracle"]["kind"]
            a = h5py_oracle(name) if kind == "h5py" else read_loom_oracle(name, d)
            if name == "scenic":
                a = scenic_extras(loom_path(name), a)
            cache[name] = a
        return cache[name]

    return get


def dataset_name(src, name):
    t = src.uns.get("title")
    return str(t) if isinstance(t, str) else Path(loom_path(name)).name[: -len(".loom")]


# ---------------------------------------------------------------------------------------------
# harness: the oracles read what the generator wrote


def test_harness_oracles_read():
    assert set(GOOD_NAMES) >= {"loompy3", "anndata_written", "v2_fixed_ascii", "old_edges",
                               "scenic", "dup_genes", "swapped", "r_style"}
    for name in GOOD_NAMES + sorted(BAD):
        assert loom_path(name).stat().st_size < 100 * 1024, name


def test_harness_loompy3_is_loompy_30(tmp_path):
    p = loom_path("loompy3")
    with h5py.File(p, "r") as f:
        assert f["attrs/LOOM_SPEC_VERSION"][()].decode() == "3.0.0"
        assert f["row_attrs/Gene"].dtype.kind == "O"
    with h5py.File(loom_path("v2_fixed_ascii"), "r") as f:
        assert f.attrs["LOOM_SPEC_VERSION"] == b"2.0.1"
        assert f["row_attrs/Gene"].dtype.kind == "S"
        assert b"&#945;" in f["row_attrs/Gene"][()].tolist()[1]


# ---------------------------------------------------------------------------------------------
# every good fixture


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_export_equals_loom_readers(name, exported, oracle):
    out, r = exported(name)
    assert r.returncode == 0, describe(r)
    expect_left = GOOD[name].get("left_out", {})
    got_left = left_out_lines(r.stderr)
    assert len(got_left) == len(expect_left), describe(r)
    src = oracle(name)
    store = read_store(out, name)
    assert_adata_equal(store, src, dataset_id=loom_id(name), dataset_name=dataset_name(src, name))


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_store_structure(name, exported):
    out, r = exported(name)
    assert r.returncode == 0, describe(r)
    store = Path(out) / f"{loom_id(name)}.zarr"
    check_consolidated(store)
    check_chunks(store)


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_catalog_lists_drawable(name, exported):
    out, r = exported(name)
    assert r.returncode == 0, describe(r)
    if GOOD[name]["drawable"]:
        assert_catalog(out, [loom_id(name)])
        assert not not_in_catalog_lines(r.stderr), describe(r)
    else:
        assert_catalog(out, [], stores=[loom_id(name)])
        lines = not_in_catalog_lines(r.stderr)
        assert lines == [f"cellucid-fs: {loom_path(name)}: {NOT_IN_CATALOG}"], describe(r)


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_inspect_reports_loom_version(name, cfs):
    r = run_cfs(cfs, "inspect", "--json", loom_path(name))
    assert r.returncode == 0, describe(r)
    doc = json.loads(r.stdout)["files"][0]
    assert doc["format"] == "loom"
    assert doc["version"] == GOOD[name]["version"]
    assert doc["refused"] is None
    with h5py.File(loom_path(name), "r") as f:
        shape = f["matrix"].shape
    swapped = GOOD[name]["oracle"].get("swapped", False)
    assert (doc["n_obs"], doc["n_vars"]) == (shape if swapped else shape[::-1])
    assert doc["X"]["encoding"] == "array"
    left = {x["element"]: x["reason"] for x in doc["left_out"]}
    assert left == GOOD[name].get("left_out", {})


# ---------------------------------------------------------------------------------------------
# details worth their own assertion


def test_x_is_spliced_and_matrix_a_layer(exported):
    """anndata.read_loom's X_name='spliced': X is the spliced layer, the main matrix 'matrix'."""
    out, _ = exported("loompy3", "-o", "order=original")
    store = read_store(out, "loompy3")
    assert "cellucid_original_position" not in store.obs.columns
    with h5py.File(loom_path("loompy3"), "r") as f:
        assert store.X.dtype == np.uint16
        assert np.array_equal(store.X, f["layers/spliced"][()].T)
        assert np.array_equal(store.layers["matrix"], f["matrix"][()].T)
        assert np.array_equal(store.layers["unspliced"], f["layers/unspliced"][()].T)


def test_order_original_is_the_file_transposed(exported):
    out, r = exported("v2_fixed_ascii", "-o", "order=original")
    assert r.returncode == 0, describe(r)
    store = read_store(out, "v2_fixed_ascii")
    with h5py.File(loom_path("v2_fixed_ascii"), "r") as f:
        assert store.X.dtype == np.int32
        assert np.array_equal(store.X, f["matrix"][()].T)
        assert np.array_equal(store.layers["log"], f["layers/log"][()].T)
        assert list(store.obs_names) == [x.decode() for x in f["col_attrs/CellID"][()]]
        assert np.array_equal(store.obsm["X_tsne"], f["col_attrs/X_tsne"][()])


def test_index_columns_as_anndata(exported):
    """CellID / Gene become the index (named so) and are not kept as columns."""
    out, _ = exported("loompy3")
    store = read_store(out, "loompy3")
    assert store.obs.index.name == "CellID" and "CellID" not in store.obs.columns
    assert store.var.index.name == "Gene" and "Gene" not in store.var.columns
    assert "Accession" in store.var.columns
    out, _ = exported("anndata_written")
    store = read_store(out, "anndata_written")
    assert store.obs.index.name == "obs_names" and list(store.obs_names[:1]) != ["0"]
    assert store.var.index.name == "var_names"


def test_entities_unescaped(exported):
    out, _ = exported("v2_fixed_ascii", "-o", "order=original")
    store = read_store(out, "v2_fixed_ascii")
    assert list(store.var_names[:3]) == ["GENE0", "Cd\u03b1", "HLA-DRB1&"]
    assert store.obs["ClusterName"][0] == "\u03b2-cells"
    assert store.uns["title"] == "Caf\u00e9 & cells"
    out, _ = exported("loompy3", "-o", "order=original")
    store = read_store(out, "loompy3")
    assert set(store.obs["ClusterName"]) == {"T & NK", "B\u00f6cells", "R&D", "Mono"}
    assert list(store.uns["tags"]) == ["alpha", "beta\u03b3"]


def test_unescape_matches_html_unescape(cfs, tmp_path):
    """The reader's unescaping is Python's html.unescape (what loompy applies) for numeric
    references and the entity names that may stand without ';'."""
    cases = ["&#128;&#0;&#x110000;&#xD800;&#1;", "&amp&ampx&ltx &#65&#x41;x&#;&#x;",
             "&eacute;&Eacute&copy2&AMP;&QUOT &apos; & ;&", "a&#12345678901234567890;b",
             "&#x1F600; &#65536; &#xFFFE; &#xFDD0; &#x9F; &#13;", "plain", "&nbsp&iquest;",
             "&" + "a" * 40 + ";", "caf\u00e9&eacute", "&#x0; &#0000065; &Agrave;x&Agravex"]
    p = tmp_path / "entities.loom"
    n = len(cases)
    with h5py.File(p, "w") as f:
        f["matrix"] = np.ones((2, n), dtype=np.float32)
        f.create_group("layers")
        f.create_group("row_attrs")["Gene"] = np.array([b"g0", b"g1"])
        ca = f.create_group("col_attrs")
        ca.create_dataset("CellID", data=[f"c{i}" for i in range(n)], dtype=h5py.string_dtype())
        ca.create_dataset("text", data=cases, dtype=h5py.string_dtype())
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", "-o", "order=original", p, out)
    assert r.returncode == 0, describe(r)
    store = ad.read_zarr(str(out / "entities.zarr"))
    assert list(store.obs["text"]) == [html.unescape(c) for c in cases]


def test_scenic_embeddings(exported):
    out, _ = exported("scenic", "-o", "order=original")
    store = read_store(out, "scenic")
    with h5py.File(loom_path("scenic"), "r") as f:
        emb = f["col_attrs/Embedding"][()]
        ex, ey = f["col_attrs/Embeddings_X"][()], f["col_attrs/Embeddings_Y"][()]
    assert store.obsm["Embedding"].shape == (store.n_obs, 2)
    assert np.array_equal(store.obsm["Embedding"][:, 0], emb["_X"])
    assert np.array_equal(store.obsm["Embedding"][:, 1], emb["_Y"])
    assert sorted(k for k in store.obsm if k.startswith("Embeddings_")) == \
        sorted(f"Embeddings_{i}" for i in ex.dtype.names)
    assert np.array_equal(store.obsm["Embeddings_1"], np.column_stack([ex["1"], ey["1"]]))
    assert list(store.obsm["RegulonsAUC"].columns) == ["Reg1(+)", "Reg2(+)"]
    assert store.obsm["RegulonsAUC"]["Reg1(+)"].dtype == np.float32
    assert store.varm["Regulons"]["Reg2(+)"].dtype == np.int32


def test_graphs_sum_duplicate_edges(exported):
    out, _ = exported("loompy3", "-o", "order=original")
    store = read_store(out, "loompy3")
    with h5py.File(loom_path("loompy3"), "r") as f:
        g = f["col_graphs/knn"]
        a, b, w = g["a"][()], g["b"][()], g["w"][()]
    pairs = len(set(zip(a.tolist(), b.tolist())))
    assert len(a) > pairs  # the fixture repeats edges
    m = store.obsp["knn"]
    assert sp.issparse(m) and m.shape == (store.n_obs, store.n_obs) and m.dtype == np.float32
    assert m.nnz == pairs
    expect = sp.coo_matrix((w, (a, b)), shape=m.shape).toarray()
    assert np.array_equal(m.toarray(), expect)


def test_old_edges_become_obsp(exported):
    out, _ = exported("old_edges")
    store = read_store(out, "old_edges")
    assert list(store.obsp.keys()) == ["KNN"] and list(store.varp.keys()) == ["coexp"]
    assert "layers" not in store.uns and len(store.layers) == 0


def test_r_style_embedding_transposed(exported):
    out, _ = exported("r_style", "-o", "order=original")
    store = read_store(out, "r_style")
    with h5py.File(loom_path("r_style"), "r") as f:
        assert np.array_equal(store.obsm["umap"], f["col_attrs/umap"][()].T)
        assert np.array_equal(store.obs["nCount_RNA"].to_numpy(), f["col_attrs/nCount_RNA"][0])
    assert "nCount_RNA" not in store.obsm


def test_swapped_matrix_read_cells_by_genes(exported):
    out, r = exported("swapped", "-o", "order=original")
    assert r.returncode == 0 and not left_out_lines(r.stderr), describe(r)
    store = read_store(out, "swapped")
    with h5py.File(loom_path("swapped"), "r") as f:
        assert store.shape == f["matrix"].shape == (30, 20)
        assert np.array_equal(store.X, f["matrix"][()])
        assert np.array_equal(store.layers["counts"], f["layers/counts"][()])


def test_duplicate_genes_made_unique(exported, oracle):
    out, r = exported("dup_genes")
    assert r.returncode == 0, describe(r)
    store = read_store(out, "dup_genes")
    a = ad.read_loom(str(loom_path("dup_genes")))
    assert not a.var_names.is_unique
    a.var_names_make_unique()
    assert list(store.var_names) == list(a.var_names)
    assert store.var_names.is_unique
    (el, reason), = GOOD["dup_genes"]["left_out"].items()
    lines = left_out_lines(r.stderr)
    assert lines == [f"cellucid-fs: {loom_path('dup_genes')}: left out {el}: {reason}"], describe(r)


def test_content_not_name_decides(cfs, tmp_path):
    """A loom named .h5 (or with no extension) is read as loom; probing never uses the name."""
    for fname in ("atlas.h5", "atlas"):
        p = tmp_path / fname
        shutil.copyfile(loom_path("loompy3"), p)
        r = run_cfs(cfs, "inspect", "--json", p)
        assert r.returncode == 0, describe(r)
        doc = json.loads(r.stdout)["files"][0]
        assert (doc["format"], doc["version"]) == ("loom", "loom 3.0.0")


def test_folder_export_catalog(cfs, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in GOOD_NAMES:
        shutil.copyfile(loom_path(name), src / GOOD[name]["file"])
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 0, describe(r)
    drawable = [loom_id(n) for n in GOOD_NAMES if GOOD[n]["drawable"]]
    assert_catalog(out, drawable, stores=[loom_id(n) for n in GOOD_NAMES])


# ---------------------------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize("name", LEFT_OUT_NAMES)
def test_bad_left_out_with_reason(name, exported, oracle):
    out, r = exported(name)
    assert r.returncode == 0, describe(r)
    expect = [f"cellucid-fs: {loom_path(name)}: left out {el}: {reason}"
              for el, reason in BAD[name]["left_out"].items()]
    assert sorted(left_out_lines(r.stderr)) == sorted(expect), describe(r)
    assert not refused_lines(r.stderr)
    store = ad.read_zarr(str(Path(out) / f"{loom_id(name)}.zarr"))
    src = oracle(name)
    assert_adata_equal(store, src, dataset_id=loom_id(name), dataset_name=dataset_name(src, name))


@pytest.mark.parametrize("name", LEFT_OUT_NAMES)
def test_bad_left_out_in_inspect(name, cfs):
    r = run_cfs(cfs, "inspect", "--json", loom_path(name))
    assert r.returncode == 0, describe(r)
    doc = json.loads(r.stdout)["files"][0]
    assert doc["version"] == BAD[name]["version"]
    assert {x["element"]: x["reason"] for x in doc["left_out"]} == BAD[name]["left_out"]


@pytest.mark.parametrize("name", REFUSED_NAMES)
def test_bad_refused_one_line(name, cfs, tmp_path):
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", loom_path(name), out)
    assert r.returncode == 2, describe(r)
    lines = refused_lines(r.stderr)
    expect = f"cellucid-fs: {loom_path(name)}: refused: {BAD[name]['refusal']}"
    assert lines == [expect], describe(r)
    assert "Traceback" not in r.stderr and "HDF5-DIAG" not in r.stderr
    r = run_cfs(cfs, "inspect", "--json", loom_path(name))
    assert r.returncode == 2, describe(r)
    doc = json.loads(r.stdout)["files"][0]
    assert doc["refused"] == BAD[name]["refusal"]


def test_bad_files_do_not_stop_a_folder(cfs, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ["loompy3"] + sorted(BAD):
        shutil.copyfile(loom_path(name), src / loom_path(name).name)
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 2, describe(r)
    assert len(refused_lines(r.stderr)) == len(REFUSED_NAMES), describe(r)
    ids = ["loompy3"] + [loom_id(n) for n in LEFT_OUT_NAMES]
    assert_catalog(out, ids)
