#pragma once
// CUDA tensors in the single-process attention (CUDA builds; elsewhere a ValueError saying the
// build has no CUDA): the attention executor at world 1 on the tensors' GPU, the device the
// trainer's attention runs on (attention/cuda/exec_device.hpp), so no second GPU path exists.
//
// Streams (the DLPack stream rule): the tensors are exported with stream = 1, the legacy default
// stream, so the producer makes their data ready there; the executor's stream waits for the
// legacy stream on the GPU before its first kernel (ExecDevice::bind), and the call returns once
// the outputs are complete, so any stream may read them afterwards.
//
// The executor's API is float32: q, k, v, dO and every output must be float32 CUDA tensors
// (longseq/torch.py widens bfloat16 ones on the GPU and narrows the results); `precision` bf16
// runs the bf16 kernels on them (AttentionSpec::precision).
#include "array.hpp"
#include "bindings.hpp"
#include "longseq/attention/local.hpp"

namespace longseq::python {

/// The stream named to __dlpack__ for tensors of the single-process attention (see above).
inline constexpr intptr_t kLegacyStream = 1;

/// TypeError for a CUDA tensor among `arrays` that is not float32 (the executor's API).
void need_f32_on_gpu(const char* fn, std::initializer_list<const Array*> arrays);

void device_attention_forward(const Array& q, const Array& k, const Array& v, const Array& o,
                              const Array& lse, const attention::LocalDims& dims,
                              const PyMask& mask, double scale, core::DType precision);
void device_attention_backward(const Array& dout, const Array& q, const Array& k, const Array& v,
                               const Array& o, const Array& lse, const Array& dq, const Array& dk,
                               const Array& dv, const attention::LocalDims& dims,
                               const PyMask& mask, double scale, core::DType precision);

}  // namespace longseq::python
