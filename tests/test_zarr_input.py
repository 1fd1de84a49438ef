"""AnnData Zarr v2 folders as inputs (formats/zarr/): fixtures written by anndata 0.8's
write_zarr and re-encoded with zarr 2.13 (tests/fixtures/make_zarr_fixtures.py).

- the export and the mount of each store, read by anndata.read_zarr with the priority order
  undone, equal anndata.read_zarr of the source folder, value for value;
- the export of a store and the export of its h5ad twin (the same AnnData written with
  write_h5ad) are the same bytes, file for file;
- an array encoded with a codec this version does not decode is left out naming the codec,
  the rest served;
- a folder holding a .zarr store and an .h5ad lists both, the store by its content;
- the source folder is never written.
"""
import json
import shutil
import warnings

import anndata as ad
import pytest

from conftest import (
    FIXTURES_DIR,
    assert_adata_equal,
    describe,
    left_out_lines,
    load_manifest,
    run_cfs,
    snapshot,
    tree_bytes,
)

warnings.simplefilter("ignore")
pytestmark = pytest.mark.filterwarnings("ignore")

ZARR_DIR = FIXTURES_DIR / "zarr"
MANIFEST = load_manifest("zarr", "make_zarr_fixtures.py")["fixtures"]
TWINNED = sorted(k for k, v in MANIFEST.items() if "twin" in v)


def src(name):
    return ZARR_DIR / MANIFEST[name]["store"]


def native(a):
    """a with big-endian arrays (the codecs fixture's) in native byte order: a store holds
    little-endian values, and anndata compares dtypes with their byte order."""
    import numpy as np
    import scipy.sparse as sp

    def fix(x):
        if sp.issparse(x):
            x = x.copy()
            x.data = x.data.astype(x.data.dtype.newbyteorder("="))
            return x
        if isinstance(x, np.ndarray) and x.dtype.byteorder == ">":
            return x.astype(x.dtype.newbyteorder("="))
        return x

    for c in a.obs.columns:
        if getattr(a.obs[c].dtype, "byteorder", "=") == ">":
            a.obs[c] = a.obs[c].astype(a.obs[c].dtype.newbyteorder("="))
    for k in list(a.obsp):
        a.obsp[k] = fix(a.obsp[k])
    return a


def read_source(name):
    return native(ad.read_zarr(str(src(name))))


def export(cfs, path, out):
    r = run_cfs(cfs, "export", path, out)
    assert r.returncode == 0, describe(r)
    return r


@pytest.mark.parametrize("name", TWINNED)
def test_zarr_export_equals_source(cfs, tmp_path, name):
    before = snapshot([src(name)])
    out = tmp_path / "out"
    r = export(cfs, src(name), out)
    assert not left_out_lines(r.stderr), r.stderr
    store = ad.read_zarr(str(out / f"{name}.zarr"))
    assert_adata_equal(store, read_source(name), dataset_id=name)
    assert snapshot([src(name)]) == before, "the source store was modified"


@pytest.mark.parametrize("name", TWINNED)
def test_zarr_export_equals_h5ad_twin(cfs, tmp_path, name):
    a, b = tmp_path / "from_zarr", tmp_path / "from_h5ad"
    export(cfs, src(name), a)
    export(cfs, ZARR_DIR / MANIFEST[name]["twin"], b)
    ta, tb = tree_bytes(a), tree_bytes(b)
    assert sorted(ta) == sorted(tb), sorted(set(ta) ^ set(tb))
    differ = [k for k in ta if ta[k] != tb[k]]
    assert not differ, differ


def test_zarr_mount_serves_the_export(cfs, tmp_path, mounts):
    folder = tmp_path / "src"
    folder.mkdir()
    shutil.copytree(src("consolidated"), folder / "consolidated.zarr")
    m = mounts(folder)
    ids = [d["id"] for d in m.catalog()["datasets"]]
    assert ids == ["consolidated"], ids
    store = ad.read_zarr(str(m.mnt / "consolidated.zarr"))
    assert_adata_equal(store, read_source("consolidated"), dataset_id="consolidated")
    out = tmp_path / "out"
    export(cfs, folder / "consolidated.zarr", out)
    assert tree_bytes(m.mnt / "consolidated.zarr") == tree_bytes(out / "consolidated.zarr")


def test_zarr_unknown_codec_left_out_by_name(cfs, tmp_path):
    name = "unknown_codec"
    out = tmp_path / "out"
    r = export(cfs, src(name), out)
    lines = left_out_lines(r.stderr)
    for element, codec in MANIFEST[name]["left_out"].items():
        hit = [ln for ln in lines if element in ln]
        assert hit and f"'{codec}'" in hit[0], r.stderr
    assert len(lines) == len(MANIFEST[name]["left_out"]), lines
    store = ad.read_zarr(str(out / f"{name}.zarr"))
    source = read_source(name)
    for element in MANIFEST[name]["left_out"]:
        slot, key = element.split("/")
        assert key not in getattr(store, slot)
        del getattr(source, slot)[key]
    assert_adata_equal(store, source, dataset_id=name)


def test_folder_scan_finds_zarr_beside_h5ad(cfs, tmp_path, mounts):
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copytree(src("plain"), folder / "alpha.zarr")
    shutil.copy(FIXTURES_DIR / "h5ad" / "csr_f32.h5ad", folder / "beta.h5ad")
    (folder / "notes").mkdir()  # a plain folder: not an input
    m = mounts(folder)
    status = {s["id"]: s for s in m.status()["sources"]}
    assert sorted(status) == ["alpha", "beta"], status
    assert status["alpha"]["format"] == "zarr" and status["alpha"]["state"] == "ready"
    assert status["beta"]["format"] == "h5ad" and status["beta"]["state"] == "ready"
    store = ad.read_zarr(str(m.mnt / "alpha.zarr"))
    assert_adata_equal(store, read_source("plain"), dataset_id="alpha")


def test_inspect_names_the_zarr_format(cfs):
    r = run_cfs(cfs, "inspect", "--json", src("consolidated"))
    assert r.returncode == 0, describe(r)
    info = json.loads(r.stdout)
    ds = info["files"][0]
    assert ds["format"] == "zarr", ds
    assert "consolidated" in ds["version"], ds


def test_inspect_names_anndata_07_layout(cfs):
    """The hand-made anndata 0.7 store (no root attributes, __categories) is labelled legacy."""
    r = run_cfs(cfs, "inspect", "--json", src("v07"))
    assert r.returncode == 0, describe(r)
    ds = json.loads(r.stdout)["files"][0]
    assert ds["format"] == "zarr" and ds["version"] == "anndata 0.7 (legacy), Zarr v2", ds


def test_not_anndata_zarr_group_refused(cfs, tmp_path):
    import zarr

    p = tmp_path / "other.zarr"
    g = zarr.open_group(str(p), mode="w")
    g.create_dataset("a", data=[1, 2, 3])
    r = run_cfs(cfs, "export", p, tmp_path / "out")
    assert r.returncode != 0
    assert "not AnnData" in r.stderr and "write_zarr" in r.stderr, r.stderr


def test_truncated_chunk_and_outside_symlink_refused_clearly(cfs, tmp_path):
    """A chunk cut short, or a chunk that is a symlink out of the store: one line naming the
    chunk file and what to do, no crash, no store."""
    cut = tmp_path / "cut.zarr"
    shutil.copytree(src("plain"), cut)
    chunk = cut / "obsm" / "X_pca" / "0.0"
    data = chunk.read_bytes()
    chunk.write_bytes(data[: len(data) // 2])
    r = run_cfs(cfs, "export", cut, tmp_path / "out1")
    assert r.returncode != 0, describe(r)
    assert "obsm/X_pca" in r.stderr and "chunk 0.0" in r.stderr and "blosc" in r.stderr, r.stderr

    link = tmp_path / "link.zarr"
    shutil.copytree(src("plain"), link)
    chunk = link / "obsm" / "X_pca" / "0.0"
    outside = tmp_path / "outside"
    chunk.rename(outside)
    chunk.symlink_to(outside)
    r = run_cfs(cfs, "export", link, tmp_path / "out2")
    assert r.returncode != 0, describe(r)
    assert "obsm/X_pca/0.0 is a symlink leading out of the store" in r.stderr, r.stderr


def with_uns_string_kinds(tmp_path, vlen_bytes):
    """plain.zarr with uns arrays of every string encoding zarr-python writes: fixed-width
    |S and <U, vlen-bytes, beside a bool array."""
    import numcodecs
    import numpy as np
    import zarr

    p = tmp_path / "in" / "kinds.zarr"
    shutil.copytree(src("plain"), p)
    g = zarr.open_group(str(p), mode="r+")
    g.create_dataset("uns/fixed_s", data=np.array([b"ab", b"cde", b""], dtype="S3"))
    g.create_dataset("uns/fixed_u", data=np.array(["ab", "cd\u00e9", ""], dtype="U3"))
    vb = g.create_dataset("uns/vlen_bytes", shape=(len(vlen_bytes),), dtype=object,
                          object_codec=numcodecs.VLenBytes())
    vb[:] = np.array(vlen_bytes, dtype=object)
    g.create_dataset("uns/flags", data=np.array([True, False, True]))
    return p


def test_every_string_encoding_reads_as_text(cfs, tmp_path):
    """Fixed-width |S and <U and vlen-bytes arrays are served as the strings they hold (bytes
    taken as UTF-8), the rest of the store as anndata reads it."""
    p = with_uns_string_kinds(tmp_path, [b"x-y", "na\u00efve".encode()])
    out = tmp_path / "out"
    export(cfs, p, out)
    want = ad.read_zarr(str(p))
    assert want.uns["vlen_bytes"].tolist() == [b"x-y", "na\u00efve".encode()]   # anndata: bytes
    store = ad.read_zarr(str(out / "kinds.zarr"))
    assert store.uns["fixed_s"].tolist() == ["ab", "cde", ""]
    assert store.uns["fixed_u"].tolist() == ["ab", "cd\u00e9", ""]
    assert store.uns["vlen_bytes"].tolist() == ["x-y", "na\u00efve"]
    assert store.uns["flags"].tolist() == [True, False, True]
    for k in ("fixed_s", "fixed_u", "vlen_bytes", "flags"):
        del store.uns[k], want.uns[k]
    assert_adata_equal(store, want, dataset_id="kinds")


def test_string_with_a_nul_byte_is_never_cut_short(cfs, tmp_path):
    """A vlen-bytes value holding a NUL byte cannot be a string of the store: its chunk is
    never served cut short at the NUL; the export fails naming the element and why."""
    p = with_uns_string_kinds(tmp_path, [b"x\x00y", b"zz"])
    r = run_cfs(cfs, "export", p, tmp_path / "out")
    assert r.returncode != 0, describe(r)
    assert "uns/vlen_bytes" in r.stderr and "NUL byte" in r.stderr, r.stderr
    assert not (tmp_path / "out" / "kinds.zarr").exists()
