// `longseq schedule`: prints the plan a distributed-attention schedule gives every rank, step by
// step. The docs' schedule drawings are produced by this command, so they cannot drift from code.
#include <cstdio>
#include <string>
#include <vector>

#include "commands.hpp"
#include "longseq/attention/schedule.hpp"
#include "longseq/core/error.hpp"

namespace longseq::cli {

namespace {
struct ScheduleArgs {
  std::string algo = "burst";
  std::string balance = "zigzag";
  std::string mask = "causal";
  int world = 4;
  int nodes = 1;
  int64_t seq = 64;
  std::string pass = "both";
};
}  // namespace

std::function<int()> add_schedule(CLI::App& app) {
  auto a = std::make_shared<ScheduleArgs>();
  app.add_option("--algo", a->algo,
                 "ring | burst | double-ring[:I][:burst|:ring] | startrail:C[:teams|:rings] | "
                 "ulysses | usp:U[:burst|:ring]");
  app.add_option("--balance", a->balance, "contiguous | zigzag | striped");
  app.add_option("--mask", a->mask,
                 "full | causal | window:W (document/blocks masks need files: use `attention`)");
  app.add_option("--world", a->world, "ranks");
  app.add_option("--nodes", a->nodes, "nodes (ranks split evenly)");
  app.add_option("--seq", a->seq, "sequence length");
  app.add_option("--pass", a->pass, "forward | backward | both");
  return [a] {
    using namespace attention;
    const Algorithm algo = Algorithm::parse(a->algo);
    const MaskSpec mask = MaskSpec::parse(a->mask, false, a->seq);
    const Layout layout(parse_balance(a->balance), a->seq, a->world, mask.block_size);
    // '*' marks hops between the declared nodes; a double-ring:I runs on its own inner rings.
    const comm::Topology topo = comm::Topology::declared(a->world, a->nodes);
    const comm::Topology sched_topo = schedule_topology(algo, topo);
    const PairTable pairs(layout, mask);
    for (Pass pass : {Pass::forward, Pass::backward}) {
      if (a->pass == "forward" && pass != Pass::forward) continue;
      if (a->pass == "backward" && pass != Pass::backward) continue;
      std::printf("%s %s pass, world %d, nodes %d, %s, mask %s, N = %lld\n", algo.name().c_str(),
                  pass == Pass::forward ? "forward" : "backward", a->world, a->nodes,
                  std::string(balance_name(layout.balance())).c_str(), mask.describe().c_str(),
                  static_cast<long long>(a->seq));
      std::printf(
          "  C<j>: compute with rank j's bundle (pairs)   s/r: data send/recv   g/G: gradient "
          "send/recv   peer@wait-step, '*' = inter-node\n  collective steps (before step 0 / "
          "after the last): AG all-gather, RS reduce-scatter, A2H/H2A all-to-all into/out of head "
          "slices, MRG all-to-all + LSE merge, SR send->to/recv<-from; [members] (fields)\n");
      std::vector<RankSchedule> all;
      int steps = 0;
      for (int r = 0; r < a->world; ++r) {
        all.push_back(make_schedule(r, sched_topo, layout, pairs, algo, pass));
        steps = std::max(steps, all.back().num_steps);
      }
      auto collectives = [&](const char* when, bool pre) {
        static const char* kOp[] = {"AG", "RS", "A2H", "H2A", "MRG", "SR"};
        static const char* kField[] = {"q", "k", "v", "do", "D", "lse", "o", "dq", "dk", "dv"};
        for (int r = 0; r < a->world; ++r)
          for (const Collective& c : pre ? all[r].pre : all[r].post) {
            std::string m, f;
            for (int x : c.members) m += core::cat(m.empty() ? "" : ",", x);
            for (Field x : c.fields) f += core::cat(f.empty() ? "" : ",", kField[int(x)]);
            if (c.op == Collective::Op::send_recv) m = core::cat("->", c.to, " <-", c.from);
            std::printf("  %s r%d: %s[%s](%s)\n", when, r, kOp[int(c.op)], m.c_str(), f.c_str());
          }
      };
      collectives("pre ", true);
      for (int s = 0; s < steps; ++s) {
        std::printf("  step %2d |", s);
        for (int r = 0; r < a->world; ++r) {
          std::string cell;
          for (const Work& w : all[r].work)
            if (w.step == s)
              cell += core::cat("C", all[r].ring[w.origin], "(", w.pairs.size(), ") ");
          for (const Xfer& x : all[r].xfers)
            if (x.post_step == s) {
              const char c = x.part == Part::data ? (x.send ? 's' : 'r') : (x.send ? 'g' : 'G');
              cell += std::string(1, c) + std::to_string(x.peer) + "@" +
                      std::to_string(x.wait_step) + (topo.same_node(r, x.peer) ? "" : "*") + " ";
            }
          std::printf(" r%d: %-26s|", r, cell.c_str());
        }
        std::printf("\n");
      }
      collectives("post", false);
      std::printf("  slots per rank: data %d, grad %d\n\n", all[0].data_slots, all[0].grad_slots);
    }
    return 0;
  };
}

}  // namespace longseq::cli
