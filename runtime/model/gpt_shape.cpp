#include "runtime/model/gpt_shape.h"

#include <algorithm>
#include <cmath>

namespace trainer::model {

GptDims GptDims::from_config(const config::ModelConfig& m) {
  return GptDims{m.vocab_size,
                 m.seq_len,
                 m.n_layer,
                 m.d_model,
                 m.n_head,
                 m.ffn_mult,
                 m.make_vocab_size_divisible_by,
                 m.moe.num_experts,
                 m.moe.top_k,
                 m.moe.capacity_factor,
                 m.moe.aux_loss_coef};
}

int GptDims::expert_capacity(int T) const {
  if (num_experts == 0) return 0;
  if (std::isinf(capacity_factor)) return T;  // dropless: a token picks an expert at most once
  // (the small epsilon keeps an exact product such as 1.25 * 8 * 2 / 4 = 5 from rounding up)
  const double slots = capacity_factor * T * top_k / num_experts;
  return std::clamp(static_cast<int>(std::ceil(slots - 1e-9)), 1, T);
}

}  // namespace trainer::model
