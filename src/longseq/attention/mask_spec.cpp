#include "longseq/attention/mask_spec.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

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

std::vector<int32_t> MaskSpec::documents_from_offsets(std::span<const int64_t> offsets, int64_t n) {
  require(offsets.size() >= 2 && offsets.front() == 0 && offsets.back() == n, "attention",
          "cu_seqlens of ", offsets.size(), " entries must start at 0 and end at the ", n,
          " tokens (first ", offsets.empty() ? -1 : offsets.front(), ", last ",
          offsets.empty() ? -1 : offsets.back(), ")");
  require(offsets.size() - 1 <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
          "attention", "cu_seqlens of ", offsets.size(), " entries: too many documents");
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    require(offsets[i] <= offsets[i + 1], "attention", "cu_seqlens decreases at entry ", i + 1,
            ": ", offsets[i], " then ", offsets[i + 1]);
    std::fill(ids.begin() + offsets[i], ids.begin() + offsets[i + 1], static_cast<int32_t>(i));
  }
  return ids;
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
  // Positions rise along a chunk: its valid tokens are a prefix.
  const int64_t valid =
      c.pos_begin >= n
          ? 0
          : std::min<int64_t>(c.len, (n - c.pos_begin + c.pos_stride - 1) / c.pos_stride);
  info.has_padding = valid < c.len;
  if (valid == 0) return info;
  info.any_valid = true;
  info.pmin = c.pos_begin;
  info.pmax = c.pos_begin + (valid - 1) * c.pos_stride;
  if (m.doc_ids.empty()) return info;
  info.dmin = info.dmax = m.doc_ids[static_cast<size_t>(c.pos_begin)];
  for (int64_t i = 1; i < valid; ++i) {
    const int32_t d = m.doc_ids[static_cast<size_t>(c.pos_begin + i * c.pos_stride)];
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

// ---- visible pair counts

namespace {

// Pairs (q, k) of [q0, q1] x [k0, k1] with q - k <= t.
unsigned __int128 pairs_diff_le(int64_t q0, int64_t q1, int64_t k0, int64_t k1, int64_t t) {
  if (q1 < q0 || k1 < k0) return 0;
  using U = unsigned __int128;
  const int64_t width = k1 - k0 + 1;
  U total = 0;
  // Rows q <= k0 + t see the whole key range.
  const int64_t full_hi = std::min(q1, k0 + t);
  if (full_hi >= q0) total += static_cast<U>(full_hi - q0 + 1) * static_cast<U>(width);
  // Rows k0 + t < q <= k1 + t see k1 + t + 1 - q keys (width - 1 down to 1).
  const int64_t lo = std::max(q0, k0 + t + 1), hi = std::min(q1, k1 + t);
  if (hi >= lo) {
    const U first = static_cast<U>(k1 + t + 1 - lo), last = static_cast<U>(k1 + t + 1 - hi);
    total += (first + last) * static_cast<U>(hi - lo + 1) / 2;
  }
  return total;
}

// The band of q - k the mask allows, [dlo, dhi] (wider than any pair when unbounded).
struct Band {
  int64_t dlo, dhi;
};

Band band_of(const MaskSpec& m, int64_t n) {
  const bool causal = m.causal || m.window > 0;
  return {causal ? 0 : -n, m.window > 0 ? std::min(m.window - 1, n) : n};
}

// Pairs of [q0, q1] x [k0, k1] inside the band.
unsigned __int128 pairs_in(int64_t q0, int64_t q1, int64_t k0, int64_t k1, Band b) {
  return pairs_diff_le(q0, q1, k0, k1, b.dhi) - pairs_diff_le(q0, q1, k0, k1, b.dlo - 1);
}

// Maximal runs of equal document ids, and the runs of each id in position order.
struct DocRuns {
  std::vector<int64_t> start, end;  // inclusive, by position
  std::vector<int32_t> id;
  std::vector<int64_t> by_id;        // run indices sorted by (id, start)
  std::vector<int64_t> group_begin;  // [i]: first index in by_id of by_id[i]'s id
  std::vector<int64_t> group_end;    // [i]: one past its last
  std::vector<int64_t> slot;         // [run]: its index in by_id

  explicit DocRuns(const std::vector<int32_t>& doc) {
    const int64_t n = static_cast<int64_t>(doc.size());
    for (int64_t i = 0; i < n; ++i) {
      if (i == 0 || doc[i] != doc[i - 1]) {
        start.push_back(i);
        end.push_back(i);
        id.push_back(doc[i]);
      } else {
        end.back() = i;
      }
    }
    const int64_t r = static_cast<int64_t>(start.size());
    by_id.resize(r);
    for (int64_t i = 0; i < r; ++i) by_id[i] = i;
    std::stable_sort(by_id.begin(), by_id.end(),
                     [&](int64_t a, int64_t b) { return id[a] < id[b]; });
    group_begin.resize(r);
    group_end.resize(r);
    slot.resize(r);
    for (int64_t i = 0; i < r;) {
      int64_t j = i;
      while (j < r && id[by_id[j]] == id[by_id[i]]) ++j;
      for (int64_t x = i; x < j; ++x) {
        group_begin[x] = i;
        group_end[x] = j;
        slot[by_id[x]] = x;
      }
      i = j;
    }
  }
  // The run holding position p.
  int64_t run_at(int64_t p) const {
    return std::upper_bound(start.begin(), start.end(), p) - start.begin() - 1;
  }
};

// Same-document pairs of [q0, q1] x [k0, k1] inside the band: every run of the query range
// against the runs of its id that meet the key range (found by binary search in the id's runs).
unsigned __int128 doc_pairs_in(const DocRuns& d, int64_t q0, int64_t q1, int64_t k0, int64_t k1,
                               Band b) {
  unsigned __int128 total = 0;
  if (q1 < q0 || k1 < k0) return 0;
  for (int64_t a = d.run_at(q0); a < static_cast<int64_t>(d.start.size()) && d.start[a] <= q1;
       ++a) {
    const int64_t qa = std::max(q0, d.start[a]), qb = std::min(q1, d.end[a]);
    const auto first = d.by_id.begin() + d.group_begin[d.slot[a]];
    const auto last = d.by_id.begin() + d.group_end[d.slot[a]];
    // Runs of one id are disjoint and sorted by start, so their ends rise too.
    for (auto it = std::lower_bound(first, last, k0,
                                    [&](int64_t run, int64_t p) { return d.end[run] < p; });
         it != last && d.start[*it] <= k1; ++it)
      total += pairs_in(qa, qb, std::max(k0, d.start[*it]), std::min(k1, d.end[*it]), b);
  }
  return total;
}

uint64_t narrow(unsigned __int128 v, const MaskSpec& m, int64_t n) {
  core::require(v <= std::numeric_limits<uint64_t>::max(), "attention", "mask ", m.describe(),
                " over ", n, " tokens has more than 2^64 visible pairs");
  return static_cast<uint64_t>(v);
}

}  // namespace

uint64_t count_visible(const MaskSpec& m, int64_t n) {
  m.validate(n);
  if (n <= 0) return 0;
  const Band band = band_of(m, n);
  const bool docs = !m.doc_ids.empty();
  std::optional<DocRuns> runs;
  if (docs) runs.emplace(m.doc_ids);
  unsigned __int128 total = 0;
  if (m.block_mask.empty()) {
    if (!docs) return narrow(pairs_in(0, n - 1, 0, n - 1, band), m, n);
    const DocRuns& d = *runs;
    const int64_t r = static_cast<int64_t>(d.start.size());
    for (int64_t g = 0; g < r; g = d.group_end[g]) {
      if (m.window <= 0) {
        // Any two tokens of one document: every pair (full) or one order of it plus the diagonal.
        unsigned __int128 c = 0;
        for (int64_t x = g; x < d.group_end[g]; ++x)
          c += static_cast<unsigned __int128>(d.end[d.by_id[x]] - d.start[d.by_id[x]] + 1);
        total += m.causal ? c * (c + 1) / 2 : c * c;
        continue;
      }
      // Window: each run against itself and the earlier runs of its id that reach into its window.
      for (int64_t x = g; x < d.group_end[g]; ++x) {
        const int64_t a = d.by_id[x];
        for (int64_t y = x; y >= g; --y) {
          const int64_t b = d.by_id[y];
          if (d.end[b] < d.start[a] - band.dhi) break;
          total += pairs_in(d.start[a], d.end[a], d.start[b], d.end[b], band);
        }
      }
    }
    return narrow(total, m, n);
  }
  // Block mask: the visible blocks of every block row inside the band.
  const int64_t bs = m.block_size, nb = m.num_blocks;
  for (int64_t qb = 0; qb < nb; ++qb) {
    const int64_t q0 = qb * bs, q1 = std::min(n, q0 + bs) - 1;
    const int64_t kb_lo = std::clamp<int64_t>((q0 - band.dhi) / bs - 1, 0, nb - 1);
    const int64_t kb_hi = std::clamp<int64_t>((q1 - band.dlo) / bs + 1, 0, nb - 1);
    const uint8_t* row = m.block_mask.data() + qb * nb;
    for (int64_t kb = kb_lo; kb <= kb_hi; ++kb) {
      if (!row[kb]) continue;
      const int64_t k0 = kb * bs, k1 = std::min(n, k0 + bs) - 1;
      total += docs ? doc_pairs_in(*runs, q0, q1, k0, k1, band) : pairs_in(q0, q1, k0, k1, band);
    }
  }
  return narrow(total, m, n);
}

// ---- pair tables

PairTable::PairTable(const Layout& layout, const MaskSpec& mask)
    : world_(layout.world()), chunks_(static_cast<int>(layout.chunks(0).size())) {
  const int64_t per = static_cast<int64_t>(world_) * chunks_;
  std::vector<ChunkInfo> info(static_cast<size_t>(per));
  for (int r = 0; r < world_; ++r)
    for (int c = 0; c < chunks_; ++c)
      info[static_cast<size_t>(r) * chunks_ + c] =
          chunk_info(layout.chunks(r)[c], layout.global_len(), mask);
  offsets_.assign(static_cast<size_t>(per) + 1, 0);
  any_.assign(static_cast<size_t>(world_) * world_, 0);
  auto add = [&](int qr, int qc, int kr, int kc) {
    const PairKind k = classify(mask, info[static_cast<size_t>(qr) * chunks_ + qc],
                                info[static_cast<size_t>(kr) * chunks_ + kc]);
    if (k == PairKind::empty) return;
    entries_.push_back({kr, kc, k});
    any_[qr * world_ + kr] = 1;
  };
  // Block-striped chunk b of every rank lies inside mask block b: a pair can be non-empty only
  // where block (qb, kb) is visible, inside the band of q - k.
  const bool by_blocks = layout.balance() == Balance::block_striped && !mask.block_mask.empty() &&
                         layout.block() == mask.block_size && chunks_ == mask.num_blocks;
  // The visible blocks of every block row inside the band, found once for all ranks.
  std::vector<int64_t> row_begin;
  std::vector<int32_t> visible;
  if (by_blocks) {
    const Band band = band_of(mask, layout.global_len());
    const int64_t bs = mask.block_size, nb = mask.num_blocks;
    row_begin.reserve(static_cast<size_t>(nb) + 1);
    for (int64_t qb = 0; qb < nb; ++qb) {
      row_begin.push_back(static_cast<int64_t>(visible.size()));
      const int64_t q0 = qb * bs, q1 = q0 + bs - 1;
      const int64_t lo = std::clamp<int64_t>((q0 - band.dhi) / bs - 1, 0, nb - 1);
      const int64_t hi = std::clamp<int64_t>((q1 - band.dlo) / bs + 1, 0, nb - 1);
      const uint8_t* row = mask.block_mask.data() + qb * nb;
      for (int64_t kb = lo; kb <= hi; ++kb)
        if (row[kb]) visible.push_back(static_cast<int32_t>(kb));
    }
    row_begin.push_back(static_cast<int64_t>(visible.size()));
  }
  for (int qr = 0; qr < world_; ++qr)
    for (int qc = 0; qc < chunks_; ++qc) {
      if (by_blocks) {
        for (int kr = 0; kr < world_; ++kr)
          for (int64_t i = row_begin[qc]; i < row_begin[qc + 1]; ++i) add(qr, qc, kr, visible[i]);
      } else {
        for (int kr = 0; kr < world_; ++kr)
          for (int kc = 0; kc < chunks_; ++kc) add(qr, qc, kr, kc);
      }
      offsets_[static_cast<size_t>(qr) * chunks_ + qc + 1] = static_cast<int64_t>(entries_.size());
    }
  // The key-rank-major view: a stable counting sort of the rows (visited by (q_rank, qc), each by
  // (k_rank, kc)) by key rank keeps every column in (q_rank, qc, kc) order.
  col_offsets_.assign(static_cast<size_t>(world_) + 1, 0);
  for (const Entry& e : entries_) ++col_offsets_[static_cast<size_t>(e.k_rank) + 1];
  for (int r = 0; r < world_; ++r) col_offsets_[r + 1] += col_offsets_[r];
  columns_.resize(entries_.size());
  std::vector<int64_t> fill(col_offsets_.begin(), col_offsets_.end() - 1);
  for (int qr = 0; qr < world_; ++qr)
    for (int qc = 0; qc < chunks_; ++qc)
      for (const Entry& e : chunk_row(qr, qc))
        columns_[static_cast<size_t>(fill[e.k_rank]++)] = {qr, qc, e.kc, e.kind};
}

std::span<const PairTable::Entry> PairTable::chunk_row(int q_rank, int qc) const {
  const size_t i = static_cast<size_t>(q_rank) * chunks_ + qc;
  return {entries_.data() + offsets_[i], entries_.data() + offsets_[i + 1]};
}

std::span<const PairTable::Entry> PairTable::row(int q_rank, int qc, int k_rank) const {
  const std::span<const Entry> all = chunk_row(q_rank, qc);
  const auto lo = std::lower_bound(all.begin(), all.end(), k_rank,
                                   [](const Entry& e, int r) { return e.k_rank < r; });
  const auto hi = std::lower_bound(lo, all.end(), k_rank + 1,
                                   [](const Entry& e, int r) { return e.k_rank < r; });
  return {lo, hi};
}

namespace {

// The first index of sorted `all` whose element is not below the target (`below(e)`: e sorts
// before it), searched outwards from `hint` with doubling steps: O(log distance from the hint).
template <class T, class Below>
size_t gallop(std::span<const T> all, size_t hint, Below below) {
  const size_t n = all.size();
  size_t lo = 0, hi = n;
  const size_t h = std::min(hint, n);
  if (h < n && below(all[h])) {  // the answer is after h
    size_t step = 1;
    lo = h + 1;  // all[lo - 1] is below
    while (lo + step - 1 < n && below(all[lo + step - 1])) {
      lo += step;
      step *= 2;
    }
    hi = std::min(n, lo + step - 1);
  } else {  // the answer is at or before h
    size_t step = 1;
    hi = h;  // all[hi] (when hi < n) is not below
    while (hi >= step && !below(all[hi - step])) {
      hi -= step;
      step *= 2;
    }
    lo = hi >= step ? hi - step + 1 : 0;
  }
  return static_cast<size_t>(std::partition_point(all.begin() + static_cast<std::ptrdiff_t>(lo),
                                                  all.begin() + static_cast<std::ptrdiff_t>(hi),
                                                  below) -
                             all.begin());
}

}  // namespace

std::span<const PairTable::Entry> PairTable::row_near(int q_rank, int qc, int k_rank,
                                                      size_t& hint) const {
  const std::span<const Entry> all = chunk_row(q_rank, qc);
  const size_t first = gallop(all, hint, [&](const Entry& e) { return e.k_rank < k_rank; });
  size_t last = first;
  while (last < all.size() && all[last].k_rank == k_rank) ++last;
  hint = first;
  return all.subspan(first, last - first);
}

std::span<const PairTable::ColumnEntry> PairTable::column_near(int k_rank, int q_rank, int qc,
                                                               size_t& hint) const {
  const std::span<const ColumnEntry> all{columns_.data() + col_offsets_[k_rank],
                                         columns_.data() + col_offsets_[k_rank + 1]};
  const size_t first = gallop(all, hint, [&](const ColumnEntry& e) {
    return e.q_rank < q_rank || (e.q_rank == q_rank && e.qc < qc);
  });
  size_t last = first;
  while (last < all.size() && all[last].q_rank == q_rank && all[last].qc == qc) ++last;
  hint = first;
  return all.subspan(first, last - first);
}

PairKind PairTable::kind(int q_rank, int qc, int k_rank, int kc) const {
  const std::span<const Entry> r = row(q_rank, qc, k_rank);
  const auto it =
      std::lower_bound(r.begin(), r.end(), kc, [](const Entry& e, int c) { return e.kc < c; });
  return it != r.end() && it->kc == kc ? it->kind : PairKind::empty;
}

}  // namespace longseq::attention
