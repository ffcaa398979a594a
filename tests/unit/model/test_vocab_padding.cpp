// Vocabulary padding (model.make_vocab_size_divisible_by): wte and the logits get rows/columns
// past vocab_size that must change nothing. Against the unpadded model on the same seed and
// tokens: the losses of three AdamW steps and every gradient agree, and the padding rows of wte
// stay exactly zero (no gradient, so no update and no weight decay).
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model/gpt.h"
#include "runtime/optim/adamw.h"

using namespace trainer;

namespace {

constexpr int kB = 3, kT = 8, kSteps = 3;

model::GptDims dims(int vocab_multiple) {
  model::GptDims d{29, 8, 2, 32, 4, 4};  // V, T, L, C, NH, F
  d.vocab_multiple = vocab_multiple;
  return d;
}

struct Run {
  std::vector<double> losses;
  std::vector<std::vector<float>> grads;  // per step, the whole flat buffer
  std::vector<float> params;              // after the last step
  model::ParamLayout layout;
};

Run train(int vocab_multiple) {
  const model::GptDims d = dims(vocab_multiple);
  cpu::CpuBackend be;
  model::Gpt gpt(be, d, model::GptShard::whole(d));
  gpt.init_weights(5);
  gpt.allocate_activations(kB, kT);
  optim::AdamW adam(be, gpt.layout(), 0, gpt.layout().total_numel());
  Run r{{}, {}, {}, gpt.layout()};
  SplitMix64 rng(17);
  std::vector<int32_t> x, y;  // one batch, fitted for a few steps
  for (int i = 0; i < kB * kT; ++i) {
    x.push_back(static_cast<int32_t>(rng.next() % d.vocab));
    y.push_back(static_cast<int32_t>(rng.next() % d.vocab));
  }
  for (int step = 0; step < kSteps; ++step) {
    be.zero(gpt.grads());
    r.losses.push_back(gpt.forward(x.data(), y.data(), 1.0f / (kB * kT)));
    gpt.backward();
    std::vector<float> g(static_cast<size_t>(gpt.grads().numel()));
    be.to_host(g.data(), gpt.grads());
    r.grads.push_back(std::move(g));
    adam.step(gpt.params(), gpt.grads(), 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f);
  }
  r.params.resize(static_cast<size_t>(gpt.params().numel()));
  be.to_host(r.params.data(), gpt.params());
  return r;
}

// The elements of `name` that exist in both layouts (wte: the first vocab_size rows).
void check_param(const Run& a, const Run& b, const std::vector<float>& va,
                 const std::vector<float>& vb, const std::string& name, const char* what) {
  const model::ParamSpec& pa = a.layout.find(name);
  const model::ParamSpec& pb = b.layout.find(name);
  const int64_t n = std::min(pa.numel, pb.numel);
  for (int64_t i = 0; i < n; ++i) {
    const float x = va[static_cast<size_t>(pa.offset + i)],
                y = vb[static_cast<size_t>(pb.offset + i)];
    INFO(what << " " << name << "[" << i << "]: unpadded " << x << ", padded " << y);
    REQUIRE(std::fabs(x - y) <= 1e-6f * (1.0f + std::fabs(x)));
  }
}

}  // namespace

TEST_CASE("vocab_padding_changes_no_loss_gradient_or_weight", "[model]") {
  const Run plain = train(1), padded = train(16);
  const model::GptDims d = dims(16);
  REQUIRE(d.padded_vocab() == 32);
  REQUIRE(plain.layout.find("wte.weight").global_shape[0] == 29);
  REQUIRE(padded.layout.find("wte.weight").global_shape[0] == 32);
  for (int s = 0; s < kSteps; ++s) {
    INFO("step " << s << ": loss unpadded " << plain.losses[size_t(s)] << ", padded "
                 << padded.losses[size_t(s)]);
    CHECK(std::fabs(plain.losses[size_t(s)] - padded.losses[size_t(s)]) <=
          1e-6 * plain.losses[size_t(s)]);
    for (const model::ParamSpec& p : plain.layout.params())
      check_param(plain, padded, plain.grads[size_t(s)], padded.grads[size_t(s)], p.name,
                  "gradient");
  }
  CHECK(plain.losses.back() < plain.losses.front());  // the steps really train
  for (const model::ParamSpec& p : plain.layout.params())
    check_param(plain, padded, plain.params, padded.params, p.name, "weight");
  const model::ParamSpec& wte = padded.layout.find("wte.weight");
  for (int64_t i = int64_t{d.vocab} * d.d_model; i < wte.numel; ++i) {
    INFO("wte padding element " << i);
    REQUIRE(padded.params[static_cast<size_t>(wte.offset + i)] == 0.0f);
    REQUIRE(padded.grads.back()[static_cast<size_t>(wte.offset + i)] == 0.0f);
  }
}
