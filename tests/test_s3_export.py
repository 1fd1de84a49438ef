"""`cellucid-fs export SRC s3://bucket/prefix/` against a real S3 server: a single-node Ceph RADOS
Gateway (tests/rgw.py, started once per session). The oracles are the folder export of the same
input (byte for byte, key for key), anndata reading the stores back over plain HTTP, and an S3
client of the tests' own (rgw.S3, SigV4 from AWS's specification) for listing and reading.
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import warnings

import anndata as ad
import pytest
import zarr

from conftest import (
    FIXTURES_DIR,
    GOOD_DIR,
    REPO,
    TIMEOUT,
    assert_adata_equal,
    describe,
    fixture_id,
    run_cfs,
    tree_bytes,
)
import rgw
from nginx import Nginx, TestCA
from test_remote import write_big_h5ad

sys.path.insert(0, str(REPO / "example"))
from read_over_http import HTTPStore  # noqa: E402

warnings.simplefilter("ignore")
pytestmark = pytest.mark.filterwarnings("ignore")

BUCKET = "cellucid-tests"
# Keys are JSON documents (Content-Type application/json) when named so.
JSON_NAMES = (".zattrs", ".zarray", ".zgroup", ".zmetadata", "datasets.json")


@pytest.fixture(scope="module")
def gateway(rgw_gateway):
    s3 = rgw_gateway.s3()
    if BUCKET not in _buckets(s3):
        s3.make_bucket(BUCKET)
        # Anyone may read (GET, and list so a missing key is a 404): what serving a public atlas
        # to browser viewers needs (README "Serving from object storage").
        policy = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": {"AWS": ["*"]},
            "Action": ["s3:GetObject", "s3:ListBucket"],
            "Resource": [f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*"]}]}
        status, _, body = s3.request("PUT", BUCKET, query="policy",
                                     body=json.dumps(policy).encode())
        assert status in (200, 204), body
    return rgw_gateway


def _buckets(s3):
    status, _, body = s3.request("GET", "")
    assert status == 200, body
    return body.decode()


def s3_env(**over):
    env = dict(os.environ, AWS_ACCESS_KEY_ID=rgw.ACCESS_KEY, AWS_SECRET_ACCESS_KEY=rgw.SECRET_KEY)
    env.pop("AWS_PROFILE", None)
    env.update(over)
    return env


def export_s3(cfs, gateway, src, prefix, endpoint=None, env=None, timeout=TIMEOUT, opts=""):
    return subprocess.run(
        [str(cfs), "export", "-o", f"s3_endpoint={endpoint or gateway.endpoint}{opts}", str(src),
         f"s3://{BUCKET}/{prefix}"],
        capture_output=True, text=True, timeout=timeout, env=env or s3_env())


def summary(stderr):
    """(written, skipped) of the export's summary line."""
    line = [l for l in stderr.splitlines() if "objects written" in l]
    assert len(line) == 1, stderr
    words = line[0].split(": ", 2)[-1].split()
    return int(words[0]), int(words[words.index("skipped") - 1])


def objects(gateway, prefix):
    """{key below prefix: bytes} of every object under prefix, each read by a GET."""
    s3 = gateway.s3()
    keys = s3.list(BUCKET, prefix)
    return {k[len(prefix):]: s3.get(BUCKET, k) for k in keys}


@pytest.fixture(scope="module")
def folder_export(cfs, tmp_path_factory):
    out = tmp_path_factory.mktemp("s3-folder") / "out"
    r = run_cfs(cfs, "export", GOOD_DIR, out)
    assert r.returncode in (0, 2), describe(r)
    return out


@pytest.fixture(scope="module")
def big_input(tmp_path_factory):
    """An h5ad (written by anndata) big enough that its export to the gateway takes a while:
    30000 cells x 3000 genes, 2% non-zero, with a UMAP."""
    path = tmp_path_factory.mktemp("s3-big") / "big.h5ad"
    write_big_h5ad(path, n_obs=30000, n_vars=3000, density=0.02)
    return path


def test_export_equals_folder_export(cfs, gateway, folder_export):
    """Every key of the folder export is an object under the prefix with the same bytes (read
    back by GET), and nothing else is; JSON documents carry Content-Type application/json."""
    r = export_s3(cfs, gateway, GOOD_DIR, "h5ad/")
    assert r.returncode == 0, describe(r)
    written, skipped = summary(r.stderr)
    want = tree_bytes(folder_export)
    assert written + skipped == len(want)
    got = objects(gateway, "h5ad/")
    assert sorted(got) == sorted(want)
    assert [k for k in want if got[k] != want[k]] == []
    s3 = gateway.s3()
    for key in ("datasets.json", f"{fixture_id('dense_f32')}.zarr/.zmetadata",
                f"{fixture_id('dense_f32')}.zarr/X/0.0"):
        _, headers, _ = s3.request("GET", BUCKET, "h5ad/" + key)
        json_doc = key.endswith(JSON_NAMES)
        assert headers["Content-Type"] == ("application/json" if json_doc
                                           else "application/octet-stream"), key


@pytest.fixture
def https_gateway(gateway, tmp_path):
    """The gateway behind an nginx speaking https only (a throwaway CA's certificate), passing
    requests on as they came (the Host header too: it is signed); yields (https URL, TestCA)."""
    ca = TestCA(tmp_path / "ca")
    proxy = f"""
        client_max_body_size 0;
        location /{BUCKET} {{
            proxy_pass {gateway.endpoint};
            proxy_set_header Host $http_host;
            proxy_http_version 1.1;
            proxy_request_buffering off;
        }}"""
    n = Nginx(tmp_path, tmp_path / "nginx_tls", server_extra=proxy, tls=ca)
    n.start()
    yield n.url().rstrip("/"), ca
    n.stop()


def test_export_to_https_endpoint_honours_remote_cafile(cfs, gateway, https_gateway,
                                                        folder_export):
    """The export's S3 client checks an https endpoint's certificate as the remote sources'
    reader does: untrusted, one line naming the request's URL and -o remote_cafile; with
    -o remote_cafile=CA, the objects are the folder export's."""
    endpoint, ca = https_gateway
    r = export_s3(cfs, gateway, GOOD_DIR, "tls/", endpoint=endpoint)
    assert r.returncode != 0, describe(r)
    lines = [l for l in r.stderr.splitlines() if endpoint in l]
    assert lines and "TLS failed" in lines[0] and "-o remote_cafile=PEM" in lines[0], describe(r)
    assert objects(gateway, "tls/") == {}
    r = subprocess.run(
        [str(cfs), "export", "-o", f"s3_endpoint={endpoint},remote_cafile={ca.ca}",
         str(GOOD_DIR), f"s3://{BUCKET}/tls/"],
        capture_output=True, text=True, timeout=TIMEOUT, env=s3_env())
    assert r.returncode == 0, describe(r)
    want = tree_bytes(folder_export)
    got = objects(gateway, "tls/")
    assert sorted(got) == sorted(want)
    assert [k for k in want if got[k] != want[k]] == []


def test_anndata_reads_a_store_over_http(cfs, gateway, folder_export, oracle):
    """anndata reads a store from the gateway over plain HTTP (no credentials: the bucket's
    policy lets anyone read) and it equals the source read by anndata."""
    r = export_s3(cfs, gateway, GOOD_DIR, "h5ad/")
    assert r.returncode == 0, describe(r)
    for name in ("dense_f32", "csr_f32", "categoricals"):
        store = HTTPStore(f"{gateway.endpoint}/{BUCKET}/h5ad/{fixture_id(name)}.zarr")
        assert zarr.open_consolidated(store, mode="r")["obsm"]["X_umap"].shape[0] > 0
        assert_adata_equal(ad.read_zarr(store), oracle(name), dataset_id=fixture_id(name))
    with urllib.request.urlopen(
            f"{gateway.endpoint}/{BUCKET}/h5ad/datasets.json", timeout=30) as resp:
        assert json.loads(resp.read()) == json.loads((folder_export / "datasets.json").read_text())


def test_rerun_sends_only_what_is_missing_or_different(cfs, gateway, folder_export):
    """Idempotent: a rerun skips every object already there with the same bytes, rewrites one
    whose bytes differ and writes the ones missing (datasets.json among them)."""
    prefix = "rerun/"
    r = export_s3(cfs, gateway, GOOD_DIR, prefix)
    assert r.returncode == 0, describe(r)
    s3 = gateway.s3()
    keys = sorted(s3.list(BUCKET, prefix))
    removed = [k for k in keys if k.endswith("/X/0.0")][:3] + [prefix + "datasets.json"]
    for k in removed:
        s3.delete(BUCKET, k)
    damaged = next(k for k in keys if k.endswith("/.zmetadata"))
    status, _, _ = s3.request("PUT", BUCKET, damaged, body=b"{}")
    assert status == 200
    r = export_s3(cfs, gateway, GOOD_DIR, prefix)
    assert r.returncode == 0, describe(r)
    assert summary(r.stderr) == (len(removed) + 1, len(keys) - len(removed) - 1)
    assert objects(gateway, prefix) == tree_bytes(folder_export)


def _poll_listing(gateway, prefix, stop, seen):
    """Lists prefix again and again until stop is set; seen gets the first listing that holds
    datasets.json."""
    s3 = gateway.s3()
    while not stop.is_set():
        keys = s3.list(BUCKET, prefix)
        if prefix + "datasets.json" in keys:
            seen.append(set(keys))
            return
        time.sleep(0.02)


def _export_watching_the_catalog(cfs, gateway, src, prefix):
    """Exports src to prefix while listing it: the first listing that holds datasets.json,
    and the final one."""
    stop, seen = threading.Event(), []
    t = threading.Thread(target=_poll_listing, args=(gateway, prefix, stop, seen))
    t.start()
    try:
        r = export_s3(cfs, gateway, src, prefix)
    finally:
        time.sleep(0.5)
        stop.set()
        t.join()
    assert r.returncode == 0, describe(r)
    assert seen, "no listing showed datasets.json"
    return seen[0], set(gateway.s3().list(BUCKET, prefix))


def test_catalog_is_written_last(cfs, gateway, big_input, tmp_path):
    """The first listing that shows datasets.json already shows every other object: a reader
    never finds a catalog naming a store not yet whole."""
    first, final = _export_watching_the_catalog(cfs, gateway, big_input, "order/")
    assert first == final
    assert len(final) > 100


def test_killed_export_is_finished_by_a_rerun(cfs, gateway, big_input, tmp_path):
    """kill -9 part way (some objects stored, no datasets.json yet), then a rerun: it skips what
    the first run stored, writes the rest, and the result equals the folder export."""
    prefix = "killed/"
    s3 = gateway.s3()
    p = subprocess.Popen(
        [str(cfs), "export", "-o", f"s3_endpoint={gateway.endpoint}", str(big_input),
         f"s3://{BUCKET}/{prefix}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=s3_env())
    try:
        deadline = time.monotonic() + TIMEOUT
        while len(s3.list(BUCKET, prefix)) < 20 and p.poll() is None:
            assert time.monotonic() < deadline, "the export stored nothing"
            time.sleep(0.05)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stderr.close()
    assert p.returncode == -signal.SIGKILL, "the export ended before it could be killed"
    stored = s3.list(BUCKET, prefix)
    assert stored and prefix + "datasets.json" not in stored
    r = export_s3(cfs, gateway, big_input, prefix)
    assert r.returncode == 0, describe(r)
    written, skipped = summary(r.stderr)
    # Objects cut off mid-PUT are not stored at all (S3 PUTs are atomic): all stored are whole.
    assert skipped == len(stored)
    out = tmp_path / "folder"
    rf = run_cfs(cfs, "export", big_input, out)
    assert rf.returncode == 0, describe(rf)
    want = tree_bytes(out)
    assert written + skipped == len(want)
    assert objects(gateway, prefix) == want


def _one_error_line(r, *words):
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert r.returncode == 1, describe(r)
    assert len(lines) == 1, r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def test_wrong_key_is_one_line_naming_the_url(cfs, gateway):
    r = export_s3(cfs, gateway, GOOD_DIR, "denied/",
                  env=s3_env(AWS_SECRET_ACCESS_KEY="not-the-secret"), timeout=60)
    _one_error_line(r, f"s3://{BUCKET}/", gateway.endpoint, "403", "AWS_SECRET_ACCESS_KEY")
    r = export_s3(cfs, gateway, GOOD_DIR, "denied/",
                  env=s3_env(AWS_ACCESS_KEY_ID="NOSUCHKEY"), timeout=60)
    _one_error_line(r, f"s3://{BUCKET}/", "403", "InvalidAccessKeyId")
    assert gateway.s3().list(BUCKET, "denied/") == {}


def test_missing_bucket_is_one_line(cfs, gateway):
    r = subprocess.run(
        [str(cfs), "export", "-o", f"s3_endpoint={gateway.endpoint}", str(GOOD_DIR),
         "s3://no-such-bucket/x/"], capture_output=True, text=True, timeout=60, env=s3_env())
    _one_error_line(r, "s3://no-such-bucket/", "no such bucket", gateway.endpoint)


def test_unreachable_endpoint_is_one_line_without_hanging(cfs, gateway):
    from nginx import free_port
    endpoint = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    r = export_s3(cfs, gateway, GOOD_DIR, "x/", endpoint=endpoint, timeout=60)
    _one_error_line(r, endpoint, f"s3://{BUCKET}/", "server is up")
    assert time.monotonic() - t0 < 30


def test_bad_s3_arguments(cfs, gateway):
    r = subprocess.run([str(cfs), "export", str(GOOD_DIR), "s3://x"], capture_output=True,
                       text=True, timeout=60, env=s3_env())
    _one_error_line(r, "s3://x", "bucket name")
    r = subprocess.run([str(cfs), "export", "-o", "s3_endpoint=ftp://h", str(GOOD_DIR),
                        f"s3://{BUCKET}/"], capture_output=True, text=True, timeout=60)
    _one_error_line(r, "s3_endpoint=ftp://h")
    env = s3_env(HOME=str(REPO / "tests" / "fixtures"), AWS_SHARED_CREDENTIALS_FILE="")
    del env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
    r = subprocess.run([str(cfs), "export", "-o", f"s3_endpoint={gateway.endpoint}",
                        str(GOOD_DIR), f"s3://{BUCKET}/"], capture_output=True, text=True,
                       timeout=60, env=env)
    _one_error_line(r, "no S3 credentials", "AWS_ACCESS_KEY_ID")


def test_credentials_file_profile(cfs, gateway, tmp_path):
    """Keys from a credentials file's AWS_PROFILE profile, when the environment has none."""
    creds = tmp_path / "credentials"
    creds.write_text(f"[default]\naws_access_key_id = WRONG\naws_secret_access_key = wrong\n"
                     f"[lab]\naws_access_key_id = {rgw.ACCESS_KEY}\n"
                     f"aws_secret_access_key = {rgw.SECRET_KEY}\n")
    env = s3_env(AWS_SHARED_CREDENTIALS_FILE=str(creds), AWS_PROFILE="lab")
    del env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
    r = export_s3(cfs, gateway, GOOD_DIR / "dense_f32.h5ad", "profile/", env=env)
    assert r.returncode == 0, describe(r)
    assert summary(r.stderr)[0] > 0


# ---------------------------------------------------------------------------------------------
# published views (tests/test_sessions.py has the rules; here: the objects and their order)

VIEW = (FIXTURES_DIR / "sessions" / "dense_f32.cellucid-session").read_bytes()
VIEW_2 = (FIXTURES_DIR / "sessions" / "dense_f32_v2.cellucid-session").read_bytes()


def _with_view(folder, data, sources=("dense_f32", "csr_f32")):
    folder.mkdir()
    for name in sources:
        shutil.copyfile(GOOD_DIR / f"{name}.h5ad", folder / f"{name}.h5ad")
    (folder / "dense_f32.cellucid-session").write_bytes(data)
    return folder


def test_view_is_an_object_and_reruns_send_only_what_changed(cfs, gateway, tmp_path):
    """The view is the object dense_f32.cellucid-session with the file's bytes, listed in
    datasets.json with its length and SHA-256 (hashlib), and the objects are the folder
    export's. A rerun skips it (same size and MD5); a changed view is sent again with
    datasets.json and nothing else; a removed one leaves datasets.json without it."""
    src = _with_view(tmp_path / "src", VIEW)
    prefix = "views/"
    r = export_s3(cfs, gateway, src, prefix, opts=",default=dense_f32")
    assert r.returncode == 0, describe(r)
    folder = tmp_path / "folder"
    assert run_cfs(cfs, "export", "-o", "default=dense_f32", src, folder).returncode == 0
    got = objects(gateway, prefix)
    assert got == tree_bytes(folder)
    assert got["dense_f32.cellucid-session"] == VIEW
    catalog = json.loads(got["datasets.json"])
    assert catalog["default"] == "dense_f32"
    assert catalog["datasets"][1]["session"] == {
        "path": "dense_f32.cellucid-session", "bytes": len(VIEW),
        "sha256": hashlib.sha256(VIEW).hexdigest()}
    _, headers, _ = gateway.s3().request("GET", BUCKET, prefix + "dense_f32.cellucid-session")
    assert headers["Content-Type"] == "application/octet-stream"

    r = export_s3(cfs, gateway, src, prefix, opts=",default=dense_f32")
    assert r.returncode == 0, describe(r)
    assert summary(r.stderr) == (0, len(got))

    (src / "dense_f32.cellucid-session").write_bytes(VIEW_2)
    r = export_s3(cfs, gateway, src, prefix, opts=",default=gone")
    assert r.returncode == 0, describe(r)
    assert "cellucid-fs: default=gone is not in datasets.json: it opens on csr_f32, the first " \
        "id" in r.stderr.splitlines(), describe(r)
    assert summary(r.stderr) == (2, len(got) - 2)      # the view and datasets.json
    got = objects(gateway, prefix)
    assert got["dense_f32.cellucid-session"] == VIEW_2
    catalog = json.loads(got["datasets.json"])
    assert catalog["default"] == "csr_f32"
    assert catalog["datasets"][1]["session"]["sha256"] == hashlib.sha256(VIEW_2).hexdigest()

    (src / "dense_f32.cellucid-session").unlink()
    r = export_s3(cfs, gateway, src, prefix)
    assert r.returncode == 0, describe(r)
    assert summary(r.stderr) == (1, len(got) - 2)      # datasets.json only
    catalog = json.loads(objects(gateway, prefix)["datasets.json"])
    assert all("session" not in d for d in catalog["datasets"]), catalog


def test_view_is_stored_before_the_catalog(cfs, gateway, big_input, tmp_path):
    """The first listing that shows datasets.json already shows the view it names."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copyfile(big_input, src / "big.h5ad")
    (src / "big.cellucid-session").write_bytes(VIEW)
    first, final = _export_watching_the_catalog(cfs, gateway, src, "view-order/")
    assert "view-order/big.cellucid-session" in final
    assert first == final
