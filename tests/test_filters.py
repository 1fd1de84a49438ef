"""HDF5 filters: h5ad, loom and 10x .h5 files compressed with libhdf5's filters (gzip, shuffle,
Fletcher-32), h5py's LZF and hdf5plugin's Blosc (every compressor and shuffle), LZ4, Bitshuffle
(uncompressed, LZ4 and zstd blocks) and Zstandard are read by cellucid-fs's own decoders: every
export and mount here runs with libhdf5's plugin loading switched off (HDF5_PLUGIN_PRELOAD=::),
so Debian's plugin packages cannot be what decodes them. A filter it does not decode (ZFP) leaves
out the element, naming the filter.

Fixtures: tests/fixtures/make_filter_fixtures.py (its docstring says how each is written and what
its oracle is). Oracles: anndata.read_h5ad of the fixture itself when h5py (with hdf5plugin
imported) reads it; otherwise of its plain twin, after every chunk of the fixture was decoded
in Python by the codec's own library (numcodecs' c-blosc, LZ4, zstd; bitshuffle) and found to
hold the twin's values."""

import shutil
import struct
import warnings

import anndata as ad
import bitshuffle
import h5py
import hdf5plugin  # noqa: F401  (Debian's bitshuffle plugin, for the "direct" oracles)
import numcodecs
import numpy as np
import pytest
import scipy.sparse as sp

from conftest import (
    FIXTURES_DIR,
    assert_adata_equal,
    describe,
    drop_elements_copy,
    expected_id,
    left_out_lines,
    refused_lines,
    run_cfs,
    load_manifest,
)

warnings.simplefilter("ignore")

DIR = FIXTURES_DIR / "filters"
MANIFEST = load_manifest("filters", "make_filter_fixtures.py")["fixtures"]
H5AD = sorted(k for k, v in MANIFEST.items() if v.get("kind", "h5ad") == "h5ad" and v["oracle"] != "drop")
NO_PLUGINS = {"HDF5_PLUGIN_PRELOAD": "::"}


def path_of(name):
    return (DIR / MANIFEST[name]["file"]).resolve()


def store_id(name):
    f = path_of(name).name
    return expected_id(f[: -len(".loom")] if f.endswith(".loom") else f)


def same(a, o, name):
    """assert_adata_equal with the store's uns['cellucid'] record checked (id and name from the
    file name)."""
    stem = path_of(name).name
    stem = stem[: stem.rindex(".")]
    assert_adata_equal(a, o, dataset_id=store_id(name), dataset_name=stem)


@pytest.fixture(scope="module")
def exported(cfs, tmp_path_factory):
    """exported(name) -> (store path, CompletedProcess) of `cellucid-fs export` with no plugins."""
    cache = {}

    def get(name):
        if name not in cache:
            out = tmp_path_factory.mktemp("filters-" + name) / "out"
            mp = pytest.MonkeyPatch()
            for k, v in NO_PLUGINS.items():
                mp.setenv(k, v)
            try:
                r = run_cfs(cfs, "export", path_of(name), out)
            finally:
                mp.undo()
            assert r.returncode == 0, describe(r)
            assert not refused_lines(r.stderr), describe(r)
            cache[name] = (out / f"{store_id(name)}.zarr", r)
        return cache[name]

    return get


# ---------------------------------------------------------------------------------------------
# decoding the plugin filters in Python (the oracle's side)


def _be(b, n):
    return int.from_bytes(b[:n], "big")


def decode_chunk(fid, cd, raw, dtype):
    """The decoded bytes of one stored chunk of filter fid, by the codec's own library."""
    if fid == 32001:
        return numcodecs.Blosc().decode(raw)
    if fid == 32015:
        return numcodecs.Zstd().decode(raw)
    if fid == 32004:
        total, block = _be(raw, 8), _be(raw[8:], 4)
        out, pos = bytearray(), 12
        while len(out) < total:
            bs = min(block, total - len(out))
            clen = _be(raw[pos:], 4)
            pos += 4
            piece = raw[pos : pos + clen]
            out += piece if clen == bs else numcodecs.LZ4().decode(struct.pack("<I", bs) + piece)
            pos += clen
        return bytes(out)
    if fid == 32008 and cd[4] == 3:
        es = cd[2]
        total, block = _be(raw, 8), _be(raw[8:], 4) // es
        n, done, pos, out = total // es, 0, 12, bytearray()
        elem = np.dtype(f"u{es}") if es in (1, 2, 4, 8) else np.dtype(f"V{es}")
        while n - done >= 8:
            m = block if n - done >= block else (n - done) - (n - done) % 8
            clen = _be(raw[pos:], 4)
            t = np.frombuffer(numcodecs.Zstd().decode(raw[pos + 4 : pos + 4 + clen]), dtype=elem)
            out += bitshuffle.bitunshuffle(t, m).tobytes()
            pos += 4 + clen
            done += m
        out += raw[pos : pos + (n - done) * es]
        return bytes(out)
    raise AssertionError(f"no Python decoder for filter {fid}")


def check_chunks_hold(fixture, twin):
    """Every dataset of fixture filtered by a plugin filter decodes, chunk by chunk, to the
    values of the same dataset of twin; the others equal the twin's as h5py reads them.
    Returns how many chunks were decoded."""
    decoded = 0
    with h5py.File(fixture, "r") as f, h5py.File(twin, "r") as t:
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        tnames = []
        t.visititems(lambda n, o: tnames.append(n) if isinstance(o, h5py.Dataset) else None)
        assert sorted(names) == sorted(tnames)
        for n in names:
            d, want = f[n], t[n][()]
            plist = d.id.get_create_plist()
            filters = [plist.get_filter(i) for i in range(plist.get_nfilters())]
            plugin = [x for x in filters if x[0] >= 256]
            if not plugin:
                got = d[()]
                assert np.array_equal(np.asarray(got), np.asarray(want)), n
                continue
            ((fid, _flags, cd, _name),) = plugin
            assert d.dtype == t[n].dtype, n
            full = np.zeros(d.shape, dtype=d.dtype)
            for i in range(d.id.get_num_chunks()):
                info = d.id.get_chunk_info(i)
                mask, raw = d.id.read_direct_chunk(info.chunk_offset)
                assert mask == 0, n
                block = np.frombuffer(decode_chunk(fid, cd, raw, d.dtype), dtype=d.dtype).reshape(d.chunks)
                sl = tuple(slice(o, min(o + c, s)) for o, c, s in zip(info.chunk_offset, d.chunks, d.shape))
                full[sl] = block[tuple(slice(0, x.stop - x.start) for x in sl)]
                decoded += 1
            assert np.array_equal(full, want), n
    return decoded


def h5ad_oracle(name, tmp_path):
    e = MANIFEST[name]
    p = path_of(name)
    if e["oracle"] == "direct":
        return ad.read_h5ad(p)
    if e["oracle"] == "twin":
        assert check_chunks_hold(p, DIR / e["twin"]) > 0
        return ad.read_h5ad(DIR / e["twin"])
    q = tmp_path / ("oracle-" + p.name)
    drop_elements_copy(p, q, e["elements"])
    return ad.read_h5ad(q)


def filters_used(path):
    ids = set()
    with h5py.File(path, "r") as f:
        def visit(_, o):
            if isinstance(o, h5py.Dataset):
                pl = o.id.get_create_plist()
                ids.update(pl.get_filter(i)[0] for i in range(pl.get_nfilters()))
        f.visititems(visit)
    return ids


# ---------------------------------------------------------------------------------------------
# the fixtures themselves


def test_fixtures_cover_every_filter_and_blosc_setting():
    want = {1, 2, 3, 32000, 32001, 32004, 32008, 32015}
    got = set().union(*(filters_used(path_of(n)) for n in MANIFEST))
    assert want | {32013} <= got, got
    blosc = set()
    for n in MANIFEST:
        with h5py.File(path_of(n), "r") as f:
            pl = f["X/data"].id.get_create_plist() if "X/data" in f else None
            if pl is not None and pl.get_nfilters() and pl.get_filter(0)[0] == 32001:
                cd = pl.get_filter(0)[2]
                blosc.add((cd[6], cd[5]))
    assert blosc == {(c, s) for c in range(6) for s in range(3)}, sorted(blosc)
    bshuf = {tuple(f["X/data"].id.get_create_plist().get_filter(0)[2][3:5])
             for f in (h5py.File(path_of(n), "r") for n in MANIFEST if n.startswith("bitshuffle"))}
    assert {b[1] for b in bshuf} == {0, 2, 3}, bshuf


def test_oracle_decoders_see_every_chunk():
    for n in MANIFEST:
        e = MANIFEST[n]
        if e["oracle"] == "twin":
            assert check_chunks_hold(path_of(n), (DIR / e["twin"]).resolve()) > 3, n


# ---------------------------------------------------------------------------------------------
# h5ad: export and mount equal anndata's reading


@pytest.mark.parametrize("name", H5AD)
def test_export_equals_anndata(name, exported, tmp_path):
    store, r = exported(name)
    assert not left_out_lines(r.stderr), describe(r)
    same(ad.read_zarr(str(store)), h5ad_oracle(name, tmp_path), name)


def mount_folder(mounts, monkeypatch, names, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for n in names:
        shutil.copyfile(path_of(n), src / path_of(n).name)  # a folder's symlinks are not followed
    for k, v in NO_PLUGINS.items():
        monkeypatch.setenv(k, v)
    return mounts(src)


def test_mount_serves_every_filtered_file(mounts, monkeypatch, tmp_path):
    names = sorted(MANIFEST)
    names = [n for n in names if not MANIFEST[n]["file"].startswith("..")]
    m = mount_folder(mounts, monkeypatch, names, tmp_path)
    for name in H5AD:
        store = m.mnt / f"{store_id(name)}.zarr"
        same(ad.read_zarr(str(store)), h5ad_oracle(name, tmp_path), name)
    z = m.mnt / f"{store_id('zfp_layer')}.zarr"
    a = ad.read_zarr(str(z))
    assert "dense" not in a.layers
    same(a, h5ad_oracle("zfp_layer", tmp_path), "zfp_layer")
    assert_loom_store(ad.read_zarr(str(m.mnt / f"{store_id('blosc_loom')}.zarr")))
    status = m.status()
    text = repr(status)
    assert "32013 (zfp)" in text, text[:2000]
    assert m.stderr().count("refused") == 0, m.stderr()


# ---------------------------------------------------------------------------------------------
# the filter cellucid-fs does not decode


def test_unsupported_filter_leaves_out_the_element(exported, tmp_path):
    store, r = exported("zfp_layer")
    lines = left_out_lines(r.stderr)
    assert lines == [
        f"cellucid-fs: {path_of('zfp_layer')}: left out layers/dense: it is compressed with HDF5 "
        "filter 32013 (zfp), which this version cannot decode; re-write it with gzip or no "
        "compression; the entry was not read"
    ], describe(r)
    a = ad.read_zarr(str(store))
    assert "dense" not in a.layers
    same(a, h5ad_oracle("zfp_layer", tmp_path), "zfp_layer")


def test_inspect_names_the_unsupported_filter(cfs):
    r = run_cfs(cfs, "inspect", path_of("zfp_layer"))
    assert r.returncode == 0, describe(r)
    assert "left out layers/dense: it is compressed with HDF5 filter 32013 (zfp)" in r.stdout, describe(r)


# ---------------------------------------------------------------------------------------------
# loom and 10x .h5


def assert_loom_store(a):
    twin = DIR / MANIFEST["blosc_loom"]["twin"]
    from test_loom import loompy_graphs, plain_strings

    o = ad.read_loom(str(twin))
    with h5py.File(twin, "r") as f:
        assert np.array_equal(o.X.toarray() if sp.issparse(o.X) else o.X, f["matrix"][()].T)
        o.X = f["matrix"][()].T  # read_loom casts X to float32; the store keeps the file's dtype
    o.uns = loompy_graphs(twin, True)[2]
    o = plain_strings(o)
    same(a, o, "blosc_loom")


def test_loom_with_blosc(exported):
    e = MANIFEST["blosc_loom"]
    assert check_chunks_hold(path_of("blosc_loom"), DIR / e["twin"]) > 0
    store, r = exported("blosc_loom")
    assert not left_out_lines(r.stderr), describe(r)
    assert_loom_store(ad.read_zarr(str(store)))


def test_tenx_with_zstd(exported):
    from test_tenx import assert_store_matches, read_tenx_h5

    twin = (DIR / MANIFEST["zstd_10x"]["twin"]).resolve()
    assert check_chunks_hold(path_of("zstd_10x"), twin) > 0
    store, r = exported("zstd_10x")
    assert not left_out_lines(r.stderr), describe(r)
    assert_store_matches(ad.read_zarr(str(store)), read_tenx_h5(twin))


# ---------------------------------------------------------------------------------------------
# our filters, not a plugin folder's


def test_filters_work_with_an_empty_plugin_folder(cfs, tmp_path, monkeypatch):
    empty = tmp_path / "no-plugins"
    empty.mkdir()
    monkeypatch.setenv("HDF5_PLUGIN_PATH", str(empty))
    for name in ("lzf", "bitshuffle_lz4", "bitshuffle_none", "blosc_zstd_bitshuffle", "lz4", "zstd"):
        out = tmp_path / name
        r = run_cfs(cfs, "export", path_of(name), out)
        assert r.returncode == 0 and not left_out_lines(r.stderr) and not refused_lines(r.stderr), describe(r)
        same(ad.read_zarr(str(out / f"{store_id(name)}.zarr")), h5ad_oracle(name, tmp_path), name)


def test_plugin_loading_off_still_refuses_unknown_filters(exported):
    """The control: with plugin loading off, a filter we do not register is not decodable, so
    the passing exports above were decoded by cellucid-fs itself."""
    _, r = exported("zfp_layer")
    assert any("32013 (zfp)" in l for l in left_out_lines(r.stderr)), describe(r)


FILTER_WORD = {"blosc_lz4_shuffle": "blosc filter: ", "lz4": "lz4 filter: ", "zstd": "zstd filter: ",
               "bitshuffle_zstd": "bitshuffle filter: ", "bitshuffle_lz4": "bitshuffle filter: ",
               "lzf": "lzf filter: "}


def test_corrupt_chunk_is_a_read_error_not_a_crash(cfs, tmp_path):
    """A damaged Blosc/LZ4/zstd/bitshuffle chunk fails the read with libhdf5's error, naming
    the filter's reason; nothing overflows (the process exits normally)."""
    for name in ("blosc_lz4_shuffle", "lz4", "zstd", "bitshuffle_zstd", "bitshuffle_lz4", "lzf"):
        src = tmp_path / path_of(name).name
        src.write_bytes(path_of(name).read_bytes())
        with h5py.File(src, "r+") as f:
            d = f["X/indptr"]
            off = d.id.get_chunk_info(0).chunk_offset
            _, raw = d.id.read_direct_chunk(off)
            d.id.write_direct_chunk(off, raw[: len(raw) // 2])  # cut off
        out = tmp_path / ("out-" + name)
        r = run_cfs(cfs, "export", src, out)
        assert r.returncode == 2, describe(r)  # refused, not a signal
        (line,) = refused_lines(r.stderr)
        assert line.startswith(f"cellucid-fs: {src}: refused: X: csr_matrix: reading indptr failed: "), line
        assert line.endswith("; the file is damaged: re-download or re-create it"), line
        assert FILTER_WORD[name] in line, line
