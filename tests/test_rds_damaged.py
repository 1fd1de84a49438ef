"""Damaged R files (formats/r/): Seurat and SingleCellExperiment fixtures of tests/fixtures/rds/
cut short, bit-flipped, or with a length field that lies, made at test time. A file whose
structure breaks is refused with one line naming it (and, mounted, listed `refused` with that
reason); a flip that leaves the structure whole may open. None may crash, hang or exhaust its
reader: no worker is ever lost over them (no `damaged` state, no "its reader ..." reason), the
export ends, and a mount of them all keeps serving the good file beside them, equal to R's
reading. (tests/unit/test_rstream.c damages a small synthetic stream byte by byte; this file
does it to real Seurat/SCE objects, through the whole reader, in export, inspect and mount.)"""

import gzip
import json
import os
import random
import shutil
import struct

import pytest

import test_rds
from conftest import describe, refused_lines, run_cfs

pytestmark = pytest.mark.filterwarnings("ignore")

RDS = test_rds.RDS
# gzip-compressed, as saveRDS and save write them; a Seurat 4 and 5 object, an SCE, a workspace
SOURCES = ["seurat.rds", "seurat_v5.rds", "sce.rds", "both.rda"]
FLIPS = 24          # bit flips per source file (deterministic positions)
MOUNTED = {"cut5.rds", "cut_last.rds", "gz_cut.rds", "strlen_gz.rds", "veclen.rds",
           "veclen_plus1.rds", "flip00.rds", "flip01.rds", "flip02.rds", "flip03.rds",
           "flip04.rds", "flip05.rds", "gzflip0.rds"}


def plain(name):
    return gzip.decompress((RDS / name).read_bytes())


def _stem(name):
    return name.replace(".", "_")


def _set_u32(data, at, value):
    b = bytearray(data)
    b[at:at + 4] = struct.pack(">I", value)
    return bytes(b)


def damaged_files():
    """name -> (bytes, must_refuse): each source cut short (plain and gzip'ed), with lying
    length fields (a string's, a numeric vector's), and bit-flipped."""
    out = {}
    for src in SOURCES:
        raw, gz = plain(src), (RDS / src).read_bytes()
        s = _stem(src)
        for tenth in (1, 3, 5, 7, 9):
            out[f"{s}_cut{tenth}.rds"] = (raw[:len(raw) * tenth // 10], True)
        out[f"{s}_cut_last.rds"] = (raw[:-1], True)
        out[f"{s}_gz_cut.rds"] = (gz[:len(gz) // 2], True)
        # a string (CHARSXP "Gene1") whose length field runs past the end of the file
        at = raw.find(struct.pack(">I", 5) + b"Gene1")
        assert at > 0, src
        out[f"{s}_strlen.rds"] = (_set_u32(raw, at, 0x7FFFFFF0), True)
        out[f"{s}_strlen_gz.rds"] = (gzip.compress(_set_u32(raw, at, 0x7FFFFFF0)), True)
        # the first vector of the cell names (a STRSXP of 10, its first CHARSXP right after)
        # claiming 2^31 - 1 elements, and one more than it has
        first = raw.find(b"\x00\x04\x00\x09\x00\x00\x00\x08AAAC01-1")
        vec = first - 8
        assert raw[vec:first] == b"\x00\x00\x00\x10\x00\x00\x00\x0a", src
        out[f"{s}_veclen.rds"] = (_set_u32(raw, vec + 4, 0x7FFFFFFF), True)
        out[f"{s}_veclen_gz.rds"] = (gzip.compress(_set_u32(raw, vec + 4, 0x7FFFFFFF)), True)
        out[f"{s}_veclen_plus1.rds"] = (_set_u32(raw, vec + 4, 11), False)
        rng = random.Random(f"{src}-flips")
        for k in range(FLIPS):
            b = bytearray(raw)
            pos = rng.randrange(len(b))
            b[pos] ^= 1 << rng.randrange(8)
            out[f"{s}_flip{k:02d}.rds"] = (bytes(b), False)
        for k in range(4):
            b = bytearray(gz)
            pos = rng.randrange(10, len(b) - 8)     # inside the deflate stream
            b[pos] ^= 1 << rng.randrange(8)
            out[f"{s}_gzflip{k}.rds"] = (bytes(b), False)
    return out


def write_folder(folder, keep=lambda name: True):
    folder.mkdir()
    files = {k: v for k, v in damaged_files().items() if keep(k)}
    for name, (data, _) in files.items():
        (folder / name).write_bytes(data)
    shutil.copy(RDS / "seurat.rds", folder / "good.rds")
    return files


def no_lost_reader(text):
    """No line says a reader worker crashed, ran out of time or memory."""
    return [l for l in text.splitlines() if "its reader" in l]


def test_damaged_r_files_exported(cfs, tmp_path):
    src = tmp_path / "src"
    files = write_folder(src)
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 2, describe(r)
    assert not no_lost_reader(r.stderr), describe(r)
    refused = {}
    for line in refused_lines(r.stderr):
        head, _, reason = line.partition(": refused: ")
        # "cellucid-fs: SRC/both_rda_flip03.rds (object so)": a workspace's object
        name = os.path.basename(head[len("cellucid-fs: "):]).split(" (object ")[0]
        refused[name] = reason
        assert reason and "\n" not in reason, line
    stores = [p.name for p in out.iterdir() if p.name.endswith(".zarr")]
    for name, (_, must) in files.items():
        stem = name[:-len(".rds")]
        served = [st for st in stores if st == f"{stem}.zarr" or st.startswith(f"{stem}-")]
        assert not must or (name in refused and not served), f"{name}:\n{describe(r)}"
        assert name in refused or served, name
    assert "good.rds" not in refused
    test_rds.check_store(out / "good.zarr", "seurat.rds", "good")
    # what is refused says what is wrong with the file
    s = _stem("seurat.rds")
    assert "ends early" in refused[f"{s}_cut_last.rds"], refused[f"{s}_cut_last.rds"]
    assert "gzip" in refused[f"{s}_gz_cut.rds"], refused[f"{s}_gz_cut.rds"]


def test_damaged_r_file_inspected(cfs, tmp_path):
    """inspect: a workspace cut short is refused in one line, exit status 2."""
    bad = tmp_path / "cut.rda"
    bad.write_bytes(plain("both.rda")[:4000])
    r = run_cfs(cfs, "inspect", "--json", bad)
    assert r.returncode == 2, describe(r)
    doc = json.loads(r.stdout)["files"][0]
    assert doc["format"] == "rds" and "\n" not in doc["refused"], doc
    assert "ends early" in doc["refused"], doc


def test_damaged_r_files_mounted(cfs, mounts, tmp_path):
    """Mounted: every damaged file is listed, the ones that break refused with their one-line
    reason; no reader is lost; every file of the stores of those that opened is read (a chunk
    may fail with EIO, never hang or take the mount down); the good file stays served."""
    src = tmp_path / "src"
    # (fewer than the export's: the mount opens every source before it serves)
    files = write_folder(src, lambda n: n.startswith(("seurat_rds_", "both_rda_")) and
                         n.split("_", 2)[2] in MOUNTED)
    m = mounts(src)
    m.wait_opened()
    entries = m.status()["sources"]
    assert {e["source"] for e in entries} == set(files) | {"good.rds"}
    for e in entries:       # (a workspace's objects have an entry each)
        must = e["source"] != "good.rds" and files[e["source"]][1]
        assert e["state"] in (("refused",) if must else ("refused", "ready")), e
        if e["state"] == "refused":
            assert e["reason"] and "\n" not in e["reason"] and "its reader" not in e["reason"], e
    for e in entries:
        if e["state"] != "ready":
            continue
        for root, _, names in os.walk(m.mnt / f"{e['id']}.zarr"):
            for n in names:
                try:
                    with open(os.path.join(root, n), "rb") as fh:
                        fh.read()
                except OSError:     # EIO: that chunk cannot be made of the damaged values
                    pass
    after = m.status()["sources"]
    assert not [e for e in after if e["state"] == "damaged"], after
    assert "good" in [d["id"] for d in m.catalog()["datasets"]]
    test_rds.check_store(m.mnt / "good.zarr", "seurat.rds", "good")
