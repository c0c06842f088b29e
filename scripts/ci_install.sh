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
# The Python package: where `cmake --install` put it (it finds the data under <prefix>/share),
# and `pip install --no-build-isolation .` into a fresh venv (docs/python.md), reusing this
# build's objects (LONGSEQ_PIP_BUILD_DIR), imported from outside the repository.
if [ -f "$BUILD_DIR/python/longseq/__init__.py" ]; then
  site=$(grep -E '^LONGSEQ_PYTHON_INSTALL_DIR' "$BUILD_DIR/CMakeCache.txt" | cut -d= -f2)
  check='import longseq, torch; assert longseq.info()["version"] == longseq.__version__; \
o = longseq.torch.attention(*[torch.randn(9, 2, 4) for _ in range(3)], mask="causal"); \
assert o.shape == (9, 2, 4); import os; print(os.path.dirname(longseq.__file__), \
os.path.exists(longseq.data_file("presets/tiny.json")))'
  (cd / && env -u LONGSEQ_DATA_DIR PYTHONPATH="$tmp/prefix/$site" /usr/bin/python3 -c "import longseq.torch; $check") \
    | grep -q "^$tmp/prefix/.* True$" || { echo "[ci_install] the installed Python package failed" >&2; exit 1; }
  /usr/bin/python3 -m venv --system-site-packages "$tmp/venv"
  LONGSEQ_PIP_BUILD_DIR="$PWD/$BUILD_DIR" "$tmp/venv/bin/pip" install --no-build-isolation \
    --no-index -q . >"$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log" >&2; echo "[ci_install] pip install failed" >&2; exit 1; }
  (cd / && env -u LONGSEQ_DATA_DIR "$tmp/venv/bin/python" -c "import longseq.torch; $check") \
    | grep -q "^$tmp/venv/.* True$" || { echo "[ci_install] the pip-installed package failed" >&2; exit 1; }
  echo "[ci_install] the Python package: cmake --install and pip install into a venv: ok"
fi
echo "[ci_install] install, installed longseq train and examples/consumer: ok"
