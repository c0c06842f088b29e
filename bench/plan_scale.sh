#!/usr/bin/env bash
# The planner at cluster scale (issues 31 and 44): `longseq plan --seq 16M` over a series of GPU
# counts, wall / user / system seconds and peak RSS of each run (GNU time), the search's numbers
# (splits, algorithm replays, pruned) and its winner (split, algorithm, policy, step, TGS), with
# an optional second binary (the planner before a change) run on the same cases and its --json
# ranking compared with this one's byte for byte.
#   bench/plan_scale.sh [OUT=docs/results/plan_scale.json] [OLD_LONGSEQ]
# Env: CASES="causal:64 ... window:4096:512" (mask:gpus; default below), ARGS="--prune-gap 0.01"
# (more flags for every run of this binary, recorded), OLD_MAX=256 (the largest GPU count the old
# binary is run at), LIMIT=900 (seconds per run; a run past it is recorded as timed out), MEM_KIB
# (ulimit -v of every run: a run past it fails and is recorded with its exit status). The CPU line
# names the widest vector ISA the kernel reports (AVX512F or AVX2).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-docs/results/plan_scale.json}
OLD=${2:-}
LONGSEQ=$PWD/build/cli/longseq
CASES=${CASES:-"window:4096:64 window:4096:128 window:4096:256 window:4096:512 window:4096:1024 causal:64 causal:128 causal:256 causal:512 causal:1024"}
OLD_MAX=${OLD_MAX:-256}
LIMIT=${LIMIT:-900}
ARGS=${ARGS:-}
MEM_KIB=${MEM_KIB:-unlimited}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run BIN TAG MASK GPUS [ARGS...]: one JSON object on stdout.
run() {
  local bin=$1 tag=$2 mask=$3 gpus=$4 rc=0
  shift 4
  local load
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  rm -f "$tmp/time" "$tmp/$tag.json"
  (ulimit -v "$MEM_KIB" && /usr/bin/time -f "%e %U %S %M" -o "$tmp/time" timeout "$LIMIT" \
    "$bin" plan --seq 16M --mask "$mask" --gpus "$gpus" --gpus-per-node 8 "$@" --json \
    >"$tmp/$tag.json" 2>/dev/null) || rc=$?
  # longseq plan exits 3 when no configuration fits (every one is still costed and printed).
  local timed_out=false
  [ "$rc" = 124 ] && timed_out=true
  local wall="" user="" sys="" rss=""
  [ -s "$tmp/time" ] && read -r wall user sys rss < <(tail -1 "$tmp/time")
  # GNU time prints "Command terminated by signal 9" first when the run was killed: not numbers.
  [[ "$wall" =~ ^[0-9.]+$ ]] || wall="" user="" sys="" rss=""
  # The search and its winner, from the answer (null when the run did not finish).
  local search
  search=$(python3 - "$tmp/$tag.json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception:
    print('"configs": null, "search": null, "winner": null'); sys.exit()
s = d.get("search")
w = next((c for c in d["configs"] if c["feasible"]), None)
out = {"configs": len(d["configs"]), "search": None if s is None else {k: s[k] for k in ("algorithms_replayed", "algorithms_pruned", "exact_top", "prune_gap")} | {"splits": len(s["splits"])},
       "winner": None if w is None else {k: w.get(k) for k in ("dp", "cp", "grad_accum", "algo", "checkpoint", "loss", "step_seconds", "tokens_per_sec_per_gpu", "mfu", "peak_memory_bytes")}}
print(json.dumps(out)[1:-1])
PY
)
  printf '{"binary": "%s", "mask": "%s", "gpus": %s, "args": "%s", "exit": %s, "timed_out": %s, "wall_s": %s, "user_s": %s, "sys_s": %s, "max_rss_kib": %s, "load_before": "%s", %s}' \
    "$tag" "$mask" "$gpus" "$*" "$rc" "$timed_out" "${wall:-null}" "${user:-null}" "${sys:-null}" "${rss:-null}" "$load" \
    "$search"
}

{
  echo "{\"command\": \"longseq plan --seq 16M --mask MASK --gpus GPUS --gpus-per-node 8 ARGS --json\","
  isa=$(grep -m1 '^flags' /proc/cpuinfo | grep -ow 'avx512f\|avx2' | sort | tail -1 | tr a-z A-Z)
  echo " \"cpu\": \"$(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores${isa:+, $isa}\","
  echo " \"note\": \"the machine was shared with other jobs: wall seconds include their load (load_before); user_s is this process's CPU time over all its threads\","
  echo " \"runs\": ["
  first=1
  for c in $CASES; do
    mask=${c%:*}
    gpus=${c##*:}
    [ $first = 1 ] || echo ","
    first=0
    # shellcheck disable=SC2086  # ARGS is a list of flags
    run "$LONGSEQ" new "$mask" "$gpus" $ARGS
    if [ -n "$OLD" ] && [ "$gpus" -le "$OLD_MAX" ]; then
      echo ","
      run "$OLD" old "$mask" "$gpus"
      same=false
      cmp -s "$tmp/new.json" "$tmp/old.json" && same=true
      printf ', {"compare": "%s:%s", "rankings_identical": %s}' "$mask" "$gpus" "$same"
    fi
    echo "== $mask $gpus done" >&2
  done
  echo "]}"
} >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "wrote $OUT" >&2
