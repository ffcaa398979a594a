#pragma once
// Small helpers of the model's forward and backward files (gpt.cpp, gpt_moe.cpp).
#include "runtime/core/tensor.h"

namespace trainer::model {

// [.., C] -> [N, C]: the backend's row-wise ops take 2-D views.
inline Tensor rows(const Tensor& t) {
  const int64_t last = t.shape[t.shape.rank - 1];
  return t.view({t.numel() / last, last});
}

inline Tensor flat(const Tensor& t) {
  return t.view({t.numel()});
}

// Math FLOPs (2 per multiply-add) of out = inp W^T, for the profile; backward is twice this.
inline double matmul_flops(const Tensor& out, const Tensor& inp) {
  return 2.0 * static_cast<double>(out.numel()) *
         static_cast<double>(inp.shape[inp.shape.rank - 1]);
}

}  // namespace trainer::model
