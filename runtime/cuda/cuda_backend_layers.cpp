// CudaBackend: the layer ops. Each checks its arguments like the cpu backend, then launches.
#include <spdlog/spdlog.h>

#include <type_traits>

#include "kernels/kernels.h"
#include "runtime/core/op_shapes.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_tensor_checks.h"
#ifdef TRAINER_HAVE_CUDNN
#include "runtime/cuda/cudnn_attention.h"
#endif

namespace trainer::cuda {

void CudaBackend::matmul_forward(Tensor out, const Tensor& inp, const Tensor& weight,
                                 const Tensor& bias, const Tensor& residual) {
  const char* op = "matmul_forward";
  const LinearDims d = matmul_forward_dims(out, inp, weight, bias, residual);
  LtGemmArgs g;
  g.bf16_inputs = matmul_operand_dtype(inp, weight, op) == DType::bf16;
  check_linear_activation_dtype(out, g.bf16_inputs ? DType::bf16 : DType::f32, op, "out");
  g.bf16_output = out.dtype == DType::bf16;
  g.trans_b = true, g.m = d.N, g.n = d.OC, g.k = d.C;
  g.a = need_operand(inp, op, "inp"), g.b = need_operand(weight, op, "weight");
  g.c = need_operand_out(out, op, "out"), g.bias = opt_f32(bias, op, "bias");
  if (!residual.empty()) g.c_in = need_f32(residual, op, "residual"), g.beta = 1;
  run_gemm(g);
}

void CudaBackend::matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout,
                                  const Tensor& inp, const Tensor& weight) {
  const char* op = "matmul_backward";
  const LinearDims d = matmul_backward_dims(dinp, dweight, dbias, dout, inp, weight);
  const bool bf16 = matmul_operand_dtype(inp, weight, op) == DType::bf16;
  check_linear_activation_dtype(dout, bf16 ? DType::bf16 : DType::f32, op, "dout");
  if (dinp.empty() && dweight.empty() && dbias.empty()) return;
  const void* dy_gemm = gemm_dout(dout, bf16, d.N * d.OC, op);
  if (!dinp.empty()) {  // dinp[N,C] = dout[N,OC] weight[OC,C] (overwritten: backend.h)
    LtGemmArgs g;
    g.bf16_inputs = bf16;
    g.m = d.N, g.n = d.C, g.k = d.OC, g.beta = 0;
    g.a = dy_gemm, g.b = need_operand(weight, op, "weight"), g.c = need_f32(dinp, op, "dinp");
    run_gemm(g);
  }
  linear_param_grads(dweight, dbias, dy_gemm, inp, bf16, d, op);
}

const void* CudaBackend::gemm_dout(const Tensor& dout, bool bf16, int64_t n, const char* op) {
  if (dout.dtype == DType::bf16 || !bf16) return need_operand(dout, op, "dout");
  // fp32 dout, bf16 operands: both GEMMs read it rounded to bf16 (backend.h)
  const size_t bytes = static_cast<size_t>(n) * dtype_size(DType::bf16);
  auto* dy16 = static_cast<uint16_t*>(scratch(dout_scratch_, dout_scratch_bytes_, bytes));
  kernels::cast_f32_to_bf16(dy16, need_f32(dout, op, "dout"), n, stream_);
  return dy16;
}

void CudaBackend::linear_param_grads(Tensor dweight, Tensor dbias, const void* dy_gemm,
                                     const Tensor& inp, bool bf16, const LinearDims& d,
                                     const char* op) {
  float* db = opt_f32(dbias, op, "dbias");
  if (!dweight.empty()) {  // dweight[OC,C] += dout^T inp
    LtGemmArgs g;
    g.bf16_inputs = bf16;
    g.trans_a = true, g.m = d.OC, g.n = d.C, g.k = d.N, g.beta = 1;
    g.a = dy_gemm, g.b = need_operand(inp, op, "inp"), g.c = need_f32(dweight, op, "dweight");
    if (db && bias_grad_epilogue_) {  // dbias from the same GEMM (BGRADB overwrites: added)
      LtGemmArgs fused = g;
      fused.bias_grad = static_cast<float*>(scratch(bias_grad_scratch_, bias_grad_scratch_bytes_,
                                                    static_cast<size_t>(d.OC) * sizeof(float)));
      if (run_fused(fused)) {
        kernels::axpy(db, fused.bias_grad, 1.0f, d.OC, stream_);
        return;
      }
    }
    run_gemm(g);
  }
  if (!db) return;
  // dout as the GEMMs read it (rounded to bf16 under bf16 operands: backend.h)
  float* partials = column_scratch(d.N, d.OC);
  if (bf16)
    kernels::bias_backward(db, static_cast<const uint16_t*>(dy_gemm), partials, d.N, d.OC, stream_);
  else
    kernels::bias_backward(db, static_cast<const float*>(dy_gemm), partials, d.N, d.OC, stream_);
}

void CudaBackend::matmul_gelu_forward(Tensor out, Tensor pre, const Tensor& inp,
                                      const Tensor& weight, const Tensor& bias) {
  const char* op = "matmul_gelu_forward";
  const LinearDims d = matmul_gelu_forward_dims(out, pre, inp, weight, bias);
  const bool bf16 = gelu_operand_dtype(inp, weight, out, "out", pre, "pre", op) == DType::bf16;
  LtGemmArgs g;
  g.bf16_inputs = bf16;
  g.trans_b = true, g.m = d.N, g.n = d.OC, g.k = d.C;
  g.a = need_operand(inp, op, "inp"), g.b = need_operand(weight, op, "weight");
  g.bias = opt_f32(bias, op, "bias");
  void* y = need_operand_out(out, op, "out");
  void* p = need_operand_out(pre, op, "pre");
  if (gelu_epilogue_) {
    LtGemmArgs fused = g;
    fused.c = y, fused.aux = p, fused.bf16_output = bf16;
    fused.epilogue = LtGemmArgs::Epilogue::gelu_aux;
    if (run_fused(fused)) return;
  }
  const int64_t n = d.N * d.OC;
  if (!bf16) {  // the sums land in pre (kept as they are), the GELU reads them there
    g.c = p;
    run_gemm(g);
    kernels::gelu_forward(static_cast<float*>(y), static_cast<const float*>(p), n, stream_);
    return;
  }
  auto* sum = static_cast<float*>(
      scratch(sum_scratch_, sum_scratch_bytes_, static_cast<size_t>(n) * sizeof(float)));
  g.c = sum;
  run_gemm(g);
  kernels::gelu_forward_keep_input(static_cast<uint16_t*>(y), static_cast<uint16_t*>(p), sum, n,
                                   stream_);
}

void CudaBackend::matmul_gelu_backward(Tensor dpre, Tensor dweight, Tensor dbias,
                                       const Tensor& dout, const Tensor& inp, const Tensor& weight,
                                       const Tensor& pre) {
  const char* op = "matmul_gelu_backward";
  const LinearDims d = matmul_gelu_backward_dims(dpre, dweight, dbias, dout, inp, weight, pre);
  const bool bf16 = gelu_operand_dtype(inp, weight, dpre, "dpre", pre, "pre", op) == DType::bf16;
  check_linear_activation_dtype(dout, bf16 ? DType::bf16 : DType::f32, op, "dout");
  const void* dy_gemm = gemm_dout(dout, bf16, d.N * d.OC, op);
  // dpre[N,C] = (dout[N,OC] weight[OC,C]) * gelu'(pre): written, not accumulated (beta 0)
  LtGemmArgs g;
  g.bf16_inputs = bf16;
  g.m = d.N, g.n = d.C, g.k = d.OC;
  g.a = dy_gemm, g.b = need_operand(weight, op, "weight");
  void* dp = need_operand_out(dpre, op, "dpre");
  const void* p = need_operand(pre, op, "pre");
  bool done = false;
  // cuBLASLt's DGELU epilogue approximates gelu' (1e-5 off the exact derivative on an H200):
  // far inside bf16's rounding, but not fp32's accuracy, so fp32 takes the exact kernel.
  if (gelu_epilogue_ && bf16) {
    LtGemmArgs fused = g;
    fused.c = dp, fused.aux = const_cast<void*>(p), fused.bf16_output = bf16;
    fused.epilogue = LtGemmArgs::Epilogue::dgelu;
    done = run_fused(fused);
  }
  if (!done) {
    const int64_t n = d.N * d.C;
    if (!bf16) {  // the GEMM writes dpre, the derivative scales it in place
      g.c = dp;
      run_gemm(g);
      kernels::gelu_backward_from_sum(static_cast<float*>(dp), static_cast<const float*>(p),
                                      static_cast<const float*>(dp), n, stream_);
    } else {
      auto* sum = static_cast<float*>(
          scratch(sum_scratch_, sum_scratch_bytes_, static_cast<size_t>(n) * sizeof(float)));
      g.c = sum;
      run_gemm(g);
      kernels::gelu_backward_from_sum(static_cast<uint16_t*>(dp), static_cast<const uint16_t*>(p),
                                      sum, n, stream_);
    }
  }
  linear_param_grads(dweight, dbias, dy_gemm, inp, bf16, d, op);
}

void CudaBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, const Tensor& inp,
                                    const Tensor& weight, const Tensor& bias) {
  const char* op = "layernorm_forward";
  const RowDims d = layernorm_forward_dims(out, mean, rstd, inp, weight, bias);
  const int64_t N = d.N, C = d.C;
  float* pm = opt_f32(mean, op, "mean");
  float* pr = opt_f32(rstd, op, "rstd");
  const float* px = need_f32(inp, op, "inp");
  const float* pw = need_f32(weight, op, "weight");
  const float* pb = opt_f32(bias, op, "bias");
  with_float_out(out, op, "out", [&](auto* y) {
    kernels::layernorm_forward(y, pm, pr, px, pw, pb, N, C, stream_);
  });
}

void CudaBackend::layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, const Tensor& dout,
                                     const Tensor& inp, const Tensor& weight, const Tensor& mean,
                                     const Tensor& rstd, Tensor dinp_bf16) {
  const char* op = "layernorm_backward";
  const RowDims d =
      layernorm_backward_dims(dinp, dweight, dbias, dout, inp, weight, mean, rstd, dinp_bf16);
  const int64_t N = d.N, C = d.C;
  if (!dinp_bf16.empty()) check_device(dinp_bf16, op, "dinp_bf16");
  kernels::layernorm_backward(opt_f32(dinp, op, "dinp"), static_cast<uint16_t*>(dinp_bf16.data),
                              opt_f32(dweight, op, "dweight"), opt_f32(dbias, op, "dbias"),
                              need_f32(dout, op, "dout"), need_f32(inp, op, "inp"),
                              need_f32(weight, op, "weight"), need_f32(mean, op, "mean"),
                              need_f32(rstd, op, "rstd"), column_scratch(N, C), N, C, stream_);
}

void CudaBackend::gelu_forward(Tensor out, const Tensor& inp) {
  const char* op = "gelu_forward";
  const int64_t n = elementwise_dims(op, inp, out, "out");
  const float* px = need_f32(inp, op, "inp");
  with_float_out(out, op, "out", [&](auto* y) { kernels::gelu_forward(y, px, n, stream_); });
}

void CudaBackend::gelu_backward(Tensor dinp, const Tensor& inp, const Tensor& dout) {
  const char* op = "gelu_backward";
  const int64_t n = elementwise_dims(op, inp, dinp, "dinp", dout, "dout");
  kernels::gelu_backward(need_f32(dinp, op, "dinp"), need_f32(inp, op, "inp"),
                         need_f32(dout, op, "dout"), n, stream_);
}

bool CudaBackend::uses_flash(int64_t head_size) const {
  return cuda_attention_uses_flash(attention_kernel_, head_size);
}

CudaBackend::TensorCoreAttention CudaBackend::tensor_core_attention(const Tensor& out,
                                                                    int64_t head_size) const {
  if (out.dtype != DType::bf16) return TensorCoreAttention::none;
  if ((attention_kernel_ == AttentionKernel::tensor_core ||
       attention_kernel_ == AttentionKernel::tensor_core_32 ||
       attention_kernel_ == AttentionKernel::cudnn) &&  // (the shapes cuDNN refuses)
      kernels::mma_attention_supports(head_size))
    return TensorCoreAttention::mma;
  if (attention_kernel_ == AttentionKernel::wmma && kernels::tc_attention_supports(head_size))
    return TensorCoreAttention::wmma;
  return TensorCoreAttention::none;
}

Shape CudaBackend::attention_state_shape(int64_t B, int64_t NH, int64_t T, int64_t HS) const {
  const bool flash = uses_flash(HS);
  if (!flash && attention_kernel_ != AttentionKernel::reference && !warned_no_flash_) {
    warned_no_flash_ = true;
    spdlog::warn(
        "attention: head size {} has no flash kernel (they take {}): the reference kernels run it "
        "and keep the T x T probabilities, {} bytes a layer",
        HS, flash_head_sizes_text(), B * NH * T * T * 4);
  }
  return attention_state_shape_of(flash, B, NH, T);
}

void CudaBackend::attention_forward(Tensor out, Tensor att, const Tensor& qkv, int n_head) {
  const char* op = "attention_forward";
  const AttentionDims d = attention_forward_dims(out, att, qkv, n_head, *this);
  const int64_t B = d.B, T = d.T, C = d.C;
  check_qkv_dtype(qkv, out.dtype, op);
  float* pa = need_f32(att, op, "att");
  const bool flash = uses_flash(C / n_head);
#ifdef TRAINER_HAVE_CUDNN
  const AttentionShape shape{B, T, n_head, C / n_head};
  if (cudnn_attention_ && flash && qkv.dtype == DType::bf16 &&
      cudnn_attention_->runs(shape, false)) {
    cudnn_attention_->forward(static_cast<uint16_t*>(need_operand_out(out, op, "out")), pa,
                              static_cast<const uint16_t*>(need_operand(qkv, op, "qkv")), shape);
    return;
  }
#endif
  const TensorCoreAttention tc = tensor_core_attention(out, C / n_head);
  const auto run = [&](auto* y, const auto* pq) {
    if (tc == TensorCoreAttention::mma)
      kernels::mma_attention_forward(
          y, pa, pq, B, T, C, n_head, stream_,
          attention_kernel_ == AttentionKernel::tensor_core_32 ? 32 : 16);
    else if (tc == TensorCoreAttention::wmma)
      kernels::tc_attention_forward(y, pa, pq, B, T, C, n_head, stream_);
    else if (flash)
      kernels::flash_attention_forward(y, pa, pq, B, T, C, n_head, stream_);
    else
      kernels::attention_forward(y, pa, pq, B, T, C, n_head, stream_);
  };
  if (qkv.dtype == DType::bf16)  // (and so is out)
    run(static_cast<uint16_t*>(need_operand_out(out, op, "out")),
        static_cast<const uint16_t*>(need_operand(qkv, op, "qkv")));
  else
    with_float_out(out, op, "out", [&](auto* y) { run(y, need_f32(qkv, op, "qkv")); });
}

void CudaBackend::attention_backward(Tensor dqkv, const Tensor& dout, const Tensor& qkv,
                                     const Tensor& out, const Tensor& att, int n_head) {
  const char* op = "attention_backward";
  const AttentionDims d = attention_backward_dims(dqkv, dout, qkv, out, att, n_head, *this);
  const int64_t B = d.B, T = d.T, C = d.C;
  check_qkv_dtype(qkv, out.dtype, op);
  check_dqkv_dtype(dqkv, qkv, op);
  const float* pdy = need_f32(dout, op, "dout");
  const float* pa = need_f32(att, op, "att");
  const bool flash = uses_flash(C / n_head);
#ifdef TRAINER_HAVE_CUDNN
  const AttentionShape shape{B, T, n_head, C / n_head};
  if (cudnn_attention_ && flash && qkv.dtype == DType::bf16 && dqkv.dtype == DType::bf16 &&
      cudnn_attention_->runs(shape, true)) {
    // cuDNN reads dout in bf16: rounded once into the scratch, as the mma kernels do.
    auto* dy16 = static_cast<uint16_t*>(
        scratch(attn_scratch_, attn_scratch_bytes_, static_cast<size_t>(dout.numel()) * 2));
    kernels::cast_f32_to_bf16(dy16, pdy, dout.numel(), stream_);
    cudnn_attention_->backward(static_cast<uint16_t*>(need_operand_out(dqkv, op, "dqkv")), dy16,
                               static_cast<const uint16_t*>(need_operand(qkv, op, "qkv")),
                               static_cast<const uint16_t*>(need_operand(out, op, "out")), pa,
                               shape);
    return;
  }
#endif
  const TensorCoreAttention tc = tensor_core_attention(out, C / n_head);
  // Scratch: the pre-softmax gradient [B,NH,T,T] (reference) or rowsum(dout * out) [B,NH,T], and
  // for the mma kernels bf16 copies of q and dout too.
  const size_t work_bytes =
      flash && tc == TensorCoreAttention::mma
          ? static_cast<size_t>(kernels::mma_attention_backward_scratch_floats(B, T, C, n_head)) * 4
          : att.nbytes();
  auto* work = static_cast<float*>(scratch(attn_scratch_, attn_scratch_bytes_, work_bytes));
  const auto run = [&](auto* pdq, const auto* y, const auto* pq) {
    if (!flash)
      kernels::attention_backward(pdq, pdy, pq, pa, work, B, T, C, n_head, stream_);
    else if (tc == TensorCoreAttention::mma)
      kernels::mma_attention_backward(
          pdq, work, pdy, pq, y, pa, B, T, C, n_head, stream_,
          attention_kernel_ == AttentionKernel::tensor_core_32 ? 32 : 16);
    else if (tc == TensorCoreAttention::wmma)
      kernels::tc_attention_backward(pdq, work, pdy, pq, y, pa, B, T, C, n_head, stream_);
    else
      kernels::flash_attention_backward(pdq, work, pdy, pq, y, pa, B, T, C, n_head, stream_);
  };
  if (qkv.dtype == DType::bf16)  // (and so is out; dqkv is either)
    with_float_out(dqkv, op, "dqkv", [&](auto* pdq) {
      run(pdq, static_cast<const uint16_t*>(need_operand(out, op, "out")),
          static_cast<const uint16_t*>(need_operand(qkv, op, "qkv")));
    });
  else
    with_float_in(out, op, "out", [&](const auto* y) {
      run(need_f32(dqkv, op, "dqkv"), y, need_f32(qkv, op, "qkv"));
    });
}

bool CudaBackend::context_mma(const Tensor& out, const ContextAttentionDims& d, int n_head) const {
  return tensor_core_attention(out, d.C / n_head) == TensorCoreAttention::mma &&
         kernels::mma_context_attention_supports(d.C / n_head, d.Tl);
}

Shape CudaBackend::attention_cp_state_shape(int64_t B, int64_t NH, int64_t Tl, int64_t T,
                                            int64_t HS) const {
  return uses_flash(HS) ? Shape{B, NH, Tl} : Shape{B, NH, Tl, T};
}

void CudaBackend::attention_forward_cp(Tensor out, Tensor att, const Tensor& qkv_all,
                                       ContextSplit split, int n_head) {
  const char* op = "attention_forward_cp";
  const ContextAttentionDims d = attention_forward_cp_dims(out, att, qkv_all, split, n_head, *this);
  const bool flash = uses_flash(d.C / n_head), mma = flash && context_mma(out, d, n_head);
  ++(mma ? cp_mma_calls_ : flash ? cp_flash_calls_ : cp_reference_calls_);
  float* pa = need_f32(att, op, "att");
  const auto run = [&](auto* y, const auto* pq) {
    using QkvT = std::remove_cv_t<std::remove_pointer_t<decltype(pq)>>;
    auto* seq = static_cast<QkvT*>(scratch(cp_seq_scratch_, cp_seq_scratch_bytes_,
                                           static_cast<size_t>(qkv_all.numel()) * sizeof(QkvT)));
    kernels::context_to_sequence(seq, pq, d.cp, d.B, d.Tl, 3 * d.C, stream_);
    if constexpr (std::is_same_v<decltype(y), uint16_t*>)  // (mma: a bf16 out)
      if (mma) {
        kernels::mma_context_attention_forward(y, pa, static_cast<const QkvT*>(seq),
                                               int64_t{split.rank}, d.cp, d.B, d.Tl, d.C,
                                               int64_t{n_head}, stream_);
        return;
      }
    if (flash)
      kernels::flash_context_attention_forward(y, pa, static_cast<const QkvT*>(seq),
                                               int64_t{split.rank}, d.cp, d.B, d.Tl, d.C,
                                               int64_t{n_head}, stream_);
    else
      kernels::context_attention_forward(y, pa, static_cast<const QkvT*>(seq), int64_t{split.rank},
                                         d.cp, d.B, d.Tl, d.C, int64_t{n_head}, stream_);
  };
  if (qkv_all.dtype == DType::bf16)  // (and so is out)
    run(static_cast<uint16_t*>(need_operand_out(out, op, "out")),
        static_cast<const uint16_t*>(need_operand(qkv_all, op, "qkv_all")));
  else
    with_float_out(out, op, "out", [&](auto* y) { run(y, need_f32(qkv_all, op, "qkv_all")); });
}

void CudaBackend::attention_backward_cp(Tensor dqkv_all, const Tensor& dout, const Tensor& qkv_all,
                                        const Tensor& out, const Tensor& att, ContextSplit split,
                                        int n_head) {
  const char* op = "attention_backward_cp";
  const ContextAttentionDims d =
      attention_backward_cp_dims(dqkv_all, dout, qkv_all, out, att, split, n_head, *this);
  const bool flash = uses_flash(d.C / n_head), mma = flash && context_mma(out, d, n_head);
  ++(mma ? cp_mma_calls_ : flash ? cp_flash_calls_ : cp_reference_calls_);
  // scratch: the sequence-order gradient [B,T,3C], then the pre-softmax gradient (the reference:
  // att's shape) or rowsum(dout * out) (flash: att's shape too, [B,NH,Tl]; mma: and the bf16
  // copies of q and dout)
  const size_t seq_floats = static_cast<size_t>(qkv_all.numel());
  const size_t state_floats =
      mma ? static_cast<size_t>(
                kernels::mma_attention_backward_scratch_floats(d.B, d.Tl, d.C, n_head))
          : static_cast<size_t>(att.numel());
  auto* work = static_cast<float*>(
      scratch(attn_scratch_, attn_scratch_bytes_, (seq_floats + state_floats) * 4));
  float* pdqkv = need_f32(dqkv_all, op, "dqkv_all");
  const float* pdy = need_f32(dout, op, "dout");
  const float* pa = need_f32(att, op, "att");
  const int64_t rank = split.rank, NH = n_head;
  const auto run = [&](const auto* pq) {
    using QkvT = std::remove_cv_t<std::remove_pointer_t<decltype(pq)>>;
    auto* seq = static_cast<QkvT*>(
        scratch(cp_seq_scratch_, cp_seq_scratch_bytes_, seq_floats * sizeof(QkvT)));
    kernels::context_to_sequence(seq, pq, d.cp, d.B, d.Tl, 3 * d.C, stream_);
    const QkvT* s = seq;
    if (!flash) {
      kernels::context_attention_backward(pdqkv, work, work + seq_floats, pdy, s, pa, rank, d.cp,
                                          d.B, d.Tl, d.C, NH, stream_);
      return;
    }
    const auto flash_backward = [&](const auto* y) {
      if constexpr (std::is_same_v<decltype(y), const uint16_t*>)  // (mma: a bf16 out)
        if (mma) {
          kernels::mma_context_attention_backward(work, work + seq_floats, pdy, s, y, pa, rank,
                                                  d.cp, d.B, d.Tl, d.C, NH, stream_);
          return;
        }
      kernels::flash_context_attention_backward(work, work + seq_floats, pdy, s, y, pa, rank, d.cp,
                                                d.B, d.Tl, d.C, NH, stream_);
    };
    if constexpr (std::is_same_v<QkvT, uint16_t>)  // (and so is out)
      flash_backward(static_cast<const uint16_t*>(need_operand(out, op, "out")));
    else
      with_float_in(out, op, "out", flash_backward);
    kernels::context_grad_from_sequence(pdqkv, work, rank, d.cp, d.B, d.Tl, d.C, stream_);
  };
  if (qkv_all.dtype == DType::bf16)
    run(static_cast<const uint16_t*>(need_operand(qkv_all, op, "qkv_all")));
  else
    run(need_f32(qkv_all, op, "qkv_all"));
}

void CudaBackend::embedding_forward(Tensor out, const Tensor& tokens, const Tensor& wte,
                                    const Tensor& wpe, int64_t pos_offset) {
  const char* op = "embedding_forward";
  const EmbeddingDims d = embedding_forward_dims(out, tokens, wte, wpe, pos_offset);
  const int64_t B = d.B, T = d.T, C = d.C, V = d.V;
  kernels::embedding_forward(need_f32(out, op, "out"), need_i32(tokens, op, "tokens"),
                             need_f32(wte, op, "wte"), opt_f32(wpe, op, "wpe"), pos_offset, B, T, C,
                             V, stream_);
}

void CudaBackend::embedding_backward(Tensor dwte, Tensor dwpe, const Tensor& dout,
                                     const Tensor& tokens, int64_t pos_offset) {
  const char* op = "embedding_backward";
  const EmbeddingDims d = embedding_backward_dims(dwte, dwpe, dout, tokens, pos_offset);
  const int64_t B = d.B, T = d.T, C = d.C, V = d.V;
  const size_t ints = static_cast<size_t>(kernels::embedding_backward_scratch_ints(B * T, V));
  auto* sort = static_cast<int32_t*>(scratch(emb_scratch_, emb_scratch_bytes_, ints * 4));
  kernels::embedding_backward(opt_f32(dwte, op, "dwte"), opt_f32(dwpe, op, "dwpe"),
                              need_f32(dout, op, "dout"), need_i32(tokens, op, "tokens"), sort,
                              pos_offset, B, T, C, V, stream_);
}

void CudaBackend::softmax_cross_entropy(Tensor logits, Tensor losses, const Tensor& targets,
                                        float dloss_scale, int64_t vocab) {
  const char* op = "softmax_cross_entropy";
  const CrossEntropyDims d = softmax_cross_entropy_dims(logits, losses, targets, vocab);
  float* pl = need_f32(losses, op, "losses");
  const int32_t* pt = need_i32(targets, op, "targets");
  with_float_out(logits, op, "logits", [&](auto* z) {
    kernels::softmax_cross_entropy(z, pl, pt, d.N, d.V, d.Vp, dloss_scale, stream_);
  });
}

void CudaBackend::cross_entropy_shard_stats(Tensor stats, const Tensor& logits,
                                            const Tensor& targets, int64_t vocab_start,
                                            int64_t vocab) {
  const char* op = "cross_entropy_shard_stats";
  const CrossEntropyShardDims d =
      cross_entropy_shard_stats_dims(stats, logits, targets, vocab_start, vocab);
  float* ps = need_f32(stats, op, "stats");
  const int32_t* pt = need_i32(targets, op, "targets");
  with_float_in(logits, op, "logits", [&](const auto* z) {
    kernels::cross_entropy_shard_stats(ps, z, pt, d.N, d.V, d.Vp, vocab_start, stream_);
  });
}

void CudaBackend::cross_entropy_shard_finish(Tensor logits, Tensor losses, const Tensor& all_stats,
                                             const Tensor& targets, float dloss_scale,
                                             int64_t vocab_start, int64_t vocab) {
  const char* op = "cross_entropy_shard_finish";
  const CrossEntropyShardDims d =
      cross_entropy_shard_finish_dims(logits, losses, all_stats, targets, vocab_start, vocab);
  float* pl = need_f32(losses, op, "losses");
  const float* ps = need_f32(all_stats, op, "all_stats");
  const int32_t* pt = need_i32(targets, op, "targets");
  with_float_out(logits, op, "logits", [&](auto* z) {
    kernels::cross_entropy_shard_finish(z, pl, ps, d.R, pt, d.N, d.V, d.Vp, vocab_start, vocab,
                                        dloss_scale, stream_);
  });
}

}  // namespace trainer::cuda
