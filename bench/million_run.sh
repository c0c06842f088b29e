#!/usr/bin/env bash
# The million-token run of docs/million.md as a user starts it, measured: the memory model's
# prediction (`plan --train million --json`, same binary, before the run), the run under GNU time
# (peak RSS, CPU seconds), the 1-minute load average sampled every 30 s (an idle machine is the
# point: CPU seconds / wall seconds says how much of the machine the run got), and the run's
# metrics.json. Writes OUT (default docs/results/million_memory.json) and copies metrics.json to
# docs/results/million_metrics.json (another OUT: OUT's name with _metrics). Takes 10 to 30
# minutes on 2 idle cores.
#   bash bench/million_run.sh [OUT]          (from a built tree: scripts/build.sh)
# Env: LONGSEQ (default build/cli/longseq), RUN_DIR (default runs/million), EXTRA (more train
# flags), PLAN_EXTRA (the same for the prediction, e.g. --seq 16384 for EXTRA="--seq 16384
# --steps 1", a one-minute check of this script).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-docs/results/million_memory.json}
METRICS=docs/results/million_metrics.json
[ "$OUT" = docs/results/million_memory.json ] || METRICS=${OUT%.json}_metrics.json
LONGSEQ=${LONGSEQ:-build/cli/longseq}
RUN_DIR=${RUN_DIR:-runs/million}
[ -f build/kjv-books.tok ] || LONGSEQ=$LONGSEQ bash scripts/kjv_books.sh
tmp=$(mktemp -d)
trap 'kill "$sampler" 2>/dev/null || true; rm -rf "$tmp"' EXIT
policy=$(sed -n 's/.*"checkpoint": *"\([^"]*\)".*/\1/p' data/presets/million.json)
policy=${policy:-full}
# shellcheck disable=SC2086
"$LONGSEQ" plan --train million --checkpoint "$policy" --json ${PLAN_EXTRA:-} >"$tmp/plan.json"
(while true; do cut -d' ' -f1 /proc/loadavg >>"$tmp/load"; sleep 30; done) &
sampler=$!
rm -rf "$RUN_DIR"
start=$(date -u +%FT%TZ)
# shellcheck disable=SC2086
/usr/bin/time -v -o "$tmp/time" "$LONGSEQ" train --preset million --out "$RUN_DIR" ${EXTRA:-} |
  tee "$tmp/train.log"
end=$(date -u +%FT%TZ)
kill "$sampler" 2>/dev/null || true
cp "$RUN_DIR/metrics.json" "$METRICS"
/usr/bin/python3 - "$tmp" "$OUT" "$start" "$end" "$LONGSEQ train --preset million --out $RUN_DIR ${EXTRA:-}" "$METRICS" <<'EOF'
import json, os, re, subprocess, sys
tmp, out, start, end, cmd, metrics_path = sys.argv[1:7]
plan = json.load(open(os.path.join(tmp, "plan.json")))
time_txt = open(os.path.join(tmp, "time")).read()
def field(name):
    m = re.search(r"^\s*" + re.escape(name) + r": (.*)$", time_txt, re.M)
    return m.group(1).strip()
def wall(s):
    parts = [float(x) for x in s.split(":")]
    return sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
loads = [float(x) for x in open(os.path.join(tmp, "load")).read().split()]
cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
model = re.search(r"Model name:\s*(.*)", cpu).group(1).strip()
flags = re.search(r"Flags:\s*(.*)", cpu).group(1).split()
isa = "avx512f" if "avx512f" in flags else ("avx2" if "avx2" in flags else "portable")
metrics = json.load(open(metrics_path))
# plan --train --json: the policy's row (one policy asked for).
rows = plan.get("policies") or plan.get("memory") or []
row = rows[0] if isinstance(rows, list) and rows else plan
predicted = row.get("total_bytes", row.get("predicted_bytes"))
rss = int(field("Maximum resident set size (kbytes)")) * 1024
w, u, s = wall(field("Elapsed (wall clock) time (h:mm:ss or m:ss)")), float(field("User time (seconds)")), float(field("System time (seconds)"))
res = {
    "what": "longseq train --preset million: predicted peak RSS (plan --train million --json, same binary, before the run) vs measured (GNU time), the run's totals and the machine's load",
    "command": "/usr/bin/time -v " + cmd,
    "script": "bash bench/million_run.sh",
    "cpu": model, "isa": isa, "cores": os.cpu_count(),
    "memory_total_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
    "start_utc": start, "end_utc": end,
    "predicted_bytes": predicted,
    "predicted_phase": row.get("phase"),
    "measured_max_rss_bytes": rss,
    "predicted_over_measured": round(predicted / rss, 4) if predicted else None,
    "wall_seconds": w, "user_cpu_seconds": u, "system_cpu_seconds": s,
    "cpu_share_of_machine": round((u + s) / w / os.cpu_count(), 3),
    "load_average_1min_sampled_every_30s": {"mean": round(sum(loads) / len(loads), 2), "min": min(loads), "max": max(loads), "samples": len(loads)},
    "plan": plan,
    "steps": [{k: st.get(k) for k in ("step", "loss", "seconds", "tokens_per_sec", "mfu", "peak_rss_mib", "compute_s", "comm_wait_s")} for st in metrics.get("steps", [])],
}
json.dump(res, open(out, "w"), indent=1)
print(f"[million] wrote {out}: peak RSS {rss / 2**20:.0f} MiB, predicted {predicted / 2**20 if predicted else float('nan'):.0f} MiB, wall {w:.0f} s, load mean {res['load_average_1min_sampled_every_30s']['mean']}")
EOF
