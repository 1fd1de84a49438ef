"""A private Ceph RADOS Gateway for the tests: a single-node cluster from Debian's packages
(ceph-mon, one ceph-osd on the in-memory `memstore` object store, radosgw) on 127.0.0.1, without
cephx, every run/log/data path under one temporary folder; an S3 user with a fixed key. Started
once per session (about 30 s), stopped daemon by daemon through their pid files at teardown,
leaving nothing running.

The S3 client here (sign(), S3.request()) is a small SigV4 signer of its own, written from AWS's
specification, so the tests check cellucid-fs's requests against an independent implementation.

Run as a script it starts a gateway and waits for Ctrl-C (for trying things by hand):
    /usr/bin/python3 tests/rgw.py /tmp/rgw
"""

import datetime
import hashlib
import hmac
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

from nginx import free_port

PACKAGES = "ceph-mon ceph-osd radosgw ceph-common"
BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "ceph", "radosgw-admin", "monmaptool")
ACCESS_KEY = "CELLUCIDTESTACCESS01"
SECRET_KEY = "cellucid+test+secret+key+0123456789abcdef"
REGION = "us-east-1"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()

CONF = """\
[global]
fsid = {fsid}
mon host = 127.0.0.1:{mon_port}
auth cluster required = none
auth service required = none
auth client required = none
ms bind ipv6 = false
# Without cephx no connection can be "secure": radosgw would ask the monitor for that mode only.
ms mon client mode = crc
ms client mode = crc
ms mon cluster mode = crc
ms mon service mode = crc
ms cluster mode = crc
ms service mode = crc
mon data avail warn = 1
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
osd objectstore = memstore
memstore device bytes = 2147483648
mon allow pool delete = true
mon warn on pool no redundancy = false
run dir = {d}/run
pid file = {d}/run/$name.pid
admin socket = {d}/run/$name.asok
log file = {d}/log/$name.log
mon cluster log file = {d}/log/cluster.log
keyring = {d}/keyring
mon data = {d}/mon/$cluster-$id
osd data = {d}/osd/$cluster-$id
[client.rgw.test]
rgw frontends = beast endpoint=127.0.0.1:{rgw_port}
rgw data = {d}/rgw
log file = {d}/log/radosgw.log
debug rgw = 1
debug ms = 0
"""


def missing_binaries():
    return [b for b in BINARIES if not shutil.which(b)]


def sign(method, url, headers, payload_hash, access_key=ACCESS_KEY, secret_key=SECRET_KEY,
         region=REGION, now=None):
    """The headers of a SigV4-signed S3 request (AWS's "Signature Version 4" specification)."""
    u = urllib.parse.urlsplit(url)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    headers = dict(headers)
    headers.update({"host": u.netloc, "x-amz-date": amz_date,
                    "x-amz-content-sha256": payload_hash})
    names = sorted(h.lower() for h in headers)
    lower = {k.lower(): str(v).strip() for k, v in headers.items()}
    query = "&".join(
        f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
        for k, v in sorted(urllib.parse.parse_qsl(u.query, keep_blank_values=True)))
    canonical = "\n".join([
        method, u.path or "/", query,
        "".join(f"{n}:{lower[n]}\n" for n in names), ";".join(names), payload_hash])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + secret_key).encode()
    for part in (day, region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
                                f"SignedHeaders={';'.join(names)}, Signature={signature}")
    return headers


class S3:
    """Signed requests to an S3 endpoint (path-style)."""

    def __init__(self, endpoint, access_key=ACCESS_KEY, secret_key=SECRET_KEY):
        self.endpoint = endpoint.rstrip("/")
        self.access_key, self.secret_key = access_key, secret_key

    def url(self, bucket, key="", query=""):
        path = urllib.parse.quote(f"/{bucket}/{key}" if key or bucket else "/", safe="/-_.~")
        return f"{self.endpoint}{path}" + (f"?{query}" if query else "")

    def request(self, method, bucket, key="", query="", body=b"", headers=None, timeout=30):
        """(status, headers, body) of a signed request; HTTP errors are answers, not raised."""
        url = self.url(bucket, key, query)
        h = sign(method, url, headers or {}, hashlib.sha256(body).hexdigest(),
                 self.access_key, self.secret_key)
        h.pop("host")
        req = urllib.request.Request(url, data=body if method in ("PUT", "POST") else None,
                                     method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def make_bucket(self, bucket):
        status, _, body = self.request("PUT", bucket)
        assert status == 200, (status, body)

    def get(self, bucket, key):
        status, headers, body = self.request("GET", bucket, key)
        assert status == 200, (bucket, key, status, body)
        return body

    def list(self, bucket, prefix=""):
        """{key: (size, etag)} of every object under prefix (ListObjectsV2, every page)."""
        import xml.etree.ElementTree as ET
        ns = "{http://s3.amazonaws.com/doc/2006-03-01/}"
        out, token = {}, None
        while True:
            q = {"list-type": "2", "prefix": prefix}
            if token:
                q["continuation-token"] = token
            status, _, body = self.request("GET", bucket, query=urllib.parse.urlencode(q))
            assert status == 200, (status, body)
            root = ET.fromstring(body)
            for c in root.iter(f"{ns}Contents"):
                out[c.find(f"{ns}Key").text] = (int(c.find(f"{ns}Size").text),
                                                c.find(f"{ns}ETag").text.strip('"'))
            if root.findtext(f"{ns}IsTruncated") != "true":
                return out
            token = root.findtext(f"{ns}NextContinuationToken")

    def delete(self, bucket, key):
        status, _, body = self.request("DELETE", bucket, key)
        assert status in (200, 204), (status, body)


class Rgw:
    """A single-node Ceph cluster and a RADOS Gateway under workdir, on 127.0.0.1:self.port."""

    def __init__(self, workdir):
        self.d = Path(workdir)
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.conf = self.d / "ceph.conf"
        self.started = []          # pid files of the daemons started, in order

    def _run(self, *args, timeout=60):
        r = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: exit {r.returncode}: {r.stderr[-2000:]}")
        return r.stdout

    def _ceph(self, *args, timeout=60):
        return self._run("ceph", "-c", str(self.conf), *args, timeout=timeout)

    def _daemon(self, name, pidfile, *args):
        """Starts a daemon (it forks into the background and writes its pid file)."""
        self.started.append(pidfile)
        self._run(name, "-c", str(self.conf), *args)
        deadline = time.monotonic() + 30
        while not pidfile.is_file() or not pidfile.read_text().strip():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} wrote no pid file {pidfile}; see {self.d}/log")
            time.sleep(0.1)

    def start(self):
        for sub in ("run", "log", "mon", "osd", "rgw"):
            (self.d / sub).mkdir(parents=True, exist_ok=True)
        fsid = str(uuid.uuid4())
        self.conf.write_text(CONF.format(fsid=fsid, mon_port=free_port(), rgw_port=self.port,
                                         d=self.d))
        (self.d / "keyring").write_text("")
        run = self.d / "run"
        self._run("ceph-mon", "-c", str(self.conf), "--mkfs", "-i", "a", "--fsid", fsid)
        self._daemon("ceph-mon", run / "mon.a.pid", "-i", "a")
        osd_uuid = str(uuid.uuid4())
        osd_id = self._ceph("osd", "new", osd_uuid).strip()
        (self.d / "osd" / f"ceph-{osd_id}").mkdir()
        self._run("ceph-osd", "-c", str(self.conf), "-i", osd_id, "--mkfs", "--osd-uuid",
                  osd_uuid)
        self._daemon("ceph-osd", run / f"osd.{osd_id}.pid", "-i", osd_id)
        self._ceph("osd", "crush", "add", f"osd.{osd_id}", "1.0", "host=localhost",
                   "root=default")
        self._daemon("radosgw", run / "client.rgw.test.pid", "-n", "client.rgw.test")
        self._wait_gateway()
        self._run("radosgw-admin", "-c", str(self.conf), "user", "create", "--uid", "cellucid",
                  "--display-name", "cellucid-fs tests", "--access-key", ACCESS_KEY,
                  "--secret", SECRET_KEY, timeout=120)
        return self

    def _wait_gateway(self, timeout=120):
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(self.endpoint + "/", timeout=5) as r:
                    r.read()
                    return
            except urllib.error.HTTPError:
                return          # an S3 error document: the gateway answers
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"radosgw did not answer on {self.endpoint} in "
                                       f"{timeout} s; see {self.d}/log/radosgw.log")
                time.sleep(0.5)

    def stop(self):
        """Stops every daemon started, the last first, each by its pid file; waits for each."""
        for pidfile in reversed(self.started):
            try:
                pid = int(pidfile.read_text().strip())
            except (OSError, ValueError):
                continue
            for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    break
                deadline = time.monotonic() + wait
                while time.monotonic() < deadline and _alive(pid):
                    time.sleep(0.1)
                if not _alive(pid):
                    break
        self.started = []

    def s3(self, **kw):
        return S3(self.endpoint, **kw)


def _alive(pid):
    """Whether pid runs (a zombie of ours is reaped and counts as gone)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


if __name__ == "__main__":
    g = Rgw(sys.argv[1] if len(sys.argv) > 1 else "/tmp/rgw")
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT, signal.SIGTERM])
    t0 = time.monotonic()
    try:
        g.start()
        print(f"RADOS Gateway on {g.endpoint} ({time.monotonic() - t0:.0f} s); "
              f"AWS_ACCESS_KEY_ID={ACCESS_KEY} AWS_SECRET_ACCESS_KEY={SECRET_KEY}", flush=True)
        signal.sigwait([signal.SIGINT, signal.SIGTERM])
    finally:
        g.stop()
