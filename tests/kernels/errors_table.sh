#!/usr/bin/env bash
# kernels.errors_table: the error table that gpu_check.sh prints for the GPU kernels
# (bench/cuda_test_errors.py over test_cuda's JSON) is built from what the tests record
# (record_error in tests/model/model_test_util.hpp). Checked here on the CPU registry cases,
# which record the same way: every case op gets its rows, errors are small and finite, and a
# planted failure is listed, so the table can never hide a failing test.
#   errors_table.sh TEST_KERNELS PYTHON SCRIPT
set -euo pipefail
bin=$1 py=$2 script=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" --gtest_filter='*KernelCases*' --gtest_output="json:$tmp/k.json" > /dev/null
"$py" "$script" "$tmp/k.json" --out "$tmp/e.json" --text "$tmp/e.txt" > /dev/null
"$py" - "$tmp/e.json" <<'PY'
import json, math, sys
doc = json.load(open(sys.argv[1]))
rows = doc["rows"]
kernels = {r["kernel"] for r in rows}
want = {"rmsnorm", "rope", "swiglu", "lm_head_ce", "merge_partials", "attention_delta", "linear",
        "attention"}
missing = want - kernels
assert not missing, f"no error rows for {sorted(missing)}: {sorted(kernels)}"
for r in rows:
    assert r["cases"] >= 1, r
    assert math.isfinite(r["rel_l2_max"]) and math.isfinite(r["max_abs_max"]), r
    # fp32 kernels against fp64: far under 1e-3 in max |err| on these small cases
    assert r["max_abs_max"] < 1e-3, r
assert doc["failed"] == [], doc["failed"]
PY
# A planted failure must show up as such.
"$py" - "$tmp/k.json" <<'PY'
import json, sys
p = sys.argv[1]
doc = json.load(open(p))
t = doc["testsuites"][0]["testsuite"][0]
t["failures"] = [{"failure": "planted", "type": ""}]
json.dump(doc, open(p, "w"))
PY
"$py" "$script" "$tmp/k.json" --out "$tmp/f.json" --text "$tmp/f.txt" > /dev/null
grep -q '^FAILED: ' "$tmp/f.txt" || { echo "planted failure not listed"; exit 1; }
echo "errors table: $(wc -l < "$tmp/e.txt") lines, planted failure listed"
