// fp8 compute (precision.compute: fp8) on the cpu backend's emulation: the blocks' forward GEMMs
// quantize their bf16 inputs and weights to e4m3 with delayed scaling. Over a few AdamW steps on
// one batch the losses track bf16 compute within a few percent (they are not equal: e4m3 really
// rounds), and both fit the batch; activation recompute (full included) changes no bit; a
// micro-batch cut into pieces inside one amax bracket (a pipeline schedule's) scales as the whole
// one; the checkpointed states are the model's, in global layer order, at any pipeline stage.
#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <vector>

#include "runtime/core/fp8_recipe.h"
#include "runtime/core/rng.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model/gpt.h"
#include "runtime/optim/adamw.h"

using namespace trainer;

namespace {

const model::GptDims kDims{61, 16, 2, 64, 4, 4};  // V, T, L, C, NH, F
constexpr int kB = 4, kT = 16, kSteps = 8;

// The same with a mixture of experts in every block: 4 experts, top 2, some choices dropped.
model::GptDims moe_dims() {
  model::GptDims d = kDims;
  d.num_experts = 4;
  d.top_k = 2;
  d.capacity_factor = 1.0;
  return d;
}

struct Run {
  std::vector<double> losses;
  std::vector<float> final_grads, fp8_states;
  std::vector<float> first_fp8_states;  // after the first step
};

// `pieces`: each step's batch runs as that many forward + backward pieces of kB / pieces
// sequences in one fp8 amax bracket, as a pipeline stage runs a micro-batch's.
Run train_run(bool fp8, model::Recompute recompute, int pieces = 1,
              const model::GptDims& dims = kDims) {
  cpu::CpuBackend be;
  model::Gpt gpt(be, dims, model::GptShard::whole(dims));
  gpt.init_weights(7);
  gpt.set_compute_bf16(true);
  gpt.set_compute_fp8(fp8);
  const int rows = kB / pieces;
  gpt.allocate_activations(rows, kT, recompute);
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
    gpt.begin_fp8_amaxes();
    double loss = 0;
    for (int p = 0; p < pieces; ++p) {
      const size_t at = static_cast<size_t>(p) * rows * kT;
      loss += gpt.forward(x.data() + at, y.data() + at, 1.0f / (kB * kT)) / pieces;
      gpt.backward();
    }
    gpt.end_fp8_amaxes();
    r.losses.push_back(loss);
    if (s == 0) r.first_fp8_states = gpt.fp8_scaling_state();
    adam.step(gpt.params(), gpt.grads(), 3e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, gpt.bf16_copy());
  }
  const Tensor g = gpt.grads();
  r.final_grads.assign(g.f32(), g.f32() + g.numel());
  r.fp8_states = gpt.fp8_scaling_state();
  return r;
}

std::vector<double> train(bool fp8, const model::GptDims& dims) {
  return train_run(fp8, model::Recompute::none, 1, dims).losses;
}

}  // namespace

TEST_CASE("fp8_compute_tracks_bf16_within_a_few_percent", "[model][fp8]") {
  const bool moe = GENERATE(false, true);  // a mixture of experts: its experts' GEMMs in fp8 too
  INFO((moe ? "mixture of experts" : "dense"));
  const model::GptDims dims = moe ? moe_dims() : kDims;
  const std::vector<double> bf16 = train(false, dims), fp8 = train(true, dims);
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
  const bool moe = GENERATE(false, true);
  INFO((moe ? "mixture of experts" : "dense"));
  const model::GptDims dims = moe ? moe_dims() : kDims;
  const Run kept = train_run(true, model::Recompute::none, 1, dims);
  for (const model::Recompute r : {model::Recompute::selective, model::Recompute::full}) {
    INFO("recompute " << static_cast<int>(r));
    const Run rerun = train_run(true, r, 1, dims);
    CHECK(rerun.losses == kept.losses);
    CHECK(rerun.final_grads == kept.final_grads);
    CHECK(rerun.fp8_states == kept.fp8_states);
  }
  CHECK_FALSE(kept.fp8_states.empty());
}

TEST_CASE("fp8_compute_of_a_micro_batch_in_pieces_scales_as_the_whole_one", "[model][fp8]") {
  // A pipeline stage runs a micro-batch as pieces whose forwards and backwards interleave; inside
  // one amax bracket they quantize with the same scales, and the amaxes they raise are the
  // whole batch's, so the states move as one forward's would: the first steps agree within 1e-5
  // (the weight gradients' fp32 sums over fewer rows round differently), and later ones drift
  // as bf16 compute's do once a weight's bf16 rounding flips (here by 2e-4 from step 3: an amax
  // one bf16 step off moves every scale of its layer), held to 1e-3.
  const Run whole = train_run(true, model::Recompute::none);
  for (const int pieces : {2, 4}) {
    INFO(pieces << " pieces");
    const Run cut = train_run(true, model::Recompute::full, pieces);
    REQUIRE(cut.losses.size() == whole.losses.size());
    for (size_t s = 0; s < whole.losses.size(); ++s) {
      INFO("step " << s);
      CHECK(cut.losses[s] == Approx(whole.losses[s]).epsilon(s < 2 ? 1e-5 : 1e-3));
    }
    REQUIRE(cut.first_fp8_states.size() == whole.first_fp8_states.size());
    for (size_t i = 0; i < whole.first_fp8_states.size(); ++i) {
      INFO("state float " << i << " after the first step");
      CHECK(cut.first_fp8_states[i] == Approx(whole.first_fp8_states[i]).epsilon(1e-5));
    }
  }
}

TEST_CASE("fp8_compute_backward_outside_an_amax_bracket_is_refused", "[model][fp8]") {
  cpu::CpuBackend be;
  model::Gpt gpt(be, kDims, model::GptShard::whole(kDims));
  gpt.init_weights(7);
  gpt.set_compute_fp8(true);
  gpt.allocate_activations(kB, kT);
  std::vector<int32_t> tokens(kB * kT, 1);
  gpt.forward(tokens.data(), tokens.data(), 1.0f);
  CHECK_THROWS_WITH(gpt.backward(), Catch::Contains("outside begin_fp8_amaxes()"));
  CHECK_THROWS_WITH(gpt.end_fp8_amaxes(), Catch::Contains("without begin_fp8_amaxes()"));
}

TEST_CASE("fp8_scaling_state_is_the_models_in_global_layer_order_at_every_stage", "[model][fp8]") {
  // A checkpoint holds [n_layer, 4, kFp8StateFloats]; a pipeline stage (interleaved: two chunks)
  // reads and writes its own layers' part of it, whatever grid wrote it.
  const model::GptDims dims{61, 16, 8, 64, 4, 4};
  const size_t per_layer = 4 * size_t{kFp8StateFloats};
  std::vector<float> states(8 * per_layer);
  for (size_t i = 0; i < states.size(); ++i) states[i] = 1.0f + float(i);
  cpu::CpuBackend be;
  std::vector<float> assembled(states.size(), 0.0f);
  for (int stage = 0; stage < 2; ++stage) {
    INFO("stage " << stage);
    const model::GptShard shard = model::GptShard::stage(dims, stage, 2, 0, 1, false, 2);
    model::Gpt gpt(be, dims, shard);
    gpt.set_compute_fp8(true);
    CHECK_FALSE(gpt.set_fp8_scaling_state(std::vector<float>(4 * per_layer, 1.0f)));  // a stage's
    REQUIRE(gpt.set_fp8_scaling_state(states));
    const std::vector<float> mine = gpt.fp8_scaling_state();
    REQUIRE(mine.size() == states.size());
    for (int layer = 0; layer < 8; ++layer) {
      // stage 0 holds blocks 0, 1, 4, 5; stage 1 blocks 2, 3, 6, 7
      const bool held = (layer / 2) % 2 == stage;
      for (size_t i = 0; i < per_layer; ++i) {
        const size_t at = size_t(layer) * per_layer + i;
        CHECK(mine[at] == (held ? states[at] : 0.0f));
        assembled[at] = std::max(assembled[at], mine[at]);
      }
    }
  }
  CHECK(assembled == states);
}

TEST_CASE("fp8_scaling_state_of_experts_is_the_models_at_every_ep_and_pp_rank", "[model][fp8]") {
  // Under a mixture of experts the model's states go on with [n_layer, E, 2 (fc, proj),
  // kFp8StateFloats]; an ep rank holds its experts' part of each of its blocks.
  model::GptDims dims = moe_dims();
  dims.n_layer = 4;
  const size_t F = kFp8StateFloats, dense = 4 * 4 * F, experts = 4 * 4 * 2 * F;
  std::vector<float> states(dense + experts);
  for (size_t i = 0; i < states.size(); ++i) states[i] = 1.0f + float(i);
  cpu::CpuBackend be;
  std::vector<float> assembled(states.size(), 0.0f);
  for (int stage = 0; stage < 2; ++stage)
    for (int ep = 0; ep < 2; ++ep) {
      INFO("stage " << stage << ", ep rank " << ep);
      model::GptShard shard = model::GptShard::stage(dims, stage, 2);
      shard.ep_rank = ep, shard.ep_size = 2;
      model::Gpt gpt(be, dims, shard);
      gpt.set_compute_fp8(true);
      CHECK(gpt.fp8_linears() == 2 * (4 + 2 * 2));  // 2 blocks: 4 linears and 2 experts x 2 each
      CHECK(gpt.fp8_expert_linear(1, 1, 1) == 2 * 4 + (1 * 2 + 1) * 2 + 1);
      REQUIRE(gpt.set_fp8_scaling_state(states));
      const std::vector<float> mine = gpt.fp8_scaling_state();
      REQUIRE(mine.size() == states.size());
      for (size_t at = 0; at < states.size(); ++at) {
        // stage 0 holds blocks 0 and 1, stage 1 blocks 2 and 3; ep rank 0 experts 0 and 1
        const bool expert_part = at >= dense;
        const size_t layer = expert_part ? (at - dense) / (4 * 2 * F) : at / (4 * F);
        const size_t expert = (at - dense) / (2 * F) % 4;
        const bool held = int(layer / 2) == stage && (!expert_part || int(expert / 2) == ep);
        INFO("float " << at);
        CHECK(mine[at] == (held ? states[at] : 0.0f));
        assembled[at] = std::max(assembled[at], mine[at]);
      }
    }
  CHECK(assembled == states);
}

TEST_CASE("fp8_compute_moves_every_experts_own_scaling_states", "[model][fp8]") {
  // Each expert's fc and proj layers quantize with their own states: after training, every
  // expert that took tokens has its input amaxes in its history, and its weight scale from its
  // own weights.
  const Run r = train_run(true, model::Recompute::none, 1, moe_dims());
  const size_t F = kFp8StateFloats, dense = size_t(kDims.n_layer) * 4 * F;
  REQUIRE(r.fp8_states.size() == dense + size_t(kDims.n_layer) * 4 * 2 * F);
  std::vector<float> input_amaxes, weight_scales;
  for (size_t linear = 0; linear < size_t(kDims.n_layer) * 4 * 2; ++linear) {
    const float* s = r.fp8_states.data() + dense + linear * F;
    input_amaxes.push_back(s[0]);  // the newest input amax
    weight_scales.push_back(s[kFp8TensorFloats + kFp8AmaxHistory]);
    INFO("expert linear " << linear);
    CHECK(s[0] > 0.0f);
    CHECK(s[kFp8TensorFloats] > 0.0f);  // the newest weight amax
  }
  // their own: not one state shared by all experts
  CHECK(std::set<float>(input_amaxes.begin(), input_amaxes.end()).size() > 8);
  CHECK(std::set<float>(weight_scales.begin(), weight_scales.end()).size() > 8);
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
  gpt.begin_fp8_amaxes();
  gpt.forward(tokens.data(), tokens.data(), 1.0f);
  gpt.backward();
  gpt.end_fp8_amaxes();
  CHECK(be.allocations == allocations_before_the_step);  // the sums came from the activations
  gpt.set_compute_fp8(false);
  CHECK(gpt.activation_bytes() == bf16);
}
