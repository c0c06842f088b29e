#pragma once
// Elementwise fp32 kernels on a GPU for the attention executor's bookkeeping (attention/cuda:
// filling lse with -inf, adding gradient partials, unpacking head slices). Their fp64 twins are
// one-line loops (tests/cuda/elementwise_test.cpp); each output element is written by one thread
// with one expression, so the bits do not depend on the grid.
//
// Every pointer is device memory of the context's GPU; queued on `exec`'s stream (a CPU context
// is refused naming the kernel), asynchronous. Sizes come from code: checked with LONGSEQ_CHECK.
#include <cstdint>

#include "longseq/core/device.hpp"

namespace longseq::kernels::cuda {

/// p[i] = value for i < n.
void fill(float* p, int64_t n, float value, const core::Exec& exec);

/// into[i] += from[i] for i < n (into and from do not overlap, or are the same).
void add(float* into, const float* from, int64_t n, const core::Exec& exec);

/// dst[r * dst_pitch + e] += src[r * src_pitch + e] for r < rows, e < width (pitches in elements,
/// >= width; the rows of dst do not overlap each other or src).
void add_rows(float* dst, int64_t dst_pitch, const float* src, int64_t src_pitch, int64_t width,
              int64_t rows, const core::Exec& exec);

}  // namespace longseq::kernels::cuda
