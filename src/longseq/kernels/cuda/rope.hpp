#pragma once
// Rotary position embeddings on *global* positions on a GPU, fp32 forward/backward pair over a
// cos/sin table built once per step in fp64 on the host and copied to the device: the twin of
// kernels/cpu/rope.hpp (same table, same convention: rotate_half, inv_freq = theta^(-2i/D));
// the specification is the fp64 kernels/ref/rope.hpp.
//
// Legend: T tokens, H heads, D head dim (even). Row-major: x, dx [T, H, D] in device memory; pos
// int64 [T] in *host* memory (global positions from the balance layout; negative = padding,
// passed through unrotated, bit for bit).
//
// Execution: the table is built on the host and copied on `exec`'s stream (the constructor
// returns once the copy is done); forward and backward are queued on their context's stream,
// which must belong to the same GPU. A grid-stride loop over (token, head, pair); every value is
// computed by one thread, so the bits never depend on the grid.
#include <cstdint>

#include "longseq/core/device.hpp"

namespace longseq::kernels::cuda {

class RopeTable {
 public:
  RopeTable() = default;
  /// Plain RoPE: inv_freq[i] = theta^(-2i/d). Throws core::Error("[kernels] ...") for an odd or
  /// non-positive d or theta <= 0, and for a CPU context.
  RopeTable(const int64_t* pos, int64_t t, int64_t d, double theta, const core::Exec& exec);
  /// Any frequencies: inv_freq [half] (host memory), D = 2 * half; cos and sin multiplied by
  /// attention_factor (yarn), as kernels/cpu/rope.hpp's.
  RopeTable(const int64_t* pos, int64_t t, const double* inv_freq, int64_t half,
            double attention_factor, const core::Exec& exec);
  ~RopeTable();
  RopeTable(RopeTable&& o) noexcept;
  RopeTable& operator=(RopeTable&& o) noexcept;
  RopeTable(const RopeTable&) = delete;
  RopeTable& operator=(const RopeTable&) = delete;

  /// x [T, H, D] (device) rotated in place by each token's angles; padding tokens untouched.
  void forward(float* x, int64_t h, const core::Exec& exec) const;
  /// The transpose (rotation by the negated angles), in place: dx from dout.
  void backward(float* dx, int64_t h, const core::Exec& exec) const;
  int64_t tokens() const { return t_; }
  int64_t head_dim() const { return d_; }

 private:
  void rotate(float* x, int64_t h, float sign, const core::Exec& exec, const char* kernel) const;
  int64_t t_ = 0, d_ = 0;
  float* table_ = nullptr;  // device: cos [T, D/2], then sin [T, D/2], then pad [T] (bytes)
  uint8_t* pad_ = nullptr;  // inside table_'s allocation
};

}  // namespace longseq::kernels::cuda
