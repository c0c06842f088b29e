"""What a process of a CUDA build pays to start, with and without cuBLASLt mapped at start.

Until round 4 every binary of a CUDA build listed libcublasLt.so.13 (540 MB) as NEEDED, so each
`longseq` command, test process and `import longseq` mapped and relocated it before main(), GPU
or not. kernels/cuda/cublaslt.hpp now opens it on the first GPU product. "at start" below is the
same binary with LD_PRELOAD of that library: the loader then does at start exactly what the
NEEDED entry made it do (it is how the earlier build behaved, without keeping that build).

    /usr/bin/python3 bench/process_start.py --build build --runs 20 \\
        --out docs/results/bench_process_start_xeon.json

Per command: the median and min wall seconds of --runs runs, each a fresh process, the two
conditions taking turns. Writes JSON (bench/ rule: no timed tests).
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def find_cublaslt():
    """The library the loader opens (ld.so's cache, then the toolkit's usual directories)."""
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "libcublasLt.so." in line and "=>" in line:
            return line.split("=>")[1].strip()
    for d in ("/usr/local/cuda/lib64", "/usr/local/cuda/lib"):
        for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if f.startswith("libcublasLt.so.") and f.count(".") == 2:
                return os.path.join(d, f)
    return None


def needed(path):
    r = subprocess.run(["readelf", "-d", path], capture_output=True, text=True)
    return [ln.split("[")[1].rstrip("]") for ln in r.stdout.splitlines() if "(NEEDED)" in ln]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    lib = find_cublaslt()
    if lib is None:
        sys.exit("process_start: no libcublasLt.so.N found (a CUDA toolkit is needed)")
    b = os.path.abspath(a.build)
    commands = {
        "longseq --help": [f"{b}/cli/longseq", "--help"],
        "longseq schedule --algo ring --world 4": [f"{b}/cli/longseq", "schedule", "--algo",
                                                   "ring", "--world", "4"],
        "test_train --gtest_filter=None": [f"{b}/tests/test_train", "--gtest_filter=None"],
        "python3 -c 'import longseq'": ["/usr/bin/python3", "-c", "import longseq"],
    }
    env = dict(os.environ, PYTHONPATH=f"{b}/python")
    env.pop("LD_PRELOAD", None)
    rows = []
    for name, cmd in commands.items():
        times = {"lazy (this build)": [], "at start (LD_PRELOAD)": []}
        for _ in range(a.runs):
            for cond in times:
                e = dict(env, LD_PRELOAD=lib) if cond.startswith("at start") else env
                t0 = time.perf_counter()
                subprocess.run(cmd, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               check=True)
                times[cond].append(time.perf_counter() - t0)
        row = {"command": name, "runs": a.runs}
        for cond, ts in times.items():
            row[cond] = {"median_s": statistics.median(ts), "min_s": min(ts)}
        row["saved_median_s"] = (row["at start (LD_PRELOAD)"]["median_s"]
                                 - row["lazy (this build)"]["median_s"])
        rows.append(row)
        print(f"{name}: lazy {row['lazy (this build)']['median_s'] * 1e3:.1f} ms, at start "
              f"{row['at start (LD_PRELOAD)']['median_s'] * 1e3:.1f} ms (medians)")
    binaries = {p: needed(f"{b}/{p}") for p in ("cli/longseq", "tests/test_train")}
    result = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "cpu": cpu_name(), "cores": os.cpu_count(), "load_avg": os.getloadavg(),
        "cublaslt": lib, "cublaslt_bytes": os.path.getsize(os.path.realpath(lib)),
        "needed_by": {p: [n for n in v if "cublas" in n] for p, v in binaries.items()},
        "rows": rows,
    }
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
