"""What `make install` adds for a server (system/, README "Install"), as built: mount(8)'s helper
mount.cellucid-fs, and the version every installed text names.

The helper is the build's: next to $CELLUCID_FS, where make writes it from
system/mount.cellucid-fs.in. It is run as mount(8) runs it (`mount.cellucid-fs SRC MNT [-sfnv]
-o OPTIONS`, with the option lists mount passes, as seen from a helper of util-linux 2.38's
mount): first with a stand-in binary that records its arguments, for what reaches cellucid-fs,
then for real on a copy of the bundled example. tests/debian_package.py (setup.sh test's package
stage) runs the helper of the built package.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import anndata as ad
import pytest

from conftest import REPO, catalog_text, mounted, processes_of, run_cfs
from mount_helper import HelperMount, allow_other, run_helper

EXAMPLE_H5AD = REPO / "example" / "pbmc.h5ad"


@pytest.fixture
def helper(cfs):
    p = Path(cfs).parent / "mount.cellucid-fs"
    if not os.access(p, os.X_OK):
        pytest.fail(f"{p} is missing: make builds it from system/mount.cellucid-fs.in",
                    pytrace=False)
    return p


@pytest.fixture
def recorder(tmp_path):
    """A stand-in for cellucid-fs that writes its arguments, one a line, to args.txt."""
    script = tmp_path / "record"
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {tmp_path}/args.txt\n")
    script.chmod(0o755)
    return script, tmp_path / "args.txt"


# (arguments as mount(8) gives them, the options that must reach `cellucid-fs mount -o`)
CASES = {
    # mount -t cellucid-fs SRC MNT: mount adds rw, which a read-only mount drops
    "no options": (["-o", "rw"], None),
    # the README's fstab line, with the options that are mount's own
    "fstab": (["-o", "ro,allow_other,cache_dir=/var/cache/cellucid-fs,nofail,noauto,_netdev,"
               "x-systemd.automount,x-systemd.mount-timeout=30,auto,defaults,comment=web"],
              "ro,allow_other,cache_dir=/var/cache/cellucid-fs"),
    # a line with `user`: mount adds noexec,nosuid,nodev, which libfuse takes
    "user line": (["-o", "ro,noexec,nosuid,nodev,allow_other,nofail,_netdev,user,users,owner,"
                   "group,nouser"], "ro,noexec,nosuid,nodev,allow_other"),
    # mount -s -n -v: flags of mount's, before the options
    "flags": (["-s", "-n", "-v", "-o", "rw,noatime"], "noatime"),
    "joined and repeated -o": (["-onoatime", "-o", "cache_size=2G"], "noatime,cache_size=2G"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_helper_passes_the_options_that_are_not_mounts(helper, recorder, case):
    script, args_file = recorder
    args, kept = CASES[case]
    r = run_helper(helper, script, "/da ta", "/srv/zarr", *args)
    assert r.returncode == 0, r.stderr
    want = ["mount"] + (["-o", kept] if kept else []) + ["--", "/da ta", "/srv/zarr"]
    assert args_file.read_text().splitlines() == want


def test_helper_fake_mounts_nothing_and_verbose_names_the_command(helper, recorder):
    script, args_file = recorder
    r = run_helper(helper, script, "/data", "/srv/zarr", "-f", "-v", "-o", "ro,nofail")
    assert r.returncode == 0, r.stderr
    assert not args_file.exists()
    assert r.stderr == f"mount.cellucid-fs: {script} mount -o ro -- /data /srv/zarr\n"


@pytest.mark.parametrize("args", [["/data"], ["/data", "/srv/zarr", "/x"],
                                  ["/data", "/srv/zarr", "-o"], ["/data", "/srv/zarr", "-x"]],
                         ids=["no MNT", "three paths", "-o without list", "unknown flag"])
def test_helper_usage_error_runs_nothing(helper, recorder, args):
    script, args_file = recorder
    r = run_helper(helper, script, *args)
    assert r.returncode == 1
    assert r.stderr.startswith("usage: mount.cellucid-fs SRC MNT"), r.stderr
    assert not args_file.exists()


def test_helper_fails_as_the_mount_fails(helper, cfs, tmp_path):
    """mount(8) reports the helper's status: a mount point that does not exist is cellucid-fs's
    status 1 and its message."""
    r = run_helper(helper, cfs, EXAMPLE_H5AD, tmp_path / "missing", "-o",
                   f"cache_dir={tmp_path / 'cache'}")
    assert r.returncode == 1
    assert "the mount point must be an existing folder" in r.stderr, r.stderr


def mount_entry(mnt):
    """(type, source, super options) of the mount on mnt in /proc/self/mountinfo, unescaped."""
    def plain(field):
        return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split(" - ")
        if plain(fields[0].split()[4]) == os.path.realpath(mnt):
            fstype, source, super_options = fields[1].split()
            return fstype, plain(source), super_options
    raise AssertionError(f"{mnt} is not mounted")


def test_helper_mounts_a_folder_that_is_read_then_unmounted(helper, cfs, tmp_path):
    """The README's fstab options (ro, allow_other, cache_dir, nofail) mount a folder read-only;
    its catalog and a store are read; the unmount ends every process."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copyfile(EXAMPLE_H5AD, src / "pbmc.h5ad")
    mnt = tmp_path / "mnt"
    options = ",".join(["ro"] + allow_other() + [f"cache_dir={tmp_path / 'cache'}", "nofail"])
    with HelperMount(helper, cfs, src, mnt, options) as m:
        assert processes_of(cfs), "no daemon in the background"
        fstype, source, super_options = mount_entry(mnt)
        assert fstype == "fuse.cellucid-fs" and "ro" in super_options.split(","), fstype
        assert source == os.path.realpath(src)
        assert (mnt / "datasets.json").read_text() == catalog_text(["pbmc"])
        a = ad.read_zarr(mnt / "pbmc.zarr")
        assert a.shape == ad.read_h5ad(EXAMPLE_H5AD).shape == (283, 914)
    assert m.problems == []
    assert not mounted(mnt)
    assert processes_of(cfs) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="mount --fstab (-T) is for root only")
def test_mount_a_finds_the_fstab_lines_folder_mounted(helper, cfs, tmp_path):
    """The mount's source is the folder (an fstab line's first field), whatever its name holds,
    so that mount -a, here of an fstab of the test's, leaves the line's mount alone."""
    src = tmp_path / "a source, with\\ odd names"
    src.mkdir()
    shutil.copyfile(EXAMPLE_H5AD, src / "pbmc.h5ad")
    mnt = tmp_path / "mnt"
    fstab = tmp_path / "fstab"
    fstab.write_text(f"{str(src).replace(' ', chr(92) + '040')} {mnt} cellucid-fs "
                     f"ro,cache_dir={tmp_path / 'cache'},nofail 0 0\n")
    with HelperMount(helper, cfs, src, mnt, f"ro,cache_dir={tmp_path / 'cache'}") as m:
        assert mount_entry(mnt)[1] == str(src)
        r = subprocess.run(["mount", "-a", "-v", "-T", str(fstab)], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0 and f"{mnt}" in r.stdout and "already mounted" in r.stdout, r
    assert m.problems == []


def ac_init_version():
    text = (REPO / "configure.ac").read_text()
    return re.search(r"^AC_INIT\(\[cellucid-fs\], \[([^]]+)\]", text, re.M).group(1)


def test_every_installed_text_names_the_version(cfs):
    """`cellucid-fs --version` (configure.ac's AC_INIT), the man pages and NEWS's newest entry
    name one version (the package's is checked by tests/debian_package.py)."""
    version = ac_init_version()
    r = run_cfs(cfs, "--version")
    assert r.returncode == 0 and r.stdout == f"cellucid-fs {version}\n", r.stdout
    for page in ("cellucid-fs.1", "mount.cellucid-fs.8"):
        th = (REPO / "man" / page).read_text().splitlines()[0]
        assert f'"cellucid-fs {version}"' in th, (page, th)
    newest = next(l for l in (REPO / "NEWS").read_text().splitlines() if l.startswith("* "))
    assert newest.split()[1] == version, newest
