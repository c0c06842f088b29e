#pragma once
// Internal to kernels/cpu: tile classification shared by every kernel variant (and by the
// schedules, attention/mask_spec.cpp, and the planner's tests). Not part of the public API
// (attention.hpp is).
//
// Classification uses only the min/max of a tile's valid positions and document ids, which bound
// every pair whatever the order of positions inside the tile: "empty" and "full" are claimed only
// when certain, everything else is "partial" and evaluated per element. So striped, zigzag or
// shuffled positions are correct, and contiguous ones (the common case) skip the most work.
//
// The functions are out of line (tiles.cpp, compiled once for the baseline ISA): the per-variant
// kernels (kernels/cpu/isa/) call them once per tile pair, and an inline copy compiled with AVX-512
// flags could otherwise be the one the linker keeps (see kernels/cpu/isa/README.md).
#include <cstdint>
#include <limits>

#include "longseq/kernels/mask.hpp"

namespace longseq::kernels::cpu::detail {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

/// What classification needs of one tile of tokens [begin, end).
struct TileInfo {
  bool any_valid = false;  ///< at least one non-padding token
  bool all_valid = true;   ///< no padding token
  int64_t pmin = std::numeric_limits<int64_t>::max(), pmax = -1;
  int32_t dmin = std::numeric_limits<int32_t>::max(), dmax = std::numeric_limits<int32_t>::min();
  bool contiguous = true;  ///< no padding and pos[i] = pmin + i: masks reduce to index ranges
};

TileInfo tile_info(const Tokens& t, int64_t begin, int64_t end, bool docs);

enum class TileKind : uint8_t { empty, partial, full };

// Block-mask rectangles larger than this are not scanned (called partial): a striped tile can
// span the whole sequence, and the per-element pass is exact anyway.
inline constexpr int64_t kMaxBlockScan = 4096;

/// empty: no pair of the two tiles is visible; full: every pair is; partial otherwise (or when
/// unsure). A block mask must cover every position of both tiles (LONGSEQ_CHECK).
TileKind classify(const Mask& m, const TileInfo& q, const TileInfo& k);

/// The sub-rectangle of a (query tile, key tile) pair outside which nothing is visible: rows
/// [r0, r1) and columns [c0, c1), in tile-local indices. Causal and window masks are bands in
/// position space, so for contiguous tiles whole rows and columns can be cut (the diagonal tile
/// of a causal mask then computes its triangle's bounding box, not the whole tile).
struct Rect {
  int64_t r0, r1, c0, c1;
  bool empty() const { return r0 >= r1 || c0 >= c1; }
};

Rect trim(const Mask& m, const TileInfo& q, const TileInfo& k, int64_t rows, int64_t cols);

/// Widens a trimmed rectangle to multiples of kTrimQuantum (clamped to the tile). The extra rows
/// and columns are masked per element anyway; what it buys is few distinct GEMM shapes: the
/// oneDNN paths build one matmul primitive per shape (tens of microseconds each, cached per thread
/// up to 256 shapes), and exact trims at arbitrary ring offsets would make new ones every step.
inline constexpr int64_t kTrimQuantum = 64;

Rect quantize(Rect r, int64_t rows, int64_t cols);

/// The part of a (rows x cols) tile pair of kind `kind` that must be computed: the whole tile
/// for a full pair, the trimmed and quantised band for a partial one (empty when nothing sees).
Rect work_rect(const Mask& m, const TileInfo& q, const TileInfo& k, TileKind kind, int64_t rows,
               int64_t cols);

}  // namespace longseq::kernels::cpu::detail
