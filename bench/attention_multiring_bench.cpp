// attention_multiring_bench: the multi-ring and head-parallel algorithms against the flat ones on
// local ranks with the link model: 8 ranks in 2 nodes, the inter-node link `--slow` (8) times
// slower than the intra-node one. startrail:2 (both placements) against ring and double-ring;
// ulysses and usp:2 against burst. Reports per pass the wall time (slowest rank, median of
// --reps), bytes per rank by link class (max over ranks and total), and memory: the WallFacer
// activation model (eq. (9)-(10): ring 3A, startrail 3CA for the gathered Q, K, V; A = L*Hq*D
// floats) and each algorithm's largest per-rank working set of its own buffers.
//
// Legend: N tokens, P ranks, L = N/P (padded), Hq, Hkv heads, D head dim. Writes JSON (--out).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "longseq/attention/distributed.hpp"
#include "longseq/attention/schedule.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/core/timer.hpp"

namespace {

using nlohmann::json;
namespace at = longseq::attention;
namespace comm = longseq::comm;
namespace core = longseq::core;

struct Options {
  std::string out = "bench_attention_multiring.json";
  int64_t n = 8192, hq = 8, hkv = 8, d = 64;
  int world = 8, nodes = 2, threads = 1, reps = 3;
  double slow = 8.0;
  double intra_gbps = 2.0;  // GB/s per intra-node link; inter = intra / slow
  double latency_us = 20.0;
  std::string mask = "causal", balance = "zigzag";
  std::vector<std::string> algos = {
      "ring", "double-ring", "startrail:2:teams", "startrail:2:rings", "burst", "ulysses", "usp:2"};
};

void usage() {
  std::printf(
      "attention_multiring_bench [flags]\n"
      "  --out FILE        JSON output (bench_attention_multiring.json)\n"
      "  --n N             sequence length (8192)\n"
      "  --hq H --hkv H    query / kv heads (8 / 8)\n"
      "  --d D             head dim (64)\n"
      "  --world P         ranks (8)      --nodes M   nodes (2)\n"
      "  --slow X          inter-node link X times slower than intra (8)\n"
      "  --intra-gbps B    intra-node bandwidth, GB/s (2)   --latency-us T  per message (20)\n"
      "  --mask M          full | causal (causal)    --balance B  layout (zigzag)\n"
      "  --threads T       compute threads per rank (1)     --reps R  repetitions (3)\n"
      "  --algos a,b,...   "
      "(ring,double-ring,startrail:2:teams,startrail:2:rings,burst,ulysses,usp:2)\n");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      core::require(i + 1 < argc, "bench", a, " needs a value");
      return argv[++i];
    };
    if (a == "--out")
      o.out = next();
    else if (a == "--n")
      o.n = std::stoll(next());
    else if (a == "--hq")
      o.hq = std::stoll(next());
    else if (a == "--hkv")
      o.hkv = std::stoll(next());
    else if (a == "--d")
      o.d = std::stoll(next());
    else if (a == "--world")
      o.world = std::stoi(next());
    else if (a == "--nodes")
      o.nodes = std::stoi(next());
    else if (a == "--slow")
      o.slow = std::stod(next());
    else if (a == "--intra-gbps")
      o.intra_gbps = std::stod(next());
    else if (a == "--latency-us")
      o.latency_us = std::stod(next());
    else if (a == "--mask")
      o.mask = next();
    else if (a == "--balance")
      o.balance = next();
    else if (a == "--threads")
      o.threads = std::stoi(next());
    else if (a == "--reps")
      o.reps = std::stoi(next());
    else if (a == "--algos") {
      o.algos.clear();
      std::string s = next();
      size_t b = 0;
      while (b <= s.size()) {
        const size_t e = s.find(',', b);
        o.algos.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
        if (e == std::string::npos) break;
        b = e + 1;
      }
    } else if (a == "--help" || a == "-h") {
      usage();
      std::exit(0);
    } else {
      usage();
      core::fail("bench", "unknown flag ", a);
    }
  }
  return o;
}

struct PassResult {
  double seconds = 0;  // slowest rank, median over reps
  int64_t max_intra = 0, max_inter = 0, total_intra = 0, total_inter = 0;
  double wait_s = 0, compute_s = 0;  // slowest rank's
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Largest per-rank working set of the algorithm's own buffers (floats), from the implementations
// (startrail.cpp, ulysses.cpp; the flat ones from docs/attention.md: 2-4 bundle slots).
double working_set_floats(const std::string& name, const Options& o, int64_t l) {
  const int64_t hq = o.hq, hkv = o.hkv, d = o.d;
  const at::Algorithm h = at::Algorithm::parse(name);
  if (!h.ring_family()) {
    if (h.family == at::Algorithm::Family::startrail) {
      const int64_t c = h.team, g = o.world / (c * c), kv = 2 * c * l * hkv * d;
      return static_cast<double>(c * l * hq * d + kv * (g > 1 ? 3 : 1) + c * l * hq * (d + 1));
    }
    const int u = h.family == at::Algorithm::Family::ulysses ? o.world : h.degree;
    const at::HeadSplit hs(hq, hkv, u);
    const int64_t tg = u * l, kv = 2 * tg * hs.kv_per * d, r = o.world / u;
    return static_cast<double>(tg * hs.hq_per * d + kv * (r > 1 ? 3 : 1) +
                               tg * hs.hq_per * (d + 1));
  }
  const int slots = h.route == at::Route::double_ring ? 4 : 2;
  return static_cast<double>(slots * 2 * l * hkv * d + l * hq * (d + 1));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    const at::Layout layout(at::parse_balance(o.balance), o.n, o.world);
    const int64_t l = layout.local_len();
    std::vector<float> q(o.n * o.hq * o.d), k(o.n * o.hkv * o.d), v(o.n * o.hkv * o.d),
        dout(o.n * o.hq * o.d);
    core::fill_normal(q.data(), q.size(), 1);
    core::fill_normal(k.data(), k.size(), 2);
    core::fill_normal(v.data(), v.size(), 3);
    core::fill_normal(dout.data(), dout.size(), 4);
    auto mask = std::make_shared<at::MaskSpec>();
    mask->causal = o.mask == "causal";

    comm::Options cfg;
    cfg.world = o.world;
    cfg.nodes = o.nodes;
    cfg.link.intra = comm::LinkClass{o.latency_us * 1e-6, o.intra_gbps * 1e9};
    cfg.link.inter = comm::LinkClass{o.latency_us * 1e-6, o.intra_gbps * 1e9 / o.slow};

    json results = json::array();
    std::printf("%-20s %10s %10s %12s %12s %12s %12s %10s\n", "algo", "fwd s", "bwd s", "fwd intra",
                "fwd inter", "bwd intra", "bwd inter", "mem MiB");
    for (const std::string& name : o.algos) {
      at::AttentionSpec spec;
      spec.mask = mask;
      spec.threads = o.threads;
      spec.algo = at::Algorithm::parse(name);
      std::vector<double> tf, tb;
      PassResult fwd, bwd;
      for (int rep = 0; rep < o.reps; ++rep) {
        std::vector<double> rf(o.world), rb(o.world);
        std::vector<at::AttentionStats> sf(o.world), sb(o.world);
        std::vector<std::array<int64_t, 4>> bytes(o.world);
        comm::run_local(cfg, [&](comm::Group& g) {
          const int r = g.rank();
          std::vector<float> lq(l * o.hq * o.d), lk(l * o.hkv * o.d), lv(l * o.hkv * o.d),
              ld(l * o.hq * o.d);
          layout.shard(q.data(), o.hq * o.d, r, lq.data());
          layout.shard(k.data(), o.hkv * o.d, r, lk.data());
          layout.shard(v.data(), o.hkv * o.d, r, lv.data());
          layout.shard(dout.data(), o.hq * o.d, r, ld.data());
          core::View<const float> vq(lq.data(), core::Shape{l, o.hq, o.d}),
              vk(lk.data(), core::Shape{l, o.hkv, o.d}), vv(lv.data(), core::Shape{l, o.hkv, o.d}),
              vd(ld.data(), core::Shape{l, o.hq, o.d});
          at::prepare(spec, layout, g);  // schedules and sub-groups, outside the timed passes
          g.barrier();
          g.reset_rank_stats();  // every group of the rank: the collectives' sub-groups too
          core::Timer t;
          at::AttentionSaved saved =
              at::distributed_attention_forward(vq, vk, vv, spec, layout, g, &sf[r]);
          rf[r] = t.elapsed();
          bytes[r][0] = static_cast<int64_t>(g.rank_stats().sent_intra.bytes);
          bytes[r][1] = static_cast<int64_t>(g.rank_stats().sent_inter.bytes);
          g.barrier();
          g.reset_rank_stats();
          t.restart();
          at::AttentionGrads gr =
              at::distributed_attention_backward(vd, saved, spec, layout, g, &sb[r]);
          rb[r] = t.elapsed();
          bytes[r][2] = static_cast<int64_t>(g.rank_stats().sent_intra.bytes);
          bytes[r][3] = static_cast<int64_t>(g.rank_stats().sent_inter.bytes);
        });
        tf.push_back(*std::max_element(rf.begin(), rf.end()));
        tb.push_back(*std::max_element(rb.begin(), rb.end()));
        fwd = bwd = PassResult{};
        for (int r = 0; r < o.world; ++r) {
          fwd.max_intra = std::max(fwd.max_intra, bytes[r][0]);
          fwd.max_inter = std::max(fwd.max_inter, bytes[r][1]);
          fwd.total_intra += bytes[r][0];
          fwd.total_inter += bytes[r][1];
          bwd.max_intra = std::max(bwd.max_intra, bytes[r][2]);
          bwd.max_inter = std::max(bwd.max_inter, bytes[r][3]);
          bwd.total_intra += bytes[r][2];
          bwd.total_inter += bytes[r][3];
          fwd.wait_s = std::max(fwd.wait_s, sf[r].wait_s);
          fwd.compute_s = std::max(fwd.compute_s, sf[r].compute_s);
          bwd.wait_s = std::max(bwd.wait_s, sb[r].wait_s);
          bwd.compute_s = std::max(bwd.compute_s, sb[r].compute_s);
        }
      }
      fwd.seconds = median(tf);
      bwd.seconds = median(tb);
      const int c = spec.algo.family == at::Algorithm::Family::startrail ? spec.algo.team : 1;
      const double a_floats = static_cast<double>(l * o.hq * o.d);
      const double ws = working_set_floats(name, o, l);
      auto pass_json = [](const PassResult& p) {
        return json{{"seconds", p.seconds},
                    {"max_rank_intra_bytes", p.max_intra},
                    {"max_rank_inter_bytes", p.max_inter},
                    {"total_intra_bytes", p.total_intra},
                    {"total_inter_bytes", p.total_inter},
                    {"slowest_wait_s", p.wait_s},
                    {"slowest_compute_s", p.compute_s}};
      };
      results.push_back({{"algo", name},
                         {"forward", pass_json(fwd)},
                         {"backward", pass_json(bwd)},
                         {"memory",
                          {{"A_bytes", 4 * a_floats},
                           {"qkv_activation_A", 3 * c},
                           {"extra_vs_ring_A", 3 * (c - 1)},
                           {"extra_vs_ring_bytes", 4 * 3 * (c - 1) * a_floats},
                           {"working_set_bytes", 4 * ws}}}});
      std::printf("%-20s %10.3f %10.3f %12lld %12lld %12lld %12lld %10.1f\n", name.c_str(),
                  fwd.seconds, bwd.seconds, static_cast<long long>(fwd.max_intra),
                  static_cast<long long>(fwd.max_inter), static_cast<long long>(bwd.max_intra),
                  static_cast<long long>(bwd.max_inter), 4 * ws / (1 << 20));
      std::fflush(stdout);
    }
    json doc = {{"bench", "attention_multiring"},
                {"config",
                 {{"n", o.n},
                  {"hq", o.hq},
                  {"hkv", o.hkv},
                  {"d", o.d},
                  {"world", o.world},
                  {"nodes", o.nodes},
                  {"inter_slowdown", o.slow},
                  {"intra_gbps", o.intra_gbps},
                  {"latency_us", o.latency_us},
                  {"mask", o.mask},
                  {"balance", o.balance},
                  {"threads", o.threads},
                  {"reps", o.reps}}},
                {"results", results}};
    std::ofstream(o.out) << doc.dump(2) << "\n";
    std::printf("wrote %s\n", o.out.c_str());
  } catch (const core::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
