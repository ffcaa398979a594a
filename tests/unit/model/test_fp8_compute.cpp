// fp8 compute (precision.compute: fp8) on the cpu backend's emulation: the blocks' forward GEMMs
// quantize their bf16 inputs and weights to e4m3 with delayed scaling. Over a few AdamW steps on
// one batch the losses track bf16 compute within a few percent (they are not equal: e4m3 really
// rounds), and both fit the batch.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model/gpt.h"
#include "runtime/optim/adamw.h"

using namespace trainer;

namespace {

const model::GptDims kDims{61, 16, 2, 64, 4, 4};  // V, T, L, C, NH, F
constexpr int kB = 4, kT = 16, kSteps = 8;

std::vector<double> train(bool fp8) {
  cpu::CpuBackend be;
  model::Gpt gpt(be, kDims, model::GptShard::whole(kDims));
  gpt.init_weights(7);
  gpt.set_compute_bf16(true);
  gpt.set_compute_fp8(fp8);
  gpt.allocate_activations(kB, kT);
  optim::AdamW adam(be, gpt.layout(), 0, gpt.layout().total_numel());
  SplitMix64 rng(23);
  std::vector<int32_t> x, y;
  for (int i = 0; i < kB * kT; ++i) {
    x.push_back(static_cast<int32_t>(rng.next() % kDims.vocab));
    y.push_back(static_cast<int32_t>(rng.next() % kDims.vocab));
  }
  std::vector<double> losses;
  for (int s = 0; s < kSteps; ++s) {
    be.zero(gpt.grads());
    losses.push_back(gpt.forward(x.data(), y.data(), 1.0f / (kB * kT)));
    gpt.backward();
    adam.step(gpt.params(), gpt.grads(), 3e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, gpt.bf16_copy());
  }
  return losses;
}

}  // namespace

TEST_CASE("fp8_compute_tracks_bf16_within_a_few_percent", "[model][fp8]") {
  const std::vector<double> bf16 = train(false), fp8 = train(true);
  double worst = 0;
  bool differs = false;
  for (size_t s = 0; s < bf16.size(); ++s) {
    worst = std::max(worst, std::fabs(fp8[s] - bf16[s]) / bf16[s]);
    differs = differs || fp8[s] != bf16[s];
  }
  INFO("loss bf16 " << bf16.front() << " -> " << bf16.back() << ", fp8 " << fp8.front() << " -> "
                    << fp8.back() << "; worst relative difference " << worst);
  CHECK(worst < 0.03);
  CHECK(differs);
  CHECK(fp8.back() < 0.9 * fp8.front());  // fp8 trains
}

TEST_CASE("fp8_compute_refuses_full_recompute", "[model][fp8]") {
  cpu::CpuBackend be;
  model::Gpt gpt(be, kDims, model::GptShard::whole(kDims));
  gpt.set_compute_fp8(true);
  CHECK(gpt.bf16_copy().dtype == DType::bf16);  // fp8 compute is bf16 compute plus fp8 GEMMs
  CHECK_THROWS_WITH(gpt.allocate_activations(kB, kT, model::Recompute::full),
                    Catch::Contains("full activation recompute"));
  gpt.allocate_activations(kB, kT, model::Recompute::selective);  // no linear layer reruns
}
