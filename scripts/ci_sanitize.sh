#!/usr/bin/env bash
# Sanitizer pass in CI (docs/reliability.md):
#   1. ASan + UBSan (clang, build-asan, shared with scripts/ci_fuzz.sh): the test labels in
#      SANITIZE_LABELS (default: core, kernels, comm, attention, train, fuzz replays; the mpirun
#      registrations excluded) - only their executables are built, and the longseq binary (ASan +
#      UBSan too) where a label's tests run it (attention, train: the CLI tests).
#   2. TSan (clang, build-tsan): the comm tests of the local backend (ranks are threads there, so
#      every cross-rank hand-off is a cross-thread one TSan sees).
# Any report fails the test it happens in (UBSan: -fno-sanitize-recover; ASan, TSan: halt).
#   bash scripts/ci_sanitize.sh                 # both passes
#   SANITIZE_LABELS='train' bash scripts/ci_sanitize.sh asan
set -euo pipefail
cd "$(dirname "$0")/.."
PASSES=("$@")
[ ${#PASSES[@]} -gt 0 ] || PASSES=(asan tsan)
LABELS=${SANITIZE_LABELS:-core|kernels|comm|attention|train|fuzz}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Not here: the one test whose bound is a speed (a transfer progressing within 50 ms of compute:
# sanitizers slow every memory access several times; the release build checks it), the kernels
# label's non-gtest registrations (kernels.*: the torch oracle's ref_dump, the nm/objdump
# inspections of the release objects and binary), the train tests that start mpirun (OpenMPI
# itself is not instrumented, as for the mpi label), and the train label's four slowest sweeps,
# which repeat over every algorithm, layout, policy or world the step that the train tests left
# in run take once each (the attention label runs every algorithm and layout under ASan), and a
# brute-force count past 2^31 (plain integer loops; the release build checks it). Cost and
# choice: docs/reliability.md "Sanitizers in CI".
SLOW_SWEEPS='DistributedStepEqualsWorldOneForEveryAlgorithmAndLayout|EqualsSingleRankForEveryLayoutPolicyAndLoss'
SLOW_SWEEPS+='|RopeScalingTrain\.StepEqualsAcrossWorldsAndLayouts|PastTwoToThe31ScoreElementsEqualsBruteForce'
# The attention label's three exhaustive schedule enumerations (pure integer functions over every
# algorithm, layout and world up to 128: 207 of its test-seconds under ASan, and the pair-order
# check over worlds up to 36 another 85 on a 2-core AMD EPYC); the executor runs every
# algorithm's schedules under ASan in the label's other tests.
SLOW_SWEEPS+='|Schedule\.AllPairsOnceEverySendMatchedNoSlotHazard|Schedule\.EveryAlgorithmTagsMatchAtLargeWorlds'
SLOW_SWEEPS+='|PairOrder\.EveryScheduleNeedsNoTags'
# Round 4 (a fresh clone on a 2-core Xeon reached 2,932 s of CI's 3,000; this pass's tests took
# 550 s of it, 1,093 test-seconds): the three slowest of the other schedule sweeps (57 test-s,
# the same pure functions), two sweeps whose subject is bits or a size, not memory (Ulysses's
# head groups bit-identical to the blocking all-to-alls, 76 test-s: every Ulysses and USP test
# of the label runs head groups, the default, under ASan; the copy preset's 20,481-id LM head
# for two steps, 65 test-s: the train label's other tests train and generate under ASan), and
# two of the three sweeps of bad numeric flags (43 test-s: one flag table and parser serves
# every command, and the third sweep runs it under ASan).
SLOW_SWEEPS+='|Schedule\.StarTrailStagesItsSideTransfers|Schedule\.UspHeadGroupsRunTheRingOncePerGroup'
SLOW_SWEEPS+='|Schedule\.UlyssesHeadGroupsPostBeforeReadSendAfterWrite'
SLOW_SWEEPS+='|Ulysses\.HeadGroupsAreBitIdenticalToBlockingAllToAlls|CopyTask\.PresetTrainsAndGeneratePrintsIds'
SLOW_SWEEPS+='|CliFlags\.TrainRefusesEveryBadNumericValueNamingTheFlag'
SLOW_SWEEPS+='|CliFlags\.EvalGeneratePasskeyAndTokenizeRefuseEveryBadNumericValueNamingTheFlag'
# The local backend's 2.5 GiB transfer (comm_local_big: two minutes alone on both cores under each
# sanitizer): the local backend has no size-dependent path (one memcpy per message; the 1 GiB
# chunking is MPI's), so the comm label's small transfers run the same code under ASan and TSan;
# the release build runs it.
SLOW_SWEEPS+='|^comm_local_big$'
EXCLUDE=${SANITIZE_EXCLUDE:-TransfersProgressWhileTheRankComputes|^kernels\.|UnderMpirun|MpirunEquals|$SLOW_SWEEPS}
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)

# The executables behind the labels: test_<label> per folder label, fuzz_replay_* for "fuzz".
targets_for() {
  local t=() l
  for l in $(echo "$1" | tr '|' ' '); do
    if [ "$l" = fuzz ]; then
      for f in tests/fuzz/fuzz_*.cpp; do t+=("fuzz_replay_$(basename "$f" .cpp | sed 's/^fuzz_//')"); done
    else
      t+=("test_$l")
    fi
    case "$l" in attention | train) t+=(longseq) ;; esac
  done
  echo "${t[@]}" | tr ' ' '\n' | sort -u | tr '\n' ' '
}

for pass in "${PASSES[@]}"; do
  t0=$(date +%s)
  case "$pass" in
    asan)
      BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
      source scripts/asan_build.sh
      asan_configure
      # shellcheck disable=SC2046
      cmake --build "$BUILD_DIR" -j "$(nproc)" --target $(targets_for "$LABELS")
      t1=$(date +%s)
      ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
      UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
        ctest --test-dir "$BUILD_DIR" -L "$LABELS" -LE mpi -E "$EXCLUDE" --output-on-failure \
        -j "$(nproc)"
      ;;
    tsan)
      BUILD_DIR=${TSAN_BUILD_DIR:-build-tsan}
      if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
        CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
          -DCMAKE_CXX_FLAGS_RELEASE="-O1 -gline-tables-only -DNDEBUG -Wno-pass-failed" \
          -DLONGSEQ_SANITIZE=thread -DLONGSEQ_BUILD_BENCH=OFF -DLONGSEQ_TEST_FLAGS=-O0 >/dev/null
      fi
      cmake --build "$BUILD_DIR" -j "$(nproc)" --target test_comm
      t1=$(date +%s)
      TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1} \
        ctest --test-dir "$BUILD_DIR" -L comm -LE mpi -E "$EXCLUDE" --output-on-failure -j "$(nproc)"
      ;;
    *) echo "[sanitize] unknown pass '$pass' (asan | tsan)" >&2; exit 2 ;;
  esac
  echo "[sanitize] $pass: build $((t1 - t0)) s, tests $(( $(date +%s) - t1 )) s"
done
