// longseq._core.ContextParallel: the engine half of longseq.torch.ContextParallel. One object per
// (group, algorithm, layout): the layout's positions and shard/unshard of any tensor along any
// dimension, and the distributed attention's two passes on this rank's shards (each a collective
// over the group).
//
// Devices: host tensors over a group that moves host memory (mpi), CUDA tensors over one that
// moves GPU memory (nccl, longseq.comm.nccl()), one rank per process and GPU; the executor runs
// on the tensors' device (attention/exec_device.hpp) with the stream rule of device.hpp (tensors
// exported for the legacy default stream, outputs complete when the call returns). The GPU
// executor's API is float32: longseq/torch.py widens bfloat16 CUDA tensors, as for one process.
#include <pybind11/stl.h>

#include <nlohmann/json.hpp>
#include <type_traits>

#include "bindings.hpp"
#include "device.hpp"
#include "longseq/attention/distributed.hpp"
#include "longseq/comm/group.hpp"
#if defined(LONGSEQ_WITH_CUDA)
#include "longseq/attention/cuda/exec_device.hpp"
#endif

namespace longseq::python {

namespace {

using core::DType;

// One sequence's part of an input, read where it lies: fp32, or bf16 (the engine's bf16 forms
// take it directly, no widened copy).
template <class In>
core::View<const In> input(const Array& a, int64_t offset, core::Shape shape) {
  return core::View<const In>(a.ptr<In>() + offset, shape);
}

// Calls f(std::type_identity<In>{}) with In the inputs' element type (f32 or bf16; checked).
template <class F>
void with_input_type(DType dt, F&& f) {
  if (dt == DType::bf16)
    f(std::type_identity<core::bf16>{});
  else
    f(std::type_identity<float>{});
}

// An fp32 output of one sequence: the caller's memory (f32), or scratch rounded into the caller's
// bf16 tensor by done().
class Out32 {
 public:
  Out32(const Array& a, int64_t offset, core::Shape shape) : a_(a), offset_(offset), shape_(shape) {
    if (a.dtype == DType::f32) {
      p_ = a.ptr<float>() + offset;
    } else {
      buf_ = core::Buffer<float>(static_cast<size_t>(shape.numel()), core::Uninit{});
      p_ = buf_.data();
    }
  }
  core::View<float> view() const { return core::View<float>(p_, shape_); }
  void done() const {
    if (a_.dtype != DType::f32)
      core::f32_to_bf16(p_, a_.ptr<core::bf16>() + offset_, static_cast<size_t>(shape_.numel()));
  }

 private:
  const Array& a_;
  int64_t offset_;
  core::Shape shape_;
  float* p_ = nullptr;
  core::Buffer<float> buf_;
};

nlohmann::json stats_json(const attention::AttentionStats& s) {
  return {{"compute_s", s.compute_s}, {"wait_s", s.wait_s}, {"steps", s.steps}, {"pairs", s.pairs}};
}

class CpCore {
 public:
  CpCore(comm::Group group, const std::string& algo, const std::string& balance, int64_t seq,
         int64_t block, const std::string& precision, int threads, bool head_groups)
      : group_(std::move(group)),
        layout_(attention::parse_balance(balance), seq, group_.size(), block) {
    if (!group_.valid()) value_error("longseq.ContextParallel: the group is not valid");
    spec_.algo = attention::Algorithm::parse(algo);
    spec_.precision = core::parse_precision(precision, "attention");
    spec_.threads = rank_threads(threads, group_.topology().local_size(group_.rank()));
    spec_.head_groups = head_groups;
    // What no tensor could make work is refused now, not at the first attention call.
    attention::validate_group(spec_, layout_, group_.topology());
  }

  int rank() const { return group_.rank(); }
  const attention::Layout& layout() const { return layout_; }
  std::string algo() const { return spec_.algo.name(); }
  const comm::Group& group() const { return group_; }

  // rank -1: this rank's.
  void positions(const py::object& out_, int rank) const {
    constexpr const char* fn = "longseq.ContextParallel.positions";
    if (rank < -1 || rank >= group_.size())
      value_error(fn, ": rank ", rank, " is not a rank of a group of ", group_.size());
    const Array out = from_python(fn, out_, "out");
    out.need_dtype(fn, {DType::i64}).need_shape(fn, {layout_.local_len()}).need_contiguous(fn);
    out.need_host(fn);
    const std::vector<int64_t> p = layout_.positions(rank < 0 ? group_.rank() : rank);
    std::copy(p.begin(), p.end(), out.ptr<int64_t>());
  }

  // x [..., N, ...] (dim) -> out [..., L, ...]: this rank's rows, padding zero.
  void shard(const py::object& x_, int dim, const py::object& out_) const {
    constexpr const char* fn = "longseq.ContextParallel.shard";
    const Array x = from_python(fn, x_, "x"), out = from_python(fn, out_, "out");
    const auto [outer, row] = rows(fn, x, dim, layout_.global_len());
    out.need_shape(fn, with_dim(x, dim, layout_.local_len())).need_contiguous(fn);
    same(fn, x, out);
    py::gil_scoped_release nogil;
    layout_.shard_bytes(x.data, outer, row, group_.rank(), out.data);
  }

  // Collective: every rank's x [..., L, ...] -> out [..., N, ...] on every rank.
  void unshard(const py::object& x_, int dim, const py::object& out_) const {
    constexpr const char* fn = "longseq.ContextParallel.unshard";
    const Array x = from_python(fn, x_, "x"), out = from_python(fn, out_, "out");
    const auto [outer, row] = rows(fn, x, dim, layout_.local_len());
    out.need_shape(fn, with_dim(x, dim, layout_.global_len())).need_contiguous(fn);
    same(fn, x, out);
    const size_t local = x.bytes();
    py::gil_scoped_release nogil;
    std::vector<std::byte> all(local * static_cast<size_t>(group_.size()));
    group_.all_gather(x.data, all.data(), local, DType::u8);
    for (int r = 0; r < group_.size(); ++r)
      layout_.unshard_bytes(all.data() + r * local, outer, row, r, out.data);
  }

  // bf16_kernels: the caller widened bfloat16 tensors for the GPU executor (longseq/torch.py);
  // they run the bf16 kernels as the bfloat16 tensors would have.
  void forward(const py::object& q_, const py::object& k_, const py::object& v_,
               const py::object& o_, const py::object& lse_, const PyMask& mask, double scale,
               bool bf16_kernels) {
    constexpr const char* fn = "longseq.ContextParallel.attention";
    const Stream st = kLegacyStream;
    const Array q = from_python(fn, q_, "q", st), k = from_python(fn, k_, "k", st),
                v = from_python(fn, v_, "v", st);
    const Qkv d = check(fn, q, k, v, mask, scale);
    const Array o = from_python(fn, o_, "o", st), lse = from_python(fn, lse_, "lse", st);
    check_out(fn, o, d.q_shape, q.dtype, q);
    check_out(fn, lse, d.lse_shape, DType::f32, q);
    no_overlap(fn, {&o, &lse}, {&q, &k, &v});
    need_f32_on_gpu(fn, {&q, &k, &v, &o});
    const attention::AttentionSpec spec = spec_for(d, q, mask, scale, bf16_kernels);
    const int64_t l = d.dims.tokens, hq = d.dims.hq, hkv = d.dims.hkv, dd = d.dims.d;
    const core::Shape qs{l, hq, dd}, ks{l, hkv, dd};
    py::gil_scoped_release nogil;
    with_input_type(q.dtype, [&](auto type) {
      using In = typename decltype(type)::type;
      for (int64_t b = 0; b < d.dims.batch; ++b) {
        const int64_t qo = b * l * hq * dd, ko = b * l * hkv * dd;
        const Out32 ob(o, qo, qs);
        const core::View<float> lb(lse.ptr<float>() + b * l * hq, core::Shape{l, hq});
        attention::distributed_attention_forward_into(input<In>(q, qo, qs), input<In>(k, ko, ks),
                                                      input<In>(v, ko, ks), spec, layout_, group_,
                                                      ob.view(), lb, &forward_stats_);
        ob.done();
      }
    });
  }

  void backward(const py::object& do_, const py::object& q_, const py::object& k_,
                const py::object& v_, const py::object& o_, const py::object& lse_,
                const py::object& dq_, const py::object& dk_, const py::object& dv_,
                const PyMask& mask, double scale, const py::object& dlse_, bool bf16_kernels) {
    constexpr const char* fn = "longseq.ContextParallel.attention (backward)";
    const Stream st = kLegacyStream;
    const Array q = from_python(fn, q_, "q", st), k = from_python(fn, k_, "k", st),
                v = from_python(fn, v_, "v", st);
    const Qkv d = check(fn, q, k, v, mask, scale);
    const Array dout = from_python(fn, do_, "do", st), o = from_python(fn, o_, "o", st),
                lse = from_python(fn, lse_, "lse", st);
    check_out(fn, dout, d.q_shape, q.dtype, q);
    check_out(fn, o, d.q_shape, q.dtype, q);
    check_out(fn, lse, d.lse_shape, DType::f32, q);
    const Array dq = from_python(fn, dq_, "dq", st), dk = from_python(fn, dk_, "dk", st),
                dv = from_python(fn, dv_, "dv", st);
    check_out(fn, dq, d.q_shape, q.dtype, q);
    check_out(fn, dk, d.kv_shape, q.dtype, q);
    check_out(fn, dv, d.kv_shape, q.dtype, q);
    no_overlap(fn, {&dq, &dk, &dv}, {&q, &k, &v, &dout, &o, &lse});
    need_f32_on_gpu(fn, {&dout, &q, &k, &v, &o, &dq, &dk, &dv});
    // The GPU executor has no op for the lse's gradient (as for one process, bind_attention).
    if (!dlse_.is_none() && !q.device.is_cpu())
      value_error(fn, ": a gradient reached lse, and q is on ", q.device.str(),
                  "; the GPU executor takes no lse gradient (use o only, or host tensors)");
    const std::optional<Array> dlse = lse_grad(fn, dlse_, d, q, {&dq, &dk, &dv}, st);
    const attention::AttentionSpec spec = spec_for(d, q, mask, scale, bf16_kernels);
    const int64_t l = d.dims.tokens, hq = d.dims.hq, hkv = d.dims.hkv, dd = d.dims.d;
    const core::Shape qs{l, hq, dd}, ks{l, hkv, dd};
    py::gil_scoped_release nogil;
    with_input_type(q.dtype, [&](auto type) {
      using In = typename decltype(type)::type;
      for (int64_t b = 0; b < d.dims.batch; ++b) {
        const int64_t qo = b * l * hq * dd, ko = b * l * hkv * dd;
        const core::View<const float> lb(lse.ptr<float>() + b * l * hq, core::Shape{l, hq});
        const core::View<const float> dlb =
            dlse ? core::View<const float>(dlse->ptr<float>() + b * l * hq, core::Shape{l, hq})
                 : core::View<const float>();
        const Out32 gq(dq, qo, qs), gk(dk, ko, ks), gv(dv, ko, ks);
        attention::distributed_attention_backward_into(
            input<In>(dout, qo, qs), input<In>(q, qo, qs), input<In>(k, ko, ks),
            input<In>(v, ko, ks), input<In>(o, qo, qs), lb, spec, layout_, group_, gq.view(),
            gk.view(), gv.view(), &backward_stats_, dlb);
        gq.done();
        gk.done();
        gv.done();
      }
    });
  }

  // Sums over the passes since the last reset (or construction).
  std::string stats(bool reset) {
    const std::string s = nlohmann::json{{"forward", stats_json(forward_stats_)},
                                         {"backward", stats_json(backward_stats_)}}
                              .dump();
    if (reset) forward_stats_ = backward_stats_ = {};
    return s;
  }

 private:
  // (outer, row bytes) of x along `dim`, whose extent must be `len`.
  static std::pair<int64_t, int64_t> rows(const char* fn, const Array& x, int dim, int64_t len) {
    x.need_contiguous(fn);
    if (dim < 0 || dim >= x.rank())
      value_error(fn, ": dim ", dim, " of x ", x.shape_str(), " (", x.rank(), " dims)");
    if (x.shape[dim] != len)
      value_error(fn, ": x ", x.shape_str(), " has ", x.shape[dim], " tokens along dim ", dim,
                  ", expected ", len);
    x.need_host(fn);
    int64_t outer = 1, row = static_cast<int64_t>(core::dtype_size(x.dtype));
    for (int i = 0; i < dim; ++i) outer *= x.shape[i];
    for (int i = dim + 1; i < x.rank(); ++i) row *= x.shape[i];
    return {outer, row};
  }
  static std::vector<int64_t> with_dim(const Array& x, int dim, int64_t len) {
    std::vector<int64_t> s = x.shape;
    s[dim] = len;
    return s;
  }
  static void same(const char* fn, const Array& x, const Array& out) {
    if (out.dtype != x.dtype)
      type_error(fn, ": out has dtype ", dtype_str(out.dtype), ", x has ", dtype_str(x.dtype));
    same_device(fn, {&x, &out});
    no_overlap(fn, {&out}, {&x});
  }

  Qkv check(const char* fn, const Array& q, const Array& k, const Array& v, const PyMask& mask,
            double scale) const {
    const Qkv d = check_qkv(fn, q, k, v);
    check_device(fn, q);
    if (d.dims.tokens != layout_.local_len())
      value_error(fn, ": q holds ", d.dims.tokens, " tokens, rank ", group_.rank(), " of the ",
                  layout_.global_len(), "-token layout holds ", layout_.local_len(),
                  " (padding included: shard with ContextParallel.shard)");
    if (mask.n != layout_.global_len())
      value_error(fn, ": the mask is over ", mask.n, " tokens, the sequence has ",
                  layout_.global_len());
    if (mask.specs.size() != 1)
      value_error(fn, ": the mask has document ids for ", mask.specs.size(),
                  " sequences; under context parallelism every sequence of the batch shares one "
                  "mask (call once per packed sequence)");
    check_scale(fn, scale);
    return d;
  }

  // Host tensors over a group that moves host memory, CUDA tensors over nccl (see the top).
  void check_device(const char* fn, const Array& q) const {
    const bool gpu_group = group_.backend() == "nccl";
    if (q.device.is_cpu() && gpu_group)
      value_error(fn,
                  ": q is on cpu, and the group is nccl's (longseq.comm.nccl()), which moves "
                  "GPU memory: give CUDA tensors, or use a longseq.comm.mpi() group for host "
                  "tensors");
    if (!q.device.is_cpu() && !gpu_group)
      value_error(fn, ": q is on ", q.device.str(), ", and the group is ", group_.backend(),
                  "'s, which moves host memory: CUDA tensors need a longseq.comm.nccl() group");
#if defined(LONGSEQ_WITH_CUDA)
    if (!q.device.is_cpu()) attention::cuda::register_exec_device();
#endif
  }

  // The spec of a call, checked before any communication (every rank holds the same shapes,
  // so every rank raises alike).
  attention::AttentionSpec spec_for(const Qkv& d, const Array& q, const PyMask& mask, double scale,
                                    bool bf16_kernels) const {
    attention::AttentionSpec s = spec_;
    s.mask = mask.specs.front();
    s.scale = scale;
    s.device = q.device;
    // bf16 tensors run the bf16 kernels on the tensors themselves (the engine's bf16 forms).
    if (q.dtype == DType::bf16 || bf16_kernels) s.precision = DType::bf16;
    attention::validate(s, layout_, group_.topology(), d.dims.hq, d.dims.hkv, d.dims.d);
    return s;
  }

  comm::Group group_;
  attention::Layout layout_;
  attention::AttentionSpec spec_;
  attention::AttentionStats forward_stats_, backward_stats_;
};

}  // namespace

void bind_context_parallel(py::module_& m) {
  py::class_<CpCore>(m, "ContextParallel")
      .def(py::init<comm::Group, std::string, std::string, int64_t, int64_t, std::string, int,
                    bool>(),
           py::arg("group"), py::arg("algo"), py::arg("balance"), py::arg("seq"),
           py::arg("block") = 0, py::arg("precision") = "f32", py::arg("threads") = 0,
           py::arg("head_groups") = true)
      .def_property_readonly("rank", &CpCore::rank)
      .def_property_readonly("world", [](const CpCore& c) { return c.layout().world(); })
      .def_property_readonly("seq", [](const CpCore& c) { return c.layout().global_len(); })
      .def_property_readonly("local_len", [](const CpCore& c) { return c.layout().local_len(); })
      .def_property_readonly("padded_len", [](const CpCore& c) { return c.layout().padded_len(); })
      .def_property_readonly("algo", &CpCore::algo)
      .def_property_readonly("balance",
                             [](const CpCore& c) {
                               return std::string(attention::balance_name(c.layout().balance()));
                             })
      .def_property_readonly("group", &CpCore::group)
      .def("positions", &CpCore::positions, py::arg("out"), py::arg("rank") = -1)
      .def("shard", &CpCore::shard, py::arg("x"), py::arg("dim"), py::arg("out"))
      .def("unshard", &CpCore::unshard, py::arg("x"), py::arg("dim"), py::arg("out"))
      .def("forward", &CpCore::forward, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("o"),
           py::arg("lse"), py::arg("mask"), py::arg("scale") = 0.0, py::arg("bf16_kernels") = false)
      .def("backward", &CpCore::backward, py::arg("do"), py::arg("q"), py::arg("k"), py::arg("v"),
           py::arg("o"), py::arg("lse"), py::arg("dq"), py::arg("dk"), py::arg("dv"),
           py::arg("mask"), py::arg("scale") = 0.0, py::arg("dlse") = py::none(),
           py::arg("bf16_kernels") = false)
      .def("stats", &CpCore::stats, py::arg("reset") = false);
}

}  // namespace longseq::python
