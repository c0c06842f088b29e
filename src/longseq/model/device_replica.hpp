#pragma once
// Every parameter of the model and its gradient on one device, unit after unit in one buffer
// each: the ParamSource of a rank that holds the whole model (world 1 of a trainer on a GPU, or a
// data-parallel replica), with nothing gathered and nothing reduced per step.
//
// Gradients: acquire_grad(u) hands out unit u's gradient itself, and the model's kernels add into
// it (every gradient kernel accumulates); zero_grads() clears them all before a step. A unit that
// receives several contributions in one step (the tied embedding: LM head, then embedding) sums
// them in that order in place, where a sharded state (train/zero.hpp) adds each contribution's
// own buffer into the shard: the same sum, rounded differently in the last bits.
//
// Layout: unit u starts at offset(u) floats (a multiple of kParamAlign) in params() and grads();
// total() floats in all, the gaps zero. An optimizer steps all of them at once.
#include <cstdint>
#include <vector>

#include "longseq/core/device.hpp"
#include "longseq/core/tensor.hpp"
#include "longseq/model/config.hpp"
#include "longseq/model/transformer.hpp"

namespace longseq::model {

class DeviceReplica final : public ParamSource {
 public:
  /// Parameters initialised by init_unit(seed) on the host (the values of every other state
  /// with that seed), copied to `device`; gradients zero. Blocking.
  DeviceReplica(const ParamLayout& layout, core::Device device, uint64_t seed);

  const ParamLayout& layout() const { return layout_; }
  core::Device device() const { return params_.device(); }
  int64_t offset(int unit) const { return offset_.at(static_cast<size_t>(unit)); }
  int64_t total() const { return static_cast<int64_t>(params_.size()); }
  float* params() { return params_.data(); }
  float* grads() { return grads_.data(); }
  const float* params() const { return params_.data(); }
  const float* grads() const { return grads_.data(); }

  /// Zeroes every gradient (blocking).
  void zero_grads();
  /// Unit `unit` (layout().units()[unit].size floats at offset(unit)) of a buffer on device()
  /// laid out like params(): copied to `out` on the host, or set from `in` on the host. Blocking.
  /// For the parameters, the gradients and whatever else is kept per parameter (AdamW's moments).
  void unit_to_host(const float* base, int unit, float* out) const;
  void unit_from_host(float* base, int unit, const float* in) const;
  /// Unit `unit` of the parameters (which 0) or gradients (1), on the host.
  std::vector<float> download(int unit, int which) const;
  /// Sets unit `unit`'s parameters from the host (at least its size floats).
  void upload(int unit, const float* values) { unit_from_host(params_.data(), unit, values); }

  // ParamSource
  const float* acquire(int unit) override { return params_.data() + offset(unit); }
  void release(int) override {}
  float* acquire_grad(int unit) override { return grads_.data() + offset(unit); }
  void release_grad(int) override {}

 private:
  ParamLayout layout_;
  std::vector<int64_t> offset_;
  core::Buffer<float> params_, grads_;
};

}  // namespace longseq::model
