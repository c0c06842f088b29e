#!/usr/bin/env bash
# Re-runs test labels under every kernel variant below this CPU's best (LONGSEQ_ISA, design.md
# §10): kernels|attention|train under avx2 and avx512 (where the CPU has more than that level;
# avx512 also forces bf16 emulation on an AVX512_BF16 CPU), and the kernels label under portable.
# On an AVX2-only CPU the default run already is the avx2 variant with bf16 emulated, so only the
# portable rerun is left. The reruns leave out the suites of those labels whose subject no kernel
# variant touches (NO_KERNEL below: flag refusals, the schedules, which are pure functions,
# transfer pair order, signal/disk/rank failure semantics): 23 of 942 tests, but on a 2-core
# AVX-512 CPU they took 88 of the reruns' 287 s (199 s without them), which CI's 50 minutes need.
#   bash scripts/isa_rerun.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shellcheck source=scripts/isa_levels.sh
source scripts/isa_levels.sh
best=$(isa_best "$BUILD_DIR")
NO_KERNEL='^CliFlags\.|^Schedule\.|^PairOrder\.|^FailureSemantics\.'
echo "[isa] best variant of this CPU: $best"
for isa in avx2 avx512; do
  if [ "$(isa_level "$isa")" -lt "$(isa_level "$best")" ]; then
    echo "[isa] LONGSEQ_ISA=$isa: labels kernels|attention|train"
    # The mpirun registrations (label mpi) and the binary-inspection tests do not depend on it.
    LONGSEQ_ISA=$isa ctest --test-dir "$BUILD_DIR" -L 'kernels|attention|train' -LE mpi \
      -E "isa_symbols|portable_code|format|$NO_KERNEL" --output-on-failure -j "$(nproc)"
  fi
done
echo "[isa] LONGSEQ_ISA=portable: label kernels"
LONGSEQ_ISA=portable ctest --test-dir "$BUILD_DIR" -L kernels -E 'isa_symbols|portable_code' \
  --output-on-failure -j "$(nproc)"
