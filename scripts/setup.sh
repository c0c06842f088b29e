#!/usr/bin/env bash
# Installs every dependency of longseq from Debian packages. Idempotent: packages already present
# are not fetched again and `apt-get update` runs at most once per invocation (and not at all when
# nothing is missing).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git clang-format
  libopenblas-dev libdnnl-dev
  libopenmpi-dev openmpi-bin
  libgtest-dev googletest libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libicu-dev
  python3 python3-numpy python3-torch
  # The Python package (python/, docs/python.md): pybind11 and DLPack's header for the module,
  # Python's headers, pytest and hypothesis for its tests, venv + setuptools + wheel for
  # `pip install --no-build-isolation .`.
  python3-dev pybind11-dev python3-pybind11 libdlpack-dev python3-pytest python3-hypothesis
  python3-venv python3-pip python3-setuptools python3-wheel
  bible-kjv
  iproute2 util-linux
  # strace: the checkpoint directory's fsync is read from the binary's system calls (tests/train).
  strace
  # Fuzzing and sanitizer builds (scripts/ci_fuzz.sh, ci_sanitize.sh): Debian's clang; its
  # libFuzzer (-fsanitize=fuzzer) and sanitizer runtimes are libclang-rt-dev (Debian's
  # libfuzzer-NN-dev is the stand-alone libFuzzer.a, not needed here); libomp-dev: OpenMP for clang.
  clang libclang-rt-dev libomp-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "[setup] all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "[setup] installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "[setup] done"
