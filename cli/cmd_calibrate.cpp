// `longseq calibrate`: measures this machine (plan/calibrate.hpp) and writes its hardware profile
// (default <data>/hardware/local.json) for `longseq plan --hardware local`; with --device cuda[:N]
// one GPU's profile (default <data>/hardware/local-cuda.json) for `longseq plan --train PRESET
// --hardware local-cuda`.
#include <cstdio>
#include <memory>

#include "commands.hpp"
#include "longseq/core/error.hpp"
#include "longseq/core/io.hpp"
#include "longseq/plan/calibrate.hpp"
#include "table_flags.hpp"

namespace longseq::cli {

std::function<int()> add_calibrate(CLI::App& app) {
  struct Args {
    std::string out = plan::data_dir() + "/hardware/local.json";
    std::string device = core::rows::device.text;
    plan::CalibrateOptions o;
  };
  auto a = std::make_shared<Args>();
  auto* out = app.add_option("--out", a->out,
                             "profile to write (default with --device cuda: "
                             "<data>/hardware/local-cuda.json)")
                  ->capture_default_str();
  // cuda | cuda:N: that GPU's memory, bf16 and fp32 GEMM rate and copy bandwidth, as a single-GPU
  // profile for plan --train --hardware (plan/calibrate.hpp calibrate_gpu). The help stays the
  // shared row's (tests/train/cli_flags_test.cpp).
  add_row(app, core::rows::device, a->device);
  add_row(app, core::rows::threads, a->o.threads);
  app.add_option("--repeats", a->o.repeats,
                 "timed repetitions per kernel measurement (best is kept)")
      ->capture_default_str();
  app.add_option("--block", a->o.block, "attention block size (tokens) of the kernel measurement")
      ->capture_default_str();
  app.add_option("--pingpong-seconds", a->o.pingpong_s, "target seconds per ping-pong size")
      ->capture_default_str();
  app.add_option("--memory-gib", a->o.memory_gib,
                 "memory per rank in GiB (0: physical memory / 2)");
  return [a, out] {
    const core::Device device = core::Device::parse(a->device, "calibrate");
    if (!device.is_cpu()) {
      const std::string path =
          out->count() > 0 ? a->out : plan::data_dir() + "/hardware/local-cuda.json";
      const plan::Hardware hw = plan::calibrate_gpu(device, "local-cuda");
      core::write_file_atomic(path, plan::gpu_calibration_json(hw, device));
      std::printf("%swrote %s\n", plan::gpu_calibration_summary(hw).c_str(), path.c_str());
      return 0;
    }
    const std::optional<plan::Calibration> c = plan::calibrate(a->o);
    if (!c) return 0;  // an mpirun rank other than 0: it took part in the MPI ping-pong
    core::write_file_atomic(a->out, plan::calibration_json(*c));
    std::printf("%swrote %s\n", plan::calibration_summary(*c, a->o.block).c_str(), a->out.c_str());
    return 0;
  };
}

}  // namespace longseq::cli
