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
