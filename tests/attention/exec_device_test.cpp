// The executor on a device other than the CPU, without a GPU (attention/exec_device.hpp).
//
// A fake device stands in for cuda:0 in this process: its memory is host memory from its own
// allocator (registered with core for DeviceKind::cuda), and its ExecDevice checks that every
// pointer it is handed is that memory, then QUEUES the call and runs the queue only at sync(), as
// a GPU stream runs its work later than the host queues it. Each call is the CPU device's own, so
// a pass must give the CPU executor's bits exactly, for every algorithm, layout and mask:
//  * a buffer the executor forgot to allocate on the device (host memory handed to a kernel) is
//    caught by the pointer check;
//  * a transfer posted before the work that fills its buffer ran, a receive landing in a buffer
//    that queued work still reads, or an output read before the final sync, all change the bits
//    (the deferral makes the order visible; on the CPU device every call runs at once).
// The one place where a device pass may differ from the CPU's is StarTrail's reduce-scatter of
// dK, dV (on a device an all-to-all and adds in member order, distributed.cpp): within rounding.
#include "longseq/attention/exec_device.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "attention/attention_case.hpp"
#include "longseq/core/error.hpp"

using namespace longseq;
using namespace longseq::attention;
using longseq::testing::AttnCase;

namespace {

// ---- the fake device's memory: host memory, known by address range.
std::mutex fake_mu;
std::map<const std::byte*, size_t> fake_blocks;  // start -> bytes

bool fake_owns(const void* p) {
  const auto* b = static_cast<const std::byte*>(p);
  std::lock_guard<std::mutex> lk(fake_mu);
  auto it = fake_blocks.upper_bound(b);
  if (it == fake_blocks.begin()) return false;
  --it;
  return b >= it->first && b < it->first + it->second;
}

void* fake_allocate(core::Device, size_t bytes, const char*) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  std::lock_guard<std::mutex> lk(fake_mu);
  fake_blocks[static_cast<const std::byte*>(p)] = bytes;
  return p;
}
void fake_release(core::Device, void* p) noexcept {
  {
    std::lock_guard<std::mutex> lk(fake_mu);
    fake_blocks.erase(static_cast<const std::byte*>(p));
  }
  std::free(p);
}
void fake_copy(void* dst, core::Device, const void* src, core::Device, size_t bytes) {
  std::memmove(dst, src, bytes);
}
void fake_zero(core::Device, void* p, size_t bytes) {
  std::memset(p, 0, bytes);
}

// ---- the fake device's executor: checks, queues, runs at sync().
class DeferredDevice final : public ExecDevice {
 public:
  DeferredDevice() : cpu_(make_cpu_exec_device(1)) {}
  core::Device device() const override { return core::Device::cuda(0); }
  void enter() override {}
  void bind(std::shared_ptr<const TokenTable> tokens,
            std::shared_ptr<const MaskSpec> mask) override {
    sync();  // queued calls read the bound tables
    cpu_->bind(std::move(tokens), std::move(mask));
  }
  kernels::Tokens tokens(int rank, int64_t begin) const override {
    return cpu_->tokens(rank, begin);
  }

  void forward_merge(const BlockShape& s, const float* q, const kernels::Tokens& qt, int64_t tq,
                     const float* k, const float* v, const kernels::Tokens& kt, int64_t tk,
                     float* o, float* lse) override {
    on_device({q, k, v, o, lse});
    later([=, this] { cpu_->forward_merge(s, q, qt, tq, k, v, kt, tk, o, lse); });
  }
  void forward_merge(const BlockShape& s, const core::bf16* q, const kernels::Tokens& qt,
                     int64_t tq, const core::bf16* k, const core::bf16* v,
                     const kernels::Tokens& kt, int64_t tk, float* o, float* lse) override {
    on_device({q, k, v, o, lse});
    later([=, this] { cpu_->forward_merge(s, q, qt, tq, k, v, kt, tk, o, lse); });
  }
  void backward(const BlockShape& s, const float* q, const float* k, const float* v,
                const float* dout, const float* lse, const float* dvec, const kernels::Tokens& qt,
                int64_t tq, const kernels::Tokens& kt, int64_t tk, float* dq, float* dk,
                float* dv) override {
    on_device({q, k, v, dout, lse, dvec, dq, dk, dv});
    later([=, this] { cpu_->backward(s, q, k, v, dout, lse, dvec, qt, tq, kt, tk, dq, dk, dv); });
  }
  void backward(const BlockShape& s, const core::bf16* q, const core::bf16* k, const core::bf16* v,
                const core::bf16* dout, const float* lse, const float* dvec,
                const kernels::Tokens& qt, int64_t tq, const kernels::Tokens& kt, int64_t tk,
                float* dq, float* dk, float* dv) override {
    on_device({q, k, v, dout, lse, dvec, dq, dk, dv});
    later([=, this] { cpu_->backward(s, q, k, v, dout, lse, dvec, qt, tq, kt, tk, dq, dk, dv); });
  }
  void compute_d(const BlockShape& s, const float* o, const float* dout, int64_t l,
                 float* dvec) override {
    on_device({o, dout, dvec});
    later([=, this] { cpu_->compute_d(s, o, dout, l, dvec); });
  }
  void compute_d(const BlockShape& s, const float* o, const core::bf16* dout, int64_t l,
                 float* dvec) override {
    on_device({o, dout, dvec});
    later([=, this] { cpu_->compute_d(s, o, dout, l, dvec); });
  }
  void merge_partials(float* o, float* lse, const float* o2, const float* lse2, int64_t t,
                      int64_t h, int64_t d) override {
    on_device({o, lse, o2, lse2});
    later([=, this] { cpu_->merge_partials(o, lse, o2, lse2, t, h, d); });
  }
  void fill(float* p, int64_t n, float value) override {
    on_device({p});
    later([=, this] { cpu_->fill(p, n, value); });
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    on_device({dst, src});
    later([=, this] { cpu_->copy(dst, src, bytes); });
  }
  void copy_rows(void* dst, size_t dp, const void* src, size_t sp, size_t width,
                 size_t rows) override {
    on_device({dst, src});
    later([=, this] { cpu_->copy_rows(dst, dp, src, sp, width, rows); });
  }
  void add(float* into, const float* from, int64_t n) override {
    on_device({into, from});
    later([=, this] { cpu_->add(into, from, n); });
  }
  void add_rows(float* dst, int64_t dp, const float* src, int64_t sp, int64_t width,
                int64_t rows) override {
    on_device({dst, src});
    later([=, this] { cpu_->add_rows(dst, dp, src, sp, width, rows); });
  }
  void to_bf16(const float* src, core::bf16* dst, int64_t n) override {
    on_device({src, dst});
    later([=, this] { cpu_->to_bf16(src, dst, n); });
  }
  void sync() override {
    for (auto& f : queue_) f();
    queue_.clear();
    ++syncs;
  }

  int64_t calls = 0, syncs = 0, host_pointers = 0;

 private:
  void on_device(std::initializer_list<const void*> ptrs) {
    for (const void* p : ptrs)
      if (p != nullptr && !fake_owns(p)) ++host_pointers;
  }
  void later(std::function<void()> f) {
    ++calls;
    queue_.push_back(std::move(f));
  }

  std::unique_ptr<ExecDevice> cpu_;
  std::vector<std::function<void()>> queue_;
};

// Every rank thread's device, for the counters.
std::mutex devices_mu;
std::vector<std::shared_ptr<DeferredDevice>> devices;

std::shared_ptr<ExecDevice> make_deferred(core::Device) {
  thread_local std::shared_ptr<DeferredDevice> mine;
  if (!mine) {
    mine = std::make_shared<DeferredDevice>();
    std::lock_guard<std::mutex> lk(devices_mu);
    devices.push_back(mine);
  }
  return mine;
}

void install_fake_device() {
  core::DeviceMemory ops;
  ops.allocate = fake_allocate;
  ops.release = fake_release;
  ops.copy = fake_copy;
  ops.zero = fake_zero;
  core::register_device_memory(core::DeviceKind::cuda, ops);
  register_exec_device(core::DeviceKind::cuda, &make_deferred);
}

TEST(ExecDevice, ADeferredDeviceGivesTheCpuExecutorsBits) {
  install_fake_device();
  struct Run {
    const char* algo;
    int world, nodes;
    int64_t n, hq, hkv;
    const char* balance;
  };
  const std::vector<Run> runs = {
      {"ring", 3, 1, 47, 4, 2, "zigzag"},
      {"burst", 4, 1, 45, 4, 4, "striped"},
      {"ring", 2, 1, 61, 6, 3, "contiguous"},
      {"double-ring", 4, 2, 53, 4, 2, "zigzag"},
      {"double-ring:2:ring", 6, 3, 59, 4, 1, "zigzag"},
      {"startrail:2", 4, 1, 45, 4, 2, "zigzag"},
      {"ulysses", 2, 1, 45, 8, 4, "zigzag"},      // head groups (point to point)
      {"ulysses", 4, 1, 45, 4, 4, "zigzag"},      // one kv head each: blocking all-to-alls
      {"usp:2", 4, 1, 53, 8, 4, "zigzag"},        // head groups on a ring
      {"usp:2:ring", 4, 2, 45, 4, 2, "striped"},  // one kv head each: all-to-alls
  };
  uint64_t seed = 7;
  for (const Run& run : runs)
    for (const std::string mask : {"causal", "window", "document", "blocks+causal"})
      for (const core::DType precision : {core::DType::f32, core::DType::bf16}) {
        SCOPED_TRACE(std::string(run.algo) + " P " + std::to_string(run.world) + " " + mask + " " +
                     std::string(core::dtype_name(precision)));
        AttnCase c(run.n, run.hq, run.hkv, 16, mask, run.world, ++seed);
        const Layout layout = longseq::testing::make_layout(run.balance, c);
        AttentionSpec spec;
        spec.algo = Algorithm::parse(run.algo);
        spec.mask = c.mask;
        spec.precision = precision;
        c.run_distributed(spec, layout, run.nodes);
        const std::vector<std::vector<float>> cpu = {c.o, c.lse, c.dq, c.dk, c.dv};
        spec.device = core::Device::cuda(0);
        devices.clear();
        c.run_distributed(spec, layout, run.nodes);
        const std::vector<std::vector<float>> dev = {c.o, c.lse, c.dq, c.dk, c.dv};
        int64_t calls = 0, host = 0;
        for (const auto& d : devices) {
          calls += d->calls;
          host += d->host_pointers;
        }
        EXPECT_GT(calls, 0) << "the device pass never reached the device";
        EXPECT_EQ(host, 0) << "host memory handed to the device's kernels";
        const bool reduce_scatter = spec.algo.family == Algorithm::Family::startrail;
        const char* names[] = {"o", "lse", "dq", "dk", "dv"};
        for (size_t i = 0; i < dev.size(); ++i) {
          if (reduce_scatter && i >= 3) {  // dK, dV summed in another order
            for (size_t e = 0; e < dev[i].size(); ++e)
              ASSERT_NEAR(dev[i][e], cpu[i][e], 1e-5 * (1 + std::fabs(cpu[i][e])))
                  << names[i] << "[" << e << "]";
            continue;
          }
          EXPECT_EQ(std::memcmp(dev[i].data(), cpu[i].data(), dev[i].size() * sizeof(float)), 0)
              << names[i] << " differs from the CPU executor's";
        }
      }
}

}  // namespace
