#!/usr/bin/env bash
# The CPU kernel variants side by side on this machine (design.md §10; issue "The GPU lease": the
# host's CPU): the attention block kernels (bench/attention_kernel_bench, fp32 and bf16, causal)
# and the GEMM library's rates under every LONGSEQ_ISA level this CPU can run, in one run, the
# variants taking turns for ROUNDS rounds so a drifting load hits all alike (each its best).
# oneDNN follows LONGSEQ_ISA (kernels/gemm.cpp), so a lower level also caps the GEMMs: avx512 on
# an AVX512_BF16 CPU is bf16 emulated (widened to fp32) everywhere, avx512_bf16 is bf16 in
# hardware (AMX tiles where the CPU has them, through oneDNN).
#
#   bash bench/isa_variants.sh BUILD_DIR OUT.json [ROUNDS]
#
# Environment: ISA_T (default 8192), ISA_D (128), ISA_HEADS (8), ISA_THREADS (nproc),
# ISA_VARIANTS (default: avx2 avx512 avx512_bf16, those at or below this CPU's best).
# Writes OUT.json: the CPU, its best variant, and per variant the bench's rows (forward and
# forward + backward seconds and GFLOP/s per dtype) and its GEMM rates; prints a table.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
build=$1
out=$2
rounds=${3:-2}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "[isa_variants] ROUNDS '$rounds': expected a positive integer" >&2; exit 2; }
bench="$build/bench/attention_kernel_bench"
[ -x "$bench" ] || { echo "[isa_variants] $bench not built (LONGSEQ_BUILD_BENCH=ON)" >&2; exit 1; }
# shellcheck source=scripts/isa_levels.sh
source "$(dirname "$0")/../scripts/isa_levels.sh"
best=$(isa_best "$build")
variants=()
for v in ${ISA_VARIANTS:-avx2 avx512 avx512_bf16}; do
  [ "$(isa_level "$v")" -ge 0 ] || { echo "[isa_variants] unknown variant '$v'" >&2; exit 2; }
  [ "$(isa_level "$v")" -le "$(isa_level "$best")" ] && variants+=("$v")
done
work=$(mktemp -d "${TMPDIR:-/tmp}/longseq_isa.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "[isa_variants] best for this CPU: $best; variants: ${variants[*]}; $rounds rounds"
for r in $(seq 1 "$rounds"); do
  for v in "${variants[@]}"; do
    LONGSEQ_ISA=$v "$bench" --t "${ISA_T:-8192}" --d "${ISA_D:-128}" --heads "${ISA_HEADS:-8}" \
      --mask causal --dtype f32,bf16 --threads "${ISA_THREADS:-$(nproc)}" --reps 1 --no-torch \
      --out "$work/$v.$r.json" > "$work/$v.$r.log" 2>&1 ||
      { tail -20 "$work/$v.$r.log" >&2; echo "[isa_variants] $v round $r failed" >&2; exit 1; }
    echo "[isa_variants] round $r $v done"
  done
done
/usr/bin/python3 - "$work" "$out" "$best" "$rounds" "$*" "${variants[@]}" <<'EOF'
import glob, json, os, sys
work, out, best, rounds, args, variants = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6:]
res = {"command": "bash bench/isa_variants.sh " + args, "best_variant": best, "rounds": rounds,
       "variants": {}}
for v in variants:
    runs = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(work, f"{v}.*.json")))]
    first = runs[0]
    res.setdefault("cpu", first.get("cpu"))
    res.setdefault("cpu_features", first.get("cpu_features"))
    res.setdefault("threads", first.get("threads"))
    rows = {}
    for run in runs:
        for c in run["cases"]:
            key = f'{c["dtype"]} t{c["t"]} d{c["d"]} {c["mask"]}'
            row = rows.setdefault(key, {"dtype": c["dtype"], "t": c["t"], "d": c["d"], "h": c["h"],
                                        "mask": c["mask"], "fwd_s": [], "fwdbwd_s": []})
            row["fwd_s"].append(c["fwd_s"])
            row["fwdbwd_s"].append(c["fwdbwd_s"])
            row["fwd_gflops_best"] = max(row.get("fwd_gflops_best", 0), c["fwd_gflops"])
            row["fwdbwd_gflops_best"] = max(row.get("fwdbwd_gflops_best", 0), c["fwdbwd_gflops"])
    for row in rows.values():
        row["fwd_s_best"], row["fwdbwd_s_best"] = min(row["fwd_s"]), min(row["fwdbwd_s"])
    res["variants"][v] = {"isa": first.get("isa"), "bf16": first.get("bf16"),
                          "gemm_library": first.get("gemm_library"),
                          "gemm_gflops": [r.get("gemm_gflops") for r in runs],
                          "cases": list(rows.values())}
json.dump(res, open(out, "w"), indent=1, sort_keys=True)
print(f'{"variant":12} {"dtype":5} {"fwd s":>8} {"fwd+bwd s":>10} {"fwd GF/s":>9} {"f+b GF/s":>9}')
for v, r in res["variants"].items():
    for c in r["cases"]:
        print(f'{v:12} {c["dtype"]:5} {c["fwd_s_best"]:8.3f} {c["fwdbwd_s_best"]:10.3f} '
              f'{c["fwd_gflops_best"]:9.1f} {c["fwdbwd_gflops_best"]:9.1f}')
EOF
