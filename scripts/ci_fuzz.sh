#!/usr/bin/env bash
# Fuzzing in CI (docs/reliability.md): builds the libFuzzer harnesses of tests/fuzz with Debian's
# clang under AddressSanitizer + UndefinedBehaviorSanitizer (-fsanitize=fuzzer,address,undefined:
# LONGSEQ_FUZZ=ON, LONGSEQ_SANITIZE=address,undefined), runs each harness for FUZZ_SECONDS on a
# scratch copy of its committed corpus (tests/fuzz/corpus/<name>/, left unchanged), and fails on
# any crash, sanitizer report, uncaught exception, hang (-timeout) or memory blow-up (-rss_limit_mb).
# A crashing input is copied into tests/fuzz/corpus/<name>/ as crash-<sha1>: commit it with the fix,
# and the fuzz_replay_<name> CTest replays it in every build from then on.
#
#   bash scripts/ci_fuzz.sh                  # every harness, 10 s each, FUZZ_JOBS (nproc) at once
#   FUZZ_SECONDS=300 bash scripts/ci_fuzz.sh npy safetensors
#
# Writes $BUILD_DIR/fuzz_summary.json: per harness the executions, the corpus size and the crashes.
# The build directory (build-asan) is shared with scripts/ci_sanitize.sh: one clang build serves
# the fuzzers and the test suite under ASan + UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
SECONDS_EACH=${FUZZ_SECONDS:-10}
source scripts/asan_build.sh
NAMES=("$@")
if [ ${#NAMES[@]} -eq 0 ]; then
  mapfile -t NAMES < <(sed -n 's/.*LONGSEQ_FUZZ_TARGETS \(.*\)/\1/p;/^    [a-z_ ]*)$/p' \
    tests/fuzz/tests.cmake | tr -d ')' | tr ' ' '\n' | sed '/^$/d')
fi
asan_configure
t0=$(date +%s)
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${NAMES[@]/#/fuzz_}"
echo "[fuzz] built ${#NAMES[@]} harnesses in $(( $(date +%s) - t0 )) s"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/longseq_fuzz.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ROOT=$PWD
# One harness: the fuzzer over a scratch corpus (new inputs) and the committed one (read only);
# its exit status goes to $WORK/$n.rc.
fuzz_one() {
  local n=$1 rc=0
  mkdir -p "$WORK/corpus_$n" "$WORK/crash_$n"
  (cd "$WORK" && TMPDIR="$WORK" "$ROOT/$BUILD_DIR/tests/fuzz_$n" -max_total_time="$SECONDS_EACH" \
     -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
     -artifact_prefix="$WORK/crash_$n/" "$WORK/corpus_$n" "$ROOT/tests/fuzz/corpus/$n") \
     >"$WORK/$n.log" 2>&1 || rc=$?
  echo "$rc" >"$WORK/$n.rc"
}
# The harnesses are single-threaded: as many run at once as the machine has cores (FUZZ_JOBS).
JOBS=${FUZZ_JOBS:-$(nproc)}
for n in "${NAMES[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  fuzz_one "$n" &
done
wait
summary="["
failed=()
for n in "${NAMES[@]}"; do
  log="$WORK/$n.log"
  rc=$(cat "$WORK/$n.rc" 2>/dev/null || echo 1)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  crashes=0
  for f in "$WORK/crash_$n"/*; do
    [ -f "$f" ] || continue
    crashes=$((crashes + 1))
    dst="tests/fuzz/corpus/$n/crash-$(sha1sum "$f" | cut -c1-16)"
    cp "$f" "$dst"
    echo "[fuzz] $n: crashing input saved as $dst (commit it with the fix)"
  done
  seeds=$(find "tests/fuzz/corpus/$n" -type f | wc -l)
  grown=$(find "$WORK/corpus_$n" -type f | wc -l)
  echo "[fuzz] $n: ${execs:-0} executions in ${SECONDS_EACH} s, $seeds seeds, $grown new corpus" \
       "inputs, $crashes crashes (exit $rc)"
  if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
    failed+=("$n")
    tail -n 60 "$log"
  fi
  summary+="$( [ "$summary" = "[" ] || echo ",")
  {\"harness\": \"$n\", \"seconds\": $SECONDS_EACH, \"executions\": ${execs:-0}, \"seeds\": $seeds, \"new_inputs\": $grown, \"crashes\": $crashes, \"exit\": $rc}"
done
echo "$summary
]" >"$BUILD_DIR/fuzz_summary.json"
echo "[fuzz] summary: $BUILD_DIR/fuzz_summary.json"
if [ ${#failed[@]} -gt 0 ]; then
  echo "[fuzz] FAILED: ${failed[*]}"
  exit 1
fi
echo "[fuzz] ${#NAMES[@]} harnesses, no crash"
