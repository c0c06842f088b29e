#include "device.hpp"

#include "longseq/attention/distributed.hpp"
#include "longseq/comm/launch.hpp"
#if defined(LONGSEQ_WITH_CUDA)
#include "longseq/attention/cuda/exec_device.hpp"
#endif

namespace longseq::python {

namespace {

#if defined(LONGSEQ_WITH_CUDA)
// Sequence b of a [B, T, H, D] (or [T, H, D]) tensor as the executor's [T, H, D] view.
template <class T>
core::View<T> row(const Array& a, int64_t b, int64_t t, int64_t h, int64_t d) {
  return core::View<T>(static_cast<T*>(a.data) + b * t * h * d, core::Shape{t, h, d});
}
template <class T>
core::View<T> lse_row(const Array& a, int64_t b, int64_t t, int64_t h) {
  return core::View<T>(static_cast<T*>(a.data) + b * t * h, core::Shape{t, h});
}

// The spec of sequence b: world 1 on the tensors' GPU.
attention::AttentionSpec spec_for(const Array& q, const PyMask& mask, int64_t b, double scale,
                                  core::DType precision) {
  attention::AttentionSpec s;
  s.algo = attention::Algorithm::parse("ring");
  s.mask = mask.specs[mask.specs.size() == 1 ? 0 : static_cast<size_t>(b)];
  s.scale = scale;
  s.precision = precision;
  s.device = q.device;
  return s;
}

void run_world1(const std::function<void(comm::Group&)>& fn) {
  attention::cuda::register_exec_device();
  comm::Options opt;
  opt.backend = "local";
  opt.world = 1;
  py::gil_scoped_release nogil;
  comm::run_local(opt, fn);
}
#else
// Both passes' answer to a CUDA tensor in a build without CUDA.
[[noreturn]] void no_cuda(const Array& q) {
  value_error("longseq.attention: ", q.name, " is on ", q.device.str(),
              ", but this build of longseq has no CUDA (configure with a CUDA toolkit)");
}
#endif

}  // namespace

void need_f32_on_gpu(const char* fn, std::initializer_list<const Array*> arrays) {
  for (const Array* a : arrays)
    if (!a->device.is_cpu() && a->dtype != core::DType::f32)
      type_error(fn, ": CUDA tensors are float32 here (", a->name, " is ", dtype_str(a->dtype),
                 "); longseq.torch widens bfloat16 on the GPU");
}

void device_attention_forward(const Array& q, const Array& k, const Array& v, const Array& o,
                              const Array& lse, const attention::LocalDims& dims,
                              const PyMask& mask, double scale, core::DType precision) {
#if defined(LONGSEQ_WITH_CUDA)
  need_f32_on_gpu("longseq.attention.forward", {&q, &k, &v, &o});
  const attention::Layout layout(attention::Balance::contiguous, dims.tokens, 1);
  const int64_t t = dims.tokens, hq = dims.hq, hkv = dims.hkv, d = dims.d;
  run_world1([&](comm::Group& g) {
    for (int64_t b = 0; b < dims.batch; ++b)
      attention::distributed_attention_forward_into(
          row<const float>(q, b, t, hq, d), row<const float>(k, b, t, hkv, d),
          row<const float>(v, b, t, hkv, d), spec_for(q, mask, b, scale, precision), layout, g,
          row<float>(o, b, t, hq, d), lse_row<float>(lse, b, t, hq));
  });
#else
  (void)k, (void)v, (void)o, (void)lse, (void)dims, (void)mask, (void)scale, (void)precision;
  no_cuda(q);
#endif
}

void device_attention_backward(const Array& dout, const Array& q, const Array& k, const Array& v,
                               const Array& o, const Array& lse, const Array& dq, const Array& dk,
                               const Array& dv, const attention::LocalDims& dims,
                               const PyMask& mask, double scale, core::DType precision) {
#if defined(LONGSEQ_WITH_CUDA)
  need_f32_on_gpu("longseq.attention.backward", {&dout, &q, &k, &v, &o, &dq, &dk, &dv});
  const attention::Layout layout(attention::Balance::contiguous, dims.tokens, 1);
  const int64_t t = dims.tokens, hq = dims.hq, hkv = dims.hkv, d = dims.d;
  run_world1([&](comm::Group& g) {
    for (int64_t b = 0; b < dims.batch; ++b)
      attention::distributed_attention_backward_into(
          row<const float>(dout, b, t, hq, d), row<const float>(q, b, t, hq, d),
          row<const float>(k, b, t, hkv, d), row<const float>(v, b, t, hkv, d),
          row<const float>(o, b, t, hq, d), lse_row<const float>(lse, b, t, hq),
          spec_for(q, mask, b, scale, precision), layout, g, row<float>(dq, b, t, hq, d),
          row<float>(dk, b, t, hkv, d), row<float>(dv, b, t, hkv, d));
  });
#else
  (void)dout, (void)k, (void)v, (void)o, (void)lse, (void)dq, (void)dk, (void)dv, (void)dims,
      (void)mask, (void)scale, (void)precision;
  no_cuda(q);
#endif
}

}  // namespace longseq::python
