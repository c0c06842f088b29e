#!/usr/bin/env bash
# Before/after of a change to the attention schedules on the 2-host x 2-rank cluster
# (scripts/cluster.sh, inter link shaped, intra not), in one session: the same `longseq attention`
# runs (causal, zigzag, forward + backward) alternate between the BEFORE and AFTER `longseq`
# binaries, REPS times, so the shared machine's load swings hit both alike; AFTER's
# cluster_predict_bench then puts its planner's prediction beside its runs (and BEFORE_PREDICT's,
# when given, beside the before runs), with the shipped `local` profile and with the profile
# calibrated on this cluster. Writes OUT/{before,after}/... and RESULT (JSON: wait per pass of the
# critical rank, prediction / measured), docs/cluster.md.
#   bench/cluster_attention_overlap.sh BEFORE_LONGSEQ AFTER_BUILD [OUT=/tmp/cluster_overlap]
#       [RESULT=OUT/cluster_attention_overlap.json]
# AFTER_BUILD is a build directory holding cli/longseq, bench/comm_bench (the link ping-pong) and
# bench/cluster_predict_bench.
# Env: RATE=1gbit, NS="16384 32768", ALGOS="startrail:2 ring", SHAPE=4,4,64, REPS=2,
# CALIBRATED=docs/results/cluster_calibrate.json, BEFORE_PREDICT (the before build's
# cluster_predict_bench; unset: no prediction for the before runs).
set -euo pipefail
cd "$(dirname "$0")/.."
BEFORE=$(realpath "$1") AFTER=$(realpath "$2")
[ -x "$BEFORE" ] && [ -x "$AFTER/cli/longseq" ] || { echo "usage: $0 BEFORE_LONGSEQ AFTER_BUILD [OUT] [RESULT]" >&2; exit 2; }
OUT=${3:-/tmp/cluster_overlap}
RESULT=${4:-$OUT/cluster_attention_overlap.json}
RATE=${RATE:-1gbit} NS=${NS:-"16384 32768"} ALGOS=${ALGOS:-"startrail:2 ring"}
SHAPE=${SHAPE:-4,4,64} REPS=${REPS:-2}
CALIBRATED=${CALIBRATED:-docs/results/cluster_calibrate.json}
export LONGSEQ_CLUSTER=${LONGSEQ_CLUSTER:-overlap}
rm -rf "$OUT"
mkdir -p "$OUT/before" "$OUT/after"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
bash scripts/cluster.sh up 2 --rate "$RATE" >/dev/null
trap 'bash scripts/cluster.sh down >/dev/null 2>&1' EXIT
# The links as MPI sees them, once for both builds (the comm layer is the same in both).
bash scripts/cluster.sh run -- mpirun -np 2 --map-by slot "$AFTER/bench/comm_bench" --ops pingpong \
  --max-bytes 16777216 --out "$OUT/pingpong_intra.json" >/dev/null 2>&1
bash scripts/cluster.sh run -- mpirun -np 2 --map-by node "$AFTER/bench/comm_bench" --ops pingpong \
  --max-bytes 16777216 --out "$OUT/pingpong_inter.json" >/dev/null 2>&1
for rep in $(seq 1 "$REPS"); do
  for n in $NS; do
    for algo in $ALGOS; do
      for side in before after; do
        bin=$BEFORE
        [ "$side" = after ] && bin=$AFTER/cli/longseq
        dir="$OUT/$side/rep${rep}/${algo//:/_}_$n"
        mkdir -p "$(dirname "$dir")"
        bash scripts/cluster.sh run -- mpirun -np 4 "$bin" attention \
          --random "$n,$SHAPE" --mask causal --algo "$algo" --out "$dir" >/dev/null
        echo "rep $rep $algo N=$n $side: load $(cut -d' ' -f1 /proc/loadavg)"
      done
    done
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
for side in before after; do
  predict=${BEFORE_PREDICT:-}
  [ "$side" = after ] && predict=$AFTER/bench/cluster_predict_bench
  for rep in $(seq 1 "$REPS"); do
    d="$OUT/$side/rep${rep}"
    cp "$OUT"/pingpong_*.json "$d/"
    [ -n "$predict" ] || continue
    "$predict" --dir "$d" --out "$d/predict_local.json" >/dev/null
    "$predict" --dir "$d" --hardware "$CALIBRATED" --out "$d/predict_calibrated.json" >/dev/null
  done
done
python3 - "$OUT" "$RESULT" "$REPS" "$load_before" "$load_after" "$RATE" "$BEFORE" "$AFTER" <<'EOF'
import json, os, subprocess, sys
out, result, reps, load_before, load_after, rate, before, after = sys.argv[1:9]
rows = []
for side in ("before", "after"):
    for rep in range(1, int(reps) + 1):
        d = os.path.join(out, side, f"rep{rep}")
        pred = {}
        for prof in ("local", "calibrated"):
            f = os.path.join(d, f"predict_{prof}.json")
            if os.path.exists(f):
                for r in json.load(open(f))["rows"]:
                    pred[(r["algo"], r["n"], prof)] = r
        for run in sorted(os.listdir(d)):
            sp = os.path.join(d, run, "stats.json")
            if not os.path.exists(sp):
                continue
            s = json.load(open(sp))
            ranks = s["ranks"]
            row = {"build": side, "rep": rep, "algo": s["algo"], "n": s["n"]}
            for p in ("forward", "backward"):
                row[f"{p}_wait_s_max_rank"] = max(r[p]["wait_s"] for r in ranks)
                row[f"{p}_compute_s_max_rank"] = max(r[p]["compute_s"] for r in ranks)
            row["wait_per_pass_s"] = (row["forward_wait_s_max_rank"] + row["backward_wait_s_max_rank"]) / 2
            row["wait_s_by_rank"] = [r["wait_s"] for r in ranks]
            row["compute_s_by_rank"] = [r["compute_s"] for r in ranks]
            # Measured pass time as cluster_predict_bench defines it: the critical rank's compute
            # + wait, per pass.
            row["measured_s"] = sum(max(r[p]["compute_s"] + r[p]["wait_s"] for r in ranks)
                                    for p in ("forward", "backward"))
            row["bytes_sent_inter"] = sum(r["bytes_sent_inter"] for r in ranks)
            for prof in ("local", "calibrated"):
                pr = pred.get((s["algo"], s["n"], prof))
                row[f"predicted_s_{prof}"] = pr["predicted"].get("total_s") if pr else None
                row[f"predicted_over_measured_{prof}"] = (pr.get("predicted_over_measured")
                                                          if pr else None)
            rows.append(row)
summary = []
for algo in sorted({r["algo"] for r in rows}):
    for n in sorted({r["n"] for r in rows}):
        sel = {b: [r for r in rows if r["algo"] == algo and r["n"] == n and r["build"] == b]
               for b in ("before", "after")}
        if not sel["before"] or not sel["after"]:
            continue
        def mean(xs, k):
            v = [x[k] for x in xs if x[k] is not None]
            return sum(v) / len(v) if v else None
        e = {"algo": algo, "n": n}
        for b in ("before", "after"):
            for k in ("wait_per_pass_s", "forward_wait_s_max_rank", "backward_wait_s_max_rank",
                      "measured_s", "predicted_s_calibrated", "predicted_over_measured_calibrated",
                      "predicted_s_local", "predicted_over_measured_local"):
                e[f"{b}_{k}"] = mean(sel[b], k)
        e["wait_after_over_before"] = e["after_wait_per_pass_s"] / e["before_wait_per_pass_s"]
        summary.append(e)
json.dump({"bench": "cluster_attention_overlap", "rate": rate, "reps": int(reps),
           "load_before": load_before, "load_after": load_after,
           "before_build": before, "after_build": after,
           "cpu": subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True,
                                 capture_output=True, text=True).stdout.strip(),
           "links": json.load(open(os.path.join(out, "after", "rep1", "predict_calibrated.json")))["links"],
           "summary": summary, "runs": rows}, open(result, "w"), indent=1)
f2 = lambda x: "-" if x is None else f"{x:.2f}"
for e in summary:
    print(f"{e['algo']:12s} N={e['n']:6d} wait/pass before {e['before_wait_per_pass_s']:.3f} s "
          f"after {e['after_wait_per_pass_s']:.3f} s ({e['wait_after_over_before']:.2f}x) | "
          f"measured {e['before_measured_s']:.2f} -> {e['after_measured_s']:.2f} s | pred/meas "
          f"calibrated {f2(e['before_predicted_over_measured_calibrated'])} -> "
          f"{f2(e['after_predicted_over_measured_calibrated'])}, local "
          f"{f2(e['before_predicted_over_measured_local'])} -> "
          f"{f2(e['after_predicted_over_measured_local'])}")
print("load", load_before, "->", load_after, "; wrote", result)
EOF
