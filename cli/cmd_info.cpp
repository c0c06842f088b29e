#include <cstdio>
#include <memory>
#include <string>

#include "commands.hpp"
#include "longseq/train/info.hpp"

namespace longseq::cli {

namespace {

std::string str(const nlohmann::json& j) {
  return j.is_string() ? j.get<std::string>() : j.dump();
}

// The text form of train::build_info().
void print_info(const nlohmann::json& i) {
  std::printf("longseq %s\n  gemm library: %s (%s)\n  mpi backend:  %s\n  nccl backend: %s\n",
              str(i["version"]).c_str(), str(i["gemm"]["library"]).c_str(),
              str(i["gemm"]["isa"]).c_str(), str(i["mpi"]).c_str(), str(i["nccl"]).c_str());
  std::printf("  cpu:          %s (%s)\n  cpu features: %s\n", str(i["cpu"]["brand"]).c_str(),
              str(i["cpu"]["vendor"]).c_str(), str(i["cpu"]["features"]).c_str());
  std::string built;
  for (const auto& b : i["kernel_variants_built"]) built += " " + str(b);
  std::printf("  kernel variants built:%s; best for this CPU: %s\n", built.c_str(),
              str(i["best_variant"]).c_str());
  std::printf("  kernel variant: %s%s\n", str(i["kernel_variant"]).c_str(),
              i["kernel_variant_forced"].get<bool>() ? " (forced by LONGSEQ_ISA)" : "");
  std::printf("    attention:            %s\n", str(i["kernels"]["attention"]).c_str());
  std::printf("    norms, rope, swiglu:  %s\n", str(i["kernels"]["norms_rope_swiglu"]).c_str());
  std::printf("    lm head + loss:       %s\n", str(i["kernels"]["lm_head"]).c_str());
  std::printf("  bf16: %s\n", str(i["bf16"]).c_str());
  const nlohmann::json& c = i["cuda"];
  if (!c["built"].get<bool>()) {
    std::printf("  cuda: not built (no CUDA toolkit at configure time, or LONGSEQ_CUDA=OFF)\n");
    return;
  }
  const std::string status = str(c["status"]);
  std::printf("  cuda: built for sm %s; runtime %s, driver %s; %zu GPU(s)%s%s\n",
              str(c["archs"]).c_str(), str(c["runtime"]).c_str(),
              c["driver"].is_null() ? "none" : str(c["driver"]).c_str(), c["gpus"].size(),
              status == "ok" ? "" : ": ", status == "ok" ? "" : status.c_str());
  for (const auto& g : c["gpus"])
    std::printf("    gpu %d: %s, sm_%s, %.1f GiB, %d SMs\n", g["index"].get<int>(),
                str(g["name"]).c_str(), str(g["sm"]).c_str(), g["memory_gib"].get<double>(),
                g["multiprocessors"].get<int>());
}

}  // namespace

std::function<int()> add_info(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  app.add_flag("--json", *json, "print the report as JSON (what longseq.info() returns)");
  return [json] {
    const nlohmann::json i = train::build_info();
    if (*json)
      std::printf("%s\n", i.dump(1).c_str());
    else
      print_info(i);
    return 0;
  };
}

}  // namespace longseq::cli
