"""h5ad files written before anndata 0.8 (tests/fixtures/legacy_h5ad/, see its README.md).

Each legacy fixture (anndata 0.7, anndata <= 0.6, SeuratDisk's Convert()) has a twin holding the
same data written by anndata 0.8 (modern_<name>.h5ad). Exported and mounted:

  - the legacy file's store, read by anndata.read_zarr and put back in source order, equals the
    modern twin read by anndata.read_h5ad, value for value;
  - so does the twin's own store, and the two stores are the same store: every file equal but
    uns/cellucid's id and name (which come from the file names);
  - where anndata 0.8 reads the legacy file itself (0.7 and <= 0.6), the store equals that too;
  - inspect names the layout ("anndata 0.7 (legacy)", ...), and what could not be read (a
    SeuratDisk column-order entry with no column) is left out with its reason, the rest served;
  - defects of one element (a dangling categories reference, both raw layouts in one file) leave
    out that element with its reason; an integer 0.6 index is made strings, as anndata does;
  - the files anndata 0.7.0 and 0.7.8 wrote themselves give stores equal to anndata.read_h5ad of
    them, and the same stores as their anndata 0.8 rewrites.
"""

import json
import shutil
import warnings

import anndata as ad
import h5py
import numpy as np
import pytest

from conftest import (
    FIXTURES_DIR,
    assert_adata_equal,
    describe,
    drop_elements_copy,
    expected_id,
    load_manifest,
    left_out_lines,
    run_cfs,
)

pytestmark = pytest.mark.filterwarnings("ignore")

DIR = FIXTURES_DIR / "legacy_h5ad"
LEGACY = load_manifest(DIR.name, "make_legacy_h5ad_fixtures.py")["fixtures"]
NAMES = sorted(LEGACY)


def path(name):
    return DIR / LEGACY[name]["file"]


def modern_path(name):
    return DIR / LEGACY[name]["modern"]


def read_h5ad(p):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ad.read_h5ad(str(p))


@pytest.fixture(scope="module")
def exported_all(cfs, tmp_path_factory):
    """One export of the fixture folder (every legacy file and its twin)."""
    out = tmp_path_factory.mktemp("legacy") / "out"
    r = run_cfs(cfs, "export", DIR, out)
    return out, r


def store_of(out, filename):
    return out / f"{expected_id(filename)}.zarr"


def test_export_succeeds_with_only_the_expected_left_out(exported_all):
    out, r = exported_all
    assert r.returncode == 0, describe(r)
    assert "refused" not in r.stderr, describe(r)
    lines = left_out_lines(r.stderr)
    want = sorted((LEGACY[n]["file"], el) for n in NAMES for el in LEGACY[n]["left_out"])
    got = sorted((l.split(": ")[1].rsplit("/", 1)[-1], l.split(": left out ")[1].split(": ")[0])
                 for l in lines)
    assert got == want, describe(r)


def test_oracles_agree():
    """The hand-made files are what their writers write: where anndata 0.8 reads the legacy
    layout itself, it reads the same data as the twin."""
    for name in NAMES:
        if LEGACY[name]["anndata_reads"]:
            assert_adata_equal(read_h5ad(path(name)), read_h5ad(modern_path(name)))


@pytest.mark.parametrize("name", NAMES)
def test_legacy_store_equals_modern_twin(name, exported_all):
    out, _ = exported_all
    did = expected_id(LEGACY[name]["file"])
    store = ad.read_zarr(str(store_of(out, LEGACY[name]["file"])))
    assert_adata_equal(store, read_h5ad(modern_path(name)), dataset_id=did)
    if LEGACY[name]["anndata_reads"]:
        assert_adata_equal(store, read_h5ad(path(name)), dataset_id=did)


@pytest.mark.parametrize("name", NAMES)
def test_modern_twin_store_equals_twin(name, exported_all):
    out, _ = exported_all
    did = expected_id(LEGACY[name]["modern"])
    store = ad.read_zarr(str(store_of(out, LEGACY[name]["modern"])))
    assert_adata_equal(store, read_h5ad(modern_path(name)), dataset_id=did)


def _store_files(root):
    """Every file of a store by relative path, .zmetadata parsed, uns/cellucid/{id,name} out."""
    files = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_dir() or rel.startswith(("uns/cellucid/id/", "uns/cellucid/name/")):
            continue
        if rel == ".zmetadata":
            meta = json.loads(p.read_text(encoding="utf-8"))["metadata"]
            files[rel] = {k: v for k, v in meta.items()
                          if not k.startswith(("uns/cellucid/id/", "uns/cellucid/name/"))}
        else:
            files[rel] = p.read_bytes()
    return files


@pytest.mark.parametrize("name", NAMES)
def test_same_store_as_modern_twin(name, exported_all):
    """Same data, same model, so the same layout step makes the same store."""
    out, _ = exported_all
    a = _store_files(store_of(out, LEGACY[name]["file"]))
    b = _store_files(store_of(out, LEGACY[name]["modern"]))
    assert sorted(a) == sorted(b), sorted(set(a) ^ set(b))
    differ = [k for k in a if a[k] != b[k]]
    assert not differ, differ


def test_mounted_stores_equal_exported(exported_all, mounts):
    out, _ = exported_all
    m = mounts(DIR)
    ids = {d["id"] for d in m.catalog()["datasets"]}
    for name in NAMES:
        did = expected_id(LEGACY[name]["file"])
        assert did in ids, m.catalog()
        store = ad.read_zarr(str(m.mnt / f"{did}.zarr"))
        assert_adata_equal(store, read_h5ad(modern_path(name)), dataset_id=did)
        assert _store_files(m.mnt / f"{did}.zarr") == _store_files(store_of(out, LEGACY[name]["file"]))
    status = {s["id"]: s for s in m.status()["sources"]}
    for name in NAMES:
        s = status[expected_id(LEGACY[name]["file"])]
        assert s["state"] == "ready" and s["reason"] is None, s
        assert (s["format"], s["version"]) == ("h5ad", LEGACY[name]["version"]), s
        assert [lo["element"] for lo in s["left_out"]] == LEGACY[name]["left_out"], s


def test_inspect_names_the_layout(cfs):
    r = run_cfs(cfs, "inspect", "--json", *[path(n) for n in NAMES])
    assert r.returncode == 0, describe(r)
    docs = {d["path"]: d for d in json.loads(r.stdout)["files"]}
    for name in NAMES:
        d = docs[str(path(name))]
        want = read_h5ad(modern_path(name))
        assert d["format"] == "h5ad", d
        assert d["version"] == LEGACY[name]["version"], d
        assert d["refused"] is None, d
        assert (d["n_obs"], d["n_vars"]) == want.shape, d
        assert [c["name"] for c in d["obs"]] == list(want.obs.columns), d
        assert [lo["element"] for lo in d["left_out"]] == LEGACY[name]["left_out"], d


# ---------------------------------------------------------------------------------------------
# defects in legacy files: copies of the fixtures changed with h5py


def _v07_dangling_categories(f):
    del f["obs/cluster"].attrs["categories"]
    f["obs/cluster"].attrs["categories"] = "__categories/nowhere"


def _v06_integer_index(f):
    obs = f["obs"][()]
    rec = np.empty(len(obs), dtype=[(n, np.int64 if n == "index" else obs.dtype[n])
                                    for n in obs.dtype.names])
    for n in obs.dtype.names:
        rec[n] = np.arange(len(obs)) * 10 if n == "index" else obs[n]
    del f["obs"]
    f.create_dataset("obs", data=rec)


def _v06_both_raws(f):
    f.create_group("raw")


# name: (fixture, change, left out line (element, reason), oracle)
# oracle: "anndata" = anndata 0.8 reads the changed file; else the elements dropped from the twin
DEFECTS = {
    "v07_dangling_categories": (
        "v07", _v07_dangling_categories,
        ("obs/cluster", "its categories attribute names '__categories/nowhere', which is missing; "
                        "the column was not read"),
        ["obs/cluster"]),
    "v06_integer_index": ("v06", _v06_integer_index, None, "anndata"),
    "v06_both_raws": (
        "v06", _v06_both_raws,
        ("raw", "the file has both a raw group and anndata 0.6's raw.X/raw.var, and anndata "
                "refuses such a file; raw was not read"),
        ["raw"]),
}


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_legacy_defect(defect, cfs, tmp_path):
    """A defect of one element leaves out that element, in one line with its reason (an integer
    index is no defect: anndata makes it strings, so does the reader); the rest is served."""
    base, change, left, oracle = DEFECTS[defect]
    src = tmp_path / "in" / f"{defect}.h5ad"
    src.parent.mkdir()
    shutil.copyfile(path(base), src)
    with h5py.File(src, "r+") as f:
        change(f)
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 0, describe(r)
    lines = left_out_lines(r.stderr)
    if left is None:
        assert lines == [], describe(r)
    else:
        assert lines == [f"cellucid-fs: {src}: left out {left[0]}: {left[1]}"], describe(r)
    if oracle == "anndata":
        want = read_h5ad(src)
    else:
        twin = tmp_path / "twin.h5ad"
        drop_elements_copy(modern_path(base), twin, [e for e in oracle if "/" in e])
        with h5py.File(twin, "r+") as f:
            for e in oracle:
                if "/" not in e:
                    del f[e]
        want = read_h5ad(twin)
    store = ad.read_zarr(str(out / f"{expected_id(src.name)}.zarr"))
    assert_adata_equal(store, want, dataset_id=expected_id(src.name))


def test_modern_frames_without_root_encoding(cfs, tmp_path):
    """A file whose root lost its encoding attributes (some non-Python writers) but whose frames
    are dataframe 0.2.0: read with the legacy rules, labelled for what it is, equal to the file."""
    src = tmp_path / "noroot.h5ad"
    shutil.copyfile(modern_path("v07"), src)
    with h5py.File(src, "r+") as f:
        del f.attrs["encoding-type"]
        del f.attrs["encoding-version"]
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 0 and not left_out_lines(r.stderr), describe(r)
    store = ad.read_zarr(str(out / "noroot.zarr"))
    assert_adata_equal(store, read_h5ad(modern_path("v07")), dataset_id="noroot")
    r = run_cfs(cfs, "inspect", "--json", src)
    d = json.loads(r.stdout)["files"][0]
    assert d["version"] == "anndata, no root encoding (dataframe 0.2.0; legacy)", d
