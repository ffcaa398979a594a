// bf16 compute (precision.compute: bf16): the matmuls read a bf16 weight copy and bf16
// activations, everything else stays fp32. Against the fp32 model on the same weights and
// tokens: the loss and the gradients move by bf16 rounding (a few 1e-3, not 0, not more), and the
// matmul-input tensors, the MLP's pre-activation, qkv and the logits take half their fp32 bytes.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model/gpt.h"

using namespace trainer;

namespace {

const model::GptDims kDims{29, 8, 3, 32, 4, 4};  // V, T, L, C, NH, F
constexpr int kB = 3, kT = 8;

struct Outcome {
  double loss = 0;
  std::vector<float> grads;
  size_t activation_bytes = 0;
  DType ln1_dtype = DType::f32;
};

Outcome run(bool bf16) {
  cpu::CpuBackend be;
  model::Gpt gpt(be, kDims, model::GptShard::whole(kDims));
  gpt.init_weights(3);
  gpt.allocate_activations(kB, kT);
  gpt.set_compute_bf16(bf16);  // after allocation: the activations are reallocated
  be.zero(gpt.grads());
  SplitMix64 rng(11);
  std::vector<int32_t> x, y;
  for (int i = 0; i < kB * kT; ++i) {
    x.push_back(static_cast<int32_t>(rng.next() % kDims.vocab));
    y.push_back(static_cast<int32_t>(rng.next() % kDims.vocab));
  }
  Outcome out;
  out.loss = gpt.forward(x.data(), y.data(), 1.0f / (kB * kT));
  gpt.backward();
  out.grads.resize(static_cast<size_t>(gpt.grads().numel()));
  be.to_host(out.grads.data(), gpt.grads());
  out.activation_bytes = gpt.activation_bytes();
  out.ln1_dtype = gpt.activations().blocks[0].ln1.dtype;
  return out;
}

}  // namespace

TEST_CASE("bf16_compute_tracks_fp32_within_bf16_rounding", "[model][bf16]") {
  const Outcome f = run(false), b = run(true);
  CHECK(f.ln1_dtype == DType::f32);
  CHECK(b.ln1_dtype == DType::bf16);

  const double loss_rel = std::fabs(b.loss - f.loss) / f.loss;
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < f.grads.size(); ++i) {
    diff2 += std::pow(double(b.grads[i]) - f.grads[i], 2);
    ref2 += std::pow(double(f.grads[i]), 2);
  }
  const double grad_rel = std::sqrt(diff2 / ref2);
  INFO("loss fp32 " << f.loss << " bf16 " << b.loss << " (rel " << loss_rel
                    << "); gradient relative L2 difference " << grad_rel);
  CHECK(loss_rel < 1e-2);
  CHECK(grad_rel < 5e-2);
  CHECK(grad_rel > 1e-5);  // bf16 really rounds

  // ln1, atty, ln2, fch, fch_gelu, qkv per layer, and lnf, the gradients dqkv and dfch and the
  // logits once, each [B,T,width] at 2 bytes instead of 4; less the bf16 copy of the residual
  // gradient [B,T,C] that only bf16 compute keeps (GradScratch::dresidual_mm).
  const size_t rows = size_t{kB} * kT, C = static_cast<size_t>(kDims.d_model);
  const size_t F = static_cast<size_t>(kDims.ffn_hidden());
  auto halved = [&](size_t width) {
    return model::activation_footprint(rows * width * 4) -
           model::activation_footprint(rows * width * 2);
  };
  size_t saved = 0;
  for (size_t width : {C, C, C, F, F, 3 * C}) saved += halved(width);
  saved *= static_cast<size_t>(kDims.n_layer);
  saved +=
      halved(C) + halved(3 * C) + halved(F) + halved(static_cast<size_t>(kDims.padded_vocab()));
  saved -= model::activation_footprint(rows * C * 2);
  CHECK(f.activation_bytes - b.activation_bytes == saved);
}
