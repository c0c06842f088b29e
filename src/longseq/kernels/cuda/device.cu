// The CUDA device layer (contracts in device.hpp).
#include <cuda_runtime.h>

#include <utility>

#include "longseq/core/error.hpp"
#include "longseq/kernels/cuda/device.hpp"

namespace longseq::kernels::cuda {

void check(int status, const char* what, const char* file, int line) {
  if (status == cudaSuccess) return;
  const auto e = static_cast<cudaError_t>(status);
  // A sticky error (a faulted kernel) poisons the context; clearing the last error keeps the next
  // check from reporting this one twice.
  cudaGetLastError();
  core::fail("cuda", what, " failed: ", cudaGetErrorString(e), " (", status, ") at ", file, ":",
             line);
}

std::string version_string(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

RuntimeInfo runtime_info() {
  RuntimeInfo r;
#if defined(LONGSEQ_CUDA_ARCHS)
  r.archs = LONGSEQ_CUDA_ARCHS;
#endif
  cudaRuntimeGetVersion(&r.runtime_version);
  if (cudaDriverGetVersion(&r.driver_version) != cudaSuccess) r.driver_version = 0;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    r.status = cudaGetErrorString(e);
    cudaGetLastError();
    return r;
  }
  r.status = "ok";
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    r.gpus.push_back({i, p.name, p.major, p.minor, p.totalGlobalMem, p.multiProcessorCount});
  }
  return r;
}

template <class T>
DeviceBuffer<T>::DeviceBuffer(size_t count, std::string name)
    : count_(count), name_(std::move(name)) {
  if (count_ == 0) return;
  const size_t bytes = count_ * sizeof(T);
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    core::fail("cuda", "out of device memory for ", name_, ": ", bytes, " bytes requested, ",
               free_b, " of ", total_b, " bytes free");
  }
  check(e, "cudaMalloc", __FILE__, __LINE__);
  ptr_ = static_cast<T*>(p);
}

template <class T>
DeviceBuffer<T>::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);  // not checked: a destructor must not throw
}

template <class T>
DeviceBuffer<T>::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)),
      count_(std::exchange(o.count_, 0)),
      name_(std::move(o.name_)) {}

template <class T>
DeviceBuffer<T>& DeviceBuffer<T>::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    count_ = std::exchange(o.count_, 0);
    name_ = std::move(o.name_);
  }
  return *this;
}

template <class T>
void DeviceBuffer<T>::copy_from_host(const T* src, size_t n) {
  core::require(n <= count_, "cuda", "copy of ", n, " elements into ", name_, " of ", count_);
  LONGSEQ_CUDA_CALL(cudaMemcpy(ptr_, src, n * sizeof(T), cudaMemcpyHostToDevice));
}

template <class T>
void DeviceBuffer<T>::copy_to_host(T* dst, size_t n) const {
  core::require(n <= count_, "cuda", "copy of ", n, " elements out of ", name_, " of ", count_);
  LONGSEQ_CUDA_CALL(cudaMemcpy(dst, ptr_, n * sizeof(T), cudaMemcpyDeviceToHost));
}

template class DeviceBuffer<float>;
template class DeviceBuffer<uint16_t>;  // bf16 storage
template class DeviceBuffer<int32_t>;
template class DeviceBuffer<int64_t>;
template class DeviceBuffer<uint8_t>;

Stream::Stream() {
  cudaStream_t s = nullptr;
  LONGSEQ_CUDA_CALL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
}
Stream::~Stream() {
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}
void Stream::synchronize() const {
  LONGSEQ_CUDA_CALL(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
}

Event::Event() {
  cudaEvent_t e = nullptr;
  LONGSEQ_CUDA_CALL(cudaEventCreate(&e));
  event_ = e;
}
Event::~Event() {
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}
void Event::record(const Stream& s) {
  LONGSEQ_CUDA_CALL(
      cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(s.get())));
}
void Event::synchronize() const {
  LONGSEQ_CUDA_CALL(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
}
float Event::elapsed_ms(const Event& start, const Event& end) {
  float ms = 0.0f;
  LONGSEQ_CUDA_CALL(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.event_),
                                         static_cast<cudaEvent_t>(end.event_)));
  return ms;
}

}  // namespace longseq::kernels::cuda
