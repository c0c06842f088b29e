#pragma once
// One dispatch for the multi-ring and head-parallel family (Algorithm::Family startrail,
// ulysses, usp; names in algorithm.hpp), so distributed_attention_forward/backward hand them over
// in one line.
//
// Precision (AttentionSpec::precision): with bf16 these algorithms take bf16 inputs, fp32
// kernels and transfers. hybrid_forward/backward round q, k, v and dO to bf16 values
// (round-to-nearest-even, as the ring family does) but keep them in fp32 storage and run the
// fp32 path, so the result equals fp32 attention of the bf16-rounded inputs: at least as accurate
// as the ring family's bf16 kernels, but neither faster nor moving fewer bytes than f32.
#include "longseq/attention/startrail.hpp"
#include "longseq/attention/ulysses.hpp"

namespace longseq::attention {

AttentionSaved hybrid_forward(const Algorithm& algo, core::View<const float> q,
                              core::View<const float> k, core::View<const float> v,
                              const AttentionSpec& spec, const Layout& layout, comm::Group& group,
                              AttentionStats* stats = nullptr);
AttentionGrads hybrid_backward(const Algorithm& algo, core::View<const float> dout,
                               const AttentionSaved& saved, const AttentionSpec& spec,
                               const Layout& layout, comm::Group& group,
                               AttentionStats* stats = nullptr);

}  // namespace longseq::attention
