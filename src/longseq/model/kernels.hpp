#pragma once
// The kernels a transformer block runs, on one device (design.md §10: "the executor and the
// trainer do not change shape: the device is a property of the buffers and kernels they are
// handed"). The model's forward and backward (transformer.cpp) are written once against this
// interface; CpuKernels runs kernels/cpu, and the CUDA implementation (model/cuda/, CUDA builds
// only) runs kernels/cuda, whose kernels carry the same contracts on device pointers.
//
// Why an interface here and not a dispatch inside each kernel: kernels/cpu and kernels/cuda are
// separate libraries (the second exists only in CUDA builds), and what differs between devices is
// more than a function: the RoPE table is an object on its device, the batch's token ids must be
// on the device that embeds them, and the LM head's workspace is the device's. One virtual call
// per kernel call is nothing beside the kernel (the smallest, a norm over one token tile, is
// microseconds).
//
// Pointers: every float* / int* handed to a Kernels method points to memory on device() (what
// core::Buffer / core::Tensor allocate there), except where a method says "host". Calls are
// queued in order on the device's execution context (exec()): on a CPU they run to completion
// before returning; on a GPU they are asynchronous on one stream, so work handed later sees the
// results of work handed earlier, and a host read of a result goes through a blocking copy.
#include <cstdint>
#include <memory>

#include "longseq/core/device.hpp"
#include "longseq/core/dtype.hpp"
#include "longseq/core/tensor.hpp"
#include "longseq/model/lm_head.hpp"
#include "longseq/model/rope_scaling.hpp"

namespace longseq::model {

/// A RoPE cos/sin table for one rank's tokens, on the device of the Kernels that made it.
class Rope {
 public:
  virtual ~Rope() = default;
  /// x [T, H, D] rotated in place; padding tokens untouched (kernels/cpu/rope.hpp).
  virtual void forward(float* x, int64_t h) const = 0;
  /// The transpose, in place: dx from dout.
  virtual void backward(float* dx, int64_t h) const = 0;
};

/// A tensor moved off its device until the backward needs it (activation offload,
/// ModelOptions::offload): made by Kernels::park, brought back by fetch and take. Opaque: each
/// device's Kernels has its own.
class Parked {
 public:
  virtual ~Parked() = default;
};

class Kernels {
 public:
  virtual ~Kernels() = default;
  Kernels(const Kernels&) = delete;
  Kernels& operator=(const Kernels&) = delete;

  /// Where the kernels run and their memory lives; a CPU thread budget or a GPU stream.
  const core::Exec& exec() const { return exec_; }
  core::Device device() const { return exec_.device; }

  /// dst[n] = src[n] (both on device(); may not overlap).
  virtual void copy(float* dst, const float* src, int64_t n) const = 0;
  /// Waits until everything handed so far has run (a no-op on a CPU).
  virtual void synchronize() const = 0;

  /// Activation offload. park: moves `t` (on device()) to host memory as it is once the work
  /// handed so far has run, and gives its device memory back once copied. fetch: starts bringing
  /// a parked tensor back (a prefetch, so that the copy overlaps the work handed next; later
  /// calls do nothing). take: the tensor on device() again, bit for bit, for the work handed from
  /// now on (fetching it first if fetch was not called); a Parked is taken at most once.
  /// On a GPU the copies run on a stream of their own into pinned host memory that is kept for
  /// the next step, and at most two parked tensors wait for their copy out at any time, so the
  /// device holds at most two of them; fetch first waits for every copy out and frees them. On a
  /// CPU the host copy is a plain one: nothing is saved there (train refuses --offload without a
  /// GPU); it exists so that the path runs in CPU tests.
  virtual std::unique_ptr<Parked> park(core::Tensor<float> t) const = 0;
  virtual void fetch(Parked& p) const = 0;
  virtual core::Tensor<float> take(Parked& p) const = 0;

  // The kernels, with the contracts of kernels/cpu/*.hpp (rmsnorm, linear, swiglu, lm_head) and
  // model/layers.hpp (embedding).
  virtual void rmsnorm_forward(const float* x, const float* weight, int64_t t, int64_t c, float eps,
                               float* out, float* rstd) const = 0;
  virtual void rmsnorm_backward(const float* dout, const float* x, const float* weight,
                                const float* rstd, int64_t t, int64_t c, float* dx, float* dweight,
                                bool accumulate) const = 0;
  virtual void linear_forward(const float* in, const float* weight, int64_t t, int64_t k, int64_t n,
                              float* out, bool accumulate, core::DType compute) const = 0;
  virtual void linear_backward(const float* dout, const float* in, const float* weight, int64_t t,
                               int64_t k, int64_t n, float* din, bool accumulate_din,
                               float* dweight, core::DType compute) const = 0;
  virtual void swiglu_forward(const float* gate, const float* up, int64_t n, float* out) const = 0;
  virtual void swiglu_backward(const float* dout, const float* gate, const float* up, int64_t n,
                               float* dgate, float* dup) const = 0;
  virtual void embedding_forward(const int32_t* tokens, const int64_t* pos, const float* weight,
                                 int64_t t, int64_t c, int64_t v, float* out) const = 0;
  virtual void embedding_backward(const int32_t* tokens, const int64_t* pos, const float* dout,
                                  int64_t t, int64_t c, int64_t v, float* dweight) const = 0;
  /// The table of `f` for tokens at global positions pos [t] (HOST memory; negative = padding).
  virtual std::unique_ptr<Rope> rope(const int64_t* pos, int64_t t,
                                     const RopeFrequencies& f) const = 0;
  /// LM head + cross-entropy (kernels/cpu/lm_head.hpp's contract: dhidden overwritten, dweight
  /// accumulated; blocking), fused or unfused; o.exec is replaced by exec(). A device without an
  /// unfused path refuses it (core::Error naming the device).
  virtual LossPart lm_head(bool fused, const float* hidden, const float* weight,
                           const int32_t* labels, const LmHeadDims& d, double grad_scale,
                           float* dhidden, float* dweight, LmHeadOptions o) const = 0;

 protected:
  explicit Kernels(const core::Exec& exec) : exec_(exec) {}

 private:
  core::Exec exec_;
};

/// kernels/cpu with a budget of `threads` (>= 1) OpenMP threads.
class CpuKernels final : public Kernels {
 public:
  explicit CpuKernels(int threads);

  void copy(float* dst, const float* src, int64_t n) const override;
  void synchronize() const override {}
  std::unique_ptr<Parked> park(core::Tensor<float> t) const override;
  void fetch(Parked& p) const override;
  core::Tensor<float> take(Parked& p) const override;
  void rmsnorm_forward(const float* x, const float* weight, int64_t t, int64_t c, float eps,
                       float* out, float* rstd) const override;
  void rmsnorm_backward(const float* dout, const float* x, const float* weight, const float* rstd,
                        int64_t t, int64_t c, float* dx, float* dweight,
                        bool accumulate) const override;
  void linear_forward(const float* in, const float* weight, int64_t t, int64_t k, int64_t n,
                      float* out, bool accumulate, core::DType compute) const override;
  void linear_backward(const float* dout, const float* in, const float* weight, int64_t t,
                       int64_t k, int64_t n, float* din, bool accumulate_din, float* dweight,
                       core::DType compute) const override;
  void swiglu_forward(const float* gate, const float* up, int64_t n, float* out) const override;
  void swiglu_backward(const float* dout, const float* gate, const float* up, int64_t n,
                       float* dgate, float* dup) const override;
  void embedding_forward(const int32_t* tokens, const int64_t* pos, const float* weight, int64_t t,
                         int64_t c, int64_t v, float* out) const override;
  void embedding_backward(const int32_t* tokens, const int64_t* pos, const float* dout, int64_t t,
                          int64_t c, int64_t v, float* dweight) const override;
  std::unique_ptr<Rope> rope(const int64_t* pos, int64_t t,
                             const RopeFrequencies& f) const override;
  LossPart lm_head(bool fused, const float* hidden, const float* weight, const int32_t* labels,
                   const LmHeadDims& d, double grad_scale, float* dhidden, float* dweight,
                   LmHeadOptions o) const override;

 private:
  int threads() const { return exec().threads; }
};

}  // namespace longseq::model
