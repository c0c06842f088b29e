// `longseq attention`: distributed attention on .npy inputs (or seeded random ones), for users and
// for conformance checks with other tools. Inputs and outputs are in global token order.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "longseq/attention/distributed.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/npy.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/core/timer.hpp"

namespace longseq::cli {

namespace {

struct AttentionArgs {
  std::string q, k, v, dout;
  std::string random;  // N,Hq,Hkv,D
  uint64_t seed = 1;
  std::string mask = "full";
  bool causal = false;
  std::string algo = "burst";
  int world = 1;
  int nodes = 1;
  std::string balance = "zigzag";
  double scale = 0;
  std::string link;
  std::string out;
  int threads = 1;
  std::string backend = "any";
  std::string precision = "f32";
};

std::vector<int64_t> parse_dims(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    try {
      out.push_back(std::stoll(tok));
    } catch (...) {
      core::fail("attention", "--random '", s, "': '", tok, "' is not an integer");
    }
  }
  core::require(out.size() == 4 && out[0] > 0 && out[1] > 0 && out[2] > 0 && out[3] > 0, "attention",
                "--random needs N,Hq,Hkv,D (positive integers), got '", s, "'");
  return out;
}

core::Tensor<float> read_input(const std::string& path, const char* flag) {
  core::Tensor<float> t = core::read_npy_f32(path, 3, flag);
  return t;
}

}  // namespace

std::function<int()> add_attention(CLI::App& app) {
  auto a = std::make_shared<AttentionArgs>();
  app.add_option("--q", a->q, "queries, float32 .npy [N, Hq, D] in global token order");
  app.add_option("--k", a->k, "keys, float32 .npy [N, Hkv, D]");
  app.add_option("--v", a->v, "values, float32 .npy [N, Hkv, D]");
  app.add_option("--do", a->dout, "output gradient, float32 .npy [N, Hq, D]: runs the backward too");
  app.add_option("--random", a->random, "instead of files: seeded inputs of N,Hq,Hkv,D (runs the backward)");
  app.add_option("--seed", a->seed, "seed for --random");
  app.add_option("--mask", a->mask,
                 "full | causal | window:W | document:FILE | blocks:FILE:B, comma-separated to combine");
  app.add_flag("--causal", a->causal, "add causality (e.g. to a block mask)");
  app.add_option("--algo", a->algo, "ring | burst | double-ring | double-ring:ring | startrail:C[:teams|:rings] | ulysses | usp:U[:burst|:ring]");
  app.add_option("--world", a->world, "ranks (local backend; under mpirun the MPI world size is used)");
  app.add_option("--nodes", a->nodes, "nodes the ranks are split over (local backend)");
  app.add_option("--balance", a->balance, "contiguous | zigzag | striped | block-striped");
  app.add_option("--scale", a->scale, "softmax scale (0 = 1/sqrt(D))");
  app.add_option("--link", a->link, "link model intra=LAT,BW:inter=LAT,BW, e.g. intra=5us,20GB/s:inter=20us,2.5GB/s");
  app.add_option("--threads", a->threads, "compute threads per rank");
  app.add_option("--precision", a->precision,
                 "f32 | bf16: precision of q, k, v, dO in the kernels and on the wire (outputs stay float32)");
  app.add_option("--backend", a->backend, "local | mpi | any (any: MPI when started by mpirun)");
  app.add_option("--out", a->out, "output directory (o.npy, lse.npy, dq/dk/dv.npy, stats.json)");
  return [a] {
    using namespace attention;
    // ---- inputs (global order)
    core::Tensor<float> q, k, v, dout;
    bool backward = false;
    if (!a->random.empty()) {
      core::require(a->q.empty() && a->k.empty() && a->v.empty(), "attention", "--random replaces --q/--k/--v");
      const auto d = parse_dims(a->random);
      q = core::Tensor<float>(core::Shape{d[0], d[1], d[3]});
      k = core::Tensor<float>(core::Shape{d[0], d[2], d[3]});
      v = core::Tensor<float>(core::Shape{d[0], d[2], d[3]});
      dout = core::Tensor<float>(core::Shape{d[0], d[1], d[3]});
      core::fill_normal(q.data(), q.numel(), core::derive_seed(a->seed, 1));
      core::fill_normal(k.data(), k.numel(), core::derive_seed(a->seed, 2));
      core::fill_normal(v.data(), v.numel(), core::derive_seed(a->seed, 3));
      core::fill_normal(dout.data(), dout.numel(), core::derive_seed(a->seed, 4));
      backward = true;
    } else {
      core::require(!a->q.empty() && !a->k.empty() && !a->v.empty(), "attention",
                    "needs --q, --k and --v (or --random N,Hq,Hkv,D)");
      q = read_input(a->q, "--q");
      k = read_input(a->k, "--k");
      v = read_input(a->v, "--v");
      if (!a->dout.empty()) {
        dout = read_input(a->dout, "--do");
        backward = true;
      }
    }
    const int64_t n = q.dim(0), hq = q.dim(1), d = q.dim(2), hkv = k.dim(1);
    core::require(k.shape() == v.shape(), "attention", "--k ", k.shape().str(), " and --v ", v.shape().str(),
                  " must have the same shape");
    core::require(k.dim(0) == n && k.dim(2) == d, "attention", "--k ", k.shape().str(), " must be [", n, ", Hkv, ",
                  d, "] to match --q ", q.shape().str());
    core::require(hq % hkv == 0, "attention", "query heads ", hq, " must be a multiple of key/value heads ", hkv);
    if (backward)
      core::require(dout.shape() == q.shape(), "attention", "--do ", dout.shape().str(), " must match --q ",
                    q.shape().str());

    AttentionSpec spec;
    set_algorithm(spec, a->algo);
    spec.mask = std::make_shared<MaskSpec>(MaskSpec::parse(a->mask, a->causal, n));
    spec.scale = a->scale;
    spec.threads = a->threads;
    core::require(a->precision == "f32" || a->precision == "bf16", "attention", "--precision '", a->precision,
                  "' is not f32 or bf16");
    spec.precision = core::dtype_from_name(a->precision);
    core::require(a->scale >= 0, "attention", "--scale must be >= 0, got ", a->scale);
    const Balance balance = parse_balance(a->balance);
    if (balance == Balance::block_striped)
      core::require(!spec.mask->block_mask.empty(), "attention", "--balance block-striped needs a blocks:FILE:B mask");

    comm::Options cfg;
    cfg.backend = a->backend;
    cfg.world = a->world;
    cfg.nodes = a->nodes;
    cfg.abort_on_failure = true;  // under mpirun a failed rank ends the job instead of leaving peers waiting
    if (!a->link.empty()) cfg.link = comm::LinkModel::parse(a->link);

    core::Tensor<float> o(core::Shape{n, hq, d}), lse(core::Shape{n, hq});
    core::Tensor<float> dq(core::Shape{n, hq, d}), dk(core::Shape{n, hkv, d}), dv(core::Shape{n, hkv, d});
    nlohmann::json ranks = nlohmann::json::array();
    std::mutex mu;
    const core::Timer wall;
    comm::run(cfg, [&](comm::Group& g) {
      const Layout layout(balance, n, g.size(), spec.mask->block_size);
      const int r = g.rank();
      const int64_t l = layout.local_len();
      core::Tensor<float> lq(core::Shape{l, hq, d}), lk(core::Shape{l, hkv, d}), lv(core::Shape{l, hkv, d});
      layout.shard(q.data(), hq * d, r, lq.data());
      layout.shard(k.data(), hkv * d, r, lk.data());
      layout.shard(v.data(), hkv * d, r, lv.data());
      AttentionStats fs, bs;
      g.reset_stats();
      AttentionSaved saved = distributed_attention_forward(lq.view(), lk.view(), lv.view(), spec, layout, g, &fs);
      nlohmann::json fwd = {{"bytes", g.stats().to_json()}, {"compute_s", fs.compute_s}, {"wait_s", fs.wait_s},
                            {"pairs", fs.pairs}};
      AttentionGrads grads;
      nlohmann::json bwd;
      if (backward) {
        core::Tensor<float> ld(core::Shape{l, hq, d});
        layout.shard(dout.data(), hq * d, r, ld.data());
        g.reset_stats();
        grads = distributed_attention_backward(ld.view(), saved, spec, layout, g, &bs);
        bwd = {{"bytes", g.stats().to_json()}, {"compute_s", bs.compute_s}, {"wait_s", bs.wait_s},
               {"pairs", bs.pairs}};
      }
      // Gather every rank's shard to rank 0, which writes global order (works for local and MPI).
      auto gather = [&](const core::Tensor<float>& local, int64_t row, core::Tensor<float>& global) {
        std::vector<float> all(static_cast<size_t>(local.numel()) * g.size());
        g.all_gather(local.data(), all.data(), static_cast<size_t>(local.numel()), core::DType::f32);
        if (r == 0)
          for (int src = 0; src < g.size(); ++src) layout.unshard(all.data() + src * local.numel(), row, src, global.data());
      };
      gather(saved.o, hq * d, o);
      gather(saved.lse, hq, lse);
      if (backward) {
        gather(grads.dq, hq * d, dq);
        gather(grads.dk, hkv * d, dk);
        gather(grads.dv, hkv * d, dv);
      }
      // Totals over both passes, flat, for tools that read stats.json.
      const auto total = [&](const char* dir, const char* link, const char* what) {
        uint64_t t = fwd["bytes"][dir][link][what].get<uint64_t>();
        if (backward) t += bwd["bytes"][dir][link][what].get<uint64_t>();
        return t;
      };
      nlohmann::json mine = {{"rank", r},
                             {"node", g.node()},
                             {"bytes_sent_intra", total("sent", "intra", "bytes")},
                             {"bytes_sent_inter", total("sent", "inter", "bytes")},
                             {"messages_sent_intra", total("sent", "intra", "messages")},
                             {"messages_sent_inter", total("sent", "inter", "messages")},
                             {"compute_s", fs.compute_s + bs.compute_s},
                             {"wait_s", fs.wait_s + bs.wait_s},
                             {"forward", fwd}};
      if (backward) mine["backward"] = bwd;
      std::lock_guard<std::mutex> lock(mu);
      ranks.push_back(mine);
    });
    const double seconds = wall.elapsed();
    std::sort(ranks.begin(), ranks.end(), [](const auto& x, const auto& y) { return x["rank"] < y["rank"]; });
    nlohmann::json stats = {{"algo", algorithm_name(spec)},  {"balance", a->balance},  {"mask", spec.mask->describe()},
                            {"n", n},                    {"hq", hq},               {"hkv", hkv},
                            {"d", d},                    {"world", a->world},      {"nodes", a->nodes},
                            {"precision", a->precision},
                            {"seconds", seconds},        {"ranks", ranks}};
    if (!a->out.empty()) {
      std::filesystem::create_directories(a->out);
      core::write_npy(a->out + "/o.npy", o);
      core::write_npy(a->out + "/lse.npy", lse);
      if (backward) {
        core::write_npy(a->out + "/dq.npy", dq);
        core::write_npy(a->out + "/dk.npy", dk);
        core::write_npy(a->out + "/dv.npy", dv);
      }
      std::ofstream(a->out + "/stats.json") << stats.dump(2) << "\n";
    }
    std::printf("%s attention (%s), %s, mask %s: N = %lld, Hq = %lld, Hkv = %lld, D = %lld, world %d on %d node(s): %.3f s%s\n",
                algorithm_name(spec).c_str(), a->precision.c_str(), a->balance.c_str(), spec.mask->describe().c_str(), static_cast<long long>(n),
                static_cast<long long>(hq), static_cast<long long>(hkv), static_cast<long long>(d), a->world, a->nodes,
                seconds, backward ? " (forward + backward)" : "");
    for (const auto& rk : ranks) {
      std::printf("  rank %d: forward %s", rk["rank"].get<int>(), rk["forward"]["bytes"].dump().c_str());
      if (backward) std::printf("  backward %s", rk["backward"]["bytes"].dump().c_str());
      std::printf("\n");
    }
    return 0;
  };
}

}  // namespace longseq::cli
