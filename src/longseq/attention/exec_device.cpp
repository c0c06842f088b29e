#include "longseq/attention/exec_device.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>

#include "longseq/attention/block_ops.hpp"
#include "longseq/core/error.hpp"
#include "longseq/kernels/cpu/attention.hpp"

namespace longseq::attention {

core::Buffer<std::byte> ExecDevice::alloc(size_t bytes, const char* name) const {
  const size_t n = std::max<size_t>(bytes, 1);
  if (device().is_cpu()) {
    core::Buffer<std::byte> b(n);
    std::memset(b.data(), 0, n);
    return b;
  }
  return core::Buffer<std::byte>(n, device(), name);
}

namespace {

// kernels/cpu through BlockOps (one per head shape: the executor uses at most three), memcpy and
// plain loops: the executor's CPU path of before, bit for bit.
class CpuExecDevice final : public ExecDevice {
 public:
  explicit CpuExecDevice(int threads) : threads_(threads) {}

  core::Device device() const override { return core::Device::cpu(); }
  void enter() override {}

  void bind(std::shared_ptr<const TokenTable> tokens,
            std::shared_ptr<const MaskSpec> mask) override {
    tokens_ = std::move(tokens);
    mask_ = std::move(mask);
    kmask_ = mask_->kernel_mask();
  }
  kernels::Tokens tokens(int rank, int64_t begin) const override {
    const auto& doc = tokens_->doc[static_cast<size_t>(rank)];
    return {tokens_->pos[static_cast<size_t>(rank)].data() + begin,
            doc.empty() ? nullptr : doc.data() + begin};
  }

  void forward_merge(const BlockShape& s, const float* q, const kernels::Tokens& qt, int64_t tq,
                     const float* k, const float* v, const kernels::Tokens& kt, int64_t tk,
                     float* o_acc, float* lse_acc) override {
    ops(s).forward_merge(q, qt, tq, k, v, kt, tk, kmask_, o_acc, lse_acc);
  }
  void forward_merge(const BlockShape& s, const core::bf16* q, const kernels::Tokens& qt,
                     int64_t tq, const core::bf16* k, const core::bf16* v,
                     const kernels::Tokens& kt, int64_t tk, float* o_acc, float* lse_acc) override {
    ops(s).forward_merge(q, qt, tq, k, v, kt, tk, kmask_, o_acc, lse_acc);
  }
  void backward(const BlockShape& s, const float* q, const float* k, const float* v,
                const float* dout, const float* lse, const float* dvec, const kernels::Tokens& qt,
                int64_t tq, const kernels::Tokens& kt, int64_t tk, float* dq, float* dk,
                float* dv) override {
    ops(s).backward(q, k, v, dout, lse, dvec, qt, tq, kt, tk, kmask_, dq, dk, dv);
  }
  void backward(const BlockShape& s, const core::bf16* q, const core::bf16* k, const core::bf16* v,
                const core::bf16* dout, const float* lse, const float* dvec,
                const kernels::Tokens& qt, int64_t tq, const kernels::Tokens& kt, int64_t tk,
                float* dq, float* dk, float* dv) override {
    ops(s).backward(q, k, v, dout, lse, dvec, qt, tq, kt, tk, kmask_, dq, dk, dv);
  }
  void compute_d(const BlockShape& s, const float* o, const float* dout, int64_t l,
                 float* dvec) override {
    ops(s).compute_d(o, dout, l, dvec);
  }
  void compute_d(const BlockShape& s, const float* o, const core::bf16* dout, int64_t l,
                 float* dvec) override {
    ops(s).compute_d(o, dout, l, dvec);
  }
  void merge_partials(float* o, float* lse, const float* o2, const float* lse2, int64_t t,
                      int64_t h, int64_t d) override {
    kernels::cpu::merge_partials(o, lse, o2, lse2, t, h, d, threads_);
  }

  void fill(float* p, int64_t n, float value) override { std::fill(p, p + n, value); }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                 size_t rows) override {
    auto* d = static_cast<std::byte*>(dst);
    const auto* s = static_cast<const std::byte*>(src);
    for (size_t i = 0; i < rows; ++i) std::memcpy(d + i * dst_pitch, s + i * src_pitch, width);
  }
  void add(float* into, const float* from, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) into[i] += from[i];
  }
  void add_rows(float* dst, int64_t dst_pitch, const float* src, int64_t src_pitch, int64_t width,
                int64_t rows) override {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t e = 0; e < width; ++e) dst[i * dst_pitch + e] += src[i * src_pitch + e];
  }
  void to_bf16(const float* src, core::bf16* dst, int64_t n) override {
    core::f32_to_bf16(src, dst, static_cast<size_t>(n));
  }
  void sync() override {}

 private:
  BlockOps& ops(const BlockShape& s) {
    for (auto& [shape, o] : ops_)
      if (shape == s) return *o;
    ops_.emplace_back(s,
                      std::make_unique<BlockOps>(s.hq, s.hkv, s.d, s.scale, threads_, s.chunk_hkv));
    return *ops_.back().second;
  }

  int threads_;
  std::shared_ptr<const TokenTable> tokens_;
  std::shared_ptr<const MaskSpec> mask_;
  kernels::Mask kmask_;
  std::vector<std::pair<BlockShape, std::unique_ptr<BlockOps>>> ops_;
};

std::mutex makers_mu;
std::array<ExecDeviceMaker, 2> makers{};

}  // namespace

std::unique_ptr<ExecDevice> make_cpu_exec_device(int threads) {
  return std::make_unique<CpuExecDevice>(threads);
}

void register_exec_device(core::DeviceKind kind, ExecDeviceMaker maker) {
  LONGSEQ_CHECK(kind != core::DeviceKind::cpu && maker != nullptr);
  std::lock_guard<std::mutex> lk(makers_mu);
  makers[static_cast<size_t>(kind)] = maker;
}

std::shared_ptr<ExecDevice> exec_device(core::Device device, int threads) {
  if (device.is_cpu()) return make_cpu_exec_device(threads);
  ExecDeviceMaker maker = nullptr;
  {
    std::lock_guard<std::mutex> lk(makers_mu);
    maker = makers[static_cast<size_t>(device.kind)];
  }
  core::require(maker != nullptr, "attention", "no executor backend for ", device.str(),
                ": this build or program has not registered one (a build without CUDA, or the "
                "device was never activated)");
  return maker(device);
}

}  // namespace longseq::attention
