"""MuData inputs (.h5mu and MuData Zarr folders) served as MuData Zarr stores in mudata's layout.
Fixtures: tests/fixtures/make_mudata_fixtures.py (mudata's layout; modalities and global parts
written by anndata 0.8's write_elem, the MuData frame hand-assembled: Debian has no mudata).

The oracle reads the source independently, with h5py / zarr-python and anndata's read_elem:
each modality group as an AnnData, the global obs/obsm/obsp/uns and obsmap/varmap. The store is
read modality by modality with anndata.read_zarr(store/mod/<name>) and with zarr-python for the
global parts; both are compared value for value after undoing the priority order.
"""
import json
import shutil
import warnings

import anndata as ad
import h5py
import numpy as np
import pytest
import zarr
from anndata.experimental import read_elem

from conftest import (
    FIXTURES_DIR,
    Diffs,
    _cmp_df,
    _cmp_mapping,
    assert_adata_equal,
    check_cellucid_record,
    describe,
    read_catalog,
    run_cfs,
    snapshot,
    tree_bytes,
)
from priority_reference import reference_order

warnings.simplefilter("ignore")
pytestmark = pytest.mark.filterwarnings("ignore")

MU_DIR = FIXTURES_DIR / "mudata"
SOURCES = {"h5mu": MU_DIR / "citeseq.h5mu", "zarr": MU_DIR / "citeseq.zarr",
           "zarr_zip": MU_DIR / "citeseq.zarr.zip"}
# The same MuData in a zip of its folder (Info-ZIP, entries under citeseq.zarr/) and as a Zarr
# v3 store (hand-made by the specification): they must give the folder's store, byte for byte.
TWINS = {"infozip": MU_DIR / "citeseq_infozip.zip", "v3": MU_DIR / "citeseq_v3.zarr"}
MODS = ["rna", "prot"]  # mod-order of the fixture (its stale "atac" entry is ignored)


class Source:
    """The fixture read by h5py / zarr-python and anndata's read_elem, not by cellucid-fs."""

    def __init__(self, path):
        if path.suffix == ".h5mu":
            self.root = h5py.File(path, "r")
        elif path.suffix == ".zip":
            self.root = zarr.open_group(zarr.ZipStore(str(path), mode="r"), mode="r")
        else:
            self.root = zarr.open_group(str(path), "r")
        r = self.root
        self.mods = {m: read_elem(r["mod"][m]) for m in r["mod"].keys()}
        self.obs = read_elem(r["obs"])
        self.var = read_elem(r["var"])
        self.obsm = read_elem(r["obsm"])
        self.obsp = read_elem(r["obsp"])
        self.uns = read_elem(r["uns"])
        self.obsmap = {m: np.asarray(r["obsmap"][m][...]) for m in r["obsmap"].keys()}
        self.varmap = {m: np.asarray(r["varmap"][m][...]) for m in r["varmap"].keys()}


class Store:
    """A produced MuData store: zarr-python for the global parts, read_zarr per modality."""

    def __init__(self, path):
        self.path = path
        self.root = zarr.open_consolidated(str(path), mode="r")
        r = self.root
        self.obs = read_elem(r["obs"])
        self.var = read_elem(r["var"])
        # a mapping the input has none of may be absent, as in an AnnData store
        self.obsm, self.obsp, self.uns = ({} if k not in r else read_elem(r[k])
                                          for k in ("obsm", "obsp", "uns"))
        self.obsmap = {m: np.asarray(r["obsmap"][m][...]) for m in r["obsmap"].keys()}
        self.varmap = {m: np.asarray(r["varmap"][m][...]) for m in r["varmap"].keys()}
        self.mods = {m: ad.read_zarr(str(path / "mod" / m)) for m in r["mod"].attrs["mod-order"]}


def export(cfs, src, out):
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 0, describe(r)
    return r


def as_citeseq(source, folder):
    """source copied into folder under a name whose id is 'citeseq' (a zip is found by its
    content whatever its name)."""
    folder.mkdir()
    dst = folder / ("citeseq.zarr" if source.is_dir() else "citeseq.zarr.zip")
    (shutil.copytree if source.is_dir() else shutil.copy)(source, dst)
    return dst


@pytest.fixture(scope="module")
def exported(cfs, tmp_path_factory):
    cache = {}

    def get(kind):
        if kind not in cache:
            out = tmp_path_factory.mktemp(f"mudata_{kind}") / "out"
            export(cfs, SOURCES[kind], out)
            cache[kind] = out
        return cache[kind]

    return get


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_store_is_mudata_layout(exported, kind):
    st = zarr.open_consolidated(str(exported(kind) / "citeseq.zarr"), mode="r")
    attrs = dict(st.attrs)
    assert attrs == {"encoding-type": "MuData", "encoding-version": "0.1.0", "axis": 0}, attrs
    assert list(st["mod"].attrs["mod-order"]) == MODS
    for m in MODS:
        assert st["mod"][m].attrs["encoding-type"] == "anndata"
        assert st["obsmap"][m].dtype == np.uint32 and st["varmap"][m].dtype == np.uint32
    assert "X" not in st


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_export_equals_source(exported, kind):
    before = snapshot([SOURCES[kind]])
    src, st = Source(SOURCES[kind]), Store(exported(kind) / "citeseq.zarr")
    assert list(st.mods) == MODS
    for m in MODS:
        assert_adata_equal(st.mods[m], src.mods[m])
    # the global cells: priority order v1 over the 60 global cells
    pos = st.obs["cellucid_original_position"].to_numpy()
    assert pos.dtype == np.int64
    assert np.array_equal(pos, reference_order(len(src.obs)))
    order = np.argsort(pos, kind="stable")
    d = Diffs()
    _cmp_df(st.obs.iloc[order].drop(columns=["cellucid_original_position"]), src.obs, "obs", d)
    _cmp_df(st.var, src.var, "var", d)
    _cmp_mapping({k: np.asarray(v)[order] for k, v in st.obsm.items()}, src.obsm, "obsm", d)
    _cmp_mapping({k: v[order][:, order] for k, v in st.obsp.items()}, src.obsp, "obsp", d)
    su, ou = dict(st.uns), dict(src.uns)
    check_cellucid_record(su, ou, "citeseq", None, d)
    su.pop("cellucid")
    _cmp_mapping(su, ou, "uns", d)
    d.check()
    prio = st.uns["cellucid"]["priority"]
    assert prio["nObs"] == len(src.obs) and prio["specVersion"] == 1
    for m in MODS:
        assert np.array_equal(st.varmap[m], src.varmap[m])
    assert snapshot([SOURCES[kind]]) == before, "the source was modified"


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_obsmap_follows_the_orders(exported, kind):
    """Global stored cell j is, in modality m, the stored row the rewritten obsmap names, and
    that row holds the same source row the source's obsmap names for j's original cell;
    a modality's rows follow the global priority order."""
    src, st = Source(SOURCES[kind]), Store(exported(kind) / "citeseq.zarr")
    gpos = st.obs["cellucid_original_position"].to_numpy()
    for m in MODS:
        mpos = st.mods[m].obs["cellucid_original_position"].to_numpy()
        stored, original = st.obsmap[m], src.obsmap[m][gpos]
        assert np.array_equal(stored == 0, original == 0), m
        present = stored > 0
        assert np.array_equal(mpos[stored[present].astype(np.int64) - 1],
                              original[present].astype(np.int64) - 1), m
        assert np.array_equal(stored[present], np.arange(1, present.sum() + 1)), m
        assert np.array_equal(st.mods[m].obs_names[stored[present].astype(np.int64) - 1],
                              st.obs.index[present]), m
    assert (st.obsmap["prot"] == 0).sum() == 15


def test_h5mu_and_zarr_twin_give_the_same_bytes(exported):
    a, b = tree_bytes(exported("h5mu")), tree_bytes(exported("zarr"))
    assert sorted(a) == sorted(b), sorted(set(a) ^ set(b))
    assert [k for k in a if a[k] != b[k]] == []


@pytest.mark.parametrize("twin", sorted(TWINS))
def test_zipped_and_v3_twins_give_the_same_bytes(cfs, exported, tmp_path, twin):
    before = snapshot([TWINS[twin]])
    export(cfs, as_citeseq(TWINS[twin], tmp_path / "src"), tmp_path / "out")
    a, b = tree_bytes(tmp_path / "out"), tree_bytes(exported("zarr"))
    assert sorted(a) == sorted(b), sorted(set(a) ^ set(b))
    assert [k for k in a if a[k] != b[k]] == []
    assert snapshot([TWINS[twin]]) == before, "the source was modified"


def test_maps_derived_from_names(cfs, exported, tmp_path):
    """A file without obsmap/varmap: the maps come from the names, the store is the same."""
    folder = tmp_path / "src"
    folder.mkdir()
    shutil.copy(MU_DIR / "nomaps.h5mu", folder / "citeseq.h5mu")
    export(cfs, folder / "citeseq.h5mu", tmp_path / "out")
    assert tree_bytes(tmp_path / "out") == tree_bytes(exported("h5mu"))


def test_client_use_of_each_modality(exported, tmp_path):
    st = Store(exported("h5mu") / "citeseq.zarr")
    for m in MODS:
        a = st.mods[m]
        cells = a.obs_names[::3]
        sub = a[cells].copy()
        assert sub.n_obs == len(cells) and sub.n_vars == a.n_vars
        x = sub.X.toarray() if hasattr(sub.X, "toarray") else sub.X
        full = a.X.toarray() if hasattr(a.X, "toarray") else a.X
        assert np.array_equal(x, full[::3])
        # a subset's original positions are no permutation: compare what it holds
        sub.obs = sub.obs.rename(columns={"cellucid_original_position": "source_row"})
        out = tmp_path / f"{m}.h5ad"
        sub.write_h5ad(out)
        back = ad.read_h5ad(out)
        assert_adata_equal(back, sub)
        sub.write_zarr(tmp_path / f"{m}.zarr")
        assert_adata_equal(ad.read_zarr(tmp_path / f"{m}.zarr"), sub)


def test_catalog_lists_the_mudata_store(exported):
    cat = read_catalog(exported("h5mu"))
    assert cat["datasets"] == [{"id": "citeseq", "path": "citeseq.zarr/"}], cat
    assert cat["default"] == "citeseq"


def test_mount_serves_the_export(cfs, tmp_path, mounts, exported):
    folder = tmp_path / "src"
    folder.mkdir()
    shutil.copy(SOURCES["h5mu"], folder / "citeseq.h5mu")
    shutil.copytree(SOURCES["zarr"], folder / "twin.zarr")
    shutil.copy(SOURCES["zarr_zip"], folder / "zipped.zarr.zip")
    m = mounts(folder)
    status = {s["id"]: s for s in m.status()["sources"]}
    assert status["citeseq"]["format"] == "h5mu" and status["citeseq"]["state"] == "ready", status
    for twin in ("twin", "zipped"):
        assert status[twin]["format"] == "mudata-zarr" and status[twin]["state"] == "ready", status
    assert [d["id"] for d in m.catalog()["datasets"]] == ["citeseq", "twin", "zipped"]
    assert tree_bytes(m.mnt / "citeseq.zarr") == tree_bytes(exported("h5mu") / "citeseq.zarr")
    export(cfs, folder / "zipped.zarr.zip", tmp_path / "zout")
    assert tree_bytes(m.mnt / "zipped.zarr") == tree_bytes(tmp_path / "zout" / "zipped.zarr")
    st = Store(m.mnt / "citeseq.zarr")
    for name in MODS:
        assert_adata_equal(st.mods[name], Source(SOURCES["h5mu"]).mods[name])


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_inspect_shows_each_modality(cfs, kind):
    r = run_cfs(cfs, "inspect", "--json", SOURCES[kind])
    assert r.returncode == 0, describe(r)
    doc = json.loads(r.stdout)["files"][0]
    assert doc["format"] == {"h5mu": "h5mu", "zarr": "mudata-zarr", "zarr_zip": "mudata-zarr"}[kind]
    assert "MuData 0.1.0" in doc["version"]
    assert ("in a zip" in doc["version"]) == (kind == "zarr_zip"), doc["version"]
    mods = [(x["name"], x["n_obs"], x["n_vars"]) for x in doc["modalities"]]
    assert mods == [("rna", 60, 40), ("prot", 45, 8)], mods
    rna = doc["modalities"][0]
    assert rna["X"]["encoding"] == "csr_matrix" and [e["key"] for e in rna["layers"]] == ["counts"]
    text = run_cfs(cfs, "inspect", SOURCES[kind]).stdout
    assert "  modality rna: 60 x 40" in text and "  modality prot: 45 x 8" in text, text


def test_axis1_refused_in_one_line(cfs, tmp_path):
    r = run_cfs(cfs, "export", MU_DIR / "axis1.h5mu", tmp_path / "out")
    assert r.returncode != 0, describe(r)
    lines = [ln for ln in r.stderr.splitlines() if "axis1.h5mu" in ln]
    assert len(lines) == 1, r.stderr
    assert "share features rather than cells" in lines[0] and "write each modality" in lines[0]
    assert not (tmp_path / "out" / "axis1.zarr").exists()


def test_embedding_pulled_from_a_modality(cfs, tmp_path):
    """No drawable global embedding: the first modality (in mod-order) with one lends it, as
    global obsm '<mod>:<key>', rows through obsmap, NaN for the cells it does not hold."""
    path = MU_DIR / "pulled.h5mu"
    export(cfs, path, tmp_path / "out")
    src, st = Source(path), Store(tmp_path / "out" / "pulled.zarr")
    assert list(st.mods) == ["prot", "rna"]
    assert sorted(st.obsm) == ["prot", "prot:X_tsne", "rna"], sorted(st.obsm)
    pulled = st.obsm["prot:X_tsne"]
    gpos = st.obs["cellucid_original_position"].to_numpy()
    rows = src.obsmap["prot"][gpos].astype(np.int64)
    tsne = src.mods["prot"].obsm["X_tsne"]
    assert pulled.dtype == tsne.dtype and pulled.shape == (60, 2)
    assert np.isnan(pulled[rows == 0]).all() and (rows == 0).sum() == 15
    assert np.array_equal(pulled[rows > 0], tsne[rows[rows > 0] - 1])
    assert read_catalog(tmp_path / "out")["datasets"] == [{"id": "pulled", "path": "pulled.zarr/"}]


def test_legacy_modality_read_with_the_legacy_rules(cfs, tmp_path):
    """mudata 0.1's files: a modality tagged anndata around anndata 0.7's layout is read as
    the h5ad reader reads v07.h5ad, equal to anndata 0.8's own re-write of it."""
    r = export(cfs, MU_DIR / "legacy.h5mu", tmp_path / "out")
    assert "left out" not in r.stderr, r.stderr
    st = Store(tmp_path / "out" / "legacy.zarr")
    modern = ad.read_h5ad(FIXTURES_DIR / "legacy_h5ad" / "modern_v07.h5ad")
    assert_adata_equal(st.mods["rna"], modern)
    doc = json.loads(run_cfs(cfs, "inspect", "--json", MU_DIR / "legacy.h5mu").stdout)["files"][0]
    assert doc["version"] == "MuData 0.1.0 (mudata 0.1.2)" and not doc["left_out"], doc


def test_unreadable_modality_column_left_out_with_its_path(cfs, tmp_path):
    path = tmp_path / "cite.h5mu"
    shutil.copy(SOURCES["h5mu"], path)
    with h5py.File(path, "r+") as f:
        obs = f["mod/rna/obs"]
        col = obs.create_dataset("weird", data=np.zeros(60))
        col.attrs["encoding-type"] = "awkward-array"
        col.attrs["encoding-version"] = "0.1.0"
        obs.attrs["column-order"] = list(obs.attrs["column-order"]) + ["weird"]
    r = export(cfs, path, tmp_path / "out")
    lines = [ln for ln in r.stderr.splitlines() if "left out" in ln]
    assert len(lines) == 1 and "mod/rna/obs/weird" in lines[0], r.stderr
    st = Store(tmp_path / "out" / "cite.zarr")
    assert "weird" not in st.mods["rna"].obs.columns


@pytest.mark.parametrize("damage", ["twice", "unmapped", "past"])
def test_inconsistent_obsmap_refused_in_one_line(cfs, tmp_path, damage):
    path = tmp_path / "cite.h5mu"
    shutil.copy(SOURCES["h5mu"], path)
    with h5py.File(path, "r+") as f:
        m = f["obsmap/prot"][...]
        first = np.flatnonzero(m)[0]
        if damage == "twice":
            m[np.flatnonzero(m)[1]] = m[first]
        elif damage == "unmapped":
            m[first] = 0
        else:
            m[first] = 46
        f["obsmap/prot"][...] = m
    r = run_cfs(cfs, "export", path, tmp_path / "out")
    assert r.returncode != 0, describe(r)
    lines = [ln for ln in r.stderr.splitlines() if "cite.h5mu" in ln]
    assert len(lines) == 1 and "obsmap/prot" in lines[0] and "mdata.write" in lines[0], r.stderr
