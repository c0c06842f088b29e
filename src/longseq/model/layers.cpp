#include "longseq/model/layers.hpp"

#include <algorithm>

#include "longseq/core/error.hpp"
#include "longseq/model/kernels.hpp"

namespace longseq::model {

// ---- embedding ---------------------------------------------------------------------------------

void embedding_forward(const int32_t* tokens, const int64_t* pos, const float* weight, int64_t t,
                       int64_t c, int64_t v, float* out) {
  for (int64_t i = 0; i < t; ++i) {
    float* o = out + i * c;
    if (pos[i] < 0) {
      std::fill(o, o + c, 0.0f);
      continue;
    }
    const int32_t id = tokens[i];
    core::require(id >= 0 && id < v, "model", "token id ", id, " at position ", pos[i],
                  " outside the vocabulary [0, ", v, ")");
    std::copy(weight + id * c, weight + (id + 1) * c, o);
  }
}

void embedding_backward(const int32_t* tokens, const int64_t* pos, const float* dout, int64_t t,
                        int64_t c, float* dweight) {
  for (int64_t i = 0; i < t; ++i) {
    if (pos[i] < 0) continue;
    float* dw = dweight + static_cast<int64_t>(tokens[i]) * c;
    const float* d = dout + i * c;
    for (int64_t j = 0; j < c; ++j) dw[j] += d[j];
  }
}

// ---- SwiGLU MLP --------------------------------------------------------------------------------

namespace {
int64_t chunk_of(const MlpDims& d) {
  return d.chunk > 0 ? std::min(d.chunk, d.t) : d.t;
}
}  // namespace

int64_t mlp_workspace_floats(const MlpDims& d) {
  return 3 * std::max<int64_t>(chunk_of(d), 1) * d.f;
}

void mlp_forward(const float* x, const float* wgate, const float* wup, const float* wdown,
                 const MlpDims& d, float* out, bool accumulate, float* workspace,
                 const Kernels& k) {
  const int64_t cs = chunk_of(d);
  float* g = workspace;
  float* u = workspace + cs * d.f;
  for (int64_t t0 = 0; t0 < d.t; t0 += cs) {
    const int64_t n = std::min(cs, d.t - t0);
    k.linear_forward(x + t0 * d.c, wgate, n, d.c, d.f, g, false, d.compute);
    k.linear_forward(x + t0 * d.c, wup, n, d.c, d.f, u, false, d.compute);
    k.swiglu_forward(g, u, n * d.f, g);
    k.linear_forward(g, wdown, n, d.f, d.c, out + t0 * d.c, accumulate, d.compute);
  }
}

void mlp_forward(const float* x, const float* wgate, const float* wup, const float* wdown,
                 const MlpDims& d, float* out, bool accumulate, float* workspace, int threads) {
  mlp_forward(x, wgate, wup, wdown, d, out, accumulate, workspace, CpuKernels(threads));
}

void mlp_backward(const float* dout, const float* x, const float* wgate, const float* wup,
                  const float* wdown, const MlpDims& d, float* dx, bool accumulate, float* dwgate,
                  float* dwup, float* dwdown, float* workspace, const Kernels& k) {
  const int64_t cs = chunk_of(d);
  float* g = workspace;
  float* u = workspace + cs * d.f;
  float* a = workspace + 2 * cs * d.f;
  for (int64_t t0 = 0; t0 < d.t; t0 += cs) {
    const int64_t n = std::min(cs, d.t - t0);
    const float* xc = x + t0 * d.c;
    const float* dc = dout + t0 * d.c;
    k.linear_forward(xc, wgate, n, d.c, d.f, g, false, d.compute);
    k.linear_forward(xc, wup, n, d.c, d.f, u, false, d.compute);
    k.swiglu_forward(g, u, n * d.f, a);
    // down: da = dout wdown, dwdown += dout^T a
    k.linear_backward(dc, a, wdown, n, d.f, d.c, a, false, dwdown, d.compute);
    k.swiglu_backward(a, g, u, n * d.f, g, u);  // g <- dgate, u <- dup
    k.linear_backward(g, xc, wgate, n, d.c, d.f, dx + t0 * d.c, accumulate, dwgate, d.compute);
    k.linear_backward(u, xc, wup, n, d.c, d.f, dx + t0 * d.c, true, dwup, d.compute);
  }
}

void mlp_backward(const float* dout, const float* x, const float* wgate, const float* wup,
                  const float* wdown, const MlpDims& d, float* dx, bool accumulate, float* dwgate,
                  float* dwup, float* dwdown, float* workspace, int threads) {
  mlp_backward(dout, x, wgate, wup, wdown, d, dx, accumulate, dwgate, dwup, dwdown, workspace,
               CpuKernels(threads));
}

}  // namespace longseq::model
