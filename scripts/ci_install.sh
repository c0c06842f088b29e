#!/usr/bin/env bash
# The installed package works: `cmake --install` the build into a temporary prefix, run the
# installed `longseq train` from outside the repository (it finds its presets and corpus under
# <prefix>/share/longseq), and build and run examples/consumer against find_package(longseq).
# Run by scripts/test.sh after the build; about half a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$BUILD_DIR" --prefix "$tmp/prefix" >/dev/null
(cd / && env -u LONGSEQ_DATA_DIR "$tmp/prefix/bin/longseq" train --preset tiny --steps 1 --seq 64 \
   --threads 1 --quiet --out "$tmp/run") || { echo "[ci_install] installed longseq train failed" >&2; exit 1; }
test -f "$tmp/run/metrics.json" || { echo "[ci_install] no metrics.json from the installed binary" >&2; exit 1; }
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
cmake -S examples/consumer -B "$tmp/consumer" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
(cd / && env -u LONGSEQ_DATA_DIR "$tmp/consumer/consumer")
echo "[ci_install] install, installed longseq train and examples/consumer: ok"
