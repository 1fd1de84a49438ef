"""Damaged copies of inputs of every format, mounted beside good sources (issue 15): the daemon
lives, the good sources are served byte-identical to their export, and each damaged source is
either served (every file equal to the export's, or failing with EIO: never a partial or wrong
chunk) or shown refused or damaged in status.json with a reason; no request waits past the
readers' time limits.

The damaged copies are made here, at test time, from committed fixtures with fixed seeds: the
first bytes kept (truncated), a few bits flipped, a block zeroed. A folder input (a Cell Ranger
run, a MatrixMarket folder, a Zarr store) has one of its files damaged. A gzipped input is
damaged both outside (its gzip stream) and inside (the file it holds, gzipped again). Beside
them, the real crashing files of tests/fixtures/damaged/ (one under a name without extension,
found by content: its detection reads it too).
"""
import errno
import gzip
import json
import os
import random
import shutil
import threading
import time

import numcodecs
import numpy as np
import pytest

import conftest
from conftest import FIXTURES_DIR, describe, refused_lines, run_cfs

# -o reader_timeout: reads 2 s, opens 4 s (tests/run-sanitized gives more: a sanitized worker
# writes its report before it ends)
READER_TIMEOUT = int(os.environ.get("CELLUCID_FS_TEST_READER_TIMEOUT", "2"))
# A read may meet the open of a replacement worker and a read of its own before it fails, for
# at most three workers; sanitizer builds are slower still.
REQUEST_LIMIT = 20 * READER_TIMEOUT + 5

# name in SRC -> fixture (a file or folder under tests/fixtures), damaged three ways
FORMATS = {
    "h5ad.h5ad": "h5ad/csr_f32.h5ad",
    "h5ad_gzip_filter.h5ad": "h5ad/gzip.h5ad",
    "loom.loom": "loom/loompy3.loom",
    "tenx.h5": "tenx/dropletutils_v3.h5",
    "run": "outs/pbmc_v3",
    "store.zarr": "zarr_v3_zip/twin.zarr",
    "store.zarr.zip": "zarr_v3_zip/infozip_deflated.zarr.zip",
    "mudata.h5mu": "mudata/citeseq.h5mu",
    "seurat.rds": "rds/seurat.rds",
    "sce.rds.gz": "rds/sce.rds",            # gzipped here (mtime 0)
    "mex": "mtx/cellranger3/filtered_feature_bc_matrix",
    "copy.h5ad.gz": "compressed/csr_f32.h5ad.gz",
}
KINDS = ("truncated", "flipped", "zeroed")
# gzipped inputs damaged inside: the file they hold is damaged, then gzipped again
INSIDE = {"h5ad_in.h5ad.gz": "h5ad/csr_f32.h5ad", "sce_in.rds.gz": "rds/sce.rds"}
# the committed files that crash or hang libhdf5 (tests/fixtures/damaged/README.md)
CRASHING = {
    "crash_read.h5ad": "damaged/crash_read_sigsegv.h5ad",
    "crash_open_noext": "damaged/crash_open_sigsegv.h5ad",
    "spin_open_noext": "damaged/spin_open.h5ad",
}
GOOD = {
    "good.h5ad": "h5ad/csr_f32.h5ad",
    "good.loom": "loom/loompy3.loom",
    "good_run": "outs/pbmc_v3",
    "good.zarr": "zarr_v3_zip/twin.zarr",
}


def damage(data, kind, rng):
    """data with one kind of damage, chosen by rng."""
    b = bytearray(data)
    if kind == "truncated":
        return bytes(b[: rng.randrange(len(b) // 10, len(b) * 9 // 10)])
    if kind == "flipped":
        for _ in range(8):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return bytes(b)
    n = min(4096, max(1, len(b) // 8))
    at = rng.randrange(len(b) - n + 1)
    b[at:at + n] = bytes(n)
    return bytes(b)


def files_below(path):
    return [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())


def gzipped(data):
    return gzip.compress(data, mtime=0)


def place(fixture, dest):
    """A copy of the fixture at dest (an .rds fixture placed as .rds.gz is gzipped)."""
    src = FIXTURES_DIR / fixture
    if src.is_dir():
        shutil.copytree(src, dest)
    elif dest.name.endswith(".gz") and not src.name.endswith(".gz"):
        dest.write_bytes(gzipped(src.read_bytes()))
    else:
        shutil.copy(src, dest)


def make_sources(src):
    """Fills src; returns {name: what was damaged} of the damaged sources."""
    made = {}
    for name, fixture in FORMATS.items():
        for kind in KINDS:
            rng = random.Random(f"{name}/{kind}")
            dest = src / f"{kind}_{name}"
            place(fixture, dest)
            victims = files_below(dest)
            victim = victims[rng.randrange(len(victims))]
            victim.write_bytes(damage(victim.read_bytes(), kind, rng))
            made[dest.name] = f"{kind} {victim.relative_to(src)}"
    for name, fixture in INSIDE.items():
        for kind in KINDS:
            rng = random.Random(f"{name}/{kind}")
            dest = src / f"{kind}_{name}"
            dest.write_bytes(gzipped(damage((FIXTURES_DIR / fixture).read_bytes(), kind, rng)))
            made[dest.name] = f"{kind} inside the gzip stream"
    for name, fixture in CRASHING.items():
        place(fixture, src / name)
        made[name] = f"as {fixture}"
    for name, fixture in GOOD.items():
        place(fixture, src / name)
    return made


def within(seconds, what, fn, *args):
    """fn(*args), which must return within seconds (a daemon thread: a hung FUSE request cannot
    be interrupted, and the test fails instead of hanging with it)."""
    box = {}

    def run():
        try:
            box["value"] = fn(*args)
        except BaseException as e:      # handed to the caller
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    t.start()
    t.join(seconds)
    if t.is_alive():
        pytest.fail(f"{what} did not return within {seconds} s", pytrace=False)
    if "error" in box:
        raise box["error"]
    return box["value"], time.monotonic() - started


def read_or_errno(path):
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as e:
        return e.errno


def listing(root):
    """Relative paths of the files below root, or the errno that stopped the walk."""
    out = []
    try:
        for dirpath, _, files in os.walk(root, onerror=lambda e: (_ for _ in ()).throw(e)):
            out += [os.path.relpath(os.path.join(dirpath, f), root) for f in files]
    except OSError as e:
        return e.errno
    return sorted(out)


def read_store(store):
    """{relative path: bytes or errno} of every file of a served store, each read within the
    limit."""
    files, _ = within(REQUEST_LIMIT, f"listing {store}", listing, store)
    assert not isinstance(files, int), f"listing {store} failed: {os.strerror(files)}"
    got = {}
    for rel in files:
        got[rel], _ = within(REQUEST_LIMIT, f"reading {store}/{rel}", read_or_errno, store / rel)
    return got


def chunk_problems(store, got):
    """Chunks read from a store with no export to compare with: each must decode, with its
    .zarray's compressor, to a whole chunk (a partial or garbled one would not)."""
    problems = []
    for rel, data in got.items():
        if not rel.endswith(".zarray") or isinstance(data, int):
            continue
        meta = json.loads(data)
        folder = os.path.dirname(rel)
        codec = numcodecs.get_codec(meta["compressor"]) if meta["compressor"] else None
        n = int(np.prod(meta["chunks"])) if meta["chunks"] else 1
        for key, chunk in got.items():
            if os.path.dirname(key) != folder or os.path.basename(key).startswith(".z") \
                    or isinstance(chunk, int):
                continue
            raw = codec.decode(chunk) if codec else chunk
            if meta["dtype"] == "|O":
                values = numcodecs.VLenUTF8().decode(raw)
                if len(values) != n:
                    problems.append(f"{store.name}/{key}: {len(values)} strings, not {n}")
            elif len(bytes(raw)) != n * np.dtype(meta["dtype"]).itemsize:
                problems.append(f"{store.name}/{key}: {len(bytes(raw))} bytes decoded")
    return problems


@pytest.fixture(scope="module")
def folder(cfs, tmp_path_factory):
    """(SRC, damaged names, the export of SRC and its stderr, OUT of the export of the good
    sources alone)."""
    root = tmp_path_factory.mktemp("damaged")
    src = root / "src"
    src.mkdir()
    made = make_sources(src)
    opts = f"reader_timeout={READER_TIMEOUT}"
    r = run_cfs(cfs, "export", "-o", opts, src, root / "out")
    good = root / "good"
    good.mkdir()
    for name, fixture in GOOD.items():
        place(fixture, good / name)
    g = run_cfs(cfs, "export", "-o", opts, good, root / "good_out")
    assert g.returncode == 0, describe(g)
    return src, made, (root / "out", r), root / "good_out"


def test_the_export_stores_or_refuses_each_source_in_one_line(folder):
    src, made, (out, r), good_out = folder
    assert r.returncode == 2, describe(r)
    stores = sorted(p.name for p in out.iterdir() if p.name.endswith(".zarr"))
    refused = [l.split(": refused: ")[0] for l in refused_lines(r.stderr)]
    assert len(refused) == len(set(refused)), r.stderr
    assert len(stores) + len(refused) == len(made) + len(GOOD), (stores, refused)
    assert not any(f"{src}/{name}:" in l for l in refused for name in GOOD), r.stderr
    for store in os.listdir(good_out):
        if store.endswith(".zarr"):
            assert store in stores


def test_a_mount_of_damaged_sources_serves_the_rest(cfs, mounts, folder, monkeypatch):
    src, made, (out, _), good_out = folder
    # Every source is opened before the mount appears; under a sanitizer that takes a while.
    monkeypatch.setattr(conftest, "READY_TIMEOUT", 300)
    m = mounts(src, opts=[f"reader_timeout={READER_TIMEOUT}"])
    good_stores = sorted(p.name for p in good_out.iterdir() if p.name.endswith(".zarr"))
    problems = []

    # The good sources: byte for byte their export's stores.
    for store in good_stores:
        got = read_store(m.mnt / store)
        want = {rel: (good_out / store / rel).read_bytes() for rel in listing(good_out / store)}
        if got != want:
            diff = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
            problems.append(f"good {store}: differs from its export at {diff[:5]}")

    # The damaged ones: each file the export's, or EIO (and then status.json says why).
    failed_ids = set()
    for store in sorted(p.name for p in m.mnt.iterdir() if p.name.endswith(".zarr")):
        if store in good_stores:
            continue
        got = read_store(m.mnt / store)
        failed = sorted(k for k, v in got.items() if isinstance(v, int))
        if failed:
            failed_ids.add(store[:-len(".zarr")])
        wrong = [f"{k}: {os.strerror(got[k])}" for k in failed if got[k] != errno.EIO]
        if wrong:
            problems.append(f"{store}: reads failed otherwise than with EIO: {wrong[:5]}")
        exported = out / store
        if exported.is_dir():
            want = {rel: (exported / rel).read_bytes() for rel in listing(exported)}
            if sorted(got) != sorted(want):
                problems.append(f"{store}: files {sorted(set(got) ^ set(want))[:5]} differ "
                                f"from the export's")
            diff = [k for k in sorted(got) if not isinstance(got[k], int) and got[k] != want.get(k)]
            if diff:
                problems.append(f"{store}: bytes differ from the export's at {diff[:5]}")
            if failed:
                problems.append(f"{store}: {failed[:5]} failed, but the export read them")
        else:
            problems += chunk_problems(m.mnt / store, got)

    # status.json: every damaged source, ready or with a reason; where SRC lies is not shown.
    text = (m.mnt / "status.json").read_text()
    status = {s["source"]: s for s in json.loads(text)["sources"]}
    for name, how in sorted(made.items()):
        s = status.get(name)
        if s is None:
            problems.append(f"{name} ({how}): not in status.json")
            continue
        if s["state"] not in ("ready", "refused", "damaged"):
            problems.append(f"{name} ({how}): state {s['state']}")
        if s["state"] != "ready" and not s.get("reason"):
            problems.append(f"{name} ({how}): {s['state']} without a reason")
        if s.get("id") in failed_ids and s["state"] != "damaged" and not s.get("chunk_failure"):
            problems.append(f"{name} ({how}): reads failed, but status.json does not say why")
    for name in GOOD:
        if status.get(name, {}).get("state") != "ready":
            problems.append(f"good {name}: {status.get(name)}")
    for where, t in (("status.json", text), ("the log", m.stderr())):
        if str(src) in t:
            problems.append(f"{where} shows where SRC lies: "
                            f"{[l for l in t.splitlines() if str(src) in l][:3]}")
    assert m.proc.poll() is None, m.stderr()
    assert not problems, "\n".join(problems)
