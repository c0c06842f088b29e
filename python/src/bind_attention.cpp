// longseq._core: masks, attention in one process (whole sequences, as autograd's two halves), and
// the distributed attention of P ranks as threads of this process (what `longseq attention`
// computes).
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "bindings.hpp"
#include "device.hpp"
#include "longseq/attention/harness.hpp"
#include "longseq/attention/local.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/threads.hpp"

namespace longseq::python {

using core::DType;

int rank_threads(int threads, int ranks_on_host) {
  // Far past any host's cores, and where thread creation would start to fail inside OpenMP (an
  // abort, not an error).
  if (threads < 0 || threads > kMaxThreads)
    value_error("threads ", threads, " must be in [0, ", kMaxThreads, "] (0: the host's cores)");
  return core::default_threads(threads, ranks_on_host);
}

// q, k, v of one call: [T, H, D] or [B, T, H, D], one dtype (f32 | bf16), contiguous, one device.
Qkv check_qkv(const char* fn, const Array& q, const Array& k, const Array& v) {
  q.need_dtype(fn, {DType::f32, DType::bf16});
  same_dtype(fn, {&q, &k, &v});
  same_device(fn, {&q, &k, &v});
  if (q.rank() != 3 && q.rank() != 4)
    value_error(fn, ": q has shape ", q.shape_str(), ", expected [T, Hq, D] or [B, T, Hq, D]");
  Qkv r;
  r.batched = q.rank() == 4;
  const int o = r.batched ? 1 : 0;
  r.dims.batch = r.batched ? q.shape[0] : 1;
  r.dims.tokens = q.shape[o];
  r.dims.hq = q.shape[o + 1];
  r.dims.d = q.shape[o + 2];
  k.need_rank(fn, q.rank());
  r.dims.hkv = k.shape[o + 1];
  r.q_shape = q.shape;
  r.kv_shape = q.shape;
  r.kv_shape[o + 1] = r.dims.hkv;
  k.need_shape(fn, r.kv_shape);
  v.need_shape(fn, r.kv_shape);
  r.lse_shape.assign(q.shape.begin(), q.shape.end() - 1);
  r.dims.validate();
  for (const Array* a : {&q, &k, &v}) a->need_contiguous(fn);
  return r;
}

void check_out(const char* fn, const Array& a, const std::vector<int64_t>& shape, DType dtype,
               const Array& like) {
  a.need_shape(fn, shape).need_dtype(fn, {dtype}).need_contiguous(fn);
  same_device(fn, {&like, &a});
}

std::optional<Array> lse_grad(const char* fn, const py::object& dlse, const Qkv& d, const Array& q,
                              const std::vector<const Array*>& grads, Stream stream) {
  if (dlse.is_none()) return std::nullopt;
  Array a = from_python(fn, dlse, "dlse", stream);
  check_out(fn, a, d.lse_shape, DType::f32, q);
  no_overlap(fn, grads, {&a});
  return a;
}

void check_mask(const char* fn, const PyMask& m, int64_t tokens, int64_t batch) {
  if (m.n != tokens)
    value_error(fn, ": the mask is over ", m.n, " tokens, the sequences have ", tokens);
  if (m.specs.size() != 1 && static_cast<int64_t>(m.specs.size()) != batch)
    value_error(fn, ": the mask has document ids for ", m.specs.size(),
                " sequences, the batch has ", batch);
}

// The kernels' precision: "auto" is the tensors' dtype; host tensors take no other (their kernels
// read them as they are), GPU ones (float32, device.hpp) may ask for bf16.
DType kernel_precision(const char* fn, const std::string& precision, const Array& q) {
  if (precision == "auto") return q.dtype;
  const DType p = core::parse_precision(precision, "attention");
  if (q.device.is_cpu() && p != q.dtype)
    value_error(fn, ": precision ", precision, " for ", dtype_str(q.dtype),
                " host tensors: pass the tensors in the precision to compute in");
  return p;
}

// Scales are checked here for every path (the executor trusts its spec).
void check_scale(const char* fn, double scale) {
  if (!std::isfinite(scale) || scale < 0)
    value_error(fn, ": softmax_scale ", scale, " must be finite and >= 0 (0 or None: 1/sqrt(D))");
}

namespace {

constexpr const char* kMask = "longseq.Mask";

// Seconds the latest attention_forward / attention_backward of this process spent inside the
// engine's call (the GIL released around it): what a C++ caller of the same function would have
// waited. A Python caller's wall time minus this, call by call, is the binding's overhead with the
// machine's noise on the kernel cancelled (bench/python_attention.py). Two clock reads a call.
std::atomic<double> g_engine_forward_s{0}, g_engine_backward_s{0};

// Runs f, storing its seconds into `into`.
template <class F>
void timed(std::atomic<double>& into, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  into.store(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
             std::memory_order_relaxed);
}

// Integer ids of `a` (int32 or int64, host memory, contiguous) as int64.
std::vector<int64_t> host_ints(const Array& a, const char* fn) {
  a.need_dtype(fn, {DType::i32, DType::i64}).need_contiguous(fn).need_host(fn);
  std::vector<int64_t> out(static_cast<size_t>(a.numel()));
  if (a.dtype == DType::i32)
    std::copy(a.ptr<int32_t>(), a.ptr<int32_t>() + a.numel(), out.begin());
  else
    std::copy(a.ptr<int64_t>(), a.ptr<int64_t>() + a.numel(), out.begin());
  return out;
}

PyMask make_mask(const std::string& text, int64_t n, const py::object& doc_ids,
                 const py::object& cu_seqlens, const py::object& block_mask, int64_t block_size) {
  if (n < 1) value_error(kMask, ": sequence length ", n, " must be >= 1");
  attention::MaskSpec base = attention::MaskSpec::parse(text, false, n);
  const bool has_docs = !doc_ids.is_none(), has_cu = !cu_seqlens.is_none();
  if (has_docs && has_cu) value_error(kMask, ": give doc_ids or cu_seqlens, not both");
  if ((has_docs || has_cu) && !base.doc_ids.empty())
    value_error(kMask, ": '", text, "' has document ids already; doc_ids/cu_seqlens add more");
  std::vector<std::vector<int32_t>> rows;
  if (has_docs) {
    const Array a = from_python(kMask, doc_ids, "doc_ids");
    if (!(a.rank() == 1 && a.shape[0] == n) &&
        !(a.rank() == 2 && a.shape[1] == n && a.shape[0] > 0))
      value_error(kMask, ": doc_ids has shape ", a.shape_str(), ", expected [", n, "] or [B, ", n,
                  "] for ", n, " tokens");
    const std::vector<int64_t> ids = host_ints(a, kMask);
    for (int64_t id : ids)
      if (id < std::numeric_limits<int32_t>::min() || id > std::numeric_limits<int32_t>::max())
        value_error(kMask, ": document id ", id, " does not fit 32 bits");
    const int64_t b = a.rank() == 2 ? a.shape[0] : 1;
    for (int64_t r = 0; r < b; ++r)
      rows.emplace_back(ids.begin() + r * n, ids.begin() + (r + 1) * n);
  }
  if (has_cu) {
    const Array a = from_python(kMask, cu_seqlens, "cu_seqlens");
    a.need_rank(kMask, 1);
    rows.push_back(attention::MaskSpec::documents_from_offsets(host_ints(a, kMask), n));
  }
  if (!block_mask.is_none()) {
    if (!base.block_mask.empty()) value_error(kMask, ": '", text, "' has a block mask already");
    if (block_size < 1) value_error(kMask, ": block_mask needs block_size >= 1, got ", block_size);
    const Array a = from_python(kMask, block_mask, "block_mask");
    a.need_dtype(kMask, {DType::u8, DType::boolean}).need_contiguous(kMask).need_host(kMask);
    const int64_t nb = (n + block_size - 1) / block_size;
    a.need_shape(kMask, {nb, nb});
    base.block_size = block_size;
    base.num_blocks = nb;
    base.block_mask.assign(a.ptr<uint8_t>(), a.ptr<uint8_t>() + a.numel());
    // A bool or uint8 byte that is not 0 is visible; the kernels test != 0 too.
  } else if (block_size != 0 && base.block_mask.empty()) {
    value_error(kMask, ": block_size ", block_size, " without a block_mask");
  }
  PyMask m;
  m.n = n;
  m.text = text;
  if (rows.empty()) {
    base.validate(n);
    m.specs.push_back(std::make_shared<const attention::MaskSpec>(std::move(base)));
  }
  for (auto& row : rows) {
    attention::MaskSpec s = base;
    s.doc_ids = std::move(row);
    s.causal = true;  // the grammar's document term implies causal (mask_spec.hpp)
    s.validate(n);
    m.specs.push_back(std::make_shared<const attention::MaskSpec>(std::move(s)));
  }
  return m;
}

std::vector<const attention::MaskSpec*> raw(const PyMask& m) {
  std::vector<const attention::MaskSpec*> out;
  for (const auto& s : m.specs) out.push_back(s.get());
  return out;
}

void attention_forward(const py::object& q_, const py::object& k_, const py::object& v_,
                       const py::object& o_, const py::object& lse_, const PyMask& mask,
                       double scale, int threads, const std::string& precision) {
  constexpr const char* fn = "longseq.attention.forward";
  const Stream s = kLegacyStream;
  const Array q = from_python(fn, q_, "q", s), k = from_python(fn, k_, "k", s),
              v = from_python(fn, v_, "v", s);
  const Qkv d = check_qkv(fn, q, k, v);
  const Array o = from_python(fn, o_, "o", s), lse = from_python(fn, lse_, "lse", s);
  check_out(fn, o, d.q_shape, q.dtype, q);
  check_out(fn, lse, d.lse_shape, DType::f32, q);
  no_overlap(fn, {&o, &lse}, {&q, &k, &v});
  check_mask(fn, mask, d.dims.tokens, d.dims.batch);
  check_scale(fn, scale);
  const DType p = kernel_precision(fn, precision, q);
  if (!q.device.is_cpu()) {
    device_attention_forward(q, k, v, o, lse, d.dims, mask, scale, p);
    return;
  }
  const int t = rank_threads(threads, 1);
  const std::vector<const attention::MaskSpec*> masks = raw(mask);
  py::gil_scoped_release nogil;
  timed(g_engine_forward_s, [&] {
    attention::local_attention_forward(q.data, k.data, v.data, q.dtype, d.dims, masks, scale, t,
                                       o.data, lse.ptr<float>());
  });
}

// The tensors of a backward call taken in and checked, in argument order (the first bad one is
// the one named): q, k, v; do, o, lse like them; dq, dk, dv outputs that overlap no input.
// attention_backward's intake, and time_local_attention's.
struct BackwardIo {
  Array q, k, v, dout, o, lse, dq, dk, dv;
  Qkv d;
};
BackwardIo backward_io(const char* fn, const py::object& do_, const py::object& q_,
                       const py::object& k_, const py::object& v_, const py::object& o_,
                       const py::object& lse_, const py::object& dq_, const py::object& dk_,
                       const py::object& dv_) {
  const Stream s = kLegacyStream;
  BackwardIo a;
  a.q = from_python(fn, q_, "q", s);
  a.k = from_python(fn, k_, "k", s);
  a.v = from_python(fn, v_, "v", s);
  a.d = check_qkv(fn, a.q, a.k, a.v);
  a.dout = from_python(fn, do_, "do", s);
  a.o = from_python(fn, o_, "o", s);
  a.lse = from_python(fn, lse_, "lse", s);
  check_out(fn, a.dout, a.d.q_shape, a.q.dtype, a.q);
  check_out(fn, a.o, a.d.q_shape, a.q.dtype, a.q);
  check_out(fn, a.lse, a.d.lse_shape, DType::f32, a.q);
  a.dq = from_python(fn, dq_, "dq", s);
  a.dk = from_python(fn, dk_, "dk", s);
  a.dv = from_python(fn, dv_, "dv", s);
  check_out(fn, a.dq, a.d.q_shape, a.q.dtype, a.q);
  check_out(fn, a.dk, a.d.kv_shape, a.q.dtype, a.q);
  check_out(fn, a.dv, a.d.kv_shape, a.q.dtype, a.q);
  no_overlap(fn, {&a.dq, &a.dk, &a.dv}, {&a.q, &a.k, &a.v, &a.dout, &a.o, &a.lse});
  return a;
}

void attention_backward(const py::object& do_, const py::object& q_, const py::object& k_,
                        const py::object& v_, const py::object& o_, const py::object& lse_,
                        const py::object& dq_, const py::object& dk_, const py::object& dv_,
                        const PyMask& mask, double scale, int threads, const std::string& precision,
                        const py::object& dlse_) {
  constexpr const char* fn = "longseq.attention.backward";
  const BackwardIo a = backward_io(fn, do_, q_, k_, v_, o_, lse_, dq_, dk_, dv_);
  const Qkv& d = a.d;
  const std::optional<Array> dlse =
      lse_grad(fn, dlse_, d, a.q, {&a.dq, &a.dk, &a.dv}, kLegacyStream);
  // device_attention_backward takes no dlse (the GPU executor has no op for it): refuse here.
  if (dlse && !a.q.device.is_cpu())
    value_error(fn, ": dlse is on ", a.q.device.str(),
                ": a gradient with respect to lse is taken on the CPU only (a loss on GPU "
                "tensors may use o, not lse)");
  check_mask(fn, mask, d.dims.tokens, d.dims.batch);
  check_scale(fn, scale);
  const DType p = kernel_precision(fn, precision, a.q);
  if (!a.q.device.is_cpu()) {
    device_attention_backward(a.dout, a.q, a.k, a.v, a.o, a.lse, a.dq, a.dk, a.dv, d.dims, mask,
                              scale, p);
    return;
  }
  const int t = rank_threads(threads, 1);
  const std::vector<const attention::MaskSpec*> masks = raw(mask);
  py::gil_scoped_release nogil;
  timed(g_engine_backward_s, [&] {
    attention::local_attention_backward(
        a.dout.data, a.q.data, a.k.data, a.v.data, a.o.data, a.lse.ptr<float>(), a.q.dtype, d.dims,
        masks, scale, t, a.dq.data, a.dk.data, a.dv.data, dlse ? dlse->ptr<float>() : nullptr);
  });
}

// bench/python_attention.py's in-process reference: the C++ calls that longseq.attention.forward
// and backward make (local_attention_*), timed in C++ around the calls alone, in the caller's
// process and on its tensors, so a Python call and this one can alternate under one load. The
// outputs are overwritten; seconds of the forward and of forward + backward.
std::pair<double, double> time_local_attention(const py::object& q_, const py::object& k_,
                                               const py::object& v_, const py::object& do_,
                                               const py::object& o_, const py::object& lse_,
                                               const py::object& dq_, const py::object& dk_,
                                               const py::object& dv_, const PyMask& mask,
                                               int threads) {
  constexpr const char* fn = "longseq._core.time_local_attention";
  const BackwardIo a = backward_io(fn, do_, q_, k_, v_, o_, lse_, dq_, dk_, dv_);
  a.q.need_host(fn);
  // The forward writes o and lse, which the backward then reads.
  no_overlap(fn, {&a.o, &a.lse}, {&a.q, &a.k, &a.v, &a.dout});
  check_mask(fn, mask, a.d.dims.tokens, a.d.dims.batch);
  const int t = rank_threads(threads, 1);
  const std::vector<const attention::MaskSpec*> masks = raw(mask);
  py::gil_scoped_release nogil;
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  attention::local_attention_forward(a.q.data, a.k.data, a.v.data, a.q.dtype, a.d.dims, masks, 0.0,
                                     t, a.o.data, a.lse.ptr<float>());
  const auto t1 = clock::now();
  attention::local_attention_backward(a.dout.data, a.q.data, a.k.data, a.v.data, a.o.data,
                                      a.lse.ptr<float>(), a.q.dtype, a.d.dims, masks, 0.0, t,
                                      a.dq.data, a.dk.data, a.dv.data, nullptr);
  const auto t2 = clock::now();
  return {std::chrono::duration<double>(t1 - t0).count(),
          std::chrono::duration<double>(t2 - t0).count()};
}

// `longseq attention` in this process: P ranks as threads, global tensors in and out.
std::string attention_distributed(const py::object& q_, const py::object& k_, const py::object& v_,
                                  const py::object& do_, const py::object& o_,
                                  const py::object& lse_, const py::object& dq_,
                                  const py::object& dk_, const py::object& dv_, const PyMask& mask,
                                  int world, const std::string& algo, const std::string& balance,
                                  int nodes, const std::string& link, const std::string& precision,
                                  int threads, bool head_groups, double scale, double timeout) {
  constexpr const char* fn = "longseq.attention.distributed";
  const Array q = from_python(fn, q_, "q"), k = from_python(fn, k_, "k"),
              v = from_python(fn, v_, "v");
  q.need_dtype(fn, {DType::f32});
  q.need_rank(fn, 3);
  const Qkv d = check_qkv(fn, q, k, v);
  if (!q.device.is_cpu()) value_error(fn, ": runs on host tensors; q is on ", q.device.str());
  const bool backward = !do_.is_none();
  std::optional<Array> dout, dq, dk, dv;
  const Array o = from_python(fn, o_, "o"), lse = from_python(fn, lse_, "lse");
  check_out(fn, o, d.q_shape, DType::f32, q);
  check_out(fn, lse, d.lse_shape, DType::f32, q);
  std::vector<const Array*> outs = {&o, &lse};
  if (backward) {
    dout = from_python(fn, do_, "do");
    check_out(fn, *dout, d.q_shape, DType::f32, q);
    dq = from_python(fn, dq_, "dq");
    dk = from_python(fn, dk_, "dk");
    dv = from_python(fn, dv_, "dv");
    check_out(fn, *dq, d.q_shape, DType::f32, q);
    check_out(fn, *dk, d.kv_shape, DType::f32, q);
    check_out(fn, *dv, d.kv_shape, DType::f32, q);
    outs.insert(outs.end(), {&*dq, &*dk, &*dv});
  }
  std::vector<const Array*> ins = {&q, &k, &v};
  if (backward) ins.push_back(&*dout);
  no_overlap(fn, outs, ins);
  check_mask(fn, mask, d.dims.tokens, 1);
  if (world < 1 || world > kMaxThreads)
    value_error(fn, ": world ", world, " must be in [1, ", kMaxThreads,
                "] (its ranks are threads of this process)");
  if (nodes < 0) value_error(fn, ": nodes ", nodes, " must be >= 0");
  if (!(timeout > 0)) value_error(fn, ": timeout ", timeout, " s must be positive");
  check_scale(fn, scale);

  attention::AttentionSpec spec;
  spec.algo = attention::Algorithm::parse(algo);
  spec.mask = mask.specs.front();
  spec.scale = scale;
  spec.threads = rank_threads(threads, world);
  spec.precision = core::parse_precision(precision, "attention");
  spec.head_groups = head_groups;
  const attention::Layout layout(attention::parse_balance(balance), d.dims.tokens, world,
                                 mask.specs.front()->block_size);
  comm::Options opt;
  opt.backend = "local";
  opt.world = world;
  opt.nodes = nodes;
  opt.link = comm::LinkModel::parse(link);
  opt.timeout_s = timeout;
  // Everything the ranks check before communicating, checked here once, so a bad combination is
  // one error rather than every rank's.
  spec.algo.validate(world, d.dims.hq, d.dims.hkv);
  if (nodes > 0 && world % nodes != 0)
    value_error(fn, ": nodes ", nodes, " must divide world ", world);
  attention::validate(spec, layout, comm::Topology::declared(world, nodes == 0 ? 1 : nodes),
                      d.dims.hq, d.dims.hkv, d.dims.d);
  attention::GlobalViews in{q.view<const float>(), k.view<const float>(), v.view<const float>(),
                            backward ? dout->view<const float>() : core::View<const float>{}};
  attention::HarnessOutputs into{o.view<float>(), lse.view<float>(),
                                 backward ? dq->view<float>() : core::View<float>{},
                                 backward ? dk->view<float>() : core::View<float>{},
                                 backward ? dv->view<float>() : core::View<float>{}};
  nlohmann::json ranks;
  {
    py::gil_scoped_release nogil;
    comm::run_local(opt, [&](comm::Group& g) {
      attention::HarnessRun run = attention::run_harness(in, spec, layout, g, &into);
      if (g.rank() != 0) return;
      ranks = nlohmann::json::array();
      for (const attention::RankRecord& r : run.ranks) ranks.push_back(r.to_json(backward));
    });
  }
  const attention::AttentionWork w =
      attention::attention_work(*spec.mask, d.dims.tokens, d.dims.hq, d.dims.d);
  return nlohmann::json{{"ranks", ranks},
                        {"visible_pairs", w.visible_pairs},
                        {"forward_flops", w.forward_flops},
                        {"backward_flops", w.backward_flops},
                        {"algo", spec.algo.name()},
                        {"balance", std::string(attention::balance_name(layout.balance()))},
                        {"mask", spec.mask->describe()},
                        {"padded_len", layout.padded_len()}}
      .dump();
}

}  // namespace

void bind_attention(py::module_& m) {
  py::class_<PyMask>(m, "Mask", "A mask of the project's grammar over n tokens (longseq.Mask).")
      .def(py::init(&make_mask), py::arg("text"), py::arg("n"), py::arg("doc_ids") = py::none(),
           py::arg("cu_seqlens") = py::none(), py::arg("block_mask") = py::none(),
           py::arg("block_size") = 0)
      .def_readonly("n", &PyMask::n)
      .def_readonly("text", &PyMask::text)
      .def_property_readonly("batch", [](const PyMask& p) { return p.specs.size(); })
      .def_property_readonly("block_size",
                             [](const PyMask& p) { return p.specs.front()->block_size; })
      .def("describe", [](const PyMask& p) { return p.specs.front()->describe(); });
  m.def("attention_forward", &attention_forward, py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("o"), py::arg("lse"), py::arg("mask"), py::arg("scale") = 0.0,
        py::arg("threads") = 0, py::arg("precision") = "auto");
  m.def("attention_backward", &attention_backward, py::arg("do"), py::arg("q"), py::arg("k"),
        py::arg("v"), py::arg("o"), py::arg("lse"), py::arg("dq"), py::arg("dk"), py::arg("dv"),
        py::arg("mask"), py::arg("scale") = 0.0, py::arg("threads") = 0,
        py::arg("precision") = "auto", py::arg("dlse") = py::none());
  m.def("time_local_attention", &time_local_attention, py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("do"), py::arg("o"), py::arg("lse"), py::arg("dq"), py::arg("dk"), py::arg("dv"),
        py::arg("mask"), py::arg("threads") = 0);
  m.def(
      "engine_seconds",
      [] {
        return std::pair{g_engine_forward_s.load(std::memory_order_relaxed),
                         g_engine_backward_s.load(std::memory_order_relaxed)};
      },
      "(forward, backward): seconds the latest host attention_forward and attention_backward "
      "of this process spent inside the engine's call (the binding's own work excluded)");
  m.def("attention_distributed", &attention_distributed, py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("do"), py::arg("o"), py::arg("lse"), py::arg("dq"), py::arg("dk"), py::arg("dv"),
        py::arg("mask"), py::arg("world"), py::arg("algo"), py::arg("balance"),
        py::arg("nodes") = 0, py::arg("link") = "none", py::arg("precision") = "f32",
        py::arg("threads") = 0, py::arg("head_groups") = true, py::arg("scale") = 0.0,
        py::arg("timeout") = 300.0);
}

}  // namespace longseq::python
