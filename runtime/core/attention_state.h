#pragma once
// What attention keeps per layer for its backward (Backend::attention_state_shape), one rule for
// the backends and for `trainer plan`: the FlashAttention-style kernels keep each row's
// log-sum-exp [B,NH,T]; the reference (the cpu backend, the cuda reference kernels, and head
// sizes the flash kernels are not compiled for) keeps the probabilities [B,NH,T,T].
#include <cstdint>

#include "runtime/core/tensor.h"

namespace trainer {

// The head sizes kernels/flash_attention.cu is compiled for (its with_head_size<16, 32, 64>).
inline bool flash_attention_head_size(int64_t head_size) {
  return head_size == 16 || head_size == 32 || head_size == 64;
}

inline Shape attention_state_shape_of(bool flash, int64_t B, int64_t NH, int64_t T) {
  return flash ? Shape{B, NH, T} : Shape{B, NH, T, T};
}

}  // namespace trainer
