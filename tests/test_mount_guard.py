"""One daemon per mount point and per cache folder (fuse/guard.c):

- `mount` on a folder that is already a mount point refuses, with one line, and the mount
  already there keeps serving;
- a second daemon on a cache folder in use refuses, naming the holder's pid;
- the lock of a daemon killed with kill -9 is taken over by the next mount of that cache.
"""
import os
import signal
import subprocess

from conftest import FIXTURES_DIR, describe, mounted, run_cfs

SRC = FIXTURES_DIR / "h5ad"


def test_mount_on_a_mount_point_is_refused(cfs, mounts, tmp_path):
    m = mounts(SRC)
    r = run_cfs(cfs, "mount", "-f", "-o", f"cache_dir={tmp_path / 'other-cache'}", SRC, m.mnt,
                timeout=30)
    assert r.returncode == 1, describe(r)
    lines = [l for l in r.stderr.splitlines() if l.startswith("cellucid-fs:")]
    assert lines == [f"cellucid-fs: {m.mnt} is already a mount point; unmount it first "
                     f"(fusermount3 -u {m.mnt}) or mount elsewhere"], r.stderr
    assert (m.mnt / "datasets.json").read_text().startswith("{")


def test_second_daemon_on_a_cache_in_use_is_refused(cfs, mounts, tmp_path):
    cache = tmp_path / "cache"
    m = mounts(SRC, cache=cache)
    other = tmp_path / "mnt-other"
    other.mkdir()
    r = run_cfs(cfs, "mount", "-f", "-o", f"cache_dir={cache}", SRC, other, timeout=30)
    assert r.returncode == 1, describe(r)
    assert f"the cache folder {cache} is in use by another cellucid-fs mount (pid {m.proc.pid})" \
        in r.stderr, r.stderr
    assert "-o cache_dir=DIR" in r.stderr
    assert not mounted(other)
    assert (cache / "lock").read_text().strip() == str(m.proc.pid)


def test_lock_of_a_killed_daemon_is_taken_over(cfs, mounts, tmp_path):
    cache = tmp_path / "cache"
    m = mounts(SRC, cache=cache)
    os.kill(m.proc.pid, signal.SIGKILL)
    m.proc.wait(10)
    m.proc = None                                  # gone: nothing left to stop
    subprocess.run(["fusermount3", "-uz", str(m.mnt)], capture_output=True)
    m2 = mounts(SRC, cache=cache)
    assert (m2.mnt / "datasets.json").exists()
    assert (cache / "lock").read_text().strip() == str(m2.proc.pid)
