"""A source's own uns['cellucid'] (src/catalog/cellucid_meta.c), checked by the key table of
Cellucid's file-format page (schema 1), fixtures in tests/fixtures/cellucid_meta/ (anndata 0.8,
tests/fixtures/make_cellucid_meta_fixtures.py):

- every right key is kept in the store as the source has it (anndata reads it back equal);
- a wrong key or value, or a wrong launch default, is left out with its reason (the export log
  and status.json list it), the rest kept, so the store always opens in the viewer;
- a later schema refuses the source, naming it;
- a source already in priority order with a record describing its cells (cellucid.prepare()'s
  output) keeps its order and its record; a record that does not describe the file is left out
  and the store gets its own.
"""
import json
import warnings
from pathlib import Path

import anndata as ad
import numpy as np
import pytest

from conftest import (
    FIXTURES_DIR,
    assert_adata_equal,
    describe,
    left_out_lines,
    load_manifest,
    refused_lines,
    run_cfs,
)
from priority_reference import reference_levels, reference_order

warnings.simplefilter("ignore")
pytestmark = pytest.mark.filterwarnings("ignore")

META_DIR = FIXTURES_DIR / "cellucid_meta"
MANIFEST = load_manifest("cellucid_meta", "make_cellucid_meta_fixtures.py")["fixtures"]


def source(name):
    return META_DIR / MANIFEST[name]["file"]


def export(cfs, name, tmp_path):
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", source(name), out)
    return r, out


def store_of(out, name):
    return ad.read_zarr(str(out / f"{name}.zarr"))


def left_out_elements(stderr):
    return sorted(line.split(": left out ", 1)[1].split(":", 1)[0] for line in left_out_lines(stderr))


def test_valid_keys_are_kept(cfs, tmp_path):
    r, out = export(cfs, "valid", tmp_path)
    assert r.returncode == 0 and not left_out_lines(r.stderr), describe(r)
    store = store_of(out, "pbmc-demo.v1")         # the file's own id names the store
    src = ad.read_h5ad(source("valid"))
    meta = store.uns["cellucid"]
    assert sorted(meta) == sorted(set(MANIFEST["valid"]["kept"]) | {"priority"}), sorted(meta)
    assert sorted(meta["defaults"]) == MANIFEST["valid"]["defaults_kept"]
    assert_adata_equal(store, src, dataset_id="pbmc-demo.v1", dataset_name="PBMC demo — café")


def test_wrong_keys_and_defaults_are_left_out_with_reasons(cfs, tmp_path):
    e = MANIFEST["wrong"]
    r, out = export(cfs, "wrong", tmp_path)
    assert r.returncode == 0, describe(r)
    want = sorted([f"uns/cellucid/{k}" for k in e["left_out"]] +
                  [f"uns/cellucid/defaults/{k}" for k in e["defaults_left_out"]])
    assert left_out_elements(r.stderr) == want, r.stderr
    for line in left_out_lines(r.stderr):
        assert "wrong.h5ad" in line and "schema 1" in line, line
    store = store_of(out, "wrong")                 # the file's id was wrong: the name gives it
    meta = store.uns["cellucid"]
    assert sorted(meta) == sorted(set(e["kept"]) | {"id", "name", "priority"}), sorted(meta)
    assert sorted(meta["defaults"]) == e["defaults_kept"], sorted(meta["defaults"])
    # Everything else is the source, with the wrong parts taken out.
    src = ad.read_h5ad(source("wrong"))
    for k in e["left_out"]:
        del src.uns["cellucid"][k]
    for k in e["defaults_left_out"]:
        del src.uns["cellucid"]["defaults"][k]
    assert_adata_equal(store, src, dataset_id="wrong", dataset_name="wrong")


def test_later_schema_is_refused_naming_it(cfs, tmp_path):
    r, out = export(cfs, "later_schema", tmp_path)
    assert r.returncode == 2, describe(r)
    lines = refused_lines(r.stderr)
    assert len(lines) == 1 and "later_schema.h5ad" in lines[0], r.stderr
    assert "uns['cellucid']['schema'] is 2" in lines[0] and "schema 1" in lines[0], lines[0]
    assert not (out / "later_schema.zarr").exists()


def test_prepared_source_keeps_its_order_and_record(cfs, tmp_path):
    r, out = export(cfs, "prepared", tmp_path)
    assert r.returncode == 0 and not left_out_lines(r.stderr), describe(r)
    store = store_of(out, "prepared")
    src = ad.read_h5ad(source("prepared"))
    n = src.n_obs
    assert list(store.obs_names) == list(src.obs_names), "the cells were permuted again"
    assert store.obs["cellucid_original_position"].tolist() == list(range(n))
    rec = store.uns["cellucid"]["priority"]
    assert int(rec["seed"]) == 42 and int(rec["specVersion"]) == 1 and int(rec["nObs"]) == n
    assert np.asarray(rec["levels"]).tolist() == reference_levels(n).tolist()
    assert_adata_equal(store, src, dataset_id="prepared", dataset_name="prepared")
    # The file's cells are those of its unordered original, in seed 42's priority order.
    order = reference_order(n, 42)
    assert sorted(np.asarray(store.obs_names)[np.argsort(order)]) == sorted(src.obs_names)


def test_stale_record_is_replaced(cfs, tmp_path):
    r, out = export(cfs, "stale_record", tmp_path)
    assert r.returncode == 0, describe(r)
    assert left_out_elements(r.stderr) == ["uns/cellucid/priority"], r.stderr
    assert "does not describe the file's cells" in left_out_lines(r.stderr)[0]
    store = store_of(out, "stale_record")
    n = store.n_obs
    rec = store.uns["cellucid"]["priority"]
    assert int(rec["seed"]) == 0 and int(rec["nObs"]) == n, dict(rec)
    assert store.obs["cellucid_original_position"].tolist() == reference_order(n, 0).tolist()
    src = ad.read_h5ad(source("stale_record"))
    del src.uns["cellucid"]["priority"]
    assert_adata_equal(store, src, dataset_id="stale_record", dataset_name="stale_record")


def test_mount_lists_what_was_left_out_and_refused(cfs, mounts, tmp_path):
    m = mounts(META_DIR)
    status = json.loads((m.mnt / "status.json").read_text())
    by_file = {Path(s["source"]).name: s for s in status["sources"]}
    assert sorted(by_file) == sorted(e["file"] for e in MANIFEST.values())
    later = by_file["later_schema.h5ad"]
    assert later["state"] == "refused" and "schema" in later["reason"], later
    wrong = by_file["wrong.h5ad"]
    e = MANIFEST["wrong"]
    assert sorted(x["element"] for x in wrong["left_out"]) == sorted(
        [f"uns/cellucid/{k}" for k in e["left_out"]] +
        [f"uns/cellucid/defaults/{k}" for k in e["defaults_left_out"]]), wrong["left_out"]
    assert by_file["valid.h5ad"]["left_out"] == [] and by_file["prepared.h5ad"]["left_out"] == []
    # Served through the mount as export writes them.
    store = ad.read_zarr(str(m.mnt / "prepared.zarr"))
    assert list(store.obs_names) == list(ad.read_h5ad(source("prepared")).obs_names)
    valid = ad.read_zarr(str(m.mnt / "pbmc-demo.v1.zarr"))
    assert_adata_equal(valid, ad.read_h5ad(source("valid")), dataset_id="pbmc-demo.v1",
                       dataset_name="PBMC demo — café")
