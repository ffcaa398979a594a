// fp8 compute (precision.compute: fp8) on the cpu backend's emulation: the blocks' forward GEMMs
// quantize their bf16 inputs and weights to e4m3 with delayed scaling. Over a few AdamW steps on
// one batch the losses track bf16 compute within a few percent (they are not equal: e4m3 really
// rounds), and both fit the batch; activation recompute (full included) changes no bit.
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

struct Run {
  std::vector<double> losses;
  std::vector<float> final_grads, fp8_states;
};

Run train_run(bool fp8, model::Recompute recompute) {
  cpu::CpuBackend be;
  model::Gpt gpt(be, kDims, model::GptShard::whole(kDims));
  gpt.init_weights(7);
  gpt.set_compute_bf16(true);
  gpt.set_compute_fp8(fp8);
  gpt.allocate_activations(kB, kT, recompute);
  optim::AdamW adam(be, gpt.layout(), 0, gpt.layout().total_numel());
  SplitMix64 rng(23);
  std::vector<int32_t> x, y;
  for (int i = 0; i < kB * kT; ++i) {
    x.push_back(static_cast<int32_t>(rng.next() % kDims.vocab));
    y.push_back(static_cast<int32_t>(rng.next() % kDims.vocab));
  }
  Run r;
  for (int s = 0; s < kSteps; ++s) {
    be.zero(gpt.grads());
    r.losses.push_back(gpt.forward(x.data(), y.data(), 1.0f / (kB * kT)));
    gpt.backward();
    adam.step(gpt.params(), gpt.grads(), 3e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, gpt.bf16_copy());
  }
  const Tensor g = gpt.grads();
  r.final_grads.assign(g.f32(), g.f32() + g.numel());
  r.fp8_states = gpt.fp8_scaling_state();
  return r;
}

std::vector<double> train(bool fp8) {
  return train_run(fp8, model::Recompute::none).losses;
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
  WARN("loss bf16 " << bf16.front() << " -> " << bf16.back() << ", fp8 " << fp8.front() << " -> "
                    << fp8.back() << "; worst relative difference " << worst);
  CHECK(worst < 0.03);
  CHECK(differs);
  CHECK(fp8.back() < 0.9 * fp8.front());  // fp8 trains
}

TEST_CASE("fp8_compute_under_full_recompute_equals_keeping_activations", "[model][fp8]") {
  // Full recompute reruns each block's forward GEMMs in backward; the scaling states move only
  // after the backward, so the rerun quantizes with the forward's scales and gives the same bits.
  const Run kept = train_run(true, model::Recompute::none);
  for (const model::Recompute r : {model::Recompute::selective, model::Recompute::full}) {
    INFO("recompute " << static_cast<int>(r));
    const Run rerun = train_run(true, r);
    CHECK(rerun.losses == kept.losses);
    CHECK(rerun.final_grads == kept.final_grads);
    CHECK(rerun.fp8_states == kept.fp8_states);
  }
  CHECK_FALSE(kept.fp8_states.empty());
}

TEST_CASE("fp8_compute_counts_its_fp32_sums_in_the_activations", "[model][fp8]") {
  // The fp8 GEMMs' fp32 sums (qkv and fc, [B,T,4C] at the widest) are part of the activations,
  // allocated with them, so the report's activation bytes and `trainer plan` count them.
  // Counts the backend allocations, so a scratch buffer grown during the step (outside the
  // activations' bytes) would show.
  struct CountingBackend : cpu::CpuBackend {
    int allocations = 0;
    void* alloc(size_t bytes) override {
      ++allocations;
      return cpu::CpuBackend::alloc(bytes);
    }
  } be;
  model::Gpt gpt(be, kDims, model::GptShard::whole(kDims));
  gpt.init_weights(7);
  gpt.allocate_activations(kB, kT);
  gpt.set_compute_bf16(true);
  const size_t bf16 = gpt.activation_bytes();
  gpt.set_compute_fp8(true);
  const size_t fp8 = gpt.activation_bytes();
  const size_t sums = size_t{kB} * kT * static_cast<size_t>(kDims.ffn_hidden()) * sizeof(float);
  CHECK(fp8 - bf16 == model::activation_footprint(sums));
  const Shape att = be.attention_state_shape(kB, kDims.n_head, kT, kDims.head_dim());
  CHECK(fp8 == model::Activations::bytes_needed(gpt.layout(), kB, kT, model::Recompute::none,
                                                DType::bf16, att, true));
  std::vector<int32_t> tokens(kB * kT, 1);
  const int allocations_before_the_step = be.allocations;
  gpt.forward(tokens.data(), tokens.data(), 1.0f);
  gpt.backward();
  CHECK(be.allocations == allocations_before_the_step);  // the sums came from the activations
  gpt.set_compute_fp8(false);
  CHECK(gpt.activation_bytes() == bf16);
}
