#!/usr/bin/env python3
"""The measured error of each GPU kernel against its fp64 twin, from a test run's JSON.

usage: cuda_test_errors.py GTEST_JSON --out FILE.json [--text FILE.txt]

GTEST_JSON is `test_cuda --gtest_output=json:FILE` (scripts/gpu_check.sh runs it after ctest).
The tests record, per checked output, err_NAME = ||got - ref||_2 / ||ref||_2 and
maxerr_NAME = max |got - ref| (tests/model/model_test_util.hpp record_error). This groups them by
kernel (the test case's op, or the test's suite) and keeps the worst over that kernel's cases, so
the table reads: "rmsnorm, output dx: relative L2 error at most 3e-7 over its 4 shapes".
A test without recorded errors (contract and refusal tests) is left out; a failed test is listed
with its failure, so the table never hides one.
"""
import argparse
import json
import re
import sys


def kernel_of(suite: str, name: str) -> str:
    # Registry cases: ".../cuda_rmsnorm_t6_c24" -> "rmsnorm"; attention cases:
    # "bf16_d64_hq4_hkv2_causal_..." -> "attention bf16 d64".
    last = name.split("/")[-1]
    m = re.match(r"(?:cuda|cpu|ref)_([a-z_]+?)_[tnmbk]\d", last)
    if m:
        return m.group(1)
    if re.match(r"(?:cuda|cpu|ref)_attention_(full|causal)", last):
        return "attention"
    m = re.match(r"(bf16|f32)_d(\d+)_", last)
    if "Attention" in suite and m:
        return f"attention {m.group(1)} d{m.group(2)}"
    return suite.split("/")[-1].removeprefix("Cuda").lower()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("gtest_json")
    ap.add_argument("--out", required=True)
    ap.add_argument("--text")
    a = ap.parse_args()
    with open(a.gtest_json) as f:
        run = json.load(f)
    table: dict = {}
    failed = []
    for suite in run.get("testsuites", []):
        for t in suite.get("testsuite", []):
            full = f'{suite["name"]}.{t["name"]}'
            if t.get("failures"):
                failed.append(full)
            k = kernel_of(suite["name"], t["name"])
            for key, val in t.items():
                if not key.startswith("err_"):
                    continue
                out = key[4:]
                row = table.setdefault((k, out), {"kernel": k, "output": out, "cases": 0,
                                                  "rel_l2_max": 0.0, "max_abs_max": 0.0})
                row["cases"] += 1
                rel = float(val)
                mx = float(t.get("maxerr_" + out, "nan"))
                # NaN is the worst error there is: keep it visible.
                row["rel_l2_max"] = rel if rel != rel else max(row["rel_l2_max"], rel)
                row["max_abs_max"] = mx if mx != mx else max(row["max_abs_max"], mx)
    rows = sorted(table.values(), key=lambda r: (r["kernel"], r["output"]))
    doc = {"source": a.gtest_json, "tests": run.get("tests"), "failures": run.get("failures"),
           "failed": failed, "rows": rows}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    lines = [f'{"kernel":28s} {"output":10s} {"cases":>5s} {"rel L2 (max)":>13s} {"max |err|":>10s}']
    for r in rows:
        lines.append(f'{r["kernel"]:28s} {r["output"]:10s} {r["cases"]:5d} '
                     f'{r["rel_l2_max"]:13.2e} {r["max_abs_max"]:10.2e}')
    if failed:
        lines.append("FAILED: " + ", ".join(failed))
    text = "\n".join(lines) + "\n"
    if a.text:
        with open(a.text, "w") as f:
            f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
