// Tile classification (contracts in tiles.hpp), compiled once for the baseline ISA.
#include "longseq/kernels/cpu/tiles.hpp"

#include <algorithm>

#include "longseq/core/error.hpp"

namespace longseq::kernels::cpu::detail {

TileInfo tile_info(const Tokens& t, int64_t begin, int64_t end, bool docs) {
  TileInfo r;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t p = t.pos[i];
    if (p < 0 || (i > begin && p != t.pos[i - 1] + 1)) r.contiguous = false;
    if (p < 0) {
      r.all_valid = false;
      continue;
    }
    r.any_valid = true;
    r.pmin = std::min(r.pmin, p);
    r.pmax = std::max(r.pmax, p);
    if (docs) {
      r.dmin = std::min(r.dmin, t.doc[i]);
      r.dmax = std::max(r.dmax, t.doc[i]);
    }
  }
  return r;
}

TileKind classify(const Mask& m, const TileInfo& q, const TileInfo& k) {
  if (!q.any_valid || !k.any_valid) return TileKind::empty;
  bool full = q.all_valid && k.all_valid;
  if (m.causal || m.window > 0) {
    if (k.pmin > q.pmax) return TileKind::empty;  // every key after every query
    if (k.pmax > q.pmin) full = false;
  }
  if (m.window > 0) {
    if (q.pmin - k.pmax >= m.window) return TileKind::empty;  // every key too far back
    if (q.pmax - k.pmin >= m.window) full = false;
  }
  if (m.docs) {
    if (k.dmax < q.dmin || k.dmin > q.dmax) return TileKind::empty;  // disjoint documents
    if (!(q.dmin == q.dmax && k.dmin == k.dmax && q.dmin == k.dmin)) full = false;
  }
  if (m.block_mask) {
    const int64_t b = m.block_size, qb0 = q.pmin / b, qb1 = q.pmax / b, kb0 = k.pmin / b,
                  kb1 = k.pmax / b;
    LONGSEQ_CHECK_MSG(qb1 < m.num_blocks && kb1 < m.num_blocks, "positions ", q.pmax, "/", k.pmax,
                      " beyond block mask of ", m.num_blocks, " blocks of ", b);
    if ((qb1 - qb0 + 1) * (kb1 - kb0 + 1) > kMaxBlockScan) {
      full = false;
    } else {
      bool any = false, all = true;
      for (int64_t qb = qb0; qb <= qb1; ++qb)
        for (int64_t kb = kb0; kb <= kb1; ++kb) {
          const bool vis = m.block_mask[qb * m.num_blocks + kb] != 0;
          any = any || vis;
          all = all && vis;
        }
      if (!any) return TileKind::empty;
      if (!all) full = false;
    }
  }
  return full ? TileKind::full : TileKind::partial;
}

Rect trim(const Mask& m, const TileInfo& q, const TileInfo& k, int64_t rows, int64_t cols) {
  Rect r{0, rows, 0, cols};
  if (!(m.causal || m.window > 0)) return r;
  // Visible pairs have k <= q (and q - k < window).
  if (k.contiguous) r.c1 = std::clamp<int64_t>(q.pmax - k.pmin + 1, 0, cols);
  if (q.contiguous) r.r0 = std::clamp<int64_t>(k.pmin - q.pmin, 0, rows);
  if (m.window > 0) {
    if (k.contiguous) r.c0 = std::clamp<int64_t>(q.pmin - m.window + 1 - k.pmin, 0, cols);
    if (q.contiguous) r.r1 = std::clamp<int64_t>(k.pmax + m.window - q.pmin, 0, rows);
  }
  return r;
}

Rect quantize(Rect r, int64_t rows, int64_t cols) {
  if (r.empty()) return r;
  auto down = [](int64_t x) { return x / kTrimQuantum * kTrimQuantum; };
  auto up = [](int64_t x, int64_t lim) {
    return std::min(lim, (x + kTrimQuantum - 1) / kTrimQuantum * kTrimQuantum);
  };
  return {down(r.r0), up(r.r1, rows), down(r.c0), up(r.c1, cols)};
}

Rect work_rect(const Mask& m, const TileInfo& q, const TileInfo& k, TileKind kind, int64_t rows,
               int64_t cols) {
  return kind == TileKind::partial ? quantize(trim(m, q, k, rows, cols), rows, cols)
                                   : Rect{0, rows, 0, cols};
}

}  // namespace longseq::kernels::cpu::detail
