#pragma once
// The attention harness: global tensors in, global tensors out, one distributed run in between.
//
//   attention::GlobalInputs in = attention::GlobalInputs::random(1000, 4, 2, 32, seed);
//   comm::run(opt, [&](comm::Group& g) {
//     attention::HarnessRun run = attention::run_harness(in, spec, layout, g);
//     if (g.rank() == 0) { ... run.o, run.dq, run.ranks ... }   // global order, every rank's stats
//   });
//
// Every rank of the group calls run_harness with the same inputs (under the local backend the
// threads may share one GlobalInputs; under MPI each process holds its own copy, e.g. from the
// same seed or the same files). Each rank cuts its shard out by the layout, runs the forward
// (and the backward when `in` has dO) over the group, and sends its shards and its counters to
// group rank 0, which assembles them in global token order. So the result on rank 0 depends only
// on (inputs, spec, layout, group size, topology), never on the backend: `longseq attention`
// under mpirun writes the same bytes as with --backend local.
//
// The byte counters in RankRecord cover the attention passes only (the gather to rank 0 and the
// counter exchange are not in them); FLOPs are counted from the mask, not measured.
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "longseq/attention/distributed.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/core/tensor.hpp"

namespace longseq::attention {

/// Global inputs in global token order, borrowed: q, dout [N, Hq, D], k, v [N, Hkv, D], each
/// contiguous fp32 host memory. A default (rank-0) dout means forward only.
struct GlobalViews {
  core::View<const float> q, k, v, dout;

  int64_t n() const { return q.dim(0); }
  int64_t hq() const { return q.dim(1); }
  int64_t hkv() const { return k.dim(1); }
  int64_t d() const { return q.dim(2); }
  bool backward() const { return dout.rank() > 0; }
  /// Throws core::Error naming `who`, the shapes and values unless q is [N, Hq, D], k and v are
  /// [N, Hkv, D], dout is default or [N, Hq, D], every extent is positive, Hkv divides Hq and
  /// every view is contiguous. `names` name q, k, v and dout in messages (the CLI passes its
  /// flags: "--q has shape ...").
  void validate(const char* who,
                const std::array<const char*, 4>& names = {"q", "k", "v", "dO"}) const;
};

/// Global inputs owned: GlobalViews over tensors of its own.
struct GlobalInputs {
  core::Tensor<float> q, k, v, dout;

  /// Seeded normal inputs (the `--random N,Hq,Hkv,D --seed S` of the CLI), with dO. Throws
  /// core::Error naming the values unless every extent is positive and Hq % Hkv == 0.
  static GlobalInputs random(int64_t n, int64_t hq, int64_t hkv, int64_t d, uint64_t seed);

  GlobalViews views() const;
  int64_t n() const { return q.dim(0); }
  int64_t hq() const { return q.dim(1); }
  int64_t hkv() const { return k.dim(1); }
  int64_t d() const { return q.dim(2); }
  bool backward() const { return dout.shape().rank() > 0; }
  /// GlobalViews::validate of views().
  void validate(const char* who,
                const std::array<const char*, 4>& names = {"q", "k", "v", "dO"}) const {
    views().validate(who, names);
  }
};

/// One rank's part of a run: where it sits, what it sent and received per pass, how long it
/// computed and waited.
struct RankRecord {
  int rank = 0, node = 0;
  comm::Stats forward_bytes, backward_bytes;  ///< counters of the group over each pass
  AttentionStats forward, backward;           ///< backward all zero in a forward-only run

  /// {"rank","node","bytes_sent_intra","bytes_sent_inter","messages_sent_intra",
  ///  "messages_sent_inter","compute_s","wait_s","forward":{"bytes":Stats::to_json(),"compute_s",
  ///  "wait_s","pairs"},"backward":{...}} (sums over both passes at the top level; "backward" only
  /// when `backward`). The stats.json format of `longseq attention`.
  nlohmann::json to_json(bool backward) const;
};

/// Visible (query, key) pairs of `mask` over n tokens (count_visible, mask_spec.hpp) and the FLOPs
/// they cost: forward 4*Hq*D per pair (QK^T and PV), backward 10*Hq*D (QK^T recomputed, dV, dP, dQ,
/// dK), as plan/attention_cost.hpp counts them.
struct AttentionWork {
  uint64_t visible_pairs = 0;
  double forward_flops = 0, backward_flops = 0;
};
AttentionWork attention_work(const MaskSpec& mask, int64_t n, int64_t hq, int64_t d);

/// What run_harness returns. On group rank 0: o [N, Hq, D], lse [N, Hq] and, with dO, dq
/// [N, Hq, D], dk and dv [N, Hkv, D], all in global token order; `ranks` holds every rank's
/// record, indexed by rank. On other ranks the tensors are empty and `ranks` holds only their
/// own record.
struct HarnessRun {
  core::Tensor<float> o, lse, dq, dk, dv;
  std::vector<RankRecord> ranks;
  AttentionWork work;
  /// Sums over ranks of the bytes each rank sent (forward + backward) over intra- and
  /// inter-node links (rank 0 only: needs every record).
  uint64_t bytes_sent_intra() const;
  uint64_t bytes_sent_inter() const;
};

/// Caller-owned global outputs for rank 0 (run_harness's `into`): o [N, Hq, D], lse [N, Hq] and,
/// with dO, dq [N, Hq, D], dk and dv [N, Hkv, D]; contiguous fp32 host memory.
struct HarnessOutputs {
  core::View<float> o, lse, dq, dk, dv;
};

/// Collective over `group`: shard, run, gather (see the top of the file). `layout.world()` must
/// equal group.size(); spec, layout and inputs must be the same on every rank. With `into` (read
/// on rank 0 only) rank 0's global outputs are written there instead of into HarnessRun's
/// tensors, which stay empty. Throws core::Error naming the values for bad inputs or outputs
/// (before any communication, so every rank throws alike) and whatever the attention throws.
HarnessRun run_harness(const GlobalViews& in, const AttentionSpec& spec, const Layout& layout,
                       comm::Group& group, const HarnessOutputs* into = nullptr);
inline HarnessRun run_harness(const GlobalInputs& in, const AttentionSpec& spec,
                              const Layout& layout, comm::Group& group) {
  return run_harness(in.views(), spec, layout, group);
}

}  // namespace longseq::attention
