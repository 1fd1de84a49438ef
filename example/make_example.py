#!/usr/bin/python3
"""Writes cellucid-fs's bundled example (this folder) from real PBMC data.

    apt-get install -y r-cran-seurat      # brings r-cran-sctransform, uwot, Rtsne
    /usr/bin/python3 example/make_example.py

Step 1, make_example.R (run here with Rscript), takes the real UMI counts of
`sctransform::pbmc` (Debian's r-cran-sctransform: 283 cells x 914 genes, a downsampled subset
of 10x Genomics' PBMC3k) and computes PCA, Louvain clusters, UMAP and t-SNE with Seurat. Step 2,
this script (Debian's anndata 0.8, loompy 3.0.7, h5py, scipy), writes the same cells three ways:

  pbmc.h5ad                   anndata: X log-normalised (float32 CSR), layers/counts (int32 CSR),
                              obs louvain + cell_type (categoricals) + QC columns, var
                              highly_variable, obsm X_umap/X_tsne/X_pca, uns *_colors and title
  pbmc_loom.loom              loompy: /matrix the counts, layer lognorm, col_attrs CellID,
                              louvain, cell_type, QC columns and the (n, k) attributes
                              X_umap/X_tsne/X_pca; row_attrs Gene, highly_variable
  pbmc_cellranger/outs/       Cell Ranger 3+ layout: filtered_feature_bc_matrix.h5 and
                              filtered_feature_bc_matrix/ (MatrixMarket, gzipped), analysis/
                              umap|tsne/2_components and pca/10_components projection.csv,
                              clustering/graphclust/clusters.csv (Louvain cluster + 1)

The outputs are deterministic (fixed seeds, gzip without timestamps, HDF5 without object times,
loompy's timestamps pinned); only R is needed to regenerate, never to read them.
"""

import gzip
import io
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

warnings.simplefilter("ignore")

import anndata as ad  # noqa: E402
import h5py  # noqa: E402
import loompy  # noqa: E402
import loompy.attribute_manager  # noqa: E402
import loompy.graph_manager  # noqa: E402
import loompy.layer_manager  # noqa: E402
import loompy.loompy  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import scipy.io  # noqa: E402
import scipy.sparse as sp  # noqa: E402

HERE = Path(__file__).resolve().parent
TITLE = "PBMC3k subset: 283 real 10x Genomics PBMCs, 914 genes"
# scanpy's default palette (its first colours), as sc.pl.umap stores them in uns
PALETTE = ["#1f77b4", "#ff7f0e", "#279e68", "#d62728", "#aa40fc", "#8c564b", "#e377c2",
           "#b5bd61", "#17becf", "#aec7e8"]
CELL_TYPES = ["T cells", "NK / cytotoxic T cells", "B cells", "Monocytes", "Platelets"]
MAX_BYTES = 4 * 1024 * 1024  # the whole example stays a few MB

TIMESTAMP = "20200101T000000.000000Z"
for _mod in (loompy, loompy.loompy, loompy.attribute_manager, loompy.graph_manager,
             loompy.layer_manager):
    if hasattr(_mod, "timestamp"):
        _mod.timestamp = lambda: TIMESTAMP


def run_r(tmp):
    subprocess.run(["Rscript", str(HERE / "make_example.R"), str(tmp)], check=True)


def load(tmp):
    cells = pd.read_csv(tmp / "cells.tsv", sep="\t", dtype={"louvain": str})
    genes = pd.read_csv(tmp / "genes.tsv", sep="\t")
    counts = sp.csc_matrix(scipy.io.mmread(str(tmp / "counts.mtx"))).astype(np.int32)  # genes x cells
    emb = {k: np.loadtxt(tmp / f"{k}.tsv", dtype=np.float64, ndmin=2) for k in ("pca", "umap", "tsne")}
    assert counts.shape == (len(genes), len(cells))
    assert all(v.shape[0] == len(cells) for v in emb.values())
    return cells, genes, counts, emb


def lognorm(counts_cells_x_genes):
    """Seurat's LogNormalize (scale factor 1e4), as scanpy's normalize_total + log1p."""
    x = sp.csr_matrix(counts_cells_x_genes, dtype=np.float64)
    totals = np.asarray(x.sum(axis=1)).ravel()
    x = sp.diags(1e4 / totals) @ x
    x.data = np.log1p(x.data)
    return sp.csr_matrix(x, dtype=np.float32)


def write_h5ad(path, cells, genes, counts, emb):
    clusters = sorted(cells["louvain"].unique(), key=int)
    types = [t for t in CELL_TYPES if t in set(cells["cell_type"])]
    obs = pd.DataFrame({
        "louvain": pd.Categorical(cells["louvain"], categories=clusters),
        "cell_type": pd.Categorical(cells["cell_type"], categories=types),
        "total_counts": cells["total_counts"].to_numpy(np.int32),
        "n_genes_by_counts": cells["n_genes_by_counts"].to_numpy(np.int32),
    }, index=pd.Index(cells["barcode"], name=None))
    var = pd.DataFrame({"highly_variable": genes["highly_variable"].to_numpy(bool)},
                       index=pd.Index(genes["symbol"], name=None))
    raw_counts = sp.csr_matrix(counts.T, dtype=np.int32)
    a = ad.AnnData(X=lognorm(raw_counts), obs=obs, var=var, dtype=np.float32)
    a.layers["counts"] = raw_counts
    a.obsm["X_umap"] = emb["umap"].astype(np.float32)
    a.obsm["X_tsne"] = emb["tsne"].astype(np.float32)
    a.obsm["X_pca"] = emb["pca"].astype(np.float32)
    a.uns["title"] = TITLE
    a.uns["louvain_colors"] = np.array(PALETTE[: len(clusters)], dtype=object)
    a.uns["cell_type_colors"] = np.array([PALETTE[CELL_TYPES.index(t)] for t in types], dtype=object)
    a.uns["source"] = ("sctransform::pbmc (Debian r-cran-sctransform): UMI counts of a downsampled "
                       "subset of 10x Genomics' PBMC3k; clusters and embeddings by Seurat, see "
                       "example/make_example.R")
    a.write_h5ad(path, compression="gzip")
    return a


def write_loom(path, a):
    counts = a.layers["counts"].T.toarray().astype(np.int32)  # genes x cells
    norm = a.X.T.toarray().astype(np.float32)
    col = {
        "CellID": np.array(a.obs_names, dtype=object),
        "louvain": np.array(a.obs["louvain"].astype(str), dtype=object),
        "cell_type": np.array(a.obs["cell_type"].astype(str), dtype=object),
        "total_counts": a.obs["total_counts"].to_numpy(),
        "n_genes_by_counts": a.obs["n_genes_by_counts"].to_numpy(),
        "X_umap": a.obsm["X_umap"], "X_tsne": a.obsm["X_tsne"], "X_pca": a.obsm["X_pca"],
    }
    row = {"Gene": np.array(a.var_names, dtype=object),
           "highly_variable": a.var["highly_variable"].to_numpy(np.uint8)}
    loompy.create(str(path), {"": counts, "lognorm": norm}, row, col,
                  file_attrs={"title": TITLE})


def write_bytes(path, data, gz):
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0,
                                                    filename="") as f:
            f.write(data)
    else:
        path.write_bytes(data)


def fixed(strings):
    return np.array([s.encode() for s in strings])


def dset(group, name, value, compress=True):
    value = np.asarray(value)
    kw = {}
    if compress and value.ndim == 1 and value.size > 0:
        kw = dict(compression="gzip", compression_opts=4, shuffle=True,
                  chunks=(min(value.size, 80000),))
    return group.create_dataset(name, data=value, track_times=False, **kw)


def write_outs(outs, a):
    """Cell Ranger 3+ outs/: the counts as .h5 and as MatrixMarket, plus analysis/ CSVs."""
    bcs = list(a.obs_names)
    names = list(a.var_names)
    ids = names  # the dataset has symbols only; the id column repeats them
    csc = sp.csc_matrix(a.layers["counts"].T)  # genes x cells: Cell Ranger's CSC
    csc.sort_indices()
    data = csc.data.astype(np.int32)
    indices = csc.indices.astype(np.int64)
    indptr = csc.indptr.astype(np.int64)

    h5 = outs / "filtered_feature_bc_matrix.h5"
    h5.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(h5, "w", track_order=False, libver="earliest") as f:
        f.attrs["chemistry_description"] = np.bytes_(b"Single Cell 3' v1")
        f.attrs["filetype"] = np.bytes_(b"matrix")
        f.attrs["library_ids"] = fixed(["pbmc3k"])
        f.attrs["original_gem_groups"] = np.array([1], dtype=np.int64)
        f.attrs["version"] = np.int64(2)
        m = f.create_group("matrix")
        dset(m, "barcodes", fixed(bcs))
        dset(m, "data", data)
        dset(m, "indices", indices)
        dset(m, "indptr", indptr)
        dset(m, "shape", np.array([len(names), len(bcs)], dtype=np.int32), compress=False)
        ft = m.create_group("features")
        dset(ft, "_all_tag_keys", fixed(["genome"]), compress=False)
        dset(ft, "feature_type", fixed(["Gene Expression"] * len(names)))
        dset(ft, "genome", fixed(["hg19"] * len(names)))
        dset(ft, "id", fixed(ids))
        dset(ft, "name", fixed(names))

    mex = outs / "filtered_feature_bc_matrix"
    text = io.StringIO()
    text.write("%%MatrixMarket matrix coordinate integer general\n")
    text.write('%metadata_json: {"software_version": "cellranger-6.1.2", "format_version": 2}\n')
    text.write(f"{len(names)} {len(bcs)} {len(data)}\n")
    for c in range(len(bcs)):
        for k in range(indptr[c], indptr[c + 1]):
            text.write(f"{indices[k] + 1} {c + 1} {data[k]}\n")
    write_bytes(mex / "matrix.mtx.gz", text.getvalue().encode(), True)
    write_bytes(mex / "features.tsv.gz",
                "".join(f"{i}\t{n}\tGene Expression\n" for i, n in zip(ids, names)).encode(), True)
    write_bytes(mex / "barcodes.tsv.gz", "".join(b + "\n" for b in bcs).encode(), True)

    def projection(rel, kind, x):
        lines = ["Barcode," + ",".join(f"{kind}-{i + 1}" for i in range(x.shape[1]))]
        lines += [b + "," + ",".join(repr(float(v)) for v in row) for b, row in zip(bcs, x)]
        write_bytes(outs / "analysis" / rel / "projection.csv", ("\n".join(lines) + "\n").encode(), False)

    projection("umap/2_components", "UMAP", a.obsm["X_umap"])
    projection("tsne/2_components", "TSNE", a.obsm["X_tsne"].astype(np.float64))
    projection("pca/10_components", "PC", a.obsm["X_pca"].astype(np.float64))
    # Cell Ranger's cluster labels start at 1 (Seurat's at 0); both number clusters by size
    labels = a.obs["louvain"].astype(int) + 1
    lines = ["Barcode,Cluster"] + [f"{b},{l}" for b, l in zip(bcs, labels)]
    write_bytes(outs / "analysis/clustering/graphclust/clusters.csv",
                ("\n".join(lines) + "\n").encode(), False)


def main():
    with tempfile.TemporaryDirectory(prefix="cellucid-example-") as tmp:
        tmp = Path(tmp)
        run_r(tmp)
        cells, genes, counts, emb = load(tmp)
        shutil.copy(tmp / "versions.tsv", HERE / "versions.tsv")
    for p in ("pbmc.h5ad", "pbmc_loom.loom", "pbmc_cellranger"):
        if (HERE / p).is_dir():
            shutil.rmtree(HERE / p)
        elif (HERE / p).exists():
            (HERE / p).unlink()
    a = write_h5ad(HERE / "pbmc.h5ad", cells, genes, counts, emb)
    write_loom(HERE / "pbmc_loom.loom", a)
    write_outs(HERE / "pbmc_cellranger" / "outs", a)
    total = sum(f.stat().st_size for f in HERE.rglob("*") if f.is_file())
    assert total < MAX_BYTES, f"the example is {total} bytes"
    print(f"wrote {HERE}: {a.n_obs} cells x {a.n_vars} genes, {total} bytes in all")
    print(a)


if __name__ == "__main__":
    sys.exit(main())
