#include <gtest/gtest.h>

#include "longseq/comm/cli_options.hpp"

namespace longseq::comm {
namespace {

TEST(CliOptions, FlagsFillOptions) {
  CLI::App app;
  Options o;
  add_cli_options(app, o);
  const char* argv[] = {"x",
                        "--backend",
                        "local",
                        "--world",
                        "8",
                        "--nodes",
                        "2",
                        "--link",
                        "intra=1us,100GB/s:inter=5us,10GB/s",
                        "--comm-timeout",
                        "30"};
  app.parse(static_cast<int>(std::size(argv)), const_cast<char**>(argv));
  EXPECT_EQ(o.backend, "local");
  EXPECT_EQ(o.world, 8);
  EXPECT_EQ(o.nodes, 2);
  EXPECT_DOUBLE_EQ(o.link.inter.latency_s, 5e-6);
  EXPECT_DOUBLE_EQ(o.link.intra.bandwidth_Bps, 100e9);
  EXPECT_DOUBLE_EQ(o.timeout_s, 30.0);
}

TEST(CliOptions, BadValuesAreParseErrors) {
  for (std::vector<const char*> argv : {std::vector<const char*>{"x", "--backend", "rccl"},
                                        std::vector<const char*>{"x", "--link", "inter=1us"},
                                        std::vector<const char*>{"x", "--comm-timeout", "0"}}) {
    CLI::App app;
    Options o;
    add_cli_options(app, o);
    EXPECT_THROW(app.parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data())),
                 CLI::ParseError)
        << argv[1] << " " << argv[2];
  }
}

}  // namespace
}  // namespace longseq::comm
