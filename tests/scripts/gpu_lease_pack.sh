#!/usr/bin/env bash
# scripts/gpu_lease.sh against the device tool's limits on what comes back (at most 8 files, 16
# MiB each, plain names), on folders shaped like a GPU pass's: many small files, logs past the
# per-file cut, incompressible ones that make the archive pass 16 MiB until the cut halves, a
# pass with no summary, and a pass the deadline stops (its exit status 124, its children gone).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
lease=$root/scripts/gpu_lease.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# What the device tool accepts back (/work/.library/device/README.md, "Limits").
limits() {
  local out=$1 n=0 f
  for f in "$out"/*; do
    n=$((n + 1))
    [[ "$(basename "$f")" =~ ^[A-Za-z0-9._-]+$ ]] || fail "$f: a name the tool leaves out"
    [ -f "$f" ] || fail "$f is not a plain file"
    [ "$(stat -c %s "$f")" -le $((16 * 1024 * 1024)) ] || fail "$f is over 16 MiB"
  done
  [ "$n" -le 8 ] || fail "$out holds $n files (the tool brings back 8)"
}

# 1. A pass with a summary: 30 small files in two folders, one 9 MiB text log (cut to 4 MiB).
pass=$tmp/pass
mkdir -p "$pass/sub/deeper"
for i in $(seq 1 30); do echo "{\"row\": $i}" > "$pass/sub/r$i.json"; done
echo deep > "$pass/sub/deeper/x.txt"
printf 'gpu_check: build 40 s\n100%% tests passed out of 150\n' > "$pass/summary.txt"
head -c $((9 * 1024 * 1024)) < <(yes 'a test log line that repeats') > "$pass/ctest_cuda.txt"
echo "the last line of the log" >> "$pass/ctest_cuda.txt"
bash "$lease" pack "$pass" "$tmp/out1"
limits "$tmp/out1"
grep -q '100% tests passed out of 150' "$tmp/out1/summary.txt" || fail "the pass's summary is not in summary.txt"
grep -q 'cut: ctest_cuda.txt' "$tmp/out1/summary.txt" || fail "the cut log is not named"
grep -q '33 files in results.tar.gz' "$tmp/out1/summary.txt" || fail "the file count is wrong"
mkdir "$tmp/x1" && tar -xzf "$tmp/out1/results.tar.gz" -C "$tmp/x1"
cmp "$pass/sub/r17.json" "$tmp/x1/results/sub/r17.json" || fail "a small file changed"
[ -f "$tmp/x1/results/sub/deeper/x.txt" ] || fail "a file two folders down is missing"
tail -1 "$tmp/x1/results/ctest_cuda.txt" | grep -q 'the last line of the log' || fail "the cut log lost its end"
[ "$(stat -c %s "$tmp/x1/results/ctest_cuda.txt")" -lt $((5 * 1024 * 1024)) ] || fail "the log was not cut"

# 2. Incompressible files: five of 5 MiB pass 16 MiB at the 4 MiB cut; the cut halves until the
# archive fits, and no summary: the tails of the logs stand in for it.
pass=$tmp/noise
mkdir -p "$pass"
for i in 1 2 3 4 5; do head -c $((5 * 1024 * 1024)) /dev/urandom > "$pass/blob$i.bin"; done
echo "the build failed at step 3" > "$pass/build.txt"
bash "$lease" pack "$pass" "$tmp/out2"
limits "$tmp/out2"
[ -f "$tmp/out2/results.tar.gz" ] || fail "no archive for the incompressible pass"
grep -q 'no summary.txt' "$tmp/out2/summary.txt" || fail "a pass without a summary is not said"
grep -q 'the build failed at step 3' "$tmp/out2/summary.txt" || fail "the logs' tails are missing"
[ "$(grep -c 'cut: blob' "$tmp/out2/summary.txt")" -eq 5 ] || fail "the cut files are not all named"

# 3. run: a pass the deadline stops. Its exit status is 124, its background child is gone, and
# what it wrote comes back packed with the lease's line.
marker="gpu_lease_test_sleep_$$"
rc=0
LEASE_WORK=$tmp/work3 LEASE_OUT=$tmp/out3 GPU_LEASE_S=2 bash "$lease" run -- bash -c \
  "echo written > \"\$LEASE_WORK/early.txt\"; exec -a $marker sleep 60 & exec -a $marker sleep 60" \
  > "$tmp/run.txt" 2>&1 || rc=$?
[ "$rc" -eq 124 ] || { cat "$tmp/run.txt"; fail "run's exit status is $rc, not the deadline's 124"; }
sleep 1
! pgrep -f "$marker" > /dev/null || fail "the deadline left the pass's children running"
limits "$tmp/out3"
grep -q 'cut at the deadline of 2 s' "$tmp/out3/summary.txt" || fail "the deadline is not in summary.txt"
tar -xzOf "$tmp/out3/results.tar.gz" results/early.txt | grep -q written || fail "the pass's file is missing"

# 4. run without a place to pack into, and a bad deadline: refused by name.
rc=0
env -u OUT -u LEASE_OUT LEASE_WORK="$tmp/work4" bash "$lease" run -- true > "$tmp/e1.txt" 2>&1 || rc=$?
{ [ "$rc" -eq 2 ] && grep -q 'neither OUT' "$tmp/e1.txt"; } || fail "a run without OUT was not refused"
rc=0
LEASE_WORK=$tmp/work5 LEASE_OUT=$tmp/out4 GPU_LEASE_S=7m bash "$lease" run -- true > "$tmp/e2.txt" 2>&1 || rc=$?
{ [ "$rc" -eq 2 ] && grep -q "GPU_LEASE_S.*'7m'" "$tmp/e2.txt"; } || fail "a bad deadline was not refused"
echo "gpu_lease pack: all cases passed"
