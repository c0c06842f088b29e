// Checkpoint I/O: atomic safetensors writes (tmp, fsync, rename) and reads of models of growing
// size, as the trainer writes them (model + 2 AdamW moments = 3 files' worth of fp32). Reports
// seconds and MB/s (best of --reps). Writes JSON to --out, prints a table.
//   checkpoint_bench [--out PATH] [--dir DIR] [--reps R]
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "longseq/core/error.hpp"
#include "longseq/core/rng.hpp"
#include "longseq/core/safetensors.hpp"
#include "longseq/core/timer.hpp"

using namespace longseq;

int main(int argc, char** argv) {
  std::string out = "bench_checkpoint.json", dir = "/tmp";
  int reps = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      core::require(i + 1 < argc, "checkpoint_bench", a, " needs a value");
      return argv[++i];
    };
    if (a == "--out")
      out = next();
    else if (a == "--dir")
      dir = next();
    else if (a == "--reps")
      reps = std::stoi(next());
    else {
      std::printf(
          "usage: checkpoint_bench [--out PATH (bench_checkpoint.json)] [--dir DIR (/tmp)] "
          "[--reps R (3)]\n");
      return a == "--help" ? 0 : 2;
    }
  }
  nlohmann::json cases = nlohmann::json::array();
  const std::string path = dir + "/checkpoint_bench.safetensors";
  std::printf("%12s %8s %10s %10s %10s %10s\n", "floats", "tensors", "write s", "write MB/s",
              "read s", "read MB/s");
  for (int64_t millions : {1, 16, 64}) {
    const int64_t per = 64 * 1024, nt = millions * 1024 * 1024 / per;
    std::vector<float> data(static_cast<size_t>(per * nt));
    core::fill_normal(data.data(), data.size(), 5);
    std::vector<core::SafeTensorRef> refs;
    for (int64_t i = 0; i < nt; ++i)
      refs.push_back({"model.layers." + std::to_string(i) + ".w",
                      core::DType::f32,
                      {256, 256},
                      data.data() + i * per});
    double wbest = 1e30, rbest = 1e30;
    for (int r = 0; r < reps; ++r) {
      core::Timer t;
      core::write_safetensors(path, refs, {{"format", "pt"}});
      wbest = std::min(wbest, t.elapsed());
      t.restart();
      const auto f = core::read_safetensors(path);
      rbest = std::min(rbest, t.elapsed());
      core::require(f.tensors.size() == refs.size(), "checkpoint_bench", "read back ",
                    f.tensors.size(), " tensors of ", refs.size());
    }
    const double mb = data.size() * 4.0 / 1e6;
    std::printf("%12lld %8lld %10.3f %10.1f %10.3f %10.1f\n", (long long)data.size(), (long long)nt,
                wbest, mb / wbest, rbest, mb / rbest);
    cases.push_back({{"floats", data.size()},
                     {"tensors", nt},
                     {"bytes", data.size() * 4},
                     {"write_s", wbest},
                     {"write_MBps", mb / wbest},
                     {"read_s", rbest},
                     {"read_MBps", mb / rbest}});
  }
  std::filesystem::remove(path);
  nlohmann::json j = {{"bench", "checkpoint"}, {"dir", dir}, {"reps", reps}, {"cases", cases}};
  std::ofstream f(out);
  core::require(static_cast<bool>(f), "checkpoint_bench", "cannot write --out ", out);
  f << j.dump(2) << "\n";
  return 0;
}
