"""Published views (docs/design.md §5): NAME.cellucid-session beside a source is its dataset's
default view in Cellucid. export (to a folder here; to the Ceph gateway in test_s3_export.py)
and the mount serve it as <id>.cellucid-session beside the store, byte for byte, and list it in
datasets.json as {"path", "bytes", "sha256"}: the length and the digest are computed here, with
hashlib, from the file the test wrote. A view that is not one (empty, cut short, another format,
over 64 MiB) or whose source is refused is not listed, and the log and status.json say why; it
never refuses its dataset, and a session file is never read as an input. -o default=ID picks the
dataset the catalog opens on; an id not listed falls back to the first id, said so.

The views are tests/fixtures/sessions/ (hand-made to the published format, see its README) and
versions of them made by its generator (tests/fixtures/make_session_fixtures.py).
"""

import errno
import hashlib
import json
import os
import shutil
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

from conftest import (
    BAD_DIR,
    FIXTURES_DIR,
    describe,
    good_path,
    mounts,
    read_catalog,
    run_cfs,
)

sys.path.insert(0, str(FIXTURES_DIR))
from make_session_fixtures import view  # noqa: E402

SESSIONS = FIXTURES_DIR / "sessions"
VIEW = (SESSIONS / "dense_f32.cellucid-session").read_bytes()
VIEW_2 = (SESSIONS / "dense_f32_v2.cellucid-session").read_bytes()
LIVE_TIMEOUT = 10.0
MAX_BYTES = 64 << 20


def listed(data):
    """What datasets.json must list for a view of these bytes (computed here, not by the
    program)."""
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def entries(catalog):
    return {d["id"]: d for d in catalog["datasets"]}


def source_folder(path, **views):
    """A source folder: dense_f32.h5ad and csr_f32.h5ad (listed datasets), not_hdf5.h5ad
    (refused), no_embedding.h5ad (served, not listed), and the views given by stem
    (name=bytes)."""
    path.mkdir(parents=True)
    for name in ("dense_f32", "csr_f32", "no_embedding"):
        shutil.copyfile(good_path(name), path / f"{name}.h5ad")
    shutil.copyfile(BAD_DIR / "not_hdf5.h5ad", path / "not_hdf5.h5ad")
    for stem, data in views.items():
        (path / f"{stem}.cellucid-session").write_bytes(data)
    return path


def export(cfs, src, out, *opts, rc=2):
    r = run_cfs(cfs, "export", *opts, src, out)
    assert r.returncode == rc, describe(r)
    return r


def not_listed_lines(stderr):
    return [l for l in stderr.splitlines() if ": not listed: " in l]


def wait_for(pred, what, timeout=LIVE_TIMEOUT):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except (OSError, ValueError, KeyError) as e:
            last = e
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what} (last error: {last!r})", pytrace=False)


# ---------------------------------------------------------------------------------------------
# export to a folder


def test_export_lists_and_serves_the_view(cfs, tmp_path):
    """The view of dense_f32 is OUT/dense_f32.cellucid-session, its bytes the source file's,
    listed with its length and SHA-256 in canonical URL encoding; datasets without a view have
    no session key; datasets.json is json.dumps(indent=2) of exactly that."""
    src = source_folder(tmp_path / "src", dense_f32=VIEW)
    out = tmp_path / "out"
    export(cfs, src, out)
    text = (out / "datasets.json").read_text(encoding="utf-8")
    want = {"schema": 2, "default": "csr_f32", "datasets": [
        {"id": "csr_f32", "path": "csr_f32.zarr/"},
        {"id": "dense_f32", "path": "dense_f32.zarr/",
         "session": {"path": "dense_f32.cellucid-session", **listed(VIEW)}}]}
    assert text == json.dumps(want, indent=2) + "\n", text
    path = want["datasets"][1]["session"]["path"]
    assert urllib.parse.quote(path, safe="-_.!~*'()") == path    # encodeURIComponent's
    assert (out / path).read_bytes() == VIEW
    assert sorted(p.name for p in out.iterdir()) == [
        "csr_f32.zarr", "datasets.json", "dense_f32.cellucid-session", "dense_f32.zarr",
        "no_embedding.zarr"]


def test_export_leaves_out_views_of_refused_and_unlisted_datasets(cfs, tmp_path):
    """A view beside a refused source, or beside a dataset datasets.json does not list, is not
    listed nor written, with one line each saying why; the datasets keep what they had."""
    src = source_folder(tmp_path / "src", not_hdf5=VIEW, no_embedding=VIEW, csr_f32=VIEW_2)
    out = tmp_path / "out"
    r = export(cfs, src, out)
    cat = entries(read_catalog(out))
    assert sorted(cat) == ["csr_f32", "dense_f32"]
    assert cat["csr_f32"]["session"] == {"path": "csr_f32.cellucid-session", **listed(VIEW_2)}
    assert "session" not in cat["dense_f32"]
    assert sorted(p.name for p in out.glob("*.cellucid-session")) == ["csr_f32.cellucid-session"]
    lines = sorted(not_listed_lines(r.stderr))
    assert lines == [
        f"cellucid-fs: {src}/no_embedding.cellucid-session: not listed: its dataset is not in "
        "datasets.json (no drawable embedding)",
        f"cellucid-fs: {src}/not_hdf5.cellucid-session: not listed: its source is refused"], \
        describe(r)


BAD_VIEWS = {
    "empty": (b"", "empty: publish the view again from Cellucid"),
    "cut_short": (VIEW[:-5], "not a Cellucid session file: it ends inside chunk 4 (cut short?); "
                             "publish the view again from Cellucid"),
    "trailing": (VIEW + b"\n", "not a Cellucid session file: 1 bytes follow its last chunk; "
                               "publish the view again from Cellucid"),
    "zip": (b"PK\x03\x04" + bytes(60), "not a Cellucid session file: it does not begin with "
                                       "CELLUCID_SESSION; publish the view again from Cellucid"),
}


def bad_views_folder(path):
    """One copy of dense_f32.h5ad per bad view (a.h5ad with a.cellucid-session, ...), and one
    whose view is a sparse file of 64 MiB + 1 byte."""
    path.mkdir(parents=True)
    for stem, (data, _) in BAD_VIEWS.items():
        shutil.copyfile(good_path("dense_f32"), path / f"{stem}.h5ad")
        (path / f"{stem}.cellucid-session").write_bytes(data)
    shutil.copyfile(good_path("dense_f32"), path / "huge.h5ad")
    with open(path / "huge.cellucid-session", "wb") as fh:
        fh.write(VIEW)
        fh.truncate(MAX_BYTES + 1)
    return path


def test_export_leaves_out_views_that_are_not_views(cfs, tmp_path):
    """Empty, cut short, with bytes after its last chunk, another format, over 64 MiB: each
    dataset is listed and exported as without a view, and one line names the file and why."""
    src = bad_views_folder(tmp_path / "src")
    out = tmp_path / "out"
    r = export(cfs, src, out, rc=0)
    cat = entries(read_catalog(out))
    assert sorted(cat) == sorted([*BAD_VIEWS, "huge"])
    assert all("session" not in d for d in cat.values()), cat
    assert not list(out.glob("*.cellucid-session"))
    want = {f"cellucid-fs: {src}/{stem}.cellucid-session: not listed: {why}"
            for stem, (_, why) in BAD_VIEWS.items()}
    want.add(f"cellucid-fs: {src}/huge.cellucid-session: not listed: larger than 64 MiB, which no "
             "published view is: publish the view again from Cellucid")
    assert set(not_listed_lines(r.stderr)) == want, describe(r)


def test_session_files_are_never_inputs(cfs, tmp_path):
    """A session file holding an h5ad's bytes, named after no source, is not a dataset: the
    folder scan does not look into session files."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copyfile(good_path("csr_f32"), src / "csr_f32.h5ad")
    shutil.copyfile(good_path("dense_f32"), src / "stray.cellucid-session")
    out = tmp_path / "out"
    r = export(cfs, src, out, rc=0)
    assert [d["id"] for d in read_catalog(out)["datasets"]] == ["csr_f32"]
    assert "stray" not in r.stderr, describe(r)
    assert sorted(p.name for p in out.iterdir()) == ["csr_f32.zarr", "datasets.json"]


def test_views_named_as_their_datasets(cfs, tmp_path):
    """A compressed copy's view is named without the compression (dense_f32.cellucid-session
    beside dense_f32.h5ad.bz2); a Cell Ranger run folder's beside the run folder
    (pbmc_v3.cellucid-session beside pbmc_v3/); an object's of an R workspace of several
    datasets after its dataset (both-sce.cellucid-session beside both.rda); a view named
    after that workspace names none of its datasets, and says so for each."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copyfile(FIXTURES_DIR / "compressed" / "dense_f32.h5ad.bz2", src / "dense_f32.h5ad.bz2")
    shutil.copytree(FIXTURES_DIR / "outs" / "pbmc_v3", src / "pbmc_v3")
    shutil.copyfile(FIXTURES_DIR / "rds" / "both.rda", src / "both.rda")
    for stem, data in (("dense_f32", VIEW), ("pbmc_v3", VIEW_2), ("both-sce", VIEW),
                       ("both", VIEW_2)):
        (src / f"{stem}.cellucid-session").write_bytes(data)
    out = tmp_path / "out"
    r = export(cfs, src, out, rc=0)
    cat = entries(read_catalog(out))
    assert sorted(cat) == ["both-sce", "both-so", "dense_f32", "pbmc_v3"], describe(r)
    for did, data in (("dense_f32", VIEW), ("pbmc_v3", VIEW_2), ("both-sce", VIEW)):
        assert cat[did]["session"] == {"path": f"{did}.cellucid-session", **listed(data)}, did
        assert (out / f"{did}.cellucid-session").read_bytes() == data
    assert "session" not in cat["both-so"]
    assert not_listed_lines(r.stderr) == [
        f"cellucid-fs: {src}/both.cellucid-session: not listed: named after an input of several "
        "datasets: name each one's view after its dataset, <input>-<object>.cellucid-session"], \
        describe(r)


def test_export_default(cfs, tmp_path):
    """-o default=ID opens the catalog on ID; an id not listed falls back to the first id with a
    line saying so (not a usage error: exit 0); a value that is no id is a usage error."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("csr_f32", "dense_f32"):
        shutil.copyfile(good_path(name), src / f"{name}.h5ad")
    r = export(cfs, src, tmp_path / "a", "-o", "default=dense_f32", rc=0)
    assert read_catalog(tmp_path / "a")["default"] == "dense_f32"
    assert "default=" not in r.stderr, describe(r)
    r = export(cfs, src, tmp_path / "b", "-o", "default=gone", rc=0)
    assert read_catalog(tmp_path / "b")["default"] == "csr_f32"
    assert "cellucid-fs: default=gone is not in datasets.json: it opens on csr_f32, the first id" \
        in r.stderr.splitlines(), describe(r)
    r = run_cfs(cfs, "export", "-o", "default=a/b", src, tmp_path / "c")
    assert r.returncode == 1 and "default=a/b: not a dataset id" in r.stderr, describe(r)
    assert not (tmp_path / "c").exists()


def test_inspect_shows_the_view(cfs, tmp_path):
    src = source_folder(tmp_path / "src", dense_f32=VIEW, csr_f32=b"")
    r = run_cfs(cfs, "inspect", src / "dense_f32.h5ad", src / "csr_f32.h5ad",
                src / "no_embedding.h5ad")
    assert r.returncode == 0, describe(r)
    assert (f"  session: {src}/dense_f32.cellucid-session ({len(VIEW)} bytes, sha256 "
            f"{hashlib.sha256(VIEW).hexdigest()})") in r.stdout.splitlines(), r.stdout
    assert (f"  session: {src}/csr_f32.cellucid-session: not listed: empty: publish the view "
            "again from Cellucid") in r.stdout.splitlines(), r.stdout
    r = run_cfs(cfs, "inspect", "--json", src / "dense_f32.h5ad", src / "no_embedding.h5ad")
    files = json.loads(r.stdout)["files"]
    assert files[0]["session"] == {"file": f"{src}/dense_f32.cellucid-session", **listed(VIEW)}
    assert files[1]["session"] is None


# ---------------------------------------------------------------------------------------------
# the mount


def by_file(status):
    return {Path(s["source"]).name: s for s in status["sources"]}


def served_view(m, did):
    return (m.mnt / f"{did}.cellucid-session").read_bytes()


def test_mount_lists_and_serves_as_export(cfs, mounts, tmp_path):
    """The mount's datasets.json is the export's, byte for byte, and so are the views beside
    the stores; status.json says of each view whether it is listed, and why not."""
    src = source_folder(tmp_path / "src", dense_f32=VIEW, not_hdf5=VIEW, no_embedding=VIEW,
                        csr_f32=VIEW[:100])
    out = tmp_path / "out"
    export(cfs, src, out)
    m = mounts(src)
    assert (m.mnt / "datasets.json").read_bytes() == (out / "datasets.json").read_bytes()
    assert entries(m.catalog())["dense_f32"]["session"] == {
        "path": "dense_f32.cellucid-session", **listed(VIEW)}
    assert served_view(m, "dense_f32") == VIEW
    assert sorted(p.name for p in m.mnt.glob("*.cellucid-session")) == [
        "dense_f32.cellucid-session"]
    assert not (m.mnt / "csr_f32.cellucid-session").exists()
    st = by_file(m.status())
    assert st["dense_f32.h5ad"]["session"] == {
        "file": "dense_f32.cellucid-session", "listed": True,
        "path": "dense_f32.cellucid-session", **listed(VIEW)}
    assert st["not_hdf5.h5ad"]["state"] == "refused"
    assert st["not_hdf5.h5ad"]["session"] == {
        "file": "not_hdf5.cellucid-session", "listed": False,
        "reason": "its source is refused"}
    assert st["no_embedding.h5ad"]["session"]["reason"] == (
        "its dataset is not in datasets.json (no drawable embedding)")
    assert st["csr_f32.h5ad"]["session"] == {
        "file": "csr_f32.cellucid-session", "listed": False,
        "reason": "not a Cellucid session file: it ends inside its manifest (cut short?); "
                  "publish the view again from Cellucid"}
    assert sorted(st) == ["csr_f32.h5ad", "dense_f32.h5ad", "no_embedding.h5ad",
                          "not_hdf5.h5ad"], "a session file was taken for a source"


def test_mount_follows_views(cfs, mounts, tmp_path):
    """A view changed, removed, added or made bad while mounted changes datasets.json (bytes
    and digest) and what is served, within the time a source change takes."""
    src = source_folder(tmp_path / "src", dense_f32=VIEW)
    m = mounts(src)
    assert served_view(m, "dense_f32") == VIEW

    def shows(did, data):
        e = entries(m.catalog())[did]
        if data is None:
            return "session" not in e and not (m.mnt / f"{did}.cellucid-session").exists()
        return (e.get("session") == {"path": f"{did}.cellucid-session", **listed(data)}
                and served_view(m, did) == data)

    (src / "dense_f32.cellucid-session").write_bytes(VIEW_2)       # rewritten in place
    wait_for(lambda: shows("dense_f32", VIEW_2), "the changed view")
    staged = tmp_path / "staged"
    staged.write_bytes(VIEW)
    os.rename(staged, src / "csr_f32.cellucid-session")             # renamed into place
    wait_for(lambda: shows("csr_f32", VIEW), "the added view")
    assert shows("dense_f32", VIEW_2)
    (src / "dense_f32.cellucid-session").unlink()
    wait_for(lambda: shows("dense_f32", None), "the removed view gone")
    (src / "csr_f32.cellucid-session").write_bytes(VIEW[:-1])
    wait_for(lambda: shows("csr_f32", None), "the view cut short no longer listed")
    assert by_file(m.status())["csr_f32.h5ad"]["session"]["reason"].startswith(
        "not a Cellucid session file: it ends inside chunk 4")
    assert "not listed: not a Cellucid session file" in m.stderr()


def test_mount_view_of_a_source_refused_later(cfs, mounts, tmp_path):
    """A source rewritten into something refused takes its view out of the catalog with it;
    status.json says why."""
    src = source_folder(tmp_path / "src", csr_f32=VIEW)
    m = mounts(src)
    assert "session" in entries(m.catalog())["csr_f32"]
    shutil.copyfile(BAD_DIR / "not_hdf5.h5ad", src / "staged")
    os.rename(src / "staged", src / "csr_f32.h5ad")
    wait_for(lambda: "csr_f32" not in entries(m.catalog()), "csr_f32 refused")
    assert not (m.mnt / "csr_f32.cellucid-session").exists()
    assert by_file(m.status())["csr_f32.h5ad"]["session"] == {
        "file": "csr_f32.cellucid-session", "listed": False,
        "reason": "its source is refused"}


def test_mount_default_and_its_fallback(cfs, mounts, tmp_path):
    """-o default=ID: the catalog opens on ID while it is listed, on the first id (status.json
    says why) while it is not, and on ID again once its source appears."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copyfile(good_path("csr_f32"), src / "csr_f32.h5ad")
    m = mounts(src, opts=["default=later"])
    assert m.catalog()["default"] == "csr_f32"
    assert m.status()["catalog"] == {
        "default": "csr_f32", "default_asked": "later",
        "default_note": "default=later is not in datasets.json: it opens on csr_f32, the first "
                        "id"}
    shutil.copyfile(good_path("dense_f32"), src / "later.h5ad")
    wait_for(lambda: m.catalog()["default"] == "later", "the default once listed")
    assert m.status()["catalog"] == {"default": "later", "default_asked": "later",
                                     "default_note": None}
    m2 = mounts(src, opts=["default=csr_f32"])
    assert m2.catalog()["default"] == "csr_f32"


def test_mount_view_rewritten_in_a_loop(cfs, mounts, tmp_path):
    """A view rewritten again and again in place (truncated, then written in two pieces), read
    meanwhile: every catalog that lists it names a version written whole (never a mix), and a
    view read between two reads of one catalog is the version that catalog names, byte for
    byte. Versions differ in their camera, so no two have the same bytes."""
    versions = [view("dense_f32", 20, 8, "cluster", {"zoom": 1.0 + i / 8, "center": [i, 0]})
                for i in range(40)]
    digests = {hashlib.sha256(v).hexdigest(): v for v in versions}
    src = source_folder(tmp_path / "src", dense_f32=versions[0])
    m = mounts(src)
    path = src / "dense_f32.cellucid-session"
    stop = threading.Event()

    def rewrite():
        for i in range(1, len(versions) * 4):
            if stop.is_set():
                return
            data = versions[i % len(versions)]
            with open(path, "r+b") as fh:
                fh.truncate(0)
                fh.write(data[:700])
                fh.flush()
                time.sleep(0.01)
                fh.write(data[700:])
            time.sleep(0.05 + (i % 7) * 0.03)

    writer = threading.Thread(target=rewrite)
    writer.start()
    checked, seen, problems = 0, set(), []
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and writer.is_alive():
            c1 = (m.mnt / "datasets.json").read_bytes()
            try:
                served = served_view(m, "dense_f32")
            except FileNotFoundError:
                served = None
            c2 = (m.mnt / "datasets.json").read_bytes()
            s = entries(json.loads(c1))["dense_f32"].get("session")
            if s is not None:
                seen.add(s["sha256"])
                if s["sha256"] not in digests or s["bytes"] != len(digests[s["sha256"]]):
                    problems.append(f"listed {s}: not a version written whole")
            if c1 == c2:
                checked += 1
                if s is None and served is not None:
                    problems.append("a view served while datasets.json lists none")
                elif s is not None and listed(served or b"") != {k: s[k] for k in ("bytes", "sha256")}:
                    problems.append(f"served {listed(served or b'')}, datasets.json lists {s}")
    finally:
        stop.set()
        writer.join()
    assert not problems, (len(problems), checked, problems[:5])
    assert checked > 100 and len(seen) > 5, (checked, len(seen))
    # once the writes stop, the last version is listed and served
    last = path.read_bytes()
    wait_for(lambda: entries(m.catalog())["dense_f32"].get("session", {}).get("sha256")
             == hashlib.sha256(last).hexdigest() and served_view(m, "dense_f32") == last,
             "the last version listed and served")
