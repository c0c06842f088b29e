#pragma once
// Rotary position embeddings on *global* positions, fast fp32 forward/backward pair over a table
// of cos/sin built once per step in fp64; the specification is its fp64 twin kernels/ref/rope.hpp
// (same convention: rotate_half, inv_freq = theta^(-2i/D)); tests/kernels/rope_test.cpp checks
// one against the other.
//
// Legend: T tokens, H heads, D head dim (even). Row-major: x, dx [T, H, D]; pos int64 [T] (global
// positions from the balance layout; negative = padding, passed through unrotated).
//
// Which frequencies (plain, or scaled as Hugging Face's rope_scaling defines) is model-level
// knowledge (model/rope_scaling.hpp); the table takes any inv_freq [D/2] and a factor multiplying
// cos and sin (yarn's attention factor), as transformers' LlamaRotaryEmbedding applies them.
//
// Threads: `threads` is the caller's budget, spent as an OpenMP team over tokens (the runtime the
// GEMM library uses); every value is computed by one thread, so results never depend on it.
#include <cstdint>
#include <span>
#include <vector>

#include "longseq/core/device.hpp"

namespace longseq::kernels::cpu {

class RopeTable {
 public:
  RopeTable() = default;
  /// Plain RoPE: inv_freq[i] = theta^(-2i/d). Throws core::Error("[kernels] ...") for an odd or
  /// non-positive d or theta <= 0.
  RopeTable(const int64_t* pos, int64_t t, int64_t d, double theta);
  /// Any frequencies: D = 2 * inv_freq.size(); cos and sin multiplied by attention_factor.
  RopeTable(const int64_t* pos, int64_t t, std::span<const double> inv_freq,
            double attention_factor = 1.0);
  /// x [T, H, D] rotated in place by each token's angles; padding tokens (pos < 0) untouched.
  void forward(float* x, int64_t h, const core::Exec& exec) const;
  /// The transpose (rotation by the negated angles), in place: dx from dout.
  void backward(float* dx, int64_t h, const core::Exec& exec) const;
  int64_t tokens() const { return t_; }

 private:
  void rotate(float* x, int64_t h, float sign, const core::Exec& exec) const;
  int64_t t_ = 0, d_ = 0;
  std::vector<float> cos_, sin_;  // [T, D/2]
  std::vector<uint8_t> pad_;      // [T]
};

}  // namespace longseq::kernels::cpu
