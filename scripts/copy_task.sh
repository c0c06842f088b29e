#!/usr/bin/env bash
# Learning across ranks, shown (docs/long-context.md §7): a small LLaMA learns the copy task (a
# random half, then the same half again) with the main job's engine (4 local ranks, burst
# attention, zigzag balance), by a curriculum from 8-token to 40K-token examples, then
#   * eval on 32,768-token examples it has never seen, at another world, algorithm and layout
#     (3 ranks, ring, striped), before and after training: loss by position;
#   * generate: greedy continuation of unseen repeats, at world 1 and across ranks.
# Writes runs/copy/ (data, checkpoints) and OUT (default docs/results/copy_task): eval_before/,
# eval_after/ (eval.json, loss_by_position.svg) and copy_task.json (the stages' times and losses,
# the evaluations, the generations). About an hour on 2 cores.
#
#   bash scripts/copy_task.sh                 # everything
#   STAGES="4" bash scripts/copy_task.sh      # some stages again (the others' checkpoints kept)
#   STAGES=none bash scripts/copy_task.sh     # only the evaluations and generations
set -euo pipefail
cd "$(dirname "$0")/.."
LONGSEQ=${LONGSEQ:-./build/cli/longseq}
RUNS=${RUNS:-runs/copy}
OUT=${OUT:-docs/results/copy_task}
STAGES=${STAGES:-"1 2 3 4"}
V=20480  # ids; the model's vocabulary is V + 1 (end of text)
mkdir -p "$RUNS" "$OUT"
now() { date +%s.%N; }
secs() { python3 -c "print(round($2 - $1, 1))"; }

# ---- data: training stages (sequences packed with whole examples), evaluation, prompts --------
# Seeds differ between files, so no evaluated or prompted example was trained on.
copydata() { [ -f "$1" ] || "$LONGSEQ" copy --out "$@" --vocab $V --distinct; }
copydata data/copy-8-32.tok --length 8 --max-length 32 --pack 4096 --count 900 --seed 1
copydata data/copy-32-256.tok --length 32 --max-length 256 --pack 4096 --count 400 --seed 2
copydata data/copy-256-2k.tok --length 256 --max-length 2048 --pack 8192 --count 250 --seed 3
copydata data/copy-1k-40k.tok --length 1024 --max-length 40959 --log-lengths --pack 40960 --count 90 \
  --seed 4
copydata "$RUNS/eval-32k.tok" --length 32768 --count 2 --seed 100
# Prompts: the first half and the first 8 (16) tokens of its repeat; the files without --prefix
# hold the whole examples, whose rest the continuation must equal.
copydata "$RUNS/gen-2k.tok" --length 2048 --count 1 --seed 200
copydata "$RUNS/gen-2k-prompt.tok" --length 2048 --count 1 --seed 200 --prefix 1032
copydata "$RUNS/gen-32k.tok" --length 32768 --count 1 --seed 300
copydata "$RUNS/gen-32k-prompt.tok" --length 32768 --count 1 --seed 300 --prefix 16400

EVAL=(--data "$RUNS/eval-32k.tok" --seq 32768 --world 3 --algo ring --balance striped --buckets 16)

# ---- before: the initial weights (one step at a negligible learning rate writes them) --------
if [[ " $STAGES " == *" 1 "* || ! -d "$RUNS/init" ]]; then
  "$LONGSEQ" train --preset copy --steps 1 --lr 1e-12 --min-lr 1e-12 --warmup 0 --quiet \
    --out "$RUNS/init"
fi
"$LONGSEQ" eval --checkpoint-dir "$RUNS/init" "${EVAL[@]}" --out "$OUT/eval_before"

# ---- the curriculum: each stage starts from the previous one's weights -----------------------
stage() {  # stage N PRESET FROM [flags]
  local n=$1 preset=$2 from=$3
  shift 3
  [[ " $STAGES " == *" $n "* ]] || return 0
  local init=()
  [ -n "$from" ] && init=(--init-from "$RUNS/$from/checkpoint")
  local t0
  t0=$(now)
  "$LONGSEQ" train --preset "$preset" "${init[@]}" "$@" --out "$RUNS/$preset" | grep -v "^     "
  echo "$(secs "$t0" "$(now)")" > "$RUNS/$preset/wall_seconds"
}
stage 1 copy ""
stage 2 copy-256 copy
stage 3 copy-2k copy-256
# 2K -> 32K: yarn (docs/long-context.md §1) with factor 16 over the 2K the model was trained at.
stage 4 copy-32k copy-2k --max-position-embeddings 32768

# ---- after -----------------------------------------------------------------------------------
"$LONGSEQ" eval --checkpoint-dir "$RUNS/copy-32k" "${EVAL[@]}" --out "$OUT/eval_after"
# The same weights on the training engine's world and algorithm: the same numbers.
"$LONGSEQ" eval --checkpoint-dir "$RUNS/copy-32k" --data "$RUNS/eval-32k.tok" --seq 32768 \
  --world 4 --algo burst --balance zigzag --buckets 16 --out "$RUNS/eval_after_w4"

gen() {  # gen NAME PROMPT NEW [flags]: greedy ids as JSON
  local name=$1 prompt=$2 new=$3
  shift 3
  "$LONGSEQ" generate --checkpoint-dir "$RUNS/copy-32k" --prompt-ids "$prompt" \
    --max-new-tokens "$new" --json --stats "$RUNS/$name.stats.json" "$@" > "$RUNS/$name.json"
}
gen gen-2k-w1 "$RUNS/gen-2k-prompt.tok" 1016 --world 1
gen gen-2k-w3 "$RUNS/gen-2k-prompt.tok" 1016 --world 3 --algo ring --balance striped
gen gen-32k-w1 "$RUNS/gen-32k-prompt.tok" 256 --world 1
gen gen-32k-w4 "$RUNS/gen-32k-prompt.tok" 256 --world 4 --algo burst --balance zigzag

# ---- copy_task.json: what was run and what came out -------------------------------------------
python3 - "$RUNS" "$OUT" <<'EOF'
import json, struct, sys
runs, out = sys.argv[1], sys.argv[2]
def tokens(path):  # a token file (src/longseq/train/data.hpp)
    raw = open(path, 'rb').read()
    h = struct.unpack('<256i', raw[:1024])
    n, width = h[2] | (h[3] << 32), h[4]
    return list(struct.unpack('<%d%s' % (n, 'H' if width == 2 else 'I'), raw[1024:]))
result = {'stages': [], 'eval': {}, 'generate': []}
for p in ['copy', 'copy-256', 'copy-2k', 'copy-32k']:
    m = json.load(open(f'{runs}/{p}/metrics.json'))
    s = m['steps']
    result['stages'].append({
        'preset': p, 'steps': len(s), 'seq': m['config']['seq'], 'world': m['config']['world'],
        'wall_seconds': float(open(f'{runs}/{p}/wall_seconds').read()),
        'step_seconds_mean': round(sum(x['seconds'] for x in s) / len(s), 3),
        'loss_first': s[0]['loss'], 'loss_last': s[-1]['loss']})
for name, path in [('before', f'{out}/eval_before'), ('after', f'{out}/eval_after'),
                   ('after_world4_burst_zigzag', f'{runs}/eval_after_w4')]:
    e = json.load(open(f'{path}/eval_run.json'))
    half = [b for b in e['positions'] if b['start'] >= 16384]
    first = [b for b in e['positions'] if b['end'] <= 16384]
    mean = lambda bs: sum(b['loss'] * b['tokens'] for b in bs) / sum(b['tokens'] for b in bs)
    result['eval'][name] = {'loss': e['loss'], 'first_half_loss': mean(first),
                            'second_half_loss': mean(half),
                            'positions': [[b['start'], b['end'], b['loss']] for b in e['positions']]}
for name, whole, prompt_len in [('gen-2k-w1', 'gen-2k', 1032), ('gen-2k-w3', 'gen-2k', 1032),
                                ('gen-32k-w1', 'gen-32k', 16400), ('gen-32k-w4', 'gen-32k', 16400)]:
    g = json.load(open(f'{runs}/{name}.json'))
    st = json.load(open(f'{runs}/{name}.stats.json'))
    want = tokens(f'{runs}/{whole}.tok')[prompt_len:prompt_len + len(g['ids'])]
    right = sum(a == b for a, b in zip(g['ids'], want))
    result['generate'].append({'run': name, 'prompt_tokens': g['prompt_tokens'],
                               'new_tokens': len(g['ids']), 'world': st['world'],
                               'algo': st['algo'], 'balance': st['balance'],
                               'exact': g['ids'] == want, 'right': right,
                               'first_wrong': next((i for i, (a, b) in enumerate(zip(g['ids'], want))
                                                    if a != b), None),
                               'first_ids': g['ids'][:8]})
json.dump(result, open(f'{out}/copy_task.json', 'w'), indent=1)
for s in result['stages']:
    print(f"stage {s['preset']}: {s['steps']} steps of {s['seq']} tokens, {s['wall_seconds']} s,"
          f" loss {s['loss_first']:.3f} -> {s['loss_last']:.3f}")
for k, e in result['eval'].items():
    print(f"eval {k}: first half {e['first_half_loss']:.4f}, second half {e['second_half_loss']:.4f}")
for g in result['generate']:
    print(f"generate {g['run']}: {g['right']}/{g['new_tokens']} right, exact {g['exact']}")
EOF
