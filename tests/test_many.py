"""A mount of more sources than its pool of reader workers (docs/design.md §2.4, -o readers=N):
every store is served byte for byte as `export` writes it while the workers and the daemon's
sockets to them stay within the pool, and a source replaced while it has no worker is never
read for its old store but laid out afresh."""
import errno
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from conftest import GOOD_DIR, run_cfs, workers_of

SOURCES = ("csr_f32.h5ad", "categoricals.h5ad", "nonascii.h5ad", "dtypes.h5ad", "nullable.h5ad",
           "csc_f64.h5ad", "dense_f32.h5ad")
READERS = 2


def sockets_of(pid):
    """The daemon's socket descriptors: one to each worker and one to the fork server."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


def files_of(root):
    return sorted(p.relative_to(root) for p in Path(root).rglob("*") if p.is_file())


def exported(cfs, src, out):
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 0, r.stderr
    return out


def within_pool(m):
    workers, sockets = len(workers_of(m.pid)), sockets_of(m.pid)
    assert workers <= READERS and sockets <= READERS + 1, (workers, sockets)


def test_more_sources_than_readers_serve_every_store_as_export_does(cfs, mounts, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        shutil.copy(GOOD_DIR / name, src / name)
    out = exported(cfs, src, tmp_path / "out")
    stores = sorted(p.name for p in out.iterdir() if p.name.endswith(".zarr"))
    assert len(stores) == len(SOURCES)
    m = mounts(src, opts=[f"readers={READERS}"])
    within_pool(m)
    assert sorted(p.name for p in m.mnt.iterdir()) == sorted([p.name for p in out.iterdir()] + ["status.json"])
    # One file of each store in turn, so that every read needs another source's worker.
    queues = {s: files_of(out / s) for s in stores}
    read = 0
    while any(queues.values()):
        for s in stores:
            if queues[s]:
                rel = queues[s].pop(0)
                assert (m.mnt / s / rel).read_bytes() == (out / s / rel).read_bytes(), f"{s}/{rel}"
                read += 1
                if read % 25 == 0:
                    within_pool(m)
    within_pool(m)
    for s in stores:        # the listing too, file for file
        assert files_of(m.mnt / s) == files_of(out / s), s
    assert (m.mnt / "datasets.json").read_bytes() == (out / "datasets.json").read_bytes()
    # Sources were read again after their workers were ended: more workers than the pool
    # were started over the mount's life, which status.json's request counts show.
    status = json.loads((m.mnt / "status.json").read_text())
    assert all(s["state"] == "ready" and s["reader"]["requests"] > 0 for s in status["sources"])


def test_a_mount_opens_each_source_once(cfs, mounts, tmp_path):
    """What naming a dataset reads of its source (its name, its embedding, the store check) is
    read while the source still has the worker that opened it: with more sources than workers,
    reading it in a later pass would open every source a second time (design §2.4)."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        for name in SOURCES:
            shutil.copy(GOOD_DIR / name, src / f"{i}-{name}")
    m = mounts(src, opts=[f"readers={READERS}"])
    status = json.loads((m.mnt / "status.json").read_text())["sources"]
    assert len(status) == 3 * len(SOURCES)
    assert all(s["state"] == "ready" and s["reader"]["opens"] == 1 for s in status), \
        [(s["source"], s.get("reader")) for s in status]
    # A store read now needs its source opened again (its worker went to others).
    first = sorted(p.name for p in m.mnt.iterdir() if p.name.endswith(".zarr"))[0]
    assert json.loads((m.mnt / first / ".zmetadata").read_bytes())["metadata"]
    within_pool(m)


def test_naming_reads_a_small_embedding_from_the_model_without_asking_the_worker(cfs, mounts,
                                                                                  tmp_path):
    """A small numeric obsm entry comes with the model the worker sends at the open (wire_model.h,
    CFS_WIRE_INLINE_BYTES): the embedding check of naming asks the worker nothing more, and the
    store still serves the entry's bytes as export writes them."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(2 * READERS + 1):
        shutil.copy(GOOD_DIR / "categoricals.h5ad", src / f"{i}.h5ad")
    m = mounts(src, opts=[f"readers={READERS}"])
    status = json.loads((m.mnt / "status.json").read_text())["sources"]
    assert len(status) == 2 * READERS + 1
    assert all(s["in_catalog"] and s["reader"] == {"requests": 0, "rows": 0, "opens": 1}
               for s in status), [(s["source"], s.get("reader")) for s in status]
    out = exported(cfs, src / "0.h5ad", tmp_path / "out") / "0.zarr"
    for rel in files_of(out):
        if rel.parts[0] == "obsm":
            assert (m.mnt / "0.zarr" / rel).read_bytes() == (out / rel).read_bytes(), rel


def test_a_source_replaced_without_a_worker_is_not_read_but_laid_out_again(cfs, mounts, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(GOOD_DIR / "csr_f32.h5ad", src / "a.h5ad")
    shutil.copy(GOOD_DIR / "categoricals.h5ad", src / "b.h5ad")
    m = mounts(src, opts=["readers=1"])
    old = m.mnt / "a.zarr"
    assert (old / ".zmetadata").read_bytes()
    meta = json.loads((old / ".zmetadata").read_bytes())["metadata"]
    assert "X/data/.zarray" in meta
    # b's matrix takes the one worker: a has none when it is replaced.
    assert (m.mnt / "b.zarr" / "X" / "data" / "0").read_bytes()
    assert len(workers_of(m.pid)) == 1
    held = os.open(old, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fresh = src / ".a.tmp"
        shutil.copy(GOOD_DIR / "nonascii.h5ad", fresh)
        fresh.rename(src / "a.h5ad")
        # The old store's matrix needs a's worker: the file it finds is another one (EIO), or the
        # old version is already retired (ENOENT). Never bytes of the new file in the old store.
        with pytest.raises(OSError) as e:
            fd = os.open("X/data/0", os.O_RDONLY, dir_fd=held)
            try:
                os.read(fd, 1 << 20)
            finally:
                os.close(fd)
        assert e.value.errno in (errno.EIO, errno.ENOENT), e.value
    finally:
        os.close(held)
    out = exported(cfs, src / "a.h5ad", tmp_path / "out") / "a.zarr"
    want = (out / ".zmetadata").read_bytes()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if (m.mnt / "a.zarr" / ".zmetadata").read_bytes() == want:
                break
        except OSError:
            pass
        time.sleep(0.1)
    for rel in files_of(out):
        assert (m.mnt / "a.zarr" / rel).read_bytes() == (out / rel).read_bytes(), rel
    status = {s["source"]: s for s in json.loads((m.mnt / "status.json").read_text())["sources"]}
    assert status["a.h5ad"]["state"] == "ready", status["a.h5ad"]
    assert len(workers_of(m.pid)) <= 1
