"""Nothing outside SRC is read: a symlink leading out of the source folder, or out of a folder
input (a Cell Ranger run, a MatrixMarket folder, an analysis/ folder), is never followed
(src/catalog/sources.c, formats/outs.c, formats/mtx_folder.c, formats/projections.c). The
files outside hold data a reader would happily serve, so a leak would show as a store."""
import json
import os
import shutil

from conftest import FIXTURES_DIR, run_cfs

H5AD = FIXTURES_DIR / "h5ad" / "csr_f32.h5ad"
RUN = FIXTURES_DIR / "outs" / "pbmc_v3"
MEX = FIXTURES_DIR / "mtx" / "cellranger3" / "filtered_feature_bc_matrix"


def status(m):
    return {s["source"]: s for s in json.loads((m.mnt / "status.json").read_text())["sources"]}


def stores(m):
    return sorted(p.name for p in m.mnt.iterdir() if p.name.endswith(".zarr"))


def test_links_out_of_src_are_not_followed(mounts, tmp_path):
    src, outside = tmp_path / "src", tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    src.mkdir()
    shutil.copy(H5AD, outside / "secret.h5ad")
    shutil.copy(H5AD, outside / "dir" / "other.h5ad")
    shutil.copy(H5AD, src / "good.h5ad")
    os.symlink(outside / "secret.h5ad", src / "absolute.h5ad")
    os.symlink("../outside/secret.h5ad", src / "relative.h5ad")
    os.symlink(outside / "dir", src / "folder")
    os.symlink("good.h5ad", src / "inside.h5ad")
    m = mounts(src)
    assert stores(m) == ["good.zarr", "inside.zarr"]
    assert sorted(status(m)) == ["good.h5ad", "inside.h5ad"]


def test_chains_loops_and_dotdot_inside(cfs, mounts, tmp_path):
    """A link is judged by where it ends, all links resolved: a '..' that stays inside is
    followed, a chain of links inside that ends outside is not, a loop is skipped without
    hanging; SRC given through a link is SRC. There is no option to follow links out (nothing
    in `cellucid-fs --help` does): export what they lead to instead."""
    src, outside = tmp_path / "src", tmp_path / "outside"
    (src / "sub").mkdir(parents=True)
    outside.mkdir()
    shutil.copy(H5AD, src / "good.h5ad")
    shutil.copy(H5AD, outside / "secret.h5ad")
    os.symlink("sub/../good.h5ad", src / "dotdot_inside.h5ad")
    os.symlink(outside / "secret.h5ad", src / "sub" / "hop")
    os.symlink("sub/hop", src / "chain.h5ad")
    os.symlink("loop_b.h5ad", src / "loop_a.h5ad")
    os.symlink("loop_a.h5ad", src / "loop_b.h5ad")
    os.symlink(src, tmp_path / "src_link")
    m = mounts(tmp_path / "src_link")
    assert stores(m) == ["dotdot_inside.zarr", "good.zarr"]
    assert sorted(status(m)) == ["dotdot_inside.h5ad", "good.h5ad"]
    r = run_cfs(cfs, "--help")
    assert "symlink" not in r.stdout.lower() and "follow" not in r.stdout.lower(), r.stdout
    r = run_cfs(cfs, "export", tmp_path / "src_link", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == \
        ["datasets.json", "dotdot_inside.zarr", "good.zarr"]


def run_with(tmp_path, relink):
    """A copy of pbmc_v3 in SRC whose files named by relink are moved out and symlinked back."""
    src, outside = tmp_path / "src", tmp_path / "outside"
    src.mkdir()
    outside.mkdir()
    run = src / "run"
    shutil.copytree(RUN, run)
    for rel in relink:
        moved = outside / rel.replace("/", "_")
        shutil.move(str(run / rel), str(moved))
        os.symlink(moved, run / rel)
    return src, run


def test_run_folder_matrix_leading_out_is_refused(cfs, mounts, tmp_path):
    src, run = run_with(tmp_path, ["outs/filtered_feature_bc_matrix.h5"])
    m = mounts(src)
    s = status(m)["run"]
    assert s["state"] == "refused", s
    assert s["reason"].startswith("outs/filtered_feature_bc_matrix.h5 is a symlink leading out "
                                  "of the folder"), s
    assert stores(m) == []
    r = run_cfs(cfs, "export", run, tmp_path / "out")
    assert r.returncode != 0 and "symlink leading out of the folder" in r.stderr, r.stderr


def test_run_folder_mex_leading_out_is_refused(cfs, tmp_path):
    src, run = run_with(tmp_path, ["outs/filtered_feature_bc_matrix.h5",
                                   "outs/filtered_feature_bc_matrix"])
    os.unlink(run / "outs" / "filtered_feature_bc_matrix.h5")   # the MEX folder is what is left
    r = run_cfs(cfs, "export", run, tmp_path / "out")
    assert r.returncode != 0, r.stderr
    assert "outs/filtered_feature_bc_matrix is a symlink leading out of the folder" in r.stderr, \
        r.stderr


def test_analysis_csv_leading_out_is_not_read(cfs, tmp_path):
    """The UMAP projection linked out is not read: the store has every other projection, and
    not X_umap (what the CSV would have given)."""
    src, run = run_with(tmp_path, ["outs/analysis/umap/2_components/projection.csv"])
    r = run_cfs(cfs, "inspect", "--json", run)
    assert r.returncode == 0, r.stderr
    obsm = json.dumps(json.loads(r.stdout)["files"][0])
    assert "X_tsne" in obsm and "X_umap" not in obsm, obsm


def test_matrixmarket_list_leading_out_is_not_read(cfs, tmp_path):
    folder, outside = tmp_path / "mex", tmp_path / "outside"
    shutil.copytree(MEX, folder)
    outside.mkdir()
    shutil.move(str(folder / "barcodes.tsv.gz"), str(outside / "barcodes.tsv.gz"))
    os.symlink(outside / "barcodes.tsv.gz", folder / "barcodes.tsv.gz")
    r = run_cfs(cfs, "export", folder, tmp_path / "out")
    assert r.returncode != 0, r.stderr
    assert "barcodes.tsv" in r.stderr and "cell list" in r.stderr, r.stderr


# ---- HDF5's own references to other files ---------------------------------------------------

def h5ad_with(path, edit):
    """An anndata-written h5ad at path (4 cells, an X_umap), then edited with h5py."""
    import anndata
    import h5py
    import numpy as np
    a = anndata.AnnData(np.ones((4, 3), dtype=np.float32))
    a.obsm["X_umap"] = np.arange(8, dtype=np.float32).reshape(4, 2)
    a.write_h5ad(path)
    with h5py.File(path, "r+") as f:
        edit(f)


def outside_h5(path):
    """An HDF5 file outside SRC holding what a leak would serve: obsm/X_pca of 7s."""
    import h5py
    import numpy as np
    with h5py.File(path, "w") as g:
        g["obsm/X_pca"] = np.full((4, 2), 7.0, dtype=np.float32)
        g["raw"] = np.full(8, 7.0, dtype=np.float32)


def as_array(f, name):
    f[name].attrs["encoding-type"] = "array"
    f[name].attrs["encoding-version"] = "0.2.0"


def exported_obsm(cfs, src, out):
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 0, r.stderr
    return sorted(p.name for p in (out / f"{src.stem}.zarr" / "obsm").iterdir()
                  if not p.name.startswith(".")), r.stderr


def test_an_external_link_reached_through_a_soft_link_is_not_followed(cfs, tmp_path):
    """libhdf5 cannot traverse external links at all in the readers (H5Lunregister): a soft
    link to one is as dangling as the external link itself is refused."""
    outside_h5(tmp_path / "outside.h5")

    def edit(f):
        f["/elsewhere"] = h5py_external(tmp_path / "outside.h5", "/obsm/X_pca")
        f["obsm/X_pca"] = h5py_soft("/elsewhere")
        f["/group_elsewhere"] = h5py_external(tmp_path / "outside.h5", "/obsm")
        f["obsm/X_through"] = h5py_soft("/group_elsewhere/X_pca")

    (tmp_path / "src").mkdir()
    h5ad_with(tmp_path / "src" / "links.h5ad", edit)
    obsm, log = exported_obsm(cfs, tmp_path / "src" / "links.h5ad", tmp_path / "out")
    assert obsm == ["X_umap"], (obsm, log)
    assert "left out obsm/X_pca" in log and "left out obsm/X_through" in log, log


def h5py_external(path, name):
    import h5py
    return h5py.ExternalLink(str(path), name)


def h5py_soft(name):
    import h5py
    return h5py.SoftLink(name)


def test_hdf5_external_storage_is_not_read(cfs, tmp_path):
    """A dataset whose raw values are kept in a file named by the input (HDF5 external storage:
    any file, here one outside SRC) is left out, X refuses the file."""
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"SECRET-BYTES-0123456789abcdef!!!")

    def edit(f):
        f.create_dataset("obsm/X_pca", shape=(4, 2), dtype="f4", external=[(str(secret), 0, 32)])
        as_array(f, "obsm/X_pca")

    (tmp_path / "src").mkdir()
    h5ad_with(tmp_path / "src" / "ext.h5ad", edit)
    obsm, log = exported_obsm(cfs, tmp_path / "src" / "ext.h5ad", tmp_path / "out")
    assert obsm == ["X_umap"], (obsm, log)
    assert "left out obsm/X_pca: its values are kept in another file (HDF5 external " \
           "storage), which is not read" in log, log

    def x_elsewhere(f):
        del f["X"]
        f.create_dataset("X", shape=(4, 3), dtype="f4", external=[(str(secret), 0, 48)])
        as_array(f, "X")

    h5ad_with(tmp_path / "src" / "x.h5ad", x_elsewhere)
    r = run_cfs(cfs, "export", tmp_path / "src" / "x.h5ad", tmp_path / "out_x")
    assert r.returncode == 2 and "HDF5 external storage" in r.stderr, r.stderr


def test_hdf5_virtual_datasets_are_not_read(cfs, tmp_path):
    import h5py
    outside_h5(tmp_path / "outside.h5")

    def edit(f):
        layout = h5py.VirtualLayout(shape=(4, 2), dtype="f4")
        layout[:] = h5py.VirtualSource(str(tmp_path / "outside.h5"), "obsm/X_pca", shape=(4, 2))
        f["obsm"].create_virtual_dataset("X_pca", layout, fillvalue=0)
        as_array(f, "obsm/X_pca")

    (tmp_path / "src").mkdir()
    h5ad_with(tmp_path / "src" / "vds.h5ad", edit)
    obsm, log = exported_obsm(cfs, tmp_path / "src" / "vds.h5ad", tmp_path / "out")
    assert obsm == ["X_umap"], (obsm, log)
    assert "left out obsm/X_pca: it is a virtual dataset" in log, log
