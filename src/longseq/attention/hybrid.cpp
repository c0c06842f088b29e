#include "longseq/attention/hybrid.hpp"

#include <algorithm>
#include <vector>

#include "longseq/core/error.hpp"

namespace longseq::attention {

namespace {

// precision bf16: x rounded to bf16 values (round-to-nearest-even), kept in fp32 storage, so the
// fp32 path below computes on exactly the values a bf16 input holds. f32: nothing to do.
core::View<const float> at_precision(core::View<const float> x, const AttentionSpec& spec,
                                     core::Tensor<float>& keep) {
  if (spec.precision == core::DType::f32) return x;
  LONGSEQ_CHECK(spec.precision == core::DType::bf16);
  keep = core::Tensor<float>(x.shape());
  int64_t i = 0;
  for (int64_t a = 0; a < x.dim(0); ++a)
    for (int64_t b = 0; b < x.dim(1); ++b)
      for (int64_t c = 0; c < x.dim(2); ++c) keep.data()[i++] = core::round_bf16(x(a, b, c));
  return keep.view();
}

// The options of the second stack's entry points, from the one algorithm name.
StarTrailOptions startrail_options(const Algorithm& a) {
  return {a.team, a.placement};
}
UspOptions usp_options(const Algorithm& a) {
  return a.family == Algorithm::Family::ulysses ? UspOptions{} : UspOptions{a.degree, a.backward};
}

}  // namespace

AttentionSaved hybrid_forward(const Algorithm& algo, core::View<const float> q,
                              core::View<const float> k, core::View<const float> v,
                              const AttentionSpec& spec, const Layout& layout, comm::Group& group,
                              AttentionStats* stats) {
  algo.validate(layout.world(), q.dim(1), k.dim(1));
  validate_precision(spec.precision);
  core::Tensor<float> kq, kk, kv;
  const core::View<const float> rq = at_precision(q, spec, kq), rk = at_precision(k, spec, kk),
                                rv = at_precision(v, spec, kv);
  AttentionSaved saved;
  switch (algo.family) {
    case Algorithm::Family::startrail:
      saved = startrail_forward(rq, rk, rv, spec, layout, group, stats, startrail_options(algo));
      break;
    case Algorithm::Family::ulysses:
      saved = ulysses_forward(rq, rk, rv, spec, layout, group, stats);
      break;
    case Algorithm::Family::usp:
      saved = usp_forward(rq, rk, rv, spec, layout, group, stats, usp_options(algo));
      break;
    case Algorithm::Family::ring:
      LONGSEQ_CHECK_MSG(false, "hybrid_forward got ", algo.name());
  }
  // The rounded copies die here; the backward rounds the caller's inputs again (same values).
  saved.q = q;
  saved.k = k;
  saved.v = v;
  return saved;
}

AttentionGrads hybrid_backward(const Algorithm& algo, core::View<const float> dout,
                               const AttentionSaved& saved, const AttentionSpec& spec,
                               const Layout& layout, comm::Group& group, AttentionStats* stats) {
  algo.validate(layout.world(), saved.q.dim(1), saved.k.dim(1));
  validate_precision(spec.precision);
  if (spec.precision != core::DType::f32) {
    // The algorithms read q, k, v from `saved`: a copy whose views are the rounded inputs (o and
    // lse are copied too, AttentionSaved owns them; one [L, Hq, D] more, next to the copies of
    // q and dO that rounding makes anyway).
    core::Tensor<float> kq, kk, kv, kd;
    AttentionSaved r{at_precision(saved.q, spec, kq), at_precision(saved.k, spec, kk),
                     at_precision(saved.v, spec, kv), core::Tensor<float>(saved.o.shape()),
                     core::Tensor<float>(saved.lse.shape())};
    std::copy(saved.o.begin(), saved.o.end(), r.o.begin());
    std::copy(saved.lse.begin(), saved.lse.end(), r.lse.begin());
    AttentionSpec f32 = spec;
    f32.precision = core::DType::f32;
    return hybrid_backward(algo, at_precision(dout, spec, kd), r, f32, layout, group, stats);
  }
  switch (algo.family) {
    case Algorithm::Family::startrail:
      return startrail_backward(dout, saved, spec, layout, group, stats, startrail_options(algo));
    case Algorithm::Family::ulysses:
      return ulysses_backward(dout, saved, spec, layout, group, stats);
    case Algorithm::Family::usp:
      return usp_backward(dout, saved, spec, layout, group, stats, usp_options(algo));
    case Algorithm::Family::ring:
      break;
  }
  LONGSEQ_CHECK(false);
  return {};
}

}  // namespace longseq::attention
