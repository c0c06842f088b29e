#include "longseq/train/zero.hpp"

#include <algorithm>
#include <cstring>

#include "longseq/core/error.hpp"
#include "longseq/core/op_account.hpp"
#include "longseq/core/timer.hpp"

namespace longseq::train {

namespace {
size_t arena_floats(const model::ParamLayout& layout, int r) {
  size_t n = 0;
  for (const auto& u : layout.units()) {
    const int64_t s = (u.size + r - 1) / r;
    n += static_cast<size_t>((s + 15) / 16 * 16);
  }
  return n;
}
}  // namespace

ShardedState::ShardedState(const model::ParamLayout& layout, comm::Group group, uint64_t seed)
    : layout_(layout),
      group_(std::move(group)),
      arena_(4 * arena_floats(layout, group_.size()) * sizeof(float) + 4 * core::kAlignment,
             "zero-3 shards") {
  const int r = group_.size();
  const int nu = layout_.num_units();
  shard_.resize(nu);
  offset_.resize(nu);
  for (int u = 0; u < nu; ++u) {
    shard_[u] = (layout_.units()[u].size + r - 1) / r;
    offset_[u] = total_;
    total_ += (shard_[u] + 15) / 16 * 16;  // keep every shard 64-byte aligned
  }
  param_ = arena_.alloc<float>(static_cast<size_t>(total_));
  grad_ = arena_.alloc<float>(static_cast<size_t>(total_));
  m_ = arena_.alloc<float>(static_cast<size_t>(total_));
  v_ = arena_.alloc<float>(static_cast<size_t>(total_));
  decay_.assign(static_cast<size_t>(total_), 0);
  for (int u = 0; u < nu; ++u) {
    std::vector<float> full(static_cast<size_t>(shard_[u] * r), 0.0f);
    model::init_unit(layout_, u, seed, full.data());
    const std::vector<uint8_t> dmask =
        unit_decay_mask(layout_, u, static_cast<int64_t>(full.size()));
    const int64_t b = shard_begin(u);
    std::copy(full.begin() + b, full.begin() + b + shard_[u], param_shard(u));
    std::copy(dmask.begin() + b, dmask.begin() + b + shard_[u], decay_.begin() + offset_[u]);
  }
}

std::vector<uint8_t> unit_decay_mask(const model::ParamLayout& layout, int unit, int64_t size) {
  std::vector<uint8_t> m(static_cast<size_t>(size), 0);
  for (const auto& t : layout.units()[unit].tensors)
    if (t.shape.size() >= 2) std::fill(m.begin() + t.offset, m.begin() + t.offset + t.numel, 1);
  return m;
}

void ShardedState::zero_grads() {
  finish_grads();
  std::fill(grad_, grad_ + total_, 0.0f);
  // A prefetch nobody acquired holds parameters from before the optimizer step: complete its
  // transfers (every rank posted the same ones) and drop it, so a new step never reads stale
  // values.
  for (auto& [unit, f] : inflight_) f.request.wait();
  inflight_.clear();
}

void ShardedState::set_gather_dtype(core::DType dt) {
  LONGSEQ_CHECK_MSG(dt == core::DType::f32 || dt == core::DType::bf16, "gather dtype ",
                    core::dtype_name(dt));
  gather_dtype_ = dt;
}

void ShardedState::outgoing(int unit, std::vector<unsigned char>& out) const {
  const size_t n = static_cast<size_t>(shard_[unit]);
  const float* src = param_ + offset_[unit];
  out.resize(n * core::dtype_size(gather_dtype_));
  if (gather_dtype_ == core::DType::f32)
    std::memcpy(out.data(), src, out.size());
  else
    core::f32_to_bf16(src, reinterpret_cast<core::bf16*>(out.data()), n);
}

void ShardedState::widen(const unsigned char* all, float* out, size_t n) const {
  if (gather_dtype_ == core::DType::f32)
    std::memcpy(out, all, n * sizeof(float));
  else
    core::bf16_to_f32(reinterpret_cast<const core::bf16*>(all), out, n);
}

void ShardedState::progress() {
  core::ScopedTimer t(&comm_s_);
  for (auto& [unit, f] : inflight_) f.request.test();
  for (PendingGrad& p : pending_grads_) p.request.test();
}

void ShardedState::prefetch(int unit) {
  if (group_.size() == 1 || inflight_.count(unit) || gathered_.count(unit)) return;
  core::OpScope op(core::Op::zero_gather);
  progress();
  Inflight& f = inflight_[unit];
  outgoing(unit, f.mine);
  f.all.resize(f.mine.size() * static_cast<size_t>(group_.size()));
  core::ScopedTimer t(&comm_s_);
  f.request = group_.iall_gather(f.mine.data(), f.all.data(), static_cast<size_t>(shard_[unit]),
                                 gather_dtype_);
  gather_sent_ += static_cast<int64_t>(f.mine.size());
}

const float* ShardedState::acquire(int unit) {
  core::OpScope op(core::Op::zero_gather);
  auto& buf = gathered_[unit];
  LONGSEQ_CHECK_MSG(buf.empty(), "unit ", unit, " acquired twice");
  const size_t s = static_cast<size_t>(shard_[unit]);
  buf.resize(s * static_cast<size_t>(group_.size()));
  progress();
  if (auto it = inflight_.find(unit); it != inflight_.end()) {
    {
      core::ScopedTimer t(&comm_s_);
      it->second.request.wait();
    }
    widen(it->second.all.data(), buf.data(), buf.size());
    inflight_.erase(it);
    ++prefetch_hits_;
    return buf.data();
  }
  gather_sent_ += static_cast<int64_t>(s * core::dtype_size(gather_dtype_));
  if (gather_dtype_ == core::DType::f32) {  // straight into the fp32 buffer: nothing to widen
    core::ScopedTimer t(&comm_s_);
    group_.all_gather(param_shard(unit), buf.data(), s, core::DType::f32);
    return buf.data();
  }
  std::vector<unsigned char> mine, all(buf.size() * core::dtype_size(gather_dtype_));
  outgoing(unit, mine);
  {
    core::ScopedTimer t(&comm_s_);
    group_.all_gather(mine.data(), all.data(), s, gather_dtype_);
  }
  widen(all.data(), buf.data(), buf.size());
  return buf.data();
}

void ShardedState::release(int unit) {
  auto it = gathered_.find(unit);
  LONGSEQ_CHECK(it != gathered_.end());
  gathered_.erase(it);
}

float* ShardedState::acquire_grad(int unit) {
  core::OpScope op(core::Op::zero_reduce_scatter);  // zeroing the full-size buffer
  auto& buf = grad_full_[unit];
  LONGSEQ_CHECK_MSG(buf.empty(), "unit ", unit, " gradient acquired twice");
  buf.assign(static_cast<size_t>(shard_[unit] * group_.size()), 0.0f);
  return buf.data();
}

void ShardedState::release_grad(int unit) {
  core::OpScope op(core::Op::zero_reduce_scatter);
  auto it = grad_full_.find(unit);
  LONGSEQ_CHECK(it != grad_full_.end());
  PendingGrad p;
  p.unit = unit;
  p.full = std::move(it->second);  // the buffer moves, its data pointer stays
  grad_full_.erase(it);
  p.sum.resize(static_cast<size_t>(shard_[unit]));
  {
    core::ScopedTimer t(&comm_s_);
    p.request = group_.ireduce_scatter(p.full.data(), p.sum.data(), p.sum.size(), core::DType::f32);
  }
  pending_grads_.push_back(std::move(p));
  while (pending_grads_.size() > kPendingGrads) {
    complete(pending_grads_.front());
    pending_grads_.pop_front();
  }
  progress();
}

void ShardedState::complete(PendingGrad& p) {
  {
    core::ScopedTimer t(&comm_s_);
    p.request.wait();
  }
  float* g = grad_ + offset_[p.unit];
  for (size_t i = 0; i < p.sum.size(); ++i) g[i] += p.sum[i];
}

void ShardedState::finish_grads() {
  if (pending_grads_.empty()) return;
  core::OpScope op(core::Op::zero_reduce_scatter);
  for (PendingGrad& p : pending_grads_) complete(p);
  pending_grads_.clear();
}

std::vector<float> ShardedState::gather_full(int unit, int which) {
  LONGSEQ_CHECK(which >= 0 && which <= 2);
  float* src = which == 0 ? param_shard(unit) : which == 1 ? m_shard(unit) : v_shard(unit);
  std::vector<float> full(static_cast<size_t>(shard_[unit] * group_.size()));
  group_.all_gather(src, full.data(), static_cast<size_t>(shard_[unit]), core::DType::f32);
  return full;
}

void ShardedState::load_full(int unit, int which, const float* full) {
  LONGSEQ_CHECK(which >= 0 && which <= 2);
  float* dst = which == 0 ? param_shard(unit) : which == 1 ? m_shard(unit) : v_shard(unit);
  const int64_t b = shard_begin(unit);
  const int64_t size = layout_.units()[unit].size;
  for (int64_t i = 0; i < shard_[unit]; ++i) dst[i] = b + i < size ? full[b + i] : 0.0f;
}

}  // namespace longseq::train
