#include "longseq/attention/harness.hpp"

#include <algorithm>
#include <array>
#include <tuple>

#include "longseq/comm/group.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/kernels/mask.hpp"

namespace longseq::attention {

namespace {

// Tags of the gather to rank 0 (one per tensor, then the records).
enum GatherTag : int { kTagO = 1, kTagLse, kTagDq, kTagDk, kTagDv, kTagRecord };

// MPI counts bytes in an int: shards are sent in pieces well below 2^31 bytes.
constexpr size_t kPieceBytes = size_t{1} << 28;

void send_pieces(comm::Group& g, const void* data, size_t bytes, int tag,
                 std::vector<comm::Request>& reqs) {
  const auto* p = static_cast<const char*>(data);
  for (size_t off = 0; off < bytes || (bytes == 0 && off == 0); off += kPieceBytes) {
    reqs.push_back(g.isend(0, p + off, std::min(kPieceBytes, bytes - off), tag));
    if (bytes == 0) break;
  }
}

void recv_pieces(comm::Group& g, int src, void* data, size_t bytes, int tag) {
  auto* p = static_cast<char*>(data);
  std::vector<comm::Request> reqs;
  for (size_t off = 0; off < bytes || (bytes == 0 && off == 0); off += kPieceBytes) {
    reqs.push_back(g.irecv(src, p + off, std::min(kPieceBytes, bytes - off), tag));
    if (bytes == 0) break;
  }
  comm::wait_all(reqs);
}

// A RankRecord as doubles (byte counts stay exact below 2^53).
constexpr size_t kRecordDoubles = 2 + 2 * 8 + 2 * 4;

void put_stats(const comm::Stats& s, double*& p) {
  for (const comm::Traffic* t : {&s.sent_intra, &s.sent_inter, &s.recv_intra, &s.recv_inter}) {
    *p++ = static_cast<double>(t->bytes);
    *p++ = static_cast<double>(t->messages);
  }
}
void get_stats(comm::Stats& s, const double*& p) {
  for (comm::Traffic* t : {&s.sent_intra, &s.sent_inter, &s.recv_intra, &s.recv_inter}) {
    t->bytes = static_cast<uint64_t>(*p++);
    t->messages = static_cast<uint64_t>(*p++);
  }
}
void put_attn(const AttentionStats& s, double*& p) {
  *p++ = s.compute_s;
  *p++ = s.wait_s;
  *p++ = s.steps;
  *p++ = s.pairs;
}
void get_attn(AttentionStats& s, const double*& p) {
  s.compute_s = *p++;
  s.wait_s = *p++;
  s.steps = static_cast<int>(*p++);
  s.pairs = static_cast<int>(*p++);
}

std::array<double, kRecordDoubles> pack(const RankRecord& r) {
  std::array<double, kRecordDoubles> out{};
  double* p = out.data();
  *p++ = r.rank;
  *p++ = r.node;
  put_stats(r.forward_bytes, p);
  put_stats(r.backward_bytes, p);
  put_attn(r.forward, p);
  put_attn(r.backward, p);
  return out;
}

RankRecord unpack(const std::array<double, kRecordDoubles>& in) {
  RankRecord r;
  const double* p = in.data();
  r.rank = static_cast<int>(*p++);
  r.node = static_cast<int>(*p++);
  get_stats(r.forward_bytes, p);
  get_stats(r.backward_bytes, p);
  get_attn(r.forward, p);
  get_attn(r.backward, p);
  r.forward_bytes.rank = r.backward_bytes.rank = r.rank;
  r.forward_bytes.node = r.backward_bytes.node = r.node;
  return r;
}

nlohmann::json pass_json(const comm::Stats& bytes, const AttentionStats& s) {
  return {{"bytes", bytes.to_json()},
          {"compute_s", s.compute_s},
          {"wait_s", s.wait_s},
          {"pairs", s.pairs}};
}

}  // namespace

GlobalInputs GlobalInputs::random(int64_t n, int64_t hq, int64_t hkv, int64_t d, uint64_t seed) {
  core::require(n > 0 && hq > 0 && hkv > 0 && d > 0, "attention",
                "random inputs need positive N, Hq, Hkv, D; got ", n, ", ", hq, ", ", hkv, ", ", d);
  core::require(hq % hkv == 0, "attention", "query heads ", hq,
                " must be a multiple of key/value heads ", hkv);
  GlobalInputs in;
  in.q = core::Tensor<float>(core::Shape{n, hq, d});
  in.k = core::Tensor<float>(core::Shape{n, hkv, d});
  in.v = core::Tensor<float>(core::Shape{n, hkv, d});
  in.dout = core::Tensor<float>(core::Shape{n, hq, d});
  core::fill_normal(in.q.data(), static_cast<size_t>(in.q.numel()), core::derive_seed(seed, 1));
  core::fill_normal(in.k.data(), static_cast<size_t>(in.k.numel()), core::derive_seed(seed, 2));
  core::fill_normal(in.v.data(), static_cast<size_t>(in.v.numel()), core::derive_seed(seed, 3));
  core::fill_normal(in.dout.data(), static_cast<size_t>(in.dout.numel()),
                    core::derive_seed(seed, 4));
  return in;
}

GlobalViews GlobalInputs::views() const {
  return {q.view(), k.view(), v.view(), backward() ? dout.view() : core::View<const float>{}};
}

void GlobalViews::validate(const char* who, const std::array<const char*, 4>& names) const {
  const auto& [nq, nk, nv, ndo] = names;
  for (const auto& [name, t, rank] :
       {std::tuple{nq, &q, "[N, Hq, D]"}, {nk, &k, "[N, Hkv, D]"}, {nv, &v, "[N, Hkv, D]"}}) {
    core::require(t->shape().rank() == 3, who, name, " must be ", rank, ", got ", t->shape().str());
    // Zero extents would divide by zero further on.
    core::require(t->dim(0) > 0 && t->dim(1) > 0 && t->dim(2) > 0, who, name, " has shape ",
                  t->shape().str(), ": every extent must be positive");
    core::require(t->is_contiguous(), who, name, " ", t->shape().str(), " must be contiguous");
  }
  core::require(k.shape() == v.shape(), who, nk, " ", k.shape().str(), " and ", nv, " ",
                v.shape().str(), " must have the same shape");
  core::require(k.dim(0) == n() && k.dim(2) == d(), who, nk, " ", k.shape().str(), " must be [",
                n(), ", Hkv, ", d(), "] to match ", nq, " ", q.shape().str());
  core::require(hq() % hkv() == 0, who, "query heads ", hq(), " (", nq, " ", q.shape().str(),
                ") must be a multiple of key/value heads ", hkv(), " (", nk, " ", k.shape().str(),
                ")");
  if (backward())
    core::require(dout.shape() == q.shape() && dout.is_contiguous(), who, ndo, " ",
                  dout.shape().str(), " must be a contiguous ", q.shape().str(), " to match ", nq);
}

nlohmann::json RankRecord::to_json(bool with_backward) const {
  const comm::Stats none;
  const comm::Stats& bb = with_backward ? backward_bytes : none;
  const AttentionStats& bs = with_backward ? backward : AttentionStats{};
  nlohmann::json j = {
      {"rank", rank},
      {"node", node},
      {"bytes_sent_intra", forward_bytes.sent_intra.bytes + bb.sent_intra.bytes},
      {"bytes_sent_inter", forward_bytes.sent_inter.bytes + bb.sent_inter.bytes},
      {"messages_sent_intra", forward_bytes.sent_intra.messages + bb.sent_intra.messages},
      {"messages_sent_inter", forward_bytes.sent_inter.messages + bb.sent_inter.messages},
      {"compute_s", forward.compute_s + bs.compute_s},
      {"wait_s", forward.wait_s + bs.wait_s},
      {"forward", pass_json(forward_bytes, forward)}};
  if (with_backward) j["backward"] = pass_json(backward_bytes, backward);
  return j;
}

AttentionWork attention_work(const MaskSpec& mask, int64_t n, int64_t hq, int64_t d) {
  const uint64_t pairs = count_visible(mask, n);
  const double per = static_cast<double>(hq) * static_cast<double>(d);
  return {pairs, 4.0 * per * static_cast<double>(pairs), 10.0 * per * static_cast<double>(pairs)};
}

uint64_t HarnessRun::bytes_sent_intra() const {
  uint64_t t = 0;
  for (const RankRecord& r : ranks)
    t += r.forward_bytes.sent_intra.bytes + r.backward_bytes.sent_intra.bytes;
  return t;
}
uint64_t HarnessRun::bytes_sent_inter() const {
  uint64_t t = 0;
  for (const RankRecord& r : ranks)
    t += r.forward_bytes.sent_inter.bytes + r.backward_bytes.sent_inter.bytes;
  return t;
}

HarnessRun run_harness(const GlobalViews& in, const AttentionSpec& spec, const Layout& layout,
                       comm::Group& g, const HarnessOutputs* into) {
  in.validate("attention");
  core::require(layout.world() == g.size(), "attention", "layout of ", layout.world(),
                " ranks on a group of ", g.size());
  core::require(layout.global_len() == in.n(), "attention", "layout of ", layout.global_len(),
                " tokens for inputs of ", in.n());
  const int64_t n = in.n(), hq = in.hq(), hkv = in.hkv(), d = in.d();
  const int r = g.rank(), world = g.size();
  const int64_t l = layout.local_len();
  const bool backward = in.backward();
  if (into != nullptr && r == 0) {
    auto check = [](const core::View<float>& x, const core::Shape& shape, const char* name) {
      core::require(x.shape() == shape && x.is_contiguous(), "attention", "output ", name, " ",
                    x.shape().str(), " must be a contiguous ", shape.str());
    };
    check(into->o, core::Shape{n, hq, d}, "o");
    check(into->lse, core::Shape{n, hq}, "lse");
    if (backward) {
      check(into->dq, core::Shape{n, hq, d}, "dq");
      check(into->dk, core::Shape{n, hkv, d}, "dk");
      check(into->dv, core::Shape{n, hkv, d}, "dv");
    }
  }

  // This rank's shard of a global input, on spec.device (a GPU gets a copy of the host shard).
  const core::Device dev = spec.device;
  auto shard = [&](const core::View<const float>& global, int64_t heads, const char* name) {
    core::Tensor<float> local(core::Shape{l, heads, d});
    layout.shard(global.data(), heads * d, r, local.data());
    if (dev.is_cpu()) return local;
    core::Tensor<float> on(local.shape(), dev, core::Uninit{}, name);
    core::copy_bytes(on.data(), dev, local.data(), core::Device::cpu(),
                     sizeof(float) * static_cast<size_t>(local.numel()));
    return on;
  };
  // An output back on the host (the gather below reads it there).
  auto host = [&](core::Tensor<float>& t) {
    if (dev.is_cpu()) return;
    core::Tensor<float> h(t.shape());
    core::copy_bytes(h.data(), core::Device::cpu(), t.data(), dev,
                     sizeof(float) * static_cast<size_t>(t.numel()));
    t = std::move(h);
  };
  const core::Tensor<float> lq = shard(in.q, hq, "q"), lk = shard(in.k, hkv, "k"),
                            lv = shard(in.v, hkv, "v");

  RankRecord mine;
  mine.rank = r;
  mine.node = g.node();
  prepare(spec, layout, g);
  g.reset_rank_stats();
  AttentionSaved saved = distributed_attention_forward(lq.view(), lk.view(), lv.view(), spec,
                                                       layout, g, &mine.forward);
  mine.forward_bytes = g.rank_stats();
  AttentionGrads grads;
  if (backward) {
    const core::Tensor<float> ld = shard(in.dout, hq, "dO");
    g.reset_rank_stats();
    grads = distributed_attention_backward(ld.view(), saved, spec, layout, g, &mine.backward);
    mine.backward_bytes = g.rank_stats();
  }

  host(saved.o);
  host(saved.lse);
  if (backward) {
    host(grads.dq);
    host(grads.dk);
    host(grads.dv);
  }

  HarnessRun out;
  out.work = attention_work(*spec.mask, n, hq, d);
  // Shards and records go to rank 0 point to point: nobody else needs them, and no rank holds
  // more than its own shard plus (rank 0) one incoming shard at a time.
  struct Part {
    const core::Tensor<float>* local;
    core::Tensor<float>* global;
    core::View<float> into;  // the caller's, or empty: allocate `global`
    core::Shape shape;       // global shape
    int64_t row;
    int tag;
  };
  const HarnessOutputs none;
  const HarnessOutputs& to = into != nullptr && r == 0 ? *into : none;
  std::vector<Part> parts = {{&saved.o, &out.o, to.o, core::Shape{n, hq, d}, hq * d, kTagO},
                             {&saved.lse, &out.lse, to.lse, core::Shape{n, hq}, hq, kTagLse}};
  if (backward) {
    parts.push_back({&grads.dq, &out.dq, to.dq, core::Shape{n, hq, d}, hq * d, kTagDq});
    parts.push_back({&grads.dk, &out.dk, to.dk, core::Shape{n, hkv, d}, hkv * d, kTagDk});
    parts.push_back({&grads.dv, &out.dv, to.dv, core::Shape{n, hkv, d}, hkv * d, kTagDv});
  }
  const std::array<double, kRecordDoubles> packed = pack(mine);
  if (r != 0) {
    std::vector<comm::Request> reqs;
    for (const Part& p : parts)
      send_pieces(g, p.local->data(), static_cast<size_t>(p.local->numel()) * sizeof(float), p.tag,
                  reqs);
    send_pieces(g, packed.data(), sizeof(packed), kTagRecord, reqs);
    comm::wait_all(reqs);
    out.ranks = {mine};
    return out;
  }
  for (const Part& p : parts) {
    float* dst = p.into.data();
    if (dst == nullptr) {
      *p.global = core::Tensor<float>(p.shape);
      dst = p.global->data();
    }
    layout.unshard(p.local->data(), p.row, 0, dst);
    std::vector<float> buf(static_cast<size_t>(p.local->numel()));
    for (int src = 1; src < world; ++src) {
      recv_pieces(g, src, buf.data(), buf.size() * sizeof(float), p.tag);
      layout.unshard(buf.data(), p.row, src, dst);
    }
  }
  out.ranks.resize(static_cast<size_t>(world));
  out.ranks[0] = mine;
  for (int src = 1; src < world; ++src) {
    std::array<double, kRecordDoubles> rec{};
    recv_pieces(g, src, rec.data(), sizeof(rec), kTagRecord);
    out.ranks[static_cast<size_t>(src)] = unpack(rec);
  }
  return out;
}

}  // namespace longseq::attention
