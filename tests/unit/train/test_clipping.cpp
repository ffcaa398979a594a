// Global-norm clipping keeps the gradient's direction and caps its norm; the logged norm is the
// pre-clip one; grad_clip 0 disables it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model/gpt.h"
#include "runtime/train/train_step.h"
#include "tests/unit/small_train_config.h"

using namespace trainer;

namespace {

// A small model on the cpu, its weights drawn from seed 3, and its train step; every step reads
// the same 16 tokens (fixed_batch).
struct SmallRun {
  explicit SmallRun(config::RunConfig c) : cfg(std::move(c)) {
    gpt.init_weights(3);
    step.emplace(cfg, be, gpt, train::DataParallel{});
  }
  config::RunConfig cfg;
  cpu::CpuBackend be;
  model::GptDims dims = model::GptDims::from_config(cfg.model);
  model::Gpt gpt{be, dims, model::GptShard::whole(dims)};
  std::optional<train::TrainStep> step;
};

void fixed_batch(int32_t* x, int32_t* y) {
  for (int i = 0; i < 16; ++i) x[i] = i % 16, y[i] = (i * 7) % 16;
}

struct Result {
  train::StepResult step;
  std::vector<float> grads;  // the gradient AdamW applied (after clipping), from its first moment
};

Result one_step(double clip) {
  config::RunConfig cfg = testing::small_train_config(16, 8, 1, 16, 2);
  cfg.train.grad_clip = clip;
  cfg.train.weight_decay = 0;
  SmallRun run(cfg);
  model::Gpt& gpt = run.gpt;
  train::TrainStep& step = *run.step;
  Result r{step.run(0, fixed_batch), {}};
  // The clip rides in the update (AdamWParams::grad_scale): after one step from m = 0,
  // m = (1 - beta1) g for the g AdamW read.
  r.grads.resize(static_cast<size_t>(gpt.grads().numel()));
  const train::OwnedState owned = step.owned_state();
  REQUIRE(owned.runs.size() == 1);
  std::copy_n(owned.runs[0].m, r.grads.size(), r.grads.begin());  // (cpu memory)
  const float one_minus_beta1 = 1.0f - static_cast<float>(cfg.train.beta1);
  for (float& g : r.grads) g /= one_minus_beta1;
  return r;
}

double norm_of(const std::vector<float>& g) {
  double s = 0;
  for (float v : g) s += double(v) * v;
  return std::sqrt(s);
}

}  // namespace

TEST_CASE("clipping_caps_the_norm_keeps_the_direction_and_logs_the_preclip_norm", "[train]") {
  const Result free_run = one_step(0.0);
  const double norm = free_run.step.grad_norm;
  REQUIRE_FALSE(free_run.step.clipped);
  REQUIRE(norm_of(free_run.grads) == Approx(norm).epsilon(1e-6));
  const Result clipped = one_step(norm / 4);
  CHECK(clipped.step.clipped);
  CHECK(clipped.step.grad_norm == Approx(norm));  // logged before clipping
  CHECK(norm_of(clipped.grads) == Approx(norm / 4).epsilon(1e-5));
  double cos = 0;
  for (size_t i = 0; i < free_run.grads.size(); ++i)
    cos += double(free_run.grads[i]) * clipped.grads[i];
  cos /= norm_of(free_run.grads) * norm_of(clipped.grads);
  CHECK(cos == Approx(1.0).epsilon(1e-6));
  const Result loose = one_step(norm * 2);
  CHECK_FALSE(loose.step.clipped);
  CHECK(norm_of(loose.grads) == Approx(norm).epsilon(1e-6));
}

// A step whose loss or gradient is not finite (an inf weight here) skips its update: the weights
// stay as they were, bit for bit, and the optimizer's moments stay untouched, so the run goes on
// from the last finite state (train.grad_clip's README entry).
TEST_CASE("a_nonfinite_step_skips_the_update_and_keeps_weights_and_moments", "[train]") {
  SmallRun run(testing::small_train_config(16, 8, 1, 16, 2));
  model::Gpt& gpt = run.gpt;
  train::TrainStep& step = *run.step;
  REQUIRE_FALSE(step.run(0, fixed_batch).nonfinite);  // a finite step first: moments are non-zero
  const train::OwnedState owned = step.owned_state();
  REQUIRE(owned.runs.size() == 1);
  const size_t n = static_cast<size_t>(gpt.params().numel());
  const std::vector<float> m_before(owned.runs[0].m, owned.runs[0].m + n);
  const std::vector<float> v_before(owned.runs[0].v, owned.runs[0].v + n);
  gpt.params().f32()[5] = std::numeric_limits<float>::infinity();  // a token row of wte
  const std::vector<float> params_before(gpt.params().f32(), gpt.params().f32() + n);

  const train::StepResult r = step.run(1, fixed_batch);
  CHECK(r.nonfinite);
  CHECK(std::memcmp(gpt.params().f32(), params_before.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(owned.runs[0].m, m_before.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(owned.runs[0].v, v_before.data(), n * sizeof(float)) == 0);
  CHECK(step.adam_step() == 1);  // the skipped step does not count in the bias correction
}
