"""Shared helpers of the Python end-to-end tests of cellucid-fs.

Run with Debian's interpreter (anndata 0.8, zarr 2.13, h5py 3.7):

    /usr/bin/python3 -m pytest tests

The binary is $CELLUCID_FS, else <repo>/cellucid-fs. A missing binary fails the tests that need
it (never a silent skip). Fixtures come from tests/fixtures/make_h5ad_fixtures.py; each fixture's
manifest entry says how its reference ("oracle") is read:

  anndata          anndata.read_h5ad(file)
  normalise-attrs  anndata 0.8 cannot read the file (encoding attributes stored as 1-element
                   arrays): read_h5ad of a copy whose attributes h5py rewrote as scalars
  drop             the file holds elements that cannot be read (unknown encoding, wrong length):
                   read_h5ad of a copy from which h5py deleted them (and removed them from
                   column-order); the store must equal that, i.e. have the rest and lack them
"""

import itertools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import time
import warnings
from collections.abc import Mapping
from pathlib import Path

import anndata as ad
import h5py
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from nginx import Nginx

warnings.simplefilter("ignore")

REPO = Path(__file__).resolve().parent.parent
FIXTURES_DIR = REPO / "tests" / "fixtures"
GOOD_DIR = FIXTURES_DIR / "h5ad"
BAD_DIR = FIXTURES_DIR / "bad"
GENERATOR = FIXTURES_DIR / "make_h5ad_fixtures.py"

TIMEOUT = float(os.environ.get("CELLUCID_FS_TIMEOUT", "120"))


def load_manifest(folder, generator=GENERATOR.name):
    """The manifest of tests/fixtures/<folder>/ (the parsed manifest.json); a missing one stops
    the run with the command that generates it (tests/fixtures/<generator>)."""
    path = FIXTURES_DIR / folder / "manifest.json"
    if not path.is_file():
        raise pytest.UsageError(
            f"{path} is missing: generate the fixtures with /usr/bin/python3 "
            f"{(FIXTURES_DIR / generator).relative_to(REPO)}"
        )
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


GOOD = load_manifest(GOOD_DIR.name)["fixtures"]
BAD = load_manifest(BAD_DIR.name)["bad"]
GOOD_NAMES = sorted(GOOD)
REFUSED_NAMES = sorted(k for k, v in BAD.items() if v["expect"] == "refused")
LEFT_OUT_NAMES = sorted(k for k, v in BAD.items() if v["expect"] == "left_out")


def good_path(name):
    return GOOD_DIR / GOOD[name]["file"]


def bad_path(name):
    return BAD_DIR / BAD[name]["file"]


# ---------------------------------------------------------------------------------------------
# the binary


def binary_path():
    return Path(os.environ.get("CELLUCID_FS", str(REPO / "cellucid-fs")))


@pytest.fixture(scope="session")
def cfs():
    """Path of the cellucid-fs binary; fails (does not skip) when it is missing."""
    p = binary_path()
    if not p.is_file() or not os.access(p, os.X_OK):
        pytest.fail(
            f"cellucid-fs binary not found or not executable at {p}: build it "
            f"(autoreconf -fi && ./configure && make) or point $CELLUCID_FS at it",
            pytrace=False,
        )
    return p


def _limit_memory(limit_bytes):
    def pre():
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return pre


def mounted(mnt):
    """Whether mnt is a mount point now (from /proc/self/mountinfo)."""
    real = os.path.realpath(mnt)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            fields = line.split()
            if len(fields) > 4:
                point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
                if point == real:
                    return True
    return False


def run_cfs(cfs_path, *args, timeout=TIMEOUT, mem_limit=None, cwd=None, env=None):
    """Runs the binary; returns CompletedProcess with text stdout/stderr. mem_limit (bytes) caps
    the address space (unset it with CELLUCID_FS_NO_RLIMIT=1, e.g. for sanitizer builds); env
    replaces the environment."""
    pre = None
    if mem_limit and not os.environ.get("CELLUCID_FS_NO_RLIMIT"):
        pre = _limit_memory(mem_limit)
    try:
        r = subprocess.run(
            [str(cfs_path), *[str(a) for a in args]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout,
            preexec_fn=pre,
            cwd=cwd,
            env=env,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"cellucid-fs {' '.join(map(str, args))} did not finish in {timeout} s", pytrace=False)
    r.stdout = r.stdout.decode("utf-8", errors="backslashreplace")
    r.stderr = r.stderr.decode("utf-8", errors="backslashreplace")
    return r


def describe(r):
    return f"exit {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"


def refused_lines(stderr):
    return [l for l in stderr.splitlines() if ": refused: " in l]


def left_out_lines(stderr):
    return [l for l in stderr.splitlines() if ": left out " in l]


# ---------------------------------------------------------------------------------------------
# ids and names (docs/cli-contract.md)


def strip_format_ext(filename):
    for ext in (".h5ad", ".hdf5", ".h5"):
        if filename.endswith(ext) and len(filename) > len(ext):
            return filename[: -len(ext)]
    return filename


def expected_id(filename):
    stem = strip_format_ext(filename)
    s = "".join(c if re.fullmatch(r"[A-Za-z0-9._-]", c) else "_" for c in stem)
    s = re.sub(r"^[^A-Za-z0-9]+", "", s)
    s = s[:180].rstrip(".")
    return s or "dataset"


def fixture_id(name):
    e = GOOD[name]
    return e.get("expect_id") or expected_id(e["file"])


def fixture_name(name):
    e = GOOD[name]
    return e.get("expect_name") or strip_format_ext(e["file"])


def catalog_text(ids):
    ids = sorted(ids)
    doc = {"schema": 2, "default": ids[0] if ids else None,
           "datasets": [{"id": i, "path": f"{i}.zarr/"} for i in ids]}
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def read_catalog(out):
    with open(Path(out) / "datasets.json", encoding="utf-8") as fh:
        return json.load(fh)


FLT_MAX = float(np.finfo(np.float32).max)


def expected_drawable(value, n_obs):
    """The contract's rule: an obsm array Cellucid can draw is dense, numeric, one row per cell,
    >= 1 column, has a row of finite values within float32, and is not one point for every cell
    (rows holding a non-finite value are not drawn and do not count)."""
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
        return False
    if value.ndim not in (1, 2) or value.shape[0] != n_obs or n_obs == 0:
        return False
    cols = value.shape[1] if value.ndim == 2 else 1
    if cols == 0:
        return False
    x = value.astype(np.float64).reshape(n_obs, cols)
    finite = np.isfinite(x)
    rows = finite.all(axis=1)
    if not rows.any():
        return False
    if (np.abs(x[finite]) > FLT_MAX).any():
        return False
    fr = x[rows]
    return bool((fr != fr[0]).any())


def in_catalog(adata):
    """Whether a dataset is listed in datasets.json: it has a drawable obsm array."""
    return any(expected_drawable(v, adata.n_obs) for v in adata.obsm.values())


NOT_IN_CATALOG = ("not in datasets.json: no obsm array can be drawn as an embedding; "
                  "add one (e.g. scanpy's sc.tl.umap) and export again")


def not_in_catalog_lines(stderr):
    return [l for l in stderr.splitlines() if ": not in datasets.json: " in l]


def assert_catalog(out, ids, stores=None):
    """datasets.json lists exactly ids, per the contract, byte for byte as json.dumps(indent=2);
    OUT holds exactly the stores `stores` (default: ids; a dataset without a drawable embedding
    has a store but is not listed)."""
    stores = ids if stores is None else stores
    text = (Path(out) / "datasets.json").read_text(encoding="utf-8")
    doc = json.loads(text)
    ids = sorted(ids)
    assert doc["schema"] == 2, text
    assert [d["id"] for d in doc["datasets"]] == ids, text
    assert [d["path"] for d in doc["datasets"]] == [f"{i}.zarr/" for i in ids], text
    if ids:
        assert doc["default"] == ids[0], text
    assert list(doc.keys()) == ["schema", "default", "datasets"], text
    assert text.endswith("\n") and not text.endswith("\n\n"), repr(text[-5:])
    assert text == catalog_text(ids), f"datasets.json is not json.dumps(indent=2):\n{text}"
    have = sorted(p.name for p in Path(out).iterdir() if p.name.endswith(".zarr"))
    assert have == sorted(f"{i}.zarr" for i in stores), have


# ---------------------------------------------------------------------------------------------
# oracles


def h5_str_attr(attrs, key, default=None):
    """A string attribute however it is stored: vlen or fixed, scalar or 1-element array."""
    if key not in attrs:
        return default
    v = attrs[key]
    if isinstance(v, np.ndarray):
        if v.size != 1:
            return [x.decode() if isinstance(x, bytes) else str(x) for x in v.ravel()]
        v = v.ravel()[0]
    if isinstance(v, bytes):
        return v.decode("utf-8")
    return str(v)


def _visit_all(f):
    out = [("/", f)]
    f.visititems(lambda n, o: out.append((n, o)))
    return out


def normalise_attrs_copy(src, dst):
    """Copy of src whose encoding attributes stored as 1-element arrays are plain scalars."""
    shutil.copyfile(src, dst)
    with h5py.File(dst, "r+") as f:
        for _, o in _visit_all(f):
            for k in ("encoding-type", "encoding-version"):
                if k in o.attrs and isinstance(o.attrs[k], np.ndarray):
                    v = h5_str_attr(o.attrs, k)
                    del o.attrs[k]
                    o.attrs[k] = v


def drop_elements_copy(src, dst, elements):
    """Copy of src without the given elements (and without them in their column-order)."""
    shutil.copyfile(src, dst)
    with h5py.File(dst, "r+") as f:
        for el in elements:
            parent, name = el.rsplit("/", 1)
            del f[el]
            g = f[parent]
            if "column-order" in g.attrs:
                order = h5_str_attr(g.attrs, "column-order")
                order = [order] if isinstance(order, str) else list(order)
                order = [c for c in order if c != name]
                g.attrs["column-order"] = np.array(order, dtype=h5py.string_dtype()) if order else np.zeros(0)


def read_oracle(path, oracle, tmpdir):
    """anndata's reading of the source, per the manifest's oracle entry (see module doc)."""
    kind = oracle["kind"]
    if kind == "anndata":
        return ad.read_h5ad(path)
    tmpdir = Path(tmpdir)
    tmpdir.mkdir(parents=True, exist_ok=True)
    q = tmpdir / ("oracle-" + Path(path).name)
    if kind == "normalise-attrs":
        normalise_attrs_copy(path, q)
    elif kind == "drop":
        drop_elements_copy(path, q, oracle["elements"])
    else:
        raise AssertionError(f"unknown oracle kind {kind}")
    return ad.read_h5ad(q)


@pytest.fixture(scope="session")
def oracle(tmp_path_factory):
    """oracle(name) -> anndata reading of the good fixture `name` (cached)."""
    cache = {}
    d = tmp_path_factory.mktemp("oracle")

    def get(name, bad=False):
        key = (name, bad)
        if key not in cache:
            e = BAD[name] if bad else GOOD[name]
            p = bad_path(name) if bad else good_path(name)
            cache[key] = read_oracle(p, e.get("oracle", {"kind": "anndata"}), d)
        return cache[key]

    return get


@pytest.fixture(scope="session")
def exported(cfs, tmp_path_factory):
    """exported(name) -> (OUT, CompletedProcess) of `cellucid-fs export FIXTURE OUT` (cached)."""
    cache = {}

    def get(name):
        if name not in cache:
            out = tmp_path_factory.mktemp("export-" + name) / "out"
            r = run_cfs(cfs, "export", good_path(name), out)
            cache[name] = (out, r)
        return cache[name]

    return get


# ---------------------------------------------------------------------------------------------
# comparing AnnData objects


class Diffs:
    def __init__(self):
        self.items = []

    def add(self, path, msg):
        self.items.append(f"{path}: {msg}")

    def check(self):
        if self.items:
            shown = self.items[:60]
            more = f"\n... and {len(self.items) - 60} more" if len(self.items) > 60 else ""
            raise AssertionError("stores differ from the source:\n  " + "\n  ".join(shown) + more)


def _norm_sparse(m):
    """Sparse matrix with int64 indices (scipy refuses some index types anndata may read)."""
    m = m.tocsr() if m.format not in ("csr", "csc") else m
    cls = sp.csr_matrix if m.format == "csr" else sp.csc_matrix
    return cls((np.asarray(m.data), np.asarray(m.indices, dtype=np.int64), np.asarray(m.indptr, dtype=np.int64)),
               shape=m.shape)


def _dense(x):
    return _norm_sparse(x).toarray() if sp.issparse(x) else np.asarray(x)


def _values_equal(a, b):
    """Exact equality of two numpy arrays of one dtype; NaN equals NaN (whatever its sign bit:
    R's 0/0 is a negative NaN, a text oracle's "nan" a positive one), -0.0 differs from 0.0."""
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "fc":
        if not np.array_equal(a, b, equal_nan=True):
            return False
        number = ~np.isnan(a.real)
        return np.array_equal(np.signbit(a.real[number]), np.signbit(b.real[number]))
    if a.dtype.kind == "O" or b.dtype.kind == "O":
        la, lb = list(a.ravel()), list(b.ravel())
        return la == lb and [type(x) for x in la] == [type(x) for x in lb]
    return np.array_equal(a, b)


def _cmp_array(a, b, path, d):
    """a from the store, b from the source."""
    if sp.issparse(a) != sp.issparse(b):
        d.add(path, f"{'sparse' if sp.issparse(a) else 'dense'} in the store, "
                    f"{'sparse' if sp.issparse(b) else 'dense'} in the source")
        return
    if a.shape != b.shape:
        d.add(path, f"shape {a.shape} != {b.shape}")
        return
    if sp.issparse(a):
        if a.dtype != b.dtype:
            d.add(path, f"dtype {a.dtype} != {b.dtype}")
            return
        if not _values_equal(_dense(a), _dense(b)):
            d.add(path, "values differ")
        return
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.names is not None or b.dtype.names is not None:
        _cmp_recarray(a, b, path, d)
        return
    if a.dtype != b.dtype:
        d.add(path, f"dtype {a.dtype} != {b.dtype}")
        return
    if not _values_equal(a, b):
        d.add(path, "values differ")


def _cmp_recarray(a, b, path, d):
    if a.dtype.names != b.dtype.names:
        d.add(path, f"record fields {a.dtype.names} != {b.dtype.names}")
        return
    for name in a.dtype.names:
        fa, fb = a[name], b[name]
        if fa.dtype.kind in "OUS" or fb.dtype.kind in "OUS":
            # anndata reads string fields as object (vlen) from h5ad and zarr alike; accept U too
            la = [x.decode() if isinstance(x, bytes) else str(x) for x in fa.ravel()]
            lb = [x.decode() if isinstance(x, bytes) else str(x) for x in fb.ravel()]
            if fa.dtype.kind not in "OU" or la != lb:
                d.add(f"{path}[{name}]", f"string field differs: {la} != {lb} ({fa.dtype} vs {fb.dtype})")
        elif fa.dtype != fb.dtype:
            d.add(f"{path}[{name}]", f"dtype {fa.dtype} != {fb.dtype}")
        elif not _values_equal(fa, fb):
            d.add(f"{path}[{name}]", "values differ")


def _cmp_index(a, b, path, d):
    if a.dtype != b.dtype:
        d.add(path, f"dtype {a.dtype} != {b.dtype}")
    la, lb = list(a), list(b)
    if la != lb or [type(x) for x in la] != [type(x) for x in lb]:
        d.add(path, f"values differ: {la[:8]}... != {lb[:8]}...")
    if a.name != b.name:
        d.add(path, f"name {a.name!r} != {b.name!r}")


def _cmp_series(a, b, path, d):
    if isinstance(a.dtype, pd.CategoricalDtype) or isinstance(b.dtype, pd.CategoricalDtype):
        if not (isinstance(a.dtype, pd.CategoricalDtype) and isinstance(b.dtype, pd.CategoricalDtype)):
            d.add(path, f"dtype {a.dtype} != {b.dtype}")
            return
        if a.cat.ordered != b.cat.ordered:
            d.add(path, f"ordered {a.cat.ordered} != {b.cat.ordered}")
        ca, cb = a.cat.categories, b.cat.categories
        if ca.dtype != cb.dtype or list(ca) != list(cb):
            d.add(path, f"categories {list(ca)[:10]} ({ca.dtype}) != {list(cb)[:10]} ({cb.dtype})")
        if not np.array_equal(a.cat.codes.to_numpy(), b.cat.codes.to_numpy()):
            d.add(path, "codes differ")
        return
    if str(a.dtype) != str(b.dtype):
        d.add(path, f"dtype {a.dtype} != {b.dtype}")
        return
    if pd.api.types.is_extension_array_dtype(a.dtype):
        na, nb = a.isna().to_numpy(), b.isna().to_numpy()
        if not np.array_equal(na, nb):
            d.add(path, "missing-value mask differs")
            return
        va = a[~na].to_numpy(dtype=a.dtype.numpy_dtype)
        vb = b[~nb].to_numpy(dtype=b.dtype.numpy_dtype)
        if not _values_equal(va, vb):
            d.add(path, "values differ")
        return
    if not _values_equal(a.to_numpy(), b.to_numpy()):
        d.add(path, "values differ")


def _cmp_df(a, b, path, d):
    if not isinstance(a, pd.DataFrame) or not isinstance(b, pd.DataFrame):
        d.add(path, f"type {type(a).__name__} != {type(b).__name__}")
        return
    _cmp_index(a.index, b.index, path + ".index", d)
    if list(a.columns) != list(b.columns):
        d.add(path, f"columns {list(a.columns)} != {list(b.columns)}")
    for c in b.columns:
        if c in a.columns:
            _cmp_series(a[c], b[c], f"{path}[{c!r}]", d)


def _cmp_value(a, b, path, d):
    """Recursive comparison of uns-like values (a: store, b: source)."""
    if isinstance(b, Mapping):
        if not isinstance(a, Mapping):
            d.add(path, f"type {type(a).__name__} != mapping")
            return
        _cmp_mapping(a, b, path, d)
    elif isinstance(b, pd.DataFrame):
        _cmp_df(a, b, path, d)
    elif sp.issparse(b) or isinstance(b, np.ndarray):
        if not (sp.issparse(a) or isinstance(a, np.ndarray)):
            d.add(path, f"type {type(a).__name__} != {type(b).__name__}")
            return
        _cmp_array(a, b, path, d)
    elif isinstance(b, str):
        if not isinstance(a, str) or a != b:
            d.add(path, f"{a!r} != {b!r}")
    elif isinstance(b, (np.generic, int, float, bool, complex)):
        if not isinstance(a, (np.generic, int, float, bool, complex)) or isinstance(a, (str, bytes)):
            d.add(path, f"{a!r} ({type(a).__name__}) != {b!r} ({type(b).__name__})")
            return
        xa, xb = np.asarray(a), np.asarray(b)
        if xa.dtype != xb.dtype:
            d.add(path, f"scalar dtype {xa.dtype} != {xb.dtype} ({a!r} vs {b!r})")
        elif not _values_equal(xa, xb):
            d.add(path, f"{a!r} != {b!r}")
    else:
        if type(a) is not type(b) or a != b:
            d.add(path, f"{a!r} ({type(a).__name__}) != {b!r} ({type(b).__name__})")


def _cmp_mapping(a, b, path, d):
    ka, kb = set(a.keys()), set(b.keys())
    if ka - kb:
        d.add(path, f"keys only in the store: {sorted(ka - kb)}")
    if kb - ka:
        d.add(path, f"keys missing from the store: {sorted(kb - ka)}")
    for k in sorted(ka & kb):
        _cmp_value(a[k], b[k], f"{path}/{k}", d)


def _take_rows(x, order):
    if x is None:
        return None
    if isinstance(x, pd.DataFrame):
        return x.iloc[order]
    if sp.issparse(x):
        m = _norm_sparse(x)
        cls = sp.csr_matrix if m.format == "csr" else sp.csc_matrix
        return cls(m[order, :])
    return np.asarray(x)[order]


def _take_both(x, order):
    if sp.issparse(x):
        m = _norm_sparse(x)
        cls = sp.csr_matrix if m.format == "csr" else sp.csc_matrix
        return cls(m[order, :][:, order])
    return np.asarray(x)[order][:, order]


def _plain(m):
    return {k: m[k] for k in m.keys()}


class _Parts:
    """The parts of an AnnData to compare, with the store's priority order undone."""

    def __init__(self, a, d, side):
        self.n_obs, self.n_vars = a.n_obs, a.n_vars
        self.obs = a.obs.copy()
        self.var = a.var
        self.X = a.X
        self.layers = _plain(a.layers)
        self.obsm = _plain(a.obsm)
        self.varm = _plain(a.varm)
        self.obsp = _plain(a.obsp)
        self.varp = _plain(a.varp)
        self.uns = _plain(a.uns)
        self.raw = None
        if a.raw is not None:
            self.raw = {"X": a.raw.X, "var": a.raw.var, "varm": _plain(a.raw.varm)}
        if side == "store" and "cellucid_original_position" in self.obs.columns:
            pos = self.obs["cellucid_original_position"].to_numpy()
            if pos.dtype != np.int64:
                d.add("obs['cellucid_original_position']", f"dtype {pos.dtype}, expected int64")
            if not np.array_equal(np.sort(pos), np.arange(self.n_obs)):
                d.add("obs['cellucid_original_position']", "is not a permutation of 0..n_obs-1")
                return
            order = np.argsort(pos, kind="stable")  # store row order[k] holds original row k
            self.obs = self.obs.iloc[order].drop(columns=["cellucid_original_position"])
            self.X = _take_rows(self.X, order)
            self.layers = {k: _take_rows(v, order) for k, v in self.layers.items()}
            self.obsm = {k: _take_rows(v, order) for k, v in self.obsm.items()}
            self.obsp = {k: _take_both(v, order) for k, v in self.obsp.items()}
            if self.raw is not None:
                self.raw["X"] = _take_rows(self.raw["X"], order)


def check_cellucid_record(store_uns, src_uns, dataset_id, dataset_name, d):
    """uns['cellucid'] of a store: schema 1, id, name; the source's other keys kept."""
    c = store_uns.get("cellucid")
    if not isinstance(c, Mapping):
        d.add("uns/cellucid", f"missing or not a dict: {c!r}")
        return
    schema = c.get("schema")
    if not isinstance(schema, (int, np.integer)) or isinstance(schema, (bool, np.bool_)) or schema != 1:
        d.add("uns/cellucid/schema", f"{schema!r}, expected the integer 1")
    if c.get("id") != dataset_id or not isinstance(c.get("id"), str):
        d.add("uns/cellucid/id", f"{c.get('id')!r}, expected {dataset_id!r}")
    if dataset_name is not None and (c.get("name") != dataset_name or not isinstance(c.get("name"), str)):
        d.add("uns/cellucid/name", f"{c.get('name')!r}, expected {dataset_name!r}")
    src_c = src_uns.get("cellucid")
    if isinstance(src_c, Mapping):
        for k, v in src_c.items():
            if k in ("id", "name"):
                continue
            if k not in c:
                d.add(f"uns/cellucid/{k}", "the source's key is missing from the store")
            else:
                _cmp_value(c[k], v, f"uns/cellucid/{k}", d)


def assert_adata_equal(store_adata, src_adata, *, dataset_id=None, dataset_name=None):
    """Fails on any difference between a store (read by anndata.read_zarr) and its source.

    - The store may be in priority order: when its obs has `cellucid_original_position`
      (int64 permutation), rows of obs, X, layers, obsm, obsp (rows and columns) and raw.X are
      put back in source order and the column is dropped before comparing.
    - Sparse matrices compare by dtype, shape and values, not by csr/csc format (a store may
      serve X gene-major); dense vs sparse must agree.
    - With dataset_id given, uns['cellucid'] of the store is checked (schema 1, id, name, the
      source's other keys kept) and then removed from both sides; the rest of uns must be equal.
    """
    d = Diffs()
    if store_adata.shape != src_adata.shape:
        d.add("shape", f"{store_adata.shape} != {src_adata.shape}")
        d.check()
    s = _Parts(store_adata, d, "store")
    o = _Parts(src_adata, d, "source")
    d.check()

    _cmp_df(s.obs, o.obs, "obs", d)
    _cmp_df(s.var, o.var, "var", d)
    if (s.X is None) != (o.X is None):
        d.add("X", f"{'absent' if s.X is None else 'present'} in the store, "
                   f"{'absent' if o.X is None else 'present'} in the source")
    elif s.X is not None:
        _cmp_array(s.X, o.X, "X", d)
    for part in ("layers", "obsm", "varm", "obsp", "varp"):
        _cmp_mapping(getattr(s, part), getattr(o, part), part, d)

    su, ou = dict(s.uns), dict(o.uns)
    if dataset_id is not None:
        check_cellucid_record(su, ou, dataset_id, dataset_name, d)
        su.pop("cellucid", None)
        ou.pop("cellucid", None)
    _cmp_mapping(su, ou, "uns", d)

    if (s.raw is None) != (o.raw is None):
        d.add("raw", f"{'absent' if s.raw is None else 'present'} in the store, "
                     f"{'absent' if o.raw is None else 'present'} in the source")
    elif s.raw is not None:
        _cmp_array(s.raw["X"], o.raw["X"], "raw/X", d)
        _cmp_df(s.raw["var"], o.raw["var"], "raw/var", d)
        _cmp_mapping(s.raw["varm"], o.raw["varm"], "raw/varm", d)
    d.check()


# ---------------------------------------------------------------------------------------------
# store structure


def store_files(root):
    root = Path(root)
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def tree_bytes(root):
    root = Path(root)
    return {rel: (root / rel).read_bytes() for rel in store_files(root)}


META_NAMES = (".zarray", ".zattrs", ".zgroup")


def check_consolidated(store):
    """.zmetadata lists every .zarray/.zattrs/.zgroup, equal (as JSON) to the files; every node
    has a .zattrs; zarr.open_consolidated reads it."""
    import zarr

    store = Path(store)
    zm_path = store / ".zmetadata"
    assert zm_path.is_file(), f"{store}: no .zmetadata"
    zm = json.loads(zm_path.read_text(encoding="utf-8"))
    assert zm.get("zarr_consolidated_format") == 1, zm.get("zarr_consolidated_format")
    meta = zm["metadata"]
    on_disk = {}
    for rel in store_files(store):
        if rel.rsplit("/", 1)[-1] in META_NAMES:
            on_disk[rel] = json.loads((store / rel).read_text(encoding="utf-8"))
    problems = []
    for k in sorted(set(on_disk) - set(meta)):
        problems.append(f"{k} exists but is not in .zmetadata")
    for k in sorted(set(meta) - set(on_disk)):
        problems.append(f"{k} is in .zmetadata but not a file")
    for k in sorted(set(meta) & set(on_disk)):
        if meta[k] != on_disk[k]:
            problems.append(f"{k}: .zmetadata {meta[k]} != file {on_disk[k]}")
    assert ".zgroup" in on_disk, "the store root has no .zgroup"
    nodes = {k.rsplit("/", 1)[0] if "/" in k else "" for k in on_disk if k.endswith((".zgroup", ".zarray"))}
    for n in sorted(nodes):
        za = (n + "/.zattrs") if n else ".zattrs"
        if za not in on_disk:
            problems.append(f"node {n or '/'} has no .zattrs")
        if (n + "/.zgroup" if n else ".zgroup") in on_disk and (n + "/.zarray" if n else ".zarray") in on_disk:
            problems.append(f"node {n or '/'} is both group and array")
    assert not problems, "\n".join(problems)
    g = zarr.open_consolidated(str(store), mode="r")
    seen = []
    g.visititems(lambda name, obj: seen.append(name))
    return meta


def iter_arrays(store):
    store = Path(store)
    for p in sorted(store.rglob(".zarray")):
        yield p.parent, json.loads(p.read_text(encoding="utf-8"))


def chunk_keys(zarray):
    shape, chunks = zarray["shape"], zarray["chunks"]
    sep = zarray.get("dimension_separator", ".") or "."
    if len(shape) == 0:
        return ["0"]
    grid = [math.ceil(s / c) if c else 0 for s, c in zip(shape, chunks)]
    return [sep.join(str(i) for i in idx) for idx in itertools.product(*[range(g) for g in grid])]


def check_chunks(store):
    """Every chunk of every array's grid is a file (no holes), nothing outside the grid,
    fill_value concrete, filters only vlen-utf8 on object (string) arrays."""
    problems = []
    for adir, za in iter_arrays(store):
        rel = adir.relative_to(store).as_posix()
        if za.get("zarr_format") != 2:
            problems.append(f"{rel}: zarr_format {za.get('zarr_format')}")
        if za.get("fill_value") is None:
            problems.append(f"{rel}: fill_value is null")
        if za.get("order") != "C":
            problems.append(f"{rel}: order {za.get('order')}")
        if any(c < 1 for c in za["chunks"]) or len(za["chunks"]) != len(za["shape"]):
            problems.append(f"{rel}: chunks {za['chunks']} for shape {za['shape']}")
            continue
        filters = za.get("filters")
        if za["dtype"] == "|O":
            if filters != [{"id": "vlen-utf8"}]:
                problems.append(f"{rel}: object array with filters {filters}")
        elif filters not in (None, []):
            problems.append(f"{rel}: filters {filters} on a {za['dtype']} array")
        want = set(chunk_keys(za))
        have = {p.relative_to(adir).as_posix() for p in adir.rglob("*")
                if p.is_file() and not p.name.startswith(".z")}
        # subgroups/arrays never live inside an array directory
        missing = sorted(want - have)
        extra = sorted(have - want)
        if missing:
            problems.append(f"{rel}: missing chunks {missing[:10]} (of {len(want)})")
        if extra:
            problems.append(f"{rel}: files outside the chunk grid {extra[:10]}")
    assert not problems, "\n".join(problems)


def snapshot(paths):
    """(mtime_ns, size, bytes) of every file below the given folders/files, and folder listings."""
    snap = {}
    for root in paths:
        root = Path(root)
        items = [root] + sorted(root.rglob("*")) if root.is_dir() else [root]
        for p in items:
            st = p.stat()
            if p.is_dir():
                snap[str(p)] = ("dir", st.st_mtime_ns, tuple(sorted(os.listdir(p))))
            else:
                snap[str(p)] = ("file", st.st_mtime_ns, st.st_size, p.read_bytes())
    return snap


def leftover_temp(parent, out_name):
    """Names in parent that look like the export's temporary siblings of OUT."""
    return sorted(n for n in os.listdir(parent) if n != out_name and (".tmp" in n or n.startswith("." + out_name)))


# ---------------------------------------------------------------------------------------------
# mounting (every test that mounts uses these: unmounted at teardown, whatever happened)


# How long a mount may take to come up, and its daemon to exit after the unmount: a sanitizer
# build (tests/run-sanitized) runs every reader worker under the sanitizer too, several times
# slower, so it sets longer ones.
READY_TIMEOUT = float(os.environ.get("CELLUCID_FS_READY_TIMEOUT", "20"))
EXIT_TIMEOUT = float(os.environ.get("CELLUCID_FS_EXIT_TIMEOUT", "15"))


# ---------------------------------------------------------------------------------------------
# mounting


# ---- reader worker processes (docs/design.md §2.4) ------------------------------------------

READER_WORKER = "cfs-reader"     # a reader worker's process name (src/isolate/worker.h)
FORKSERVER = "cfs-forkserver"    # the process that forks them (src/isolate/forkserver.c)


def processes():
    """(pid, ppid, state, name) of every process."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        name, rest = stat.split(" (", 1)[1].rsplit(")", 1)
        fields = rest.split()
        out.append((int(d.name), int(fields[1]), fields[0], name))
    return out


def workers_of(pid):
    """The reader workers of a daemon: its children (the fork server forks them as such)."""
    return sorted(p for p, ppid, state, name in processes()
                  if ppid == pid and name == READER_WORKER and state != "Z")


def zombies_of(pid):
    return [p for p, ppid, state, name in processes() if ppid == pid and state == "Z"]


def processes_of(binary, names=None):
    """Pids of the processes running binary (of those named in names, when given)."""
    found = []
    for p, ppid, state, name in processes():
        if names is not None and name not in names:
            continue
        try:
            if os.path.realpath(f"/proc/{p}/exe") == os.path.realpath(binary):
                found.append(p)
        except OSError:
            pass
    return found


def workers_of_binary(cfs):
    """Workers and fork servers of this build anywhere (another build's are other tests'
    business)."""
    return processes_of(cfs, (READER_WORKER, FORKSERVER))


class Mount:
    """One `cellucid-fs mount -f` process serving src on mnt."""

    def __init__(self, cfs, src, mnt, cache, opts, logdir):
        self.cfs, self.mnt, self.cache = Path(cfs), Path(mnt), Path(cache)
        # a URL stays a string: a Path would fold its "//"
        self.src = src if str(src).startswith(("http://", "https://", "s3://")) else Path(src)
        self.opts = list(opts)
        self.logdir = Path(logdir)
        self.proc = None
        self.log = None

    def start(self):
        if not os.path.exists("/dev/fuse") or not shutil.which("fusermount3"):
            pytest.fail("the mount tests need /dev/fuse and fusermount3 (Debian package fuse3)", pytrace=False)
        self.mnt.mkdir(parents=True, exist_ok=True)
        assert not mounted(self.mnt), f"{self.mnt} is already a mount point"
        self.logdir.mkdir(parents=True, exist_ok=True)
        n = len(list(self.logdir.glob("mount-*.log")))
        self.log = self.logdir / f"mount-{n}.log"
        o = ",".join([f"cache_dir={self.cache}"] + self.opts)
        self.argv = [str(self.cfs), "mount", "-f", "-o", o, str(self.src), str(self.mnt)]
        with open(self.log, "wb") as fh:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"cellucid-fs mount exited with {self.proc.returncode} before serving:\n"
                            f"{' '.join(self.argv)}\n{self.stderr()}", pytrace=False)
            if mounted(self.mnt) and (self.mnt / "datasets.json").exists():
                return self
            time.sleep(0.05)
        pytest.fail(f"{self.mnt}/datasets.json did not appear within {READY_TIMEOUT} s:\n{self.stderr()}",
                    pytrace=False)

    @property
    def pid(self):
        return self.proc.pid

    def stderr(self):
        return self.log.read_text(errors="replace") if self.log and self.log.exists() else ""

    def stop(self):
        """Unmounts (lazily if need be) and makes sure the daemon is gone. Returns problems seen."""
        problems = []
        if self.proc is None:
            return problems
        if mounted(self.mnt):
            r = subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True, text=True)
            if r.returncode != 0:
                problems.append(f"fusermount3 -u: {r.stderr.strip()}")
                subprocess.run(["fusermount3", "-uz", str(self.mnt)], capture_output=True)
        try:
            if self.proc.wait(EXIT_TIMEOUT) != 0:
                problems.append(f"the daemon exited with {self.proc.returncode}:\n{self.stderr()[-2000:]}")
        except subprocess.TimeoutExpired:
            problems.append(f"the daemon did not exit within {EXIT_TIMEOUT:g} s of the unmount")
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if mounted(self.mnt):
            subprocess.run(["fusermount3", "-uz", str(self.mnt)], capture_output=True)
        self.proc = None
        return problems

    def kill9(self):
        """SIGKILL the daemon (a crash), then detach the dead mount."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        subprocess.run(["fusermount3", "-uz", str(self.mnt)], capture_output=True)
        deadline = time.monotonic() + 5
        while mounted(self.mnt) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not mounted(self.mnt), "fusermount3 -uz did not detach the dead mount"
        self.proc = None

    def status(self):
        return json.loads((self.mnt / "status.json").read_text(encoding="utf-8"))

    def wait_opened(self, timeout=120):
        """Waits until no source is working (compressed copies and R sources are opened in the
        background once the mount is up, and are not in the tree until then); returns the
        sources of status.json by their file name."""
        deadline = time.monotonic() + timeout
        while True:
            sources = {Path(s["source"]).name: s for s in self.status()["sources"]}
            if all(s["state"] != "working" for s in sources.values()):
                return sources
            if time.monotonic() > deadline:
                pytest.fail(f"sources still working after {timeout} s: {sources}", pytrace=False)
            time.sleep(0.1)

    def catalog(self):
        return json.loads((self.mnt / "datasets.json").read_text(encoding="utf-8"))


@pytest.fixture
def mounts(cfs, tmp_path):
    """mount(src, mnt=None, cache=None, opts=()) -> a started Mount; all are unmounted (and
    their daemons gone) at teardown, whatever happened. An unmount that needed force, or a daemon
    that had to be killed, fails the test."""
    started = []

    def mount(src, mnt=None, cache=None, opts=()):
        k = len(started)
        m = Mount(cfs, src, mnt or tmp_path / f"mnt{k}", cache or tmp_path / f"cache{k}", opts, tmp_path / "logs")
        started.append(m)
        return m.start()

    yield mount
    problems = []
    for m in reversed(started):
        try:
            problems += m.stop()
        except Exception as e:  # keep tearing the others down
            problems.append(f"{m.mnt}: {e!r}")
    leftover = [m for m in started if m.proc is not None or mounted(m.mnt)]
    assert not leftover, f"mounts left behind: {[str(m.mnt) for m in leftover]}"
    assert not problems, "unclean unmount:\n" + "\n".join(problems)


@pytest.fixture
def nginx_on(mounts, tmp_path):
    """nginx_on(root) -> a started Nginx serving root; stopped at teardown, before the mounts
    (this fixture depends on `mounts`, so it is torn down first)."""
    servers = []

    def start(root):
        n = Nginx(root, tmp_path / f"nginx{len(servers)}")
        servers.append(n)
        return n.start()

    yield start
    for n in servers:
        n.stop()


# ---------------------------------------------------------------------------------------------
# a RADOS Gateway (tests/rgw.py): S3 for the export to object storage


@pytest.fixture(scope="session")
def rgw_gateway(tmp_path_factory):
    """A single-node Ceph cluster with a RADOS Gateway on 127.0.0.1, started once per session
    (about 15-30 s) and stopped, every daemon by its pid file, at the end, even on failure.
    Skipped only when Debian's ceph binaries are absent (setup.sh test installs them)."""
    import rgw
    missing = rgw.missing_binaries()
    if missing:
        pytest.skip(f"the Ceph binaries {', '.join(missing)} are not installed: "
                    f"apt-get install {rgw.PACKAGES} (setup.sh test installs them)")
    # Unix socket paths (the daemons' admin sockets) are limited to 107 bytes: a short folder.
    import tempfile
    d = Path(tempfile.mkdtemp(prefix="cfs-rgw-"))
    g = rgw.Rgw(d)
    try:
        g.start()
        yield g
    finally:
        g.stop()
        shutil.rmtree(d, ignore_errors=True)
