"""A private nginx for the tests: started on 127.0.0.1 on a free port, in the foreground
(`daemon off; master_process off;`, one process, tracked by pid), with its prefix, pid, logs and
temporary folders in a test's own folder; stopped (and waited for) by stop().

nginx is a test dependency (Debian package `nginx`; `nginx-light` is a transitional package
that installs it). A missing nginx fails the test that needs it, with that message: it is never
a silent skip.
"""

import http.client
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

PACKAGE = "nginx"

CONF = """\
daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    sendfile on;
{http_extra}
    server {{
        listen 127.0.0.1:{port}{ssl};
        root {root};
        autoindex off;
{server_extra}
{location}
    }}
}}
"""

# The CORS rules are the installed nginx site's (system/nginx-site.conf, README "Serving a
# mount"): its `location / {...}` block, which tests/test_js_clients.py checks from a page of
# another origin in Chromium.
SITE = Path(__file__).resolve().parent.parent / "system" / "nginx-site.conf"


def site_location():
    """The text of the `location / { ... }` block of the installed nginx site."""
    lines = SITE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "location / {")
    depth = 0
    for end in range(start, len(lines)):
        depth += lines[end].count("{") - lines[end].count("}")
        if depth == 0:
            return "\n".join(lines[start:end + 1])
    raise ValueError(f"{SITE}: the location / block has no end")


def nginx_binary():
    for p in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if p and os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    pytest.fail(f"nginx is not installed: the HTTP tests of the mount need it "
                f"(Debian: apt-get install -y {PACKAGE})", pytrace=False)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nginx:
    """nginx serving `root` (a folder, e.g. a mount point) on 127.0.0.1:self.port."""

    def __init__(self, root, workdir, http_extra="", server_extra="", tls=None):
        """http_extra: directives added to the http block (bench/bench_soak.py: `aio threads;`,
        so that one process serves many clients while reads of the mount block); server_extra:
        to the server block (test_remote.py: a `location` answering 403); tls: a TestCA, whose
        server certificate makes the server speak https only."""
        self.root = Path(root)
        self.http_extra = http_extra
        self.server_extra = server_extra
        self.tls = tls
        self.dir = Path(workdir)
        self.proc = None
        self.port = None

    def log_tail(self):
        p = self.dir / "error.log"
        return p.read_text(errors="replace")[-3000:] if p.exists() else "(no error.log)"

    def start(self, timeout=10.0):
        binary = nginx_binary()
        self.dir.mkdir(parents=True, exist_ok=True)
        for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (self.dir / name).mkdir(exist_ok=True)
        for attempt in range(5):
            self.port = free_port()
            conf = self.dir / "nginx.conf"
            ssl = "" if self.tls is None else (
                f" ssl;\n        ssl_certificate {self.tls.cert};\n"
                f"        ssl_certificate_key {self.tls.key}")
            conf.write_text(CONF.format(d=self.dir, port=self.port, root=self.root, ssl=ssl,
                                        http_extra=self.http_extra,
                                        server_extra=self.server_extra,
                                        location=site_location()))
            out = open(self.dir / "stdout.log", "ab")
            self.proc = subprocess.Popen(
                [binary, "-p", str(self.dir), "-c", str(conf), "-e", str(self.dir / "error.log")],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
            out.close()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                        return self
                except OSError:
                    time.sleep(0.05)
            if self.proc.poll() is None:
                self.stop()
                pytest.fail(f"nginx did not accept connections on port {self.port} in {timeout} s:\n"
                            f"{self.log_tail()}", pytrace=False)
            if "Address already in use" not in self.log_tail():
                break
        pytest.fail(f"nginx exited at start (status {self.proc.returncode}):\n{self.log_tail()}", pytrace=False)

    def stop(self):
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)

    def request(self, path, method="GET", headers=None, timeout=30):
        """(status, headers with lower-case names, body) of one request for `path` (a key below
        the root, not yet URL-encoded)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, "/" + urllib.parse.quote(str(path).lstrip("/")), headers=headers or {})
            r = conn.getresponse()
            body = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, body
        finally:
            conn.close()

    def url(self, path=""):
        scheme = "http" if self.tls is None else "https"
        return f"{scheme}://127.0.0.1:{self.port}/" + urllib.parse.quote(str(path).lstrip("/"))


class TestCA:
    """A throwaway certificate authority (ca.pem) and a certificate it signed for 127.0.0.1
    (cert.pem, key.pem), made with openssl in folder: what a private https server has."""
    __test__ = False        # not a pytest class

    def __init__(self, folder):
        d = Path(folder)
        d.mkdir(parents=True, exist_ok=True)
        self.ca, self.cert, self.key = d / "ca.pem", d / "cert.pem", d / "key.pem"
        ca_key, csr, ext = d / "ca.key", d / "cert.csr", d / "ext.cnf"
        ext.write_text("subjectAltName = IP:127.0.0.1\nbasicConstraints = CA:FALSE\n")
        for args in (
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", self.ca,
             "-days", "2", "-subj", "/CN=cellucid-fs test CA"],
            ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", self.key, "-out", csr,
             "-subj", "/CN=127.0.0.1"],
            ["x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", ca_key, "-CAcreateserial",
             "-out", self.cert, "-days", "2", "-extfile", ext],
        ):
            r = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True)
            if r.returncode != 0:
                pytest.fail(f"openssl {args[0]} failed: {r.stderr}", pytrace=False)
