// The one executor: runs the RankSchedule of every algorithm (design.md §5). It runs the
// schedule's `pre` collective steps (home -> sides), then per ring step s it (1) waits for the
// requests whose wait_step is s, (2) adds gradient partials that arrived, (3) posts every transfer
// of step s together, (4) computes the chunk pairs of step s; then the `post` collective steps
// (sides -> home). Transfers posted at s are in flight while step s computes: that is the overlap
// (double or triple buffering comes from the schedule's slot count, not from the executor).
#include "longseq/attention/distributed.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <type_traits>

#include "longseq/attention/exec_device.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/timer.hpp"

namespace longseq::attention {

using core::Tensor;
using core::View;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// The schedule owns its tags (< 2 * world + 4 * team * kSideSplit); the passes get disjoint halves
// of comm's tag space so a late forward message can never match a backward receive.
int tag_base(Pass p) {
  return p == Pass::forward ? 0 : comm::kMaxTag / 2;
}

// Token metadata of every rank (positions, document ids), shared by all steps and devices.
std::shared_ptr<const TokenTable> make_token_table(const Layout& layout, const MaskSpec& mask) {
  auto t = std::make_shared<TokenTable>();
  t->pos.resize(layout.world());
  t->doc.resize(layout.world());
  for (int r = 0; r < layout.world(); ++r) {
    t->pos[r] = layout.positions(r);
    if (!mask.doc_ids.empty()) {
      t->doc[r].resize(t->pos[r].size());
      for (size_t i = 0; i < t->pos[r].size(); ++i)
        t->doc[r][i] = t->pos[r][i] >= 0 ? mask.doc_ids[t->pos[r][i]] : -1;
    }
  }
  return t;
}

template <class T>
const T* contiguous_or_copy(View<const T> v, std::vector<T>& keep, const char* what) {
  if (v.is_contiguous()) return v.data();
  LONGSEQ_CHECK_MSG(v.rank() == 3, what, " must be rank 3");
  keep.resize(static_cast<size_t>(v.numel()));
  size_t i = 0;
  for (int64_t a = 0; a < v.dim(0); ++a)
    for (int64_t b = 0; b < v.dim(1); ++b)
      for (int64_t c = 0; c < v.dim(2); ++c) keep[i++] = v(a, b, c);
  return keep.data();
}

// q, k, v or dO as the kernels read them: contiguous, in the compute type T, on the executor's
// device. The caller's data itself when it is contiguous and already T (fp32 inputs of an fp32
// pass, bf16 inputs of a bf16 pass), else a copy in `keep`: fp32 rounded to bf16 (nearest even,
// once per pass: the only rounding the inputs ever see; everything downstream is exact copies),
// bf16 widened to fp32 (exact; host memory only, checked at entry), or a non-contiguous view
// gathered (CPU only).
template <class T, class In>
const T* compute_input(View<const In> x, ExecDevice& dev, core::Buffer<std::byte>& keep,
                       const char* what) {
  std::vector<In> flat;
  const In* p = x.data();
  if (!x.is_contiguous()) {
    core::require(dev.device().is_cpu(), "attention", what, " on ", dev.device().str(),
                  " must be contiguous");
    p = contiguous_or_copy(x, flat, what);
  }
  const auto n = static_cast<size_t>(x.numel());
  if constexpr (std::is_same_v<T, In>) {
    if (flat.empty()) return p;
    keep = dev.alloc(n * sizeof(T), what);
    std::memcpy(keep.data(), p, n * sizeof(T));
  } else if constexpr (std::is_same_v<T, core::bf16>) {
    keep = dev.alloc(n * sizeof(core::bf16), what);
    dev.to_bf16(p, reinterpret_cast<core::bf16*>(keep.data()), x.numel());
  } else {
    static_assert(std::is_same_v<T, float> && std::is_same_v<In, core::bf16>);
    LONGSEQ_CHECK(dev.device().is_cpu());
    keep = dev.alloc(n * sizeof(float), what);
    core::bf16_to_f32(p, reinterpret_cast<float*>(keep.data()), n);
  }
  return reinterpret_cast<const T*>(keep.data());
}

// Posts and waits the schedule's transfers; times the waits.
class Transport {
 public:
  Transport(comm::Group& g, int tag_base, AttentionStats* st)
      : g_(g), tag_base_(tag_base), st_(st) {}

  void post(const Xfer& x, void* slot_ptr, size_t bytes) {
    comm::Request r = x.send ? g_.isend(x.peer, slot_ptr, bytes, tag_base_ + x.tag)
                             : g_.irecv(x.peer, slot_ptr, bytes, tag_base_ + x.tag);
    pending_.push_back({x.wait_step, std::move(r)});
  }
  void wait_step(int step) {
    core::ScopedTimer t(st_ ? &st_->wait_s : &scratch_);
    for (auto& p : pending_)
      if (p.first == step) p.second.wait();
    std::erase_if(pending_, [&](const auto& p) { return p.first == step; });
  }
  void wait_all() {
    core::ScopedTimer t(st_ ? &st_->wait_s : &scratch_);
    for (auto& p : pending_) p.second.wait();
    pending_.clear();
  }

 private:
  comm::Group& g_;
  int tag_base_;
  AttentionStats* st_;
  double scratch_ = 0;
  std::vector<std::pair<int, comm::Request>> pending_;
};

// Checks that the schedule never waits on something it has not posted (a bug, not user input).
void check_schedule(const RankSchedule& rs) {
  for (const Xfer& x : rs.xfers)
    LONGSEQ_CHECK(x.post_step < x.wait_step && x.wait_step < rs.num_steps);
}

}  // namespace

void validate_precision(core::DType precision) {
  core::require(precision == core::DType::f32 || precision == core::DType::bf16, "attention",
                "precision ", core::dtype_name(precision), " is not supported (f32 or bf16)");
}

void validate_group(const AttentionSpec& spec, const Layout& layout,
                    const comm::Topology& group_topo) {
  using core::require;
  validate_precision(spec.precision);
  const int world = group_topo.size();
  spec.algo.validate_world(world);
  require(world <= (1 << 16), "attention", "world ", world,
          " exceeds the 65536 ranks the "
          "message tags can address");
  require(layout.world() == world, "attention", "layout is for world ", layout.world(),
          ", the group has ", world, " ranks");
  require(spec.threads >= 1, "attention", "threads must be >= 1, got ", spec.threads);
  if (spec.algo.ring_family() && spec.algo.route == Route::double_ring && world > 1) {
    const comm::Topology topo = schedule_topology(spec.algo, group_topo);
    require(topo.num_nodes() > 1 && topo.num_nodes() < world, "attention", "--algo ",
            spec.algo.name(), " needs several inner rings of several ranks each; got ",
            topo.num_nodes(), " inner ring(s) for world ", world,
            " (use ring or burst, set --nodes, or double-ring:I)");
  }
}

void validate(const AttentionSpec& spec, const Layout& layout, const comm::Topology& group_topo,
              int64_t hq, int64_t hkv, int64_t d) {
  using core::require;
  validate_group(spec, layout, group_topo);
  spec.algo.validate_heads(group_topo.size(), hq, hkv);
  require(spec.mask != nullptr, "attention", "no mask given");
  require(hq >= 1 && hkv >= 1 && d >= 1, "attention", "heads and head dim must be >= 1: Hq ", hq,
          ", Hkv ", hkv, ", D ", d);
  require(hq % hkv == 0, "attention", "query heads ", hq, " must be a multiple of key/value heads ",
          hkv);
  spec.mask->validate(layout.global_len());
  if (!spec.mask->block_mask.empty() && layout.balance() == Balance::block_striped)
    require(spec.mask->block_size % layout.world() == 0, "attention",
            "block-striped needs block size ", spec.mask->block_size, " to be a multiple of world ",
            layout.world());
}

namespace {

// ---- caches: the trainer calls attention for every layer and step with the same layout, mask
// and algorithm, so pair tables, token tables and schedules are built once per key. Keys hold
// every value the cached objects depend on (the mask by a hash of its contents), so a hit is
// always right; a few entries bound the memory.
template <class V>
class Cache {
 public:
  template <class Make>
  std::shared_ptr<const V> get(const std::string& key, Make make) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (auto& [k, v] : items_)
        if (k == key) return v;
    }
    auto v = std::make_shared<const V>(make());
    std::lock_guard<std::mutex> lk(mu_);
    if (items_.size() >= kCapacity) items_.erase(items_.begin());
    items_.emplace_back(key, v);
    return v;
  }

 private:
  static constexpr size_t kCapacity = 64;
  std::mutex mu_;
  std::vector<std::pair<std::string, std::shared_ptr<const V>>> items_;
};

uint64_t hash_bytes(const void* p, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

struct Tables {
  PairTable pairs;
  std::shared_ptr<const TokenTable> tokens;
};

std::string tables_key(const Layout& layout, const MaskSpec& m) {
  uint64_t h = hash_bytes(m.doc_ids.data(), m.doc_ids.size() * sizeof(int32_t));
  h = hash_bytes(m.block_mask.data(), m.block_mask.size(), h);
  return core::cat(static_cast<int>(layout.balance()), ":", layout.global_len(), ":",
                   layout.world(), ":", layout.block(), "|", m.causal, ":", m.window, ":",
                   m.doc_ids.size(), ":", m.block_mask.size(), ":", m.block_size, ":", h);
}

// The tables and this rank's schedule of one pass, from the caches.
struct Plan {
  std::shared_ptr<const Tables> tables;
  std::shared_ptr<const RankSchedule> rs;
};

Plan plan_for(const AttentionSpec& spec, const Layout& layout, const comm::Group& group, Pass pass,
              HeadCounts heads) {
  static Cache<Tables> tables;
  static Cache<RankSchedule> schedules;
  const MaskSpec& mask = *spec.mask;
  const std::string tk = tables_key(layout, mask);
  Plan p;
  p.tables = tables.get(tk, [&] {
    return Tables{PairTable(layout, mask), make_token_table(layout, mask)};
  });
  const comm::Topology topo = schedule_topology(spec.algo, group.topology());
  std::string nodes;
  for (int r = 0; r < topo.size(); ++r) nodes += core::cat(topo.node(r), ",");
  if (!spec.head_groups) heads = {};
  const std::string sk = core::cat(tk, "|", spec.algo.name(), "|", nodes, "|", group.rank(), "|",
                                   static_cast<int>(pass), "|", heads.q, ":", heads.kv);
  p.rs = schedules.get(sk, [&] {
    return make_schedule(group.rank(), topo, layout, p.tables->pairs, spec.algo, pass, heads);
  });
  check_schedule(*p.rs);
  return p;
}

constexpr size_t kFields = 10;

// Where every field lives on this rank: home (L rows, all heads; the caller's tensors) and side
// (the schedule's pieces for this rank's head slice). Without collectives the sides are home.
struct Store {
  explicit Store(ExecDevice& d) : dev(d) {}
  ExecDevice& dev;
  std::array<std::byte*, kFields> home{}, side{};
  std::vector<core::Buffer<std::byte>> owned;
  /// `bytes` zeroed bytes on the executor's device, alive until the pass ends.
  std::byte* make(size_t bytes) {
    owned.push_back(dev.alloc(bytes, "attention executor buffer"));
    return owned.back().data();
  }
  template <class U>
  U* h(Field f) {
    return reinterpret_cast<U*>(home[static_cast<size_t>(f)]);
  }
  template <class U>
  U* s(Field f) {
    return reinterpret_cast<U*>(side[static_cast<size_t>(f)]);
  }
  std::byte*& side_of(Field f) { return side[static_cast<size_t>(f)]; }
  std::byte* home_of(Field f) { return home[static_cast<size_t>(f)]; }
};

bool kv_field(Field f) {
  return f == Field::k || f == Field::v || f == Field::dk || f == Field::dv;
}

// The sub-group of a collective step (collective over `group` on the first call only).
comm::Group sub_group(const Collective& c, const comm::Group& group) {
  const auto me = std::find(c.members.begin(), c.members.end(), group.rank()) - c.members.begin();
  return group.split_cached(c.partition, c.members.front(), static_cast<int>(me));
}

// Runs collective steps. Sub-groups come from the group's split cache, so only the first call
// of a run pays the split.
//
// Every field of every step is posted (iall_gather, ...) before any is waited, so they move
// together instead of one after the other. The unpacking after the waits runs in list order, so
// the results are those of running the steps one by one, bit for bit.
//
// On a GPU the buffers are device memory, which comm moves (the local backend copies between
// devices) but does not reduce: a reduce-scatter there is an all-to-all of the blocks and adds
// on the device in member order (fixed, so repeats give the same bits; not the CPU's ring order).
void run_collectives(const std::vector<Collective>& cs, const RankSchedule& rs, const Dims& dm,
                     Store& st, comm::Group& group) {
  using Op = Collective::Op;
  if (cs.empty()) return;
  ExecDevice& dev = st.dev;
  const bool host = dev.device().is_cpu();
  dev.sync();  // the sides and homes below are complete before comm reads them
  const int64_t l = dm.l, hq_s = side_hq(rs, dm), hkv_s = side_hkv(rs, dm);
  struct Posted {
    Field field;
    comm::Request req;
    std::function<void()> finish;  // unpacking once the request is complete
  };
  std::vector<Posted> posted;
  std::vector<core::Buffer<std::byte>> temps;  // packed inputs and unpacked outputs in flight
  auto temp = [&](size_t bytes) {
    return temps.emplace_back(dev.alloc(bytes, "collective")).data();
  };
  auto complete = [&](auto&& pick) {
    for (Posted& p : posted)
      if (pick(p.field)) p.req.wait();
    for (Posted& p : posted)
      if (pick(p.field) && p.finish) p.finish();
    std::erase_if(posted, [&](const Posted& p) { return pick(p.field); });
  };
  for (const Collective& c : cs) {
    const int n = static_cast<int>(c.members.size());
    comm::Group sub = n > 0 ? sub_group(c, group) : group;
    if (c.op == Op::merge) {  // StarTrail's reduce-scatter with LSE weights
      const int64_t ro = l * dm.hq * dm.d, rl = l * dm.hq;
      float* so = reinterpret_cast<float*>(temp(n * ro * 4));
      float* sl = reinterpret_cast<float*>(temp(n * rl * 4));
      posted.push_back(
          {Field::o, sub.iall_to_all(st.s<float>(Field::o), so, ro, core::DType::f32), nullptr});
      posted.push_back(
          {Field::lse, sub.iall_to_all(st.s<float>(Field::lse), sl, rl, core::DType::f32),
           [=, &st, &dev] {
             float* o = st.h<float>(Field::o);
             float* lse = st.h<float>(Field::lse);
             dev.fill(o, ro, 0.f);
             dev.fill(lse, rl, kNegInf);
             for (int m = 0; m < n; ++m)  // member order: the same rounding on every run
               dev.merge_partials(o, lse, so + m * ro, sl + m * rl, l, dm.hq, dm.d);
           }});
      continue;
    }
    for (const Field f : c.fields) {
      const int64_t eb = field_bytes(f, dm);
      const core::DType dt = eb == 2 ? core::DType::bf16 : core::DType::f32;
      const int64_t wh = field_width(f, dm.hq, dm.hkv, dm.d),
                    ws = field_width(f, hq_s, hkv_s, dm.d);
      const int64_t unit = f == Field::lse || f == Field::dvec ? 1 : dm.d;
      const bool heads = c.op == Op::to_heads || c.op == Op::from_heads;
      const HeadSplit hs(dm.hq, dm.hkv, heads ? n : 1);
      auto begin = [=](int j) { return (kv_field(f) ? hs.kv_begin(j) : hs.q_begin(j)) * unit; };
      switch (c.op) {
        case Op::all_gather:
          st.side_of(f) = st.make(n * l * wh * eb);
          posted.push_back({f, sub.iall_gather(st.home_of(f), st.side_of(f), l * wh, dt), nullptr});
          break;
        case Op::reduce_scatter: {
          if (host) {
            posted.push_back(
                {f, sub.ireduce_scatter(st.side_of(f), st.home_of(f), l * wh, dt), nullptr});
            break;
          }
          LONGSEQ_CHECK(dt == core::DType::f32);  // gradients
          float* in = reinterpret_cast<float*>(temp(n * l * wh * 4));
          posted.push_back({f, sub.iall_to_all(st.side_of(f), in, l * wh, dt), [=, &st, &dev] {
                              float* home = st.h<float>(f);
                              dev.fill(home, l * wh, 0.f);
                              for (int m = 0; m < n; ++m) dev.add(home, in + m * l * wh, l * wh);
                            }});
          break;
        }
        case Op::to_heads: {
          std::byte* pack = temp(n * l * ws * eb);
          for (int j = 0; j < n; ++j)
            dev.copy_rows(pack + j * l * ws * eb, ws * eb, st.home_of(f) + begin(j) * eb, wh * eb,
                          ws * eb, l);
          dev.sync();
          st.side_of(f) = st.make(n * l * ws * eb);
          posted.push_back({f, sub.iall_to_all(pack, st.side_of(f), l * ws, dt), nullptr});
          break;
        }
        case Op::from_heads: {  // fp32 outputs; replicated kv heads add up in member order
          float* in = reinterpret_cast<float*>(temp(n * l * ws * 4));
          posted.push_back({f, sub.iall_to_all(st.side_of(f), in, l * ws, dt), [=, &st, &dev] {
                              float* home = st.h<float>(f);
                              dev.fill(home, l * wh, 0.f);
                              for (int i = 0; i < n; ++i)
                                dev.add_rows(home + begin(i), wh, in + i * l * ws, ws, ws, l);
                            }});
          break;
        }
        case Op::merge:
          break;
      }
    }
  }
  complete([](Field) { return true; });
  dev.sync();  // the unpacking read `temps`, which go now
}

// The caller's memory a pass reads and writes besides q, k, v and dO: the forward's outputs, or
// the backward's saved forward outputs and its gradients.
struct PassIo {
  float* o = nullptr;
  float* lse = nullptr;
  const float* saved_o = nullptr;
  const float* saved_lse = nullptr;
  const float* dlse = nullptr;  ///< the backward's optional lse gradient (host memory)
  float* dq = nullptr;
  float* dk = nullptr;
  float* dv = nullptr;
};

// One pass of any algorithm, q, k, v and dO in the compute type T in the kernels, the bundles
// and the collectives; D, LSE, outputs and every gradient (on the wire too) fp32.
template <class T, class In>
void execute(Pass pass, View<const In> q, View<const In> k, View<const In> v, View<const In> dout,
             const PassIo& io, const AttentionSpec& spec, const Layout& layout, comm::Group& group,
             AttentionStats* stats) {
  const bool fwd = pass == Pass::forward;
  const Dims dm{layout.local_len(), q.dim(1), k.dim(1), q.dim(2), static_cast<int64_t>(sizeof(T))};
  validate(spec, layout, group.topology(), dm.hq, dm.hkv, dm.d);
  const double scale = spec.scale > 0 ? spec.scale : 1.0 / std::sqrt(static_cast<double>(dm.d));
  const Plan plan = plan_for(spec, layout, group, pass, {dm.hq, dm.hkv});
  const RankSchedule& rs = *plan.rs;
  // Where the work runs: the kernels, the buffers below and the tables they read.
  const std::shared_ptr<ExecDevice> devp = exec_device(spec.device, spec.threads);
  ExecDevice& dev = *devp;
  dev.bind(plan.tables->tokens, spec.mask);
  const bool bq = bundle_is_query(spec.algo, pass);
  const int64_t hq_s = side_hq(rs, dm), hkv_s = side_hkv(rs, dm), l = dm.l, d = dm.d;
  const int64_t rows_q = l * static_cast<int64_t>(rs.q_pieces[rs.member].size());
  const int64_t rows_k = l * static_cast<int64_t>(rs.kv_pieces[rs.member].size());
  double scratch_s = 0;
  double* compute_s = stats ? &stats->compute_s : &scratch_s;

  // Home tensors. The saved inputs are the caller's views; rounding them again in the backward
  // gives the forward's values.
  core::Buffer<std::byte> qkeep, kkeep, vkeep, dkeep;
  Store st(dev);
  // Declared after every buffer of the pass, so destroyed before them: on a GPU, work queued on
  // the rank's stream may still read them when an exception unwinds the pass.
  struct SyncOnExit {
    ExecDevice& dev;
    ~SyncOnExit() {
      try {
        dev.sync();
      } catch (...) {  // already unwinding, or the device failed: its error was reported
      }
    }
  };
  auto set_home = [&](Field f, const void* p) {
    st.home[static_cast<size_t>(f)] = static_cast<std::byte*>(const_cast<void*>(p));
  };
  const BlockShape home_shape{dm.hq, dm.hkv, d, 0, scale};
  set_home(Field::q, compute_input<T, In>(q, dev, qkeep, "q"));
  set_home(Field::k, compute_input<T, In>(k, dev, kkeep, "k"));
  set_home(Field::v, compute_input<T, In>(v, dev, vkeep, "v"));
  float* dvec = nullptr;
  if (fwd) {
    // Rows nothing reaches (padding, rows that see no key, rows after spec.query_rows) keep
    // these values.
    dev.fill(io.o, l * dm.hq * d, 0.f);
    dev.fill(io.lse, l * dm.hq, kNegInf);
    set_home(Field::o, io.o);
    set_home(Field::lse, io.lse);
  } else {
    const T* dop = compute_input<T, In>(dout, dev, dkeep, "do");
    set_home(Field::dout, dop);
    set_home(Field::lse, io.saved_lse);
    // D = rowsum(dO * O) where O lives, so O itself never moves.
    dvec = reinterpret_cast<float*>(st.make(static_cast<size_t>(l * dm.hq) * sizeof(float)));
    {
      core::ScopedTimer t(compute_s);
      dev.compute_d(home_shape, io.saved_o, dop, l, dvec);
      // The lse's own gradient enters as D - dlse (local.hpp); CPU only, checked at entry.
      if (io.dlse != nullptr)
        for (int64_t i = 0; i < l * dm.hq; ++i) dvec[i] -= io.dlse[i];
    }
    set_home(Field::dvec, dvec);
    // The gradients accumulate into these.
    dev.fill(io.dq, l * dm.hq * d, 0.f);
    dev.fill(io.dk, l * dm.hkv * d, 0.f);
    dev.fill(io.dv, l * dm.hkv * d, 0.f);
    set_home(Field::dq, io.dq);
    set_home(Field::dk, io.dk);
    set_home(Field::dv, io.dv);
  }
  st.side = st.home;
  {
    core::ScopedTimer t(stats ? &stats->wait_s : &scratch_s);
    run_collectives(rs.pre, rs, dm, st, group);
  }
  // Ulysses head groups (schedule.hpp): every group's sides, [n*L rows, the group's heads] per
  // field; the home rows of every (group, member) head slice packed for the to_heads sends; the
  // from_heads receives. The pack and the copy of our own slices are local work (compute).
  const int groups = rs.head_groups;
  const int64_t hq_g = hq_s / groups, hkv_g = hkv_s / groups;
  std::vector<std::array<std::byte*, kFields>> gside(groups);
  std::array<std::byte*, kFields> packed{}, back{};
  std::array<bool, kFields> to_f{}, from_f{};
  const int n_u = rs.head_slices, me_u = rs.head_slice;
  const HeadSplit hsplit(dm.hq, dm.hkv, n_u);
  auto g_width = [&](Field f) { return field_width(f, hq_g, hkv_g, d); };
  // First element of member j's heads of group g in a home row of field f.
  auto g_begin = [&](Field f, int j, int g) {
    const int64_t unit = f == Field::lse || f == Field::dvec ? 1 : d;
    return (kv_field(f) ? hsplit.kv_begin(j) + g * hkv_g : hsplit.q_begin(j) + g * hq_g) * unit;
  };
  if (groups > 1) {
    LONGSEQ_CHECK(rs.pre.empty() && rs.post.empty() && hq_s % groups == 0 && hkv_s % groups == 0 &&
                  hsplit.kv_per == hkv_s && !hsplit.replicated);
    for (const HeadBlock& b : rs.head_blocks)
      (b.op == Collective::Op::to_heads ? to_f : from_f)[static_cast<size_t>(b.field)] = true;
    core::ScopedTimer t(compute_s);
    for (size_t fi = 0; fi < kFields; ++fi) {
      if (!to_f[fi]) continue;
      const Field f = static_cast<Field>(fi);
      const int64_t eb = field_bytes(f, dm), wh = field_width(f, dm.hq, dm.hkv, d);
      const int64_t blk = l * g_width(f) * eb;
      packed[fi] = st.make(groups * n_u * blk);
      for (int g = 0; g < groups; ++g) {
        for (int j = 0; j < n_u; ++j)
          dev.copy_rows(packed[fi] + (g * n_u + j) * blk, g_width(f) * eb,
                        st.home_of(f) + g_begin(f, j, g) * eb, wh * eb, g_width(f) * eb, l);
        gside[g][fi] = st.make(n_u * blk);
        dev.copy(gside[g][fi] + me_u * blk, packed[fi] + (g * n_u + me_u) * blk, blk);
      }
    }
    for (int g = 0; g < groups; ++g) {
      auto& sd = gside[g];
      if (fwd) {
        sd[static_cast<size_t>(Field::o)] = st.make(rows_q * hq_g * d * 4);
        sd[static_cast<size_t>(Field::lse)] = st.make(rows_q * hq_g * 4);
        dev.fill(reinterpret_cast<float*>(sd[static_cast<size_t>(Field::lse)]), rows_q * hq_g,
                 kNegInf);
      } else {
        sd[static_cast<size_t>(Field::dq)] = st.make(rows_q * hq_g * d * 4);
        sd[static_cast<size_t>(Field::dk)] = st.make(2 * rows_k * hkv_g * d * 4);
        sd[static_cast<size_t>(Field::dv)] =
            sd[static_cast<size_t>(Field::dk)] + rows_k * hkv_g * d * 4;
      }
    }
    for (size_t fi = 0; fi < kFields; ++fi)
      if (from_f[fi]) back[fi] = st.make(groups * n_u * l * g_width(static_cast<Field>(fi)) * 4);
  }
  auto head_block = [&](const Xfer& x) {
    const HeadBlock& b = rs.head_blocks[x.slot];
    const size_t fi = static_cast<size_t>(b.field);
    const int64_t bytes = head_block_bytes(rs, b, dm);
    const int64_t at = b.group * n_u + b.member;
    std::byte* p = nullptr;
    if (b.op == Collective::Op::to_heads)
      p = x.send ? packed[fi] + at * bytes : gside[b.group][fi] + b.member * bytes;
    else
      p = x.send ? gside[b.group][fi] + b.member * bytes : back[fi] + at * bytes;
    LONGSEQ_CHECK(p != nullptr);
    return std::make_pair(p, static_cast<size_t>(bytes));
  };

  // Output sides: home without collectives, else fresh buffers for this rank's pieces and heads.
  const bool aliased = sides_are_home(rs);
  if (fwd && !aliased && groups == 1) {
    st.side_of(Field::o) = st.make(rows_q * hq_s * d * 4);
    st.side_of(Field::lse) = st.make(rows_q * hq_s * 4);
    dev.fill(st.s<float>(Field::lse), rows_q * hq_s, kNegInf);
  }
  // Backward: dK, dV side contiguous ([dK | dV] is ring's home gradient); dQ side.
  const int64_t kv_side = rows_k * hkv_s * d;
  if (!fwd && groups == 1) {
    st.side_of(Field::dk) = st.make(2 * kv_side * 4);
    st.side_of(Field::dv) = st.side_of(Field::dk) + kv_side * 4;
    if (!aliased) st.side_of(Field::dq) = st.make(rows_q * hq_s * d * 4);
  }

  // Bundles: forward and ring backward [K | V] in T; burst [Q | dO | D | LSE]; grad fp32.
  const BundleLayout bl = data_layout(rs, spec.algo, pass, dm);
  const int64_t gel = grad_elems(rs, spec.algo, pass, dm);
  // A data slot gets memory only when something lands in it or reads it (used_data_slots, which
  // the planner's memory model counts too): at world 1 no [K | V] bundle is allocated.
  std::vector<std::byte*> dslots(static_cast<size_t>(rs.data_slots), nullptr);
  const std::vector<bool> used = used_data_slots(rs, bq);
  for (size_t i = 0; i < dslots.size(); ++i)
    if (used[i]) dslots[i] = st.make(bl.bytes);
  std::vector<float*> gslots;
  for (int i = 0; i < rs.grad_slots; ++i)
    gslots.push_back(reinterpret_cast<float*>(st.make(gel * sizeof(float))));
  const SyncOnExit sync_on_exit{dev};
  // A typed part of data slot i at byte offset `at`.
  auto at_t = [&](int i, size_t at) {
    LONGSEQ_CHECK(dslots[i] != nullptr);
    return reinterpret_cast<T*>(dslots[i] + at);
  };
  auto at_f = [&](int i, size_t at) {
    LONGSEQ_CHECK(dslots[i] != nullptr);
    return reinterpret_cast<float*>(dslots[i] + at);
  };

  // Side transfers (StarTrail's staged initial transfer and its return, schedule.hpp): sends read
  // the sides as they are now (the gathered team K,V; the dK,dV the ring computes); receives land
  // in fresh sides, k and v in place of the gathered ones, dK,dV ([dK | dV], as the side) swapped
  // in before `post`.
  const std::array<std::byte*, kFields> send_from = st.side;
  std::array<std::byte*, kFields> recv_into{};
  std::byte* grads_back = nullptr;
  for (const Xfer& x : rs.xfers) {
    if (x.part != Part::side || x.send) continue;
    const Field f = rs.side_blocks[x.slot].field;
    std::byte*& into = recv_into[static_cast<size_t>(f)];
    if (into) continue;
    if (f == Field::k || f == Field::v) {
      into = st.make(rows_k * hkv_s * d * sizeof(T));
      st.side_of(f) = into;
    } else {
      if (!grads_back) grads_back = st.make(2 * kv_side * 4);
      into = grads_back + (f == Field::dv ? kv_side * 4 : 0);
    }
  }
  auto side_block = [&](const Xfer& x) {
    const SideBlock& b = rs.side_blocks[x.slot];
    const int64_t eb = b.field == Field::k || b.field == Field::v ? sizeof(T) : 4;
    const int64_t ws = field_width(b.field, hq_s, hkv_s, d);
    std::byte* base = (x.send ? send_from : recv_into)[static_cast<size_t>(b.field)];
    LONGSEQ_CHECK(base != nullptr);
    return std::make_pair(base + (b.piece * l + b.row_begin) * ws * eb,
                          static_cast<size_t>(b.rows * ws * eb));
  };
  // The own bundle is packed where it is first needed: a query bundle at step 0; a K,V bundle,
  // which the steps of its origin read from the key side itself, at its first send (in a staged
  // StarTrail forward the key side is complete only then), or never when it is not sent. With
  // head groups each group's ring packs its own slot from the group's sides, at the step shifted
  // by 1 + g K (schedule.hpp).
  const int dslots_g = rs.data_slots / groups;
  std::vector<int> pack_step(groups, -1);
  if (rs.own_slot >= 0) {
    for (int g = 0; g < groups; ++g)
      if (bq) pack_step[g] = groups > 1 ? 1 + g * rs.group_stride : 0;
    for (const Xfer& x : rs.xfers)
      if (!bq && x.send && x.part == Part::data && x.origin == rs.member) {
        int& at = pack_step[x.slot / dslots_g];
        at = at < 0 ? x.post_step : std::min(at, x.post_step);
      }
  }
  // Where the fields of head group g live (-1: the sides, no head groups).
  auto sides = [&](int g) -> std::array<std::byte*, kFields>& {
    return g < 0 ? st.side : gside[g];
  };
  auto pack_own = [&](int g) {
    const int o = rs.own_slot + std::max(g, 0) * dslots_g;
    auto& sd = sides(g);
    const int64_t hq_b = g < 0 ? hq_s : hq_g;
    dev.copy(at_t(o, 0), sd[static_cast<size_t>(bq ? Field::q : Field::k)], bl.second);
    dev.copy(at_t(o, bl.second), sd[static_cast<size_t>(bq ? Field::dout : Field::v)], bl.second);
    if (bq) {
      dev.copy(at_f(o, bl.dvec), sd[static_cast<size_t>(Field::dvec)], rows_q * hq_b * 4);
      dev.copy(at_f(o, bl.lse), sd[static_cast<size_t>(Field::lse)], rows_q * hq_b * 4);
    }
  };
  // The rank's own gradient part (head group g's, or the sides'): dQ for a query bundle, [dK | dV]
  // (contiguous on every side) for a K,V bundle.
  auto home_grad = [&](int g) {
    return reinterpret_cast<float*>(sides(g)[static_cast<size_t>(bq ? Field::dq : Field::dk)]);
  };

  const BlockShape side_shape{hq_s, hkv_s, d, 0, scale};
  // A head group's kernels: the dq chunking of the side's hkv_s heads, for the same bits.
  const BlockShape group_shape{hq_g, hkv_g, d, hkv_s, scale};
  Transport tr(group, tag_base(pass), stats);
  // Rows past spec.query_rows are not asked for (forward, where the query side is home).
  const int64_t q_rows =
      fwd && aliased && spec.query_rows >= 0 ? std::min(spec.query_rows, l) : rows_q;
  // The chunk pairs of one Work item over operands laid out [rows, heads, D] (rows of every piece
  // back to back, L each): a head group's sides, a bundle, or this rank's sides. The forward reads
  // q, k, v and merges into o, lse_out; the backward reads q, k, v, dout, lse, dvec and adds into
  // dq, dk, dv. qm, km: the members whose pieces the query and key rows are.
  struct Operands {
    const BlockShape* shape;
    int64_t hq, hkv;
    int qm, km;
    const T *q, *k, *v, *dout;
    const float *lse, *dvec;
    float *o, *lse_out;
    float *dq, *dk, *dv;
  };
  auto run_pairs = [&](const Work& w, const Operands& x) {
    for (const SubPair& p : w.pairs) {
      const int qr = rs.q_pieces[x.qm][p.qp], kr = rs.kv_pieces[x.km][p.kp];
      const Chunk& qc = layout.chunks(qr)[p.qc];
      const Chunk& kc = layout.chunks(kr)[p.kc];
      const int64_t qrow = p.qp * l + qc.local_begin, krow = p.kp * l + kc.local_begin;
      const int64_t qo = qrow * x.hq * d, ro = qrow * x.hq, ko = krow * x.hkv * d;
      const kernels::Tokens qt = dev.tokens(qr, qc.local_begin);
      const kernels::Tokens kt = dev.tokens(kr, kc.local_begin);
      if (fwd) {
        // Rows past q_rows are not asked for; a chunk without rows is no pair.
        const int64_t q_len = std::clamp<int64_t>(q_rows - qrow, 0, qc.len);
        if (q_len == 0) continue;
        dev.forward_merge(*x.shape, x.q + qo, qt, q_len, x.k + ko, x.v + ko, kt, kc.len, x.o + qo,
                          x.lse_out + ro);
      } else {
        dev.backward(*x.shape, x.q + qo, x.k + ko, x.v + ko, x.dout + qo, x.lse + ro, x.dvec + ro,
                     qt, qc.len, kt, kc.len, x.dq + qo, x.dk + ko, x.dv + ko);
      }
      if (stats) ++stats->pairs;
    }
  };
  size_t wi = 0, ai = 0;
  for (int s = 0; s < rs.num_steps; ++s) {
    tr.wait_step(s);
    {
      core::ScopedTimer t(compute_s);
      for (; ai < rs.accumulates.size() && rs.accumulates[ai].step == s; ++ai) {
        const Accumulate& a = rs.accumulates[ai];
        float* into = a.into < 0 ? home_grad(groups > 1 ? a.head_group : -1) : gslots[a.into];
        dev.add(into, gslots[a.from], gel);
      }
    }
    for (int g = 0; g < groups; ++g)
      if (s == pack_step[g]) pack_own(groups > 1 ? g : -1);
    // What the transfers of this step send is complete, and what they receive into is no longer
    // read, before comm sees them (on a GPU the earlier steps' work may still be queued).
    bool synced = false;
    for (const Xfer& x : rs.xfers)
      if (x.post_step == s) {
        if (!synced) dev.sync();
        synced = true;
        if (x.part == Part::data) {
          tr.post(x, dslots[x.slot], bl.bytes);
        } else if (x.part == Part::grad) {
          tr.post(x, gslots[x.slot], gel * sizeof(float));
        } else if (x.part == Part::heads) {
          const auto [ptr, bytes] = head_block(x);
          tr.post(x, ptr, bytes);
        } else {
          const auto [ptr, bytes] = side_block(x);
          tr.post(x, ptr, bytes);
        }
      }
    if (wi >= rs.work.size() || rs.work[wi].step != s) continue;
    core::ScopedTimer t(compute_s);
    const Work& w = rs.work[wi++];
    const int g = w.head_group;
    auto& sd = sides(g);
    auto in = [&](Field f) { return reinterpret_cast<const T*>(sd[static_cast<size_t>(f)]); };
    auto f32 = [&](Field f) { return reinterpret_cast<float*>(sd[static_cast<size_t>(f)]); };
    const BlockShape* wops = g < 0 ? &side_shape : &group_shape;
    const int64_t hq_w = g < 0 ? hq_s : hq_g, hkv_w = g < 0 ? hkv_s : hkv_g;
    if (w.slot < 0) {  // one head group on its own sides (the own bundle, never sent)
      LONGSEQ_CHECK(g >= 0);
      run_pairs(w, {wops, hq_w, hkv_w, rs.member, rs.member, in(Field::q), in(Field::k),
                    in(Field::v), in(Field::dout), f32(Field::lse), f32(Field::dvec), f32(Field::o),
                    f32(Field::lse), f32(Field::dq), f32(Field::dk), f32(Field::dv)});
      continue;
    }
    float* gout = w.grad_slot < 0 ? home_grad(g) : gslots[w.grad_slot];
    if (w.grad_slot >= 0 && w.clear_grad) dev.fill(gout, gel, 0.0f);
    const int b = w.slot;
    // A K,V bundle's own steps read the key side (the same values the own slot holds once packed).
    const bool own_kv = !bq && w.origin == rs.member;
    const int qm = bq ? w.origin : rs.member, km = bq ? rs.member : w.origin;
    if (bq) {
      // (A backward: bundle_is_query.) Queries (and dO, D, LSE) from the bundle, keys from the
      // key side; dQ into the bundle's gradient.
      run_pairs(w, {wops, hq_w, hkv_w, qm, km, at_t(b, 0), in(Field::k), in(Field::v),
                    at_t(b, bl.second), at_f(b, bl.lse), at_f(b, bl.dvec), nullptr, nullptr, gout,
                    f32(Field::dk), f32(Field::dv)});
    } else {
      // Queries from the query side, keys from the bundle; dK, dV into the bundle's gradient
      // (forward: O, LSE into the query side).
      run_pairs(w, {wops, hq_w, hkv_w, qm, km, in(Field::q), own_kv ? in(Field::k) : at_t(b, 0),
                    own_kv ? in(Field::v) : at_t(b, bl.second), in(Field::dout), f32(Field::lse),
                    f32(Field::dvec), f32(Field::o), f32(Field::lse), f32(Field::dq), gout,
                    fwd ? nullptr : gout + rows_k * hkv_w * d});
    }
  }
  tr.wait_all();
  if (grads_back) {  // the gradients of our team's shards that the other ranks computed
    st.side_of(Field::dk) = grads_back;
    st.side_of(Field::dv) = grads_back + kv_side * 4;
  }
  if (stats) stats->steps += rs.num_steps;
  if (groups > 1) {  // from_heads: every group's outputs home, as the all-to-all's unpack does
    core::ScopedTimer t(compute_s);
    for (size_t fi = 0; fi < kFields; ++fi) {
      if (!from_f[fi]) continue;
      const Field f = static_cast<Field>(fi);
      const int64_t wh = field_width(f, dm.hq, dm.hkv, d), ws = g_width(f);
      float* home = st.h<float>(f);
      dev.fill(home, l * wh, 0.f);
      for (int i = 0; i < n_u; ++i)
        for (int g = 0; g < groups; ++g) {
          const float* in = reinterpret_cast<const float*>(
              i == me_u ? gside[g][fi] + i * l * ws * 4 : back[fi] + (g * n_u + i) * l * ws * 4);
          dev.add_rows(home + g_begin(f, i, g), wh, in, ws, ws, l);
        }
    }
  }
  {
    core::ScopedTimer t(stats ? &stats->wait_s : &scratch_s);
    run_collectives(rs.post, rs, dm, st, group);
  }
  if (!fwd && aliased) {
    dev.copy(io.dk, st.s<float>(Field::dk), kv_side * sizeof(float));
    dev.copy(io.dv, st.s<float>(Field::dv), kv_side * sizeof(float));
  }
  dev.sync();  // the outputs are complete when the call returns (design: "the call blocks")
}

template <class In>
void check_shapes(View<const In> q, View<const In> k, View<const In> v, const Layout& layout,
                  int rank) {
  const int64_t l = layout.local_len();
  core::require(q.rank() == 3 && k.rank() == 3 && v.rank() == 3, "attention",
                "q, k, v must be [L, H, D]");
  core::require(q.dim(0) == l && k.dim(0) == l && v.dim(0) == l, "attention", "rank ", rank,
                " holds ", q.dim(0), "/", k.dim(0), "/", v.dim(0),
                " q/k/v tokens, the layout gives ", l);
  core::require(k.shape() == v.shape() && k.dim(2) == q.dim(2), "attention", "k ", k.shape().str(),
                " and v ", v.shape().str(), " must match and share D with q ", q.shape().str());
}

}  // namespace

void prepare(const AttentionSpec& spec, const Layout& layout, comm::Group& group) {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    const Plan plan = plan_for(spec, layout, group, pass, {});
    for (const auto* list : {&plan.rs->pre, &plan.rs->post})
      for (const Collective& c : *list)
        if (!c.members.empty()) sub_group(c, group);
  }
}

namespace {

// An output of a pass: `what` of `shape`, contiguous.
float* output(View<float> x, const core::Shape& shape, const char* what) {
  core::require(x.shape() == shape, "attention", what, " has shape ", x.shape().str(),
                ", expected ", shape.str());
  core::require(x.is_contiguous(), "attention", what, " ", x.shape().str(), " must be contiguous");
  return x.data();
}

// A tensor for an output on the executor's device, overwritten whole by the pass.
Tensor<float> output_tensor(core::Shape shape, const AttentionSpec& spec, const char* name) {
  return spec.device.is_cpu() ? Tensor<float>(shape, core::Uninit{})
                              : Tensor<float>(shape, spec.device, core::Uninit{}, name);
}

template <class In, class... Args>
void execute_in(core::DType precision, Args&&... args) {
  validate_precision(precision);
  if (precision == core::DType::bf16)
    execute<core::bf16, In>(std::forward<Args>(args)...);
  else
    execute<float, In>(std::forward<Args>(args)...);
}

// bf16 views are the caller's host memory: a pass that widens them (an fp32 pass, the backward's
// saved o) does so on the CPU, and no device executor has been run on them.
template <class In>
void check_input_device(const AttentionSpec& spec) {
  if constexpr (std::is_same_v<In, core::bf16>)
    core::require(spec.device.is_cpu(), "attention",
                  "bf16 q, k, v are taken on the CPU executor only, not on ", spec.device.str(),
                  " (pass fp32 views with precision bf16)");
}

template <class In>
void forward_into(View<const In> q, View<const In> k, View<const In> v, const AttentionSpec& spec,
                  const Layout& layout, comm::Group& group, View<float> o, View<float> lse,
                  AttentionStats* stats) {
  check_shapes(q, k, v, layout, group.rank());
  check_input_device<In>(spec);
  PassIo io;
  io.o = output(o, q.shape(), "o");
  io.lse = output(lse, core::Shape{q.dim(0), q.dim(1)}, "lse");
  execute_in<In>(spec.precision, Pass::forward, q, k, v, View<const In>{}, io, spec, layout, group,
                 stats);
}

template <class In>
void backward_into(View<const In> dout, View<const In> q, View<const In> k, View<const In> v,
                   View<const In> o, View<const float> lse, const AttentionSpec& spec,
                   const Layout& layout, comm::Group& group, View<float> dq, View<float> dk,
                   View<float> dv, AttentionStats* stats, View<const float> dlse) {
  check_shapes(q, k, v, layout, group.rank());
  check_input_device<In>(spec);
  core::require(dout.shape() == q.shape(), "attention", "do ", dout.shape().str(), " must match q ",
                q.shape().str());
  const core::Shape lse_shape{q.dim(0), q.dim(1)};
  core::require(o.shape() == q.shape() && o.is_contiguous(), "attention", "the saved o ",
                o.shape().str(), " must be a contiguous ", q.shape().str());
  core::require(lse.shape() == lse_shape && lse.is_contiguous(), "attention", "the saved lse ",
                lse.shape().str(), " must be a contiguous ", lse_shape.str());
  if (dlse.data() != nullptr) {
    core::require(dlse.shape() == lse_shape && dlse.is_contiguous(), "attention", "dlse ",
                  dlse.shape().str(), " must be a contiguous ", lse_shape.str());
    core::require(spec.device.is_cpu(), "attention",
                  "a gradient with respect to lse is taken on "
                  "the CPU only, not on ",
                  spec.device.str(), " (the loss may use o, not lse)");
  }
  PassIo io;
  io.dlse = dlse.data();
  // D = rowsum(dO * O) reads an fp32 O: a bf16 o (what the caller kept of the forward's) is
  // widened, exactly, once.
  core::Buffer<float> o32;
  if constexpr (std::is_same_v<In, float>) {
    io.saved_o = o.data();
  } else {
    o32 = core::Buffer<float>(static_cast<size_t>(o.numel()), core::Uninit{});
    core::bf16_to_f32(o.data(), o32.data(), static_cast<size_t>(o.numel()));
    io.saved_o = o32.data();
  }
  io.saved_lse = lse.data();
  io.dq = output(dq, q.shape(), "dq");
  io.dk = output(dk, k.shape(), "dk");
  io.dv = output(dv, v.shape(), "dv");
  execute_in<In>(spec.precision, Pass::backward, q, k, v, dout, io, spec, layout, group, stats);
}

}  // namespace

void distributed_attention_forward_into(View<const float> q, View<const float> k,
                                        View<const float> v, const AttentionSpec& spec,
                                        const Layout& layout, comm::Group& group, View<float> o,
                                        View<float> lse, AttentionStats* stats) {
  forward_into(q, k, v, spec, layout, group, o, lse, stats);
}

void distributed_attention_forward_into(View<const core::bf16> q, View<const core::bf16> k,
                                        View<const core::bf16> v, const AttentionSpec& spec,
                                        const Layout& layout, comm::Group& group, View<float> o,
                                        View<float> lse, AttentionStats* stats) {
  forward_into(q, k, v, spec, layout, group, o, lse, stats);
}

void distributed_attention_backward_into(View<const float> dout, View<const float> q,
                                         View<const float> k, View<const float> v,
                                         View<const float> o, View<const float> lse,
                                         const AttentionSpec& spec, const Layout& layout,
                                         comm::Group& group, View<float> dq, View<float> dk,
                                         View<float> dv, AttentionStats* stats,
                                         View<const float> dlse) {
  backward_into(dout, q, k, v, o, lse, spec, layout, group, dq, dk, dv, stats, dlse);
}

void distributed_attention_backward_into(View<const core::bf16> dout, View<const core::bf16> q,
                                         View<const core::bf16> k, View<const core::bf16> v,
                                         View<const core::bf16> o, View<const float> lse,
                                         const AttentionSpec& spec, const Layout& layout,
                                         comm::Group& group, View<float> dq, View<float> dk,
                                         View<float> dv, AttentionStats* stats,
                                         View<const float> dlse) {
  backward_into(dout, q, k, v, o, lse, spec, layout, group, dq, dk, dv, stats, dlse);
}

AttentionSaved distributed_attention_forward(View<const float> q, View<const float> k,
                                             View<const float> v, const AttentionSpec& spec,
                                             const Layout& layout, comm::Group& group,
                                             AttentionStats* stats) {
  check_shapes(q, k, v, layout, group.rank());  // before q.dim(1) below
  AttentionSaved saved;
  saved.q = q;
  saved.k = k;
  saved.v = v;
  saved.o = output_tensor(q.shape(), spec, "attention o");
  saved.lse = output_tensor(core::Shape{q.dim(0), q.dim(1)}, spec, "attention lse");
  distributed_attention_forward_into(q, k, v, spec, layout, group, saved.o.view(), saved.lse.view(),
                                     stats);
  return saved;
}

AttentionGrads distributed_attention_backward(View<const float> dout, const AttentionSaved& saved,
                                              const AttentionSpec& spec, const Layout& layout,
                                              comm::Group& group, AttentionStats* stats) {
  AttentionGrads g;
  g.dq = output_tensor(saved.q.shape(), spec, "attention dq");
  g.dk = output_tensor(saved.k.shape(), spec, "attention dk");
  g.dv = output_tensor(saved.v.shape(), spec, "attention dv");
  distributed_attention_backward_into(dout, saved.q, saved.k, saved.v, saved.o.view(),
                                      saved.lse.view(), spec, layout, group, g.dq.view(),
                                      g.dk.view(), g.dv.view(), stats);
  return g;
}

}  // namespace longseq::attention
