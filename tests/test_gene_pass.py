"""The gene-major pass serves a gene before it ends (issue 14 item 4, docs/design.md §7).

On a generated CSR h5ad (20,000 cells x 2,000 genes, about 50 nonzeros a cell: 64 buckets of
about 32 genes), mounted with the test hook CELLUCID_FS_TEST_LAYOUT_DELAY (each bucket waits
200 ms before it is sorted, so the sorting takes about 6 s on two sorters):

- a gene three quarters along the axis is read through the mount (its X/indptr chunk, then every
  X/data and X/indices chunk its range touches) while status.json still shows the layout of X
  working with fewer than half of its buckets written: the bucket was sorted ahead of its turn,
  and the bytes equal the export's; the rest of the pass then lands in the background, and every
  chunk of X equals the export's;
- an unmount while the pass runs stops it and the daemon exits cleanly; a remount on the same
  cache serves the gene right (nothing partial was kept).
"""

import json
import sys
import time
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import chunk_keys, run_cfs  # noqa: E402

CELLS, GENES, PER_CELL = 20_000, 2_000, 50
STORE = "genes20k.zarr"
DELAY_MS = 200
GENE = (3 * GENES) // 4
SPILL_SHARE = 0.7       # progress.fraction: the spill's share, then the buckets' (design §6)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    d = tmp_path_factory.mktemp("gene-pass-src")
    rng = np.random.default_rng(4)
    cols = np.sort(rng.integers(0, GENES, size=(CELLS, PER_CELL)), axis=1)
    keep = np.ones(cols.shape, dtype=bool)
    keep[:, 1:] = cols[:, 1:] != cols[:, :-1]
    indptr = np.concatenate([[0], np.cumsum(keep.sum(axis=1))])
    X = sp.csr_matrix((rng.integers(1, 50, int(indptr[-1])).astype(np.float32), cols[keep], indptr),
                      shape=(CELLS, GENES))
    a = ad.AnnData(X, obs=pd.DataFrame(index=[f"c{i}" for i in range(CELLS)]),
                   var=pd.DataFrame(index=[f"g{j}" for j in range(GENES)]), dtype=np.float32)
    a.obsm["X_umap"] = rng.standard_normal((CELLS, 2)).astype(np.float32)
    a.write_h5ad(d / "genes20k.h5ad")
    return d


@pytest.fixture(scope="module")
def exported(cfs, source, tmp_path_factory):
    out = tmp_path_factory.mktemp("gene-pass-export") / "out"
    r = run_cfs(cfs, "export", source, out)
    assert r.returncode == 0, r.stderr
    return out / STORE


def gene_files(store, gene):
    """The chunk files a client reads for one gene: X/indptr's chunk(s), then X/data's and
    X/indices' chunks over its range."""
    za = {p: json.loads((store / "X" / p / ".zarray").read_text()) for p in ("indptr", "data", "indices")}
    indptr = zarr.open(str(store / "X" / "indptr"), mode="r")
    lo, hi = int(indptr[gene]), int(indptr[gene + 1])
    assert hi > lo
    cp = za["indptr"]["chunks"][0]
    files = [f"X/indptr/{i}" for i in sorted({gene // cp, (gene + 1) // cp})]
    for p in ("data", "indices"):
        c = za[p]["chunks"][0]
        files += [f"X/{p}/{i}" for i in range(lo // c, (hi - 1) // c + 1)]
    return files


def x_source(m):
    [src] = m.status()["sources"]
    return src


def wait_for(pred, what, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    pytest.fail(f"{what} within {timeout} s")


def test_gene_served_while_the_pass_runs(mounts, source, exported, monkeypatch):
    files = gene_files(exported, GENE)
    monkeypatch.setenv("CELLUCID_FS_TEST_LAYOUT_DELAY", str(DELAY_MS))
    m = mounts(source)
    store = m.mnt / STORE
    got = {f: (store / f).read_bytes() for f in files}
    src = x_source(m)
    for f in files:
        assert got[f] == (exported / f).read_bytes(), f"{f} differs from the export's"
    # Still working, fewer than half of the buckets written: the gene's bucket (three quarters
    # along) went ahead of its turn.
    assert src["state"] == "working", src
    assert src["progress"]["element"] == "X", src
    assert SPILL_SHARE <= src["progress"]["fraction"] < SPILL_SHARE + (1 - SPILL_SHARE) / 2, src
    # The rest lands in the background, each chunk as its bucket does.
    wait_for(lambda: x_source(m)["state"] == "ready", "the layout did not end")
    for p in ("data", "indices", "indptr"):
        za = json.loads((exported / "X" / p / ".zarray").read_text())
        for k in chunk_keys(za):
            f = f"X/{p}/{k}"
            assert (store / f).read_bytes() == (exported / f).read_bytes(), f"{f} differs from the export's"


def test_unmount_while_the_pass_runs(mounts, source, exported, monkeypatch, tmp_path):
    za = json.loads((exported / "X" / "indptr" / ".zarray").read_text())
    first = f"X/indptr/{chunk_keys(za)[0]}"
    monkeypatch.setenv("CELLUCID_FS_TEST_LAYOUT_DELAY", str(DELAY_MS))
    cache = tmp_path / "cache"
    m = mounts(source, cache=cache)
    assert (m.mnt / STORE / first).read_bytes() == (exported / first).read_bytes()
    src = x_source(m)
    assert src["state"] == "working" and src["progress"]["fraction"] < 1, src
    problems = m.stop()     # the pass is cancelled; the daemon must exit 0 within 15 s
    assert not problems, problems
    monkeypatch.delenv("CELLUCID_FS_TEST_LAYOUT_DELAY")
    m = mounts(source, cache=cache)
    for f in gene_files(exported, GENE):
        assert (m.mnt / STORE / f).read_bytes() == (exported / f).read_bytes(), f
