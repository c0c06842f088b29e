// `longseq schedule`: prints the plan a distributed-attention schedule gives every rank, step by
// step. The docs' schedule drawings are produced by this command, so they cannot drift from code.
#include <cstdio>
#include <string>
#include <vector>

#include "commands.hpp"
#include "longseq/attention/schedule.hpp"
#include "longseq/core/error.hpp"
#include "table_flags.hpp"

namespace longseq::cli {

namespace {
struct ScheduleArgs {
  std::string algo = core::rows::algo.text;
  std::string balance = core::rows::balance.text;
  std::string mask = core::rows::mask.text;
  int world = core::rows::world.number;
  int nodes = core::rows::nodes.number;
  int64_t seq = 64;
  std::string pass = "both";
  std::string heads;  ///< "Q,KV": the attention's heads (Ulysses head groups); empty: unknown
};
}  // namespace

namespace {

const char* const kField[] = {"q", "k", "v", "do", "D", "lse", "o", "dq", "dk", "dv"};

// One rank's collective steps before step 0 (pre) or after the last step.
void print_collectives(const std::vector<attention::RankSchedule>& all, const char* when,
                       bool pre) {
  using namespace attention;
  static const char* kOp[] = {"AG", "RS", "A2H", "H2A", "MRG"};
  for (size_t r = 0; r < all.size(); ++r)
    for (const Collective& c : pre ? all[r].pre : all[r].post) {
      std::string m, f;
      for (int x : c.members) m += core::cat(m.empty() ? "" : ",", x);
      for (Field x : c.fields) f += core::cat(f.empty() ? "" : ",", kField[int(x)]);
      std::printf("  %s r%zu: %s[%s](%s)\n", when, r, kOp[int(c.op)], m.c_str(), f.c_str());
    }
}

// Step s of every rank: its compute and the transfers it posts.
void print_step(const std::vector<attention::RankSchedule>& all, const comm::Topology& topo,
                int s) {
  using namespace attention;
  std::printf("  step %2d |", s);
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    std::string cell;
    for (const Work& w : all[r].work)
      if (w.step == s)
        cell += core::cat("C", all[r].ring[w.origin], w.unit >= 0 ? core::cat("/", w.unit) : "",
                          w.head_group >= 0 ? core::cat("#", w.head_group) : "", "(",
                          w.pairs.size(), ") ");
    for (const Xfer& x : all[r].xfers)
      if (x.post_step == s) {
        const char c = x.part == Part::data    ? (x.send ? 's' : 'r')
                       : x.part == Part::grad  ? (x.send ? 'g' : 'G')
                       : x.part == Part::heads ? (x.send ? 'h' : 'H')
                                               : (x.send ? 'x' : 'X');
        std::string block;
        if (x.part == Part::side)
          block = core::cat(kField[int(all[r].side_blocks[x.slot].field)],
                            all[r].side_blocks[x.slot].unit);
        if (x.part == Part::heads)
          block = core::cat(kField[int(all[r].head_blocks[x.slot].field)], "#",
                            all[r].head_blocks[x.slot].group);
        cell += std::string(1, c) + block + ":" + std::to_string(x.peer) + "@" +
                std::to_string(x.wait_step) + (topo.same_node(r, x.peer) ? "" : "*") + " ";
      }
    std::printf(" r%d: %-26s|", r, cell.c_str());
  }
  std::printf("\n");
}

int print_schedule(const ScheduleArgs& a) {
  using namespace attention;
  const Algorithm algo = Algorithm::parse(a.algo);
  const MaskSpec mask = MaskSpec::parse(a.mask, false, a.seq);
  const Layout layout(parse_balance(a.balance), a.seq, a.world, mask.block_size);
  // '*' marks hops between the declared nodes; a double-ring:I runs on its own inner rings.
  const comm::Topology topo = comm::Topology::declared(a.world, a.nodes);
  const comm::Topology sched_topo = schedule_topology(algo, topo);
  const PairTable pairs(layout, mask);
  HeadCounts heads;
  if (!a.heads.empty()) {
    const auto comma = a.heads.find(',');
    try {
      core::require(comma != std::string::npos, "schedule", "--heads '", a.heads, "' must be Q,KV");
      size_t used = 0;
      heads.q = std::stoll(a.heads.substr(0, comma), &used);
      core::require(used == comma, "schedule", "--heads '", a.heads, "' must be Q,KV");
      heads.kv = std::stoll(a.heads.substr(comma + 1), &used);
      core::require(used == a.heads.size() - comma - 1, "schedule", "--heads '", a.heads,
                    "' must be Q,KV");
    } catch (const std::logic_error&) {  // stoll: not a number, or out of range
      core::fail("schedule", "--heads '", a.heads, "' must be Q,KV (two positive integers)");
    }
    core::require(heads.q >= 1 && heads.kv >= 1, "schedule", "--heads '", a.heads,
                  "' must be Q,KV (two positive integers)");
    algo.validate(a.world, heads.q, heads.kv);
  }
  for (Pass pass : {Pass::forward, Pass::backward}) {
    if (a.pass == "forward" && pass != Pass::forward) continue;
    if (a.pass == "backward" && pass != Pass::backward) continue;
    std::printf("%s %s pass, world %d, nodes %d, %s, mask %s, N = %lld\n", algo.name().c_str(),
                pass == Pass::forward ? "forward" : "backward", a.world, a.nodes,
                std::string(balance_name(layout.balance())).c_str(), mask.describe().c_str(),
                static_cast<long long>(a.seq));
    std::printf(
        "  C<j>[/u]: compute with rank j's bundle [key-side block u] (pairs)   s/r: data "
        "send/recv   g/G: gradient send/recv   x/X<field><u>: side block send/recv   "
        "h/H<field>#<g>: Ulysses head-group block send/recv (--heads)   C<j>#<g>: compute head "
        "group g   peer@wait-step, '*' = inter-node\n  collective steps (before step 0 / after the "
        "last): "
        "AG all-gather, RS reduce-scatter, A2H/H2A all-to-all into/out of head slices, MRG "
        "all-to-all + LSE merge; [members] (fields)\n");
    std::vector<RankSchedule> all;
    int steps = 0;
    for (int r = 0; r < a.world; ++r) {
      all.push_back(make_schedule(r, sched_topo, layout, pairs, algo, pass, heads));
      steps = std::max(steps, all.back().num_steps);
    }
    print_collectives(all, "pre ", true);
    for (int s = 0; s < steps; ++s) print_step(all, topo, s);
    print_collectives(all, "post", false);
    std::printf("  slots per rank: data %d, grad %d\n\n", all[0].data_slots, all[0].grad_slots);
  }
  return 0;
}

}  // namespace

std::function<int()> add_schedule(CLI::App& app) {
  auto a = std::make_shared<ScheduleArgs>();
  add_row(app, core::rows::algo, a->algo);
  add_row(app, core::rows::balance, a->balance);
  add_row(app, core::rows::mask, a->mask);
  add_row(app, core::rows::world, a->world);
  add_row(app, core::rows::nodes, a->nodes);
  app.add_option("--seq", a->seq, "sequence length");
  app.add_option("--pass", a->pass, "forward | backward | both");
  app.add_option("--heads", a->heads,
                 "Q,KV: the attention's query and kv heads, so that ulysses shows its head groups "
                 "(default: unknown, blocking all-to-alls)");
  return [a] { return print_schedule(*a); };
}

}  // namespace longseq::cli
