"""The package stage of `setup.sh test` (not part of make check: the build takes minutes): the
Debian package (debian/, README "Install") built once, as `dpkg-buildpackage -us -uc -b` on a
clean checkout, then checked and used.

Run it as setup.sh does:

    /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/debian_package.py

The checkout is the git tree's tracked files as they are in the work tree (`git stash create`,
else HEAD), unpacked by `git archive` into a temporary folder: nothing is built in, or written
to, the source tree. The package is then checked by lintian (no error) and `dpkg-deb -c` (the
files it must install), unpacked with `dpkg-deb -x` into a temporary root whose program runs
(--version, export) and whose mount helper, run as mount(8) runs it, mounts the bundled example
(read, then unmounted, leaving no process), and its systemd unit passes
`systemd-analyze verify`. Missing tools skip the stage with their names (Debian packages
dpkg-dev, debhelper, lintian, systemd).
"""

import os
import shutil
import subprocess

import anndata as ad
import pytest

from conftest import REPO, catalog_text, mounted, processes_of, read_catalog
from mount_helper import HelperMount, allow_other

EXAMPLE = REPO / "example"
BUILD_TIMEOUT = 3600


def run(args, cwd=None, env=None, timeout=600):
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def need(tool, package):
    if not shutil.which(tool):
        pytest.skip(f"{tool} is missing (Debian package {package})")


def source_tree():
    """The commit-ish of the clean checkout: the work tree's tracked files, else HEAD."""
    if run(["git", "-C", REPO, "rev-parse", "--git-dir"]).returncode != 0:
        pytest.skip(f"{REPO} is not a git checkout: the package is built from one")
    stash = run(["git", "-C", REPO, "stash", "create"]).stdout.strip()
    return stash or "HEAD"


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """(folder, version, deb path, .changes path) of the package built from a clean checkout."""
    need("dpkg-buildpackage", "dpkg-dev")
    need("dh", "debhelper")
    version = run(["dpkg-parsechangelog", "-l", REPO / "debian" / "changelog",
                   "-S", "Version"]).stdout.strip()
    upstream = version.rsplit("-", 1)[0]
    arch = run(["dpkg", "--print-architecture"]).stdout.strip()
    top = tmp_path_factory.mktemp("package")
    src = top / f"cellucid-fs-{upstream}"
    status_before = run(["git", "-C", REPO, "status", "--porcelain"]).stdout
    archive = subprocess.Popen(["git", "-C", str(REPO), "archive", f"--prefix={src.name}/",
                                source_tree()], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(top)], stdin=archive.stdout, check=True)
    assert archive.wait() == 0
    r = run(["dpkg-buildpackage", "-us", "-uc", "-b", "-J"], cwd=src, timeout=BUILD_TIMEOUT)
    (top / "build.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        pytest.fail(f"dpkg-buildpackage -us -uc -b failed (exit {r.returncode}):\n"
                    f"{(r.stdout + r.stderr)[-4000:]}", pytrace=False)
    assert run(["git", "-C", REPO, "status", "--porcelain"]).stdout == status_before
    deb = top / f"cellucid-fs_{version}_{arch}.deb"
    changes = top / f"cellucid-fs_{version}_{arch}.changes"
    assert deb.is_file() and changes.is_file(), sorted(p.name for p in top.iterdir())
    return top, version, deb, changes


@pytest.fixture(scope="module")
def root(package, tmp_path_factory):
    """The package unpacked with dpkg-deb -x."""
    d = tmp_path_factory.mktemp("root")
    r = run(["dpkg-deb", "-x", package[2], d])
    assert r.returncode == 0, r.stderr
    return d


def test_lintian_finds_no_error(package):
    need("lintian", "lintian")
    r = run(["lintian", "--fail-on", "error", "--display-info", package[3]])
    (package[0] / "lintian.log").write_text(r.stdout + r.stderr)
    errors = [line for line in r.stdout.splitlines() if line.startswith("E: ")]
    assert r.returncode == 0 and errors == [], r.stdout + r.stderr


# path -> the mode string dpkg-deb -c shows ("d" for a folder)
FILES = {
    "./usr/bin/cellucid-fs": "-rwxr-xr-x",
    "./usr/sbin/mount.cellucid-fs": "-rwxr-xr-x",
    "./usr/share/man/man1/cellucid-fs.1.gz": "-rw-r--r--",
    "./usr/share/man/man8/mount.cellucid-fs.8.gz": "-rw-r--r--",
    "./lib/systemd/system/cellucid-fs@.service": "-rw-r--r--",
    "./var/cache/cellucid-fs/": "drwxr-xr-x",
    "./usr/share/doc/cellucid-fs/examples/cellucid-fs.conf": "-rw-r--r--",
    "./usr/share/doc/cellucid-fs/examples/nginx-site.conf": "-rw-r--r--",
    "./usr/share/doc/cellucid-fs/copyright": "-rw-r--r--",
    "./usr/share/doc/cellucid-fs/changelog.gz": "-rw-r--r--",
    "./usr/share/doc/cellucid-fs/changelog.Debian.gz": "-rw-r--r--",
}


def test_package_holds_the_files_and_depends_on_fuse3(package):
    r = run(["dpkg-deb", "-c", package[2]])
    assert r.returncode == 0, r.stderr
    listed = {}
    for line in r.stdout.splitlines():
        mode, owner, _, _, _, path = line.split(None, 5)
        listed[path] = (mode, owner)
    for path, mode in FILES.items():
        assert listed.get(path) == (mode, "root/root"), (path, listed.get(path))
    depends = [d.strip() for d in run(["dpkg-deb", "-f", package[2], "Depends"]).stdout.split(",")]
    assert "fuse3" in depends and any(d.startswith("libfuse3-3") for d in depends), depends
    # a purge takes the caches mounts made with it
    assert "rm -rf /var/cache/cellucid-fs" in run(["dpkg-deb", "-I", package[2], "postrm"]).stdout


def test_readme_names_the_package_built(package):
    assert package[2].name in (REPO / "README.md").read_text()


def test_program_runs_and_names_the_package_version(package, root, tmp_path):
    cfs = root / "usr/bin/cellucid-fs"
    r = run([cfs, "--version"])
    assert r.returncode == 0 and r.stdout == f"cellucid-fs {package[1].rsplit('-', 1)[0]}\n", r
    r = run([cfs, "export", EXAMPLE / "pbmc.h5ad", tmp_path / "out"], timeout=300)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert (tmp_path / "out" / "datasets.json").read_text() == catalog_text(["pbmc"])
    a = ad.read_zarr(tmp_path / "out" / "pbmc.zarr")
    assert a.shape == ad.read_h5ad(EXAMPLE / "pbmc.h5ad").shape == (283, 914)


def test_mount_helper_mounts_the_example_then_unmounts(root, tmp_path):
    """As mount(8) runs it for the README's fstab line (plus nofail): the catalog is the
    export's, a store reads, and the unmount ends every process of the unpacked binary."""
    cfs, helper = root / "usr/bin/cellucid-fs", root / "usr/sbin/mount.cellucid-fs"
    # The installed helper runs the installed binary.
    r = run([helper, "/data", "/srv/zarr", "-f", "-v", "-o", "ro"],
            env={k: v for k, v in os.environ.items() if k != "CELLUCID_FS"})
    assert r.stderr == "mount.cellucid-fs: /usr/bin/cellucid-fs mount -o ro -- /data /srv/zarr\n"
    out = tmp_path / "out"
    assert run([cfs, "export", EXAMPLE, out], timeout=300).returncode == 0
    mnt = tmp_path / "mnt"
    options = ",".join(["ro"] + allow_other() + [f"cache_dir={tmp_path / 'cache'}", "nofail"])
    with HelperMount(helper, cfs, EXAMPLE, mnt, options) as m:
        assert read_catalog(mnt) == read_catalog(out)
        assert ad.read_zarr(mnt / "pbmc_loom.zarr").shape == (283, 914)
    assert m.problems == []
    assert not mounted(mnt) and processes_of(cfs) == []


# Settings that give a service a mount namespace of its own (systemd.exec(5)), where the mount
# would be made out of the web server's sight.
OWN_NAMESPACE = ("PrivateTmp", "PrivateDevices", "PrivateMounts", "ProtectSystem", "ProtectHome",
                 "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs",
                 "ProtectControlGroups", "ProtectProc", "ReadOnlyPaths", "ReadWritePaths",
                 "InaccessiblePaths", "TemporaryFileSystem", "BindPaths", "BindReadOnlyPaths",
                 "MountFlags", "RootDirectory", "RootImage", "DynamicUser")


def test_systemd_unit_mounts_where_the_web_server_sees_it(root):
    unit = (root / "lib/systemd/system/cellucid-fs@.service").read_text()
    assert "ExecStart=/usr/bin/cellucid-fs mount -f " in unit
    assert "EnvironmentFile=/etc/cellucid-fs/%i.conf" in unit
    keys = {line.split("=", 1)[0] for line in unit.splitlines() if "=" in line}
    assert keys.isdisjoint(OWN_NAMESPACE), keys & set(OWN_NAMESPACE)


def test_systemd_unit_verifies(root, tmp_path):
    """systemd-analyze verify on the unit as installed; its binary is the unpacked one, and its
    man pages are found in the unpacked root."""
    need("systemd-analyze", "systemd")
    unit = (root / "lib/systemd/system/cellucid-fs@.service").read_text()
    copy = tmp_path / "cellucid-fs@.service"
    copy.write_text(unit.replace("=/usr/bin/cellucid-fs ", f"={root}/usr/bin/cellucid-fs "))
    env = dict(os.environ, MANPATH=f"{root}/usr/share/man:")
    r = run(["systemd-analyze", "verify", copy], env=env)
    assert r.returncode == 0 and r.stdout + r.stderr == "", r.stdout + r.stderr
