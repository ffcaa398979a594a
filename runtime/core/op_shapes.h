#pragma once
// The shape contract of each Backend layer op (backend.h), checked once for every backend: each
// function checks that its op's arguments fit together and returns the dims the kernels need.
// Dtype and device checks stay with the backend (they differ by device).
#include <cstdint>

#include "runtime/core/attention_state.h"
#include "runtime/core/tensor.h"

namespace trainer {
class Backend;
}

namespace trainer {

struct LinearDims {
  int64_t N, C, OC;  // rows, input features, output features
};
struct RowDims {
  int64_t N, C;  // rows, row width
};
struct CrossEntropyDims {
  int64_t N, V, Vp;  // rows, classes, row length (V plus vocabulary padding)
};
struct AttentionDims {
  int64_t B, T, C;  // C = n_head * head_dim
};
struct EmbeddingDims {
  int64_t B, T, C, V;  // V = 0 when the vocabulary table is absent (no dwte)
};

// (residual: absent, or fp32 [N,OC] with an fp32 out: Backend::matmul_forward)
LinearDims matmul_forward_dims(const Tensor& out, const Tensor& inp, const Tensor& weight,
                               const Tensor& bias, const Tensor& residual = Tensor());
LinearDims matmul_backward_dims(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                                const Tensor& dout, const Tensor& inp, const Tensor& weight);
// The fused GELU ops: the linear's dims; pre (and dpre, required) hold its output's elements.
LinearDims matmul_gelu_forward_dims(const Tensor& out, const Tensor& pre, const Tensor& inp,
                                    const Tensor& weight, const Tensor& bias);
LinearDims matmul_gelu_backward_dims(const Tensor& dpre, const Tensor& dweight, const Tensor& dbias,
                                     const Tensor& dout, const Tensor& inp, const Tensor& weight,
                                     const Tensor& pre);
RowDims layernorm_forward_dims(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                               const Tensor& inp, const Tensor& weight, const Tensor& bias);
// dinp_bf16 (optional): bf16, dinp's numel, only with dinp.
RowDims layernorm_backward_dims(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                                const Tensor& dout, const Tensor& inp, const Tensor& weight,
                                const Tensor& mean, const Tensor& rstd,
                                const Tensor& dinp_bf16 = Tensor());
// Elements of a GELU; `b` may be empty (forward has only out and inp).
int64_t elementwise_dims(const char* op, const Tensor& inp, const Tensor& a, const char* a_name,
                         const Tensor& b = Tensor(), const char* b_name = "");
// `state` is the backend's attention_state_shape(); att must have its element count.
AttentionDims attention_forward_dims(const Tensor& out, const Tensor& att, const Tensor& qkv,
                                     int n_head, const Backend& be);
AttentionDims attention_backward_dims(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                      const Tensor& out, const Tensor& att, int n_head,
                                      const Backend& be);
// Context-parallel attention (Backend::attention_forward_cp): qkv_all [cp,B,Tl,3C] with cp =
// split.size, out [B,Tl,C], Tl even; att of the backend's attention_cp_state_shape. T is cp * Tl.
struct ContextAttentionDims {
  int64_t cp, B, Tl, C;
};
ContextAttentionDims attention_forward_cp_dims(const Tensor& out, const Tensor& att,
                                               const Tensor& qkv_all, ContextSplit split,
                                               int n_head, const Backend& be);
// dqkv_all: fp32, qkv_all's shape.
ContextAttentionDims attention_backward_cp_dims(const Tensor& dqkv_all, const Tensor& dout,
                                                const Tensor& qkv_all, const Tensor& out,
                                                const Tensor& att, ContextSplit split, int n_head,
                                                const Backend& be);
EmbeddingDims embedding_forward_dims(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                     const Tensor& wpe, int64_t pos_offset);
EmbeddingDims embedding_backward_dims(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                      const Tensor& tokens, int64_t pos_offset);
CrossEntropyDims softmax_cross_entropy_dims(const Tensor& logits, const Tensor& losses,
                                            const Tensor& targets, int64_t vocab);
// The vocabulary-parallel halves (Backend::cross_entropy_shard_*): N rows of Vp = this shard's
// columns, V = the classes among them (possibly none), R shards in all_stats (1 for the stats).
struct CrossEntropyShardDims {
  int64_t N, V, Vp, R;
};
CrossEntropyShardDims cross_entropy_shard_stats_dims(const Tensor& stats, const Tensor& logits,
                                                     const Tensor& targets, int64_t vocab_start,
                                                     int64_t vocab);
CrossEntropyShardDims cross_entropy_shard_finish_dims(const Tensor& logits, const Tensor& losses,
                                                      const Tensor& all_stats,
                                                      const Tensor& targets, int64_t vocab_start,
                                                      int64_t vocab);
// The mixture of experts' row moves (Backend::moe_*): S slots and N tokens of C values, K
// choices per token (0 for the gather). The cpu backend checks the indices against S and N;
// the cuda one takes them as the host router wrote them.
struct MoeRowDims {
  int64_t S, N, C, K;
};
MoeRowDims moe_gather_rows_dims(const Tensor& out, const Tensor& inp, const Tensor& token_of_slot,
                                const Tensor& scale);
MoeRowDims moe_combine_rows_dims(const Tensor& out, const Tensor& inp, const Tensor& slot,
                                 const Tensor& weight);
MoeRowDims moe_gate_grad_dims(const Tensor& dweight, const Tensor& dout, const Tensor& inp,
                              const Tensor& slot);

}  // namespace trainer
