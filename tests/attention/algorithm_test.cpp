// The one --algo vocabulary (attention/algorithm.hpp): every printed name parses back to the same
// algorithm, every spelling means one thing, and bad names are refused with the name in the
// message.
#include "longseq/attention/algorithm.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "longseq/core/error.hpp"

using namespace longseq::attention;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const longseq::core::Error& e) {
    return e.what();
  }
  return "";
}

// Every algorithm the grammar can express with small parameters, built field by field (not by
// parsing), so the round trip checks the printer against an independent construction.
std::vector<Algorithm> every_algorithm() {
  std::vector<Algorithm> out;
  for (Backward b : {Backward::kv, Backward::q}) out.push_back(Algorithm{Route::flat, b});
  for (int inner : {0, 2, 4, 16})
    for (Backward b : {Backward::kv, Backward::q}) {
      Algorithm a{Route::double_ring, b};
      a.inner = inner;
      out.push_back(a);
    }
  for (int c : {1, 2, 3, 8})
    for (TeamPlacement p : {TeamPlacement::teams, TeamPlacement::rings}) {
      Algorithm a;
      a.family = Algorithm::Family::startrail;
      a.team = c;
      a.placement = p;
      out.push_back(a);
    }
  Algorithm u;
  u.family = Algorithm::Family::ulysses;
  out.push_back(u);
  for (int d : {1, 2, 8})
    for (Backward b : {Backward::kv, Backward::q}) {
      Algorithm a;
      a.family = Algorithm::Family::usp;
      a.degree = d;
      a.backward = b;
      out.push_back(a);
    }
  return out;
}

}  // namespace

TEST(Algorithm, EveryPrintedNameParsesBack) {
  std::set<std::string> names;
  for (const Algorithm& a : every_algorithm()) {
    const std::string n = a.name();
    SCOPED_TRACE(n);
    EXPECT_TRUE(Algorithm::parse(n) == a);
    EXPECT_EQ(Algorithm::parse(n).name(), n);
    EXPECT_TRUE(names.insert(n).second) << "two algorithms print " << n;
  }
}

TEST(Algorithm, CanonicalNamesAndAcceptedSpellings) {
  // Printed names leave the defaults out.
  EXPECT_EQ(Algorithm::parse("ring").name(), "ring");
  EXPECT_EQ(Algorithm::parse("burst").name(), "burst");
  EXPECT_EQ(Algorithm::parse("double-ring").name(), "double-ring");
  EXPECT_EQ(Algorithm::parse("double-ring:burst").name(), "double-ring");
  EXPECT_EQ(Algorithm::parse("double-ring:ring").name(), "double-ring:ring");
  EXPECT_EQ(Algorithm::parse("double-ring:4").name(), "double-ring:4");
  EXPECT_EQ(Algorithm::parse("double-ring:4:burst").name(), "double-ring:4");
  EXPECT_EQ(Algorithm::parse("double-ring:4:ring").name(), "double-ring:4:ring");
  EXPECT_EQ(Algorithm::parse("double-ring-kv:4").name(),
            "double-ring:4:ring");  // the planner's old name
  EXPECT_EQ(Algorithm::parse("startrail:2").name(), "startrail:2");
  EXPECT_EQ(Algorithm::parse("startrail:2:teams").name(), "startrail:2");
  EXPECT_EQ(Algorithm::parse("startrail:4:rings").name(), "startrail:4:rings");
  EXPECT_EQ(Algorithm::parse("ulysses").name(), "ulysses");
  EXPECT_EQ(Algorithm::parse("usp:2").name(), "usp:2");
  EXPECT_EQ(Algorithm::parse("usp:2:burst").name(), "usp:2");
  EXPECT_EQ(Algorithm::parse("usp:4:ring").name(), "usp:4:ring");

  // What each spelling means.
  const Algorithm dr = Algorithm::parse("double-ring:4:ring");
  EXPECT_TRUE(dr.ring_family());
  EXPECT_EQ(dr.route, Route::double_ring);
  EXPECT_EQ(dr.backward, Backward::kv);
  EXPECT_EQ(dr.inner, 4);
  EXPECT_EQ(Algorithm::parse("double-ring").inner, 0);  // the ranks of one node
  EXPECT_EQ(Algorithm::parse("double-ring").backward, Backward::q);
  EXPECT_EQ(Algorithm::parse("ring").backward, Backward::kv);
  EXPECT_EQ(Algorithm::parse("burst").backward, Backward::q);
  EXPECT_EQ(Algorithm::parse("usp:2").backward, Backward::q);
  EXPECT_EQ(Algorithm::parse("usp:2:ring").backward, Backward::kv);
  EXPECT_EQ(Algorithm::parse("startrail:2").placement, TeamPlacement::teams);
  EXPECT_EQ(Algorithm::parse("startrail:2:rings").placement, TeamPlacement::rings);
  EXPECT_EQ(Algorithm::parse("ulysses").family, Algorithm::Family::ulysses);
}

TEST(Algorithm, RefusesMalformedNamesNamingThem) {
  for (const char* bad : {"",
                          "rings",
                          "ring:2",
                          "burst:ring",
                          "double-ring:0",
                          "double-ring:x",
                          "double-ring:4:foo",
                          "double-ring:ring:4",
                          "double-ring:4:ring:1",
                          "double-ring-kv",
                          "startrail",
                          "startrail:x",
                          "startrail:0",
                          "startrail:2:nodes",
                          "usp",
                          "usp:2:x",
                          "usp:-1",
                          "usp:0",
                          "ulysses:2",
                          "Burst"}) {
    const std::string e = error_of([&] { Algorithm::parse(bad); });
    EXPECT_FALSE(e.empty()) << "'" << bad << "' accepted";
    if (*bad) {
      EXPECT_NE(e.find(bad), std::string::npos) << e;
    }
  }
  EXPECT_NE(error_of([] { Algorithm::parse("dbl"); }).find("double-ring[:I][:burst|:ring]"),
            std::string::npos);
}

TEST(Algorithm, ValidateNamesTheValues) {
  EXPECT_EQ(error_of([] { Algorithm::parse("double-ring:4").validate(8, 8, 8); }), "");
  EXPECT_NE(error_of([] {
              Algorithm::parse("double-ring:3").validate(8, 8, 8);
            }).find("3 to divide world 8"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Algorithm::parse("startrail:4").validate(8, 8, 8);
            }).find("C*C = 16 to divide world 8"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Algorithm::parse("usp:3").validate(8, 12, 12);
            }).find("usp:3 needs U to divide world 8"),
            std::string::npos);
  EXPECT_FALSE(
      error_of([] { Algorithm::parse("ulysses").validate(8, 4, 4); }).empty());  // 4 heads, 8 ranks
  EXPECT_EQ(error_of([] { Algorithm::parse("ulysses").validate(4, 8, 4); }), "");
}
