// The local backend: ranks are threads of one process (design.md §4).
//
// Matching is rendezvous: a send and a receive with the same (channel, src, dst, tag) pair up in
// posting order. Nothing is buffered: once both are posted, whichever side first calls wait() or
// test() copies the sender's buffer straight into the receiver's (one copy, in a thread that
// would otherwise sit idle), then both sides may complete. Either buffer may be host or device
// memory: core::copy_any locates both per message and copies host to host with a memmove, and
// anything else through the registered device backend (a device-to-device copy between two GPU
// buffers, never staged through the host); a CPU-only process pays one flag check for that. With a
// link model the completion is further held back until the modelled transfer time (link_model.hpp),
// computed when the send is posted. Every wait sleeps on its rank's condition variable with a
// deadline; nothing polls.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>
#include <unordered_map>

#include "longseq/comm/group_impl.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/comm/local_backend.hpp"
#include "longseq/core/device.hpp"

namespace longseq::comm {
namespace {

using Clock = std::chrono::steady_clock;

/// One message from its first posting to completion.
struct Transfer {
  uint32_t channel = 0;
  int src_w = 0, dst_w = 0;  // world ranks (addressing)
  int src_g = 0, dst_g = 0;  // group ranks (messages)
  int tag = 0;
  const void* sbuf = nullptr;
  size_t sbytes = 0;
  bool has_send = false;
  void* rbuf = nullptr;
  size_t rbytes = 0;
  bool has_recv = false;
  enum class Copy : uint8_t { waiting, running, done, failed } copy = Copy::waiting;
  // Set at matching on a size mismatch, when a side is dropped, or when the copy threw.
  std::string error;
  // World rank that dropped its side while unwinding an exception (-1: none). Its peer reports
  // the world's failure (that exception, recorded once the unwinding reaches run_local_world)
  // rather than the drop, which is only a consequence of it.
  int dropped_by = -1;
  Clock::time_point ready_at;  // earliest completion (link model); epoch when unmodelled
  bool matched() const { return has_send && has_recv; }
};

std::string rank_name(int group_rank, int world_rank) {
  return group_rank == world_rank
             ? core::cat("rank ", group_rank)
             : core::cat("rank ", group_rank, " (world rank ", world_rank, ")");
}

struct Key {
  uint32_t channel;
  int src, dst, tag;
  bool operator==(const Key&) const = default;
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = k.channel;
    h = h * 0x9e3779b97f4a7c15ull ^ static_cast<uint32_t>(k.src);
    h = h * 0x9e3779b97f4a7c15ull ^ static_cast<uint32_t>(k.dst);
    h = h * 0x9e3779b97f4a7c15ull ^ static_cast<uint32_t>(k.tag);
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

Clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

/// Shared state of one local world: the matching queues, link clocks and failure status.
class LocalWorld {
 public:
  LocalWorld(int size, Topology topology, LinkModel link, double timeout_s)
      : size_(size),
        topology_(std::move(topology)),
        link_(link),
        timeout_s_(timeout_s),
        cv_(static_cast<size_t>(size)),
        link_free_(static_cast<size_t>(size) * static_cast<size_t>(size)),
        finished_(static_cast<size_t>(size), 0) {}

  int size() const { return size_; }
  const Topology& topology() const { return topology_; }
  double timeout_s() const { return timeout_s_; }

  /// Records the first failure and wakes every rank; later calls are ignored.
  void fail(int rank, const std::string& message) {
    std::lock_guard<std::mutex> lk(mu_);
    if (failed_) return;
    failed_ = true;
    failed_rank_ = rank;
    failure_ = message;
    notify_all_locked();
  }
  void finish(int rank) {
    std::lock_guard<std::mutex> lk(mu_);
    finished_[static_cast<size_t>(rank)] = 1;
    notify_all_locked();
  }
  bool failed(int* rank, std::string* message) {
    std::lock_guard<std::mutex> lk(mu_);
    if (failed_) {
      *rank = failed_rank_;
      *message = failure_;
    }
    return failed_;
  }

  std::shared_ptr<Transfer> post(bool is_send, uint32_t channel, int src_g, int dst_g, int src_w,
                                 int dst_w, int tag, const void* data, size_t bytes) {
    std::lock_guard<std::mutex> lk(mu_);
    if (failed_) throw RankFailed(failed_rank_, failure_);
    auto& q = unmatched_[Key{channel, src_w, dst_w, tag}];
    std::shared_ptr<Transfer> t;
    // A queue holds only unmatched sends or only unmatched receives; pair with its front.
    if (!q.empty() && (is_send ? !q.front()->has_send : !q.front()->has_recv)) {
      t = q.front();
      q.pop_front();
      if (q.empty()) unmatched_.erase(Key{channel, src_w, dst_w, tag});
    } else {
      t = std::make_shared<Transfer>();
      t->channel = channel;
      t->src_w = src_w;
      t->dst_w = dst_w;
      t->src_g = src_g;
      t->dst_g = dst_g;
      t->tag = tag;
      q.push_back(t);
    }
    if (is_send) {
      t->has_send = true;
      t->sbuf = data;
      t->sbytes = bytes;
      if (link_.enabled() && src_w != dst_w) {
        // One transfer at a time per directed link: start when the link frees up.
        Clock::time_point& free_at = link_free_[static_cast<size_t>(src_w * size_ + dst_w)];
        const Clock::time_point start = std::max(Clock::now(), free_at);
        const LinkClass& lc = link_.of(topology_.same_node(src_w, dst_w));
        t->ready_at = start + to_duration(lc.seconds(static_cast<double>(bytes)));
        free_at = t->ready_at;
      }
    } else {
      t->has_recv = true;
      t->rbuf = const_cast<void*>(data);
      t->rbytes = bytes;
    }
    if (t->matched()) {
      if (t->sbytes != t->rbytes)
        t->error = core::cat("message size mismatch: ", rank_name(t->src_g, t->src_w), " sends ",
                             t->sbytes, " bytes to ", rank_name(t->dst_g, t->dst_w), " (tag ",
                             t->tag, "), which posted a receive of ", t->rbytes, " bytes");
      cv_[static_cast<size_t>(src_w)].notify_all();
      cv_[static_cast<size_t>(dst_w)].notify_all();
    }
    return t;
  }

  /// Drives `t` as far as it can go without waiting. Returns true when complete; throws on a
  /// size mismatch, a failed copy, a world failure, or a peer that returned without posting its
  /// side.
  /// `lk` holds mu_; it is released during the copy.
  bool progress(Transfer& t, bool is_send, std::unique_lock<std::mutex>& lk) {
    if (t.matched() && t.copy == Transfer::Copy::done && Clock::now() >= t.ready_at) return true;
    if (t.dropped_by >= 0) {
      // The dropping rank is unwinding: wait until its failure is recorded (or, should it catch
      // the exception and return normally, until it has returned; the timeout bounds both).
      if (failed_) throw RankFailed(failed_rank_, failure_);
      if (!finished_[static_cast<size_t>(t.dropped_by)]) return false;
    }
    if (!t.error.empty()) throw core::Error("comm", t.error);
    // The peer is copying our buffer: never unwind (and free it) under its feet.
    if (t.copy == Transfer::Copy::running) return false;
    if (failed_) throw RankFailed(failed_rank_, failure_);
    if (t.matched() && t.copy == Transfer::Copy::waiting) {
      t.copy = Transfer::Copy::running;
      lk.unlock();
      try {
        core::copy_any(t.rbuf, t.sbuf, t.sbytes);
      } catch (const std::exception& e) {
        // Only a device backend's copy can throw (a host one is a memmove). Both sides fail
        // with its message; left `running`, the peer and abandon() would wait for it forever.
        lk.lock();
        t.copy = Transfer::Copy::failed;
        t.error =
            core::cat("copying ", t.sbytes, " bytes from ", rank_name(t.src_g, t.src_w), " to ",
                      rank_name(t.dst_g, t.dst_w), " (tag ", t.tag, ") failed: ", e.what());
        cv_[static_cast<size_t>(t.src_w)].notify_all();
        cv_[static_cast<size_t>(t.dst_w)].notify_all();
        throw core::Error("comm", t.error);
      }
      lk.lock();
      t.copy = Transfer::Copy::done;
      cv_[static_cast<size_t>(t.src_w)].notify_all();
      cv_[static_cast<size_t>(t.dst_w)].notify_all();
      return Clock::now() >= t.ready_at;
    }
    const int peer_w = is_send ? t.dst_w : t.src_w;
    if (!t.matched() && finished_[static_cast<size_t>(peer_w)]) {
      const std::string msg =
          is_send ? core::cat(rank_name(t.src_g, t.src_w), " sends ", t.sbytes, " bytes to ",
                              rank_name(t.dst_g, t.dst_w), " (tag ", t.tag,
                              "), but that rank returned without posting the receive")
                  : core::cat(rank_name(t.dst_g, t.dst_w), " waits for ", t.rbytes, " bytes from ",
                              rank_name(t.src_g, t.src_w), " (tag ", t.tag,
                              "), but that rank returned without posting the send");
      throw core::Error("comm", msg);
    }
    return false;
  }

  std::string describe(const Transfer& t, bool is_send) const {
    return is_send ? core::cat("a send of ", t.sbytes, " bytes to ", rank_name(t.dst_g, t.dst_w),
                               " (tag ", t.tag, ")")
                   : core::cat("a receive of ", t.rbytes, " bytes from ",
                               rank_name(t.src_g, t.src_w), " (tag ", t.tag, ")");
  }

  void wait(Transfer& t, bool is_send) {
    const int me = is_send ? t.src_w : t.dst_w;
    std::unique_lock<std::mutex> lk(mu_);
    const Clock::time_point deadline = Clock::now() + to_duration(timeout_s_);
    for (;;) {
      if (progress(t, is_send, lk)) return;
      // Data delivered, only the link model's time is left: sleep exactly until then.
      const bool delivered = t.matched() && t.copy == Transfer::Copy::done;
      const Clock::time_point until = delivered ? t.ready_at : deadline;
      cv_[static_cast<size_t>(me)].wait_until(lk, until);
      if (!delivered && Clock::now() >= deadline && !progress(t, is_send, lk)) {
        const std::string msg = core::cat("timed out after ", timeout_s_, " s: rank ", me,
                                          " waited for ", describe(t, is_send));
        lk.unlock();
        fail(me, "[comm] " + msg);
        throw RankFailed(me, "[comm] " + msg);
      }
    }
  }

  /// The last handle of an incomplete request is gone (typically: its rank is unwinding after
  /// an exception, about to free the buffer). Unmatched: forget it, so it can neither match nor
  /// be copied later. Matched but not copied: fail the transfer for the peer. Being copied:
  /// wait for the copy, since the buffer is still alive now and may not be afterwards.
  void abandon(Transfer& t, bool is_send) {
    const int me = is_send ? t.src_w : t.dst_w;
    std::unique_lock<std::mutex> lk(mu_);
    cv_[static_cast<size_t>(me)].wait(lk, [&] { return t.copy != Transfer::Copy::running; });
    if (!t.matched()) {
      const Key k{t.channel, t.src_w, t.dst_w, t.tag};
      auto it = unmatched_.find(k);
      if (it == unmatched_.end()) return;
      auto& q = it->second;
      q.erase(std::remove_if(q.begin(), q.end(), [&](const auto& p) { return p.get() == &t; }),
              q.end());
      if (q.empty()) unmatched_.erase(it);
      return;
    }
    if (t.copy == Transfer::Copy::waiting && t.error.empty()) {
      t.error = core::cat(is_send ? rank_name(t.src_g, t.src_w) : rank_name(t.dst_g, t.dst_w),
                          " dropped its ", is_send ? "send" : "receive", " (tag ", t.tag,
                          ") before it completed");
      if (std::uncaught_exceptions() > 0) t.dropped_by = me;
      cv_[static_cast<size_t>(t.src_w)].notify_all();
      cv_[static_cast<size_t>(t.dst_w)].notify_all();
    }
  }

  bool test(Transfer& t, bool is_send, Clock::time_point& first_test) {
    std::unique_lock<std::mutex> lk(mu_);
    if (progress(t, is_send, lk)) return true;
    // A test() loop must not hang forever either: the timeout runs from the first test().
    const Clock::time_point now = Clock::now();
    if (first_test == Clock::time_point{}) first_test = now;
    if (!t.matched() && now - first_test > to_duration(timeout_s_)) {
      const int me = is_send ? t.src_w : t.dst_w;
      const std::string msg = core::cat("[comm] timed out after ", timeout_s_, " s: rank ", me,
                                        " tested ", describe(t, is_send));
      lk.unlock();
      fail(me, msg);
      throw RankFailed(me, msg);
    }
    return false;
  }

 private:
  void notify_all_locked() {
    for (auto& c : cv_) c.notify_all();
  }

  const int size_;
  const Topology topology_;
  const LinkModel link_;
  const double timeout_s_;
  std::mutex mu_;
  std::vector<std::condition_variable> cv_;  // one per world rank: its waits sleep on it
  std::unordered_map<Key, std::deque<std::shared_ptr<Transfer>>, KeyHash> unmatched_;
  std::vector<Clock::time_point> link_free_;  // [src * size + dst]
  std::vector<char> finished_;
  bool failed_ = false;
  int failed_rank_ = -1;
  std::string failure_;
};

namespace {

class LocalRequest final : public Request::Impl {
 public:
  LocalRequest(std::shared_ptr<LocalWorld> world, std::shared_ptr<Transfer> t, bool is_send)
      : world_(std::move(world)), t_(std::move(t)), is_send_(is_send) {}
  ~LocalRequest() override {
    if (!done_) world_->abandon(*t_, is_send_);
  }
  LocalRequest(const LocalRequest&) = delete;
  LocalRequest& operator=(const LocalRequest&) = delete;
  void wait() override {
    if (!done_) world_->wait(*t_, is_send_);
    done_ = true;
  }
  bool test() override {
    if (!done_) done_ = world_->test(*t_, is_send_, first_test_);
    return done_;
  }

 private:
  std::shared_ptr<LocalWorld> world_;
  std::shared_ptr<Transfer> t_;
  bool is_send_;
  bool done_ = false;
  Clock::time_point first_test_{};
};

class LocalGroupImpl final : public GroupImpl {
 public:
  LocalGroupImpl(std::shared_ptr<LocalWorld> world, std::vector<int> world_ranks, int rank,
                 Topology topology, uint32_t gid, std::shared_ptr<RankState> rs)
      : GroupImpl(std::move(world_ranks), rank, std::move(topology), gid, std::move(rs),
                  world->timeout_s()),
        world_(std::move(world)) {}

  std::string_view backend() const override { return "local"; }

  std::shared_ptr<GroupImpl> make_child(std::vector<int> members, int rank, uint32_t gid) override {
    auto [world_ranks, topo] = child_layout(members);
    return std::make_shared<LocalGroupImpl>(world_, std::move(world_ranks), rank, std::move(topo),
                                            gid, rank_state_ptr());
  }

 protected:
  Request post_send(uint32_t channel, int dst, int tag, const void* data, size_t bytes) override {
    auto t = world_->post(true, channel, rank(), dst, world_rank(rank()), world_rank(dst), tag,
                          data, bytes);
    return Request(std::make_shared<LocalRequest>(world_, std::move(t), true));
  }
  Request post_recv(uint32_t channel, int src, int tag, void* data, size_t bytes) override {
    auto t = world_->post(false, channel, src, rank(), world_rank(src), world_rank(rank()), tag,
                          data, bytes);
    return Request(std::make_shared<LocalRequest>(world_, std::move(t), false));
  }

 private:
  std::shared_ptr<LocalWorld> world_;
};

}  // namespace

void run_local_world(int world, const Topology& topology, const LinkModel& link, double timeout_s,
                     const std::function<void(Group&)>& fn) {
  core::require(world >= 1, "comm", "world ", world, " must be at least 1");
  core::require(topology.size() == world, "comm", "topology of ", topology.size(),
                " ranks for world ", world);
  core::require(timeout_s > 0.0, "comm", "timeout ", timeout_s, " s must be positive");
  auto w = std::make_shared<LocalWorld>(world, topology, link, timeout_s);
  std::vector<int> ranks(static_cast<size_t>(world));
  std::iota(ranks.begin(), ranks.end(), 0);

  auto body = [&](int r) {
    auto rs = std::make_shared<RankState>();
    rs->world_rank = r;
    rs->world_node = topology.node(r);
    try {
      Group g(std::make_shared<LocalGroupImpl>(w, ranks, r, topology, 1u, rs));
      fn(g);
      w->finish(r);
    } catch (const std::exception& e) {
      w->fail(r, e.what());
    } catch (...) {
      w->fail(r, "unknown exception (not derived from std::exception)");
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(world - 1));
  for (int r = 1; r < world; ++r) threads.emplace_back(body, r);
  body(0);  // the caller is rank 0: one thread fewer, and world 1 starts no thread at all
  for (auto& t : threads) t.join();
  int rank = -1;
  std::string message;
  if (w->failed(&rank, &message)) throw RankFailed(rank, message);
}

}  // namespace longseq::comm
