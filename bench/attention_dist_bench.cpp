// Distributed attention benchmarks (issue "Distributed attention I"), JSON out:
//   (a) efficiency: forward+backward wall time against the ideal, i.e. the same per-rank chunk
//       pairs computed by the same block kernels at the same thread budget with no communication
//       (all data already local), ranks running concurrently as in the real run;
//   (b) link model, 2 nodes, inter-node link 8x slower than intra: double-ring vs flat ring, and
//       burst's backward vs ring's for MHA and for GQA g = 4;
//   (c) sliding window W = N/8 against causal at the same N;
//   (d) precision: bf16 against f32 (AttentionSpec::precision), causal, zigzag, ring and burst,
//       worlds 2 and 4, both precisions measured in one run, interleaved, best of --reps.
// --precision sets the precision of (a), (b) and (c) (the ideal of (a) runs the same kernels).
// Usage: attention_dist_bench [--n 32768] [--hq 8] [--d 128] [--out bench_attention_dist.json]
//        [--only a|b|c|d] [--link-n 8192] [--intra 1GB/s] [--precision f32|bf16] [--reps 1]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "longseq/attention/block_ops.hpp"
#include "longseq/attention/distributed.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/core/timer.hpp"

using namespace longseq;
using namespace longseq::attention;
using nlohmann::json;

namespace {

struct Inputs {
  int64_t n, hq, hkv, d;
  std::vector<float> q, k, v, dout;
  Inputs(int64_t n_, int64_t hq_, int64_t hkv_, int64_t d_) : n(n_), hq(hq_), hkv(hkv_), d(d_) {
    q.resize(n * hq * d);
    k.resize(n * hkv * d);
    v.resize(n * hkv * d);
    dout.resize(n * hq * d);
    core::fill_normal(q.data(), q.size(), 11);
    core::fill_normal(k.data(), k.size(), 12);
    core::fill_normal(v.data(), v.size(), 13);
    core::fill_normal(dout.data(), dout.size(), 14, 0, 0.0, 0.01);
  }
};

struct Shards {
  std::vector<float> q, k, v, dout;
  Shards(const Inputs& in, const Layout& layout, int r) {
    const int64_t l = layout.local_len();
    q.resize(l * in.hq * in.d);
    k.resize(l * in.hkv * in.d);
    v.resize(l * in.hkv * in.d);
    dout.resize(l * in.hq * in.d);
    layout.shard(in.q.data(), in.hq * in.d, r, q.data());
    layout.shard(in.k.data(), in.hkv * in.d, r, k.data());
    layout.shard(in.v.data(), in.hkv * in.d, r, v.data());
    layout.shard(in.dout.data(), in.hq * in.d, r, dout.data());
  }
};

struct Run {
  double fwd_s = 0, bwd_s = 0;
  std::vector<json> ranks;
};

// The real distributed run: wall time of each pass = slowest rank, between barriers.
Run run_distributed(const Inputs& in, const AttentionSpec& spec, Balance bal, int world, int nodes,
                    const comm::LinkModel& link) {
  const Layout layout(bal, in.n, world, spec.mask->block_size);
  std::vector<Shards> shards;
  for (int r = 0; r < world; ++r) shards.emplace_back(in, layout, r);
  Run run;
  run.ranks.resize(world);
  std::vector<double> fwd(world), bwd(world);
  comm::Options opt;
  opt.backend = "local";
  opt.world = world;
  opt.nodes = nodes;
  opt.link = link;
  comm::run(opt, [&](comm::Group& g) {
    const int r = g.rank();
    const int64_t l = layout.local_len();
    Shards& s = shards[r];
    core::View<const float> q(s.q.data(), core::Shape{l, in.hq, in.d}),
        k(s.k.data(), core::Shape{l, in.hkv, in.d}), v(s.v.data(), core::Shape{l, in.hkv, in.d}),
        d(s.dout.data(), core::Shape{l, in.hq, in.d});
    AttentionStats fs, bs;
    prepare(spec, layout, g);  // schedules and sub-groups, outside the timed passes
    g.barrier();
    g.reset_rank_stats();  // every group of the rank: the collectives' sub-groups too
    core::Timer t;
    AttentionSaved saved = distributed_attention_forward(q, k, v, spec, layout, g, &fs);
    g.barrier();
    fwd[r] = t.elapsed();
    const comm::Stats fst = g.rank_stats();
    g.reset_rank_stats();
    t.restart();
    AttentionGrads grads = distributed_attention_backward(d, saved, spec, layout, g, &bs);
    g.barrier();
    bwd[r] = t.elapsed();
    const comm::Stats bst = g.rank_stats();
    run.ranks[r] = {
        {"rank", r},
        {"forward", {{"compute_s", fs.compute_s}, {"wait_s", fs.wait_s}, {"bytes", fst.to_json()}}},
        {"backward",
         {{"compute_s", bs.compute_s}, {"wait_s", bs.wait_s}, {"bytes", bst.to_json()}}}};
  });
  run.fwd_s = *std::max_element(fwd.begin(), fwd.end());
  run.bwd_s = *std::max_element(bwd.begin(), bwd.end());
  return run;
}

// x in the kernels' input type T (bf16: rounded to nearest even, as the executor does).
template <class T>
std::vector<T> as(const std::vector<float>& x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    std::vector<T> y(x.size());
    core::f32_to_bf16(x.data(), y.data(), x.size());
    return y;
  }
}

// The ideal: every rank computes exactly its schedule's chunk pairs with the same kernels (T: the
// spec's precision) and thread budget, all ranks at once, but every operand is already local (no
// transfer, no wait).
template <class T>
Run run_ideal_as(const Inputs& in, const AttentionSpec& spec, Balance bal, int world) {
  const Layout layout(bal, in.n, world, spec.mask->block_size);
  const longseq::comm::Topology topo(world);
  const PairTable pairs(layout, *spec.mask);
  struct Typed {
    std::vector<T> q, k, v, dout;
  };
  std::vector<Typed> sh;
  for (int r = 0; r < world; ++r) {
    const Shards s(in, layout, r);
    sh.push_back({as<T>(s.q), as<T>(s.k), as<T>(s.v), as<T>(s.dout)});
  }
  const int64_t l = layout.local_len(), hq = in.hq, hkv = in.hkv, d = in.d;
  std::vector<std::vector<float>> o(world), lse(world), dvec(world);
  std::vector<std::vector<int64_t>> pos(world);
  std::vector<std::vector<int32_t>> doc(world);
  for (int r = 0; r < world; ++r) {
    pos[r] = layout.positions(r);
    if (!spec.mask->doc_ids.empty())
      for (int64_t p : pos[r]) doc[r].push_back(p >= 0 ? spec.mask->doc_ids[p] : -1);
  }
  auto tok = [&](int r, int64_t b) {
    return kernels::Tokens{pos[r].data() + b, doc[r].empty() ? nullptr : doc[r].data() + b};
  };
  const kernels::Mask km = spec.mask->kernel_mask();
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> fwd(world), bwd(world);
  comm::Options opt;
  opt.backend = "local";
  opt.world = world;
  comm::run(opt, [&](comm::Group& g) {
    const int r = g.rank();
    BlockOps ops(hq, hkv, d, scale, spec.threads);
    const RankSchedule fs = make_schedule(r, topo, layout, pairs, spec.algo, Pass::forward);
    o[r].assign(l * hq * d, 0.f);
    lse[r].assign(l * hq, -INFINITY);
    g.barrier();
    core::Timer t;
    for (const Work& w : fs.work)
      for (const SubPair& p : w.pairs) {
        const Chunk& qc = layout.chunks(r)[p.qc];
        const Chunk& kc = layout.chunks(w.origin)[p.kc];
        ops.forward_merge(
            sh[r].q.data() + qc.local_begin * hq * d, tok(r, qc.local_begin), qc.len,
            sh[w.origin].k.data() + kc.local_begin * hkv * d,
            sh[w.origin].v.data() + kc.local_begin * hkv * d, tok(w.origin, kc.local_begin), kc.len,
            km, o[r].data() + qc.local_begin * hq * d, lse[r].data() + qc.local_begin * hq);
      }
    fwd[r] = t.elapsed();
    dvec[r].resize(l * hq);
    ops.compute_d(o[r].data(), sh[r].dout.data(), l, dvec[r].data());
    g.barrier();  // every rank's lse and D are ready (burst reads remote ones)
    const RankSchedule bs = make_schedule(r, topo, layout, pairs, spec.algo, Pass::backward);
    std::vector<float> dq(l * hq * d), dk(l * hkv * d), dv(l * hkv * d), gq(l * hq * d),
        gk(l * hkv * d), gv(l * hkv * d);
    t.restart();
    for (const Work& w : bs.work)
      for (const SubPair& p : w.pairs) {
        const bool bq = spec.algo.backward == Backward::q;
        const int qr = bq ? w.origin : r, kr = bq ? r : w.origin;
        const Chunk& qc = layout.chunks(qr)[p.qc];
        const Chunk& kc = layout.chunks(kr)[p.kc];
        const int64_t qo = qc.local_begin * hq * d, ro = qc.local_begin * hq,
                      ko = kc.local_begin * hkv * d;
        ops.backward(sh[qr].q.data() + qo, sh[kr].k.data() + ko, sh[kr].v.data() + ko,
                     sh[qr].dout.data() + qo, lse[qr].data() + ro, dvec[qr].data() + ro,
                     tok(qr, qc.local_begin), qc.len, tok(kr, kc.local_begin), kc.len, km,
                     (bq ? gq : dq).data() + qo, (bq ? dk : gk).data() + ko,
                     (bq ? dv : gv).data() + ko);
      }
    bwd[r] = t.elapsed();
  });
  Run run;
  run.fwd_s = *std::max_element(fwd.begin(), fwd.end());
  run.bwd_s = *std::max_element(bwd.begin(), bwd.end());
  return run;
}

Run run_ideal(const Inputs& in, const AttentionSpec& spec, Balance bal, int world) {
  return spec.precision == core::DType::bf16 ? run_ideal_as<core::bf16>(in, spec, bal, world)
                                             : run_ideal_as<float>(in, spec, bal, world);
}

// Bytes rank 0 sent in one pass (intra + inter), from Run::ranks.
int64_t sent_bytes(const Run& r, const char* pass) {
  const json& s = r.ranks[0][pass]["bytes"]["sent"];
  return s["intra"]["bytes"].get<int64_t>() + s["inter"]["bytes"].get<int64_t>();
}

std::string arg(int argc, char** argv, const char* name, const char* def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}

// The precision of sections (a)-(c) (--precision).
core::DType g_precision = core::DType::f32;

AttentionSpec make_spec(const char* algo, const std::shared_ptr<MaskSpec>& mask, int threads,
                        core::DType precision = g_precision) {
  AttentionSpec s;
  s.algo = Algorithm::parse(algo);
  s.mask = mask;
  s.threads = threads;
  s.precision = precision;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = std::stoll(arg(argc, argv, "--n", "32768"));
  const int64_t hq = std::stoll(arg(argc, argv, "--hq", "8"));
  const int64_t d = std::stoll(arg(argc, argv, "--d", "128"));
  const int64_t link_n = std::stoll(arg(argc, argv, "--link-n", "8192"));
  const std::string only = arg(argc, argv, "--only", "abc");
  const std::string out = arg(argc, argv, "--out", "bench_attention_dist.json");
  const std::string intra_bw = arg(argc, argv, "--intra", "1GB/s");
  const std::string precision = arg(argc, argv, "--precision", "f32");
  const int reps = std::stoi(arg(argc, argv, "--reps", "1"));
  if (precision != "f32" && precision != "bf16") {
    std::fprintf(stderr, "[bench] --precision '%s' is not f32 or bf16\n", precision.c_str());
    return 2;
  }
  g_precision = core::dtype_from_name(precision);
  json report = {{"n", n}, {"hq", hq}, {"d", d}, {"cores", 2}, {"precision", precision}};
  auto causal = std::make_shared<MaskSpec>();
  causal->causal = true;

  if (only.find('a') != std::string::npos) {
    // (a) Efficiency vs ideal, no link model. Two cores: world 2 runs 1 thread per rank;
    // world 4 also 1 thread per rank (4 ranks share the 2 cores, in the ideal too).
    const Inputs in(n, hq, hq, d);
    json rows = json::array();
    for (const char* algo : {"ring", "burst"})
      for (Balance bal : {Balance::zigzag, Balance::striped})
        for (int world : {2, 4}) {
          const AttentionSpec spec = make_spec(algo, causal, 1);
          const Run ideal = run_ideal(in, spec, bal, world);
          const Run real = run_distributed(in, spec, bal, world, 1, {});
          const double eff = (ideal.fwd_s + ideal.bwd_s) / (real.fwd_s + real.bwd_s);
          std::printf(
              "(a) %-5s %-8s world %d: real %.2f s (fwd %.2f, bwd %.2f), ideal %.2f s -> "
              "efficiency %.1f%%\n",
              algo, std::string(balance_name(bal)).c_str(), world, real.fwd_s + real.bwd_s,
              real.fwd_s, real.bwd_s, ideal.fwd_s + ideal.bwd_s, 100 * eff);
          std::fflush(stdout);
          rows.push_back({{"algo", algo},
                          {"balance", balance_name(bal)},
                          {"world", world},
                          {"mask", "causal"},
                          {"real_fwd_s", real.fwd_s},
                          {"real_bwd_s", real.bwd_s},
                          {"ideal_fwd_s", ideal.fwd_s},
                          {"ideal_bwd_s", ideal.bwd_s},
                          {"efficiency", eff},
                          {"target", 0.85},
                          {"ranks", real.ranks}});
        }
    report["efficiency"] = rows;
  }

  if (only.find('b') != std::string::npos) {
    // (b) Link model: 4 ranks on 2 nodes; inter-node link 8x slower than intra-node.
    const double intra = comm::parse_bandwidth(intra_bw);
    comm::LinkModel link;
    link.intra = {5e-6, intra};
    link.inter = {40e-6, intra / 8};
    json rows = json::array();
    for (int64_t hkv : {hq, hq / 4}) {
      const Inputs in(link_n, hq, hkv, d);
      for (const char* algo : {"ring", "burst", "double-ring:ring", "double-ring"}) {
        const Run r = run_distributed(in, make_spec(algo, causal, 1), Balance::zigzag, 4, 2, link);
        std::printf("(b) Hq %lld Hkv %lld %-16s fwd %.3f s  bwd %.3f s  total %.3f s\n",
                    static_cast<long long>(hq), static_cast<long long>(hkv), algo, r.fwd_s, r.bwd_s,
                    r.fwd_s + r.bwd_s);
        std::fflush(stdout);
        rows.push_back({{"algo", algo},
                        {"hq", hq},
                        {"hkv", hkv},
                        {"n", link_n},
                        {"world", 4},
                        {"nodes", 2},
                        {"link", link.str()},
                        {"fwd_s", r.fwd_s},
                        {"bwd_s", r.bwd_s},
                        {"ranks", r.ranks}});
      }
    }
    report["link_model"] = rows;
  }

  if (only.find('c') != std::string::npos) {
    // (c) Sliding window W = N/8 vs causal, same N, 4 ranks, burst. Each mask on the layout that
    // balances it: zigzag for causal, contiguous for the window (every rank needs only itself and
    // its predecessor).
    const Inputs in(n, hq, hq, d);
    auto window = std::make_shared<MaskSpec>();
    window->window = n / 8;
    const Run c = run_distributed(in, make_spec("burst", causal, 1), Balance::zigzag, 4, 1, {});
    const Run w = run_distributed(in, make_spec("burst", window, 1), Balance::contiguous, 4, 1, {});
    const double speedup = (c.fwd_s + c.bwd_s) / (w.fwd_s + w.bwd_s);
    std::printf("(c) causal %.2f s, window N/8 %.2f s: %.2fx faster (target >= 3x)\n",
                c.fwd_s + c.bwd_s, w.fwd_s + w.bwd_s, speedup);
    report["window"] = {{"causal_s", c.fwd_s + c.bwd_s},
                        {"window_s", w.fwd_s + w.bwd_s},
                        {"window", n / 8},
                        {"speedup", speedup},
                        {"target", 3.0},
                        {"causal_ranks", c.ranks},
                        {"window_ranks", w.ranks}};
  }
  if (only.find('d') != std::string::npos) {
    // (d) bf16 against f32: the same inputs and schedule, 1 thread per rank. The two precisions
    // alternate within each repetition so drift in the machine's load hits both alike; the best
    // repetition of each is kept.
    const Inputs in(n, hq, hq, d);
    json rows = json::array();
    for (const char* algo : {"burst", "ring"})
      for (int world : {2, 4}) {
        Run best[2];
        for (int rep = 0; rep < reps; ++rep)
          for (int i = 0; i < 2; ++i) {
            const core::DType p = i == 0 ? core::DType::f32 : core::DType::bf16;
            Run r =
                run_distributed(in, make_spec(algo, causal, 1, p), Balance::zigzag, world, 1, {});
            if (rep == 0 || r.fwd_s + r.bwd_s < best[i].fwd_s + best[i].bwd_s)
              best[i] = std::move(r);
          }
        const Run& f = best[0];
        const Run& b = best[1];
        const double t_ratio = (b.fwd_s + b.bwd_s) / (f.fwd_s + f.bwd_s);
        const double fb_ratio =
            static_cast<double>(sent_bytes(b, "forward")) / sent_bytes(f, "forward");
        const double bb_ratio =
            static_cast<double>(sent_bytes(b, "backward")) / sent_bytes(f, "backward");
        std::printf(
            "(d) %-5s world %d: f32 %.2f s (fwd %.2f, bwd %.2f), bf16 %.2f s (fwd %.2f, bwd %.2f): "
            "time bf16/f32 %.2f (fwd %.2f, bwd %.2f), bytes bf16/f32 fwd %.3f bwd %.3f\n",
            algo, world, f.fwd_s + f.bwd_s, f.fwd_s, f.bwd_s, b.fwd_s + b.bwd_s, b.fwd_s, b.bwd_s,
            t_ratio, b.fwd_s / f.fwd_s, b.bwd_s / f.bwd_s, fb_ratio, bb_ratio);
        std::fflush(stdout);
        rows.push_back({{"algo", algo},
                        {"balance", "zigzag"},
                        {"world", world},
                        {"mask", "causal"},
                        {"reps", reps},
                        {"f32_fwd_s", f.fwd_s},
                        {"f32_bwd_s", f.bwd_s},
                        {"bf16_fwd_s", b.fwd_s},
                        {"bf16_bwd_s", b.bwd_s},
                        {"time_ratio", t_ratio},
                        {"fwd_bytes_ratio", fb_ratio},
                        {"bwd_bytes_ratio", bb_ratio},
                        {"f32_ranks", f.ranks},
                        {"bf16_ranks", b.ranks}});
      }
    report["precision_compare"] = rows;
  }
  std::ofstream(out) << report.dump(2) << "\n";
  std::printf("wrote %s\n", out.c_str());
  return 0;
}
