#!/usr/bin/env bash
# Dependencies for machines without a package registry (air-gapped clusters, the lent GPU machine:
# Ubuntu 24.04 with CUDA, g++, CMake, OpenMPI, GoogleTest, CLI11, nlohmann-json and OpenBLAS, but
# no oneDNN and no ICU headers). Two steps:
#
#   bash scripts/offline_deps.sh fetch DIR     on a Debian machine with apt: downloads the .deb
#                                              files below (and nothing else) into DIR
#   LONGSEQ_DEPS=DIR bash scripts/build.sh     anywhere: unpacks DIR/*.deb into DIR/prefix (no
#                                              root, no dpkg database: dpkg-deb -x) and builds
#                                              against that prefix; the binaries find the
#                                              libraries there through their RPATH
#
#   bash scripts/offline_deps.sh unpack DIR    the unpacking alone (build.sh calls it); prints the
#                                              prefix
# The packages are Debian 12's: oneDNN 2.6 (the GEMM library) and ICU 72 (the tokenizer), with the
# OpenCL loader that Debian's oneDNN links (libOpenCL.so.1; a CUDA image need not have it). Their
# other dependencies (libc, libstdc++, libgomp) are on every Linux that runs g++ 12 or later.
# DLPack's header, and pybind11 2.10 (its headers and CMake package) for a Python that has no
# pybind11 of its own, build the Python package there (header-only: the module is built for that
# machine's own Python; CMakeLists.txt prefers the interpreter's pybind11, which the lent GPU
# machine's Python 3.12 needs).
set -euo pipefail
PACKAGES=(libdnnl-dev libdnnl2 ocl-icd-libopencl1 libicu-dev libicu72 icu-devtools pybind11-dev
  libdlpack-dev)

usage() {
  sed -n '2,21p' "$0" >&2
  exit 2
}
[ $# -eq 2 ] || usage
cmd=$1
dir=$2

case "$cmd" in
  fetch)
    command -v apt-get >/dev/null || { echo "[deps] fetch needs apt-get (a Debian machine)" >&2; exit 1; }
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    # apt-get download needs the package lists; update them once when they are missing.
    if ! apt-cache show "${PACKAGES[0]}" >/dev/null 2>&1; then
      SUDO=""
      [ "$(id -u)" -eq 0 ] || SUDO=sudo
      $SUDO apt-get update -qq
    fi
    (cd "$dir" && apt-get download "${PACKAGES[@]}" >/dev/null)
    n=$(find "$dir" -maxdepth 1 -name '*.deb' | wc -l)
    [ "$n" -ge ${#PACKAGES[@]} ] || { echo "[deps] expected ${#PACKAGES[@]} .deb files in $dir, found $n" >&2; exit 1; }
    echo "[deps] $n packages in $dir: copy the folder to the target machine, then"
    echo "       LONGSEQ_DEPS=$dir bash scripts/build.sh"
    ;;
  unpack)
    [ -d "$dir" ] || { echo "[deps] LONGSEQ_DEPS=$dir is not a directory" >&2; exit 1; }
    dir=$(cd "$dir" && pwd)
    command -v dpkg-deb >/dev/null || { echo "[deps] dpkg-deb not found (Debian and Ubuntu have it)" >&2; exit 1; }
    prefix=$dir/prefix
    stamp=$prefix/.unpacked
    debs=("$dir"/*.deb)
    [ -e "${debs[0]}" ] || { echo "[deps] no .deb files in $dir (run: bash scripts/offline_deps.sh fetch $dir on a Debian machine)" >&2; exit 1; }
    for p in "${PACKAGES[@]}"; do
      compgen -G "$dir/${p}_*.deb" >/dev/null || { echo "[deps] $dir lacks ${p}_*.deb" >&2; exit 1; }
    done
    # Unpack again only when the set of .deb files changed.
    want=$(ls -1 "$dir"/*.deb | xargs -n1 basename | sort | tr '\n' ' ')
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
      rm -rf "$prefix"
      mkdir -p "$prefix"
      for d in "${debs[@]}"; do dpkg-deb -x "$d" "$prefix"; done
      echo "$want" > "$stamp"
    fi
    echo "$prefix"
    ;;
  *) usage ;;
esac
