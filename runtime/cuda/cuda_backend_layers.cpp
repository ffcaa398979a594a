// CudaBackend: the layer ops. Each checks its arguments like the cpu backend, then launches.
#include "kernels/kernels.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_tensor_checks.h"

namespace trainer::cuda {

void CudaBackend::matmul_forward(Tensor out, const Tensor& inp, const Tensor& weight,
                                 const Tensor& bias) {
  const char* op = "matmul_forward";
  int64_t OC, C;
  weight_dims(weight, OC, C, op);
  const int64_t N = rows_of(inp, C, op, "inp");
  check_numel(out, N * OC, op, "out");
  if (!bias.empty()) check_numel(bias, OC, op, "bias");
  LtGemmArgs g;
  g.trans_b = true, g.m = N, g.n = OC, g.k = C;
  g.a = need_f32(inp, op, "inp"), g.b = need_f32(weight, op, "weight");
  g.c = need_f32(out, op, "out"), g.bias = opt_f32(bias, op, "bias");
  run_gemm(g);
}

void CudaBackend::matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout,
                                  const Tensor& inp, const Tensor& weight) {
  const char* op = "matmul_backward";
  int64_t OC, C;
  weight_dims(weight, OC, C, op);
  const int64_t N = rows_of(inp, C, op, "inp");
  check_numel(dout, N * OC, op, "dout");
  const float* dy = need_f32(dout, op, "dout");
  if (!dinp.empty()) {  // dinp[N,C] += dout[N,OC] weight[OC,C]
    check_numel(dinp, N * C, op, "dinp");
    LtGemmArgs g;
    g.m = N, g.n = C, g.k = OC, g.beta = 1;
    g.a = dy, g.b = need_f32(weight, op, "weight"), g.c = need_f32(dinp, op, "dinp");
    run_gemm(g);
  }
  if (!dweight.empty()) {  // dweight[OC,C] += dout^T inp
    check_numel(dweight, OC * C, op, "dweight");
    LtGemmArgs g;
    g.trans_a = true, g.m = OC, g.n = C, g.k = N, g.beta = 1;
    g.a = dy, g.b = need_f32(inp, op, "inp"), g.c = need_f32(dweight, op, "dweight");
    run_gemm(g);
  }
  if (!dbias.empty()) {
    check_numel(dbias, OC, op, "dbias");
    kernels::bias_backward(need_f32(dbias, op, "dbias"), dy, N, OC, stream_);
  }
}

void CudaBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, const Tensor& inp,
                                    const Tensor& weight, const Tensor& bias) {
  const char* op = "layernorm_forward";
  const int64_t C = last_dim(inp), N = rows_of(inp, C, op, "inp");
  check_numel(out, N * C, op, "out");
  check_numel(weight, C, op, "weight");
  if (!bias.empty()) check_numel(bias, C, op, "bias");
  if (!mean.empty()) check_numel(mean, N, op, "mean");
  if (!rstd.empty()) check_numel(rstd, N, op, "rstd");
  kernels::layernorm_forward(need_f32(out, op, "out"), opt_f32(mean, op, "mean"),
                             opt_f32(rstd, op, "rstd"), need_f32(inp, op, "inp"),
                             need_f32(weight, op, "weight"), opt_f32(bias, op, "bias"), N, C,
                             stream_);
}

void CudaBackend::layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout,
                                     const Tensor& inp, const Tensor& weight, const Tensor& mean,
                                     const Tensor& rstd) {
  const char* op = "layernorm_backward";
  const int64_t C = last_dim(inp), N = rows_of(inp, C, op, "inp");
  check_numel(dout, N * C, op, "dout");
  check_numel(weight, C, op, "weight");
  check_numel(mean, N, op, "mean");
  check_numel(rstd, N, op, "rstd");
  if (!dinp.empty()) check_numel(dinp, N * C, op, "dinp");
  if (!dweight.empty()) check_numel(dweight, C, op, "dweight");
  if (!dbias.empty()) check_numel(dbias, C, op, "dbias");
  kernels::layernorm_backward(
      opt_f32(dinp, op, "dinp"), opt_f32(dweight, op, "dweight"), opt_f32(dbias, op, "dbias"),
      need_f32(dout, op, "dout"), need_f32(inp, op, "inp"), need_f32(weight, op, "weight"),
      need_f32(mean, op, "mean"), need_f32(rstd, op, "rstd"), N, C, stream_);
}

void CudaBackend::gelu_forward(Tensor out, const Tensor& inp) {
  check_numel(out, inp.numel(), "gelu_forward", "out");
  kernels::gelu_forward(need_f32(out, "gelu_forward", "out"), need_f32(inp, "gelu_forward", "inp"),
                        inp.numel(), stream_);
}

void CudaBackend::gelu_backward(Tensor dinp, const Tensor& inp, const Tensor& dout) {
  const char* op = "gelu_backward";
  check_numel(dinp, inp.numel(), op, "dinp");
  check_numel(dout, inp.numel(), op, "dout");
  kernels::gelu_backward(need_f32(dinp, op, "dinp"), need_f32(inp, op, "inp"),
                         need_f32(dout, op, "dout"), inp.numel(), stream_);
}

void CudaBackend::attention_forward(Tensor out, Tensor att, const Tensor& qkv, int n_head) {
  const char* op = "attention_forward";
  int64_t B, T, C;
  attention_dims(qkv, n_head, B, T, C, op);
  check_numel(out, B * T * C, op, "out");
  check_numel(att, B * n_head * T * T, op, "att");
  kernels::attention_forward(need_f32(out, op, "out"), need_f32(att, op, "att"),
                             need_f32(qkv, op, "qkv"), B, T, C, n_head, stream_);
}

void CudaBackend::attention_backward(Tensor dqkv, const Tensor& dout, const Tensor& qkv,
                                     const Tensor& att, int n_head) {
  const char* op = "attention_backward";
  int64_t B, T, C;
  attention_dims(qkv, n_head, B, T, C, op);
  check_numel(dqkv, B * T * 3 * C, op, "dqkv");
  check_numel(dout, B * T * C, op, "dout");
  check_numel(att, B * n_head * T * T, op, "att");
  auto* dpre = static_cast<float*>(scratch(attn_scratch_, attn_scratch_bytes_, att.nbytes()));
  kernels::attention_backward(need_f32(dqkv, op, "dqkv"), need_f32(dout, op, "dout"),
                              need_f32(qkv, op, "qkv"), need_f32(att, op, "att"), dpre, B, T, C,
                              n_head, stream_);
}

void CudaBackend::embedding_forward(Tensor out, const Tensor& tokens, const Tensor& wte,
                                    const Tensor& wpe, int64_t pos_offset) {
  const char* op = "embedding_forward";
  int64_t B, T, V, C;
  batch_and_seq(tokens, out, B, T, op);
  weight_dims(wte, V, C, op);
  check_numel(out, B * T * C, op, "out");
  if (!wpe.empty()) check_positions(wpe, pos_offset, T, C, op);
  kernels::embedding_forward(need_f32(out, op, "out"), need_i32(tokens, op, "tokens"),
                             need_f32(wte, op, "wte"), opt_f32(wpe, op, "wpe"), pos_offset, B, T, C,
                             V, stream_);
}

void CudaBackend::embedding_backward(Tensor dwte, Tensor dwpe, const Tensor& dout,
                                     const Tensor& tokens, int64_t pos_offset) {
  const char* op = "embedding_backward";
  int64_t B, T;
  batch_and_seq(tokens, dout, B, T, op);
  const int64_t C = last_dim(dout);
  check_numel(dout, B * T * C, op, "dout");
  int64_t V = 0;
  if (!dwte.empty()) {
    TRAINER_CHECK(dwte.shape.rank == 2 && dwte.shape[1] == C,
                  op << ": dwte " << dwte.shape.str() << " must be [V, " << C << "]");
    V = dwte.shape[0];
  }
  if (!dwpe.empty()) check_positions(dwpe, pos_offset, T, C, op);
  const size_t ints = static_cast<size_t>(kernels::embedding_backward_scratch_ints(B * T, V));
  auto* sort = static_cast<int32_t*>(scratch(emb_scratch_, emb_scratch_bytes_, ints * 4));
  kernels::embedding_backward(opt_f32(dwte, op, "dwte"), opt_f32(dwpe, op, "dwpe"),
                              need_f32(dout, op, "dout"), need_i32(tokens, op, "tokens"), sort,
                              pos_offset, B, T, C, V, stream_);
}

void CudaBackend::softmax_cross_entropy(Tensor logits, Tensor losses, const Tensor& targets,
                                        float dloss_scale) {
  const char* op = "softmax_cross_entropy";
  const int64_t V = last_dim(logits), N = rows_of(logits, V, op, "logits");
  check_numel(losses, N, op, "losses");
  check_numel(targets, N, op, "targets");
  kernels::softmax_cross_entropy(need_f32(logits, op, "logits"), need_f32(losses, op, "losses"),
                                 need_i32(targets, op, "targets"), N, V, dloss_scale, stream_);
}

}  // namespace trainer::cuda
