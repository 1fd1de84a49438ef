"""The README's example command end to end: `bash setup.sh example` mounts the bundled example
(example/: real PBMCs as pbmc.h5ad, pbmc_loom.loom and the Cell Ranger folder pbmc_cellranger/)
and serves it with nginx until Ctrl-C, then unmounts. The test runs its mount + serve part
(`setup.sh serve-example`: the same function, without installing and building) with its own
folder, port and binary, reads the catalog and the stores over HTTP (example/read_over_http.py,
as the example tells its reader to), checks them against `cellucid-fs export` of the folder and
the example's own files, sends the process group a SIGINT as a terminal's Ctrl-C does, and
checks that the mount and every process are gone.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path


import anndata as ad
import numpy as np

from conftest import REPO, mounted, run_cfs
from nginx import free_port

EXAMPLE = REPO / "example"
# dataset id (of pbmc.h5ad, pbmc_cellranger/outs/, pbmc_loom.loom) -> its cluster column
DATASETS = {"pbmc": "louvain", "pbmc_cellranger": "graphclust", "pbmc_loom": "louvain"}
N_OBS, N_VARS, N_CLUSTERS = 283, 914, 6


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


def in_source_order(a):
    return a[np.argsort(a.obs["cellucid_original_position"].to_numpy())]


def test_example_exports_every_dataset_with_nothing_left_out(cfs, tmp_path):
    """Every source of the example is in datasets.json, with its embeddings and clusters, and
    `export` says nothing on stderr (no refusal, no left-out element, no rename)."""
    out = tmp_path / "out"
    r = run_cfs(cfs, "export", EXAMPLE, out)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    catalog = json.loads((out / "datasets.json").read_text())
    assert [d["id"] for d in catalog["datasets"]] == sorted(DATASETS)
    assert catalog["default"] == "pbmc"
    ref = ad.read_h5ad(EXAMPLE / "pbmc.h5ad")
    assert ref.shape == (N_OBS, N_VARS)
    for d in catalog["datasets"]:
        a = in_source_order(ad.read_zarr(out / d["path"]))
        clusters = DATASETS[d["id"]]
        assert a.shape == (N_OBS, N_VARS), d
        assert list(a.obs_names) == list(ref.obs_names), d
        assert {"X_umap", "X_tsne", "X_pca"} <= set(a.obsm), (d, list(a.obsm))
        np.testing.assert_allclose(a.obsm["X_umap"], ref.obsm["X_umap"], rtol=0, atol=1e-6)
        labels = a.obs[clusters].astype(str).to_numpy()
        assert len(set(labels)) == N_CLUSTERS, d
        # the same partition of the cells everywhere (Cell Ranger's labels are Seurat's + 1)
        shift = 1 if d["id"] == "pbmc_cellranger" else 0
        assert list(labels) == [str(int(x) + shift) for x in ref.obs["louvain"]], d
        counts = a.layers["counts"] if d["id"] == "pbmc" else a.X
        counts = counts.toarray() if hasattr(counts, "toarray") else np.asarray(counts)
        assert np.array_equal(counts, ref.layers["counts"].toarray()), d
    store = ad.read_zarr(out / "pbmc.zarr")
    assert store.obs["cell_type"].dtype == "category"
    assert len(store.uns["cell_type_colors"]) == len(store.obs["cell_type"].cat.categories)


def test_example_serves_the_example_and_unmounts_on_ctrl_c(cfs, tmp_path):
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
        r = run_cfs(cfs, "export", EXAMPLE, out)
        assert r.returncode == 0, r.stderr
        assert json.loads(body) == json.loads((out / "datasets.json").read_text())
        assert sorted(d["id"] for d in json.loads(body)["datasets"]) == sorted(DATASETS)
        for ident in DATASETS:
            status, length, meta = get(f"http://127.0.0.1:{port}/{ident}.zarr/.zmetadata")
            assert status == 200 and meta == (out / f"{ident}.zarr" / ".zmetadata").read_bytes()
        # the URLs and the commands the example prints work as printed
        printed = (tmp_path / "example.log").read_text()
        urls = re.findall(r"curl (http://\S+)", printed)
        assert len(urls) >= 5, printed
        for url in urls:
            status, length, data = get(url)
            assert status == 200 and int(length) == len(data) > 0, url
        reader = re.search(r"/usr/bin/python3 (\S+/read_over_http\.py) (\S+)", printed)
        assert reader, printed
        r = subprocess.run(["/usr/bin/python3", reader.group(1), reader.group(2)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        for expected in (f"n_obs × n_vars = {N_OBS} × {N_VARS}", "obsm: 'X_pca', 'X_tsne', 'X_umap'",
                         f"X: csc_matrix ({N_OBS}, {N_VARS}) float32", "obs['louvain']"):
            assert expected in r.stdout, (expected, r.stdout)
        one_liner = re.search(r'/usr/bin/python3 -c "(.+)"', printed)
        assert one_liner and str(mnt) in one_liner.group(1), printed
        r = subprocess.run(["/usr/bin/python3", "-c", one_liner.group(1)], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0 and f"n_obs × n_vars = {N_OBS} × {N_VARS}" in r.stdout, r.stderr

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
