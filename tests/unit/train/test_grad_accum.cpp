// Gradient accumulation: grad_accum micro-batches of B/k sequences make exactly the update of one
// micro-batch of B sequences (the loss is a mean over the same tokens).
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model/gpt.h"
#include "runtime/train/train_step.h"
#include "tests/unit/small_train_config.h"

using namespace trainer;

namespace {

config::RunConfig small_config(int micro_batch, int grad_accum) {
  config::RunConfig cfg = testing::small_train_config();
  cfg.train.micro_batch = micro_batch;
  cfg.train.grad_accum = grad_accum;
  cfg.train.grad_clip = 1.0;
  return cfg;
}

struct Outcome {
  std::vector<double> losses, grad_norms;
  std::vector<float> weights;
};

// Trains `steps` steps, each on the same fixed table of 8 sequences, served in order.
Outcome train_run(const config::RunConfig& cfg, int steps) {
  cpu::CpuBackend be;
  const auto dims = model::GptDims::from_config(cfg.model);
  model::Gpt gpt(be, dims, model::GptShard::whole(dims));
  gpt.init_weights(cfg.run.seed);
  train::TrainStep step(cfg, be, gpt, {});
  const int T = cfg.model.seq_len;
  SplitMix64 rng(11);
  std::vector<int32_t> tokens(static_cast<size_t>(8 * T + 1));
  for (auto& t : tokens) t = static_cast<int32_t>(rng.next() % 32);
  size_t pos = 0;
  train::BatchSource next = [&](int32_t* x, int32_t* y) {
    const size_t n = static_cast<size_t>(cfg.train.micro_batch) * T;
    for (size_t i = 0; i < n; ++i) {
      x[i] = tokens[pos + i];
      y[i] = tokens[pos + i + 1];
    }
    pos += n;
  };
  Outcome out;
  for (int s = 0; s < steps; ++s) {
    pos = 0;
    const auto r = step.run(s, next);
    out.losses.push_back(r.loss);
    out.grad_norms.push_back(r.grad_norm);
  }
  out.weights.resize(static_cast<size_t>(gpt.params().numel()));
  be.to_host(out.weights.data(), gpt.params());
  return out;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("grad_accum_4x2_equals_micro_batch_8", "[train]") {
  const Outcome one = train_run(small_config(8, 1), 3);
  const Outcome accum = train_run(small_config(2, 4), 3);
  for (size_t s = 0; s < one.losses.size(); ++s) {
    INFO("step " << s << ": loss " << one.losses[s] << " vs " << accum.losses[s] << ", grad norm "
                 << one.grad_norms[s] << " vs " << accum.grad_norms[s]);
    CHECK(std::abs(one.losses[s] - accum.losses[s]) <= 1e-5 * std::abs(one.losses[s]));
    CHECK(std::abs(one.grad_norms[s] - accum.grad_norms[s]) <= 1e-5 * one.grad_norms[s]);
  }
  const double d = rel_diff(accum.weights, one.weights);
  INFO("updated weights differ by " << d << " (relative L2)");
  REQUIRE(d < 1e-5);
}

TEST_CASE("training_lowers_the_loss", "[train]") {
  const Outcome o = train_run(small_config(8, 1), 30);
  INFO("first " << o.losses.front() << " last " << o.losses.back());
  // Random tokens over 32 symbols: the loss falls from ~ln(32) as the model memorises the table.
  REQUIRE(o.losses.front() == Approx(std::log(32.0)).margin(0.3));
  REQUIRE(o.losses.back() < o.losses.front() - 0.3);
}
