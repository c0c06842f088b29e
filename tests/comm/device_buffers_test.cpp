// Buffers in device memory, without a GPU: a fake cuda backend whose "device memory" is host
// memory from its own allocator (so the tests can read it), whose `owner` claims exactly its own
// allocations, and whose `copy` counts its calls. core::locate and core::copy_any find it; the
// local backend's messages and the copy-only collectives go through its copy; the host
// reductions and the MPI backend refuse its memory by name.
//
// The fake is registered for DeviceKind::cuda once per process and never removed (core has no
// unregistration). Every other test of test_comm is unaffected: host memory is never claimed,
// so locate() still says cpu for it and copy_any still memmoves it.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "comm/comm_case.hpp"
#include "longseq/core/device.hpp"

namespace longseq::comm::testing {
namespace {

/// The fake backend's state (DeviceMemory takes plain function pointers, so it is global).
struct FakeGpu {
  std::mutex mu;
  std::map<uintptr_t, std::pair<size_t, int>> ranges;  // start -> (bytes, device index)
  // Copies by direction, and bytes over all of them.
  std::atomic<uint64_t> d2d{0}, h2d{0}, d2h{0}, bytes{0};
  std::atomic<bool> fail_copies{false};

  uint64_t copies() const { return d2d + h2d + d2h; }
  void reset() {
    d2d = h2d = d2h = bytes = 0;
    fail_copies = false;
  }
};
FakeGpu& fake() {
  static FakeGpu* f = new FakeGpu;  // never destroyed: other threads may still ask at exit
  return *f;
}

// Slack after every allocation that the fake does not claim: one past the end is then host
// memory of the same block, never another allocation's start.
constexpr size_t kSlack = 64;

void* fake_allocate(core::Device device, size_t bytes, const char*) {
  void* p = std::malloc(bytes + kSlack);
  LONGSEQ_CHECK(p != nullptr);
  std::lock_guard<std::mutex> lk(fake().mu);
  fake().ranges[reinterpret_cast<uintptr_t>(p)] = {bytes, device.index};
  return p;
}
void fake_release(core::Device, void* p) noexcept {
  {
    std::lock_guard<std::mutex> lk(fake().mu);
    fake().ranges.erase(reinterpret_cast<uintptr_t>(p));
  }
  std::free(p);
}
bool fake_owner(const void* ptr, core::Device* device) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lk(fake().mu);
  auto it = fake().ranges.upper_bound(p);
  if (it == fake().ranges.begin()) return false;
  --it;
  if (p >= it->first + it->second.first) return false;
  *device = core::Device::cuda(it->second.second);
  return true;
}
void fake_copy(void* dst, core::Device dst_device, const void* src, core::Device src_device,
               size_t bytes) {
  if (fake().fail_copies) core::fail("cuda", "fake copy failure");
  // copy_any must hand the located devices on: each side's pointer is where it says.
  core::Device d;
  EXPECT_EQ(fake_owner(dst, &d), !dst_device.is_cpu());
  EXPECT_EQ(fake_owner(src, &d), !src_device.is_cpu());
  (dst_device.is_cpu() ? fake().d2h : src_device.is_cpu() ? fake().h2d : fake().d2d)++;
  fake().bytes += bytes;
  std::memmove(dst, src, bytes);
}
void fake_zero(core::Device, void* p, size_t bytes) {
  std::memset(p, 0, bytes);
}

/// `bytes` (> 0) of the fake's memory on cuda:`index`, freed at scope exit.
class FakeBuffer {
 public:
  explicit FakeBuffer(size_t bytes, int index = 0)
      : device_(core::Device::cuda(index)),
        p_(static_cast<std::byte*>(fake_allocate(device_, std::max<size_t>(bytes, 1), "test"))),
        bytes_(bytes) {}
  ~FakeBuffer() { fake_release(device_, p_); }
  FakeBuffer(const FakeBuffer&) = delete;
  FakeBuffer& operator=(const FakeBuffer&) = delete;
  std::byte* data() const { return p_; }
  size_t size() const { return bytes_; }
  /// Host-side access for the checks (the fake's memory is host memory underneath).
  void fill(uint64_t seed) {
    for (size_t i = 0; i < bytes_; ++i) p_[i] = static_cast<std::byte>(core::random_bits(seed, i));
  }
  bool holds(uint64_t seed) const {
    for (size_t i = 0; i < bytes_; ++i)
      if (p_[i] != static_cast<std::byte>(core::random_bits(seed, i))) return false;
    return true;
  }

 private:
  core::Device device_;
  std::byte* p_;
  size_t bytes_;
};

void install_fake() {
  static const bool installed = [] {
    core::DeviceMemory ops;
    ops.allocate = fake_allocate;
    ops.release = fake_release;
    ops.copy = fake_copy;
    ops.zero = fake_zero;
    ops.owner = fake_owner;
    core::register_device_memory(core::DeviceKind::cuda, ops);
    return true;
  }();
  (void)installed;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const core::Error& e) {
    return e.what();
  }
  return "";
}
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

class DeviceBuffers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { install_fake(); }
  void SetUp() override { fake().reset(); }
  static void run_local(int world, const std::function<void(Group&)>& fn) {
    comm::run(options_for({"local", world, 1}), fn);
  }
};

TEST_F(DeviceBuffers, LocateFindsTheFakeAndLeavesHostMemoryOnTheHost) {
  FakeBuffer a(100), b(8, 1);
  EXPECT_EQ(core::locate(a.data()), core::Device::cuda(0));
  EXPECT_EQ(core::locate(a.data() + 57), core::Device::cuda(0));  // interior
  EXPECT_EQ(core::locate(a.data() + 99), core::Device::cuda(0));
  EXPECT_EQ(core::locate(a.data() + 100), core::Device::cpu());  // one past the end
  EXPECT_EQ(core::locate(b.data() + 3), core::Device::cuda(1));
  std::vector<float> heap(16);
  int stack = 0;
  EXPECT_EQ(core::locate(heap.data()), core::Device::cpu());
  EXPECT_EQ(core::locate(&stack), core::Device::cpu());
  EXPECT_EQ(core::locate(nullptr), core::Device::cpu());
}

TEST_F(DeviceBuffers, CopyAnyGoesThroughTheBackendOnlyForDeviceMemory) {
  std::vector<uint8_t> h1(1031), h2(1031);
  std::iota(h1.begin(), h1.end(), uint8_t{3});
  core::copy_any(h2.data(), h1.data(), h1.size());
  EXPECT_EQ(h1, h2);
  // Overlapping host ranges: a memmove.
  core::copy_any(h2.data() + 1, h2.data(), 100);
  EXPECT_EQ(h2[1], h1[0]);
  EXPECT_EQ(h2[100], h1[99]);
  EXPECT_EQ(fake().copies(), 0u);

  FakeBuffer d1(1031), d2(1031);
  core::copy_any(d1.data(), h1.data(), 1031);  // host -> device
  EXPECT_EQ(std::memcmp(d1.data(), h1.data(), 1031), 0);
  core::copy_any(d2.data(), d1.data(), 1031);  // device -> device
  std::vector<uint8_t> back(1031);
  core::copy_any(back.data(), d2.data(), 1031);  // device -> host
  EXPECT_EQ(back, h1);
  core::copy_any(back.data(), d2.data(), 0);  // nothing to copy: no call
  EXPECT_EQ(fake().h2d, 1u);
  EXPECT_EQ(fake().d2d, 1u);
  EXPECT_EQ(fake().d2h, 1u);
  EXPECT_EQ(fake().bytes, 3u * 1031u);
}

TEST_F(DeviceBuffers, LocalRingMovesDeviceBuffersThroughTheBackend) {
  const std::vector<size_t> sizes = {1, 7, 1031, 0};
  run_local(3, [&](Group& g) {
    const int r = g.rank(), prev = g.ring_prev();
    std::vector<std::unique_ptr<FakeBuffer>> out, in;
    std::vector<Request> reqs;
    for (size_t k = 0; k < sizes.size(); ++k) {
      out.push_back(std::make_unique<FakeBuffer>(sizes[k]));
      in.push_back(std::make_unique<FakeBuffer>(sizes[k]));
      out[k]->fill(100 * static_cast<uint64_t>(r) + k);
      reqs.push_back(g.irecv(prev, in[k]->data(), sizes[k], static_cast<int>(k)));
    }
    for (size_t k = 0; k < sizes.size(); ++k)
      reqs.push_back(g.isend(g.ring_next(), out[k]->data(), sizes[k], static_cast<int>(k)));
    wait_all(reqs);
    for (size_t k = 0; k < sizes.size(); ++k)
      EXPECT_TRUE(in[k]->holds(100 * static_cast<uint64_t>(prev) + k))
          << "rank " << r << " size " << sizes[k];
  });
  // One device-to-device copy per non-empty message: none went round the backend.
  EXPECT_EQ(fake().d2d, 3u * 3u);
  EXPECT_EQ(fake().h2d + fake().d2h, 0u);
  EXPECT_EQ(fake().bytes, 3u * (1 + 7 + 1031));
}

TEST_F(DeviceBuffers, LocalMessagesBetweenHostAndDeviceBuffers) {
  run_local(3, [&](Group& g) {
    const int r = g.rank(), prev = g.ring_prev();
    // Device to the next rank's host buffer, host to the previous rank's device buffer.
    FakeBuffer dsend(513), drecv(300);
    dsend.fill(10 + static_cast<uint64_t>(r));
    std::vector<std::byte> hrecv(513), hsend(300);
    for (size_t i = 0; i < hsend.size(); ++i)
      hsend[i] = static_cast<std::byte>(core::random_bits(20 + static_cast<uint64_t>(r), i));
    std::vector<Request> reqs;
    reqs.push_back(g.irecv(prev, hrecv.data(), hrecv.size(), 1));
    reqs.push_back(g.irecv(g.ring_next(), drecv.data(), drecv.size(), 2));
    reqs.push_back(g.isend(g.ring_next(), dsend.data(), dsend.size(), 1));
    reqs.push_back(g.isend(prev, hsend.data(), hsend.size(), 2));
    wait_all(reqs);
    for (size_t i = 0; i < hrecv.size(); ++i)
      ASSERT_EQ(hrecv[i],
                static_cast<std::byte>(core::random_bits(10 + static_cast<uint64_t>(prev), i)));
    EXPECT_TRUE(drecv.holds(20 + static_cast<uint64_t>(g.ring_next())));
  });
  EXPECT_EQ(fake().d2h, 3u);
  EXPECT_EQ(fake().h2d, 3u);
  EXPECT_EQ(fake().d2d, 0u);
}

TEST_F(DeviceBuffers, AllGatherAndAllToAllMoveDeviceBuffers) {
  constexpr int kWorld = 3;
  constexpr size_t kCount = 37;  // i32 elements per block
  run_local(kWorld, [&](Group& g) {
    const int r = g.rank();
    const size_t block = kCount * 4;
    FakeBuffer in(block), out(block * kWorld);
    const std::vector<int32_t> mine = rank_data<int32_t>(5, r, kCount);
    std::memcpy(in.data(), mine.data(), block);
    g.all_gather(in.data(), out.data(), kCount, core::DType::i32);
    for (int q = 0; q < kWorld; ++q) {
      const std::vector<int32_t> want = rank_data<int32_t>(5, q, kCount);
      EXPECT_EQ(std::memcmp(out.data() + static_cast<size_t>(q) * block, want.data(), block), 0)
          << "all_gather block " << q << " on rank " << r;
    }
    // all_to_all: block q of rank r's input is rank_data(6, r * P + q).
    FakeBuffer a_in(block * kWorld), a_out(block * kWorld);
    for (int q = 0; q < kWorld; ++q) {
      const auto d = rank_data<int32_t>(6, r * kWorld + q, kCount);
      std::memcpy(a_in.data() + static_cast<size_t>(q) * block, d.data(), block);
    }
    g.all_to_all(a_in.data(), a_out.data(), kCount, core::DType::i32);
    for (int q = 0; q < kWorld; ++q) {
      const auto want = rank_data<int32_t>(6, q * kWorld + r, kCount);
      EXPECT_EQ(std::memcmp(a_out.data() + static_cast<size_t>(q) * block, want.data(), block), 0)
          << "all_to_all block " << q << " on rank " << r;
    }
  });
  // Per rank and collective: its own block copied locally plus P-1 messages, all device to
  // device.
  EXPECT_EQ(fake().d2d, 2u * kWorld * kWorld);
  EXPECT_EQ(fake().h2d + fake().d2h, 0u);
}

TEST_F(DeviceBuffers, HostReductionsRefuseDeviceBuffersByName) {
  run_local(3, [&](Group& g) {
    const size_t count = 12;
    FakeBuffer din(count * 4 * 3), dout(count * 4 * 3);
    std::vector<float> hin(count * 3), hout(count * 3);
    auto rs = [&](const void* in, void* out) {
      return error_of([&] { g.reduce_scatter(in, out, count, core::DType::f32); });
    };
    std::string msg = rs(din.data(), hout.data());
    EXPECT_TRUE(contains(msg,
                         "[comm] reduce_scatter reduces on the host: its buffer in is on "
                         "cuda:0"))
        << msg;
    msg = rs(hin.data(), dout.data());
    EXPECT_TRUE(contains(msg, "reduce_scatter reduces on the host: its buffer out is on cuda:0"))
        << msg;
    msg = error_of([&] { g.ireduce_scatter(din.data(), dout.data(), count, core::DType::f32); });
    EXPECT_TRUE(contains(msg, "reduce_scatter") && contains(msg, "cuda:0")) << msg;
    msg = error_of([&] { g.all_reduce(din.data(), din.data(), count, core::DType::f32); });
    EXPECT_TRUE(contains(msg, "[comm] all_reduce reduces on the host: its buffer in is on cuda:0"))
        << msg;
    msg = error_of([&] { g.all_reduce(hin.data(), dout.data(), count, core::DType::f32); });
    EXPECT_TRUE(contains(msg, "all_reduce reduces on the host: its buffer out is on cuda:0"))
        << msg;
    // Nothing was posted: the group still works, and host buffers still reduce.
    std::vector<float> ones(count, 1.0f), sum(count);
    g.all_reduce(ones.data(), sum.data(), count, core::DType::f32);
    EXPECT_EQ(sum[count - 1], 3.0f);
  });
  EXPECT_EQ(fake().copies(), 0u);
}

TEST_F(DeviceBuffers, FailedDeviceCopyFailsBothSidesInsteadOfHanging) {
  fake().fail_copies = true;
  run_local(2, [&](Group& g) {
    FakeBuffer buf(8);
    const std::string msg = error_of([&] {
      if (g.rank() == 0)
        g.send(1, buf.data(), 8, 5);
      else
        g.recv(0, buf.data(), 8, 5);
    });
    EXPECT_TRUE(contains(msg,
                         "copying 8 bytes from rank 0 to rank 1 (tag 5) failed: [cuda] "
                         "fake copy failure"))
        << msg;
  });
}

// Under mpirun (tests.cmake's Mpi/* registrations): the MPI backend refuses device buffers when
// they are posted, naming the bytes, the address and the device.
class DeviceBuffersMpi : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    LONGSEQ_SKIP_UNLESS_RUNNABLE(GetParam());
    install_fake();
  }
};

TEST_P(DeviceBuffersMpi, RefusesDeviceBuffersByName) {
  comm::run(options_for(GetParam()), [](Group& g) {
    FakeBuffer buf(1031);
    std::string msg = error_of([&] { g.isend(g.ring_next(), buf.data(), 1031, 3); });
    EXPECT_TRUE(contains(msg, "[comm] mpi: the 1031 bytes at ") &&
                contains(msg,
                         "are on cuda:0; the MPI backend takes host memory (stage through "
                         "the host)"))
        << msg;
    msg = error_of([&] { g.irecv(g.ring_prev(), buf.data() + 1, 7, 3); });
    EXPECT_TRUE(contains(msg, "the 7 bytes at ") && contains(msg, "are on cuda:0")) << msg;
    // A collective's messages go through the same posting.
    FakeBuffer out(1031 * static_cast<size_t>(g.size()));
    msg = error_of([&] { g.all_gather(buf.data(), out.data(), 1031, core::DType::u8); });
    EXPECT_TRUE(contains(msg, "are on cuda:0")) << msg;
    // Nothing was posted: the world still works.
    g.barrier();
  });
}

INSTANTIATE_TEST_SUITE_P(Mpi, DeviceBuffersMpi, ::testing::ValuesIn(mpi_backends()), backend_label);

}  // namespace
}  // namespace longseq::comm::testing
