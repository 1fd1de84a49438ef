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
