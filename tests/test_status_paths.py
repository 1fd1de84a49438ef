"""status.json, served with the stores to anyone, shows sources by their path below SRC and never
where SRC lies on the machine (src/volume/volume.c shown_source)."""
import json
import shutil

from conftest import FIXTURES_DIR


def test_sources_are_shown_below_src(mounts, tmp_path):
    src = tmp_path / "private" / "lab" / "data"
    src.mkdir(parents=True)
    shutil.copy(FIXTURES_DIR / "h5ad/csr_f32.h5ad", src / "csr_f32.h5ad")
    shutil.copytree(FIXTURES_DIR / "outs/pbmc_v3", src / "run1")
    m = mounts(src)
    text = (m.mnt / "status.json").read_text()
    shown = sorted(s["source"] for s in json.loads(text)["sources"])
    assert shown == ["csr_f32.h5ad", "run1"], shown
    assert str(tmp_path) not in text and "/private/lab" not in text, text


def test_a_single_input_is_shown_by_its_name(mounts, tmp_path):
    src = tmp_path / "secret" / "pbmc.h5ad"
    src.parent.mkdir()
    shutil.copy(FIXTURES_DIR / "h5ad/csr_f32.h5ad", src)
    m = mounts(src)
    text = (m.mnt / "status.json").read_text()
    assert [s["source"] for s in json.loads(text)["sources"]] == ["pbmc.h5ad"]
    assert "secret" not in text, text


def test_the_log_names_sources_below_src(mounts, tmp_path):
    """The daemon's log (often shipped to a shared place) names sources as status.json does."""
    src = tmp_path / "private" / "lab" / "data"
    (src / "sub").mkdir(parents=True)
    shutil.copy(FIXTURES_DIR / "h5ad/csr_f32.h5ad", src / "csr_f32.h5ad")
    (src / "broken.h5ad").write_bytes(b"not an HDF5 file at all")
    m = mounts(src)
    log = m.stderr()
    lines = [l for l in log.splitlines() if "broken.h5ad" in l]
    assert lines and lines[0].startswith("cellucid-fs: broken.h5ad: refused: "), log
    assert "/private/lab" not in log, log


def test_a_reader_of_status_json_gets_one_text(mounts, tmp_path):
    """A reader that opens status.json and reads it piece by piece gets one whole text even when
    the status changes in between (here the cache's counters, moved by chunk reads): the fstat
    and the kernel's getattr before each read do not render it anew (fuse/fs.c status_told)."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(FIXTURES_DIR / "h5ad/csr_f32.h5ad", src / "cells.h5ad")
    m = mounts(src)
    chunks = sorted(p for p in (m.mnt / "cells.zarr").rglob("*") if p.name[:1].isdigit())
    assert len(chunks) >= 4, chunks
    before = json.loads((m.mnt / "status.json").read_text())["cache"]
    with open(m.mnt / "status.json", "rb") as f:
        head = f.read(16)
        for c in chunks:
            c.read_bytes()      # moves the cache's counters
        rest = f.read()
    doc = json.loads(head + rest)
    after = json.loads((m.mnt / "status.json").read_text())["cache"]
    assert after != before, "the chunk reads did not change the status: nothing was tested"
    assert doc["cache"] == before, (doc["cache"], before)
