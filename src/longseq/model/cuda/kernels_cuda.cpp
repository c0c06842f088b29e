#include "longseq/model/cuda/kernels_cuda.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/core/tensor.hpp"
#include "longseq/core/timer.hpp"
#include "longseq/kernels/cuda/attention.hpp"
#include "longseq/kernels/cuda/device.hpp"
#include "longseq/kernels/cuda/embedding.hpp"
#include "longseq/kernels/cuda/gemm.hpp"
#include "longseq/kernels/cuda/lm_head.hpp"
#include "longseq/kernels/cuda/rmsnorm.hpp"
#include "longseq/kernels/cuda/rope.hpp"
#include "longseq/kernels/cuda/swiglu.hpp"

namespace longseq::model::cuda {

namespace kcu = kernels::cuda;
using core::Shape;
using core::Tensor;
using core::View;

namespace {

core::Exec gpu_exec(core::Device device) {
  core::require(device.kind == core::DeviceKind::cuda, "model", "CUDA kernels asked for device ",
                device.str());
  return core::Exec::gpu(kcu::activate(device.index), nullptr);
}

class CudaRope final : public Rope {
 public:
  CudaRope(kcu::RopeTable table, const core::Exec& exec) : table_(std::move(table)), exec_(exec) {}
  void forward(float* x, int64_t h) const override { table_.forward(x, h, exec_); }
  void backward(float* dx, int64_t h) const override { table_.backward(dx, h, exec_); }

 private:
  kcu::RopeTable table_;
  core::Exec exec_;
};

// Pinned host memory for parked activations, kept for reuse: pinning is slow (the pages are
// locked one by one, ~ms per GiB), and every step parks tensors of the same sizes as the last.
// A block handed out is never handed out again before it is given back; what was queued on it
// is ordered by the one copy stream of its Kernels, so a block given back may be reused at once.
class PinnedPool {
 public:
  PinnedPool() = default;
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;
  ~PinnedPool() {
    for (const auto& [bytes, p] : free_) cudaFreeHost(p);  // not checked: a destructor
  }
  /// The smallest kept block of at least `bytes`, or a new one.
  std::pair<void*, size_t> get(size_t bytes) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto best = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it)
        if (it->first >= bytes && (best == free_.end() || it->first < best->first)) best = it;
      if (best != free_.end()) {
        const std::pair<void*, size_t> r{best->second, best->first};
        free_.erase(best);
        return r;
      }
    }
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
    if (e != cudaSuccess) {
      cudaGetLastError();
      core::fail("model", "activation offload: cannot pin ", bytes, " bytes of host memory (",
                 cudaGetErrorString(e), "); ", held_, " bytes are pinned already");
    }
    held_ += bytes;
    return {p, bytes};
  }
  void put(void* p, size_t bytes) {
    std::lock_guard<std::mutex> lk(mu_);
    free_.emplace_back(bytes, p);
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<size_t, void*>> free_;
  size_t held_ = 0;
};

// An event for ordering (no timing), destroyed with it.
struct OrderEvent {
  cudaEvent_t e = nullptr;
  OrderEvent() { LONGSEQ_CUDA_CALL(cudaEventCreateWithFlags(&e, cudaEventDisableTiming)); }
  ~OrderEvent() {
    if (e) cudaEventDestroy(e);
  }
  OrderEvent(const OrderEvent&) = delete;
  OrderEvent& operator=(const OrderEvent&) = delete;
};

// The device copy of a parked tensor, kept until its copy out has run (CudaKernels::settle).
struct Outbound {
  Tensor<float> device;
  OrderEvent out_done;
};

class CudaParked final : public Parked {
 public:
  CudaParked(std::shared_ptr<PinnedPool> pool, std::pair<void*, size_t> host, Shape shape)
      : pool_(std::move(pool)), host_(host), shape_(shape) {}
  ~CudaParked() override {
    // Fetched but never taken (an exception between): the copy in must end before `back` goes.
    if (fetched && !taken) cudaEventSynchronize(in_done.e);
    pool_->put(host_.first, host_.second);
  }
  std::shared_ptr<PinnedPool> pool_;
  std::pair<void*, size_t> host_;
  Shape shape_;
  Tensor<float> back;  // the fetched copy
  OrderEvent in_done;
  bool fetched = false, taken = false;
};

class CudaKernels final : public Kernels {
 public:
  explicit CudaKernels(core::Device device) : Kernels(gpu_exec(device)) {}
  ~CudaKernels() override {
    // Copies out still running read device tensors that the members free next.
    if (copies_) cudaStreamSynchronize(static_cast<cudaStream_t>(copies_->get()));
  }
  CudaKernels(const CudaKernels&) = delete;
  CudaKernels& operator=(const CudaKernels&) = delete;

  // Activation offload (kernels.hpp): copies on a stream of their own, ordered against the
  // legacy stream's work by events, so the GPU waits and the host does not (except to bound the
  // device copies waiting for their copy out).
  std::unique_ptr<Parked> park(Tensor<float> t) const override {
    settle(kMaxOutbound - 1);
    const size_t bytes = sizeof(float) * static_cast<size_t>(t.numel());
    auto p = std::make_unique<CudaParked>(pool_, pool_->get(std::max<size_t>(bytes, 1)), t.shape());
    cudaStream_t cs = copy_stream();
    after_compute(cs);
    if (bytes > 0)
      LONGSEQ_CUDA_CALL(
          cudaMemcpyAsync(p->host_.first, t.data(), bytes, cudaMemcpyDeviceToHost, cs));
    auto out = std::make_unique<Outbound>();
    LONGSEQ_CUDA_CALL(cudaEventRecord(out->out_done.e, cs));
    out->device = std::move(t);
    outbound_.push_back(std::move(out));
    return p;
  }
  void fetch(Parked& parked) const override {
    auto& p = dynamic_cast<CudaParked&>(parked);
    LONGSEQ_CHECK_MSG(!p.taken, "a parked tensor is taken once");
    // The forward is over once the backward fetches: every copy out is done or nearly, and the
    // device copies still waiting go now (the planner's model counts on it: plan/memory.cpp).
    settle(0);
    if (p.fetched) return;
    p.fetched = true;
    p.back = Tensor<float>(p.shape_, device(), core::Uninit{}, "fetched activation");
    const size_t bytes = sizeof(float) * static_cast<size_t>(p.back.numel());
    cudaStream_t cs = copy_stream();
    // The new tensor's block comes from the pool in legacy-stream order: work queued there may
    // still read it, so the copy in waits for that work.
    after_compute(cs);
    if (bytes > 0)
      LONGSEQ_CUDA_CALL(
          cudaMemcpyAsync(p.back.data(), p.host_.first, bytes, cudaMemcpyHostToDevice, cs));
    LONGSEQ_CUDA_CALL(cudaEventRecord(p.in_done.e, cs));
  }
  Tensor<float> take(Parked& parked) const override {
    auto& p = dynamic_cast<CudaParked&>(parked);
    fetch(p);
    p.taken = true;
    LONGSEQ_CUDA_CALL(cudaStreamWaitEvent(stream(), p.in_done.e, 0));
    return std::move(p.back);
  }

  void copy(float* dst, const float* src, int64_t n) const override {
    if (n <= 0) return;
    LONGSEQ_CUDA_CALL(cudaMemcpyAsync(dst, src, sizeof(float) * static_cast<size_t>(n),
                                      cudaMemcpyDeviceToDevice, stream()));
  }
  void synchronize() const override { LONGSEQ_CUDA_CALL(cudaStreamSynchronize(stream())); }
  void rmsnorm_forward(const float* x, const float* weight, int64_t t, int64_t c, float eps,
                       float* out, float* rstd) const override {
    kcu::rmsnorm_forward(x, weight, t, c, eps, out, rstd, exec());
  }
  void rmsnorm_backward(const float* dout, const float* x, const float* weight, const float* rstd,
                        int64_t t, int64_t c, float* dx, float* dweight,
                        bool accumulate) const override {
    kcu::rmsnorm_backward(dout, x, weight, rstd, t, c, dx, dweight, accumulate, exec());
  }
  void linear_forward(const float* in, const float* weight, int64_t t, int64_t k, int64_t n,
                      float* out, bool accumulate, core::DType compute) const override {
    kcu::linear_forward(in, weight, t, k, n, out, accumulate, exec(), compute);
  }
  void linear_backward(const float* dout, const float* in, const float* weight, int64_t t,
                       int64_t k, int64_t n, float* din, bool accumulate_din, float* dweight,
                       core::DType compute) const override {
    kcu::linear_backward(dout, in, weight, t, k, n, din, accumulate_din, dweight, exec(), compute);
  }
  void swiglu_forward(const float* gate, const float* up, int64_t n, float* out) const override {
    kcu::swiglu_forward(gate, up, n, out, exec());
  }
  void swiglu_backward(const float* dout, const float* gate, const float* up, int64_t n,
                       float* dgate, float* dup) const override {
    kcu::swiglu_backward(dout, gate, up, n, dgate, dup, exec());
  }
  void embedding_forward(const int32_t* tokens, const int64_t* pos, const float* weight, int64_t t,
                         int64_t c, int64_t v, float* out) const override {
    kcu::embedding_forward(tokens, pos, weight, t, c, v, out, exec());
  }
  void embedding_backward(const int32_t* tokens, const int64_t* pos, const float* dout, int64_t t,
                          int64_t c, int64_t v, float* dweight) const override {
    kcu::embedding_backward(tokens, pos, dout, t, c, v, dweight, exec());
  }
  std::unique_ptr<Rope> rope(const int64_t* pos, int64_t t,
                             const RopeFrequencies& f) const override {
    const auto half = static_cast<int64_t>(f.inv_freq.size());
    return std::make_unique<CudaRope>(
        kcu::RopeTable(pos, t, f.inv_freq.data(), half, f.attention_factor, exec()), exec());
  }
  LossPart lm_head(bool fused, const float* hidden, const float* weight, const int32_t* labels,
                   const LmHeadDims& d, double grad_scale, float* dhidden, float* dweight,
                   LmHeadOptions o) const override {
    core::require(fused, "model", "--loss unfused has no kernel on ", device().str(),
                  " (the fused LM head is the GPU's; unfused is the CPU's reference path)");
    o.exec = exec();
    return kcu::lm_head_ce_fused(hidden, weight, labels, d, grad_scale, dhidden, dweight, o);
  }

 private:
  cudaStream_t stream() const { return static_cast<cudaStream_t>(exec().stream); }

  // At most this many parked tensors keep their device copy while their copy out runs: the
  // device holds no more than two block inputs beyond what is not parked.
  static constexpr size_t kMaxOutbound = 2;

  cudaStream_t copy_stream() const {
    if (!copies_) copies_ = std::make_unique<kcu::Stream>();
    return static_cast<cudaStream_t>(copies_->get());
  }
  // Orders `cs` after everything handed to the compute stream so far.
  void after_compute(cudaStream_t cs) const {
    LONGSEQ_CUDA_CALL(cudaEventRecord(computed_.e, stream()));
    LONGSEQ_CUDA_CALL(cudaStreamWaitEvent(cs, computed_.e, 0));
  }
  // Frees the device copies whose copy out has run, then waits for the oldest until at most
  // `keep` remain. Their memory goes back to the pool in legacy-stream order, after the copy.
  void settle(size_t keep) const {
    while (!outbound_.empty()) {
      const cudaError_t q = cudaEventQuery(outbound_.front()->out_done.e);
      if (q == cudaErrorNotReady) {
        cudaGetLastError();
        if (outbound_.size() <= keep) break;
        LONGSEQ_CUDA_CALL(cudaEventSynchronize(outbound_.front()->out_done.e));
      } else {
        LONGSEQ_CUDA_CALL(q);
      }
      outbound_.pop_front();
    }
  }

  std::shared_ptr<PinnedPool> pool_ = std::make_shared<PinnedPool>();
  mutable std::unique_ptr<kcu::Stream> copies_;
  mutable OrderEvent computed_;
  mutable std::deque<std::unique_ptr<Outbound>> outbound_;
};

// ---- attention of a rank holding the whole sequence --------------------------------------------

const float* contiguous(View<const float> v, const char* what) {
  core::require(v.rank() == 3 && v.is_contiguous(), "attention", what,
                " must be a contiguous [L, H, D] tensor on the GPU, got ", v.shape().str());
  return v.data();
}

class LocalAttention final : public AttentionOp {
 public:
  LocalAttention(std::shared_ptr<const attention::MaskSpec> mask, const attention::Layout& layout,
                 core::DType precision, core::Device device)
      : exec_(gpu_exec(device)), layout_(layout), precision_(precision) {
    attention::validate_precision(precision);
    core::require(layout.world() == 1, "attention", "attention on ", device.str(),
                  " runs a rank holding the whole sequence (world 1);",
                  " the layout spreads it over ", layout.world(),
                  " ranks, which the executor on the GPU runs (train::device_attention)");
    const std::vector<int64_t> pos = layout.positions(0);
    pos_ = core::Buffer<int64_t>(pos.size(), device, core::Uninit{}, "attention positions");
    core::copy_bytes(pos_.data(), device, pos.data(), core::Device::cpu(), pos.size() * 8);
    set_mask(std::move(mask));
  }

  attention::AttentionSaved forward(View<const float> q, View<const float> k,
                                    View<const float> v) override {
    return forward_rows(q, k, v, q.dim(0));
  }
  attention::AttentionSaved forward_prefix(View<const float> q, View<const float> k,
                                           View<const float> v, int64_t rows) override {
    return forward_rows(q, k, v, std::clamp<int64_t>(rows, 0, q.dim(0)));
  }

  attention::AttentionGrads backward(View<const float> dout,
                                     const attention::AttentionSaved& saved) override {
    core::Timer timer;
    const kcu::AttnDims dm = dims(saved.q, saved.k, saved.q.dim(0));
    core::require(dout.shape() == saved.q.shape(), "attention", "do ", dout.shape().str(),
                  " must match q ", saved.q.shape().str());
    const core::Device dev = exec_.device;
    attention::AttentionGrads g;
    g.dq = Tensor<float>(Shape{dm.tq, dm.hq, dm.d}, dev, "attention dq");  // accumulated: zeroed
    g.dk = Tensor<float>(Shape{dm.tk, dm.hkv, dm.d}, dev, "attention dk");
    g.dv = Tensor<float>(Shape{dm.tk, dm.hkv, dm.d}, dev, "attention dv");
    core::Buffer<float> delta(static_cast<size_t>(dm.tq * dm.hq), dev, core::Uninit{},
                              "attention delta");
    core::Buffer<std::byte> ws(kcu::attention_workspace_bytes(dm), dev, core::Uninit{},
                               "attention workspace");
    const float* q = contiguous(saved.q, "q");
    const float* k = contiguous(saved.k, "k");
    const float* v = contiguous(saved.v, "v");
    const float* d = contiguous(dout, "do");
    if (precision_ == core::DType::bf16) {
      // The forward's rounding again: the same bf16 values.
      const Rounded r(q, k, v, d, dm, exec_);
      kcu::attention_delta(r.dout(), saved.o.data(), dm.tq, dm.hq, dm.d, exec_, delta.data());
      kcu::attention_block_backward(r.q(), r.k(), r.v(), r.dout(), saved.lse.data(), delta.data(),
                                    tokens(), tokens(), kmask_, scale(dm), dm, exec_, ws.data(),
                                    ws.bytes(), g.dq.data(), g.dk.data(), g.dv.data());
      finish(timer);
    } else {
      kcu::attention_delta(d, saved.o.data(), dm.tq, dm.hq, dm.d, exec_, delta.data());
      kcu::attention_block_backward(q, k, v, d, saved.lse.data(), delta.data(), tokens(), tokens(),
                                    kmask_, scale(dm), dm, exec_, ws.data(), ws.bytes(),
                                    g.dq.data(), g.dk.data(), g.dv.data());
      finish(timer);
    }
    return g;
  }

  const AttentionTimes& times() const override { return times_; }

  void set_mask(std::shared_ptr<const attention::MaskSpec> mask) override {
    core::require(mask != nullptr, "attention", "no mask given");
    mask->validate(layout_.global_len());
    mask_ = std::move(mask);
    kmask_ = mask_->kernel_mask();
    const core::Device dev = exec_.device;
    doc_ = {};
    if (!mask_->doc_ids.empty()) {
      const std::vector<int64_t> pos = layout_.positions(0);
      std::vector<int32_t> doc(pos.size());
      for (size_t i = 0; i < pos.size(); ++i)
        doc[i] = pos[i] >= 0 ? mask_->doc_ids[static_cast<size_t>(pos[i])] : -1;
      doc_ = core::Buffer<int32_t>(doc.size(), dev, core::Uninit{}, "attention document ids");
      core::copy_bytes(doc_.data(), dev, doc.data(), core::Device::cpu(), doc.size() * 4);
    }
    blocks_ = {};
    if (!mask_->block_mask.empty()) {
      blocks_ = core::Buffer<uint8_t>(mask_->block_mask.size(), dev, core::Uninit{},
                                      "attention block mask");
      core::copy_bytes(blocks_.data(), dev, mask_->block_mask.data(), core::Device::cpu(),
                       mask_->block_mask.size());
      kmask_.block_mask = blocks_.data();
    }
  }

 private:
  // q, k, v (and dO) rounded to bf16 on the device, nearest even (attention::AttentionSpec).
  class Rounded {
   public:
    Rounded(const float* q, const float* k, const float* v, const float* dout,
            const kcu::AttnDims& dm, const core::Exec& exec)
        : q_(round(q, dm.tq * dm.hq * dm.d, exec, "q")),
          k_(round(k, dm.tk * dm.hkv * dm.d, exec, "k")),
          v_(round(v, dm.tk * dm.hkv * dm.d, exec, "v")),
          do_(dout ? round(dout, dm.tq * dm.hq * dm.d, exec, "do") : core::Buffer<core::bf16>{}) {}
    const core::bf16* q() const { return q_.data(); }
    const core::bf16* k() const { return k_.data(); }
    const core::bf16* v() const { return v_.data(); }
    const core::bf16* dout() const { return do_.data(); }

   private:
    static core::Buffer<core::bf16> round(const float* x, int64_t n, const core::Exec& exec,
                                          const char* what) {
      core::Buffer<core::bf16> out(static_cast<size_t>(n), exec.device, core::Uninit{}, what);
      kcu::round_to_bf16(x, n, out.data(), exec);
      return out;
    }
    core::Buffer<core::bf16> q_, k_, v_, do_;
  };

  kcu::AttnDims dims(View<const float> q, View<const float> k, int64_t rows) const {
    core::require(q.rank() == 3 && k.rank() == 3, "attention", "q, k, v must be [L, H, D]");
    const int64_t l = layout_.local_len();
    core::require(q.dim(0) == l && k.dim(0) == l, "attention", "the rank holds ", q.dim(0), "/",
                  k.dim(0), " q/k tokens, the layout gives ", l);
    return kcu::AttnDims{rows, l, q.dim(1), k.dim(1), q.dim(2)};
  }
  static float scale(const kcu::AttnDims& dm) {
    return static_cast<float>(1.0 / std::sqrt(static_cast<double>(dm.d)));
  }
  kernels::Tokens tokens() const { return {pos_.data(), doc_.size() ? doc_.data() : nullptr}; }
  void finish(core::Timer& timer) {
    LONGSEQ_CUDA_CALL(cudaStreamSynchronize(static_cast<cudaStream_t>(exec_.stream)));
    times_.compute_s += timer.elapsed();
  }

  attention::AttentionSaved forward_rows(View<const float> q, View<const float> k,
                                         View<const float> v, int64_t rows) {
    core::Timer timer;
    const kcu::AttnDims full = dims(q, k, q.dim(0));
    core::require(k.shape() == v.shape() && k.dim(2) == q.dim(2), "attention", "k ",
                  k.shape().str(), " and v ", v.shape().str(), " must match and share D with q ",
                  q.shape().str());
    const core::Device dev = exec_.device;
    attention::AttentionSaved s;
    s.q = q;
    s.k = k;
    s.v = v;
    s.o = Tensor<float>(Shape{full.tq, full.hq, full.d}, dev, core::Uninit{}, "attention output");
    s.lse = Tensor<float>(Shape{full.tq, full.hq}, dev, core::Uninit{}, "attention lse");
    const kcu::AttnDims dm{rows, full.tk, full.hq, full.hkv, full.d};
    core::Buffer<std::byte> ws(kcu::attention_workspace_bytes(dm), dev, core::Uninit{},
                               "attention workspace");
    const float* qp = contiguous(q, "q");
    const float* kp = contiguous(k, "k");
    const float* vp = contiguous(v, "v");
    if (rows > 0) {
      if (precision_ == core::DType::bf16) {
        const Rounded r(qp, kp, vp, nullptr, full, exec_);
        kcu::attention_block_forward(r.q(), r.k(), r.v(), tokens(), tokens(), kmask_, scale(dm), dm,
                                     exec_, ws.data(), ws.bytes(), s.o.data(), s.lse.data());
        finish(timer);  // before `r` frees the rounded inputs
      } else {
        kcu::attention_block_forward(qp, kp, vp, tokens(), tokens(), kmask_, scale(dm), dm, exec_,
                                     ws.data(), ws.bytes(), s.o.data(), s.lse.data());
        finish(timer);
      }
    }
    return s;
  }

  core::Exec exec_;
  attention::Layout layout_;
  core::DType precision_;
  std::shared_ptr<const attention::MaskSpec> mask_;
  kernels::Mask kmask_;
  core::Buffer<int64_t> pos_;
  core::Buffer<int32_t> doc_;
  core::Buffer<uint8_t> blocks_;
  AttentionTimes times_;
};

}  // namespace

std::unique_ptr<Kernels> make_kernels(core::Device device) {
  return std::make_unique<CudaKernels>(device);
}

std::unique_ptr<AttentionOp> make_local_attention(std::shared_ptr<const attention::MaskSpec> mask,
                                                  const attention::Layout& layout,
                                                  core::DType precision, core::Device device) {
  return std::make_unique<LocalAttention>(std::move(mask), layout, precision, device);
}

namespace {

// The best of 3 timed runs of 5 products, after a warm-up.
double timed_gemm_gflops(core::Device device, core::DType precision) {
  const core::Exec exec = gpu_exec(device);
  constexpr int64_t n = 8192;
  const auto elems = static_cast<size_t>(n * n);
  core::Buffer<float> c(elems, device, core::Uninit{}, "peak gemm C");
  core::Buffer<float> a32, b32;
  core::Buffer<core::bf16> a16, b16;
  // Operand values do not change a GEMM's speed; zeros keep them finite.
  if (precision == core::DType::bf16) {
    a16 = core::Buffer<core::bf16>(elems, device, "peak gemm A");
    b16 = core::Buffer<core::bf16>(elems, device, "peak gemm B");
  } else {
    a32 = core::Buffer<float>(elems, device, "peak gemm A");
    b32 = core::Buffer<float>(elems, device, "peak gemm B");
  }
  auto run = [&] {
    if (precision == core::DType::bf16)
      kcu::gemm_bf16(exec, false, true, n, n, n, 1.0f, a16.data(), n, b16.data(), n, 0.0f, c.data(),
                     n);
    else
      kcu::gemm_f32(exec, false, true, n, n, n, 1.0f, a32.data(), n, b32.data(), n, 0.0f, c.data(),
                    n);
  };
  run();  // warm-up: the cuBLASLt plan and the clocks
  LONGSEQ_CUDA_CALL(cudaStreamSynchronize(nullptr));
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    core::Timer t;
    constexpr int kIters = 5;
    for (int i = 0; i < kIters; ++i) run();
    LONGSEQ_CUDA_CALL(cudaStreamSynchronize(nullptr));
    best = std::max(best, kIters * 2.0 * static_cast<double>(n * n * n) / t.elapsed() * 1e-9);
  }
  return best;
}

}  // namespace

double gemm_peak_gflops(core::Device device, core::DType precision) {
  const double best = timed_gemm_gflops(device, precision);
  // The measurement's operands are gone: they are not the run's tensors, so they leave no trace
  // in the peak the trainer reports.
  kcu::reset_memory_peak(device.index);
  return best;
}

std::string gpu_name(core::Device device) {
  for (const kcu::GpuInfo& g : kcu::runtime_info().gpus)
    if (g.index == device.index) return g.name;
  return "";
}

}  // namespace longseq::model::cuda
