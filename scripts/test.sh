#!/usr/bin/env bash
# The whole test suite on a fresh machine: install dependencies, build, run every CTest test.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase prints its wall time, so CI's budget (under 50 minutes on a fresh 2-core machine) can
# be read off any log (docs/results/ci_fresh_clone.json: 2,865 s on a 2-core AVX2 AMD EPYC, CI=true;
# ci_fresh_clone_xeon.json: 2,908 s on a 2-core AVX-512 Xeon, whose ISA reruns are the longer).
source scripts/phase.sh
phase bash scripts/setup.sh
phase bash scripts/build.sh
# OpenMPI refuses to start as root without these; the MPI tests also set them per test.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
phase ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"
# The kernel variants below this CPU's best (design.md §10), so one machine tests the paths other
# CPUs run: the kernel, attention and train labels again under LONGSEQ_ISA=avx2 and =avx512 (bf16
# emulated: widened to fp32) where the CPU has more; the kernel label under the portable variant.
phase bash scripts/isa_rerun.sh "${BUILD_DIR:-build}"
# A 2-host x 2-rank MPI job across network namespaces (prints SKIPPED where they are refused).
phase bash scripts/ci_cluster.sh "${BUILD_DIR:-build}"
phase bash scripts/ci_install.sh   # cmake --install, the installed binary from /, examples/consumer
# Every fuzz harness for 10 s, one per core at once, under ASan + UBSan (clang, build-asan;
# docs/reliability.md).
phase bash scripts/ci_fuzz.sh
# The test labels core, comm, attention and the fuzz replays under ASan + UBSan (same build), the
# local comm tests under TSan (build-tsan: only test_comm).
phase bash scripts/ci_sanitize.sh
