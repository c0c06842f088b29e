#!/usr/bin/env bash
# Generation speed at long prompts: prefill tokens/s and decode tokens/s of `longseq generate`
# (distributed prefill, KV cache sharded over the ranks) for prompts of N tokens at world P.
#
#   bash bench/generate_speed.sh [OUT.json] [N,N,...] [P,P,...] [NEW_TOKENS]
#   defaults: docs/results/generate_speed.json 32768,131072 1,4 32
#
# The model is the `tiny` preset (2 layers, hidden 32, 4 query / 2 kv heads of 8 dims, byte
# vocabulary) after one training step: speed does not depend on what the weights learned. The
# prompt is the first N bytes of data/kjv-genesis-exodus.txt (repeated where N is longer),
# byte-level ids. Every run uses --threads 1 per rank (ranks are threads of one process); the
# JSON records the CPU model and the load average before and after each run, since the machine
# may be shared.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-docs/results/generate_speed.json}
LENS=${2:-32768,131072}
WORLDS=${3:-1,4}
NEW=${4:-32}
BIN=./build/cli/longseq
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

"$BIN" train --preset tiny --steps 1 --seq 256 --threads 1 --quiet --out "$TMP/model" >/dev/null
runs=()
for n in ${LENS//,/ }; do
  /usr/bin/python3 - "$n" "$TMP/prompt_$n.txt" <<'EOF'
import sys
n, path = int(sys.argv[1]), sys.argv[2]
text = open("data/kjv-genesis-exodus.txt", "rb").read()
ids = (text * (n // len(text) + 1))[:n]
open(path, "w").write(" ".join(str(b) for b in ids))
EOF
  for p in ${WORLDS//,/ }; do
    load_before=$(cut -d' ' -f1-3 /proc/loadavg)
    "$BIN" generate --checkpoint-dir "$TMP/model" --prompt-ids "$TMP/prompt_$n.txt" \
      --max-new-tokens "$NEW" --world "$p" --algo burst --balance zigzag --threads 1 \
      --stats "$TMP/stats_${n}_$p.json" >/dev/null
    load_after=$(cut -d' ' -f1-3 /proc/loadavg)
    echo "N=$n world=$p: $(tr -d '\n' <"$TMP/stats_${n}_$p.json" | tr -s ' ')" >&2
    runs+=("$TMP/stats_${n}_$p.json|$load_before|$load_after")
  done
done
/usr/bin/python3 - "$OUT" "$NEW" "$OUT $LENS $WORLDS $NEW" "${runs[@]}" <<'EOF'
import json, os, sys
out, new, args, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
res = []
for r in runs:
    path, before, after = r.split("|")
    s = json.load(open(path))
    s["loadavg_before"], s["loadavg_after"] = before, after
    res.append(s)
doc = {
    "command": "bash bench/generate_speed.sh " + args,
    "model": "tiny preset (layers 2, hidden 32, heads 4, kv_heads 2, head_dim 8, vocab 257), 1 step",
    "new_tokens": new,
    "cpu": cpu,
    "cores": os.cpu_count(),
    "note": "prefill_tokens_per_s = prompt tokens / prefill wall time (first new token included); "
            "decode_tokens_per_s = (new tokens - 1) / decode wall time; ranks are threads, 1 compute "
            "thread each, on a shared machine (see loadavg)",
    "runs": res,
}
json.dump(doc, open(out, "w"), indent=1)
print("wrote", out)
EOF
