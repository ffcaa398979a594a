#pragma once
// Activations: every tensor the forward pass saves for backward, for one micro-batch of B
// sequences of T tokens, in one allocation. Sizes follow llm.c's ActivationTensors.
#include <cstdint>
#include <vector>

#include "runtime/core/backend.h"
#include "runtime/model/param_layout.h"

namespace trainer::model {

struct BlockActivations {
  Tensor residual_in;              // [B,T,C] block input (points into the previous block's output)
  Tensor ln1, ln1_mean, ln1_rstd;  // [B,T,C], [B,T], [B,T]
  Tensor qkv;                      // [B,T,3C/tp]
  Tensor atty;                     // [B,T,C/tp] attention output before projection
  Tensor att;                      // [B,NH/tp,T,T] softmax probabilities
  Tensor residual_mid;             // [B,T,C] x + attn(x)
  Tensor ln2, ln2_mean, ln2_rstd;
  Tensor fch, fch_gelu;  // [B,T,4C/tp]
  Tensor residual_out;   // [B,T,C]
};

struct GradScratch {
  Tensor dresidual;                          // [B,T,C] running gradient of the residual stream
  Tensor dln, dqkv, datty, dfch, dfch_gelu;  // per-block temporaries, reused by every block
};

class Activations {
 public:
  Activations(Backend& be, const ParamLayout& layout, int B, int T);
  ~Activations();
  Activations(const Activations&) = delete;
  Activations& operator=(const Activations&) = delete;

  int B, T;
  Tensor inputs, targets;  // [B,T] int32
  Tensor encoded;          // [B,T,C] embedding output
  std::vector<BlockActivations> blocks;
  Tensor lnf, lnf_mean, lnf_rstd;
  Tensor logits;  // [B,T,V] (dlogits after a training forward)
  Tensor losses;  // [B,T]
  GradScratch grad;
  size_t bytes() const { return bytes_; }

 private:
  Backend& be_;
  void* memory_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace trainer::model
