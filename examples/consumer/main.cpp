// Trains the "tiny" preset for one step through the installed library and prints the loss: the
// smallest program that needs the headers, the libraries, their dependencies and the data.
#include <cstdio>
#include <cstdlib>

#include "longseq/core/error.hpp"
#include "longseq/model/config.hpp"
#include "longseq/train/trainer.hpp"

int main() {
  setenv("LONGSEQ_DATA_DIR", CONSUMER_DATA_DIR, /*overwrite=*/0);
  try {
    longseq::train::TrainConfig c = longseq::train::preset("tiny");
    c.steps = 1;
    c.seq = 64;
    c.threads = 1;
    c.quiet = true;
    c.save_every = -1;
    const longseq::train::TrainSummary s = longseq::train::train(c);
    const longseq::model::ParamLayout layout(c.model);
    std::printf("consumer: %s, %lld parameters, step 0 loss %.4f\n", c.model.describe().c_str(),
                static_cast<long long>(layout.num_parameters()), s.steps.at(0).loss);
    return s.steps.at(0).loss > 0 ? 0 : 1;
  } catch (const longseq::core::Error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
