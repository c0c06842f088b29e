#!/usr/bin/python3
"""Attention from Python against the same kernels from C++ and against PyTorch's naive attention
(issue "Python": within 5% of C++ at T = 8192, H = 8, D = 128, causal, forward + backward; the
call overhead at T = 128 in microseconds). Writes JSON (--out) and prints a table.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_attention.py --build build \
        --out docs/results/bench_python_attention.json

Four readings of one case, each in a process of its own so its peak memory is its own:
  cpp     build/bench/attention_kernel_bench --entry both (kernels/cpu's block kernels on the
          whole sequence, fp32, the same threads): forward, and forward + D + backward; and, in
          turn within each repetition of the same process, local_attention_* (below), whose
          ratio to the block kernels is thus taken under the same load ("cpp_local_in_turn");
  cpp_local  the same bench with --entry local: attention::local_attention_forward/backward,
          the C++ function the package calls (the backward over chunks of query rows, so no
          scratch grows with T), from C++. python / cpp_local is what the binding costs,
          cpp_local / cpp what the row chunks cost;
  python  longseq.attention.forward / backward from Python on torch tensors (what
          longseq.torch.attention's autograd calls), the same threads;
  torch   bench/attention_torch_naive.py: q k^T, masked_fill, softmax, p v and autograd (torch
          1.13 has no scaled_dot_product_attention), torch.set_num_threads(threads).
Rounds: --rounds times python, cpp, cpp_local in turn, so drifting load hits all alike; each
reading is its best over every round. Timings: best of --reps, wall seconds and process CPU seconds / threads (what idle cores would
take; the machine may be shared, and the 1-minute load average is recorded). Peak memory: the
process's VmHWM above its level once the inputs exist (outputs and workspaces included; the
C++ bench states its allocations instead of measuring them).

The paired readings (PAIRED_CASE below): in one process, on one set of tensors, the C++ calls
the package makes timed in C++ (longseq._core.time_local_attention), the same through
longseq.attention into existing outputs ("binding"), and longseq.torch.attention with autograd
take turns --pairs times (the order rotating); the median of the per-round ratios is the reading
least moved by the machine's drifting load. The same at T = --small-t on --small-threads for
--small-pairs rounds gives the call overhead as the median per-round difference in µs.
In-call ("*_in_call"): each Python call's wall time against the seconds the engine's call spent
inside that same call (longseq._core.engine_seconds(), two clock reads around the C++ function
with the GIL released): the kernels' run-to-run noise is in both, so the difference is the
binding's own work (argument conversion, DLPack, checks; with autograd, torch's graph and
allocations), and the ratio what a Python caller pays over a C++ caller of the same function.

The overhead: T = 128 (H = 8, D = 128, causal) on one thread (--small-threads: no OpenMP
hand-off, which on a busy machine costs a scheduler slice per parallel region and would swamp
what is measured), median of --calls calls of the Python forward, minus the C++ bench's forward
at the same shape and threads (its best of 20).
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))

PY_CASE = textwrap.dedent("""
    import json, statistics, sys, time
    import torch
    import longseq
    t, h, d, mask, threads, reps, calls = sys.argv[1:8]
    t, h, d, threads, reps, calls = int(t), int(h), int(d), int(threads), int(reps), int(calls)
    def hwm():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn(t, h, d, generator=g) for _ in range(4))
    m = longseq.Mask(mask)
    base = hwm()  # the inputs exist; everything above this is the calls' (outputs, workspace)
    o, lse = longseq.attention.forward(q, k, v, m, threads=threads)   # warm-up
    fwd_peak = hwm() - base
    longseq.attention.backward(do, q, k, v, o, lse, m, threads=threads)
    # The forward into outputs that already exist: the C++ bench's situation (its buffers are
    # touched once); fresh outputs each call, as autograd has them, pay their pages' first touch.
    fwd_reuse = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        longseq.attention.forward(q, k, v, m, threads=threads, out=o, lse=lse)
        fwd_reuse = min(fwd_reuse, time.perf_counter() - t0)
    # The same for forward + backward: every output already exists (the C++ bench's situation).
    dq, dk, dv = (torch.zeros_like(x) for x in (q, k, v))
    fb_reuse = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        longseq.attention.forward(q, k, v, m, threads=threads, out=o, lse=lse)
        longseq.attention.backward(do, q, k, v, o, lse, m, threads=threads, dq=dq, dk=dk, dv=dv)
        fb_reuse = min(fb_reuse, time.perf_counter() - t0)
    del o, lse, dq, dk, dv
    fwd = fb = fwd_cpu = fb_cpu = float("inf")
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        o, lse = longseq.attention.forward(q, k, v, m, threads=threads)
        fwd = min(fwd, time.perf_counter() - t0)
        fwd_cpu = min(fwd_cpu, (time.process_time() - c0) / threads)
        del o, lse
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        o, lse = longseq.attention.forward(q, k, v, m, threads=threads)
        dq, dk, dv = longseq.attention.backward(do, q, k, v, o, lse, m, threads=threads)
        fb = min(fb, time.perf_counter() - t0)
        fb_cpu = min(fb_cpu, (time.process_time() - c0) / threads)
        del o, lse, dq, dk, dv
    per_call = []
    for _ in range(calls):
        t0 = time.perf_counter()
        longseq.attention.forward(q, k, v, m, threads=threads)
        per_call.append(time.perf_counter() - t0)
    print(json.dumps({"fwd_s": fwd, "fwdbwd_s": fb, "fwd_reuse_s": fwd_reuse, "fwdbwd_reuse_s": fb_reuse,
                      "fwd_cpu_s": fwd_cpu, "fwdbwd_cpu_s": fb_cpu,
                      "fwd_median_s": statistics.median(per_call) if per_call else None,
                      "fwd_min_s": min(per_call) if per_call else None,
                      "fwd_peak_extra_bytes": fwd_peak,
                      "fwdbwd_peak_extra_bytes": hwm() - base}))
""")

# The paired reading: in one process, on one set of tensors, three calls of the same case take
# turns (the order rotating each round, so drift hits each alike): the C++ calls the package
# makes, timed in C++ around the calls alone (longseq._core.time_local_attention); the same
# through longseq.attention.forward / backward into existing outputs; and longseq.torch.attention
# with autograd (fresh outputs and gradients each call, as a model has them). A round's ratio
# divides two calls a few seconds apart, so load that drifts over minutes cancels; the median over
# rounds is the reading.
PAIRED_CASE = textwrap.dedent("""
    import json, statistics, sys, time
    import torch
    import longseq, longseq.torch as lt
    t, h, d, mask, threads, rounds = sys.argv[1:7]
    t, h, d, threads, rounds = int(t), int(h), int(d), int(threads), int(rounds)
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn(t, h, d, generator=g) for _ in range(4))
    m = longseq.Mask(mask)
    bound = m.bind(t)
    o, lse = torch.zeros(t, h, d), torch.zeros(t, h)
    dq, dk, dv = (torch.zeros_like(x) for x in (q, k, v))
    qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
    def cpp():
        return longseq._core.time_local_attention(q, k, v, do, o, lse, dq, dk, dv, bound, threads)
    engine = longseq._core.engine_seconds
    inside = {"binding": [], "autograd": []}  # per call: the engine's own seconds (fwd, fwd+bwd)
    def python_call(name, fwd, bwd):
        # Wall seconds of fwd() and of fwd() + bwd(its result), the engine's read between them
        # and after (outside both timings); the engine's own seconds go to inside[name].
        t0 = time.perf_counter()
        r = fwd()
        t1 = time.perf_counter()
        ef = engine()[0]
        t2 = time.perf_counter()
        bwd(r)
        t3 = time.perf_counter()
        inside[name].append((ef, ef + engine()[1]))
        return t1 - t0, (t1 - t0) + (t3 - t2)
    def binding():
        return python_call(
            "binding", lambda: longseq.attention.forward(q, k, v, m, threads=threads, out=o, lse=lse),
            lambda _: longseq.attention.backward(do, q, k, v, o, lse, m, threads=threads, dq=dq,
                                                 dk=dk, dv=dv))
    def autograd():
        qg.grad = kg.grad = vg.grad = None
        return python_call("autograd", lambda: lt.attention(qg, kg, vg, mask=m, threads=threads),
                           lambda out: out.backward(do))
    calls = {"cpp": cpp, "binding": binding, "autograd": autograd}
    names = list(calls)
    for f in calls.values():  # warm-up: thread pools, first touch of the outputs
        f()
    got = {n: [] for n in names}
    for n in inside:  # the warm-up's calls are not counted
        inside[n].clear()
    for r in range(rounds):
        for i in range(len(names)):
            n = names[(r + i) % len(names)]
            got[n].append(calls[n]())
    out = {"rounds": rounds}
    for n in names:
        out[n] = {"fwd_s": [x[0] for x in got[n]], "fwdbwd_s": [x[1] for x in got[n]]}
    for n in ("binding", "autograd"):
        for part in ("fwd_s", "fwdbwd_s"):
            ratios = [a / b for a, b in zip(out[n][part], out["cpp"][part])]
            diffs = [a - b for a, b in zip(out[n][part], out["cpp"][part])]
            out[n][part + "_over_cpp"] = {"median": statistics.median(ratios),
                                          "min": min(ratios), "max": max(ratios),
                                          "best_over_best": min(out[n][part]) / min(out["cpp"][part])}
            out[n][part + "_minus_cpp_us"] = 1e6 * statistics.median(diffs)
            # In-call: each call's wall time against the engine's seconds inside that same call,
            # so the kernels' run-to-run noise cancels; what is left is the binding's own work.
            j = 0 if part == "fwd_s" else 1
            walls = out[n][part]
            ins = [x[j] for x in inside[n]]
            out[n][part + "_engine"] = ins
            out[n][part + "_in_call"] = {
                "over_engine_median": statistics.median(w / e for w, e in zip(walls, ins)),
                "overhead_us_median": 1e6 * statistics.median(w - e for w, e in zip(walls, ins)),
                "overhead_us_min": 1e6 * min(w - e for w, e in zip(walls, ins))}
    print(json.dumps(out))
""")


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"[bench] {' '.join(cmd)} failed:\n{r.stderr}")
    return r.stdout


def run_json(cmd, env=None):
    out = run(cmd, env)
    return json.loads(out[out.find("{"):])


def cpp_case(a, t, reps, entry="block"):
    path = os.path.join(a.tmp, f"cpp_{entry}_{t}.json")
    run([os.path.join(a.build, "bench", "attention_kernel_bench"), "--t", str(t), "--d",
         str(a.d), "--heads", str(a.h), "--mask", a.mask, "--dtype", "f32", "--threads",
         str(a.threads), "--reps", str(reps), "--no-torch", "--entry", entry, "--out", path])
    with open(path) as f:
        return json.load(f)["cases"][0]


def py_case(a, t, reps, calls):
    env = dict(os.environ, PYTHONPATH=os.path.join(a.build, "python"))
    return run_json([sys.executable, "-c", PY_CASE, str(t), str(a.h), str(a.d), a.mask,
                     str(a.threads), str(reps), str(calls)], env)


def paired_case(a, t, threads, rounds):
    env = dict(os.environ, PYTHONPATH=os.path.join(a.build, "python"))
    return run_json([sys.executable, "-c", PAIRED_CASE, str(t), str(a.h), str(a.d), a.mask,
                     str(threads), str(rounds)], env)


def across_processes(a, res):
    """The readings each in a process of its own (python, cpp, cpp_local, torch) and the
    best-against-best overhead at the small shape, into res."""
    # Interleaved so drifting load hits every reading alike: python, cpp, cpp_local, python, ...
    pys, cpps, locals_ = [], [], []
    for _ in range(a.rounds):
        pys.append(py_case(a, a.t, a.reps, 0))
        cpps.append(cpp_case(a, a.t, a.reps, "both"))
        locals_.append(cpp_case(a, a.t, a.reps, "local"))
    best = lambda k, xs: min(x[k] for x in xs)  # noqa: E731
    timings = ("fwd_s", "fwdbwd_s", "fwd_cpu_s", "fwdbwd_cpu_s")
    py = {k: best(k, pys) for k in timings + ("fwd_reuse_s", "fwdbwd_reuse_s")}
    py["fwd_peak_extra_bytes"] = max(x["fwd_peak_extra_bytes"] for x in pys)
    py["fwdbwd_peak_extra_bytes"] = max(x["fwdbwd_peak_extra_bytes"] for x in pys)
    py["rounds_fwdbwd_s"] = [x["fwdbwd_s"] for x in pys]
    cpp = {k: best(k, cpps) for k in timings}
    cpp["extra_bytes"] = cpps[0]["extra_bytes"]
    cpp["rounds_fwdbwd_s"] = [x["fwdbwd_s"] for x in cpps]
    # local_attention_* timed in turn with the block kernels in the same process.
    in_turn = {k: min(x["local_in_turn"][k] for x in cpps) for k in timings}
    in_turn["over_block_fwd_s"] = in_turn["fwd_s"] / cpp["fwd_s"]
    in_turn["over_block_fwdbwd_s"] = in_turn["fwdbwd_s"] / cpp["fwdbwd_s"]
    in_turn["rounds_over_block_fwdbwd_s"] = [x["local_in_turn"]["over_block_fwdbwd_s"]
                                             for x in cpps]
    cpp_local = {k: best(k, locals_) for k in timings}
    cpp_local["extra_bytes"] = max(x["extra_bytes"] for x in locals_)
    cpp_local["rounds_fwdbwd_s"] = [x["fwdbwd_s"] for x in locals_]
    torch_naive = run_json([sys.executable, os.path.join(HERE, "attention_torch_naive.py"),
                            "--t", str(a.t), "--h", str(a.h), "--d", str(a.d), "--mask", a.mask,
                            "--dtype", "f32", "--threads", str(a.threads), "--reps", "1"])
    res.update(python=py, cpp=cpp, cpp_local=cpp_local, cpp_local_in_turn=in_turn,
               torch_naive=torch_naive)
    res["python_over_cpp"] = {k: py[k] / cpp[k] for k in timings}
    res["python_over_cpp"]["fwd_reuse_s"] = py["fwd_reuse_s"] / cpp["fwd_s"]
    res["python_over_cpp"]["fwdbwd_reuse_s"] = py["fwdbwd_reuse_s"] / cpp["fwdbwd_s"]
    res["python_over_cpp_local"] = {k: py[k] / cpp_local[k] for k in timings}
    res["cpp_local_over_cpp"] = {k: cpp_local[k] / cpp[k] for k in timings}
    res["torch_over_python"] = {k: torch_naive[k] / py[k] for k in timings}

    small_a = argparse.Namespace(**{**vars(a), "threads": a.small_threads})
    small = py_case(small_a, a.small_t, 3, a.calls)
    small_cpp = cpp_case(small_a, a.small_t, 20)
    # Best against best (the C++ bench reports its best of 20): what the binding adds.
    res["overhead"] = {"t": a.small_t, "threads": a.small_threads,
                       "python_fwd_best_us": 1e6 * small["fwd_min_s"],
                       "python_fwd_median_us": 1e6 * small["fwd_median_s"],
                       "cpp_fwd_best_us": 1e6 * small_cpp["fwd_s"],
                       "overhead_us": 1e6 * (small["fwd_min_s"] - small_cpp["fwd_s"])}


def print_across_processes(res):
    cpp, cpp_local, py = res["cpp"], res["cpp_local"], res["python"]
    torch_naive, in_turn = res["torch_naive"], res["cpp_local_in_turn"]
    print(f"{'':9} {'fwd s':>9} {'fwd+bwd s':>10} {'cpu fwd':>9} {'cpu f+b':>9} "
          f"{'peak MiB (f+b)':>15}")
    for name, r, peak in (("cpp", cpp, cpp["extra_bytes"]),
                          ("cpp_local", cpp_local, cpp_local["extra_bytes"]),
                          ("python", py, py["fwdbwd_peak_extra_bytes"]),
                          ("torch", torch_naive, torch_naive["fwdbwd_peak_extra_bytes"])):
        print(f"{name:9} {r['fwd_s']:9.3f} {r['fwdbwd_s']:10.3f} {r['fwd_cpu_s']:9.3f} "
              f"{r['fwdbwd_cpu_s']:9.3f} {peak / 2**20:15.1f}")
    r = res["python_over_cpp"]
    print(f"python / cpp: fwd {r['fwd_s']:.3f} (into existing outputs {r['fwd_reuse_s']:.3f}), "
          f"fwd+bwd {r['fwdbwd_s']:.3f} (cpu {r['fwdbwd_cpu_s']:.3f}; into existing outputs "
          f"{r['fwdbwd_reuse_s']:.3f}); target <= 1.05")
    r, c = res["python_over_cpp_local"], res["cpp_local_over_cpp"]
    print(f"python / cpp_local (the binding): fwd {r['fwd_s']:.3f}, fwd+bwd {r['fwdbwd_s']:.3f}; "
          f"cpp_local / cpp (the row chunks): fwd {c['fwd_s']:.3f}, fwd+bwd {c['fwdbwd_s']:.3f} "
          f"across processes, {in_turn['over_block_fwd_s']:.3f} / "
          f"{in_turn['over_block_fwdbwd_s']:.3f} in turn in one process")
    o = res["overhead"]
    print(f"overhead at T={o['t']}, {o['threads']} thread: python {o['python_fwd_best_us']:.1f} us "
          f"per forward (best; median {o['python_fwd_median_us']:.1f}), C++ kernel "
          f"{o['cpp_fwd_best_us']:.1f} us (best): {o['overhead_us']:.1f} us")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", required=True)
    ap.add_argument("--t", type=int, default=8192)
    ap.add_argument("--h", type=int, default=8)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--mask", default="causal", choices=["full", "causal"])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=8,
                    help="rounds of the paired reading (three calls each, in one process)")
    ap.add_argument("--small-pairs", type=int, default=1000)
    ap.add_argument("--small-t", type=int, default=128)
    ap.add_argument("--small-threads", type=int, default=1)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--tmp", default="/tmp")
    ap.add_argument("--paired-only", action="store_true",
                    help="only the paired and in-call readings (one process each; minutes)")
    a = ap.parse_args()

    res = {"command": " ".join(sys.argv), "cpu": platform.processor() or platform.machine(),
           "shape": {"t": a.t, "h": a.h, "d": a.d, "mask": a.mask}, "threads": a.threads,
           "loadavg_start": loadavg()}
    with open("/proc/cpuinfo") as f:
        res["cpu"] = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")),
                          res["cpu"])
    info = json.loads(subprocess.run([sys.executable, "-c",
                                      "import longseq, json; print(json.dumps(longseq.info()))"],
                                     capture_output=True, text=True,
                                     env=dict(os.environ,
                                              PYTHONPATH=os.path.join(a.build, "python"))).stdout)
    res["kernel_variant"] = info["kernel_variant"]
    res["gemm"] = info["gemm"]
    if not a.paired_only:
        across_processes(a, res)
    # The paired readings: the target's case, and the overhead at the small shape.
    paired = paired_case(a, a.t, a.threads, a.pairs)
    small_paired = paired_case(a, a.small_t, a.small_threads, a.small_pairs)
    for n in ("cpp", "binding", "autograd"):  # the per-call lists of the small case are long
        for part in ("fwd_s", "fwdbwd_s"):
            small_paired[n][part] = {"median": statistics.median(small_paired[n][part]),
                                     "min": min(small_paired[n][part])}
            if n != "cpp":
                calls = small_paired[n].pop(part + "_engine")
                small_paired[n][part + "_engine"] = {"median": statistics.median(calls),
                                                     "min": min(calls)}
    res["paired"] = paired
    res["paired_small"] = small_paired
    res["loadavg_end"] = loadavg()
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)

    print(f"attention {a.mask} T={a.t} H={a.h} D={a.d}, {a.threads} threads, {res['cpu']} "
          f"({res['kernel_variant']}), load {res['loadavg_start']:.2f} -> {res['loadavg_end']:.2f}")
    if not a.paired_only:
        print_across_processes(res)
    for name, pr in (("paired", paired), ("paired_small", small_paired)):
        for n in ("binding", "autograd"):
            f, fb = pr[n]["fwd_s_over_cpp"], pr[n]["fwdbwd_s_over_cpp"]
            print(f"{name} T={a.t if name == 'paired' else a.small_t}, {pr['rounds']} rounds in one "
                  f"process, {n} / C++: fwd median {f['median']:.3f} [{f['min']:.3f}, "
                  f"{f['max']:.3f}], fwd+bwd median {fb['median']:.3f} [{fb['min']:.3f}, "
                  f"{fb['max']:.3f}]; median difference fwd {pr[n]['fwd_s_minus_cpp_us']:.1f} us, "
                  f"fwd+bwd {pr[n]['fwdbwd_s_minus_cpp_us']:.1f} us")
            f, fb = pr[n]["fwd_s_in_call"], pr[n]["fwdbwd_s_in_call"]
            print(f"  in-call ({n}'s wall over the engine's seconds inside the same call): fwd "
                  f"median {f['over_engine_median']:.4f}, {f['overhead_us_median']:.1f} us; "
                  f"fwd+bwd median {fb['over_engine_median']:.4f}, "
                  f"{fb['overhead_us_median']:.1f} us")


if __name__ == "__main__":
    main()
