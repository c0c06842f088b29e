#include "longseq/attention/algorithm.hpp"

#include <charconv>
#include <vector>

#include "longseq/attention/schedule.hpp"
#include "longseq/core/error.hpp"

namespace longseq::attention {

namespace {

constexpr const char* kGrammar =
    "ring | burst | double-ring[:I][:burst|:ring] | startrail:C[:teams|:rings] | ulysses | "
    "usp:U[:burst|:ring]";

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

bool is_number(std::string_view t) {
  return !t.empty() && t.find_first_not_of("0123456789") == std::string_view::npos;
}

int parse_positive(std::string_view text, std::string_view whole, const char* what) {
  int v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  core::require(ec == std::errc() && p == text.data() + text.size() && v >= 1, "attention",
                "--algo ", whole, ": ", what, " must be a positive integer, got '", text, "'");
  return v;
}

Backward parse_backward(std::string_view t, std::string_view whole) {
  if (t == "burst") return Backward::q;
  if (t == "ring") return Backward::kv;
  core::fail("attention", "--algo ", whole, ": backward '", t, "' is not burst or ring");
}

}  // namespace

std::string_view team_placement_name(TeamPlacement p) {
  return p == TeamPlacement::teams ? "teams" : "rings";
}

Algorithm Algorithm::parse(std::string_view s) {
  const std::vector<std::string_view> p = split_colon(s);
  const size_t n = p.size();
  Algorithm a;
  auto expect = [&](bool ok, const char* form) {
    core::require(ok, "attention", "--algo ", s, ": expected ", form);
  };
  if (p[0] == "ring" || p[0] == "burst") {
    expect(n == 1, p[0] == "ring" ? "ring (no options)" : "burst (no options)");
    a.backward = p[0] == "ring" ? Backward::kv : Backward::q;
  } else if (p[0] == "double-ring") {
    expect(n <= 3, "double-ring[:I][:burst|:ring]");
    a.route = Route::double_ring;
    size_t i = 1;
    if (i < n && is_number(p[i])) a.inner = parse_positive(p[i++], s, "the inner ring size I");
    if (i < n) a.backward = parse_backward(p[i++], s);
    expect(i == n, "double-ring[:I][:burst|:ring]");
  } else if (p[0] == "double-ring-kv") {  // the planner's old spelling of double-ring:I:ring
    expect(n == 2, "double-ring-kv:I");
    a.route = Route::double_ring;
    a.backward = Backward::kv;
    a.inner = parse_positive(p[1], s, "the inner ring size I");
  } else if (p[0] == "startrail") {
    expect(n == 2 || n == 3, "startrail:C[:teams|:rings]");
    a.family = Family::startrail;
    a.team = parse_positive(p[1], s, "C");
    if (n == 3) {
      core::require(p[2] == "teams" || p[2] == "rings", "attention", "--algo ", s, ": placement '",
                    p[2], "' is not teams or rings");
      a.placement = p[2] == "teams" ? TeamPlacement::teams : TeamPlacement::rings;
    }
  } else if (p[0] == "ulysses") {
    expect(n == 1, "ulysses (no options)");
    a.family = Family::ulysses;
  } else if (p[0] == "usp") {
    expect(n == 2 || n == 3, "usp:U[:burst|:ring]");
    a.family = Family::usp;
    a.degree = parse_positive(p[1], s, "U");
    if (n == 3) a.backward = parse_backward(p[2], s);
  } else {
    core::fail("attention", "unknown --algo '", s, "' (expected ", kGrammar, ")");
  }
  return a;
}

std::string Algorithm::name() const {
  switch (family) {
    case Family::ring: {
      if (route == Route::flat) return backward == Backward::kv ? "ring" : "burst";
      std::string out = "double-ring";
      if (inner > 0) out += core::cat(":", inner);
      if (backward == Backward::kv) out += ":ring";
      return out;
    }
    case Family::startrail:
      return core::cat("startrail:", team, placement == TeamPlacement::rings ? ":rings" : "");
    case Family::ulysses:
      return "ulysses";
    case Family::usp:
      return core::cat("usp:", degree, backward == Backward::kv ? ":ring" : "");
  }
  return "?";
}

void Algorithm::validate(int world, int64_t hq, int64_t hkv) const {
  validate_world(world);
  validate_heads(world, hq, hkv);
}

void Algorithm::validate_heads(int world, int64_t hq, int64_t hkv) const {
  if (family == Family::ulysses || family == Family::usp)
    HeadSplit(hq, hkv, family == Family::ulysses ? world : degree);
}

void Algorithm::validate_world(int world) const {
  switch (family) {
    case Family::ring:
      if (route == Route::double_ring && inner > 0)
        core::require(world % inner == 0, "attention", "--algo ", name(),
                      " needs the inner ring size ", inner, " to divide world ", world);
      break;
    case Family::startrail:
      StarTrailConfig(world, team, placement);
      break;
    case Family::ulysses:
    case Family::usp: {
      const int u = family == Family::ulysses ? world : degree;
      core::require(u >= 1 && world % u == 0, "attention", "--algo usp:", u,
                    " needs U to divide world ", world);
      break;
    }
  }
}

}  // namespace longseq::attention
