"""The layout engine (issue 3, docs/design.md §4, §4.1, §7, docs/priority-order.md): every store is
priority-ordered and gene-major by default.

- Priority order v1: a numpy computation written here from the spec text (not from the C code)
  equals the store's obs `cellucid_original_position` for n = 1, 2, 1023, 1024, 1025, 100000
  and seeds 0, 1, 2^63; `uns/cellucid/priority` holds {seed, specVersion, nObs, levels}.
- Every per-cell axis is permuted alike (obs, X, layers, raw/X, obsm, obsp on both axes); var,
  varm and varp are not. Every good fixture round-trips.
- Gene-major: a sparse X / layer / raw.X is a csc_matrix (indptr over genes and indices
  strictly ascending within a gene, both int32 where they fit, else both int64); one gene read with zarr-python is exactly the
  source column; a dense one is chunked [many cells, few genes], at most 16 MiB a chunk.
- `-o order=original` is the core issue's output, byte for byte; `-o priority_seed=N` and
  `-o memory=SIZE` (the bytes do not depend on it) are parsed strictly; the last option wins.

The first block checks the reference computation itself and needs no binary.

The golden digests of `-o order=original` (ORIGINAL_DIGESTS) were made by the core build
(commit 8b42ea8, before the layout engine), except for the three fixtures whose sparse index
arrays the source stores in other dtypes than the store's rule (csc_int64_indptr,
csr_int64_indptr, csr_narrow_indices): theirs are from the build that gave every sparse matrix
one index dtype (issue 9), whose output differs from the core build's only in those arrays
(their .zarray, chunks and .zmetadata entries). Print them for another binary with
    /usr/bin/python3 tests/test_layout.py --digests BINARY
"""

import hashlib
import json
import math
import os
import sys
import tempfile
import warnings
from pathlib import Path

import anndata as ad
import h5py
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from priority_reference import U64, reference_levels, reference_order, splitmix64  # noqa: E402
from conftest import (  # noqa: E402
    GOOD,
    GOOD_NAMES,
    assert_adata_equal,
    check_chunks,
    check_consolidated,
    describe,
    fixture_id,
    fixture_name,
    good_path,
    h5_str_attr,
    iter_arrays,
    left_out_lines,
    refused_lines,
    run_cfs,
    store_files,
    tree_bytes,
)

warnings.simplefilter("ignore")
pytestmark = pytest.mark.filterwarnings("ignore")

MiB = 1024 * 1024


# ---------------------------------------------------------------------------------------------
# the reference computation (tests/priority_reference.py), checked against integer arithmetic

_M64 = 2 ** 64 - 1


def _splitmix64_int(x):
    z = (x + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def _order_int(n, seed):
    s = _splitmix64_int(seed)
    return sorted(range(n), key=lambda i: (_splitmix64_int(s ^ i), i))


def test_reference_equals_integer_arithmetic():
    """The numpy reference wraps like Python integers masked to 64 bits (no float64 detours)."""
    for x in (0, 1, 2, 7, 2 ** 32, 2 ** 63 - 1, 2 ** 63, _M64, 0x9E3779B97F4A7C15, 12345678901234567890):
        got = splitmix64(U64(x))
        assert got.dtype == np.uint64
        assert int(got) == _splitmix64_int(x), x
    for seed in (0, 1, 7, 2 ** 63, _M64):
        for n in (0, 1, 2, 3, 10, 1023, 1024, 1025, 4097):
            assert reference_order(n, seed).tolist() == _order_int(n, seed), (n, seed)


def test_reference_known_values():
    # splitmix64's first output from state 0 (Vigna's reference): 0xE220A8397B1DCDAF
    assert int(splitmix64(U64(0))) == 0xE220A8397B1DCDAF
    assert int(splitmix64(U64(1))) == 0x910A2DEC89025CC1
    assert reference_order(10, 0).tolist() == [1, 4, 5, 7, 6, 9, 0, 3, 2, 8]   # docs/priority-order.md
    assert reference_levels(1).tolist() == [1]
    assert reference_levels(2).tolist() == [2]
    assert reference_levels(1023).tolist() == [1023]
    assert reference_levels(1024).tolist() == [1024]
    assert reference_levels(1025).tolist() == [1024, 1025]
    assert reference_levels(4096).tolist() == [1024, 4096]
    assert reference_levels(4097).tolist() == [1024, 4096, 4097]
    assert reference_levels(100000).tolist() == [1024, 4096, 16384, 65536, 100000]


# ---------------------------------------------------------------------------------------------
# helpers


def read_json(path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


def zattrs(store, rel):
    p = Path(store) / rel / ".zattrs"
    return read_json(p) if p.is_file() else None


def zarray(store, rel):
    p = Path(store) / rel / ".zarray"
    return read_json(p) if p.is_file() else None


def open_store(store):
    import zarr

    return zarr.open_consolidated(str(store), mode="r")


def store_path(out, name_or_id):
    did = fixture_id(name_or_id) if name_or_id in GOOD else name_or_id
    return Path(out) / f"{did}.zarr"


def assert_clean(r):
    assert r.returncode == 0, describe(r)
    assert not refused_lines(r.stderr), describe(r)
    assert not left_out_lines(r.stderr), describe(r)


def assert_same_tree(a, b, what):
    ta, tb = tree_bytes(a), tree_bytes(b)
    assert sorted(ta) == sorted(tb), f"{what}: file lists differ: {sorted(set(ta) ^ set(tb))[:20]}"
    differ = sorted(k for k in ta if ta[k] != tb[k])
    assert not differ, f"{what}: files differ: {differ[:20]}"


def tree_digest(root):
    """sha256 over every file below root: relative path, size and bytes, in sorted path order."""
    root = Path(root)
    h = hashlib.sha256()
    for rel in store_files(root):
        b = (root / rel).read_bytes()
        h.update(rel.encode("utf-8") + b"\0" + str(len(b)).encode() + b"\0" + b)
    return h.hexdigest()


def store_positions(store):
    """obs/cellucid_original_position of a store, checked to be an int64 array column."""
    za = zarray(store, "obs/cellucid_original_position")
    assert za is not None, f"{store}: no obs/cellucid_original_position"
    assert za["dtype"] == "<i8", za
    at = zattrs(store, "obs/cellucid_original_position")
    assert at.get("encoding-type") == "array" and at.get("encoding-version") == "0.2.0", at
    return np.asarray(open_store(store)["obs/cellucid_original_position"][:])


def assert_last_obs_column(store):
    order = zattrs(store, "obs")["column-order"]
    assert isinstance(order, list) and order and order[-1] == "cellucid_original_position", \
        f"obs column-order {order}: cellucid_original_position must be the last column"
    assert order.count("cellucid_original_position") == 1, order


PRIORITY_KEYS = {"seed", "specVersion", "nObs", "levels"}


def assert_priority_record(store, n, seed):
    """uns/cellucid/priority = {seed, specVersion 1, nObs n, levels}, in anndata's encodings."""
    rel = "uns/cellucid/priority"
    at = zattrs(store, rel)
    assert at is not None and (Path(store) / rel / ".zgroup").is_file(), f"{store}: no {rel} group"
    assert at.get("encoding-type") == "dict" and at.get("encoding-version") == "0.1.0", at
    keys = {p.name for p in (Path(store) / rel).iterdir() if p.is_dir()}
    assert keys == PRIORITY_KEYS, f"{rel} holds {sorted(keys)}, expected {sorted(PRIORITY_KEYS)}"
    g = open_store(store)
    want_dtype = {"seed": "<u8" if seed >= 2 ** 63 else "<i8", "specVersion": "<i8", "nObs": "<i8"}
    want_value = {"seed": seed, "specVersion": 1, "nObs": n}
    for k in ("seed", "specVersion", "nObs"):
        za, a = zarray(store, f"{rel}/{k}"), zattrs(store, f"{rel}/{k}")
        assert za["shape"] == [] and za["dtype"] == want_dtype[k], (k, za)
        assert a.get("encoding-type") == "numeric-scalar" and a.get("encoding-version") == "0.2.0", (k, a)
        v = g[f"{rel}/{k}"][()]
        assert int(v) == want_value[k], f"{rel}/{k} = {v!r}, expected {want_value[k]}"
    za, a = zarray(store, f"{rel}/levels"), zattrs(store, f"{rel}/levels")
    assert za["dtype"] == "<i8" and len(za["shape"]) == 1, za
    assert a.get("encoding-type") == "array" and a.get("encoding-version") == "0.2.0", a
    levels = np.asarray(g[f"{rel}/levels"][:])
    assert levels.tolist() == reference_levels(n).tolist(), f"levels {levels.tolist()} for n={n}"


def assert_no_priority(store):
    assert zarray(store, "obs/cellucid_original_position") is None, "order=original writes no position column"
    assert "cellucid_original_position" not in zattrs(store, "obs")["column-order"]
    assert not (Path(store) / "uns" / "cellucid" / "priority").exists(), "order=original writes no priority record"


def source_expression(h5file):
    """[(element, encoding, n_rows, n_cols, data dtype str)] for X, layers/* and raw/X of a file."""
    out = []
    with h5py.File(h5file, "r") as f:
        rels = ["X"] if "X" in f else []
        if "layers" in f:
            rels += [f"layers/{k}" for k in sorted(f["layers"].keys())]
        if "raw" in f and "X" in f["raw"]:
            rels.append("raw/X")
        for rel in rels:
            o = f[rel]
            enc = h5_str_attr(o.attrs, "encoding-type", "array")
            if isinstance(o, h5py.Group):
                shape = [int(s) for s in np.asarray(o.attrs["shape"]).ravel()]
                dtype = np.dtype(o["data"].dtype).str
            else:
                shape = list(o.shape)
                dtype = np.dtype(o.dtype).str
            out.append((rel, enc, shape[0], shape[1], dtype))
    return out


EXPRESSION = {n: source_expression(good_path(n)) for n in GOOD_NAMES}
EXPRESSION_CASES = [(n, e) for n in GOOD_NAMES for e in EXPRESSION[n]]


def source_element(a, rel):
    if rel == "X":
        return a.X
    if rel == "raw/X":
        return a.raw.X
    assert rel.startswith("layers/"), rel
    return a.layers[rel[len("layers/"):]]


def as_csr(m):
    m = m if m.format in ("csr", "csc") else m.tocsr()
    cls = sp.csr_matrix if m.format == "csr" else sp.csc_matrix
    m = cls((np.asarray(m.data), np.asarray(m.indices, dtype=np.int64), np.asarray(m.indptr, dtype=np.int64)),
            shape=m.shape)
    return sp.csr_matrix(m)


def expected_gene_major(src, order):
    """The source's stored entries, rows permuted (stored row j = source row order[j]), as CSC
    with ascending row indices within each column."""
    t = as_csr(src)[order].tocsc()
    t.sort_indices()
    return t


def dense(x):
    return as_csr(x).toarray() if sp.issparse(x) else np.asarray(x)


def same_bytes(a, b):
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


MAX_GENES_PER_CHUNK = 64
MAX_DENSE_CHUNK = 16 * MiB
ROWS_PER_CHUNK_AT_LEAST = 16384   # one gene of n cells spans ceil(n / 16384) row chunks at most


def check_sparse_gene_major(store, rel, n_obs, n_vars, data_dtype):
    """csc_matrix 0.1.0, shape [n_obs, n_vars]; indptr over genes; indices in range and strictly
    ascending within each gene; both index arrays in one dtype, int32 where nnz and n_obs fit,
    else int64; data of the source dtype. Returns (indptr, indices)."""
    a = zattrs(store, rel)
    assert a is not None and (Path(store) / rel / ".zgroup").is_file(), f"{rel}: not a group"
    assert a.get("encoding-type") == "csc_matrix" and a.get("encoding-version") == "0.1.0", (rel, a)
    assert a.get("shape") == [n_obs, n_vars], (rel, a)
    zp, zi, zd = (zarray(store, f"{rel}/{k}") for k in ("indptr", "indices", "data"))
    want = "<i4" if zi["shape"][0] < 2 ** 31 and n_obs < 2 ** 31 else "<i8"
    assert zp["dtype"] == zi["dtype"] == want, \
        f"{rel}: indptr {zp['dtype']}, indices {zi['dtype']}, expected both {want}"
    assert zd["dtype"] == data_dtype, f"{rel}/data dtype {zd['dtype']}, the source's is {data_dtype}"
    assert zp["shape"] == [n_vars + 1], (rel, zp["shape"])
    g = open_store(store)
    indptr = np.asarray(g[f"{rel}/indptr"][:])
    indices = np.asarray(g[f"{rel}/indices"][:])
    assert indptr[0] == 0 and (np.diff(indptr) >= 0).all(), f"{rel}/indptr not non-decreasing from 0"
    assert indptr[-1] == len(indices) == zi["shape"][0] == zd["shape"][0], (rel, indptr[-1], zi, zd)
    if len(indices):
        assert indices.min() >= 0 and indices.max() < n_obs, f"{rel}/indices out of [0, {n_obs})"
        step = np.diff(indices.astype(np.int64))
        starts = np.zeros(len(indices), dtype=bool)
        starts[indptr[:-1][np.diff(indptr) > 0]] = True      # first entry of each gene
        bad = np.nonzero((step <= 0) & ~starts[1:])[0]
        assert not len(bad), f"{rel}: row indices not strictly ascending within a gene at entry {bad[0] + 1}"
    return indptr, indices


def check_dense_gene_major(store, rel, n_obs, n_vars, dtype):
    """A dense array chunked [R, G]: few genes a chunk, R >= min(n_obs, 16384), <= 16 MiB."""
    a = zattrs(store, rel)
    za = zarray(store, rel)
    assert za is not None, f"{rel}: not an array"
    assert a.get("encoding-type") == "array" and a.get("encoding-version") == "0.2.0", (rel, a)
    assert za["shape"] == [n_obs, n_vars] and za["dtype"] == dtype, (rel, za)
    R, G = za["chunks"]
    size = R * G * np.dtype(dtype).itemsize
    assert 1 <= G <= MAX_GENES_PER_CHUNK, f"{rel}: chunks {za['chunks']}: {G} genes a chunk is not gene-major"
    assert R >= min(n_obs, ROWS_PER_CHUNK_AT_LEAST), f"{rel}: chunks {za['chunks']}: too few cells a chunk"
    assert size <= MAX_DENSE_CHUNK, f"{rel}: chunks {za['chunks']} are {size} bytes decoded (> 16 MiB)"


def check_chunk_limits(store):
    """docs/design.md §4: never over 64 MiB decoded a chunk, never over 100 000 chunks an array."""
    problems = []
    for adir, za in iter_arrays(store):
        if za["dtype"] == "|O":
            continue
        dt = za["dtype"]
        dt = np.dtype(dt) if isinstance(dt, str) else np.dtype([tuple(f) for f in dt])  # structured
        nbytes = math.prod(za["chunks"]) * dt.itemsize
        grid = math.prod(math.ceil(s / c) for s, c in zip(za["shape"], za["chunks"]))
        if nbytes > 64 * MiB:
            problems.append(f"{adir}: chunk {za['chunks']} is {nbytes} bytes decoded")
        if grid > 100_000:
            problems.append(f"{adir}: {grid} chunks")
    assert not problems, "\n".join(problems)


def _write_csc_store(root, indptr, indices, data, shape, indptr_dtype="<i4", indices_dtype="<i4"):
    import zarr

    g = zarr.open_group(str(root), mode="w")
    x = g.create_group("X")
    x.attrs.update({"encoding-type": "csc_matrix", "encoding-version": "0.1.0", "shape": list(shape)})
    x.array("indptr", np.asarray(indptr, dtype=indptr_dtype))
    x.array("indices", np.asarray(indices, dtype=indices_dtype))
    x.array("data", np.asarray(data, dtype=np.float32))
    zarr.consolidate_metadata(str(root))


def test_harness_sparse_check_detects_bad_layouts(tmp_path):
    """check_sparse_gene_major passes a good csc and fails unsorted/duplicate rows and wrong dtypes."""
    good = dict(indptr=[0, 2, 2, 5], indices=[1, 3, 0, 2, 3], data=[1, 2, 3, 4, 5], shape=(4, 3))
    _write_csc_store(tmp_path / "good", **good)
    check_sparse_gene_major(tmp_path / "good", "X", 4, 3, "<f4")
    bad = {
        "unsorted": dict(good, indices=[3, 1, 0, 2, 3]),
        "duplicate": dict(good, indices=[1, 3, 0, 2, 2]),
        "out_of_range": dict(good, indices=[1, 4, 0, 2, 3]),
        "int64_indptr": dict(good, indptr_dtype="<i8"),       # two index dtypes: scipy refuses
        "int64_indices": dict(good, indices_dtype="<i8"),
        "int64_both": dict(good, indptr_dtype="<i8", indices_dtype="<i8"),   # int32 fits
        "short_indptr": dict(good, indptr=[0, 2, 5]),
    }
    for what, kw in bad.items():
        _write_csc_store(tmp_path / what, **kw)
        with pytest.raises(AssertionError):
            check_sparse_gene_major(tmp_path / what, "X", 4, 3, "<f4")


def test_harness_dense_check_detects_cell_major_chunks(tmp_path):
    import zarr

    for chunks, ok in (((100_000, 4), True), ((20_000, 1), True), ((100_000, 100), False),
                       ((1_000, 4), False), ((100_000, 64), False)):   # 100000*64*4 B > 16 MiB
        root = tmp_path / f"c{chunks[0]}x{chunks[1]}"
        g = zarr.open_group(str(root), mode="w")
        g.zeros("X", shape=(100_000, 200), chunks=chunks, dtype="<f4")
        g["X"].attrs.update({"encoding-type": "array", "encoding-version": "0.2.0"})
        if ok:
            check_dense_gene_major(root, "X", 100_000, 200, "<f4")
        else:
            with pytest.raises(AssertionError):
                check_dense_gene_major(root, "X", 100_000, 200, "<f4")


@pytest.fixture(scope="session")
def export_opts(cfs, tmp_path_factory):
    """export_opts(src, *args) -> (OUT, CompletedProcess) of `cellucid-fs export *args SRC OUT` (cached)."""
    cache = {}

    def get(src, *args):
        key = (str(src), tuple(str(a) for a in args))
        if key not in cache:
            out = tmp_path_factory.mktemp("layout") / "out"
            r = run_cfs(cfs, "export", *args, src, out)
            cache[key] = (out, r)
        return cache[key]

    return get


# ---------------------------------------------------------------------------------------------
# priority order against the reference, for n around the level boundaries and several seeds

GRID_N = [1, 2, 1023, 1024, 1025, 100000]
GRID_SEEDS = [0, 1, 2 ** 63]


def make_small_h5ad(path, n):
    """n cells x 3 genes: tiny csr X (about 0.7 entries a cell), obs index c0.. and an int column,
    obsm X_umap of random float32."""
    rng = np.random.default_rng(1000 + n)
    rows = np.arange(n)
    keep = rng.random(n) < 0.7
    cols = rng.integers(0, 3, n)
    vals = rng.integers(1, 100, int(keep.sum())).astype(np.float32)
    X = sp.csr_matrix((vals, (rows[keep], cols[keep])), shape=(n, 3), dtype=np.float32)
    obs = pd.DataFrame({"row": np.arange(n, dtype=np.int64)}, index=[f"c{i}" for i in range(n)])
    var = pd.DataFrame(index=["g0", "g1", "g2"])
    a = ad.AnnData(X, obs=obs, var=var, dtype=np.float32)
    a.obsm["X_umap"] = rng.standard_normal((n, 2)).astype(np.float32)
    a.write_h5ad(path)
    return path


@pytest.fixture(scope="module")
def small_h5ad(tmp_path_factory):
    cache = {}

    def get(n):
        if n not in cache:
            d = tmp_path_factory.mktemp(f"small{n}")
            cache[n] = make_small_h5ad(d / f"cells{n}.h5ad", n)
        return cache[n]

    return get


def seed_args(seed):
    return [] if seed == 0 else ["-o", f"priority_seed={seed}"]   # seed 0 is the default


@pytest.mark.parametrize("seed", GRID_SEEDS, ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("n", GRID_N, ids=lambda n: f"n{n}")
def test_priority_order_matches_reference(n, seed, small_h5ad, export_opts):
    src = small_h5ad(n)
    out, r = export_opts(src, *seed_args(seed))
    assert_clean(r)
    store = store_path(out, f"cells{n}")
    order = reference_order(n, seed)

    pos = store_positions(store)
    assert pos.shape == (n,)
    if not np.array_equal(pos, order):
        first = int(np.nonzero(pos != order)[0][0])
        raise AssertionError(f"cellucid_original_position differs from the reference at row {first}: "
                             f"{pos[first:first + 5].tolist()} != {order[first:first + 5].tolist()}")
    assert_last_obs_column(store)
    assert_priority_record(store, n, seed)

    # the other per-cell arrays follow the same order
    a = ad.read_h5ad(src)
    g = open_store(store)
    assert list(g["obs/_index"][:]) == [f"c{i}" for i in order], "obs index not permuted alike"
    assert np.array_equal(g["obs/row"][:], order), "obs column not permuted alike"
    assert same_bytes(g["obsm/X_umap"][:], a.obsm["X_umap"][order]), "obsm/X_umap not permuted alike"
    indptr, indices = check_sparse_gene_major(store, "X", n, 3, "<f4")
    want = expected_gene_major(a.X, order)
    assert indptr.tolist() == want.indptr.tolist()
    assert indices.tolist() == want.indices.tolist()
    assert same_bytes(g["X/data"][:], want.data)


# ---------------------------------------------------------------------------------------------
# every good fixture, default options


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_roundtrip_priority_ordered(name, exported, oracle):
    """The store read by anndata, rows sorted back by cellucid_original_position, equals the
    source; the order is the reference's for seed 0 (not the identity for n >= 3); the column is
    the last of obs; the record is there."""
    out, r = exported(name)
    assert_clean(r)
    store = store_path(out, name)
    src = oracle(name)
    n = src.n_obs
    pos = store_positions(store)
    if n >= 3:
        assert not np.array_equal(pos, np.arange(n)), "cells are in source order: the priority order was not applied"
    assert pos.tolist() == reference_order(n, 0).tolist(), "cellucid_original_position is not the v1 order for seed 0"
    assert_last_obs_column(store)
    assert_priority_record(store, n, 0)
    did = fixture_id(name)
    assert_adata_equal(ad.read_zarr(str(store)), src, dataset_id=did, dataset_name=fixture_name(name))
    check_chunk_limits(store)


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_expression_gene_major_encodings(name, exported):
    """X, every layer and raw/X: sparse (csr or csc) -> csc_matrix with int64 indptr and int32
    indices ascending within each gene; dense -> an array chunked [many cells, few genes]."""
    out, r = exported(name)
    assert r.returncode == 0, describe(r)
    store = store_path(out, name)
    for rel, enc, n_obs, n_vars, dtype in EXPRESSION[name]:
        if enc in ("csr_matrix", "csc_matrix"):
            check_sparse_gene_major(store, rel, n_obs, n_vars, dtype)
        else:
            assert enc == "array", (rel, enc)
            check_dense_gene_major(store, rel, n_obs, n_vars, dtype)
    if not EXPRESSION[name]:
        assert not (store / "X").exists()


OBSP_NAMES = [n for n in GOOD_NAMES if n in ("csr_f32", "obsm_varm_p", "single_cell")]


@pytest.mark.parametrize("name", OBSP_NAMES)
def test_obsp_permuted_on_both_axes(name, exported, oracle):
    out, r = exported(name)
    assert r.returncode == 0, describe(r)
    store = store_path(out, name)
    order = reference_order(oracle(name).n_obs, 0)
    src = oracle(name)
    st = ad.read_zarr(str(store))
    assert sorted(st.obsp.keys()) == sorted(src.obsp.keys())
    assert src.obsp.keys(), "fixture lost its obsp"
    for k in src.obsp.keys():
        a, b = st.obsp[k], src.obsp[k]
        assert sp.issparse(a) == sp.issparse(b), k
        assert a.dtype == b.dtype, (k, a.dtype, b.dtype)
        assert same_bytes(dense(a), dense(b)[order][:, order]), f"obsp/{k} is not source[order][:, order]"


# ---------------------------------------------------------------------------------------------
# gene-major reads with zarr-python


def _genes(m):
    return sorted({0, m // 2, m - 1}) if m else []


@pytest.mark.parametrize("name,element", EXPRESSION_CASES, ids=[f"{n}-{e[0]}" for n, e in EXPRESSION_CASES])
def test_gene_major_reads(name, element, exported, oracle):
    """One gene for all cells, read as a client does: X/indptr, then that gene's range of
    indices/data (sparse) or the column X[:, g] (dense), is exactly the source column in the
    store's order."""
    rel, enc, n_obs, n_vars, dtype = element
    out, r = exported(name)
    assert r.returncode == 0, describe(r)
    store = store_path(out, name)
    order = store_positions(store)
    src = source_element(oracle(name), rel)
    g = open_store(store)
    if enc in ("csr_matrix", "csc_matrix"):
        za = zattrs(store, rel)
        assert za.get("encoding-type") == "csc_matrix", (rel, za)
        want = expected_gene_major(src, order)
        indptr = g[f"{rel}/indptr"][:]
        for k in _genes(n_vars):
            lo, hi = int(indptr[k]), int(indptr[k + 1])
            rows = np.asarray(g[f"{rel}/indices"][lo:hi])
            vals = np.asarray(g[f"{rel}/data"][lo:hi])
            wlo, whi = want.indptr[k], want.indptr[k + 1]
            assert rows.tolist() == want.indices[wlo:whi].tolist(), f"{rel} gene {k}: rows differ"
            assert same_bytes(vals, want.data[wlo:whi]), f"{rel} gene {k}: values differ"
    else:
        check_dense_gene_major(store, rel, n_obs, n_vars, dtype)
        arr = g[rel]
        s = np.asarray(src)
        for k in _genes(n_vars):
            assert same_bytes(arr[:, k], s[order, k]), f"{rel}[:, {k}] != source[order, {k}]"


# ---------------------------------------------------------------------------------------------
# -o order=original: the core issue's output, unchanged

ORIGINAL_DIGESTS = {
    "attrs_as_arrays": "4d434d74c38ab71ba542279b784508134a8b33aa2f89a24524e93b2e7cc9eb6c",
    "attrs_fixedlen": "e4b5a96553e121b42a65dc7c338dd2c6f2a221f992d349613142f4452afb1c5e",
    "bool_enum_u8": "b9bf37b38e9ae99c53a1670f85b562cd7cb3160885e395c4577b15dcad47e3d8",
    "categoricals": "2d99e26ca264e951db7bc34e3c86975f71accec0b073535206ee02c3c7baa9c9",
    "cellucid_meta": "3e2048df28b9c68df75186711b9619f1db16a1f32652893faebab8e0101878e1",
    "csc_f64": "2c331ee8808eba7a38740d03df280664d85c7882fff5686614d431ad76384d82",
    "csc_int64_indptr": "190c69fa4f438c6c56e26bb274557a2af210b46bdaba7d88b52b72c641f55de6",
    "csr_f32": "3da4255ada75ad09af4c418934c75e9a504371497bbade6da12543f8c4a260ca",
    "csr_int64_indptr": "62bd52fd1532d1738008a96389403c0d6f72f68a5d848bcc6acb890f09aaef1c",
    "csr_narrow_indices": "66768ea159a4afd35ae4c1d8168447d8f7038eb83d3cd6d7f6bf901a56038970",
    "custom_index": "cede980e9dd4b187e1525048cbb2a2717cdb7a5d20736a7deda529dfef3cd1e8",
    "dense_bool": "49131cfd510ede3cf8ff12e3cabca2b854f3934f6f58cb70b8ea9110cb352e1b",
    "dense_f16": "00a455d8059edf8165d89e55c34c170b1b6b9b746fb9d7832953a05584e9409b",
    "dense_f32": "0bc630158a942d5a970f782c63cd996c0e94b25e08f54400f666d8ddd9f2cf93",
    "dense_i64": "c566c7f97496d91560b576eda75e8fb88fc6cd5c10dc1b6e618e0df0432017a7",
    "dtypes": "4add44f250e527a73b8d94970722354fd4149898ccd2a9d07c5a5a83d80bd928",
    "empty_columns": "401269cb7c6c410fe62bb522a753b47ed3a20840a91d86ef8486233e0150425f",
    "fixedlen_nullpad": "c47997d817b96d88792934d1679ca3d4b9d05ac3cd57ef6c7e50f9c8c3cf5130",
    "fixedlen_nullterm": "402d949037c48a655f939cf4ae1beb6c5ddc5f4efaea499afdc6a1281cf2e22f",
    "fixedlen_spacepad": "4c12a8ddeac4abcb29323f129ed1e6741f78dc956acdc62969e6b5d5c7b1f9ac",
    "fixedlen_utf8": "f3bcdc2bc466310e31b98bef191494586ce5b9c6c6dbd11df075d022f3acbc41",
    "gzip": "a19ad2f11d430ae93c30a62df6576f6d67d26b00645b7b5e21d6dd68cf214e98",
    "no_embedding": "46391751722779e8b570ecde74e6f74692e2f265bebc02afd119ffd7b853d47e",
    "no_x": "44c4784e3b569b527639fd0e88a9166cba023953915e9a51a4d8c8971ed00d43",
    "nonascii": "a979fa9d6ffc05c8dc6dcc890c966ec45d281ae951ff839292b73982518a5b7f",
    "nullable": "16f5e41ee46ceaeb3b3502b34339c5b320b7cca2c2e0c53f67198b463b282049",
    "obsm_undrawable": "41e23a1c7e67c4f61b77ce9f854bf5af17dd3dc96010acd2203133f3aa1088df",
    "obsm_varm_p": "d7494c86e1ca59fc58d1356da71c94ff5e6f056c084b0ccc279a89a47026f989",
    "raw_layers": "d71d3aea724dbd722f305cf3ac1c7c8ccbdfa26f5c4cad40395726256ae9c6d2",
    "single_cell": "19865c7bdb7377f543f6da9347cb8ad365b60cc50f7937b595a0be9b661e325b",
    "strings_ascii": "16b581183847f97b5188cb0f8159920b9530d1321325db13afa3602defdbcf4f",
    "uns_nested": "7a3b573695b6b9f73dabaa589d2e01a360f8aeb8c4b0c9dbe74df1d41637b3c6",
    "userblock": "2e313c9bd9cdf3c4cc5d07ae5143e3fbe694511735d8e03c294018626062014b",
}


def test_original_digests_cover_every_fixture():
    assert sorted(ORIGINAL_DIGESTS) == GOOD_NAMES, "fixtures changed: regenerate ORIGINAL_DIGESTS (module doc)"


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_order_original_is_source_order_and_encodings(name, export_opts, oracle):
    """No position column, no priority record; X, layers and raw/X keep the source's encoding and
    data dtype, their indices and indptr share one dtype (int32 where it fits, whatever the
    source's); the store equals the source without any permutation; the whole OUT tree is
    byte for byte the core issue's output."""
    out, r = export_opts(good_path(name), "-o", "order=original")
    assert_clean(r)
    store = store_path(out, name)
    assert_no_priority(store)
    with h5py.File(good_path(name), "r") as f:
        for rel, enc, n_obs, n_vars, dtype in EXPRESSION[name]:
            a = zattrs(store, rel)
            assert a is not None and a.get("encoding-type") == enc, f"{rel}: {a} vs the source's {enc}"
            if enc in ("csr_matrix", "csc_matrix"):
                assert a.get("shape") == [n_obs, n_vars], (rel, a)
                assert zarray(store, f"{rel}/data")["dtype"] == np.dtype(f[rel]["data"].dtype).str, rel
                for k in ("indptr", "indices"):
                    assert zarray(store, f"{rel}/{k}")["dtype"] == "<i4", (rel, k)
            else:
                assert zarray(store, rel)["dtype"] == dtype, rel
    assert_adata_equal(ad.read_zarr(str(store)), oracle(name), dataset_id=fixture_id(name),
                       dataset_name=fixture_name(name))
    assert tree_digest(out) == ORIGINAL_DIGESTS[name], \
        "order=original output is not byte-identical to the core issue's output"


def test_order_priority_explicit_and_last_wins(export_opts, exported):
    name = "raw_layers"
    src = good_path(name)
    default, r0 = exported(name)
    assert r0.returncode == 0, describe(r0)
    cases = {
        "order=priority": ["-o", "order=priority"],
        "order=original,order=priority": ["-o", "order=original,order=priority"],
        "-o order=original -o order=priority": ["-o", "order=original", "-o", "order=priority"],
    }
    for what, args in cases.items():
        out, r = export_opts(src, *args)
        assert r.returncode == 0, (what, describe(r))
        assert_same_tree(out, default, what)
    orig, r1 = export_opts(src, "-o", "order=original")
    assert r1.returncode == 0, describe(r1)
    out, r = export_opts(src, "-o", "order=priority", "-o", "order=original")
    assert r.returncode == 0, describe(r)
    assert_same_tree(out, orig, "-o order=priority -o order=original")


def _assert_usage_error(cfs, tmp_path, *args):
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", *args, good_path("csr_f32"), out)
    assert r.returncode == 1, (args, describe(r))
    assert r.stderr.strip(), "a usage error says what is wrong"
    assert not out.exists() and os.listdir(tmp_path) == [], "nothing is written on a usage error"


@pytest.mark.parametrize("opt", ["order=bogus", "order=", "order"])
def test_order_bad_value_is_usage_error(opt, cfs, tmp_path):
    _assert_usage_error(cfs, tmp_path, "-o", opt)


# ---------------------------------------------------------------------------------------------
# -o priority_seed=N


@pytest.mark.parametrize("name", ["csr_f32", "categoricals"])
def test_seed_changes_order(name, export_opts, exported, oracle):
    n = oracle(name).n_obs
    out0, r0 = exported(name)
    out7, r7 = export_opts(good_path(name), "-o", "priority_seed=7")
    assert r0.returncode == 0, describe(r0)
    assert_clean(r7)
    s0, s7 = store_path(out0, name), store_path(out7, name)
    p0, p7 = store_positions(s0), store_positions(s7)
    assert not np.array_equal(p0, p7), "priority_seed=7 gives the same order as seed 0"
    assert p7.tolist() == reference_order(n, 7).tolist()
    assert_priority_record(s7, n, 7)
    assert_adata_equal(ad.read_zarr(str(s7)), oracle(name), dataset_id=fixture_id(name),
                       dataset_name=fixture_name(name))


def test_seed_zero_explicit_equals_default(export_opts, exported):
    out, r = export_opts(good_path("csr_f32"), "-o", "priority_seed=0")
    assert r.returncode == 0, describe(r)
    default, r0 = exported("csr_f32")
    assert r0.returncode == 0, describe(r0)
    assert_same_tree(out, default, "priority_seed=0 vs default")


def test_seed_last_wins(export_opts):
    src = good_path("csr_f32")
    a, ra = export_opts(src, "-o", "priority_seed=7")
    b, rb = export_opts(src, "-o", "priority_seed=5", "-o", "priority_seed=7")
    c, rc = export_opts(src, "-o", "priority_seed=5,priority_seed=7")
    for r in (ra, rb, rc):
        assert r.returncode == 0, describe(r)
    assert_same_tree(b, a, "-o priority_seed=5 -o priority_seed=7")
    assert_same_tree(c, a, "-o priority_seed=5,priority_seed=7")


@pytest.mark.parametrize("seed", [2 ** 63 - 1, 2 ** 64 - 1])
def test_seed_extremes(seed, export_opts, oracle):
    name = "categoricals"
    out, r = export_opts(good_path(name), "-o", f"priority_seed={seed}")
    assert_clean(r)
    store = store_path(out, name)
    n = oracle(name).n_obs
    assert store_positions(store).tolist() == reference_order(n, seed).tolist()
    assert_priority_record(store, n, seed)


@pytest.mark.parametrize("opt", ["priority_seed=-1", "priority_seed=abc", "priority_seed=", "priority_seed=1.5",
                                 "priority_seed=7x", "priority_seed=18446744073709551616"])
def test_seed_bad_value_is_usage_error(opt, cfs, tmp_path):
    _assert_usage_error(cfs, tmp_path, "-o", opt)


# ---------------------------------------------------------------------------------------------
# -o memory=SIZE: bytes independent of the budget; 16M forces the engine to spill


def make_big_csr_h5ad(path):
    """50,000 cells x 2,000 genes, CSR float32 with ~100 entries a cell (~40 MB of X), X_umap and
    a 4 MB X_pca (over an eighth of memory=16M: put in stored order through a work file)."""
    rng = np.random.default_rng(50)
    n, m, k = 50_000, 2_000, 100
    cols = np.sort(rng.integers(0, m, size=(n, k)), axis=1)
    keep = np.ones(cols.shape, dtype=bool)
    keep[:, 1:] = cols[:, 1:] != cols[:, :-1]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(keep.sum(axis=1), out=indptr[1:])
    indices = cols[keep].astype(np.int32)
    data = (rng.random(indices.size, dtype=np.float32) * 10 + 0.25).astype(np.float32)
    X = sp.csr_matrix((data, indices, indptr), shape=(n, m))
    obs = pd.DataFrame({"batch": pd.Categorical(rng.choice(["a", "b", "c"], n))},
                       index=[f"cell{i}" for i in range(n)])
    a = ad.AnnData(X, obs=obs, var=pd.DataFrame(index=[f"g{j}" for j in range(m)]), dtype=np.float32)
    a.obsm["X_umap"] = rng.standard_normal((n, 2)).astype(np.float32)
    a.obsm["X_pca"] = rng.standard_normal((n, 20)).astype(np.float32)
    a.write_h5ad(path)
    return path


def make_big_dense_h5ad(path):
    """20,000 cells x 300 genes: CSC float32 X (gene-major source) and a dense float32 layer
    (24 MB)."""
    rng = np.random.default_rng(20)
    n, m = 20_000, 300
    X = sp.random(n, m, density=0.05, format="csc", dtype=np.float32, random_state=rng)
    a = ad.AnnData(X, obs=pd.DataFrame(index=[f"cell{i}" for i in range(n)]),
                   var=pd.DataFrame(index=[f"g{j}" for j in range(m)]), dtype=np.float32)
    a.layers["dense"] = rng.random((n, m), dtype=np.float32)
    a.obsm["X_umap"] = rng.standard_normal((n, 2)).astype(np.float32)
    a.write_h5ad(path)
    return path


BIG = {"csr50k": make_big_csr_h5ad, "dense20k": make_big_dense_h5ad}


@pytest.fixture(scope="module")
def big_h5ad(tmp_path_factory):
    cache = {}

    def get(which):
        if which not in cache:
            d = tmp_path_factory.mktemp("big")
            cache[which] = BIG[which](d / f"{which}.h5ad")
        return cache[which]

    return get


@pytest.mark.parametrize("which", sorted(BIG))
def test_memory_budget_does_not_change_bytes(which, big_h5ad, export_opts):
    """memory=16M (spills) and memory=1G (need not) give byte-identical trees; the 16M store is
    exactly the source, priority-ordered and gene-major, in full."""
    src = big_h5ad(which)
    small, rs = export_opts(src, "-o", "memory=16M")
    large, rl = export_opts(src, "-o", "memory=1G")
    assert_clean(rs)
    assert_clean(rl)
    assert_same_tree(small, large, "memory=16M vs memory=1G")

    store = store_path(small, which)
    check_consolidated(store)
    check_chunks(store)
    check_chunk_limits(store)
    a = ad.read_h5ad(src)
    n = a.n_obs
    pos = store_positions(store)
    assert pos.tolist() == reference_order(n, 0).tolist()
    assert_priority_record(store, n, 0)
    g = open_store(store)
    for key in a.obsm:
        assert same_bytes(g[f"obsm/{key}"][:], a.obsm[key][pos]), key
    for rel, enc, n_obs, n_vars, dtype in source_expression(src):
        s = source_element(a, rel)
        if enc in ("csr_matrix", "csc_matrix"):
            indptr, indices = check_sparse_gene_major(store, rel, n_obs, n_vars, dtype)
            want = expected_gene_major(s, pos)
            assert np.array_equal(indptr, want.indptr), f"{rel}/indptr differs"
            assert np.array_equal(indices, want.indices), f"{rel}/indices differ"
            assert same_bytes(g[f"{rel}/data"][:], want.data), f"{rel}/data differs"
        else:
            check_dense_gene_major(store, rel, n_obs, n_vars, dtype)
            assert same_bytes(g[rel][:], np.asarray(s)[pos]), f"{rel} differs"


@pytest.mark.parametrize("memory,through_file", [("16M", True), ("1G", False)])
def test_large_obsm_goes_through_a_work_file(memory, through_file, big_h5ad, mounts):
    """A mounted obsm entry over an eighth of -o memory (X_pca, 4 MB, at 16M) is put in stored
    order in a work file counted against cache_size (status.json cache.work_bytes); at 1G it is
    held in memory and no work space is used. Either way it reads back as the source's rows in
    priority order."""
    src = big_h5ad("csr50k")
    m = mounts(src.parent, opts=[f"memory={memory}"])
    store = m.mnt / "csr50k.zarr"
    pos = store_positions(store)
    a = ad.read_h5ad(src)
    assert m.status()["cache"]["work_bytes"] == 0
    got = open_store(store)["obsm/X_pca"][:]
    assert same_bytes(got, a.obsm["X_pca"][pos])
    work = m.status()["cache"]["work_bytes"]
    if through_file:
        assert work >= a.obsm["X_pca"].nbytes, work
    else:
        assert work == 0, work


@pytest.mark.parametrize("name", ["raw_layers", "dtypes", "csr_f32", "obsm_varm_p"])
def test_memory_budget_fixtures(name, export_opts, exported):
    default, r0 = exported(name)
    assert r0.returncode == 0, describe(r0)
    for opt in ("memory=16M", "memory=1G", "memory=512M"):
        out, r = export_opts(good_path(name), "-o", opt)
        assert r.returncode == 0, (opt, describe(r))
        assert_same_tree(out, default, f"{opt} vs default")


@pytest.mark.parametrize("opt", ["memory=banana", "memory=", "memory=-16M", "memory"])
def test_memory_bad_value_is_usage_error(opt, cfs, tmp_path):
    _assert_usage_error(cfs, tmp_path, "-o", opt)


# ---------------------------------------------------------------------------------------------
# regenerating ORIGINAL_DIGESTS


def _print_digests(binary):
    import subprocess

    digests = {}
    for name in GOOD_NAMES:
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "out"
            subprocess.run([binary, "export", "-o", "order=original", str(good_path(name)), str(out)],
                           check=True, capture_output=True)
            digests[name] = tree_digest(out)
    for name, h in digests.items():
        print(f'    "{name}": "{h}",')


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--digests":
        _print_digests(sys.argv[2])
    else:
        sys.exit(f"usage: {sys.argv[0]} --digests BINARY")
