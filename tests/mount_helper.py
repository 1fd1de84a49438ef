"""Mounts through mount.cellucid-fs, run as mount(8) runs it (`mount.cellucid-fs SRC MNT -o
OPTIONS`), for tests/test_install.py (the build's helper) and tests/debian_package.py (the
helper of the built package). The helper runs the binary named by CELLUCID_FS, which leaves its
daemon in the background: the daemon and its readers are found by their executable.
"""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import EXIT_TIMEOUT, mounted, processes_of


def allow_other():
    """["allow_other"] (the README's fstab line has it) where this user may use it: root, or
    with user_allow_other in /etc/fuse.conf."""
    if os.geteuid() == 0:
        return ["allow_other"]
    try:
        conf = Path("/etc/fuse.conf").read_text()
    except OSError:
        return []
    return ["allow_other"] if re.search(r"^\s*user_allow_other\b", conf, re.M) else []


def run_helper(helper, cfs, *args, timeout=120):
    """The helper run with args, CELLUCID_FS naming the binary it runs."""
    env = dict(os.environ, CELLUCID_FS=str(cfs))
    return subprocess.run([str(helper), *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=timeout)


class HelperMount:
    """`with HelperMount(helper, cfs, src, mnt, options) as m:` mounts src on mnt through the
    helper; leaving the block unmounts (fusermount3 -u, lazily if need be), waits for every
    process of cfs to end and kills what is left, whatever happened inside. m.problems then lists
    what went wrong on the way out (a forced unmount, a process left), for the test to assert."""

    def __init__(self, helper, cfs, src, mnt, options):
        self.helper, self.cfs, self.src, self.mnt = helper, Path(cfs), src, Path(mnt)
        self.options = options
        self.problems = []

    def __enter__(self):
        if not os.path.exists("/dev/fuse"):
            pytest.fail("mounting needs /dev/fuse and fusermount3 (Debian package fuse3)",
                        pytrace=False)
        self.mnt.mkdir(parents=True, exist_ok=True)
        r = run_helper(self.helper, self.cfs, self.src, self.mnt, "-o", self.options)
        if r.returncode != 0 or not mounted(self.mnt):
            self.__exit__(None, None, None)
            pytest.fail(f"{self.helper} {self.src} {self.mnt} -o {self.options}: exit "
                        f"{r.returncode}, mounted: {mounted(self.mnt)}\n{r.stderr}", pytrace=False)
        return self

    def __exit__(self, *exc):
        if mounted(self.mnt):
            r = subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True, text=True)
            if r.returncode != 0:
                self.problems.append(f"fusermount3 -u: {r.stderr.strip()}")
                subprocess.run(["fusermount3", "-uz", str(self.mnt)], capture_output=True)
        deadline = time.monotonic() + EXIT_TIMEOUT
        while processes_of(self.cfs) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = processes_of(self.cfs)
        if left:
            self.problems.append(f"processes of {self.cfs} still running {EXIT_TIMEOUT:g} s "
                                 f"after the unmount: {left}")
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if mounted(self.mnt):
            self.problems.append(f"{self.mnt} is still mounted")
            subprocess.run(["fusermount3", "-uz", str(self.mnt)], capture_output=True)
        return False
