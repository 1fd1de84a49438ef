"""Names and paths (issue 15): whatever a source is called, or its uns says, its dataset id is one
safe path component (Cellucid's id rule: 1-180 of [A-Za-z0-9._-], a letter or digit first, no
'.' last), so no store lands outside the mount or the export, and its name is text Cellucid
takes; status.json and the daemon's log name sources below SRC, with the control characters and
non-UTF-8 bytes of a name written out (\\xHH) so that a name can neither forge a log line nor
drop out of status.json."""
import json
import os
import re
import shutil

import h5py
import zarr

from conftest import FIXTURES_DIR, run_cfs

H5AD = FIXTURES_DIR / "h5ad" / "csr_f32.h5ad"
RUN = FIXTURES_DIR / "outs" / "pbmc_v3"
ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,179}")

# file name (bytes) -> (its id, its dataset's name) when served
FILES = {
    b"new\nline.h5ad": ("new_line", "new line"),
    b"\x1b[31mred.h5ad": ("31mred", "[31mred"),
    b"ctrl\x01\x07x.h5ad": ("ctrl__x", "ctrl  x"),
    b"caf\xe9.h5ad": ("caf_", "caf\u00e9"),                     # Latin-1
    "\u00fcn\u00ef\u540d.h5ad".encode(): ("n__", "\u00fcn\u00ef\u540d"),
    b"-dash.h5ad": ("dash", "-dash"),
    b"a..b.h5ad": ("a..b", "a..b"),
    b"...h5ad.h5ad": None,                                     # hidden: not a source
    b".hidden.h5ad": None,
    b"___.h5ad": ("dataset", "___"),
    b"L" * 240 + b".h5ad": ("L" * 180, "L" * 240),
    b"ends with dot..h5ad": ("ends_with_dot", "ends with dot."),
}
# a forged report: a name holding a newline and a line of its own
FORGER = b"bad\x1b[2J\ncellucid-fs: other.h5ad: refused: forged.h5ad"
# uns['cellucid'] ids that are not Cellucid ids are not used; a valid one is
UNS = {
    "escape.h5ad": ({"id": "../../escape"}, "escape"),
    "slash.h5ad": ({"id": "a/b"}, "slash"),
    "dotted.h5ad": ({"id": ".hidden"}, "dotted"),
    "own.h5ad": ({"id": "own-id"}, "own-id"),
}


def with_uns(dest, cellucid=None, title=None):
    shutil.copy(H5AD, dest)
    with h5py.File(dest, "r+") as f:
        uns = f.require_group("uns")
        if cellucid:
            g = uns.create_group("cellucid")
            g.attrs["encoding-type"] = "dict"
            g.attrs["encoding-version"] = "0.1.0"
            for k, v in cellucid.items():
                g[k] = v
                g[k].attrs["encoding-type"] = "string"
                g[k].attrs["encoding-version"] = "0.2.0"
        if title is not None:
            uns["title"] = title
            uns["title"].attrs["encoding-type"] = "string"
            uns["title"].attrs["encoding-version"] = "0.2.0"


def make_src(root):
    src = root / "src"
    src.mkdir()
    for name in FILES:
        shutil.copy(H5AD, src / os.fsdecode(name))
    (src / os.fsdecode(FORGER)).write_bytes(b"not an HDF5 file")
    shutil.copytree(RUN, src / "run\x07 1")
    for name, (cellucid, _) in UNS.items():
        with_uns(src / name, cellucid)
    # a name with '/' and a control character in uns: the names are text; the id is the file's
    with_uns(src / "titled.h5ad", {"name": "bad\nname"}, title="x/../y")
    return src


def expected():
    """{id: name} of the served datasets."""
    out = {v[0]: v[1] for v in FILES.values() if v}
    out["run__1"] = "run  1"
    for name, (_, i) in UNS.items():
        out[i] = name[:-len(".h5ad")]
    out["titled"] = "x/../y"
    return out


def check_ids(names):
    """Every served name is <id>.zarr with a safe id."""
    stores = [n for n in names if n not in ("datasets.json", "status.json")]
    for n in stores:
        assert n.endswith(".zarr") and ID.fullmatch(n[:-5]) and not n[:-5].endswith("."), n
    return sorted(n[:-5] for n in stores)


def test_ids_are_one_safe_path_component_and_names_are_text(cfs, mounts, tmp_path):
    src = make_src(tmp_path)
    want = expected()
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out)
    assert r.returncode == 2, r.stderr
    assert sorted(os.listdir(tmp_path)) == ["out", "src"], os.listdir(tmp_path)
    assert check_ids(os.listdir(out)) == sorted(want), os.listdir(out)
    for i, name in want.items():
        got = zarr.open(str(out / f"{i}.zarr"), mode="r")["uns/cellucid/name"][()]
        assert got == name, (i, got, name)

    m = mounts(src)
    assert check_ids(os.listdir(m.mnt)) == sorted(want)
    catalog = m.catalog()
    assert all(ID.fullmatch(d["id"]) and d["path"] == d["id"] + ".zarr/" for d in catalog["datasets"])
    for i in want:
        assert (m.mnt / f"{i}.zarr" / ".zmetadata").read_bytes() == \
            (out / f"{i}.zarr" / ".zmetadata").read_bytes(), i


def test_status_and_log_show_names_below_src_written_out(cfs, mounts, tmp_path):
    src = make_src(tmp_path)
    m = mounts(src)
    text = (m.mnt / "status.json").read_text(encoding="utf-8")
    shown = {s["source"]: s for s in json.loads(text)["sources"]}
    # every source is listed, a Latin-1 name too, each below SRC with its bytes written out
    assert "caf\\xE9.h5ad" in shown and "new\\x0Aline.h5ad" in shown, sorted(shown)
    assert "\\x1B[31mred.h5ad" in shown and "run\\x07 1" in shown, sorted(shown)
    assert len(shown) == sum(1 for v in FILES.values() if v) + 1 + 1 + len(UNS) + 1, sorted(shown)
    forged = "bad\\x1B[2J\\x0Acellucid-fs: other.h5ad: refused: forged.h5ad"
    assert shown[forged]["state"] == "refused", shown[forged]
    assert str(tmp_path) not in text
    log = m.stderr()
    assert str(tmp_path) not in log, log
    assert not any(l.startswith("cellucid-fs: other.h5ad") for l in log.splitlines()), log
    assert f"cellucid-fs: {forged}: refused: " in log, log
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", log), repr(log)
