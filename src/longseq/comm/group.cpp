// Group methods that are the same for every backend: validation, byte accounting, split (with
// group-id agreement), topology helpers, statistics.
#include "longseq/comm/group.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "longseq/comm/group_impl.hpp"

namespace longseq::comm {

// ---- errors and requests ---------------------------------------------------------------------

RankFailed::RankFailed(int rank, const std::string& message)
    : core::Error("comm", core::cat("rank ", rank, " failed: ", message)),
      rank_(rank),
      reason_(message) {}

void Request::wait() {
  if (impl_) impl_->wait();
}

bool Request::test() {
  return impl_ ? impl_->test() : true;
}

void wait_all(std::span<Request> requests) {
  for (size_t i = 0; i < requests.size(); ++i)
    if (requests[i].impl_) requests[i].impl_->wait_in_batch(i + 1 < requests.size());
}

// ---- statistics ------------------------------------------------------------------------------

Stats AtomicStats::load(int rank, int node) const {
  Stats s;
  s.rank = rank;
  s.node = node;
  s.sent_intra = sent_intra.load();
  s.sent_inter = sent_inter.load();
  s.recv_intra = recv_intra.load();
  s.recv_inter = recv_inter.load();
  return s;
}

void AtomicStats::reset() {
  sent_intra.reset();
  sent_inter.reset();
  recv_intra.reset();
  recv_inter.reset();
}

namespace {
nlohmann::json traffic_json(const Traffic& t) {
  return {{"bytes", t.bytes}, {"messages", t.messages}};
}
}  // namespace

nlohmann::json Stats::to_json() const {
  return {{"rank", rank},
          {"node", node},
          {"sent", {{"intra", traffic_json(sent_intra)}, {"inter", traffic_json(sent_inter)}}},
          {"recv", {{"intra", traffic_json(recv_intra)}, {"inter", traffic_json(recv_inter)}}}};
}

nlohmann::json stats_to_json(std::span<const Stats> per_rank) {
  nlohmann::json ranks = nlohmann::json::array();
  Traffic intra, inter;
  for (const Stats& s : per_rank) {
    ranks.push_back(s.to_json());
    intra.bytes += s.sent_intra.bytes;
    intra.messages += s.sent_intra.messages;
    inter.bytes += s.sent_inter.bytes;
    inter.messages += s.sent_inter.messages;
  }
  return {{"ranks", ranks},
          {"total",
           {{"sent", {{"intra", traffic_json(intra)}, {"inter", traffic_json(inter)}}},
            {"bytes", intra.bytes + inter.bytes},
            {"messages", intra.messages + inter.messages}}}};
}

// ---- GroupImpl base --------------------------------------------------------------------------

GroupImpl::GroupImpl(std::vector<int> world_ranks, int rank, Topology topology, uint32_t gid,
                     std::shared_ptr<RankState> rank_state, double timeout_s)
    : world_ranks_(std::move(world_ranks)),
      rank_(rank),
      topology_(std::move(topology)),
      gid_(gid),
      rank_state_(std::move(rank_state)),
      timeout_s_(timeout_s) {
  LONGSEQ_CHECK(rank_ >= 0 && rank_ < size());
  LONGSEQ_CHECK(topology_.size() == size());
}

GroupImpl::~GroupImpl() = default;

void GroupImpl::validate(const char* what, int peer, int tag, const void* data,
                         size_t bytes) const {
  core::require(peer >= 0 && peer < size(), "comm", what, " names rank ", peer,
                " in a group of size ", size());
  core::require(tag >= 0 && tag < kMaxTag, "comm", what, " tag ", tag, " outside [0, ", kMaxTag,
                ")");
  core::require(data != nullptr || bytes == 0, "comm", what, " of ", bytes,
                " bytes with a null buffer");
}

namespace {
/// Set while gather_stats runs its own all_gather on this thread.
thread_local bool t_uncounted = false;
struct UncountedScope {
  UncountedScope() { t_uncounted = true; }
  ~UncountedScope() { t_uncounted = false; }
  UncountedScope(const UncountedScope&) = delete;
  UncountedScope& operator=(const UncountedScope&) = delete;
};
}  // namespace

void GroupImpl::count(bool send, int peer, size_t bytes) {
  if (peer == rank_ || t_uncounted) return;  // a local copy crosses no link
  const bool intra = topology_.same_node(rank_, peer);
  if (send) {
    stats_.count_send(intra, bytes);
    rank_state_->totals.count_send(intra, bytes);
  } else {
    stats_.count_recv(intra, bytes);
    rank_state_->totals.count_recv(intra, bytes);
  }
}

void GroupImpl::record(Channel c, bool send, int peer, int tag, size_t bytes) {
  if (!recording_.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lk(records_mu_);
  records_.push_back({c, send, peer, tag, bytes});
}

void GroupImpl::record_posts() {
  recording_.store(true);
}

std::vector<PostRecord> GroupImpl::posts() const {
  std::lock_guard<std::mutex> lk(records_mu_);
  return records_;
}

Request GroupImpl::send(Channel c, int dst, int tag, const void* data, size_t bytes) {
  validate("isend", dst, tag, data, bytes);
  count(true, dst, bytes);
  record(c, true, dst, tag, bytes);
  return post_send(channel_id(c), dst, tag, data, bytes);
}

Request GroupImpl::recv(Channel c, int src, int tag, void* data, size_t bytes) {
  validate("irecv", src, tag, data, bytes);
  count(false, src, bytes);
  record(c, false, src, tag, bytes);
  return post_recv(channel_id(c), src, tag, data, bytes);
}

void GroupImpl::count_only(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs) {
  for (const SendSpec& s : sends) count(true, s.peer, s.bytes);
  for (const RecvSpec& r : recvs) count(false, r.peer, r.bytes);
}

Request GroupImpl::post_collective(const CollectiveCall&) {
  LONGSEQ_CHECK_MSG(false, "post_collective on backend ", backend(),
                    ", which has no native collectives");
  return {};
}

void GroupImpl::post_step(Channel c, std::span<const SendSpec> sends,
                          std::span<const RecvSpec> recvs, std::vector<Request>& out,
                          bool wait_now) {
  for (const SendSpec& s : sends) validate("isend", s.peer, s.tag, s.data, s.bytes);
  for (const RecvSpec& r : recvs) validate("irecv", r.peer, r.tag, r.data, r.bytes);
  count_only(sends, recvs);
  // Sends first, then receives: the order post_batch posts them in.
  for (const SendSpec& s : sends) record(c, true, s.peer, s.tag, s.bytes);
  for (const RecvSpec& r : recvs) record(c, false, r.peer, r.tag, r.bytes);
  post_batch(channel_id(c), sends, recvs, out, wait_now);
}

void GroupImpl::run_step(Channel c, std::span<const SendSpec> sends,
                         std::span<const RecvSpec> recvs) {
  std::vector<Request> reqs;
  reqs.reserve(sends.size() + recvs.size());
  post_step(c, sends, recvs, reqs, /*wait_now=*/true);
  wait_all(reqs);
}

void GroupImpl::post_batch(uint32_t channel, std::span<const SendSpec> sends,
                           std::span<const RecvSpec> recvs, std::vector<Request>& out,
                           bool /*wait_now*/) {
  for (const SendSpec& s : sends) out.push_back(post_send(channel, s.peer, s.tag, s.data, s.bytes));
  for (const RecvSpec& r : recvs) out.push_back(post_recv(channel, r.peer, r.tag, r.data, r.bytes));
}

std::byte* GroupImpl::scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

// ---- Group -----------------------------------------------------------------------------------

Group::Group(std::shared_ptr<GroupImpl> impl) : impl_(std::move(impl)) {}

GroupImpl& Group::impl() const {
  core::require(impl_ != nullptr, "comm", "operation on an invalid Group (split with kUndefined)");
  return *impl_;
}

int Group::rank() const {
  return impl().rank();
}
int Group::size() const {
  return impl().size();
}
std::string_view Group::backend() const {
  return impl().backend();
}
double Group::timeout_seconds() const {
  return impl().timeout_s();
}
const Topology& Group::topology() const {
  return impl().topology();
}

int Group::ring_next(int k) const {
  const int p = size();
  return ((rank() + k) % p + p) % p;
}
int Group::ring_prev(int k) const {
  return ring_next(-k);
}

Request Group::isend(int dst, const void* data, size_t bytes, int tag) const {
  return impl().send(Channel::user, dst, tag, data, bytes);
}
Request Group::irecv(int src, void* data, size_t bytes, int tag) const {
  return impl().recv(Channel::user, src, tag, data, bytes);
}
void Group::send(int dst, const void* data, size_t bytes, int tag) const {
  isend(dst, data, bytes, tag).wait();
}
void Group::recv(int src, void* data, size_t bytes, int tag) const {
  irecv(src, data, bytes, tag).wait();
}

std::vector<Request> Group::start_exchange(std::span<const SendSpec> sends,
                                           std::span<const RecvSpec> recvs) const {
  std::vector<Request> out;
  out.reserve(sends.size() + recvs.size());
  impl().post_step(Channel::user, sends, recvs, out);
  return out;
}

void Group::exchange(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs) const {
  impl().run_step(Channel::user, sends, recvs);
}

Group Group::split(int color, int key) const {
  GroupImpl& g = impl();
  core::require(color >= 0 || color == kUndefined, "comm", "split color ", color,
                " must be >= 0 or Group::kUndefined");
  // Group-id agreement: every rank contributes the next id it has never used; the new groups take
  // ids from the maximum over the parent upward, so no member has used them for another group.
  RankState& rs = g.rank_state();
  const int p = g.size();
  const int64_t mine[3] = {color, key, static_cast<int64_t>(rs.next_gid.load())};
  std::vector<int64_t> all(static_cast<size_t>(3 * p));
  all_gather(mine, all.data(), 3, core::DType::i64);
  int64_t base = 0;
  std::vector<int64_t> colors;
  for (int q = 0; q < p; ++q) {
    base = std::max(base, all[static_cast<size_t>(3 * q + 2)]);
    if (all[static_cast<size_t>(3 * q)] >= 0) colors.push_back(all[static_cast<size_t>(3 * q)]);
  }
  std::sort(colors.begin(), colors.end());
  colors.erase(std::unique(colors.begin(), colors.end()), colors.end());
  const int64_t next = base + static_cast<int64_t>(colors.size());
  core::require(next < (int64_t{1} << 31), "comm", "too many groups created (", next, ")");
  uint32_t cur = rs.next_gid.load();
  while (cur < static_cast<uint32_t>(next) &&
         !rs.next_gid.compare_exchange_weak(cur, static_cast<uint32_t>(next))) {
  }
  if (color == kUndefined) return Group();

  std::vector<int> members;
  for (int q = 0; q < p; ++q)
    if (all[static_cast<size_t>(3 * q)] == color) members.push_back(q);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return all[static_cast<size_t>(3 * a + 1)] < all[static_cast<size_t>(3 * b + 1)];
  });
  const int new_rank =
      static_cast<int>(std::find(members.begin(), members.end(), g.rank()) - members.begin());
  const auto color_index =
      std::lower_bound(colors.begin(), colors.end(), static_cast<int64_t>(color)) - colors.begin();
  const auto gid = static_cast<uint32_t>(base + color_index);
  return Group(g.make_child(std::move(members), new_rank, gid));
}

Group Group::intra_group() const {
  GroupImpl& g = impl();
  {
    std::lock_guard<std::mutex> lk(g.cache_mu);
    if (g.intra_cache) return Group(g.intra_cache);
  }
  Group sub = split(node(), rank());
  std::lock_guard<std::mutex> lk(g.cache_mu);
  g.intra_cache = sub.impl_;
  return sub;
}

Group Group::inter_group() const {
  GroupImpl& g = impl();
  {
    std::lock_guard<std::mutex> lk(g.cache_mu);
    if (g.inter_cache) return Group(g.inter_cache);
  }
  Group sub = split(topology().local_rank(rank()), rank());
  std::lock_guard<std::mutex> lk(g.cache_mu);
  g.inter_cache = sub.impl_;
  return sub;
}

Group Group::split_cached(std::string_view partition, int color, int key) const {
  GroupImpl& g = impl();
  {
    std::lock_guard<std::mutex> lk(g.cache_mu);
    const auto it = g.split_cache.find(partition);
    if (it != g.split_cache.end()) return Group(it->second);
  }
  Group sub = split(color, key);
  std::lock_guard<std::mutex> lk(g.cache_mu);
  g.split_cache.emplace(std::string(partition), sub.impl_);
  return sub;
}

Stats Group::stats() const {
  return impl().counters().load(rank(), node());
}
void Group::reset_stats() const {
  impl().counters().reset();
}

Stats Group::rank_stats() const {
  const RankState& rs = impl().rank_state();
  return rs.totals.load(rs.world_rank, rs.world_node);
}
void Group::reset_rank_stats() const {
  impl().rank_state().totals.reset();
}

std::vector<Stats> Group::gather_stats() const {
  // The gather's own messages are not counted (t_uncounted), so gathering statistics leaves
  // them unchanged even while other threads of this rank keep sending.
  const Stats mine = stats();
  constexpr int kFields = 10;
  const uint64_t packed[kFields] = {static_cast<uint64_t>(mine.rank),
                                    static_cast<uint64_t>(mine.node),
                                    mine.sent_intra.bytes,
                                    mine.sent_intra.messages,
                                    mine.sent_inter.bytes,
                                    mine.sent_inter.messages,
                                    mine.recv_intra.bytes,
                                    mine.recv_intra.messages,
                                    mine.recv_inter.bytes,
                                    mine.recv_inter.messages};
  std::vector<uint64_t> all(static_cast<size_t>(kFields * size()));
  {
    UncountedScope uncounted;
    all_gather(packed, all.data(), kFields, core::DType::i64);
  }
  std::vector<Stats> out(static_cast<size_t>(size()));
  for (int q = 0; q < size(); ++q) {
    const uint64_t* f = all.data() + static_cast<size_t>(kFields * q);
    Stats& s = out[static_cast<size_t>(q)];
    s.rank = static_cast<int>(f[0]);
    s.node = static_cast<int>(f[1]);
    s.sent_intra = {f[2], f[3]};
    s.sent_inter = {f[4], f[5]};
    s.recv_intra = {f[6], f[7]};
    s.recv_inter = {f[8], f[9]};
  }
  return out;
}

}  // namespace longseq::comm
