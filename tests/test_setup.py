"""The README's example command end to end: `bash setup.sh example` mounts the bundled fixtures
and serves them with nginx until Ctrl-C, then unmounts. The test runs its mount + serve part
(`setup.sh serve-example`: the same function, without installing and building) with its own
folder, port and binary, reads the catalog over HTTP, sends the process group a SIGINT as a
terminal's Ctrl-C does, and checks that the mount and every process are gone.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path


from conftest import REPO, mounted, run_cfs
from nginx import free_port

FIXTURES = REPO / "tests" / "fixtures" / "h5ad"


# Loopback only: never through a proxy named in the environment.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(url):
    with OPENER.open(url, timeout=5) as r:
        return r.status, r.headers.get("Content-Length"), r.read()


def leftovers(session, base):
    """Processes of the example's session (nginx's workers) or naming its folder (the daemon)."""
    found = []
    for args in (["pgrep", "-a", "-s", str(session)], ["pgrep", "-af", str(base)]):
        found += subprocess.run(args, capture_output=True, text=True).stdout.split("\n")
    return [line for line in found if line.strip()]


def test_example_serves_the_fixtures_and_unmounts_on_ctrl_c(cfs, tmp_path):
    # nginx's workers (another user) must reach the mount: pytest's own folders are 0700.
    base, port = Path(tempfile.mkdtemp(prefix="cfs-example-")), free_port()
    base.chmod(0o755)
    env = dict(os.environ, EXAMPLE_DIR=str(base), EXAMPLE_PORT=str(port), CELLUCID_FS=str(cfs))
    log = open(tmp_path / "example.log", "wb")
    proc = subprocess.Popen(["bash", str(REPO / "setup.sh"), "serve-example"], env=env,
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    mnt = base / "mnt"
    try:
        deadline, body = time.monotonic() + 30, None
        while body is None and time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "example.log").read_text(errors="replace")
            try:
                status, length, body = get(f"http://127.0.0.1:{port}/datasets.json")
            except OSError:
                time.sleep(0.1)
        errors = base / "nginx" / "error.log"
        assert body is not None, ("nothing served within 30 s: " + (tmp_path / "example.log").read_text()
                                  + (errors.read_text() if errors.exists() else ""))
        assert status == 200 and int(length) == len(body)
        out = tmp_path / "out"
        r = run_cfs(cfs, "export", FIXTURES, out)
        assert r.returncode in (0, 2), r.stderr
        assert json.loads(body) == json.loads((out / "datasets.json").read_text())
        first = json.loads(body)["default"]
        status, length, meta = get(f"http://127.0.0.1:{port}/{first}.zarr/.zmetadata")
        assert meta == (out / f"{first}.zarr" / ".zmetadata").read_bytes()

        os.killpg(proc.pid, signal.SIGINT)     # what Ctrl-C in the terminal sends
        proc.wait(20)
        assert not mounted(mnt), "the mount was left behind after Ctrl-C"
        assert proc.returncode == 0, (proc.returncode, (tmp_path / "example.log").read_text())
        # the daemon (it leaves the session when it daemonizes; its command line names the
        # folder) and nginx's workers (in the session) exit right after: give them a moment
        deadline, left = time.monotonic() + 10, "?"
        while left and time.monotonic() < deadline:
            left = leftovers(proc.pid, base)
            time.sleep(0.1)
        assert not left, f"processes left behind: {left}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        subprocess.run(["pkill", "-KILL", "-s", str(proc.pid)], capture_output=True)
        subprocess.run(["pkill", "-KILL", "-f", str(base)], capture_output=True)
        if mounted(mnt):
            subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
        if not mounted(mnt):
            shutil.rmtree(base, ignore_errors=True)
        log.close()
