"""The store's encodings equal what Debian's anndata 0.8 `write_zarr` writes for the same file.

For every fixture anndata can read, anndata's own Zarr store is the reference: every node it
writes must exist in ours with the same kind (group or array), the same .zattrs (encoding-type,
encoding-version, _index, column-order, ordered, shape), and for arrays the same dtype, shape,
order and filters. Chunk shapes and compressors are ours to choose (docs/design.md §4) and are not
compared; nor is the string fill value (anndata 0.8 writes 0, we write ""). Our store may only
add uns/cellucid. One deliberate difference: the `indices` and `indptr` of a sparse matrix share
one dtype in our store (int32 here, where everything fits), where anndata 0.8 writes whatever
dtypes it read (an h5ad with int32 indices and int64 indptr gives a store that scipy cannot index:
a[cells] fails). The export uses -o order=original: priority order adds a column and makes X
gene-major, which anndata never writes (tests/test_layout.py covers that layout).
"""

import json
import warnings
from pathlib import Path

import anndata as ad
import pytest

from conftest import GOOD, GOOD_NAMES, fixture_id, good_path, run_cfs

warnings.simplefilter("ignore")

# Fixtures anndata 0.8 reads as they are (the others need an h5py-normalised copy).
PARITY = [n for n in GOOD_NAMES if GOOD[n]["oracle"]["kind"] == "anndata"]


def zarr_nodes(root):
    """{relative path: (kind, zattrs, zarray)} of every node below root."""
    nodes = {}
    for meta in sorted(Path(root).rglob(".z*")):
        if meta.name not in (".zgroup", ".zarray"):
            continue
        rel = meta.parent.relative_to(root).as_posix()
        rel = "" if rel == "." else rel
        attrs_file = meta.parent / ".zattrs"
        attrs = json.loads(attrs_file.read_text()) if attrs_file.exists() else {}
        zarray = json.loads(meta.read_text()) if meta.name == ".zarray" else None
        nodes[rel] = ("array" if zarray else "group", attrs, zarray)
    return nodes


ARRAY_KEYS = ("dtype", "shape", "order", "filters", "zarr_format")


@pytest.mark.parametrize("name", PARITY)
def test_encodings_equal_anndata_write_zarr(name, cfs, tmp_path):
    reference = tmp_path / "anndata.zarr"
    ad.read_h5ad(good_path(name)).write_zarr(str(reference))
    # Source order and encodings: what anndata itself would write from this file.
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", "-o", "order=original", good_path(name), out)
    assert r.returncode == 0, r.stderr
    ours = zarr_nodes(out / f"{fixture_id(name)}.zarr")
    theirs = zarr_nodes(reference)

    extra = sorted(p for p in set(ours) - set(theirs) if not p.startswith("uns/cellucid"))
    missing = sorted(set(theirs) - set(ours))
    assert not missing, f"nodes anndata writes that the store lacks: {missing}"
    assert not extra, f"nodes the store has that anndata does not write: {extra}"
    for path, (kind, attrs, zarray) in theirs.items():
        okind, oattrs, ozarray = ours[path]
        assert okind == kind, f"{path}: {okind} vs anndata's {kind}"
        assert oattrs == attrs, f"{path}/.zattrs: {oattrs} vs anndata's {attrs}"
        if kind == "array":
            want = dict(zarray)
            parent = theirs.get(path.rpartition("/")[0], (None, {}, None))[1]
            if path.rpartition("/")[2] in ("indices", "indptr") and \
                    parent.get("encoding-type") in ("csr_matrix", "csc_matrix"):
                want["dtype"] = "<i4"
            for key in ARRAY_KEYS:
                assert ozarray.get(key) == want.get(key), (
                    f"{path}/.zarray {key}: {ozarray.get(key)} vs {want.get(key)} (anndata's {zarray.get(key)})")
            assert ozarray["fill_value"] is not None, path
