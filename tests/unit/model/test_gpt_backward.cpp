// The whole model's backward (every block op chained, tied embeddings) against central finite
// differences of a float64 reference forward.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model/gpt.h"
#include "tests/unit/model/reference_gpt.h"

using namespace trainer;

namespace {

struct Fixture {
  model::GptDims dims{11, 5, 2, 8, 2, 4};  // V, T, L, C, NH, F
  int B = 2, T = 5;
  std::vector<int32_t> inputs, targets;
  Fixture() {
    SplitMix64 rng(99);
    for (int i = 0; i < B * T; ++i) {
      inputs.push_back(static_cast<int32_t>(rng.next() % 11));
      targets.push_back(static_cast<int32_t>(rng.next() % 11));
    }
  }
};

// Random (not GPT-2 init) weights of a larger scale so every path carries signal: zero biases
// and unit norms would hide their own gradient bugs.
std::vector<float> random_params(int64_t n) {
  SplitMix64 rng(5);
  std::vector<float> p(static_cast<size_t>(n));
  for (float& v : p) v = static_cast<float>(0.3 * rng.normal());
  return p;
}

}  // namespace

TEST_CASE("gpt_forward_loss_matches_float64_reference", "[model]") {
  Fixture f;
  cpu::CpuBackend be;
  model::Gpt gpt(be, f.dims, model::GptShard::whole(f.dims));
  const auto p32 = random_params(gpt.layout().total_numel());
  be.from_host(gpt.params(), p32.data());
  gpt.allocate_activations(f.B, f.T);
  const double loss = gpt.forward(f.inputs.data(), f.targets.data(), 0.0f);
  const std::vector<double> p64(p32.begin(), p32.end());
  const double ref =
      testing::reference_gpt_loss<double>(gpt.layout(), p64, f.inputs, f.targets, f.B, f.T);
  INFO("fp32 model " << loss << " vs float64 reference " << ref);
  REQUIRE(std::abs(loss - ref) <= 1e-5 * std::abs(ref));
}

TEST_CASE("gpt_backward_matches_float64_finite_differences", "[model]") {
  Fixture f;
  cpu::CpuBackend be;
  model::Gpt gpt(be, f.dims, model::GptShard::whole(f.dims));
  const int64_t n = gpt.layout().total_numel();
  const auto p32 = random_params(n);
  be.from_host(gpt.params(), p32.data());
  gpt.allocate_activations(f.B, f.T);
  be.zero(gpt.grads());
  gpt.forward(f.inputs.data(), f.targets.data(), 1.0f / static_cast<float>(f.B * f.T));
  gpt.backward();
  std::vector<float> analytic(static_cast<size_t>(n));
  be.to_host(analytic.data(), gpt.grads());

  std::vector<double> p64(p32.begin(), p32.end());
  const double h = 1e-6;
  for (const auto& spec : gpt.layout().params()) {
    double num = 0, den = 0, max_abs = 0;
    for (int64_t i = spec.offset; i < spec.offset + spec.numel; ++i) {
      const double keep = p64[static_cast<size_t>(i)];
      p64[static_cast<size_t>(i)] = keep + h;
      const double up =
          testing::reference_gpt_loss<double>(gpt.layout(), p64, f.inputs, f.targets, f.B, f.T);
      p64[static_cast<size_t>(i)] = keep - h;
      const double down =
          testing::reference_gpt_loss<double>(gpt.layout(), p64, f.inputs, f.targets, f.B, f.T);
      p64[static_cast<size_t>(i)] = keep;
      const double fd = (up - down) / (2 * h);
      const double diff = analytic[static_cast<size_t>(i)] - fd;
      num += diff * diff;
      den += fd * fd;
      max_abs = std::max(max_abs, std::abs(diff));
    }
    const double rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-12);
    INFO(spec.name << ": relative error " << rel << " (max abs " << max_abs << ", |fd| "
                   << std::sqrt(den) << ")");
    CHECK(rel < 1e-4);
  }
}
