"""Sources in S3 (issue 16, docs/design.md §11): `s3://bucket/key` given as SRC, or in a NAME.url
file, read by range GETs signed with SigV4 (src/net/s3.c's signing), against a real S3 server:
the session's single-node Ceph RADOS Gateway (tests/rgw.py). Objects are uploaded with the
tests' own S3 client (rgw.S3, SigV4 from AWS's specification), never with cellucid-fs.

A gzipped h5ad is fetched whole (signed the same way) and read from its copy.

The oracles: the export of the same file read locally (byte for byte), and anndata reading the
mounted store equal to anndata reading the file. A wrong key or a missing object is one line
naming the URL.
"""

import json
import shutil
import subprocess
import time
from pathlib import Path

import anndata as ad
import pytest

from conftest import FIXTURES_DIR, assert_adata_equal, describe, tree_bytes
import rgw

BUCKET = "cellucid-sources"     # private: only the signed requests read it


@pytest.fixture(scope="module")
def bucket(rgw_gateway):
    s3 = rgw_gateway.s3()
    status, _, _ = s3.request("HEAD", BUCKET)
    if status != 200:
        s3.make_bucket(BUCKET)
    for rel in ("h5ad/csr_f32.h5ad", "loom/loompy3.loom", "compressed/csr_f32.h5ad.gz"):
        status, _, body = s3.request("PUT", BUCKET, f"in/{Path(rel).name}",
                                     body=(FIXTURES_DIR / rel).read_bytes())
        assert status == 200, body
    return rgw_gateway


@pytest.fixture
def creds(monkeypatch):
    """The gateway's user's keys in the environment (the mounts inherit it)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", rgw.ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", rgw.SECRET_KEY)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)


def cfs_run(cfs, *args, timeout=120):
    return subprocess.run([str(cfs), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def local_export(cfs, rel, name, tmp_path):
    """The export of a local copy of fixture rel named name (the oracle of the store)."""
    local = tmp_path / "local"
    local.mkdir(exist_ok=True)
    shutil.copyfile(FIXTURES_DIR / rel, local / name)
    r = cfs_run(cfs, "export", local / name, tmp_path / "out")
    assert r.returncode == 0, describe(r)
    return local / name, tmp_path / "out"


@pytest.mark.parametrize("rel", ["h5ad/csr_f32.h5ad", "loom/loompy3.loom",
                                 "compressed/csr_f32.h5ad.gz"])
def test_export_of_s3_url_equals_local_export(cfs, bucket, creds, tmp_path, rel):
    name = Path(rel).name
    _, want = local_export(cfs, rel, name, tmp_path)
    r = cfs_run(cfs, "export", "-o", f"s3_endpoint={bucket.endpoint}",
                f"s3://{BUCKET}/in/{name}", tmp_path / "from_s3")
    assert r.returncode == 0, describe(r)
    assert tree_bytes(tmp_path / "from_s3") == tree_bytes(want)


def test_mount_s3_url(cfs, bucket, creds, mounts, tmp_path):
    path, want = local_export(cfs, "h5ad/csr_f32.h5ad", "csr_f32.h5ad", tmp_path)
    m = mounts(f"s3://{BUCKET}/in/csr_f32.h5ad", opts=[f"s3_endpoint={bucket.endpoint}"])
    store = m.mnt / "csr_f32.zarr"
    assert tree_bytes(store) == tree_bytes(want / "csr_f32.zarr")
    assert_adata_equal(ad.read_zarr(str(store)), ad.read_h5ad(path), dataset_id="csr_f32",
                       dataset_name="csr_f32")


def test_mount_folder_with_s3_url_file(cfs, bucket, creds, mounts, tmp_path):
    path, want = local_export(cfs, "loom/loompy3.loom", "lab_loom.loom", tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    (src / "lab_loom.url").write_text(f"s3://{BUCKET}/in/loompy3.loom\n")
    m = mounts(src, opts=[f"s3_endpoint={bucket.endpoint}"])
    assert '"lab_loom"' in (m.mnt / "datasets.json").read_text()
    store = m.mnt / "lab_loom.zarr"
    assert tree_bytes(store) == tree_bytes(want / "lab_loom.zarr")
    assert f"s3://{BUCKET}/in/loompy3.loom" in (m.mnt / "status.json").read_text()


def _one_line(r, *words):
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert r.returncode > 0, describe(r)
    assert len(lines) == 1, describe(r)
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_missing_key_is_one_line_naming_the_url(cfs, bucket, creds, tmp_path):
    url = f"s3://{BUCKET}/in/no-such.h5ad"
    t0 = time.monotonic()
    r = cfs_run(cfs, "export", "-o", f"s3_endpoint={bucket.endpoint}", url, tmp_path / "out")
    _one_line(r, url, "404")
    assert time.monotonic() - t0 < 30


def test_wrong_secret_is_one_line_naming_the_url(cfs, bucket, creds, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    url = f"s3://{BUCKET}/in/csr_f32.h5ad"
    r = cfs_run(cfs, "export", "-o", f"s3_endpoint={bucket.endpoint}", url, tmp_path / "out")
    _one_line(r, url, "403")


PUBLIC = "cellucid-public-sources"


def test_public_object_is_read_without_credentials(cfs, bucket, monkeypatch, tmp_path):
    """No credentials anywhere: the requests go unsigned, as a public object wants."""
    s3 = bucket.s3()
    status, _, _ = s3.request("HEAD", PUBLIC)
    if status != 200:
        s3.make_bucket(PUBLIC)
    policy = {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"AWS": ["*"]}, "Action": ["s3:GetObject"],
        "Resource": [f"arn:aws:s3:::{PUBLIC}/*"]}]}
    status, _, body = s3.request("PUT", PUBLIC, query="policy", body=json.dumps(policy).encode())
    assert status in (200, 204), body
    status, _, body = s3.request("PUT", PUBLIC, "csr_f32.h5ad",
                                 body=(FIXTURES_DIR / "h5ad/csr_f32.h5ad").read_bytes())
    assert status == 200, body
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))               # no ~/.aws/credentials
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "")
    _, want = local_export(cfs, "h5ad/csr_f32.h5ad", "csr_f32.h5ad", tmp_path)
    r = cfs_run(cfs, "export", "-o", f"s3_endpoint={bucket.endpoint}",
                f"s3://{PUBLIC}/csr_f32.h5ad", tmp_path / "from_s3")
    assert r.returncode == 0, describe(r)
    assert tree_bytes(tmp_path / "from_s3") == tree_bytes(want)
    # the private bucket says no to an unsigned request: one line naming the URL
    url = f"s3://{BUCKET}/in/csr_f32.h5ad"
    r = cfs_run(cfs, "export", "-o", f"s3_endpoint={bucket.endpoint}", url, tmp_path / "out2")
    _one_line(r, url, "403")


def test_inspect_s3_url(cfs, bucket, creds):
    r = cfs_run(cfs, "inspect", "-o", f"s3_endpoint={bucket.endpoint}",
                f"s3://{BUCKET}/in/csr_f32.h5ad")
    assert r.returncode == 0, describe(r)
    assert "h5ad" in r.stdout, r.stdout
