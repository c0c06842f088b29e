#!/usr/bin/env bash
# Everything a GPU machine checks, in one call (docs/gpu.md, design.md §10):
#   bash scripts/gpu_check.sh OUTDIR
# builds with CUDA required (LONGSEQ_CUDA=ON; dependencies from LONGSEQ_DEPS=DIR where the
# machine has no package registry: scripts/offline_deps.sh), runs the `cuda` test label and the
# GPU benchmarks (bench/cuda_*_bench: cuda_kernels_bench, cuda_attention_bench) with PyTorch
# timing the same operations on the same GPU (bench/cuda_kernels_torch.py: the kernels;
# bench/cuda_attention_torch.py: SDPA's flash and cuDNN backends on the attention bench's shapes;
# both with $TORCH_PYTHON, default python3; skipped with a note where torch or its GPU is missing),
# and writes under OUTDIR: info.txt (longseq info: CPU, variants, CUDA runtime/driver, GPUs),
# nvidia-smi.txt, ctest_cuda.xml (JUnit) and ctest_cuda.txt, one JSON per benchmark,
# local-cuda.json (the GPU's hardware profile, calibrate --device cuda),
# torch_kernels.json, cuda_attention_torch.json, compare.json / compare.txt (ours vs PyTorch and
# the bandwidth floor, per kernel), attention_compare.json / .txt (ours vs SDPA's flash and cuDNN
# backends, per shape), test_cuda.json with errors.json / errors.txt (each kernel's measured error
# against its fp64 twin) and summary.txt (one screen). Exits non-zero when a cuda test or
# a benchmark failed or no GPU was visible (skipped tests on a GPU machine are a failure here).
# Time on the lent H200 (16 cores, 2026-11-26): build of these targets 38 s (niced, beside the
# tests), tests 10 s, benchmarks and PyTorch scripts ~100 s; each benchmark and PyTorch script is
# capped (GPU_CHECK_BENCH_S, default 90 s each), so the whole stays inside one device call.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: bash scripts/gpu_check.sh OUTDIR" >&2; exit 2; }
out=$1
mkdir -p "$out"
out=$(cd "$out" && pwd)
BUILD_DIR=${BUILD_DIR:-build-gpu}
# Only what this script runs (the CLI for `info`, the cuda tests, the GPU benchmarks): the GPU
# machine's minutes are few, and CI compiles everything else. BUILD_TARGETS= (empty) builds all.
BUILD_TARGETS=${BUILD_TARGETS-longseq test_cuda cuda_kernels_bench cuda_attention_bench}
export BUILD_DIR BUILD_TARGETS
t0=$(date +%s)
# The Python package has its own, optional build below (a failure there must not cost this pass).
bash scripts/build.sh -DLONGSEQ_CUDA=ON -DLONGSEQ_BUILD_BENCH=ON -DLONGSEQ_PYTHON=OFF \
  > "$out/build.txt" 2>&1 || {
  tail -30 "$out/build.txt" >&2
  echo "[gpu_check] build failed (log: $out/build.txt)" >&2
  exit 1
}
t1=$(date +%s)
info_rc=0
"$BUILD_DIR/cli/longseq" info > "$out/info.txt" 2>&1 || info_rc=$?
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || echo "nvidia-smi not found" > "$out/nvidia-smi.txt"
rc=0
# Several test processes share the GPU (each takes well under 1 GiB; the out-of-memory test asks
# for 4x the card and gets nothing): one CUDA context start each is most of a test's time.
ctest --test-dir "$BUILD_DIR" -L cuda -j "${GPU_CHECK_TEST_JOBS:-8}" --timeout 120 --output-on-failure \
  --output-junit "$out/ctest_cuda.xml" > "$out/ctest_cuda.txt" 2>&1 || rc=1
# The same tests once more in one process (~10 s), for the errors they record against the fp64
# twins (ctest's JUnit drops gtest's properties): errors.json / errors.txt, one row per kernel
# output with its worst relative L2 and absolute error over the cases.
TORCH_PYTHON=${TORCH_PYTHON:-python3}
"$BUILD_DIR/tests/test_cuda" --gtest_brief=1 --gtest_output="json:$out/test_cuda.json" \
  > "$out/test_cuda.txt" 2>&1 || rc=1
"$TORCH_PYTHON" bench/cuda_test_errors.py "$out/test_cuda.json" --out "$out/errors.json" \
  --text "$out/errors.txt" > /dev/null 2>&1 || echo "[gpu_check] error table failed" >&2
# The Python package's CUDA tensors (tests/python/test_cuda.py, docs/python.md "GPUs") with
# $TORCH_PYTHON's torch, in a build of its own for that interpreter (pybind11 the interpreter's,
# else from LONGSEQ_DEPS); GPU_CHECK_PYTHON=0 leaves it out. Never fails the check: its outcome
# is python_cuda.txt and the summary line. GPU_CHECK_PYTHON_BUILD_S caps its build (default
# 180 s), GPU_CHECK_PYTHON_TEST_S its tests (default 150 s: two of them start processes that
# import torch and open CUDA and NCCL). It comes before the benchmarks, so that a deadline
# cutting the pass (scripts/gpu_lease.sh) cuts timings, not the first run of a correctness check.
python_cuda="not run"
if [ "${GPU_CHECK_PYTHON:-1}" = 1 ]; then
  py=$(command -v "$TORCH_PYTHON" || true)
  if [ -n "$py" ] && "$py" -c "import torch, pytest" > /dev/null 2>&1; then
    # Its build compiles the CUDA kernels once more, for the module (the main build above took
    # 43 s on the H200; this one has not been timed there).
    if BUILD_DIR=build-gpu-python BUILD_TARGETS=longseq_python \
        timeout "${GPU_CHECK_PYTHON_BUILD_S:-180}" bash scripts/build.sh \
        -DLONGSEQ_CUDA=ON -DLONGSEQ_PYTHON=ON -DLONGSEQ_BUILD_TESTS=OFF -DLONGSEQ_BUILD_BENCH=OFF \
        -DPython3_EXECUTABLE="$py" > "$out/python_cuda.txt" 2>&1; then
      # test_cuda.py opens an MPI world of 1 without mpirun (root on the lent machine).
      py_rc=0
      (cd tests/python && PYTHONPATH="$PWD/../../build-gpu-python/python" \
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        timeout "${GPU_CHECK_PYTHON_TEST_S:-150}" "$py" -m pytest \
        -q -p no:cacheprovider --durations=10 test_cuda.py) >> "$out/python_cuda.txt" 2>&1 || py_rc=$?
      # pytest's 5 is "no tests collected": the file skipped itself whole (torch sees no GPU, or
      # the module was built without CUDA), which is not a pass on a GPU machine either.
      case $py_rc in
        0) python_cuda="passed" ;;
        5) python_cuda="NOT RUN (test_cuda.py skipped itself: torch sees no GPU or no CUDA build)" ;;
        124) python_cuda="CUT at ${GPU_CHECK_PYTHON_TEST_S:-150} s (GPU_CHECK_PYTHON_TEST_S)" ;;
        *) python_cuda="FAILED (pytest exit status $py_rc)" ;;
      esac
      python_cuda="$python_cuda: $(grep -E '[0-9]+ (passed|failed|skipped)' "$out/python_cuda.txt" | tail -1)"
    else
      python_cuda="build failed (python_cuda.txt)"
    fi
  else
    python_cuda="skipped: $TORCH_PYTHON cannot import torch and pytest"
  fi
fi
t2=$(date +%s)
benches=()
# Each benchmark is capped (timeout) so that the whole check stays inside the GPU machine's
# minutes; a capped run keeps the JSON rows it wrote so far (the attention bench writes after
# every row). GPU_CHECK_BENCH_S overrides the cap (seconds).
cap=${GPU_CHECK_BENCH_S:-90}
for b in "$BUILD_DIR"/bench/cuda_*_bench; do
  [ -x "$b" ] || continue
  name=$(basename "$b")
  args=()
  # The sliding window at 1M tokens (issue "GPU II"; ~64 GB of device memory, a few seconds):
  # GPU_CHECK_MILLION=0 leaves it out on smaller GPUs.
  [ "$name" = cuda_attention_bench ] && [ "${GPU_CHECK_MILLION:-1}" = 1 ] && args+=(--million)
  timeout "$cap" "$b" --out "$out/$name.json" "${args[@]}" > "$out/$name.txt" 2>&1 || rc=1
  benches+=("$name")
done
# PyTorch on the same GPU: the kernels compared with cuda_kernels_bench, and the attention
# bench's shapes through SDPA's flash and cuDNN backends (a missing torch is noted, not failed).
if [ -f "$out/cuda_kernels_bench.json" ]; then
  timeout "$cap" "$TORCH_PYTHON" bench/cuda_kernels_torch.py --out "$out/torch_kernels.json" \
    --ours "$out/cuda_kernels_bench.json" --compare "$out/compare.json" \
    > "$out/torch_kernels.txt" 2>&1 || { echo "[gpu_check] PyTorch comparison failed" >&2; rc=1; }
fi
if "$TORCH_PYTHON" -c "import torch" > /dev/null 2>&1; then
  timeout "$cap" "$TORCH_PYTHON" bench/cuda_attention_torch.py --out "$out/cuda_attention_torch.json" \
    > "$out/cuda_attention_torch.txt" 2>&1 ||
    echo "[gpu_check] torch attention baseline failed or was cut (see $out/cuda_attention_torch.txt)" >&2
  benches+=("cuda_attention_torch")
fi
if [ -f "$out/cuda_attention_bench.json" ]; then
  "$TORCH_PYTHON" bench/cuda_attention_compare.py "$out/cuda_attention_bench.json" \
    "$out/cuda_attention_torch.json" --out "$out/attention_compare.json" \
    --text "$out/attention_compare.txt" > /dev/null 2>&1 ||
    echo "[gpu_check] attention comparison failed" >&2
fi
# The GPU's profile (`longseq calibrate --device cuda`: memory, bf16/fp32 GEMM rates, copy
# bandwidth; a few seconds), for `plan --train PRESET --hardware "$out/local-cuda.json"`.
timeout "$cap" "$BUILD_DIR/cli/longseq" calibrate --device cuda --out "$out/local-cuda.json" \
  > "$out/calibrate_cuda.txt" 2>&1 || { echo "[gpu_check] calibrate --device cuda failed" >&2; rc=1; }
# The trainer on the GPU beside PyTorch's (bench/gpu_train_bench.sh: the main model at 32K, LLaMA-1B
# at 8K and 32K; GPU_CHECK_TRAIN=0 leaves it out). Its runs are capped one by one.
if [ "${GPU_CHECK_TRAIN:-1}" = 1 ]; then
  bash bench/gpu_train_bench.sh "$BUILD_DIR/cli/longseq" "$out" "$TORCH_PYTHON" \
    > "$out/gpu_train.txt" 2>&1 || echo "[gpu_check] gpu_train_bench failed" >&2
  benches+=("gpu_train")
fi
# Ranks sharing the GPU (bench/gpu_ranks_bench.sh: attention at world 1, 2, 4 on the one GPU;
# seconds; GPU_CHECK_RANKS=0 leaves it out).
if [ "${GPU_CHECK_RANKS:-1}" = 1 ]; then
  timeout "$cap" bash bench/gpu_ranks_bench.sh "$BUILD_DIR/cli/longseq" "$out" \
    > "$out/gpu_ranks.txt" 2>&1 || echo "[gpu_check] gpu_ranks_bench failed or was cut" >&2
  benches+=("gpu_ranks")
fi
skipped=$(grep -c 'Skipped' "$out/ctest_cuda.txt" || true)
{
  echo "gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ): build $((t1 - t0)) s, tests $((t2 - t1)) s, benchmarks $(( $(date +%s) - t2 )) s"
  grep -E '^  (cpu|kernel variant|cuda|  gpu)' "$out/info.txt" || true
  grep -E 'tests passed|tests failed' "$out/ctest_cuda.txt" || true
  echo "skipped cuda tests: $skipped"
  echo "benchmarks: ${benches[*]:-none yet}"
  echo "python CUDA tensors: $python_cuda"
  cat "$out/errors.txt" 2>/dev/null || true
  if [ -f "$out/compare.txt" ]; then
    cat "$out/compare.txt"
  else
    tail -3 "$out/torch_kernels.txt" 2>/dev/null || true
  fi
  cat "$out/attention_compare.txt" 2>/dev/null || true
  grep -E '^\[gpu_train\] ([a-z0-9_]* *ours|main_32k world 4)' "$out/gpu_train.txt" 2>/dev/null || true
  grep '^\[gpu_ranks\]' "$out/gpu_ranks.txt" 2>/dev/null || true
} > "$out/summary.txt"
cat "$out/summary.txt"
if [ "$info_rc" -ne 0 ]; then
  # The CLI itself did not run (a missing library, say): that is the failure to report, not a
  # missing GPU.
  echo "[gpu_check] longseq info failed (rc $info_rc): $(head -1 "$out/info.txt")" >&2
  exit 1
fi
if ! grep -q '    gpu 0:' "$out/info.txt"; then
  echo "[gpu_check] no GPU visible (see $out/info.txt): the cuda tests only skipped" >&2
  exit 1
fi
[ "$skipped" -eq 0 ] || { echo "[gpu_check] $skipped cuda tests skipped on a GPU machine" >&2; rc=1; }
exit $rc
