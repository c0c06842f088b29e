#include "longseq/attention/hybrid.hpp"

#include <algorithm>
#include <charconv>
#include <vector>

#include "longseq/core/error.hpp"

namespace longseq::attention {

namespace {

std::vector<std::string_view> split_colon(std::string_view s) {
  std::vector<std::string_view> parts;
  size_t b = 0;
  while (true) {
    const size_t e = s.find(':', b);
    parts.push_back(s.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b));
    if (e == std::string_view::npos) break;
    b = e + 1;
  }
  return parts;
}

int parse_positive(std::string_view text, std::string_view whole, const char* what) {
  int v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  core::require(ec == std::errc() && p == text.data() + text.size() && v >= 1, "attention",
                "--algo ", whole, ": ", what, " must be a positive integer, got '", text, "'");
  return v;
}

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

}  // namespace

std::optional<HybridAlgo> HybridAlgo::parse(std::string_view s) {
  const std::vector<std::string_view> p = split_colon(s);
  HybridAlgo a;
  if (p[0] == "ulysses") {
    core::require(p.size() == 1, "attention", "--algo ", s, ": ulysses takes no options");
    a.kind = Kind::ulysses;
    return a;
  }
  if (p[0] == "startrail") {
    core::require(p.size() == 2 || p.size() == 3, "attention", "--algo ", s,
                  ": expected startrail:C or startrail:C:teams|rings");
    a.kind = Kind::startrail;
    a.startrail.c = parse_positive(p[1], s, "C");
    if (p.size() == 3) {
      if (p[2] == "teams") {
        a.startrail.placement = TeamPlacement::teams;
      } else if (p[2] == "rings") {
        a.startrail.placement = TeamPlacement::rings;
      } else {
        core::fail("attention", "--algo ", s, ": placement '", p[2], "' is not teams or rings");
      }
    }
    return a;
  }
  if (p[0] == "usp") {
    core::require(p.size() == 2 || p.size() == 3, "attention", "--algo ", s,
                  ": expected usp:U or usp:U:burst|ring");
    a.kind = Kind::usp;
    a.usp.u = parse_positive(p[1], s, "U");
    if (p.size() == 3) {
      if (p[2] == "burst") {
        a.usp.backward = Backward::q;
      } else if (p[2] == "ring") {
        a.usp.backward = Backward::kv;
      } else {
        core::fail("attention", "--algo ", s, ": cross-group backward '", p[2], "' is not burst or ring");
      }
    }
    return a;
  }
  return std::nullopt;
}

std::string HybridAlgo::name() const {
  switch (kind) {
    case Kind::ulysses: return "ulysses";
    case Kind::startrail:
      return core::cat("startrail:", startrail.c, ":", team_placement_name(startrail.placement));
    case Kind::usp:
      return core::cat("usp:", usp.u, usp.backward == Backward::kv ? ":ring" : ":burst");
  }
  return "?";
}

void HybridAlgo::validate(int world, int64_t hq, int64_t hkv) const {
  switch (kind) {
    case Kind::startrail: StarTrailConfig(world, startrail.c, startrail.placement); break;
    case Kind::ulysses: validate_usp(UspOptions{}, world, hq, hkv); break;
    case Kind::usp: validate_usp(usp, world, hq, hkv); break;
  }
}

bool HybridAlgo::operator==(const HybridAlgo& o) const {
  if (kind != o.kind) return false;
  if (kind == Kind::startrail)
    return startrail.c == o.startrail.c && startrail.placement == o.startrail.placement;
  if (kind == Kind::usp) return usp.u == o.usp.u && usp.backward == o.usp.backward;
  return true;
}

AttentionSaved hybrid_forward(const HybridAlgo& algo, core::View<const float> q,
                              core::View<const float> k, core::View<const float> v,
                              const AttentionSpec& spec, const Layout& layout, comm::Group& group,
                              AttentionStats* stats) {
  algo.validate(layout.world(), q.dim(1), k.dim(1));
  validate_precision(spec.precision);
  core::Tensor<float> kq, kk, kv;
  const core::View<const float> rq = at_precision(q, spec, kq), rk = at_precision(k, spec, kk),
                                rv = at_precision(v, spec, kv);
  AttentionSaved saved;
  switch (algo.kind) {
    case HybridAlgo::Kind::startrail:
      saved = startrail_forward(rq, rk, rv, spec, layout, group, stats, algo.startrail);
      break;
    case HybridAlgo::Kind::ulysses: saved = ulysses_forward(rq, rk, rv, spec, layout, group, stats); break;
    case HybridAlgo::Kind::usp: saved = usp_forward(rq, rk, rv, spec, layout, group, stats, algo.usp); break;
  }
  // The rounded copies die here; the backward rounds the caller's inputs again (same values).
  saved.q = q;
  saved.k = k;
  saved.v = v;
  return saved;
}

AttentionGrads hybrid_backward(const HybridAlgo& algo, core::View<const float> dout,
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
  switch (algo.kind) {
    case HybridAlgo::Kind::startrail:
      return startrail_backward(dout, saved, spec, layout, group, stats, algo.startrail);
    case HybridAlgo::Kind::ulysses: return ulysses_backward(dout, saved, spec, layout, group, stats);
    case HybridAlgo::Kind::usp: return usp_backward(dout, saved, spec, layout, group, stats, algo.usp);
  }
  LONGSEQ_CHECK(false);
  return {};
}

}  // namespace longseq::attention
