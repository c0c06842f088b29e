#!/usr/bin/env bash
# Configures and builds longseq in ./build (Release). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
# ccache, where installed, lets several work trees of one checkout share compiled objects.
if command -v ccache >/dev/null && [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(cd .. && pwd)}"
fi
# LONGSEQ_DEPS=DIR: build against the Debian packages in DIR (scripts/offline_deps.sh), for
# machines without a package registry.
DEPS=()
if [ -n "${LONGSEQ_DEPS:-}" ]; then
  prefix=$(bash scripts/offline_deps.sh unpack "$LONGSEQ_DEPS")
  # --disable-new-dtags: the binaries' search path as DT_RPATH, which the loader also uses for
  # the libraries' own dependencies (libicuuc.so.72 -> libicudata.so.72, libdnnl.so.2 ->
  # libOpenCL.so.1); a DT_RUNPATH covers only the executable's direct ones, and a machine with
  # another ICU (Ubuntu 24.04: 74) then fails to start `longseq` (seen on the lent H200).
  DEPS=(-DCMAKE_PREFIX_PATH="$prefix/usr" -DICU_ROOT="$prefix/usr"
    -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags
    -DCMAKE_SHARED_LINKER_FLAGS=-Wl,--disable-new-dtags)
  echo "[build] dependencies from $prefix"
fi
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release "${DEPS[@]}" "$@"
elif [ $# -gt 0 ] || [ ${#DEPS[@]} -gt 0 ]; then
  cmake -S . -B "$BUILD_DIR" "${DEPS[@]}" "$@"
fi
# BUILD_TARGETS="a b": build only those targets (scripts/gpu_check.sh: what a GPU check runs).
TARGETS=()
for t in ${BUILD_TARGETS:-}; do TARGETS+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$(nproc)" "${TARGETS[@]}"
