#pragma once
// Where the executor's work runs (design.md §10: "the executor does not change shape: the device
// is a property of the buffers and kernels it is handed"). The executor (distributed.cpp) walks
// the same schedule on every device; what differs is this interface: the block kernels of one
// chunk pair, and the few memory operations around them (fills, copies, strided row copies,
// gradient adds, merges, rounding to bf16), each on memory of the device.
//
// Two implementations: the CPU's (make_cpu_exec_device: kernels/cpu through BlockOps, memcpy and
// loops, blocking; the bits every CPU test pins) and the GPU's (attention/cuda/, CUDA builds only,
// registered by name: kernels/cuda on a stream of the calling rank's own, asynchronous).
//
// Ordering contract. Calls are queued in order on the device (on the CPU they simply run). The
// host may read or hand to comm (isend/irecv) memory that a queued call writes or reads only after
// sync(): the executor calls it before it posts transfers, before collectives and before it
// returns, so a GPU overlaps a step's compute with the transfers posted before it, as the CPU
// executor does. Memory comes from core::Buffer on device() (alloc below).
//
// Thread safety: one object per rank (thread); not shared between threads.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "longseq/attention/mask_spec.hpp"
#include "longseq/core/device.hpp"
#include "longseq/core/dtype.hpp"
#include "longseq/core/tensor.hpp"
#include "longseq/kernels/mask.hpp"

namespace longseq::attention {

/// Token metadata of every rank of a layout (positions, document ids; host memory), which the
/// block kernels read by global position. Built once per (layout, mask) and shared by all steps.
struct TokenTable {
  std::vector<std::vector<int64_t>> pos;  ///< [rank][local row], -1 for padding
  std::vector<std::vector<int32_t>> doc;  ///< [rank][local row]; empty without document ids
};

/// The head shape of a block call: hq, hkv, d as kernels/cpu's AttnDims, chunk_hkv the kv heads
/// the backward's dq chunking is sized for (0: hkv; see BlockOps), scale the softmax scale.
struct BlockShape {
  int64_t hq = 0, hkv = 0, d = 0, chunk_hkv = 0;
  double scale = 0;
  bool operator==(const BlockShape&) const = default;
};

class ExecDevice {
 public:
  virtual ~ExecDevice() = default;
  virtual core::Device device() const = 0;

  /// Orders the calls queued after it after the work the rest of the process has queued on the
  /// device (a GPU: the legacy default stream, where the model's kernels and core's copies run;
  /// the CPU: nothing), so that memory written there is complete before these calls read it.
  virtual void enter() = 0;
  /// enter(), then makes `tokens` and `mask` the ones the block calls below read, for one pass;
  /// keeps them alive. A GPU copies them to its memory the first time it sees them (kept while
  /// they are the bound ones), so a trainer's layers share one copy.
  virtual void bind(std::shared_ptr<const TokenTable> tokens,
                    std::shared_ptr<const MaskSpec> mask) = 0;
  /// Rank r's token metadata from local row `begin`, as the kernels read it (device pointers).
  virtual kernels::Tokens tokens(int rank, int64_t begin) const = 0;

  /// BlockOps::forward_merge, backward and compute_d (block_ops.hpp) on device pointers, T = float
  /// or core::bf16 for q, k, v and dout (all fp32 otherwise).
  virtual void forward_merge(const BlockShape& s, const float* q, const kernels::Tokens& qt,
                             int64_t tq, const float* k, const float* v, const kernels::Tokens& kt,
                             int64_t tk, float* o_acc, float* lse_acc) = 0;
  virtual void forward_merge(const BlockShape& s, const core::bf16* q, const kernels::Tokens& qt,
                             int64_t tq, const core::bf16* k, const core::bf16* v,
                             const kernels::Tokens& kt, int64_t tk, float* o_acc,
                             float* lse_acc) = 0;
  virtual void backward(const BlockShape& s, const float* q, const float* k, const float* v,
                        const float* dout, const float* lse, const float* dvec,
                        const kernels::Tokens& qt, int64_t tq, const kernels::Tokens& kt,
                        int64_t tk, float* dq, float* dk, float* dv) = 0;
  virtual void backward(const BlockShape& s, const core::bf16* q, const core::bf16* k,
                        const core::bf16* v, const core::bf16* dout, const float* lse,
                        const float* dvec, const kernels::Tokens& qt, int64_t tq,
                        const kernels::Tokens& kt, int64_t tk, float* dq, float* dk, float* dv) = 0;
  virtual void compute_d(const BlockShape& s, const float* o, const float* dout, int64_t l,
                         float* dvec) = 0;
  virtual void compute_d(const BlockShape& s, const float* o, const core::bf16* dout, int64_t l,
                         float* dvec) = 0;
  /// kernels' merge_partials: (o, lse) [t, h, d] / [t, h] absorbs (o2, lse2).
  virtual void merge_partials(float* o, float* lse, const float* o2, const float* lse2, int64_t t,
                              int64_t h, int64_t d) = 0;

  /// p[0, n) = value.
  virtual void fill(float* p, int64_t n, float value) = 0;
  /// `bytes` from src to dst, both on this device, not overlapping.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  /// `rows` rows of `width` bytes: row i from src + i * src_pitch to dst + i * dst_pitch.
  virtual void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                         size_t width, size_t rows) = 0;
  /// into[i] += from[i] for i < n, in fp32.
  virtual void add(float* into, const float* from, int64_t n) = 0;
  /// dst[i * dst_pitch + e] += src[i * src_pitch + e] for i < rows, e < width (elements).
  virtual void add_rows(float* dst, int64_t dst_pitch, const float* src, int64_t src_pitch,
                        int64_t width, int64_t rows) = 0;
  /// dst = round-to-nearest-even bf16 of src (n values).
  virtual void to_bf16(const float* src, core::bf16* dst, int64_t n) = 0;
  /// Returns once every call queued on this object so far has finished.
  virtual void sync() = 0;

  /// `bytes` zeroed bytes on device() (at least one byte). Host buffers on the CPU (not counted
  /// in core::cpu_device_memory_stats, as every CPU path's buffers).
  core::Buffer<std::byte> alloc(size_t bytes, const char* name) const;
};

/// The CPU's: kernels/cpu on at most `threads` threads, blocking.
std::unique_ptr<ExecDevice> make_cpu_exec_device(int threads);

/// What a device backend supplies: a device for the calling thread (a GPU's has the thread's own
/// stream). Registered by the backend (attention/cuda: attention::cuda::register_exec_device).
using ExecDeviceMaker = std::shared_ptr<ExecDevice> (*)(core::Device device);
void register_exec_device(core::DeviceKind kind, ExecDeviceMaker maker);

/// The executor's device for `device` on the calling thread: a fresh CPU one of `threads`
/// threads, or the registered maker's. Throws core::Error("[attention] ...") naming the device
/// when no backend registered one (a build without it, or a program that never activated it).
std::shared_ptr<ExecDevice> exec_device(core::Device device, int threads);

}  // namespace longseq::attention
