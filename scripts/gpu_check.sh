#!/usr/bin/env bash
# Everything a GPU machine checks, in one call (docs/gpu.md, design.md §10):
#   bash scripts/gpu_check.sh OUTDIR
# builds with CUDA required (LONGSEQ_CUDA=ON; dependencies from LONGSEQ_DEPS=DIR where the
# machine has no package registry: scripts/offline_deps.sh), runs the `cuda` test label and the
# GPU benchmarks (bench/cuda_*_bench: cuda_kernels_bench), and writes under OUTDIR: info.txt
# (longseq info: CPU, variants, CUDA runtime/driver, GPUs), nvidia-smi.txt, ctest_cuda.xml (JUnit) and
# ctest_cuda.txt, one JSON per benchmark, and summary.txt (one screen). Exits non-zero when a
# cuda test failed or no GPU was visible (skipped tests on a GPU machine are a failure here).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: bash scripts/gpu_check.sh OUTDIR" >&2; exit 2; }
out=$1
mkdir -p "$out"
out=$(cd "$out" && pwd)
BUILD_DIR=${BUILD_DIR:-build-gpu}
# Only what this script runs (the CLI for `info`, the cuda tests, the GPU benchmarks): the GPU
# machine's minutes are few, and CI compiles everything else. BUILD_TARGETS= (empty) builds all.
BUILD_TARGETS=${BUILD_TARGETS-longseq test_cuda cuda_kernels_bench}
export BUILD_DIR BUILD_TARGETS
t0=$(date +%s)
bash scripts/build.sh -DLONGSEQ_CUDA=ON -DLONGSEQ_BUILD_BENCH=ON > "$out/build.txt" 2>&1 || {
  tail -30 "$out/build.txt" >&2
  echo "[gpu_check] build failed (log: $out/build.txt)" >&2
  exit 1
}
t1=$(date +%s)
"$BUILD_DIR/cli/longseq" info > "$out/info.txt" 2>&1 || true
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || echo "nvidia-smi not found" > "$out/nvidia-smi.txt"
rc=0
ctest --test-dir "$BUILD_DIR" -L cuda --output-on-failure --output-junit "$out/ctest_cuda.xml" \
  > "$out/ctest_cuda.txt" 2>&1 || rc=1
t2=$(date +%s)
benches=()
for b in "$BUILD_DIR"/bench/cuda_*_bench; do
  [ -x "$b" ] || continue
  name=$(basename "$b")
  "$b" --out "$out/$name.json" > "$out/$name.txt" 2>&1 || rc=1
  benches+=("$name")
done
skipped=$(grep -c 'Skipped' "$out/ctest_cuda.txt" || true)
{
  echo "gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ): build $((t1 - t0)) s, tests $((t2 - t1)) s, benchmarks $(( $(date +%s) - t2 )) s"
  grep -E '^  (cpu|kernel variant|cuda|  gpu)' "$out/info.txt" || true
  grep -E 'tests passed|tests failed' "$out/ctest_cuda.txt" || true
  echo "skipped cuda tests: $skipped"
  echo "benchmarks: ${benches[*]:-none yet}"
} > "$out/summary.txt"
cat "$out/summary.txt"
if ! grep -q '    gpu 0:' "$out/info.txt"; then
  echo "[gpu_check] no GPU visible (see $out/info.txt): the cuda tests only skipped" >&2
  exit 1
fi
[ "$skipped" -eq 0 ] || { echo "[gpu_check] $skipped cuda tests skipped on a GPU machine" >&2; rc=1; }
exit $rc
