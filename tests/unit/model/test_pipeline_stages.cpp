// Pipeline stages inside the model: a GPT cut into stages (GptShard::stage), each with its own
// backend, its input copied from the previous stage's stage_output() and its output gradient from
// the next stage's stage_input_grad(), gives the whole model's losses and gradients. Two
// micro-batches run as a pipeline stage runs them, both forwards before either backward, each in
// its own activation slot. Every block's gradient is bit-identical to the whole model's (the same
// ops on the same inputs, accumulated in the same order); the tied wte's is the sum of the first
// stage's (embedding) and the last stage's (head) parts, which the whole model adds in another
// order (fp32 rounding). In bf16 compute a later stage rounds the received gradient for its
// GEMMs itself, as the whole model's final layernorm backward would.
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model/gpt.h"

using namespace trainer;

namespace {

const model::GptDims kDims{29, 8, 4, 32, 4, 4};  // V, T, L, C, NH, F
constexpr int kB = 2, kT = 8, kMicro = 2;

struct Outcome {
  std::vector<double> losses;
  std::vector<std::vector<float>> grads;  // by parameter, the whole model's layout order
};

std::vector<int32_t> tokens(SplitMix64& rng) {
  std::vector<int32_t> t;
  for (int i = 0; i < kB * kT; ++i) t.push_back(static_cast<int32_t>(rng.next() % kDims.vocab));
  return t;
}

std::vector<float> host(cpu::CpuBackend& be, const Tensor& t) {
  std::vector<float> h(static_cast<size_t>(t.numel()));
  be.to_host(h.data(), t);
  return h;
}

// pp 1: the whole model, forward and backward of each micro-batch in turn.
Outcome run(int pp, bool bf16, model::Recompute recompute) {
  std::vector<std::unique_ptr<cpu::CpuBackend>> be;
  std::vector<std::unique_ptr<model::Gpt>> stage;
  for (int s = 0; s < pp; ++s) {
    be.push_back(std::make_unique<cpu::CpuBackend>());
    stage.push_back(
        std::make_unique<model::Gpt>(*be[s], kDims, model::GptShard::stage(kDims, s, pp)));
    stage[s]->init_weights(11);
    stage[s]->set_compute_bf16(bf16);
    stage[s]->allocate_activations(kB, kT, recompute, pp > 1 ? kMicro : 1);
    be[s]->zero(stage[s]->grads());
  }
  SplitMix64 rng(5);
  std::vector<std::vector<int32_t>> x, y;
  for (int m = 0; m < kMicro; ++m) x.push_back(tokens(rng)), y.push_back(tokens(rng));
  const float scale = 1.0f / (kMicro * kB * kT);
  Outcome out;
  auto forward = [&](int m) {
    double loss = 0;
    for (int s = 0; s < pp; ++s) {
      if (pp > 1) stage[s]->use_activation_slot(m);
      if (s > 0) {
        const std::vector<float> act = host(*be[s - 1], stage[s - 1]->stage_output());
        be[s]->from_host(stage[s]->stage_input(), act.data());
      }
      loss = stage[s]->forward(x[m].data(), y[m].data(), scale);
      if (s < pp - 1) CHECK(loss == 0);  // only the last stage has a loss
    }
    out.losses.push_back(loss);
  };
  auto backward = [&](int m) {
    for (int s = pp - 1; s >= 0; --s) {
      if (pp > 1) stage[s]->use_activation_slot(m);
      if (s < pp - 1) {
        const std::vector<float> grad = host(*be[s + 1], stage[s + 1]->stage_input_grad());
        be[s]->from_host(stage[s]->stage_output_grad(), grad.data());
      }
      stage[s]->backward();
    }
  };
  if (pp == 1) {
    for (int m = 0; m < kMicro; ++m) forward(m), backward(m);
  } else {
    for (int m = 0; m < kMicro; ++m) forward(m);
    for (int m = 0; m < kMicro; ++m) backward(m);
  }
  const model::ParamLayout whole(kDims, model::GptShard::whole(kDims));
  for (const model::ParamSpec& p : whole.params()) {
    std::vector<float> sum(static_cast<size_t>(p.numel), 0.0f);
    int holders = 0;
    for (int s = 0; s < pp; ++s) {
      const model::ParamLayout& l = stage[s]->layout();
      for (const model::ParamSpec& q : l.params()) {
        if (q.name != p.name) continue;
        ++holders;
        const std::vector<float> g = host(*be[s], stage[s]->grad(q));
        for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
      }
    }
    INFO(p.name << " is held by " << holders << " stages");
    CHECK(holders == (p.name == "wte.weight" && pp > 1 ? 2 : 1));
    out.grads.push_back(sum);
  }
  return out;
}

}  // namespace

TEST_CASE("pipeline_stages_match_the_whole_model", "[model][pp]") {
  for (const bool bf16 : {false, true})
    for (const model::Recompute recompute : {model::Recompute::none, model::Recompute::full}) {
      INFO("bf16 " << bf16 << ", recompute " << static_cast<int>(recompute));
      const Outcome whole = run(1, bf16, recompute);
      for (const int pp : {2, 4}) {
        INFO("pp " << pp);
        const Outcome piped = run(pp, bf16, recompute);
        CHECK(piped.losses == whole.losses);
        const model::ParamLayout layout(kDims, model::GptShard::whole(kDims));
        for (size_t i = 0; i < layout.params().size(); ++i) {
          const std::string& name = layout.params()[i].name;
          INFO(name);
          if (name != "wte.weight") {
            CHECK(piped.grads[i] == whole.grads[i]);
            continue;
          }
          double diff = 0, norm = 0;
          for (size_t j = 0; j < whole.grads[i].size(); ++j) {
            diff = std::max(diff, std::fabs(double{piped.grads[i][j]} - whole.grads[i][j]));
            norm = std::max(norm, std::fabs(double{whole.grads[i][j]}));
          }
          CHECK(diff <= 1e-6 * norm);
        }
      }
    }
}

TEST_CASE("pipeline_stages_hold_their_blocks_and_the_tied_embedding", "[model][pp]") {
  const model::ParamLayout first(kDims, model::GptShard::stage(kDims, 0, 2));
  const model::ParamLayout last(kDims, model::GptShard::stage(kDims, 1, 2));
  CHECK(first.shard().first_layer == 0);
  CHECK(first.shard().num_layers == 2);
  CHECK(last.shard().first_layer == 2);
  CHECK_NOTHROW(first.find("wpe.weight"));
  CHECK_THROWS(last.find("wpe.weight"));
  CHECK_NOTHROW(last.find("wte.weight"));  // the head's copy
  CHECK_NOTHROW(last.find("ln_f.weight"));
  CHECK_THROWS(first.find("ln_f.weight"));
  CHECK_THROWS(first.find("h.2.ln_1.weight"));
  CHECK_NOTHROW(last.find("h.3.mlp.c_proj.weight"));
}

TEST_CASE("interleaved_stages_hold_every_pp_th_chunk_in_ascending_layout_order", "[model][pp]") {
  // 8 blocks, pp 2, 2 chunks a stage: chunks of 2 blocks, stage 0 holds blocks 0-1 and 4-5 (and
  // the embeddings), stage 1 blocks 2-3 and 6-7 (and the head). Every block is held once, and a
  // stage's units come in ascending order (the gradient buckets' and ZeRO's contiguous ranges).
  model::GptDims d = kDims;
  d.n_layer = 8;
  const std::vector<std::vector<int>> want = {{0, 1, 4, 5}, {2, 3, 6, 7}};
  std::vector<int> held(8, 0);
  for (int s = 0; s < 2; ++s) {
    INFO("stage " << s);
    const model::GptShard shard = model::GptShard::stage(d, s, 2, 0, 1, false, 2);
    CHECK(shard.chunks == 2);
    CHECK(shard.layers_per_chunk() == 2);
    std::vector<int> got;
    for (int l = 0; l < shard.num_layers; ++l) got.push_back(shard.global_layer(l));
    CHECK(got == want[static_cast<size_t>(s)]);
    const model::ParamLayout layout(d, shard);
    int last_unit = -1;
    for (const model::ParamSpec& p : layout.params()) {
      CHECK(p.unit >= last_unit);
      last_unit = p.unit;
    }
    for (const int l : got) {
      CHECK_NOTHROW(layout.find("h." + std::to_string(l) + ".attn.c_attn.weight"));
      ++held[static_cast<size_t>(l)];
    }
    CHECK(layout.shard().has_embedding == (s == 0));
    CHECK(layout.shard().has_head == (s == 1));
    CHECK(shard.last_global_layer() == (s == 0 ? 5 : 7));
  }
  CHECK(held == std::vector<int>(8, 1));
  // A shard with no blocks: its last block is the one before its first (no division by zero).
  model::GptShard none = model::GptShard::whole(d);
  none.num_layers = 0;
  CHECK(none.last_global_layer() == -1);
}
