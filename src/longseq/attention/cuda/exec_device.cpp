#include "longseq/attention/cuda/exec_device.hpp"

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <vector>

#include "longseq/attention/exec_device.hpp"
#include "longseq/core/error.hpp"
#include "longseq/kernels/cuda/attention.hpp"
#include "longseq/kernels/cuda/device.hpp"
#include "longseq/kernels/cuda/elementwise.hpp"
#include "longseq/kernels/cuda/gemm.hpp"
#include "longseq/kernels/cuda/merge.hpp"

namespace longseq::attention::cuda {

namespace kcu = kernels::cuda;

namespace {

// A device buffer that only grows. Growing waits for the stream: calls queued before may still
// read or write the old one, and the pool would hand its block to the next allocation.
class Scratch {
 public:
  std::byte* get(size_t bytes, const core::Device& device, const kcu::Stream& stream,
                 const char* name) {
    if (bytes > buf_.bytes() || buf_.size() == 0) {
      stream.synchronize();
      buf_ = core::Buffer<std::byte>(std::max<size_t>(bytes, 1), device, core::Uninit{}, name);
    }
    return buf_.data();
  }

 private:
  core::Buffer<std::byte> buf_;
};

class CudaExecDevice final : public ExecDevice {
 public:
  explicit CudaExecDevice(core::Device device) : device_(kcu::activate(device.index)) {
    exec_ = core::Exec::gpu(device_, stream_.get());
    LONGSEQ_CUDA_CALL(cudaEventCreateWithFlags(&legacy_, cudaEventDisableTiming));
  }
  ~CudaExecDevice() override {
    try {
      stream_.synchronize();
    } catch (...) {  // a destructor must not throw; the failure was reported where it happened
    }
    cudaEventDestroy(legacy_);
  }
  CudaExecDevice(const CudaExecDevice&) = delete;
  CudaExecDevice& operator=(const CudaExecDevice&) = delete;

  core::Device device() const override { return device_; }

  void enter() override {
    // Waits on the GPU, not the host: the stream starts once the legacy stream's work so far ran.
    LONGSEQ_CUDA_CALL(cudaEventRecord(legacy_, nullptr));
    LONGSEQ_CUDA_CALL(cudaStreamWaitEvent(stream(), legacy_, 0));
  }

  void bind(std::shared_ptr<const TokenTable> tokens,
            std::shared_ptr<const MaskSpec> mask) override {
    enter();  // the inputs were written on the legacy stream (the model's kernels, core's copies)
    if (tokens != tokens_) {
      stream_.synchronize();  // queued work may read the tables being replaced
      pos_.clear();
      doc_.clear();
      for (size_t r = 0; r < tokens->pos.size(); ++r) {
        pos_.push_back(upload(tokens->pos[r], "attention positions"));
        doc_.push_back(upload(tokens->doc[r], "attention document ids"));
      }
      tokens_ = std::move(tokens);
    }
    if (mask != mask_) {
      stream_.synchronize();
      kmask_ = mask->kernel_mask();
      blocks_ = upload(mask->block_mask, "attention block mask");
      if (!mask->block_mask.empty())
        kmask_.block_mask = reinterpret_cast<const uint8_t*>(blocks_.data());
      mask_ = std::move(mask);
    }
  }
  kernels::Tokens tokens(int rank, int64_t begin) const override {
    const auto r = static_cast<size_t>(rank);
    const bool docs = !tokens_->doc[r].empty();
    return {reinterpret_cast<const int64_t*>(pos_[r].data()) + begin,
            docs ? reinterpret_cast<const int32_t*>(doc_[r].data()) + begin : nullptr};
  }

  void forward_merge(const BlockShape& s, const float* q, const kernels::Tokens& qt, int64_t tq,
                     const float* k, const float* v, const kernels::Tokens& kt, int64_t tk,
                     float* o_acc, float* lse_acc) override {
    forward_impl(s, q, qt, tq, k, v, kt, tk, o_acc, lse_acc);
  }
  void forward_merge(const BlockShape& s, const core::bf16* q, const kernels::Tokens& qt,
                     int64_t tq, const core::bf16* k, const core::bf16* v,
                     const kernels::Tokens& kt, int64_t tk, float* o_acc, float* lse_acc) override {
    forward_impl(s, q, qt, tq, k, v, kt, tk, o_acc, lse_acc);
  }
  void backward(const BlockShape& s, const float* q, const float* k, const float* v,
                const float* dout, const float* lse, const float* dvec, const kernels::Tokens& qt,
                int64_t tq, const kernels::Tokens& kt, int64_t tk, float* dq, float* dk,
                float* dv) override {
    backward_impl(s, q, k, v, dout, lse, dvec, qt, tq, kt, tk, dq, dk, dv);
  }
  void backward(const BlockShape& s, const core::bf16* q, const core::bf16* k, const core::bf16* v,
                const core::bf16* dout, const float* lse, const float* dvec,
                const kernels::Tokens& qt, int64_t tq, const kernels::Tokens& kt, int64_t tk,
                float* dq, float* dk, float* dv) override {
    backward_impl(s, q, k, v, dout, lse, dvec, qt, tq, kt, tk, dq, dk, dv);
  }
  void compute_d(const BlockShape& s, const float* o, const float* dout, int64_t l,
                 float* dvec) override {
    kcu::attention_delta(dout, o, l, s.hq, s.d, exec_, dvec);
  }
  void compute_d(const BlockShape& s, const float* o, const core::bf16* dout, int64_t l,
                 float* dvec) override {
    kcu::attention_delta(dout, o, l, s.hq, s.d, exec_, dvec);
  }
  void merge_partials(float* o, float* lse, const float* o2, const float* lse2, int64_t t,
                      int64_t h, int64_t d) override {
    kcu::merge_partials(o, lse, o2, lse2, t, h, d, exec_);
  }

  void fill(float* p, int64_t n, float value) override { kcu::fill(p, n, value, exec_); }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    LONGSEQ_CUDA_CALL(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()));
  }
  void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                 size_t rows) override {
    if (width == 0 || rows == 0) return;
    LONGSEQ_CUDA_CALL(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows,
                                        cudaMemcpyDeviceToDevice, stream()));
  }
  void add(float* into, const float* from, int64_t n) override { kcu::add(into, from, n, exec_); }
  void add_rows(float* dst, int64_t dst_pitch, const float* src, int64_t src_pitch, int64_t width,
                int64_t rows) override {
    kcu::add_rows(dst, dst_pitch, src, src_pitch, width, rows, exec_);
  }
  void to_bf16(const float* src, core::bf16* dst, int64_t n) override {
    if (n > 0) kcu::round_to_bf16(src, n, dst, exec_);
  }
  void sync() override { stream_.synchronize(); }

 private:
  cudaStream_t stream() const { return static_cast<cudaStream_t>(stream_.get()); }

  template <class V>
  core::Buffer<std::byte> upload(const std::vector<V>& host, const char* name) {
    const size_t bytes = host.size() * sizeof(V);
    core::Buffer<std::byte> b(std::max<size_t>(bytes, 1), device_, core::Uninit{}, name);
    if (bytes > 0) core::copy_bytes(b.data(), device_, host.data(), core::Device::cpu(), bytes);
    return b;
  }

  template <class T>
  void forward_impl(const BlockShape& s, const T* q, const kernels::Tokens& qt, int64_t tq,
                    const T* k, const T* v, const kernels::Tokens& kt, int64_t tk, float* o_acc,
                    float* lse_acc) {
    if (tq == 0) return;
    const kcu::AttnDims dm{tq, tk, s.hq, s.hkv, s.d};
    const size_t ws_bytes = kcu::attention_workspace_bytes(dm);
    std::byte* ws = workspace_.get(ws_bytes, device_, stream_, "attention workspace");
    auto* o = reinterpret_cast<float*>(
        o_part_.get(static_cast<size_t>(tq * s.hq * s.d) * 4, device_, stream_, "attention o'"));
    auto* lse = reinterpret_cast<float*>(
        lse_part_.get(static_cast<size_t>(tq * s.hq) * 4, device_, stream_, "attention lse'"));
    kcu::attention_block_forward(q, k, v, qt, kt, kmask_, static_cast<float>(s.scale), dm, exec_,
                                 ws, ws_bytes, o, lse);
    kcu::merge_partials(o_acc, lse_acc, o, lse, tq, s.hq, s.d, exec_);
  }

  template <class T>
  void backward_impl(const BlockShape& s, const T* q, const T* k, const T* v, const T* dout,
                     const float* lse, const float* dvec, const kernels::Tokens& qt, int64_t tq,
                     const kernels::Tokens& kt, int64_t tk, float* dq, float* dk, float* dv) {
    if (tq == 0 || tk == 0) return;
    const kcu::AttnDims dm{tq, tk, s.hq, s.hkv, s.d};
    const size_t ws_bytes = kcu::attention_workspace_bytes(dm);
    std::byte* ws = workspace_.get(ws_bytes, device_, stream_, "attention workspace");
    kcu::attention_block_backward(q, k, v, dout, lse, dvec, qt, kt, kmask_,
                                  static_cast<float>(s.scale), dm, exec_, ws, ws_bytes, dq, dk, dv);
  }

  core::Device device_;
  kcu::Stream stream_;
  cudaEvent_t legacy_ = nullptr;  // recorded on the legacy stream at bind()
  core::Exec exec_;
  Scratch workspace_, o_part_, lse_part_;
  std::shared_ptr<const TokenTable> tokens_;
  std::shared_ptr<const MaskSpec> mask_;
  std::vector<core::Buffer<std::byte>> pos_, doc_;
  core::Buffer<std::byte> blocks_;
  kernels::Mask kmask_;
};

std::shared_ptr<ExecDevice> make(core::Device device) {
  // One per (thread, GPU): a rank's stream, scratch and uploaded tables live across its passes.
  thread_local std::map<int, std::shared_ptr<ExecDevice>> mine;
  auto& slot = mine[device.index];
  if (!slot) slot = std::make_shared<CudaExecDevice>(device);
  LONGSEQ_CUDA_CALL(cudaSetDevice(device.index));  // the kernels run on the current GPU
  return slot;
}

}  // namespace

void register_exec_device() {
  attention::register_exec_device(core::DeviceKind::cuda, &make);
}

}  // namespace longseq::attention::cuda
