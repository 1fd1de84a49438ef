#!/usr/bin/Rscript
# Step 1 of the example's generator (make_example.py runs it; see README.md here).
#
# Takes the real PBMC UMI counts that Debian's r-cran-sctransform ships as `sctransform::pbmc`
# (283 cells x 914 genes, a downsampled subset of 10x Genomics' PBMC3k, Cell Ranger 1.1.0,
# hg19) and runs a standard Seurat workflow on them: LogNormalize, 500 variable genes, PCA,
# shared-nearest-neighbour Louvain clusters (resolution 0.8) and UMAP (uwot) and t-SNE (Rtsne)
# on the first 10 PCs, all with fixed seeds. A coarse cell type per cluster is chosen from
# canonical PBMC markers (the cell type whose markers score highest in the cluster); with this
# few genes and cells the types are coarse (no CD4/CD8 or CD14/FCGR3A split, no DCs).
#
# Writes plain text into the folder given (make_example.py turns it into the example's files):
#   counts.mtx   UMI counts, genes x cells (MatrixMarket integer)
#   genes.tsv    symbol, highly_variable
#   cells.tsv    barcode, total_counts, n_genes_by_counts, louvain, cell_type
#   pca.tsv umap.tsv tsne.tsv   per-cell coordinates (PCA: 10 components)
#   versions.tsv the R packages used
suppressPackageStartupMessages({
    library(Matrix)
    library(Seurat)
})

args <- commandArgs(trailingOnly = TRUE)
stopifnot(length(args) == 1)
out <- args[[1]]
dir.create(out, showWarnings = FALSE, recursive = TRUE)

data("pbmc", package = "sctransform")  # dgCMatrix, genes x cells
counts <- pbmc
colnames(counts) <- paste0(colnames(counts), "-1")  # Cell Ranger's barcodes end in -1 (GEM well)

set.seed(1)
so <- CreateSeuratObject(counts, project = "pbmc3k")
so <- NormalizeData(so, normalization.method = "LogNormalize", scale.factor = 1e4, verbose = FALSE)
so <- FindVariableFeatures(so, nfeatures = 500, verbose = FALSE)
so <- ScaleData(so, verbose = FALSE)
so <- RunPCA(so, npcs = 20, seed.use = 42, verbose = FALSE)
so <- FindNeighbors(so, dims = 1:10, verbose = FALSE)
so <- FindClusters(so, resolution = 0.8, random.seed = 0, verbose = FALSE)
so <- RunUMAP(so, dims = 1:10, seed.use = 42, umap.method = "uwot", n.epochs = 500,
              verbose = FALSE)
so <- RunTSNE(so, dims = 1:10, seed.use = 1, perplexity = 30)

# Coarse labels: z-score each marker's cluster mean (log-normalised) across clusters; a
# cluster takes the type whose markers have the highest mean z-score.
markers <- list(
    "T cells" = c("IL7R", "CCR7", "CD2", "GZMK"),
    "NK / cytotoxic T cells" = c("NKG7", "GNLY", "GZMB"),
    "B cells" = c("MS4A1", "CD79A", "HLA-DQA1"),
    "Monocytes" = c("LYZ", "CST3", "S100A8", "S100A9", "LST1"),
    "Platelets" = c("PPBP", "PF4")
)
markers <- lapply(markers, function(g) intersect(g, rownames(so)))
cl <- Idents(so)
lognorm <- GetAssayData(so, slot = "data")
genes <- unique(unlist(markers))
means <- sapply(levels(cl), function(k) rowMeans(lognorm[genes, cl == k, drop = FALSE]))
z <- t(scale(t(means)))
score <- sapply(markers, function(g) colMeans(z[g, , drop = FALSE]))
label <- colnames(score)[apply(score, 1, which.max)]
names(label) <- levels(cl)
print(round(score, 2))
print(label)

cells <- data.frame(
    barcode = colnames(so),
    total_counts = as.integer(so$nCount_RNA),
    n_genes_by_counts = as.integer(so$nFeature_RNA),
    louvain = as.character(cl),
    cell_type = unname(label[as.character(cl)])
)
write.table(cells, file.path(out, "cells.tsv"), sep = "\t", quote = FALSE, row.names = FALSE)
write.table(data.frame(symbol = rownames(so), highly_variable = rownames(so) %in% VariableFeatures(so)),
            file.path(out, "genes.tsv"), sep = "\t", quote = FALSE, row.names = FALSE)
invisible(writeMM(GetAssayData(so, slot = "counts"), file.path(out, "counts.mtx")))
emb <- function(name, red, k) {
    x <- Embeddings(so, red)[, seq_len(k), drop = FALSE]
    write.table(format(x, digits = 9, scientific = FALSE, trim = TRUE), file.path(out, name),
                sep = "\t", quote = FALSE, col.names = FALSE, row.names = FALSE)
}
emb("pca.tsv", "pca", 10)
emb("umap.tsv", "umap", 2)
emb("tsne.tsv", "tsne", 2)
pk <- c("Seurat", "SeuratObject", "sctransform", "uwot", "Rtsne", "Matrix")
write.table(data.frame(package = pk, version = sapply(pk, function(p) as.character(packageVersion(p)))),
            file.path(out, "versions.tsv"), sep = "\t", quote = FALSE, row.names = FALSE)
