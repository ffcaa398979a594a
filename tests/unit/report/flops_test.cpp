// Parameter and FLOP counts against GPT-2's published tensor shapes; MFU against its definition.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/report/flops.h"

using namespace trainer::report;

namespace {

// Hugging Face gpt2 state-dict shapes (one block's tensors, then the embeddings and final ln).
int64_t numel(std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

struct Gpt2Reference {
  int64_t total, non_embedding;
};

Gpt2Reference gpt2_reference(int64_t V, int64_t T, int64_t L, int64_t C) {
  const std::vector<std::vector<int64_t>> block = {{C},        {C},      // ln_1 weight, bias
                                                   {C, 3 * C}, {3 * C},  // attn.c_attn
                                                   {C, C},     {C},      // attn.c_proj
                                                   {C},        {C},      // ln_2
                                                   {C, 4 * C}, {4 * C},  // mlp.c_fc
                                                   {4 * C, C}, {C}};     // mlp.c_proj
  int64_t per_block = 0;
  for (const auto& s : block) per_block += numel(s);
  const int64_t ln_f = 2 * C;
  const int64_t non_embedding = L * per_block + ln_f;
  return {numel({V, C}) + numel({T, C}) + non_embedding, non_embedding};
}

const ModelDims kGpt2Small{50257, 1024, 12, 768, 4};

}  // namespace

TEST_CASE("gpt2_124m_param_count_matches_hf_tensor_shapes", "[flops]") {
  const Gpt2Reference ref = gpt2_reference(50257, 1024, 12, 768);
  const ParamCounts p = count_params(kGpt2Small);
  INFO("counted total " << p.total << " reference " << ref.total);
  CHECK(p.total == ref.total);
  CHECK(p.total == 124439808);  // the figure llm.c prints for gpt2-124M
  CHECK(p.non_embedding == ref.non_embedding);
  CHECK(p.embedding == p.total - p.non_embedding);
}

TEST_CASE("flops_per_token_is_6n_plus_attention_term", "[flops]") {
  const Gpt2Reference ref = gpt2_reference(50257, 1024, 12, 768);
  // PaLM appendix B: 6N + 12 * L * (heads * head_dim) * T, heads * head_dim = d_model.
  const double expected = 6.0 * double(ref.non_embedding) + 12.0 * 12 * 768 * 1024;
  INFO("flops_per_token " << flops_per_token(kGpt2Small) << " expected " << expected);
  CHECK(flops_per_token(kGpt2Small) == Approx(expected).epsilon(1e-12));
}

TEST_CASE("ffn_mult_scales_only_the_mlp", "[flops]") {
  ModelDims d = kGpt2Small;
  const int64_t f4 = count_block_params(d);
  d.ffn_mult = 2;
  const int64_t f2 = count_block_params(d);
  const int64_t C = d.d_model;
  // Halving the hidden width removes 2*C*C weights of each MLP matrix and 2*C of c_fc's bias.
  CHECK(f4 - f2 == 2 * (2 * C * C) + 2 * C);
}

TEST_CASE("mfu_is_achieved_flops_over_peak_of_all_devices", "[flops]") {
  const double fpt = flops_per_token(kGpt2Small);
  const int devices = 8;
  const double tokens_per_step = 524288, step_time_s = 0.5, peak_tflops = 989;
  const double achieved_flops_per_s = fpt * tokens_per_step / step_time_s;
  const double expected = achieved_flops_per_s / (peak_tflops * 1e12 * devices);
  const double got = mfu(fpt, tokens_per_step / step_time_s, peak_tflops, devices);
  INFO("mfu " << got << " expected " << expected);
  CHECK(got == Approx(expected).epsilon(1e-12));
  CHECK(tflops_per_device(fpt, tokens_per_step / step_time_s, devices) ==
        Approx(achieved_flops_per_s / devices / 1e12));
}

TEST_CASE("mfu_is_nan_when_the_peak_is_unknown", "[flops]") {
  CHECK(std::isnan(mfu(1e9, 1e4, 0, 1)));
}
