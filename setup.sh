#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine (as root) and runs cellucid-fs.
#   bash setup.sh test      install, build, run every test (ends with "N passed, N failed")
#   bash setup.sh example   install, build, export the bundled example and serve it on
#                           http://127.0.0.1:8000/ until Ctrl-C
#   bash setup.sh deps|build
set -euo pipefail
cd "$(dirname "$0")"

DEBIAN_PACKAGES=(
    build-essential autoconf automake pkg-config
    libhdf5-dev libjansson-dev libblosc-dev libzstd-dev zlib1g-dev libsqlite3-dev libfuse3-dev fuse3
    python3-anndata python3-zarr python3-h5py python3-numpy python3-pandas python3-scipy
    python3-pytest
)

deps() {
    local missing=()
    for p in "${DEBIAN_PACKAGES[@]}"; do
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

build() {
    [ -x configure ] || autoreconf -fi
    [ -f Makefile ] || ./configure -q PYTHON=/usr/bin/python3
    make -j"$(nproc)" -s
}

run_tests() {
    local status=0
    make -s -j"$(nproc)" check >/dev/null 2>&1 || status=$?
    cat tests/run-suite.log
    # The summary is repeated last so a reader of the tail sees it.
    grep -E '^[0-9]+ passed, [0-9]+ failed$' tests/run-suite.log | tail -n 1 ||
        echo "0 passed, 1 failed"
    return "$status"
}

example() {
    local out=${EXAMPLE_OUT:-/tmp/cellucid-fs-example}
    ./cellucid-fs export --force tests/fixtures/h5ad/raw_layers.h5ad "$out"
    ./cellucid-fs inspect tests/fixtures/h5ad/raw_layers.h5ad
    echo "Serving $out on http://127.0.0.1:8000/ (datasets.json lists the store); Ctrl-C stops."
    exec /usr/bin/python3 -m http.server --bind 127.0.0.1 --directory "$out" 8000
}

case "${1:-}" in
deps) deps ;;
build) deps; build ;;
test) deps; build; run_tests ;;
example) deps; build; example ;;
*) echo "usage: bash setup.sh test|example|deps|build" >&2; exit 1 ;;
esac
