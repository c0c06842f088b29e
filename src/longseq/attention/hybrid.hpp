#pragma once
// The `--algo` names of the multi-ring and head-parallel family, and one dispatch for them, so
// distributed_attention_forward/backward (and the CLI) can hand them over in one line:
//
//   if (auto h = HybridAlgo::parse(name)) return hybrid_forward(*h, q, k, v, spec, layout, g, st);
//
//   startrail:C[:teams|:rings]   StarTrail/WallFacer, team size C (default placement: teams)
//   ulysses                      DeepSpeed-Ulysses over the whole world
//   usp:U[:burst|:ring]          Ulysses in groups of U ranks, burst (default) or ring across them
//
// Precision (AttentionSpec::precision): with bf16 these algorithms take bf16 inputs, fp32
// kernels and transfers. hybrid_forward/backward round q, k, v and dO to bf16 values
// (round-to-nearest-even, as the ring family does) but keep them in fp32 storage and run the
// fp32 path, so the result equals fp32 attention of the bf16-rounded inputs: at least as accurate
// as the ring family's bf16 kernels, but neither faster nor moving fewer bytes than f32.
#include <optional>
#include <string>
#include <string_view>

#include "longseq/attention/startrail.hpp"
#include "longseq/attention/ulysses.hpp"

namespace longseq::attention {

struct HybridAlgo {
  enum class Kind : uint8_t { startrail, ulysses, usp };
  Kind kind = Kind::ulysses;
  StarTrailOptions startrail;
  UspOptions usp;

  /// nullopt when `s` is not a name of this family (the caller tries Algorithm::parse); throws
  /// core::Error naming `s` when it is one but malformed ("startrail:x", "usp:0", "usp:2:foo").
  static std::optional<HybridAlgo> parse(std::string_view s);
  /// The canonical name, parse(name()) == *this.
  std::string name() const;
  /// Throws core::Error naming the values when it cannot run on `world` ranks with these heads
  /// ("--algo startrail:3 needs C*C = 9 to divide world 8").
  void validate(int world, int64_t hq, int64_t hkv) const;
  bool operator==(const HybridAlgo& o) const;
};

AttentionSaved hybrid_forward(const HybridAlgo& algo, core::View<const float> q,
                              core::View<const float> k, core::View<const float> v,
                              const AttentionSpec& spec, const Layout& layout, comm::Group& group,
                              AttentionStats* stats = nullptr);
AttentionGrads hybrid_backward(const HybridAlgo& algo, core::View<const float> dout,
                               const AttentionSaved& saved, const AttentionSpec& spec,
                               const Layout& layout, comm::Group& group,
                               AttentionStats* stats = nullptr);

}  // namespace longseq::attention
