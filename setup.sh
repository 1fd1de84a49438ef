#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine (as root) and runs cellucid-fs.
#   bash setup.sh test      install, build, run every test, then the sanitizer stages (ASan +
#                           UBSan, TSan: tests/run-sanitized) and the package stage (the Debian
#                           package built and used: tests/debian_package.py); ends with
#                           "N passed, N failed", every stage summed
#   bash setup.sh example   install, build, mount the bundled example (example/: 283 real PBMCs
#                           as pbmc.h5ad, pbmc_loom.loom and the Cell Ranger folder
#                           pbmc_cellranger/) and serve it on http://127.0.0.1:8000/ until Ctrl-C
#   bash setup.sh deps|build
#   bash setup.sh serve-example   the example's mount + serve only (what tests/test_setup.py
#                                 runs); EXAMPLE_DIR, EXAMPLE_PORT and CELLUCID_FS override the
#                                 folder, the port and the binary
set -euo pipefail
cd "$(dirname "$0")"

DEBIAN_PACKAGES=(
    build-essential autoconf automake pkg-config
    libhdf5-dev libjansson-dev libblosc-dev libzstd-dev liblz4-dev liblzf-dev zlib1g-dev libsqlite3-dev libfuse3-dev liblzma-dev libbz2-dev libzip-dev libcurl4-openssl-dev libssl-dev fuse3 nginx
    python3-anndata python3-zarr python3-h5py python3-loompy python3-numpy python3-pandas python3-scipy
    python3-pytest python3-hdf5plugin bitshuffle python3-numcodecs nodejs chromium
    clang libclang-rt-14-dev
)
# Only for the tests: a single-node Ceph cluster with a RADOS Gateway (tests/rgw.py), the S3
# server the object-storage export is tested against; R with SeuratObject, which writes some
# R objects at test time (R's native binary format, a 40,000-cell Seurat object, split layers)
# and reads them as the oracle (tests/test_rds.py).
# The package stage (tests/debian_package.py) builds the Debian package (debhelper), checks it
# with lintian and its unit with systemd-analyze (systemd).
TEST_DEBIAN_PACKAGES=(ceph-mon ceph-osd radosgw ceph-common r-base-core r-cran-seuratobject
    debhelper lintian systemd)

# Installs what of the Debian packages named (default DEBIAN_PACKAGES) is missing.
deps() {
    local missing=() wanted=("$@")
    [ ${#wanted[@]} -gt 0 ] || wanted=("${DEBIAN_PACKAGES[@]}")
    for p in "${wanted[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup.sh: missing Debian packages: ${missing[*]}; run as root or apt-get install them" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The npm packages of tests/test_js_clients.py (zarrita.js, playwright-core, esbuild), at the
# versions of tests/js/package-lock.json. Debian's nodejs has no npm (NodeSource's has it built in).
js_deps() {
    if ! command -v npm >/dev/null; then
        if [ "$(id -u)" -ne 0 ]; then
            echo "setup.sh: npm is missing; run as root or apt-get install npm" >&2
            exit 1
        fi
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null
    fi
    npm ci --prefix tests/js --no-audit --no-fund --loglevel=error
}

build() {
    [ -x configure ] || autoreconf -fi
    [ -f Makefile ] || ./configure -q PYTHON=/usr/bin/python3
    make -j"$(nproc)" -s
}

# The sanitizer builds: clang, out of tree in build-<kind>/, from a copy of the distributed
# sources (make distdir: a configured source tree takes no second, VPATH, configuration).
SANITIZE_asan='-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -g -O1'
SANITIZE_tsan='-fsanitize=thread -g -O1'

sanitized_build() {
    local kind=$1 flags
    eval "flags=\$SANITIZE_$kind"
    rm -rf "build-$kind"
    mkdir -p "build-$kind"
    make -s distdir distdir="build-$kind/src" >/dev/null
    (cd "build-$kind" && src/configure -q CC=clang CFLAGS="$flags" PYTHON=/usr/bin/python3 &&
        make -j"$(nproc)" -s cellucid-fs tests/unit/test_units) >"build-$kind.log" 2>&1 ||
        { tail -n 40 "build-$kind.log"; return 1; }
}

# The counts of a line "[label: ]N passed, N failed" of a log (0 1 when it has none).
counts() {
    local line
    line=$(grep -E "^$2[0-9]+ passed, [0-9]+ failed\$" "$1" | tail -n 1)
    [ -n "$line" ] || { echo "0 1"; return; }
    echo "$line" | sed -E 's/^[^0-9]*([0-9]+) passed, ([0-9]+) failed$/\1 \2/'
}

# tests/debian_package.py, then "package: N passed, N failed" from pytest's summary line (errors
# count as failures; a summary with no count at all, as one failure; skips as neither).
package_tests() {
    local log summary n p=0 f=0
    log=$(mktemp)
    PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m pytest -q -p no:cacheprovider \
        tests/debian_package.py 2>&1 | tee "$log" || true
    summary=$(tail -n 1 "$log")
    rm -f "$log"
    for n in $(echo "$summary" | grep -oE '[0-9]+ passed' | grep -oE '^[0-9]+'); do
        p=$((p + n))
    done
    for n in $(echo "$summary" | grep -oE '[0-9]+ (failed|errors?)' | grep -oE '^[0-9]+'); do
        f=$((f + n))
    done
    echo "$summary" | grep -qE '[0-9]+ (passed|failed|errors?|skipped)' || f=1
    echo "package: $p passed, $f failed"
    [ "$f" -eq 0 ]
}

run_tests() {
    local status=0 kind passed failed p f
    make -s -j"$(nproc)" check >/dev/null 2>&1 || status=$?
    cat tests/run-suite.log
    read -r passed failed < <(counts tests/run-suite.log '')
    # Then the sanitizer stages: a report from any sanitized process is a failure.
    for kind in asan tsan; do
        if sanitized_build "$kind"; then
            bash tests/run-sanitized "$kind" "build-$kind" 2>&1 | tee "tests/run-$kind.log" ||
                status=1
        else
            echo "$kind: 0 passed, 1 failed" | tee "tests/run-$kind.log"
            status=1
        fi
        read -r p f < <(counts "tests/run-$kind.log" "$kind: ")
        passed=$((passed + p)) failed=$((failed + f))
    done
    # Then the package stage: the Debian package built from a clean copy of the checkout.
    package_tests 2>&1 | tee tests/run-package.log || status=1
    read -r p f < <(counts tests/run-package.log "package: ")
    passed=$((passed + p)) failed=$((failed + f))
    # The summary of every stage is last so a reader of the tail sees it.
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ] || status=1
    return "$status"
}

example() {
    local base=${EXAMPLE_DIR:-/tmp/cellucid-fs-example}
    local port=${EXAMPLE_PORT:-8000}
    local mnt=$base/mnt
    mkdir -p "$mnt" "$base/nginx"
    if mountpoint -q "$mnt"; then fusermount3 -u "$mnt"; fi
    # allow_other: nginx's workers run as another user than the one mounting.
    "${CELLUCID_FS:-./cellucid-fs}" mount -o allow_other,cache_dir="$base/cache" \
        "$PWD/example" "$mnt"
    # Expanded now: at exit, this function's locals are gone (and set -u would stop the trap).
    trap "fusermount3 -u '$mnt'" EXIT
    cat >"$base/nginx/nginx.conf" <<NGINX
daemon off;
pid $base/nginx/nginx.pid;
error_log $base/nginx/error.log;
events {}
http {
    include /etc/nginx/mime.types;
    access_log off;
    server {
        listen 127.0.0.1:$port;
        root $mnt;
        sendfile on;
        autoindex off;
        # The CORS rules of the installed nginx site (README "Serving a mount"): a browser on
        # another origin sends a preflight for a Range it does not consider simple (bytes=-N).
$(sed -n '/^    location \/ {$/,/^    }$/p' system/nginx-site.conf)
    }
}
NGINX
    local url=http://127.0.0.1:$port
    cat <<EOF
Mounted example/ on $mnt; serving it on $url/
283 real PBMCs (10x Genomics' PBMC3k, from Debian's r-cran-sctransform) three ways: pbmc.h5ad,
pbmc_loom.loom and the Cell Ranger folder pbmc_cellranger/ (see example/README.md). Try:
  curl $url/datasets.json                          the catalog: pbmc, pbmc_cellranger, pbmc_loom
  curl $url/status.json                            every source, and the cache
  curl $url/pbmc.zarr/.zmetadata                   a store's consolidated metadata
  curl $url/pbmc_loom.zarr/.zmetadata
  curl $url/pbmc_cellranger.zarr/.zmetadata
  curl $url/pbmc.zarr/obs/cell_type/codes/.zarray  one obs column's array
  /usr/bin/python3 -c "import anndata; print(anndata.read_zarr('$mnt/pbmc.zarr'))"
  /usr/bin/python3 $PWD/example/read_over_http.py $url/pbmc.zarr   (zarr + anndata over HTTP)
Ctrl-C stops nginx and unmounts.
EOF
    nginx -p "$base/nginx" -c "$base/nginx/nginx.conf" || true
}

case "${1:-}" in
deps) deps; js_deps ;;
build) deps; build ;;
test) deps "${DEBIAN_PACKAGES[@]}" "${TEST_DEBIAN_PACKAGES[@]}"; js_deps; build; run_tests ;;
example) deps; build; example ;;
serve-example) example ;;
*) echo "usage: bash setup.sh test|example|deps|build|serve-example" >&2; exit 1 ;;
esac
