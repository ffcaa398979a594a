#pragma once
// AdamW over a flat fp32 parameter buffer (or a shard of it): fp32 moments, decoupled weight
// decay applied only to the ParamSpecs marked weight_decay (matrices, embeddings).
#include <cstdint>
#include <vector>

#include "runtime/core/backend.h"
#include "runtime/model/param_layout.h"

namespace trainer::optim {

// A run [offset, offset+numel) of the flat buffer with one weight-decay setting.
struct DecayRun {
  int64_t offset = 0, numel = 0;
  bool decay = false;
};

// Splits [begin, end) of the layout's flat buffer into runs of equal decay setting.
std::vector<DecayRun> decay_runs(const model::ParamLayout& layout, int64_t begin, int64_t end);

class AdamW {
 public:
  // Owns the moments for the elements [begin, end) of the flat buffer (a ZeRO shard, or all).
  AdamW(Backend& be, const model::ParamLayout& layout, int64_t begin, int64_t end);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // params/grads point at element `begin` of their flat buffers (numel end-begin). params_bf16
  // (optional, bf16, same numel): the bf16 weight copy, rewritten from the updated params in the
  // same pass (Backend::adamw_step). grad_scale: the gradients are read times this (clipping).
  void step(Tensor params, const Tensor& grads, float lr, float beta1, float beta2, float eps,
            float weight_decay, Tensor params_bf16 = Tensor(), float grad_scale = 1.0f);

  int64_t step_count() const { return t_; }
  void set_step_count(int64_t t) { t_ = t; }
  Tensor m() const { return m_; }
  Tensor v() const { return v_; }
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  size_t bytes() const { return m_.nbytes() + v_.nbytes(); }

 private:
  Backend& be_;
  int64_t begin_, end_;
  std::vector<DecayRun> runs_;
  Tensor m_, v_;
  int64_t t_ = 0;
};

}  // namespace trainer::optim
