// The backend registry (comm/backends.hpp) and name resolution (comm/launch.hpp).
#include "longseq/comm/backends.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "longseq/comm/cli_options.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/comm/nccl_backend.hpp"

namespace longseq::comm {
namespace {

std::vector<std::string> names() {
  std::vector<std::string> n;
  for (const BackendEntry& b : backends()) n.emplace_back(b.name);
  return n;
}

TEST(Backends, RegistryListsLocalFirstThenMpiThenNccl) {
  EXPECT_EQ(names(), (std::vector<std::string>{"local", "mpi", "nccl"}));
  EXPECT_EQ(backend_choices(), (std::vector<std::string>{"local", "mpi", "nccl", "any"}));
  EXPECT_TRUE(backends().front().built());  // `any` falls back to it
  EXPECT_EQ(find_backend("mpi")->built(), mpi_available());
  EXPECT_EQ(find_backend("any"), nullptr);
  ASSERT_NE(find_backend("nccl"), nullptr);
  EXPECT_FALSE(find_backend("nccl")->claims_any());  // device memory: asked for by name only
}

// Built exactly where CMake found NCCL (LONGSEQ_WITH_NCCL); elsewhere --backend nccl is refused
// saying why.
TEST(Backends, NcclIsBuiltWhereNcclWasFound) {
#ifdef LONGSEQ_WITH_NCCL
  EXPECT_TRUE(find_backend("nccl")->built());
  EXPECT_EQ(resolve_backend("nccl").name, "nccl");
#else
  EXPECT_FALSE(find_backend("nccl")->built());
  try {
    resolve_backend("nccl");
    FAIL() << "--backend nccl resolved in a build without NCCL";
  } catch (const core::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[comm]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("LONGSEQ_WITH_NCCL=OFF"), std::string::npos) << msg;
  }
  EXPECT_THROW(run_nccl_world(Options{}, [](Group&) {}), core::Error);
#endif
}

// NCCL refuses two ranks of one communicator on one GPU; the backend refuses first, naming both.
TEST(Backends, NcclRefusesTwoRanksOnOneGpu) {
  EXPECT_EQ(nccl_device_of({0}, 0, 1), 0);
  EXPECT_EQ(nccl_device_of({4, 5, 6, 7}, 2, 4), 2);
  EXPECT_EQ(nccl_device_of({4, 5}, 1, 8), 1);
  try {
    nccl_device_of({0, 1}, 1, 1);
    FAIL() << "two ranks on one GPU accepted";
  } catch (const core::Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[comm] nccl: ranks 0 and 1 would share GPU 0 (2 ranks on one node, 1 GPU(s) "
              "visible); NCCL runs one rank per GPU: start at most 1 ranks per node");
  }
  try {
    nccl_device_of({8, 9, 10}, 0, 2);
    FAIL() << "three ranks on two GPUs accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("ranks 8 and 10 would share GPU 0"), std::string::npos)
        << e.what();
  }
  try {
    nccl_device_of({0}, 0, 0);
    FAIL() << "no GPU accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a GPU; none is visible"), std::string::npos)
        << e.what();
  }
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
  for (const char* bad : {"NCCL", "", "Local", "any ", "nccl2"}) {
    try {
      resolve_backend(bad);
      FAIL() << "--backend '" << bad << "' resolved";
    } catch (const core::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("[comm]"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string("unknown --backend '") + bad + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("expected local, mpi, nccl or any"), std::string::npos) << msg;
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
  // --backend takes only registered names: a misspelt nccl is a parse error naming the choices.
  for (const char* bad : {"NCCL", "nccl:2", "rccl"}) {
    CLI::App app;
    Options o;
    add_cli_options(app, o);
    const char* argv[] = {"x", "--backend", bad};
    try {
      app.parse(3, const_cast<char**>(argv));
      FAIL() << "--backend " << bad << " parsed";
    } catch (const CLI::ParseError& e) {
      EXPECT_NE(std::string(e.what()).find("nccl"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace longseq::comm
