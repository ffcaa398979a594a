#include "runtime/model/gpt_shape.h"

namespace trainer::model {

GptDims GptDims::from_config(const config::ModelConfig& m) {
  return GptDims{m.vocab_size,
                 m.seq_len,
                 m.n_layer,
                 m.d_model,
                 m.n_head,
                 m.ffn_mult,
                 m.make_vocab_size_divisible_by};
}

}  // namespace trainer::model
