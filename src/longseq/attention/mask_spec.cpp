#include "longseq/attention/mask_spec.hpp"

#include <algorithm>
#include <cstring>

#include "longseq/core/error.hpp"
#include "longseq/core/npy.hpp"
#include "longseq/kernels/cpu/tiles.hpp"

namespace longseq::attention {

using core::fail;
using core::require;

namespace {

int64_t parse_int(std::string_view s, std::string_view what) {
  int64_t v = 0;
  if (s.empty()) fail("attention", "--mask ", what, ": missing number");
  for (char c : s) {
    if (c < '0' || c > '9')
      fail("attention", "--mask ", what, ": '", s, "' is not a positive integer");
    v = v * 10 + (c - '0');
    if (v > (int64_t{1} << 50)) fail("attention", "--mask ", what, ": '", s, "' is too large");
  }
  return v;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t i = s.find(sep, start);
    out.push_back(
        s.substr(start, i == std::string_view::npos ? std::string_view::npos : i - start));
    if (i == std::string_view::npos) break;
    start = i + 1;
  }
  return out;
}

}  // namespace

MaskSpec MaskSpec::parse(std::string_view text, bool causal, int64_t n) {
  MaskSpec m;
  m.causal = causal;
  for (std::string_view term : split(text, ',')) {
    if (term == "full") continue;
    if (term == "causal") {
      m.causal = true;
    } else if (term.rfind("window:", 0) == 0) {
      m.window = parse_int(term.substr(7), "window:W");
      require(m.window > 0, "attention", "--mask window:W needs W >= 1, got ", m.window);
    } else if (term.rfind("document:", 0) == 0) {
      const std::string file(term.substr(9));
      require(!file.empty(), "attention", "--mask document:FILE needs a file");
      core::NpyArray a = core::read_npy_expect(file, core::DType::i32, 1, "document ids");
      require(a.shape[0] == n, "attention", "document ids ", file, " have length ", a.shape[0],
              ", the sequence has ", n, " tokens");
      m.doc_ids.resize(n);
      std::memcpy(m.doc_ids.data(), a.bytes.data(), a.bytes.size());
      m.causal = true;
    } else if (term.rfind("blocks:", 0) == 0) {
      const std::string_view rest = term.substr(7);
      const size_t colon = rest.rfind(':');
      require(colon != std::string_view::npos && colon > 0, "attention",
              "--mask blocks:FILE:B needs a file and a block size, got '", term, "'");
      const std::string file(rest.substr(0, colon));
      m.block_size = parse_int(rest.substr(colon + 1), "blocks:FILE:B");
      require(m.block_size > 0, "attention", "--mask blocks:FILE:B needs B >= 1");
      m.num_blocks = (n + m.block_size - 1) / m.block_size;
      core::NpyArray a = core::read_npy(file);
      require(a.dtype == core::DType::u8 || a.dtype == core::DType::boolean, "attention",
              "block mask ", file, " has dtype ", core::dtype_name(a.dtype),
              ", expected u8 or bool");
      require(a.shape.size() == 2 && a.shape[0] == m.num_blocks && a.shape[1] == m.num_blocks,
              "attention", "block mask ", file, " has shape ",
              core::Shape(a.shape.begin(), a.shape.end()).str(), ", expected [", m.num_blocks, ", ",
              m.num_blocks, "] for ", n, " tokens in blocks of ", m.block_size);
      m.block_mask.assign(a.bytes.begin(), a.bytes.end());
    } else {
      fail("attention", "unknown --mask term '", term,
           "' (expected full, causal, window:W, document:FILE or blocks:FILE:B, comma-separated)");
    }
  }
  m.validate(n);
  return m;
}

void MaskSpec::validate(int64_t n) const {
  require(window >= 0, "attention", "mask window must be >= 0, got ", window);
  require(doc_ids.empty() || static_cast<int64_t>(doc_ids.size()) == n, "attention", "mask has ",
          doc_ids.size(), " document ids for ", n, " tokens");
  if (!block_mask.empty()) {
    require(block_size > 0, "attention", "block mask needs block_size >= 1, got ", block_size);
    const int64_t nb = (n + block_size - 1) / block_size;
    require(num_blocks == nb && static_cast<int64_t>(block_mask.size()) == nb * nb, "attention",
            "block mask is ", num_blocks, "x", num_blocks, " (", block_mask.size(), " entries), ",
            n, " tokens in blocks of ", block_size, " need ", nb, "x", nb);
  }
}

kernels::Mask MaskSpec::kernel_mask() const {
  kernels::Mask k;
  k.causal = causal;
  k.window = window;
  k.docs = !doc_ids.empty();
  if (!block_mask.empty()) {
    k.block_mask = block_mask.data();
    k.block_size = block_size;
    k.num_blocks = num_blocks;
  }
  return k;
}

std::string MaskSpec::describe() const {
  std::string s;
  auto add = [&](const std::string& t) { s += (s.empty() ? "" : "+") + t; };
  if (causal) add("causal");
  if (window > 0) add("window:" + std::to_string(window));
  if (!doc_ids.empty()) add("document");
  if (!block_mask.empty()) add("blocks:" + std::to_string(block_size));
  return s.empty() ? "full" : s;
}

std::string_view pair_kind_name(PairKind k) {
  switch (k) {
    case PairKind::empty:
      return "empty";
    case PairKind::partial:
      return "partial";
    case PairKind::full:
      return "full";
  }
  return "?";
}

ChunkInfo chunk_info(const Chunk& c, int64_t n, const MaskSpec& m) {
  ChunkInfo info;
  for (int64_t i = 0; i < c.len; ++i) {
    const int64_t p = c.pos_begin + i * c.pos_stride;
    if (p >= n) {
      info.has_padding = true;
      continue;
    }
    const int32_t d = m.doc_ids.empty() ? 0 : m.doc_ids[p];
    if (!info.any_valid) {
      info.pmin = info.pmax = p;
      info.dmin = info.dmax = d;
      info.any_valid = true;
    }
    info.pmin = std::min(info.pmin, p);
    info.pmax = std::max(info.pmax, p);
    info.dmin = std::min(info.dmin, d);
    info.dmax = std::max(info.dmax, d);
  }
  return info;
}

// The kernels' own tile classification (kernels/cpu/tiles.hpp), so the schedule and the kernels
// agree on what is empty, and the block-mask scan is bounded the same way (a striped chunk spans
// the whole sequence: an unbounded scan would cost O(nb^2) per chunk pair).
PairKind classify(const MaskSpec& m, const ChunkInfo& q, const ChunkInfo& k) {
  auto tile = [](const ChunkInfo& c) {
    kernels::cpu::detail::TileInfo t;
    t.any_valid = c.any_valid;
    t.all_valid = !c.has_padding;
    t.pmin = c.pmin;
    t.pmax = c.pmax;
    t.dmin = c.dmin;
    t.dmax = c.dmax;
    return t;
  };
  switch (kernels::cpu::detail::classify(m.kernel_mask(), tile(q), tile(k))) {
    case kernels::cpu::detail::TileKind::empty:
      return PairKind::empty;
    case kernels::cpu::detail::TileKind::full:
      return PairKind::full;
    default:
      return PairKind::partial;
  }
}

PairTable::PairTable(const Layout& layout, const MaskSpec& mask)
    : world_(layout.world()), chunks_(static_cast<int>(layout.chunks(0).size())) {
  std::vector<ChunkInfo> info(static_cast<size_t>(world_) * chunks_);
  for (int r = 0; r < world_; ++r)
    for (int c = 0; c < chunks_; ++c)
      info[r * chunks_ + c] = chunk_info(layout.chunks(r)[c], layout.global_len(), mask);
  const size_t per = static_cast<size_t>(world_) * chunks_;
  kinds_.resize(per * per);
  any_.assign(static_cast<size_t>(world_) * world_, 0);
  for (int qr = 0; qr < world_; ++qr)
    for (int qc = 0; qc < chunks_; ++qc)
      for (int kr = 0; kr < world_; ++kr)
        for (int kc = 0; kc < chunks_; ++kc) {
          const PairKind k = classify(mask, info[qr * chunks_ + qc], info[kr * chunks_ + kc]);
          kinds_[(static_cast<size_t>(qr) * chunks_ + qc) * per + kr * chunks_ + kc] = k;
          if (k != PairKind::empty) any_[qr * world_ + kr] = 1;
        }
}

PairKind PairTable::kind(int q_rank, int qc, int k_rank, int kc) const {
  const size_t per = static_cast<size_t>(world_) * chunks_;
  return kinds_[(static_cast<size_t>(q_rank) * chunks_ + qc) * per + k_rank * chunks_ + kc];
}

}  // namespace longseq::attention
