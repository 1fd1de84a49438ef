"""Bad inputs (tests/fixtures/bad/, see its manifest.json).

Refused ones (truncated, not HDF5, not AnnData, X claiming 10^12 rows, X of unknown encoding):
exit 2, exactly one `cellucid-fs: <file>: refused: <what is wrong>; <what to do>` line naming
the file, no store for it, no temporary left next to OUT, and the good files of a mixed folder
still exported.

Readable with a part left out (an obs column of unknown encoding, an obs column of the wrong
length): exit 0, one `cellucid-fs: <file>: left out obs/<col>: <reason>` line per column, and a
store equal to the source without those columns (the oracle is read_h5ad of an h5py copy with
the columns deleted, since anndata 0.8 cannot read the file itself)."""

import os
import re
import shutil

import anndata as ad
import pytest

from conftest import (
    BAD,
    GOOD,
    LEFT_OUT_NAMES,
    REFUSED_NAMES,
    assert_adata_equal,
    assert_catalog,
    bad_path,
    check_chunks,
    check_consolidated,
    describe,
    expected_id,
    fixture_id,
    fixture_name,
    good_path,
    leftover_temp,
    left_out_lines,
    refused_lines,
    run_cfs,
    strip_format_ext,
)

pytestmark = pytest.mark.filterwarnings("ignore")

# generous cap on the address space of a refused run: a header's 10^12 rows must be checked
# before any allocation, not met by allocating (set CELLUCID_FS_NO_RLIMIT=1 for sanitizer builds)
MEM_LIMIT = 2 * 1024**3


def assert_one_refusal(r, filename, phrase):
    lines = refused_lines(r.stderr)
    mine = [l for l in lines if filename in l]
    assert len(mine) == 1, f"expected one refused line naming {filename}:\n{describe(r)}"
    line = mine[0]
    m = re.match(r"^cellucid-fs: (.+): refused: (.+)$", line)
    assert m, f"refused line not in the contract's form: {line!r}"
    assert filename in m.group(1), line
    what = m.group(2)
    assert "; " in what, f"the refusal must say what is wrong and what to do ('<what>; <do>'): {line!r}"
    wrong, todo = what.split("; ", 1)
    assert wrong.strip() and todo.strip(), line
    assert re.search(phrase, wrong, re.IGNORECASE), f"reason {wrong!r} does not match /{phrase}/"
    return line


def assert_no_store(out, name):
    did = expected_id(BAD[name]["file"])
    if out.exists():
        assert not (out / f"{did}.zarr").exists(), f"a refused source got a store: {did}.zarr"
        entries = sorted(os.listdir(out))
        assert all(e == "datasets.json" or e.endswith(".zarr") for e in entries), entries
        if (out / "datasets.json").exists():
            import json

            doc = json.loads((out / "datasets.json").read_text(encoding="utf-8"))
            assert did not in [d["id"] for d in doc["datasets"]]


@pytest.mark.parametrize("name", REFUSED_NAMES)
def test_refused_alone(name, cfs, tmp_path):
    src = bad_path(name)
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out, mem_limit=MEM_LIMIT, timeout=60)
    assert r.returncode == 2, describe(r)
    assert len(refused_lines(r.stderr)) == 1, describe(r)
    assert_one_refusal(r, src.name, BAD[name]["phrase"])
    assert str(src) in refused_lines(r.stderr)[0], "a single SRC is named as given on the command line"
    assert_no_store(out, name)
    assert leftover_temp(tmp_path, "out") == [], os.listdir(tmp_path)


@pytest.mark.parametrize("name", REFUSED_NAMES)
def test_refused_in_folder_with_good_files(name, cfs, tmp_path, oracle):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copyfile(bad_path(name), src / BAD[name]["file"])
    goods = ["csr_f32", "categoricals"]
    for g in goods:
        shutil.copyfile(good_path(g), src / GOOD[g]["file"])
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out, mem_limit=MEM_LIMIT, timeout=60)
    assert r.returncode == 2, describe(r)
    assert len(refused_lines(r.stderr)) == 1, describe(r)
    assert_one_refusal(r, BAD[name]["file"], BAD[name]["phrase"])
    assert not left_out_lines(r.stderr), describe(r)
    assert_catalog(out, [fixture_id(g) for g in goods])
    for g in goods:
        did = fixture_id(g)
        assert_adata_equal(ad.read_zarr(str(out / f"{did}.zarr")), oracle(g), dataset_id=did,
                           dataset_name=fixture_name(g))
    assert_no_store(out, name)
    assert leftover_temp(tmp_path, "out") == [], os.listdir(tmp_path)


def test_every_bad_input_in_one_folder(cfs, tmp_path, oracle):
    """All bad inputs and two good files: each refused input has its one line, the left-out
    ones and the good ones are exported."""
    src = tmp_path / "src"
    src.mkdir()
    for n in BAD:
        shutil.copyfile(bad_path(n), src / BAD[n]["file"])
    goods = ["dense_f32", "nullable"]
    for g in goods:
        shutil.copyfile(good_path(g), src / GOOD[g]["file"])
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out, mem_limit=MEM_LIMIT, timeout=120)
    assert r.returncode == 2, describe(r)
    assert len(refused_lines(r.stderr)) == len(REFUSED_NAMES), describe(r)
    for n in REFUSED_NAMES:
        assert_one_refusal(r, BAD[n]["file"], BAD[n]["phrase"])
    expected_left = sum(len(BAD[n]["left_out"]) for n in LEFT_OUT_NAMES)
    assert len(left_out_lines(r.stderr)) == expected_left, describe(r)
    ids = [fixture_id(g) for g in goods] + [expected_id(BAD[n]["file"]) for n in LEFT_OUT_NAMES]
    assert_catalog(out, ids)
    for g in goods:
        did = fixture_id(g)
        assert_adata_equal(ad.read_zarr(str(out / f"{did}.zarr")), oracle(g), dataset_id=did,
                           dataset_name=fixture_name(g))
    for n in LEFT_OUT_NAMES:
        did = expected_id(BAD[n]["file"])
        assert_adata_equal(ad.read_zarr(str(out / f"{did}.zarr")), oracle(n, bad=True), dataset_id=did,
                           dataset_name=strip_format_ext(BAD[n]["file"]))
    for n in REFUSED_NAMES:
        assert_no_store(out, n)
    assert leftover_temp(tmp_path, "out") == [], os.listdir(tmp_path)


def test_only_refused_sources(cfs, tmp_path):
    """A folder whose every source is refused: exit 2, one line each, no store."""
    src = tmp_path / "src"
    src.mkdir()
    for n in REFUSED_NAMES:
        shutil.copyfile(bad_path(n), src / BAD[n]["file"])
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out, mem_limit=MEM_LIMIT, timeout=120)
    assert r.returncode == 2, describe(r)
    assert len(refused_lines(r.stderr)) == len(REFUSED_NAMES), describe(r)
    for n in REFUSED_NAMES:
        assert_no_store(out, n)
    assert leftover_temp(tmp_path, "out") == [], os.listdir(tmp_path)


@pytest.mark.parametrize("name", LEFT_OUT_NAMES)
def test_left_out_column(name, cfs, tmp_path, oracle):
    src = bad_path(name)
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", src, out, mem_limit=MEM_LIMIT, timeout=60)
    assert r.returncode == 0, describe(r)
    assert not refused_lines(r.stderr), describe(r)
    lines = left_out_lines(r.stderr)
    want = BAD[name]["left_out"]
    assert len(lines) == len(want), describe(r)
    for el in want:
        mine = [l for l in lines if re.match(rf"^cellucid-fs: .+: left out {re.escape(el)}: \S", l)]
        assert len(mine) == 1, f"no single 'left out {el}: <reason>' line:\n{describe(r)}"
        assert src.name in mine[0], mine[0]
    did = expected_id(src.name)
    assert_catalog(out, [did])
    store = out / f"{did}.zarr"
    check_consolidated(store)
    check_chunks(store)
    st = ad.read_zarr(str(store))
    for el in want:
        part, col = el.split("/", 1)
        assert col not in getattr(st, part).columns, f"{el} should be absent from the store"
        assert not (store / part / col).exists(), f"{el} should have no node in the store"
    assert_adata_equal(st, oracle(name, bad=True), dataset_id=did, dataset_name=strip_format_ext(src.name))


def test_refused_names_each_file_as_given(cfs, tmp_path):
    """A relative SRC is named as given."""
    work = tmp_path / "w"
    work.mkdir()
    shutil.copyfile(bad_path("not_hdf5"), work / "broken file.h5ad")
    r = run_cfs(cfs, "export", "broken file.h5ad", "out", cwd=work, timeout=60)
    assert r.returncode == 2, describe(r)
    lines = refused_lines(r.stderr)
    assert len(lines) == 1 and lines[0].startswith("cellucid-fs: broken file.h5ad: refused: "), describe(r)
