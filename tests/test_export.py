"""`cellucid-fs export` end to end: every good fixture's store reads (anndata.read_zarr) equal to
the source (anndata.read_h5ad, or the fixture's documented h5py-based oracle), and the store
follows docs/design.md §4 / docs/cli-contract.md (consolidated metadata, no chunk holes, codecs,
catalog, ids, stable bytes, options, OUT handling, sources untouched).

The first block ("harness") checks the comparison itself and needs no binary."""

import json
import os
import shutil
import warnings

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from conftest import (
    GOOD,
    GOOD_DIR,
    GOOD_NAMES,
    BAD_DIR,
    assert_adata_equal,
    assert_catalog,
    check_chunks,
    check_consolidated,
    describe,
    expected_id,
    fixture_id,
    fixture_name,
    good_path,
    in_catalog,
    iter_arrays,
    leftover_temp,
    NOT_IN_CATALOG,
    not_in_catalog_lines,
    left_out_lines,
    refused_lines,
    run_cfs,
    snapshot,
    store_files,
    strip_format_ext,
    tree_bytes,
)

warnings.simplefilter("ignore")
pytestmark = pytest.mark.filterwarnings("ignore")


def read_store(out, dataset_id):
    return ad.read_zarr(str(out / f"{dataset_id}.zarr"))


# ---------------------------------------------------------------------------------------------
# harness self-tests (no binary): the oracle reads, and assert_adata_equal is neither blind nor
# too strict


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_harness_anndata_zarr_roundtrip_equal(name, oracle, tmp_path):
    """anndata's own write_zarr -> read_zarr of every fixture passes assert_adata_equal."""
    src = oracle(name)
    src.write_zarr(str(tmp_path / "rt.zarr"))
    assert_adata_equal(ad.read_zarr(str(tmp_path / "rt.zarr")), src)


def _permuted_gene_major(src, seed=0):
    """What a priority-ordered, gene-major store holds: cells permuted (with
    cellucid_original_position), X/layers/raw.X sparse as csc."""
    n = src.n_obs
    order = np.random.default_rng(seed).permutation(n)

    def rows(x):
        if sp.issparse(x):
            return sp.csc_matrix(sp.csr_matrix(x)[order])
        if isinstance(x, pd.DataFrame):
            return x.iloc[order]
        return np.asarray(x)[order]

    def both(x):
        if sp.issparse(x):
            return sp.csr_matrix(sp.csr_matrix(x)[order][:, order])
        return np.asarray(x)[order][:, order]

    obs = src.obs.iloc[order].copy()
    obs["cellucid_original_position"] = order.astype(np.int64)
    raw = None
    if src.raw is not None:
        raw = {"X": rows(src.raw.X), "var": src.raw.var.copy(), "varm": dict(src.raw.varm)}
    X = None if src.X is None else rows(src.X)
    return ad.AnnData(
        X=X, obs=obs, var=src.var.copy(), uns=dict(src.uns),
        obsm={k: rows(v) for k, v in src.obsm.items()}, varm=dict(src.varm),
        layers={k: rows(v) for k, v in src.layers.items()},
        obsp={k: both(v) for k, v in src.obsp.items()}, varp=dict(src.varp),
        raw=raw, dtype=None if X is None else X.dtype,
    )


@pytest.mark.parametrize("name", ["raw_layers", "obsm_varm_p", "categoricals", "single_cell", "no_x", "dtypes"])
def test_harness_priority_order_undone(name, oracle, tmp_path):
    src = oracle(name)
    perm = _permuted_gene_major(src, seed=3)
    perm.write_zarr(str(tmp_path / "p.zarr"))
    assert_adata_equal(ad.read_zarr(str(tmp_path / "p.zarr")), src)


def _perturbations():
    def value(a):
        x = a.X.copy()
        if sp.issparse(x):
            x.data[0] = x.data[0] + 1
        else:
            x[1, 1] = x[1, 1] + 1  # [0, 0] is NaN
        a.X = x

    def dtype(a):
        a.obs["score"] = a.obs["score"].astype(np.float32)

    def cat_order(a):
        a.obs["cluster"] = a.obs["cluster"].cat.reorder_categories(list(a.obs["cluster"].cat.categories)[::-1])

    def cat_ordered_flag(a):
        a.obs["cluster"] = a.obs["cluster"].cat.as_ordered()

    def obsm_value(a):
        a.obsm["X_umap"][3, 1] = 99.0

    def uns_value(a):
        a.uns["title"] = "changed"

    def uns_extra(a):
        a.uns["extra"] = 1

    def obs_name(a):
        names = list(a.obs_names)
        names[2] = "renamed"
        a.obs_names = names

    def column_order(a):
        a.obs = a.obs[list(a.obs.columns)[::-1]]

    def x_sparse(a):
        a.X = sp.csr_matrix(a.X)

    def nan_to_zero(a):
        x = a.X.copy()
        x[np.isnan(x)] = 0
        a.X = x

    def negative_zero(a):
        x = a.X.copy()
        x[3, 0] = -0.0
        a.X = x

    def drop_column(a):
        del a.obs["score"]

    return {f.__name__: f for f in (value, dtype, cat_order, cat_ordered_flag, obsm_value, uns_value, uns_extra,
                                    obs_name, column_order, x_sparse, nan_to_zero, negative_zero, drop_column)}


@pytest.mark.parametrize("what", sorted(_perturbations()))
def test_harness_detects_differences(what, oracle):
    src = oracle("dense_f32")
    changed = src.copy()
    _perturbations()[what](changed)
    with pytest.raises(AssertionError):
        assert_adata_equal(changed, src)


def test_harness_detects_category_and_nullable_changes(oracle):
    src = oracle("categoricals")
    a = src.copy()
    a.obs["int_cats"] = a.obs["int_cats"].cat.rename_categories([str(c) for c in a.obs["int_cats"].cat.categories])
    with pytest.raises(AssertionError):
        assert_adata_equal(a, src)
    src = oracle("nullable")
    a = src.copy()
    a.obs["n_int64"] = a.obs["n_int64"].fillna(0)
    with pytest.raises(AssertionError):
        assert_adata_equal(a, src)
    a = src.copy()
    a.obs["n_int32"] = a.obs["n_int32"].astype("Int64")
    with pytest.raises(AssertionError):
        assert_adata_equal(a, src)


def test_harness_detects_wrong_permutation_and_raw_changes(oracle, tmp_path):
    src = oracle("raw_layers")
    perm = _permuted_gene_major(src, seed=5)
    pos = perm.obs["cellucid_original_position"].to_numpy().copy()
    pos[[0, 1]] = pos[[1, 0]]
    perm.obs["cellucid_original_position"] = pos
    with pytest.raises(AssertionError):
        assert_adata_equal(perm, src)
    a = src.copy()
    rawX = a.raw.X.copy()
    rawX.data[0] += 1
    a.raw = ad.AnnData(rawX, var=a.raw.var, varm=dict(a.raw.varm), dtype=rawX.dtype)
    with pytest.raises(AssertionError):
        assert_adata_equal(a, src)


def test_harness_cellucid_record_checked(oracle):
    src = oracle("csc_f64")
    a = src.copy()
    with pytest.raises(AssertionError):  # no uns['cellucid'] at all
        assert_adata_equal(a, src, dataset_id="csc_f64", dataset_name="csc_f64")
    a.uns["cellucid"] = {"schema": 1, "id": "csc_f64", "name": "csc_f64"}
    assert_adata_equal(a, src, dataset_id="csc_f64", dataset_name="csc_f64")
    for bad in ({"schema": 2, "id": "csc_f64", "name": "csc_f64"}, {"schema": 1, "id": "x", "name": "csc_f64"},
                {"schema": 1, "id": "csc_f64", "name": "other"}, {"schema": "1", "id": "csc_f64", "name": "csc_f64"}):
        a.uns["cellucid"] = bad
        with pytest.raises(AssertionError):
            assert_adata_equal(a, src, dataset_id="csc_f64", dataset_name="csc_f64")
    src = oracle("cellucid_meta")
    a = src.copy()
    del a.uns["cellucid"]["description"]
    with pytest.raises(AssertionError):  # the source's other keys must be kept
        assert_adata_equal(a, src, dataset_id="my-atlas_v1", dataset_name="My Atlas")


def test_harness_variants_read_like_their_base(oracle):
    """The h5py-made variants hold the same data as the anndata file they were made from."""
    for name, e in GOOD.items():
        if "base" in e:
            assert_adata_equal(oracle(name), oracle(e["base"]))


def test_harness_id_rule():
    assert expected_id("pbmc.h5ad") == "pbmc"
    assert expected_id("a.b.h5ad") == "a.b"
    assert expected_id("a b.h5ad") == "a_b"
    assert expected_id("Zellatlas ä.h5ad") == "Zellatlas__"
    assert expected_id("__lead.h5ad") == "lead"
    assert expected_id("细胞.h5ad") == "dataset"
    assert expected_id("trail..h5ad") == "trail"
    assert expected_id("x" * 200 + ".h5ad") == "x" * 180


# ---------------------------------------------------------------------------------------------
# every good fixture


def _assert_clean_success(r):
    assert r.returncode == 0, describe(r)
    assert not refused_lines(r.stderr), describe(r)
    assert not left_out_lines(r.stderr), describe(r)


def _assert_catalog_notices(r, names, oracle):
    """One 'not in datasets.json' line for each source without a drawable embedding, none else."""
    lines = not_in_catalog_lines(r.stderr)
    expect = [n for n in names if not in_catalog(oracle(n))]
    assert len(lines) == len(expect), describe(r)
    for n in expect:
        fn = GOOD[n]["file"]
        mine = [l for l in lines if l.startswith("cellucid-fs: ") and fn in l]
        assert len(mine) == 1 and mine[0].endswith(": " + NOT_IN_CATALOG), (fn, describe(r))


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_export_equals_source(name, exported, oracle):
    out, r = exported(name)
    _assert_clean_success(r)
    did = fixture_id(name)
    listed = in_catalog(oracle(name))
    assert listed is (name not in ("single_cell", "no_embedding")), "fixtures changed: check the catalog rule"
    assert_catalog(out, [did] if listed else [], stores=[did])
    _assert_catalog_notices(r, [name], oracle)
    assert_adata_equal(read_store(out, did), oracle(name), dataset_id=did, dataset_name=fixture_name(name))


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_store_consolidated(name, exported):
    out, r = exported(name)
    assert r.returncode == 0, describe(r)
    check_consolidated(out / f"{fixture_id(name)}.zarr")


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_store_chunks_complete(name, exported):
    out, r = exported(name)
    assert r.returncode == 0, describe(r)
    check_chunks(out / f"{fixture_id(name)}.zarr")


BLOSC_DEFAULT = {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0}


def assert_compressor(adir, za, comp):
    """Every array carries the chosen compressor (blosc: exactly the default one); a 0-d array
    (a scalar) may instead have none, as zarr-python itself writes scalars."""
    c = za["compressor"]
    if comp == "none" or (c is None and za["shape"] == []):
        assert c is None, (adir, c)
    elif comp == "blosc":
        assert c == BLOSC_DEFAULT, (adir, c)
    else:
        assert isinstance(c, dict) and c.get("id") == comp, (adir, c)


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_store_default_codec_and_encodings(name, exported):
    """Default compressor is blosc lz4 clevel 5 byte-shuffle on every array; every node carries
    encoding-type/encoding-version; the root is anndata 0.1.0."""
    out, r = exported(name)
    assert r.returncode == 0, describe(r)
    store = out / f"{fixture_id(name)}.zarr"
    for adir, za in iter_arrays(store):
        assert_compressor(adir, za, "blosc")
    root = json.loads((store / ".zattrs").read_text(encoding="utf-8"))
    assert root.get("encoding-type") == "anndata" and root.get("encoding-version") == "0.1.0", root
    for part in ("obs", "var"):
        attrs = json.loads((store / part / ".zattrs").read_text(encoding="utf-8"))
        assert attrs.get("encoding-type") == "dataframe" and attrs.get("encoding-version") == "0.2.0", attrs
        assert "_index" in attrs and "column-order" in attrs, attrs
    cel = json.loads((store / "uns" / "cellucid" / ".zattrs").read_text(encoding="utf-8"))
    assert cel.get("encoding-type") == "dict", cel


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_export_twice_byte_identical(name, exported, cfs, tmp_path):
    out1, r1 = exported(name)
    assert r1.returncode == 0, describe(r1)
    out2 = tmp_path / "again"
    r2 = run_cfs(cfs, "export", good_path(name), out2)
    assert r2.returncode == 0, describe(r2)
    t1, t2 = tree_bytes(out1), tree_bytes(out2)
    assert sorted(t1) == sorted(t2), (sorted(set(t1) ^ set(t2)))[:20]
    differ = [k for k in t1 if t1[k] != t2[k]]
    assert not differ, f"files differ between two exports: {differ[:20]}"


# ---------------------------------------------------------------------------------------------
# folders, catalog, ids


def test_export_folder_of_all_fixtures(cfs, tmp_path, oracle):
    """The fixture folder itself (which also holds manifest.json, not a candidate) -> one store
    per fixture, datasets.json per the contract."""
    before = snapshot([GOOD_DIR])
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", GOOD_DIR, out)
    _assert_clean_success(r)
    ids = {fixture_id(n): n for n in GOOD_NAMES}
    assert len(ids) == len(GOOD_NAMES)
    assert_catalog(out, [i for i, n in ids.items() if in_catalog(oracle(n))], stores=list(ids))
    _assert_catalog_notices(r, GOOD_NAMES, oracle)
    for did, name in sorted(ids.items()):
        assert_adata_equal(read_store(out, did), oracle(name), dataset_id=did, dataset_name=fixture_name(name))
    assert snapshot([GOOD_DIR]) == before, "the source folder changed"
    assert leftover_temp(tmp_path, "out") == []


def test_export_folder_stores_equal_single_exports(cfs, tmp_path, exported):
    src = tmp_path / "src"
    src.mkdir()
    names = ["csr_f32", "dense_f32", "categoricals"]
    for n in names:
        shutil.copyfile(good_path(n), src / GOOD[n]["file"])
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    _assert_clean_success(r)
    assert_catalog(out, [fixture_id(n) for n in names])
    for n in names:
        single, r1 = exported(n)
        assert r1.returncode == 0, describe(r1)
        did = fixture_id(n)
        assert tree_bytes(out / f"{did}.zarr") == tree_bytes(single / f"{did}.zarr"), n


def test_id_clash_resolved_in_sorted_order(cfs, tmp_path, oracle):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copyfile(good_path("csc_f64"), src / "a b.h5ad")   # sorts first: "a b" < "a_b"
    shutil.copyfile(good_path("csr_f32"), src / "a_b.h5ad")
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 0, describe(r)
    assert not refused_lines(r.stderr), describe(r)
    assert "a_b-2" in r.stderr, f"the clash is not reported on stderr:\n{describe(r)}"
    assert_catalog(out, ["a_b", "a_b-2"])
    assert_adata_equal(read_store(out, "a_b"), oracle("csc_f64"), dataset_id="a_b", dataset_name="a b")
    assert_adata_equal(read_store(out, "a_b-2"), oracle("csr_f32"), dataset_id="a_b-2", dataset_name="a_b")


def test_id_clash_three_ways(cfs, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for fn in ("x y.h5ad", "x_y.h5ad", "x-y.h5ad", "xéy.h5ad"):
        shutil.copyfile(good_path("csc_f64"), src / fn)
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 0, describe(r)
    # sorted source paths (bytes): "x y" < "x-y" < "x_y" < "xéy"; x-y has its own id
    assert_catalog(out, ["x-y", "x_y", "x_y-2", "x_y-3"])
    names = {}
    for did in ("x_y", "x_y-2", "x_y-3"):
        names[did] = ad.read_zarr(str(out / f"{did}.zarr")).uns["cellucid"]["name"]
    assert names == {"x_y": "x y", "x_y-2": "x_y", "x_y-3": "xéy"}, names


@pytest.mark.parametrize("filename", [
    "pbmc.h5ad", "a.b.h5ad", "Zellatlas ä.h5ad", "__lead.h5ad", "细胞.h5ad", "trail..h5ad", "x" * 200 + ".h5ad",
])
def test_id_and_name_from_file_name(filename, cfs, tmp_path, oracle):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copyfile(good_path("csc_f64"), src / filename)
    did = expected_id(filename)
    for arg in (src / filename, src):   # a file and a folder holding it
        out = tmp_path / ("out-file" if arg != src else "out-dir")
        r = run_cfs(cfs, "export", arg, out)
        assert r.returncode == 0, describe(r)
        assert_catalog(out, [did])
        assert_adata_equal(read_store(out, did), oracle("csc_f64"), dataset_id=did,
                           dataset_name=strip_format_ext(filename))


def test_folder_ignores_non_candidates(cfs, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copyfile(good_path("csc_f64"), src / "one.h5ad")
    (src / "README.txt").write_text("not a dataset\n")
    (src / "notes.md").write_text("# notes\n")
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    _assert_clean_success(r)
    assert_catalog(out, ["one"])


def test_hdf5_signature_without_candidate_name(cfs, tmp_path, oracle):
    """A file with no format extension whose first bytes are an HDF5 signature is probed."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copyfile(good_path("csr_f32"), src / "matrixfile")
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    _assert_clean_success(r)
    assert_catalog(out, ["matrixfile"])
    assert_adata_equal(read_store(out, "matrixfile"), oracle("csr_f32"), dataset_id="matrixfile",
                       dataset_name="matrixfile")


# ---------------------------------------------------------------------------------------------
# options


COMPRESSORS = ["blosc", "gzip", "none", "zlib", "zstd"]


@pytest.mark.parametrize("name", ["raw_layers", "uns_nested", "nonascii"])
@pytest.mark.parametrize("comp", COMPRESSORS)
def test_compressor_option(comp, name, cfs, tmp_path, oracle):
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", "-o", f"compressor={comp}", good_path(name), out)
    _assert_clean_success(r)
    did = fixture_id(name)
    store = out / f"{did}.zarr"
    arrays = list(iter_arrays(store))
    assert arrays
    for adir, za in arrays:
        assert_compressor(adir, za, comp)
    check_consolidated(store)
    check_chunks(store)
    assert_adata_equal(read_store(out, did), oracle(name), dataset_id=did, dataset_name=fixture_name(name))


def test_options_before_and_after_paths(cfs, tmp_path):
    src = good_path("categoricals")
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    ra = run_cfs(cfs, "export", "-o", "compressor=zlib", src, a)
    rb = run_cfs(cfs, "export", src, b, "-o", "compressor=zlib")
    rc = run_cfs(cfs, "export", "-o", "compressor=gzip", src, c, "-o", "compressor=zlib")
    for r in (ra, rb, rc):
        assert r.returncode == 0, describe(r)
    assert tree_bytes(a) == tree_bytes(b)
    for adir, za in iter_arrays(a / "categoricals.zarr"):
        assert_compressor(adir, za, "zlib")
    # a later option wins over an earlier one (the options are read in order)
    assert tree_bytes(c) == tree_bytes(a)


def test_comma_separated_options(cfs, tmp_path):
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", "-o", "compressor=none,compressor=zstd", good_path("csr_f32"), out)
    assert r.returncode == 0, describe(r)
    for adir, za in iter_arrays(out / "csr_f32.zarr"):
        assert_compressor(adir, za, "zstd")


@pytest.mark.parametrize("opt", ["bogus=1", "compressor=lzma", "compressor"])
def test_bad_option_is_usage_error(opt, cfs, tmp_path):
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", "-o", opt, good_path("csr_f32"), out)
    assert r.returncode == 1, describe(r)
    assert r.stderr.strip(), "a usage error says what is wrong"
    assert not out.exists(), "nothing is written on a usage error"
    assert os.listdir(tmp_path) == []


def test_usage_errors(cfs, tmp_path):
    for args in (["export"], ["export", good_path("csr_f32")], ["frobnicate"],
                 ["export", tmp_path / "does-not-exist.h5ad", tmp_path / "out"]):
        r = run_cfs(cfs, *args)
        assert r.returncode == 1, (args, describe(r))
        assert r.stderr.strip()
    assert not (tmp_path / "out").exists()


def test_help_and_version(cfs):
    r = run_cfs(cfs, "--help")
    assert r.returncode == 0, describe(r)
    assert "export" in r.stdout and "inspect" in r.stdout
    r = run_cfs(cfs, "--version")
    assert r.returncode == 0, describe(r)
    assert r.stdout.strip()


# ---------------------------------------------------------------------------------------------
# OUT handling and sources


def test_existing_out_refused_unless_force(cfs, tmp_path, oracle):
    out = tmp_path / "out"
    out.mkdir()
    (out / "marker").write_text("keep me\n")
    before = snapshot([out])
    r = run_cfs(cfs, "export", good_path("csr_f32"), out)
    assert r.returncode != 0, describe(r)
    assert r.returncode == 1, describe(r)
    assert r.stderr.strip()
    assert snapshot([out]) == before, "an existing OUT must be left untouched"
    assert sorted(os.listdir(tmp_path)) == ["out"]

    r = run_cfs(cfs, "export", "--force", good_path("csr_f32"), out)
    assert r.returncode == 0, describe(r)
    assert not (out / "marker").exists(), "--force replaces OUT"
    assert_catalog(out, ["csr_f32"])
    assert_adata_equal(read_store(out, "csr_f32"), oracle("csr_f32"), dataset_id="csr_f32", dataset_name="csr_f32")
    assert sorted(os.listdir(tmp_path)) == ["out"], "no temporary sibling is left"


def test_existing_out_file_refused(cfs, tmp_path):
    out = tmp_path / "out"
    out.write_text("a file\n")
    r = run_cfs(cfs, "export", good_path("csr_f32"), out)
    assert r.returncode == 1, describe(r)
    assert out.read_text() == "a file\n"


def test_no_temporary_left_after_export(cfs, tmp_path):
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", good_path("raw_layers"), out)
    assert r.returncode == 0, describe(r)
    assert sorted(os.listdir(tmp_path)) == ["out"]
    assert sorted(os.listdir(out)) == ["datasets.json", "raw_layers.zarr"]


def test_sources_never_modified(cfs, tmp_path):
    before = snapshot([GOOD_DIR, BAD_DIR])
    r = run_cfs(cfs, "export", GOOD_DIR, tmp_path / "o1")
    assert r.returncode == 0, describe(r)
    r = run_cfs(cfs, "export", BAD_DIR, tmp_path / "o2")
    assert r.returncode == 2, describe(r)
    for n in GOOD_NAMES[:5]:
        r = run_cfs(cfs, "export", "-o", "compressor=zstd", good_path(n), tmp_path / f"single-{n}")
        assert r.returncode == 0, describe(r)
    r = run_cfs(cfs, "inspect", "--json", *[good_path(n) for n in GOOD_NAMES])
    assert r.returncode == 0, describe(r)
    r = run_cfs(cfs, "inspect", *sorted(BAD_DIR.glob("*.h5ad")))
    assert r.returncode == 2, describe(r)
    after = snapshot([GOOD_DIR, BAD_DIR])
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, f"sources changed: {changed}"
