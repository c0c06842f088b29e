// The nccl comm backend at world 1 (one process, one GPU; docs/gpu.md "The nccl backend"):
// send to self, every collective, a 0-byte message, host memory refused for point to point and
// staged for collectives, and two ranks on one GPU refused before NCCL sees them. Worlds above 1
// need mpirun and a GPU per rank (not run here). Also the world the Python package opens from an
// id it carried itself (open_nccl_world). Without a visible GPU, or in a build without NCCL, every
// test reports skipped.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/comm/nccl_backend.hpp"

namespace longseq::comm {
namespace {

using test::download;
using test::upload;

#ifdef LONGSEQ_WITH_NCCL
#define LONGSEQ_NEED_NCCL() LONGSEQ_NEED_GPU()
#else
#define LONGSEQ_NEED_NCCL() GTEST_SKIP() << "built without NCCL (LONGSEQ_WITH_NCCL=OFF)"
#endif

void run_nccl(int world, const std::function<void(Group&)>& fn) {
  Options o;
  o.backend = "nccl";
  o.world = world;
  o.timeout_s = 60;
  run(o, fn);
}

TEST(Nccl, SendToSelfAndAZeroByteMessage) {
  LONGSEQ_NEED_NCCL();
  run_nccl(1, [](Group& g) {
    EXPECT_EQ(g.backend(), "nccl");
    EXPECT_EQ(g.size(), 1);
    const std::vector<float> h = {1.5f, -2.f, 3.25f, 0.f, 7.f};
    auto in = upload(h);
    auto out = upload(std::vector<float>(h.size(), 0.f));
    // Posted separately: queued, launched together by the first wait.
    Request s = g.isend(0, in.data(), h.size() * sizeof(float), /*tag=*/7);
    Request r = g.irecv(0, out.data(), h.size() * sizeof(float), /*tag=*/7);
    r.wait();
    s.wait();
    EXPECT_EQ(download(out, h.size()), h);
    // A grouped step, and an empty message (completes at once on both ends).
    const SendSpec sends[] = {{0, in.data(), 2 * sizeof(float), 0}, {0, nullptr, 0, 1}};
    const RecvSpec recvs[] = {{0, out.data() + 3, 2 * sizeof(float), 0}, {0, nullptr, 0, 1}};
    g.exchange(sends, recvs);
    EXPECT_EQ(download(out, h.size()), (std::vector<float>{1.5f, -2.f, 3.25f, 1.5f, -2.f}));
    // Sends to oneself are not counted (group.hpp Stats).
    EXPECT_EQ(g.stats().bytes_sent(), 0u);
  });
}

TEST(Nccl, EveryCollectiveAtWorldOne) {
  LONGSEQ_NEED_NCCL();
  run_nccl(1, [](Group& g) {
    const std::vector<float> h = {1.f, 2.f, 3.f, 4.f};
    auto in = upload(h);
    auto out = upload(std::vector<float>(h.size(), 0.f));
    const size_t n = h.size();
    g.all_gather(in.data(), out.data(), n, core::DType::f32);
    EXPECT_EQ(download(out, n), h);
    g.reduce_scatter(in.data(), out.data(), n, core::DType::f32);
    EXPECT_EQ(download(out, n), h);
    g.all_reduce(in.data(), out.data(), n, core::DType::f32, ReduceOp::max);
    EXPECT_EQ(download(out, n), h);
    g.all_to_all(in.data(), out.data(), n, core::DType::f32);
    EXPECT_EQ(download(out, n), h);
    g.iall_gather(in.data(), out.data(), n, core::DType::f32).wait();
    g.ireduce_scatter(in.data(), out.data(), n, core::DType::f32).wait();
    g.iall_to_all(in.data(), out.data(), n, core::DType::f32).wait();
    EXPECT_EQ(download(out, n), h);
    const size_t counts[] = {n}, displs[] = {0};
    g.all_to_all_v(in.data(), counts, displs, out.data(), counts, displs, core::DType::f32);
    EXPECT_EQ(download(out, n), h);
    g.broadcast(out.data(), n, core::DType::f32, 0);
    g.barrier();
    EXPECT_EQ(download(out, n), h);
    // Host memory in a collective is staged through the device (split, gather_stats use it).
    std::vector<int64_t> hi = {5, 6}, ho(2);
    g.all_gather(hi, ho);
    EXPECT_EQ(ho, hi);
    const Group sub = g.split(0, 0);
    EXPECT_EQ(sub.size(), 1);
    EXPECT_EQ(sub.backend(), "nccl");
    EXPECT_EQ(g.gather_stats().size(), 1u);
    EXPECT_EQ(g.stats().bytes_sent(), 0u);  // world 1 sends nothing
  });
}

TEST(Nccl, HostMemoryIsRefusedForPointToPoint) {
  LONGSEQ_NEED_NCCL();
  EXPECT_THROW(run_nccl(1,
                        [](Group& g) {
                          std::vector<float> h(4);
                          g.isend(0, h.data(), 16).wait();
                        }),
               RankFailed);
}

TEST(Nccl, TwoRanksOnOneGpuAreRefusedNamingThem) {
  LONGSEQ_NEED_NCCL();
  const int gpus = static_cast<int>(kernels::cuda::runtime_info().gpus.size());
  try {
    run_nccl(gpus + 1, [](Group&) { FAIL() << "started"; });
    FAIL() << "world " << gpus + 1 << " on " << gpus << " GPU(s) started";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("would share GPU 0"), std::string::npos) << e.what();
  }
}

// longseq.comm.nccl()'s world: an id made here, as rank 0 of torch.distributed makes it.
TEST(Nccl, AWorldOpenedFromAnIdRunsAndCloses) {
  LONGSEQ_NEED_NCCL();
  const std::string id = nccl_unique_id();
  ASSERT_EQ(id.size(), kNcclIdBytes);
  std::unique_ptr<OpenWorld> w = open_nccl_world(id, 0, Topology(1), 0, 60.0);
  Group& g = w->group();
  EXPECT_EQ(g.backend(), "nccl");
  EXPECT_EQ(g.size(), 1);
  const std::vector<float> h = {1.f, -2.f, 3.f};
  auto in = upload(h);
  auto out = upload(std::vector<float>(h.size(), 0.f));
  g.all_reduce(in.data(), out.data(), h.size(), core::DType::f32, ReduceOp::sum);
  EXPECT_EQ(download(out, h.size()), h);
  w->close();
  EXPECT_THROW(w->close(), core::Error);  // once
}

TEST(Nccl, AFailedOpenedWorldReportsItselfAtClose) {
  LONGSEQ_NEED_NCCL();
  std::unique_ptr<OpenWorld> w = open_nccl_world(nccl_unique_id(), 0, Topology(1), 0, 60.0);
  w->fail("ValueError: a bad batch");
  try {
    w->close();
    FAIL() << "close() of a failed world returned";
  } catch (const RankFailed& e) {
    EXPECT_EQ(e.failed_rank(), 0);
    EXPECT_EQ(e.reason(), "ValueError: a bad batch");
  }
}

TEST(Nccl, AnOpenedWorldRefusesABadIdOrGpu) {
  LONGSEQ_NEED_NCCL();
  EXPECT_THROW(open_nccl_world("short", 0, Topology(1), 0, 60.0), core::Error);
  const int gpus = static_cast<int>(kernels::cuda::runtime_info().gpus.size());
  try {
    open_nccl_world(nccl_unique_id(), 0, Topology(1), gpus, 60.0);
    FAIL() << "GPU " << gpus << " accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not one of the"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace longseq::comm
