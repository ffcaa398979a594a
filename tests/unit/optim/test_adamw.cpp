// AdamW over a range of the flat buffer (a ZeRO shard) against a float64 AdamW written from the
// formula (torch.optim.AdamW's: bias-corrected moments, eps outside the square root, decay
// decoupled and scaled by lr), with each element's decay taken from its ParamSpec: matrices and
// embeddings decay, biases and norms do not.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model/param_layout.h"
#include "runtime/optim/adamw.h"

using namespace trainer;

TEST_CASE("adamw_matches_a_float64_adamw_with_decay_per_param", "[optim]") {
  model::GptDims dims;
  dims.vocab = 32, dims.seq_len = 8, dims.n_layer = 1, dims.d_model = 16, dims.n_head = 2;
  const model::ParamLayout layout(dims, model::GptShard::whole(dims));
  const int64_t total = layout.total_numel();
  // a range that starts inside a tensor and ends inside another, crossing decay and no-decay runs
  const int64_t begin = layout.params()[0].numel / 2, end = total - 7;
  const int64_t n = end - begin;
  std::vector<bool> decays(static_cast<size_t>(total));
  for (const model::ParamSpec& p : layout.params())
    for (int64_t i = p.offset; i < p.offset + p.numel; ++i) decays[size_t(i)] = p.weight_decay;
  REQUIRE(std::count(decays.begin() + begin, decays.begin() + end, true) > 0);
  REQUIRE(std::count(decays.begin() + begin, decays.begin() + end, false) > 0);

  SplitMix64 rng(5);
  std::vector<float> params(static_cast<size_t>(n));
  for (float& p : params) p = static_cast<float>(rng.normal());
  std::vector<double> ref_p(params.begin(), params.end()), ref_m(size_t(n), 0), ref_v(size_t(n), 0);
  const double lr = 0.01, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, wd = 0.1, scale = 0.5;

  cpu::CpuBackend be;
  optim::AdamW adam(be, layout, begin, end);
  for (int t = 1; t <= 3; ++t) {
    std::vector<float> grads(static_cast<size_t>(n));
    for (float& g : grads) g = static_cast<float>(rng.normal());
    adam.step(Tensor(params.data(), {n}), Tensor(grads.data(), {n}), float(lr), float(beta1),
              float(beta2), float(eps), float(wd), Tensor(), float(scale));
    for (size_t i = 0; i < size_t(n); ++i) {
      const double g = double(grads[i]) * scale;
      ref_m[i] = beta1 * ref_m[i] + (1 - beta1) * g;
      ref_v[i] = beta2 * ref_v[i] + (1 - beta2) * g * g;
      const double mhat = ref_m[i] / (1 - std::pow(beta1, t));
      const double vhat = ref_v[i] / (1 - std::pow(beta2, t));
      const double decay = decays[size_t(begin) + i] ? wd : 0.0;
      ref_p[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + decay * ref_p[i]);
    }
  }
  CHECK(adam.step_count() == 3);
  double worst = 0;
  for (size_t i = 0; i < size_t(n); ++i)
    worst = std::max(worst, std::abs(double(params[i]) - ref_p[i]) / (std::abs(ref_p[i]) + 1e-3));
  CHECK(worst < 1e-5);
}
