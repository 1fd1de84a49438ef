"""Readers run in worker processes (docs/design.md §2.4): a source whose bytes crash libhdf5, spin
or allocate without bound takes down its worker, never the mount or the export. The damaged
inputs are real: anndata-written files with bits flipped that kill the in-process reader
(tests/fixtures/make_damaged_h5ad.py, tests/fixtures/damaged/README.md); the test hook
CELLUCID_FS_TEST_READER_FAULT (honoured by workers only) makes each limit happen on demand."""
import errno
import json
import os
import shutil
import time

import anndata
import numpy as np
import pytest

from conftest import FIXTURES_DIR, refused_lines, run_cfs, workers_of, workers_of_binary, zombies_of

BAD = FIXTURES_DIR / "damaged"
GOOD = FIXTURES_DIR / "h5ad" / "nonascii.h5ad"
FAULT_ENV = "CELLUCID_FS_TEST_READER_FAULT"


def status_of(mnt, source):
    doc = json.loads((mnt / "status.json").read_text())
    return next((s for s in doc["sources"] if s["source"] == source), None)


def wait_for(pred, seconds=15):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def read_chunk(path):
    with open(path, "rb") as fh:
        return fh.read()


def assert_eio(path):
    with pytest.raises(OSError) as e:
        read_chunk(path)
    assert e.value.errno == errno.EIO, e.value


def assert_same_as_source(store, source):
    """anndata reads the served store as the source read by anndata, once the priority order is
    undone (cells matched by name)."""
    got = anndata.read_zarr(store)
    want = anndata.read_h5ad(source)
    assert sorted(got.obs_names) == sorted(want.obs_names)
    got = got[list(want.obs_names)]
    assert list(got.var_names) == list(want.var_names)
    np.testing.assert_array_equal(np.asarray(got.X.todense()), np.asarray(want.X.todense()))
    for col in want.obs.columns:
        assert list(got.obs[col]) == list(want.obs[col]), col
    np.testing.assert_array_equal(got.obsm["X_umap"], want.obsm["X_umap"])


# ---- export ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name,signal", [("crash_open_sigsegv.h5ad", "SIGSEGV"),
                                         ("crash_open_sigfpe.h5ad", "SIGFPE"),
                                         ("crash_read_sigsegv.h5ad", "SIGSEGV")])
def test_export_of_a_crashing_file_refuses_it_in_one_line(cfs, tmp_path, name, signal):
    src = BAD / name
    inproc = run_cfs(cfs, "export", "-o", "isolate=off", src, tmp_path / "inproc")
    assert inproc.returncode < 0, "the fixture no longer crashes the in-process reader"
    r = run_cfs(cfs, "export", src, tmp_path / "out")
    assert r.returncode == 2, r.stderr
    lines = refused_lines(r.stderr)
    assert len(lines) == 1 and str(src) in lines[0], r.stderr
    assert f"killed by {signal}" in lines[0] and "damaged" in lines[0], lines[0]
    assert not workers_of_binary(cfs)


def test_export_of_a_spinning_file_stops_at_the_time_limit(cfs, tmp_path):
    t0 = time.monotonic()
    r = run_cfs(cfs, "export", "-o", "reader_timeout=2", BAD / "spin_open.h5ad", tmp_path / "o")
    took = time.monotonic() - t0
    assert r.returncode == 2, r.stderr
    assert "time limit of 4 s" in r.stderr and "spin_open.h5ad" in r.stderr, r.stderr
    assert took < 30, took
    assert not workers_of_binary(cfs)


def test_isolated_export_is_byte_identical_to_in_process(cfs, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("nonascii.h5ad", "categoricals.h5ad", "csr_f32.h5ad"):
        shutil.copy(FIXTURES_DIR / "h5ad" / name, src / name)
    a = run_cfs(cfs, "export", src, tmp_path / "isolated")
    b = run_cfs(cfs, "export", "-o", "isolate=off", src, tmp_path / "inproc")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    files = sorted(p.relative_to(tmp_path / "isolated") for p in (tmp_path / "isolated").rglob("*")
                   if p.is_file())
    assert files and files == sorted(p.relative_to(tmp_path / "inproc")
                                     for p in (tmp_path / "inproc").rglob("*") if p.is_file())
    for f in files:
        assert (tmp_path / "isolated" / f).read_bytes() == (tmp_path / "inproc" / f).read_bytes(), f


# ---- mount -----------------------------------------------------------------------------------

def test_a_crashing_source_does_not_take_the_mount_down(cfs, mounts, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(GOOD, src / "good.h5ad")
    shutil.copy(BAD / "crash_read_sigsegv.h5ad", src / "crash_read.h5ad")
    shutil.copy(BAD / "crash_open_sigsegv.h5ad", src / "crash_open.h5ad")
    m = mounts(src)
    opened = status_of(m.mnt, "crash_open.h5ad")
    assert opened["state"] == "damaged", opened
    assert opened["damage"]["signal"] == "SIGSEGV" and opened["damage"]["operation"] == "open"
    assert "crash_open.zarr" not in os.listdir(m.mnt)

    before = workers_of(m.pid)
    assert len(before) == 2, before         # one per source served
    assert_eio(m.mnt / "crash_read.zarr" / "obs" / "beschreibung" / "0")
    st = status_of(m.mnt, "crash_read.h5ad")
    assert st["state"] == "damaged", st
    assert st["damage"] == {"what": "was killed by SIGSEGV", "signal": "SIGSEGV",
                            "operation": "read", "element": "obs/beschreibung",
                            "workers_lost": 1}, st
    assert "re-download" in st["reason"]
    assert_eio(m.mnt / "crash_read.zarr" / "obs" / "beschreibung" / "0")   # not tried again
    assert status_of(m.mnt, "crash_read.h5ad")["damage"]["workers_lost"] == 1

    # The rest of the damaged source is read by a new worker; the good one never noticed.
    assert read_chunk(m.mnt / "crash_read.zarr" / "obs" / "细胞" / "0")
    after = workers_of(m.pid)
    assert len(after) == 2 and after != before, (before, after)
    assert status_of(m.mnt, "good.h5ad")["state"] == "ready"
    assert_same_as_source(m.mnt / "good.zarr", src / "good.h5ad")
    assert not zombies_of(m.pid)

    assert m.stop() == []
    m.proc = None
    assert not workers_of_binary(cfs)


def test_a_damaged_source_is_retried_when_it_changes(cfs, mounts, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(BAD / "crash_read_sigsegv.h5ad", src / "data.h5ad")
    m = mounts(src)
    assert_eio(m.mnt / "data.zarr" / "obs" / "beschreibung" / "0")
    assert status_of(m.mnt, "data.h5ad")["state"] == "damaged"
    tmp = src / ".data.tmp"
    shutil.copy(GOOD, tmp)
    tmp.rename(src / "data.h5ad")
    assert wait_for(lambda: (status_of(m.mnt, "data.h5ad") or {}).get("state") == "ready"), \
        status_of(m.mnt, "data.h5ad")
    assert_same_as_source(m.mnt / "data.zarr", src / "data.h5ad")


@pytest.mark.parametrize("fault,opts,what", [
    ("loop", ["reader_timeout=2"], "ran past its time limit of 2 s (killed)"),
    ("alloc", ["reader_memory=256M"], "ran out of its memory limit of 256 MiB (killed)"),
    ("segv", [], "was killed by SIGSEGV"),
])
def test_each_limit_ends_the_worker(cfs, mounts, tmp_path, monkeypatch, fault, opts, what):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(GOOD, src / "good.h5ad")
    monkeypatch.setenv(FAULT_ENV, f"{fault}@obs/beschreibung")
    m = mounts(src, opts=opts)
    t0 = time.monotonic()
    assert_eio(m.mnt / "good.zarr" / "obs" / "beschreibung" / "0")
    assert time.monotonic() - t0 < 30
    st = status_of(m.mnt, "good.h5ad")
    assert st["state"] == "damaged" and st["damage"]["what"] == what, st
    assert st["damage"]["element"] == "obs/beschreibung"
    assert read_chunk(m.mnt / "good.zarr" / "obs" / "细胞" / "0")
    assert len(workers_of(m.pid)) == 1 and not zombies_of(m.pid)


def test_in_process_reading_stays_available(cfs, mounts, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(GOOD, src / "good.h5ad")
    m = mounts(src, opts=["isolate=off"])
    assert workers_of(m.pid) == []
    assert_same_as_source(m.mnt / "good.zarr", src / "good.h5ad")
