// Vocabulary padding (model.make_vocab_size_divisible_by): wte and the logits get rows/columns
// past vocab_size that must change nothing. Against the unpadded model on the same seed and
// tokens: the losses of three AdamW steps and every gradient agree to 1e-6, the weights to a
// thousandth of the steps' size (below), and the padding rows of wte stay exactly zero (no
// gradient, so no update and no weight decay).
//
// The two runs' head GEMMs have different widths (29 and 32 columns), so BLAS may cut them into
// different kernels and round the logits differently in the last bit (OpenBLAS's Haswell kernels
// do, its SkylakeX ones did not). AdamW divides each element's gradient by its own scale: an
// element whose gradient is near zero (within the 1e-6 absolute tolerance, but relatively far
// apart) still moves by about a step, and carries that relative difference times the step. The
// key bias's gradient is zero in exact arithmetic (it adds the same q . b_k to every score of a
// row, which softmax ignores): its rounding noise, far below AdamW's eps, moves it by noise times
// lr / eps either way, so its weights are left out of that comparison (its gradients are not).
#include <algorithm>
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
constexpr float kLr = 1e-2f;

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
    adam.step(gpt.params(), gpt.grads(), kLr, 0.9f, 0.95f, 1e-8f, 0.1f);
  }
  r.params.resize(static_cast<size_t>(gpt.params().numel()));
  be.to_host(r.params.data(), gpt.params());
  return r;
}

// The elements of `name` that exist in both layouts (wte: the first vocab_size rows), but for
// those in [skip_from, skip_to), agree within tol * (1 + |unpadded|), or within abs_tol.
void check_param(const Run& a, const Run& b, const std::vector<float>& va,
                 const std::vector<float>& vb, const std::string& name, const char* what, float tol,
                 float abs_tol = 0.0f, int64_t skip_from = 0, int64_t skip_to = 0) {
  const model::ParamSpec& pa = a.layout.find(name);
  const model::ParamSpec& pb = b.layout.find(name);
  const int64_t n = std::min(pa.numel, pb.numel);
  for (int64_t i = 0; i < n; ++i) {
    if (i >= skip_from && i < skip_to) continue;
    const float x = va[static_cast<size_t>(pa.offset + i)],
                y = vb[static_cast<size_t>(pb.offset + i)];
    INFO(what << " " << name << "[" << i << "]: unpadded " << x << ", padded " << y);
    REQUIRE(std::fabs(x - y) <= std::max(tol * (1.0f + std::fabs(x)), abs_tol));
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
                  "gradient", 1e-6f);
  }
  CHECK(plain.losses.back() < plain.losses.front());  // the steps really train
  for (const model::ParamSpec& p : plain.layout.params()) {
    const bool qkv_bias = p.name.find("attn.c_attn.bias") != std::string::npos;
    check_param(plain, padded, plain.params, padded.params, p.name, "weight", 1e-6f,
                1e-3f * kSteps * kLr, qkv_bias ? d.d_model : 0, qkv_bias ? 2 * d.d_model : 0);
  }
  const model::ParamSpec& wte = padded.layout.find("wte.weight");
  for (int64_t i = int64_t{d.vocab} * d.d_model; i < wte.numel; ++i) {
    INFO("wte padding element " << i);
    REQUIRE(padded.params[static_cast<size_t>(wte.offset + i)] == 0.0f);
    REQUIRE(padded.grads.back()[static_cast<size_t>(wte.offset + i)] == 0.0f);
  }
}
