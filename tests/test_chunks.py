"""Chunks for progressive reading (issue 14, docs/design.md §4 Chunks, §7).

On a generated h5ad of 140,000 cells (levels 1024, 4096, 16384, 65536, 140000), few genes (a
view reads a chunk's cells alone while they are at most an eighth of the column, so the input is
over 8 x 16,384 cells):

- Every per-cell array of the store (obs index and columns, categorical codes, nullable values
  and masks, obsm, a dense layer, obsp's indptr, cellucid_original_position) has chunk
  boundaries on every priority level from 16,384 on; obsp's entries are cut by about one such
  level's share; the gene-major X's entries by about half a gene. The store equals the source
  (anndata), and `-o order=original` keeps the byte rule.
- Reading the first level (1,024 cells) of every per-cell array of a mounted store makes one
  chunk each (status.json's cache counter `produced`).
- A cold chunk of the obs index asks the source's reader for its own cells only (status.json's
  `reader.rows`), and so does a cold chunk of an obsm entry, of a categorical, and the last,
  shorter chunk of a column; a second chunk past an eighth of the column reads it whole, once.
- The store's bytes do not depend on how they are made: export, `-o memory=4M`,
  `-o isolate=off`, a mount read cold, a remount on a wiped cache.
"""

import json
import math
import shutil
import sys
import warnings
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import assert_adata_equal, check_chunks, iter_arrays, run_cfs, tree_bytes  # noqa: E402
from priority_reference import reference_levels  # noqa: E402

warnings.simplefilter("ignore")
pytestmark = pytest.mark.filterwarnings("ignore")

N = 140_000
GENES = 24
LEVEL = 16_384          # the first level chunk boundaries are on
STORE = "cells140k.zarr"


def make_input(path):
    rng = np.random.default_rng(14)
    X = sp.random(N, GENES, density=0.05, format="csr", dtype=np.float32, random_state=14)
    X.data[:] = np.floor(X.data * 10) + 1
    obs = pd.DataFrame({
        "batch": pd.Categorical(rng.choice(["a", "b", "c"], N)),
        "score": rng.random(N),
        "flag": rng.random(N) > 0.5,
        "count": rng.integers(0, 1000, N, dtype=np.int32),
        "label": np.array([f"l{i}" for i in range(N)], dtype=object),   # unique: stays strings
        "maybe": pd.array(np.where(rng.random(N) > 0.9, None, rng.integers(0, 5, N)), dtype="Int64"),
        "yes": pd.array(np.where(rng.random(N) > 0.9, None, rng.random(N) > 0.5), dtype="boolean"),
    }, index=[f"cell{i}" for i in range(N)])
    a = ad.AnnData(X, obs=obs, var=pd.DataFrame(index=[f"g{j}" for j in range(GENES)]), dtype=np.float32)
    a.obsm["X_umap"] = rng.standard_normal((N, 2)).astype(np.float32)
    a.obsm["X_wide"] = rng.standard_normal((N, 80)).astype(np.float32)   # rows read by blocks
    a.layers["dense"] = np.asarray(X.todense())
    rows = np.repeat(np.arange(N), 5)
    cols = rng.integers(0, N, N * 5)
    g = sp.csr_matrix((rng.random(N * 5).astype(np.float32), (rows, cols)), shape=(N, N))
    g.sum_duplicates()
    a.obsp["connectivities"] = g
    a.write_h5ad(path)
    return path


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    d = tmp_path_factory.mktemp("chunks-src")
    make_input(d / "cells140k.h5ad")
    return d


@pytest.fixture(scope="module")
def export(cfs, source, tmp_path_factory):
    cache = {}

    def get(*opts):
        if opts not in cache:
            out = tmp_path_factory.mktemp("chunks-out") / "out"
            args = [a for o in opts for a in ("-o", o)]
            r = run_cfs(cfs, "export", *args, source, out)
            assert r.returncode == 0, r.stderr
            cache[opts] = out
        return cache[opts]

    return get


def zarray(store, rel):
    return json.loads((Path(store) / rel / ".zarray").read_text())


def per_cell_arrays(store):
    """{relative path: .zarray} of every array whose first axis is the cells."""
    out = {}
    for adir, za in iter_arrays(store):
        rel = adir.relative_to(store).as_posix()
        top = rel.split("/")[0]
        if top in ("obs", "obsm", "layers") and za["shape"] and za["shape"][0] == N:
            out[rel] = za
        elif rel == "obsp/connectivities/indptr":
            out[rel] = za
    return out


def test_per_cell_chunks_end_on_the_levels(export):
    store = export() / STORE
    check_chunks(store)
    arrays = per_cell_arrays(store)
    expected = {"obs/_index", "obs/batch/codes", "obs/score", "obs/flag", "obs/count", "obs/label",
                "obs/maybe/values", "obs/maybe/mask", "obs/yes/values", "obs/yes/mask",
                "obs/cellucid_original_position", "obsm/X_umap", "obsm/X_wide", "layers/dense",
                "obsp/connectivities/indptr"}
    assert expected <= set(arrays), sorted(expected - set(arrays))
    levels = [int(v) for v in reference_levels(N) if v >= LEVEL]
    assert levels == [16384, 65536, N]
    for rel, za in arrays.items():
        rows = za["chunks"][0]
        assert LEVEL % rows == 0, f"{rel}: {rows} rows a chunk do not divide {LEVEL}"
        for lv in levels[:-1]:
            assert lv % rows == 0, f"{rel}: level {lv} is not a chunk boundary ({rows} rows a chunk)"
        # reading the first such level touches exactly its own chunks
        assert math.ceil(LEVEL / rows) * rows == LEVEL, rel
    assert arrays["obs/_index"]["chunks"] == [LEVEL]
    assert arrays["obsm/X_umap"]["chunks"] == [LEVEL, 2]
    assert arrays["layers/dense"]["chunks"] == [LEVEL, 1], "one gene a dense chunk"
    # X_wide: 80 float32 = 320 bytes a row, 16384 rows = 5 MiB: a whole level still fits 8 MiB
    assert arrays["obsm/X_wide"]["chunks"] == [LEVEL, 80]


def test_cell_graph_entries_cut_by_a_level_share(export):
    store = export() / STORE
    g = zarr.open_consolidated(str(store), mode="r")
    indptr = np.asarray(g["obsp/connectivities/indptr"][:])
    nnz = int(indptr[-1])
    share = nnz * LEVEL // N
    for part in ("data", "indices"):
        c = zarray(store, f"obsp/connectivities/{part}")["chunks"][0]
        assert share // 2 <= c <= 2 * share, (part, c, share)
        # the first level's entries are a prefix: at most one chunk beyond their share
        assert math.ceil(int(indptr[LEVEL]) / c) <= int(indptr[LEVEL]) // c + 1 <= 2, (part, c)


def test_gene_ranges_cut_by_half_a_gene(export):
    store = export() / STORE
    g = zarr.open_consolidated(str(store), mode="r")
    indptr = np.asarray(g["X/indptr"][:])
    mean = int(indptr[-1]) // GENES
    for part in ("data", "indices"):
        c = zarray(store, f"X/{part}")["chunks"][0]
        # half a gene (to a power of two), but never below 16 KiB of values
        assert c == max(1 << ((mean // 2).bit_length() - 1), 4096), (part, c, mean)


def test_store_equals_source(export, source):
    store = ad.read_zarr(export() / STORE)
    src = ad.read_h5ad(source / "cells140k.h5ad")
    # The cell graph is compared sparse here (the comparator would make it dense: 20 GB).
    order = np.asarray(store.obs["cellucid_original_position"])
    got = store.obsp.pop("connectivities").tocsr()
    want = src.obsp.pop("connectivities").tocsr()[order][:, order]
    assert got.dtype == want.dtype and (got != want).nnz == 0
    assert_adata_equal(store, src, dataset_id="cells140k", dataset_name="cells140k")


def test_original_order_keeps_the_byte_rule(export):
    store = export("order=original") / STORE
    for rel in ("obs/_index", "obs/score", "obsm/X_umap"):
        za = zarray(store, rel)
        assert za["chunks"][0] == N, f"{rel}: {za['chunks']}: no levels, one chunk of <= 8 MiB"


def test_store_bytes_do_not_depend_on_how_they_are_made(export, source, mounts, tmp_path):
    want = tree_bytes(export() / STORE)
    for opts in (("memory=4M",), ("isolate=off",)):
        got = tree_bytes(export(*opts) / STORE)
        differ = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
        assert not differ, f"-o {opts}: {differ[:10]}"
    cache = tmp_path / "cache"
    for run in ("cold", "remount on a wiped cache"):
        m = mounts(source, cache=cache)
        got = tree_bytes(m.mnt / STORE)
        differ = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
        assert not differ, f"mount, {run}: {differ[:10]}"
        assert not m.stop()
        shutil.rmtree(cache)


def reader_rows(m):
    [src] = m.status()["sources"]
    return src["reader"]["rows"], src["reader"]["requests"]


def produced(m):
    return m.status()["cache"]["produced"]


def test_first_level_makes_only_its_chunks(source, export, mounts):
    m = mounts(source)
    g = zarr.open_consolidated(str(m.mnt / STORE), mode="r")
    before = produced(m)
    arrays = per_cell_arrays(m.mnt / STORE)
    want = zarr.open_consolidated(str(export() / STORE), mode="r")
    # one chunk along the cells; every chunk across the other axes (a dense layer: every gene)
    need = sum(math.prod(math.ceil(s / c) for s, c in zip(za["shape"][1:], za["chunks"][1:]))
               for za in arrays.values())
    for rel in sorted(arrays):
        got = g[rel][:1024]
        assert np.array_equal(got, want[rel][:1024]), rel
    categories = g["obs/batch/categories"][:]
    assert list(categories) == ["a", "b", "c"]
    made = produced(m) - before
    assert made == need + 1, f"{made} chunks made for the first level's {need} chunks + categories"


def test_cold_chunk_reads_only_its_cells(source, mounts):
    m = mounts(source)
    store = m.mnt / STORE
    last = N // LEVEL
    rows0, req0 = reader_rows(m)
    (store / "obs/_index/0").read_bytes()
    rows1, req1 = reader_rows(m)
    assert (rows1 - rows0, req1 - req0) == (LEVEL, 1), "chunk 0 of the obs index: its 16,384 cells, one request"
    (store / f"obs/score/{last}").read_bytes()
    rows2, _ = reader_rows(m)
    assert rows2 - rows1 == N - last * LEVEL, "the last chunk: its own cells"
    # (X_umap is read whole at open, to check it can be drawn: its chunks are made from that.)
    (store / "obsm/X_wide/1.0").read_bytes()
    (store / "obs/batch/codes/2").read_bytes()
    rows3, _ = reader_rows(m)
    assert rows3 - rows2 == 2 * LEVEL
    # A client reading on through the column: past an eighth of it, the column is read whole,
    # once, and its other chunks are made from that.
    for k in range(1, last + 1):
        (store / f"obs/_index/{k}").read_bytes()
    rows4, _ = reader_rows(m)
    assert rows4 - rows3 == N, rows4 - rows3


@pytest.mark.parametrize("part, which", [("data", 3), ("indices", "last")])
def test_cold_chunk_of_a_cell_graph_reads_its_rows(source, export, mounts, part, which):
    """A chunk of obsp entries is made from the stored rows holding it (the source's indptr is
    read whole, then those rows' entries), and equals the export's, made from the whole graph."""
    store = export() / STORE
    za = zarray(store, f"obsp/connectivities/{part}")
    c, nnz = za["chunks"][0], za["shape"][0]
    k = nnz // c if which == "last" else which
    m = mounts(source)
    rows0, _ = reader_rows(m)
    got = (m.mnt / STORE / f"obsp/connectivities/{part}/{k}").read_bytes()
    rows1, _ = reader_rows(m)
    assert got == (store / f"obsp/connectivities/{part}/{k}").read_bytes()
    # indptr (N + 1) whole, then indices (and for data, the values) of the chunk's rows only
    # (plus the rest of the first and last rows it cuts: a few entries)
    reads, entries = (1 if part == "indices" else 2), min(c, nnz - k * c)
    assert N + 1 + reads * entries <= rows1 - rows0 <= N + 1 + reads * (entries + 100), \
        (rows1 - rows0, entries, nnz)
