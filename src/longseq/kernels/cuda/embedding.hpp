#pragma once
// The token embedding on a GPU, forward (gather) and backward (deterministic scatter-add): the
// twin of model::embedding_forward / embedding_backward (model/layers.hpp), same contract on
// device pointers.
//
// Legend: T tokens (padding included), C hidden, V vocabulary. tokens int32 [T], pos int64 [T]
// (negative = padding), weight, dweight [V, C], out, dout [T, C]; all device memory of the
// context's GPU. Execution: queued on `exec`'s stream (a CPU context is refused naming the kernel).
//
// Backward without floating-point atomics: the (token id, position) pairs are sorted by id with
// CUB's radix sort (stable, so positions stay in increasing order within an id), then one thread
// block per distinct id adds that id's dout rows into its dweight row in position order, starting
// from dweight's value: the CPU loop's order for every element, so the bits equal the CPU's and
// never depend on the GPU or the run.
#include <cstdint>

#include "longseq/core/device.hpp"

namespace longseq::kernels::cuda {

/// out[t] = weight[tokens[t]] for pos[t] >= 0; padding rows (pos < 0) are zero. An id outside
/// [0, V) throws core::Error("[kernels] token id <id> at position <pos> outside the vocabulary
/// [0, V)") for the first such row; the check waits for the stream (one 8-byte read per call).
void embedding_forward(const int32_t* tokens, const int64_t* pos, const float* weight, int64_t t,
                       int64_t c, int64_t v, float* out, const core::Exec& exec);

/// dweight[tokens[t]] += dout[t] for non-padding rows, per id in position order (see above). Ids
/// outside [0, V) are skipped (the forward refused them). Uses about 16 T bytes of stream-ordered
/// scratch (cudaMallocAsync) plus CUB's.
void embedding_backward(const int32_t* tokens, const int64_t* pos, const float* dout, int64_t t,
                        int64_t c, int64_t v, float* dweight, const core::Exec& exec);

}  // namespace longseq::kernels::cuda
