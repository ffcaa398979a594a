// The whole model's backward (every block op chained, tied embeddings) against central finite
// differences of a float64 reference forward.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model/gpt.h"
#include "tests/unit/model/finite_differences.h"
#include "tests/unit/model/reference_gpt.h"

using namespace trainer;

namespace {

struct Fixture : testing::TokenBatch {
  model::GptDims dims{11, 5, 2, 8, 2, 4};  // V, T, L, C, NH, F
};

using testing::random_params;

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
  testing::check_gradient_against_finite_differences(gpt.layout(), p64, analytic, [&] {
    return testing::reference_gpt_loss<double>(gpt.layout(), p64, f.inputs, f.targets, f.B, f.T);
  });
}
