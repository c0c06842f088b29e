// The backend registry (comm/backends.hpp) and name resolution (comm/launch.hpp).
#include "longseq/comm/backends.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "longseq/comm/cli_options.hpp"
#include "longseq/comm/launch.hpp"

namespace longseq::comm {
namespace {

std::vector<std::string> names() {
  std::vector<std::string> n;
  for (const BackendEntry& b : backends()) n.emplace_back(b.name);
  return n;
}

TEST(Backends, RegistryListsLocalFirstThenMpi) {
  EXPECT_EQ(names(), (std::vector<std::string>{"local", "mpi"}));
  EXPECT_EQ(backend_choices(), (std::vector<std::string>{"local", "mpi", "any"}));
  EXPECT_TRUE(backends().front().built());  // `any` falls back to it
  EXPECT_EQ(find_backend("mpi")->built(), mpi_available());
  EXPECT_EQ(find_backend("any"), nullptr);
  EXPECT_EQ(find_backend("nccl"), nullptr);
}

TEST(Backends, EveryEntryIsComplete) {
  for (const BackendEntry& b : backends()) {
    EXPECT_FALSE(b.name.empty());
    EXPECT_FALSE(b.help.empty()) << b.name;
    EXPECT_TRUE(b.built && b.claims_any && b.init && b.world_size && b.run) << b.name;
    if (!b.built()) {
      EXPECT_FALSE(b.not_built.empty()) << b.name;
    }
  }
}

TEST(Backends, ResolveNames) {
  EXPECT_EQ(resolve_backend("local").name, "local");
  if (!launched_by_mpirun()) {
    EXPECT_EQ(resolve_backend("any").name, "local");
  }
  if (mpi_available()) {
    EXPECT_EQ(resolve_backend("mpi").name, "mpi");
    if (launched_by_mpirun()) {
      EXPECT_EQ(resolve_backend("any").name, "mpi");
    }
  } else {
    try {
      resolve_backend("mpi");
      FAIL() << "--backend mpi resolved in a build without MPI";
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("LONGSEQ_WITH_MPI=OFF"), std::string::npos) << e.what();
    }
  }
}

TEST(Backends, UnknownNameIsRefusedNamingTheKnownOnes) {
  for (const char* bad : {"nccl", "", "Local", "any "}) {
    try {
      resolve_backend(bad);
      FAIL() << "--backend '" << bad << "' resolved";
    } catch (const core::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("[comm]"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string("unknown --backend '") + bad + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("expected local, mpi or any"), std::string::npos) << msg;
    }
  }
}

TEST(Backends, RunGoesThroughTheResolvedEntry) {
  Options o;
  o.backend = "local";
  o.world = 3;
  EXPECT_EQ(world_size(o), 3);
  std::atomic<int> ranks{0};
  run(o, [&](Group& g) {
    EXPECT_EQ(g.backend(), "local");
    ranks.fetch_add(1);
  });
  EXPECT_EQ(ranks.load(), 3);
}

TEST(Backends, HelpAndFlagChoicesComeFromTheRegistry) {
  const std::string help = backend_help();
  for (const BackendEntry& b : backends()) {
    EXPECT_NE(help.find(std::string(b.name) + ": " + std::string(b.help)), std::string::npos)
        << help;
  }
  EXPECT_NE(help.find("any"), std::string::npos) << help;
  for (const std::string& name : backend_choices()) {
    CLI::App app;
    Options o;
    add_cli_options(app, o);
    const char* argv[] = {"x", "--backend", name.c_str()};
    EXPECT_NO_THROW(app.parse(3, const_cast<char**>(argv))) << name;
    EXPECT_EQ(o.backend, name);
  }
}

}  // namespace
}  // namespace longseq::comm
