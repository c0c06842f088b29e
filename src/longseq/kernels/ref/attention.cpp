// The attention specification in fp64 with plain loops. Obviousness over speed: scores of one
// (query, head) row are materialised, softmax is taken with the max subtracted, and the backward
// recomputes the probabilities from the forward's LSE exactly as FlashAttention's backward does.
#include "longseq/kernels/ref/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "longseq/core/error.hpp"

namespace longseq::kernels::ref {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

void check_dims(const AttnDims& d, const Mask& mask, const Tokens& qt, const Tokens& kt) {
  core::require(d.tq >= 0 && d.tk >= 0 && d.hq > 0 && d.hkv > 0 && d.d > 0, "kernels.ref",
                "attention dims must be tq, tk >= 0 and hq, hkv, d > 0; got tq ", d.tq, " tk ",
                d.tk, " hq ", d.hq, " hkv ", d.hkv, " d ", d.d);
  core::require(d.hq % d.hkv == 0, "kernels.ref", "attention needs hkv to divide hq; got hq ", d.hq,
                " hkv ", d.hkv);
  core::require(d.tq == 0 || qt.pos != nullptr, "kernels.ref", "query positions are null");
  core::require(d.tk == 0 || kt.pos != nullptr, "kernels.ref", "key positions are null");
  if (mask.docs)
    core::require((d.tq == 0 || qt.doc) && (d.tk == 0 || kt.doc), "kernels.ref",
                  "mask.docs needs document ids for queries and keys");
  if (mask.block_mask)
    core::require(mask.block_size > 0 && mask.num_blocks > 0, "kernels.ref",
                  "block mask needs block_size > 0 and num_blocks > 0; got block_size ",
                  mask.block_size, " num_blocks ", mask.num_blocks);
}

// Block-mask lookups past num_blocks would read out of bounds: a position beyond the mask's
// extent is a caller bug, refused before any predicate runs.
void check_block_extent(const Mask& mask, const Tokens& t, int64_t n, const char* what) {
  if (!mask.block_mask) return;
  for (int64_t i = 0; i < n; ++i)
    core::require(t.pos[i] < mask.block_size * mask.num_blocks, "kernels.ref", what, " position ",
                  t.pos[i], " lies beyond the block mask (", mask.num_blocks, " blocks of ",
                  mask.block_size, ")");
}

double dot(const double* a, const double* b, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Scaled masked scores of query row (i, h) against every key; invisible keys get -inf.
// Returns the row's logsumexp (-inf when nothing is visible).
double row_scores(const double* q, const double* k, const Tokens& qt, const Tokens& kt,
                  const Mask& mask, double scale, const AttnDims& dm, int64_t i, int64_t h,
                  std::vector<double>& s) {
  const int64_t g = dm.hq / dm.hkv, hk = h / g;
  const double* qi = q + (i * dm.hq + h) * dm.d;
  double mx = kNegInf;
  for (int64_t j = 0; j < dm.tk; ++j) {
    if (visible(mask, qt, i, kt, j)) {
      s[j] = scale * dot(qi, k + (j * dm.hkv + hk) * dm.d, dm.d);
      if (s[j] > mx) mx = s[j];
    } else {
      s[j] = kNegInf;
    }
  }
  if (mx == kNegInf) return kNegInf;
  double sum = 0.0;
  for (int64_t j = 0; j < dm.tk; ++j)
    if (s[j] != kNegInf) sum += std::exp(s[j] - mx);
  return mx + std::log(sum);
}

}  // namespace

void attention_forward(const double* q, const double* k, const double* v, const Tokens& qt,
                       const Tokens& kt, const Mask& mask, double scale, const AttnDims& dims,
                       double* o, double* lse) {
  check_dims(dims, mask, qt, kt);
  check_block_extent(mask, qt, dims.tq, "query");
  check_block_extent(mask, kt, dims.tk, "key");
  const int64_t g = dims.hq / dims.hkv, D = dims.d;
  std::vector<double> s(static_cast<size_t>(dims.tk));
  for (int64_t i = 0; i < dims.tq; ++i) {
    for (int64_t h = 0; h < dims.hq; ++h) {
      const double l = row_scores(q, k, qt, kt, mask, scale, dims, i, h, s);
      double* oi = o + (i * dims.hq + h) * D;
      for (int64_t c = 0; c < D; ++c) oi[c] = 0.0;
      if (lse) lse[i * dims.hq + h] = l;
      if (l == kNegInf) continue;
      for (int64_t j = 0; j < dims.tk; ++j) {
        if (s[j] == kNegInf) continue;
        const double p = std::exp(s[j] - l);
        const double* vj = v + (j * dims.hkv + h / g) * D;
        for (int64_t c = 0; c < D; ++c) oi[c] += p * vj[c];
      }
    }
  }
}

void attention_backward(const double* q, const double* k, const double* v, const double* dout,
                        const Tokens& qt, const Tokens& kt, const Mask& mask, double scale,
                        const AttnDims& dims, double* dq, double* dk, double* dv) {
  check_dims(dims, mask, qt, kt);
  check_block_extent(mask, qt, dims.tq, "query");
  check_block_extent(mask, kt, dims.tk, "key");
  const int64_t g = dims.hq / dims.hkv, D = dims.d;
  for (int64_t x = 0; x < dims.tq * dims.hq * D; ++x) dq[x] = 0.0;
  for (int64_t x = 0; x < dims.tk * dims.hkv * D; ++x) dk[x] = dv[x] = 0.0;
  std::vector<double> s(static_cast<size_t>(dims.tk)), p(s.size()), dp(s.size());
  for (int64_t i = 0; i < dims.tq; ++i) {
    for (int64_t h = 0; h < dims.hq; ++h) {
      const double l = row_scores(q, k, qt, kt, mask, scale, dims, i, h, s);
      if (l == kNegInf) continue;  // sees nothing: o = 0 is constant, no gradient flows
      const int64_t hk = h / g;
      const double* qi = q + (i * dims.hq + h) * D;
      const double* doi = dout + (i * dims.hq + h) * D;
      // P = exp(S - lse); dP = dO V^T; Di = rowsum(P * dP) = rowsum(dO * O); dS = P (dP - Di).
      double di = 0.0;
      for (int64_t j = 0; j < dims.tk; ++j) {
        if (s[j] == kNegInf) {
          p[j] = dp[j] = 0.0;
          continue;
        }
        p[j] = std::exp(s[j] - l);
        dp[j] = dot(doi, v + (j * dims.hkv + hk) * D, D);
        di += p[j] * dp[j];
      }
      double* dqi = dq + (i * dims.hq + h) * D;
      for (int64_t j = 0; j < dims.tk; ++j) {
        if (s[j] == kNegInf) continue;
        const double ds = p[j] * (dp[j] - di) * scale;
        const double* kj = k + (j * dims.hkv + hk) * D;
        double* dkj = dk + (j * dims.hkv + hk) * D;
        double* dvj = dv + (j * dims.hkv + hk) * D;
        for (int64_t c = 0; c < D; ++c) {
          dqi[c] += ds * kj[c];
          dkj[c] += ds * qi[c];
          dvj[c] += p[j] * doi[c];
        }
      }
    }
  }
}

void attention_d(const double* o, const double* dout, int64_t t, int64_t h, int64_t d,
                 double* delta) {
  for (int64_t r = 0; r < t * h; ++r) delta[r] = dot(o + r * d, dout + r * d, d);
}

void merge_partials(double* o, double* lse, const double* o_other, const double* lse_other,
                    int64_t t, int64_t h, int64_t d) {
  core::require(t >= 0 && h >= 0 && d >= 0, "kernels.ref", "merge_partials t=", t, " h=", h,
                " d=", d, ": dims must be >= 0");
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < t * h; ++r) {
    const double a = lse[r], b = lse_other[r];
    double* x = o + r * d;
    const double* y = o_other + r * d;
    if (a == kNegInf && b == kNegInf) {
      for (int64_t j = 0; j < d; ++j) x[j] = 0.0;
      continue;
    }
    const double m = std::max(a, b);
    const double l = m + std::log(std::exp(a - m) + std::exp(b - m));
    // A side that saw nothing is skipped, not weighted by exp(-inf) = 0: 0 * NaN in its unread o
    // would leak, which the contract excludes.
    const bool use_a = a != kNegInf, use_b = b != kNegInf;
    const double wa = std::exp(a - l), wb = std::exp(b - l);
    for (int64_t j = 0; j < d; ++j) x[j] = (use_a ? wa * x[j] : 0.0) + (use_b ? wb * y[j] : 0.0);
    lse[r] = l;
  }
}

}  // namespace longseq::kernels::ref
