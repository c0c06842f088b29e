#include "longseq/model/device_replica.hpp"

#include "longseq/core/error.hpp"

namespace longseq::model {

namespace {

std::vector<int64_t> unit_offsets(const ParamLayout& layout, int64_t* total) {
  std::vector<int64_t> off;
  int64_t at = 0;
  for (const ParamUnit& u : layout.units()) {
    off.push_back(at);
    at += (u.size + kParamAlign - 1) / kParamAlign * kParamAlign;
  }
  *total = at;
  return off;
}

}  // namespace

DeviceReplica::DeviceReplica(const ParamLayout& layout, core::Device device, uint64_t seed)
    : layout_(layout) {
  int64_t total = 0;
  offset_ = unit_offsets(layout_, &total);
  const auto n = static_cast<size_t>(total);
  core::Buffer<float> host(n);  // zeroed: the alignment gaps stay zero
  for (int u = 0; u < layout_.num_units(); ++u)
    init_unit(layout_, u, seed, host.data() + offset(u));
  params_ = host.to(device, "parameters");
  grads_ = core::Buffer<float>(n, device, "gradients");
}

void DeviceReplica::zero_grads() {
  core::zero_bytes(grads_.device(), grads_.data(), grads_.bytes());
}

void DeviceReplica::unit_to_host(const float* base, int unit, float* out) const {
  const auto n = static_cast<size_t>(layout_.units().at(static_cast<size_t>(unit)).size);
  core::copy_bytes(out, core::Device::cpu(), base + offset(unit), device(), n * sizeof(float));
}

void DeviceReplica::unit_from_host(float* base, int unit, const float* in) const {
  const auto n = static_cast<size_t>(layout_.units().at(static_cast<size_t>(unit)).size);
  core::copy_bytes(base + offset(unit), device(), in, core::Device::cpu(), n * sizeof(float));
}

std::vector<float> DeviceReplica::download(int unit, int which) const {
  LONGSEQ_CHECK(which == 0 || which == 1);
  std::vector<float> out(static_cast<size_t>(layout_.units().at(static_cast<size_t>(unit)).size));
  unit_to_host(which == 0 ? params_.data() : grads_.data(), unit, out.data());
  return out;
}

}  // namespace longseq::model
