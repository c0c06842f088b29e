#pragma once
// The model's LM head + cross-entropy is the fast CPU kernel kernels/cpu/lm_head.hpp (beside its
// fp64 twin kernels/ref/cross_entropy.hpp); the model and its callers keep the model:: names.
#include "longseq/kernels/cpu/lm_head.hpp"

namespace longseq::model {

using kernels::cpu::count_targets;
using kernels::cpu::kIgnoreIndex;
using kernels::cpu::lm_head_ce_fused;
using kernels::cpu::lm_head_ce_unfused;
using kernels::cpu::lm_head_fused_workspace_floats;
using kernels::cpu::lm_head_token_tile;
using kernels::cpu::LmHeadDims;
using kernels::cpu::LmHeadOptions;
using kernels::cpu::LossPart;

}  // namespace longseq::model
