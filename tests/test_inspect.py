"""`cellucid-fs inspect [--json] FILE...` (docs/cli-contract.md).

Expectations come from the file itself read with h5py (encodings, dtypes, keys) and from
anndata's reading (shape), not from the binary's own model."""

import json
import re

import h5py
import numpy as np
import pytest

from conftest import (
    BAD,
    GOOD,
    GOOD_NAMES,
    LEFT_OUT_NAMES,
    REFUSED_NAMES,
    bad_path,
    describe,
    expected_drawable,
    good_path,
    h5_str_attr,
    run_cfs,
)

pytestmark = pytest.mark.filterwarnings("ignore")

KINDS = {"array", "categorical", "nullable-integer", "nullable-boolean", "nullable-string-array", "string-array"}


def inspect_json(cfs, *paths, expect_rc=0):
    r = run_cfs(cfs, "inspect", "--json", *paths)
    assert r.returncode == expect_rc, describe(r)
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        raise AssertionError(f"inspect --json did not print one JSON document:\n{describe(r)}")
    assert list(doc.keys()) == ["files"], doc.keys()
    assert len(doc["files"]) == len(paths), doc
    for entry, p in zip(doc["files"], paths):
        assert entry["path"] == str(p), (entry["path"], str(p))
    return doc["files"]


def _column_order(g):
    order = h5_str_attr(g.attrs, "column-order", [])
    if isinstance(order, str):
        return [order]
    if isinstance(order, np.ndarray):  # empty float64 array
        return [str(x) for x in order]
    return list(order)


def _elem_info(obj):
    enc = h5_str_attr(obj.attrs, "encoding-type")
    if isinstance(obj, h5py.Group) and enc in ("csr_matrix", "csc_matrix"):
        return enc, obj["data"].dtype.name, [int(x) for x in obj.attrs["shape"]]
    if isinstance(obj, h5py.Dataset):
        return enc, obj.dtype.name, list(obj.shape)
    return enc, None, None


def expected_from_h5(path, left_out=()):
    """What inspect must say about an h5ad, read with h5py."""
    exp = {}
    with h5py.File(path, "r") as f:
        if "X" in f:
            enc, dt, shape = _elem_info(f["X"])
            exp["X"] = {"encoding": enc, "dtype": dt}
        else:
            exp["X"] = None
        for part in ("obs", "var"):
            cols = []
            for c in _column_order(f[part]):
                if f"{part}/{c}" in left_out:
                    continue
                o = f[part][c]
                kind = h5_str_attr(o.attrs, "encoding-type")
                cols.append((c, kind, o.dtype.name if kind == "array" else None))
            exp[part] = cols
        for part in ("obsm", "varm", "obsp", "varp", "layers"):
            exp[part] = {k: _elem_info(f[part][k]) for k in f[part].keys()} if part in f else {}
        exp["uns"] = sorted(f["uns"].keys()) if "uns" in f else []
        exp["raw"] = "raw" in f
    return exp


def check_entry(entry, path, oracle_adata, left_out=()):
    exp = expected_from_h5(path, left_out)
    assert entry["format"] == "h5ad", entry
    assert entry["version"] == "anndata 0.1.0", entry
    assert entry["refused"] is None, entry
    assert entry["n_obs"] == oracle_adata.n_obs and entry["n_vars"] == oracle_adata.n_vars, entry
    if exp["X"] is None:
        assert entry["X"] is None, entry["X"]
    else:
        assert entry["X"] == exp["X"], (entry["X"], exp["X"])
    for part in ("obs", "var"):
        got = entry[part]
        assert [c["name"] for c in got] == [c[0] for c in exp[part]], (part, got)
        for g, (name, kind, dt) in zip(got, exp[part]):
            assert set(g) >= {"name", "type", "dtype"}, g
            assert g["type"] in KINDS and g["type"] == kind, (part, name, g, kind)
            if kind == "array":
                assert g["dtype"] == dt, (part, name, g, dt)
    for part in ("obsm", "varm", "obsp", "varp", "layers"):
        got = {e["key"]: e for e in entry[part]}
        assert sorted(got) == sorted(exp[part]), (part, sorted(got), sorted(exp[part]))
        for k, (enc, dt, shape) in exp[part].items():
            e = got[k]
            assert set(e) >= {"key", "encoding", "dtype", "shape"}, e
            assert e["encoding"] == enc, (part, k, e, enc)
            if dt is not None:
                assert e["dtype"] == dt and e["shape"] == shape, (part, k, e, dt, shape)
            if part == "obsm":
                assert isinstance(e.get("drawable"), bool), e
                if not e["drawable"]:
                    assert isinstance(e.get("why"), str) and e["why"].strip(), e
    assert sorted(entry["uns"]) == exp["uns"], (entry["uns"], exp["uns"])
    assert entry["raw"] is exp["raw"], entry["raw"]
    got_left = sorted(x["element"] for x in entry["left_out"])
    assert got_left == sorted(left_out), entry["left_out"]
    for x in entry["left_out"]:
        assert isinstance(x.get("reason"), str) and x["reason"].strip(), x


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_inspect_json_good(name, cfs, oracle):
    p = good_path(name)
    (entry,) = inspect_json(cfs, p)
    check_entry(entry, p, oracle(name))
    a = oracle(name)
    obsm = {e["key"]: e for e in entry["obsm"]}
    for key, e in obsm.items():
        assert e["drawable"] is expected_drawable(a.obsm[key], a.n_obs), (key, e)
    if "X_umap" in obsm and name != "single_cell":
        assert obsm["X_umap"]["drawable"] is True, obsm["X_umap"]
    for key, drawable in GOOD[name].get("drawable", {}).items():
        assert obsm[key]["drawable"] is drawable, obsm[key]


def test_inspect_undrawable_obsm(cfs):
    (entry,) = inspect_json(cfs, good_path("obsm_undrawable"))
    obsm = {e["key"]: e for e in entry["obsm"]}
    assert obsm["X_umap"]["drawable"] is True
    for k in ("X_const", "X_nan"):
        assert obsm[k]["drawable"] is False, obsm[k]
        assert obsm[k]["why"].strip(), obsm[k]


def test_inspect_several_files_in_order(cfs, oracle):
    names = ["csr_f32", "no_x", "dense_f32", "raw_layers"]
    paths = [good_path(n) for n in names]
    entries = inspect_json(cfs, *paths)
    for e, n, p in zip(entries, names, paths):
        check_entry(e, p, oracle(n))


@pytest.mark.parametrize("name", LEFT_OUT_NAMES)
def test_inspect_left_out(name, cfs, oracle):
    p = bad_path(name)
    (entry,) = inspect_json(cfs, p)
    check_entry(entry, p, oracle(name, bad=True), left_out=BAD[name]["left_out"])


@pytest.mark.parametrize("name", REFUSED_NAMES)
def test_inspect_refused(name, cfs):
    p = bad_path(name)
    (entry,) = inspect_json(cfs, p, expect_rc=2)
    assert isinstance(entry["refused"], str) and entry["refused"].strip(), entry
    assert re.search(BAD[name]["phrase"], entry["refused"], re.IGNORECASE), entry["refused"]


def test_inspect_mixed_good_and_refused(cfs, oracle):
    paths = [good_path("csr_f32"), bad_path("not_hdf5"), good_path("categoricals")]
    entries = inspect_json(cfs, *paths, expect_rc=2)
    check_entry(entries[0], paths[0], oracle("csr_f32"))
    assert entries[1]["refused"], entries[1]
    check_entry(entries[2], paths[2], oracle("categoricals"))


@pytest.mark.parametrize("name", ["csr_f32", "dense_f32", "single_cell", "no_x", "nonascii", "userblock"])
def test_inspect_human(name, cfs, oracle):
    p = good_path(name)
    r = run_cfs(cfs, "inspect", p)
    assert r.returncode == 0, describe(r)
    a = oracle(name)
    assert re.search(rf"\b{a.n_obs}\s*[x×]\s*{a.n_vars}\b", r.stdout), \
        f"human-readable inspect should mention {a.n_obs} x {a.n_vars}:\n{describe(r)}"
    assert p.name in r.stdout or str(p) in r.stdout, describe(r)


def test_inspect_human_refused(cfs):
    p = bad_path("truncated")
    r = run_cfs(cfs, "inspect", p)
    assert r.returncode == 2, describe(r)
    assert "refused" in (r.stdout + r.stderr), describe(r)


def test_inspect_usage(cfs):
    r = run_cfs(cfs, "inspect")
    assert r.returncode == 1, describe(r)


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_index_dtype_changes(cfs, name):
    """inspect names every sparse element whose indices and indptr the source stores in dtypes
    other than the store's one index dtype (int32 here: every fixture fits), with both dtypes."""
    want = []
    with h5py.File(good_path(name), "r") as f:
        def visit(path, obj):
            if isinstance(obj, h5py.Group) and h5_str_attr(obj.attrs, "encoding-type") in ("csr_matrix", "csc_matrix"):
                ind, ptr = obj["indices"].dtype, obj["indptr"].dtype
                if ind != np.int32 or ptr != np.int32:
                    want.append({"element": path, "indices": ind.name, "indptr": ptr.name, "stored": "int32"})
        f.visititems(visit)
    (entry,) = inspect_json(cfs, good_path(name))
    assert sorted(entry["index_dtype_changes"], key=lambda e: e["element"]) == sorted(want, key=lambda e: e["element"])
    text = run_cfs(cfs, "inspect", good_path(name)).stdout
    for w in want:
        assert (f"  {w['element']}: indices {w['indices']} and indptr {w['indptr']} in the source, "
                f"both written as int32") in text, text
